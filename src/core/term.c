/* sbx: terminal-safe text. See include/sbx/term.h. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "sbx/common.h"
#include "sbx/term.h"

/* Length of the valid UTF-8 sequence at s (1 to 4), 0 when invalid, -1 when s[0..n) is a valid
 * but incomplete start. *cp receives the code point. */
static int utf8_seq(const unsigned char *s, size_t n, uint32_t *cp)
{
    unsigned char c = s[0];
    int len;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0)
            lo = 0xA0; /* overlong */
        if (c == 0xED)
            hi = 0x9F; /* surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0)
            lo = 0x90;
        if (c == 0xF4)
            hi = 0x8F; /* beyond U+10FFFF */
    } else {
        return 0;
    }
    uint32_t v = c & (0x7F >> len);
    for (int i = 1; i < len; i++) {
        if ((size_t)i >= n)
            return -1;
        unsigned char lo_i = i == 1 ? lo : 0x80, hi_i = i == 1 ? hi : 0xBF;
        if (s[i] < lo_i || s[i] > hi_i)
            return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    *cp = v;
    return len;
}

static int hidden(uint32_t cp)
{
    return (cp >= 0x80 && cp <= 0x9F) || (cp >= 0x202A && cp <= 0x202E) ||
           (cp >= 0x2066 && cp <= 0x2069);
}

char *sbx_term_escape(const char *s, size_t n, int partial, size_t *used)
{
    const unsigned char *p = (const unsigned char *)s;
    char *out = sbx_xmalloc(4 * n + 1), *o = out;
    size_t i = 0;
    while (i < n) {
        unsigned char c = p[i];
        if (c == '\n' || c == '\t' || (c >= 0x20 && c < 0x7F)) {
            *o++ = (char)c;
            i++;
            continue;
        }
        uint32_t cp = 0;
        int len = c >= 0x80 ? utf8_seq(p + i, n - i, &cp) : 0;
        if (len < 0 && partial)
            break;
        if (len > 0 && !hidden(cp)) {
            memcpy(o, p + i, (size_t)len);
            o += len;
            i += (size_t)len;
        } else if (len > 0) {
            /* 6 output bytes for at least 2 input bytes: within 4 * n. */
            o += snprintf(o, 7, "\\u%04x", (unsigned)cp);
            i += (size_t)len;
        } else {
            o += snprintf(o, 5, "\\x%02x", c);
            i++;
        }
    }
    *o = '\0';
    if (used)
        *used = i;
    return out;
}
