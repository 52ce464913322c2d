/* sbx: the string -> index hash map (open addressing, FNV-1a) behind the manifest's path index
 * and the rendered tree. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox/manifest/internal.h"

static uint64_t fnv1a(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ULL;
    }
    return h;
}

void sbx__pathmap_release(struct sbx__pathmap *pm)
{
    for (size_t i = 0; i < pm->cap; i++)
        free(pm->keys[i]);
    free(pm->keys);
    free(pm->vals);
    memset(pm, 0, sizeof(*pm));
}

size_t sbx__pathmap_get(const struct sbx__pathmap *pm, const char *key, size_t klen)
{
    if (!pm->cap)
        return SBX_MANIFEST_NONE;
    size_t i = (size_t)fnv1a(key, klen) & (pm->cap - 1);
    while (pm->keys[i]) {
        if (strncmp(pm->keys[i], key, klen) == 0 && pm->keys[i][klen] == '\0')
            return pm->vals[i];
        i = (i + 1) & (pm->cap - 1);
    }
    return SBX_MANIFEST_NONE;
}

static void pm_insert(struct sbx__pathmap *pm, char *owned, size_t klen, size_t val)
{
    size_t i = (size_t)fnv1a(owned, klen) & (pm->cap - 1);
    while (pm->keys[i]) {
        if (strcmp(pm->keys[i], owned) == 0) {
            free(owned);
            pm->vals[i] = val;
            return;
        }
        i = (i + 1) & (pm->cap - 1);
    }
    pm->keys[i] = owned;
    pm->vals[i] = val;
    pm->n++;
}

void sbx__pathmap_put(struct sbx__pathmap *pm, const char *key, size_t klen, size_t val)
{
    if ((pm->n + 1) * 2 > pm->cap) {
        /* A rehash into fresh zeroed tables, not a growth in place (so not SBX_ALLOC_GROW);
         * sbx_xcalloc checks the sizes. */
        struct sbx__pathmap old = *pm;
        pm->cap = old.cap ? old.cap * 2 : 64;
        pm->keys = sbx_xcalloc(pm->cap, sizeof(*pm->keys));
        pm->vals = sbx_xcalloc(pm->cap, sizeof(*pm->vals));
        pm->n = 0;
        for (size_t i = 0; i < old.cap; i++)
            if (old.keys[i])
                pm_insert(pm, old.keys[i], strlen(old.keys[i]), old.vals[i]);
        free(old.keys);
        free(old.vals);
    }
    pm_insert(pm, sbx_xstrndup(key, klen), klen, val);
}
