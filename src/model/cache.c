/* Cached serialisation of a conversation's input items across model calls. */
#include <stdlib.h>
#include <string.h>

#include "core/grow.h"
#include "model/model-internal.h"
#include "sbx/json.h"

struct sbx_model_cache *sbx_model_cache_new(void)
{
    struct sbx_model_cache *c = sbx_xcalloc(1, sizeof(*c));
    sbx_buf_init(&c->bytes, SBX_BUF_NOLIMIT);
    return c;
}

static void drop_items(struct sbx_model_cache *c, size_t from)
{
    for (size_t i = from; i < c->nitems; i++)
        json_decref(c->items[i]);
    if (from < c->nitems)
        c->nitems = from;
}

void sbx_model_cache_free(struct sbx_model_cache *c)
{
    if (!c)
        return;
    drop_items(c, 0);
    free(c->items);
    free(c->unit_start);
    free(c->unit_off);
    sbx_buf_release(&c->bytes);
    free(c);
}

/* The input starts further on in the cached items (a turn hook cut the history at a
 * compaction item): drop the units before that point, when one starts exactly there. */
static void drop_front(struct sbx_model_cache *c, const json_t *first)
{
    size_t j = 1, u = 0;
    while (j < c->nitems && c->items[j] != first)
        j++;
    while (u < c->nunits && c->unit_start[u] < j)
        u++;
    if (j == c->nitems || u == c->nunits || c->unit_start[u] != j)
        return;
    size_t off = c->unit_off[u];
    memmove(c->bytes.data, c->bytes.data + off, c->bytes.len - off);
    sbx_buf_setlen(&c->bytes, c->bytes.len - off);
    for (size_t i = u; i < c->nunits; i++) {
        c->unit_start[i - u] = c->unit_start[i] - j;
        c->unit_off[i - u] = c->unit_off[i] - off;
    }
    c->nunits -= u;
    for (size_t i = 0; i < j; i++)
        json_decref(c->items[i]);
    memmove(c->items, c->items + j, (c->nitems - j) * sizeof(*c->items));
    c->nitems -= j;
}

size_t sbx__model_cache_keep(struct sbx_model_cache *c, const struct sbx__model_vt *vt,
                             const json_t *input, int last_open)
{
    size_t n = json_array_size(input), k = 0;
    if (c->vt != vt) {
        drop_items(c, 0);
        c->nunits = 0;
        sbx_buf_reset(&c->bytes);
        c->vt = vt;
    }
    if (n && c->nitems && c->items[0] != json_array_get(input, 0))
        drop_front(c, json_array_get(input, 0));
    while (k < c->nitems && k < n && c->items[k] == json_array_get(input, k))
        k++;
    size_t kept = 0;
    if (last_open) {
        while (kept + 1 < c->nunits && c->unit_start[kept + 1] < k)
            kept++;
    } else {
        while (kept < c->nunits && c->unit_start[kept] < k &&
               (kept + 1 == c->nunits ? c->nitems <= k : c->unit_start[kept + 1] <= k))
            kept++;
    }
    size_t resume = kept < c->nunits ? c->unit_start[kept] : k;
    if (kept < c->nunits)
        sbx_buf_setlen(&c->bytes, c->unit_off[kept]);
    c->nunits = kept;
    c->common = k;
    return resume;
}

void sbx__model_cache_add(struct sbx_model_cache *c, size_t start_item, const json_t *unit)
{
    size_t had = c->cap_units;
    SBX_ALLOC_GROW(c->unit_start, c->nunits + 1, c->cap_units);
    if (c->cap_units != had) /* its twin: the same count of the same size, checked above */
        c->unit_off = sbx_xrealloc(c->unit_off, c->cap_units * sizeof(*c->unit_off));
    c->unit_start[c->nunits] = start_item;
    c->unit_off[c->nunits] = c->bytes.len;
    c->nunits++;
    if (sbx_json_dump(unit, SBX_JSON_COMPACT, &c->bytes, NULL) < 0 ||
        sbx_buf_addch(&c->bytes, ',', NULL) < 0)
        SBX_BUG("unbounded buffer refused data");
}

void sbx__model_cache_done(struct sbx_model_cache *c, const json_t *input)
{
    size_t n = json_array_size(input);
    drop_items(c, c->common);
    if (n > c->cap_items) {
        c->cap_items = n > 2 * c->cap_items ? n : 2 * c->cap_items;
        c->items = sbx_xrealloc(c->items, c->cap_items * sizeof(*c->items));
    }
    for (size_t i = c->nitems; i < n; i++)
        c->items[i] = json_incref(json_array_get(input, i));
    c->nitems = n;
}

char *sbx__model_cache_body(const struct sbx_model_cache *c, const json_t *body, const char *key,
                            const char *prefix, size_t *len)
{
    struct sbx_buf b;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    size_t units = c->bytes.len ? c->bytes.len - 1 : 0; /* without the last comma */
    char *rest = sbx_json_dumps(body, SBX_JSON_COMPACT);
    size_t need = strlen(key) + (prefix ? strlen(prefix) : 0) + units + strlen(rest) + 16;
    if (sbx_buf_reserve(&b, need, NULL) < 0 || sbx_buf_addf(&b, NULL, "{\"%s\":[", key) < 0 ||
        (prefix && sbx_buf_adds(&b, prefix, NULL) < 0) ||
        (prefix && units && sbx_buf_addch(&b, ',', NULL) < 0) ||
        sbx_buf_add(&b, c->bytes.data, units, NULL) < 0 || sbx_buf_addch(&b, ']', NULL) < 0 ||
        /* rest is "{}" or "{...}": its fields follow the array. */
        (strcmp(rest, "{}") != 0 && sbx_buf_addch(&b, ',', NULL) < 0) ||
        sbx_buf_adds(&b, rest + 1, NULL) < 0)
        SBX_BUG("unbounded buffer refused data");
    free(rest);
    *len = b.len;
    return sbx_buf_detach(&b, NULL);
}
