/* Connections taken over after an HTTP/1.1 upgrade: libcurl connects (CURLOPT_CONNECT_ONLY:
 * TCP or a unix socket, TLS), then carries bytes; sbx writes the request head and reads the
 * answer's (src/sandbox/wire/conn.h). */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "core/dl-ssl.h"
#include "sandbox/wire/conn.h"
#include "sandbox/wire/http.h"
#include "sandbox/wire/wire-internal.h"
#include "sbx/time.h"

#define READ_CHUNK 16384

#define TX_MAX 16384 /* one TLS record */

struct sbx__conn {
    CURL *c;
    int fd;
    struct sbx__endpoint *ep;
    struct sbx_buf pending; /* bytes after the answer's head, served first */
    size_t pend_off;
    char cerr[CURL_ERROR_SIZE];
    /* Bytes taken and not sent yet. OpenSSL wants a write it could not finish retried with
     * the same buffer and at least the same length ("bad write retry" otherwise), so they wait
     * here, in memory that never moves, not in the caller's queue. */
    unsigned char *tx; /* TX_MAX bytes while something waits, else NULL */
    size_t tx_len, tx_off;
};

int sbx__conn_connect(struct sbx__endpoint *ep, int64_t timeout_ms, struct sbx__conn **out,
                      struct sbx_error *err)
{
    struct sbx__conn *k = sbx_xcalloc(1, sizeof(*k));
    struct curl_slist *hdrs = NULL;
    k->fd = -1;
    k->ep = sbx__endpoint_ref(ep);
    sbx_buf_init(&k->pending, SBX_BUF_NOLIMIT);
    k->c = curl_easy_init();
    if (!k->c)
        SBX_BUG("curl_easy_init failed");
    int rc = sbx__endpoint_apply(ep, k->c, "/", 1, &hdrs, err);
    sbx__endpoint_headers_free(hdrs); /* the credential goes into the head sbx writes */
    if (rc < 0)
        goto fail;
    int64_t t = timeout_ms > 0 ? timeout_ms : sbx__endpoint_connect_timeout_ms(ep);
    curl_easy_setopt(k->c, CURLOPT_CONNECTTIMEOUT_MS, (long)t);
    curl_easy_setopt(k->c, CURLOPT_CONNECT_ONLY, 1L);
    curl_easy_setopt(k->c, CURLOPT_ERRORBUFFER, k->cerr);
    CURLcode cc = curl_easy_perform(k->c);
    if (cc != CURLE_OK) {
        rc = sbx__http_transport_error(ep, k->c, (int)cc, k->cerr, "connect", err);
        goto fail;
    }
    curl_socket_t s = CURL_SOCKET_BAD;
    if (curl_easy_getinfo(k->c, CURLINFO_ACTIVESOCKET, &s) != CURLE_OK || s == CURL_SOCKET_BAD) {
        rc = sbx_error_set(err, SBX_E_HTTP, 0, "%s at '%s': the connection has no socket",
                           sbx__endpoint_name(ep), sbx__endpoint_url(ep));
        goto fail;
    }
    k->fd = (int)s;
    /* libssl for the half-close's close_notify, loaded here rather than later on the loop's
     * thread (a library opened from a thread that ends is reported lost by valgrind). */
    if (sbx__endpoint_tls(ep) && (rc = sbx__ssl_load(err)) < 0)
        goto fail;
    *out = k;
    return 0;
fail:
    sbx__conn_free(k);
    return rc;
}

void sbx__conn_free(struct sbx__conn *k)
{
    if (!k)
        return;
    if (k->c)
        curl_easy_cleanup(k->c);
    sbx_buf_release(&k->pending);
    sbx__endpoint_free(k->ep);
    free(k->tx);
    free(k);
}

int sbx__conn_fd(const struct sbx__conn *k)
{
    return k->fd;
}

struct sbx__endpoint *sbx__conn_endpoint(const struct sbx__conn *k)
{
    return k->ep;
}

static int io_error(struct sbx__conn *k, CURLcode cc, struct sbx_error *err)
{
    return sbx__http_transport_error(k->ep, NULL, cc == CURLE_OK ? CURLE_RECV_ERROR : (int)cc,
                                     k->cerr, NULL, err);
}

int sbx__conn_recv(struct sbx__conn *k, void *p, size_t n, size_t *got, struct sbx_error *err)
{
    *got = 0;
    if (k->pend_off < k->pending.len) {
        size_t m = k->pending.len - k->pend_off;
        if (m > n)
            m = n;
        memcpy(p, k->pending.data + k->pend_off, m);
        k->pend_off += m;
        if (k->pend_off == k->pending.len) {
            sbx_buf_release(&k->pending);
            sbx_buf_init(&k->pending, SBX_BUF_NOLIMIT);
            k->pend_off = 0;
        }
        *got = m;
        return 0;
    }
    if (n == 0)
        return 0;
    k->cerr[0] = '\0';
    size_t r = 0;
    CURLcode cc = curl_easy_recv(k->c, p, n, &r);
    if (cc == CURLE_AGAIN)
        return 0;
    if (cc != CURLE_OK)
        return io_error(k, cc, err);
    if (r == 0)
        return SBX__CONN_EOF;
    *got = r;
    return 0;
}

/* Send what tx holds: 0 when it is empty, 1 when some is left (the socket is full), -code. */
int sbx__conn_flush(struct sbx__conn *k, struct sbx_error *err)
{
    while (k->tx_off < k->tx_len) {
        k->cerr[0] = '\0';
        size_t w = 0;
        /* Always from the same place with the same length until it went: OpenSSL's rule. */
        CURLcode cc = curl_easy_send(k->c, k->tx + k->tx_off, k->tx_len - k->tx_off, &w);
        if (cc == CURLE_AGAIN)
            return 1;
        if (cc != CURLE_OK)
            return io_error(k, cc, err);
        if (w == 0)
            return 1;
        k->tx_off += w;
    }
    k->tx_len = k->tx_off = 0;
    free(k->tx);
    k->tx = NULL;
    return 0;
}

size_t sbx__conn_out_pending(const struct sbx__conn *k)
{
    return k->tx_len - k->tx_off;
}

int sbx__conn_send(struct sbx__conn *k, const void *p, size_t n, size_t *sent,
                   struct sbx_error *err)
{
    *sent = 0;
    int rc = sbx__conn_flush(k, err);
    if (rc != 0 || n == 0)
        return rc < 0 ? rc : 0;
    size_t m = n < TX_MAX ? n : TX_MAX;
    if (!k->tx)
        k->tx = sbx_xmalloc(TX_MAX);
    memcpy(k->tx, p, m);
    k->tx_len = m;
    k->tx_off = 0;
    *sent = m;
    rc = sbx__conn_flush(k, err);
    return rc < 0 ? rc : 0;
}

/* TLS 1.3 closes each direction on its own: a close_notify ends what sbx sends, and the server
 * may go on answering; the socket's sending side is then shut too. */
static void tls_close_notify(struct sbx__conn *k)
{
    struct curl_tlssessioninfo *info = NULL;
    if (!sbx__endpoint_tls(k->ep) || sbx__ssl_load(NULL) < 0 ||
        curl_easy_getinfo(k->c, CURLINFO_TLS_SSL_PTR, &info) != CURLE_OK || !info ||
        info->backend != CURLSSLBACKEND_OPENSSL || !info->internals)
        return;
    (void)SSL_shutdown(info->internals);
}

int sbx__conn_shutdown_write(struct sbx__conn *k, struct sbx_error *err)
{
    if (sbx__conn_out_pending(k))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "the connection to '%s' still has bytes to send (flush first)",
                             sbx__endpoint_url(k->ep));
    tls_close_notify(k);
    if (shutdown(k->fd, SHUT_WR) < 0 && errno != ENOTCONN)
        return sbx_error_errno(err, errno,
                               "cannot close the sending side of the connection to "
                               "'%s'",
                               sbx__endpoint_url(k->ep));
    return 0;
}

static int wait_fd(struct sbx__conn *k, short events, int64_t deadline, struct sbx_error *err)
{
    for (;;) {
        int ms = sbx_deadline_poll_ms(deadline);
        if (ms == 0)
            return sbx_error_set(err, SBX_E_TIMEOUT, 0, "%s at '%s' did not answer in time",
                                 sbx__endpoint_name(k->ep), sbx__endpoint_url(k->ep));
        struct pollfd pf = {.fd = k->fd, .events = events};
        int r = poll(&pf, 1, ms);
        if (r > 0)
            return 0;
        if (r < 0 && errno != EINTR)
            return sbx_error_errno(err, errno, "poll");
    }
}

int sbx__conn_write_all(struct sbx__conn *k, const void *p, size_t n, int64_t deadline,
                        struct sbx_error *err)
{
    const char *c = p;
    for (;;) {
        size_t sent = 0;
        int rc = sbx__conn_send(k, c, n, &sent, err);
        if (rc < 0)
            return rc;
        c += sent;
        n -= sent;
        if (!n && !sbx__conn_out_pending(k))
            return 0;
        if (sent == 0 && (rc = wait_fd(k, POLLOUT, deadline, err)) < 0)
            return rc;
    }
}

int sbx__conn_read(struct sbx__conn *k, void *p, size_t n, int64_t deadline, size_t *got,
                   struct sbx_error *err)
{
    for (;;) {
        int rc = sbx__conn_recv(k, p, n, got, err);
        if (rc != 0 || *got)
            return rc;
        /* Nothing buffered anywhere (recv said so): the socket tells the truth now. */
        if ((rc = wait_fd(k, POLLIN, deadline, err)) < 0)
            return rc;
    }
}

/* ---- the upgrade ---- */

/* A header line the caller gives: "Name: value", no line break (nothing can be injected). */
static int check_line(const char *h, struct sbx_error *err)
{
    const char *colon = strchr(h, ':'), *sp = strpbrk(h, " \t");
    if (!colon || colon == h || strpbrk(h, "\r\n") || (sp && sp < colon))
        return sbx_error_set(err, SBX_E_INVAL, 0, "header line '%.60s' is not 'Name: value'", h);
    return 0;
}

int sbx__conn_check_target(const char *path, struct sbx_error *err)
{
    if (!path || path[0] != '/' || strpbrk(path, " \t\r\n"))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "request path '%.80s' is not an absolute "
                             "path without spaces",
                             path ? path : "");
    return 0;
}

static int build_head(struct sbx__conn *k, const struct sbx__upgrade *u, struct sbx_buf *out,
                      struct sbx_error *err)
{
    int rc = sbx__conn_check_target(u->path, err);
    for (const char *const *h = u->headers; rc == 0 && h && *h; h++)
        rc = check_line(*h, err);
    if (rc < 0)
        return rc;
    if ((rc = sbx_buf_addf(out, err, "%s %s%s HTTP/1.1\r\nHost: %s\r\n",
                           u->method ? u->method : "GET", sbx__endpoint_base_path(k->ep), u->path,
                           sbx__endpoint_host(k->ep))) < 0 ||
        (rc = sbx__endpoint_auth_line(k->ep, out, err)) < 0)
        return rc;
    for (const char *const *h = u->headers; h && *h; h++)
        if ((rc = sbx_buf_addf(out, err, "%s\r\n", *h)) < 0)
            return rc;
    if (u->body || u->body_len)
        rc = sbx_buf_addf(out, err, "Content-Type: %s\r\nContent-Length: %zu\r\n",
                          u->content_type ? u->content_type : "application/json", u->body_len);
    if (rc == 0)
        rc = sbx_buf_add(out, "\r\n", 2, err);
    if (rc == 0 && u->body_len)
        rc = sbx_buf_add(out, u->body, u->body_len, err);
    return rc;
}

int sbx__conn_read_head(struct sbx__conn *k, int64_t deadline, struct sbx__http_head *head,
                        struct sbx_buf *raw, struct sbx_error *err)
{
    struct sbx_buf in;
    char buf[READ_CHUNK];
    long hlen = 0;
    int rc = 0;
    sbx_buf_init(&in, SBX__HEAD_MAX + READ_CHUNK);
    while (hlen == 0) {
        size_t got = 0;
        rc = sbx__conn_read(k, buf, sizeof(buf), deadline, &got, err);
        if (rc == SBX__CONN_EOF) {
            rc = sbx_error_set(err, SBX_E_HTTP, 0,
                               "%s at '%s' closed the connection without an "
                               "answer",
                               sbx__endpoint_name(k->ep), sbx__endpoint_url(k->ep));
            break;
        }
        if (rc < 0 || (rc = sbx_buf_add(&in, buf, got, err)) < 0)
            break;
        hlen = sbx__head_len(in.data, in.len, err);
        if (hlen < 0)
            rc = (int)hlen;
        if (rc < 0)
            break;
    }
    if (rc == 0 && raw)
        rc = sbx_buf_add(raw, in.data, (size_t)hlen, err);
    if (rc == 0 && (rc = sbx__head_parse(in.data, (size_t)hlen, head, err)) == 0) {
        /* What came after the head is the stream's (or the error body's) start. */
        int r2 = sbx_buf_add(&k->pending, in.data + hlen, in.len - (size_t)hlen, err);
        (void)r2; /* no limit */
    }
    if (rc < 0) {
        sbx_error_prefix(err, "%s at '%s'", sbx__endpoint_name(k->ep), sbx__endpoint_url(k->ep));
        sbx__endpoint_scrub(k->ep, err);
    }
    sbx_buf_release(&in);
    return rc;
}

int sbx__conn_refused(struct sbx__conn *k, const struct sbx__http_head *h, const char *what,
                      int64_t deadline, struct sbx_error *err)
{
    /* The error body: by Content-Length, or until the server closes; at most 64 KiB, and not
     * much time: the status says enough if the body does not come. */
    struct sbx_buf body;
    sbx_buf_init(&body, SBX__HTTP_ERROR_MAX);
    int64_t soon = sbx_deadline_after_ms(2000);
    if (soon > deadline)
        soon = deadline;
    size_t want = h->content_length >= 0 && (uint64_t)h->content_length < SBX__HTTP_ERROR_MAX
                          ? (size_t)h->content_length
                          : SBX__HTTP_ERROR_MAX;
    while (body.len < want && !h->chunked) {
        char buf[4096];
        size_t got = 0;
        struct sbx_error ignored = SBX_ERROR_INIT;
        size_t n = want - body.len < sizeof(buf) ? want - body.len : sizeof(buf);
        if (sbx__conn_read(k, buf, n, soon, &got, &ignored) != 0 ||
            sbx_buf_add(&body, buf, got, NULL) < 0)
            break;
    }
    int rc = sbx__http_status_error(k->ep, h->status, body.data, body.len, what, err);
    sbx_buf_release(&body);
    return rc;
}

int sbx__conn_open(struct sbx__endpoint *ep, const struct sbx__upgrade *u, struct sbx__conn **out,
                   struct sbx__http_head *head, struct sbx_error *err)
{
    int64_t t = u->timeout_ms > 0 ? u->timeout_ms : sbx__endpoint_timeout_ms(ep);
    int64_t deadline = sbx_deadline_after_ms(t);
    struct sbx__conn *k = NULL;
    struct sbx__http_head h = {0};
    struct sbx_buf req;
    sbx_buf_init(&req, SBX_BUF_NOLIMIT);
    int rc = sbx__conn_connect(ep, t, &k, err);
    if (rc < 0)
        goto out;
    if ((rc = build_head(k, u, &req, err)) < 0 ||
        (rc = sbx__conn_write_all(k, req.data, req.len, deadline, err)) < 0 ||
        (rc = sbx__conn_read_head(k, deadline, &h, NULL, err)) < 0)
        goto out;
    int want = u->expect ? u->expect : 101;
    if (h.status != want && (!u->expect_also || h.status != u->expect_also)) {
        char what[256];
        snprintf(what, sizeof(what), "%s %.200s", u->method ? u->method : "GET", u->path);
        rc = sbx__conn_refused(k, &h, what, deadline, err);
        goto out;
    }
    if (head) {
        *head = h;
        h.text = NULL;
    }
    *out = k;
    k = NULL;
out:
    sbx__head_release(&h);
    sbx__wipe_buf(&req);
    sbx_buf_release(&req);
    sbx__conn_free(k);
    sbx__endpoint_scrub(ep, err);
    return rc;
}
