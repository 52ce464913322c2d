/* A Docker command relayed on the remote layer's event loop (src/sandbox/wire/rproc.h): the
 * hijacked stream split into the proc's stdout and stderr (raw bytes with a terminal), stdin
 * and its end sent on, and everything else the engine is asked without blocking the loop
 * (asynchronous requests): the exit status once the stream ended, whether a command that keeps
 * background processes still runs, a terminal's size, and the deadline's kills. One loop
 * thread serves every command of the process, where this used to be a thread per command. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "providers/docker/exec.h"
#include "sandbox/wire/loop.h"
#include "sbx/json.h"
#include "sbx/time.h"

#define QUEUE_MAX     ((size_t)256 << 10) /* stdin queued towards the engine */
#define EXIT_WAIT_MS  5000                /* the exec may be reported running a moment longer */
#define EXIT_RETRY_MS 20
#define TICK_MS       200 /* keep-background: how often the engine is asked if it still runs */
#define DRAIN_MS      500 /* then what the command wrote still in flight may arrive */
#define INSPECT_MAX   ((size_t)1 << 20)

/* A kill of the command's process group: an exec of kill as root, created, then started
 * detached; two requests in a chain. */
struct sbx__dk_kill {
    struct sbx__dk_cmd *p;
    int slot;
    char sig[8];
    struct sbx__xfer *x;
};

static char *api(const char *fmt, const char *a)
{
    return sbx_xasprintf(SBX__DK_API "%s%s", fmt, a);
}

static json_t *parse(const struct sbx__http_resp *resp)
{
    json_t *j = NULL;
    struct sbx_json_limits lim = {.max_bytes = INSPECT_MAX, .max_depth = 32};
    if (resp->body.len && sbx_json_parse(resp->body.data, resp->body.len, &lim, &j, NULL) < 0)
        j = NULL;
    return j;
}

/* ---- the exit status, once the stream ended ---- */

static void fetch_exit(struct sbx__dk_cmd *p);

static void exit_with(struct sbx__dk_cmd *p, int code)
{
    struct sbx_exit st = {.code = code};
    /* The preamble shell reports a command killed by the deadline as 128 + signal. */
    if (sbx__rproc_timed_out(p->r) && code > 128 && code < 128 + 65) {
        st.signal = code - 128;
        st.code = -1;
    }
    sbx__rproc_exit(p->r, &st);
}

static void lost(struct sbx__dk_cmd *p, const char *why)
{
    struct sbx_error err = SBX_ERROR_INIT;
    sbx_error_set(&err, SBX_E_SANDBOX, 0, "the exit status of '%s' is unknown: %s", p->name, why);
    sbx__rproc_fail(p->r, &err);
}

static void on_inspect(struct sbx__xfer *x, int rc, const struct sbx__http_resp *resp,
                       const struct sbx_error *err, void *ud)
{
    struct sbx__dk_cmd *p = ud;
    (void)x;
    p->inspect = NULL;
    if (rc < 0) {
        lost(p, err->msg);
        return;
    }
    if (resp->status == 404) {
        lost(p, "the container is gone");
        return;
    }
    json_t *j = parse(resp);
    json_t *code = json_object_get(j, "ExitCode");
    int running = json_is_true(json_object_get(j, "Running"));
    if (resp->status == 200 && !running && json_is_integer(code))
        exit_with(p, (int)json_integer_value(code));
    else if (sbx_time_mono_ns() < p->exit_deadline)
        sbx__timer_after(p->retry, EXIT_RETRY_MS);
    else
        lost(p, "the engine reports no exit status");
    json_decref(j);
}

static const struct sbx__xfer_ops inspect_ops = {NULL, on_inspect};

static void fetch_exit(struct sbx__dk_cmd *p)
{
    struct sbx_error err = SBX_ERROR_INIT;
    if (p->inspect || sbx__rproc_ended(p->r))
        return;
    if (!p->exit_deadline)
        p->exit_deadline = sbx_deadline_after_ms(EXIT_WAIT_MS);
    char *path = api("/exec/", p->eid);
    char *full = sbx_xasprintf("%s/json", path);
    struct sbx__http_req req = {.path = full, .max_body = INSPECT_MAX, .no_retry = 1};
    if (sbx__xfer_start(p->l, p->eng.ep, &req, &inspect_ops, p, &p->inspect, &err) < 0)
        lost(p, err.msg);
    free(full);
    free(path);
}

static void on_retry(struct sbx__timer *t, void *ud)
{
    (void)t;
    fetch_exit(ud);
}

/* The stream ended (or is left to background processes): the status comes from the engine. */
static void stream_done(struct sbx__dk_cmd *p)
{
    if (p->stream_done)
        return;
    p->stream_done = 1;
    sbx__timer_stop(p->tick);
    fetch_exit(p);
}

/* ---- the stream ---- */

static int on_data(struct sbx__lconn *c, const uint8_t *b, size_t n, void *ud,
                   struct sbx_error *err)
{
    struct sbx__dk_cmd *p = ud;
    int room = 1;
    (void)c;
    if (p->tty) {
        room = sbx__rproc_output(p->r, 1, b, n);
    } else {
        for (size_t off = 0; off < n;) {
            int stream;
            const uint8_t *pl;
            size_t plen;
            long used = sbx__mux_feed(&p->dm, b + off, n - off, &stream, &pl, &plen, err);
            if (used < 0)
                return (int)used;
            off += (size_t)used;
            if (plen)
                room &= sbx__rproc_output(p->r, stream == 2 ? 2 : 1, pl, plen);
        }
    }
    if (room)
        return 0;
    p->paused = 1;
    return SBX__PAUSE;
}

static void on_end(struct sbx__lconn *c, int rc, const struct sbx_error *err, void *ud)
{
    (void)c;
    (void)rc;
    (void)err;
    /* Cut or whole, the engine knows how the command ended. */
    stream_done(ud);
}

static void on_drained(struct sbx__lconn *c, void *ud)
{
    struct sbx__dk_cmd *p = ud;
    (void)c;
    sbx__rproc_input_ready(p->r);
}

static const struct sbx__lconn_ops conn_ops = {on_data, on_end, on_drained};

/* ---- keep-background: a background process may hold the stream open after the command ---- */

static void on_running(struct sbx__xfer *x, int rc, const struct sbx__http_resp *resp,
                       const struct sbx_error *err, void *ud)
{
    struct sbx__dk_cmd *p = ud;
    (void)x;
    (void)err;
    p->running = NULL;
    json_t *j = rc == 0 ? parse(resp) : NULL;
    if (rc == 0 && resp->status == 200 && !json_is_true(json_object_get(j, "Running")) &&
        !p->drain_until)
        p->drain_until = sbx_deadline_after_ms(DRAIN_MS);
    json_decref(j);
}

static const struct sbx__xfer_ops running_ops = {NULL, on_running};

static void on_tick(struct sbx__timer *t, void *ud)
{
    struct sbx__dk_cmd *p = ud;
    struct sbx_error err = SBX_ERROR_INIT;
    if (p->stream_done)
        return;
    if (p->drain_until && sbx_time_mono_ns() >= p->drain_until) {
        /* What the command wrote has had its time: the rest of the stream is the background's. */
        sbx__lconn_free(p->c);
        p->c = NULL;
        stream_done(p);
        return;
    }
    if (!p->running && !p->drain_until) {
        char *path = api("/exec/", p->eid);
        char *full = sbx_xasprintf("%s/json", path);
        struct sbx__http_req req = {.path = full, .max_body = INSPECT_MAX, .no_retry = 1};
        (void)sbx__xfer_start(p->l, p->eng.ep, &req, &running_ops, p, &p->running, &err);
        free(full);
        free(path);
    }
    sbx__timer_after(t, p->drain_until ? DRAIN_MS / 5 : TICK_MS);
}

/* ---- the terminal's size ---- */

static void send_resize(struct sbx__dk_cmd *p);

static void on_resized(struct sbx__xfer *x, int rc, const struct sbx__http_resp *resp,
                       const struct sbx_error *err, void *ud)
{
    struct sbx__dk_cmd *p = ud;
    (void)x;
    (void)rc;
    (void)resp;
    (void)err;
    p->resize = NULL;
    if (p->resize_wanted)
        send_resize(p);
    else
        sbx__rproc_input_ready(p->r); /* keys typed after the resize may go now */
}

static const struct sbx__xfer_ops resize_ops = {NULL, on_resized};

static void send_resize(struct sbx__dk_cmd *p)
{
    struct sbx_error err = SBX_ERROR_INIT;
    p->resize_wanted = 0;
    char *path = sbx_xasprintf(SBX__DK_API "/exec/%s/resize?h=%u&w=%u", p->eid, p->want_rows,
                               p->want_cols);
    struct sbx__http_req req = {.method = "POST", .path = path, .no_retry = 1};
    (void)sbx__xfer_start(p->l, p->eng.ep, &req, &resize_ops, p, &p->resize, &err);
    free(path);
}

static void op_resize(struct sbx__rproc *r, unsigned rows, unsigned cols, void *ud)
{
    struct sbx__dk_cmd *p = ud;
    (void)r;
    p->want_rows = rows;
    p->want_cols = cols;
    p->resize_wanted = 1;
    if (!p->resize)
        send_resize(p);
}

/* ---- the deadline's kills ---- */

static void kill_done(struct sbx__dk_kill *k)
{
    k->p->kills[k->slot] = NULL;
    free(k);
}

static void on_kill_started(struct sbx__xfer *x, int rc, const struct sbx__http_resp *resp,
                            const struct sbx_error *err, void *ud)
{
    (void)x;
    (void)rc;
    (void)resp;
    (void)err;
    kill_done(ud);
}

static const struct sbx__xfer_ops kill_start_ops = {NULL, on_kill_started};

static void on_kill_created(struct sbx__xfer *x, int rc, const struct sbx__http_resp *resp,
                            const struct sbx_error *err, void *ud)
{
    struct sbx__dk_kill *k = ud;
    struct sbx_error e2 = SBX_ERROR_INIT;
    (void)x;
    (void)err;
    k->x = NULL;
    json_t *j = rc == 0 && resp->status < 300 ? parse(resp) : NULL;
    const char *id = json_string_value(json_object_get(j, "Id"));
    if (!id) {
        json_decref(j);
        kill_done(k);
        return;
    }
    char *path = sbx_xasprintf(SBX__DK_API "/exec/%s/start", id);
    json_t *body = json_pack("{s:b}", "Detach", 1);
    struct sbx__http_req req = {.method = "POST", .path = path, .json = body, .no_retry = 1};
    if (sbx__xfer_start(k->p->l, k->p->eng.ep, &req, &kill_start_ops, k, &k->x, &e2) < 0)
        kill_done(k);
    json_decref(body);
    json_decref(j);
    free(path);
}

static const struct sbx__xfer_ops kill_create_ops = {NULL, on_kill_created};

static void op_signal(struct sbx__rproc *r, int sig, void *ud)
{
    struct sbx__dk_cmd *p = ud;
    struct sbx_error err = SBX_ERROR_INIT;
    (void)r;
    int slot = sig == SIGKILL;
    if (p->pid <= 1 || p->kills[slot])
        return;
    struct sbx__dk_kill *k = sbx_xcalloc(1, sizeof(*k));
    k->p = p;
    k->slot = slot;
    snprintf(k->sig, sizeof(k->sig), "-%s", slot ? "KILL" : "TERM");
    p->kills[slot] = k;
    char group[32];
    snprintf(group, sizeof(group), "-%d", (int)p->pid);
    json_t *body =
            json_pack("{s:b,s:b,s:b,s:b,s:[sss],s:s}", "AttachStdin", 0, "AttachStdout", 0,
                      "AttachStderr", 0, "Tty", 0, "Cmd", "kill", k->sig, group, "User", "0");
    char *path = sbx_xasprintf(SBX__DK_API "/containers/%s/exec", p->container);
    struct sbx__http_req req = {.method = "POST", .path = path, .json = body, .no_retry = 1};
    if (sbx__xfer_start(p->l, p->eng.ep, &req, &kill_create_ops, k, &k->x, &err) < 0)
        kill_done(k);
    json_decref(body);
    free(path);
}

/* ---- the rest of the proc's life ---- */

static size_t op_input(struct sbx__rproc *r, const uint8_t *b, size_t n, void *ud)
{
    struct sbx__dk_cmd *p = ud;
    (void)r;
    if (!p->c)
        return n; /* the stream is gone: nothing takes stdin any more */
    if (p->resize || p->resize_wanted)
        return 0; /* keys typed after a resize wait for it (on_resized) */
    if (n == 0) {
        /* The caller closed stdin: so does the command's (not on a terminal). */
        if (!p->tty)
            sbx__lconn_shutdown_write(p->c);
        return 0;
    }
    if (sbx__lconn_queued(p->c) >= QUEUE_MAX)
        return 0; /* more when the queue drains */
    return sbx__lconn_send(p->c, b, n, NULL) == 0 ? n : 0;
}

static void op_resume(struct sbx__rproc *r, void *ud)
{
    struct sbx__dk_cmd *p = ud;
    (void)r;
    if (p->paused && p->c) {
        p->paused = 0;
        sbx__lconn_resume(p->c);
    }
}

static void op_stop(struct sbx__rproc *r, void *ud)
{
    struct sbx__dk_cmd *p = ud;
    (void)r;
    sbx__lconn_free(p->c);
    p->c = NULL;
    sbx__xfer_cancel(p->inspect);
    sbx__xfer_cancel(p->running);
    sbx__xfer_cancel(p->resize);
    p->inspect = p->running = p->resize = NULL;
    for (int i = 0; i < 2; i++) {
        if (p->kills[i]) {
            sbx__xfer_cancel(p->kills[i]->x);
            kill_done(p->kills[i]);
        }
    }
    sbx__timer_free(p->retry);
    sbx__timer_free(p->tick);
    p->retry = p->tick = NULL;
}

/* The proc is freed while the command runs: its process group goes, and sbx waits until the
 * kill ran (blocking: the caller's thread), so nothing of it is left when the free returns. */
static void op_kill(struct sbx__rproc *r, void *ud)
{
    struct sbx__dk_cmd *p = ud;
    (void)r;
    sbx__dk_kill_group(&p->eng, p->container, p->pid, "KILL");
}

static void op_release(void *ud)
{
    sbx__dk_cmd_free(ud);
}

static const struct sbx__rproc_ops rproc_ops = {.input = op_input,
                                                .resize = op_resize,
                                                .signal = op_signal,
                                                .resume = op_resume,
                                                .stop = op_stop,
                                                .kill = op_kill,
                                                .release = op_release};

/* On the loop: the connection, the output that came with the verdict (stderr first: it can
 * overtake the verdict), the keep-background watch. */
static int setup(struct sbx__rproc *r, void *ud, struct sbx_error *err)
{
    struct sbx__dk_cmd *p = ud;
    p->r = r;
    p->l = sbx__rproc_loop(r);
    if (p->pre_err.len)
        (void)sbx__rproc_output(r, 2, p->pre_err.data, p->pre_err.len);
    if (p->pre.len)
        (void)sbx__rproc_output(r, 1, p->pre.data, p->pre.len);
    p->retry = sbx__timer_new(p->l, on_retry, p);
    p->tick = sbx__timer_new(p->l, on_tick, p);
    int rc = sbx__lconn_new(p->l, p->conn, QUEUE_MAX + 65536, &conn_ops, p, &p->c, err);
    p->conn = NULL; /* taken either way */
    if (rc < 0) {
        sbx__timer_free(p->retry);
        sbx__timer_free(p->tick);
        p->retry = p->tick = NULL;
        return rc;
    }
    if (p->keep && !p->tty)
        sbx__timer_after(p->tick, TICK_MS);
    return 0;
}

int sbx__dk_cmd_relay(struct sbx__dk_cmd *p, const struct sbx_exec_spec *spec, int want_in,
                      struct sbx_proc **out, struct sbx_error *err)
{
    struct sbx__loop *l = NULL;
    struct sbx__rproc *r = NULL;
    int rc = sbx__loop_default(&l, err);
    if (rc < 0) {
        sbx__dk_cmd_free(p);
        return rc;
    }
    struct sbx__rproc_opts o = {.name = p->name,
                                .tty = p->tty,
                                .rows = p->rows,
                                .cols = p->cols,
                                .want_stdin = want_in,
                                .merge_stderr = !!(spec->flags & SBX_EXEC_MERGE_STDERR),
                                .timeout_ms = spec->timeout_ms,
                                .kill_grace_ms = spec->kill_grace_ms,
                                .pid = p->pid};
    if ((rc = sbx__rproc_new(l, &o, &rproc_ops, p, &r, err)) < 0) {
        sbx__dk_cmd_free(p);
        return rc;
    }
    struct sbx_proc *proc = sbx__rproc_proc(r);
    if ((rc = sbx__rproc_start(r, setup, err)) < 0) {
        proc->ops->free(proc); /* releases p */
        return rc;
    }
    *out = proc;
    return 0;
}
