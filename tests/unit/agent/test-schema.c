/* The JSON Schema subset: strict transform and validation messages. */
#include "tap.h"
#include "agent/schema.h"
#include "sbx/json.h"

static json_t *J(const char *text)
{
    json_t *v = NULL;
    if (sbx_json_parse(text, strlen(text), NULL, &v, NULL) < 0)
        abort();
    return v;
}

static void check_valid(const char *schema, const char *value, int code, const char *needle)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *s = J(schema), *v = J(value);
    if (code == 0)
        CHECK_OK(sbx__schema_validate(s, v, &err), &err);
    else
        CHECK_ERR(sbx__schema_validate(s, v, &err), code, &err, needle);
    json_decref(s);
    json_decref(v);
}

static void test_validate(void)
{
    const char *obj =
            "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"number\"},"
            "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":2},"
            "\"mode\":{\"enum\":[\"r\",\"w\"]},\"n\":{\"type\":\"integer\",\"minimum\":1}},"
            "\"required\":[\"a\"],\"additionalProperties\":false}";
    check_valid(obj, "{\"a\":1.5,\"tags\":[\"x\"],\"mode\":\"r\",\"n\":3}", 0, NULL);
    check_valid(obj, "{\"a\":\"x\"}", SBX_E_INVAL, "$.a: expected number, got string");
    check_valid(obj, "{}", SBX_E_INVAL, "$: missing required property 'a'");
    check_valid(obj, "{\"a\":1,\"b\":2}", SBX_E_INVAL, "unexpected property 'b'");
    check_valid(obj, "{\"a\":1,\"tags\":[\"x\",3]}", SBX_E_INVAL, "$.tags[1]: expected string");
    check_valid(obj, "{\"a\":1,\"tags\":[\"x\",\"y\",\"z\"]}", SBX_E_INVAL, "more items");
    check_valid(obj, "{\"a\":1,\"mode\":\"x\"}", SBX_E_INVAL, "\"x\" is not one of the allowed");
    check_valid(obj, "{\"a\":1,\"n\":0}", SBX_E_INVAL, "$.n: must be at least 1");
    check_valid(obj, "{\"a\":1,\"n\":2.5}", SBX_E_INVAL, "expected integer");
    /* Whole reals are integers, however large; fractions are not, however small. */
    check_valid(obj, "{\"a\":1,\"n\":3.0}", 0, NULL);
    check_valid(obj, "{\"a\":1,\"n\":1e300}", 0, NULL);
    check_valid(obj, "{\"a\":1,\"n\":4503599627370495.5}", SBX_E_INVAL, "expected integer");
    check_valid("{\"type\":\"integer\"}", "-2.0", 0, NULL);
    check_valid("{\"type\":\"integer\"}", "-0.5", SBX_E_INVAL, "expected integer");
    check_valid(obj, "[]", SBX_E_INVAL, "expected object, got array");
    /* anyOf, nullable types, $ref. */
    check_valid("{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"null\"}]}", "null", 0, NULL);
    check_valid("{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"null\"}]}", "3", SBX_E_INVAL,
                "none of the alternatives");
    check_valid("{\"type\":[\"integer\",\"null\"]}", "null", 0, NULL);
    check_valid("{\"$defs\":{\"p\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":"
                "\"integer\"}},\"required\":[\"x\"]}},\"$ref\":\"#/$defs/p\"}",
                "{\"x\":\"no\"}", SBX_E_INVAL, "$.x: expected integer");
    check_valid("{\"$ref\":\"#/nowhere\"}", "1", SBX_E_INVAL, "cannot be resolved");
    check_valid("{\"type\":\"string\",\"minLength\":2}", "\"\xc3\xa9\"", SBX_E_INVAL, "shorter");
    check_valid("{\"type\":\"string\",\"minLength\":2}", "\"ab\"", 0, NULL);
}

static void test_strict(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *s = J("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"object\",\"properties\":"
                  "{\"b\":{\"type\":\"string\"}}},\"l\":{\"type\":\"array\",\"items\":{\"type\":"
                  "\"object\",\"properties\":{\"c\":{\"type\":\"integer\"}}}}}}");
    json_t *out = NULL;
    CHECK_OK(sbx__schema_strict(s, &out, &err), &err);
    char *d = sbx_json_dumps(out, SBX_JSON_SORTED);
    CHECK_CONTAINS(d, "\"required\":[\"a\",\"l\"]");
    CHECK_CONTAINS(d, "\"required\":[\"b\"]");
    CHECK_CONTAINS(d, "\"required\":[\"c\"]");
    /* every object closed: top, a, items of l */
    size_t closed = 0;
    for (const char *p = d; (p = strstr(p, "\"additionalProperties\":false")); p++)
        closed++;
    CHECK_EQ_INT(closed, 3);
    free(d);
    json_decref(out);
    json_decref(s);

    s = J("{}");
    CHECK_OK(sbx__schema_strict(s, &out, &err), &err);
    d = sbx_json_dumps(out, SBX_JSON_SORTED);
    CHECK_EQ_STR(d, "{\"additionalProperties\":false,\"properties\":{},\"required\":[],\"type\":"
                    "\"object\"}");
    free(d);
    json_decref(out);
    json_decref(s);

    s = J("{\"type\":\"object\",\"additionalProperties\":true}");
    CHECK_ERR(sbx__schema_strict(s, &out, &err), SBX_E_INVAL, &err, "'additionalProperties'");
    json_decref(s);
    s = J("[1]");
    CHECK_ERR(sbx__schema_strict(s, &out, &err), SBX_E_INVAL, &err, "must be an object");
    json_decref(s);
}

/* A function tool in strict mode: the model's form and the checking form. */
static void test_tool_strict(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *s = J("{\"type\":\"object\",\"required\":[\"cmd\"],\"properties\":{"
                  "\"cmd\":{\"type\":\"string\",\"minLength\":1},"
                  "\"workdir\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"null\"}],"
                  "\"default\":null},"
                  "\"login\":{\"type\":\"boolean\",\"default\":true},"
                  "\"yield_time_ms\":{\"type\":\"integer\",\"minimum\":0,\"default\":10000},"
                  "\"env\":{\"type\":\"object\",\"properties\":{\"k\":{\"type\":\"string\"}}}}}");
    json_t *sent = NULL, *check = NULL;
    CHECK_OK(sbx__schema_tool_strict(s, &sent, &check, &err), &err);
    char *d = sbx_json_dumps(sent, SBX_JSON_SORTED);
    CHECK_CONTAINS(d, "\"required\":[\"cmd\",\"workdir\",\"login\",\"yield_time_ms\",\"env\"]");
    CHECK_CONTAINS(d, "\"login\":{\"type\":[\"boolean\",\"null\"]}");
    CHECK_CONTAINS(d, "\"yield_time_ms\":{\"type\":[\"integer\",\"null\"]}");
    CHECK_CONTAINS(d, "\"cmd\":{\"type\":\"string\"}"); /* mandatory: not nullable */
    CHECK_CONTAINS(d, "\"workdir\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"null\"}]}");
    CHECK_CONTAINS(d, "\"required\":[\"k\"]"); /* nested objects too */
    CHECK(strstr(d, "default") == NULL);
    CHECK(strstr(d, "minimum") == NULL);
    CHECK(strstr(d, "minLength") == NULL);
    free(d);

    /* The checking form: optional properties may be absent or null, the rest as written. */
    static const char *const good[] = {
            "{\"cmd\":\"ls\"}",
            "{\"cmd\":\"ls\",\"workdir\":null,\"login\":null,\"yield_time_ms\":null,"
            "\"env\":null}",
            "{\"cmd\":\"ls\",\"login\":false,\"yield_time_ms\":5}",
    };
    for (size_t i = 0; i < SBX_ARRAY_LEN(good); i++) {
        json_t *v = J(good[i]);
        CHECK_OK(sbx__schema_validate(check, v, &err), &err);
        json_decref(v);
    }
    static const struct {
        const char *args, *needle;
    } bad[] = {
            {"{\"cmd\":\"\"}", "shorter than the minimum length"},
            {"{\"cmd\":null}", "$.cmd"},
            {"{\"login\":true}", "cmd"},
            {"{\"cmd\":\"ls\",\"yield_time_ms\":-1}", "$.yield_time_ms"},
            {"{\"cmd\":\"ls\",\"extra\":1}", "extra"},
    };
    for (size_t i = 0; i < SBX_ARRAY_LEN(bad); i++) {
        json_t *v = J(bad[i].args);
        CHECK_ERR(sbx__schema_validate(check, v, &err), SBX_E_INVAL, &err, bad[i].needle);
        json_decref(v);
    }
    json_decref(sent);
    json_decref(check);
    json_decref(s);

    /* An object without a "required" list: every property mandatory, none nullable. */
    s = J("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"number\"}}}");
    CHECK_OK(sbx__schema_tool_strict(s, &sent, &check, &err), &err);
    d = sbx_json_dumps(sent, SBX_JSON_SORTED);
    CHECK_CONTAINS(d, "\"a\":{\"type\":\"number\"}");
    CHECK_CONTAINS(d, "\"required\":[\"a\"]");
    free(d);
    json_t *none = J("{}");
    CHECK_ERR(sbx__schema_validate(check, none, &err), SBX_E_INVAL, &err, "a");
    json_decref(none);
    json_decref(sent);
    json_decref(check);
    json_decref(s);

    s = J("{\"type\":\"object\",\"additionalProperties\":{}}");
    CHECK_ERR(sbx__schema_tool_strict(s, &sent, &check, &err), SBX_E_INVAL, &err,
              "'additionalProperties'");
    json_decref(s);
}

int main(void)
{
    TAP_START();
    TAP_RUN(test_validate);
    TAP_RUN(test_strict);
    TAP_RUN(test_tool_strict);
    return TAP_DONE();
}
