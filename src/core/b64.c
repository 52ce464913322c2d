/* Base64, RFC 4648 section 4: standard alphabet, '=' padding, strict decoding. */
#include <stdint.h>

#include "sbx/b64.h"

static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t sbx_b64_encoded_len(size_t n)
{
    return (n + 2) / 3 * 4;
}

int sbx_b64_encode(const void *data, size_t n, struct sbx_buf *out, struct sbx_error *err)
{
    const unsigned char *in = data;
    if (n > (SBX_BUF_NOLIMIT / 4) * 3)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "data of %zu bytes is too large to encode", n);
    size_t need = sbx_b64_encoded_len(n);
    int rc = sbx_buf_reserve(out, need, err);
    if (rc < 0)
        return rc;
    char *o = out->data + out->len;
    size_t i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        *o++ = alphabet[v >> 18 & 63];
        *o++ = alphabet[v >> 12 & 63];
        *o++ = alphabet[v >> 6 & 63];
        *o++ = alphabet[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)in[i] << 16;
        *o++ = alphabet[v >> 18 & 63];
        *o++ = alphabet[v >> 12 & 63];
        *o++ = '=';
        *o++ = '=';
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;
        *o++ = alphabet[v >> 18 & 63];
        *o++ = alphabet[v >> 12 & 63];
        *o++ = alphabet[v >> 6 & 63];
        *o++ = '=';
    }
    sbx_buf_setlen(out, out->len + need);
    return 0;
}

static int value_of(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

int sbx_b64_decode(const char *text, size_t n, struct sbx_buf *out, struct sbx_error *err)
{
    size_t start = out->len;
    uint32_t group = 0;
    int have = 0;    /* sextets in the current group */
    int padding = 0; /* '=' seen in the current group */
    int done = 0;    /* a padded group ended the data */
    size_t group_at = 0;
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)text[i];
        if (is_space((char)c))
            continue;
        if (done) {
            rc = sbx_error_set(err, SBX_E_PARSE, 0, "base64: data after the padding at offset %zu",
                               i);
            goto out;
        }
        if (have == 0)
            group_at = i;
        if (c == '=') {
            if (have < 2) {
                rc = sbx_error_set(err, SBX_E_PARSE, 0, "base64: misplaced '=' at offset %zu", i);
                goto out;
            }
            padding++;
            have++;
        } else {
            int v = value_of(c);
            if (v < 0) {
                rc = sbx_error_set(err, SBX_E_PARSE, 0,
                                   "base64: invalid character 0x%02x at offset %zu", c, i);
                goto out;
            }
            if (padding) {
                rc = sbx_error_set(err, SBX_E_PARSE, 0,
                                   "base64: data after the padding at offset %zu", i);
                goto out;
            }
            group = group << 6 | (uint32_t)v;
            have++;
        }
        if (have < 4)
            continue;
        group <<= 6 * padding;
        unsigned char bytes[3] = {(unsigned char)(group >> 16), (unsigned char)(group >> 8),
                                  (unsigned char)group};
        int nbytes = 3 - padding;
        /* RFC 4648 3.5: the bits dropped by padding must be zero in canonical input */
        if ((padding == 1 && bytes[2] != 0) || (padding == 2 && (bytes[1] | bytes[2]) != 0)) {
            rc = sbx_error_set(err, SBX_E_PARSE, 0,
                               "base64: non-zero padding bits in the group at offset %zu",
                               group_at);
            goto out;
        }
        rc = sbx_buf_add(out, bytes, (size_t)nbytes, err);
        if (rc < 0)
            goto out;
        done = padding > 0;
        group = 0;
        have = 0;
        padding = 0;
    }
    if (have != 0)
        rc = sbx_error_set(err, SBX_E_PARSE, 0, "base64: truncated group at offset %zu", group_at);
out:
    if (rc < 0)
        sbx_buf_setlen(out, start);
    return rc;
}
