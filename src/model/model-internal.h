/* sbx internal: the model vtable and the helpers its providers share. */
#ifndef SBX_MODEL_INTERNAL_H
#define SBX_MODEL_INTERNAL_H

#include <pthread.h>
#include <stdio.h>

#include "model/http.h"
#include "sbx/strv.h"
#include "sbx/model.h"
#include "sbx/strv.h"

struct sbx__model_extras; /* below */

struct sbx__model_vt {
    const char *provider;
    int (*respond)(struct sbx_model *m, const struct sbx_model_request *req,
                   sbx_model_stream_fn *cb, void *cb_data, json_t **out, struct sbx_error *err);
    /* Decode a whole answer body already in memory (an SSE stream when stream, else one JSON
     * document) as respond does after a successful HTTP exchange; tools as in the request.
     * NULL for providers without a wire format (replay). */
    int (*decode)(struct sbx_model *m, const json_t *tools, const char *body, size_t n, int stream,
                  sbx_model_stream_fn *cb, void *cb_data, json_t **out, struct sbx_error *err);
    /* The request body respond sends, through cache; *out: caller owns (free). NULL as decode. */
    int (*body)(struct sbx_model *m, const struct sbx_model_request *req, int stream,
                struct sbx_model_cache *cache, char **out, size_t *out_len, struct sbx_error *err);
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
    struct sbx__model_http_pool pool;
    FILE *record;
    struct sbx_strv secrets; /* scrubbed from the record: the options' and the API key */
    /* replay */
    char *replay_path;
    json_t *replay; /* array of response objects */
    size_t replay_next;
};

/* A request body's input as cached units: a unit is one serialised element of the body's
 * input array (a Responses item; a chat message, which may gather several items), made from
 * the items from unit_start on. */
struct sbx_model_cache {
    const struct sbx__model_vt *vt; /* whose wire format the units are in */
    json_t **items;                 /* held references: the input the units were made from */
    size_t nitems, cap_items;
    size_t common; /* items shared with the request being built (sbx__model_cache_keep) */
    size_t *unit_start, *unit_off;
    size_t nunits, cap_units;
    struct sbx_buf bytes; /* the units, each followed by a comma */
};

/* Keep the units of c that are still right for input and drop the rest; returns the index of
 * the first item to convert again. A unit is kept when all of its items are the request's
 * (same objects, same places); with last_open the last unit may still take later items (a chat
 * assistant message takes the calls that follow it), so it is kept only once a later unit
 * started within the shared items. A cache of another provider is emptied. */
size_t sbx__model_cache_keep(struct sbx_model_cache *c, const struct sbx__model_vt *vt,
                             const json_t *input, int last_open);
/* Append unit, made from the items from start_item on. */
void sbx__model_cache_add(struct sbx_model_cache *c, size_t start_item, const json_t *unit);
/* The request is built: remember its items (after sbx__model_cache_keep and the adds). */
void sbx__model_cache_done(struct sbx_model_cache *c, const json_t *input);
/* The request body: the top-level fields of body (an object, its input field left out) and,
 * under key, the array of prefix (serialised, may be NULL) then the cached units. Caller owns
 * (free); *len its length. */
char *sbx__model_cache_body(const struct sbx_model_cache *c, const json_t *body, const char *key,
                            const char *prefix, size_t *len);

extern const struct sbx__model_vt sbx__model_responses_vt;
extern const struct sbx__model_vt sbx__model_chat_vt;
extern const struct sbx__model_vt sbx__model_replay_vt;

/* How a provider takes part in the shared retry loop of sbx__model_call. */
struct sbx__attempt_ops {
    sbx__model_http_sink *sink;    /* NULL: not streaming */
    void (*reset)(void *ud);       /* before each attempt */
    size_t (*delivered)(void *ud); /* visible events already passed to the caller */
    /* A 2xx answer arrived: produce the Responses API response object. A SBX_E_HTTP return
     * means "the stream broke" and may be retried when nothing was delivered. */
    int (*finish)(void *ud, const struct sbx__model_http_resp *resp, json_t **out,
                  struct sbx_error *err);
    /* A streaming request answered with plain JSON (resp->plain): decode the buffered body as
     * a non-streaming answer. The caller then synthesises the stream events. */
    int (*finish_plain)(void *ud, const struct sbx__model_http_resp *resp, json_t **out,
                        struct sbx_error *err);
};

/* POST body to {base}{path}{x->query} with retries (x: the extras of the request's settings). *out
 * as finish (or finish_plain) produced it; *plain (may be NULL) tells which: 1 when a streaming
 * request got a plain JSON answer, so no stream event reached the caller yet. */
int sbx__model_call(struct sbx_model *m, const char *path, const struct sbx__model_extras *x,
                    const char *body, size_t body_len, int stream,
                    const struct sbx__attempt_ops *ops, void *ud, json_t **out, int *plain,
                    struct sbx_error *err);

/* What every provider's respond does, over its own stream state ud and ops: build req's body,
 * POST it to path with retries, and when the answer came as plain JSON (not streamed) hand cb
 * the stream events a Responses API server would have sent. */
int sbx__model_exchange(struct sbx_model *m, const struct sbx_model_request *req, const char *path,
                        int stream, const struct sbx__attempt_ops *ops, void *ud,
                        sbx_model_stream_fn *cb, void *cb_data, json_t **out,
                        struct sbx_error *err);

/* What every provider's decode does: an answer body in memory handed to ops as if it had
 * arrived with status 200 (streamed: through the sink, then finish). */
int sbx__model_decode_with(const struct sbx__attempt_ops *ops, void *ud, const char *body, size_t n,
                           int stream, json_t **out, struct sbx_error *err);

/* m's decoder on an answer body in memory (see sbx__model_vt.decode): the same code as a live
 * call, without the network, for the fuzz targets. SBX_E_UNSUPPORTED for replay models. */
int sbx__model_decode(struct sbx_model *m, const json_t *tools, const char *body, size_t n,
                      int stream, sbx_model_stream_fn *cb, void *cb_data, json_t **out,
                      struct sbx_error *err);

/* The body m's provider would send for req (through req->cache when set, else serialising all
 * of the input), for the tests. *out: caller owns (free). SBX_E_UNSUPPORTED for replay. */
int sbx__model_body(struct sbx_model *m, const struct sbx_model_request *req, int stream,
                    char **out, size_t *out_len, struct sbx_error *err);

/* Mask every occurrence of the API key in err's message (a server may echo it back). */
void sbx__model_scrub(const struct sbx_model *m, struct sbx_error *err);

/* Parse one JSON value with the model's limits; errors name what was parsed. */
int sbx__model_parse(struct sbx_model *m, const char *what, const char *data, size_t n,
                     json_t **out, struct sbx_error *err);

/* Emit the stream events a Responses API server would have sent for a finished response. */
void sbx__model_synth_events(const json_t *response, sbx_model_stream_fn *cb, void *cb_data);

/* Map ModelSettings (req->settings, checked with sbx_model_settings_check) onto body, a request
 * of the Responses API (chat 0) or of Chat Completions (chat 1) whose own fields are already
 * set; tools: the body's tools in the API's form (a named tool_choice of a custom tool becomes
 * {"type":"custom"}). A field of extra_args or extra_body that is already set is SBX_E_INVAL. */
int sbx__model_apply_settings(json_t *body, const json_t *settings, const json_t *tools, int chat,
                              struct sbx_error *err);

/* ModelSettings.tool_choice (a mode, a tool name or {server_label, name}) in the API's form.
 * Caller owns; NULL when choice is neither. */
json_t *sbx__model_tool_choice(const json_t *choice, const json_t *tools, int chat);

/* What ModelSettings change about the HTTP exchange rather than the body. */
struct sbx__model_extras {
    char *query;             /* "?k=v&..." of extra_query, or NULL */
    struct sbx_strv headers; /* "Name: value" of extra_headers ("Name:" leaves one out) */
    int retries;             /* retry.max_retries, else the model's */
    int64_t retry_base_ms;   /* retry.backoff.initial_delay, else the model's */
    int64_t retry_max_ms;    /* retry.backoff.max_delay, else the model's */
    int64_t timeout_ms;      /* timeout (per attempt) when shorter than the model's */
};

/* Fill x from settings (NULL: the model's own values). Release with sbx__model_extras_release,
 * also after a failure. */
int sbx__model_call_extras(const struct sbx_model *m, const json_t *settings,
                           struct sbx__model_extras *x, struct sbx_error *err);
void sbx__model_extras_release(struct sbx__model_extras *x);

/* The server's message in an error body ({"error":{"message"}} and common variants), else a
 * cut, printable copy of the body. Caller owns (free). */
char *sbx__model_error_message(const char *body, size_t n);

#endif
