/* Prompts and variables (sbx/prompt.h): template filling (missing, unused, escapes, no
 * re-expansion, bounds), the agent file's prompt field and its checks, filling an agent, and
 * the Chat Completions backend refusing a prompt object. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tap.h"
#include "sbx/json.h"
#include "sbx/model.h"
#include "sbx/prompt.h"
#include "sbx/runner.h"

static char dir[] = "/tmp/sbx-test-prompt.XXXXXX";

static json_t *vars_of(const char *json)
{
    json_t *v = NULL;
    if (sbx_json_parse(json, strlen(json), NULL, &v, NULL) < 0)
        abort();
    return v;
}

/* fill text with vars (JSON) and compare with want. */
static void filled(const char *text, const char *vars, const char *want)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *v = vars_of(vars);
    char *out = NULL;
    CHECK_OK(sbx_template_fill(text, v, NULL, &out, &err), &err);
    CHECK_EQ_STR(out, want);
    free(out);
    json_decref(v);
}

static void test_fill(void)
{
    filled("Hello {{name}}.", "{\"name\": \"Ann\"}", "Hello Ann.");
    filled("{{ name }}/{{\tname\t}}{{name}}", "{\"name\": \"x\"}", "x/xx");
    filled("no templates at all", "{}", "no templates at all");
    filled("", "{}", "");
    /* A value is put in as it is: its own braces are never read as a template. */
    filled("A {{a}} B", "{\"a\": \"{{b}}\", \"b\": \"NO\"}", "A {{b}} B");
    filled("{{a}}{{b}}", "{\"a\": \"{{\", \"b\": \"b}}\"}", "{{b}}");
    /* Escapes and braces that are not variables stay text. */
    filled("\\{{name}} and {{name}}", "{\"name\": \"v\"}", "{{name}} and v");
    filled("{{.ID}} {{ 1x }} {{a-b}} {{}} {{ open", "{}", "{{.ID}} {{ 1x }} {{a-b}} {{}} {{ open");
    filled("{{{x}}}", "{\"x\": \"v\"}", "{{{x}}}");
    filled("trailing {{", "{}", "trailing {{");
    filled("\\\\ back \\ slashes", "{}", "\\\\ back \\ slashes");
    filled("{{_a1}}", "{\"_a1\": \"ok\"}", "ok");
}

static void test_used_and_missing(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *v = vars_of("{\"a\": \"1\", \"b\": \"2\", \"n\": 3}");
    json_t *used = json_object();
    char *out = NULL;
    CHECK_OK(sbx_template_fill("{{a}} {{a}}", v, used, &out, &err), &err);
    CHECK(json_is_true(json_object_get(used, "a")));
    CHECK(json_object_get(used, "b") == NULL); /* given, used by nothing: the caller warns */
    free(out);
    out = NULL;
    CHECK_ERR(sbx_template_fill("x {{a}} {{missing}} {{other}}", v, NULL, &out, &err),
              SBX_E_NOTFOUND, &err, "variable 'missing' is not given");
    CHECK(out == NULL);
    CHECK_ERR(sbx_template_fill("{{n}}", v, NULL, &out, &err), SBX_E_INVAL, &err,
              "variable 'n' must be text, not integer");
    CHECK_ERR(sbx_template_fill("{{a}}", NULL, NULL, &out, &err), SBX_E_NOTFOUND, &err,
              "variable 'a' is not given");
    json_decref(used);
    json_decref(v);
}

static void test_bounds(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    /* 32 uses of a 64 KiB value: 2 MiB, past the 1 MiB bound. */
    char *big = malloc(SBX_VAR_VALUE_MAX + 1);
    memset(big, 'x', SBX_VAR_VALUE_MAX);
    big[SBX_VAR_VALUE_MAX] = 0;
    json_t *v = json_pack("{s:s}", "v", big);
    struct sbx_buf t;
    sbx_buf_init(&t, SBX_BUF_NOLIMIT);
    for (int i = 0; i < 32; i++)
        CHECK_OK(sbx_buf_adds(&t, "{{v}}", &err), &err);
    char *out = NULL;
    CHECK_ERR(sbx_template_fill(sbx_buf_cstr(&t), v, NULL, &out, &err), SBX_E_TOOBIG, &err,
              "would pass 1048576 bytes");
    CHECK(out == NULL);
    /* 16 uses fit exactly. */
    sbx_buf_setlen(&t, 16 * 5);
    CHECK_OK(sbx_template_fill(sbx_buf_cstr(&t), v, NULL, &out, &err), &err);
    CHECK_EQ_INT((long long)strlen(out), (long long)SBX_TEMPLATE_MAX);
    free(out);
    /* A name longer than SBX_VAR_NAME_MAX is no variable. */
    char name[SBX_VAR_NAME_MAX + 8];
    memset(name, 'n', sizeof(name) - 1);
    name[sizeof(name) - 1] = 0;
    CHECK(!sbx_var_name_ok(name));
    char *long_ref = sbx_xasprintf("{{%s}}", name);
    CHECK_OK(sbx_template_fill(long_ref, v, NULL, &out, &err), &err);
    CHECK_EQ_STR(out, long_ref); /* too long a name: text, not a variable */
    free(out);
    free(long_ref);
    name[SBX_VAR_NAME_MAX] = 0;
    CHECK(sbx_var_name_ok(name));
    CHECK(!sbx_var_name_ok("9a"));
    CHECK(!sbx_var_name_ok("a-b"));
    CHECK(!sbx_var_name_ok(""));
    sbx_buf_release(&t);
    json_decref(v);
    free(big);
}

static char *write_file(const char *text)
{
    char *path = sbx_xasprintf("%s/a.yaml", dir);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    return path;
}

/* The prompt field prompt_yaml (indented under "prompt:") must be refused with want. */
static void bad_prompt(const char *prompt_yaml, const char *want)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_agent_file *f = NULL;
    char *doc = sbx_xasprintf("name: P\nprompt: %s\n", prompt_yaml);
    char *path = write_file(doc);
    char *msg = sbx_xasprintf("agent file '%s': prompt: %s", path, want);
    CHECK_ERR(sbx_agent_file_load(path, &f, &err), SBX_E_INVAL, &err, msg);
    CHECK(f == NULL);
    free(msg);
    free(doc);
    unlink(path);
    free(path);
}

static void test_prompt_refused(void)
{
    bad_prompt("pmpt_1", "must be an object {id, version, variables}, not string");
    bad_prompt("{version: '1'}", "missing required field 'id'");
    bad_prompt("{id: ''}", "'id' must be 1 to 256 bytes");
    bad_prompt("{id: p, extra: 1}", "unknown field 'extra'");
    bad_prompt("{id: p, version: 2}", "field 'version' must be a string, not integer");
    bad_prompt("{id: p, variables: [a]}", "field 'variables' must be an object, not array");
    bad_prompt("{id: p, variables: {1a: x}}", "variable '1a': a name is a letter or '_'");
    bad_prompt("{id: p, variables: {a: 3}}",
               "variable 'a' must be text, an input item or null (the run's variable of that "
               "name), not integer");
    bad_prompt("{id: p, variables: {a: {type: input_audio}}}",
               "variable 'a': an input item's type must be input_text, input_image or "
               "input_file");
    bad_prompt("{id: p, variables: {a: {type: input_text}}}",
               "variable 'a': an input_text item needs 'text'");
    bad_prompt("{id: p, variables: {a: {type: input_image}}}",
               "variable 'a': an input_image item needs what it holds (image_url or file_id)");
    bad_prompt("{id: p, variables: {a: {type: input_file, file_id: f, page: 1}}}",
               "variable 'a': unknown field 'page'");
    bad_prompt("{id: p, variables: {a: {type: input_text, text: 1}}}",
               "variable 'a': key 'text' must be text");
}

static void test_prompt_filled(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_agent_file *f = NULL;
    char *path = write_file("name: Desk\n"
                            "instructions: 'Serve {{customer}} in {{ lang }}.'\n"
                            "prompt:\n"
                            "  id: pmpt_abc\n"
                            "  version: '3'\n"
                            "  variables:\n"
                            "    customer: null\n"
                            "    greeting: 'Dear {{customer}}'\n"
                            "    note: {type: input_text, text: 'in {{lang}}'}\n"
                            "    pic: {type: input_image, image_url: 'https://x/{{lang}}.png'}\n");
    CHECK_OK(sbx_agent_file_load(path, &f, &err), &err);
    struct sbx_agent *a = f ? sbx_agent_file_agent(f) : NULL;
    CHECK(a && sbx_agent_prompt(a));
    /* A missing variable names itself and its user, and changes nothing. */
    json_t *v = vars_of("{\"lang\": \"Welsh\"}");
    CHECK_ERR(sbx_agent_fill_variables(a, v, NULL, &err), SBX_E_NOTFOUND, &err,
              "agent 'Desk': instructions: variable 'customer' is not given");
    CHECK_EQ_STR(sbx_agent_instructions(a), "Serve {{customer}} in {{ lang }}.");
    json_decref(v);
    v = vars_of("{\"customer\": \"Bo {{lang}}\", \"lang\": \"Welsh\", \"spare\": \"s\"}");
    json_t *used = json_object();
    CHECK_OK(sbx_agent_fill_variables(a, v, used, &err), &err);
    CHECK_EQ_STR(sbx_agent_instructions(a), "Serve Bo {{lang}} in Welsh.");
    char *p = json_dumps(sbx_agent_prompt(a), JSON_COMPACT | JSON_SORT_KEYS);
    CHECK_EQ_STR(p, "{\"id\":\"pmpt_abc\",\"variables\":{\"customer\":\"Bo {{lang}}\","
                    "\"greeting\":\"Dear Bo {{lang}}\",\"note\":{\"text\":\"in Welsh\","
                    "\"type\":\"input_text\"},\"pic\":{\"image_url\":\"https://x/{{lang}}.png\","
                    "\"type\":\"input_image\"}},\"version\":\"3\"}");
    CHECK_EQ_INT((long long)json_object_size(used), 2);
    CHECK(json_object_get(used, "spare") == NULL);
    free(p);
    json_decref(used);
    json_decref(v);
    /* A prompt variable given as null takes the run's variable, which must be given. */
    sbx_agent_file_free(f);
    f = NULL;
    CHECK_OK(sbx_agent_file_load(path, &f, &err), &err);
    sbx_agent_set_instructions(sbx_agent_file_agent(f), NULL);
    v = vars_of("{\"lang\": \"Welsh\"}");
    CHECK_ERR(sbx_agent_fill_variables(sbx_agent_file_agent(f), v, NULL, &err), SBX_E_NOTFOUND,
              &err, "agent 'Desk': prompt variable 'customer': variable 'customer' is not given");
    json_decref(v);
    sbx_agent_file_free(f);
    unlink(path);
    free(path);
}

/* The Chat Completions API has no prompt object: refused before anything is sent (the server
 * named here does not exist). */
static void test_chat_refuses(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_model *m = NULL;
    struct sbx_model_options o = {.base_url = "http://127.0.0.1:9/v1",
                                  .api_key = "k",
                                  .api = SBX_MODEL_API_CHAT,
                                  .retries = -1};
    CHECK_OK(sbx_model_new("gpt-4.1", &o, &m, &err), &err);
    json_t *input = json_pack("[{s:s, s:s}]", "role", "user", "content", "hi");
    json_t *prompt = json_pack("{s:s}", "id", "pmpt_1");
    struct sbx_model_request req = {.input = input, .prompt = prompt};
    json_t *resp = NULL;
    CHECK_ERR(sbx_model_respond(m, &req, NULL, NULL, &resp, &err), SBX_E_UNSUPPORTED, &err,
              "needs the Responses API: the Chat Completions API has no prompt object");
    CHECK(resp == NULL);
    json_decref(input);
    json_decref(prompt);
    sbx_model_free(m);
}

/* A turn hook's prompt replaces the agent's for that call (the SDK's dynamic prompt): shown by
 * the Chat Completions backend, which refuses a request with one before anything is sent, while
 * the same run without it fails on the connection instead. */
static int hook_prompt(void *data, struct sbx_agent *agent, const json_t *items,
                       struct sbx_turn_prep *out, struct sbx_error *err)
{
    (void)agent, (void)items, (void)err;
    out->prompt = data;
    return 0;
}

static void test_turn_hook_prompt(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_model *m = NULL;
    struct sbx_agent *a = NULL;
    struct sbx_run_result *res = NULL;
    struct sbx_model_options o = {.base_url = "http://127.0.0.1:9/v1",
                                  .api_key = "k",
                                  .api = SBX_MODEL_API_CHAT,
                                  .retries = -1};
    CHECK_OK(sbx_model_new("gpt-4.1", &o, &m, &err), &err);
    CHECK_OK(sbx_agent_new("Plain", &a, &err), &err);
    json_t *prompt = json_pack("{s:s}", "id", "pmpt_dyn");
    json_t *input = json_string("hi");
    struct sbx_run_options ro = {.model = m, .turn_hook = hook_prompt, .turn_hook_data = prompt};
    CHECK_ERR(sbx_run(a, input, &ro, &res, &err), SBX_E_UNSUPPORTED, &err,
              "the Chat Completions API has no prompt object");
    ro.turn_hook_data = NULL;
    CHECK(sbx_run(a, input, &ro, &res, &err) < 0);
    CHECK(err.code != SBX_E_UNSUPPORTED);
    CHECK(res == NULL);
    json_decref(input);
    json_decref(prompt);
    sbx_agent_free(a);
    sbx_model_free(m);
}

int main(void)
{
    TAP_START();
    if (!mkdtemp(dir))
        return 1;
    TAP_RUN(test_fill);
    TAP_RUN(test_used_and_missing);
    TAP_RUN(test_bounds);
    TAP_RUN(test_prompt_refused);
    TAP_RUN(test_prompt_filled);
    TAP_RUN(test_chat_refuses);
    TAP_RUN(test_turn_hook_prompt);
    rmdir(dir);
    return TAP_DONE();
}
