/* sbx: a NULL-terminated vector of owned strings, for argv, environment and mount lists.
 *
 * Invariant: v[n] == NULL, so `v` can be passed to execve directly. After init v points at a
 * static empty vector; never write through it before a push. */
#ifndef SBX_STRV_H
#define SBX_STRV_H

#include <stddef.h>

#include "common.h"

struct sbx_strv {
    char **v; /* read-only for callers */
    size_t n;
    size_t alloc; /* private */
};

SBX_API void sbx_strv_init(struct sbx_strv *sv);
/* Free every string and the array; sv is left initialised and empty. */
SBX_API void sbx_strv_release(struct sbx_strv *sv);
/* Append a copy of s. Returns the stored copy (borrowed). */
SBX_API const char *sbx_strv_push(struct sbx_strv *sv, const char *s);
/* Append s, taking ownership of it (s must come from malloc). */
SBX_API const char *sbx_strv_push_take(struct sbx_strv *sv, char *s);
SBX_API const char *sbx_strv_pushf(struct sbx_strv *sv, const char *fmt, ...) SBX_PRINTF(2, 3);
/* Append copies of every string of a NULL-terminated array. */
SBX_API void sbx_strv_pushv(struct sbx_strv *sv, const char *const *items);
/* Remove and free the last string (no-op when empty). */
SBX_API void sbx_strv_pop(struct sbx_strv *sv);
/* Index of the first string equal to s, or -1. */
SBX_API long sbx_strv_find(const struct sbx_strv *sv, const char *s);
/* For "KEY=VALUE" lists: replace the entry for key, or append one. */
SBX_API void sbx_strv_setenv(struct sbx_strv *sv, const char *key, const char *value);
/* For "KEY=VALUE" lists: the value for key (borrowed) or NULL. */
SBX_API const char *sbx_strv_getenv(const struct sbx_strv *sv, const char *key);
/* Hand out the array (caller owns: free each string, then the array) and reinitialise sv. */
SBX_API char **sbx_strv_detach(struct sbx_strv *sv);

#endif
