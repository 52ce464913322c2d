/* WebSocket framing (sandbox/wire/ws.c): the examples of RFC 6455 (section 1.3's accept key,
 * section 5.7's frames), the opening handshake and every way an answer can be wrong, the
 * decoder fed whole, byte by byte and split at every offset, every protocol error, the limits,
 * the masked encoder and the close handshake. */
#include <stdlib.h>
#include <string.h>

#include "sandbox/wire/wire.h"
#include "sandbox/wire/ws.h"
#include "sbx/b64.h"
#include "tap.h"

/* ---- helpers: the server's side of the wire ---- */

/* Append an unmasked (server) frame; len_form 0: the shortest length form, 16 or 64: that one. */
static void server_frame(struct sbx_buf *b, int b0, const void *p, size_t n, int len_form)
{
    uint8_t h[10];
    size_t hl = 2;
    h[0] = (uint8_t)b0;
    if (len_form == 0 && n < 126) {
        h[1] = (uint8_t)n;
    } else if (len_form == 16 || (len_form == 0 && n <= 0xffff)) {
        h[1] = 126, h[2] = (uint8_t)(n >> 8), h[3] = (uint8_t)n, hl = 4;
    } else {
        h[1] = 127, hl = 10;
        for (int i = 0; i < 8; i++)
            h[2 + i] = (uint8_t)((uint64_t)n >> (56 - 8 * i));
    }
    if (sbx_buf_add(b, h, hl, NULL) < 0 || sbx_buf_add(b, p, n, NULL) < 0)
        abort();
}

/* Parse one client frame at p (must be masked): returns its size, 0 if malformed. */
static size_t client_frame(const uint8_t *p, size_t n, int *b0, struct sbx_buf *payload)
{
    if (n < 6 || !(p[1] & 0x80))
        return 0;
    uint64_t len = p[1] & 0x7f;
    size_t h = 2;
    if (len == 126)
        len = (uint64_t)p[2] << 8 | p[3], h = 4;
    else if (len == 127)
        for (len = 0, h = 2; h < 10; h++)
            len = len << 8 | p[h];
    if (n < h + 4 + len)
        return 0;
    const uint8_t *mask = p + h;
    sbx_buf_reset(payload);
    for (size_t i = 0; i < len; i++) {
        char c = (char)(p[h + 4 + i] ^ mask[i & 3]);
        if (sbx_buf_addch(payload, c, NULL) < 0)
            abort();
    }
    *b0 = p[0];
    return h + 4 + (size_t)len;
}

/* Decode the whole stream in pieces of step bytes (0: whole) and log what came out:
 * "T<len>:<text>|", "B<len>|", "P<len>|", "O<len>|" (pong), "C<code>:<reason>|", then "E:<msg>"
 * on an error. */
static int as_server; /* decode a client's frames (the sbx-node daemon's side) */

static void decode_log(const uint8_t *p, size_t n, size_t step, size_t max, struct sbx_buf *log)
{
    struct sbx__ws_decoder d;
    struct sbx_error err = SBX_ERROR_INIT;
    sbx__ws_decoder_init(&d, max);
    d.server = as_server;
    sbx_buf_reset(log);
    if (step == 0)
        step = n ? n : 1;
    int rc = 0;
    for (size_t off = 0; off < n && rc == 0;) {
        size_t k = n - off < step ? n - off : step;
        size_t used = 0;
        while (used < k) {
            struct sbx__ws_msg m;
            long u = sbx__ws_decode(&d, p + off + used, k - used, &m, &err);
            if (u <= 0) {
                (void)sbx_buf_addf(log, NULL, "E:%s", err.msg);
                rc = -1;
                break;
            }
            used += (size_t)u;
            switch (m.opcode) {
            case SBX__WS_TEXT:
                (void)sbx_buf_addf(log, NULL, "T%zu:%.*s|", m.len, (int)(m.len < 40 ? m.len : 40),
                                   (const char *)m.data);
                break;
            case SBX__WS_BINARY:
                (void)sbx_buf_addf(log, NULL, "B%zu|", m.len);
                break;
            case SBX__WS_PING:
                (void)sbx_buf_addf(log, NULL, "P%zu|", m.len);
                break;
            case SBX__WS_PONG:
                (void)sbx_buf_addf(log, NULL, "O%zu|", m.len);
                break;
            case SBX__WS_CLOSE:
                (void)sbx_buf_addf(log, NULL, "C%d:%s|", m.close_code, m.reason);
                break;
            default:
                break;
            }
        }
        off += k;
    }
    sbx__ws_decoder_release(&d);
}

static void expect_log(const uint8_t *p, size_t n, size_t max, const char *want, int line)
{
    struct sbx_buf log;
    sbx_buf_init(&log, SBX_BUF_NOLIMIT);
    decode_log(p, n, 0, max, &log);
    if (!tap__result(strcmp(log.data, want) == 0 || (want[0] == '~' && strstr(log.data, want + 1)),
                     __FILE__, line, want))
        printf("#   got: %s\n", log.data);
    sbx_buf_release(&log);
}
#define EXPECT(p, n, want) expect_log(p, n, 0, want, __LINE__)

/* ---- the handshake ---- */

static void test_accept_example(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char acc[SBX__WS_ACCEPT_LEN + 1];
    CHECK_OK(sbx__ws_accept_for("dGhlIHNhbXBsZSBub25jZQ==", acc, &err), &err);
    CHECK_EQ_STR(acc, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
}

static void test_handshake_init(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__ws_handshake a, b;
    char acc[SBX__WS_ACCEPT_LEN + 1];
    struct sbx_buf raw;
    sbx_buf_init(&raw, 64);
    CHECK_OK(sbx__ws_handshake_init(&a, &err), &err);
    CHECK_OK(sbx__ws_handshake_init(&b, &err), &err);
    CHECK_EQ_INT(strlen(a.key), SBX__WS_KEY_LEN);
    CHECK_OK(sbx_b64_decode(a.key, strlen(a.key), &raw, &err), &err);
    CHECK_EQ_INT(raw.len, 16);
    CHECK(strcmp(a.key, b.key) != 0);
    CHECK_OK(sbx__ws_accept_for(a.key, acc, &err), &err);
    CHECK_EQ_STR(a.accept, acc);
    sbx_buf_release(&raw);
}

static const struct sbx__ws_handshake example = {"dGhlIHNhbXBsZSBub25jZQ==",
                                                 "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="};
static const char *const k8s[] = {"v5.channel.k8s.io", "v4.channel.k8s.io", NULL};

static void test_request(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_buf b;
    sbx_buf_init(&b, 4096);
    CHECK_OK(sbx__ws_request(&example, "api.example:6443", "/api/v1/x?command=sh", k8s,
                             "Authorization: Bearer t\r\n", &b, &err),
             &err);
    CHECK_EQ_STR(b.data, "GET /api/v1/x?command=sh HTTP/1.1\r\n"
                         "Host: api.example:6443\r\n"
                         "Upgrade: websocket\r\n"
                         "Connection: Upgrade\r\n"
                         "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                         "Sec-WebSocket-Version: 13\r\n"
                         "Sec-WebSocket-Protocol: v5.channel.k8s.io, v4.channel.k8s.io\r\n"
                         "Authorization: Bearer t\r\n"
                         "\r\n");
    sbx_buf_reset(&b);
    CHECK_OK(sbx__ws_request(&example, "h", "/", NULL, NULL, &b, &err), &err);
    CHECK(strstr(b.data, "Protocol") == NULL && strstr(b.data, "\r\n\r\n") != NULL);
    static const char *const bad_proto[] = {"a b", NULL};
    CHECK_ERR(sbx__ws_request(&example, "h\r\nX: y", "/", NULL, NULL, &b, &err), SBX_E_INVAL, &err,
              "host");
    CHECK_ERR(sbx__ws_request(&example, "h", "/a b", NULL, NULL, &b, &err), SBX_E_INVAL, &err,
              "path");
    CHECK_ERR(sbx__ws_request(&example, "h", "x", NULL, NULL, &b, &err), SBX_E_INVAL, &err, "path");
    CHECK_ERR(sbx__ws_request(&example, "h", "/", bad_proto, NULL, &b, &err), SBX_E_INVAL, &err,
              "not a token");
    sbx_buf_release(&b);
}

static void test_head_len(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    const char *h = "HTTP/1.1 101 x\r\nA: b\r\n\r\nframes";
    CHECK_EQ_INT(sbx__ws_head_len(h, strlen(h), &err), strlen(h) - 6);
    CHECK_EQ_INT(sbx__ws_head_len(h, 20, &err), 0);
    char *big = malloc(SBX__WS_HEAD_MAX);
    memset(big, 'a', SBX__WS_HEAD_MAX);
    CHECK_ERR((int)sbx__ws_head_len(big, SBX__WS_HEAD_MAX, &err), SBX_E_TOOBIG, &err, "head over");
    free(big);
}

#define OK_HEAD                                                                          \
    "HTTP/1.1 101 Switching Protocols\r\nupgrade: WebSocket\r\nConnection: keep-alive, " \
    "Upgrade\r\nSEC-WEBSOCKET-ACCEPT:s3pPLMBiTxaQ9kYGzzhZRbK+xOo=  \r\n"

static int check(const char *head, const char *const *protos, int *chosen, struct sbx_error *err)
{
    return sbx__ws_check_response(&example, head, strlen(head), protos, chosen, err);
}

static void test_check_response(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    int chosen = 7;
    CHECK_OK(check(OK_HEAD "\r\n", NULL, &chosen, &err), &err);
    CHECK_EQ_INT(chosen, -1);
    CHECK_OK(check(OK_HEAD "Sec-WebSocket-Protocol: v4.channel.k8s.io\r\n\r\n", k8s, &chosen, &err),
             &err);
    CHECK_EQ_INT(chosen, 1);
    /* Offered but not chosen: allowed, the caller decides. */
    CHECK_OK(check(OK_HEAD "\r\n", k8s, &chosen, &err), &err);
    CHECK_EQ_INT(chosen, -1);

    chosen = 9;
    CHECK_ERR(check("HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\n\r\n", k8s,
                    &chosen, &err),
              SBX_E_API, &err, "websocket upgrade with HTTP 403 Forbidden");
    CHECK_EQ_INT(chosen, 9); /* untouched on failure */
    CHECK_ERR(check("HTTP/1.1 400 \x1b[2J\r\n\r\n", k8s, &chosen, &err), SBX_E_API, &err,
              "HTTP 400 ?[2J");
    CHECK_ERR(check("HTTP/1.1 10x ok\r\n\r\n", NULL, &chosen, &err), SBX_E_PARSE, &err,
              "bad status line");
    CHECK_ERR(check("SSH-2.0-x\r\n\r\n", NULL, &chosen, &err), SBX_E_PARSE, &err,
              "bad status line");
    CHECK_ERR(check("HTTP/1.1 101 x\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: "
                    "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n",
                    NULL, &chosen, &err),
              SBX_E_PARSE, &err, "lacks 'Upgrade: websocket'");
    CHECK_ERR(check("HTTP/1.1 101 x\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n"
                    "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n",
                    NULL, &chosen, &err),
              SBX_E_PARSE, &err, "lacks 'Upgrade: websocket'");
    CHECK_ERR(check("HTTP/1.1 101 x\r\nUpgrade: websocket\r\nConnection: close\r\n"
                    "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n",
                    NULL, &chosen, &err),
              SBX_E_PARSE, &err, "lacks 'Connection: Upgrade'");
    CHECK_ERR(check("HTTP/1.1 101 x\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n", NULL,
                    &chosen, &err),
              SBX_E_PARSE, &err, "0 Sec-WebSocket-Accept headers");
    CHECK_ERR(check(OK_HEAD "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n", NULL,
                    &chosen, &err),
              SBX_E_PARSE, &err, "2 Sec-WebSocket-Accept headers");
    CHECK_ERR(check("HTTP/1.1 101 x\r\nUpgrade: websocket\r\nConnection: upgrade\r\n"
                    "Sec-WebSocket-Accept: AAAPLMBiTxaK9kYGzzhZRbK+xOo=\r\n\r\n",
                    NULL, &chosen, &err),
              SBX_E_PARSE, &err, "'AAAPLMBiTxaK9kYGzzhZRbK+xOo=' does not match");
    CHECK_ERR(
            check(OK_HEAD "Sec-WebSocket-Protocol: v3.channel.k8s.io\r\n\r\n", k8s, &chosen, &err),
            SBX_E_PARSE, &err, "'v3.channel.k8s.io', which was not offered");
    CHECK_ERR(
            check(OK_HEAD "Sec-WebSocket-Protocol: v4.channel.k8s.io\r\n\r\n", NULL, &chosen, &err),
            SBX_E_PARSE, &err, "not offered");
    CHECK_ERR(check(OK_HEAD "Sec-WebSocket-Protocol: v4.channel.k8s.io\r\n"
                            "Sec-WebSocket-Protocol: v5.channel.k8s.io\r\n\r\n",
                    k8s, &chosen, &err),
              SBX_E_PARSE, &err, "several subprotocols");
    CHECK_ERR(check(OK_HEAD "Sec-WebSocket-Extensions: permessage-deflate\r\n\r\n", NULL, &chosen,
                    &err),
              SBX_E_PARSE, &err, "extension 'permessage-deflate'");
    CHECK_ERR(check(OK_HEAD "X-A: 1\r\n  folded\r\n\r\n", NULL, &chosen, &err), SBX_E_PARSE, &err,
              "folds a header");
    CHECK_ERR(check(OK_HEAD "no colon here\r\n\r\n", NULL, &chosen, &err), SBX_E_PARSE, &err,
              "bad header line 'no colon here'");
    CHECK_ERR(check(OK_HEAD "Bad Name: x\r\n\r\n", NULL, &chosen, &err), SBX_E_PARSE, &err,
              "bad header line");
    CHECK_ERR(check(OK_HEAD "X-A: a\rb\r\n\r\n", NULL, &chosen, &err), SBX_E_PARSE, &err,
              "stray CR");
    CHECK_ERR(check(OK_HEAD "X-A: a\x01\r\n\r\n", NULL, &chosen, &err), SBX_E_PARSE, &err,
              "control character in header 'X-A'");
    static const char nul[] = OK_HEAD "X-A: a\0b\r\n\r\n";
    CHECK_ERR(sbx__ws_check_response(&example, nul, sizeof(nul) - 1, NULL, &chosen, &err),
              SBX_E_PARSE, &err, "NUL");
    CHECK_ERR(sbx__ws_check_response(&example, OK_HEAD, strlen(OK_HEAD), NULL, &chosen, &err),
              SBX_E_PARSE, &err, "cut short");
}

/* ---- frames: RFC 6455 section 5.7 ---- */

static void test_rfc_examples(void)
{
    static const uint8_t hello[] = {0x81, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f};
    static const uint8_t masked[] = {0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d,
                                     0x7f, 0x9f, 0x4d, 0x51, 0x58};
    static const uint8_t frag[] = {0x01, 0x03, 0x48, 0x65, 0x6c, 0x80, 0x02, 0x6c, 0x6f};
    static const uint8_t ping[] = {0x89, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f};
    static const uint8_t pong[] = {0x8a, 0x85, 0x37, 0xfa, 0x21, 0x3d,
                                   0x7f, 0x9f, 0x4d, 0x51, 0x58};
    static const uint8_t mask[4] = {0x37, 0xfa, 0x21, 0x3d};
    EXPECT(hello, sizeof(hello), "T5:Hello|");
    EXPECT(frag, sizeof(frag), "T5:Hello|");
    EXPECT(ping, sizeof(ping), "P5|");
    /* A masked frame is a client's: from a server it is refused. */
    EXPECT(masked, sizeof(masked), "~masked frame");
    EXPECT(pong, sizeof(pong), "~masked frame");
    /* The encoder produces the examples' masked frames exactly. */
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_buf b;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    CHECK_OK(sbx__ws_frame_masked(&b, SBX__WS_TEXT, 1, "Hello", 5, mask, &err), &err);
    CHECK_EQ_MEM(b.data, b.len, masked, sizeof(masked));
    sbx_buf_reset(&b);
    CHECK_OK(sbx__ws_frame_masked(&b, SBX__WS_PONG, 1, "Hello", 5, mask, &err), &err);
    CHECK_EQ_MEM(b.data, b.len, pong, sizeof(pong));
    /* 256 bytes and 64 KiB in one unmasked binary frame: 16- and 64-bit lengths. */
    uint8_t *data = calloc(1, 65536);
    sbx_buf_reset(&b);
    server_frame(&b, 0x82, data, 256, 0);
    CHECK(memcmp(b.data, "\x82\x7e\x01\x00", 4) == 0);
    EXPECT((const uint8_t *)b.data, b.len, "B256|");
    sbx_buf_reset(&b);
    server_frame(&b, 0x82, data, 65536, 0);
    CHECK(memcmp(b.data, "\x82\x7f\x00\x00\x00\x00\x00\x01\x00\x00", 10) == 0);
    EXPECT((const uint8_t *)b.data, b.len, "B65536|");
    /* The encoder's length forms for the same sizes. */
    sbx_buf_reset(&b);
    CHECK_OK(sbx__ws_frame_masked(&b, SBX__WS_BINARY, 1, data, 256, mask, &err), &err);
    CHECK(b.len == 4 + 4 + 256 && memcmp(b.data, "\x82\xfe\x01\x00", 4) == 0);
    sbx_buf_reset(&b);
    CHECK_OK(sbx__ws_frame_masked(&b, SBX__WS_BINARY, 1, data, 65536, mask, &err), &err);
    CHECK(b.len == 10 + 4 + 65536 &&
          memcmp(b.data, "\x82\xff\x00\x00\x00\x00\x00\x01\x00\x00", 10) == 0);
    sbx_buf_reset(&b);
    CHECK_OK(sbx__ws_frame_masked(&b, SBX__WS_BINARY, 0, data, 125, mask, &err), &err);
    CHECK(b.len == 2 + 4 + 125 && memcmp(b.data, "\x02\xfd", 2) == 0);
    free(data);
    sbx_buf_release(&b);
}

static void test_encoder(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_buf b;
    uint8_t big[126] = {0};
    static const uint8_t mask[4] = {1, 2, 3, 4};
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    CHECK_ERR(sbx__ws_frame_masked(&b, SBX__WS_PING, 1, big, 126, mask, &err), SBX_E_INVAL, &err,
              "at most 125");
    CHECK_ERR(sbx__ws_frame_masked(&b, SBX__WS_CLOSE, 0, big, 2, mask, &err), SBX_E_INVAL, &err,
              "in one frame");
    CHECK_ERR(sbx__ws_frame_masked(&b, 3, 1, big, 2, mask, &err), SBX_E_INVAL, &err, "reserved");
    CHECK_EQ_INT(b.len, 0);
    /* Fresh masks: two frames of the same payload differ (2^-32 chance of a false failure). */
    CHECK_OK(sbx__ws_frame(&b, SBX__WS_TEXT, 1, "same", 4, &err), &err);
    CHECK_OK(sbx__ws_frame(&b, SBX__WS_TEXT, 1, "same", 4, &err), &err);
    CHECK(b.len == 20 && (b.data[1] & 0x80) && memcmp(b.data + 2, b.data + 12, 4) != 0);
    struct sbx_buf pl;
    sbx_buf_init(&pl, 64);
    int b0 = 0;
    CHECK_EQ_INT(client_frame((const uint8_t *)b.data, b.len, &b0, &pl), 10);
    CHECK(b0 == 0x81 && strcmp(pl.data, "same") == 0);
    /* The limit of the output buffer holds. */
    struct sbx_buf small;
    sbx_buf_init(&small, 8);
    CHECK_ERR(sbx__ws_frame(&small, SBX__WS_TEXT, 1, "0123456789", 10, &err), SBX_E_TOOBIG, &err,
              NULL);
    sbx_buf_release(&small);
    sbx_buf_release(&pl);
    sbx_buf_release(&b);
}

/* A stream with every kind of event; feeding it in any pieces gives the same log. */
static void test_split_everywhere(void)
{
    struct sbx_buf s, whole, piece;
    sbx_buf_init(&s, SBX_BUF_NOLIMIT);
    sbx_buf_init(&whole, SBX_BUF_NOLIMIT);
    sbx_buf_init(&piece, SBX_BUF_NOLIMIT);
    uint8_t data[300];
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (uint8_t)i;
    server_frame(&s, 0x01, "h\xc3", 2, 0);   /* text, split inside a UTF-8 sequence */
    server_frame(&s, 0x89, "p", 1, 0);       /* a ping between the fragments */
    server_frame(&s, 0x00, "\xa9llo", 4, 0); /* continuation */
    server_frame(&s, 0x80, "", 0, 0);        /* the final, empty, fragment */
    server_frame(&s, 0x82, data, 300, 0);    /* binary, 16-bit length */
    server_frame(&s, 0x8a, "", 0, 0);        /* an empty pong */
    server_frame(&s, 0x81, "", 0, 0);        /* an empty text message */
    server_frame(&s, 0x88,
                 "\x03\xe8"
                 "bye",
                 5, 0); /* close 1000 "bye" */
    const uint8_t *p = (const uint8_t *)s.data;
    const char *want = "P1|T6:h\xc3\xa9llo|B300|O0|T0:|C1000:bye|";
    decode_log(p, s.len, 0, 0, &whole);
    CHECK_EQ_STR(whole.data, want);
    size_t bad = 0;
    for (size_t step = 1; step <= s.len; step++) {
        decode_log(p, s.len, step, 0, &piece);
        if (strcmp(piece.data, want) != 0 && bad++ < 3)
            printf("# step %zu: %s\n", step, piece.data);
    }
    CHECK_EQ_INT(bad, 0);
    /* Two pieces, split at every offset. */
    bad = 0;
    for (size_t cut = 1; cut < s.len; cut++) {
        struct sbx__ws_decoder d;
        struct sbx_error err = SBX_ERROR_INIT;
        struct sbx_buf log;
        sbx_buf_init(&log, 4096);
        sbx__ws_decoder_init(&d, 0);
        size_t bounds[3] = {0, cut, s.len};
        for (int part = 0; part < 2; part++)
            for (size_t off = bounds[part]; off < bounds[part + 1];) {
                struct sbx__ws_msg m;
                long u = sbx__ws_decode(&d, p + off, bounds[part + 1] - off, &m, &err);
                if (u <= 0) {
                    bad++;
                    break;
                }
                off += (size_t)u;
                if (m.opcode)
                    (void)sbx_buf_addf(&log, NULL, "%d:%zu|", m.opcode, m.len);
            }
        if (strcmp(log.data, "9:1|1:6|2:300|10:0|1:0|8:5|") != 0 && bad++ < 3)
            printf("# cut %zu: %s\n", cut, log.data);
        sbx_buf_release(&log);
        sbx__ws_decoder_release(&d);
    }
    CHECK_EQ_INT(bad, 0);
    sbx_buf_release(&s);
    sbx_buf_release(&whole);
    sbx_buf_release(&piece);
}

static void frame_expect(int b0, const char *p, size_t n, int len_form, const char *want, int line)
{
    struct sbx_buf s;
    sbx_buf_init(&s, SBX_BUF_NOLIMIT);
    server_frame(&s, b0, p, n, len_form);
    expect_log((const uint8_t *)s.data, s.len, 0, want, line);
    sbx_buf_release(&s);
}
#define FRAME(b0, p, n, form, want) frame_expect(b0, p, n, form, want, __LINE__)

static void test_protocol_errors(void)
{
    FRAME(0xc1, "x", 1, 0, "~reserved bits 0x40");
    FRAME(0x91, "x", 1, 0, "~reserved bits 0x10");
    FRAME(0x83, "x", 1, 0, "~reserved opcode 0x3");
    FRAME(0x8b, "x", 1, 0, "~reserved opcode 0xb");
    FRAME(0x09, "x", 1, 0, "~fragmented a control frame");
    FRAME(0x80, "x", 1, 0, "~continuation frame with no message");
    FRAME(0x81, "hello", 5, 16, "~length 5 in 16 bits");
    FRAME(0x82, "hello", 5, 64, "~length 5 in 64 bits");
    char long_ping[126] = {0};
    FRAME(0x89, long_ping, 126, 0, "~control frame (opcode 0x9) over 125 bytes");
    FRAME(0x81, "\xc0\x80", 2, 0, "~text message that is not UTF-8");
    FRAME(0x81, "\xed\xa0\x80", 3, 0, "~not UTF-8");
    FRAME(0x88, "\x03", 1, 0, "~close frame of one byte");
    FRAME(0x88, "\x03\xe8\xff", 3, 0, "~close reason is not UTF-8");
    /* Invalid close codes. */
    static const int bad_codes[] = {0, 999, 1004, 1005, 1006, 1015, 1016, 2999, 5000, 65535};
    for (size_t i = 0; i < sizeof(bad_codes) / sizeof(bad_codes[0]); i++) {
        char body[2] = {(char)(bad_codes[i] >> 8), (char)bad_codes[i]};
        char want[64];
        snprintf(want, sizeof(want), "~invalid close code %d", bad_codes[i]);
        FRAME(0x88, body, 2, 0, want);
    }
    static const int good_codes[] = {1000, 1001, 1002, 1003, 1007, 1011, 1014, 3000, 4999};
    for (size_t i = 0; i < sizeof(good_codes) / sizeof(good_codes[0]); i++) {
        char body[2] = {(char)(good_codes[i] >> 8), (char)good_codes[i]};
        char want[64];
        snprintf(want, sizeof(want), "C%d:|", good_codes[i]);
        FRAME(0x88, body, 2, 0, want);
    }
    FRAME(0x88, "", 0, 0, "C1005:|");
    /* A 64-bit length with the top bit set. */
    static const uint8_t top[] = {0x82, 0x7f, 0x80, 0, 0, 0, 0, 0, 0, 0};
    EXPECT(top, sizeof(top), "~64-bit length with its top bit set");
    /* A new message inside a fragmented one; anything after the close. */
    struct sbx_buf s;
    sbx_buf_init(&s, SBX_BUF_NOLIMIT);
    server_frame(&s, 0x01, "a", 1, 0);
    server_frame(&s, 0x82, "b", 1, 0);
    EXPECT((const uint8_t *)s.data, s.len, "~new message before finishing");
    sbx_buf_reset(&s);
    server_frame(&s, 0x88, "", 0, 0);
    server_frame(&s, 0x89, "", 0, 0);
    EXPECT((const uint8_t *)s.data, s.len,
           "C1005:|E:websocket: the server sent more after its close frame");
    sbx_buf_release(&s);
}

static void test_decoder_state(void)
{
    struct sbx__ws_decoder d;
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__ws_msg m;
    static const uint8_t masked[] = {0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d,
                                     0x7f, 0x9f, 0x4d, 0x51, 0x58};
    static const uint8_t hello[] = {0x81, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f};
    sbx__ws_decoder_init(&d, 0);
    CHECK(sbx__ws_decoder_idle(&d));
    CHECK_EQ_INT(sbx__ws_decode(&d, hello, 3, &m, &err), 3);
    CHECK(m.opcode == 0 && !sbx__ws_decoder_idle(&d));
    CHECK_EQ_INT(sbx__ws_decode(&d, hello + 3, 4, &m, &err), 4);
    CHECK(m.opcode == SBX__WS_TEXT && m.len == 5 && sbx__ws_decoder_idle(&d));
    /* Once failed, it stays failed with the same error, and asks for close code 1002. */
    CHECK_ERR((int)sbx__ws_decode(&d, masked, sizeof(masked), &m, &err), SBX_E_PARSE, &err,
              "masked");
    CHECK_EQ_INT(d.fail_close, SBX__WS_CLOSE_PROTOCOL);
    CHECK_ERR((int)sbx__ws_decode(&d, hello, sizeof(hello), &m, &err), SBX_E_PARSE, &err, "masked");
    CHECK(!sbx__ws_decoder_idle(&d));
    sbx__ws_decoder_release(&d);
}

static void test_limits(void)
{
    struct sbx_buf s;
    sbx_buf_init(&s, SBX_BUF_NOLIMIT);
    char data[100] = {0};
    /* One frame over the limit is refused from its header, before any payload. */
    server_frame(&s, 0x82, data, 100, 0);
    struct sbx__ws_decoder d;
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__ws_msg m;
    sbx__ws_decoder_init(&d, 64);
    CHECK_ERR((int)sbx__ws_decode(&d, (const uint8_t *)s.data, 2, &m, &err), SBX_E_TOOBIG, &err,
              "exceeds the limit of 64 bytes");
    CHECK_EQ_INT(d.fail_close, SBX__WS_CLOSE_TOO_BIG);
    sbx__ws_decoder_release(&d);
    /* Exactly the limit is fine; over it across fragments is not. */
    expect_log((const uint8_t *)s.data, s.len, 100, "B100|", __LINE__);
    sbx_buf_reset(&s);
    server_frame(&s, 0x02, data, 60, 0);
    server_frame(&s, 0x80, data, 5, 0);
    expect_log((const uint8_t *)s.data, s.len, 64, "~exceeds the limit of 64", __LINE__);
    expect_log((const uint8_t *)s.data, s.len, 65, "B65|", __LINE__);
    /* A 2^62-byte claim: refused, nothing allocated. */
    static const uint8_t huge[] = {0x82, 0x7f, 0x40, 0, 0, 0, 0, 0, 0, 0};
    EXPECT(huge, sizeof(huge), "~exceeds the limit of 4194304 bytes");
    sbx_buf_release(&s);
}

/* ---- the connection: replies and the close handshake ---- */

/* The frames waiting in ws->out as "<b0 hex>:<payload>|", consumed. */
static void drain(struct sbx__ws *ws, struct sbx_buf *log)
{
    struct sbx_buf pl;
    sbx_buf_init(&pl, 256);
    sbx_buf_reset(log);
    size_t off = 0;
    while (off < ws->out.len) {
        int b0 = 0;
        size_t k = client_frame((const uint8_t *)ws->out.data + off, ws->out.len - off, &b0, &pl);
        if (!k) {
            if (sbx_buf_adds(log, "BAD", NULL) < 0)
                abort();
            break;
        }
        (void)sbx_buf_addf(log, NULL, "%02x:", b0);
        for (size_t i = 0; i < pl.len; i++)
            (void)sbx_buf_addf(log, NULL,
                               (unsigned char)pl.data[i] < 0x20 || (unsigned char)pl.data[i] >= 0x7f
                                       ? "\\%02x"
                                       : "%c",
                               (unsigned char)pl.data[i]);
        if (sbx_buf_addch(log, '|', NULL) < 0)
            abort();
        off += k;
    }
    sbx_buf_consume(&ws->out, ws->out.len);
    sbx_buf_release(&pl);
}

static long recv_all(struct sbx__ws *ws, const struct sbx_buf *s, struct sbx__ws_msg *last,
                     struct sbx_error *err)
{
    size_t off = 0;
    while (off < s->len) {
        long u = sbx__ws_recv(ws, (const uint8_t *)s->data + off, s->len - off, last, err);
        if (u < 0)
            return u;
        off += (size_t)u;
    }
    return 0;
}

static void test_connection(void)
{
    struct sbx__ws ws;
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__ws_msg m;
    struct sbx_buf s, log;
    sbx_buf_init(&s, SBX_BUF_NOLIMIT);
    sbx_buf_init(&log, SBX_BUF_NOLIMIT);

    /* A ping is answered with a pong of the same payload; the server's close is echoed. */
    sbx__ws_init(&ws, 0);
    server_frame(&s, 0x89, "abc", 3, 0);
    CHECK_OK((int)recv_all(&ws, &s, &m, &err), &err);
    CHECK_EQ_INT(m.opcode, SBX__WS_PING);
    drain(&ws, &log);
    CHECK_EQ_STR(log.data, "8a:abc|");
    CHECK_OK(sbx__ws_send(&ws, SBX__WS_TEXT, "hi", 2, &err), &err);
    CHECK_OK(sbx__ws_send(&ws, SBX__WS_BINARY, "\x01\x02", 2, &err), &err);
    CHECK_OK(sbx__ws_ping(&ws, "", 0, &err), &err);
    drain(&ws, &log);
    CHECK_EQ_STR(log.data, "81:hi|82:\\01\\02|89:|");
    sbx_buf_reset(&s);
    server_frame(&s, 0x88, "\x0f\xa1gone", 6, 0); /* 4001 "gone" */
    CHECK_OK((int)recv_all(&ws, &s, &m, &err), &err);
    CHECK(ws.state == SBX__WS_CLOSED && ws.peer_code == 4001 &&
          strcmp(ws.peer_reason, "gone") == 0);
    drain(&ws, &log);
    CHECK_EQ_STR(log.data, "88:\\0f\\a1|");
    CHECK_ERR(sbx__ws_send(&ws, SBX__WS_TEXT, "late", 4, &err), SBX_E_INVAL, &err, "closing");
    CHECK_OK(sbx__ws_close(&ws, 1000, NULL, &err), &err); /* already done: nothing more */
    CHECK_EQ_INT(ws.out.len, 0);
    sbx__ws_release(&ws);

    /* sbx closes first: CLOSING until the server's close, which is not echoed. */
    sbx__ws_init(&ws, 0);
    CHECK_OK(sbx__ws_close(&ws, 1000, "done", &err), &err);
    CHECK_EQ_INT(ws.state, SBX__WS_CLOSING);
    drain(&ws, &log);
    CHECK_EQ_STR(log.data, "88:\\03\\e8done|");
    CHECK_ERR(sbx__ws_send(&ws, SBX__WS_TEXT, "x", 1, &err), SBX_E_INVAL, &err, "closing");
    sbx_buf_reset(&s);
    server_frame(&s, 0x82, "late data", 9, 0); /* still delivered while closing */
    server_frame(&s, 0x89, "", 0, 0);          /* no pong once our close went out */
    server_frame(&s, 0x88, "", 0, 0);
    CHECK_OK((int)recv_all(&ws, &s, &m, &err), &err);
    CHECK(ws.state == SBX__WS_CLOSED && ws.peer_code == SBX__WS_CLOSE_NO_STATUS);
    CHECK_EQ_INT(ws.out.len, 0);
    sbx__ws_release(&ws);

    /* A server's close without a code is echoed without one. */
    sbx__ws_init(&ws, 0);
    sbx_buf_reset(&s);
    server_frame(&s, 0x88, "", 0, 0);
    CHECK_OK((int)recv_all(&ws, &s, &m, &err), &err);
    drain(&ws, &log);
    CHECK_EQ_STR(log.data, "88:|");
    sbx__ws_release(&ws);

    /* A protocol error fails the connection with the close code it calls for. */
    sbx__ws_init(&ws, 0);
    sbx_buf_reset(&s);
    server_frame(&s, 0x81, "\xff", 1, 0);
    CHECK_ERR((int)recv_all(&ws, &s, &m, &err), SBX_E_PARSE, &err, "not UTF-8");
    CHECK_EQ_INT(ws.state, SBX__WS_CLOSED);
    drain(&ws, &log);
    CHECK_EQ_STR(log.data, "88:\\03\\ef|"); /* 1007 */
    sbx__ws_release(&ws);

    /* What may be sent. */
    sbx__ws_init(&ws, 0);
    CHECK_ERR(sbx__ws_send(&ws, SBX__WS_TEXT, "\xc3", 1, &err), SBX_E_INVAL, &err, "UTF-8");
    CHECK_ERR(sbx__ws_send(&ws, SBX__WS_PING, "", 0, &err), SBX_E_INVAL, &err, "not data");
    CHECK_ERR(sbx__ws_close(&ws, 1005, NULL, &err), SBX_E_INVAL, &err, "1005");
    CHECK_ERR(sbx__ws_close(&ws, 0, "why", &err), SBX_E_INVAL, &err, "needs a code");
    char reason[125];
    memset(reason, 'r', 124);
    reason[124] = 0;
    CHECK_ERR(sbx__ws_close(&ws, 1000, reason, &err), SBX_E_INVAL, &err, "at most 123");
    reason[123] = 0;
    CHECK_OK(sbx__ws_close(&ws, 1000, reason, &err), &err);
    CHECK_EQ_INT(ws.out.len, 6 + 125);
    sbx__ws_release(&ws);

    /* A server pinging faster than the caller drains runs into the output limit. */
    sbx__ws_init(&ws, 1024);
    sbx_buf_reset(&s);
    char pay[125] = {0};
    for (int i = 0; i < 1000; i++)
        server_frame(&s, 0x89, pay, sizeof(pay), 0);
    CHECK_ERR((int)recv_all(&ws, &s, &m, &err), SBX_E_TOOBIG, &err, NULL);
    CHECK_EQ_INT(ws.state, SBX__WS_CLOSED);
    sbx__ws_release(&ws);

    sbx_buf_release(&s);
    sbx_buf_release(&log);
}

static void test_utf8(void)
{
#define U(s, ok) CHECK_EQ_INT(sbx__wire_utf8_valid((const uint8_t *)(s), sizeof(s) - 1), ok)
    U("", 1);
    U("plain", 1);
    U("\xc3\xa9", 1);
    U("\xe2\x82\xac", 1);
    U("\xf0\x9f\x98\x80", 1);
    U("\xf4\x8f\xbf\xbf", 1);
    U("\xc0\x80", 0);         /* overlong NUL */
    U("\xe0\x80\xaf", 0);     /* overlong '/' */
    U("\xf0\x80\x80\xaf", 0); /* overlong */
    U("\xed\xa0\x80", 0);     /* surrogate */
    U("\xf4\x90\x80\x80", 0); /* above U+10FFFF */
    U("\xf5\x80\x80\x80", 0);
    U("\x80", 0);
    U("\xc3", 0);
    U("\xe2\x82", 0);
    U("\xc3\x28", 0);
#undef U
    char out[8];
    CHECK_EQ_STR(sbx__wire_clean("a\x1b[b\n", 5, out, sizeof(out)), "a?[b?");
    CHECK_EQ_STR(sbx__wire_clean("0123456789", 10, out, sizeof(out)), "0123...");
}

/* The server side: a client's frames must be masked and are unmasked, split anywhere; sbx's
 * own frames go out unmasked. */
static void test_server_side(void)
{
    static const uint8_t hello[] = {0x81, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f};
    static const uint8_t masked[] = {0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d,
                                     0x7f, 0x9f, 0x4d, 0x51, 0x58};
    static const uint8_t ping[] = {0x89, 0x85, 0x37, 0xfa, 0x21, 0x3d,
                                   0x7f, 0x9f, 0x4d, 0x51, 0x58};
    struct sbx_error err = SBX_ERROR_INIT;
    as_server = 1;
    EXPECT(masked, sizeof(masked), "T5:Hello|");
    EXPECT(hello, sizeof(hello), "~the client sent an unmasked frame");
    /* A fragmented text message with a ping between its fragments, each frame with its own
     * random mask, fed one byte at a time. */
    struct sbx_buf b, log;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    sbx_buf_init(&log, SBX_BUF_NOLIMIT);
    CHECK_OK(sbx__ws_frame(&b, SBX__WS_TEXT, 0, "Hello ", 6, &err), &err);
    CHECK_OK(sbx__ws_frame(&b, SBX__WS_PING, 1, "abc", 3, &err), &err);
    CHECK_OK(sbx__ws_frame(&b, SBX__WS_CONT, 1, "world", 5, &err), &err);
    decode_log((const uint8_t *)b.data, b.len, 1, 0, &log);
    CHECK_EQ_STR(log.data, "P3|T11:Hello world|");
    /* 70000 bytes: a 64-bit length and a mask after it. */
    uint8_t *data = malloc(70000);
    for (size_t i = 0; i < 70000; i++)
        data[i] = (uint8_t)(i * 7);
    sbx_buf_reset(&b);
    CHECK_OK(sbx__ws_frame(&b, SBX__WS_BINARY, 1, data, 70000, &err), &err);
    struct sbx__ws_decoder d;
    struct sbx__ws_msg m;
    sbx__ws_decoder_init(&d, 0);
    d.server = 1;
    long used = sbx__ws_decode(&d, (const uint8_t *)b.data, b.len, &m, &err);
    CHECK_EQ_INT(used, (long)b.len);
    CHECK(m.opcode == SBX__WS_BINARY && m.len == 70000 && memcmp(m.data, data, 70000) == 0);
    sbx__ws_decoder_release(&d);
    free(data);
    as_server = 0;

    /* The connection: a masked ping is answered with an unmasked pong; data goes out unmasked. */
    struct sbx__ws ws;
    sbx__ws_init_server(&ws, 0);
    used = sbx__ws_recv(&ws, ping, sizeof(ping), &m, &err);
    CHECK_EQ_INT(used, (long)sizeof(ping));
    CHECK_EQ_MEM(ws.out.data, ws.out.len, "\x8a\x05Hello", 7);
    sbx_buf_reset(&ws.out);
    CHECK_OK(sbx__ws_send(&ws, SBX__WS_BINARY, "\x01out", 4, &err), &err);
    CHECK_EQ_MEM(ws.out.data, ws.out.len, "\x82\x04\x01out", 6);
    sbx_buf_reset(&ws.out);
    CHECK_OK(sbx__ws_close(&ws, 1000, "done", &err), &err);
    CHECK_EQ_MEM(ws.out.data, ws.out.len,
                 "\x88\x06\x03\xe8"
                 "done",
                 8);
    sbx__ws_release(&ws);
    sbx_buf_release(&b);
    sbx_buf_release(&log);
}

int main(void)
{
    TAP_START();
    TAP_RUN(test_accept_example);
    TAP_RUN(test_handshake_init);
    TAP_RUN(test_request);
    TAP_RUN(test_head_len);
    TAP_RUN(test_check_response);
    TAP_RUN(test_rfc_examples);
    TAP_RUN(test_encoder);
    TAP_RUN(test_split_everywhere);
    TAP_RUN(test_protocol_errors);
    TAP_RUN(test_decoder_state);
    TAP_RUN(test_limits);
    TAP_RUN(test_connection);
    TAP_RUN(test_utf8);
    TAP_RUN(test_server_side);
    return TAP_DONE();
}
