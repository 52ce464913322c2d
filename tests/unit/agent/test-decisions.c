/* What answers a call that needs approval, and what a run state may carry of it: decisions
 * bound to the one call they answer (a later call repeating the id needs its own), item tools
 * named by their type (a "name" in the call changes nothing), "always" decisions, the ask
 * callback (the terminal's prompt), the reference SDK's rejection text, command rules (simple
 * commands only), HMAC-SHA-256 and the seal of a state's "always" list. Replay models. */
#include <pthread.h>

#include "tap.h"
#include "replay-model.h"
#include "sbx/hash.h"
#include "sbx/json.h"
#include "sbx/runner.h"
#include "sbx/runstate.h"
#include "sbx/yaml.h"

static char dir[] = "/tmp/sbx-test-decisions.XXXXXX";
static int file_no;

#define FC(id, name, args)                                                                    \
    "{\"type\":\"function_call\",\"call_id\":\"" id "\",\"name\":\"" name "\",\"arguments\":" \
    "\"" args "\"}"
#define MSG(text)                                                                          \
    "{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\"," \
    "\"text\":\"" text "\"}]}"
#define RESP(id, items) "{\"id\":\"" id "\",\"output\":[" items "]}"

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

/* "danger" records every argument it ran with, sorted (calls of a turn run in parallel
 * threads, in no set order). */
static char ran[4096];
static pthread_mutex_t ran_lock = PTHREAD_MUTEX_INITIALIZER;

static int by_text(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void ran_add(const char *t)
{
    char *words[64], copy[sizeof(ran) + 64];
    size_t n = 0;
    pthread_mutex_lock(&ran_lock);
    snprintf(copy, sizeof(copy), "%s%s%.60s", ran, ran[0] ? " " : "", t);
    for (char *p = copy, *w; n < 64 && (w = strsep(&p, " "));)
        words[n++] = w;
    qsort(words, n, sizeof(*words), by_text);
    ran[0] = '\0';
    for (size_t i = 0, len = 0; i < n; i++)
        len += (size_t)snprintf(ran + len, sizeof(ran) - len, "%s%s", i ? " " : "", words[i]);
    pthread_mutex_unlock(&ran_lock);
}

static int danger_fn(const json_t *args, const struct sbx_tool_call *call,
                     struct sbx_tool_output *out, struct sbx_error *err)
{
    const char *t = json_string_value(json_object_get(args, "t"));
    ran_add(t ? t : "-");
    return sbx_buf_addf(&out->text, err, "ran %s", t ? t : "-");
}

static int patch_fn(const struct sbx_tool_call *call, json_t **out, struct sbx_error *err)
{
    ran_add("patch");
    *out = json_pack("{s:s, s:s, s:s, s:s}", "type", "apply_patch_call_output", "call_id",
                     call->call_id, "status", "completed", "output", "patched");
    return 0;
}

static struct sbx_agent *make_agent(const char *policy)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_agent *a = NULL;
    json_t *params = J("{\"type\":\"object\",\"properties\":{\"t\":{\"type\":\"string\"}}}");
    struct sbx_function_tool spec = {.name = "danger", .parameters = params, .fn = danger_fn};
    json_t *def = J("{\"type\":\"apply_patch\"}");
    struct sbx_item_tool ispec = {.name = "apply_patch",
                                  .item_type = "apply_patch_call",
                                  .definition = def,
                                  .fn = patch_fn};
    struct sbx_tool *t = NULL, *p = NULL;
    json_t *pol = J(policy);
    if (sbx_agent_new("worker", &a, &err) < 0 || sbx_tool_new_function(&spec, &t, &err) < 0 ||
        sbx_tool_new_item(&ispec, &p, &err) < 0 || sbx_agent_add_tool(a, t, &err) < 0 ||
        sbx_agent_add_tool(a, p, &err) < 0 || sbx_agent_set_needs_approval(a, pol, &err) < 0) {
        printf("# %s\n", err.msg);
        abort();
    }
    sbx_tool_unref(t);
    sbx_tool_unref(p);
    json_decref(params);
    json_decref(def);
    json_decref(pol);
    return a;
}

/* What the model saw last, and the approval events. */
struct seen {
    json_t *items;
    struct sbx_buf approvals; /* "call:approved|rejected:by" per APPROVAL event */
    struct sbx_buf notices;
};

static int on_turn(void *data, struct sbx_agent *agent, const json_t *items,
                   struct sbx_turn_prep *out, struct sbx_error *err)
{
    struct seen *s = data;
    json_decref(s->items);
    s->items = json_deep_copy(items);
    return 0;
}

static void on_event(const struct sbx_event *ev, void *data)
{
    struct seen *s = data;
    if (ev->type == SBX_EVENT_APPROVAL)
        sbx_buf_addf(&s->approvals, NULL, "%s:%s:%s ",
                     json_string_value(json_object_get(ev->item, "call_id")),
                     json_is_true(json_object_get(ev->item, "approved")) ? "approved" : "rejected",
                     json_string_value(json_object_get(ev->item, "by")));
    if (ev->type == SBX_EVENT_NOTICE)
        sbx_buf_addf(&s->notices, NULL, "%s\n", ev->text);
}

static struct sbx_run_options options(struct sbx_model *m, struct seen *s)
{
    struct sbx_run_options o = {.model = m,
                                .turn_hook = on_turn,
                                .turn_hook_data = s,
                                .on_event = on_event,
                                .event_data = s};
    return o;
}

static void seen_init(struct seen *s)
{
    s->items = NULL;
    sbx_buf_init(&s->approvals, 1 << 16);
    sbx_buf_init(&s->notices, 1 << 16);
    ran[0] = '\0';
}

static void seen_release(struct seen *s)
{
    json_decref(s->items);
    sbx_buf_release(&s->approvals);
    sbx_buf_release(&s->notices);
}

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

/* The output the model read for call id, as text (or "" when none). */
static const char *output_of(const json_t *items, const char *id)
{
    size_t i;
    json_t *it;
    json_array_foreach(items, i, it)
    {
        const char *type = json_string_value(json_object_get(it, "type"));
        if (type && strstr(type, "_output") &&
            strcmp(json_string_value(json_object_get(it, "call_id")), id) == 0)
            return json_string_value(json_object_get(it, "output"));
    }
    return "";
}

/* Run a in a fresh run over responses; the interrupted state (saved form) or NULL. */
static json_t *run_fresh(struct sbx_agent *a, struct seen *s, const char *const *responses,
                         struct sbx_run_options *extra, int want_interrupted)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_model *m = test_model_from_responses(dir, &file_no, responses);
    struct sbx_run_options o = extra ? *extra : options(m, s);
    o.model = m;
    struct sbx_run_result *res = NULL;
    json_t *input = sbx_json_str("go"), *state = NULL;
    CHECK_OK(sbx_run(a, input, &o, &res, &err), &err);
    if (res) {
        CHECK_EQ_INT(sbx_run_result_interrupted(res), want_interrupted);
        if (want_interrupted)
            state = saved(sbx_run_result_state(res));
    }
    sbx_run_result_free(res);
    json_decref(input);
    sbx_model_free(m);
    return state;
}

/* N3: an approval is used once, by the call it was given for. */
static void test_bound_once(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_agent *a = make_agent("[\"danger\"]");
    struct seen s;
    seen_init(&s);
    static const char *const first[] = {
            RESP("r1", FC("call_0", "danger", "{\\\"t\\\":\\\"one\\\"}")), NULL};
    json_t *state = run_fresh(a, &s, first, NULL, 1);
    if (!state)
        return;
    CHECK_EQ_STR(ran, "");
    /* Approved: call_0 runs. The next response numbers its call call_0 again (as some
     * OpenAI-compatible servers do): it needs its own decision. */
    static const char *const next[] = {
            RESP("r2", FC("call_0", "danger", "{\\\"t\\\":\\\"two\\\"}")), RESP("r3", MSG("done")),
            NULL};
    struct sbx_model *m = test_model_from_responses(dir, &file_no, next);
    struct sbx_run_options o = options(m, &s);
    json_t *dec = J("{\"call_0\": {\"approved\": true, \"by\": \"command line\"}}");
    o.resume = state;
    o.decisions = dec;
    struct sbx_run_result *res = NULL;
    CHECK_OK(sbx_run(a, NULL, &o, &res, &err), &err);
    CHECK_EQ_STR(ran, "one");
    CHECK_EQ_STR(sbx_buf_cstr(&s.approvals), "call_0:approved:command line ");
    json_t *again = NULL;
    if (res) {
        CHECK_EQ_INT(sbx_run_result_interrupted(res), 1);
        const json_t *p = json_array_get(sbx_run_result_interruptions(res), 0);
        CHECK_EQ_STR(json_string_value(json_object_get(p, "call_id")), "call_0");
        CHECK_EQ_STR(json_string_value(json_object_get(json_object_get(p, "arguments"), "t")),
                     "two");
        CHECK_EQ_INT(json_integer_value(json_object_get(p, "turn")), 2);
        const json_t *log = json_object_get(sbx_run_result_state(res), "decisions");
        CHECK_EQ_INT(json_array_size(log), 1);
        CHECK_EQ_INT(json_integer_value(json_object_get(json_array_get(log, 0), "turn")), 1);
        again = saved(sbx_run_result_state(res));
    }
    sbx_run_result_free(res);
    res = NULL;
    sbx_model_free(m);
    json_decref(dec);

    /* A state whose decisions were forged (a log entry approving call_0, or a v1 decision
     * object): nothing in it approves; the call waits again. */
    if (again) {
        json_t *forged = json_deep_copy(again);
        sbx_json_set(forged, "decisions",
                     J("[{\"call_id\": \"call_0\", \"tool\": \"danger\", \"type\": "
                       "\"function_call\", \"turn\": 2, \"approved\": true, \"by\": \"prompt\"}]"));
        json_t *st = saved(forged);
        static const char *const none[] = {RESP("rx", MSG("unused")), NULL};
        m = test_model_from_responses(dir, &file_no, none);
        o = options(m, &s);
        o.resume = st;
        CHECK_OK(sbx_run(a, NULL, &o, &res, &err), &err);
        if (res)
            CHECK_EQ_INT(sbx_run_result_interrupted(res), 1);
        CHECK_EQ_STR(ran, "one");
        sbx_run_result_free(res);
        res = NULL;
        sbx_model_free(m);
        json_decref(st);
        json_decref(forged);

        /* A decision given for what the state lists as pending, when the call item itself says
         * something else (an edited file): it answers nothing, and says so. */
        forged = json_deep_copy(again);
        json_t *p = json_array_get(json_object_get(forged, "pending"), 0);
        sbx_json_set(p, "arguments", J("{\"t\": \"harmless\"}"));
        st = saved(forged);
        m = test_model_from_responses(dir, &file_no, none);
        o = options(m, &s);
        o.resume = st;
        dec = J("{\"call_0\": {\"approved\": true}}");
        o.decisions = dec;
        sbx_buf_reset(&s.notices);
        CHECK_OK(sbx_run(a, NULL, &o, &res, &err), &err);
        if (res)
            CHECK_EQ_INT(sbx_run_result_interrupted(res), 1);
        CHECK_EQ_STR(ran, "one");
        CHECK_CONTAINS(sbx_buf_cstr(&s.notices),
                       "the decision for call call_0 (danger) was not used");
        sbx_run_result_free(res);
        sbx_model_free(m);
        json_decref(dec);
        json_decref(st);
        json_decref(forged);
    }
    json_decref(again);
    json_decref(state);
    seen_release(&s);
    sbx_agent_free(a);
}

/* N2: an apply_patch_call is the apply_patch tool whatever "name" it carries. */
static void test_item_tool_name(void)
{
    struct sbx_agent *a = make_agent("[\"apply_patch\"]");
    struct seen s;
    seen_init(&s);
    static const char *const turns[] = {
            RESP("r1", "{\"type\":\"apply_patch_call\",\"call_id\":\"p1\",\"name\":\"harmless\","
                       "\"operation\":{\"type\":\"create_file\",\"path\":\"x\",\"diff\":\"+x\"}}"),
            NULL};
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_model *m = test_model_from_responses(dir, &file_no, turns);
    struct sbx_run_options o = options(m, &s);
    struct sbx_run_result *res = NULL;
    json_t *input = sbx_json_str("go");
    CHECK_OK(sbx_run(a, input, &o, &res, &err), &err);
    CHECK_EQ_STR(ran, "");
    if (res) {
        CHECK_EQ_INT(sbx_run_result_interrupted(res), 1);
        const json_t *p = json_array_get(sbx_run_result_interruptions(res), 0);
        CHECK_EQ_STR(json_string_value(json_object_get(p, "tool")), "apply_patch");
        CHECK_EQ_STR(json_string_value(json_object_get(p, "type")), "apply_patch_call");
    }
    sbx_run_result_free(res);
    json_decref(input);
    sbx_model_free(m);
    seen_release(&s);
    sbx_agent_free(a);
}

/* "Always" decisions: an approval answers every later call of the tool; a rejection sends its
 * message verbatim; an approval wins over a rejection. */
static void test_always(void)
{
    struct sbx_agent *a = make_agent("[\"danger\"]");
    struct seen s;
    seen_init(&s);
    static const char *const two[] = {RESP("r1", FC("c1", "danger", "{\\\"t\\\":\\\"a\\\"}")),
                                      RESP("r2", FC("c2", "danger", "{\\\"t\\\":\\\"b\\\"}")),
                                      RESP("r3", MSG("done")), NULL};
    struct sbx_run_options o = options(NULL, &s);
    json_t *al = J("[{\"tool\": \"dang*\", \"approved\": true, \"by\": \"command line\"}]");
    o.always = al;
    run_fresh(a, &s, two, &o, 0);
    CHECK_EQ_STR(ran, "a b");
    CHECK_EQ_STR(sbx_buf_cstr(&s.approvals),
                 "c1:approved:always (command line) c2:approved:always (command line) ");
    json_decref(al);

    seen_release(&s);
    seen_init(&s);
    al = J("[{\"tool\": \"danger\", \"approved\": false, \"message\": \"not today\"}]");
    o = options(NULL, &s);
    o.always = al;
    run_fresh(a, &s, two, &o, 0);
    CHECK_EQ_STR(ran, "");
    CHECK_EQ_STR(output_of(s.items, "c1"), "not today");
    CHECK_EQ_STR(output_of(s.items, "c2"), "not today");
    json_decref(al);

    seen_release(&s);
    seen_init(&s);
    al = J("[{\"tool\": \"danger\", \"approved\": false}, {\"tool\": \"*\", \"approved\": true}]");
    o = options(NULL, &s);
    o.always = al;
    run_fresh(a, &s, two, &o, 0);
    CHECK_EQ_STR(ran, "a b");
    json_decref(al);

    /* A bad list is refused before anything runs. */
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_model *m = test_model_from_responses(dir, &file_no, two);
    struct sbx_run_result *res = NULL;
    json_t *input = sbx_json_str("go");
    al = J("[{\"tool\": 3, \"approved\": true}]");
    o = options(m, &s);
    o.always = al;
    CHECK_ERR(sbx_run(a, input, &o, &res, &err), SBX_E_INVAL, &err, "always decision 1 must be");
    json_decref(al);
    json_decref(input);
    sbx_model_free(m);
    seen_release(&s);
    sbx_agent_free(a);
}

/* The ask callback (the terminal's prompt): answers per call, "always", and wait/stop. */
static int asked_n;
static int ask_fn(void *data, const struct sbx_approval_request *rq,
                  struct sbx_approval_answer *out, struct sbx_error *err)
{
    const char *t = json_string_value(json_object_get(rq->args, "t"));
    asked_n++;
    out->by = "test";
    if (strcmp(t, "yes") == 0) {
        out->decision = SBX_APPROVAL_APPROVE;
    } else if (strcmp(t, "no") == 0) {
        out->decision = SBX_APPROVAL_REJECT;
        out->message = sbx_xstrdup("because");
    } else if (strcmp(t, "plain-no") == 0) {
        out->decision = SBX_APPROVAL_REJECT;
    } else if (strcmp(t, "always") == 0) {
        out->decision = SBX_APPROVAL_APPROVE;
        out->always = 1;
    } else {
        out->decision = SBX_APPROVAL_WAIT;
        out->stop = strcmp(t, "stop") == 0;
    }
    return 0;
}

static void test_ask(void)
{
    struct sbx_agent *a = make_agent("[\"danger\"]");
    struct seen s;
    seen_init(&s);
    static const char *const turns[] = {
            RESP("r1", FC("c1", "danger", "{\\\"t\\\":\\\"yes\\\"}") "," FC(
                               "c2", "danger",
                               "{\\\"t\\\":\\\"no\\\"}") "," FC("c3", "danger",
                                                                "{\\\"t\\\":\\\"plain-no\\\"}")),
            RESP("r2", MSG("done")), NULL};
    struct sbx_run_options o = options(NULL, &s);
    o.ask = ask_fn;
    asked_n = 0;
    run_fresh(a, &s, turns, &o, 0);
    CHECK_EQ_STR(ran, "yes");
    CHECK_EQ_INT(asked_n, 3);
    CHECK_EQ_STR(output_of(s.items, "c2"), "because");
    CHECK_EQ_STR(output_of(s.items, "c3"), SBX_APPROVAL_REJECTED_TEXT);
    CHECK_EQ_STR(sbx_buf_cstr(&s.approvals), "c1:approved:test c2:rejected:test c3:rejected:test ");

    /* "Always": the first answer covers the later calls of the tool, in this turn and the next. */
    seen_release(&s);
    seen_init(&s);
    static const char *const many[] = {
            RESP("r1", FC("c1", "danger", "{\\\"t\\\":\\\"always\\\"}") "," FC(
                               "c2", "danger", "{\\\"t\\\":\\\"x\\\"}")),
            RESP("r2", FC("c3", "danger", "{\\\"t\\\":\\\"y\\\"}")), RESP("r3", MSG("done")), NULL};
    asked_n = 0;
    o = options(NULL, &s);
    o.ask = ask_fn;
    run_fresh(a, &s, many, &o, 0);
    CHECK_EQ_INT(asked_n, 1);
    CHECK_EQ_STR(ran, "always x y");

    /* Stop: the call and every later undecided one wait, unasked; the others still run. */
    seen_release(&s);
    seen_init(&s);
    static const char *const stop[] = {
            RESP("r1", FC("c1", "danger", "{\\\"t\\\":\\\"stop\\\"}") "," FC(
                               "c2", "danger", "{\\\"t\\\":\\\"yes\\\"}")),
            NULL};
    asked_n = 0;
    o = options(NULL, &s);
    o.ask = ask_fn;
    json_t *st = run_fresh(a, &s, stop, &o, 1);
    CHECK_EQ_INT(asked_n, 1);
    CHECK_EQ_STR(ran, "");
    if (st) {
        CHECK_EQ_INT(json_array_size(json_object_get(st, "pending")), 2);
        CHECK_EQ_INT(json_array_size(json_object_get(st, "always")), 0);
    }
    json_decref(st);
    seen_release(&s);
    sbx_agent_free(a);
}

static int simple(const char *cmd, const char *want)
{
    char *words = NULL;
    int r = sbx_approval_command(cmd, &words);
    int ok = want ? r == 1 && strcmp(words, want) == 0 : r == 0 && !words;
    if (!ok)
        printf("# '%s': %d '%s'\n", cmd, r, words ? words : "(none)");
    free(words);
    return ok;
}

static int needs(const char *policy, const char *args)
{
    json_t *p = J(policy), *a = J(args);
    int m = sbx_approval_policy_match(p, "exec_command", a);
    json_decref(p);
    json_decref(a);
    return m;
}

/* N11: a command rule matches a simple command only. */
static void test_commands(void)
{
    CHECK(simple("ls", "ls"));
    CHECK(simple("  ls   -la\tsrc ", "ls -la src"));
    CHECK(simple("cat 'my file' \"other file\" a\\ b", "cat my file other file a b"));
    CHECK(simple("cat \"a;b\" 'c|d' e\\&f", "cat a;b c|d e&f"));
    CHECK(simple("\"rm\" -rf x", "rm -rf x"));
    CHECK(simple("grep -r 'x$' .", "grep -r x$ ."));
    CHECK(simple("ls; echo x > y", NULL));
    CHECK(simple("ls && rm x", NULL));
    CHECK(simple("ls || rm x", NULL));
    CHECK(simple("ls | sh", NULL));
    CHECK(simple("cat < /etc/passwd", NULL));
    CHECK(simple("ls > out", NULL));
    CHECK(simple("ls $(rm x)", NULL));
    CHECK(simple("ls `rm x`", NULL));
    CHECK(simple("ls \"$(rm x)\"", NULL));
    CHECK(simple("ls $HOME", NULL));
    CHECK(simple("ls\nrm x", NULL));
    CHECK(simple("ls 'a\nb'", NULL));
    CHECK(simple("ls &", NULL));
    CHECK(simple("(rm x)", NULL));
    CHECK(simple("{ rm x; }", NULL));
    CHECK(simple("! rm x", NULL));
    CHECK(simple("time rm x", NULL));
    CHECK(simple("X=1 rm x", NULL));
    CHECK(simple("ls 'unterminated", NULL));
    CHECK(simple("ls \"unterminated", NULL));
    CHECK(simple("ls \\", NULL));
    CHECK(simple("ls \x1b[2J", NULL));
    CHECK(simple("", NULL));
    CHECK(simple("   ", NULL));

    const char *unless =
            "[{\"tool\": \"exec_command\", \"unless\": {\"cmd\": [\"ls*\", \"cat *\"]}}]";
    CHECK_EQ_INT(needs(unless, "{\"cmd\": \"ls -la\"}"), 0);
    CHECK_EQ_INT(needs(unless, "{\"cmd\": \"cat 'a b'\"}"), 0);
    CHECK_EQ_INT(needs(unless, "{\"cmd\": \"ls; echo BYPASS > b.txt; cat b.txt\"}"), 1);
    CHECK_EQ_INT(needs(unless, "{\"cmd\": \"ls && rm -rf /\"}"), 1);
    CHECK_EQ_INT(needs(unless, "{\"cmd\": \"cat x | sh\"}"), 1);
    CHECK_EQ_INT(needs(unless, "{\"cmd\": \"ls\\nrm x\"}"), 1);
    CHECK_EQ_INT(needs(unless, "{\"cmd\": \"ls\", \"shell\": \"/bin/bash\"}"), 0);
    CHECK_EQ_INT(needs(unless, "{\"cmd\": \"ls\", \"shell\": \"/usr/bin/python3\"}"), 1);
    const char *when = "[{\"tool\": \"exec_command\", \"when\": {\"cmd\": \"rm *\"}}]";
    CHECK_EQ_INT(needs(when, "{\"cmd\": \"rm -rf x\"}"), 1);
    CHECK_EQ_INT(needs(when, "{\"cmd\": \"'rm' -rf x\"}"), 1);
    CHECK_EQ_INT(needs(when, "{\"cmd\": \"ls\"}"), 0);
    CHECK_EQ_INT(needs(when, "{\"cmd\": \"ls; rm -rf x\"}"), 1);
    CHECK_EQ_INT(needs(when, "{\"cmd\": \"X=1 rm -rf x\"}"), 1);

    json_t *p = J(unless);
    CHECK_EQ_INT(sbx_approval_policy_covers(p, "exec_command"), 1);
    CHECK_EQ_INT(sbx_approval_policy_covers(p, "write_stdin"), 0);
    json_decref(p);
}

/* The examples block of docs/internals/runner.md ("Command rules") is a test: every line of
 * it holds. */
static void test_doc_examples(void)
{
    const char *src = getenv("SBX_SRCDIR");
    char *path = sbx_xasprintf("%s/docs/internals/runner.md", src ? src : "..");
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    if (!f) {
        printf("# cannot read '%s' (set SBX_SRCDIR)\n", path);
        free(path);
        return;
    }
    char line[1024];
    int in = 0, lines = 0;
    json_t *policy = NULL;
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = '\0';
        if (!in) {
            in = strcmp(line, "<!-- command-rule examples -->") == 0 ? 1 : 0;
            continue;
        }
        if (in == 1) { /* the fence */
            in = 2;
            continue;
        }
        if (strncmp(line, "```", 3) == 0)
            break;
        if (strncmp(line, "rule: ", 6) == 0) {
            struct sbx_error err = SBX_ERROR_INIT;
            json_t *rule = NULL;
            json_decref(policy);
            policy = NULL;
            CHECK_OK(sbx_yaml_parse(line + 6, strlen(line + 6), NULL, &rule, &err), &err);
            if (rule)
                policy = json_pack("[o]", rule);
            continue;
        }
        /* "  COMMAND   runs|asks" */
        char *word = strrchr(line, ' ');
        CHECK(word && strncmp(line, "  ", 2) == 0);
        if (!word || !policy)
            continue;
        int asks = strcmp(word + 1, "asks") == 0;
        CHECK(asks || strcmp(word + 1, "runs") == 0);
        while (word > line && word[-1] == ' ')
            word--;
        *word = '\0';
        json_t *args = json_pack("{s:s}", "cmd", line + 2);
        int m = sbx_approval_policy_match(policy, "exec_command", args);
        if (m != asks)
            printf("# doc example '%s': %s, documented %s\n", line + 2, m ? "asks" : "runs",
                   asks ? "asks" : "runs");
        CHECK_EQ_INT(m, asks);
        json_decref(args);
        lines++;
    }
    fclose(f);
    free(path);
    json_decref(policy);
    CHECK(lines >= 10);
}

/* HMAC-SHA-256 (RFC 4231 cases 1 and 6) and the seal of a state's "always" list. */
static void test_seal(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    uint8_t key[131], mac[SBX_SHA256_LEN];
    char hex[2 * SBX_SHA256_LEN + 1];
    memset(key, 0x0b, 20);
    CHECK_OK(sbx_hmac_sha256(key, 20, "Hi There", 8, mac, &err), &err);
    sbx_hex(mac, sizeof(mac), hex);
    CHECK_EQ_STR(hex, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    memset(key, 0xaa, sizeof(key));
    const char *big = "Test Using Larger Than Block-Size Key - Hash Key First";
    CHECK_OK(sbx_hmac_sha256(key, sizeof(key), big, strlen(big), mac, &err), &err);
    sbx_hex(mac, sizeof(mac), hex);
    CHECK_EQ_STR(hex, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");

    uint8_t k1[32], k2[32];
    memset(k1, 1, sizeof(k1));
    memset(k2, 2, sizeof(k2));
    json_t *st = J("{\"run_id\": \"abc\", \"always\": [{\"tool\": \"x\", \"approved\": true}, "
                   "{\"tool\": \"y\", \"approved\": false}]}");
    CHECK_OK(sbx_run_state_seal(st, k1, sizeof(k1), &err), &err);
    CHECK(strncmp(json_string_value(json_object_get(st, "always_seal")), "hmac-sha256:", 12) == 0);
    size_t dropped = 9;
    json_t *got = sbx_run_state_always(st, k1, sizeof(k1), &dropped);
    CHECK_EQ_INT(json_array_size(got), 2);
    CHECK_EQ_INT(dropped, 0);
    json_decref(got);
    /* Another key, no key, another run id or an added approval: only the rejection holds. */
    got = sbx_run_state_always(st, k2, sizeof(k2), &dropped);
    CHECK_EQ_INT(json_array_size(got), 1);
    CHECK_EQ_INT(dropped, 1);
    json_decref(got);
    got = sbx_run_state_always(st, NULL, 0, &dropped);
    CHECK_EQ_INT(dropped, 1);
    json_decref(got);
    sbx_json_set(st, "run_id", sbx_json_str("abd"));
    got = sbx_run_state_always(st, k1, sizeof(k1), &dropped);
    CHECK_EQ_INT(dropped, 1);
    json_decref(got);
    sbx_json_set(st, "run_id", sbx_json_str("abc"));
    sbx_json_append(json_object_get(st, "always"), J("{\"tool\": \"z\", \"approved\": true}"));
    got = sbx_run_state_always(st, k1, sizeof(k1), &dropped);
    CHECK_EQ_INT(json_array_size(got), 1);
    CHECK_EQ_INT(dropped, 2);
    json_decref(got);
    json_decref(st);
}

int main(void)
{
    TAP_START();
    if (!mkdtemp(dir))
        TAP_SKIP_ALL("cannot make a temporary directory");
    TAP_RUN(test_bound_once);
    TAP_RUN(test_item_tool_name);
    TAP_RUN(test_always);
    TAP_RUN(test_ask);
    TAP_RUN(test_commands);
    TAP_RUN(test_doc_examples);
    TAP_RUN(test_seal);
    char path[sizeof(dir) + 32];
    for (int i = 0; i < file_no; i++) {
        snprintf(path, sizeof(path), "%s/r%d.jsonl", dir, i);
        unlink(path);
    }
    rmdir(dir);
    return TAP_DONE();
}
