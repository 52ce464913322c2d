/* File helpers beneath a directory fd (openat2), plus host-side read/write loops.
 *
 * Every workspace path is resolved by the kernel with RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS in
 * the same call that opens it. Operations that act on a name rather than an open file (mkdirat,
 * unlinkat, renameat) first open the parent directory that way and then act on a single final
 * component relative to that fd, so no path is ever checked and then used.
 *
 * Where openat2 is missing (ENOSYS: Linux < 5.6, or valgrind < 3.20) the same resolution is done
 * in user space by fallback_openat2(), one component at a time; see there. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/grow.h"
#include "core/fs-internal.h"
#include "sbx/fs.h"
#include "sbx/hash.h"

/* Deepest directory nesting sbx_fs_remove descends into; each level holds one fd. Host trees
 * (sbx__fs_remove_tree: workspaces, runtime dirs, checkouts) may be nested deeper by whatever
 * ran in them, and are bounded by the fd limit long before this one. */
#define REMOVE_MAX_DEPTH  256
#define TREE_MAX_DEPTH    4096
#define REMOVE_MAX_PASSES 16
/* openat2 returns EAGAIN when a concurrent rename or mount races a ".." lookup. */
#define OPENAT2_RETRIES 8
/* Directories created on the way to a file written with SBX_FS_PARENTS. */
#define PARENT_DIR_MODE 0755
#define READ_CHUNK      65536

static const char *shown(const char *path)
{
    return path[0] ? path : ".";
}

/* Symlinks one resolution may expand, as the kernel's MAXSYMLINKS. */
#define MAX_SYMLINKS 40

/* Set once openat2 has failed with ENOSYS, so the system call is tried only once. */
static atomic_int openat2_missing;
static atomic_int fallback_forced;

void sbx__fs_set_force_fallback(int on)
{
    atomic_store(&fallback_forced, on != 0);
}

static int fail(int e)
{
    errno = e;
    return -1;
}

/* Which mount an fd is on: the mount id from statx (Linux 5.8+) or name_to_handle_at, else the
 * device number, which still tells different filesystems apart. Keys of different kinds come
 * from filesystems that differ in what they support, so they never name the same mount. */
struct mount_key {
    int kind;
    uint64_t id;
};

static int mount_key(int fd, struct mount_key *k)
{
    struct statx stx;
    if (statx(fd, "", AT_EMPTY_PATH, STATX_MNT_ID, &stx) == 0 && (stx.stx_mask & STATX_MNT_ID)) {
        *k = (struct mount_key){1, stx.stx_mnt_id};
        return 0;
    }
    struct file_handle *fh = sbx_xmalloc(sizeof(*fh) + MAX_HANDLE_SZ);
    fh->handle_bytes = MAX_HANDLE_SZ;
    int mnt = 0;
    int r = name_to_handle_at(fd, "", fh, &mnt, AT_EMPTY_PATH);
    free(fh);
    if (r == 0) {
        *k = (struct mount_key){2, (uint64_t)mnt};
        return 0;
    }
    struct stat st;
    if (fstat(fd, &st) < 0)
        return -1;
    *k = (struct mount_key){3, (uint64_t)st.st_dev};
    return 0;
}

/* One user-space resolution: the directories walked so far, as fds, and the path left. */
struct walk {
    int *dirs; /* dirs[0] is the caller's dirfd (borrowed); the others are owned O_PATH fds */
    size_t ndirs, cap;
    char *path; /* owned; what is left to resolve is a suffix of it */
    int links;  /* symlinks expanded so far */
    uint64_t resolve;
    struct mount_key base_mount; /* with RESOLVE_NO_XDEV */
};

static int walk_dir(const struct walk *w)
{
    return w->dirs[w->ndirs - 1];
}

/* ".." goes back to the directory we came from; there is none above the base. */
static int walk_up(struct walk *w)
{
    if (w->ndirs == 1)
        return fail(EXDEV);
    sbx_fd_close(&w->dirs[--w->ndirs]);
    return 0;
}

/* With RESOLVE_NO_XDEV, refuse fd (just opened in walk_dir(w)) if it lies on another mount
 * than the base. On failure fd is closed. */
static int walk_check_mount(struct walk *w, int *fd)
{
    struct mount_key k;
    if (!(w->resolve & RESOLVE_NO_XDEV))
        return 0;
    if (mount_key(*fd, &k) == 0 && k.kind == w->base_mount.kind && k.id == w->base_mount.id)
        return 0;
    sbx_fd_close(fd);
    return fail(EXDEV);
}

/* Step into the directory *fd (O_PATH, just opened in walk_dir(w)), taking ownership of it:
 * *fd is -1 afterwards, and closed on failure. */
static int walk_down(struct walk *w, int *fd)
{
    struct stat st;
    int e = fstat(*fd, &st) < 0 ? errno : S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
    if (e) {
        sbx_fd_close(fd);
        return fail(e);
    }
    if (walk_check_mount(w, fd) < 0)
        return -1;
    SBX_ALLOC_GROW(w->dirs, w->ndirs + 1, w->cap);
    w->dirs[w->ndirs++] = *fd;
    *fd = -1;
    return 0;
}

/* Replace the symlink at linkfd (O_PATH | O_NOFOLLOW, found in walk_dir(w)) by its target,
 * in front of after, the rest of the path beyond the link. The link is only ever read, never
 * followed by the kernel. */
static int walk_follow(struct walk *w, int linkfd, const char *after)
{
    struct statfs sfs;
    char target[PATH_MAX];
    if (w->resolve & RESOLVE_NO_SYMLINKS)
        return fail(ELOOP);
    if (++w->links > MAX_SYMLINKS)
        return fail(ELOOP);
    /* procfs is where magic links live (/proc/PID/fd/N, /proc/PID/root): follow no link there */
    if (fstatfs(walk_dir(w), &sfs) < 0)
        return -1;
    if (sfs.f_type == PROC_SUPER_MAGIC)
        return fail(ELOOP);
    ssize_t n = readlinkat(linkfd, "", target, sizeof(target));
    if (n < 0)
        return -1;
    if ((size_t)n >= sizeof(target))
        return fail(ENAMETOOLONG);
    if (n == 0)
        return fail(ENOENT);
    if (target[0] == '/')
        return fail(EXDEV);
    target[n] = '\0';
    char *next = sbx_xasprintf("%s%s", target, after);
    free(w->path);
    w->path = next;
    return 0;
}

/* Open the final component with the caller's flags. */
static int walk_open_last(struct walk *w, const char *name, int flags, mode_t mode)
{
    int fd = openat(walk_dir(w), name, flags, mode);
    if (fd >= 0 && walk_check_mount(w, &fd) < 0)
        return -1;
    return fd;
}

static int is_symlink(int fd)
{
    struct stat st;
    return fstat(fd, &st) == 0 && S_ISLNK(st.st_mode);
}

/* openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS [| RESOLVE_NO_SYMLINKS] [| RESOLVE_NO_XDEV])
 * in user space, with the same errno results. The path is walked one component at a time from
 * dirfd with openat(O_PATH | O_NOFOLLOW), so the kernel never follows a link and never resolves
 * more than one name; symlinks are read and their target spliced into the path; ".." pops back
 * to the directory fd it came from and is never looked up on disk. Every step is relative to an
 * fd reached from dirfd this way, so a concurrent rename or symlink swap can make the call fail
 * (ENOENT, ENOTDIR, ELOOP) but never leave dirfd. */
static int fallback_openat2(int dirfd, const char *path, const struct open_how *how)
{
    int flags = (int)how->flags, result = -1;
    /* O_CREAT | O_EXCL never follows a final symlink: it fails with EEXIST, as open(2) does */
    int follow_last = !(flags & O_NOFOLLOW) && (flags & (O_CREAT | O_EXCL)) != (O_CREAT | O_EXCL);
    struct walk w = {.resolve = how->resolve};
    if (!path[0])
        return fail(ENOENT);
    if (path[0] == '/')
        return fail(EXDEV);
    if ((how->resolve & RESOLVE_NO_XDEV) && mount_key(dirfd, &w.base_mount) < 0)
        return -1;
    w.path = sbx_xstrdup(path);
    w.dirs = sbx_xmalloc(16 * sizeof(*w.dirs));
    w.cap = 16;
    w.dirs[w.ndirs++] = dirfd;
    const char *p = w.path;
    for (;;) {
        while (*p == '/')
            p++;
        size_t len = strcspn(p, "/");
        const char *after = p + len; /* "" when this is the final component */
        char name[NAME_MAX + 1];
        if (len > NAME_MAX) {
            fail(ENAMETOOLONG);
            break;
        }
        memcpy(name, p, len);
        name[len] = '\0';
        if (len == 0 || strcmp(name, ".") == 0 || strcmp(name, "..") == 0) {
            if (len == 2 && walk_up(&w) < 0)
                break;
            if (*after) {
                p = after;
                continue;
            }
            /* "", "." or ".." last: the directory reached is the result */
            result = walk_open_last(&w, ".", flags, (mode_t)how->mode);
            break;
        }
        if (*after || follow_last) {
            int fd = openat(walk_dir(&w), name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
            if (fd >= 0 && is_symlink(fd)) {
                int rc = walk_follow(&w, fd, after);
                sbx_fd_close(&fd);
                if (rc < 0)
                    break;
                p = w.path;
                continue;
            }
            if (*after) { /* a directory on the way */
                if (fd < 0 || walk_down(&w, &fd) < 0)
                    break;
                p = after;
                continue;
            }
            sbx_fd_close(&fd);
        }
        /* The final component. O_NOFOLLOW even when the caller follows links: one that appeared
         * since the check above fails with ELOOP and is looked at again. */
        result = walk_open_last(&w, name, flags | O_NOFOLLOW, (mode_t)how->mode);
        if (result < 0 && errno == ELOOP && follow_last && ++w.links <= MAX_SYMLINKS)
            continue;
        break;
    }
    int saved = errno;
    while (w.ndirs > 1)
        sbx_fd_close(&w.dirs[--w.ndirs]);
    free(w.dirs);
    free(w.path);
    errno = saved;
    return result;
}

/* openat2 beneath dirfd, or fallback_openat2 where the kernel (or valgrind, or a seccomp
 * filter) has no openat2: an fd, or -1 with errno as openat2 sets it. */
static long open_beneath(int dirfd, const char *path, const struct open_how *how)
{
    if (!atomic_load(&fallback_forced) && !atomic_load(&openat2_missing)) {
        long fd;
        int tries = 0;
        do {
            fd = syscall(SYS_openat2, dirfd, path, how, sizeof(*how));
        } while (fd < 0 && (errno == EAGAIN || errno == EINTR) && ++tries < OPENAT2_RETRIES);
        if (fd >= 0 || errno != ENOSYS)
            return fd;
        atomic_store(&openat2_missing, 1);
    }
    return fallback_openat2(dirfd, path, how);
}

static struct open_how make_how(int oflags, mode_t mode, int fsflags)
{
    struct open_how how;
    memset(&how, 0, sizeof(how));
    how.flags = (uint64_t)(oflags | O_CLOEXEC);
    /* openat2 refuses a mode unless a file may be created */
    if (oflags & (O_CREAT | __O_TMPFILE))
        how.mode = mode & SBX_FS_MODE_MASK;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
    if (fsflags & SBX_FS_NOFOLLOW)
        how.resolve |= RESOLVE_NO_SYMLINKS;
    return how;
}

/* True when path's final component is a symlink that resolution reaches without leaving dirfd.
 * Used only to word an error message, never to decide anything. */
static int final_is_symlink(int dirfd, const char *path, int fsflags)
{
    struct open_how how = make_how(O_PATH | O_NOFOLLOW, 0, fsflags & ~SBX_FS_NOFOLLOW);
    long fd = open_beneath(dirfd, path, &how);
    if (fd < 0)
        return 0;
    struct stat st;
    int is_link = fstat((int)fd, &st) == 0 && S_ISLNK(st.st_mode);
    close((int)fd);
    return is_link;
}

static int open_error(int dirfd, const char *path, int oflags, int fsflags, int e,
                      struct sbx_error *err)
{
    switch (e) {
    case EXDEV:
        return sbx_error_set(err, SBX_E_PERM, e, "'%s' resolves outside the workspace",
                             shown(path));
    case ELOOP:
        if (fsflags & SBX_FS_NOFOLLOW)
            return sbx_error_set(err, SBX_E_PERM, e, "'%s' passes through a symlink", shown(path));
        if ((oflags & O_NOFOLLOW) && final_is_symlink(dirfd, path, fsflags))
            return sbx_error_set(err, SBX_E_PERM, e, "'%s' is a symlink", shown(path));
        return sbx_error_set(err, SBX_E_PERM, e,
                             "'%s' resolves outside the workspace (magic link or symlink loop)",
                             shown(path));
    default:
        return sbx_error_errno(err, e, "cannot open '%s'", shown(path));
    }
}

int sbx_fs_open(int dirfd, const char *path, int oflags, mode_t mode, int fsflags, int *out_fd,
                struct sbx_error *err)
{
    const char *p = path[0] ? path : ".";
    struct open_how how = make_how(oflags, mode, fsflags);
    long fd = open_beneath(dirfd, p, &how);
    if (fd < 0)
        return open_error(dirfd, path, oflags, fsflags, errno, err);
    *out_fd = (int)fd;
    return 0;
}

void sbx_fd_close(int *fd)
{
    if (*fd < 0)
        return;
    int saved = errno;
    close(*fd);
    *fd = -1;
    errno = saved;
}

int sbx_fd_read_all(int fd, size_t max, struct sbx_buf *out, struct sbx_error *err)
{
    size_t start = out->len;
    size_t got = 0;
    int rc = 0;
    /* The buffer's own limit bounds the read too; reserving whole chunks past it would fail
     * even for a small file. */
    if (max > out->max - out->len)
        max = out->max - out->len;
    /* A small regular file (a state or record file) is read in one chunk of its size and one
     * byte more, which sees its end: a 64 KiB chunk would make the buffer 128 KiB, which
     * malloc maps and unmaps for each read. */
    size_t chunk = READ_CHUNK;
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 && st.st_size < READ_CHUNK)
        chunk = (size_t)st.st_size + 1;
    for (;;) {
        /* What the buffer holds already is used before it grows. */
        size_t spare = out->cap > out->len + 1 ? out->cap - out->len - 1 : 0;
        size_t want = got > 0 && spare > 0 ? spare : chunk;
        if (got < max && max - got < want)
            want = max - got;
        /* at the limit: one more byte tells "exactly max" from "more than max" */
        char probe;
        char *dst = &probe;
        if (got < max) {
            rc = sbx_buf_reserve(out, want, err);
            if (rc < 0)
                goto out;
            dst = out->data + out->len;
        } else {
            want = 1;
        }
        ssize_t n = read(fd, dst, want);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            rc = sbx_error_errno(err, errno, "read failed");
            goto out;
        }
        if (n == 0)
            break;
        if (got >= max) {
            rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "data exceeds the limit of %zu bytes", max);
            goto out;
        }
        got += (size_t)n;
        sbx_buf_setlen(out, out->len + (size_t)n);
    }
out:
    if (rc < 0)
        sbx_buf_setlen(out, start);
    return rc;
}

int sbx_fd_write_all(int fd, const void *p, size_t n, struct sbx_error *err)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return sbx_error_errno(err, errno, "write failed");
        }
        if (w == 0)
            return sbx_error_set(err, SBX_E_IO, 0, "write failed: no progress");
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

int sbx_fd_next_extent(int fd, uint64_t *hole, uint64_t *data, struct sbx_error *err)
{
    *hole = 0;
    *data = UINT64_MAX;
    off_t pos = lseek(fd, 0, SEEK_CUR);
    if (pos < 0)
        return 0; /* a pipe or a socket: no holes to see */
    off_t d = lseek(fd, pos, SEEK_DATA);
    if (d < 0 && errno == ENXIO) {
        /* No data after pos: the rest of the file, if any, is a hole. */
        struct stat st;
        if (fstat(fd, &st) < 0)
            return sbx_error_errno(err, errno, "cannot stat a file being copied");
        if (st.st_size > pos) {
            *hole = (uint64_t)(st.st_size - pos);
            if (lseek(fd, st.st_size, SEEK_SET) < 0)
                return sbx_error_errno(err, errno, "cannot seek in a file being copied");
        }
        *data = 0;
        return 0;
    }
    if (d < 0) {
        /* The file system cannot say (EINVAL): copy everything as data. */
        if (lseek(fd, pos, SEEK_SET) < 0)
            return sbx_error_errno(err, errno, "cannot seek in a file being copied");
        return 0;
    }
    *hole = (uint64_t)(d - pos);
    off_t h = lseek(fd, d, SEEK_HOLE);
    if (h >= d)
        *data = (uint64_t)(h - d);
    if (lseek(fd, d, SEEK_SET) < 0)
        return sbx_error_errno(err, errno, "cannot seek in a file being copied");
    return 0;
}

/* Leave n bytes of hole at out's offset; zeros where out cannot seek. */
static int write_hole(int out, uint64_t n, int *seekable, char *zeros, size_t zlen,
                      struct sbx_error *err)
{
    if (*seekable && n <= INT64_MAX && lseek(out, (off_t)n, SEEK_CUR) >= 0)
        return 0;
    *seekable = 0;
    memset(zeros, 0, zlen);
    while (n > 0) {
        size_t k = n < zlen ? (size_t)n : zlen;
        int rc = sbx_fd_write_all(out, zeros, k, err);
        if (rc < 0)
            return rc;
        n -= k;
    }
    return 0;
}

#define COPY_CHUNK ((size_t)1 << 16)

int sbx_fd_copy_sparse(int in, int out, uint64_t max, uint64_t *copied, struct sbx_error *err)
{
    char *buf = sbx_xmalloc(COPY_CHUNK);
    uint64_t total = 0;
    /* With O_APPEND every write lands at the end whatever the offset: zeros, then. */
    int fl = fcntl(out, F_GETFL);
    int seekable = fl >= 0 && !(fl & O_APPEND) && lseek(out, 0, SEEK_CUR) >= 0;
    int holes = 0, rc = 0;
    for (;;) {
        uint64_t hole, data;
        rc = sbx_fd_next_extent(in, &hole, &data, err);
        if (rc < 0)
            break;
        if (hole) {
            holes = 1;
            rc = write_hole(out, hole, &seekable, buf, COPY_CHUNK, err);
            if (rc < 0)
                break;
        }
        if (data == 0)
            break;
        /* Read only up to the next hole, so the zeros of a hole are never read as data. */
        size_t want = data < COPY_CHUNK ? (size_t)data : COPY_CHUNK;
        ssize_t n = read(in, buf, want);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = sbx_error_errno(err, errno, "cannot read a file being copied");
            break;
        }
        if (n == 0)
            break;
        total += (uint64_t)n;
        if (max && total > max) {
            rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "more than %llu bytes of data",
                               (unsigned long long)max);
            break;
        }
        rc = sbx_fd_write_all(out, buf, (size_t)n, err);
        if (rc < 0)
            break;
    }
    if (rc == 0 && holes && seekable) {
        /* A trailing hole moved the offset only: give the file its length. */
        off_t end = lseek(out, 0, SEEK_CUR);
        if (end < 0 || ftruncate(out, end) < 0)
            rc = sbx_error_errno(err, errno, "cannot set the length of a copied file");
    }
    if (rc == 0 && copied)
        *copied = total;
    free(buf);
    return rc;
}

/* Read an open regular file into out, checking the size before and while reading. */
static int read_open_file(int fd, const char *name, size_t max, struct sbx_buf *out,
                          struct sbx_error *err)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return sbx_error_errno(err, errno, "cannot stat '%s'", name);
    if (S_ISDIR(st.st_mode))
        return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is a directory", name);
    if (!S_ISREG(st.st_mode))
        return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a regular file", name);
    if ((uintmax_t)st.st_size > (uintmax_t)max)
        return sbx_error_set(err, SBX_E_TOOBIG, 0,
                             "'%s' is larger than the limit of %zu bytes (%jd bytes)", name, max,
                             (intmax_t)st.st_size);
    /* the file may grow after fstat: sbx_fd_read_all enforces max again while reading */
    int rc = sbx_fd_read_all(fd, max, out, err);
    if (rc < 0)
        sbx_error_prefix(err, "'%s'", name);
    return rc;
}

int sbx_fs_read(int dirfd, const char *path, size_t max, struct sbx_buf *out, struct sbx_error *err)
{
    int fd = -1;
    /* O_NONBLOCK: opening a FIFO must not hang; the type check below refuses it */
    int rc = sbx_fs_open(dirfd, path, O_RDONLY | O_NOCTTY | O_NONBLOCK, 0, 0, &fd, err);
    if (rc < 0)
        goto out;
    rc = read_open_file(fd, shown(path), max, out, err);
out:
    sbx_fd_close(&fd);
    return rc;
}

int sbx_fs_read_path(const char *path, size_t max, struct sbx_buf *out, struct sbx_error *err)
{
    int fd = open(path, O_RDONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return sbx_error_errno(err, errno, "cannot open '%s'", path);
    int rc = read_open_file(fd, path, max, out, err);
    sbx_fd_close(&fd);
    return rc;
}

/* Split path into its parent ("" for none) and final component. *parent: caller frees. */
static int split_path(const char *path, char **parent, const char **base, struct sbx_error *err)
{
    const char *slash = strrchr(path, '/');
    const char *b = slash ? slash + 1 : path;
    if (!b[0] || strcmp(b, ".") == 0 || strcmp(b, "..") == 0)
        return sbx_error_set(err, SBX_E_INVAL, 0, "path '%s' does not name an entry", shown(path));
    *parent = slash ? sbx_xstrndup(path, (size_t)(slash - path)) : sbx_xstrdup("");
    *base = b;
    return 0;
}

static int open_dir(int dirfd, const char *path, int fsflags, int *out_fd, struct sbx_error *err)
{
    return sbx_fs_open(dirfd, path, O_RDONLY | O_DIRECTORY, 0, fsflags & SBX_FS_NOFOLLOW, out_fd,
                       err);
}

/* mkdirat name in parentfd with mode applied exactly. *created tells whether it was made here. */
static int make_one_dir(int parentfd, const char *name, const char *shownpath, mode_t mode,
                        int *created, struct sbx_error *err)
{
    *created = 0;
    if (mkdirat(parentfd, name, 0700) < 0) {
        if (errno == EEXIST)
            return 0;
        return sbx_error_errno(err, errno, "cannot create directory '%s'", shownpath);
    }
    *created = 1;
    int fd = -1;
    struct open_how how = make_how(O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0, SBX_FS_NOFOLLOW);
    long r = open_beneath(parentfd, name, &how);
    if (r < 0)
        return open_error(parentfd, shownpath, O_NOFOLLOW, SBX_FS_NOFOLLOW, errno, err);
    fd = (int)r;
    int rc = 0;
    if (fchmod(fd, mode & SBX_FS_MODE_MASK) < 0)
        rc = sbx_error_errno(err, errno, "cannot set the mode of '%s'", shownpath);
    sbx_fd_close(&fd);
    return rc;
}

/* Create every missing directory of path (a relative path) beneath dirfd. Each prefix is
 * opened from dirfd itself, so a symlink inside the tree that points elsewhere inside the tree
 * is followed (unless SBX_FS_NOFOLLOW) while one pointing outside is refused. On success
 * *out_fd (if not NULL) is the directory path itself. */
static int make_parents(int dirfd, const char *path, mode_t mode, int fsflags, int *out_fd,
                        int *last_created, struct sbx_error *err)
{
    char *prefix = sbx_xstrdup(path);
    int parentfd = -1, rc = 0, created = 0;
    size_t len = strlen(prefix);
    rc = open_dir(dirfd, "", fsflags, &parentfd, err);
    if (rc < 0)
        goto out;
    for (size_t i = 0; i <= len;) {
        size_t j = i;
        while (j < len && prefix[j] != '/')
            j++;
        char saved = prefix[j];
        prefix[j] = '\0';
        const char *name = prefix + i;
        if (name[0]) {
            rc = make_one_dir(parentfd, name, prefix, mode, &created, err);
            if (rc < 0)
                goto out;
            int next = -1;
            rc = open_dir(dirfd, prefix, fsflags, &next, err);
            if (rc < 0) {
                if (rc == -SBX_E_INVAL)
                    rc = sbx_error_set(err, SBX_E_EXISTS, ENOTDIR,
                                       "'%s' exists and is not a directory", prefix);
                goto out;
            }
            sbx_fd_close(&parentfd);
            parentfd = next;
        }
        prefix[j] = saved;
        i = j + 1;
    }
    if (last_created)
        *last_created = created;
    if (out_fd) {
        *out_fd = parentfd;
        parentfd = -1;
    }
out:
    sbx_fd_close(&parentfd);
    free(prefix);
    return rc;
}

/* Open the parent directory of path beneath dirfd, creating it with SBX_FS_PARENTS. */
static int open_parent(int dirfd, const char *parent, int fsflags, int *out_fd,
                       struct sbx_error *err)
{
    if ((fsflags & SBX_FS_PARENTS) && parent[0])
        return make_parents(dirfd, parent, PARENT_DIR_MODE, fsflags, out_fd, NULL, err);
    return open_dir(dirfd, parent, fsflags, out_fd, err);
}

static int check_regular(int fd, const char *path, struct sbx_error *err)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return sbx_error_errno(err, errno, "cannot stat '%s'", path);
    if (!S_ISREG(st.st_mode))
        return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a regular file", path);
    return 0;
}

/* In-place write: the final component is opened with O_NOFOLLOW so a symlink there is refused,
 * never written through. */
static int write_in_place(int parentfd, const char *path, const char *base, const void *data,
                          size_t n, mode_t mode, int fsflags, struct sbx_error *err)
{
    int fd = -1, rc = 0, created = 0;
    int common = O_WRONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK;
    for (int tries = 0; fd < 0; tries++) {
        struct open_how how = make_how(common | O_CREAT | O_EXCL, mode, fsflags);
        long r = open_beneath(parentfd, base, &how);
        if (r >= 0) {
            fd = (int)r;
            created = 1;
            break;
        }
        if (errno != EEXIST || (fsflags & SBX_FS_EXCL) || tries >= 4)
            break;
        how = make_how(common, 0, fsflags);
        r = open_beneath(parentfd, base, &how);
        if (r >= 0) {
            fd = (int)r;
            break;
        }
        /* removed between the two opens: try creating it again */
        if (errno != ENOENT)
            break;
    }
    if (fd < 0) {
        /* base is one component opened with O_NOFOLLOW: ELOOP means it is a symlink */
        rc = errno == ELOOP ? sbx_error_set(err, SBX_E_PERM, ELOOP,
                                            "'%s' is a symlink; refusing to write through it", path)
                            : sbx_error_errno(err, errno, "cannot open '%s'", path);
        goto out;
    }
    rc = check_regular(fd, path, err);
    if (rc < 0)
        goto out;
    if (created && fchmod(fd, mode & SBX_FS_MODE_MASK) < 0) {
        rc = sbx_error_errno(err, errno, "cannot set the mode of '%s'", path);
        goto out;
    }
    if (!created && !(fsflags & SBX_FS_APPEND) && ftruncate(fd, 0) < 0) {
        rc = sbx_error_errno(err, errno, "cannot truncate '%s'", path);
        goto out;
    }
    if ((fsflags & SBX_FS_APPEND) && lseek(fd, 0, SEEK_END) < 0) {
        rc = sbx_error_errno(err, errno, "cannot seek in '%s'", path);
        goto out;
    }
    rc = sbx_fd_write_all(fd, data, n, err);
    if (rc < 0) {
        sbx_error_prefix(err, "'%s'", path);
        goto out;
    }
out:
    sbx_fd_close(&fd);
    return rc;
}

/* Write tmp in parentfd fully, with mode, fsynced; then rename it over name. */
static int write_and_rename(int parentfd, const char *tmp, const char *name, const char *path,
                            const void *data, size_t n, mode_t mode, int noreplace,
                            struct sbx_error *err)
{
    int fd = -1, rc = 0, linked = 0;
    struct open_how how =
            make_how(O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NOCTTY, 0600, SBX_FS_NOFOLLOW);
    long r = open_beneath(parentfd, tmp, &how);
    if (r < 0) {
        rc = sbx_error_errno(err, errno, "cannot create a temporary file for '%s'", path);
        goto out;
    }
    fd = (int)r;
    linked = 1;
    rc = sbx_fd_write_all(fd, data, n, err);
    if (rc < 0) {
        sbx_error_prefix(err, "'%s'", path);
        goto out;
    }
    if (fchmod(fd, mode & SBX_FS_MODE_MASK) < 0) {
        rc = sbx_error_errno(err, errno, "cannot set the mode of '%s'", path);
        goto out;
    }
    if (fsync(fd) < 0) {
        rc = sbx_error_errno(err, errno, "cannot sync '%s'", path);
        goto out;
    }
    sbx_fd_close(&fd);
    if (noreplace) {
        if (renameat2(parentfd, tmp, parentfd, name, RENAME_NOREPLACE) < 0) {
            rc = errno == EEXIST
                         ? sbx_error_set(err, SBX_E_EXISTS, EEXIST, "'%s' already exists", path)
                         : sbx_error_errno(err, errno, "cannot rename into '%s'", path);
            goto out;
        }
    } else if (renameat(parentfd, tmp, parentfd, name) < 0) {
        rc = sbx_error_errno(err, errno, "cannot rename into '%s'", path);
        goto out;
    }
    linked = 0;
    if (fsync(parentfd) < 0) {
        rc = sbx_error_errno(err, errno, "cannot sync the directory of '%s'", path);
        goto out;
    }
out:
    sbx_fd_close(&fd);
    if (linked)
        unlinkat(parentfd, tmp, 0);
    return rc;
}

int sbx_fs_write(int dirfd, const char *path, const void *data, size_t n, mode_t mode, int fsflags,
                 struct sbx_error *err)
{
    char *parent = NULL;
    const char *base = NULL;
    int parentfd = -1, rc = 0;
    if ((fsflags & SBX_FS_ATOMIC) && (fsflags & SBX_FS_APPEND)) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0,
                           "cannot write '%s': atomic and append writes cannot be combined",
                           shown(path));
        goto out;
    }
    rc = split_path(path, &parent, &base, err);
    if (rc < 0)
        goto out;
    rc = open_parent(dirfd, parent, fsflags, &parentfd, err);
    if (rc < 0)
        goto out;
    if (fsflags & SBX_FS_ATOMIC) {
        char hex[17];
        rc = sbx_random_hex(hex, 8, err);
        if (rc < 0)
            goto out;
        char tmp[32];
        snprintf(tmp, sizeof(tmp), ".sbx-%s.tmp", hex);
        rc = write_and_rename(parentfd, tmp, base, path, data, n, mode,
                              (fsflags & SBX_FS_EXCL) != 0, err);
    } else {
        rc = write_in_place(parentfd, path, base, data, n, mode, fsflags, err);
    }
out:
    sbx_fd_close(&parentfd);
    free(parent);
    return rc;
}

int sbx_fs_write_state(int dirfd, const char *name, const void *data, size_t n, mode_t mode,
                       struct sbx_error *err)
{
    if (!name[0] || strchr(name, '/') || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return sbx_error_set(err, SBX_E_INVAL, 0, "state file name '%s' must be a plain name",
                             name);
    char *tmp = sbx_xasprintf("%s.tmp", name);
    /* a stale name.tmp left by a crash is replaced, not an error */
    if (unlinkat(dirfd, tmp, 0) < 0 && errno != ENOENT) {
        int rc = sbx_error_errno(err, errno, "cannot remove stale '%s'", tmp);
        free(tmp);
        return rc;
    }
    int rc = write_and_rename(dirfd, tmp, name, name, data, n, mode, 0, err);
    free(tmp);
    return rc;
}

int sbx_fs_mkdir(int dirfd, const char *path, mode_t mode, int fsflags, struct sbx_error *err)
{
    char *parent = NULL;
    const char *base = NULL;
    int parentfd = -1, rc = 0, created = 0;
    rc = split_path(path, &parent, &base, err);
    if (rc < 0)
        goto out;
    if (fsflags & SBX_FS_PARENTS) {
        int fd = -1;
        rc = make_parents(dirfd, path, mode, fsflags, &fd, &created, err);
        sbx_fd_close(&fd);
        if (rc == 0 && !created && (fsflags & SBX_FS_EXCL))
            rc = sbx_error_set(err, SBX_E_EXISTS, EEXIST, "'%s' already exists", path);
        goto out;
    }
    rc = open_dir(dirfd, parent, fsflags, &parentfd, err);
    if (rc < 0)
        goto out;
    if (mkdirat(parentfd, base, 0700) < 0) {
        rc = errno == EEXIST ? sbx_error_set(err, SBX_E_EXISTS, EEXIST, "'%s' already exists", path)
                             : sbx_error_errno(err, errno, "cannot create directory '%s'", path);
        goto out;
    }
    int fd = -1;
    struct open_how how = make_how(O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0, SBX_FS_NOFOLLOW);
    long r = open_beneath(parentfd, base, &how);
    if (r < 0) {
        rc = sbx_error_errno(err, errno, "cannot open new directory '%s'", path);
        goto out;
    }
    fd = (int)r;
    if (fchmod(fd, mode & SBX_FS_MODE_MASK) < 0)
        rc = sbx_error_errno(err, errno, "cannot set the mode of '%s'", path);
    sbx_fd_close(&fd);
out:
    sbx_fd_close(&parentfd);
    free(parent);
    return rc;
}

/* Give the owner back rwx on the directory at fd (borrowed; any kind of fd, O_PATH too) so it
 * can be emptied: a tree that is being removed may hold directories made unreadable or
 * read-only, by the sandbox or by a tool. Through /proc/self/fd the mode change reaches exactly
 * the inode open at fd, never a name that could have been swapped. -1 when it cannot. */
static int let_owner_in(int fd)
{
    struct stat st;
    char proc[64];
    if (fstat(fd, &st) < 0 || !S_ISDIR(st.st_mode))
        return -1;
    if ((st.st_mode & S_IRWXU) == S_IRWXU)
        return -1; /* it was not the mode */
    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
    return chmod(proc, (st.st_mode & 07777) | S_IRWXU);
}

/* Open directory name in dfd to empty it: no symlink, and no crossing into another mount, so
 * a bind mount inside the tree (a host directory mounted into a workspace) is never emptied. A
 * directory its owner may not read is opened after giving the owner access. 1: it vanished. */
static int open_subdir_for_removal(int dfd, const char *name, const char *path, int *out_fd,
                                   struct sbx_error *err)
{
    struct open_how how = make_how(O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0, SBX_FS_NOFOLLOW);
    how.resolve |= RESOLVE_NO_XDEV;
    long r = open_beneath(dfd, name, &how);
    if (r < 0 && errno == EACCES) {
        struct open_how ph = make_how(O_PATH | O_DIRECTORY | O_NOFOLLOW, 0, SBX_FS_NOFOLLOW);
        ph.resolve |= RESOLVE_NO_XDEV;
        long pfd = open_beneath(dfd, name, &ph);
        int fixed = pfd >= 0 && let_owner_in((int)pfd) == 0;
        if (pfd >= 0)
            close((int)pfd);
        r = fixed ? open_beneath(dfd, name, &how) : fail(EACCES);
    }
    if (r < 0) {
        if (errno == ENOENT)
            return 1;
        if (errno == EXDEV)
            return sbx_error_set(err, SBX_E_PERM, EXDEV, "cannot remove '%s': it is a mount point",
                                 path);
        return sbx_error_errno(err, errno, "cannot open '%s'", path);
    }
    *out_fd = (int)r;
    return 0;
}

/* Empty the directory open at fd (taken: it becomes the directory stream, so each level of the
 * tree holds one fd). Never follows a symlink: entries are examined with AT_SYMLINK_NOFOLLOW
 * and subdirectories opened with O_NOFOLLOW relative to their parent. Entries that vanish
 * meanwhile (another remover at work) are fine. */
static int remove_contents(int fd, const char *path, int depth, int max_depth,
                           struct sbx_error *err)
{
    if (depth > max_depth) {
        close(fd);
        return sbx_error_set(err, SBX_E_TOOBIG, 0,
                             "cannot remove '%s': nested deeper than %d directories", path,
                             max_depth);
    }
    DIR *d = fdopendir(fd);
    if (!d) {
        int rc = sbx_error_errno(err, errno, "cannot read directory '%s'", path);
        close(fd);
        return rc;
    }
    int dfd = dirfd(d), rc = 0, tried_mode = 0;
    /* Entries removed during readdir may shift the stream on some filesystems: scan again until
     * a pass finds nothing left. The passes are bounded so a process that keeps creating files
     * cannot keep us here; the final rmdir then reports the directory as not empty. */
    for (int found = 1, pass = 0; found && rc == 0 && pass < REMOVE_MAX_PASSES; pass++) {
        found = 0;
        rewinddir(d);
        while (rc == 0) {
            errno = 0;
            struct dirent *e = readdir(d);
            if (!e) {
                if (errno)
                    rc = sbx_error_errno(err, errno, "cannot read directory '%s'", path);
                break;
            }
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            found = 1;
            struct stat st;
            int r = fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW);
            if (r < 0 && errno == EACCES && !tried_mode++ && let_owner_in(dfd) == 0)
                r = fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW);
            if (r < 0) {
                if (errno == ENOENT)
                    continue;
                rc = sbx_error_errno(err, errno, "cannot stat '%s/%s'", path, e->d_name);
                break;
            }
            int dir = S_ISDIR(st.st_mode);
            char *sub = sbx_xasprintf("%s/%s", path, e->d_name);
            if (dir) {
                int cfd = -1;
                rc = open_subdir_for_removal(dfd, e->d_name, sub, &cfd, err);
                if (rc == 0)
                    rc = remove_contents(cfd, sub, depth + 1, max_depth, err);
                else if (rc == 1)
                    rc = 0;
            }
            if (rc == 0) {
                r = unlinkat(dfd, e->d_name, dir ? AT_REMOVEDIR : 0);
                if (r < 0 && errno == EACCES && !tried_mode++ && let_owner_in(dfd) == 0)
                    r = unlinkat(dfd, e->d_name, dir ? AT_REMOVEDIR : 0);
                if (r < 0 && errno != ENOENT)
                    rc = sbx_error_errno(err, errno, "cannot remove '%s'", sub);
            }
            free(sub);
        }
    }
    closedir(d);
    return rc;
}

static int remove_at(int dirfd, const char *path, int fsflags, int max_depth, struct sbx_error *err)
{
    char *parent = NULL;
    const char *base = NULL;
    int parentfd = -1, fd = -1, rc = 0;
    if (!path[0] || strcmp(path, ".") == 0) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "refusing to remove the workspace root");
        goto out;
    }
    rc = split_path(path, &parent, &base, err);
    if (rc < 0)
        goto out;
    rc = open_dir(dirfd, parent, fsflags, &parentfd, err);
    if (rc < 0)
        goto out;
    struct stat st;
    if (fstatat(parentfd, base, &st, AT_SYMLINK_NOFOLLOW) < 0) {
        rc = errno == ENOENT
                     ? sbx_error_set(err, SBX_E_NOTFOUND, ENOENT, "'%s' does not exist", path)
                     : sbx_error_errno(err, errno, "cannot stat '%s'", path);
        goto out;
    }
    if (!S_ISDIR(st.st_mode)) {
        if (unlinkat(parentfd, base, 0) < 0)
            rc = sbx_error_errno(err, errno, "cannot remove '%s'", path);
        goto out;
    }
    if (fsflags & SBX_FS_RECURSIVE) {
        rc = open_subdir_for_removal(parentfd, base, path, &fd, err);
        if (rc == 1)
            rc = sbx_error_set(err, SBX_E_NOTFOUND, ENOENT, "'%s' does not exist", path);
        if (rc < 0)
            goto out;
        rc = remove_contents(fd, path, 1, max_depth, err);
        fd = -1;
        if (rc < 0)
            goto out;
    }
    if (unlinkat(parentfd, base, AT_REMOVEDIR) < 0) {
        rc = errno == ENOTEMPTY || errno == EEXIST
                     ? sbx_error_set(err, SBX_E_INVAL, errno, "directory '%s' is not empty", path)
                     : sbx_error_errno(err, errno, "cannot remove '%s'", path);
        goto out;
    }
out:
    sbx_fd_close(&fd);
    sbx_fd_close(&parentfd);
    free(parent);
    return rc;
}

int sbx_fs_remove(int dirfd, const char *path, int fsflags, struct sbx_error *err)
{
    return remove_at(dirfd, path, fsflags, REMOVE_MAX_DEPTH, err);
}

int sbx__fs_remove_tree(const char *path, struct sbx_error *err)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : "";
    int rc = 0, pfd = -1;
    if (path[0] != '/' || !base[0] || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
        return sbx_error_set(err, SBX_E_INVAL, 0, "refusing to remove '%s'", path);
    char *parent = sbx_xstrndup(path, (size_t)(slash - path));
    pfd = open(parent[0] ? parent : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (pfd < 0) {
        rc = errno == ENOENT ? 0 : sbx_error_errno(err, errno, "cannot open '%s'", parent);
        goto out;
    }
    rc = remove_at(pfd, base, SBX_FS_RECURSIVE | SBX_FS_NOFOLLOW, TREE_MAX_DEPTH, err);
    if (rc == -SBX_E_NOTFOUND)
        rc = 0;
    else if (rc < 0)
        sbx_error_prefix(err, "removing '%s'", path);
out:
    sbx_fd_close(&pfd);
    free(parent);
    return rc;
}

int sbx_fs_stat(int dirfd, const char *path, struct stat *out, struct sbx_error *err)
{
    int fd = -1;
    int rc = sbx_fs_open(dirfd, path, O_PATH | O_NOFOLLOW, 0, 0, &fd, err);
    if (rc < 0)
        return rc;
    struct stat st;
    if (fstat(fd, &st) < 0)
        rc = sbx_error_errno(err, errno, "cannot stat '%s'", shown(path));
    else
        *out = st;
    sbx_fd_close(&fd);
    return rc;
}
