/* OTLP/protobuf encoding of spans: an ExportTraceServiceRequest written field by field. The
 * field numbers are those of opentelemetry-proto (collector/trace/v1/trace_service.proto,
 * trace/v1/trace.proto, common/v1/common.proto, resource/v1/resource.proto); the tests decode
 * the output with protoc and those files. */
#include <stdlib.h>
#include <string.h>

#include "sbx/buf.h"
#include "sbx/trace.h"

enum { WIRE_VARINT = 0, WIRE_FIXED64 = 1, WIRE_LEN = 2, WIRE_FIXED32 = 5 };

static void put(struct sbx_buf *b, const void *p, size_t n)
{
    if (sbx_buf_add(b, p, n, NULL) < 0)
        SBX_BUG("unbounded buffer refused data");
}

static void varint(struct sbx_buf *b, uint64_t v)
{
    uint8_t tmp[10];
    size_t n = 0;
    do {
        tmp[n] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v)
            tmp[n] |= 0x80;
        n++;
    } while (v);
    put(b, tmp, n);
}

static void tag(struct sbx_buf *b, unsigned field, unsigned wire)
{
    varint(b, (uint64_t)field << 3 | wire);
}

static void field_bytes(struct sbx_buf *b, unsigned field, const void *p, size_t n)
{
    tag(b, field, WIRE_LEN);
    varint(b, n);
    put(b, p, n);
}

static void field_str(struct sbx_buf *b, unsigned field, const char *s)
{
    field_bytes(b, field, s, strlen(s));
}

static void field_varint(struct sbx_buf *b, unsigned field, uint64_t v)
{
    tag(b, field, WIRE_VARINT);
    varint(b, v);
}

static void field_fixed64(struct sbx_buf *b, unsigned field, uint64_t v)
{
    uint8_t le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (uint8_t)(v >> (8 * i));
    tag(b, field, WIRE_FIXED64);
    put(b, le, 8);
}

/* A nested message: its encoding (sub) appended as a length-delimited field; sub is reset. */
static void field_msg(struct sbx_buf *b, unsigned field, struct sbx_buf *sub)
{
    field_bytes(b, field, sub->data, sub->len);
    sbx_buf_reset(sub);
}

/* AnyValue {string_value = 1; bool_value = 2; int_value = 3; double_value = 4; ArrayValue
 * array_value = 5} with ArrayValue {repeated AnyValue values = 1}. */
static void any_value(struct sbx_buf *any, const json_t *v)
{
    if (json_is_string(v)) {
        field_bytes(any, 1, json_string_value(v), json_string_length(v));
    } else if (json_is_boolean(v)) {
        field_varint(any, 2, json_is_true(v));
    } else if (json_is_integer(v)) {
        field_varint(any, 3, (uint64_t)json_integer_value(v));
    } else if (json_is_real(v)) {
        double d = json_real_value(v);
        uint64_t bits;
        memcpy(&bits, &d, sizeof(bits));
        field_fixed64(any, 4, bits);
    } else if (json_is_array(v)) {
        struct sbx_buf arr, elem;
        size_t i;
        json_t *e;
        sbx_buf_init(&arr, SBX_BUF_NOLIMIT);
        sbx_buf_init(&elem, SBX_BUF_NOLIMIT);
        json_array_foreach((json_t *)v, i, e)
        {
            any_value(&elem, e);
            field_msg(&arr, 1, &elem);
        }
        field_msg(any, 5, &arr);
        sbx_buf_release(&arr);
        sbx_buf_release(&elem);
    }
}

/* KeyValue {key = 1; AnyValue value = 2}. */
static void key_value(struct sbx_buf *b, unsigned field, const char *key, const json_t *v)
{
    struct sbx_buf kv, any;
    sbx_buf_init(&kv, SBX_BUF_NOLIMIT);
    sbx_buf_init(&any, SBX_BUF_NOLIMIT);
    field_str(&kv, 1, key);
    any_value(&any, v);
    field_msg(&kv, 2, &any);
    field_msg(b, field, &kv);
    sbx_buf_release(&kv);
    sbx_buf_release(&any);
}

static void span(struct sbx_buf *b, const struct sbx_span_data *d)
{
    static const uint8_t zero[SBX_SPAN_ID_LEN];
    struct sbx_buf st;
    sbx_buf_init(&st, SBX_BUF_NOLIMIT);
    field_bytes(b, 1, d->trace_id, SBX_TRACE_ID_LEN);
    field_bytes(b, 2, d->span_id, SBX_SPAN_ID_LEN);
    if (memcmp(d->parent_id, zero, SBX_SPAN_ID_LEN) != 0)
        field_bytes(b, 4, d->parent_id, SBX_SPAN_ID_LEN);
    field_str(b, 5, d->name);
    field_varint(b, 6, (uint64_t)d->kind);
    field_fixed64(b, 7, (uint64_t)d->start_ns);
    field_fixed64(b, 8, (uint64_t)d->end_ns);
    /* Sorted keys: the same span always encodes to the same bytes. */
    const char **keys = sbx_xcalloc(json_object_size(d->attrs) + 1, sizeof(*keys));
    size_t nk = 0;
    const char *k;
    json_t *v;
    json_object_foreach(d->attrs, k, v)
    {
        keys[nk++] = k;
    }
    for (size_t i = 1; i < nk; i++)
        for (size_t j = i; j > 0 && strcmp(keys[j - 1], keys[j]) > 0; j--) {
            const char *x = keys[j];
            keys[j] = keys[j - 1];
            keys[j - 1] = x;
        }
    for (size_t i = 0; i < nk; i++)
        key_value(b, 9, keys[i], json_object_get(d->attrs, keys[i]));
    free(keys);
    /* Status {message = 2; code = 3}. */
    if (d->status_message)
        field_str(&st, 2, d->status_message);
    if (d->status != SBX_SPAN_UNSET)
        field_varint(&st, 3, (uint64_t)d->status);
    field_msg(b, 15, &st);
    sbx_buf_release(&st);
}

int sbx_trace_otlp_encode(const struct sbx_span_data *const *spans, size_t n,
                          const char *service_version, struct sbx_buf *out, struct sbx_error *err)
{
    struct sbx_buf rs, res, ss, scope, sp;
    sbx_buf_init(&rs, SBX_BUF_NOLIMIT);
    sbx_buf_init(&res, SBX_BUF_NOLIMIT);
    sbx_buf_init(&ss, SBX_BUF_NOLIMIT);
    sbx_buf_init(&scope, SBX_BUF_NOLIMIT);
    sbx_buf_init(&sp, SBX_BUF_NOLIMIT);
    json_t *ver = json_string(service_version ? service_version : "");
    json_t *name = json_string("sbx"), *lang = json_string("c");
    if (!ver)
        ver = json_string("");

    /* Resource {attributes = 1}. */
    key_value(&res, 1, "service.name", name);
    key_value(&res, 1, "service.version", ver);
    key_value(&res, 1, "telemetry.sdk.language", lang);
    key_value(&res, 1, "telemetry.sdk.name", name);
    key_value(&res, 1, "telemetry.sdk.version", ver);
    /* ResourceSpans {resource = 1; scope_spans = 2}. */
    field_msg(&rs, 1, &res);
    /* ScopeSpans {scope = 1; spans = 2} with InstrumentationScope {name = 1; version = 2}. */
    field_str(&scope, 1, "sbx");
    field_str(&scope, 2, json_string_value(ver));
    field_msg(&ss, 1, &scope);
    for (size_t i = 0; i < n; i++) {
        span(&sp, spans[i]);
        field_msg(&ss, 2, &sp);
    }
    field_msg(&rs, 2, &ss);
    /* ExportTraceServiceRequest {resource_spans = 1}. */
    field_msg(&res, 1, &rs);
    int rc = sbx_buf_add(out, res.data, res.len, err);
    sbx_buf_release(&rs);
    sbx_buf_release(&res);
    sbx_buf_release(&ss);
    sbx_buf_release(&scope);
    sbx_buf_release(&sp);
    json_decref(ver);
    json_decref(name);
    json_decref(lang);
    return rc;
}
