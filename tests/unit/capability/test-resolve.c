/* The session resolution order of a sandbox run, step by step and for precedence: a live
 * session beats the run state's session, which beats the session state the configuration
 * passes, which beats a fresh sandbox. Each case proves which sandbox an agent used (a file
 * naming it, read by the agent's command) and that the sources below it were not touched (their
 * sandboxes still live, without the file the run writes). A sandbox a run state names is the
 * run's (removed at its end) only when its record names the run; one made by hand is used and
 * left running; one that is gone is rebuilt and is the run's. Local provider, replay models. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tap.h"
#include "rmtree.h"
#include "replay-model.h"
#include "sbx/capability.h"
#include "sbx/json.h"
#include "sbx/local.h"
#include "sbx/provider.h"
#include "sbx/sandbox-run.h"
#include "sbx/snapshot.h"

static char tmp[] = "/tmp/sbx-test-resolve.XXXXXX";
static struct sbx_client *client;
static int file_no;

/* A sandbox whose file "who" holds label. */
static struct sbx_session *labelled(const char *label)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_session *s = NULL;
    CHECK_OK(sbx_client_create(client, &(struct sbx_create_spec){0}, &s, &err), &err);
    CHECK_OK(sbx_session_write(s, "who", label, strlen(label), 0644, 0, &err), &err);
    return s;
}

static json_t *state_of(struct sbx_session *s)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *st = NULL;
    CHECK_OK(sbx_session_state(s, &st, &err), &err);
    return st;
}

/* The sandbox is live and has no "mark": the run never touched it. */
static void untouched(struct sbx_session *s)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_session *again = NULL;
    struct sbx_dirent d = {0};
    CHECK_OK(sbx_client_attach(client, sbx_session_id(s), &again, &err), &err);
    sbx_session_free(again);
    CHECK_ERR(sbx_session_stat(s, "mark", &d, &err), SBX_E_NOTFOUND, &err, "mark");
}

static int live_count(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *l = NULL;
    CHECK_OK(sbx_client_list(client, &l, &err), &err);
    int n = (int)json_array_size(l);
    json_decref(l);
    return n;
}

static int is_live(const char *id)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_session *s = NULL;
    if (sbx_client_attach(client, id, &s, &err) < 0)
        return 0;
    sbx_session_free(s);
    return 1;
}

/* Remove the sandbox id (one the run left running). */
static void drop_id(const char *id)
{
    struct sbx_error err = SBX_ERROR_INIT;
    CHECK_OK(sbx_client_remove(client, id, 0, &err), &err);
}

/* Every case removes what it made; one that failed half-way may not have: whatever the client
 * still lists goes here, so that no sandbox outlives the test. Returns how many there were. */
static int sweep(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *l = NULL, *v;
    size_t i;
    if (sbx_client_list(client, &l, &err) < 0)
        return -1;
    int n = (int)json_array_size(l);
    json_array_foreach(l, i, v)
    {
        struct sbx_error e = SBX_ERROR_INIT;
        const char *id = json_string_value(json_object_get(v, "id"));
        if (id && sbx_client_remove(client, id, 0, &e) < 0)
            printf("# cannot remove sandbox '%s': %s\n", id, e.msg);
    }
    json_decref(l);
    return n;
}

static void drop(struct sbx_session *s)
{
    struct sbx_error err = SBX_ERROR_INIT;
    CHECK_OK(sbx_session_delete(s, &err), &err);
    sbx_session_free(s);
}

static struct sbx_agent *sandbox_agent(const char *name, const char *spec_json)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_agent *a = NULL;
    CHECK_OK(sbx_agent_new(name, &a, &err), &err);
    json_t *spec = json_loads(spec_json, 0, NULL);
    sbx_agent_set_sandbox_spec(a, spec);
    json_decref(spec);
    return a;
}

#define EXEC(id, cmd)                                                                      \
    "{\"id\":\"r" id "\",\"output\":[{\"type\":\"function_call\",\"call_id\":\"c" id "\"," \
    "\"name\":\"exec_command\",\"arguments\":\"{\\\"cmd\\\":\\\"" cmd "\\\"}\"}]}"
#define HANDOFF(id, to)                                                                    \
    "{\"id\":\"r" id "\",\"output\":[{\"type\":\"function_call\",\"call_id\":\"c" id "\"," \
    "\"name\":\"transfer_to_" to "\",\"arguments\":\"{}\"}]}"
#define DONE(id)                                                                                \
    "{\"id\":\"r" id "\",\"output\":[{\"type\":\"message\",\"role\":\"assistant\",\"content\":" \
    "[{\"type\":\"output_text\",\"text\":\"done\"}]}]}"

/* Run agent with cfg over responses; *out_sr and the outputs of the tool calls, in order
 * (caller frees both). rc: the run's return code. */
static int run_as(struct sbx_agent *a, const struct sbx_run_config *cfg,
                  const char *const *responses, const char *run_id, struct sbx_sandbox_run **out_sr,
                  json_t **outputs, struct sbx_error *err)
{
    struct sbx_model *m = test_model_from_responses(tmp, &file_no, responses);
    struct sbx_run_result *res = NULL;
    struct sbx_run_options o = {.model = m, .run_id = run_id};
    json_t *in = json_string("go");
    int rc = sbx_sandbox_run_new(cfg, out_sr, err);
    if (rc == 0)
        rc = sbx_sandbox_run(*out_sr, a, in, &o, &res, err);
    *outputs = json_array();
    const json_t *items = res ? sbx_run_result_items(res) : NULL;
    size_t i;
    json_t *v;
    json_array_foreach((json_t *)items, i, v)
    {
        if (strcmp(json_string_value(json_object_get(v, "type")), "function_call_output") == 0)
            json_array_append(*outputs, json_object_get(v, "output"));
    }
    sbx_run_result_free(res);
    json_decref(in);
    sbx_model_free(m);
    return rc;
}

static int run(struct sbx_agent *a, const struct sbx_run_config *cfg, const char *const *responses,
               struct sbx_sandbox_run **out_sr, json_t **outputs, struct sbx_error *err)
{
    return run_as(a, cfg, responses, NULL, out_sr, outputs, err);
}

static const char *output(const json_t *outs, size_t i)
{
    const char *s = json_string_value(json_array_get(outs, i));
    return s ? s : "";
}

static const char *const mark_run[] = {EXEC("1", "cat who; echo run > mark"), DONE("2"), NULL};

static void test_live_beats_all(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_session *live = labelled("LIVE"), *rs = labelled("RUNSTATE"),
                       *ss = labelled("STATE");
    json_t *payload = json_pack("{s:o}", "session_state", state_of(rs));
    json_t *state = state_of(ss);
    struct sbx_agent *a = sandbox_agent("coder", "{\"capabilities\":[\"shell\"]}");
    struct sbx_run_config cfg = {.client = client,
                                 .session = live,
                                 .run_state_sandbox = payload,
                                 .session_state = state};
    struct sbx_sandbox_run *sr = NULL;
    json_t *outs = NULL;
    CHECK_OK(run(a, &cfg, mark_run, &sr, &outs, &err), &err);
    CHECK_CONTAINS(output(outs, 0), "Output:\nLIVE");
    CHECK_EQ_INT(sbx_sandbox_run_source(sr, 0), SBX_SESSION_LIVE);
    CHECK_EQ_STR(sbx_sandbox_run_session_id(sr, 0), sbx_session_id(live));
    CHECK(!sbx_sandbox_run_created(sr, 0));
    CHECK(is_live(sbx_session_id(live))); /* a live session is never the run's to delete */
    untouched(rs);
    untouched(ss);
    CHECK_EQ_INT(live_count(), 3); /* nothing fresh */
    sbx_sandbox_run_free(sr);
    json_decref(outs);

    /* The same by id: attached, left running, the others untouched. */
    CHECK_OK(sbx_session_rm(live, "mark", 0, &err), &err);
    struct sbx_run_config by_id = {.client = client,
                                   .session_id = sbx_session_id(live),
                                   .run_state_sandbox = payload,
                                   .session_state = state};
    CHECK_OK(run(a, &by_id, mark_run, &sr, &outs, &err), &err);
    CHECK_CONTAINS(output(outs, 0), "Output:\nLIVE");
    CHECK_EQ_INT(sbx_sandbox_run_source(sr, 0), SBX_SESSION_ATTACHED);
    CHECK(!sbx_sandbox_run_created(sr, 0));
    CHECK(is_live(sbx_session_id(live)));
    untouched(rs);
    untouched(ss);
    CHECK_EQ_INT(live_count(), 3);
    sbx_sandbox_run_free(sr);
    json_decref(outs);
    json_decref(payload);
    json_decref(state);
    sbx_agent_free(a);
    drop(live);
    drop(rs);
    drop(ss);
}

static void test_run_state_beats_session_state(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_session *rs = labelled("RUNSTATE"), *ss = labelled("STATE");
    json_t *payload = json_pack("{s:o}", "session_state", state_of(rs));
    json_t *state = state_of(ss);
    char *rs_id = sbx_xstrdup(sbx_session_id(rs));
    sbx_session_free(rs); /* the run attaches its own handle */
    struct sbx_agent *a = sandbox_agent("coder", "{\"capabilities\":[\"shell\"]}");
    struct sbx_run_config cfg = {
            .client = client, .run_state_sandbox = payload, .session_state = state};
    struct sbx_sandbox_run *sr = NULL;
    json_t *outs = NULL;
    CHECK_OK(run(a, &cfg, mark_run, &sr, &outs, &err), &err);
    CHECK_CONTAINS(output(outs, 0), "Output:\nRUNSTATE");
    CHECK_EQ_INT(sbx_sandbox_run_source(sr, 0), SBX_SESSION_RUN_STATE);
    CHECK_EQ_STR(sbx_sandbox_run_session_id(sr, 0), rs_id);
    /* Made by hand, so its record names no run: the run used it and left it running. */
    CHECK(!sbx_sandbox_run_created(sr, 0));
    CHECK(is_live(rs_id));
    untouched(ss);
    CHECK_EQ_INT(live_count(), 2);
    sbx_sandbox_run_free(sr);
    json_decref(outs);
    json_decref(payload);
    drop_id(rs_id);
    free(rs_id);

    /* A sandbox whose record names the run (a resumable run with that id made it): the run's
     * own, so removed when the run completes; the caller's session state stays untouched. */
    static const char run_id[] = "0123456789abcdef0123456789abcdef";
    rs = labelled("OWNED");
    rs_id = sbx_xstrdup(sbx_session_id(rs));
    payload = json_pack("{s:s, s:o}", "run_id", run_id, "session_state", state_of(rs));
    sbx_session_free(rs);
    CHECK_OK(sbx_sandbox_record_claim("local", rs_id, NULL, run_id, &err), &err);
    CHECK(sbx_sandbox_record_owned_by(rs_id, run_id));
    struct sbx_run_config owned = {
            .client = client, .run_state_sandbox = payload, .session_state = state, .resumable = 1};
    CHECK_OK(run_as(a, &owned, mark_run, run_id, &sr, &outs, &err), &err);
    CHECK_CONTAINS(output(outs, 0), "Output:\nOWNED");
    CHECK_EQ_INT(sbx_sandbox_run_source(sr, 0), SBX_SESSION_RUN_STATE);
    CHECK_EQ_STR(sbx_sandbox_run_session_id(sr, 0), rs_id);
    CHECK(sbx_sandbox_run_created(sr, 0));
    CHECK(!is_live(rs_id));
    untouched(ss);
    CHECK_EQ_INT(live_count(), 1);
    sbx_sandbox_run_free(sr);
    json_decref(outs);

    /* The same record under another run's id: not this run's, left running. */
    rs = labelled("OTHER");
    free(rs_id);
    rs_id = sbx_xstrdup(sbx_session_id(rs));
    json_decref(payload);
    payload = json_pack("{s:s, s:o}", "run_id", run_id, "session_state", state_of(rs));
    sbx_session_free(rs);
    owned.run_state_sandbox = payload;
    CHECK_OK(sbx_sandbox_record_claim("local", rs_id, NULL, "feedfacefeedfacefeedfacefeedface",
                                      &err),
             &err);
    CHECK_OK(run_as(a, &owned, mark_run, run_id, &sr, &outs, &err), &err);
    CHECK_CONTAINS(output(outs, 0), "Output:\nOTHER");
    CHECK(!sbx_sandbox_run_created(sr, 0));
    CHECK(is_live(rs_id));
    CHECK_EQ_INT(live_count(), 2);
    sbx_sandbox_run_free(sr);
    json_decref(outs);
    drop_id(rs_id);
    free(rs_id);
    json_decref(payload);
    json_decref(state);
    sbx_agent_free(a);
    drop(ss);
}

/* sessions_by_agent: an agent with an entry (by key, or by agent_name) resumes it; one without
 * falls to the top-level session_state, and without that to the next source. */
static void test_run_state_per_agent(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_session *top = labelled("TOP"), *second = labelled("SECOND"),
                       *ss = labelled("STATE");
    json_t *payload = json_pack("{s:o, s:{s:{s:s, s:o}}}", "session_state", state_of(top),
                                "sessions_by_agent", "k-2", "agent_name", "second", "session_state",
                                state_of(second));
    json_t *state = state_of(ss);
    char *top_id = sbx_xstrdup(sbx_session_id(top)),
         *second_id = sbx_xstrdup(sbx_session_id(second));
    sbx_session_free(top); /* the run attaches handles of its own */
    sbx_session_free(second);
    struct sbx_agent *a = sandbox_agent("first", "{\"capabilities\":[\"shell\"]}");
    struct sbx_agent *b = sandbox_agent("second", "{\"capabilities\":[\"shell\"]}");
    CHECK_OK(sbx_agent_add_handoff(a, b, &err), &err);
    static const char *const r[] = {EXEC("1", "cat who"), HANDOFF("2", "second"),
                                    EXEC("3", "cat who"), DONE("4"), NULL};
    struct sbx_run_config cfg = {
            .client = client, .run_state_sandbox = payload, .session_state = state};
    struct sbx_sandbox_run *sr = NULL;
    json_t *outs = NULL;
    CHECK_OK(run(a, &cfg, r, &sr, &outs, &err), &err);
    CHECK_CONTAINS(output(outs, 0), "Output:\nTOP");
    CHECK_CONTAINS(output(outs, 2), "Output:\nSECOND");
    CHECK_EQ_INT(sbx_sandbox_run_count(sr), 2);
    CHECK_EQ_INT(sbx_sandbox_run_source(sr, 0), SBX_SESSION_RUN_STATE);
    CHECK_EQ_INT(sbx_sandbox_run_source(sr, 1), SBX_SESSION_RUN_STATE);
    CHECK_EQ_STR(sbx_sandbox_run_agent(sr, 1), "second");
    CHECK_EQ_INT(sbx_sandbox_run_source(sr, 2), 0);
    untouched(ss);
    /* Both made by hand: used, not the run's, left running. */
    CHECK(!sbx_sandbox_run_created(sr, 0) && !sbx_sandbox_run_created(sr, 1));
    CHECK(is_live(top_id) && is_live(second_id));
    CHECK_EQ_INT(live_count(), 3);
    sbx_sandbox_run_free(sr);
    json_decref(outs);
    json_decref(payload);
    drop_id(top_id);
    drop_id(second_id);
    free(top_id);
    free(second_id);

    /* Without a top-level state, the agent without an entry gets a fresh sandbox from the
     * per-run manifest (allowed with a run state: it serves only some agents). */
    second = labelled("SECOND");
    payload = json_pack("{s:{s:{s:o}}}", "sessions_by_agent", "second", "session_state",
                        state_of(second));
    second_id = sbx_xstrdup(sbx_session_id(second));
    sbx_session_free(second);
    json_t *doc = json_loads("{\"entries\":{\"who\":{\"type\":\"file\",\"content\":\"FRESH\"}}}", 0,
                             NULL);
    struct sbx_run_config cfg2 = {
            .client = client, .run_state_sandbox = payload, .manifest_doc = doc};
    CHECK_OK(run(a, &cfg2, r, &sr, &outs, &err), &err);
    CHECK_CONTAINS(output(outs, 0), "Output:\nFRESH");
    CHECK_CONTAINS(output(outs, 2), "Output:\nSECOND");
    CHECK_EQ_INT(sbx_sandbox_run_source(sr, 0), SBX_SESSION_FRESH);
    CHECK_EQ_INT(sbx_sandbox_run_source(sr, 1), SBX_SESSION_RUN_STATE);
    /* The fresh one is the run's and gone; the hand-made one stays, as does ss. */
    CHECK(sbx_sandbox_run_created(sr, 0) && !sbx_sandbox_run_created(sr, 1));
    CHECK(!is_live(sbx_sandbox_run_session_id(sr, 0)) && is_live(second_id));
    CHECK_EQ_INT(live_count(), 2);
    sbx_sandbox_run_free(sr);
    json_decref(outs);
    json_decref(payload);
    drop_id(second_id);
    free(second_id);
    json_decref(doc);
    json_decref(state);
    sbx_agent_free(a);
    sbx_agent_free(b);
    drop(ss);
}

/* The run state's entry for one agent and the caller's state for the other are two documents
 * of the same live sandbox. The run state's is not the run's (its record names no run); the
 * caller's session state is, so the run deletes the sandbox at its end, once. */
static void test_same_sandbox_twice(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_session *s = labelled("ONE");
    json_t *payload =
            json_pack("{s:{s:{s:o}}}", "sessions_by_agent", "first", "session_state", state_of(s));
    json_t *state = state_of(s);
    char *id = sbx_xstrdup(sbx_session_id(s));
    sbx_session_free(s);
    struct sbx_agent *a = sandbox_agent("first", "{\"capabilities\":[\"shell\"]}");
    struct sbx_agent *b = sandbox_agent("second", "{\"capabilities\":[\"shell\"]}");
    CHECK_OK(sbx_agent_add_handoff(a, b, &err), &err);
    static const char *const r[] = {EXEC("1", "echo one > mark"), HANDOFF("2", "second"),
                                    EXEC("3", "cat who mark"), DONE("4"), NULL};
    struct sbx_run_config cfg = {
            .client = client, .run_state_sandbox = payload, .session_state = state};
    struct sbx_sandbox_run *sr = NULL;
    json_t *outs = NULL;
    CHECK_OK(run(a, &cfg, r, &sr, &outs, &err), &err);
    CHECK_CONTAINS(output(outs, 2), "Output:\nONEone");
    CHECK_EQ_INT(sbx_sandbox_run_source(sr, 0), SBX_SESSION_RUN_STATE);
    CHECK_EQ_INT(sbx_sandbox_run_source(sr, 1), SBX_SESSION_STATE);
    CHECK_EQ_STR(sbx_sandbox_run_session_id(sr, 0), id);
    CHECK_EQ_STR(sbx_sandbox_run_session_id(sr, 1), id);
    CHECK(!sbx_sandbox_run_created(sr, 0));
    CHECK(sbx_sandbox_run_created(sr, 1));
    CHECK(!is_live(id));
    CHECK_EQ_INT(live_count(), 0);
    sbx_sandbox_run_free(sr);
    json_decref(outs);
    json_decref(payload);
    json_decref(state);
    free(id);
    sbx_agent_free(a);
    sbx_agent_free(b);
}

static void test_session_state_beats_fresh(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_session *ss = labelled("STATE");
    json_t *state = state_of(ss);
    char *id = sbx_xstrdup(sbx_session_id(ss));
    sbx_session_free(ss); /* the run attaches a handle of its own */
    /* The agent's own manifest would make "fresh.txt"; the resumed sandbox has none. Both
     * agents resume the one state: they share its sandbox. */
    const char *spec = "{\"capabilities\":[\"shell\"],\"manifest\":{\"entries\":{\"fresh.txt\":"
                       "{\"type\":\"file\",\"content\":\"x\"}}}}";
    struct sbx_agent *a = sandbox_agent("first", spec), *b = sandbox_agent("second", spec);
    CHECK_OK(sbx_agent_add_handoff(a, b, &err), &err);
    static const char *const r[] = {EXEC("1", "cat who; ls; echo one > mark"),
                                    HANDOFF("2", "second"), EXEC("3", "cat mark"), DONE("4"), NULL};
    struct sbx_run_config cfg = {.client = client, .session_state = state, .keep = 1};
    struct sbx_sandbox_run *sr = NULL;
    json_t *outs = NULL;
    CHECK_OK(run(a, &cfg, r, &sr, &outs, &err), &err);
    CHECK_CONTAINS(output(outs, 0), "Output:\nSTATE");
    CHECK(!strstr(output(outs, 0), "fresh.txt"));
    CHECK_CONTAINS(output(outs, 2), "Output:\none");
    CHECK_EQ_INT(sbx_sandbox_run_source(sr, 0), SBX_SESSION_STATE);
    CHECK_EQ_INT(sbx_sandbox_run_source(sr, 1), SBX_SESSION_STATE);
    CHECK_EQ_STR(sbx_sandbox_run_session_id(sr, 0), id);
    CHECK_EQ_STR(sbx_sandbox_run_session_id(sr, 1), id);
    CHECK(sbx_sandbox_run_created(sr, 0));
    CHECK(!sbx_sandbox_run_created(sr, 1)); /* one owner */
    /* keep: the resumed sandbox stays, and nothing fresh was made. */
    CHECK(is_live(id));
    CHECK_EQ_INT(live_count(), 1);
    sbx_sandbox_run_free(sr);
    json_decref(outs);

    /* Without keep the run deletes what it resumed. */
    static const char *const r2[] = {EXEC("1", "cat who"), DONE("2"), NULL};
    cfg.keep = 0;
    CHECK_OK(run(a, &cfg, r2, &sr, &outs, &err), &err);
    CHECK_CONTAINS(output(outs, 0), "Output:\nSTATE");
    CHECK(!is_live(id));
    CHECK_EQ_INT(live_count(), 0);
    sbx_sandbox_run_free(sr);
    json_decref(outs);

    /* A state that cannot be resumed fails the turn and never falls back to a fresh sandbox. */
    CHECK_ERR(run(a, &cfg, r2, &sr, &outs, &err), SBX_E_NOTFOUND, &err,
              "sandbox agent 'first': cannot resume the session state");
    CHECK_EQ_INT(sbx_sandbox_run_count(sr), 0);
    CHECK_EQ_INT(live_count(), 0);
    sbx_sandbox_run_free(sr);
    json_decref(outs);

    /* Nothing given: fresh from the agent's manifest. */
    CHECK_OK(run(a, &(struct sbx_run_config){.client = client}, mark_run, &sr, &outs, &err), &err);
    CHECK_CONTAINS(output(outs, 0), "No such file");
    CHECK_EQ_INT(sbx_sandbox_run_source(sr, 0), SBX_SESSION_FRESH);
    CHECK(strcmp(sbx_sandbox_run_session_id(sr, 0), id) != 0);
    sbx_sandbox_run_free(sr);
    json_decref(outs);
    json_decref(state);
    free(id);
    sbx_agent_free(a);
    sbx_agent_free(b);
}

static void test_config_errors(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_sandbox_run *sr = NULL;
    json_t *state = json_pack("{s:i, s:s, s:s}", "version", 1, "provider", "local", "id",
                              "0123456789abcdef");
    json_t *doc = json_object();
    struct sbx_run_config c1 = {.session_state = state, .manifest_doc = doc};
    CHECK_ERR(sbx_sandbox_run_new(&c1, &sr, &err), SBX_E_INVAL, &err,
              "a manifest applies only to fresh sandboxes");
    json_t *str = json_string("x");
    struct sbx_run_config c2 = {.session_state = str};
    CHECK_ERR(sbx_sandbox_run_new(&c2, &sr, &err), SBX_E_INVAL, &err,
              "session state must be an object, not string");
    static const struct {
        const char *doc, *msg;
    } bad[] = {
            {"[]", "run state sandbox payload must be an object, not array"},
            {"{\"session_state\":1}", "'session_state' must be an object, not integer"},
            {"{\"sessions_by_agent\":[]}", "'sessions_by_agent' must be an object"},
            {"{\"sessions_by_agent\":{\"a\":{}}}", "sessions_by_agent 'a' must be an object"},
            {"{\"sessions_by_agent\":{\"a\":{\"session_state\":{},\"agent_name\":3}}}",
             "sessions_by_agent 'a' must be"},
    };
    for (size_t i = 0; i < SBX_ARRAY_LEN(bad); i++) {
        json_t *p = json_loads(bad[i].doc, 0, NULL);
        struct sbx_run_config c = {.run_state_sandbox = p};
        CHECK_ERR(sbx_sandbox_run_new(&c, &sr, &err), SBX_E_INVAL, &err, bad[i].msg);
        json_decref(p);
    }
    /* A run state may come with a manifest (for the agents it has no entry for). */
    json_t *p = json_pack("{s:{}}", "sessions_by_agent");
    struct sbx_run_config c3 = {.client = client, .run_state_sandbox = p, .manifest_doc = doc};
    CHECK_OK(sbx_sandbox_run_new(&c3, &sr, &err), &err);
    sbx_sandbox_run_free(sr);
    json_decref(p);
    json_decref(str);
    json_decref(doc);
    json_decref(state);
}

/* Entries of dir whose name starts with prefix. */
static int count_prefix(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    int n = 0;
    while (d && (de = readdir(d)))
        n += strncmp(de->d_name, prefix, strlen(prefix)) == 0;
    if (d)
        closedir(d);
    return n;
}

static int is_ref(const char *r)
{
    if (!r || strncmp(r, "sha256:", 7) != 0 || strlen(r) != 7 + 64)
        return 0;
    return strspn(r + 7, "0123456789abcdef") == 64;
}

/* What file "who" holds in a sandbox made from snapshot ref ("" when it has none). */
static char *who_in_snapshot(const char *ref)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_session *s = NULL;
    struct sbx_buf b;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    CHECK_OK(sbx_client_create(client, &(struct sbx_create_spec){.snapshot = ref}, &s, &err), &err);
    if (s)
        (void)sbx_session_read(s, "who", 0, &b, NULL);
    if (s)
        drop(s);
    return sbx_buf_detach(&b, NULL);
}

/* snapshot_out: every session the run used, live ones too, taken before the run's own are
 * deleted; the agents sharing one share its reference. */
static void test_snapshot_out(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_session *live = labelled("LIVE");
    struct sbx_agent *a = sandbox_agent("coder", "{\"capabilities\":[\"shell\"],\"manifest\":"
                                                 "{\"entries\":{\"who\":{\"type\":\"file\","
                                                 "\"content\":\"FRESH\"}}}}");
    static const char *const r[] = {EXEC("1", "echo changed > who"), DONE("2"), NULL};
    struct sbx_run_config cfg = {.client = client, .snapshot_out = "store"};
    struct sbx_sandbox_run *sr = NULL;
    json_t *outs = NULL;
    CHECK_OK(run(a, &cfg, r, &sr, &outs, &err), &err);
    const char *ref = sbx_sandbox_run_snapshot_ref(sr, 0);
    CHECK(is_ref(ref));
    CHECK_EQ_INT(live_count(), 1); /* the fresh one was still deleted */
    char *who = who_in_snapshot(ref);
    CHECK_EQ_STR(who, "changed\n"); /* taken after the run's change, before the delete */
    free(who);
    sbx_sandbox_run_free(sr);
    json_decref(outs);

    /* A live session: snapshotted, left alone. A file: the export of the first. */
    char *file = sbx_xasprintf("%s/out.tar.zst", tmp);
    struct sbx_run_config c2 = {.client = client, .session = live, .snapshot_out = file};
    CHECK_OK(run(a, &c2, r, &sr, &outs, &err), &err);
    ref = sbx_sandbox_run_snapshot_ref(sr, 0);
    CHECK(is_ref(ref));
    CHECK(is_live(sbx_session_id(live)));
    struct sbx_snapshot_store *st = NULL;
    char *imported = NULL;
    CHECK_OK(sbx_snapshot_store_open(NULL, &st, &err), &err);
    CHECK_OK(sbx_snapshot_resolve(st, file, NULL, &imported, &err), &err);
    CHECK_EQ_STR(imported, ref);
    who = who_in_snapshot(ref);
    CHECK_EQ_STR(who, "changed\n");
    free(who);
    free(imported);
    sbx_snapshot_store_free(st);
    sbx_sandbox_run_free(sr);
    json_decref(outs);

    /* A failed run (max turns) is snapshotted too, and its own error is the one returned. */
    static const char *const loop[] = {EXEC("1", "echo again > who"), EXEC("2", "true"), NULL};
    struct sbx_run_config c3 = {.client = client, .snapshot_out = "store"};
    struct sbx_model *m = test_model_from_responses(tmp, &file_no, loop);
    struct sbx_run_options o = {.model = m, .max_turns = 1};
    struct sbx_run_result *res = NULL;
    json_t *in = json_string("go");
    CHECK_OK(sbx_sandbox_run_new(&c3, &sr, &err), &err);
    CHECK_ERR(sbx_sandbox_run(sr, a, in, &o, &res, &err), SBX_E_MAXTURNS, &err, "max turns");
    ref = sbx_sandbox_run_snapshot_ref(sr, 0);
    CHECK(is_ref(ref));
    who = who_in_snapshot(ref);
    CHECK_EQ_STR(who, "again\n");
    free(who);
    CHECK_EQ_INT(live_count(), 1);
    sbx_sandbox_run_free(sr);
    sbx_model_free(m);
    json_decref(in);

    /* Two sandboxes (a handoff): one snapshot each, the file gets the first agent's; with
     * share, the agents share one sandbox and one reference. */
    struct sbx_agent *b = sandbox_agent("second", "{\"capabilities\":[\"shell\"],\"manifest\":"
                                                  "{\"entries\":{\"who\":{\"type\":\"file\","
                                                  "\"content\":\"SECOND\"}}}}");
    CHECK_OK(sbx_agent_add_handoff(a, b, &err), &err);
    static const char *const two[] = {EXEC("1", "true"), HANDOFF("2", "second"), DONE("3"), NULL};
    char *file2 = sbx_xasprintf("%s/two.tar.zst", tmp);
    struct sbx_run_config c6 = {.client = client, .snapshot_out = file2};
    CHECK_OK(run(a, &c6, two, &sr, &outs, &err), &err);
    CHECK_EQ_INT(sbx_sandbox_run_count(sr), 2);
    const char *r0 = sbx_sandbox_run_snapshot_ref(sr, 0), *r1 = sbx_sandbox_run_snapshot_ref(sr, 1);
    CHECK(is_ref(r0) && is_ref(r1) && strcmp(r0, r1) != 0);
    who = who_in_snapshot(r1);
    CHECK_EQ_STR(who, "SECOND");
    free(who);
    CHECK_OK(sbx_snapshot_store_open(NULL, &st, &err), &err);
    CHECK_OK(sbx_snapshot_resolve(st, file2, NULL, &imported, &err), &err);
    CHECK_EQ_STR(imported, r0);
    free(imported);
    sbx_snapshot_store_free(st);
    sbx_sandbox_run_free(sr);
    json_decref(outs);
    struct sbx_run_config c7 = {.client = client, .snapshot_out = "store", .share = 1};
    CHECK_OK(run(a, &c7, two, &sr, &outs, &err), &err);
    CHECK_EQ_INT(sbx_sandbox_run_count(sr), 2);
    CHECK(is_ref(sbx_sandbox_run_snapshot_ref(sr, 0)));
    CHECK_EQ_STR(sbx_sandbox_run_snapshot_ref(sr, 0), sbx_sandbox_run_snapshot_ref(sr, 1));
    CHECK_EQ_INT(live_count(), 1);
    sbx_sandbox_run_free(sr);
    json_decref(outs);
    free(file2);
    sbx_agent_free(b);

    /* A file that cannot be made fails before the first turn; nothing is left of it. */
    char *bad = sbx_xasprintf("%s/no/such/dir/out.tar.zst", tmp);
    struct sbx_run_config c4 = {.client = client, .snapshot_out = bad};
    CHECK_ERR(sbx_sandbox_run_new(&c4, &sr, &err), SBX_E_NOTFOUND, &err, "cannot create");
    /* The temp file is gone when nothing was exported (no sandbox agent took a turn). */
    char *unused = sbx_xasprintf("%s/unused.tar.zst", tmp);
    struct sbx_run_config c5 = {.client = client, .snapshot_out = unused};
    CHECK_OK(sbx_sandbox_run_new(&c5, &sr, &err), &err);
    sbx_sandbox_run_free(sr);
    CHECK_EQ_INT(count_prefix(tmp, "unused.tar.zst"), 0);
    free(unused);
    free(bad);
    free(file);
    sbx_agent_free(a);
    drop(live);
}

/* A run state whose sandbox is gone is rebuilt from the snapshot its state names. */
static void test_run_state_rebuild(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_session *s = labelled("GONE");
    char *id = sbx_xstrdup(sbx_session_id(s));
    json_t *st = NULL;
    sbx_session_free(s);
    CHECK_OK(sbx_client_state(client, id, 1, &st, &err), &err);
    CHECK_OK(sbx_client_remove(client, id, 0, &err), &err);
    CHECK_EQ_INT(live_count(), 0);
    json_t *payload = json_pack("{s:o}", "session_state", st);
    struct sbx_agent *a = sandbox_agent("coder", "{\"capabilities\":[\"shell\"]}");
    struct sbx_run_config cfg = {.client = client, .run_state_sandbox = payload};
    struct sbx_sandbox_run *sr = NULL;
    json_t *outs = NULL;
    CHECK_OK(run(a, &cfg, mark_run, &sr, &outs, &err), &err);
    CHECK_CONTAINS(output(outs, 0), "Output:\nGONE");
    CHECK_EQ_INT(sbx_sandbox_run_source(sr, 0), SBX_SESSION_RUN_STATE);
    /* Gone, so rebuilt: the run's own, removed at its end. */
    CHECK(sbx_sandbox_run_created(sr, 0));
    CHECK(!is_live(sbx_sandbox_run_session_id(sr, 0)));
    CHECK_EQ_INT(live_count(), 0);
    sbx_sandbox_run_free(sr);
    json_decref(outs);
    json_decref(payload);
    free(id);
    sbx_agent_free(a);
}

/* snapshot: fresh sandboxes start from it; it is not for sessions from another source. */
static void test_snapshot_in(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_session *src = labelled("SNAP"), *other = labelled("RUNSTATE");
    struct sbx_snapshot_store *st = NULL;
    char *ref = NULL;
    CHECK_OK(sbx_snapshot_store_open(NULL, &st, &err), &err);
    CHECK_OK(sbx_session_snapshot(src, st, &ref, &err), &err);
    drop(src);
    json_t *payload = json_pack("{s:{s:{s:o}}}", "sessions_by_agent", "second", "session_state",
                                state_of(other));
    char *other_id = sbx_xstrdup(sbx_session_id(other));
    sbx_session_free(other);
    struct sbx_agent *a = sandbox_agent("first", "{\"capabilities\":[\"shell\"]}");
    struct sbx_agent *b = sandbox_agent("second", "{\"capabilities\":[\"shell\"]}");
    CHECK_OK(sbx_agent_add_handoff(a, b, &err), &err);
    static const char *const r[] = {EXEC("1", "cat who"), HANDOFF("2", "second"),
                                    EXEC("3", "cat who"), DONE("4"), NULL};
    /* A prefix of the reference will do. */
    char prefix[7 + 16 + 1];
    snprintf(prefix, sizeof(prefix), "%s", ref);
    struct sbx_run_config cfg = {
            .client = client, .snapshot = prefix, .run_state_sandbox = payload};
    struct sbx_sandbox_run *sr = NULL;
    json_t *outs = NULL;
    CHECK_OK(run(a, &cfg, r, &sr, &outs, &err), &err);
    CHECK_CONTAINS(output(outs, 0), "Output:\nSNAP");
    CHECK_CONTAINS(output(outs, 2), "Output:\nRUNSTATE"); /* the run state's, not the snapshot */
    CHECK_EQ_INT(sbx_sandbox_run_source(sr, 0), SBX_SESSION_FRESH);
    CHECK_EQ_INT(sbx_sandbox_run_source(sr, 1), SBX_SESSION_RUN_STATE);
    CHECK(is_live(other_id)); /* made by hand: left running */
    CHECK_EQ_INT(live_count(), 1);
    sbx_sandbox_run_free(sr);
    json_decref(outs);
    drop_id(other_id);
    free(other_id);

    struct sbx_session *fake = (struct sbx_session *)&err; /* never dereferenced */
    json_t *state = json_pack("{s:i, s:s, s:s}", "version", 1, "provider", "local", "id",
                              "0123456789abcdef");
    struct sbx_run_config c1 = {.session = fake, .snapshot = ref};
    CHECK_ERR(sbx_sandbox_run_new(&c1, &sr, &err), SBX_E_INVAL, &err,
              "a snapshot applies only to fresh sandboxes");
    struct sbx_run_config c2 = {.session_state = state, .snapshot = ref};
    CHECK_ERR(sbx_sandbox_run_new(&c2, &sr, &err), SBX_E_INVAL, &err,
              "a snapshot applies only to fresh sandboxes");
    struct sbx_run_config c3 = {.client = client, .snapshot = "sha256:0000000000000000"};
    CHECK_ERR(sbx_sandbox_run_new(&c3, &sr, &err), SBX_E_NOTFOUND, &err,
              "snapshot 'sha256:0000000000000000'");
    CHECK_EQ_INT(live_count(), 0);
    json_decref(state);
    json_decref(payload);
    sbx_snapshot_store_free(st);
    free(ref);
    sbx_agent_free(a);
    sbx_agent_free(b);
}

int main(void)
{
    TAP_START();
    if (!mkdtemp(tmp))
        abort();
    char *run_dir = sbx_xasprintf("%s/run", tmp), *ws_dir = sbx_xasprintf("%s/ws", tmp);
    char *snap_dir = sbx_xasprintf("%s/snapshots", tmp);
    setenv("SBX_SNAPSHOTS", snap_dir, 1);
    char *records = sbx_xasprintf("%s/records", tmp);
    setenv("SBX_RECORDS", records, 1);
    struct sbx_local_options lo = {.runtime_dir = run_dir, .workspace_dir = ws_dir};
    struct sbx_error err = SBX_ERROR_INIT;
    if (sbx_client_new("local", &lo, &client, &err) < 0) {
        printf("# %s\n", err.msg);
        abort();
    }
    TAP_RUN(test_live_beats_all);
    TAP_RUN(test_run_state_beats_session_state);
    TAP_RUN(test_run_state_per_agent);
    TAP_RUN(test_same_sandbox_twice);
    TAP_RUN(test_session_state_beats_fresh);
    TAP_RUN(test_config_errors);
    TAP_RUN(test_snapshot_out);
    TAP_RUN(test_snapshot_in);
    TAP_RUN(test_run_state_rebuild);
    CHECK_EQ_INT(sweep(), 0); /* the cases left no sandbox behind */
    sbx_client_free(client);
    rm_tree(tmp);
    free(run_dir);
    free(ws_dir);
    free(snap_dir);
    free(records);
    return TAP_DONE();
}
