/* Agent files: YAML or JSON documents describing an agent and the agents it refers to. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "agent/agent-internal.h"
#include "agent/guard.h"
#include "agent/mcp.h"
#include "core/grow.h"
#include "sbx/fs.h"
#include "sbx/hash.h"
#include "sbx/json.h"
#include "sbx/prompt.h"
#include "sbx/provider.h"
#include "sbx/runner.h"
#include "sbx/yaml.h"

#define MAX_FILES 64
#define FILE_MAX  ((size_t)4 << 20)

struct loaded {
    char *path;   /* canonical */
    char *digest; /* "sha256:<hex>" of the bytes read */
    struct sbx_agent *agent;
};

/* A tool an agent file defined: the file that defines it and the tool (a reference). */
struct own_tool {
    char *file;
    char *what; /* "tool 'x'", or the guardrail or hook a command belongs to */
    struct sbx_tool *tool;
    struct sbx__file_tool *ft;
};

struct sbx_agent_file {
    struct loaded *v;
    size_t n;
    struct sbx_agent *top;
    struct own_tool *tools;
    size_t ntools, atools;
    struct sbx__mcp_server **mcp; /* every agent's MCP servers (references) */
    size_t nmcp, amcp;
    struct sbx_tool **hosted; /* every agent's hosted MCP servers (references) */
    size_t nhosted, ahosted;
};

static const char *const keys[] = {
        "name",
        "model",
        "instructions",
        "prompt",
        "model_settings",
        "tools",
        "handoffs",
        "agents_as_tools",
        "output_schema",
        "handoff_description",
        "tool_choice",
        "tool_use_behavior",
        "manifest",
        "default_manifest",
        "capabilities",
        "run_as",
        "base_instructions",
        "needs_approval",
        "sandbox",
        "mcp_servers",
        "mcp_config",
        "input_guardrails",
        "output_guardrails",
        "hooks",
        "tool_guardrails",
        NULL,
};

static char *relative_to(const char *file, const char *ref)
{
    if (ref[0] == '/')
        return sbx_xstrdup(ref);
    const char *slash = strrchr(file, '/');
    if (!slash)
        return sbx_xstrdup(ref);
    return sbx_xasprintf("%.*s/%s", (int)(slash - file), file, ref);
}

static int load(struct sbx_agent_file *f, const char *path, struct sbx_agent **out,
                struct sbx_error *err);

static int set_tool_use(struct sbx_agent *a, const json_t *v, struct sbx_error *err)
{
    const char *s = json_string_value(v);
    if (s && strcmp(s, "run_llm_again") == 0) {
        sbx_agent_set_tool_use(a, SBX_TOOL_USE_RUN_AGAIN, NULL);
        return 0;
    }
    if (s && strcmp(s, "stop_on_first_tool") == 0) {
        sbx_agent_set_tool_use(a, SBX_TOOL_USE_STOP_ON_FIRST, NULL);
        return 0;
    }
    json_t *names = json_object_get(v, "stop_at_tool_names");
    if (json_is_array(names) && json_object_size(v) == 1) {
        struct sbx_strv sv;
        size_t i;
        json_t *n;
        sbx_strv_init(&sv);
        json_array_foreach(names, i, n)
        {
            if (!json_is_string(n)) {
                sbx_strv_release(&sv);
                return sbx_error_set(err, SBX_E_INVAL, 0,
                                     "field 'tool_use_behavior': tool names must be strings");
            }
            sbx_strv_push(&sv, json_string_value(n));
        }
        sbx_agent_set_tool_use(a, SBX_TOOL_USE_STOP_AT_NAMES, (const char *const *)sv.v);
        sbx_strv_release(&sv);
        return 0;
    }
    return sbx_error_set(err, SBX_E_INVAL, 0,
                         "field 'tool_use_behavior' must be \"run_llm_again\", "
                         "\"stop_on_first_tool\" or {\"stop_at_tool_names\": [...]}");
}

static int add_agent_tool(struct sbx_agent_file *f, struct sbx_agent *a, const char *path,
                          const json_t *v, struct sbx_error *err)
{
    static const char *const akeys[] = {"file", "name", "description", "max_turns", NULL};
    const char *file = json_string_value(v), *name = NULL, *desc = NULL;
    int64_t max_turns = 0;
    int rc = 0;
    struct sbx_agent *target = NULL;
    struct sbx_tool *t = NULL;
    if (!file) {
        if (!json_is_object(v))
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "field 'agents_as_tools': each entry must be a file name or "
                                 "an object");
        if ((rc = sbx_json_check_keys(v, akeys, err)) < 0 ||
            (rc = sbx_json_get_string(v, "file", 1, &file, err)) < 0 ||
            (rc = sbx_json_get_string(v, "name", 0, &name, err)) < 0 ||
            (rc = sbx_json_get_string(v, "description", 0, &desc, err)) < 0 ||
            (rc = sbx_json_get_int(v, "max_turns", 0, &max_turns, err)) < 0) {
            sbx_error_prefix(err, "field 'agents_as_tools'");
            return rc;
        }
        if (max_turns < 0 || max_turns > 1000)
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "field 'agents_as_tools': max_turns must be 0 to 1000");
    }
    char *ref = relative_to(path, file);
    rc = load(f, ref, &target, err);
    free(ref);
    if (rc < 0)
        return rc;
    rc = sbx_tool_new_agent(target, name, desc, (int)max_turns, &t, err);
    if (rc == 0)
        rc = sbx_agent_add_tool(a, t, err);
    sbx_tool_unref(t);
    return rc;
}

/* The sandbox section: which provider makes the agent's sandboxes (provider; the default
 * one when absent) and that provider's declared options (sbx/provider.h), checked by the same
 * table as sbx_client_new_json. The options a provider marks trusted (host paths, weaker
 * isolation, extra privileges) are the command line's only. sbx run's options override the
 * section. */
static int sandbox_section(const json_t *sec, struct sbx_error *err)
{
    struct sbx_provider_info p;
    const json_t *pv = json_object_get(sec, "provider");
    const char *k;
    json_t *v;
    if (!json_is_object(sec))
        return sbx_error_set(err, SBX_E_INVAL, 0, "field 'sandbox' must be an object");
    if (pv && !json_is_string(pv))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "field 'sandbox': key 'provider' must be a provider's name");
    int rc = sbx_provider_find(json_string_value(pv), &p, err);
    json_t *opts = rc == 0 ? json_deep_copy(sec) : NULL;
    if (opts)
        json_object_del(opts, "provider");
    json_object_foreach(opts, k, v)
    {
        const struct sbx_provider_option *o = sbx_provider_option(&p, k);
        if (o && (o->flags & SBX_OPTION_TRUSTED)) {
            rc = sbx_error_set(err, SBX_E_PERM, 0,
                               "key '%s' of provider '%s' is trusted host configuration: give it "
                               "on the command line (%s%s%s)",
                               k, p.name, o->flag ? "--" : "-o ", o->flag ? o->flag : k,
                               o->flag ? "" : "=VALUE");
            break;
        }
    }
    if (rc == 0)
        rc = sbx_provider_options_check(p.name, opts, NULL, err);
    json_decref(opts);
    if (rc < 0)
        sbx_error_prefix(err, "field 'sandbox'");
    return rc;
}

/* Check the shape of the sandbox fields and anchor a manifest path at the agent file. */
static int sandbox_fields(json_t *spec, const char *path, struct sbx_error *err)
{
    json_t *m = json_object_get(spec, "manifest");
    json_t *caps = json_object_get(spec, "capabilities");
    json_t *v;
    size_t i;
    if (m && !json_is_string(m) && !json_is_object(m))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "field 'manifest' must be a file name or a manifest document");
    if (caps && !json_is_array(caps))
        return sbx_error_set(err, SBX_E_INVAL, 0, "field 'capabilities' must be a list");
    json_array_foreach(caps, i, v)
    {
        if (!json_is_string(v) && !json_is_string(json_object_get(v, "type")))
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "field 'capabilities': entry %zu must be a name or an object "
                                 "with a 'type'",
                                 i);
    }
    if ((v = json_object_get(spec, "run_as")) && !json_is_string(v))
        return sbx_error_set(err, SBX_E_INVAL, 0, "field 'run_as' must be a user name");
    if ((v = json_object_get(spec, "base_instructions")) && !json_is_string(v))
        return sbx_error_set(err, SBX_E_INVAL, 0, "field 'base_instructions' must be a string");
    int rc;
    if ((v = json_object_get(spec, "sandbox")) && (rc = sandbox_section(v, err)) < 0)
        return rc;
    if (json_is_string(m)) {
        char *mp = relative_to(path, json_string_value(m));
        sbx_json_set(spec, "manifest", sbx_json_str(mp));
        free(mp);
    }
    char *dir = relative_to(path, ".");
    sbx_json_set(spec, "base_dir", sbx_json_str(dir));
    sbx_json_set(spec, "agent_file", sbx_json_str(path));
    free(dir);
    return 0;
}

/* The agent's own settings: model, instructions, handoff description, tool choice, model
 * settings, output schema, tool-use behaviour, approvals. */
static int configure_settings(struct sbx_agent *a, const json_t *doc, struct sbx_error *err)
{
    const char *s = NULL;
    json_t *v = NULL;
    int rc;
    if ((rc = sbx_json_get_string(doc, "model", 0, &s, err)) < 0)
        return rc;
    sbx_agent_set_model(a, s);
    s = NULL;
    if ((rc = sbx_json_get_string(doc, "instructions", 0, &s, err)) < 0)
        return rc;
    sbx_agent_set_instructions(a, s);
    if ((v = json_object_get(doc, "prompt")) && (rc = sbx_agent_set_prompt(a, v, err)) < 0)
        return rc;
    v = NULL;
    s = NULL;
    if ((rc = sbx_json_get_string(doc, "handoff_description", 0, &s, err)) < 0)
        return rc;
    sbx_agent_set_handoff_description(a, s);
    s = NULL;
    if ((rc = sbx_json_get_string(doc, "tool_choice", 0, &s, err)) < 0)
        return rc;
    sbx_agent_set_tool_choice(a, s);
    if ((rc = sbx_json_get_object(doc, "model_settings", 0, &v, err)) < 0 ||
        (rc = sbx_agent_set_model_settings(a, v, err)) < 0)
        return rc;
    v = NULL;
    if ((rc = sbx_json_get_object(doc, "output_schema", 0, &v, err)) < 0 ||
        (v && (rc = sbx_agent_set_output_schema(a, v, err)) < 0))
        return rc;
    if ((v = json_object_get(doc, "tool_use_behavior")) && (rc = set_tool_use(a, v, err)) < 0)
        return rc;
    if ((v = json_object_get(doc, "needs_approval")) &&
        (rc = sbx_agent_set_needs_approval(a, v, err)) < 0)
        return rc;
    return 0;
}

/* A tools-list mapping: the file's own tool (file-tools.c), or {builtin: NAME}; either may
 * carry tool guardrails (guard-load.c). */
static int object_tool(const char *path, struct sbx_agent *a, const json_t *e, struct sbx_tool **t,
                       struct sbx__file_tool **ft, struct sbx_error *err)
{
    json_t *rest = NULL;
    const json_t *b = json_object_get(e, "builtin");
    const char *name = json_string_value(b ? b : json_object_get(e, "name"));
    int rc = sbx__guards_load_tool(path, e, name ? name : "", &a->guards, &rest, err);
    if (rc < 0)
        return rc;
    if (!b)
        rc = sbx__file_tool_new(path, rest, t, ft, err);
    else if (!json_is_string(b) || json_object_size(rest) != 1)
        rc = sbx_error_set(err, SBX_E_INVAL, 0,
                           "a {builtin: NAME} entry takes only tool_input_guardrails and "
                           "tool_output_guardrails besides");
    else
        rc = sbx_tool_builtin(name, t, err);
    json_decref(rest);
    return rc;
}

/* "tools": built-in tool names, and the file's own tools (objects: file-tools.c). *sandboxed
 * is set when one of them runs in the agent's sandbox. */
static int configure_tools(struct sbx_agent_file *f, struct sbx_agent *a, const char *path,
                           const json_t *doc, int *sandboxed, struct sbx_error *err)
{
    json_t *v = NULL, *e;
    size_t i;
    int rc = sbx_json_get_array(doc, "tools", 0, &v, err);
    if (rc < 0)
        return rc;
    json_array_foreach(v, i, e)
    {
        struct sbx_tool *t = NULL;
        struct sbx__file_tool *ft = NULL;
        const char *type = json_string_value(json_object_get(e, "type"));
        if (json_is_object(e) && type && strcmp(type, "mcp") == 0)
            rc = sbx__hosted_mcp_new(e, &t, err);
        else if (json_is_object(e))
            rc = object_tool(path, a, e, &t, &ft, err);
        else if (json_is_string(e))
            rc = sbx_tool_builtin(json_string_value(e), &t, err);
        else
            rc = sbx_error_set(
                    err, SBX_E_INVAL, 0,
                    "entry %zu must be a built-in tool's name or a tool definition "
                    "{name, description, parameters, command | host_command | http} or a hosted MCP "
                    "server {type: mcp, server_label, server_url}",
                    i);
        if (rc == 0)
            rc = sbx_agent_add_tool(a, t, err);
        if (rc == 0 && ft) {
            SBX_ALLOC_GROW(f->tools, f->ntools + 1, f->atools);
            f->tools[f->ntools++] = (struct own_tool){sbx_xstrdup(path),
                                                      sbx_xasprintf("tool '%s'", sbx_tool_name(t)),
                                                      sbx_tool_ref(t), ft};
            *sandboxed |= sbx__file_tool_in_sandbox(ft);
        }
        if (rc == 0 && sbx__hosted_mcp_is(t)) {
            SBX_ALLOC_GROW(f->hosted, f->nhosted + 1, f->ahosted);
            f->hosted[f->nhosted++] = sbx_tool_ref(t);
        }
        sbx_tool_unref(t);
        if (rc < 0) {
            sbx_error_prefix(err, "field 'tools'");
            return rc;
        }
    }
    return 0;
}

/* mcp_config: {include_server_in_tool_names, convert_schemas_to_strict} (the SDK's). */
static int mcp_config(const json_t *doc, int *prefix, int *strict, struct sbx_error *err)
{
    static const char *const ckeys[] = {"include_server_in_tool_names", "convert_schemas_to_strict",
                                        NULL};
    json_t *c = NULL;
    int rc = sbx_json_get_object(doc, "mcp_config", 0, &c, err);
    if (rc == 0 && c &&
        ((rc = sbx_json_check_keys(c, ckeys, err)) < 0 ||
         (rc = sbx_json_get_bool(c, "include_server_in_tool_names", 0, prefix, err)) < 0 ||
         (rc = sbx_json_get_bool(c, "convert_schemas_to_strict", 0, strict, err)) < 0))
        sbx_error_prefix(err, "field 'mcp_config'");
    return rc;
}

/* "mcp_servers": the agent's MCP servers (mcp.c). *sandboxed is set when one of them starts in
 * the agent's sandbox. */
static int configure_mcp(struct sbx_agent_file *f, struct sbx_agent *a, const char *path,
                         const json_t *doc, int *sandboxed, struct sbx_error *err)
{
    json_t *v = NULL, *e;
    size_t i;
    int prefix = 0, strict = 1;
    int rc = sbx_json_get_array(doc, "mcp_servers", 0, &v, err);
    if (rc == 0)
        rc = mcp_config(doc, &prefix, &strict, err);
    if (rc < 0)
        return rc;
    json_array_foreach(v, i, e)
    {
        struct sbx__mcp_server *s = NULL;
        if ((rc = sbx__mcp_server_new(path, e, prefix, strict, &s, err)) == 0) {
            for (size_t k = 0; k < a->nmcp; k++)
                if (strcmp(sbx__mcp_server_name(a->mcp[k]), sbx__mcp_server_name(s)) == 0)
                    rc = sbx_error_set(err, SBX_E_EXISTS, 0, "MCP server '%s' is named twice",
                                       sbx__mcp_server_name(s));
        }
        if (rc < 0) {
            sbx__mcp_server_unref(s);
            if (!json_is_object(e))
                sbx_error_prefix(err, "entry %zu", i);
            sbx_error_prefix(err, "field 'mcp_servers'");
            return rc;
        }
        *sandboxed |= sbx__mcp_server_in_sandbox(s);
        SBX_ALLOC_GROW(f->mcp, f->nmcp + 1, f->amcp);
        f->mcp[f->nmcp++] = sbx__mcp_server_ref(s);
        sbx__agent_add_mcp(a, s);
    }
    return 0;
}

/* "handoffs" and "agents_as_tools": the agent files they name, loaded once (relative to
 * path's directory). */
static int configure_agents(struct sbx_agent_file *f, struct sbx_agent *a, const char *path,
                            const json_t *doc, struct sbx_error *err)
{
    json_t *v = NULL, *e;
    size_t i;
    int rc = sbx_json_get_array(doc, "handoffs", 0, &v, err);
    if (rc < 0)
        return rc;
    json_array_foreach(v, i, e)
    {
        struct sbx_agent *target = NULL;
        if (!json_is_string(e))
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "field 'handoffs': entry %zu must be a file name", i);
        char *ref = relative_to(path, json_string_value(e));
        rc = load(f, ref, &target, err);
        free(ref);
        if (rc == 0)
            rc = sbx_agent_add_handoff(a, target, err);
        if (rc < 0)
            return rc;
    }
    v = NULL;
    if ((rc = sbx_json_get_array(doc, "agents_as_tools", 0, &v, err)) < 0)
        return rc;
    json_array_foreach(v, i, e)
    {
        if ((rc = add_agent_tool(f, a, path, e, err)) < 0)
            return rc;
    }
    return 0;
}

/* The sandbox fields, kept as the agent's sandbox spec for the sandbox layer. An agent whose own
 * tools run in its sandbox (sandboxed) is a sandbox agent without sandbox fields too. */
static int configure_sandbox(struct sbx_agent *a, const char *path, const json_t *doc,
                             int sandboxed, struct sbx_error *err)
{
    static const char *const sandbox_keys[] = {"manifest", "capabilities", "run_as",
                                               "base_instructions", "sandbox"};
    json_t *spec = NULL;
    int rc;
    /* The SDK's field name; one agent must not say it twice. */
    json_t *dm = json_object_get(doc, "default_manifest");
    if (dm && json_object_get(doc, "manifest"))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "fields 'manifest' and 'default_manifest' are the same field: "
                             "give one");
    for (size_t i = 0; i < SBX_ARRAY_LEN(sandbox_keys); i++) {
        json_t *sv = json_object_get(doc, sandbox_keys[i]);
        if (!sv && i == 0)
            sv = dm;
        if (!sv)
            continue;
        if (!spec)
            spec = json_object();
        sbx_json_set(spec, sandbox_keys[i], json_incref(sv));
    }
    if (!spec && sandboxed)
        spec = json_object();
    if (spec && (rc = sandbox_fields(spec, path, err)) < 0) {
        json_decref(spec);
        return rc;
    }
    sbx_agent_set_sandbox_spec(a, spec);
    json_decref(spec);
    return 0;
}

/* The guardrails' and hooks' commands are the file's own tools for host-tool permission and
 * secrets, and one in the sandbox makes the agent a sandbox agent. */
static void guard_commands(struct sbx_agent_file *f, struct sbx_agent *a, const char *path,
                           int *sandboxed)
{
    struct sbx_tool *t;
    struct sbx__file_tool *ft;
    const char *label;
    for (size_t i = 0; sbx__guards_command(a->guards, i, &t, &ft, &label); i++) {
        SBX_ALLOC_GROW(f->tools, f->ntools + 1, f->atools);
        f->tools[f->ntools++] =
                (struct own_tool){sbx_xstrdup(path), sbx_xstrdup(label), sbx_tool_ref(t), ft};
        *sandboxed |= sbx__file_tool_in_sandbox(ft);
    }
}

static int configure(struct sbx_agent_file *f, struct sbx_agent *a, const char *path,
                     const json_t *doc, struct sbx_error *err)
{
    int rc, sandboxed = 0;
    if ((rc = configure_settings(a, doc, err)) < 0 ||
        (rc = sbx__guards_load(path, doc, &a->guards, err)) < 0 ||
        (rc = configure_tools(f, a, path, doc, &sandboxed, err)) < 0 ||
        (rc = configure_mcp(f, a, path, doc, &sandboxed, err)) < 0 ||
        (rc = configure_agents(f, a, path, doc, err)) < 0)
        return rc;
    guard_commands(f, a, path, &sandboxed);
    return configure_sandbox(a, path, doc, sandboxed, err);
}

static int load(struct sbx_agent_file *f, const char *path, struct sbx_agent **out,
                struct sbx_error *err)
{
    char canon[PATH_MAX];
    json_t *doc = NULL;
    struct sbx_agent *a = NULL;
    const char *name = NULL;
    struct sbx_buf text;
    uint8_t d[SBX_SHA256_LEN];
    char digest[8 + SBX_SHA256_HEX_LEN];
    int rc = 0;
    sbx_buf_init(&text, SBX_BUF_NOLIMIT);
    if (!realpath(path, canon))
        return sbx_error_errno(err, errno, "cannot open agent file '%s'", path);
    for (size_t i = 0; i < f->n; i++) {
        if (strcmp(f->v[i].path, canon) == 0) {
            *out = f->v[i].agent;
            return 0;
        }
    }
    if (f->n >= MAX_FILES)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "more than %d agent files", MAX_FILES);
    /* Parse the very bytes that are hashed, so the digest names what was loaded. */
    struct sbx_yaml_limits lim = {.max_bytes = FILE_MAX};
    if ((rc = sbx_fs_read_path(canon, FILE_MAX, &text, err)) < 0 ||
        (rc = sbx_sha256(text.data, text.len, d, err)) < 0)
        goto out;
    memcpy(digest, "sha256:", 7);
    sbx_hex(d, sizeof(d), digest + 7);
    rc = sbx_doc_parse(path, text.data, text.len, &lim, &doc, err);
    if (rc < 0)
        goto out;
    if (!json_is_object(doc)) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "an agent file must hold a mapping");
        goto fail;
    }
    if ((rc = sbx_json_check_keys(doc, keys, err)) < 0 ||
        (rc = sbx_json_get_string(doc, "name", 1, &name, err)) < 0 ||
        (rc = sbx_agent_new(name, &a, err)) < 0)
        goto fail;
    /* Register before following references, so files that refer to each other terminate. */
    f->v = sbx_xrealloc(f->v, (f->n + 1) * sizeof(*f->v));
    f->v[f->n].path = sbx_xstrdup(canon);
    f->v[f->n].digest = sbx_xstrdup(digest);
    f->v[f->n].agent = a;
    f->n++;
    sbx__agent_set_source(a, canon, digest);
    rc = configure(f, a, path, doc, err);
    if (rc < 0)
        goto fail;
    *out = a;
    goto out;
fail:
    sbx_error_prefix(err, "agent file '%s'", path);
out:
    sbx_buf_release(&text);
    json_decref(doc);
    return rc;
}

int sbx_agent_file_load(const char *path, struct sbx_agent_file **out, struct sbx_error *err)
{
    struct sbx_agent_file *f = sbx_xcalloc(1, sizeof(*f));
    int rc = load(f, path, &f->top, err);
    if (rc < 0) {
        sbx_agent_file_free(f);
        return rc;
    }
    *out = f;
    return 0;
}

struct sbx_agent *sbx_agent_file_agent(const struct sbx_agent_file *f)
{
    return f->top;
}

json_t *sbx_agent_file_sources(const struct sbx_agent_file *f)
{
    json_t *a = json_array();
    for (size_t i = 0; i < f->n; i++)
        sbx_json_append(a, json_pack("{s:s, s:s}", "path", f->v[i].path, "digest", f->v[i].digest));
    return a;
}

json_t *sbx_agent_file_host_tools(const struct sbx_agent_file *f)
{
    json_t *a = json_array();
    for (size_t i = 0; i < f->ntools; i++) {
        const char *prog = sbx__file_tool_host_program(f->tools[i].ft);
        if (prog)
            sbx_json_append(a, json_pack("{s:s, s:s, s:s, s:s}", "file", f->tools[i].file, "tool",
                                         sbx_tool_name(f->tools[i].tool), "what", f->tools[i].what,
                                         "program", prog));
    }
    for (size_t i = 0; i < f->nmcp; i++) {
        const char *prog = sbx__mcp_server_host_program(f->mcp[i]);
        if (!prog)
            continue;
        char *what = sbx_xasprintf("MCP server '%s'", sbx__mcp_server_name(f->mcp[i]));
        sbx_json_append(a, json_pack("{s:s, s:s, s:s, s:s, s:b}", "file", f->mcp[i]->file, "tool",
                                     sbx__mcp_server_name(f->mcp[i]), "what", what, "program", prog,
                                     "mcp", 1));
        free(what);
    }
    return a;
}

void sbx_agent_file_allow_host_tools(struct sbx_agent_file *f)
{
    for (size_t i = 0; i < f->ntools; i++)
        sbx__file_tool_allow(f->tools[i].ft);
    for (size_t i = 0; i < f->nmcp; i++)
        sbx__mcp_server_allow(f->mcp[i]);
}

json_t *sbx_agent_file_mcp_describe(struct sbx_agent_file *f)
{
    json_t *out = json_array();
    for (size_t i = 0; i < f->n; i++) {
        struct sbx_agent *a = f->v[i].agent;
        for (size_t k = 0; k < a->nmcp; k++) {
            struct sbx__mcp_server *s = a->mcp[k];
            struct sbx_error err = SBX_ERROR_INIT;
            struct sbx__mcp_turn turn = {0};
            json_t *d = NULL;
            if (sbx__mcp_server_in_sandbox(s))
                sbx_error_set(&err, SBX_E_UNSUPPORTED, 0,
                              "it starts in the agent's sandbox: 'sbx run' lists its tools (the "
                              "mcp_tools span of --trace)");
            else
                sbx__mcp_server_describe(s, &turn, &d, &err);
            if (!d) {
                d = json_pack("{s:s, s:s, s:s}", "name", sbx__mcp_server_name(s), "transport",
                              sbx__mcp_server_transport(s), "error", err.msg);
            }
            sbx_json_set(d, "agent", sbx_json_str(sbx_agent_name(a)));
            sbx_json_append(out, d);
        }
    }
    return out;
}

void sbx_agent_file_secret_values(const struct sbx_agent_file *f, struct sbx_strv *out)
{
    for (size_t i = 0; i < f->ntools; i++)
        sbx__file_tool_secrets(f->tools[i].ft, out);
    for (size_t i = 0; i < f->nmcp; i++)
        sbx__mcp_server_secrets(f->mcp[i], out);
    for (size_t i = 0; i < f->nhosted; i++)
        sbx__hosted_mcp_secrets(f->hosted[i], out);
}

void sbx_agent_file_free(struct sbx_agent_file *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < f->ntools; i++) {
        free(f->tools[i].file);
        free(f->tools[i].what);
        sbx_tool_unref(f->tools[i].tool);
    }
    free(f->tools);
    for (size_t i = 0; i < f->nmcp; i++)
        sbx__mcp_server_unref(f->mcp[i]);
    free(f->mcp);
    for (size_t i = 0; i < f->nhosted; i++)
        sbx_tool_unref(f->hosted[i]);
    free(f->hosted);
    for (size_t i = 0; i < f->n; i++) {
        sbx_agent_free(f->v[i].agent);
        free(f->v[i].path);
        free(f->v[i].digest);
    }
    free(f->v);
    free(f);
}
