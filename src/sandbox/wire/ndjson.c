/* Newline-delimited JSON: ndjson.h. */
#include <string.h>

#include "sandbox/wire/ndjson.h"
#include "sandbox/wire/wire.h"
#include "sbx/json.h"

void sbx__ndjson_init(struct sbx__ndjson *d, size_t max_line, int max_depth, sbx__ndjson_fn *fn,
                      void *ud)
{
    memset(d, 0, sizeof(*d));
    d->max_line = max_line;
    d->max_depth = max_depth;
    sbx_buf_init(&d->line, max_line);
    d->fn = fn;
    d->ud = ud;
}

void sbx__ndjson_release(struct sbx__ndjson *d)
{
    sbx_buf_release(&d->line);
}

static int blank(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != ' ' && p[i] != '\t')
            return 0;
    return 1;
}

/* sbx_json_parse's checks with NUL allowed in strings. */
static int parse_nul(const char *p, size_t n, const struct sbx_json_limits *lim, json_t **out,
                     struct sbx_error *err)
{
    int depth = lim->max_depth ? lim->max_depth : SBX_JSON_DEFAULT_MAX_DEPTH;
    if (sbx_json_scan_depth(p, n, depth) > depth)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "nests too deep (over %d levels)", depth);
    json_error_t je;
    *out = json_loadb(p, n, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    if (!*out) {
        char clean[160];
        sbx__wire_clean(je.text, strlen(je.text), clean, sizeof(clean));
        return sbx_error_set(err, SBX_E_PARSE, 0, "column %d: %s", je.column, clean);
    }
    return 0;
}

/* A line is complete (without its LF). */
static int line_done(struct sbx__ndjson *d, struct sbx_error *err)
{
    size_t n = d->line.len;
    d->lineno++;
    if (n && d->line.data[n - 1] == '\r')
        n--;
    if (blank(d->line.data, n))
        return 0;
    json_t *v = NULL;
    struct sbx_json_limits lim = {.max_bytes = d->max_line, .max_depth = d->max_depth};
    int rc = d->allow_nul ? parse_nul(d->line.data, n, &lim, &v, err)
                          : sbx_json_parse(d->line.data, n, &lim, &v, err);
    if (rc < 0) {
        sbx_error_prefix(err, "json stream line %zu", d->lineno);
        return rc;
    }
    rc = d->fn(v, d->lineno, d->ud, err);
    json_decref(v);
    return rc;
}

int sbx__ndjson_feed(struct sbx__ndjson *d, const char *p, size_t n, struct sbx_error *err)
{
    if (d->failed)
        return sbx_error_set(err, SBX_E_INVAL, 0, "json stream already failed");
    int rc = 0;
    while (n && rc == 0) {
        const char *lf = memchr(p, '\n', n);
        size_t k = lf ? (size_t)(lf - p) : n;
        if (k > d->max_line - d->line.len) {
            rc = sbx_error_set(err, SBX_E_TOOBIG, 0,
                               "json stream line %zu is longer than %zu bytes", d->lineno + 1,
                               d->max_line);
            break;
        }
        if ((rc = sbx_buf_add(&d->line, p, k, err)) < 0)
            break;
        if (!lf)
            break;
        rc = line_done(d, err);
        sbx_buf_reset(&d->line);
        p += k + 1, n -= k + 1;
    }
    if (rc < 0)
        d->failed = 1;
    return rc;
}

int sbx__ndjson_finish(struct sbx__ndjson *d, struct sbx_error *err)
{
    if (d->failed)
        return sbx_error_set(err, SBX_E_INVAL, 0, "json stream already failed");
    size_t n = d->line.len;
    if (n && d->line.data[n - 1] == '\r')
        n--;
    if (blank(d->line.data, n))
        return 0;
    return sbx_error_set(err, SBX_E_PARSE, 0, "json stream ended in the middle of line %zu",
                         d->lineno + 1);
}
