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
#include "sbx/json.h"
#include "sbx/session.h"
#include "sbx/strv.h"

#define ARG_MAX_BYTES (64 << 10)
#define CLOSE_WAIT_MS 5000
#define STDIN_HIGH    (1 << 20) /* stdin waiting for the command: the harness is not read past it */

struct relay {
    struct node_conn *c;
    struct sbx__ws ws;
    struct sbx_proc *p;
    struct sbx_buf msg;   /* one channel message being built */
    struct sbx_buf stdin; /* stdin the command has not taken yet */
    int stdin_eof;        /* the harness closed stdin: close it once stdin is written */
    int out_open, err_open, peer_gone;
    struct node_keepalive ka;
};

/* Write what the command takes of the waiting stdin (non-blocking); then its close. */
static void feed_stdin(struct relay *r)
{
    while (r->stdin.len) {
        /* A terminal's master is no socket: written; a stdin socket is sent to without
         * SIGPIPE and without waiting. */
        ssize_t k = r->p->tty ? write(r->p->stdin_fd, r->stdin.data, r->stdin.len)
                              : send(r->p->stdin_fd, r->stdin.data, r->stdin.len,
                                     MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && errno == EAGAIN)
            return;
        if (k < 0) {
            sbx_buf_reset(&r->stdin); /* the command closed its stdin: the rest is dropped */
            break;
        }
        sbx_buf_consume(&r->stdin, (size_t)k);
    }
    if (r->stdin_eof == 1) {
        sbx_proc_close_stdin(r->p);
        r->stdin_eof = 2;
    }
}

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
    if (f.channel == SBX__CH_STDIN && r->p->stdin_fd >= 0 && !r->stdin_eof) {
        if (sbx_buf_add(&r->stdin, f.data, f.len, err) < 0)
            return -err->code;
        feed_stdin(r);
    } else if (f.channel == SBX__CH_CLOSE && f.closed == SBX__CH_STDIN) {
        r->stdin_eof = r->stdin_eof ? r->stdin_eof : 1;
        feed_stdin(r);
    } else if (f.channel == SBX__CH_RESIZE && r->p->tty) {
        unsigned w, h;
        if (sbx__ch_resize_decode(f.data, f.len, &w, &h, err) < 0)
            return -err->code;
        sbx_proc_resize(r->p, (unsigned short)h, (unsigned short)w, NULL);
    }
    return 0;
}

/* Decode the harness's bytes already read (after the request's head, or past a message). */
static int drain_in(struct relay *r, struct sbx_error *err)
{
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

/* Read what the harness sent, then decode it. */
static int from_peer(struct relay *r, struct sbx_error *err)
{
    char b[16384];
    long k = node_recv(r->c, b, sizeof(b), err);
    if (k <= 0) {
        r->peer_gone = 1;
        return k < 0 ? (int)k : 0;
    }
    node_ka_heard(&r->ka);
    if (sbx_buf_add(&r->c->in, b, (size_t)k, err) < 0)
        return -err->code;
    return drain_in(r, err);
}

/* Relay until the command's status is known and its output drained, or the harness left. */
static int relay_loop(struct relay *r, struct sbx_error *err)
{
    int rc0 = drain_in(r, err); /* frames that came with the upgrade request */
    if (rc0 < 0)
        return rc0;
    while (!r->peer_gone) {
        int take = r->stdin.len < STDIN_HIGH; /* else the harness waits: TCP pushes back */
        if (!take)
            node_ka_heard(&r->ka); /* not reading it: its silence says nothing */
        if (take && SSL_pending(r->c->ssl) > 0) {
            int rc = from_peer(r, err);
            if (rc < 0)
                return rc;
            continue;
        }
        struct pollfd pf[5] = {{take ? r->c->fd : -1, POLLIN, 0},
                               {r->out_open ? r->p->stdout_fd : -1, POLLIN, 0},
                               {r->err_open ? r->p->stderr_fd : -1, POLLIN, 0},
                               {r->p->status_fd, POLLIN, 0},
                               {r->stdin.len ? r->p->stdin_fd : -1, POLLOUT, 0}};
        int n = poll(pf, 5, node_ka_poll_ms(&r->ka));
        if (n < 0 && errno != EINTR)
            return sbx_error_errno(err, errno, "poll");
        int rc = n == 0 ? node_ka_tick(&r->ka, &r->ws, r->c, err) : 0;
        if (rc < 0)
            return rc;
        if (pf[4].revents)
            feed_stdin(r);
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
    /* A signal's and a deadline's causes follow the exit code (128+N), so the harness can tell
     * them apart from an exit with that status. */
    rc = sbx__ch_status_encode(SBX__CH_V5, code & 0xff, st.signal, st.timed_out, NULL, &status,
                               err);
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
static int parse_exec(struct node_req *req, struct sbx_strv *argv, struct sbx_strv *env,
                      struct sbx_exec_spec *spec, char *cwd, size_t cwd_cap, struct sbx_error *err)
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
    if (rc == 0 && node_query(req->query, "cwd", 0, cwd, cwd_cap) == 1)
        spec->cwd = cwd;
    static const struct {
        const char *name;
        int flag;
    } flags[] = {{"stdin", SBX_EXEC_STDIN},
                 {"tty", SBX_EXEC_TTY},
                 {"merge", SBX_EXEC_MERGE_STDERR},
                 {"background", SBX_EXEC_KEEP_BACKGROUND}};
    char v8[24];
    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++)
        if (node_query(req->query, flags[i].name, 0, v8, sizeof(v8)) == 1 && strcmp(v8, "1") == 0)
            spec->flags |= flags[i].flag;
    static const char *const nums[] = {"timeout_ms", "grace_ms", "rows", "cols"};
    int64_t val[4] = {0};
    for (size_t i = 0; rc == 0 && i < 4; i++) {
        char *end = NULL;
        int got = node_query(req->query, nums[i], 0, v8, sizeof(v8));
        if (got == 1)
            val[i] = strtoll(v8, &end, 10);
        if (got < 0 || (got == 1 && (*end || val[i] < 0 || val[i] > (i < 2 ? INT32_MAX : 65535))))
            rc = sbx_error_set(err, SBX_E_INVAL, 0, "exec parameter '%s' is not a number in range",
                               nums[i]);
    }
    spec->timeout_ms = val[0], spec->kill_grace_ms = val[1];
    spec->rows = (unsigned short)val[2], spec->cols = (unsigned short)val[3];
    for (size_t i = 0; rc == 0; i++) {
        char *e = malloc(ARG_MAX_BYTES);
        int got = node_query(req->query, "env", i, e, ARG_MAX_BYTES);
        if (got == 1 && (i >= NODE_ARGS_MAX || !strchr(e, '=') || e[0] == '='))
            rc = sbx_error_set(err, SBX_E_INVAL, 0, "exec parameter 'env' takes NAME=VALUE");
        else if (got == 1)
            sbx_strv_push(env, e);
        else if (got < 0)
            rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "an env parameter is too big");
        free(e);
        if (got != 1)
            break;
    }
    spec->argv = (const char *const *)argv->v;
    spec->env = env->n ? (const char *const *)env->v : NULL;
    return rc;
}

int node_ws_offers(const char *list, const char *protocol)
{
    size_t want = strlen(protocol);
    for (const char *p = list; *p;) {
        while (*p == ' ' || *p == ',')
            p++;
        size_t n = strcspn(p, ", ");
        if (n == want && strncmp(p, protocol, n) == 0)
            return 1;
        p += n;
    }
    return 0;
}

int node_ws_upgrade(struct node_conn *c, struct node_req *req, const char *protocol,
                    struct sbx_error *err)
{
    char accept[SBX__WS_ACCEPT_LEN + 1];
    if (!req->ws_key[0] || !node_ws_offers(req->ws_protocols, protocol))
        return sbx_error_set(err, SBX_E_INVAL, 0, "this request is a websocket offering '%s'",
                             protocol);
    int rc = sbx__ws_accept_for(req->ws_key, accept, err);
    if (rc < 0)
        return rc;
    char head[512];
    int n = snprintf(head, sizeof(head),
                     "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: "
                     "Upgrade\r\nSec-WebSocket-Accept: %s\r\nSec-WebSocket-Protocol: "
                     "%s\r\n\r\n",
                     accept, protocol);
    return node_send(c, head, (size_t)n, err);
}

void node_exec(struct node_conn *c, struct node_req *req, const char *id)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_client *cl = NULL;
    struct sbx_session *s = NULL;
    struct sbx_strv argv, env;
    struct sbx_exec_spec spec = {0};
    char *cwd = malloc(4096);
    struct relay r = {.c = c, .out_open = 1};
    sbx_strv_init(&argv);
    sbx_strv_init(&env);
    /* The sandbox's own environment first: the request's entries come after it and win. */
    json_t *renv = node_record_env(c->d, id), *v;
    size_t i;
    json_array_foreach(renv, i, v) sbx_strv_push(&env, json_string_value(v));
    json_decref(renv);
    sbx__ws_init_server(&r.ws, 0);
    node_ka_init(&r.ka, c->d->ping_s);
    sbx_buf_init(&r.msg, SBX__WS_DEFAULT_MESSAGE);
    sbx_buf_init(&r.stdin, STDIN_HIGH + SBX__WS_DEFAULT_MESSAGE);
    int upgraded = 0;
    if (parse_exec(req, &argv, &env, &spec, cwd, 4096, &err) < 0 ||
        sbx_client_new("local", NULL, &cl, &err) < 0 || sbx_client_attach(cl, id, &s, &err) < 0 ||
        sbx_session_exec_start(s, &spec, &r.p, &err) < 0)
        goto out;
    r.err_open = r.p->stderr_fd >= 0;
    fcntl(r.p->stdout_fd, F_SETFL, fcntl(r.p->stdout_fd, F_GETFL) | O_NONBLOCK);
    if (r.err_open)
        fcntl(r.p->stderr_fd, F_SETFL, fcntl(r.p->stderr_fd, F_GETFL) | O_NONBLOCK);
    if (node_ws_upgrade(c, req, "v5.channel.k8s.io", &err) < 0)
        goto out;
    upgraded = 1;
    int rc = relay_loop(&r, &err);
    if (rc == 1)
        rc = finish(&r, &err);
    if (rc < 0) /* the harness gets no status: the daemon's log says why */
        fprintf(stderr, "sbx-node: exec in sandbox '%s' ended without a status: %s\n", id, err.msg);
out:
    if (!upgraded && err.code)
        node_respond_error(c, &err);
    sbx_proc_free(r.p); /* a command still running (the harness left) ends with its group */
    sbx_session_free(s);
    sbx_client_free(cl);
    sbx_strv_release(&argv);
    sbx_strv_release(&env);
    sbx__ws_release(&r.ws);
    sbx_buf_release(&r.msg);
    sbx_buf_release(&r.stdin);
    free(cwd);
}
