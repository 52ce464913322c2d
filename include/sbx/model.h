/* sbx: model clients. A struct sbx_model answers one model call at a time: it takes the
 * conversation as a list of OpenAI Responses API input items and returns a Responses API
 * response object, whichever provider is behind it:
 *
 *   "responses"  POST {base}/responses, streaming (SSE) or not
 *   "chat"       POST {base}/chat/completions; items and tools are converted both ways, a
 *                custom (freeform) tool is offered as a function tool with one string "input"
 *   "replay"     the next recorded response object from a JSONL file (no network)
 *
 * Streaming callers receive Responses API stream events ("response.output_text.delta", ...)
 * whatever the provider: the chat backend and the replay backend synthesise them.
 *
 * Credentials: the API key is sent in the Authorization header and nowhere else. It never
 * appears in an error message, a log line or a recorded file.
 *
 * Blocking: sbx_model_respond() blocks for the whole call, retries included. Several threads
 * may call one struct sbx_model at once (nested agent runs do); replay answers are then handed
 * out in the order the calls arrive. */
#ifndef SBX_MODEL_H
#define SBX_MODEL_H

#include <signal.h>
#include <stdint.h>
#include <jansson.h>

#include "common.h"
#include "error.h"

struct sbx_model; /* opaque */

enum sbx_model_api {
    SBX_MODEL_API_RESPONSES = 0,
    SBX_MODEL_API_CHAT,
};

#define SBX_MODEL_DEFAULT_BASE_URL "https://api.openai.com/v1"

/* All-zero is a valid default. Strings are copied by sbx_model_new. */
struct sbx_strv;
struct sbx_model_options {
    const char *base_url;       /* NULL: $OPENAI_BASE_URL, else SBX_MODEL_DEFAULT_BASE_URL */
    const char *api_key;        /* NULL: $OPENAI_API_KEY; needed for the default base URL */
    enum sbx_model_api api;     /* ignored for "replay:" models */
    int no_stream;              /* ask for a plain JSON answer even when a callback is given */
    int64_t timeout_ms;         /* per attempt, whole request; 0: 600000 */
    int64_t connect_timeout_ms; /* 0: 15000 */
    /* No byte of the answer this long after the request was sent (0: 60000), or nothing more
     * this long once it comes (0: 300000), fails the attempt with SBX_E_TIMEOUT (retried like
     * other timeouts). Streamed and plain answers alike: a plain answer's first byte comes
     * only when the server has all of it, so raise first_byte_timeout_ms for long answers
     * without streaming. */
    int64_t first_byte_timeout_ms;
    int64_t idle_timeout_ms;
    /* One call, all attempts and backoffs together (0: 900000): no attempt starts, or lasts,
     * past it, and the error says the deadline passed. */
    int64_t deadline_ms;
    /* Called about once a second on the calling thread while an attempt waits for the first
     * byte of its answer (waited_ms since the request was sent, attempt 1-based), and once
     * with waited_ms -1 when the wait ends, so a terminal can show and clear a progress line.
     * NULL: none. */
    void (*on_wait)(void *data, int64_t waited_ms, int attempt);
    void *on_wait_data;
    int retries;               /* extra attempts after the first; 0: 3; negative: none */
    int64_t retry_base_ms;     /* first backoff; doubles each try; 0: 500 */
    int64_t retry_max_ms;      /* cap on one backoff and on a server's retry-after; 0: 30000 */
    size_t max_response_bytes; /* one response body or SSE stream; 0: 64 MiB */
    size_t max_event_bytes;    /* one SSE event; 0: 16 MiB */
    const char *record_path;   /* append every response object to this JSONL file */
    /* Values scrubbed (sbx/scrub.h) from what goes to record_path, besides the API key, which
     * never does. Copied. */
    const struct sbx_strv *secrets;
    /* Polled while waiting on the network and between retries: when it becomes non-zero the
     * call fails with SBX_E_CANCELLED. Borrowed; may be NULL. */
    const volatile sig_atomic_t *cancel;
    /* The OpenAI organization and project the requests are for, sent as the
     * OpenAI-Organization and OpenAI-Project headers as OpenAI's own clients do (a model
     * setting's extra_headers naming them wins). NULL: $OPENAI_ORG_ID, $OPENAI_PROJECT_ID;
     * empty: none. A value with a control character is SBX_E_INVAL. */
    const char *organization;
    const char *project;
};

/* Create a model. name is the model name sent to the server ("gpt-4.1"), or "replay:FILE" to
 * answer from a recording (the file is read now, at most 64 MiB, one response object per line).
 * *out: caller owns (sbx_model_free). Errors: SBX_E_INVAL (empty name, bad base URL),
 * SBX_E_NOTFOUND / SBX_E_PARSE (replay file), SBX_E_IO (record file cannot be opened). */
SBX_API int sbx_model_new(const char *name, const struct sbx_model_options *opt,
                          struct sbx_model **out, struct sbx_error *err);
SBX_API void sbx_model_free(struct sbx_model *m);

/* The model name given at creation (borrowed). */
SBX_API const char *sbx_model_name(const struct sbx_model *m);
/* "responses", "chat" or "replay". */
SBX_API const char *sbx_model_provider(const struct sbx_model *m);

/* The serialised input items of one conversation, kept between its model calls so that each
 * call serialises only the items added since the last one (a run's history grows by a few
 * items a turn; serialising all of it again every turn makes a long run quadratic). Items are
 * known by identity: the cache holds a reference to every item it serialised and reuses the
 * bytes while the request's input starts with the same item objects. An item must not be
 * changed in place after a call that used the cache (append new items, or pass new objects);
 * a changed input order or a different provider only costs a fresh serialisation. One cache
 * serves one call at a time. Caller owns (sbx_model_cache_free, accepts NULL). */
struct sbx_model_cache; /* opaque */
SBX_API struct sbx_model_cache *sbx_model_cache_new(void);
SBX_API void sbx_model_cache_free(struct sbx_model_cache *c);

/* One model call. All pointers are borrowed for the duration of the call. */
struct sbx_model_request {
    const char *model;         /* NULL: the name the model was created with */
    const char *instructions;  /* system/developer text; NULL: none */
    const json_t *input;       /* array of Responses input items (required) */
    const json_t *tools;       /* array of Responses tool definitions; NULL: none */
    const json_t *tool_choice; /* "auto" | "required" | "none" | {"type":"function","name":..} */
    int parallel_tool_calls;   /* 0: unset, 1: true, -1: false (sent only with tools) */
    const json_t *text_format; /* {"type":"json_schema","name","schema","strict"}; NULL: text */
    const json_t *settings;    /* ModelSettings by the SDK's names (sbx_model_settings_check) */
    const char *previous_response_id; /* NULL: none */
    struct sbx_model_cache *cache;    /* NULL: serialise the whole input (see above) */
    /* The Responses API's "prompt" object {id, version, variables} (sbx/prompt.h), sent as it
     * is; NULL: none. The Chat Completions API has no such field: SBX_E_UNSUPPORTED there. */
    const json_t *prompt;
};

/* Check model settings: an object whose keys are the Agents SDK's ModelSettings fields
 * (temperature, top_p, frequency_penalty, presence_penalty, tool_choice, parallel_tool_calls,
 * truncation, max_tokens, reasoning, verbosity, metadata, store, prompt_cache_retention,
 * include_usage, response_include, top_logprobs, extra_query, extra_body, extra_headers,
 * extra_args, retry, context_management, prompt_cache_options, preserve_raw_usage, timeout),
 * each of the SDK's type; a null value is an unset field. Each is sent to the API in use as
 * the SDK sends it (max_tokens: max_output_tokens on Responses, max_tokens on Chat;
 * reasoning.effort: reasoning_effort on Chat; verbosity: text.verbosity on Responses;
 * include_usage: stream_options on Chat; response_include and top_logprobs: include on
 * Responses; ...); a field the API lacks is not sent there. extra_args and extra_body are
 * merged into the body as they are, extra_query and extra_headers go on the HTTP request,
 * retry and timeout bound the call's attempts. SBX_E_INVAL names an unknown key, and the
 * ModelSettings field to use when it is an API or JS SDK name (max_output_tokens: max_tokens). */
SBX_API int sbx_model_settings_check(const json_t *settings, struct sbx_error *err);

/* Stream callback: one Responses API stream event object (borrowed for the call). Called on
 * the caller's thread. */
typedef void sbx_model_stream_fn(const json_t *event, void *data);

/* Call the model. With a callback the call streams (unless no_stream was set) and every event
 * is passed to it. *response_out: the Responses API response object ({"id","output":[...],
 * "usage",...}); caller owns (json_decref). A response cut short is still a success here:
 * its "status" is "incomplete" with "incomplete_details":{"reason":..} (the chat provider maps
 * finish_reason "length" to "max_output_tokens" and "content_filter" to itself); the runner
 * decides what that means.
 *
 * Retries: 408, 409, 429, 5xx answers and connection failures are retried with jittered
 * exponential backoff, honouring "retry-after" / "retry-after-ms" (capped at retry_max_ms). A
 * stream that breaks after events were delivered is not retried (the caller has seen part of
 * an answer). After the last try the error carries the server's own message.
 * Errors: SBX_E_API (the server refused or the response failed: "model API answered 400:
 * <message>"), SBX_E_HTTP (connection), SBX_E_TIMEOUT, SBX_E_PARSE (malformed body or
 * stream), SBX_E_TOOBIG, SBX_E_CANCELLED, SBX_E_NOTFOUND (replay file exhausted). */
SBX_API int sbx_model_respond(struct sbx_model *m, const struct sbx_model_request *req,
                              sbx_model_stream_fn *cb, void *cb_data, json_t **response_out,
                              struct sbx_error *err);

/* The text of every output_text part of every assistant message of a response, joined;
 * caller owns (free). Never NULL. */
SBX_API char *sbx_model_response_text(const json_t *response);

#endif
