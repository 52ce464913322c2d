/* Incremental SSE parsing; see sse.h for the rules. */
#include <string.h>

#include "sandbox/wire/sse.h"

void sbx__sse_init(struct sbx__sse *p, size_t max_event, sbx__sse_fn *fn, void *ud)
{
    memset(p, 0, sizeof(*p));
    sbx_buf_init(&p->line, max_event);
    sbx_buf_init(&p->data, max_event);
    sbx_buf_init(&p->event, 256);
    p->fn = fn;
    p->ud = ud;
}

void sbx__sse_release(struct sbx__sse *p)
{
    sbx_buf_release(&p->line);
    sbx_buf_release(&p->data);
    sbx_buf_release(&p->event);
}

static int dispatch(struct sbx__sse *p, struct sbx_error *err)
{
    int rc = 0;
    if (p->has_data) {
        /* The spec strips the one trailing LF that joining lines leaves behind. */
        if (p->data.len && p->data.data[p->data.len - 1] == '\n')
            sbx_buf_setlen(&p->data, p->data.len - 1);
        p->events++;
        rc = p->fn(p->event.len ? p->event.data : "message", p->data.data, p->data.len, p->ud, err);
    }
    sbx_buf_reset(&p->data);
    sbx_buf_reset(&p->event);
    p->has_data = 0;
    return rc;
}

static int process_line(struct sbx__sse *p, const char *s, size_t n, struct sbx_error *err)
{
    if (n == 0)
        return dispatch(p, err);
    if (s[0] == ':')
        return 0;
    const char *colon = memchr(s, ':', n);
    size_t flen = colon ? (size_t)(colon - s) : n;
    const char *val = colon ? colon + 1 : s + n;
    size_t vlen = n - (size_t)(val - s);
    if (vlen && val[0] == ' ') {
        val++;
        vlen--;
    }
    int rc = 0;
    if (flen == 4 && memcmp(s, "data", 4) == 0) {
        p->has_data = 1;
        rc = sbx_buf_add(&p->data, val, vlen, err);
        if (rc == 0)
            rc = sbx_buf_addch(&p->data, '\n', err);
        if (rc < 0)
            sbx_error_prefix(err, "server-sent event");
    } else if (flen == 5 && memcmp(s, "event", 5) == 0) {
        sbx_buf_reset(&p->event);
        rc = sbx_buf_add(&p->event, val, vlen, err);
        if (rc < 0)
            sbx_error_prefix(err, "server-sent event name");
    }
    /* "id" and "retry" matter only to reconnecting browsers; other fields are ignored. */
    return rc;
}

int sbx__sse_feed(struct sbx__sse *p, const char *bytes, size_t n, struct sbx_error *err)
{
    size_t i = 0;
    if (p->skip_lf && n) {
        if (bytes[0] == '\n')
            i = 1;
        p->skip_lf = 0;
    }
    while (i < n) {
        size_t j = i;
        while (j < n && bytes[j] != '\n' && bytes[j] != '\r')
            j++;
        if (j == n) {
            int rc = sbx_buf_add(&p->line, bytes + i, n - i, err);
            if (rc < 0) {
                sbx_error_prefix(err, "server-sent event line");
                return rc;
            }
            return 0;
        }
        int rc;
        if (p->line.len) {
            rc = sbx_buf_add(&p->line, bytes + i, j - i, err);
            if (rc < 0) {
                sbx_error_prefix(err, "server-sent event line");
                return rc;
            }
            rc = process_line(p, p->line.data, p->line.len, err);
            sbx_buf_reset(&p->line);
        } else {
            rc = process_line(p, bytes + i, j - i, err);
        }
        if (rc < 0)
            return rc;
        if (bytes[j] == '\r') {
            if (j + 1 < n) {
                if (bytes[j + 1] == '\n')
                    j++;
            } else {
                p->skip_lf = 1;
            }
        }
        i = j + 1;
    }
    return 0;
}

int sbx__sse_finish(struct sbx__sse *p, struct sbx_error *err)
{
    if (p->line.len || p->has_data)
        return sbx_error_set(err, SBX_E_PARSE, 0, "stream ended in the middle of an event");
    return 0;
}
