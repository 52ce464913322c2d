/* Snapshots of a Kubernetes sandbox through a private host directory, for the session layer's
 * workspace_fd path: the workspace's tar (an exec of `tar -cf -`, files.c) unpacked into a
 * directory the shared snapshot code reads, and a snapshot restored into a directory, packed
 * and streamed into the pod (`tar -xof -`).
 *
 * The remote layer's workspace streams (sandbox/provider.h workspace_export/workspace_import,
 * snapshot/stream.h) carry the same tars straight between the pod and the store, without the
 * copy on this host; the session ops for them are in files.c, and this file goes once the
 * session layer uses them. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/dl-archive.h"
#include "core/fs-internal.h"
#include "providers/kubernetes/client.h"
#include "sandbox/snapshot/untar.h"
#include "sbx/fs.h"
#include "sbx/log.h"
#include "sbx/snapshot.h"

static int archive_fail(struct archive *a, const char *what, struct sbx_error *err)
{
    return sbx_error_set(err, SBX_E_IO, archive_errno(a), "%s: %s", what,
                         archive_error_string(a) ? archive_error_string(a) : "archive error");
}

static int tmpfile_fd(int *out, struct sbx_error *err)
{
    const char *tmp = getenv("TMPDIR");
    int fd = open(tmp && tmp[0] == '/' ? tmp : "/tmp", O_RDWR | O_TMPFILE | O_CLOEXEC, 0600);
    if (fd < 0)
        return sbx_error_errno(err, errno, "cannot make a temporary file");
    *out = fd;
    return 0;
}

static char *private_dir(const char *what, struct sbx_error *err)
{
    const char *tmp = getenv("TMPDIR");
    char *dir = sbx_xasprintf("%s/sbx-kube-%s-XXXXXX", tmp && tmp[0] == '/' ? tmp : "/tmp", what);
    if (!mkdtemp(dir)) {
        sbx_error_errno(err, errno, "cannot make a private directory");
        free(dir);
        return NULL;
    }
    return dir;
}

static void remove_tree(const char *path)
{
    struct sbx_error e = SBX_ERROR_INIT;
    if (sbx__fs_remove_tree(path, &e) < 0)
        sbx_log(SBX_LOG_WARN, "cannot remove '%s': %s", path, e.msg);
}

/* A member's data from in to out, as a stream into a tar. */
static int copy_data(struct archive *in, struct archive *out, struct sbx_error *err)
{
    const void *buf;
    size_t n;
    la_int64_t off;
    int r;
    while ((r = archive_read_data_block(in, &buf, &n, &off)) == ARCHIVE_OK)
        if (archive_write_data(out, buf, n) != (la_ssize_t)n)
            return archive_fail(out, "cannot copy the workspace", err);
    return r == ARCHIVE_EOF ? 0 : archive_fail(in, "the workspace archive", err);
}

void sbx__kube_workspace_drop(struct ksession *s)
{
    if (s->ws_dir) {
        remove_tree(s->ws_dir);
        free(s->ws_dir);
        s->ws_dir = NULL;
    }
    sbx_fd_close(&s->ws_fd);
}

int sbx__kube_workspace_fd(struct sbx_session *bs, int *out, struct sbx_error *err)
{
    struct ksession *s = (struct ksession *)bs;
    int tar = -1, rc;
    /* A fresh copy each time: a snapshot is of the workspace as it is now. */
    sbx__kube_workspace_drop(s);
    if (!(s->ws_dir = private_dir("ws", err)))
        return -SBX_E_SYS;
    if ((rc = tmpfile_fd(&tar, err)) < 0 || (rc = sbx__kube_workspace_export(bs, tar, err)) < 0)
        goto out;
    if (lseek(tar, 0, SEEK_SET) < 0) {
        rc = sbx_error_errno(err, errno, "lseek");
        goto out;
    }
    if ((rc = sbx__workspace_untar(tar, s->ws_dir, err)) < 0)
        goto out;
    s->ws_fd = open(s->ws_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (s->ws_fd < 0) {
        rc = sbx_error_errno(err, errno, "cannot open '%s'", s->ws_dir);
        goto out;
    }
    *out = s->ws_fd;
out:
    if (rc < 0)
        sbx__kube_workspace_drop(s);
    sbx_fd_close(&tar);
    return rc;
}

/* The tree under dir as a tar with names relative to it, owners root. */
static int tar_tree(const char *dir, int tar, struct sbx_error *err)
{
    int rc = sbx__archive_load(err);
    if (rc < 0)
        return rc;
    struct archive *in = archive_read_disk_new(), *out = archive_write_new();
    struct archive_entry *e = NULL;
    size_t dlen = strlen(dir);
    archive_read_disk_set_symlink_physical(in);
    archive_read_disk_set_behavior(in, ARCHIVE_READDISK_NO_XATTR | ARCHIVE_READDISK_NO_ACL |
                                               ARCHIVE_READDISK_NO_FFLAGS);
    if (archive_write_set_format_pax_restricted(out) != ARCHIVE_OK ||
        archive_write_open_fd(out, tar) != ARCHIVE_OK ||
        archive_read_disk_open(in, dir) != ARCHIVE_OK) {
        rc = archive_fail(out, "cannot pack the restored workspace", err);
        goto out;
    }
    for (;;) {
        e = archive_entry_new();
        int r = archive_read_next_header2(in, e);
        if (r == ARCHIVE_EOF)
            break;
        if (r != ARCHIVE_OK) {
            rc = archive_fail(in, "cannot read the restored workspace", err);
            goto out;
        }
        (void)archive_read_disk_descend(in);
        const char *path = archive_entry_pathname(e);
        mode_t type = archive_entry_filetype(e);
        if (strncmp(path, dir, dlen) == 0 && path[dlen] == '/' &&
            (type == AE_IFREG || type == AE_IFDIR || type == AE_IFLNK)) {
            char *rel = sbx_xasprintf("./%s", path + dlen + 1);
            archive_entry_set_pathname(e, rel);
            free(rel);
            archive_entry_set_uid(e, 0);
            archive_entry_set_gid(e, 0);
            archive_entry_set_uname(e, NULL);
            archive_entry_set_gname(e, NULL);
            if (archive_write_header(out, e) != ARCHIVE_OK ||
                (type == AE_IFREG && (rc = copy_data(in, out, err)) < 0)) {
                rc = rc < 0 ? rc : archive_fail(out, "cannot pack the restored workspace", err);
                goto out;
            }
        }
        archive_entry_free(e);
        e = NULL;
    }
    if (archive_write_close(out) != ARCHIVE_OK)
        rc = archive_fail(out, "cannot pack the restored workspace", err);
out:
    archive_entry_free(e);
    archive_read_free(in);
    archive_write_free(out);
    return rc;
}

int sbx__kube_workspace_restore(struct ksession *s, struct sbx_snapshot_store *st, const char *ref,
                                sbx_progress_fn *progress, void *progress_data,
                                struct sbx_error *err)
{
    char *dir = private_dir("restore", err);
    int dfd = -1, tar = -1, rc;
    if (!dir)
        return -SBX_E_SYS;
    dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0) {
        rc = sbx_error_errno(err, errno, "cannot open '%s'", dir);
        goto out;
    }
    if ((rc = sbx_snapshot_restore_progress(st, ref, dfd, progress, progress_data, err)) < 0 ||
        (rc = tmpfile_fd(&tar, err)) < 0 || (rc = tar_tree(dir, tar, err)) < 0)
        goto out;
    if (lseek(tar, 0, SEEK_SET) < 0) {
        rc = sbx_error_errno(err, errno, "lseek");
        goto out;
    }
    rc = sbx__kube_workspace_import(&s->base, tar, err);
out:
    sbx_fd_close(&tar);
    sbx_fd_close(&dfd);
    remove_tree(dir);
    free(dir);
    return rc;
}
