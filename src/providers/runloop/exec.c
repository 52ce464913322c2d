/* Commands in a Runloop devbox: one execute_async per command, its stdout and stderr read as
 * the service's SSE streams, its end by the long-polled wait_for_status, stdin by send_std_in
 * (text, then the EOF signal).
 *
 * The service runs one shell line: the shared start preamble of src/sandbox/shellfs/
 * (sbx__shellfs_launch_argv, every word quoted), which runs the command in a process group of
 * its own (so a timeout or cancel signals it from a second short command), refuses a working
 * directory out of the workspace and reports "S<pid> <pgid>\n" first on stdout.
 *
 * Four threads per command: two copy the output streams into the proc's sockets, one waits for
 * the end, one sends stdin and the timeout's signals. The caller sees pollable descriptors. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "providers/runloop/runloop.h"
#include "sandbox/session/internal.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/strv.h"
#include "sbx/time.h"

#define MARK_MAX     32
#define POLL_TICK_MS 200
#define INPUT_CHUNK  4096
#define LIFE_MS      ((int64_t)24 * 3600 * 1000)

struct rl_proc {
    struct sbx_proc base;
    struct sbx__rl_conf *conf;
    char *id, *eid, *name;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    pthread_t out_thr, err_thr, wait_thr, ctl_thr;
    int started; /* threads: bit 0 out, 1 err, 2 wait, 3 ctl */
    int out_w, err_w, in_r, status_w;
    int merged; /* stderr goes to out_w too: closed once both streams ended */
    /* under lock */
    int verdict; /* 0 unknown, 1 read, -1 the stream ended without one */
    char mark[MARK_MAX];
    size_t mark_len;
    long pid, pgid;
    int waited, out_done, err_done, lost, quit;
    int timed_out, sig_sent;
    struct sbx_exit status;
    struct sbx_error why;
    volatile int abort;
    int64_t deadline, kill_at, grace_ms;
};

static int finished(struct rl_proc *p)
{
    return p->waited && p->out_done && p->err_done;
}

static void put(int fd, const void *d, size_t n)
{
    const char *c = d;
    while (fd >= 0 && n) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        c += w;
        n -= (size_t)w;
    }
}

static void notify(struct rl_proc *p)
{
    pthread_cond_broadcast(&p->cond);
    if (finished(p) && p->status_w >= 0) {
        char ch = 'x';
        if (write(p->status_w, &ch, 1) < 0) {
            /* the reader polls the flags too */
        }
    }
}

/* Signal the command's process group from a second command; without a group of its own (no
 * setsid in the devbox), the service's kill of the execution. */
static void signal_group(struct rl_proc *p, const char *sig)
{
    pthread_mutex_lock(&p->lock);
    long pid = p->pid, pg = p->pgid;
    pthread_mutex_unlock(&p->lock);
    struct sbx_error ignored = SBX_ERROR_INIT;
    if (pid > 1 && pg == pid) {
        char target[32];
        snprintf(target, sizeof(target), "-%ld", pid);
        const char *argv[] = {"kill", "-s", sig, "--", target, NULL};
        struct sbx__shell_run r;
        sbx__shell_run_init(&r, 4096);
        (void)sbx__rl_run(p->conf, p->id, argv, &r, &ignored);
        sbx__shell_run_release(&r);
        return;
    }
    char *path = sbx_xasprintf("/v1/devboxes/%s/executions/%s/kill", p->id, p->eid);
    json_t *body = json_pack("{s:b}", "kill_process_group", 1);
    (void)sbx__rl_api(p->conf, "POST", path, body, NULL, &ignored);
    json_decref(body);
    free(path);
}

/* The preamble's verdict from the first output bytes; what follows is output. */
static int out_piece(void *ud, const char *d, size_t n)
{
    struct rl_proc *p = ud;
    pthread_mutex_lock(&p->lock);
    while (n && p->verdict == 0) {
        char ch = *d++;
        n--;
        if (p->mark_len == 0 && ch != 'S') {
            p->mark[p->mark_len++] = ch;
            p->verdict = 1;
        } else if (ch == '\n') {
            p->verdict = 1;
        } else if (p->mark_len < MARK_MAX - 1) {
            p->mark[p->mark_len++] = ch;
        }
        if (p->verdict) {
            p->mark[p->mark_len] = '\0';
            if (p->mark[0] == 'S' && sscanf(p->mark + 1, "%ld %ld", &p->pid, &p->pgid) < 1)
                p->pid = 0;
            p->base.pid = (pid_t)p->pid;
            pthread_cond_broadcast(&p->cond);
        }
    }
    pthread_mutex_unlock(&p->lock);
    put(p->out_w, d, n);
    return 0;
}

static int err_piece(void *ud, const char *d, size_t n)
{
    struct rl_proc *p = ud;
    put(p->err_w >= 0 ? p->err_w : p->out_w, d, n);
    return 0;
}

static void stream_end(struct rl_proc *p, int is_out, int rc, struct sbx_error *err)
{
    pthread_mutex_lock(&p->lock);
    /* The caller's end sees EOF once nothing writes the socket any more. */
    if (is_out) {
        p->out_done = 1;
        if (p->verdict == 0)
            p->verdict = -1;
    } else {
        p->err_done = 1;
        sbx_fd_close(&p->err_w);
    }
    if (p->out_done && (!p->merged || p->err_done))
        sbx_fd_close(&p->out_w);
    if (rc < 0 && !p->lost) {
        p->lost = 1;
        p->why = *err;
    }
    notify(p);
    pthread_mutex_unlock(&p->lock);
}

static void *out_main(void *arg)
{
    struct rl_proc *p = arg;
    struct sbx_error err = SBX_ERROR_INIT;
    int rc = sbx__rl_stream(p->conf, p->id, p->eid, "stdout", out_piece, p, &p->abort, &err);
    stream_end(p, 1, rc, &err);
    return NULL;
}

static void *err_main(void *arg)
{
    struct rl_proc *p = arg;
    struct sbx_error err = SBX_ERROR_INIT;
    int rc = sbx__rl_stream(p->conf, p->id, p->eid, "stderr", err_piece, p, &p->abort, &err);
    stream_end(p, 0, rc, &err);
    return NULL;
}

static void *wait_main(void *arg)
{
    struct rl_proc *p = arg;
    struct sbx_error err = SBX_ERROR_INIT;
    static const char *const done[] = {"completed", NULL};
    /* last_n=0: the answer without the output (the streams carry it). */
    char *path =
            sbx_xasprintf("/v1/devboxes/%s/executions/%s/wait_for_status?last_n=0", p->id, p->eid);
    json_t *ans = NULL;
    int rc = sbx__rl_wait_status(p->conf, path, done, LIFE_MS, &p->abort, &ans, &err);
    free(path);
    const json_t *st = json_object_get(ans, "exit_status");
    const char *s = json_string_value(json_object_get(ans, "status"));
    if (rc == 0 && (!s || strcmp(s, "completed") != 0))
        rc = sbx_error_set(&err, SBX_E_SANDBOX, 0, "the command did not end");
    pthread_mutex_lock(&p->lock);
    p->status.code = json_is_integer(st) ? (int)json_integer_value(st) : -1;
    if (p->timed_out) {
        p->status.timed_out = 1;
        p->status.signal = p->sig_sent;
        p->status.code = -1;
    }
    if (rc < 0 && !p->lost) {
        p->lost = 1;
        p->why = err;
    }
    p->waited = 1;
    notify(p);
    pthread_mutex_unlock(&p->lock);
    json_decref(ans);
    return NULL;
}

/* stdin goes as text: n bytes (invalid UTF-8 and NUL become U+FFFD), or none with sig. */
static void send_input(struct rl_proc *p, const char *text, size_t n, const char *sig)
{
    char *path = sbx_xasprintf("/v1/devboxes/%s/executions/%s/send_std_in", p->id, p->eid);
    json_t *body = json_object();
    if (text)
        sbx_json_set(body, "text", sbx_json_strn(text, n));
    if (sig)
        sbx_json_set(body, "signal", sbx_json_str(sig));
    struct sbx_error ignored = SBX_ERROR_INIT;
    (void)sbx__rl_api(p->conf, "POST", path, body, NULL, &ignored);
    json_decref(body);
    free(path);
}

/* The timeout: SIGTERM to the group at the deadline, SIGKILL after the grace. 1 once done. */
static int timer_step(struct rl_proc *p)
{
    int64_t now = sbx_time_mono_ns() / 1000000;
    pthread_mutex_lock(&p->lock);
    int quit = p->quit || p->waited;
    int term = !quit && p->kill_at == INT64_MAX && now >= p->deadline;
    int kill = !quit && p->kill_at != INT64_MAX && now >= p->kill_at;
    if (term) {
        p->timed_out = 1;
        p->sig_sent = SIGTERM;
        p->kill_at = now + p->grace_ms;
    }
    if (kill) {
        p->sig_sent = SIGKILL;
        p->kill_at = INT64_MAX - 1;
    }
    pthread_mutex_unlock(&p->lock);
    if (term)
        signal_group(p, "TERM");
    if (kill)
        signal_group(p, "KILL");
    return quit;
}

/* How many bytes at the end of p[0..n) start a UTF-8 sequence that has not ended yet. */
static size_t utf8_tail(const char *p, size_t n)
{
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        unsigned char c = (unsigned char)p[n - k];
        if ((c & 0xc0) == 0x80)
            continue;
        size_t want = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
        return want > k ? k : 0;
    }
    return 0;
}

static void *ctl_main(void *arg)
{
    struct rl_proc *p = arg;
    char buf[INPUT_CHUNK + 4];
    size_t have = 0; /* the start of a character cut by the last read */
    for (;;) {
        if (timer_step(p))
            return NULL;
        struct pollfd pf = {.fd = p->in_r, .events = POLLIN};
        int r = p->in_r >= 0 ? poll(&pf, 1, POLL_TICK_MS) : (sbx_sleep_ms(POLL_TICK_MS), 0);
        if (r <= 0)
            continue;
        ssize_t n = read(p->in_r, buf + have, INPUT_CHUNK);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            sbx_fd_close(&p->in_r);
            if (have)
                send_input(p, buf, have, NULL);
            have = 0;
            send_input(p, NULL, 0, "EOF");
            continue;
        }
        size_t len = have + (size_t)n, cut = utf8_tail(buf, len);
        if (len > cut)
            send_input(p, buf, len - cut, NULL);
        memmove(buf, buf + len - cut, cut);
        have = cut;
    }
}

static int proc_wait(struct sbx_proc *bp, int64_t timeout_ms, struct sbx_exit *out,
                     struct sbx_error *err)
{
    struct rl_proc *p = (struct rl_proc *)bp;
    int64_t deadline = sbx_deadline_after_ms(timeout_ms);
    for (;;) {
        pthread_mutex_lock(&p->lock);
        int done = finished(p), lost = p->lost;
        struct sbx_exit st = p->status;
        struct sbx_error why = p->why;
        pthread_mutex_unlock(&p->lock);
        if (done && lost)
            return sbx_error_set(err, SBX_E_SANDBOX, 0, "the exit status of '%s' is unknown: %s",
                                 p->name, why.msg);
        if (done) {
            *out = st;
            return 0;
        }
        struct pollfd pf = {.fd = p->base.status_fd, .events = POLLIN};
        int ms = sbx_deadline_poll_ms(deadline);
        if (timeout_ms >= 0 && ms == 0)
            return sbx_error_set(err, SBX_E_TIMEOUT, 0, "'%s' is still running", p->name);
        int r = poll(&pf, 1, ms < 0 || ms > POLL_TICK_MS ? POLL_TICK_MS : ms);
        if (r < 0 && errno != EINTR)
            return sbx_error_errno(err, errno, "poll");
    }
}

static void proc_free(struct sbx_proc *bp)
{
    struct rl_proc *p = (struct rl_proc *)bp;
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    int done = p->waited;
    p->quit = 1;
    pthread_mutex_unlock(&p->lock);
    if (!done && p->eid)
        signal_group(p, "KILL");
    sbx_fd_close(&p->base.stdout_fd);
    sbx_fd_close(&p->base.stderr_fd);
    sbx_fd_close(&p->base.stdin_fd);
    /* The streams and the wait end with the command (killed above); a service that keeps
     * them open is left within one stream's or poll's bound. */
    p->abort = 1;
    pthread_t *thr[] = {&p->ctl_thr, &p->out_thr, &p->err_thr, &p->wait_thr};
    int bit[] = {8, 1, 2, 4};
    for (int i = 0; i < 4; i++)
        if (p->started & bit[i])
            pthread_join(*thr[i], NULL);
    int *fds[] = {&p->base.status_fd, &p->status_w, &p->out_w, &p->err_w, &p->in_r};
    for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
        sbx_fd_close(fds[i]);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->cond);
    sbx__rl_conf_unref(p->conf);
    free(p->id);
    free(p->eid);
    free(p->name);
    free(p);
}

static const struct sbx_proc_ops proc_ops = {proc_wait, proc_free};

static int open_fds(struct rl_proc *p, const struct sbx_exec_spec *spec, struct sbx_error *err)
{
    int sp[2];
    int merge = !!(spec->flags & SBX_EXEC_MERGE_STDERR), want_in = !!(spec->flags & SBX_EXEC_STDIN);
    if (pipe2(sp, O_CLOEXEC) < 0)
        return sbx_error_errno(err, errno, "pipe");
    p->base.status_fd = sp[0];
    p->status_w = sp[1];
    int rc = sbx__proc_sockets(&p->base, merge, want_in, &p->out_w, &p->err_w, &p->in_r, err);
    if (rc < 0)
        return rc;
    p->merged = merge;
    return 0;
}

/* The shell line the service runs (shellfs.h: the shared start preamble). */
static char *command_line(const struct sbx__rl_session *s, const struct sbx_exec_spec *spec,
                          const char *cwd)
{
    struct sbx_strv a;
    sbx_strv_init(&a);
    sbx__shellfs_launch_argv(&a, s->base.root, cwd, spec);
    char *line = sbx__shellfs_quote_argv((const char *const *)a.v);
    sbx_strv_release(&a);
    return line;
}

static int verdict_error(struct rl_proc *p, const char *cwd, struct sbx_error *err)
{
    if (p->verdict < 0 || p->mark_len == 0) {
        if (p->lost)
            return sbx_error_copy(err, &p->why);
        return sbx_error_set(err, SBX_E_EXEC, 0, "cannot run '%s' in the devbox", p->name);
    }
    int start_rc = sbx__shellfs_start_error(p->mark[0], p->name, cwd, err);
    if (start_rc < 0)
        return start_rc;
    return sbx_error_set(err, SBX_E_EXEC, 0, "the start of '%s' was garbled", p->name);
}

/* A failed start on a devbox that is no longer running: SBX_E_SANDBOX "is gone". */
static int gone_check(struct sbx__rl_session *s, int rc, struct sbx_error *err)
{
    char *path = sbx_xasprintf("/v1/devboxes/%s", s->base.id);
    json_t *dv = NULL;
    struct sbx_error ignored = SBX_ERROR_INIT;
    int grc = sbx__rl_api(s->conf, "GET", path, NULL, &dv, &ignored);
    const char *st = json_string_value(json_object_get(dv, "status"));
    if (grc == -SBX_E_NOTFOUND || (grc == 0 && st && strcmp(st, "running") != 0))
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "sandbox '%s' is gone (%s)", s->base.id,
                           st ? st : "unknown to the service");
    json_decref(dv);
    free(path);
    return rc;
}

static struct rl_proc *proc_new(struct sbx__rl_session *s, const struct sbx_exec_spec *spec)
{
    struct rl_proc *p = sbx_xcalloc(1, sizeof(*p));
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->cond, NULL);
    p->base = (struct sbx_proc){
            .stdout_fd = -1, .stderr_fd = -1, .stdin_fd = -1, .status_fd = -1, .ops = &proc_ops};
    p->out_w = p->err_w = p->in_r = p->status_w = -1;
    p->conf = sbx__rl_conf_ref(s->conf);
    p->id = sbx_xstrdup(s->base.id);
    p->name = sbx_xstrdup(spec->argv ? spec->argv[0] : "/bin/sh");
    int64_t now = sbx_time_mono_ns() / 1000000;
    p->deadline = spec->timeout_ms > 0 ? now + spec->timeout_ms : INT64_MAX;
    p->kill_at = INT64_MAX;
    p->grace_ms = spec->kill_grace_ms > 0 ? spec->kill_grace_ms : SBX_EXEC_DEFAULT_GRACE_MS;
    p->why = (struct sbx_error)SBX_ERROR_INIT;
    return p;
}

static int start_threads(struct rl_proc *p, struct sbx_error *err)
{
    void *(*mains[])(void *) = {out_main, err_main, wait_main};
    pthread_t *thr[] = {&p->out_thr, &p->err_thr, &p->wait_thr};
    for (int i = 0; i < 3; i++) {
        if (pthread_create(thr[i], NULL, mains[i], p) != 0)
            return sbx_error_set(err, SBX_E_SYS, 0, "cannot start a thread");
        p->started |= 1 << i;
    }
    return 0;
}

int sbx__rl_exec_start(struct sbx_session *bs, const struct sbx_exec_spec *spec, const char *cwd,
                       struct sbx_proc **out, struct sbx_error *err)
{
    struct sbx__rl_session *s = (struct sbx__rl_session *)bs;
    if (spec->flags & SBX_EXEC_TTY)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "a runloop devbox runs commands without a terminal");
    if (spec->user && strcmp(spec->user, SBX__RL_USER) != 0)
        return sbx_error_set(err, SBX_E_NOTFOUND, 0,
                             "no user '%s' in the sandbox: runloop commands run as '%s'",
                             spec->user, SBX__RL_USER);
    struct rl_proc *p = proc_new(s, spec);
    int rc = open_fds(p, spec, err);
    char *line = rc == 0 ? command_line(s, spec, cwd) : NULL;
    json_t *ans = NULL, *body = NULL;
    if (rc == 0) {
        body = json_pack("{s:s,s:b}", "command", line, "attach_stdin",
                         !!(spec->flags & SBX_EXEC_STDIN));
        char *path = sbx_xasprintf("/v1/devboxes/%s/execute_async", s->base.id);
        rc = sbx__rl_api(s->conf, "POST", path, body, &ans, err);
        free(path);
    }
    if (rc < 0 && rc != -SBX_E_PERM)
        rc = gone_check(s, rc, err);
    const char *eid = json_string_value(json_object_get(ans, "execution_id"));
    if (rc == 0 && !sbx__rl_valid_id(eid))
        rc = sbx_error_set(err, SBX_E_API, 0, "the Runloop API started a command without an id");
    if (rc == 0) {
        p->eid = sbx_xstrdup(eid);
        rc = start_threads(p, err);
    }
    if (rc == 0) {
        pthread_mutex_lock(&p->lock);
        while (p->verdict == 0)
            pthread_cond_wait(&p->cond, &p->lock);
        if (!(p->verdict == 1 && p->mark[0] == 'S' && p->pid > 0))
            rc = verdict_error(p, cwd, err);
        pthread_mutex_unlock(&p->lock);
    }
    if (rc == 0 && pthread_create(&p->ctl_thr, NULL, ctl_main, p) != 0)
        rc = sbx_error_set(err, SBX_E_SYS, 0, "cannot start a thread");
    if (rc == 0)
        p->started |= 8;
    json_decref(ans);
    json_decref(body);
    free(line);
    if (rc < 0) {
        proc_free(&p->base);
        return rc;
    }
    *out = &p->base;
    return 0;
}
