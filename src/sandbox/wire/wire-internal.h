/* sbx internal: what the I/O files of the remote layer (http.c, conn.c, loop.c, ...) share and
 * nothing else needs. */
#ifndef SBX_SANDBOX_WIRE_WIRE_INTERNAL_H
#define SBX_SANDBOX_WIRE_WIRE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/random.h>

#include "core/dl-curl.h"
#include "sandbox/wire/endpoint.h"
#include "sandbox/wire/http.h"
#include "sbx/error.h"

/* Random bytes for jitter (not secret: a failed getrandom leaves zeros). */
static inline void sbx__wire_random(void *p, size_t n)
{
    memset(p, 0, n);
    (void)!getrandom(p, n, GRND_NONBLOCK);
}

/* Whether ep pins the server's certificate (its check fails as a verification failure). */
int sbx__endpoint_cert_pinned(const struct sbx__endpoint *ep);

/* Whether ep has a client certificate, and its validity (unix seconds, 0: unknown). */
void sbx__endpoint_client_cert(const struct sbx__endpoint *ep, int *has, int64_t *from,
                               int64_t *until);

/* The error for a failed curl transfer or connection (c: its handle, or NULL when it is not
 * one request's; cc: its CURLcode, detail: curl's error buffer, what: "GET /path" or NULL):
 * unreachable, TLS trust, pin, client certificate, timeout, a lost connection, each naming the
 * endpoint. Scrubbed. */
int sbx__http_transport_error(const struct sbx__endpoint *ep, CURL *c, int cc, const char *detail,
                              const char *what, struct sbx_error *err);
/* When the header line p[0..n) is "name: value" (name in any case): 1 and the trimmed value
 * in out (cut to outsz - 1), else 0. */
int sbx__http_header_value(const char *p, size_t n, const char *name, char *out, size_t outsz);
/* Set req's method and body on c, append the header lines it needs (content type, the
 * caller's) to *hdrs; *text: a JSON body's text, to free after the transfer. */
int sbx__http_set_body(CURL *c, const struct sbx__http_req *req, struct curl_slist **hdrs,
                       char **text);

/* conn.c, for the WebSocket client (wsconn.c): a request target ("/path?query", no spaces or
 * line breaks); the answer's head read from k (what follows it is kept for the first reads);
 * raw (may be NULL) gets the head's bytes; the error for an answer with an unexpected status (its
 * body read briefly). */
struct sbx__conn;
struct sbx__http_head;
int sbx__conn_check_target(const char *path, struct sbx_error *err);
int sbx__conn_read_head(struct sbx__conn *k, int64_t deadline, struct sbx__http_head *head,
                        struct sbx_buf *raw, struct sbx_error *err);
int sbx__conn_refused(struct sbx__conn *k, const struct sbx__http_head *h, const char *what,
                      int64_t deadline, struct sbx_error *err);

#endif
