/* Kubernetes channel messages as a server (or a client, for the node daemon) sends them. The
 * first byte picks the protocol version and whether the messages are text or binary; the rest
 * is cut into messages by a one-byte length before each. Every message that decodes encodes
 * back to one that decodes the same; the error channel's bytes go through the status decoder
 * at the end, resize messages through the resize decoder. Port-forward: the first byte's top
 * bit, with two ports from the input, as the client side. */
#include <string.h>

#include "fuzz.h"
#include "sandbox/wire/channel.h"
#include "sandbox/wire/ws.h"

static void exec_messages(int version, int opcode, const uint8_t *p, size_t n)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_buf scratch, again, scratch2, status;
    sbx_buf_init(&scratch, 1024);
    sbx_buf_init(&scratch2, 1024);
    sbx_buf_init(&again, 4096);
    sbx_buf_init(&status, SBX__CH_STATUS_MAX);
    size_t off = 0;
    while (off < n) {
        size_t len = p[off++];
        if (len > n - off)
            len = n - off;
        struct sbx__ch_frame f;
        int rc = sbx__ch_decode(version, opcode, p + off, len, &scratch, &f, &err);
        off += len;
        if (rc < 0) {
            FUZZ_ASSERT(err.msg[0] != '\0');
            continue;
        }
        if (f.channel == SBX__CH_NONE || f.channel == SBX__CH_CLOSE) {
            FUZZ_ASSERT(f.channel == SBX__CH_NONE || version == SBX__CH_V5);
            continue;
        }
        FUZZ_ASSERT(f.channel >= 0 && f.channel <= 4);
        sbx_buf_reset(&again);
        FUZZ_ASSERT(sbx__ch_encode(version, f.channel, f.data, f.len, &again, &err) == 0);
        struct sbx__ch_frame g;
        FUZZ_ASSERT(sbx__ch_decode(version, opcode, (const uint8_t *)again.data, again.len,
                                   &scratch2, &g, &err) == 0);
        FUZZ_ASSERT(g.channel == f.channel && g.len == f.len && memcmp(g.data, f.data, f.len) == 0);
        if (f.channel == SBX__CH_ERROR && sbx_buf_add(&status, f.data, f.len, &err) < 0)
            break;
        if (f.channel == SBX__CH_RESIZE) {
            unsigned w = 70000, h = 70000;
            if (sbx__ch_resize_decode(f.data, f.len, &w, &h, &err) == 0)
                FUZZ_ASSERT(w <= 65535 && h <= 65535);
        }
    }
    int code = -5;
    if (sbx__ch_status_decode(version, (const uint8_t *)status.data, status.len, &code, &err) == 0)
        FUZZ_ASSERT(code >= 0);
    else
        FUZZ_ASSERT(code == -5 && err.msg[0] != '\0');
    sbx_buf_release(&scratch);
    sbx_buf_release(&scratch2);
    sbx_buf_release(&again);
    sbx_buf_release(&status);
}

static void portforward(const uint8_t *p, size_t n)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__pf pf;
    if (n < 4)
        return;
    uint16_t ports[2] = {(uint16_t)(p[0] | p[1] << 8), (uint16_t)(p[2] | p[3] << 8)};
    if (sbx__pf_init(&pf, ports, 2, 0, &err) < 0)
        return;
    size_t off = 4;
    while (off < n) {
        size_t len = p[off++];
        if (len > n - off)
            len = n - off;
        struct sbx__pf_frame f;
        if (sbx__pf_decode(&pf, p + off, len, &f, &err) == 0) {
            FUZZ_ASSERT(f.port_index < 2);
            FUZZ_ASSERT(f.data >= p + off && f.data + f.len == p + off + len);
        }
        off += len;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (data[0] & 0x80) {
        portforward(data + 1, size - 1);
        return 0;
    }
    int version = data[0] % 6 + 1;
    int opcode = data[0] & 0x40 ? SBX__WS_TEXT : SBX__WS_BINARY;
    if (data[0] & 0x20)
        opcode = sbx__ch_opcode(version);
    exec_messages(version, opcode, data + 1, size - 1);
    return 0;
}
