/* Growing an array in place, the one idiom for every growable vector of the tree (git's
 * ALLOC_GROW): SBX_ALLOC_GROW(v, n, alloc) makes room for at least n elements in v, whose
 * capacity is alloc (both lvalues), doubling from a small start. The size multiplication is
 * checked: an overflow aborts like an exhausted heap. */
#ifndef SBX_CORE_GROW_H
#define SBX_CORE_GROW_H

#include <stddef.h>

/* Returns p (or a new block) with room for need elements of size bytes; *alloc is updated. */
void *sbx__grow(void *p, size_t size, size_t need, size_t *alloc);

#define SBX_ALLOC_GROW(v, n, alloc)                                    \
    do {                                                               \
        if ((size_t)(n) > (alloc))                                     \
            (v) = sbx__grow((v), sizeof(*(v)), (size_t)(n), &(alloc)); \
    } while (0)

#endif
