/* Streaming exec (sbx_session_exec_stream): one poll loop over a started struct sbx_proc that
 * hands output to a callback as it arrives and forwards a stdin source, for every provider.
 *
 * Memory is two fixed buffers: one chunk of output in flight and one chunk of input not yet
 * taken by the command. The source is read only when that input chunk is gone, so a command
 * that stops reading stalls the forwarding and nothing else. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sandbox/provider.h"
#include "sandbox/session/internal.h"
#include "sbx/fs.h"
#include "sbx/session.h"

#define CHUNK 65536

/* Output read from one stream per wake-up, so that a stream that never pauses cannot starve
 * the other, the input or the exit status. */
#define ROUND_MAX ((size_t)1 << 20)

struct stream {
    struct sbx_proc *p;
    const struct sbx_exec_stream *io;
    int out[3];            /* [1] stdout, [2] stderr; -1 at EOF (the fds stay the proc's) */
    int src;               /* the stdin source; -1 at its end */
    int dst;               /* the command's stdin; -1 once nothing more is written */
    int resize_fd;         /* -1 when not watched */
    size_t in_off, in_len; /* in[in_off..in_len) is read from src, not yet written */
    char buf[CHUNK];
    /* CHUNK bytes when the command's stdin is fed, none otherwise: without it the whole
     * struct stays under malloc's mmap threshold (no map and unmap per exec). */
    char in[];
};

/* Hand what is available on s->out[k] to the callback, at most max bytes. */
static int pump(struct stream *s, int k, size_t max, struct sbx_error *err)
{
    size_t got = 0;
    while (got < max) {
        ssize_t r = read(s->out[k], s->buf, sizeof(s->buf));
        if (r > 0) {
            got += (size_t)r;
            if (!s->io->output)
                continue;
            struct sbx_error cb = SBX_ERROR_INIT;
            int rc = s->io->output(s->io->ctx, k, s->buf, (size_t)r, &cb);
            if (rc < 0) {
                if (cb.code == SBX_OK)
                    sbx_error_set(&cb, SBX_E_IO, 0, "output callback failed");
                if (err)
                    *err = cb;
                return -(int)cb.code;
            }
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        s->out[k] = -1; /* EOF, or EIO once a terminal's last writer is gone */
        return 0;
    }
    return 0;
}

/* The source ended: the command gets EOF, on a terminal as the EOF character typed. */
static void input_end(struct stream *s)
{
    s->src = -1;
    if (s->p->tty) {
        s->in[0] = '\004';
        s->in_off = 0;
        s->in_len = 1;
        return;
    }
    sbx_proc_close_stdin(s->p);
    s->dst = -1;
}

static void input_read(struct stream *s)
{
    ssize_t r = read(s->src, s->in, CHUNK);
    if (r > 0) {
        s->in_off = 0;
        s->in_len = (size_t)r;
    } else if (r == 0 || (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) {
        input_end(s);
    }
}

static void input_write(struct stream *s)
{
    const char *p = s->in + s->in_off;
    size_t n = s->in_len - s->in_off;
    /* Without a tty stdin is a socket: MSG_NOSIGNAL, so a command that closed it cannot raise
     * SIGPIPE here. A terminal master is non-blocking (it is also the output fd). */
    ssize_t w = s->p->tty ? write(s->dst, p, n) : send(s->dst, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
        s->in_off += (size_t)w;
        if (s->in_off == s->in_len) {
            s->in_off = s->in_len = 0;
            if (s->src < 0)
                s->dst = -1; /* the EOF character went out */
        }
        return;
    }
    if (w < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
        return;
    /* The command no longer reads its stdin: what is left of the source stays unread. */
    s->src = -1;
    s->in_off = s->in_len = 0;
    if (!s->p->tty)
        sbx_proc_close_stdin(s->p);
    s->dst = -1;
}

static void resize(struct stream *s, short revents)
{
    unsigned short rows = 0, cols = 0;
    if (s->io->resize(s->io->ctx, &rows, &cols) == 1 && rows && cols)
        (void)sbx_proc_resize(s->p, rows, cols, NULL);
    /* A hung-up notifier would be readable for ever. */
    if (revents & (POLLERR | POLLHUP | POLLNVAL))
        s->resize_fd = -1;
}

static int loop(struct stream *s, const volatile sig_atomic_t *cancel, struct sbx_exit *out,
                struct sbx_error *err)
{
    struct sbx_proc *p = s->p;
    for (;;) {
        struct pollfd pfd[6];
        int n = 0, io = -1, ie = -1, isrc = -1, idst = -1, iw = -1;
        if (s->out[1] >= 0) {
            io = n;
            pfd[n++] = (struct pollfd){.fd = s->out[1], .events = POLLIN};
        }
        if (s->out[2] >= 0) {
            ie = n;
            pfd[n++] = (struct pollfd){.fd = s->out[2], .events = POLLIN};
        }
        if (s->dst >= 0 && s->in_off < s->in_len) {
            idst = n;
            pfd[n++] = (struct pollfd){.fd = s->dst, .events = POLLOUT};
        } else if (s->src >= 0 && s->dst >= 0) {
            isrc = n;
            pfd[n++] = (struct pollfd){.fd = s->src, .events = POLLIN};
        }
        if (s->resize_fd >= 0) {
            iw = n;
            pfd[n++] = (struct pollfd){.fd = s->resize_fd, .events = POLLIN};
        }
        int is = n;
        pfd[n++] = (struct pollfd){.fd = p->status_fd, .events = POLLIN};

        int r = poll(pfd, (nfds_t)n, sbx__cancel_poll_ms(cancel, -1));
        int rc = sbx__cancel_check(cancel, err);
        if (rc < 0)
            return rc; /* the caller frees the proc, which kills the command */
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return sbx_error_errno(err, errno, "poll");
        }
        if (io >= 0 && pfd[io].revents && (rc = pump(s, 1, ROUND_MAX, err)) < 0)
            return rc;
        if (ie >= 0 && pfd[ie].revents && (rc = pump(s, 2, ROUND_MAX, err)) < 0)
            return rc;
        if (idst >= 0 && pfd[idst].revents)
            input_write(s);
        if (isrc >= 0 && pfd[isrc].revents)
            input_read(s);
        if (iw >= 0 && pfd[iw].revents)
            resize(s, pfd[iw].revents);
        if (pfd[is].revents)
            break;
    }
    int rc = sbx_proc_wait(p, 0, out, err);
    if (rc < 0)
        return rc;
    /* What the command left in the pipes, bounded: a background process that keeps them open
     * and keeps writing must not hold the caller. */
    for (int k = 1; k <= 2; k++)
        if (s->out[k] >= 0 && (rc = pump(s, k, SBX__DRAIN_AFTER_EXIT_MAX, err)) < 0)
            return rc;
    return 0;
}

/* The body of sbx_session_exec_stream, without the session events. */
static int exec_stream(struct sbx_session *sess, const struct sbx_exec_spec *spec,
                       const struct sbx_exec_stream *io, struct sbx_exit *out,
                       struct sbx_error *err)
{
    struct sbx_exec_spec sp;
    struct sbx_proc *p = NULL;
    struct sbx_exit st = {0};
    struct stream *s = NULL;
    int rc;

    if (!spec || !io)
        return sbx_error_set(err, SBX_E_INVAL, 0, "exec stream: no command or no stream");
    sp = *spec;
    sp.input = NULL;
    sp.input_len = 0;
    if (io->stdin_fd >= 0)
        sp.flags |= SBX_EXEC_STDIN;
    else
        sp.flags &= ~SBX_EXEC_STDIN;
    rc = sbx_session_exec_start(sess, &sp, &p, err);
    if (rc < 0)
        return rc;

    int feed = io->stdin_fd >= 0 && p->stdin_fd >= 0;
    s = sbx_xmalloc(sizeof(*s) + (feed ? CHUNK : 0));
    s->p = p;
    s->io = io;
    s->out[0] = -1;
    s->out[1] = p->stdout_fd;
    s->out[2] = p->stderr_fd;
    s->src = io->stdin_fd;
    s->dst = feed ? p->stdin_fd : -1;
    s->resize_fd = p->tty && io->resize ? io->resize_fd : -1;
    s->in_off = s->in_len = 0;
    if (s->dst < 0)
        s->src = -1;
    if (s->out[1] >= 0)
        sbx__set_nonblock(s->out[1]);
    if (s->out[2] >= 0)
        sbx__set_nonblock(s->out[2]);

    rc = loop(s, sp.cancel, &st, err);
    if (rc == 0)
        *out = st;
    free(s);
    sbx_proc_free(p);
    return rc;
}

int sbx_session_exec_stream(struct sbx_session *s, const struct sbx_exec_spec *spec,
                            const struct sbx_exec_stream *io, struct sbx_exit *out,
                            struct sbx_error *err)
{
    struct sbx_session_event ev;
    struct sbx_exit st = {0};
    sbx__session_event_start(s, &ev, "exec");
    if (spec) {
        ev.argv = spec->argv;
        ev.command = spec->command;
    }
    int rc = exec_stream(s, spec, io, &st, err);
    if (rc == 0) {
        *out = st;
        ev.exit = &st;
    }
    sbx__session_event_finish(s, &ev, rc, err);
    return rc;
}
