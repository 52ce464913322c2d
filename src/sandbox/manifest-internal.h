/* sbx: manifest internals shared by manifest.c and manifest-render.c. */
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

#endif
