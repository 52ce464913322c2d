/* The Chat Completions provider: POST {base}/chat/completions.
 *
 * The conversation stays in Responses API shape everywhere else in sbx; this file converts a
 * request into chat messages and the answer back into a Responses API response object, and
 * synthesises Responses stream events from chat chunks. Custom (freeform) tools do not exist
 * in Chat Completions: they are offered as function tools taking {"input": string}, and calls
 * to them come back as custom_tool_call items. */
#include <stdlib.h>
#include <string.h>

#include "model/model-internal.h"
#include "sandbox/wire/sse.h"
#include "sbx/json.h"

static const char *str(const json_t *o, const char *k)
{
    return json_string_value(json_object_get(o, k));
}

static int streq(const char *a, const char *b)
{
    return a && b && strcmp(a, b) == 0;
}

/* Responses content (string or parts) to chat content (string or parts). */
static json_t *convert_content(const json_t *content)
{
    size_t i;
    json_t *part;
    if (json_is_string(content))
        return json_incref((json_t *)content);
    json_t *parts = json_array();
    int only_text = 1;
    json_array_foreach(content, i, part)
    {
        const char *t = str(part, "type");
        if (streq(t, "input_text") || streq(t, "output_text") || streq(t, "text")) {
            sbx_json_append(parts, json_pack("{s:s, s:O}", "type", "text", "text",
                                             json_object_get(part, "text")));
        } else if (streq(t, "input_image")) {
            only_text = 0;
            json_t *url = json_object_get(part, "image_url");
            sbx_json_append(parts, json_pack("{s:s, s:{s:O?}}", "type", "image_url", "image_url",
                                             "url", url));
        }
    }
    if (only_text) {
        /* Plain text joins into one string: the most widely supported form. */
        struct sbx_buf b;
        sbx_buf_init(&b, SBX_BUF_NOLIMIT);
        json_array_foreach(parts, i, part)
        {
            const char *t = str(part, "text");
            if (t && sbx_buf_adds(&b, t, NULL) < 0)
                SBX_BUG("unbounded buffer refused data");
        }
        json_decref(parts);
        json_t *s = sbx_json_strn(b.data, b.len);
        sbx_buf_release(&b);
        return s;
    }
    return parts;
}

/* Tool output (string or parts) to the text of a tool message: chat tool messages carry text
 * only, so images are replaced by a marker. */
static json_t *convert_tool_output(const json_t *output)
{
    size_t i;
    json_t *part;
    if (json_is_string(output))
        return json_incref((json_t *)output);
    struct sbx_buf b;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    json_array_foreach(output, i, part)
    {
        const char *t = str(part, "type");
        const char *text = str(part, "text");
        const char *add = text ? text : streq(t, "input_image") ? "[image omitted]" : NULL;
        if (add && sbx_buf_adds(&b, add, NULL) < 0)
            SBX_BUG("unbounded buffer refused data");
    }
    json_t *s = sbx_json_strn(b.data, b.len);
    sbx_buf_release(&b);
    return s;
}

static json_t *last_assistant(json_t *messages)
{
    size_t n = json_array_size(messages);
    json_t *last = n ? json_array_get(messages, n - 1) : NULL;
    return streq(str(last, "role"), "assistant") ? last : NULL;
}

/* Append a new message made from item i on. */
static void add_message(json_t *msgs, size_t **starts, size_t i, json_t *msg)
{
    size_t n = json_array_size(msgs);
    *starts = sbx_xrealloc(*starts, (n + 1) * sizeof(**starts));
    (*starts)[n] = i;
    sbx_json_append(msgs, msg);
}

/* The chat messages of the input items from `from` on; (*starts)[j]: the item message j was
 * started by (caller frees). Only the last message may take in later items. */
static json_t *convert_messages(const json_t *input, size_t from, size_t **starts)
{
    json_t *msgs = json_array();
    size_t n = json_array_size(input);
    *starts = NULL;
    for (size_t i = from; i < n; i++) {
        json_t *item = json_array_get(input, i);
        const char *type = str(item, "type");
        const char *role = str(item, "role");
        if ((!type || streq(type, "message")) && role) {
            json_t *content = convert_content(json_object_get(item, "content"));
            json_t *prev = streq(role, "assistant") ? last_assistant(msgs) : NULL;
            if (prev && json_is_null(json_object_get(prev, "content")) && json_is_string(content))
                sbx_json_set(prev, "content", content);
            else
                add_message(msgs, starts, i,
                            json_pack("{s:s, s:o}", "role",
                                      streq(role, "developer") ? "system" : role, "content",
                                      content));
        } else if (streq(type, "function_call") || streq(type, "custom_tool_call")) {
            json_t *args;
            if (streq(type, "function_call")) {
                args = json_incref(json_object_get(item, "arguments"));
            } else {
                json_t *o = json_pack("{s:O}", "input", json_object_get(item, "input"));
                args = sbx_json_str("");
                if (o) {
                    json_decref(args);
                    char *s = sbx_json_dumps(o, SBX_JSON_COMPACT);
                    args = sbx_json_str(s);
                    free(s);
                    json_decref(o);
                }
            }
            json_t *call =
                    json_pack("{s:O?, s:s, s:{s:O?, s:o?}}", "id", json_object_get(item, "call_id"),
                              "type", "function", "function", "name", json_object_get(item, "name"),
                              "arguments", args);
            json_t *prev = last_assistant(msgs);
            if (!prev) {
                prev = json_pack("{s:s, s:n}", "role", "assistant", "content");
                add_message(msgs, starts, i, prev);
            }
            json_t *calls = json_object_get(prev, "tool_calls");
            if (!calls) {
                calls = json_array();
                sbx_json_set(prev, "tool_calls", calls);
            }
            sbx_json_append(calls, call);
        } else if (streq(type, "function_call_output") || streq(type, "custom_tool_call_output")) {
            add_message(msgs, starts, i,
                        json_pack("{s:s, s:O?, s:o}", "role", "tool", "tool_call_id",
                                  json_object_get(item, "call_id"), "content",
                                  convert_tool_output(json_object_get(item, "output"))));
        }
        /* Reasoning and other Responses-only items have no chat equivalent and are left out. */
    }
    return msgs;
}

static json_t *convert_tools(const json_t *tools)
{
    json_t *out = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t)
    {
        const char *type = str(t, "type");
        json_t *fn = json_pack("{s:O?, s:O?}", "name", json_object_get(t, "name"), "description",
                               json_object_get(t, "description"));
        if (streq(type, "function")) {
            json_t *params = json_object_get(t, "parameters");
            if (params)
                sbx_json_set(fn, "parameters", json_incref(params));
            json_t *strict = json_object_get(t, "strict");
            if (json_is_boolean(strict))
                sbx_json_set(fn, "strict", json_incref(strict));
        } else if (streq(type, "custom")) {
            sbx_json_set(fn, "parameters",
                         json_pack("{s:s, s:{s:{s:s}}, s:[s], s:b}", "type", "object", "properties",
                                   "input", "type", "string", "required", "input",
                                   "additionalProperties", 0));
        } else {
            json_decref(fn);
            continue;
        }
        sbx_json_append(out, json_pack("{s:s, s:o}", "type", "function", "function", fn));
    }
    return out;
}

static int is_custom(const json_t *tools, const char *name)
{
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t)
    {
        if (streq(str(t, "type"), "custom") && streq(str(t, "name"), name))
            return 1;
    }
    return 0;
}

/* The body as text: the messages from the cache (converting only the items it lacks, and the
 * last message again, which may take in new items), the other fields from a small object.
 * Caller owns *out (free). */
static int build_body(struct sbx_model *m, const struct sbx_model_request *req, int stream,
                      struct sbx_model_cache *cache, char **out, size_t *out_len,
                      struct sbx_error *err)
{
    json_t *body = json_object();
    sbx_json_set(body, "model", sbx_json_str(req->model ? req->model : m->name));
    /* Holds the field's place so that a setting named "messages" is refused as before. */
    sbx_json_set(body, "messages", json_null());
    if (req->tools && json_array_size(req->tools)) {
        sbx_json_set(body, "tools", convert_tools(req->tools));
        if (req->parallel_tool_calls)
            sbx_json_set(body, "parallel_tool_calls", json_boolean(req->parallel_tool_calls > 0));
    }
    if (json_is_string(req->tool_choice)) {
        sbx_json_set(body, "tool_choice", json_incref((json_t *)req->tool_choice));
    } else if (json_is_object(req->tool_choice)) {
        sbx_json_set(body, "tool_choice",
                     json_pack("{s:s, s:{s:O?}}", "type", "function", "function", "name",
                               json_object_get(req->tool_choice, "name")));
    }
    if (req->text_format)
        sbx_json_set(body, "response_format",
                     json_pack("{s:s, s:{s:O?, s:O?, s:O?}}", "type", "json_schema", "json_schema",
                               "name", json_object_get(req->text_format, "name"), "schema",
                               json_object_get(req->text_format, "schema"), "strict",
                               json_object_get(req->text_format, "strict")));
    if (stream) {
        sbx_json_set(body, "stream", json_true());
        sbx_json_set(body, "stream_options", json_pack("{s:b}", "include_usage", 1));
    }
    int rc = sbx__model_apply_settings(body, req->settings, json_object_get(body, "tools"), 1, err);
    if (rc < 0) {
        json_decref(body);
        return rc;
    }
    json_object_del(body, "messages");
    size_t *starts = NULL;
    size_t from = sbx__model_cache_keep(cache, &sbx__model_chat_vt, req->input, 1);
    json_t *msgs = convert_messages(req->input, from, &starts);
    size_t i;
    json_t *msg;
    json_array_foreach(msgs, i, msg)
    {
        sbx__model_cache_add(cache, starts[i], msg);
    }
    sbx__model_cache_done(cache, req->input);
    char *sys_msg = NULL;
    if (req->instructions) {
        json_t *sm = json_pack("{s:s, s:s}", "role", "system", "content", req->instructions);
        sys_msg = sbx_json_dumps(sm, SBX_JSON_COMPACT);
        json_decref(sm);
    }
    *out = sbx__model_cache_body(cache, body, "messages", sys_msg, out_len);
    free(sys_msg);
    free(starts);
    json_decref(msgs);
    json_decref(body);
    return 0;
}

static json_t *usage_of(const json_t *u)
{
    if (!json_is_object(u))
        return NULL;
    json_int_t in = json_integer_value(json_object_get(u, "prompt_tokens"));
    json_int_t outp = json_integer_value(json_object_get(u, "completion_tokens"));
    return json_pack("{s:I, s:I, s:I}", "input_tokens", in, "output_tokens", outp, "total_tokens",
                     in + outp);
}

/* The Responses incomplete_details.reason for a Chat finish_reason that cut the answer short,
 * or NULL when the answer is whole. */
static const char *incomplete_reason(const char *finish_reason)
{
    if (!finish_reason)
        return NULL;
    if (strcmp(finish_reason, "length") == 0)
        return "max_output_tokens";
    if (strcmp(finish_reason, "content_filter") == 0)
        return "content_filter";
    return NULL;
}

/* Build a Responses response object from an assistant message's text and tool calls. */
static json_t *make_response(const json_t *id, const char *text, size_t text_len,
                             const json_t *calls, const json_t *tools, const json_t *usage,
                             const char *finish_reason)
{
    const char *cut = incomplete_reason(finish_reason);
    const char *status = cut ? "incomplete" : "completed";
    json_t *output = json_array();
    size_t i;
    json_t *c;
    if (text && text_len)
        sbx_json_append(output, json_pack("{s:s, s:s, s:s, s:[{s:s, s:o, s:[]}]}", "type",
                                          "message", "role", "assistant", "status", status,
                                          "content", "type", "output_text", "text",
                                          sbx_json_strn(text, text_len), "annotations"));
    json_array_foreach(calls, i, c)
    {
        json_t *fn = json_object_get(c, "function");
        const char *name = str(fn, "name");
        json_t *args = json_object_get(fn, "arguments");
        json_t *call_id = json_object_get(c, "id");
        if (name && is_custom(tools, name)) {
            json_t *parsed = NULL, *input = NULL;
            const char *a = json_string_value(args);
            if (a && sbx_json_parse(a, strlen(a), NULL, &parsed, NULL) == 0)
                input = json_object_get(parsed, "input");
            sbx_json_append(output, json_pack("{s:s, s:O?, s:s, s:O}", "type", "custom_tool_call",
                                              "call_id", call_id, "name", name, "input",
                                              json_is_string(input) ? input
                                              : args                ? args
                                                                    : json_null()));
            json_decref(parsed);
        } else {
            sbx_json_append(output,
                            json_pack("{s:s, s:O?, s:O?, s:O?, s:s}", "type", "function_call",
                                      "call_id", call_id, "name", json_object_get(fn, "name"),
                                      "arguments", args, "status", status));
        }
    }
    json_t *r = json_pack("{s:O?, s:s, s:s, s:o}", "id", id, "object", "response", "status", status,
                          "output", output);
    if (cut)
        sbx_json_set(r, "incomplete_details", json_pack("{s:s}", "reason", cut));
    json_t *u = usage_of(usage);
    if (u)
        sbx_json_set(r, "usage", u);
    return r;
}

struct chat_stream {
    struct sbx_model *m;
    const json_t *tools;
    struct sbx__sse sse;
    sbx_model_stream_fn *cb;
    void *cb_data;
    json_t *id;
    struct sbx_buf text;
    json_t *calls; /* [{id, type, function:{name, arguments}}] in index order */
    json_t *usage;
    json_t *finish_reason; /* choices[0].finish_reason of the last chunk that had one */
    size_t delivered;
    int done;
};

static void emit(struct chat_stream *s, json_t *ev)
{
    s->delivered++;
    if (s->cb)
        s->cb(ev, s->cb_data);
    json_decref(ev);
}

static int on_chunk(const char *name, const char *data, size_t n, void *ud, struct sbx_error *err)
{
    struct chat_stream *s = ud;
    json_t *ch = NULL;
    if (n == 6 && memcmp(data, "[DONE]", 6) == 0) {
        s->done = 1;
        return 0;
    }
    int rc = sbx__model_parse(s->m, "stream chunk", data, n, &ch, err);
    if (rc < 0)
        return rc;
    json_t *e = json_object_get(ch, "error");
    if (e) {
        const char *msg = str(e, "message");
        rc = sbx_error_set(err, SBX_E_API, 0, "model response failed: %s",
                           msg ? msg : "no message given");
        json_decref(ch);
        return rc;
    }
    if (!s->id && json_object_get(ch, "id"))
        s->id = json_incref(json_object_get(ch, "id"));
    if (json_is_object(json_object_get(ch, "usage"))) {
        json_decref(s->usage);
        s->usage = json_incref(json_object_get(ch, "usage"));
    }
    json_t *choice = json_array_get(json_object_get(ch, "choices"), 0);
    if (json_is_string(json_object_get(choice, "finish_reason"))) {
        json_decref(s->finish_reason);
        s->finish_reason = json_incref(json_object_get(choice, "finish_reason"));
    }
    json_t *delta = json_object_get(choice, "delta");
    const char *text = str(delta, "content");
    if (text && text[0]) {
        rc = sbx_buf_adds(&s->text, text, err);
        if (rc < 0)
            goto out;
        emit(s, json_pack("{s:s, s:i, s:i, s:s}", "type", "response.output_text.delta",
                          "output_index", 0, "content_index", 0, "delta", text));
    }
    size_t i;
    json_t *tc;
    json_array_foreach(json_object_get(delta, "tool_calls"), i, tc)
    {
        json_int_t idx = json_integer_value(json_object_get(tc, "index"));
        if (idx < 0 || idx > 1024) {
            rc = sbx_error_set(err, SBX_E_PARSE, 0, "tool call index %lld out of range",
                               (long long)idx);
            goto out;
        }
        while (json_array_size(s->calls) <= (size_t)idx)
            sbx_json_append(s->calls, json_pack("{s:s, s:{s:s, s:s}}", "type", "function",
                                                "function", "name", "", "arguments", ""));
        json_t *call = json_array_get(s->calls, (size_t)idx);
        json_t *fn = json_object_get(call, "function");
        json_t *dfn = json_object_get(tc, "function");
        if (json_is_string(json_object_get(tc, "id")))
            sbx_json_set(call, "id", json_incref(json_object_get(tc, "id")));
        const char *nm = str(dfn, "name");
        if (nm) {
            char *joined = sbx_xasprintf("%s%s", str(fn, "name"), nm);
            sbx_json_set(fn, "name", sbx_json_str(joined));
            free(joined);
        }
        const char *args = str(dfn, "arguments");
        if (args && args[0]) {
            char *joined = sbx_xasprintf("%s%s", str(fn, "arguments"), args);
            sbx_json_set(fn, "arguments", sbx_json_str(joined));
            free(joined);
            emit(s, json_pack("{s:s, s:I, s:s}", "type", "response.function_call_arguments.delta",
                              "output_index", idx, "delta", args));
        }
    }
out:
    json_decref(ch);
    return rc;
}

static int sink(const char *p, size_t n, void *ud, struct sbx_error *err)
{
    return sbx__sse_feed(&((struct chat_stream *)ud)->sse, p, n, err);
}

static void reset(void *ud)
{
    struct chat_stream *s = ud;
    sbx__sse_release(&s->sse);
    sbx__sse_init(&s->sse, s->m->max_event_bytes, on_chunk, s);
    sbx_buf_reset(&s->text);
    json_array_clear(s->calls);
    json_decref(s->id);
    json_decref(s->usage);
    json_decref(s->finish_reason);
    s->id = s->usage = s->finish_reason = NULL;
    s->delivered = 0;
    s->done = 0;
}

static size_t delivered(void *ud)
{
    return ((struct chat_stream *)ud)->delivered;
}

static int finish_stream(void *ud, const struct sbx__model_http_resp *resp, json_t **out,
                         struct sbx_error *err)
{
    struct chat_stream *s = ud;
    if (!s->done)
        return sbx_error_set(err, SBX_E_HTTP, 0,
                             "model stream ended before the response completed");
    json_t *r = make_response(s->id, s->text.data, s->text.len, s->calls, s->tools, s->usage,
                              json_string_value(s->finish_reason));
    size_t i;
    json_t *item;
    json_array_foreach(json_object_get(r, "output"), i, item)
    {
        emit(s, json_pack("{s:s, s:i, s:O}", "type", "response.output_item.done", "output_index",
                          (json_int_t)i, "item", item));
    }
    const char *status = json_string_value(json_object_get(r, "status"));
    emit(s,
         json_pack("{s:s, s:O}", "type",
                   strcmp(status, "incomplete") == 0 ? "response.incomplete" : "response.completed",
                   "response", r));
    *out = r;
    return 0;
}

static int finish_plain(void *ud, const struct sbx__model_http_resp *resp, json_t **out,
                        struct sbx_error *err)
{
    struct chat_stream *s = ud;
    json_t *body = NULL;
    int rc = sbx__model_parse(s->m, "model response", resp->body.data, resp->body.len, &body, err);
    if (rc < 0)
        return rc;
    json_t *choice = json_array_get(json_object_get(body, "choices"), 0);
    json_t *msg = json_object_get(choice, "message");
    if (!json_is_object(msg)) {
        json_decref(body);
        return sbx_error_set(err, SBX_E_PARSE, 0, "model response has no choices[0].message");
    }
    const char *text = str(msg, "content");
    *out = make_response(json_object_get(body, "id"), text, text ? strlen(text) : 0,
                         json_object_get(msg, "tool_calls"), s->tools,
                         json_object_get(body, "usage"),
                         json_string_value(json_object_get(choice, "finish_reason")));
    json_decref(body);
    return 0;
}

static void chat_init(struct chat_stream *s, struct sbx_model *m, const json_t *tools,
                      sbx_model_stream_fn *cb, void *cb_data)
{
    *s = (struct chat_stream){
            .m = m, .tools = tools, .cb = cb, .cb_data = cb_data, .calls = json_array()};
    sbx_buf_init(&s->text, m->max_response_bytes);
    sbx__sse_init(&s->sse, m->max_event_bytes, on_chunk, s);
}

static void chat_release(struct chat_stream *s)
{
    sbx__sse_release(&s->sse);
    sbx_buf_release(&s->text);
    json_decref(s->calls);
    json_decref(s->id);
    json_decref(s->usage);
    json_decref(s->finish_reason);
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

static int chat_respond(struct sbx_model *m, const struct sbx_model_request *req,
                        sbx_model_stream_fn *cb, void *cb_data, json_t **out, struct sbx_error *err)
{
    int stream = cb && !m->no_stream;
    struct chat_stream s;
    if (req->previous_response_id)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "previous_response_id needs the Responses API");
    if (req->prompt)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "a stored prompt (the agent's 'prompt' field) needs the Responses "
                             "API: the Chat Completions API has no prompt object");
    chat_init(&s, m, req->tools, cb, cb_data);
    struct sbx__attempt_ops ops = attempt_ops(stream);
    int rc = sbx__model_exchange(m, req, "/chat/completions", stream, &ops, &s, cb, cb_data, out,
                                 err);
    chat_release(&s);
    return rc;
}

static int chat_decode(struct sbx_model *m, const json_t *tools, const char *body, size_t n,
                       int stream, sbx_model_stream_fn *cb, void *cb_data, json_t **out,
                       struct sbx_error *err)
{
    struct chat_stream s;
    chat_init(&s, m, tools, cb, cb_data);
    struct sbx__attempt_ops ops = attempt_ops(stream);
    int rc = sbx__model_decode_with(&ops, &s, body, n, stream, out, err);
    chat_release(&s);
    return rc;
}

const struct sbx__model_vt sbx__model_chat_vt = {
        .provider = "chat",
        .respond = chat_respond,
        .decode = chat_decode,
        .body = build_body,
};
