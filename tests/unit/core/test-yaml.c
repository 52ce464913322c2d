#include <string.h>
#include <unistd.h>

#include "tap.h"
#include "sbx/buf.h"
#include "sbx/yaml.h"

static json_t *parse_ok(const char *text)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *v = NULL;
    int rc = sbx_yaml_parse(text, strlen(text), NULL, &v, &err);
    if (rc != 0)
        printf("# parse failed: %s\n", err.msg);
    return v;
}

static void test_core_schema_scalars(void)
{
    const char *doc = "int: 42\n"
                      "neg: -7\n"
                      "plus: +3\n"
                      "hex: 0x1F\n"
                      "oct: 0o17\n"
                      "leading_zero: 012\n"
                      "float: 1.5\n"
                      "dotfloat: .5\n"
                      "exp: 1e3\n"
                      "t1: true\n"
                      "t2: True\n"
                      "t3: TRUE\n"
                      "f1: false\n"
                      "f2: FALSE\n"
                      "n1: ~\n"
                      "n2: null\n"
                      "n3: NULL\n"
                      "n4:\n"
                      "yes_is_text: yes\n"
                      "on_is_text: on\n"
                      "quoted_int: '42'\n"
                      "quoted_bool: \"true\"\n"
                      "quoted_null: ''\n"
                      "text: hello world\n"
                      "hexish: 0xZZ\n"
                      "literal: |\n  line one\n  line two\n";
    json_t *v = parse_ok(doc);
    if (!CHECK(json_is_object(v)))
        return;
    CHECK_EQ_INT(json_integer_value(json_object_get(v, "int")), 42);
    CHECK_EQ_INT(json_integer_value(json_object_get(v, "neg")), -7);
    CHECK_EQ_INT(json_integer_value(json_object_get(v, "plus")), 3);
    CHECK_EQ_INT(json_integer_value(json_object_get(v, "hex")), 31);
    CHECK_EQ_INT(json_integer_value(json_object_get(v, "oct")), 15);
    CHECK_EQ_INT(json_integer_value(json_object_get(v, "leading_zero")), 12);
    CHECK(json_is_real(json_object_get(v, "float")));
    CHECK(json_real_value(json_object_get(v, "float")) == 1.5);
    CHECK(json_real_value(json_object_get(v, "dotfloat")) == 0.5);
    CHECK(json_real_value(json_object_get(v, "exp")) == 1000.0);
    CHECK(json_is_true(json_object_get(v, "t1")));
    CHECK(json_is_true(json_object_get(v, "t2")));
    CHECK(json_is_true(json_object_get(v, "t3")));
    CHECK(json_is_false(json_object_get(v, "f1")));
    CHECK(json_is_false(json_object_get(v, "f2")));
    CHECK(json_is_null(json_object_get(v, "n1")));
    CHECK(json_is_null(json_object_get(v, "n2")));
    CHECK(json_is_null(json_object_get(v, "n3")));
    CHECK(json_is_null(json_object_get(v, "n4")));
    CHECK_EQ_STR(json_string_value(json_object_get(v, "yes_is_text")), "yes");
    CHECK_EQ_STR(json_string_value(json_object_get(v, "on_is_text")), "on");
    CHECK_EQ_STR(json_string_value(json_object_get(v, "quoted_int")), "42");
    CHECK_EQ_STR(json_string_value(json_object_get(v, "quoted_bool")), "true");
    CHECK_EQ_STR(json_string_value(json_object_get(v, "quoted_null")), "");
    CHECK_EQ_STR(json_string_value(json_object_get(v, "text")), "hello world");
    CHECK_EQ_STR(json_string_value(json_object_get(v, "hexish")), "0xZZ");
    CHECK_EQ_STR(json_string_value(json_object_get(v, "literal")), "line one\nline two\n");
    json_decref(v);
}

static void test_structure(void)
{
    json_t *v = parse_ok("name: agent\n"
                         "tools:\n"
                         "  - shell\n"
                         "  - {name: fs, ro: true}\n"
                         "1: numeric key\n"
                         "env: {A: '1', B: [x, y]}\n");
    if (!CHECK(json_is_object(v)))
        return;
    json_t *tools = json_object_get(v, "tools");
    CHECK_EQ_INT(json_array_size(tools), 2);
    CHECK_EQ_STR(json_string_value(json_array_get(tools, 0)), "shell");
    CHECK(json_is_true(json_object_get(json_array_get(tools, 1), "ro")));
    CHECK_EQ_STR(json_string_value(json_object_get(v, "1")), "numeric key");
    CHECK_EQ_INT(json_array_size(json_object_get(json_object_get(v, "env"), "B")), 2);
    json_decref(v);

    v = parse_ok("");
    CHECK(json_is_null(v));
    json_decref(v);
    v = parse_ok("---\n");
    CHECK(json_is_null(v));
    json_decref(v);
    v = parse_ok("--- just text\n...\n");
    CHECK_EQ_STR(json_string_value(v), "just text");
    json_decref(v);
}

static void test_tags(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *v = parse_ok("a: !!str 123\nb: !!int '42'\nc: !!float 1\nd: ! true\n"
                         "e: !!seq [1]\nf: !!null ''\n");
    if (CHECK(json_is_object(v))) {
        CHECK_EQ_STR(json_string_value(json_object_get(v, "a")), "123");
        CHECK_EQ_INT(json_integer_value(json_object_get(v, "b")), 42);
        CHECK(json_is_real(json_object_get(v, "c")));
        CHECK_EQ_STR(json_string_value(json_object_get(v, "d")), "true");
        CHECK(json_is_array(json_object_get(v, "e")));
        CHECK(json_is_null(json_object_get(v, "f")));
    }
    json_decref(v);
    v = NULL;
    const char *t = "a: !!int abc\n";
    CHECK_ERR(sbx_yaml_parse(t, strlen(t), NULL, &v, &err), SBX_E_INVAL, &err,
              "yaml line 1 column 4: value tagged integer is not a valid integer: 'abc'");
    t = "a: !custom x\n";
    CHECK_ERR(sbx_yaml_parse(t, strlen(t), NULL, &v, &err), SBX_E_INVAL, &err,
              "unsupported tag '!custom'");
    t = "a: !!map [1]\n";
    CHECK_ERR(sbx_yaml_parse(t, strlen(t), NULL, &v, &err), SBX_E_INVAL, &err, "unsupported tag");
    CHECK(v == NULL);
}

static void test_numbers_json_cannot_hold(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *v = NULL;
    static const char *bad[] = {"x: .inf\n", "x: -.Inf\n", "x: +.INF\n", "x: .nan\n", "x: .NaN\n"};
    for (size_t i = 0; i < SBX_ARRAY_LEN(bad); i++)
        CHECK_ERR(sbx_yaml_parse(bad[i], strlen(bad[i]), NULL, &v, &err), SBX_E_INVAL, &err,
                  "infinity and NaN cannot be represented in JSON");
    const char *t = "x: 1e999\n";
    CHECK_ERR(sbx_yaml_parse(t, strlen(t), NULL, &v, &err), SBX_E_INVAL, &err,
              "number out of range '1e999'");
    t = "x: 9223372036854775808\n";
    CHECK_ERR(sbx_yaml_parse(t, strlen(t), NULL, &v, &err), SBX_E_INVAL, &err,
              "integer out of the 64-bit range");
    t = "x: 0x10000000000000000\n";
    CHECK_ERR(sbx_yaml_parse(t, strlen(t), NULL, &v, &err), SBX_E_INVAL, &err, "64-bit range");
    CHECK(v == NULL);
    v = parse_ok("x: -9223372036854775808\ny: .infinity\n");
    CHECK_EQ_INT(json_integer_value(json_object_get(v, "x")), INT64_MIN);
    CHECK_EQ_STR(json_string_value(json_object_get(v, "y")), ".infinity");
    json_decref(v);
}

static void test_keys(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *v = NULL;
    const char *t = "a: 1\nb: 2\na: 3\n";
    CHECK_ERR(sbx_yaml_parse(t, strlen(t), NULL, &v, &err), SBX_E_INVAL, &err,
              "yaml line 3 column 1: duplicate key 'a'");
    t = "outer:\n  x: 1\n  x: 2\n";
    CHECK_ERR(sbx_yaml_parse(t, strlen(t), NULL, &v, &err), SBX_E_INVAL, &err,
              "line 3 column 3: duplicate key 'x'");
    t = "{a: 1, 'a': 2}";
    CHECK_ERR(sbx_yaml_parse(t, strlen(t), NULL, &v, &err), SBX_E_INVAL, &err, "duplicate key");
    t = "? [a, b]\n: 1\n";
    CHECK_ERR(sbx_yaml_parse(t, strlen(t), NULL, &v, &err), SBX_E_INVAL, &err,
              "mapping key must be a scalar, not a sequence");
    t = "? {a: 1}\n: 1\n";
    CHECK_ERR(sbx_yaml_parse(t, strlen(t), NULL, &v, &err), SBX_E_INVAL, &err,
              "mapping key must be a scalar, not a mapping");
    t = "list: &l [1]\n*l : 2\n";
    CHECK_ERR(sbx_yaml_parse(t, strlen(t), NULL, &v, &err), SBX_E_INVAL, &err,
              "line 2 column 1: an alias used as a mapping key must name a string: 'l'");
    CHECK(v == NULL);
    /* an alias to a scalar is a fine key */
    v = parse_ok("k: &name real\n*name : 2\n");
    CHECK_EQ_INT(json_integer_value(json_object_get(v, "real")), 2);
    json_decref(v);
}

static void test_bad_documents(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *v = NULL;
    const char *t = "a: 1\n---\nb: 2\n";
    CHECK_ERR(sbx_yaml_parse(t, strlen(t), NULL, &v, &err), SBX_E_INVAL, &err,
              "line 2 column 1: more than one document");
    t = "a: [1, 2\nb: 3\n";
    CHECK_ERR(sbx_yaml_parse(t, strlen(t), NULL, &v, &err), SBX_E_PARSE, &err, "yaml line ");
    t = "a: b: c\n";
    CHECK_ERR(sbx_yaml_parse(t, strlen(t), NULL, &v, &err), SBX_E_PARSE, &err,
              "yaml line 1 column 5");
    t = "a: \"unterminated\n";
    CHECK_ERR(sbx_yaml_parse(t, strlen(t), NULL, &v, &err), SBX_E_PARSE, &err, "yaml line");
    t = "a: ok\nb: caf\xc3\n";
    CHECK_ERR(sbx_yaml_parse(t, strlen(t), NULL, &v, &err), SBX_E_INVAL, &err,
              "yaml line 2 column");
    CHECK_CONTAINS(err.msg, "UTF-8");
    t = "a: \xff\xfe\n";
    CHECK_ERR(sbx_yaml_parse(t, strlen(t), NULL, &v, &err), SBX_E_INVAL, &err, "UTF-8");
    char withnul[] = "a: x\0y\n";
    CHECK_ERR(sbx_yaml_parse(withnul, sizeof(withnul) - 1, NULL, &v, &err), SBX_E_INVAL, &err,
              NULL);
    t = "a: \"x\\0y\"\n";
    CHECK_ERR(sbx_yaml_parse(t, strlen(t), NULL, &v, &err), SBX_E_INVAL, &err,
              "string contains a NUL character");
    t = "\"k\\0\": 1\n";
    CHECK_ERR(sbx_yaml_parse(t, strlen(t), NULL, &v, &err), SBX_E_INVAL, &err, "NUL");
    CHECK(v == NULL);
}

static char *repeat(const char *unit, size_t times, const char *tail)
{
    struct sbx_buf b;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    for (size_t i = 0; i < times; i++)
        if (sbx_buf_adds(&b, unit, NULL) < 0)
            abort();
    if (sbx_buf_adds(&b, tail, NULL) < 0)
        abort();
    return sbx_buf_detach(&b, NULL);
}

static void test_depth(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *v = NULL;
    char *open = repeat("[", 10000, "");
    CHECK_ERR(sbx_yaml_parse(open, strlen(open), NULL, &v, &err), SBX_E_TOOBIG, &err,
              "yaml line 1 column 65: nesting exceeds the depth limit of 64");
    free(open);
    char *deep = repeat("[", 10000, "1");
    char *closed = repeat("]", 10000, "");
    struct sbx_buf both;
    sbx_buf_init(&both, SBX_BUF_NOLIMIT);
    CHECK_OK(sbx_buf_adds(&both, deep, &err), &err);
    CHECK_OK(sbx_buf_adds(&both, closed, &err), &err);
    CHECK_ERR(sbx_yaml_parse(both.data, both.len, NULL, &v, &err), SBX_E_TOOBIG, &err,
              "depth limit");
    /* the same through the document entry point, which sends '[' to the JSON parser */
    CHECK_ERR(sbx_doc_parse("deep.yaml", both.data, both.len, NULL, &v, &err), SBX_E_TOOBIG, &err,
              "'deep.yaml': json nesting exceeds the depth limit of 64");
    sbx_buf_release(&both);
    free(deep);
    free(closed);

    struct sbx_yaml_limits lim = {0, 3, 0};
    const char *t = "a:\n  b:\n    c: 1\n";
    CHECK_OK(sbx_yaml_parse(t, strlen(t), &lim, &v, &err), &err);
    json_decref(v);
    v = NULL;
    t = "a:\n  b:\n    c: [1]\n";
    CHECK_ERR(sbx_yaml_parse(t, strlen(t), &lim, &v, &err), SBX_E_TOOBIG, &err,
              "line 3 column 8: nesting exceeds the depth limit of 3");
    /* an alias counts at the depth where it is expanded */
    t = "a: &x [[1]]\nb: [*x]\n";
    CHECK_ERR(sbx_yaml_parse(t, strlen(t), &lim, &v, &err), SBX_E_TOOBIG, &err,
              "alias nests deeper than the depth limit of 3 'x'");
    CHECK(v == NULL);
}

static void test_aliases(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *v = parse_ok("base: &b {image: debian, env: {A: 1}}\n"
                         "one: *b\n"
                         "two: [*b, *b]\n"
                         "s: &s text\n"
                         "t: *s\n"
                         "r: &s again\n"
                         "u: *s\n");
    if (CHECK(json_is_object(v))) {
        json_t *base = json_object_get(v, "base"), *one = json_object_get(v, "one");
        CHECK(json_equal(base, one));
        CHECK(base != one); /* expanded copies, not shared nodes */
        CHECK(json_object_get(base, "env") != json_object_get(one, "env"));
        CHECK(json_equal(json_array_get(json_object_get(v, "two"), 1), base));
        CHECK_EQ_STR(json_string_value(json_object_get(v, "t")), "text");
        CHECK_EQ_STR(json_string_value(json_object_get(v, "u")), "again");
    }
    json_decref(v);
    v = NULL;
    const char *t = "a: *nowhere\n";
    CHECK_ERR(sbx_yaml_parse(t, strlen(t), NULL, &v, &err), SBX_E_PARSE, &err,
              "yaml line 1 column 4: alias to an unknown anchor 'nowhere'");
    /* an anchor is defined only once its node is complete: no cycles */
    t = "a: &loop [1, *loop]\n";
    CHECK_ERR(sbx_yaml_parse(t, strlen(t), NULL, &v, &err), SBX_E_PARSE, &err,
              "unknown anchor 'loop'");
    CHECK(v == NULL);
}

static void test_alias_bomb(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *v = NULL;
    /* nine levels of nine-fold aliases: 9^9 (387 million) strings once expanded */
    const char *bomb = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
                       "b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
                       "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
                       "d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
                       "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\n"
                       "f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
                       "g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]\n"
                       "h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]\n"
                       "i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]\n";
    CHECK_ERR(sbx_yaml_parse(bomb, strlen(bomb), NULL, &v, &err), SBX_E_TOOBIG, &err,
              "document expands to more than 1000000 nodes");
    CHECK_CONTAINS(err.msg, "yaml line 7");
    CHECK(v == NULL);

    struct sbx_yaml_limits lim = {0, 0, 5};
    const char *t = "[1, 2, 3, 4]";
    CHECK_OK(sbx_yaml_parse(t, strlen(t), &lim, &v, &err), &err);
    json_decref(v);
    v = NULL;
    t = "[1, 2, 3, 4, 5]";
    CHECK_ERR(sbx_yaml_parse(t, strlen(t), &lim, &v, &err), SBX_E_TOOBIG, &err,
              "more than 5 nodes");
}

static void test_size_limit(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *v = NULL;
    struct sbx_yaml_limits lim = {10, 0, 0};
    const char *t = "name: twelve";
    CHECK_ERR(sbx_yaml_parse(t, strlen(t), &lim, &v, &err), SBX_E_TOOBIG, &err,
              "yaml document of 12 bytes exceeds the limit of 10 bytes");
    CHECK_ERR(sbx_doc_parse("x.json", "{\"a\": 1234}", 11, &lim, &v, &err), SBX_E_TOOBIG, &err,
              "'x.json': json document of 11 bytes");
    CHECK(v == NULL);
}

static void test_doc_parse(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *v = NULL;
    /* by suffix: YAML syntax inside a .json file is a JSON error */
    const char *t = "a: 1\n";
    CHECK_ERR(sbx_doc_parse("agent.json", t, strlen(t), NULL, &v, &err), SBX_E_PARSE, &err,
              "'agent.json': json line 1");
    CHECK_OK(sbx_doc_parse("agent.yaml", t, strlen(t), NULL, &v, &err), &err);
    CHECK_EQ_INT(json_integer_value(json_object_get(v, "a")), 1);
    json_decref(v);
    /* by first byte */
    t = "\n  {\"a\": [1, 2]}";
    CHECK_OK(sbx_doc_parse("agent.yaml", t, strlen(t), NULL, &v, &err), &err);
    CHECK_EQ_INT(json_array_size(json_object_get(v, "a")), 2);
    json_decref(v);
    t = "{\"a\": 1, \"a\": 2}";
    CHECK_ERR(sbx_doc_parse("x", t, strlen(t), NULL, &v, &err), SBX_E_INVAL, &err, "'x': json");
    t = "a: 1\na: 2\n";
    CHECK_ERR(sbx_doc_parse("m.yml", t, strlen(t), NULL, &v, &err), SBX_E_INVAL, &err,
              "'m.yml': yaml line 2 column 1: duplicate key 'a'");
    CHECK_ERR(sbx_doc_parse(NULL, t, strlen(t), NULL, &v, &err), SBX_E_INVAL, &err, "yaml line 2");
    CHECK(strncmp(err.msg, "yaml", 4) == 0);
}

static void test_load_file(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char path[] = "/tmp/sbx-test-yaml-XXXXXX";
    int fd = mkstemp(path);
    if (!CHECK(fd >= 0))
        return;
    const char *t = "model: replay:x\nmax_turns: 5\n";
    CHECK(write(fd, t, strlen(t)) == (ssize_t)strlen(t));
    close(fd);
    json_t *v = NULL;
    CHECK_OK(sbx_doc_load_file(path, NULL, &v, &err), &err);
    CHECK_EQ_INT(json_integer_value(json_object_get(v, "max_turns")), 5);
    json_decref(v);
    v = NULL;
    struct sbx_yaml_limits lim = {8, 0, 0};
    CHECK_ERR(sbx_doc_load_file(path, &lim, &v, &err), SBX_E_TOOBIG, &err, "limit of 8 bytes");
    CHECK_CONTAINS(err.msg, path);
    unlink(path);
    CHECK_ERR(sbx_doc_load_file(path, NULL, &v, &err), SBX_E_NOTFOUND, &err, path);
    CHECK(v == NULL);
}

int main(void)
{
    TAP_START();
    TAP_RUN(test_core_schema_scalars);
    TAP_RUN(test_structure);
    TAP_RUN(test_tags);
    TAP_RUN(test_numbers_json_cannot_hold);
    TAP_RUN(test_keys);
    TAP_RUN(test_bad_documents);
    TAP_RUN(test_depth);
    TAP_RUN(test_aliases);
    TAP_RUN(test_alias_bomb);
    TAP_RUN(test_size_limit);
    TAP_RUN(test_doc_parse);
    TAP_RUN(test_load_file);
    return TAP_DONE();
}
