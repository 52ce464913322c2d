/* An agent file's own function tools: a command in the agent's sandbox, a command on the host,
 * or an HTTP endpoint, each behind a JSON schema (docs/internals/agent-tools.md). */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/agent-internal.h"
#include "core/spawn.h"
#include "model/http.h"
#include "sbx/json.h"
#include "sbx/manifest.h"
#include "sbx/runner.h"
#include "sbx/session.h"
#include "sbx/trace.h"
#include "sbx/truncate.h"

#define DEFAULT_TIMEOUT_S  60
#define MAX_TIMEOUT_S      3600
#define MAX_ARGV           256
#define MAX_HEADERS        32
#define CAPTURE_MAX        ((size_t)1 << 20) /* bytes of a command's stream or a response kept */
#define ARGS_JSON_MAX      ((size_t)1 << 20)
#define CONNECT_TIMEOUT_MS 10000
#define ERR_EXCERPT        300 /* bytes of stderr or of an error body in a failure message */

enum ftool_kind {
    FT_SANDBOX,
    FT_HOST,
    FT_HTTP,
};

static const char *const kind_field[] = {"command", "host_command", "http"};

struct header {
    char *name;
    char *value;  /* a plain value, or NULL */
    char *env;    /* a secret's variable, read at call time */
    char *prefix; /* put before the secret's value ("Bearer ") */
};

struct sbx__file_tool {
    enum ftool_kind kind;
    char *name;
    struct sbx_strv argv; /* templates: $NAME, ${NAME}, $$ */
    int stdin_json;
    char *cwd;                 /* sandbox: a workspace path; host: the agent file's directory */
    struct sbx_strv env_names; /* host: variables passed through */
    char *url;
    struct header *headers;
    size_t nheaders;
    int64_t timeout_ms;
    size_t max_tokens;
    int needs_approval;
    atomic_int allowed; /* host: the run allows host tools */
};

static void ftool_free(void *p)
{
    struct sbx__file_tool *ft = p;
    if (!ft)
        return;
    free(ft->name);
    sbx_strv_release(&ft->argv);
    free(ft->cwd);
    sbx_strv_release(&ft->env_names);
    free(ft->url);
    for (size_t i = 0; i < ft->nheaders; i++) {
        free(ft->headers[i].name);
        free(ft->headers[i].value);
        free(ft->headers[i].env);
        free(ft->headers[i].prefix);
    }
    free(ft->headers);
    free(ft);
}

/* ---- argument substitution ------------------------------------------------------------------ */

static int name_char(char c, int first)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' ||
           (!first && c >= '0' && c <= '9');
}

/* The parameter a '$' at s starts: its name's start and length, and how far the reference goes.
 * 0 for "$$", -1 for a '$' that starts nothing. */
static int dollar_ref(const char *s, const char **name, size_t *len, size_t *span)
{
    const char *p = s + 1;
    int braced = *p == '{';
    if (*p == '$') {
        *span = 2;
        return 0;
    }
    if (braced)
        p++;
    if (!name_char(*p, 1))
        return -1;
    const char *start = p;
    while (name_char(*p, 0))
        p++;
    if (braced && *p != '}')
        return -1;
    *name = start;
    *len = (size_t)(p - start);
    *span = (size_t)(p - s) + (braced ? 1 : 0);
    return 1;
}

static void list_properties(const json_t *props, struct sbx_buf *b)
{
    const char *k;
    json_t *v;
    int first = 1;
    json_object_foreach((json_t *)props, k, v)
    {
        (void)v;
        if (sbx_buf_addf(b, NULL, "%s%s", first ? "" : ", ", k) < 0)
            SBX_BUG("unbounded buffer refused data");
        first = 0;
    }
    if (first && sbx_buf_adds(b, "none", NULL) < 0)
        SBX_BUG("unbounded buffer refused data");
}

/* Every reference in an argv template must name a parameter. */
static int check_template(const char *t, const json_t *props, struct sbx_error *err)
{
    for (const char *p = strchr(t, '$'); p; p = strchr(p, '$')) {
        const char *name = NULL;
        size_t len = 0, span = 0;
        int r = dollar_ref(p, &name, &len, &span);
        if (r < 0)
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "'%.80s': a '$' must start $NAME or ${NAME} (a literal '$' is "
                                 "$$)",
                                 t);
        if (r > 0) {
            char *n = sbx_xstrndup(name, len);
            int known = json_object_get(props, n) != NULL;
            if (!known) {
                struct sbx_buf b;
                sbx_buf_init(&b, SBX_BUF_NOLIMIT);
                list_properties(props, &b);
                sbx_error_set(err, SBX_E_INVAL, 0,
                              "'%.80s' names '$%s', which is not a parameter (parameters: %.300s)",
                              t, n, sbx_buf_cstr(&b));
                sbx_buf_release(&b);
            }
            free(n);
            if (!known)
                return -SBX_E_INVAL;
        }
        p += span;
    }
    return 0;
}

/* One argument's value as argv text: a string as it is, anything else as compact JSON. */
static int value_text(const json_t *v, const char *name, struct sbx_buf *out, struct sbx_error *err)
{
    if (!v || json_is_null(v))
        return 0;
    if (json_is_string(v)) {
        if (strlen(json_string_value(v)) != json_string_length(v))
            return sbx_error_set(err, SBX_E_INVAL, 0, "argument '%s' holds a NUL character", name);
        return sbx_buf_adds(out, json_string_value(v), err);
    }
    char *s = sbx_json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    int rc = sbx_buf_adds(out, s, err);
    free(s);
    return rc;
}

/* Expand the argv templates with args into out. An element that is one reference to an
 * argument left out (null) is dropped; each element stays one argv element. */
static int expand_argv(const struct sbx__file_tool *ft, const json_t *args, struct sbx_strv *out,
                       struct sbx_error *err)
{
    struct sbx_buf b;
    int rc = 0;
    sbx_buf_init(&b, ARGS_JSON_MAX);
    for (size_t i = 0; i < ft->argv.n && rc == 0; i++) {
        const char *t = ft->argv.v[i];
        const char *name = NULL;
        size_t len = 0, span = 0;
        sbx_buf_reset(&b);
        if (t[0] == '$' && dollar_ref(t, &name, &len, &span) > 0 && !t[span]) {
            char *n = sbx_xstrndup(name, len);
            const json_t *v = json_object_get(args, n);
            if (v && !json_is_null(v) && (rc = value_text(v, n, &b, err)) == 0)
                sbx_strv_push(out, sbx_buf_cstr(&b));
            free(n);
            continue;
        }
        for (const char *p = t; *p && rc == 0;) {
            const char *d = strchr(p, '$');
            size_t plain = d ? (size_t)(d - p) : strlen(p);
            if ((rc = sbx_buf_add(&b, p, plain, err)) < 0 || !d)
                break;
            int r = dollar_ref(d, &name, &len, &span);
            if (r == 0) {
                rc = sbx_buf_addch(&b, '$', err);
            } else {
                char *n = sbx_xstrndup(name, len);
                rc = value_text(json_object_get(args, n), n, &b, err);
                free(n);
            }
            p = d + span;
        }
        if (rc == 0)
            sbx_strv_push(out, sbx_buf_cstr(&b));
    }
    sbx_buf_release(&b);
    return rc;
}

/* ---- running ----------------------------------------------------------------------------------
 */

static const volatile sig_atomic_t *run_cancel(const struct sbx_tool_call *call)
{
    return call->run ? call->run->cancel : NULL;
}

/* "; stderr: <last bytes>" for a failure message, control characters shown as '?'. */
static void excerpt(struct sbx_buf *msg, const char *what, const char *p, size_t n, int tail)
{
    if (!n)
        return;
    size_t k = n > ERR_EXCERPT ? ERR_EXCERPT : n;
    const char *s = tail ? p + n - k : p;
    if (sbx_buf_addf(msg, NULL, "; %s: %s", what, k < n && tail ? "..." : "") < 0)
        SBX_BUG("unbounded buffer refused data");
    for (size_t i = 0; i < k; i++) {
        unsigned char c = (unsigned char)s[i];
        if (sbx_buf_addch(msg, c < 0x20 || c == 0x7f ? (c == '\n' ? ' ' : '?') : (char)c, NULL) < 0)
            SBX_BUG("unbounded buffer refused data");
    }
    if (k < n && !tail && sbx_buf_adds(msg, "...", NULL) < 0)
        SBX_BUG("unbounded buffer refused data");
}

/* A command's result: its stdout (truncated to the tool's budget) when it exited 0, else an
 * error saying how it ended, with the end of its stderr and the start of its stdout. */
static int command_result(const struct sbx__file_tool *ft, const char *how, int ok, const char *out,
                          size_t out_len, const char *errs, size_t err_len,
                          struct sbx_tool_output *o, struct sbx_error *err)
{
    if (ok)
        return sbx_truncate_tokens(out, out_len, ft->max_tokens, &o->text, NULL, err);
    struct sbx_buf msg;
    sbx_buf_init(&msg, SBX_BUF_NOLIMIT);
    if (sbx_buf_adds(&msg, how, NULL) < 0)
        SBX_BUG("unbounded buffer refused data");
    excerpt(&msg, "stderr", errs, err_len, 1);
    excerpt(&msg, "stdout", out, out_len, 0);
    sbx_error_set(err, SBX_E_EXEC, 0, "%s", sbx_buf_cstr(&msg));
    sbx_buf_release(&msg);
    return -SBX_E_EXEC;
}

static char *args_json(const json_t *args)
{
    return sbx_json_dumps(args, JSON_COMPACT);
}

static int sandbox_fn(const json_t *args, const struct sbx_tool_call *call,
                      struct sbx_tool_output *out, struct sbx_error *err)
{
    const struct sbx__file_tool *ft = call->data;
    struct sbx_strv argv;
    struct sbx_exec_result res = {0};
    char *input = NULL;
    int rc;
    if (!call->session)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "tool '%s' runs in the sandbox, but agent '%s' has none", ft->name,
                             sbx_agent_name(call->agent));
    sbx_strv_init(&argv);
    if ((rc = expand_argv(ft, args, &argv, err)) < 0)
        goto out;
    if (ft->stdin_json)
        input = args_json(args);
    const json_t *spec = sbx_agent_sandbox_spec(call->agent);
    struct sbx_exec_spec es = {
            .argv = (const char *const *)argv.v,
            .cwd = ft->cwd,
            .timeout_ms = ft->timeout_ms,
            .user = json_string_value(json_object_get(spec, "run_as")),
            .cancel = run_cancel(call),
            .input = input,
            .input_len = input ? strlen(input) : 0,
            .output_limit = CAPTURE_MAX,
    };
    sbx_span_set_str(sbx_trace_current(), "sbx.tool.kind", "command");
    if ((rc = sbx_session_exec(call->session, &es, &res, err)) < 0)
        goto out;
    char how[160];
    if (res.status.timed_out)
        snprintf(how, sizeof(how), "'%.60s' did not finish within %lld s", argv.v[0],
                 (long long)(ft->timeout_ms / 1000));
    else if (res.status.signal)
        snprintf(how, sizeof(how), "'%.60s' was killed by signal %d", argv.v[0], res.status.signal);
    else
        snprintf(how, sizeof(how), "'%.60s' exited with status %d", argv.v[0], res.status.code);
    rc = command_result(ft, how, !res.status.timed_out && res.status.code == 0, res.out.data,
                        res.out.len, res.err.data, res.err.len, out, err);
out:
    sbx_exec_result_release(&res);
    sbx_strv_release(&argv);
    free(input);
    return rc;
}

/* The absolute directories of the caller's PATH (the host tool's lookup path and its PATH). */
char *sbx__file_tool_host_path(void)
{
    const char *path = getenv("PATH");
    struct sbx_buf b;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    for (const char *p = path; p && *p;) {
        const char *c = strchr(p, ':');
        size_t n = c ? (size_t)(c - p) : strlen(p);
        if (n && p[0] == '/' && sbx_buf_addf(&b, NULL, "%s%.*s", b.len ? ":" : "", (int)n, p) < 0)
            SBX_BUG("unbounded buffer refused data");
        p = c ? c + 1 : p + n;
    }
    if (!b.len && sbx_buf_adds(&b, SBX__SPAWN_PATH, NULL) < 0)
        SBX_BUG("unbounded buffer refused data");
    return sbx_buf_detach(&b, NULL);
}

/* stdin for a host command: the arguments in a sealed memory file, read from its start. */
static int stdin_fd(const char *text, int *out, struct sbx_error *err)
{
    int fd = memfd_create("sbx-tool-args", MFD_CLOEXEC);
    if (fd < 0)
        return sbx_error_errno(err, errno, "cannot make the tool's input");
    size_t n = strlen(text), off = 0;
    while (off < n) {
        ssize_t w = write(fd, text + off, n - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            int e = errno;
            close(fd);
            return sbx_error_errno(err, e, "cannot write the tool's input");
        }
        off += (size_t)w;
    }
    if (lseek(fd, 0, SEEK_SET) < 0) {
        int e = errno;
        close(fd);
        return sbx_error_errno(err, e, "cannot rewind the tool's input");
    }
    *out = fd;
    return 0;
}

static int host_fn(const json_t *args, const struct sbx_tool_call *call,
                   struct sbx_tool_output *out, struct sbx_error *err)
{
    struct sbx__file_tool *ft = call->data;
    struct sbx_strv argv, env;
    struct sbx_buf o, e;
    char *path = NULL, *input = NULL;
    int fd = -1, rc;
    if (!atomic_load(&ft->allowed))
        return sbx_error_set(err, SBX_E_PERM, 0,
                             "tool '%s' runs a command on the host, and this run does not allow "
                             "host tools",
                             ft->name);
    sbx_strv_init(&argv);
    sbx_strv_init(&env);
    sbx_buf_init(&o, CAPTURE_MAX);
    sbx_buf_init(&e, CAPTURE_MAX);
    sbx_span_set_str(sbx_trace_current(), "sbx.tool.kind", "host_command");
    if ((rc = expand_argv(ft, args, &argv, err)) < 0)
        goto out;
    if (ft->stdin_json) {
        input = args_json(args);
        if ((rc = stdin_fd(input, &fd, err)) < 0)
            goto out;
    }
    path = sbx__file_tool_host_path();
    sbx_strv_pushf(&env, "PATH=%s", path);
    for (size_t i = 0; i < ft->env_names.n; i++) {
        const char *v = getenv(ft->env_names.v[i]);
        if (v)
            sbx_strv_pushf(&env, "%s=%s", ft->env_names.v[i], v);
    }
    struct sbx__spawn sp = {
            .program = argv.v[0],
            .search_path = path,
            .argv = (const char *const *)argv.v,
            .env = (const char *const *)env.v,
            .cwd = ft->cwd,
            .in = {fd >= 0 ? SBX__SPAWN_FD : SBX__SPAWN_NULL, fd},
            .out = {SBX__SPAWN_PIPE, -1},
            .err = {SBX__SPAWN_PIPE, -1},
            .new_group = 1,
            .parent_death_signal = SIGKILL,
    };
    struct sbx__spawn_capture cap = {.out = &o, .err = &e};
    rc = sbx__spawn_run(&sp, ft->timeout_ms, &cap, err);
    if (rc == -SBX_E_TIMEOUT) {
        sbx_error_set(err, SBX_E_TIMEOUT, 0, "'%.60s' did not finish within %lld s", argv.v[0],
                      (long long)(ft->timeout_ms / 1000));
        goto out;
    }
    if (rc < 0)
        goto out;
    char how[160], st[64];
    sbx__spawn_describe(cap.status, st, sizeof(st));
    snprintf(how, sizeof(how), "'%.60s' ended with %s", argv.v[0], st);
    int ok = WIFEXITED(cap.status) && WEXITSTATUS(cap.status) == 0;
    rc = command_result(ft, how, ok, o.data, o.len, e.data, e.len, out, err);
out:
    if (fd >= 0)
        close(fd);
    sbx_buf_release(&o);
    sbx_buf_release(&e);
    sbx_strv_release(&argv);
    sbx_strv_release(&env);
    free(path);
    free(input);
    return rc;
}

static int http_fn(const json_t *args, const struct sbx_tool_call *call,
                   struct sbx_tool_output *out, struct sbx_error *err)
{
    const struct sbx__file_tool *ft = call->data;
    struct sbx_strv hdrs;
    struct sbx__model_http_resp resp;
    char *body = args_json(args);
    int rc = 0;
    sbx_strv_init(&hdrs);
    sbx__model_http_resp_init(&resp);
    for (size_t i = 0; i < ft->nheaders && rc == 0; i++) {
        const struct header *h = &ft->headers[i];
        const char *v = h->value ? h->value : getenv(h->env);
        if (!v)
            rc = sbx_error_set(err, SBX_E_NOTFOUND, 0,
                               "header '%s' of tool '%s' reads variable '%s', which is not set",
                               h->name, ft->name, h->env);
        else
            sbx_strv_pushf(&hdrs, "%s: %s%s", h->name, h->prefix ? h->prefix : "", v);
    }
    struct sbx__model_http_req req = {
            .url = ft->url,
            .headers = (const char *const *)hdrs.v,
            .body = body,
            .body_len = strlen(body),
            .timeout_ms = ft->timeout_ms,
            .connect_timeout_ms = CONNECT_TIMEOUT_MS,
            .max_body = CAPTURE_MAX,
            .cancel = run_cancel(call),
    };
    struct sbx_span *span = sbx_trace_current();
    sbx_span_set_str(span, "sbx.tool.kind", "http");
    sbx_span_set_str(span, "url.full", ft->url);
    if (rc == 0)
        rc = sbx__model_http_post(&req, &resp, err);
    if (rc == 0)
        sbx_span_set_int(span, "http.response.status_code", resp.status);
    if (rc == 0 && (resp.status < 200 || resp.status > 299)) {
        struct sbx_buf msg;
        sbx_buf_init(&msg, SBX_BUF_NOLIMIT);
        if (sbx_buf_addf(&msg, NULL, "'%s' answered HTTP %ld", ft->url, resp.status) < 0)
            SBX_BUG("unbounded buffer refused data");
        excerpt(&msg, "body", resp.body.data, resp.body.len, 0);
        rc = sbx_error_set(err, SBX_E_API, 0, "%s", sbx_buf_cstr(&msg));
        sbx_buf_release(&msg);
    } else if (rc == 0) {
        rc = sbx_truncate_tokens(resp.body.data, resp.body.len, ft->max_tokens, &out->text, NULL,
                                 err);
    }
    sbx__model_http_resp_release(&resp);
    sbx_strv_release(&hdrs);
    free(body);
    return rc;
}

static int approval_fn(const json_t *args, const struct sbx_tool_call *call)
{
    (void)args;
    const struct sbx__file_tool *ft = call->data;
    return ft->needs_approval;
}

/* ---- loading ----------------------------------------------------------------------------------
 */

static char *dir_of(const char *file)
{
    char canon[PATH_MAX];
    const char *f = realpath(file, canon) ? canon : file;
    const char *slash = strrchr(f, '/');
    if (!slash)
        return sbx_xstrdup(".");
    if (slash == f)
        return sbx_xstrdup("/");
    return sbx_xstrndup(f, (size_t)(slash - f));
}

static int env_name_ok(const char *s)
{
    if (!s || !name_char(s[0], 1))
        return 0;
    for (const char *p = s; *p; p++)
        if (!name_char(*p, 0))
            return 0;
    return 1;
}

/* command / host_command: a non-empty list of strings, each checked as a template. */
static int load_argv(struct sbx__file_tool *ft, const json_t *list, const json_t *props,
                     const char *field, struct sbx_error *err)
{
    size_t i;
    json_t *v;
    if (!json_is_array(list) || !json_array_size(list))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "field '%s' must be a list of strings (the program and its "
                             "arguments; no shell runs it)",
                             field);
    if (json_array_size(list) > MAX_ARGV)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "field '%s' has more than %d elements", field,
                             MAX_ARGV);
    json_array_foreach(list, i, v)
    {
        const char *s = json_string_value(v);
        int rc;
        if (!s || strlen(s) != json_string_length(v))
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "field '%s': element %zu must be a string without NUL", field, i);
        if (i == 0 && !s[0])
            return sbx_error_set(err, SBX_E_INVAL, 0, "field '%s': the program must not be empty",
                                 field);
        if (i == 0 && strchr(s, '$'))
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "field '%s': the program must be fixed, not an argument", field);
        if ((rc = check_template(s, props, err)) < 0) {
            sbx_error_prefix(err, "field '%s'", field);
            return rc;
        }
        sbx_strv_push(&ft->argv, s);
    }
    return 0;
}

static int load_env_names(struct sbx__file_tool *ft, const json_t *list, struct sbx_error *err)
{
    size_t i;
    json_t *v;
    if (list && !json_is_array(list))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "field 'env' must be a list of variable names passed from sbx's "
                             "environment");
    json_array_foreach(list, i, v)
    {
        const char *s = json_string_value(v);
        if (!env_name_ok(s))
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "field 'env': element %zu must be a variable name", i);
        if (sbx_manifest_harness_credential(s))
            return sbx_error_set(err, SBX_E_PERM, 0,
                                 "field 'env': '%s' is sbx's own credential and is not passed "
                                 "to tools",
                                 s);
        sbx_strv_push(&ft->env_names, s);
    }
    return 0;
}

/* A header value: "text", or a secret by reference {type: secret, env: VAR, prefix: "Bearer "}. */
static int load_header(struct header *h, const char *name, const json_t *v, struct sbx_error *err)
{
    static const char *const skeys[] = {"type", "env", "prefix", NULL};
    const char *type = NULL, *env = NULL, *prefix = NULL;
    int rc;
    h->name = sbx_xstrdup(name);
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        if (strlen(s) != json_string_length(v))
            return sbx_error_set(err, SBX_E_INVAL, 0, "the value must not contain a NUL byte");
        for (; *s; s++)
            if ((unsigned char)*s < 0x20 || *s == 0x7f)
                return sbx_error_set(err, SBX_E_INVAL, 0,
                                     "the value must not contain control characters");
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
    if (!env_name_ok(env))
        return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a variable name", env);
    if (sbx_manifest_harness_credential(env))
        return sbx_error_set(err, SBX_E_PERM, 0,
                             "'%s' is sbx's own credential: an agent file does not send it to "
                             "a tool's server",
                             env);
    if (!getenv(env))
        return sbx_error_set(err, SBX_E_NOTFOUND, 0, "variable '%s' is not set", env);
    h->env = sbx_xstrdup(env);
    h->prefix = prefix ? sbx_xstrdup(prefix) : NULL;
    return 0;
}

static int header_name_ok(const char *s)
{
    if (!s[0])
        return 0;
    for (const char *p = s; *p; p++)
        if (!(name_char(*p, 0) || *p == '-'))
            return 0;
    return 1;
}

static int load_http(struct sbx__file_tool *ft, const json_t *http, struct sbx_error *err)
{
    static const char *const hkeys[] = {"url", "headers", NULL};
    const char *url = NULL, *k;
    json_t *headers = NULL, *v;
    int rc;
    if (!json_is_object(http))
        return sbx_error_set(err, SBX_E_INVAL, 0, "must be an object {url, headers}");
    if ((rc = sbx_json_check_keys(http, hkeys, err)) < 0 ||
        (rc = sbx_json_get_text(http, "url", SBX_JSON_REQUIRED | SBX_JSON_NONEMPTY, &url, NULL,
                                err)) < 0 ||
        (rc = sbx_json_get_object(http, "headers", 0, &headers, err)) < 0)
        return rc;
    const char *rest = strncmp(url, "https://", 8) == 0  ? url + 8
                       : strncmp(url, "http://", 7) == 0 ? url + 7
                                                         : NULL;
    if (!rest || !rest[0] || rest[0] == '/')
        return sbx_error_set(err, SBX_E_INVAL, 0, "url '%.200s' must be an http:// or https:// URL",
                             url);
    size_t host_end = strcspn(rest, "/?#");
    if (memchr(rest, '@', host_end) || strchr(url, ' '))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "url '%.200s' must not hold a user or password (give them as a "
                             "header with a secret)",
                             url);
    ft->url = sbx_xstrdup(url);
    if (json_object_size(headers) > MAX_HEADERS)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "more than %d headers", MAX_HEADERS);
    ft->headers = sbx_xcalloc(json_object_size(headers) + 1, sizeof(*ft->headers));
    json_object_foreach(headers, k, v)
    {
        struct header *h = &ft->headers[ft->nheaders++];
        if (!header_name_ok(k))
            return sbx_error_set(err, SBX_E_INVAL, 0, "header '%.80s': not a header name", k);
        if ((rc = load_header(h, k, v, err)) < 0) {
            sbx_error_prefix(err, "header '%s'", k);
            return rc;
        }
        if (!h->env)
            h->value = sbx_xstrdup(json_string_value(v));
    }
    return 0;
}

/* The one of command / host_command / http the entry has. */
static int entry_kind(const json_t *e, enum ftool_kind *out, struct sbx_error *err)
{
    int found = -1;
    for (int k = 0; k < 3; k++) {
        if (!json_object_get(e, kind_field[k]))
            continue;
        if (found >= 0)
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "fields '%s' and '%s' both say what runs: give one",
                                 kind_field[found], kind_field[k]);
        found = k;
    }
    if (found < 0)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "needs one of 'command' (in the sandbox), 'host_command' or 'http'");
    *out = (enum ftool_kind)found;
    return 0;
}

/* The entry's limits and approval: timeout (seconds), max_output_tokens, needs_approval. */
static int load_limits(struct sbx__file_tool *ft, const json_t *e, struct sbx_error *err)
{
    int64_t timeout = DEFAULT_TIMEOUT_S, tokens = SBX_TRUNCATE_DEFAULT_TOKENS;
    int rc;
    if ((rc = sbx_json_get_int(e, "timeout", 0, &timeout, err)) < 0 ||
        (rc = sbx_json_get_int(e, "max_output_tokens", 0, &tokens, err)) < 0 ||
        (rc = sbx_json_get_bool(e, "needs_approval", 0, &ft->needs_approval, err)) < 0)
        return rc;
    if (timeout < 1 || timeout > MAX_TIMEOUT_S)
        return sbx_error_set(err, SBX_E_INVAL, 0, "field 'timeout' must be 1 to %d seconds",
                             MAX_TIMEOUT_S);
    if (tokens < 1 || tokens > (int64_t)(SBX_TOOL_OUTPUT_MAX / SBX_TRUNCATE_BYTES_PER_TOKEN))
        return sbx_error_set(err, SBX_E_INVAL, 0, "field 'max_output_tokens' must be 1 to %zu",
                             SBX_TOOL_OUTPUT_MAX / SBX_TRUNCATE_BYTES_PER_TOKEN);
    ft->timeout_ms = timeout * 1000;
    ft->max_tokens = (size_t)tokens;
    return 0;
}

/* What runs and how it gets the arguments. */
static int load_runner(struct sbx__file_tool *ft, const char *file, const json_t *e,
                       const json_t *props, struct sbx_error *err)
{
    const char *in = NULL, *cwd = NULL;
    const char *field = kind_field[ft->kind];
    int rc;
    if (ft->kind == FT_HTTP) {
        static const char *const bad[] = {"stdin", "cwd", "env"};
        for (size_t i = 0; i < SBX_ARRAY_LEN(bad); i++)
            if (json_object_get(e, bad[i]))
                return sbx_error_set(err, SBX_E_INVAL, 0,
                                     "field '%s' is for commands: an http tool gets the arguments "
                                     "as its JSON body",
                                     bad[i]);
        if ((rc = load_http(ft, json_object_get(e, "http"), err)) < 0)
            sbx_error_prefix(err, "field 'http'");
        return rc;
    }
    if ((rc = load_argv(ft, json_object_get(e, field), props, field, err)) < 0 ||
        (rc = sbx_json_get_text(e, "stdin", 0, &in, NULL, err)) < 0 ||
        (rc = sbx_json_get_text(e, "cwd", SBX_JSON_NONEMPTY, &cwd, NULL, err)) < 0)
        return rc;
    if (in && strcmp(in, "json") != 0)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "field 'stdin' must be \"json\" (the arguments object on stdin)");
    ft->stdin_json = in != NULL;
    if (ft->kind == FT_SANDBOX) {
        if (json_object_get(e, "env"))
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "field 'env' is for host commands: a sandbox command gets the "
                                 "manifest's environment");
        ft->cwd = cwd ? sbx_xstrdup(cwd) : NULL;
        return 0;
    }
    if (cwd)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "field 'cwd' is for sandbox commands: a host command runs in the "
                             "agent file's directory");
    ft->cwd = dir_of(file);
    const char *prog = ft->argv.v[0];
    if (prog[0] != '/' && strchr(prog, '/')) {
        char *abs = sbx_xasprintf("%s/%s", ft->cwd, prog);
        free(ft->argv.v[0]);
        ft->argv.v[0] = abs;
    }
    return load_env_names(ft, json_object_get(e, "env"), err);
}

int sbx__file_tool_new(const char *file, const json_t *e, struct sbx_tool **out,
                       struct sbx__file_tool **out_ft, struct sbx_error *err)
{
    static const char *const keys[] = {
            "name",           "description", "parameters", "strict",
            "command",        "stdin",       "cwd",        "env",
            "host_command",   "http",        "timeout",    "max_output_tokens",
            "needs_approval", NULL,
    };
    const char *name = NULL, *desc = NULL;
    json_t *params = NULL;
    int strict = 1, rc;
    struct sbx__file_tool *ft = sbx_xcalloc(1, sizeof(*ft));
    sbx_strv_init(&ft->argv);
    sbx_strv_init(&ft->env_names);
    atomic_init(&ft->allowed, 0);
    if ((rc = sbx_json_get_text(e, "name", SBX_JSON_REQUIRED | SBX_JSON_NONEMPTY, &name, NULL,
                                err)) < 0)
        goto fail;
    ft->name = sbx_xstrdup(name);
    if ((rc = sbx_json_check_keys(e, keys, err)) < 0 ||
        (rc = sbx_json_get_text(e, "description", SBX_JSON_ALLOW_CONTROL, &desc, NULL, err)) < 0 ||
        (rc = sbx_json_get_object(e, "parameters", 0, &params, err)) < 0 ||
        (rc = sbx_json_get_bool(e, "strict", 0, &strict, err)) < 0 ||
        (rc = entry_kind(e, &ft->kind, err)) < 0 || (rc = load_limits(ft, e, err)) < 0)
        goto named;
    const json_t *props = json_object_get(params, "properties");
    if (params && props && !json_is_object(props)) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0,
                           "field 'parameters': 'properties' must be an "
                           "object");
        goto named;
    }
    if ((rc = load_runner(ft, file, e, props, err)) < 0)
        goto named;
    struct sbx_function_tool spec = {
            .name = name,
            .description = desc,
            .parameters = params,
            .strict = strict,
            .fn = ft->kind == FT_SANDBOX ? sandbox_fn
                  : ft->kind == FT_HOST  ? host_fn
                                         : http_fn,
            .data = ft,
            .free_data = ftool_free,
            .needs_approval = approval_fn,
    };
    /* From here the tool owns ft (and frees it on failure). */
    struct sbx__file_tool *keep = ft;
    ft = NULL;
    if ((rc = sbx_tool_new_function(&spec, out, err)) < 0)
        goto named;
    *out_ft = keep;
    return 0;
named:
    sbx_error_prefix(err, "tool '%s'", name);
fail:
    ftool_free(ft);
    return rc;
}

int sbx__file_tool_in_sandbox(const struct sbx__file_tool *ft)
{
    return ft->kind == FT_SANDBOX;
}

const char *sbx__file_tool_host_program(const struct sbx__file_tool *ft)
{
    return ft->kind == FT_HOST ? ft->argv.v[0] : NULL;
}

void sbx__file_tool_allow(struct sbx__file_tool *ft)
{
    atomic_store(&ft->allowed, 1);
}

void sbx__file_tool_secrets(const struct sbx__file_tool *ft, struct sbx_strv *out)
{
    for (size_t i = 0; i < ft->nheaders; i++) {
        const char *v = ft->headers[i].env ? getenv(ft->headers[i].env) : NULL;
        if (v && v[0] && sbx_strv_find(out, v) < 0)
            sbx_strv_push(out, v);
    }
}
