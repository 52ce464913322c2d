/* sbx snapshot ls-files, cat and diff: a snapshot browsed in the store without restoring it.
 * Paths come from snapshots, which an imported archive may have made: every listing is printed
 * terminal-safe, and cat escapes control characters when its output is a terminal. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/path.h"
#include "sbx/snapshot.h"

static const char *str(const json_t *v, const char *key)
{
    return json_string_value(json_object_get(v, key));
}

/* "drwxr-xr-x" of an entry. */
static void mode_text(const json_t *e, char out[11])
{
    const char *type = str(e, "type");
    unsigned m = (unsigned)json_integer_value(json_object_get(e, "mode"));
    if (strcmp(type, "symlink") == 0)
        m = 0777;
    out[0] = type[0] == 'd' ? 'd' : type[0] == 's' ? 'l' : '-';
    for (int i = 0; i < 9; i++)
        out[1 + i] = (m & (0400u >> i)) ? "rwxrwxrwx"[i] : '-';
    out[10] = '\0';
}

static void print_entry(const json_t *e)
{
    char mode[11], size[24] = "-";
    mode_text(e, mode);
    if (json_is_integer(json_object_get(e, "size")))
        snprintf(size, sizeof(size), "%lld",
                 (long long)json_integer_value(json_object_get(e, "size")));
    const char *target = str(e, "target");
    cli_printf_safe(stdout, CLI_SAFE_ALWAYS, "%s  %12s  %s%s%s%s\n", mode, size, str(e, "path"),
                    strcmp(str(e, "type"), "dir") == 0 ? "/" : "", target ? " -> " : "",
                    target ? target : "");
}

/* ls-files REF [PATH]: the entries at and below PATH (all without one). */
static int ls_files(struct sbx_snapshot_store *st, const char *ref, const char *path, int json,
                    struct sbx_error *err)
{
    json_t *all = NULL, *shown = json_array(), *e;
    char *rel = NULL;
    size_t i;
    int rc = path ? sbx_path_normalize(path, strlen(path), 0, NULL, &rel, err) : 0;
    if (rc == 0)
        rc = sbx_snapshot_entries(st, ref, &all, err);
    json_array_foreach(all, i, e)
    {
        if (!rel || sbx_path_within(str(e, "path"), rel))
            json_array_append(shown, e);
    }
    if (rc == 0 && rel && rel[0] && json_array_size(shown) == 0)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "no '%s' in snapshot '%s'", rel, ref);
    if (rc == 0 && json) {
        char *text = sbx_json_dumps(shown, SBX_JSON_PRETTY);
        cli_put_json(stdout, text);
        putchar('\n');
        free(text);
    } else if (rc == 0) {
        json_array_foreach(shown, i, e) print_entry(e);
    }
    json_decref(all);
    json_decref(shown);
    free(rel);
    return rc;
}

static int cat_sink(void *ctx, const void *p, size_t n, struct sbx_error *err)
{
    (void)ctx;
    (void)err;
    cli_put_safe(stdout, CLI_SAFE_TTY, p, n);
    return ferror(stdout) ? sbx_error_set(err, SBX_E_IO, 0, "cannot write the output") : 0;
}

/* How b differs from a (same path): "" when it does not. */
static void change_of(const json_t *a, const json_t *b, char *out, size_t size)
{
    char ma[11], mb[11];
    out[0] = '\0';
    mode_text(a, ma);
    mode_text(b, mb);
    if (strcmp(str(a, "type"), str(b, "type")) != 0)
        snprintf(out, size, "%s -> %s", str(a, "type"), str(b, "type"));
    else if (str(a, "target") && strcmp(str(a, "target"), str(b, "target")) != 0)
        snprintf(out, size, "target %s -> %s", str(a, "target"), str(b, "target"));
    else if (str(a, "sha256") && strcmp(str(a, "sha256"), str(b, "sha256")) != 0)
        snprintf(out, size, "content%s%s%s%s", strcmp(ma, mb) ? ", mode " : "",
                 strcmp(ma, mb) ? ma : "", strcmp(ma, mb) ? " -> " : "", strcmp(ma, mb) ? mb : "");
    else if (strcmp(ma, mb) != 0)
        snprintf(out, size, "mode %s -> %s", ma, mb);
}

static void diff_line(json_t *out, int json, char what, const json_t *e, const json_t *a,
                      const char *how)
{
    char mode[11];
    if (json) {
        json_t *o = json_pack("{s:s, s:s}", "path", str(e, "path"), "change",
                              what == 'A'   ? "added"
                              : what == 'D' ? "removed"
                                            : "changed");
        if (a)
            sbx_json_set(o, "old", json_incref((json_t *)a));
        sbx_json_set(o, what == 'D' ? "old" : "new", json_incref((json_t *)e));
        sbx_json_append(out, o);
        return;
    }
    const char *target = str(e, "target");
    mode_text(e, mode);
    cli_printf_safe(stdout, CLI_SAFE_ALWAYS, "%c  %s  %s%s%s%s%s%s%s\n", what, mode, str(e, "path"),
                    strcmp(str(e, "type"), "dir") == 0 ? "/" : "", target ? " -> " : "",
                    target ? target : "", how && how[0] ? "  (" : "", how ? how : "",
                    how && how[0] ? ")" : "");
}

/* diff A B: what B added, removed and changed against A, in path order (both are sorted). */
static int diff(struct sbx_snapshot_store *st, const char *ra, const char *rb, int json,
                struct sbx_error *err)
{
    json_t *a = NULL, *b = NULL, *out = json_array();
    char how[1200];
    int rc = sbx_snapshot_entries(st, ra, &a, err);
    if (rc == 0)
        rc = sbx_snapshot_entries(st, rb, &b, err);
    for (size_t i = 0, j = 0; rc == 0 && (i < json_array_size(a) || j < json_array_size(b));) {
        json_t *ea = json_array_get(a, i), *eb = json_array_get(b, j);
        int c = !ea ? 1 : !eb ? -1 : strcmp(str(ea, "path"), str(eb, "path"));
        if (c < 0) {
            diff_line(out, json, 'D', ea, NULL, NULL);
            i++;
        } else if (c > 0) {
            diff_line(out, json, 'A', eb, NULL, NULL);
            j++;
        } else {
            change_of(ea, eb, how, sizeof(how));
            if (how[0])
                diff_line(out, json, 'M', eb, ea, how);
            i++;
            j++;
        }
    }
    if (rc == 0 && json) {
        char *text = sbx_json_dumps(out, SBX_JSON_PRETTY);
        cli_put_json(stdout, text);
        putchar('\n');
        free(text);
    }
    json_decref(a);
    json_decref(b);
    json_decref(out);
    return rc;
}

int cli_snapshot_browse(struct sbx_snapshot_store *st, const char *sub, const char *const *args,
                        int nargs, int json, struct sbx_error *err)
{
    if (strcmp(sub, "ls-files") == 0)
        return ls_files(st, args[0], nargs > 1 ? args[1] : NULL, json, err);
    if (strcmp(sub, "cat") == 0) {
        int rc = sbx_snapshot_cat(st, args[0], args[1], cat_sink, NULL, err);
        fflush(stdout);
        return rc;
    }
    return diff(st, args[0], args[1], json, err);
}
