#include <stdlib.h>

#include "tap.h"
#include "sbx/json.h"

static void test_parse_and_limits(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *v = NULL;
    const char *doc = "{\"a\": [1, 2, {\"b\": \"x\"}], \"s\": \"br]ace{\"}";
    CHECK_OK(sbx_json_parse(doc, strlen(doc), NULL, &v, &err), &err);
    CHECK(json_is_object(v));
    json_decref(v);
    v = NULL;
    CHECK_ERR(sbx_json_parse("{\"a\":1,\"a\":2}", 13, NULL, &v, &err), SBX_E_INVAL, &err,
              "duplicate");
    CHECK_ERR(sbx_json_parse("{\"a\":", 5, NULL, &v, &err), SBX_E_PARSE, &err, "line 1");
    CHECK_ERR(sbx_json_parse("\"a\\u0000b\"", 10, NULL, &v, &err), SBX_E_PARSE, &err, NULL);
    struct sbx_json_limits lim = {.max_bytes = 4};
    CHECK_ERR(sbx_json_parse("[1,2]", 5, &lim, &v, &err), SBX_E_TOOBIG, &err, "limit of 4");
    char deep[20001];
    memset(deep, '[', 10000);
    memset(deep + 10000, ']', 10000);
    deep[20000] = '\0';
    CHECK_ERR(sbx_json_parse(deep, 20000, NULL, &v, &err), SBX_E_TOOBIG, &err, "depth limit");
    CHECK(v == NULL);
    CHECK_EQ_INT(sbx_json_scan_depth("[\"[[[[\"]", 8, 10), 1);
    CHECK_EQ_INT(sbx_json_scan_depth("[\"\\\"[[\"]", 8, 10), 1);
}

static void test_getters(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *o = NULL;
    const char *doc = "{\"s\":\"v\",\"i\":3,\"n\":1.5,\"b\":true,\"o\":{},\"a\":[],\"z\":null}";
    CHECK_OK(sbx_json_parse(doc, strlen(doc), NULL, &o, &err), &err);
    const char *s = NULL;
    int64_t i = 0;
    double n = 0;
    int b = 0;
    json_t *x = NULL;
    CHECK_OK(sbx_json_get_string(o, "s", 1, &s, &err), &err);
    CHECK_EQ_STR(s, "v");
    CHECK_OK(sbx_json_get_int(o, "i", 1, &i, &err), &err);
    CHECK_EQ_INT(i, 3);
    CHECK_OK(sbx_json_get_number(o, "i", 1, &n, &err), &err);
    CHECK(n == 3.0);
    CHECK_OK(sbx_json_get_number(o, "n", 1, &n, &err), &err);
    CHECK(n == 1.5);
    CHECK_OK(sbx_json_get_bool(o, "b", 1, &b, &err), &err);
    CHECK_EQ_INT(b, 1);
    CHECK_OK(sbx_json_get_object(o, "o", 1, &x, &err), &err);
    CHECK_OK(sbx_json_get_array(o, "a", 1, &x, &err), &err);
    s = "unchanged";
    CHECK_OK(sbx_json_get_string(o, "missing", 0, &s, &err), &err);
    CHECK_EQ_STR(s, "unchanged");
    CHECK_OK(sbx_json_get_string(o, "z", 0, &s, &err), &err);
    CHECK_ERR(sbx_json_get_string(o, "missing", 1, &s, &err), SBX_E_INVAL, &err,
              "missing required field 'missing'");
    CHECK_ERR(sbx_json_get_string(o, "i", 1, &s, &err), SBX_E_INVAL, &err,
              "field 'i' must be a string, not integer");
    CHECK_ERR(sbx_json_get_int(o, "n", 1, &i, &err), SBX_E_INVAL, &err, "not number");
    CHECK_ERR(sbx_json_get_bool(o, "s", 1, &b, &err), SBX_E_INVAL, &err, "a boolean");
    const char *const allowed[] = {"s", "i", "n", "b", "o", "a", NULL};
    CHECK_ERR(sbx_json_check_keys(o, allowed, &err), SBX_E_INVAL, &err, "unknown field 'z'");
    json_decref(o);
}

/* The text getters refuse what a loader must not pass on: NUL bytes, control characters (unless
 * allowed), empty required values, arrays holding anything but clean strings. */
static void test_text_getters(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *o = json_object();
    sbx_json_set(o, "s", sbx_json_str("v"));
    sbx_json_set(o, "e", sbx_json_str(""));
    sbx_json_set(o, "nl", sbx_json_str("a\nb"));
    sbx_json_set(o, "del", sbx_json_str("a\x7f"));
    sbx_json_set(o, "nul", json_stringn("a\0b", 3));
    sbx_json_set(o, "i", json_integer(1));
    sbx_json_set(o, "z", json_null());
    json_t *good = json_array(), *bad = json_array(), *ctl = json_array();
    sbx_json_append(good, sbx_json_str("x"));
    sbx_json_append(bad, sbx_json_str("x"));
    sbx_json_append(bad, json_integer(2));
    sbx_json_append(ctl, sbx_json_str("x\ty"));
    sbx_json_set(o, "good", good);
    sbx_json_set(o, "bad", bad);
    sbx_json_set(o, "ctl", ctl);

    const char *s = NULL;
    size_t len = 99;
    CHECK_OK(sbx_json_get_text(o, "s", SBX_JSON_REQUIRED | SBX_JSON_NONEMPTY, &s, &len, &err),
             &err);
    CHECK_EQ_STR(s, "v");
    CHECK_EQ_INT(len, 1);
    s = "unchanged";
    len = 99;
    CHECK_OK(sbx_json_get_text(o, "missing", 0, &s, &len, &err), &err);
    CHECK_OK(sbx_json_get_text(o, "z", SBX_JSON_NONEMPTY, &s, &len, &err), &err);
    CHECK_EQ_STR(s, "unchanged");
    CHECK_EQ_INT(len, 99);
    CHECK_OK(sbx_json_get_text(o, "e", 0, &s, NULL, &err), &err);
    CHECK_EQ_STR(s, "");
    CHECK_OK(sbx_json_get_text(o, "nl", SBX_JSON_ALLOW_CONTROL, &s, NULL, &err), &err);
    CHECK_EQ_STR(s, "a\nb");
    CHECK_ERR(sbx_json_get_text(o, "missing", SBX_JSON_REQUIRED, &s, NULL, &err), SBX_E_INVAL, &err,
              "missing required field 'missing'");
    CHECK_ERR(sbx_json_get_text(o, "z", SBX_JSON_REQUIRED, &s, NULL, &err), SBX_E_INVAL, &err,
              "missing required field 'z'");
    CHECK_ERR(sbx_json_get_text(o, "e", SBX_JSON_NONEMPTY, &s, NULL, &err), SBX_E_INVAL, &err,
              "field 'e' must not be empty");
    CHECK_ERR(sbx_json_get_text(o, "i", 0, &s, NULL, &err), SBX_E_INVAL, &err,
              "field 'i' must be a string, not integer");
    CHECK_ERR(sbx_json_get_text(o, "nl", 0, &s, NULL, &err), SBX_E_INVAL, &err,
              "field 'nl' must not contain control characters");
    CHECK_ERR(sbx_json_get_text(o, "del", 0, &s, NULL, &err), SBX_E_INVAL, &err,
              "field 'del' must not contain control characters");
    CHECK_ERR(sbx_json_get_text(o, "nul", SBX_JSON_ALLOW_CONTROL, &s, NULL, &err), SBX_E_INVAL,
              &err, "field 'nul' must not contain a NUL byte");

    json_t *a = NULL;
    CHECK_OK(sbx_json_get_text_array(o, "missing", &a, &err), &err);
    CHECK(a == NULL);
    CHECK_OK(sbx_json_get_text_array(o, "z", &a, &err), &err);
    CHECK(a == NULL);
    CHECK_OK(sbx_json_get_text_array(o, "good", &a, &err), &err);
    CHECK(a == good);
    a = NULL;
    CHECK_ERR(sbx_json_get_text_array(o, "s", &a, &err), SBX_E_INVAL, &err,
              "field 's' must be an array, not string");
    CHECK_ERR(sbx_json_get_text_array(o, "bad", &a, &err), SBX_E_INVAL, &err,
              "field 'bad' must be an array of strings without control characters");
    CHECK_ERR(sbx_json_get_text_array(o, "ctl", &a, &err), SBX_E_INVAL, &err,
              "field 'ctl' must be an array of strings without control characters");
    CHECK(a == NULL);
    json_decref(o);
}

static void test_dump_and_strings(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *o = json_object();
    sbx_json_set(o, "b", json_integer(1));
    sbx_json_set(o, "a", sbx_json_str("x\xffy"));
    json_t *arr = json_array();
    sbx_json_append(arr, json_true());
    sbx_json_set(o, "c", arr);
    struct sbx_buf b;
    sbx_buf_init(&b, 1 << 20);
    CHECK_OK(sbx_json_dump(o, SBX_JSON_SORTED, &b, &err), &err);
    CHECK_EQ_STR(b.data, "{\"a\":\"x\xef\xbf\xbdy\",\"b\":1,\"c\":[true]}");
    sbx_buf_release(&b);
    sbx_buf_init(&b, 5);
    CHECK_ERR(sbx_json_dump(o, 0, &b, &err), SBX_E_TOOBIG, &err, NULL);
    CHECK_EQ_INT(b.len, 0);
    sbx_buf_release(&b);
    char *s = sbx_json_dumps(o, SBX_JSON_PRETTY | SBX_JSON_SORTED);
    CHECK_CONTAINS(s, "\n  \"b\": 1");
    free(s);
    json_decref(o);
}

int main(void)
{
    TAP_START();
    TAP_RUN(test_parse_and_limits);
    TAP_RUN(test_getters);
    TAP_RUN(test_text_getters);
    TAP_RUN(test_dump_and_strings);
    return TAP_DONE();
}
