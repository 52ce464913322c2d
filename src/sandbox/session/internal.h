/* Internal helpers shared by the session layer and the providers. */
#ifndef SBX_SANDBOX_SESSION_INTERNAL_H
#define SBX_SANDBOX_SESSION_INTERNAL_H

#include <stddef.h>

#include "sandbox/session/exec-util.h"
#include "sbx/progress.h"
#include "sbx/session.h"

/* Normalise a workspace path for s (relative, or absolute under the root). allow_root: "" and
 * "/workspace" itself are accepted. *out: caller owns (free). */
int sbx__session_path(struct sbx_session *s, const char *path, int allow_root, char **out,
                      struct sbx_error *err);

/* The manifest the sandbox of s was made from: *out borrowed, valid until s is freed; an empty
 * manifest when it was made without one or its state keeps none. A provider's create hands it
 * over (sbx__session_set_manifest); else it is read once from the session state (files there
 * may be recorded by digest, secret values are not kept), so an attached or resumed session
 * has it too. Errors: the provider's state op, or a state whose manifest cannot be read.
 * Thread-safe. */
struct sbx_manifest;
int sbx__session_manifest(struct sbx_session *s, const struct sbx_manifest **out,
                          struct sbx_error *err);
/* At create: s keeps a copy of m (sbx__manifest_dup; NULL: none). */
void sbx__session_set_manifest(struct sbx_session *s, const struct sbx_manifest *m);

/* Session events around an operation (sbx_session_set_event_fn): start fills ev (op is a
 * static name) and reports it; the caller may then point ev at the operation's details (path,
 * argv, exit, bytes); finish reports the outcome (rc, err). Nothing happens without an event
 * function. */
struct sbx_session_event;
void sbx__session_event_start(struct sbx_session *s, struct sbx_session_event *ev, const char *op);
void sbx__session_event_finish(struct sbx_session *s, struct sbx_session_event *ev, int rc,
                               const struct sbx_error *err);

/* A write flag for materialisation only: the path did not exist a moment ago, so a provider
 * may create the file in place (O_EXCL, no temporary file and rename) and remove it if the
 * write fails; nothing reads a workspace being materialised. Where the name exists after all
 * it writes as usual. Providers that do not know it ignore it. */
#define SBX__WRITE_FRESH (1 << 30)

/* Snapshot the workspace of s into st through its provider's workspace_export: the provider
 * writes the tar into a pipe from a thread of its own while the store reads the other end
 * (sbx__snapshot_import_workspace, with o). *out_ref: caller owns (free). The provider's error
 * wins when both sides fail, unless it is the pipe's reader going away (EPIPE). */
struct sbx__snap_stream_opts;
int sbx__session_snapshot_stream(struct sbx_session *s, struct sbx_snapshot_store *st,
                                 const struct sbx__snap_stream_opts *o, char **out_ref,
                                 struct sbx_error *err);
/* Restore snapshot ref of st into the fresh workspace of s through its provider's
 * workspace_import: the store writes the snapshot as a tar into a pipe from a thread of its
 * own (sbx__snapshot_write_workspace_tar) while the provider reads the other end, so nothing is
 * copied to a host directory. progress (may be NULL) gets step "restore". Errors: the store's
 * (unknown or corrupt snapshot), the provider's; SBX_E_UNSUPPORTED without workspace_import. */
struct sbx_snapshot_store;
int sbx__session_restore_stream(struct sbx_session *s, struct sbx_snapshot_store *st,
                                const char *ref, sbx_progress_fn *progress, void *progress_data,
                                struct sbx_error *err);

/* Non-zero when the sandboxes c creates end with the calling process (sbx_local_options.tied):
 * a run that must outlive the process cannot use such a client. */
int sbx__client_tied(const struct sbx_client *c);
/* The checks of sbx_session_state_parse on a parsed document (no "session state" prefix): the
 * generic fields, then the provider's check_state its own (state.c). */
int sbx__session_state_check(const json_t *state, struct sbx_error *err);
/* A sandbox that is gone made again by c's create from its state's snapshot snap: the state's
 * manifest (read with SBX_MANIFEST_NO_HOST_CHECKS | manifest_flags) unless opts gives a trusted
 * one; keep_id: under the state's id (else the provider names the new sandbox). */
enum { SBX__REBUILD_KEEP_ID = 1 };
int sbx__client_rebuild(struct sbx_client *c, const json_t *state, const char *snap,
                        const struct sbx_resume_opts *opts, unsigned manifest_flags, unsigned flags,
                        struct sbx_session **out, struct sbx_error *err);

/* Whether the text of a /proc/net/tcp or /proc/net/tcp6 table (n bytes) has a socket listening
 * on port: non-zero if so. How a provider answers "nothing listens there" (SBX_E_NOTFOUND of
 * sbx_session_resolve_port) from inside the sandbox's network namespace. */
int sbx__net_table_listens(const char *text, size_t n, int port);

#endif
