/* Restoring a validated tree of the store into an empty directory fd. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sbx/fs.h"
#include "sandbox/snapshot/internal.h"

#define SMALL_BLOB ((uint64_t)1 << 16)

static int check_empty(int dirfd, struct sbx_error *err)
{
    int fd = dup(dirfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        int e = errno;
        sbx_fd_close(&fd);
        return sbx_error_errno(err, e, "cannot read the directory to restore into");
    }
    rewinddir(d);
    struct dirent *de;
    int rc = 0;
    while ((de = readdir(d))) {
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
            rc = sbx_error_set(err, SBX_E_EXISTS, 0,
                               "the directory to restore into is not empty (it has '%s')",
                               de->d_name);
            break;
        }
    }
    closedir(d);
    return rc;
}

/* A small blob is read whole in one call and written in one: a restore of many small files
 * costs little more than creating them. */
static int copy_small(int blob, const struct snap_entry *e, char *buf, int out,
                      struct sbx_error *err)
{
    size_t n = 0;
    while (n <= e->size) {
        ssize_t r = read(blob, buf + n, (size_t)e->size + 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return sbx_error_errno(err, errno, "cannot read blob '%.12s'", e->sha);
        if (r == 0)
            break;
        n += (size_t)r;
    }
    uint8_t d[SBX_SHA256_LEN];
    char got[SBX_SHA256_HEX_LEN + 1];
    int rc = sbx_sha256(buf, n, d, err);
    if (rc < 0)
        return rc;
    sbx_hex(d, sizeof(d), got);
    if (n != e->size || strcmp(got, e->sha) != 0)
        return sbx_error_set(err, SBX_E_IO, 0, "blob '%.12s' is corrupt", e->sha);
    return sbx_fd_write_all(out, buf, n, err);
}

static int restore_file(struct sbx_snapshot_store *st, int dirfd, const struct snap_entry *e,
                        char *buf, struct sbx_error *err)
{
    int out = -1, blob = -1;
    /* Created private and given its mode only once complete. */
    int rc = sbx_fs_open(dirfd, e->path, O_WRONLY | O_CREAT | O_EXCL, 0600, SBX_FS_NOFOLLOW, &out,
                         err);
    char *data = NULL;
    if (rc == 0)
        rc = sbx__snap_blob_get(st, e->sha, e->size, &data, &blob, err);
    if (rc == 0 && data)
        rc = sbx_fd_write_all(out, data, (size_t)e->size, err);
    else if (rc == 0 && e->size <= SMALL_BLOB)
        rc = copy_small(blob, e, buf, out, err);
    else if (rc == 0)
        rc = sbx__snap_blob_copy(blob, e->sha, e->size, out, NULL, NULL, err);
    free(data);
    if (rc == 0 && fchmod(out, e->mode & 0777 & SBX_FS_MODE_MASK) < 0)
        rc = sbx_error_errno(err, errno, "cannot chmod");
    sbx_fd_close(&blob);
    sbx_fd_close(&out);
    return rc;
}

static int restore_symlink(int dirfd, const struct snap_entry *e, struct sbx_error *err)
{
    const char *slash = strrchr(e->path, '/');
    char *parent = slash ? sbx_xstrndup(e->path, (size_t)(slash - e->path)) : sbx_xstrdup("");
    int pfd = -1;
    int rc = sbx_fs_open(dirfd, parent, O_PATH | O_DIRECTORY, 0, SBX_FS_NOFOLLOW, &pfd, err);
    if (rc == 0 && symlinkat(e->target, pfd, slash ? slash + 1 : e->path) < 0)
        rc = sbx_error_errno(err, errno, "cannot create symlink");
    sbx_fd_close(&pfd);
    free(parent);
    return rc;
}

static int chmod_dir(int dirfd, const char *path, mode_t mode, struct sbx_error *err)
{
    int fd = -1;
    int rc = sbx_fs_open(dirfd, path, O_RDONLY | O_DIRECTORY, 0, SBX_FS_NOFOLLOW, &fd, err);
    if (rc == 0 && fchmod(fd, mode & 0777 & SBX_FS_MODE_MASK) < 0)
        rc = sbx_error_errno(err, errno, "cannot chmod");
    sbx_fd_close(&fd);
    return rc;
}

/* Undo: directories made searchable and writable again, then every top-level entry removed.
 * dirfd was empty, so everything in it is ours. */
static void undo(int dirfd, const struct snap_tree *t)
{
    for (size_t i = 0; i < t->n; i++) {
        if (t->v[i].type == SNAP_DIR)
            chmod_dir(dirfd, t->v[i].path, 0700, NULL);
    }
    for (size_t i = 0; i < t->n; i++) {
        if (!strchr(t->v[i].path, '/'))
            sbx_fs_remove(dirfd, t->v[i].path, SBX_FS_RECURSIVE, NULL);
    }
}

int sbx_snapshot_restore(struct sbx_snapshot_store *st, const char *ref, int dirfd,
                         struct sbx_error *err)
{
    return sbx_snapshot_restore_progress(st, ref, dirfd, NULL, NULL, err);
}

int sbx_snapshot_restore_progress(struct sbx_snapshot_store *st, const char *ref, int dirfd,
                                  sbx_progress_fn *progress, void *progress_data,
                                  struct sbx_error *err)
{
    struct sbx_progress_sink sink;
    sbx_progress_sink_init(&sink, progress, progress_data);
    char hex[SBX_SHA256_HEX_LEN + 1];
    struct snap_tree t = {0};
    size_t i = 0;
    char *buf = sbx_xmalloc(SMALL_BLOB + 1);
    int rc = sbx__snap_lock(st, 0, err);
    if (rc < 0)
        return rc;
    if ((rc = sbx__snap_resolve_ref(st, ref, hex, err)) < 0 ||
        (rc = sbx__snap_tree_load(st, hex, &t, NULL, err)) < 0 ||
        (rc = check_empty(dirfd, err)) < 0)
        goto out;
    /* Sorted order puts every directory before what it holds; directories stay 0700 until the
     * end so that a read-only one can still be filled; symlinks come last so that nothing is
     * ever written through one (and every open refuses symlinks anyway). */
    const struct snap_entry *failed = NULL;
    for (i = 0; i < t.n && !failed; i++) {
        const struct snap_entry *e = &t.v[i];
        sbx_progress_report(&sink, "restore", e->path, i, t.n, 0);
        if (e->type == SNAP_DIR)
            rc = sbx_fs_mkdir(dirfd, e->path, 0700, SBX_FS_NOFOLLOW, err);
        else if (e->type == SNAP_FILE)
            rc = restore_file(st, dirfd, e, buf, err);
        if (rc < 0)
            failed = e;
    }
    for (i = 0; i < t.n && !failed; i++) {
        if (t.v[i].type == SNAP_SYMLINK && (rc = restore_symlink(dirfd, &t.v[i], err)) < 0)
            failed = &t.v[i];
    }
    for (i = t.n; i-- > 0 && !failed;) {
        if (t.v[i].type == SNAP_DIR && (rc = chmod_dir(dirfd, t.v[i].path, t.v[i].mode, err)) < 0)
            failed = &t.v[i];
    }
    sbx_progress_end(&sink, "restore", i, t.n);
    if (failed) {
        sbx_error_prefix(err, "'%s'", failed->path);
        undo(dirfd, &t);
    }
out:
    sbx__snap_unlock(st);
    if (rc < 0)
        sbx_error_prefix(err, "cannot restore snapshot '%s'", ref);
    sbx__snap_tree_release(&t);
    free(buf);
    return rc;
}
