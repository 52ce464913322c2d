/* sbx: the JSON reader behind sbx_json_parse. jansson's own reader costs ~140 instructions per
 * byte (a byte-at-a-time stream with per-character UTF-8 decoding and a string buffer grown
 * one byte at a time); manifests carry megabytes of file contents in strings, so this reader
 * scans strings eight bytes at a time, validates UTF-8 only where a byte is not ASCII, and
 * hands unescaped strings to jansson straight from the input. It accepts exactly what jansson
 * accepts with JSON_DECODE_ANY | JSON_REJECT_DUPLICATES (tests/unit/core/test-json-parse.c and
 * tests/fuzz/fuzz-json.c compare the two) and tracks nesting itself, so no separate depth scan
 * of the text is needed. */
#include <errno.h>
#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/grow.h"
#include "sbx/json.h"

/* Recursion bound whatever depth a caller allows; jansson's reader stops at the same depth. */
#define HARD_MAX_DEPTH 2048

struct reader {
    const unsigned char *start, *p, *end;
    int depth, max_depth;
    char *scratch; /* the decoded text of a string with escapes */
    size_t slen, scap;
    struct sbx_error *err;
};

/* Line and column (in characters, as jansson counts them) of the byte at `at`. */
static int fail(struct reader *R, const unsigned char *at, int code, const char *fmt, ...)
        SBX_PRINTF(4, 5);

static int fail(struct reader *R, const unsigned char *at, int code, const char *fmt, ...)
{
    char text[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    if (at > R->end)
        at = R->end;
    int line = 1, column = 0;
    for (const unsigned char *q = R->start; q < at; q++) {
        if (*q == '\n') {
            line++;
            column = 0;
        } else if ((*q & 0xc0) != 0x80) {
            column++;
        }
    }
    if (at < R->end && *at != '\n' && (*at & 0xc0) != 0x80)
        column++;
    return sbx_error_set(R->err, code, 0, "json line %d column %d: %s", line, column, text);
}

static void skip_ws(struct reader *R)
{
    while (R->p < R->end && (*R->p == ' ' || *R->p == '\n' || *R->p == '\r' || *R->p == '\t'))
        R->p++;
}

#define ONES  0x0101010101010101ull
#define HIGHS 0x8080808080808080ull

/* Bit 7 of each byte of w that ends a plain run in a string: '"', '\\', a control character or
 * a non-ASCII byte. Borrows only run upward from a byte that matches, so the lowest flag is
 * always exact. */
static inline uint64_t special_bytes(uint64_t w)
{
    uint64_t q = w ^ (ONES * '"'), b = w ^ (ONES * '\\');
    return ((w - ONES * 0x20) & ~w & HIGHS) | ((q - ONES) & ~q & HIGHS) |
           ((b - ONES) & ~b & HIGHS) | (w & HIGHS);
}

/* Length of the valid UTF-8 sequence at q (2 to 4 bytes; no overlongs, surrogates or code
 * points above U+10FFFF), 0 when invalid. */
static size_t utf8_seq(const unsigned char *q, const unsigned char *end)
{
    unsigned c = q[0];
    size_t n;
    unsigned lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        if (c == 0xe0)
            lo = 0xa0;
        else if (c == 0xed)
            hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        if (c == 0xf0)
            lo = 0x90;
        else if (c == 0xf4)
            hi = 0x8f;
    } else {
        return 0;
    }
    if ((size_t)(end - q) < n || q[1] < lo || q[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if ((q[i] & 0xc0) != 0x80)
            return 0;
    return n;
}

static int hex4(const unsigned char *q, const unsigned char *end, unsigned *out)
{
    if (end - q < 4)
        return -1;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned c = q[i], d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            return -1;
        v = v * 16 + d;
    }
    *out = v;
    return 0;
}

/* Inline and unchecked by sbx_buf: escapes come every few bytes in source text, and the call
 * per escape was most of the cost of reading it. */
static inline void scratch_add(struct reader *R, const void *p, size_t n)
{
    if (!n) /* an empty run before an escape: nothing to copy, and scratch may be NULL yet */
        return;
    SBX_ALLOC_GROW(R->scratch, R->slen + n, R->scap);
    memcpy(R->scratch + R->slen, p, n);
    R->slen += n;
}

static inline void scratch_addch(struct reader *R, char c)
{
    if (R->slen < R->scap)
        R->scratch[R->slen++] = c;
    else
        scratch_add(R, &c, 1);
}

static void put_utf8(struct reader *R, unsigned cp)
{
    unsigned char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (unsigned char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (unsigned char)(0xc0 | cp >> 6);
        u[1] = (unsigned char)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (unsigned char)(0xe0 | cp >> 12);
        u[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        u[2] = (unsigned char)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        u[0] = (unsigned char)(0xf0 | cp >> 18);
        u[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
        u[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        u[3] = (unsigned char)(0x80 | (cp & 0x3f));
        n = 4;
    }
    scratch_add(R, u, n);
}

/* Decode one \-escape at q (q[0] == '\\'); *next: the byte after it. */
static int unescape(struct reader *R, const unsigned char *q, const unsigned char **next, int *nul)
{
    if (q + 1 >= R->end)
        return fail(R, R->end, SBX_E_PARSE, "premature end of input");
    char c;
    switch (q[1]) {
    case '"':
    case '\\':
    case '/':
        c = (char)q[1];
        break;
    case 'b':
        c = '\b';
        break;
    case 'f':
        c = '\f';
        break;
    case 'n':
        c = '\n';
        break;
    case 'r':
        c = '\r';
        break;
    case 't':
        c = '\t';
        break;
    default:
        c = 0;
    }
    if (c) {
        scratch_addch(R, c);
        *next = q + 2;
        return 0;
    }
    if (q[1] != 'u')
        return fail(R, q + 1, SBX_E_PARSE, "invalid escape");
    unsigned cp, lo;
    if (hex4(q + 2, R->end, &cp) != 0)
        return fail(R, q + 1, SBX_E_PARSE, "invalid unicode escape");
    q += 6;
    if (cp >= 0xd800 && cp <= 0xdbff) {
        if (R->end - q < 6 || q[0] != '\\' || q[1] != 'u' || hex4(q + 2, R->end, &lo) != 0)
            return fail(R, q - 1, SBX_E_PARSE, "invalid unicode '\\u%04X'", cp);
        if (lo < 0xdc00 || lo > 0xdfff)
            return fail(R, q + 5, SBX_E_PARSE, "invalid unicode '\\u%04X\\u%04X'", cp, lo);
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        q += 6;
    } else if (cp >= 0xdc00 && cp <= 0xdfff) {
        return fail(R, q - 1, SBX_E_PARSE, "invalid unicode '\\u%04X'", cp);
    } else if (cp == 0) {
        *nul = 1;
    }
    put_utf8(R, cp);
    *next = q;
    return 0;
}

/* The string whose opening quote is at R->p. *s, *n: its decoded text, either a slice of the
 * input or R->scratch (valid until the next string); *nul: it contains a NUL. R->p ends on the
 * closing quote. */
static int read_string(struct reader *R, const char **s, size_t *n, int *nul)
{
    const unsigned char *q = R->p + 1, *seg = q, *end = R->end;
    int escaped = 0;
    *nul = 0;
    for (;;) {
        while (end - q >= 8) {
            uint64_t w;
            memcpy(&w, q, 8);
            uint64_t m = special_bytes(w);
            if (m) {
                q += (unsigned)__builtin_ctzll(m) >> 3;
                break;
            }
            q += 8;
        }
        if (q >= end)
            return fail(R, end, SBX_E_PARSE, "premature end of input");
        unsigned c = *q;
        if (c == '"')
            break;
        if (c == '\\') {
            if (!escaped) {
                R->slen = 0;
                escaped = 1;
            }
            scratch_add(R, seg, (size_t)(q - seg));
            int rc = unescape(R, q, &q, nul);
            if (rc)
                return rc;
            seg = q;
        } else if (c < 0x20) {
            return fail(R, q, SBX_E_PARSE, "control character 0x%x", c);
        } else if (c >= 0x80) {
            size_t l = utf8_seq(q, end);
            if (!l)
                return fail(R, q, SBX_E_PARSE, "unable to decode byte 0x%x", c);
            q += l;
        } else {
            q++;
        }
    }
    if (escaped) {
        scratch_add(R, seg, (size_t)(q - seg));
        *s = R->scratch;
        *n = R->slen;
    } else {
        *s = (const char *)seg;
        *n = (size_t)(q - seg);
    }
    R->p = q;
    return 0;
}

static int read_number(struct reader *R, json_t **out)
{
    const unsigned char *b = R->p, *q = b, *end = R->end;
    int neg = 0, real = 0;
    if (*q == '-') {
        neg = 1;
        q++;
    }
    if (q >= end || *q < '0' || *q > '9')
        return fail(R, q < end ? q : end, SBX_E_PARSE, "invalid token");
    if (*q == '0') {
        q++;
        if (q < end && *q >= '0' && *q <= '9')
            return fail(R, q, SBX_E_PARSE, "invalid token");
    } else {
        while (q < end && *q >= '0' && *q <= '9')
            q++;
    }
    if (q < end && *q == '.') {
        real = 1;
        q++;
        if (q >= end || *q < '0' || *q > '9')
            return fail(R, q, SBX_E_PARSE, "invalid token");
        while (q < end && *q >= '0' && *q <= '9')
            q++;
    }
    if (q < end && (*q == 'e' || *q == 'E')) {
        real = 1;
        q++;
        if (q < end && (*q == '+' || *q == '-'))
            q++;
        if (q >= end || *q < '0' || *q > '9')
            return fail(R, q, SBX_E_PARSE, "invalid token");
        while (q < end && *q >= '0' && *q <= '9')
            q++;
    }
    R->p = q - 1;
    if (!real) {
        unsigned long long v = 0, lim = neg ? (unsigned long long)INT64_MAX + 1 : INT64_MAX;
        for (const unsigned char *d = b + neg; d < q; d++) {
            unsigned x = *d - '0';
            if (v > (lim - x) / 10)
                return fail(R, q - 1, SBX_E_PARSE,
                            neg ? "too big negative integer" : "too big integer");
            v = v * 10 + x;
        }
        json_int_t i = neg ? (json_int_t)(0 - v) : (json_int_t)v;
        *out = json_integer(i);
    } else {
        struct sbx_buf t;
        sbx_buf_init(&t, SBX_BUF_NOLIMIT);
        if (sbx_buf_add(&t, b, (size_t)(q - b), NULL) != 0)
            SBX_BUG("unbounded buffer refused data");
        /* strtod reads the locale's decimal point; JSON's is always '.'. */
        const char *dp = localeconv()->decimal_point;
        if (dp && dp[0] && dp[0] != '.' && !dp[1]) {
            char *dot = strchr(t.data, '.');
            if (dot)
                *dot = dp[0];
        }
        errno = 0;
        double d = strtod(t.data, NULL);
        sbx_buf_release(&t);
        if ((d == HUGE_VAL || d == -HUGE_VAL) && errno == ERANGE)
            return fail(R, q - 1, SBX_E_PARSE, "real number overflow");
        *out = json_real(d);
    }
    if (!*out)
        SBX_BUG("out of memory");
    return 0;
}

static int read_value(struct reader *R, json_t **out);

static int enter(struct reader *R)
{
    if (++R->depth > R->max_depth)
        return sbx_error_set(R->err, SBX_E_TOOBIG, 0, "json nesting exceeds the depth limit of %d",
                             R->max_depth);
    if (R->depth > HARD_MAX_DEPTH)
        return fail(R, R->p, SBX_E_PARSE, "maximum parsing depth reached");
    return 0;
}

static int read_object(struct reader *R, json_t **out)
{
    int rc = enter(R);
    if (rc)
        return rc;
    json_t *obj = json_object();
    if (!obj)
        SBX_BUG("out of memory");
    R->p++;
    skip_ws(R);
    if (R->p < R->end && *R->p == '}')
        goto done;
    for (;;) {
        if (R->p >= R->end) {
            rc = fail(R, R->end, SBX_E_PARSE, "premature end of input");
            goto bad;
        }
        if (*R->p != '"') {
            rc = fail(R, R->p, SBX_E_PARSE, "string or '}' expected");
            goto bad;
        }
        const char *k;
        size_t kn;
        int nul;
        if ((rc = read_string(R, &k, &kn, &nul)))
            goto bad;
        if (nul) {
            rc = fail(R, R->p, SBX_E_PARSE, "NUL byte in object key");
            goto bad;
        }
        if (json_object_getn(obj, k, kn)) {
            rc = fail(R, R->p, SBX_E_INVAL, "duplicate object key");
            goto bad;
        }
        /* A decoded key lives in the scratch buffer, which the value's strings reuse. */
        char *owned = k == R->scratch ? sbx_xstrndup(k, kn) : NULL;
        if (owned)
            k = owned;
        R->p++;
        skip_ws(R);
        if (R->p >= R->end || *R->p != ':') {
            rc = fail(R, R->p, SBX_E_PARSE,
                      R->p >= R->end ? "premature end of input" : "':' expected");
            free(owned);
            goto bad;
        }
        R->p++;
        json_t *v = NULL;
        rc = read_value(R, &v);
        if (rc == 0 && json_object_setn_new_nocheck(obj, k, kn, v) != 0)
            SBX_BUG("out of memory");
        free(owned);
        if (rc)
            goto bad;
        R->p++;
        skip_ws(R);
        if (R->p < R->end && *R->p == ',') {
            R->p++;
            skip_ws(R);
            continue;
        }
        if (R->p < R->end && *R->p == '}')
            break;
        rc = fail(R, R->p, SBX_E_PARSE, R->p >= R->end ? "premature end of input" : "'}' expected");
        goto bad;
    }
done:
    R->depth--;
    *out = obj;
    return 0;
bad:
    json_decref(obj);
    return rc;
}

static int read_array(struct reader *R, json_t **out)
{
    int rc = enter(R);
    if (rc)
        return rc;
    json_t *arr = json_array();
    if (!arr)
        SBX_BUG("out of memory");
    R->p++;
    skip_ws(R);
    if (R->p < R->end && *R->p == ']')
        goto done;
    for (;;) {
        json_t *v = NULL;
        if ((rc = read_value(R, &v)))
            goto bad;
        if (json_array_append_new(arr, v) != 0)
            SBX_BUG("out of memory");
        R->p++;
        skip_ws(R);
        if (R->p < R->end && *R->p == ',') {
            R->p++;
            continue;
        }
        if (R->p < R->end && *R->p == ']')
            break;
        rc = fail(R, R->p, SBX_E_PARSE, R->p >= R->end ? "premature end of input" : "']' expected");
        goto bad;
    }
done:
    R->depth--;
    *out = arr;
    return 0;
bad:
    json_decref(arr);
    return rc;
}

static int read_literal(struct reader *R, const char *word, json_t *v, json_t **out)
{
    size_t n = strlen(word);
    if ((size_t)(R->end - R->p) < n || memcmp(R->p, word, n) != 0)
        return fail(R, R->p, SBX_E_PARSE, "invalid token");
    R->p += n - 1;
    *out = v;
    return 0;
}

/* One value starting at or after R->p (whitespace first); R->p ends on its last byte. */
static int read_value(struct reader *R, json_t **out)
{
    skip_ws(R);
    if (R->p >= R->end)
        return fail(R, R->end, SBX_E_PARSE, "premature end of input");
    switch (*R->p) {
    case '{':
        return read_object(R, out);
    case '[':
        return read_array(R, out);
    case '"': {
        const char *s;
        size_t n;
        int nul;
        int rc = read_string(R, &s, &n, &nul);
        if (rc)
            return rc;
        if (nul)
            return fail(R, R->p, SBX_E_PARSE, "\\u0000 is not allowed in a string");
        if (!(*out = json_stringn_nocheck(s, n)))
            SBX_BUG("out of memory");
        return 0;
    }
    case 't':
        return read_literal(R, "true", json_true(), out);
    case 'f':
        return read_literal(R, "false", json_false(), out);
    case 'n':
        return read_literal(R, "null", json_null(), out);
    default:
        if (*R->p == '-' || (*R->p >= '0' && *R->p <= '9'))
            return read_number(R, out);
        return fail(R, R->p, SBX_E_PARSE, "invalid token");
    }
}

int sbx_json_parse(const char *data, size_t len, const struct sbx_json_limits *lim, json_t **out,
                   struct sbx_error *err)
{
    size_t max_bytes = lim && lim->max_bytes ? lim->max_bytes : SBX_JSON_DEFAULT_MAX_BYTES;
    int max_depth = lim && lim->max_depth ? lim->max_depth : SBX_JSON_DEFAULT_MAX_DEPTH;
    if (len > max_bytes)
        return sbx_error_set(err, SBX_E_TOOBIG, 0,
                             "json document of %zu bytes exceeds the limit of %zu bytes", len,
                             max_bytes);
    struct reader R = {.start = (const unsigned char *)data,
                       .p = (const unsigned char *)data,
                       .end = (const unsigned char *)data + len,
                       .max_depth = max_depth,
                       .err = err};
    json_t *v = NULL;
    int rc = read_value(&R, &v);
    if (rc == 0) {
        R.p++;
        skip_ws(&R);
        if (R.p < R.end) {
            json_decref(v);
            rc = fail(&R, R.p, SBX_E_PARSE, "end of file expected");
        }
    }
    free(R.scratch);
    if (rc)
        return rc;
    *out = v;
    return 0;
}
