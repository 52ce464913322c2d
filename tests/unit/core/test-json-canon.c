/* The canonical writer (src/core/json-canon.c) held to jansson's json_dumps with
 * JSON_SORT_KEYS | JSON_COMPACT | JSON_ENCODE_ANY, byte for byte, over fixed odd values and
 * many generated documents. */
#include <float.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tap.h"
#include "core/json-canon.h"
#include "sbx/buf.h"

#define CANON_FLAGS (JSON_SORT_KEYS | JSON_COMPACT | JSON_ENCODE_ANY)

static uint64_t rng = 0x9E3779B97F4A7C15ULL;

static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Whether the writer gives json_dumps's bytes for v; prints both when not. */
static int same(const json_t *v)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_buf b;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    char *want = json_dumps(v, CANON_FLAGS);
    int rc = sbx__json_canon(v, &b, &err);
    int ok = want && rc == 0 && b.len == strlen(want) && memcmp(b.data, want, b.len) == 0;
    if (!ok)
        printf("# want %s\n# got  %.*s (rc %d: %s)\n", want ? want : "(fails)", (int)b.len,
               b.data ? b.data : "", rc, err.msg);
    free(want);
    sbx_buf_release(&b);
    return ok;
}

/* Appends one code point as UTF-8. */
static size_t put_utf8(char *p, uint32_t cp)
{
    if (cp < 0x80) {
        p[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        p[0] = (char)(0xC0 | (cp >> 6));
        p[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        p[0] = (char)(0xE0 | (cp >> 12));
        p[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        p[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    p[0] = (char)(0xF0 | (cp >> 18));
    p[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    p[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    p[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* A random valid UTF-8 text of up to 24 code points, weighted to the ones escaping touches:
 * control characters (NUL too), quotes, backslashes, '/', DEL, U+2028, non-BMP. */
static size_t gen_text(char *p)
{
    static const uint32_t odd[] = {0,      1,      '\b',   '\f',   '\n',    '\r',    '\t',    0x1F,
                                   '"',    '\\',   '/',    0x7F,   0x80,    0xE9,    0x7FF,   0x800,
                                   0xFFFD, 0xFEFF, 0x2028, 0x2029, 0x10000, 0x1F600, 0x10FFFF};
    size_t n = next() % 25, len = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t r = next();
        uint32_t cp;
        if (r % 3 == 0)
            cp = odd[(r >> 8) % (sizeof(odd) / sizeof(odd[0]))];
        else if (r % 3 == 1)
            cp = 0x20 + (uint32_t)((r >> 8) % 0x5F);
        else {
            cp = (uint32_t)((r >> 8) % 0x10FFFF) + 1;
            if (cp >= 0xD800 && cp <= 0xDFFF)
                cp = 0xE000;
        }
        len += put_utf8(p + len, cp);
    }
    return len;
}

static json_t *gen_real(void)
{
    static const double fixed[] = {0.0,
                                   -0.0,
                                   0.1,
                                   1.0 / 3,
                                   3.0,
                                   -2.5,
                                   1e16,
                                   1e17,
                                   1e22,
                                   1e-5,
                                   1.5e-7,
                                   5e-324,
                                   DBL_MAX,
                                   -DBL_MAX,
                                   DBL_MIN,
                                   123456789.125,
                                   1e100,
                                   -1e-100,
                                   9007199254740993.0,
                                   0.30000000000000004};
    uint64_t r = next();
    if (r % 2)
        return json_real(fixed[(r >> 8) % (sizeof(fixed) / sizeof(fixed[0]))]);
    double d;
    uint64_t bits = next();
    memcpy(&d, &bits, sizeof(d));
    if (d != d || d - d != 0) /* NaN or infinite: json_real refuses them */
        d = (double)(int64_t)bits / 1024.0;
    return json_real(d);
}

static json_t *gen_int(void)
{
    static const json_int_t fixed[] = {0,
                                       -1,
                                       1,
                                       9,
                                       10,
                                       -10,
                                       INT32_MAX,
                                       INT32_MIN,
                                       INT64_MAX,
                                       INT64_MIN,
                                       INT64_MAX - 1,
                                       INT64_MIN + 1};
    uint64_t r = next();
    if (r % 2)
        return json_integer(fixed[(r >> 8) % (sizeof(fixed) / sizeof(fixed[0]))]);
    return json_integer((json_int_t)next() >> (next() % 64));
}

static json_t *gen(int depth)
{
    char text[24 * 4 + 1];
    uint64_t r = next() % (depth > 4 ? 6 : 8);
    switch (r) {
    case 0:
        return json_stringn(text, gen_text(text));
    case 1:
        return gen_int();
    case 2:
        return gen_real();
    case 3:
        return json_boolean(next() % 2);
    case 4:
        return json_null();
    case 5:
        return json_string("");
    case 6: {
        json_t *a = json_array();
        for (size_t i = next() % 5; i > 0; i--)
            json_array_append_new(a, gen(depth + 1));
        return a;
    }
    default: {
        json_t *o = json_object();
        for (size_t i = next() % 20; i > 0; i--) {
            size_t n = next() % 4 ? gen_text(text) : 0;
            json_object_setn_new(o, text, n, gen(depth + 1));
        }
        return o;
    }
    }
}

static void test_fixed(void)
{
    const char *docs[] = {
            "{}",
            "[]",
            "\"\"",
            "0",
            "-0.0",
            "1e22",
            "{\"b\":1,\"a\":{\"d\":[],\"c\":null}}",
            "{\"ab\":1,\"a\":2,\"\":3,\"a b\":4,\"B\":5,\"\\u00e9\":6,\"~\":7}",
            "\"tab\\tnl\\nnul\\u0000bell\\u0007del\\u007fesc\\u001bslash/quote\\\"bs\\\\\"",
            "\"\\u2028\\u2029\\ud83d\\ude00\\u00e9\\uffff\"",
            "[9223372036854775807,-9223372036854775808,1.0,0.5,1e-7,123456789012345678]",
            "{\"usage\":{\"total_tokens\":12,\"input_tokens\":5},\"open_calls\":[\"c1\",\"c2\"]}",
    };
    for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++) {
        json_error_t je;
        json_t *v = json_loads(docs[i], JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        CHECK(v != NULL);
        CHECK(v && same(v));
        json_decref(v);
    }
    /* Keys with a NUL in them sort by all their bytes. */
    json_t *o = json_object();
    json_object_setn_new(o, "a\0b", 3, json_integer(1));
    json_object_setn_new(o, "a", 1, json_integer(2));
    json_object_setn_new(o, "a\0a", 3, json_integer(3));
    CHECK(same(o));
    json_decref(o);
}

static void test_generated(void)
{
    int bad = 0;
    for (int i = 0; i < 3000; i++) {
        json_t *v = gen(0);
        if (!same(v) && ++bad > 5)
            break;
        json_decref(v);
    }
    CHECK_EQ_INT(bad, 0);
}

static void test_refused(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_buf b;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    CHECK_OK(sbx_buf_adds(&b, "x", &err), &err);
    /* Not UTF-8: jansson's dump fails too, and the buffer is left as it was. */
    static const char *bad[] = {
            "\xff", "a\xc3", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe0\x80\x80"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        json_t *a = json_array();
        json_array_append_new(a, json_stringn_nocheck(bad[i], strlen(bad[i])));
        char *t = json_dumps(a, CANON_FLAGS);
        CHECK(t == NULL);
        free(t);
        CHECK_ERR(sbx__json_canon(a, &b, &err), SBX_E_INVAL, &err, "not UTF-8");
        CHECK_EQ_INT(b.len, 1);
        json_decref(a);
    }
    /* A buffer's limit is an error, not a short text. */
    struct sbx_buf small;
    sbx_buf_init(&small, 8);
    json_t *v = json_pack("{s:s}", "key", "a long value");
    CHECK_ERR(sbx__json_canon(v, &small, &err), SBX_E_TOOBIG, &err, NULL);
    CHECK_EQ_INT(small.len, 0);
    json_decref(v);
    sbx_buf_release(&small);
    sbx_buf_release(&b);
}

int main(void)
{
    TAP_START();
    TAP_RUN(test_fixed);
    TAP_RUN(test_generated);
    TAP_RUN(test_refused);
    return TAP_DONE();
}
