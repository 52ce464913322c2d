/* An agent file's own tools: what the loader accepts (the definitions sent to the model, the
 * host tools named, the header secrets known) and every bad entry refused with a message naming
 * the file, the tool and the field. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "tap.h"
#include "replay-model.h"
#include "rmtree.h"
#include "sbx/json.h"
#include "sbx/runner.h"
#include "sbx/strv.h"

static char dir[] = "/tmp/sbx-test-file-tools.XXXXXX";

/* Write an agent file named "a.yaml" whose tools list is tools_yaml; returns its path. */
static char *write_agent(const char *tools_yaml)
{
    char *path = sbx_xasprintf("%s/a.yaml", dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "name: Smith\ncapabilities: []\ntools:\n%s", tools_yaml);
    fclose(f);
    return path;
}

/* The tools entry must be refused with code and a message holding "agent file 'PATH': field
 * 'tools': " followed by want. */
static void bad(const char *tools_yaml, enum sbx_errcode code, const char *want)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_agent_file *f = NULL;
    char *path = write_agent(tools_yaml);
    char *msg = sbx_xasprintf("agent file '%s': field 'tools': %s", path, want);
    CHECK_ERR(sbx_agent_file_load(path, &f, &err), code, &err, msg);
    CHECK(f == NULL);
    free(msg);
    unlink(path);
    free(path);
}

/* A good file: a sandbox command tool makes the agent a sandbox agent; the host tools and the
 * header secrets are named. */
static void test_accepted(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_agent_file *f = NULL;
    setenv("SBX_TEST_TOOL_TOKEN", "tok-123", 1);
    char *path = write_agent("  - current_time\n"
                             "  - name: count\n"
                             "    description: Counts lines.\n"
                             "    parameters: {type: object, properties: {path: {type: string}},"
                             " required: [path]}\n"
                             "    command: [wc, -l, $path, 'x${path}y', $$]\n"
                             "  - name: up\n"
                             "    host_command: [bin/up.sh]\n"
                             "    stdin: json\n"
                             "    env: [LANG]\n"
                             "  - name: look\n"
                             "    strict: false\n"
                             "    needs_approval: true\n"
                             "    timeout: 5\n"
                             "    max_output_tokens: 100\n"
                             "    http: {url: 'https://example.invalid/x?y=1', headers: "
                             "{Authorization: {type: secret, env: SBX_TEST_TOOL_TOKEN, prefix: "
                             "'Bearer '}, X-A: b}}\n");
    CHECK_OK(sbx_agent_file_load(path, &f, &err), &err);
    if (!f)
        goto out;
    CHECK(sbx_agent_sandbox_spec(sbx_agent_file_agent(f)) != NULL);
    json_t *host = sbx_agent_file_host_tools(f);
    CHECK_EQ_INT(json_array_size(host), 1);
    char canon[4096];
    CHECK(realpath(dir, canon) != NULL);
    char *want = sbx_xasprintf("%s/bin/up.sh", canon);
    CHECK_EQ_STR(json_string_value(json_object_get(json_array_get(host, 0), "program")), want);
    CHECK_EQ_STR(json_string_value(json_object_get(json_array_get(host, 0), "tool")), "up");
    free(want);
    json_decref(host);
    struct sbx_strv sv;
    sbx_strv_init(&sv);
    sbx_agent_file_secret_values(f, &sv);
    CHECK_EQ_INT(sv.n, 1);
    if (sv.n)
        CHECK_EQ_STR(sv.v[0], "tok-123");
    sbx_strv_release(&sv);
out:
    sbx_agent_file_free(f);
    unlink(path);
    free(path);
}

/* Run the file's agent on a replay model whose first turn calls tool with args (JSON text,
 * escaped for a JSON string) and whose second answers; the output the model got for c1. Caller
 * frees. */
static int file_no;
static char *call_output(struct sbx_agent_file *f, const char *tool, const char *args)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char *r1 = sbx_xasprintf("{\"id\":\"r1\",\"output\":[{\"type\":\"function_call\","
                             "\"call_id\":\"c1\",\"name\":\"%s\",\"arguments\":\"%s\"}]}",
                             tool, args);
    const char *const turns[] = {r1,
                                 "{\"id\":\"r2\",\"output\":[{\"type\":\"message\",\"role\":"
                                 "\"assistant\",\"content\":[{\"type\":\"output_text\","
                                 "\"text\":\"done\"}]}]}",
                                 NULL};
    struct sbx_model *m = test_model_from_responses(dir, &file_no, turns);
    struct sbx_run_options o = {.model = m};
    struct sbx_run_result *res = NULL;
    json_t *input = sbx_json_str("go");
    char *out = NULL;
    CHECK_OK(sbx_run(sbx_agent_file_agent(f), input, &o, &res, &err), &err);
    size_t i;
    json_t *it;
    json_array_foreach(res ? sbx_run_result_items(res) : NULL, i, it)
    {
        const char *type = json_string_value(json_object_get(it, "type"));
        if (type && strcmp(type, "function_call_output") == 0)
            out = sbx_xstrdup(json_string_value(json_object_get(it, "output")));
    }
    sbx_run_result_free(res);
    json_decref(input);
    sbx_model_free(m);
    free(r1);
    return out ? out : sbx_xstrdup("(no output)");
}

/* Host commands: refused until allowed; then $NAME references expand into single argv
 * elements (strings as they are, other values as JSON, a lone reference to a value left out
 * drops its element, $$ is a '$'), stdin gets the arguments, only the listed variables go. */
static void test_host_tools(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_agent_file *f = NULL;
    setenv("SBX_TEST_PASSED", "yes", 1);
    setenv("SBX_TEST_HIDDEN", "no", 1);
    char *path = write_agent("  - name: show\n"
                             "    strict: false\n"
                             "    parameters: {type: object, properties: {a: {type: string}, b: "
                             "{type: integer}, c: {type: string}, d: {type: array}}}\n"
                             "    host_command: [printf, '%s|', $a, 'x${b}y', $c, $$, '$$a', $d]\n"
                             "  - name: env\n"
                             "    host_command: [sh, -c, 'cat; echo \" $$SBX_TEST_PASSED "
                             "$${SBX_TEST_HIDDEN-unset} $$PWD\"']\n"
                             "    stdin: json\n"
                             "    env: [SBX_TEST_PASSED]\n"
                             "  - name: fails\n"
                             "    host_command: [sh, -c, 'echo out; echo bad >&2; exit 3']\n"
                             "  - name: inside\n"
                             "    command: [pwd]\n");
    CHECK_OK(sbx_agent_file_load(path, &f, &err), &err);
    if (!f)
        goto out;
    char *o = call_output(f, "show", "{\\\"a\\\":\\\"p q\\\",\\\"b\\\":7}");
    CHECK_CONTAINS(o, "tool 'show' runs a command on the host, and this run does not allow host "
                      "tools");
    free(o);
    sbx_agent_file_allow_host_tools(f);
    o = call_output(f, "show", "{\\\"a\\\":\\\"p q\\\",\\\"b\\\":7,\\\"d\\\":[1,\\\"z\\\"]}");
    CHECK_EQ_STR(o, "p q|x7y|$|$a|[1,\"z\"]|");
    free(o);
    o = call_output(f, "env", "{}");
    char canon[4096];
    CHECK(realpath(dir, canon) != NULL);
    char *want = sbx_xasprintf("{} yes unset %s\n", canon);
    CHECK_EQ_STR(o, want);
    free(want);
    free(o);
    o = call_output(f, "fails", "{}");
    CHECK_EQ_STR(o, "error: tool 'fails' failed: 'sh' ended with status 3; stderr: bad ; stdout: "
                    "out ");
    free(o);
    /* A sandbox command with no sandbox (a run without the sandbox layer). */
    o = call_output(f, "inside", "{}");
    CHECK_CONTAINS(o, "tool 'inside' runs in the sandbox, but agent 'Smith' has none");
    free(o);
out:
    sbx_agent_file_free(f);
    unlink(path);
    free(path);
}

static void test_refused(void)
{
    setenv("SBX_TEST_SET", "v", 1);
    unsetenv("SBX_TEST_UNSET");
    bad("  - 3\n", SBX_E_INVAL, "entry 0 must be a built-in tool's name or a tool definition");
    bad("  - {description: x, command: [ls]}\n", SBX_E_INVAL, "missing required field 'name'");
    bad("  - {name: t, comand: [ls]}\n", SBX_E_INVAL, "tool 't': unknown field 'comand'");
    bad("  - {name: 'bad name', command: [ls]}\n", SBX_E_INVAL,
        "tool 'bad name': tool name 'bad name' must be 1 to 64 letters");
    bad("  - {name: t}\n", SBX_E_INVAL,
        "tool 't': needs one of 'command' (in the sandbox), 'host_command' or 'http'");
    bad("  - {name: t, command: [ls], http: {url: 'http://x/'}}\n", SBX_E_INVAL,
        "tool 't': fields 'command' and 'http' both say what runs: give one");
    bad("  - {name: t, command: ls}\n", SBX_E_INVAL,
        "tool 't': field 'command' must be a list of strings (the program and its arguments; "
        "no shell runs it)");
    bad("  - {name: t, host_command: []}\n", SBX_E_INVAL,
        "tool 't': field 'host_command' must be a list of strings");
    bad("  - {name: t, command: [ls, 3]}\n", SBX_E_INVAL,
        "tool 't': field 'command': element 1 must be a string");
    bad("  - {name: t, command: ['']}\n", SBX_E_INVAL,
        "tool 't': field 'command': the program must not be empty");
    bad("  - {name: t, parameters: {type: object, properties: {p: {type: string}}}, command: "
        "[$p]}\n",
        SBX_E_INVAL, "tool 't': field 'command': the program must be fixed, not an argument");
    bad("  - {name: t, parameters: {type: object, properties: {path: {type: string}}}, "
        "command: [cat, 'x$nope']}\n",
        SBX_E_INVAL,
        "tool 't': field 'command': 'x$nope' names '$nope', which is not a parameter "
        "(parameters: path)");
    bad("  - {name: t, command: [echo, '$ 1']}\n", SBX_E_INVAL,
        "tool 't': field 'command': '$ 1': a '$' must start $NAME or ${NAME} (a literal '$' is "
        "$$)");
    bad("  - {name: t, command: [echo, '${a']}\n", SBX_E_INVAL,
        "tool 't': field 'command': '${a': a '$' must start $NAME");
    bad("  - {name: t, command: [cat], stdin: yaml}\n", SBX_E_INVAL,
        "tool 't': field 'stdin' must be \"json\"");
    bad("  - {name: t, command: [ls], timeout: 0}\n", SBX_E_INVAL,
        "tool 't': field 'timeout' must be 1 to 3600 seconds");
    bad("  - {name: t, command: [ls], timeout: 99999}\n", SBX_E_INVAL,
        "tool 't': field 'timeout' must be 1 to 3600 seconds");
    bad("  - {name: t, command: [ls], max_output_tokens: 0}\n", SBX_E_INVAL,
        "tool 't': field 'max_output_tokens' must be 1 to ");
    bad("  - {name: t, command: [ls], needs_approval: maybe}\n", SBX_E_INVAL,
        "tool 't': field 'needs_approval'");
    bad("  - {name: t, command: [ls], env: [HOME]}\n", SBX_E_INVAL,
        "tool 't': field 'env' is for host commands");
    bad("  - {name: t, host_command: [ls], cwd: sub}\n", SBX_E_INVAL,
        "tool 't': field 'cwd' is for sandbox commands");
    bad("  - {name: t, host_command: [ls], env: ['1X']}\n", SBX_E_INVAL,
        "tool 't': field 'env': element 0 must be a variable name");
    bad("  - {name: t, host_command: [ls], env: [OPENAI_API_KEY]}\n", SBX_E_PERM,
        "tool 't': field 'env': 'OPENAI_API_KEY' is sbx's own credential");
    bad("  - {name: t, http: 'http://x/'}\n", SBX_E_INVAL,
        "tool 't': field 'http': must be an object {url, headers}");
    bad("  - {name: t, http: {url: 'ftp://x/'}}\n", SBX_E_INVAL,
        "tool 't': field 'http': url 'ftp://x/' must be an http:// or https:// URL");
    bad("  - {name: t, http: {url: 'http:///x'}}\n", SBX_E_INVAL,
        "tool 't': field 'http': url 'http:///x' must be an http:// or https:// URL");
    bad("  - {name: t, http: {url: 'http://u:p@x/'}}\n", SBX_E_INVAL,
        "tool 't': field 'http': url 'http://u:p@x/' must not hold a user or password");
    bad("  - {name: t, http: {uri: 'http://x/'}}\n", SBX_E_INVAL,
        "tool 't': field 'http': unknown field 'uri'");
    bad("  - {name: t, http: {url: 'http://x/', headers: {'Bad Name': v}}}\n", SBX_E_INVAL,
        "tool 't': field 'http': header 'Bad Name': not a header name");
    bad("  - {name: t, http: {url: 'http://x/', headers: {A: 3}}}\n", SBX_E_INVAL,
        "tool 't': field 'http': header 'A': a value must be text or {type: secret");
    bad("  - {name: t, http: {url: 'http://x/', headers: {A: {type: plain, env: SBX_TEST_SET}}}}\n",
        SBX_E_INVAL, "tool 't': field 'http': header 'A': type 'plain' is not 'secret'");
    bad("  - {name: t, http: {url: 'http://x/', headers: {A: {type: secret, env: "
        "SBX_TEST_UNSET}}}}\n",
        SBX_E_NOTFOUND, "tool 't': field 'http': header 'A': variable 'SBX_TEST_UNSET' is not set");
    bad("  - {name: t, http: {url: 'http://x/', headers: {A: {type: secret, env: "
        "OPENAI_API_KEY}}}}\n",
        SBX_E_PERM,
        "tool 't': field 'http': header 'A': 'OPENAI_API_KEY' is sbx's own credential: an agent "
        "file does not send it to a tool's server");
    bad("  - {name: t, http: {url: 'http://x/', headers: {A: {type: secret}}}}\n", SBX_E_INVAL,
        "tool 't': field 'http': header 'A': missing required field 'env'");
    bad("  - {name: t, http: {url: 'http://x/'}, stdin: json}\n", SBX_E_INVAL,
        "tool 't': field 'stdin' is for commands");
    bad("  - {name: t, parameters: [], command: [ls]}\n", SBX_E_INVAL,
        "tool 't': field 'parameters'");
    bad("  - {name: t, parameters: {type: object, properties: {a: {type: string}}, "
        "additionalProperties: true}, command: [ls]}\n",
        SBX_E_INVAL, "tool 't': ");
    bad("  - {name: t, command: [ls]}\n  - {name: t, command: [pwd]}\n", SBX_E_EXISTS,
        "agent 'Smith' already has a tool named 't'");
    bad("  - {name: current_time, command: [date]}\n  - current_time\n", SBX_E_EXISTS,
        "agent 'Smith' already has a tool named 'current_time'");
}

int main(void)
{
    TAP_START();
    if (!mkdtemp(dir))
        return 1;
    TAP_RUN(test_accepted);
    TAP_RUN(test_host_tools);
    TAP_RUN(test_refused);
    rm_tree(dir);
    return TAP_DONE();
}
