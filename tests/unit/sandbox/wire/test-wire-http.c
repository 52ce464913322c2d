/* The remote layer's requests (src/sandbox/wire/http.h, endpoint.h) against tests/wire/
 * http-fake.py: plain requests, bodies both ways, streamed responses, limits, the error shapes
 * of servers, retries with a fake clock, unreachable and slow servers, and TLS: trust by a CA
 * (file and text), pins of the key and of the certificate, insecure, mutual TLS with a good,
 * missing, expired and foreign client certificate. Certificates are made by openssl at test
 * time. Skips without python3. */
#include <string.h>

#include "sandbox/wire/endpoint.h"
#include "sandbox/wire/http.h"
#include "sandbox/wire/ndjson.h"
#include "sandbox/wire/sse.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/secret.h"
#include "servers.h"
#include "tap.h"

static struct sbx__endpoint *ep_at(const char *scheme, int port, struct sbx__endpoint_opts *o)
{
    struct sbx__endpoint_opts def = {0};
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__endpoint *ep = NULL;
    if (!o)
        o = &def;
    char *url = sbx_xasprintf("%s://127.0.0.1:%d", scheme, port);
    o->url = url;
    if (sbx__endpoint_new(o, &ep, &err) < 0)
        printf("# endpoint: %s\n", err.msg);
    free(url);
    return ep;
}

static void test_endpoint_opts(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__endpoint *ep = NULL;
#define BAD(...)                                                              \
    do {                                                                      \
        struct sbx__endpoint_opts o = {__VA_ARGS__};                          \
        CHECK_ERR(sbx__endpoint_new(&o, &ep, &err), SBX_E_INVAL, &err, NULL); \
    } while (0)
    BAD(.url = NULL);
    BAD(.url = "ftp://x");
    BAD(.url = "https://user:secret@host");
    CHECK(!strstr(err.msg, "secret"));
    BAD(.url = "tcp://host");
    BAD(.url = "https://host?x=1");
    BAD(.url = "https://");
    BAD(.url = "http://host", .ca_file = "/ca.pem");
    BAD(.url = "unix://relative.sock");
    BAD(.url = "unix:///s.sock", .ca_file = "/ca.pem");
    BAD(.url = "https://h", .cert_file = "/c.pem");
    BAD(.url = "https://h", .ca_file = "/a", .ca_pem = "x");
    BAD(.url = "https://h", .ca_file = "ca.pem");
    BAD(.url = "https://h", .pin_pubkey = "md5//abc");
    BAD(.url = "https://h", .pin_pubkey = "sha256//a b");
    BAD(.url = "https://h", .pin_cert_sha256 = "abcd");
    BAD(.url = "https://h", .pin_cert_sha256 = "zz");
    BAD(.url = "https://h", .auth = SBX__AUTH_HEADER);
    BAD(.url = "https://h", .auth = SBX__AUTH_BASIC);
    struct sbx_secret *tok = sbx_secret_new("t", "abc", 3);
    BAD(.url = "https://h", .token.value = tok);
    struct sbx_secret *nl = sbx_secret_new("t", "a\r\nX-Evil: 1", 12);
    BAD(.url = "https://h", .auth = SBX__AUTH_BEARER, .token.value = nl);
    sbx_secret_free(nl);
#undef BAD
    struct sbx__endpoint_opts ok = {.url = "tcp://10.0.0.1:2376/", .ca_file = "/ca.pem"};
    CHECK_OK(sbx__endpoint_new(&ok, &ep, &err), &err);
    if (ep) {
        CHECK(sbx__endpoint_tls(ep));
        CHECK_EQ_STR(sbx__endpoint_host(ep), "10.0.0.1:2376");
        CHECK_EQ_STR(sbx__endpoint_base_path(ep), "");
        CHECK_EQ_STR(sbx__endpoint_name(ep), "the server");
    }
    sbx__endpoint_free(ep);
    struct sbx__endpoint_opts u = {.url = "unix:///run/x.sock", .name = "the engine"};
    CHECK_OK(sbx__endpoint_new(&u, &ep, &err), &err);
    if (ep) {
        CHECK(!sbx__endpoint_tls(ep));
        CHECK_EQ_STR(sbx__endpoint_unix_path(ep), "/run/x.sock");
        CHECK_EQ_STR(sbx__endpoint_host(ep), "localhost");
    }
    sbx__endpoint_free(ep);
    struct sbx__endpoint_opts b = {
            .url = "https://h:6443/base/", .auth = SBX__AUTH_BEARER, .token.value = tok};
    CHECK_OK(sbx__endpoint_new(&b, &ep, &err), &err);
    if (ep) {
        CHECK_EQ_STR(sbx__endpoint_base_path(ep), "/base");
        CHECK_EQ_STR(sbx__endpoint_url(ep), "https://h:6443/base/");
        struct sbx__endpoint *again = sbx__endpoint_ref(ep);
        sbx__endpoint_free(again);
    }
    sbx__endpoint_free(ep);
    sbx_secret_free(tok);
}

static void test_pure(void)
{
    char out[256];
    CHECK_EQ_INT(sbx__http_retry_after("3"), 3000);
    CHECK_EQ_INT(sbx__http_retry_after(" 0"), 0);
    CHECK_EQ_INT(sbx__http_retry_after("soon"), -1);
    CHECK_EQ_INT(sbx__http_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), 0); /* past */
    CHECK(sbx__http_retry_after("Fri, 01 Jan 2100 00:00:00 GMT") > 1000);
    CHECK_EQ_INT(sbx__http_backoff_ms(1, 7000, 5000), 5000);
    CHECK_EQ_INT(sbx__http_backoff_ms(1, 100, 5000), 100);
    int64_t b1 = sbx__http_backoff_ms(1, -1, 30000), b3 = sbx__http_backoff_ms(3, -1, 30000);
    CHECK(b1 >= 200 && b1 <= 250);
    CHECK(b3 >= 800 && b3 <= 1000);
    CHECK_EQ_INT(sbx__http_backoff_ms(20, -1, 30000), 30000);
    const char *k8s =
            "{\"kind\":\"Status\",\"message\":\"pods is forbidden\",\"reason\":\"Forbidden\"}";
    CHECK(sbx__http_error_text(k8s, strlen(k8s), out, sizeof(out)));
    CHECK_EQ_STR(out, "pods is forbidden");
    const char *lxd = "{\"type\":\"error\",\"error\":\"Instance not found\",\"error_code\":404}";
    CHECK(sbx__http_error_text(lxd, strlen(lxd), out, sizeof(out)));
    CHECK_EQ_STR(out, "Instance not found");
    const char *cn = "{\"code\":\"not_found\",\"message\":\"no such sandbox\"}";
    CHECK(sbx__http_error_text(cn, strlen(cn), out, sizeof(out)));
    CHECK_EQ_STR(out, "not_found: no such sandbox");
    const char *nested = "{\"error\":{\"message\":\"bad key\",\"type\":\"x\"}}";
    CHECK(sbx__http_error_text(nested, strlen(nested), out, sizeof(out)));
    CHECK_EQ_STR(out, "bad key");
    const char *esc = "{\"message\":\"a\\u001b[31mred\\nline\"}";
    CHECK(sbx__http_error_text(esc, strlen(esc), out, sizeof(out)));
    CHECK(!strchr(out, '\033') && !strchr(out, '\n'));
    CHECK(!sbx__http_error_text("<html>x</html>", 14, out, sizeof(out)));
    CHECK(sbx__http_error_text("upstream failed\nmore", 20, out, sizeof(out)));
    CHECK_EQ_STR(out, "upstream failed");
    CHECK(!sbx__http_error_text("{\"x\":1}", 7, out, sizeof(out)));
    CHECK(!sbx__http_error_text("  ", 2, out, sizeof(out)));
    char *q = sbx__http_escape("a b/c?d", 0);
    CHECK_EQ_STR(q, "a%20b%2Fc%3Fd");
    free(q);
    q = sbx__http_escape("/w s/x", 1);
    CHECK_EQ_STR(q, "/w%20s/x");
    free(q);
}

static int count_lines(json_t *v, size_t line, void *ud, struct sbx_error *err)
{
    (void)err;
    int *n = ud;
    if (json_integer_value(json_object_get(v, "i")) == (json_int_t)(line - 1))
        (*n)++;
    return 0;
}

static int count_events(const char *event, const char *data, size_t n, void *ud,
                        struct sbx_error *err)
{
    (void)err;
    int *k = ud;
    char want[16];
    snprintf(want, sizeof(want), "%d", *k);
    if (strcmp(event, "tick") == 0 && n == strlen(want) && memcmp(data, want, n) == 0)
        (*k)++;
    return 0;
}

struct src {
    size_t left, sum;
};

static long source(void *ud, void *buf, size_t n, struct sbx_error *err)
{
    (void)err;
    struct src *s = ud;
    size_t k = n < s->left ? n : s->left;
    if (k > 1000)
        k = 1000;
    for (size_t i = 0; i < k; i++)
        ((uint8_t *)buf)[i] = (uint8_t)(s->left - i);
    s->left -= k;
    return (long)k;
}

/* A service's own words for 429 only (sbx__http_service_error). */
static int test_words(void *ctx, long status, const char *what, const char *said,
                      struct sbx_error *err)
{
    CHECK_EQ_STR(what, "GET /x");
    CHECK_EQ_STR((const char *)ctx, "ctx");
    return status == 429
                   ? sbx_error_set(err, SBX_E_API, 0, "the test service is rate limiting: %s", said)
                   : 0;
}

static void check_service_error(struct sbx__endpoint *ep)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_buf body;
    sbx_buf_init(&body, 4096);
    CHECK_OK(sbx_buf_addf(&body, &err, "{\"message\": \"the server says no\"}"), &err);
    CHECK_ERR(sbx__http_service_error(ep, 429, body.data, body.len, "GET /x", test_words, "ctx",
                                      &err),
              SBX_E_API, &err, "the test service is rate limiting: the server says no");
    CHECK_ERR(sbx__http_service_error(ep, 403, body.data, body.len, "GET /x", test_words, "ctx",
                                      &err),
              SBX_E_PERM, &err, "answered GET /x with HTTP 403 (Forbidden)");
    sbx_buf_release(&body);
}

static void check_shapes(struct sbx__endpoint *ep)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *j = NULL;
    CHECK_ERR(sbx__http_json(ep, "GET", "/status/403?shape=k8s", NULL, NULL, &j, &err), SBX_E_PERM,
              &err,
              "answered GET /status/403?shape=k8s with HTTP 403 (Forbidden) (not allowed): "
              "the server says no");
    CHECK_ERR(sbx__http_json(ep, "GET", "/status/404?shape=lxd", NULL, NULL, &j, &err),
              SBX_E_NOTFOUND, &err, "HTTP 404 (Not Found): the server says no");
    CHECK_ERR(sbx__http_json(ep, "DELETE", "/status/409?shape=docker", NULL, NULL, &j, &err),
              SBX_E_EXISTS, &err, "DELETE /status/409");
    CHECK_ERR(sbx__http_json(ep, "POST", "/status/401?shape=connect", NULL, NULL, &j, &err),
              SBX_E_PERM, &err,
              "(the credentials were refused): permission_denied: the server says no");
    CHECK_ERR(sbx__http_json(ep, "GET", "/status/400?shape=nested", NULL, NULL, &j, &err),
              SBX_E_INVAL, &err, "the server says no");
    CHECK_ERR(sbx__http_json(ep, "GET", "/status/500?shape=text", NULL, NULL, &j, &err), SBX_E_API,
              &err, "(Internal Server Error): the server says no");
    CHECK(!strstr(err.msg, "second line"));
    CHECK_ERR(sbx__http_json(ep, "GET", "/status/502?shape=html", NULL, NULL, &j, &err), SBX_E_API,
              &err, "with HTTP 502 (Bad Gateway)");
    CHECK(!strstr(err.msg, "<html>"));
    CHECK_ERR(sbx__http_json(ep, "GET", "/status/504?shape=none", NULL, NULL, &j, &err),
              SBX_E_TIMEOUT, &err, "504");
    CHECK_ERR(sbx__http_json(ep, "GET", "/status/413?shape=none", NULL, NULL, &j, &err),
              SBX_E_TOOBIG, &err, "413");
}

/* The client port of the connection that carried GET /conn. */
static long conn_port(struct sbx__endpoint *ep)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *j = NULL;
    CHECK_OK(sbx__http_json(ep, "GET", "/conn", NULL, NULL, &j, &err), &err);
    long p = (long)json_integer_value(json_object_get(j, "port"));
    json_decref(j);
    return p;
}

/* keep_alive: blocking requests reuse one connection; without it each has its own. */
static void test_keep_alive(void)
{
    struct tserver s;
    if (tserver_start(&s, "tests/wire/http-fake.py", NULL) < 0) {
        CHECK(!"the server started");
        tserver_stop(&s);
        return;
    }
    struct sbx__endpoint_opts o = {.name = "the fake", .keep_alive = 1};
    struct sbx__endpoint *ep = ep_at("http", s.port, &o);
    long a = conn_port(ep), b = conn_port(ep), c = conn_port(ep);
    CHECK(a > 0);
    CHECK_EQ_INT(b, a);
    CHECK_EQ_INT(c, a);
    sbx__endpoint_free(ep);
    struct sbx__endpoint_opts o2 = {.name = "the fake"};
    ep = ep_at("http", s.port, &o2);
    a = conn_port(ep), b = conn_port(ep);
    CHECK(a > 0 && b > 0 && a != b);
    sbx__endpoint_free(ep);
    tserver_stop(&s);
}

static void test_plain(void)
{
    struct tserver s;
    struct sbx_error err = SBX_ERROR_INIT;
    if (tserver_start(&s, "tests/wire/http-fake.py", NULL) < 0) {
        CHECK(!"the server started");
        tserver_stop(&s);
        return;
    }
    struct sbx__endpoint_opts o = {.name = "the fake"};
    struct sbx__endpoint *ep = ep_at("http", s.port, &o);
    json_t *j = NULL, *body = json_pack("{s:s}", "a", "bcd");
    long status = 0;
    CHECK_OK(sbx__http_json(ep, "GET", "/json", NULL, &status, &j, &err), &err);
    CHECK_EQ_INT(status, 200);
    CHECK(json_is_true(json_object_get(j, "ok")));
    CHECK(json_is_false(json_object_get(j, "auth")));
    json_decref(j);
    CHECK_OK(sbx__http_json(ep, "PUT", "/json", body, NULL, &j, &err), &err);
    CHECK_EQ_STR(json_string_value(json_object_get(j, "method")), "PUT");
    CHECK_EQ_INT(json_integer_value(json_object_get(j, "body_len")), 11);
    json_decref(j);
    json_decref(body);
    check_shapes(ep);
    check_service_error(ep);

    /* A streamed response into a decoder, a body over its limit, an upload from a source. */
    struct sbx__ndjson nd;
    int lines = 0;
    sbx__ndjson_init(&nd, 1024, 0, count_lines, &lines);
    struct sbx__http_req rq = {
            .path = "/stream?n=50", .sink = sbx__http_sink_ndjson, .sink_ud = &nd};
    struct sbx__http_resp resp;
    sbx__http_resp_init(&resp);
    CHECK_OK(sbx__http_call(ep, &rq, &resp, &err), &err);
    CHECK_OK(sbx__ndjson_finish(&nd, &err), &err);
    CHECK_EQ_INT(lines, 50);
    CHECK_EQ_INT(resp.body.len, 0);
    sbx__ndjson_release(&nd);
    struct sbx__sse sse;
    int events = 0;
    sbx__sse_init(&sse, 1024, count_events, &events);
    struct sbx__http_req rs = {.path = "/sse?n=40", .sink = sbx__http_sink_sse, .sink_ud = &sse};
    CHECK_OK(sbx__http_call(ep, &rs, &resp, &err), &err);
    CHECK_OK(sbx__sse_finish(&sse, &err), &err);
    CHECK_EQ_INT(events, 40);
    sbx__sse_release(&sse);
    struct sbx__http_req big = {.path = "/big?n=100000", .max_body = 50000};
    CHECK_ERR(sbx__http_call(ep, &big, &resp, &err), SBX_E_TOOBIG, &err, "more than 50000 bytes");
    big.max_body = 0;
    CHECK_OK(sbx__http_call(ep, &big, &resp, &err), &err);
    CHECK_EQ_INT(resp.body.len, 100000);
    CHECK(resp.body.len == 100000 && (uint8_t)resp.body.data[99999] == 99999 % 251);
    for (int sized = 0; sized < 2; sized++) {
        struct src sr = {.left = 123457};
        struct sbx__http_req up = {.method = "POST",
                                   .path = "/upload",
                                   .source = source,
                                   .source_ud = &sr,
                                   .upload_size = sized ? 123457 : -1};
        CHECK_OK(sbx__http_call(ep, &up, &resp, &err), &err);
        json_t *r = json_loadb(resp.body.data, resp.body.len, 0, NULL);
        CHECK_EQ_INT(json_integer_value(json_object_get(r, "len")), 123457);
        json_decref(r);
    }
    /* A source that ends short of the length it announced fails the request at once (the
     * server would wait for the rest): no timeout bounds this one. */
    struct src short_src = {.left = 5000};
    struct sbx__http_req cut = {.method = "POST",
                                .path = "/upload",
                                .source = source,
                                .source_ud = &short_src,
                                .upload_size = 123457,
                                .timeout_ms = -1};
    CHECK_ERR(sbx__http_call(ep, &cut, &resp, &err), SBX_E_IO, &err,
              "the body ended after 5000 of the 123457 bytes it announced");
    struct sbx__http_req head = {.method = "HEAD", .path = "/json", .want_header = "content-type"};
    CHECK_OK(sbx__http_call(ep, &head, &resp, &err), &err);
    CHECK_EQ_INT(resp.status, 200);
    CHECK_EQ_STR(resp.header, "application/json");
    sbx__http_resp_release(&resp);
    sbx__endpoint_free(ep);
    tserver_stop(&s);
}

struct sleeps {
    int n;
    int64_t ms[16];
};

static void fake_sleep(int64_t ms, void *ud)
{
    struct sleeps *s = ud;
    if (s->n < 16)
        s->ms[s->n] = ms;
    s->n++;
}

static void test_retries(void)
{
    struct tserver s;
    struct sbx_error err = SBX_ERROR_INIT;
    if (tserver_start(&s, "tests/wire/http-fake.py", NULL) < 0) {
        CHECK(!"the server started");
        tserver_stop(&s);
        return;
    }
    struct sleeps sl = {0};
    struct sbx__endpoint_opts o = {
            .sleep_ms = fake_sleep, .sleep_ud = &sl, .max_retry_wait_ms = 5000};
    struct sbx__endpoint *ep = ep_at("http", s.port, &o);
    struct sbx__http_resp resp;
    sbx__http_resp_init(&resp);
    struct sbx__http_req a = {.path = "/retry/a?n=2&after=1"};
    CHECK_OK(sbx__http_call(ep, &a, &resp, &err), &err);
    CHECK_EQ_INT(resp.status, 200);
    CHECK_EQ_INT(resp.attempts, 3);
    CHECK_EQ_INT(sl.n, 2);
    CHECK_EQ_INT(sl.ms[0], 1000);
    CHECK_EQ_INT(sl.ms[1], 1000);
    /* Retry-After over the bound is cut to it; without one, backoff. */
    sl.n = 0;
    struct sbx__http_req b = {.path = "/retry/b?n=1&code=429&after=60"};
    CHECK_OK(sbx__http_call(ep, &b, &resp, &err), &err);
    CHECK_EQ_INT(sl.n, 1);
    CHECK_EQ_INT(sl.ms[0], 5000);
    sl.n = 0;
    struct sbx__http_req c = {.path = "/retry/c?n=1"};
    CHECK_OK(sbx__http_call(ep, &c, &resp, &err), &err);
    CHECK(sl.n == 1 && sl.ms[0] >= 200 && sl.ms[0] <= 250);
    /* Retries run out: the last answer is returned, and as an error it says so. */
    sl.n = 0;
    struct sbx__http_req d = {.path = "/retry/d?n=10"};
    CHECK_OK(sbx__http_call(ep, &d, &resp, &err), &err);
    CHECK_EQ_INT(resp.status, 503);
    CHECK_EQ_INT(resp.attempts, 4);
    CHECK_EQ_INT(sl.n, 3);
    json_t *j = NULL;
    CHECK_ERR(sbx__http_json(ep, "GET", "/retry/e?n=10", NULL, NULL, &j, &err), SBX_E_API, &err,
              "HTTP 503 (Service Unavailable): busy");
    /* Not retried: no_retry, and a body from a source. */
    sl.n = 0;
    struct sbx__http_req f = {.path = "/retry/f?n=1", .no_retry = 1};
    CHECK_OK(sbx__http_call(ep, &f, &resp, &err), &err);
    CHECK_EQ_INT(resp.status, 503);
    CHECK_EQ_INT(sl.n, 0);
    sbx__http_resp_release(&resp);
    sbx__endpoint_free(ep);
    tserver_stop(&s);
}

static void test_unreachable(void)
{
    struct tserver s;
    struct sbx_error err = SBX_ERROR_INIT;
    if (tserver_start(&s, "tests/wire/http-fake.py", NULL) < 0) {
        CHECK(!"the server started");
        tserver_stop(&s);
        return;
    }
    struct sbx__endpoint_opts o = {.name = "the fake", .timeout_ms = 300};
    struct sbx__endpoint *ep = ep_at("http", s.port, &o);
    json_t *j = NULL;
    CHECK_ERR(sbx__http_json(ep, "GET", "/slow?ms=3000", NULL, NULL, &j, &err), SBX_E_TIMEOUT, &err,
              "the fake at 'http://127.0.0.1:");
    sbx__endpoint_free(ep);
    int port = s.port;
    tserver_stop(&s);
    struct sbx__endpoint_opts o2 = {.name = "the fake"};
    ep = ep_at("http", port, &o2);
    CHECK_ERR(sbx__http_json(ep, "GET", "/json", NULL, NULL, &j, &err), SBX_E_HTTP, &err,
              "cannot reach the fake at 'http://127.0.0.1:");
    sbx__endpoint_free(ep);
}

static char *slurp(const char *path)
{
    struct sbx_buf b;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    if (sbx_fs_read_path(path, 1 << 20, &b, NULL) < 0) {
        sbx_buf_release(&b);
        return sbx_xstrdup("");
    }
    return sbx_buf_detach(&b, NULL);
}

static int get_json(struct sbx__endpoint *ep, struct sbx_error *err)
{
    json_t *j = NULL;
    int rc = ep ? sbx__http_json(ep, "GET", "/json", NULL, NULL, &j, err) : -SBX_E_INVAL;
    json_decref(j);
    return rc;
}

static void test_tls(void)
{
    char dir[64];
    struct tserver s;
    struct sbx_error err = SBX_ERROR_INIT;
    if (make_certs(dir) < 0) {
        CHECK(!"certificates were made");
        return;
    }
    const char *args[] = {"--tls", cert_path(dir, "server.crt"), cert_path(dir, "server.key"),
                          NULL};
    if (tserver_start(&s, "tests/wire/http-fake.py", args) < 0) {
        CHECK(!"the server started");
        tserver_stop(&s);
        rm_tree(dir);
        return;
    }
    char *ca_pem = slurp(cert_path(dir, "ca.crt"));
    char *srv_pem = slurp(cert_path(dir, "server.crt"));
    char *other_pem = slurp(cert_path(dir, "other-ca.crt"));
    char pin[SBX__TLS_PIN_LEN + 1], fp[65], other_pin[SBX__TLS_PIN_LEN + 1], other_fp[65];
    CHECK_OK(sbx__tls_cert_pins(srv_pem, strlen(srv_pem), pin, fp, &err), &err);
    CHECK_OK(sbx__tls_cert_pins(other_pem, strlen(other_pem), other_pin, other_fp, &err), &err);
    CHECK_ERR(sbx__tls_cert_pins("nothing", 7, pin, NULL, &err), SBX_E_PARSE, &err, NULL);
    struct sbx__endpoint *ep;
    struct sbx__endpoint_opts o1 = {.ca_file = cert_path(dir, "ca.crt")};
    ep = ep_at("https", s.port, &o1);
    CHECK_OK(get_json(ep, &err), &err);
    sbx__endpoint_free(ep);
    struct sbx__endpoint_opts o2 = {.ca_pem = ca_pem};
    ep = ep_at("tcp", s.port, &o2);
    CHECK_OK(get_json(ep, &err), &err);
    sbx__endpoint_free(ep);
    struct sbx__endpoint_opts o3 = {.name = "the fake"};
    ep = ep_at("https", s.port, &o3);
    CHECK_ERR(get_json(ep, &err), SBX_E_HTTP, &err, "TLS: the server's certificate is not trusted");
    sbx__endpoint_free(ep);
    struct sbx__endpoint_opts o4 = {.ca_pem = other_pem};
    ep = ep_at("https", s.port, &o4);
    CHECK_ERR(get_json(ep, &err), SBX_E_HTTP, &err, "not trusted");
    sbx__endpoint_free(ep);
    struct sbx__endpoint_opts o5 = {.pin_pubkey = pin};
    ep = ep_at("https", s.port, &o5);
    CHECK_OK(get_json(ep, &err), &err);
    sbx__endpoint_free(ep);
    struct sbx__endpoint_opts o6 = {.pin_pubkey = other_pin};
    ep = ep_at("https", s.port, &o6);
    CHECK_ERR(get_json(ep, &err), SBX_E_HTTP, &err, "does not match the pinned key");
    sbx__endpoint_free(ep);
    struct sbx__endpoint_opts o7 = {.pin_cert_sha256 = fp};
    ep = ep_at("https", s.port, &o7);
    CHECK_OK(get_json(ep, &err), &err);
    sbx__endpoint_free(ep);
    struct sbx__endpoint_opts o8 = {.pin_cert_sha256 = other_fp};
    ep = ep_at("https", s.port, &o8);
    CHECK_ERR(get_json(ep, &err), SBX_E_HTTP, &err, "pinned certificate");
    sbx__endpoint_free(ep);
    struct sbx__endpoint_opts o9 = {.insecure = 1};
    ep = ep_at("https", s.port, &o9);
    CHECK_OK(get_json(ep, &err), &err);
    sbx__endpoint_free(ep);
    free(ca_pem);
    free(srv_pem);
    free(other_pem);
    tserver_stop(&s);
    rm_tree(dir);
}

static void test_mtls(void)
{
    char dir[64];
    struct tserver s;
    struct sbx_error err = SBX_ERROR_INIT;
    if (make_certs(dir) < 0) {
        CHECK(!"certificates were made");
        return;
    }
    const char *args[] = {"--tls",       cert_path(dir, "server.crt"), cert_path(dir, "server.key"),
                          "--client-ca", cert_path(dir, "ca.crt"),     NULL};
    if (tserver_start(&s, "tests/wire/http-fake.py", args) < 0) {
        CHECK(!"the server started");
        tserver_stop(&s);
        rm_tree(dir);
        return;
    }
    char ca[128];
    snprintf(ca, sizeof(ca), "%s", cert_path(dir, "ca.crt"));
    struct sbx__endpoint *ep;
    struct sbx__endpoint_opts o1 = {.ca_file = ca,
                                    .cert_file = cert_path(dir, "client.crt"),
                                    .key_file = cert_path(dir, "client.key")};
    ep = ep_at("https", s.port, &o1);
    CHECK_OK(get_json(ep, &err), &err);
    sbx__endpoint_free(ep);
    char *cert = slurp(cert_path(dir, "client.crt")), *key = slurp(cert_path(dir, "client.key"));
    struct sbx_secret *ks = sbx_secret_new("client key", key, strlen(key));
    struct sbx__endpoint_opts o2 = {.ca_file = ca, .cert_pem = cert, .key_pem.value = ks};
    ep = ep_at("https", s.port, &o2);
    CHECK_OK(get_json(ep, &err), &err);
    sbx__endpoint_free(ep);
    struct sbx__endpoint_opts o3 = {.ca_file = ca, .name = "the fake"};
    ep = ep_at("https", s.port, &o3);
    CHECK_ERR(get_json(ep, &err), SBX_E_HTTP, &err,
              "the server wants a client certificate and none was given");
    sbx__endpoint_free(ep);
    struct sbx__endpoint_opts o4 = {.ca_file = ca,
                                    .cert_file = cert_path(dir, "expired.crt"),
                                    .key_file = cert_path(dir, "expired.key")};
    ep = ep_at("https", s.port, &o4);
    CHECK_ERR(get_json(ep, &err), SBX_E_HTTP, &err,
              "the server refused sbx's client certificate: it expired on ");
    sbx__endpoint_free(ep);
    struct sbx__endpoint_opts o5 = {.ca_file = ca,
                                    .cert_file = cert_path(dir, "other-client.crt"),
                                    .key_file = cert_path(dir, "other-client.key")};
    ep = ep_at("https", s.port, &o5);
    CHECK_ERR(get_json(ep, &err), SBX_E_HTTP, &err, "the server refused sbx's client certificate");
    sbx__endpoint_free(ep);
    struct sbx__endpoint_opts o6 = {.ca_file = ca,
                                    .cert_file = cert_path(dir, "client.crt"),
                                    .key_file = cert_path(dir, "other-client.key")};
    ep = ep_at("https", s.port, &o6);
    CHECK_ERR(get_json(ep, &err), SBX_E_INVAL, &err, "cannot use the client certificate");
    sbx__endpoint_free(ep);
    sbx_secret_free(ks);
    free(cert);
    free(key);
    tserver_stop(&s);
    rm_tree(dir);
}

/* A server that resets each new connection once the handshake is done: with a client
 * certificate that reads as the server refusing it (TLS 1.3 checks it after the client's side
 * of the handshake has ended); without one, as a lost connection. */
static void test_reset_after_handshake(void)
{
    char dir[64];
    struct tserver s;
    struct sbx_error err = SBX_ERROR_INIT;
    if (make_certs(dir) < 0) {
        CHECK(!"certificates were made");
        return;
    }
    const char *args[] = {"--tls", cert_path(dir, "server.crt"), cert_path(dir, "server.key"),
                          "--reset-after-handshake", NULL};
    if (tserver_start(&s, "tests/wire/http-fake.py", args) < 0) {
        CHECK(!"the server started");
        tserver_stop(&s);
        rm_tree(dir);
        return;
    }
    char ca[128];
    snprintf(ca, sizeof(ca), "%s", cert_path(dir, "ca.crt"));
    struct sbx__endpoint_opts o1 = {.ca_file = ca,
                                    .cert_file = cert_path(dir, "client.crt"),
                                    .key_file = cert_path(dir, "client.key")};
    struct sbx__endpoint *ep = ep_at("https", s.port, &o1);
    CHECK_ERR(get_json(ep, &err), SBX_E_HTTP, &err,
              "the server refused sbx's client certificate (the server closed the new connection "
              "after the TLS handshake");
    sbx__endpoint_free(ep);
    struct sbx__endpoint_opts o2 = {.ca_file = ca};
    ep = ep_at("https", s.port, &o2);
    CHECK_ERR(get_json(ep, &err), SBX_E_HTTP, &err, "was lost");
    sbx__endpoint_free(ep);
    tserver_stop(&s);
    rm_tree(dir);
}

int main(void)
{
    TAP_START();
    TAP_RUN(test_endpoint_opts);
    TAP_RUN(test_pure);
    if (!have_python()) {
        printf("# no python3: the server cases skip\n");
        return TAP_DONE();
    }
    TAP_RUN_FORKED(test_plain);
    TAP_RUN_FORKED(test_keep_alive);
    TAP_RUN_FORKED(test_retries);
    TAP_RUN_FORKED(test_unreachable);
    TAP_RUN_FORKED(test_tls);
    TAP_RUN_FORKED(test_mtls);
    TAP_RUN_FORKED(test_reset_after_handshake);
    return TAP_DONE();
}
