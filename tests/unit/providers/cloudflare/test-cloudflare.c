/* The cloudflare provider without a worker (the worker's side is tests/hosted/cloudflare/): the
 * ids the bridge accepts, the worker's errors as sbx says them (never the key), the declared
 * options and the client's checks of them, and the provider's checks of a session state. */
#include <stdlib.h>
#include <string.h>

#include "providers/cloudflare/cloudflare.h"
#include "sbx/json.h"
#include "sbx/provider.h"
#include "sbx/session.h"
#include "tap.h"

static void test_ids(void)
{
    CHECK(sbx__cf_valid_id("fajhef4shrfbrg267jdrfhzks4"));
    CHECK(sbx__cf_valid_id("a"));
    CHECK(!sbx__cf_valid_id(""));
    CHECK(!sbx__cf_valid_id(NULL));
    CHECK(!sbx__cf_valid_id("Abc"));  /* upper case */
    CHECK(!sbx__cf_valid_id("abc1")); /* not base32: 0, 1, 8, 9 */
    CHECK(!sbx__cf_valid_id("abc8"));
    CHECK(!sbx__cf_valid_id("../etc"));
    char long_id[SBX__CF_ID_MAX + 2];
    memset(long_id, 'a', sizeof(long_id) - 1);
    long_id[sizeof(long_id) - 1] = '\0';
    CHECK(!sbx__cf_valid_id(long_id));
    long_id[SBX__CF_ID_MAX] = '\0';
    CHECK(sbx__cf_valid_id(long_id));
}

/* A conf as the client makes it, over an endpoint nothing is sent to. */
static struct sbx__cf_conf *conf(int has_key)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__cf_conf *c = sbx_xcalloc(1, sizeof(*c));
    c->refs = 1;
    c->url = sbx_xstrdup("http://127.0.0.1:9");
    c->key_what = sbx_xstrdup("$CLOUDFLARE_SANDBOX_API_KEY");
    c->has_key = has_key;
    struct sbx__endpoint_opts eo = {.url = c->url, .name = "the Cloudflare Sandbox Bridge"};
    CHECK_OK(sbx__endpoint_new(&eo, &c->ep, &err), &err);
    return c;
}

static void test_errors(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__cf_conf *c = conf(1);
    const char *unauth = "{\"error\":\"Unauthorized\",\"code\":\"unauthorized\"}";
    CHECK_ERR(sbx__cf_status_error(c, 401, unauth, strlen(unauth), "POST /v1/sandbox", &err),
              SBX_E_PERM, &err, "refused the key from $CLOUDFLARE_SANDBOX_API_KEY (HTTP 401)");
    CHECK_CONTAINS(err.msg, "Unauthorized");
    const char *limited = "{\"error\":\"slow down\",\"code\":\"rate_limited\"}";
    CHECK_ERR(sbx__cf_status_error(c, 429, limited, strlen(limited), NULL, &err), SBX_E_API, &err,
              "is rate limiting (HTTP 429, retries exhausted): slow down");
    const char *full = "{\"error\":\"instance limit reached\",\"code\":\"capacity_exceeded\"}";
    CHECK_ERR(sbx__cf_status_error(c, 503, full, strlen(full), NULL, &err), SBX_E_API, &err,
              "has no container free (HTTP 503, retries exhausted): instance limit reached");
    const char *esc = "{\"error\":\"path must resolve to a location within /workspace\"}";
    CHECK_ERR(sbx__cf_status_error(c, 403, esc, strlen(esc), NULL, &err), SBX_E_PERM, &err,
              "within /workspace");
    CHECK(!strstr(err.msg, "key")); /* the bridge's 403 is a path out of /workspace */
    const char *big = "{\"error\":\"payload too large\",\"code\":\"payload_too_large\"}";
    CHECK_ERR(sbx__cf_status_error(c, 413, big, strlen(big), "PUT", &err), SBX_E_TOOBIG, &err,
              "payload too large");
    /* A worker's text is cleaned: no control characters reach a message. */
    const char *odd = "{\"error\":\"bad\\u001b[2Jthing\"}";
    CHECK_ERR(sbx__cf_status_error(c, 502, odd, strlen(odd), NULL, &err), SBX_E_API, &err, NULL);
    CHECK(!strchr(err.msg, '\x1b'));
    sbx__cf_conf_unref(c);
    c = conf(0);
    CHECK_ERR(sbx__cf_status_error(c, 401, unauth, strlen(unauth), NULL, &err), SBX_E_PERM, &err,
              "wants a key and none was given ($CLOUDFLARE_SANDBOX_API_KEY is not set)");
    sbx__cf_conf_unref(c);
}

static void test_options(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_client *c = NULL;
    unsetenv("CLOUDFLARE_SANDBOX_WORKER_URL");
    json_t *none = json_object();
    CHECK_ERR(sbx_client_new_json("cloudflare", none, &c, &err), SBX_E_INVAL, &err,
              "no Sandbox Bridge worker");
    json_decref(none);
    json_t *ftp = json_pack("{s:s}", "worker_url", "ftp://x");
    CHECK_ERR(sbx_client_new_json("cloudflare", ftp, &c, &err), SBX_E_INVAL, &err,
              "not an http(s) URL");
    json_decref(ftp);
    /* The key's variable unset: a worker without a key is reached without one. */
    unsetenv("SBX_TEST_CF_KEY");
    json_t *ok = json_pack("{s:s,s:{s:s},s:[i]}", "worker_url", "http://127.0.0.1:9/", "api_key",
                           "env", "SBX_TEST_CF_KEY", "exposed_ports", 8080);
    CHECK_OK(sbx_client_new_json("cloudflare", ok, &c, &err), &err);
    sbx_client_free(c);
    c = NULL;
    json_decref(ok);
    /* The key only ever as a reference; the worker and the key are trusted configuration. */
    json_t *lit = json_pack("{s:s}", "api_key", "cfsb_literal");
    CHECK_ERR(sbx_provider_options_check("cloudflare", lit, NULL, &err), SBX_E_INVAL, &err,
              "api_key");
    CHECK(!strstr(err.msg, "cfsb_literal"));
    json_decref(lit);
    struct sbx_provider_info info;
    CHECK_OK(sbx_provider_find("cloudflare", &info, &err), &err);
    CHECK(info.traits & SBX_PROVIDER_SNAPSHOTS);
    CHECK(info.traits & SBX_PROVIDER_PORTS);
    CHECK(!(info.traits & SBX_PROVIDER_PTY));
    CHECK(!(info.traits & SBX_PROVIDER_LISTS));
    int dummy = 0;
    CHECK_ERR(sbx_client_new("cloudflare", &dummy, &c, &err), SBX_E_INVAL, &err, "as JSON");
}

static void test_state(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *st = NULL;
    const char *good = "{\"version\": 1, \"provider\": \"cloudflare\", \"id\": \"abc234xyz\", "
                       "\"created\": \"2026-01-01T00:00:00Z\", \"root\": \"/workspace\", "
                       "\"workspace_owned\": true, \"options\": {}, \"exposed_ports\": [], "
                       "\"snapshot\": null, \"manifest\": null}";
    CHECK_OK(sbx_session_state_parse(good, strlen(good), &st, &err), &err);
    json_decref(st);
    st = NULL;
    char *bad = sbx_xstrdup(good);
    memcpy(strstr(bad, "abc234xyz"), "ABC/../xz", 9);
    CHECK_ERR(sbx_session_state_parse(bad, strlen(bad), &st, &err), SBX_E_INVAL, &err,
              "not a cloudflare sandbox id");
    free(bad);
    bad = sbx_xstrdup(good);
    memcpy(strstr(bad, "/workspace"), "/home/user", 10);
    CHECK_ERR(sbx_session_state_parse(bad, strlen(bad), &st, &err), SBX_E_INVAL, &err,
              "/workspace");
    free(bad);
}

int main(void)
{
    TAP_START();
    test_ids();
    test_errors();
    test_options();
    test_state();
    return TAP_DONE();
}
