/* The local provider's supervisor: the request loop. One request per connection, served one
 * after another: exec (exec.c), info, root (the workspace descriptor), port, shutdown. A command's
 * connection stays open until its exit is reported on it; the reapers' reports, their exits,
 * the timers of timeouts and the signals all come to the one poll loop here. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/grow.h"
#include "providers/local/net/net.h"
#include "providers/local/supervisor/supervisor.h"
#include "sandbox/session/internal.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/log.h"
#include "sbx/time.h"

#define MAX_CONNS     4096
#define SEND_DEADLINE 1000

/* ---------------------------------------------------------------------------------------------
 * Connections */

/* Tell waiting clients that we move (see struct sbx__proto_wait): a client queued behind others
 * keeps waiting while we accept and answer. */
static void progressed(struct sbx__sup *s)
{
    if (s->progress_fd < 0)
        return;
    s->progress++;
    if (pwrite(s->progress_fd, &s->progress, sizeof(s->progress), 0) !=
        (ssize_t)sizeof(s->progress))
        sbx_fd_close(&s->progress_fd);
}

static int add_conn(struct sbx__sup *s, int fd)
{
    for (size_t i = 0; i < s->n_conns; i++) {
        if (s->conns[i].fd < 0) {
            s->conns[i].fd = fd;
            sbx_buf_init(&s->conns[i].in, SBX_PROTO_MAX_MSG + 4);
            s->conns[i].child = -1;
            return (int)i;
        }
    }
    if (s->n_conns >= MAX_CONNS)
        return -1;
    SBX_ALLOC_GROW(s->conns, s->n_conns + 1, s->alloc_conns);
    s->conns[s->n_conns].fd = fd;
    sbx_buf_init(&s->conns[s->n_conns].in, SBX_PROTO_MAX_MSG + 4);
    s->conns[s->n_conns].child = -1;
    return (int)s->n_conns++;
}

void sbx__sup_drop_conn(struct sbx__sup *s, int ci)
{
    struct sbx__sup_conn *c = &s->conns[ci];
    if (c->child >= 0) {
        /* The client went away while its command runs: the command goes too. */
        struct sbx__sup_child *ch = &s->children[c->child];
        ch->conn = -1;
        sbx__sup_kill_child(ch, SIGKILL);
    }
    sbx_fd_close(&c->fd);
    sbx_buf_release(&c->in);
    c->child = -1;
}

void sbx__sup_reply(struct sbx__sup *s, int ci, json_t *take_msg, const int *fds, size_t nfds)
{
    struct sbx_error err = SBX_ERROR_INIT;
    progressed(s);
    if (sbx__proto_send(s->conns[ci].fd, take_msg, fds, nfds, sbx_deadline_after_ms(SEND_DEADLINE),
                        &err) < 0)
        sbx_log(SBX_LOG_WARN, "cannot answer a client: %s", err.msg);
    json_decref(take_msg);
}

void sbx__sup_reply_err(struct sbx__sup *s, int ci, const struct sbx_error *e)
{
    sbx__sup_reply(s, ci, sbx__proto_error(e), NULL, 0);
}

json_t *sbx__sup_ok_msg(void)
{
    json_t *m = json_object();
    sbx_json_set(m, "ok", json_true());
    return m;
}

/* ---------------------------------------------------------------------------------------------
 * ports */

/* PID 1: the host port forwarding to port, from the outer process. *out: caller owns. */
static int forward_url(struct sbx__sup *s, int port, int v6, int unix_sock, char **out,
                       struct sbx_error *err)
{
    struct sbx__net_request q = {.port = port, .v6 = v6, .unix_sock = unix_sock};
    struct sbx__net_reply r;
    struct pollfd p = {.fd = s->net_chan[1], .events = POLLIN};
    memset(&r, 0, sizeof(r));
    if (send(s->net_chan[1], &q, sizeof(q), MSG_NOSIGNAL) != (ssize_t)sizeof(q) ||
        poll(&p, 1, 5000) != 1 || recv(s->net_chan[1], &r, sizeof(r), 0) != (ssize_t)sizeof(r))
        return sbx_error_set(err, SBX_E_SANDBOX, 0, "no port forwarder for port %d", port);
    r.msg[sizeof(r.msg) - 1] = '\0';
    if (r.host_port <= 0)
        return sbx_error_set(err, SBX_E_SANDBOX, 0, "cannot forward port %d: %s", port, r.msg);
    if (unix_sock) {
        r.path[sizeof(r.path) - 1] = '\0';
        *out = sbx_xstrdup(r.path);
        return 0;
    }
    /* The address the forwarder listens on, as it is: a URL on 127.0.0.1 for a forward bound
     * to every interface would hide that the network reaches it too. */
    const char *h = s->port_bind ? s->port_bind : "127.0.0.1";
    int bracket = strchr(h, ':') != NULL;
    *out = sbx_xasprintf("http://%s%s%s:%d", bracket ? "[" : "", h, bracket ? "]" : "",
                         r.host_port);
    return 0;
}

/* A table of 16 MiB holds some 100000 sockets: more is not a sandbox's. */
#define NET_TABLE_MAX ((size_t)16 << 20)

/* Is something listening on TCP port in our network namespace? Returns the address family seen
 * (4 or 6), or 0. */
static int listening(int port)
{
    static const char *const files[] = {"/proc/net/tcp", "/proc/net/tcp6"};
    for (int f = 0; f < 2; f++) {
        struct sbx_buf b;
        sbx_buf_init(&b, SBX_BUF_NOLIMIT);
        int fd = open(files[f], O_RDONLY | O_CLOEXEC);
        int found = fd >= 0 && sbx_fd_read_all(fd, NET_TABLE_MAX, &b, NULL) == 0 &&
                    sbx__net_table_listens(b.data, b.len, port);
        if (fd >= 0)
            close(fd);
        sbx_buf_release(&b);
        if (found)
            return f == 0 ? 4 : 6;
    }
    return 0;
}

static void do_port(struct sbx__sup *s, int ci, const json_t *req)
{
    struct sbx_error err = SBX_ERROR_INIT;
    int64_t port = 0;
    int rc = sbx_json_get_int(req, "port", 1, &port, &err);
    if (rc == 0 && (port < 1 || port > 65535))
        rc = sbx_error_set(&err, SBX_E_INVAL, 0, "port %lld is not in 1..65535", (long long)port);
    if (rc == 0 && s->n_ports) {
        int allowed = 0;
        for (size_t i = 0; i < s->n_ports; i++)
            allowed |= s->ports[i] == port;
        if (!allowed)
            rc = sbx_error_set(&err, SBX_E_PERM, 0, "port %lld is not exposed by sandbox '%s'",
                               (long long)port, s->id);
    }
    int unix_sock = json_is_true(json_object_get(req, "unix"));
    if (rc == 0 && unix_sock && s->net_chan[1] < 0)
        rc = sbx_error_set(&err, SBX_E_UNSUPPORTED, 0,
                           "unix socket forwards need a sandbox with a network of its own "
                           "(network none or allow), not one on the host's network");
    int fam = rc == 0 ? listening((int)port) : 0;
    if (rc == 0 && !fam)
        rc = sbx_error_set(&err, SBX_E_NOTFOUND, 0, "nothing listens on port %lld in sandbox '%s'",
                           (long long)port, s->id);
    char *url = NULL;
    /* In a network namespace of its own, through a forwarder of the outer process. */
    if (rc == 0 && s->net_chan[1] >= 0)
        rc = forward_url(s, (int)port, fam == 6, unix_sock, &url, &err);
    if (rc < 0) {
        sbx__sup_reply_err(s, ci, &err);
    } else if (unix_sock) {
        json_t *m = sbx__sup_ok_msg();
        sbx_json_set(m, "path", sbx_json_str(url));
        free(url);
        sbx__sup_reply(s, ci, m, NULL, 0);
    } else {
        /* Without a network namespace the service listens on the host itself. */
        json_t *m = sbx__sup_ok_msg();
        if (!url)
            url = fam == 4 ? sbx_xasprintf("http://127.0.0.1:%lld", (long long)port)
                           : sbx_xasprintf("http://[::1]:%lld", (long long)port);
        sbx_json_set(m, "url", sbx_json_str(url));
        free(url);
        sbx__sup_reply(s, ci, m, NULL, 0);
    }
    sbx__sup_drop_conn(s, ci);
}

/* ---------------------------------------------------------------------------------------------
 * Requests */

static void handle(struct sbx__sup *s, int ci, json_t *req)
{
    struct sbx_error err = SBX_ERROR_INIT;
    const char *op = NULL;
    if (sbx_json_get_string(req, "op", 1, &op, &err) < 0) {
        sbx__sup_reply_err(s, ci, &err);
        sbx__sup_drop_conn(s, ci);
        return;
    }
    if (s->test_delay_ms)
        sbx_sleep_ms(s->test_delay_ms);
    if (strcmp(op, "exec") == 0) {
        sbx__sup_exec(s, ci, req);
    } else if (strcmp(op, "info") == 0) {
        json_t *m = sbx__sup_ok_msg();
        sbx_json_set(m, "id", sbx_json_str(s->id));
        sbx_json_set(m, "pid", json_integer(getpid()));
        sbx_json_set(m, "root", sbx_json_str(s->root));
        uint32_t first, count;
        if (s->iso && sbx__isolation_host_ids(s->iso, &first, &count))
            sbx_json_set(
                    m, "host_ids",
                    json_pack("{s:I,s:I}", "first", (json_int_t)first, "count", (json_int_t)count));
        sbx__sup_reply(s, ci, m, NULL, 0);
        sbx__sup_drop_conn(s, ci);
    } else if (strcmp(op, "root") == 0) {
        sbx__sup_reply(s, ci, sbx__sup_ok_msg(), &s->root_fd, 1);
        sbx__sup_drop_conn(s, ci);
    } else if (strcmp(op, "port") == 0) {
        do_port(s, ci, req);
    } else if (strcmp(op, "shutdown") == 0) {
        /* Answered once everything is dead (see serve). */
        s->stopping = 1;
        s->stop_conn = ci;
    } else {
        sbx_error_set(&err, SBX_E_INVAL, 0, "unknown operation '%s'", op);
        sbx__sup_reply_err(s, ci, &err);
        sbx__sup_drop_conn(s, ci);
    }
}

/* How long the rest of a detach message may take once its first byte is here. */
#define DETACH_WAIT_MS 2000

/* A message on the connection of a running command: "detach" with the command's output
 * descriptors leaves the command running, answered by nobody, its output drained here; anything
 * else (or the client going away) drops the connection, which kills the command. */
static void on_command_conn(struct sbx__sup *s, int ci)
{
    struct sbx__sup_conn *c = &s->conns[ci];
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *req = NULL;
    int fds[2] = {-1, -1};
    size_t nfds = 0;
    int rc = sbx__proto_recv(c->fd, &req, fds, 2, &nfds, sbx_deadline_after_ms(DETACH_WAIT_MS),
                             &err);
    const char *op = json_string_value(json_object_get(req, "op"));
    int detach = rc == 0 && op && strcmp(op, "detach") == 0 && nfds > 0;
    json_decref(req);
    if (!detach) {
        for (size_t i = 0; i < nfds; i++)
            close(fds[i]);
        sbx__sup_drop_conn(s, ci);
        return;
    }
    for (size_t i = 0; i < nfds; i++) {
        int fl = fcntl(fds[i], F_GETFL);
        if (fl >= 0)
            (void)fcntl(fds[i], F_SETFL, fl | O_NONBLOCK);
        SBX_ALLOC_GROW(s->drains, s->n_drains + 1, s->alloc_drains);
        s->drains[s->n_drains++] = fds[i];
    }
    s->children[c->child].conn = -1;
    c->child = -1;
    sbx__sup_reply(s, ci, sbx__sup_ok_msg(), NULL, 0);
    sbx__sup_drop_conn(s, ci);
}

/* Read and drop what a detached command wrote; forget the descriptor at its end. */
static void drain(struct sbx__sup *s, size_t i)
{
    char buf[4096];
    ssize_t n = read(s->drains[i], buf, sizeof(buf));
    if (n > 0 || (n < 0 && (errno == EINTR || errno == EAGAIN)))
        return;
    close(s->drains[i]);
    s->drains[i] = -1;
}

static void on_readable(struct sbx__sup *s, int ci)
{
    struct sbx__sup_conn *c = &s->conns[ci];
    char buf[65536];
    if (c->child >= 0) {
        on_command_conn(s, ci);
        return;
    }
    ssize_t n = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    if (n <= 0) {
        sbx__sup_drop_conn(s, ci);
        return;
    }
    struct sbx_error err = SBX_ERROR_INIT;
    if (sbx_buf_add(&c->in, buf, (size_t)n, &err) < 0) {
        sbx__sup_reply_err(s, ci, &err);
        sbx__sup_drop_conn(s, ci);
        return;
    }
    json_t *req = NULL;
    size_t used = 0;
    int rc = sbx__proto_parse(c->in.data, c->in.len, &req, &used, &err);
    if (rc == 0)
        return;
    if (rc < 0) {
        sbx__sup_reply_err(s, ci, &err);
        sbx__sup_drop_conn(s, ci);
        return;
    }
    sbx_buf_reset(&c->in);
    handle(s, ci, req);
    json_decref(req);
}

/* The command of c ended with status (as its reaper saw it): answer its client. */
static void report_exit(struct sbx__sup *s, struct sbx__sup_child *c, int status)
{
    sbx_fd_close(&c->status_fd);
    c->cmd = 0;
    if (c->conn < 0)
        return;
    json_t *m = json_object();
    sbx_json_set(m, "exit", json_true());
    sbx_json_set(m, "code", json_integer(WIFEXITED(status) ? WEXITSTATUS(status) : -1));
    sbx_json_set(m, "signal", json_integer(WIFSIGNALED(status) ? WTERMSIG(status) : 0));
    sbx_json_set(m, "timed_out", json_boolean(c->timed_out));
    struct sbx__cgroup_events after;
    if (s->iso && sbx__isolation_events(s->iso, &after, NULL) == 0 &&
        (after.oom_kills > c->before.oom_kills || after.pids_max_hits > c->before.pids_max_hits)) {
        /* A limit explains the end: say which, not only "137". */
        struct sbx_buf why;
        sbx_buf_init(&why, 1024);
        if (sbx__isolation_describe_exit(s->iso, status, &c->before, &after, &why, NULL) == 0)
            sbx_json_set(m, "reason", sbx_json_str(why.data));
        sbx_buf_release(&why);
        sbx_json_set(m, "oom", json_boolean(after.oom_kills > c->before.oom_kills));
        sbx_json_set(m, "pids_limit", json_boolean(after.pids_max_hits > c->before.pids_max_hits));
    }
    int ci = c->conn;
    c->conn = -1;
    sbx__sup_reply(s, ci, m, NULL, 0);
    s->conns[ci].child = -1;
    sbx__sup_drop_conn(s, ci);
}

/* The status the reaper of c wrote, if it did. */
static void read_status(struct sbx__sup *s, struct sbx__sup_child *c)
{
    struct sbx__sup_report rep;
    ssize_t n;
    do
        n = read(c->status_fd, &rep, sizeof(rep));
    while (n < 0 && errno == EINTR);
    if (n == (ssize_t)sizeof(rep)) {
        sbx_fd_close(&c->status_fd);
        c->have_status = 1;
        c->status = rep.status;
        /* Without keep_background the answer means "all gone": at once when the reaper saw
         * nothing else left, else once it has ended (on_exit_status). */
        if (c->keep || rep.alone)
            report_exit(s, c, rep.status);
    } else if (n == 0 || (n < 0 && errno != EAGAIN))
        sbx_fd_close(&c->status_fd); /* the reaper is ending without a report */
}

/* A live reaper, or the command of one (which a killed reaper leaves to us to adopt). */
static int is_reaper(const struct sbx__sup *s, pid_t pid)
{
    for (size_t i = 0; i < s->n_children; i++)
        if (s->children[i].pid > 0 && (s->children[i].pid == pid || s->children[i].cmd == pid))
            return 1;
    return 0;
}

static void on_exit_status(struct sbx__sup *s, pid_t pid, int status);

/* Kill every child of ours that is not a live reaper or its command: the orphans of a reaper that
 * was killed (by a command of the same uid, say). Their children come to us too and meet the next
 * pass. */
static void sweep_orphans(struct sbx__sup *s)
{
    for (int loop = 0; loop < SBX__SUP_KILL_ALL_LOOPS; loop++) {
        struct sbx__sup_pids l = {0};
        int hits = 0;
        sbx__sup_children_of(getpid(), &l);
        for (size_t i = 0; i < l.n; i++)
            if (!is_reaper(s, l.v[i]) && sbx__sup_signal_child(l.v[i], getpid(), 0, SIGKILL) == 0)
                hits++;
        free(l.v);
        if (!hits)
            return;
        int st;
        pid_t w;
        while ((w = waitpid(-1, &st, WNOHANG)) > 0)
            on_exit_status(s, w, st);
    }
}

static void on_exit_status(struct sbx__sup *s, pid_t pid, int status)
{
    for (size_t i = 0; i < s->n_children; i++) {
        struct sbx__sup_child *c = &s->children[i];
        if (c->pid != pid)
            continue;
        if (c->cmd != pid) /* the reaper itself, gone: what it ran on can go */
            sbx__sup_child_stacks_release(c);
        if (c->status_fd >= 0)
            read_status(s, c);
        sbx_fd_close(&c->status_fd);
        pid_t pp, pg, sid;
        if (c->cmd > 0 && !c->have_status && c->cmd != pid &&
            sbx__sup_proc_ids(c->cmd, &pp, &pg, &sid) == 0 && pp == getpid()) {
            /* The reaper was killed and its command came to us: wait for it ourselves. */
            c->pid = c->cmd;
            sweep_orphans(s);
            return;
        }
        /* What a killed reaper left goes first, so that the answer means "all gone". A reaper
         * that reported and exited normally has killed its subtree itself. */
        int clean = c->have_status && WIFEXITED(status) && WEXITSTATUS(status) == 0;
        c->pid = 0;
        if (!clean)
            sweep_orphans(s);
        if (c->cmd > 0)
            report_exit(s, c, c->have_status ? c->status : status);
        return;
    }
    for (size_t i = 0; i < s->n_children; i++) {
        struct sbx__sup_child *c = &s->children[i];
        if (c->pid > 0 && c->cmd == pid) {
            /* An adopted command reaped before its dead reaper. */
            report_exit(s, c, status);
            return;
        }
    }
    /* An orphan reparented to us: reaping it is all there is to do. */
}

static void reap(struct sbx__sup *s)
{
    for (;;) {
        int status;
        pid_t p = waitpid(-1, &status, WNOHANG);
        if (p <= 0)
            return;
        on_exit_status(s, p, status);
    }
}

static int64_t check_timers(struct sbx__sup *s)
{
    int64_t now = sbx_time_mono_ns(), next = sbx__sup_stacks_idle(now);
    for (size_t i = 0; i < s->n_children; i++) {
        struct sbx__sup_child *c = &s->children[i];
        if (c->pid <= 0 || c->cmd <= 0 || c->have_status)
            continue;
        if (c->kill_at != INT64_MAX) {
            if (now >= c->kill_at) {
                sbx__sup_kill_child(c, SIGKILL);
                /* A reaper that does not report (stopped by a command) goes too; its orphans
                 * are swept when it is reaped. */
                kill(c->pid, SIGKILL);
                c->kill_at = INT64_MAX - 1; /* sent; wait for the reap */
            } else if (c->kill_at < next) {
                next = c->kill_at;
            }
        } else if (c->deadline != INT64_MAX) {
            if (now >= c->deadline) {
                c->timed_out = 1;
                sbx__sup_kill_child(c, SIGTERM);
                sbx__sup_kill_child(c, SIGCONT);
                kill(c->pid, SIGCONT);
                c->kill_at = now + c->grace_ms * SBX_NS_PER_MS;
                if (c->kill_at < next)
                    next = c->kill_at;
            } else if (c->deadline < next) {
                next = c->deadline;
            }
        }
    }
    return next;
}

void sbx__sup_serve(struct sbx__sup *s)
{
    struct pollfd *pfd = NULL;
    size_t pcap = 0;
    while (!s->stopping) {
        /* Forget the drained descriptors that were closed. */
        size_t kept = 0;
        for (size_t i = 0; i < s->n_drains; i++)
            if (s->drains[i] >= 0)
                s->drains[kept++] = s->drains[i];
        s->n_drains = kept;
        size_t need = 2 + s->n_conns + s->n_children + s->n_drains;
        SBX_ALLOC_GROW(pfd, need, pcap);
        size_t n = 0;
        pfd[n++] = (struct pollfd){.fd = s->sig_fd, .events = POLLIN};
        pfd[n++] = (struct pollfd){.fd = s->listen_fd, .events = POLLIN};
        for (size_t i = 0; i < s->n_conns; i++)
            pfd[n++] = (struct pollfd){.fd = s->conns[i].fd, .events = POLLIN};
        size_t first_child = n;
        for (size_t i = 0; i < s->n_children; i++)
            pfd[n++] = (struct pollfd){.fd = s->children[i].pid > 0 ? s->children[i].status_fd : -1,
                                       .events = POLLIN};
        size_t first_drain = n;
        for (size_t i = 0; i < s->n_drains; i++)
            pfd[n++] = (struct pollfd){.fd = s->drains[i], .events = POLLIN};
        int64_t next = check_timers(s);
        int timeout = -1;
        if (next != INT64_MAX) {
            int64_t ms = (next - sbx_time_mono_ns()) / SBX_NS_PER_MS + 1;
            timeout = ms < 0 ? 0 : ms > 60000 ? 60000 : (int)ms;
        }
        int r = poll(pfd, (nfds_t)n, timeout);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            sbx_log(SBX_LOG_ERROR, "poll: %s", strerror(errno));
            break;
        }
        if (pfd[0].revents) {
            struct signalfd_siginfo si;
            while (read(s->sig_fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
                /* As PID 1 of an isolated sandbox, a stop request comes from outside the pid
                 * namespace (sender pid 0 here); a command signalling PID 1 is ignored. */
                if (si.ssi_signo != SIGCHLD && (!s->iso || si.ssi_pid == 0)) {
                    sbx_log(SBX_LOG_INFO, "signal %u: shutting down", si.ssi_signo);
                    s->stopping = 1;
                }
            }
            reap(s);
        }
        for (size_t i = first_drain; i < n; i++)
            if (pfd[i].revents)
                drain(s, i - first_drain);
        for (size_t i = first_child; i < first_drain; i++) {
            struct sbx__sup_child *c = &s->children[i - first_child];
            if (pfd[i].revents && pfd[i].fd >= 0 && c->status_fd == pfd[i].fd)
                read_status(s, c);
        }
        for (size_t i = 2; i < first_child; i++) {
            size_t ci = i - 2;
            if (pfd[i].revents && s->conns[ci].fd == pfd[i].fd && pfd[i].fd >= 0)
                on_readable(s, (int)ci);
        }
        if (pfd[1].revents & POLLIN) {
            int fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
            if (fd < 0 && (errno == EMFILE || errno == ENFILE) && s->spare_fd >= 0) {
                /* Out of descriptors: refuse this one cleanly rather than spin on it. */
                sbx_fd_close(&s->spare_fd);
                fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC);
                sbx_fd_close(&fd);
                s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
                sbx_log(SBX_LOG_WARN, "out of file descriptors: a connection was refused");
            }
            if (fd >= 0 && add_conn(s, fd) < 0)
                close(fd);
            else if (fd >= 0)
                progressed(s);
        }
    }
    free(pfd);
    for (size_t i = 0; i < s->n_drains; i++)
        if (s->drains[i] >= 0)
            close(s->drains[i]);
    free(s->drains);
    s->drains = NULL;
    s->n_drains = s->alloc_drains = 0;
}
