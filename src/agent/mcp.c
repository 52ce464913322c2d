/* MCP servers of agent files: loading an entry of "mcp_servers", making the server's tools the
 * agent's function tools, calling them (docs/internals/mcp.md). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "agent/mcp-rpc.h"
#include "agent/mcp.h"
#include "sbx/hash.h"
#include "sbx/json.h"
#include "sbx/manifest.h"
#include "sbx/runner.h"
#include "sbx/trace.h"
#include "sbx/truncate.h"

#define DEFAULT_TIMEOUT_S 60
#define MAX_TIMEOUT_S     3600
#define MAX_ARGV          256
#define MAX_HEADERS       32
#define NAME_MAX_LEN      64

/* One tool of a server, as the agent sees it. */
struct mcp_tool {
    /* Borrowed: the server holds its tools, and drops them before it goes (a run holds its
     * turn's tools only while it uses the server). */
    struct sbx__mcp_server *s;
    char *remote;     /* the tool's name on the server */
    json_t *required; /* the schema's required list (NULL: none) */
    int strict;       /* the model sends null for an optional argument left out */
};

static void free_headers(struct sbx__mcp_header *h, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(h[i].name);
        free(h[i].value);
        free(h[i].env);
        free(h[i].prefix);
    }
    free(h);
}

static void drop_tools(struct sbx__mcp_server *s)
{
    for (size_t i = 0; i < s->ntools; i++)
        sbx_tool_unref(s->tools[i]);
    free(s->tools);
    s->tools = NULL;
    s->ntools = 0;
    s->listed = 0;
}

struct sbx__mcp_server *sbx__mcp_server_ref(struct sbx__mcp_server *s)
{
    atomic_fetch_add(&s->refs, 1);
    return s;
}

void sbx__mcp_server_unref(struct sbx__mcp_server *s)
{
    if (!s || atomic_fetch_sub(&s->refs, 1) != 1)
        return;
    sbx__mcp_close(s->conn);
    drop_tools(s);
    free(s->name);
    free(s->file);
    sbx_strv_release(&s->argv);
    free_headers(s->env, s->nenv);
    free(s->cwd);
    free(s->url);
    free_headers(s->headers, s->nheaders);
    sbx_strv_release(&s->allowed_tools);
    sbx_strv_release(&s->blocked_tools);
    sbx_strv_release(&s->approve);
    sbx_strv_release(&s->never);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

/* ---- loading ----------------------------------------------------------------------------------
 */

static int var_name_ok(const char *s)
{
    if (!s || !((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || *s == '_'))
        return 0;
    for (; *s; s++)
        if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || *s == '_' ||
              (*s >= '0' && *s <= '9')))
            return 0;
    return 1;
}

static int header_name_ok(const char *s)
{
    if (!s[0])
        return 0;
    for (; *s; s++)
        if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') ||
              *s == '_' || *s == '-'))
            return 0;
    return 1;
}

/* A value: "text", or a secret by reference {type: secret, env: VAR, prefix: TEXT}. */
static int load_value(struct sbx__mcp_header *h, const json_t *v, struct sbx_error *err)
{
    static const char *const skeys[] = {"type", "env", "prefix", NULL};
    const char *type = NULL, *env = NULL, *prefix = NULL;
    int rc;
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        if (strlen(s) != json_string_length(v))
            return sbx_error_set(err, SBX_E_INVAL, 0, "the value must not contain a NUL byte");
        for (; *s; s++)
            if ((unsigned char)*s < 0x20 || *s == 0x7f)
                return sbx_error_set(err, SBX_E_INVAL, 0,
                                     "the value must not contain control characters");
        h->value = sbx_xstrdup(json_string_value(v));
        return 0;
    }
    if (!json_is_object(v))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "a value must be text or {type: secret, env: VAR, prefix: TEXT}");
    if ((rc = sbx_json_check_keys(v, skeys, err)) < 0 ||
        (rc = sbx_json_get_text(v, "type", SBX_JSON_REQUIRED, &type, NULL, err)) < 0 ||
        (rc = sbx_json_get_text(v, "env", SBX_JSON_REQUIRED, &env, NULL, err)) < 0 ||
        (rc = sbx_json_get_text(v, "prefix", 0, &prefix, NULL, err)) < 0)
        return rc;
    if (strcmp(type, "secret") != 0)
        return sbx_error_set(err, SBX_E_INVAL, 0, "type '%s' is not 'secret'", type);
    if (!var_name_ok(env))
        return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a variable name", env);
    if (sbx_manifest_harness_credential(env))
        return sbx_error_set(err, SBX_E_PERM, 0,
                             "'%s' is sbx's own credential: an agent file does not hand it to "
                             "an MCP server",
                             env);
    if (!getenv(env))
        return sbx_error_set(err, SBX_E_NOTFOUND, 0, "variable '%s' is not set", env);
    h->env = sbx_xstrdup(env);
    h->prefix = prefix ? sbx_xstrdup(prefix) : NULL;
    return 0;
}

/* "headers" (HTTP) or "env" (stdio): a mapping of names to values. */
static int load_map(const json_t *map, const char *field, int headers, struct sbx__mcp_header **out,
                    size_t *n, struct sbx_error *err)
{
    const char *k;
    json_t *v;
    if (!map)
        return 0;
    if (!json_is_object(map))
        return sbx_error_set(err, SBX_E_INVAL, 0, "field '%s' must be a mapping of names to values",
                             field);
    if (json_object_size(map) > MAX_HEADERS)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "field '%s' has more than %d entries", field,
                             MAX_HEADERS);
    *out = sbx_xcalloc(json_object_size(map) + 1, sizeof(**out));
    json_object_foreach((json_t *)map, k, v)
    {
        struct sbx__mcp_header *h = &(*out)[(*n)++];
        h->name = sbx_xstrdup(k);
        if (headers ? !header_name_ok(k) : !var_name_ok(k))
            return sbx_error_set(err, SBX_E_INVAL, 0, "field '%s': '%.80s' is not a %s name", field,
                                 k, headers ? "header" : "variable");
        if (!headers && sbx_manifest_harness_credential(k))
            return sbx_error_set(err, SBX_E_PERM, 0,
                                 "field '%s': '%s' is sbx's own credential and is not passed to "
                                 "MCP servers",
                                 field, k);
        int rc = load_value(h, v, err);
        if (rc < 0) {
            sbx_error_prefix(err, "field '%s': '%s'", field, k);
            return rc;
        }
    }
    return 0;
}

static int load_names(const json_t *e, const char *field, struct sbx_strv *out, int *present,
                      struct sbx_error *err)
{
    json_t *list = json_object_get(e, field), *v;
    size_t i;
    if (!list)
        return 0;
    if (!json_is_array(list))
        return sbx_error_set(err, SBX_E_INVAL, 0, "field '%s' must be a list of tool names", field);
    json_array_foreach(list, i, v)
    {
        if (!json_is_string(v) || !json_string_length(v))
            return sbx_error_set(err, SBX_E_INVAL, 0, "field '%s': entry %zu must be a tool name",
                                 field, i);
        sbx_strv_push(out, json_string_value(v));
    }
    if (present)
        *present = 1;
    return 0;
}

/* require_approval: "always" | "never" | [names] | {name: always|never} |
 * {always: {tool_names: [..]}, never: {tool_names: [..]}} (the SDK's forms). */
static int load_approval(struct sbx__mcp_server *s, const json_t *v, struct sbx_error *err)
{
    static const char *const msg = "field 'require_approval' must be \"always\", \"never\", a "
                                   "list of tool names, or a mapping of tool names to "
                                   "\"always\" / \"never\"";
    const char *k;
    json_t *x;
    if (!v)
        return 0;
    if (json_is_string(v)) {
        if (strcmp(json_string_value(v), "always") == 0)
            s->approval_all = 1;
        else if (strcmp(json_string_value(v), "never") != 0)
            return sbx_error_set(err, SBX_E_INVAL, 0, "%s", msg);
        return 0;
    }
    if (json_is_array(v)) {
        json_t *wrap = json_pack("{s:O}", "l", v);
        int rc = load_names(wrap, "l", &s->approve, NULL, err);
        json_decref(wrap);
        return rc < 0 ? sbx_error_set(err, SBX_E_INVAL, 0, "%s", msg) : 0;
    }
    if (!json_is_object(v))
        return sbx_error_set(err, SBX_E_INVAL, 0, "%s", msg);
    json_object_foreach((json_t *)v, k, x)
    {
        const char *w = json_string_value(x);
        json_t *names = json_object_get(x, "tool_names");
        int always = strcmp(k, "always") == 0, never = strcmp(k, "never") == 0;
        if ((always || never) && json_is_object(x)) {
            json_t *wrap = json_pack("{s:o}", "l", names ? json_incref(names) : json_array());
            int rc = json_is_array(names) && json_object_size(x) == 1
                             ? load_names(wrap, "l", always ? &s->approve : &s->never, NULL, err)
                             : -1;
            json_decref(wrap);
            if (rc < 0)
                return sbx_error_set(err, SBX_E_INVAL, 0,
                                     "field 'require_approval': '%s' must be {tool_names: [...]}",
                                     k);
        } else if (w && strcmp(w, "always") == 0) {
            sbx_strv_push(&s->approve, k);
        } else if (w && strcmp(w, "never") == 0) {
            sbx_strv_push(&s->never, k);
        } else {
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "field 'require_approval': tool '%.80s' must map to \"always\" "
                                 "or \"never\"",
                                 k);
        }
    }
    return 0;
}

static int load_stdio(struct sbx__mcp_server *s, const char *file, const json_t *e,
                      struct sbx_error *err)
{
    json_t *cmd = json_object_get(e, "command"), *v;
    const char *cwd = NULL;
    size_t i;
    int rc;
    if (json_object_get(e, "headers"))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "field 'headers' is for 'url' servers: a stdio server gets 'env'");
    if (!json_is_array(cmd) || !json_array_size(cmd))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "field 'command' must be a list of strings (the program and its "
                             "arguments; no shell runs it)");
    if (json_array_size(cmd) > MAX_ARGV)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "field 'command' has more than %d elements",
                             MAX_ARGV);
    json_array_foreach(cmd, i, v)
    {
        const char *a = json_string_value(v);
        if (!a || strlen(a) != json_string_length(v) || (i == 0 && !a[0]))
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "field 'command': element %zu must be a non-empty string "
                                 "without NUL",
                                 i);
        sbx_strv_push(&s->argv, a);
    }
    if ((rc = sbx_json_get_bool(e, "host", 0, &s->host, err)) < 0 ||
        (rc = sbx_json_get_text(e, "cwd", SBX_JSON_NONEMPTY, &cwd, NULL, err)) < 0 ||
        (rc = load_map(json_object_get(e, "env"), "env", 0, &s->env, &s->nenv, err)) < 0)
        return rc;
    if (!s->host) {
        s->cwd = cwd ? sbx_xstrdup(cwd) : NULL;
        return 0;
    }
    /* On the host: relative to the agent file's directory. */
    char canon[PATH_MAX];
    const char *f = realpath(file, canon) ? canon : file;
    const char *slash = strrchr(f, '/');
    char *dir = slash ? sbx_xstrndup(f, slash == f ? 1 : (size_t)(slash - f)) : sbx_xstrdup(".");
    s->cwd = cwd && cwd[0] == '/' ? sbx_xstrdup(cwd)
             : cwd                ? sbx_xasprintf("%s/%s", dir, cwd)
                                  : sbx_xstrdup(dir);
    const char *prog = s->argv.v[0];
    if (prog[0] != '/' && strchr(prog, '/')) {
        char *abs = sbx_xasprintf("%s/%s", dir, prog);
        free(s->argv.v[0]);
        s->argv.v[0] = abs;
    }
    free(dir);
    return 0;
}

static int load_http(struct sbx__mcp_server *s, const json_t *e, struct sbx_error *err)
{
    static const char *const bad[] = {"env", "cwd", "host"};
    const char *url = NULL;
    int rc;
    for (size_t i = 0; i < SBX_ARRAY_LEN(bad); i++)
        if (json_object_get(e, bad[i]))
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "field '%s' is for stdio servers ('command'), not 'url' ones",
                                 bad[i]);
    if ((rc = sbx_json_get_text(e, "url", SBX_JSON_REQUIRED | SBX_JSON_NONEMPTY, &url, NULL, err)) <
        0)
        return rc;
    const char *rest = strncmp(url, "https://", 8) == 0  ? url + 8
                       : strncmp(url, "http://", 7) == 0 ? url + 7
                                                         : NULL;
    if (!rest || !rest[0] || rest[0] == '/' || strchr(url, ' '))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "field 'url': '%.200s' must be an http:// or https:// URL", url);
    if (memchr(rest, '@', strcspn(rest, "/?#")))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "field 'url': '%.200s' must not hold a user or password (give them "
                             "as a header with a secret)",
                             url);
    s->url = sbx_xstrdup(url);
    return load_map(json_object_get(e, "headers"), "headers", 1, &s->headers, &s->nheaders, err);
}

static int load_options(struct sbx__mcp_server *s, const json_t *e, struct sbx_error *err)
{
    int64_t timeout = DEFAULT_TIMEOUT_S;
    int rc;
    s->cache = 1;
    if ((rc = sbx_json_get_int(e, "timeout", 0, &timeout, err)) < 0 ||
        (rc = sbx_json_get_bool(e, "cache_tools_list", 0, &s->cache, err)) < 0 ||
        (rc = load_names(e, "allowed_tools", &s->allowed_tools, &s->has_allowed, err)) < 0 ||
        (rc = load_names(e, "blocked_tools", &s->blocked_tools, NULL, err)) < 0 ||
        (rc = load_approval(s, json_object_get(e, "require_approval"), err)) < 0)
        return rc;
    if (timeout < 1 || timeout > MAX_TIMEOUT_S)
        return sbx_error_set(err, SBX_E_INVAL, 0, "field 'timeout' must be 1 to %d seconds",
                             MAX_TIMEOUT_S);
    s->timeout_ms = timeout * 1000;
    return 0;
}

int sbx__mcp_server_new(const char *file, const json_t *e, int prefix, int strict,
                        struct sbx__mcp_server **out, struct sbx_error *err)
{
    static const char *const keys[] = {
            "name",
            "command",
            "url",
            "headers",
            "env",
            "cwd",
            "host",
            "timeout",
            "allowed_tools",
            "blocked_tools",
            "cache_tools_list",
            "require_approval",
            NULL,
    };
    const char *name = NULL;
    int rc;
    if (!json_is_object(e))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "an entry must be a mapping {name, command | url, ...}");
    if ((rc = sbx_json_get_text(e, "name", SBX_JSON_REQUIRED | SBX_JSON_NONEMPTY, &name, NULL,
                                err)) < 0)
        return rc;
    struct sbx__mcp_server *s = sbx_xcalloc(1, sizeof(*s));
    atomic_init(&s->refs, 1);
    atomic_init(&s->allowed, 0);
    pthread_mutex_init(&s->lock, NULL);
    sbx_strv_init(&s->argv);
    sbx_strv_init(&s->allowed_tools);
    sbx_strv_init(&s->blocked_tools);
    sbx_strv_init(&s->approve);
    sbx_strv_init(&s->never);
    s->name = sbx_xstrdup(name);
    s->file = sbx_xstrdup(file);
    s->prefix = prefix;
    s->strict = strict;
    int has_cmd = json_object_get(e, "command") != NULL,
        has_url = json_object_get(e, "url") != NULL;
    if (strlen(name) > NAME_MAX_LEN)
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "the name must be at most %d characters",
                           NAME_MAX_LEN);
    else if (rc == 0 && (rc = sbx_json_check_keys(e, keys, err)) < 0)
        ;
    else if (has_cmd && has_url)
        rc = sbx_error_set(err, SBX_E_INVAL, 0,
                           "fields 'command' and 'url' both say how to reach it: give one");
    else if (!has_cmd && !has_url)
        rc = sbx_error_set(err, SBX_E_INVAL, 0,
                           "needs 'command' (a stdio server) or 'url' (a Streamable HTTP "
                           "server)");
    else if ((rc = has_cmd ? load_stdio(s, file, e, err) : load_http(s, e, err)) == 0)
        rc = load_options(s, e, err);
    if (rc < 0) {
        sbx_error_prefix(err, "MCP server '%s'", name);
        sbx__mcp_server_unref(s);
        return rc;
    }
    *out = s;
    return 0;
}

const char *sbx__mcp_server_name(const struct sbx__mcp_server *s)
{
    return s->name;
}

const char *sbx__mcp_server_transport(const struct sbx__mcp_server *s)
{
    return s->url ? "http" : s->host ? "stdio (host)" : "stdio (sandbox)";
}

int sbx__mcp_server_in_sandbox(const struct sbx__mcp_server *s)
{
    return !s->url && !s->host;
}

const char *sbx__mcp_server_host_program(const struct sbx__mcp_server *s)
{
    return !s->url && s->host ? s->argv.v[0] : NULL;
}

void sbx__mcp_server_allow(struct sbx__mcp_server *s)
{
    atomic_store(&s->allowed, 1);
}

void sbx__mcp_server_secrets(const struct sbx__mcp_server *s, struct sbx_strv *out)
{
    const struct sbx__mcp_header *lists[] = {s->headers, s->env};
    size_t ns[] = {s->nheaders, s->nenv};
    for (size_t l = 0; l < 2; l++)
        for (size_t i = 0; i < ns[l]; i++) {
            const char *v = lists[l][i].env ? getenv(lists[l][i].env) : NULL;
            if (v && v[0] && sbx_strv_find(out, v) < 0)
                sbx_strv_push(out, v);
        }
}

/* ---- calling ----------------------------------------------------------------------------------
 */

/* A result's content as the model reads it: text parts joined by newlines, other parts as
 * compact JSON; structuredContent when there is no content. */
static void result_text(const json_t *res, struct sbx_buf *out)
{
    const json_t *content = json_object_get(res, "content"), *part;
    size_t i;
    json_array_foreach((json_t *)content, i, part)
    {
        const char *type = json_string_value(json_object_get(part, "type"));
        const json_t *text = json_object_get(part, "text");
        if (out->len && sbx_buf_addch(out, '\n', NULL) < 0)
            SBX_BUG("unbounded buffer refused data");
        if (type && strcmp(type, "text") == 0 && json_is_string(text)) {
            if (sbx_buf_add(out, json_string_value(text), json_string_length(text), NULL) < 0)
                SBX_BUG("unbounded buffer refused data");
        } else {
            char *s = sbx_json_dumps(part, JSON_COMPACT);
            if (sbx_buf_adds(out, s, NULL) < 0)
                SBX_BUG("unbounded buffer refused data");
            free(s);
        }
    }
    const json_t *sc = json_object_get(res, "structuredContent");
    if (!json_array_size(content) && sc) {
        char *s = sbx_json_dumps(sc, JSON_COMPACT);
        if (sbx_buf_adds(out, s, NULL) < 0)
            SBX_BUG("unbounded buffer refused data");
        free(s);
    }
}

/* The arguments as the server gets them: with a strict schema the model sends null for an
 * optional argument it leaves out; the server gets it left out. */
static json_t *server_args(const struct mcp_tool *t, const json_t *args)
{
    json_t *a = json_deep_copy(args), *v, *r;
    const char *k;
    void *tmp;
    if (!t->strict)
        return a;
    json_object_foreach_safe(a, tmp, k, v)
    {
        size_t i;
        int required = 0;
        json_array_foreach(t->required, i, r) required |=
                json_is_string(r) && strcmp(json_string_value(r), k) == 0;
        if (json_is_null(v) && !required)
            json_object_del(a, k);
    }
    return a;
}

static int mcp_tool_fn(const json_t *args, const struct sbx_tool_call *call,
                       struct sbx_tool_output *out, struct sbx_error *err)
{
    struct mcp_tool *t = call->data;
    struct sbx__mcp_server *s = t->s;
    struct sbx_span *span = sbx_trace_current();
    sbx_span_set_str(span, "sbx.tool.kind", "mcp");
    sbx_span_set_str(span, "sbx.mcp.server", s->name);
    sbx_span_set_str(span, "sbx.mcp.tool", t->remote);
    json_t *a = server_args(t, args), *res = NULL;
    json_t *params = json_pack("{s:s, s:o}", "name", t->remote, "arguments", a);
    int rc;
    pthread_mutex_lock(&s->lock);
    if (!s->conn)
        rc = sbx_error_set(err, SBX_E_IO, 0, "MCP server '%s' is not running", s->name);
    else
        rc = sbx__mcp_request(s->conn, "tools/call", params, call->run ? call->run->cancel : NULL,
                              &res, err);
    if (rc == -SBX_E_IO || rc == -SBX_E_PARSE || rc == -SBX_E_TOOBIG || rc == -SBX_E_TIMEOUT) {
        /* The connection cannot be trusted: the next turn starts the server again. */
        sbx__mcp_close(s->conn);
        s->conn = NULL;
        drop_tools(s);
    }
    pthread_mutex_unlock(&s->lock);
    json_decref(params);
    if (rc < 0)
        return rc;
    struct sbx_buf text;
    sbx_buf_init(&text, SBX_BUF_NOLIMIT);
    result_text(res, &text);
    int is_error = json_is_true(json_object_get(res, "isError"));
    json_decref(res);
    if (is_error) {
        sbx_span_set_int(span, "sbx.mcp.is_error", 1);
        rc = sbx_error_set(err, SBX_E_EXEC, 0, "MCP server '%s' reported an error: %.4000s",
                           s->name, text.len ? sbx_buf_cstr(&text) : "(no message)");
    } else {
        rc = sbx_truncate_tokens(text.data ? text.data : "", text.len, SBX_TRUNCATE_DEFAULT_TOKENS,
                                 &out->text, NULL, err);
    }
    sbx_buf_release(&text);
    return rc;
}

static int in_list(const struct sbx_strv *l, const char *name)
{
    return sbx_strv_find(l, name) >= 0;
}

static int mcp_approval_fn(const json_t *args, const struct sbx_tool_call *call)
{
    (void)args;
    const struct mcp_tool *t = call->data;
    if (in_list(&t->s->never, t->remote))
        return 0;
    return t->s->approval_all || in_list(&t->s->approve, t->remote);
}

static void mcp_tool_free(void *p)
{
    struct mcp_tool *t = p;
    free(t->remote);
    json_decref(t->required);
    free(t);
}

/* ---- tools ------------------------------------------------------------------------------------
 */

static int name_ok(const char *n)
{
    size_t len = strlen(n);
    if (!len || len > NAME_MAX_LEN)
        return 0;
    for (const char *p = n; *p; p++)
        if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
              *p == '_' || *p == '-'))
            return 0;
    return 1;
}

/* mcp_<server>__<tool> with anything but [A-Za-z0-9_-] as '_', shortened to 64 characters with
 * a hash of the full name when longer. */
static char *prefixed_name(const char *server, const char *tool)
{
    char *sp = sbx__tool_safe_name(server, 0), *tp = sbx__tool_safe_name(tool, 0);
    char *n = sbx_xasprintf("mcp_%s__%s", sp[0] ? sp : "server", tp[0] ? tp : "tool");
    free(sp);
    free(tp);
    if (strlen(n) <= NAME_MAX_LEN)
        return n;
    uint8_t d[SBX_SHA256_LEN];
    char hex[SBX_SHA256_HEX_LEN + 1];
    struct sbx_error e = SBX_ERROR_INIT;
    if (sbx_sha256(n, strlen(n), d, &e) < 0)
        memset(d, 0, sizeof(d));
    sbx_hex(d, sizeof(d), hex);
    char *shortn = sbx_xasprintf("%.*s_%.8s", NAME_MAX_LEN - 9, n, hex);
    free(n);
    return shortn;
}

static int make_tool(struct sbx__mcp_server *s, const json_t *def, struct sbx_tool **out,
                     struct sbx_error *err)
{
    const char *remote = json_string_value(json_object_get(def, "name"));
    const char *desc = json_string_value(json_object_get(def, "description"));
    json_t *schema = json_object_get(def, "inputSchema");
    char *name = s->prefix ? prefixed_name(s->name, remote) : sbx_xstrdup(remote);
    if (!name_ok(name)) {
        int rc = sbx_error_set(err, SBX_E_INVAL, 0,
                               "MCP server '%s' has tool '%.80s', a name the model cannot call "
                               "(set mcp_config: {include_server_in_tool_names: true})",
                               s->name, remote);
        free(name);
        return rc;
    }
    json_t *params = json_is_object(schema) ? json_deep_copy(schema) : json_object();
    /* Which JSON Schema dialect it is written in says nothing the model or the checks use. */
    json_object_del(params, "$schema");
    if (!json_object_get(params, "properties"))
        sbx_json_set(params, "properties", json_object());
    if (!json_object_get(params, "type"))
        sbx_json_set(params, "type", sbx_json_str("object"));
    struct mcp_tool *t = sbx_xcalloc(1, sizeof(*t));
    t->s = s;
    t->remote = sbx_xstrdup(remote);
    t->required = json_incref(json_object_get(params, "required"));
    struct sbx_function_tool spec = {
            .name = name,
            .description = desc,
            .parameters = params,
            .strict = s->strict,
            .fn = mcp_tool_fn,
            .data = t,
            .free_data = NULL,
            .needs_approval = mcp_approval_fn,
    };
    /* Strict where the schema converts, as the SDK's convert_schemas_to_strict. */
    struct sbx_error e = SBX_ERROR_INIT;
    int rc = spec.strict ? sbx_tool_new_function(&spec, out, &e) : -1;
    if (rc < 0) {
        spec.strict = 0;
        rc = sbx_tool_new_function(&spec, out, err);
    }
    t->strict = spec.strict;
    if (rc == 0)
        (*out)->free_data = mcp_tool_free;
    else
        mcp_tool_free(t);
    json_decref(params);
    free(name);
    return rc;
}

static int wanted(const struct sbx__mcp_server *s, const char *name)
{
    if (s->has_allowed && !in_list(&s->allowed_tools, name))
        return 0;
    return !in_list(&s->blocked_tools, name);
}

/* tools/list, filtered, made into tools (s->tools). */
static int list_tools(struct sbx__mcp_server *s, const volatile sig_atomic_t *cancel,
                      struct sbx_span *span, struct sbx_error *err)
{
    json_t *all = NULL, *def;
    size_t i;
    int rc = sbx__mcp_list_all(s->conn, "tools/list", "tools", cancel, &all, err);
    if (rc < 0)
        return rc;
    drop_tools(s);
    s->tools = sbx_xcalloc(json_array_size(all) + 1, sizeof(*s->tools));
    struct sbx_strv names;
    sbx_strv_init(&names);
    json_array_foreach(all, i, def)
    {
        const char *n = json_string_value(json_object_get(def, "name"));
        if (!n || !json_string_length(json_object_get(def, "name"))) {
            rc = sbx_error_set(err, SBX_E_API, 0, "MCP server '%s' lists a tool without a name",
                               s->name);
            break;
        }
        if (in_list(&names, n)) {
            rc = sbx_error_set(err, SBX_E_API, 0, "MCP server '%s' lists tool '%.80s' twice",
                               s->name, n);
            break;
        }
        sbx_strv_push(&names, n);
        if (!wanted(s, n))
            continue;
        if ((rc = make_tool(s, def, &s->tools[s->ntools], err)) < 0)
            break;
        s->ntools++;
    }
    json_decref(all);
    if (rc == 0) {
        struct sbx_strv kept;
        sbx_strv_init(&kept);
        for (size_t k = 0; k < s->ntools; k++)
            sbx_strv_push(&kept, sbx_tool_name(s->tools[k]));
        sbx_span_set_strs(span, "sbx.mcp.tools", (const char *const *)kept.v, kept.n);
        sbx_strv_release(&kept);
        s->listed = 1;
    } else {
        drop_tools(s);
    }
    sbx_strv_release(&names);
    return rc;
}

int sbx__mcp_server_join(struct sbx__mcp_server *s)
{
    pthread_mutex_lock(&s->lock);
    s->users++;
    pthread_mutex_unlock(&s->lock);
    return 0;
}

void sbx__mcp_server_leave(struct sbx__mcp_server *s)
{
    pthread_mutex_lock(&s->lock);
    if (--s->users == 0) {
        sbx__mcp_close(s->conn);
        s->conn = NULL;
        drop_tools(s);
    }
    pthread_mutex_unlock(&s->lock);
}

int sbx__mcp_server_tools(struct sbx__mcp_server *s, const struct sbx__mcp_turn *turn,
                          struct sbx_tool ***tools, size_t *ntools, struct sbx_error *err)
{
    int rc = 0;
    pthread_mutex_lock(&s->lock);
    struct sbx_span *span = NULL;
    if (!s->conn) {
        struct sbx__mcp_conn_opts o = {turn->session, turn->run_as, turn->cancel};
        rc = sbx__mcp_connect(s, &o, &s->conn, err);
    }
    /* The cached listing holds until the server says its tools changed. */
    if (rc == 0 && (!(s->cache && s->listed) || sbx__mcp_take_tools_changed(s->conn))) {
        span = sbx_span_start(turn->span, "mcp_tools", SBX_SPAN_INTERNAL);
        sbx_span_set_str(span, "sbx.mcp.server", s->name);
        rc = list_tools(s, turn->cancel, span, err);
        sbx_span_set_status(span, rc == 0, rc == 0 ? NULL : err->msg);
        sbx_span_end(span);
    }
    if (rc == 0) {
        *tools = sbx_xcalloc(s->ntools + 1, sizeof(**tools));
        for (size_t i = 0; i < s->ntools; i++)
            (*tools)[i] = sbx_tool_ref(s->tools[i]);
        *ntools = s->ntools;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* What the server offers, for `sbx agent mcp`: {name, transport, server, tools, resources,
 * prompts}. Connects for the call and closes again when no run uses the server. */
int sbx__mcp_server_describe(struct sbx__mcp_server *s, const struct sbx__mcp_turn *turn,
                             json_t **out, struct sbx_error *err)
{
    static const char *const lists[][3] = {{"tools", "tools/list", "tools"},
                                           {"resources", "resources/list", "resources"},
                                           {"prompts", "prompts/list", "prompts"}};
    int rc = 0;
    json_t *d = json_pack("{s:s, s:s}", "name", s->name, "transport", sbx__mcp_server_transport(s));
    sbx__mcp_server_join(s);
    pthread_mutex_lock(&s->lock);
    if (!s->conn) {
        struct sbx__mcp_conn_opts o = {turn->session, turn->run_as, turn->cancel};
        rc = sbx__mcp_connect(s, &o, &s->conn, err);
    }
    if (rc == 0)
        sbx_json_set(d, "server", json_deep_copy(sbx__mcp_server_info(s->conn)));
    for (size_t i = 0; i < SBX_ARRAY_LEN(lists) && rc == 0; i++) {
        json_t *items = NULL;
        if (!json_object_get(sbx__mcp_capabilities(s->conn), lists[i][0]))
            continue;
        rc = sbx__mcp_list_all(s->conn, lists[i][1], lists[i][2], turn->cancel, &items, err);
        if (rc == 0)
            sbx_json_set(d, lists[i][0], items);
    }
    pthread_mutex_unlock(&s->lock);
    sbx__mcp_server_leave(s);
    if (rc < 0) {
        json_decref(d);
        return rc;
    }
    *out = d;
    return 0;
}
