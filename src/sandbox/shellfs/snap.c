/* Workspace snapshots of a remote sandbox as tar streams (shellfs.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/dl-archive.h"
#include "core/fs-internal.h"
#include "sandbox/shellfs/shellfs.h"
#include "sbx/fs.h"
#include "sbx/hash.h"
#include "sbx/log.h"
#include "sbx/snapshot.h"

#define WS_ARCHIVE_MAX ((uint64_t)8 << 30)
#define COPY_CHUNK     65536

/* In the sandbox: $1 the workspace, $2 the archive to write; tar's own messages on failure. */
static const char PACK[] = "cd -- \"$1\" && tar --exclude='./.sbx-write-*' -cf \"$2\" .";
static const char UNPACK[] = "r=0; tar -C \"$1\" -xpf \"$2\" || r=$?; rm -f -- \"$2\"; exit $r";

static char *private_dir(const char *what, struct sbx_error *err)
{
    const char *tmp = getenv("TMPDIR");
    char *dir = sbx_xasprintf("%s/sbx-remote-%s-XXXXXX", tmp && tmp[0] == '/' ? tmp : "/tmp", what);
    if (!mkdtemp(dir)) {
        (void)sbx_error_errno(err, errno, "cannot make a directory for the workspace");
        free(dir);
        return NULL;
    }
    return dir;
}

static void remove_tree(char **path)
{
    struct sbx_error e = SBX_ERROR_INIT;
    if (*path && sbx__fs_remove_tree(*path, &e) < 0)
        sbx_log(SBX_LOG_WARN, "cannot remove '%s': %s", *path, e.msg);
    free(*path);
    *path = NULL;
}

void sbx__shellfs_copy_drop(struct sbx__shellfs_copy *copy)
{
    remove_tree(&copy->dir);
    sbx_fd_close(&copy->fd);
}

/* A name for a file in the sandbox's /tmp. */
static char *sandbox_tmp(const char *what, struct sbx_error *err)
{
    char rnd[17];
    if (sbx_random_hex(rnd, 8, err) < 0)
        return NULL;
    return sbx_xasprintf("/tmp/.sbx-%s-%s.tar", what, rnd);
}

/* The workspace as a tar from the sandbox into fd. */
int sbx__shellfs_pack(const struct sbx__shellfs *fs, int fd, struct sbx_error *err)
{
    char *f = sandbox_tmp("pack", err);
    if (!f)
        return -SBX_E_SYS;
    struct sbx__shell_run r;
    sbx__shell_run_init(&r, (size_t)1 << 20);
    const char *argv[] = {"/bin/sh", "-c", PACK, "sbx", fs->root, f, NULL};
    int rc = sbx__shellfs_run_ok(fs, argv, "archive the workspace", fs->root, &r, err);
    if (rc == 0)
        rc = fs->ops->get(fs->ctx, f, fd, WS_ARCHIVE_MAX, err);
    const char *rm[] = {"rm", "-f", "--", f, NULL};
    struct sbx_error ignored = SBX_ERROR_INIT;
    sbx__shell_run_release(&r);
    sbx__shell_run_init(&r, 4096);
    (void)fs->ops->run(fs->ctx, rm, &r, &ignored);
    sbx__shell_run_release(&r);
    free(f);
    return rc;
}

int sbx__shellfs_copy_take(const struct sbx__shellfs *fs, struct sbx__shellfs_copy *copy,
                           struct sbx_error *err)
{
    struct sbx_snapshot_store *st = NULL;
    char *store_dir = NULL, *ref = NULL;
    int tar = -1, rc;
    /* A fresh copy each time: a snapshot is of the workspace as it is now. */
    sbx__shellfs_copy_drop(copy);
    if ((rc = sbx__shellfs_tmpfile(&tar, err)) < 0 || (rc = sbx__shellfs_pack(fs, tar, err)) < 0)
        goto out;
    if (lseek(tar, 0, SEEK_SET) < 0) {
        rc = sbx_error_errno(err, errno, "lseek");
        goto out;
    }
    if (!(store_dir = private_dir("store", err)) || !(copy->dir = private_dir("ws", err))) {
        rc = -SBX_E_SYS;
        goto out;
    }
    if ((rc = sbx_snapshot_store_open(store_dir, &st, err)) < 0 ||
        (rc = sbx_snapshot_import(st, tar, NULL, &ref, err)) < 0)
        goto out;
    copy->fd = open(copy->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (copy->fd < 0) {
        rc = sbx_error_errno(err, errno, "cannot open '%s'", copy->dir);
        goto out;
    }
    rc = sbx_snapshot_restore(st, ref, copy->fd, err);
out:
    if (rc < 0)
        sbx__shellfs_copy_drop(copy);
    sbx_snapshot_store_free(st);
    remove_tree(&store_dir);
    sbx_fd_close(&tar);
    free(ref);
    return rc;
}

static int arc_fail(struct archive *a, const char *what, struct sbx_error *err)
{
    return sbx_error_set(err, SBX_E_IO, archive_errno(a), "%s: %s", what,
                         archive_error_string(a) ? archive_error_string(a) : "archive error");
}

static int is_header_member(const char *name)
{
    if (strncmp(name, "./", 2) == 0)
        name += 2;
    return strcmp(name, SBX_SNAPSHOT_HEADER_MEMBER) == 0;
}

/* The store's export (zstd) from in as an uncompressed tar into out, without its header
 * member. */
static int transcode(int in, int out, struct sbx_error *err)
{
    int rc = sbx__archive_load(err);
    if (rc < 0)
        return rc;
    struct archive *r = archive_read_new(), *w = archive_write_new();
    struct archive_entry *e = NULL;
    char buf[COPY_CHUNK];
    archive_read_support_filter_zstd(r);
    archive_read_support_filter_none(r);
    archive_read_support_format_tar(r);
    if (archive_read_open_fd(r, in, COPY_CHUNK) != ARCHIVE_OK) {
        rc = arc_fail(r, "the snapshot's archive", err);
        goto out;
    }
    if (archive_write_set_format_pax_restricted(w) != ARCHIVE_OK ||
        archive_write_open_fd(w, out) != ARCHIVE_OK) {
        rc = arc_fail(w, "cannot write an archive", err);
        goto out;
    }
    for (;;) {
        int x = archive_read_next_header(r, &e);
        if (x == ARCHIVE_EOF)
            break;
        if (x != ARCHIVE_OK) {
            rc = arc_fail(r, "the snapshot's archive", err);
            goto out;
        }
        if (is_header_member(archive_entry_pathname(e)))
            continue;
        if (archive_write_header(w, e) != ARCHIVE_OK) {
            rc = arc_fail(w, "cannot write an archive", err);
            goto out;
        }
        la_ssize_t n;
        while ((n = archive_read_data(r, buf, sizeof(buf))) > 0)
            if (archive_write_data(w, buf, (size_t)n) != n) {
                rc = arc_fail(w, "cannot write an archive", err);
                goto out;
            }
        if (n < 0) {
            rc = arc_fail(r, "the snapshot's archive", err);
            goto out;
        }
    }
    if (archive_write_close(w) != ARCHIVE_OK)
        rc = arc_fail(w, "cannot write an archive", err);
out:
    archive_read_free(r);
    archive_write_free(w);
    return rc;
}

int sbx__shellfs_restore(const struct sbx__shellfs *fs, struct sbx_snapshot_store *st,
                         const char *ref, struct sbx_error *err)
{
    int zst = -1, tar = -1, rc;
    char *f = NULL;
    struct stat sb;
    if ((rc = sbx__shellfs_tmpfile(&zst, err)) < 0 || (rc = sbx__shellfs_tmpfile(&tar, err)) < 0 ||
        (rc = sbx_snapshot_export(st, ref, zst, err)) < 0)
        goto out;
    if (lseek(zst, 0, SEEK_SET) < 0) {
        rc = sbx_error_errno(err, errno, "lseek");
        goto out;
    }
    if ((rc = transcode(zst, tar, err)) < 0)
        goto out;
    if (fstat(tar, &sb) < 0 || lseek(tar, 0, SEEK_SET) < 0) {
        rc = sbx_error_errno(err, errno, "cannot read the staged archive");
        goto out;
    }
    if (!(f = sandbox_tmp("unpack", err))) {
        rc = -SBX_E_SYS;
        goto out;
    }
    if ((rc = fs->ops->put(fs->ctx, f, tar, (uint64_t)sb.st_size, err)) < 0)
        goto out;
    struct sbx__shell_run r;
    sbx__shell_run_init(&r, (size_t)1 << 20);
    const char *argv[] = {"/bin/sh", "-c", UNPACK, "sbx", fs->root, f, NULL};
    rc = sbx__shellfs_run_ok(fs, argv, "unpack the snapshot into", fs->root, &r, err);
    sbx__shell_run_release(&r);
out:
    sbx_fd_close(&zst);
    sbx_fd_close(&tar);
    free(f);
    return rc;
}
