/* sbx sandbox ps (ls) and sbx sandbox providers: the sandboxes of every provider, each once with
 * its provider, and the providers themselves as the registry describes them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "sbx/json.h"
#include "sbx/provider.h"
#include "sbx/session.h"

#define VERB "sandbox "

static int print_json(const json_t *v)
{
    char *text = sbx_json_dumps(v, SBX_JSON_PRETTY);
    cli_put_json(stdout, text);
    putchar('\n');
    free(text);
    return CLI_OK;
}

struct ps {
    int all, json;
    const char *only; /* --provider */
    json_t *list;     /* what is shown */
    json_t *seen;     /* id -> true */
};

/* The sandboxes c lists (want: only these ids, NULL: all), each marked with its provider,
 * appended to p->list unless already there. */
static int list_client(struct ps *p, struct sbx_client *c, const json_t *want,
                       struct sbx_error *err)
{
    json_t *got = NULL, *v;
    size_t i;
    int rc = p->all ? sbx_client_list_all(c, &got, err) : sbx_client_list(c, &got, err);
    /* A provider that keeps no leftovers has only its live ones to show. */
    if (rc == -SBX_E_UNSUPPORTED && p->all) {
        sbx_error_clear(err);
        rc = sbx_client_list(c, &got, err);
    }
    json_array_foreach(got, i, v)
    {
        const char *id = json_string_value(json_object_get(v, "id"));
        if (!id || json_object_get(p->seen, id) || (want && !json_object_get(want, id)))
            continue;
        if (!json_object_get(v, "provider"))
            sbx_json_set(v, "provider", sbx_json_str(sbx_client_provider(c)));
        sbx_json_set(p->seen, id, json_true());
        json_array_append(p->list, v);
    }
    json_decref(got);
    return rc;
}

/* The providers that find their sandboxes here unconfigured. */
static int list_listers(struct ps *p, struct sbx_error *err)
{
    struct sbx_provider_info info;
    for (size_t k = 0; sbx_provider_at(k, &info) == 0; k++) {
        struct sbx_client *c = NULL;
        struct sbx_error e = SBX_ERROR_INIT;
        if ((!(info.traits & SBX_PROVIDER_LISTS) && !cli_locators_given(info.name)) ||
            (p->only && strcmp(p->only, info.name) != 0))
            continue;
        int rc = cli_client_found(info.name, p->only != NULL, &c, &e);
        if (rc == -SBX_E_NOTFOUND && !c)
            continue; /* nothing of it configured here */
        if (rc == 0)
            rc = list_client(p, c, NULL, &e);
        sbx_client_free(c);
        /* Asked for, or the default provider: a failure. Only found: its server may be down,
         * the rest of the list stands. */
        if (rc < 0 && (p->only || k == 0))
            return sbx_error_copy(err, &e);
        if (rc < 0)
            cli_printf_safe(stderr, CLI_SAFE_ALWAYS, "sbx: warning: %s sandboxes not listed: %s\n",
                            info.name, e.msg);
    }
    return 0;
}

/* The recorded sandboxes not listed yet: one listing per provider and options, showing the
 * recorded ids it has; a record whose sandbox is gone from a listing that worked is dropped. */
static int list_records(struct ps *p, struct sbx_error *err)
{
    json_t *recs = NULL, *r;
    size_t i, j;
    int rc = sbx_sandbox_records(&recs, err);
    json_t *done = json_object();
    json_array_foreach(recs, i, r)
    {
        const char *id = json_string_value(json_object_get(r, "id"));
        const char *prov = json_string_value(json_object_get(r, "provider"));
        const json_t *opts = json_object_get(r, "options");
        if (rc < 0 || json_object_get(done, id) || json_object_get(p->seen, id) ||
            (p->only && strcmp(p->only, prov) != 0) || sbx_provider_find(prov, NULL, NULL) < 0)
            continue;
        /* Its group: the records of the same provider and options. */
        json_t *want = json_object(), *other;
        json_array_foreach(recs, j, other)
        {
            const char *oid = json_string_value(json_object_get(other, "id"));
            if (strcmp(json_string_value(json_object_get(other, "provider")), prov) == 0 &&
                json_equal(json_object_get(other, "options"), (json_t *)opts) &&
                !json_object_get(p->seen, oid)) {
                sbx_json_set(want, oid, json_true());
                sbx_json_set(done, oid, json_true());
            }
        }
        struct sbx_client *c = NULL;
        struct sbx_error e = SBX_ERROR_INIT;
        int lrc = cli_client_with(prov, opts, &c, &e);
        if (lrc == 0)
            lrc = list_client(p, c, want, &e);
        sbx_client_free(c);
        if (lrc < 0 && p->only)
            rc = sbx_error_copy(err, &e);
        else if (lrc < 0)
            cli_printf_safe(stderr, CLI_SAFE_ALWAYS,
                            "sbx: warning: recorded %s sandboxes not listed: %s\n", prov, e.msg);
        const char *wid;
        json_t *unused;
        /* Only a listing of the records' own place drops them (flags naming another node or
         * engine list that one). */
        int moved = cli_locators_move(prov, opts);
        json_object_foreach(want, wid, unused)
        {
            if (lrc == 0 && !moved && !json_object_get(p->seen, wid))
                (void)sbx_sandbox_record_remove(wid, NULL);
        }
        json_decref(want);
    }
    json_decref(done);
    json_decref(recs);
    return rc;
}

/* The name and labels of each listed sandbox's record. */
static void add_names(json_t *list)
{
    json_t *recs = NULL, *r, *v;
    size_t i, j;
    if (sbx_sandbox_records(&recs, NULL) < 0)
        return;
    json_array_foreach(list, i, v)
    {
        json_array_foreach(recs, j, r)
        {
            if (strcmp(json_string_value(json_object_get(r, "id")),
                       json_string_value(json_object_get(v, "id"))) != 0)
                continue;
            if (json_object_get(r, "name"))
                sbx_json_set(v, "name", json_incref(json_object_get(r, "name")));
            if (json_object_get(r, "labels"))
                sbx_json_set(v, "labels", json_incref(json_object_get(r, "labels")));
        }
    }
    json_decref(recs);
}

static void print_row(const json_t *v, int idw, int pw, int nw)
{
    json_t *left = json_object_get(v, "leftovers"), *cg;
    char *f[6];
    static const char *const names[] = {"ID", "Provider", "Status", "Created", "Name", "Workspace"};
    size_t k;
    for (k = 0; k < 6; k++)
        f[k] = cli_ps_field(v, names[k], NULL);
    cli_printf_safe(stdout, CLI_SAFE_ALWAYS, "%-*s  %-*s  %-9s  %-24s  %-*s  %s\n", idw, f[0], pw,
                    f[1][0] ? f[1] : "-", f[2], f[3][0] ? f[3] : "-", nw, f[4][0] ? f[4] : "-",
                    f[5]);
    for (k = 0; k < 6; k++)
        free(f[k]);
    /* What a sandbox that is not live leaves: one indented line each. */
    if (left && json_string_value(json_object_get(left, "runtime_dir")))
        printf("  runtime_dir %s\n", json_string_value(json_object_get(left, "runtime_dir")));
    json_array_foreach(json_object_get(left, "cgroups"), k, cg)
            printf("  cgroup %s\n", json_string_value(cg));
    if (json_is_integer(json_object_get(left, "supervisor_pid")))
        printf("  supervisor %lld\n",
               (long long)json_integer_value(json_object_get(left, "supervisor_pid")));
}

static void print_table(const json_t *list)
{
    struct sbx_provider_info info;
    int pw = 8, nw = 4;
    size_t i;
    json_t *v;
    for (size_t k = 0; sbx_provider_at(k, &info) == 0; k++)
        if ((int)strlen(info.name) > pw)
            pw = (int)strlen(info.name);
    /* Ids of 16 hex digits (local, docker) or longer ones (a hosted service's) in one column. */
    int idw = 16;
    json_array_foreach(list, i, v)
    {
        const char *n = json_string_value(json_object_get(v, "name"));
        const char *id = json_string_value(json_object_get(v, "id"));
        if (n && (int)strlen(n) > nw)
            nw = (int)strlen(n);
        if (id && (int)strlen(id) > idw && strlen(id) <= 64)
            idw = (int)strlen(id);
    }
    printf("%-*s  %-*s  %-9s  %-24s  %-*s  %s\n", idw, "ID", pw, "PROVIDER", "STATUS", "CREATED",
           nw, "NAME", "WORKSPACE");
    json_array_foreach(list, i, v) print_row(v, idw, pw, nw);
}

int cli_sandbox_list(int all, json_t **out, struct sbx_error *err)
{
    struct ps p = {.all = all, .list = json_array(), .seen = json_object()};
    int rc = list_listers(&p, err);
    if (rc == 0)
        rc = list_records(&p, err);
    json_decref(p.seen);
    if (rc < 0) {
        json_decref(p.list);
        return rc;
    }
    add_names(p.list);
    *out = p.list;
    return 0;
}

struct ps_args {
    int quiet;
    const char *format;
    json_t *filters;
};

static int ps_parse(struct ps *p, struct ps_args *a, int argc, char **argv, struct sbx_error *err)
{
    int rc = 0;
    for (int i = 1; i < argc && rc == 0; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--json") == 0) {
            p->json = 1;
        } else if (strcmp(arg, "--all") == 0 || strcmp(arg, "-a") == 0) {
            p->all = 1;
        } else if (strcmp(arg, "-q") == 0 || strcmp(arg, "--quiet") == 0) {
            a->quiet = 1;
        } else if (strcmp(arg, "-aq") == 0 || strcmp(arg, "-qa") == 0) {
            p->all = a->quiet = 1;
        } else if (strcmp(arg, "--format") == 0 && i + 1 < argc) {
            a->format = argv[++i];
            rc = cli_ps_format_check(a->format, VERB "ps ");
        } else if ((strcmp(arg, "--filter") == 0 || strcmp(arg, "-f") == 0) && i + 1 < argc) {
            rc = cli_ps_filter_add(a->filters, argv[++i], VERB "ps ");
        } else if (strcmp(arg, "--provider") == 0 && i + 1 < argc) {
            p->only = argv[++i];
            if (sbx_provider_find(p->only, NULL, err) < 0)
                rc = cli_usage(VERB "ps ", "ps: %s", err->msg);
        } else if ((rc = cli_locator_arg(argc, argv, &i, VERB "ps ")) == 1) {
            rc = 0;
        } else {
            rc = rc              ? rc
                 : arg[0] == '-' ? cli_unknown_option(VERB "ps ", arg)
                                 : cli_usage(VERB "ps ", "ps: unexpected argument '%s'", arg);
        }
    }
    return rc;
}

int cmd_sandbox_ps(int argc, char **argv)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct ps p = {.list = json_array(), .seen = json_object()};
    struct ps_args a = {.filters = json_array()};
    int rc = ps_parse(&p, &a, argc, argv, &err);
    if (rc == 0 && (rc = list_listers(&p, &err)) == 0)
        rc = list_records(&p, &err);
    if (rc == 0) {
        json_t *shown = json_array(), *v;
        size_t i;
        add_names(p.list);
        json_array_foreach(p.list, i, v)
        {
            if (cli_ps_filter_match(a.filters, v))
                json_array_append(shown, v);
        }
        if (a.quiet)
            json_array_foreach(shown, i, v)
                    printf("%s\n", json_string_value(json_object_get(v, "id")));
        else if (p.json)
            print_json(shown);
        else if (a.format && strcmp(a.format, "table") != 0)
            cli_ps_print_format(a.format, shown);
        else
            print_table(shown);
        json_decref(shown);
    }
    json_decref(p.list);
    json_decref(p.seen);
    json_decref(a.filters);
    if (rc > 0)
        return rc;
    return rc < 0 ? cli_fail(&err) : CLI_OK;
}

/* ---------------------------------------------------------------------------------------------
 * providers */

static void print_provider(const struct sbx_provider_info *p, int dflt)
{
    printf("%s%s: %s\n  traits:", p->name, dflt ? " (default)" : "", p->summary);
    for (unsigned t = 1; t && sbx_provider_trait_name(t); t <<= 1)
        if (p->traits & t)
            printf(" %s", sbx_provider_trait_name(t));
    printf("%s\n  options:%s\n", p->traits ? "" : " none", p->n_options ? "" : " none");
    for (size_t k = 0; k < p->n_options; k++) {
        const struct sbx_provider_option *o = &p->options[k];
        printf("    %s=%s", o->key, o->arg ? o->arg : "true|false");
        if (o->short_flag)
            printf("  -%c,", o->short_flag);
        if (o->flag)
            printf("%s--%s", o->short_flag ? " " : "  ", o->flag);
        printf("%s%s%s%s\n", o->flags & SBX_OPTION_LIST ? "  [list]" : "",
               o->flags & SBX_OPTION_REQUIRED ? "  [required]" : "",
               o->flags & SBX_OPTION_TRUSTED ? "  [command line only]" : "",
               o->flags & SBX_OPTION_LOCATOR ? "  [locator]" : "");
        printf("        %s\n", o->help ? o->help : "");
    }
}

int cmd_sandbox_providers(int argc, char **argv)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_provider_info p;
    const char *name = NULL;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            json = 1;
        else if (argv[i][0] == '-' || name)
            return cli_usage(VERB "providers ", "providers: unexpected argument '%s'", argv[i]);
        else
            name = argv[i];
    }
    if (name && sbx_provider_find(name, &p, &err) < 0)
        return cli_fail(&err);
    json_t *all = json_array();
    for (size_t k = 0; sbx_provider_at(k, &p) == 0; k++) {
        if (name && strcmp(name, p.name) != 0)
            continue;
        if (json)
            sbx_json_append(all, sbx_provider_describe(&p));
        else
            print_provider(&p, k == 0);
    }
    if (json)
        print_json(all);
    json_decref(all);
    return CLI_OK;
}
