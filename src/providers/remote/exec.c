/* The remote provider's commands: a WebSocket to the node's exec with the v5.channel.k8s.io
 * layout, relayed by an rproc on the remote layer's loop; and blocking commands for the shared
 * file script (src/providers/remote/remote.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "providers/remote/remote.h"
#include "sandbox/wire/channel.h"
#include "sandbox/wire/conn.h"
#include "sandbox/wire/http.h"
#include "sandbox/wire/loop.h"
#include "sandbox/wire/rproc.h"
#include "sandbox/wire/ws.h"
#include "sbx/buf.h"
#include "sbx/common.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/time.h"

#define MSG_MAX   ((size_t)4 << 20)
#define SEND_HIGH ((size_t)1 << 20)
#define CHUNK     ((size_t)256 << 10)
#define OPEN_MS   30000
/* Keep-alive of a running command's WebSocket: a ping every 10 s; 30 s without any frame from
 * the node (a cut link, a node frozen) ends the command as lost instead of waiting forever. */
#define KEEPALIVE_PING_MS 10000
#define KEEPALIVE_DEAD_MS 30000

static const char *const protocols[] = {"v5.channel.k8s.io", NULL};

static void add_param(struct sbx_buf *q, const char *name, const char *value)
{
    char *e = sbx__http_escape(value, 0);
    (void)sbx_buf_addf(q, NULL, "%s%s=%s", q->len ? "&" : "", name, e);
    free(e);
}

/* The exec request's path: every argument, variable and flag a query parameter. */
static char *exec_path(struct sbx__remote_session *s, const struct sbx_exec_spec *spec,
                       const char *cwd, int want_in)
{
    struct sbx_buf q;
    sbx_buf_init(&q, SBX_BUF_NOLIMIT);
    if (spec->argv) {
        for (size_t i = 0; spec->argv[i]; i++)
            add_param(&q, "command", spec->argv[i]);
    } else {
        add_param(&q, "command", "/bin/sh");
        add_param(&q, "command", "-c");
        add_param(&q, "command", spec->command);
    }
    for (size_t i = 0; spec->env && spec->env[i]; i++)
        add_param(&q, "env", spec->env[i]);
    if (cwd && cwd[0])
        add_param(&q, "cwd", cwd);
    (void)sbx_buf_addf(&q, NULL, "%s%s%s%s&timeout_ms=%lld&grace_ms=%lld&rows=%u&cols=%u",
                       want_in ? "&stdin=1" : "", spec->flags & SBX_EXEC_TTY ? "&tty=1" : "",
                       spec->flags & SBX_EXEC_MERGE_STDERR ? "&merge=1" : "",
                       spec->flags & SBX_EXEC_KEEP_BACKGROUND ? "&background=1" : "",
                       (long long)spec->timeout_ms, (long long)spec->kill_grace_ms,
                       (unsigned)spec->rows, (unsigned)spec->cols);
    char *p = sbx_xasprintf("/v1/sandboxes/%s/exec?%s", s->base.id, q.data);
    sbx_buf_release(&q);
    return p;
}

struct open_req {
    struct sbx__remote_session *s;
    const char *path;
    struct sbx__wsconn **out;
};

static int open_op(void *ud, const char *line, struct sbx_error *err)
{
    struct open_req *o = ud;
    const char *headers[] = {SBX__REMOTE_VERSION_HEADER, line, NULL};
    return sbx__wsconn_open(o->s->ep, o->path, protocols, headers, MSG_MAX, OPEN_MS, o->out, err);
}

static int open_exec(struct sbx__remote_session *s, const char *path, struct sbx__wsconn **out,
                     struct sbx_error *err)
{
    struct sbx_error e = SBX_ERROR_INIT; /* its own: err may be NULL */
    struct open_req o = {s, path, out};
    int rc = sbx__remote_with_token(s, 0, open_op, &o, &e);
    /* A token the node refuses even fresh: the sandbox was removed. */
    if (rc == -SBX_E_PERM && strstr(e.msg, "does not open sandbox"))
        rc = sbx_error_set(&e, SBX_E_SANDBOX, 0,
                           "sandbox '%s' is gone (its node no longer takes its token)", s->base.id);
    /* The node's "exec" error (a command that cannot be run) is the same error as here. */
    const char *x = rc < 0 ? strstr(e.msg, "): exec: ") : NULL;
    if (x) {
        char msg[sizeof(e.msg)];
        snprintf(msg, sizeof(msg), "%s", x + 9);
        rc = sbx_error_set(&e, SBX_E_EXEC, strstr(msg, "not found") ? ENOENT : 0, "%s", msg);
    }
    if (rc < 0 && err)
        *err = e;
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Commands on the loop */

struct rproc_ud {
    struct sbx__rproc *r;
    struct sbx__wsconn *wc; /* until setup hands it to the lws */
    struct sbx__lws *lws;
    struct sbx_buf status, scratch;
    int got_status;
};

static int lws_channel(struct rproc_ud *u, int channel, const void *p, size_t n)
{
    struct sbx_buf m;
    sbx_buf_init(&m, MSG_MAX + 8);
    int rc = sbx__ch_encode(SBX__CH_V5, channel, p, n, &m, NULL);
    if (rc == 0)
        rc = sbx__lws_send(u->lws, SBX__WS_BINARY, m.data, m.len, NULL);
    sbx_buf_release(&m);
    return rc;
}

static size_t op_input(struct sbx__rproc *r, const uint8_t *p, size_t n, void *ud)
{
    struct rproc_ud *u = ud;
    (void)r;
    if (!u->lws)
        return n;
    if (n == 0) {
        struct sbx_buf m;
        sbx_buf_init(&m, 8);
        if (sbx__ch_encode_close(SBX__CH_V5, SBX__CH_STDIN, &m, NULL) == 0)
            (void)sbx__lws_send(u->lws, SBX__WS_BINARY, m.data, m.len, NULL);
        sbx_buf_release(&m);
        return 0;
    }
    if (sbx__lws_queued(u->lws) >= SEND_HIGH)
        return 0; /* offered again once the queue drained */
    size_t k = n < CHUNK ? n : CHUNK;
    return lws_channel(u, SBX__CH_STDIN, p, k) == 0 ? k : n;
}

static void op_resize(struct sbx__rproc *r, unsigned rows, unsigned cols, void *ud)
{
    struct rproc_ud *u = ud;
    struct sbx_buf m;
    (void)r;
    sbx_buf_init(&m, 64);
    if (u->lws && sbx__ch_resize_encode(cols, rows, &m, NULL) == 0)
        (void)lws_channel(u, SBX__CH_RESIZE, m.data, m.len);
    sbx_buf_release(&m);
}

static void op_resume(struct sbx__rproc *r, void *ud)
{
    struct rproc_ud *u = ud;
    (void)r;
    if (u->lws)
        sbx__lws_resume(u->lws);
}

static void op_stop(struct sbx__rproc *r, void *ud)
{
    struct rproc_ud *u = ud;
    (void)r;
    sbx__lws_free(u->lws); /* a command still running ends with its connection on the node */
    u->lws = NULL;
}

static void op_release(void *ud)
{
    struct rproc_ud *u = ud;
    sbx__wsconn_free(u->wc);
    sbx_buf_release(&u->status);
    sbx_buf_release(&u->scratch);
    free(u);
}

static const struct sbx__rproc_ops proc_ops = {.input = op_input,
                                               .resize = op_resize,
                                               .resume = op_resume,
                                               .stop = op_stop,
                                               .release = op_release};

static int on_message(struct sbx__lws *w, const struct sbx__ws_msg *m, void *ud,
                      struct sbx_error *err)
{
    struct rproc_ud *u = ud;
    struct sbx__ch_frame f;
    (void)w;
    if (m->opcode == SBX__WS_CLOSE)
        return 0;
    int rc = sbx__ch_decode(SBX__CH_V5, m->opcode, m->data, m->len, &u->scratch, &f, err);
    if (rc < 0)
        return rc;
    if (f.channel == SBX__CH_STDOUT || f.channel == SBX__CH_STDERR) {
        if (!sbx__rproc_output(u->r, f.channel, f.data, f.len))
            return SBX__PAUSE;
    } else if (f.channel == SBX__CH_ERROR) {
        sbx_buf_reset(&u->status);
        if (sbx_buf_add(&u->status, f.data, f.len, err) < 0)
            return -err->code;
        u->got_status = 1;
    }
    return 0;
}

static void on_end(struct sbx__lws *w, int rc, const struct sbx_error *err, void *ud)
{
    struct rproc_ud *u = ud;
    struct sbx_error e = SBX_ERROR_INIT;
    (void)w;
    (void)rc;
    int code = 0;
    if (!u->got_status) {
        sbx_error_set(
                &e, SBX_E_SANDBOX, 0,
                "the connection to the node was lost while '%s' ran before its status came%s%s",
                sbx__rproc_name(u->r), err && err->msg[0] ? ": " : "", err ? err->msg : "");
        sbx__rproc_fail(u->r, &e);
        return;
    }
    if (sbx__ch_status_decode(SBX__CH_V5, (const uint8_t *)u->status.data, u->status.len, &code,
                              &e) < 0) {
        sbx__rproc_fail(u->r, &e);
        return;
    }
    /* The node's causes beyond the exit code: a signal (code -1 and the signal, as a local
     * command's status) and the deadline. A node without them gives 128+N alone. */
    struct sbx_exit st = {.code = code};
    if (sbx__ch_status_causes(SBX__CH_V5, (const uint8_t *)u->status.data, u->status.len,
                              &st.signal, &st.timed_out, &e) < 0) {
        sbx__rproc_fail(u->r, &e);
        return;
    }
    if (st.signal)
        st.code = -1;
    sbx__rproc_exit(u->r, &st);
}

static void on_drained(struct sbx__lws *w, void *ud)
{
    struct rproc_ud *u = ud;
    (void)w;
    sbx__rproc_input_ready(u->r);
}

static const struct sbx__lws_ops lws_ops = {
        .message = on_message, .end = on_end, .drained = on_drained};

static int setup(struct sbx__rproc *r, void *ud, struct sbx_error *err)
{
    struct rproc_ud *u = ud;
    struct sbx__wsconn *wc = u->wc;
    u->wc = NULL; /* the lws takes it, and frees it on failure too */
    u->r = r;
    int rc = sbx__lws_new(sbx__rproc_loop(r), wc, &lws_ops, u, &u->lws, err);
    if (rc == 0)
        sbx__lws_keepalive(u->lws, KEEPALIVE_PING_MS, KEEPALIVE_DEAD_MS);
    return rc;
}

int sbx__remote_exec_start(struct sbx_session *bs, const struct sbx_exec_spec *spec,
                           const char *cwd, struct sbx_proc **out, struct sbx_error *err)
{
    struct sbx__remote_session *s = (struct sbx__remote_session *)bs;
    int tty = !!(spec->flags & SBX_EXEC_TTY);
    int want_in = tty || (spec->flags & SBX_EXEC_STDIN);
    if (spec->user)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "a remote sandbox runs commands as its default user only, not as "
                             "'%s' (not yet sent to the node)",
                             spec->user);
    char *path = exec_path(s, spec, cwd, want_in);
    struct rproc_ud *u = sbx_xcalloc(1, sizeof(*u));
    sbx_buf_init(&u->status, SBX__CH_STATUS_MAX);
    sbx_buf_init(&u->scratch, MSG_MAX);
    int rc = open_exec(s, path, &u->wc, err);
    free(path);
    struct sbx__loop *loop = NULL;
    struct sbx__rproc_opts o = {.name = spec->argv ? spec->argv[0] : "/bin/sh",
                                .tty = tty,
                                .rows = spec->rows,
                                .cols = spec->cols,
                                .want_stdin = want_in && !tty,
                                .merge_stderr = !!(spec->flags & SBX_EXEC_MERGE_STDERR)};
    struct sbx__rproc *r = NULL;
    if (rc == 0 && (rc = sbx__loop_default(&loop, err)) == 0)
        rc = sbx__rproc_new(loop, &o, &proc_ops, u, &r, err);
    if (rc < 0) {
        op_release(u);
        return rc;
    }
    if ((rc = sbx__rproc_start(r, setup, err)) < 0) {
        sbx_proc_free(sbx__rproc_proc(r)); /* releases u */
        return rc;
    }
    *out = sbx__rproc_proc(r);
    return 0;
}
