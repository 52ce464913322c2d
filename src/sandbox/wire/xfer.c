/* Requests on the event loop: curl's multi interface driven by the loop's epoll and timers
 * (src/sandbox/wire/loop.h, sbx__xfer). */
#include <stdlib.h>
#include <string.h>

#include "core/dl-curl.h"
#include "sandbox/wire/loop-internal.h"
#include "sandbox/wire/wire-internal.h"
#include "sbx/strv.h"

struct xstate {
    struct sbx__loop *l;
    CURLM *m;
    struct sbx__timer *timer; /* curl's own timeouts */
};

struct sbx__xfer {
    struct sbx__loop *l;
    struct xstate *xs;
    struct sbx__endpoint *ep;
    CURL *e;
    /* The request, copied. */
    char *method, *path, *content_type, *want_header, *body;
    size_t body_len;
    int has_body;
    json_t *json;
    struct sbx_strv headers;
    size_t max_body;
    int64_t timeout_ms;
    int no_retry, http_1_1;
    /* One attempt. */
    struct curl_slist *hdrs;
    char *text;
    char cerr[CURL_ERROR_SIZE];
    char retry_after[64];
    int too_big, data_rc, paused;
    struct sbx_error data_err;
    /* The whole. */
    const struct sbx__xfer_ops *ops;
    void *ud;
    struct sbx__http_resp resp;
    int attempts, reloaded, in_done;
    struct sbx__timer *retry;
};

static void check_done(struct xstate *xs);

static void on_sock(struct sbx__watch *w, unsigned rev, void *ud)
{
    struct xstate *xs = ud;
    int flags = (rev & SBX__IN ? CURL_CSELECT_IN : 0) | (rev & SBX__OUT ? CURL_CSELECT_OUT : 0) |
                (rev & SBX__ERR ? CURL_CSELECT_ERR : 0);
    int running = 0;
    curl_multi_socket_action(xs->m, (curl_socket_t)sbx__watch_fd(w), flags, &running);
    check_done(xs);
}

static int socket_cb(CURL *e, curl_socket_t s, int what, void *userp, void *socketp)
{
    struct xstate *xs = userp;
    struct sbx__watch *w = socketp;
    (void)e;
    if (what == CURL_POLL_REMOVE) {
        sbx__watch_free(w);
        curl_multi_assign(xs->m, s, NULL);
        return 0;
    }
    unsigned ev = (what & CURL_POLL_IN ? SBX__IN : 0) | (what & CURL_POLL_OUT ? SBX__OUT : 0);
    if (w) {
        sbx__watch_set(w, ev);
        return 0;
    }
    struct sbx_error err = SBX_ERROR_INIT;
    if (sbx__watch_new_uncounted(xs->l, (int)s, ev, on_sock, xs, &w, &err) < 0)
        return -1;
    curl_multi_assign(xs->m, s, w);
    return 0;
}

static void on_curl_timer(struct sbx__timer *t, void *ud)
{
    struct xstate *xs = ud;
    int running = 0;
    (void)t;
    curl_multi_socket_action(xs->m, CURL_SOCKET_TIMEOUT, 0, &running);
    check_done(xs);
}

static int timer_cb(CURLM *m, long ms, void *userp)
{
    struct xstate *xs = userp;
    (void)m;
    if (ms < 0)
        sbx__timer_stop(xs->timer);
    else
        sbx__timer_after(xs->timer, ms);
    return 0;
}

static struct xstate *state(struct sbx__loop *l)
{
    void **slot = sbx__loop_xfer_slot(l);
    if (*slot)
        return *slot;
    struct xstate *xs = sbx_xcalloc(1, sizeof(*xs));
    xs->l = l;
    xs->m = curl_multi_init();
    if (!xs->m)
        SBX_BUG("curl_multi_init failed");
    xs->timer = sbx__timer_new(l, on_curl_timer, xs);
    sbx__loop_count(l, LOOP_TIMER, -1); /* curl's timer keeps nothing running */
    curl_multi_setopt(xs->m, CURLMOPT_SOCKETFUNCTION, socket_cb);
    curl_multi_setopt(xs->m, CURLMOPT_SOCKETDATA, xs);
    curl_multi_setopt(xs->m, CURLMOPT_TIMERFUNCTION, timer_cb);
    curl_multi_setopt(xs->m, CURLMOPT_TIMERDATA, xs);
    *slot = xs;
    return xs;
}

void sbx__xfer_state_free(struct sbx__loop *l, void *p)
{
    struct xstate *xs = p;
    (void)l;
    /* Idle connections curl keeps close here; their watches go with the loop's epoll set. */
    curl_multi_cleanup(xs->m);
    sbx__loop_count(xs->l, LOOP_TIMER, 1);
    sbx__timer_free(xs->timer);
    free(xs);
}

/* ---- one transfer ---- */

static int is_2xx(long s)
{
    return s >= 200 && s < 300;
}

static size_t on_header(char *p, size_t size, size_t nmemb, void *ud)
{
    struct sbx__xfer *x = ud;
    size_t n = size * nmemb;
    char v[1024];
    if (n >= 12 && strncmp(p, "HTTP/", 5) == 0) {
        const char *sp = memchr(p, ' ', n);
        if (sp && (size_t)(sp - p) + 4 <= n)
            x->resp.status = (sp[1] - '0') * 100 + (sp[2] - '0') * 10 + (sp[3] - '0');
    } else if (sbx__http_header_value(p, n, "Retry-After", x->retry_after,
                                      sizeof(x->retry_after))) {
    } else if (x->want_header && sbx__http_header_value(p, n, x->want_header, v, sizeof(v))) {
        free(x->resp.header);
        x->resp.header = sbx_xstrdup(v);
    }
    return n;
}

static size_t on_body(char *p, size_t size, size_t nmemb, void *ud)
{
    struct sbx__xfer *x = ud;
    size_t n = size * nmemb;
    if (is_2xx(x->resp.status) && x->ops->data) {
        if (x->paused)
            return CURL_WRITEFUNC_PAUSE;
        int rc = x->ops->data(x, (const uint8_t *)p, n, x->ud, &x->data_err);
        if (rc < 0) {
            x->data_rc = rc;
            return 0;
        }
        if (rc == SBX__PAUSE)
            x->paused = 1;
        return n;
    }
    size_t max = is_2xx(x->resp.status) ? x->max_body : SBX__HTTP_ERROR_MAX;
    if (n > max - x->resp.body.len) {
        if (!is_2xx(x->resp.status))
            return n;
        x->too_big = 1;
        return 0;
    }
    int rc = sbx_buf_add(&x->resp.body, p, n, NULL);
    (void)rc; /* no limit on the buffer itself */
    return n;
}

static void attempt_release(struct sbx__xfer *x)
{
    if (x->e) {
        curl_multi_remove_handle(x->xs->m, x->e);
        curl_easy_cleanup(x->e);
        x->e = NULL;
    }
    sbx__endpoint_headers_free(x->hdrs);
    x->hdrs = NULL;
    free(x->text);
    x->text = NULL;
}

static void xfer_free(struct sbx__xfer *x)
{
    attempt_release(x);
    sbx__timer_free(x->retry);
    sbx__endpoint_free(x->ep);
    free(x->method);
    free(x->path);
    free(x->content_type);
    free(x->want_header);
    free(x->body);
    json_decref(x->json);
    sbx_strv_release(&x->headers);
    sbx__http_resp_release(&x->resp);
    sbx__loop_count(x->l, LOOP_XFER, -1);
    free(x);
}

static int attempt(struct sbx__xfer *x, struct sbx_error *err)
{
    struct sbx__http_req req = {.method = x->method,
                                .path = x->path,
                                .json = x->json,
                                .body = x->body,
                                .body_len = x->body_len,
                                .content_type = x->content_type,
                                .headers = (const char *const *)x->headers.v};
    x->e = curl_easy_init();
    if (!x->e)
        SBX_BUG("curl_easy_init failed");
    int rc = sbx__endpoint_apply(x->ep, x->e, x->path, x->http_1_1, &x->hdrs, err);
    if (rc < 0)
        return rc;
    sbx__http_set_body(x->e, &req, &x->hdrs, &x->text);
    int64_t t = x->timeout_ms ? x->timeout_ms : sbx__endpoint_timeout_ms(x->ep);
    if (t > 0)
        curl_easy_setopt(x->e, CURLOPT_TIMEOUT_MS, (long)t);
    curl_easy_setopt(x->e, CURLOPT_HTTPHEADER, x->hdrs);
    curl_easy_setopt(x->e, CURLOPT_ERRORBUFFER, x->cerr);
    curl_easy_setopt(x->e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(x->e, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(x->e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(x->e, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(x->e, CURLOPT_PRIVATE, x);
    x->cerr[0] = x->retry_after[0] = '\0';
    x->too_big = x->data_rc = x->paused = 0;
    x->attempts++;
    x->resp.attempts = x->attempts;
    x->resp.status = 0;
    sbx_buf_reset(&x->resp.body);
    if (curl_multi_add_handle(x->xs->m, x->e) != CURLM_OK)
        return sbx_error_set(err, SBX_E_SYS, 0, "cannot add a transfer to the event loop");
    return 0;
}

static void deliver(struct sbx__xfer *x, int rc, const struct sbx_error *err)
{
    x->in_done = 1;
    x->ops->done(x, rc, rc == 0 ? &x->resp : NULL, rc < 0 ? err : NULL, x->ud);
    xfer_free(x);
}

static void on_retry(struct sbx__timer *t, void *ud)
{
    struct sbx__xfer *x = ud;
    struct sbx_error err = SBX_ERROR_INIT;
    (void)t;
    int rc = attempt(x, &err);
    if (rc < 0)
        deliver(x, rc, &err);
}

static void finish(struct sbx__xfer *x, CURLcode cc)
{
    struct sbx_error err = SBX_ERROR_INIT;
    int rc = 0;
    char what[256];
    snprintf(what, sizeof(what), "%s %.200s", x->method ? x->method : "GET", x->path);
    if (cc == CURLE_OK)
        curl_easy_getinfo(x->e, CURLINFO_RESPONSE_CODE, &x->resp.status);
    else if (x->data_rc < 0)
        rc = sbx_error_copy(&err, &x->data_err);
    else if (x->too_big)
        rc = sbx_error_set(&err, SBX_E_TOOBIG, 0, "%s at '%s' answered %s with more than %zu bytes",
                           sbx__endpoint_name(x->ep), sbx__endpoint_url(x->ep), what, x->max_body);
    else
        rc = sbx__http_transport_error(x->ep, x->e, (int)cc, x->cerr, what, &err);
    char retry_after[64];
    memcpy(retry_after, x->retry_after, sizeof(retry_after));
    attempt_release(x);
    if (rc == 0 && x->resp.status == 401 && !x->reloaded && sbx__endpoint_reload_token(x->ep)) {
        x->reloaded = 1;
        x->attempts--;
        sbx__timer_after(x->retry, 0);
        return;
    }
    if (rc == 0 && (x->resp.status == 429 || x->resp.status == 503) && !x->no_retry &&
        x->attempts <= sbx__endpoint_retries(x->ep)) {
        sbx__timer_after(x->retry,
                         sbx__http_backoff_ms(x->attempts, sbx__http_retry_after(retry_after),
                                              sbx__endpoint_retry_wait_ms(x->ep)));
        return;
    }
    sbx__endpoint_scrub(x->ep, &err);
    deliver(x, rc, &err);
}

static void check_done(struct xstate *xs)
{
    CURLMsg *msg;
    int left = 0;
    while ((msg = curl_multi_info_read(xs->m, &left))) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        struct sbx__xfer *x = NULL;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
        CURLcode cc = msg->data.result;
        if (x)
            finish(x, cc);
    }
}

static void copy_req(struct sbx__xfer *x, const struct sbx__http_req *req)
{
    x->method = sbx_xstrdup(req->method ? req->method : "GET");
    x->path = sbx_xstrdup(req->path ? req->path : "/");
    x->content_type = req->content_type ? sbx_xstrdup(req->content_type) : NULL;
    x->want_header = req->want_header ? sbx_xstrdup(req->want_header) : NULL;
    if (req->json)
        x->json = json_deep_copy(req->json);
    if (req->body || req->body_len) {
        x->body = sbx_xmalloc(req->body_len + 1);
        memcpy(x->body, req->body ? req->body : "", req->body_len);
        x->body_len = req->body_len;
    }
    sbx_strv_init(&x->headers);
    for (const char *const *h = req->headers; h && *h; h++)
        sbx_strv_push(&x->headers, *h);
    x->max_body = req->max_body ? req->max_body : SBX__HTTP_BODY_MAX;
    x->timeout_ms = req->timeout_ms;
    x->no_retry = req->no_retry;
    x->http_1_1 = req->http_1_1;
}

int sbx__xfer_start(struct sbx__loop *l, struct sbx__endpoint *ep, const struct sbx__http_req *req,
                    const struct sbx__xfer_ops *ops, void *ud, struct sbx__xfer **out,
                    struct sbx_error *err)
{
    if (req->source)
        return sbx_error_set(err, SBX_E_INVAL, 0, "a transfer on the loop takes no body source");
    struct sbx__xfer *x = sbx_xcalloc(1, sizeof(*x));
    x->l = l;
    x->xs = state(l);
    x->ep = sbx__endpoint_ref(ep);
    x->ops = ops;
    x->ud = ud;
    x->data_err = (struct sbx_error)SBX_ERROR_INIT;
    sbx__http_resp_init(&x->resp);
    copy_req(x, req);
    x->retry = sbx__timer_new(l, on_retry, x);
    sbx__loop_count(l, LOOP_XFER, 1);
    int rc = attempt(x, err);
    if (rc < 0) {
        sbx__endpoint_scrub(ep, err);
        xfer_free(x);
        return rc;
    }
    if (out)
        *out = x;
    return 0;
}

void sbx__xfer_pause(struct sbx__xfer *x)
{
    if (x->paused)
        return;
    x->paused = 1;
    if (x->e)
        curl_easy_pause(x->e, CURLPAUSE_RECV);
}

void sbx__xfer_resume(struct sbx__xfer *x)
{
    if (!x->paused)
        return;
    x->paused = 0;
    if (x->e)
        curl_easy_pause(x->e, CURLPAUSE_CONT);
}

void sbx__xfer_cancel(struct sbx__xfer *x)
{
    if (!x || x->in_done)
        return;
    xfer_free(x);
}
