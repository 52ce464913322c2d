/* Commands in a Docker sandbox: one engine exec per command, its connection hijacked. A small
 * fixed shell preamble (WRAPPER) runs first inside the container: it enters the working
 * directory (refusing one that resolves out of the workspace), tells a missing program from a
 * failing one, reports its process id (the process group the timeout kills) and, unless the
 * caller keeps background processes, ends the group when the command ends. Without a
 * terminal a thread per command splits the multiplexed stream into the proc's sockets and
 * feeds stdin; with one, the thread relays between a local pseudo-terminal (whose master the
 * caller gets, so resizing works as for local) and the engine's terminal. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <termios.h>
#include <unistd.h>

#include "providers/docker/docker.h"
#include "sandbox/session/internal.h"
#include "sandbox/wire/mux.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/strv.h"
#include "sbx/time.h"

#define CHUNK        65536
#define MARK_MAX     32
#define POLL_TICK_MS 200
#define DRAIN_MS     500
#define EXIT_WAIT_MS 5000
#define PRE_ERR_MAX  4096

/* The shell stays until the command ends, whatever the timeout's SIGTERM does to it ("trap :"
 * is reset to the default in the command; an ignored signal would be inherited): the exec's
 * status is the command's, and the stream lasts as long as the command (podman ends it when
 * this shell exits).
 * $1 workspace root, $2 working directory, $3 keep background processes (1/0), $4 $5 the
 * terminal's rows and columns (set before the command runs: a resize through the API could
 * come after it looked), then argv.
 * The first bytes on stdout are the verdict: "S<pid>\n" started, "N" not found, "X" not
 * executable, "C" no such directory, "P" directory out of the workspace. */
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

struct dk_proc {
    struct sbx_proc base;
    struct sbx__dk_engine eng;
    char *container;
    char *eid;
    char *name;             /* argv[0], for messages */
    int sock;               /* the hijacked connection */
    int out_w, err_w, in_r; /* thread's ends (non-tty) */
    int slave;              /* tty: the local terminal's slave end */
    int status_w;
    int wake_r, wake_w;
    int tty, keep;
    pid_t pid;
    int64_t deadline, kill_at, grace_ms;
    struct sbx_buf pre, pre_err; /* output that came with the verdict, delivered first */
    struct sbx__mux dm;          /* the stream's parser, from the verdict on to the relay */
    pthread_t thread;
    int thread_started;
    pthread_mutex_t lock;
    int done, timed_out, lost;
    int detached; /* left running in the container when the handle goes */
    struct sbx_exit status;
    unsigned short rows, cols;
};

void sbx__dk_run_init(struct sbx__dk_run *r, size_t max)
{
    r->code = -1;
    sbx_buf_init(&r->out, max);
    sbx_buf_init(&r->err, max);
}

void sbx__dk_run_release(struct sbx__dk_run *r)
{
    sbx_buf_release(&r->out);
    sbx_buf_release(&r->err);
}

/* Into a buffer without a limit: sbx_buf_add cannot fail then (allocation failure aborts). */
static void buf_put(struct sbx_buf *b, const void *p, size_t n)
{
    int rc = sbx_buf_add(b, p, n, NULL);
    (void)rc;
}

static json_t *strv_json(const char *const *v)
{
    json_t *a = json_array();
    for (; v && *v; v++)
        sbx_json_append(a, sbx_json_str(*v));
    return a;
}

static int exec_create(const struct sbx__dk_engine *e, const char *container, json_t *cmd,
                       const char *const *env, const char *user, int tty, int attach_in,
                       int attach_out, char **out, struct sbx_error *err)
{
    json_t *body = json_object(), *reply = NULL;
    sbx_json_set(body, "AttachStdin", json_boolean(attach_in));
    sbx_json_set(body, "AttachStdout", json_boolean(attach_out));
    sbx_json_set(body, "AttachStderr", json_boolean(attach_out));
    sbx_json_set(body, "Tty", json_boolean(tty));
    sbx_json_set(body, "Cmd", cmd);
    if (env && *env)
        sbx_json_set(body, "Env", strv_json(env));
    if (user && user[0])
        sbx_json_set(body, "User", sbx_json_str(user));
    char *path = sbx_xasprintf("/containers/%s/exec", container);
    int rc = sbx__dk_json(e, "POST", path, body, NULL, &reply, err);
    const char *id = json_string_value(json_object_get(reply, "Id"));
    if (rc == 0 && !id)
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "the Docker engine made an exec without an id");
    if (rc == 0)
        *out = sbx_xstrdup(id);
    if (rc == -SBX_E_NOTFOUND || rc == -SBX_E_EXISTS) {
        /* 404: no such container; 409: it is not running. */
        char why[SBX_ERROR_MSG_MAX];
        snprintf(why, sizeof(why), "%s", err ? err->msg : "");
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "the container '%.12s' is gone or stopped: %s",
                           container, why);
    }
    free(path);
    json_decref(body);
    json_decref(reply);
    return rc;
}

/* ExitCode of exec eid once it no longer runs (the stream can end a moment before). */
static int exec_exit_code(const struct sbx__dk_engine *e, const char *eid, int *code,
                          struct sbx_error *err)
{
    char *path = sbx_xasprintf("/exec/%s/json", eid);
    int64_t deadline = sbx_deadline_after_ms(EXIT_WAIT_MS);
    int rc;
    for (;;) {
        json_t *j = NULL;
        rc = sbx__dk_json(e, "GET", path, NULL, NULL, &j, err);
        int running = json_is_true(json_object_get(j, "Running"));
        json_t *c = json_object_get(j, "ExitCode");
        if (rc == 0 && !running && json_is_integer(c)) {
            *code = (int)json_integer_value(c);
            json_decref(j);
            break;
        }
        json_decref(j);
        if (rc < 0)
            break;
        if (sbx_deadline_poll_ms(deadline) == 0) {
            rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "the engine reports no exit status");
            break;
        }
        sbx_sleep_ms(20);
    }
    free(path);
    return rc;
}

static int exec_running(const struct sbx__dk_engine *e, const char *eid)
{
    char *path = sbx_xasprintf("/exec/%s/json", eid);
    json_t *j = NULL;
    struct sbx_error ignored = SBX_ERROR_INIT;
    int running = sbx__dk_json(e, "GET", path, NULL, NULL, &j, &ignored) == 0 &&
                  json_is_true(json_object_get(j, "Running"));
    json_decref(j);
    free(path);
    return running;
}

/* Signal process group pid in the container, from a second exec run as root. */
static void kill_group(const struct sbx__dk_engine *e, const char *container, pid_t pid,
                       const char *sig)
{
    char num[32], flag[16];
    char *eid = NULL;
    struct sbx_error ignored = SBX_ERROR_INIT;
    if (pid <= 1)
        return;
    snprintf(num, sizeof(num), "-%d", (int)pid);
    snprintf(flag, sizeof(flag), "-%s", sig);
    const char *argv[] = {"kill", flag, num, NULL};
    if (exec_create(e, container, strv_json(argv), NULL, "0", 0, 0, 0, &eid, &ignored) == 0) {
        json_t *body = json_pack("{s:b}", "Detach", 1);
        char *path = sbx_xasprintf("/exec/%s/start", eid);
        int code;
        /* A detached start returns before kill has run (podman): wait until it has, so the
         * group is gone when the caller goes on (a timeout reported, a cancel returned). */
        if (sbx__dk_json(e, "POST", path, body, NULL, NULL, &ignored) == 0)
            (void)exec_exit_code(e, eid, &code, &ignored);
        free(path);
        json_decref(body);
    }
    free(eid);
}

static int start_hijack(const struct sbx__dk_engine *e, const char *eid, int tty, int *fd,
                        struct sbx_buf *leftover, struct sbx_error *err)
{
    json_t *body = json_pack("{s:b,s:b}", "Detach", 0, "Tty", tty);
    char *path = sbx_xasprintf("/exec/%s/start", eid);
    int rc = sbx__dk_hijack(e, path, body, fd, leftover, err);
    free(path);
    json_decref(body);
    return rc;
}

static ssize_t read_some(int fd, void *buf, size_t n)
{
    for (;;) {
        ssize_t r = read(fd, buf, n);
        if (r >= 0 || errno != EINTR)
            return r;
    }
}

int sbx__dk_exec_run(struct sbx__dk_session *s, const char *const *argv, const void *input,
                     size_t input_len, struct sbx__dk_run *out, struct sbx_error *err)
{
    char *eid = NULL;
    int fd = -1, rc;
    struct sbx_buf rbuf;
    struct sbx__mux dm;
    sbx_buf_init(&rbuf, SBX_BUF_NOLIMIT);
    sbx__mux_init(&dm, 0);
    if ((rc = exec_create(&s->eng, s->container, strv_json(argv), NULL, "0", 0, input != NULL, 1,
                          &eid, err)) < 0 ||
        (rc = start_hijack(&s->eng, eid, 0, &fd, &rbuf, err)) < 0)
        goto out;
    if (input) {
        if ((rc = sbx_fd_write_all(fd, input, input_len, err)) < 0)
            goto out;
    }
    (void)shutdown(fd, SHUT_WR);
    int64_t deadline = sbx_deadline_after_ms(s->eng.timeout_ms);
    uint8_t buf[CHUNK];
    size_t n = rbuf.len, off = 0;
    const uint8_t *p = (const uint8_t *)rbuf.data;
    for (;;) {
        while (off < n) {
            int stream;
            const uint8_t *pl;
            size_t plen;
            long used = sbx__mux_feed(&dm, p + off, n - off, &stream, &pl, &plen, err);
            if (used < 0) {
                rc = (int)used;
                goto out;
            }
            off += (size_t)used;
            struct sbx_buf *dst = stream == 2 ? &out->err : &out->out;
            if (plen && (rc = sbx_buf_add(dst, pl, plen, err)) < 0) {
                sbx_error_prefix(err, "output of '%s'", argv[0]);
                goto out;
            }
        }
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int left = sbx_deadline_poll_ms(deadline);
        if (left == 0) {
            rc = sbx_error_set(err, SBX_E_TIMEOUT, 0, "'%s' in the container took too long",
                               argv[0]);
            goto out;
        }
        int r = poll(&pf, 1, left);
        if (r < 0 && errno != EINTR) {
            rc = sbx_error_errno(err, errno, "poll");
            goto out;
        }
        if (r <= 0)
            continue;
        ssize_t got = read_some(fd, buf, sizeof(buf));
        if (got <= 0)
            break;
        p = buf;
        n = (size_t)got;
        off = 0;
    }
    rc = exec_exit_code(&s->eng, eid, &out->code, err);
out:
    sbx_fd_close(&fd);
    sbx_buf_release(&rbuf);
    free(eid);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * The relay thread */

static void finish(struct dk_proc *p)
{
    int code = -1;
    struct sbx_error ignored = SBX_ERROR_INIT;
    int lost = exec_exit_code(&p->eng, p->eid, &code, &ignored) < 0;
    pthread_mutex_lock(&p->lock);
    p->status = (struct sbx_exit){.code = code};
    p->lost = lost;
    if (p->timed_out) {
        p->status.timed_out = 1;
        /* The preamble shell reports a killed command as 128 + signal. */
        if (code > 128 && code < 128 + 65) {
            p->status.signal = code - 128;
            p->status.code = -1;
        }
    }
    p->done = 1;
    pthread_mutex_unlock(&p->lock);
    char c = 'x';
    ssize_t w;
    do
        w = write(p->status_w, &c, 1);
    while (w < 0 && errno == EINTR);
}

/* Deadlines: SIGTERM to the group at the timeout, SIGKILL after the grace. */
static int timer_step(struct dk_proc *p)
{
    int64_t now = sbx_time_mono_ns();
    if (p->kill_at != INT64_MAX && now >= p->kill_at) {
        kill_group(&p->eng, p->container, p->pid, "KILL");
        p->kill_at = INT64_MAX;
    } else if (p->deadline != INT64_MAX && now >= p->deadline) {
        pthread_mutex_lock(&p->lock);
        p->timed_out = 1;
        pthread_mutex_unlock(&p->lock);
        kill_group(&p->eng, p->container, p->pid, "TERM");
        p->deadline = INT64_MAX;
        p->kill_at = sbx_deadline_after_ms(p->grace_ms);
    }
    int64_t next = p->kill_at < p->deadline ? p->kill_at : p->deadline;
    int ms = sbx_deadline_poll_ms(next);
    if (p->tty || p->keep)
        ms = ms < 0 || ms > POLL_TICK_MS ? POLL_TICK_MS : ms;
    return ms;
}

/* Forward a terminal size change of the local pseudo-terminal to the engine's. */
static void tty_sync_size(struct dk_proc *p)
{
    struct winsize ws;
    if (ioctl(p->slave, TIOCGWINSZ, &ws) < 0 || (ws.ws_row == p->rows && ws.ws_col == p->cols) ||
        !ws.ws_row || !ws.ws_col)
        return;
    p->rows = ws.ws_row;
    p->cols = ws.ws_col;
    char *path = sbx_xasprintf("/exec/%s/resize?h=%u&w=%u", p->eid, ws.ws_row, ws.ws_col);
    struct sbx_error ignored = SBX_ERROR_INIT;
    (void)sbx__dk_json(&p->eng, "POST", path, NULL, NULL, NULL, &ignored);
    free(path);
}

/* Write what we can of *buf to fd; a reader that went away makes the rest dropped. */
static void flush_to(int fd, int sock, struct sbx_buf *buf)
{
    while (buf->len) {
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

static void *relay_main(void *arg)
{
    struct dk_proc *p = arg;
    struct sbx_buf pend_out, pend_err, pend_in;
    uint8_t buf[CHUNK];
    int sock_open = 1, in_open = !p->tty && p->in_r >= 0, stop = 0;
    sbx_buf_init(&pend_out, SBX_BUF_NOLIMIT);
    sbx_buf_init(&pend_err, SBX_BUF_NOLIMIT);
    sbx_buf_init(&pend_in, SBX_BUF_NOLIMIT);
    struct sbx_error ignored = SBX_ERROR_INIT;
    buf_put(&pend_out, p->pre.data, p->pre.len);
    buf_put(p->err_w >= 0 ? &pend_err : &pend_out, p->pre_err.data, p->pre_err.len);
    int out_fd = p->tty ? p->slave : p->out_w;
    int err_fd = p->tty ? -1 : p->err_w >= 0 ? p->err_w : p->out_w;
    sbx__set_nonblock(p->sock);
    sbx__set_nonblock(out_fd);
    if (err_fd >= 0)
        sbx__set_nonblock(err_fd);
    if (in_open)
        sbx__set_nonblock(p->in_r);
    int64_t next_check = sbx_time_mono_ns(), drain_until = INT64_MAX;
    while (!stop) {
        if (p->tty)
            tty_sync_size(p);
        flush_to(out_fd, !p->tty, &pend_out);
        if (err_fd >= 0)
            flush_to(err_fd, 1, &pend_err);
        if (!sock_open && !pend_out.len && !pend_err.len)
            break;
        struct pollfd pf[5];
        int n = 0, is = -1, ii = -1, iw;
        if (sock_open) {
            short ev = 0;
            if (!pend_out.len && !pend_err.len)
                ev |= POLLIN;
            if (pend_in.len)
                ev |= POLLOUT;
            is = n;
            pf[n++] = (struct pollfd){.fd = p->sock, .events = ev};
        }
        if (pend_out.len)
            pf[n++] = (struct pollfd){.fd = out_fd, .events = POLLOUT};
        if (pend_err.len && err_fd >= 0)
            pf[n++] = (struct pollfd){.fd = err_fd, .events = POLLOUT};
        int src_in = p->tty ? p->slave : (in_open ? p->in_r : -1);
        if (src_in >= 0 && sock_open && !pend_in.len) {
            ii = n;
            pf[n++] = (struct pollfd){.fd = src_in, .events = POLLIN};
        }
        iw = n;
        pf[n++] = (struct pollfd){.fd = p->wake_r, .events = POLLIN};
        int ms = timer_step(p);
        if (p->keep && !p->tty) {
            /* A background process may hold the stream open after the command ended: once
             * the exec no longer runs, what the command wrote still in flight gets
             * DRAIN_MS to arrive, then the stream is left to the background. */
            int64_t now = sbx_time_mono_ns();
            if (drain_until == INT64_MAX && now >= next_check) {
                next_check = now + (int64_t)POLL_TICK_MS * 1000000;
                if (!exec_running(&p->eng, p->eid))
                    drain_until = now + (int64_t)DRAIN_MS * 1000000;
            }
            if (drain_until != INT64_MAX && now >= drain_until)
                break;
        }
        int r = poll(pf, (nfds_t)n, ms);
        if (r < 0 && errno != EINTR)
            break;
        if (r <= 0)
            continue;
        if (pf[iw].revents) {
            stop = 1;
            break;
        }
        if (ii >= 0 && pf[ii].revents) {
            ssize_t got = read_some(src_in, buf, sizeof(buf));
            if (got > 0) {
                buf_put(&pend_in, buf, (size_t)got);
            } else if (got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
                if (!p->tty) {
                    /* The caller closed stdin: so does the command's. */
                    (void)shutdown(p->sock, SHUT_WR);
                    in_open = 0;
                }
            }
        }
        if (is >= 0 && (pf[is].revents & POLLOUT) && pend_in.len) {
            ssize_t w = send(p->sock, pend_in.data, pend_in.len, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w > 0)
                sbx_buf_consume(&pend_in, (size_t)w);
            else if (w < 0 && errno != EAGAIN && errno != EINTR)
                sbx_buf_reset(&pend_in);
        }
        if (is >= 0 && (pf[is].revents & (POLLIN | POLLHUP | POLLERR)) && !pend_out.len &&
            !pend_err.len) {
            ssize_t got = read_some(p->sock, buf, sizeof(buf));
            if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                continue;
            if (got <= 0) {
                sock_open = 0;
                continue;
            }
            if (p->tty) {
                buf_put(&pend_out, buf, (size_t)got);
                continue;
            }
            size_t off = 0;
            while (off < (size_t)got) {
                int stream;
                const uint8_t *pl;
                size_t plen;
                long used = sbx__mux_feed(&p->dm, buf + off, (size_t)got - off, &stream, &pl, &plen,
                                          &ignored);
                if (used < 0) {
                    sock_open = 0;
                    break;
                }
                off += (size_t)used;
                if (plen)
                    buf_put(stream == 2 ? &pend_err : &pend_out, pl, plen);
            }
        }
    }
    sbx_buf_release(&pend_out);
    sbx_buf_release(&pend_err);
    sbx_buf_release(&pend_in);
    /* EOF for the caller's reads: the terminal's slave, or the output sockets. */
    if (p->tty)
        sbx_fd_close(&p->slave);
    sbx_fd_close(&p->out_w);
    sbx_fd_close(&p->err_w);
    if (!stop)
        finish(p);
    return NULL;
}

/* ---------------------------------------------------------------------------------------------
 * The proc */

static int proc_wait(struct sbx_proc *bp, int64_t timeout_ms, struct sbx_exit *out,
                     struct sbx_error *err)
{
    struct dk_proc *p = (struct dk_proc *)bp;
    int64_t deadline = sbx_deadline_after_ms(timeout_ms);
    for (;;) {
        pthread_mutex_lock(&p->lock);
        int done = p->done, lost = p->lost;
        struct sbx_exit st = p->status;
        pthread_mutex_unlock(&p->lock);
        if (done && lost)
            return sbx_error_set(err, SBX_E_SANDBOX, 0,
                                 "the exit status of '%s' is unknown: the container is gone",
                                 p->name);
        if (done) {
            *out = st;
            return 0;
        }
        struct pollfd pf = {.fd = p->base.status_fd, .events = POLLIN};
        int ms = sbx_deadline_poll_ms(deadline);
        if (timeout_ms >= 0 && ms == 0)
            return sbx_error_set(err, SBX_E_TIMEOUT, 0, "'%s' is still running", p->name);
        int r = poll(&pf, 1, ms);
        if (r < 0 && errno != EINTR)
            return sbx_error_errno(err, errno, "poll");
    }
}

static void proc_free(struct sbx_proc *bp)
{
    struct dk_proc *p = (struct dk_proc *)bp;
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    int done = p->done;
    pthread_mutex_unlock(&p->lock);
    if (!done && p->pid > 1 && !p->detached) {
        kill_group(&p->eng, p->container, p->pid, "KILL");
    }
    if (p->thread_started) {
        char c = 'q';
        ssize_t w;
        do
            w = write(p->wake_w, &c, 1);
        while (w < 0 && errno == EINTR);
        pthread_join(p->thread, NULL);
    }
    if (p->base.tty) {
        sbx_fd_close(&p->base.stdout_fd);
        p->base.stdin_fd = -1;
    } else {
        sbx_fd_close(&p->base.stdout_fd);
        sbx_fd_close(&p->base.stderr_fd);
        sbx_fd_close(&p->base.stdin_fd);
    }
    sbx_fd_close(&p->base.status_fd);
    sbx_fd_close(&p->status_w);
    sbx_fd_close(&p->wake_r);
    sbx_fd_close(&p->wake_w);
    sbx_fd_close(&p->sock);
    sbx_fd_close(&p->out_w);
    sbx_fd_close(&p->err_w);
    sbx_fd_close(&p->in_r);
    sbx_fd_close(&p->slave);
    sbx_buf_release(&p->pre);
    sbx_buf_release(&p->pre_err);
    pthread_mutex_destroy(&p->lock);
    sbx__dk_engine_release(&p->eng);
    free(p->container);
    free(p->eid);
    free(p->name);
    free(p);
}

/* Leave the command running in the container: the engine keeps its terminal or pipes after our
 * stream closes, and nothing here kills its group any more. It ends by itself or with the
 * container. */
static int proc_detach(struct sbx_proc *bp, struct sbx_error *err)
{
    struct dk_proc *p = (struct dk_proc *)bp;
    (void)err;
    p->detached = 1;
    proc_free(bp);
    return 0;
}

static const struct sbx_proc_ops proc_ops = {proc_wait, proc_free, proc_detach};

/* Read the preamble's verdict: "S<pid>\n", or one letter for a command that cannot start.
 * Output of the command that came with it is kept in p->pre and p->pre_err (the stream is
 * left at a frame boundary for the relay). stderr may come first (the engine copies the two
 * streams independently): it goes to p->pre_err too, where an engine's message about a
 * command it could not start (a user that does not exist) also lands. */
static int read_verdict(struct dk_proc *p, struct sbx_buf *rbuf, char *mark, size_t *mark_len,
                        struct sbx_error *err)
{
    uint8_t buf[CHUNK];
    int64_t deadline = sbx_deadline_after_ms(p->eng.timeout_ms);
    const uint8_t *src = (const uint8_t *)rbuf->data;
    size_t n = rbuf->len, off = 0;
    int have = 0;
    sbx__mux_init(&p->dm, 0);
    *mark_len = 0;
    for (;;) {
        while (off < n) {
            int stream = 1;
            const uint8_t *pl = src + off;
            size_t plen = n - off;
            if (p->tty) {
                off = n;
            } else {
                long used = sbx__mux_feed(&p->dm, src + off, n - off, &stream, &pl, &plen, err);
                if (used < 0)
                    return (int)used;
                off += (size_t)used;
            }
            if (!plen)
                continue;
            if (have || stream == 2) {
                struct sbx_buf *to = stream == 2 ? &p->pre_err : &p->pre;
                buf_put(to, pl, plen);
                continue;
            }
            size_t i = 0;
            for (; i < plen && !have; i++) {
                if (*mark_len == 0 && pl[i] != 'S') {
                    mark[(*mark_len)++] = (char)pl[i];
                    have = 1;
                } else if (pl[i] == '\n') {
                    have = 1;
                } else if (pl[i] != '\r') {
                    if (*mark_len >= MARK_MAX - 1)
                        return sbx_error_set(err, SBX_E_SANDBOX, 0, "the start of '%s' was garbled",
                                             p->name);
                    mark[(*mark_len)++] = (char)pl[i];
                }
            }
            if (i < plen)
                buf_put(&p->pre, pl + i, plen - i);
        }
        if (have)
            break;
        struct pollfd pf = {.fd = p->sock, .events = POLLIN};
        int ms = sbx_deadline_poll_ms(deadline);
        if (ms == 0)
            return sbx_error_set(err, SBX_E_TIMEOUT, 0, "'%s' did not start in time", p->name);
        int r = poll(&pf, 1, ms);
        if (r < 0 && errno != EINTR)
            return sbx_error_errno(err, errno, "poll");
        if (r <= 0)
            continue;
        /* A terminal has no frames: read the verdict byte by byte, not into the output. */
        ssize_t got = read_some(p->sock, buf, p->tty ? 1 : sizeof(buf));
        if (got <= 0)
            break; /* ended (with or without a verdict) */
        src = buf;
        n = (size_t)got;
        off = 0;
    }
    mark[*mark_len] = '\0';
    return 0;
}

static int pick_user(struct sbx__dk_session *s, const char *want, const char **out,
                     struct sbx_error *err)
{
    if (!want) {
        *out = s->owner;
        return 0;
    }
    if (sbx_strv_find(&s->users, want) < 0)
        return sbx_error_set(err, SBX_E_NOTFOUND, 0, "no user '%s' in the sandbox's manifest",
                             want);
    *out = want;
    return 0;
}

static struct dk_proc *proc_new(struct sbx__dk_session *s, const struct sbx_exec_spec *spec)
{
    struct dk_proc *p = sbx_xcalloc(1, sizeof(*p));
    int tty = !!(spec->flags & SBX_EXEC_TTY);
    sbx_buf_init(&p->pre, SBX_BUF_NOLIMIT);
    sbx_buf_init(&p->pre_err, SBX_BUF_NOLIMIT);
    pthread_mutex_init(&p->lock, NULL);
    p->base = (struct sbx_proc){.stdout_fd = -1,
                                .stderr_fd = -1,
                                .stdin_fd = -1,
                                .status_fd = -1,
                                .tty = tty,
                                .ops = &proc_ops};
    p->sock = p->out_w = p->err_w = p->in_r = p->slave = p->status_w = -1;
    p->wake_r = p->wake_w = -1;
    p->tty = tty;
    p->keep = !!(spec->flags & SBX_EXEC_KEEP_BACKGROUND);
    p->deadline = spec->timeout_ms > 0 ? sbx_deadline_after_ms(spec->timeout_ms) : INT64_MAX;
    p->kill_at = INT64_MAX;
    p->grace_ms = spec->kill_grace_ms > 0 ? spec->kill_grace_ms : SBX_EXEC_DEFAULT_GRACE_MS;
    p->name = sbx_xstrdup(spec->argv ? spec->argv[0] : "/bin/sh");
    p->container = sbx_xstrdup(s->container);
    p->rows = spec->rows ? spec->rows : 24;
    p->cols = spec->cols ? spec->cols : 80;
    sbx__dk_engine_copy(&p->eng, &s->eng);
    return p;
}

/* The exec's command: the WRAPPER preamble with its arguments, then the command. */
static json_t *wrapped_cmd(const struct sbx__dk_session *s, const struct dk_proc *p,
                           const struct sbx_exec_spec *spec, const char *cwd)
{
    char *dir = cwd[0] ? sbx_xasprintf("%s/%s", s->base.root, cwd) : sbx_xstrdup(s->base.root);
    json_t *cmd = json_array();
    sbx_json_append(cmd, sbx_json_str("/bin/sh"));
    sbx_json_append(cmd, sbx_json_str("-c"));
    sbx_json_append(cmd, sbx_json_str(WRAPPER));
    sbx_json_append(cmd, sbx_json_str("sbx"));
    sbx_json_append(cmd, sbx_json_str(s->base.root));
    sbx_json_append(cmd, sbx_json_str(dir));
    sbx_json_append(cmd, sbx_json_str(p->keep ? "1" : "0"));
    free(dir);
    char rows[8] = "", cols[8] = "";
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

/* The error for a verdict other than "S<pid>": the preamble's letter, or the engine's own
 * words when it could not run the preamble at all (no /bin/sh, an unknown user). */
static int verdict_error(const struct dk_proc *p, const char *mark, size_t mark_len,
                         const char *cwd, struct sbx_error *err)
{
    int code = -1;
    struct sbx_error ignored = SBX_ERROR_INIT;
    (void)exec_exit_code(&p->eng, p->eid, &code, &ignored);
    if (mark_len == 0 || (mark[0] != 'S' && mark_len != 1)) {
        const char *why = p->pre_err.len ? p->pre_err.data : p->pre.len ? p->pre.data : "";
        return sbx_error_set(err, SBX_E_EXEC, 0, "cannot run '%s': %.*s%s(exit status %d)", p->name,
                             (int)strcspn(why, "\r\n"), why, why[0] ? " " : "", code);
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
 * and whose raw slave end the relay thread copies to and from the engine's terminal. */
static int open_local_tty(struct dk_proc *p, struct sbx_error *err)
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
    /* A transparent pipe: the container's terminal does the line discipline. */
    struct termios t;
    if (tcgetattr(p->slave, &t) == 0) {
        cfmakeraw(&t);
        (void)tcsetattr(p->slave, TCSANOW, &t);
    }
    struct winsize ws = {.ws_row = p->rows, .ws_col = p->cols};
    (void)ioctl(m, TIOCSWINSZ, &ws);
    return 0;
}

/* Without a terminal: a socket pair per stream (stderr unless merged, stdin if wanted); the
 * caller gets one end, the relay thread the other. */
static int open_local_sockets(struct dk_proc *p, int merge_stderr, int want_in,
                              struct sbx_error *err)
{
    int pair_out[2] = {-1, -1}, pair_err[2] = {-1, -1}, pair_in[2] = {-1, -1};
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair_out) < 0 ||
        (!merge_stderr && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair_err) < 0) ||
        (want_in && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair_in) < 0)) {
        int rc = sbx_error_errno(err, errno, "socketpair");
        for (int i = 0; i < 2; i++) {
            sbx_fd_close(&pair_out[i]);
            sbx_fd_close(&pair_err[i]);
            sbx_fd_close(&pair_in[i]);
        }
        return rc;
    }
    p->base.stdout_fd = pair_out[0];
    p->out_w = pair_out[1];
    p->base.stderr_fd = pair_err[0];
    p->err_w = pair_err[1];
    p->base.stdin_fd = pair_in[0];
    p->in_r = pair_in[1];
    if (p->base.stdout_fd >= 0)
        (void)shutdown(p->base.stdout_fd, SHUT_WR);
    if (p->base.stderr_fd >= 0)
        (void)shutdown(p->base.stderr_fd, SHUT_WR);
    return 0;
}

int sbx__dk_exec_start(struct sbx_session *bs, const struct sbx_exec_spec *spec, const char *cwd,
                       struct sbx_proc **out, struct sbx_error *err)
{
    struct sbx__dk_session *s = (struct sbx__dk_session *)bs;
    struct dk_proc *p = proc_new(s, spec);
    int want_in = p->tty || (spec->flags & SBX_EXEC_STDIN);
    int sp[2], wp[2];
    const char *user = NULL;
    struct sbx_buf rbuf;
    int rc;
    sbx_buf_init(&rbuf, SBX_BUF_NOLIMIT);
    if ((rc = pick_user(s, spec->user, &user, err)) < 0)
        goto out;
    if ((rc = exec_create(&s->eng, s->container, wrapped_cmd(s, p, spec, cwd), spec->env, user,
                          p->tty, want_in, 1, &p->eid, err)) < 0 ||
        (rc = start_hijack(&s->eng, p->eid, p->tty, &p->sock, &rbuf, err)) < 0)
        goto out;
    char mark[MARK_MAX];
    size_t mark_len = 0;
    if ((rc = read_verdict(p, &rbuf, mark, &mark_len, err)) < 0)
        goto out;
    if (mark_len == 0 || mark[0] != 'S') {
        rc = verdict_error(p, mark, mark_len, cwd, err);
        goto out;
    }
    p->pid = (pid_t)strtol(mark + 1, NULL, 10);
    p->base.pid = p->pid;

    /* Each pair is the proc's at once, so that proc_free closes it on any later failure. */
    if (pipe2(sp, O_CLOEXEC) < 0) {
        rc = sbx_error_errno(err, errno, "pipe");
        goto out;
    }
    p->base.status_fd = sp[0];
    p->status_w = sp[1];
    if (pipe2(wp, O_CLOEXEC) < 0) {
        rc = sbx_error_errno(err, errno, "pipe");
        goto out;
    }
    p->wake_r = wp[0];
    p->wake_w = wp[1];
    if ((rc = p->tty ? open_local_tty(p, err)
                     : open_local_sockets(p, !!(spec->flags & SBX_EXEC_MERGE_STDERR), want_in,
                                          err)) < 0)
        goto out;
    if (pthread_create(&p->thread, NULL, relay_main, p) != 0) {
        rc = sbx_error_set(err, SBX_E_SYS, 0, "cannot start a thread");
        goto out;
    }
    p->thread_started = 1;
    *out = &p->base;
    p = NULL;
    rc = 0;
out:
    if (p) {
        p->done = 1; /* nothing left to kill */
        proc_free(&p->base);
    }
    sbx_buf_release(&rbuf);
    return rc;
}
