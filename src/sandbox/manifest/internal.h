/* sbx: manifest internals shared with the rest of the sandbox layer (materialisation, sessions,
 * providers) and render.c: the path map, and what a provider asks of a manifest (digest.c). The
 * manifest's own layout is in model.h, which only this folder includes. */
#ifndef SBX_SANDBOX_MANIFEST_INTERNAL_H
#define SBX_SANDBOX_MANIFEST_INTERNAL_H

#include <stddef.h>

#include "sbx/manifest.h"

/* A string -> index hash map owning copies of its keys (open addressing, FNV-1a). */
struct sbx__pathmap {
    char **keys;
    size_t *vals;
    size_t cap; /* power of two, or 0 */
    size_t n;
};

void sbx__pathmap_release(struct sbx__pathmap *pm);
/* SBX_MANIFEST_NONE when absent. */
size_t sbx__pathmap_get(const struct sbx__pathmap *pm, const char *key, size_t klen);
/* Insert or replace. */
void sbx__pathmap_put(struct sbx__pathmap *pm, const char *key, size_t klen, size_t val);

/* ---- copy.c ---- */

/* A deep copy of m (secrets and file contents included); caller owns (sbx_manifest_free). */
struct sbx_manifest *sbx__manifest_dup(const struct sbx_manifest *m);

/* ---- digest.c ---- */

/* A stable fingerprint of m (sha256, lowercase hex): root, entries in order with every field
 * and the file bytes, environment (secret values only as "a secret is set"), users, groups —
 * each field length-prefixed. Cheap: no JSON is built. */
int sbx__manifest_digest(const struct sbx_manifest *m, char out[65], struct sbx_error *err);

/* The workspace paths of m's ephemeral entries, topmost only (one beneath another ephemeral
 * entry is covered by it), appended to out: what a snapshot leaves out. m may be NULL. */
struct sbx_strv;
void sbx__manifest_ephemeral_paths(const struct sbx_manifest *m, struct sbx_strv *out);
/* The host path of a git_repo entry's clone URL when the repository is on the host (an
 * absolute path or a file:// URL), lexically normalised; NULL for a remote one. Caller frees. */
char *sbx__manifest_git_host_path(const char *url);
/* A git_repo entry whose repository is on the host (url an absolute path or a file:// URL;
 * repo as written, for messages) is a local source: it lies beneath base, reached through no
 * symlink below it, and is a directory. Remote repositories pass. */
struct sbx_error;
int sbx__manifest_check_git_local(const char *base, const char *url, const char *repo,
                                  struct sbx_error *err);
/* 1 when workspace path is one of tops or lies beneath one of them. */
int sbx__manifest_path_under(const char *path, const struct sbx_strv *tops);

#endif
