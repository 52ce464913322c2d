/* Connections driven by the event loop (src/sandbox/wire/loop.h): sbx__lconn over a byte
 * connection, sbx__lws over a WebSocket. Both read until nothing is left (TLS may hold bytes
 * the socket no longer shows), stop while their owner is full, and read again at once when it
 * resumes them. */
#include <stdlib.h>
#include <string.h>

#include "sandbox/wire/loop-internal.h"
#include "sbx/time.h"

#define READ_CHUNK     65536
#define READS_PER_TURN 16 /* then the others get their turn; the rest is read next turn */
#define CLOSE_WAIT_MS  5000
#define DEFAULT_QUEUE  ((size_t)1 << 20)

struct sbx__lconn {
    struct sbx__loop *l;
    struct sbx__conn *conn;
    struct sbx__watch *w;
    struct sbx__timer *kick;
    struct sbx_buf q;
    size_t max_q;
    const struct sbx__lconn_ops *ops;
    void *ud;
    int paused, ended, shut_want, shut_done, dead;
};

static void lc_update(struct sbx__lconn *c)
{
    unsigned ev = (!c->paused && !c->ended ? SBX__IN : 0) |
                  (c->q.len || sbx__conn_out_pending(c->conn) || (c->shut_want && !c->shut_done)
                           ? SBX__OUT
                           : 0);
    sbx__watch_set(c->w, ev);
}

static void lc_end(struct sbx__lconn *c, int rc, const struct sbx_error *err)
{
    if (c->ended)
        return;
    c->ended = 1;
    lc_update(c);
    c->ops->end(c, rc, err, c->ud);
}

static void lc_read(struct sbx__lconn *c)
{
    uint8_t buf[READ_CHUNK];
    struct sbx_error err = SBX_ERROR_INIT;
    for (int i = 0; i < READS_PER_TURN; i++) {
        if (c->paused || c->ended || c->dead)
            return;
        size_t got = 0;
        int rc = sbx__conn_recv(c->conn, buf, sizeof(buf), &got, &err);
        if (rc < 0) {
            lc_end(c, rc, &err);
            return;
        }
        if (rc == SBX__CONN_EOF) {
            lc_end(c, 0, NULL);
            return;
        }
        if (got == 0)
            return; /* nothing anywhere: epoll tells when more comes */
        rc = c->ops->data(c, buf, got, c->ud, &err);
        if (c->dead)
            return;
        if (rc < 0) {
            lc_end(c, rc, &err);
            return;
        }
        if (rc == SBX__PAUSE) {
            c->paused = 1;
            lc_update(c);
            return;
        }
    }
    sbx__timer_after(c->kick, 0);
}

static void lc_write(struct sbx__lconn *c)
{
    struct sbx_error err = SBX_ERROR_INIT;
    int had = c->q.len > 0 || sbx__conn_out_pending(c->conn);
    int rc = 0;
    while (c->q.len) {
        size_t sent = 0;
        rc = sbx__conn_send(c->conn, c->q.data, c->q.len, &sent, &err);
        if (rc < 0 || sent == 0)
            break;
        sbx_buf_consume(&c->q, sent);
    }
    if (rc == 0)
        rc = sbx__conn_flush(c->conn, &err);
    if (rc < 0) {
        sbx_buf_reset(&c->q);
        lc_end(c, rc, &err);
        return;
    }
    int empty = !c->q.len && !sbx__conn_out_pending(c->conn);
    if (empty && c->shut_want && !c->shut_done) {
        c->shut_done = 1;
        (void)sbx__conn_shutdown_write(c->conn, NULL);
    }
    lc_update(c);
    if (had && empty && c->ops->drained)
        c->ops->drained(c, c->ud);
}

static void lc_event(struct sbx__watch *w, unsigned rev, void *ud)
{
    struct sbx__lconn *c = ud;
    (void)w;
    if (rev & SBX__OUT)
        lc_write(c);
    if (!c->dead && (rev & (SBX__IN | SBX__ERR)))
        lc_read(c);
}

static void lc_kick(struct sbx__timer *t, void *ud)
{
    (void)t;
    lc_read(ud);
}

int sbx__lconn_new(struct sbx__loop *l, struct sbx__conn *conn, size_t max_queue,
                   const struct sbx__lconn_ops *ops, void *ud, struct sbx__lconn **out,
                   struct sbx_error *err)
{
    struct sbx__lconn *c = sbx_xcalloc(1, sizeof(*c));
    int rc = sbx__watch_new(l, sbx__conn_fd(conn), SBX__IN, lc_event, c, &c->w, err);
    if (rc < 0) {
        sbx__conn_free(conn);
        free(c);
        return rc;
    }
    c->l = l;
    c->conn = conn;
    c->ops = ops;
    c->ud = ud;
    c->max_q = max_queue ? max_queue : DEFAULT_QUEUE;
    sbx_buf_init(&c->q, SBX_BUF_NOLIMIT);
    c->kick = sbx__timer_new(l, lc_kick, c);
    /* Bytes may already wait (after the answer's head, or in TLS): read them first. */
    sbx__timer_after(c->kick, 0);
    sbx__loop_count(l, LOOP_CONN, 1);
    *out = c;
    return 0;
}

int sbx__lconn_send(struct sbx__lconn *c, const void *p, size_t n, struct sbx_error *err)
{
    if (c->shut_want)
        return sbx_error_set(err, SBX_E_INVAL, 0, "the connection's sending side is closed");
    if (n > c->max_q - c->q.len)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "more than %zu bytes queued on a connection",
                             c->max_q);
    int rc = sbx_buf_add(&c->q, p, n, err);
    if (rc == 0)
        lc_update(c);
    return rc;
}

size_t sbx__lconn_queued(const struct sbx__lconn *c)
{
    return c->q.len;
}

void sbx__lconn_shutdown_write(struct sbx__lconn *c)
{
    c->shut_want = 1;
    lc_update(c);
}

void sbx__lconn_pause(struct sbx__lconn *c)
{
    c->paused = 1;
    lc_update(c);
}

void sbx__lconn_resume(struct sbx__lconn *c)
{
    if (!c->paused)
        return;
    c->paused = 0;
    lc_update(c);
    sbx__timer_after(c->kick, 0);
}

struct sbx__conn *sbx__lconn_conn(const struct sbx__lconn *c)
{
    return c->conn;
}

static void lc_free(void *p)
{
    struct sbx__lconn *c = p;
    sbx_buf_release(&c->q);
    free(c);
}

void sbx__lconn_free(struct sbx__lconn *c)
{
    if (!c || c->dead)
        return;
    c->dead = 1;
    sbx__watch_free(c->w);
    sbx__timer_free(c->kick);
    sbx__conn_free(c->conn);
    c->conn = NULL;
    sbx__loop_count(c->l, LOOP_CONN, -1);
    sbx__loop_bury(c->l, c, lc_free);
}

/* ---- WebSocket ---- */

struct sbx__lws {
    struct sbx__loop *l;
    struct sbx__wsconn *wc;
    struct sbx__watch *w;
    struct sbx__timer *kick, *close_wait, *ka;
    const struct sbx__lws_ops *ops;
    void *ud;
    int64_t ka_ping_ms, ka_dead_ms, last_rx_ns; /* keep-alive: sbx__lws_keepalive */
    int paused, ended, dead;
    int wfailed; /* a send failed (the server closed): what it sent before is still read */
};

static void ws_update(struct sbx__lws *s)
{
    unsigned ev =
            (!s->paused && !s->ended ? SBX__IN : 0) |
            (!s->wfailed && (s->wc->ws.out.len || sbx__conn_out_pending(s->wc->conn)) ? SBX__OUT
                                                                                      : 0);
    sbx__watch_set(s->w, ev);
}

static void ws_end(struct sbx__lws *s, int rc, const struct sbx_error *err)
{
    if (s->ended)
        return;
    s->ended = 1;
    sbx__timer_stop(s->close_wait);
    ws_update(s);
    s->ops->end(s, rc, err, s->ud);
}

static void ws_write(struct sbx__lws *s)
{
    struct sbx_error err = SBX_ERROR_INIT;
    if (s->wfailed) {
        sbx_buf_reset(&s->wc->ws.out);
        return;
    }
    int had = s->wc->ws.out.len > 0 || sbx__conn_out_pending(s->wc->conn);
    int rc = sbx__wsconn_flush(s->wc, &err);
    if (rc < 0) {
        /* A server that closed its end (a command's output stream after its last frame) makes
         * a send fail while what it sent before still waits to be read: read it to its end
         * (the close, or the cut), which ends the stream; the close timer bounds the wait. */
        sbx_buf_reset(&s->wc->ws.out);
        s->wfailed = 1;
        ws_update(s);
        if (!s->ended)
            sbx__timer_after(s->close_wait, CLOSE_WAIT_MS);
        sbx__timer_after(s->kick, 0);
        return;
    }
    ws_update(s);
    if (had && rc == 0 && s->ops->drained)
        s->ops->drained(s, s->ud);
}

static void ws_read(struct sbx__lws *s)
{
    struct sbx_error err = SBX_ERROR_INIT;
    for (int i = 0; i < READS_PER_TURN; i++) {
        if (s->paused || s->ended || s->dead)
            return;
        struct sbx__ws_msg m;
        int rc = sbx__wsconn_next(s->wc, &m, &err);
        if (rc < 0) {
            (void)sbx__wsconn_flush(s->wc, NULL); /* the close frame that says why */
            ws_end(s, rc, &err);
            return;
        }
        if (rc == SBX__WSCONN_END) {
            ws_end(s, 0, NULL);
            return;
        }
        if (rc == 1)
            s->last_rx_ns = sbx_time_mono_ns();
        if (s->wc->ws.out.len)
            ws_write(s); /* a pong, the echo of a close */
        if (s->dead || s->ended)
            return;
        if (rc == 0)
            return;
        if (m.opcode == SBX__WS_PING || m.opcode == SBX__WS_PONG)
            continue;
        rc = s->ops->message(s, &m, s->ud, &err);
        if (s->dead)
            return;
        if (rc < 0) {
            sbx__lws_close(s, SBX__WS_CLOSE_GOING_AWAY, NULL);
            ws_end(s, rc, &err);
            return;
        }
        if (rc == SBX__PAUSE) {
            s->paused = 1;
            ws_update(s);
            return;
        }
    }
    sbx__timer_after(s->kick, 0);
}

static void ws_event(struct sbx__watch *w, unsigned rev, void *ud)
{
    struct sbx__lws *s = ud;
    (void)w;
    if (rev & SBX__OUT)
        ws_write(s);
    if (!s->dead && (rev & (SBX__IN | SBX__ERR)))
        ws_read(s);
}

static void ws_kick(struct sbx__timer *t, void *ud)
{
    (void)t;
    ws_read(ud);
}

static void ws_close_wait(struct sbx__timer *t, void *ud)
{
    struct sbx__lws *s = ud;
    struct sbx_error err = SBX_ERROR_INIT;
    (void)t;
    struct sbx__endpoint *ep = sbx__conn_endpoint(s->wc->conn);
    int rc = sbx_error_set(&err, SBX_E_TIMEOUT, 0,
                           "%s at '%s' did not answer the websocket's close within %d ms",
                           sbx__endpoint_name(ep), sbx__endpoint_url(ep), CLOSE_WAIT_MS);
    ws_end(s, rc, &err);
}

/* The keep-alive's turn: the peer silent for too long ends the stream; else a ping. */
static void ws_keepalive(struct sbx__timer *t, void *ud)
{
    struct sbx__lws *s = ud;
    struct sbx_error err = SBX_ERROR_INIT;
    if (s->ended || s->dead)
        return;
    int64_t now = sbx_time_mono_ns();
    if (s->paused)
        s->last_rx_ns = now; /* not reading is sbx's choice, not the peer's silence */
    int64_t quiet_ms = (now - s->last_rx_ns) / 1000000;
    if (quiet_ms >= s->ka_dead_ms) {
        struct sbx__endpoint *ep = sbx__conn_endpoint(s->wc->conn);
        int rc = sbx_error_set(&err, SBX_E_TIMEOUT, 0,
                               "%s at '%s' sent nothing for %lld s, not even an answer to a "
                               "ping: the connection is taken as lost",
                               sbx__endpoint_name(ep), sbx__endpoint_url(ep),
                               (long long)(quiet_ms / 1000));
        ws_end(s, rc, &err);
        return;
    }
    if (!s->wfailed && sbx__ws_ping(&s->wc->ws, "ka", 2, NULL) == 0)
        ws_update(s);
    int64_t left = s->ka_dead_ms - quiet_ms;
    sbx__timer_after(t, left < s->ka_ping_ms ? left : s->ka_ping_ms);
}

void sbx__lws_keepalive(struct sbx__lws *s, int64_t ping_ms, int64_t dead_ms)
{
    s->ka_ping_ms = ping_ms;
    s->ka_dead_ms = dead_ms > ping_ms ? dead_ms : ping_ms;
    s->last_rx_ns = sbx_time_mono_ns();
    if (ping_ms > 0)
        sbx__timer_after(s->ka, ping_ms);
    else
        sbx__timer_stop(s->ka);
}

int sbx__lws_new(struct sbx__loop *l, struct sbx__wsconn *wc, const struct sbx__lws_ops *ops,
                 void *ud, struct sbx__lws **out, struct sbx_error *err)
{
    struct sbx__lws *s = sbx_xcalloc(1, sizeof(*s));
    int rc = sbx__watch_new(l, sbx__conn_fd(wc->conn), SBX__IN, ws_event, s, &s->w, err);
    if (rc < 0) {
        sbx__wsconn_free(wc);
        free(s);
        return rc;
    }
    s->l = l;
    s->wc = wc;
    s->ops = ops;
    s->ud = ud;
    s->kick = sbx__timer_new(l, ws_kick, s);
    s->close_wait = sbx__timer_new(l, ws_close_wait, s);
    s->ka = sbx__timer_new(l, ws_keepalive, s);
    sbx__timer_after(s->kick, 0);
    ws_update(s);
    sbx__loop_count(l, LOOP_CONN, 1);
    *out = s;
    return 0;
}

int sbx__lws_send(struct sbx__lws *s, int opcode, const void *p, size_t n, struct sbx_error *err)
{
    int rc = sbx__ws_send(&s->wc->ws, opcode, p, n, err);
    if (rc == 0)
        ws_update(s);
    return rc;
}

size_t sbx__lws_queued(const struct sbx__lws *s)
{
    return s->wc->ws.out.len;
}

void sbx__lws_close(struct sbx__lws *s, int code, const char *reason)
{
    if (s->wc->ws.sent_close)
        return;
    if (sbx__ws_close(&s->wc->ws, code, reason, NULL) == 0 && !s->ended)
        sbx__timer_after(s->close_wait, CLOSE_WAIT_MS);
    ws_update(s);
}

void sbx__lws_pause(struct sbx__lws *s)
{
    s->paused = 1;
    ws_update(s);
}

void sbx__lws_resume(struct sbx__lws *s)
{
    if (!s->paused)
        return;
    s->paused = 0;
    ws_update(s);
    sbx__timer_after(s->kick, 0);
}

int sbx__lws_protocol(const struct sbx__lws *s)
{
    return s->wc->protocol;
}

static void ws_free(void *p)
{
    free(p);
}

void sbx__lws_free(struct sbx__lws *s)
{
    if (!s || s->dead)
        return;
    s->dead = 1;
    sbx__watch_free(s->w);
    sbx__timer_free(s->kick);
    sbx__timer_free(s->close_wait);
    sbx__timer_free(s->ka);
    sbx__wsconn_free(s->wc);
    s->wc = NULL;
    sbx__loop_count(s->l, LOOP_CONN, -1);
    sbx__loop_bury(s->l, s, ws_free);
}
