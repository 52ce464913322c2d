/* The helpers every loop over a started command shares (session.c's capture, stream.c,
 * pty.c, and providers' own relays): non-blocking fds, draining a pipe into a capture,
 * cancellation of a wait, a terminal's size. Nothing here knows a session. */
#include <errno.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "sandbox/session/exec-util.h"

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
