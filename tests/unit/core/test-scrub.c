/* The scrubber on JSON: secret values out of strings and keys at any depth, and a document
 * without any handed back as itself. */
#include <stdlib.h>
#include <string.h>

#include "tap.h"
#include "sbx/json.h"
#include "sbx/scrub.h"
#include "sbx/strv.h"

static json_t *doc(const char *text)
{
    json_error_t je;
    json_t *v = json_loads(text, JSON_DECODE_ANY, &je);
    if (!v)
        abort();
    return v;
}

static void check_scrub(const struct sbx_strv *secrets, const char *in, const char *want)
{
    json_t *v = doc(in), *w = doc(want);
    json_t *out = sbx_scrub_json(secrets, v, NULL);
    CHECK(out && json_equal(out, w));
    char *t = json_dumps(out, JSON_SORT_KEYS | JSON_COMPACT | JSON_ENCODE_ANY);
    CHECK(t && !strstr(t, "hunter22") && !strstr(t, "tok-abcdef"));
    free(t);
    json_decref(out);
    json_decref(w);
    json_decref(v);
}

static void test_secrets_out(void)
{
    struct sbx_strv s;
    sbx_strv_init(&s);
    sbx_strv_push(&s, "hunter22");
    sbx_strv_push(&s, "tok-abcdef");
    check_scrub(&s, "\"say hunter22 twice: hunter22\"", "\"say [redacted] twice: [redacted]\"");
    check_scrub(&s, "{\"a\": [1, {\"b\": [\"x\", \"pw=hunter22;\"]}], \"c\": true}",
                "{\"a\": [1, {\"b\": [\"x\", \"pw=[redacted];\"]}], \"c\": true}");
    check_scrub(&s, "{\"tok-abcdef\": {\"deep\": [[[\"tok-abcdef\"]]]}, \"n\": null}",
                "{\"[redacted]\": {\"deep\": [[[\"[redacted]\"]]]}, \"n\": null}");
    sbx_strv_release(&s);
}

/* Without a secret in it the scrub is the very document (no copy), with or without secrets. */
static void test_clean_is_itself(void)
{
    struct sbx_strv s;
    sbx_strv_init(&s);
    json_t *v = doc("{\"a\": [1, \"two\", {\"hunter2\": \"hunter2x\"}], \"b\": 2.5}");
    json_t *out = sbx_scrub_json(&s, v, NULL);
    CHECK(out == v);
    json_decref(out);
    sbx_strv_push(&s, "hunter22");
    sbx_strv_push(&s, "abc"); /* shorter than SBX_SCRUB_MIN: never scrubbed */
    out = sbx_scrub_json(&s, v, NULL);
    CHECK(out == v);
    json_decref(out);
    json_t *one = doc("{\"a\": [1, \"two\", {\"k\": \"hunter22\"}], \"b\": 2.5}");
    out = sbx_scrub_json(&s, one, "#");
    CHECK(out != one);
    CHECK_EQ_STR(
            json_string_value(json_object_get(json_array_get(json_object_get(out, "a"), 2), "k")),
            "#");
    CHECK(json_array_get(json_object_get(out, "a"), 0) ==
          json_array_get(json_object_get(one, "a"), 0));
    json_decref(out);
    json_decref(one);
    json_decref(v);
    sbx_strv_release(&s);
}

int main(void)
{
    TAP_START();
    TAP_RUN(test_secrets_out);
    TAP_RUN(test_clean_is_itself);
    return TAP_DONE();
}
