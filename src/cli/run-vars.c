/* `sbx run`'s variables and trace identity (run-vars.h). */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/run-vars.h"
#include "sbx/json.h"
#include "sbx/prompt.h"
#include "sbx/yaml.h"

extern char **environ;

#define ENV_PREFIX "SBX_VAR_"

void cli_vars_init(struct cli_vars *v)
{
    *v = (struct cli_vars){.given = json_object(), .secret = json_object()};
}

void cli_vars_release(struct cli_vars *v)
{
    const char *k;
    json_t *val;
    /* The secret values were copied into values: wipe them before they go. */
    json_object_foreach(v->values ? v->secret : NULL, k, val)
    {
        json_t *s = json_object_get(v->values, k);
        if (json_is_string(s))
            explicit_bzero((char *)json_string_value(s), json_string_length(s));
    }
    json_decref(v->given);
    json_decref(v->secret);
    json_decref(v->metadata);
    json_decref(v->saved);
    json_decref(v->saved_secret);
    json_decref(v->values);
    json_decref(v->from);
}

static int has_control(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return 1;
    return 0;
}

/* "NAME=VALUE" split at the first '='; NULL when there is none. */
static const char *split(const char *arg, char *name, size_t size)
{
    const char *eq = strchr(arg, '=');
    if (!eq || (size_t)(eq - arg) >= size)
        return NULL;
    memcpy(name, arg, (size_t)(eq - arg));
    name[eq - arg] = 0;
    return eq + 1;
}

static int var_option(struct cli_vars *v, const char *opt, const char *arg)
{
    char name[SBX_VAR_NAME_MAX + 1];
    const char *val = split(arg, name, sizeof(name));
    if (!val || !sbx_var_name_ok(name))
        return cli_usage("run ",
                         "--%s wants NAME=%s, NAME a letter or '_' then letters, digits and "
                         "'_' (at most %d), not '%s'",
                         opt, strcmp(opt, "var") == 0 ? "VALUE" : "env:VARIABLE", SBX_VAR_NAME_MAX,
                         arg);
    if (json_object_get(v->given, name) || json_object_get(v->secret, name))
        return cli_usage("run ", "variable '%s' is given twice", name);
    if (json_object_size(v->given) + json_object_size(v->secret) >= SBX_VARS_MAX)
        return cli_usage("run ", "more than %d variables", SBX_VARS_MAX);
    if (strcmp(opt, "var") == 0) {
        if (strlen(val) > SBX_VAR_VALUE_MAX)
            return cli_usage("run ", "variable '%s': the value passes %zu bytes", name,
                             SBX_VAR_VALUE_MAX);
        sbx_json_set(v->given, name, sbx_json_str(val));
        return 1;
    }
    if (strncmp(val, "env:", 4) != 0 || !val[4])
        return cli_usage("run ",
                         "--var-secret wants NAME=env:VARIABLE (the value is read from the "
                         "environment variable, and never saved), not '%s'",
                         arg);
    sbx_json_set(v->secret, name, sbx_json_str(val + 4));
    return 1;
}

static int trace_text(const char *opt, const char *arg)
{
    if (!arg[0] || strlen(arg) > CLI_TRACE_VALUE_MAX || has_control(arg))
        return cli_usage("run ", "--%s wants 1 to %d bytes of text without control characters", opt,
                         CLI_TRACE_VALUE_MAX);
    return 1;
}

static int metadata_option(struct cli_vars *v, const char *arg)
{
    char key[CLI_TRACE_KEY_MAX + 1];
    const char *val = split(arg, key, sizeof(key));
    if (!val || !key[0] || has_control(key))
        return cli_usage("run ", "--trace-metadata wants KEY=VALUE, KEY 1 to %d bytes, not '%s'",
                         CLI_TRACE_KEY_MAX, arg);
    if (strlen(val) > CLI_TRACE_VALUE_MAX || has_control(val))
        return cli_usage("run ",
                         "--trace-metadata '%s': the value must be at most %d bytes without "
                         "control characters",
                         key, CLI_TRACE_VALUE_MAX);
    if (!v->metadata)
        v->metadata = json_object();
    if (json_object_get(v->metadata, key))
        return cli_usage("run ", "--trace-metadata '%s' is given twice", key);
    if (json_object_size(v->metadata) >= CLI_TRACE_METADATA_MAX)
        return cli_usage("run ", "at most %d --trace-metadata entries", CLI_TRACE_METADATA_MAX);
    sbx_json_set(v->metadata, key, sbx_json_str(val));
    return 1;
}

int cli_vars_option(struct cli_vars *v, const char *name, const char *arg)
{
    int rc;
    if (strcmp(name, "var") == 0 || strcmp(name, "var-secret") == 0)
        return var_option(v, name, arg);
    if (strcmp(name, "vars-file") == 0) {
        if (v->file)
            return cli_usage("run ", "--vars-file is given twice");
        v->file = arg;
        return 1;
    }
    if (strcmp(name, "trace-metadata") == 0)
        return metadata_option(v, arg);
    if (strcmp(name, "workflow") == 0 || strcmp(name, "group-id") == 0) {
        if ((rc = trace_text(name, arg)) != 1)
            return rc;
        *(name[0] == 'w' ? &v->workflow : &v->group_id) = arg;
        return 1;
    }
    return 0;
}

void cli_vars_resume(struct cli_vars *v, const json_t *cli)
{
    const char *s;
    json_t *m;
    if (!v->workflow && (s = json_string_value(json_object_get(cli, "workflow"))))
        v->workflow = s;
    if (!v->group_id && (s = json_string_value(json_object_get(cli, "group_id"))))
        v->group_id = s;
    if (!v->metadata && json_is_object(m = json_object_get(cli, "trace_metadata")))
        v->metadata = json_deep_copy(m);
    if (json_is_object(m = json_object_get(cli, "variables")))
        v->saved = json_deep_copy(m);
    if (json_is_array(m = json_object_get(cli, "secret_variables")))
        v->saved_secret = json_deep_copy(m);
}

/* Add every name of src not in v->values, noting where it came from. */
static void merge(struct cli_vars *v, const json_t *src, const char *from)
{
    const char *k;
    json_t *val;
    json_object_foreach((json_t *)src, k, val)
    {
        if (json_object_get(v->values, k) || !json_is_string(val))
            continue;
        sbx_json_set(v->values, k, json_incref(val));
        sbx_json_set(v->from, k, sbx_json_str(from));
    }
}

/* A --vars-file: a mapping of names to text (numbers and booleans as they are written). */
static int read_file(const char *path, json_t **out, struct sbx_error *err)
{
    struct sbx_yaml_limits lim = {.max_bytes = CLI_VARS_FILE_MAX};
    json_t *doc = NULL, *val, *res;
    const char *k;
    int rc = sbx_doc_load_file(path, &lim, &doc, err);
    if (rc < 0)
        return rc;
    if (!json_is_object(doc)) {
        json_decref(doc);
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "--vars-file '%s' must hold a mapping of names to values", path);
    }
    res = json_object();
    json_object_foreach(doc, k, val)
    {
        char *text = json_is_string(val) ? NULL : sbx_json_dumps(val, SBX_JSON_COMPACT);
        if (!sbx_var_name_ok(k))
            rc = sbx_error_set(err, SBX_E_INVAL, 0,
                               "--vars-file '%s': '%s' is not a variable's name (a letter or "
                               "'_', then letters, digits and '_')",
                               path, k);
        else if (!json_is_string(val) && !json_is_number(val) && !json_is_boolean(val))
            rc = sbx_error_set(err, SBX_E_INVAL, 0,
                               "--vars-file '%s': variable '%s' must be text, not %s", path, k,
                               sbx_json_typename(val));
        else if ((text ? strlen(text) : json_string_length(val)) > SBX_VAR_VALUE_MAX)
            rc = sbx_error_set(err, SBX_E_TOOBIG, 0,
                               "--vars-file '%s': variable '%s' passes %zu bytes", path, k,
                               SBX_VAR_VALUE_MAX);
        else if (json_object_size(res) >= SBX_VARS_MAX)
            rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "--vars-file '%s': more than %d variables",
                               path, SBX_VARS_MAX);
        else
            sbx_json_set(res, k, text ? sbx_json_str(text) : json_incref(val));
        free(text);
        if (rc < 0)
            break;
    }
    json_decref(doc);
    if (rc < 0) {
        json_decref(res);
        return rc;
    }
    *out = res;
    return 0;
}

/* SBX_VAR_<NAME> of the environment. */
static json_t *env_vars(void)
{
    json_t *o = json_object();
    size_t plen = strlen(ENV_PREFIX);
    for (char **e = environ; e && *e; e++) {
        char name[SBX_VAR_NAME_MAX + 1];
        if (strncmp(*e, ENV_PREFIX, plen) != 0)
            continue;
        const char *val = split(*e + plen, name, sizeof(name));
        if (!val || !sbx_var_name_ok(name) || strlen(val) > SBX_VAR_VALUE_MAX) {
            cli_printf_safe(stderr, CLI_SAFE_ALWAYS,
                            "sbx: warning: environment variable '%.*s' is not used: after "
                            "SBX_VAR_ comes a variable's name, and its value is at most %zu "
                            "bytes\n",
                            (int)strcspn(*e, "="), *e, SBX_VAR_VALUE_MAX);
            continue;
        }
        if (json_object_size(o) < SBX_VARS_MAX)
            sbx_json_set(o, name, sbx_json_str(val));
    }
    return o;
}

static int gather(struct cli_vars *v, struct sbx_error *err)
{
    const char *k;
    json_t *val, *file = NULL, *secrets = json_object();
    json_object_foreach(v->secret, k, val)
    {
        const char *s = getenv(json_string_value(val));
        if (!s) {
            json_decref(secrets);
            return sbx_error_set(err, SBX_E_NOTFOUND, 0,
                                 "--var-secret '%s': environment variable '%s' is not set", k,
                                 json_string_value(val));
        }
        sbx_json_set(secrets, k, sbx_json_str(s));
    }
    if (v->file && read_file(v->file, &file, err) < 0) {
        json_decref(secrets);
        return -err->code;
    }
    json_t *env = env_vars();
    v->values = json_object();
    v->from = json_object();
    merge(v, v->given, "--var");
    merge(v, secrets, "--var-secret");
    if (file)
        merge(v, file, "--vars-file");
    merge(v, env, "environment");
    if (v->saved)
        merge(v, v->saved, "saved run");
    json_decref(secrets);
    json_decref(file);
    json_decref(env);
    if (json_object_size(v->values) > SBX_VARS_MAX)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "more than %d variables", SBX_VARS_MAX);
    return 0;
}

struct fill {
    struct cli_vars *v;
    json_t *used;
    int chat;
};

static int fill_agent(struct sbx_agent *a, void *data, struct sbx_error *err)
{
    struct fill *f = data;
    if (f->chat && sbx_agent_prompt(a))
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "agent '%s' names a stored prompt ('prompt'), which only the "
                             "Responses API has: run it with --api responses",
                             sbx_agent_name(a));
    int rc = sbx_agent_fill_variables(a, f->v->values, f->used, err);
    if (rc < 0 && err->code == SBX_E_NOTFOUND) {
        const char *k;
        json_t *n;
        size_t i;
        /* Which name: the message's own quotes hold it. */
        json_array_foreach(f->v->saved_secret, i, n)
        {
            k = json_string_value(n);
            char want[SBX_VAR_NAME_MAX + 16];
            snprintf(want, sizeof(want), "variable '%s'", k ? k : "");
            if (!k || !strstr(err->msg, want))
                continue;
            char msg[sizeof(err->msg)];
            memcpy(msg, err->msg, sizeof(msg));
            return sbx_error_set(err, SBX_E_NOTFOUND, 0,
                                 "%s: it was a --var-secret of the saved run, and secret values "
                                 "are never saved: give --var-secret %s=env:NAME again",
                                 msg, k);
        }
        size_t len = strlen(err->msg);
        snprintf(err->msg + len, sizeof(err->msg) - len,
                 " (give --var NAME=VALUE, --vars-file FILE or SBX_VAR_NAME)");
    }
    return rc;
}

int cli_vars_apply(struct cli_vars *v, struct sbx_agent *start, int chat, struct sbx_error *err)
{
    int rc = gather(v, err);
    if (rc < 0)
        return rc;
    struct fill f = {v, json_object(), chat};
    rc = sbx_agent_walk(start, fill_agent, &f, err);
    const char *k;
    json_t *val;
    json_object_foreach(rc == 0 ? v->values : NULL, k, val)
    {
        const char *from = json_string_value(json_object_get(v->from, k));
        if (!json_object_get(f.used, k) && strcmp(from, "saved run") != 0)
            cli_printf_safe(stderr, CLI_SAFE_ALWAYS,
                            "sbx: warning: variable '%s' (%s) is used by no agent's "
                            "instructions or prompt\n",
                            k, from);
    }
    json_decref(f.used);
    return rc;
}

void cli_vars_secrets(const struct cli_vars *v, struct sbx_strv *out)
{
    const char *k;
    json_t *val;
    json_object_foreach(v->secret, k, val)
    {
        const char *s = json_string_value(json_object_get(v->values, k));
        if (s && s[0] && sbx_strv_find(out, s) < 0)
            sbx_strv_push(out, s);
    }
}

void cli_vars_meta(const struct cli_vars *v, json_t *cli)
{
    json_t *vars = json_object(), *secret = json_array(), *val;
    const char *k;
    json_object_foreach(v->values, k, val)
    {
        if (json_object_get(v->secret, k))
            sbx_json_append(secret, sbx_json_str(k));
        else
            sbx_json_set(vars, k, json_incref(val));
    }
    sbx_json_set(cli, "variables", vars);
    sbx_json_set(cli, "secret_variables", secret);
    sbx_json_set(cli, "workflow", v->workflow ? sbx_json_str(v->workflow) : json_null());
    sbx_json_set(cli, "group_id", v->group_id ? sbx_json_str(v->group_id) : json_null());
    sbx_json_set(cli, "trace_metadata", v->metadata ? json_deep_copy(v->metadata) : json_null());
}

static int trace_text_ok(const json_t *v, size_t max)
{
    const char *s = json_string_value(v);
    return s && s[0] && strlen(s) <= max && !has_control(s);
}

void cli_vars_from_sdk_trace(const json_t *trace, json_t *cli)
{
    static const char *const fields[][2] = {{"workflow_name", "workflow"},
                                            {"group_id", "group_id"}};
    const json_t *md = json_object_get(trace, "metadata");
    const char *k;
    json_t *v, *out = json_object();
    for (size_t i = 0; json_is_object(trace) && i < SBX_ARRAY_LEN(fields); i++) {
        v = json_object_get(trace, fields[i][0]);
        if (trace_text_ok(v, CLI_TRACE_VALUE_MAX))
            sbx_json_set(cli, fields[i][1], json_incref(v));
        else if (v && !json_is_null(v))
            fprintf(stderr,
                    "sbx: warning: the run state's trace %s is not imported: it must be 1 "
                    "to %d bytes of text without control characters\n",
                    fields[i][0], CLI_TRACE_VALUE_MAX);
    }
    json_object_foreach((json_t *)(json_is_object(md) ? md : NULL), k, v)
    {
        if (json_object_size(out) < CLI_TRACE_METADATA_MAX && k[0] &&
            strlen(k) <= CLI_TRACE_KEY_MAX && !has_control(k) &&
            (trace_text_ok(v, CLI_TRACE_VALUE_MAX) ||
             (json_is_string(v) && !json_string_length(v))))
            sbx_json_set(out, k, json_incref(v));
        else
            cli_printf_safe(stderr, CLI_SAFE_ALWAYS,
                            "sbx: warning: the run state's trace metadata '%s' is not imported "
                            "(sbx keeps at most %d entries of text, keys up to %d bytes, values "
                            "up to %d)\n",
                            k, CLI_TRACE_METADATA_MAX, CLI_TRACE_KEY_MAX, CLI_TRACE_VALUE_MAX);
    }
    if (json_object_size(out))
        sbx_json_set(cli, "trace_metadata", out);
    else
        json_decref(out);
}
