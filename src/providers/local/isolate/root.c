/* The isolation executor: the root of a local sandbox, built by PID 1 in its own mount namespace
 * from the plan (isolate-plan.c). A scratch tmpfs becomes the root for the time of the build,
 * with the host tree at /oldroot (the bind sources) and the new root at /newroot; pivot_root
 * then moves into the new root and the host tree is detached. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "providers/local/isolate/executor.h"
#include "sandbox/host/priv.h"
#include "sbx/fs.h"
#include "sbx/log.h"

static int mkdir_p(char *path, mode_t mode)
{
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        int r = mkdir(path, 0755);
        *p = '/';
        if (r < 0 && errno != EEXIST)
            return -1;
    }
    if (mkdir(path, mode) < 0 && errno != EEXIST)
        return -1;
    return 0;
}

static int make_parent(const char *path)
{
    char *dup = sbx_xstrdup(path);
    char *slash = strrchr(dup, '/');
    int r = 0;
    if (slash && slash != dup) {
        *slash = '\0';
        r = mkdir_p(dup, 0755);
    }
    free(dup);
    return r;
}

/* Touch an empty file as a bind target. */
static int make_file(const char *path)
{
    if (make_parent(path) < 0)
        return -1;
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0)
        return -1;
    close(fd);
    return 0;
}

/* The flags a bind remount must repeat: the kernel refuses to clear flags that are locked
 * because the mount came from a more privileged namespace. */
static unsigned long current_flags(const char *path)
{
    struct statvfs sv;
    unsigned long f = 0;
    if (statvfs(path, &sv) < 0)
        return 0;
    f |= sv.f_flag & ST_RDONLY ? MS_RDONLY : 0;
    f |= sv.f_flag & ST_NOSUID ? MS_NOSUID : 0;
    f |= sv.f_flag & ST_NODEV ? MS_NODEV : 0;
    f |= sv.f_flag & ST_NOEXEC ? MS_NOEXEC : 0;
    f |= sv.f_flag & ST_NOATIME ? MS_NOATIME : 0;
    f |= sv.f_flag & ST_NODIRATIME ? MS_NODIRATIME : 0;
    f |= sv.f_flag & ST_RELATIME ? MS_RELATIME : 0;
    return f;
}

static int remount_add(const char *path, unsigned long add)
{
    return sbx__priv_remount(path, current_flags(path) | add);
}

/* Without mount_setattr (Linux < 5.12, or valgrind): bind remounts, and for a recursive change
 * every mount below path found in mountinfo (the host /proc is at /oldroot/proc while the root
 * is built). */
static int remount_tree(const char *path, unsigned long add, int recursive)
{
    if (remount_add(path, add) < 0)
        return -1;
    if (!recursive)
        return 0;
    FILE *f = fopen(SBX__ISO_OLDROOT "/proc/self/mountinfo", "re");
    if (!f)
        return -1;
    char line[4096];
    size_t n = strlen(path);
    int r = 0;
    while (r == 0 && fgets(line, sizeof(line), f)) {
        char *save = line, *tok, *mp = NULL;
        for (int i = 0; i < 5 && (tok = strsep(&save, " ")); i++)
            mp = tok;
        if (mp && strncmp(mp, path, n) == 0 && mp[n] == '/')
            r = remount_add(mp, add);
    }
    fclose(f);
    return r;
}

static int set_attr(const char *path, uint64_t set, int recursive, struct sbx_error *err)
{
    struct mount_attr a = {.attr_set = set};
    if (sbx__priv_setattr(AT_FDCWD, path, recursive ? AT_RECURSIVE : 0, &a, sizeof(a)) == 0)
        return 0;
    if (errno == ENOSYS) {
        unsigned long add = (set & MOUNT_ATTR_RDONLY ? MS_RDONLY : 0) |
                            (set & MOUNT_ATTR_NOSUID ? MS_NOSUID : 0) |
                            (set & MOUNT_ATTR_NODEV ? MS_NODEV : 0) |
                            (set & MOUNT_ATTR_NOEXEC ? MS_NOEXEC : 0);
        if (remount_tree(path, add, recursive) == 0)
            return 0;
    }
    return sbx_error_errno(err, errno, "cannot set the mount flags of '%s'", path);
}

static int sys_err(struct sbx_error *err, const char *what, const char *path)
{
    return sbx_error_errno(err, errno, "cannot %s '%s'", what, path);
}

/* Bind src at dst (dst created like src), read-only unless writable; nosuid, nodev. */
static int do_bind(const char *src, const char *dst, int writable, int optional,
                   struct sbx_error *err)
{
    struct stat st;
    if (stat(src, &st) < 0) {
        if (optional && errno == ENOENT)
            return 0;
        return sys_err(err, "bind", src);
    }
    if (S_ISDIR(st.st_mode)) {
        char *d = sbx_xstrdup(dst);
        int r = mkdir_p(d, 0755);
        free(d);
        if (r < 0)
            return sys_err(err, "create directory", dst);
    } else if (make_file(dst) < 0)
        return sys_err(err, "create file", dst);
    if (sbx__priv_bind(src, dst, 1) < 0)
        return sys_err(err, "bind-mount", src);
    return set_attr(dst, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (writable ? 0 : MOUNT_ATTR_RDONLY),
                    1, err);
}

static int mirror_symlink(const char *src, const char *dst, struct sbx_error *err)
{
    char target[PATH_MAX];
    ssize_t n = readlink(src, target, sizeof(target) - 1);
    if (n < 0)
        return sys_err(err, "read symlink", src);
    target[n] = '\0';
    if (make_parent(dst) < 0 || symlink(target, dst) < 0)
        return sys_err(err, "create symlink", dst);
    return 0;
}

static int write_new_file(const char *dst, const char *data, size_t len, mode_t mode,
                          struct sbx_error *err)
{
    if (make_parent(dst) < 0)
        return sys_err(err, "create parent of", dst);
    int fd = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
    if (fd < 0)
        return sys_err(err, "create", dst);
    int rc = sbx_fd_write_all(fd, data, len, err);
    if (rc < 0) {
        close(fd);
        sbx_error_prefix(err, "'%s'", dst);
        return rc;
    }
    if (fchmod(fd, mode) < 0) {
        int e = errno;
        close(fd);
        return sbx_error_errno(err, e, "cannot chmod '%s'", dst);
    }
    close(fd);
    return 0;
}

/* Copy a small host file's content (following symlinks) into the new root. */
static int copy_in(const char *src, const char *dst, struct sbx_error *err)
{
    struct sbx_buf b;
    sbx_buf_init(&b, SBX__ISO_MIB);
    struct stat st;
    int rc = 0;
    if (stat(src, &st) < 0 && errno == ENOENT)
        goto out; /* a dangling symlink: nothing to copy */
    if ((rc = sbx_fs_read_path(src, SBX__ISO_MIB, &b, err)) == 0)
        rc = write_new_file(dst, b.data, b.len, 0644, err);
out:
    sbx_buf_release(&b);
    return rc;
}

static int mount_proc(const char *dst, struct sbx_error *err)
{
    static const char *const opts[] = {"hidepid=invisible", "hidepid=2", NULL};
    char *d = sbx_xstrdup(dst);
    int r = mkdir_p(d, 0555);
    free(d);
    if (r < 0)
        return sys_err(err, "create directory", dst);
    for (size_t i = 0; i < SBX_ARRAY_LEN(opts); i++) {
        if (sbx__priv_mount_fs("proc", dst, MS_NOSUID | MS_NODEV | MS_NOEXEC, opts[i]) == 0) {
            if (i > 0)
                sbx_log(SBX_LOG_INFO, "sandbox /proc mounted with '%s'",
                        opts[i] ? opts[i] : "no hidepid");
            return 0;
        }
        if (errno != EINVAL)
            break;
    }
    return sbx_error_errno(err, errno,
                           "cannot mount a fresh /proc (needs a pid namespace and a fully "
                           "visible host /proc)");
}

/* A tmpfs of op's mode and size (noexec for /dev). */
static int op_tmpfs(const struct sbx__op *op, char *dst, struct sbx_error *err)
{
    char data[96];
    unsigned long flags = MS_NOSUID | MS_NODEV;
    if (strcmp(op->dst, "/dev") == 0)
        flags |= MS_NOEXEC;
    if (op->size)
        snprintf(data, sizeof(data), "mode=%o,size=%llu", (unsigned)op->mode,
                 (unsigned long long)op->size);
    else
        snprintf(data, sizeof(data), "mode=%o", (unsigned)op->mode);
    if (mkdir_p(dst, 0755) < 0)
        return sys_err(err, "create directory", op->dst);
    if (sbx__priv_mount_fs("tmpfs", dst, flags, data) < 0)
        return sys_err(err, "mount a tmpfs at", op->dst);
    return 0;
}

/* A bind of a host path; the workspace, when idmapped (ws_tree), attached instead. */
static int op_bind(const struct sbx__op *op, const char *src, char *dst, int ws_tree,
                   struct sbx_error *err)
{
    if (!op->workspace || ws_tree < 0)
        return do_bind(src, dst, op->writable, op->optional, err);
    if (mkdir_p(dst, 0755) < 0)
        return sys_err(err, "create directory", op->dst);
    if (sbx__priv_attach_tree(ws_tree, dst) < 0)
        return sys_err(err, "attach the workspace at", op->dst);
    return 0;
}

/* A system directory or /etc file of the host: copied, mirrored (a symlink) or bound read-only;
 * a missing one is skipped where the plan allows. */
static int op_host_path(const struct sbx__op *op, const char *src, const char *dst,
                        struct sbx_error *err)
{
    struct stat st;
    if (lstat(src, &st) < 0) {
        if (errno != ENOENT || !(op->optional || op->kind == SBX__OP_SYSDIR))
            return sys_err(err, "inspect", op->src);
        return 0;
    }
    if (op->copy)
        return copy_in(src, dst, err);
    if (S_ISLNK(st.st_mode))
        return mirror_symlink(src, dst, err);
    return do_bind(src, dst, 0, 1, err);
}

/* A device node of the host, bound nosuid and noexec. */
static int op_devnode(const struct sbx__op *op, const char *src, const char *dst,
                      struct sbx_error *err)
{
    if (make_file(dst) < 0)
        return sys_err(err, "create file", op->dst);
    if (sbx__priv_bind(src, dst, 0) < 0)
        return sys_err(err, "bind the device", op->src);
    return set_attr(dst, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, 0, err);
}

/* A devpts instance of the sandbox's own. max= bounds it: without it one sandbox could take
 * every terminal of the host (kernel.pty.max is shared by all instances). */
static int op_devpts(const struct sbx__op *op, char *dst, struct sbx_error *err)
{
    char data[96] = "newinstance,ptmxmode=0666,mode=620";
    if (op->size)
        snprintf(data, sizeof(data), "newinstance,ptmxmode=0666,mode=620,max=%llu",
                 (unsigned long long)op->size);
    if (mkdir_p(dst, 0755) < 0)
        return sys_err(err, "create directory", op->dst);
    if (sbx__priv_mount_fs("devpts", dst, MS_NOSUID | MS_NOEXEC, data) < 0)
        return sbx_error_errno(err, errno, "cannot mount a new devpts instance at '%s'", op->dst);
    return 0;
}

/* A /proc entry made read-only (bound onto itself), or masked (an empty tmpfs over a directory,
 * /dev/null over a file); a missing one is nothing to do. */
static int op_proc(const struct sbx__op *op, const char *dst, struct sbx_error *err)
{
    struct stat st;
    if (lstat(dst, &st) < 0)
        return 0;
    if (op->kind == SBX__OP_PROC_RO) {
        if (sbx__priv_bind(dst, dst, 1) < 0)
            return sys_err(err, "bind", op->dst);
        return set_attr(
                dst, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
                1, err);
    }
    if (S_ISDIR(st.st_mode)) {
        if (sbx__priv_mount_fs("tmpfs", dst, MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                               "mode=0555,size=4k") < 0)
            return sys_err(err, "mask", op->dst);
        return 0;
    }
    if (sbx__priv_bind(SBX__ISO_OLDROOT "/dev/null", dst, 0) < 0)
        return sys_err(err, "mask", op->dst);
    return set_attr(dst, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, 0, err);
}

/* One operation of the plan, at its place under the new root (sources under the old one). */
static int apply_op(const struct sbx__op *op, int ws_tree, struct sbx_error *err)
{
    char *dst = sbx_xasprintf("%s%s", SBX__ISO_NEWROOT, strcmp(op->dst, "/") == 0 ? "" : op->dst);
    char *src = op->src && op->kind != SBX__OP_SYMLINK
                        ? sbx_xasprintf("%s%s", SBX__ISO_OLDROOT, op->src)
                        : NULL;
    int rc = 0;
    switch (op->kind) {
    case SBX__OP_TMPFS:
        rc = op_tmpfs(op, dst, err);
        break;
    case SBX__OP_BIND:
        rc = op_bind(op, src, dst, ws_tree, err);
        break;
    case SBX__OP_SYSDIR:
    case SBX__OP_ETC:
        rc = op_host_path(op, src, dst, err);
        break;
    case SBX__OP_DEVNODE:
        rc = op_devnode(op, src, dst, err);
        break;
    case SBX__OP_MKDIR:
        if (mkdir_p(dst, op->mode) < 0)
            rc = sys_err(err, "create directory", op->dst);
        break;
    case SBX__OP_SYMLINK:
        if (make_parent(dst) < 0 || symlink(op->src, dst) < 0)
            rc = sys_err(err, "create symlink", op->dst);
        break;
    case SBX__OP_FILE:
        rc = write_new_file(dst, op->content, op->content_len, op->mode, err);
        break;
    case SBX__OP_PROC:
        rc = mount_proc(dst, err);
        break;
    case SBX__OP_DEVPTS:
        rc = op_devpts(op, dst, err);
        break;
    case SBX__OP_PROC_RO:
    case SBX__OP_PROC_MASK:
        rc = op_proc(op, dst, err);
        break;
    case SBX__OP_REMOUNT_RO:
        rc = set_attr(dst, MOUNT_ATTR_RDONLY, 0, err);
        break;
    }
    free(dst);
    free(src);
    return rc;
}

static int loopback_up(struct sbx_error *err)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return sbx_error_errno(err, errno, "cannot create a socket to configure loopback");
    struct ifreq ifr;
    memset(&ifr, 0, sizeof(ifr));
    memcpy(ifr.ifr_name, "lo", 3);
    int rc = 0;
    if (ioctl(fd, SIOCGIFFLAGS, &ifr) < 0)
        rc = sbx_error_errno(err, errno, "cannot read the flags of interface 'lo'");
    else {
        ifr.ifr_flags |= IFF_UP;
        if (ioctl(fd, SIOCSIFFLAGS, &ifr) < 0)
            rc = sbx_error_errno(err, errno, "cannot bring interface 'lo' up");
    }
    close(fd);
    return rc;
}

int sbx__iso_build_root(const struct sbx__isolation *iso, struct sbx_error *err)
{
    int rc;
    if (iso->net == SBX__NET_NONE && (rc = loopback_up(err)) < 0)
        return rc;
    if (sbx__priv_sethostname(iso->hostname) < 0)
        return sbx_error_errno(err, errno, "cannot set the hostname");
    if (sbx__priv_make_private("/") < 0)
        return sbx_error_errno(err, errno, "cannot make the mount tree private");
    /* A scratch tmpfs becomes the root for the time of the build: the host tree is reachable
     * at /oldroot (bind sources), the new root is built at /newroot. */
    if (sbx__priv_mount_fs("tmpfs", "/tmp", MS_NOSUID | MS_NODEV, "mode=0700,size=65536") < 0)
        return sbx_error_errno(err, errno, "cannot mount the scratch tmpfs");
    if (mkdir("/tmp" SBX__ISO_NEWROOT, 0755) < 0 || mkdir("/tmp" SBX__ISO_OLDROOT, 0755) < 0)
        return sbx_error_errno(err, errno, "cannot create the scratch directories");
    if (sbx__priv_pivot_root("/tmp", "/tmp" SBX__ISO_OLDROOT) < 0)
        return sbx_error_errno(err, errno, "cannot pivot_root into the scratch tmpfs");
    if (chdir("/") < 0)
        return sbx_error_errno(err, errno, "cannot chdir to '/'");
    for (size_t i = 0; i < iso->plan.n; i++) {
        if ((rc = apply_op(&iso->plan.ops[i], iso->ws_tree, err)) < 0) {
            sbx_error_prefix(err, "sandbox root");
            return rc;
        }
    }
    if (chdir(SBX__ISO_NEWROOT) < 0)
        return sbx_error_errno(err, errno, "cannot chdir to the new root");
    if (sbx__priv_pivot_root(".", ".") < 0)
        return sbx_error_errno(err, errno, "cannot pivot_root into the new root");
    /* The scratch tmpfs and the whole host tree under it go away here. */
    if (sbx__priv_umount(".", MNT_DETACH) < 0)
        return sbx_error_errno(err, errno, "cannot detach the old root");
    if (chdir(iso->root) < 0)
        return sbx_error_errno(err, errno, "cannot chdir to '%s'", iso->root);
    return 0;
}
