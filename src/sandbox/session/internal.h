/* Internal helpers shared by the session layer and the providers. */
#ifndef SBX_SANDBOX_SESSION_INTERNAL_H
#define SBX_SANDBOX_SESSION_INTERNAL_H

#include <stddef.h>

#include "sbx/session.h"

/* Normalise a workspace path for s (relative, or absolute under the root). allow_root: "" and
 * "/workspace" itself are accepted. *out: caller owns (free). */
int sbx__session_path(struct sbx_session *s, const char *path, int allow_root, char **out,
                      struct sbx_error *err);

/* After the exit status arrives, output still buffered in the pipes is read, but a background
 * process that keeps the pipe open and keeps writing must not hold the caller for ever: at most
 * this much is read per stream. */
#define SBX__DRAIN_AFTER_EXIT_MAX ((size_t)1 << 20)

/* The body of sbx_session_exec_stream (stream.c), without the session events. */
struct sbx_exec_stream;
int sbx__exec_stream(struct sbx_session *s, const struct sbx_exec_spec *spec,
                     const struct sbx_exec_stream *io, struct sbx_exit *out, struct sbx_error *err);

/* Set O_NONBLOCK on fd. */
void sbx__set_nonblock(int fd);

/* Read what is available from non-blocking *fd into c (at most 1 MiB per call); sets *fd to -1 at
 * EOF or a terminal's EIO (without closing it). Returns the bytes read. */
size_t sbx__pump(int *fd, struct sbx_capture *c);

/* Cancellation of a wait (sbx_exec_spec.cancel, may be NULL): the poll timeout to use instead of
 * ms (-1: none) so that a set flag is seen in time, and SBX_E_CANCELLED once it is set. */
int sbx__cancel_poll_ms(const volatile sig_atomic_t *cancel, int ms);
int sbx__cancel_check(const volatile sig_atomic_t *cancel, struct sbx_error *err);

/* TIOCSWINSZ on a terminal master. */
int sbx__tty_resize(int master, unsigned short rows, unsigned short cols, struct sbx_error *err);

/* A write flag for materialisation only: the path did not exist a moment ago, so a provider
 * may create the file in place (O_EXCL, no temporary file and rename) and remove it if the
 * write fails; nothing reads a workspace being materialised. Where the name exists after all
 * it writes as usual. Providers that do not know it ignore it. */
#define SBX__WRITE_FRESH (1 << 30)

/* Check the provider-specific part of a session state (the generic fields are checked by
 * sbx_session_state_parse): the provider named in it must be known. */
int sbx__provider_check_state(const json_t *state, struct sbx_error *err);
/* Non-zero when the sandboxes c creates end with the calling process (sbx_local_options.tied):
 * a run that must outlive the process cannot use such a client. */
int sbx__client_tied(const struct sbx_client *c);
/* The checks of sbx_session_state_parse on a parsed document (no "session state" prefix). */
int sbx__session_state_check(const json_t *state, struct sbx_error *err);

/* Whether the text of a /proc/net/tcp or /proc/net/tcp6 table (n bytes) has a socket listening
 * on port: non-zero if so. How a provider answers "nothing listens there" (SBX_E_NOTFOUND of
 * sbx_session_resolve_port) from inside the sandbox's network namespace. */
int sbx__net_table_listens(const char *text, size_t n, int port);

#endif
