/* Run states: field checks, versions, digests, secret scrubbing, atomic files, the check
 * that agent files are unchanged, and the approvals of the Agents SDK's RunState both ways. */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "tap.h"
#include "sbx/agent.h"
#include "sbx/buf.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/runner.h"
#include "sbx/runstate.h"

static char dir[] = "/tmp/sbx-test-runstate.XXXXXX";

static json_t *base_state(void)
{
    const char *text =
            "{\"format\":\"sbx-run-state\",\"version\":1,\"status\":\"interrupted\","
            "\"error\":null,\"updated_at\":\"2026-01-01T00:00:00Z\",\"start_agent\":\"a\","
            "\"current_agent\":\"a\",\"agents\":[{\"name\":\"a\",\"file\":null,\"digest\":null}],"
            "\"agent_files\":null,\"turn\":1,\"max_turns\":10,"
            "\"items\":[{\"type\":\"message\",\"role\":\"user\",\"content\":\"h\\u00e9\"},"
            "{\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":\"x\",\"arguments\":\"{}\"}],"
            "\"input_items\":1,\"usage\":{\"requests\":1},\"model\":null,\"model_settings\":null,"
            "\"previous_response_id\":\"r1\",\"sent_upto\":2,\"tools_used\":[],"
            "\"conversation\":null,\"open_calls\":[\"c1\"],"
            "\"pending\":[{\"agent\":\"a\",\"tool\":\"x\",\"call_id\":\"c1\","
            "\"type\":\"function_call\",\"arguments\":{}}],\"decisions\":{},"
            "\"final_output\":null,\"sandbox\":null,\"meta\":{\"cli\":{\"model\":\"m\"}}}";
    json_t *v = NULL;
    struct sbx_error err = SBX_ERROR_INIT;
    if (sbx_json_parse(text, strlen(text), NULL, &v, &err) < 0) {
        printf("# %s\n", err.msg);
        abort();
    }
    return v;
}

/* Serialise (digest made afresh) and parse again. */
static int round_trip(const json_t *st, json_t **out, struct sbx_error *err)
{
    char *text = NULL;
    int rc = sbx_run_state_serialize(st, NULL, &text, err);
    if (rc == 0)
        rc = sbx_run_state_parse(text, strlen(text), out, err);
    free(text);
    return rc;
}

static void bad_field(const char *key, json_t *value, const char *needle)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *st = base_state(), *out = NULL;
    sbx_json_set(st, key, value);
    int rc = round_trip(st, &out, &err);
    CHECK_EQ_INT(rc, -SBX_E_INVAL);
    CHECK_CONTAINS(err.msg, needle);
    json_decref(out);
    json_decref(st);
}

static void test_fields(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *st = base_state(), *out = NULL;
    CHECK_OK(round_trip(st, &out, &err), &err);
    json_t *cmp = json_deep_copy(out);
    json_object_del(cmp, "digest");
    CHECK(json_equal(cmp, st));
    CHECK(strncmp(json_string_value(json_object_get(out, "digest")), "sha256:", 7) == 0);
    json_decref(cmp);
    json_decref(out);
    json_decref(st);

    bad_field("turn", json_integer(-1), "field 'turn' must be a non-negative integer");
    bad_field("sent_upto", json_integer(9), "field 'sent_upto' must be at most the number");
    bad_field("max_turns", sbx_json_str("ten"), "field 'max_turns' must be an integer");
    bad_field("status", sbx_json_str("paused"), "field 'status' must be");
    bad_field("current_agent", json_null(), "field 'current_agent' must be a string");
    bad_field("items", json_pack("[i]", 1), "field 'items' must be a list of items");
    bad_field("agents", json_pack("[{s:i}]", "name", 1), "field 'agents' must be a list");
    bad_field("agent_files", json_pack("[{s:s}]", "path", "/x"), "field 'agent_files'");
    bad_field("pending", json_pack("[{s:s}]", "call_id", "c1"), "field 'pending'");
    bad_field("decisions", json_pack("{s:{s:s}}", "c1", "approved", "yes"), "field 'decisions'");
    bad_field("open_calls", json_pack("[i]", 3), "field 'open_calls' must be a list of strings");
    bad_field("conversation", json_pack("{s:i}", "name", 1), "field 'conversation'");
    bad_field("model", json_integer(5), "field 'model' must be a string or null");
    bad_field("sandbox", json_array(), "field 'sandbox' must be an object or null");
    bad_field("usage", json_null(), "field 'usage' must be an object");
    bad_field("format", sbx_json_str("other"), "field 'format' must be \"sbx-run-state\"");
    bad_field("version", json_integer(0), "field 'version' must be a positive integer");

    st = base_state();
    sbx_json_set(st, "version", json_integer(3));
    CHECK_ERR(round_trip(st, &out, &err), SBX_E_UNSUPPORTED, &err,
              "run state: version 3 is newer than this sbx reads (2)");
    json_decref(st);

    /* Version 2: "decisions" is a log, "always" a list, "run_id" a string. */
    st = base_state();
    sbx_json_set(st, "version", json_integer(2));
    sbx_json_set(st, "decisions",
                 json_pack("[{s:s, s:b, s:s}]", "call_id", "c1", "approved", 1, "by", "prompt"));
    sbx_json_set(st, "always", json_pack("[{s:s, s:b}]", "tool", "x", "approved", 0));
    sbx_json_set(st, "run_id", sbx_json_str("0123abcd"));
    CHECK_OK(round_trip(st, &out, &err), &err);
    json_decref(out);
    out = NULL;
    sbx_json_set(st, "decisions", json_object());
    CHECK_ERR(round_trip(st, &out, &err), SBX_E_INVAL, &err,
              "field 'decisions' must be a list of {call_id, approved, ...}");
    sbx_json_set(st, "decisions", json_array());
    sbx_json_set(st, "always", json_pack("[{s:i}]", "tool", 1));
    CHECK_ERR(round_trip(st, &out, &err), SBX_E_INVAL, &err, "field 'always' must be a list");
    json_decref(st);

    CHECK_ERR(sbx_run_state_parse("{\"format\":", 10, &out, &err), SBX_E_PARSE, &err, "");
    CHECK_ERR(sbx_run_state_parse("[]", 2, &out, &err), SBX_E_INVAL, &err, "not a JSON object");
    CHECK_ERR(sbx_run_state_parse("{}", SBX_RUN_STATE_MAX + 1, &out, &err), SBX_E_TOOBIG, &err,
              "larger than");
}

static void test_digest(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *st = base_state(), *out = NULL;
    char *text = NULL;
    CHECK_OK(sbx_run_state_serialize(st, NULL, &text, &err), &err);
    /* Canonical form: sorted keys, compact, UTF-8; "é" is in the text as UTF-8. */
    CHECK_CONTAINS(text, "h\xc3\xa9");
    CHECK_OK(sbx_run_state_parse(text, strlen(text), &out, &err), &err);
    json_decref(out);
    out = NULL;
    char *p = strstr(text, "\"turn\": 1");
    CHECK(p != NULL);
    if (p)
        p[8] = '7';
    CHECK_ERR(sbx_run_state_parse(text, strlen(text), &out, &err), SBX_E_INVAL, &err,
              "run state: its digest does not match its content (the file was edited or "
              "damaged)");
    free(text);
    sbx_json_set(st, "digest", sbx_json_str("sha256:00"));
    json_t *dump = json_deep_copy(st);
    char *raw = json_dumps(dump, JSON_COMPACT);
    CHECK_ERR(sbx_run_state_parse(raw, strlen(raw), &out, &err), SBX_E_INVAL, &err,
              "digest does not match");
    free(raw);
    json_decref(dump);
    json_object_del(st, "digest");
    raw = json_dumps(st, JSON_COMPACT);
    CHECK_ERR(sbx_run_state_parse(raw, strlen(raw), &out, &err), SBX_E_INVAL, &err,
              "field 'digest' must be a string");
    free(raw);
    json_decref(st);
}

static void test_scrub(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *st = base_state(), *out = NULL;
    json_array_append_new(json_object_get(st, "items"),
                          json_pack("{s:s, s:s, s:s}", "type", "function_call_output", "call_id",
                                    "c1", "output", "key=sk-live-0123 and sk-live-0123!"));
    sbx_json_set(st, "meta",
                 json_pack("{s:{s:[s]}, s:s}", "deep", "list", "Bearer sk-live-0123",
                           "sk-live-0123", "as a key"));
    sbx_json_set(st, "sandbox", json_pack("{s:s}", "note", "abc stays"));
    struct sbx_strv secrets;
    sbx_strv_init(&secrets);
    sbx_strv_push(&secrets, "sk-live-0123");
    sbx_strv_push(&secrets, "abc");
    char *text = NULL;
    CHECK_OK(sbx_run_state_serialize(st, &secrets, &text, &err), &err);
    CHECK(text && !strstr(text, "sk-live-0123"));
    CHECK_CONTAINS(text, "key=[redacted] and [redacted]!");
    CHECK_CONTAINS(text, "Bearer [redacted]");
    CHECK_CONTAINS(text, "\"[redacted]\": \"as a key\"");
    CHECK_CONTAINS(text, "abc stays");
    CHECK_OK(sbx_run_state_parse(text, strlen(text), &out, &err), &err);
    free(text);
    json_decref(out);
    sbx_strv_release(&secrets);
    json_decref(st);
}

static int count_entries(const char *d)
{
    DIR *dh = opendir(d);
    int n = 0;
    struct dirent *e;
    while (dh && (e = readdir(dh)))
        n += e->d_name[0] != '.' || strncmp(e->d_name, ".sbx-", 5) == 0;
    if (dh)
        closedir(dh);
    return n;
}

static void test_files(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char *sub = sbx_xasprintf("%s/files", dir);
    char *path = sbx_xasprintf("%s/state.json", sub);
    mkdir(sub, 0700);
    json_t *st = base_state(), *out = NULL;
    CHECK_OK(sbx_run_state_write_file(path, st, NULL, &err), &err);
    struct stat sb;
    CHECK(stat(path, &sb) == 0 && (sb.st_mode & 0777) == 0600);
    CHECK_OK(sbx_run_state_read_file(path, &out, &err), &err);
    CHECK_EQ_INT(json_integer_value(json_object_get(out, "turn")), 1);
    json_decref(out);
    out = NULL;

    /* A write that fails half way (the file size limit) leaves the old state and no temp. */
    json_t *big = json_deep_copy(st);
    char *filler = sbx_xcalloc(1, 200000);
    memset(filler, 'x', 199999);
    sbx_json_set(big, "turn", json_integer(5));
    json_array_append_new(json_object_get(big, "items"),
                          json_pack("{s:s, s:s}", "type", "message", "content", filler));
    free(filler);
    /* The child answers through a pipe: under valgrind its exit status is valgrind's, which
     * counts what the child no longer points to as lost. */
    int res[2];
    CHECK(pipe2(res, O_CLOEXEC) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit rl = {.rlim_cur = 4096, .rlim_max = 4096};
        signal(SIGXFSZ, SIG_IGN);
        setrlimit(RLIMIT_FSIZE, &rl);
        struct sbx_error e2 = SBX_ERROR_INIT;
        char c = sbx_run_state_write_file(path, big, NULL, &e2) < 0 ? 'f' : 'w';
        (void)!write(res[1], &c, 1);
        _exit(0);
    }
    close(res[1]);
    char verdict = 0;
    (void)!read(res[0], &verdict, 1);
    close(res[0]);
    waitpid(pid, NULL, 0);
    CHECK_EQ_INT(verdict, 'f');
    CHECK_OK(sbx_run_state_read_file(path, &out, &err), &err);
    CHECK_EQ_INT(json_integer_value(json_object_get(out, "turn")), 1);
    CHECK_EQ_INT(count_entries(sub), 1);
    json_decref(out);
    out = NULL;
    json_decref(big);

    FILE *f = fopen(path, "a");
    fputs(" ", f);
    fclose(f);
    CHECK_OK(sbx_run_state_read_file(path, &out, &err), &err);
    json_decref(out);
    out = NULL;
    f = fopen(path, "r+");
    fputs("{\"x\"", f);
    fclose(f);
    CHECK_ERR(sbx_run_state_read_file(path, &out, &err), SBX_E_PARSE, &err, "state.json");
    unlink(path);
    CHECK_ERR(sbx_run_state_read_file(path, &out, &err), SBX_E_NOTFOUND, &err, "");
    rmdir(sub);
    json_decref(st);
    free(path);
    free(sub);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        abort();
    fputs(text, f);
    fclose(f);
}

static void test_agent_files(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char *main_path = sbx_xasprintf("%s/main.yaml", dir);
    char *helper_path = sbx_xasprintf("%s/helper.yaml", dir);
    write_text(main_path, "name: main\nhandoffs: [helper.yaml]\n");
    write_text(helper_path, "name: helper\n");
    struct sbx_agent_file *f = NULL;
    CHECK_OK(sbx_agent_file_load(main_path, &f, &err), &err);
    if (!f)
        return;
    json_t *src = sbx_agent_file_sources(f);
    CHECK_EQ_INT(json_array_size(src), 2);
    CHECK_EQ_STR(json_string_value(json_object_get(json_array_get(src, 0), "path")), main_path);
    CHECK_EQ_STR(sbx_agent_source_file(sbx_agent_file_agent(f)), main_path);
    const char *dg = sbx_agent_source_digest(sbx_agent_file_agent(f));
    CHECK(dg && strncmp(dg, "sha256:", 7) == 0 && strlen(dg) == 71);
    json_t *st = base_state();
    sbx_json_set(st, "agent_files", src);
    CHECK_OK(sbx_run_state_check_agent_files(st, f, 0, &err), &err);
    sbx_agent_file_free(f);
    f = NULL;

    write_text(helper_path, "name: helper\ninstructions: changed\n");
    CHECK_OK(sbx_agent_file_load(main_path, &f, &err), &err);
    char *want = sbx_xasprintf("run state: agent file '%s' changed since the run was saved",
                               helper_path);
    CHECK_ERR(sbx_run_state_check_agent_files(st, f, 0, &err), SBX_E_INVAL, &err, want);
    CHECK_CONTAINS(err.msg, "then, sha256:");
    CHECK_CONTAINS(err.msg, "now); allow it with --allow-agent-change");
    CHECK_OK(sbx_run_state_check_agent_files(st, f, 1, &err), &err);

    sbx_json_set(st, "agent_files", sbx_agent_file_sources(f));
    json_array_append_new(json_object_get(st, "agent_files"),
                          json_pack("{s:s, s:s}", "path", "/gone.yaml", "digest", "sha256:00"));
    CHECK_ERR(sbx_run_state_check_agent_files(st, f, 0, &err), SBX_E_INVAL, &err,
              "run state: agent file '/gone.yaml' is no longer used by the agent");
    sbx_agent_file_free(f);
    free(want);
    json_decref(st);
    unlink(main_path);
    unlink(helper_path);
    free(main_path);
    free(helper_path);
}

/* An SDK RunState (JS names) of agent "A" interrupted at call c1 of tool "t" in turn 2, with
 * approvals (JSON text). */
static json_t *sdk_state(const char *approvals)
{
    char *text = sbx_xasprintf(
            "{\"$schemaVersion\":\"1.22\",\"currentTurn\":2,\"maxTurns\":5,"
            "\"currentAgent\":{\"name\":\"A\"},\"originalInput\":\"hi\","
            "\"generatedItems\":[{\"type\":\"tool_call_item\",\"rawItem\":{\"type\":"
            "\"function_call\",\"callId\":\"c1\",\"name\":\"t\",\"arguments\":"
            "\"{\\\"x\\\":1}\"}}],\"currentStep\":{\"type\":\"next_step_interruption\","
            "\"data\":{\"interruptions\":[{\"type\":\"tool_approval_item\",\"toolName\":"
            "\"t\",\"agent\":{\"name\":\"A\"},\"rawItem\":{\"type\":\"function_call\","
            "\"callId\":\"c1\",\"name\":\"t\",\"arguments\":\"{\\\"x\\\":1}\"}}]}},"
            "\"context\":{\"usage\":{\"requests\":1},\"approvals\":%s}}",
            approvals);
    json_t *v = json_loads(text, 0, NULL);
    free(text);
    if (!v)
        abort();
    return v;
}

/* The SDK's RunState as an sbx state that parses as one; *out: the parsed state. */
static int import_sdk(struct sbx_agent *a, const char *approvals, json_t **out,
                      struct sbx_error *err)
{
    json_t *sdk = sdk_state(approvals), *st = NULL;
    struct sbx_run_state_import opt = {.start = a};
    int rc = sbx_run_state_from_sdk(sdk, &opt, &st, err);
    if (rc == 0)
        rc = round_trip(st, out, err);
    json_decref(sdk);
    json_decref(st);
    return rc;
}

static char *approvals_of(const json_t *st, const json_t *always)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *js = NULL;
    CHECK_OK(sbx_run_state_to_sdk(st, always, &js, &err), &err);
    char *text = js ? json_dumps(json_object_get(json_object_get(js, "context"), "approvals"),
                                 JSON_SORT_KEYS | JSON_COMPACT)
                    : sbx_xstrdup("");
    json_decref(js);
    return text;
}

/* Import: per-call decisions into the bound log, every-call ones as "always"; export: the log
 * entries still bound to a pending call, and the "always" list the caller trusts. */
static void test_sdk_approvals(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_agent *a = NULL;
    json_t *st = NULL;
    CHECK_OK(sbx_agent_new("A", &a, &err), &err);
    CHECK_OK(import_sdk(a,
                        "{\"t\":{\"approved\":[\"c1\",\"c9\"],\"rejected\":[]},"
                        "\"u\":{\"approved\":true,\"rejected\":[]},"
                        "\"v\":{\"approved\":[],\"rejected\":true}}",
                        &st, &err),
             &err);
    CHECK_EQ_INT(json_integer_value(json_object_get(st, "version")), SBX_RUN_STATE_VERSION);
    const char *rid = json_string_value(json_object_get(st, "run_id"));
    CHECK(rid && strlen(rid) == 32);
    CHECK_EQ_INT(json_integer_value(json_object_get(
                         json_array_get(json_object_get(st, "pending"), 0), "turn")),
                 2);
    /* c9 is not pending: no decision for it. */
    json_t *log = json_object_get(st, "decisions");
    CHECK_EQ_INT(json_array_size(log), 1);
    char *d = json_dumps(json_array_get(log, 0), JSON_SORT_KEYS | JSON_COMPACT);
    CHECK_CONTAINS(d, "\"approved\":true,\"arguments_digest\":\"sha256:");
    CHECK_CONTAINS(d, "\"by\":\"SDK run state\",\"call_id\":\"c1\",\"tool\":\"t\",\"turn\":2,"
                      "\"type\":\"function_call\"");
    free(d);
    char *al = json_dumps(json_object_get(st, "always"), JSON_SORT_KEYS | JSON_COMPACT);
    CHECK_EQ_STR(al, "[{\"approved\":true,\"by\":\"SDK run state\",\"tool\":\"u\",\"turn\":2},"
                     "{\"approved\":false,\"by\":\"SDK run state\",\"tool\":\"v\",\"turn\":2}]");
    free(al);
    CHECK(!json_object_get(st, "always_seal")); /* the caller seals */

    /* Export: no trusted "always": the bound decision only; with it, the tools' records. */
    char *ap = approvals_of(st, NULL);
    CHECK_EQ_STR(ap, "{\"t\":{\"approved\":[\"c1\"],\"rejected\":[]}}");
    free(ap);
    ap = approvals_of(st, json_object_get(st, "always"));
    CHECK_EQ_STR(ap, "{\"t\":{\"approved\":[\"c1\"],\"rejected\":[]},"
                     "\"u\":{\"approved\":true,\"rejected\":[]},"
                     "\"v\":{\"approved\":[],\"rejected\":true}}");
    free(ap);
    /* A glob: every tool of the state's calls it matches; an approval beats a rejection. */
    json_t *globs = json_loads("[{\"tool\":\"*\",\"approved\":false},"
                               "{\"tool\":\"[st]\",\"approved\":true}]",
                               0, NULL);
    ap = approvals_of(st, globs);
    CHECK_EQ_STR(ap, "{\"t\":{\"approved\":true,\"rejected\":[]}}");
    free(ap);
    json_decref(globs);
    /* A log entry whose arguments differ from the pending call's answers nothing. */
    sbx_json_set(json_array_get(log, 0), "arguments_digest",
                 json_string("sha256:00000000000000000000000000000000000000000000000000000000"
                             "00000000"));
    ap = approvals_of(st, NULL);
    CHECK_EQ_STR(ap, "{}");
    free(ap);
    json_decref(st);
    st = NULL;

    /* A name sbx would read as a glob cannot carry a decision for every call. */
    CHECK_ERR(import_sdk(a, "{\"t*\":{\"approved\":true}}", &st, &err), SBX_E_UNSUPPORTED, &err,
              "field 'context.approvals.t*': a decision for every call of a tool needs a plain "
              "tool name");
    json_decref(st);
    sbx_agent_free(a);
}

int main(void)
{
    TAP_START();
    if (!mkdtemp(dir))
        TAP_SKIP_ALL("cannot make a temporary directory");
    TAP_RUN(test_fields);
    TAP_RUN(test_digest);
    TAP_RUN(test_scrub);
    TAP_RUN(test_files);
    TAP_RUN(test_agent_files);
    TAP_RUN(test_sdk_approvals);
    if (rmdir(dir) < 0)
        printf("# cannot remove '%s'\n", dir);
    return TAP_DONE();
}
