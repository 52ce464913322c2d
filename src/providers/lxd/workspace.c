/* The workspace of an LXD sandbox moved as one tar stream, for sbx's own snapshots (which
 * move between providers): out, `tar -C ROOT -cf - .` run in the instance into a temporary
 * file, extracted into a private host directory the shared snapshot code reads; in, a
 * restored snapshot packed on this host and unpacked by `tar -C ROOT -xf -` in the instance,
 * then given to the session's owner. Only files, directories and symlinks travel, with names
 * that stay below the top; owners and setuid bits do not. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/dl-archive.h"
#include "core/fs-internal.h"
#include "providers/lxd/lxd.h"
#include "sandbox/snapshot/untar.h"
#include "sbx/fs.h"
#include "sbx/log.h"
#include "sbx/snapshot.h"

#define WS_ARCHIVE_MAX ((uint64_t)8 << 30)
#define RUN_MAX        ((size_t)1 << 20)

static int archive_fail(struct archive *a, const char *what, struct sbx_error *err)
{
    return sbx_error_set(err, SBX_E_IO, archive_errno(a), "%s: %s", what,
                         archive_error_string(a) ? archive_error_string(a) : "archive error");
}

static void remove_tree(const char *path)
{
    struct sbx_error e = SBX_ERROR_INIT;
    if (sbx__fs_remove_tree(path, &e) < 0)
        sbx_log(SBX_LOG_WARN, "cannot remove '%s': %s", path, e.msg);
}

void sbx__lxd_workspace_drop(struct sbx__lxd_session *s)
{
    if (s->ws_dir) {
        remove_tree(s->ws_dir);
        free(s->ws_dir);
        s->ws_dir = NULL;
    }
    sbx_fd_close(&s->ws_fd);
}

static char *private_dir(const char *what, struct sbx_error *err)
{
    const char *tmp = getenv("TMPDIR");
    char *dir = sbx_xasprintf("%s/sbx-lxd-%s-XXXXXX", tmp && tmp[0] == '/' ? tmp : "/tmp", what);
    if (!mkdtemp(dir)) {
        sbx_error_errno(err, errno, "cannot make a directory for the workspace copy");
        free(dir);
        return NULL;
    }
    return dir;
}

/* Run a fixed command as root with the run's streams; its failure said with its stderr. */
static int run_ok(struct sbx__lxd_session *s, const char *const *argv, struct sbx__lxd_run *r,
                  const char *what, struct sbx_error *err)
{
    int rc = sbx__lxd_exec_run(s, argv, r, err);
    if (rc == 0 && r->code != 0)
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "cannot %s in sandbox '%s': %.*s (exit %d)", what,
                           s->base.id, (int)strcspn(r->err.data ? r->err.data : "", "\n"),
                           r->err.data ? r->err.data : "", r->code);
    return rc;
}

int sbx__lxd_workspace_fd(struct sbx_session *bs, int *out, struct sbx_error *err)
{
    struct sbx__lxd_session *s = (struct sbx__lxd_session *)bs;
    int tar = -1, rc;
    struct sbx__lxd_run r;
    sbx__lxd_run_init(&r, RUN_MAX);
    /* A fresh copy each time: a snapshot is of the workspace as it is now. */
    sbx__lxd_workspace_drop(s);
    if (!(s->ws_dir = private_dir("ws", err))) {
        rc = -SBX_E_IO;
        goto out;
    }
    if ((rc = sbx__lxd_tmpfile(&tar, err)) < 0)
        goto out;
    r.out_fd = tar;
    r.out_max = WS_ARCHIVE_MAX;
    const char *argv[] = {"tar", "-C", s->base.root, "-cf", "-", ".", NULL};
    if ((rc = run_ok(s, argv, &r, "copy the workspace out", err)) < 0)
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
        sbx__lxd_workspace_drop(s);
    sbx__lxd_run_release(&r);
    sbx_fd_close(&tar);
    return rc;
}

/* The tree under dir as a tar with names relative to it, into tar (ustar, with pax headers
 * only for what ustar cannot say: busybox and GNU tar read both). Owners root until the caller
 * gives them away. */
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
        archive_write_open_fd(out, tar) != ARCHIVE_OK) {
        rc = archive_fail(out, "cannot write an archive", err);
        goto out;
    }
    if (archive_read_disk_open(in, dir) != ARCHIVE_OK) {
        rc = archive_fail(in, "cannot read the restored workspace", err);
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
        if (strncmp(path, dir, dlen) != 0 || path[dlen] != '/' ||
            (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK)) {
            archive_entry_free(e);
            continue;
        }
        char *rel = sbx_xasprintf("./%s", path + dlen + 1);
        archive_entry_set_pathname(e, rel);
        free(rel);
        archive_entry_set_uid(e, 0);
        archive_entry_set_gid(e, 0);
        archive_entry_set_uname(e, NULL);
        archive_entry_set_gname(e, NULL);
        if (archive_write_header(out, e) != ARCHIVE_OK) {
            rc = archive_fail(out, "cannot write an archive", err);
            goto out;
        }
        if (type == AE_IFREG) {
            const void *buf;
            size_t n;
            la_int64_t off;
            while ((r = archive_read_data_block(in, &buf, &n, &off)) == ARCHIVE_OK)
                if (archive_write_data(out, buf, n) != (la_ssize_t)n) {
                    rc = archive_fail(out, "cannot write an archive", err);
                    goto out;
                }
            if (r != ARCHIVE_EOF) {
                rc = archive_fail(in, "cannot read the restored workspace", err);
                goto out;
            }
        }
        archive_entry_free(e);
    }
    if (archive_write_close(out) != ARCHIVE_OK)
        rc = archive_fail(out, "cannot write an archive", err);
out:
    archive_entry_free(e);
    archive_read_free(in);
    archive_write_free(out);
    return rc;
}

/* The restored files given to the session's owner. */
static int give_to_owner(struct sbx__lxd_session *s, struct sbx_error *err)
{
    if (s->owner.uid == 0 && s->owner.gid == 0)
        return 0;
    char ids[64];
    snprintf(ids, sizeof(ids), "%ld:%ld", s->owner.uid, s->owner.gid);
    const char *chown[] = {"chown", "-R", "-h", "--", ids, s->base.root, NULL};
    struct sbx__lxd_run r;
    sbx__lxd_run_init(&r, RUN_MAX);
    int rc = run_ok(s, chown, &r, "give the restored files to their owner", err);
    sbx__lxd_run_release(&r);
    return rc;
}

int sbx__lxd_workspace_restore(struct sbx__lxd_session *s, struct sbx_snapshot_store *st,
                               const char *ref, sbx_progress_fn *progress, void *progress_data,
                               struct sbx_error *err)
{
    char *dir = private_dir("restore", err);
    int dfd = -1, tar = -1, rc;
    struct sbx__lxd_run r;
    sbx__lxd_run_init(&r, RUN_MAX);
    if (!dir)
        return -SBX_E_IO;
    dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0) {
        rc = sbx_error_errno(err, errno, "cannot open '%s'", dir);
        goto out;
    }
    if ((rc = sbx_snapshot_restore_progress(st, ref, dfd, progress, progress_data, err)) < 0 ||
        (rc = sbx__lxd_tmpfile(&tar, err)) < 0 || (rc = tar_tree(dir, tar, err)) < 0)
        goto out;
    if (lseek(tar, 0, SEEK_SET) < 0) {
        rc = sbx_error_errno(err, errno, "cannot read the staged archive");
        goto out;
    }
    r.in_fd = tar;
    const char *untar[] = {"tar", "-C", s->base.root, "-xf", "-", NULL};
    if ((rc = run_ok(s, untar, &r, "restore the workspace", err)) < 0)
        goto out;
    rc = give_to_owner(s, err);
out:
    sbx__lxd_run_release(&r);
    sbx_fd_close(&tar);
    sbx_fd_close(&dfd);
    remove_tree(dir);
    free(dir);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Tar streams (the remote layer's workspace_export and workspace_import): the same commands,
 * with the caller's pipe instead of a temporary file and a copy on this host. */

int sbx__lxd_workspace_export(struct sbx_session *bs, int out_fd, struct sbx_error *err)
{
    struct sbx__lxd_session *s = (struct sbx__lxd_session *)bs;
    struct sbx__lxd_run r;
    sbx__lxd_run_init(&r, RUN_MAX);
    r.out_fd = out_fd;
    r.out_max = WS_ARCHIVE_MAX;
    const char *argv[] = {"tar", "-C", s->base.root, "-cf", "-", ".", NULL};
    int rc = run_ok(s, argv, &r, "copy the workspace out", err);
    sbx__lxd_run_release(&r);
    return rc;
}

int sbx__lxd_workspace_import(struct sbx_session *bs, int in_fd, struct sbx_error *err)
{
    struct sbx__lxd_session *s = (struct sbx__lxd_session *)bs;
    struct sbx__lxd_run r;
    sbx__lxd_run_init(&r, RUN_MAX);
    r.in_fd = in_fd;
    const char *untar[] = {"tar", "-C", s->base.root, "-xf", "-", NULL};
    int rc = run_ok(s, untar, &r, "restore the workspace", err);
    sbx__lxd_run_release(&r);
    return rc < 0 ? rc : give_to_owner(s, err);
}
