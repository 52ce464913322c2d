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

int main(void)
{
    TAP_START();
    TAP_RUN(test_validate);
    TAP_RUN(test_strict);
    return TAP_DONE();
}
