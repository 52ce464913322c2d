/* The options of a new sandbox, one table for `sbx run`, `sbx sandbox create` and `sbx sandbox
 * resume`: --provider NAME, -o/--provider-option KEY=VALUE, and the flag of every provider
 * option that declares one (sbx/provider.h), each flag once however many providers declare
 * it. What a flag means comes from the provider chosen, its value is typed by that provider's
 * table, and a flag the provider does not declare is refused naming those that do. Nothing
 * here knows a provider by name. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "sbx/json.h"
#include "sbx/provider.h"

/* Every distinct provider flag, from the registry (built once). */
struct flag {
    const char *name;
    char short_name;
    int takes_value; /* 0 for a BOOL option: the flag alone means true */
};
static struct flag flags[CLI_SANDBOX_FLAGS_MAX];
static size_t n_flags;

static void load_flags(void)
{
    struct sbx_provider_info p;
    if (n_flags)
        return;
    for (size_t i = 0; sbx_provider_at(i, &p) == 0; i++) {
        for (size_t k = 0; k < p.n_options; k++) {
            const struct sbx_provider_option *o = &p.options[k];
            size_t f = 0;
            while (o->flag && f < n_flags && strcmp(flags[f].name, o->flag) != 0)
                f++;
            if (!o->flag || f < n_flags || n_flags == CLI_SANDBOX_FLAGS_MAX)
                continue;
            flags[n_flags++] = (struct flag){o->flag, o->short_flag, o->type != SBX_OPTION_BOOL};
        }
    }
}

static int own_has(const struct option *own, const char *name)
{
    for (; own && own->name; own++)
        if (strcmp(own->name, name) == 0)
            return 1;
    return 0;
}

const struct option *cli_sandbox_longopts(const struct option *own, const char *own_short,
                                          char *shortopts, size_t size)
{
    static struct option table[CLI_SANDBOX_FLAGS_MAX + 64];
    size_t n = 0;
    load_flags();
    for (const struct option *o = own;
         o && o->name && n < SBX_ARRAY_LEN(table) - CLI_SANDBOX_FLAGS_MAX - 3; o++)
        table[n++] = *o;
    snprintf(shortopts, size, "%so:", own_short);
    table[n++] = (struct option){"provider", required_argument, NULL, CLI_SB_PROVIDER};
    table[n++] = (struct option){"provider-option", required_argument, NULL, CLI_SB_OPTION};
    for (size_t f = 0; f < n_flags; f++) {
        /* A command's own option of that name wins (run --port reports a port's URL). */
        if (own_has(own, flags[f].name))
            continue;
        table[n++] = (struct option){flags[f].name,
                                     flags[f].takes_value ? required_argument : no_argument, NULL,
                                     CLI_SB_FLAG + (int)f};
        if (flags[f].short_name && strlen(shortopts) + 3 < size) {
            size_t len = strlen(shortopts);
            shortopts[len] = flags[f].short_name;
            shortopts[len + 1] = flags[f].takes_value ? ':' : '\0';
            shortopts[len + 2] = '\0';
        }
    }
    table[n] = (struct option){NULL, 0, NULL, 0};
    return table;
}

void cli_sandbox_init(struct cli_sandbox *sb)
{
    memset(sb, 0, sizeof(*sb));
}

void cli_sandbox_release(struct cli_sandbox *sb)
{
    json_decref(sb->options);
    sb->options = NULL;
}

int cli_sandbox_getopt(struct cli_sandbox *sb, int c, const char *arg, const char *verb)
{
    int f = -1;
    load_flags();
    if (c == CLI_SB_PROVIDER) {
        sb->provider = arg;
        return 1;
    }
    if (c >= CLI_SB_FLAG && c < CLI_SB_FLAG + (int)n_flags)
        f = c - CLI_SB_FLAG;
    for (size_t k = 0; f < 0 && c > 0 && c < 128 && k < n_flags; k++)
        if (flags[k].short_name == c)
            f = (int)k;
    if (f < 0 && c != CLI_SB_OPTION && c != 'o')
        return 0;
    if (sb->n_given == CLI_SANDBOX_GIVEN_MAX)
        return cli_usage(verb, "more than %d sandbox options", CLI_SANDBOX_GIVEN_MAX);
    sb->given[sb->n_given++] = (struct cli_sandbox_arg){.flag = f, .text = arg};
    return 1;
}

/* ---------------------------------------------------------------------------------------------
 * Resolving against the chosen provider */

/* "the local provider" for the default one, "--provider NAME" for another. */
static void provider_words(const char *name, char *buf, size_t size)
{
    struct sbx_provider_info d;
    if (sbx_provider_at(0, &d) == 0 && strcmp(d.name, name) == 0)
        snprintf(buf, size, "the %s provider", name);
    else
        snprintf(buf, size, "--provider %s", name);
}

/* Flag f is not one of p's: say whose it is. */
static int not_ours(const struct sbx_provider_info *p, const char *flag, const char *verb)
{
    char owners[512] = "", words[96], chosen[96];
    struct sbx_provider_info q;
    size_t len = 0;
    for (size_t i = 0; sbx_provider_at(i, &q) == 0; i++) {
        for (size_t k = 0; k < q.n_options; k++) {
            if (!q.options[k].flag || strcmp(q.options[k].flag, flag) != 0)
                continue;
            provider_words(q.name, words, sizeof(words));
            len += (size_t)snprintf(owners + len, len < sizeof(owners) ? sizeof(owners) - len : 0,
                                    "%s%s", len ? " or " : "", words);
            break;
        }
    }
    provider_words(p->name, chosen, sizeof(chosen));
    return cli_usage(verb, "option '--%s' is for %s, not %s", flag, owners, chosen);
}

static const struct sbx_provider_option *by_flag(const struct sbx_provider_info *p,
                                                 const char *flag)
{
    for (size_t k = 0; k < p->n_options; k++)
        if (p->options[k].flag && strcmp(p->options[k].flag, flag) == 0)
            return &p->options[k];
    return NULL;
}

/* Put value (taken) under key of opts: a list grows (its first value on the command line
 * replaces what the agent file said), anything else is replaced. */
static void put(json_t *opts, json_t *cli_lists, const struct sbx_provider_option *o,
                const char *key, json_t *value)
{
    if (!o || !(o->flags & SBX_OPTION_LIST)) {
        sbx_json_set(opts, key, value);
        return;
    }
    if (!json_object_get(cli_lists, key)) {
        sbx_json_set(cli_lists, key, json_true());
        sbx_json_set(opts, key, json_array());
    }
    sbx_json_append(json_object_get(opts, key), value);
}

/* One given flag or -o KEY=VALUE into opts. */
static int apply(const struct sbx_provider_info *p, const struct cli_sandbox_arg *a, json_t *opts,
                 json_t *cli_lists, const char *verb)
{
    struct sbx_error err = SBX_ERROR_INIT;
    const struct sbx_provider_option *o;
    json_t *v = NULL;
    char key[128];
    const char *text = a->text;
    if (a->flag >= 0) {
        o = by_flag(p, flags[a->flag].name);
        if (!o)
            return not_ours(p, flags[a->flag].name, verb);
        snprintf(key, sizeof(key), "%s", o->key);
    } else {
        const char *eq = strchr(text, '=');
        if (!eq || eq == text || (size_t)(eq - text) >= sizeof(key))
            return cli_usage(verb, "-o wants KEY=VALUE, not '%s'", text);
        snprintf(key, sizeof(key), "%.*s", (int)(eq - text), text);
        text = eq + 1;
        o = sbx_provider_option(p, key);
    }
    if (!o) /* the check names it, with what it may have meant */
        v = sbx_json_str(text);
    else if (o->type == SBX_OPTION_BOOL && a->flag >= 0)
        v = json_true();
    else if (sbx_provider_option_parse(o, text, &v, &err) < 0)
        return cli_usage(verb, "%s", err.msg);
    put(opts, cli_lists, o, key, v);
    return CLI_OK;
}

/* value (canonical) of o matches one of its dangerous values. */
static int dangerous(const struct sbx_provider_option *o, const char *value)
{
    size_t n = strlen(value);
    if (!o->danger || !o->warning)
        return 0;
    for (const char *p = o->danger; *p;) {
        size_t len = strcspn(p, "|");
        if ((len == 1 && *p == '*') || (len == n && strncmp(p, value, n) == 0))
            return 1;
        p += len + (p[len] == '|');
    }
    return 0;
}

static void warn(const struct sbx_provider_option *o, const char *value)
{
    const char *at = strstr(o->warning, "%s");
    if (!at)
        fprintf(stderr, "sbx: warning: %s\n", o->warning);
    else
        fprintf(stderr, "sbx: warning: %.*s%s%s\n", (int)(at - o->warning), o->warning, value,
                at + 2);
}

/* The warnings of the options given on purpose that weaken the sandbox. */
static void warnings(const struct sbx_provider_info *p, const json_t *opts)
{
    for (size_t k = 0; k < p->n_options; k++) {
        const struct sbx_provider_option *o = &p->options[k];
        const json_t *v = json_object_get(opts, o->key), *item;
        size_t i;
        if (json_is_string(v) && dangerous(o, json_string_value(v)))
            warn(o, json_string_value(v));
        /* A switch that weakens the sandbox warns when it is on (danger "true"). */
        if (json_is_true(v) && dangerous(o, "true"))
            warn(o, "true");
        json_array_foreach(v, i, item)
        {
            if (json_is_string(item) && dangerous(o, json_string_value(item)))
                warn(o, json_string_value(item));
        }
    }
}

/* A required option missing (create and run only). */
static int missing(const struct sbx_provider_info *p, const json_t *opts, const char *verb,
                   int mode)
{
    for (size_t k = 0; k < p->n_options; k++) {
        const struct sbx_provider_option *o = &p->options[k];
        char give[128];
        if (!(o->flags & SBX_OPTION_REQUIRED) || json_object_get(opts, o->key))
            continue;
        if (o->flag)
            snprintf(give, sizeof(give), "--%s %s", o->flag, o->arg ? o->arg : "VALUE");
        else
            snprintf(give, sizeof(give), "-o %s=%s", o->key, o->arg ? o->arg : "VALUE");
        return cli_usage(verb, "%s--provider %s needs %s (%s%s%s%s)",
                         mode & CLI_SANDBOX_CREATE ? "create: " : "", p->name, give,
                         mode & CLI_SANDBOX_RUN ? "or " : "", mode & CLI_SANDBOX_RUN ? o->key : "",
                         mode & CLI_SANDBOX_RUN ? ": in the agent file's sandbox: section; " : "",
                         o->help ? o->help : o->key);
    }
    return CLI_OK;
}

int cli_sandbox_finish(struct cli_sandbox *sb, const json_t *section, const char *verb, int mode)
{
    struct sbx_error err = SBX_ERROR_INIT;
    const char *fp = json_string_value(json_object_get(section, "provider"));
    const char *name = sb->provider ? sb->provider : fp;
    const char *key;
    json_t *v, *canon = NULL;
    int rc = CLI_OK;
    if (sbx_provider_find(name, &sb->info, &err) < 0)
        return cli_usage(verb, "%s", err.msg);
    json_t *opts = json_object(), *cli_lists = json_object();
    /* The agent file's section is for the provider it names (the default when none): another
     * --provider leaves it out. */
    struct sbx_provider_info fpi;
    if (section && sbx_provider_find(fp, &fpi, NULL) == 0 && strcmp(fpi.name, sb->info.name) == 0)
        json_object_foreach((json_t *)section, key, v)
        {
            if (strcmp(key, "provider") != 0)
                sbx_json_set(opts, key, json_incref(v));
        }
    for (size_t i = 0; i < sb->n_given && rc == CLI_OK; i++)
        rc = apply(&sb->info, &sb->given[i], opts, cli_lists, verb);
    if (rc == CLI_OK && sbx_provider_options_check(sb->info.name, opts, &canon, &err) < 0)
        rc = cli_usage(verb, "%s", err.msg);
    if (rc == CLI_OK && (mode & (CLI_SANDBOX_CREATE | CLI_SANDBOX_RUN)))
        rc = missing(&sb->info, canon, verb, mode);
    if (rc == CLI_OK) {
        warnings(&sb->info, canon);
        json_decref(sb->options);
        sb->options = json_incref(canon);
    }
    json_decref(canon);
    json_decref(opts);
    json_decref(cli_lists);
    return rc;
}

const char *cli_sandbox_provider(const struct cli_sandbox *sb)
{
    return sb->info.name;
}

int cli_sandbox_set(struct cli_sandbox *sb, const char *key, json_t *value)
{
    if (!sbx_provider_option(&sb->info, key)) {
        json_decref(value);
        return 0;
    }
    sbx_json_set(sb->options, key, value);
    return 1;
}

int cli_sandbox_client(const struct cli_sandbox *sb, struct sbx_client **out, struct sbx_error *err)
{
    return sbx_client_new_json(sb->info.name, sb->options, out, err);
}

/* A provider that cannot find its sandboxes by itself, or needs options to reach them (an
 * engine's address), has its sandboxes recorded. */
static int wants_record(const struct sbx_provider_info *p)
{
    if (!(p->traits & SBX_PROVIDER_LISTS))
        return 1;
    for (size_t k = 0; k < p->n_options; k++)
        if (p->options[k].flags & SBX_OPTION_LOCATOR)
            return 1;
    return 0;
}

/* The options to record for p: what reaches it unsaid ($DOCKER_HOST) is written down too, the
 * environment of a later command may differ. Caller owns. */
static json_t *record_options(const struct sbx_provider_info *p, const json_t *options)
{
    json_t *found = NULL, *all = options ? json_deep_copy(options) : json_object();
    if (sbx_provider_probe(p->name, &found, NULL) == 0)
        json_object_update_missing(all, found);
    json_decref(found);
    return all;
}

void cli_record(const struct sbx_provider_info *p, const char *id, const json_t *options)
{
    struct sbx_error err = SBX_ERROR_INIT;
    if (!wants_record(p))
        return;
    json_t *all = record_options(p, options);
    if (sbx_sandbox_record_write(p->name, id, all, &err) < 0)
        fprintf(stderr, "sbx: warning: %s (commands given only the id may not find it)\n", err.msg);
    json_decref(all);
}

int cli_record_named(const struct sbx_provider_info *p, const char *id, const json_t *options,
                     const char *name, const json_t *labels, struct sbx_error *err)
{
    json_t *all = record_options(p, options);
    int rc = sbx_sandbox_record_name(p->name, id, all, name, labels, err);
    json_decref(all);
    return rc;
}
