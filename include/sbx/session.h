/* sbx: sandbox clients and sessions.
 *
 * A client (struct sbx_client) is a provider: it creates sandboxes, attaches to live ones by id
 * and lists them. A session (struct sbx_session) is a handle on one live sandbox: it runs
 * commands, starts interactive processes, reads and writes workspace files and resolves ports.
 *
 * The functions below are written once for every provider: they normalise paths (relative, or
 * absolute under the session root; no "..", see path.h), apply output limits and keep the table
 * of interactive processes. A provider implements only the two vtables at the end of this file.
 *
 * Threads: a session may be used by several threads at once (parallel tool calls). Every
 * operation is independent; the interactive-process table is locked internally. sbx_session_free
 * and sbx_session_close/delete must not race with other calls on the same session.
 *
 * Lifetime: a sandbox outlives the session handle. sbx_session_free() only drops the handle (the
 * sandbox stays live and can be attached to again by id); sbx_session_close() stops the sandbox
 * and keeps its workspace; sbx_session_delete() stops it and removes a workspace it owns. */
#ifndef SBX_SESSION_H
#define SBX_SESSION_H

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/types.h>
#include <jansson.h>

#include "buf.h"
#include "common.h"
#include "error.h"
#include "progress.h"

struct sbx_manifest;
struct sbx_session;
struct sbx_client;
struct sbx_snapshot_store; /* snapshot.h */

/* ---------------------------------------------------------------------------------------------
 * Captured output: the first and last bytes of a stream, with a count of what was cut between. */

#define SBX_OUTPUT_DEFAULT_LIMIT ((size_t)1 << 20)
#define SBX_OUTPUT_MAX_LIMIT     ((size_t)1 << 30)

struct sbx_output {
    char *data;       /* head then tail, NUL-terminated; owned by the enclosing result */
    size_t len;       /* bytes in data */
    size_t head_len;  /* data[0..head_len) is the start of the stream, the rest its end */
    uint64_t total;   /* bytes the stream carried */
    uint64_t dropped; /* total - len: bytes cut out between head and tail */
};

/* Head + tail capture with a fixed memory bound: the first limit/2 bytes are kept, then a ring
 * keeps the last limit - limit/2 bytes. Memory grows with the output and never exceeds limit
 * however much is added. Fields are private. */
struct sbx_capture {
    size_t limit, head_max, tail_max;
    char *head, *tail;
    size_t head_cap, tail_cap;
    size_t head_len, tail_len, tail_pos;
    uint64_t total;
};

/* limit 0: SBX_OUTPUT_DEFAULT_LIMIT; larger than SBX_OUTPUT_MAX_LIMIT is clamped to it. */
SBX_API void sbx_capture_init(struct sbx_capture *c, size_t limit);
SBX_API void sbx_capture_add(struct sbx_capture *c, const void *p, size_t n);
/* Move the captured bytes into out (caller owns out->data: free()) and reset c to empty. */
SBX_API void sbx_capture_take(struct sbx_capture *c, struct sbx_output *out);
SBX_API void sbx_capture_release(struct sbx_capture *c);
/* Free out->data and zero out. */
SBX_API void sbx_output_release(struct sbx_output *out);

/* ---------------------------------------------------------------------------------------------
 * Commands */

#define SBX_EXEC_DEFAULT_GRACE_MS 2000
#define SBX_EXEC_MAX_ARGS         4096
#define SBX_EXEC_MAX_ENV          4096
#define SBX_EXEC_CANCEL_POLL_MS   100

enum sbx_exec_flags {
    SBX_EXEC_TTY = 1 << 0,             /* run on a new pseudo-terminal (its own session); output and
                                          input both go through the terminal master */
    SBX_EXEC_STDIN = 1 << 1,           /* give the caller a socket to stdin (else /dev/null) */
    SBX_EXEC_MERGE_STDERR = 1 << 2,    /* stderr goes to the stdout pipe, in arrival order */
    SBX_EXEC_KEEP_BACKGROUND = 1 << 3, /* processes the command leaves behind keep running until
                                          the sandbox is removed; without it, everything the
                                          command started is killed when it ends or times out */
};

struct sbx_exec_spec {
    const char *const *argv;   /* NULL-terminated argv, run without a shell (PATH is searched), */
    const char *command;       /* or a shell string run as /bin/sh -c COMMAND. Exactly one. */
    const char *cwd;           /* workspace path (relative, or absolute under the root); NULL: root.
                                  Resolved beneath the workspace: a symlink out is refused */
    const char *const *env;    /* NULL-terminated "KEY=VALUE", applied over the manifest's */
    int64_t timeout_ms;        /* 0: none. At the deadline the whole process group gets SIGTERM,
                                  then SIGKILL after kill_grace_ms */
    int64_t kill_grace_ms;     /* 0: SBX_EXEC_DEFAULT_GRACE_MS */
    int flags;                 /* enum sbx_exec_flags */
    unsigned short rows, cols; /* terminal size with SBX_EXEC_TTY; 0: 24 x 80 */
    const char *user;          /* manifest user to run as (run_as); NULL: the default user (the
                                  first manifest user). SBX_E_NOTFOUND for an unknown user,
                                  SBX_E_UNSUPPORTED where the provider cannot switch users */
    /* Watched while sbx_session_exec, sbx_session_exec_stream and the interactive-process
     * calls wait (and by the later sbx_session_pty_write calls on a process this spec
     * started): once it is non-zero the command is killed and the call fails with
     * SBX_E_CANCELLED "command cancelled". A signal handler sets it; the wait notices within
     * SBX_EXEC_CANCEL_POLL_MS, at once in the thread the signal interrupted. Borrowed: it
     * must outlive the command; NULL: never cancelled. */
    const volatile sig_atomic_t *cancel;
    /* Used by sbx_session_exec only: */
    const void *input; /* bytes written to stdin, which is then closed (with SBX_EXEC_TTY they
                          are typed on the terminal and nothing is closed) */
    size_t input_len;
    size_t output_limit; /* bytes kept per stream (head + tail); 0: SBX_OUTPUT_DEFAULT_LIMIT */
};

struct sbx_exit {
    int code;       /* exit status, or -1 when killed by a signal */
    int signal;     /* the signal that killed it, or 0 */
    int timed_out;  /* killed because timeout_ms passed */
    int oom;        /* a process of the command was killed by the sandbox's memory limit */
    int pids_limit; /* the sandbox's process limit refused a fork while the command ran */
    /* When a limit explains the end, how: "killed: out of memory (limit 512 MiB)", "exited
     * with status 137 (a process was killed: out of memory, limit 512 MiB)"; else "". */
    char reason[160];
};

struct sbx_exec_result {
    struct sbx_exit status;
    struct sbx_output out; /* stdout (with SBX_EXEC_TTY or MERGE_STDERR: everything) */
    struct sbx_output err; /* stderr */
};

SBX_API void sbx_exec_result_release(struct sbx_exec_result *r);

/* Run a command to completion and capture its output within spec->output_limit per stream.
 * Returns when the command exits, even if a background process it started still holds the
 * output open. A non-zero exit is not an error: look at res->status. Errors: SBX_E_EXEC (the
 * command could not be executed: sys_errno ENOENT "command 'x' not found", else "cannot run
 * 'x': <why>"), SBX_E_INVAL (bad spec, cwd outside the workspace), SBX_E_NOTFOUND (cwd not
 * found), SBX_E_SANDBOX (the sandbox is gone). Blocks until the command exits (or the timeout kills
 * it). On success *res is filled (release with sbx_exec_result_release). */
SBX_API int sbx_session_exec(struct sbx_session *s, const struct sbx_exec_spec *spec,
                             struct sbx_exec_result *res, struct sbx_error *err);

/* Where a streamed command's output goes and where its input comes from
 * (sbx_session_exec_stream). An all-zero struct is not valid: set stdin_fd and resize_fd to -1
 * when unused. */
struct sbx_exec_stream {
    /* Called with each chunk of output as it arrives, in the order the command wrote it within a
     * stream: stream 1 is stdout (everything with SBX_EXEC_TTY or SBX_EXEC_MERGE_STDERR), 2 is
     * stderr. p is borrowed for the call. Return 0 to go on; a negative -code (with err filled,
     * e.g. by sbx_error_set) stops the command: it is killed and sbx_session_exec_stream returns
     * that code with err as the callback left it (SBX_E_IO "output callback failed" when it
     * left err empty). NULL: output is discarded. */
    int (*output)(void *ctx, int stream, const void *p, size_t n, struct sbx_error *err);
    /* What the command reads on stdin: read and forwarded while the command runs; at its end
     * (EOF or a read error) the command's stdin is closed, or with SBX_EXEC_TTY the terminal's
     * EOF character (^D) is typed. A terminal, pipe, socket, regular file or /dev/null; it is
     * read only when the command has taken what was read before, so a command that stops
     * reading leaves the rest unread and its output still flows; a command that closes its
     * stdin ends the forwarding. Borrowed, never closed, its file status flags are not changed
     * (a blocking descriptor is read only when poll says it is readable). -1: none (stdin is
     * /dev/null; with SBX_EXEC_TTY the terminal gets no input). */
    int stdin_fd;
    /* With SBX_EXEC_TTY: readable when the terminal size may have changed (a signalfd for
     * SIGWINCH, the read end of a self-pipe). Then resize is called: it consumes what made the
     * descriptor readable (reads the signalfd), sets *rows and *cols and returns 1 to apply
     * that size to the command's terminal (sbx_proc_resize), 0 to leave it. Borrowed, never
     * closed; -1 (or resize NULL): the size stays spec->rows x spec->cols. Ignored without a
     * tty. */
    int resize_fd;
    int (*resize)(void *ctx, unsigned short *rows, unsigned short *cols);
    void *ctx; /* passed to output and resize */
};

/* Run a command to completion, streaming its output to io->output as it arrives and its input
 * from io->stdin_fd, with memory bounded by a few fixed buffers however much it writes (no
 * output is kept: spec->input and spec->output_limit are not used; SBX_EXEC_STDIN is implied
 * by io->stdin_fd >= 0). spec->timeout_ms kills it at the deadline (out->timed_out), and
 * spec->cancel as for sbx_session_exec (SBX_E_CANCELLED, the command killed). Returns when the
 * exit status is known and the output then buffered has been delivered, even if a background
 * process the command started still holds the output open. A non-zero exit is not an error:
 * look at *out. Errors: those of sbx_session_exec, and the output callback's. Blocks. */
SBX_API int sbx_session_exec_stream(struct sbx_session *s, const struct sbx_exec_spec *spec,
                                    const struct sbx_exec_stream *io, struct sbx_exit *out,
                                    struct sbx_error *err);

/* A started command. The caller reads stdout_fd/stderr_fd (set them non-blocking if it polls)
 * and writes stdin_fd itself; the descriptors belong to the proc (do not close them, except
 * stdin via sbx_proc_close_stdin). Without a tty, stdin_fd is a stream socket: write with
 * send(..., MSG_NOSIGNAL) so a command that stops reading cannot raise SIGPIPE. status_fd
 * becomes readable when the exit status is known (or the sandbox died): then sbx_proc_wait.
 * The command may leave descendants holding the output pipes open: stop reading once the
 * status is known and the pipes are drained. */
struct sbx_proc {
    int stdout_fd; /* output (the terminal master with SBX_EXEC_TTY) */
    int stderr_fd; /* -1 with SBX_EXEC_TTY or SBX_EXEC_MERGE_STDERR */
    int stdin_fd;  /* -1 unless SBX_EXEC_STDIN; the terminal master with SBX_EXEC_TTY */
    int status_fd;
    pid_t pid; /* as seen inside the sandbox; informational */
    int tty;
    const struct sbx_proc_ops *ops; /* provider's */
};

/* Start a command without waiting. *out: caller owns (sbx_proc_free). Errors as for
 * sbx_session_exec. */
SBX_API int sbx_session_exec_start(struct sbx_session *s, const struct sbx_exec_spec *spec,
                                   struct sbx_proc **out, struct sbx_error *err);
/* Wait up to timeout_ms (< 0: forever) for the exit status. SBX_E_TIMEOUT if still running,
 * SBX_E_SANDBOX "sandbox 'id' is gone" if the supervisor died. Calling it again after success
 * returns the same status. */
SBX_API int sbx_proc_wait(struct sbx_proc *p, int64_t timeout_ms, struct sbx_exit *out,
                          struct sbx_error *err);
/* Close the caller's end of stdin (EOF for the command). No-op for a terminal or without stdin. */
SBX_API void sbx_proc_close_stdin(struct sbx_proc *p);
/* Set the terminal size (SIGWINCH reaches the foreground group). SBX_E_INVAL without a tty. */
SBX_API int sbx_proc_resize(struct sbx_proc *p, unsigned short rows, unsigned short cols,
                            struct sbx_error *err);
/* Release the proc. A command still running is killed with its whole process group. NULL ok. */
SBX_API void sbx_proc_free(struct sbx_proc *p);

/* ---------------------------------------------------------------------------------------------
 * Interactive processes (the shell tool's exec_command / write_stdin).
 *
 * Each started process that is still running after the yield window gets a random id (not
 * guessable, not reused while live). At most SBX_PTY_MAX live processes per session: starting one
 * more prunes the least recently used, preferring exited ones and never one of the
 * SBX_PTY_PROTECTED most recently used. */

#define SBX_PTY_MAX             64
#define SBX_PTY_WARN            60
#define SBX_PTY_PROTECTED       8
#define SBX_PTY_YIELD_MIN_MS    250
#define SBX_PTY_YIELD_MAX_MS    30000
#define SBX_PTY_POLL_MIN_MS     5000
#define SBX_PTY_START_YIELD_MS  10000
#define SBX_PTY_WRITE_YIELD_MS  250
#define SBX_PTY_WRITE_SETTLE_MS 100

struct sbx_pty_update {
    int id;     /* > 0 while the process runs; 0 once it exited (the id is gone) */
    int exited; /* status is valid */
    struct sbx_exit status;
    struct sbx_output output; /* what it wrote during this call (stdout and stderr merged) */
};

SBX_API void sbx_pty_update_release(struct sbx_pty_update *u);

/* Start spec (SBX_EXEC_TTY selects a terminal; without it stdin is closed and stdout/stderr are
 * merged) and collect output for yield_ms (< 0: SBX_PTY_START_YIELD_MS; clamped to
 * [SBX_PTY_YIELD_MIN_MS, SBX_PTY_YIELD_MAX_MS]) or until it exits. spec->output_limit bounds the
 * output returned. *out: release with sbx_pty_update_release. */
SBX_API int sbx_session_pty_start(struct sbx_session *s, const struct sbx_exec_spec *spec,
                                  int64_t yield_ms, struct sbx_pty_update *out,
                                  struct sbx_error *err);
/* Write n bytes to process id's terminal ("\003" is Ctrl-C), then collect output as above
 * (yield_ms < 0: SBX_PTY_WRITE_YIELD_MS; an empty write is a poll of at least
 * SBX_PTY_POLL_MIN_MS). Errors: SBX_E_NOTFOUND "no process with id N" (unknown or already
 * reported exited), SBX_E_INVAL "stdin is not available for this process" (started without a
 * tty), SBX_E_CANCELLED once the starting spec's cancel flag is set (the process is killed).
 * Writing to a process that exited meanwhile is not an error: the update reports the exit. */
SBX_API int sbx_session_pty_write(struct sbx_session *s, int id, const void *data, size_t n,
                                  int64_t yield_ms, size_t output_limit, struct sbx_pty_update *out,
                                  struct sbx_error *err);
SBX_API int sbx_session_pty_resize(struct sbx_session *s, int id, unsigned short rows,
                                   unsigned short cols, struct sbx_error *err);
/* Kill process id (its whole group) and forget it. */
SBX_API int sbx_session_pty_kill(struct sbx_session *s, int id, struct sbx_error *err);
/* Kill every interactive process of this session handle. */
SBX_API void sbx_session_pty_kill_all(struct sbx_session *s);
/* Leave every interactive process that still runs running in the sandbox after this handle is
 * gone (a server the agent started, in a sandbox that is kept), where the provider can: their
 * output is read and dropped, they end by themselves or with the sandbox. Those it cannot
 * detach are killed. Returns how many were left running; the table is empty afterwards. */
SBX_API size_t sbx_session_pty_detach_all(struct sbx_session *s);
/* Number of live interactive processes. */
SBX_API size_t sbx_session_pty_count(struct sbx_session *s);

/* ---------------------------------------------------------------------------------------------
 * Files. Paths are workspace paths: relative to the root, or absolute under it. Nothing is
 * followed out of the workspace: a symlink planted inside that points out is SBX_E_PERM. */

#define SBX_FILE_DEFAULT_MAX ((uint64_t)64 << 20)

enum sbx_write_flags {
    SBX_WRITE_PARENTS = 1 << 0, /* create missing parent directories */
    SBX_WRITE_EXCL = 1 << 1,    /* fail with SBX_E_EXISTS if it exists */
    SBX_WRITE_APPEND = 1 << 2,  /* append instead of replacing */
};

/* Read a whole file, at most max bytes (0: SBX_FILE_DEFAULT_MAX; SBX_E_TOOBIG past it), appending
 * to out. */
SBX_API int sbx_session_read(struct sbx_session *s, const char *path, uint64_t max,
                             struct sbx_buf *out, struct sbx_error *err);
/* Open a file for streaming reads. *out_fd: caller owns (close); *out_size (may be NULL) its
 * size. */
SBX_API int sbx_session_read_open(struct sbx_session *s, const char *path, int *out_fd,
                                  uint64_t *out_size, struct sbx_error *err);
/* Replace (or with SBX_WRITE_APPEND extend) a file with data[0..n). New files get mode
 * (0: 0644) without S_ISUID and S_ISGID, which are dropped (SBX_FS_MODE_MASK). A replacement is
 * atomic: readers see the old or the new content, never half. */
SBX_API int sbx_session_write(struct sbx_session *s, const char *path, const void *data, size_t n,
                              mode_t mode, int flags, struct sbx_error *err);
/* The same, streaming from fd until EOF, at most max bytes (0: SBX_FILE_DEFAULT_MAX; past it
 * SBX_E_TOOBIG and nothing is replaced). Holes of a regular file fd stay holes where the
 * provider can make them (local) and do not count against max. */
SBX_API int sbx_session_write_fd(struct sbx_session *s, const char *path, int fd, uint64_t max,
                                 mode_t mode, int flags, struct sbx_error *err);

enum sbx_file_type {
    SBX_FILE_REGULAR,
    SBX_FILE_DIR,
    SBX_FILE_SYMLINK,
    SBX_FILE_OTHER,
};

struct sbx_dirent {
    char *name;   /* entry name (no '/') */
    char *target; /* symlink target, else NULL */
    enum sbx_file_type type;
    mode_t mode; /* permission bits */
    uint64_t size;
    int64_t mtime_ns;
    uid_t uid;
    gid_t gid;
};

struct sbx_dirlist {
    struct sbx_dirent *v; /* sorted by name */
    size_t n;
};

#define SBX_LS_MAX_ENTRIES 100000

/* List a directory (a file lists as itself). *out: release with sbx_dirlist_release.
 * SBX_E_TOOBIG past SBX_LS_MAX_ENTRIES. */
SBX_API int sbx_session_ls(struct sbx_session *s, const char *path, struct sbx_dirlist *out,
                           struct sbx_error *err);
SBX_API void sbx_dirlist_release(struct sbx_dirlist *l);
/* Describe one path without following a final symlink (name is its last component, "" for the
 * root). *out: release with sbx_dirent_release. */
SBX_API int sbx_session_stat(struct sbx_session *s, const char *path, struct sbx_dirent *out,
                             struct sbx_error *err);
SBX_API void sbx_dirent_release(struct sbx_dirent *d);

enum sbx_mkdir_flags {
    SBX_MKDIR_PARENTS = 1 << 0, /* create parents; an existing directory is fine */
};
SBX_API int sbx_session_mkdir(struct sbx_session *s, const char *path, int flags,
                              struct sbx_error *err);

enum sbx_rm_flags {
    SBX_RM_RECURSIVE = 1 << 0, /* remove directories with their contents */
    SBX_RM_FORCE = 1 << 1,     /* a missing path is not an error */
};
/* Remove a file, symlink (never its target) or directory. The root itself cannot be removed. */
SBX_API int sbx_session_rm(struct sbx_session *s, const char *path, int flags,
                           struct sbx_error *err);
/* Set the permission bits (07777) of a file or directory; a symlink is refused. S_ISUID and
 * S_ISGID are dropped: nothing the harness puts in a workspace is setuid or setgid. */
SBX_API int sbx_session_chmod(struct sbx_session *s, const char *path, mode_t mode,
                              struct sbx_error *err);

/* ---------------------------------------------------------------------------------------------
 * Events: a start and a finish event per operation (exec, read, write, ls, mkdir, rm,
 * resolve_port, close), for traces and audit logs. Interactive-process calls are not reported. */

enum sbx_session_event_phase {
    SBX_SESSION_EVENT_START,
    SBX_SESSION_EVENT_FINISH,
};

/* Everything is borrowed for the duration of the callback. */
struct sbx_session_event {
    const char *session_id;
    const char *provider;
    const char *op; /* "exec", "read", "write", "ls", "mkdir", "rm", "resolve_port", "close" */
    enum sbx_session_event_phase phase;
    uint64_t seq;        /* per session handle, increasing */
    int64_t ts_ns;       /* realtime */
    int64_t duration_ns; /* finish: time since the start event */
    int ok;              /* finish: the call succeeded (for exec: and the command exited 0) */
    const struct sbx_error *error; /* finish, when the call failed; else NULL */
    const char *path;              /* file operations: as given by the caller */
    const char *const *argv;       /* exec: argv form, or NULL */
    const char *command;           /* exec: shell form, or NULL */
    const struct sbx_exit *exit;   /* exec finish: the status, or NULL */
    uint64_t bytes;                /* read / write finish: bytes moved */
    int port;                      /* resolve_port */
};

/* Called on the thread doing the operation, possibly from several threads at once. Must not
 * call back into the session. */
typedef void sbx_session_event_fn(const struct sbx_session_event *ev, void *data);

/* Install (NULL: remove) the event callback. Set it before sharing the session between
 * threads. */
SBX_API void sbx_session_set_event_fn(struct sbx_session *s, sbx_session_event_fn *fn, void *data);
/* The event as a JSON object with the reference's field names ({"version":1,"session_id",
 * "seq","op","phase","ts", "ok","duration_ms","error_code","error_message","data":{...}}).
 * Command output is never included. Caller owns (json_decref). */
SBX_API json_t *sbx_session_event_json(const struct sbx_session_event *ev);

/* ---------------------------------------------------------------------------------------------
 * Ports, state, lifetime */

/* The host URL ("http://127.0.0.1:8000") at which a service listening on port inside the
 * sandbox is reached. A sandbox with a network namespace of its own (local isolation, network
 * none or allow) is reached through a host-side forwarder on a host port of its own
 * ("http://127.0.0.1:40123"), made at the first call and kept until the sandbox ends.
 * *out_url: caller owns (free). SBX_E_NOTFOUND when nothing listens there, SBX_E_PERM when the
 * port is not among the exposed ports the sandbox was created with. */
SBX_API int sbx_session_resolve_port(struct sbx_session *s, int port, char **out_url,
                                     struct sbx_error *err);

/* Borrowed strings, valid for the session's lifetime. */
SBX_API const char *sbx_session_id(const struct sbx_session *s);
SBX_API const char *sbx_session_provider(const struct sbx_session *s);
/* The workspace root as commands see it (their default cwd). */
SBX_API const char *sbx_session_root(const struct sbx_session *s);

/* The session state: a versioned JSON document from which a client attaches again, or
 * rebuilds the sandbox when it is gone (sbx_client_resume): {"version": 1, "provider", "id",
 * "created", "options" (what the sandbox was created with: isolation, network, limits asked
 * for, grants...), "limits" (in force), "manifest" (sbx_manifest_to_json: no secret values;
 * references to harness variables stay references), "snapshot" (the last snapshot's reference
 * or null), "exposed_ports", "workspace_owned", plus provider facts (host paths) that a rebuild
 * does not use}. Holds no credentials. *out: caller owns (json_decref). */
SBX_API int sbx_session_state(struct sbx_session *s, json_t **out, struct sbx_error *err);

/* A mark of what sbx_session_state returns: while it is the same nonzero number, the state is
 * the same document, so a caller may keep the last one it got instead of asking again. Marks
 * are unique across the sessions of a process. 0: the provider does not mark changes (every
 * call may differ). */
SBX_API uint64_t sbx_session_state_gen(const struct sbx_session *s);

/* The largest session state document read or written (SBX_E_TOOBIG past it). */
#define SBX_SESSION_STATE_MAX     ((size_t)16 << 20)
#define SBX_SESSION_STATE_VERSION 1

/* state as text (pretty JSON and a newline), after the checks of sbx_session_state_parse: what
 * is written can be read back. *out: caller owns (free). */
SBX_API int sbx_session_state_serialize(const json_t *state, char **out, struct sbx_error *err);
/* Parse and validate a session state document: one JSON object of at most
 * SBX_SESSION_STATE_MAX bytes, version SBX_SESSION_STATE_VERSION, a known provider, an id the
 * provider could have made, and every field of the right type and range (the manifest is
 * checked as a manifest, the snapshot as a "sha256:<64 hex>" reference). Errors name the
 * field: "session state: field 'exposed_ports' must be an array", SBX_E_UNSUPPORTED for
 * another version, SBX_E_PARSE for text that is not JSON (a truncated file). *out: caller
 * owns (json_decref). */
SBX_API int sbx_session_state_parse(const char *text, size_t n, json_t **out,
                                    struct sbx_error *err);

/* Snapshot the workspace into st (NULL: the default store, sbx_snapshot_store_open(NULL)):
 * its files, directories and symlinks, without the manifest's ephemeral entries, incremental
 * against the previous snapshot of this session. The reference is recorded in the session
 * state ("snapshot"). *out_ref: "sha256:<64 hex>", caller owns (free). SBX_E_UNSUPPORTED for a
 * provider whose workspace is not on this host. Consistent per file, not across files: see
 * docs/internals/snapshots.md. */
SBX_API int sbx_session_snapshot(struct sbx_session *s, struct sbx_snapshot_store *st,
                                 char **out_ref, struct sbx_error *err);
/* Where sbx_session_snapshot reports its progress (step "snapshot"); fn NULL: nowhere. */
SBX_API void sbx_session_set_progress(struct sbx_session *s, sbx_progress_fn *fn, void *data);

/* What a sandbox uses now (sbx_session_stats). A figure the provider cannot measure is
 * SBX_STAT_UNKNOWN; a limit of 0 is none. */
#define SBX_STAT_UNKNOWN UINT64_MAX
/* Most workspace entries the disk figure walks; past them disk_partial is set. */
#define SBX_STATS_DISK_ENTRIES_MAX 1000000
struct sbx_session_stats {
    uint64_t cpu_ns;       /* CPU time its processes used so far (CPU % is its growth over a
                              wall-clock interval) */
    uint64_t memory;       /* bytes of memory charged to it now */
    uint64_t memory_limit; /* 0: none */
    uint64_t pids;         /* processes (tasks) now */
    uint64_t pids_limit;   /* 0: none */
    uint64_t disk;         /* bytes the workspace's files take (allocated blocks, links once) */
    uint64_t disk_limit;   /* the workspace's size limit; 0: none */
    int disk_partial;      /* the walk stopped at SBX_STATS_DISK_ENTRIES_MAX: disk is a floor */
};

/* The resource use of the sandbox now: CPU, memory and processes from the provider (its
 * cgroups for local), disk from a walk of the workspace on this host (never following a
 * symlink; SBX_STAT_UNKNOWN when the workspace is not on this host). SBX_E_UNSUPPORTED for a
 * provider without the stats trait, SBX_E_SANDBOX when the sandbox is gone. Blocks for the
 * walk. */
SBX_API int sbx_session_stats(struct sbx_session *s, struct sbx_session_stats *out,
                              struct sbx_error *err);
/* A readable descriptor of the sandbox's own log (local: its supervisor's log), positioned at
 * its start; it keeps growing while the sandbox runs and is unlinked (st_nlink 0) when the
 * sandbox is removed. *out_fd: caller closes. SBX_E_UNSUPPORTED for a provider without the
 * logs trait. */
SBX_API int sbx_session_log_open(struct sbx_session *s, int *out_fd, struct sbx_error *err);

/* Stop the sandbox: kill every process in it, release its runtime resources; the workspace is
 * kept. The handle stays valid only for sbx_session_free. */
SBX_API int sbx_session_close(struct sbx_session *s, struct sbx_error *err);
/* Like close, and also remove the workspace when the sandbox created it. */
SBX_API int sbx_session_delete(struct sbx_session *s, struct sbx_error *err);
/* Drop the handle (killing its interactive processes); the sandbox stays live. NULL ok. */
SBX_API void sbx_session_free(struct sbx_session *s);

/* ---------------------------------------------------------------------------------------------
 * Clients */

struct sbx_strv;

/* What a create does with the files a given workspace directory already holds. */
enum sbx_workspace_existing {
    /* A directory that holds anything is refused (SBX_E_EXISTS, naming it): nothing of the
     * user's is replaced by surprise. */
    SBX_WORKSPACE_REFUSE = 0,
    /* Its files stay as they are: a manifest entry that would replace one fails the create
     * (SBX_E_EXISTS, naming the entry and the file) and leaves the directory as it was;
     * directories are shared. Refused with a snapshot (a restore writes over the directory). */
    SBX_WORKSPACE_KEEP,
    /* The manifest's entries (and a snapshot) replace the files they name; the rest stays. */
    SBX_WORKSPACE_OVERWRITE,
};

struct sbx_create_spec {
    const struct sbx_manifest *manifest;  /* borrowed; NULL: an empty manifest */
    const char *workspace;                /* existing host directory to use as the workspace (it
                                             is never deleted); NULL: a fresh one */
    enum sbx_workspace_existing existing; /* with workspace: what it already holds */
    const char *base_dir; /* where manifest local_* sources are resolved; NULL: cwd */
    /* Harness credentials (sbx_manifest_harness_credential) the manifest's environment may
     * read; NULL: none. Borrowed. */
    const struct sbx_strv *pass_secrets;
    /* A snapshot to start from: an archive FILE (imported into the default store) or a
     * reference (prefix) in it, resolved by sbx_snapshot_resolve. Its content is restored into
     * the fresh workspace, then only the manifest's ephemeral entries are materialised. A
     * snapshot that cannot be restored fails the create and leaves nothing. NULL: none. */
    const char *snapshot;
    /* The sandbox id to use (the provider's id syntax; SBX_E_EXISTS when in use). NULL: a
     * random one. For start and resume, which bring a sandbox back under its id. */
    const char *id;
    /* Progress of materialising the manifest (step "materialise", done/total files, a
     * local_dir entry counting the files it copies; "fetch"
     * for each git_repo entry) and of restoring a snapshot. NULL: none. */
    sbx_progress_fn *progress;
    void *progress_data;
};

/* Make a client for provider ("local"; NULL: the default one). options: the provider's options
 * struct (for "local", const struct sbx_local_options *), borrowed for the call only; NULL for
 * defaults. *out: caller owns (sbx_client_free). SBX_E_NOTFOUND for an unknown provider, naming
 * the known ones. The same options as JSON, for any provider: sbx_client_new_json
 * (sbx/provider.h), which also lists the providers, their traits and their options. */
SBX_API int sbx_client_new(const char *provider, const void *options, struct sbx_client **out,
                           struct sbx_error *err);
SBX_API void sbx_client_free(struct sbx_client *c);
SBX_API const char *sbx_client_provider(const struct sbx_client *c);

/* Create a sandbox, materialise the manifest into its workspace and return a session on it.
 * The manifest's environment applies to every command; git_repo entries are fetched on this
 * side (the `git` program) and recorded with their resolved commit in the session state under
 * "materialized". On failure nothing is left behind. *out: caller owns (sbx_session_free). */
SBX_API int sbx_client_create(struct sbx_client *c, const struct sbx_create_spec *spec,
                              struct sbx_session **out, struct sbx_error *err);
/* Attach to a live sandbox by id (a unique prefix of it is accepted), or by the name sbx's
 * record gives one of this provider's sandboxes (sbx_sandbox_record_name). SBX_E_NOTFOUND "no
 * sandbox 'x'", SBX_E_SANDBOX "sandbox 'x' is gone" when its supervisor died. */
SBX_API int sbx_client_attach(struct sbx_client *c, const char *id, struct sbx_session **out,
                              struct sbx_error *err);
/* sbx_client_attach for one command (the CLI's `sandbox exec`): the provider may skip asking the
 * sandbox whether it is live, which costs a round trip of its own. The id is still resolved and
 * the session state still read, so "no sandbox 'x'" and "is stopped" are told here; a sandbox
 * whose supervisor died attaches, and its first operation fails with SBX_E_SANDBOX "sandbox 'x'
 * is gone", the error sbx_client_attach gives. Callers that decide from attach whether a sandbox
 * lives (sbx_client_resume) use sbx_client_attach. Providers without a cheaper path attach as
 * sbx_client_attach does. */
SBX_API int sbx_client_attach_once(struct sbx_client *c, const char *id, struct sbx_session **out,
                                   struct sbx_error *err);
/* What a rebuild takes from the caller rather than from the state (trusted configuration). */
struct sbx_resume_opts {
    /* Harness credentials the manifest's environment references may read (as for create);
     * NULL: none. Borrowed. */
    const struct sbx_strv *pass_secrets;
    /* Where the manifest's ephemeral local_* sources are resolved; NULL: cwd. */
    const char *base_dir;
    /* Progress of a rebuild (as sbx_create_spec.progress). NULL: none. */
    sbx_progress_fn *progress;
    void *progress_data;
    /* The trusted manifest the sandbox was made from, or NULL. A session state never holds
     * the values of ephemeral environment variables (nor secrets); a rebuilt sandbox gets
     * this manifest's ephemeral variables instead. Borrowed. */
    const struct sbx_manifest *manifest;
};

/* Reconnect to, or rebuild, the sandbox of a session state (sbx_session_state, or
 * sbx_session_state_parse of a saved one; checked again here). When the sandbox with that id is
 * live: attach. Else, when the state has a snapshot: a new sandbox with the same id (a fresh
 * one when the id is taken by a leftover), the options, limits and exposed ports of the state
 * and its manifest, the content restored from the snapshot and the ephemeral entries
 * materialised again. Path grants are trusted configuration, never taken from a state: the
 * client's own grants apply, and a state that records a grant the client does not give fails
 * (SBX_E_PERM, naming it). Likewise no isolation, the host's network or a network allow list
 * are rebuilt only when the client's own options ask for as much (local provider). A state of a
 * stopped sandbox brings that sandbox back (as sbx_client_start). SBX_E_NOTFOUND "sandbox 'x' is
 * gone and its state has no snapshot". opts may be NULL. *out: caller owns (sbx_session_free). */
SBX_API int sbx_client_resume_with(struct sbx_client *c, const json_t *state,
                                   const struct sbx_resume_opts *opts, struct sbx_session **out,
                                   struct sbx_error *err);
/* sbx_client_resume_with without options. */
SBX_API int sbx_client_resume(struct sbx_client *c, const json_t *state, struct sbx_session **out,
                              struct sbx_error *err);

/* Stop a live sandbox (id or unique prefix): snapshot its workspace into the default store,
 * hold the snapshot, record the session state as a stopped record, then end the sandbox and
 * free everything else (processes, runtime dir, cgroups, the workspace it made). It is then
 * listed with status "stopped" and comes back with sbx_client_start. A given workspace
 * directory is left where it is. *out_ref (may be NULL): the snapshot, caller frees.
 * SBX_E_UNSUPPORTED for a provider without stop. */
SBX_API int sbx_client_stop(struct sbx_client *c, const char *id, char **out_ref,
                            struct sbx_error *err);
/* The session state of sandbox id (or unique prefix): for a live one, sbx_session_state after
 * sbx_session_snapshot when snapshot is non-zero (so that the state can rebuild it once it is
 * gone); for a stopped one, its record. *out: caller owns (json_decref). */
SBX_API int sbx_client_state(struct sbx_client *c, const char *id, int snapshot, json_t **out,
                             struct sbx_error *err);
/* Bring a stopped sandbox back: the same id, options, limits, grants (its record is this
 * user's own trusted file), manifest and workspace content; then its stopped record and the
 * hold on its snapshot go. opts may be NULL. */
SBX_API int sbx_client_start(struct sbx_client *c, const char *id,
                             const struct sbx_resume_opts *opts, struct sbx_session **out,
                             struct sbx_error *err);
/* The state objects of every live sandbox, and of every stopped one (its record, with
 * "status": "stopped" and the snapshot's "snapshot_bytes"), as a JSON array sorted by creation
 * time. Sandboxes whose supervisor died are not listed (sbx_client_list_all shows them). *out:
 * caller owns (json_decref). */
SBX_API int sbx_client_list(struct sbx_client *c, json_t **out, struct sbx_error *err);
/* Stop and remove a sandbox by id (or unique prefix), live, dead or stopped (its record goes
 * and its snapshot is no longer held); keep_workspace keeps even a workspace the sandbox
 * created. */
SBX_API int sbx_client_remove(struct sbx_client *c, const char *id, int keep_workspace,
                              struct sbx_error *err);
/* Every sandbox of the caller the provider knows of, live or not, sorted by creation time: the
 * live ones' state objects with "status":"live", and for the others {"id", "status", "state"
 * (the state object or null), "leftovers": {"runtime_dir", "workspace" (null when gone),
 * "cgroups": [...], "supervisor_pid" (null when dead)}}. status: "live", "suspended" (a
 * process of it is stopped by a signal), "creating" (its creator is still at work), "dead", or
 * "stopped" (sbx_client_stop: the stopped record's state with "snapshot_bytes"). SBX_E_UNSUPPORTED
 * for a provider without leftovers. *out: caller owns (json_decref). */
SBX_API int sbx_client_list_all(struct sbx_client *c, json_t **out, struct sbx_error *err);
/* Remove every leftover of the caller's dead sandboxes (status "dead" above: runtime dirs,
 * their workspaces unless keep_workspace, cgroups, processes) and stale empty sandbox cgroups;
 * never a live, suspended, stopped or creating sandbox, never another user's. *out (may be NULL)
 * receives an array of {"sandbox" (id or null), "kind", "path"}, one per thing removed; caller
 * owns. */
SBX_API int sbx_client_prune(struct sbx_client *c, int keep_workspace, json_t **out,
                             struct sbx_error *err);

#endif
