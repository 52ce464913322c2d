#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sbx/buf.h"

/* Shared empty storage so an initialised buffer owns no memory and data is never NULL. */
static char empty[1];

void sbx_buf_init(struct sbx_buf *b, size_t max)
{
    b->data = empty;
    b->len = 0;
    b->cap = 0;
    b->max = max > SBX_BUF_NOLIMIT ? SBX_BUF_NOLIMIT : max;
}

void sbx_buf_release(struct sbx_buf *b)
{
    if (b->cap)
        free(b->data);
    sbx_buf_init(b, b->max);
}

void sbx_buf_reset(struct sbx_buf *b)
{
    b->len = 0;
    b->data[0] = '\0';
}

int sbx_buf_reserve(struct sbx_buf *b, size_t n, struct sbx_error *err)
{
    if (n > b->max - b->len)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "data exceeds the limit of %zu bytes", b->max);
    size_t need = b->len + n;
    if (need < b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 64;
    while (cap <= need)
        cap = cap > SBX_BUF_NOLIMIT / 2 ? need + 1 : cap * 2;
    if (b->cap) {
        b->data = sbx_xrealloc(b->data, cap);
    } else {
        b->data = sbx_xmalloc(cap);
        b->data[0] = '\0';
    }
    b->cap = cap;
    return 0;
}

void sbx_buf_setlen(struct sbx_buf *b, size_t len)
{
    if (len > b->len && len >= b->cap)
        SBX_BUG("sbx_buf_setlen(%zu) beyond capacity %zu", len, b->cap);
    b->len = len;
    b->data[len] = '\0';
}

int sbx_buf_add(struct sbx_buf *b, const void *p, size_t n, struct sbx_error *err)
{
    if (n == 0)
        return 0;
    int rc = sbx_buf_reserve(b, n, err);
    if (rc < 0)
        return rc;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int sbx_buf_adds(struct sbx_buf *b, const char *s, struct sbx_error *err)
{
    return sbx_buf_add(b, s, strlen(s), err);
}

int sbx_buf_addch(struct sbx_buf *b, char c, struct sbx_error *err)
{
    return sbx_buf_add(b, &c, 1, err);
}

int sbx_buf_vaddf(struct sbx_buf *b, struct sbx_error *err, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0)
        SBX_BUG("bad format '%s'", fmt);
    int rc = sbx_buf_reserve(b, (size_t)n, err);
    if (rc < 0)
        return rc;
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
    return 0;
}

int sbx_buf_addf(struct sbx_buf *b, struct sbx_error *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = sbx_buf_vaddf(b, err, fmt, ap);
    va_end(ap);
    return rc;
}

void sbx_buf_consume(struct sbx_buf *b, size_t n)
{
    if (n > b->len)
        SBX_BUG("sbx_buf_consume(%zu) beyond length %zu", n, b->len);
    if (n == 0)
        return;
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
    b->data[b->len] = '\0';
}

const char *sbx_buf_cstr(const struct sbx_buf *b)
{
    return b->data;
}

char *sbx_buf_detach(struct sbx_buf *b, size_t *len)
{
    char *p = b->cap ? b->data : sbx_xstrdup("");
    if (len)
        *len = b->len;
    sbx_buf_init(b, b->max);
    return p;
}
