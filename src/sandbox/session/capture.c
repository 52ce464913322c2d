/* Head + tail output capture with a fixed memory bound. Memory grows with the output up to the
 * limit, so a large limit costs nothing for a command that prints little. */
#include <stdlib.h>
#include <string.h>

#include "sbx/session.h"

void sbx_capture_init(struct sbx_capture *c, size_t limit)
{
    memset(c, 0, sizeof(*c));
    if (limit == 0)
        limit = SBX_OUTPUT_DEFAULT_LIMIT;
    if (limit > SBX_OUTPUT_MAX_LIMIT)
        limit = SBX_OUTPUT_MAX_LIMIT;
    c->limit = limit;
    c->head_max = limit / 2;
    c->tail_max = limit - c->head_max;
}

/* Grow *buf (capacity *cap) to hold at least need bytes, doubling, never past max. */
static void grow(char **buf, size_t *cap, size_t need, size_t max)
{
    if (need <= *cap)
        return;
    size_t n = *cap ? *cap : 4096;
    while (n < need)
        n = n > max / 2 ? max : n * 2;
    if (n > max)
        n = max;
    *buf = sbx_xrealloc(*buf, n);
    *cap = n;
}

void sbx_capture_add(struct sbx_capture *c, const void *p, size_t n)
{
    const char *s = p;
    c->total += n;
    if (c->head_len < c->head_max) {
        size_t k = c->head_max - c->head_len;
        if (k > n)
            k = n;
        grow(&c->head, &c->head_cap, c->head_len + k, c->head_max);
        memcpy(c->head + c->head_len, s, k);
        c->head_len += k;
        s += k;
        n -= k;
    }
    if (n == 0 || c->tail_max == 0)
        return;
    if (c->tail_len < c->tail_max && c->tail_len + n <= c->tail_max) {
        /* Not full yet: the ring is still a plain buffer starting at 0. */
        grow(&c->tail, &c->tail_cap, c->tail_len + n, c->tail_max);
        memcpy(c->tail + c->tail_len, s, n);
        c->tail_len += n;
        c->tail_pos = c->tail_len % c->tail_max;
        return;
    }
    grow(&c->tail, &c->tail_cap, c->tail_max, c->tail_max);
    if (n >= c->tail_max) {
        /* Only the last tail_max bytes of this chunk can survive. */
        memcpy(c->tail, s + n - c->tail_max, c->tail_max);
        c->tail_pos = 0;
        c->tail_len = c->tail_max;
        return;
    }
    size_t first = c->tail_max - c->tail_pos;
    if (first > n)
        first = n;
    memcpy(c->tail + c->tail_pos, s, first);
    memcpy(c->tail, s + first, n - first);
    c->tail_pos = (c->tail_pos + n) % c->tail_max;
    c->tail_len = c->tail_len + n > c->tail_max ? c->tail_max : c->tail_len + n;
}

void sbx_capture_take(struct sbx_capture *c, struct sbx_output *out)
{
    size_t len = c->head_len + c->tail_len;
    char *d = sbx_xmalloc(len + 1);
    if (c->head_len)
        memcpy(d, c->head, c->head_len);
    if (c->tail_len) {
        /* The ring's oldest byte is at tail_pos once it is full, else at 0. */
        size_t start = c->tail_len == c->tail_max ? c->tail_pos : 0;
        size_t first = c->tail_max - start;
        if (first > c->tail_len)
            first = c->tail_len;
        memcpy(d + c->head_len, c->tail + start, first);
        memcpy(d + c->head_len + first, c->tail, c->tail_len - first);
    }
    d[len] = '\0';
    out->data = d;
    out->len = len;
    out->head_len = c->head_len;
    out->total = c->total;
    out->dropped = c->total - len;
    size_t limit = c->limit;
    sbx_capture_release(c);
    sbx_capture_init(c, limit);
}

void sbx_capture_release(struct sbx_capture *c)
{
    free(c->head);
    free(c->tail);
    c->head = c->tail = NULL;
    c->head_cap = c->tail_cap = 0;
    c->head_len = c->tail_len = c->tail_pos = 0;
    c->total = 0;
}

void sbx_output_release(struct sbx_output *out)
{
    free(out->data);
    memset(out, 0, sizeof(*out));
}
