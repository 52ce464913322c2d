/* Ports of a Kubernetes sandbox on this host: the relay processes of forward.h.
 *
 * pods/portforward over WebSocket (the channel protocol, "v4.channel.k8s.io" or
 * "portforward.k8s.io"): one WebSocket per accepted connection, asking for the one port;
 * channel 0 carries its data and channel 1 its errors, each starting with the port number
 * (wire/channel.h, sbx__pf_*). The protocol has no half-close: when either side ends, the
 * whole connection ends. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "core/spawn.h"
#include "providers/kubernetes/forward.h"
#include "sandbox/host/host.h"
#include "sandbox/session/internal.h"
#include "sandbox/wire/channel.h"
#include "sandbox/wire/conn.h"
#include "sbx/fs.h"
#include "sbx/time.h"

enum { FD_LISTEN = 3, FD_RECORD, FD_STATUS };

#define RECORD_MAX   128
#define CHECK_MS     2000 /* how often a relay looks at its pod and its record */
#define CONNS_MAX    256
#define START_MS     30000
#define STOP_WAIT_MS 3000

/* ---------------------------------------------------------------------------------------------
 * Records */

static int check_id(const char *id, struct sbx_error *err)
{
    size_t n = id ? strlen(id) : 0;
    int ok = n > 0 && n <= 64;
    for (size_t i = 0; ok && i < n; i++)
        ok = (id[i] >= 'a' && id[i] <= 'f') || (id[i] >= '0' && id[i] <= '9');
    return ok ? 0 : sbx_error_set(err, SBX_E_INVAL, 0, "bad sandbox id '%s'", id ? id : "");
}

static int make_dir(const char *path, struct sbx_error *err)
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

/* <runtime base>/kubernetes/<id>/ports, made when make is set. */
static int ports_dir(const char *id, int make, char **out, struct sbx_error *err)
{
    char *base = NULL;
    int rc = check_id(id, err);
    if (rc == 0)
        rc = sbx__runtime_base(NULL, &base, err);
    if (rc < 0)
        return rc;
    char *k = sbx_xasprintf("%s/kubernetes", base);
    char *box = sbx_xasprintf("%s/%s", k, id);
    char *ports = sbx_xasprintf("%s/ports", box);
    if (make && ((rc = make_dir(k, err)) < 0 || (rc = make_dir(box, err)) < 0 ||
                 (rc = make_dir(ports, err)) < 0))
        free(ports);
    else
        *out = ports;
    free(k);
    free(box);
    free(base);
    return rc;
}

/* A record: "PID HOSTPORT\n". */
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
 * Starting a relay */

/* Whether something listens on port in the pod (its own socket tables). */
static int pod_listens(const struct sbx__kube_target *t, int port, int *out, struct sbx_error *err)
{
    const char *argv[] = {"cat", "/proc/net/tcp", "/proc/net/tcp6", NULL};
    struct sbx_buf o, e;
    sbx_buf_init(&o, (size_t)16 << 20);
    sbx_buf_init(&e, 65536);
    struct sbx__kube_run io = {.argv = argv, .input_fd = -1, .output_fd = -1, .out = &o, .err = &e};
    /* cat fails on a kernel without IPv6 (no tcp6) but has printed tcp: the text decides. */
    int rc = sbx__kube_run(t, &io, err);
    if (rc == 0)
        *out = sbx__net_table_listens(o.data ? o.data : "", o.len, port);
    sbx_buf_release(&o);
    sbx_buf_release(&e);
    return rc;
}

static void put_env(const char **env, size_t *n, char **own, const char *name)
{
    const char *v = getenv(name);
    if (v) {
        own[*n] = sbx_xasprintf("%s=%s", name, v);
        env[*n] = own[*n];
        (*n)++;
    }
}

/* Run the relay: a detached process (its first process forks it and exits) that says "ok" on
 * the status pipe once it reaches the API server, or why not. */
static int spawn_relay(const struct sbx__kube_target *t, int port, int lsock, int record,
                       struct sbx_error *err)
{
    char *prog = NULL, portarg[16], msg[512];
    int status[2] = {-1, -1}, rc, st;
    struct sbx__child child = {.pid = -1, .in = -1, .out = -1, .err = -1};
    const char *kc = t->api->kubeconfig ? t->api->kubeconfig : getenv("KUBECONFIG");
    if ((rc = sbx__sbx_program(&prog, err)) < 0)
        return rc;
    snprintf(portarg, sizeof(portarg), "%d", port);
    const char *argv[] = {prog,
                          SBX__KUBE_RELAY_VERB,
                          t->id,
                          portarg,
                          t->api->namespace_name,
                          t->pod,
                          t->api->context,
                          kc ? kc : "",
                          t->api->in_cluster ? "1" : "0",
                          NULL};
    /* What finding the credentials needs, nothing else of this process's environment. */
    const char *env[8] = {NULL};
    char *own[8] = {NULL};
    size_t ne = 0;
    static const char *const pass[] = {"HOME", "TMPDIR", "XDG_RUNTIME_DIR",
                                       "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"};
    for (size_t i = 0; i < SBX_ARRAY_LEN(pass); i++)
        put_env(env, &ne, own, pass[i]);
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
    size_t len = 0;
    ssize_t n;
    int64_t deadline = sbx_deadline_after_ms(START_MS);
    while (len < sizeof(msg) - 1) {
        struct pollfd pf = {.fd = status[0], .events = POLLIN};
        int ms = sbx_deadline_poll_ms(deadline);
        if (ms == 0 || (poll(&pf, 1, ms) < 0 && errno != EINTR))
            break;
        n = read(status[0], msg + len, sizeof(msg) - 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    msg[len] = '\0';
    (void)sbx__child_wait(&child, 5000, &st, NULL);
    if (strcmp(msg, "ok") != 0)
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "the port relay did not start: %s",
                           len ? msg : "it said nothing");
out:
    sbx_fd_close(&status[0]);
    sbx_fd_close(&status[1]);
    for (size_t i = 0; i < ne; i++)
        free(own[i]);
    free(prog);
    return rc;
}

static int listen_loopback(int *lsock, int *hostport, struct sbx_error *err)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    *lsock = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (*lsock < 0)
        return sbx_error_errno(err, errno, "socket");
    if (bind(*lsock, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(*lsock, 64) < 0 ||
        getsockname(*lsock, (struct sockaddr *)&a, &alen) < 0)
        return sbx_error_errno(err, errno, "cannot listen on 127.0.0.1");
    *hostport = ntohs(a.sin_port);
    return 0;
}

static int forward(const struct sbx__kube_target *t, int port, int check, char **out_url,
                   struct sbx_error *err)
{
    char *dir = NULL, *path = NULL;
    int fd = -1, lsock = -1, listens = 0, hostport = 0;
    pid_t pid;
    int rc = port < 1 || port > 65535
                     ? sbx_error_set(err, SBX_E_INVAL, 0, "port %d is not in 1..65535", port)
                     : 0;
    if (rc == 0 && check)
        rc = pod_listens(t, port, &listens, err);
    else if (rc == 0)
        listens = 1;
    if (rc == 0 && !listens)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "nothing listens on port %d in sandbox '%s'",
                           port, t->id);
    if (rc == 0)
        rc = ports_dir(t->id, 1, &dir, err);
    if (rc < 0)
        return rc;
    path = sbx_xasprintf("%s/%d", dir, port);
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        rc = sbx_error_errno(err, errno, "cannot open '%s'", path);
        goto out;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        /* Held: a live relay, whose record says where it listens. */
        rc = read_record(fd, &pid, &hostport) == 0
                     ? 0
                     : sbx_error_set(err, SBX_E_SANDBOX, 0, "the relay record '%s' is garbled",
                                     path);
        goto out;
    }
    if ((rc = listen_loopback(&lsock, &hostport, err)) < 0 ||
        (rc = spawn_relay(t, port, lsock, fd, err)) < 0)
        goto out;
out:
    if (rc == 0)
        *out_url = sbx_xasprintf("http://127.0.0.1:%d", hostport);
    sbx_fd_close(&lsock);
    sbx_fd_close(&fd);
    free(path);
    free(dir);
    return rc;
}

int sbx__kube_forward(const struct sbx__kube_target *t, int port, char **out_url,
                      struct sbx_error *err)
{
    return forward(t, port, 1, out_url, err);
}

int sbx__kube_forward_unchecked(const struct sbx__kube_target *t, int port, char **out_url,
                                struct sbx_error *err)
{
    return forward(t, port, 0, out_url, err);
}

int sbx__kube_forward_forget(const char *id, struct sbx_error *err)
{
    char *dir = NULL;
    int rc = ports_dir(id, 0, &dir, err);
    if (rc < 0)
        return rc;
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
        if (unlink(p) < 0 && errno != ENOENT && rc == 0)
            rc = sbx_error_errno(err, errno, "cannot remove '%s'", p);
        free(p);
    }
    if (d)
        closedir(d);
    char *box = sbx_xasprintf("%.*s", (int)(strlen(dir) - strlen("/ports")), dir);
    (void)rmdir(dir);
    (void)rmdir(box);
    free(box);
    free(dir);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * The relay process */

struct relay {
    struct sbx__kube_api *api;
    const char *pod, *id;
    int port;
    pthread_mutex_t lock;
    int conns;
};

struct relay_conn {
    struct relay *r;
    int fd;
};

/* One accepted connection carried over its own port-forward WebSocket. */
static void relay_one(struct relay *r, int fd)
{
    static const char *const protocols[] = {"v4.channel.k8s.io", SBX__PF_PROTOCOL, NULL};
    char q[32];
    snprintf(q, sizeof(q), "ports=%d", r->port);
    char *path = sbx__kube_path(r->api, SBX__KUBE_POD, r->pod, "portforward", q);
    struct sbx__wsconn *w = NULL;
    struct sbx_error e = SBX_ERROR_INIT;
    int rc = sbx__wsconn_open(r->api->ep, path, protocols, NULL, 0, 0, &w, &e);
    free(path);
    if (rc == 0)
        sbx__pf_pump(w, (uint16_t)r->port, fd);
    if (w) {
        (void)sbx__wsconn_close(w, SBX__WS_CLOSE_NORMAL, NULL, sbx_deadline_after_ms(1000), NULL);
        sbx__wsconn_free(w);
    }
}

static void *conn_main(void *arg)
{
    struct relay_conn *rc = arg;
    relay_one(rc->r, rc->fd);
    close(rc->fd);
    pthread_mutex_lock(&rc->r->lock);
    rc->r->conns--;
    pthread_mutex_unlock(&rc->r->lock);
    free(rc);
    return NULL;
}

/* Whether the relay should go on: its record is still there and its pod still exists. */
static int still_wanted(struct relay *r)
{
    struct stat st;
    if (fstat(FD_RECORD, &st) < 0 || st.st_nlink == 0)
        return 0;
    json_t *pod = NULL;
    struct sbx_error e = SBX_ERROR_INIT;
    int rc = sbx__kube_get(r->api, SBX__KUBE_POD, r->pod, &pod, &e);
    int ok = rc == 0 ? !json_object_get(json_object_get(pod, "metadata"), "deletionTimestamp")
                     : rc != -SBX_E_NOTFOUND;
    json_decref(pod);
    return ok;
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
        if (n <= 0 || !(pf.revents & POLLIN))
            continue;
        int fd = accept4(FD_LISTEN, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
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
}

static int atoi_port(const char *s)
{
    char *end;
    long v = strtol(s, &end, 10);
    return *end || v < 1 || v > 65535 ? -1 : (int)v;
}

static void say(const char *msg)
{
    ssize_t n = write(FD_STATUS, msg, strlen(msg));
    (void)n;
    close(FD_STATUS);
}

int sbx__kube_relay_main(int argc, char **argv)
{
    if (argc != 8)
        return 2;
    /* Detach: the first process exits, the relay is nobody's child. */
    pid_t p = fork();
    if (p < 0)
        return 1;
    if (p > 0)
        _exit(0);
    signal(SIGPIPE, SIG_IGN);
    int fl = fcntl(FD_LISTEN, F_GETFL);
    if (fl >= 0)
        (void)fcntl(FD_LISTEN, F_SETFL, fl & ~O_NONBLOCK);
    struct relay r = {.id = argv[1], .port = atoi_port(argv[2]), .pod = argv[4]};
    struct sbx_kube_options o = {.namespace_name = argv[3],
                                 .context = argv[5],
                                 .kubeconfig = argv[6][0] ? argv[6] : NULL,
                                 .in_cluster = strcmp(argv[7], "1") == 0};
    struct sbx_error e = SBX_ERROR_INIT;
    if (o.in_cluster)
        o.context = NULL;
    if (r.port <= 0 || sbx__kube_api_new(&o, &r.api, &e) < 0) {
        say(r.port <= 0 ? "bad port" : e.msg);
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
    pthread_mutex_init(&r.lock, NULL);
    say("ok");
    serve(&r);
    sbx__kube_api_free(r.api);
    return 0;
}
