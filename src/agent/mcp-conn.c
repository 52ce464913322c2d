/* Talking to an MCP server: JSON-RPC over a stdio server's pipes (a process on the host, or a
 * command in the agent's sandbox) or over Streamable HTTP (docs/internals/mcp.md). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agent/mcp-rpc.h"
#include "agent/mcp.h"
#include "core/spawn.h"
#include "model/http.h"
#include "sandbox/wire/ndjson.h"
#include "sandbox/wire/sse.h"
#include "sbx/json.h"
#include "sbx/time.h"

#define POLL_SLICE_MS      100
#define CLOSE_WAIT_MS      2000
#define CONNECT_TIMEOUT_MS 10000
#define ERR_EXCERPT        200

struct sbx__mcp_conn {
    struct sbx__mcp_server *s; /* borrowed: the server owns the connection */
    int http;
    /* stdio */
    struct sbx__child child;
    int child_started;
    struct sbx_proc *proc;
    int in_fd, out_fd, err_fd; /* in: a stream socket (send with MSG_NOSIGNAL) */
    int own_fds;               /* in_fd and out/err are ours to close (host child) */
    struct sbx__ndjson dec;
    char errtail[SBX__MCP_STDERR_MAX];
    size_t errlen;
    int out_eof;
    /* HTTP */
    char session_id[256];
    char version[32];
    /* both */
    json_t *queue; /* messages read and not yet looked at */
    int64_t next_id;
    json_t *caps, *info;
    int tools_changed; /* the server said notifications/tools/list_changed */
};

/* ---- helpers --------------------------------------------------------------------------------- */

static void add_safe(struct sbx_buf *b, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)p[i];
        if (sbx_buf_addch(b, ch < 0x20 || ch == 0x7f ? ' ' : (char)ch, NULL) < 0)
            SBX_BUG("unbounded buffer refused data");
    }
}

/* "; stderr: ..." with what a stdio server wrote on stderr (lately): its start and its end when
 * it is long, as the first lines usually say what went wrong and the last what happened last. */
static void stderr_note(const struct sbx__mcp_conn *c, struct sbx_buf *b)
{
    size_t end = c->errlen;
    while (end && (c->errtail[end - 1] == '\n' || c->errtail[end - 1] == '\r'))
        end--;
    if (!end)
        return;
    if (sbx_buf_adds(b, "; stderr: ", NULL) < 0)
        SBX_BUG("unbounded buffer refused data");
    if (end <= 2 * ERR_EXCERPT) {
        add_safe(b, c->errtail, end);
        return;
    }
    add_safe(b, c->errtail, ERR_EXCERPT);
    if (sbx_buf_adds(b, " ... ", NULL) < 0)
        SBX_BUG("unbounded buffer refused data");
    add_safe(b, c->errtail + end - ERR_EXCERPT, ERR_EXCERPT);
}

static void keep_stderr(struct sbx__mcp_conn *c, const char *p, size_t n)
{
    if (n >= sizeof(c->errtail)) {
        p += n - sizeof(c->errtail);
        n = sizeof(c->errtail);
    }
    if (c->errlen + n > sizeof(c->errtail)) {
        size_t drop = c->errlen + n - sizeof(c->errtail);
        memmove(c->errtail, c->errtail + drop, c->errlen - drop);
        c->errlen -= drop;
    }
    memcpy(c->errtail + c->errlen, p, n);
    c->errlen += n;
}

static int fail_with_stderr(struct sbx__mcp_conn *c, int code, struct sbx_error *err,
                            const char *what)
{
    struct sbx_buf b;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    if (sbx_buf_addf(&b, NULL, "MCP server '%s' %s", c->s->name, what) < 0)
        SBX_BUG("unbounded buffer refused data");
    stderr_note(c, &b);
    sbx_error_set(err, code, 0, "%s", sbx_buf_cstr(&b));
    sbx_buf_release(&b);
    return -code;
}

static const char *header_value(const struct sbx__mcp_header *h, char **tmp)
{
    if (!h->env)
        return h->value;
    const char *v = getenv(h->env);
    *tmp = sbx_xasprintf("%s%s", h->prefix ? h->prefix : "", v ? v : "");
    return *tmp;
}

/* ---- stdio ----------------------------------------------------------------------------------- */

static int on_line(json_t *v, size_t line, void *ud, struct sbx_error *err)
{
    (void)line;
    (void)err;
    struct sbx__mcp_conn *c = ud;
    sbx_json_append(c->queue, json_incref(v));
    return 0;
}

/* How a stdio server that closed its output ended, as "exited with status 1". */
static void describe_end(struct sbx__mcp_conn *c, char *buf, size_t n)
{
    snprintf(buf, n, "closed its output");
    if (c->proc) {
        struct sbx_exit ex;
        struct sbx_error e = SBX_ERROR_INIT;
        if (sbx_proc_wait(c->proc, 1000, &ex, &e) == 0) {
            if (ex.signal)
                snprintf(buf, n, "ended with signal %d", ex.signal);
            else
                snprintf(buf, n, "ended with status %d", ex.code);
        }
    } else if (c->child_started) {
        int status = 0;
        struct sbx_error e = SBX_ERROR_INIT;
        c->out_fd = c->err_fd = -1; /* sbx__child_wait closes the child's ends */
        if (sbx__child_wait(&c->child, 1000, &status, &e) == 0) {
            char st[64];
            sbx__spawn_describe(status, st, sizeof(st));
            snprintf(buf, n, "ended with %s", st);
        }
        c->child_started = 0;
    }
}

static int read_some(struct sbx__mcp_conn *c, int fd, int is_err, struct sbx_error *err)
{
    char buf[65536];
    ssize_t r = read(fd, buf, sizeof(buf));
    if (r < 0 && (errno == EAGAIN || errno == EINTR))
        return 0;
    if (r <= 0) {
        if (is_err) {
            c->err_fd = -1; /* stop polling it (its owner closes it) */
            return 0;
        }
        c->out_eof = 1;
        return 0;
    }
    if (is_err) {
        keep_stderr(c, buf, (size_t)r);
        return 0;
    }
    int rc = sbx__ndjson_feed(&c->dec, buf, (size_t)r, err);
    if (rc == -SBX_E_TOOBIG)
        return fail_with_stderr(c, SBX_E_TOOBIG, err, "sent a message over 4 MiB");
    if (rc < 0) {
        sbx_error_prefix(err, "MCP server '%s' sent something that is not JSON-RPC", c->s->name);
        return rc;
    }
    return 0;
}

/* Read whatever arrives within the slice. */
static int stdio_pump(struct sbx__mcp_conn *c, int64_t slice_ms, struct sbx_error *err)
{
    struct pollfd p[2] = {{c->out_fd, POLLIN, 0}, {c->err_fd >= 0 ? c->err_fd : -1, POLLIN, 0}};
    int n = poll(p, 2, (int)slice_ms);
    if (n < 0 && errno != EINTR)
        return sbx_error_errno(err, errno, "cannot wait for MCP server '%s'", c->s->name);
    int rc = 0;
    if (n > 0 && p[1].revents)
        rc = read_some(c, c->err_fd, 1, err);
    if (rc == 0 && n > 0 && p[0].revents)
        rc = read_some(c, c->out_fd, 0, err);
    if (rc == 0 && c->out_eof) {
        /* Let the rest of stderr arrive: it says why. */
        for (int i = 0; i < 5 && c->err_fd >= 0; i++) {
            struct pollfd q = {c->err_fd, POLLIN, 0};
            if (poll(&q, 1, 100) <= 0)
                break;
            read_some(c, c->err_fd, 1, err);
        }
        char how[96];
        describe_end(c, how, sizeof(how));
        return fail_with_stderr(c, SBX_E_IO, err, how);
    }
    return rc;
}

static int stdio_send(struct sbx__mcp_conn *c, const char *text, int64_t deadline,
                      struct sbx_error *err)
{
    size_t n = strlen(text), off = 0;
    while (off < n) {
        ssize_t w = send(c->in_fd, text + off, n - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            off += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
            return fail_with_stderr(c, SBX_E_IO, err, "stopped reading its input");
        if (sbx_time_mono_ns() / SBX_NS_PER_MS > deadline)
            return fail_with_stderr(c, SBX_E_TIMEOUT, err, "does not read its input");
        struct pollfd p = {c->in_fd, POLLOUT, 0};
        poll(&p, 1, POLL_SLICE_MS);
    }
    return 0;
}

static void env_push(struct sbx_strv *env, const struct sbx__mcp_header *h)
{
    char *tmp = NULL;
    sbx_strv_pushf(env, "%s=%s", h->name, header_value(h, &tmp));
    free(tmp);
}

static int start_host(struct sbx__mcp_conn *c, struct sbx_error *err)
{
    struct sbx__mcp_server *s = c->s;
    int sv[2], rc;
    if (!atomic_load(&s->allowed))
        return sbx_error_set(err, SBX_E_PERM, 0,
                             "MCP server '%s' runs on the host, and this run does not allow host "
                             "MCP servers",
                             s->name);
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return sbx_error_errno(err, errno, "cannot make MCP server '%s''s input", s->name);
    char *path = sbx__file_tool_host_path();
    struct sbx_strv env;
    sbx_strv_init(&env);
    sbx_strv_pushf(&env, "PATH=%s", path);
    static const char *const pass[] = {"HOME", "LOGNAME", "USER", "SHELL", "TERM", "LANG"};
    for (size_t i = 0; i < SBX_ARRAY_LEN(pass); i++)
        if (getenv(pass[i]))
            sbx_strv_pushf(&env, "%s=%s", pass[i], getenv(pass[i]));
    for (size_t i = 0; i < s->nenv; i++)
        env_push(&env, &s->env[i]);
    struct sbx__spawn sp = {
            .program = s->argv.v[0],
            .search_path = path,
            .argv = (const char *const *)s->argv.v,
            .env = (const char *const *)env.v,
            .cwd = s->cwd,
            .in = {SBX__SPAWN_FD, sv[1]},
            .out = {SBX__SPAWN_PIPE, -1},
            .err = {SBX__SPAWN_PIPE, -1},
            .new_group = 1,
            .parent_death_signal = SIGKILL,
    };
    rc = sbx__spawn_start(&sp, &c->child, err);
    close(sv[1]);
    free(path);
    sbx_strv_release(&env);
    if (rc < 0) {
        close(sv[0]);
        sbx_error_prefix(err, "MCP server '%s'", s->name);
        return rc;
    }
    c->child_started = 1;
    c->in_fd = sv[0];
    c->out_fd = c->child.out;
    c->err_fd = c->child.err;
    c->own_fds = 1;
    return 0;
}

static int start_sandbox(struct sbx__mcp_conn *c, const struct sbx__mcp_conn_opts *o,
                         struct sbx_error *err)
{
    struct sbx__mcp_server *s = c->s;
    if (!o->session)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "MCP server '%s' runs in the sandbox, but the agent has none",
                             s->name);
    struct sbx_strv env;
    sbx_strv_init(&env);
    for (size_t i = 0; i < s->nenv; i++)
        env_push(&env, &s->env[i]);
    struct sbx_exec_spec es = {
            .argv = (const char *const *)s->argv.v,
            .cwd = s->cwd,
            .env = s->nenv ? (const char *const *)env.v : NULL,
            .flags = SBX_EXEC_STDIN,
            .user = o->run_as,
    };
    int rc = sbx_session_exec_start(o->session, &es, &c->proc, err);
    sbx_strv_release(&env);
    if (rc < 0) {
        sbx_error_prefix(err, "MCP server '%s'", s->name);
        return rc;
    }
    c->in_fd = c->proc->stdin_fd;
    c->out_fd = c->proc->stdout_fd;
    c->err_fd = c->proc->stderr_fd;
    return 0;
}

/* ---- Streamable HTTP --------------------------------------------------------------------------
 */

static int on_event(const char *event, const char *data, size_t n, void *ud, struct sbx_error *err)
{
    struct sbx__mcp_conn *c = ud;
    struct sbx_json_limits lim = {.max_bytes = SBX__MCP_MSG_MAX};
    json_t *v = NULL;
    if (strcmp(event, "message") != 0 || !n)
        return 0;
    int rc = sbx_json_parse(data, n, &lim, &v, err);
    if (rc < 0)
        return rc;
    sbx_json_append(c->queue, v);
    return 0;
}

static void http_headers(struct sbx__mcp_conn *c, const char *method, struct sbx_strv *h)
{
    struct sbx__mcp_server *s = c->s;
    (void)method;
    sbx_strv_push(h, "Accept: application/json, text/event-stream");
    if (c->version[0])
        sbx_strv_pushf(h, "MCP-Protocol-Version: %s", c->version);
    if (c->session_id[0])
        sbx_strv_pushf(h, "Mcp-Session-Id: %s", c->session_id);
    for (size_t i = 0; i < s->nheaders; i++) {
        char *tmp = NULL;
        sbx_strv_pushf(h, "%s: %s", s->headers[i].name, header_value(&s->headers[i], &tmp));
        if (tmp) {
            explicit_bzero(tmp, strlen(tmp));
            free(tmp);
        }
    }
}

/* The answer's messages into the queue: one JSON message, or the events of an SSE stream. */
static int http_take(struct sbx__mcp_conn *c, const struct sbx__model_http_resp *resp,
                     struct sbx_error *err)
{
    int rc;
    if (!resp->body.len)
        return 0;
    if (strncasecmp(resp->content_type, "text/event-stream", 17) == 0) {
        struct sbx__sse p;
        sbx__sse_init(&p, SBX__MCP_MSG_MAX, on_event, c);
        rc = sbx__sse_feed(&p, resp->body.data, resp->body.len, err);
        if (rc == 0)
            rc = sbx__sse_finish(&p, err);
        sbx__sse_release(&p);
    } else {
        struct sbx_json_limits lim = {.max_bytes = SBX__MCP_MSG_MAX};
        json_t *v = NULL;
        rc = sbx_json_parse(resp->body.data, resp->body.len, &lim, &v, err);
        if (rc == 0)
            sbx_json_append(c->queue, v);
    }
    if (rc < 0)
        sbx_error_prefix(err, "MCP server '%s' sent something that is not JSON-RPC", c->s->name);
    return rc;
}

static int http_post(struct sbx__mcp_conn *c, const char *method, const char *body,
                     const volatile sig_atomic_t *cancel, struct sbx_error *err)
{
    struct sbx__mcp_server *s = c->s;
    struct sbx_strv h;
    struct sbx__model_http_resp resp;
    sbx_strv_init(&h);
    http_headers(c, method, &h);
    sbx__model_http_resp_init(&resp);
    struct sbx__model_http_req req = {
            .url = s->url,
            .headers = (const char *const *)h.v,
            .body = body,
            .body_len = body ? strlen(body) : 0,
            .timeout_ms = s->timeout_ms,
            .connect_timeout_ms = CONNECT_TIMEOUT_MS,
            .max_body = SBX__MCP_MSG_MAX,
            .cancel = cancel,
            .method = body ? NULL : "DELETE",
            .want_header = "mcp-session-id",
    };
    int rc = sbx__model_http_post(&req, &resp, err);
    if (rc == -SBX_E_TOOBIG)
        rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "MCP server '%s' sent a message over 4 MiB",
                           s->name);
    else if (rc < 0)
        sbx_error_prefix(err, "MCP server '%s'", s->name);
    if (rc == 0 && resp.header[0] && !c->session_id[0])
        snprintf(c->session_id, sizeof(c->session_id), "%s", resp.header);
    if (rc == 0 && body && (resp.status < 200 || resp.status >= 300)) {
        struct sbx_buf m;
        sbx_buf_init(&m, SBX_BUF_NOLIMIT);
        add_safe(&m, resp.body.data ? resp.body.data : "",
                 resp.body.len > ERR_EXCERPT ? ERR_EXCERPT : resp.body.len);
        rc = sbx_error_set(err, SBX_E_API, 0, "MCP server '%s' answered '%s' with HTTP %ld%s%s%s",
                           s->name, method, resp.status,
                           resp.status == 404 && c->session_id[0] ? " (its session ended)" : "",
                           m.len ? ": " : "", sbx_buf_cstr(&m));
        sbx_buf_release(&m);
    }
    if (rc == 0 && body)
        rc = http_take(c, &resp, err);
    sbx__model_http_resp_release(&resp);
    sbx_strv_release(&h);
    return rc;
}

/* ---- requests ---------------------------------------------------------------------------------
 */

static int send_text(struct sbx__mcp_conn *c, const char *method, const char *text,
                     int64_t deadline, const volatile sig_atomic_t *cancel, struct sbx_error *err)
{
    if (c->http)
        return http_post(c, method, text, cancel, err);
    return stdio_send(c, text, deadline, err);
}

/* A request the server sent us: ping is answered, anything else is not offered by sbx. */
static int answer_server(struct sbx__mcp_conn *c, const struct sbx__mcp_msg *m, int64_t deadline,
                         const volatile sig_atomic_t *cancel, struct sbx_error *err)
{
    json_t *empty = json_object();
    char *reply = strcmp(m->method, "ping") == 0
                          ? sbx__mcp_encode_reply(m->id, empty, 0, NULL)
                          : sbx__mcp_encode_reply(m->id, NULL, -32601, "method not found");
    json_decref(empty);
    int rc = send_text(c, m->method, reply, deadline, cancel, err);
    free(reply);
    return rc;
}

/* Look at the queued messages for the answer to id: 1 with *out filled, 0 when not there. */
static int take_answer(struct sbx__mcp_conn *c, int64_t id, int64_t deadline,
                       const volatile sig_atomic_t *cancel, struct sbx__mcp_msg *out,
                       struct sbx_error *err)
{
    while (json_array_size(c->queue)) {
        json_t *v = json_incref(json_array_get(c->queue, 0));
        json_array_remove(c->queue, 0);
        struct sbx__mcp_msg m;
        int rc = sbx__mcp_classify(v, &m, err);
        json_decref(v);
        if (rc < 0) {
            sbx_error_prefix(err, "MCP server '%s'", c->s->name);
            return rc;
        }
        if ((m.kind == SBX__MCP_RESULT || m.kind == SBX__MCP_ERROR) && sbx__mcp_id_is(&m, id)) {
            *out = m;
            return 1;
        }
        if (m.kind == SBX__MCP_REQUEST)
            rc = answer_server(c, &m, deadline, cancel, err);
        else if (m.kind == SBX__MCP_NOTIFICATION &&
                 strcmp(m.method, "notifications/tools/list_changed") == 0)
            c->tools_changed = 1;
        sbx__mcp_msg_release(&m);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int wait_answer(struct sbx__mcp_conn *c, const char *method, int64_t id, int64_t deadline,
                       const volatile sig_atomic_t *cancel, struct sbx__mcp_msg *out,
                       struct sbx_error *err)
{
    for (;;) {
        int rc = take_answer(c, id, deadline, cancel, out, err);
        if (rc != 0)
            return rc < 0 ? rc : 0;
        if (c->http)
            return sbx_error_set(err, SBX_E_API, 0,
                                 "MCP server '%s' answered '%s' without its result", c->s->name,
                                 method);
        if (cancel && *cancel)
            return sbx_error_set(err, SBX_E_CANCELLED, 0, "MCP request '%s' cancelled", method);
        int64_t now = sbx_time_mono_ns() / SBX_NS_PER_MS;
        if (now >= deadline) {
            char what[160];
            snprintf(what, sizeof(what), "did not answer '%s' within %lld s", method,
                     (long long)(c->s->timeout_ms / 1000));
            return fail_with_stderr(c, SBX_E_TIMEOUT, err, what);
        }
        int64_t slice = deadline - now < POLL_SLICE_MS ? deadline - now : POLL_SLICE_MS;
        if ((rc = stdio_pump(c, slice, err)) < 0)
            return rc;
    }
}

int sbx__mcp_request(struct sbx__mcp_conn *c, const char *method, const json_t *params,
                     const volatile sig_atomic_t *cancel, json_t **result, struct sbx_error *err)
{
    int64_t id = result ? c->next_id++ : -1;
    int64_t deadline = sbx_time_mono_ns() / SBX_NS_PER_MS + c->s->timeout_ms;
    char *text = sbx__mcp_encode(id, method, params);
    int rc = send_text(c, method, text, deadline, cancel, err);
    free(text);
    if (rc < 0 || !result)
        return rc;
    struct sbx__mcp_msg m;
    if ((rc = wait_answer(c, method, id, deadline, cancel, &m, err)) < 0)
        return rc;
    if (m.kind == SBX__MCP_ERROR) {
        struct sbx_buf b;
        sbx_buf_init(&b, SBX_BUF_NOLIMIT);
        add_safe(&b, m.message, strlen(m.message) > 500 ? 500 : strlen(m.message));
        rc = sbx_error_set(err, SBX_E_API, 0, "MCP server '%s' refused '%s': %s (error %lld)",
                           c->s->name, method, sbx_buf_cstr(&b), (long long)m.code);
        sbx_buf_release(&b);
    } else if (!json_is_object(m.body)) {
        rc = sbx_error_set(err, SBX_E_API, 0, "MCP server '%s' answered '%s' with a %s result",
                           c->s->name, method, sbx_json_typename(m.body));
    } else {
        *result = json_incref(m.body);
    }
    sbx__mcp_msg_release(&m);
    return rc;
}

int sbx__mcp_list_all(struct sbx__mcp_conn *c, const char *method, const char *key,
                      const volatile sig_atomic_t *cancel, json_t **out, struct sbx_error *err)
{
    json_t *all = json_array(), *cursor = NULL;
    int rc = 0;
    for (int page = 0; rc == 0; page++) {
        if (page >= SBX__MCP_MAX_PAGES) {
            rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "MCP server '%s' lists over %d pages of %s",
                               c->s->name, SBX__MCP_MAX_PAGES, key);
            break;
        }
        json_t *params = cursor ? json_pack("{s:O}", "cursor", cursor) : NULL, *res = NULL;
        rc = sbx__mcp_request(c, method, params, cancel, &res, err);
        json_decref(params);
        json_decref(cursor);
        cursor = NULL;
        if (rc < 0)
            break;
        json_t *items = json_object_get(res, key), *next = json_object_get(res, "nextCursor");
        if (!json_is_array(items))
            rc = sbx_error_set(err, SBX_E_API, 0,
                               "MCP server '%s' answered '%s' without a '%s' list", c->s->name,
                               method, key);
        else if (json_array_size(all) + json_array_size(items) > SBX__MCP_MAX_TOOLS)
            rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "MCP server '%s' lists over %d %s", c->s->name,
                               SBX__MCP_MAX_TOOLS, key);
        else
            json_array_extend(all, items);
        if (rc == 0 && json_is_string(next) && json_string_length(next))
            cursor = json_incref(next);
        json_decref(res);
        if (!cursor)
            break;
    }
    if (rc < 0) {
        json_decref(all);
        return rc;
    }
    *out = all;
    return 0;
}

/* ---- lifecycle --------------------------------------------------------------------------------
 */

static int known_version(const char *v)
{
    static const char *const versions[] = {"2025-06-18", "2025-03-26", "2024-11-05"};
    for (size_t i = 0; i < SBX_ARRAY_LEN(versions); i++)
        if (strcmp(v, versions[i]) == 0)
            return 1;
    return 0;
}

static int handshake(struct sbx__mcp_conn *c, const volatile sig_atomic_t *cancel,
                     struct sbx_error *err)
{
    json_t *params =
            json_pack("{s:s, s:{}, s:{s:s, s:s}}", "protocolVersion", SBX__MCP_PROTOCOL_VERSION,
                      "capabilities", "clientInfo", "name", "sbx", "version", SBX_VERSION);
    json_t *res = NULL;
    int rc = sbx__mcp_request(c, "initialize", params, cancel, &res, err);
    json_decref(params);
    if (rc < 0)
        return rc;
    const char *v = json_string_value(json_object_get(res, "protocolVersion"));
    if (!v || !known_version(v))
        rc = sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                           "MCP server '%s' speaks protocol version '%.40s'; sbx speaks %s, "
                           "2025-03-26 and 2024-11-05",
                           c->s->name, v ? v : "(none)", SBX__MCP_PROTOCOL_VERSION);
    if (rc == 0) {
        snprintf(c->version, sizeof(c->version), "%s", v);
        c->caps = json_incref(json_object_get(res, "capabilities"));
        c->info = json_incref(json_object_get(res, "serverInfo"));
        if (!json_is_object(c->caps)) {
            json_decref(c->caps);
            c->caps = json_object();
        }
        rc = sbx__mcp_request(c, "notifications/initialized", NULL, cancel, NULL, err);
    }
    json_decref(res);
    return rc;
}

int sbx__mcp_connect(struct sbx__mcp_server *s, const struct sbx__mcp_conn_opts *o,
                     struct sbx__mcp_conn **out, struct sbx_error *err)
{
    struct sbx__mcp_conn *c = sbx_xcalloc(1, sizeof(*c));
    int rc;
    c->s = s;
    c->http = s->url != NULL;
    c->in_fd = c->out_fd = c->err_fd = -1;
    c->child.pid = -1;
    c->next_id = 1;
    c->queue = json_array();
    sbx__ndjson_init(&c->dec, SBX__MCP_MSG_MAX, 0, on_line, c);
    if (c->http)
        rc = 0;
    else if (s->host)
        rc = start_host(c, err);
    else
        rc = start_sandbox(c, o, err);
    if (rc == 0 && !c->http) {
        fcntl(c->out_fd, F_SETFL, fcntl(c->out_fd, F_GETFL) | O_NONBLOCK);
        if (c->err_fd >= 0)
            fcntl(c->err_fd, F_SETFL, fcntl(c->err_fd, F_GETFL) | O_NONBLOCK);
    }
    if (rc == 0)
        rc = handshake(c, o->cancel, err);
    if (rc < 0) {
        sbx__mcp_close(c);
        return rc;
    }
    *out = c;
    return 0;
}

int sbx__mcp_take_tools_changed(struct sbx__mcp_conn *c)
{
    int changed = c->tools_changed;
    c->tools_changed = 0;
    return changed;
}

const json_t *sbx__mcp_capabilities(const struct sbx__mcp_conn *c)
{
    return c->caps;
}

const json_t *sbx__mcp_server_info(const struct sbx__mcp_conn *c)
{
    return c->info;
}

void sbx__mcp_close(struct sbx__mcp_conn *c)
{
    if (!c)
        return;
    if (c->http && c->session_id[0]) {
        struct sbx_error e = SBX_ERROR_INIT;
        http_post(c, "DELETE", NULL, NULL, &e);
    }
    if (c->proc) {
        struct sbx_exit ex;
        struct sbx_error e = SBX_ERROR_INIT;
        sbx_proc_close_stdin(c->proc);
        sbx_proc_wait(c->proc, CLOSE_WAIT_MS, &ex, &e);
        sbx_proc_free(c->proc);
    }
    if (c->child_started) {
        struct sbx_error e = SBX_ERROR_INIT;
        if (c->in_fd >= 0)
            close(c->in_fd);
        c->in_fd = -1;
        sbx__child_wait(&c->child, CLOSE_WAIT_MS, NULL, &e);
    } else if (c->own_fds && c->in_fd >= 0) {
        close(c->in_fd);
    }
    sbx__ndjson_release(&c->dec);
    json_decref(c->queue);
    json_decref(c->caps);
    json_decref(c->info);
    free(c);
}
