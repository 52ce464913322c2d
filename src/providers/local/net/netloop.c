/* The host-side network event loop of a sandbox: the allow-list proxy and the port forwarders.
 *
 * One thread runs an epoll loop over non-blocking sockets; every connection has two bounded
 * buffers (one per direction) and a deadline. Name resolution is the only blocking step: each
 * lookup runs in a short detached thread that hands its result back through a pipe, so the
 * loop never waits for DNS. The proxy decides on the address it actually connects to, after
 * resolution, so a name that resolves (or rebinds) to an internal address is refused. */
#include "providers/local/net/net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "sbx/common.h"
#include "sbx/log.h"

#define BUFSZ     (64 * 1024)
#define MAX_ADDRS 8
#define LINGER_MS 2000

enum kind { K_PROXY_LISTEN, K_FWD_LISTEN, K_CONN, K_WAKE, K_RESOLVED, K_CONTROL };
enum state { C_HEAD, C_RESOLVE, C_CONNECT, C_SPLICE, C_REFUSE, C_LINGER };

struct conn;

/* What epoll's data.ptr points at. */
struct handle {
    enum kind kind;
    struct conn *conn; /* K_CONN */
    int side;          /* K_CONN: 0 client, 1 upstream */
    int fd;
    int port;        /* K_FWD_LISTEN: the sandbox port */
    int v6;          /* K_FWD_LISTEN: the sandbox address is ::1, not 127.0.0.1 */
    uint32_t events; /* registered events, 0 = not registered */
};

struct pipebuf {
    char *data;
    size_t off, len;
    int eof;  /* the source reached end of file */
    int shut; /* the destination was shut down for writing */
};

struct job {
    struct conn *conn; /* NULL once the connection is gone (only the loop touches it) */
    char *host;
    struct addrinfo *res;
    int rc;
    int pipe_w; /* where the thread hands the job back */
};

struct conn {
    struct sbx__net *net;
    struct conn *prev, *next;
    int forward; /* 1: a port forward, 0: a proxy client */
    enum state state;
    struct handle h[2];
    struct pipebuf up;   /* client -> upstream; in C_HEAD it holds the request head */
    struct pipebuf down; /* upstream -> client */
    struct sbx__proxy_request req;
    int have_req;
    struct job *job;
    struct sockaddr_storage addrs[MAX_ADDRS];
    size_t naddrs, next_addr;
    int64_t deadline;
    int dead; /* closed, freed after the current batch of events */
};

struct fwd {
    struct handle h;
    int host_port;
    int unix_sock;
    char path[108]; /* unix_sock: host path, for answers */
};

struct sbx__net {
    pthread_t thread;
    int started;
    int epfd;
    struct handle wake;     /* eventfd: forwards added, stop */
    struct handle resolved; /* read end of the resolver pipe */
    int resolve_w;
    int stop; /* under lock */
    pthread_mutex_t lock;
    struct fwd fwds[SBX__NET_MAX_FORWARDS];
    size_t nfwds;
    size_t nfwds_loop; /* forwards registered with epoll (loop only) */
    int userns_fd, netns_fd;
    struct handle proxy;
    struct handle control;
    char *forward_bind;
    int unix_dir_fd;
    char *unix_dir;
    char **patterns;
    size_t npatterns;
    int *ports;
    size_t nports;
    char **test_names;
    struct sockaddr_storage *test_addrs;
    size_t ntest;
    int allow_loopback;
    size_t max_conns, nconns;
    int head_timeout_ms, idle_timeout_ms;
    struct conn *conns;
    struct conn *dead; /* closed connections, linked by next */
    size_t pending_jobs;
};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void set_events(struct sbx__net *net, struct handle *h, uint32_t ev)
{
    if (h->fd < 0 || h->events == ev)
        return;
    struct epoll_event e = {.events = ev, .data.ptr = h};
    int op = h->events == 0 ? EPOLL_CTL_ADD : ev == 0 ? EPOLL_CTL_DEL : EPOLL_CTL_MOD;
    if (epoll_ctl(net->epfd, op, h->fd, &e) < 0 && op != EPOLL_CTL_DEL)
        sbx_log(SBX_LOG_WARN, "net: epoll_ctl: %s", strerror(errno));
    h->events = ev;
}

static void close_handle(struct sbx__net *net, struct handle *h)
{
    if (h->fd < 0)
        return;
    set_events(net, h, 0);
    close(h->fd);
    h->fd = -1;
}

/* Close a connection; its memory stays until free_dead, as later events of the same epoll
 * batch may still point at it. */
static void conn_free(struct conn *c)
{
    struct sbx__net *net = c->net;
    close_handle(net, &c->h[0]);
    close_handle(net, &c->h[1]);
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

static void free_dead(struct sbx__net *net)
{
    while (net->dead) {
        struct conn *c = net->dead;
        net->dead = c->next;
        if (c->have_req)
            sbx__proxy_request_release(&c->req);
        free(c->up.data);
        free(c->down.data);
        free(c);
    }
}

/* ------------------------------------------------------------- connections ---- */

static struct conn *conn_new(struct sbx__net *net, int fd, int forward)
{
    struct conn *c = sbx_xcalloc(1, sizeof(*c));
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
    c->deadline = now_ms() + net->head_timeout_ms;
    c->next = net->conns;
    if (net->conns)
        net->conns->prev = c;
    net->conns = c;
    net->nconns++;
    return c;
}

/* Queue an answer to the client and stop reading the request. */
static void refuse(struct conn *c, int status, const char *rule, const char *body)
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
    close_handle(c->net, &c->h[1]);
    if (c->job) {
        c->job->conn = NULL;
        c->job = NULL;
    }
    c->state = C_REFUSE;
    c->deadline = now_ms() + c->net->head_timeout_ms;
}

static void refuse_buf(struct conn *c, int status, const char *rule, struct sbx_buf *body)
{
    refuse(c, status, rule, sbx_buf_cstr(body));
    sbx_buf_release(body);
}

static void start_connect(struct conn *c);
static void conn_update(struct conn *c);

/* Filter the candidate addresses, then connect or refuse. */
static void addresses_ready(struct conn *c)
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
    struct job *j = arg;
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

static void start_resolve(struct conn *c)
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
    struct job *j = sbx_xcalloc(1, sizeof(*j));
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

static void job_done(struct sbx__net *net, struct job *j)
{
    struct conn *c = j->conn;
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

static void start_connect(struct conn *c)
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
        c->deadline = now_ms() + net->head_timeout_ms;
        return;
    }
    char *msg =
            sbx_xasprintf("sbx proxy: cannot connect to '%s' port %d", c->req.host, c->req.port);
    refuse(c, 502, NULL, msg);
    free(msg);
}

/* The request head is complete in c->up: decide. */
static void head_ready(struct conn *c, size_t hl)
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

static void connected(struct conn *c)
{
    c->state = C_SPLICE;
    c->deadline = now_ms() + c->net->idle_timeout_ms;
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
static int pump(struct pipebuf *p, int src, int dst)
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

static void conn_update(struct conn *c)
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
    set_events(net, &c->h[0], e0);
    set_events(net, &c->h[1], e1);
}

static void conn_event(struct conn *c, int side, uint32_t ev)
{
    struct sbx__net *net = c->net;
    switch (c->state) {
    case C_HEAD: {
        ssize_t n = read(c->h[0].fd, c->up.data + c->up.len, SBX__PROXY_MAX_HEAD + 1 - c->up.len);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
            conn_free(c);
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
            close_handle(net, &c->h[1]);
            if (c->forward) {
                conn_free(c);
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
            conn_free(c);
            return;
        }
        c->deadline = now_ms() + net->idle_timeout_ms;
        break;
    case C_REFUSE: {
        ssize_t n = send(c->h[0].fd, c->down.data + c->down.off, c->down.len, MSG_NOSIGNAL);
        if (n < 0 && errno != EAGAIN && errno != EINTR) {
            conn_free(c);
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
            c->deadline = now_ms() + LINGER_MS;
        }
        break;
    }
    case C_LINGER: {
        char sink[4096];
        ssize_t n = read(c->h[0].fd, sink, sizeof(sink));
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
            conn_free(c);
            return;
        }
        break;
    }
    }
    conn_update(c);
}

static void accept_proxy(struct sbx__net *net)
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
    struct conn *c = conn_new(net, fd, 0);
    conn_update(c);
}

static void accept_forward(struct sbx__net *net, struct handle *h)
{
    struct sbx_error err = SBX_ERROR_INIT;
    int fd = accept4(h->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    int in = -1;
    if (fd < 0)
        return;
    if (net->nconns >= net->max_conns) {
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
    struct conn *c = conn_new(net, fd, 1);
    c->h[1].fd = in;
    conn_update(c);
}

static void serve_control(struct sbx__net *net)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__net_reply r;
    struct sbx__net_request q = {0};
    ssize_t n = recv(net->control.fd, &q, sizeof(q), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        close_handle(net, &net->control); /* the other side is gone */
        return;
    }
    if (n != (ssize_t)sizeof(q))
        return;
    memset(&r, 0, sizeof(r));
    struct sbx__net_forward fwd = {.port = q.port,
                                   .v6 = q.v6 != 0,
                                   .bind = net->forward_bind,
                                   .unix_sock = q.unix_sock != 0};
    int rc = sbx__net_forward_add(net, &fwd, &r.host_port, r.path, sizeof(r.path), &err);
    if (rc < 0 && rc != -SBX_E_EXISTS) {
        r.host_port = 0;
        snprintf(r.msg, sizeof(r.msg), "%.255s", err.msg);
    }
    (void)!send(net->control.fd, &r, sizeof(r), MSG_NOSIGNAL | MSG_DONTWAIT);
}

static void sweep(struct sbx__net *net)
{
    int64_t now = now_ms();
    struct conn *next;
    for (struct conn *c = net->conns; c; c = next) {
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
            conn_free(c);
        }
    }
}

static int take_new_forwards(struct sbx__net *net)
{
    pthread_mutex_lock(&net->lock);
    int stop = net->stop;
    size_t n = net->nfwds;
    pthread_mutex_unlock(&net->lock);
    for (; net->nfwds_loop < n; net->nfwds_loop++)
        set_events(net, &net->fwds[net->nfwds_loop].h, EPOLLIN);
    return stop;
}

static void *loop_main(void *arg)
{
    struct sbx__net *net = arg;
    struct epoll_event evs[64];
    for (;;) {
        int n = epoll_wait(net->epfd, evs, SBX_ARRAY_LEN(evs), 500);
        if (n < 0 && errno != EINTR) {
            sbx_log(SBX_LOG_ERROR, "net: epoll_wait: %s", strerror(errno));
            break;
        }
        int stop = 0;
        for (int i = 0; i < n; i++) {
            struct handle *h = evs[i].data.ptr;
            switch (h->kind) {
            case K_PROXY_LISTEN:
                accept_proxy(net);
                break;
            case K_FWD_LISTEN:
                accept_forward(net, h);
                break;
            case K_CONTROL:
                serve_control(net);
                break;
            case K_WAKE: {
                uint64_t v;
                (void)!read(h->fd, &v, sizeof(v));
                stop = take_new_forwards(net);
                break;
            }
            case K_RESOLVED: {
                struct job *j;
                if (read(h->fd, &j, sizeof(j)) == (ssize_t)sizeof(j))
                    job_done(net, j);
                break;
            }
            case K_CONN:
                /* closed earlier in this batch: freed only after it */
                if (!h->conn->dead && h->fd >= 0)
                    conn_event(h->conn, h->side, evs[i].events);
                break;
            }
        }
        sweep(net);
        free_dead(net);
        if (stop)
            break;
    }
    return NULL;
}

/* ------------------------------------------------------------------ the API ---- */

static int listen_inside(struct sbx__net *net, int port, struct sbx_error *err)
{
    int fd = -1;
    int rc = sbx__netns_socket(net->userns_fd, net->netns_fd, AF_INET, &fd, err);
    if (rc < 0)
        return rc;
    int one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fl = fcntl(fd, F_GETFL);
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 128) < 0 || fl < 0 ||
        fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) {
        rc = sbx_error_errno(err, errno, "cannot listen on 127.0.0.1:%d in the sandbox", port);
        close(fd);
        return rc;
    }
    net->proxy.fd = fd;
    return 0;
}

static int parse_test_host(const char *entry, char **name, struct sockaddr_storage *addr,
                           struct sbx_error *err)
{
    const char *eq = strchr(entry, '=');
    int literal = 0;
    char *ip = NULL;
    int rc;
    if (!eq)
        return sbx_error_set(err, SBX_E_INVAL, 0, "test host '%s' is not name=address", entry);
    rc = sbx__proxy_host_normalize(eq + 1, strlen(eq + 1), &ip, &literal, addr, err);
    free(ip);
    if (rc == 0 && !literal)
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "test host '%s': not an IP address", entry);
    if (rc == 0)
        rc = sbx__proxy_host_normalize(entry, (size_t)(eq - entry), name, NULL, NULL, err);
    return rc;
}

/* A loop with nothing open yet: every descriptor -1, the limits of cfg (or the defaults). */
static struct sbx__net *net_alloc(const struct sbx__net_config *cfg)
{
    struct sbx__net *net = sbx_xcalloc(1, sizeof(*net));
    pthread_mutex_init(&net->lock, NULL);
    net->epfd = -1;
    net->wake.kind = K_WAKE;
    net->wake.fd = -1;
    net->resolved.kind = K_RESOLVED;
    net->resolved.fd = -1;
    net->resolve_w = -1;
    net->proxy.kind = K_PROXY_LISTEN;
    net->proxy.fd = -1;
    net->control.kind = K_CONTROL;
    net->control.fd = -1;
    net->forward_bind = cfg->forward_bind ? sbx_xstrdup(cfg->forward_bind) : NULL;
    net->unix_dir_fd = -1;
    if (cfg->unix_dir && cfg->unix_dir_fd >= 0) {
        net->unix_dir_fd = fcntl(cfg->unix_dir_fd, F_DUPFD_CLOEXEC, 3);
        net->unix_dir = sbx_xstrdup(cfg->unix_dir);
    }
    net->userns_fd = -1;
    net->netns_fd = -1;
    net->max_conns = cfg->max_conns ? cfg->max_conns : SBX__NET_MAX_CONNS_DEFAULT;
    net->head_timeout_ms = cfg->head_timeout_ms > 0 ? cfg->head_timeout_ms : 10000;
    net->idle_timeout_ms = cfg->idle_timeout_ms > 0 ? cfg->idle_timeout_ms : 300000;
    net->allow_loopback = cfg->test_allow_loopback;
    return net;
}

/* The proxy's rules: the allow list (normalized), the ports (80 and 443 unless given), the
 * test-only host map. */
static int load_rules(struct sbx__net *net, const struct sbx__net_config *cfg,
                      struct sbx_error *err)
{
    static const int default_ports[] = {80, 443};
    int rc;
    if (cfg->npatterns > SBX__PROXY_MAX_PATTERNS)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "allow list of %zu patterns (at most %d)",
                             cfg->npatterns, SBX__PROXY_MAX_PATTERNS);
    net->patterns = sbx_xcalloc(cfg->npatterns + 1, sizeof(char *));
    for (size_t i = 0; i < cfg->npatterns; i++) {
        if ((rc = sbx__proxy_pattern_normalize(cfg->patterns[i], &net->patterns[i], err)) < 0)
            return rc;
        net->npatterns++;
    }
    const int *ports = cfg->ports ? cfg->ports : default_ports;
    size_t nports = cfg->ports ? cfg->nports : SBX_ARRAY_LEN(default_ports);
    net->ports = sbx_xcalloc(nports + 1, sizeof(int));
    for (size_t i = 0; i < nports; i++) {
        if (ports[i] < 1 || ports[i] > 65535)
            return sbx_error_set(err, SBX_E_INVAL, 0, "proxy port %d out of range", ports[i]);
        net->ports[net->nports++] = ports[i];
    }
    for (const char *const *t = cfg->test_hosts; t && *t; t++)
        net->ntest++;
    net->test_names = sbx_xcalloc(net->ntest + 1, sizeof(char *));
    net->test_addrs = sbx_xcalloc(net->ntest + 1, sizeof(struct sockaddr_storage));
    for (size_t i = 0; i < net->ntest; i++)
        if ((rc = parse_test_host(cfg->test_hosts[i], &net->test_names[i], &net->test_addrs[i],
                                  err)) < 0)
            return rc;
    return 0;
}

/* Copies of the caller's descriptors the loop keeps: the namespaces (forwarders added later
 * create their sockets in the sandbox's network namespace) and the control channel. */
static int keep_fds(struct sbx__net *net, const struct sbx__net_config *cfg, struct sbx_error *err)
{
    net->netns_fd = fcntl(cfg->netns_fd, F_DUPFD_CLOEXEC, 3);
    if (net->netns_fd < 0)
        return sbx_error_errno(err, errno, "cannot keep the sandbox network namespace");
    if (cfg->userns_fd >= 0 && (net->userns_fd = fcntl(cfg->userns_fd, F_DUPFD_CLOEXEC, 3)) < 0)
        return sbx_error_errno(err, errno, "cannot keep the sandbox user namespace");
    if (cfg->control_fd >= 0 && (net->control.fd = fcntl(cfg->control_fd, F_DUPFD_CLOEXEC, 3)) < 0)
        return sbx_error_errno(err, errno, "cannot keep the network control channel");
    return 0;
}

/* The epoll set: the wake-up eventfd, the resolver's pipe, the control channel, and with an
 * allow list the proxy listening inside the sandbox. */
static int open_loop(struct sbx__net *net, const struct sbx__net_config *cfg, struct sbx_error *err)
{
    int pipefd[2] = {-1, -1};
    net->epfd = epoll_create1(EPOLL_CLOEXEC);
    net->wake.fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (net->epfd < 0 || net->wake.fd < 0 || pipe2(pipefd, O_CLOEXEC) < 0)
        return sbx_error_errno(err, errno, "cannot set up the network event loop");
    net->resolved.fd = pipefd[0];
    net->resolve_w = pipefd[1];
    set_events(net, &net->wake, EPOLLIN);
    set_events(net, &net->resolved, EPOLLIN);
    set_events(net, &net->control, EPOLLIN);
    if (net->npatterns > 0) {
        int port = cfg->proxy_port ? cfg->proxy_port : SBX__PROXY_DEFAULT_PORT;
        int rc = listen_inside(net, port, err);
        if (rc < 0)
            return rc;
        set_events(net, &net->proxy, EPOLLIN);
    }
    return 0;
}

int sbx__net_new(const struct sbx__net_config *cfg, struct sbx__net **out, struct sbx_error *err)
{
    struct sbx__net *net = net_alloc(cfg);
    int rc;
    if (cfg->netns_fd < 0) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "no sandbox network namespace to serve");
        goto out;
    }
    if ((rc = load_rules(net, cfg, err)) < 0 || (rc = keep_fds(net, cfg, err)) < 0 ||
        (rc = open_loop(net, cfg, err)) < 0)
        goto out;
    /* The loop's thread takes no signal: the outer process waits for them (outer_wait). */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int e = pthread_create(&net->thread, NULL, loop_main, net);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (e != 0) {
        rc = sbx_error_errno(err, e, "cannot start the network thread");
        goto out;
    }
    net->started = 1;
    *out = net;
    net = NULL;
out:
    sbx__net_free(net);
    return rc;
}

/* A unix socket listener "port-<port>.sock" in the unix dir, mode 0600 (the dir is 0700). The
 * name is bound through /proc/self/fd, so a long runtime path does not limit it; the path
 * answered must fit a socket address for clients, though. */
static int listen_unix(struct sbx__net *net, int port, char *path, size_t npath, int *out,
                       struct sbx_error *err)
{
    char name[32];
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(name, sizeof(name), "port-%d.sock", port);
    if (net->unix_dir_fd < 0)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "unix socket forwards need the sandbox's runtime directory");
    if ((size_t)snprintf(path, npath, "%s/%s", net->unix_dir, name) >= npath ||
        strlen(path) >= sizeof(sa.sun_path))
        return sbx_error_set(err, SBX_E_TOOBIG, 0,
                             "the socket path '%s/%s' is too long for a unix socket address",
                             net->unix_dir, name);
    snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d/%s", net->unix_dir_fd, name);
    (void)unlinkat(net->unix_dir_fd, name, 0); /* a listener of an earlier supervisor */
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        fchmodat(net->unix_dir_fd, name, 0600, 0) < 0 || listen(fd, 128) < 0) {
        int rc = sbx_error_errno(err, errno, "cannot listen on '%s'", path);
        if (fd >= 0)
            close(fd);
        return rc;
    }
    *out = fd;
    return 0;
}

static int add_unix(struct sbx__net *net, const struct sbx__net_forward *fwd, int *host_port,
                    char *path, size_t npath, struct sbx_error *err)
{
    char p[108];
    int fd = -1, rc = 0;
    pthread_mutex_lock(&net->lock);
    for (size_t i = 0; i < net->nfwds; i++) {
        if (net->fwds[i].h.port == fwd->port && net->fwds[i].unix_sock) {
            if (host_port)
                *host_port = 1;
            if (path)
                snprintf(path, npath, "%s", net->fwds[i].path);
            rc = sbx_error_set(err, SBX_E_EXISTS, 0, "port %d is forwarded already", fwd->port);
            goto out;
        }
    }
    if (net->nfwds >= SBX__NET_MAX_FORWARDS) {
        rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "more than %d forwarded ports",
                           SBX__NET_MAX_FORWARDS);
        goto out;
    }
    if ((rc = listen_unix(net, fwd->port, p, sizeof(p), &fd, err)) < 0)
        goto out;
    struct fwd *f = &net->fwds[net->nfwds];
    memset(f, 0, sizeof(*f));
    f->h.kind = K_FWD_LISTEN;
    f->h.fd = fd;
    f->h.port = fwd->port;
    f->h.v6 = fwd->v6;
    f->host_port = 1;
    f->unix_sock = 1;
    snprintf(f->path, sizeof(f->path), "%s", p);
    net->nfwds++;
    if (host_port)
        *host_port = 1;
    if (path)
        snprintf(path, npath, "%s", p);
    uint64_t one64 = 1;
    (void)!write(net->wake.fd, &one64, sizeof(one64));
out:
    pthread_mutex_unlock(&net->lock);
    return rc;
}

int sbx__net_forward_add(struct sbx__net *net, const struct sbx__net_forward *fwd, int *host_port,
                         char *path, size_t npath, struct sbx_error *err)
{
    const char *bind_addr = fwd->bind ? fwd->bind : "127.0.0.1";
    struct sockaddr_storage ss;
    socklen_t len;
    int fd = -1;
    int rc = 0;
    int one = 1;

    if (fwd->port < 1 || fwd->port > 65535)
        return sbx_error_set(err, SBX_E_INVAL, 0, "port %d out of range", fwd->port);
    if (fwd->unix_sock)
        return add_unix(net, fwd, host_port, path, npath, err);
    if (fwd->host_port < 0 || fwd->host_port > 65535)
        return sbx_error_set(err, SBX_E_INVAL, 0, "host port %d out of range", fwd->host_port);
    memset(&ss, 0, sizeof(ss));
    struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, bind_addr, &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)fwd->host_port);
        len = sizeof(*s4);
    } else if (inet_pton(AF_INET6, bind_addr, &s6->sin6_addr) == 1) {
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)fwd->host_port);
        len = sizeof(*s6);
    } else {
        return sbx_error_set(err, SBX_E_INVAL, 0, "bind address '%s' is not an IP address",
                             bind_addr);
    }

    pthread_mutex_lock(&net->lock);
    for (size_t i = 0; i < net->nfwds; i++) {
        if (net->fwds[i].h.port == fwd->port && !net->fwds[i].unix_sock) {
            if (host_port)
                *host_port = net->fwds[i].host_port;
            rc = sbx_error_set(err, SBX_E_EXISTS, 0, "port %d is forwarded already", fwd->port);
            goto out;
        }
    }
    if (net->nfwds >= SBX__NET_MAX_FORWARDS) {
        rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "more than %d forwarded ports",
                           SBX__NET_MAX_FORWARDS);
        goto out;
    }
    fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        bind(fd, (struct sockaddr *)&ss, len) < 0 || listen(fd, 128) < 0 ||
        getsockname(fd, (struct sockaddr *)&ss, &len) < 0) {
        rc = sbx_error_errno(err, errno, "cannot listen on '%s' port %d", bind_addr,
                             fwd->host_port);
        goto out;
    }
    struct fwd *f = &net->fwds[net->nfwds];
    memset(f, 0, sizeof(*f));
    f->h.kind = K_FWD_LISTEN;
    f->h.fd = fd;
    f->h.port = fwd->port;
    f->h.v6 = fwd->v6;
    f->host_port = ntohs(ss.ss_family == AF_INET ? s4->sin_port : s6->sin6_port);
    fd = -1;
    net->nfwds++;
    if (host_port)
        *host_port = f->host_port;
    uint64_t one64 = 1;
    (void)!write(net->wake.fd, &one64, sizeof(one64));
out:
    pthread_mutex_unlock(&net->lock);
    if (fd >= 0)
        close(fd);
    return rc;
}

int sbx__net_forward_port(struct sbx__net *net, int port)
{
    int hp = 0;
    pthread_mutex_lock(&net->lock);
    for (size_t i = 0; i < net->nfwds; i++) {
        if (net->fwds[i].h.port == port && !net->fwds[i].unix_sock)
            hp = net->fwds[i].host_port;
    }
    pthread_mutex_unlock(&net->lock);
    return hp;
}

void sbx__net_free(struct sbx__net *net)
{
    if (!net)
        return;
    if (net->started) {
        pthread_mutex_lock(&net->lock);
        net->stop = 1;
        pthread_mutex_unlock(&net->lock);
        uint64_t one = 1;
        (void)!write(net->wake.fd, &one, sizeof(one));
        pthread_join(net->thread, NULL);
    }
    while (net->conns)
        conn_free(net->conns);
    free_dead(net);
    /* lookups still running hand their job back here; wait for them (bounded by the
     * resolver's own timeouts) */
    while (net->pending_jobs > 0) {
        struct job *j;
        ssize_t n = read(net->resolved.fd, &j, sizeof(j));
        if (n == (ssize_t)sizeof(j))
            job_done(net, j);
        else if (n < 0 && errno != EINTR)
            break;
    }
    for (size_t i = 0; i < net->nfwds; i++) {
        close_handle(net, &net->fwds[i].h);
        if (net->fwds[i].unix_sock) {
            char name[32];
            snprintf(name, sizeof(name), "port-%d.sock", net->fwds[i].h.port);
            (void)unlinkat(net->unix_dir_fd, name, 0);
        }
    }
    if (net->unix_dir_fd >= 0)
        close(net->unix_dir_fd);
    free(net->unix_dir);
    close_handle(net, &net->proxy);
    close_handle(net, &net->control);
    free(net->forward_bind);
    close_handle(net, &net->wake);
    close_handle(net, &net->resolved);
    if (net->resolve_w >= 0)
        close(net->resolve_w);
    if (net->epfd >= 0)
        close(net->epfd);
    if (net->netns_fd >= 0)
        close(net->netns_fd);
    if (net->userns_fd >= 0)
        close(net->userns_fd);
    for (size_t i = 0; net->patterns && net->patterns[i]; i++)
        free(net->patterns[i]);
    free(net->patterns);
    free(net->ports);
    for (size_t i = 0; net->test_names && i < net->ntest; i++)
        free(net->test_names[i]);
    free(net->test_names);
    free(net->test_addrs);
    pthread_mutex_destroy(&net->lock);
    free(net);
}

void sbx__net_proxy_env(int port, struct sbx_strv *out)
{
    static const char *const names[] = {"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"};
    if (port == 0)
        port = SBX__PROXY_DEFAULT_PORT;
    for (size_t i = 0; i < SBX_ARRAY_LEN(names); i++)
        sbx_strv_pushf(out, "%s=http://127.0.0.1:%d", names[i], port);
    sbx_strv_push(out, "NO_PROXY=localhost,127.0.0.1,::1");
    sbx_strv_push(out, "no_proxy=localhost,127.0.0.1,::1");
}
