/* The host-side network event loop of a sandbox: the allow-list proxy and the port forwarders.
 *
 * One thread runs an epoll loop over non-blocking sockets; every connection has two bounded
 * buffers (one per direction) and a deadline. Name resolution is the only blocking step: each
 * lookup runs in a short detached thread that hands its result back through a pipe, so the
 * loop never waits for DNS. The proxy decides on the address it actually connects to, after
 * resolution, so a name that resolves (or rebinds) to an internal address is refused. This
 * file is the loop, its listeners and the API of net.h; one connection's life is conn.c. */
#include "providers/local/net/loop.h"

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

int64_t sbx__netloop_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void sbx__netloop_set_events(struct sbx__net *net, struct sbx__netloop_handle *h, uint32_t ev)
{
    if (h->fd < 0 || h->events == ev)
        return;
    struct epoll_event e = {.events = ev, .data.ptr = h};
    int op = h->events == 0 ? EPOLL_CTL_ADD : ev == 0 ? EPOLL_CTL_DEL : EPOLL_CTL_MOD;
    if (epoll_ctl(net->epfd, op, h->fd, &e) < 0 && op != EPOLL_CTL_DEL)
        sbx_log(SBX_LOG_WARN, "net: epoll_ctl: %s", strerror(errno));
    h->events = ev;
}

void sbx__netloop_close_handle(struct sbx__net *net, struct sbx__netloop_handle *h)
{
    if (h->fd < 0)
        return;
    sbx__netloop_set_events(net, h, 0);
    close(h->fd);
    h->fd = -1;
}

static void serve_control(struct sbx__net *net)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__net_reply r;
    struct sbx__net_request q = {0};
    ssize_t n = recv(net->control.fd, &q, sizeof(q), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        sbx__netloop_close_handle(net, &net->control); /* the other side is gone */
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

static int take_new_forwards(struct sbx__net *net)
{
    pthread_mutex_lock(&net->lock);
    int stop = net->stop;
    size_t n = net->nfwds;
    pthread_mutex_unlock(&net->lock);
    for (; net->nfwds_loop < n; net->nfwds_loop++)
        sbx__netloop_set_events(net, &net->fwds[net->nfwds_loop].h, EPOLLIN);
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
            struct sbx__netloop_handle *h = evs[i].data.ptr;
            switch (h->kind) {
            case K_PROXY_LISTEN:
                sbx__netloop_accept_proxy(net);
                break;
            case K_FWD_LISTEN:
                sbx__netloop_accept_forward(net, h);
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
                struct sbx__netloop_job *j;
                if (read(h->fd, &j, sizeof(j)) == (ssize_t)sizeof(j))
                    sbx__netloop_job_done(net, j);
                break;
            }
            case K_CONN:
                /* closed earlier in this batch: freed only after it */
                if (!h->conn->dead && h->fd >= 0)
                    sbx__netloop_conn_event(h->conn, h->side, evs[i].events);
                break;
            }
        }
        sbx__netloop_sweep(net);
        sbx__netloop_free_dead(net);
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
    sbx__netloop_set_events(net, &net->wake, EPOLLIN);
    sbx__netloop_set_events(net, &net->resolved, EPOLLIN);
    sbx__netloop_set_events(net, &net->control, EPOLLIN);
    if (net->npatterns > 0) {
        int port = cfg->proxy_port ? cfg->proxy_port : SBX__PROXY_DEFAULT_PORT;
        int rc = listen_inside(net, port, err);
        if (rc < 0)
            return rc;
        sbx__netloop_set_events(net, &net->proxy, EPOLLIN);
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
    struct sbx__netloop_fwd *f = &net->fwds[net->nfwds];
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
    struct sbx__netloop_fwd *f = &net->fwds[net->nfwds];
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
        sbx__netloop_conn_free(net->conns);
    sbx__netloop_free_dead(net);
    /* lookups still running hand their job back here; wait for them (bounded by the
     * resolver's own timeouts) */
    while (net->pending_jobs > 0) {
        struct sbx__netloop_job *j;
        ssize_t n = read(net->resolved.fd, &j, sizeof(j));
        if (n == (ssize_t)sizeof(j))
            sbx__netloop_job_done(net, j);
        else if (n < 0 && errno != EINTR)
            break;
    }
    for (size_t i = 0; i < net->nfwds; i++) {
        sbx__netloop_close_handle(net, &net->fwds[i].h);
        if (net->fwds[i].unix_sock) {
            char name[32];
            snprintf(name, sizeof(name), "port-%d.sock", net->fwds[i].h.port);
            (void)unlinkat(net->unix_dir_fd, name, 0);
        }
    }
    if (net->unix_dir_fd >= 0)
        close(net->unix_dir_fd);
    free(net->unix_dir);
    sbx__netloop_close_handle(net, &net->proxy);
    sbx__netloop_close_handle(net, &net->control);
    free(net->forward_bind);
    sbx__netloop_close_handle(net, &net->wake);
    sbx__netloop_close_handle(net, &net->resolved);
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
