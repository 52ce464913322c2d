/* The OpenAI Responses API provider: POST {base}/responses, plain JSON or SSE. */
#include <stdlib.h>
#include <string.h>

#include "model/model-internal.h"
#include "sandbox/wire/sse.h"
#include "sbx/json.h"

struct stream {
    struct sbx_model *m;
    struct sbx__sse sse;
    sbx_model_stream_fn *cb;
    void *cb_data;
    json_t *final;    /* response of response.completed / response.incomplete */
    json_t *items;    /* output items seen in response.output_item.done */
    size_t delivered; /* visible events passed on */
    int failed;       /* a response.failed or error event arrived */
    struct sbx_error fail_err;
};

/* The body as text: the input items from the cache (serialising only those it lacks), the
 * other fields from a small object. Caller owns *out (free). */
static int build_body(struct sbx_model *m, const struct sbx_model_request *req, int stream,
                      struct sbx_model_cache *cache, char **out, size_t *out_len,
                      struct sbx_error *err)
{
    json_t *body = json_object();
    sbx_json_set(body, "model", sbx_json_str(req->model ? req->model : m->name));
    if (req->instructions)
        sbx_json_set(body, "instructions", sbx_json_str(req->instructions));
    if (req->prompt)
        sbx_json_set(body, "prompt", json_deep_copy(req->prompt));
    /* Holds the field's place so that a setting named "input" is refused as before. */
    sbx_json_set(body, "input", json_null());
    if (req->tools && json_array_size(req->tools)) {
        sbx_json_set(body, "tools", json_deep_copy(req->tools));
        if (req->parallel_tool_calls)
            sbx_json_set(body, "parallel_tool_calls", json_boolean(req->parallel_tool_calls > 0));
    }
    if (req->tool_choice)
        sbx_json_set(body, "tool_choice", json_deep_copy(req->tool_choice));
    if (req->text_format)
        sbx_json_set(body, "text", json_pack("{s:O}", "format", req->text_format));
    if (req->previous_response_id)
        sbx_json_set(body, "previous_response_id", sbx_json_str(req->previous_response_id));
    if (stream)
        sbx_json_set(body, "stream", json_true());
    int rc = sbx__model_apply_settings(body, req->settings, json_object_get(body, "tools"), 0, err);
    if (rc < 0) {
        json_decref(body);
        return rc;
    }
    json_object_del(body, "input");
    size_t n = json_array_size(req->input);
    for (size_t i = sbx__model_cache_keep(cache, &sbx__model_responses_vt, req->input, 0); i < n;
         i++)
        sbx__model_cache_add(cache, i, json_array_get(req->input, i));
    sbx__model_cache_done(cache, req->input);
    *out = sbx__model_cache_body(cache, body, "input", NULL, out_len);
    json_decref(body);
    return 0;
}

static int failure_message(const json_t *response, const json_t *event, struct sbx_error *err)
{
    const json_t *e = json_object_get(response, "error");
    if (!e)
        e = json_object_get(event, "error");
    if (!e)
        e = event;
    const char *msg = json_string_value(json_object_get(e, "message"));
    const char *code = json_string_value(json_object_get(e, "code"));
    return sbx_error_set(err, SBX_E_API, 0, "model response failed%s%s%s: %s", code ? " (" : "",
                         code ? code : "", code ? ")" : "", msg ? msg : "no message given");
}

static int on_event(const char *name, const char *data, size_t n, void *ud, struct sbx_error *err)
{
    struct stream *s = ud;
    json_t *ev = NULL;
    if (n == 6 && memcmp(data, "[DONE]", 6) == 0)
        return 0;
    int rc = sbx__model_parse(s->m, "stream event", data, n, &ev, err);
    if (rc < 0)
        return rc;
    if (!json_is_object(ev)) {
        json_decref(ev);
        return sbx_error_set(err, SBX_E_PARSE, 0, "stream event is not an object");
    }
    const char *type = json_string_value(json_object_get(ev, "type"));
    if (!type) {
        sbx_json_set(ev, "type", sbx_json_str(name));
        type = name;
    }
    if (strcmp(type, "response.completed") == 0 || strcmp(type, "response.incomplete") == 0) {
        json_t *r = json_object_get(ev, "response");
        if (json_is_object(r)) {
            json_decref(s->final);
            s->final = json_deep_copy(r);
            /* The event type is the authority; the runner reads only the status. */
            if (strcmp(type, "response.incomplete") == 0)
                sbx_json_set(s->final, "status", sbx_json_str("incomplete"));
        }
    } else if (strcmp(type, "response.failed") == 0 || strcmp(type, "error") == 0) {
        if (!s->failed)
            failure_message(json_object_get(ev, "response"), ev, &s->fail_err);
        s->failed = 1;
    } else if (strcmp(type, "response.output_item.done") == 0) {
        json_t *item = json_object_get(ev, "item");
        if (json_is_object(item))
            sbx_json_append(s->items, json_incref(item));
    }
    if (strcmp(type, "response.created") != 0 && strcmp(type, "response.in_progress") != 0)
        s->delivered++;
    if (s->cb)
        s->cb(ev, s->cb_data);
    json_decref(ev);
    return 0;
}

static int sink(const char *p, size_t n, void *ud, struct sbx_error *err)
{
    struct stream *s = ud;
    return sbx__sse_feed(&s->sse, p, n, err);
}

static void reset(void *ud)
{
    struct stream *s = ud;
    sbx__sse_release(&s->sse);
    sbx__sse_init(&s->sse, s->m->max_event_bytes, on_event, s);
    json_decref(s->final);
    s->final = NULL;
    json_array_clear(s->items);
    s->delivered = 0;
    s->failed = 0;
}

static size_t delivered(void *ud)
{
    return ((struct stream *)ud)->delivered;
}

static int finish_stream(void *ud, const struct sbx__model_http_resp *resp, json_t **out,
                         struct sbx_error *err)
{
    struct stream *s = ud;
    if (s->failed)
        return sbx_error_copy(err, &s->fail_err);
    if (!s->final) {
        struct sbx_error cut = SBX_ERROR_INIT;
        int partial = sbx__sse_finish(&s->sse, &cut) < 0;
        return sbx_error_set(err, SBX_E_HTTP, 0,
                             "model stream ended %sbefore the response completed",
                             partial ? "in the middle of an event " : "");
    }
    json_t *r = json_incref(s->final);
    json_t *output = json_object_get(r, "output");
    if ((!json_is_array(output) || json_array_size(output) == 0) && json_array_size(s->items)) {
        json_t *copy = json_deep_copy(r);
        json_decref(r);
        r = copy;
        sbx_json_set(r, "output", json_incref(s->items));
    }
    *out = r;
    return 0;
}

static int finish_plain(void *ud, const struct sbx__model_http_resp *resp, json_t **out,
                        struct sbx_error *err)
{
    struct stream *s = ud;
    json_t *r = NULL;
    int rc = sbx__model_parse(s->m, "model response", resp->body.data, resp->body.len, &r, err);
    if (rc < 0)
        return rc;
    if (!json_is_object(r)) {
        json_decref(r);
        return sbx_error_set(err, SBX_E_PARSE, 0, "model response is not a JSON object");
    }
    const char *status = json_string_value(json_object_get(r, "status"));
    if (status && strcmp(status, "failed") == 0) {
        rc = failure_message(r, NULL, err);
        json_decref(r);
        return rc;
    }
    *out = r;
    return 0;
}

static void stream_init(struct stream *s, struct sbx_model *m, sbx_model_stream_fn *cb,
                        void *cb_data)
{
    *s = (struct stream){.m = m, .cb = cb, .cb_data = cb_data, .items = json_array()};
    sbx__sse_init(&s->sse, m->max_event_bytes, on_event, s);
}

static void stream_release(struct stream *s)
{
    sbx__sse_release(&s->sse);
    json_decref(s->final);
    json_decref(s->items);
}

static struct sbx__attempt_ops attempt_ops(int stream)
{
    return (struct sbx__attempt_ops){
            .sink = sink,
            .reset = reset,
            .delivered = delivered,
            .finish = stream ? finish_stream : finish_plain,
            .finish_plain = finish_plain,
    };
}

static int responses_respond(struct sbx_model *m, const struct sbx_model_request *req,
                             sbx_model_stream_fn *cb, void *cb_data, json_t **out,
                             struct sbx_error *err)
{
    int stream = cb && !m->no_stream;
    struct stream s;
    stream_init(&s, m, cb, cb_data);
    struct sbx__attempt_ops ops = attempt_ops(stream);
    int rc = sbx__model_exchange(m, req, "/responses", stream, &ops, &s, cb, cb_data, out, err);
    stream_release(&s);
    return rc;
}

static int responses_decode(struct sbx_model *m, const json_t *tools, const char *body, size_t n,
                            int stream, sbx_model_stream_fn *cb, void *cb_data, json_t **out,
                            struct sbx_error *err)
{
    struct stream s;
    stream_init(&s, m, cb, cb_data);
    struct sbx__attempt_ops ops = attempt_ops(stream);
    int rc = sbx__model_decode_with(&ops, &s, body, n, stream, out, err);
    stream_release(&s);
    return rc;
}

const struct sbx__model_vt sbx__model_responses_vt = {
        .provider = "responses",
        .respond = responses_respond,
        .decode = responses_decode,
        .body = build_body,
};
