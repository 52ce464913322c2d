/* The helpers every loop over a started command shares (session.c's capture, stream.c,
 * pty.c, and providers' own relays): non-blocking fds, draining a pipe into a capture,
 * cancellation of a wait, a terminal's size, a relayed command's sockets. Nothing here knows a
 * session. */
#include <errno.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <termios.h>
#include <unistd.h>

#include "sandbox/session/exec-util.h"
#include "sbx/fs.h"

void sbx__set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0 && !(fl & O_NONBLOCK))
        (void)fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* Read what is available from *fd into c. Returns bytes read; on EOF or a terminal's EIO sets
 * *fd to -1 (the fd itself stays with its owner). */
size_t sbx__pump(int *fd, struct sbx_capture *c)
{
    char buf[65536];
    size_t got = 0;
    for (;;) {
        ssize_t r = read(*fd, buf, sizeof(buf));
        if (r > 0) {
            sbx_capture_add(c, buf, (size_t)r);
            got += (size_t)r;
            if (got >= SBX__DRAIN_AFTER_EXIT_MAX)
                return got;
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return got;
        *fd = -1; /* EOF, or EIO once a terminal's last writer is gone */
        return got;
    }
}

int sbx__cancel_poll_ms(const volatile sig_atomic_t *cancel, int ms)
{
    if (!cancel || (ms >= 0 && ms <= SBX_EXEC_CANCEL_POLL_MS))
        return ms;
    return SBX_EXEC_CANCEL_POLL_MS;
}

int sbx__cancel_check(const volatile sig_atomic_t *cancel, struct sbx_error *err)
{
    if (cancel && *cancel)
        return sbx_error_set(err, SBX_E_CANCELLED, 0, "command cancelled");
    return 0;
}

int sbx__tty_resize(int master, unsigned short rows, unsigned short cols, struct sbx_error *err)
{
    struct winsize ws = {.ws_row = rows ? rows : 24, .ws_col = cols ? cols : 80};
    if (ioctl(master, TIOCSWINSZ, &ws) < 0)
        return sbx_error_errno(err, errno, "cannot resize the terminal");
    return 0;
}

int sbx__proc_sockets(struct sbx_proc *p, int merge, int want_in, int *out_w, int *err_w, int *in_r,
                      struct sbx_error *err)
{
    int po[2] = {-1, -1}, pe[2] = {-1, -1}, pi[2] = {-1, -1};
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, po) < 0 ||
        (!merge && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pe) < 0) ||
        (want_in && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pi) < 0)) {
        int rc = sbx_error_errno(err, errno, "socketpair");
        for (int i = 0; i < 2; i++) {
            sbx_fd_close(&po[i]);
            sbx_fd_close(&pe[i]);
            sbx_fd_close(&pi[i]);
        }
        return rc;
    }
    p->stdout_fd = po[0];
    *out_w = po[1];
    p->stderr_fd = pe[0];
    *err_w = pe[1];
    p->stdin_fd = pi[0];
    *in_r = pi[1];
    (void)shutdown(p->stdout_fd, SHUT_WR);
    if (p->stderr_fd >= 0)
        (void)shutdown(p->stderr_fd, SHUT_WR);
    return 0;
}
