/* Commands in an E2B sandbox through envd's process service: one process.Process/Start server
 * stream per command (start, data, end and keepalive events), stdin by unary SendInput and
 * CloseStdin, a terminal's size by Update.
 *
 * A small fixed shell preamble (INNER) runs first in the sandbox, as for the Docker provider:
 * it enters the working directory (refusing one that resolves out of the workspace), tells a
 * missing program from a failing one, reports its process id and process group, and unless
 * the caller keeps background processes ends its group when the command ends. envd starts
 * commands in its own process group, so without a terminal the preamble is started through
 * `setsid -w` (OUTER) where the sandbox has it: the command's group is then its own, and a
 * timeout or a cancel signals that group (by a second short command), never envd's.
 *
 * Two threads per command: one reads the stream into the proc's sockets (or a local
 * pseudo-terminal whose master the caller gets), the other sends stdin, resizes and the
 * timeout's signals. The caller sees pollable descriptors only (sandbox/provider.h). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <termios.h>
#include <unistd.h>

#include "providers/e2b/e2b.h"
#include "sandbox/session/internal.h"
#include "sbx/b64.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/time.h"

#define MARK_MAX     48
#define POLL_TICK_MS 200
#define INPUT_CHUNK  65536

static const char INNER[] =
        "root=$1 dir=$2 keep=$3; shift 3\n"
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

int sbx__e2b_signal_number(const char *name)
{
    static const char *const names[] = {"hangup",
                                        "interrupt",
                                        "quit",
                                        "illegal instruction",
                                        "trace/breakpoint trap",
                                        "aborted",
                                        "bus error",
                                        "floating point exception",
                                        "killed",
                                        "user defined signal 1",
                                        "segmentation fault",
                                        "user defined signal 2",
                                        "broken pipe",
                                        "alarm clock",
                                        "terminated"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strcmp(names[i], name) == 0)
            return (int)i + 1;
    if (strncmp(name, "signal ", 7) == 0)
        return (int)strtol(name + 7, NULL, 10);
    return 0;
}

/* An end event as an exit status: a command that died of a signal shows as 128 + N, as the
 * preamble's shell reports one (docs/internals/hosted-providers.md). */
static void end_status(const json_t *end, struct sbx_exit *st)
{
    memset(st, 0, sizeof(*st));
    const char *status = json_string_value(json_object_get(end, "status"));
    if (json_is_true(json_object_get(end, "exited"))) {
        st->code = (int)json_integer_value(json_object_get(end, "exitCode"));
        return;
    }
    int sig =
            status && strncmp(status, "signal: ", 8) == 0 ? sbx__e2b_signal_number(status + 8) : 0;
    st->code = sig > 0 ? 128 + sig : -1;
}

/* The bytes of a data event's field (base64) into *out; 0 when absent. */
static int data_field(const json_t *data, const char *field, struct sbx_buf *out,
                      struct sbx_error *err)
{
    const char *b = json_string_value(json_object_get(data, field));
    sbx_buf_reset(out);
    if (!b)
        return 0;
    return sbx_b64_decode(b, strlen(b), out, err);
}

/* ---------------------------------------------------------------------------------------------
 * Short commands run to completion */

struct run_ctx {
    struct sbx__shell_run *r;
    struct sbx_buf tmp;
    int ended;
};

static int run_msg(void *ud, const json_t *msg, struct sbx_error *err)
{
    struct run_ctx *c = ud;
    const json_t *ev = json_object_get(msg, "event");
    const json_t *data = json_object_get(ev, "data"), *end = json_object_get(ev, "end");
    int rc = 0;
    if (data) {
        if ((rc = data_field(data, "stdout", &c->tmp, err)) == 0 && c->tmp.len)
            rc = sbx_buf_add(&c->r->out, c->tmp.data, c->tmp.len, err);
        if (rc == 0 && (rc = data_field(data, "stderr", &c->tmp, err)) == 0 && c->tmp.len)
            rc = sbx_buf_add(&c->r->err, c->tmp.data, c->tmp.len, err);
    } else if (end) {
        struct sbx_exit st;
        end_status(end, &st);
        c->r->code = st.code;
        c->ended = 1;
    }
    return rc;
}

static json_t *start_request(const char *cmd, json_t *args, json_t *envs, int stdin_on, int tty,
                             unsigned short rows, unsigned short cols)
{
    json_t *proc = json_object();
    sbx_json_set(proc, "cmd", sbx_json_str(cmd));
    sbx_json_set(proc, "args", args);
    sbx_json_set(proc, "envs", envs ? envs : json_object());
    json_t *req = json_object();
    sbx_json_set(req, "process", proc);
    sbx_json_set(req, "stdin", json_boolean(stdin_on));
    if (tty)
        sbx_json_set(req, "pty",
                     json_pack("{s:{s:i,s:i}}", "size", "cols", (int)cols, "rows", (int)rows));
    return req;
}

int sbx__e2b_exec_run(const struct sbx__e2b_envd *e, const char *const *argv,
                      struct sbx__shell_run *out, struct sbx_error *err)
{
    json_t *args = json_array();
    for (const char *const *a = argv + 1; *a; a++)
        sbx_json_append(args, sbx_json_str(*a));
    json_t *req = start_request(argv[0], args, NULL, 0, 0, 0, 0);
    struct run_ctx c = {.r = out};
    sbx_buf_init(&c.tmp, SBX_BUF_NOLIMIT);
    int rc = sbx__e2b_stream(e, "/process.Process/Start", req, run_msg, &c, NULL, err);
    if (rc == 0 && !c.ended)
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "'%s' ended without an exit status", argv[0]);
    if (rc < 0)
        sbx_error_prefix(err, "'%s' in sandbox '%s'", argv[0], e->id);
    sbx_buf_release(&c.tmp);
    json_decref(req);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Commands */

struct e2b_proc {
    struct sbx_proc base;
    struct sbx__e2b_envd envd;
    char *name;
    int tty, keep, want_in;
    int out_w, err_w, in_r, slave, status_w, wake_r, wake_w;
    pthread_t stream_thr, ctl_thr;
    int stream_started, ctl_started;
    volatile int abort;
    json_t *req;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    /* under lock */
    int verdict; /* 0 waiting, 1 came, -1 the stream ended before */
    char mark[MARK_MAX];
    size_t mark_len;
    long pid, pgid, envd_pid;
    int done, lost, timed_out, kill_sent, quit;
    struct sbx_exit status;
    struct sbx_error stream_err;
    /* the control thread's */
    int64_t deadline, kill_at, grace_ms;
    unsigned short rows, cols;
    struct sbx_buf tmp;
};

static long envd_pid_of(struct e2b_proc *p);

static void wake(int fd)
{
    char c = 'x';
    ssize_t w;
    do
        w = write(fd, &c, 1);
    while (w < 0 && errno == EINTR);
}

/* Signal the command's process group from a second short command; without a group of its
 * own, the process alone through envd's SendSignal. */
static void signal_group(struct e2b_proc *p, const char *sig)
{
    char target[32];
    long pid, pg;
    pthread_mutex_lock(&p->lock);
    pid = p->pid;
    pg = p->pgid;
    pthread_mutex_unlock(&p->lock);
    if (pid <= 1)
        return;
    if (pg != pid) {
        /* No group of its own (no setsid in the template): envd signals its process. */
        long epid = envd_pid_of(p);
        json_t *m = json_pack("{s:{s:I},s:s}", "process", "pid", (json_int_t)epid, "signal",
                              strcmp(sig, "KILL") == 0 ? "SIGNAL_SIGKILL" : "SIGNAL_SIGTERM");
        struct sbx_error ignored = SBX_ERROR_INIT;
        if (epid > 0)
            (void)sbx__e2b_unary(&p->envd, "/process.Process/SendSignal", m, NULL, &ignored);
        json_decref(m);
        return;
    }
    snprintf(target, sizeof(target), "-%ld", pid);
    const char *argv[] = {"kill", "-s", sig, "--", target, NULL};
    struct sbx__shell_run r;
    struct sbx_error ignored = SBX_ERROR_INIT;
    sbx__shell_run_init(&r, 4096);
    (void)sbx__e2b_exec_run(&p->envd, argv, &r, &ignored);
    sbx__shell_run_release(&r);
}

/* Write all of p[0..n) to fd (the relay's blocking end); a reader gone drops the rest. */
static void put(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (fd >= 0 && n) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w < 0 && errno == ENOTSOCK)
            w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        c += w;
        n -= (size_t)w;
    }
}

/* The preamble's verdict from the first output bytes: "S<pid> <pgid>\n", or one letter. What
 * follows it is output. */
static void take_verdict(struct e2b_proc *p, const uint8_t **d, size_t *n)
{
    while (*n && p->verdict == 0) {
        char ch = (char)**d;
        (*d)++;
        (*n)--;
        if (p->mark_len == 0 && ch != 'S') {
            p->mark[p->mark_len++] = ch;
            p->verdict = 1;
        } else if (ch == '\n') {
            p->verdict = 1;
        } else if (ch != '\r' && p->mark_len < MARK_MAX - 1) {
            p->mark[p->mark_len++] = ch;
        }
    }
    if (p->verdict == 1) {
        p->mark[p->mark_len] = '\0';
        if (p->mark[0] == 'S' && sscanf(p->mark + 1, "%ld %ld", &p->pid, &p->pgid) < 1)
            p->pid = 0;
        p->base.pid = (pid_t)p->pid;
        pthread_cond_broadcast(&p->cond);
    }
}

static int proc_msg(void *ud, const json_t *msg, struct sbx_error *err)
{
    struct e2b_proc *p = ud;
    const json_t *ev = json_object_get(msg, "event");
    const json_t *data = json_object_get(ev, "data"), *end = json_object_get(ev, "end");
    const json_t *start = json_object_get(ev, "start");
    if (start) {
        pthread_mutex_lock(&p->lock);
        p->envd_pid = (long)json_integer_value(json_object_get(start, "pid"));
        pthread_mutex_unlock(&p->lock);
        return 0;
    }
    if (end) {
        pthread_mutex_lock(&p->lock);
        end_status(end, &p->status);
        p->done = 1;
        pthread_mutex_unlock(&p->lock);
        return 0;
    }
    if (!data)
        return 0;
    static const char *const fields[] = {"stdout", "pty", "stderr"};
    for (size_t i = 0; i < 3; i++) {
        int rc = data_field(data, fields[i], &p->tmp, err);
        if (rc < 0)
            return rc;
        const uint8_t *d = (const uint8_t *)p->tmp.data;
        size_t n = p->tmp.len;
        if (!n)
            continue;
        if (i < 2) {
            pthread_mutex_lock(&p->lock);
            if (p->verdict == 0)
                take_verdict(p, &d, &n);
            pthread_mutex_unlock(&p->lock);
            put(p->tty ? p->slave : p->out_w, d, n);
        } else {
            put(p->err_w >= 0 ? p->err_w : p->out_w, d, n);
        }
    }
    return 0;
}

static void *stream_main(void *arg)
{
    struct e2b_proc *p = arg;
    struct sbx_error err = SBX_ERROR_INIT;
    int rc = sbx__e2b_stream(&p->envd, "/process.Process/Start", p->req, proc_msg, p, &p->abort,
                             &err);
    pthread_mutex_lock(&p->lock);
    if (!p->done) {
        p->lost = 1;
        p->done = 1;
        if (rc < 0)
            (void)sbx_error_copy(&p->stream_err, &err);
        else
            (void)sbx_error_set(&p->stream_err, SBX_E_SANDBOX, 0,
                                "'%s' ended without an exit status", p->name);
    } else if (p->timed_out) {
        p->status.timed_out = 1;
        if (p->kill_sent || (p->status.code > 128 && p->status.code < 128 + 65)) {
            p->status.signal = p->kill_sent ? SIGKILL : p->status.code - 128;
            p->status.code = -1;
        }
    }
    if (p->verdict == 0)
        p->verdict = -1;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
    /* EOF for the caller's reads. */
    if (p->tty)
        sbx_fd_close(&p->slave);
    sbx_fd_close(&p->out_w);
    sbx_fd_close(&p->err_w);
    wake(p->status_w);
    wake(p->wake_w);
    return NULL;
}

/* ---------------------------------------------------------------------------------------------
 * The control thread: stdin, resizes, the timeout */

static json_t *selector(long envd_pid)
{
    return json_pack("{s:{s:I}}", "process", "pid", (json_int_t)envd_pid);
}

static long envd_pid_of(struct e2b_proc *p)
{
    pthread_mutex_lock(&p->lock);
    long v = p->envd_pid;
    pthread_mutex_unlock(&p->lock);
    return v;
}

static void send_input(struct e2b_proc *p, long epid, const void *d, size_t n)
{
    struct sbx_buf b;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    sbx__e2b_keep(sbx_b64_encode(d, n, &b, NULL));
    json_t *m = selector(epid);
    sbx_json_set(m, "input", json_pack("{s:s}", p->tty ? "pty" : "stdin", b.data ? b.data : ""));
    struct sbx_error ignored = SBX_ERROR_INIT;
    (void)sbx__e2b_unary(&p->envd, "/process.Process/SendInput", m, NULL, &ignored);
    json_decref(m);
    sbx_buf_release(&b);
}

static void tty_sync_size(struct e2b_proc *p, long epid)
{
    struct winsize ws;
    if (ioctl(p->slave, TIOCGWINSZ, &ws) < 0 || (ws.ws_row == p->rows && ws.ws_col == p->cols) ||
        !ws.ws_row || !ws.ws_col)
        return;
    p->rows = ws.ws_row;
    p->cols = ws.ws_col;
    json_t *m = selector(epid);
    sbx_json_set(m, "pty",
                 json_pack("{s:{s:i,s:i}}", "size", "cols", (int)p->cols, "rows", (int)p->rows));
    struct sbx_error ignored = SBX_ERROR_INIT;
    (void)sbx__e2b_unary(&p->envd, "/process.Process/Update", m, NULL, &ignored);
    json_decref(m);
}

/* Deadlines: SIGTERM to the group at the timeout, SIGKILL after the grace. */
static int timer_step(struct e2b_proc *p)
{
    int64_t now = sbx_time_mono_ns();
    if (p->kill_at != INT64_MAX && now >= p->kill_at) {
        pthread_mutex_lock(&p->lock);
        p->kill_sent = 1;
        pthread_mutex_unlock(&p->lock);
        signal_group(p, "KILL");
        p->kill_at = INT64_MAX;
    } else if (p->deadline != INT64_MAX && now >= p->deadline) {
        pthread_mutex_lock(&p->lock);
        p->timed_out = 1;
        pthread_mutex_unlock(&p->lock);
        signal_group(p, "TERM");
        p->deadline = INT64_MAX;
        p->kill_at = sbx_deadline_after_ms(p->grace_ms);
    }
    int64_t next = p->kill_at < p->deadline ? p->kill_at : p->deadline;
    int ms = sbx_deadline_poll_ms(next);
    if (p->tty)
        ms = ms < 0 || ms > POLL_TICK_MS ? POLL_TICK_MS : ms;
    return ms;
}

static void *ctl_main(void *arg)
{
    struct e2b_proc *p = arg;
    uint8_t buf[INPUT_CHUNK];
    long epid = envd_pid_of(p);
    int in_fd = p->tty ? p->slave : p->in_r;
    for (;;) {
        pthread_mutex_lock(&p->lock);
        int stop = p->done || p->quit;
        pthread_mutex_unlock(&p->lock);
        if (stop)
            break;
        if (p->tty)
            tty_sync_size(p, epid);
        struct pollfd pf[2] = {{.fd = p->wake_r, .events = POLLIN},
                               {.fd = in_fd, .events = POLLIN}};
        int r = poll(pf, in_fd >= 0 ? 2 : 1, timer_step(p));
        if (r < 0 && errno != EINTR)
            break;
        if (r <= 0)
            continue;
        if (pf[0].revents) {
            char c;
            ssize_t got = read(p->wake_r, &c, 1);
            (void)got;
            continue;
        }
        if (in_fd >= 0 && pf[1].revents) {
            ssize_t n = read(in_fd, buf, sizeof(buf));
            if (n < 0 && (errno == EINTR || errno == EAGAIN))
                continue;
            if (n > 0) {
                /* A resize just before the input must reach the terminal first. */
                if (p->tty)
                    tty_sync_size(p, epid);
                send_input(p, epid, buf, (size_t)n);
                continue;
            }
            /* The caller closed stdin: so does the command's (a terminal has no such end). */
            if (!p->tty) {
                json_t *m = selector(epid);
                struct sbx_error ignored = SBX_ERROR_INIT;
                (void)sbx__e2b_unary(&p->envd, "/process.Process/CloseStdin", m, NULL, &ignored);
                json_decref(m);
                sbx_fd_close(&p->in_r);
            }
            in_fd = -1;
        }
    }
    return NULL;
}

/* ---------------------------------------------------------------------------------------------
 * The proc */

static int proc_wait(struct sbx_proc *bp, int64_t timeout_ms, struct sbx_exit *out,
                     struct sbx_error *err)
{
    struct e2b_proc *p = (struct e2b_proc *)bp;
    int64_t deadline = sbx_deadline_after_ms(timeout_ms);
    for (;;) {
        pthread_mutex_lock(&p->lock);
        int done = p->done && p->verdict != 0, lost = p->lost;
        struct sbx_exit st = p->status;
        struct sbx_error why = p->stream_err;
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
    struct e2b_proc *p = (struct e2b_proc *)bp;
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    int done = p->done;
    p->quit = 1;
    pthread_mutex_unlock(&p->lock);
    if (!done && p->stream_started)
        signal_group(p, "KILL");
    /* The caller's ends first: a relay blocked writing output nobody reads then fails at
     * once instead of holding the joins below. */
    if (p->base.tty) {
        sbx_fd_close(&p->base.stdout_fd);
        p->base.stdin_fd = -1;
    } else {
        sbx_fd_close(&p->base.stdout_fd);
        sbx_fd_close(&p->base.stderr_fd);
        sbx_fd_close(&p->base.stdin_fd);
    }
    if (p->ctl_started) {
        wake(p->wake_w);
        pthread_join(p->ctl_thr, NULL);
    }
    if (p->stream_started) {
        /* The stream ends with the group; a stream that does not is dropped. */
        int64_t until = sbx_deadline_after_ms(3000);
        for (;;) {
            pthread_mutex_lock(&p->lock);
            int d = p->verdict != 0 && (p->done || p->lost);
            pthread_mutex_unlock(&p->lock);
            if (d || sbx_deadline_poll_ms(until) == 0)
                break;
            sbx_sleep_ms(20);
        }
        p->abort = 1;
        pthread_join(p->stream_thr, NULL);
    }
    int *fds[] = {&p->base.status_fd, &p->status_w, &p->wake_r, &p->wake_w,
                  &p->out_w,          &p->err_w,    &p->in_r,   &p->slave};
    for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
        sbx_fd_close(fds[i]);
    sbx_buf_release(&p->tmp);
    json_decref(p->req);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->cond);
    sbx__e2b_envd_release(&p->envd);
    free(p->name);
    free(p);
}

static const struct sbx_proc_ops proc_ops = {proc_wait, proc_free};

static struct e2b_proc *proc_new(struct sbx__e2b_session *s, const struct sbx_exec_spec *spec)
{
    struct e2b_proc *p = sbx_xcalloc(1, sizeof(*p));
    int tty = !!(spec->flags & SBX_EXEC_TTY);
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->cond, NULL);
    sbx_buf_init(&p->tmp, SBX_BUF_NOLIMIT);
    p->base = (struct sbx_proc){.stdout_fd = -1,
                                .stderr_fd = -1,
                                .stdin_fd = -1,
                                .status_fd = -1,
                                .tty = tty,
                                .ops = &proc_ops};
    p->out_w = p->err_w = p->in_r = p->slave = p->status_w = p->wake_r = p->wake_w = -1;
    p->tty = tty;
    p->keep = !!(spec->flags & SBX_EXEC_KEEP_BACKGROUND);
    p->want_in = tty || (spec->flags & SBX_EXEC_STDIN);
    p->deadline = spec->timeout_ms > 0 ? sbx_deadline_after_ms(spec->timeout_ms) : INT64_MAX;
    p->kill_at = INT64_MAX;
    p->grace_ms = spec->kill_grace_ms > 0 ? spec->kill_grace_ms : SBX_EXEC_DEFAULT_GRACE_MS;
    p->name = sbx_xstrdup(spec->argv ? spec->argv[0] : "/bin/sh");
    p->rows = spec->rows ? spec->rows : 24;
    p->cols = spec->cols ? spec->cols : 80;
    p->stream_err = (struct sbx_error)SBX_ERROR_INIT;
    sbx__e2b_envd_copy(&p->envd, &s->envd);
    return p;
}

/* The Start request: the preamble with its arguments, then the command. */
static json_t *proc_request(const struct sbx__e2b_session *s, const struct e2b_proc *p,
                            const struct sbx_exec_spec *spec, const char *cwd)
{
    json_t *args = json_array();
    sbx_json_append(args, sbx_json_str("-c"));
    sbx_json_append(args, sbx_json_str(p->tty ? INNER : OUTER));
    sbx_json_append(args, sbx_json_str("sbx"));
    if (!p->tty)
        sbx_json_append(args, sbx_json_str(INNER));
    char *dir = cwd[0] ? sbx_xasprintf("%s/%s", s->base.root, cwd) : sbx_xstrdup(s->base.root);
    sbx_json_append(args, sbx_json_str(s->base.root));
    sbx_json_append(args, sbx_json_str(dir));
    sbx_json_append(args, sbx_json_str(p->keep ? "1" : "0"));
    free(dir);
    if (spec->argv) {
        for (const char *const *a = spec->argv; *a; a++)
            sbx_json_append(args, sbx_json_str(*a));
    } else {
        sbx_json_append(args, sbx_json_str("/bin/sh"));
        sbx_json_append(args, sbx_json_str("-c"));
        sbx_json_append(args, sbx_json_str(spec->command));
    }
    json_t *envs = json_object();
    for (const char *const *e = spec->env; e && *e; e++) {
        const char *eq = strchr(*e, '=');
        if (!eq)
            continue;
        char *k = sbx_xstrndup(*e, (size_t)(eq - *e));
        sbx_json_set(envs, k, sbx_json_str(eq + 1));
        free(k);
    }
    return start_request("/bin/sh", args, envs, p->want_in && !p->tty, p->tty, p->rows, p->cols);
}

/* The error for a verdict other than "S<pid> <pgid>". */
static int verdict_error(struct e2b_proc *p, const char *cwd, struct sbx_error *err)
{
    if (p->verdict < 0 || p->mark_len == 0) {
        if (p->lost)
            return sbx_error_copy(err, &p->stream_err);
        return sbx_error_set(err, SBX_E_EXEC, 0, "cannot run '%s' (exit status %d)", p->name,
                             p->status.code);
    }
    int start_rc = sbx__shellfs_start_error(p->mark[0], p->name, cwd, err);
    if (start_rc < 0)
        return start_rc;
    return sbx_error_set(err, SBX_E_EXEC, 0, "the start of '%s' was garbled", p->name);
}

/* With a terminal: a local pseudo-terminal whose master the caller gets and whose raw slave
 * the threads copy to and from the sandbox's terminal. */
static int open_local_tty(struct e2b_proc *p, struct sbx_error *err)
{
    int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    char name[128];
    if (m < 0 || grantpt(m) < 0 || unlockpt(m) < 0 || ptsname_r(m, name, sizeof(name))) {
        int rc = sbx_error_errno(err, errno, "cannot open a pseudo-terminal");
        if (m >= 0)
            close(m);
        return rc;
    }
    p->base.stdout_fd = p->base.stdin_fd = m;
    p->slave = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (p->slave < 0)
        return sbx_error_errno(err, errno, "cannot open '%s'", name);
    struct termios t;
    if (tcgetattr(p->slave, &t) == 0) {
        cfmakeraw(&t);
        (void)tcsetattr(p->slave, TCSANOW, &t);
    }
    struct winsize ws = {.ws_row = p->rows, .ws_col = p->cols};
    (void)ioctl(m, TIOCSWINSZ, &ws);
    return 0;
}

static int open_local_sockets(struct e2b_proc *p, int merge_stderr, struct sbx_error *err)
{
    int rc = sbx__proc_sockets(&p->base, merge_stderr, p->want_in, &p->out_w, &p->err_w, &p->in_r,
                               err);
    if (rc < 0)
        return rc;
    return 0;
}

static int open_fds(struct e2b_proc *p, const struct sbx_exec_spec *spec, struct sbx_error *err)
{
    int sp[2], wp[2];
    if (pipe2(sp, O_CLOEXEC) < 0)
        return sbx_error_errno(err, errno, "pipe");
    p->base.status_fd = sp[0];
    p->status_w = sp[1];
    if (pipe2(wp, O_CLOEXEC) < 0)
        return sbx_error_errno(err, errno, "pipe");
    p->wake_r = wp[0];
    p->wake_w = wp[1];
    return p->tty ? open_local_tty(p, err)
                  : open_local_sockets(p, !!(spec->flags & SBX_EXEC_MERGE_STDERR), err);
}

int sbx__e2b_exec_start(struct sbx_session *bs, const struct sbx_exec_spec *spec, const char *cwd,
                        struct sbx_proc **out, struct sbx_error *err)
{
    struct sbx__e2b_session *s = (struct sbx__e2b_session *)bs;
    if (spec->user && strcmp(spec->user, SBX__E2B_USER) != 0)
        return sbx_error_set(err, SBX_E_NOTFOUND, 0,
                             "no user '%s' in the sandbox: e2b commands run as '%s'", spec->user,
                             SBX__E2B_USER);
    sbx__e2b_keepalive(s);
    struct e2b_proc *p = proc_new(s, spec);
    int rc = open_fds(p, spec, err);
    if (rc < 0)
        goto out;
    p->req = proc_request(s, p, spec, cwd);
    if (pthread_create(&p->stream_thr, NULL, stream_main, p) != 0) {
        rc = sbx_error_set(err, SBX_E_SYS, 0, "cannot start a thread");
        goto out;
    }
    p->stream_started = 1;
    pthread_mutex_lock(&p->lock);
    while (p->verdict == 0)
        pthread_cond_wait(&p->cond, &p->lock);
    int ok = p->verdict == 1 && p->mark[0] == 'S' && p->pid > 0;
    if (!ok)
        rc = verdict_error(p, cwd, err);
    pthread_mutex_unlock(&p->lock);
    if (rc < 0)
        goto out;
    if (pthread_create(&p->ctl_thr, NULL, ctl_main, p) != 0) {
        rc = sbx_error_set(err, SBX_E_SYS, 0, "cannot start a thread");
        goto out;
    }
    p->ctl_started = 1;
    *out = &p->base;
    return 0;
out:
    proc_free(&p->base);
    return rc;
}
