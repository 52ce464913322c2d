/* The runner: the harness loop of one agent run. See docs/internals/runner.md. */
#include <pthread.h>
#include <string.h>

#include "core/grow.h"
#include "agent/guard.h"
#include "agent/mcp.h"
#include "agent/runner-internal.h"
#include "agent/schema.h"
#include "sbx/hash.h"
#include "sbx/json.h"
#include "sbx/log.h"
#include "sbx/runner.h"
#include "sbx/runstate.h"
#include "sbx/scrub.h"
#include "sbx/time.h"
#include "sbx/trace.h"

#define ARGS_MAX ((size_t)16 << 20)

struct sbx_run_result {
    char *text;
    json_t *json;
    json_t *items;
    struct sbx_agent *last;
    json_t *usage;
    int turns;
    int interrupted;
    json_t *interruptions;
    json_t *state;
};

static int streq(const char *a, const char *b)
{
    return a && b && strcmp(a, b) == 0;
}

static void emit(struct run *r, struct sbx_event *ev)
{
    if (!r->opt->on_event)
        return;
    ev->turn = r->turn;
    if (!ev->agent)
        ev->agent = r->agent->name;
    r->opt->on_event(ev, r->opt->event_data);
}

void sbx__run_emit(struct run *r, struct sbx_event *ev)
{
    emit(r, ev);
}

/* Tracing (docs/internals/tracing.md), with the OpenTelemetry GenAI conventions' span names
 * ("invoke_agent {agent}", "chat {model}", "execute_tool {tool}") and attributes: the agent
 * span lasts from its AGENT_START to a handoff or the end of the run; its parent is the span
 * current when the run started (the caller's run span, or the tool call of an agent-as-tool). */
static void agent_span_begin(struct run *r, struct sbx_span *parent)
{
    char *name = sbx_xasprintf("invoke_agent %s", r->agent->name);
    r->agent_span = sbx_span_start(parent, name, SBX_SPAN_INTERNAL);
    free(name);
    sbx_span_set_str(r->agent_span, "gen_ai.agent.name", r->agent->name);
    sbx_span_set_str(r->agent_span, "gen_ai.operation.name", "invoke_agent");
    sbx_span_set_str(r->agent_span, "gen_ai.provider.name", "openai");
}

static void agent_span_end(struct run *r, int rc, const struct sbx_error *err)
{
    if (rc < 0)
        sbx_span_set_status(r->agent_span, 0, err ? err->msg : "failed");
    sbx_span_end(r->agent_span);
    r->agent_span = NULL;
}

/* The tools and handoffs the agent is offered, on its span (the SDK's agent span lists them). */
static void agent_span_tools(struct run *r)
{
    if (!r->agent_span)
        return;
    const char **names = sbx_xcalloc(r->noffered + 1, sizeof(*names));
    size_t n = 0;
    for (size_t i = 0; i < r->noffered; i++)
        if (r->tv[i]->name)
            names[n++] = r->tv[i]->name;
    sbx_span_set_strs(r->agent_span, "sbx.agent.tools", names, n);
    free(names);
    char **h = sbx_xcalloc(r->agent->nhandoffs + 1, sizeof(*h));
    for (size_t i = 0; i < r->agent->nhandoffs; i++)
        h[i] = r->agent->handoffs[i]->name;
    sbx_span_set_strs(r->agent_span, "sbx.agent.handoffs", (const char *const *)h,
                      r->agent->nhandoffs);
    free(h);
}

static void content_json(struct sbx_span *s, const char *key, const json_t *v)
{
    if (!s || !v || !sbx_trace_content(sbx_span_tracer(s)))
        return;
    char *text = sbx_json_dumps(v, SBX_JSON_COMPACT);
    sbx_span_set_content(s, key, text, strlen(text));
    free(text);
}

/* Why the model stopped, in the conventions' words: a cut answer by its reason ("length" for
 * max_output_tokens), else "tool_calls" when it called tools, else "stop". */
static const char *finish_reason(const json_t *response)
{
    const char *status = json_string_value(json_object_get(response, "status"));
    if (status && strcmp(status, "incomplete") == 0) {
        const char *why = json_string_value(
                json_object_get(json_object_get(response, "incomplete_details"), "reason"));
        return why && strcmp(why, "max_output_tokens") == 0 ? "length" : why ? why : "length";
    }
    size_t i;
    json_t *it;
    json_array_foreach(json_object_get(response, "output"), i, it)
    {
        const char *t = json_string_value(json_object_get(it, "type"));
        if (t && strcmp(t, "message") != 0 && strcmp(t, "reasoning") != 0)
            return "tool_calls";
    }
    return "stop";
}

/* The response's usage on s (the model call, and its turn): input, output and cache-read
 * tokens under the conventions' names. */
static void span_usage(struct sbx_span *s, const json_t *response)
{
    const json_t *u = json_object_get(response, "usage");
    static const char *const keys[][2] = {{"input_tokens", "gen_ai.usage.input_tokens"},
                                          {"output_tokens", "gen_ai.usage.output_tokens"}};
    for (size_t i = 0; i < SBX_ARRAY_LEN(keys); i++) {
        const json_t *v = json_object_get(u, keys[i][0]);
        if (json_is_integer(v))
            sbx_span_set_int(s, keys[i][1], json_integer_value(v));
    }
    const json_t *cached =
            json_object_get(json_object_get(u, "input_tokens_details"), "cached_tokens");
    if (json_is_integer(cached))
        sbx_span_set_int(s, "gen_ai.usage.cache_read.input_tokens", json_integer_value(cached));
}

static void model_span_usage(struct sbx_span *s, const json_t *response)
{
    sbx_span_set_str(s, "gen_ai.response.id", json_string_value(json_object_get(response, "id")));
    sbx_span_set_str(s, "gen_ai.response.model",
                     json_string_value(json_object_get(response, "model")));
    const char *why = finish_reason(response);
    sbx_span_set_strs(s, "gen_ai.response.finish_reasons", &why, 1);
    span_usage(s, response);
}

/* A call item's id: "call_id", or "id" for a hosted MCP server's approval request, whose answer
 * (mcp_approval_response) names it as approval_request_id. */
static const char *call_id_of(const json_t *item)
{
    const char *type = json_string_value(json_object_get(item, "type"));
    if (streq(type, SBX_HOSTED_MCP_ITEM))
        return json_string_value(json_object_get(item, "id"));
    return json_string_value(json_object_get(item, "call_id"));
}

/* What finds a call's tool besides its type: the function's name, or for a hosted MCP
 * approval request the server's label (each hosted server is a tool of that name). */
static const char *call_key_of(const json_t *item)
{
    const char *type = json_string_value(json_object_get(item, "type"));
    if (streq(type, SBX_HOSTED_MCP_ITEM))
        return json_string_value(json_object_get(item, "server_label"));
    return json_string_value(json_object_get(item, "name"));
}

static int fail_run(struct run *r, int rc, struct sbx_error *err)
{
    struct sbx_event ev = {.type = SBX_EVENT_ERROR, .error = err};
    emit(r, &ev);
    return rc;
}

static void on_stream(const json_t *event, void *data)
{
    struct run *r = data;
    struct sbx_event ev = {.type = SBX_EVENT_MODEL_STREAM, .item = event};
    emit(r, &ev);
    if (streq(json_string_value(json_object_get(event, "type")), "response.output_text.delta")) {
        const char *d = json_string_value(json_object_get(event, "delta"));
        if (d) {
            struct sbx_event tev = {.type = SBX_EVENT_TEXT_DELTA, .text = d};
            emit(r, &tev);
        }
    }
}

static void set_turn_tools(struct run *r, const struct sbx_agent *a,
                           const struct sbx_turn_prep *prep)
{
    size_t n = a->ntools + prep->ntools + r->nmcp_tools + prep->nhidden, k = 0;
    r->tv = sbx_xrealloc(r->tv, (n ? n : 1) * sizeof(*r->tv));
    for (size_t i = 0; i < a->ntools; i++)
        r->tv[k++] = a->tools[i];
    for (size_t i = 0; i < prep->ntools; i++)
        r->tv[k++] = prep->tools[i];
    for (size_t i = 0; i < r->nmcp_tools; i++)
        r->tv[k++] = r->mcp_tools[i];
    r->noffered = k;
    for (size_t i = 0; i < prep->nhidden; i++)
        r->tv[k++] = prep->hidden[i];
    r->ntv = k;
}

static struct sbx_tool *find_tool(const struct run *r, const char *item_type, const char *name)
{
    for (size_t i = 0; i < r->ntv; i++) {
        struct sbx_tool *t = r->tv[i];
        if (!streq(t->item_type, item_type))
            continue;
        if ((t->kind == SBX__TOOL_ITEM && !streq(item_type, SBX_HOSTED_MCP_ITEM)) ||
            streq(t->name, name))
            return t;
    }
    return NULL;
}

static struct sbx_agent *find_handoff(const struct sbx_agent *a, const char *name)
{
    for (size_t i = 0; i < a->nhandoffs; i++) {
        char *h = sbx__agent_handoff_tool_name(a->handoffs[i]);
        int same = streq(h, name);
        free(h);
        if (same)
            return a->handoffs[i];
    }
    return NULL;
}

static json_t *build_tools(const struct run *r, const struct sbx_agent *a)
{
    json_t *tools = json_array();
    for (size_t i = 0; i < r->noffered; i++)
        sbx_json_append(tools, json_incref(r->tv[i]->definition));
    for (size_t i = 0; i < a->nhandoffs; i++) {
        const struct sbx_agent *t = a->handoffs[i];
        char *name = sbx__agent_handoff_tool_name(t);
        char *desc = sbx_xasprintf("Hand the conversation over to the %s agent.%s%s", t->name,
                                   t->handoff_description ? " " : "",
                                   t->handoff_description ? t->handoff_description : "");
        sbx_json_append(tools, json_pack("{s:s, s:s, s:s, s:{s:s, s:{}, s:[], s:b}, s:b}", "type",
                                         "function", "name", name, "description", desc,
                                         "parameters", "type", "object", "properties", "required",
                                         "additionalProperties", 0, "strict", 1));
        free(name);
        free(desc);
    }
    return tools;
}

/* The turn's tool_choice: the agent's own, else ModelSettings.tool_choice; with
 * reset_tool_choice it is dropped once one of the agent's tools ran (as the SDK resets it). */
static json_t *tool_choice_of(struct run *r, const struct sbx_agent *a, const json_t *settings)
{
    const json_t *set = json_object_get(settings, "tool_choice");
    const char *choice = a->tool_choice ? a->tool_choice : json_string_value(set);
    if (!choice && !json_is_object(set))
        return NULL;
    if (a->reset_tool_choice)
        for (size_t i = 0; i < r->nused; i++)
            if (r->used_tools[i] == a)
                return NULL;
    if (!choice) /* {server_label, name}: a tool of an MCP server */
        return json_pack("{s:s, s:O, s:O}", "type", "mcp", "server_label",
                         json_object_get(set, "server_label"), "name",
                         json_object_get(set, "name"));
    if (streq(choice, "auto") || streq(choice, "required") || streq(choice, "none"))
        return sbx_json_str(choice);
    for (size_t i = 0; i < r->noffered; i++)
        if (r->tv[i]->kind == SBX__TOOL_CUSTOM && streq(r->tv[i]->name, choice))
            return json_pack("{s:s, s:s}", "type", "custom", "name", choice);
    return json_pack("{s:s, s:s}", "type", "function", "name", choice);
}

/* The settings the request carries: tool_choice is the runner's (tool_choice_of), so a copy
 * without it when the settings have one. Caller owns (json_decref; NULL when none). */
static json_t *request_settings(const json_t *settings)
{
    if (!json_object_get(settings, "tool_choice"))
        return json_incref((json_t *)settings);
    json_t *copy = json_copy((json_t *)settings);
    json_object_del(copy, "tool_choice");
    return copy;
}

static void mark_used(struct run *r, struct sbx_agent *a)
{
    for (size_t i = 0; i < r->nused; i++)
        if (r->used_tools[i] == a)
            return;
    r->used_tools = sbx_xrealloc(r->used_tools, (r->nused + 1) * sizeof(*r->used_tools));
    r->used_tools[r->nused++] = a;
}

static void add_usage(struct run *r, const json_t *response)
{
    static const char *const keys[] = {"input_tokens", "output_tokens", "total_tokens"};
    json_t *u = json_object_get(response, "usage");
    for (size_t i = 0; i < SBX_ARRAY_LEN(keys); i++) {
        json_int_t have = json_integer_value(json_object_get(r->usage, keys[i]));
        json_int_t add = json_integer_value(json_object_get(u, keys[i]));
        sbx_json_set(r->usage, keys[i], json_integer(have + add));
    }
    json_int_t req = json_integer_value(json_object_get(r->usage, "requests"));
    sbx_json_set(r->usage, "requests", json_integer(req + 1));
}

/* Text of a tool output (string or parts) for events and final outputs. */
static char *output_text(const json_t *output)
{
    if (json_is_string(output))
        return sbx_xstrdup(json_string_value(output));
    struct sbx_buf b;
    size_t i;
    json_t *p;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    json_array_foreach(output, i, p)
    {
        const char *t = json_string_value(json_object_get(p, "text"));
        const char *type = json_string_value(json_object_get(p, "type"));
        const char *add = t ? t : streq(type, "input_image") ? "[image]" : "";
        if (sbx_buf_adds(&b, add, NULL) < 0)
            SBX_BUG("unbounded buffer refused data");
    }
    return sbx_buf_detach(&b, NULL);
}

static void job_output(struct job *j, json_t *output, int failed)
{
    const char *otype =
            streq(j->type, "custom_tool_call") ? "custom_tool_call_output" : "function_call_output";
    j->output = json_pack("{s:s, s:s, s:o}", "type", otype, "call_id", j->call_id ? j->call_id : "",
                          "output", output);
    j->text = output_text(output);
    j->failed = failed;
}

static void job_error(struct job *j, const char *fmt, const char *msg)
{
    char *text = sbx_xasprintf("error: %s%s", fmt, msg);
    job_output(j, sbx_json_str(text), 1);
    free(text);
}

/* A tool guardrail's result rc: an error ends the run; 1 (the call was refused) and 0 go on. */
static void job_guard_failed(struct job *j, int rc, const struct sbx_error *err)
{
    if (rc >= 0)
        return;
    j->fatal = 1;
    sbx_error_copy(&j->err, err);
}

static void run_job(struct job *j)
{
    struct sbx_tool *t = j->tool;
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_tool_call call = {
            .call_id = j->call_id,
            .name = j->name,
            .item = j->item,
            .agent = j->agent,
            .run = j->run->opt,
            .context = j->run->opt->context,
            .data = t->data,
            .approved = j->approved,
            .session = j->run->session,
    };
    int64_t start = sbx_time_mono_ns();
    struct sbx_span *prev_span = sbx_trace_set_current(j->span);
    sbx_span_set_start(j->span, sbx_time_real_ns());
    if (t->kind == SBX__TOOL_ITEM) {
        json_t *out = NULL;
        int rc = sbx__guard_tool_input(j, j->item, &err);
        if (rc != 0) {
            job_guard_failed(j, rc, &err);
            j->duration_ns = sbx_time_mono_ns() - start;
            sbx_trace_set_current(prev_span);
            return;
        }
        rc = t->item_fn(&call, &out, &err);
        if (rc == 0 && !json_is_object(out)) {
            json_decref(out);
            rc = sbx_error_set(&err, SBX_E_INVAL, 0, "tool '%s' produced no output item", t->name);
        }
        if (rc == -SBX_E_SANDBOX || rc == -SBX_E_CANCELLED) {
            j->fatal = 1;
            sbx_error_copy(&j->err, &err);
        } else if (rc < 0) {
            char *otype = sbx_xasprintf("%s_output", t->item_type);
            char *text = sbx_xasprintf("error: %s", err.msg);
            j->output = json_pack("{s:s, s:s, s:s, s:s}", "type", otype, "call_id",
                                  j->call_id ? j->call_id : "", "status", "failed", "output", text);
            j->text = text;
            j->failed = 1;
            free(otype);
        } else {
            j->output = out;
            /* An approval answer has no output: the model's server runs the call. */
            j->text = streq(j->type, SBX_HOSTED_MCP_ITEM)
                              ? sbx_xstrdup("approved: the model's server runs it")
                              : output_text(json_object_get(out, "output"));
        }
        if (!j->fatal)
            job_guard_failed(j, sbx__guard_tool_output(j, &err), &err);
        j->duration_ns = sbx_time_mono_ns() - start;
        sbx_trace_set_current(prev_span);
        return;
    }

    json_t *args = NULL;
    if (t->kind == SBX__TOOL_FUNCTION) {
        const char *a = json_string_value(json_object_get(j->item, "arguments"));
        if (!a || !a[0])
            a = "{}";
        struct sbx_json_limits lim = {.max_bytes = ARGS_MAX, .max_depth = 64};
        if (sbx_json_parse(a, strlen(a), &lim, &args, &err) < 0) {
            job_error(j,
                      "the arguments are not valid JSON; call the tool again with a JSON object: ",
                      err.msg);
            goto out;
        }
        if (sbx__schema_validate(t->schema, args, &err) < 0) {
            job_error(j, "the arguments do not match the tool's schema: ", err.msg);
            goto out;
        }
    } else {
        json_t *in = json_object_get(j->item, "input");
        args = json_is_string(in) ? json_incref(in) : sbx_json_str("");
    }
    int grc = sbx__guard_tool_input(j, args, &err);
    if (grc != 0) {
        job_guard_failed(j, grc, &err);
        goto out;
    }
    struct sbx_tool_output out;
    sbx_buf_init(&out.text, SBX_TOOL_OUTPUT_MAX);
    out.parts = NULL;
    int rc = t->fn(args, &call, &out, &err);
    if (rc == -SBX_E_SANDBOX || rc == -SBX_E_CANCELLED) {
        j->fatal = 1;
        sbx_error_copy(&j->err, &err);
    } else if (rc < 0) {
        char *prefix = sbx_xasprintf("tool '%s' failed: ", t->name);
        job_error(j, prefix, err.msg);
        free(prefix);
    } else if (out.parts) {
        job_output(j, json_incref(out.parts), 0);
    } else {
        job_output(j, sbx_json_strn(out.text.data, out.text.len), 0);
    }
    json_decref(out.parts);
    sbx_buf_release(&out.text);
    if (!j->fatal)
        job_guard_failed(j, sbx__guard_tool_output(j, &err), &err);
out:
    json_decref(args);
    j->duration_ns = sbx_time_mono_ns() - start;
    sbx_trace_set_current(prev_span);
}

static void *job_thread(void *p)
{
    run_job(p);
    return NULL;
}

static void job_refuse(struct job *j, const char *text);

/* A hook's view of a call: tool, call id, arguments (parsed when they are JSON). */
static json_t *hook_call(const struct job *j)
{
    json_t *args = sbx_approval_args(j->item);
    return json_pack("{s:s, s:s, s:o}", "tool", j->name ? j->name : "", "call_id", j->call_id,
                     "arguments", args ? args : json_null());
}

/* The agent's tool_start hooks for a call about to run: 1 when it runs; 0 when a hook vetoed
 * it (the model reads the reason) or failed (the run ends). */
static int tool_start_hooks(struct run *r, struct job *j)
{
    char *deny = NULL;
    json_t *payload = hook_call(j);
    struct sbx_span *prev = sbx_trace_set_current(j->span);
    int rc = sbx__hook_fire(r, j->agent, "tool_start", j->name, payload, &deny, &j->err);
    sbx_trace_set_current(prev);
    json_decref(payload);
    if (rc < 0) {
        j->fatal = 1;
        return 0;
    }
    if (!deny)
        return 1;
    sbx_span_set_str(j->span, "sbx.hook.decision", "deny");
    job_refuse(j, deny);
    j->rejected = 1;
    free(deny);
    return 0;
}

/* The agent's tool_end hooks for the calls that ran, in call order. */
static int tool_end_hooks(struct run *r, struct job *jobs, size_t n, struct sbx_error *err)
{
    for (size_t i = 0; i < n; i++) {
        struct job *j = &jobs[i];
        if (!j->tool || !j->now || j->rejected || !j->output)
            continue;
        json_t *payload = hook_call(j);
        sbx_json_set(payload, "output", sbx_json_str(j->text ? j->text : ""));
        sbx_json_set(payload, "failed", json_boolean(j->failed));
        int rc = sbx__hook_fire(r, j->agent, "tool_end", j->name, payload, NULL, err);
        json_decref(payload);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static void run_jobs(struct run *r, struct job *jobs, size_t n)
{
    size_t width = r->opt->max_parallel_tools > 0 ? (size_t)r->opt->max_parallel_tools : 8;
    struct job **todo = sbx_xcalloc(n ? n : 1, sizeof(*todo));
    size_t nt = 0;
    for (size_t i = 0; i < n; i++)
        if (jobs[i].tool && jobs[i].now && !jobs[i].rejected && tool_start_hooks(r, &jobs[i]))
            todo[nt++] = &jobs[i];
    for (size_t i = 0; i < nt; i++) {
        struct sbx_event ev = {
                .type = SBX_EVENT_TOOL_START, .item = todo[i]->item, .tool = todo[i]->name};
        emit(r, &ev);
    }
    if (nt <= 1) {
        if (nt == 1)
            run_job(todo[0]);
        free(todo);
        return;
    }
    pthread_t *th = sbx_xcalloc(width, sizeof(*th));
    int *started = sbx_xcalloc(width, sizeof(*started));
    for (size_t base = 0; base < nt; base += width) {
        size_t cnt = nt - base < width ? nt - base : width;
        for (size_t k = 0; k < cnt; k++) {
            started[k] = pthread_create(&th[k], NULL, job_thread, todo[base + k]) == 0;
            if (!started[k])
                run_job(todo[base + k]);
        }
        for (size_t k = 0; k < cnt; k++)
            if (started[k])
                pthread_join(th[k], NULL);
    }
    free(started);
    free(th);
    free(todo);
}

static int cancelled(struct run *r, const char *where, struct sbx_error *err)
{
    if (!r->opt->cancel || !*r->opt->cancel)
        return 0;
    return sbx_error_set(err, SBX_E_CANCELLED, 0, "run cancelled at turn %d of agent '%s' %s",
                         r->turn, r->agent->name, where);
}

static char *message_text(const json_t *item)
{
    struct sbx_buf b;
    size_t i;
    json_t *p;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    json_t *content = json_object_get(item, "content");
    if (json_is_string(content) && sbx_buf_adds(&b, json_string_value(content), NULL) < 0)
        SBX_BUG("unbounded buffer refused data");
    json_array_foreach(content, i, p)
    {
        const char *t = json_string_value(json_object_get(p, "text"));
        if (streq(json_string_value(json_object_get(p, "type")), "output_text") && t &&
            sbx_buf_adds(&b, t, NULL) < 0)
            SBX_BUG("unbounded buffer refused data");
    }
    return sbx_buf_detach(&b, NULL);
}

/* The refusal text of a message, if it holds one (borrowed). */
static const char *refusal_of(const json_t *item)
{
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(item, "content"), i, p)
    {
        if (streq(json_string_value(json_object_get(p, "type")), "refusal"))
            return json_string_value(json_object_get(p, "refusal"));
    }
    return NULL;
}

static int structured_final(struct run *r, const char *text, json_t **out, struct sbx_error *err)
{
    json_t *v = NULL;
    int rc = sbx_json_parse(text, strlen(text), NULL, &v, err);
    if (rc == 0)
        rc = sbx__schema_validate(r->agent->output_schema, v, err);
    if (rc < 0) {
        json_decref(v);
        sbx_error_prefix(err, "final output of agent '%s' does not match its output schema",
                         r->agent->name);
        return rc;
    }
    if (r->agent->output_wrapped) {
        json_t *inner = json_incref(json_object_get(v, "response"));
        json_decref(v);
        v = inner;
    }
    *out = v;
    return 0;
}

static struct sbx_run_result *make_result(struct run *r, const char *text, json_t *json)
{
    struct sbx_run_result *res = sbx_xcalloc(1, sizeof(*res));
    res->text = sbx_xstrdup(text);
    res->json = json;
    res->items = json_incref(r->items);
    res->last = r->agent;
    res->usage = json_incref(r->usage);
    res->turns = r->turn;
    res->interruptions = json_array();
    return res;
}

/* The final output, once the agent's agent_end hooks ran and its output guardrails passed
 * (json is taken). */
static int finish(struct run *r, const char *text, json_t *json, struct sbx_run_result **out,
                  struct sbx_error *err)
{
    /* agent_end first, then the output guardrails, in the reference SDK's order. */
    json_t *payload = json_pack("{s:s}", "output", text);
    int rc = sbx__hook_fire(r, r->agent, "agent_end", NULL, payload, NULL, err);
    json_decref(payload);
    if (rc == 0)
        rc = sbx__guard_output(r, text, json, err);
    if (rc < 0) {
        json_decref(json);
        return rc;
    }
    struct sbx_run_result *res = make_result(r, text, json);
    struct sbx_event ev = {.type = SBX_EVENT_FINAL, .text = res->text, .item = json};
    emit(r, &ev);
    *out = res;
    return 0;
}

static int checkpoint(struct run *r, struct sbx_error *err)
{
    if (r->nested || !r->opt->checkpoint)
        return 0;
    json_t *st = NULL;
    int rc = sbx__run_state_build(r, "running", NULL, NULL, 0, 1, &st, err);
    if (rc == 0)
        rc = r->opt->checkpoint(r->opt->checkpoint_data, st, err);
    json_decref(st);
    if (rc < 0)
        sbx_error_prefix(err, "checkpoint after turn %d", r->turn);
    return rc;
}

static void drop_open_call(struct run *r, const char *id)
{
    size_t i;
    json_t *v;
    json_array_foreach(r->open_calls, i, v)
    {
        if (streq(json_string_value(v), id)) {
            json_array_remove(r->open_calls, i);
            return;
        }
    }
}

/* A rejected call's output: the decision's message verbatim, else the default text (what
 * the reference SDK sends). The tool never runs. */
static void job_refuse(struct job *j, const char *text)
{
    json_decref(j->output);
    j->output = NULL;
    free(j->text);
    j->text = NULL;
    if (streq(j->type, SBX_HOSTED_MCP_ITEM)) {
        j->output = json_pack("{s:s, s:s, s:b, s:s}", "type", "mcp_approval_response",
                              "approval_request_id", j->call_id ? j->call_id : "", "approve", 0,
                              "reason", text);
        j->text = sbx_xstrdup(text);
        j->failed = 1;
        return;
    }
    if (j->tool->kind == SBX__TOOL_ITEM) {
        char *otype = sbx_xasprintf("%s_output", j->tool->item_type);
        j->output = json_pack("{s:s, s:s, s:s, s:s}", "type", otype, "call_id",
                              j->call_id ? j->call_id : "", "status", "failed", "output", text);
        j->text = sbx_xstrdup(text);
        j->failed = 1;
        free(otype);
        return;
    }
    job_output(j, sbx_json_str(text), 1);
}

static void job_reject(struct job *j)
{
    job_refuse(j, j->reject_message ? j->reject_message : SBX_APPROVAL_REJECTED_TEXT);
}

void sbx__job_refuse(struct job *j, const char *text)
{
    job_refuse(j, text);
}

static void interrupt(struct run *r, struct job *jobs, size_t njobs)
{
    json_decref(r->pending);
    r->pending = json_array();
    for (size_t k = 0; k < njobs; k++) {
        struct job *j = &jobs[k];
        if (!j->pending || j->now)
            continue;
        sbx_json_append(r->pending,
                        json_pack("{s:s, s:s, s:s, s:s, s:O?, s:i}", "agent", r->agent->name,
                                  "tool", j->name ? j->name : "", "call_id", j->call_id, "type",
                                  j->type, "arguments", j->args, "turn", j->turn));
    }
    struct sbx_event ev = {.type = SBX_EVENT_INTERRUPTION, .item = r->pending};
    emit(r, &ev);
}

/* Which calls run now: every call that does not wait for approval (as in the reference SDK,
 * the calls of a turn that need none run while another waits), and handoffs only when none
 * waits (the agent changes only once every call of the turn is answered). Rejected ones get
 * their rejection text as output. Returns 1 when some call waits, 0 when none, or an error. */
static int plan_jobs(struct run *r, struct job *jobs, size_t njobs, struct sbx_error *err)
{
    int waiting = sbx__approval_check(r, jobs, njobs, err);
    if (waiting < 0)
        return waiting;
    for (size_t k = 0; k < njobs; k++)
        jobs[k].now = !jobs[k].pending && (!waiting || !jobs[k].handoff);
    for (size_t k = 0; k < njobs; k++)
        if (jobs[k].now && jobs[k].rejected)
            job_reject(&jobs[k]);
    return waiting;
}

/* The calls of this turn that no tool answered: a tool failure that ends the run (returned as
 * the error), the first handoff (its agent in *next; later ones are refused), a name that no
 * tool has. */
static int answer_jobs(struct run *r, struct job *jobs, size_t njobs, struct sbx_agent **next,
                       struct sbx_error *err)
{
    int rc;
    for (size_t k = 0; k < njobs; k++) {
        struct job *j = &jobs[k];
        if (!j->now)
            continue;
        sbx__guard_job_report(r, j);
        if (j->fatal) {
            sbx_span_set_status(j->span, 0, j->err.msg);
            char *where = sbx_xasprintf("while running tool '%s'", j->name ? j->name : "?");
            /* A tool that stopped because the run was cancelled says so like every step does. */
            rc = j->err.code == SBX_E_CANCELLED ? cancelled(r, where, err) : 0;
            free(where);
            if (rc < 0)
                return rc;
            rc = sbx_error_copy(err, &j->err);
            sbx_error_prefix(err, "tool '%s'", j->name ? j->name : "?");
            return rc;
        }
        if (j->handoff) {
            if (!*next) {
                *next = j->handoff;
                json_t *o = json_pack("{s:s}", "assistant", (*next)->name);
                char *s = sbx_json_dumps(o, SBX_JSON_COMPACT);
                job_output(j, sbx_json_str(s), 0);
                free(s);
                json_decref(o);
            } else {
                job_output(j, sbx_json_str("Multiple handoffs detected, ignoring this one."), 1);
            }
        } else if (!j->tool) {
            char *msg = sbx_xasprintf("tool '%s' not found", j->name ? j->name : "");
            job_error(j, "", msg);
            free(msg);
        }
    }
    return 0;
}

/* Every answered call's output into the conversation, its span ended, its event emitted.
 * Returns 1 when a tool ran (and was not rejected). */
static int record_outputs(struct run *r, struct job *jobs, size_t njobs)
{
    int ran_tools = 0;
    for (size_t k = 0; k < njobs; k++) {
        struct job *j = &jobs[k];
        if (!j->now)
            continue;
        ran_tools |= j->tool && !j->rejected;
        sbx_json_append(r->items, json_incref(j->output));
        drop_open_call(r, j->call_id);
        if (j->span) {
            sbx_span_set_bool(j->span, "sbx.tool.failed", j->failed);
            if (j->text)
                sbx_span_set_content(j->span, "sbx.tool.output", j->text, strlen(j->text));
            if (j->failed)
                sbx_span_set_status(j->span, 0, "the tool reported an error");
            sbx_span_end(j->span);
            j->span = NULL;
        }
        struct sbx_event ev = {.type = SBX_EVENT_TOOL_OUTPUT,
                               .item = j->output,
                               .tool = j->name,
                               .text = j->text,
                               .duration_ns = j->duration_ns,
                               .failed = j->failed};
        emit(r, &ev);
    }
    return ran_tools;
}

static int hand_off(struct run *r, struct sbx_agent *next, struct sbx_error *err)
{
    json_t *payload = json_pack("{s:s, s:s}", "from", r->agent->name, "to", next->name);
    struct sbx_event hev = {.type = SBX_EVENT_HANDOFF, .text = next->name};
    emit(r, &hev);
    struct sbx_span *hs = sbx_span_start(r->turn_span, "handoff", SBX_SPAN_INTERNAL);
    sbx_span_set_str(hs, "sbx.handoff.from", r->agent->name);
    sbx_span_set_str(hs, "sbx.handoff.to", next->name);
    sbx_span_end(hs);
    r->agent = next;
    r->next_agent_pending = 1;
    struct sbx_event aev = {.type = SBX_EVENT_AGENT_START};
    emit(r, &aev);
    /* The agent receiving control hears of it, as the reference SDK's agent hooks do. */
    int rc = sbx__hook_fire(r, next, "handoff", NULL, payload, NULL, err);
    json_decref(payload);
    json_t *none = json_object();
    if (rc == 0)
        rc = sbx__hook_fire(r, next, "agent_start", NULL, none, NULL, err);
    json_decref(none);
    return rc;
}

/* After tools ran: 1 with the final output when the agent's tool-use behaviour stops at one
 * of them, else 0 to go on (unless the run was cancelled meanwhile). */
static int after_tools(struct run *r, const struct job *jobs, size_t njobs,
                       struct sbx_run_result **out, struct sbx_error *err)
{
    const struct sbx_agent *a = r->agent;
    for (size_t k = 0; k < njobs; k++) {
        const struct job *j = &jobs[k];
        if (!j->tool || j->rejected)
            continue;
        if (a->tool_use == SBX_TOOL_USE_STOP_ON_FIRST ||
            (a->tool_use == SBX_TOOL_USE_STOP_AT_NAMES && j->name &&
             sbx_strv_find(&a->stop_at, j->name) >= 0)) {
            int rc = finish(r, j->text, NULL, out, err);
            return rc < 0 ? rc : 1;
        }
    }
    return cancelled(r, "after running tools", err);
}

/* A response without calls: 1 with its text as the final output (parsed against the agent's
 * output schema), an error for a refusal, 0 when there is nothing to finish with. */
static int final_text(struct run *r, const char *last_text, const char *refusal,
                      struct sbx_run_result **out, struct sbx_error *err)
{
    if ((!last_text || !last_text[0]) && refusal)
        return sbx_error_set(err, SBX_E_API, 0, "the model refused: %s", refusal);
    if (r->agent->output_schema) {
        if (!last_text || !last_text[0])
            return 0;
        json_t *v = NULL;
        int rc = structured_final(r, last_text, &v, err);
        if (rc < 0)
            return rc;
        char *s = sbx_json_dumps(v, SBX_JSON_COMPACT);
        rc = finish(r, s, v, out, err);
        free(s);
        return rc < 0 ? rc : 1;
    }
    if (last_text) {
        int rc = finish(r, last_text, NULL, out, err);
        return rc < 0 ? rc : 1;
    }
    return 0;
}

/* Run a response's calls (or a resumed state's open ones): returns 1 when the run has a final
 * output in *out, 2 when it waits for approvals, 0 to go on, or an error. */
static int settle(struct run *r, struct job *jobs, size_t njobs, const char *last_text,
                  const char *refusal, struct sbx_run_result **out, struct sbx_error *err)
{
    struct sbx_agent *next = NULL;
    int waiting = plan_jobs(r, jobs, njobs, err);
    if (waiting < 0)
        return waiting;
    /* Run the tools; handoffs and unknown names are answered here. */
    run_jobs(r, jobs, njobs);
    int rc = answer_jobs(r, jobs, njobs, &next, err);
    if (rc < 0)
        return rc;
    int ran_tools = record_outputs(r, jobs, njobs);
    if (ran_tools)
        mark_used(r, r->agent);
    if ((rc = tool_end_hooks(r, jobs, njobs, err)) < 0)
        return rc;
    if (waiting) {
        interrupt(r, jobs, njobs);
        return 2;
    }
    json_decref(r->pending);
    r->pending = json_array();
    if (next)
        return hand_off(r, next, err);
    if (ran_tools)
        return after_tools(r, jobs, njobs, out, err);
    if (njobs) /* only unknown or rejected tools were called: the model reads the outputs */
        return 0;
    return final_text(r, last_text, refusal, out, err);
}

static void add_job(struct run *r, struct job *jobs, size_t *n, const json_t *item,
                    const char *type)
{
    struct job *j = &jobs[(*n)++];
    j->run = r;
    j->agent = r->agent;
    j->item = item;
    j->type = type;
    /* A model may send a call id that is not a string: it is then "" everywhere. */
    j->call_id = call_id_of(item);
    if (!j->call_id)
        j->call_id = "";
    j->name = json_string_value(json_object_get(item, "name"));
    j->turn = r->turn;
    if (streq(type, "function_call"))
        j->handoff = find_handoff(r->agent, j->name);
    if (!j->handoff)
        j->tool = find_tool(r, type, call_key_of(item));
    /* An item tool is found by the call's type alone: it is named by the tool, never by a
     * "name" the call carries (approval rules match on this name). */
    if (j->tool && (j->tool->kind == SBX__TOOL_ITEM || !j->name))
        j->name = j->tool->name;
    if (j->handoff)
        return;
    char *span_name = sbx_xasprintf("execute_tool %s", j->name ? j->name : "");
    j->span = sbx_span_start(r->turn_span ? r->turn_span : r->agent_span, span_name,
                             SBX_SPAN_INTERNAL);
    free(span_name);
    sbx_span_set_str(j->span, "gen_ai.operation.name", "execute_tool");
    sbx_span_set_str(j->span, "gen_ai.tool.type", "function");
    sbx_span_set_str(j->span, "gen_ai.tool.name", j->name ? j->name : "");
    sbx_span_set_str(j->span, "gen_ai.tool.call.id", j->call_id);
    const json_t *args = json_object_get(item, "arguments");
    if (!json_is_string(args))
        args = json_object_get(item, "input");
    if (json_is_string(args))
        sbx_span_set_content(j->span, "sbx.tool.arguments", json_string_value(args),
                             json_string_length(args));
    else
        content_json(j->span, "sbx.tool.arguments", item);
}

static void free_jobs(struct job *jobs, size_t njobs)
{
    for (size_t k = 0; k < njobs; k++) {
        /* Calls that did not run (held for approval, or the turn failed first). */
        sbx_span_end(jobs[k].span);
        json_decref(jobs[k].output);
        json_decref(jobs[k].args);
        free(jobs[k].text);
        free(jobs[k].reject_message);
        json_decref(jobs[k].guard_events);
    }
    free(jobs);
}

static void drop_mcp_tools(struct run *r)
{
    for (size_t i = 0; i < r->nmcp_tools; i++)
        sbx_tool_unref(r->mcp_tools[i]);
    free(r->mcp_tools);
    r->mcp_tools = NULL;
    r->nmcp_tools = 0;
}

/* The run stops using its MCP servers (the last user closes each). */
static void leave_mcp(struct run *r)
{
    drop_mcp_tools(r);
    for (size_t i = 0; i < r->nmcp_used; i++)
        sbx__mcp_server_leave(r->mcp_used[i]);
    free(r->mcp_used);
    r->mcp_used = NULL;
    r->nmcp_used = 0;
}

/* A tool name the turn already has (the agent's, the turn hook's, or an earlier server's). */
static const char *name_clash(const struct run *r, const struct sbx_agent *a,
                              const struct sbx_turn_prep *prep, const char *name)
{
    for (size_t i = 0; i < a->ntools; i++)
        if (streq(a->tools[i]->name, name))
            return "the agent's own tools";
    for (size_t i = 0; i < prep->ntools; i++)
        if (streq(prep->tools[i]->name, name))
            return "the sandbox's tools";
    for (size_t i = 0; i < r->nmcp_tools; i++)
        if (streq(r->mcp_tools[i]->name, name))
            return "another MCP server";
    return NULL;
}

/* The tools of the agent's MCP servers for this turn, after the turn hook (which gives the
 * sandbox a server in it starts in). */
static int mcp_turn_tools(struct run *r, struct sbx_agent *a, const struct sbx_turn_prep *prep,
                          struct sbx_error *err)
{
    struct sbx__mcp_turn turn = {
            .session = prep->session,
            .run_as = json_string_value(json_object_get(a->sandbox_spec, "run_as")),
            .cancel = r->opt->cancel,
            .span = r->turn_span ? r->turn_span : r->agent_span,
    };
    drop_mcp_tools(r);
    for (size_t i = 0; i < a->nmcp; i++) {
        struct sbx__mcp_server *s = a->mcp[i];
        struct sbx_tool **tools = NULL;
        size_t n = 0, k;
        for (k = 0; k < r->nmcp_used && r->mcp_used[k] != s; k++)
            ;
        if (k == r->nmcp_used) {
            sbx__mcp_server_join(s);
            r->mcp_used = sbx_xrealloc(r->mcp_used, (r->nmcp_used + 1) * sizeof(*r->mcp_used));
            r->mcp_used[r->nmcp_used++] = s;
        }
        int rc = sbx__mcp_server_tools(s, &turn, &tools, &n, err);
        if (rc < 0)
            return rc;
        r->mcp_tools = sbx_xrealloc(r->mcp_tools, (r->nmcp_tools + n + 1) * sizeof(*tools));
        for (k = 0; k < n; k++) {
            const char *clash = name_clash(r, a, prep, tools[k]->name);
            if (clash && rc == 0)
                rc = sbx_error_set(err, SBX_E_EXISTS, 0,
                                   "tool '%s' of MCP server '%s' has the name of one of %s "
                                   "(set mcp_config: {include_server_in_tool_names: true})",
                                   tools[k]->name, sbx__mcp_server_name(s), clash);
            r->mcp_tools[r->nmcp_tools++] = tools[k];
        }
        free(tools);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int prepare_tools(struct run *r, struct sbx_turn_prep *prep, struct sbx_error *err)
{
    struct sbx_agent *a = r->agent;
    int rc;
    if (r->opt->turn_hook &&
        (rc = r->opt->turn_hook(r->opt->turn_hook_data, a, r->items, prep, err)) < 0) {
        json_decref(prep->input);
        prep->input = NULL;
        sbx_error_prefix(err, "agent '%s' turn %d", a->name, r->turn);
        return rc;
    }
    if ((rc = mcp_turn_tools(r, a, prep, err)) < 0) {
        json_decref(prep->input);
        prep->input = NULL;
        sbx_error_prefix(err, "agent '%s' turn %d", a->name, r->turn);
        return rc;
    }
    set_turn_tools(r, a, prep);
    r->session = prep->session;
    return 0;
}

/* Ask the model for the turn's response: the request (the agent's, with what the turn hook
 * prepared; only the new items when the server keeps the conversation), its model_call span,
 * then the MODEL_DONE event, the usage and the response id for the next turn. */
static int call_model(struct run *r, struct sbx_turn_prep *prep, json_t **response,
                      struct sbx_error *err)
{
    struct sbx_agent *a = r->agent;
    const json_t *own = prep->settings ? prep->settings : a->settings;
    json_t *settings = request_settings(own);
    json_t *tools = build_tools(r, a), *choice = tool_choice_of(r, a, own), *fmt = NULL,
           *input = NULL;
    if (a->output_schema)
        fmt = json_pack("{s:s, s:s, s:O, s:b}", "type", "json_schema", "name", "final_output",
                        "schema", a->output_schema, "strict", 1);
    int delta_mode = r->opt->use_previous_response_id && r->prev_id;
    if (delta_mode) {
        json_decref(prep->input);
        prep->input = NULL;
        input = json_array();
        for (size_t i = r->sent_upto; i < json_array_size(r->items); i++)
            sbx_json_append(input, json_incref(json_array_get(r->items, i)));
    }
    struct sbx_model_request req = {
            .model = r->opt->model_name ? r->opt->model_name : a->model,
            .instructions = prep->instructions ? prep->instructions : a->instructions,
            .input = delta_mode    ? input
                     : prep->input ? prep->input
                                   : r->items,
            .tools = tools,
            .tool_choice = choice,
            .text_format = fmt,
            .settings = settings,
            .previous_response_id = delta_mode ? r->prev_id : NULL,
            .cache = r->cache,
            .prompt = prep->prompt ? prep->prompt : a->prompt,
    };
    const char *model_name = req.model ? req.model : sbx_model_name(r->opt->model);
    char *span_name = sbx_xasprintf("chat %s", model_name ? model_name : "");
    struct sbx_span *ms = sbx_span_start(r->turn_span, span_name, SBX_SPAN_CLIENT);
    free(span_name);
    sbx_span_set_str(ms, "gen_ai.operation.name", "chat");
    sbx_span_set_str(ms, "gen_ai.provider.name", "openai");
    sbx_span_set_str(ms, "gen_ai.request.model", model_name ? model_name : "");
    sbx_span_set_str(ms, "openai.api.type",
                     strcmp(sbx_model_provider(r->opt->model), "chat") == 0 ? "chat_completions"
                                                                            : "responses");
    agent_span_tools(r);
    if (ms && sbx_trace_content(sbx_span_tracer(ms))) {
        if (req.instructions)
            sbx_span_set_content(ms, "sbx.model.instructions", req.instructions,
                                 strlen(req.instructions));
        content_json(ms, "sbx.model.input", req.input);
    }
    sbx_trace_set_current(ms);
    int64_t t0 = sbx_time_mono_ns();
    int rc = sbx_model_respond(r->opt->model, &req, r->opt->stream ? on_stream : NULL, r, response,
                               err);
    sbx_trace_set_current(r->turn_span);
    if (rc < 0)
        sbx_span_set_status(ms, 0, err->msg);
    else {
        model_span_usage(ms, *response);
        span_usage(r->turn_span, *response);
    }
    if (rc == 0)
        content_json(ms, "sbx.model.output", json_object_get(*response, "output"));
    sbx_span_end(ms);
    json_decref(tools);
    json_decref(choice);
    json_decref(settings);
    json_decref(fmt);
    json_decref(input);
    if (rc < 0) {
        sbx_error_prefix(err, "agent '%s' turn %d", a->name, r->turn);
        return rc;
    }
    struct sbx_event mev = {.type = SBX_EVENT_MODEL_DONE,
                            .item = *response,
                            .duration_ns = sbx_time_mono_ns() - t0};
    emit(r, &mev);
    add_usage(r, *response);
    const char *rid = json_string_value(json_object_get(*response, "id"));
    free(r->prev_id);
    r->prev_id = rid ? sbx_xstrdup(rid) : NULL;
    return 0;
}

/* Record the response's output items and collect its calls, in order (none from a response
 * that is incomplete); the calls become the run's open calls. Returns the jobs (*njobs of
 * them; free_jobs), the last message's text in *last_text (caller frees) and its refusal. */
static struct job *collect_calls(struct run *r, const json_t *response, int incomplete,
                                 size_t *njobs, char **last_text, const char **refusal)
{
    json_t *output = json_object_get(response, "output");
    size_t i;
    json_t *item;
    struct job *jobs = sbx_xcalloc(json_array_size(output) + 1, sizeof(*jobs));
    json_array_foreach(output, i, item)
    {
        if (!json_is_object(item))
            continue;
        sbx_json_append(r->items, json_incref(item));
        const char *type = json_string_value(json_object_get(item, "type"));
        if (streq(type, "message")) {
            free(*last_text);
            *last_text = message_text(item);
            *refusal = refusal_of(item);
            struct sbx_event ev = {.type = SBX_EVENT_MESSAGE, .item = item, .text = *last_text};
            emit(r, &ev);
            continue;
        }
        if (incomplete || !type || streq(type, "reasoning") || !call_id_of(item))
            continue;
        if (!find_tool(r, type, call_key_of(item)) && !streq(type, "function_call") &&
            !streq(type, "custom_tool_call")) {
            /* A call kind nobody here handles, e.g. a hosted tool the server ran itself. */
            sbx_log(SBX_LOG_WARN,
                    "agent '%s': no tool handles '%s' items; leaving it to the server",
                    r->agent->name, type);
            continue;
        }
        add_job(r, jobs, njobs, item, type);
        struct sbx_event ev = {
                .type = SBX_EVENT_TOOL_CALL, .item = item, .tool = jobs[*njobs - 1].name};
        emit(r, &ev);
    }
    r->sent_upto = json_array_size(r->items);
    r->done_turn = r->turn;
    json_decref(r->open_calls);
    r->open_calls = json_array();
    for (size_t k = 0; k < *njobs; k++)
        sbx_json_append(r->open_calls, sbx_json_str(jobs[k].call_id));
    return jobs;
}

/* The model call, with the input guardrails on the run's first turn: those that do not run in
 * parallel first, the others alongside the call. A guardrail that trips wins over whatever the
 * call did; its response is dropped, so none of its tools runs. */
static int guarded_call(struct run *r, struct sbx_turn_prep *prep, json_t **response,
                        struct sbx_error *err)
{
    struct sbx__guard_pending *gp = NULL;
    int rc;
    if (r->turn == 1 && !r->input_guarded && (rc = sbx__guard_input_begin(r, &gp, err)) < 0)
        return rc;
    rc = call_model(r, prep, response, err);
    if (!gp)
        return rc;
    struct sbx_error gerr = SBX_ERROR_INIT;
    int grc = sbx__guard_input_end(r, gp, &gerr);
    if (grc < 0 && (rc == 0 || grc == -SBX_E_TRIPWIRE)) {
        json_decref(*response);
        *response = NULL;
        sbx_error_copy(err, &gerr);
        rc = grc;
    }
    return rc;
}

/* One turn: returns 1 when the run has a final output in *out, 2 when it waits for approvals,
 * 0 to go on, or an error. */
static int turn(struct run *r, struct sbx_run_result **out, struct sbx_error *err)
{
    struct sbx_agent *a = r->agent;
    json_t *response = NULL;
    struct sbx_turn_prep prep = {0};
    struct job *jobs = NULL;
    size_t njobs = 0;
    char *last_text = NULL;
    const char *refusal = NULL;
    int rc;

    r->turn++;
    if (r->max_turns > 0 && r->turn > r->max_turns) {
        r->turn--;
        return sbx_error_set(err, SBX_E_MAXTURNS, 0, "max turns (%d) exceeded", r->max_turns);
    }
    if ((rc = cancelled(r, "before calling the model", err)) < 0)
        return rc;
    struct sbx_event tev = {.type = SBX_EVENT_TURN_START};
    emit(r, &tev);
    r->turn_span = sbx_span_start(r->agent_span, "turn", SBX_SPAN_INTERNAL);
    sbx_span_set_int(r->turn_span, "sbx.turn", r->turn);
    sbx_span_set_str(r->turn_span, "gen_ai.agent.name", r->agent->name);
    struct sbx_span *prev_span = sbx_trace_set_current(r->turn_span);

    if ((rc = prepare_tools(r, &prep, err)) < 0 ||
        (rc = guarded_call(r, &prep, &response, err)) < 0)
        goto out;

    /* A response cut short (output limit, content filter) is not an answer: its text is
     * partial and its calls may be truncated. Its items are recorded and its messages reported,
     * so the partial text stays visible, but nothing runs and the run fails; sending the same
     * request again would most likely be cut at the same place. */
    int incomplete = streq(json_string_value(json_object_get(response, "status")), "incomplete");
    jobs = collect_calls(r, response, incomplete, &njobs, &last_text, &refusal);
    if (incomplete) {
        const char *why = json_string_value(
                json_object_get(json_object_get(response, "incomplete_details"), "reason"));
        rc = sbx_error_set(err, SBX_E_API, 0, "model response is incomplete: %.200s",
                           why && why[0] ? why : "no reason given");
        sbx_error_prefix(err, "agent '%s' turn %d", a->name, r->turn);
        goto out;
    }
    if (njobs && (rc = checkpoint(r, err)) < 0)
        goto out;
    rc = settle(r, jobs, njobs, last_text, refusal, out, err);
out:
    free_jobs(jobs, njobs);
    free(last_text);
    json_decref(prep.input);
    json_decref(response);
    if (rc < 0)
        sbx_span_set_status(r->turn_span, 0, err->msg);
    sbx_span_end(r->turn_span);
    r->turn_span = NULL;
    sbx_trace_set_current(prev_span);
    return rc;
}

/* The call item of an open call: the last item with that call id that is not an output. */
static const json_t *find_call(const json_t *items, const char *id)
{
    for (size_t i = json_array_size(items); i-- > 0;) {
        const json_t *it = json_array_get(items, i);
        const char *type = json_string_value(json_object_get(it, "type"));
        size_t tl = type ? strlen(type) : 0;
        if (streq(call_id_of(it), id) && !(tl >= 7 && strcmp(type + tl - 7, "_output") == 0))
            return it;
    }
    return NULL;
}

/* Continue a saved run's open calls, without a model call. */
static int resume_open_calls(struct run *r, struct sbx_run_result **out, struct sbx_error *err)
{
    struct sbx_turn_prep prep = {0};
    size_t n = json_array_size(r->open_calls), njobs = 0, i;
    struct job *jobs = sbx_xcalloc(n + 1, sizeof(*jobs));
    int again = streq(r->resumed_status, "running") || streq(r->resumed_status, "failed");
    json_t *v;
    int rc = prepare_tools(r, &prep, err);
    if (rc < 0)
        goto out;
    json_array_foreach(r->open_calls, i, v)
    {
        const json_t *item = find_call(r->items, json_string_value(v));
        if (!item) {
            rc = sbx_error_set(err, SBX_E_INVAL, 0,
                               "run state: open call '%s' is not among its items",
                               json_string_value(v));
            goto out;
        }
        add_job(r, jobs, &njobs, item, json_string_value(json_object_get(item, "type")));
        if (again) {
            char *text = sbx_xasprintf(
                    "tool call %s (%s) was running when the run stopped; running it again",
                    json_string_value(v), jobs[njobs - 1].name ? jobs[njobs - 1].name : "?");
            struct sbx_event ev = {.type = SBX_EVENT_NOTICE, .text = text};
            emit(r, &ev);
            free(text);
        }
        /* This process has not reported the call yet: its output needs it (the CLI's tool
         * line shows the arguments, a --json reader pairs the output with its call). */
        struct sbx_event cev = {
                .type = SBX_EVENT_TOOL_CALL, .item = item, .tool = jobs[njobs - 1].name};
        emit(r, &cev);
    }
    rc = settle(r, jobs, njobs, NULL, NULL, out, err);
out:
    r->resumed_status = NULL;
    json_decref(prep.input);
    free_jobs(jobs, njobs);
    return rc;
}

/* The conversation's history goes before the run's input items. */
static int load_conversation(struct run *r, struct sbx_error *err)
{
    if (!r->opt->conversation_store || !r->opt->conversation)
        return 0;
    json_t *hist = NULL;
    int rc = sbx_conversation_get(r->opt->conversation_store, r->opt->conversation, 0, &hist, err);
    if (rc < 0)
        return rc;
    r->saved_upto = json_array_size(hist);
    json_array_extend(hist, r->items);
    json_decref(r->items);
    r->items = hist;
    return 0;
}

static int save_conversation(struct run *r, struct sbx_error *err)
{
    if (!r->opt->conversation_store || !r->opt->conversation)
        return 0;
    size_t n = json_array_size(r->items);
    if (r->saved_upto >= n)
        return 0;
    json_t *fresh = json_array();
    for (size_t i = r->saved_upto; i < n; i++)
        sbx_json_append(fresh, json_incref(json_array_get(r->items, i)));
    /* What is stored outlives the run: no secret goes into it. */
    json_t *clean = sbx_scrub_json(r->opt->secrets, fresh, NULL);
    json_decref(fresh);
    int rc = sbx_conversation_add(r->opt->conversation_store, r->opt->conversation, clean, err);
    json_decref(clean);
    if (rc == 0)
        r->saved_upto = n;
    return rc;
}

/* The final checkpoint (c): the state of a run that ended (rc < 0: failed), kept in res. */
static int end_state(struct run *r, int rc, struct sbx_run_result *res, struct sbx_error *err)
{
    const struct sbx_run_options *opt = r->opt;
    json_t *st = NULL;
    if (rc < 0) {
        /* The run failed already: its state is saved as well as it can be, errors ignored. */
        struct sbx_error e2 = SBX_ERROR_INIT;
        const char *why = err ? err->msg : "the run failed";
        if (sbx__run_state_build(r, "failed", why, NULL, 1, 1, &st, &e2) < 0)
            sbx__run_state_build(r, "failed", why, NULL, 1, 0, &st, &e2);
        if (opt->checkpoint)
            opt->checkpoint(opt->checkpoint_data, st, &e2);
        json_decref(st);
        return rc;
    }
    const char *status = res->interrupted ? "interrupted" : "completed";
    int src = sbx__run_state_build(r, status, NULL, res->interrupted ? NULL : res->text,
                                   res->interrupted, 1, &st, err);
    if (src == 0 && opt->checkpoint)
        src = opt->checkpoint(opt->checkpoint_data, st, err);
    if (src < 0) {
        json_decref(st);
        sbx_error_prefix(err, "final checkpoint");
        return src;
    }
    res->state = st;
    return 0;
}

static int run_input(struct run *r, const json_t *input, struct sbx_error *err)
{
    if (json_is_string(input)) {
        sbx_json_append(r->items, json_pack("{s:s, s:s, s:O}", "type", "message", "role", "user",
                                            "content", input));
    } else if (json_is_array(input)) {
        size_t i;
        json_t *it;
        json_array_foreach(input, i, it)
        {
            if (!json_is_object(it))
                return sbx_error_set(err, SBX_E_INVAL, 0, "input item %zu must be an object", i);
            sbx_json_append(r->items, json_deep_copy(it));
        }
    } else {
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "run input must be a string or an array of items");
    }
    size_t own = json_array_size(r->items);
    int rc = load_conversation(r, err);
    r->input_items = json_array_size(r->items);
    r->input_first = r->input_items - own;
    return rc;
}

/* A run set up from its input, or from the state it resumes, with the caller's decisions. */
static int run_setup(struct run *r, const json_t *input, struct sbx_error *err)
{
    const struct sbx_run_options *opt = r->opt;
    int rc;
    r->max_turns = opt->max_turns == 0 ? SBX_RUN_DEFAULT_MAX_TURNS : opt->max_turns;
    r->items = json_array();
    r->cache = sbx_model_cache_new();
    r->usage = json_pack("{s:i, s:i, s:i, s:i}", "input_tokens", 0, "output_tokens", 0,
                         "total_tokens", 0, "requests", 0);
    r->open_calls = json_array();
    r->pending = json_array();
    r->given = json_array();
    r->always = json_array();
    r->decision_log = json_array();
    r->agent_files = opt->agent_files;
    r->meta = opt->meta;
    const json_t *state = opt->resume && !r->nested ? opt->resume : NULL;
    const char *saved_id = json_string_value(json_object_get(state, "run_id"));
    if (opt->run_id || saved_id) {
        r->run_id = sbx_xstrdup(opt->run_id ? opt->run_id : saved_id);
    } else {
        r->run_id = sbx_xmalloc(33);
        if (sbx_random_hex(r->run_id, 16, err) < 0)
            return -err->code;
    }
    if (state) {
        if (input)
            return sbx_error_set(err, SBX_E_INVAL, 0, "a resumed run takes no new input");
        if ((rc = sbx__run_state_restore(r, err)) < 0)
            return rc;
    } else if ((rc = run_input(r, input, err)) < 0) {
        return rc;
    } else if (opt->decisions && !r->nested) {
        return sbx_error_set(err, SBX_E_INVAL, 0, "decisions need a run state to resume");
    }
    return r->nested ? 0 : sbx__approval_restore(r, state, err);
}

/* Decisions given for the resumed state's pending calls answer those calls only: the ones no
 * call used (its tool, type or arguments differ from what was pending) are said and dropped. */
static void drop_unused_decisions(struct run *r)
{
    size_t i;
    json_t *d;
    json_array_foreach(r->given, i, d)
    {
        char *text = sbx_xasprintf(
                "the decision for call %s (%s) was not used: no call of turn %lld matches the "
                "pending one it answered",
                json_string_value(json_object_get(d, "call_id")),
                json_string_value(json_object_get(d, "tool")),
                (long long)json_integer_value(json_object_get(d, "turn")));
        struct sbx_event ev = {.type = SBX_EVENT_NOTICE, .text = text};
        emit(r, &ev);
        free(text);
    }
    json_array_clear(r->given);
}

/* run_start (the start agent's hooks) and agent_start (the current agent's) as a run begins,
 * a resumed one too. */
static int start_hooks(struct run *r, struct sbx_error *err)
{
    json_t *input = json_array();
    for (size_t i = r->input_first; i < r->input_items && !r->opt->resume; i++)
        sbx_json_append(input, json_incref(json_array_get(r->items, i)));
    json_t *p = json_pack("{s:o, s:b}", "input", input, "resumed", r->opt->resume && !r->nested);
    int rc = sbx__hook_fire(r, r->start, "run_start", NULL, p, NULL, err);
    json_decref(p);
    p = json_object();
    if (rc == 0)
        rc = sbx__hook_fire(r, r->agent, "agent_start", NULL, p, NULL, err);
    json_decref(p);
    return rc;
}

/* run_end (the start agent's hooks) as the run ends: the run's status and its final output or
 * error. A hook that fails fails a run that did not fail already. */
static int end_hooks(struct run *r, int rc, const struct sbx_run_result *res, struct sbx_error *err)
{
    json_t *p = json_pack("{s:s}", "status",
                          rc < 0             ? "failed"
                          : res->interrupted ? "interrupted"
                                             : "completed");
    if (rc < 0)
        sbx_json_set(p, "error", sbx_json_str(err->msg));
    else if (!res->interrupted)
        sbx_json_set(p, "final_output", sbx_json_str(res->text));
    struct sbx_error e2 = SBX_ERROR_INIT;
    int hrc = sbx__hook_fire(r, r->start, "run_end", NULL, p, NULL, rc < 0 ? &e2 : err);
    json_decref(p);
    if (rc < 0 && hrc < 0)
        sbx_log(SBX_LOG_WARN, "%s", e2.msg);
    return rc < 0 ? rc : hrc;
}

static int run_internal(struct sbx_agent *agent, const json_t *input,
                        const struct sbx_run_options *opt, int nested, struct sbx_run_result **out,
                        struct sbx_error *err)
{
    int rc = 0, open_first = 0;
    struct sbx_run_result *res = NULL;
    struct run r = {.opt = opt, .start = agent, .agent = agent, .nested = nested};
    if (!opt || !opt->model)
        return sbx_error_set(err, SBX_E_INVAL, 0, "a run needs a model");
    if ((rc = run_setup(&r, input, err)) < 0)
        goto out;
    struct sbx_event aev = {.type = SBX_EVENT_AGENT_START};
    emit(&r, &aev);
    struct sbx_span *run_parent = sbx_trace_current();
    agent_span_begin(&r, run_parent);
    if (json_array_size(r.open_calls)) {
        open_first = 1;
    } else if (streq(r.resumed_status, "running") || streq(r.resumed_status, "failed")) {
        char *text = sbx_xasprintf("turn %d was in flight when the run stopped; repeating it",
                                   r.turn + 1);
        struct sbx_event ev = {.type = SBX_EVENT_NOTICE, .text = text};
        emit(&r, &ev);
        free(text);
        r.resumed_status = NULL;
    }
    rc = start_hooks(&r, err);
    while (rc == 0) {
        rc = open_first ? resume_open_calls(&r, &res, err) : turn(&r, &res, err);
        open_first = 0;
        drop_unused_decisions(&r);
        if (r.next_agent_pending) {
            r.next_agent_pending = 0;
            agent_span_end(&r, 0, NULL);
            agent_span_begin(&r, run_parent);
        }
        if (rc == 2) {
            res = make_result(&r, "", NULL);
            res->interrupted = 1;
            json_decref(res->interruptions);
            res->interruptions = json_deep_copy(r.pending);
            break;
        }
        int src = rc >= 0 ? save_conversation(&r, err) : 0;
        if (src == 0 && rc == 0)
            src = checkpoint(&r, err);
        if (src < 0)
            rc = src;
        if (rc != 0)
            break;
    }
    rc = end_hooks(&r, rc, res, err);
    if (rc < 0) {
        sbx_run_result_free(res);
        res = NULL;
    }
    if (!nested)
        rc = end_state(&r, rc, res, err);
    if (rc >= 0) {
        *out = res;
        res = NULL;
        rc = 0;
    }
out:
    sbx_run_result_free(res);
    agent_span_end(&r, rc, err);
    if (rc < 0)
        fail_run(&r, rc, err);
    json_decref(r.items);
    sbx_model_cache_free(r.cache);
    json_decref(r.usage);
    json_decref(r.open_calls);
    json_decref(r.pending);
    json_decref(r.given);
    json_decref(r.always);
    json_decref(r.decision_log);
    free(r.run_id);
    json_decref(r.sandbox);
    json_decref(r.tripwire);
    json_decref(r.ckpt);
    free(r.used_tools);
    free(r.prev_id);
    free(r.tv);
    leave_mcp(&r);
    return rc;
}

int sbx_run(struct sbx_agent *agent, const json_t *input, const struct sbx_run_options *opt,
            struct sbx_run_result **out, struct sbx_error *err)
{
    return run_internal(agent, input, opt, 0, out, err);
}

void sbx_run_result_free(struct sbx_run_result *r)
{
    if (!r)
        return;
    free(r->text);
    json_decref(r->json);
    json_decref(r->items);
    json_decref(r->usage);
    json_decref(r->interruptions);
    json_decref(r->state);
    free(r);
}

int sbx_run_result_interrupted(const struct sbx_run_result *r)
{
    return r->interrupted;
}

const json_t *sbx_run_result_interruptions(const struct sbx_run_result *r)
{
    return r->interruptions;
}

const json_t *sbx_run_result_state(const struct sbx_run_result *r)
{
    return r->state;
}

const char *sbx_run_result_text(const struct sbx_run_result *r)
{
    return r->text;
}

const json_t *sbx_run_result_json(const struct sbx_run_result *r)
{
    return r->json;
}

const json_t *sbx_run_result_items(const struct sbx_run_result *r)
{
    return r->items;
}

struct sbx_agent *sbx_run_result_last_agent(const struct sbx_run_result *r)
{
    return r->last;
}

const json_t *sbx_run_result_usage(const struct sbx_run_result *r)
{
    return r->usage;
}

int sbx_run_result_turns(const struct sbx_run_result *r)
{
    return r->turns;
}

/* Agents as tools. */

struct agent_tool {
    struct sbx_agent *agent;
    int max_turns;
};

int sbx__run_nested(struct sbx_agent *agent, const json_t *input, const struct sbx_run_options *opt,
                    int max_turns, struct sbx_run_result **out, struct sbx_error *err)
{
    struct sbx_run_options o = *opt;
    o.on_event = NULL;
    o.event_data = NULL;
    o.stream = 0;
    o.max_turns = max_turns;
    o.use_previous_response_id = 0;
    o.conversation_store = NULL;
    o.conversation = NULL;
    o.resume = NULL;
    o.decisions = NULL;
    o.checkpoint = NULL;
    o.state_hook = NULL;
    o.approve = NULL;
    o.ask = NULL;
    o.always = NULL;
    o.run_id = NULL;
    return run_internal(agent, input, &o, 1, out, err);
}

static int agent_tool_fn(const json_t *args, const struct sbx_tool_call *call,
                         struct sbx_tool_output *out, struct sbx_error *err)
{
    struct agent_tool *at = call->data;
    struct sbx_run_result *res = NULL;
    int rc = sbx__run_nested(at->agent, json_object_get(args, "input"), call->run, at->max_turns,
                             &res, err);
    if (rc < 0) {
        sbx_error_prefix(err, "agent '%s'", at->agent->name);
        return rc;
    }
    rc = sbx_buf_adds(&out->text, res->text, err);
    sbx_run_result_free(res);
    return rc;
}

int sbx_tool_new_agent(struct sbx_agent *agent, const char *name, const char *description,
                       int max_turns, struct sbx_tool **out, struct sbx_error *err)
{
    struct agent_tool *at = sbx_xcalloc(1, sizeof(*at));
    at->agent = agent;
    at->max_turns = max_turns;
    char *safe = name ? NULL : sbx__tool_safe_name(agent->name, 1);
    char *desc = description ? NULL
                             : sbx_xasprintf("Ask the %s agent; it answers with its final output.",
                                             agent->name);
    json_t *params = json_pack("{s:s, s:{s:{s:s, s:s}}}", "type", "object", "properties", "input",
                               "type", "string", "description", "What to ask or tell the agent.");
    struct sbx_function_tool spec = {
            .name = name ? name : safe,
            .description = description ? description : desc,
            .parameters = params,
            .strict = 1,
            .fn = agent_tool_fn,
            .data = at,
            .free_data = free,
    };
    int rc = sbx_tool_new_function(&spec, out, err);
    free(safe);
    free(desc);
    json_decref(params);
    return rc;
}

int sbx_agent_walk(struct sbx_agent *start,
                   int (*fn)(struct sbx_agent *a, void *data, struct sbx_error *err), void *data,
                   struct sbx_error *err)
{
    /* Breadth first over a visited list: graphs are small (agent files allow 64) but may
     * have cycles. */
    struct sbx_agent **seen = sbx_xcalloc(1, sizeof(*seen));
    size_t n = 0, cap = 1;
    int rc = 0;
    seen[n++] = start;
    for (size_t i = 0; i < n && rc == 0; i++) {
        struct sbx_agent *a = seen[i];
        if ((rc = fn(a, data, err)) < 0)
            break;
        for (size_t k = 0; k < a->nhandoffs + a->ntools; k++) {
            struct sbx_agent *next = NULL;
            if (k < a->nhandoffs)
                next = a->handoffs[k];
            else if (a->tools[k - a->nhandoffs]->fn == agent_tool_fn)
                next = ((struct agent_tool *)a->tools[k - a->nhandoffs]->data)->agent;
            size_t j = 0;
            while (next && j < n && seen[j] != next)
                j++;
            if (!next || j < n)
                continue;
            SBX_ALLOC_GROW(seen, n + 1, cap);
            seen[n++] = next;
        }
    }
    free(seen);
    return rc;
}

/* Events as JSON. */

static const char *const event_names[] = {
        [SBX_EVENT_AGENT_START] = "agent_start",
        [SBX_EVENT_TURN_START] = "turn_start",
        [SBX_EVENT_MODEL_STREAM] = "model_stream",
        [SBX_EVENT_TEXT_DELTA] = "text_delta",
        [SBX_EVENT_MODEL_DONE] = "model_done",
        [SBX_EVENT_MESSAGE] = "message",
        [SBX_EVENT_TOOL_CALL] = "tool_call",
        [SBX_EVENT_TOOL_OUTPUT] = "tool_output",
        [SBX_EVENT_HANDOFF] = "handoff",
        [SBX_EVENT_FINAL] = "final",
        [SBX_EVENT_ERROR] = "error",
        [SBX_EVENT_INTERRUPTION] = "interruption",
        [SBX_EVENT_NOTICE] = "notice",
        [SBX_EVENT_APPROVAL] = "approval",
        [SBX_EVENT_TOOL_START] = "tool_start",
        [SBX_EVENT_SANDBOX] = "sandbox",
        [SBX_EVENT_GUARDRAIL] = "guardrail",
};

const char *sbx_event_name(enum sbx_event_type type)
{
    if ((size_t)type >= SBX_ARRAY_LEN(event_names) || !event_names[type])
        return "unknown";
    return event_names[type];
}

json_t *sbx_event_to_json(const struct sbx_event *ev)
{
    json_t *o = json_pack("{s:s, s:i}", "type", sbx_event_name(ev->type), "turn", ev->turn);
    if (ev->agent)
        sbx_json_set(o, "agent", sbx_json_str(ev->agent));
    switch (ev->type) {
    case SBX_EVENT_MODEL_STREAM:
        sbx_json_set(o, "event", json_deep_copy(ev->item));
        break;
    case SBX_EVENT_TEXT_DELTA:
        sbx_json_set(o, "delta", sbx_json_str(ev->text ? ev->text : ""));
        break;
    case SBX_EVENT_MODEL_DONE:
        sbx_json_set(o, "response_id", json_deep_copy(json_object_get(ev->item, "id")));
        if (json_object_get(ev->item, "usage"))
            sbx_json_set(o, "usage", json_deep_copy(json_object_get(ev->item, "usage")));
        break;
    case SBX_EVENT_MESSAGE:
        sbx_json_set(o, "text", sbx_json_str(ev->text ? ev->text : ""));
        break;
    case SBX_EVENT_TOOL_CALL:
    case SBX_EVENT_TOOL_START:
    case SBX_EVENT_TOOL_OUTPUT:
        if (ev->tool)
            sbx_json_set(o, "tool", sbx_json_str(ev->tool));
        sbx_json_set(o, "item", json_deep_copy(ev->item));
        if (ev->type == SBX_EVENT_TOOL_OUTPUT)
            sbx_json_set(o, "failed", json_boolean(ev->failed));
        break;
    case SBX_EVENT_HANDOFF:
        sbx_json_set(o, "to", sbx_json_str(ev->text ? ev->text : ""));
        break;
    case SBX_EVENT_FINAL:
        sbx_json_set(o, "output", sbx_json_str(ev->text ? ev->text : ""));
        if (ev->item)
            sbx_json_set(o, "json", json_deep_copy(ev->item));
        break;
    case SBX_EVENT_ERROR:
        if (ev->error) {
            sbx_json_set(o, "code", sbx_json_str(sbx_strerror(ev->error->code)));
            sbx_json_set(o, "message", sbx_json_str(ev->error->msg));
        }
        break;
    case SBX_EVENT_INTERRUPTION:
        sbx_json_set(o, "pending", ev->item ? json_deep_copy(ev->item) : json_array());
        break;
    case SBX_EVENT_NOTICE:
        sbx_json_set(o, "text", sbx_json_str(ev->text ? ev->text : ""));
        break;
    case SBX_EVENT_APPROVAL:
        sbx_json_set(o, "decision", ev->item ? json_deep_copy(ev->item) : json_object());
        break;
    case SBX_EVENT_SANDBOX:
    case SBX_EVENT_GUARDRAIL:
        if (ev->item)
            json_object_update(o, (json_t *)ev->item);
        break;
    case SBX_EVENT_AGENT_START:
    case SBX_EVENT_TURN_START:
        break;
    }
    return o;
}
