/* Allocation that aborts on exhaustion: sbx treats OOM as fatal, like bubblewrap and git. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/grow.h"
#include "sbx/common.h"

static SBX_NORETURN void oom(size_t n)
{
    /* No allocation here: the message must get out even when the heap is exhausted. */
    char msg[96];
    int len = snprintf(msg, sizeof(msg), "sbx: out of memory allocating %zu bytes\n", n);
    if (len > 0)
        fputs(msg, stderr);
    abort();
}

void *sbx_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        oom(n);
    return p;
}

void *sbx_xcalloc(size_t nmemb, size_t size)
{
    void *p = calloc(nmemb ? nmemb : 1, size ? size : 1);
    if (!p)
        oom(nmemb * size);
    return p;
}

void *sbx_xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        oom(n);
    return q;
}

char *sbx_xstrdup(const char *s)
{
    return sbx_xstrndup(s, strlen(s));
}

char *sbx_xstrndup(const char *s, size_t n)
{
    char *p = sbx_xmalloc(n + 1);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

char *sbx_xasprintf(const char *fmt, ...)
{
    va_list ap, ap2;
    /* Also keeps gcc's format-truncation analysis quiet under -fsanitize at -O2. */
    if (!fmt)
        SBX_BUG("sbx_xasprintf: null format");
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        SBX_BUG("bad format '%s'", fmt);
    char *p = sbx_xmalloc((size_t)n + 1);
    vsnprintf(p, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    return p;
}

void sbx__bug(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "sbx: BUG at %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}

void *sbx__grow(void *p, size_t size, size_t need, size_t *alloc)
{
    size_t n = *alloc ? *alloc : 8;
    while (n < need) {
        if (n > SIZE_MAX / 2)
            oom(SIZE_MAX);
        n *= 2;
    }
    if (size && n > SIZE_MAX / size)
        oom(SIZE_MAX);
    p = sbx_xrealloc(p, n * size);
    *alloc = n;
    return p;
}
