/* Upgraded connections and WebSocket over libcurl's CONNECT_ONLY (src/sandbox/wire/conn.h),
 * plain and over TLS: Docker's kind of hijack against tests/wire/http-fake.py (echo, half-close
 * and the server's last words after it, a 200 that also hands over, a refused upgrade with the
 * server's message, a connection cut after the upgrade), and WebSocket against
 * tests/wire/ws-echo.py (subprotocols, echoes, a message larger than one read, the server's
 * pings, the close handshake, a refused upgrade, a wrong accept key). Skips without python3. */
#include <poll.h>
#include <string.h>

#include "sandbox/wire/conn.h"
#include "sandbox/wire/endpoint.h"
#include "servers.h"
#include "sbx/time.h"
#include "tap.h"

#define T_MS 20000

static struct sbx__endpoint *ep_for(const char *scheme, int port, const char *ca)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char *url = sbx_xasprintf("%s://127.0.0.1:%d", scheme, port);
    struct sbx__endpoint_opts o = {.url = url, .name = "the fake", .ca_file = ca};
    struct sbx__endpoint *ep = NULL;
    if (sbx__endpoint_new(&o, &ep, &err) < 0)
        printf("# %s\n", err.msg);
    free(url);
    return ep;
}

/* Read until EOF (or 1 MiB) into out. */
static int read_to_end(struct sbx__conn *c, struct sbx_buf *out, struct sbx_error *err)
{
    int64_t deadline = sbx_deadline_after_ms(T_MS);
    for (;;) {
        char buf[4096];
        size_t got = 0;
        int rc = sbx__conn_read(c, buf, sizeof(buf), deadline, &got, err);
        if (rc == SBX__CONN_EOF)
            return 0;
        if (rc < 0)
            return rc;
        if ((rc = sbx_buf_add(out, buf, got, err)) < 0)
            return rc;
    }
}

static void hijack_cases(struct sbx__endpoint *ep)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__conn *c = NULL;
    struct sbx__http_head head = {0};
    const char *hdrs[] = {"Connection: Upgrade", "Upgrade: tcp", NULL};
    const char *body = "{\"Detach\":false}";
    struct sbx__upgrade u = {.method = "POST",
                             .path = "/hijack",
                             .headers = hdrs,
                             .body = body,
                             .body_len = strlen(body)};
    CHECK_OK(sbx__conn_open(ep, &u, &c, &head, &err), &err);
    if (c) {
        CHECK_EQ_INT(head.status, 101);
        CHECK_EQ_STR(sbx__head_get(&head, "upgrade"), "tcp");
        int64_t deadline = sbx_deadline_after_ms(T_MS);
        char big[200000];
        for (size_t i = 0; i < sizeof(big); i++)
            big[i] = (char)('a' + i % 26);
        CHECK_OK(sbx__conn_write_all(c, "hello", 5, deadline, &err), &err);
        struct sbx_buf got;
        sbx_buf_init(&got, SBX_BUF_NOLIMIT);
        char buf[16];
        size_t n = 0;
        CHECK_OK(sbx__conn_read(c, buf, 5, deadline, &n, &err), &err);
        CHECK_EQ_MEM(buf, n, "hello", 5);
        CHECK_OK(sbx__conn_write_all(c, big, sizeof(big), deadline, &err), &err);
        CHECK_OK(sbx__conn_shutdown_write(c, &err), &err);
        /* After our end of input, the server still answers on its side. */
        CHECK_OK(read_to_end(c, &got, &err), &err);
        CHECK_EQ_INT(got.len, sizeof(big) + strlen("bye:200005"));
        CHECK(got.len > sizeof(big) && memcmp(got.data, big, sizeof(big)) == 0);
        CHECK(got.len > sizeof(big) && memcmp(got.data + sizeof(big), "bye:200005", 10) == 0);
        sbx_buf_release(&got);
        sbx__head_release(&head);
    }
    sbx__conn_free(c);
    c = NULL;
    struct sbx__upgrade u200 = {
            .method = "POST", .path = "/hijack?status=200", .headers = hdrs, .expect_also = 200};
    CHECK_OK(sbx__conn_open(ep, &u200, &c, NULL, &err), &err);
    sbx__conn_free(c);
    c = NULL;
    u200.expect_also = 0;
    CHECK_ERR(sbx__conn_open(ep, &u200, &c, NULL, &err), SBX_E_API, &err, "HTTP 200");
    struct sbx__upgrade refused = {
            .method = "POST", .path = "/status/404?shape=docker", .headers = hdrs};
    CHECK_ERR(sbx__conn_open(ep, &refused, &c, NULL, &err), SBX_E_NOTFOUND, &err, "the fake at '");
    CHECK_CONTAINS(err.msg, "answered POST /status/404?shape=docker with HTTP 404 (Not Found): the "
                            "server says no");
    struct sbx__upgrade cut = {.method = "POST", .path = "/cut", .headers = hdrs};
    CHECK_OK(sbx__conn_open(ep, &cut, &c, NULL, &err), &err);
    if (c) {
        struct sbx_buf got;
        sbx_buf_init(&got, SBX_BUF_NOLIMIT);
        int rc = read_to_end(c, &got, &err);
        CHECK(rc == 0 || rc == -SBX_E_HTTP);
        CHECK(got.len == 7 && memcmp(got.data, "partial", 7) == 0);
        sbx_buf_release(&got);
    }
    sbx__conn_free(c);
    c = NULL;
    const char *bad[] = {"X-Evil: a\r\nInjected: b", NULL};
    struct sbx__upgrade inj = {.path = "/hijack", .headers = bad};
    CHECK_ERR(sbx__conn_open(ep, &inj, &c, NULL, &err), SBX_E_INVAL, &err, "Name: value");
    struct sbx__upgrade sp = {.path = "/a b"};
    CHECK_ERR(sbx__conn_open(ep, &sp, &c, NULL, &err), SBX_E_INVAL, &err, "without spaces");
}

static void ws_cases(struct sbx__endpoint *ep)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__wsconn *w = NULL;
    const char *protos[] = {"v5.channel.k8s.io", "v4.channel.k8s.io", NULL};
    CHECK_OK(sbx__wsconn_open(ep, "/echo?proto=v4.channel.k8s.io", protos, NULL, 0, 0, &w, &err),
             &err);
    if (!w)
        return;
    CHECK_EQ_INT(w->protocol, 1);
    int64_t deadline = sbx_deadline_after_ms(T_MS);
    struct sbx__ws_msg m;
    CHECK_OK(sbx__wsconn_write(w, SBX__WS_TEXT, "hi", 2, deadline, &err), &err);
    CHECK_OK(sbx__wsconn_read(w, &m, deadline, &err), &err);
    CHECK(m.opcode == SBX__WS_TEXT && m.len == 2 && memcmp(m.data, "hi", 2) == 0);
    /* A message of many reads, and the server's ping answered on the way. */
    const char *large = "cmd:large 300000";
    CHECK_OK(sbx__wsconn_write(w, SBX__WS_TEXT, large, strlen(large), deadline, &err), &err);
    CHECK_OK(sbx__wsconn_read(w, &m, deadline, &err), &err);
    CHECK(m.opcode == SBX__WS_BINARY && m.len == 300000 && m.data[299999] == 299999 % 251);
    const char *ping = "cmd:ping abc";
    CHECK_OK(sbx__wsconn_write(w, SBX__WS_TEXT, ping, strlen(ping), deadline, &err), &err);
    CHECK_OK(sbx__wsconn_read(w, &m, deadline, &err), &err);
    CHECK_EQ_MEM(m.data, m.len, "pong abc", 8);
    /* Non-blocking: nothing yet, then the echo. */
    CHECK_EQ_INT(sbx__wsconn_next(w, &m, &err), 0);
    CHECK_OK(sbx__wsconn_write(w, SBX__WS_BINARY, "\x01\x02", 2, deadline, &err), &err);
    int rc = 0;
    while ((rc = sbx__wsconn_next(w, &m, &err)) == 0) {
        struct pollfd pf = {.fd = sbx__conn_fd(w->conn), .events = POLLIN};
        if (poll(&pf, 1, T_MS) <= 0)
            break;
    }
    CHECK(rc == 1 && m.opcode == SBX__WS_BINARY && m.len == 2);
    CHECK_OK(sbx__wsconn_close(w, 1000, "done", deadline, &err), &err);
    CHECK_EQ_INT(w->ws.state, SBX__WS_CLOSED);
    CHECK_EQ_INT(w->ws.peer_code, 1000);
    sbx__wsconn_free(w);
    w = NULL;
    CHECK_OK(sbx__wsconn_open(ep, "/echo", NULL, NULL, 0, 0, &w, &err), &err);
    if (w)
        CHECK_EQ_INT(w->protocol, -1);
    sbx__wsconn_free(w);
    w = NULL;
    CHECK_ERR(sbx__wsconn_open(ep, "/refuse", protos, NULL, 0, 0, &w, &err), SBX_E_PERM, &err,
              "the websocket upgrade of GET /refuse with HTTP 403 (Forbidden)");
    CHECK_ERR(sbx__wsconn_open(ep, "/bad-accept", protos, NULL, 0, 0, &w, &err), SBX_E_PARSE, &err,
              "Sec-WebSocket-Accept");
}

static void run_all(const char *scheme, const char *ca, const char *const *http_args,
                    const char *const *ws_args)
{
    struct tserver h, s;
    if (tserver_start(&h, "tests/wire/http-fake.py", http_args) < 0) {
        CHECK(!"the http server started");
    } else {
        struct sbx__endpoint *ep = ep_for(scheme, h.port, ca);
        CHECK(ep != NULL);
        if (ep)
            hijack_cases(ep);
        sbx__endpoint_free(ep);
    }
    tserver_stop(&h);
    if (tserver_start(&s, "tests/wire/ws-echo.py", ws_args) < 0) {
        CHECK(!"the websocket server started");
    } else {
        struct sbx__endpoint *ep = ep_for(scheme, s.port, ca);
        CHECK(ep != NULL);
        if (ep)
            ws_cases(ep);
        sbx__endpoint_free(ep);
    }
    tserver_stop(&s);
}

static void test_plain(void)
{
    run_all("http", NULL, NULL, NULL);
}

static void test_tls(void)
{
    char dir[64];
    if (make_certs(dir) < 0) {
        CHECK(!"certificates were made");
        return;
    }
    char crt[128], key[128], ca[128];
    snprintf(crt, sizeof(crt), "%s/server.crt", dir);
    snprintf(key, sizeof(key), "%s/server.key", dir);
    snprintf(ca, sizeof(ca), "%s/ca.crt", dir);
    const char *args[] = {"--tls", crt, key, NULL};
    run_all("https", ca, args, args);
    rm_tree(dir);
}

static void test_unreachable(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct tserver s;
    if (tserver_start(&s, "tests/wire/http-fake.py", NULL) < 0) {
        CHECK(!"the server started");
        tserver_stop(&s);
        return;
    }
    int port = s.port;
    tserver_stop(&s);
    struct sbx__endpoint *ep = ep_for("http", port, NULL);
    struct sbx__conn *c = NULL;
    struct sbx__upgrade u = {.path = "/hijack"};
    if (ep)
        CHECK_ERR(sbx__conn_open(ep, &u, &c, NULL, &err), SBX_E_HTTP, &err,
                  "cannot reach the fake");
    sbx__endpoint_free(ep);
}

int main(void)
{
    TAP_START();
    if (!have_python())
        TAP_SKIP_ALL("no python3 for the test servers");
    TAP_RUN_FORKED(test_plain);
    TAP_RUN_FORKED(test_tls);
    TAP_RUN_FORKED(test_unreachable);
    return TAP_DONE();
}
