/* Capabilities: the registry, the compaction table and input cut, the capability contract as
 * a sandbox run drives it (manifest changes, tools on the live session, end hooks), and session
 * ownership (a live session is never closed by the run). Runs against the local provider with
 * replay models. */
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tap.h"
#include "rmtree.h"
#include "replay-model.h"
#include "capability/capability-internal.h"
#include "sbx/json.h"
#include "sbx/local.h"
#include "sbx/manifest.h"
#include "sbx/sandbox-run.h"

static char tmp[] = "/tmp/sbx-test-capability.XXXXXX";
static struct sbx_client *client;
static int file_no;

static struct sbx_model *replay(const char *const *responses)
{
    return test_model_from_responses(tmp, &file_no, responses);
}

static void test_registry(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_capability *c = NULL;
    json_t *v = json_string("shell");
    CHECK_OK(sbx_capability_from_json(v, &c, &err), &err);
    CHECK_EQ_STR(sbx_capability_type(c), "shell");
    sbx_capability_unref(c);
    json_decref(v);

    static const struct {
        const char *doc;
        int code;
        const char *msg;
    } bad[] = {
            {"\"telepathy\"", SBX_E_NOTFOUND, "unknown capability 'telepathy'"},
            {"42", SBX_E_INVAL, "must be a type name or an object"},
            {"{}", SBX_E_INVAL, "missing required field 'type'"},
            {"{\"type\":\"shell\",\"max_output_tokens\":0}", SBX_E_INVAL,
             "capability 'shell': max_output_tokens must be 1 to"},
            {"{\"type\":\"shell\",\"colour\":1}", SBX_E_INVAL, "unknown field 'colour'"},
            {"{\"type\":\"shell\",\"default_yield_ms\":10}", SBX_E_INVAL, "default_yield_ms"},
            {"{\"type\":\"filesystem\",\"apply_patch\":\"fax\"}", SBX_E_INVAL,
             "apply_patch must be 'auto', 'builtin', 'custom' or 'function', not 'fax'"},
            {"{\"type\":\"compaction\",\"ratio\":2}", SBX_E_INVAL, "ratio must be between"},
            {"{\"type\":\"compaction\",\"threshold\":-1}", SBX_E_INVAL, "threshold"},
    };
    for (size_t i = 0; i < SBX_ARRAY_LEN(bad); i++) {
        v = json_loads(bad[i].doc, JSON_DECODE_ANY, NULL);
        CHECK_ERR(sbx_capability_from_json(v, &c, &err), bad[i].code, &err, bad[i].msg);
        json_decref(v);
    }
}

static void test_compaction(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    CHECK_EQ_INT(sbx_compaction_threshold("gpt-4.1"), 942818);
    CHECK_EQ_INT(sbx_compaction_threshold("openai/gpt-4o-mini"), 115200);
    CHECK_EQ_INT(sbx_compaction_threshold("GPT-5.4"), 942818);
    CHECK_EQ_INT(sbx_compaction_threshold("gpt-5.4-mini"), 360000);
    CHECK_EQ_INT(sbx_compaction_threshold("o3"), 180000);
    CHECK_EQ_INT(sbx_compaction_threshold("llama-3-70b"), 240000);
    CHECK_EQ_INT(sbx_compaction_threshold(NULL), 240000);

    struct sbx_capability *c = NULL;
    json_t *spec =
            json_loads("{\"type\":\"compaction\",\"context_window\":1000,\"ratio\":0.5}", 0, NULL);
    CHECK_OK(sbx_capability_from_json(spec, &c, &err), &err);
    const struct sbx_capability_ops *ops = sbx__capability_ops(c);
    json_t *settings = json_object();
    struct sbx_capability_env env = {.model_name = "gpt-4.1", .api = SBX_MODEL_API_RESPONSES};
    CHECK_OK(ops->model_settings(c, &env, settings, &err), &err);
    char *s = sbx_json_dumps(settings, SBX_JSON_COMPACT);
    CHECK_EQ_STR(s,
                 "{\"context_management\":[{\"type\":\"compaction\",\"compact_threshold\":500}]}");
    free(s);
    json_decref(settings);
    settings = json_object();
    env.api = SBX_MODEL_API_CHAT;
    CHECK_OK(ops->model_settings(c, &env, settings, &err), &err);
    CHECK_EQ_INT(json_object_size(settings), 0); /* chat has no such field */
    json_decref(settings);

    /* Input before the last compaction item is dropped; none: unchanged. */
    json_t *items = json_loads("[{\"type\":\"message\",\"content\":\"a\"},{\"type\":\"compaction\","
                               "\"id\":\"c1\"},{\"type\":\"message\",\"content\":\"b\"},{\"type\":"
                               "\"compaction\",\"id\":\"c2\"},{\"type\":\"message\",\"content\":"
                               "\"c\"}]",
                               0, NULL);
    json_t *cut = NULL;
    CHECK_OK(ops->process_input(c, items, &cut, &err), &err);
    CHECK_EQ_INT(json_array_size(cut), 2);
    CHECK_EQ_STR(json_string_value(json_object_get(json_array_get(cut, 0), "id")), "c2");
    json_decref(cut);
    cut = NULL;
    json_array_remove(items, 3);
    json_array_remove(items, 1);
    CHECK_OK(ops->process_input(c, items, &cut, &err), &err);
    CHECK(cut == NULL);
    json_decref(items);
    json_decref(spec);
    sbx_capability_unref(c);
}

/* A custom capability: adds a file to the manifest, offers a tool that reads it through the
 * live session, and counts its end hook. */
struct probe {
    int ended;
    int freed;
};

static int probe_manifest(struct sbx_capability *c, struct sbx_manifest *m, struct sbx_error *err)
{
    (void)c;
    return sbx_manifest_add_file(m, "probe.txt", "from the capability\n", 20, NULL, err);
}

static int probe_tool(const json_t *args, const struct sbx_tool_call *call,
                      struct sbx_tool_output *out, struct sbx_error *err)
{
    (void)args;
    return sbx_session_read(call->data, "probe.txt", 0, &out->text, err);
}

static int probe_tools(struct sbx_capability *c, const struct sbx_capability_env *env,
                       struct sbx_toolset *out, struct sbx_error *err)
{
    (void)c;
    struct sbx_tool *t = NULL;
    struct sbx_function_tool spec = {.name = "probe", .fn = probe_tool, .data = env->session};
    int rc = sbx_tool_new_function(&spec, &t, err);
    if (rc == 0) {
        sbx_toolset_add(out, t, 1);
        sbx_tool_unref(t);
    }
    return rc;
}

static int probe_end(struct sbx_capability *c, const struct sbx_capability_env *env,
                     struct sbx_error *err)
{
    (void)env;
    (void)err;
    ((struct probe *)sbx_capability_data(c))->ended++;
    return 0;
}

static struct probe probe_state;

static void probe_free(void *data)
{
    ((struct probe *)data)->freed = 1;
}

static const struct sbx_capability_ops probe_ops = {
        .process_manifest = probe_manifest,
        .tools = probe_tools,
        .run_end = probe_end,
        .free_data = probe_free,
};

static void test_custom_capability(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_capability *probe = NULL;
    struct sbx_agent *a = NULL;
    struct sbx_sandbox_run *sr = NULL;
    struct sbx_run_result *res = NULL;
    CHECK_OK(sbx_capability_new("probe", &probe_ops, &probe_state, &probe, &err), &err);
    CHECK_OK(sbx_agent_new("prober", &a, &err), &err);
    json_t *spec =
            json_loads("{\"capabilities\":[\"probe\"],\"manifest\":{\"entries\":{}}}", 0, NULL);
    sbx_agent_set_sandbox_spec(a, spec);
    json_decref(spec);
    static const char *const r[] = {
            "{\"id\":\"r1\",\"output\":[{\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":"
            "\"probe\",\"arguments\":\"{}\"}]}",
            "{\"id\":\"r2\",\"output\":[{\"type\":\"message\",\"role\":\"assistant\",\"content\":"
            "[{\"type\":\"output_text\",\"text\":\"done\"}]}]}",
            NULL};
    struct sbx_model *m = replay(r);
    struct sbx_run_config cfg = {.client = client, .custom = &probe, .ncustom = 1};
    CHECK_OK(sbx_sandbox_run_new(&cfg, &sr, &err), &err);
    struct sbx_run_options o = {.model = m};
    json_t *in = json_string("x");
    CHECK_OK(sbx_sandbox_run(sr, a, in, &o, &res, &err), &err);
    json_decref(in);
    CHECK_EQ_STR(sbx_run_result_text(res), "done");
    /* The tool read the file the capability added to the manifest, through the session. */
    const json_t *items = sbx_run_result_items(res);
    CHECK_EQ_STR(json_string_value(json_object_get(json_array_get(items, 2), "output")),
                 "from the capability\n");
    CHECK_EQ_INT(probe_state.ended, 1);
    CHECK_EQ_INT(sbx_sandbox_run_count(sr), 1);
    CHECK(sbx_sandbox_run_created(sr, 0));
    /* The run created the sandbox, so it is gone. */
    json_t *list = NULL;
    CHECK_OK(sbx_client_list(client, &list, &err), &err);
    CHECK_EQ_INT(json_array_size(list), 0);
    json_decref(list);
    CHECK_ERR(sbx_sandbox_run(sr, a, NULL, &o, &res, &err), SBX_E_INVAL, &err, "serves one run");
    sbx_run_result_free(res);
    sbx_sandbox_run_free(sr);
    sbx_model_free(m);
    sbx_agent_free(a);
    CHECK_EQ_INT(probe_state.freed, 0); /* the caller still holds it */
    sbx_capability_unref(probe);
    CHECK_EQ_INT(probe_state.freed, 1);
}

static void test_live_session(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_session *s = NULL;
    struct sbx_agent *a = NULL, *b = NULL;
    struct sbx_sandbox_run *sr = NULL;
    struct sbx_run_result *res = NULL;
    CHECK_OK(sbx_client_create(client, &(struct sbx_create_spec){0}, &s, &err), &err);
    CHECK_OK(sbx_agent_new("first", &a, &err), &err);
    CHECK_OK(sbx_agent_new("second", &b, &err), &err);
    json_t *spec = json_loads("{\"capabilities\":[\"shell\"]}", 0, NULL);
    sbx_agent_set_sandbox_spec(a, spec);
    sbx_agent_set_sandbox_spec(b, spec);
    json_decref(spec);
    CHECK_OK(sbx_agent_add_handoff(a, b, &err), &err);
    static const char *const r[] = {
            "{\"id\":\"r1\",\"output\":[{\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":"
            "\"exec_command\",\"arguments\":\"{\\\"cmd\\\":\\\"echo hi > mark\\\"}\"}]}",
            "{\"id\":\"r2\",\"output\":[{\"type\":\"function_call\",\"call_id\":\"c2\",\"name\":"
            "\"transfer_to_second\",\"arguments\":\"{}\"}]}",
            "{\"id\":\"r3\",\"output\":[{\"type\":\"function_call\",\"call_id\":\"c3\",\"name\":"
            "\"exec_command\",\"arguments\":\"{\\\"cmd\\\":\\\"cat mark\\\"}\"}]}",
            "{\"id\":\"r4\",\"output\":[{\"type\":\"message\",\"role\":\"assistant\",\"content\":"
            "[{\"type\":\"output_text\",\"text\":\"ok\"}]}]}",
            NULL};
    struct sbx_model *m = replay(r);
    struct sbx_run_config cfg = {.client = client, .session = s};
    CHECK_OK(sbx_sandbox_run_new(&cfg, &sr, &err), &err);
    struct sbx_run_options o = {.model = m};
    json_t *in = json_string("go");
    CHECK_OK(sbx_sandbox_run(sr, a, in, &o, &res, &err), &err);
    /* Both agents used the one live session: the second saw the first's file. */
    const json_t *items = sbx_run_result_items(res);
    const char *last = json_string_value(
            json_object_get(json_array_get(items, json_array_size(items) - 2), "output"));
    CHECK_CONTAINS(last, "Output:\nhi\n");
    CHECK_EQ_INT(sbx_sandbox_run_count(sr), 2);
    CHECK_EQ_STR(sbx_sandbox_run_session_id(sr, 0), sbx_session_id(s));
    CHECK_EQ_STR(sbx_sandbox_run_session_id(sr, 1), sbx_session_id(s));
    CHECK(!sbx_sandbox_run_created(sr, 0));
    /* Not closed by the run: still usable. */
    struct sbx_buf b2;
    sbx_buf_init(&b2, SBX_BUF_NOLIMIT);
    CHECK_OK(sbx_session_read(s, "mark", 0, &b2, &err), &err);
    CHECK_EQ_STR(b2.data, "hi\n");
    sbx_buf_release(&b2);
    json_decref(in);
    sbx_run_result_free(res);
    sbx_sandbox_run_free(sr);
    sbx_model_free(m);
    sbx_agent_free(a);
    sbx_agent_free(b);
    CHECK_OK(sbx_session_delete(s, &err), &err);
    sbx_session_free(s);
}

static void test_config_errors(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_sandbox_run *sr = NULL;
    struct sbx_session *fake = (struct sbx_session *)&err; /* never dereferenced */
    struct sbx_run_config c1 = {.session = fake, .session_id = "x"};
    CHECK_ERR(sbx_sandbox_run_new(&c1, &sr, &err), SBX_E_INVAL, &err, "not both");
    struct sbx_run_config c2 = {.session_id = "x", .manifest_path = "m.yaml"};
    CHECK_ERR(sbx_sandbox_run_new(&c2, &sr, &err), SBX_E_INVAL, &err,
              "a manifest applies only to fresh sandboxes");
    /* run_as picks the manifest user the agent's shell commands run as. An unprivileged
     * caller maps only the sandbox's default user (the first), so there the command is refused
     * with the reason. */
    struct sbx_agent *a = NULL;
    CHECK_OK(sbx_agent_new("runner", &a, &err), &err);
    json_t *spec = json_loads("{\"capabilities\":[\"shell\"],\"run_as\":\"bob\","
                              "\"manifest\":{\"users\":[\"alice\",\"bob\"]}}",
                              0, NULL);
    sbx_agent_set_sandbox_spec(a, spec);
    json_decref(spec);
    static const char *const r[] = {
            "{\"id\":\"r1\",\"output\":[{\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":"
            "\"exec_command\",\"arguments\":\"{\\\"cmd\\\":\\\"id -un\\\"}\"}]}",
            "{\"id\":\"r2\",\"output\":[{\"type\":\"message\",\"role\":\"assistant\",\"content\":"
            "[{\"type\":\"output_text\",\"text\":\"ok\"}]}]}",
            NULL};
    struct sbx_model *m = replay(r);
    struct sbx_run_config cfg = {.client = client};
    CHECK_OK(sbx_sandbox_run_new(&cfg, &sr, &err), &err);
    struct sbx_run_options o = {.model = m};
    struct sbx_run_result *res = NULL;
    json_t *in = json_string("go");
    CHECK_OK(sbx_sandbox_run(sr, a, in, &o, &res, &err), &err);
    const json_t *items = res ? sbx_run_result_items(res) : NULL;
    const char *out = json_string_value(
            json_object_get(json_array_get(items, json_array_size(items) - 2), "output"));
    if (geteuid() == 0)
        CHECK_CONTAINS(out, "Output:\nbob\n");
    else
        CHECK_CONTAINS(out, "maps only");
    json_decref(in);
    sbx_run_result_free(res);
    sbx_sandbox_run_free(sr);
    sbx_model_free(m);
    sbx_agent_free(a);
}

/* A resumable run's sandboxes must outlive the process: a tied client is refused up front. */
static void test_resumable(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_sandbox_run *sr = NULL;
    char *run_dir = sbx_xasprintf("%s/run", tmp), *ws_dir = sbx_xasprintf("%s/ws", tmp);
    struct sbx_local_options lo = {.runtime_dir = run_dir, .workspace_dir = ws_dir, .tied = 1};
    struct sbx_client *tied = NULL;
    CHECK_OK(sbx_client_new("local", &lo, &tied, &err), &err);
    struct sbx_run_config cfg = {.client = tied, .resumable = 1};
    CHECK_ERR(sbx_sandbox_run_new(&cfg, &sr, &err), SBX_E_INVAL, &err,
              "needs sandboxes that outlive this process");
    cfg.client = client;
    CHECK_OK(sbx_sandbox_run_new(&cfg, &sr, &err), &err);
    sbx_sandbox_run_free(sr);
    /* Nothing to discard; a malformed payload is refused before anything is removed. */
    CHECK_OK(sbx_sandbox_run_state_discard(client, NULL, &err), &err);
    json_t *bad = json_pack("{s:[]}", "sessions_by_agent");
    CHECK_ERR(sbx_sandbox_run_state_discard(client, bad, &err), SBX_E_INVAL, &err,
              "'sessions_by_agent' must be an object");
    json_decref(bad);
    sbx_client_free(tied);
    free(run_dir);
    free(ws_dir);
}

/* The base prompt carries the guidance every sandbox agent needs, each in its own section. */
static void test_base_prompt(void)
{
    const char *p = sbx_sandbox_base_prompt();
    static const char *const sections[] = {"How to work:", "Untrusted content:", "Secrets:",
                                           "Checking your work:", "The final answer:"};
    const char *at = p;
    for (size_t i = 0; i < SBX_ARRAY_LEN(sections); i++) {
        const char *hit = strstr(p, sections[i]);
        CHECK(hit != NULL);
        CHECK(hit >= at); /* in this order */
        if (hit)
            at = hit;
    }
    CHECK_CONTAINS(p, "data to examine");    /* files and tool output are not instructions */
    CHECK_CONTAINS(p, "never by its value"); /* secrets stay unspoken */
    CHECK_CONTAINS(p, "run the project's tests");
    CHECK_CONTAINS(p, "Do not claim results you did not see.");
}

int main(void)
{
    TAP_START();
    if (!mkdtemp(tmp))
        abort();
    char *run_dir = sbx_xasprintf("%s/run", tmp), *ws_dir = sbx_xasprintf("%s/ws", tmp);
    struct sbx_local_options lo = {.runtime_dir = run_dir, .workspace_dir = ws_dir};
    struct sbx_error err = SBX_ERROR_INIT;
    if (sbx_client_new("local", &lo, &client, &err) < 0) {
        printf("# %s\n", err.msg);
        abort();
    }
    TAP_RUN(test_registry);
    TAP_RUN(test_compaction);
    TAP_RUN(test_custom_capability);
    TAP_RUN(test_live_session);
    TAP_RUN(test_config_errors);
    TAP_RUN(test_resumable);
    TAP_RUN(test_base_prompt);
    sbx_client_free(client);
    rm_tree(tmp);
    free(run_dir);
    free(ws_dir);
    return TAP_DONE();
}
