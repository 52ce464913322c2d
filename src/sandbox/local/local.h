/* Internal interface of the local provider (src/sandbox/local). Nothing outside this folder
 * includes it except the client registry. */
#ifndef SBX_SANDBOX_LOCAL_LOCAL_H
#define SBX_SANDBOX_LOCAL_LOCAL_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "sbx/error.h"
#include "sbx/local.h"
#include "sbx/session.h"

/* The client registry's constructor: opts may be NULL. */
int sbx__local_client_new(const void *opts, struct sbx_client **out, struct sbx_error *err);

/* Control protocol: each message is a 4-byte big-endian length followed by that many bytes of
 * JSON (one object). File descriptors travel with a message as SCM_RIGHTS. */
#define SBX_PROTO_MAX_MSG  ((size_t)4 << 20)
#define SBX_PROTO_MAX_FDS  4
#define SBX_PROTO_SOCKNAME "ctl.sock"
#define SBX_PROTO_STATE    "state.json"
#define SBX_PROTO_LOG      "supervisor.log"
/* A tied sandbox's supervisor finds a pidfd of its creator at this descriptor ("tied" in its
 * configuration); when that process ends, the supervisor removes the sandbox. */
#define SBX_PROTO_TIE_FD 3

/* Send msg with nfds descriptors (borrowed; the caller closes its copies afterwards). Blocks up
 * to the deadline (sbx_deadline_after_ms). Never raises SIGPIPE. */
int sbx__proto_send(int sock, const json_t *msg, const int *fds, size_t nfds, int64_t deadline,
                    struct sbx_error *err);
/* Receive one message. *out: caller owns (json_decref). Received descriptors (O_CLOEXEC) go to
 * fds (up to max_fds; more are closed), their count to *nfds (may be NULL when none expected).
 * A closed connection is SBX_E_SANDBOX "connection closed"; the deadline SBX_E_TIMEOUT. */
int sbx__proto_recv(int sock, json_t **out, int *fds, size_t max_fds, size_t *nfds,
                    int64_t deadline, struct sbx_error *err);
/* Encode a frame (length prefix + JSON) into out. */
int sbx__proto_frame(const json_t *msg, struct sbx_buf *out, struct sbx_error *err);
/* Decode the frame at the start of data[0..len): returns 1 and *out (and *used) when a whole
 * frame is there, 0 when more bytes are needed, or -code on a malformed or oversized frame. */
int sbx__proto_parse(const char *data, size_t len, json_t **out, size_t *used,
                     struct sbx_error *err);
/* An error reply {"ok":false,"code":N,"error":"..."}; and turning one back into err. */
json_t *sbx__proto_error(const struct sbx_error *e);
int sbx__proto_check(const json_t *reply, struct sbx_error *err);

/* Connect to the control socket in runtime directory dir. A missing socket or a refused
 * connection is SBX_E_SANDBOX "sandbox 'id' is gone". *out_fd: caller owns. */
int sbx__local_connect(const char *dir, const char *id, int *out_fd, struct sbx_error *err);

/* Remove an absolute host directory tree, never following a symlink in it (as rm does). */
int sbx__local_remove_tree(const char *path, struct sbx_error *err);

/* The base runtime directory per the rules in sbx/local.h, created 0700 and checked to be ours.
 * *out: caller owns (free). */
int sbx__local_runtime_base(const char *configured, char **out, struct sbx_error *err);

#endif
