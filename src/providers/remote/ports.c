/* Ports of a remote sandbox on the harness's host (remote.h): the node is asked whether
 * something listens (GET /v1/sandboxes/ID/ports/P), then a detached relay process listens on
 * 127.0.0.1:HOSTPORT here and carries each connection it accepts over its own WebSocket
 * (GET /v1/sandboxes/ID/portforward?ports=P, portforward.k8s.io channels, the shared pump of
 * wire/conn.h). One relay per port and sandbox: its record, locked while it runs, says where it
 * listens, so resolving the port again gives the same URL. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "core/spawn.h"
#include "providers/remote/remote.h"
#include "sandbox/host/host.h"
#include "sandbox/session/internal.h"
#include "sandbox/wire/channel.h"
#include "sandbox/wire/conn.h"
#include "sbx/common.h"
#include "sbx/fs.h"
#include "sbx/time.h"

enum { FD_LISTEN = 3, FD_RECORD, FD_STATUS };

#define RECORD_MAX   128
#define CHECK_MS     5000 /* how often a relay asks whether its sandbox is still there */
#define CONNS_MAX    256
#define START_MS     30000
#define STOP_WAIT_MS 3000
#define OPEN_MS      15000

/* ---------------------------------------------------------------------------------------------
 * Records: <runtime base>/remote/<id>/ports/<port>, "PID HOSTPORT\n" */

static int private_dir(const char *path, struct sbx_error *err)
{
    struct stat st;
    if (mkdir(path, 0700) < 0 && errno != EEXIST)
        return sbx_error_errno(err, errno, "cannot create '%s'", path);
    if (lstat(path, &st) < 0)
        return sbx_error_errno(err, errno, "cannot stat '%s'", path);
    if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077))
        return sbx_error_set(err, SBX_E_PERM, 0, "'%s' is not a private directory of ours", path);
    return 0;
}

static int ports_dir(const char *id, int make, char **out, struct sbx_error *err)
{
    char *base = NULL;
    size_t n = strlen(id);
    if (n == 0 || n > 64 || strspn(id, "0123456789abcdef") != n)
        return sbx_error_set(err, SBX_E_INVAL, 0, "bad sandbox id '%.64s'", id);
    int rc = sbx__runtime_base(NULL, &base, err);
    if (rc < 0)
        return rc;
    char *r = sbx_xasprintf("%s/remote", base), *box = sbx_xasprintf("%s/%s", r, id);
    char *ports = sbx_xasprintf("%s/ports", box);
    if (make && ((rc = private_dir(r, err)) < 0 || (rc = private_dir(box, err)) < 0 ||
                 (rc = private_dir(ports, err)) < 0))
        free(ports);
    else
        *out = ports;
    free(r);
    free(box);
    free(base);
    return rc;
}

static int read_record(int fd, pid_t *pid, int *hostport)
{
    char buf[RECORD_MAX];
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
    long long p = 0;
    int hp = 0;
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    if (sscanf(buf, "%lld %d", &p, &hp) != 2 || p <= 0 || hp < 1 || hp > 65535)
        return -1;
    *pid = (pid_t)p;
    *hostport = hp;
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Resolving a port */

static int listen_loopback(int *lsock, int *hostport, struct sbx_error *err)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    *lsock = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (*lsock < 0)
        return sbx_error_errno(err, errno, "socket");
    if (bind(*lsock, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(*lsock, 64) < 0 ||
        getsockname(*lsock, (struct sockaddr *)&a, &alen) < 0)
        return sbx_error_errno(err, errno, "cannot listen on 127.0.0.1");
    *hostport = ntohs(a.sin_port);
    return 0;
}

/* Wait for the relay's word on the status pipe: "ok", or why it did not start. */
static int relay_said(int fd, struct sbx_error *err)
{
    char msg[512];
    size_t len = 0;
    int64_t deadline = sbx_deadline_after_ms(START_MS);
    while (len < sizeof(msg) - 1) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int ms = sbx_deadline_poll_ms(deadline);
        if (ms == 0 || (poll(&pf, 1, ms) < 0 && errno != EINTR))
            break;
        ssize_t n = read(fd, msg + len, sizeof(msg) - 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    msg[len] = '\0';
    if (strcmp(msg, "ok") == 0)
        return 0;
    return sbx_error_set(err, SBX_E_SANDBOX, 0, "the port relay did not start: %s",
                         len ? msg : "it said nothing");
}

static int spawn_relay(struct sbx__remote_session *s, int port, int lsock, int record,
                       struct sbx_error *err)
{
    char *prog = NULL, portarg[16];
    int status[2] = {-1, -1}, st;
    struct sbx__child child = {.pid = -1, .in = -1, .out = -1, .err = -1};
    int rc = sbx__sbx_program(&prog, err);
    if (rc < 0)
        return rc;
    snprintf(portarg, sizeof(portarg), "%d", port);
    const char *opt[4];
    static const char *const keys[] = {"node", "node_ca", "node_cert", "node_key"};
    for (size_t i = 0; i < 4; i++) {
        opt[i] = json_string_value(json_object_get(s->conn, keys[i]));
        if (!opt[i])
            opt[i] = "";
    }
    const char *argv[] = {
            prog, SBX__REMOTE_RELAY_VERB, s->base.id, portarg, opt[0], opt[1], opt[2], opt[3],
            NULL};
    /* Where the runtime files are, nothing else of this process's environment. */
    const char *env[4] = {NULL};
    char *own[4] = {NULL};
    size_t ne = 0;
    static const char *const pass[] = {"HOME", "TMPDIR", "XDG_RUNTIME_DIR"};
    for (size_t i = 0; i < SBX_ARRAY_LEN(pass); i++)
        if (getenv(pass[i])) {
            own[ne] = sbx_xasprintf("%s=%s", pass[i], getenv(pass[i]));
            env[ne] = own[ne];
            ne++;
        }
    if (pipe2(status, O_CLOEXEC) < 0) {
        rc = sbx_error_errno(err, errno, "cannot start a port relay");
        goto out;
    }
    struct sbx__spawn sp = {
            .program = prog, .argv = argv, .env = env, .new_session = 1, .nkeep = 3};
    sp.keep[0] = (struct sbx__spawn_keep){.fd = lsock, .at = FD_LISTEN};
    sp.keep[1] = (struct sbx__spawn_keep){.fd = record, .at = FD_RECORD};
    sp.keep[2] = (struct sbx__spawn_keep){.fd = status[1], .at = FD_STATUS};
    if ((rc = sbx__spawn_start(&sp, &child, err)) < 0) {
        sbx_error_prefix(err, "port relay");
        goto out;
    }
    sbx_fd_close(&status[1]);
    rc = relay_said(status[0], err);
    (void)sbx__child_wait(&child, 5000, &st, NULL);
out:
    sbx_fd_close(&status[0]);
    sbx_fd_close(&status[1]);
    for (size_t i = 0; i < ne; i++)
        free(own[i]);
    free(prog);
    return rc;
}

int sbx__remote_resolve_port(struct sbx_session *bs, int port, char **out_url,
                             struct sbx_error *err)
{
    struct sbx__remote_session *s = (struct sbx__remote_session *)bs;
    char *dir = NULL, *path = NULL;
    int fd = -1, lsock = -1, hostport = 0;
    pid_t pid;
    if (port < 1 || port > 65535)
        return sbx_error_set(err, SBX_E_INVAL, 0, "port %d is not in 1..65535", port);
    /* The node answers not_found when nothing listens there. */
    char *q = sbx_xasprintf("/v1/sandboxes/%s/ports/%d", s->base.id, port);
    int rc = sbx__remote_call(s->ep, "GET", q, s->token, NULL, NULL, err);
    free(q);
    if (rc == 0)
        rc = ports_dir(s->base.id, 1, &dir, err);
    if (rc < 0)
        return rc;
    path = sbx_xasprintf("%s/%d", dir, port);
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        rc = sbx_error_errno(err, errno, "cannot open '%s'", path);
    } else if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        /* Held: a live relay, whose record says where it listens. */
        if (read_record(fd, &pid, &hostport) < 0)
            rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "the relay record '%s' is garbled", path);
    } else if ((rc = listen_loopback(&lsock, &hostport, err)) == 0) {
        rc = spawn_relay(s, port, lsock, fd, err);
    }
    if (rc == 0)
        *out_url = sbx_xasprintf("http://127.0.0.1:%d", hostport);
    sbx_fd_close(&lsock);
    sbx_fd_close(&fd);
    free(path);
    free(dir);
    return rc;
}

void sbx__remote_forward_forget(const char *id)
{
    char *dir = NULL;
    struct sbx_error err = SBX_ERROR_INIT;
    if (ports_dir(id, 0, &dir, &err) < 0)
        return;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char *p = sbx_xasprintf("%s/%s", dir, e->d_name);
        int fd = open(p, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
        pid_t pid;
        int hp;
        /* Locked: its relay runs (and is the pid it wrote): end it, and wait until it did. */
        if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) < 0 && read_record(fd, &pid, &hp) == 0) {
            (void)kill(pid, SIGTERM);
            int64_t deadline = sbx_deadline_after_ms(STOP_WAIT_MS);
            while (flock(fd, LOCK_EX | LOCK_NB) < 0 && sbx_deadline_poll_ms(deadline) > 0)
                sbx_sleep_ms(10);
        }
        if (fd >= 0)
            close(fd);
        (void)unlink(p);
        free(p);
    }
    if (d)
        closedir(d);
    char *box = sbx_xasprintf("%.*s", (int)(strlen(dir) - strlen("/ports")), dir);
    (void)rmdir(dir);
    (void)rmdir(box);
    free(box);
    free(dir);
}

/* ---------------------------------------------------------------------------------------------
 * The relay process */

struct relay {
    struct sbx__endpoint *ep;
    const char *id;
    int port;
    pthread_mutex_t lock; /* conns, token, renew_at */
    int conns;
    char token[SBX__REMOTE_TOKEN_MAX + 1];
    int64_t renew_at; /* seconds since the epoch: mint a new token from then on */
};

struct relay_conn {
    struct relay *r;
    int fd;
};

/* A token minted with the harness's certificate (the owner's), renewed at half its life.
 * Called with r->lock held. */
static int token_fresh(struct relay *r, struct sbx_error *err)
{
    int64_t now = (int64_t)time(NULL);
    if (r->token[0] && now < r->renew_at)
        return 0;
    json_t *ans = NULL;
    char *path = sbx_xasprintf("/v1/sandboxes/%s/token", r->id);
    int rc = sbx__remote_call(r->ep, "POST", path, NULL, NULL, &ans, err);
    free(path);
    const char *t = json_string_value(json_object_get(ans, "token"));
    json_int_t until = json_integer_value(json_object_get(ans, "token_expires"));
    if (rc == 0 && (!t || strlen(t) > SBX__REMOTE_TOKEN_MAX))
        rc = sbx_error_set(err, SBX_E_API, 0, "the node sent no token for sandbox '%s'", r->id);
    if (rc == 0) {
        snprintf(r->token, sizeof(r->token), "%s", t);
        r->renew_at = now + (until > now ? (until - now) / 2 : 0);
    }
    json_decref(ans);
    return rc;
}

static void relay_one(struct relay *r, int fd)
{
    static const char *const protocols[] = {SBX__PF_PROTOCOL, NULL};
    char path[160], line[SBX__REMOTE_TOKEN_MAX + 16];
    struct sbx_error e = SBX_ERROR_INIT;
    struct sbx__wsconn *w = NULL;
    pthread_mutex_lock(&r->lock);
    int rc = token_fresh(r, &e);
    snprintf(line, sizeof(line), "Sbx-Token: %s", r->token);
    pthread_mutex_unlock(&r->lock);
    const char *headers[] = {SBX__REMOTE_VERSION_HEADER, line, NULL};
    snprintf(path, sizeof(path), "/v1/sandboxes/%s/portforward?ports=%d", r->id, r->port);
    if (rc == 0)
        rc = sbx__wsconn_open(r->ep, path, protocols, headers, 0, OPEN_MS, &w, &e);
    explicit_bzero(line, sizeof(line));
    if (rc == 0)
        sbx__pf_pump(w, (uint16_t)r->port, fd);
    if (w) {
        (void)sbx__wsconn_close(w, SBX__WS_CLOSE_NORMAL, NULL, sbx_deadline_after_ms(1000), NULL);
        sbx__wsconn_free(w);
    }
}

static void *conn_main(void *arg)
{
    struct relay_conn *c = arg;
    relay_one(c->r, c->fd);
    close(c->fd);
    pthread_mutex_lock(&c->r->lock);
    c->r->conns--;
    pthread_mutex_unlock(&c->r->lock);
    free(c);
    return NULL;
}

/* Whether the relay should go on: its record is still there and the node still holds the
 * sandbox for this harness (a node that cannot be reached now may come back: go on). */
static int still_wanted(struct relay *r)
{
    struct stat st;
    struct sbx_error e = SBX_ERROR_INIT;
    if (fstat(FD_RECORD, &st) < 0 || st.st_nlink == 0)
        return 0;
    pthread_mutex_lock(&r->lock);
    int rc = token_fresh(r, &e);
    pthread_mutex_unlock(&r->lock);
    return rc == 0 || (rc != -SBX_E_PERM && rc != -SBX_E_NOTFOUND);
}

static void accept_one(struct relay *r)
{
    int fd = accept4(FD_LISTEN, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0)
        return;
    pthread_mutex_lock(&r->lock);
    int full = r->conns >= CONNS_MAX;
    if (!full)
        r->conns++;
    pthread_mutex_unlock(&r->lock);
    struct relay_conn *c = full ? NULL : sbx_xcalloc(1, sizeof(*c));
    pthread_t th;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (c) {
        c->r = r;
        c->fd = fd;
    }
    if (!c || pthread_create(&th, &at, conn_main, c) != 0) {
        close(fd);
        if (c) {
            free(c);
            pthread_mutex_lock(&r->lock);
            r->conns--;
            pthread_mutex_unlock(&r->lock);
        }
    }
    pthread_attr_destroy(&at);
}

static void serve(struct relay *r)
{
    int64_t next_check = sbx_deadline_after_ms(CHECK_MS);
    for (;;) {
        struct pollfd pf = {.fd = FD_LISTEN, .events = POLLIN};
        int n = poll(&pf, 1, sbx_deadline_poll_ms(next_check));
        if (n < 0 && errno != EINTR)
            return;
        if (sbx_deadline_poll_ms(next_check) == 0) {
            if (!still_wanted(r))
                return;
            next_check = sbx_deadline_after_ms(CHECK_MS);
        }
        if (n > 0 && (pf.revents & POLLIN))
            accept_one(r);
    }
}

static void say(const char *msg)
{
    ssize_t n = write(FD_STATUS, msg, strlen(msg));
    (void)n;
    close(FD_STATUS);
}

int sbx__remote_relay_main(int argc, char **argv)
{
    if (argc != 7) {
        say("the relay takes ID PORT NODE CA CERT KEY");
        return 2;
    }
    /* Detach: the first process exits, the relay is nobody's child. */
    pid_t p = fork();
    if (p < 0)
        return 1;
    if (p > 0)
        _exit(0);
    signal(SIGPIPE, SIG_IGN);
    char *end = NULL;
    long port = strtol(argv[2], &end, 10);
    struct relay r = {.id = argv[1], .port = (int)port};
    struct sbx__endpoint_opts eo = {.url = argv[3],
                                    .name = "the sbx-node daemon",
                                    .ca_file = argv[4],
                                    .cert_file = argv[5],
                                    .key_file = argv[6],
                                    .http = SBX__HTTP_1_1};
    struct sbx_error e = SBX_ERROR_INIT;
    pthread_mutex_init(&r.lock, NULL);
    if (*end || port < 1 || port > 65535) {
        say("bad port");
        return 1;
    }
    /* The first token now: a relay that cannot reach the node says so at once. */
    if (sbx__endpoint_new(&eo, &r.ep, &e) < 0 || token_fresh(&r, &e) < 0) {
        say(e.msg);
        return 1;
    }
    char rec[RECORD_MAX];
    int hp = 0;
    struct sockaddr_in a;
    socklen_t alen = sizeof(a);
    if (getsockname(FD_LISTEN, (struct sockaddr *)&a, &alen) == 0)
        hp = ntohs(a.sin_port);
    snprintf(rec, sizeof(rec), "%d %d\n", (int)getpid(), hp);
    if (ftruncate(FD_RECORD, 0) < 0 || pwrite(FD_RECORD, rec, strlen(rec), 0) < 0) {
        say("cannot write the record");
        return 1;
    }
    say("ok");
    serve(&r);
    sbx__endpoint_free(r.ep);
    explicit_bzero(r.token, sizeof(r.token));
    return 0;
}
