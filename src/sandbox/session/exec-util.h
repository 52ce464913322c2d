/* sbx internal: the helpers every loop over a started command shares (exec-util.c): the
 * session layer's exec, stream and interactive-process loops, and providers that relay a
 * command's output themselves. Reached through session/internal.h. */
#ifndef SBX_SANDBOX_SESSION_EXEC_UTIL_H
#define SBX_SANDBOX_SESSION_EXEC_UTIL_H

#include <signal.h>
#include <stddef.h>

#include "sbx/error.h"
#include "sbx/session.h"

/* After the exit status arrives, output still buffered in the pipes is read, but a background
 * process that keeps the pipe open and keeps writing must not hold the caller for ever: at most
 * this much is read per stream. */
#define SBX__DRAIN_AFTER_EXIT_MAX ((size_t)1 << 20)

/* Set O_NONBLOCK on fd. */
void sbx__set_nonblock(int fd);

/* Read what is available from non-blocking *fd into c (at most SBX__DRAIN_AFTER_EXIT_MAX per
 * call); sets *fd to -1 at EOF or a terminal's EIO (without closing it). Returns the bytes
 * read. */
size_t sbx__pump(int *fd, struct sbx_capture *c);

/* Cancellation of a wait (sbx_exec_spec.cancel, may be NULL): the poll timeout to use instead of
 * ms (-1: none) so that a set flag is seen in time, and SBX_E_CANCELLED once it is set. */
int sbx__cancel_poll_ms(const volatile sig_atomic_t *cancel, int ms);
int sbx__cancel_check(const volatile sig_atomic_t *cancel, struct sbx_error *err);

/* The caller's ends of a command a provider relays itself: socket pairs for stdout, stderr
 * (none with merge) and stdin (only with want_in) into p's stdout_fd, stderr_fd, stdin_fd
 * (read-only / write-only halves; -1 where none) and the provider's ends into *out_w, *err_w,
 * *in_r (-1 where none). Nothing is left open on failure. */
int sbx__proc_sockets(struct sbx_proc *p, int merge, int want_in, int *out_w, int *err_w, int *in_r,
                      struct sbx_error *err);

/* TIOCSWINSZ on a terminal master (0 rows or columns: 24 by 80). */
int sbx__tty_resize(int master, unsigned short rows, unsigned short cols, struct sbx_error *err);

#endif
