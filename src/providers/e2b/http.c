/* HTTP for the e2b provider with libcurl: the control plane (JSON, the key in X-API-KEY,
 * retries where the service says when), and envd of each sandbox (Connect unary and server
 * streams with the JSON codec, /files). Bodies from the service are bounded; a stream is
 * handed to the Connect decoder piece by piece as it comes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "core/dl-curl.h"
#include "providers/e2b/e2b.h"
#include "sandbox/wire/connect.h"
#include "sandbox/wire/wire.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/provider.h"
#include "sbx/secret.h"
#include "sbx/time.h"

#define MSG_MAX ((size_t)8 << 20)

struct sbx__e2b_conf *sbx__e2b_conf_ref(struct sbx__e2b_conf *c)
{
    __atomic_add_fetch(&c->refs, 1, __ATOMIC_SEQ_CST);
    return c;
}

static void wipe_free(char *s)
{
    if (s) {
        explicit_bzero(s, strlen(s));
        free(s);
    }
}

void sbx__e2b_conf_unref(struct sbx__e2b_conf *c)
{
    if (!c || __atomic_sub_fetch(&c->refs, 1, __ATOMIC_SEQ_CST) > 0)
        return;
    free(c->api_url);
    free(c->sandbox_url);
    free(c->domain);
    wipe_free(c->api_key);
    free(c->key_what);
    json_decref(c->key_ref);
    free(c->ca_file);
    free(c);
}

static pthread_mutex_t key_lock = PTHREAD_MUTEX_INITIALIZER;

int sbx__e2b_conf_key(struct sbx__e2b_conf *c, struct sbx_error *err)
{
    int rc = 0;
    pthread_mutex_lock(&key_lock);
    if (!c->api_key) {
        struct sbx_secret *sec = NULL;
        rc = sbx_provider_secret(c->key_ref, "the E2B API key", &sec, err);
        if (rc == 0) {
            size_t n = 0;
            const char *v = sbx_secret_reveal(sec, &n);
            c->api_key = sbx_xstrndup(v, n);
            sbx_secret_free(sec);
        } else if (rc == -SBX_E_NOTFOUND) {
            rc = sbx_error_set(err, SBX_E_PERM, 0,
                               "no E2B API key: %s is not set (the e2b provider's api_key option "
                               "names where the key is)",
                               c->key_what);
        }
    }
    pthread_mutex_unlock(&key_lock);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * One request */

void sbx__e2b_resp_init(struct sbx__e2b_resp *r)
{
    r->status = 0;
    sbx_buf_init(&r->body, SBX_BUF_NOLIMIT);
    r->retry_after = -1;
    r->aborted = 0;
}

void sbx__e2b_resp_release(struct sbx__e2b_resp *r)
{
    sbx_buf_release(&r->body);
}

struct xfer {
    const struct sbx__e2b_req *req;
    struct sbx__e2b_resp *resp;
    uint64_t got, max;
    int too_big, write_errno;
};

static size_t on_body(char *p, size_t size, size_t nmemb, void *ud)
{
    struct xfer *x = ud;
    size_t n = size * nmemb;
    int ok = x->resp->status >= 200 && x->resp->status < 300;
    if (ok && x->req->on_data) {
        if (x->req->on_data(x->req->ctx, (const uint8_t *)p, n) < 0) {
            x->resp->aborted = 1;
            return 0;
        }
        return n;
    }
    if (n > x->max - x->got) {
        x->too_big = 1;
        return 0;
    }
    x->got += n;
    if (ok && x->req->download_fd >= 0) {
        struct sbx_error ignored = SBX_ERROR_INIT;
        if (sbx_fd_write_all(x->req->download_fd, p, n, &ignored) < 0) {
            x->write_errno = ignored.sys_errno ? ignored.sys_errno : EIO;
            return 0;
        }
        return n;
    }
    sbx__e2b_keep(sbx_buf_add(&x->resp->body, p, n, NULL));
    return n;
}

static size_t on_header(char *p, size_t size, size_t nmemb, void *ud)
{
    struct xfer *x = ud;
    size_t n = size * nmemb;
    if (n >= 12 && strncmp(p, "HTTP/", 5) == 0) {
        /* The status line, before the body: error bodies never reach a file or a stream. */
        const char *sp = memchr(p, ' ', n);
        if (sp && (size_t)(sp - p) + 4 <= n)
            x->resp->status = (sp[1] - '0') * 100 + (sp[2] - '0') * 10 + (sp[3] - '0');
        x->resp->retry_after = -1;
        return n;
    }
    if (n > 12 && strncasecmp(p, "Retry-After:", 12) == 0) {
        char tmp[32];
        size_t k = n - 12 < sizeof(tmp) - 1 ? n - 12 : sizeof(tmp) - 1;
        memcpy(tmp, p + 12, k);
        tmp[k] = '\0';
        char *end = NULL;
        long v = strtol(tmp, &end, 10);
        while (end && (*end == ' ' || *end == '\r' || *end == '\n'))
            end++;
        x->resp->retry_after = end && *end == '\0' && v >= 0 && v < 86400 ? v : -1;
    }
    return n;
}

static size_t on_upload(char *p, size_t size, size_t nmemb, void *ud)
{
    const struct sbx__e2b_req *req = ud;
    for (;;) {
        ssize_t r = read(req->upload_fd, p, size * nmemb);
        if (r >= 0)
            return (size_t)r;
        if (errno != EINTR)
            return CURL_READFUNC_ABORT;
    }
}

static int on_progress(void *ud, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
    struct xfer *x = ud;
    (void)a, (void)b, (void)c, (void)d;
    if (x->req->abort && *x->req->abort) {
        x->resp->aborted = 1;
        return 1;
    }
    return 0;
}

static void set_body(CURL *c, const struct sbx__e2b_req *req)
{
    if (req->body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, req->body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len);
    } else if (req->upload_fd >= 0) {
        curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(c, CURLOPT_READFUNCTION, on_upload);
        curl_easy_setopt(c, CURLOPT_READDATA, req);
        curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)req->upload_size);
    } else if (strcmp(req->method, "POST") == 0) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, 0L);
    }
    if (strcmp(req->method, "GET") != 0)
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, req->method);
}

/* The URL without its query, for messages (a query may hold paths, never secrets). */
static void url_for_msg(const char *url, char *out, size_t n)
{
    size_t k = strcspn(url, "?");
    snprintf(out, n, "%.*s", (int)(k < 200 ? k : 200), url);
}

int sbx__e2b_http(const struct sbx__e2b_req *req, struct sbx__e2b_resp *resp, struct sbx_error *err)
{
    int rc = sbx__curl_load(err);
    if (rc < 0)
        return rc;
    CURL *c = curl_easy_init();
    struct curl_slist *hdrs = NULL;
    char cerr[CURL_ERROR_SIZE] = "", where[256];
    struct xfer x = {req, resp, 0, req->max_body ? req->max_body : SBX__E2B_BODY_MAX, 0, 0};
    if (!c)
        sbx__bug(__FILE__, __LINE__, "curl_easy_init failed");
    url_for_msg(req->url, where, sizeof(where));
    curl_easy_setopt(c, CURLOPT_URL, req->url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, cerr);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 30000L);
    if (req->timeout_ms > 0)
        curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)req->timeout_ms);
    if (req->ca_file)
        curl_easy_setopt(c, CURLOPT_CAINFO, req->ca_file);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &x);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &x);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, &x);
    /* Keepalive events come at least every 30 s on a stream: a silent minute is a dead one. */
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 90L);
    set_body(c, req);
    for (const char *const *h = req->headers; h && *h; h++)
        hdrs = curl_slist_append(hdrs, *h);
    hdrs = curl_slist_append(hdrs, "Expect:");
    hdrs = curl_slist_append(hdrs, "User-Agent: sbx");
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    CURLcode cc = curl_easy_perform(c);
    if (cc == CURLE_OK || (resp->aborted && resp->status)) {
        if (cc == CURLE_OK)
            curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &resp->status);
    } else if (x.too_big) {
        rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "the answer of %s %s is larger than %llu bytes",
                           req->method, where, (unsigned long long)x.max);
    } else if (x.write_errno) {
        rc = sbx_error_errno(err, x.write_errno, "cannot store the answer of %s %s", req->method,
                             where);
    } else if (cc == CURLE_OPERATION_TIMEDOUT) {
        rc = sbx_error_set(err, SBX_E_TIMEOUT, 0, "%s %s: no answer in time (%s)", req->method,
                           where, cerr[0] ? cerr : curl_easy_strerror(cc));
    } else if (resp->aborted) {
        rc = sbx_error_set(err, SBX_E_CANCELLED, 0, "%s %s was stopped", req->method, where);
    } else {
        rc = sbx_error_set(err, SBX_E_HTTP, 0, "%s %s: %s", req->method, where,
                           cerr[0] ? cerr : curl_easy_strerror(cc));
    }
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(c);
    return rc;
}

char *sbx__e2b_escape(const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    struct sbx_buf b;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            strchr("-._~/", *p)) {
            sbx__e2b_keep(sbx_buf_add(&b, p, 1, NULL));
        } else {
            char e[3] = {'%', hex[*p >> 4], hex[*p & 15]};
            sbx__e2b_keep(sbx_buf_add(&b, e, 3, NULL));
        }
    }
    return sbx_buf_detach(&b, NULL);
}

/* ---------------------------------------------------------------------------------------------
 * The control plane */

/* The service's message of an error body ({"code", "message"}), cleaned for a message. */
static void api_message(const struct sbx_buf *body, long status, char *out, size_t n)
{
    json_t *j = body->len ? json_loadb(body->data, body->len, 0, NULL) : NULL;
    const char *msg = json_string_value(json_object_get(j, "message"));
    if (msg) {
        /* The service's wording may span lines: one line for a message. */
        char *one = sbx_xstrdup(msg);
        for (char *p = one; *p; p++)
            if (*p == '\n')
                *p = ' ';
        sbx__wire_clean(one, strlen(one), out, n);
        free(one);
    } else {
        snprintf(out, n, "HTTP status %ld", status);
    }
    json_decref(j);
}

static int api_error(struct sbx__e2b_conf *c, const char *method, const char *path, long status,
                     const struct sbx__e2b_resp *resp, struct sbx_error *err)
{
    char msg[512];
    api_message(&resp->body, status, msg, sizeof(msg));
    size_t plen = strcspn(path, "?");
    if (status == 401 || status == 403)
        return sbx_error_set(err, SBX_E_PERM, 0, "the E2B API refused the key from %s: %s",
                             c->key_what, msg);
    if (status == 429)
        return sbx_error_set(err, SBX_E_API, 0,
                             "the E2B API is rate limiting or over quota (HTTP 429%s): %s",
                             resp->retry_after >= 0 ? ", retries exhausted" : "", msg);
    enum sbx_errcode code = status == 404                   ? SBX_E_NOTFOUND
                            : status == 409                 ? SBX_E_EXISTS
                            : status >= 400 && status < 500 ? SBX_E_INVAL
                                                            : SBX_E_API;
    return sbx_error_set(err, code, 0, "E2B API %s %.*s: %s (HTTP %ld)", method, (int)plen, path,
                         msg, status);
}

int sbx__e2b_api(struct sbx__e2b_conf *c, const char *method, const char *path, const json_t *body,
                 long *status, json_t **out, struct sbx_error *err)
{
    int rc = sbx__e2b_conf_key(c, err);
    if (rc < 0)
        return rc;
    char *url = sbx_xasprintf("%s%s", c->api_url, path);
    char *key = sbx_xasprintf("X-API-KEY: %s", c->api_key);
    char *text = body ? sbx_json_dumps(body, SBX_JSON_COMPACT) : NULL;
    const char *hdrs[] = {key, "Content-Type: application/json", "Accept: application/json", NULL};
    struct sbx__e2b_req req = {.method = method,
                               .url = url,
                               .headers = hdrs,
                               .body = text,
                               .body_len = text ? strlen(text) : 0,
                               .upload_fd = -1,
                               .download_fd = -1,
                               .timeout_ms = c->call_ms,
                               .ca_file = c->ca_file};
    struct sbx__e2b_resp resp;
    sbx__e2b_resp_init(&resp);
    for (int attempt = 0;; attempt++) {
        sbx_buf_reset(&resp.body);
        if ((rc = sbx__e2b_http(&req, &resp, err)) < 0)
            break;
        long wait = resp.status == 429 ? resp.retry_after
                    : resp.status == 503
                            ? (resp.retry_after >= 0 ? resp.retry_after : 1L << attempt)
                            : -1;
        if (wait < 0 || wait > SBX__E2B_RETRY_WAIT_MAX || attempt >= SBX__E2B_RETRIES)
            break;
        sbx_sleep_ms(wait * 1000 + 50);
    }
    if (rc == 0 && status)
        *status = resp.status;
    if (rc == 0 && resp.status >= 400)
        rc = api_error(c, method, path, resp.status, &resp, err);
    if (rc == 0 && out) {
        *out = NULL;
        struct sbx_json_limits lim = {.max_bytes = SBX__E2B_BODY_MAX, .max_depth = 64};
        if (resp.body.len &&
            (rc = sbx_json_parse(resp.body.data, resp.body.len, &lim, out, err)) < 0)
            sbx_error_prefix(err, "the E2B API's answer to %s", method);
    }
    sbx__e2b_resp_release(&resp);
    explicit_bzero(key, strlen(key));
    free(key);
    free(url);
    free(text);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * envd */

void sbx__e2b_envd_init(struct sbx__e2b_envd *e, struct sbx__e2b_conf *c, const char *id,
                        const char *domain, const char *token)
{
    e->conf = sbx__e2b_conf_ref(c);
    e->id = sbx_xstrdup(id);
    if (c->sandbox_url)
        e->base = sbx_xstrdup(c->sandbox_url);
    else
        e->base = sbx_xasprintf("https://%d-%s.%s", SBX__E2B_ENVD_PORT, id,
                                domain && domain[0] ? domain : c->domain);
    e->token = token ? sbx_xstrdup(token) : NULL;
    e->hdr_id = sbx_xasprintf("E2b-Sandbox-Id: %s", id);
    e->hdr_token = token ? sbx_xasprintf("X-Access-Token: %s", token) : NULL;
}

void sbx__e2b_envd_copy(struct sbx__e2b_envd *dst, const struct sbx__e2b_envd *src)
{
    dst->conf = sbx__e2b_conf_ref(src->conf);
    dst->id = sbx_xstrdup(src->id);
    dst->base = sbx_xstrdup(src->base);
    dst->token = src->token ? sbx_xstrdup(src->token) : NULL;
    dst->hdr_id = sbx_xstrdup(src->hdr_id);
    dst->hdr_token = src->hdr_token ? sbx_xstrdup(src->hdr_token) : NULL;
}

void sbx__e2b_envd_release(struct sbx__e2b_envd *e)
{
    sbx__e2b_conf_unref(e->conf);
    e->conf = NULL;
    free(e->id);
    free(e->base);
    wipe_free(e->token);
    wipe_free(e->hdr_token);
    free(e->hdr_id);
    e->id = e->base = e->token = e->hdr_token = e->hdr_id = NULL;
}

/* The envd request's headers with ctype and extra (each may be NULL). */
static void envd_headers(const struct sbx__e2b_envd *e, const char *ctype, const char *extra,
                         const char *h[8])
{
    size_t n = 0;
    h[n++] = e->hdr_id;
    h[n++] = "E2b-Sandbox-Port: 49983";
    if (e->hdr_token)
        h[n++] = e->hdr_token;
    if (ctype)
        h[n++] = ctype;
    if (extra)
        h[n++] = extra;
    h[n++] = "Connect-Protocol-Version: 1";
    h[n] = NULL;
}

/* A 502 from the service's proxy means the sandbox is not there (gone, paused, expired). */
static int envd_status_error(const struct sbx__e2b_envd *e, long status,
                             const struct sbx__e2b_resp *resp, int connect, struct sbx_error *err)
{
    if (status == 502)
        return sbx_error_set(err, SBX_E_SANDBOX, 0,
                             "sandbox '%s' is gone (expired, killed or paused)", e->id);
    if (connect)
        return sbx__connect_error((const uint8_t *)resp->body.data, resp->body.len, (int)status,
                                  err);
    char msg[512];
    api_message(&resp->body, status, msg, sizeof(msg));
    enum sbx_errcode code = status == 404                    ? SBX_E_NOTFOUND
                            : status == 401 || status == 403 ? SBX_E_PERM
                            : status == 507                  ? SBX_E_TOOBIG
                            : status >= 400 && status < 500  ? SBX_E_INVAL
                                                             : SBX_E_API;
    return sbx_error_set(err, code, 0, "envd: %s (HTTP %ld)", msg, status);
}

int sbx__e2b_unary(const struct sbx__e2b_envd *e, const char *method, const json_t *msg,
                   json_t **out, struct sbx_error *err)
{
    char *url = sbx_xasprintf("%s%s", e->base, method);
    char *text = sbx_json_dumps(msg, SBX_JSON_COMPACT);
    const char *h[8];
    envd_headers(e, "Content-Type: application/json", NULL, h);
    struct sbx__e2b_req req = {.method = "POST",
                               .url = url,
                               .headers = h,
                               .body = text,
                               .body_len = strlen(text),
                               .upload_fd = -1,
                               .download_fd = -1,
                               .timeout_ms = e->conf->call_ms,
                               .ca_file = e->conf->ca_file};
    struct sbx__e2b_resp resp;
    sbx__e2b_resp_init(&resp);
    int rc = sbx__e2b_http(&req, &resp, err);
    if (rc == 0 && resp.status != 200)
        rc = envd_status_error(e, resp.status, &resp, 1, err);
    if (rc == 0 && out) {
        struct sbx_json_limits lim = {.max_bytes = MSG_MAX, .max_depth = 64};
        rc = sbx_json_parse(resp.body.len ? resp.body.data : "{}",
                            resp.body.len ? resp.body.len : 2, &lim, out, err);
    }
    sbx__e2b_resp_release(&resp);
    free(url);
    free(text);
    return rc;
}

struct stream_ctx {
    struct sbx__connect_dec dec;
    sbx__e2b_msg_fn *on_msg;
    void *ctx;
    int rc, ended;
    struct sbx_error err;
};

static int stream_data(void *ud, const uint8_t *p, size_t n)
{
    struct stream_ctx *sc = ud;
    while (n && sc->rc == 0) {
        struct sbx__connect_msg m;
        long used = sbx__connect_feed(&sc->dec, p, n, &m, &sc->err);
        if (used < 0) {
            sc->rc = (int)used;
            break;
        }
        p += used;
        n -= (size_t)used;
        if (m.kind == SBX__CONNECT_END) {
            sc->ended = 1;
            sc->rc = sbx__connect_end(m.data, m.len, NULL, &sc->err);
        } else if (m.kind == SBX__CONNECT_MESSAGE) {
            json_t *j = NULL;
            struct sbx_json_limits lim = {.max_bytes = MSG_MAX, .max_depth = 32};
            sc->rc = sbx_json_parse((const char *)m.data, m.len, &lim, &j, &sc->err);
            if (sc->rc == 0)
                sc->rc = sc->on_msg(sc->ctx, j, &sc->err);
            json_decref(j);
        }
    }
    return sc->rc < 0 ? -1 : 0;
}

int sbx__e2b_stream(const struct sbx__e2b_envd *e, const char *method, const json_t *msg,
                    sbx__e2b_msg_fn *on_msg, void *ctx, const volatile int *abort,
                    struct sbx_error *err)
{
    char *url = sbx_xasprintf("%s%s", e->base, method);
    char *text = sbx_json_dumps(msg, SBX_JSON_COMPACT);
    struct sbx_buf env;
    sbx_buf_init(&env, SBX_BUF_NOLIMIT);
    sbx__e2b_keep(sbx__connect_encode(&env, 0, text, strlen(text), NULL));
    const char *h[8];
    envd_headers(e, "Content-Type: application/connect+json", "Keepalive-Ping-Interval: 30", h);
    struct stream_ctx sc = {.on_msg = on_msg, .ctx = ctx, .err = SBX_ERROR_INIT};
    sbx__connect_init(&sc.dec, MSG_MAX);
    struct sbx__e2b_req req = {.method = "POST",
                               .url = url,
                               .headers = h,
                               .body = env.data,
                               .body_len = env.len,
                               .upload_fd = -1,
                               .download_fd = -1,
                               .on_data = stream_data,
                               .ctx = &sc,
                               .abort = abort,
                               .ca_file = e->conf->ca_file};
    struct sbx__e2b_resp resp;
    sbx__e2b_resp_init(&resp);
    int rc = sbx__e2b_http(&req, &resp, err);
    if (sc.rc < 0)
        rc = sbx_error_copy(err, &sc.err);
    else if (rc == 0 && resp.status != 200)
        rc = envd_status_error(e, resp.status, &resp, 1, err);
    else if (rc == 0 && !sc.ended)
        rc = sbx__connect_finish(&sc.dec, err);
    sbx__connect_release(&sc.dec);
    sbx__e2b_resp_release(&resp);
    sbx_buf_release(&env);
    free(url);
    free(text);
    return rc;
}

static char *files_url(const struct sbx__e2b_envd *e, const char *abs)
{
    char *q = sbx__e2b_escape(abs);
    char *url = sbx_xasprintf("%s/files?path=%s", e->base, q);
    free(q);
    return url;
}

int sbx__e2b_file_get(const struct sbx__e2b_envd *e, const char *abs, int fd, uint64_t max,
                      struct sbx_error *err)
{
    char *url = files_url(e, abs);
    const char *h[8];
    envd_headers(e, "Accept-Encoding: identity", NULL, h);
    struct sbx__e2b_req req = {.method = "GET",
                               .url = url,
                               .headers = h,
                               .upload_fd = -1,
                               .download_fd = fd,
                               .max_body = max,
                               .timeout_ms = 0,
                               .ca_file = e->conf->ca_file};
    struct sbx__e2b_resp resp;
    sbx__e2b_resp_init(&resp);
    int rc = sbx__e2b_http(&req, &resp, err);
    if (rc == 0 && resp.status != 200)
        rc = envd_status_error(e, resp.status, &resp, 0, err);
    sbx__e2b_resp_release(&resp);
    free(url);
    return rc;
}

int sbx__e2b_file_put(const struct sbx__e2b_envd *e, const char *abs, int fd, uint64_t size,
                      struct sbx_error *err)
{
    char *url = files_url(e, abs);
    const char *h[8];
    envd_headers(e, "Content-Type: application/octet-stream", NULL, h);
    struct sbx__e2b_req req = {.method = "POST",
                               .url = url,
                               .headers = h,
                               .upload_fd = fd,
                               .upload_size = size,
                               .download_fd = -1,
                               .timeout_ms = 0,
                               .ca_file = e->conf->ca_file};
    struct sbx__e2b_resp resp;
    sbx__e2b_resp_init(&resp);
    int rc = sbx__e2b_http(&req, &resp, err);
    if (rc == 0 && resp.status != 200)
        rc = envd_status_error(e, resp.status, &resp, 0, err);
    sbx__e2b_resp_release(&resp);
    free(url);
    return rc;
}
