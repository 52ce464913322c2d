/* The WebSocket framer over a real socket: tests/wire/ws-echo.py (Python standard library)
 * listens on a loopback port; this program connects with a plain TCP socket, does the opening
 * handshake with sbx__ws_request/sbx__ws_check_response and exchanges messages through
 * sbx__ws_recv/sbx__ws_send: echoes, fragments with a ping between, large messages both ways,
 * pings both ways, subprotocol choice, closes from either side with their codes, and a server
 * that misbehaves (wrong accept key, masked frame, oversized frame, refused upgrade).
 *
 * Usage: test-ws-echo PYTHON ws-echo.py. Skips when PYTHON is not there. The server is
 * killed and reaped at exit whatever happens, and stops by itself when this program's end of
 * its standard input closes. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/wire/ws.h"
#include "tap.h"

#define IO_TIMEOUT_MS 20000 /* a stuck server fails the test instead of hanging it */

static pid_t server_pid = -1;
static int server_stdin = -1;
static int port;

static void stop_server(void)
{
    if (server_pid > 0) {
        kill(server_pid, SIGKILL);
        waitpid(server_pid, NULL, 0);
        server_pid = -1;
    }
    if (server_stdin >= 0) {
        close(server_stdin);
        server_stdin = -1;
    }
}

static int start_server(const char *python, const char *script)
{
    int out[2], in[2];
    if (pipe2(out, O_CLOEXEC) < 0)
        return -1;
    if (pipe2(in, O_CLOEXEC) < 0) {
        close(out[0]), close(out[1]);
        return -1;
    }
    server_pid = fork();
    if (server_pid == 0) {
        dup2(out[1], 1);
        dup2(in[0], 0);
        execl(python, python, script, (char *)NULL);
        _exit(127);
    }
    close(out[1]);
    close(in[0]);
    server_stdin = in[1];
    if (server_pid < 0) {
        close(out[0]);
        return -1;
    }
    char line[32] = {0};
    size_t n = 0;
    while (n < sizeof(line) - 1 && !memchr(line, '\n', n)) {
        struct pollfd pf = {.fd = out[0], .events = POLLIN};
        if (poll(&pf, 1, IO_TIMEOUT_MS) <= 0)
            break;
        ssize_t r = read(out[0], line + n, sizeof(line) - 1 - n);
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    close(out[0]);
    port = (int)strtol(line, NULL, 10);
    return port > 0 ? 0 : -1;
}

/* ---- one connection ---- */

struct conn {
    int fd;
    struct sbx__ws ws;
    struct sbx_buf in; /* bytes read and not yet fed */
    int chosen;
    int eof;
};

static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w, n -= (size_t)w;
    }
    return 0;
}

static int flush(struct conn *c)
{
    int rc = write_all(c->fd, c->ws.out.data, c->ws.out.len);
    sbx_buf_consume(&c->ws.out, c->ws.out.len);
    return rc;
}

/* Read more into c->in; 0 at EOF, -1 on error or timeout. */
static int fill(struct conn *c)
{
    struct pollfd pf = {.fd = c->fd, .events = POLLIN};
    if (poll(&pf, 1, IO_TIMEOUT_MS) <= 0)
        return -1;
    char buf[65536];
    ssize_t r = recv(c->fd, buf, sizeof(buf), 0);
    if (r < 0)
        return -1;
    if (r == 0) {
        c->eof = 1;
        return 0;
    }
    return sbx_buf_add(&c->in, buf, (size_t)r, NULL) < 0 ? -1 : 1;
}

/* Connect, send the request, check the answer; leftover bytes stay in c->in. */
static int ws_connect(struct conn *c, const char *path, const char *const *protos, size_t max,
                      struct sbx_error *err)
{
    struct sbx__ws_handshake h;
    struct sbx_buf req;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    memset(c, 0, sizeof(*c));
    sbx_buf_init(&c->in, 1 << 24);
    sbx_buf_init(&req, 4096);
    sbx__ws_init(&c->ws, max);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int rc = c->fd < 0 || connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0
                     ? sbx_error_errno(err, errno, "connect to 127.0.0.1:%d", port)
                     : 0;
    char host[32];
    snprintf(host, sizeof(host), "127.0.0.1:%d", port);
    if (rc == 0 && (rc = sbx__ws_handshake_init(&h, err)) == 0 &&
        (rc = sbx__ws_request(&h, host, path, protos, NULL, &req, err)) == 0 &&
        write_all(c->fd, req.data, req.len) < 0)
        rc = sbx_error_set(err, SBX_E_IO, 0, "cannot send the request");
    long head = 0;
    while (rc == 0 && (head = sbx__ws_head_len(c->in.data, c->in.len, err)) == 0)
        if (fill(c) <= 0)
            rc = sbx_error_set(err, SBX_E_IO, 0, "no answer to the upgrade");
    if (rc == 0 && head < 0)
        rc = (int)head;
    if (rc == 0 &&
        (rc = sbx__ws_check_response(&h, c->in.data, (size_t)head, protos, &c->chosen, err)) == 0)
        sbx_buf_consume(&c->in, (size_t)head);
    sbx_buf_release(&req);
    return rc;
}

static void conn_close(struct conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    sbx__ws_release(&c->ws);
    sbx_buf_release(&c->in);
}

/* The next message (pings are answered on the way, and handed out too when want_control).
 * 0 and *m, or a negative sbx error code (SBX_E_IO for EOF or a timeout). */
static int next(struct conn *c, struct sbx__ws_msg *m, int want_control, struct sbx_error *err)
{
    for (;;) {
        while (c->in.len) {
            long used = sbx__ws_recv(&c->ws, (const uint8_t *)c->in.data, c->in.len, m, err);
            (void)flush(c);
            if (used < 0)
                return (int)used;
            sbx_buf_consume(&c->in, (size_t)used);
            if (m->opcode && (want_control || m->opcode < SBX__WS_PING))
                return 0;
        }
        if (fill(c) <= 0)
            return sbx_error_set(err, SBX_E_IO, 0, "connection %s",
                                 c->eof ? "closed by the server" : "timed out or failed");
    }
}

static int send_msg(struct conn *c, int op, const void *p, size_t n, struct sbx_error *err)
{
    int rc = sbx__ws_send(&c->ws, op, p, n, err);
    if (rc == 0 && flush(c) < 0)
        rc = sbx_error_set(err, SBX_E_IO, 0, "cannot send");
    return rc;
}

/* ---- the tests ---- */

static void test_echo(void)
{
    struct conn c;
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__ws_msg m;
    CHECK_OK(ws_connect(&c, "/echo", NULL, 1 << 20, &err), &err);
    CHECK_EQ_INT(c.chosen, -1);
    CHECK_OK(send_msg(&c, SBX__WS_TEXT, "hello", 5, &err), &err);
    CHECK_OK(next(&c, &m, 0, &err), &err);
    CHECK(m.opcode == SBX__WS_TEXT && m.len == 5 && memcmp(m.data, "hello", 5) == 0);
    /* 100 KiB each way: 64-bit lengths both ways. */
    size_t n = 100 * 1024;
    uint8_t *big = malloc(n);
    for (size_t i = 0; i < n; i++)
        big[i] = (uint8_t)(i * 7);
    CHECK_OK(send_msg(&c, SBX__WS_BINARY, big, n, &err), &err);
    CHECK_OK(next(&c, &m, 0, &err), &err);
    CHECK(m.opcode == SBX__WS_BINARY && m.len == n && memcmp(m.data, big, n) == 0);
    free(big);
    /* An empty message and UTF-8 text. */
    CHECK_OK(send_msg(&c, SBX__WS_TEXT, "", 0, &err), &err);
    CHECK_OK(next(&c, &m, 0, &err), &err);
    CHECK(m.opcode == SBX__WS_TEXT && m.len == 0);
    CHECK_OK(send_msg(&c, SBX__WS_TEXT, "h\xc3\xa9", 3, &err), &err);
    CHECK_OK(next(&c, &m, 0, &err), &err);
    CHECK(m.len == 3 && memcmp(m.data, "h\xc3\xa9", 3) == 0);
    conn_close(&c);
}

static void test_server_sends(void)
{
    struct conn c;
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__ws_msg m;
    CHECK_OK(ws_connect(&c, "/echo", NULL, 1 << 20, &err), &err);
    /* Fragments with a ping between: the ping comes first, answered, then the whole text. */
    CHECK_OK(send_msg(&c, SBX__WS_TEXT, "cmd:fragment", 12, &err), &err);
    CHECK_OK(next(&c, &m, 1, &err), &err);
    CHECK(m.opcode == SBX__WS_PING && m.len == 7 && memcmp(m.data, "between", 7) == 0);
    CHECK_OK(next(&c, &m, 1, &err), &err);
    CHECK(m.opcode == SBX__WS_TEXT && m.len == 10 && memcmp(m.data, "fragmented", 10) == 0);
    /* The server pings; sbx's automatic pong carries the same payload. */
    CHECK_OK(send_msg(&c, SBX__WS_TEXT, "cmd:ping abc", 12, &err), &err);
    CHECK_OK(next(&c, &m, 0, &err), &err);
    CHECK(m.opcode == SBX__WS_TEXT && m.len == 8 && memcmp(m.data, "pong abc", 8) == 0);
    /* A large message in one frame (64-bit length). */
    CHECK_OK(send_msg(&c, SBX__WS_TEXT, "cmd:large 70000", 15, &err), &err);
    CHECK_OK(next(&c, &m, 0, &err), &err);
    int pattern_ok = m.opcode == SBX__WS_BINARY && m.len == 70000;
    for (size_t i = 0; pattern_ok && i < m.len; i++)
        pattern_ok = m.data[i] == i % 251;
    CHECK(pattern_ok);
    /* sbx pings; the server's pong comes back. */
    CHECK_OK(sbx__ws_ping(&c.ws, "xyz", 3, &err), &err);
    CHECK_OK(flush(&c), &err);
    CHECK_OK(next(&c, &m, 1, &err), &err);
    CHECK(m.opcode == SBX__WS_PONG && m.len == 3 && memcmp(m.data, "xyz", 3) == 0);
    conn_close(&c);
}

static void test_subprotocol(void)
{
    static const char *const protos[] = {"v5.channel.k8s.io", "v4.channel.k8s.io", NULL};
    struct conn c;
    struct sbx_error err = SBX_ERROR_INIT;
    CHECK_OK(ws_connect(&c, "/echo", protos, 0, &err), &err);
    CHECK_EQ_INT(c.chosen, 0);
    conn_close(&c);
    CHECK_OK(ws_connect(&c, "/echo?proto=v4.channel.k8s.io", protos, 0, &err), &err);
    CHECK_EQ_INT(c.chosen, 1);
    conn_close(&c);
    CHECK_ERR(ws_connect(&c, "/echo?proto=v3.channel.k8s.io", protos, 0, &err), SBX_E_PARSE, &err,
              "'v3.channel.k8s.io', which was not offered");
    conn_close(&c);
}

static void test_close(void)
{
    struct conn c;
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__ws_msg m;
    /* The server closes with a code: sbx sees it, echoes it, the server hangs up. */
    CHECK_OK(ws_connect(&c, "/echo", NULL, 0, &err), &err);
    CHECK_OK(send_msg(&c, SBX__WS_TEXT, "cmd:close 4000 done", 19, &err), &err);
    CHECK_OK(next(&c, &m, 1, &err), &err);
    CHECK(m.opcode == SBX__WS_CLOSE && m.close_code == 4000 && strcmp(m.reason, "done") == 0);
    CHECK(c.ws.state == SBX__WS_CLOSED && c.ws.peer_code == 4000);
    CHECK_EQ_INT(c.ws.out.len, 0); /* the echo went out */
    CHECK_ERR(next(&c, &m, 1, &err), SBX_E_IO, &err, "closed by the server");
    conn_close(&c);
    /* sbx closes: CLOSING, then the server's echo makes it CLOSED. */
    CHECK_OK(ws_connect(&c, "/echo", NULL, 0, &err), &err);
    CHECK_OK(sbx__ws_close(&c.ws, 1001, "going", &err), &err);
    CHECK_EQ_INT(c.ws.state, SBX__WS_CLOSING);
    CHECK_OK(flush(&c), &err);
    CHECK_OK(next(&c, &m, 1, &err), &err);
    CHECK(m.opcode == SBX__WS_CLOSE && m.close_code == 1001);
    CHECK_EQ_INT(c.ws.state, SBX__WS_CLOSED);
    conn_close(&c);
    /* The server reports the code it received. */
    CHECK_OK(ws_connect(&c, "/echo", NULL, 0, &err), &err);
    CHECK_OK(send_msg(&c, SBX__WS_TEXT, "cmd:expect-close", 16, &err), &err);
    CHECK_OK(sbx__ws_close(&c.ws, 3001, NULL, &err), &err);
    CHECK_OK(flush(&c), &err);
    CHECK_OK(next(&c, &m, 1, &err), &err);
    CHECK(m.opcode == SBX__WS_CLOSE && m.close_code == 3001);
    conn_close(&c);
}

static void test_misbehaving(void)
{
    struct conn c;
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__ws_msg m;
    CHECK_ERR(ws_connect(&c, "/bad-accept", NULL, 0, &err), SBX_E_PARSE, &err,
              "does not match the key sent");
    conn_close(&c);
    CHECK_ERR(ws_connect(&c, "/refuse", NULL, 0, &err), SBX_E_API, &err,
              "websocket upgrade with HTTP 403 Forbidden");
    conn_close(&c);
    /* A masked frame fails the connection; sbx's close frame says 1002. */
    CHECK_OK(ws_connect(&c, "/masked", NULL, 0, &err), &err);
    CHECK_ERR(next(&c, &m, 1, &err), SBX_E_PARSE, &err, "masked frame");
    CHECK_EQ_INT(c.ws.state, SBX__WS_CLOSED);
    CHECK_EQ_INT(c.ws.dec.fail_close, SBX__WS_CLOSE_PROTOCOL);
    conn_close(&c);
    /* A 100 MiB claim against a 1 MiB limit: refused from the header, close 1009. */
    CHECK_OK(ws_connect(&c, "/oversized", NULL, 1 << 20, &err), &err);
    CHECK_ERR(next(&c, &m, 1, &err), SBX_E_TOOBIG, &err, "exceeds the limit of 1048576 bytes");
    CHECK_EQ_INT(c.ws.dec.fail_close, SBX__WS_CLOSE_TOO_BIG);
    conn_close(&c);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    TAP_START();
    if (argc < 3 || access(argv[1], X_OK) != 0)
        TAP_SKIP_ALL("no python3 to run the websocket echo server");
    atexit(stop_server);
    if (start_server(argv[1], argv[2]) < 0) {
        CHECK(!"the echo server started and printed its port");
        stop_server();
        return TAP_DONE();
    }
    TAP_RUN(test_echo);
    TAP_RUN(test_server_sends);
    TAP_RUN(test_subprotocol);
    TAP_RUN(test_close);
    TAP_RUN(test_misbehaving);
    stop_server();
    return TAP_DONE();
}
