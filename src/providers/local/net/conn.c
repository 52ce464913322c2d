/* The host-side network loop: one connection, from accept to close (loop.h). A proxy client is
 * read until its request head is complete, checked against the allow list (sbx__proxy_parse and
 * the rules of proxy.c), its name resolved in a short thread, the addresses checked, connected
 * upstream, and then spliced both ways; a refusal is an HTTP answer. A port forward is spliced
 * from the start, to a socket made in the sandbox's network namespace (forward.c). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "providers/local/net/loop.h"
#include "sandbox/host/host.h"
#include "sbx/common.h"
#include "sbx/log.h"

/* Close a connection; its memory stays until free_dead, as later events of the same epoll
 * batch may still point at it. */
void sbx__netloop_conn_free(struct sbx__netloop_conn *c)
{
    struct sbx__net *net = c->net;
    sbx__netloop_close_handle(net, &c->h[0]);
    sbx__netloop_close_handle(net, &c->h[1]);
    if (c->job)
        c->job->conn = NULL;
    if (c->prev)
        c->prev->next = c->next;
    else
        net->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    net->nconns--;
    c->dead = 1;
    c->prev = NULL;
    c->next = net->dead;
    net->dead = c;
}

void sbx__netloop_free_dead(struct sbx__net *net)
{
    while (net->dead) {
        struct sbx__netloop_conn *c = net->dead;
        net->dead = c->next;
        if (c->have_req)
            sbx__proxy_request_release(&c->req);
        free(c->up.data);
        free(c->down.data);
        free(c);
    }
}

static struct sbx__netloop_conn *conn_new(struct sbx__net *net, int fd, int forward)
{
    struct sbx__netloop_conn *c = sbx_xcalloc(1, sizeof(*c));
    c->net = net;
    c->forward = forward;
    c->state = forward ? C_CONNECT : C_HEAD;
    for (int i = 0; i < 2; i++) {
        c->h[i].kind = K_CONN;
        c->h[i].conn = c;
        c->h[i].side = i;
        c->h[i].fd = -1;
    }
    c->h[0].fd = fd;
    c->up.data = sbx_xmalloc(BUFSZ);
    c->down.data = sbx_xmalloc(BUFSZ);
    c->deadline = sbx__netloop_now_ms() + net->head_timeout_ms;
    c->next = net->conns;
    if (net->conns)
        net->conns->prev = c;
    net->conns = c;
    net->nconns++;
    return c;
}

/* Queue an answer to the client and stop reading the request. */
static void refuse(struct sbx__netloop_conn *c, int status, const char *rule, const char *body)
{
    struct sbx_buf b;
    struct sbx_error err = SBX_ERROR_INIT;
    sbx_buf_init(&b, BUFSZ - 1);
    if (sbx__proxy_response(status, rule, body, &b, &err) < 0)
        sbx_buf_reset(&b);
    memcpy(c->down.data, b.data, b.len);
    c->down.off = 0;
    c->down.len = b.len;
    sbx_buf_release(&b);
    sbx_log(SBX_LOG_INFO, "proxy: %d %s", status, body);
    sbx__netloop_close_handle(c->net, &c->h[1]);
    if (c->job) {
        c->job->conn = NULL;
        c->job = NULL;
    }
    c->state = C_REFUSE;
    c->deadline = sbx__netloop_now_ms() + c->net->head_timeout_ms;
}

static void refuse_buf(struct sbx__netloop_conn *c, int status, const char *rule,
                       struct sbx_buf *body)
{
    refuse(c, status, rule, sbx_buf_cstr(body));
    sbx_buf_release(body);
}

static void start_connect(struct sbx__netloop_conn *c);
static void conn_update(struct sbx__netloop_conn *c);

/* Filter the candidate addresses, then connect or refuse. */
static void addresses_ready(struct sbx__netloop_conn *c)
{
    struct sbx__net *net = c->net;
    size_t kept = 0;
    const char *rule = NULL;
    struct sockaddr_storage first;
    for (size_t i = 0; i < c->naddrs; i++) {
        const char *r =
                sbx__proxy_addr_refusal((struct sockaddr *)&c->addrs[i], net->allow_loopback);
        if (r) {
            if (!rule) {
                rule = r;
                first = c->addrs[i];
            }
            continue;
        }
        c->addrs[kept++] = c->addrs[i];
    }
    c->naddrs = kept;
    if (kept == 0 && rule) {
        struct sbx_buf b;
        struct sbx_error err = SBX_ERROR_INIT;
        sbx_buf_init(&b, 4096);
        (void)sbx__proxy_refusal_address(c->req.host, c->req.port, (struct sockaddr *)&first, rule,
                                         &b, &err);
        refuse_buf(c, 403, "address", &b);
        return;
    }
    if (kept == 0) {
        char *msg = sbx_xasprintf("sbx proxy: '%s' has no address", c->req.host);
        refuse(c, 502, NULL, msg);
        free(msg);
        return;
    }
    c->next_addr = 0;
    start_connect(c);
}

static void *resolve_main(void *arg)
{
    struct sbx__netloop_job *j = arg;
    struct addrinfo hints;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    j->rc = getaddrinfo(j->host, NULL, &hints, &j->res);
    ssize_t n;
    do
        n = write(j->pipe_w, &j, sizeof(j));
    while (n < 0 && errno == EINTR);
    return NULL;
}

static void start_resolve(struct sbx__netloop_conn *c)
{
    struct sbx__net *net = c->net;
    for (size_t i = 0; i < net->ntest; i++) {
        if (strcmp(net->test_names[i], c->req.host) == 0) {
            c->addrs[0] = net->test_addrs[i];
            c->naddrs = 1;
            addresses_ready(c);
            return;
        }
    }
    struct sbx__netloop_job *j = sbx_xcalloc(1, sizeof(*j));
    j->conn = c;
    j->host = sbx_xstrdup(c->req.host);
    j->pipe_w = net->resolve_w;
    pthread_attr_t attr;
    pthread_t t;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int e = pthread_create(&t, &attr, resolve_main, j);
    pthread_attr_destroy(&attr);
    if (e != 0) {
        free(j->host);
        free(j);
        refuse(c, 503, NULL, "sbx proxy: cannot start a name lookup");
        return;
    }
    net->pending_jobs++;
    c->job = j;
    c->state = C_RESOLVE;
}

void sbx__netloop_job_done(struct sbx__net *net, struct sbx__netloop_job *j)
{
    struct sbx__netloop_conn *c = j->conn;
    net->pending_jobs--;
    if (c) {
        c->job = NULL;
        if (j->rc != 0) {
            char *msg = sbx_xasprintf("sbx proxy: cannot resolve '%s': %s", j->host,
                                      gai_strerror(j->rc));
            refuse(c, 502, NULL, msg);
            free(msg);
        } else {
            c->naddrs = 0;
            for (struct addrinfo *a = j->res; a && c->naddrs < MAX_ADDRS; a = a->ai_next) {
                if (a->ai_family != AF_INET && a->ai_family != AF_INET6)
                    continue;
                memset(&c->addrs[c->naddrs], 0, sizeof(c->addrs[0]));
                memcpy(&c->addrs[c->naddrs], a->ai_addr, a->ai_addrlen);
                c->naddrs++;
            }
            addresses_ready(c);
        }
    }
    if (c && !c->dead)
        conn_update(c);
    if (j->res)
        freeaddrinfo(j->res);
    free(j->host);
    free(j);
}

static void start_connect(struct sbx__netloop_conn *c)
{
    struct sbx__net *net = c->net;
    while (c->next_addr < c->naddrs) {
        struct sockaddr_storage *a = &c->addrs[c->next_addr++];
        socklen_t len =
                a->ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
        if (a->ss_family == AF_INET)
            ((struct sockaddr_in *)a)->sin_port = htons((uint16_t)c->req.port);
        else
            ((struct sockaddr_in6 *)a)->sin6_port = htons((uint16_t)c->req.port);
        int fd = socket(a->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
            continue;
        if (connect(fd, (struct sockaddr *)a, len) < 0 && errno != EINPROGRESS) {
            close(fd);
            continue;
        }
        c->h[1].fd = fd;
        c->state = C_CONNECT;
        c->deadline = sbx__netloop_now_ms() + net->head_timeout_ms;
        return;
    }
    char *msg =
            sbx_xasprintf("sbx proxy: cannot connect to '%s' port %d", c->req.host, c->req.port);
    refuse(c, 502, NULL, msg);
    free(msg);
}

/* The request head is complete in c->up: decide. */
static void head_ready(struct sbx__netloop_conn *c, size_t hl)
{
    struct sbx__net *net = c->net;
    struct sbx_error err = SBX_ERROR_INIT;
    int rc = sbx__proxy_parse(c->up.data, hl, &c->req, &err);
    if (rc < 0) {
        int status = rc == -SBX_E_TOOBIG ? 431 : 400;
        char *msg = sbx_xasprintf("sbx proxy: bad request: %s", err.msg);
        refuse(c, status, NULL, msg);
        free(msg);
        return;
    }
    c->have_req = 1;
    /* keep only what followed the head (a body, or TLS bytes sent before our 200) */
    memmove(c->up.data, c->up.data + hl, c->up.len - hl);
    c->up.len -= hl;

    struct sbx_buf b;
    sbx_buf_init(&b, 8192);
    int port_ok = 0;
    for (size_t i = 0; i < net->nports; i++)
        port_ok |= net->ports[i] == c->req.port;
    if (!port_ok) {
        (void)sbx__proxy_refusal_port(c->req.host, c->req.port, net->ports, net->nports, &b, &err);
        refuse_buf(c, 403, "port", &b);
        return;
    }
    if (!sbx__proxy_host_allowed(c->req.host, (const char *const *)net->patterns, net->npatterns)) {
        (void)sbx__proxy_refusal_domain(c->req.host, c->req.port,
                                        (const char *const *)net->patterns, net->npatterns, &b,
                                        &err);
        refuse_buf(c, 403, "domain", &b);
        return;
    }
    sbx_buf_release(&b);
    if (c->req.literal) {
        c->addrs[0] = c->req.addr;
        c->naddrs = 1;
        addresses_ready(c);
        return;
    }
    start_resolve(c);
}

static void connected(struct sbx__netloop_conn *c)
{
    c->state = C_SPLICE;
    c->deadline = sbx__netloop_now_ms() + c->net->idle_timeout_ms;
    if (c->forward)
        return;
    if (c->req.connect) {
        static const char ok[] = "HTTP/1.1 200 Connection Established\r\n\r\n";
        memcpy(c->down.data, ok, sizeof(ok) - 1);
        c->down.len = sizeof(ok) - 1;
    } else {
        /* the rewritten head goes out before whatever body bytes came with it */
        memmove(c->up.data + c->req.head_len, c->up.data, c->up.len);
        memcpy(c->up.data, c->req.head, c->req.head_len);
        c->up.len += c->req.head_len;
    }
}

/* Move bytes from src to dst as far as the sockets allow. 0 ok, -1 the connection failed. */
static int pump(struct sbx__netloop_pipebuf *p, int src, int dst)
{
    for (;;) {
        int progress = 0;
        if (!p->eof && src >= 0 && p->off + p->len < BUFSZ) {
            ssize_t n = read(src, p->data + p->off + p->len, BUFSZ - p->off - p->len);
            if (n > 0) {
                p->len += (size_t)n;
                progress = 1;
            } else if (n == 0) {
                p->eof = 1;
            } else if (errno != EAGAIN && errno != EINTR) {
                return -1;
            }
        }
        if (p->len > 0 && dst >= 0) {
            ssize_t n = send(dst, p->data + p->off, p->len, MSG_NOSIGNAL);
            if (n > 0) {
                p->off += (size_t)n;
                p->len -= (size_t)n;
                if (p->len == 0)
                    p->off = 0;
                progress = 1;
            } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
                return -1;
            }
        }
        if (p->off > 0 && p->off + p->len == BUFSZ) {
            memmove(p->data, p->data + p->off, p->len);
            p->off = 0;
            progress = 1;
        }
        if (!progress)
            break;
    }
    if (p->eof && p->len == 0 && !p->shut && dst >= 0) {
        shutdown(dst, SHUT_WR);
        p->shut = 1;
    }
    return 0;
}

static void conn_update(struct sbx__netloop_conn *c)
{
    struct sbx__net *net = c->net;
    uint32_t e0 = 0, e1 = 0;
    switch (c->state) {
    case C_HEAD:
        e0 = EPOLLIN;
        break;
    case C_RESOLVE:
        break;
    case C_CONNECT:
        e1 = EPOLLOUT;
        break;
    case C_SPLICE:
        if (!c->up.eof && c->up.off + c->up.len < BUFSZ)
            e0 |= EPOLLIN;
        if (c->down.len)
            e0 |= EPOLLOUT;
        if (!c->down.eof && c->down.off + c->down.len < BUFSZ)
            e1 |= EPOLLIN;
        if (c->up.len)
            e1 |= EPOLLOUT;
        break;
    case C_REFUSE:
        e0 = EPOLLOUT;
        break;
    case C_LINGER:
        e0 = EPOLLIN;
        break;
    }
    sbx__netloop_set_events(net, &c->h[0], e0);
    sbx__netloop_set_events(net, &c->h[1], e1);
}

void sbx__netloop_conn_event(struct sbx__netloop_conn *c, int side, uint32_t ev)
{
    struct sbx__net *net = c->net;
    switch (c->state) {
    case C_HEAD: {
        ssize_t n = read(c->h[0].fd, c->up.data + c->up.len, SBX__PROXY_MAX_HEAD + 1 - c->up.len);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
            sbx__netloop_conn_free(c);
            return;
        }
        if (n > 0)
            c->up.len += (size_t)n;
        size_t hl = sbx__proxy_head_len(c->up.data, c->up.len);
        if (hl > 0)
            head_ready(c, hl);
        else if (c->up.len > SBX__PROXY_MAX_HEAD)
            refuse(c, 431, NULL, "sbx proxy: bad request: request head over 16384 bytes");
        break;
    }
    case C_RESOLVE:
        break;
    case C_CONNECT: {
        if (side != 1)
            break;
        int e = 0;
        socklen_t el = sizeof(e);
        if (getsockopt(c->h[1].fd, SOL_SOCKET, SO_ERROR, &e, &el) < 0)
            e = errno;
        if (e == EINPROGRESS)
            break;
        if (e != 0) {
            sbx__netloop_close_handle(net, &c->h[1]);
            if (c->forward) {
                sbx__netloop_conn_free(c);
                return;
            }
            start_connect(c);
            break;
        }
        connected(c);
        break;
    }
    case C_SPLICE:
        if (pump(&c->up, c->h[0].fd, c->h[1].fd) < 0 ||
            pump(&c->down, c->h[1].fd, c->h[0].fd) < 0 || (c->up.shut && c->down.shut) ||
            (ev & EPOLLERR)) {
            sbx__netloop_conn_free(c);
            return;
        }
        c->deadline = sbx__netloop_now_ms() + net->idle_timeout_ms;
        break;
    case C_REFUSE: {
        ssize_t n = send(c->h[0].fd, c->down.data + c->down.off, c->down.len, MSG_NOSIGNAL);
        if (n < 0 && errno != EAGAIN && errno != EINTR) {
            sbx__netloop_conn_free(c);
            return;
        }
        if (n > 0) {
            c->down.off += (size_t)n;
            c->down.len -= (size_t)n;
        }
        if (c->down.len == 0) {
            /* Read what the client still sends until it closes: closing with unread data
             * would reset the connection and could lose the answer. */
            shutdown(c->h[0].fd, SHUT_WR);
            c->state = C_LINGER;
            c->deadline = sbx__netloop_now_ms() + LINGER_MS;
        }
        break;
    }
    case C_LINGER: {
        char sink[4096];
        ssize_t n = read(c->h[0].fd, sink, sizeof(sink));
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
            sbx__netloop_conn_free(c);
            return;
        }
        break;
    }
    }
    conn_update(c);
}

void sbx__netloop_accept_proxy(struct sbx__net *net)
{
    int fd = accept4(net->proxy.fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
        return;
    if (net->nconns >= net->max_conns) {
        static const char busy[] =
                "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 45\r\n"
                "Connection: close\r\n\r\nsbx proxy: too many connections, retry "
                "later\n";
        (void)!send(fd, busy, sizeof(busy) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        close(fd);
        return;
    }
    struct sbx__netloop_conn *c = conn_new(net, fd, 0);
    conn_update(c);
}

/* A TCP forward on the default address serves the sandbox's owner only: another local user's
 * connection (or one the kernel cannot name) is closed at once. A unix socket forward is
 * private by its directory; an explicit --port-bind opens the forward to whoever reaches it. */
static int peer_allowed(const struct sbx__net *net, int fd, int port)
{
    struct sockaddr_storage a;
    socklen_t al = sizeof(a);
    if (net->forward_bind ||
        (getsockname(fd, (struct sockaddr *)&a, &al) == 0 && a.ss_family == AF_UNIX) ||
        sbx__host_peer_is_owner(-1, fd))
        return 1;
    uid_t uid = (uid_t)-1;
    (void)sbx__host_peer_uid(-1, fd, &uid);
    sbx_log(SBX_LOG_WARN,
            "forward of port %d: refused a connection of uid %d, not the sandbox's owner "
            "(--port-bind opens a forward to every local user)",
            port, (int)uid);
    return 0;
}

void sbx__netloop_accept_forward(struct sbx__net *net, struct sbx__netloop_handle *h)
{
    struct sbx_error err = SBX_ERROR_INIT;
    int fd = accept4(h->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    int in = -1;
    if (fd < 0)
        return;
    if (net->nconns >= net->max_conns || !peer_allowed(net, fd, h->port)) {
        close(fd);
        return;
    }
    if (sbx__netns_socket(net->userns_fd, net->netns_fd, h->v6 ? AF_INET6 : AF_INET, &in, &err) <
        0) {
        sbx_log(SBX_LOG_WARN, "forward of port %d: %s", h->port, err.msg);
        close(fd);
        return;
    }
    int fl = fcntl(in, F_GETFL);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)h->port)};
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)h->port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a6.sin6_addr = in6addr_loopback;
    int cr = fl < 0 || fcntl(in, F_SETFL, fl | O_NONBLOCK) < 0 ? -1
             : h->v6 ? connect(in, (struct sockaddr *)&a6, sizeof(a6))
                     : connect(in, (struct sockaddr *)&a, sizeof(a));
    if (cr < 0 && (fl < 0 || errno != EINPROGRESS)) {
        close(in);
        close(fd);
        return;
    }
    struct sbx__netloop_conn *c = conn_new(net, fd, 1);
    c->h[1].fd = in;
    conn_update(c);
}

void sbx__netloop_sweep(struct sbx__net *net)
{
    int64_t now = sbx__netloop_now_ms();
    struct sbx__netloop_conn *next;
    for (struct sbx__netloop_conn *c = net->conns; c; c = next) {
        next = c->next;
        if (now < c->deadline)
            continue;
        if (c->state == C_HEAD || c->state == C_RESOLVE) {
            refuse(c, c->state == C_HEAD ? 400 : 504, NULL,
                   c->state == C_HEAD ? "sbx proxy: bad request: request head timed out"
                                      : "sbx proxy: name lookup timed out");
            conn_update(c);
        } else if (c->state == C_CONNECT && !c->forward) {
            refuse(c, 504, NULL, "sbx proxy: connecting upstream timed out");
            conn_update(c);
        } else {
            sbx__netloop_conn_free(c);
        }
    }
}
