/* The OpenAI traces exporter: spans in the traces ingest format (POST {"data": [trace,
 * spans...]} as the reference Agents SDK's backend exporter sends them), from the exporter's
 * own thread (docs/internals/tracing.md). */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/trace/export-http.h"
#include "sbx/buf.h"
#include "sbx/json.h"
#include "sbx/time.h"
#include "sbx/trace-export.h"

struct oai {
    struct sbx__trace_post post;
    char *workflow, *group_id;
    json_t *metadata;
    int trace_sent; /* the trace object went with an earlier batch */
    char trace_hex[2 * SBX_TRACE_ID_LEN + 1];
};

static int zero_id(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

/* "span_" and 24 hex digits, the ingest's id form: the W3C span id and the first 4 bytes of
 * the trace id, so every id maps to one ingest id and back. */
static json_t *span_id(const uint8_t *sid, const uint8_t *tid)
{
    char a[2 * SBX_SPAN_ID_LEN + 1], b[9], out[5 + 24 + 1];
    sbx_trace_hex(sid, SBX_SPAN_ID_LEN, a);
    sbx_trace_hex(tid, 4, b);
    snprintf(out, sizeof(out), "span_%s%s", a, b);
    return sbx_json_str(out);
}

static json_t *attr(const json_t *a, const char *k)
{
    const json_t *v = json_object_get(a, k);
    return v ? json_incref((json_t *)v) : json_null();
}

static int attr_is(const json_t *a, const char *k, const char *want)
{
    const char *v = json_string_value(json_object_get(a, k));
    return v && strcmp(v, want) == 0;
}

/* A content attribute (JSON text, possibly cut) as the SDK sends it: the parsed value when it
 * parses, else the text. */
static json_t *parsed(const json_t *a, const char *k)
{
    const json_t *v = json_object_get(a, k);
    json_t *out = NULL;
    if (!json_is_string(v))
        return json_null();
    if (sbx_json_parse(json_string_value(v), json_string_length(v), NULL, &out, NULL) == 0)
        return out;
    return json_incref((json_t *)v);
}

/* The usage of a turn or task span's data, as the SDK's turn_usage_to_span_data and
 * task_usage_to_span_data give it; NULL when the span has none. */
static json_t *usage_data(const json_t *a, int task)
{
    const json_t *in = json_object_get(a, "gen_ai.usage.input_tokens");
    const json_t *out = json_object_get(a, "gen_ai.usage.output_tokens");
    if (!json_is_integer(in) || !json_is_integer(out))
        return NULL;
    const json_t *cached = json_object_get(a, "gen_ai.usage.cache_read.input_tokens");
    json_t *u = json_pack("{s:O, s:O, s:I, s:I}", "input_tokens", in, "output_tokens", out,
                          "cached_input_tokens",
                          (json_int_t)(json_is_integer(cached) ? json_integer_value(cached) : 0),
                          "cache_write_input_tokens", (json_int_t)0);
    if (task) {
        const json_t *req = json_object_get(a, "sbx.usage.requests");
        sbx_json_set(u, "requests",
                     json_integer(json_is_integer(req) ? json_integer_value(req) : 0));
        sbx_json_set(u, "total_tokens",
                     json_integer(json_integer_value(in) + json_integer_value(out)));
    }
    return u;
}

/* The SDK's custom task and turn spans: {"type": "custom", "name": "task" | "turn", "data":
 * {"sdk_span_type", ...}} (its TaskSpanData and TurnSpanData). */
static json_t *task_or_turn(const struct sbx_span_data *d)
{
    const json_t *a = d->attrs;
    int task = strcmp(d->name, "run") == 0;
    const char *wf = json_string_value(json_object_get(a, SBX_ATTR_WORKFLOW));
    json_t *data = task ? json_pack("{s:s, s:s}", "sdk_span_type", "task", "name",
                                    wf ? wf : SBX_TRACE_WORKFLOW)
                        : json_pack("{s:s, s:O?, s:O?}", "sdk_span_type", "turn", "turn",
                                    json_object_get(a, "sbx.turn"), "agent_name",
                                    json_object_get(a, "gen_ai.agent.name"));
    json_t *u = usage_data(a, task);
    if (u)
        sbx_json_set(data, "usage", u);
    return json_pack("{s:s, s:s, s:o}", "type", "custom", "name", task ? "task" : "turn", "data",
                     data);
}

/* The span_data of d, as the reference SDK exports each kind: agent, response (a Responses API
 * call: its id; the ingest takes no usage there), generation (a Chat Completions call),
 * function, handoff, guardrail, the custom task and turn spans; custom for the rest (sandbox
 * operations) with the attributes as data. Spans are known by the GenAI operation they record. */
static json_t *span_data(const struct sbx_span_data *d)
{
    const json_t *a = d->attrs;
    if (attr_is(a, "gen_ai.operation.name", "invoke_agent"))
        return json_pack("{s:s, s:o, s:O?, s:O?, s:n}", "type", "agent", "name",
                         attr(a, "gen_ai.agent.name"), "handoffs",
                         json_object_get(a, "sbx.agent.handoffs"), "tools",
                         json_object_get(a, "sbx.agent.tools"), "output_type");
    if (attr_is(a, "gen_ai.operation.name", "chat")) {
        if (!attr_is(a, "openai.api.type", "chat_completions"))
            return json_pack("{s:s, s:o}", "type", "response", "response_id",
                             attr(a, "gen_ai.response.id"));
        json_t *usage = json_object();
        if (json_object_get(a, "gen_ai.usage.input_tokens"))
            sbx_json_set(usage, "input_tokens", attr(a, "gen_ai.usage.input_tokens"));
        if (json_object_get(a, "gen_ai.usage.output_tokens"))
            sbx_json_set(usage, "output_tokens", attr(a, "gen_ai.usage.output_tokens"));
        return json_pack("{s:s, s:o, s:o, s:o, s:{}, s:o}", "type", "generation", "input",
                         parsed(a, "sbx.model.input"), "output", parsed(a, "sbx.model.output"),
                         "model", attr(a, "gen_ai.request.model"), "model_config", "usage", usage);
    }
    if (attr_is(a, "gen_ai.operation.name", "execute_tool"))
        return json_pack("{s:s, s:o, s:o, s:o, s:n}", "type", "function", "name",
                         attr(a, "gen_ai.tool.name"), "input", attr(a, "sbx.tool.arguments"),
                         "output", attr(a, "sbx.tool.output"), "mcp_data");
    if (strcmp(d->name, "handoff") == 0)
        return json_pack("{s:s, s:o, s:o}", "type", "handoff", "from_agent",
                         attr(a, "sbx.handoff.from"), "to_agent", attr(a, "sbx.handoff.to"));
    if (strcmp(d->name, "guardrail") == 0)
        return json_pack("{s:s, s:o, s:b}", "type", "guardrail", "name",
                         attr(a, "sbx.guardrail.name"), "triggered",
                         json_is_true(json_object_get(a, "sbx.guardrail.triggered")));
    if (strcmp(d->name, "run") == 0 || strcmp(d->name, "turn") == 0)
        return task_or_turn(d);
    return json_pack("{s:s, s:s, s:O}", "type", "custom", "name", d->name, "data", a);
}

static json_t *span_json(const struct sbx_span_data *d)
{
    char start[SBX_TIME_RFC3339_LEN], end[SBX_TIME_RFC3339_LEN], tid[2 * SBX_TRACE_ID_LEN + 1];
    sbx_time_rfc3339(d->start_ns, start);
    sbx_time_rfc3339(d->end_ns, end);
    sbx_trace_hex(d->trace_id, SBX_TRACE_ID_LEN, tid);
    /* The run span's parent is a caller's span (--trace-parent) that is not in this trace's
     * spans: the run is then a top span too. */
    int top = zero_id(d->parent_id, SBX_SPAN_ID_LEN) || strcmp(d->name, "run") == 0;
    json_t *o = json_object();
    sbx_json_set(o, "object", sbx_json_str("trace.span"));
    sbx_json_set(o, "id", span_id(d->span_id, d->trace_id));
    sbx_json_set(o, "trace_id", json_sprintf("trace_%s", tid));
    sbx_json_set(o, "parent_id", top ? json_null() : span_id(d->parent_id, d->trace_id));
    sbx_json_set(o, "started_at", sbx_json_str(start));
    sbx_json_set(o, "ended_at", sbx_json_str(end));
    sbx_json_set(o, "span_data", span_data(d));
    sbx_json_set(o, "error",
                 d->status == SBX_SPAN_ERROR
                         ? json_pack("{s:s, s:n}", "message",
                                     d->status_message ? d->status_message : "", "data")
                         : json_null());
    return o;
}

static int oai_export(void *data, const struct sbx_span_data *const *spans, size_t n)
{
    struct oai *o = data;
    json_t *items = json_array();
    if (!o->trace_sent && n) {
        sbx_trace_hex(spans[0]->trace_id, SBX_TRACE_ID_LEN, o->trace_hex);
        sbx_json_append(items,
                        json_pack("{s:s, s:o, s:s, s:s?, s:O?}", "object", "trace", "id",
                                  json_sprintf("trace_%s", o->trace_hex), "workflow_name",
                                  o->workflow, "group_id", o->group_id, "metadata", o->metadata));
    }
    for (size_t i = 0; i < n; i++)
        sbx_json_append(items, span_json(spans[i]));
    json_t *body = json_pack("{s:o}", "data", items);
    char *text = sbx_json_dumps(body, SBX_JSON_COMPACT);
    json_decref(body);
    int rc = sbx__trace_post(&o->post, text, strlen(text));
    free(text);
    if (rc < 0)
        return (int)n;
    o->trace_sent = 1;
    return 0;
}

static void oai_close(void *data)
{
    struct oai *o = data;
    sbx__trace_post_close(&o->post);
    free(o->workflow);
    free(o->group_id);
    json_decref(o->metadata);
    free(o);
}

int sbx_trace_openai_exporter(const char *url, const char *api_key, int64_t timeout_ms,
                              const struct sbx_trace_workflow *wf, struct sbx_trace_exporter *out,
                              struct sbx_error *err)
{
    int rc = sbx__trace_post_check_url("traces endpoint", url, err);
    if (rc < 0)
        return rc;
    if (!api_key || !api_key[0])
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "--trace-openai needs an API key: set OPENAI_API_KEY");
    /* The key goes only into the handle's headers, which are wiped when it is closed. */
    char *auth = sbx_xasprintf("Authorization: Bearer %s", api_key);
    const char *const headers[] = {"Content-Type: application/json", "OpenAI-Beta: traces=v1", auth,
                                   NULL};
    struct oai *o = sbx_xcalloc(1, sizeof(*o));
    rc = sbx__trace_post_open(&o->post, url, headers, timeout_ms, err);
    explicit_bzero(auth, strlen(auth));
    free(auth);
    if (rc < 0) {
        free(o);
        return rc;
    }
    o->workflow = sbx_xstrdup(wf && wf->name ? wf->name : SBX_TRACE_WORKFLOW);
    o->group_id = wf && wf->group_id ? sbx_xstrdup(wf->group_id) : NULL;
    o->metadata = wf && json_object_size(wf->metadata) ? json_deep_copy(wf->metadata) : NULL;
    *out = (struct sbx_trace_exporter){.name = "openai",
                                       .export_batch = oai_export,
                                       .close = oai_close,
                                       .data = o,
                                       .queue_max = 2048,
                                       .batch_max = 256,
                                       .batch_wait_ms = 200,
                                       .drain_ms = 2000};
    return 0;
}
