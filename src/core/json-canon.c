/* The canonical text of a JSON value (json-canon.h): the bytes of jansson's sorted compact
 * dump, written straight to a buffer. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json-canon.h"

#define CANON_MAX_DEPTH 2048 /* jansson's own limit on what it dumps */
#define SMALL_OBJECT    16

/* Bytes that end a run copied as is: the two that are escaped and the control characters. */
static int plain(unsigned char c)
{
    return c >= 0x20 && c != '"' && c != '\\';
}

/* The length of the UTF-8 sequence starting at s[0..n), 0 when it is not one (jansson's own
 * check: no overlong forms, no surrogates, nothing past U+10FFFF). */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len;
    unsigned cp;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2, cp = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF)
        len = 3, cp = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4)
        len = 4, cp = c & 0x07;
    else
        return 0;
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

int sbx__json_canon_string(const char *s, size_t n, struct sbx_buf *out, struct sbx_error *err)
{
    static const char hexd[] = "0123456789ABCDEF";
    const unsigned char *p = (const unsigned char *)s, *end = p + n;
    size_t before = out->len;
    /* Most strings need no escape: one reservation for the string and its quotes. */
    int rc = sbx_buf_reserve(out, n + 2, err);
    if (rc == 0)
        rc = sbx_buf_addch(out, '"', err);
    while (rc == 0 && p < end) {
        const unsigned char *run = p;
        while (p < end && plain(*p)) {
            if (*p < 0x80) {
                p++;
                continue;
            }
            size_t len = utf8_len(p, (size_t)(end - p));
            if (!len) {
                sbx_buf_setlen(out, before);
                return sbx_error_set(err, SBX_E_INVAL, 0, "json: a string is not UTF-8");
            }
            p += len;
        }
        if (p > run && (rc = sbx_buf_add(out, run, (size_t)(p - run), err)) < 0)
            break;
        if (p == end)
            break;
        char esc[6] = {'\\', 0, 0, 0, 0, 0};
        size_t elen = 2;
        switch (*p) {
        case '"':
        case '\\':
            esc[1] = (char)*p;
            break;
        case '\b':
            esc[1] = 'b';
            break;
        case '\f':
            esc[1] = 'f';
            break;
        case '\n':
            esc[1] = 'n';
            break;
        case '\r':
            esc[1] = 'r';
            break;
        case '\t':
            esc[1] = 't';
            break;
        default:
            memcpy(esc + 1, "u00", 3);
            esc[4] = hexd[*p >> 4];
            esc[5] = hexd[*p & 0xF];
            elen = 6;
        }
        rc = sbx_buf_add(out, esc, elen, err);
        p++;
    }
    if (rc == 0)
        rc = sbx_buf_addch(out, '"', err);
    if (rc < 0)
        sbx_buf_setlen(out, before);
    return rc;
}

int sbx__json_canon_int(long long i, struct sbx_buf *out, struct sbx_error *err)
{
    char t[24];
    char *p = t + sizeof(t);
    /* The magnitude as unsigned: LLONG_MIN has none as a long long. */
    unsigned long long u = i < 0 ? 0ULL - (unsigned long long)i : (unsigned long long)i;
    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (i < 0)
        *--p = '-';
    return sbx_buf_add(out, p, (size_t)(t + sizeof(t) - p), err);
}

/* jansson's real: "%.17g", the locale's decimal point as '.', ".0" when neither '.' nor 'e' is
 * in it, and the exponent without '+' and leading zeros. */
static int canon_real(double d, struct sbx_buf *out, struct sbx_error *err)
{
    if (!isfinite(d))
        return sbx_error_set(err, SBX_E_INVAL, 0, "json: a number is not finite");
    char t[40];
    int n = snprintf(t, sizeof(t) - 3, "%.17g", d);
    if (n < 0 || (size_t)n >= sizeof(t) - 3)
        return sbx_error_set(err, SBX_E_INVAL, 0, "json: cannot format a number");
    size_t len = (size_t)n;
    for (size_t i = 0; i < len; i++)
        if (t[i] == ',')
            t[i] = '.';
    if (!memchr(t, '.', len) && !memchr(t, 'e', len)) {
        memcpy(t + len, ".0", 3);
        len += 2;
    }
    char *e = memchr(t, 'e', len);
    if (e) {
        char *start = e + 1, *from = e + 2;
        if (*start == '-')
            start++;
        while (*from == '0')
            from++;
        if (from != start) {
            memmove(start, from, len - (size_t)(from - t));
            len -= (size_t)(from - start);
        }
    }
    return sbx_buf_add(out, t, len, err);
}

struct member {
    const char *key;
    size_t len;
    const json_t *v;
};

static int member_cmp(const void *a, const void *b)
{
    const struct member *x = a, *y = b;
    int c = memcmp(x->key, y->key, x->len < y->len ? x->len : y->len);
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

static int canon(const json_t *v, int depth, struct sbx_buf *out, struct sbx_error *err);

static int canon_object(const json_t *v, int depth, struct sbx_buf *out, struct sbx_error *err)
{
    size_t n = json_object_size(v), i = 0;
    struct member small[SMALL_OBJECT];
    struct member *m = n <= SMALL_OBJECT ? small : sbx_xcalloc(n, sizeof(*m));
    for (void *it = json_object_iter((json_t *)v); it && i < n;
         it = json_object_iter_next((json_t *)v, it), i++) {
        m[i].key = json_object_iter_key(it);
        m[i].len = json_object_iter_key_len(it);
        m[i].v = json_object_iter_value(it);
    }
    n = i;
    if (n > SMALL_OBJECT) {
        qsort(m, n, sizeof(*m), member_cmp);
    } else {
        for (size_t a = 1; a < n; a++) {
            struct member t = m[a];
            size_t b = a;
            for (; b > 0 && member_cmp(&m[b - 1], &t) > 0; b--)
                m[b] = m[b - 1];
            m[b] = t;
        }
    }
    int rc = sbx_buf_addch(out, '{', err);
    for (i = 0; i < n && rc == 0; i++) {
        if (i && (rc = sbx_buf_addch(out, ',', err)) < 0)
            break;
        if ((rc = sbx__json_canon_string(m[i].key, m[i].len, out, err)) == 0 &&
            (rc = sbx_buf_addch(out, ':', err)) == 0)
            rc = canon(m[i].v, depth + 1, out, err);
    }
    if (rc == 0)
        rc = sbx_buf_addch(out, '}', err);
    if (m != small)
        free(m);
    return rc;
}

static int canon(const json_t *v, int depth, struct sbx_buf *out, struct sbx_error *err)
{
    if (depth > CANON_MAX_DEPTH)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "json: deeper than %d levels", CANON_MAX_DEPTH);
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return canon_object(v, depth, out, err);
    case JSON_ARRAY: {
        size_t n = json_array_size(v);
        int rc = sbx_buf_addch(out, '[', err);
        for (size_t i = 0; i < n && rc == 0; i++) {
            if (i && (rc = sbx_buf_addch(out, ',', err)) < 0)
                break;
            rc = canon(json_array_get(v, i), depth + 1, out, err);
        }
        return rc == 0 ? sbx_buf_addch(out, ']', err) : rc;
    }
    case JSON_STRING:
        return sbx__json_canon_string(json_string_value(v), json_string_length(v), out, err);
    case JSON_INTEGER:
        return sbx__json_canon_int((long long)json_integer_value(v), out, err);
    case JSON_REAL:
        return canon_real(json_real_value(v), out, err);
    case JSON_TRUE:
        return sbx_buf_add(out, "true", 4, err);
    case JSON_FALSE:
        return sbx_buf_add(out, "false", 5, err);
    case JSON_NULL:
        return sbx_buf_add(out, "null", 4, err);
    }
    return sbx_error_set(err, SBX_E_INVAL, 0, "json: a value of no known type");
}

int sbx__json_canon(const json_t *v, struct sbx_buf *out, struct sbx_error *err)
{
    size_t before = out->len;
    if (!v) {
        return sbx_error_set(err, SBX_E_INVAL, 0, "json: no value");
    }
    int rc = canon(v, 0, out, err);
    if (rc < 0)
        sbx_buf_setlen(out, before);
    return rc;
}
