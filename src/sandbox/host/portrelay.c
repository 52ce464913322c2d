/* Port relays whose connections a provider opens itself (sandbox/host/portrelay.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
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

#include "core/spawn.h"
#include "sandbox/host/host.h"
#include "sandbox/host/portrelay.h"
#include "sbx/common.h"
#include "sbx/fs.h"
#include "sbx/time.h"

#define FD_LISTEN    SBX__PORTRELAY_FD_LISTEN
#define FD_RECORD    SBX__PORTRELAY_FD_RECORD
#define FD_STATUS    SBX__PORTRELAY_FD_STATUS
#define RECORD_MAX   128
#define CONNS_MAX    256
#define START_MS     30000
#define STOP_WAIT_MS 3000
#define ARGS_MAX     16
#define ENV_MAX      8

/* ---------------------------------------------------------------------------------------------
 * Records */

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

int sbx__portrelay_dir(const char *kind, const char *id, int make, char **out,
                       struct sbx_error *err)
{
    char *base = NULL;
    int rc = sbx__runtime_base(NULL, &base, err);
    if (rc < 0)
        return rc;
    char *k = sbx_xasprintf("%s/%s", base, kind), *box = sbx_xasprintf("%s/%s", k, id);
    char *ports = sbx_xasprintf("%s/ports", box);
    if (make && ((rc = private_dir(k, err)) < 0 || (rc = private_dir(box, err)) < 0 ||
                 (rc = private_dir(ports, err)) < 0))
        free(ports);
    else
        *out = ports;
    free(k);
    free(box);
    free(base);
    return rc;
}

/* A record: "PID HOSTPORT\n", PID the relay's (or, for relay.c's, the namespace's process). */
int sbx__portrelay_read_record(int fd, pid_t *pid, int *hostport)
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

int sbx__portrelay_listen(int flags, int *lsock, int *hostport, struct sbx_error *err)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    *lsock = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | flags, 0);
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

/* Run the relay detached (a new session; its first process forks the relay and exits) with
 * lsock and record at FD_LISTEN and FD_RECORD, and read its word. */
static int spawn_relay(const struct sbx__portrelay_start *s, int lsock, int record,
                       struct sbx_error *err)
{
    const char *argv[ARGS_MAX + 2] = {NULL}, *env[ENV_MAX + 1] = {NULL};
    char *prog = NULL, *own[ENV_MAX] = {NULL};
    int status[2] = {-1, -1}, st;
    size_t na = 1, ne = 0;
    struct sbx__child child = {.pid = -1, .in = -1, .out = -1, .err = -1};
    int rc = sbx__sbx_program(&prog, err);
    if (rc < 0)
        return rc;
    argv[0] = prog;
    for (size_t i = 0; s->args[i] && na <= ARGS_MAX; i++)
        argv[na++] = s->args[i];
    /* What the relay needs to find its files and credentials, nothing else of this process's
     * environment. */
    for (size_t i = 0; s->pass_env && s->pass_env[i] && ne < ENV_MAX; i++) {
        const char *v = getenv(s->pass_env[i]);
        if (v) {
            own[ne] = sbx_xasprintf("%s=%s", s->pass_env[i], v);
            env[ne] = own[ne];
            ne++;
        }
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

int sbx__portrelay_resolve(const struct sbx__portrelay_start *s, char **out_url,
                           struct sbx_error *err)
{
    char *path = sbx_xasprintf("%s/%d", s->dir, s->port);
    int rc = 0, lsock = -1, hostport = 0;
    pid_t pid;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        rc = sbx_error_errno(err, errno, "cannot open '%s'", path);
    } else if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        /* Held: a live relay, whose record says where it listens. */
        if (sbx__portrelay_read_record(fd, &pid, &hostport) < 0)
            rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "the relay record '%s' is garbled", path);
    } else if ((rc = sbx__portrelay_listen(0, &lsock, &hostport, err)) == 0) {
        rc = spawn_relay(s, lsock, fd, err);
    }
    if (rc == 0)
        *out_url = sbx_xasprintf("http://127.0.0.1:%d", hostport);
    sbx_fd_close(&lsock);
    sbx_fd_close(&fd);
    free(path);
    return rc;
}

int sbx__portrelay_forget(const char *dir, struct sbx_error *err)
{
    int rc = 0;
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
        if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) < 0 &&
            sbx__portrelay_read_record(fd, &pid, &hp) == 0) {
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
    size_t n = strlen(dir), tail = strlen("/ports");
    char *box = sbx_xasprintf("%.*s", (int)(n > tail ? n - tail : 0), dir);
    (void)rmdir(dir);
    (void)rmdir(box);
    free(box);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * The relay process */

struct relay {
    const struct sbx__portrelay_serve *s;
    pthread_mutex_t lock;
    int conns;
};

struct relay_conn {
    struct relay *r;
    int fd;
};

static void conns_add(struct relay *r, int d)
{
    pthread_mutex_lock(&r->lock);
    r->conns += d;
    pthread_mutex_unlock(&r->lock);
}

static void *conn_main(void *arg)
{
    struct relay_conn *c = arg;
    c->r->s->carry(c->r->s->ctx, c->fd);
    close(c->fd);
    conns_add(c->r, -1);
    free(c);
    return NULL;
}

/* One accepted connection on a detached thread of its own; refused (closed) past CONNS_MAX. */
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
            conns_add(r, -1);
        }
    }
    pthread_attr_destroy(&at);
}

/* Whether the relay should go on: its record is still there and the provider says so. */
static int still_wanted(struct relay *r)
{
    struct stat st;
    if (fstat(FD_RECORD, &st) < 0 || st.st_nlink == 0)
        return 0;
    return r->s->wanted(r->s->ctx);
}

int sbx__portrelay_detach(void)
{
    pid_t p = fork();
    if (p < 0)
        return -1;
    if (p > 0)
        _exit(0);
    signal(SIGPIPE, SIG_IGN);
    int fl = fcntl(FD_LISTEN, F_GETFL);
    if (fl >= 0)
        (void)fcntl(FD_LISTEN, F_SETFL, fl & ~O_NONBLOCK);
    return 0;
}

void sbx__portrelay_say(const char *msg)
{
    ssize_t n = write(FD_STATUS, msg, strlen(msg));
    (void)n;
    close(FD_STATUS);
}

int sbx__portrelay_run(const struct sbx__portrelay_serve *s)
{
    char rec[RECORD_MAX];
    int hp = 0;
    struct sockaddr_in a;
    socklen_t alen = sizeof(a);
    if (getsockname(FD_LISTEN, (struct sockaddr *)&a, &alen) == 0)
        hp = ntohs(a.sin_port);
    snprintf(rec, sizeof(rec), "%d %d\n", (int)getpid(), hp);
    if (ftruncate(FD_RECORD, 0) < 0 || pwrite(FD_RECORD, rec, strlen(rec), 0) < 0) {
        sbx__portrelay_say("cannot write the record");
        return 1;
    }
    struct relay r = {.s = s};
    pthread_mutex_init(&r.lock, NULL);
    sbx__portrelay_say("ok");
    int64_t next_check = sbx_deadline_after_ms(s->check_ms);
    for (;;) {
        struct pollfd pf = {.fd = FD_LISTEN, .events = POLLIN};
        int n = poll(&pf, 1, sbx_deadline_poll_ms(next_check));
        if (n < 0 && errno != EINTR)
            break;
        if (sbx_deadline_poll_ms(next_check) == 0) {
            if (!still_wanted(&r))
                break;
            next_check = sbx_deadline_after_ms(s->check_ms);
        }
        if (n > 0 && (pf.revents & POLLIN))
            accept_one(&r);
    }
    return 0;
}
