/* MCP: the JSON-RPC framing (encoding, classifying what a server sends, every malformed message
 * refused with its reason), the agent file's mcp_servers entries (accepted forms, each bad entry
 * refused with a message naming the file, the server and the field), and runs against a small
 * stdio server on the host (tests/mcp/fake-mcp.py): filters, paging, the cached listing,
 * results, isError, approvals, prefixed names. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tap.h"
#include "agent/mcp-rpc.h"
#include "replay-model.h"
#include "sbx/json.h"
#include "sbx/runner.h"
#include "sbx/strv.h"

static char dir[] = "/tmp/sbx-test-mcp.XXXXXX";
static int file_no;

/* ---- framing ----------------------------------------------------------------------------------
 */

static void test_encode(void)
{
    json_t *p = json_pack("{s:s}", "cursor", "x");
    char *s = sbx__mcp_encode(7, "tools/list", p);
    CHECK_EQ_STR(s,
                 "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/list\",\"params\":{\"cursor\":"
                 "\"x\"}}\n");
    free(s);
    s = sbx__mcp_encode(-1, "notifications/initialized", NULL);
    CHECK_EQ_STR(s, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n");
    free(s);
    json_t *id = json_string("srv-1");
    s = sbx__mcp_encode_reply(id, NULL, -32601, "method not found");
    CHECK_EQ_STR(s, "{\"jsonrpc\":\"2.0\",\"id\":\"srv-1\",\"error\":{\"code\":-32601,\"message\":"
                    "\"method not found\"}}\n");
    free(s);
    json_t *empty = json_object();
    s = sbx__mcp_encode_reply(id, empty, 0, NULL);
    CHECK_EQ_STR(s, "{\"jsonrpc\":\"2.0\",\"id\":\"srv-1\",\"result\":{}}\n");
    free(s);
    json_decref(empty);
    json_decref(id);
    json_decref(p);
}

static void parse_ok(const char *text, enum sbx__mcp_kind kind)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__mcp_msg m;
    CHECK_OK(sbx__mcp_parse(text, strlen(text), 1 << 20, &m, &err), &err);
    CHECK_EQ_INT(m.kind, kind);
    sbx__mcp_msg_release(&m);
}

static void parse_bad(const char *text, enum sbx_errcode code, const char *want)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__mcp_msg m;
    CHECK_ERR(sbx__mcp_parse(text, strlen(text), 64, &m, &err), code, &err, want);
}

static void test_classify(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__mcp_msg m;
    const char *r = "{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"tools\":[]}}";
    CHECK_OK(sbx__mcp_parse(r, strlen(r), 1 << 20, &m, &err), &err);
    CHECK_EQ_INT(m.kind, SBX__MCP_RESULT);
    CHECK(sbx__mcp_id_is(&m, 3));
    CHECK(!sbx__mcp_id_is(&m, 4));
    CHECK(json_is_array(json_object_get(m.body, "tools")));
    sbx__mcp_msg_release(&m);
    const char *e =
            "{\"jsonrpc\":\"2.0\",\"id\":4,\"error\":{\"code\":-32602,\"message\":\"bad\"}}";
    CHECK_OK(sbx__mcp_parse(e, strlen(e), 1 << 20, &m, &err), &err);
    CHECK_EQ_INT(m.kind, SBX__MCP_ERROR);
    CHECK_EQ_INT(m.code, -32602);
    CHECK_EQ_STR(m.message, "bad");
    sbx__mcp_msg_release(&m);
    const char *q = "{\"jsonrpc\":\"2.0\",\"id\":\"s\",\"method\":\"ping\"}";
    CHECK_OK(sbx__mcp_parse(q, strlen(q), 1 << 20, &m, &err), &err);
    CHECK_EQ_INT(m.kind, SBX__MCP_REQUEST);
    CHECK_EQ_STR(m.method, "ping");
    sbx__mcp_msg_release(&m);
    parse_ok("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{}}",
             SBX__MCP_NOTIFICATION);
    parse_ok("{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32700}}", SBX__MCP_ERROR);

    parse_bad("[{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}]", SBX_E_PARSE,
              "not a JSON-RPC 2.0 message: a batch");
    parse_bad("\"x\"", SBX_E_PARSE, "not a JSON-RPC 2.0 message: not a JSON object");
    parse_bad("{\"id\":1,\"result\":{}}", SBX_E_PARSE, "'jsonrpc' is not \"2.0\"");
    parse_bad("{\"jsonrpc\":\"1.0\",\"id\":1,\"result\":{}}", SBX_E_PARSE,
              "'jsonrpc' is not \"2.0\"");
    parse_bad("{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{},\"error\":{}}", SBX_E_PARSE,
              "both 'result' and 'error'");
    parse_bad("{\"jsonrpc\":\"2.0\",\"result\":{}}", SBX_E_PARSE,
              "a response without a valid 'id'");
    parse_bad("{\"jsonrpc\":\"2.0\",\"id\":[1],\"result\":{}}", SBX_E_PARSE,
              "a response without a valid 'id'");
    parse_bad("{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":\"x\"}", SBX_E_PARSE,
              "'error' is not an object");
    parse_bad("{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":\"x\"}}", SBX_E_PARSE,
              "'error.code' is not an integer");
    parse_bad("{\"jsonrpc\":\"2.0\",\"id\":1}", SBX_E_PARSE,
              "neither a request (no 'method') nor a response");
    parse_bad("{\"jsonrpc\":\"2.0\",\"method\":3}", SBX_E_PARSE, "'method' is not a name");
    parse_bad("{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"params\":3}", SBX_E_PARSE,
              "'params' is neither an object nor an array");
    parse_bad("{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"id\":{}}", SBX_E_PARSE,
              "a request's 'id' is neither an integer nor a string");
    parse_bad("not json", SBX_E_PARSE, "");
    parse_bad("{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"x\":\"0123456789012345678901234567890"
              "123456789\"}}",
              SBX_E_TOOBIG, "");
}

/* ---- agent files ------------------------------------------------------------------------------
 */

static char *write_agent(const char *name, const char *body)
{
    char *path = sbx_xasprintf("%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    fprintf(f, "name: Smith\n%s", body);
    fclose(f);
    return path;
}

static void bad(const char *servers_yaml, enum sbx_errcode code, const char *want)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_agent_file *f = NULL;
    char *body = sbx_xasprintf("mcp_servers:\n%s", servers_yaml);
    char *path = write_agent("bad.yaml", body);
    char *msg = sbx_xasprintf("agent file '%s': field 'mcp_servers': %s", path, want);
    CHECK_ERR(sbx_agent_file_load(path, &f, &err), code, &err, msg);
    CHECK(f == NULL);
    free(msg);
    unlink(path);
    free(path);
    free(body);
}

static void test_refused(void)
{
    unsetenv("SBX_TEST_MCP_UNSET");
    bad("  - 3\n", SBX_E_INVAL, "entry 0: an entry must be a mapping {name, command | url, ...}");
    bad("  - {command: [x]}\n", SBX_E_INVAL, "missing required field 'name'");
    bad("  - {name: s, comand: [x]}\n", SBX_E_INVAL, "MCP server 's': unknown field 'comand'");
    bad("  - {name: s}\n", SBX_E_INVAL,
        "MCP server 's': needs 'command' (a stdio server) or 'url' (a Streamable HTTP server)");
    bad("  - {name: s, command: [x], url: 'http://h/'}\n", SBX_E_INVAL,
        "MCP server 's': fields 'command' and 'url' both say how to reach it: give one");
    bad("  - {name: s, command: x}\n", SBX_E_INVAL,
        "MCP server 's': field 'command' must be a list of strings");
    bad("  - {name: s, command: ['']}\n", SBX_E_INVAL,
        "MCP server 's': field 'command': element 0 must be a non-empty string");
    bad("  - {name: s, command: [x], headers: {A: b}}\n", SBX_E_INVAL,
        "MCP server 's': field 'headers' is for 'url' servers");
    bad("  - {name: s, url: 'http://h/', env: {A: b}}\n", SBX_E_INVAL,
        "MCP server 's': field 'env' is for stdio servers");
    bad("  - {name: s, url: 'http://h/', host: true}\n", SBX_E_INVAL,
        "MCP server 's': field 'host' is for stdio servers");
    bad("  - {name: s, url: 'ftp://h/'}\n", SBX_E_INVAL,
        "MCP server 's': field 'url': 'ftp://h/' must be an http:// or https:// URL");
    bad("  - {name: s, url: 'http://u:p@h/'}\n", SBX_E_INVAL,
        "MCP server 's': field 'url': 'http://u:p@h/' must not hold a user or password");
    bad("  - {name: s, url: 'http://h/', headers: {'a b': c}}\n", SBX_E_INVAL,
        "MCP server 's': field 'headers': 'a b' is not a header name");
    bad("  - {name: s, url: 'http://h/', headers: {A: {type: secret, env: SBX_TEST_MCP_UNSET}}}\n",
        SBX_E_NOTFOUND,
        "MCP server 's': field 'headers': 'A': variable 'SBX_TEST_MCP_UNSET' is not set");
    bad("  - {name: s, url: 'http://h/', headers: {A: {type: secret, env: OPENAI_API_KEY}}}\n",
        SBX_E_PERM,
        "MCP server 's': field 'headers': 'A': 'OPENAI_API_KEY' is sbx's own credential");
    bad("  - {name: s, command: [x], env: {OPENAI_API_KEY: v}}\n", SBX_E_PERM,
        "MCP server 's': field 'env': 'OPENAI_API_KEY' is sbx's own credential and is not passed to MCP servers");
    bad("  - {name: s, command: [x], env: {'1A': v}}\n", SBX_E_INVAL,
        "MCP server 's': field 'env': '1A' is not a variable name");
    bad("  - {name: s, command: [x], timeout: 0}\n", SBX_E_INVAL,
        "MCP server 's': field 'timeout' must be 1 to 3600 seconds");
    bad("  - {name: s, command: [x], allowed_tools: a}\n", SBX_E_INVAL,
        "MCP server 's': field 'allowed_tools' must be a list of tool names");
    bad("  - {name: s, command: [x], blocked_tools: [1]}\n", SBX_E_INVAL,
        "MCP server 's': field 'blocked_tools': entry 0 must be a tool name");
    bad("  - {name: s, command: [x], require_approval: sometimes}\n", SBX_E_INVAL,
        "MCP server 's': field 'require_approval' must be \"always\", \"never\"");
    bad("  - {name: s, command: [x], require_approval: {t: maybe}}\n", SBX_E_INVAL,
        "MCP server 's': field 'require_approval': tool 't' must map to \"always\" or \"never\"");
    bad("  - {name: s, command: [x], require_approval: {always: {names: [t]}}}\n", SBX_E_INVAL,
        "MCP server 's': field 'require_approval': 'always' must be {tool_names: [...]}");
    bad("  - {name: s, command: [x], cache_tools_list: 1}\n", SBX_E_INVAL,
        "MCP server 's': field 'cache_tools_list' must be");
    bad("  - {name: s, command: [x]}\n  - {name: s, url: 'http://h/'}\n", SBX_E_EXISTS,
        "MCP server 's' is named twice");

    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_agent_file *f = NULL;
    char *path = write_agent("cfg.yaml", "mcp_config: {prefix: true}\n");
    char *msg = sbx_xasprintf("agent file '%s': field 'mcp_config': unknown field 'prefix'", path);
    CHECK_ERR(sbx_agent_file_load(path, &f, &err), SBX_E_INVAL, &err, msg);
    free(msg);
    unlink(path);
    free(path);
}

static void test_accepted(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_agent_file *f = NULL;
    setenv("SBX_TEST_MCP_TOKEN", "tok-mcp-1", 1);
    setenv("SBX_TEST_MCP_ENV", "env-mcp-2", 1);
    char *path = write_agent(
            "ok.yaml", "mcp_servers:\n"
                       "  - {name: inside, command: [node, s.js], cwd: srv, env: {A: b}}\n"
                       "  - name: outside\n"
                       "    command: [bin/srv, --stdio]\n"
                       "    host: true\n"
                       "    env: {TOKEN: {type: secret, env: SBX_TEST_MCP_ENV}}\n"
                       "    require_approval: {always: {tool_names: [a]}, never: {tool_names: "
                       "[b]}}\n"
                       "  - name: web\n"
                       "    url: 'https://example.invalid/mcp'\n"
                       "    headers: {Authorization: {type: secret, env: SBX_TEST_MCP_TOKEN, "
                       "prefix: 'Bearer '}}\n"
                       "    allowed_tools: [x]\n"
                       "    blocked_tools: [y]\n"
                       "    cache_tools_list: false\n"
                       "    require_approval: [x]\n"
                       "    timeout: 5\n");
    CHECK_OK(sbx_agent_file_load(path, &f, &err), &err);
    if (!f)
        goto out;
    /* A server in the sandbox makes the agent a sandbox agent. */
    CHECK(sbx_agent_sandbox_spec(sbx_agent_file_agent(f)) != NULL);
    json_t *host = sbx_agent_file_host_tools(f);
    CHECK_EQ_INT(json_array_size(host), 1);
    char canon[4096];
    CHECK(realpath(dir, canon) != NULL);
    char *want = sbx_xasprintf("%s/bin/srv", canon);
    json_t *h0 = json_array_get(host, 0);
    CHECK_EQ_STR(json_string_value(json_object_get(h0, "program")), want);
    CHECK_EQ_STR(json_string_value(json_object_get(h0, "tool")), "outside");
    CHECK(json_is_true(json_object_get(h0, "mcp")));
    free(want);
    json_decref(host);
    struct sbx_strv sv;
    sbx_strv_init(&sv);
    sbx_agent_file_secret_values(f, &sv);
    CHECK_EQ_INT(sv.n, 2);
    CHECK(sbx_strv_find(&sv, "tok-mcp-1") >= 0);
    CHECK(sbx_strv_find(&sv, "env-mcp-2") >= 0);
    sbx_strv_release(&sv);
out:
    sbx_agent_file_free(f);
    unlink(path);
    free(path);
}

/* ---- runs against tests/mcp/fake-mcp.py on the host -------------------------------------------
 */

static char *fcall(int n, const char *name, const char *args)
{
    return sbx_xasprintf("{\"type\":\"function_call\",\"call_id\":\"c%d\",\"name\":\"%s\","
                         "\"arguments\":\"%s\"}",
                         n, name, args);
}

#define DONE_TURN                                                                                     \
    "{\"id\":\"rz\",\"output\":[{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":" \
    "\"output_text\",\"text\":\"done\"}]}]}"

/* The output the model got for call id, from the run's items; "(none)" when there is none. */
static const char *output_of(const struct sbx_run_result *res, const char *id)
{
    size_t i;
    json_t *it;
    json_array_foreach(res ? sbx_run_result_items(res) : NULL, i, it)
    {
        const char *type = json_string_value(json_object_get(it, "type"));
        const char *cid = json_string_value(json_object_get(it, "call_id"));
        if (type && strcmp(type, "function_call_output") == 0 && cid && strcmp(cid, id) == 0)
            return json_string_value(json_object_get(it, "output"));
    }
    return "(none)";
}

static int count_in(const char *file, const char *needle)
{
    char line[65536];
    int n = 0;
    FILE *f = fopen(file, "r");
    while (f && fgets(line, sizeof(line), f))
        n += strstr(line, needle) != NULL;
    if (f)
        fclose(f);
    return n;
}

static char *server_agent(const char *name, const char *log, const char *extra)
{
    const char *src = getenv("SBX_SRCDIR");
    char *body = sbx_xasprintf("mcp_servers:\n"
                               "  - name: fake\n"
                               "    command: [python3, %s/tests/mcp/fake-mcp.py, --log, %s]\n"
                               "    host: true\n"
                               "%s",
                               src ? src : ".", log, extra);
    char *path = write_agent(name, body);
    free(body);
    return path;
}

static struct sbx_run_result *run_turns(struct sbx_agent_file *f, const char *const *turns)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_model *m = test_model_from_responses(dir, &file_no, turns);
    struct sbx_run_options o = {.model = m};
    struct sbx_run_result *res = NULL;
    json_t *input = sbx_json_str("go");
    CHECK_OK(sbx_run(sbx_agent_file_agent(f), input, &o, &res, &err), &err);
    json_decref(input);
    sbx_model_free(m);
    return res;
}

static void test_host_server(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_agent_file *f = NULL;
    char *log = sbx_xasprintf("%s/host.log", dir);
    char *path = server_agent("host.yaml", log, "    blocked_tools: [slow]\n");
    CHECK_OK(sbx_agent_file_load(path, &f, &err), &err);
    if (!f)
        goto out;
    char *c1 = fcall(1, "add", "{\\\"a\\\":2,\\\"b\\\":3}");
    char *c2 = fcall(2, "shout", "{\\\"text\\\":\\\"hi\\\",\\\"times\\\":null}");
    char *c3 = fcall(3, "broken", "{}");
    char *c4 = fcall(4, "slow", "{}");
    char *c5 = fcall(5, "add", "{\\\"a\\\":1,\\\"b\\\":1}");
    char *t1 = sbx_xasprintf("{\"id\":\"r1\",\"output\":[%s,%s,%s,%s]}", c1, c2, c3, c4);
    char *t2 = sbx_xasprintf("{\"id\":\"r2\",\"output\":[%s]}", c5);
    const char *const turns[] = {t1, t2, DONE_TURN, NULL};
    /* Not allowed yet: a host server refuses to start. */
    struct sbx_model *m = test_model_from_responses(dir, &file_no, turns);
    struct sbx_run_options o = {.model = m};
    struct sbx_run_result *res = NULL;
    json_t *input = sbx_json_str("go");
    CHECK_ERR(sbx_run(sbx_agent_file_agent(f), input, &o, &res, &err), SBX_E_PERM, &err,
              "MCP server 'fake' runs on the host, and this run does not allow host MCP servers");
    json_decref(input);
    sbx_model_free(m);
    sbx_agent_file_allow_host_tools(f);
    res = run_turns(f, turns);
    CHECK_EQ_STR(output_of(res, "c1"), "5");
    CHECK_EQ_STR(output_of(res, "c2"), "HI\n{\"type\":\"image\",\"data\":\"AAAA\",\"mimeType\":"
                                       "\"image/png\"}");
    CHECK_EQ_STR(output_of(res, "c3"),
                 "error: tool 'broken' failed: MCP server 'fake' reported an error: the disk is "
                 "on fire");
    CHECK_CONTAINS(output_of(res, "c4"), "slow");
    CHECK_EQ_STR(output_of(res, "c5"), "2");
    sbx_run_result_free(res);
    /* The optional argument sent as null reached the server left out; the listing (two pages)
     * was asked once for both turns; the server's ping was answered. */
    CHECK_EQ_INT(count_in(log, "\"arguments\": {\"text\": \"hi\"}"), 1);
    CHECK_EQ_INT(count_in(log, "\"method\": \"tools/list\""), 2);
    CHECK_EQ_INT(count_in(log, "\"cursor\": \"page2\""), 1);
    CHECK_EQ_INT(count_in(log, "\"id\": \"srv-1\", \"result\": {}"), 2);
    CHECK_EQ_INT(count_in(log, "\"name\": \"slow\""), 0);
    free(c1);
    free(c2);
    free(c3);
    free(c4);
    free(c5);
    free(t1);
    free(t2);
out:
    sbx_agent_file_free(f);
    unlink(path);
    unlink(log);
    free(path);
    free(log);
}

/* cache_tools_list: false lists every turn; allowed_tools offers only those; prefixed names. */
static void test_listing_options(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_agent_file *f = NULL;
    char *log = sbx_xasprintf("%s/opts.log", dir);
    char *path = server_agent("opts.yaml", log,
                              "    cache_tools_list: false\n"
                              "    allowed_tools: [add]\n"
                              "mcp_config: {include_server_in_tool_names: true}\n");
    CHECK_OK(sbx_agent_file_load(path, &f, &err), &err);
    if (!f)
        goto out;
    sbx_agent_file_allow_host_tools(f);
    char *c1 = fcall(1, "mcp_fake__add", "{\\\"a\\\":4,\\\"b\\\":5}");
    char *c2 = fcall(2, "mcp_fake__shout", "{\\\"text\\\":\\\"x\\\"}");
    char *c3 = fcall(3, "add", "{\\\"a\\\":4,\\\"b\\\":5}");
    char *t1 = sbx_xasprintf("{\"id\":\"r1\",\"output\":[%s]}", c1);
    char *t2 = sbx_xasprintf("{\"id\":\"r2\",\"output\":[%s,%s]}", c2, c3);
    const char *const turns[] = {t1, t2, DONE_TURN, NULL};
    struct sbx_run_result *res = run_turns(f, turns);
    CHECK_EQ_STR(output_of(res, "c1"), "9");
    CHECK_CONTAINS(output_of(res, "c2"), "mcp_fake__shout");
    CHECK_CONTAINS(output_of(res, "c3"), "add");
    CHECK(strcmp(output_of(res, "c3"), "9") != 0);
    sbx_run_result_free(res);
    /* Three turns, two pages each. */
    CHECK_EQ_INT(count_in(log, "\"method\": \"tools/list\""), 6);
    CHECK_EQ_INT(count_in(log, "\"name\": \"shout\""), 0);
    free(c1);
    free(c2);
    free(c3);
    free(t1);
    free(t2);
out:
    sbx_agent_file_free(f);
    unlink(path);
    unlink(log);
    free(path);
    free(log);
}

/* A cached listing is asked again after the server says its tools changed. */
static void test_list_changed(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_agent_file *f = NULL;
    const char *src = getenv("SBX_SRCDIR");
    char *log = sbx_xasprintf("%s/changed.log", dir);
    char *body = sbx_xasprintf("mcp_servers:\n"
                               "  - name: fake\n"
                               "    command: [python3, %s/tests/mcp/fake-mcp.py, --log, %s, "
                               "--mode, changing]\n"
                               "    host: true\n",
                               src ? src : ".", log);
    char *path = write_agent("changed.yaml", body);
    CHECK_OK(sbx_agent_file_load(path, &f, &err), &err);
    if (!f)
        goto out;
    sbx_agent_file_allow_host_tools(f);
    char *c1 = fcall(1, "add", "{\\\"a\\\":1,\\\"b\\\":1}");
    char *c2 = fcall(2, "extra", "{}");
    char *t1 = sbx_xasprintf("{\"id\":\"r1\",\"output\":[%s]}", c1);
    char *t2 = sbx_xasprintf("{\"id\":\"r2\",\"output\":[%s]}", c2);
    const char *const turns[] = {t1, t2, DONE_TURN, NULL};
    struct sbx_run_result *res = run_turns(f, turns);
    CHECK_EQ_STR(output_of(res, "c1"), "2");
    CHECK_EQ_STR(output_of(res, "c2"), "extra ran");
    sbx_run_result_free(res);
    /* Two listings of two pages: the first turn's and the one after the notification. */
    CHECK_EQ_INT(count_in(log, "\"method\": \"tools/list\""), 4);
    free(c1);
    free(c2);
    free(t1);
    free(t2);
out:
    sbx_agent_file_free(f);
    unlink(path);
    unlink(log);
    free(path);
    free(body);
    free(log);
}

/* require_approval: a call of a listed tool interrupts the run; the others run. */
static void test_approval(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_agent_file *f = NULL;
    char *log = sbx_xasprintf("%s/appr.log", dir);
    char *path = server_agent("appr.yaml", log, "    require_approval: {shout: always}\n");
    CHECK_OK(sbx_agent_file_load(path, &f, &err), &err);
    if (!f)
        goto out;
    sbx_agent_file_allow_host_tools(f);
    char *c1 = fcall(1, "add", "{\\\"a\\\":1,\\\"b\\\":2}");
    char *c2 = fcall(2, "shout", "{\\\"text\\\":\\\"x\\\"}");
    char *t1 = sbx_xasprintf("{\"id\":\"r1\",\"output\":[%s,%s]}", c1, c2);
    const char *const turns[] = {t1, DONE_TURN, NULL};
    struct sbx_run_result *res = run_turns(f, turns);
    CHECK(res && sbx_run_result_interrupted(res));
    const json_t *pending = res ? sbx_run_result_interruptions(res) : NULL;
    CHECK_EQ_INT(json_array_size(pending), 1);
    CHECK_EQ_STR(json_string_value(json_object_get(json_array_get(pending, 0), "tool")), "shout");
    sbx_run_result_free(res);
    CHECK_EQ_INT(count_in(log, "\"name\": \"shout\""), 0);
    free(c1);
    free(c2);
    free(t1);
out:
    sbx_agent_file_free(f);
    unlink(path);
    unlink(log);
    free(path);
    free(log);
}

int main(void)
{
    TAP_START();
    if (!mkdtemp(dir))
        return 1;
    TAP_RUN(test_encode);
    TAP_RUN(test_classify);
    TAP_RUN(test_refused);
    TAP_RUN(test_accepted);
    TAP_RUN(test_host_server);
    TAP_RUN(test_listing_options);
    TAP_RUN(test_approval);
    TAP_RUN(test_list_changed);
    for (int i = 0; i < file_no; i++) {
        char *p = sbx_xasprintf("%s/r%d.jsonl", dir, i);
        unlink(p);
        free(p);
    }
    rmdir(dir);
    return TAP_DONE();
}
