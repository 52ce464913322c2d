/* The LXD provider without a server (the cluster tests are tests/lxd/): endpoints and the
 * certificates they need, the answers' envelope and its errors, ids, the declared options'
 * own rules, the provider's part of a session state, a server that is not there. */
#include <stdlib.h>
#include <string.h>

#include "providers/lxd/lxd.h"
#include "sbx/json.h"
#include "sbx/lxd.h"
#include "sbx/provider.h"
#include "sbx/session.h"
#include "tap.h"

static void test_endpoints(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__lxd_server sv;
    struct sbx_lxd_options o = {.endpoint = "/run/lxd/unix.socket"};
    CHECK_OK(sbx__lxd_server_init(&sv, &o, &err), &err);
    CHECK_EQ_STR(sv.sock, "/run/lxd/unix.socket");
    CHECK_EQ_STR(sv.url, "unix:///run/lxd/unix.socket");
    CHECK_EQ_STR(sv.project, "default");
    CHECK_EQ_INT(sv.timeout_ms, SBX__LXD_DEFAULT_MS);
    sbx__lxd_server_release(&sv);

    o = (struct sbx_lxd_options){.endpoint = "unix:///x/s", .project = "p-1"};
    CHECK_OK(sbx__lxd_server_init(&sv, &o, &err), &err);
    CHECK_EQ_STR(sv.sock, "/x/s");
    CHECK_EQ_STR(sv.project, "p-1");
    sbx__lxd_server_release(&sv);

    /* https: the port defaults to 8443; the certificates and a way to know the server */
    o = (struct sbx_lxd_options){.endpoint = "https://10.0.0.1/",
                                 .client_cert = "/c.crt",
                                 .client_key = "/c.key",
                                 .server_pubkey = "sha256//abc="};
    CHECK_OK(sbx__lxd_server_init(&sv, &o, &err), &err);
    CHECK_EQ_STR(sv.url, "https://10.0.0.1:8443");
    CHECK_EQ_STR(sbx__endpoint_host(sv.ep), "10.0.0.1:8443");
    CHECK(sv.sock == NULL);
    sbx__lxd_server_release(&sv);
    o.endpoint = "https://[fd00::1]:9443";
    CHECK_OK(sbx__lxd_server_init(&sv, &o, &err), &err);
    CHECK_EQ_STR(sv.url, "https://[fd00::1]:9443");
    sbx__lxd_server_release(&sv);

    o = (struct sbx_lxd_options){.endpoint = "https://h"};
    CHECK_ERR(sbx__lxd_server_init(&sv, &o, &err), SBX_E_INVAL, &err, "client certificate");
    o.client_cert = "/c.crt";
    o.client_key = "/c.key";
    CHECK_ERR(sbx__lxd_server_init(&sv, &o, &err), SBX_E_INVAL, &err, "never trusts a server");
    o.server_pubkey = "abc";
    CHECK_ERR(sbx__lxd_server_init(&sv, &o, &err), SBX_E_INVAL, &err, "sha256//");
    o.server_pubkey = NULL;
    o.server_cert = "relative.crt";
    CHECK_ERR(sbx__lxd_server_init(&sv, &o, &err), SBX_E_INVAL, &err, "absolute");
    const char *bad[] = {"http://h:8443", "tcp://h",     "relative/sock",  "https://h/1.0",
                         "https://h:0",   "https://h:x", "https://user@h", "https://h?x"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        o = (struct sbx_lxd_options){
                .endpoint = bad[i], .client_cert = "/c", .client_key = "/k", .server_cert = "/s"};
        int rc = sbx__lxd_server_init(&sv, &o, &err);
        CHECK(rc == -SBX_E_INVAL || rc == -SBX_E_UNSUPPORTED);
    }
    o = (struct sbx_lxd_options){.endpoint = "/s", .project = "a b"};
    CHECK_ERR(sbx__lxd_server_init(&sv, &o, &err), SBX_E_INVAL, &err, "project");
    /* certificates with a socket are not used */
    o = (struct sbx_lxd_options){.endpoint = "/s", .client_cert = "/c", .client_key = "/k"};
    CHECK_OK(sbx__lxd_server_init(&sv, &o, &err), &err);
    CHECK(sv.client_cert == NULL);
    sbx__lxd_server_release(&sv);
}

static void test_escape_and_ids(void)
{
    char *e = sbx__lxd_escape("/a b/ü?&=%", 1);
    CHECK_EQ_STR(e, "/a%20b/%C3%BC%3F%26%3D%25");
    free(e);
    e = sbx__lxd_escape("a/b", 0);
    CHECK_EQ_STR(e, "a%2Fb");
    free(e);
    e = sbx__lxd_inst_path("sbx-0123456789abcdef", "/exec");
    CHECK_EQ_STR(e, "/1.0/instances/sbx-0123456789abcdef/exec");
    free(e);
    CHECK(sbx__lxd_valid_id("0123456789abcdef", 0));
    CHECK(sbx__lxd_valid_id("0123", 1));
    CHECK(!sbx__lxd_valid_id("0123", 0));
    CHECK(!sbx__lxd_valid_id("0123456789ABCDEF", 0));
    CHECK(!sbx__lxd_valid_id("0123456789abcdef0", 1));
    CHECK(!sbx__lxd_valid_id("../etc", 1));
}

/* An answer as the server would send it. */
static int envelope(long status, const char *body, json_t **md, char **op, struct sbx_error *err)
{
    struct sbx__lxd_server sv = {.url = "unix:///s"};
    struct sbx_buf b;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    if (sbx_buf_add(&b, body, strlen(body), err) < 0)
        return -1;
    int rc = sbx__lxd_envelope(&sv, status, &b, md, op, err);
    sbx_buf_release(&b);
    return rc;
}

static void test_envelope(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *md = NULL;
    char *op = NULL;
    CHECK_OK(envelope(200, "{\"type\":\"sync\",\"metadata\":{\"a\":1}}", &md, &op, &err), &err);
    CHECK_EQ_INT(json_integer_value(json_object_get(md, "a")), 1);
    CHECK(op == NULL);
    json_decref(md);
    CHECK_OK(envelope(202,
                      "{\"type\":\"async\",\"operation\":\"/1.0/operations/"
                      "a520523e-176c-4738-a3c5-5028a7df22cb?project=p\",\"metadata\":{}}",
                      &md, &op, &err),
             &err);
    CHECK_EQ_STR(op, "a520523e-176c-4738-a3c5-5028a7df22cb");
    free(op);
    json_decref(md);
    CHECK_ERR(envelope(202, "{\"type\":\"async\",\"operation\":\"/1.0/operations/../x\"}", &md, &op,
                       &err),
              SBX_E_PARSE, &err, "without an id");
    CHECK_ERR(envelope(404,
                       "{\"type\":\"error\",\"error\":\"Instance not found\","
                       "\"error_code\":404}",
                       &md, &op, &err),
              SBX_E_NOTFOUND, &err, "says: Instance not found");
    CHECK_ERR(envelope(200, "{\"type\":\"error\",\"error\":\"not authorized\",\"error_code\":403}",
                       &md, &op, &err),
              SBX_E_PERM, &err, "lxc config trust add");
    /* the server's text cannot move a terminal's cursor */
    CHECK_ERR(
            envelope(500, "{\"type\":\"error\",\"error\":\"bad\\u001b[2Jthing\"}", &md, &op, &err),
            SBX_E_SANDBOX, &err, "bad?[2Jthing");
    CHECK_ERR(envelope(409, "{\"type\":\"error\",\"error\":\"exists\",\"error_code\":409}", &md,
                       &op, &err),
              SBX_E_EXISTS, &err, NULL);
    CHECK_ERR(envelope(200, "{\"type\":\"weird\"}", &md, &op, &err), SBX_E_PARSE, &err,
              "no known type");
    CHECK_ERR(envelope(200, "", &md, &op, &err), SBX_E_PARSE, &err, "empty");
    CHECK_ERR(envelope(200, "{\"type\":", &md, &op, &err), SBX_E_PARSE, &err, NULL);
    CHECK_ERR(envelope(502, "<html>proxy</html>", &md, &op, &err), SBX_E_SANDBOX, &err,
              "HTTP status 502");
}

static void test_options(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_client *c = NULL;
    json_t *o = json_pack("{s:s,s:s}", "endpoint", "/s", "network", "full");
    CHECK_ERR(sbx_client_new_json("lxd", o, &c, &err), SBX_E_INVAL, &err,
              "unknown lxd network mode 'full' (none, profile)");
    json_decref(o);
    o = json_pack("{s:s,s:[s]}", "endpoint", "/s", "profile", "a/b");
    CHECK_ERR(sbx_client_new_json("lxd", o, &c, &err), SBX_E_INVAL, &err, "profile name");
    json_decref(o);
    o = json_pack("{s:s,s:s}", "endpoint", "/s", "port_bind", "example.org");
    CHECK_ERR(sbx_client_new_json("lxd", o, &c, &err), SBX_E_INVAL, &err, "not an IP address");
    json_decref(o);
    o = json_pack("{s:s,s:s}", "endpoint", "https://h", "server_pubkey", "sha256//x=");
    CHECK_ERR(sbx_client_new_json("lxd", o, &c, &err), SBX_E_INVAL, &err, "client certificate");
    json_decref(o);
    o = json_pack("{s:s,s:s,s:b,s:s}", "endpoint", "/nonexistent/unix.socket", "image", "img",
                  "privileged", 1, "cpus", "1.5");
    CHECK_OK(sbx_client_new_json("lxd", o, &c, &err), &err);
    json_decref(o);
    /* a server that is not there says where sbx looked */
    struct sbx_session *s = NULL;
    struct sbx_create_spec spec = {0};
    CHECK_ERR(sbx_client_create(c, &spec, &s, &err), SBX_E_HTTP, &err,
              "cannot reach LXD at 'unix:///nonexistent/unix.socket'");
    CHECK_ERR(sbx_client_attach(c, "0123456789abcdef", &s, &err), SBX_E_HTTP, &err,
              "the socket does not exist");
    CHECK_ERR(sbx_client_attach(c, "../x", &s, &err), SBX_E_INVAL, &err, "not a sandbox id");
    struct sbx_create_spec ws = {.workspace = "/tmp"};
    CHECK_ERR(sbx_client_create(c, &ws, &s, &err), SBX_E_UNSUPPORTED, &err, "inside its instance");
    sbx_client_free(c);
    /* the provider's warnings are declared with the options */
    struct sbx_provider_info p;
    CHECK_OK(sbx_provider_find("lxd", &p, &err), &err);
    const struct sbx_provider_option *priv = sbx_provider_option(&p, "privileged");
    CHECK(priv && priv->danger && strcmp(priv->danger, "true") == 0);
    CHECK(priv && priv->warning && strstr(priv->warning, "root on the member host"));
    CHECK(p.traits & SBX_PROVIDER_NATIVE_SNAPSHOTS);
    CHECK(!(p.traits & SBX_PROVIDER_MOUNTS));
}

static void test_state(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *st = NULL;
    const char *good = "{\"version\":1,\"provider\":\"lxd\",\"id\":\"0123456789abcdef\","
                       "\"created\":\"2026-12-03T00:00:00.000Z\",\"root\":\"/workspace\","
                       "\"instance\":\"sbx-0123456789abcdef\",\"project\":\"p\","
                       "\"endpoint\":\"unix:///s\",\"options\":{},\"exposed_ports\":[],"
                       "\"manifest\":null,\"snapshot\":null,\"workspace_owned\":true}";
    CHECK_OK(sbx_session_state_parse(good, strlen(good), &st, &err), &err);
    json_decref(st);
    char *bad = sbx_xstrdup(good);
    memcpy(strstr(bad, "sbx-0123"), "sbx-9123", 8);
    CHECK_ERR(sbx_session_state_parse(bad, strlen(bad), &st, &err), SBX_E_INVAL, &err,
              "field 'instance'");
    free(bad);
    bad = sbx_xstrdup(good);
    memcpy(strstr(bad, "/workspace"), "workspace/", 10);
    CHECK_ERR(sbx_session_state_parse(bad, strlen(bad), &st, &err), SBX_E_INVAL, &err, "'root'");
    free(bad);
}

int main(void)
{
    TAP_START();
    TAP_RUN(test_endpoints);
    TAP_RUN(test_escape_and_ids);
    TAP_RUN(test_envelope);
    TAP_RUN(test_options);
    TAP_RUN(test_state);
    return TAP_DONE();
}
