/* Request bodies built through a sbx_model_cache: byte for byte what serialising the whole
 * input from scratch gives, turn after turn, for both wire formats, including items that merge
 * into an earlier chat message, items replaced or dropped, and a cache moved between
 * providers. */
#include <stdlib.h>
#include <string.h>

#include "model/model-internal.h"
#include "sbx/json.h"
#include "tap.h"

static struct sbx_model *model(enum sbx_model_api api)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_model_options o = {.base_url = "http://127.0.0.1:9/v1", .api = api};
    struct sbx_model *m = NULL;
    if (sbx_model_new("cache-model", &o, &m, &err) < 0) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    return m;
}

static json_t *item(const char *text)
{
    json_t *v = NULL;
    if (sbx_json_parse(text, strlen(text), NULL, &v, NULL) < 0)
        abort();
    return v;
}

/* The conversation a run builds, one item at a time: every kind the chat conversion merges,
 * skips or splits. */
static const char *const script[] = {
        "{\"type\":\"message\",\"role\":\"user\",\"content\":\"add 1 and 2\"}",
        "{\"type\":\"reasoning\",\"id\":\"rs1\",\"summary\":[]}",
        "{\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":\"add\",\"arguments\":"
        "\"{\\\"a\\\":1,\\\"b\\\":2}\"}",
        "{\"type\":\"reasoning\",\"id\":\"rs2\",\"summary\":[]}",
        "{\"type\":\"function_call\",\"call_id\":\"c2\",\"name\":\"add\",\"arguments\":\"{}\"}",
        "{\"type\":\"message\",\"role\":\"assistant\",\"content\":\"two calls\"}",
        "{\"type\":\"function_call_output\",\"call_id\":\"c1\",\"output\":\"3\"}",
        "{\"type\":\"function_call_output\",\"call_id\":\"c2\",\"output\":[{\"type\":"
        "\"input_text\",\"text\":\"bad\"},{\"type\":\"input_image\",\"image_url\":\"x\"}]}",
        "{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\","
        "\"text\":\"so 3\",\"annotations\":[]}]}",
        "{\"type\":\"function_call\",\"call_id\":\"c3\",\"name\":\"add\",\"arguments\":\"{}\"}",
        "{\"type\":\"custom_tool_call\",\"call_id\":\"c4\",\"name\":\"patch\",\"input\":\"x\"}",
        "{\"type\":\"function_call_output\",\"call_id\":\"c3\",\"output\":\"ok\"}",
        "{\"type\":\"custom_tool_call_output\",\"call_id\":\"c4\",\"output\":\"done\"}",
        "{\"role\":\"developer\",\"content\":\"be brief\"}",
        "{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":"
        "\"and \\u00e9\\n\"},{\"type\":\"input_image\",\"image_url\":\"data:,\"}]}",
        "{\"type\":\"message\",\"role\":\"assistant\",\"content\":\"\\\"quoted\\\"\"}",
};
#define NSCRIPT (sizeof(script) / sizeof(script[0]))

/* The body built with cache equals the one built from scratch; returns the cached one. */
static char *same_body(struct sbx_model *m, const json_t *input, struct sbx_model_cache *cache,
                       const char *what, size_t step)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *tools = item("[{\"type\":\"function\",\"name\":\"add\",\"parameters\":{}},"
                         "{\"type\":\"custom\",\"name\":\"patch\"}]");
    json_t *settings = item("{\"temperature\":0.5}");
    struct sbx_model_request req = {
            .instructions = step % 2 ? "odd turn" : "even turn",
            .input = input,
            .tools = tools,
            .settings = settings,
    };
    char *fresh = NULL, *cached = NULL;
    size_t fl = 0, cl = 0;
    CHECK_OK(sbx__model_body(m, &req, 1, &fresh, &fl, &err), &err);
    req.cache = cache;
    CHECK_OK(sbx__model_body(m, &req, 1, &cached, &cl, &err), &err);
    if (fl != cl || memcmp(fresh, cached, fl) != 0) {
        CHECK_EQ_STR(cached, fresh);
        printf("# %s, step %zu\n", what, step);
    } else {
        tap__result(1, __FILE__, __LINE__, what);
    }
    json_t *parsed = NULL;
    CHECK_OK(sbx_json_parse(cached, cl, NULL, &parsed, &err), &err);
    CHECK(json_is_object(parsed));
    CHECK(json_real_value(json_object_get(parsed, "temperature")) == 0.5);
    json_decref(parsed);
    json_decref(tools);
    json_decref(settings);
    free(fresh);
    return cached;
}

static void test_growing(enum sbx_model_api api, const char *what)
{
    struct sbx_model *m = model(api);
    struct sbx_model_cache *cache = sbx_model_cache_new();
    json_t *input = json_array();
    for (size_t i = 0; i < NSCRIPT; i++) {
        sbx_json_append(input, item(script[i]));
        char *body = same_body(m, input, cache, what, i);
        if (api == SBX_MODEL_API_RESPONSES) {
            /* The Responses input is the items themselves, whatever the cache holds. */
            struct sbx_error err = SBX_ERROR_INIT;
            json_t *parsed = NULL;
            CHECK_OK(sbx_json_parse(body, strlen(body), NULL, &parsed, &err), &err);
            CHECK(json_equal(json_object_get(parsed, "input"), input));
            json_decref(parsed);
        }
        free(body);
    }
    /* A turn hook cuts the history at a compaction item, then the cut input grows. */
    json_t *cut = json_array();
    sbx_json_append(cut, item("{\"type\":\"compaction\",\"encrypted_content\":\"z\"}"));
    for (size_t i = 6; i < json_array_size(input); i++)
        sbx_json_append(cut, json_incref(json_array_get(input, i)));
    for (size_t i = 0; i < 4; i++) {
        free(same_body(m, cut, cache, what, 100 + i));
        sbx_json_append(cut, item(script[i]));
    }
    for (size_t step = 0; step < 3; step++) {
        json_array_remove(cut, 0);
        free(same_body(m, cut, cache, what, 200 + step));
    }
    json_decref(cut);
    sbx_model_cache_free(cache);
    json_decref(input);
    sbx_model_free(m);
}

/* Items replaced by new objects, dropped from the front (a turn hook's compaction), the input
 * emptied, and the cache given to the other provider. */
static void test_changes(void)
{
    struct sbx_model *ms[2] = {model(SBX_MODEL_API_RESPONSES), model(SBX_MODEL_API_CHAT)};
    struct sbx_model_cache *cache = sbx_model_cache_new();
    json_t *input = json_array();
    for (size_t i = 0; i < NSCRIPT; i++)
        sbx_json_append(input, item(script[i]));
    for (int round = 0; round < 4; round++) {
        for (int p = 0; p < 2; p++) {
            free(same_body(ms[p], input, cache, "full input", (size_t)round));
            json_t *copy = json_array();
            for (size_t i = 0; i < json_array_size(input); i++)
                sbx_json_append(copy, json_incref(json_array_get(input, i)));
            /* The assistant message after the calls becomes a new object with other text. */
            json_array_set_new(copy, 5,
                               item("{\"type\":\"message\",\"role\":\"assistant\","
                                    "\"content\":\"changed\"}"));
            char *b = same_body(ms[p], copy, cache, "item replaced", (size_t)round);
            CHECK(strstr(b, "changed") != NULL);
            free(b);
            json_array_remove(copy, 0);
            json_array_remove(copy, 0);
            free(same_body(ms[p], copy, cache, "front dropped", (size_t)round));
            json_array_clear(copy);
            free(same_body(ms[p], copy, cache, "empty input", (size_t)round));
            json_decref(copy);
        }
    }
    sbx_model_cache_free(cache);
    json_decref(input);
    sbx_model_free(ms[0]);
    sbx_model_free(ms[1]);
}

static void test_growing_responses(void)
{
    test_growing(SBX_MODEL_API_RESPONSES, "responses: cached body equals a fresh one");
}

static void test_growing_chat(void)
{
    test_growing(SBX_MODEL_API_CHAT, "chat: cached body equals a fresh one");
}

int main(void)
{
    TAP_START();
    TAP_RUN(test_growing_responses);
    TAP_RUN(test_growing_chat);
    TAP_RUN(test_changes);
    return TAP_DONE();
}
