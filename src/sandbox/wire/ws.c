/* WebSocket (RFC 6455), client side: the opening handshake, the frame decoder with message
 * reassembly, the masked encoder and the close handshake. No I/O: ws.h. */
#include <strings.h>
#include <string.h>

#include "core/dl-crypto.h"
#include "sandbox/wire/wire.h"
#include "sandbox/wire/ws.h"
#include "sbx/b64.h"
#include "sbx/hash.h"

#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

/* ---------------------------------------------------------------------------------------------
 * The opening handshake */

int sbx__ws_accept_for(const char *key, char out[SBX__WS_ACCEPT_LEN + 1], struct sbx_error *err)
{
    int rc = sbx__crypto_load(err);
    if (rc < 0)
        return rc;
    uint8_t md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx)
        return sbx_error_set(err, SBX_E_SYS, 0, "cannot create a sha-1 context");
    int ok = EVP_DigestInit_ex(ctx, EVP_sha1(), NULL) == 1 &&
             EVP_DigestUpdate(ctx, key, strlen(key)) == 1 &&
             EVP_DigestUpdate(ctx, WS_GUID, strlen(WS_GUID)) == 1 &&
             EVP_DigestFinal_ex(ctx, md, &mdlen) == 1 && mdlen == 20;
    EVP_MD_CTX_free(ctx);
    if (!ok)
        return sbx_error_set(err, SBX_E_SYS, 0, "sha-1 of the websocket key failed");
    struct sbx_buf b;
    sbx_buf_init(&b, SBX__WS_ACCEPT_LEN);
    rc = sbx_b64_encode(md, 20, &b, err);
    if (rc == 0)
        memcpy(out, b.data, SBX__WS_ACCEPT_LEN + 1);
    sbx_buf_release(&b);
    return rc;
}

int sbx__ws_handshake_init(struct sbx__ws_handshake *h, struct sbx_error *err)
{
    uint8_t nonce[16];
    struct sbx_buf b;
    int rc = sbx_random_bytes(nonce, sizeof(nonce), err);
    if (rc < 0)
        return rc;
    sbx_buf_init(&b, SBX__WS_KEY_LEN);
    rc = sbx_b64_encode(nonce, sizeof(nonce), &b, err);
    if (rc == 0) {
        memcpy(h->key, b.data, SBX__WS_KEY_LEN + 1);
        rc = sbx__ws_accept_for(h->key, h->accept, err);
    }
    sbx_buf_release(&b);
    return rc;
}

/* RFC 9110's tchar. */
static int is_tchar(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

static int is_token(const char *s, size_t n)
{
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!is_tchar((unsigned char)s[i]))
            return 0;
    return 1;
}

static int plain_field(const char *s)
{
    if (!s || !*s)
        return 0;
    for (; *s; s++)
        if ((unsigned char)*s <= 0x20 || *s == 0x7f)
            return 0;
    return 1;
}

int sbx__ws_request(const struct sbx__ws_handshake *h, const char *host, const char *path,
                    const char *const *protocols, const char *extra_headers, struct sbx_buf *out,
                    struct sbx_error *err)
{
    if (!plain_field(host))
        return sbx_error_set(err, SBX_E_INVAL, 0, "websocket host '%s' is not a plain name",
                             host ? host : "");
    if (!plain_field(path) || path[0] != '/')
        return sbx_error_set(err, SBX_E_INVAL, 0, "websocket path '%s' is not a plain path",
                             path ? path : "");
    for (size_t i = 0; protocols && protocols[i]; i++)
        if (!is_token(protocols[i], strlen(protocols[i])))
            return sbx_error_set(err, SBX_E_INVAL, 0, "websocket subprotocol '%s' is not a token",
                                 protocols[i]);
    int rc = sbx_buf_addf(out, err,
                          "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\n"
                          "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
                          "Sec-WebSocket-Version: 13\r\n",
                          path, host, h->key);
    for (size_t i = 0; rc == 0 && protocols && protocols[i]; i++)
        rc = sbx_buf_addf(out, err, "%s%s", i ? ", " : "Sec-WebSocket-Protocol: ", protocols[i]);
    if (rc == 0 && protocols && protocols[0])
        rc = sbx_buf_adds(out, "\r\n", err);
    if (rc == 0 && extra_headers)
        rc = sbx_buf_adds(out, extra_headers, err);
    if (rc == 0)
        rc = sbx_buf_adds(out, "\r\n", err);
    return rc;
}

long sbx__ws_head_len(const char *p, size_t n, struct sbx_error *err)
{
    size_t lim = n < SBX__WS_HEAD_MAX ? n : SBX__WS_HEAD_MAX;
    for (size_t i = 3; i < lim; i++)
        if (p[i] == '\n' && p[i - 1] == '\r' && p[i - 2] == '\n' && p[i - 3] == '\r')
            return (long)(i + 1);
    if (n >= SBX__WS_HEAD_MAX)
        return sbx_error_set(err, SBX_E_TOOBIG, 0,
                             "the server's websocket answer has a head over %d bytes",
                             SBX__WS_HEAD_MAX);
    return 0;
}

static void trim(const char **s, size_t *n)
{
    while (*n && (**s == ' ' || **s == '\t'))
        (*s)++, (*n)--;
    while (*n && ((*s)[*n - 1] == ' ' || (*s)[*n - 1] == '\t'))
        (*n)--;
}

static int eq_ci(const char *s, size_t n, const char *lit)
{
    return strlen(lit) == n && strncasecmp(s, lit, n) == 0;
}

/* Does the comma-separated list s[0..n) hold token (case-insensitive)? */
static int list_has(const char *s, size_t n, const char *token)
{
    while (n) {
        const char *comma = memchr(s, ',', n);
        size_t k = comma ? (size_t)(comma - s) : n;
        const char *item = s;
        size_t ilen = k;
        trim(&item, &ilen);
        if (eq_ci(item, ilen, token))
            return 1;
        if (!comma)
            break;
        s += k + 1, n -= k + 1;
    }
    return 0;
}

struct answer {
    int upgrade, connection, accepts, protocols;
    const char *accept, *protocol;
    size_t accept_len, protocol_len;
};

static int header_line(struct answer *a, const char *line, size_t n, struct sbx_error *err)
{
    char shown[64];
    const char *colon = memchr(line, ':', n);
    if (n && (line[0] == ' ' || line[0] == '\t'))
        return sbx_error_set(err, SBX_E_PARSE, 0,
                             "the server's websocket answer folds a header over two lines");
    if (!colon || !is_token(line, (size_t)(colon - line)))
        return sbx_error_set(err, SBX_E_PARSE, 0,
                             "the server's websocket answer has a bad header "
                             "line '%s'",
                             sbx__wire_clean(line, n, shown, sizeof(shown)));
    size_t nlen = (size_t)(colon - line);
    const char *v = colon + 1;
    size_t vlen = n - nlen - 1;
    trim(&v, &vlen);
    for (size_t i = 0; i < vlen; i++)
        if ((unsigned char)v[i] < 0x20 && v[i] != '\t')
            return sbx_error_set(err, SBX_E_PARSE, 0,
                                 "the server's websocket answer has a control character in "
                                 "header '%s'",
                                 sbx__wire_clean(line, nlen, shown, sizeof(shown)));
    if (eq_ci(line, nlen, "upgrade")) {
        a->upgrade |= eq_ci(v, vlen, "websocket");
    } else if (eq_ci(line, nlen, "connection")) {
        a->connection |= list_has(v, vlen, "upgrade");
    } else if (eq_ci(line, nlen, "sec-websocket-accept")) {
        a->accepts++, a->accept = v, a->accept_len = vlen;
    } else if (eq_ci(line, nlen, "sec-websocket-protocol")) {
        a->protocols++, a->protocol = v, a->protocol_len = vlen;
    } else if (eq_ci(line, nlen, "sec-websocket-extensions") && vlen) {
        return sbx_error_set(err, SBX_E_PARSE, 0,
                             "the server's websocket answer names extension '%s', none was offered",
                             sbx__wire_clean(v, vlen, shown, sizeof(shown)));
    }
    return 0;
}

static int status_line(const char *line, size_t n, struct sbx_error *err)
{
    char shown[80];
    if (n < 12 || memcmp(line, "HTTP/1.", 7) != 0 || line[8] != ' ' || line[9] < '1' ||
        line[9] > '5' || line[10] < '0' || line[10] > '9' || line[11] < '0' || line[11] > '9' ||
        (n > 12 && line[12] != ' '))
        return sbx_error_set(err, SBX_E_PARSE, 0,
                             "the server's websocket answer has a bad status line '%s'",
                             sbx__wire_clean(line, n, shown, sizeof(shown)));
    int status = (line[9] - '0') * 100 + (line[10] - '0') * 10 + (line[11] - '0');
    if (status != 101) {
        const char *reason = line + 12;
        size_t rlen = n - 12;
        trim(&reason, &rlen);
        return sbx_error_set(err, SBX_E_API, 0,
                             "the server answered the websocket upgrade with HTTP %d%s%s", status,
                             rlen ? " " : "", sbx__wire_clean(reason, rlen, shown, sizeof(shown)));
    }
    return 0;
}

static int check_answer(const struct sbx__ws_handshake *h, const struct answer *a,
                        const char *const *protocols, int *chosen, struct sbx_error *err)
{
    char shown[64];
    if (!a->upgrade)
        return sbx_error_set(err, SBX_E_PARSE, 0,
                             "the server's websocket answer lacks 'Upgrade: websocket'");
    if (!a->connection)
        return sbx_error_set(err, SBX_E_PARSE, 0,
                             "the server's websocket answer lacks 'Connection: Upgrade'");
    if (a->accepts != 1)
        return sbx_error_set(err, SBX_E_PARSE, 0,
                             "the server's websocket answer has %d Sec-WebSocket-Accept headers, "
                             "not one",
                             a->accepts);
    if (a->accept_len != SBX__WS_ACCEPT_LEN || memcmp(a->accept, h->accept, a->accept_len) != 0)
        return sbx_error_set(err, SBX_E_PARSE, 0,
                             "the server's Sec-WebSocket-Accept '%s' does not match the key sent",
                             sbx__wire_clean(a->accept, a->accept_len, shown, sizeof(shown)));
    *chosen = -1;
    if (a->protocols > 1)
        return sbx_error_set(err, SBX_E_PARSE, 0,
                             "the server's websocket answer names several subprotocols");
    if (a->protocols == 1 && a->protocol_len) {
        for (size_t i = 0; protocols && protocols[i]; i++)
            if (strlen(protocols[i]) == a->protocol_len &&
                memcmp(protocols[i], a->protocol, a->protocol_len) == 0)
                *chosen = (int)i;
        if (*chosen < 0)
            return sbx_error_set(
                    err, SBX_E_PARSE, 0,
                    "the server chose websocket subprotocol '%s', which was not "
                    "offered",
                    sbx__wire_clean(a->protocol, a->protocol_len, shown, sizeof(shown)));
    }
    return 0;
}

int sbx__ws_check_response(const struct sbx__ws_handshake *h, const char *head, size_t head_len,
                           const char *const *protocols, int *chosen, struct sbx_error *err)
{
    struct answer a = {0};
    size_t off = 0;
    int line_no = 0, rc, ch = -1;
    if (head_len < 4 || memcmp(head + head_len - 4, "\r\n\r\n", 4) != 0)
        return sbx_error_set(err, SBX_E_PARSE, 0, "the server's websocket answer is cut short");
    while (off < head_len - 2) {
        const char *line = head + off;
        const char *crlf = memmem(line, head_len - off, "\r\n", 2);
        size_t n = (size_t)(crlf - line);
        if (memchr(line, '\n', n) || memchr(line, '\r', n) || memchr(line, '\0', n))
            return sbx_error_set(err, SBX_E_PARSE, 0,
                                 "the server's websocket answer has a stray CR, LF or NUL");
        rc = line_no++ == 0 ? status_line(line, n, err) : header_line(&a, line, n, err);
        if (rc < 0)
            return rc;
        off += n + 2;
    }
    if ((rc = check_answer(h, &a, protocols, &ch, err)) < 0)
        return rc;
    *chosen = ch;
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * The encoder */

static int opcode_known(int op)
{
    return op == SBX__WS_CONT || op == SBX__WS_TEXT || op == SBX__WS_BINARY ||
           op == SBX__WS_CLOSE || op == SBX__WS_PING || op == SBX__WS_PONG;
}

/* A frame either side sends: masked by a client, plain (mask NULL) by a server. */
static int frame_any(struct sbx_buf *out, int opcode, int fin, const void *p, size_t n,
                     const uint8_t *mask, struct sbx_error *err)
{
    if (!opcode_known(opcode))
        return sbx_error_set(err, SBX_E_INVAL, 0, "websocket opcode %d is reserved", opcode);
    if (opcode >= 8 && (n > SBX__WS_CONTROL_MAX || !fin))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "a websocket control frame carries at most %d bytes in one frame",
                             SBX__WS_CONTROL_MAX);
    uint8_t hdr[14];
    size_t h = 2;
    uint8_t mbit = mask ? 0x80 : 0;
    hdr[0] = (uint8_t)((fin ? 0x80 : 0) | opcode);
    if (n < 126) {
        hdr[1] = (uint8_t)(mbit | n);
    } else if (n <= 0xffff) {
        hdr[1] = mbit | 126;
        hdr[2] = (uint8_t)(n >> 8), hdr[3] = (uint8_t)n;
        h = 4;
    } else {
        hdr[1] = mbit | 127;
        for (int i = 0; i < 8; i++)
            hdr[2 + i] = (uint8_t)((uint64_t)n >> (56 - 8 * i));
        h = 10;
    }
    if (mask) {
        memcpy(hdr + h, mask, 4);
        h += 4;
    }
    if (n > SIZE_MAX - h)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "websocket frame too large");
    int rc = sbx_buf_reserve(out, h + n, err);
    if (rc < 0)
        return rc;
    uint8_t *dst = (uint8_t *)out->data + out->len;
    const uint8_t *src = p;
    memcpy(dst, hdr, h);
    for (size_t i = 0; i < n; i++)
        dst[h + i] = mask ? src[i] ^ mask[i & 3] : src[i];
    sbx_buf_setlen(out, out->len + h + n);
    return 0;
}

int sbx__ws_frame_masked(struct sbx_buf *out, int opcode, int fin, const void *p, size_t n,
                         const uint8_t mask[4], struct sbx_error *err)
{
    return frame_any(out, opcode, fin, p, n, mask, err);
}

int sbx__ws_frame_server(struct sbx_buf *out, int opcode, int fin, const void *p, size_t n,
                         struct sbx_error *err)
{
    return frame_any(out, opcode, fin, p, n, NULL, err);
}

int sbx__ws_frame(struct sbx_buf *out, int opcode, int fin, const void *p, size_t n,
                  struct sbx_error *err)
{
    uint8_t mask[4];
    int rc = sbx_random_bytes(mask, sizeof(mask), err);
    return rc < 0 ? rc : sbx__ws_frame_masked(out, opcode, fin, p, n, mask, err);
}

int sbx__ws_close_code_valid(int code)
{
    return (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1014) ||
           (code >= 3000 && code <= 4999);
}

/* ---------------------------------------------------------------------------------------------
 * The decoder */

void sbx__ws_decoder_init(struct sbx__ws_decoder *d, size_t max_message)
{
    memset(d, 0, sizeof(*d));
    d->max_message = max_message ? max_message : SBX__WS_DEFAULT_MESSAGE;
    sbx_buf_init(&d->msg, d->max_message);
    d->hdr_need = 2;
}

void sbx__ws_decoder_release(struct sbx__ws_decoder *d)
{
    sbx_buf_release(&d->msg);
}

int sbx__ws_decoder_idle(const struct sbx__ws_decoder *d)
{
    return !d->failed && d->hdr_len == 0 && d->msg_opcode == 0;
}

#define PEER(d) ((d)->server ? "client" : "server")
#define FAIL(code, close, ...) \
    (sbx_error_set(&d->fail, code, 0, __VA_ARGS__), failed(d, close, err))

static long failed(struct sbx__ws_decoder *d, int close, struct sbx_error *err)
{
    d->failed = 1;
    d->fail_close = close;
    sbx_error_prefix(&d->fail, "websocket");
    return sbx_error_copy(err, &d->fail);
}

/* The first two header bytes are in: everything they alone decide. */
static long check_start(struct sbx__ws_decoder *d, struct sbx_error *err)
{
    uint8_t b0 = d->hdr[0], b1 = d->hdr[1];
    int op = b0 & 0x0f, len7 = b1 & 0x7f;
    d->fin = b0 >> 7;
    d->opcode = op;
    if (b0 & 0x70)
        return FAIL(SBX_E_PARSE, SBX__WS_CLOSE_PROTOCOL,
                    "the %s set reserved bits 0x%02x of a frame (no extension was agreed)", PEER(d),
                    b0 & 0x70);
    if (!opcode_known(op))
        return FAIL(SBX_E_PARSE, SBX__WS_CLOSE_PROTOCOL, "the %s sent reserved opcode 0x%x",
                    PEER(d), op);
    if (!d->server && (b1 & 0x80))
        return FAIL(SBX_E_PARSE, SBX__WS_CLOSE_PROTOCOL,
                    "the server sent a masked frame (a server's frames are never masked)");
    if (d->server && !(b1 & 0x80))
        return FAIL(SBX_E_PARSE, SBX__WS_CLOSE_PROTOCOL,
                    "the client sent an unmasked frame (a client's frames are always masked)");
    if (op >= 8 && !d->fin)
        return FAIL(SBX_E_PARSE, SBX__WS_CLOSE_PROTOCOL,
                    "the %s fragmented a control frame (opcode 0x%x)", PEER(d), op);
    if (op >= 8 && len7 > SBX__WS_CONTROL_MAX)
        return FAIL(SBX_E_PARSE, SBX__WS_CLOSE_PROTOCOL,
                    "the %s sent a control frame (opcode 0x%x) over %d bytes", PEER(d), op,
                    SBX__WS_CONTROL_MAX);
    if (op == SBX__WS_CONT && !d->msg_opcode)
        return FAIL(SBX_E_PARSE, SBX__WS_CLOSE_PROTOCOL,
                    "the %s sent a continuation frame with no message to continue", PEER(d));
    if ((op == SBX__WS_TEXT || op == SBX__WS_BINARY) && d->msg_opcode)
        return FAIL(SBX_E_PARSE, SBX__WS_CLOSE_PROTOCOL,
                    "the %s started a new message before finishing its fragmented one", PEER(d));
    d->hdr_need = 2 + (len7 == 126 ? 2 : len7 == 127 ? 8 : 0) + (d->server ? 4 : 0);
    return 0;
}

/* The whole header is in: the payload length, in its shortest form, within the limits. */
static long check_length(struct sbx__ws_decoder *d, struct sbx_error *err)
{
    int len7 = d->hdr[1] & 0x7f;
    uint64_t len = (uint64_t)len7;
    if (len7 == 126) {
        len = (uint64_t)d->hdr[2] << 8 | d->hdr[3];
        if (len < 126)
            return FAIL(SBX_E_PARSE, SBX__WS_CLOSE_PROTOCOL,
                        "the %s sent length %u in 16 bits (not the shortest encoding)", PEER(d),
                        (unsigned)len);
    } else if (len7 == 127) {
        len = 0;
        for (int i = 0; i < 8; i++)
            len = len << 8 | d->hdr[2 + i];
        if (len >> 63)
            return FAIL(SBX_E_PARSE, SBX__WS_CLOSE_PROTOCOL,
                        "the %s sent a 64-bit length with its top bit set", PEER(d));
        if (len <= 0xffff)
            return FAIL(SBX_E_PARSE, SBX__WS_CLOSE_PROTOCOL,
                        "the %s sent length %u in 64 bits (not the shortest encoding)", PEER(d),
                        (unsigned)len);
    }
    if (d->opcode < 8 && len > d->max_message - d->msg.len)
        return FAIL(SBX_E_TOOBIG, SBX__WS_CLOSE_TOO_BIG,
                    "the %s's message exceeds the limit of %zu bytes", PEER(d), d->max_message);
    if (d->opcode == SBX__WS_TEXT || d->opcode == SBX__WS_BINARY)
        d->msg_opcode = d->opcode;
    if (d->server)
        memcpy(d->mask, d->hdr + d->hdr_need - 4, 4);
    d->mask_at = 0;
    d->left = len;
    return 0;
}

/* A frame's payload is complete: hand out what it completes. */
static long frame_done(struct sbx__ws_decoder *d, struct sbx__ws_msg *msg, struct sbx_error *err)
{
    int op = d->opcode;
    d->hdr_len = 0, d->hdr_need = 2;
    if (op >= 8) {
        msg->opcode = op;
        msg->data = d->ctl;
        msg->len = d->ctl_len;
        d->ctl[d->ctl_len] = 0;
        d->ctl_len = 0;
        if (op != SBX__WS_CLOSE)
            return 0;
        msg->close_code = SBX__WS_CLOSE_NO_STATUS;
        msg->reason = "";
        if (msg->len == 1)
            return FAIL(SBX_E_PARSE, SBX__WS_CLOSE_PROTOCOL,
                        "the %s sent a close frame of one byte", PEER(d));
        if (msg->len >= 2) {
            msg->close_code = d->ctl[0] << 8 | d->ctl[1];
            if (!sbx__ws_close_code_valid(msg->close_code))
                return FAIL(SBX_E_PARSE, SBX__WS_CLOSE_PROTOCOL,
                            "the %s sent invalid close code %d", PEER(d), msg->close_code);
            if (!sbx__wire_utf8_valid(d->ctl + 2, msg->len - 2))
                return FAIL(SBX_E_PARSE, SBX__WS_CLOSE_BAD_DATA,
                            "the %s's close reason is not UTF-8", PEER(d));
            msg->reason = (const char *)d->ctl + 2;
        }
        d->got_close = 1;
        return 0;
    }
    if (!d->fin)
        return 0;
    if (d->msg_opcode == SBX__WS_TEXT &&
        !sbx__wire_utf8_valid((const uint8_t *)d->msg.data, d->msg.len))
        return FAIL(SBX_E_PARSE, SBX__WS_CLOSE_BAD_DATA,
                    "the %s sent a text message that is not UTF-8", PEER(d));
    msg->opcode = d->msg_opcode;
    msg->data = (const uint8_t *)d->msg.data;
    msg->len = d->msg.len;
    d->msg_opcode = 0;
    d->deliver_msg = 1;
    return 0;
}

long sbx__ws_decode(struct sbx__ws_decoder *d, const uint8_t *p, size_t n, struct sbx__ws_msg *msg,
                    struct sbx_error *err)
{
    memset(msg, 0, sizeof(*msg));
    if (d->failed)
        return sbx_error_copy(err, &d->fail);
    if (d->deliver_msg) {
        sbx_buf_reset(&d->msg);
        d->deliver_msg = 0;
    }
    size_t used = 0;
    long rc;
    while (used < n) {
        if (d->hdr_len < d->hdr_need) {
            if (d->got_close)
                return FAIL(SBX_E_PARSE, SBX__WS_CLOSE_PROTOCOL,
                            "the %s sent more after its close frame", PEER(d));
            size_t k = d->hdr_need - d->hdr_len;
            k = k < n - used ? k : n - used;
            memcpy(d->hdr + d->hdr_len, p + used, k);
            d->hdr_len += k, used += k;
            if (d->hdr_len == 2 && d->hdr_need == 2 && (rc = check_start(d, err)) < 0)
                return rc;
            if (d->hdr_len < d->hdr_need)
                continue;
            if ((rc = check_length(d, err)) < 0)
                return rc;
        } else {
            size_t k = d->left < n - used ? (size_t)d->left : n - used;
            uint8_t *dst;
            if (d->opcode >= 8) {
                dst = d->ctl + d->ctl_len;
                memcpy(dst, p + used, k);
                d->ctl_len += k;
            } else if (sbx_buf_add(&d->msg, p + used, k, &d->fail) < 0) {
                return failed(d, SBX__WS_CLOSE_TOO_BIG, err);
            } else {
                dst = (uint8_t *)d->msg.data + d->msg.len - k;
            }
            for (size_t i = 0; d->server && i < k; i++)
                dst[i] ^= d->mask[d->mask_at++ & 3];
            d->left -= k, used += k;
        }
        if (d->left == 0) {
            if ((rc = frame_done(d, msg, err)) < 0)
                return rc;
            if (msg->opcode)
                break;
        }
    }
    return (long)used;
}

/* ---------------------------------------------------------------------------------------------
 * The connection */

void sbx__ws_init(struct sbx__ws *ws, size_t max_message)
{
    memset(ws, 0, sizeof(*ws));
    sbx__ws_decoder_init(&ws->dec, max_message);
    sbx_buf_init(&ws->out, ws->dec.max_message + 65536 + 14);
    ws->state = SBX__WS_OPEN;
}

void sbx__ws_init_server(struct sbx__ws *ws, size_t max_message)
{
    sbx__ws_init(ws, max_message);
    ws->dec.server = 1;
}

/* One whole frame into ws->out, masked when sbx is the client. */
static int ws_frame(struct sbx__ws *ws, int opcode, const void *p, size_t n, struct sbx_error *err)
{
    return ws->dec.server ? sbx__ws_frame_server(&ws->out, opcode, 1, p, n, err)
                          : sbx__ws_frame(&ws->out, opcode, 1, p, n, err);
}

void sbx__ws_release(struct sbx__ws *ws)
{
    sbx__ws_decoder_release(&ws->dec);
    sbx_buf_release(&ws->out);
}

static int queue_close(struct sbx__ws *ws, int code, const char *reason, size_t rlen,
                       struct sbx_error *err)
{
    uint8_t body[SBX__WS_CONTROL_MAX];
    size_t n = 0;
    if (code) {
        body[0] = (uint8_t)(code >> 8), body[1] = (uint8_t)code;
        if (rlen) /* reason may be NULL, and memcpy from NULL is undefined even for 0 bytes */
            memcpy(body + 2, reason, rlen);
        n = 2 + rlen;
    }
    ws->sent_close = 1;
    return ws_frame(ws, SBX__WS_CLOSE, body, n, err);
}

long sbx__ws_recv(struct sbx__ws *ws, const uint8_t *p, size_t n, struct sbx__ws_msg *msg,
                  struct sbx_error *err)
{
    long used = sbx__ws_decode(&ws->dec, p, n, msg, err);
    int rc = 0;
    if (used < 0) {
        if (!ws->sent_close)
            (void)queue_close(ws, ws->dec.fail_close, NULL, 0, NULL);
        ws->state = SBX__WS_CLOSED;
        return used;
    }
    if (msg->opcode == SBX__WS_PING && !ws->sent_close) {
        rc = ws_frame(ws, SBX__WS_PONG, msg->data, msg->len, err);
    } else if (msg->opcode == SBX__WS_CLOSE) {
        ws->peer_code = msg->close_code;
        size_t rlen = msg->len > 2 ? msg->len - 2 : 0;
        memcpy(ws->peer_reason, msg->reason, rlen);
        ws->peer_reason[rlen] = 0;
        if (!ws->sent_close)
            rc = queue_close(ws, msg->close_code == SBX__WS_CLOSE_NO_STATUS ? 0 : msg->close_code,
                             NULL, 0, err);
        ws->state = SBX__WS_CLOSED;
    }
    if (rc < 0) {
        ws->state = SBX__WS_CLOSED;
        sbx_error_prefix(err, "websocket");
        return rc;
    }
    return used;
}

int sbx__ws_send(struct sbx__ws *ws, int opcode, const void *p, size_t n, struct sbx_error *err)
{
    if (opcode != SBX__WS_TEXT && opcode != SBX__WS_BINARY)
        return sbx_error_set(err, SBX_E_INVAL, 0, "websocket message opcode %d is not data",
                             opcode);
    if (ws->sent_close || ws->state != SBX__WS_OPEN)
        return sbx_error_set(err, SBX_E_INVAL, 0, "the websocket connection is closing");
    if (opcode == SBX__WS_TEXT && !sbx__wire_utf8_valid(p, n))
        return sbx_error_set(err, SBX_E_INVAL, 0, "a websocket text message must be UTF-8");
    return ws_frame(ws, opcode, p, n, err);
}

int sbx__ws_ping(struct sbx__ws *ws, const void *p, size_t n, struct sbx_error *err)
{
    if (ws->sent_close || ws->state != SBX__WS_OPEN)
        return sbx_error_set(err, SBX_E_INVAL, 0, "the websocket connection is closing");
    return ws_frame(ws, SBX__WS_PING, p, n, err);
}

int sbx__ws_close(struct sbx__ws *ws, int code, const char *reason, struct sbx_error *err)
{
    size_t rlen = reason ? strlen(reason) : 0;
    if (code && !sbx__ws_close_code_valid(code))
        return sbx_error_set(err, SBX_E_INVAL, 0, "websocket close code %d is not one to send",
                             code);
    if (rlen && !code)
        return sbx_error_set(err, SBX_E_INVAL, 0, "a websocket close reason needs a code");
    if (rlen > SBX__WS_CONTROL_MAX - 2 || !sbx__wire_utf8_valid((const uint8_t *)reason, rlen))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "a websocket close reason is UTF-8 of at most %d bytes",
                             SBX__WS_CONTROL_MAX - 2);
    if (ws->sent_close)
        return 0;
    int rc = queue_close(ws, code, reason, rlen, err);
    if (rc < 0)
        return rc;
    ws->state = ws->peer_code ? SBX__WS_CLOSED : SBX__WS_CLOSING;
    return 0;
}
