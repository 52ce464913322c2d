/* sbx internal: the model vtable and the helpers its providers share. */
#ifndef SBX_MODEL_INTERNAL_H
#define SBX_MODEL_INTERNAL_H

#include <pthread.h>
#include <stdio.h>

#include "model/http.h"
#include "sbx/model.h"

struct sbx__model_vt {
    const char *provider;
    int (*respond)(struct sbx_model *m, const struct sbx_model_request *req,
                   sbx_model_stream_fn *cb, void *cb_data, json_t **out, struct sbx_error *err);
    /* Decode a whole answer body already in memory (an SSE stream when stream, else one JSON
     * document) as respond does after a successful HTTP exchange; tools as in the request.
     * NULL for providers without a wire format (replay). */
    int (*decode)(struct sbx_model *m, const json_t *tools, const char *body, size_t n, int stream,
                  sbx_model_stream_fn *cb, void *cb_data, json_t **out, struct sbx_error *err);
};

struct sbx_model {
    const struct sbx__model_vt *vt;
    char *name;
    char *base_url; /* no trailing slash */
    char *api_key;  /* NULL when none */
    int no_stream;
    int64_t timeout_ms, connect_timeout_ms, first_byte_timeout_ms, idle_timeout_ms, deadline_ms;
    void (*on_wait)(void *data, int64_t waited_ms, int attempt);
    void *on_wait_data;
    int retries;
    int64_t retry_base_ms, retry_max_ms;
    size_t max_response_bytes, max_event_bytes;
    const volatile sig_atomic_t *cancel;
    pthread_mutex_t lock; /* guards record and replay_next: nested runs share a model */
    struct sbx__http_pool pool;
    FILE *record;
    /* replay */
    char *replay_path;
    json_t *replay; /* array of response objects */
    size_t replay_next;
};

extern const struct sbx__model_vt sbx__model_responses_vt;
extern const struct sbx__model_vt sbx__model_chat_vt;
extern const struct sbx__model_vt sbx__model_replay_vt;

/* How a provider takes part in the shared retry loop of sbx__model_call. */
struct sbx__attempt_ops {
    sbx__http_sink *sink;          /* NULL: not streaming */
    void (*reset)(void *ud);       /* before each attempt */
    size_t (*delivered)(void *ud); /* visible events already passed to the caller */
    /* A 2xx answer arrived: produce the Responses API response object. A SBX_E_HTTP return
     * means "the stream broke" and may be retried when nothing was delivered. */
    int (*finish)(void *ud, const struct sbx__http_resp *resp, json_t **out, struct sbx_error *err);
    /* A streaming request answered with plain JSON (resp->plain): decode the buffered body as
     * a non-streaming answer. The caller then synthesises the stream events. */
    int (*finish_plain)(void *ud, const struct sbx__http_resp *resp, json_t **out,
                        struct sbx_error *err);
};

/* POST body to {base}{path} with retries. *out as finish (or finish_plain) produced it;
 * *plain (may be NULL) tells which: 1 when a streaming request got a plain JSON answer, so no
 * stream event reached the caller yet. */
int sbx__model_call(struct sbx_model *m, const char *path, const json_t *body, int stream,
                    const struct sbx__attempt_ops *ops, void *ud, json_t **out, int *plain,
                    struct sbx_error *err);

/* m's decoder on an answer body in memory (see sbx__model_vt.decode): the same code as a live
 * call, without the network, for the fuzz targets. SBX_E_UNSUPPORTED for replay models. */
int sbx__model_decode(struct sbx_model *m, const json_t *tools, const char *body, size_t n,
                      int stream, sbx_model_stream_fn *cb, void *cb_data, json_t **out,
                      struct sbx_error *err);

/* Mask every occurrence of the API key in err's message (a server may echo it back). */
void sbx__model_scrub(const struct sbx_model *m, struct sbx_error *err);

/* Parse one JSON value with the model's limits; errors name what was parsed. */
int sbx__model_parse(struct sbx_model *m, const char *what, const char *data, size_t n,
                     json_t **out, struct sbx_error *err);

/* Emit the stream events a Responses API server would have sent for a finished response. */
void sbx__model_synth_events(const json_t *response, sbx_model_stream_fn *cb, void *cb_data);

/* Merge req->settings into body; a setting naming a field sbx sets itself is SBX_E_INVAL. */
int sbx__model_merge_settings(json_t *body, const json_t *settings, struct sbx_error *err);

/* The server's message in an error body ({"error":{"message"}} and common variants), else a
 * cut, printable copy of the body. Caller owns (free). */
char *sbx__model_error_message(const char *body, size_t n);

#endif
