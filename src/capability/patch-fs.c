/* The built-in patch provider on a host directory fd: reads through sbx_fs_* (openat2 beneath
 * the directory) and a commit that stages everything before it replaces anything. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "capability/patch-internal.h"
#include "sbx/fs.h"
#include "sbx/hash.h"
#include "sbx/patch.h"

int sbx__patch_fault_after = -1;

static int dir_read(struct sbx_patch_fs *fs, const char *path, size_t max, struct sbx_buf *out,
                    unsigned *mode, struct sbx_error *err)
{
    int fd = -1, rc;
    struct stat st;

    /* O_NONBLOCK: a fifo planted in the workspace must not hang the harness. */
    rc = sbx_fs_open(fs->dirfd, path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK, 0, 0, &fd, err);
    if (rc < 0) {
        if (err && err->sys_errno == ELOOP && sbx_fs_stat(fs->dirfd, path, &st, NULL) == 0 &&
            S_ISLNK(st.st_mode))
            rc = sbx_error_set(err, SBX_E_PERM, 0, "'%s' is a symbolic link", path);
        return rc;
    }
    if (fstat(fd, &st) < 0) {
        rc = sbx_error_errno(err, errno, "cannot stat '%s'", path);
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a regular file", path);
        goto out;
    }
    if ((size_t)st.st_size > max) {
        rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "'%s' is larger than %zu bytes", path, max);
        goto out;
    }
    if ((rc = sbx_fd_read_all(fd, max, out, err)) < 0)
        goto out;
    *mode = st.st_mode & 07777;
out:
    sbx_fd_close(&fd);
    return rc;
}

static int dir_exists(struct sbx_patch_fs *fs, const char *path, enum sbx_patch_file_kind *kind,
                      struct sbx_error *err)
{
    struct stat st;
    struct sbx_error e = SBX_ERROR_INIT;
    if (sbx_fs_stat(fs->dirfd, path, &st, &e) < 0) {
        if (e.sys_errno == ENOENT || e.sys_errno == ENOTDIR) {
            *kind = SBX_PATCH_FILE_NONE;
            return 0;
        }
        return sbx_error_copy(err, &e);
    }
    if (S_ISREG(st.st_mode))
        *kind = SBX_PATCH_FILE_REGULAR;
    else if (S_ISDIR(st.st_mode))
        *kind = SBX_PATCH_FILE_DIR;
    else if (S_ISLNK(st.st_mode))
        *kind = SBX_PATCH_FILE_SYMLINK;
    else
        *kind = SBX_PATCH_FILE_OTHER;
    return 0;
}

/* One change being committed. */
struct slot {
    int pfd;          /* the parent directory, opened beneath the root */
    const char *name; /* last component of the path */
    char tmp[48];     /* staged new content, in the same directory */
    char bak[48];     /* hard link to the file being replaced or deleted */
    int existed, has_tmp, has_bak, done;
};

/* ".sbx-patch-<16 hex>.<suffix>"; O_EXCL catches the impossible collision. */
static int random_name(char *buf, size_t sz, const char *suffix, struct sbx_error *err)
{
    char hex[17];
    int rc = sbx_random_hex(hex, 8, err);
    if (rc < 0)
        return rc;
    snprintf(buf, sz, ".sbx-patch-%s.%s", hex, suffix);
    return 0;
}

/* Stage change c in s: open the parent, check the target, write the temp file, link the
 * backup. Nothing visible changes except new parent directories. */
static int stage(struct sbx_patch_fs *fs, const struct sbx_patch_change *c, struct slot *s,
                 struct sbx_error *err)
{
    const char *slash = strrchr(c->path, '/');
    char *parent = slash ? sbx_xstrndup(c->path, (size_t)(slash - c->path)) : sbx_xstrdup("");
    int fd = -1, rc, exists;
    struct stat st;
    mode_t mode;

    s->name = slash ? slash + 1 : c->path;
    if (c->data && *parent && (rc = sbx_fs_mkdir(fs->dirfd, parent, 0755, SBX_FS_PARENTS, err)) < 0)
        goto out;
    if ((rc = sbx_fs_open(fs->dirfd, parent, O_RDONLY | O_DIRECTORY, 0, 0, &s->pfd, err)) < 0)
        goto out;
    exists = fstatat(s->pfd, s->name, &st, AT_SYMLINK_NOFOLLOW) == 0;
    if (!exists && errno != ENOENT) {
        rc = sbx_error_errno(err, errno, "cannot stat '%s'", c->path);
        goto out;
    }
    if (exists && !S_ISREG(st.st_mode)) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is %s", c->path,
                           S_ISLNK(st.st_mode)   ? "a symbolic link"
                           : S_ISDIR(st.st_mode) ? "a directory"
                                                 : "not a regular file");
        goto out;
    }
    s->existed = exists;
    if (!c->data && !exists) {
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "cannot delete '%s': no such file", c->path);
        goto out;
    }
    if (c->data) {
        if ((rc = random_name(s->tmp, sizeof(s->tmp), "tmp", err)) < 0)
            goto out;
        fd = openat(s->pfd, s->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0) {
            rc = sbx_error_errno(err, errno, "cannot create a temporary file for '%s'", c->path);
            goto out;
        }
        s->has_tmp = 1;
        mode = (c->mode ? (mode_t)c->mode : exists ? st.st_mode : 0644) & SBX_FS_MODE_MASK;
        if ((rc = sbx_fd_write_all(fd, c->data, c->len, err)) < 0) {
            sbx_error_prefix(err, "cannot write '%s'", c->path);
            goto out;
        }
        /* Keep the owner of a replaced file (a new one gets its directory's): the harness may
         * run as another user than the one the workspace belongs to. Only a privileged
         * harness can do this, and the owner is already right otherwise. */
        struct stat owner = st;
        if (!exists && fstat(s->pfd, &owner) < 0)
            owner.st_uid = geteuid(), owner.st_gid = getegid();
        if (owner.st_uid != geteuid() || owner.st_gid != getegid())
            (void)!fchown(fd, owner.st_uid, owner.st_gid);
        if (fchmod(fd, mode) < 0 || fsync(fd) < 0) {
            rc = sbx_error_errno(err, errno, "cannot write '%s'", c->path);
            goto out;
        }
    }
    /* Without hard links (some FUSE file systems) the change just cannot be undone. */
    if (exists) {
        if ((rc = random_name(s->bak, sizeof(s->bak), "bak", err)) < 0)
            goto out;
        s->has_bak = linkat(s->pfd, s->name, s->pfd, s->bak, 0) == 0;
    }
    rc = 0;
out:
    sbx_fd_close(&fd);
    free(parent);
    return rc;
}

static int dir_commit(struct sbx_patch_fs *fs, const struct sbx_patch_change *changes, size_t n,
                      struct sbx_error *err)
{
    struct slot *slots = sbx_xcalloc(n, sizeof(*slots));
    size_t i;
    int rc = 0, rollback_failed = 0;
    const char *bad_path = NULL;

    for (i = 0; i < n; i++)
        slots[i].pfd = -1;
    for (i = 0; i < n; i++) {
        if ((rc = stage(fs, &changes[i], &slots[i], err)) < 0) {
            sbx_error_prefix(err, "patch not applied");
            goto cleanup;
        }
    }
    for (i = 0; i < n; i++) {
        struct slot *s = &slots[i];
        int r, e;
        if (sbx__patch_fault_after >= 0 && (int)i >= sbx__patch_fault_after) {
            r = -1;
            errno = EIO;
        } else if (changes[i].data) {
            r = renameat(s->pfd, s->tmp, s->pfd, s->name);
        } else {
            r = unlinkat(s->pfd, s->name, 0);
        }
        if (r < 0) {
            e = errno;
            bad_path = changes[i].path;
            rc = sbx_error_errno(err, e, "cannot %s '%s'", changes[i].data ? "write" : "delete",
                                 bad_path);
            break;
        }
        s->done = 1;
        s->has_tmp = 0;
    }
    if (rc < 0) {
        /* Undo what was done, newest first. */
        while (i-- > 0) {
            struct slot *s = &slots[i];
            int r;
            if (s->has_bak) {
                r = renameat(s->pfd, s->bak, s->pfd, s->name);
                if (r == 0)
                    s->has_bak = 0;
            } else if (!s->existed) {
                r = unlinkat(s->pfd, s->name, 0);
            } else {
                r = -1;
            }
            if (r < 0)
                rollback_failed = 1;
        }
        if (rollback_failed)
            sbx_error_prefix(err, "patch applied only in part (rolling back failed)");
        else
            sbx_error_prefix(err, "patch not applied (rolled back)");
    }
cleanup:
    for (i = 0; i < n; i++) {
        struct slot *s = &slots[i];
        if (s->pfd < 0)
            continue;
        if (s->has_tmp)
            unlinkat(s->pfd, s->tmp, 0);
        if (s->has_bak)
            unlinkat(s->pfd, s->bak, 0);
        if (rc == 0)
            fsync(s->pfd);
        sbx_fd_close(&s->pfd);
    }
    free(slots);
    return rc;
}

static const struct sbx_patch_fs_ops dir_ops = {dir_read, dir_exists, dir_commit};

void sbx_patch_fs_init_dirfd(struct sbx_patch_fs *fs, int dirfd)
{
    fs->ops = &dir_ops;
    fs->ctx = NULL;
    fs->dirfd = dirfd;
}
