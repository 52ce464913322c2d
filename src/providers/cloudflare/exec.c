/* Commands in a Cloudflare sandbox: one POST .../exec each, its answer a stream of Server-Sent
 * Events (stdout and stderr as base64 chunks, then exit {"exit_code"} or error {"error"}),
 * relayed by the remote layer's event loop (wire/rproc.h) as an asynchronous transfer
 * (sbx__xfer) through the SSE parser: no thread per command.
 *
 * The bridge quotes the argv it is given into one bash line of the container's session. The
 * argv sbx gives is a fixed preamble (PREAMBLE) with arguments, never a line built from input:
 * the preamble sets the command's environment, enters its working directory (refusing one that
 * resolves out of the workspace), tells a missing program from one that cannot run, starts the
 * command as the leader of a process group of its own and says that group's id first on
 * stdout ("S<pgid>\n"), waits for it, and, unless background processes are kept, ends the
 * group with it. The bridge has no call to signal a command: a timeout's SIGTERM and SIGKILL
 * and a cancel reach the group through a second short command (kill -s SIG -- -PGID). A
 * command killed by a signal shows as 128+N, as the preamble's shell reports it.
 *
 * The bridge's exec takes no stdin: a command's stdin is kept until the caller closes it (at
 * most 32 MiB), staged as a file of the workspace through PUT .../file, and the command starts
 * then, reading it (the preamble opens and removes it). A command that must answer its input
 * while it runs cannot (it has none until the input ends). Nor is there a terminal for a
 * command: the bridge's PTY is an interactive shell over a WebSocket, which sbx does not drive
 * (no pty trait). */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "providers/cloudflare/cloudflare.h"
#include "sandbox/wire/http.h"
#include "sandbox/wire/loop.h"
#include "sandbox/wire/rproc.h"
#include "sandbox/wire/sse.h"
#include "sandbox/wire/wire.h"
#include "sbx/b64.h"
#include "sbx/json.h"
#include "sbx/path.h"
#include "sbx/strv.h"
#include "sbx/time.h"

#define VERDICT_MS 120000 /* the preamble's first line, after the request went out */
#define PRE_MAX    64

/* $1 workspace root, $2 working directory, $3 keep background processes (1/0), $4 the file of
 * sbx's mark and $5 the sandbox's id (the mark must name it: the bridge answers for a sandbox
 * whose container went away with a fresh, empty one; beside it, "$4.env" holds the manifest's
 * environment, NUL-separated), $6 a staged file to read as stdin ("":
 * none; removed once open), $7 the number of environment entries that follow, then argv. The
 * first bytes on stdout are the verdict: "S<pgid>\n" started, "G" the sandbox is gone, "N" not
 * found, "X" not executable, "C" no such directory, "P" directory out of the workspace, "E" a
 * bad environment entry, "I" the staged stdin cannot be opened. bash: the bridge's session
 * shell, whose job control gives the command a process group of its own. */
static const char PREAMBLE[] =
        "root=$1 dir=$2 keep=$3 mark=$4 id=$5 in=$6 n=$7; shift 7\n"
        "read -r m _ <\"$mark\" 2>/dev/null && [ \"$m\" = \"$id\" ] || { printf G; exit 125; }\n"
        "if [ -n \"$in\" ]; then exec 3<\"$in\" || { printf I; exit 125; }; rm -f -- \"$in\"; "
        "else exec 3</dev/null; fi\n"
        "if [ -f \"$mark.env\" ]; then while IFS= read -r -d '' kv; do export \"$kv\" 2>/dev/null || "
        "{ printf E; exit 125; }; done <\"$mark.env\"; fi\n"
        "while [ \"$n\" -gt 0 ]; do export \"$1\" 2>/dev/null || { printf E; exit 125; }; "
        "shift; n=$((n-1)); done\n"
        "rootr=$(cd -P -- \"$root\" 2>/dev/null && pwd -P) || { printf C; exit 125; }\n"
        "cd -- \"$dir\" 2>/dev/null || { printf C; exit 125; }\n"
        "case \"$(pwd -P)/\" in \"$rootr\"/*) ;; *) printf P; exit 125;; esac\n"
        "case $1 in\n"
        "*/*) [ -e \"$1\" ] || { printf N; exit 127; }\n"
        "     if [ -d \"$1\" ] || [ ! -x \"$1\" ]; then printf X; exit 126; fi;;\n"
        "*) command -v \"$1\" >/dev/null 2>&1 || { printf N; exit 127; };;\n"
        "esac\n"
        "set -m\n"
        "(printf 'S%d\\n' \"$BASHPID\"; exec \"$@\") <&3 3<&- &\n"
        "p=$!; set +m; exec 3<&-\n"
        "wait \"$p\"; r=$?\n"
        "[ \"$keep\" = 1 ] || kill -TERM -- \"-$p\" 2>/dev/null\n"
        "exit \"$r\"\n";

struct cfproc {
    struct sbx__cf_conf *conf; /* a reference */
    char *id, *name, *cwd;
    struct sbx__rproc *r;
    struct sbx__xfer *x; /* loop thread; NULL once done or cancelled */
    json_t *body;
    /* With stdin: what the caller writes, kept until its end, then staged as a file of the
     * workspace (PUT .../file), which the preamble reads; the command starts after that, so
     * exec_start does not wait for the verdict (async). */
    int async;
    struct sbx_buf in;
    char *stage;           /* the staged file, absolute */
    struct sbx__xfer *put; /* loop thread */
    struct sbx__sse sse;
    struct sbx_buf dec;
    int full;    /* output said there is no room: pause the transfer */
    int pending; /* loop thread: a signal asked for before the group was known */
    /* Until the verdict: what came before it. Under lock: verdict, pgid, fail. */
    struct sbx_buf pre, pre_err;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int verdict; /* 0 none yet, 'S', a letter, or '!' the stream ended first */
    pid_t pgid;
    struct sbx_error fail; /* with '!' */
    int have_exit, code;
    char failed[256]; /* the bridge's error event */
};

static void set_verdict(struct cfproc *k, int v, pid_t pgid, const struct sbx_error *e)
{
    pthread_mutex_lock(&k->lock);
    if (!k->verdict) {
        k->verdict = v;
        k->pgid = pgid;
        if (e)
            sbx_error_copy(&k->fail, e);
        pthread_cond_broadcast(&k->cond);
    }
    pthread_mutex_unlock(&k->lock);
}

static void give(struct cfproc *k, int stream, const void *p, size_t n)
{
    if (n && !sbx__rproc_output(k->r, stream, p, n))
        k->full = 1;
}

static void kill_later(struct cfproc *k, int sig);

/* stdout bytes before the verdict: the verdict's line, then the command's output. */
static int take_pre(struct cfproc *k, const char *p, size_t n, struct sbx_error *err)
{
    if (n == 0)
        return 0;
    const char *nl = memchr(p, '\n', n);
    size_t line = nl ? (size_t)(nl - p) + 1 : n;
    if (sbx_buf_add(&k->pre, p, line, err) < 0)
        return sbx_error_set(err, SBX_E_SANDBOX, 0, "the start of '%s' was garbled", k->name);
    const char *d = k->pre.data;
    if (d[0] != 'S') {
        set_verdict(k, (unsigned char)d[0], 0, NULL);
        return 0;
    }
    if (!nl)
        return 0;
    char *end = NULL;
    long pg = strtol(d + 1, &end, 10);
    if (end != d + k->pre.len - 1 || pg <= 1)
        return sbx_error_set(err, SBX_E_SANDBOX, 0, "the start of '%s' was garbled", k->name);
    set_verdict(k, 'S', (pid_t)pg, NULL);
    if (k->pending)
        kill_later(k, k->pending);
    give(k, 2, k->pre_err.data, k->pre_err.len);
    give(k, 1, p + line, n - line);
    return 0;
}

static int on_event(const char *event, const char *data, size_t n, void *ud, struct sbx_error *err)
{
    struct cfproc *k = ud;
    int out = strcmp(event, "stdout") == 0, errs = strcmp(event, "stderr") == 0, rc;
    if (out || errs) {
        k->dec.len = 0;
        if ((rc = sbx_b64_decode(data, n, &k->dec, err)) < 0)
            return rc;
        pthread_mutex_lock(&k->lock);
        int v = k->verdict;
        pthread_mutex_unlock(&k->lock);
        if (v == 'S')
            give(k, out ? 1 : 2, k->dec.data, k->dec.len);
        else if (!v && out)
            return take_pre(k, k->dec.data, k->dec.len, err);
        else if (!v)
            return sbx_buf_add(&k->pre_err, k->dec.data, k->dec.len, err);
        return 0;
    }
    json_t *j = json_loadb(data, n, 0, NULL);
    if (strcmp(event, "exit") == 0 && json_is_integer(json_object_get(j, "exit_code"))) {
        k->code = (int)json_integer_value(json_object_get(j, "exit_code"));
        k->have_exit = 1;
    } else if (strcmp(event, "error") == 0) {
        const char *m = json_string_value(json_object_get(j, "error"));
        m = m ? m : "(no message)";
        sbx__wire_clean(m, strlen(m), k->failed, sizeof(k->failed));
    }
    json_decref(j);
    return 0;
}

static int on_data(struct sbx__xfer *x, const uint8_t *p, size_t n, void *ud, struct sbx_error *err)
{
    struct cfproc *k = ud;
    (void)x;
    int rc = sbx__sse_feed(&k->sse, (const char *)p, n, err);
    if (rc < 0)
        return rc;
    return k->full ? SBX__PAUSE : 0;
}

static int verdict_error(struct cfproc *k, int v, const char *cwd, struct sbx_error *err);

static void on_done(struct sbx__xfer *x, int rc, const struct sbx__http_resp *resp,
                    const struct sbx_error *err, void *ud)
{
    struct cfproc *k = ud;
    struct sbx_error e = SBX_ERROR_INIT;
    (void)x;
    k->x = NULL;
    if (rc < 0)
        sbx_error_copy(&e, err);
    else if (resp->status >= 400)
        (void)sbx__cf_status_error(k->conf, resp->status, resp->body.data, resp->body.len,
                                   "POST /v1/sandbox/ID/exec", &e);
    else if (sbx__sse_finish(&k->sse, &e) == 0 && k->failed[0])
        sbx_error_set(&e, SBX_E_SANDBOX, 0, "sandbox '%s': the Sandbox Bridge failed '%s': %s",
                      k->id, k->name, k->failed);
    else if (!e.code && !k->have_exit)
        sbx_error_set(&e, SBX_E_SANDBOX, 0,
                      "sandbox '%s': the stream of '%s' ended without its exit status", k->id,
                      k->name);
    pthread_mutex_lock(&k->lock);
    int v = k->verdict;
    pthread_mutex_unlock(&k->lock);
    /* Started without waiting (stdin): a command that could not start ends with its reason. */
    if (!e.code && k->async && v && v != 'S')
        (void)verdict_error(k, v, k->cwd, &e);
    set_verdict(k, '!', 0, e.code ? &e : NULL);
    if (e.code) {
        sbx__rproc_fail(k->r, &e);
        return;
    }
    struct sbx_exit st = {.code = k->code};
    if (sbx__rproc_timed_out(k->r)) {
        st.timed_out = 1;
        if (st.code > 128 && st.code < 128 + 65) {
            st.signal = st.code - 128;
            st.code = -1;
        }
    }
    sbx__rproc_exit(k->r, &st);
}

static const struct sbx__xfer_ops xfer_ops = {.data = on_data, .done = on_done};

/* ---------------------------------------------------------------------------------------------
 * Signals: a second command */

struct killer {
    struct sbx__cf_conf *conf;
    char *id;
    pid_t pgid;
    int sig;
};

static void kill_group(struct sbx__cf_conf *c, const char *id, pid_t pgid, int sig)
{
    char num[16], grp[24];
    snprintf(num, sizeof(num), "%d", sig);
    snprintf(grp, sizeof(grp), "-%d", (int)pgid);
    const char *argv[] = {"kill", "-s", sig == SIGKILL ? "KILL" : sig == SIGTERM ? "TERM" : num,
                          "--",   grp,  NULL};
    if (sig != SIGKILL && sig != SIGTERM)
        argv[1] = "-n";
    struct sbx__shell_run r;
    struct sbx_error ignored = SBX_ERROR_INIT;
    sbx__shell_run_init(&r, 4096);
    (void)sbx__cf_run(c, id, argv, &r, &ignored);
    sbx__shell_run_release(&r);
}

static void *killer_main(void *arg)
{
    struct killer *kl = arg;
    kill_group(kl->conf, kl->id, kl->pgid, kl->sig);
    sbx__cf_conf_unref(kl->conf);
    free(kl->id);
    free(kl);
    return NULL;
}

/* On the loop's thread, which must not wait for a request: a thread of its own. */
static void kill_later(struct cfproc *k, int sig)
{
    pthread_mutex_lock(&k->lock);
    pid_t pg = k->pgid;
    pthread_mutex_unlock(&k->lock);
    if (pg <= 1)
        return;
    struct killer *kl = sbx_xcalloc(1, sizeof(*kl));
    kl->conf = sbx__cf_conf_ref(k->conf);
    kl->id = sbx_xstrdup(k->id);
    kl->pgid = pg;
    kl->sig = sig;
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &a, killer_main, kl) != 0)
        killer_main(kl);
    pthread_attr_destroy(&a);
}

/* ---------------------------------------------------------------------------------------------
 * Stdin, staged */

static int start_exec(struct cfproc *k, struct sbx_error *err)
{
    char *path = sbx_xasprintf("/v1/sandbox/%s/exec", k->id);
    struct sbx__http_req req = {.method = "POST", .path = path, .json = k->body, .timeout_ms = -1};
    int rc = sbx__xfer_start(sbx__rproc_loop(k->r), k->conf->ep, &req, &xfer_ops, k, &k->x, err);
    free(path);
    return rc;
}

static void on_put_done(struct sbx__xfer *x, int rc, const struct sbx__http_resp *resp,
                        const struct sbx_error *err, void *ud)
{
    struct cfproc *k = ud;
    struct sbx_error e = SBX_ERROR_INIT;
    (void)x;
    k->put = NULL;
    if (rc < 0)
        sbx_error_copy(&e, err);
    else if (resp->status >= 400)
        (void)sbx__cf_status_error(k->conf, resp->status, resp->body.data, resp->body.len,
                                   "PUT /v1/sandbox/ID/file", &e);
    if (!e.code)
        (void)start_exec(k, &e);
    if (e.code) {
        sbx_error_prefix(&e, "stdin of '%s'", k->name);
        set_verdict(k, '!', 0, &e);
        sbx__rproc_fail(k->r, &e);
    }
}

static const struct sbx__xfer_ops put_ops = {.done = on_put_done};

/* The caller's stdin, kept whole; at its end it goes up and the command starts. */
static size_t op_input(struct sbx__rproc *r, const uint8_t *p, size_t n, void *ud)
{
    struct cfproc *k = ud;
    struct sbx_error e = SBX_ERROR_INIT;
    if (!k->async || k->put || k->x || sbx__rproc_ended(r))
        return n;
    if (n) {
        if (sbx_buf_add(&k->in, p, n, &e) < 0) {
            sbx_error_set(&e, SBX_E_TOOBIG, 0,
                          "stdin of '%s' is over %llu MiB, the most the Sandbox Bridge takes",
                          k->name, (unsigned long long)(SBX__CF_FILE_MAX >> 20));
            sbx__rproc_fail(r, &e);
        }
        return n;
    }
    char *e_abs = sbx__http_escape(k->stage + 1, 1);
    char *path = sbx_xasprintf("/v1/sandbox/%s/file/%s", k->id, e_abs);
    struct sbx__http_req req = {.method = "PUT",
                                .path = path,
                                .body = k->in.data ? k->in.data : "",
                                .body_len = k->in.len,
                                .timeout_ms = -1};
    if (sbx__xfer_start(sbx__rproc_loop(r), k->conf->ep, &req, &put_ops, k, &k->put, &e) < 0)
        sbx__rproc_fail(r, &e);
    free(path);
    free(e_abs);
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * The proc */

static void op_signal(struct sbx__rproc *r, int sig, void *ud)
{
    struct cfproc *k = ud;
    (void)r;
    pthread_mutex_lock(&k->lock);
    int known = k->pgid > 1;
    pthread_mutex_unlock(&k->lock);
    if (known)
        kill_later(k, sig);
    else
        k->pending = sig; /* sent once the preamble says the group (take_pre) */
}

static void op_resume(struct sbx__rproc *r, void *ud)
{
    struct cfproc *k = ud;
    (void)r;
    k->full = 0;
    if (k->x)
        sbx__xfer_resume(k->x);
}

static void op_stop(struct sbx__rproc *r, void *ud)
{
    struct cfproc *k = ud;
    (void)r;
    if (k->x)
        sbx__xfer_cancel(k->x);
    if (k->put)
        sbx__xfer_cancel(k->put);
    k->x = k->put = NULL;
}

static void op_kill(struct sbx__rproc *r, void *ud)
{
    struct cfproc *k = ud;
    (void)r;
    pthread_mutex_lock(&k->lock);
    pid_t pg = k->pgid;
    pthread_mutex_unlock(&k->lock);
    if (pg > 1)
        kill_group(k->conf, k->id, pg, SIGKILL);
}

static void cfproc_free(void *ud)
{
    struct cfproc *k = ud;
    sbx__sse_release(&k->sse);
    sbx_buf_release(&k->dec);
    sbx_buf_release(&k->pre);
    sbx_buf_release(&k->pre_err);
    pthread_mutex_destroy(&k->lock);
    pthread_cond_destroy(&k->cond);
    sbx_buf_release(&k->in);
    json_decref(k->body);
    sbx__cf_conf_unref(k->conf);
    free(k->id);
    free(k->name);
    free(k->cwd);
    free(k->stage);
    free(k);
}

static const struct sbx__rproc_ops proc_ops = {.input = op_input,
                                               .signal = op_signal,
                                               .resume = op_resume,
                                               .stop = op_stop,
                                               .kill = op_kill,
                                               .release = cfproc_free};

static int setup(struct sbx__rproc *r, void *ud, struct sbx_error *err)
{
    struct cfproc *k = ud;
    (void)r;
    return k->async ? 0 : start_exec(k, err);
}

/* The request's body: the preamble, its arguments, the command. */
static json_t *command_body(const struct sbx__cf_session *s, const struct sbx_exec_spec *spec,
                            const char *cwd, const char *stage)
{
    json_t *a = json_array();
    char n[16];
    size_t nenv = 0;
    for (const char *const *e = spec->env; e && *e; e++)
        nenv++;
    snprintf(n, sizeof(n), "%zu", nenv);
    const char *head[] = {"bash",
                          "-c",
                          PREAMBLE,
                          "sbx",
                          s->base.root,
                          cwd[0] ? cwd : ".",
                          spec->flags & SBX_EXEC_KEEP_BACKGROUND ? "1" : "0",
                          SBX__CF_ALIVE_FILE,
                          s->base.id,
                          stage ? stage : "",
                          n};
    for (size_t i = 0; i < sizeof(head) / sizeof(head[0]); i++)
        sbx_json_append(a, sbx_json_str(head[i]));
    for (const char *const *e = spec->env; e && *e; e++)
        sbx_json_append(a, sbx_json_str(*e));
    if (spec->argv) {
        for (const char *const *p = spec->argv; *p; p++)
            sbx_json_append(a, sbx_json_str(*p));
    } else {
        sbx_json_append(a, sbx_json_str("/bin/sh"));
        sbx_json_append(a, sbx_json_str("-c"));
        sbx_json_append(a, sbx_json_str(spec->command));
    }
    json_t *b = json_object();
    sbx_json_set(b, "argv", a);
    return b;
}

static int verdict_error(struct cfproc *k, int v, const char *cwd, struct sbx_error *err)
{
    int start_rc = sbx__shellfs_start_error(v, k->name, cwd, err);
    if (start_rc < 0)
        return start_rc;
    switch (v) {
    case 'G':
        return sbx_error_set(err, SBX_E_SANDBOX, 0,
                             "sandbox '%s' is gone (its container went away or it was removed)",
                             k->id);
    case 'I':
        return sbx_error_set(err, SBX_E_SANDBOX, 0, "the staged stdin of '%s' cannot be read",
                             k->name);
    case '!':
        if (k->fail.code)
            return sbx_error_copy(err, &k->fail);
        return sbx_error_set(err, SBX_E_SANDBOX, 0, "'%s' ended before it started (sandbox '%s')",
                             k->name, k->id);
    case 0:
        return sbx_error_set(err, SBX_E_TIMEOUT, 0,
                             "the Sandbox Bridge did not start '%s' within %d s", k->name,
                             VERDICT_MS / 1000);
    default:
        return sbx_error_set(err, SBX_E_SANDBOX, 0, "the start of '%s' was garbled", k->name);
    }
}

/* Wait for the verdict (the caller's thread). */
static int await_verdict(struct cfproc *k, pid_t *pgid)
{
    int64_t deadline = sbx_time_mono_ns() + (int64_t)VERDICT_MS * 1000000;
    pthread_mutex_lock(&k->lock);
    while (!k->verdict) {
        int64_t left = deadline - sbx_time_mono_ns();
        if (left <= 0)
            break;
        int64_t step = left < 100000000 ? left : 100000000;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += step % 1000000000;
        ts.tv_sec += step / 1000000000 + ts.tv_nsec / 1000000000;
        ts.tv_nsec %= 1000000000;
        pthread_cond_timedwait(&k->cond, &k->lock, &ts);
    }
    int v = k->verdict;
    *pgid = k->pgid;
    pthread_mutex_unlock(&k->lock);
    return v;
}

/* The request is JSON: an argument or environment entry that is not UTF-8 cannot be sent as
 * it is (it would arrive changed), so it is refused. */
static int not_utf8(const char *const *v, const char *what, struct sbx_error *err)
{
    for (; v && *v; v++)
        if (!sbx_utf8_valid(*v, strlen(*v)))
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "%s: the Sandbox Bridge takes UTF-8 text only (its exec is JSON)",
                                 what);
    return 0;
}

static int refused(const struct sbx_exec_spec *spec, const char *cwd, struct sbx_error *err)
{
    const char *one[] = {spec->command, NULL};
    const char *dir[] = {cwd, NULL};
    int rc;
    if ((rc = not_utf8(spec->argv, "an argument of the command", err)) < 0 ||
        (rc = not_utf8(one, "the command", err)) < 0 ||
        (rc = not_utf8(spec->env, "an environment entry of the command", err)) < 0 ||
        (rc = not_utf8(dir, "the working directory", err)) < 0)
        return rc;
    if (spec->user)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "a cloudflare sandbox runs commands as its container's user only, "
                             "not as '%s'",
                             spec->user);
    if (spec->flags & SBX_EXEC_TTY)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "the cloudflare provider runs no command on a terminal (the Sandbox "
                             "Bridge's terminal is an interactive shell sbx does not drive)");
    return 0;
}

int sbx__cf_exec_start(struct sbx_session *bs, const struct sbx_exec_spec *spec, const char *cwd,
                       struct sbx_proc **out, struct sbx_error *err)
{
    struct sbx__cf_session *s = (struct sbx__cf_session *)bs;
    int rc = refused(spec, cwd, err);
    if (rc < 0)
        return rc;
    struct cfproc *k = sbx_xcalloc(1, sizeof(*k));
    k->conf = sbx__cf_conf_ref(s->conf);
    k->id = sbx_xstrdup(s->base.id);
    k->name = sbx_xstrdup(spec->argv ? spec->argv[0] : "/bin/sh");
    k->cwd = sbx_xstrdup(cwd);
    k->async = !!(spec->flags & SBX_EXEC_STDIN);
    if (k->async) {
        uint8_t rnd[8];
        if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
            cfproc_free(k);
            return sbx_error_set(err, SBX_E_SYS, errno, "no random bytes for a staging name");
        }
        k->stage = sbx_xasprintf("%s/.sbx-stdin-%02x%02x%02x%02x%02x%02x%02x%02x", s->base.root,
                                 rnd[0], rnd[1], rnd[2], rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
    }
    sbx_buf_init(&k->in, SBX__CF_FILE_MAX);
    k->body = command_body(s, spec, cwd, k->stage);
    sbx__sse_init(&k->sse, SBX__CF_EVENT_MAX, on_event, k);
    sbx_buf_init(&k->dec, SBX__CF_EVENT_MAX);
    sbx_buf_init(&k->pre, PRE_MAX);
    sbx_buf_init(&k->pre_err, SBX__CF_EVENT_MAX);
    pthread_mutex_init(&k->lock, NULL);
    pthread_cond_init(&k->cond, NULL);
    struct sbx__rproc_opts o = {.name = k->name,
                                .want_stdin = k->async,
                                .merge_stderr = !!(spec->flags & SBX_EXEC_MERGE_STDERR),
                                .timeout_ms = spec->timeout_ms,
                                .kill_grace_ms = spec->kill_grace_ms};
    struct sbx__loop *loop = NULL;
    if ((rc = sbx__loop_default(&loop, err)) < 0 ||
        (rc = sbx__rproc_new(loop, &o, &proc_ops, k, &k->r, err)) < 0) {
        cfproc_free(k);
        return rc;
    }
    struct sbx__rproc *r = k->r;
    struct sbx_proc *p = sbx__rproc_proc(r);
    if ((rc = sbx__rproc_start(r, setup, err)) < 0) {
        sbx_proc_free(p);
        return rc;
    }
    if (k->async) {
        *out = p; /* its verdict comes once its stdin is staged */
        return 0;
    }
    pid_t pgid = 0;
    int v = await_verdict(k, &pgid);
    if (v != 'S') {
        rc = verdict_error(k, v, cwd, err);
        sbx_proc_free(p);
        return rc;
    }
    p->pid = pgid;
    *out = p;
    return 0;
}
