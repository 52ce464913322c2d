/* The providers as a table (sbx/provider.h): the query API, the declared options of each
 * provider checked into their canonical JSON, and the client made from them. Written once over
 * the registry's table (table.c); a provider only declares its options and turns checked ones
 * into a client. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox/provider.h"
#include "sbx/buf.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/manifest.h"
#include "sbx/provider.h"
#include "sbx/secret.h"

#define LIST_MAX   256                /* values of one list option */
#define SECRET_MAX ((size_t)64 << 10) /* bytes of a secret read by reference */

static const char *const trait_names[] = {
        "mounts",           "accounts", "host-workspace", "snapshots",      "native-snapshots",
        "stop-start",       "pty",      "ports",          "network-policy", "grants",
        "isolation-levels", "lists",    "resume",         "stats",          "logs",
};

const char *sbx_provider_trait_name(unsigned trait)
{
    for (size_t i = 0; i < SBX_ARRAY_LEN(trait_names); i++)
        if (trait == 1u << i)
            return trait_names[i];
    return NULL;
}

static void info_of(const struct sbx__provider_def *d, struct sbx_provider_info *out)
{
    size_t n = 0;
    while (d->options && d->options[n].key)
        n++;
    *out = (struct sbx_provider_info){.name = d->name,
                                      .summary = d->summary,
                                      .traits = d->traits,
                                      .unmountable = d->unmountable,
                                      .unmountable_why = d->unmountable_why,
                                      .options = d->options,
                                      .n_options = n};
}

size_t sbx_provider_count(void)
{
    return sbx__n_providers;
}

int sbx_provider_at(size_t i, struct sbx_provider_info *out)
{
    if (i >= sbx__n_providers)
        return -SBX_E_NOTFOUND;
    info_of(sbx__providers[i], out);
    return 0;
}

int sbx_provider_find(const char *name, struct sbx_provider_info *out, struct sbx_error *err)
{
    const struct sbx__provider_def *d = sbx__provider_def(name);
    if (d) {
        if (out)
            info_of(d, out);
        return 0;
    }
    return sbx__provider_unknown(name, err);
}

int sbx_provider_check_mounts(const char *provider, const struct sbx_manifest *m,
                              struct sbx_error *err)
{
    const struct sbx__provider_def *d = sbx__provider_def(provider);
    if (!d)
        return sbx__provider_unknown(provider, err);
    return sbx__provider_check_mounts(d->name, m, err);
}

const struct sbx_provider_option *sbx_provider_option(const struct sbx_provider_info *p,
                                                      const char *key)
{
    for (size_t i = 0; key && i < p->n_options; i++)
        if (strcmp(p->options[i].key, key) == 0)
            return &p->options[i];
    return NULL;
}

/* ---------------------------------------------------------------------------------------------
 * One value */

static int has_control(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return 1;
    return 0;
}

/* word is one of the '|'-separated words of list. */
static int one_of(const char *list, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = list; p && *p;) {
        size_t len = strcspn(p, "|");
        if (len == n && strncmp(p, word, n) == 0)
            return 1;
        p += len + (p[len] == '|');
    }
    return 0;
}

/* "a|b|c" as "a, b, c" into buf. */
static void choices_text(const char *list, char *buf, size_t size)
{
    size_t k = 0;
    for (const char *p = list; *p && k + 3 < size; p++) {
        if (*p == '|') {
            buf[k++] = ',';
            buf[k++] = ' ';
        } else {
            buf[k++] = *p;
        }
    }
    buf[k] = '\0';
}

static int parse_size(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || s[0] == '-' || s[0] == '+' || s[0] == ' ')
        return -1;
    unsigned long long mul = 1;
    if (*end == 'k' || *end == 'K')
        mul = 1024ull, end++;
    else if (*end == 'm' || *end == 'M')
        mul = 1024ull * 1024, end++;
    else if (*end == 'g' || *end == 'G')
        mul = 1024ull * 1024 * 1024, end++;
    if (*end || v > UINT64_MAX / mul || v > (unsigned long long)LLONG_MAX / mul)
        return -1;
    *out = v * mul;
    return 0;
}

static void bounds(const struct sbx_provider_option *o, long long *lo, long long *hi)
{
    *lo = o->min || o->max ? o->min : 1;
    *hi = o->min || o->max ? o->max : LLONG_MAX;
    if (o->type == SBX_OPTION_PORT) {
        *lo = 1;
        *hi = 65535;
    }
}

static int integer_value(const struct sbx_provider_option *o, const char *name, long long v,
                         const char *text, json_t **out, struct sbx_error *err)
{
    long long lo, hi;
    bounds(o, &lo, &hi);
    if (v >= lo && v <= hi) {
        *out = json_integer(v);
        return 0;
    }
    char shown[32];
    if (!text)
        snprintf(shown, sizeof(shown), "%lld", v);
    text = text ? text : shown;
    if (o->type == SBX_OPTION_PORT)
        return sbx_error_set(err, SBX_E_INVAL, 0, "%s wants a port number, not '%s'", name, text);
    if (lo == 1 && hi == LLONG_MAX)
        return sbx_error_set(err, SBX_E_INVAL, 0, "%s wants a positive count, not '%s'", name,
                             text);
    return sbx_error_set(err, SBX_E_INVAL, 0, "%s wants a whole number from %lld to %lld, not '%s'",
                         name, lo, hi, text);
}

/* "16M", "16T": bytes with the largest suffix that divides them. */
static void size_text(long long v, char *buf, size_t size)
{
    static const char *const suffix[] = {"", "K", "M", "G", "T"};
    int k = 0;
    while (k < 4 && v >= 1024 && v % 1024 == 0) {
        v /= 1024;
        k++;
    }
    snprintf(buf, size, "%lld%s", v, suffix[k]);
}

/* A size within the option's bounds (min and max; both 0: any). */
static int size_value(const struct sbx_provider_option *o, const char *name, long long v,
                      const char *text, json_t **out, struct sbx_error *err)
{
    if ((!o->min && !o->max) || (v >= o->min && v <= o->max)) {
        *out = json_integer(v);
        return 0;
    }
    char lo[32], hi[32], shown[32];
    size_text(o->min, lo, sizeof(lo));
    size_text(o->max, hi, sizeof(hi));
    if (!text)
        snprintf(shown, sizeof(shown), "%lld", v);
    return sbx_error_set(err, SBX_E_INVAL, 0, "%s wants a size from %s to %s%s, not '%s'", name, lo,
                         hi, o->flags & SBX_OPTION_NONE_OK ? " (or 'none')" : "",
                         text ? text : shown);
}

static int cpus_value(const struct sbx_provider_option *o, const char *name, double d,
                      const char *text, json_t **out, struct sbx_error *err)
{
    if (d > 0 && d <= 4096) {
        *out = json_real(d);
        return 0;
    }
    char shown[32];
    if (!text)
        snprintf(shown, sizeof(shown), "%g", d);
    return sbx_error_set(err, SBX_E_INVAL, 0, "%s wants a number of CPUs such as 1.5%s, not '%s'",
                         name, o->flags & SBX_OPTION_NONE_OK ? " (or none)" : "",
                         text ? text : shown);
}

static int secret_text(const char *name, const char *text, json_t **out, struct sbx_error *err)
{
    if (strncmp(text, "env:", 4) == 0 && text[4] && !(text[4] >= '0' && text[4] <= '9') &&
        strspn(text + 4, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") ==
                strlen(text + 4)) {
        *out = json_pack("{s:s}", "env", text + 4);
        return 0;
    }
    if (strncmp(text, "file:/", 6) == 0 && !has_control(text)) {
        *out = json_pack("{s:s}", "file", text + 5);
        return 0;
    }
    /* Never repeated: it may be the secret itself. */
    return sbx_error_set(err, SBX_E_INVAL, 0,
                         "%s wants a reference, env:VARIABLE or file:/PATH, never the secret "
                         "itself",
                         name);
}

/* text as o's type; name says who is speaking ("--memory", "option 'memory'"). */
static int parse_text(const struct sbx_provider_option *o, const char *name, const char *text,
                      json_t **out, struct sbx_error *err)
{
    char *end;
    if (o->type == SBX_OPTION_SECRET)
        return secret_text(name, text, out, err);
    if (has_control(text))
        return sbx_error_set(err, SBX_E_INVAL, 0, "%s must not contain control characters", name);
    if ((o->flags & SBX_OPTION_NONE_OK) && strcmp(text, "none") == 0) {
        *out = sbx_json_str("none");
        return 0;
    }
    switch (o->type) {
    case SBX_OPTION_STRING:
        if (!text[0])
            return sbx_error_set(err, SBX_E_INVAL, 0, "%s wants a value, not ''", name);
        *out = sbx_json_str(text);
        return 0;
    case SBX_OPTION_PATH:
        if (text[0] != '/')
            return sbx_error_set(err, SBX_E_INVAL, 0, "%s wants an absolute path, not '%s'", name,
                                 text);
        *out = sbx_json_str(text);
        return 0;
    case SBX_OPTION_CHOICE:
        if (!one_of(o->arg, text)) {
            char list[256];
            choices_text(o->arg, list, sizeof(list));
            return sbx_error_set(err, SBX_E_INVAL, 0, "unknown %s '%s' (%s)", o->key, text, list);
        }
        *out = sbx_json_str(text);
        return 0;
    case SBX_OPTION_BOOL:
        if (one_of("true|yes|on|1", text) || one_of("false|no|off|0", text)) {
            *out = json_boolean(one_of("true|yes|on|1", text));
            return 0;
        }
        return sbx_error_set(err, SBX_E_INVAL, 0, "%s wants true or false, not '%s'", name, text);
    case SBX_OPTION_INTEGER:
    case SBX_OPTION_PORT: {
        errno = 0;
        long long v = strtoll(text, &end, 10);
        if (errno || end == text || *end || text[0] == ' ' || text[0] == '+')
            v = LLONG_MIN;
        return integer_value(o, name, v, text, out, err);
    }
    case SBX_OPTION_SIZE: {
        uint64_t v = 0;
        if (parse_size(text, &v) == 0 && v > 0)
            return size_value(o, name, (long long)v, text, out, err);
        return sbx_error_set(err, SBX_E_INVAL, 0, "%s wants a size such as 512M%s, not '%s'", name,
                             o->flags & SBX_OPTION_NONE_OK ? ", or 'none'" : "", text);
    }
    case SBX_OPTION_CPUS: {
        if ((o->flags & SBX_OPTION_NONE_OK) && strcmp(text, "0") == 0) {
            *out = sbx_json_str("none");
            return 0;
        }
        double d = strtod(text, &end);
        if (*end || end == text || !isfinite(d))
            d = -1;
        return cpus_value(o, name, d, text, out, err);
    }
    case SBX_OPTION_SECRET:
        break;
    }
    return sbx_error_set(err, SBX_E_INVAL, 0, "%s has an unknown type", name);
}

int sbx_provider_option_parse(const struct sbx_provider_option *o, const char *text, json_t **out,
                              struct sbx_error *err)
{
    char name[96];
    snprintf(name, sizeof(name), "--%s", o->flag ? o->flag : o->key);
    return parse_text(o, name, text ? text : "", out, err);
}

static const char *type_phrase(const struct sbx_provider_option *o)
{
    switch (o->type) {
    case SBX_OPTION_BOOL:
        return "true or false";
    case SBX_OPTION_INTEGER:
        return "a whole number";
    case SBX_OPTION_SIZE:
        return "a size such as 512M";
    case SBX_OPTION_CPUS:
        return "a number of CPUs such as 1.5";
    case SBX_OPTION_PORT:
        return "a port number";
    case SBX_OPTION_SECRET:
        return "a reference, {env: VARIABLE} or {file: /PATH}";
    case SBX_OPTION_STRING:
    case SBX_OPTION_PATH:
    case SBX_OPTION_CHOICE:
        break;
    }
    return "a string";
}

static int secret_json(const char *name, const json_t *v, json_t **out, struct sbx_error *err)
{
    const char *env = json_string_value(json_object_get(v, "env"));
    const char *file = json_string_value(json_object_get(v, "file"));
    if (json_is_object(v) && json_object_size(v) == 1 && (env || file)) {
        char *text = sbx_xasprintf("%s:%s", env ? "env" : "file", env ? env : file);
        int rc = secret_text(name, text, out, err);
        free(text);
        return rc;
    }
    return sbx_error_set(err, SBX_E_INVAL, 0,
                         "%s wants a reference, {env: VARIABLE} or {file: /PATH}, never the "
                         "secret itself",
                         name);
}

/* One JSON value (not a list) of o into its canonical form. */
static int check_one(const struct sbx_provider_option *o, const char *name, const json_t *v,
                     json_t **out, struct sbx_error *err)
{
    if (o->type == SBX_OPTION_SECRET)
        return secret_json(name, v, out, err);
    if (json_is_string(v))
        return parse_text(o, name, json_string_value(v), out, err);
    if (o->type == SBX_OPTION_BOOL && json_is_boolean(v)) {
        *out = json_incref((json_t *)v);
        return 0;
    }
    if ((o->type == SBX_OPTION_INTEGER || o->type == SBX_OPTION_PORT) && json_is_integer(v))
        return integer_value(o, name, json_integer_value(v), NULL, out, err);
    if (o->type == SBX_OPTION_SIZE && json_is_integer(v) && json_integer_value(v) > 0)
        return size_value(o, name, json_integer_value(v), NULL, out, err);
    if (o->type == SBX_OPTION_CPUS && json_is_number(v))
        return cpus_value(o, name, json_number_value(v), NULL, out, err);
    return sbx_error_set(err, SBX_E_INVAL, 0, "%s wants %s, not %s %s", name, type_phrase(o),
                         json_is_integer(v) || json_is_array(v) || json_is_object(v) ? "an" : "a",
                         sbx_json_typename(v));
}

static int check_value(const struct sbx_provider_option *o, const json_t *v, json_t **out,
                       struct sbx_error *err)
{
    char name[96];
    snprintf(name, sizeof(name), "option '%s'", o->key);
    if (!(o->flags & SBX_OPTION_LIST))
        return check_one(o, name, v, out, err);
    if (!json_is_array(v)) { /* one value: a list of one */
        json_t *one = NULL;
        int rc = check_one(o, name, v, &one, err);
        if (rc == 0)
            *out = json_pack("[o]", one);
        return rc;
    }
    if (json_array_size(v) > LIST_MAX)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "%s has more than %d values", name, LIST_MAX);
    json_t *list = json_array(), *item;
    size_t i;
    json_array_foreach(v, i, item)
    {
        json_t *one = NULL;
        int rc = check_one(o, name, item, &one, err);
        if (rc < 0) {
            json_decref(list);
            return rc;
        }
        sbx_json_append(list, one);
    }
    *out = list;
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * A set of options */

/* Edit distance of a and b, bounded: anything above 3 is 4. */
static int distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64 || (la > lb ? la - lb : lb - la) > 3)
        return 4;
    int row[65];
    for (size_t j = 0; j <= lb; j++)
        row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb] > 4 ? 4 : row[lb];
}

/* The declared key closest to key (its flag spelled as a key, a close spelling), or NULL. */
static const char *near_key(const struct sbx_provider_info *p, const char *key)
{
    const char *best = NULL;
    int best_d = 3;
    for (size_t i = 0; i < p->n_options; i++) {
        const struct sbx_provider_option *o = &p->options[i];
        char flag[96];
        snprintf(flag, sizeof(flag), "%s", o->flag ? o->flag : "");
        for (char *c = flag; *c; c++)
            *c = *c == '-' ? '_' : *c;
        if (strcmp(flag, key) == 0 || strcmp(o->flag ? o->flag : "", key) == 0)
            return o->key;
        int d = distance(o->key, key);
        if (d < best_d && (size_t)d * 3 <= strlen(key) + 2) {
            best = o->key;
            best_d = d;
        }
    }
    return best;
}

static int unknown_key(const struct sbx_provider_info *p, const char *key, struct sbx_error *err)
{
    const char *near = near_key(p, key);
    if (near)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "provider '%s' has no option '%s' (did you mean '%s'?)", p->name, key,
                             near);
    return sbx_error_set(err, SBX_E_INVAL, 0, "provider '%s' has no option '%s'%s", p->name, key,
                         p->n_options ? "" : " (it has none)");
}

/* options checked against d's declarations into canonical *out (caller owns). */
static int canonical(const struct sbx__provider_def *d, const json_t *options, json_t **out,
                     struct sbx_error *err)
{
    struct sbx_provider_info p;
    const char *key;
    json_t *v;
    info_of(d, &p);
    if (options && !json_is_object(options))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "the options of provider '%s' must be an object, not %s", d->name,
                             sbx_json_typename(options));
    json_t *canon = json_object();
    json_object_foreach((json_t *)options, key, v)
    {
        const struct sbx_provider_option *o = sbx_provider_option(&p, key);
        json_t *c = NULL;
        int rc = o ? check_value(o, v, &c, err) : unknown_key(&p, key, err);
        if (rc < 0) {
            json_decref(canon);
            return rc;
        }
        sbx_json_set(canon, key, c);
    }
    *out = canon;
    return 0;
}

int sbx_provider_options_check(const char *provider, const json_t *options, json_t **out,
                               struct sbx_error *err)
{
    const struct sbx__provider_def *d = sbx__provider_def(provider);
    json_t *canon = NULL;
    if (!d)
        return sbx_provider_find(provider, NULL, err);
    int rc = canonical(d, options, &canon, err);
    if (rc == 0 && d->options_check)
        rc = d->options_check(canon, err);
    if (rc == 0 && out)
        *out = json_incref(canon);
    json_decref(canon);
    return rc;
}

int sbx_client_new_json(const char *provider, const json_t *options, struct sbx_client **out,
                        struct sbx_error *err)
{
    const struct sbx__provider_def *d = sbx__provider_def(provider);
    json_t *canon = NULL;
    if (!d)
        return sbx_provider_find(provider, NULL, err);
    int rc = canonical(d, options, &canon, err);
    if (rc == 0)
        rc = d->client_new_json(canon, out, err);
    json_decref(canon);
    return rc;
}

int sbx_provider_probe(const char *provider, json_t **out, struct sbx_error *err)
{
    const struct sbx__provider_def *d = sbx__provider_def(provider);
    if (!d)
        return sbx_provider_find(provider, NULL, err);
    if (!(d->traits & SBX_PROVIDER_LISTS))
        return sbx_error_set(err, SBX_E_NOTFOUND, 0,
                             "provider '%s' does not find its sandboxes unconfigured", d->name);
    if (d->probe)
        return d->probe(out, err);
    *out = json_object();
    return 0;
}

json_t *sbx_provider_describe(const struct sbx_provider_info *p)
{
    static const char *const types[] = {"string", "bool",   "integer", "size",  "cpus",
                                        "path",   "choice", "port",    "secret"};
    json_t *traits = json_array(), *opts = json_array();
    for (size_t i = 0; i < SBX_ARRAY_LEN(trait_names); i++)
        if (p->traits & (1u << i))
            sbx_json_append(traits, sbx_json_str(trait_names[i]));
    for (size_t i = 0; i < p->n_options; i++) {
        const struct sbx_provider_option *o = &p->options[i];
        json_t *j = json_pack("{s:s, s:s, s:s?, s:s?, s:s?, s:b, s:b, s:b, s:b}", "key", o->key,
                              "type", (size_t)o->type < SBX_ARRAY_LEN(types) ? types[o->type] : "?",
                              "arg", o->arg, "help", o->help, "flag", o->flag, "list",
                              (o->flags & SBX_OPTION_LIST) != 0, "locator",
                              (o->flags & SBX_OPTION_LOCATOR) != 0, "state",
                              (o->flags & SBX_OPTION_STATE) != 0, "trusted",
                              (o->flags & SBX_OPTION_TRUSTED) != 0);
        sbx_json_append(opts, j);
    }
    json_t *d = json_pack("{s:s, s:s, s:b, s:o, s:o}", "name", p->name, "summary", p->summary,
                          "default", strcmp(p->name, sbx__providers[0]->name) == 0, "traits",
                          traits, "options", opts);
    /* What it refuses to mount, and why: the declared reason users read at the refusal. */
    if (p->unmountable) {
        json_t *kinds = json_array();
        for (int t = 0; t < 32; t++)
            if ((p->unmountable & (1u << t)) && sbx_entry_type_is_mount((enum sbx_entry_type)t))
                sbx_json_append(kinds, sbx_json_str(sbx_entry_type_name((enum sbx_entry_type)t)));
        sbx_json_set(d, "unmountable",
                     json_pack("{s:o, s:s}", "types", kinds, "why",
                               p->unmountable_why ? p->unmountable_why : ""));
    }
    return d;
}

int sbx_provider_secret(const json_t *ref, const char *what, struct sbx_secret **out,
                        struct sbx_error *err)
{
    const char *env = json_string_value(json_object_get(ref, "env"));
    const char *file = json_string_value(json_object_get(ref, "file"));
    if (env) {
        const char *v = getenv(env);
        if (!v)
            return sbx_error_set(err, SBX_E_NOTFOUND, 0, "%s: variable '%s' is not set", what, env);
        if (strlen(v) > SECRET_MAX)
            return sbx_error_set(err, SBX_E_TOOBIG, 0, "%s: variable '%s' is over %zu bytes", what,
                                 env, SECRET_MAX);
        *out = sbx_secret_new(what, v, strlen(v));
        return 0;
    }
    if (!file || file[0] != '/')
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "%s wants a reference, {env: VARIABLE} or {file: /PATH}", what);
    struct sbx_buf b;
    sbx_buf_init(&b, SECRET_MAX);
    int rc = sbx_fs_read_path(file, SECRET_MAX, &b, err);
    if (rc < 0) {
        sbx_error_prefix(err, "%s", what);
    } else {
        size_t n = b.len;
        if (n && b.data[n - 1] == '\n')
            n--;
        *out = sbx_secret_new(what, b.data, n);
    }
    /* The buffer held the value: wiped before it goes. */
    if (b.data)
        memset(b.data, 0, b.len);
    sbx_buf_release(&b);
    return rc;
}

int sbx__option_pairs(const json_t *list, const char *what, json_t **out, struct sbx_error *err)
{
    json_t *o = json_object(), *v;
    size_t i;
    json_array_foreach(list, i, v)
    {
        const char *s = json_string_value(v);
        const char *eq = s ? strchr(s, '=') : NULL;
        if (!eq || eq == s) {
            json_decref(o);
            return sbx_error_set(err, SBX_E_INVAL, 0, "%s wants KEY=VALUE, not '%s'", what,
                                 s ? s : "");
        }
        char *k = sbx_xstrndup(s, (size_t)(eq - s));
        sbx_json_set(o, k, sbx_json_str(eq + 1));
        free(k);
    }
    *out = o;
    return 0;
}
