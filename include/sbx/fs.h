/* sbx: file helpers that stay beneath a directory fd.
 *
 * Workspace files are reached through a directory fd and openat2(RESOLVE_BENEATH |
 * RESOLVE_NO_MAGICLINKS): the kernel resolves and opens in one step and refuses any path,
 * symlink or ".." that would leave the directory, so there is no check-then-use window.
 * Where openat2 is missing (Linux < 5.6, valgrind < 3.20, a seccomp filter answering ENOSYS)
 * the same resolution runs in user space, with the same results and errors: the path is walked
 * one component at a time with openat(O_PATH | O_NOFOLLOW) from the directory fd, symlinks are
 * read and their targets spliced into the path (absolute ones refused, at most 40), ".." goes
 * back to the directory fd it came from and is never looked up on disk, and no symlink on
 * procfs is followed. Each step is relative to an fd reached that way and the kernel never
 * follows a link itself, so a concurrent rename or symlink swap can make a call fail but never
 * leave the directory. The first ENOSYS is remembered for the process. The fallback holds one
 * fd per directory level of the path while it resolves it.
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

/* The mode bits sbx gives anything it creates or chmods (in a workspace or on the host): the
 * permissions and the sticky bit, never S_ISUID or S_ISGID. A file that came from a sandbox, a
 * manifest or an archive must not run with its owner's identity on the host, and the owner of
 * a workspace may be root. Every mode sbx_fs applies is masked with it. */
#define SBX_FS_MODE_MASK 01777

/* openat2 beneath dirfd. flags are open(2) flags (O_CLOEXEC is added); fsflags SBX_FS_NOFOLLOW.
 * *out_fd: caller owns (close). path "" or "." opens dirfd's directory itself. Symlinks inside
 * the tree are followed unless SBX_FS_NOFOLLOW; magic links (/proc/PID/fd/N, /proc/PID/root)
 * never are, and without openat2 no symlink on procfs is. Errors: SBX_E_PERM "'x' resolves
 * outside the workspace" (absolute path, "..", symlink or magic link leaving dirfd; also a
 * symlink loop or more than 40 links), SBX_E_PERM "'x' passes through a symlink" (NOFOLLOW),
 * SBX_E_PERM "'x' is a symlink" (O_NOFOLLOW on a final symlink), SBX_E_NOTFOUND.
 * Blocks only as open(2) does (a FIFO opened without O_NONBLOCK waits for a writer). */
SBX_API int sbx_fs_open(int dirfd, const char *path, int oflags, mode_t mode, int fsflags,
                        int *out_fd, struct sbx_error *err);

/* Read a whole regular file beneath dirfd, at most max bytes, appending to out. The size is
 * checked with fstat before reading and again while reading (a file may grow, and /proc files
 * report size 0): SBX_E_TOOBIG past max or past out's own limit. A directory, FIFO or device is
 * SBX_E_INVAL (never blocks on a FIFO). On failure out is left as it was. */
SBX_API int sbx_fs_read(int dirfd, const char *path, size_t max, struct sbx_buf *out,
                        struct sbx_error *err);

/* Write data to path beneath dirfd with mode (applied exactly, umask ignored, masked with
 * SBX_FS_MODE_MASK) for new files.
 * fsflags: SBX_FS_PARENTS, SBX_FS_EXCL, SBX_FS_ATOMIC, SBX_FS_APPEND, SBX_FS_NOFOLLOW.
 * - In place (default): an existing regular file is truncated (or appended to) and keeps its
 *   mode; a final symlink is refused with SBX_E_PERM "'x' is a symlink", never written through;
 *   a directory, FIFO or device is refused. A failed write may leave a partial file.
 * - SBX_FS_ATOMIC: a uniquely named temp file (".sbx-<random>.tmp", O_EXCL) in the same
 *   directory is written, given mode, fsynced and renamed over path, then the directory is
 *   fsynced. Readers see the old or the new file, never a mix; on failure the temp is removed.
 *   The rename replaces a final symlink itself (its target is untouched), and mode always
 *   applies because the file is new. With SBX_FS_EXCL the rename fails if path exists
 *   (RENAME_NOREPLACE). SBX_FS_ATOMIC | SBX_FS_APPEND is SBX_E_INVAL.
 * - SBX_FS_PARENTS creates missing parent directories with mode 0755. */
SBX_API int sbx_fs_write(int dirfd, const char *path, const void *data, size_t n, mode_t mode,
                         int fsflags, struct sbx_error *err);

/* mkdir beneath dirfd; every directory created gets mode exactly (umask ignored; masked with
 * SBX_FS_MODE_MASK, so a setgid parent does not pass S_ISGID on either). With
 * SBX_FS_PARENTS missing parents are created and an existing directory is not an error (unless
 * SBX_FS_EXCL); an existing non-directory on the way is SBX_E_EXISTS "'x' exists and is not a
 * directory". Without it an existing path is SBX_E_EXISTS. */
SBX_API int sbx_fs_mkdir(int dirfd, const char *path, mode_t mode, int fsflags,
                         struct sbx_error *err);

/* Remove a file, symlink (never its target) or empty directory; with SBX_FS_RECURSIVE a whole
 * tree, never following symlinks and never descending into another mount (a mount point inside
 * the tree is SBX_E_PERM "it is a mount point"), at most 256 directories deep (SBX_E_TOOBIG);
 * a directory in it that its owner may not read, search or write gets u+rwx on the way.
 * Removing "" (the directory itself) is SBX_E_INVAL. A missing path is SBX_E_NOTFOUND; a
 * non-empty directory without SBX_FS_RECURSIVE is SBX_E_INVAL. A failed recursive remove may
 * have removed part of the tree. */
SBX_API int sbx_fs_remove(int dirfd, const char *path, int fsflags, struct sbx_error *err);

/* lstat-like stat beneath dirfd (the final component is not followed). */
SBX_API int sbx_fs_stat(int dirfd, const char *path, struct stat *out, struct sbx_error *err);

/* Host-side helpers. */
/* Read a whole file named by an absolute or cwd-relative host path, at most max bytes. */
SBX_API int sbx_fs_read_path(const char *path, size_t max, struct sbx_buf *out,
                             struct sbx_error *err);
/* Write a state file in dirfd atomically: "name.tmp", fsync, rename, fsync the directory.
 * name is a plain file name (no '/'; SBX_E_INVAL otherwise); mode is applied exactly. A stale
 * "name.tmp" left by a crash is replaced. dirfd must be readable (not O_PATH): it is fsynced. */
SBX_API int sbx_fs_write_state(int dirfd, const char *name, const void *data, size_t n, mode_t mode,
                               struct sbx_error *err);
/* read(2)/write(2) loops that retry EINTR and short transfers; they block as the fd does.
 * read_all appends to out and stops at EOF; reading exactly max bytes is fine, more is
 * SBX_E_TOOBIG (and out is left as it was). EAGAIN on a non-blocking fd is an error. */
SBX_API int sbx_fd_read_all(int fd, size_t max, struct sbx_buf *out, struct sbx_error *err);
SBX_API int sbx_fd_write_all(int fd, const void *p, size_t n, struct sbx_error *err);
/* Holes, for copies that keep files sparse. At fd's current offset: *hole gets the length of the
 * hole there (0 at data, and always 0 when fd cannot tell: a pipe, a file system without
 * SEEK_HOLE) and the offset moves past it; *data gets the length of the data that follows, up to
 * the next hole or EOF (UINT64_MAX when unknown). A hole that runs to EOF counts as hole. */
SBX_API int sbx_fd_next_extent(int fd, uint64_t *hole, uint64_t *data, struct sbx_error *err);
/* Copy from in to out, from their current offsets until EOF, keeping in's holes as holes in out
 * (seek over them, then ftruncate to the final length); out must not be O_APPEND. When out cannot
 * seek (a pipe), holes are written as zeros. At most max data bytes (holes do not count; 0: no
 * limit; SBX_E_TOOBIG past it). *copied (may be NULL) gets the data bytes written. */
SBX_API int sbx_fd_copy_sparse(int in, int out, uint64_t max, uint64_t *copied,
                               struct sbx_error *err);
/* close(2) that keeps errno and accepts -1; sets *fd to -1. */
SBX_API void sbx_fd_close(int *fd);

#endif
