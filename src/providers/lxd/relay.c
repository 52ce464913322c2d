/* A user's command in an LXD sandbox as a struct sbx_proc. A small fixed shell preamble runs
 * first inside the instance (the same as the Docker provider's, docker-provider.md): it enters
 * the working directory (refusing one that resolves out of the workspace), tells a missing
 * program from a failing one, reports its process id (the process group a timeout kills) and,
 * unless the caller keeps background processes, ends the group when the command ends. One
 * thread per command relays the exec's WebSockets into the proc's descriptors: socket pairs
 * for stdin, stdout and stderr, or a local pseudo-terminal whose master the caller gets (the
 * instance's terminal does the line discipline; size changes go out on the control socket).
 * The verdict of the preamble is read by the thread too; exec_start waits for it. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <termios.h>
#include <unistd.h>

#include "providers/lxd/exec.h"
#include "sandbox/session/internal.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/time.h"

#define CHUNK        65536
#define PEND_MAX     ((size_t)256 << 10) /* output read ahead of the caller, per stream */
#define MARK_MAX     32
#define EARLY_ERR    4096
#define POLL_TICK_MS 200

/* $1 workspace root, $2 working directory, $3 keep background processes (1/0), $4 $5 the
 * terminal's rows and columns, then argv. The first bytes on stdout are the verdict:
 * "S<pid>\n" started, "N" not found, "X" not executable, "C" no such directory, "P" a
 * directory out of the workspace. The shell stays until the command ends, whatever the
 * timeout's SIGTERM does to it, so the exec's status is the command's. */
static const char WRAPPER[] =
        "root=$1 dir=$2 keep=$3 rows=$4 cols=$5; shift 5\n"
        "[ -z \"$rows\" ] || stty rows \"$rows\" cols \"$cols\" 2>/dev/null\n"
        "cd -- \"$dir\" 2>/dev/null || { printf C; exit 125; }\n"
        "case \"$(pwd -P)/\" in \"$root\"/*) ;; *) printf P; exit 125;; esac\n"
        "case $1 in\n"
        "*/*) if [ ! -e \"$1\" ]; then printf N; exit 127; fi\n"
        "     if [ -d \"$1\" ] || [ ! -x \"$1\" ]; then printf X; exit 126; fi;;\n"
        "*) if ! command -v \"$1\" >/dev/null 2>&1; then printf N; exit 127; fi;;\n"
        "esac\n"
        "printf 'S%d\\n' \"$$\"\n"
        "if [ \"$keep\" = 1 ]; then exec \"$@\"; fi\n"
        "trap : TERM\n"
        "\"$@\"\n"
        "r=$?\n"
        "trap '' TERM\n"
        "kill -TERM 0 2>/dev/null\n"
        "exit \"$r\"\n";

/* Signal a process group, or the process alone when it leads none. */
static const char KILL[] = "kill -s \"$1\" -- \"-$2\" 2>/dev/null || kill -s \"$1\" \"$2\"";

struct lx_proc {
    struct sbx_proc base;
    struct sbx__lxd_server sv;
    char *inst, *id, *name;
    struct sbx__lxd_exec x;
    int out_w, err_w, in_r; /* the thread's ends (no terminal) */
    int slave;              /* terminal: the local terminal's slave end */
    int status_w, wake_r, wake_w;
    int tty, keep;
    pid_t pid;
    int64_t deadline, kill_at, grace_ms;
    pthread_t thread;
    int thread_started;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int verdict_done;
    char mark[MARK_MAX];
    size_t mark_len;
    struct sbx_buf early_err; /* stderr before the verdict, for its error */
    int done, timed_out, lost;
    char why[SBX_ERROR_MSG_MAX];
    struct sbx_exit status;
    unsigned short rows, cols;
};

/* What the thread holds while it relays. */
struct relay {
    struct sbx_buf pend[SBX__LXD_NSTREAMS]; /* OUT, ERR: for the caller; IN: nothing */
    int open[SBX__LXD_NSTREAMS];            /* the server's stream has not ended */
    int in_open;                            /* the caller's stdin has not ended */
    int broken;                             /* a stream ended without its end message */
    int stop;
};

static void buf_put(struct sbx_buf *b, const void *p, size_t n)
{
    int rc = sbx_buf_add(b, p, n, NULL);
    (void)rc;
}

static void kill_group(struct lx_proc *p, const char *sig)
{
    char num[32];
    struct sbx_error ignored = SBX_ERROR_INIT;
    if (p->pid <= 1)
        return;
    snprintf(num, sizeof(num), "%d", (int)p->pid);
    const char *argv[] = {"/bin/sh", "-c", KILL, "sh", sig, num, NULL};
    (void)sbx__lxd_exec_detached(&p->sv, p->inst, p->id, argv, &ignored);
}

static void set_verdict(struct lx_proc *p)
{
    pthread_mutex_lock(&p->lock);
    p->verdict_done = 1;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
}

/* Output of stdout before the verdict: the verdict's bytes kept in mark, the rest passed on. */
static void feed_verdict(struct lx_proc *p, struct relay *r, const uint8_t *d, size_t n)
{
    size_t i = 0;
    int have = 0;
    for (; i < n && !have; i++) {
        if (p->mark_len == 0 && d[i] != 'S') {
            p->mark[p->mark_len++] = (char)d[i];
            have = 1;
        } else if (d[i] == '\n') {
            have = 1;
        } else if (d[i] != '\r' && p->mark_len < MARK_MAX - 1) {
            p->mark[p->mark_len++] = (char)d[i];
        }
    }
    if (i < n)
        buf_put(&r->pend[SBX__LXD_OUT], d + i, n - i);
    if (have || p->mark_len >= MARK_MAX - 1) {
        p->mark[p->mark_len] = '\0';
        if (p->mark[0] == 'S')
            p->pid = (pid_t)strtol(p->mark + 1, NULL, 10);
        set_verdict(p);
    }
}

/* Read what stream i has for us while the caller keeps up. */
static void read_stream(struct lx_proc *p, struct relay *r, int i)
{
    int to = p->tty || i == SBX__LXD_OUT ? SBX__LXD_OUT : SBX__LXD_ERR;
    struct sbx_error e = SBX_ERROR_INIT;
    struct sbx__ws_msg m;
    int rc;
    while (r->open[i] && r->pend[to].len < PEND_MAX &&
           (rc = sbx__lxd_conn_next(&p->x.conn[i], &m, &e)) == 1) {
        if (m.opcode == SBX__WS_CLOSE || (m.opcode == SBX__WS_TEXT && m.len == 0)) {
            r->open[i] = 0;
        } else if (m.opcode == SBX__WS_BINARY || m.opcode == SBX__WS_TEXT) {
            if (to == SBX__LXD_OUT && !p->verdict_done)
                feed_verdict(p, r, m.data, m.len);
            else
                buf_put(&r->pend[to], m.data, m.len);
            if (to == SBX__LXD_ERR && !p->verdict_done && p->early_err.len < EARLY_ERR)
                buf_put(&p->early_err, m.data, m.len);
        }
    }
    if (r->open[i] && (rc < 0 || p->x.conn[i].eof)) {
        /* Cut without the end of the stream: the server (or its member) went away. */
        r->open[i] = 0;
        r->broken = 1;
        if (rc < 0)
            snprintf(p->why, sizeof(p->why), "%s", e.msg);
    }
}

/* Write what we can of *buf to fd; a reader that went away makes the rest dropped. */
static void flush_to(int fd, int sock, struct sbx_buf *buf)
{
    while (buf->len && fd >= 0) {
        ssize_t w = sock ? send(fd, buf->data, buf->len, MSG_NOSIGNAL | MSG_DONTWAIT)
                         : write(fd, buf->data, buf->len);
        if (w > 0) {
            sbx_buf_consume(buf, (size_t)w);
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        sbx_buf_reset(buf);
    }
}

/* The caller's input to the server: stdin's bytes, then (no terminal) its end. */
static void pump_input(struct lx_proc *p, struct relay *r)
{
    struct sbx__lxd_conn *c = &p->x.conn[SBX__LXD_IN];
    int src = p->tty ? p->slave : p->in_r;
    char buf[CHUNK];
    struct sbx_error e = SBX_ERROR_INIT;
    while (r->in_open && src >= 0 && c->ws.out.len < CHUNK && !c->eof) {
        ssize_t n = read(src, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n > 0) {
            if (sbx__ws_send(&c->ws, SBX__WS_BINARY, buf, (size_t)n, &e) < 0)
                r->in_open = 0;
            continue;
        }
        r->in_open = 0;
        /* The caller closed stdin: so does the command's (a terminal has no such end). */
        if (!p->tty)
            (void)sbx__ws_send(&c->ws, SBX__WS_TEXT, "", 0, &e);
    }
}

/* Deadlines: SIGTERM to the group at the timeout, SIGKILL after the grace. */
static int timer_step(struct lx_proc *p)
{
    int64_t now = sbx_time_mono_ns();
    if (p->kill_at != INT64_MAX && now >= p->kill_at) {
        kill_group(p, "KILL");
        p->kill_at = INT64_MAX;
    } else if (p->deadline != INT64_MAX && now >= p->deadline) {
        pthread_mutex_lock(&p->lock);
        p->timed_out = 1;
        pthread_mutex_unlock(&p->lock);
        kill_group(p, "TERM");
        p->deadline = INT64_MAX;
        p->kill_at = sbx_deadline_after_ms(p->grace_ms);
    }
    int64_t next = p->kill_at < p->deadline ? p->kill_at : p->deadline;
    int ms = sbx_deadline_poll_ms(next);
    if (p->tty)
        ms = ms < 0 || ms > POLL_TICK_MS ? POLL_TICK_MS : ms;
    return ms;
}

/* A size change of the local terminal, sent to the instance's on the control socket. */
static void tty_sync_size(struct lx_proc *p)
{
    struct winsize ws;
    if (ioctl(p->slave, TIOCGWINSZ, &ws) < 0 || (ws.ws_row == p->rows && ws.ws_col == p->cols) ||
        !ws.ws_row || !ws.ws_col)
        return;
    p->rows = ws.ws_row;
    p->cols = ws.ws_col;
    char msg[160];
    int n = snprintf(
            msg, sizeof(msg),
            "{\"command\":\"window-resize\",\"args\":{\"width\":\"%u\",\"height\":\"%u\"}}",
            ws.ws_col, ws.ws_row);
    struct sbx_error ignored = SBX_ERROR_INIT;
    (void)sbx__ws_send(&p->x.conn[SBX__LXD_CTL].ws, SBX__WS_TEXT, msg, (size_t)n, &ignored);
}

/* Everything the server may still send on the control socket (nothing sbx needs) is read so
 * that its pings are answered. */
static void read_control(struct lx_proc *p)
{
    struct sbx__ws_msg m;
    struct sbx_error ignored = SBX_ERROR_INIT;
    while (sbx__lxd_conn_next(&p->x.conn[SBX__LXD_CTL], &m, &ignored) == 1)
        ;
}

/* The descriptors to wait on; returns how many. */
static int poll_set(struct lx_proc *p, struct relay *r, int out_fd, int err_fd, struct pollfd *pf,
                    int *flush_pending)
{
    int n = 0;
    for (int i = 0; i < SBX__LXD_NSTREAMS; i++) {
        if (!p->x.have[i] || p->x.conn[i].eof)
            continue;
        int to = p->tty || i != SBX__LXD_ERR ? SBX__LXD_OUT : SBX__LXD_ERR;
        short ev = 0;
        if ((i == SBX__LXD_CTL || (r->open[i] && r->pend[to].len < PEND_MAX)))
            ev |= POLLIN;
        if (p->x.conn[i].ws.out.len)
            ev |= POLLOUT;
        if ((ev & POLLIN) && p->x.conn[i].read_more)
            *flush_pending = 1;
        pf[n++] = (struct pollfd){.fd = p->x.conn[i].fd, .events = ev};
    }
    if (r->pend[SBX__LXD_OUT].len)
        pf[n++] = (struct pollfd){.fd = out_fd, .events = POLLOUT};
    if (r->pend[SBX__LXD_ERR].len && err_fd >= 0)
        pf[n++] = (struct pollfd){.fd = err_fd, .events = POLLOUT};
    int src = p->tty ? p->slave : p->in_r;
    if (r->in_open && src >= 0 && p->x.conn[SBX__LXD_IN].ws.out.len < CHUNK)
        pf[n++] = (struct pollfd){.fd = src, .events = POLLIN};
    pf[n++] = (struct pollfd){.fd = p->wake_r, .events = POLLIN};
    return n;
}

static void finish(struct lx_proc *p, struct relay *r)
{
    int code = -1;
    struct sbx_error e = SBX_ERROR_INIT;
    int lost = sbx__lxd_exec_status(&p->sv, p->x.op, &code, &e) < 0;
    pthread_mutex_lock(&p->lock);
    p->status = (struct sbx_exit){.code = code};
    p->lost = lost;
    if (lost && !p->why[0])
        snprintf(p->why, sizeof(p->why), "%s", e.msg);
    else if (lost && r->broken && e.msg[0])
        snprintf(p->why, sizeof(p->why), "%s", e.msg);
    if (p->timed_out && code > 128 && code < 128 + 65) {
        /* The preamble shell reports a killed command as 128 + signal. */
        p->status.timed_out = 1;
        p->status.signal = code - 128;
        p->status.code = -1;
    } else if (p->timed_out) {
        p->status.timed_out = 1;
    }
    p->done = 1;
    pthread_mutex_unlock(&p->lock);
    set_verdict(p);
    char c = 'x';
    while (write(p->status_w, &c, 1) < 0 && errno == EINTR)
        ;
}

static void relay_loop(struct lx_proc *p, struct relay *r, int out_fd, int err_fd)
{
    while (!r->stop) {
        if (p->tty)
            tty_sync_size(p);
        flush_to(out_fd, !p->tty, &r->pend[SBX__LXD_OUT]);
        flush_to(err_fd, 1, &r->pend[SBX__LXD_ERR]);
        if (p->tty)
            read_stream(p, r, SBX__LXD_IN);
        else
            for (int i = SBX__LXD_OUT; i <= SBX__LXD_ERR; i++)
                read_stream(p, r, i);
        read_control(p);
        int any_open =
                p->tty ? r->open[SBX__LXD_IN] : r->open[SBX__LXD_OUT] || r->open[SBX__LXD_ERR];
        if (!any_open && !r->pend[SBX__LXD_OUT].len && !r->pend[SBX__LXD_ERR].len)
            break;
        if (!any_open && !p->verdict_done)
            set_verdict(p);
        pump_input(p, r);
        struct sbx_error ignored = SBX_ERROR_INIT;
        for (int i = 0; i < SBX__LXD_NSTREAMS; i++)
            if (p->x.have[i])
                (void)sbx__lxd_conn_flush(&p->x.conn[i], &ignored);
        struct pollfd pf[8];
        int more = 0;
        int n = poll_set(p, r, out_fd, err_fd, pf, &more);
        int ms = timer_step(p);
        int got = poll(pf, (nfds_t)n, more ? 0 : ms);
        if (got < 0 && errno != EINTR)
            break;
        if (got > 0 && pf[n - 1].revents)
            r->stop = 1;
    }
}

static void *relay_main(void *arg)
{
    struct lx_proc *p = arg;
    struct relay r = {.in_open = p->tty || p->in_r >= 0};
    for (int i = 0; i < SBX__LXD_NSTREAMS; i++)
        sbx_buf_init(&r.pend[i], SBX_BUF_NOLIMIT);
    r.open[SBX__LXD_IN] = p->tty;
    r.open[SBX__LXD_OUT] = r.open[SBX__LXD_ERR] = !p->tty;
    int out_fd = p->tty ? p->slave : p->out_w;
    int err_fd = p->tty ? -1 : p->err_w >= 0 ? p->err_w : p->out_w;
    sbx__set_nonblock(out_fd);
    if (err_fd >= 0)
        sbx__set_nonblock(err_fd);
    if (!p->tty && p->in_r >= 0)
        sbx__set_nonblock(p->in_r);
    if (!p->tty && p->in_r < 0) {
        /* No input wanted: the command's stdin ends at once. */
        struct sbx_error ignored = SBX_ERROR_INIT;
        (void)sbx__ws_send(&p->x.conn[SBX__LXD_IN].ws, SBX__WS_TEXT, "", 0, &ignored);
    }
    relay_loop(p, &r, out_fd, err_fd);
    if (!r.stop && p->tty) {
        /* The terminal's output ended: LXD ends the exec once its input ends too. */
        struct sbx_error ignored = SBX_ERROR_INIT;
        struct sbx__lxd_conn *c = &p->x.conn[SBX__LXD_IN];
        if (sbx__ws_send(&c->ws, SBX__WS_TEXT, "", 0, &ignored) == 0 &&
            sbx__ws_close(&c->ws, SBX__WS_CLOSE_NORMAL, NULL, &ignored) == 0)
            (void)sbx__lxd_conn_drain(c, 2000, &ignored);
    }
    for (int i = 0; i < SBX__LXD_NSTREAMS; i++)
        sbx_buf_release(&r.pend[i]);
    /* EOF for the caller's reads: the terminal's slave, or the output sockets. */
    if (p->tty)
        sbx_fd_close(&p->slave);
    sbx_fd_close(&p->out_w);
    sbx_fd_close(&p->err_w);
    if (!r.stop)
        finish(p, &r);
    else
        set_verdict(p);
    return NULL;
}

/* ---------------------------------------------------------------------------------------------
 * The proc */

static int proc_wait(struct sbx_proc *bp, int64_t timeout_ms, struct sbx_exit *out,
                     struct sbx_error *err)
{
    struct lx_proc *p = (struct lx_proc *)bp;
    int64_t deadline = sbx_deadline_after_ms(timeout_ms);
    for (;;) {
        pthread_mutex_lock(&p->lock);
        int done = p->done, lost = p->lost;
        struct sbx_exit st = p->status;
        pthread_mutex_unlock(&p->lock);
        if (done && lost)
            return sbx_error_set(err, SBX_E_SANDBOX, 0,
                                 "the exit status of '%s' in sandbox '%s' is unknown: %s", p->name,
                                 p->id, p->why[0] ? p->why : "the exec was cut");
        if (done) {
            *out = st;
            return 0;
        }
        struct pollfd pf = {.fd = p->base.status_fd, .events = POLLIN};
        int ms = sbx_deadline_poll_ms(deadline);
        if (timeout_ms >= 0 && ms == 0)
            return sbx_error_set(err, SBX_E_TIMEOUT, 0, "'%s' is still running", p->name);
        if (poll(&pf, 1, ms) < 0 && errno != EINTR)
            return sbx_error_errno(err, errno, "poll");
    }
}

static void proc_free(struct sbx_proc *bp)
{
    struct lx_proc *p = (struct lx_proc *)bp;
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    int done = p->done;
    pthread_mutex_unlock(&p->lock);
    if (!done && p->pid > 1)
        kill_group(p, "KILL");
    if (p->thread_started) {
        char c = 'q';
        while (write(p->wake_w, &c, 1) < 0 && errno == EINTR)
            ;
        pthread_join(p->thread, NULL);
    }
    /* Closing the control connection ends what is left of the command (LXD kills it). */
    sbx__lxd_exec_release(&p->x);
    if (p->base.tty) {
        sbx_fd_close(&p->base.stdout_fd);
        p->base.stdin_fd = -1;
    } else {
        sbx_fd_close(&p->base.stdout_fd);
        sbx_fd_close(&p->base.stderr_fd);
        sbx_fd_close(&p->base.stdin_fd);
    }
    int *fds[] = {&p->base.status_fd, &p->status_w, &p->wake_r, &p->wake_w,
                  &p->out_w,          &p->err_w,    &p->in_r,   &p->slave};
    for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
        sbx_fd_close(fds[i]);
    sbx_buf_release(&p->early_err);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->cond);
    sbx__lxd_server_release(&p->sv);
    free(p->inst);
    free(p->id);
    free(p->name);
    free(p);
}

static const struct sbx_proc_ops proc_ops = {proc_wait, proc_free};

static struct lx_proc *proc_new(struct sbx__lxd_session *s, const struct sbx_exec_spec *spec)
{
    struct lx_proc *p = sbx_xcalloc(1, sizeof(*p));
    int tty = !!(spec->flags & SBX_EXEC_TTY);
    sbx_buf_init(&p->early_err, SBX_BUF_NOLIMIT);
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->cond, NULL);
    sbx__lxd_exec_init(&p->x);
    p->base = (struct sbx_proc){.stdout_fd = -1,
                                .stderr_fd = -1,
                                .stdin_fd = -1,
                                .status_fd = -1,
                                .tty = tty,
                                .ops = &proc_ops};
    p->out_w = p->err_w = p->in_r = p->slave = p->status_w = p->wake_r = p->wake_w = -1;
    p->tty = tty;
    p->keep = !!(spec->flags & SBX_EXEC_KEEP_BACKGROUND);
    p->deadline = spec->timeout_ms > 0 ? sbx_deadline_after_ms(spec->timeout_ms) : INT64_MAX;
    p->kill_at = INT64_MAX;
    p->grace_ms = spec->kill_grace_ms > 0 ? spec->kill_grace_ms : SBX_EXEC_DEFAULT_GRACE_MS;
    p->name = sbx_xstrdup(spec->argv ? spec->argv[0] : "/bin/sh");
    p->inst = sbx_xstrdup(s->name);
    p->id = sbx_xstrdup(s->base.id);
    p->rows = spec->rows ? spec->rows : 24;
    p->cols = spec->cols ? spec->cols : 80;
    sbx__lxd_server_copy(&p->sv, &s->sv);
    return p;
}

/* The exec's command: (setsid, so that the preamble leads a process group the timeout can
 * kill) the preamble with its arguments, then the command. */
static json_t *wrapped_cmd(const struct sbx__lxd_session *s, const struct lx_proc *p,
                           const struct sbx_exec_spec *spec, const char *cwd)
{
    char *dir = cwd[0] ? sbx_xasprintf("%s/%s", s->base.root, cwd) : sbx_xstrdup(s->base.root);
    char rows[8] = "", cols[8] = "";
    json_t *cmd = json_array();
    if (!p->tty && s->setsid)
        sbx_json_append(cmd, sbx_json_str("setsid"));
    const char *head[] = {"/bin/sh", "-c", WRAPPER, "sbx", s->base.root, dir, p->keep ? "1" : "0"};
    for (size_t i = 0; i < sizeof(head) / sizeof(head[0]); i++)
        sbx_json_append(cmd, sbx_json_str(head[i]));
    free(dir);
    if (p->tty) {
        snprintf(rows, sizeof(rows), "%u", p->rows);
        snprintf(cols, sizeof(cols), "%u", p->cols);
    }
    sbx_json_append(cmd, sbx_json_str(rows));
    sbx_json_append(cmd, sbx_json_str(cols));
    if (spec->argv) {
        for (const char *const *a = spec->argv; *a; a++)
            sbx_json_append(cmd, sbx_json_str(*a));
    } else {
        sbx_json_append(cmd, sbx_json_str("/bin/sh"));
        sbx_json_append(cmd, sbx_json_str("-c"));
        sbx_json_append(cmd, sbx_json_str(spec->command));
    }
    return cmd;
}

/* The error for a verdict other than "S<pid>": the preamble's letter, or what the command
 * said when LXD could not run the preamble at all. */
static int verdict_error(struct lx_proc *p, const char *cwd, struct sbx_error *err)
{
    const char *mark = p->mark;
    if (p->mark_len == 0 || (mark[0] != 'S' && p->mark_len != 1)) {
        const char *why = p->early_err.len ? p->early_err.data : mark;
        if (p->lost)
            why = p->why;
        return sbx_error_set(err, p->lost ? SBX_E_SANDBOX : SBX_E_EXEC, 0,
                             "cannot run '%s' in sandbox '%s': %.*s", p->name, p->id,
                             (int)strcspn(why, "\r\n"), why[0] ? why : "it ended at once");
    }
    if (mark[0] == 'N')
        return sbx_error_set(err, SBX_E_EXEC, ENOENT, "command '%s' not found", p->name);
    if (mark[0] == 'X')
        return sbx_error_set(err, SBX_E_EXEC, EACCES, "cannot run '%s': %s", p->name,
                             strerror(EACCES));
    if (mark[0] == 'C')
        return sbx_error_set(err, SBX_E_NOTFOUND, ENOENT,
                             "working directory '%s' is not a directory of the sandbox",
                             cwd[0] ? cwd : ".");
    return sbx_error_set(err, SBX_E_PERM, 0, "working directory '%s' leads out of the workspace",
                         cwd);
}

/* With a terminal: a local pseudo-terminal whose master the caller gets (stdin and stdout)
 * and whose raw slave end the relay copies to and from the instance's terminal. */
static int open_local_tty(struct lx_proc *p, struct sbx_error *err)
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
    sbx__set_nonblock(p->slave);
    return 0;
}

/* Without a terminal: a socket pair per stream (stderr unless merged, stdin if wanted). */
static int open_local_sockets(struct lx_proc *p, int merge_stderr, int want_in,
                              struct sbx_error *err)
{
    int po[2] = {-1, -1}, pe[2] = {-1, -1}, pi[2] = {-1, -1};
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, po) < 0 ||
        (!merge_stderr && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pe) < 0) ||
        (want_in && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pi) < 0)) {
        int rc = sbx_error_errno(err, errno, "socketpair");
        for (int i = 0; i < 2; i++) {
            sbx_fd_close(&po[i]);
            sbx_fd_close(&pe[i]);
            sbx_fd_close(&pi[i]);
        }
        return rc;
    }
    p->base.stdout_fd = po[0];
    p->out_w = po[1];
    p->base.stderr_fd = pe[0];
    p->err_w = pe[1];
    p->base.stdin_fd = pi[0];
    p->in_r = pi[1];
    (void)shutdown(p->base.stdout_fd, SHUT_WR);
    if (p->base.stderr_fd >= 0)
        (void)shutdown(p->base.stderr_fd, SHUT_WR);
    return 0;
}

static int pick_user(struct sbx__lxd_session *s, const char *want,
                     const struct sbx__lxd_account **out, struct sbx_error *err)
{
    if (!want) {
        *out = &s->owner;
        return 0;
    }
    for (size_t i = 0; i < s->n_users; i++)
        if (strcmp(s->users[i].name, want) == 0) {
            *out = &s->users[i];
            return 0;
        }
    return sbx_error_set(err, SBX_E_NOTFOUND, 0, "no user '%s' in the sandbox's manifest", want);
}

/* Wait for the thread's verdict (bounded by the request timeout). */
static int wait_verdict(struct lx_proc *p, struct sbx_error *err)
{
    int64_t deadline = sbx_deadline_after_ms(p->sv.timeout_ms);
    pthread_mutex_lock(&p->lock);
    while (!p->verdict_done) {
        int ms = sbx_deadline_poll_ms(deadline);
        if (ms == 0)
            break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += ms / 1000;
        ts.tv_nsec += (long)(ms % 1000) * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&p->cond, &p->lock, &ts);
    }
    int done = p->verdict_done;
    pthread_mutex_unlock(&p->lock);
    if (!done)
        return sbx_error_set(err, SBX_E_TIMEOUT, 0, "'%s' did not start in time", p->name);
    return 0;
}

static int start_thread(struct lx_proc *p, const struct sbx_exec_spec *spec, int want_in,
                        struct sbx_error *err)
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
    int rc = p->tty ? open_local_tty(p, err)
                    : open_local_sockets(p, !!(spec->flags & SBX_EXEC_MERGE_STDERR), want_in, err);
    if (rc < 0)
        return rc;
    if (pthread_create(&p->thread, NULL, relay_main, p) != 0)
        return sbx_error_set(err, SBX_E_SYS, 0, "cannot start a thread");
    p->thread_started = 1;
    return 0;
}

int sbx__lxd_exec_start(struct sbx_session *bs, const struct sbx_exec_spec *spec, const char *cwd,
                        struct sbx_proc **out, struct sbx_error *err)
{
    struct sbx__lxd_session *s = (struct sbx__lxd_session *)bs;
    struct lx_proc *p = proc_new(s, spec);
    int want_in = p->tty || (spec->flags & SBX_EXEC_STDIN);
    const struct sbx__lxd_account *who = NULL;
    json_t *cmd = NULL;
    int rc;
    if ((rc = pick_user(s, spec->user, &who, err)) < 0)
        goto out;
    cmd = wrapped_cmd(s, p, spec, cwd);
    /* The account's own HOME and USER, under what the caller sets. */
    struct sbx_strv env;
    sbx_strv_init(&env);
    sbx_strv_push_take(&env, sbx_xasprintf("USER=%s", who->name));
    if (who->home)
        sbx_strv_push_take(&env, sbx_xasprintf("HOME=%s", who->home));
    for (const char *const *e = spec->env; e && *e; e++)
        sbx_strv_push(&env, *e);
    struct sbx__lxd_exec_args a = {.argv = cmd,
                                   .env = (const char *const *)env.v,
                                   .uid = who->uid,
                                   .gid = who->gid,
                                   .tty = p->tty,
                                   .rows = p->rows,
                                   .cols = p->cols,
                                   .streams = 1};
    rc = sbx__lxd_exec_begin(&p->sv, p->inst, p->id, &a, &p->x, err);
    sbx_strv_release(&env);
    if (rc < 0 || (rc = start_thread(p, spec, want_in, err)) < 0 || (rc = wait_verdict(p, err)) < 0)
        goto out;
    if (p->mark[0] != 'S' || p->mark_len < 2) {
        rc = verdict_error(p, cwd, err);
        goto out;
    }
    p->base.pid = p->pid;
    *out = &p->base;
    p = NULL;
out:
    if (p) {
        pthread_mutex_lock(&p->lock);
        int was_done = p->done;
        p->done = 1; /* nothing left to kill: the preamble ended or never ran */
        pthread_mutex_unlock(&p->lock);
        (void)was_done;
        proc_free(&p->base);
    }
    json_decref(cmd);
    return rc;
}
