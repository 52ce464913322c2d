/* Export of a snapshot to a tar archive and import of a (hostile) one, through libarchive.
 * Import never creates a path taken from the archive: it writes blobs by hash and one tree. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/dl-archive.h"
#include "sbx/buf.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/path.h"
#include "sbx/strv.h"
#include "sbx/time.h"
#include "sandbox/snapshot/internal.h"
#include "sandbox/snapshot/stream.h"

#define HEADER_MAX ((size_t)64 << 10)
/* Below this many expanded bytes the ratio is not checked: a small archive of a few empty or
 * repetitive files compresses far better than 1000:1 and is harmless. */
#define RATIO_FLOOR ((uint64_t)1 << 20)
/* Holes are hashed as the zeros they read as (at import and at every restore), some 1 GiB a
 * second: past this much, holes count towards max_ratio too. Below it an archive of sbx's own
 * with a sparse file imports whatever its ratio. */
#define SPARSE_FLOOR ((uint64_t)1 << 30)
#define READ_BLOCK   65536

struct import {
    struct sbx_snapshot_store *st;
    struct archive *a;
    struct sbx_snapshot_limits lim;
    struct snap_tree tree;
    json_t *index; /* path -> [entry index, explicit] */
    struct sbx_strv created;
    uint64_t declared, expanded, members;
    uint64_t logical; /* expanded and the holes of sparse members */
    char *label, *manifest_digest;
    /* A workspace's own tar (sbx__snapshot_import_workspace): what a take skips is skipped and
     * counted here instead of refused, the excluded paths are left out, and no member is the
     * snapshot header. */
    int ws;
    struct sbx_strv exclude;
    uint64_t sk_excluded, sk_devices, sk_fifos, sk_sockets, sk_symlinks, sk_names;
    struct sbx_progress_sink progress;
};

static int arc_error(struct archive *a, const char *member, struct sbx_error *err)
{
    const char *msg = archive_error_string(a);
    if (member)
        return sbx_error_set(err, SBX_E_PARSE, 0, "corrupt archive at member '%s': %s", member,
                             msg ? msg : "unknown error");
    return sbx_error_set(err, SBX_E_PARSE, 0, "corrupt archive: %s", msg ? msg : "unknown error");
}

static int check_ratio(struct import *im, const char *member, struct sbx_error *err)
{
    uint64_t n = im->logical > SPARSE_FLOOR ? im->logical : im->expanded;
    if (n <= RATIO_FLOOR)
        return 0;
    int64_t raw = archive_filter_bytes(im->a, -1);
    if (raw > 0 && n / (uint64_t)raw >= im->lim.max_ratio)
        return sbx_error_set(err, SBX_E_TOOBIG, 0,
                             "archive expands more than %u times its size (limit max_ratio) at "
                             "member '%s'",
                             im->lim.max_ratio, member);
    return 0;
}

static int read_header_member(struct import *im, struct archive_entry *ae, struct sbx_error *err)
{
    if (archive_entry_size(ae) > (int64_t)HEADER_MAX)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "header member '%s' is over %zu bytes",
                             SBX_SNAPSHOT_HEADER_MEMBER, HEADER_MAX);
    struct sbx_buf b;
    sbx_buf_init(&b, HEADER_MAX);
    char chunk[4096];
    la_ssize_t n;
    int rc = 0;
    while ((n = archive_read_data(im->a, chunk, sizeof(chunk))) > 0) {
        if ((rc = sbx_buf_add(&b, chunk, (size_t)n, err)) < 0)
            goto out;
    }
    if (n < 0) {
        rc = arc_error(im->a, SBX_SNAPSHOT_HEADER_MEMBER, err);
        goto out;
    }
    json_t *h = NULL;
    struct sbx_json_limits jl = {HEADER_MAX, 8};
    if ((rc = sbx_json_parse(b.data, b.len, &jl, &h, err)) < 0) {
        sbx_error_prefix(err, "header member '%s'", SBX_SNAPSHOT_HEADER_MEMBER);
        rc = -SBX_E_PARSE;
        goto out;
    }
    int64_t format = 0;
    const char *label = NULL, *md = NULL;
    if (!json_is_object(h) || sbx_json_get_int(h, "format", 1, &format, err) < 0) {
        rc = sbx_error_set(err, SBX_E_PARSE, 0, "header member '%s' has no integer 'format'",
                           SBX_SNAPSHOT_HEADER_MEMBER);
    } else if (format != SBX_SNAPSHOT_FORMAT) {
        rc = sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                           "header member '%s' has format version %lld; this sbx reads %d",
                           SBX_SNAPSHOT_HEADER_MEMBER, (long long)format, SBX_SNAPSHOT_FORMAT);
    } else {
        json_t *v = json_object_get(h, "label");
        if (json_is_string(v))
            label = json_string_value(v);
        v = json_object_get(h, "manifest_digest");
        if (json_is_string(v))
            md = json_string_value(v);
        im->label = label ? sbx_xstrdup(label) : NULL;
        im->manifest_digest = md ? sbx_xstrdup(md) : NULL;
    }
    json_decref(h);
out:
    sbx_buf_release(&b);
    return rc;
}

/* The member's name as a normalised workspace path; *is_root for "." itself. *out: caller owns. */
static int member_path(struct import *im, const char *raw, int is_dir, char **out, int *is_root,
                       struct sbx_error *err)
{
    *is_root = 0;
    if (!raw[0])
        return sbx_error_set(err, SBX_E_PERM, 0, "a member has an empty name");
    if (raw[0] == '/')
        return sbx_error_set(err, SBX_E_PERM, 0, "member '%s' has an absolute name", raw);
    const char *p = raw;
    while (p[0] == '.' && p[1] == '/')
        p += 2;
    size_t len = strlen(p);
    while (is_dir && len && p[len - 1] == '/')
        len--;
    if (len == 0 || (len == 1 && p[0] == '.')) {
        if (!is_dir)
            return sbx_error_set(err, SBX_E_PERM, 0,
                                 "member '%s' names the workspace root but is not a directory",
                                 raw);
        *is_root = 1;
        return 0;
    }
    if (len > im->lim.max_path)
        return sbx_error_set(err, SBX_E_TOOBIG, 0,
                             "member '%.200s...' name is %zu bytes, over the limit max_path of %u",
                             raw, len, im->lim.max_path);
    char *norm = NULL;
    struct sbx_error perr = SBX_ERROR_INIT;
    if (sbx_path_normalize(p, len, 0, NULL, &norm, &perr) < 0)
        return sbx_error_set(err, SBX_E_PERM, 0, "member '%s' is refused: %s", raw, perr.msg);
    if (strlen(norm) != len || memcmp(norm, p, len) != 0) {
        free(norm);
        return sbx_error_set(err, SBX_E_PERM, 0, "member '%s' is not a normal path", raw);
    }
    uint32_t depth = 1;
    for (const char *c = norm; *c; c++)
        depth += *c == '/';
    if (depth > im->lim.max_depth) {
        free(norm);
        return sbx_error_set(err, SBX_E_TOOBIG, 0,
                             "member '%.200s' is %u components deep, over the limit max_depth "
                             "of %u",
                             raw, depth, im->lim.max_depth);
    }
    *out = norm;
    return 0;
}

static int add_entry(struct import *im, char *path, enum snap_type type, uint32_t mode)
{
    sbx__snap_tree_add(&im->tree, path, type, mode);
    return (int)(im->tree.n - 1);
}

/* Every ancestor of path must be a directory: one that appeared as a member, or one made
 * implicitly here (GNU tar with a file list omits them). */
static int check_parents(struct import *im, const char *path, struct sbx_error *err)
{
    for (const char *s = strchr(path, '/'); s; s = strchr(s + 1, '/')) {
        char *parent = sbx_xstrndup(path, (size_t)(s - path));
        json_t *v = json_object_get(im->index, parent);
        if (v) {
            const struct snap_entry *pe = &im->tree.v[json_integer_value(json_array_get(v, 0))];
            if (pe->type != SNAP_DIR) {
                int rc = sbx_error_set(err, SBX_E_PERM, 0, "member '%s' is under the %s '%s'", path,
                                       pe->type == SNAP_SYMLINK ? "symlink" : "file", parent);
                free(parent);
                return rc;
            }
            free(parent);
            continue;
        }
        if (im->tree.n >= im->lim.max_entries) {
            free(parent);
            return sbx_error_set(err, SBX_E_TOOBIG, 0,
                                 "archive has more than %llu entries (limit max_entries) at '%s'",
                                 (unsigned long long)im->lim.max_entries, path);
        }
        int idx = add_entry(im, sbx_xstrdup(parent), SNAP_DIR, 0755);
        sbx_json_set(im->index, parent, json_pack("[ib]", idx, 0));
        free(parent);
    }
    return 0;
}

static int import_file(struct import *im, struct archive_entry *ae, const char *path,
                       struct snap_entry *e, struct sbx_error *err)
{
    int64_t declared = archive_entry_size_is_set(ae) ? archive_entry_size(ae) : 0;
    if (declared < 0 || (uint64_t)declared > im->lim.max_file_bytes)
        return sbx_error_set(err, SBX_E_TOOBIG, 0,
                             "member '%s' declares %lld bytes, over the limit max_file_bytes of "
                             "%llu",
                             path, (long long)declared, (unsigned long long)im->lim.max_file_bytes);
    im->declared += (uint64_t)declared;
    if (im->declared > im->lim.max_bytes)
        return sbx_error_set(err, SBX_E_TOOBIG, 0,
                             "archive declares more than %llu file bytes (limit max_bytes) at "
                             "member '%s'",
                             (unsigned long long)im->lim.max_bytes, path);
    struct snap_blob_writer bw;
    int rc = sbx__snap_blob_begin(im->st, &bw, err);
    if (rc < 0)
        return rc;
    for (;;) {
        const void *buf;
        size_t len;
        la_int64_t off;
        int r = archive_read_data_block(im->a, &buf, &len, &off);
        if (r == ARCHIVE_EOF)
            break;
        if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
            rc = arc_error(im->a, path, err);
            break;
        }
        if (off < 0 || (uint64_t)off < bw.size) {
            rc = sbx_error_set(err, SBX_E_PARSE, 0, "member '%s' has overlapping data", path);
            break;
        }
        uint64_t hole = (uint64_t)off - bw.size;
        if (hole + len > im->lim.max_file_bytes - bw.size ||
            bw.size + hole + len > (uint64_t)declared) {
            rc = sbx_error_set(err, SBX_E_TOOBIG, 0,
                               "member '%s' holds more bytes than it declares or than the limit "
                               "max_file_bytes of %llu",
                               path, (unsigned long long)im->lim.max_file_bytes);
            break;
        }
        /* A hole costs no disk (it stays a hole) but is hashed as the zeros it reads as, at
         * import and at every restore: past SPARSE_FLOOR it counts towards the expansion bound
         * at its logical size, checked before the work. */
        im->expanded += len;
        im->logical += hole + len;
        if ((rc = check_ratio(im, path, err)) < 0)
            break;
        if (hole && (rc = sbx__snap_blob_hole(&bw, hole, err)) < 0)
            break;
        if (len && (rc = sbx__snap_blob_write(&bw, buf, len, err)) < 0)
            break;
    }
    if (rc == 0 && bw.size < (uint64_t)declared) {
        /* A sparse member may end in a hole that libarchive does not hand out as data. */
        uint64_t hole = (uint64_t)declared - bw.size;
        im->logical += hole;
        if ((rc = check_ratio(im, path, err)) == 0)
            rc = sbx__snap_blob_hole(&bw, hole, err);
    }
    if (rc < 0) {
        sbx__snap_blob_abort(im->st, &bw);
        return rc;
    }
    e->size = bw.size;
    int created = 0;
    if ((rc = sbx__snap_blob_finish(im->st, &bw, e->sha, &created, err)) < 0)
        return rc;
    if (created)
        sbx_strv_push(&im->created, e->sha);
    return 0;
}

/* The earlier regular file a hardlink member names; anything else (outside the archive, a
 * directory, a symlink, a later member) is refused. */
static int hardlink_source(struct import *im, const char *raw, const char *link, long *out,
                           struct sbx_error *err)
{
    char *target = NULL;
    int is_root = 0;
    struct sbx_error lerr = SBX_ERROR_INIT;
    if (member_path(im, link, 0, &target, &is_root, &lerr) < 0)
        return sbx_error_set(err, SBX_E_PERM, 0,
                             "member '%s' is a hardlink to '%s', outside the archive", raw, link);
    json_t *v = json_object_get(im->index, target);
    free(target);
    long idx = v ? (long)json_integer_value(json_array_get(v, 0)) : -1;
    if (idx < 0 || im->tree.v[idx].type != SNAP_FILE)
        return sbx_error_set(err, SBX_E_PERM, 0,
                             "member '%s' is a hardlink to '%s', which is no earlier file of the "
                             "archive",
                             raw, link);
    *out = idx;
    return 0;
}

/* The kind of entry a member of file type ft makes: files, directories and symlinks only. */
static int member_type(mode_t ft, const char *raw, enum snap_type *out, struct sbx_error *err)
{
    switch (ft) {
    case AE_IFREG:
        *out = SNAP_FILE;
        return 0;
    case AE_IFDIR:
        *out = SNAP_DIR;
        return 0;
    case AE_IFLNK:
        *out = SNAP_SYMLINK;
        return 0;
    case AE_IFCHR:
    case AE_IFBLK:
        return sbx_error_set(err, SBX_E_PERM, 0, "member '%s' is a device node", raw);
    case AE_IFIFO:
        return sbx_error_set(err, SBX_E_PERM, 0, "member '%s' is a fifo", raw);
    case AE_IFSOCK:
        return sbx_error_set(err, SBX_E_PERM, 0, "member '%s' is a socket", raw);
    default:
        return sbx_error_set(err, SBX_E_PERM, 0, "member '%s' has an unsupported type", raw);
    }
}

/* A member whose path is in the tree already (seen: its index entry): a directory again is
 * allowed, and gets its own mode when the first was made implicitly; anything else is a
 * duplicate. */
static int member_again(struct import *im, json_t *seen, enum snap_type type, uint32_t mode,
                        const char *raw, struct sbx_error *err)
{
    struct snap_entry *pe = &im->tree.v[json_integer_value(json_array_get(seen, 0))];
    if (pe->type != SNAP_DIR || type != SNAP_DIR)
        return sbx_error_set(err, SBX_E_PERM, 0, "member '%s' is a duplicate", raw);
    if (!json_is_true(json_array_get(seen, 1))) {
        pe->mode = mode;
        json_array_set_new(seen, 1, json_true());
    }
    return 0;
}

/* Add the symlink member ae at path (taken), its target checked to stay in the workspace. */
static int import_symlink(struct import *im, struct archive_entry *ae, char *path, const char *raw,
                          struct sbx_error *err)
{
    const char *target = archive_entry_symlink_utf8(ae);
    int rc;
    if (!target)
        target = archive_entry_symlink(ae);
    if (im->ws && (!target || !sbx_utf8_valid(target, strlen(target)) ||
                   sbx__snap_check_target(path, target, NULL) < 0)) {
        /* A workspace's link out of itself: left out, as a take leaves it. */
        im->sk_symlinks++;
        free(path);
        return 0;
    }
    if (!target || !sbx_utf8_valid(target, strlen(target))) {
        free(path);
        return sbx_error_set(err, SBX_E_PERM, 0, "member '%s' has no valid symlink target", raw);
    }
    if ((rc = sbx__snap_check_target(path, target, err)) < 0) {
        sbx_error_prefix(err, "member '%s'", raw);
        free(path);
        return rc;
    }
    char *key = sbx_xstrdup(path);
    int idx = add_entry(im, path, SNAP_SYMLINK, 0);
    im->tree.v[idx].target = sbx_xstrdup(target);
    sbx_json_set(im->index, key, json_pack("[ib]", idx, 1));
    free(key);
    return 0;
}

/* Add the file or directory member ae at path (taken): a hardlink (link) to an earlier file of
 * the archive is stored as a copy of it, a file's bytes go to the store. */
static int import_node(struct import *im, struct archive_entry *ae, char *path, enum snap_type type,
                       uint32_t mode, const char *raw, const char *link, struct sbx_error *err)
{
    long linked = -1;
    int rc;
    if (link && (rc = hardlink_source(im, raw, link, &linked, err)) < 0) {
        free(path);
        return rc;
    }
    char *key = sbx_xstrdup(path);
    int idx = add_entry(im, path, type, mode);
    sbx_json_set(im->index, key, json_pack("[ib]", idx, 1));
    free(key);
    if (linked >= 0) {
        im->tree.v[idx].size = im->tree.v[linked].size;
        memcpy(im->tree.v[idx].sha, im->tree.v[linked].sha, sizeof(im->tree.v[idx].sha));
        return 0;
    }
    if (type == SNAP_FILE)
        return import_file(im, ae, im->tree.v[idx].path, &im->tree.v[idx], err);
    return 0;
}

/* A workspace member a take would leave out: devices, fifos and sockets, names that are not
 * UTF-8 or hold control characters. Counted, and its data skipped with it. */
static int ws_skipped(struct import *im, const char *raw, mode_t ft)
{
    uint64_t *count = ft == AE_IFCHR || ft == AE_IFBLK ? &im->sk_devices
                      : ft == AE_IFIFO                 ? &im->sk_fifos
                      : ft == AE_IFSOCK                ? &im->sk_sockets
                                                       : NULL;
    size_t n = strlen(raw);
    int bad_name = !sbx_utf8_valid(raw, n);
    for (size_t i = 0; i < n && !bad_name; i++)
        bad_name = (unsigned char)raw[i] < 0x20 || raw[i] == 0x7f;
    if (!count && bad_name)
        count = &im->sk_names;
    if (count)
        (*count)++;
    return count != NULL;
}

/* An excluded path (counted), or a member below one. */
static int ws_excluded(struct import *im, const char *path)
{
    for (size_t i = 0; i < im->exclude.n; i++) {
        const char *x = im->exclude.v[i];
        size_t k = strlen(x);
        if (strcmp(path, x) == 0) {
            im->sk_excluded++;
            return 1;
        }
        if (strncmp(path, x, k) == 0 && path[k] == '/')
            return 1;
    }
    return 0;
}

static int import_member(struct import *im, struct archive_entry *ae, struct sbx_error *err)
{
    const char *raw = archive_entry_pathname_utf8(ae);
    if (!raw)
        raw = archive_entry_pathname(ae);
    if (!raw)
        return sbx_error_set(err, SBX_E_PERM, 0, "member %llu has no name",
                             (unsigned long long)im->members);
    if (++im->members > im->lim.max_entries)
        return sbx_error_set(err, SBX_E_TOOBIG, 0,
                             "archive has more than %llu members (limit max_entries) at '%s'",
                             (unsigned long long)im->lim.max_entries, raw);
    mode_t ft = archive_entry_filetype(ae);
    const char *link = archive_entry_hardlink(ae);
    /* Only the first member is the header: a workspace's own file of that name comes later in
     * an export (as "./.sbx-snapshot.json") and is content like any other. */
    if (!im->ws && im->members == 1 && strcmp(raw, SBX_SNAPSHOT_HEADER_MEMBER) == 0 &&
        ft == AE_IFREG && !link)
        return read_header_member(im, ae, err);
    if (im->ws && ws_skipped(im, raw, link ? AE_IFREG : ft))
        return 0;
    enum snap_type type = SNAP_FILE; /* set by member_type; gcc with --coverage cannot see it */
    char *path = NULL;
    int is_root = 0;
    int rc = member_type(link ? AE_IFREG : ft, raw, &type, err);
    if (rc == 0)
        rc = member_path(im, raw, type == SNAP_DIR, &path, &is_root, err);
    if (rc < 0 || is_root)
        return rc;
    if (im->ws) {
        sbx_progress_report(&im->progress, "snapshot", path, im->tree.n, 0, 0);
        if (ws_excluded(im, path)) {
            free(path);
            return 0;
        }
    }
    uint32_t mode = (uint32_t)archive_entry_perm(ae) & 0777;
    json_t *seen = NULL;
    if ((rc = check_parents(im, path, err)) == 0 && (seen = json_object_get(im->index, path)))
        rc = member_again(im, seen, type, mode, raw, err);
    else if (rc == 0 && im->tree.n >= im->lim.max_entries)
        rc = sbx_error_set(err, SBX_E_TOOBIG, 0,
                           "archive has more than %llu entries (limit max_entries) at '%s'",
                           (unsigned long long)im->lim.max_entries, raw);
    if (rc < 0 || seen) {
        free(path);
        return rc;
    }
    if (type == SNAP_SYMLINK)
        return import_symlink(im, ae, path, raw, err);
    return import_node(im, ae, path, type, mode, raw, link, err);
}

static void enable_filter(struct archive *a, int (*fn)(struct archive *))
{
    /* ARCHIVE_WARN means libarchive would run an external program: never for hostile input. */
    if (fn(a) != ARCHIVE_OK)
        archive_read_support_filter_none(a);
}

/* Read the archive on fd into blobs and a tree, and commit it (im is set up by the caller). */
static int import_run(struct import *im, int archive_fd, char **out_ref, struct sbx_error *err)
{
    struct sbx_snapshot_store *st = im->st;
    int rc = sbx__snap_lock(st, 0, err);
    if (rc < 0)
        return rc;
    im->a = archive_read_new();
    if (!im->a)
        SBX_BUG("out of memory");
    archive_read_support_format_tar(im->a);
    archive_read_support_filter_none(im->a);
    enable_filter(im->a, archive_read_support_filter_gzip);
    enable_filter(im->a, archive_read_support_filter_zstd);
    enable_filter(im->a, archive_read_support_filter_xz);
    enable_filter(im->a, archive_read_support_filter_bzip2);
    if (archive_read_open_fd(im->a, archive_fd, READ_BLOCK) != ARCHIVE_OK) {
        rc = arc_error(im->a, NULL, err);
        goto out;
    }
    for (;;) {
        struct archive_entry *ae;
        int r = archive_read_next_header(im->a, &ae);
        if (r == ARCHIVE_EOF)
            break;
        /* ARCHIVE_RETRY (a damaged header libarchive would skip) is an error here too. */
        if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
            const char *msg = archive_error_string(im->a);
            rc = sbx_error_set(err, SBX_E_PARSE, 0, "corrupt archive after %llu members: %s",
                               (unsigned long long)im->members, msg ? msg : "unknown error");
            goto out;
        }
        if ((rc = import_member(im, ae, err)) < 0)
            goto out;
    }
    if (im->created.n && (rc = sbx__snap_sync(st, err)) < 0)
        goto out;
    json_t *skipped = NULL;
    if (im->ws)
        skipped = json_pack("{sIsIsIsIsIsIsI}", "excluded", (json_int_t)im->sk_excluded, "mounts",
                            (json_int_t)0, "devices", (json_int_t)im->sk_devices, "fifos",
                            (json_int_t)im->sk_fifos, "sockets", (json_int_t)im->sk_sockets,
                            "symlinks", (json_int_t)im->sk_symlinks, "names",
                            (json_int_t)im->sk_names);
    rc = sbx__snap_tree_commit(st, &im->tree, im->manifest_digest, im->label, skipped, out_ref,
                               err);
    json_decref(skipped);
out:
    if (rc < 0) {
        sbx__snap_discard(st);
        for (size_t i = 0; i < im->created.n; i++)
            sbx__snap_blob_unlink(st, im->created.v[i]);
        sbx_error_prefix(err, im->ws ? "the workspace's archive" : "cannot import snapshot");
    }
    sbx__snap_unlock(st);
    archive_read_free(im->a);
    return rc;
}

static void import_init(struct import *im, struct sbx_snapshot_store *st,
                        const struct sbx_snapshot_limits *lim)
{
    memset(im, 0, sizeof(*im));
    im->st = st;
    sbx__snap_limits(lim, &im->lim);
    sbx_strv_init(&im->created);
    sbx_strv_init(&im->exclude);
    im->index = json_object();
}

static void import_release(struct import *im)
{
    sbx__snap_tree_release(&im->tree);
    sbx_strv_release(&im->created);
    sbx_strv_release(&im->exclude);
    json_decref(im->index);
    free(im->label);
    free(im->manifest_digest);
}

int sbx_snapshot_import(struct sbx_snapshot_store *st, int archive_fd,
                        const struct sbx_snapshot_limits *lim, char **out_ref,
                        struct sbx_error *err)
{
    int rc = sbx__archive_load(err);
    if (rc < 0)
        return rc;
    struct import im;
    import_init(&im, st, lim);
    rc = import_run(&im, archive_fd, out_ref, err);
    import_release(&im);
    return rc;
}

int sbx__snapshot_import_workspace(struct sbx_snapshot_store *st, int fd,
                                   const struct sbx__snap_stream_opts *o, char **out_ref,
                                   struct sbx_error *err)
{
    int rc = sbx__archive_load(err);
    if (rc < 0)
        return rc;
    struct import im;
    import_init(&im, st, o ? o->limits : NULL);
    im.ws = 1;
    sbx_progress_sink_init(&im.progress, o ? o->progress : NULL, o ? o->progress_data : NULL);
    im.label = o && o->label ? sbx_xstrdup(o->label) : NULL;
    im.manifest_digest = o && o->manifest_digest ? sbx_xstrdup(o->manifest_digest) : NULL;
    for (size_t i = 0; o && o->exclude && o->exclude[i] && rc == 0; i++) {
        char *norm = NULL;
        rc = sbx_path_normalize(o->exclude[i], strlen(o->exclude[i]), 0, NULL, &norm, err);
        if (rc < 0)
            sbx_error_prefix(err, "excluded path");
        else
            sbx_strv_push_take(&im.exclude, norm);
    }
    if (rc == 0)
        rc = import_run(&im, fd, out_ref, err);
    sbx_progress_end(&im.progress, "snapshot", im.tree.n, im.tree.n);
    import_release(&im);
    return rc;
}

/* ---- export ---- */

struct sink {
    struct archive *a;
};

static int write_sink(void *ctx, const void *p, size_t n, struct sbx_error *err)
{
    struct sink *s = ctx;
    const char *c = p;
    while (n) {
        la_ssize_t w = archive_write_data(s->a, c, n);
        if (w <= 0)
            return sbx_error_set(err, SBX_E_IO, 0, "cannot write the archive: %s",
                                 archive_error_string(s->a) ? archive_error_string(s->a) : "?");
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

static int write_header(struct archive *a, struct archive_entry *ae, const char *name, mode_t type,
                        mode_t perm, int64_t size, time_t mtime, const char *target,
                        struct sbx_error *err)
{
    archive_entry_clear(ae);
    archive_entry_set_pathname_utf8(ae, name);
    archive_entry_set_filetype(ae, type);
    archive_entry_set_perm(ae, perm);
    archive_entry_set_size(ae, size);
    archive_entry_set_mtime(ae, mtime, 0);
    if (target)
        archive_entry_set_symlink_utf8(ae, target);
    if (archive_write_header(a, ae) != ARCHIVE_OK)
        return sbx_error_set(err, SBX_E_IO, 0, "cannot write member '%s': %s", name,
                             archive_error_string(a) ? archive_error_string(a) : "?");
    return 0;
}

/* A blob with holes becomes a sparse member (pax GNU.sparse): the archive carries only data. */
static int write_file_header(struct archive *a, struct archive_entry *ae, const char *name,
                             const struct snap_entry *e, int bfd, time_t mtime,
                             struct sbx_error *err)
{
    archive_entry_clear(ae);
    archive_entry_set_pathname_utf8(ae, name);
    archive_entry_set_filetype(ae, AE_IFREG);
    archive_entry_set_perm(ae, e->mode);
    archive_entry_set_size(ae, (int64_t)e->size);
    archive_entry_set_mtime(ae, mtime, 0);
    off_t pos = 0, end = (off_t)e->size;
    int holes = 0;
    while (bfd >= 0 && pos < end) {
        off_t d = lseek(bfd, pos, SEEK_DATA);
        if (d < 0 || d >= end) {
            holes = holes || pos < end;
            break;
        }
        off_t h = lseek(bfd, d, SEEK_HOLE);
        if (h < 0 || h > end)
            h = end;
        holes = holes || d > pos || h < end;
        archive_entry_sparse_add_entry(ae, d, h - d);
        pos = h;
    }
    if (!holes)
        archive_entry_sparse_clear(ae);
    else if (archive_entry_sparse_count(ae) == 0)
        archive_entry_sparse_add_entry(ae, end, 0);
    if (bfd >= 0 && lseek(bfd, 0, SEEK_SET) < 0)
        return sbx_error_errno(err, errno, "cannot seek in blob '%.12s'", e->sha);
    if (archive_write_header(a, ae) != ARCHIVE_OK)
        return sbx_error_set(err, SBX_E_IO, 0, "cannot write member '%s': %s", name,
                             archive_error_string(a) ? archive_error_string(a) : "?");
    return 0;
}

int sbx_snapshot_export(struct sbx_snapshot_store *st, const char *ref, int out_fd,
                        struct sbx_error *err)
{
    char hex[SBX_SHA256_HEX_LEN + 1];
    struct snap_tree t = {0};
    json_t *h = NULL;
    char *htext = NULL;
    struct archive *a = NULL;
    struct archive_entry *ae = NULL;
    int rc = sbx__archive_load(err);
    if (rc < 0 || (rc = sbx__snap_lock(st, 0, err)) < 0)
        return rc;
    if ((rc = sbx__snap_resolve_ref(st, ref, hex, err)) < 0 ||
        (rc = sbx__snap_tree_load(st, hex, &t, &h, err)) < 0)
        goto out;
    struct stat sb;
    char name[SBX_SHA256_HEX_LEN + 8];
    snprintf(name, sizeof(name), "%s.json", hex);
    time_t mtime = fstatat(st->trees_fd, name, &sb, 0) == 0 ? sb.st_mtime : 0;
    a = archive_write_new();
    ae = archive_entry_new();
    if (!a || !ae)
        SBX_BUG("out of memory");
    if (archive_write_set_format_pax_restricted(a) != ARCHIVE_OK ||
        archive_write_add_filter_zstd(a) != ARCHIVE_OK) {
        rc = sbx_error_set(err, SBX_E_UNSUPPORTED, 0, "libarchive cannot write tar with zstd: %s",
                           archive_error_string(a) ? archive_error_string(a) : "?");
        goto out;
    }
    archive_write_set_bytes_in_last_block(a, 1);
    if (archive_write_open_fd(a, out_fd) != ARCHIVE_OK) {
        rc = sbx_error_set(err, SBX_E_IO, 0, "cannot write the archive: %s",
                           archive_error_string(a) ? archive_error_string(a) : "?");
        goto out;
    }
    htext = sbx_json_dumps(h, SBX_JSON_PRETTY | SBX_JSON_SORTED);
    size_t hlen = strlen(htext);
    struct sink s = {a};
    if ((rc = write_header(a, ae, SBX_SNAPSHOT_HEADER_MEMBER, AE_IFREG, 0644, (int64_t)hlen, mtime,
                           NULL, err)) < 0 ||
        (rc = write_sink(&s, htext, hlen, err)) < 0 ||
        (rc = write_header(a, ae, ".", AE_IFDIR, 0755, 0, mtime, NULL, err)) < 0)
        goto out;
    for (size_t i = 0; i < t.n; i++) {
        const struct snap_entry *e = &t.v[i];
        char *mname = sbx_xasprintf("./%s", e->path);
        if (e->type == SNAP_DIR) {
            rc = write_header(a, ae, mname, AE_IFDIR, e->mode, 0, mtime, NULL, err);
        } else if (e->type == SNAP_SYMLINK) {
            rc = write_header(a, ae, mname, AE_IFLNK, 0777, 0, mtime, e->target, err);
        } else {
            int bfd = -1;
            char *data = NULL;
            rc = sbx__snap_blob_get(st, e->sha, e->size, &data, &bfd, err);
            if (rc == 0)
                rc = write_file_header(a, ae, mname, e, bfd, mtime, err);
            if (rc == 0 && data)
                rc = write_sink(&s, data, (size_t)e->size, err);
            else if (rc == 0)
                rc = sbx__snap_blob_copy(bfd, e->sha, e->size, -1, write_sink, &s, err);
            free(data);
            sbx_fd_close(&bfd);
        }
        free(mname);
        if (rc < 0) {
            sbx_error_prefix(err, "'%s'", e->path);
            goto out;
        }
    }
    if (archive_write_close(a) != ARCHIVE_OK)
        rc = sbx_error_set(err, SBX_E_IO, 0, "cannot finish the archive: %s",
                           archive_error_string(a) ? archive_error_string(a) : "?");
out:
    if (rc < 0)
        sbx_error_prefix(err, "cannot export snapshot '%s'", ref);
    sbx__snap_unlock(st);
    if (a)
        archive_write_free(a);
    if (ae)
        archive_entry_free(ae);
    free(htext);
    json_decref(h);
    sbx__snap_tree_release(&t);
    return rc;
}

/* ---- a tar for another program to unpack into a workspace ---- */

static int write_ws_entry(struct sbx_snapshot_store *st, struct archive *a,
                          struct archive_entry *ae, const struct snap_entry *e, time_t now,
                          struct sbx_error *err)
{
    char *name = sbx_xasprintf("./%s", e->path);
    int rc;
    if (e->type == SNAP_DIR) {
        rc = write_header(a, ae, name, AE_IFDIR, e->mode, 0, now, NULL, err);
    } else if (e->type == SNAP_SYMLINK) {
        rc = write_header(a, ae, name, AE_IFLNK, 0777, 0, now, e->target, err);
    } else {
        /* No sparse member: every extractor reads a plain one; holes come as zeros. */
        struct sink sk = {a};
        rc = write_header(a, ae, name, AE_IFREG, e->mode, (int64_t)e->size, now, NULL, err);
        if (rc == 0)
            rc = sbx__snap_blob_send(st, e->sha, e->size, -1, write_sink, &sk, err);
    }
    if (rc < 0)
        sbx_error_prefix(err, "'%s'", e->path);
    free(name);
    return rc;
}

int sbx__snapshot_write_workspace_tar(struct sbx_snapshot_store *st, const char *ref, int out_fd,
                                      sbx_progress_fn *progress, void *progress_data,
                                      struct sbx_error *err)
{
    char hex[SBX_SHA256_HEX_LEN + 1];
    struct snap_tree t = {0};
    struct archive *a = NULL;
    struct archive_entry *ae = NULL;
    struct sbx_progress_sink ps;
    int rc = sbx__archive_load(err);
    if (rc < 0 || (rc = sbx__snap_lock(st, 0, err)) < 0)
        return rc;
    sbx_progress_sink_init(&ps, progress, progress_data);
    if ((rc = sbx__snap_resolve_ref(st, ref, hex, err)) < 0 ||
        (rc = sbx__snap_tree_load(st, hex, &t, NULL, err)) < 0)
        goto out;
    a = archive_write_new();
    ae = archive_entry_new();
    if (!a || !ae)
        SBX_BUG("out of memory");
    if (archive_write_set_format_pax_restricted(a) != ARCHIVE_OK ||
        archive_write_open_fd(a, out_fd) != ARCHIVE_OK) {
        rc = sbx_error_set(err, SBX_E_IO, 0, "cannot write the archive: %s",
                           archive_error_string(a) ? archive_error_string(a) : "?");
        goto out;
    }
    time_t now = (time_t)(sbx_time_real_ns() / SBX_NS_PER_S);
    uint64_t done = 0;
    /* Symlinks last: no extractor ever writes a later member through one. */
    for (int pass = 0; pass < 2 && rc == 0; pass++) {
        for (size_t i = 0; i < t.n && rc == 0; i++) {
            if ((t.v[i].type == SNAP_SYMLINK) != pass)
                continue;
            sbx_progress_report(&ps, "restore", t.v[i].path, done++, t.n, 0);
            rc = write_ws_entry(st, a, ae, &t.v[i], now, err);
        }
    }
    if (rc == 0 && archive_write_close(a) != ARCHIVE_OK)
        rc = sbx_error_set(err, SBX_E_IO, 0, "cannot finish the archive: %s",
                           archive_error_string(a) ? archive_error_string(a) : "?");
    if (rc == 0)
        sbx_progress_end(&ps, "restore", t.n, t.n);
out:
    if (rc < 0)
        sbx_error_prefix(err, "snapshot '%s'", ref);
    sbx__snap_unlock(st);
    if (a)
        archive_write_free(a);
    if (ae)
        archive_entry_free(ae);
    sbx__snap_tree_release(&t);
    return rc;
}

/* ---- resolve ---- */

int sbx_snapshot_resolve(struct sbx_snapshot_store *st, const char *file_or_ref,
                         const struct sbx_snapshot_limits *lim, char **out_ref,
                         struct sbx_error *err)
{
    struct stat sb;
    if (stat(file_or_ref, &sb) == 0 && !S_ISDIR(sb.st_mode)) {
        int fd = open(file_or_ref, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
            return sbx_error_errno(err, errno, "cannot open '%s'", file_or_ref);
        int rc = sbx_snapshot_import(st, fd, lim, out_ref, err);
        close(fd);
        if (rc < 0)
            sbx_error_prefix(err, "'%s'", file_or_ref);
        return rc;
    }
    char hex[SBX_SHA256_HEX_LEN + 1];
    struct sbx_error rerr = SBX_ERROR_INIT;
    int rc = sbx__snap_resolve_ref(st, file_or_ref, hex, &rerr);
    if (rc == -SBX_E_INVAL && !strstr(rerr.msg, "ambiguous"))
        return sbx_error_set(err, SBX_E_NOTFOUND, 0,
                             "'%s' is neither a snapshot file nor a snapshot reference",
                             file_or_ref);
    if (rc < 0)
        return sbx_error_copy(err, &rerr);
    *out_ref = sbx_xasprintf("sha256:%s", hex);
    return 0;
}
