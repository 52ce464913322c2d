/* Docker's multiplexed stream: mux.h. */
#include <string.h>

#include "sandbox/wire/mux.h"

void sbx__mux_init(struct sbx__mux *m, uint32_t max_frame)
{
    memset(m, 0, sizeof(*m));
    m->max_frame = max_frame;
}

int sbx__mux_idle(const struct sbx__mux *m)
{
    return m->hdr_len == 0 && m->left == 0;
}

int sbx__mux_finish(const struct sbx__mux *m, struct sbx_error *err)
{
    if (m->hdr_len)
        return sbx_error_set(err, SBX_E_PARSE, 0,
                             "the multiplexed stream was cut inside a frame header");
    if (m->left)
        return sbx_error_set(err, SBX_E_PARSE, 0,
                             "the multiplexed stream was cut with %u bytes of a frame missing",
                             (unsigned)m->left);
    return 0;
}

void sbx__mux_header(uint8_t out[SBX__MUX_HEADER], int stream, uint32_t len)
{
    out[0] = (uint8_t)stream;
    out[1] = out[2] = out[3] = 0;
    out[4] = (uint8_t)(len >> 24), out[5] = (uint8_t)(len >> 16);
    out[6] = (uint8_t)(len >> 8), out[7] = (uint8_t)len;
}

long sbx__mux_feed(struct sbx__mux *m, const uint8_t *p, size_t n, int *stream,
                   const uint8_t **payload, size_t *plen, struct sbx_error *err)
{
    *payload = NULL;
    *plen = 0;
    *stream = m->stream;
    if (n == 0)
        return 0;
    if (m->left == 0) {
        size_t k = sizeof(m->hdr) - m->hdr_len;
        if (k > n)
            k = n;
        memcpy(m->hdr + m->hdr_len, p, k);
        m->hdr_len += k;
        if (m->hdr_len < sizeof(m->hdr))
            return (long)k;
        if (m->hdr[0] > SBX__MUX_STDERR || m->hdr[1] || m->hdr[2] || m->hdr[3])
            return sbx_error_set(err, SBX_E_PARSE, 0,
                                 "the multiplexed stream has a bad frame header (%02x %02x %02x "
                                 "%02x)",
                                 m->hdr[0], m->hdr[1], m->hdr[2], m->hdr[3]);
        uint32_t len = (uint32_t)m->hdr[4] << 24 | (uint32_t)m->hdr[5] << 16 |
                       (uint32_t)m->hdr[6] << 8 | (uint32_t)m->hdr[7];
        if (m->max_frame && len > m->max_frame)
            return sbx_error_set(err, SBX_E_TOOBIG, 0,
                                 "the multiplexed stream has a frame of %u bytes, over the limit "
                                 "of %u",
                                 (unsigned)len, (unsigned)m->max_frame);
        m->stream = m->hdr[0];
        m->left = len;
        m->hdr_len = 0;
        *stream = m->stream;
        return (long)k;
    }
    size_t k = n < m->left ? n : m->left;
    m->left -= (uint32_t)k;
    *payload = p;
    *plen = k;
    return (long)k;
}
