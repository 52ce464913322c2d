/* sbx: manifest internals shared with materialize.c and render.c (and the skills capability,
 * which fetches git sources the way git_repo entries are). The manifest's own layout is in
 * model.h, which only this folder includes. */
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

/* Fetch the repository of git_repo entry e (its url, ref) on the host into a new temporary
 * directory: a shallow clone of the ref, or exactly the commit when ref is one. *out_dir: the
 * checkout, caller owns (sbx__checkout_remove, then free); *out_commit: the commit checked out
 * (caller frees). Nothing is left on failure. Blocks while git runs. */
int sbx__git_checkout(const struct sbx_manifest_entry *e, char **out_dir, char **out_commit,
                      struct sbx_error *err);
/* Remove a checkout sbx__git_checkout made (sbx__fs_remove_tree); best effort: a failure is
 * logged as a warning. */
void sbx__checkout_remove(const char *dir);

#endif
