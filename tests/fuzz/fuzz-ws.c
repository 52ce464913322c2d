/* WebSocket from a server: the frame decoder with reassembly, pings and the close handshake
 * (sbx__ws_recv), or (first byte odd) the opening handshake's answer. The frames are fed twice,
 * whole and in pieces of 1-16 bytes: both must hand out the same messages and end the same
 * way. Every data message is within the limit, every text is UTF-8, every close code valid,
 * and what sbx queues to send is well-formed masked frames, ending in a close once it failed
 * (unless its close had gone out before). */
#include <string.h>

#include "fuzz.h"
#include "sandbox/wire/wire.h"
#include "sandbox/wire/ws.h"

struct outcome {
    uint64_t hash; /* of the messages handed out */
    int rc;
    enum sbx__ws_state state;
};

static uint64_t mix(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211u;
    return h;
}

/* Check the frames sbx queued; returns the opcode of the last one (0: none). */
static int check_out(const struct sbx_buf *out)
{
    const uint8_t *p = (const uint8_t *)out->data;
    size_t off = 0;
    int last = 0;
    while (off < out->len) {
        FUZZ_ASSERT(out->len - off >= 6);
        FUZZ_ASSERT(p[off] & 0x80);     /* FIN: sbx never fragments */
        FUZZ_ASSERT(p[off + 1] & 0x80); /* masked */
        size_t len = p[off + 1] & 0x7f;
        FUZZ_ASSERT(len <= SBX__WS_CONTROL_MAX); /* only control frames here */
        last = p[off] & 0x0f;
        off += 6 + len;
        FUZZ_ASSERT(off <= out->len);
    }
    return last;
}

static void run(const uint8_t *p, size_t n, size_t step, size_t max, struct outcome *o)
{
    struct sbx__ws ws;
    struct sbx_error err = SBX_ERROR_INIT;
    sbx__ws_init(&ws, max);
    o->hash = 14695981039346656037u;
    o->rc = 0;
    for (size_t off = 0; off < n && o->rc == 0;) {
        size_t k = n - off < step ? n - off : step;
        struct sbx__ws_msg m;
        int sent_close = ws.sent_close; /* a failure queues a close unless one went out */
        long used = sbx__ws_recv(&ws, p + off, k, &m, &err);
        if (used < 0) {
            o->rc = (int)used;
            FUZZ_ASSERT(err.msg[0] != '\0');
            FUZZ_ASSERT(ws.state == SBX__WS_CLOSED);
            FUZZ_ASSERT(check_out(&ws.out) == (sent_close ? 0 : SBX__WS_CLOSE));
            break;
        }
        FUZZ_ASSERT(used > 0 && (size_t)used <= k);
        off += (size_t)used;
        if (m.opcode) {
            FUZZ_ASSERT(m.data != NULL);
            if (m.opcode == SBX__WS_TEXT || m.opcode == SBX__WS_BINARY)
                FUZZ_ASSERT(m.len <= ws.dec.max_message);
            else
                FUZZ_ASSERT(m.len <= SBX__WS_CONTROL_MAX);
            if (m.opcode == SBX__WS_TEXT)
                FUZZ_ASSERT(sbx__wire_utf8_valid(m.data, m.len));
            if (m.opcode == SBX__WS_CLOSE) {
                FUZZ_ASSERT(m.close_code == SBX__WS_CLOSE_NO_STATUS ||
                            sbx__ws_close_code_valid(m.close_code));
                FUZZ_ASSERT(ws.state == SBX__WS_CLOSED);
            }
            o->hash = mix(o->hash, &m.opcode, sizeof(m.opcode));
            o->hash = mix(o->hash, m.data, m.len);
        }
        (void)check_out(&ws.out);
        sbx_buf_consume(&ws.out, ws.out.len); /* as a caller that keeps up */
    }
    o->state = ws.state;
    sbx__ws_release(&ws);
}

static void handshake(const uint8_t *p, size_t n)
{
    static const struct sbx__ws_handshake h = {"dGhlIHNhbXBsZSBub25jZQ==",
                                               "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="};
    static const char *const protos[] = {"v5.channel.k8s.io", "v4.channel.k8s.io", NULL};
    struct sbx_error err = SBX_ERROR_INIT;
    long len = sbx__ws_head_len((const char *)p, n, &err);
    if (len <= 0)
        return;
    FUZZ_ASSERT((size_t)len <= n);
    int chosen = -2;
    if (sbx__ws_check_response(&h, (const char *)p, (size_t)len, protos, &chosen, &err) == 0)
        FUZZ_ASSERT(chosen >= -1 && chosen <= 1);
    else
        FUZZ_ASSERT(chosen == -2 && err.msg[0] != '\0');
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    if (data[0] & 1) {
        handshake(data + 1, size - 1);
        return 0;
    }
    size_t step = (size_t)(data[0] >> 1) % 16 + 1;
    size_t max = (size_t)data[1] * 16 + 1;
    struct outcome whole, pieces;
    run(data + 2, size - 2, size, max, &whole);
    run(data + 2, size - 2, step, max, &pieces);
    FUZZ_ASSERT(whole.hash == pieces.hash && whole.rc == pieces.rc);
    FUZZ_ASSERT(whole.state == pieces.state);
    return 0;
}
