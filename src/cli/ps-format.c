/* What `sbx sandbox ps` shows of a sandbox, by field: the --format templates ({{.ID}}
 * {{.Status}}, `table ...`) and the --filter tests. A sandbox is one item of the listing (a
 * state object, or what --all says of one that is not live) with the "name" and "labels" of its
 * record when it has them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "sbx/buf.h"
#include "sbx/json.h"

#define ROW_MAX     ((size_t)64 << 10) /* one rendered row */
#define FILTERS_MAX 64

static const char *const fields[] = {"ID",      "Name",      "Provider", "Status",
                                     "Created", "Workspace", "Labels",   NULL};

static const char *str(const json_t *v, const char *key)
{
    return json_string_value(json_object_get(v, key));
}

/* Where a sandbox's files are: its workspace, what a dead one left, or a stopped one's
 * snapshot. Caller frees. */
static char *workspace_of(const json_t *v)
{
    const json_t *left = json_object_get(v, "leftovers");
    const char *status = str(v, "status");
    if (status && strcmp(status, "stopped") == 0) {
        const json_t *b = json_object_get(v, "snapshot_bytes");
        const char *snap = str(v, "snapshot"), *prov = str(v, "provider");
        if (!snap) /* a provider whose stopped sandbox keeps its workspace (a stopped container) */
            return sbx_xasprintf("(stopped: workspace kept by %.40s)",
                                 prov ? prov : "its provider");
        if (json_is_integer(b))
            return sbx_xasprintf("(stopped: snapshot %.19s, %lld bytes)", snap ? snap : "-",
                                 (long long)json_integer_value(b));
        return sbx_xasprintf("(stopped: snapshot %.19s, size unknown)", snap ? snap : "-");
    }
    const char *ws = left ? str(left, "workspace") : str(v, "workspace");
    return sbx_xstrdup(ws ? ws : "-");
}

static char *labels_of(const json_t *v)
{
    struct sbx_buf b;
    const char *k;
    json_t *val;
    sbx_buf_init(&b, ROW_MAX);
    json_object_foreach(json_object_get(v, "labels"), k, val)
    {
        (void)sbx_buf_addf(&b, NULL, "%s%s=%s", b.len ? "," : "", k, json_string_value(val));
    }
    return sbx_buf_detach(&b, NULL);
}

char *cli_ps_field(const json_t *v, const char *field, const char *arg)
{
    const char *s = NULL;
    if (strcmp(field, "Label") == 0)
        s = str(json_object_get(v, "labels"), arg ? arg : "");
    else if (strcmp(field, "ID") == 0)
        s = str(v, "id");
    else if (strcmp(field, "Name") == 0)
        s = str(v, "name");
    else if (strcmp(field, "Provider") == 0)
        s = str(v, "provider");
    else if (strcmp(field, "Status") == 0)
        s = str(v, "status") ? str(v, "status") : "live";
    else if (strcmp(field, "Created") == 0)
        s = str(v, "created");
    else if (strcmp(field, "Workspace") == 0)
        return workspace_of(v);
    else if (strcmp(field, "Labels") == 0)
        return labels_of(v);
    return sbx_xstrdup(s ? s : "");
}

/* The action of a template at p, just after its "{{": {{.Field}} or {{.Label "KEY"}}, spaces
 * allowed inside the braces. Its field and argument into f and a; returns what follows its
 * "}}", or NULL when it is not one of these. */
static const char *action(const char *p, char *f, size_t fn, char *a, size_t an)
{
    const char *end = strstr(p, "}}");
    size_t i = 0;
    if (!end)
        return NULL;
    while (p < end && *p == ' ')
        p++;
    if (p == end || *p++ != '.')
        return NULL;
    while (p < end && i + 1 < fn && ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z')))
        f[i++] = *p++;
    f[i] = '\0';
    a[0] = '\0';
    while (p < end && *p == ' ')
        p++;
    if (strcmp(f, "Label") == 0) {
        const char *q = *p == '"' ? memchr(p + 1, '"', (size_t)(end - p - 1)) : NULL;
        if (!q || (size_t)(q - p) > an)
            return NULL;
        snprintf(a, an, "%.*s", (int)(q - p - 1), p + 1);
        p = q + 1;
        while (p < end && *p == ' ')
            p++;
    } else {
        size_t k = 0;
        while (fields[k] && strcmp(fields[k], f) != 0)
            k++;
        if (!fields[k])
            return NULL;
    }
    return p == end ? end + 2 : NULL;
}

/* Render template t for v (NULL: the header row, each field's name in capitals) into b;
 * \t, \n and \\ are a tab, a newline and a backslash. Returns 0, or -1 at the first action
 * that is not one (its text in *bad). */
static int render(const char *t, const json_t *v, struct sbx_buf *b, const char **bad)
{
    char f[32], a[SBX_SANDBOX_LABEL_KEY_MAX + 1];
    for (const char *p = t; *p;) {
        if (p[0] == '{' && p[1] == '{') {
            const char *next = action(p + 2, f, sizeof(f), a, sizeof(a));
            if (!next) {
                *bad = p;
                return -1;
            }
            char *val = v ? cli_ps_field(v, f, a) : NULL;
            if (!v && a[0])
                (void)sbx_buf_addf(b, NULL, "LABEL %s", a);
            else if (!v)
                for (const char *c = f; *c; c++)
                    (void)sbx_buf_addf(b, NULL, "%c", *c >= 'a' && *c <= 'z' ? *c - 32 : *c);
            else
                (void)sbx_buf_addf(b, NULL, "%s", val);
            free(val);
            p = next;
        } else if (p[0] == '\\' && (p[1] == 't' || p[1] == 'n' || p[1] == '\\')) {
            (void)sbx_buf_addf(b, NULL, "%c", p[1] == 't' ? '\t' : p[1] == 'n' ? '\n' : '\\');
            p += 2;
        } else {
            (void)sbx_buf_addf(b, NULL, "%c", *p++);
        }
    }
    return 0;
}

int cli_ps_format_check(const char *format, const char *verb)
{
    struct sbx_buf b;
    const char *bad = NULL, *t = format;
    if (strcmp(format, "table") == 0 || strcmp(format, "json") == 0)
        return CLI_OK;
    if (strncmp(format, "table ", 6) == 0)
        t = format + 6;
    sbx_buf_init(&b, ROW_MAX);
    int rc = render(t, NULL, &b, &bad);
    sbx_buf_release(&b);
    if (rc < 0)
        return cli_usage(verb,
                         "ps: --format: cannot read '%.40s' (fields: .ID .Name .Provider .Status "
                         ".Created .Workspace .Labels, .Label \"KEY\")",
                         bad);
    return CLI_OK;
}

/* The cells of rows (strings with tabs) printed in columns two spaces apart. */
static void print_aligned(json_t *rows)
{
    size_t width[64] = {0}, i;
    json_t *r;
    json_array_foreach(rows, i, r)
    {
        const char *s = json_string_value(r);
        for (size_t c = 0; c < 64 && *s; c++) {
            size_t n = strcspn(s, "\t");
            width[c] = n > width[c] ? n : width[c];
            s += n + (s[n] == '\t');
        }
    }
    json_array_foreach(rows, i, r)
    {
        const char *s = json_string_value(r);
        for (size_t c = 0; *s; c++) {
            size_t n = strcspn(s, "\t");
            int last = s[n] != '\t' || c >= 63;
            cli_printf_safe(stdout, CLI_SAFE_ALWAYS, "%.*s", (int)(last ? strlen(s) : n), s);
            if (last)
                break;
            printf("%*s", (int)(width[c] - n + 2), "");
            s += n + 1;
        }
        putchar('\n');
    }
}

void cli_ps_print_format(const char *format, const json_t *list)
{
    size_t i;
    json_t *v, *rows = json_array();
    const char *bad = NULL, *t = format;
    int table = strncmp(format, "table ", 6) == 0;
    if (strcmp(format, "json") == 0) {
        json_array_foreach(list, i, v)
        {
            char *text = sbx_json_dumps(v, 0);
            cli_put_json(stdout, text);
            putchar('\n');
            free(text);
        }
        json_decref(rows);
        return;
    }
    if (table)
        t = format + 6;
    for (i = table ? 0 : 1; i <= json_array_size(list); i++) {
        struct sbx_buf b;
        sbx_buf_init(&b, ROW_MAX);
        (void)render(t, i ? json_array_get(list, i - 1) : NULL, &b, &bad);
        sbx_json_append(rows, sbx_json_str(b.data));
        sbx_buf_release(&b);
    }
    if (table) {
        print_aligned(rows);
    } else {
        json_array_foreach(rows, i, v)
        {
            cli_printf_safe(stdout, CLI_SAFE_ALWAYS, "%s\n", json_string_value(v));
        }
    }
    json_decref(rows);
}

/* ---------------------------------------------------------------------------------------------
 * --filter KEY=VALUE: id (prefix), name (part of it), label (KEY or KEY=VALUE), status,
 * provider. Filters of one key: any may hold; of different keys: each must. */

int cli_ps_filter_add(json_t *filters, const char *text, const char *verb)
{
    static const char *const keys[] = {"id", "name", "label", "status", "provider", NULL};
    const char *eq = strchr(text, '=');
    size_t k = 0;
    while (eq && keys[k] &&
           (strlen(keys[k]) != (size_t)(eq - text) ||
            strncmp(keys[k], text, (size_t)(eq - text)) != 0))
        k++;
    if (!eq || !keys[k])
        return cli_usage(verb,
                         "ps: --filter wants id=, name=, label=, status= or provider=, not '%s'",
                         text);
    if (json_array_size(filters) >= FILTERS_MAX)
        return cli_usage(verb, "ps: more than %d filters", FILTERS_MAX);
    sbx_json_append(filters, json_pack("{s:s, s:s}", "key", keys[k], "value", eq + 1));
    return CLI_OK;
}

static int filter_holds(const json_t *v, const char *key, const char *want)
{
    char *got = NULL;
    int hit;
    if (strcmp(key, "label") == 0) {
        const char *eq = strchr(want, '=');
        char *k = eq ? sbx_xstrndup(want, (size_t)(eq - want)) : sbx_xstrdup(want);
        const char *have = str(json_object_get(v, "labels"), k);
        hit = have && (!eq || strcmp(have, eq + 1) == 0);
        free(k);
        return hit;
    }
    got = cli_ps_field(v,
                       strcmp(key, "id") == 0       ? "ID"
                       : strcmp(key, "name") == 0   ? "Name"
                       : strcmp(key, "status") == 0 ? "Status"
                                                    : "Provider",
                       NULL);
    if (strcmp(key, "id") == 0)
        hit = strncmp(got, want, strlen(want)) == 0;
    else if (strcmp(key, "name") == 0)
        hit = got[0] && strstr(got, want) != NULL;
    else
        hit = strcmp(got, want) == 0;
    free(got);
    return hit;
}

int cli_ps_filter_match(const json_t *filters, const json_t *v)
{
    size_t i, j;
    json_t *f, *g;
    json_array_foreach(filters, i, f)
    {
        const char *key = str(f, "key");
        int any = 0;
        json_array_foreach(filters, j, g)
        {
            if (strcmp(str(g, "key"), key) == 0 && filter_holds(v, key, str(g, "value")))
                any = 1;
        }
        if (!any)
            return 0;
    }
    return 1;
}
