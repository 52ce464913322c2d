/* The Sandbox Bridge worker's HTTP API, as its route code in @cloudflare/sandbox/bridge defines
 * it: ids from POST /v1/sandbox, short commands through POST .../exec (Server-Sent Events:
 * stdout and stderr as base64 chunks, then exit {"exit_code"} or error {"error", "code"}), file
 * contents through GET and PUT .../file/{path} (the absolute path without its leading slash,
 * lexically inside /workspace), DELETE /v1/sandbox/{id}. Requests go through the remote layer's
 * endpoint (wire/http.h): the key as "Authorization: Bearer", 429 and 503 retried after their
 * Retry-After, every error scrubbed of the key. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "providers/cloudflare/cloudflare.h"
#include "sandbox/wire/http.h"
#include "sandbox/wire/sse.h"
#include "sandbox/wire/wire.h"
#include "sbx/b64.h"
#include "sbx/json.h"
#include "sbx/path.h"

struct sbx__cf_conf *sbx__cf_conf_ref(struct sbx__cf_conf *c)
{
    atomic_fetch_add_explicit((_Atomic int *)&c->refs, 1, memory_order_relaxed);
    return c;
}

void sbx__cf_conf_unref(struct sbx__cf_conf *c)
{
    if (!c || atomic_fetch_sub_explicit((_Atomic int *)&c->refs, 1, memory_order_acq_rel) != 1)
        return;
    sbx__endpoint_free(c->ep);
    free(c->url);
    free(c->key_what);
    free(c);
}

int sbx__cf_valid_id(const char *id)
{
    size_t n = id ? strlen(id) : 0;
    if (n == 0 || n > SBX__CF_ID_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((id[i] >= 'a' && id[i] <= 'z') || (id[i] >= '2' && id[i] <= '7')))
            return 0;
    return 1;
}

/* The bridge's words for an error status (sbx__http_words_fn). */
static int cf_words(void *ctx, long status, const char *what, const char *msg,
                    struct sbx_error *err)
{
    const struct sbx__cf_conf *c = ctx;
    const char *said = msg[0] ? msg : "(no message)";
    (void)what;
    /* 401 is the key; the bridge's 403 is a path or directory out of /workspace. */
    if (status == 401 && !c->has_key)
        return sbx_error_set(err, SBX_E_PERM, 0,
                             "the Cloudflare Sandbox Bridge at '%s' wants a key and none was "
                             "given (%s is not set): %s",
                             c->url, c->key_what, said);
    if (status == 401)
        return sbx_error_set(err, SBX_E_PERM, 0,
                             "the Cloudflare Sandbox Bridge at '%s' refused the key from %s (HTTP "
                             "%ld): %s",
                             c->url, c->key_what, status, said);
    if (status == 429)
        return sbx_error_set(err, SBX_E_API, 0,
                             "the Cloudflare Sandbox Bridge at '%s' is rate limiting (HTTP 429, "
                             "retries exhausted): %s",
                             c->url, said);
    if (status == 503)
        return sbx_error_set(err, SBX_E_API, 0,
                             "the Cloudflare Sandbox Bridge at '%s' has no container free (HTTP "
                             "503, retries exhausted): %s",
                             c->url, said);
    return 0;
}

int sbx__cf_status_error(const struct sbx__cf_conf *c, long status, const void *body, size_t n,
                         const char *what, struct sbx_error *err)
{
    return sbx__http_service_error(c->ep, status, body, n, what, cf_words, (void *)c, err);
}

/* A request whose answer is checked: a status >= 400 is the error above. */
static int call(struct sbx__cf_conf *c, const struct sbx__http_req *req, const char *what,
                struct sbx__http_resp *resp, struct sbx_error *err)
{
    int rc = sbx__http_call(c->ep, req, resp, err);
    if (rc == 0 && resp->status >= 400)
        rc = sbx__cf_status_error(c, resp->status, resp->body.data, resp->body.len, what, err);
    return rc;
}

int sbx__cf_new_id(struct sbx__cf_conf *c, char **out, struct sbx_error *err)
{
    long status = 0;
    json_t *ans = NULL;
    struct sbx__http_req req = {.method = "POST", .path = "/v1/sandbox"};
    struct sbx__http_resp resp;
    sbx__http_resp_init(&resp);
    int rc = call(c, &req, "POST /v1/sandbox", &resp, err);
    if (rc == 0 && !(ans = json_loadb(resp.body.data, resp.body.len, 0, NULL)))
        rc = sbx_error_set(err, SBX_E_API, 0,
                           "the Cloudflare Sandbox Bridge at '%s' answered POST /v1/sandbox "
                           "without JSON",
                           c->url);
    const char *id = json_string_value(json_object_get(ans, "id"));
    if (rc == 0 && !sbx__cf_valid_id(id))
        rc = sbx_error_set(err, SBX_E_API, 0,
                           "the Cloudflare Sandbox Bridge at '%s' gave no sandbox id a bridge "
                           "gives",
                           c->url);
    if (rc == 0)
        *out = sbx_xstrdup(id);
    (void)status;
    json_decref(ans);
    sbx__http_resp_release(&resp);
    return rc;
}

int sbx__cf_delete(struct sbx__cf_conf *c, const char *id, struct sbx_error *err)
{
    char *path = sbx_xasprintf("/v1/sandbox/%s", id);
    struct sbx__http_req req = {.method = "DELETE", .path = path};
    struct sbx__http_resp resp;
    sbx__http_resp_init(&resp);
    int rc = call(c, &req, "DELETE /v1/sandbox/ID", &resp, err);
    sbx__http_resp_release(&resp);
    free(path);
    return rc;
}

int sbx__cf_tunnel(struct sbx__cf_conf *c, const char *id, int port, char **out,
                   struct sbx_error *err)
{
    char *path = sbx_xasprintf("/v1/sandbox/%s/tunnel/%d", id, port);
    struct sbx__http_req req = {.method = "POST", .path = path};
    struct sbx__http_resp resp;
    json_t *ans = NULL;
    sbx__http_resp_init(&resp);
    int rc = call(c, &req, "POST /v1/sandbox/ID/tunnel/PORT", &resp, err);
    if (rc == 0)
        ans = json_loadb(resp.body.data, resp.body.len, 0, NULL);
    const char *url = json_string_value(json_object_get(ans, "url"));
    if (rc == 0 && (!url || (strncmp(url, "https://", 8) != 0 && strncmp(url, "http://", 7) != 0) ||
                    strpbrk(url, " \r\n\t")))
        rc = sbx_error_set(err, SBX_E_API, 0,
                           "the Cloudflare Sandbox Bridge at '%s' gave no tunnel URL for port %d",
                           c->url, port);
    if (rc == 0)
        *out = sbx_xstrdup(url);
    json_decref(ans);
    sbx__http_resp_release(&resp);
    free(path);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Short commands */

struct run_ctx {
    struct sbx__shell_run *out;
    int have_exit;
    char failed[256]; /* the bridge's error event, cleaned */
};

static int run_event(const char *event, const char *data, size_t n, void *ud, struct sbx_error *err)
{
    struct run_ctx *x = ud;
    if (strcmp(event, "stdout") == 0)
        return sbx_b64_decode(data, n, &x->out->out, err);
    if (strcmp(event, "stderr") == 0)
        return sbx_b64_decode(data, n, &x->out->err, err);
    json_t *j = NULL;
    if (strcmp(event, "exit") == 0 || strcmp(event, "error") == 0)
        j = json_loadb(data, n, 0, NULL);
    if (strcmp(event, "exit") == 0) {
        json_t *code = json_object_get(j, "exit_code");
        if (!json_is_integer(code)) {
            json_decref(j);
            return sbx_error_set(err, SBX_E_PARSE, 0, "an exit event without its exit_code");
        }
        x->out->code = (int)json_integer_value(code);
        x->have_exit = 1;
    } else if (strcmp(event, "error") == 0) {
        const char *m = json_string_value(json_object_get(j, "error"));
        sbx__wire_clean(m ? m : "(no message)", strlen(m ? m : "(no message)"), x->failed,
                        sizeof(x->failed));
    }
    json_decref(j);
    return 0;
}

static json_t *exec_body(const char *const *argv, int64_t timeout_ms)
{
    json_t *a = json_array();
    for (const char *const *p = argv; *p; p++)
        sbx_json_append(a, sbx_json_str(*p));
    json_t *b = json_object();
    sbx_json_set(b, "argv", a);
    if (timeout_ms > 0)
        sbx_json_set(b, "timeout_ms", json_integer(timeout_ms));
    return b;
}

int sbx__cf_run(struct sbx__cf_conf *c, const char *id, const char *const *argv,
                struct sbx__shell_run *out, struct sbx_error *err)
{
    for (const char *const *p = argv; *p; p++)
        if (!sbx_utf8_valid(*p, strlen(*p)))
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "'%s': the Sandbox Bridge takes UTF-8 text only (its exec is "
                                 "JSON): a name or value that is not cannot be sent",
                                 argv[0]);
    struct run_ctx x = {.out = out};
    struct sbx__sse sse;
    sbx__sse_init(&sse, SBX__CF_EVENT_MAX, run_event, &x);
    char *path = sbx_xasprintf("/v1/sandbox/%s/exec", id);
    json_t *body = exec_body(argv, SBX__CF_RUN_MS);
    struct sbx__http_req req = {.method = "POST",
                                .path = path,
                                .json = body,
                                .sink = sbx__http_sink_sse,
                                .sink_ud = &sse,
                                .timeout_ms = SBX__CF_RUN_MS + 30000};
    struct sbx__http_resp resp;
    sbx__http_resp_init(&resp);
    out->code = -1;
    int rc = call(c, &req, "POST /v1/sandbox/ID/exec", &resp, err);
    if (rc == 0)
        rc = sbx__sse_finish(&sse, err);
    if (rc == 0 && x.failed[0])
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0,
                           "sandbox '%s': the Sandbox Bridge could not run '%s': %s", id, argv[0],
                           x.failed);
    else if (rc == 0 && !x.have_exit)
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0,
                           "sandbox '%s': the Sandbox Bridge ended '%s' without its exit status",
                           id, argv[0]);
    sbx__http_resp_release(&resp);
    json_decref(body);
    sbx__sse_release(&sse);
    free(path);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * File contents */

static char *file_path(const char *id, const char *abs)
{
    char *e = sbx__http_escape(abs[0] == '/' ? abs + 1 : abs, 1);
    char *p = sbx_xasprintf("/v1/sandbox/%s/file/%s", id, e);
    free(e);
    return p;
}

struct bounded_fd {
    int fd;
    uint64_t left;
    const char *abs;
};

static int sink_bounded(const uint8_t *p, size_t n, void *ud, struct sbx_error *err)
{
    struct bounded_fd *b = ud;
    if (n > b->left)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "'%s' grew past the size it had", b->abs);
    b->left -= n;
    return sbx__http_sink_fd(p, n, &b->fd, err);
}

int sbx__cf_file_get(struct sbx__cf_conf *c, const char *id, const char *abs, int fd, uint64_t max,
                     struct sbx_error *err)
{
    char *path = file_path(id, abs);
    struct bounded_fd b = {.fd = fd, .left = max, .abs = abs};
    struct sbx__http_req req = {
            .path = path, .sink = sink_bounded, .sink_ud = &b, .timeout_ms = -1};
    struct sbx__http_resp resp;
    sbx__http_resp_init(&resp);
    int rc = sbx__http_call(c->ep, &req, &resp, err);
    if (rc == 0 && resp.status == 404)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "no file '%s' in sandbox '%s'", abs, id);
    else if (rc == 0 && resp.status >= 400)
        rc = sbx__cf_status_error(c, resp.status, resp.body.data, resp.body.len,
                                  "GET /v1/sandbox/ID/file", err);
    sbx__http_resp_release(&resp);
    free(path);
    return rc;
}

int sbx__cf_read_all(int fd, uint64_t max, struct sbx_buf *out, const char *what,
                     struct sbx_error *err)
{
    char buf[65536];
    for (;;) {
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return sbx_error_set(err, SBX_E_IO, errno, "cannot read %s", what);
        if (n == 0)
            return 0;
        if (out->len + (size_t)n > max)
            return sbx_error_set(err, SBX_E_TOOBIG, 0,
                                 "%s is over %llu MiB, the most the Sandbox Bridge takes", what,
                                 (unsigned long long)(max >> 20));
        int rc = sbx_buf_add(out, buf, (size_t)n, err);
        if (rc < 0)
            return rc;
    }
}

int sbx__cf_file_put(struct sbx__cf_conf *c, const char *id, const char *abs, int fd, uint64_t size,
                     struct sbx_error *err)
{
    if (size > SBX__CF_FILE_MAX)
        return sbx_error_set(err, SBX_E_TOOBIG, 0,
                             "'%s': the Sandbox Bridge takes files of at most %llu MiB", abs,
                             (unsigned long long)(SBX__CF_FILE_MAX >> 20));
    /* In memory (at most 32 MiB): a request the worker refused with 429 or 503 goes again. */
    struct sbx_buf body;
    sbx_buf_init(&body, SBX_BUF_NOLIMIT);
    int rc = sbx__cf_read_all(fd, size, &body, "a staged file", err);
    if (rc < 0) {
        sbx_buf_release(&body);
        return rc;
    }
    char *path = file_path(id, abs);
    struct sbx__http_req req = {.method = "PUT",
                                .path = path,
                                .body = body.data ? body.data : "",
                                .body_len = body.len,
                                .timeout_ms = -1};
    struct sbx__http_resp resp;
    sbx__http_resp_init(&resp);
    rc = call(c, &req, "PUT /v1/sandbox/ID/file", &resp, err);
    sbx__http_resp_release(&resp);
    sbx_buf_release(&body);
    free(path);
    return rc;
}
