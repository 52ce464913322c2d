/* Workspace files and snapshots of a remote sandbox, for a provider that can run a command in
 * the sandbox and move a whole file's contents to and from an absolute path in it (hosted
 * providers: e2b and the others of docs/internals/hosted-providers.md).
 *
 * Everything but contents goes through one fixed POSIX shell script run as a command (paths
 * passed as arguments, never spliced into a shell line), which resolves each path in the
 * sandbox with realpath and refuses one that leads out of the workspace (a planted symlink):
 * SBX_E_PERM. Contents go up to a staging name in the workspace's top directory and are moved
 * into place by the script (one rename: a replacement is atomic); they come down from the path
 * the script resolved. A process in the sandbox that swaps a directory for a symlink between
 * the check and the transfer can make one operation land elsewhere in its own sandbox, never on
 * this host.
 *
 * Workspace snapshots are tar streams in both directions, so they move between providers
 * through sbx's snapshot store: the sandbox's tar writes the workspace into a file in the
 * sandbox's /tmp, which comes down and is imported as hostile input into a private store; the
 * other way, the store's export is rewritten as a plain tar (the sandbox's tar needs no zstd),
 * goes up and is unpacked by the sandbox's tar. */
#ifndef SBX_SANDBOX_SHELLFS_SHELLFS_H
#define SBX_SANDBOX_SHELLFS_SHELLFS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <jansson.h>

#include "sandbox/provider.h"
#include "sbx/buf.h"
#include "sbx/error.h"

struct sbx_snapshot_store;

/* A short command run to completion: its exit status (-1 before it ends) and its output, each
 * bounded by the size given to init. */
struct sbx__shell_run {
    int code;
    struct sbx_buf out, err;
};
void sbx__shell_run_init(struct sbx__shell_run *r, size_t max);
void sbx__shell_run_release(struct sbx__shell_run *r);

/* What the provider gives. Each returns 0 or a negative SBX_E_* with err set. */
struct sbx__shellfs_ops {
    /* Run argv (argv[0] a program, found by the sandbox's PATH without a slash) in the sandbox,
     * stdin empty, as the workspace's user; fill out. A non-zero exit status is not an error here.
     */
    int (*run)(void *ctx, const char *const *argv, struct sbx__shell_run *out,
               struct sbx_error *err);
    /* The file at the absolute path abs into fd (at its offset), at most max bytes
     * (SBX_E_TOOBIG beyond). */
    int (*get)(void *ctx, const char *abs, int fd, uint64_t max, struct sbx_error *err);
    /* size bytes from fd (at its offset) into a new file at abs (replaced if it exists). */
    int (*put)(void *ctx, const char *abs, int fd, uint64_t size, struct sbx_error *err);
};

struct sbx__shellfs_copy;
struct sbx__shellfs {
    const struct sbx__shellfs_ops *ops;
    void *ctx;
    const char *root;               /* the workspace, absolute */
    struct sbx__shellfs_copy *copy; /* the session's copy for workspace_fd, or NULL */
};

/* Run argv; a non-zero exit status fails with what the command said ("cannot WHAT 'rel': ..."). */
int sbx__shellfs_run_ok(const struct sbx__shellfs *fs, const char *const *argv, const char *what,
                        const char *rel, struct sbx__shell_run *out, struct sbx_error *err);
/* An unnamed temporary file on this host (O_TMPFILE in $TMPDIR or /tmp). */
int sbx__shellfs_tmpfile(int *out, struct sbx_error *err);

/* The session file ops (provider.h), paths relative to the workspace. */
int sbx__shellfs_ls(const struct sbx__shellfs *fs, const char *path, struct sbx_dirlist *out,
                    struct sbx_error *err);
int sbx__shellfs_stat(const struct sbx__shellfs *fs, const char *path, struct sbx_dirent *out,
                      struct sbx_error *err);
int sbx__shellfs_mkdir(const struct sbx__shellfs *fs, const char *path, int flags,
                       struct sbx_error *err);
int sbx__shellfs_rm(const struct sbx__shellfs *fs, const char *path, int flags,
                    struct sbx_error *err);
int sbx__shellfs_chmod(const struct sbx__shellfs *fs, const char *path, mode_t mode,
                       struct sbx_error *err);
int sbx__shellfs_read_open(const struct sbx__shellfs *fs, const char *path, int *out_fd,
                           uint64_t *out_size, struct sbx_error *err);
int sbx__shellfs_write(const struct sbx__shellfs *fs, const char *path,
                       const struct sbx_file_reader *r, uint64_t max, mode_t mode, int flags,
                       struct sbx_error *err);

/* Records of the FS script's listings (and of the docker, kubernetes and lxd providers' own
 * listing scripts): "<mode hex> <size> <uid> <gid> <mtime>\n<name>\0" and, for a symlink,
 * "<target>\0"; names are NUL-terminated, so none can forge a record. Appended to out (the
 * caller releases it on error). SBX_E_PARSE "a directory listing is garbled", or, with
 * path_error, "a directory listing names a path" for a name with a '/'; SBX_E_TOOBIG past
 * SBX_LS_MAX_ENTRIES. */
int sbx__shellfs_parse_entries(const char *p, size_t n, int path_error, struct sbx_dirlist *out,
                               struct sbx_error *err);
/* Entries in name order. */
void sbx__shellfs_sort_entries(struct sbx_dirlist *l);

/* The session file ops (provider.h) of a provider whose files go through this script: each
 * asks the session for its shellfs (sbx_session_ops.shellfs, which the provider sets). */
int sbx__shellfs_s_ls(struct sbx_session *s, const char *path, struct sbx_dirlist *out,
                      struct sbx_error *err);
int sbx__shellfs_s_stat(struct sbx_session *s, const char *path, struct sbx_dirent *out,
                        struct sbx_error *err);
int sbx__shellfs_s_mkdir(struct sbx_session *s, const char *path, int flags, struct sbx_error *err);
int sbx__shellfs_s_rm(struct sbx_session *s, const char *path, int flags, struct sbx_error *err);
int sbx__shellfs_s_chmod(struct sbx_session *s, const char *path, mode_t mode,
                         struct sbx_error *err);
int sbx__shellfs_s_read_open(struct sbx_session *s, const char *path, int *out_fd,
                             uint64_t *out_size, struct sbx_error *err);
int sbx__shellfs_s_write(struct sbx_session *s, const char *path, const struct sbx_file_reader *r,
                         uint64_t max, mode_t mode, int flags, struct sbx_error *err);
/* workspace_fd: a fresh copy of the workspace into the shellfs's copy (which must be set), its
 * fd borrowed until the next call or the session's end. */
int sbx__shellfs_s_workspace_fd(struct sbx_session *s, int *out, struct sbx_error *err);
/* All of them, for a provider's struct sbx_session_ops initialiser (its .shellfs set beside). */
#define SBX__SHELLFS_SESSION_FILE_OPS                                                              \
    .read_open = sbx__shellfs_s_read_open, .write = sbx__shellfs_s_write, .ls = sbx__shellfs_s_ls, \
    .stat = sbx__shellfs_s_stat, .mkdir = sbx__shellfs_s_mkdir, .rm = sbx__shellfs_s_rm,           \
    .chmod = sbx__shellfs_s_chmod

/* A copy of the workspace on this host, for taking a snapshot of. */
struct sbx__shellfs_copy {
    char *dir; /* a private host directory, or NULL */
    int fd;    /* its fd, -1 */
};
#define SBX__SHELLFS_COPY_INIT \
    {                          \
        NULL, -1               \
    }
/* The workspace as a tar from the sandbox into fd (at its offset). */
int sbx__shellfs_pack(const struct sbx__shellfs *fs, int fd, struct sbx_error *err);
/* Replace copy with a fresh copy of the workspace; its fd is the session's workspace_fd. */
int sbx__shellfs_copy_take(const struct sbx__shellfs *fs, struct sbx__shellfs_copy *copy,
                           struct sbx_error *err);
void sbx__shellfs_copy_drop(struct sbx__shellfs_copy *copy);
/* The store's snapshot ref unpacked into the workspace. */
int sbx__shellfs_restore(const struct sbx__shellfs *fs, struct sbx_snapshot_store *st,
                         const char *ref, struct sbx_error *err);

/* ---------------------------------------------------------------------------------------------
 * Creating a hosted sandbox (fill.c) */

struct sbx_create_spec;
struct sbx_manifest;

/* mkdir -p of the workspace in the sandbox. */
int sbx__shellfs_make_root(const struct sbx__shellfs *fs, struct sbx_error *err);
/* A new sandbox's content: the manifest noted on the session s, the snapshot snap_ref (when not
 * NULL) unpacked into the workspace — by the shared tar stream through fs, or with fs NULL by
 * the session's own workspace_import (sbx__session_restore_stream) — then the manifest's
 * entries (only the ephemeral ones over a snapshot). The session state gets "snapshot",
 * "manifest" (without secret values) and "materialized". */
int sbx__shellfs_fill(const struct sbx__shellfs *fs, struct sbx_session *s, json_t *state,
                      const struct sbx_create_spec *spec, struct sbx_snapshot_store *store,
                      const char *snap_ref, struct sbx_error *err);
/* A manifest's accounts where the sandbox has one user it cannot add to: a user other than
 * user (NULL: any user) or a group is SBX_E_UNSUPPORTED, the message naming what ("an e2b
 * sandbox"). */
int sbx__shellfs_check_accounts(const struct sbx_manifest *m, const char *what, const char *user,
                                struct sbx_error *err);

/* ---------------------------------------------------------------------------------------------
 * Starting a command through a shell preamble (launch.c) */

/* The error a start preamble's one-letter refusal means: 'N' command not found, 'X' cannot run
 * it, 'C' the working directory is not one, 'P' it leads out of the workspace, 'E' an
 * environment entry was refused (name: the command's, cwd: the working directory asked for).
 * 0 for another letter: the provider's own, or a garbled start. */
int sbx__shellfs_start_error(char mark, const char *name, const char *cwd, struct sbx_error *err);
/* argv as one shell line, every word single-quoted. */
char *sbx__shellfs_quote_argv(const char *const *argv);
/* The words of a command started through the shared preamble, pushed onto a: /bin/sh -c of a
 * fixed script that runs the preamble in a session of its own (`setsid -w` where the sandbox
 * has it, so a timeout or cancel can signal the command's own process group); the preamble
 * exports spec's environment, enters cwd under root (refusing, by the letters above, one that
 * resolves out of it), tells a missing program from one that cannot run, prints "S<pid>
 * <pgid>\n" first on stdout and runs the command (spec's argv, or /bin/sh -c of its command);
 * unless spec keeps background processes it ends its group after the command. */
void sbx__shellfs_launch_argv(struct sbx_strv *a, const char *root, const char *cwd,
                              const struct sbx_exec_spec *spec);

#endif
