/* The e2b provider without a service (the service's side is tests/hosted/e2b/): Go's signal
 * names of envd's end events, URL escaping, the declared options' rules, and the provider's
 * checks of a session state. */
#include <stdlib.h>
#include <string.h>

#include "providers/e2b/e2b.h"
#include "providers/e2b/options.h"
#include "sbx/json.h"
#include "sbx/provider.h"
#include "sbx/session.h"
#include "tap.h"

static void test_signals(void)
{
    CHECK_EQ_INT(sbx__e2b_signal_number("killed"), 9);
    CHECK_EQ_INT(sbx__e2b_signal_number("terminated"), 15);
    CHECK_EQ_INT(sbx__e2b_signal_number("user defined signal 1"), 10);
    CHECK_EQ_INT(sbx__e2b_signal_number("hangup"), 1);
    CHECK_EQ_INT(sbx__e2b_signal_number("signal 34"), 34);
    CHECK_EQ_INT(sbx__e2b_signal_number("stopped"), 0);
}

static void test_escape(void)
{
    char *e = sbx__e2b_escape("/home/user/a b&c?d=%e~.txt");
    CHECK_EQ_STR(e, "/home/user/a%20b%26c%3Fd%3D%25e~.txt");
    free(e);
    e = sbx__e2b_escape("\xc3\xa9");
    CHECK_EQ_STR(e, "%C3%A9");
    free(e);
}

static int parse(const char *text, struct sbx__e2b_opts *o, struct sbx_error *err)
{
    json_t *j = json_loads(text, 0, NULL);
    int rc = sbx__e2b_options_parse(j, o, err);
    if (rc == 0) {
        /* The borrowed strings die with j: keep only what the checks below read. */
        o->template = o->template ? "set" : NULL;
        o->root = o->root ? "set" : NULL;
        o->key_ref = NULL;
        o->api_url = o->sandbox_url = o->domain = o->ca_file = NULL;
    }
    json_decref(j);
    return rc;
}

static void test_options(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__e2b_opts o;
    CHECK_OK(parse("{}", &o, &err), &err);
    CHECK(o.secure && o.internet && o.auto_pause);
    CHECK_EQ_INT(o.timeout_s, 0);
    CHECK_EQ_INT(json_object_size(o.envs), 0);
    sbx__e2b_opts_release(&o);
    CHECK_OK(parse("{\"envs\": [\"A=1\", \"B=x=y\"], \"metadata\": [\"team=ml\"], \"on_timeout\": "
                   "\"kill\", \"secure\": false, \"exposed_ports\": [8080, 3000]}",
                   &o, &err),
             &err);
    CHECK_EQ_STR(json_string_value(json_object_get(o.envs, "B")), "x=y");
    CHECK_EQ_STR(json_string_value(json_object_get(o.metadata, "team")), "ml");
    CHECK(!o.auto_pause && !o.secure);
    CHECK_EQ_INT(o.n_ports, 2);
    CHECK_EQ_INT(o.ports[1], 3000);
    sbx__e2b_opts_release(&o);
    CHECK_ERR(parse("{\"envs\": [\"noequals\"]}", &o, &err), SBX_E_INVAL, &err,
              "envs wants KEY=VALUE, not 'noequals'");
    CHECK_ERR(parse("{\"metadata\": [\"=v\"]}", &o, &err), SBX_E_INVAL, &err, "metadata");
    CHECK_ERR(parse("{\"workspace_root\": \"rel\"}", &o, &err), SBX_E_INVAL, &err, "not absolute");
    CHECK_ERR(parse("{\"api_url\": \"ftp://x\"}", &o, &err), SBX_E_INVAL, &err,
              "not an http(s) URL");
    CHECK_ERR(parse("{\"on_timeout\": \"sleep\"}", &o, &err), SBX_E_INVAL, &err, "pause or kill");
    /* Through the registry: types, and the key only ever as a reference. */
    json_t *bad = json_pack("{s:s}", "api_key", "e2b_literal");
    CHECK_ERR(sbx_provider_options_check("e2b", bad, NULL, &err), SBX_E_INVAL, &err, "api_key");
    CHECK(!strstr(err.msg, "e2b_literal"));
    json_decref(bad);
    json_t *good = json_pack("{s:{s:s},s:i}", "api_key", "env", "MY_KEY", "timeout", 60);
    CHECK_OK(sbx_provider_options_check("e2b", good, NULL, &err), &err);
    json_decref(good);
    json_t *big = json_pack("{s:i}", "timeout", 90000);
    CHECK_ERR(sbx_provider_options_check("e2b", big, NULL, &err), SBX_E_INVAL, &err, "timeout");
    json_decref(big);
}

static void test_typed_constructor(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_client *c = NULL;
    int dummy = 0;
    CHECK_ERR(sbx_client_new("e2b", &dummy, &c, &err), SBX_E_INVAL, &err, "as JSON");
    CHECK_OK(sbx_client_new("e2b", NULL, &c, &err), &err);
    sbx_client_free(c);
}

static void test_state(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *st = NULL;
    const char *good = "{\"version\": 1, \"provider\": \"e2b\", \"id\": \"abc123xyz\", "
                       "\"created\": \"2026-01-01T00:00:00Z\", \"root\": \"/home/user\", "
                       "\"workspace_owned\": true, \"options\": {}, \"exposed_ports\": [], "
                       "\"snapshot\": null, \"manifest\": null, \"domain\": null}";
    CHECK_OK(sbx_session_state_parse(good, strlen(good), &st, &err), &err);
    json_decref(st);
    st = NULL;
    char *bad = sbx_xstrdup(good);
    memcpy(strstr(bad, "abc123xyz"), "ABC/../xz", 9);
    CHECK_ERR(sbx_session_state_parse(bad, strlen(bad), &st, &err), SBX_E_INVAL, &err,
              "not an e2b sandbox id");
    free(bad);
    bad = sbx_xstrdup(good);
    memcpy(strstr(bad, "/home/user"), "home/user/", 10);
    CHECK_ERR(sbx_session_state_parse(bad, strlen(bad), &st, &err), SBX_E_INVAL, &err, "root");
    free(bad);
}

int main(void)
{
    TAP_START();
    test_signals();
    test_escape();
    test_options();
    test_typed_constructor();
    test_state();
    return TAP_DONE();
}
