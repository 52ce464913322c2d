/* WebSocket connections to an LXD server: libcurl connects (the unix socket, or TLS with the
 * client certificate and the pinned server, HTTP/1.1 only since LXD would pick HTTP/2 for
 * https and an upgrade needs 1.1) and stops there (CURLOPT_CONNECT_ONLY); sbx sends the
 * upgrade request and speaks RFC 6455 over curl_easy_send and curl_easy_recv with the framing
 * of src/sandbox/wire/ws.c. Nothing here blocks except opening: the relay polls conn->fd.
 *
 * A TLS connection may hold decrypted bytes poll cannot see: a reader drains it until curl says
 * "again" (read_more tells a caller that stopped early to read before polling). */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "core/dl-curl.h"
#include "providers/lxd/lxd.h"
#include "sbx/time.h"

#define CHUNK       65536
#define MESSAGE_MAX ((size_t)8 << 20)

static int wait_fd(int fd, short events, int64_t deadline, const char *what, struct sbx_error *err)
{
    for (;;) {
        struct pollfd p = {.fd = fd, .events = events};
        int ms = sbx_deadline_poll_ms(deadline);
        if (ms == 0)
            return sbx_error_set(err, SBX_E_TIMEOUT, 0, "LXD did not answer %s in time", what);
        int r = poll(&p, 1, ms);
        if (r > 0)
            return 0;
        if (r < 0 && errno != EINTR)
            return sbx_error_errno(err, errno, "poll");
    }
}

static int send_all(struct sbx__lxd_conn *c, const void *p, size_t n, int64_t deadline,
                    struct sbx_error *err)
{
    const char *b = p;
    while (n) {
        size_t sent = 0;
        CURLcode cc = curl_easy_send(c->curl, b, n, &sent);
        if (cc == CURLE_AGAIN) {
            int rc = wait_fd(c->fd, POLLOUT, deadline, "a websocket upgrade", err);
            if (rc < 0)
                return rc;
            continue;
        }
        if (cc != CURLE_OK)
            return sbx_error_set(err, SBX_E_SANDBOX, 0, "cannot write to LXD: %s",
                                 curl_easy_strerror(cc));
        b += sent;
        n -= sent;
    }
    return 0;
}

/* Read the upgrade's answer head into c->in; what follows it stays there for the decoder. */
static int read_head(struct sbx__lxd_conn *c, const struct sbx__ws_handshake *h, int64_t deadline,
                     struct sbx_error *err)
{
    char buf[4096];
    for (;;) {
        long hl = sbx__ws_head_len(c->in.data ? c->in.data : "", c->in.len, err);
        if (hl < 0)
            return (int)hl;
        if (hl > 0) {
            int chosen = -1;
            int rc = sbx__ws_check_response(h, c->in.data, (size_t)hl, NULL, &chosen, err);
            c->in_off = (size_t)hl;
            return rc;
        }
        size_t got = 0;
        CURLcode cc = curl_easy_recv(c->curl, buf, sizeof(buf), &got);
        if (cc == CURLE_AGAIN) {
            int rc = wait_fd(c->fd, POLLIN, deadline, "a websocket upgrade", err);
            if (rc < 0)
                return rc;
            continue;
        }
        if (cc != CURLE_OK || got == 0)
            return sbx_error_set(
                    err, SBX_E_SANDBOX, 0, "LXD closed the connection of a websocket upgrade%s%s",
                    cc != CURLE_OK ? ": " : "", cc != CURLE_OK ? curl_easy_strerror(cc) : "");
        if (sbx_buf_add(&c->in, buf, got, err) < 0)
            return -SBX_E_TOOBIG;
    }
}

static int connect_only(const struct sbx__lxd_server *sv, struct sbx__lxd_conn *c,
                        struct sbx_error *err)
{
    char cerr[CURL_ERROR_SIZE] = "";
    int rc = sbx__curl_load(err);
    if (rc < 0)
        return rc;
    CURL *curl = curl_easy_init();
    if (!curl)
        sbx__bug(__FILE__, __LINE__, "curl_easy_init failed");
    c->curl = curl;
    char *url = sbx_xasprintf("%s/", sv->base);
    sbx__lxd_curl_tls(sv, curl);
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_CONNECT_ONLY, 1L);
    /* ALPN offers only http/1.1: an upgrade cannot happen on HTTP/2. */
    curl_easy_setopt(curl, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, cerr);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    CURLcode cc = curl_easy_perform(curl);
    free(url);
    if (cc != CURLE_OK)
        return sbx__lxd_curl_error(sv, (int)cc, cerr, "a websocket connection", err);
    curl_socket_t fd = CURL_SOCKET_BAD;
    cc = curl_easy_getinfo(curl, CURLINFO_ACTIVESOCKET, &fd);
    if (cc != CURLE_OK || fd == CURL_SOCKET_BAD)
        return sbx_error_set(err, SBX_E_SANDBOX, 0, "libcurl gave no socket for '%s'", sv->url);
    c->fd = (int)fd;
    return 0;
}

int sbx__lxd_conn_open(const struct sbx__lxd_server *sv, const char *path, struct sbx__lxd_conn *c,
                       struct sbx_error *err)
{
    struct sbx__ws_handshake h;
    struct sbx_buf req;
    memset(c, 0, sizeof(*c));
    c->fd = -1;
    sbx__ws_init(&c->ws, MESSAGE_MAX);
    sbx_buf_init(&c->in, SBX__WS_HEAD_MAX + 2 * CHUNK + MESSAGE_MAX);
    sbx_buf_init(&req, SBX_BUF_NOLIMIT);
    char *proj = sbx__lxd_escape(sv->project, 0);
    char *full = sbx_xasprintf("%s%cproject=%s", path, strchr(path, '?') ? '&' : '?', proj);
    int64_t deadline = sbx_deadline_after_ms(sv->timeout_ms);
    int rc;
    if ((rc = connect_only(sv, c, err)) < 0 || (rc = sbx__ws_handshake_init(&h, err)) < 0 ||
        (rc = sbx__ws_request(&h, sv->hostport, full, NULL, NULL, &req, err)) < 0 ||
        (rc = send_all(c, req.data, req.len, deadline, err)) < 0 ||
        (rc = read_head(c, &h, deadline, err)) < 0) {
        sbx_error_prefix(err, "LXD at '%s'", sv->url);
        sbx__lxd_conn_close(c);
    }
    free(proj);
    free(full);
    sbx_buf_release(&req);
    return rc;
}

void sbx__lxd_conn_close(struct sbx__lxd_conn *c)
{
    if (c->curl)
        curl_easy_cleanup(c->curl);
    c->curl = NULL;
    c->fd = -1;
    sbx__ws_release(&c->ws);
    sbx_buf_release(&c->in);
    c->in_off = 0;
}

int sbx__lxd_conn_next(struct sbx__lxd_conn *c, struct sbx__ws_msg *msg, struct sbx_error *err)
{
    memset(msg, 0, sizeof(*msg));
    for (;;) {
        if (c->in_off < c->in.len) {
            long used = sbx__ws_recv(&c->ws, (const uint8_t *)c->in.data + c->in_off,
                                     c->in.len - c->in_off, msg, err);
            if (used < 0)
                return (int)used;
            c->in_off += (size_t)used;
            if (msg->opcode)
                return 1;
            continue;
        }
        /* Everything decoded: the buffer starts again (what a message pointed at was handed
         * out by the previous call and is no longer borrowed). */
        sbx_buf_reset(&c->in);
        c->in_off = 0;
        if (c->eof || !c->curl) {
            c->read_more = 0;
            return 0;
        }
        char buf[CHUNK];
        size_t got = 0;
        CURLcode cc = curl_easy_recv(c->curl, buf, sizeof(buf), &got);
        if (cc == CURLE_AGAIN) {
            c->read_more = 0;
            return 0;
        }
        if (cc != CURLE_OK || got == 0) {
            c->eof = 1;
            c->read_more = 0;
            return 0;
        }
        c->read_more = 1;
        if (sbx_buf_add(&c->in, buf, got, err) < 0)
            return -SBX_E_TOOBIG;
    }
}

int sbx__lxd_conn_flush(struct sbx__lxd_conn *c, struct sbx_error *err)
{
    while (c->ws.out.len) {
        if (c->eof || !c->curl) {
            sbx_buf_reset(&c->ws.out);
            return 0;
        }
        size_t sent = 0;
        CURLcode cc = curl_easy_send(c->curl, c->ws.out.data, c->ws.out.len, &sent);
        if (cc == CURLE_AGAIN)
            return 1;
        if (cc != CURLE_OK) {
            c->eof = 1;
            sbx_buf_reset(&c->ws.out);
            return sbx_error_set(err, SBX_E_SANDBOX, 0, "the connection to LXD broke: %s",
                                 curl_easy_strerror(cc));
        }
        sbx_buf_consume(&c->ws.out, sent);
    }
    return 0;
}

int sbx__lxd_conn_drain(struct sbx__lxd_conn *c, int64_t timeout_ms, struct sbx_error *err)
{
    int64_t deadline = sbx_deadline_after_ms(timeout_ms);
    for (;;) {
        int rc = sbx__lxd_conn_flush(c, err);
        if (rc <= 0)
            return rc;
        if ((rc = wait_fd(c->fd, POLLOUT, deadline, "a websocket message", err)) < 0)
            return rc;
    }
}

int sbx__lxd_conn_send(struct sbx__lxd_conn *c, int opcode, const void *p, size_t n,
                       int64_t timeout_ms, struct sbx_error *err)
{
    int rc = sbx__ws_send(&c->ws, opcode, p, n, err);
    return rc < 0 ? rc : sbx__lxd_conn_drain(c, timeout_ms, err);
}
