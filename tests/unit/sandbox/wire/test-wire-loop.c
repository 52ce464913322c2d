/* The event loop (src/sandbox/wire/loop.h) and remote commands on it (rproc.h): timers in
 * order, work posted and called from other threads, descriptor watches; a connection over TLS
 * whose reader pauses in the middle of TLS records and resumes (every byte arrives, in order);
 * WebSocket messages both ways and the close handshake; asynchronous requests (a response, a
 * stream paused and resumed, retries, an error status, an unreachable server); and rprocs over
 * a hijacked echo connection: stdin to output through small buffers (backpressure), a server
 * killed mid-stream (EOF on the outputs, the status says what happened), a deadline's two
 * signals, a terminal's input, output and size, and the process's loop that stops its thread
 * and closes its descriptors when nothing is left on it. Skips the server cases without
 * python3. */
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <termios.h>

#include "sandbox/session/exec-util.h"
#include "sandbox/wire/loop.h"
#include "sandbox/wire/rproc.h"
#include "sbx/fs.h"
#include "sbx/session.h"
#include "sbx/time.h"
#include "servers.h"
#include "tap.h"

#define T_MS 30000

/* ---- a one-byte doorbell from the loop to the test ---- */

static int bell[2] = {-1, -1};

static void ring(void)
{
    char c = 'x';
    ssize_t w = write(bell[1], &c, 1);
    (void)w;
}

static int wait_bell(void)
{
    struct pollfd pf = {.fd = bell[0], .events = POLLIN};
    if (poll(&pf, 1, T_MS) <= 0)
        return -1;
    char c;
    return read(bell[0], &c, 1) == 1 ? 0 : -1;
}

static void bell_open(void)
{
    CHECK(pipe2(bell, O_CLOEXEC) == 0);
}

static void bell_close(void)
{
    sbx_fd_close(&bell[0]);
    sbx_fd_close(&bell[1]);
}

static struct sbx__endpoint *ep_for(const char *scheme, int port, const char *ca)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char *url = sbx_xasprintf("%s://127.0.0.1:%d", scheme, port);
    struct sbx__endpoint_opts o = {.url = url, .name = "the fake", .ca_file = ca};
    struct sbx__endpoint *ep = NULL;
    if (sbx__endpoint_new(&o, &ep, &err) < 0)
        printf("# %s\n", err.msg);
    free(url);
    return ep;
}

static struct sbx__conn *hijack(struct sbx__endpoint *ep, const char *path)
{
    struct sbx_error err = SBX_ERROR_INIT;
    const char *hdrs[] = {"Connection: Upgrade", "Upgrade: tcp", NULL};
    struct sbx__upgrade u = {.method = "POST", .path = path, .headers = hdrs};
    struct sbx__conn *c = NULL;
    CHECK_OK(sbx__conn_open(ep, &u, &c, NULL, &err), &err);
    return c;
}

/* ---- timers, posts, watches ---- */

struct order {
    struct sbx__loop *l;
    char seen[16];
    int n;
    struct sbx__timer *t[3];
};

static void on_t(struct sbx__timer *t, void *ud)
{
    struct order *o = ud;
    for (int i = 0; i < 3; i++)
        if (o->t[i] == t)
            o->seen[o->n++] = (char)('a' + i);
    if (o->n == 3)
        ring();
}

static void arm(void *ud)
{
    struct order *o = ud;
    CHECK(sbx__loop_on_thread(o->l));
    for (int i = 0; i < 3; i++)
        o->t[i] = sbx__timer_new(o->l, on_t, o);
    sbx__timer_after(o->t[0], 60);
    sbx__timer_after(o->t[1], 20);
    sbx__timer_after(o->t[2], 40);
    sbx__timer_after(o->t[2], 0); /* re-arming moves it */
}

static void free_timers(void *ud)
{
    struct order *o = ud;
    for (int i = 0; i < 3; i++)
        sbx__timer_free(o->t[i]);
}

static void posted(void *ud)
{
    struct order *o = ud;
    o->seen[o->n++] = 'p';
    if (o->n == 2)
        ring();
}

struct wctx {
    struct sbx__watch *w;
    int fd;
    char got[8];
};

static void on_readable(struct sbx__watch *w, unsigned rev, void *ud)
{
    struct wctx *c = ud;
    (void)w;
    if (rev & SBX__IN) {
        ssize_t n = read(c->fd, c->got, sizeof(c->got) - 1);
        (void)n;
        ring();
    }
}

static struct sbx__loop *test_loop;

static void add_watch(void *ud)
{
    struct wctx *c = ud;
    struct sbx_error err = SBX_ERROR_INIT;
    CHECK_OK(sbx__watch_new(test_loop, c->fd, SBX__IN, on_readable, c, &c->w, &err), &err);
}

static void drop_watch(void *ud)
{
    sbx__watch_free(((struct wctx *)ud)->w);
}

static void test_basics(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    bell_open();
    CHECK_OK(sbx__loop_new(&test_loop, &err), &err);
    struct order o = {.l = test_loop};
    CHECK(!sbx__loop_on_thread(test_loop));
    sbx__loop_call(test_loop, arm, &o);
    CHECK_OK(wait_bell(), &err);
    CHECK_EQ_STR(o.seen, "cba");
    sbx__loop_call(test_loop, free_timers, &o);
    struct order p = {.l = test_loop};
    sbx__loop_post(test_loop, posted, &p);
    sbx__loop_post(test_loop, posted, &p);
    CHECK_OK(wait_bell(), &err);
    CHECK_EQ_STR(p.seen, "pp");
    int sp[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) == 0);
    struct wctx w = {.fd = sp[0]};
    sbx__loop_call(test_loop, add_watch, &w);
    CHECK(write(sp[1], "hey", 3) == 3);
    CHECK_OK(wait_bell(), &err);
    CHECK_EQ_STR(w.got, "hey");
    sbx__loop_call(test_loop, drop_watch, &w);
    struct sbx__loop_stats st;
    sbx__loop_stats(test_loop, &st);
    CHECK_EQ_INT(st.watches + st.timers + st.conns + st.xfers + st.procs, 0);
    CHECK(st.iterations > 0);
    close(sp[0]);
    close(sp[1]);
    sbx__loop_free(test_loop);
    bell_close();
}

/* ---- a connection over TLS, paused and resumed in the middle of records ---- */

#define STREAM_BYTES ((size_t)2 << 20)

struct echo {
    struct sbx__loop *l;
    struct sbx__conn *conn;
    struct sbx__lconn *c;
    struct sbx__timer *resume, *more;
    size_t sent, got, since_pause;
    int hold, released; /* hold: read nothing until the queue has grown to most of a MiB */
    int pauses, ended, end_rc, bad;
    char tail[32];
    size_t tail_len;
};

static uint8_t pattern(size_t i)
{
    return (uint8_t)((i * 7 + i / 3) & 0xff);
}

/* Bytes are queued in small pieces, from a timer too, while earlier ones may still wait in
 * TLS for the socket: a TLS write must be retried from the same memory however the queue
 * grows (OpenSSL's "bad write retry" otherwise). */
static void feed(struct echo *e)
{
    uint8_t buf[4096];
    size_t bound = e->hold ? 1000 * 1024 : 256 * 1024;
    while (e->sent < STREAM_BYTES && sbx__lconn_queued(e->c) < bound) {
        size_t n = STREAM_BYTES - e->sent < sizeof(buf) ? STREAM_BYTES - e->sent : sizeof(buf);
        for (size_t i = 0; i < n; i++)
            buf[i] = pattern(e->sent + i);
        if (sbx__lconn_send(e->c, buf, n, NULL) < 0)
            break;
        e->sent += n;
    }
    if (e->sent == STREAM_BYTES)
        sbx__lconn_shutdown_write(e->c);
}

static int echo_data(struct sbx__lconn *c, const uint8_t *p, size_t n, void *ud,
                     struct sbx_error *err)
{
    struct echo *e = ud;
    (void)c;
    (void)err;
    if (e->hold && !e->released)
        e->pauses++; /* these bytes count below; reading stops until echo_more releases it */
    for (size_t i = 0; i < n; i++) {
        if (e->got < STREAM_BYTES) {
            if (p[i] != pattern(e->got))
                e->bad++;
            e->got++;
        } else if (e->tail_len < sizeof(e->tail) - 1) {
            e->tail[e->tail_len++] = (char)p[i];
        }
    }
    e->since_pause += n;
    if (e->hold && !e->released)
        return SBX__PAUSE;
    if (e->since_pause >= 50000) {
        /* Stop mid-record: the rest of what TLS decrypted must still come after resume. */
        e->since_pause = 0;
        e->pauses++;
        sbx__timer_after(e->resume, 5);
        return SBX__PAUSE;
    }
    return 0;
}

static void echo_end(struct sbx__lconn *c, int rc, const struct sbx_error *err, void *ud)
{
    struct echo *e = ud;
    (void)c;
    if (rc < 0)
        printf("# end: %s\n", err->msg);
    e->ended = 1;
    e->end_rc = rc;
    ring();
}

static void echo_drained(struct sbx__lconn *c, void *ud)
{
    (void)c;
    feed(ud);
}

static void echo_more(struct sbx__timer *t, void *ud)
{
    struct echo *e = ud;
    if (e->sent < STREAM_BYTES)
        feed(e);
    if (e->hold && !e->released &&
        (e->sent == STREAM_BYTES || sbx__lconn_queued(e->c) >= 768 * 1024)) {
        /* The engine stopped reading long ago; the queue grew (and moved) meanwhile. */
        e->released = 1;
        sbx__lconn_resume(e->c);
    }
    if (e->sent < STREAM_BYTES || (e->hold && !e->released))
        sbx__timer_after(t, 1);
}

static void echo_resume(struct sbx__timer *t, void *ud)
{
    struct echo *e = ud;
    (void)t;
    sbx__lconn_resume(e->c);
}

static const struct sbx__lconn_ops echo_ops = {echo_data, echo_end, echo_drained};

static void echo_start(void *ud)
{
    struct echo *e = ud;
    struct sbx_error err = SBX_ERROR_INIT;
    e->resume = sbx__timer_new(e->l, echo_resume, e);
    e->more = sbx__timer_new(e->l, echo_more, e);
    CHECK_OK(sbx__lconn_new(e->l, e->conn, 0, &echo_ops, e, &e->c, &err), &err);
    if (e->c)
        sbx__timer_after(e->more, 0);
    else
        ring();
}

static void echo_stop(void *ud)
{
    struct echo *e = ud;
    sbx__lconn_free(e->c);
    sbx__timer_free(e->resume);
    sbx__timer_free(e->more);
}

static void run_echo(struct sbx__endpoint *ep, int hold)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct echo e = {.hold = hold};
    CHECK_OK(sbx__loop_new(&e.l, &err), &err);
    e.conn = hijack(ep, "/hijack");
    if (e.conn && e.l) {
        sbx__loop_call(e.l, echo_start, &e);
        CHECK_OK(wait_bell(), &err);
        sbx__loop_call(e.l, echo_stop, &e);
        CHECK_EQ_INT(e.end_rc, 0);
        CHECK_EQ_INT(e.got, STREAM_BYTES);
        CHECK_EQ_INT(e.bad, 0);
        CHECK(e.pauses > 10);
        CHECK_EQ_STR(e.tail, "bye:2097152");
    } else {
        sbx__conn_free(e.conn);
    }
    sbx__loop_free(e.l);
}

/* ---- WebSocket ---- */

struct wse {
    struct sbx__loop *l;
    struct sbx__wsconn *wc;
    struct sbx__lws *w;
    int got, ended, end_rc, closed_seen;
};

static int wse_message(struct sbx__lws *w, const struct sbx__ws_msg *m, void *ud,
                       struct sbx_error *err)
{
    struct wse *e = ud;
    (void)err;
    if (m->opcode == SBX__WS_CLOSE) {
        e->closed_seen = 1;
        return 0;
    }
    char want[32];
    int k = snprintf(want, sizeof(want), "message %d", e->got);
    if (m->opcode == SBX__WS_TEXT && m->len == (size_t)k && memcmp(m->data, want, m->len) == 0)
        e->got++;
    if (e->got == 50)
        sbx__lws_close(w, 1000, "done");
    return 0;
}

static void wse_end(struct sbx__lws *w, int rc, const struct sbx_error *err, void *ud)
{
    struct wse *e = ud;
    (void)w;
    if (rc < 0)
        printf("# ws end: %s\n", err->msg);
    e->ended = 1;
    e->end_rc = rc;
    ring();
}

static const struct sbx__lws_ops wse_ops = {wse_message, wse_end, NULL};

static void wse_start(void *ud)
{
    struct wse *e = ud;
    struct sbx_error err = SBX_ERROR_INIT;
    CHECK_OK(sbx__lws_new(e->l, e->wc, &wse_ops, e, &e->w, &err), &err);
    for (int i = 0; e->w && i < 50; i++) {
        char msg[32];
        int k = snprintf(msg, sizeof(msg), "message %d", i);
        CHECK_OK(sbx__lws_send(e->w, SBX__WS_TEXT, msg, (size_t)k, &err), &err);
    }
    if (!e->w)
        ring();
}

static void wse_stop(void *ud)
{
    sbx__lws_free(((struct wse *)ud)->w);
}

static void run_ws(struct sbx__endpoint *ep)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct wse e = {0};
    CHECK_OK(sbx__loop_new(&e.l, &err), &err);
    CHECK_OK(sbx__wsconn_open(ep, "/echo", NULL, NULL, 0, 0, &e.wc, &err), &err);
    if (e.wc && e.l) {
        sbx__loop_call(e.l, wse_start, &e);
        CHECK_OK(wait_bell(), &err);
        sbx__loop_call(e.l, wse_stop, &e);
        CHECK_EQ_INT(e.got, 50);
        CHECK_EQ_INT(e.end_rc, 0);
        CHECK(e.closed_seen);
    } else {
        sbx__wsconn_free(e.wc);
    }
    sbx__loop_free(e.l);
}

/* Keep-alive: a peer that answers pings keeps the connection past the silence bound (the 50
 * messages go out only after several bounds' worth of pings); a mute one ends it. */
struct wka {
    struct wse e;
    struct sbx__timer *later;
};

static void wka_send(struct sbx__timer *t, void *ud)
{
    struct wka *k = ud;
    struct sbx_error err = SBX_ERROR_INIT;
    (void)t;
    for (int i = 0; !k->e.ended && i < 50; i++) {
        char msg[32];
        int n = snprintf(msg, sizeof(msg), "message %d", i);
        CHECK_OK(sbx__lws_send(k->e.w, SBX__WS_TEXT, msg, (size_t)n, &err), &err);
    }
}

static void wka_start(void *ud)
{
    struct wka *k = ud;
    struct sbx_error err = SBX_ERROR_INIT;
    CHECK_OK(sbx__lws_new(k->e.l, k->e.wc, &wse_ops, &k->e, &k->e.w, &err), &err);
    if (!k->e.w) {
        ring();
        return;
    }
    sbx__lws_keepalive(k->e.w, 20, 1500);
    k->later = sbx__timer_new(k->e.l, wka_send, k);
    sbx__timer_after(k->later, 4000);
}

static void wka_stop(void *ud)
{
    struct wka *k = ud;
    sbx__timer_free(k->later);
    sbx__lws_free(k->e.w);
}

static void run_keepalive(struct sbx__endpoint *ep, const char *path)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct wka k = {{0}, NULL};
    CHECK_OK(sbx__loop_new(&k.e.l, &err), &err);
    CHECK_OK(sbx__wsconn_open(ep, path, NULL, NULL, 0, 0, &k.e.wc, &err), &err);
    if (k.e.wc && k.e.l) {
        sbx__loop_call(k.e.l, wka_start, &k);
        CHECK_OK(wait_bell(), &err);
        sbx__loop_call(k.e.l, wka_stop, &k);
        if (strcmp(path, "/echo") == 0) {
            CHECK_EQ_INT(k.e.got, 50); /* the pongs kept it */
            CHECK_EQ_INT(k.e.end_rc, 0);
        } else {
            CHECK_EQ_INT(k.e.got, 0);
            CHECK_EQ_INT(k.e.end_rc, -SBX_E_TIMEOUT); /* the silence ended it */
        }
    } else {
        sbx__wsconn_free(k.e.wc);
    }
    sbx__loop_free(k.e.l);
}

static void test_tls_streams(void)
{
    char dir[64];
    struct tserver h, w;
    bell_open();
    if (make_certs(dir) < 0) {
        CHECK(!"certificates were made");
        bell_close();
        return;
    }
    char crt[128], key[128], ca[128];
    snprintf(crt, sizeof(crt), "%s/server.crt", dir);
    snprintf(key, sizeof(key), "%s/server.key", dir);
    snprintf(ca, sizeof(ca), "%s/ca.crt", dir);
    const char *args[] = {"--tls", crt, key, NULL};
    if (tserver_start(&h, "tests/wire/http-fake.py", args) == 0) {
        struct sbx__endpoint *ep = ep_for("https", h.port, ca);
        if (ep) {
            run_echo(ep, 0);
            run_echo(ep, 1);
        }
        sbx__endpoint_free(ep);
    } else {
        CHECK(!"the http server started");
    }
    tserver_stop(&h);
    if (tserver_start(&w, "tests/wire/ws-echo.py", args) == 0) {
        struct sbx__endpoint *ep = ep_for("https", w.port, ca);
        if (ep)
            run_ws(ep);
        if (ep)
            run_keepalive(ep, "/echo");
        if (ep)
            run_keepalive(ep, "/mute");
        sbx__endpoint_free(ep);
    } else {
        CHECK(!"the websocket server started");
    }
    tserver_stop(&w);
    rm_tree(dir);
    bell_close();
}

/* ---- asynchronous requests ---- */

struct xt {
    struct sbx__loop *l;
    struct sbx__endpoint *ep;
    struct sbx__xfer *x;
    struct sbx__timer *resume;
    int rc;
    long status;
    int attempts, lines, pauses;
    char body[256];
    char msg[SBX_ERROR_MSG_MAX];
    const char *path;
    int stream;
};

static int xt_data(struct sbx__xfer *x, const uint8_t *p, size_t n, void *ud, struct sbx_error *err)
{
    struct xt *t = ud;
    (void)x;
    (void)err;
    for (size_t i = 0; i < n; i++)
        t->lines += p[i] == '\n';
    t->pauses++;
    sbx__timer_after(t->resume, 1);
    return SBX__PAUSE;
}

static void xt_resume(struct sbx__timer *tm, void *ud)
{
    struct xt *t = ud;
    (void)tm;
    if (t->x)
        sbx__xfer_resume(t->x);
}

static void xt_done(struct sbx__xfer *x, int rc, const struct sbx__http_resp *resp,
                    const struct sbx_error *err, void *ud)
{
    struct xt *t = ud;
    (void)x;
    t->x = NULL;
    t->rc = rc;
    if (rc == 0) {
        t->status = resp->status;
        t->attempts = resp->attempts;
        snprintf(t->body, sizeof(t->body), "%.*s", (int)resp->body.len,
                 resp->body.data ? resp->body.data : "");
    } else {
        snprintf(t->msg, sizeof(t->msg), "%s", err->msg);
    }
    ring();
}

static const struct sbx__xfer_ops xt_ops = {NULL, xt_done};
static const struct sbx__xfer_ops xt_stream_ops = {xt_data, xt_done};

static void xt_start(void *ud)
{
    struct xt *t = ud;
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__http_req req = {.path = t->path};
    t->resume = sbx__timer_new(t->l, xt_resume, t);
    int rc = sbx__xfer_start(t->l, t->ep, &req, t->stream ? &xt_stream_ops : &xt_ops, t, &t->x,
                             &err);
    if (rc < 0) {
        t->rc = rc;
        ring();
    }
}

static void xt_stop(void *ud)
{
    sbx__timer_free(((struct xt *)ud)->resume);
}

static void xfer_one(struct sbx__loop *l, struct sbx__endpoint *ep, const char *path, int stream,
                     struct xt *t)
{
    memset(t, 0, sizeof(*t));
    t->l = l;
    t->ep = ep;
    t->path = path;
    t->stream = stream;
    sbx__loop_call(l, xt_start, t);
    CHECK_EQ_INT(wait_bell(), 0);
    sbx__loop_call(l, xt_stop, t);
}

static void test_xfer(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct tserver s;
    struct sbx__loop *l = NULL;
    struct xt t;
    bell_open();
    CHECK_OK(sbx__loop_new(&l, &err), &err);
    if (tserver_start(&s, "tests/wire/http-fake.py", NULL) == 0 && l) {
        struct sbx__endpoint *ep = ep_for("http", s.port, NULL);
        xfer_one(l, ep, "/json", 0, &t);
        CHECK_EQ_INT(t.rc, 0);
        CHECK_EQ_INT(t.status, 200);
        CHECK_CONTAINS(t.body, "\"ok\": true");
        xfer_one(l, ep, "/stream?n=300", 1, &t);
        CHECK_EQ_INT(t.rc, 0);
        CHECK_EQ_INT(t.lines, 300);
        CHECK(t.pauses > 1);
        xfer_one(l, ep, "/retry/x?n=2&after=0", 0, &t);
        CHECK_EQ_INT(t.status, 200);
        CHECK_EQ_INT(t.attempts, 3);
        xfer_one(l, ep, "/status/404?shape=docker", 0, &t);
        CHECK_EQ_INT(t.rc, 0);
        CHECK_EQ_INT(t.status, 404);
        CHECK_CONTAINS(t.body, "the server says no");
        int port = s.port;
        tserver_stop(&s);
        sbx__endpoint_free(ep);
        ep = ep_for("http", port, NULL);
        xfer_one(l, ep, "/json", 0, &t);
        CHECK_EQ_INT(t.rc, -SBX_E_HTTP);
        CHECK_CONTAINS(t.msg, "cannot reach the fake");
        sbx__endpoint_free(ep);
    } else {
        CHECK(!"the server started");
    }
    tserver_stop(&s);
    sbx__loop_free(l);
    bell_close();
}

/* ---- remote commands over a hijacked echo ---- */

struct rp {
    struct sbx__loop *l;
    struct sbx__conn *conn;
    struct sbx__lconn *c;
    struct sbx__rproc *r;
    int paused, pauses, signals[4], nsig, resizes;
    unsigned rows, cols;
    size_t typed;
    int bye; /* the server's last words came: a clean end */
};

static size_t rp_input(struct sbx__rproc *r, const uint8_t *p, size_t n, void *ud)
{
    struct rp *x = ud;
    (void)r;
    if (!x->c)
        return n;
    if (n == 0) {
        sbx__lconn_shutdown_write(x->c);
        return 0;
    }
    x->typed += n;
    if (sbx__lconn_queued(x->c) > 128 * 1024)
        return 0;
    return sbx__lconn_send(x->c, p, n, NULL) == 0 ? n : 0;
}

static int rp_data(struct sbx__lconn *c, const uint8_t *p, size_t n, void *ud,
                   struct sbx_error *err)
{
    struct rp *x = ud;
    (void)c;
    (void)err;
    if (n >= 4 && memmem(p, n, "bye:", 4))
        x->bye = 1;
    if (!sbx__rproc_output(x->r, 1, p, n)) {
        x->paused = 1;
        x->pauses++;
        return SBX__PAUSE;
    }
    return 0;
}

static void rp_end(struct sbx__lconn *c, int rc, const struct sbx_error *err, void *ud)
{
    struct rp *x = ud;
    (void)c;
    if (rc == 0 && x->bye) {
        struct sbx_exit st = {.code = 0};
        sbx__rproc_exit(x->r, &st);
        return;
    }
    struct sbx_error lost = SBX_ERROR_INIT;
    sbx_error_set(&lost, SBX_E_HTTP, 0, "the connection was lost while '%s' ran%s%s",
                  sbx__rproc_name(x->r), rc < 0 ? ": " : "", rc < 0 ? err->msg : "");
    sbx__rproc_fail(x->r, &lost);
}

static void rp_drained(struct sbx__lconn *c, void *ud)
{
    struct rp *x = ud;
    (void)c;
    sbx__rproc_input_ready(x->r);
}

static const struct sbx__lconn_ops rp_conn_ops = {rp_data, rp_end, rp_drained};

static void rp_resume(struct sbx__rproc *r, void *ud)
{
    struct rp *x = ud;
    (void)r;
    if (x->paused && x->c) {
        x->paused = 0;
        sbx__lconn_resume(x->c);
    }
}

static void rp_signal(struct sbx__rproc *r, int sig, void *ud)
{
    struct rp *x = ud;
    if (x->nsig < 4)
        x->signals[x->nsig++] = sig;
    if (sig == SIGKILL) {
        struct sbx_exit st = {.code = -1, .signal = SIGKILL};
        sbx__rproc_exit(r, &st);
    }
}

static void rp_resize(struct sbx__rproc *r, unsigned rows, unsigned cols, void *ud)
{
    struct rp *x = ud;
    (void)r;
    x->resizes++;
    x->rows = rows;
    x->cols = cols;
}

static void rp_stop(struct sbx__rproc *r, void *ud)
{
    struct rp *x = ud;
    (void)r;
    sbx__lconn_free(x->c);
    x->c = NULL;
}

static const struct sbx__rproc_ops rp_ops = {.input = rp_input,
                                             .resize = rp_resize,
                                             .signal = rp_signal,
                                             .resume = rp_resume,
                                             .stop = rp_stop};

static int rp_setup(struct sbx__rproc *r, void *ud, struct sbx_error *err)
{
    struct rp *x = ud;
    x->r = r;
    if (!x->conn)
        return 0;
    int rc = sbx__lconn_new(x->l, x->conn, 0, &rp_conn_ops, x, &x->c, err);
    x->conn = NULL;
    return rc;
}

struct pump {
    int fd;
    size_t n;
};

static void *pump_main(void *arg)
{
    struct pump *p = arg;
    uint8_t buf[8192];
    size_t done = 0;
    while (done < p->n) {
        size_t k = p->n - done < sizeof(buf) ? p->n - done : sizeof(buf);
        for (size_t i = 0; i < k; i++)
            buf[i] = pattern(done + i);
        ssize_t w = send(p->fd, buf, k, MSG_NOSIGNAL);
        if (w <= 0)
            break;
        done += (size_t)w;
    }
    shutdown(p->fd, SHUT_WR);
    return NULL;
}

/* Read fd to EOF, slowly when slow; counts the bytes that match the pattern in order. */
static size_t drain(int fd, int slow, size_t *matching, struct sbx_buf *tail)
{
    uint8_t buf[4096];
    size_t total = 0;
    *matching = 0;
    for (;;) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, T_MS) <= 0)
            break;
        ssize_t n = read(fd, buf, slow ? 512 : sizeof(buf));
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (n <= 0)
            break;
        for (ssize_t i = 0; i < n; i++, total++) {
            if (*matching == total && buf[i] == pattern(total))
                (*matching)++;
            else if (tail && sbx_buf_addch(tail, (char)buf[i], NULL) < 0)
                break;
        }
        if (slow && total % 65536 < 512)
            sbx_sleep_ms(1);
    }
    return total;
}

static void test_rproc_echo(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct tserver s;
    if (tserver_start(&s, "tests/wire/http-fake.py", NULL) < 0) {
        CHECK(!"the server started");
        tserver_stop(&s);
        return;
    }
    struct sbx__endpoint *ep = ep_for("http", s.port, NULL);
    struct rp x = {0};
    CHECK_OK(sbx__loop_new(&x.l, &err), &err);
    x.conn = hijack(ep, "/hijack");
    struct sbx__rproc_opts o = {.name = "echo", .want_stdin = 1, .max_buffered = 16384};
    struct sbx__rproc *r = NULL;
    CHECK_OK(sbx__rproc_new(x.l, &o, &rp_ops, &x, &r, &err), &err);
    CHECK_OK(sbx__rproc_start(r, rp_setup, &err), &err);
    struct sbx_proc *p = sbx__rproc_proc(r);
    size_t n = (size_t)3 << 20, matching = 0;
    struct pump pu = {p->stdin_fd, n};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, pump_main, &pu) == 0);
    struct sbx_buf tail;
    sbx_buf_init(&tail, 64);
    size_t total = drain(p->stdout_fd, 1, &matching, &tail);
    pthread_join(t, NULL);
    CHECK_EQ_INT(matching, n);
    CHECK_EQ_INT(total, n + strlen("bye:3145728"));
    CHECK_EQ_STR(tail.data, "bye:3145728");
    CHECK(x.pauses > 0);
    struct sbx_exit st;
    CHECK_OK(p->ops->wait(p, T_MS, &st, &err), &err);
    CHECK_EQ_INT(st.code, 0);
    CHECK(!st.timed_out);
    p->ops->free(p);
    sbx_buf_release(&tail);
    sbx__loop_free(x.l);
    sbx__endpoint_free(ep);
    tserver_stop(&s);
}

/* The server dies while the command runs: EOF on the outputs, the status names the loss. */
static void test_rproc_lost(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct tserver s;
    if (tserver_start(&s, "tests/wire/http-fake.py", NULL) < 0) {
        CHECK(!"the server started");
        tserver_stop(&s);
        return;
    }
    struct sbx__endpoint *ep = ep_for("http", s.port, NULL);
    struct rp x = {0};
    CHECK_OK(sbx__loop_new(&x.l, &err), &err);
    x.conn = hijack(ep, "/hijack");
    struct sbx__rproc_opts o = {.name = "make", .want_stdin = 1};
    struct sbx__rproc *r = NULL;
    CHECK_OK(sbx__rproc_new(x.l, &o, &rp_ops, &x, &r, &err), &err);
    CHECK_OK(sbx__rproc_start(r, rp_setup, &err), &err);
    struct sbx_proc *p = sbx__rproc_proc(r);
    CHECK(send(p->stdin_fd, "abc", 3, MSG_NOSIGNAL) == 3);
    char buf[8];
    struct pollfd pf = {.fd = p->stdout_fd, .events = POLLIN};
    CHECK(poll(&pf, 1, T_MS) == 1 && read(p->stdout_fd, buf, sizeof(buf)) == 3);
    tserver_stop(&s); /* the server is gone mid-stream */
    size_t matching = 0;
    drain(p->stdout_fd, 0, &matching, NULL); /* returns: EOF */
    struct sbx_exit st;
    CHECK_ERR(p->ops->wait(p, T_MS, &st, &err), SBX_E_HTTP, &err,
              "the connection was lost while 'make' ran");
    p->ops->free(p);
    sbx__loop_free(x.l);
    sbx__endpoint_free(ep);
}

/* A deadline: SIGTERM, then SIGKILL after the grace; the status says timed out. */
static void test_rproc_deadline(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct rp x = {0};
    CHECK_OK(sbx__loop_new(&x.l, &err), &err);
    struct sbx__rproc_opts o = {.name = "sleep", .timeout_ms = 50, .kill_grace_ms = 50};
    struct sbx__rproc *r = NULL;
    CHECK_OK(sbx__rproc_new(x.l, &o, &rp_ops, &x, &r, &err), &err);
    CHECK_OK(sbx__rproc_start(r, rp_setup, &err), &err);
    struct sbx_proc *p = sbx__rproc_proc(r);
    struct sbx_exit st;
    CHECK_OK(p->ops->wait(p, T_MS, &st, &err), &err);
    CHECK(st.timed_out);
    CHECK_EQ_INT(st.signal, SIGKILL);
    CHECK_EQ_INT(x.nsig, 2);
    CHECK_EQ_INT(x.signals[0], SIGTERM);
    CHECK_EQ_INT(x.signals[1], SIGKILL);
    p->ops->free(p);
    sbx__loop_free(x.l);
}

/* A terminal: keys typed reach the provider, its output the master, a resize its callback. */
static void test_rproc_tty(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct tserver s;
    if (tserver_start(&s, "tests/wire/http-fake.py", NULL) < 0) {
        CHECK(!"the server started");
        tserver_stop(&s);
        return;
    }
    struct sbx__endpoint *ep = ep_for("http", s.port, NULL);
    struct rp x = {0};
    CHECK_OK(sbx__loop_new(&x.l, &err), &err);
    x.conn = hijack(ep, "/hijack");
    struct sbx__rproc_opts o = {.name = "sh", .tty = 1, .rows = 30, .cols = 100};
    struct sbx__rproc *r = NULL;
    CHECK_OK(sbx__rproc_new(x.l, &o, &rp_ops, &x, &r, &err), &err);
    CHECK_OK(sbx__rproc_start(r, rp_setup, &err), &err);
    struct sbx_proc *p = sbx__rproc_proc(r);
    CHECK(p->tty && p->stdin_fd == p->stdout_fd && p->stderr_fd < 0);
    struct winsize ws;
    CHECK(ioctl(p->stdout_fd, TIOCGWINSZ, &ws) == 0 && ws.ws_row == 30 && ws.ws_col == 100);
    CHECK(write(p->stdin_fd, "typed", 5) == 5);
    char buf[16] = {0};
    size_t got = 0;
    while (got < 5) {
        struct pollfd pf = {.fd = p->stdout_fd, .events = POLLIN};
        if (poll(&pf, 1, T_MS) <= 0)
            break;
        ssize_t n = read(p->stdout_fd, buf + got, sizeof(buf) - 1 - got);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    CHECK_EQ_STR(buf, "typed");
    ws.ws_row = 50;
    ws.ws_col = 132;
    CHECK(ioctl(p->stdout_fd, TIOCSWINSZ, &ws) == 0);
    for (int i = 0; i < 100 && !__atomic_load_n(&x.resizes, __ATOMIC_RELAXED); i++)
        sbx_sleep_ms(20);
    CHECK_EQ_INT(x.rows, 50);
    CHECK_EQ_INT(x.cols, 132);
    p->ops->free(p); /* still running: torn down from here */
    sbx__loop_free(x.l);
    sbx__endpoint_free(ep);
    tserver_stop(&s);
}

static int count_threads(void)
{
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n - 1; /* the directory's own */
}

static void end_now(void *ud)
{
    struct sbx_exit st = {.code = 3};
    sbx__rproc_exit(ud, &st);
}

/* The process's loop runs a thread only while it holds something (the fd check of the test
 * harness fails the case if its descriptors stayed open). */
static void test_default_loop(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__loop *l = NULL;
    int before = count_threads();
    CHECK_OK(sbx__loop_default(&l, &err), &err);
    for (int round = 0; round < 2 && l; round++) {
        struct rp x = {.l = l};
        struct sbx__rproc_opts o = {.name = "true"};
        struct sbx__rproc *r = NULL;
        CHECK_OK(sbx__rproc_new(l, &o, &rp_ops, &x, &r, &err), &err);
        CHECK_OK(sbx__rproc_start(r, rp_setup, &err), &err);
        CHECK_EQ_INT(count_threads(), before + 1);
        sbx__loop_call(l, end_now, r);
        struct sbx_proc *p = sbx__rproc_proc(r);
        struct sbx_exit st;
        CHECK_OK(p->ops->wait(p, T_MS, &st, &err), &err);
        CHECK_EQ_INT(st.code, 3);
        char c;
        CHECK_EQ_INT(read(p->stdout_fd, &c, 1), 0);
        p->ops->free(p);
        CHECK_EQ_INT(count_threads(), before);
    }
}

/* Out of descriptors: making a remote command is an error, never an abort. */
static void test_no_descriptors(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__loop *l = NULL;
    const char *pre = getenv("LD_PRELOAD");
    if (pre && strstr(pre, "vgpreload")) {
        printf("# under valgrind: descriptor limits are valgrind's own, the case does not apply\n");
        return;
    }
    CHECK_OK(sbx__loop_default(&l, &err), &err);
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    struct rlimit tight = {.rlim_cur = (rlim_t)count_fds() + 1, .rlim_max = rl.rlim_max};
    setrlimit(RLIMIT_NOFILE, &tight);
    struct rp x = {.l = l};
    struct sbx__rproc_opts o = {.name = "true"};
    struct sbx__rproc *r = NULL;
    CHECK_ERR(sbx__rproc_new(l, &o, &rp_ops, &x, &r, &err), SBX_E_SYS, &err, NULL);
    setrlimit(RLIMIT_NOFILE, &rl);
    CHECK_EQ_INT(count_threads(), 1);
}

int main(void)
{
    TAP_START();
    TAP_RUN_FORKED(test_basics);
    TAP_RUN_FORKED(test_rproc_deadline);
    TAP_RUN_FORKED(test_default_loop);
    TAP_RUN_FORKED(test_no_descriptors);
    if (!have_python()) {
        printf("# no python3: the server cases skip\n");
        return TAP_DONE();
    }
    TAP_RUN_FORKED(test_tls_streams);
    TAP_RUN_FORKED(test_xfer);
    TAP_RUN_FORKED(test_rproc_echo);
    TAP_RUN_FORKED(test_rproc_lost);
    TAP_RUN_FORKED(test_rproc_tty);
    return TAP_DONE();
}
