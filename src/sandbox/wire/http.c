/* Blocking HTTP requests to an endpoint, their retries and their errors
 * (src/sandbox/wire/http.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "sandbox/wire/http.h"
#include "sandbox/wire/ndjson.h"
#include "sandbox/wire/sse.h"
#include "sandbox/wire/wire.h"
#include "sandbox/wire/wire-internal.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/time.h"

void sbx__http_resp_init(struct sbx__http_resp *r)
{
    r->status = 0;
    sbx_buf_init(&r->body, SBX_BUF_NOLIMIT);
    r->header = NULL;
    r->attempts = 0;
}

void sbx__http_resp_release(struct sbx__http_resp *r)
{
    sbx_buf_release(&r->body);
    free(r->header);
    r->header = NULL;
}

static void resp_reset(struct sbx__http_resp *r)
{
    r->status = 0;
    sbx_buf_reset(&r->body);
    free(r->header);
    r->header = NULL;
}

/* ---- what a response says ---- */

static const char *reason_phrase(long status)
{
    static const struct {
        long code;
        const char *text;
    } phrases[] = {
            {400, "Bad Request"},
            {401, "Unauthorized"},
            {403, "Forbidden"},
            {404, "Not Found"},
            {405, "Method Not Allowed"},
            {408, "Request Timeout"},
            {409, "Conflict"},
            {410, "Gone"},
            {413, "Payload Too Large"},
            {415, "Unsupported Media Type"},
            {422, "Unprocessable Entity"},
            {429, "Too Many Requests"},
            {500, "Internal Server Error"},
            {501, "Not Implemented"},
            {502, "Bad Gateway"},
            {503, "Service Unavailable"},
            {504, "Gateway Timeout"},
    };
    for (size_t i = 0; i < SBX_ARRAY_LEN(phrases); i++)
        if (phrases[i].code == status)
            return phrases[i].text;
    return NULL;
}

static const char *str_of(const json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s && s[0] ? s : NULL;
}

/* The message of a JSON error body, in the shapes servers use. */
static const char *json_message(const json_t *j, const char **code)
{
    const char *m;
    *code = NULL;
    if (!json_is_object(j))
        return NULL;
    const json_t *e = json_object_get(j, "error");
    if (json_is_object(e) && (m = str_of(e, "message")))
        return m; /* {"error": {"message": ...}} */
    if ((m = str_of(j, "error")))
        return m; /* LXD {"error", "error_code"}, and {"error": "..."} */
    if ((m = str_of(j, "message"))) {
        /* Connect {"code": "not_found", "message"}; Kubernetes Status; Docker */
        *code = str_of(j, "code");
        return m;
    }
    if ((m = str_of(j, "reason")) && str_of(j, "kind"))
        return m; /* a Status without a message */
    if ((m = str_of(j, "detail")))
        return m;
    if ((m = str_of(j, "msg")))
        return m;
    if ((m = str_of(j, "code")))
        return m; /* Connect without a message */
    return NULL;
}

int sbx__http_error_text(const void *body, size_t n, char *out, size_t outsz)
{
    const char *p = body;
    out[0] = '\0';
    while (n && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')) {
        p++;
        n--;
    }
    if (n == 0)
        return 0;
    if (p[0] == '{') {
        json_t *j = NULL;
        struct sbx_json_limits lim = {.max_bytes = SBX__HTTP_ERROR_MAX, .max_depth = 16};
        if (n > SBX__HTTP_ERROR_MAX || sbx_json_parse(p, n, &lim, &j, NULL) < 0)
            return 0;
        const char *code = NULL, *m = json_message(j, &code);
        if (m) {
            char *text = code ? sbx_xasprintf("%s: %s", code, m) : sbx_xstrdup(m);
            sbx__wire_clean(text, strlen(text), out, outsz);
            free(text);
        }
        json_decref(j);
        return m != NULL;
    }
    if (p[0] == '<' || memchr(p, '\0', n))
        return 0; /* a proxy's HTML page, binary data */
    size_t line = 0;
    while (line < n && p[line] != '\n' && p[line] != '\r')
        line++;
    if (line > 300)
        line = 300;
    sbx__wire_clean(p, line, out, outsz);
    return 1;
}

int sbx__http_status_error(const struct sbx__endpoint *ep, long status, const void *body, size_t n,
                           const char *what, struct sbx_error *err)
{
    char said[512];
    enum sbx_errcode code = SBX_E_API;
    const char *why = "";
    if (status == 400 || status == 422)
        code = SBX_E_INVAL;
    else if (status == 401) {
        code = SBX_E_PERM;
        why = " (the credentials were refused)";
    } else if (status == 403) {
        code = SBX_E_PERM;
        why = " (not allowed)";
    } else if (status == 404)
        code = SBX_E_NOTFOUND;
    else if (status == 409)
        code = SBX_E_EXISTS;
    else if (status == 408 || status == 504)
        code = SBX_E_TIMEOUT;
    else if (status == 413)
        code = SBX_E_TOOBIG;
    int has = body && n ? sbx__http_error_text(body, n, said, sizeof(said)) : 0;
    const char *phrase = reason_phrase(status);
    char st[64];
    if (phrase)
        snprintf(st, sizeof(st), "HTTP %ld (%s)", status, phrase);
    else
        snprintf(st, sizeof(st), "HTTP %ld", status);
    int rc = sbx_error_set(err, code, 0, "%s at '%s' answered %.200s%swith %s%s%s%s",
                           ep ? sbx__endpoint_name(ep) : "the server",
                           ep ? sbx__endpoint_url(ep) : "?", what ? what : "", what ? " " : "", st,
                           why, has ? ": " : "", has ? said : "");
    sbx__endpoint_scrub(ep, err);
    return rc;
}

int sbx__http_service_error(const struct sbx__endpoint *ep, long status, const void *body, size_t n,
                            const char *what, sbx__http_words_fn *words, void *ctx,
                            struct sbx_error *err)
{
    char said[512];
    sbx__http_error_text(body, n, said, sizeof(said));
    int rc = words(ctx, status, what, said, err);
    if (rc == 0)
        return sbx__http_status_error(ep, status, body, n, what, err);
    sbx__endpoint_scrub(ep, err);
    return rc;
}

int64_t sbx__http_retry_after(const char *v)
{
    if (!v)
        return -1;
    while (*v == ' ')
        v++;
    size_t digits = strspn(v, "0123456789");
    if (digits && digits <= 9 && v[digits + strspn(v + digits, " ")] == '\0')
        return strtoll(v, NULL, 10) * 1000;
    struct tm tm;
    memset(&tm, 0, sizeof(tm));
    const char *rest = strptime(v, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    if (!rest || *rest)
        return -1;
    time_t when = timegm(&tm);
    int64_t now_ms = sbx_time_real_ns() / SBX_NS_PER_MS;
    int64_t ms = (int64_t)when * 1000 - now_ms;
    return ms < 0 ? 0 : ms;
}

int64_t sbx__http_backoff_ms(int attempt, int64_t retry_after_ms, int64_t max_ms)
{
    int64_t d;
    if (retry_after_ms >= 0) {
        d = retry_after_ms;
    } else {
        d = 200;
        for (int i = 1; i < attempt && d < max_ms; i++)
            d *= 2;
        uint32_t r = 0;
        sbx__wire_random(&r, sizeof(r));
        d += (int64_t)(r % (uint32_t)(d / 4 + 1));
    }
    return d > max_ms ? max_ms : d;
}

char *sbx__http_escape(const char *s, int keep_slash)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = strlen(s);
    char *out = sbx_xmalloc(3 * n + 1), *o = out;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            *p == '-' || *p == '.' || *p == '_' || *p == '~' || (keep_slash && *p == '/')) {
            *o++ = (char)*p;
        } else {
            *o++ = '%';
            *o++ = hex[*p >> 4];
            *o++ = hex[*p & 15];
        }
    }
    *o = '\0';
    return out;
}

int sbx__http_sink_fd(const uint8_t *p, size_t n, void *ud, struct sbx_error *err)
{
    return sbx_fd_write_all(*(int *)ud, p, n, err);
}

int sbx__http_sink_ndjson(const uint8_t *p, size_t n, void *ud, struct sbx_error *err)
{
    return sbx__ndjson_feed(ud, (const char *)p, n, err);
}

int sbx__http_sink_sse(const uint8_t *p, size_t n, void *ud, struct sbx_error *err)
{
    return sbx__sse_feed(ud, (const char *)p, n, err);
}

/* ---- transport errors ---- */

/* A server that refused the TLS handshake over the client certificate: none was given, or it
 * is expired or not valid yet (servers say only "bad certificate"), or the server does not
 * trust it. */
static int client_refused_error(const struct sbx__endpoint *ep, const char *why,
                                struct sbx_error *err)
{
    const char *name = sbx__endpoint_name(ep), *url = sbx__endpoint_url(ep);
    int has = 0;
    int64_t from = 0, until = 0, now = sbx_time_real_ns() / SBX_NS_PER_S;
    sbx__endpoint_client_cert(ep, &has, &from, &until);
    if (!has)
        return sbx_error_set(err, SBX_E_HTTP, 0,
                             "%s at '%s': TLS: the server wants a client certificate and none was "
                             "given (%s)",
                             name, url, why);
    if ((until && now > until) || (from && now < from)) {
        char when[SBX_TIME_RFC3339_LEN];
        sbx_time_rfc3339((now > until ? until : from) * SBX_NS_PER_S, when);
        return sbx_error_set(err, SBX_E_HTTP, 0,
                             "%s at '%s': TLS: the server refused sbx's client certificate: it %s "
                             "%s (%s)",
                             name, url, now > until ? "expired on" : "is not valid before", when,
                             why);
    }
    return sbx_error_set(err, SBX_E_HTTP, 0,
                         "%s at '%s': TLS: the server refused sbx's client certificate (%s)", name,
                         url, why);
}

/* Whether transfer c opened a new TLS connection with a client certificate and lost it
 * before a byte of an answer: under TLS 1.3 the client's handshake ends before the server has
 * checked the client's certificate, and a server that refuses it may close (its alert lost to
 * the reset) while the request is on its way. */
static int closed_after_handshake(const struct sbx__endpoint *ep, CURL *c, int cc)
{
    if (!c || !sbx__endpoint_tls(ep) ||
        (cc != CURLE_RECV_ERROR && cc != CURLE_SEND_ERROR && cc != CURLE_GOT_NOTHING))
        return 0;
    int has = 0;
    int64_t from = 0, until = 0;
    sbx__endpoint_client_cert(ep, &has, &from, &until);
    long made = 0, head = 0;
    if (!has || curl_easy_getinfo(c, CURLINFO_NUM_CONNECTS, &made) != CURLE_OK ||
        curl_easy_getinfo(c, CURLINFO_HEADER_SIZE, &head) != CURLE_OK)
        return 0;
    return made > 0 && head == 0;
}

int sbx__http_transport_error(const struct sbx__endpoint *ep, CURL *c, int cc, const char *detail,
                              const char *what, struct sbx_error *err)
{
    const char *name = sbx__endpoint_name(ep), *url = sbx__endpoint_url(ep);
    const char *d = detail && detail[0] ? detail : curl_easy_strerror((CURLcode)cc);
    char why[400];
    sbx__wire_clean(d, strlen(d), why, sizeof(why));
    if (closed_after_handshake(ep, c, cc)) {
        char said[sizeof(why) + 120];
        snprintf(said, sizeof(said),
                 "the server closed the new connection after the TLS handshake without answering, "
                 "as a server refusing it does: %s",
                 why);
        int rc = client_refused_error(ep, said, err);
        sbx__endpoint_scrub(ep, err);
        return rc;
    }
    int client_refused =
            strstr(d, "alert certificate required") || strstr(d, "alert bad certificate") ||
            strstr(d, "alert certificate expired") || strstr(d, "alert unknown ca") ||
            strstr(d, "alert certificate revoked") || strstr(d, "alert handshake failure");
    int rc;
    switch (cc) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
        rc = sbx_error_set(err, SBX_E_HTTP, 0, "cannot reach %s at '%s': %s", name, url, why);
        break;
    case CURLE_OPERATION_TIMEDOUT:
        rc = sbx_error_set(err, SBX_E_TIMEOUT, 0, "%s at '%s' did not answer %.200s in time (%s)",
                           name, url, what ? what : "", why);
        break;
    case CURLE_PEER_FAILED_VERIFICATION:
        if (sbx__endpoint_cert_pinned(ep)) {
            rc = sbx_error_set(err, SBX_E_HTTP, 0,
                               "%s at '%s': TLS: the server's certificate is not the pinned "
                               "certificate",
                               name, url);
            break;
        }
        rc = sbx_error_set(err, SBX_E_HTTP, 0,
                           "%s at '%s': TLS: the server's certificate is not trusted (%s)", name,
                           url, why);
        break;
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
        rc = sbx_error_set(err, SBX_E_HTTP, 0,
                           "%s at '%s': TLS: the server's key does not match the pinned key", name,
                           url);
        break;
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CACERT_BADFILE:
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "%s at '%s': TLS: cannot use %s: %s", name, url,
                           cc == CURLE_SSL_CERTPROBLEM ? "the client certificate or its key"
                                                       : "the CA certificates",
                           why);
        break;
    default:
        if (client_refused)
            rc = client_refused_error(ep, why, err);
        else if (cc == CURLE_SSL_CONNECT_ERROR && strstr(d, "certificate verify failed"))
            rc = sbx_error_set(err, SBX_E_HTTP, 0,
                               "%s at '%s': TLS: the server's certificate does not match the "
                               "pinned certificate or is not trusted (%s)",
                               name, url, why);
        else if (cc == CURLE_SSL_CONNECT_ERROR)
            rc = sbx_error_set(err, SBX_E_HTTP, 0, "%s at '%s': TLS handshake failed: %s", name,
                               url, why);
        else if (cc == CURLE_RECV_ERROR || cc == CURLE_SEND_ERROR || cc == CURLE_GOT_NOTHING)
            rc = sbx_error_set(err, SBX_E_HTTP, 0, "the connection to %s at '%s' was lost: %s",
                               name, url, why);
        else
            rc = sbx_error_set(err, SBX_E_HTTP, 0, "%s at '%s': %.200s: %s", name, url,
                               what ? what : "", why);
    }
    sbx__endpoint_scrub(ep, err);
    return rc;
}

/* ---- one request ---- */

struct call {
    const struct sbx__http_req *req;
    struct sbx__http_resp *resp;
    size_t max;
    int too_big, sink_rc;
    struct sbx_error sink_err;
    char retry_after[64];
};

static int is_2xx(long s)
{
    return s >= 200 && s < 300;
}

static size_t on_body(char *p, size_t size, size_t nmemb, void *ud)
{
    struct call *x = ud;
    size_t n = size * nmemb;
    if (is_2xx(x->resp->status) && x->req->sink) {
        int rc = x->req->sink((const uint8_t *)p, n, x->req->sink_ud, &x->sink_err);
        if (rc < 0) {
            x->sink_rc = rc;
            return 0;
        }
        return n;
    }
    size_t max = is_2xx(x->resp->status) ? x->max : SBX__HTTP_ERROR_MAX;
    if (n > max - x->resp->body.len) {
        if (!is_2xx(x->resp->status))
            return n; /* an error body: its beginning is enough for the message */
        x->too_big = 1;
        return 0;
    }
    if (sbx_buf_add(&x->resp->body, p, n, NULL) < 0) {
        x->too_big = 1;
        return 0;
    }
    return n;
}

/* "Name: value" when the line is that header (any case): the value, trimmed, into out. */
int sbx__http_header_value(const char *p, size_t n, const char *name, char *out, size_t outsz)
{
    size_t nl = strlen(name);
    if (n <= nl || strncasecmp(p, name, nl) != 0 || p[nl] != ':')
        return 0;
    const char *v = p + nl + 1, *end = p + n;
    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\t'))
        end--;
    size_t len = (size_t)(end - v);
    if (len >= outsz)
        len = outsz - 1;
    memcpy(out, v, len);
    out[len] = '\0';
    return 1;
}

static size_t on_header(char *p, size_t size, size_t nmemb, void *ud)
{
    struct call *x = ud;
    size_t n = size * nmemb;
    if (n >= 12 && strncmp(p, "HTTP/", 5) == 0) {
        /* A status line (the body's destination depends on it). */
        const char *sp = memchr(p, ' ', n);
        if (sp && (size_t)(sp - p) + 4 <= n)
            x->resp->status = (sp[1] - '0') * 100 + (sp[2] - '0') * 10 + (sp[3] - '0');
        return n;
    }
    char v[1024];
    if (sbx__http_header_value(p, n, "Retry-After", x->retry_after, sizeof(x->retry_after)))
        return n;
    if (x->req->want_header && sbx__http_header_value(p, n, x->req->want_header, v, sizeof(v))) {
        free(x->resp->header);
        x->resp->header = sbx_xstrdup(v);
    }
    return n;
}

struct source {
    const struct sbx__http_req *req;
    int rc;
    struct sbx_error err;
    int64_t sent;
};

static size_t on_upload(char *p, size_t size, size_t nmemb, void *ud)
{
    struct source *s = ud;
    long got = s->req->source(s->req->source_ud, p, size * nmemb, &s->err);
    /* A body that ends short of its announced length would leave the server waiting for the
     * rest, and this request for the server's answer, until the request's bound (or for ever). */
    if (got == 0 && s->req->upload_size >= 0 && s->sent < s->req->upload_size)
        got = sbx_error_set(&s->err, SBX_E_IO, 0,
                            "the body ended after %lld of the %lld bytes it announced",
                            (long long)s->sent, (long long)s->req->upload_size);
    if (got < 0) {
        s->rc = (int)got;
        return CURL_READFUNC_ABORT;
    }
    s->sent += got;
    return (size_t)got;
}

/* The body and method of req on c; *text is the JSON text to free after. */
int sbx__http_set_body(CURL *c, const struct sbx__http_req *req, struct curl_slist **hdrs,
                       char **text)
{
    const char *method = req->method ? req->method : "GET";
    const char *ct = req->content_type ? req->content_type : "application/octet-stream";
    *text = NULL;
    if (strcmp(method, "HEAD") == 0)
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    else if (strcmp(method, "GET") != 0)
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    if (req->json) {
        *text = sbx_json_dumps(req->json, SBX_JSON_COMPACT);
        *hdrs = curl_slist_append(*hdrs, "Content-Type: application/json");
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(*text));
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, *text);
    } else if (req->body || req->body_len) {
        char *line = sbx_xasprintf("Content-Type: %s", ct);
        *hdrs = curl_slist_append(*hdrs, line);
        free(line);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, req->body ? req->body : "");
    } else if (req->source) {
        char *line = sbx_xasprintf("Content-Type: %s", ct);
        *hdrs = curl_slist_append(*hdrs, line);
        free(line);
        curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
        if (req->upload_size >= 0)
            curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)req->upload_size);
        else
            *hdrs = curl_slist_append(*hdrs, "Transfer-Encoding: chunked");
    } else if (strcmp(method, "POST") == 0) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, 0L);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
    }
    /* No "Expect: 100-continue" round trip before a body. */
    *hdrs = curl_slist_append(*hdrs, "Expect:");
    for (const char *const *h = req->headers; h && *h; h++)
        *hdrs = curl_slist_append(*hdrs, *h);
    return 0;
}

static int once(struct sbx__endpoint *ep, const struct sbx__http_req *req,
                struct sbx__http_resp *resp, struct call *x, struct sbx_error *err)
{
    CURL *c = curl_easy_init();
    struct curl_slist *hdrs = NULL;
    char *text = NULL;
    char cerr[CURL_ERROR_SIZE] = "";
    struct source src = {req, 0, SBX_ERROR_INIT, 0};
    if (!c)
        SBX_BUG("curl_easy_init failed");
    int rc = sbx__endpoint_apply(ep, c, req->path, req->http_1_1, &hdrs, err);
    if (rc < 0)
        goto out;
    sbx__endpoint_share(ep, c);
    sbx__http_set_body(c, req, &hdrs, &text);
    if (req->source) {
        curl_easy_setopt(c, CURLOPT_READFUNCTION, on_upload);
        curl_easy_setopt(c, CURLOPT_READDATA, &src);
    }
    int64_t t = req->timeout_ms ? req->timeout_ms : sbx__endpoint_timeout_ms(ep);
    if (t > 0)
        curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)t);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, cerr);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, x);
    CURLcode cc = curl_easy_perform(c);
    const char *what_m = req->method ? req->method : "GET";
    char what[256];
    snprintf(what, sizeof(what), "%s %.200s", what_m, req->path ? req->path : "/");
    if (cc == CURLE_OK) {
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &resp->status);
    } else if (x->sink_rc < 0) {
        rc = sbx_error_copy(err, &x->sink_err);
    } else if (src.rc < 0) {
        rc = sbx_error_copy(err, &src.err);
    } else if (x->too_big) {
        rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "%s at '%s' answered %s with more than %zu bytes",
                           sbx__endpoint_name(ep), sbx__endpoint_url(ep), what, x->max);
    } else {
        rc = sbx__http_transport_error(ep, c, (int)cc, cerr, what, err);
    }
out:
    sbx__endpoint_headers_free(hdrs);
    curl_easy_cleanup(c);
    free(text);
    sbx__endpoint_scrub(ep, err);
    return rc;
}

int sbx__http_call(struct sbx__endpoint *ep, const struct sbx__http_req *req,
                   struct sbx__http_resp *resp, struct sbx_error *err)
{
    int retries = req->no_retry || req->source ? 0 : sbx__endpoint_retries(ep);
    int reloaded = 0;
    for (int attempt = 1;; attempt++) {
        struct call x = {.req = req, .resp = resp, .sink_err = SBX_ERROR_INIT};
        x.max = req->max_body ? req->max_body : SBX__HTTP_BODY_MAX;
        resp_reset(resp);
        resp->attempts = attempt;
        int rc = once(ep, req, resp, &x, err);
        if (rc < 0)
            return rc;
        if (resp->status == 401 && !reloaded && !req->source && sbx__endpoint_reload_token(ep)) {
            reloaded = 1;
            attempt--;
            continue;
        }
        if ((resp->status != 429 && resp->status != 503) || attempt > retries)
            return 0;
        int64_t wait = sbx__http_backoff_ms(attempt, sbx__http_retry_after(x.retry_after),
                                            sbx__endpoint_retry_wait_ms(ep));
        sbx__endpoint_sleep(ep, wait);
    }
}

int sbx__http_json(struct sbx__endpoint *ep, const char *method, const char *path,
                   const json_t *body, long *status, json_t **out, struct sbx_error *err)
{
    struct sbx__http_req req = {.method = method, .path = path, .json = body};
    struct sbx__http_resp resp;
    sbx__http_resp_init(&resp);
    int rc = sbx__http_call(ep, &req, &resp, err);
    if (rc == 0 && status)
        *status = resp.status;
    if (rc == 0 && resp.status >= 400) {
        char what[256];
        snprintf(what, sizeof(what), "%s %.200s", method ? method : "GET", path);
        rc = sbx__http_status_error(ep, resp.status, resp.body.data, resp.body.len, what, err);
    }
    if (rc == 0 && out) {
        *out = NULL;
        if (resp.body.len) {
            struct sbx_json_limits lim = {.max_bytes = SBX__HTTP_BODY_MAX, .max_depth = 64};
            json_t *j = NULL;
            rc = sbx_json_parse(resp.body.data, resp.body.len, &lim, &j, err);
            if (rc < 0) {
                sbx_error_prefix(err, "%s at '%s': the answer to %s %.200s", sbx__endpoint_name(ep),
                                 sbx__endpoint_url(ep), method ? method : "GET", path);
                sbx__endpoint_scrub(ep, err);
            } else {
                *out = j;
            }
        }
    }
    sbx__http_resp_release(&resp);
    return rc;
}
