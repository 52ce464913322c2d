/* Port relays into another network namespace of this host (sandbox/host/relay.h). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/spawn.h"
#include "sandbox/host/host.h"
#include "sandbox/host/portrelay.h"
#include "sandbox/host/priv.h"
#include "sandbox/host/relay.h"
#include "sbx/fs.h"

/* The descriptors a relay process starts with. */
enum { FD_LISTEN = 3, FD_NETNS, FD_LOCK, FD_STATUS, FD_FIRST_FREE };

#define RECORD_MAX 128

/* The start time of process pid (field 22 of /proc/PID/stat, after the command name, which may
 * hold anything): with the pid it names one process for good, whatever pids are reused. */
static int proc_start(pid_t pid, unsigned long long *out)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    for (int field = 2; p && field < 22; field++)
        p = strchr(p + 1, ' ');
    return p && sscanf(p + 1, "%llu", out) == 1 ? 0 : -1;
}

static int same_process(pid_t pid, unsigned long long start)
{
    unsigned long long now;
    return proc_start(pid, &now) == 0 && now == start;
}

static int exited(pid_t pid, struct sbx_error *err)
{
    return sbx_error_set(err, SBX_E_SANDBOX, ESRCH,
                         "process %d of the sandbox exited: is the sandbox running?", (int)pid);
}

/* What a relay needs from this side: a listening socket on the host's loopback and the
 * namespace, taken while pid is the same process before and after (*start), so that the
 * namespace is that process's. */
static int open_ends(pid_t pid, int *lsock, int *netns, int *hostport, unsigned long long *start,
                     struct sbx_error *err)
{
    char path[64];
    if (proc_start(pid, start) < 0)
        return exited(pid, err);
    snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)pid);
    *netns = open(path, O_RDONLY | O_CLOEXEC);
    if (*netns < 0 && errno == ENOENT)
        return exited(pid, err);
    if (*netns < 0)
        return sbx_error_errno(err, errno, "cannot open the network namespace '%s'", path);
    if (!same_process(pid, *start))
        return exited(pid, err);
    return sbx__portrelay_listen(SOCK_NONBLOCK, lsock, hostport, err);
}

/* Run the relay detached (a new session; its first process forks the relay and exits) and
 * read its status: "ok" once it is in the namespace, else why not. fds: the relay's listening
 * socket, namespace and record lock at FD_LISTEN, FD_NETNS and FD_LOCK. */
static int spawn_relay(const char *tag, int port, pid_t target, unsigned long long start,
                       const int fds[FD_FIRST_FREE], struct sbx_error *err)
{
    char *prog = NULL, portarg[16], pidarg[16], startarg[32], msg[256];
    int status[2] = {-1, -1}, rc, st;
    struct sbx__child child = {.pid = -1, .in = -1, .out = -1, .err = -1};

    if ((rc = sbx__supervisor_program(NULL, &prog, err)) < 0)
        return rc;
    snprintf(portarg, sizeof(portarg), "%d", port);
    snprintf(pidarg, sizeof(pidarg), "%d", (int)target);
    snprintf(startarg, sizeof(startarg), "%llu", start);
    const char *const argv[] = {prog, SBX__RELAY_VERB, tag, portarg, pidarg, startarg, NULL};
    if (pipe2(status, O_CLOEXEC) < 0) {
        rc = sbx_error_errno(err, errno, "cannot start a port relay");
        goto out;
    }
    /* Stdio /dev/null, an empty environment, nothing of ours but these four. */
    struct sbx__spawn sp = {.program = prog, .argv = argv, .new_session = 1, .nkeep = 4};
    sp.keep[0] = (struct sbx__spawn_keep){.fd = fds[FD_LISTEN], .at = FD_LISTEN};
    sp.keep[1] = (struct sbx__spawn_keep){.fd = fds[FD_NETNS], .at = FD_NETNS};
    sp.keep[2] = (struct sbx__spawn_keep){.fd = fds[FD_LOCK], .at = FD_LOCK};
    sp.keep[3] = (struct sbx__spawn_keep){.fd = status[1], .at = FD_STATUS};
    if ((rc = sbx__spawn_start(&sp, &child, err)) < 0) {
        sbx_error_prefix(err, "port relay");
        goto out;
    }
    sbx_fd_close(&status[1]);
    size_t len = 0;
    ssize_t n;
    while (len < sizeof(msg) - 1 && ((n = read(status[0], msg + len, sizeof(msg) - 1 - len)) > 0 ||
                                     (n < 0 && errno == EINTR)))
        len += n > 0 ? (size_t)n : 0;
    msg[len] = '\0';
    (void)sbx__child_wait(&child, -1, &st, NULL);
    if (strcmp(msg, "ok") == 0)
        rc = 0;
    else if (strncmp(msg, "perm:", 5) == 0)
        rc = sbx_error_set(err, SBX_E_PERM, EPERM,
                           "cannot enter the sandbox's network namespace: %s (port relays need "
                           "the rights of the engine's user)",
                           msg + 5);
    else
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "the port relay did not start: %s",
                           len ? msg : "it exited");
out:
    sbx_fd_close(&status[0]);
    sbx_fd_close(&status[1]);
    free(prog);
    return rc;
}

int sbx__relay_start(const char *dir, const char *tag, pid_t pid, int port, char **out_url,
                     struct sbx_error *err)
{
    int fds[FD_FIRST_FREE] = {-1, -1, -1, -1, -1, -1, -1};
    int dfd = -1, rc = 0, hostport = 0;
    unsigned long long start = 0;
    char name[16];
    if (port < 1 || port > 65535 || pid <= 0)
        return sbx_error_set(err, SBX_E_INVAL, 0, "bad port %d", port);
    snprintf(name, sizeof(name), "%d", port);
    dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (dfd < 0)
        return sbx_error_errno(err, errno, "cannot open '%s'", dir);
    int lock = openat(dfd, name, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (lock < 0) {
        rc = sbx_error_errno(err, errno, "cannot open '%s/%s'", dir, name);
        goto out;
    }
    fds[FD_LOCK] = lock;
    /* A live relay holds the lock: its record says where it listens. One being started by
     * another caller holds it with an empty record for a moment: wait for that (bounded). */
    for (int tries = 0;; tries++) {
        pid_t rpid;
        if (flock(lock, LOCK_EX | LOCK_NB) == 0)
            break;
        if (errno != EWOULDBLOCK && errno != EINTR) {
            rc = sbx_error_errno(err, errno, "cannot lock '%s/%s'", dir, name);
            goto out;
        }
        if (sbx__portrelay_read_record(lock, &rpid, &hostport) == 0 && rpid == pid) {
            *out_url = sbx_xasprintf("http://127.0.0.1:%d", hostport);
            goto out;
        }
        if (tries >= 250) {
            rc = sbx_error_set(err, SBX_E_TIMEOUT, 0,
                               "the relay of port %d is held by another process ('%s/%s')", port,
                               dir, name);
            goto out;
        }
        nanosleep(&(struct timespec){.tv_nsec = 20 * 1000 * 1000}, NULL);
    }
    /* Ours: no relay runs for this port (any record is stale). */
    if (ftruncate(lock, 0) < 0) {
        rc = sbx_error_errno(err, errno, "cannot write '%s/%s'", dir, name);
        goto out;
    }
    rc = open_ends(pid, &fds[FD_LISTEN], &fds[FD_NETNS], &hostport, &start, err);
    if (rc == 0)
        rc = spawn_relay(tag, port, pid, start, fds, err);
    if (rc == 0) {
        char rec[RECORD_MAX];
        int n = snprintf(rec, sizeof(rec), "%d %d\n", (int)pid, hostport);
        if (pwrite(lock, rec, (size_t)n, 0) != n)
            rc = sbx_error_errno(err, errno, "cannot write '%s/%s'", dir, name);
    }
    if (rc == 0)
        *out_url = sbx_xasprintf("http://127.0.0.1:%d", hostport);
out:
    for (int i = 0; i < FD_FIRST_FREE; i++)
        sbx_fd_close(&fds[i]);
    sbx_fd_close(&dfd);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * The relay process */

#define RELAY_MAX_CONNS 256
#define RELAY_BUF       32768

/* One relayed connection: end 0 the accepted one, end 1 the one inside. buf[d] holds what was
 * read from end d and is still to be written to the other. */
struct conn {
    int fd[2];
    int connecting;
    int eof[2];
    size_t len[2], off[2];
    char buf[2][RELAY_BUF];
};

static void conn_free(struct conn **cp)
{
    struct conn *c = *cp;
    if (!c)
        return;
    sbx_fd_close(&c->fd[0]);
    sbx_fd_close(&c->fd[1]);
    free(c);
    *cp = NULL;
}

static struct conn *conn_open(int client, int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int up = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (up < 0) {
        close(client);
        return NULL;
    }
    int r = connect(up, (struct sockaddr *)&a, sizeof(a));
    if (r < 0 && errno != EINPROGRESS) {
        close(up);
        close(client);
        return NULL;
    }
    struct conn *c = sbx_xcalloc(1, sizeof(*c));
    c->fd[0] = client;
    c->fd[1] = up;
    c->connecting = r < 0;
    return c;
}

/* Write what end d holds to the other end; -1 when the connection is done for. */
static int conn_flush(struct conn *c, int d)
{
    while (c->off[d] < c->len[d]) {
        ssize_t n = send(c->fd[!d], c->buf[d] + c->off[d], c->len[d] - c->off[d], MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return errno == EAGAIN ? 0 : -1;
        c->off[d] += (size_t)n;
    }
    c->len[d] = c->off[d] = 0;
    if (c->eof[d])
        shutdown(c->fd[!d], SHUT_WR);
    return 0;
}

static int conn_step(struct conn *c, const struct pollfd *p)
{
    if (c->connecting) {
        int soerr = 0;
        socklen_t sl = sizeof(soerr);
        if (!p[1].revents)
            return 0;
        if (getsockopt(c->fd[1], SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0 || soerr)
            return -1;
        c->connecting = 0;
    }
    for (int d = 0; d < 2; d++) {
        if ((p[!d].revents & (POLLOUT | POLLERR | POLLHUP)) && c->len[d] && conn_flush(c, d) < 0)
            return -1;
        if (!(p[d].revents & (POLLIN | POLLERR | POLLHUP)) || c->len[d] || c->eof[d])
            continue;
        ssize_t n = recv(c->fd[d], c->buf[d], RELAY_BUF, 0);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (n < 0)
            return -1;
        c->len[d] = (size_t)n;
        c->eof[d] = n == 0;
        if (conn_flush(c, d) < 0)
            return -1;
    }
    return c->eof[0] && c->eof[1] && !c->len[0] && !c->len[1] ? -1 : 0;
}

static void conn_events(const struct conn *c, struct pollfd *p)
{
    for (int d = 0; d < 2; d++) {
        p[d].fd = c->fd[d];
        p[d].events = 0;
        p[d].revents = 0;
        if (c->connecting) {
            p[d].events = d == 1 ? POLLOUT : 0;
        } else {
            if (!c->eof[d] && !c->len[d])
                p[d].events |= POLLIN;
            if (c->len[!d])
                p[d].events |= POLLOUT;
        }
        /* Waiting for nothing on this end: its hangup must not wake the loop over and over. */
        if (!p[d].events)
            p[d].fd = -1;
    }
}

/* Made before the relay enters the sandbox's network namespace: a peer's socket is in this
 * host's. */
static int relay_diag = -1;

/* pidfd: of the namespace's process (pid, start), or -1 where pidfd_open is refused: then
 * checked once a second. */
static int relay_loop(int port, int pidfd, pid_t pid, unsigned long long start)
{
    static struct conn *conns[RELAY_MAX_CONNS];
    static struct pollfd p[2 + 2 * RELAY_MAX_CONNS];
    size_t n = 0;
    for (;;) {
        p[0] = (struct pollfd){.fd = pidfd, .events = POLLIN};
        p[1] = (struct pollfd){.fd = FD_LISTEN, .events = n < RELAY_MAX_CONNS ? POLLIN : 0};
        for (size_t i = 0; i < n; i++)
            conn_events(conns[i], &p[2 + 2 * i]);
        if (poll(p, 2 + 2 * n, pidfd >= 0 ? -1 : 1000) < 0) {
            if (errno == EINTR)
                continue;
            return 1;
        }
        /* The namespace's process is gone: so is what the relay served. */
        if (pidfd >= 0 ? p[0].revents != 0 : !same_process(pid, start))
            return 0;
        for (size_t i = 0; i < n;) {
            if (conn_step(conns[i], &p[2 + 2 * i]) < 0) {
                conn_free(&conns[i]);
                conns[i] = conns[--n];
                p[2 + 2 * i] = p[2 + 2 * n];
                p[3 + 2 * i] = p[3 + 2 * n];
                continue;
            }
            i++;
        }
        if (p[1].revents & POLLIN) {
            int c = accept4(FD_LISTEN, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
            /* Its owner's (and root's) only: another local user's connection is closed. */
            if (c >= 0 && !sbx__host_peer_is_owner(relay_diag, c))
                close(c);
            else if (c >= 0 && (conns[n] = conn_open(c, port)) != NULL)
                n++;
        }
    }
}

static void status(const char *msg)
{
    sbx_fd_write_all(FD_STATUS, msg, strlen(msg), NULL);
}

int sbx__relay_main(int argc, char **argv)
{
    char *e1 = NULL, *e2 = NULL, *e3 = NULL;
    long port = argc == 5 ? strtol(argv[2], &e1, 10) : 0;
    long pid = argc == 5 ? strtol(argv[3], &e2, 10) : 0;
    unsigned long long start = argc == 5 ? strtoull(argv[4], &e3, 10) : 0;
    if (argc != 5 || *e1 || *e2 || *e3 || port < 1 || port > 65535 || pid <= 0 ||
        fcntl(FD_STATUS, F_GETFD) < 0) {
        fprintf(stderr, "sbx: %s is internal to sbx (run by port resolution)\n", SBX__RELAY_VERB);
        return 2;
    }
    /* Connections are made in the namespace the calling thread is in at socket(); the
     * listening socket stays where it was made. */
    relay_diag = sbx__host_diag_open();
    if (sbx__priv_setns(FD_NETNS, CLONE_NEWNET) < 0) {
        char msg[128];
        snprintf(msg, sizeof(msg), "%s%s", errno == EPERM ? "perm:" : "setns: ", strerror(errno));
        status(msg);
        return 1;
    }
    close(FD_NETNS);
    signal(SIGPIPE, SIG_IGN);
    /* Long-lived: it must not keep the caller's working directory (a mount) busy. */
    if (chdir("/") < 0) {
        status("chdir / failed");
        return 1;
    }
    /* A pidfd never comes to name another process; taken, then the process checked to be the
     * one whose namespace this is. */
    int pidfd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
    if (!same_process((pid_t)pid, start)) {
        status("the sandbox's process exited");
        return 1;
    }
    pid_t child = fork();
    if (child < 0) {
        status("fork failed");
        return 1;
    }
    if (child > 0)
        _exit(0);
    /* The lock on the record (FD_LOCK) is held for as long as this process lives. */
    status("ok");
    close(FD_STATUS);
    return relay_loop((int)port, pidfd, (pid_t)pid, start);
}
