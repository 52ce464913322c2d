#include <stdlib.h>
#include <string.h>

#include "sbx/buf.h"
#include "sbx/path.h"

int sbx_utf8_valid(const char *data, size_t n)
{
    const unsigned char *s = (const unsigned char *)data;
    size_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t need;
        unsigned int cp;
        if (c >= 0xc2 && c <= 0xdf) {
            need = 1;
            cp = c & 0x1f;
        } else if (c >= 0xe0 && c <= 0xef) {
            need = 2;
            cp = c & 0x0f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            need = 3;
            cp = c & 0x07;
        } else {
            return 0;
        }
        if (n - i <= need)
            return 0;
        for (size_t k = 1; k <= need; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return 0;
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if ((need == 2 && cp < 0x800) || (need == 3 && cp < 0x10000) || cp > 0x10ffff ||
            (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        i += need + 1;
    }
    return 1;
}

int sbx_text_has_control(const char *data, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)data[i] < 0x20 || data[i] == 0x7f)
            return 1;
    return 0;
}

/* Quote about the first 200 bytes of a path for a message, escaping every byte that is not
 * printable ASCII, so a hostile name cannot put raw bytes into logs or terminals. */
static void quote(const char *in, size_t len, char *out, size_t outsz)
{
    size_t o = 0;
    for (size_t i = 0; i < len && o + 5 < outsz; i++) {
        unsigned char c = (unsigned char)in[i];
        if (c < 0x20 || c == 0x7f || c >= 0x80) {
            static const char hex[] = "0123456789abcdef";
            out[o++] = '\\';
            out[o++] = 'x';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
        } else {
            out[o++] = (char)c;
        }
        if (o >= 200) {
            out[o++] = '.';
            out[o++] = '.';
            break;
        }
    }
    out[o] = '\0';
}

static int bad(struct sbx_error *err, const char *in, size_t len, const char *rule)
{
    char q[256];
    /* Valid UTF-8 is shown as is; anything else escaped so the message stays printable. */
    if (sbx_utf8_valid(in, len) && !memchr(in, '\0', len) && len < 200) {
        if (!sbx_text_has_control(in, len))
            return sbx_error_set(err, SBX_E_INVAL, 0, "path '%.*s' %s", (int)len, in, rule);
    }
    quote(in, len, q, sizeof(q));
    return sbx_error_set(err, SBX_E_INVAL, 0, "path '%s' %s", q, rule);
}

int sbx_path_normalize(const char *in, size_t len, int flags, const char *root, char **out,
                       struct sbx_error *err)
{
    if (memchr(in, '\0', len))
        return bad(err, in, len, "must not contain a NUL byte");
    if (len > SBX_PATH_MAX)
        return bad(err, in, len, "is longer than 4095 bytes");
    if (!sbx_utf8_valid(in, len))
        return bad(err, in, len, "is not valid UTF-8");
    if (sbx_text_has_control(in, len))
        return bad(err, in, len, "must not contain control characters");
    const char *p = in;
    size_t plen = len;
    if (plen > 0 && p[0] == '/') {
        if (!(flags & SBX_PATH_ALLOW_ABSOLUTE) || !root)
            return bad(err, in, len, "must be relative to the workspace");
        size_t rlen = strlen(root);
        while (rlen > 1 && root[rlen - 1] == '/')
            rlen--;
        if (!(plen >= rlen && memcmp(p, root, rlen) == 0 && (plen == rlen || p[rlen] == '/')))
            return bad(err, in, len, "is outside the workspace root");
        p += rlen;
        plen -= rlen;
    }
    struct sbx_buf b;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    size_t i = 0;
    int rc = 0;
    while (i < plen) {
        size_t j = i;
        while (j < plen && p[j] != '/')
            j++;
        size_t clen = j - i;
        if (clen == 0 || (clen == 1 && p[i] == '.')) {
            /* empty components ("a//b", trailing "/") and "." collapse */
        } else if (clen == 2 && p[i] == '.' && p[i + 1] == '.') {
            rc = bad(err, in, len, "must not contain '..'");
            goto out;
        } else if (clen > SBX_NAME_MAX) {
            rc = bad(err, in, len, "has a component longer than 255 bytes");
            goto out;
        } else {
            if ((b.len && sbx_buf_addch(&b, '/', NULL)) || sbx_buf_add(&b, p + i, clen, NULL))
                SBX_BUG("unbounded buffer refused data");
        }
        i = j + 1;
    }
    if (b.len == 0 && !(flags & SBX_PATH_ALLOW_ROOT)) {
        rc = bad(err, in, len, "names the workspace root, not an entry in it");
        goto out;
    }
    *out = sbx_buf_detach(&b, NULL);
out:
    sbx_buf_release(&b);
    return rc;
}

int sbx_path_within(const char *a, const char *b)
{
    size_t bl = strlen(b);
    if (bl == 0)
        return 1;
    return strncmp(a, b, bl) == 0 && (a[bl] == '\0' || a[bl] == '/');
}

int sbx_path_check_root(const char *root, struct sbx_error *err)
{
    size_t len = strlen(root);
    if (len == 0 || root[0] != '/')
        return sbx_error_set(err, SBX_E_INVAL, 0, "root '%s' must be an absolute path", root);
    if (len == 1)
        return sbx_error_set(err, SBX_E_INVAL, 0, "root must not be '/'");
    char *norm = NULL;
    int rc = sbx_path_normalize(root + 1, len - 1, 0, NULL, &norm, err);
    if (rc < 0) {
        sbx_error_prefix(err, "root");
        return rc;
    }
    int same = strcmp(norm, root + 1) == 0;
    free(norm);
    if (!same)
        return sbx_error_set(err, SBX_E_INVAL, 0, "root '%s' is not in normal form", root);
    return 0;
}
