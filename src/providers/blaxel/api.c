/* Blaxel's two APIs through the remote layer (src/sandbox/wire/http.h): the control plane
 * (sandboxes, previews) and each sandbox's own API (processes, filesystem), both with the
 * bearer key and the workspace header; errors that name the service and what was wrong; a
 * command's event stream (NDJSON); whole files up (multipart) and down; short fixed commands
 * run to completion. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "providers/blaxel/blaxel.h"
#include "sandbox/wire/http.h"
#include "sandbox/wire/wire.h"
#include "sbx/buf.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/time.h"

/* Into a buffer without a limit: an append cannot fail then (allocation failure aborts). */
static inline void keep(int rc)
{
    (void)rc;
}

struct sbx__bl_conf *sbx__bl_conf_ref(struct sbx__bl_conf *c)
{
    __atomic_add_fetch(&c->refs, 1, __ATOMIC_SEQ_CST);
    return c;
}

void sbx__bl_conf_unref(struct sbx__bl_conf *c)
{
    if (!c || __atomic_sub_fetch(&c->refs, 1, __ATOMIC_SEQ_CST) > 0)
        return;
    sbx__endpoint_free(c->api);
    sbx__endpoint_free(c->run);
    pthread_mutex_destroy(&c->lock);
    free(c->api_url);
    free(c->run_url);
    free(c->workspace);
    free(c->ws_header);
    free(c->ca_file);
    free(c->key_what);
    json_decref(c->key_ref);
    free(c);
}

int sbx__bl_valid_name(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > SBX__BL_NAME_MAX || !(name[0] >= 'a' && name[0] <= 'z'))
        return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = name[i];
        if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || ch == '-'))
            return 0;
    }
    return 1;
}

/* Both endpoints, made (and the key read) by the first call; *out: the one asked for. */
static int endpoint(struct sbx__bl_conf *c, int run, struct sbx__endpoint **out,
                    struct sbx_error *err)
{
    int rc = 0;
    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < 2 && rc == 0; i++) {
        struct sbx__endpoint **ep = i ? &c->run : &c->api;
        if (*ep)
            continue;
        struct sbx__endpoint_opts o = {.url = i ? c->run_url : c->api_url,
                                       .name = i ? "the Blaxel sandbox API" : "the Blaxel API",
                                       .ca_file = c->ca_file,
                                       .auth = SBX__AUTH_BEARER,
                                       .token = {.ref = c->key_ref},
                                       .max_retries = 3,
                                       .max_retry_wait_ms = 60000};
        rc = sbx__endpoint_new(&o, ep, err);
        if (rc == -SBX_E_NOTFOUND)
            rc = sbx_error_set(err, SBX_E_PERM, 0, "no Blaxel API key: %s is not set (%s)",
                               c->key_what, err->msg);
    }
    if (rc == 0)
        *out = sbx__endpoint_ref(run ? c->run : c->api);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

/* Blaxel's words for an error status (sbx__http_words_fn). */
static int bl_words(void *ctx, long status, const char *what, const char *msg,
                    struct sbx_error *err)
{
    struct sbx__bl_conf *c = ctx;
    (void)what;
    if (status == 401 || status == 403)
        return sbx_error_set(err, SBX_E_PERM, 0,
                             "the Blaxel API refused the key from %s for workspace '%s': %s",
                             c->key_what, c->workspace, msg[0] ? msg : "(no message)");
    if (status == 402)
        return sbx_error_set(err, SBX_E_API, 0,
                             "the Blaxel workspace '%s' is over its usage limit (HTTP 402): %s",
                             c->workspace, msg);
    if (status == 429)
        return sbx_error_set(err, SBX_E_API, 0,
                             "the Blaxel API is rate limiting (HTTP 429, retries exhausted): %s",
                             msg);
    if (status == 404)
        return sbx_error_set(err, SBX_E_NOTFOUND, 0, "the Blaxel API has no such thing: %s", msg);
    return 0;
}

static int status_error(struct sbx__bl_conf *c, struct sbx__endpoint *ep, long status,
                        const struct sbx_buf *body, const char *what, struct sbx_error *err)
{
    return sbx__http_service_error(ep, status, body->data, body->len, what, bl_words, c, err);
}

/* The path of rest on sandbox name's API. Caller frees. */
static char *sb_path(const struct sbx__bl_conf *c, const char *name, const char *rest)
{
    char *ws = sbx__http_escape(c->workspace, 0);
    char *p = sbx_xasprintf("/%s/sandboxes/%s/%s", ws, name, rest);
    free(ws);
    return p;
}

/* One request to an endpoint with the workspace header and extra (may be NULL) added. */
static int call(struct sbx__bl_conf *c, int run, struct sbx__http_req *req, const char *extra,
                struct sbx__http_resp *resp, struct sbx__endpoint **epp, struct sbx_error *err)
{
    struct sbx__endpoint *ep = NULL;
    int rc = endpoint(c, run, &ep, err);
    if (rc < 0)
        return rc;
    const char *hdrs[] = {c->ws_header, extra, NULL};
    req->headers = hdrs;
    rc = sbx__http_call(ep, req, resp, err);
    req->headers = NULL;
    *epp = ep;
    return rc;
}

static int json_call(struct sbx__bl_conf *c, int run, const char *method, const char *path,
                     const json_t *body, json_t **out, struct sbx_error *err)
{
    struct sbx__http_req req = {.method = method, .path = path, .json = body};
    struct sbx__http_resp resp;
    struct sbx__endpoint *ep = NULL;
    sbx__http_resp_init(&resp);
    int rc = call(c, run, &req, NULL, &resp, &ep, err);
    char what[256];
    snprintf(what, sizeof(what), "%s %s", method, path);
    if (rc == 0 && resp.status >= 300)
        rc = status_error(c, ep, resp.status, &resp.body, what, err);
    if (rc == 0 && out) {
        *out = NULL;
        if (resp.body.len && sbx_json_parse(resp.body.data, resp.body.len, NULL, out, err) < 0)
            rc = sbx_error_set(err, SBX_E_API, 0, "the Blaxel API answered %s with no JSON", what);
    }
    sbx__http_resp_release(&resp);
    sbx__endpoint_free(ep);
    return rc;
}

int sbx__bl_api(struct sbx__bl_conf *c, const char *method, const char *path, const json_t *body,
                json_t **out, struct sbx_error *err)
{
    return json_call(c, 0, method, path, body, out, err);
}

int sbx__bl_sb(struct sbx__bl_conf *c, const char *name, const char *method, const char *rest,
               const json_t *body, json_t **out, struct sbx_error *err)
{
    char *path = sb_path(c, name, rest);
    int rc = json_call(c, 1, method, path, body, out, err);
    free(path);
    return rc;
}

int sbx__bl_sb_raw(struct sbx__bl_conf *c, const char *name, const char *method, const char *rest,
                   const void *body, size_t n, struct sbx_error *err)
{
    char *path = sb_path(c, name, rest);
    struct sbx__http_req req = {.method = method, .path = path, .body = body, .body_len = n};
    struct sbx__http_resp resp;
    struct sbx__endpoint *ep = NULL;
    sbx__http_resp_init(&resp);
    int rc = call(c, 1, &req, NULL, &resp, &ep, err);
    if (rc == 0 && resp.status >= 300)
        rc = status_error(c, ep, resp.status, &resp.body, path, err);
    sbx__http_resp_release(&resp);
    sbx__endpoint_free(ep);
    free(path);
    return rc;
}

/* A command's event stream: NDJSON lines {"type": "stdout"|"stderr"|"result"|"error"|
 * "keepalive", "data": TEXT} (a keepalive every few seconds while the command is silent).
 * Its own line reader rather than the shared NDJSON decoder: output may hold NUL bytes (JSON
 * \u0000), which the house JSON reader refuses. A line is kept up to SBX__BL_EVENT_MAX; the
 * result line repeats the command's whole output (stdout, stderr and both), so a longer one is
 * not kept but skimmed for its exit code (skim_byte). */
struct stream_ctx {
    sbx__bl_out_fn *fn;
    void *ud;
    const volatile int *abort;
    const char *sandbox;
    struct sbx_buf line;
    int skimming;          /* the line in hand is over the bound */
    unsigned run;          /* backslashes just before the current byte */
    size_t matched;        /* bytes of SKIM_KEY matched after a key's opening quote */
    int in_code, code_neg; /* reading the exit code's digits */
    long long code;        /* the exit code read so far */
    int have_code;         /* a skimmed result line gave an exit code */
    json_t *result;        /* the last result, parsed */
};

/* The result's data is a JSON text inside a JSON string, so its key "exitCode" appears as
 * \"exitCode\": after a quote escaped once: a run of backslashes before that quote whose
 * length is 1 modulo 4 (a quote inside one of the result's own strings has 3 modulo 4). */
static const char SKIM_KEY[] = "exitCode\\\":";

static void skim_byte(struct stream_ctx *sc, char ch)
{
    if (sc->in_code) {
        if (ch == '-' && !sc->code_neg && sc->code == 0)
            sc->code_neg = 1;
        else if (ch >= '0' && ch <= '9' && sc->code < 100000)
            sc->code = sc->code * 10 + (ch - '0');
        else if (ch != ' ') {
            sc->in_code = 0;
            sc->have_code = 1;
            sc->code = sc->code_neg ? -sc->code : sc->code;
        }
    } else if (sc->matched && ch == SKIM_KEY[sc->matched - 1]) {
        if (++sc->matched == sizeof(SKIM_KEY)) {
            sc->matched = 0;
            sc->in_code = 1;
            sc->code = 0;
            sc->code_neg = 0;
        }
    } else {
        sc->matched = ch == '"' && sc->run % 4 == 1;
    }
    sc->run = ch == '\\' ? sc->run + 1 : 0;
}

/* One whole event line. */
static int on_line(struct stream_ctx *sc, struct sbx_error *err)
{
    const char *d = sc->line.data;
    size_t n = sc->line.len;
    if (n && d[n - 1] == '\r')
        n--;
    if (n == 0 || strspn(d, " \t") == n)
        return 0;
    json_error_t je;
    json_t *v = sbx_json_scan_depth(d, n, 8) <= 8 ? json_loadb(d, n, JSON_ALLOW_NUL, &je) : NULL;
    if (!v)
        return sbx_error_set(err, SBX_E_PARSE, 0,
                             "the Blaxel sandbox API sent an event that is not JSON");
    const char *type = json_string_value(json_object_get(v, "type"));
    const json_t *data = json_object_get(v, "data");
    int rc = 0;
    if (type && strcmp(type, "error") == 0) {
        char msg[512];
        sbx__wire_clean(json_is_string(data) ? json_string_value(data) : "",
                        json_is_string(data) ? json_string_length(data) : 0, msg, sizeof(msg));
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "the command failed in sandbox '%s': %s",
                           sc->sandbox, msg[0] ? msg : "(no message)");
    } else if (type && json_is_string(data) && strcmp(type, "result") == 0) {
        json_decref(sc->result);
        const char *t = json_string_value(data);
        size_t tn = json_string_length(data);
        sc->result =
                sbx_json_scan_depth(t, tn, 8) <= 8 ? json_loadb(t, tn, JSON_ALLOW_NUL, &je) : NULL;
        if (!json_is_object(sc->result))
            rc = sbx_error_set(err, SBX_E_API, 0,
                               "the Blaxel sandbox API sent a result that is not an object");
    } else if (type && json_is_string(data) && json_string_length(data)) {
        int stream = strcmp(type, "stdout") == 0 ? 1 : strcmp(type, "stderr") == 0 ? 2 : 0;
        if (stream && sc->fn(sc->ud, stream, json_string_value(data), json_string_length(data)) < 0)
            rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "the command's output is over its limit");
    }
    json_decref(v);
    return rc;
}

static int stream_sink(const uint8_t *p, size_t n, void *ud, struct sbx_error *err)
{
    struct stream_ctx *sc = ud;
    if (sc->abort && *sc->abort)
        return sbx_error_set(err, SBX_E_CANCELLED, 0, "command stream dropped");
    while (n) {
        const uint8_t *nl = memchr(p, '\n', n);
        size_t k = nl ? (size_t)(nl - p) : n;
        if (!sc->skimming && sc->line.len + k > SBX__BL_EVENT_MAX) {
            /* Only the result may be that long. */
            keep(sbx_buf_add(&sc->line, p, k < 64 ? k : 64, NULL));
            size_t head = sc->line.len < 64 ? sc->line.len : 64;
            if (!memmem(sc->line.data, head, "\"result\"", 8))
                return sbx_error_set(err, SBX_E_TOOBIG, 0,
                                     "the Blaxel sandbox API sent an event over %zu bytes",
                                     SBX__BL_EVENT_MAX);
            sbx_buf_setlen(&sc->line, sc->line.len - (k < 64 ? k : 64));
            sc->skimming = 1;
            for (size_t i = 0; i < sc->line.len; i++)
                skim_byte(sc, sc->line.data[i]);
            sbx_buf_reset(&sc->line);
        }
        if (sc->skimming) {
            for (size_t i = 0; i < k; i++)
                skim_byte(sc, (char)p[i]);
        } else {
            keep(sbx_buf_add(&sc->line, p, k, NULL));
        }
        if (!nl)
            break;
        int rc = sc->skimming ? 0 : on_line(sc, err);
        sc->skimming = 0;
        sc->run = 0;
        sc->matched = 0;
        sbx_buf_reset(&sc->line);
        if (rc < 0)
            return rc;
        p += k + 1;
        n -= k + 1;
    }
    return 0;
}

int sbx__bl_process(struct sbx__bl_conf *c, const char *name, const json_t *req, sbx__bl_out_fn *fn,
                    void *ud, const volatile int *abort, json_t **result, struct sbx_error *err)
{
    struct stream_ctx sc = {.fn = fn, .ud = ud, .abort = abort, .sandbox = name};
    sbx_buf_init(&sc.line, SBX_BUF_NOLIMIT);
    char *path = sb_path(c, name, "process");
    struct sbx__http_req hr = {.method = "POST",
                               .path = path,
                               .json = req,
                               .sink = stream_sink,
                               .sink_ud = &sc,
                               .timeout_ms = -1,
                               .no_retry = 1};
    struct sbx__http_resp resp;
    struct sbx__endpoint *ep = NULL;
    sbx__http_resp_init(&resp);
    int rc = call(c, 1, &hr, "Accept: text/event-stream", &resp, &ep, err);
    if (rc == 0 && resp.status >= 300)
        rc = status_error(c, ep, resp.status, &resp.body, "POST process", err);
    if (rc == 0 && (sc.line.len || sc.skimming))
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0,
                           "the command's stream in sandbox '%s' was cut in the middle of an "
                           "event",
                           name);
    if (rc == 0 && !sc.result && sc.have_code)
        sc.result = json_pack("{s:I}", "exitCode", (json_int_t)sc.code);
    if (rc == 0 && !sc.result)
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0,
                           "the command's stream in sandbox '%s' ended without its result", name);
    if (rc == 0) {
        *result = sc.result;
        sc.result = NULL;
    }
    json_decref(sc.result);
    sbx_buf_release(&sc.line);
    sbx__http_resp_release(&resp);
    sbx__endpoint_free(ep);
    free(path);
    return rc;
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

int sbx__bl_file_get(struct sbx__bl_conf *c, const char *name, const char *abs, int fd,
                     uint64_t max, struct sbx_error *err)
{
    struct bounded bd = {.fd = fd, .left = max, .abs = abs};
    char *esc = sbx__http_escape(abs, 0), *rest = sbx_xasprintf("filesystem/%s", esc);
    char *path = sb_path(c, name, rest);
    struct sbx__http_req req = {
            .path = path, .sink = bounded_sink, .sink_ud = &bd, .timeout_ms = -1};
    struct sbx__http_resp resp;
    struct sbx__endpoint *ep = NULL;
    sbx__http_resp_init(&resp);
    int rc = call(c, 1, &req, "Accept: application/octet-stream", &resp, &ep, err);
    if (rc == 0 && resp.status >= 300)
        rc = status_error(c, ep, resp.status, &resp.body, "GET filesystem", err);
    sbx__http_resp_release(&resp);
    sbx__endpoint_free(ep);
    free(path);
    free(rest);
    free(esc);
    return rc;
}

/* A multipart/form-data body: the head (the fields and the file part's headers), the file's
 * bytes from fd, the tail. */
struct mp {
    struct sbx_buf head, tail;
    size_t head_off, tail_off;
    int fd;
    uint64_t left;
};

static size_t take(const struct sbx_buf *b, size_t *off, void *buf, size_t n)
{
    size_t k = b->len - *off < n ? b->len - *off : n;
    memcpy(buf, b->data + *off, k);
    *off += k;
    return k;
}

static long mp_read(void *ud, void *buf, size_t n, struct sbx_error *err)
{
    struct mp *m = ud;
    if (m->head_off < m->head.len)
        return (long)take(&m->head, &m->head_off, buf, n);
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
    return (long)take(&m->tail, &m->tail_off, buf, n);
}

int sbx__bl_file_put(struct sbx__bl_conf *c, const char *name, const char *abs, int fd,
                     uint64_t size, struct sbx_error *err)
{
    char boundary[48];
    snprintf(boundary, sizeof(boundary), "sbx-%016llx", (unsigned long long)sbx_time_mono_ns());
    struct mp m = {.fd = fd, .left = size};
    sbx_buf_init(&m.head, SBX_BUF_NOLIMIT);
    sbx_buf_init(&m.tail, SBX_BUF_NOLIMIT);
    keep(sbx_buf_addf(&m.head, NULL,
                      "--%s\r\nContent-Disposition: form-data; name=\"permissions\"\r\n\r\n0600\r\n"
                      "--%s\r\nContent-Disposition: form-data; name=\"path\"\r\n\r\n%s\r\n"
                      "--%s\r\nContent-Disposition: form-data; name=\"file\"; "
                      "filename=\"file\"\r\nContent-Type: application/octet-stream\r\n\r\n",
                      boundary, boundary, abs, boundary));
    keep(sbx_buf_addf(&m.tail, NULL, "\r\n--%s--\r\n", boundary));
    char *ctype = sbx_xasprintf("multipart/form-data; boundary=%s", boundary);
    /* The path with its '/' escaped: the sandbox API takes a path whose URL holds %2F as
     * absolute (without, it is relative to the API's own directory). */
    char *esc = sbx__http_escape(abs, 0), *rest = sbx_xasprintf("filesystem/%s", esc);
    char *path = sb_path(c, name, rest);
    struct sbx__http_req req = {.method = "PUT",
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
    int rc = call(c, 1, &req, NULL, &resp, &ep, err);
    if (rc == 0 && resp.status >= 300)
        rc = status_error(c, ep, resp.status, &resp.body, "PUT filesystem", err);
    sbx__http_resp_release(&resp);
    sbx__endpoint_free(ep);
    sbx_buf_release(&m.head);
    sbx_buf_release(&m.tail);
    free(ctype);
    free(path);
    free(rest);
    free(esc);
    return rc;
}

static int into_run(void *ud, int stream, const char *p, size_t n)
{
    struct sbx__shell_run *r = ud;
    return sbx_buf_add(stream == 1 ? &r->out : &r->err, p, n, NULL) < 0 ? -1 : 0;
}

/* A process name of sbx's: "sbx-" and 16 hex digits. */
static void process_name(char out[24])
{
    static unsigned seq;
    unsigned long long v =
            sbx_time_mono_ns() ^ ((unsigned long long)getpid() << 32) ^
            ((unsigned long long)__atomic_add_fetch(&seq, 1, __ATOMIC_SEQ_CST) << 48);
    snprintf(out, 24, "sbx-%016llx", v);
}

json_t *sbx__bl_process_req(const char *line, int want_stdin)
{
    char pname[24];
    process_name(pname);
    return json_pack("{s:s,s:s,s:b,s:b}", "command", line, "name", pname, "waitForCompletion", 1,
                     "stdin", want_stdin);
}

int sbx__bl_run(struct sbx__bl_conf *c, const char *name, const char *const *argv,
                struct sbx__shell_run *out, struct sbx_error *err)
{
    char *line = sbx__shellfs_quote_argv(argv);
    json_t *req = sbx__bl_process_req(line, 0), *res = NULL;
    int rc = sbx__bl_process(c, name, req, into_run, out, NULL, &res, err);
    if (rc == 0) {
        const json_t *code = json_object_get(res, "exitCode");
        out->code = json_is_integer(code) ? (int)json_integer_value(code) : -1;
    }
    json_decref(res);
    json_decref(req);
    free(line);
    return rc;
}
