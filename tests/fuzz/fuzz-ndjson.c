/* Newline-delimited JSON: fed whole and in pieces of 1-16 bytes, the same values come out with
 * the same line numbers and the stream ends the same way; line numbers only grow. */
#include <string.h>

#include "fuzz.h"
#include "sandbox/wire/ndjson.h"
#include "sbx/json.h"

#define MAX_LINE 512

struct outcome {
    uint64_t hash;
    size_t values, last_line;
    int rc;
};

static int on_value(json_t *v, size_t line, void *ud, struct sbx_error *err)
{
    struct outcome *o = ud;
    FUZZ_ASSERT(v != NULL && line > o->last_line);
    o->last_line = line;
    o->values++;
    char *s = sbx_json_dumps(v, SBX_JSON_COMPACT);
    for (const char *c = s; *c; c++)
        o->hash = (o->hash ^ (uint8_t)*c) * 1099511628211u;
    o->hash = (o->hash ^ line) * 1099511628211u;
    free(s);
    return 0;
}

static void run(const uint8_t *p, size_t n, size_t step, struct outcome *o)
{
    struct sbx__ndjson d;
    struct sbx_error err = SBX_ERROR_INIT;
    memset(o, 0, sizeof(*o));
    sbx__ndjson_init(&d, MAX_LINE, 16, on_value, o);
    for (size_t off = 0; off < n && o->rc == 0; off += step)
        o->rc = sbx__ndjson_feed(&d, (const char *)p + off, n - off < step ? n - off : step, &err);
    if (o->rc == 0)
        o->rc = sbx__ndjson_finish(&d, &err);
    if (o->rc < 0)
        FUZZ_ASSERT(err.msg[0] != '\0');
    sbx__ndjson_release(&d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t step = (size_t)data[0] % 16 + 1;
    struct outcome whole, pieces;
    run(data + 1, size - 1, size, &whole);
    run(data + 1, size - 1, step, &pieces);
    FUZZ_ASSERT(whole.hash == pieces.hash && whole.values == pieces.values);
    FUZZ_ASSERT(whole.rc == pieces.rc);
    return 0;
}
