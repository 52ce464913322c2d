/* A remote command as a struct sbx_proc: the caller's descriptors, relayed on the event loop
 * to and from the provider's code (src/sandbox/wire/rproc.h). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <termios.h>
#include <unistd.h>

#include "sandbox/session/internal.h"
#include "sandbox/wire/loop-internal.h"
#include "sandbox/wire/rproc.h"
#include "sbx/fs.h"
#include "sbx/time.h"

#define DEFAULT_BUFFER ((size_t)256 << 10)
#define IN_CHUNK       65536
#define TTY_TICK_MS    200

struct sbx__rproc {
    struct sbx_proc base; /* first: the proc's ops get &base */
    struct sbx__loop *l;
    const struct sbx__rproc_ops *ops;
    void *ud;
    char *name;
    int tty, merge;
    int64_t timeout_ms, grace_ms;
    size_t max;
    /* The loop's ends. */
    int out_w, err_w, in_r, slave;
    struct sbx__watch *w_out, *w_err, *w_in;
    struct sbx__timer *t_deadline, *t_tty, *t_deliver;
    struct sbx_buf out, err, in;
    size_t in_off;
    int in_eof, in_eof_told, in_blocked, out_gone, err_gone, full;
    unsigned short rows, cols;
    int started, stopped, ended, delivered, signalled;
    /* The status, read by other threads. */
    pthread_mutex_t lock;
    int done, failed, timed_out;
    int detached; /* the command goes on after the proc (ops->detach said so) */
    struct sbx_exit st;
    struct sbx_error ferr;
};

static struct sbx__rproc *of(struct sbx_proc *p)
{
    return (struct sbx__rproc *)p;
}

/* ---- descriptors ---- */

static int open_tty(struct sbx__rproc *r, struct sbx_error *err)
{
    int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    char name[128];
    if (m < 0 || grantpt(m) < 0 || unlockpt(m) < 0 || ptsname_r(m, name, sizeof(name))) {
        int rc = sbx_error_errno(err, errno, "cannot open a pseudo-terminal");
        if (m >= 0)
            close(m);
        return rc;
    }
    r->base.stdout_fd = r->base.stdin_fd = m;
    r->slave = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (r->slave < 0)
        return sbx_error_errno(err, errno, "cannot open '%s'", name);
    /* A transparent pipe: the remote terminal does the line discipline. */
    struct termios t;
    if (tcgetattr(r->slave, &t) == 0) {
        cfmakeraw(&t);
        (void)tcsetattr(r->slave, TCSANOW, &t);
    }
    struct winsize ws = {.ws_row = r->rows, .ws_col = r->cols};
    (void)ioctl(m, TIOCSWINSZ, &ws);
    sbx__set_nonblock(r->slave);
    return 0;
}

static int open_sockets(struct sbx__rproc *r, int want_in, struct sbx_error *err)
{
    int rc = sbx__proc_sockets(&r->base, r->merge, want_in, &r->out_w, &r->err_w, &r->in_r, err);
    if (rc < 0)
        return rc;
    sbx__set_nonblock(r->out_w);
    if (r->err_w >= 0)
        sbx__set_nonblock(r->err_w);
    if (r->in_r >= 0)
        sbx__set_nonblock(r->in_r);
    return 0;
}

/* ---- output to the caller ---- */

static void deliver_later(struct sbx__rproc *r);

static void update_out(struct sbx__rproc *r)
{
    if (r->tty) {
        if (r->w_in)
            sbx__watch_set(r->w_in,
                           (r->out.len ? SBX__OUT : 0) |
                                   (r->ops->input && !r->in_blocked && !r->ended && !r->in_eof
                                            ? SBX__IN
                                            : 0));
        return;
    }
    if (r->w_out)
        sbx__watch_set(r->w_out, r->out.len ? SBX__OUT : 0);
    if (r->w_err)
        sbx__watch_set(r->w_err, r->err.len ? SBX__OUT : 0);
}

/* Write what fd takes; a reader that left makes the rest dropped (the command still ends). */
static void flush(int fd, int sock, struct sbx_buf *b, int *gone)
{
    while (b->len && !*gone) {
        ssize_t w = sock ? send(fd, b->data, b->len, MSG_NOSIGNAL | MSG_DONTWAIT)
                         : write(fd, b->data, b->len);
        if (w > 0) {
            sbx_buf_consume(b, (size_t)w);
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        *gone = 1;
    }
    if (*gone)
        sbx_buf_reset(b);
}

static void after_flush(struct sbx__rproc *r)
{
    update_out(r);
    if (r->full && r->out.len <= r->max / 2 && r->err.len <= r->max / 2) {
        r->full = 0;
        if (r->ops->resume && !r->stopped)
            r->ops->resume(r, r->ud);
    }
    if (r->ended && !r->out.len && !r->err.len)
        deliver_later(r);
}

static void on_out(struct sbx__watch *w, unsigned rev, void *ud)
{
    struct sbx__rproc *r = ud;
    (void)rev;
    if (w == r->w_out)
        flush(r->out_w, 1, &r->out, &r->out_gone);
    else
        flush(r->err_w, 1, &r->err, &r->err_gone);
    after_flush(r);
}

int sbx__rproc_output(struct sbx__rproc *r, int stream, const void *p, size_t n)
{
    int to_err = stream == 2 && !r->tty && !r->merge;
    struct sbx_buf *b = to_err ? &r->err : &r->out;
    int gone = to_err ? r->err_gone : r->out_gone;
    if (!gone && !r->delivered && n) {
        int rc = sbx_buf_add(b, p, n, NULL);
        (void)rc; /* no limit on the buffer: the bound is the answer below */
        update_out(r);
    }
    if (b->len >= r->max) {
        r->full = 1;
        return 0;
    }
    return 1;
}

/* ---- input from the caller ---- */

static void offer_input(struct sbx__rproc *r)
{
    while (!r->ended && !r->stopped && r->ops->input) {
        if (r->in_off < r->in.len) {
            size_t n = r->in.len - r->in_off;
            size_t took = r->ops->input(r, (const uint8_t *)r->in.data + r->in_off, n, r->ud);
            r->in_off += took < n ? took : n;
            if (r->in_off < r->in.len) {
                r->in_blocked = 1;
                break;
            }
            sbx_buf_reset(&r->in);
            r->in_off = 0;
            continue;
        }
        if (r->in_eof && !r->in_eof_told) {
            r->in_eof_told = 1;
            (void)r->ops->input(r, NULL, 0, r->ud);
        }
        r->in_blocked = 0;
        break;
    }
    if (r->tty)
        update_out(r);
    else if (r->w_in)
        sbx__watch_set(r->w_in, !r->in_blocked && !r->in_eof && !r->ended ? SBX__IN : 0);
}

static void tty_check(struct sbx__rproc *r);

static void read_input(struct sbx__rproc *r, int fd)
{
    if (r->in_blocked || r->in_eof || r->in.len)
        return;
    /* A size change made before these keys were typed reaches the provider before them. */
    if (r->tty)
        tty_check(r);
    if (sbx_buf_reserve(&r->in, IN_CHUNK, NULL) < 0)
        return;
    ssize_t n;
    do
        n = read(fd, r->in.data, IN_CHUNK);
    while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return;
    if (n <= 0) {
        /* The caller closed stdin (a terminal: its master is gone, EIO): no more input. */
        r->in_eof = 1;
        if (r->tty)
            r->in_eof_told = 1;
    } else {
        sbx_buf_setlen(&r->in, (size_t)n);
    }
    offer_input(r);
}

void sbx__rproc_input_ready(struct sbx__rproc *r)
{
    if (r->in_blocked) {
        r->in_blocked = 0;
        offer_input(r);
    }
}

static void on_in(struct sbx__watch *w, unsigned rev, void *ud)
{
    struct sbx__rproc *r = ud;
    (void)w;
    if (r->tty && (rev & SBX__OUT)) {
        flush(r->slave, 0, &r->out, &r->out_gone);
        after_flush(r);
    }
    if (rev & (SBX__IN | SBX__ERR))
        read_input(r, r->tty ? r->slave : r->in_r);
}

/* ---- time ---- */

static void on_deadline(struct sbx__timer *t, void *ud)
{
    struct sbx__rproc *r = ud;
    if (r->ended || r->stopped)
        return;
    if (!r->signalled) {
        r->signalled = 1;
        pthread_mutex_lock(&r->lock);
        r->timed_out = 1;
        pthread_mutex_unlock(&r->lock);
        r->ops->signal(r, SIGTERM, r->ud);
        sbx__timer_after(t, r->grace_ms);
    } else {
        r->ops->signal(r, SIGKILL, r->ud);
    }
}

/* The caller resizes the master (sbx_proc_resize): the slave shows the new size. Looked at
 * on a tick, and before keys typed are offered (which may follow a resize at once). */
static void tty_check(struct sbx__rproc *r)
{
    struct winsize ws;
    if (ioctl(r->slave, TIOCGWINSZ, &ws) == 0 && ws.ws_row && ws.ws_col &&
        (ws.ws_row != r->rows || ws.ws_col != r->cols)) {
        r->rows = ws.ws_row;
        r->cols = ws.ws_col;
        if (r->ops->resize && !r->ended && !r->stopped)
            r->ops->resize(r, ws.ws_row, ws.ws_col, r->ud);
    }
}

static void on_tty_tick(struct sbx__timer *t, void *ud)
{
    struct sbx__rproc *r = ud;
    tty_check(r);
    if (!r->ended)
        sbx__timer_after(t, TTY_TICK_MS);
}

/* ---- the end ---- */

/* Free the loop's own objects (loop thread). */
static void drop_loop_objects(struct sbx__rproc *r)
{
    sbx__watch_free(r->w_out);
    sbx__watch_free(r->w_err);
    sbx__watch_free(r->w_in);
    r->w_out = r->w_err = r->w_in = NULL;
    sbx__timer_free(r->t_deadline);
    sbx__timer_free(r->t_tty);
    sbx__timer_free(r->t_deliver);
    r->t_deadline = r->t_tty = r->t_deliver = NULL;
}

static void stop_provider(struct sbx__rproc *r)
{
    if (r->started && !r->stopped) {
        r->stopped = 1;
        r->ops->stop(r, r->ud);
    }
}

/* Everything given went out: EOF on the output descriptors, then the status. */
static void on_deliver(struct sbx__timer *t, void *ud)
{
    struct sbx__rproc *r = ud;
    (void)t;
    if (r->delivered || r->out.len || r->err.len)
        return;
    r->delivered = 1;
    drop_loop_objects(r);
    sbx_fd_close(&r->out_w);
    sbx_fd_close(&r->err_w);
    sbx_fd_close(&r->in_r);
    if (r->tty)
        sbx_fd_close(&r->slave);
    pthread_mutex_lock(&r->lock);
    r->done = 1;
    pthread_mutex_unlock(&r->lock);
    uint64_t one = 1;
    ssize_t w;
    do
        w = write(r->base.status_fd, &one, sizeof(one));
    while (w < 0 && errno == EINTR);
    stop_provider(r);
}

static void deliver_later(struct sbx__rproc *r)
{
    if (r->t_deliver && !r->delivered)
        sbx__timer_after(r->t_deliver, 0);
}

static void end(struct sbx__rproc *r)
{
    r->ended = 1;
    sbx__timer_stop(r->t_deadline);
    sbx__timer_stop(r->t_tty);
    if (r->w_in && !r->tty)
        sbx__watch_set(r->w_in, 0);
    update_out(r);
    if (!r->out.len && !r->err.len)
        deliver_later(r);
}

void sbx__rproc_exit(struct sbx__rproc *r, const struct sbx_exit *st)
{
    if (r->ended)
        return;
    pthread_mutex_lock(&r->lock);
    r->st = *st;
    r->st.timed_out = st->timed_out || r->timed_out;
    pthread_mutex_unlock(&r->lock);
    end(r);
}

void sbx__rproc_fail(struct sbx__rproc *r, const struct sbx_error *err)
{
    if (r->ended)
        return;
    pthread_mutex_lock(&r->lock);
    r->failed = 1;
    sbx_error_copy(&r->ferr, err);
    pthread_mutex_unlock(&r->lock);
    end(r);
}

int sbx__rproc_timed_out(const struct sbx__rproc *r)
{
    return r->signalled;
}

int sbx__rproc_ended(const struct sbx__rproc *r)
{
    return r->ended;
}

struct sbx__loop *sbx__rproc_loop(const struct sbx__rproc *r)
{
    return r->l;
}

const char *sbx__rproc_name(const struct sbx__rproc *r)
{
    return r->name;
}

struct sbx_proc *sbx__rproc_proc(struct sbx__rproc *r)
{
    return &r->base;
}

/* ---- the proc ---- */

static int proc_wait(struct sbx_proc *bp, int64_t timeout_ms, struct sbx_exit *out,
                     struct sbx_error *err)
{
    struct sbx__rproc *r = of(bp);
    int64_t deadline = sbx_deadline_after_ms(timeout_ms);
    for (;;) {
        pthread_mutex_lock(&r->lock);
        int done = r->done, failed = r->failed;
        struct sbx_exit st = r->st;
        struct sbx_error fe = r->ferr;
        pthread_mutex_unlock(&r->lock);
        if (done && failed)
            return sbx_error_copy(err, &fe);
        if (done) {
            *out = st;
            return 0;
        }
        int ms = sbx_deadline_poll_ms(deadline);
        if (timeout_ms >= 0 && ms == 0)
            return sbx_error_set(err, SBX_E_TIMEOUT, 0, "'%s' is still running", r->name);
        struct pollfd pf = {.fd = r->base.status_fd, .events = POLLIN};
        int n = poll(&pf, 1, ms);
        if (n < 0 && errno != EINTR)
            return sbx_error_errno(err, errno, "poll");
    }
}

static void teardown(void *ud)
{
    struct sbx__rproc *r = ud;
    stop_provider(r);
    drop_loop_objects(r);
    sbx__loop_count(r->l, LOOP_PROC, -1);
    sbx__loop_release(r->l);
}

static void proc_free(struct sbx_proc *bp)
{
    struct sbx__rproc *r = of(bp);
    if (!r)
        return;
    pthread_mutex_lock(&r->lock);
    int done = r->done;
    pthread_mutex_unlock(&r->lock);
    if (r->started && !done && !r->detached && r->ops->kill)
        r->ops->kill(r, r->ud);
    /* On the loop even when it never started: the process's loop then stops if this was the
     * last thing it held. */
    sbx__loop_call(r->l, teardown, r);
    if (r->base.stdin_fd == r->base.stdout_fd)
        r->base.stdin_fd = -1;
    sbx_fd_close(&r->base.stdout_fd);
    sbx_fd_close(&r->base.stderr_fd);
    sbx_fd_close(&r->base.stdin_fd);
    sbx_fd_close(&r->base.status_fd);
    sbx_fd_close(&r->out_w);
    sbx_fd_close(&r->err_w);
    sbx_fd_close(&r->in_r);
    sbx_fd_close(&r->slave);
    if (r->ops->release)
        r->ops->release(r->ud);
    sbx_buf_release(&r->out);
    sbx_buf_release(&r->err);
    sbx_buf_release(&r->in);
    pthread_mutex_destroy(&r->lock);
    free(r->name);
    free(r);
}

/* Leave a running command to the server and free the proc. */
static int proc_detach(struct sbx_proc *bp, struct sbx_error *err)
{
    struct sbx__rproc *r = of(bp);
    pthread_mutex_lock(&r->lock);
    int done = r->done;
    pthread_mutex_unlock(&r->lock);
    if (!r->ops->detach || !r->started || done)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0, "'%s' cannot be left running",
                             r->name ? r->name : "the command");
    int rc = r->ops->detach(r, r->ud, err);
    if (rc < 0)
        return rc;
    r->detached = 1;
    proc_free(bp);
    return 0;
}

static const struct sbx_proc_ops proc_ops = {proc_wait, proc_free, proc_detach};

int sbx__rproc_new(struct sbx__loop *l, const struct sbx__rproc_opts *o,
                   const struct sbx__rproc_ops *ops, void *ud, struct sbx__rproc **out,
                   struct sbx_error *err)
{
    struct sbx__rproc *r = sbx_xcalloc(1, sizeof(*r));
    r->base = (struct sbx_proc){.stdout_fd = -1,
                                .stderr_fd = -1,
                                .stdin_fd = -1,
                                .status_fd = -1,
                                .tty = !!o->tty,
                                .pid = o->pid,
                                .ops = &proc_ops};
    r->l = l;
    r->ops = ops;
    r->ud = ud;
    r->name = sbx_xstrdup(o->name ? o->name : "command");
    r->tty = !!o->tty;
    r->merge = !!o->merge_stderr;
    r->timeout_ms = o->timeout_ms;
    r->grace_ms = o->kill_grace_ms > 0 ? o->kill_grace_ms : SBX_EXEC_DEFAULT_GRACE_MS;
    r->max = o->max_buffered ? o->max_buffered : DEFAULT_BUFFER;
    r->rows = o->rows ? o->rows : 24;
    r->cols = o->cols ? o->cols : 80;
    r->out_w = r->err_w = r->in_r = r->slave = -1;
    r->ferr = (struct sbx_error)SBX_ERROR_INIT;
    sbx_buf_init(&r->out, SBX_BUF_NOLIMIT);
    sbx_buf_init(&r->err, SBX_BUF_NOLIMIT);
    sbx_buf_init(&r->in, SBX_BUF_NOLIMIT);
    pthread_mutex_init(&r->lock, NULL);
    int rc = sbx__loop_hold(l, err);
    if (rc < 0) {
        pthread_mutex_destroy(&r->lock);
        free(r->name);
        free(r);
        return rc;
    }
    sbx__loop_count(l, LOOP_PROC, 1);
    rc = r->tty ? open_tty(r, err) : open_sockets(r, !!o->want_stdin, err);
    if (rc == 0) {
        r->base.status_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (r->base.status_fd < 0)
            rc = sbx_error_errno(err, errno, "eventfd");
    }
    if (rc < 0) {
        static const struct sbx__rproc_ops none = {0};
        r->ops = &none; /* nothing of the provider's is called on this failure */
        proc_free(&r->base);
        return rc;
    }
    *out = r;
    return 0;
}

struct start_call {
    struct sbx__rproc *r;
    int (*setup)(struct sbx__rproc *r, void *ud, struct sbx_error *err);
    struct sbx_error *err;
    int rc;
};

static int watch_fds(struct sbx__rproc *r, struct sbx_error *err)
{
    int rc = 0;
    if (r->tty)
        return sbx__watch_new(r->l, r->slave, r->ops->input ? SBX__IN : 0, on_in, r, &r->w_in, err);
    if ((rc = sbx__watch_new(r->l, r->out_w, 0, on_out, r, &r->w_out, err)) < 0)
        return rc;
    if (r->err_w >= 0 && (rc = sbx__watch_new(r->l, r->err_w, 0, on_out, r, &r->w_err, err)) < 0)
        return rc;
    if (r->in_r >= 0)
        rc = sbx__watch_new(r->l, r->in_r, r->ops->input ? SBX__IN : 0, on_in, r, &r->w_in, err);
    return rc;
}

static void start_fn(void *ud)
{
    struct start_call *c = ud;
    struct sbx__rproc *r = c->r;
    if (c->setup && (c->rc = c->setup(r, r->ud, c->err)) < 0)
        return;
    r->t_deliver = sbx__timer_new(r->l, on_deliver, r);
    r->started = 1;
    if ((c->rc = watch_fds(r, c->err)) < 0)
        return;
    if (r->timeout_ms > 0) {
        r->t_deadline = sbx__timer_new(r->l, on_deadline, r);
        sbx__timer_after(r->t_deadline, r->timeout_ms);
    }
    if (r->tty) {
        r->t_tty = sbx__timer_new(r->l, on_tty_tick, r);
        sbx__timer_after(r->t_tty, TTY_TICK_MS);
    }
    update_out(r);
    if (r->ended && !r->out.len && !r->err.len)
        deliver_later(r);
}

int sbx__rproc_start(struct sbx__rproc *r,
                     int (*setup)(struct sbx__rproc *r, void *ud, struct sbx_error *err),
                     struct sbx_error *err)
{
    struct start_call c = {r, setup, err, 0};
    sbx__loop_call(r->l, start_fn, &c);
    return c.rc;
}
