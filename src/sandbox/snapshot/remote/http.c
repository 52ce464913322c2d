/* Requests to a remote snapshot store: the URL of an object, the signed headers (SigV4 or Azure
 * Shared Key, or a SAS, or none for a public bucket), one curl easy handle per thread, bounded
 * answers, transport failures retried. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/dl-curl.h"
#include "sandbox/snapshot/remote/remote.h"
#include "sbx/hash.h"
#include "sbx/strv.h"

#define ERROR_BODY_MAX 65536
#define AZURE_VERSION  "2020-10-02"
#define EMPTY_SHA256   "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define SEND_ATTEMPTS  3

static void keep(int rc)
{
    if (rc < 0)
        sbx__bug(__FILE__, __LINE__, "unbounded buffer refused a write");
}

static int str_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* What a request sends: its URL and headers, made once per attempt (dates move). */
struct prepared {
    struct sbx_buf url;
    struct sbx_strv headers; /* "Name: value" lines for curl */
};

/* The request path: the store's path, then the object key. */
static char *request_path(struct sbx_snapshot_remote *r, const char *key)
{
    struct sbx_buf p;
    sbx_buf_init(&p, SBX_BUF_NOLIMIT);
    keep(sbx_buf_adds(&p, r->path0, NULL));
    if (key) {
        keep(sbx_buf_addch(&p, '/', NULL));
        sbx__uri_encode(key, 1, &p);
    } else if (!p.len) {
        keep(sbx_buf_addch(&p, '/', NULL));
    }
    return sbx_buf_detach(&p, NULL);
}

/* The query as "k=v&..." sorted by encoded name (as SigV4 wants it; Azure ignores the order). */
static char *encoded_query(const char *const *query)
{
    struct sbx_strv pairs;
    sbx_strv_init(&pairs);
    for (const char *const *q = query; q && *q; q++) {
        struct sbx_buf e;
        sbx_buf_init(&e, SBX_BUF_NOLIMIT);
        size_t k = strcspn(*q, "=");
        char *name = sbx_xstrndup(*q, k);
        sbx__uri_encode(name, 0, &e);
        keep(sbx_buf_addch(&e, '=', NULL));
        sbx__uri_encode((*q)[k] ? *q + k + 1 : "", 0, &e);
        free(name);
        sbx_strv_push_take(&pairs, sbx_buf_detach(&e, NULL));
    }
    if (pairs.n)
        qsort(pairs.v, pairs.n, sizeof(char *), str_cmp);
    struct sbx_buf out;
    sbx_buf_init(&out, SBX_BUF_NOLIMIT);
    for (size_t i = 0; i < pairs.n; i++)
        keep(sbx_buf_addf(&out, NULL, "%s%s", i ? "&" : "", pairs.v[i]));
    sbx_strv_release(&pairs);
    keep(sbx_buf_adds(&out, "", NULL));
    return sbx_buf_detach(&out, NULL);
}

static uint64_t body_len(const struct sbx__rreq *q)
{
    return q->body_fd >= 0 ? q->body_fd_len : q->body_len;
}

static int sign_s3(struct sbx_snapshot_remote *r, const struct sbx__rreq *q, const char *path,
                   const char *query, struct prepared *p, struct sbx_error *err)
{
    char date[20];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(date, sizeof(date), "%Y%m%dT%H%M%SZ", &tm);
    const char *payload = q->body_sha256 ? q->body_sha256 : EMPTY_SHA256;
    struct sbx_strv signed_h;
    sbx_strv_init(&signed_h);
    sbx_strv_push_take(&signed_h, sbx_xasprintf("host:%s", r->host));
    sbx_strv_push_take(&signed_h, sbx_xasprintf("x-amz-content-sha256:%s", payload));
    sbx_strv_push_take(&signed_h, sbx_xasprintf("x-amz-date:%s", date));
    if (r->token)
        sbx_strv_push_take(&signed_h, sbx_xasprintf("x-amz-security-token:%s",
                                                    sbx_secret_reveal(r->token, NULL)));
    int rc = 0;
    if (r->key) {
        struct sbx_buf auth;
        sbx_buf_init(&auth, SBX_BUF_NOLIMIT);
        struct sbx__sigv4 s = {q->method,
                               path,
                               query,
                               (const char *const *)signed_h.v,
                               payload,
                               date,
                               r->region,
                               "s3",
                               sbx_secret_reveal(r->key, NULL),
                               sbx_secret_reveal(r->secret, NULL)};
        rc = sbx__sigv4_authorization(&s, &auth, err);
        if (rc == 0)
            sbx_strv_push_take(&p->headers, sbx_xasprintf("Authorization: %s", auth.data));
        sbx_buf_release(&auth);
    }
    /* host is sent by prepare(); the others as signed */
    for (size_t i = 1; i < signed_h.n; i++) {
        char *c = strchr(signed_h.v[i], ':');
        sbx_strv_push_take(&p->headers, sbx_xasprintf("%.*s: %s", (int)(c - signed_h.v[i]),
                                                      signed_h.v[i], c + 1));
    }
    for (size_t i = 0; i < signed_h.n; i++)
        explicit_bzero(signed_h.v[i], strlen(signed_h.v[i]));
    sbx_strv_release(&signed_h);
    return rc;
}

static int sign_azure(struct sbx_snapshot_remote *r, const struct sbx__rreq *q, const char *path,
                      struct prepared *p, struct sbx_error *err)
{
    char date[40];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S GMT", &tm);
    struct sbx_strv ms, canon_q;
    sbx_strv_init(&ms);
    sbx_strv_init(&canon_q);
    int put = strcmp(q->method, "PUT") == 0;
    if (put)
        sbx_strv_push(&ms, "x-ms-blob-type:BlockBlob");
    sbx_strv_push_take(&ms, sbx_xasprintf("x-ms-date:%s", date));
    sbx_strv_push(&ms, "x-ms-version:" AZURE_VERSION);
    for (const char *const *x = q->query; x && *x; x++) {
        size_t k = strcspn(*x, "=");
        sbx_strv_push_take(&canon_q,
                           sbx_xasprintf("%.*s:%s", (int)k, *x, (*x)[k] ? *x + k + 1 : ""));
    }
    if (canon_q.n)
        qsort(canon_q.v, canon_q.n, sizeof(char *), str_cmp);
    int rc = 0;
    if (r->account_key) {
        size_t kl;
        const char *k = sbx_secret_reveal(r->account_key, &kl);
        struct sbx__azsig s = {q->method,
                               body_len(q),
                               NULL,
                               (const char *const *)ms.v,
                               r->u.account,
                               path,
                               (const char *const *)canon_q.v,
                               (const unsigned char *)k,
                               kl};
        struct sbx_buf auth;
        sbx_buf_init(&auth, SBX_BUF_NOLIMIT);
        rc = sbx__azure_authorization(&s, &auth, err);
        if (rc == 0)
            sbx_strv_push_take(&p->headers, sbx_xasprintf("Authorization: %s", auth.data));
        sbx_buf_release(&auth);
    }
    for (size_t i = 0; i < ms.n; i++) {
        char *c = strchr(ms.v[i], ':');
        sbx_strv_push_take(&p->headers,
                           sbx_xasprintf("%.*s: %s", (int)(c - ms.v[i]), ms.v[i], c + 1));
    }
    sbx_strv_release(&ms);
    sbx_strv_release(&canon_q);
    return rc;
}

static int prepare(struct sbx_snapshot_remote *r, const struct sbx__rreq *q, struct prepared *p,
                   struct sbx_error *err)
{
    char *path = request_path(r, q->key);
    char *query = encoded_query(q->query);
    sbx_buf_init(&p->url, SBX_BUF_NOLIMIT);
    sbx_strv_init(&p->headers);
    keep(sbx_buf_addf(&p->url, NULL, "%s%s", r->base, path));
    const char *sas = r->sas && !r->account_key ? sbx_secret_reveal(r->sas, NULL) : NULL;
    if (*query || sas)
        keep(sbx_buf_addf(&p->url, NULL, "?%s%s%s", query, *query && sas ? "&" : "",
                          sas ? sas : ""));
    int rc = r->u.kind == SBX__RSTORE_AZURE ? sign_azure(r, q, path, p, err)
                                            : sign_s3(r, q, path, query, p, err);
    /* the Host that was signed, whatever curl would make of a port in the URL */
    sbx_strv_push_take(&p->headers, sbx_xasprintf("Host: %s", r->host));
    sbx_strv_push(&p->headers, "Expect:");
    sbx_strv_push(&p->headers, "User-Agent: sbx");
    free(path);
    free(query);
    return rc;
}

static void prepared_release(struct prepared *p)
{
    /* the URL may hold a SAS, the headers a signature or a session token */
    if (p->url.data)
        explicit_bzero(p->url.data, p->url.len);
    for (size_t i = 0; i < p->headers.n; i++)
        explicit_bzero(p->headers.v[i], strlen(p->headers.v[i]));
    sbx_buf_release(&p->url);
    sbx_strv_release(&p->headers);
}

struct xfer {
    const struct sbx__rreq *q;
    struct sbx__rresp *resp;
    CURL *c;
    uint64_t sent;      /* bytes of the body read so far */
    uint64_t delivered; /* bytes given to the sink */
    int failed;         /* the sink or the answer's limit stopped the transfer */
    struct sbx_error serr;
};

static size_t on_read(char *buf, size_t size, size_t nmemb, void *ud)
{
    struct xfer *x = ud;
    const struct sbx__rreq *q = x->q;
    uint64_t left = body_len(q) - x->sent;
    size_t n = size * nmemb < left ? size * nmemb : (size_t)left;
    if (!n)
        return 0;
    if (q->body_fd >= 0) {
        ssize_t k = pread(q->body_fd, buf, n, (off_t)x->sent);
        if (k <= 0)
            return CURL_READFUNC_ABORT;
        n = (size_t)k;
    } else {
        memcpy(buf, (const char *)q->body + x->sent, n);
    }
    x->sent += n;
    return n;
}

static size_t on_write(char *p, size_t size, size_t nmemb, void *ud)
{
    struct xfer *x = ud;
    size_t n = size * nmemb;
    long status = 0;
    curl_easy_getinfo(x->c, CURLINFO_RESPONSE_CODE, &status);
    if (x->q->sink && status / 100 == 2) {
        if (x->q->sink(x->q->sink_ctx, p, n, &x->serr) < 0) {
            x->failed = 1;
            return 0;
        }
        x->delivered += n;
        return n;
    }
    if (sbx_buf_add(&x->resp->body, p, n, NULL) < 0) {
        if (status / 100 != 2)
            return n; /* an error page: its beginning is enough */
        x->failed = 1;
        sbx_error_set(&x->serr, SBX_E_TOOBIG, 0, "the answer is larger than %zu bytes",
                      x->q->max_answer);
        return 0;
    }
    return n;
}

static size_t on_header(char *p, size_t size, size_t nmemb, void *ud)
{
    struct xfer *x = ud;
    size_t n = size * nmemb;
    static const char name[] = "x-ms-error-code:";
    if (n > sizeof(name) && strncasecmp(p, name, sizeof(name) - 1) == 0) {
        const char *v = p + sizeof(name) - 1;
        size_t vn = n - (sizeof(name) - 1);
        while (vn && (*v == ' ' || *v == '\t'))
            v++, vn--;
        while (vn && (v[vn - 1] == '\r' || v[vn - 1] == '\n' || v[vn - 1] == ' '))
            vn--;
        snprintf(x->resp->code, sizeof(x->resp->code), "%.*s", (int)vn, v);
    }
    return n;
}

static void setup(CURL *c, struct xfer *x, struct prepared *p, struct curl_slist **hl, char *cerr)
{
    const struct sbx__rreq *q = x->q;
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, p->url.data);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, cerr);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    /* a transfer that moves nothing for a minute is a dead one */
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, x);
    if (strcmp(q->method, "HEAD") == 0) {
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    } else if (strcmp(q->method, "PUT") == 0) {
        curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(c, CURLOPT_READFUNCTION, on_read);
        curl_easy_setopt(c, CURLOPT_READDATA, x);
        curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)body_len(q));
    } else if (strcmp(q->method, "GET") != 0) {
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, q->method);
    }
    for (size_t i = 0; i < p->headers.n; i++)
        *hl = curl_slist_append(*hl, p->headers.v[i]);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, *hl);
}

/* The service's error code from an XML error body (<Code>X</Code>), when the header had none. */
static void xml_code(struct sbx__rresp *resp)
{
    if (resp->code[0] || !resp->body.len)
        return;
    const char *b = strstr(sbx_buf_cstr(&resp->body), "<Code>");
    const char *e = b ? strstr(b, "</Code>") : NULL;
    if (b && e && e - b - 6 < (long)sizeof(resp->code))
        snprintf(resp->code, sizeof(resp->code), "%.*s", (int)(e - b - 6), b + 6);
}

/* The URL of a request without its query (which may hold a SAS), for messages. */
static void where(struct sbx_snapshot_remote *r, const struct sbx__rreq *q, char *out, size_t n)
{
    snprintf(out, n, "%s/%s", r->u.name, q->key ? q->key + strlen(r->u.prefix) : "");
}

int sbx__rstore_send(struct sbx_snapshot_remote *r, void **conn, const struct sbx__rreq *q,
                     struct sbx__rresp *resp, struct sbx_error *err)
{
    int rc = sbx__curl_load(err);
    if (rc < 0)
        return rc;
    if (!*conn && !(*conn = curl_easy_init()))
        sbx__bug(__FILE__, __LINE__, "curl_easy_init failed");
    CURL *c = *conn;
    char w[512];
    where(r, q, w, sizeof(w));
    for (int attempt = 1;; attempt++) {
        struct prepared p;
        struct curl_slist *hl = NULL;
        char cerr[CURL_ERROR_SIZE] = "";
        struct xfer x = {q, resp, c, 0, 0, 0, SBX_ERROR_INIT};
        sbx_buf_reset(&resp->body);
        resp->code[0] = 0;
        resp->status = 0;
        if ((rc = prepare(r, q, &p, err)) < 0) {
            prepared_release(&p);
            return rc;
        }
        setup(c, &x, &p, &hl, cerr);
        CURLcode cc = curl_easy_perform(c);
        curl_slist_free_all(hl);
        prepared_release(&p);
        if (x.failed) {
            *err = x.serr;
            return -(int)x.serr.code;
        }
        if (cc == CURLE_OK) {
            curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &resp->status);
            xml_code(resp);
            /* a server error before anything reached the sink is tried again */
            if (resp->status / 100 != 5 || attempt >= SEND_ATTEMPTS || x.delivered)
                return 0;
        } else if (attempt >= SEND_ATTEMPTS || x.delivered) {
            return sbx_error_set(err, SBX_E_HTTP, 0, "%s '%s': %s", q->method, w,
                                 cerr[0] ? cerr : curl_easy_strerror(cc));
        }
        usleep(200000u * (unsigned)attempt);
    }
}

void sbx__rstore_conn_free(void *conn)
{
    if (conn)
        curl_easy_cleanup(conn);
}

int sbx__rstore_fail(struct sbx_snapshot_remote *r, const struct sbx__rresp *resp, const char *what,
                     struct sbx_error *err)
{
    const char *code = resp->code[0] ? resp->code : NULL;
    if (resp->status == 401 || resp->status == 403)
        return sbx_error_set(err, SBX_E_PERM, 0,
                             "%s: access denied (HTTP %ld%s%s): check the credentials", what,
                             resp->status, code ? ", " : "", code ? code : "");
    if (code && (strcmp(code, "NoSuchBucket") == 0 || strcmp(code, "ContainerNotFound") == 0))
        return sbx_error_set(err, SBX_E_NOTFOUND, 0, "%s: the %s '%s' does not exist", what,
                             r->u.kind == SBX__RSTORE_AZURE ? "container" : "bucket", r->u.bucket);
    return sbx_error_set(err, resp->status == 404 ? SBX_E_NOTFOUND : SBX_E_API, 0,
                         "%s: HTTP %ld%s%s", what, resp->status, code ? " " : "", code ? code : "");
}
