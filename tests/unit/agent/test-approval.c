/* Approvals and resume: policy matching, bad policies, interruptions, decisions, checkpoints,
 * run states carried across resumes, nested agent runs. Driven by replay models. */
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>

#include "tap.h"
#include "replay-model.h"
#include "sbx/json.h"
#include "sbx/runner.h"
#include "sbx/runstate.h"

static char dir[] = "/tmp/sbx-test-approval.XXXXXX";
static int file_no;

#define FC(id, name, args)                                                                    \
    "{\"type\":\"function_call\",\"call_id\":\"" id "\",\"name\":\"" name "\",\"arguments\":" \
    "\"" args "\"}"
#define MSG(text)                                                                          \
    "{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\"," \
    "\"text\":\"" text "\"}]}"
#define RESP(id, items)                                                         \
    "{\"id\":\"" id "\",\"output\":[" items "],\"usage\":{\"input_tokens\":10," \
    "\"output_tokens\":1,\"total_tokens\":11}}"

static json_t *J(const char *text)
{
    json_t *v = NULL;
    struct sbx_error err = SBX_ERROR_INIT;
    if (sbx_json_parse(text, strlen(text), NULL, &v, &err) < 0) {
        printf("# %s: %s\n", text, err.msg);
        abort();
    }
    return v;
}

static int match(const char *policy, const char *tool, const char *args)
{
    json_t *p = J(policy), *a = args ? J(args) : NULL;
    int m = sbx_approval_policy_match(p, tool, a);
    json_decref(p);
    json_decref(a);
    return m;
}

static void test_policy_match(void)
{
    CHECK_EQ_INT(match("true", "anything", "{}"), 1);
    CHECK_EQ_INT(match("[\"exec_command\"]", "exec_command", "{}"), 1);
    CHECK_EQ_INT(match("[\"exec_command\"]", "apply_patch", "{}"), 0);
    CHECK_EQ_INT(match("[\"exec_*\", \"apply_patch\"]", "exec_command", NULL), 1);
    CHECK_EQ_INT(match("[\"exec_*\", \"apply_patch\"]", "apply_patch", NULL), 1);
    const char *when =
            "[{\"tool\": \"exec_command\", \"when\": {\"cmd\": [\"rm *\", \"git push*\"]}}]";
    CHECK_EQ_INT(match(when, "exec_command", "{\"cmd\": \"rm -rf /\"}"), 1);
    CHECK_EQ_INT(match(when, "exec_command", "{\"cmd\": \"git push origin\"}"), 1);
    CHECK_EQ_INT(match(when, "exec_command", "{\"cmd\": \"ls\"}"), 0);
    CHECK_EQ_INT(match(when, "exec_command", "{\"other\": \"rm x\"}"), 0);
    CHECK_EQ_INT(match(when, "exec_command", NULL), 0);
    CHECK_EQ_INT(match(when, "apply_patch", "{\"cmd\": \"rm x\"}"), 0);
    /* An array argument matches when any element does; other values as compact JSON. */
    CHECK_EQ_INT(match("[{\"tool\": \"run\", \"when\": {\"argv\": \"rm\"}}]", "run",
                       "{\"argv\": [\"rm\", \"-rf\"]}"),
                 1);
    CHECK_EQ_INT(match("[{\"tool\": \"run\", \"when\": {\"argv\": \"rm\"}}]", "run",
                       "{\"argv\": [\"ls\", \"rm-not\"]}"),
                 0);
    CHECK_EQ_INT(match("[{\"tool\": \"run\", \"when\": {\"n\": \"1?\"}}]", "run", "{\"n\": 12}"),
                 1);
    CHECK_EQ_INT(match("[{\"tool\": \"run\", \"when\": {\"o\": \"{\\\"a\\\":*}\"}}]", "run",
                       "{\"o\": {\"a\": 1}}"),
                 1);
    /* unless: every listed argument matching lifts the need. */
    const char *unless = "[{\"tool\": \"exec_*\", \"unless\": {\"cmd\": [\"ls*\", \"cat *\"], "
                         "\"workdir\": \"/tmp*\"}}]";
    CHECK_EQ_INT(match(unless, "exec_command", "{\"cmd\": \"ls -l\", \"workdir\": \"/tmp/x\"}"), 0);
    CHECK_EQ_INT(match(unless, "exec_command", "{\"cmd\": \"ls -l\", \"workdir\": \"/etc\"}"), 1);
    CHECK_EQ_INT(match(unless, "exec_command", "{\"cmd\": \"ls -l\"}"), 1);
    CHECK_EQ_INT(match("[{\"tool\": \"x\", \"when\": {\"a\": \"1\"}, \"unless\": {\"b\": \"2\"}}]",
                       "x", "{\"a\": \"1\", \"b\": \"2\"}"),
                 0);
    CHECK_EQ_INT(match("[]", "x", "{}"), 0);

    json_t *item = J("{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"x\","
                     "\"arguments\":\"{\\\"cmd\\\":\\\"ls\\\"}\"}");
    json_t *args = sbx_approval_args(item);
    CHECK_EQ_STR(json_string_value(json_object_get(args, "cmd")), "ls");
    json_decref(args);
    json_decref(item);
    item = J("{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"x\",\"arguments\":\"[1\"}");
    CHECK(sbx_approval_args(item) == NULL);
    json_decref(item);
    item = J("{\"type\":\"custom_tool_call\",\"call_id\":\"c\",\"name\":\"x\",\"input\":\"hi\"}");
    args = sbx_approval_args(item);
    CHECK_EQ_STR(json_string_value(json_object_get(args, "input")), "hi");
    json_decref(args);
    json_decref(item);
    item = J("{\"type\":\"apply_patch_call\",\"call_id\":\"c\",\"operation\":{\"type\":"
             "\"update_file\",\"path\":\"a.txt\",\"diff\":\"-\"}}");
    args = sbx_approval_args(item);
    CHECK_EQ_STR(json_string_value(json_object_get(args, "path")), "a.txt");
    json_decref(args);
    json_decref(item);
}

static void bad_policy(const char *policy, const char *needle)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_agent *a = NULL;
    if (sbx_agent_new("p", &a, &err) < 0)
        abort();
    json_t *p = J(policy);
    CHECK_ERR(sbx_agent_set_needs_approval(a, p, &err), SBX_E_INVAL, &err, needle);
    CHECK(sbx_agent_needs_approval(a) == NULL);
    json_decref(p);
    sbx_agent_free(a);
}

static void test_bad_policies(void)
{
    bad_policy("[\"x\", {\"tool\": \"y\", \"wen\": {}}]",
               "needs_approval: rule 2: unknown key 'wen' (known: tool, when, unless)");
    bad_policy("5", "needs_approval: must be true, false or a list of rules");
    bad_policy("\"exec_command\"", "needs_approval: must be true, false or a list of rules");
    bad_policy("[3]", "needs_approval: rule 1: must be a tool name or a mapping with 'tool'");
    bad_policy("[{\"when\": {}}]", "needs_approval: rule 1: 'tool' must be a tool name or glob");
    bad_policy("[{\"tool\": \"x\", \"when\": \"rm\"}]",
               "needs_approval: rule 1: 'when' must map argument names to globs");
    bad_policy("[{\"tool\": \"x\", \"unless\": {\"cmd\": 3}}]",
               "needs_approval: rule 1: 'unless.cmd' must be a glob or a list of globs");
    bad_policy("[{\"tool\": \"x\", \"when\": {\"cmd\": []}}]", "'when.cmd' must be a glob");

    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_agent *a = NULL;
    CHECK_OK(sbx_agent_new("p", &a, &err), &err);
    json_t *p = J("[\"x\"]");
    CHECK_OK(sbx_agent_set_needs_approval(a, p, &err), &err);
    CHECK(json_equal(sbx_agent_needs_approval(a), p));
    json_decref(p);
    p = json_false();
    CHECK_OK(sbx_agent_set_needs_approval(a, p, &err), &err);
    CHECK(sbx_agent_needs_approval(a) == NULL);
    json_decref(p);
    sbx_agent_free(a);

    /* In agent files: accepted, and a bad policy names the file and the field. */
    char *path = sbx_xasprintf("%s/ap.yaml", dir);
    FILE *f = fopen(path, "w");
    fputs("name: ap\nneeds_approval: [exec_command, {tool: apply_patch, when: {path: 'etc/*'}}]\n",
          f);
    fclose(f);
    struct sbx_agent_file *af = NULL;
    CHECK_OK(sbx_agent_file_load(path, &af, &err), &err);
    if (af)
        CHECK_EQ_INT(json_array_size(sbx_agent_needs_approval(sbx_agent_file_agent(af))), 2);
    sbx_agent_file_free(af);
    af = NULL;
    f = fopen(path, "w");
    fputs("name: ap\nneeds_approval: [{tol: exec_command}]\n", f);
    fclose(f);
    char *want = sbx_xasprintf("agent file '%s': needs_approval: rule 1: unknown key 'tol'", path);
    CHECK_ERR(sbx_agent_file_load(path, &af, &err), SBX_E_INVAL, &err, want);
    free(want);
    unlink(path);
    free(path);
}

/* The tools: "echo" answers with its text; "danger" counts its runs. The runner runs a turn's
 * calls on threads of their own, so the counts are atomic. */
static atomic_int echo_runs, danger_runs;

static int echo_fn(const json_t *args, const struct sbx_tool_call *call,
                   struct sbx_tool_output *out, struct sbx_error *err)
{
    echo_runs++;
    return sbx_buf_addf(&out->text, err, "echo:%s", json_string_value(json_object_get(args, "t")));
}

static int danger_fn(const json_t *args, const struct sbx_tool_call *call,
                     struct sbx_tool_output *out, struct sbx_error *err)
{
    danger_runs++;
    return sbx_buf_adds(&out->text, "boom", err);
}

static struct sbx_tool *fn_tool(const char *name, sbx_tool_fn *fn)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *params = J("{\"type\":\"object\",\"properties\":{\"t\":{\"type\":\"string\"}}}");
    struct sbx_function_tool spec = {.name = name, .parameters = params, .fn = fn};
    struct sbx_tool *t = NULL;
    if (sbx_tool_new_function(&spec, &t, &err) < 0) {
        printf("# %s\n", err.msg);
        abort();
    }
    json_decref(params);
    return t;
}

static struct sbx_agent *make_agent(const char *name, const char *policy)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_agent *a = NULL;
    struct sbx_tool *e = fn_tool("echo", echo_fn), *d = fn_tool("danger", danger_fn);
    if (sbx_agent_new(name, &a, &err) < 0 || sbx_agent_add_tool(a, e, &err) < 0 ||
        sbx_agent_add_tool(a, d, &err) < 0)
        abort();
    sbx_tool_unref(e);
    sbx_tool_unref(d);
    if (policy) {
        json_t *p = J(policy);
        if (sbx_agent_set_needs_approval(a, p, &err) < 0)
            abort();
        json_decref(p);
    }
    return a;
}

/* What the callbacks saw. */
struct seen {
    struct sbx_buf log;     /* checkpoints: "status:open_calls" ..., and notices */
    json_t *states;         /* every checkpoint's state */
    struct sbx_buf notices; /* NOTICE texts, one per line */
    struct sbx_buf hooks;   /* state hook finals */
    int outputs_failed;     /* TOOL_OUTPUT events with failed set */
    json_t *model_saw;      /* the items the turn hook saw, per turn */
};

static void seen_init(struct seen *s)
{
    sbx_buf_init(&s->log, 1 << 16);
    sbx_buf_init(&s->notices, 1 << 16);
    sbx_buf_init(&s->hooks, 1 << 16);
    s->states = json_array();
    s->model_saw = json_array();
    s->outputs_failed = 0;
}

static void seen_release(struct seen *s)
{
    sbx_buf_release(&s->log);
    sbx_buf_release(&s->notices);
    sbx_buf_release(&s->hooks);
    json_decref(s->states);
    json_decref(s->model_saw);
}

static int on_checkpoint(void *data, const json_t *state, struct sbx_error *err)
{
    struct seen *s = data;
    sbx_buf_addf(&s->log, NULL, "%s%s:%zu", s->log.len ? " " : "",
                 json_string_value(json_object_get(state, "status")),
                 json_array_size(json_object_get(state, "open_calls")));
    sbx_json_append(s->states, json_deep_copy(state));
    return 0;
}

static int on_state_hook(void *data, int final, json_t **out, struct sbx_error *err)
{
    struct seen *s = data;
    sbx_buf_addf(&s->hooks, NULL, "%d", final);
    *out = json_pack("{s:{s:s}}", "session_state", "id", "sb-1");
    return 0;
}

static void on_event(const struct sbx_event *ev, void *data)
{
    struct seen *s = data;
    if (ev->type == SBX_EVENT_NOTICE)
        sbx_buf_addf(&s->notices, NULL, "%s\n", ev->text);
    if (ev->type == SBX_EVENT_TOOL_OUTPUT && ev->failed)
        s->outputs_failed++;
}

static int on_turn(void *data, struct sbx_agent *agent, const json_t *items,
                   struct sbx_turn_prep *out, struct sbx_error *err)
{
    struct seen *s = data;
    sbx_json_append(s->model_saw, json_deep_copy(items));
    return 0;
}

static struct sbx_run_options options(struct sbx_model *m, struct seen *s)
{
    struct sbx_run_options o = {
            .model = m,
            .on_event = on_event,
            .event_data = s,
            .checkpoint = on_checkpoint,
            .checkpoint_data = s,
            .state_hook = on_state_hook,
            .state_hook_data = s,
            .turn_hook = on_turn,
            .turn_hook_data = s,
    };
    return o;
}

/* A state as a caller would keep it: serialised and parsed again. */
static json_t *saved(const json_t *state)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char *text = NULL;
    json_t *out = NULL;
    if (sbx_run_state_serialize(state, NULL, &text, &err) < 0 ||
        sbx_run_state_parse(text, strlen(text), &out, &err) < 0) {
        printf("# %s\n", err.msg);
        abort();
    }
    free(text);
    return out;
}

static const char *const first_turn[] = {
        RESP("r1", FC("c1", "echo", "{\\\"t\\\":\\\"a\\\"}") "," FC(
                           "c2", "danger",
                           "{\\\"t\\\":\\\"b\\\"}") "," FC("c3", "echo", "{\\\"t\\\":\\\"c\\\"}")),
        NULL,
};
static const char *const final_turn[] = {RESP("r2", MSG("all done")), NULL};

/* Start a run that interrupts at c2; returns its final state (saved form). */
static json_t *interrupted_run(struct sbx_agent *a, struct seen *s)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_model *m = test_model_from_responses(dir, &file_no, first_turn);
    struct sbx_run_options o = options(m, s);
    struct sbx_run_result *res = NULL;
    json_t *input = sbx_json_str("go");
    json_t *state = NULL;
    CHECK_OK(sbx_run(a, input, &o, &res, &err), &err);
    if (res) {
        CHECK_EQ_INT(sbx_run_result_interrupted(res), 1);
        CHECK_EQ_STR(sbx_run_result_text(res), "");
        state = saved(sbx_run_result_state(res));
    }
    sbx_run_result_free(res);
    json_decref(input);
    sbx_model_free(m);
    return state;
}

static void test_interrupt_and_approve(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_agent *a = make_agent("worker", "[\"danger\"]");
    struct seen s;
    seen_init(&s);
    echo_runs = danger_runs = 0;
    struct sbx_model *m = test_model_from_responses(dir, &file_no, first_turn);
    struct sbx_run_options o = options(m, &s);
    struct sbx_run_result *res = NULL;
    json_t *input = sbx_json_str("go");
    CHECK_OK(sbx_run(a, input, &o, &res, &err), &err);
    json_t *state = NULL;
    if (res) {
        CHECK_EQ_INT(sbx_run_result_interrupted(res), 1);
        const json_t *pend = sbx_run_result_interruptions(res);
        CHECK_EQ_INT(json_array_size(pend), 1);
        json_t *p = json_array_get(pend, 0);
        CHECK_EQ_STR(json_string_value(json_object_get(p, "call_id")), "c2");
        CHECK_EQ_STR(json_string_value(json_object_get(p, "tool")), "danger");
        CHECK_EQ_STR(json_string_value(json_object_get(p, "agent")), "worker");
        CHECK_EQ_STR(json_string_value(json_object_get(p, "type")), "function_call");
        CHECK_EQ_STR(json_string_value(json_object_get(json_object_get(p, "arguments"), "t")), "b");
        const json_t *st = sbx_run_result_state(res);
        CHECK_EQ_STR(json_string_value(json_object_get(st, "status")), "interrupted");
        /* As in the reference SDK, the calls that need no approval ran: only c2 is open. */
        char *oc = sbx_json_dumps(json_object_get(st, "open_calls"), 0);
        CHECK_EQ_STR(oc, "[\"c2\"]");
        free(oc);
        CHECK_EQ_INT(json_integer_value(json_object_get(p, "turn")), 1);
        CHECK_EQ_STR(
                json_string_value(json_object_get(
                        json_object_get(json_object_get(st, "sandbox"), "session_state"), "id")),
                "sb-1");
        CHECK_EQ_INT(json_integer_value(json_object_get(st, "turn")), 1);
        state = saved(st);
    }
    /* Every call that needs no approval ran, the one after the waiting call too. */
    CHECK_EQ_INT(echo_runs, 2);
    CHECK_EQ_INT(danger_runs, 0);
    CHECK_EQ_STR(sbx_buf_cstr(&s.log), "running:3 interrupted:1");
    CHECK_EQ_STR(sbx_buf_cstr(&s.hooks), "01");
    sbx_run_result_free(res);
    res = NULL;
    sbx_model_free(m);

    /* Approve c2: it runs once, then the model answers. */
    sbx_buf_reset(&s.log);
    sbx_buf_reset(&s.hooks);
    m = test_model_from_responses(dir, &file_no, final_turn);
    o = options(m, &s);
    json_t *dec = J("{\"c2\": {\"approved\": true}}");
    o.resume = state;
    o.decisions = dec;
    CHECK_OK(sbx_run(a, NULL, &o, &res, &err), &err);
    if (res) {
        CHECK_EQ_INT(sbx_run_result_interrupted(res), 0);
        CHECK_EQ_STR(sbx_run_result_text(res), "all done");
        CHECK_EQ_INT(sbx_run_result_turns(res), 2);
        CHECK_EQ_INT(json_integer_value(json_object_get(sbx_run_result_usage(res), "requests")), 2);
        CHECK_EQ_INT(json_integer_value(json_object_get(sbx_run_result_usage(res), "input_tokens")),
                     20);
        const json_t *st = sbx_run_result_state(res);
        CHECK_EQ_STR(json_string_value(json_object_get(st, "status")), "completed");
        CHECK_EQ_STR(json_string_value(json_object_get(st, "final_output")), "all done");
        CHECK_EQ_INT(json_array_size(json_object_get(st, "pending")), 0);
    }
    CHECK_EQ_INT(danger_runs, 1);
    CHECK_EQ_INT(echo_runs, 2);
    CHECK_EQ_STR(sbx_buf_cstr(&s.log), "running:0 completed:0");
    CHECK_EQ_STR(sbx_buf_cstr(&s.hooks), "00");
    CHECK_EQ_INT(s.notices.len, 0);

    /* A completed state cannot be continued. */
    json_t *done = res ? saved(sbx_run_result_state(res)) : NULL;
    sbx_run_result_free(res);
    res = NULL;
    o.resume = done;
    o.decisions = NULL;
    CHECK_ERR(sbx_run(a, NULL, &o, &res, &err), SBX_E_INVAL, &err,
              "run state: the run already completed");
    json_decref(done);
    json_decref(dec);
    json_decref(state);
    json_decref(input);
    sbx_model_free(m);
    seen_release(&s);
    sbx_agent_free(a);
}

static int items_contain(const json_t *items, const char *needle)
{
    char *d = sbx_json_dumps(items, 0);
    int in = strstr(d, needle) != NULL;
    free(d);
    return in;
}

static void test_reject_and_star(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_agent *a = make_agent("worker", "[\"danger\"]");
    struct seen s;
    seen_init(&s);
    echo_runs = danger_runs = 0;
    json_t *state = interrupted_run(a, &s);
    if (!state)
        return;

    /* Reject with a reason: the model reads it, the tool never runs. */
    struct sbx_model *m = test_model_from_responses(dir, &file_no, final_turn);
    struct sbx_run_options o = options(m, &s);
    json_decref(s.model_saw);
    s.model_saw = json_array();
    s.outputs_failed = 0;
    json_t *dec = J("{\"c2\": {\"approved\": false, \"message\": \"too risky\"}}");
    o.resume = state;
    o.decisions = dec;
    struct sbx_run_result *res = NULL;
    CHECK_OK(sbx_run(a, NULL, &o, &res, &err), &err);
    CHECK_EQ_INT(danger_runs, 0);
    CHECK_EQ_INT(echo_runs, 2);
    CHECK_EQ_INT(s.outputs_failed, 1);
    CHECK_EQ_INT(json_array_size(s.model_saw), 2);
    /* The model reads the reason verbatim, as the reference SDK sends it. */
    CHECK(items_contain(json_array_get(s.model_saw, 1), "\"output\":\"too risky\""));
    CHECK(!items_contain(json_array_get(s.model_saw, 1), "did not approve"));
    if (res) {
        /* The state keeps a log of the decision, bound to the call it answered. */
        const json_t *log = json_object_get(sbx_run_result_state(res), "decisions");
        const json_t *d = json_array_get(log, 0);
        CHECK_EQ_INT(json_array_size(log), 1);
        CHECK_EQ_STR(json_string_value(json_object_get(d, "call_id")), "c2");
        CHECK_EQ_STR(json_string_value(json_object_get(d, "tool")), "danger");
        CHECK_EQ_STR(json_string_value(json_object_get(d, "message")), "too risky");
        CHECK_EQ_STR(json_string_value(json_object_get(d, "by")), "caller");
        CHECK(json_is_false(json_object_get(d, "approved")));
    }
    sbx_run_result_free(res);
    res = NULL;
    sbx_model_free(m);
    json_decref(dec);

    /* A decision for a call that is not pending: nothing runs, nothing is saved. */
    sbx_buf_reset(&s.log);
    m = test_model_from_responses(dir, &file_no, final_turn);
    o = options(m, &s);
    dec = J("{\"c2\": {\"approved\": true}, \"c9\": {\"approved\": true}}");
    o.resume = state;
    o.decisions = dec;
    CHECK_ERR(sbx_run(a, NULL, &o, &res, &err), SBX_E_INVAL, &err,
              "no pending call 'c9' (pending: c2)");
    CHECK_EQ_INT(s.log.len, 0);
    json_decref(dec);
    dec = J("{\"c2\": {\"approved\": \"yes\"}}");
    o.decisions = dec;
    CHECK_ERR(sbx_run(a, NULL, &o, &res, &err), SBX_E_INVAL, &err, "decision for 'c2' must be");
    json_decref(dec);
    json_t *in = sbx_json_str("more");
    o.decisions = NULL;
    CHECK_ERR(sbx_run(a, in, &o, &res, &err), SBX_E_INVAL, &err, "takes no new input");
    json_decref(in);

    /* No decision: it interrupts again at once, with the same pending list. */
    o.decisions = NULL;
    CHECK_OK(sbx_run(a, NULL, &o, &res, &err), &err);
    if (res) {
        CHECK_EQ_INT(sbx_run_result_interrupted(res), 1);
        char *pd = sbx_json_dumps(sbx_run_result_interruptions(res), SBX_JSON_SORTED);
        char *was = sbx_json_dumps(json_object_get(state, "pending"), SBX_JSON_SORTED);
        CHECK_EQ_STR(pd, was);
        free(pd);
        free(was);
        CHECK_EQ_INT(json_integer_value(json_object_get(sbx_run_result_usage(res), "requests")), 1);
    }
    CHECK_EQ_INT(danger_runs, 0);
    CHECK_EQ_STR(sbx_buf_cstr(&s.log), "interrupted:1");
    sbx_run_result_free(res);
    res = NULL;

    /* "*" approves every pending call. */
    dec = J("{\"*\": {\"approved\": true}}");
    o.decisions = dec;
    CHECK_OK(sbx_run(a, NULL, &o, &res, &err), &err);
    CHECK_EQ_INT(danger_runs, 1);
    if (res)
        CHECK_EQ_STR(sbx_run_result_text(res), "all done");
    sbx_run_result_free(res);
    json_decref(dec);
    sbx_model_free(m);
    json_decref(state);
    seen_release(&s);
    sbx_agent_free(a);
}

static int ask_all(void *data, const struct sbx_approval_request *rq, struct sbx_error *err)
{
    struct sbx_buf *b = data;
    sbx_buf_addf(b, NULL, "%s:%s:%d ", rq->call_id, rq->tool, rq->policy);
    return strcmp(rq->tool, "echo") == 0 && rq->args &&
           strcmp(json_string_value(json_object_get(rq->args, "t")), "c") == 0;
}

static void test_callback(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_agent *a = make_agent("worker", "[\"danger\"]");
    struct seen s;
    seen_init(&s);
    struct sbx_buf asked;
    sbx_buf_init(&asked, 4096);
    echo_runs = danger_runs = 0;
    struct sbx_model *m = test_model_from_responses(dir, &file_no, first_turn);
    struct sbx_run_options o = options(m, &s);
    o.approve = ask_all;
    o.approve_data = &asked;
    struct sbx_run_result *res = NULL;
    json_t *input = sbx_json_str("go");
    CHECK_OK(sbx_run(a, input, &o, &res, &err), &err);
    /* The callback decides (told the policy): only c3 needs approval, c1 and c2 run. */
    CHECK_EQ_STR(sbx_buf_cstr(&asked), "c1:echo:0 c2:danger:1 c3:echo:0 ");
    CHECK_EQ_INT(danger_runs, 1);
    CHECK_EQ_INT(echo_runs, 1);
    if (res) {
        CHECK_EQ_INT(json_array_size(sbx_run_result_interruptions(res)), 1);
        CHECK_EQ_STR(json_string_value(json_object_get(
                             json_array_get(sbx_run_result_interruptions(res), 0), "call_id")),
                     "c3");
    }
    sbx_run_result_free(res);
    json_decref(input);
    sbx_model_free(m);
    sbx_buf_release(&asked);
    seen_release(&s);
    sbx_agent_free(a);
}

/* Every running checkpoint's state has every field, in the order a new state has them (a
 * checkpoint log writes its records in that order), and the fields the run changed. */
static void test_checkpoint_fields(void)
{
    static const char *const order =
            "format version status error updated_at start_agent current_agent agents "
            "agent_files turn max_turns items input_items usage model model_settings "
            "previous_response_id sent_upto tools_used conversation open_calls pending "
            "decisions always run_id final_output sandbox meta";
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_agent *a = make_agent("worker", NULL);
    struct seen s;
    seen_init(&s);
    static const char *const two[] = {
            RESP("r1", FC("c1", "echo", "{\\\"t\\\":\\\"a\\\"}")),
            RESP("r2", FC("c2", "echo", "{}")),
            RESP("r3", MSG("fin")),
            NULL,
    };
    struct sbx_model *m = test_model_from_responses(dir, &file_no, two);
    struct sbx_run_options o = options(m, &s);
    struct sbx_run_result *res = NULL;
    json_t *input = sbx_json_str("go");
    CHECK_OK(sbx_run(a, input, &o, &res, &err), &err);
    CHECK_EQ_STR(sbx_buf_cstr(&s.log), "running:1 running:0 running:1 running:0 completed:0");
    for (size_t i = 0; i + 1 < json_array_size(s.states); i++) {
        const json_t *st = json_array_get(s.states, i);
        struct sbx_buf keys;
        sbx_buf_init(&keys, SBX_BUF_NOLIMIT);
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)st, k, v)
        {
            if (sbx_buf_addf(&keys, NULL, "%s%s", keys.len ? " " : "", k) < 0)
                break;
        }
        CHECK_EQ_STR(sbx_buf_cstr(&keys), order);
        sbx_buf_release(&keys);
        CHECK_EQ_INT(json_integer_value(json_object_get(st, "turn")), (json_int_t)(i / 2 + 1));
        CHECK_EQ_INT(json_array_size(json_object_get(st, "items")), 2 + 2 * (i / 2) + i % 2);
        CHECK(json_is_array(json_object_get(st, "tools_used")));
        CHECK_EQ_INT(json_array_size(json_object_get(st, "open_calls")), i % 2 ? 0 : 1);
        CHECK_EQ_STR(json_string_value(json_object_get(
                             json_array_get(json_object_get(st, "agents"), 0), "name")),
                     "worker");
    }
    /* The tool's agent counts as having used a tool from the turn its call ran. */
    CHECK_EQ_INT(json_array_size(json_object_get(json_array_get(s.states, 0), "tools_used")), 0);
    CHECK_EQ_INT(json_array_size(json_object_get(json_array_get(s.states, 1), "tools_used")), 1);
    sbx_run_result_free(res);
    json_decref(input);
    sbx_model_free(m);
    seen_release(&s);
    sbx_agent_free(a);
}

static int ask_always(void *data, const struct sbx_approval_request *rq,
                      struct sbx_approval_answer *out, struct sbx_error *err)
{
    out->decision = SBX_APPROVAL_APPROVE;
    out->always = 1;
    out->by = "test";
    return 0;
}

/* Checkpoints written with the run state log, each read back at once. */
struct logged_run {
    char *path;
    struct sbx_run_state_log *log;
    int running, same;
};

static int log_checkpoint(void *data, const json_t *state, struct sbx_error *err)
{
    struct logged_run *lr = data;
    int rc = sbx_run_state_log_write(lr->log, state, NULL, err);
    json_t *back = NULL;
    if (rc == 0)
        rc = sbx_run_state_read_file(lr->path, &back, err);
    if (rc == 0 && strcmp(json_string_value(json_object_get(state, "status")), "running") == 0) {
        lr->running++;
        lr->same += json_equal(json_object_get(back, "decisions"),
                               json_object_get(state, "decisions")) &&
                    json_equal(json_object_get(back, "always"), json_object_get(state, "always"));
    }
    json_decref(back);
    return rc;
}

/* Decisions taken while a run goes on reach its checkpoint log: a crash after them resumes
 * with them (the run's lists are not changed in place under the log). */
static void test_decisions_logged(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_agent *a = make_agent("worker", "[\"danger\"]");
    struct seen s;
    seen_init(&s);
    static const char *const three[] = {
            RESP("r1", FC("c1", "danger", "{}")),
            RESP("r2", FC("c2", "danger", "{}")),
            RESP("r3", MSG("fin")),
            NULL,
    };
    struct sbx_model *m = test_model_from_responses(dir, &file_no, three);
    struct sbx_run_options o = options(m, &s);
    struct logged_run lr = {.path = sbx_xasprintf("%s/logged.json", dir)};
    CHECK_OK(sbx_run_state_log_open(lr.path, &lr.log, &err), &err);
    o.checkpoint = log_checkpoint;
    o.checkpoint_data = &lr;
    o.ask = ask_always;
    struct sbx_run_result *res = NULL;
    json_t *input = sbx_json_str("go");
    CHECK_OK(sbx_run(a, input, &o, &res, &err), &err);
    CHECK_EQ_INT(lr.running, 4);
    CHECK_EQ_INT(lr.same, lr.running);
    if (res) {
        const json_t *st = sbx_run_result_state(res);
        CHECK_EQ_INT(json_array_size(json_object_get(st, "always")), 1);
        CHECK(json_array_size(json_object_get(st, "decisions")) >= 2);
    }
    sbx_run_result_free(res);
    sbx_run_state_log_close(lr.log);
    CHECK_OK(sbx_run_state_remove_file(lr.path, &err), &err);
    free(lr.path);
    json_decref(input);
    sbx_model_free(m);
    seen_release(&s);
    sbx_agent_free(a);
}

static void test_crash_resume(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_agent *a = make_agent("worker", NULL);
    struct seen s;
    seen_init(&s);
    echo_runs = danger_runs = 0;
    static const char *const two[] = {
            RESP("r1", FC("c1", "echo", "{\\\"t\\\":\\\"a\\\"}")),
            RESP("r2", FC("c2", "danger", "{}")),
            RESP("r3", MSG("fin")),
            NULL,
    };
    struct sbx_model *m = test_model_from_responses(dir, &file_no, two);
    struct sbx_run_options o = options(m, &s);
    struct sbx_run_result *res = NULL;
    json_t *input = sbx_json_str("go");
    CHECK_OK(sbx_run(a, input, &o, &res, &err), &err);
    CHECK_EQ_STR(sbx_buf_cstr(&s.log), "running:1 running:0 running:1 running:0 completed:0");
    CHECK_EQ_STR(sbx_buf_cstr(&s.hooks), "00000");
    sbx_run_result_free(res);
    res = NULL;
    sbx_model_free(m);
    json_t *mid_calls = saved(json_array_get(s.states, 2));  /* turn 2, c2 running */
    json_t *after_turn = saved(json_array_get(s.states, 1)); /* turn 1 done */

    /* A state saved while c2 ran: it runs again, said so, and no model call repeats turn 2. */
    static const char *const fin[] = {RESP("r3", MSG("fin")), NULL};
    m = test_model_from_responses(dir, &file_no, fin);
    o = options(m, &s);
    o.resume = mid_calls;
    sbx_buf_reset(&s.notices);
    CHECK_OK(sbx_run(a, NULL, &o, &res, &err), &err);
    CHECK_EQ_STR(sbx_buf_cstr(&s.notices),
                 "tool call c2 (danger) was running when the run stopped; running it again\n");
    CHECK_EQ_INT(danger_runs, 2);
    if (res) {
        CHECK_EQ_STR(sbx_run_result_text(res), "fin");
        CHECK_EQ_INT(sbx_run_result_turns(res), 3);
        CHECK_EQ_INT(json_integer_value(json_object_get(sbx_run_result_usage(res), "requests")), 3);
    }
    sbx_run_result_free(res);
    res = NULL;
    sbx_model_free(m);

    /* A state saved between turns: the turn in flight is repeated, and counted once. */
    static const char *const rest[] = {RESP("r2", FC("c2", "danger", "{}")), RESP("r3", MSG("fin")),
                                       NULL};
    m = test_model_from_responses(dir, &file_no, rest);
    o = options(m, &s);
    o.resume = after_turn;
    sbx_buf_reset(&s.notices);
    CHECK_OK(sbx_run(a, NULL, &o, &res, &err), &err);
    CHECK_EQ_STR(sbx_buf_cstr(&s.notices),
                 "turn 2 was in flight when the run stopped; repeating it\n");
    if (res) {
        CHECK_EQ_STR(sbx_run_result_text(res), "fin");
        CHECK_EQ_INT(sbx_run_result_turns(res), 3);
        CHECK_EQ_INT(json_integer_value(json_object_get(sbx_run_result_usage(res), "requests")), 3);
        CHECK_EQ_INT(json_array_size(sbx_run_result_items(res)), 6);
    }
    sbx_run_result_free(res);
    sbx_model_free(m);
    json_decref(mid_calls);
    json_decref(after_turn);
    json_decref(input);
    seen_release(&s);
    sbx_agent_free(a);
}

static int failing_checkpoint(void *data, const json_t *state, struct sbx_error *err)
{
    struct seen *s = data;
    on_checkpoint(data, state, err);
    if (strcmp(json_string_value(json_object_get(state, "status")), "failed") == 0)
        return sbx_error_set(err, SBX_E_IO, 0, "disk full");
    return s->log.len > 12 ? sbx_error_set(err, SBX_E_IO, 0, "disk full") : 0;
}

static void test_failures(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_agent *a = make_agent("worker", NULL);
    struct seen s;
    seen_init(&s);
    static const char *const two[] = {
            RESP("r1", FC("c1", "echo", "{}")),
            RESP("r2", FC("c2", "echo", "{}")),
            NULL,
    };
    /* A checkpoint that cannot be saved ends the run; the failed state records the error. */
    struct sbx_model *m = test_model_from_responses(dir, &file_no, two);
    struct sbx_run_options o = options(m, &s);
    o.checkpoint = failing_checkpoint;
    struct sbx_run_result *res = NULL;
    json_t *input = sbx_json_str("go");
    CHECK_ERR(sbx_run(a, input, &o, &res, &err), SBX_E_IO, &err, "disk full");
    CHECK_EQ_STR(sbx_buf_cstr(&s.log), "running:1 running:0 failed:0");
    json_t *last = json_array_get(s.states, json_array_size(s.states) - 1);
    CHECK_CONTAINS(json_string_value(json_object_get(last, "error")), "disk full");
    CHECK_EQ_INT(json_integer_value(json_object_get(last, "turn")), 1);
    CHECK_EQ_STR(sbx_buf_cstr(&s.hooks), "001");
    sbx_model_free(m);

    /* The model fails in turn 2: the state says turn 1, so a resume repeats turn 2. */
    static const char *const one[] = {RESP("r1", FC("c1", "echo", "{}")), NULL};
    m = test_model_from_responses(dir, &file_no, one);
    seen_release(&s);
    seen_init(&s);
    o = options(m, &s);
    CHECK_ERR(sbx_run(a, input, &o, &res, &err), SBX_E_NOTFOUND, &err, "");
    CHECK_EQ_STR(sbx_buf_cstr(&s.log), "running:1 running:0 failed:0");
    last = json_array_get(s.states, json_array_size(s.states) - 1);
    CHECK_EQ_INT(json_integer_value(json_object_get(last, "turn")), 1);
    json_t *st = saved(last);
    sbx_model_free(m);
    static const char *const fin[] = {RESP("r2", MSG("ok")), NULL};
    m = test_model_from_responses(dir, &file_no, fin);
    o = options(m, &s);
    o.resume = st;
    sbx_buf_reset(&s.notices);
    CHECK_OK(sbx_run(a, NULL, &o, &res, &err), &err);
    CHECK_EQ_STR(sbx_buf_cstr(&s.notices),
                 "turn 2 was in flight when the run stopped; repeating it\n");
    if (res)
        CHECK_EQ_INT(sbx_run_result_turns(res), 2);
    sbx_run_result_free(res);
    res = NULL;

    /* The state's current agent must be reachable from the start agent. */
    json_t *other = json_deep_copy(st);
    sbx_json_set(other, "current_agent", sbx_json_str("stranger"));
    o.resume = other;
    CHECK_ERR(sbx_run(a, NULL, &o, &res, &err), SBX_E_INVAL, &err,
              "its current agent 'stranger' is not reachable from agent 'worker'");
    json_decref(other);
    json_decref(st);
    json_decref(input);
    sbx_model_free(m);
    seen_release(&s);
    sbx_agent_free(a);
}

static void test_handoff_held_back(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_agent *a = make_agent("worker", "[\"danger\"]");
    struct sbx_agent *h = NULL;
    CHECK_OK(sbx_agent_new("helper", &h, &err), &err);
    CHECK_OK(sbx_agent_add_handoff(a, h, &err), &err);
    struct seen s;
    seen_init(&s);
    danger_runs = 0;
    static const char *const r1[] = {
            RESP("r1", FC("h1", "transfer_to_helper", "{}") "," FC("c1", "danger", "{}")), NULL};
    struct sbx_model *m = test_model_from_responses(dir, &file_no, r1);
    struct sbx_run_options o = options(m, &s);
    struct sbx_run_result *res = NULL;
    json_t *input = sbx_json_str("go"), *state = NULL;
    CHECK_OK(sbx_run(a, input, &o, &res, &err), &err);
    if (res) {
        const json_t *st = sbx_run_result_state(res);
        /* The handoff waits with the call that needs approval: the agent has not changed. */
        CHECK_EQ_STR(json_string_value(json_object_get(st, "current_agent")), "worker");
        char *oc = sbx_json_dumps(json_object_get(st, "open_calls"), 0);
        CHECK_EQ_STR(oc, "[\"h1\",\"c1\"]");
        free(oc);
        state = saved(st);
    }
    sbx_run_result_free(res);
    res = NULL;
    sbx_model_free(m);
    static const char *const r2[] = {RESP("r2", MSG("helped")), NULL};
    m = test_model_from_responses(dir, &file_no, r2);
    o = options(m, &s);
    json_t *dec = J("{\"c1\": {\"approved\": true}}");
    o.resume = state;
    o.decisions = dec;
    CHECK_OK(sbx_run(a, NULL, &o, &res, &err), &err);
    CHECK_EQ_INT(danger_runs, 1);
    if (res) {
        CHECK_EQ_STR(sbx_run_result_text(res), "helped");
        CHECK_EQ_STR(sbx_agent_name(sbx_run_result_last_agent(res)), "helper");
        CHECK_EQ_STR(json_string_value(json_object_get(sbx_run_result_state(res), "current_agent")),
                     "helper");
    }
    sbx_run_result_free(res);
    json_decref(dec);
    json_decref(state);
    json_decref(input);
    sbx_model_free(m);
    seen_release(&s);
    sbx_agent_free(a);
    sbx_agent_free(h);
}

static void test_nested(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_agent *inner = make_agent("inner", "[\"danger\"]");
    struct sbx_agent *outer = NULL;
    struct sbx_tool *as_tool = NULL;
    CHECK_OK(sbx_agent_new("outer", &outer, &err), &err);
    CHECK_OK(sbx_tool_new_agent(inner, "ask_inner", NULL, 0, &as_tool, &err), &err);
    CHECK_OK(sbx_agent_add_tool(outer, as_tool, &err), &err);
    sbx_tool_unref(as_tool);
    static const char *const r[] = {
            RESP("o1", FC("x1", "ask_inner", "{\\\"input\\\":\\\"do it\\\"}")),
            RESP("i1", FC("y1", "danger", "{}")),
            RESP("o2", MSG("could not")),
            NULL,
    };
    danger_runs = 0;
    struct sbx_model *m = test_model_from_responses(dir, &file_no, r);
    struct sbx_run_options o = {.model = m};
    struct sbx_run_result *res = NULL;
    json_t *input = sbx_json_str("go");
    CHECK_OK(sbx_run(outer, input, &o, &res, &err), &err);
    CHECK_EQ_INT(danger_runs, 0);
    if (res) {
        CHECK_EQ_INT(sbx_run_result_interrupted(res), 0);
        CHECK(items_contain(sbx_run_result_items(res),
                            "tool 'danger' needs approval, which a nested agent run cannot ask "
                            "for"));
    }
    sbx_run_result_free(res);
    json_decref(input);
    sbx_model_free(m);
    sbx_agent_free(outer);
    sbx_agent_free(inner);
}

/* The same state through the Chat Completions transport: the fake model server plays a turn
 * with three tool calls, the run interrupts, and the resumed run sends the tool outputs as chat
 * tool messages. */
static const char chat_script[] =
        "{\"turns\": ["
        "{\"chat\": {\"id\": \"k1\", \"object\": \"chat.completion\", \"choices\": [{\"index\": 0,"
        " \"finish_reason\": \"tool_calls\", \"message\": {\"role\": \"assistant\", \"content\":"
        " null, \"tool_calls\": ["
        "{\"id\": \"c1\", \"type\": \"function\", \"function\": {\"name\": \"echo\", \"arguments\":"
        " \"{\\\"t\\\":\\\"a\\\"}\"}},"
        "{\"id\": \"c2\", \"type\": \"function\", \"function\": {\"name\": \"danger\", "
        "\"arguments\": \"{}\"}},"
        "{\"id\": \"c3\", \"type\": \"function\", \"function\": {\"name\": \"echo\", \"arguments\":"
        " \"{\\\"t\\\":\\\"c\\\"}\"}}]}}],"
        " \"usage\": {\"prompt_tokens\": 10, \"completion_tokens\": 1, \"total_tokens\": 11}}},"
        "{\"chat\": {\"id\": \"k2\", \"object\": \"chat.completion\", \"choices\": [{\"index\": 0,"
        " \"finish_reason\": \"stop\", \"message\": {\"role\": \"assistant\", \"content\": "
        "\"chat done\"}}],"
        " \"usage\": {\"prompt_tokens\": 10, \"completion_tokens\": 1, \"total_tokens\": 11}}}"
        "]}";

/* The server's stdout stays open while it runs: it dies of EPIPE otherwise. */
static int fake_out = -1;

static pid_t start_fake(const char *script, const char *log, char *url, size_t urlsz)
{
    const char *src = getenv("SBX_SRCDIR");
    if (!src)
        return -1;
    char *server = sbx_xasprintf("%s/tests/fake-model/fake-model.py", src);
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        abort();
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], 1);
        execlp("python3", "python3", server, script, log, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    free(server);
    char port[16] = {0};
    size_t got = 0;
    ssize_t n = 1;
    while (got < sizeof(port) - 1 && !strchr(port, '\n') &&
           (n = read(p[0], port + got, sizeof(port) - 1 - got)) > 0)
        got += (size_t)n;
    fake_out = p[0];
    if (!strchr(port, '\n')) {
        close(fake_out);
        fake_out = -1;
        kill(pid, SIGTERM);
        waitpid(pid, NULL, 0);
        return -1;
    }
    port[strcspn(port, "\n")] = '\0';
    snprintf(url, urlsz, "http://127.0.0.1:%s/v1", port);
    return pid;
}

static void test_chat_transport(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char *script = sbx_xasprintf("%s/chat.json", dir);
    char *log = sbx_xasprintf("%s/chat-requests.jsonl", dir);
    FILE *f = fopen(script, "w");
    fputs(chat_script, f);
    fclose(f);
    char url[128];
    pid_t server = start_fake(script, log, url, sizeof(url));
    CHECK(server > 0);
    if (server <= 0) {
        printf("# the fake model server did not start (python3 and SBX_SRCDIR are needed)\n");
        free(script);
        free(log);
        return;
    }
    struct sbx_agent *a = make_agent("worker", "[\"danger\"]");
    struct seen s;
    seen_init(&s);
    echo_runs = danger_runs = 0;
    struct sbx_model_options mo = {
            .base_url = url, .api_key = "sk-test-chat", .api = SBX_MODEL_API_CHAT, .retries = -1};
    struct sbx_model *m = NULL;
    CHECK_OK(sbx_model_new("gpt-test", &mo, &m, &err), &err);
    struct sbx_run_options o = options(m, &s);
    struct sbx_run_result *res = NULL;
    json_t *input = sbx_json_str("go"), *state = NULL;
    CHECK_OK(sbx_run(a, input, &o, &res, &err), &err);
    if (res) {
        CHECK_EQ_INT(sbx_run_result_interrupted(res), 1);
        state = saved(sbx_run_result_state(res));
    }
    sbx_run_result_free(res);
    res = NULL;
    sbx_model_free(m);
    m = NULL;
    CHECK_EQ_INT(echo_runs, 2);
    CHECK_EQ_INT(danger_runs, 0);

    CHECK_OK(sbx_model_new("gpt-test", &mo, &m, &err), &err);
    o = options(m, &s);
    json_t *dec = J("{\"*\": {\"approved\": true}}");
    o.resume = state;
    o.decisions = dec;
    if (state)
        CHECK_OK(sbx_run(a, NULL, &o, &res, &err), &err);
    if (res)
        CHECK_EQ_STR(sbx_run_result_text(res), "chat done");
    CHECK_EQ_INT(danger_runs, 1);
    CHECK_EQ_INT(echo_runs, 2);
    sbx_run_result_free(res);
    kill(server, SIGTERM);
    waitpid(server, NULL, 0);
    close(fake_out);
    fake_out = -1;

    /* The second request carried the three tool outputs as tool messages. */
    struct sbx_buf b;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    f = fopen(log, "r");
    char line[65536];
    int lines = 0;
    while (f && fgets(line, sizeof(line), f))
        if (++lines == 2 && sbx_buf_adds(&b, line, NULL) < 0)
            abort();
    if (f)
        fclose(f);
    CHECK_EQ_INT(lines, 2);
    CHECK_CONTAINS(sbx_buf_cstr(&b), "\"tool_call_id\": \"c2\"");
    CHECK_CONTAINS(sbx_buf_cstr(&b), "boom");
    CHECK_CONTAINS(sbx_buf_cstr(&b), "echo:a");
    CHECK_CONTAINS(sbx_buf_cstr(&b), "echo:c");
    sbx_buf_release(&b);
    json_decref(dec);
    json_decref(state);
    json_decref(input);
    sbx_model_free(m);
    seen_release(&s);
    sbx_agent_free(a);
    free(script);
    free(log);
}

int main(void)
{
    TAP_START();
    if (!mkdtemp(dir))
        TAP_SKIP_ALL("cannot make a temporary directory");
    TAP_RUN(test_policy_match);
    TAP_RUN(test_bad_policies);
    TAP_RUN(test_interrupt_and_approve);
    TAP_RUN(test_reject_and_star);
    TAP_RUN(test_callback);
    TAP_RUN(test_crash_resume);
    TAP_RUN(test_checkpoint_fields);
    TAP_RUN(test_decisions_logged);
    TAP_RUN(test_failures);
    TAP_RUN(test_handoff_held_back);
    TAP_RUN(test_nested);
    TAP_RUN(test_chat_transport);
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
