/* The WebSocket client over an upgraded connection (src/sandbox/wire/conn.h): the handshake of
 * ws.h through the connection's request and answer, then messages decoded from what is read and
 * frames written from ws.out. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox/wire/conn.h"
#include "sandbox/wire/http.h"
#include "sandbox/wire/wire-internal.h"
#include "sbx/time.h"

#define READ_CHUNK 65536

static int extra_lines(struct sbx__endpoint *ep, const char *const *headers, struct sbx_buf *out,
                       struct sbx_error *err)
{
    int rc = sbx__endpoint_auth_line(ep, out, err);
    for (const char *const *h = headers; rc == 0 && h && *h; h++) {
        const char *colon = strchr(*h, ':'), *sp = strpbrk(*h, " \t");
        if (!colon || colon == *h || strpbrk(*h, "\r\n") || (sp && sp < colon))
            return sbx_error_set(err, SBX_E_INVAL, 0, "header line '%.60s' is not 'Name: value'",
                                 *h);
        rc = sbx_buf_addf(out, err, "%s\r\n", *h);
    }
    return rc;
}

static int handshake(struct sbx__conn *k, const char *path, const char *const *protocols,
                     const char *const *headers, int64_t deadline, int *chosen,
                     struct sbx_error *err)
{
    struct sbx__endpoint *ep = sbx__conn_endpoint(k);
    struct sbx__ws_handshake hs;
    struct sbx__http_head h = {0};
    struct sbx_buf extra, req, raw;
    sbx_buf_init(&extra, SBX_BUF_NOLIMIT);
    sbx_buf_init(&req, SBX_BUF_NOLIMIT);
    sbx_buf_init(&raw, SBX_BUF_NOLIMIT);
    char *target = sbx_xasprintf("%s%s", sbx__endpoint_base_path(ep), path);
    int rc;
    if ((rc = sbx__conn_check_target(path, err)) < 0 ||
        (rc = sbx__ws_handshake_init(&hs, err)) < 0 ||
        (rc = extra_lines(ep, headers, &extra, err)) < 0 ||
        (rc = sbx__ws_request(&hs, sbx__endpoint_host(ep), target, protocols, extra.data, &req,
                              err)) < 0 ||
        (rc = sbx__conn_write_all(k, req.data, req.len, deadline, err)) < 0 ||
        (rc = sbx__conn_read_head(k, deadline, &h, &raw, err)) < 0)
        goto out;
    if (h.status != 101) {
        char what[256];
        snprintf(what, sizeof(what), "the websocket upgrade of GET %.200s", path);
        rc = sbx__conn_refused(k, &h, what, deadline, err);
        goto out;
    }
    if ((rc = sbx__ws_check_response(&hs, raw.data, raw.len, protocols, chosen, err)) < 0)
        sbx_error_prefix(err, "%s at '%s'", sbx__endpoint_name(ep), sbx__endpoint_url(ep));
out:
    sbx__head_release(&h);
    sbx__wipe_buf(&extra);
    sbx__wipe_buf(&req);
    sbx_buf_release(&extra);
    sbx_buf_release(&req);
    sbx_buf_release(&raw);
    free(target);
    sbx__endpoint_scrub(ep, err);
    return rc;
}

int sbx__wsconn_open(struct sbx__endpoint *ep, const char *path, const char *const *protocols,
                     const char *const *headers, size_t max_message, int64_t timeout_ms,
                     struct sbx__wsconn **out, struct sbx_error *err)
{
    int64_t t = timeout_ms > 0 ? timeout_ms : sbx__endpoint_timeout_ms(ep);
    int64_t deadline = sbx_deadline_after_ms(t);
    struct sbx__conn *k = NULL;
    int chosen = -1;
    int rc = sbx__conn_connect(ep, t, &k, err);
    if (rc == 0)
        rc = handshake(k, path, protocols, headers, deadline, &chosen, err);
    if (rc < 0) {
        sbx__conn_free(k);
        return rc;
    }
    struct sbx__wsconn *w = sbx_xcalloc(1, sizeof(*w));
    w->conn = k;
    sbx__ws_init(&w->ws, max_message);
    w->protocol = chosen;
    sbx_buf_init(&w->in, SBX_BUF_NOLIMIT);
    *out = w;
    return 0;
}

void sbx__wsconn_free(struct sbx__wsconn *w)
{
    if (!w)
        return;
    sbx__conn_free(w->conn);
    sbx__ws_release(&w->ws);
    sbx_buf_release(&w->in);
    free(w);
}

int sbx__wsconn_next(struct sbx__wsconn *w, struct sbx__ws_msg *msg, struct sbx_error *err)
{
    msg->opcode = 0;
    for (;;) {
        if (w->in_off == w->in.len && w->in.len) {
            sbx_buf_reset(&w->in);
            w->in_off = 0;
        }
        if (w->in_off < w->in.len) {
            long used = sbx__ws_recv(&w->ws, (const uint8_t *)w->in.data + w->in_off,
                                     w->in.len - w->in_off, msg, err);
            if (used < 0) {
                sbx_error_prefix(err, "%s at '%s'", sbx__endpoint_name(sbx__conn_endpoint(w->conn)),
                                 sbx__endpoint_url(sbx__conn_endpoint(w->conn)));
                sbx__endpoint_scrub(sbx__conn_endpoint(w->conn), err);
                return (int)used;
            }
            w->in_off += (size_t)used;
            if (msg->opcode)
                return 1;
            continue;
        }
        if (w->eof) {
            if (w->ws.state == SBX__WS_CLOSED && sbx__ws_decoder_idle(&w->ws.dec))
                return SBX__WSCONN_END;
            struct sbx__endpoint *ep = sbx__conn_endpoint(w->conn);
            return sbx_error_set(
                    err, SBX_E_HTTP, 0, "the websocket connection to %s at '%s' was cut%s",
                    sbx__endpoint_name(ep), sbx__endpoint_url(ep),
                    sbx__ws_decoder_idle(&w->ws.dec) ? " (no close frame)" : " inside a frame");
        }
        if (sbx_buf_reserve(&w->in, READ_CHUNK, err) < 0)
            return -SBX_E_TOOBIG;
        size_t got = 0;
        int rc = sbx__conn_recv(w->conn, w->in.data, READ_CHUNK, &got, err);
        if (rc < 0)
            return rc;
        if (rc == SBX__CONN_EOF) {
            w->eof = 1;
            continue;
        }
        if (got == 0)
            return 0;
        sbx_buf_setlen(&w->in, got);
    }
}

int sbx__wsconn_flush(struct sbx__wsconn *w, struct sbx_error *err)
{
    while (w->ws.out.len) {
        size_t sent = 0;
        int rc = sbx__conn_send(w->conn, w->ws.out.data, w->ws.out.len, &sent, err);
        if (rc < 0)
            return rc;
        if (sent == 0)
            return 1;
        sbx_buf_consume(&w->ws.out, sent);
    }
    return sbx__conn_flush(w->conn, err);
}

static int wait_for(struct sbx__wsconn *w, short events, int64_t deadline, struct sbx_error *err)
{
    for (;;) {
        int ms = sbx_deadline_poll_ms(deadline);
        if (ms == 0) {
            struct sbx__endpoint *ep = sbx__conn_endpoint(w->conn);
            return sbx_error_set(err, SBX_E_TIMEOUT, 0,
                                 "%s at '%s' did not answer on the websocket in time",
                                 sbx__endpoint_name(ep), sbx__endpoint_url(ep));
        }
        struct pollfd pf = {.fd = sbx__conn_fd(w->conn), .events = events};
        int r = poll(&pf, 1, ms);
        if (r > 0)
            return 0;
        if (r < 0 && errno != EINTR)
            return sbx_error_errno(err, errno, "poll");
    }
}

static int flush_all(struct sbx__wsconn *w, int64_t deadline, struct sbx_error *err)
{
    int rc;
    while ((rc = sbx__wsconn_flush(w, err)) == 1)
        if ((rc = wait_for(w, POLLOUT, deadline, err)) < 0)
            return rc;
    return rc;
}

int sbx__wsconn_read(struct sbx__wsconn *w, struct sbx__ws_msg *msg, int64_t deadline,
                     struct sbx_error *err)
{
    for (;;) {
        int got = sbx__wsconn_next(w, msg, err), rc;
        if (got < 0) {
            struct sbx_error ignored = SBX_ERROR_INIT;
            (void)flush_all(w, deadline, &ignored); /* the close frame that says why */
            return got;
        }
        if (got == SBX__WSCONN_END) {
            msg->opcode = SBX__WS_CLOSE;
            msg->close_code = w->ws.peer_code;
            msg->reason = w->ws.peer_reason;
            return 0;
        }
        /* Pongs and the echo of a close go out before anything else happens. */
        if (w->ws.out.len && (rc = flush_all(w, deadline, err)) < 0)
            return rc;
        if (got == 1 && msg->opcode != SBX__WS_PING && msg->opcode != SBX__WS_PONG)
            return 0;
        if (got == 0 && (rc = wait_for(w, POLLIN, deadline, err)) < 0)
            return rc;
    }
}

int sbx__wsconn_write(struct sbx__wsconn *w, int opcode, const void *p, size_t n, int64_t deadline,
                      struct sbx_error *err)
{
    int rc = flush_all(w, deadline, err);
    if (rc == 0)
        rc = sbx__ws_send(&w->ws, opcode, p, n, err);
    if (rc == 0)
        rc = flush_all(w, deadline, err);
    return rc;
}

int sbx__wsconn_close(struct sbx__wsconn *w, int code, const char *reason, int64_t deadline,
                      struct sbx_error *err)
{
    int rc = sbx__ws_close(&w->ws, code, reason, err);
    if (rc == 0)
        rc = flush_all(w, deadline, err);
    while (rc == 0 && w->ws.state != SBX__WS_CLOSED) {
        struct sbx__ws_msg m;
        rc = sbx__wsconn_read(w, &m, deadline, err);
        if (rc == 0 && m.opcode == SBX__WS_CLOSE)
            break;
    }
    return rc;
}
