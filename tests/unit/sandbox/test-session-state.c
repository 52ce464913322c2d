/* Session state documents: serialize, parse, and the strict checks a saved state goes through. */
#include <stdlib.h>
#include <string.h>

#include "tap.h"
#include "sbx/json.h"
#include "sbx/session.h"

#define REF "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

/* A state as the local provider writes it. */
static json_t *good_state(void)
{
    json_error_t je;
    json_t *st = json_loads(
            "{\"version\": 1, \"provider\": \"local\", \"id\": \"0123456789abcdef\","
            " \"workspace\": \"/tmp/ws/0123456789abcdef\", \"root\": \"/workspace\","
            " \"created\": \"2026-12-01T23:26:34.123Z\", \"isolation\": \"namespaces\","
            " \"network\": \"none\", \"workspace_owned\": true, \"manifest_digest\": null,"
            " \"disk\": {\"limit\": 8589934592, \"enforced\": false, \"reason\": \"x\"},"
            " \"limits\": {\"memory\": 1024}, \"unenforced\": [],"
            " \"options\": {\"isolation\": \"namespaces\", \"network\": \"none\","
            "   \"limits\": {\"memory\": 268435456, \"cpu_millis\": \"none\"}, \"disk\": null,"
            "   \"grants\": [{\"src\": \"/data\", \"writable\": false, \"dangerous\": false}]},"
            " \"exposed_ports\": [8000],"
            " \"manifest\": {\"version\": 1, \"root\": \"/workspace\", \"entries\":"
            "   {\"a.txt\": {\"type\": \"file\", \"content\": \"hi\"}},"
            "   \"environment\": {\"KEY\": {\"type\": \"secret\", \"env\": \"OPENAI_API_KEY\"}}},"
            " \"snapshot\": \"" REF "\"}",
            0, &je);
    if (!st)
        printf("# good_state: %s\n", je.text);
    return st;
}

static int parse_text(const char *text, json_t **out, struct sbx_error *err)
{
    return sbx_session_state_parse(text, strlen(text), out, err);
}

/* The good state with key set to the JSON value (NULL: removed), parsed from its text. */
static int parse_with(const char *key, const char *value, struct sbx_error *err)
{
    json_t *st = good_state(), *out = NULL;
    if (value)
        json_object_set_new(st, key, json_loads(value, JSON_DECODE_ANY, NULL));
    else
        json_object_del(st, key);
    char *text = json_dumps(st, 0);
    int rc = parse_text(text, &out, err);
    json_decref(out);
    json_decref(st);
    free(text);
    return rc;
}

static int parse_option(const char *key, const char *value, struct sbx_error *err)
{
    json_t *st = good_state(), *out = NULL;
    json_object_set_new(json_object_get(st, "options"), key,
                        json_loads(value, JSON_DECODE_ANY, NULL));
    char *text = json_dumps(st, 0);
    int rc = parse_text(text, &out, err);
    json_decref(out);
    json_decref(st);
    free(text);
    return rc;
}

static void test_round_trip(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *st = good_state(), *back = NULL;
    char *text = NULL;
    CHECK(st != NULL);
    CHECK_OK(sbx_session_state_serialize(st, &text, &err), &err);
    CHECK(text && text[strlen(text) - 1] == '\n');
    CHECK_OK(sbx_session_state_parse(text, strlen(text), &back, &err), &err);
    CHECK(back && json_equal(st, back));
    /* A reference to a harness credential stays a reference. */
    CHECK_CONTAINS(text, "\"env\": \"OPENAI_API_KEY\"");
    json_decref(back);
    json_decref(st);
    free(text);
}

static void test_bad_text(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *out = NULL, *st = good_state();
    char *text = json_dumps(st, 0);
    /* Truncated: every cut of a valid document is refused, none is half-read. */
    int all = 1;
    for (size_t n = 0; n < strlen(text); n += 7) {
        if (sbx_session_state_parse(text, n, &out, &err) == 0) {
            all = 0;
            json_decref(out);
            out = NULL;
        }
    }
    CHECK(all);
    CHECK_ERR(sbx_session_state_parse(text, strlen(text) - 1, &out, &err), SBX_E_PARSE, &err,
              "session state");
    CHECK_ERR(sbx_session_state_parse("", 0, &out, &err), SBX_E_PARSE, &err, "empty");
    CHECK_ERR(parse_text("{\"version\": 1,, }", &out, &err), SBX_E_PARSE, &err, NULL);
    CHECK_ERR(parse_text("[1, 2]", &out, &err), SBX_E_INVAL, &err, "must be a JSON object");
    CHECK_ERR(parse_text("\x01\x02garbage", &out, &err), SBX_E_PARSE, &err, NULL);
    CHECK(out == NULL);
    json_decref(st);
    free(text);
}

static void test_version(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    CHECK_ERR(parse_with("version", "2", &err), SBX_E_UNSUPPORTED, &err, "version 2");
    CHECK_ERR(parse_with("version", "\"1\"", &err), SBX_E_INVAL, &err, "'version'");
    CHECK_ERR(parse_with("version", NULL, &err), SBX_E_INVAL, &err, "'version'");
}

static void test_fields(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    CHECK_ERR(parse_with("provider", "\"docker9\"", &err), SBX_E_INVAL, &err, "docker9");
    CHECK_ERR(parse_with("id", "\"../../etc\"", &err), SBX_E_INVAL, &err, "'id'");
    CHECK_ERR(parse_with("id", "\"abc\"", &err), SBX_E_INVAL, &err, "'id'");
    CHECK_ERR(parse_with("created", "12", &err), SBX_E_INVAL, &err, "'created'");
    CHECK_ERR(parse_with("created", "\"yesterday\"", &err), SBX_E_INVAL, &err, "'created'");
    CHECK_ERR(parse_with("snapshot", "\"sha256:xyz\"", &err), SBX_E_INVAL, &err, "'snapshot'");
    CHECK_ERR(parse_with("snapshot", NULL, &err), SBX_E_INVAL, &err, "'snapshot'");
    CHECK_OK(parse_with("snapshot", "null", &err), &err);
    CHECK_ERR(parse_with("exposed_ports", "[0]", &err), SBX_E_INVAL, &err, "'exposed_ports'");
    CHECK_ERR(parse_with("exposed_ports", "{}", &err), SBX_E_INVAL, &err, "'exposed_ports'");
    CHECK_ERR(parse_with("workspace_owned", "\"yes\"", &err), SBX_E_INVAL, &err,
              "'workspace_owned'");
    CHECK_ERR(parse_with("root", "\"relative\"", &err), SBX_E_INVAL, &err, "'root'");
    CHECK_ERR(parse_with("isolation", "\"chroot\"", &err), SBX_E_INVAL, &err, "chroot");
    CHECK_ERR(parse_with("surprise", "1", &err), SBX_E_INVAL, &err, "surprise");
    CHECK_ERR(parse_with("manifest_digest", "\"md5:1\"", &err), SBX_E_INVAL, &err,
              "'manifest_digest'");
    CHECK_ERR(parse_with("options", NULL, &err), SBX_E_INVAL, &err, "'options'");
    CHECK_ERR(parse_with("manifest", NULL, &err), SBX_E_INVAL, &err, "'manifest'");
    CHECK_OK(parse_with("manifest", "null", &err), &err);
    CHECK_ERR(parse_with("manifest", "{\"entries\": {\"../x\": {\"type\": \"file\"}}}", &err),
              SBX_E_INVAL, &err, "field 'manifest'");
    CHECK_ERR(parse_with("manifest", "[]", &err), SBX_E_INVAL, &err, "'manifest'");
}

static void test_options(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    CHECK_ERR(parse_option("isolation", "\"off\"", &err), SBX_E_INVAL, &err, "'options'");
    CHECK_ERR(parse_option("network", "3", &err), SBX_E_INVAL, &err, "'network'");
    CHECK_ERR(parse_option("limits", "{\"memory\": -5}", &err), SBX_E_INVAL, &err, "'memory'");
    CHECK_ERR(parse_option("limits", "{\"swap\": 1}", &err), SBX_E_INVAL, &err, "swap");
    CHECK_ERR(parse_option("disk", "\"big\"", &err), SBX_E_INVAL, &err, "'disk'");
    CHECK_ERR(parse_option("grants", "[{\"src\": \"data\"}]", &err), SBX_E_INVAL, &err, "'src'");
    CHECK_ERR(parse_option("grants", "[{\"src\": \"/d\", \"how\": 1}]", &err), SBX_E_INVAL, &err,
              "how");
    CHECK_ERR(parse_option("allow_ports", "[70000]", &err), SBX_E_INVAL, &err, "'allow_ports'");
    CHECK_ERR(parse_option("allow_domains", "[\"\"]", &err), SBX_E_INVAL, &err, "'allow_domains'");
    CHECK_ERR(parse_option("extra", "true", &err), SBX_E_INVAL, &err, "extra");
}

static void test_serialize_checks(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *st = good_state();
    char *text = NULL;
    json_object_set_new(st, "version", json_integer(7));
    CHECK_ERR(sbx_session_state_serialize(st, &text, &err), SBX_E_UNSUPPORTED, &err, "version");
    CHECK(text == NULL);
    json_decref(st);
}

static void test_too_big(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *out = NULL;
    size_t n = SBX_SESSION_STATE_MAX + 1;
    char *big = malloc(n);
    memset(big, ' ', n);
    big[0] = '{';
    big[n - 1] = '}';
    CHECK_ERR(sbx_session_state_parse(big, n, &out, &err), SBX_E_TOOBIG, &err, "bytes");
    free(big);
}

int main(void)
{
    TAP_START();
    TAP_RUN(test_round_trip);
    TAP_RUN(test_bad_text);
    TAP_RUN(test_version);
    TAP_RUN(test_fields);
    TAP_RUN(test_options);
    TAP_RUN(test_serialize_checks);
    TAP_RUN(test_too_big);
    return TAP_DONE();
}
