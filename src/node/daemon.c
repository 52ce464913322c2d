/* sbx-node: the daemon's options, its listener and one thread per connection
 * (src/node/daemon.h, docs/internals/node.md). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "core/grow.h"
#include "node/daemon.h"
#include "sbx/common.h"
#include "sbx/json.h"
#include "sbx/node.h"

static const char usage[] =
        "usage: sbx-node --listen ADDR:PORT --cert FILE --key FILE --ca FILE --state DIR\n"
        "                [--name NAME] [--max-conns N] [--max-sandboxes N] [--token-ttl S]\n"
        "                [--max-conns-per-cert N] [--ws-ping S] [--allow-network-full]\n"
        "                [--revoked FILE]\n";

/* Close after the peer had its answer: ending our side first and discarding what it still
 * sends (bounded) keeps the kernel from resetting the connection over unread bytes, which would
 * lose an error answer (413) the peer has not read yet. */
static void linger_close(int fd)
{
    char b[16384];
    shutdown(fd, SHUT_WR);
    struct timeval tv = {.tv_sec = 1};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    for (size_t total = 0; total < ((size_t)4 << 20);) {
        ssize_t k = recv(fd, b, sizeof(b), 0);
        if (k <= 0)
            break;
        total += (size_t)k;
    }
    close(fd);
}

/* The answer of a connection over a bound: 503 with Retry-After, the error body naming it. */
static void respond_busy(struct node_conn *c, const char *why)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *b = json_pack("{s:s, s:s}", "code", "busy", "message", why);
    char *text = sbx_json_dumps(b, JSON_COMPACT);
    char head[256];
    int n = snprintf(head, sizeof(head),
                     "HTTP/1.1 503 Service Unavailable\r\nRetry-After: %d\r\nContent-Type: "
                     "application/json\r\nContent-Length: %zu\r\nConnection: close\r\n"
                     "Sbx-Node-Version: " NODE_VERSION "\r\n\r\n",
                     NODE_RETRY_S, text ? strlen(text) : 0);
    if (node_send(c, head, (size_t)n, &err) == 0 && text)
        node_send(c, text, strlen(text), &err);
    free(text);
    json_decref(b);
}

/* Count the connection against its certificate: 0, or -1 when that certificate holds
 * max_per_cert connections already (not counted then). */
static int owner_take(struct node_daemon *d, const char *owner)
{
    int rc = 0;
    size_t i = 0;
    pthread_mutex_lock(&d->mu);
    while (i < d->n_owners && strcmp(d->owners[i].owner, owner) != 0)
        i++;
    if (i == d->n_owners) {
        SBX_ALLOC_GROW(d->owners, d->n_owners + 1, d->cap_owners);
        memset(&d->owners[i], 0, sizeof(d->owners[i]));
        snprintf(d->owners[i].owner, sizeof(d->owners[i].owner), "%s", owner);
        d->n_owners++;
    }
    if (d->owners[i].n >= d->max_per_cert)
        rc = -1;
    else
        d->owners[i].n++;
    pthread_mutex_unlock(&d->mu);
    return rc;
}

static void owner_drop(struct node_daemon *d, const char *owner)
{
    pthread_mutex_lock(&d->mu);
    for (size_t i = 0; i < d->n_owners; i++)
        if (strcmp(d->owners[i].owner, owner) == 0 && --d->owners[i].n == 0) {
            d->owners[i] = d->owners[--d->n_owners];
            break;
        }
    pthread_mutex_unlock(&d->mu);
}

/* Requests until the peer closes, one is upgraded, or an error ends the connection. */
static void serve_requests(struct node_conn *c)
{
    struct sbx_error err = SBX_ERROR_INIT;
    for (;;) {
        struct node_req r;
        int rc = node_read_request(c, &r, &err);
        if (rc < 0 && err.code != SBX_E_IO && err.code != SBX_E_TIMEOUT) {
            c->closing = 1;
            node_respond_error(c, &err);
        }
        if (rc != 0) {
            node_req_release(&r);
            break;
        }
        int ws = r.upgrade_ws;
        c->cur = &r;
        node_handle(c, &r);
        c->cur = NULL;
        node_req_release(&r);
        if (ws || r.body_left)
            break; /* an upgraded connection ends with its command; a body not read */
    }
}

static void *conn_main(void *arg)
{
    struct node_conn *c = arg;
    struct node_daemon *d = c->d;
    struct sbx_error err = SBX_ERROR_INIT;
    char why[200];
    sbx_buf_init(&c->in, NODE_HEAD_MAX + NODE_BODY_MAX + 65536);
    if (node_tls_accept(c, &err) == 0) {
        if (c->refuse) {
            snprintf(why, sizeof(why), "node '%s' serves its most connections (%u) now", d->name,
                     d->max_conns);
            respond_busy(c, why);
        } else if (owner_take(d, c->owner) < 0) {
            snprintf(why, sizeof(why),
                     "node '%s' serves its most connections of one certificate (%u) now", d->name,
                     d->max_per_cert);
            respond_busy(c, why);
        } else {
            serve_requests(c);
            owner_drop(d, c->owner);
        }
        SSL_shutdown(c->ssl);
    }
    linger_close(c->fd);
    if (c->ssl)
        SSL_free(c->ssl);
    sbx_buf_release(&c->in);
    pthread_mutex_lock(&d->mu);
    if (c->refuse)
        d->refusing--;
    else
        d->conns--;
    pthread_mutex_unlock(&d->mu);
    free(c);
    return NULL;
}

static int listen_on(const char *spec, struct sbx_error *err)
{
    char host[128];
    const char *colon = strrchr(spec, ':');
    char *end;
    long port = colon ? strtol(colon + 1, &end, 10) : -1;
    if (!colon || *end || port < 1 || port > 65535 || (size_t)(colon - spec) >= sizeof(host))
        return sbx_error_set(err, SBX_E_INVAL, 0, "--listen '%s' is not ADDR:PORT", spec);
    memcpy(host, spec, (size_t)(colon - spec));
    host[colon - spec] = 0;
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port)};
    struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    int v6 = inet_pton(AF_INET6, host[0] == '[' ? host + 1 : host, &a6.sin6_addr) == 1;
    if (!v6 && inet_pton(AF_INET, host, &a4.sin_addr) != 1)
        return sbx_error_set(err, SBX_E_INVAL, 0, "--listen '%s' needs an ip address", spec);
    int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0)
        return sbx_error_errno(err, errno, "socket");
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if ((v6 ? bind(fd, (struct sockaddr *)&a6, sizeof(a6))
            : bind(fd, (struct sockaddr *)&a4, sizeof(a4))) < 0 ||
        listen(fd, 128) < 0) {
        int e = errno;
        close(fd);
        return sbx_error_errno(err, e, "cannot listen on '%s'", spec);
    }
    return fd;
}

struct opts {
    const char *listen, *cert, *key, *ca, *state, *name, *revoked;
    long max_conns, max_sandboxes, ttl, max_per_cert, ping_s;
    int allow_network_full;
};

static int parse_args(int argc, char **argv, struct opts *o)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--allow-network-full") == 0) {
            o->allow_network_full = 1;
            continue;
        }
        long *num = strcmp(a, "--max-conns") == 0            ? &o->max_conns
                    : strcmp(a, "--max-conns-per-cert") == 0 ? &o->max_per_cert
                    : strcmp(a, "--ws-ping") == 0            ? &o->ping_s
                    : strcmp(a, "--max-sandboxes") == 0      ? &o->max_sandboxes
                    : strcmp(a, "--token-ttl") == 0          ? &o->ttl
                                                             : NULL;
        const char **str = strcmp(a, "--listen") == 0    ? &o->listen
                           : strcmp(a, "--cert") == 0    ? &o->cert
                           : strcmp(a, "--key") == 0     ? &o->key
                           : strcmp(a, "--ca") == 0      ? &o->ca
                           : strcmp(a, "--state") == 0   ? &o->state
                           : strcmp(a, "--name") == 0    ? &o->name
                           : strcmp(a, "--revoked") == 0 ? &o->revoked
                                                         : NULL;
        char *end = NULL;
        if ((!num && !str) || !v)
            return -1;
        if (str)
            *str = v;
        else if ((*num = strtol(v, &end, 10)) < 1 || *end || *num > 1000000)
            return -1;
        i++;
    }
    return o->listen && o->cert && o->key && o->ca && o->state ? 0 : -1;
}

static int serve(struct node_daemon *d)
{
    for (;;) {
        int fd = accept4(d->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE)
                continue;
            return -1;
        }
        /* An answer's head and body are separate writes: without this the body waits for
         * the peer's delayed acknowledgement of the head (tens of milliseconds a request). */
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        /* Over the bound: a few are told so (503, Retry-After) after their handshake; past
         * those the socket is closed. */
        pthread_mutex_lock(&d->mu);
        int full = d->conns >= d->max_conns;
        int refuse = full && d->refusing < NODE_REFUSERS;
        if (!full)
            d->conns++;
        else if (refuse)
            d->refusing++;
        pthread_mutex_unlock(&d->mu);
        if (full && !refuse) {
            close(fd);
            continue;
        }
        struct node_conn *c = sbx_xcalloc(1, sizeof(*c));
        pthread_t t;
        pthread_attr_t at;
        c->d = d;
        c->fd = fd;
        c->refuse = full;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &at, conn_main, c) != 0) {
            close(fd);
            free(c);
            pthread_mutex_lock(&d->mu);
            if (full)
                d->refusing--;
            else
                d->conns--;
            pthread_mutex_unlock(&d->mu);
        }
        pthread_attr_destroy(&at);
    }
}

int sbx__node_main(int argc, char **argv)
{
    struct opts o = {.name = "sbx-node",
                     .max_conns = 512,
                     .max_sandboxes = 256,
                     .ttl = 3600,
                     .max_per_cert = 64,
                     .ping_s = NODE_PING_S};
    if (parse_args(argc, argv, &o) < 0) {
        fputs(usage, stderr);
        return 2;
    }
    struct sbx_error err = SBX_ERROR_INIT;
    struct node_daemon d = {.listen_fd = -1,
                            .state_dir = o.state,
                            .name = o.name,
                            .max_conns = (unsigned)o.max_conns,
                            .max_per_cert = (unsigned)o.max_per_cert,
                            .ping_s = (unsigned)o.ping_s,
                            .max_sandboxes = (unsigned)o.max_sandboxes,
                            .token_ttl_s = o.ttl,
                            .allow_network_full = o.allow_network_full,
                            .revoked_path = o.revoked};
    pthread_mutex_init(&d.mu, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (sbx_node_name_check(o.name, &err) < 0 ||
        (mkdir(o.state, 0700) < 0 && errno != EEXIST &&
         sbx_error_errno(&err, errno, "cannot make '%s'", o.state) < 0) ||
        node_records_load(&d, &err) < 0 || node_tls_revoked_load(&d, &err) < 0 ||
        node_tls_init(&d, o.cert, o.key, o.ca, &err) < 0 ||
        (d.listen_fd = listen_on(o.listen, &err)) < 0) {
        fprintf(stderr, "sbx-node: %s\n", err.msg);
        return 1;
    }
    fprintf(stderr, "sbx-node: '%s' listening on %s (%zu sandboxes known)\n", o.name, o.listen,
            d.n_recs);
    if (d.revoked_path)
        fprintf(stderr, "sbx-node: %zu certificates revoked (%s)\n", d.n_revoked, d.revoked_path);
    serve(&d);
    fprintf(stderr, "sbx-node: accept: %s\n", strerror(errno));
    return 1;
}
