/* The daemon's port forwarding: a sandbox's TCP port carried over a WebSocket with Kubernetes'
 * portforward.k8s.io channels (src/node/daemon.h, docs/internals/node.md), one WebSocket per
 * TCP connection. The daemon reaches the port the way a local caller does: the local
 * provider's resolve_port gives an address on this host (its relay into the sandbox's network
 * namespace), and the daemon connects there. Channel 0 carries the bytes both ways, channel 1
 * the daemon's error text; the daemon starts both with the port number (2 bytes, little
 * endian). The protocol has no half-close: when either side ends, the connection ends. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "node/daemon.h"
#include "sandbox/wire/channel.h"
#include "sandbox/wire/ws.h"
#include "sbx/fs.h"
#include "sbx/session.h"

#define CHUNK 32768

/* The one port of "ports=P" (1-65535): Kubernetes takes a list, a node one port a WebSocket. */
int node_port_param(const char *query, int *port, struct sbx_error *err)
{
    char v[16];
    char *end = NULL;
    int got = node_query(query, "ports", 0, v, sizeof(v));
    long p = got == 1 ? strtol(v, &end, 10) : 0;
    if (got != 1 || *end || p < 1 || p > 65535 || node_query(query, "ports", 1, v, sizeof(v)) != 0)
        return sbx_error_set(err, SBX_E_INVAL, 0, "a port forward takes one 'ports' in 1..65535");
    *port = (int)p;
    return 0;
}

/* Connect to "http://127.0.0.1:N" (what the local provider's resolve_port gives). */
static int connect_url(const char *url, int port, struct sbx_error *err)
{
    static const char pre[] = "http://127.0.0.1:";
    char *end = NULL;
    long hp = strncmp(url, pre, sizeof(pre) - 1) == 0 ? strtol(url + sizeof(pre) - 1, &end, 10) : 0;
    if (!end || (*end && *end != '/') || hp < 1 || hp > 65535)
        return sbx_error_set(err, SBX_E_SANDBOX, 0,
                             "port %d resolved to '%.200s', not a loopback url", port, url);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)hp),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return sbx_error_errno(err, errno, "socket");
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        int e = errno;
        close(fd);
        return sbx_error_errno(err, e, "cannot connect to port %d of the sandbox", port);
    }
    return fd;
}

/* Port port of sandbox id through the local provider: an open TCP socket (>= 0), or -code.
 * SBX_E_NOTFOUND when nothing listens there. */
static int open_port(const char *id, int port, struct sbx_error *err)
{
    struct sbx_client *cl = NULL;
    struct sbx_session *s = NULL;
    char *url = NULL;
    int rc = sbx_client_new("local", NULL, &cl, err);
    if (rc == 0)
        rc = sbx_client_attach(cl, id, &s, err);
    if (rc == 0)
        rc = sbx_session_resolve_port(s, port, &url, err);
    if (rc == 0)
        rc = connect_url(url, port, err);
    free(url);
    sbx_session_free(s);
    sbx_client_free(cl);
    return rc;
}

void node_port_check(struct node_conn *c, const char *id, const char *portarg)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char q[32];
    int port = 0;
    snprintf(q, sizeof(q), "ports=%.12s", portarg);
    int fd = node_port_param(q, &port, &err) < 0 ? -1 : open_port(id, port, &err);
    if (fd < 0) {
        node_respond_error(c, &err);
        return;
    }
    close(fd);
    json_t *ans = json_pack("{s:s, s:i}", "id", id, "port", port);
    node_respond(c, 200, ans, &err);
    json_decref(ans);
}

struct pfwd {
    struct node_conn *c;
    struct sbx__ws ws;
    struct sbx__pf pf;
    struct sbx_buf msg;
    int tcp;
    int done;
    struct node_keepalive ka;
};

static int send_pf(struct pfwd *f, int is_error, const void *p, size_t n, struct sbx_error *err)
{
    sbx_buf_reset(&f->msg);
    int rc = sbx__pf_encode(&f->pf, 0, is_error, p, n, &f->msg, err);
    if (rc == 0)
        rc = sbx__ws_send(&f->ws, SBX__WS_BINARY, f->msg.data, f->msg.len, err);
    if (rc == 0 && f->ws.out.len)
        rc = node_send(f->c, f->ws.out.data, f->ws.out.len, err);
    sbx_buf_reset(&f->ws.out);
    return rc;
}

/* Decode what the harness sent: data to the port, its close ends the forward; pings are
 * answered (sbx__ws_recv queued the pong). */
static int from_harness(struct pfwd *f, struct sbx_error *err)
{
    while (f->c->in.len && !f->done) {
        struct sbx__ws_msg m;
        long used = sbx__ws_recv(&f->ws, (const uint8_t *)f->c->in.data, f->c->in.len, &m, err);
        if (used < 0)
            return (int)used;
        int rc = 0;
        if (m.opcode == SBX__WS_CLOSE) {
            f->done = 1;
        } else if (m.opcode == SBX__WS_BINARY) {
            struct sbx__pf_frame fr;
            rc = sbx__pf_decode(&f->pf, m.data, m.len, &fr, err);
            if (rc == 0 && !fr.is_error && fr.len)
                rc = sbx_fd_write_all(f->tcp, fr.data, fr.len, err);
        }
        sbx_buf_consume(&f->c->in, (size_t)used);
        if (rc == 0 && f->ws.out.len)
            rc = node_send(f->c, f->ws.out.data, f->ws.out.len, err);
        sbx_buf_reset(&f->ws.out);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* Relay until either side ends. */
static int pf_loop(struct pfwd *f, struct sbx_error *err)
{
    uint8_t b[CHUNK];
    int rc = from_harness(f, err); /* frames that came with the upgrade request */
    while (rc == 0 && !f->done) {
        if (SSL_pending(f->c->ssl) <= 0) {
            struct pollfd pf[2] = {{f->c->fd, POLLIN, 0}, {f->tcp, POLLIN, 0}};
            int n = poll(pf, 2, node_ka_poll_ms(&f->ka));
            if (n < 0) {
                if (errno == EINTR)
                    continue;
                return sbx_error_errno(err, errno, "poll");
            }
            if (n == 0) {
                rc = node_ka_tick(&f->ka, &f->ws, f->c, err);
                continue;
            }
            if (pf[1].revents) {
                ssize_t k = read(f->tcp, b, sizeof(b));
                if (k < 0 && errno == EINTR)
                    continue;
                if (k <= 0)
                    return 0; /* the sandbox's side ended */
                rc = send_pf(f, 0, b, (size_t)k, err);
                continue;
            }
            if (!pf[0].revents)
                continue;
        }
        long k = node_recv(f->c, b, sizeof(b), err);
        if (k <= 0)
            return k < 0 ? (int)k : 0;
        node_ka_heard(&f->ka);
        rc = sbx_buf_add(&f->c->in, b, (size_t)k, err) < 0 ? -(int)err->code : from_harness(f, err);
    }
    return rc;
}

void node_portforward(struct node_conn *c, struct node_req *req, const char *id)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct pfwd f = {.c = c, .tcp = -1};
    int port = 0;
    uint16_t p16;
    sbx__ws_init_server(&f.ws, 0);
    node_ka_init(&f.ka, c->d->ping_s);
    sbx_buf_init(&f.msg, SBX__WS_DEFAULT_MESSAGE);
    if (node_port_param(req->query, &port, &err) < 0 ||
        (!node_ws_offers(req->ws_protocols, SBX__PF_PROTOCOL) &&
         sbx_error_set(&err, SBX_E_INVAL, 0, "a port forward is a websocket offering '%s'",
                       SBX__PF_PROTOCOL) < 0) ||
        (f.tcp = open_port(id, port, &err)) < 0 ||
        node_ws_upgrade(c, req, SBX__PF_PROTOCOL, &err) < 0) {
        node_respond_error(c, &err);
        goto out;
    }
    p16 = (uint16_t)port;
    /* Both channels start with the port, as a Kubernetes server's do. */
    int rc = sbx__pf_init(&f.pf, &p16, 1, 1, &err);
    if (rc == 0)
        rc = send_pf(&f, 0, "", 0, &err);
    if (rc == 0)
        rc = send_pf(&f, 1, "", 0, &err);
    if (rc == 0)
        rc = pf_loop(&f, &err);
    if (rc == 0 && !f.done && sbx__ws_close(&f.ws, SBX__WS_CLOSE_NORMAL, NULL, &err) == 0 &&
        f.ws.out.len)
        node_send(c, f.ws.out.data, f.ws.out.len, &err);
    if (rc < 0)
        fprintf(stderr, "sbx-node: port %d of sandbox '%s': %s\n", port, id, err.msg);
out:
    if (f.tcp >= 0)
        close(f.tcp);
    sbx__ws_release(&f.ws);
    sbx_buf_release(&f.msg);
}
