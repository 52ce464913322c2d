/* sbx internal: HTTP requests to an endpoint (endpoint.h), blocking, on the caller's thread
 * (docs/internals/remote.md). The event loop's asynchronous transfers (loop.h, sbx__xfer) take
 * the same struct sbx__http_req.
 *
 * One request: the endpoint's URL, TLS and credential, a body (JSON, bytes, or read from a
 * callback), the response body into memory (bounded) or handed to a sink as it arrives (a
 * streamed response: NDJSON, SSE, Connect, Docker's multiplexed stream, a tar), one response
 * header kept if asked. 429 and 503 are retried with backoff, honouring Retry-After (bounded by
 * the endpoint's max_retry_wait_ms); a 401 with a token from a file reads the file again and
 * retries once. Transport failures are errors that name the endpoint and say what failed:
 * unreachable (refused, no route, name unknown), TLS (the server's certificate is not trusted,
 * the pin does not match, the server refused sbx's client certificate), a timeout. Every
 * error is scrubbed of the endpoint's credentials. */
#ifndef SBX_SANDBOX_WIRE_HTTP_H
#define SBX_SANDBOX_WIRE_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "sandbox/wire/endpoint.h"
#include "sbx/buf.h"
#include "sbx/error.h"

#define SBX__HTTP_BODY_MAX  ((size_t)16 << 20) /* a response body kept in memory */
#define SBX__HTTP_ERROR_MAX ((size_t)64 << 10) /* an error body kept for its message */

/* Bytes of a body: a 2xx response's (sink) or a request's (source). */
typedef int sbx__http_sink_fn(const uint8_t *p, size_t n, void *ud, struct sbx_error *err);
/* Fill buf with up to n bytes of a request body: the count, 0 at its end, or -code. */
typedef long sbx__http_source_fn(void *ud, void *buf, size_t n, struct sbx_error *err);

/* All zero but path is a GET with no body into memory. Borrowed for the call. */
struct sbx__http_req {
    const char *method; /* NULL: "GET"; "HEAD" reads no body */
    const char *path;   /* after the endpoint's base path, query included, escaped by the
                           caller (sbx__http_escape) */
    /* The body: json (Content-Type: application/json), else body_len bytes of body, else a
     * source of upload_size bytes (-1: unknown, sent chunked); none: no body (POST: empty). */
    const json_t *json;
    const void *body;
    size_t body_len;
    sbx__http_source_fn *source;
    void *source_ud;
    int64_t upload_size;
    const char *content_type;   /* of body / source; NULL: application/octet-stream */
    const char *const *headers; /* extra "Name: value" lines, NULL-terminated, or NULL */
    /* A 2xx body: to sink as it arrives (sink may be called with any split; a negative
     * return stops the transfer and is returned), else into resp->body up to max_body. An
     * error status's body always goes to resp->body (up to SBX__HTTP_ERROR_MAX). */
    sbx__http_sink_fn *sink;
    void *sink_ud;
    size_t max_body;         /* 0: SBX__HTTP_BODY_MAX */
    const char *want_header; /* keep this response header's value in resp->header */
    int64_t timeout_ms;      /* 0: the endpoint's; -1: none (a long stream, a watch) */
    int no_retry;            /* never retry (the server may have acted on the request) */
    int http_1_1;            /* force HTTP/1.1 for this request */
};

struct sbx__http_resp {
    long status;
    struct sbx_buf body;
    char *header; /* want_header's value, or NULL; owned */
    int attempts; /* requests made (retries + 1) */
};

void sbx__http_resp_init(struct sbx__http_resp *r);
void sbx__http_resp_release(struct sbx__http_resp *r);

/* One request (with its retries). Any HTTP status is returned in resp (a 2xx is not checked);
 * errors are the transport's (SBX_E_HTTP unreachable or TLS, SBX_E_TIMEOUT), a sink's or
 * source's own, or SBX_E_TOOBIG for a body over max_body. */
int sbx__http_call(struct sbx__endpoint *ep, const struct sbx__http_req *req,
                   struct sbx__http_resp *resp, struct sbx_error *err);

/* A JSON call: method and path, body (may be NULL); a status >= 400 is the error of
 * sbx__http_status_error; *out (may be NULL) the parsed body (NULL when empty), caller owns;
 * *status (may be NULL) the status. Bodies are read with the JSON reader's limits (16 MiB,
 * depth 64). */
int sbx__http_json(struct sbx__endpoint *ep, const char *method, const char *path,
                   const json_t *body, long *status, json_t **out, struct sbx_error *err);

/* The error for an HTTP error status, with what the server said (sbx__http_error_text) and
 * the request ("what": "GET /api/v1/pods", may be NULL): "<name> at '<url>' answered <what>
 * with HTTP 403 (Forbidden): <server's message>". Codes: 400 and 422 SBX_E_INVAL, 401 and 403
 * SBX_E_PERM (401 adds "the credentials were refused", 403 "not allowed"), 404 SBX_E_NOTFOUND,
 * 409 SBX_E_EXISTS, 408 and 504 SBX_E_TIMEOUT, 413 SBX_E_TOOBIG, others SBX_E_API. Scrubbed.
 * Always returns a negative code. */
int sbx__http_status_error(const struct sbx__endpoint *ep, long status, const void *body, size_t n,
                           const char *what, struct sbx_error *err);

/* A hosted service's own words for an error status of the request what ("GET /path"): set err
 * and return its -code, or return 0 to leave the status to sbx__http_status_error. said: what
 * the server said (sbx__http_error_text, "" when nothing). */
typedef int sbx__http_words_fn(void *ctx, long status, const char *what, const char *said,
                               struct sbx_error *err);
/* The error for an error status of a hosted service (body: n bytes of its answer): its words
 * (words(ctx, ...)) when it has some for the status, else sbx__http_status_error's; scrubbed
 * either way. Always negative. */
int sbx__http_service_error(const struct sbx__endpoint *ep, long status, const void *body, size_t n,
                            const char *what, sbx__http_words_fn *words, void *ctx,
                            struct sbx_error *err);

/* What a server's error body says, cleaned (sbx__wire_clean) into out, from the shapes servers
 * use: Kubernetes' Status {"kind": "Status", "message", "reason"}, LXD's {"error",
 * "error_code"}, Docker's {"message"}, Connect's {"code", "message"}, {"error": {"message"}}
 * and {"error": "..."}, {"detail"}, {"msg"}; else the first line of a short text body. 0 when
 * nothing was found (out is ""), else 1. */
int sbx__http_error_text(const void *body, size_t n, char *out, size_t outsz);

/* A Retry-After value (seconds or an HTTP date) in milliseconds from now; -1 when it is
 * neither. */
int64_t sbx__http_retry_after(const char *value);
/* The wait before retry number attempt (1, 2, ...): Retry-After when given (retry_after_ms >= 0),
 * else 200 ms doubled per attempt with up to 25 % jitter; at most max_ms. */
int64_t sbx__http_backoff_ms(int attempt, int64_t retry_after_ms, int64_t max_ms);

/* s percent-encoded for a path segment or query value (unreserved characters kept; keep_slash:
 * '/' too). Caller frees. */
char *sbx__http_escape(const char *s, int keep_slash);

/* Ready-made sinks: into the fd *ud points to (blocking writes); into the NDJSON decoder or
 * the SSE parser ud points to (struct sbx__ndjson, struct sbx__sse: call its finish after the
 * request to tell a whole stream from a cut one). */
sbx__http_sink_fn sbx__http_sink_fd;
sbx__http_sink_fn sbx__http_sink_ndjson;
sbx__http_sink_fn sbx__http_sink_sse;

#endif
