/* A workspace's tar unpacked on this host (sandbox/snapshot/untar.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dl-archive.h"
#include "sandbox/snapshot/untar.h"
#include "sbx/common.h"
#include "sbx/fs.h"

#define COPY_CHUNK 65536

static int archive_fail(struct archive *a, const char *what, struct sbx_error *err)
{
    return sbx_error_set(err, SBX_E_IO, archive_errno(a), "%s: %s", what,
                         archive_error_string(a) ? archive_error_string(a) : "archive error");
}

/* The entry's name without its "./" ("./a/b" -> "a/b"), or NULL for the top itself or a name
 * that could leave the directory (absolute, "..", empty parts). */
static const char *below_top(const char *name)
{
    if (!name || name[0] == '/')
        return NULL;
    while (name[0] == '.' && name[1] == '/')
        name += 2;
    if (!name[0] || strcmp(name, ".") == 0)
        return NULL;
    for (const char *p = name; *p;) {
        size_t k = strcspn(p, "/");
        if (k == 0 || (k == 1 && p[0] == '.') || (k == 2 && p[0] == '.' && p[1] == '.'))
            return NULL;
        p += k;
        if (*p == '/')
            p++;
    }
    return name;
}

static int copy_entry_data(struct archive *in, struct archive *out, struct sbx_error *err)
{
    const void *buf;
    size_t n;
    la_int64_t off;
    int r;
    while ((r = archive_read_data_block(in, &buf, &n, &off)) == ARCHIVE_OK)
        if (archive_write_data_block(out, buf, n, off) != ARCHIVE_OK)
            return archive_fail(out, "cannot copy the workspace out", err);
    return r == ARCHIVE_EOF ? 0 : archive_fail(in, "the workspace archive", err);
}

int sbx__workspace_untar(int tar, const char *dir, struct sbx_error *err)
{
    int rc = sbx__archive_load(err);
    if (rc < 0)
        return rc;
    struct archive *in = archive_read_new(), *out = archive_write_disk_new();
    struct archive_entry *e = NULL;
    archive_read_support_format_tar(in);
    /* Never through a symlink, never a device or owner from the archive. */
    archive_write_disk_set_options(out, ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_PERM |
                                                ARCHIVE_EXTRACT_SECURE_SYMLINKS |
                                                ARCHIVE_EXTRACT_SECURE_NODOTDOT);
    if (archive_read_open_fd(in, tar, COPY_CHUNK) != ARCHIVE_OK) {
        rc = archive_fail(in, "the workspace archive", err);
        goto out;
    }
    for (;;) {
        int r = archive_read_next_header(in, &e);
        if (r == ARCHIVE_EOF)
            break;
        if (r != ARCHIVE_OK) {
            rc = archive_fail(in, "the workspace archive", err);
            goto out;
        }
        const char *rel = below_top(archive_entry_pathname(e));
        mode_t type = archive_entry_filetype(e);
        if (!rel || archive_entry_hardlink(e) ||
            (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK))
            continue;
        char *full = sbx_xasprintf("%s/%s", dir, rel);
        archive_entry_set_pathname(e, full);
        archive_entry_set_perm(e, archive_entry_perm(e) & SBX_FS_MODE_MASK);
        free(full);
        if (archive_write_header(out, e) != ARCHIVE_OK) {
            rc = archive_fail(out, "cannot copy the workspace out", err);
            goto out;
        }
        if (type == AE_IFREG && (rc = copy_entry_data(in, out, err)) < 0)
            goto out;
        if (archive_write_finish_entry(out) != ARCHIVE_OK) {
            rc = archive_fail(out, "cannot copy the workspace out", err);
            goto out;
        }
    }
    if (archive_write_close(out) != ARCHIVE_OK)
        rc = archive_fail(out, "cannot copy the workspace out", err);
out:
    archive_read_free(in);
    archive_write_free(out);
    return rc;
}
