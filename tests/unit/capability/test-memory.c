/* The memory capability: the rollout item filter, secret scrubbing, the bounds on a rollout
 * line and on the injected summary, layout validation, and what each mode does (required
 * capabilities, instructions, capture). The summary and capture checks run against a local
 * sandbox. */
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tap.h"
#include "rmtree.h"
#include "capability/capability-internal.h"
#include "capability/memory-internal.h"
#include "sbx/json.h"
#include "sbx/local.h"
#include "sbx/memory.h"

static char tmp[] = "/tmp/sbx-test-memory.XXXXXX";
static struct sbx_client *client;

static struct sbx_capability *make(const char *doc, struct sbx_error *err)
{
    struct sbx_capability *c = NULL;
    json_t *v = json_loads(doc, JSON_DECODE_ANY, NULL);
    if (!v)
        abort();
    if (sbx_capability_from_json(v, &c, err) < 0)
        c = NULL;
    json_decref(v);
    return c;
}

static void test_filter(void)
{
    static const struct {
        const char *item;
        int keep;
    } cases[] = {
            {"{\"role\":\"user\",\"content\":\"hi\"}", 1},
            {"{\"type\":\"message\",\"role\":\"assistant\",\"content\":[]}", 1},
            {"{\"role\":\"tool\",\"content\":\"x\"}", 1},
            {"{\"role\":\"system\",\"content\":\"secret prompt\"}", 0},
            {"{\"type\":\"message\",\"role\":\"developer\",\"content\":\"x\"}", 0},
            {"{\"type\":\"function_call\",\"name\":\"exec_command\"}", 1},
            {"{\"type\":\"function_call_output\",\"output\":\"x\"}", 1},
            {"{\"type\":\"apply_patch_call\"}", 1},
            {"{\"type\":\"custom_tool_call_output\"}", 1},
            {"{\"type\":\"web_search_call\"}", 1},
            {"{\"type\":\"reasoning\",\"summary\":[]}", 0},
            {"{\"type\":\"compaction\",\"encrypted_content\":\"x\"}", 0},
            {"{\"type\":\"image_generation_call\"}", 0},
            {"{\"type\":\"something_new\"}", 0},
            {"\"a string\"", 0},
    };
    for (size_t i = 0; i < SBX_ARRAY_LEN(cases); i++) {
        json_t *v = json_loads(cases[i].item, JSON_DECODE_ANY, NULL);
        printf("# item %s\n", cases[i].item);
        CHECK_EQ_INT(sbx__memory_item_keep(v), cases[i].keep);
        json_decref(v);
    }
}

static void test_scrub(void)
{
    struct sbx_strv sec;
    sbx_strv_init(&sec);
    sbx_strv_push(&sec, "sk-live-123456");
    sbx_strv_push(&sec, "ab"); /* too short to scrub without wrecking the text */
    json_t *v = json_loads("{\"a\":\"key=sk-live-123456 and sk-live-123456\",\"b\":[\"about\","
                           "{\"sk-live-123456\":\"x\"}],\"c\":3}",
                           0, NULL);
    sbx__memory_scrub(v, &sec);
    char *s = sbx_json_dumps(v, SBX_JSON_COMPACT | SBX_JSON_SORTED);
    CHECK_EQ_STR(s, "{\"a\":\"key=[REDACTED_SECRET] and [REDACTED_SECRET]\",\"b\":[\"about\","
                    "{\"[REDACTED_SECRET]\":\"x\"}],\"c\":3}");
    free(s);
    json_decref(v);
    sbx_strv_release(&sec);
}

static void test_rollout_line(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_strv sec;
    struct sbx_buf out;
    sbx_strv_init(&sec);
    sbx_strv_push(&sec, "TOPSECRET-VALUE");
    json_t *input = json_loads("[{\"role\":\"user\",\"content\":\"do it\"},{\"role\":\"system\","
                               "\"content\":\"sys\"}]",
                               0, NULL);
    json_t *gen = json_array();
    char *big = sbx_xmalloc(100000);
    memset(big, 'x', 99999);
    big[99999] = '\0';
    for (int i = 0; i < 40; i++)
        sbx_json_append(gen,
                        json_pack("{s:s, s:s}", "type", "function_call_output", "output", big));
    sbx_json_append(gen, json_pack("{s:s, s:s}", "type", "function_call_output", "output",
                                   "printed TOPSECRET-VALUE"));
    sbx_json_append(gen, json_pack("{s:s}", "type", "reasoning"));
    struct sbx__memory_rollout r = {
            .rollout_id = "run-1",
            .updated_at = "2026-01-01T00:00:00Z",
            .input = input,
            .generated = gen,
            .terminal_state = "failed",
            .error = "boom TOPSECRET-VALUE",
            .secrets = &sec,
    };
    sbx_buf_init(&out, SBX_BUF_NOLIMIT);
    CHECK_OK(sbx__memory_rollout_line(&r, 200000, &out, &err), &err);
    CHECK(out.len <= 200000);
    CHECK(out.data[out.len - 1] == '\n');
    CHECK(strchr(out.data, '\n') == out.data + out.len - 1); /* one line */
    json_t *o = json_loads(out.data, 0, NULL);
    CHECK(o != NULL);
    CHECK_EQ_STR(json_string_value(json_object_get(o, "rollout_id")), "run-1");
    CHECK_EQ_INT(json_array_size(json_object_get(o, "input")), 1); /* the system message went */
    json_t *g = json_object_get(o, "generated_items");
    /* The newest items stay; reasoning never does; long strings are cut. */
    const char *last =
            json_string_value(json_object_get(json_array_get(g, json_array_size(g) - 1), "output"));
    CHECK_EQ_STR(last, "printed [REDACTED_SECRET]");
    CHECK(json_integer_value(json_object_get(o, "omitted_items")) > 0);
    CHECK(json_string_length(json_object_get(json_array_get(g, 0), "output")) <=
          SBX_MEMORY_ITEM_STRING_MAX + 64);
    json_t *meta = json_object_get(o, "terminal_metadata");
    CHECK_EQ_STR(json_string_value(json_object_get(meta, "terminal_state")), "failed");
    CHECK_EQ_STR(json_string_value(json_object_get(meta, "exception_message")),
                 "boom [REDACTED_SECRET]");
    CHECK(strstr(out.data, "TOPSECRET") == NULL);
    json_decref(o);
    /* A budget nothing fits in is an error, not a cut line. */
    sbx_buf_setlen(&out, 0);
    CHECK_ERR(sbx__memory_rollout_line(&r, 50, &out, &err), SBX_E_TOOBIG, &err, "exceeds");
    sbx_buf_release(&out);
    free(big);
    json_decref(input);
    json_decref(gen);
    sbx_strv_release(&sec);
}

static void test_layout(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    CHECK_OK(sbx__memory_check_dir("d", "memories", &err), &err);
    CHECK_OK(sbx__memory_check_dir("d", "agents/a/memories/", &err), &err);
    CHECK_ERR(sbx__memory_check_dir("d", "", &err), SBX_E_INVAL, &err, "empty");
    CHECK_ERR(sbx__memory_check_dir("d", "/abs", &err), SBX_E_INVAL, &err, "relative");
    CHECK_ERR(sbx__memory_check_dir("d", "a/../b", &err), SBX_E_INVAL, &err, "plain path");
    CHECK_ERR(sbx__memory_check_dir("d", "..", &err), SBX_E_INVAL, &err, "plain path");
    CHECK_ERR(sbx__memory_check_dir("d", "a//b", &err), SBX_E_INVAL, &err, "plain path");
    CHECK_ERR(sbx__memory_check_dir("d", "./a", &err), SBX_E_INVAL, &err, "plain path");

    struct sbx_capability *c = make("\"memory\"", &err);
    const char *md = NULL, *sd = NULL;
    CHECK(c != NULL);
    CHECK_OK(sbx_memory_layout(c, &md, &sd, &err), &err);
    CHECK_EQ_STR(md, "memories");
    CHECK_EQ_STR(sd, "sessions");
    sbx_capability_unref(c);
    c = make("{\"type\":\"memory\",\"layout\":{\"memories_dir\":\"a/mem/\",\"sessions_dir\":"
             "\"a/ses\"}}",
             &err);
    CHECK(c != NULL);
    CHECK_OK(sbx_memory_layout(c, &md, &sd, &err), &err);
    CHECK_EQ_STR(md, "a/mem");
    CHECK_EQ_STR(sd, "a/ses");
    sbx_capability_unref(c);

    static const struct {
        const char *doc, *msg;
    } bad[] = {
            {"{\"type\":\"memory\",\"layout\":{\"memories_dir\":\"../x\"}}", "memories_dir"},
            {"{\"type\":\"memory\",\"layout\":{\"sessions_dir\":\"/tmp\"}}", "sessions_dir"},
            {"{\"type\":\"memory\",\"layout\":{\"memories_dir\":\"m\",\"sessions_dir\":\"m\"}}",
             "contain each other"},
            {"{\"type\":\"memory\",\"layout\":{\"memories_dir\":\"m\",\"sessions_dir\":\"m/s\"}}",
             "contain each other"},
            {"{\"type\":\"memory\",\"layout\":{\"memory_dir\":\"m\"}}", "memory_dir"},
            {"{\"type\":\"memory\",\"read\":null,\"generate\":null}", "both off"},
            {"{\"type\":\"memory\",\"read\":\"yes\"}", "'read'"},
            {"{\"type\":\"memory\",\"generate\":{\"max_raw_memories_for_consolidation\":0}}",
             "1 to 4096"},
            {"{\"type\":\"memory\",\"generate\":{\"max_raw_memories_for_consolidation\":5000}}",
             "1 to 4096"},
    };
    for (size_t i = 0; i < SBX_ARRAY_LEN(bad); i++) {
        c = make(bad[i].doc, &err);
        printf("# %s\n", bad[i].doc);
        CHECK(c == NULL);
        sbx_capability_unref(c);
        CHECK_CONTAINS(err.msg, bad[i].msg);
        CHECK_CONTAINS(err.msg, "capability 'memory'");
    }
}

static void test_names(void)
{
    char slug[81];
    sbx__memory_slug("Build Lesson/../x.md", slug);
    CHECK_EQ_STR(slug, "build-lesson-x");
    sbx__memory_slug("../../", slug);
    CHECK_EQ_STR(slug, "rollout");
    char longs[300];
    memset(longs, 'a', sizeof(longs) - 1);
    longs[sizeof(longs) - 1] = '\0';
    sbx__memory_slug(longs, slug);
    CHECK_EQ_INT(strlen(slug), 80);
    CHECK(sbx__memory_id_ok("run-0123abcd"));
    CHECK(sbx__memory_id_ok("my.conv_1"));
    CHECK(!sbx__memory_id_ok(".hidden"));
    CHECK(!sbx__memory_id_ok("a/b"));
    CHECK(!sbx__memory_id_ok(""));
}

/* The required capabilities depend on the mode. */
static void test_modes(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_capability *shell = make("\"shell\"", &err), *fs = make("\"filesystem\"", &err);
    static const struct {
        const char *doc;
        int with_shell, with_fs, ok;
        const char *msg;
    } cases[] = {
            {"\"memory\"", 1, 1, 1, NULL},
            {"\"memory\"", 0, 0, 0, "requires missing capabilities: shell, filesystem"},
            {"\"memory\"", 1, 0, 0, "requires missing capabilities: filesystem"},
            {"\"memory\"", 0, 1, 0, "requires missing capabilities: shell"},
            {"{\"type\":\"memory\",\"read\":{\"live_update\":false}}", 1, 0, 1, NULL},
            {"{\"type\":\"memory\",\"read\":null}", 0, 0, 1, NULL},
    };
    for (size_t i = 0; i < SBX_ARRAY_LEN(cases); i++) {
        struct sbx_capability *m = make(cases[i].doc, &err), *all[3];
        size_t n = 0;
        all[n++] = m;
        if (cases[i].with_shell)
            all[n++] = shell;
        if (cases[i].with_fs)
            all[n++] = fs;
        const struct sbx_capability_ops *ops = sbx__capability_ops(m);
        int rc = ops->check(m, all, n, &err);
        CHECK_EQ_INT(rc == 0, cases[i].ok);
        if (cases[i].msg)
            CHECK_CONTAINS(err.msg, cases[i].msg);
        sbx_capability_unref(m);
    }
    /* Read-only has nothing to update. */
    struct sbx_capability *ro = make("{\"type\":\"memory\",\"generate\":null}", &err);
    CHECK_ERR(sbx_memory_update(ro, NULL, NULL, NULL, NULL, NULL, &err), SBX_E_INVAL, &err,
              "read-only");
    CHECK_ERR(sbx_memory_update(shell, NULL, NULL, NULL, NULL, NULL, &err), SBX_E_INVAL, &err,
              "not a memory capability");
    sbx_capability_unref(ro);
    sbx_capability_unref(shell);
    sbx_capability_unref(fs);
}

/* Instructions and capture against a real workspace. */
static void test_session(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_session *s = NULL;
    struct sbx_buf out;
    sbx_buf_init(&out, SBX_BUF_NOLIMIT);
    CHECK_OK(sbx_client_create(client, &(struct sbx_create_spec){0}, &s, &err), &err);
    if (!s)
        return;
    struct sbx_capability *rw = make("\"memory\"", &err),
                          *ro = make("{\"type\":\"memory\",\"generate\":null}", &err),
                          *go = make("{\"type\":\"memory\",\"read\":null}", &err);
    struct sbx_capability_env env = {.session = s};

    /* No summary yet: no fragment. */
    CHECK_OK(sbx__capability_ops(rw)->instructions(rw, &env, &out, &err), &err);
    CHECK_EQ_INT(out.len, 0);

    /* A summary far over the budget is cut to it, head and tail kept. */
    size_t big = (size_t)SBX_MEMORY_SUMMARY_TOKENS * 4 * 3;
    char *text = sbx_xmalloc(big + 1);
    memset(text, 'm', big);
    memcpy(text, "HEAD-LINE\n", 10);
    text[big] = '\0';
    CHECK_OK(sbx_session_write(s, "memories/memory_summary.md", text, big, 0644, SBX_WRITE_PARENTS,
                               &err),
             &err);
    CHECK_OK(sbx__capability_ops(rw)->instructions(rw, &env, &out, &err), &err);
    CHECK(out.len < (size_t)SBX_MEMORY_SUMMARY_TOKENS * 4 + 2048);
    CHECK_CONTAINS(out.data, "HEAD-LINE");
    CHECK_CONTAINS(out.data, "tokens truncated");
    CHECK_CONTAINS(out.data, "memories/MEMORY.md");
    CHECK_CONTAINS(out.data, "fix it in the same turn");
    sbx_buf_setlen(&out, 0);
    CHECK_OK(sbx__capability_ops(ro)->instructions(ro, &env, &out, &err), &err);
    CHECK_CONTAINS(out.data, "read-only for you");
    sbx_buf_setlen(&out, 0);
    CHECK_OK(sbx__capability_ops(go)->instructions(go, &env, &out, &err), &err);
    CHECK_EQ_INT(out.len, 0); /* generate-only: old memory does not influence the run */

    /* Capture: one line per run, appended, by conversation; read-only captures nothing. */
    json_t *in = json_loads("[{\"role\":\"user\",\"content\":\"q\"}]", 0, NULL),
           *gen = json_array();
    env.input_items = in;
    env.generated_items = gen;
    env.conversation = "conv.1";
    env.final_output = "done";
    CHECK_EQ_INT(sbx__capability_ops(rw)->run_end(rw, &env, &err), 1);
    env.run_status = -SBX_E_MAXTURNS;
    env.run_error = "max turns (3) exceeded";
    CHECK_EQ_INT(sbx__capability_ops(rw)->run_end(rw, &env, &err), 1);
    CHECK_EQ_INT(sbx__capability_ops(ro)->run_end(ro, &env, &err), 0);
    sbx_buf_setlen(&out, 0);
    CHECK_OK(sbx_session_read(s, "sessions/conv.1.jsonl", 0, &out, &err), &err);
    size_t lines = 0;
    for (size_t i = 0; i < out.len; i++)
        lines += out.data[i] == '\n';
    CHECK_EQ_INT(lines, 2);
    CHECK_CONTAINS(out.data, "\"terminal_state\":\"completed\"");
    CHECK_CONTAINS(out.data, "\"terminal_state\":\"max_turns_exceeded\"");
    CHECK_CONTAINS(out.data, "\"final_output\":\"done\"");
    struct sbx_dirlist l = {0};
    CHECK_OK(sbx_session_ls(s, "sessions", &l, &err), &err);
    CHECK_EQ_INT(l.n, 1);
    sbx_dirlist_release(&l);

    json_decref(in);
    json_decref(gen);
    free(text);
    sbx_capability_unref(rw);
    sbx_capability_unref(ro);
    sbx_capability_unref(go);
    sbx_buf_release(&out);
    CHECK_OK(sbx_session_delete(s, &err), &err);
    sbx_session_free(s);
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
    TAP_RUN(test_filter);
    TAP_RUN(test_scrub);
    TAP_RUN(test_rollout_line);
    TAP_RUN(test_layout);
    TAP_RUN(test_names);
    TAP_RUN(test_modes);
    TAP_RUN(test_session);
    sbx_client_free(client);
    rm_tree(tmp);
    free(run_dir);
    free(ws_dir);
    return TAP_DONE();
}
