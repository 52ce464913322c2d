#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/grow.h"
#include "sbx/strv.h"

static char *empty_vec[1];

void sbx_strv_init(struct sbx_strv *sv)
{
    sv->v = empty_vec;
    sv->n = 0;
    sv->alloc = 0;
}

void sbx_strv_release(struct sbx_strv *sv)
{
    if (sv->alloc) {
        for (size_t i = 0; i < sv->n; i++)
            free(sv->v[i]);
        free(sv->v);
    }
    sbx_strv_init(sv);
}

const char *sbx_strv_push_take(struct sbx_strv *sv, char *s)
{
    if (sv->n + 2 > sv->alloc) {
        /* Not SBX_ALLOC_GROW: an empty vector points at the static empty_vec, never freed. */
        char **v = sv->alloc ? sv->v : NULL;
        sv->v = sbx__grow(v, sizeof(*sv->v), sv->n + 2, &sv->alloc);
    }
    sv->v[sv->n++] = s;
    sv->v[sv->n] = NULL;
    return s;
}

const char *sbx_strv_push(struct sbx_strv *sv, const char *s)
{
    return sbx_strv_push_take(sv, sbx_xstrdup(s));
}

const char *sbx_strv_pushf(struct sbx_strv *sv, const char *fmt, ...)
{
    va_list ap;
    /* Also keeps gcc's format-truncation analysis quiet under -fsanitize at -O2. */
    if (!fmt)
        SBX_BUG("sbx_strv_pushf: null format");
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        SBX_BUG("bad format '%s'", fmt);
    char *s = sbx_xmalloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return sbx_strv_push_take(sv, s);
}

void sbx_strv_pushv(struct sbx_strv *sv, const char *const *items)
{
    for (; items && *items; items++)
        sbx_strv_push(sv, *items);
}

void sbx_strv_pop(struct sbx_strv *sv)
{
    if (!sv->n)
        return;
    free(sv->v[--sv->n]);
    sv->v[sv->n] = NULL;
}

long sbx_strv_find(const struct sbx_strv *sv, const char *s)
{
    for (size_t i = 0; i < sv->n; i++)
        if (strcmp(sv->v[i], s) == 0)
            return (long)i;
    return -1;
}

static long env_index(const struct sbx_strv *sv, const char *key)
{
    size_t klen = strlen(key);
    for (size_t i = 0; i < sv->n; i++)
        if (strncmp(sv->v[i], key, klen) == 0 && sv->v[i][klen] == '=')
            return (long)i;
    return -1;
}

void sbx_strv_setenv(struct sbx_strv *sv, const char *key, const char *value)
{
    char *s = sbx_xasprintf("%s=%s", key, value);
    long i = env_index(sv, key);
    if (i < 0) {
        sbx_strv_push_take(sv, s);
        return;
    }
    free(sv->v[i]);
    sv->v[i] = s;
}

const char *sbx_strv_getenv(const struct sbx_strv *sv, const char *key)
{
    long i = env_index(sv, key);
    return i < 0 ? NULL : sv->v[i] + strlen(key) + 1;
}

char **sbx_strv_detach(struct sbx_strv *sv)
{
    char **v = sv->alloc ? sv->v : sbx_xcalloc(1, sizeof(char *));
    sbx_strv_init(sv);
    return v;
}
