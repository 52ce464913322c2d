/* Commands in a Blaxel sandbox: one POST /process per command with waitForCompletion, read as
 * the sandbox API's event stream (stdout, stderr, then the result with the exit code); stdin
 * through POST /process/{name}/stdin (its end: DELETE .../stdin); the process is named by sbx
 * (sbx__bl_process_req) so both can address it while the stream runs.
 *
 * The service runs one shell line: the shared start preamble of src/sandbox/shellfs/
 * (sbx__shellfs_launch_argv, every word quoted), which runs the command in a process group of
 * its own (so a timeout or cancel signals it from a second short command), refuses a working
 * directory out of the workspace and reports "S<pid> <pgid>\n" first on stdout.
 *
 * Two threads per command: one reads the stream into the proc's sockets and records the end,
 * one sends stdin and the timeout's signals. The caller sees pollable descriptors. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "providers/blaxel/blaxel.h"
#include "sandbox/session/internal.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/strv.h"
#include "sbx/time.h"

#define MARK_MAX    32
#define TICK_MS     200
#define STDIN_CHUNK (64 * 1024)

struct bl_proc {
    struct sbx_proc base;
    struct sbx__bl_conf *conf;
    char *sandbox, *pname, *name;
    json_t *req;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    pthread_t stream_thr, ctl_thr;
    int started; /* bit 0 stream, bit 1 ctl */
    int out_w, err_w, in_r, status_w;
    /* under lock */
    int verdict; /* 0 unknown, 1 read, -1 the stream ended without one */
    char mark[MARK_MAX];
    size_t mark_len;
    long pid, pgid;
    int done, lost, quit;
    int timed_out, sig_sent;
    struct sbx_exit status;
    struct sbx_error why;
    volatile int abort;
    int64_t deadline, kill_at, grace_ms;
};

static void put(int fd, const char *d, size_t n)
{
    while (fd >= 0 && n) {
        ssize_t w = send(fd, d, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        d += w;
        n -= (size_t)w;
    }
}

/* The preamble's verdict from the first stdout bytes; what follows is output. */
static int on_output(void *ud, int stream, const char *d, size_t n)
{
    struct bl_proc *p = ud;
    if (stream == 2) {
        put(p->err_w >= 0 ? p->err_w : p->out_w, d, n);
        return 0;
    }
    pthread_mutex_lock(&p->lock);
    while (n && p->verdict == 0) {
        char ch = *d++;
        n--;
        if (ch == '\n' || (p->mark_len == 0 && ch != 'S'))
            p->verdict = 1;
        if (ch != '\n' && p->mark_len < MARK_MAX - 1)
            p->mark[p->mark_len++] = ch;
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

static void *stream_main(void *arg)
{
    struct bl_proc *p = arg;
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *res = NULL;
    int rc = sbx__bl_process(p->conf, p->sandbox, p->req, on_output, p, &p->abort, &res, &err);
    const json_t *code = json_object_get(res, "exitCode");
    pthread_mutex_lock(&p->lock);
    if (p->verdict == 0)
        p->verdict = -1;
    p->status.code = json_is_integer(code) ? (int)json_integer_value(code) : -1;
    if (p->timed_out) {
        p->status.timed_out = 1;
        p->status.signal = p->sig_sent;
        p->status.code = -1;
    }
    if (rc < 0) {
        p->lost = 1;
        p->why = err;
    }
    /* The caller's ends see EOF, then the status. */
    sbx_fd_close(&p->err_w);
    sbx_fd_close(&p->out_w);
    p->done = 1;
    pthread_cond_broadcast(&p->cond);
    char ch = 'x';
    if (p->status_w >= 0 && write(p->status_w, &ch, 1) < 0) {
        /* the waiter polls the flag too */
    }
    pthread_mutex_unlock(&p->lock);
    json_decref(res);
    return NULL;
}

/* Signal the command's process group from a second command; without a group of its own (no
 * setsid in the image), the sandbox API's kill of the process. */
static void signal_group(struct bl_proc *p, const char *sig)
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
        int rc = sbx__bl_run(p->conf, p->sandbox, argv, &r, &ignored);
        sbx__shell_run_release(&r);
        if (rc == 0)
            return;
    }
    char *rest = sbx_xasprintf("process/%s/kill", p->pname);
    (void)sbx__bl_sb(p->conf, p->sandbox, "DELETE", rest, NULL, NULL, &ignored);
    free(rest);
}

/* The timeout: SIGTERM to the group at the deadline, SIGKILL after the grace. 1 once over. */
static int timer_step(struct bl_proc *p)
{
    int64_t now = sbx_time_mono_ns() / 1000000;
    pthread_mutex_lock(&p->lock);
    int over = p->quit || p->done;
    int term = !over && p->kill_at == INT64_MAX && now >= p->deadline;
    int kill = !over && p->kill_at != INT64_MAX && now >= p->kill_at;
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
    return over;
}

/* stdin: each piece as it is read, raw; its end closes the process's stdin. */
static void *ctl_main(void *arg)
{
    struct bl_proc *p = arg;
    char *in_rest = sbx_xasprintf("process/%s/stdin", p->pname);
    char *buf = sbx_xmalloc(STDIN_CHUNK);
    for (;;) {
        if (timer_step(p))
            break;
        struct pollfd pf = {.fd = p->in_r, .events = POLLIN};
        int r = p->in_r >= 0 ? poll(&pf, 1, TICK_MS) : (sbx_sleep_ms(TICK_MS), 0);
        if (r <= 0)
            continue;
        ssize_t n = read(p->in_r, buf, STDIN_CHUNK);
        if (n < 0 && errno == EINTR)
            continue;
        struct sbx_error ignored = SBX_ERROR_INIT;
        if (n <= 0) {
            sbx_fd_close(&p->in_r);
            (void)sbx__bl_sb(p->conf, p->sandbox, "DELETE", in_rest, NULL, NULL, &ignored);
            continue;
        }
        (void)sbx__bl_sb_raw(p->conf, p->sandbox, "POST", in_rest, buf, (size_t)n, &ignored);
    }
    free(buf);
    free(in_rest);
    return NULL;
}

static int proc_wait(struct sbx_proc *bp, int64_t timeout_ms, struct sbx_exit *out,
                     struct sbx_error *err)
{
    struct bl_proc *p = (struct bl_proc *)bp;
    int64_t deadline = sbx_deadline_after_ms(timeout_ms);
    for (;;) {
        pthread_mutex_lock(&p->lock);
        int done = p->done, lost = p->lost;
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
        int ms = sbx_deadline_poll_ms(deadline);
        if (timeout_ms >= 0 && ms == 0)
            return sbx_error_set(err, SBX_E_TIMEOUT, 0, "'%s' is still running", p->name);
        struct pollfd pf = {.fd = p->base.status_fd, .events = POLLIN};
        if (poll(&pf, 1, ms < 0 || ms > TICK_MS ? TICK_MS : ms) < 0 && errno != EINTR)
            return sbx_error_errno(err, errno, "poll");
    }
}

static void proc_free(struct sbx_proc *bp)
{
    struct bl_proc *p = (struct bl_proc *)bp;
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    int running = (p->started & 1) && !p->done;
    p->quit = 1;
    pthread_mutex_unlock(&p->lock);
    if (running)
        signal_group(p, "KILL");
    sbx_fd_close(&p->base.stdout_fd);
    sbx_fd_close(&p->base.stderr_fd);
    sbx_fd_close(&p->base.stdin_fd);
    p->abort = 1;
    if (p->started & 2)
        pthread_join(p->ctl_thr, NULL);
    if (p->started & 1)
        pthread_join(p->stream_thr, NULL);
    int *fds[] = {&p->base.status_fd, &p->status_w, &p->out_w, &p->err_w, &p->in_r};
    for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
        sbx_fd_close(fds[i]);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->cond);
    sbx__bl_conf_unref(p->conf);
    json_decref(p->req);
    free(p->sandbox);
    free(p->pname);
    free(p->name);
    free(p);
}

static const struct sbx_proc_ops proc_ops = {proc_wait, proc_free};

static int open_fds(struct bl_proc *p, int flags, struct sbx_error *err)
{
    int sp[2];
    int merge = !!(flags & SBX_EXEC_MERGE_STDERR), want_in = !!(flags & SBX_EXEC_STDIN);
    if (pipe2(sp, O_CLOEXEC) < 0)
        return sbx_error_errno(err, errno, "pipe");
    p->base.status_fd = sp[0];
    p->status_w = sp[1];
    int rc = sbx__proc_sockets(&p->base, merge, want_in, &p->out_w, &p->err_w, &p->in_r, err);
    if (rc < 0)
        return rc;
    return 0;
}

/* The shell line the service runs (shellfs.h: the shared start preamble). */
static char *command_line(const struct sbx__bl_session *s, const struct sbx_exec_spec *spec,
                          const char *cwd)
{
    struct sbx_strv a;
    sbx_strv_init(&a);
    sbx__shellfs_launch_argv(&a, s->base.root, cwd, spec);
    char *line = sbx__shellfs_quote_argv((const char *const *)a.v);
    sbx_strv_release(&a);
    return line;
}

static int verdict_error(struct bl_proc *p, const char *cwd, struct sbx_error *err)
{
    if (p->verdict < 0 || p->mark_len == 0) {
        if (p->lost)
            return sbx_error_copy(err, &p->why);
        return sbx_error_set(err, SBX_E_EXEC, 0, "cannot run '%s' in the sandbox", p->name);
    }
    int start_rc = sbx__shellfs_start_error(p->mark[0], p->name, cwd, err);
    if (start_rc < 0)
        return start_rc;
    return sbx_error_set(err, SBX_E_EXEC, 0, "the start of '%s' was garbled", p->name);
}

/* A failed start in a sandbox the service no longer has: SBX_E_SANDBOX "is gone". */
static int gone_check(struct sbx__bl_session *s, int rc, struct sbx_error *err)
{
    char *path = sbx_xasprintf("/sandboxes/%s", s->base.id);
    struct sbx_error ignored = SBX_ERROR_INIT;
    if (sbx__bl_api(s->conf, "GET", path, NULL, NULL, &ignored) == -SBX_E_NOTFOUND)
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0,
                           "sandbox '%s' is gone (it expired or was deleted)", s->base.id);
    free(path);
    return rc;
}

static struct bl_proc *proc_new(struct sbx__bl_session *s, const struct sbx_exec_spec *spec,
                                const char *line)
{
    struct bl_proc *p = sbx_xcalloc(1, sizeof(*p));
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->cond, NULL);
    p->base = (struct sbx_proc){
            .stdout_fd = -1, .stderr_fd = -1, .stdin_fd = -1, .status_fd = -1, .ops = &proc_ops};
    p->out_w = p->err_w = p->in_r = p->status_w = -1;
    p->conf = sbx__bl_conf_ref(s->conf);
    p->sandbox = sbx_xstrdup(s->base.id);
    p->name = sbx_xstrdup(spec->argv ? spec->argv[0] : "/bin/sh");
    p->req = sbx__bl_process_req(line, !!(spec->flags & SBX_EXEC_STDIN));
    p->pname = sbx_xstrdup(json_string_value(json_object_get(p->req, "name")));
    int64_t now = sbx_time_mono_ns() / 1000000;
    p->deadline = spec->timeout_ms > 0 ? now + spec->timeout_ms : INT64_MAX;
    p->kill_at = INT64_MAX;
    p->grace_ms = spec->kill_grace_ms > 0 ? spec->kill_grace_ms : SBX_EXEC_DEFAULT_GRACE_MS;
    p->why = (struct sbx_error)SBX_ERROR_INIT;
    return p;
}

int sbx__bl_exec_start(struct sbx_session *bs, const struct sbx_exec_spec *spec, const char *cwd,
                       struct sbx_proc **out, struct sbx_error *err)
{
    struct sbx__bl_session *s = (struct sbx__bl_session *)bs;
    if (spec->flags & SBX_EXEC_TTY)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "sbx runs blaxel commands without a terminal");
    if (spec->user)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "a blaxel sandbox runs commands as its image's user: '%s' cannot "
                             "be chosen",
                             spec->user);
    char *line = command_line(s, spec, cwd);
    struct bl_proc *p = proc_new(s, spec, line);
    free(line);
    int rc = open_fds(p, spec->flags, err);
    if (rc == 0 && pthread_create(&p->stream_thr, NULL, stream_main, p) != 0)
        rc = sbx_error_set(err, SBX_E_SYS, 0, "cannot start a thread");
    if (rc == 0) {
        p->started |= 1;
        pthread_mutex_lock(&p->lock);
        while (p->verdict == 0)
            pthread_cond_wait(&p->cond, &p->lock);
        if (!(p->verdict == 1 && p->mark[0] == 'S' && p->pid > 0))
            rc = verdict_error(p, cwd, err);
        int lost = p->lost;
        pthread_mutex_unlock(&p->lock);
        if (rc < 0 && lost)
            rc = gone_check(s, rc, err);
    }
    if (rc == 0 && pthread_create(&p->ctl_thr, NULL, ctl_main, p) != 0)
        rc = sbx_error_set(err, SBX_E_SYS, 0, "cannot start a thread");
    if (rc == 0)
        p->started |= 2;
    if (rc < 0) {
        proc_free(&p->base);
        return rc;
    }
    *out = &p->base;
    return 0;
}
