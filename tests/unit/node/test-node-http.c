/* The sbx-node daemon's request parser and query reader (src/node/http.c): what a harness may
 * send and every way a head is refused. The daemon over the network: 1802-node-daemon. */
#include <stdio.h>
#include <string.h>

#include "node/daemon.h"
#include "tap.h"

static int parse(const char *head, struct node_req *r, struct sbx_error *err)
{
    memset(r, 0, sizeof(*r));
    r->content_length = -1;
    return node_parse_head(r, head, strlen(head), err);
}

static void test_good(void)
{
    struct node_req r;
    struct sbx_error err = SBX_ERROR_INIT;
    CHECK_EQ_INT(parse("GET /v1/sandboxes/ab12/exec?command=echo&command=a%20b HTTP/1.1\r\n"
                       "Host: x\r\nsbx-token:  tok  \r\nUpgrade: WebSocket\r\n"
                       "Sec-WebSocket-Key: a2V5\r\n"
                       "Sec-WebSocket-Protocol: v4.channel.k8s.io, v5.channel.k8s.io\r\n"
                       "Content-Length: 12\r\n\r\n",
                       &r, &err),
                 0);
    CHECK_EQ_STR(r.method, "GET");
    CHECK_EQ_STR(r.path, "/v1/sandboxes/ab12/exec");
    CHECK_EQ_STR(r.token, "tok");
    CHECK_EQ_INT(r.upgrade_ws, 1);
    CHECK_EQ_STR(r.ws_key, "a2V5");
    CHECK_EQ_INT(r.content_length, 12);
    char v[64];
    CHECK_EQ_INT(node_query(r.query, "command", 0, v, sizeof(v)), 1);
    CHECK_EQ_STR(v, "echo");
    CHECK_EQ_INT(node_query(r.query, "command", 1, v, sizeof(v)), 1);
    CHECK_EQ_STR(v, "a b");
    CHECK_EQ_INT(node_query(r.query, "command", 2, v, sizeof(v)), 0);
    CHECK_EQ_INT(node_query(r.query, "comman", 0, v, sizeof(v)), 0);
    CHECK_EQ_INT(node_query("a=%00", "a", 0, v, sizeof(v)), -1);
    CHECK_EQ_INT(node_query("a=%4", "a", 0, v, sizeof(v)), -1);
    CHECK_EQ_INT(node_query("a=%zz", "a", 0, v, sizeof(v)), -1);
    CHECK_EQ_INT(node_query("a=abcdef", "a", 0, v, 4), -1);
    CHECK_EQ_INT(node_query("a=%41%42", "a", 0, v, sizeof(v)), 1);
    CHECK_EQ_STR(v, "AB");
}

static void refused(const char *head, int code, const char *what, int line)
{
    struct node_req r;
    struct sbx_error err = SBX_ERROR_INIT;
    int rc = parse(head, &r, &err);
    if (!tap__result(rc == -code && strstr(err.msg, what), __FILE__, line, what))
        printf("#   rc %d: %s\n", rc, err.msg);
}
#define REFUSED(h, code, what) refused(h, code, what, __LINE__)

static void test_refused(void)
{
    REFUSED("GET / HTTP/1.0\r\n\r\n", SBX_E_PARSE, "bad request line");
    REFUSED("GET /\r\n\r\n", SBX_E_PARSE, "bad request line");
    REFUSED("LONGMETHOD / HTTP/1.1\r\n\r\n", SBX_E_PARSE, "bad request line");
    REFUSED("GET x HTTP/1.1\r\n\r\n", SBX_E_PARSE, "bad request target");
    REFUSED("GET /a%00b HTTP/1.1\r\n\r\n", SBX_E_PARSE, "bad request target");
    REFUSED("GET / HTTP/1.1\r\nNoColon\r\n\r\n", SBX_E_PARSE, "bad header line");
    REFUSED("GET / HTTP/1.1\r\nA: b\rc\r\n\r\n", SBX_E_PARSE, "stray CR");
    REFUSED("GET / HTTP/1.1\r\nA: b\x01\r\n\r\n", SBX_E_PARSE, "control character");
    REFUSED("GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n", SBX_E_PARSE,
            "content-length");
    REFUSED("GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", SBX_E_PARSE, "content-length");
    REFUSED("GET / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", SBX_E_PARSE, "content-length");
    REFUSED("GET / HTTP/1.1\r\nContent-Length: +1\r\n\r\n", SBX_E_PARSE, "content-length");
    REFUSED("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", SBX_E_UNSUPPORTED, "chunked");
    char tok[200];
    snprintf(tok, sizeof(tok), "GET / HTTP/1.1\r\nSbx-Token: %0100d\r\n\r\n", 1);
    REFUSED(tok, SBX_E_TOOBIG, "sbx-token");
    static char many[8192];
    size_t n = (size_t)snprintf(many, sizeof(many), "GET / HTTP/1.1\r\n");
    for (int i = 0; i <= NODE_FIELDS_MAX; i++)
        n += (size_t)snprintf(many + n, sizeof(many) - n, "X-%d: y\r\n", i);
    snprintf(many + n, sizeof(many) - n, "\r\n");
    REFUSED(many, SBX_E_TOOBIG, "header fields");
}

/* Sbx-Node-Version: this node's major (with any minor) or none at all is served; another
 * major, or a value that is no version, is refused naming what was sent. */
static void test_version(void)
{
    struct node_req r;
    struct sbx_error err = SBX_ERROR_INIT;
    CHECK_EQ_INT(parse("GET / HTTP/1.1\r\n\r\n", &r, &err), 0);
    CHECK_EQ_INT(r.has_version, 0);
    CHECK_EQ_INT(parse("GET / HTTP/1.1\r\nSbx-Node-Version: " NODE_VERSION "\r\n\r\n", &r, &err),
                 0);
    CHECK_EQ_INT(r.has_version, 1);
    CHECK_EQ_STR(r.version, NODE_VERSION);
    CHECK_EQ_INT(parse("GET / HTTP/1.1\r\nsbx-node-version:  1.7 \r\n\r\n", &r, &err), 0);
    CHECK_EQ_STR(r.version, "1.7");
    REFUSED("GET / HTTP/1.1\r\nSbx-Node-Version: 2\r\n\r\n", SBX_E_INVAL,
            "the request speaks sbx-node protocol version 2, this node speaks version 1");
    REFUSED("GET / HTTP/1.1\r\nSbx-Node-Version: 0.9\r\n\r\n", SBX_E_INVAL,
            "protocol version 0, this node speaks version 1");
    REFUSED("GET / HTTP/1.1\r\nSbx-Node-Version: 10\r\n\r\n", SBX_E_INVAL,
            "protocol version 10, this node");
    static const char *bad[] = {"", "v1", "1.", "1.x", "1.2.3", ".1", "-1", "1 2", "1234567890"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char h[128], want[96];
        snprintf(h, sizeof(h), "GET / HTTP/1.1\r\nSbx-Node-Version: %s\r\n\r\n", bad[i]);
        snprintf(want, sizeof(want), "header 'sbx-node-version' is '%s', not a version", bad[i]);
        REFUSED(h, SBX_E_INVAL, want);
    }
    REFUSED("GET / HTTP/1.1\r\nSbx-Node-Version: \xc3\xa9\r\n\r\n", SBX_E_INVAL,
            "header 'sbx-node-version' is '?', not a version");
    REFUSED("GET / HTTP/1.1\r\nSbx-Node-Version: 1\r\nSbx-Node-Version: 1\r\n\r\n", SBX_E_PARSE,
            "a repeated sbx-node-version");
    char longv[128];
    snprintf(longv, sizeof(longv), "GET / HTTP/1.1\r\nSbx-Node-Version: 1.%040d\r\n\r\n", 1);
    REFUSED(longv, SBX_E_TOOBIG, "sbx-node-version");
}

/* A port forward's "ports": exactly one port in 1..65535. */
static void test_port_param(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    int port = 0;
    CHECK_OK(node_port_param("ports=8731", &port, &err), &err);
    CHECK_EQ_INT(port, 8731);
    CHECK_OK(node_port_param("x=1&ports=1", &port, &err), &err);
    CHECK_EQ_INT(port, 1);
    static const char *const bad[] = {
            "",         "ports=",   "ports=0",        "ports=65536", "ports=80&ports=81",
            "ports=8a", "ports=-1", "ports=%38%30%00"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        CHECK_ERR(node_port_param(bad[i], &port, &err), SBX_E_INVAL, &err, "one 'ports'");
}

int main(void)
{
    TAP_START();
    TAP_RUN(test_good);
    TAP_RUN(test_refused);
    TAP_RUN(test_version);
    TAP_RUN(test_port_param);
    return TAP_DONE();
}
