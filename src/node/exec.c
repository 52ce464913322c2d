/* The daemon's exec: a command of the local provider relayed over a WebSocket with Kubernetes'
 * v5.channel.k8s.io layout (src/node/daemon.h, docs/internals/node.md). The connection's thread
 * polls the TLS socket and the command's descriptors. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>

#include "node/daemon.h"
#include "sandbox/wire/channel.h"
#include "sandbox/wire/ws.h"
#include "sbx/session.h"
#include "sbx/strv.h"

#define ARG_MAX_BYTES (64 << 10)
#define CLOSE_WAIT_MS 5000

struct relay {
    struct node_conn *c;
    struct sbx__ws ws;
    struct sbx_proc *p;
    struct sbx_buf msg; /* one channel message being built */
    int out_open, err_open, peer_gone;
};

static int flush(struct relay *r, struct sbx_error *err)
{
    int rc = r->ws.out.len ? node_send(r->c, r->ws.out.data, r->ws.out.len, err) : 0;
    sbx_buf_reset(&r->ws.out);
    return rc;
}

static int send_channel(struct relay *r, int ch, const void *p, size_t n, struct sbx_error *err)
{
    sbx_buf_reset(&r->msg);
    int rc = sbx__ch_encode(SBX__CH_V5, ch, p, n, &r->msg, err);
    if (rc == 0)
        rc = sbx__ws_send(&r->ws, SBX__WS_BINARY, r->msg.data, r->msg.len, err);
    return rc < 0 ? rc : flush(r, err);
}

/* Read what fd holds now (non-blocking) onto channel ch; *open 0 at its end. */
static int pump(struct relay *r, int fd, int ch, int *open, struct sbx_error *err)
{
    char b[32768];
    for (;;) {
        ssize_t k = read(fd, b, sizeof(b));
        if (k > 0) {
            int rc = send_channel(r, ch, b, (size_t)k, err);
            if (rc < 0)
                return rc;
            continue;
        }
        if (k == 0 || (errno != EAGAIN && errno != EINTR))
            *open = 0;
        return 0;
    }
}

/* One message of the harness: stdin, its close, a resize. */
static int on_message(struct relay *r, const struct sbx__ws_msg *m, struct sbx_error *err)
{
    if (m->opcode == SBX__WS_CLOSE) {
        r->peer_gone = 1;
        return 0;
    }
    if (m->opcode != SBX__WS_BINARY && m->opcode != SBX__WS_TEXT)
        return 0;
    struct sbx__ch_frame f;
    int rc = sbx__ch_decode(SBX__CH_V5, m->opcode, m->data, m->len, NULL, &f, err);
    if (rc < 0)
        return rc;
    if (f.channel == SBX__CH_STDIN && r->p->stdin_fd >= 0) {
        for (size_t off = 0; off < f.len;) {
            ssize_t k = send(r->p->stdin_fd, f.data + off, f.len - off, MSG_NOSIGNAL);
            if (k < 0 && errno == EINTR)
                continue;
            if (k < 0)
                break; /* the command closed its stdin: what follows is dropped */
            off += (size_t)k;
        }
    } else if (f.channel == SBX__CH_CLOSE && f.closed == SBX__CH_STDIN) {
        sbx_proc_close_stdin(r->p);
    } else if (f.channel == SBX__CH_RESIZE && r->p->tty) {
        unsigned w, h;
        if (sbx__ch_resize_decode(f.data, f.len, &w, &h, err) < 0)
            return -err->code;
        sbx_proc_resize(r->p, (unsigned short)h, (unsigned short)w, NULL);
    }
    return 0;
}

/* Decode what the harness sent (the buffered bytes first: TLS may hold more than the socket
 * shows). */
static int from_peer(struct relay *r, struct sbx_error *err)
{
    char b[16384];
    long k = node_recv(r->c, b, sizeof(b), err);
    if (k <= 0) {
        r->peer_gone = 1;
        return k < 0 ? (int)k : 0;
    }
    if (sbx_buf_add(&r->c->in, b, (size_t)k, err) < 0)
        return -err->code;
    while (r->c->in.len && !r->peer_gone) {
        struct sbx__ws_msg m;
        long used = sbx__ws_recv(&r->ws, (const uint8_t *)r->c->in.data, r->c->in.len, &m, err);
        if (used < 0) {
            flush(r, NULL);
            return (int)used;
        }
        int rc = on_message(r, &m, err);
        sbx_buf_consume(&r->c->in, (size_t)used);
        if (rc < 0 || (rc = flush(r, err)) < 0)
            return rc;
    }
    return 0;
}

/* Relay until the command's status is known and its output drained, or the harness left. */
static int relay_loop(struct relay *r, struct sbx_error *err)
{
    while (!r->peer_gone) {
        if (SSL_pending(r->c->ssl) > 0) {
            int rc = from_peer(r, err);
            if (rc < 0)
                return rc;
            continue;
        }
        struct pollfd pf[4] = {{r->c->fd, POLLIN, 0},
                               {r->out_open ? r->p->stdout_fd : -1, POLLIN, 0},
                               {r->err_open ? r->p->stderr_fd : -1, POLLIN, 0},
                               {r->p->status_fd, POLLIN, 0}};
        if (poll(pf, 4, -1) < 0 && errno != EINTR)
            return sbx_error_errno(err, errno, "poll");
        int rc = 0;
        if (pf[0].revents)
            rc = from_peer(r, err);
        if (rc == 0 && pf[1].revents)
            rc = pump(r, r->p->stdout_fd, SBX__CH_STDOUT, &r->out_open, err);
        if (rc == 0 && pf[2].revents)
            rc = pump(r, r->p->stderr_fd, SBX__CH_STDERR, &r->err_open, err);
        if (rc < 0)
            return rc;
        if (pf[3].revents) {
            /* The status is known: what the output still holds goes first. */
            if (r->out_open)
                rc = pump(r, r->p->stdout_fd, SBX__CH_STDOUT, &r->out_open, err);
            if (rc == 0 && r->err_open)
                rc = pump(r, r->p->stderr_fd, SBX__CH_STDERR, &r->err_open, err);
            return rc < 0 ? rc : 1;
        }
    }
    return 0;
}

static int finish(struct relay *r, struct sbx_error *err)
{
    struct sbx_exit st;
    int rc = sbx_proc_wait(r->p, 0, &st, err);
    if (rc < 0)
        return rc;
    int code = st.signal ? 128 + st.signal : st.code;
    sbx_buf_reset(&r->msg);
    struct sbx_buf status;
    sbx_buf_init(&status, SBX__CH_STATUS_MAX);
    rc = sbx__ch_status_encode(SBX__CH_V5, code & 0xff, NULL, &status, err);
    if (rc == 0)
        rc = send_channel(r, SBX__CH_ERROR, status.data, status.len, err);
    sbx_buf_release(&status);
    if (rc == 0)
        rc = sbx__ws_close(&r->ws, SBX__WS_CLOSE_NORMAL, NULL, err);
    if (rc == 0)
        rc = flush(r, err);
    /* The harness's close answers ours (bounded: it may have gone). */
    for (int waited = 0; rc == 0 && r->ws.state != SBX__WS_CLOSED && waited < CLOSE_WAIT_MS;
         waited += 100) {
        struct pollfd pf = {r->c->fd, POLLIN, 0};
        if (SSL_pending(r->c->ssl) > 0 || poll(&pf, 1, 100) > 0) {
            if (from_peer(r, err) < 0 || r->peer_gone)
                break;
        }
    }
    return 0;
}

/* The command of the request: each command= parameter one argument. */
static int parse_exec(struct node_req *req, struct sbx_strv *argv, struct sbx_exec_spec *spec,
                      char *cwd, size_t cwd_cap, struct sbx_error *err)
{
    char *v = malloc(ARG_MAX_BYTES);
    int rc = 0;
    for (size_t i = 0;; i++) {
        int got = node_query(req->query, "command", i, v, ARG_MAX_BYTES);
        if (got < 0 || i >= NODE_ARGS_MAX) {
            rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "a command argument or the count is too big");
            break;
        }
        if (got == 0)
            break;
        sbx_strv_push(argv, v);
    }
    free(v);
    if (rc == 0 && argv->n == 0)
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "an exec needs command=");
    char flag[8];
    if (rc == 0 && node_query(req->query, "cwd", 0, cwd, cwd_cap) == 1)
        spec->cwd = cwd;
    if (node_query(req->query, "stdin", 0, flag, sizeof(flag)) == 1 && strcmp(flag, "1") == 0)
        spec->flags |= SBX_EXEC_STDIN;
    if (node_query(req->query, "tty", 0, flag, sizeof(flag)) == 1 && strcmp(flag, "1") == 0)
        spec->flags |= SBX_EXEC_TTY;
    spec->argv = (const char *const *)argv->v;
    return rc;
}

static int offers_v5(const char *list)
{
    for (const char *p = list; *p;) {
        while (*p == ' ' || *p == ',')
            p++;
        size_t n = strcspn(p, ", ");
        if (n == 17 && strncmp(p, "v5.channel.k8s.io", 17) == 0)
            return 1;
        p += n;
    }
    return 0;
}

static int upgrade(struct node_conn *c, struct node_req *req, struct sbx_error *err)
{
    char accept[SBX__WS_ACCEPT_LEN + 1];
    if (!req->ws_key[0] || !offers_v5(req->ws_protocols))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "an exec is a websocket offering 'v5.channel.k8s.io'");
    int rc = sbx__ws_accept_for(req->ws_key, accept, err);
    if (rc < 0)
        return rc;
    char head[512];
    int n = snprintf(head, sizeof(head),
                     "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: "
                     "Upgrade\r\nSec-WebSocket-Accept: %s\r\nSec-WebSocket-Protocol: "
                     "v5.channel.k8s.io\r\n\r\n",
                     accept);
    return node_send(c, head, (size_t)n, err);
}

void node_exec(struct node_conn *c, struct node_req *req, const char *id)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_client *cl = NULL;
    struct sbx_session *s = NULL;
    struct sbx_strv argv;
    struct sbx_exec_spec spec = {0};
    char *cwd = malloc(4096);
    struct relay r = {.c = c, .out_open = 1};
    sbx_strv_init(&argv);
    sbx__ws_init_server(&r.ws, 0);
    sbx_buf_init(&r.msg, SBX__WS_DEFAULT_MESSAGE);
    int upgraded = 0;
    if (parse_exec(req, &argv, &spec, cwd, 4096, &err) < 0 ||
        sbx_client_new("local", NULL, &cl, &err) < 0 || sbx_client_attach(cl, id, &s, &err) < 0 ||
        sbx_session_exec_start(s, &spec, &r.p, &err) < 0)
        goto out;
    r.err_open = r.p->stderr_fd >= 0;
    fcntl(r.p->stdout_fd, F_SETFL, fcntl(r.p->stdout_fd, F_GETFL) | O_NONBLOCK);
    if (r.err_open)
        fcntl(r.p->stderr_fd, F_SETFL, fcntl(r.p->stderr_fd, F_GETFL) | O_NONBLOCK);
    if (upgrade(c, req, &err) < 0)
        goto out;
    upgraded = 1;
    if (relay_loop(&r, &err) == 1)
        finish(&r, &err);
out:
    if (!upgraded && err.code)
        node_respond_error(c, &err);
    sbx_proc_free(r.p); /* a command still running (the harness left) ends with its group */
    sbx_session_free(s);
    sbx_client_free(cl);
    sbx_strv_release(&argv);
    sbx__ws_release(&r.ws);
    sbx_buf_release(&r.msg);
    free(cwd);
}
