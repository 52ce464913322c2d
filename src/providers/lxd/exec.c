/* Commands in an LXD instance: POST /1.0/instances/NAME/exec with wait-for-websocket, then one
 * WebSocket per stream (0 stdin, 1 stdout, 2 stderr; with a terminal one for both ways) and
 * the control one (terminal size, and closing it kills the command); the exit status is the
 * operation's "return" once it ends. This file starts execs and runs the short fixed commands
 * sbx itself needs (as root, to completion); relay.c turns a user's command into a struct
 * sbx_proc. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "providers/lxd/exec.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/time.h"

#define CHUNK 65536

static const char *const stream_names[SBX__LXD_NSTREAMS] = {"0", "1", "2", "control"};

static json_t *env_json(const char *const *env)
{
    json_t *o = json_object();
    for (; env && *env; env++) {
        const char *eq = strchr(*env, '=');
        if (!eq || eq == *env)
            continue;
        char *k = sbx_xstrndup(*env, (size_t)(eq - *env));
        sbx_json_set(o, k, sbx_json_str(eq + 1));
        free(k);
    }
    return o;
}

void sbx__lxd_exec_init(struct sbx__lxd_exec *x)
{
    memset(x, 0, sizeof(*x));
}

void sbx__lxd_exec_release(struct sbx__lxd_exec *x)
{
    for (int i = 0; i < SBX__LXD_NSTREAMS; i++) {
        sbx__wsconn_free(x->conn[i]);
        x->conn[i] = NULL;
    }
    free(x->op);
    x->op = NULL;
}

/* The instance is not there or not running: the error a session reports for a gone sandbox. */
static int gone_error(const char *id, int rc, struct sbx_error *err)
{
    if (rc != -SBX_E_NOTFOUND && rc != -SBX_E_INVAL)
        return rc;
    char why[SBX_ERROR_MSG_MAX];
    snprintf(why, sizeof(why), "%s", err ? err->msg : "");
    return sbx_error_set(err, SBX_E_SANDBOX, 0, "sandbox '%s' is gone or stopped (%s)", id, why);
}

int sbx__lxd_exec_begin(const struct sbx__lxd_server *sv, const char *inst, const char *id,
                        const struct sbx__lxd_exec_args *a, struct sbx__lxd_exec *x,
                        struct sbx_error *err)
{
    json_t *body = json_object(), *md = NULL;
    sbx_json_set(body, "command", json_deep_copy(a->argv));
    sbx_json_set(body, "environment", env_json(a->env));
    sbx_json_set(body, "wait-for-websocket", json_boolean(a->streams));
    sbx_json_set(body, "record-output", json_false());
    sbx_json_set(body, "interactive", json_boolean(a->tty));
    sbx_json_set(body, "width", json_integer(a->cols ? a->cols : 80));
    sbx_json_set(body, "height", json_integer(a->rows ? a->rows : 24));
    sbx_json_set(body, "user", json_integer(a->uid));
    sbx_json_set(body, "group", json_integer(a->gid));
    sbx_json_set(body, "cwd", sbx_json_str("/"));
    char *path = sbx__lxd_inst_path(inst, "/exec");
    int rc = sbx__lxd_json(sv, "POST", path, body, &md, &x->op, err);
    free(path);
    json_decref(body);
    if (rc < 0) {
        rc = gone_error(id, rc, err);
        goto out;
    }
    if (!x->op) {
        rc = sbx_error_set(err, SBX_E_PARSE, 0, "LXD answered an exec without an operation");
        goto out;
    }
    x->tty = a->tty;
    if (!a->streams)
        goto out;
    const json_t *fds = json_object_get(json_object_get(md, "metadata"), "fds");
    /* The control connection first, as LXD's own client does; the command starts once every
     * stream is connected. */
    static const int order[] = {SBX__LXD_CTL, SBX__LXD_IN, SBX__LXD_OUT, SBX__LXD_ERR};
    for (size_t k = 0; k < 4; k++) {
        int i = order[k];
        if (a->tty && (i == SBX__LXD_OUT || i == SBX__LXD_ERR))
            continue;
        const char *secret = json_string_value(json_object_get(fds, stream_names[i]));
        if (!secret || !secret[0] || strspn(secret, "0123456789abcdef") != strlen(secret)) {
            rc = sbx_error_set(err, SBX_E_PARSE, 0, "LXD's exec has no secret for stream '%s'",
                               stream_names[i]);
            goto out;
        }
        char *ws = sbx_xasprintf("/1.0/operations/%s/websocket?secret=%s", x->op, secret);
        rc = sbx__lxd_ws_open(sv, ws, &x->conn[i], err);
        free(ws);
        if (rc < 0)
            goto out;
    }
out:
    json_decref(md);
    if (rc < 0)
        sbx__lxd_exec_release(x);
    return rc;
}

int sbx__lxd_exec_status(const struct sbx__lxd_server *sv, const char *op, int *code,
                         struct sbx_error *err)
{
    json_t *md = NULL;
    int rc = sbx__lxd_op_wait(sv, op, sv->timeout_ms, &md, err);
    json_t *ret = json_object_get(json_object_get(md, "metadata"), "return");
    /* LXD fails the operation of a command that exits 126 or 127 ("Command not found"), with
     * the status in its metadata all the same: the status is what counts. */
    if (rc == -SBX_E_SANDBOX && json_is_integer(ret))
        rc = 0;
    if (rc == 0 && !json_is_integer(ret))
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "LXD reported no exit status");
    if (rc == 0)
        *code = (int)json_integer_value(ret);
    json_decref(md);
    return rc;
}

void sbx__lxd_run_init(struct sbx__lxd_run *r, size_t max)
{
    memset(r, 0, sizeof(*r));
    r->code = -1;
    r->in_fd = r->out_fd = -1;
    sbx_buf_init(&r->out, max);
    sbx_buf_init(&r->err, max);
}

void sbx__lxd_run_release(struct sbx__lxd_run *r)
{
    sbx_buf_release(&r->out);
    sbx_buf_release(&r->err);
}

/* The run's input: the next piece to send (from memory or the fd), 0 at its end. */
static long next_input(struct sbx__lxd_run *r, size_t *off, char *buf, size_t cap, const char **p,
                       struct sbx_error *err)
{
    if (r->in_fd >= 0) {
        for (;;) {
            ssize_t n = read(r->in_fd, buf, cap);
            if (n >= 0) {
                *p = buf;
                return n;
            }
            if (errno != EINTR)
                return sbx_error_errno(err, errno, "cannot read the input");
        }
    }
    size_t left = r->in && r->in_len > *off ? r->in_len - *off : 0;
    size_t n = left < cap ? left : cap;
    *p = (const char *)r->in + *off;
    *off += n;
    return (long)n;
}

/* A message of stream i of a run: its data kept, its end noted. */
static int run_take(struct sbx__lxd_run *r, int i, const struct sbx__ws_msg *m, int *open,
                    uint64_t *written, struct sbx_error *err)
{
    if (m->opcode == SBX__WS_CLOSE || (m->opcode == SBX__WS_TEXT && m->len == 0)) {
        *open = 0;
        return 0;
    }
    if (m->opcode != SBX__WS_BINARY && m->opcode != SBX__WS_TEXT)
        return 0;
    if (i == SBX__LXD_OUT && r->out_fd >= 0) {
        if (*written + m->len > r->out_max)
            return sbx_error_set(err, SBX_E_TOOBIG, 0, "more than %llu bytes of output",
                                 (unsigned long long)r->out_max);
        *written += m->len;
        return sbx_fd_write_all(r->out_fd, m->data, m->len, err);
    }
    struct sbx_buf *b = i == SBX__LXD_OUT ? &r->out : &r->err;
    if (sbx_buf_add(b, m->data, m->len, err) < 0)
        return -SBX_E_TOOBIG;
    return 0;
}

/* Read what stream i has now; 1 when it ended. */
static int run_read(struct sbx__wsconn *w, struct sbx__lxd_run *r, int i, uint64_t *written,
                    struct sbx_error *err)
{
    struct sbx__ws_msg m;
    int open = 1, rc;
    while (open && (rc = sbx__wsconn_next(w, &m, err)) == 1)
        if ((rc = run_take(r, i, &m, &open, written, err)) < 0)
            return rc;
    if (!open || rc == SBX__WSCONN_END)
        return 1;
    return rc < 0 ? rc : 0;
}

/* Move a run's bytes until both outputs ended: input sent as it is taken, then its end. */
static int run_pump(struct sbx__lxd_exec *x, struct sbx__lxd_run *r, int64_t deadline,
                    struct sbx_error *err)
{
    int open[SBX__LXD_NSTREAMS] = {0, 1, 1, 0}, in_done = 0, rc = 0, pending = 0;
    size_t in_off = 0;
    uint64_t written = 0;
    char buf[CHUNK];
    struct sbx__ws *in = &x->conn[SBX__LXD_IN]->ws;
    while (open[SBX__LXD_OUT] || open[SBX__LXD_ERR]) {
        for (int i = SBX__LXD_OUT; i <= SBX__LXD_ERR && rc == 0; i++) {
            if (open[i] && (rc = run_read(x->conn[i], r, i, &written, err)) == 1)
                open[i] = 0, rc = 0;
            if (rc == 0 && sbx__wsconn_flush(x->conn[i], err) < 0)
                rc = -SBX_E_HTTP;
        }
        while (rc == 0 && !in_done && in->out.len < CHUNK) {
            const char *p = NULL;
            long n = next_input(r, &in_off, buf, sizeof(buf), &p, err);
            if (n < 0)
                rc = (int)n;
            else if (n == 0)
                in_done = 1, rc = sbx__ws_send(in, SBX__WS_TEXT, "", 0, err);
            else
                rc = sbx__ws_send(in, SBX__WS_BINARY, p, (size_t)n, err);
        }
        /* A command that does not read its input may end before taking it all. */
        if (rc == 0 && (pending = sbx__wsconn_flush(x->conn[SBX__LXD_IN], err)) < 0)
            pending = 0, in_done = 1, sbx_buf_reset(&in->out);
        if (rc < 0)
            return rc;
        if (!open[SBX__LXD_OUT] && !open[SBX__LXD_ERR])
            break;
        struct pollfd pf[3] = {
                {.fd = open[SBX__LXD_OUT] ? sbx__conn_fd(x->conn[SBX__LXD_OUT]->conn) : -1,
                 .events = POLLIN},
                {.fd = open[SBX__LXD_ERR] ? sbx__conn_fd(x->conn[SBX__LXD_ERR]->conn) : -1,
                 .events = POLLIN},
                {.fd = pending == 1 ? sbx__conn_fd(x->conn[SBX__LXD_IN]->conn) : -1,
                 .events = POLLOUT}};
        int ms = sbx_deadline_poll_ms(deadline);
        if (ms == 0)
            return sbx_error_set(err, SBX_E_TIMEOUT, 0, "a command of sbx took too long");
        if (poll(pf, 3, ms) < 0 && errno != EINTR)
            return sbx_error_errno(err, errno, "poll");
    }
    return 0;
}

int sbx__lxd_exec_run(struct sbx__lxd_session *s, const char *const *argv, struct sbx__lxd_run *run,
                      struct sbx_error *err)
{
    struct sbx__lxd_exec x;
    json_t *cmd = json_array();
    for (const char *const *a = argv; *a; a++)
        sbx_json_append(cmd, sbx_json_str(*a));
    struct sbx__lxd_exec_args args = {.argv = cmd, .streams = 1};
    sbx__lxd_exec_init(&x);
    if (!run->out_max)
        run->out_max = UINT64_MAX;
    int rc = sbx__lxd_exec_begin(&s->sv, s->name, s->base.id, &args, &x, err);
    /* The command's own time is bounded by the request timeout, and by more for transfers. */
    int64_t bound = run->in_fd >= 0 || run->out_fd >= 0 ? 10 * s->sv.timeout_ms : s->sv.timeout_ms;
    if (rc == 0)
        rc = run_pump(&x, run, sbx_deadline_after_ms(bound), err);
    if (rc == 0)
        rc = sbx__lxd_exec_status(&s->sv, x.op, &run->code, err);
    if (rc < 0)
        sbx_error_prefix(err, "'%s' in sandbox '%s'", argv[0], s->base.id);
    sbx__lxd_exec_release(&x);
    json_decref(cmd);
    return rc;
}

int sbx__lxd_exec_detached(const struct sbx__lxd_server *sv, const char *inst, const char *id,
                           const char *const *argv, struct sbx_error *err)
{
    struct sbx__lxd_exec x;
    json_t *cmd = json_array();
    for (const char *const *a = argv; *a; a++)
        sbx_json_append(cmd, sbx_json_str(*a));
    struct sbx__lxd_exec_args args = {.argv = cmd};
    int code = 0;
    sbx__lxd_exec_init(&x);
    int rc = sbx__lxd_exec_begin(sv, inst, id, &args, &x, err);
    if (rc == 0)
        rc = sbx__lxd_exec_status(sv, x.op, &code, err);
    sbx__lxd_exec_release(&x);
    json_decref(cmd);
    return rc;
}
