/* Agents: a plain description the runner reads. */
#include <fnmatch.h>
#include <string.h>

#include "agent/agent-internal.h"
#include "agent/guard.h"
#include "agent/mcp.h"
#include "agent/schema.h"
#include "sbx/json.h"
#include "sbx/model.h"
#include "sbx/path.h"

int sbx_agent_new(const char *name, struct sbx_agent **out, struct sbx_error *err)
{
    if (!name || !name[0] || strlen(name) > 128)
        return sbx_error_set(err, SBX_E_INVAL, 0, "agent name must be 1 to 128 bytes");
    if (sbx_text_has_control(name, strlen(name)))
        return sbx_error_set(err, SBX_E_INVAL, 0, "agent name must not contain control characters");
    struct sbx_agent *a = sbx_xcalloc(1, sizeof(*a));
    a->name = sbx_xstrdup(name);
    a->reset_tool_choice = 1;
    sbx_strv_init(&a->stop_at);
    *out = a;
    return 0;
}

void sbx_agent_free(struct sbx_agent *a)
{
    if (!a)
        return;
    for (size_t i = 0; i < a->ntools; i++)
        sbx_tool_unref(a->tools[i]);
    free(a->tools);
    for (size_t i = 0; i < a->nmcp; i++)
        sbx__mcp_server_unref(a->mcp[i]);
    free(a->mcp);
    free(a->handoffs);
    free(a->name);
    free(a->instructions);
    free(a->model);
    free(a->handoff_description);
    free(a->tool_choice);
    json_decref(a->settings);
    json_decref(a->output_schema);
    json_decref(a->sandbox_spec);
    json_decref(a->needs_approval);
    json_decref(a->prompt);
    free(a->source_file);
    free(a->source_digest);
    sbx__guards_free(a->guards);
    sbx_strv_release(&a->stop_at);
    free(a);
}

void sbx__agent_add_mcp(struct sbx_agent *a, struct sbx__mcp_server *s)
{
    a->mcp = sbx_xrealloc(a->mcp, (a->nmcp + 1) * sizeof(*a->mcp));
    a->mcp[a->nmcp++] = s;
}

const char *sbx_agent_name(const struct sbx_agent *a)
{
    return a->name;
}

const char *sbx_agent_instructions(const struct sbx_agent *a)
{
    return a->instructions;
}

const char *sbx_agent_model(const struct sbx_agent *a)
{
    return a->model;
}

const json_t *sbx_agent_model_settings(const struct sbx_agent *a)
{
    return a->settings;
}

static void set_str(char **dst, const char *s)
{
    free(*dst);
    *dst = s ? sbx_xstrdup(s) : NULL;
}

void sbx_agent_set_instructions(struct sbx_agent *a, const char *instructions)
{
    set_str(&a->instructions, instructions);
}

void sbx_agent_set_model(struct sbx_agent *a, const char *model)
{
    set_str(&a->model, model);
}

void sbx_agent_set_handoff_description(struct sbx_agent *a, const char *text)
{
    set_str(&a->handoff_description, text);
}

int sbx_agent_set_model_settings(struct sbx_agent *a, const json_t *settings, struct sbx_error *err)
{
    if (settings && !json_is_object(settings))
        return sbx_error_set(err, SBX_E_INVAL, 0, "model settings of agent '%s' must be an object",
                             a->name);
    int rc = sbx_model_settings_check(settings, err);
    if (rc < 0) {
        sbx_error_prefix(err, "agent '%s'", a->name);
        return rc;
    }
    json_decref(a->settings);
    a->settings = settings ? json_deep_copy(settings) : NULL;
    return 0;
}

static int name_taken(const struct sbx_agent *a, const char *name)
{
    for (size_t i = 0; i < a->ntools; i++)
        if (strcmp(a->tools[i]->name, name) == 0)
            return 1;
    for (size_t i = 0; i < a->nhandoffs; i++) {
        char *h = sbx__agent_handoff_tool_name(a->handoffs[i]);
        int same = strcmp(h, name) == 0;
        free(h);
        if (same)
            return 1;
    }
    return 0;
}

int sbx_agent_add_tool(struct sbx_agent *a, struct sbx_tool *t, struct sbx_error *err)
{
    if (name_taken(a, t->name))
        return sbx_error_set(err, SBX_E_EXISTS, 0, "agent '%s' already has a tool named '%s'",
                             a->name, t->name);
    a->tools = sbx_xrealloc(a->tools, (a->ntools + 1) * sizeof(*a->tools));
    a->tools[a->ntools++] = sbx_tool_ref(t);
    return 0;
}

char *sbx__agent_handoff_tool_name(const struct sbx_agent *target)
{
    char *safe = sbx__tool_safe_name(target->name, 1);
    char *name = sbx_xasprintf("transfer_to_%s", safe);
    free(safe);
    if (strlen(name) > 64)
        name[64] = '\0';
    return name;
}

int sbx_agent_add_handoff(struct sbx_agent *a, struct sbx_agent *target, struct sbx_error *err)
{
    char *name = sbx__agent_handoff_tool_name(target);
    int taken = name_taken(a, name);
    int rc = 0;
    if (taken)
        rc = sbx_error_set(err, SBX_E_EXISTS, 0, "agent '%s' already has a tool named '%s'",
                           a->name, name);
    free(name);
    if (rc < 0)
        return rc;
    a->handoffs = sbx_xrealloc(a->handoffs, (a->nhandoffs + 1) * sizeof(*a->handoffs));
    a->handoffs[a->nhandoffs++] = target;
    return 0;
}

int sbx_agent_set_output_schema(struct sbx_agent *a, const json_t *schema, struct sbx_error *err)
{
    json_t *strict = NULL, *src = NULL;
    int wrapped = 0;
    if (!schema) {
        json_decref(a->output_schema);
        a->output_schema = NULL;
        return 0;
    }
    if (!json_is_object(schema))
        return sbx_error_set(err, SBX_E_INVAL, 0, "output schema of agent '%s' must be an object",
                             a->name);
    const char *type = json_string_value(json_object_get(schema, "type"));
    if (type && strcmp(type, "object") == 0) {
        src = json_incref((json_t *)schema);
    } else {
        src = json_pack("{s:s, s:{s:O}}", "type", "object", "properties", "response", schema);
        wrapped = 1;
    }
    int rc = sbx__schema_strict(src, &strict, err);
    json_decref(src);
    if (rc < 0) {
        sbx_error_prefix(err, "output schema of agent '%s'", a->name);
        return rc;
    }
    json_decref(a->output_schema);
    a->output_schema = strict;
    a->output_wrapped = wrapped;
    return 0;
}

void sbx_agent_set_tool_use(struct sbx_agent *a, enum sbx_tool_use use, const char *const *names)
{
    a->tool_use = use;
    sbx_strv_release(&a->stop_at);
    if (names)
        sbx_strv_pushv(&a->stop_at, names);
}

void sbx_agent_set_tool_choice(struct sbx_agent *a, const char *choice)
{
    set_str(&a->tool_choice, choice);
}

void sbx_agent_set_reset_tool_choice(struct sbx_agent *a, int reset)
{
    a->reset_tool_choice = reset;
}

void sbx_agent_set_sandbox_spec(struct sbx_agent *a, const json_t *spec)
{
    json_decref(a->sandbox_spec);
    a->sandbox_spec = spec ? json_deep_copy(spec) : NULL;
}

const json_t *sbx_agent_sandbox_spec(const struct sbx_agent *a)
{
    return a->sandbox_spec;
}

void sbx__agent_set_source(struct sbx_agent *a, const char *file, const char *digest)
{
    set_str(&a->source_file, file);
    set_str(&a->source_digest, digest);
}

const char *sbx_agent_source_file(const struct sbx_agent *a)
{
    return a->source_file;
}

const char *sbx_agent_source_digest(const struct sbx_agent *a)
{
    return a->source_digest;
}

/* Approval policies. */

static int check_globs(const json_t *map, size_t rule, const char *key, struct sbx_error *err)
{
    const char *arg;
    json_t *g;
    if (!json_is_object(map))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "needs_approval: rule %zu: '%s' must map argument names to globs",
                             rule, key);
    json_object_foreach((json_t *)map, arg, g)
    {
        int ok = json_is_string(g) || (json_is_array(g) && json_array_size(g) > 0);
        size_t i;
        json_t *e;
        json_array_foreach(g, i, e)
        {
            ok &= json_is_string(e);
        }
        if (!ok)
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "needs_approval: rule %zu: '%s.%s' must be a glob or a list of "
                                 "globs",
                                 rule, key, arg);
    }
    return 0;
}

static int check_rule(const json_t *r, size_t no, struct sbx_error *err)
{
    static const char *const known[] = {"tool", "when", "unless"};
    if (json_is_string(r))
        return 0;
    if (!json_is_object(r))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "needs_approval: rule %zu: must be a tool name or a mapping with "
                             "'tool'",
                             no);
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)r, k, v)
    {
        int ok = 0;
        for (size_t i = 0; i < SBX_ARRAY_LEN(known); i++)
            ok |= strcmp(k, known[i]) == 0;
        if (!ok)
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "needs_approval: rule %zu: unknown key '%s' (known: tool, when, "
                                 "unless)",
                                 no, k);
    }
    if (!json_is_string(json_object_get(r, "tool")))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "needs_approval: rule %zu: 'tool' must be a tool name or glob", no);
    int rc = 0;
    if ((v = json_object_get(r, "when")) && (rc = check_globs(v, no, "when", err)) < 0)
        return rc;
    if ((v = json_object_get(r, "unless")) && (rc = check_globs(v, no, "unless", err)) < 0)
        return rc;
    return 0;
}

int sbx_agent_set_needs_approval(struct sbx_agent *a, const json_t *policy, struct sbx_error *err)
{
    if (policy && !json_is_boolean(policy) && !json_is_array(policy))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "needs_approval: must be true, false or a list of rules");
    size_t i;
    json_t *r;
    json_array_foreach(policy, i, r)
    {
        int rc = check_rule(r, i + 1, err);
        if (rc < 0)
            return rc;
    }
    json_decref(a->needs_approval);
    a->needs_approval = policy && !json_is_false(policy) ? json_deep_copy(policy) : NULL;
    return 0;
}

const json_t *sbx_agent_needs_approval(const struct sbx_agent *a)
{
    return a->needs_approval;
}

static int glob_one(const json_t *globs, const char *text)
{
    if (json_is_string(globs))
        return fnmatch(json_string_value(globs), text, 0) == 0;
    size_t i;
    json_t *g;
    json_array_foreach(globs, i, g)
    {
        if (json_is_string(g) && fnmatch(json_string_value(g), text, 0) == 0)
            return 1;
    }
    return 0;
}

static int text_matches(const json_t *globs, const json_t *v)
{
    if (json_is_string(v))
        return glob_one(globs, json_string_value(v));
    char *s = sbx_json_dumps(v, SBX_JSON_COMPACT);
    int m = glob_one(globs, s);
    free(s);
    return m;
}

static int value_matches(const json_t *globs, const json_t *v)
{
    if (!json_is_array(v))
        return text_matches(globs, v);
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e)
    {
        if (text_matches(globs, e))
            return 1;
    }
    return 0;
}

/* A shell other than a POSIX one reads "cmd" its own way: no command of it is simple. */
static int posix_shell(const json_t *args)
{
    static const char *const shells[] = {"sh", "bash", "dash", "ash", "ksh", "mksh", "zsh"};
    const json_t *sh = json_object_get(args, "shell");
    if (!sh || json_is_null(sh))
        return 1;
    const char *s = json_string_value(sh), *base = s ? strrchr(s, '/') : NULL;
    base = base ? base + 1 : s;
    for (size_t i = 0; base && i < SBX_ARRAY_LEN(shells); i++)
        if (strcmp(base, shells[i]) == 0)
            return 1;
    return 0;
}

/* A command rule (argument "cmd"): the globs see a simple command's words joined by one
 * space; a command that is not simple matches a `when` and never an `unless`. */
static int command_matches(const json_t *globs, const json_t *args, int when)
{
    char *words = NULL;
    if (!posix_shell(args) ||
        !sbx_approval_command(json_string_value(json_object_get(args, "cmd")), &words))
        return when;
    int m = glob_one(globs, words);
    free(words);
    return m;
}

/* Every argument listed in map is present and matches one of its globs. */
static int all_match(const json_t *map, const json_t *args, int when)
{
    const char *k;
    json_t *g;
    json_object_foreach((json_t *)map, k, g)
    {
        json_t *v = json_is_object(args) ? json_object_get(args, k) : NULL;
        if (v && json_is_string(v) && strcmp(k, "cmd") == 0) {
            if (!command_matches(g, args, when))
                return 0;
            continue;
        }
        if (!v || !value_matches(g, v))
            return 0;
    }
    return 1;
}

int sbx_approval_policy_match(const json_t *policy, const char *tool, const json_t *args)
{
    if (json_is_true(policy))
        return 1;
    size_t i;
    json_t *r;
    json_array_foreach(policy, i, r)
    {
        if (json_is_string(r)) {
            if (tool && fnmatch(json_string_value(r), tool, 0) == 0)
                return 1;
            continue;
        }
        const char *glob = json_string_value(json_object_get(r, "tool"));
        if (!glob || !tool || fnmatch(glob, tool, 0) != 0)
            continue;
        json_t *when = json_object_get(r, "when");
        json_t *unless = json_object_get(r, "unless");
        if (when && !all_match(when, args, 1))
            continue;
        if (unless && all_match(unless, args, 0))
            continue;
        return 1;
    }
    return 0;
}

int sbx_approval_policy_covers(const json_t *policy, const char *tool)
{
    if (json_is_true(policy))
        return 1;
    size_t i;
    json_t *r;
    json_array_foreach(policy, i, r)
    {
        const char *glob = json_is_string(r) ? json_string_value(r)
                                             : json_string_value(json_object_get(r, "tool"));
        if (glob && tool && fnmatch(glob, tool, 0) == 0)
            return 1;
    }
    return 0;
}

json_t *sbx_approval_args(const json_t *item)
{
    const char *type = json_string_value(json_object_get(item, "type"));
    if (type && strcmp(type, "function_call") == 0) {
        const char *a = json_string_value(json_object_get(item, "arguments"));
        json_t *v = NULL;
        if (!a || !a[0])
            return json_object();
        struct sbx_json_limits lim = {.max_bytes = (size_t)16 << 20, .max_depth = 64};
        struct sbx_error err = SBX_ERROR_INIT;
        if (sbx_json_parse(a, strlen(a), &lim, &v, &err) < 0)
            return NULL;
        if (!json_is_object(v)) {
            json_decref(v);
            return NULL;
        }
        return v;
    }
    if (type && strcmp(type, "custom_tool_call") == 0) {
        const char *in = json_string_value(json_object_get(item, "input"));
        return json_pack("{s:s}", "input", in ? in : "");
    }
    json_t *op = json_object_get(item, "operation");
    if (type && strcmp(type, "apply_patch_call") == 0 && json_is_object(op))
        return json_deep_copy(op);
    return json_deep_copy(item);
}
