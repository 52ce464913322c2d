/* The runner in-process, driven by replay models: parallel tools, tool kinds, fatal tool
 * errors, cancellation, max turns, structured output, events. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/wait.h>
#include <time.h>

#include "tap.h"
#include "agent/agent-internal.h"
#include "replay-model.h"
#include "sbx/json.h"
#include "sbx/runner.h"

static char dir[] = "/tmp/sbx-test-runner.XXXXXX";
static int file_no;

static struct sbx_model *replay(const char *const *responses)
{
    return test_model_from_responses(dir, &file_no, responses);
}

struct rendezvous {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int arrived;
    int want;
};

static struct rendezvous rv = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};

/* Waits until `want` calls are inside the tool at the same time (or 10 s pass, which only
 * happens when calls run one after another): the answer says which. */
static int meet_fn(const json_t *args, const struct sbx_tool_call *call,
                   struct sbx_tool_output *out, struct sbx_error *err)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 10;
    pthread_mutex_lock(&rv.mu);
    rv.arrived++;
    pthread_cond_broadcast(&rv.cv);
    while (rv.arrived < rv.want)
        if (pthread_cond_timedwait(&rv.cv, &rv.mu, &until) != 0)
            break;
    int together = rv.arrived >= rv.want;
    pthread_mutex_unlock(&rv.mu);
    return sbx_buf_addf(&out->text, err, "%s:%s", together ? "together" : "alone",
                        json_string_value(json_object_get(args, "tag")));
}

static int image_fn(const json_t *args, const struct sbx_tool_call *call,
                    struct sbx_tool_output *out, struct sbx_error *err)
{
    out->parts = json_pack("[{s:s, s:s}]", "type", "input_image", "image_url",
                           "data:image/png;base64,iVBORw0KGgo=");
    return 0;
}

static int shout_fn(const json_t *args, const struct sbx_tool_call *call,
                    struct sbx_tool_output *out, struct sbx_error *err)
{
    const char *s = json_string_value(args);
    for (; *s; s++)
        if (sbx_buf_addch(&out->text, (char)(*s >= 'a' && *s <= 'z' ? *s - 32 : *s), err) < 0)
            return -SBX_E_TOOBIG;
    return 0;
}

static int patch_fn(const struct sbx_tool_call *call, json_t **out, struct sbx_error *err)
{
    const char *path =
            json_string_value(json_object_get(json_object_get(call->item, "operation"), "path"));
    if (!path)
        return sbx_error_set(err, SBX_E_INVAL, 0, "operation without a path");
    char *text = sbx_xasprintf("Updated %s", path);
    *out = json_pack("{s:s, s:s, s:s, s:s}", "type", "apply_patch_call_output", "call_id",
                     call->call_id, "status", "completed", "output", text);
    free(text);
    return 0;
}

static volatile sig_atomic_t cancel_flag;

static int gone_fn(const json_t *args, const struct sbx_tool_call *call,
                   struct sbx_tool_output *out, struct sbx_error *err)
{
    return sbx_error_set(err, SBX_E_SANDBOX, 0, "the sandbox went away");
}

static int cancel_fn(const json_t *args, const struct sbx_tool_call *call,
                     struct sbx_tool_output *out, struct sbx_error *err)
{
    cancel_flag = 1;
    return sbx_buf_adds(&out->text, "ok", err);
}

static struct sbx_tool *fn_tool(const char *name, sbx_tool_fn *fn, const char *schema)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *params = NULL;
    if (schema && sbx_json_parse(schema, strlen(schema), NULL, &params, &err) < 0)
        abort();
    struct sbx_function_tool spec = {.name = name, .parameters = params, .strict = 1, .fn = fn};
    struct sbx_tool *t = NULL;
    if (sbx_tool_new_function(&spec, &t, &err) < 0) {
        printf("# %s\n", err.msg);
        abort();
    }
    json_decref(params);
    return t;
}

struct trace {
    struct sbx_buf names;
};

static void on_event(const struct sbx_event *ev, void *data)
{
    struct trace *t = data;
    if (ev->type == SBX_EVENT_MODEL_STREAM || ev->type == SBX_EVENT_TEXT_DELTA)
        return;
    if (sbx_buf_addf(&t->names, NULL, "%s%s", t->names.len ? " " : "", sbx_event_name(ev->type)) <
        0)
        abort();
}

#define FC(id, name, args)                                                                    \
    "{\"type\":\"function_call\",\"call_id\":\"" id "\",\"name\":\"" name "\",\"arguments\":" \
    "\"" args "\"}"
#define MSG(text)                                                                          \
    "{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\"," \
    "\"text\":\"" text "\"}]}"
#define RESP(id, items, tokens)                                                     \
    "{\"id\":\"" id "\",\"output\":[" items "],\"usage\":{\"input_tokens\":" tokens \
    ",\"output_tokens\":1,\"total_tokens\":" tokens "}}"

static json_t *outputs_of(const json_t *items)
{
    json_t *o = json_array();
    size_t i;
    json_t *it;
    json_array_foreach(items, i, it)
    {
        const char *type = json_string_value(json_object_get(it, "type"));
        if (type && strstr(type, "_output"))
            sbx_json_append(o, json_incref(json_object_get(it, "output")));
    }
    return o;
}

static void test_parallel_and_kinds(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    static const char *const r[] = {
            RESP("r1",
                 FC("c1", "meet", "{\\\"tag\\\":\\\"one\\\"}") "," FC(
                         "c2", "meet", "{\\\"tag\\\":\\\"two\\\"}") "," FC("c3", "meet",
                                                                           "{\\\"tag\\\":"
                                                                           "\\\"three\\\"}"),
                 "10"),
            RESP("r2",
                 FC("c4", "image", "") ",{\"type\":\"custom_tool_call\",\"call_id\":\"c5\","
                                       "\"name\":\"shout\",\"input\":\"hi there\"},"
                                       "{\"type\":\"apply_patch_call\",\"call_id\":\"c6\","
                                       "\"operation\":{\"type\":\"update_file\",\"path\":"
                                       "\"a.txt\"}},{\"type\":\"reasoning\",\"id\":\"rs\","
                                       "\"summary\":[]}",
                 "20"),
            RESP("r3", MSG("done"), "30"),
            NULL,
    };
    struct sbx_model *m = replay(r);
    struct sbx_agent *a = NULL;
    CHECK_OK(sbx_agent_new("worker", &a, &err), &err);
    struct sbx_tool *meet =
            fn_tool("meet", meet_fn,
                    "{\"type\":\"object\",\"properties\":{\"tag\":{\"type\":\"string\"}}}");
    struct sbx_tool *image = fn_tool("image", image_fn, NULL);
    struct sbx_tool *shout = NULL, *patch = NULL;
    struct sbx_custom_tool cspec = {.name = "shout", .description = "Shouts.", .fn = shout_fn};
    CHECK_OK(sbx_tool_new_custom(&cspec, &shout, &err), &err);
    json_t *def = json_pack("{s:s}", "type", "apply_patch");
    struct sbx_item_tool ispec = {.name = "apply_patch",
                                  .item_type = "apply_patch_call",
                                  .definition = def,
                                  .fn = patch_fn};
    CHECK_OK(sbx_tool_new_item(&ispec, &patch, &err), &err);
    json_decref(def);
    CHECK_OK(sbx_agent_add_tool(a, meet, &err), &err);
    CHECK_OK(sbx_agent_add_tool(a, image, &err), &err);
    CHECK_OK(sbx_agent_add_tool(a, shout, &err), &err);
    CHECK_OK(sbx_agent_add_tool(a, patch, &err), &err);
    CHECK_ERR(sbx_agent_add_tool(a, meet, &err), SBX_E_EXISTS, &err,
              "already has a tool named 'meet'");

    struct trace tr;
    sbx_buf_init(&tr.names, 1 << 16);
    struct sbx_run_options o = {.model = m, .on_event = on_event, .event_data = &tr, .stream = 1};
    struct sbx_run_result *res = NULL;
    json_t *input = sbx_json_str("go");
    rv.want = 3;
    CHECK_OK(sbx_run(a, input, &o, &res, &err), &err);
    if (res) {
        CHECK_EQ_STR(sbx_run_result_text(res), "done");
        CHECK_EQ_INT(sbx_run_result_turns(res), 3);
        json_t *outs = outputs_of(sbx_run_result_items(res));
        char *d = sbx_json_dumps(outs, 0);
        CHECK_EQ_STR(d, "[\"together:one\",\"together:two\",\"together:three\","
                        "[{\"type\":\"input_image\",\"image_url\":\"data:image/png;base64,"
                        "iVBORw0KGgo=\"}],\"HI THERE\",\"Updated a.txt\"]");
        free(d);
        json_decref(outs);
        /* The item tool's own output item is kept as it made it. */
        const json_t *items = sbx_run_result_items(res);
        json_t *last_out = json_array_get(items, json_array_size(items) - 2);
        CHECK_EQ_STR(json_string_value(json_object_get(last_out, "type")),
                     "apply_patch_call_output");
        CHECK_EQ_INT(json_integer_value(json_object_get(sbx_run_result_usage(res), "input_tokens")),
                     60);
        CHECK_EQ_INT(json_integer_value(json_object_get(sbx_run_result_usage(res), "requests")), 3);
        CHECK(sbx_run_result_last_agent(res) == a);
    }
    CHECK_EQ_STR(tr.names.data,
                 "agent_start turn_start model_done tool_call tool_call tool_call tool_start "
                 "tool_start tool_start tool_output tool_output tool_output turn_start "
                 "model_done tool_call tool_call tool_call tool_start tool_start tool_start "
                 "tool_output tool_output tool_output turn_start model_done message final");
    sbx_run_result_free(res);
    json_decref(input);
    sbx_buf_release(&tr.names);
    sbx_tool_unref(meet);
    sbx_tool_unref(image);
    sbx_tool_unref(shout);
    sbx_tool_unref(patch);
    sbx_agent_free(a);
    sbx_model_free(m);
}

static void test_fatal_cancel_maxturns(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    static const char *const r[] = {RESP("r1", FC("c1", "gone", "{}"), "1"), NULL};
    static const char *const r2[] = {RESP("r1", FC("c1", "stop", "{}"), "1"),
                                     RESP("r2", MSG("never"), "1"), NULL};
    struct sbx_agent *a = NULL;
    struct sbx_run_result *res = NULL;
    json_t *input = sbx_json_str("go");
    struct trace tr;
    sbx_buf_init(&tr.names, 1 << 16);

    CHECK_OK(sbx_agent_new("fragile", &a, &err), &err);
    struct sbx_tool *gone = fn_tool("gone", gone_fn, NULL);
    struct sbx_tool *stop = fn_tool("stop", cancel_fn, NULL);
    CHECK_OK(sbx_agent_add_tool(a, gone, &err), &err);
    CHECK_OK(sbx_agent_add_tool(a, stop, &err), &err);

    struct sbx_model *m = replay(r);
    struct sbx_run_options o = {.model = m, .on_event = on_event, .event_data = &tr};
    CHECK_ERR(sbx_run(a, input, &o, &res, &err), SBX_E_SANDBOX, &err,
              "tool 'gone': the sandbox went away");
    CHECK(res == NULL);
    CHECK_CONTAINS(tr.names.data, "tool_call tool_start error");
    sbx_model_free(m);

    m = replay(r2);
    o.model = m;
    o.cancel = &cancel_flag;
    CHECK_ERR(sbx_run(a, input, &o, &res, &err), SBX_E_CANCELLED, &err,
              "run cancelled at turn 1 of agent 'fragile' after running tools");
    sbx_model_free(m);
    cancel_flag = 0;

    m = replay(r2);
    o.model = m;
    o.cancel = NULL;
    o.max_turns = 1;
    CHECK_ERR(sbx_run(a, input, &o, &res, &err), SBX_E_MAXTURNS, &err, "max turns (1) exceeded");
    sbx_model_free(m);

    json_t *bad = json_integer(3);
    CHECK_ERR(sbx_run(a, bad, &o, &res, &err), SBX_E_INVAL, &err, "run input must be");
    json_decref(bad);
    struct sbx_run_options none = {0};
    CHECK_ERR(sbx_run(a, input, &none, &res, &err), SBX_E_INVAL, &err, "needs a model");

    json_decref(input);
    sbx_buf_release(&tr.names);
    sbx_tool_unref(gone);
    sbx_tool_unref(stop);
    sbx_agent_free(a);
}

static void test_structured_wrapped(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    static const char *const r[] = {RESP("r1", MSG("{\\\"response\\\":42}"), "1"), NULL};
    struct sbx_agent *a = NULL;
    struct sbx_run_result *res = NULL;
    CHECK_OK(sbx_agent_new("counter", &a, &err), &err);
    json_t *schema = json_pack("{s:s}", "type", "integer");
    CHECK_OK(sbx_agent_set_output_schema(a, schema, &err), &err);
    json_decref(schema);
    struct sbx_model *m = replay(r);
    struct sbx_run_options o = {.model = m};
    json_t *input = json_pack("[{s:s, s:s}]", "role", "user", "content", "count");
    CHECK_OK(sbx_run(a, input, &o, &res, &err), &err);
    if (res) {
        CHECK_EQ_INT(json_integer_value(sbx_run_result_json(res)), 42);
        CHECK_EQ_STR(sbx_run_result_text(res), "42");
    }
    sbx_run_result_free(res);
    json_decref(input);
    sbx_model_free(m);
    sbx_agent_free(a);
}

static void test_refusal(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    static const char *const r[] = {
            RESP("r1",
                 "{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":"
                 "\"refusal\",\"refusal\":\"I will not do that\"}]}",
                 "1"),
            NULL};
    struct sbx_agent *a = NULL;
    struct sbx_run_result *res = NULL;
    CHECK_OK(sbx_agent_new("polite", &a, &err), &err);
    struct sbx_model *m = replay(r);
    struct sbx_run_options o = {.model = m};
    json_t *input = sbx_json_str("do it");
    CHECK_ERR(sbx_run(a, input, &o, &res, &err), SBX_E_API, &err,
              "the model refused: I will not do that");
    json_decref(input);
    sbx_model_free(m);
    sbx_agent_free(a);
}

/* Atomic: the runner runs a turn's calls on threads of their own. */
static atomic_int calls_made;

static int count_fn(const json_t *args, const struct sbx_tool_call *call,
                    struct sbx_tool_output *out, struct sbx_error *err)
{
    calls_made++;
    return sbx_buf_adds(&out->text, "counted", err);
}

struct incomplete_trace {
    struct trace tr;
    char last_stream[64]; /* type of the last raw stream event */
};

static void on_incomplete_event(const struct sbx_event *ev, void *data)
{
    struct incomplete_trace *t = data;
    if (ev->type == SBX_EVENT_MODEL_STREAM)
        snprintf(t->last_stream, sizeof(t->last_stream), "%s",
                 json_string_value(json_object_get(ev->item, "type")));
    on_event(ev, &t->tr);
}

#define INCOMPLETE(id, reason, items)                                                           \
    "{\"id\":\"" id "\",\"status\":\"incomplete\",\"incomplete_details\":{\"reason\":\"" reason \
    "\"},\"output\":[" items "],\"usage\":{\"input_tokens\":1,\"output_tokens\":1,"             \
    "\"total_tokens\":2}}"

/* An incomplete response ends the run: no tool call of it runs, nothing is sent again, and a
 * reasoning-only truncation does not loop until max turns. */
static void test_incomplete(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    static const char *const cut_call[] = {
            INCOMPLETE("r1", "max_output_tokens", MSG("half") "," FC("c1", "count", "{}")),
            RESP("r2", MSG("never"), "1"), NULL};
    static const char *const reasoning[] = {
            INCOMPLETE("r1", "max_output_tokens", "{\"type\":\"reasoning\",\"summary\":[]}"),
            INCOMPLETE("r2", "max_output_tokens", "{\"type\":\"reasoning\",\"summary\":[]}"),
            RESP("r3", MSG("never"), "1"), NULL};
    static const char *const no_reason[] = {
            "{\"id\":\"r1\",\"status\":\"incomplete\",\"output\":[]}", NULL};
    struct sbx_agent *a = NULL;
    struct sbx_run_result *res = NULL;
    json_t *input = sbx_json_str("go");
    struct incomplete_trace t = {0};
    sbx_buf_init(&t.tr.names, 1 << 16);

    CHECK_OK(sbx_agent_new("cut", &a, &err), &err);
    struct sbx_tool *count = fn_tool("count", count_fn, NULL);
    CHECK_OK(sbx_agent_add_tool(a, count, &err), &err);

    struct sbx_model *m = replay(cut_call);
    struct sbx_run_options o = {
            .model = m, .on_event = on_incomplete_event, .event_data = &t, .stream = 1};
    CHECK_ERR(sbx_run(a, input, &o, &res, &err), SBX_E_API, &err,
              "agent 'cut' turn 1: model response is incomplete: max_output_tokens");
    CHECK(res == NULL);
    CHECK_EQ_INT(calls_made, 0);
    CHECK_EQ_STR(t.last_stream, "response.incomplete");
    CHECK_EQ_STR(t.tr.names.data, "agent_start turn_start model_done message error");
    sbx_model_free(m);

    sbx_buf_reset(&t.tr.names);
    m = replay(reasoning);
    o.model = m;
    o.stream = 0;
    o.max_turns = 3;
    CHECK_ERR(sbx_run(a, input, &o, &res, &err), SBX_E_API, &err,
              "model response is incomplete: max_output_tokens");
    CHECK_EQ_STR(t.tr.names.data, "agent_start turn_start model_done error");
    sbx_model_free(m);

    m = replay(no_reason);
    o.model = m;
    CHECK_ERR(sbx_run(a, input, &o, &res, &err), SBX_E_API, &err,
              "model response is incomplete: no reason given");
    sbx_model_free(m);

    json_decref(input);
    sbx_buf_release(&t.tr.names);
    sbx_tool_unref(count);
    sbx_agent_free(a);
}

static void test_tool_and_agent_errors(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_tool *t = NULL;
    struct sbx_function_tool spec = {.name = "bad name", .fn = image_fn};
    CHECK_ERR(sbx_tool_new_function(&spec, &t, &err), SBX_E_INVAL, &err,
              "tool name 'bad name' must be 1 to 64 letters");
    spec.name = "ok";
    spec.fn = NULL;
    CHECK_ERR(sbx_tool_new_function(&spec, &t, &err), SBX_E_INVAL, &err, "needs a callback");
    json_t *def = json_object();
    struct sbx_item_tool ispec = {
            .name = "x", .item_type = "function_call", .definition = def, .fn = patch_fn};
    CHECK_ERR(sbx_tool_new_item(&ispec, &t, &err), SBX_E_INVAL, &err, "cannot claim item type");
    json_decref(def);
    CHECK_ERR(sbx_tool_builtin("nope", &t, &err), SBX_E_NOTFOUND, &err,
              "known: current_time, add, calculator, word_count");
    struct sbx_agent *a = NULL;
    CHECK_ERR(sbx_agent_new("", &a, &err), SBX_E_INVAL, &err, "agent name");
    CHECK_ERR(sbx_agent_new("a\nb", &a, &err), SBX_E_INVAL, &err, "control characters");
    CHECK_ERR(sbx_agent_new("a\x7f", &a, &err), SBX_E_INVAL, &err, "control characters");
    CHECK_OK(sbx_agent_new("Sales Team", &a, &err), &err);
    CHECK_OK(sbx_tool_new_agent(a, NULL, NULL, 0, &t, &err), &err);
    CHECK_EQ_STR(sbx_tool_name(t), "sales_team");
    sbx_tool_unref(t);
    sbx_agent_free(a);
}

static void test_replay_model(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_model *m = NULL;
    CHECK_ERR(sbx_model_new("replay:", NULL, &m, &err), SBX_E_INVAL, &err, "needs a file name");
    CHECK_ERR(sbx_model_new("", NULL, &m, &err), SBX_E_INVAL, &err, "must not be empty");
    static const char *const r[] = {"[1]", NULL};
    char *path = sbx_xasprintf("%s/r%d.jsonl", dir, file_no);
    FILE *f = fopen(path, "w");
    fprintf(f, "%s\n", r[0]);
    fclose(f);
    char *name = sbx_xasprintf("replay:%s", path);
    CHECK_ERR(sbx_model_new(name, NULL, &m, &err), SBX_E_PARSE, &err,
              "line 1: expected a response object");
    free(name);
    free(path);
}

static int visit(struct sbx_agent *a, void *data, struct sbx_error *err)
{
    struct sbx_buf *b = data;
    if (strcmp(sbx_agent_name(a), "stop") == 0)
        return sbx_error_set(err, SBX_E_INVAL, 0, "stopped at '%s'", sbx_agent_name(a));
    return sbx_buf_addf(b, err, "%s ", sbx_agent_name(a));
}

/* Every agent reachable through handoffs and agents as tools, once each, cycles included. */
static void test_walk(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_agent *a = NULL, *b = NULL, *c = NULL, *d = NULL, *stop = NULL;
    struct sbx_tool *t = NULL;
    struct sbx_buf seen;
    sbx_buf_init(&seen, 1024);
    CHECK_OK(sbx_agent_new("a", &a, &err), &err);
    CHECK_OK(sbx_agent_new("b", &b, &err), &err);
    CHECK_OK(sbx_agent_new("c", &c, &err), &err);
    CHECK_OK(sbx_agent_new("d", &d, &err), &err);
    CHECK_OK(sbx_agent_new("stop", &stop, &err), &err);
    if (!a || !b || !c || !d || !stop)
        goto out;
    CHECK_OK(sbx_agent_add_handoff(a, b, &err), &err);
    CHECK_OK(sbx_agent_add_handoff(b, a, &err), &err); /* a cycle */
    CHECK_OK(sbx_tool_new_agent(c, NULL, NULL, 0, &t, &err), &err);
    CHECK_OK(sbx_agent_add_tool(b, t, &err), &err);
    sbx_tool_unref(t);
    t = NULL;
    CHECK_OK(sbx_tool_new_agent(d, NULL, NULL, 0, &t, &err), &err);
    CHECK_OK(sbx_agent_add_tool(c, t, &err), &err);
    CHECK_OK(sbx_agent_add_handoff(c, a, &err), &err);
    CHECK_OK(sbx_agent_walk(a, visit, &seen, &err), &err);
    CHECK_EQ_STR(seen.data, "a b c d ");
    CHECK_OK(sbx_agent_add_handoff(d, stop, &err), &err);
    sbx_buf_setlen(&seen, 0);
    CHECK_ERR(sbx_agent_walk(a, visit, &seen, &err), SBX_E_INVAL, &err, "stopped at 'stop'");
out:
    sbx_tool_unref(t);
    sbx_buf_release(&seen);
    sbx_agent_free(a);
    sbx_agent_free(b);
    sbx_agent_free(c);
    sbx_agent_free(d);
    sbx_agent_free(stop);
}

/* The calculator's % (the builtin's own, not libm's fmod) gives fmod's exact result. */
static void test_calculator_mod(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_tool *t = NULL;
    CHECK_OK(sbx_tool_builtin("calculator", &t, &err), &err);
    const struct {
        const char *expr;
        double x, y;
    } cases[] = {{"7 % 3", 7, 3},
                 {"-7 % 3", -7, 3},
                 {"7 % -3", 7, -3},
                 {"7.5 % 2", 7.5, 2},
                 {"5 % 0.3", 5, 0.3},
                 {"2 % 5", 2, 5},
                 {"1e300 % 7", 1e300, 7},
                 {"1e15 % 1e-3", 1e15, 1e-3},
                 {"123456789 % 1e-300", 123456789, 1e-300}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *args = json_pack("{s:s}", "expression", cases[i].expr);
        struct sbx_tool_call call = {.name = "calculator"};
        struct sbx_tool_output out = {0};
        sbx_buf_init(&out.text, SBX_TOOL_OUTPUT_MAX);
        int rc = t->fn(args, &call, &out, &err);
        double want = fmod(cases[i].x, cases[i].y);
        char buf[64];
        if (fabs(want) < 1e15 && want == (double)(long long)want)
            snprintf(buf, sizeof(buf), "%.0f", want);
        else
            snprintf(buf, sizeof(buf), "%.15g", want);
        CHECK_OK(rc, &err);
        CHECK_EQ_MEM(out.text.data, out.text.len, buf, strlen(buf));
        sbx_buf_release(&out.text);
        json_decref(out.parts);
        json_decref(args);
    }
    json_t *args = json_pack("{s:s}", "expression", "1 % 0");
    struct sbx_tool_call call = {.name = "calculator"};
    struct sbx_tool_output out = {0};
    sbx_buf_init(&out.text, SBX_TOOL_OUTPUT_MAX);
    CHECK_ERR(t->fn(args, &call, &out, &err), SBX_E_INVAL, &err, "division by zero");
    sbx_buf_release(&out.text);
    json_decref(args);
    sbx_tool_unref(t);
}

int main(void)
{
    TAP_START();
    if (!mkdtemp(dir))
        TAP_SKIP_ALL("cannot make a temporary directory");
    TAP_RUN(test_parallel_and_kinds);
    TAP_RUN(test_fatal_cancel_maxturns);
    TAP_RUN(test_structured_wrapped);
    TAP_RUN(test_refusal);
    TAP_RUN(test_incomplete);
    TAP_RUN(test_tool_and_agent_errors);
    TAP_RUN(test_calculator_mod);
    TAP_RUN(test_replay_model);
    TAP_RUN(test_walk);
    char *cmd[] = {"rm", "-rf", dir, NULL};
    pid_t pid = fork();
    if (pid == 0) {
        execvp(cmd[0], cmd);
        _exit(127);
    }
    int st;
    waitpid(pid, &st, 0);
    return TAP_DONE();
}
