/* UTF-8 validation and the cleaning of server text before it reaches an error message. */
#include <string.h>

#include "sandbox/wire/wire.h"

int sbx__wire_utf8_valid(const uint8_t *p, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint8_t c = p[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t need;
        uint32_t cp, min;
        if (c >= 0xc2 && c <= 0xdf) {
            need = 1, cp = c & 0x1f, min = 0x80;
        } else if (c >= 0xe0 && c <= 0xef) {
            need = 2, cp = c & 0x0f, min = 0x800;
        } else if (c >= 0xf0 && c <= 0xf4) {
            need = 3, cp = c & 0x07, min = 0x10000;
        } else {
            return 0; /* a continuation byte first, 0xc0/0xc1 (always overlong), or 0xf5.. */
        }
        if (n - i - 1 < need)
            return 0;
        for (size_t k = 1; k <= need; k++) {
            uint8_t cc = p[i + k];
            if ((cc & 0xc0) != 0x80)
                return 0;
            cp = cp << 6 | (cc & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        i += need + 1;
    }
    return 1;
}

char *sbx__wire_clean(const char *s, size_t n, char *out, size_t outsz)
{
    size_t o = 0;
    int cut = 0;
    for (size_t i = 0; i < n; i++) {
        if (o + 1 >= outsz) {
            cut = 1;
            break;
        }
        unsigned char c = (unsigned char)s[i];
        out[o++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    out[o] = '\0';
    if (cut && outsz >= 4)
        memcpy(out + outsz - 4, "...", 4);
    return out;
}
