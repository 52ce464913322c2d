/* Commands in a Vercel sandbox: one POST .../cmd with wait and logs per command, whose answer
 * is an NDJSON stream ({command} when it starts, {stream, data} log lines, {command} with its
 * exit code at the end), relayed by the remote layer's event loop (wire/rproc.h): no thread of
 * its own.
 *
 * A small fixed shell preamble (INNER) runs first, as for the other remote providers: it takes
 * its stdin from a file when one was uploaded, enters the working directory (refusing one that
 * resolves out of the workspace), tells a missing program from one that cannot run, reports
 * its process id and group, and unless the caller keeps background processes ends its group
 * when the command ends. It is started through `setsid -w` (OUTER) where the sandbox has it,
 * so a timeout or a cancel signals the command's own group, by a second short command.
 *
 * The service does not stream a command's stdin: input the caller gives is collected until the
 * caller closes it (at most STDIN_MAX bytes), uploaded as a file, and the command starts then
 * with it as its stdin. A command that waits for input before it ends therefore cannot be fed
 * interactively (docs/internals/provider-vercel.md). */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "providers/vercel/vercel.h"
#include "sandbox/session/internal.h"
#include "sandbox/wire/http.h"
#include "sandbox/wire/rproc.h"
#include "sandbox/wire/wire.h"
#include "sbx/hash.h"
#include "sbx/json.h"
#include "sbx/strv.h"

#define MARK_MAX   48
#define STDIN_MAX  ((size_t)64 << 20)
#define VERDICT_MS 120000
#define KILLS      4
#define RECOVERIES 3

static const char INNER[] =
        "root=$1 dir=$2 keep=$3 in=$4; shift 4\n"
        "if [ -n \"$in\" ]; then exec <\"$in\" || { printf C; exit 125; }; rm -f -- \"$in\"; "
        "else exec </dev/null; fi\n"
        "cd -- \"$dir\" 2>/dev/null || { printf C; exit 125; }\n"
        "case \"$(pwd -P)/\" in \"$root\"/*) ;; *) printf P; exit 125;; esac\n"
        "case $1 in\n"
        "*/*) if [ ! -e \"$1\" ]; then printf N; exit 127; fi\n"
        "     if [ -d \"$1\" ] || [ ! -x \"$1\" ]; then printf X; exit 126; fi;;\n"
        "*) if ! command -v \"$1\" >/dev/null 2>&1; then printf N; exit 127; fi;;\n"
        "esac\n"
        "pg=0; read -r _ _ _ _ pg _ < /proc/$$/stat 2>/dev/null\n"
        "printf 'S%d %d\\n' \"$$\" \"$pg\"\n"
        "if [ \"$keep\" = 1 ]; then exec \"$@\"; fi\n"
        "trap : TERM\n"
        "\"$@\"\n"
        "r=$?\n"
        "trap '' TERM\n"
        "[ \"$pg\" != \"$$\" ] || kill -TERM 0 2>/dev/null\n"
        "exit \"$r\"\n";

static const char OUTER[] = "w=$1; shift\n"
                            "if command -v setsid >/dev/null 2>&1; then\n"
                            "  exec setsid -w /bin/sh -c \"$w\" sbx \"$@\"\n"
                            "fi\n"
                            "exec /bin/sh -c \"$w\" sbx \"$@\"\n";

struct vx {
    struct sbx__vercel_target t;
    struct sbx__endpoint *ep; /* borrowed from t.conf */
    char *name;
    struct sbx__rproc *r;
    struct sbx__xfer *x;         /* the command's stream (loop) */
    struct sbx__xfer *up;        /* stdin's upload (loop) */
    struct sbx__xfer *kx[KILLS]; /* signals in flight (loop) */
    struct sbx__ndjson dec;
    json_t *body;      /* the command's request */
    char *in_abs;      /* where stdin goes, or NULL */
    struct sbx_buf in; /* stdin collected */
    int started, ended, paused, pending_sig, kill_sent, sudo;
    /* A cut stream is picked up again (RECOVERIES times at most): the command's logs replayed
     * from the start, the bytes already delivered skipped (seen/got per stream), then its end
     * asked for. phase: 0 the command's stream, 1 its logs again, 2 its end. */
    int phase, recoveries;
    uint64_t got[3], seen[3];
    struct sbx_exit st;
    /* What the caller's thread waits for and reads (mu). */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int verdict; /* 0 pending, 1 known, 2 the stream ended or failed first */
    char mark[MARK_MAX];
    size_t mark_len;
    long pgid;
    char cmd_id[128];
};

static const char *sig_name(int sig)
{
    switch (sig) {
    case SIGKILL:
        return "KILL";
    case SIGINT:
        return "INT";
    case SIGHUP:
        return "HUP";
    case SIGQUIT:
        return "QUIT";
    default:
        return "TERM";
    }
}

static void set_verdict(struct vx *v, int state)
{
    pthread_mutex_lock(&v->mu);
    if (v->verdict == 0)
        v->verdict = state;
    pthread_cond_broadcast(&v->cv);
    pthread_mutex_unlock(&v->mu);
}

/* ---------------------------------------------------------------------------------------------
 * Signals (loop thread) */

static void kill_done(struct sbx__xfer *x, int rc, const struct sbx__http_resp *resp,
                      const struct sbx_error *err, void *ud)
{
    struct vx *v = ud;
    (void)rc, (void)resp, (void)err;
    for (int i = 0; i < KILLS; i++)
        if (v->kx[i] == x)
            v->kx[i] = NULL;
}

static const struct sbx__xfer_ops kill_ops = {.done = kill_done};

/* The group's kill as a short command (the group is known), else the service's own kill of
 * the command. */
static json_t *kill_request(struct vx *v, int sig, char **path)
{
    pthread_mutex_lock(&v->mu);
    long pg = v->pgid;
    char id[sizeof(v->cmd_id)];
    memcpy(id, v->cmd_id, sizeof(id));
    pthread_mutex_unlock(&v->mu);
    if (pg > 1) {
        char grp[32];
        snprintf(grp, sizeof(grp), "-%ld", pg);
        char *sp = sbx__vercel_session_path(&v->t, "cmd");
        *path = sbx__vercel_path(v->t.conf, sp, 0);
        free(sp);
        /* As the command's user: root's processes need root to signal them. */
        return json_pack("{s:s,s:[s,s,s,s],s:s,s:b}", "command", "kill", "args", "-s",
                         sig_name(sig), "--", grp, "cwd", "/", "sudo", v->sudo);
    }
    if (!id[0])
        return NULL;
    char *eid = sbx__http_escape(id, 0); /* the service's id: escaped into the path */
    char *op = sbx_xasprintf("cmd/%s/kill", eid);
    free(eid);
    char *sp = sbx__vercel_session_path(&v->t, op);
    *path = sbx__vercel_path(v->t.conf, sp, 0);
    free(sp);
    free(op);
    return json_pack("{s:i}", "signal", sig);
}

static void send_signal(struct vx *v, int sig)
{
    char *path = NULL;
    json_t *body = kill_request(v, sig, &path);
    if (!body) {
        v->pending_sig = sig;
        return;
    }
    int slot = 0;
    while (slot < KILLS && v->kx[slot])
        slot++;
    struct sbx_error ignored = SBX_ERROR_INIT;
    struct sbx__http_req req = {.method = "POST", .path = path, .json = body};
    if (slot < KILLS)
        (void)sbx__xfer_start(sbx__rproc_loop(v->r), v->ep, &req, &kill_ops, v, &v->kx[slot],
                              &ignored);
    json_decref(body);
    free(path);
}

static void op_signal(struct sbx__rproc *r, int sig, void *ud)
{
    struct vx *v = ud;
    (void)r;
    v->kill_sent |= sig == SIGKILL;
    send_signal(v, sig);
}

/* ---------------------------------------------------------------------------------------------
 * The stream (loop thread) */

/* stdout bytes: the preamble's verdict first ("S<pid> <pgid>\n" or one letter), then output. */
static int stdout_bytes(struct vx *v, const char *p, size_t n)
{
    int room = 1;
    size_t i = 0;
    if (v->verdict == 0) {
        int done = 0;
        pthread_mutex_lock(&v->mu);
        for (; i < n && !done; i++) {
            char c = p[i];
            if (v->mark_len == 0 && c != 'S') {
                v->mark[v->mark_len++] = c;
                done = 1;
            } else if (c == '\n') {
                done = 1;
            } else if (v->mark_len < MARK_MAX - 1) {
                v->mark[v->mark_len++] = c;
            }
        }
        if (done) {
            v->mark[v->mark_len] = '\0';
            long pid = 0, pg = 0;
            if (v->mark[0] == 'S' && sscanf(v->mark + 1, "%ld %ld", &pid, &pg) >= 1)
                v->pgid = pg == pid ? pg : 0;
            v->verdict = 1;
            pthread_cond_broadcast(&v->cv);
        }
        pthread_mutex_unlock(&v->mu);
        if (done && v->pending_sig) {
            int sig = v->pending_sig;
            v->pending_sig = 0;
            send_signal(v, sig);
        }
    }
    if (i < n)
        room = sbx__rproc_output(v->r, 1, p + i, n - i);
    return room;
}

static int on_line(json_t *j, size_t line, void *ud, struct sbx_error *err)
{
    (void)line;
    struct vx *v = ud;
    const json_t *cmd = json_object_get(j, "command");
    if (json_is_object(cmd)) {
        const json_t *code = json_object_get(cmd, "exitCode");
        if (!v->started) {
            const char *id = json_string_value(json_object_get(cmd, "id"));
            pthread_mutex_lock(&v->mu);
            if (id && strlen(id) < sizeof(v->cmd_id))
                memcpy(v->cmd_id, id, strlen(id) + 1);
            pthread_mutex_unlock(&v->mu);
            v->started = 1;
            if (v->pending_sig && v->cmd_id[0]) {
                int sig = v->pending_sig;
                v->pending_sig = 0;
                send_signal(v, sig);
            }
        }
        if (json_is_integer(code)) {
            v->st.code = (int)json_integer_value(code);
            v->ended = 1;
        }
        return 0;
    }
    const char *stream = json_string_value(json_object_get(j, "stream"));
    const json_t *data = json_object_get(j, "data");
    if (stream && strcmp(stream, "error") == 0) {
        const char *m = json_string_value(json_object_get(data, "message"));
        char clean[256];
        sbx__wire_clean(m ? m : "?", m ? strlen(m) : 1, clean, sizeof(clean));
        return sbx_error_set(err, SBX_E_SANDBOX, 0, "the Vercel sandbox lost '%s': %s", v->name,
                             clean);
    }
    const char *s = json_string_value(data);
    if (!s || !stream)
        return 0;
    int which = strcmp(stream, "stderr") == 0 ? 2 : 1;
    size_t n = json_string_length(data), skip = 0;
    if (v->phase == 1) {
        /* A replay: what was delivered before the cut is dropped. */
        uint64_t before = v->seen[which];
        v->seen[which] += n;
        if (v->seen[which] <= v->got[which])
            return 0;
        skip = before < v->got[which] ? (size_t)(v->got[which] - before) : 0;
    }
    v->got[which] += n - skip;
    int room = which == 2 ? sbx__rproc_output(v->r, 2, s + skip, n - skip)
                          : stdout_bytes(v, s + skip, n - skip);
    v->paused |= !room;
    return 0;
}

static int x_data(struct sbx__xfer *x, const uint8_t *p, size_t n, void *ud, struct sbx_error *err)
{
    struct vx *v = ud;
    (void)x;
    int rc = sbx__ndjson_feed(&v->dec, (const char *)p, n, err);
    if (rc < 0)
        return rc;
    return v->paused ? SBX__PAUSE : 0;
}

static int recover(struct vx *v, int next, struct sbx_error *err);

/* The command's end as GET .../cmd/ID?wait=true gives it ({command: {exitCode}}). */
static int end_of(struct vx *v, const struct sbx__http_resp *resp, struct sbx_error *err)
{
    json_t *j = resp->body.len ? json_loadb(resp->body.data, resp->body.len, 0, NULL) : NULL;
    const json_t *code = json_object_get(json_object_get(j, "command"), "exitCode");
    int rc = 0;
    if (json_is_integer(code)) {
        v->st.code = (int)json_integer_value(code);
        v->ended = 1;
    } else {
        rc = sbx_error_set(err, SBX_E_API, 0, "the Vercel API gave no exit code of '%s'", v->name);
    }
    json_decref(j);
    return rc;
}

static void x_done(struct sbx__xfer *x, int rc, const struct sbx__http_resp *resp,
                   const struct sbx_error *xerr, void *ud)
{
    struct vx *v = ud;
    struct sbx_error err = SBX_ERROR_INIT;
    (void)x;
    v->x = NULL;
    if (rc < 0)
        sbx_error_copy(&err, xerr);
    else if (resp->status >= 400)
        rc = sbx__vercel_session_error(&v->t, resp->status, &resp->body, "command", NULL, &err);
    else if (v->phase == 2)
        rc = end_of(v, resp, &err);
    else if ((rc = sbx__ndjson_finish(&v->dec, &err)) == 0 && !v->ended && v->phase == 0)
        rc = sbx_error_set(&err, SBX_E_SANDBOX, 0,
                           "the Vercel API's stream of '%s' ended before the command did", v->name);
    /* A stream cut after the command started (a transport error, or the replay's end) is
     * picked up again; a status of the service's is not. */
    int cut = v->phase == 0 ? rc < 0 && (!resp || resp->status < 400) : v->phase == 1;
    int to_end = v->phase == 1 && rc == 0;
    if (!v->ended && v->started && cut && (to_end || v->recoveries < RECOVERIES)) {
        struct sbx_error again = SBX_ERROR_INIT;
        /* The logs again after a cut; the end once a replay of them ended whole. */
        if (recover(v, to_end ? 2 : 1, &again) == 0)
            return;
    }
    set_verdict(v, 2);
    if (rc < 0) {
        sbx_error_prefix(&err, "sandbox '%s'", v->t.name);
        sbx__rproc_fail(v->r, &err);
    } else {
        if (sbx__rproc_timed_out(v->r)) {
            v->st.timed_out = 1;
            /* The preamble's shell reports a killed command as 128 + signal; a SIGKILL of the
             * group ends that shell too (and setsid -w then says 1). */
            if (v->kill_sent) {
                v->st.signal = SIGKILL;
                v->st.code = -1;
            } else if (v->st.code > 128 && v->st.code < 128 + 65) {
                v->st.signal = v->st.code - 128;
                v->st.code = -1;
            }
        }
        sbx__rproc_exit(v->r, &v->st);
    }
}

static const struct sbx__xfer_ops stream_ops = {.data = x_data, .done = x_done};
static const struct sbx__xfer_ops end_ops = {.done = x_done};

/* After a cut: the logs from the start (phase 1), or once they ended, the command's end
 * (phase 2). */
static int recover(struct vx *v, int next, struct sbx_error *err)
{
    char id[sizeof(v->cmd_id)];
    pthread_mutex_lock(&v->mu);
    memcpy(id, v->cmd_id, sizeof(id));
    pthread_mutex_unlock(&v->mu);
    if (!id[0])
        return sbx_error_set(err, SBX_E_SANDBOX, 0, "no command id to pick up");
    if (next == 1)
        v->recoveries++;
    char *eid = sbx__http_escape(id, 0); /* the service's id: escaped into the path */
    char *op = sbx_xasprintf(next == 1 ? "cmd/%s/logs" : "cmd/%s?wait=true", eid);
    free(eid);
    char *sp = sbx__vercel_session_path(&v->t, op);
    char *path = sbx__vercel_path(v->t.conf, sp, 0);
    struct sbx__http_req req = {.path = path, .timeout_ms = -1};
    sbx__ndjson_release(&v->dec);
    sbx__vercel_lines_init(&v->dec, on_line, v);
    memset(v->seen, 0, sizeof(v->seen));
    v->phase = next;
    int rc = sbx__xfer_start(sbx__rproc_loop(v->r), v->ep, &req, next == 1 ? &stream_ops : &end_ops,
                             v, &v->x, err);
    free(op);
    free(sp);
    free(path);
    return rc;
}

static int start_command(struct vx *v, struct sbx_error *err)
{
    char *sp = sbx__vercel_session_path(&v->t, "cmd");
    char *path = sbx__vercel_path(v->t.conf, sp, 0);
    struct sbx__http_req req = {.method = "POST", .path = path, .json = v->body, .timeout_ms = -1};
    int rc = sbx__xfer_start(sbx__rproc_loop(v->r), v->ep, &req, &stream_ops, v, &v->x, err);
    free(sp);
    free(path);
    return rc;
}

static void up_done(struct sbx__xfer *x, int rc, const struct sbx__http_resp *resp,
                    const struct sbx_error *xerr, void *ud)
{
    struct vx *v = ud;
    struct sbx_error err = SBX_ERROR_INIT;
    (void)x;
    v->up = NULL;
    if (rc < 0)
        sbx_error_copy(&err, xerr);
    else if (resp->status >= 400)
        rc = sbx__vercel_session_error(&v->t, resp->status, &resp->body, "stdin upload", NULL,
                                       &err);
    if (rc == 0)
        rc = start_command(v, &err);
    if (rc < 0) {
        sbx_error_prefix(&err, "sandbox '%s': stdin of '%s'", v->t.name, v->name);
        set_verdict(v, 2);
        sbx__rproc_fail(v->r, &err);
    }
}

static const struct sbx__xfer_ops up_ops = {.done = up_done};

/* stdin ended: up as a file, then the command. */
static void upload_stdin(struct vx *v)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_buf gz;
    sbx_buf_init(&gz, STDIN_MAX + ((size_t)1 << 20));
    int rc = sbx__vercel_targz(v->in_abs, v->in.data ? v->in.data : "", v->in.len, &gz, &err);
    sbx_buf_release(&v->in);
    if (rc == 0) {
        char *sp = sbx__vercel_session_path(&v->t, "fs/write");
        char *path = sbx__vercel_path(v->t.conf, sp, 0);
        static const char *const headers[] = {"x-cwd: /", NULL};
        struct sbx__http_req req = {.method = "POST",
                                    .path = path,
                                    .body = gz.data,
                                    .body_len = gz.len,
                                    .content_type = "application/gzip",
                                    .headers = headers};
        rc = sbx__xfer_start(sbx__rproc_loop(v->r), v->ep, &req, &up_ops, v, &v->up, &err);
        free(sp);
        free(path);
    }
    sbx_buf_release(&gz);
    if (rc < 0) {
        sbx_error_prefix(&err, "sandbox '%s': stdin of '%s'", v->t.name, v->name);
        set_verdict(v, 2);
        sbx__rproc_fail(v->r, &err);
    }
}

static size_t op_input(struct sbx__rproc *r, const uint8_t *p, size_t n, void *ud)
{
    struct vx *v = ud;
    (void)r;
    if (!v->in_abs || v->x || v->up)
        return n; /* started: the input has gone already */
    if (n == 0) {
        upload_stdin(v);
        return 0;
    }
    struct sbx_error err = SBX_ERROR_INIT;
    if (sbx_buf_add(&v->in, p, n, &err) < 0) {
        sbx_error_set(&err, SBX_E_TOOBIG, 0,
                      "the stdin of '%s' is over %zu bytes: the Vercel service takes a "
                      "command's input whole, before it starts",
                      v->name, STDIN_MAX);
        free(v->in_abs);
        v->in_abs = NULL;
        sbx__rproc_fail(v->r, &err);
    }
    return n;
}

static void op_resume(struct sbx__rproc *r, void *ud)
{
    struct vx *v = ud;
    (void)r;
    v->paused = 0;
    if (v->x)
        sbx__xfer_resume(v->x);
}

static void op_stop(struct sbx__rproc *r, void *ud)
{
    struct vx *v = ud;
    (void)r;
    if (v->x)
        sbx__xfer_cancel(v->x);
    if (v->up)
        sbx__xfer_cancel(v->up);
    for (int i = 0; i < KILLS; i++)
        if (v->kx[i])
            sbx__xfer_cancel(v->kx[i]);
    v->x = v->up = NULL;
    memset(v->kx, 0, sizeof(v->kx));
    set_verdict(v, 2);
}

/* Caller's thread: the proc is freed while the command runs. */
static void op_kill(struct sbx__rproc *r, void *ud)
{
    struct vx *v = ud;
    (void)r;
    char *path = NULL;
    json_t *body = kill_request(v, SIGKILL, &path);
    if (!body)
        return;
    /* The group's kill waited for: the command is gone when the proc is. */
    if (json_object_get(body, "command"))
        sbx_json_set(body, "wait", json_true());
    struct sbx__http_req req = {.method = "POST", .path = path, .json = body};
    struct sbx__http_resp resp;
    struct sbx_error ignored = SBX_ERROR_INIT;
    sbx__http_resp_init(&resp);
    (void)sbx__http_call(v->ep, &req, &resp, &ignored);
    sbx__http_resp_release(&resp);
    json_decref(body);
    free(path);
}

static void vx_free(struct vx *v)
{
    if (!v)
        return;
    sbx__ndjson_release(&v->dec);
    sbx__vercel_target_release(&v->t);
    json_decref(v->body);
    sbx_buf_release(&v->in);
    free(v->in_abs);
    free(v->name);
    pthread_mutex_destroy(&v->mu);
    pthread_cond_destroy(&v->cv);
    free(v);
}

static void op_release(void *ud)
{
    vx_free(ud);
}

static const struct sbx__rproc_ops proc_ops = {
        .input = op_input,
        .signal = op_signal,
        .resume = op_resume,
        .stop = op_stop,
        .kill = op_kill,
        .release = op_release,
};

static int setup(struct sbx__rproc *r, void *ud, struct sbx_error *err)
{
    struct vx *v = ud;
    (void)r;
    return v->in_abs ? 0 : start_command(v, err);
}

/* ---------------------------------------------------------------------------------------------
 * Starting (caller's thread) */

/* The request: the preamble through OUTER, its arguments, the command; env as an object. */
static json_t *command_body(const struct sbx__vercel_target *t, const struct sbx_exec_spec *spec,
                            const char *cwd, const char *in_abs, int sudo)
{
    json_t *args = json_array(), *env = json_object();
    const char *pre[] = {"-c", OUTER, "sbx", INNER, t->root, NULL};
    for (const char **a = pre; *a; a++)
        sbx_json_append(args, sbx_json_str(*a));
    char *dir = cwd[0] ? sbx_xasprintf("%s/%s", t->root, cwd) : sbx_xstrdup(t->root);
    sbx_json_append(args, sbx_json_str(dir));
    free(dir);
    sbx_json_append(args, sbx_json_str(spec->flags & SBX_EXEC_KEEP_BACKGROUND ? "1" : "0"));
    sbx_json_append(args, sbx_json_str(in_abs ? in_abs : ""));
    if (spec->argv) {
        for (const char *const *a = spec->argv; *a; a++)
            sbx_json_append(args, sbx_json_str(*a));
    } else {
        const char *sh[] = {"/bin/sh", "-c", spec->command, NULL};
        for (const char **a = sh; *a; a++)
            sbx_json_append(args, sbx_json_str(*a));
    }
    for (const char *const *e = spec->env; e && *e; e++) {
        const char *eq = strchr(*e, '=');
        if (!eq)
            continue;
        char *k = sbx_xstrndup(*e, (size_t)(eq - *e));
        sbx_json_set(env, k, sbx_json_str(eq + 1));
        free(k);
    }
    /* cwd "/": the preamble enters the working directory and says why it cannot. */
    return json_pack("{s:s,s:o,s:s,s:o,s:b,s:b,s:b}", "command", "/bin/sh", "args", args, "cwd",
                     "/", "env", env, "sudo", sudo, "wait", 1, "logs", 1);
}

static int verdict_error(struct vx *v, const char *cwd, struct sbx_error *err)
{
    int start_rc = sbx__shellfs_start_error(v->mark[0], v->name, cwd, err);
    if (start_rc < 0)
        return start_rc;
    return sbx_error_set(err, SBX_E_SANDBOX, 0, "the start of '%s' was garbled", v->name);
}

/* Wait for the preamble's verdict (or the stream's end): 1 started, 0 the stream ended first
 * (its status tells), -code for a verdict that is an error. */
static int await_verdict(struct vx *v, const char *cwd, struct sbx_error *err)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += VERDICT_MS / 1000;
    pthread_mutex_lock(&v->mu);
    int rc = 0;
    while (v->verdict == 0 && rc == 0)
        rc = pthread_cond_timedwait(&v->cv, &v->mu, &until);
    int state = v->verdict;
    pthread_mutex_unlock(&v->mu);
    if (state == 0)
        return sbx_error_set(err, SBX_E_TIMEOUT, 0,
                             "'%s' did not start within %d s in sandbox "
                             "'%s'",
                             v->name, VERDICT_MS / 1000, v->t.name);
    if (state == 2)
        return 0;
    return v->mark[0] == 'S' ? 1 : verdict_error(v, cwd, err);
}

static int check_spec(const struct sbx_exec_spec *spec, int *sudo, struct sbx_error *err)
{
    *sudo = 0;
    if (spec->flags & SBX_EXEC_TTY)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "a Vercel sandbox's commands have no terminal (the service's command "
                             "API has none)");
    if (spec->user && strcmp(spec->user, "root") == 0)
        *sudo = 1;
    else if (spec->user && strcmp(spec->user, SBX__VERCEL_USER) != 0)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "a Vercel sandbox runs commands as '%s' (or root), not as '%s'",
                             SBX__VERCEL_USER, spec->user);
    return 0;
}

int sbx__vercel_exec_start(struct sbx_session *bs, const struct sbx_exec_spec *spec,
                           const char *cwd, struct sbx_proc **out, struct sbx_error *err)
{
    struct sbx__vercel_session *s = (struct sbx__vercel_session *)bs;
    int sudo, rc = check_spec(spec, &sudo, err);
    struct sbx__endpoint *ep;
    if (rc < 0 || (rc = sbx__vercel_ep(s->t.conf, &ep, err)) < 0)
        return rc;
    sbx__vercel_keepalive(s);
    struct vx *v = sbx_xcalloc(1, sizeof(*v));
    pthread_mutex_init(&v->mu, NULL);
    pthread_cond_init(&v->cv, NULL);
    sbx__vercel_target_copy(&v->t, &s->t);
    v->ep = ep;
    v->name = sbx_xstrdup(spec->argv ? spec->argv[0] : "/bin/sh");
    v->st.code = -1;
    v->sudo = sudo;
    sbx_buf_init(&v->in, STDIN_MAX);
    sbx__vercel_lines_init(&v->dec, on_line, v);
    int want_in = !!(spec->flags & SBX_EXEC_STDIN);
    if (want_in) {
        char rnd[33];
        if ((rc = sbx_random_hex(rnd, 16, err)) < 0) {
            vx_free(v);
            return rc;
        }
        v->in_abs = sbx_xasprintf("/tmp/.sbx-stdin-%s", rnd);
    }
    v->body = command_body(&s->t, spec, cwd, v->in_abs, sudo);
    struct sbx__rproc_opts o = {.name = v->name,
                                .want_stdin = want_in,
                                .merge_stderr = !!(spec->flags & SBX_EXEC_MERGE_STDERR),
                                .timeout_ms = spec->timeout_ms,
                                .kill_grace_ms = spec->kill_grace_ms};
    struct sbx__loop *loop = NULL;
    if ((rc = sbx__loop_default(&loop, err)) < 0 ||
        (rc = sbx__rproc_new(loop, &o, &proc_ops, v, &v->r, err)) < 0) {
        vx_free(v);
        return rc;
    }
    struct sbx__rproc *r = v->r;
    if ((rc = sbx__rproc_start(r, setup, err)) == 0 && !want_in)
        rc = await_verdict(v, cwd, err);
    if (rc < 0) {
        sbx_proc_free(sbx__rproc_proc(r));
        return rc;
    }
    *out = sbx__rproc_proc(r);
    return 0;
}
