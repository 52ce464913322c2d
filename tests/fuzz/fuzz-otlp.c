/* The OTLP/protobuf encoder (spans go to a collector): sbx_trace_otlp_encode on spans made from
 * the input (names, status messages, times and an attributes object parsed from it). The
 * output is walked as the OTLP messages it must be: every field's wire type is valid, every
 * length lies within its parent, and every string field is valid UTF-8. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "sbx/buf.h"
#include "sbx/json.h"
#include "sbx/path.h"
#include "sbx/trace.h"

/* A varint at *p (below end); 0 when it runs off the end or past 10 bytes. */
static int varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; shift < 70 && *p < end; shift += 7) {
        uint8_t b = *(*p)++;
        *v |= (uint64_t)(b & 0x7f) << (shift < 64 ? shift : 63);
        if (!(b & 0x80))
            return 1;
    }
    return 0;
}

/* The messages of an ExportTraceServiceRequest (OTLP trace.proto, common.proto,
 * resource.proto) and what each of their length-delimited fields holds. */
enum msg {
    REQUEST,
    RESOURCE_SPANS,
    RESOURCE,
    SCOPE_SPANS,
    SCOPE,
    SPAN,
    STATUS,
    KEY_VALUE,
    ANY_VALUE,
    ARRAY_VALUE,
    KV_LIST,
    EVENT,
    LINK,
    NMSG
};
#define STRING (-1)
#define BYTES  (-2)

static int holds(enum msg m, uint64_t field)
{
    switch (m) {
    case REQUEST:
        return field == 1 ? RESOURCE_SPANS : BYTES;
    case RESOURCE_SPANS:
        return field == 1 ? RESOURCE : field == 2 ? SCOPE_SPANS : STRING;
    case RESOURCE:
        return field == 1 ? KEY_VALUE : BYTES;
    case SCOPE_SPANS:
        return field == 1 ? SCOPE : field == 2 ? SPAN : STRING;
    case SCOPE:
        return field == 3 ? KEY_VALUE : STRING;
    case SPAN:
        return field == 9                 ? KEY_VALUE
               : field == 11              ? EVENT
               : field == 13              ? LINK
               : field == 15              ? STATUS
               : field == 3 || field == 5 ? STRING
                                          : BYTES;
    case STATUS:
        return STRING;
    case KEY_VALUE:
        return field == 2 ? ANY_VALUE : STRING;
    case ANY_VALUE:
        return field == 5 ? ARRAY_VALUE : field == 6 ? KV_LIST : field == 1 ? STRING : BYTES;
    case ARRAY_VALUE:
        return ANY_VALUE;
    case KV_LIST:
        return KEY_VALUE;
    case EVENT:
        return field == 3 ? KEY_VALUE : STRING;
    case LINK:
        return field == 4 ? KEY_VALUE : field == 3 ? STRING : BYTES;
    case NMSG:
        break;
    }
    return BYTES;
}

static void walk(const uint8_t *p, const uint8_t *end, enum msg m, int depth)
{
    FUZZ_ASSERT(depth < 32);
    while (p < end) {
        uint64_t key, v;
        FUZZ_ASSERT(varint(&p, end, &key));
        uint64_t field = key >> 3;
        FUZZ_ASSERT(field > 0);
        switch (key & 7) {
        case 0:
            FUZZ_ASSERT(varint(&p, end, &v));
            break;
        case 1:
            FUZZ_ASSERT(end - p >= 8);
            p += 8;
            break;
        case 5:
            FUZZ_ASSERT(end - p >= 4);
            p += 4;
            break;
        case 2: {
            FUZZ_ASSERT(varint(&p, end, &v));
            FUZZ_ASSERT(v <= (uint64_t)(end - p));
            int h = holds(m, field);
            if (h >= 0)
                walk(p, p + v, (enum msg)h, depth + 1);
            else if (h == STRING)
                FUZZ_ASSERT(sbx_utf8_valid((const char *)p, (size_t)v));
            p += v;
            break;
        }
        default:
            FUZZ_ASSERT(!"bad wire type");
        }
    }
}

/* Pieces of the input, each at most 200 bytes, cut at 0xff bytes. */
static char *piece(const uint8_t **p, const uint8_t *end)
{
    const uint8_t *s = *p;
    while (*p < end && **p != 0xff && *p - s < 200)
        (*p)++;
    char *out = sbx_xstrndup((const char *)s, (size_t)(*p - s));
    if (*p < end)
        (*p)++;
    /* Names and status messages reach the encoder as UTF-8 (constants, and clean_text). */
    if (!sbx_utf8_valid(out, strlen(out)))
        for (char *c = out; *c; c++)
            if ((unsigned char)*c >= 0x80)
                *c = '?';
    return out;
}

static int64_t number(const uint8_t **p, const uint8_t *end)
{
    int64_t v = 0;
    for (int i = 0; i < 8 && *p < end; i++)
        v = (int64_t)((uint64_t)v << 8 | *(*p)++);
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *p = data, *end = data + size;
    struct sbx_span_data spans[3], *ptrs[3];
    size_t n = 0;
    memset(spans, 0, sizeof(spans));
    while (n < 3 && p < end) {
        struct sbx_span_data *s = &spans[n];
        for (size_t i = 0; i < sizeof(s->trace_id) && p < end; i++)
            s->trace_id[i] = *p++;
        for (size_t i = 0; i < sizeof(s->span_id) && p < end; i++)
            s->span_id[i] = *p++;
        if (p < end && (*p++ & 1))
            memcpy(s->parent_id, spans[0].span_id, sizeof(s->parent_id));
        s->kind = (enum sbx_span_kind)(p < end ? *p++ % 5 : 0);
        s->status = (enum sbx_span_status)(p < end ? *p++ % 3 : 0);
        s->start_ns = number(&p, end);
        s->end_ns = number(&p, end);
        s->name = piece(&p, end);
        s->status_message = piece(&p, end);
        char *attrs = piece(&p, end);
        struct sbx_json_limits lim = {.max_bytes = 4096, .max_depth = 4};
        json_t *a = NULL;
        if (sbx_json_parse(attrs, strlen(attrs), &lim, &a, NULL) < 0 || !json_is_object(a)) {
            json_decref(a);
            a = json_object();
        }
        free(attrs);
        s->attrs = a;
        ptrs[n] = s;
        n++;
    }
    struct sbx_buf out;
    sbx_buf_init(&out, 1 << 20);
    struct sbx_error err = SBX_ERROR_INIT;
    if (sbx_trace_otlp_encode((const struct sbx_span_data *const *)ptrs, n, "0.0.0-fuzz", &out,
                              &err) == 0)
        walk((const uint8_t *)out.data, (const uint8_t *)out.data + out.len, REQUEST, 0);
    else
        FUZZ_ASSERT(err.msg[0] != '\0');
    sbx_buf_release(&out);
    for (size_t i = 0; i < n; i++) {
        free(spans[i].name);
        free(spans[i].status_message);
        json_decref(spans[i].attrs);
    }
    return 0;
}
