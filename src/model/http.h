/* sbx internal: one HTTP POST over libcurl, with a size limit, timeouts, cancellation and an
 * optional streaming sink for successful answers. Retrying is the caller's business. */
#ifndef SBX_MODEL_HTTP_H
#define SBX_MODEL_HTTP_H

#include <pthread.h>
#include <signal.h>
#include <stdint.h>

#include "sbx/buf.h"
#include "sbx/error.h"

/* Receives body bytes of a 2xx answer when streaming. Negative return aborts the transfer
 * and is returned by sbx__model_http_post with err as the sink filled it. */
typedef int sbx__model_http_sink(const char *p, size_t n, void *ud, struct sbx_error *err);

/* The connections of one model, kept open between its requests (a libcurl share of the
 * connection and DNS caches), so a run talks to its server over one connection instead of one
 * per call. Each request still has an easy handle of its own: concurrent calls (parallel nested
 * runs) take different connections, and nothing else of libcurl's stays open between calls. */
struct sbx__model_http_pool {
    pthread_mutex_t locks[8]; /* one per curl_lock_data */
    pthread_mutex_t make;     /* guards making the share on the first request */
    int made;                 /* the share was tried (libcurl is loaded on first use) */
    void *share;              /* CURLSH; NULL until the first request, or if it cannot be made */
};

void sbx__model_http_pool_init(struct sbx__model_http_pool *p);
/* Closes the kept connections. */
void sbx__model_http_pool_release(struct sbx__model_http_pool *p);

struct sbx__model_http_req {
    struct sbx__model_http_pool *pool; /* NULL: a connection of its own, closed after the request */
    const char *url;
    const char *bearer;         /* API key for "Authorization: Bearer"; NULL: no header */
    const char *const *headers; /* more "Name: value" lines, after sbx's own; NULL: none */
    const char *body;
    size_t body_len;
    int stream; /* adds "Accept: text/event-stream" */
    int64_t timeout_ms;
    int64_t connect_timeout_ms;
    int64_t first_byte_ms; /* 0: none; no body byte this long after the start: SBX_E_TIMEOUT */
    int64_t idle_ms;       /* 0: none; no body byte this long after the last one: likewise */
    void (*on_wait)(void *data, int64_t waited_ms, int attempt); /* see sbx_model_options */
    void *on_wait_data;
    int attempt;
    size_t max_body;            /* limit on a buffered body and on all streamed bytes */
    sbx__model_http_sink *sink; /* NULL: buffer the body */
    void *ud;
    const volatile sig_atomic_t *cancel;
    const char *method;      /* NULL: POST with body; "DELETE": a DELETE without a body */
    const char *want_header; /* a response header to keep in resp->header (e.g. a session id) */
};

struct sbx__model_http_resp {
    long status;            /* 0 when no answer arrived */
    int64_t retry_after_ms; /* from retry-after-ms / retry-after; -1 when absent */
    struct sbx_buf body;    /* the body when buffered (always for non-2xx answers) */
    /* A streaming request answered 2xx with a body that says it is not an event stream (a
     * Content-Type other than text/event-stream): the body was buffered, not given to the
     * sink. Some OpenAI-compatible servers answer every request with plain JSON. */
    int plain;
    char header[256];       /* the value of req->want_header when the answer had it, else "" */
    char content_type[128]; /* the answer's Content-Type, else "" */
};

void sbx__model_http_resp_init(struct sbx__model_http_resp *r);
void sbx__model_http_resp_release(struct sbx__model_http_resp *r);

/* Returns 0 when an HTTP answer arrived completely (any status; look at resp->status),
 * SBX_E_HTTP for a connection failure or a broken transfer, SBX_E_TIMEOUT, SBX_E_CANCELLED,
 * SBX_E_TOOBIG, or the sink's error. The message names the URL, never the key. */
int sbx__model_http_post(const struct sbx__model_http_req *req, struct sbx__model_http_resp *resp,
                         struct sbx_error *err);

#endif
