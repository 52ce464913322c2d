/* sbx: file helpers that stay beneath a directory fd.
 *
 * Workspace files are reached through a directory fd and openat2(RESOLVE_BENEATH |
 * RESOLVE_NO_MAGICLINKS): the kernel resolves and opens in one step and refuses any path,
 * symlink or ".." that would leave the directory, so there is no check-then-use window.
 * Paths given to these functions are relative; run them through sbx_path_normalize() first.
 * Every fd returned is O_CLOEXEC. Every read has a size limit (SBX_E_TOOBIG past it).
 * A symlink that would leave the directory is SBX_E_PERM "'x' resolves outside the workspace". */
#ifndef SBX_FS_H
#define SBX_FS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "buf.h"
#include "common.h"
#include "error.h"

enum sbx_fs_flags {
    SBX_FS_NOFOLLOW =
            1 << 0, /* refuse symlinks anywhere in the path, even inside (RESOLVE_NO_SYMLINKS) */
    SBX_FS_PARENTS = 1 << 1,   /* mkdir / write: create missing parent directories */
    SBX_FS_EXCL = 1 << 2,      /* write / mkdir: fail with SBX_E_EXISTS if it exists */
    SBX_FS_RECURSIVE = 1 << 3, /* remove: remove directories and their contents */
    SBX_FS_ATOMIC = 1 << 4,    /* write: temp file + fsync + rename, never a half-written file */
    SBX_FS_APPEND = 1 << 5,    /* write: append instead of truncating */
};

/* openat2 beneath dirfd. flags are open(2) flags (O_CLOEXEC is added); fsflags SBX_FS_NOFOLLOW.
 * *out_fd: caller owns (close). path "" or "." opens dirfd's directory itself. */
SBX_API int sbx_fs_open(int dirfd, const char *path, int oflags, mode_t mode, int fsflags,
                        int *out_fd, struct sbx_error *err);

/* Read a whole regular file beneath dirfd, at most max bytes (SBX_E_TOOBIG past it, checked
 * before reading), appending to out. A directory or device is SBX_E_INVAL. */
SBX_API int sbx_fs_read(int dirfd, const char *path, size_t max, struct sbx_buf *out,
                        struct sbx_error *err);

/* Write data to path beneath dirfd with mode (applied exactly, umask ignored) for new files.
 * fsflags: SBX_FS_PARENTS, SBX_FS_EXCL, SBX_FS_ATOMIC, SBX_FS_APPEND, SBX_FS_NOFOLLOW. Refuses
 * to write through a final symlink. */
SBX_API int sbx_fs_write(int dirfd, const char *path, const void *data, size_t n, mode_t mode,
                         int fsflags, struct sbx_error *err);

/* mkdir beneath dirfd. With SBX_FS_PARENTS missing parents are created and an existing
 * directory is not an error (unless SBX_FS_EXCL). */
SBX_API int sbx_fs_mkdir(int dirfd, const char *path, mode_t mode, int fsflags,
                         struct sbx_error *err);

/* Remove a file, symlink (never its target) or empty directory; with SBX_FS_RECURSIVE a whole
 * tree, never following symlinks. Removing "" (the directory itself) is refused. A missing path
 * is SBX_E_NOTFOUND. */
SBX_API int sbx_fs_remove(int dirfd, const char *path, int fsflags, struct sbx_error *err);

/* lstat-like stat beneath dirfd (the final component is not followed). */
SBX_API int sbx_fs_stat(int dirfd, const char *path, struct stat *out, struct sbx_error *err);

/* Host-side helpers. */
/* Read a whole file named by an absolute or cwd-relative host path, at most max bytes. */
SBX_API int sbx_fs_read_path(const char *path, size_t max, struct sbx_buf *out,
                             struct sbx_error *err);
/* Write a state file in dirfd atomically: "name.tmp", fsync, rename, fsync the directory. */
SBX_API int sbx_fs_write_state(int dirfd, const char *name, const void *data, size_t n, mode_t mode,
                               struct sbx_error *err);
/* read(2)/write(2) loops that retry EINTR and short transfers. read_all stops at EOF or max
 * bytes (then SBX_E_TOOBIG if more data follows). */
SBX_API int sbx_fd_read_all(int fd, size_t max, struct sbx_buf *out, struct sbx_error *err);
SBX_API int sbx_fd_write_all(int fd, const void *p, size_t n, struct sbx_error *err);
/* close(2) that keeps errno and accepts -1; sets *fd to -1. */
SBX_API void sbx_fd_close(int *fd);

#endif
