/* The runner: the harness loop of one agent run. See docs/internals/runner.md. */
#include <pthread.h>
#include <string.h>

#include "agent/agent-internal.h"
#include "agent/schema.h"
#include "sbx/json.h"
#include "sbx/log.h"
#include "sbx/runner.h"
#include "sbx/time.h"

#define ARGS_MAX ((size_t)16 << 20)

struct sbx_run_result {
    char *text;
    json_t *json;
    json_t *items;
    struct sbx_agent *last;
    json_t *usage;
    int turns;
};

struct run {
    const struct sbx_run_options *opt;
    struct sbx_agent *agent;
    json_t *items; /* the conversation */
    json_t *usage;
    int turn;
    int max_turns;
    struct sbx_agent **used_tools; /* agents that have used a tool (tool_choice reset) */
    size_t nused;
    char *prev_id;
    size_t sent_upto;
    /* This turn's tools: the agent's, then a turn hook's offered ones, then its hidden ones. */
    struct sbx_tool **tv;
    size_t ntv, noffered;
    size_t saved_upto; /* items before this are in the conversation store */
};

struct job {
    struct run *run;
    struct sbx_agent *agent;
    const json_t *item;
    const char *type;
    const char *name;
    const char *call_id;
    struct sbx_tool *tool; /* NULL: handoff or unknown */
    struct sbx_agent *handoff;
    json_t *output; /* output item */
    char *text;     /* output as text, for tool-use behaviours and events */
    int failed;
    int fatal;
    struct sbx_error err;
    int64_t duration_ns;
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
    size_t n = a->ntools + prep->ntools + prep->nhidden, k = 0;
    r->tv = sbx_xrealloc(r->tv, (n ? n : 1) * sizeof(*r->tv));
    for (size_t i = 0; i < a->ntools; i++)
        r->tv[k++] = a->tools[i];
    for (size_t i = 0; i < prep->ntools; i++)
        r->tv[k++] = prep->tools[i];
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
        if (t->kind == SBX__TOOL_ITEM || streq(t->name, name))
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

static json_t *tool_choice_of(struct run *r, const struct sbx_agent *a)
{
    if (!a->tool_choice)
        return NULL;
    if (a->reset_tool_choice)
        for (size_t i = 0; i < r->nused; i++)
            if (r->used_tools[i] == a)
                return NULL;
    if (streq(a->tool_choice, "auto") || streq(a->tool_choice, "required") ||
        streq(a->tool_choice, "none"))
        return sbx_json_str(a->tool_choice);
    for (size_t i = 0; i < r->noffered; i++)
        if (r->tv[i]->kind == SBX__TOOL_CUSTOM && streq(r->tv[i]->name, a->tool_choice))
            return json_pack("{s:s, s:s}", "type", "custom", "name", a->tool_choice);
    return json_pack("{s:s, s:s}", "type", "function", "name", a->tool_choice);
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
    };
    int64_t start = sbx_time_mono_ns();
    if (t->kind == SBX__TOOL_ITEM) {
        json_t *out = NULL;
        int rc = t->item_fn(&call, &out, &err);
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
            j->text = output_text(json_object_get(out, "output"));
        }
        j->duration_ns = sbx_time_mono_ns() - start;
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
out:
    json_decref(args);
    j->duration_ns = sbx_time_mono_ns() - start;
}

static void *job_thread(void *p)
{
    run_job(p);
    return NULL;
}

static void run_jobs(struct run *r, struct job *jobs, size_t n)
{
    size_t width = r->opt->max_parallel_tools > 0 ? (size_t)r->opt->max_parallel_tools : 8;
    struct job **todo = sbx_xcalloc(n ? n : 1, sizeof(*todo));
    size_t nt = 0;
    for (size_t i = 0; i < n; i++)
        if (jobs[i].tool)
            todo[nt++] = &jobs[i];
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

static int finish(struct run *r, const char *text, json_t *json, struct sbx_run_result **out)
{
    struct sbx_run_result *res = sbx_xcalloc(1, sizeof(*res));
    res->text = sbx_xstrdup(text);
    res->json = json;
    res->items = json_incref(r->items);
    res->last = r->agent;
    res->usage = json_incref(r->usage);
    res->turns = r->turn;
    struct sbx_event ev = {.type = SBX_EVENT_FINAL, .text = res->text, .item = json};
    emit(r, &ev);
    *out = res;
    return 0;
}

/* One turn: returns 1 when the run has a final output in *out, 0 to go on, or an error. */
static int turn(struct run *r, struct sbx_run_result **out, struct sbx_error *err)
{
    struct sbx_agent *a = r->agent;
    json_t *tools = NULL, *choice = NULL, *fmt = NULL, *response = NULL, *input = NULL;
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

    if (r->opt->turn_hook &&
        (rc = r->opt->turn_hook(r->opt->turn_hook_data, a, r->items, &prep, err)) < 0) {
        json_decref(prep.input);
        sbx_error_prefix(err, "agent '%s' turn %d", a->name, r->turn);
        return rc;
    }
    set_turn_tools(r, a, &prep);
    tools = build_tools(r, a);
    choice = tool_choice_of(r, a);
    if (a->output_schema)
        fmt = json_pack("{s:s, s:s, s:O, s:b}", "type", "json_schema", "name", "final_output",
                        "schema", a->output_schema, "strict", 1);
    int delta_mode = r->opt->use_previous_response_id && r->prev_id;
    if (delta_mode) {
        json_decref(prep.input);
        prep.input = NULL;
        input = json_array();
        for (size_t i = r->sent_upto; i < json_array_size(r->items); i++)
            sbx_json_append(input, json_incref(json_array_get(r->items, i)));
    }
    struct sbx_model_request req = {
            .model = r->opt->model_name ? r->opt->model_name : a->model,
            .instructions = prep.instructions ? prep.instructions : a->instructions,
            .input = delta_mode   ? input
                     : prep.input ? prep.input
                                  : r->items,
            .tools = tools,
            .tool_choice = choice,
            .text_format = fmt,
            .settings = prep.settings ? prep.settings : a->settings,
            .previous_response_id = delta_mode ? r->prev_id : NULL,
    };
    int64_t t0 = sbx_time_mono_ns();
    rc = sbx_model_respond(r->opt->model, &req, r->opt->stream ? on_stream : NULL, r, &response,
                           err);
    if (rc < 0) {
        sbx_error_prefix(err, "agent '%s' turn %d", a->name, r->turn);
        goto out;
    }
    struct sbx_event mev = {
            .type = SBX_EVENT_MODEL_DONE, .item = response, .duration_ns = sbx_time_mono_ns() - t0};
    emit(r, &mev);
    add_usage(r, response);
    const char *rid = json_string_value(json_object_get(response, "id"));
    free(r->prev_id);
    r->prev_id = rid ? sbx_xstrdup(rid) : NULL;

    /* A response cut short (output limit, content filter) is not an answer: its text is
     * partial and its calls may be truncated. Its items are recorded and its messages reported,
     * so the partial text stays visible, but nothing runs and the run fails; sending the same
     * request again would most likely be cut at the same place. */
    int incomplete = streq(json_string_value(json_object_get(response, "status")), "incomplete");

    /* Record the output items and collect the calls, in order. */
    json_t *output = json_object_get(response, "output");
    size_t i;
    json_t *item;
    jobs = sbx_xcalloc(json_array_size(output) + 1, sizeof(*jobs));
    json_array_foreach(output, i, item)
    {
        if (!json_is_object(item))
            continue;
        sbx_json_append(r->items, json_incref(item));
        const char *type = json_string_value(json_object_get(item, "type"));
        if (streq(type, "message")) {
            free(last_text);
            last_text = message_text(item);
            refusal = refusal_of(item);
            struct sbx_event ev = {.type = SBX_EVENT_MESSAGE, .item = item, .text = last_text};
            emit(r, &ev);
            continue;
        }
        if (incomplete || !type || streq(type, "reasoning") || !json_object_get(item, "call_id"))
            continue;
        if (!find_tool(r, type, json_string_value(json_object_get(item, "name"))) &&
            !streq(type, "function_call") && !streq(type, "custom_tool_call")) {
            /* A call kind nobody here handles, e.g. a hosted tool the server ran itself. */
            sbx_log(SBX_LOG_WARN,
                    "agent '%s': no tool handles '%s' items; leaving it to the server", a->name,
                    type);
            continue;
        }
        struct job *j = &jobs[njobs];
        j->run = r;
        j->agent = a;
        j->item = item;
        j->type = type;
        j->call_id = json_string_value(json_object_get(item, "call_id"));
        j->name = json_string_value(json_object_get(item, "name"));
        if (streq(type, "function_call"))
            j->handoff = find_handoff(a, j->name);
        if (!j->handoff)
            j->tool = find_tool(r, type, j->name);
        if (!j->name && j->tool)
            j->name = j->tool->name;
        njobs++;
        struct sbx_event ev = {.type = SBX_EVENT_TOOL_CALL, .item = item, .tool = j->name};
        emit(r, &ev);
    }
    r->sent_upto = json_array_size(r->items);
    if (incomplete) {
        const char *why = json_string_value(
                json_object_get(json_object_get(response, "incomplete_details"), "reason"));
        rc = sbx_error_set(err, SBX_E_API, 0, "model response is incomplete: %.200s",
                           why && why[0] ? why : "no reason given");
        sbx_error_prefix(err, "agent '%s' turn %d", a->name, r->turn);
        goto out;
    }

    /* Run the tools; handoffs and unknown names are answered here. */
    run_jobs(r, jobs, njobs);
    struct sbx_agent *next = NULL;
    for (size_t k = 0; k < njobs; k++) {
        struct job *j = &jobs[k];
        if (j->fatal) {
            char *where = sbx_xasprintf("while running tool '%s'", j->name ? j->name : "?");
            /* A tool that stopped because the run was cancelled says so like every step does. */
            rc = j->err.code == SBX_E_CANCELLED ? cancelled(r, where, err) : 0;
            free(where);
            if (rc < 0)
                goto out;
            rc = sbx_error_copy(err, &j->err);
            sbx_error_prefix(err, "tool '%s'", j->name ? j->name : "?");
            goto out;
        }
        if (j->handoff) {
            if (!next) {
                next = j->handoff;
                json_t *o = json_pack("{s:s}", "assistant", next->name);
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
    for (size_t k = 0; k < njobs; k++) {
        struct job *j = &jobs[k];
        sbx_json_append(r->items, json_incref(j->output));
        struct sbx_event ev = {.type = SBX_EVENT_TOOL_OUTPUT,
                               .item = j->output,
                               .tool = j->name,
                               .text = j->text,
                               .duration_ns = j->duration_ns,
                               .failed = j->failed};
        emit(r, &ev);
    }
    if (njobs)
        mark_used(r, a);

    if (next) {
        struct sbx_event hev = {.type = SBX_EVENT_HANDOFF, .text = next->name};
        emit(r, &hev);
        r->agent = next;
        struct sbx_event aev = {.type = SBX_EVENT_AGENT_START};
        emit(r, &aev);
        rc = 0;
        goto out;
    }
    int ran_tools = 0;
    for (size_t k = 0; k < njobs; k++)
        ran_tools |= jobs[k].tool != NULL;
    if (ran_tools) {
        for (size_t k = 0; k < njobs; k++) {
            struct job *j = &jobs[k];
            if (!j->tool)
                continue;
            if (a->tool_use == SBX_TOOL_USE_STOP_ON_FIRST ||
                (a->tool_use == SBX_TOOL_USE_STOP_AT_NAMES && j->name &&
                 sbx_strv_find(&a->stop_at, j->name) >= 0)) {
                rc = finish(r, j->text, NULL, out) == 0 ? 1 : -1;
                goto out;
            }
        }
        if ((rc = cancelled(r, "after running tools", err)) < 0)
            goto out;
        rc = 0;
        goto out;
    }
    if (njobs) {
        /* Only unknown tools were called: let the model read the errors. */
        rc = 0;
        goto out;
    }
    if ((!last_text || !last_text[0]) && refusal) {
        rc = sbx_error_set(err, SBX_E_API, 0, "the model refused: %s", refusal);
        goto out;
    }
    if (a->output_schema) {
        if (!last_text || !last_text[0]) {
            rc = 0;
            goto out;
        }
        json_t *v = NULL;
        rc = structured_final(r, last_text, &v, err);
        if (rc == 0) {
            char *s = sbx_json_dumps(v, SBX_JSON_COMPACT);
            finish(r, s, v, out);
            free(s);
            rc = 1;
        }
        goto out;
    }
    if (last_text) {
        finish(r, last_text, NULL, out);
        rc = 1;
        goto out;
    }
    rc = 0;
out:
    for (size_t k = 0; k < njobs; k++) {
        json_decref(jobs[k].output);
        free(jobs[k].text);
    }
    free(jobs);
    free(last_text);
    json_decref(tools);
    json_decref(choice);
    json_decref(fmt);
    json_decref(input);
    json_decref(prep.input);
    json_decref(response);
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
    int rc = sbx_conversation_add(r->opt->conversation_store, r->opt->conversation, fresh, err);
    json_decref(fresh);
    if (rc == 0)
        r->saved_upto = n;
    return rc;
}

int sbx_run(struct sbx_agent *agent, const json_t *input, const struct sbx_run_options *opt,
            struct sbx_run_result **out, struct sbx_error *err)
{
    int rc = 0;
    struct run r = {.opt = opt, .agent = agent};
    if (!opt || !opt->model)
        return sbx_error_set(err, SBX_E_INVAL, 0, "a run needs a model");
    r.max_turns = opt->max_turns == 0 ? SBX_RUN_DEFAULT_MAX_TURNS : opt->max_turns;
    r.items = json_array();
    r.usage = json_pack("{s:i, s:i, s:i, s:i}", "input_tokens", 0, "output_tokens", 0,
                        "total_tokens", 0, "requests", 0);
    if (json_is_string(input)) {
        sbx_json_append(r.items, json_pack("{s:s, s:s, s:O}", "type", "message", "role", "user",
                                           "content", input));
    } else if (json_is_array(input)) {
        size_t i;
        json_t *it;
        json_array_foreach(input, i, it)
        {
            if (!json_is_object(it)) {
                rc = sbx_error_set(err, SBX_E_INVAL, 0, "input item %zu must be an object", i);
                goto out;
            }
            sbx_json_append(r.items, json_deep_copy(it));
        }
    } else {
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "run input must be a string or an array of items");
        goto out;
    }
    if ((rc = load_conversation(&r, err)) < 0)
        goto out;
    struct sbx_event aev = {.type = SBX_EVENT_AGENT_START};
    emit(&r, &aev);
    for (;;) {
        rc = turn(&r, out, err);
        int src = rc >= 0 ? save_conversation(&r, err) : 0;
        if (src < 0) {
            if (rc > 0) {
                sbx_run_result_free(*out);
                *out = NULL;
            }
            rc = src;
        }
        if (rc != 0)
            break;
    }
    if (rc > 0)
        rc = 0;
out:
    if (rc < 0)
        fail_run(&r, rc, err);
    json_decref(r.items);
    json_decref(r.usage);
    free(r.used_tools);
    free(r.prev_id);
    free(r.tv);
    return rc;
}

void sbx_run_result_free(struct sbx_run_result *r)
{
    if (!r)
        return;
    free(r->text);
    json_decref(r->json);
    json_decref(r->items);
    json_decref(r->usage);
    free(r);
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

static int agent_tool_fn(const json_t *args, const struct sbx_tool_call *call,
                         struct sbx_tool_output *out, struct sbx_error *err)
{
    struct agent_tool *at = call->data;
    struct sbx_run_result *res = NULL;
    struct sbx_run_options o = *call->run;
    o.on_event = NULL;
    o.event_data = NULL;
    o.stream = 0;
    o.max_turns = at->max_turns;
    o.use_previous_response_id = 0;
    o.conversation_store = NULL;
    o.conversation = NULL;
    json_t *input = json_object_get(args, "input");
    int rc = sbx_run(at->agent, input, &o, &res, err);
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
            if (n == cap) {
                cap *= 2;
                seen = sbx_xrealloc(seen, cap * sizeof(*seen));
            }
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
    case SBX_EVENT_AGENT_START:
    case SBX_EVENT_TURN_START:
        break;
    }
    return o;
}
