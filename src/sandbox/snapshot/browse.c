/* Browsing snapshots without restoring them: the entries of a tree (sbx_snapshot_entries) and
 * the content of one file (sbx_snapshot_cat), both from a tree validated again on load and
 * blobs checked against their hash while they are read. */
#include <stdlib.h>
#include <string.h>

#include "sandbox/snapshot/internal.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/path.h"

static const char *type_name(enum snap_type t)
{
    return t == SNAP_DIR ? "dir" : t == SNAP_FILE ? "file" : "symlink";
}

static json_t *entry_json(const struct snap_entry *e)
{
    json_t *o = json_pack("{s:s, s:s}", "path", e->path, "type", type_name(e->type));
    if (e->type != SNAP_SYMLINK)
        sbx_json_set(o, "mode", json_integer(e->mode));
    if (e->type == SNAP_FILE) {
        sbx_json_set(o, "size", json_integer((json_int_t)e->size));
        sbx_json_set(o, "sha256", sbx_json_str(e->sha));
    }
    if (e->type == SNAP_SYMLINK)
        sbx_json_set(o, "target", sbx_json_str(e->target));
    return o;
}

/* The tree of ref, loaded and validated under the shared lock (held on success: the caller
 * unlocks). */
static int load(struct sbx_snapshot_store *st, const char *ref, struct snap_tree *t,
                struct sbx_error *err)
{
    char hex[SBX_SHA256_HEX_LEN + 1];
    int rc = sbx__snap_lock(st, 0, err);
    if (rc < 0)
        return rc;
    rc = sbx__snap_resolve_ref(st, ref, hex, err);
    if (rc == 0)
        rc = sbx__snap_tree_load(st, hex, t, NULL, err);
    if (rc < 0)
        sbx__snap_unlock(st);
    return rc;
}

int sbx_snapshot_entries(struct sbx_snapshot_store *st, const char *ref, json_t **out,
                         struct sbx_error *err)
{
    struct snap_tree t = {0};
    int rc = load(st, ref, &t, err);
    if (rc < 0)
        return rc;
    json_t *list = json_array();
    for (size_t i = 0; i < t.n; i++)
        sbx_json_append(list, entry_json(&t.v[i]));
    sbx__snap_tree_release(&t);
    sbx__snap_unlock(st);
    *out = list;
    return 0;
}

int sbx_snapshot_cat(struct sbx_snapshot_store *st, const char *ref, const char *path,
                     sbx_snapshot_sink_fn *sink, void *ctx, struct sbx_error *err)
{
    struct snap_tree t = {0};
    char *rel = NULL;
    int rc = sbx_path_normalize(path, strlen(path), 0, NULL, &rel, err);
    if (rc < 0)
        return rc;
    if (!rel[0]) {
        free(rel);
        return sbx_error_set(err, SBX_E_INVAL, 0, "the root of a snapshot is a directory");
    }
    rc = load(st, ref, &t, err);
    if (rc < 0) {
        free(rel);
        return rc;
    }
    long i = sbx__snap_tree_find(&t, rel);
    const struct snap_entry *e = i >= 0 ? &t.v[i] : NULL;
    if (!e)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "no '%s' in snapshot '%s'", rel, ref);
    else if (e->type == SNAP_DIR)
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is a directory", rel);
    else if (e->type == SNAP_SYMLINK)
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is a symlink (to '%s')", rel, e->target);
    if (rc == 0 && (rc = sbx__snap_blob_send(st, e->sha, e->size, -1, sink, ctx, err)) < 0)
        sbx_error_prefix(err, "'%s'", rel);
    sbx__snap_tree_release(&t);
    sbx__snap_unlock(st);
    free(rel);
    return rc;
}
