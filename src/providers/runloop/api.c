/* Runloop's devbox API through the remote layer (src/sandbox/wire/http.h): the endpoint with
 * the bearer key, JSON calls with errors that name the service and what was wrong, the long
 * polls of wait_for_status, an execution's output as SSE, files up (multipart) and down, and
 * short fixed commands run to completion. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "providers/runloop/runloop.h"
#include "sandbox/wire/http.h"
#include "sandbox/wire/sse.h"
#include "sbx/buf.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/time.h"

#define STREAM_PAUSE_MS 500

/* Into a buffer without a limit: an append cannot fail then (allocation failure aborts). */
static inline void keep(int rc)
{
    (void)rc;
}

struct sbx__rl_conf *sbx__rl_conf_ref(struct sbx__rl_conf *c)
{
    __atomic_add_fetch(&c->refs, 1, __ATOMIC_SEQ_CST);
    return c;
}

void sbx__rl_conf_unref(struct sbx__rl_conf *c)
{
    if (!c || __atomic_sub_fetch(&c->refs, 1, __ATOMIC_SEQ_CST) > 0)
        return;
    sbx__endpoint_free(c->ep);
    pthread_mutex_destroy(&c->lock);
    free(c->url);
    free(c->ca_file);
    free(c->key_what);
    json_decref(c->key_ref);
    free(c);
}

int sbx__rl_valid_id(const char *id)
{
    size_t n = id ? strlen(id) : 0;
    if (n == 0 || n > SBX__RL_ID_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = id[i];
        if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
              ch == '_' || ch == '-'))
            return 0;
    }
    return 1;
}

/* The endpoint, made (and the key read) by the first call. */
static int endpoint(struct sbx__rl_conf *c, struct sbx__endpoint **out, struct sbx_error *err)
{
    int rc = 0;
    pthread_mutex_lock(&c->lock);
    if (!c->ep) {
        struct sbx__endpoint_opts o = {.url = c->url,
                                       .name = "the Runloop API",
                                       .ca_file = c->ca_file,
                                       .auth = SBX__AUTH_BEARER,
                                       .token = {.ref = c->key_ref},
                                       .max_retries = 3,
                                       .max_retry_wait_ms = 60000};
        rc = sbx__endpoint_new(&o, &c->ep, err);
        if (rc == -SBX_E_NOTFOUND)
            rc = sbx_error_set(err, SBX_E_PERM, 0, "no Runloop API key: %s is not set (%s)",
                               c->key_what, err->msg);
    }
    if (rc == 0)
        *out = sbx__endpoint_ref(c->ep);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

/* Runloop's words for an error status (sbx__http_words_fn). */
static int rl_words(void *ctx, long status, const char *what, const char *msg,
                    struct sbx_error *err)
{
    struct sbx__rl_conf *c = ctx;
    (void)what;
    if (status == 401 || status == 403)
        return sbx_error_set(err, SBX_E_PERM, 0, "the Runloop API refused the key from %s: %s",
                             c->key_what, msg[0] ? msg : "(no message)");
    if (status == 429)
        return sbx_error_set(err, SBX_E_API, 0,
                             "the Runloop API is rate limiting or over quota (HTTP 429, retries "
                             "exhausted): %s",
                             msg);
    if (status == 404)
        return sbx_error_set(err, SBX_E_NOTFOUND, 0, "the Runloop API has no such thing: %s", msg);
    return 0;
}

static int status_error(struct sbx__rl_conf *c, struct sbx__endpoint *ep, long status,
                        const struct sbx_buf *body, const char *what, struct sbx_error *err)
{
    return sbx__http_service_error(ep, status, body->data, body->len, what, rl_words, c, err);
}

/* One call: status and body into resp; a transport error is an error. */
static int call(struct sbx__rl_conf *c, const struct sbx__http_req *req,
                struct sbx__http_resp *resp, struct sbx__endpoint **epp, struct sbx_error *err)
{
    struct sbx__endpoint *ep = NULL;
    int rc = endpoint(c, &ep, err);
    if (rc < 0)
        return rc;
    rc = sbx__http_call(ep, req, resp, err);
    *epp = ep;
    return rc;
}

int sbx__rl_api(struct sbx__rl_conf *c, const char *method, const char *path, const json_t *body,
                json_t **out, struct sbx_error *err)
{
    struct sbx__http_req req = {.method = method, .path = path, .json = body};
    struct sbx__http_resp resp;
    struct sbx__endpoint *ep = NULL;
    json_t *empty = NULL;
    if (!body && strcmp(method, "POST") == 0)
        req.json = empty = json_object();
    sbx__http_resp_init(&resp);
    int rc = call(c, &req, &resp, &ep, err);
    char what[256];
    snprintf(what, sizeof(what), "%s %s", method, path);
    if (rc == 0 && resp.status >= 300)
        rc = status_error(c, ep, resp.status, &resp.body, what, err);
    if (rc == 0 && out) {
        json_error_t je;
        /* An execution's answer carries its output so far, which may hold NUL bytes. */
        *out = resp.body.len ? json_loadb(resp.body.data, resp.body.len, JSON_ALLOW_NUL, &je)
                             : NULL;
        if (resp.body.len && !*out)
            rc = sbx_error_set(err, SBX_E_API, 0, "the Runloop API answered %s with no JSON", what);
    }
    sbx__http_resp_release(&resp);
    sbx__endpoint_free(ep);
    json_decref(empty);
    return rc;
}

static int status_in(const char *st, const char *const *want)
{
    for (; st && *want; want++)
        if (strcmp(st, *want) == 0)
            return 1;
    return 0;
}

int sbx__rl_wait_status(struct sbx__rl_conf *c, const char *path, const char *const *want,
                        int64_t total_ms, const volatile int *abort, json_t **out,
                        struct sbx_error *err)
{
    json_t *body = json_object(), *list = json_array();
    for (const char *const *w = want; *w; w++)
        sbx_json_append(list, sbx_json_str(*w));
    sbx_json_set(body, "statuses", list);
    int64_t deadline = sbx_deadline_after_ms(total_ms);
    int rc;
    for (;;) {
        struct sbx__http_req req = {
                .method = "POST", .path = path, .json = body, .timeout_ms = SBX__RL_POLL_MS};
        struct sbx__http_resp resp;
        struct sbx__endpoint *ep = NULL;
        sbx__http_resp_init(&resp);
        rc = call(c, &req, &resp, &ep, err);
        if (rc == 0 && resp.status == 408) {
            sbx__http_resp_release(&resp);
            sbx__endpoint_free(ep);
            if (sbx_deadline_poll_ms(deadline) == 0 || (abort && *abort)) {
                rc = sbx_error_set(err, SBX_E_TIMEOUT, 0,
                                   "the Runloop API did not reach %s in time", want[0]);
                break;
            }
            continue;
        }
        if (rc == 0 && resp.status >= 300)
            rc = status_error(c, ep, resp.status, &resp.body, path, err);
        json_error_t je;
        json_t *ans = rc == 0 ? json_loadb(resp.body.data ? resp.body.data : "", resp.body.len,
                                           JSON_ALLOW_NUL, &je)
                              : NULL;
        if (rc == 0 && !ans)
            rc = sbx_error_set(err, SBX_E_API, 0, "the Runloop API answered %s with no JSON", path);
        sbx__http_resp_release(&resp);
        sbx__endpoint_free(ep);
        if (rc < 0)
            break;
        const char *st = json_string_value(json_object_get(ans, "status"));
        if (status_in(st, want) || sbx_deadline_poll_ms(deadline) == 0 || (abort && *abort)) {
            *out = ans;
            break;
        }
        json_decref(ans);
    }
    json_decref(body);
    return rc;
}

struct stream_ctx {
    sbx__rl_out_fn *fn;
    void *ud;
    long long offset; /* where a new stream starts: the last event's offset */
};

static int on_event(const char *event, const char *data, size_t n, void *ud, struct sbx_error *err)
{
    struct stream_ctx *sc = ud;
    if (strcmp(event, "error") == 0)
        return sbx_error_set(err, SBX_E_API, 0, "the Runloop API's output stream failed");
    json_error_t je;
    json_t *j = json_loadb(data, n, JSON_ALLOW_NUL, &je);
    const json_t *o = json_object_get(j, "output"), *off = json_object_get(j, "offset");
    int rc = 0;
    if (json_is_string(o) && json_string_length(o))
        rc = sc->fn(sc->ud, json_string_value(o), json_string_length(o));
    if (json_is_integer(off) && json_integer_value(off) > sc->offset)
        sc->offset = (long long)json_integer_value(off);
    json_decref(j);
    return rc < 0 ? sbx_error_set(err, SBX_E_TOOBIG, 0, "the command's output is over its limit")
                  : 0;
}

/* One stream from sc->offset until the service ends it. *idle: it answered 408 (its hold ran
 * out) rather than a stream. An event cut by the end of a stream is never handed on: the next
 * stream sends it again from the offset. */
static int stream_once(struct sbx__rl_conf *c, const char *id, const char *eid, const char *field,
                       struct stream_ctx *sc, int *idle, struct sbx_error *err)
{
    struct sbx__sse sse;
    sbx__sse_init(&sse, SBX__RL_EVENT_MAX, on_event, sc);
    char *path = sbx_xasprintf("/v1/devboxes/%s/executions/%s/stream_%s_updates?offset=%lld", id,
                               eid, field, sc->offset);
    static const char *const hdrs[] = {"Accept: text/event-stream", NULL};
    struct sbx__http_req req = {.path = path,
                                .headers = hdrs,
                                .sink = sbx__http_sink_sse,
                                .sink_ud = &sse,
                                .timeout_ms = SBX__RL_STREAM_MS};
    struct sbx__http_resp resp;
    struct sbx__endpoint *ep = NULL;
    sbx__http_resp_init(&resp);
    int rc = call(c, &req, &resp, &ep, err);
    /* Bounded, so that a caller who stops can: a stream cut by its bound is started again. */
    if (rc == -SBX_E_TIMEOUT) {
        rc = 0;
        resp.status = 408;
    }
    *idle = rc == 0 && resp.status == 408;
    if (rc == 0 && resp.status >= 300 && !*idle)
        rc = status_error(c, ep, resp.status, &resp.body, path, err);
    sbx__http_resp_release(&resp);
    sbx__endpoint_free(ep);
    sbx__sse_release(&sse);
    free(path);
    return rc;
}

/* Whether execution eid has ended. */
static int completed(struct sbx__rl_conf *c, const char *id, const char *eid, int *done,
                     struct sbx_error *err)
{
    char *path = sbx_xasprintf("/v1/devboxes/%s/executions/%s?last_n=0", id, eid);
    json_t *ans = NULL;
    int rc = sbx__rl_api(c, "GET", path, NULL, &ans, err);
    const char *st = json_string_value(json_object_get(ans, "status"));
    *done = rc == 0 && st && strcmp(st, "completed") == 0;
    json_decref(ans);
    free(path);
    return rc;
}

int sbx__rl_stream(struct sbx__rl_conf *c, const char *id, const char *eid, const char *field,
                   sbx__rl_out_fn *fn, void *ud, const volatile int *abort, struct sbx_error *err)
{
    struct stream_ctx sc = {fn, ud, 0};
    /* The service may end a stream (or answer 408) while the command still runs, after an
     * idle time of its own: a new one starts at the last offset, as Runloop's own client does.
     * The output is whole once a stream that began after the command ended has ended. */
    int done = 0;
    for (;;) {
        long long before = sc.offset;
        int idle = 0;
        int rc = stream_once(c, id, eid, field, &sc, &idle, err);
        if (rc < 0)
            return rc;
        if (done && !idle)
            return 0;
        if (abort && *abort)
            return sbx_error_set(err, SBX_E_CANCELLED, 0, "output stream dropped");
        if ((rc = completed(c, id, eid, &done, err)) < 0)
            return rc;
        if (!done && !idle && sc.offset == before)
            sbx_sleep_ms(STREAM_PAUSE_MS);
    }
}

struct bounded {
    int fd;
    uint64_t left;
    const char *abs;
};

/* Into the fd, at most the bound: a larger file is SBX_E_TOOBIG. */
static int bounded_sink(const uint8_t *p, size_t n, void *ud, struct sbx_error *err)
{
    struct bounded *b = ud;
    if (n > b->left)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "'%s' is larger than the limit", b->abs);
    b->left -= n;
    return sbx_fd_write_all(b->fd, p, n, err);
}

int sbx__rl_file_get(struct sbx__rl_conf *c, const char *id, const char *abs, int fd, uint64_t max,
                     struct sbx_error *err)
{
    struct bounded bd = {.fd = fd, .left = max, .abs = abs};
    char *path = sbx_xasprintf("/v1/devboxes/%s/download_file", id);
    json_t *body = json_pack("{s:s}", "path", abs);
    static const char *const hdrs[] = {"Accept: application/octet-stream", NULL};
    struct sbx__http_req req = {.method = "POST",
                                .path = path,
                                .json = body,
                                .headers = hdrs,
                                .sink = bounded_sink,
                                .sink_ud = &bd,
                                .timeout_ms = -1};
    struct sbx__http_resp resp;
    struct sbx__endpoint *ep = NULL;
    sbx__http_resp_init(&resp);
    int rc = call(c, &req, &resp, &ep, err);
    if (rc == 0 && resp.status >= 300)
        rc = status_error(c, ep, resp.status, &resp.body, path, err);
    sbx__http_resp_release(&resp);
    sbx__endpoint_free(ep);
    json_decref(body);
    free(path);
    return rc;
}

/* A multipart/form-data body: the head (the path field and the file part's headers), the
 * file's bytes from fd, the tail. */
struct mp {
    struct sbx_buf head, tail;
    size_t head_off, tail_off;
    int fd;
    uint64_t left;
};

static long mp_read(void *ud, void *buf, size_t n, struct sbx_error *err)
{
    struct mp *m = ud;
    if (m->head_off < m->head.len) {
        size_t k = m->head.len - m->head_off < n ? m->head.len - m->head_off : n;
        memcpy(buf, m->head.data + m->head_off, k);
        m->head_off += k;
        return (long)k;
    }
    if (m->left) {
        size_t want = m->left < n ? (size_t)m->left : n;
        ssize_t r;
        do
            r = read(m->fd, buf, want);
        while (r < 0 && errno == EINTR);
        if (r < 0)
            return sbx_error_errno(err, errno, "read");
        if (r == 0)
            return sbx_error_set(err, SBX_E_IO, 0, "the file to upload ended early");
        m->left -= (uint64_t)r;
        return (long)r;
    }
    size_t k = m->tail.len - m->tail_off < n ? m->tail.len - m->tail_off : n;
    memcpy(buf, m->tail.data + m->tail_off, k);
    m->tail_off += k;
    return (long)k;
}

int sbx__rl_file_put(struct sbx__rl_conf *c, const char *id, const char *abs, int fd, uint64_t size,
                     struct sbx_error *err)
{
    char boundary[48];
    snprintf(boundary, sizeof(boundary), "sbx-%016llx", (unsigned long long)sbx_time_mono_ns());
    struct mp m = {.fd = fd, .left = size};
    sbx_buf_init(&m.head, SBX_BUF_NOLIMIT);
    sbx_buf_init(&m.tail, SBX_BUF_NOLIMIT);
    keep(sbx_buf_addf(&m.head, NULL,
                      "--%s\r\nContent-Disposition: form-data; name=\"path\"\r\n\r\n%s\r\n"
                      "--%s\r\nContent-Disposition: form-data; name=\"file\"; "
                      "filename=\"file\"\r\nContent-Type: application/octet-stream\r\n\r\n",
                      boundary, abs, boundary));
    keep(sbx_buf_addf(&m.tail, NULL, "\r\n--%s--\r\n", boundary));
    char *ctype = sbx_xasprintf("multipart/form-data; boundary=%s", boundary);
    char *path = sbx_xasprintf("/v1/devboxes/%s/upload_file", id);
    struct sbx__http_req req = {.method = "POST",
                                .path = path,
                                .source = mp_read,
                                .source_ud = &m,
                                .upload_size = (int64_t)(m.head.len + size + m.tail.len),
                                .content_type = ctype,
                                .timeout_ms = -1,
                                .no_retry = 1};
    struct sbx__http_resp resp;
    struct sbx__endpoint *ep = NULL;
    sbx__http_resp_init(&resp);
    int rc = call(c, &req, &resp, &ep, err);
    if (rc == 0 && resp.status >= 300)
        rc = status_error(c, ep, resp.status, &resp.body, path, err);
    sbx__http_resp_release(&resp);
    sbx__endpoint_free(ep);
    sbx_buf_release(&m.head);
    sbx_buf_release(&m.tail);
    free(ctype);
    free(path);
    return rc;
}

static int into_buf(void *ud, const char *p, size_t n)
{
    return sbx_buf_add(ud, p, n, NULL) < 0 ? -1 : 0;
}

int sbx__rl_run(struct sbx__rl_conf *c, const char *id, const char *const *argv,
                struct sbx__shell_run *out, struct sbx_error *err)
{
    char *cmd = sbx__shellfs_quote_argv(argv);
    json_t *body = json_pack("{s:s}", "command", cmd), *ans = NULL, *fin = NULL;
    char *path = sbx_xasprintf("/v1/devboxes/%s/execute_async", id);
    int rc = sbx__rl_api(c, "POST", path, body, &ans, err);
    const char *eid = json_string_value(json_object_get(ans, "execution_id"));
    if (rc == 0 && (!eid || !sbx__rl_valid_id(eid)))
        rc = sbx_error_set(err, SBX_E_API, 0, "the Runloop API started a command without an id");
    if (rc == 0)
        rc = sbx__rl_stream(c, id, eid, "stdout", into_buf, &out->out, NULL, err);
    if (rc == 0)
        rc = sbx__rl_stream(c, id, eid, "stderr", into_buf, &out->err, NULL, err);
    if (rc == 0) {
        char *wp = sbx_xasprintf("/v1/devboxes/%s/executions/%s/wait_for_status?last_n=0", id, eid);
        static const char *const done[] = {"completed", NULL};
        rc = sbx__rl_wait_status(c, wp, done, 600000, NULL, &fin, err);
        free(wp);
    }
    if (rc == 0) {
        const json_t *st = json_object_get(fin, "exit_status");
        out->code = json_is_integer(st) ? (int)json_integer_value(st) : -1;
    }
    json_decref(fin);
    json_decref(ans);
    json_decref(body);
    free(path);
    free(cmd);
    return rc;
}
