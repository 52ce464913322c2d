/* Hosted MCP servers: the Responses API's "mcp" tool, which the model's server calls itself.
 * sbx passes the tool on and answers the server's approval requests (mcp_approval_request)
 * through its approval flow with an mcp_approval_response (docs/internals/mcp.md). */
#include <stdlib.h>
#include <string.h>

#include "agent/agent-internal.h"
#include "sbx/json.h"
#include "sbx/manifest.h"

#define MAX_HEADERS 32

struct hosted {
    struct sbx_strv secret_envs; /* the variables its header secrets were read from */
};

static void hosted_free(void *p)
{
    struct hosted *h = p;
    sbx_strv_release(&h->secret_envs);
    free(h);
}

/* The server asked: the call was approved (the runner asks before it runs this). */
static int approve_fn(const struct sbx_tool_call *call, json_t **out, struct sbx_error *err)
{
    (void)err;
    *out = json_pack("{s:s, s:s, s:b}", "type", "mcp_approval_response", "approval_request_id",
                     call->call_id ? call->call_id : "", "approve", 1);
    return 0;
}

/* Every approval request needs a decision: the server asks only for the calls its
 * require_approval names. */
static int always_fn(const json_t *args, const struct sbx_tool_call *call)
{
    (void)args;
    (void)call;
    return 1;
}

static int names_ok(const json_t *v)
{
    size_t i;
    json_t *n;
    if (!json_is_array(v))
        return 0;
    json_array_foreach(v, i, n) if (!json_is_string(n) || !json_string_length(n)) return 0;
    return 1;
}

static int check_approval(const json_t *v, struct sbx_error *err)
{
    const char *k;
    json_t *x;
    const char *s = json_string_value(v);
    if (!v || (s && (strcmp(s, "always") == 0 || strcmp(s, "never") == 0)))
        return 0;
    int ok = json_is_object(v) && json_object_size(v) > 0;
    json_object_foreach((json_t *)(ok ? v : NULL), k, x)
    {
        ok &= (strcmp(k, "always") == 0 || strcmp(k, "never") == 0) && json_is_object(x) &&
              json_object_size(x) == 1 && names_ok(json_object_get(x, "tool_names"));
    }
    if (!ok)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "field 'require_approval' must be \"always\", \"never\" or "
                             "{always: {tool_names: [...]}, never: {tool_names: [...]}}");
    return 0;
}

/* Headers as the model's server sends them: text, or a secret read from the environment now. */
static int resolve_headers(const json_t *in, json_t **out, struct hosted *h, struct sbx_error *err)
{
    static const char *const skeys[] = {"type", "env", "prefix", NULL};
    const char *k;
    json_t *v;
    if (!json_is_object(in))
        return sbx_error_set(err, SBX_E_INVAL, 0, "field 'headers' must be a mapping");
    if (json_object_size(in) > MAX_HEADERS)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "field 'headers' has more than %d entries",
                             MAX_HEADERS);
    *out = json_object();
    json_object_foreach((json_t *)in, k, v)
    {
        const char *type = NULL, *env = NULL, *prefix = NULL;
        int rc = 0;
        if (json_is_string(v)) {
            sbx_json_set(*out, k, json_incref(v));
            continue;
        }
        if (!json_is_object(v) || (rc = sbx_json_check_keys(v, skeys, err)) < 0 ||
            (rc = sbx_json_get_text(v, "type", SBX_JSON_REQUIRED, &type, NULL, err)) < 0 ||
            (rc = sbx_json_get_text(v, "env", SBX_JSON_REQUIRED, &env, NULL, err)) < 0 ||
            (rc = sbx_json_get_text(v, "prefix", 0, &prefix, NULL, err)) < 0 ||
            strcmp(type, "secret") != 0) {
            if (rc == 0)
                rc = sbx_error_set(err, SBX_E_INVAL, 0,
                                   "a value must be text or {type: secret, env: VAR, prefix: "
                                   "TEXT}");
        } else if (sbx_manifest_harness_credential(env)) {
            rc = sbx_error_set(err, SBX_E_PERM, 0,
                               "'%s' is sbx's own credential: an agent file does not send it to "
                               "an MCP server",
                               env);
        } else if (!getenv(env)) {
            rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "variable '%s' is not set", env);
        }
        if (rc < 0) {
            sbx_error_prefix(err, "field 'headers': '%s'", k);
            return rc;
        }
        char *val = sbx_xasprintf("%s%s", prefix ? prefix : "", getenv(env));
        sbx_json_set(*out, k, sbx_json_str(val));
        free(val);
        sbx_strv_push(&h->secret_envs, env);
    }
    return 0;
}

static int check_url(const char *url, struct sbx_error *err)
{
    const char *rest = strncmp(url, "https://", 8) == 0  ? url + 8
                       : strncmp(url, "http://", 7) == 0 ? url + 7
                                                         : NULL;
    if (!rest || !rest[0] || rest[0] == '/' || strchr(url, ' '))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "field 'server_url': '%.200s' must be an http:// or https:// URL",
                             url);
    return 0;
}

int sbx__hosted_mcp_new(const json_t *e, struct sbx_tool **out, struct sbx_error *err)
{
    static const char *const keys[] = {
            "type",          "server_label", "server_url", "server_description", "require_approval",
            "allowed_tools", "headers",      NULL};
    const char *label = NULL, *url = NULL, *desc = NULL;
    json_t *allowed = json_object_get(e, "allowed_tools"), *headers = NULL;
    int rc;
    if ((rc = sbx_json_get_text(e, "server_label", SBX_JSON_REQUIRED | SBX_JSON_NONEMPTY, &label,
                                NULL, err)) < 0)
        return rc;
    struct hosted *h = sbx_xcalloc(1, sizeof(*h));
    sbx_strv_init(&h->secret_envs);
    json_t *def = json_pack("{s:s, s:s}", "type", "mcp", "server_label", label);
    if ((rc = sbx_json_check_keys(e, keys, err)) < 0 ||
        (rc = sbx_json_get_text(e, "server_url", SBX_JSON_REQUIRED | SBX_JSON_NONEMPTY, &url, NULL,
                                err)) < 0 ||
        (rc = check_url(url, err)) < 0 ||
        (rc = sbx_json_get_text(e, "server_description", SBX_JSON_ALLOW_CONTROL, &desc, NULL,
                                err)) < 0 ||
        (rc = check_approval(json_object_get(e, "require_approval"), err)) < 0)
        goto fail;
    if (allowed && !names_ok(allowed)) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0,
                           "field 'allowed_tools' must be a list of tool names");
        goto fail;
    }
    if (json_object_get(e, "headers") &&
        (rc = resolve_headers(json_object_get(e, "headers"), &headers, h, err)) < 0)
        goto fail;
    sbx_json_set(def, "server_url", sbx_json_str(url));
    if (desc)
        sbx_json_set(def, "server_description", sbx_json_str(desc));
    /* The Responses API asks for approval of every call unless told otherwise. */
    json_t *ra = json_object_get(e, "require_approval");
    sbx_json_set(def, "require_approval", ra ? json_deep_copy(ra) : sbx_json_str("always"));
    if (allowed)
        sbx_json_set(def, "allowed_tools", json_deep_copy(allowed));
    if (headers)
        sbx_json_set(def, "headers", json_incref(headers));
    struct sbx_item_tool spec = {
            .name = label,
            .item_type = SBX_HOSTED_MCP_ITEM,
            .definition = def,
            .fn = approve_fn,
            .data = h,
            .free_data = hosted_free,
    };
    h = NULL; /* the tool owns it, also when it fails */
    if ((rc = sbx_tool_new_item(&spec, out, err)) < 0)
        goto fail;
    (*out)->approval_fn = always_fn;
fail:
    if (rc < 0)
        sbx_error_prefix(err, "hosted MCP server '%s'", label);
    if (h)
        hosted_free(h);
    json_decref(headers);
    json_decref(def);
    return rc;
}

int sbx__hosted_mcp_is(const struct sbx_tool *t)
{
    return t->kind == SBX__TOOL_ITEM && t->item_type &&
           strcmp(t->item_type, SBX_HOSTED_MCP_ITEM) == 0;
}

void sbx__hosted_mcp_secrets(const struct sbx_tool *t, struct sbx_strv *out)
{
    const struct hosted *h = t->data;
    for (size_t i = 0; i < h->secret_envs.n; i++) {
        const char *v = getenv(h->secret_envs.v[i]);
        if (v && v[0] && sbx_strv_find(out, v) < 0)
            sbx_strv_push(out, v);
    }
}
