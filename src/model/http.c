/* HTTP POST over libcurl's easy interface. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <sys/socket.h>

#include "core/dl-curl.h"
#include "model/http.h"
#include "sbx/time.h"
#include "sbx/trace.h"

static void share_lock(CURL *h, curl_lock_data data, curl_lock_access access, void *ud)
{
    (void)h;
    (void)access;
    struct sbx__model_http_pool *p = ud;
    pthread_mutex_lock(&p->locks[(size_t)data % 8]);
}

static void share_unlock(CURL *h, curl_lock_data data, void *ud)
{
    (void)h;
    struct sbx__model_http_pool *p = ud;
    pthread_mutex_unlock(&p->locks[(size_t)data % 8]);
}

void sbx__model_http_pool_init(struct sbx__model_http_pool *p)
{
    for (size_t i = 0; i < 8; i++)
        pthread_mutex_init(&p->locks[i], NULL);
    pthread_mutex_init(&p->make, NULL);
    p->made = 0;
    p->share = NULL;
}

/* The pool's share, made on the first request (libcurl is loaded by then). */
static CURLSH *pool_share(struct sbx__model_http_pool *p)
{
    pthread_mutex_lock(&p->make);
    if (!p->made) {
        p->made = 1;
        CURLSH *sh = curl_share_init();
        /* Without a share every request opens its own connection: slower, not wrong. */
        if (sh && (curl_share_setopt(sh, CURLSHOPT_LOCKFUNC, share_lock) != CURLSHE_OK ||
                   curl_share_setopt(sh, CURLSHOPT_UNLOCKFUNC, share_unlock) != CURLSHE_OK ||
                   curl_share_setopt(sh, CURLSHOPT_USERDATA, p) != CURLSHE_OK ||
                   curl_share_setopt(sh, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT) != CURLSHE_OK ||
                   curl_share_setopt(sh, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS) != CURLSHE_OK)) {
            curl_share_cleanup(sh);
            sh = NULL;
        }
        p->share = sh;
    }
    pthread_mutex_unlock(&p->make);
    return p->share;
}

void sbx__model_http_pool_release(struct sbx__model_http_pool *p)
{
    if (p->share)
        curl_share_cleanup(p->share);
    p->share = NULL;
    p->made = 0;
    for (size_t i = 0; i < 8; i++)
        pthread_mutex_destroy(&p->locks[i]);
    pthread_mutex_destroy(&p->make);
}

/* libcurl opens its sockets without close-on-exec, and a kept connection stays open while the
 * run's tools start commands: they must not inherit it. */
static curl_socket_t open_socket(void *ud, curlsocktype purpose, struct curl_sockaddr *a)
{
    (void)ud;
    (void)purpose;
    return socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
}

struct xfer {
    const struct sbx__model_http_req *req;
    struct sbx__model_http_resp *resp;
    CURL *curl;
    size_t total;
    int streaming; /* decided at the first body byte */
    int decided;
    int not_sse; /* the last answer's Content-Type names something else than an event stream */
    int rc;      /* error from a callback */
    int64_t start_ns, last_byte_ns, last_wait_ns;
    curl_off_t seen; /* body bytes counted by the progress callback */
    int waiting;     /* on_wait was told of a wait not yet ended */
    int answered;    /* a body byte reached on_body: no more wait reports */
    struct sbx_error cb_err;
};

void sbx__model_http_resp_init(struct sbx__model_http_resp *r)
{
    r->status = 0;
    r->retry_after_ms = -1;
    r->plain = 0;
    r->header[0] = '\0';
    r->content_type[0] = '\0';
    sbx_buf_init(&r->body, SBX_BUF_NOLIMIT);
}

void sbx__model_http_resp_release(struct sbx__model_http_resp *r)
{
    sbx_buf_release(&r->body);
}

static void end_wait(struct xfer *x)
{
    if (x->waiting && x->req->on_wait)
        x->req->on_wait(x->req->on_wait_data, -1, x->req->attempt);
    x->waiting = 0;
}

static size_t on_body(char *p, size_t size, size_t nmemb, void *ud)
{
    struct xfer *x = ud;
    size_t n = size * nmemb;
    /* The answer has begun: a caller's "waiting" line goes before anything of the body reaches
     * it (the progress callback, which also ends the wait, runs only after this). */
    end_wait(x);
    x->answered = 1;
    if (!x->decided) {
        /* Latency to the first byte of the body, for the model call's span. */
        sbx_span_set_int(sbx_trace_current(), "sbx.model.first_byte_ns",
                         sbx_time_mono_ns() - x->start_ns);
        long status = 0;
        curl_easy_getinfo(x->curl, CURLINFO_RESPONSE_CODE, &status);
        int ok = status >= 200 && status < 300;
        x->streaming = x->req->sink && ok && !x->not_sse;
        x->resp->plain = x->req->sink && ok && x->not_sse;
        x->decided = 1;
    }
    if (n > x->req->max_body - x->total) {
        x->rc = sbx_error_set(&x->cb_err, SBX_E_TOOBIG, 0,
                              "response from '%s' exceeds the limit of %zu bytes", x->req->url,
                              x->req->max_body);
        return 0;
    }
    x->total += n;
    int rc = x->streaming ? x->req->sink(p, n, x->req->ud, &x->cb_err)
                          : sbx_buf_add(&x->resp->body, p, n, &x->cb_err);
    if (rc < 0) {
        x->rc = rc;
        return 0;
    }
    return n;
}

static int64_t parse_retry_after(const char *v, size_t n, int ms)
{
    char tmp[64];
    if (n >= sizeof(tmp))
        return -1;
    memcpy(tmp, v, n);
    tmp[n] = '\0';
    char *end;
    double d = strtod(tmp, &end);
    if (end != tmp && d >= 0) {
        while (*end == ' ')
            end++;
        if (*end == '\0')
            return ms ? (int64_t)d : (int64_t)(d * 1000.0);
    }
    if (ms)
        return -1;
    /* An HTTP-date: "Wed, 21 Oct 2026 07:28:00 GMT". */
    struct tm tm;
    memset(&tm, 0, sizeof(tm));
    const char *rest = strptime(tmp, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    if (!rest)
        return -1;
    time_t when = timegm(&tm), now = time(NULL);
    return when > now ? (int64_t)(when - now) * 1000 : 0;
}

static size_t on_header(char *p, size_t size, size_t nmemb, void *ud)
{
    struct xfer *x = ud;
    size_t n = size * nmemb;
    /* A new status line (redirect, 100-continue) resets what we learnt. */
    if (n >= 5 && memcmp(p, "HTTP/", 5) == 0) {
        x->resp->retry_after_ms = -1;
        x->not_sse = 0;
        x->resp->header[0] = '\0';
        x->resp->content_type[0] = '\0';
    }
    const char *colon = memchr(p, ':', n);
    if (!colon)
        return n;
    size_t klen = (size_t)(colon - p);
    const char *v = colon + 1;
    size_t vlen = n - klen - 1;
    while (vlen && (*v == ' ' || *v == '\t')) {
        v++;
        vlen--;
    }
    while (vlen && (v[vlen - 1] == '\r' || v[vlen - 1] == '\n' || v[vlen - 1] == ' '))
        vlen--;
    if (klen == 14 && strncasecmp(p, "retry-after-ms", 14) == 0) {
        int64_t ms = parse_retry_after(v, vlen, 1);
        if (ms >= 0)
            x->resp->retry_after_ms = ms;
    } else if (klen == 11 && strncasecmp(p, "retry-after", 11) == 0 &&
               x->resp->retry_after_ms < 0) {
        x->resp->retry_after_ms = parse_retry_after(v, vlen, 0);
    } else if (klen == 12 && strncasecmp(p, "content-type", 12) == 0) {
        /* Without the header the body is taken for what was asked. */
        x->not_sse = !(vlen >= 17 && strncasecmp(v, "text/event-stream", 17) == 0);
        snprintf(x->resp->content_type, sizeof(x->resp->content_type), "%.*s", (int)vlen, v);
    } else if (x->req->want_header && klen == strlen(x->req->want_header) &&
               strncasecmp(p, x->req->want_header, klen) == 0 && vlen < sizeof(x->resp->header)) {
        memcpy(x->resp->header, v, vlen);
        x->resp->header[vlen] = '\0';
    }
    return n;
}

/* libcurl calls this at least once a second: cancellation, the first-byte and idle limits, and
 * the wait reports. */
static int on_progress(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    struct xfer *x = ud;
    const struct sbx__model_http_req *q = x->req;
    if (q->cancel && *q->cancel) {
        x->rc = sbx_error_set(&x->cb_err, SBX_E_CANCELLED, 0, "request to '%s' cancelled", q->url);
        return 1;
    }
    int64_t now = sbx_time_mono_ns();
    if (dn > x->seen) {
        x->seen = dn;
        x->last_byte_ns = now;
        end_wait(x);
        return 0;
    }
    int64_t since_ms = (now - (x->seen ? x->last_byte_ns : x->start_ns)) / SBX_NS_PER_MS;
    if (!x->seen && q->first_byte_ms && since_ms >= q->first_byte_ms) {
        x->rc = sbx_error_set(&x->cb_err, SBX_E_TIMEOUT, 0,
                              "no answer from '%s' within %lld ms of the request", q->url,
                              (long long)q->first_byte_ms);
        return 1;
    }
    if (x->seen && q->idle_ms && since_ms >= q->idle_ms) {
        x->rc = sbx_error_set(&x->cb_err, SBX_E_TIMEOUT, 0,
                              "the answer from '%s' stalled: nothing for %lld ms", q->url,
                              (long long)q->idle_ms);
        return 1;
    }
    if (!x->seen && !x->answered && q->on_wait && now - x->last_wait_ns >= SBX_NS_PER_S) {
        x->last_wait_ns = now;
        x->waiting = 1;
        q->on_wait(q->on_wait_data, since_ms, q->attempt);
    }
    return 0;
}

/* Whether the caller's own headers name this one (it then replaces sbx's). */
static int overridden(const struct sbx__model_http_req *req, const char *name)
{
    size_t n = strlen(name);
    for (const char *const *h = req->headers; h && *h; h++)
        if (strncasecmp(*h, name, n) == 0 && (*h)[n] == ':')
            return 1;
    return 0;
}

int sbx__model_http_post(const struct sbx__model_http_req *req, struct sbx__model_http_resp *resp,
                         struct sbx_error *err)
{
    int rc = 0;
    struct curl_slist *hdrs = NULL;
    char *auth = NULL;
    struct xfer x = {.req = req, .resp = resp};

    rc = sbx__curl_load(err);
    if (rc < 0)
        return rc;
    sbx_buf_release(&resp->body);
    sbx_buf_init(&resp->body, req->max_body);
    resp->status = 0;
    resp->retry_after_ms = -1;
    resp->plain = 0;
    resp->header[0] = '\0';
    resp->content_type[0] = '\0';
    x.curl = curl_easy_init();
    if (!x.curl)
        return sbx_error_set(err, SBX_E_HTTP, 0, "cannot start an HTTP client");

    if (!overridden(req, "Content-Type"))
        hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
    if (!overridden(req, "Accept"))
        hdrs = curl_slist_append(hdrs, req->stream ? "Accept: text/event-stream"
                                                   : "Accept: application/json");
    if (!overridden(req, "User-Agent"))
        hdrs = curl_slist_append(hdrs, "User-Agent: sbx/" SBX_VERSION);
    /* No "Expect: 100-continue" round trip before large bodies. */
    hdrs = curl_slist_append(hdrs, "Expect:");
    /* W3C Trace Context: the server's spans join the run's trace under the model call. */
    struct sbx_span *span = sbx_trace_current();
    if (span && !overridden(req, "traceparent")) {
        char tp[sizeof("traceparent: ") + SBX_TRACEPARENT_LEN];
        memcpy(tp, "traceparent: ", sizeof("traceparent: ") - 1);
        sbx_span_traceparent(span, tp + sizeof("traceparent: ") - 1);
        hdrs = curl_slist_append(hdrs, tp);
    }
    if (req->bearer && req->bearer[0] && !overridden(req, "Authorization")) {
        auth = sbx_xasprintf("Authorization: Bearer %s", req->bearer);
        hdrs = curl_slist_append(hdrs, auth);
    }
    for (const char *const *h = req->headers; h && *h; h++)
        hdrs = curl_slist_append(hdrs, *h);
    if (!hdrs)
        SBX_BUG("curl_slist_append failed");

    CURL *c = x.curl;
    CURLSH *share = req->pool ? pool_share(req->pool) : NULL;
    if (share)
        curl_easy_setopt(c, CURLOPT_SHARE, share);
    curl_easy_setopt(c, CURLOPT_URL, req->url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    if (req->method && strcmp(req->method, "POST") != 0) {
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, req->method);
    } else {
        curl_easy_setopt(c, CURLOPT_POST, 1L);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, req->body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len);
    }
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &x);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &x);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, &x);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, open_socket);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)req->timeout_ms);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)req->connect_timeout_ms);
    curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, "");
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    /* The key must never follow a redirect to another host. */
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);

    x.start_ns = x.last_wait_ns = sbx_time_mono_ns();
    CURLcode cc = curl_easy_perform(c);
    end_wait(&x);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &resp->status);
    if (x.rc < 0) {
        rc = sbx_error_copy(err, &x.cb_err);
        goto out;
    }
    if (cc == CURLE_OPERATION_TIMEDOUT) {
        rc = sbx_error_set(err, SBX_E_TIMEOUT, 0, "request to '%s' timed out after %lld ms",
                           req->url, (long long)req->timeout_ms);
        goto out;
    }
    if (cc != CURLE_OK) {
        rc = sbx_error_set(err, SBX_E_HTTP, 0, "request to '%s' failed: %s", req->url,
                           curl_easy_strerror(cc));
        goto out;
    }
out:
    /* The connection stays in the share unless the transfer did not end cleanly (cancelled,
     * timed out, cut): libcurl closes those. */
    curl_easy_cleanup(c);
    curl_slist_free_all(hdrs);
    if (auth) {
        /* Do not leave the key lying in freed heap memory. */
        explicit_bzero(auth, strlen(auth));
        free(auth);
    }
    return rc;
}
