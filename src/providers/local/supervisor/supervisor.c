/* The supervisor: one detached process per local sandbox.
 *
 * One thread serves requests, one after another; the others never serve: a tied sandbox's
 * watch of its creator (tie_main) and, in the outer process of an isolated sandbox, the network
 * loop (netloop.c) with its short name-lookup threads. It reads its configuration (JSON) on stdin,
 * binds the control socket in the runtime directory, reports readiness on stdout, and then serves:
 * one request per connection, commands forked into their own process group with stdio pipes handed
 * to the client, every child reaped, timeouts enforced, and on shutdown every process it ever
 * spawned killed. See docs/internals/local-provider.md. */
#include <dirent.h>
#include <sched.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "providers/local/config.h"
#include "sandbox/session/internal.h"
#include "core/fs-internal.h"
#include "providers/local/client/disk.h"
#include "providers/local/isolate/isolate.h"
#include "providers/local/supervisor/mounts.h"
#include "providers/local/supervisor/logcap.h"
#include "providers/local/local.h"
#include "providers/local/net/net.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/log.h"
#include "sbx/path.h"
#include "sbx/strv.h"
#include "sbx/time.h"

#define MAX_CONNS      4096
#define CONFIG_MAX     ((size_t)16 << 20)
#define SEND_DEADLINE  1000
#define DEFAULT_ROWS   24
#define DEFAULT_COLS   80
#define KILL_ALL_LOOPS 10000
/* PID 1 waits this long for the host side to set up the network: only a safety bound, since
 * a dead host side closes the channel at once. */
#define NETWORK_WAIT_MS 300000
/* Exit status of a supervisor whose creator went away before the report: nobody knows about
 * the sandbox, so what the create made is removed (remove_unclaimed). */
#define EXIT_UNCLAIMED 3

extern char **environ;

/* Every exec runs under a reaper of its own: a process forked from the supervisor that is a
 * child subreaper, forks the command and waits. Whatever the command leaves behind (a daemon that
 * left its group and session too) is reparented to the reaper, so when the command ends the
 * reaper kills its whole subtree until nothing is left and only then reports the status; with
 * keep_background it reports at once and keeps reaping until the rest ends by itself (or rm).
 * Should a command kill its reaper, the orphans reach the supervisor, which kills every child
 * that is not a live reaper (sweep_orphans). */
struct child {
    pid_t pid;       /* the reaper; 0: free slot */
    pid_t cmd;       /* the command (its group and session leader); 0: it has ended */
    int status_fd;   /* the reaper reports the command's wait status here; -1: read */
    int have_status; /* status holds what the reaper reported */
    int status;
    int keep;         /* keep_background: answered at the report, not when the reaper ends */
    int tty;          /* leads its own session: kill the session, not only the group */
    int conn;         /* index of the connection waiting for its exit, or -1 */
    int64_t deadline; /* SIGTERM at, INT64_MAX: none */
    int64_t kill_at;  /* SIGKILL at after SIGTERM, INT64_MAX: not yet */
    int64_t grace_ms;
    int timed_out;
    struct sbx__cgroup_events before; /* the sandbox's limit counters when it started */
};

struct conn {
    int fd;
    struct sbx_buf in;
    int child; /* index into children, or -1 */
};

struct sup {
    char *id, *dir, *workspace, *root;
    struct sbx__mounts mounts; /* storage mounts (outer process) */
    int mount_failed;          /* the start error is a mount's, which names its entry */
    int listen_fd, sig_fd, root_fd, dir_fd;
    int ports[SBX_LOCAL_MAX_EXPOSED_PORTS];
    size_t n_ports;
    struct sbx_strv env;        /* base environment of every command (isolation: the manifest's) */
    struct sbx__isolation *iso; /* NULL: isolation "none" */
    struct conn *conns;
    size_t n_conns;
    struct child *children;
    size_t n_children;
    int stopping;
    int stop_conn;   /* the connection that asked for shutdown, or -1 */
    int spare_fd;    /* held back to refuse connections when out of descriptors */
    int progress_fd; /* SBX_PROTO_PROGRESS in the runtime dir, -1: none */
    uint64_t progress;
    int64_t test_delay_ms; /* test only: a slow supervisor, paused before each request */
    /* Network of an isolated sandbox with its own namespace (modes none and allow): the outer
     * process runs the proxy and the port forwarders (net.h); PID 1 asks it for forwarders over
     * net_chan (outer end [0], inner end [1]). */
    int own_netns;
    int net_chan[2];
    struct sbx_strv allow;      /* mode allow: the patterns */
    struct sbx_strv test_hosts; /* test only: "name=ip" resolved without DNS */
    char *port_bind;            /* forwarders' host address; NULL = 127.0.0.1 */
    int allow_ports[SBX_LOCAL_MAX_EXPOSED_PORTS];
    size_t n_allow_ports; /* 0: the proxy's default (80, 443) */
    int report_fd;        /* the creator's socket (our stdout at start), until the report is sent */
    int workspace_owned;  /* the create made the workspace (a fresh one) */
    int inner;            /* this process is PID 1 of an isolated sandbox */
    struct sbx__local_record record; /* what rm needs when this process cannot answer */
    /* A tied sandbox: a pidfd of the creator, which a thread watches (host side only). */
    int tie_fd;
    int tie_watching;
    pthread_t tie_thread;
};

/* ---------------------------------------------------------------------------------------------
 * Killing */

/* Parse /proc/<pid>/stat: ppid, pgrp, session. Returns 0 or -1. */
static int proc_stat(pid_t pid, pid_t *ppid, pid_t *pgrp, pid_t *sid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (!p)
        return -1;
    char state;
    int a, b, c;
    if (sscanf(p + 1, " %c %d %d %d", &state, &a, &b, &c) != 4)
        return -1;
    *ppid = a;
    *pgrp = b;
    *sid = c;
    return 0;
}

/* A growable list of pids, bounded: no sandbox holds more processes than the kernel's pid limit. */
#define PIDV_MAX ((size_t)1 << 22)
struct pidv {
    pid_t *v;
    size_t n, cap;
};

static void pidv_add(struct pidv *l, pid_t p)
{
    if (l->n == l->cap) {
        if (l->cap >= PIDV_MAX)
            return;
        l->cap = l->cap ? 2 * l->cap : 64;
        l->v = sbx_xrealloc(l->v, l->cap * sizeof(*l->v));
    }
    l->v[l->n++] = p;
}

/* 1: the kernel lists a thread's children in /proc/PID/task/TID/children, 0: it does not
 * (CONFIG_PROC_CHILDREN off), -1: not probed yet. */
static int have_children_files = -1;

/* Append the children of pid from its threads' children files: what this costs grows with the
 * sandbox's processes, not the host's. Any thread of a subreaper may adopt an orphan, so every
 * thread's list is read. */
static void children_from_files(pid_t pid, struct pidv *out)
{
    char path[96];
    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        char *end;
        long tid = strtol(e->d_name, &end, 10);
        if (*end || tid <= 0)
            continue;
        snprintf(path, sizeof(path), "/proc/%d/task/%ld/children", (int)pid, tid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        char buf[4096];
        long cur = -1;
        ssize_t n;
        while ((n = read(fd, buf, sizeof(buf))) > 0 || (n < 0 && errno == EINTR)) {
            for (ssize_t i = 0; i < n; i++) {
                if (buf[i] >= '0' && buf[i] <= '9') {
                    cur = (cur < 0 ? 0 : cur * 10) + (buf[i] - '0');
                    if (cur > INT32_MAX)
                        cur = INT32_MAX;
                } else if (cur >= 0) {
                    pidv_add(out, (pid_t)cur);
                    cur = -1;
                }
            }
        }
        if (cur >= 0)
            pidv_add(out, (pid_t)cur);
        close(fd);
    }
    closedir(d);
}

/* Without children files: one pass over /proc, which costs what the host runs. */
static void children_from_scan(pid_t parent, struct pidv *out)
{
    DIR *d = opendir("/proc");
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        char *end;
        long p = strtol(e->d_name, &end, 10);
        pid_t pp, pg, sid;
        if (*end || p <= 1 || proc_stat((pid_t)p, &pp, &pg, &sid) < 0)
            continue;
        if (pp == parent)
            pidv_add(out, (pid_t)p);
    }
    closedir(d);
}

static void children_of(pid_t pid, struct pidv *out)
{
    if (have_children_files < 0) {
        char path[96];
        snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)getpid(), (int)getpid());
        have_children_files = access(path, R_OK) == 0;
    }
    if (have_children_files)
        children_from_files(pid, out);
    else
        children_from_scan(pid, out);
}

/* Signal pid only while it is still the child of parent (the process whose children file
 * listed it): a listed process can be reaped by its parent and its pid taken by anyone before
 * the signal. With a pidfd the check and the signal name the same process; without
 * pidfd_open (before Linux 5.3) the window is the few instructions between check and kill.
 * leader != 0: only a process in the group or session of leader. 0 when signalled. */
static int signal_child(pid_t pid, pid_t parent, pid_t leader, int sig)
{
    pid_t pp, pg, sid;
    int fd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (fd < 0 && errno != ENOSYS)
        return -1;
    int rc = -1;
    if (proc_stat(pid, &pp, &pg, &sid) == 0 && pp == parent &&
        (!leader || pg == leader || sid == leader))
        rc = fd >= 0 ? (int)syscall(SYS_pidfd_send_signal, fd, sig, NULL, 0) : kill(pid, sig);
    if (fd >= 0)
        close(fd);
    return rc;
}

/* Signal every process below root (leader != 0: only those in the process group or session of
 * leader), walking down from root: as a subreaper root has adopted every orphan of its subtree,
 * so the walk reaches a daemon that left its group and session too. A parent is signalled
 * before its children file is read, so with SIGKILL it can no longer fork or reap meanwhile;
 * what it forked at the last moment or what reaches root later is met by the caller's next
 * pass. Returns how many were signalled. */
static int signal_subtree(pid_t root, pid_t leader, int sig)
{
    struct pidv l = {0}, parent = {0};
    int hits = 0;
    children_of(root, &l);
    while (parent.n < l.n)
        pidv_add(&parent, root);
    for (size_t i = 0; i < l.n; i++) {
        if (signal_child(l.v[i], parent.v[i], leader, sig) == 0)
            hits++;
        children_of(l.v[i], &l);
        while (parent.n < l.n)
            pidv_add(&parent, l.v[i]);
    }
    free(l.v);
    free(parent.v);
    return hits;
}

/* A command's process group, and for a terminal session everything in its session (a shell's
 * foreground job runs in a group of its own). */
static void kill_child(const struct child *c, int sig)
{
    /* Once reported, the command is reaped and its pid may belong to someone else. */
    if (c->cmd <= 0 || c->have_status)
        return;
    kill(-c->cmd, sig);
    kill(c->cmd, sig);
    if (c->tty)
        signal_subtree(getpid(), c->cmd, sig);
}

/* In a reaper: SIGKILL the whole subtree and reap it until nothing is left. Killed processes
 * cannot fork, and their children come to us (subreaper), so this converges. */
static int kill_subtree(void)
{
    for (int loop = 0; loop < KILL_ALL_LOOPS; loop++) {
        int st;
        pid_t w;
        while ((w = waitpid(-1, &st, WNOHANG)) > 0)
            ;
        /* Every descendant descends from a child: none left, nothing left (and no /proc pass
         * for the common command that leaves nothing behind). */
        if (w < 0 && errno == ECHILD)
            return 0;
        signal_subtree(getpid(), 0, SIGKILL);
        (void)waitpid(-1, &st, 0);
    }
    return -1;
}

/* Kill everything we ever spawned. As a child subreaper every orphan of ours is reparented to
 * us, so killing our children until none is left reaches daemons that left their group too. */
static void kill_everything(struct sup *s)
{
    for (size_t i = 0; i < s->n_children; i++)
        if (s->children[i].pid > 0)
            kill_child(&s->children[i], SIGKILL);
    for (int loop = 0; loop < KILL_ALL_LOOPS; loop++) {
        signal_subtree(getpid(), 0, SIGKILL);
        int status;
        pid_t p = waitpid(-1, &status, 0);
        if (p < 0 && errno == ECHILD)
            break;
        while (waitpid(-1, &status, WNOHANG) > 0)
            ;
    }
    for (size_t i = 0; i < s->n_children; i++) {
        s->children[i].pid = 0;
        s->children[i].cmd = 0;
        sbx_fd_close(&s->children[i].status_fd);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Connections */

/* Tell waiting clients that we move (see struct sbx__proto_wait): a client queued behind others
 * keeps waiting while we accept and answer. */
static void progressed(struct sup *s)
{
    if (s->progress_fd < 0)
        return;
    s->progress++;
    if (pwrite(s->progress_fd, &s->progress, sizeof(s->progress), 0) !=
        (ssize_t)sizeof(s->progress))
        sbx_fd_close(&s->progress_fd);
}

static int add_conn(struct sup *s, int fd)
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
    s->conns = sbx_xrealloc(s->conns, (s->n_conns + 1) * sizeof(*s->conns));
    s->conns[s->n_conns].fd = fd;
    sbx_buf_init(&s->conns[s->n_conns].in, SBX_PROTO_MAX_MSG + 4);
    s->conns[s->n_conns].child = -1;
    return (int)s->n_conns++;
}

static void drop_conn(struct sup *s, int ci)
{
    struct conn *c = &s->conns[ci];
    if (c->child >= 0) {
        /* The client went away while its command runs: the command goes too. */
        struct child *ch = &s->children[c->child];
        ch->conn = -1;
        kill_child(ch, SIGKILL);
    }
    sbx_fd_close(&c->fd);
    sbx_buf_release(&c->in);
    c->child = -1;
}

static void reply(struct sup *s, int ci, json_t *take_msg, const int *fds, size_t nfds)
{
    struct sbx_error err = SBX_ERROR_INIT;
    progressed(s);
    if (sbx__proto_send(s->conns[ci].fd, take_msg, fds, nfds, sbx_deadline_after_ms(SEND_DEADLINE),
                        &err) < 0)
        sbx_log(SBX_LOG_WARN, "cannot answer a client: %s", err.msg);
    json_decref(take_msg);
}

static void reply_err(struct sup *s, int ci, const struct sbx_error *e)
{
    reply(s, ci, sbx__proto_error(e), NULL, 0);
}

static json_t *ok_msg(void)
{
    json_t *m = json_object();
    sbx_json_set(m, "ok", json_true());
    return m;
}

/* ---------------------------------------------------------------------------------------------
 * exec */

struct exec_req {
    struct sbx_strv argv, env;
    const char *cwd, *user;
    int64_t timeout_ms, grace_ms;
    int tty, want_stdin, merge, keep_background;
    int64_t rows, cols;
};

static int parse_strv(const json_t *req, const char *key, int required, size_t max,
                      struct sbx_strv *out, struct sbx_error *err)
{
    json_t *a = NULL;
    int rc = sbx_json_get_array(req, key, required, &a, err);
    if (rc < 0 || !a)
        return rc;
    if (json_array_size(a) > max)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "field '%s' has more than %zu items", key, max);
    size_t i;
    json_t *v;
    json_array_foreach(a, i, v)
    {
        if (!json_is_string(v))
            return sbx_error_set(err, SBX_E_INVAL, 0, "field '%s' must hold strings", key);
        sbx_strv_push(out, json_string_value(v));
    }
    return 0;
}

static int parse_exec(const json_t *req, struct exec_req *x, struct sbx_error *err)
{
    int rc;
    if ((rc = parse_strv(req, "argv", 1, SBX_EXEC_MAX_ARGS, &x->argv, err)) < 0 ||
        (rc = parse_strv(req, "env", 0, SBX_EXEC_MAX_ENV, &x->env, err)) < 0 ||
        (rc = sbx_json_get_string(req, "cwd", 0, &x->cwd, err)) < 0 ||
        (rc = sbx_json_get_string(req, "user", 0, &x->user, err)) < 0 ||
        (rc = sbx_json_get_int(req, "timeout_ms", 0, &x->timeout_ms, err)) < 0 ||
        (rc = sbx_json_get_int(req, "grace_ms", 0, &x->grace_ms, err)) < 0 ||
        (rc = sbx_json_get_bool(req, "tty", 0, &x->tty, err)) < 0 ||
        (rc = sbx_json_get_bool(req, "stdin", 0, &x->want_stdin, err)) < 0 ||
        (rc = sbx_json_get_bool(req, "merge", 0, &x->merge, err)) < 0 ||
        (rc = sbx_json_get_bool(req, "keep_background", 0, &x->keep_background, err)) < 0 ||
        (rc = sbx_json_get_int(req, "rows", 0, &x->rows, err)) < 0 ||
        (rc = sbx_json_get_int(req, "cols", 0, &x->cols, err)) < 0)
        return rc;
    if (x->argv.n == 0)
        return sbx_error_set(err, SBX_E_INVAL, 0, "empty command");
    if (x->timeout_ms < 0 || x->grace_ms < 0)
        return sbx_error_set(err, SBX_E_INVAL, 0, "timeout must not be negative");
    if (x->rows < 0 || x->rows > 65535 || x->cols < 0 || x->cols > 65535)
        return sbx_error_set(err, SBX_E_INVAL, 0, "terminal size out of range");
    return 0;
}

static int add_child(struct sup *s)
{
    for (size_t i = 0; i < s->n_children; i++)
        if (s->children[i].pid == 0)
            return (int)i;
    s->children = sbx_xrealloc(s->children, (s->n_children + 1) * sizeof(*s->children));
    s->children[s->n_children].pid = 0;
    s->children[s->n_children].status_fd = -1;
    return (int)s->n_children++;
}

/* In the forked child: never returns. Only async-signal-safe calls: the supervisor is single
 * threaded, but keeping to them keeps this path valid if that ever changes.
 * This is the one place sbx starts a program without core/spawn.h, isolated or not: between
 * fork and exec it needs what posix_spawn file actions cannot express — PR_SET_PDEATHSIG (an
 * unconfined command dies with its reaper), TIOCSCTTY on the pty, and for isolation the user
 * switch, capability drop, rlimits and seccomp — and execvp's lookup of a relative or bare
 * name in the command's own PATH (and its /bin/sh fallback for scripts without #!), which
 * commands in a sandbox rely on. */
static SBX_NORETURN void child_main(const struct sup *s, const struct sbx__run_as *user,
                                    const struct exec_req *x, char **envp, int cwd_fd, int in_fd,
                                    int out_fd, int err_fd, int pty_slave, int errpipe)
{
    struct sbx_error err = SBX_ERROR_INIT;
    /* First on the error pipe: our pid, for the supervisor (our parent is the reaper). */
    pid_t self = getpid();
    if (write(errpipe, &self, sizeof(self)) != (ssize_t)sizeof(self))
        _exit(127);
    /* The supervisor changes only SIGPIPE's disposition (ignored: that would survive exec) and
     * the mask (its signals go to a signalfd); everything else is at the default already. */
    sigset_t none;
    sigemptyset(&none);
    signal(SIGPIPE, SIG_DFL);
    sigprocmask(SIG_SETMASK, &none, NULL);
    /* Unconfined, the command dies with its reaper, which dies with the supervisor. Isolated,
     * the pid namespace ends everything with the supervisor, and a reaper killed by a command of
     * the same uid (kill -9 -1) leaves its command to the supervisor, which adopts it. */
    if (!s->iso)
        prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (pty_slave >= 0) {
        if (setsid() < 0 || ioctl(pty_slave, TIOCSCTTY, 0) < 0)
            goto fail;
        in_fd = out_fd = err_fd = pty_slave;
    } else if (setpgid(0, 0) < 0) {
        goto fail;
    }
    if (dup2(in_fd, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0)
        goto fail;
    if (fchdir(cwd_fd) < 0)
        goto fail;
    /* The run_as user, capability drop, no_new_privs, rlimits and seccomp last; it allocates
     * nothing. With isolation "none" there is nothing to apply. */
    if (s->iso && sbx__isolation_child(s->iso, user, &err) < 0) {
        errno = err.sys_errno ? err.sys_errno : EPERM;
        goto fail;
    }
    environ = envp;
    execvp(x->argv.v[0], x->argv.v);
fail:
    if (err.code == SBX_OK) {
        int e = errno;
        err.code = e == ENOENT ? SBX_E_NOTFOUND : SBX_E_SYS;
        err.sys_errno = e;
    }
    ssize_t w = write(errpipe, &err, sizeof(err));
    (void)w;
    _exit(127);
}

struct child_args {
    const struct sup *s;
    const struct sbx__run_as *user;
    const struct exec_req *x;
    char **envp;
    int cwd_fd, in_fd, out_fd, err_fd, pty_slave, errpipe;
};

static int child_entry(void *p)
{
    const struct child_args *a = p;
    child_main(a->s, a->user, a->x, a->envp, a->cwd_fd, a->in_fd, a->out_fd, a->err_fd,
               a->pty_slave, a->errpipe);
}

/* Start the command from the reaper. The child shares the reaper's memory and the reaper
 * sleeps until it has executed the command or exited (vfork semantics): no page tables are
 * copied. That is sound because the child keeps to what is safe there: it has its own stack
 * (below), file table, working directory, signal dispositions, credentials, rlimits and seccomp
 * filters (none of CLONE_FILES, CLONE_FS, CLONE_SIGHAND, CLONE_THREAD), makes raw system calls
 * for the id switch (no libc thread broadcast), allocates nothing, and writes the reaper's
 * memory only in environ (which the reaper never reads again) and errno (read only when clone
 * failed). The credential switch marks the shared memory with the host's suid_dumpable: the
 * reaper restores its own flag (PID 1's: not dumpable) before it does anything else. Where clone
 * with CLONE_VM is refused (valgrind), a plain fork does the same. */
#define CHILD_STACK ((size_t)8 << 20)
static pid_t spawn_command(const struct sup *s, const struct sbx__run_as *user,
                           const struct exec_req *x, char **envp, int cwd_fd, int in_fd, int out_fd,
                           int err_fd, int pty_slave, int errpipe)
{
    struct child_args a = {s, user, x, envp, cwd_fd, in_fd, out_fd, err_fd, pty_slave, errpipe};
    /* Lazily backed, and a guard page below: execvp's buffers for a long PATH stay bounded. */
    char *stack = mmap(NULL, CHILD_STACK, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK | MAP_NORESERVE, -1, 0);
    pid_t cmd = -1;
    int dumpable = prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
    if (stack != MAP_FAILED && mprotect(stack, 4096, PROT_NONE) == 0) {
        cmd = clone(child_entry, stack + CHILD_STACK, CLONE_VM | CLONE_VFORK | SIGCHLD, &a);
        if (cmd > 0 && dumpable >= 0 && prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) != dumpable)
            (void)prctl(PR_SET_DUMPABLE, dumpable, 0, 0, 0);
    }
    int e = errno;
    if (stack != MAP_FAILED)
        munmap(stack, CHILD_STACK);
    if (cmd > 0)
        return cmd;
    if (stack != MAP_FAILED && e != EINVAL && e != ENOSYS) {
        errno = e;
        return -1;
    }
    cmd = fork();
    if (cmd == 0)
        child_main(s, user, x, envp, cwd_fd, in_fd, out_fd, err_fd, pty_slave, errpipe);
    return cmd;
}

/* The reaper of one exec (see struct child): never returns. */
static SBX_NORETURN void reaper_main(const struct sup *s, const struct sbx__run_as *user,
                                     const struct exec_req *x, char **envp, int cwd_fd, int in_fd,
                                     int out_fd, int err_fd, int pty_slave, int errpipe,
                                     int status_w)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    struct sbx_error err = SBX_ERROR_INIT;
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0) {
        pid_t none = 0;
        sbx_error_errno(&err, errno, "cannot become a child subreaper");
        (void)!write(errpipe, &none, sizeof(none));
        (void)!write(errpipe, &err, sizeof(err));
        _exit(127);
    }
    pid_t cmd = spawn_command(s, user, x, envp, cwd_fd, in_fd, out_fd, err_fd, pty_slave, errpipe);
    if (cmd < 0) {
        pid_t none = 0;
        sbx_error_errno(&err, errno, "cannot fork the command");
        (void)!write(errpipe, &none, sizeof(none));
        (void)!write(errpipe, &err, sizeof(err));
        _exit(127);
    }
    /* Hold nothing of the supervisor's (client connections, other execs' pipes): only the
     * status pipe. */
    if (status_w != 3 && dup2(status_w, 3) < 0)
        _exit(127);
    if (syscall(SYS_close_range, 4, ~0U, 0) < 0) {
        struct rlimit nofile = {1024, 1024};
        getrlimit(RLIMIT_NOFILE, &nofile);
        for (rlim_t fd = 4; fd < nofile.rlim_cur && fd < 65536; fd++)
            close((int)fd);
    }
    /* The command's status is reported before it is reaped: should we be killed in between, the
     * supervisor inherits the command (a zombie then) and still learns how it ended. */
    int st = 0;
    for (;;) {
        siginfo_t si;
        memset(&si, 0, sizeof(si));
        if (waitid(P_ALL, 0, &si, WEXITED | WNOWAIT) < 0) {
            if (errno == EINTR)
                continue;
            _exit(127);
        }
        if (si.si_pid == cmd) {
            st = si.si_code == CLD_EXITED   ? (si.si_status & 0xff) << 8
                 : si.si_code == CLD_DUMPED ? si.si_status | 0x80
                                            : si.si_status;
            break;
        }
        (void)waitpid(si.si_pid, NULL, 0);
    }
    (void)!write(3, &st, sizeof(st));
    close(3);
    (void)waitpid(cmd, NULL, 0);
    /* Exiting 0 tells the supervisor that nothing is left; otherwise it sweeps. */
    if (!x->keep_background && kill_subtree() < 0)
        _exit(1);
    /* keep_background: the rest ends by itself, or with the sandbox. */
    while (x->keep_background && (waitpid(-1, &st, 0) > 0 || errno == EINTR))
        ;
    _exit(0);
}

static void do_exec(struct sup *s, int ci, const json_t *req)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct exec_req x = {0};
    struct sbx_strv env;
    struct sbx__run_as user = {0};
    struct sbx__cgroup_events before = {0};
    int cwd_fd = -1, out_r = -1, out_w = -1, err_r = -1, err_w = -1, in_c = -1, in_s = -1;
    int master = -1, slave = -1, devnull = -1, ep[2] = {-1, -1}, sp[2] = {-1, -1};
    int rc;

    sbx_strv_init(&x.argv);
    sbx_strv_init(&x.env);
    sbx_strv_init(&env);
    rc = parse_exec(req, &x, &err);
    if (rc < 0)
        goto out;
    if (s->stopping) {
        rc = sbx_error_set(&err, SBX_E_SANDBOX, 0, "sandbox '%s' is shutting down", s->id);
        goto out;
    }
    /* The cwd is resolved beneath the workspace in one step: a planted symlink cannot lead out. */
    char *rel = NULL;
    rc = sbx_path_normalize(x.cwd ? x.cwd : "", x.cwd ? strlen(x.cwd) : 0, SBX_PATH_ALLOW_ROOT,
                            NULL, &rel, &err);
    if (rc == 0)
        rc = sbx_fs_open(s->root_fd, rel, O_RDONLY | O_DIRECTORY, 0, 0, &cwd_fd, &err);
    if (rc < 0) {
        sbx_error_prefix(&err, "working directory '%s'", x.cwd ? x.cwd : "");
        free(rel);
        goto out;
    }

    char *pwd = rel[0] ? sbx_xasprintf("%s/%s", s->root, rel) : sbx_xstrdup(s->root);
    free(rel);
    if (s->iso) {
        /* A fresh environment (nothing of ours), the manifest's, then the request's. */
        rc = sbx__isolation_user(s->iso, x.user, &user, &err);
        if (rc == 0)
            rc = sbx__isolation_env(s->iso, &user, x.tty ? "xterm-256color" : NULL,
                                    (const char *const *)x.env.v, &env, &err);
        if (rc == 0)
            sbx_strv_setenv(&env, "PWD", pwd);
        free(pwd);
        if (rc < 0)
            goto out;
    } else {
        if (x.user) {
            free(pwd);
            rc = sbx_error_set(&err, SBX_E_UNSUPPORTED, 0,
                               "user '%s': sandbox '%s' has isolation 'none' and runs every "
                               "command as the caller",
                               x.user, s->id);
            goto out;
        }
        for (size_t i = 0; i < s->env.n; i++)
            sbx_strv_push(&env, s->env.v[i]);
        sbx_strv_setenv(&env, "PWD", pwd);
        free(pwd);
        if (x.tty && !sbx_strv_getenv(&env, "TERM"))
            sbx_strv_setenv(&env, "TERM", "xterm-256color");
        for (size_t i = 0; i < x.env.n; i++) {
            char *eq = strchr(x.env.v[i], '=');
            if (!eq || eq == x.env.v[i]) {
                rc = sbx_error_set(&err, SBX_E_INVAL, 0, "environment entry '%s' must be KEY=VALUE",
                                   x.env.v[i]);
                goto out;
            }
            *eq = '\0';
            sbx_strv_setenv(&env, x.env.v[i], eq + 1);
            *eq = '=';
        }
    }

    int p[2];
    if (x.tty) {
        master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
        char name[128];
        if (master < 0 || grantpt(master) < 0 || unlockpt(master) < 0 ||
            ptsname_r(master, name, sizeof(name)) != 0) {
            rc = sbx_error_errno(&err, errno, "cannot allocate a terminal");
            goto out;
        }
        slave = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
        if (slave < 0) {
            rc = sbx_error_errno(&err, errno, "cannot open terminal '%s'", name);
            goto out;
        }
        /* The command's user owns its terminal, as login(1) would arrange. */
        if (s->iso && fchown(slave, user.uid, user.gid) < 0)
            sbx_log(SBX_LOG_WARN, "cannot give terminal '%s' to uid %d: %s", name, (int)user.uid,
                    strerror(errno));
        struct winsize ws = {.ws_row = x.rows ? (unsigned short)x.rows : DEFAULT_ROWS,
                             .ws_col = x.cols ? (unsigned short)x.cols : DEFAULT_COLS};
        (void)ioctl(master, TIOCSWINSZ, &ws);
    } else {
        if (pipe2(p, O_CLOEXEC) < 0) {
            rc = sbx_error_errno(&err, errno, "pipe");
            goto out;
        }
        out_r = p[0];
        out_w = p[1];
        if (!x.merge) {
            if (pipe2(p, O_CLOEXEC) < 0) {
                rc = sbx_error_errno(&err, errno, "pipe");
                goto out;
            }
            err_r = p[0];
            err_w = p[1];
        }
        if (x.want_stdin) {
            /* A socket, not a pipe: the client writes with MSG_NOSIGNAL, so a command that stops
             * reading cannot kill the client with SIGPIPE. */
            if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p) < 0) {
                rc = sbx_error_errno(&err, errno, "socketpair");
                goto out;
            }
            in_c = p[0];
            in_s = p[1];
            shutdown(in_s, SHUT_WR);
            shutdown(in_c, SHUT_RD);
        } else {
            devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
            if (devnull < 0) {
                rc = sbx_error_errno(&err, errno, "cannot open '/dev/null'");
                goto out;
            }
        }
    }
    if (pipe2(ep, O_CLOEXEC) < 0) {
        rc = sbx_error_errno(&err, errno, "pipe");
        goto out;
    }
    if (pipe2(sp, O_CLOEXEC) < 0) {
        rc = sbx_error_errno(&err, errno, "pipe");
        goto out;
    }
    if (s->iso)
        (void)sbx__isolation_events(s->iso, &before, NULL);
    char **envp = env.v;
    pid_t pid = fork();
    if (pid < 0) {
        rc = sbx_error_errno(&err, errno, "fork");
        goto out;
    }
    if (pid == 0)
        reaper_main(s, &user, &x, envp, cwd_fd, x.want_stdin ? in_s : devnull, out_w,
                    x.merge ? out_w : err_w, slave, ep[1], sp[1]);
    sbx_fd_close(&sp[1]);
    sbx_fd_close(&ep[1]);
    sbx_fd_close(&out_w);
    sbx_fd_close(&err_w);
    sbx_fd_close(&in_s);
    sbx_fd_close(&slave);
    struct sbx_error cerr = SBX_ERROR_INIT;
    pid_t cmd = 0;
    ssize_t n;
    do
        n = read(ep[0], &cmd, sizeof(cmd));
    while (n < 0 && errno == EINTR);
    if (n == (ssize_t)sizeof(cmd)) {
        do
            n = read(ep[0], &cerr, sizeof(cerr));
        while (n < 0 && errno == EINTR);
    } else {
        /* the reaper died before the command could start */
        cmd = 0;
        n = sizeof(cerr);
        sbx_error_set(&cerr, SBX_E_SANDBOX, 0, "the command could not be started");
    }
    if (n == (ssize_t)sizeof(cerr)) {
        /* exec failed: the command is gone already, its reaper follows */
        int st;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
        cerr.msg[sizeof(cerr.msg) - 1] = '\0';
        if (cerr.msg[0])
            rc = sbx_error_copy(&err, &cerr);
        else if (cerr.sys_errno == ENOENT)
            rc = sbx_error_set(&err, SBX_E_EXEC, ENOENT, "command '%s' not found", x.argv.v[0]);
        else {
            sbx_error_errno(&err, cerr.sys_errno, "cannot run '%s'", x.argv.v[0]);
            err.code = SBX_E_EXEC;
            rc = -SBX_E_EXEC;
        }
        goto out;
    }

    int ch = add_child(s);
    if (!x.tty)
        (void)setpgid(cmd, cmd); /* also here, so a kill right away cannot miss the group */
    s->children[ch] = (struct child){
            .pid = pid,
            .cmd = cmd,
            .status_fd = sp[0],
            .keep = x.keep_background,
            .tty = x.tty,
            .conn = ci,
            .deadline = x.timeout_ms > 0 ? sbx_deadline_after_ms(x.timeout_ms) : INT64_MAX,
            .kill_at = INT64_MAX,
            .grace_ms = x.grace_ms > 0 ? x.grace_ms : SBX_EXEC_DEFAULT_GRACE_MS,
            .before = before,
    };
    sp[0] = -1;
    s->conns[ci].child = ch;

    json_t *m = ok_msg();
    sbx_json_set(m, "pid", json_integer(cmd));
    int fds[3];
    size_t nfds = 0;
    if (x.tty) {
        fds[nfds++] = master;
    } else {
        fds[nfds++] = out_r;
        if (!x.merge)
            fds[nfds++] = err_r;
        if (x.want_stdin)
            fds[nfds++] = in_c;
    }
    reply(s, ci, m, fds, nfds);
    rc = 0;
out:
    if (rc < 0)
        reply_err(s, ci, &err);
    sbx_fd_close(&ep[0]);
    sbx_fd_close(&ep[1]);
    sbx_fd_close(&sp[0]);
    sbx_fd_close(&sp[1]);
    sbx_fd_close(&cwd_fd);
    sbx_fd_close(&out_r);
    sbx_fd_close(&out_w);
    sbx_fd_close(&err_r);
    sbx_fd_close(&err_w);
    sbx_fd_close(&in_c);
    sbx_fd_close(&in_s);
    sbx_fd_close(&master);
    sbx_fd_close(&slave);
    sbx_fd_close(&devnull);
    sbx_strv_release(&x.argv);
    sbx_strv_release(&x.env);
    sbx_strv_release(&env);
    if (rc < 0)
        drop_conn(s, ci);
}

/* ---------------------------------------------------------------------------------------------
 * ports */

/* Is something listening on TCP port in our network namespace? Returns the address family seen
 * (4 or 6), or 0. */
/* PID 1: the host port forwarding to port, from the outer process. *out: caller owns. */
static int forward_url(struct sup *s, int port, int v6, int unix_sock, char **out,
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
    const char *h = s->port_bind ? s->port_bind : "127.0.0.1";
    if (strcmp(h, "0.0.0.0") == 0)
        h = "127.0.0.1";
    else if (strcmp(h, "::") == 0)
        h = "::1";
    int bracket = strchr(h, ':') != NULL;
    *out = sbx_xasprintf("http://%s%s%s:%d", bracket ? "[" : "", h, bracket ? "]" : "",
                         r.host_port);
    return 0;
}

/* A table of 16 MiB holds some 100000 sockets: more is not a sandbox's. */
#define NET_TABLE_MAX ((size_t)16 << 20)

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

static void do_port(struct sup *s, int ci, const json_t *req)
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
        reply_err(s, ci, &err);
    } else if (unix_sock) {
        json_t *m = ok_msg();
        sbx_json_set(m, "path", sbx_json_str(url));
        free(url);
        reply(s, ci, m, NULL, 0);
    } else {
        /* Without a network namespace the service listens on the host itself. */
        json_t *m = ok_msg();
        if (!url)
            url = fam == 4 ? sbx_xasprintf("http://127.0.0.1:%lld", (long long)port)
                           : sbx_xasprintf("http://[::1]:%lld", (long long)port);
        sbx_json_set(m, "url", sbx_json_str(url));
        free(url);
        reply(s, ci, m, NULL, 0);
    }
    drop_conn(s, ci);
}

/* ---------------------------------------------------------------------------------------------
 * Requests */

static void handle(struct sup *s, int ci, json_t *req)
{
    struct sbx_error err = SBX_ERROR_INIT;
    const char *op = NULL;
    if (sbx_json_get_string(req, "op", 1, &op, &err) < 0) {
        reply_err(s, ci, &err);
        drop_conn(s, ci);
        return;
    }
    if (s->test_delay_ms)
        sbx_sleep_ms(s->test_delay_ms);
    if (strcmp(op, "exec") == 0) {
        do_exec(s, ci, req);
    } else if (strcmp(op, "info") == 0) {
        json_t *m = ok_msg();
        sbx_json_set(m, "id", sbx_json_str(s->id));
        sbx_json_set(m, "pid", json_integer(getpid()));
        sbx_json_set(m, "root", sbx_json_str(s->root));
        uint32_t first, count;
        if (s->iso && sbx__isolation_host_ids(s->iso, &first, &count))
            sbx_json_set(
                    m, "host_ids",
                    json_pack("{s:I,s:I}", "first", (json_int_t)first, "count", (json_int_t)count));
        reply(s, ci, m, NULL, 0);
        drop_conn(s, ci);
    } else if (strcmp(op, "root") == 0) {
        reply(s, ci, ok_msg(), &s->root_fd, 1);
        drop_conn(s, ci);
    } else if (strcmp(op, "port") == 0) {
        do_port(s, ci, req);
    } else if (strcmp(op, "shutdown") == 0) {
        /* Answered once everything is dead (see serve). */
        s->stopping = 1;
        s->stop_conn = ci;
    } else {
        sbx_error_set(&err, SBX_E_INVAL, 0, "unknown operation '%s'", op);
        reply_err(s, ci, &err);
        drop_conn(s, ci);
    }
}

static void on_readable(struct sup *s, int ci)
{
    struct conn *c = &s->conns[ci];
    char buf[65536];
    ssize_t n = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    if (n <= 0 || c->child >= 0) {
        /* Closed; or data on a connection that already runs a command (protocol abuse). */
        drop_conn(s, ci);
        return;
    }
    struct sbx_error err = SBX_ERROR_INIT;
    if (sbx_buf_add(&c->in, buf, (size_t)n, &err) < 0) {
        reply_err(s, ci, &err);
        drop_conn(s, ci);
        return;
    }
    json_t *req = NULL;
    size_t used = 0;
    int rc = sbx__proto_parse(c->in.data, c->in.len, &req, &used, &err);
    if (rc == 0)
        return;
    if (rc < 0) {
        reply_err(s, ci, &err);
        drop_conn(s, ci);
        return;
    }
    sbx_buf_reset(&c->in);
    handle(s, ci, req);
    json_decref(req);
}

/* The command of c ended with status (as its reaper saw it): answer its client. */
static void report_exit(struct sup *s, struct child *c, int status)
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
    reply(s, ci, m, NULL, 0);
    s->conns[ci].child = -1;
    drop_conn(s, ci);
}

/* The status the reaper of c wrote, if it did. */
static void read_status(struct sup *s, struct child *c)
{
    int st;
    ssize_t n;
    do
        n = read(c->status_fd, &st, sizeof(st));
    while (n < 0 && errno == EINTR);
    if (n == (ssize_t)sizeof(st)) {
        sbx_fd_close(&c->status_fd);
        c->have_status = 1;
        c->status = st;
        /* Without keep_background the answer waits until the reaper has killed the rest. */
        if (c->keep)
            report_exit(s, c, st);
    } else if (n == 0 || (n < 0 && errno != EAGAIN))
        sbx_fd_close(&c->status_fd); /* the reaper is ending without a report */
}

/* A live reaper, or the command of one (which a killed reaper leaves to us to adopt). */
static int is_reaper(const struct sup *s, pid_t pid)
{
    for (size_t i = 0; i < s->n_children; i++)
        if (s->children[i].pid > 0 && (s->children[i].pid == pid || s->children[i].cmd == pid))
            return 1;
    return 0;
}

static void on_exit_status(struct sup *s, pid_t pid, int status);

/* Kill every child of ours that is not a live reaper or its command: the orphans of a reaper that
 * was killed (by a command of the same uid, say). Their children come to us too and meet the next
 * pass. */
static void sweep_orphans(struct sup *s)
{
    for (int loop = 0; loop < KILL_ALL_LOOPS; loop++) {
        struct pidv l = {0};
        int hits = 0;
        children_of(getpid(), &l);
        for (size_t i = 0; i < l.n; i++)
            if (!is_reaper(s, l.v[i]) && signal_child(l.v[i], getpid(), 0, SIGKILL) == 0)
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

static void on_exit_status(struct sup *s, pid_t pid, int status)
{
    for (size_t i = 0; i < s->n_children; i++) {
        struct child *c = &s->children[i];
        if (c->pid != pid)
            continue;
        if (c->status_fd >= 0)
            read_status(s, c);
        sbx_fd_close(&c->status_fd);
        pid_t pp, pg, sid;
        if (c->cmd > 0 && !c->have_status && c->cmd != pid &&
            proc_stat(c->cmd, &pp, &pg, &sid) == 0 && pp == getpid()) {
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
        struct child *c = &s->children[i];
        if (c->pid > 0 && c->cmd == pid) {
            /* An adopted command reaped before its dead reaper. */
            report_exit(s, c, status);
            return;
        }
    }
    /* An orphan reparented to us: reaping it is all there is to do. */
}

static void reap(struct sup *s)
{
    for (;;) {
        int status;
        pid_t p = waitpid(-1, &status, WNOHANG);
        if (p <= 0)
            return;
        on_exit_status(s, p, status);
    }
}

static int64_t check_timers(struct sup *s)
{
    int64_t now = sbx_time_mono_ns(), next = INT64_MAX;
    for (size_t i = 0; i < s->n_children; i++) {
        struct child *c = &s->children[i];
        if (c->pid <= 0 || c->cmd <= 0 || c->have_status)
            continue;
        if (c->kill_at != INT64_MAX) {
            if (now >= c->kill_at) {
                kill_child(c, SIGKILL);
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
                kill_child(c, SIGTERM);
                kill_child(c, SIGCONT);
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

static void serve(struct sup *s)
{
    struct pollfd *pfd = NULL;
    size_t pcap = 0;
    while (!s->stopping) {
        size_t need = 2 + s->n_conns + s->n_children;
        if (need > pcap) {
            pcap = need;
            pfd = sbx_xrealloc(pfd, pcap * sizeof(*pfd));
        }
        size_t n = 0;
        pfd[n++] = (struct pollfd){.fd = s->sig_fd, .events = POLLIN};
        pfd[n++] = (struct pollfd){.fd = s->listen_fd, .events = POLLIN};
        for (size_t i = 0; i < s->n_conns; i++)
            pfd[n++] = (struct pollfd){.fd = s->conns[i].fd, .events = POLLIN};
        size_t first_child = n;
        for (size_t i = 0; i < s->n_children; i++)
            pfd[n++] = (struct pollfd){.fd = s->children[i].pid > 0 ? s->children[i].status_fd : -1,
                                       .events = POLLIN};
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
        for (size_t i = first_child; i < n; i++) {
            struct child *c = &s->children[i - first_child];
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
}

/* ---------------------------------------------------------------------------------------------
 * Start-up */

/* The mount point of a storage mount, made in the host workspace before the sandbox exists
 * (inside, an idmapped workspace refuses directories made by unmapped ids). Components are
 * walked without following symlinks: a given workspace could lead elsewhere. */
static int make_mount_point(const struct sup *s, const char *dst, struct sbx_error *err)
{
    size_t rl = strlen(s->root);
    const char *rel = strcmp(s->root, "/") == 0                          ? dst + 1
                      : strncmp(dst, s->root, rl) == 0 && dst[rl] == '/' ? dst + rl + 1
                                                                         : NULL;
    if (!rel)
        return 0; /* outside the workspace: the root build makes it */
    int fd = open(s->workspace, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return sbx_error_errno(err, errno, "cannot open workspace '%s'", s->workspace);
    char *copy = sbx_xstrdup(rel), *save = NULL;
    int rc = 0;
    for (char *c = strtok_r(copy, "/", &save); c && rc == 0; c = strtok_r(NULL, "/", &save)) {
        if (mkdirat(fd, c, 0755) < 0 && errno != EEXIST) {
            rc = sbx_error_errno(err, errno, "cannot create mount point '%s'", dst);
            break;
        }
        int next = openat(fd, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (next < 0)
            rc = sbx_error_errno(err, errno, "mount point '%s' is not a directory", dst);
        close(fd);
        fd = next;
    }
    if (fd >= 0)
        close(fd);
    free(copy);
    return rc;
}

/* The isolation spec of the configuration, turned into an isolation object (sbx__isolation_new
 * copies what it keeps and checks the names, grants and environment). */
static int load_isolation(struct sup *s, const struct sbx__local_config *cfg, struct sbx_error *err)
{
    struct sbx__isolation_spec spec = {0};
    struct sbx__isolation_user *users = NULL;
    struct sbx__isolation_group *groups = NULL;
    struct sbx__isolation_grant *grants = NULL;
    size_t i;

    spec.workspace = s->workspace;
    spec.root = s->root;
    spec.env = (const char *const *)s->env.v;
    char *cg = sbx_xasprintf("sbx-%s", s->id);
    spec.cgroup_name = cg;
    spec.id = s->id;
    spec.host_home = cfg->host_home;
    spec.net = cfg->net == SBX__LOCAL_CONFIG_NET_FULL ? SBX__NET_FULL : SBX__NET_NONE;
    spec.limits.memory_bytes = cfg->limits.memory_bytes;
    spec.limits.pids = cfg->limits.pids;
    spec.limits.cpu_millis = cfg->limits.cpu_millis;
    spec.limits.fsize_bytes = cfg->limits.file_size_bytes;
    spec.limits.nofile = cfg->limits.open_files;
    users = sbx_xcalloc(cfg->users.n + 1, sizeof(*users));
    for (i = 0; i < cfg->users.n; i++)
        users[i].name = cfg->users.v[i];
    spec.users = users;
    spec.nusers = cfg->users.n;
    groups = sbx_xcalloc(cfg->n_groups + 1, sizeof(*groups));
    for (i = 0; i < cfg->n_groups; i++) {
        groups[i].name = cfg->groups[i].name;
        groups[i].members = (const char *const *)cfg->groups[i].members.v;
    }
    spec.groups = groups;
    spec.ngroups = cfg->n_groups;
    grants = sbx_xcalloc(cfg->n_grants + s->mounts.n + 1, sizeof(*grants));
    for (i = 0; i < cfg->n_grants; i++) {
        grants[i].src = cfg->grants[i].src;
        grants[i].dst = cfg->grants[i].dst;
        grants[i].writable = cfg->grants[i].writable;
        grants[i].dangerous = cfg->grants[i].dangerous;
    }
    /* A storage mount is a grant of its staging mount point: under the runtime dir (in /run
     * for root, hence dangerous), never scanned for sockets (it is a bucket). */
    for (size_t k = 0; k < s->mounts.n; k++, i++) {
        grants[i].src = s->mounts.v[k].staging;
        grants[i].dst = cfg->mounts[k].dst;
        grants[i].writable = cfg->mounts[k].writable;
        grants[i].dangerous = 1;
    }
    spec.grants = grants;
    spec.ngrants = i;
    int rc = sbx__isolation_new(&spec, &s->iso, err);
    free(users);
    free(groups);
    free(grants);
    free(cg);
    return rc;
}

/* The network of an isolated sandbox: mode allow's patterns (and the proxy variables in every
 * command's environment), the forwarders' address, the test-only host map. */
static void load_network(struct sup *s, struct sbx__local_config *cfg)
{
    s->allow = cfg->allow;
    sbx_strv_init(&cfg->allow);
    s->test_hosts = cfg->test_hosts;
    sbx_strv_init(&cfg->test_hosts);
    s->port_bind = cfg->port_bind;
    cfg->port_bind = NULL;
    memcpy(s->allow_ports, cfg->allow_ports, sizeof(s->allow_ports));
    s->n_allow_ports = cfg->n_allow_ports;
    s->own_netns = cfg->net != SBX__LOCAL_CONFIG_NET_FULL;
    if (cfg->net == SBX__LOCAL_CONFIG_NET_ALLOW)
        sbx__net_proxy_env(0, &s->env);
}

/* PID 1: wait until the outer process has the network up (the proxy listening), so that the
 * first command finds it. */
static int wait_network(struct sup *s, struct sbx_error *err)
{
    struct sbx__net_reply r;
    struct pollfd p = {.fd = s->net_chan[1], .events = POLLIN};
    memset(&r, 0, sizeof(r));
    if (poll(&p, 1, NETWORK_WAIT_MS) != 1 ||
        recv(s->net_chan[1], &r, sizeof(r), 0) != (ssize_t)sizeof(r))
        return sbx_error_set(err, SBX_E_SANDBOX, 0,
                             "the sandbox network was not set up (no answer from the host side)");
    r.msg[sizeof(r.msg) - 1] = '\0';
    if (r.host_port != 1)
        return sbx_error_set(err, SBX_E_SANDBOX, 0, "the sandbox network was not set up: %s",
                             r.msg);
    return 0;
}

/* OUTER: start the proxy and the forwarders' loop, tell PID 1 how it went. */
static struct sbx__net *start_network(struct sup *s)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__net *net = NULL;
    struct sbx__net_reply r;
    int userns = -1, netns = -1;
    int rc = sbx__netns_open(sbx__isolation_inner_pid(s->iso), &userns, &netns, &err);
    if (rc == 0) {
        struct sbx__net_config cfg = {
                .userns_fd = userns,
                .netns_fd = netns,
                .patterns = (const char *const *)s->allow.v,
                .npatterns = s->allow.n,
                .ports = s->n_allow_ports ? s->allow_ports : NULL,
                .nports = s->n_allow_ports,
                .test_allow_loopback = s->test_hosts.n > 0,
                .test_hosts = (const char *const *)s->test_hosts.v,
                .control_fd = s->net_chan[0],
                .forward_bind = s->port_bind,
                .unix_dir_fd = s->dir_fd,
                .unix_dir = s->dir,
        };
        rc = sbx__net_new(&cfg, &net, &err);
    }
    memset(&r, 0, sizeof(r));
    r.host_port = rc == 0 ? 1 : 0;
    if (rc < 0) {
        snprintf(r.msg, sizeof(r.msg), "%.255s", err.msg);
        sbx_log(SBX_LOG_ERROR, "sandbox '%s': %s", s->id, err.msg);
    }
    (void)!send(s->net_chan[0], &r, sizeof(r), MSG_NOSIGNAL);
    sbx_fd_close(&s->net_chan[0]);
    if (userns >= 0)
        close(userns);
    if (netns >= 0)
        close(netns);
    return net;
}

/* ---------------------------------------------------------------------------------------------
 * A sandbox tied to its creator (sbx_local_options.tied): when that process ends, however it
 * ends, the sandbox is removed as rm would remove it. The host-side process (the only one
 * without isolation, the outer one with it) watches the creator's pidfd; the end is a SIGTERM
 * to itself, so the usual shutdown runs, and the removal follows once everything is dead. */

/* Before anything else opens a descriptor: take the creator's pidfd if it is there. */
static void tie_claim(struct sup *s)
{
    /* A pidfd (signal 0 through it works, or the process is gone already), or on kernels
     * without them a pipe whose write end the creator holds: either polls readable (a pipe:
     * hung up) once the creator is gone. */
    struct stat st;
    int r = (int)syscall(SYS_pidfd_send_signal, SBX_PROTO_TIE_FD, 0, NULL, 0);
    int pidfd = r == 0 || errno == ESRCH || errno == EPERM;
    if ((pidfd || (fstat(SBX_PROTO_TIE_FD, &st) == 0 && S_ISFIFO(st.st_mode))) &&
        fcntl(SBX_PROTO_TIE_FD, F_SETFD, FD_CLOEXEC) == 0)
        s->tie_fd = SBX_PROTO_TIE_FD;
}

static int tie_config(struct sup *s, int tied, struct sbx_error *err)
{
    if (!tied) {
        sbx_fd_close(&s->tie_fd);
        return 0;
    }
    if (s->tie_fd < 0)
        return sbx_error_set(err, SBX_E_INVAL, 0, "a tied sandbox needs its creator's pidfd");
    return 0;
}

static void *tie_main(void *arg)
{
    struct pollfd pfd = {.fd = *(const int *)arg, .events = POLLIN};
    while (poll(&pfd, 1, -1) < 0 && errno == EINTR)
        ;
    kill(getpid(), SIGTERM);
    return NULL;
}

/* The watch. The shutdown signals are blocked first, so that the SIGTERM reaches the signalfd
 * (or the outer process's wait) and never kills this process before it cleaned up. */
static int tie_watch(struct sup *s, struct sbx_error *err)
{
    sigset_t stop, all, old;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int e = pthread_create(&s->tie_thread, NULL, tie_main, &s->tie_fd);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (e != 0) {
        /* Unwatched, the sandbox could outlive its creator: end it now instead. */
        kill(getpid(), SIGTERM);
        return sbx_error_errno(err, e, "cannot watch the creating process");
    }
    s->tie_watching = 1;
    return 0;
}

/* At the end, with every process of the sandbox dead: if the creator is gone, remove the
 * runtime directory and an owned workspace (a given one stays as it is). */
/* The host side of a sandbox going away with nobody to run rm: the workspace when it is the
 * sandbox's own (after unmounting and deleting its disk image, whose path is derived: only ever
 * for a workspace sbx made), then the runtime directory. */
static void remove_sandbox_files(struct sup *s, int owned_ws)
{
    struct sbx_error e = SBX_ERROR_INIT;
    if (owned_ws) {
        char *image = sbx_xasprintf("%s" SBX__DISK_IMAGE_SUFFIX, s->workspace);
        struct stat st;
        if (lstat(image, &st) == 0 && S_ISREG(st.st_mode) &&
            sbx__disk_detach(image, NULL, s->workspace, 0, &e) < 0)
            sbx_log(SBX_LOG_WARN, "sandbox '%s': %s", s->id, e.msg);
        free(image);
        if (sbx__fs_remove_tree(s->workspace, &e) < 0)
            sbx_log(SBX_LOG_WARN, "sandbox '%s': %s", s->id, e.msg);
    }
    if (sbx__fs_remove_tree(s->dir, &e) < 0)
        sbx_log(SBX_LOG_WARN, "sandbox '%s': %s", s->id, e.msg);
}

static void tie_end(struct sup *s)
{
    if (s->tie_watching) {
        pthread_cancel(s->tie_thread);
        pthread_join(s->tie_thread, NULL);
        s->tie_watching = 0;
    }
    struct pollfd pfd = {.fd = s->tie_fd, .events = POLLIN};
    if (s->tie_fd < 0 || !s->dir || poll(&pfd, 1, 0) <= 0)
        return;
    sbx_log(SBX_LOG_INFO, "sandbox '%s': its creator ended: removing the sandbox", s->id);
    remove_sandbox_files(s, s->workspace_owned);
}

/* Take what the process keeps from the parsed configuration (cfg is left to release). */
static int load_config(struct sup *s, struct sbx__local_config *cfg, struct sbx_error *err)
{
    int rc;
    s->workspace_owned = cfg->workspace_owned;
    s->test_delay_ms = cfg->test_delay_ms;
    s->id = sbx_xstrdup(cfg->id);
    s->dir = sbx_xstrdup(cfg->dir);
    s->workspace = sbx_xstrdup(cfg->workspace);
    s->root = sbx_xstrdup(cfg->root);
    s->env = cfg->env;
    sbx_strv_init(&cfg->env);
    memcpy(s->ports, cfg->ports, sizeof(s->ports));
    s->n_ports = cfg->n_ports;
    if ((rc = tie_config(s, cfg->tied, err)) < 0)
        return rc;
    if (!cfg->isolated)
        return 0;
    load_network(s, cfg);
    for (size_t i = 0; i < cfg->n_mounts; i++)
        if ((rc = make_mount_point(s, cfg->mounts[i].dst, err)) < 0)
            return rc;
    if ((rc = sbx__mounts_start(&s->mounts, s->dir, cfg->mounts, cfg->n_mounts, err)) < 0) {
        s->mount_failed = 1;
        return rc;
    }
    return load_isolation(s, cfg, err);
}

/* The supervisor record (teardown.c): this process, and the cgroups the isolation will make,
 * written before anything else exists that rm might have to kill or remove. */
static int write_record(struct sup *s, struct sbx_error *err)
{
    s->record.pid = getpid();
    if (sbx__proc_stat(s->record.pid, &s->record.start, NULL) < 0)
        return sbx_error_errno(err, errno, "cannot read the start time of pid %d",
                               (int)s->record.pid);
    if (s->iso) {
        char *cg = sbx_xasprintf("sbx-%s", s->id);
        struct sbx_error e = SBX_ERROR_INIT;
        /* Without cgroups (an unprivileged caller on v1) the list is just empty. */
        if (sbx__cgroup_dirs_for(cg, &s->record.cgroups, &e) < 0)
            sbx_log(SBX_LOG_WARN, "sandbox cgroups not recorded: %s", e.msg);
        free(cg);
    }
    return sbx__local_record_write(s->dir_fd, &s->record, err);
}

/* PID 1 of the sandbox as a host pid: the only child of the middle process (which has forked
 * it by the time enter returns). The middle process itself when /proc cannot tell. */
static pid_t sandbox_init_pid(pid_t middle)
{
    char path[96], buf[64];
    snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)middle, (int)middle);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);
    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return middle;
    buf[n] = '\0';
    long pid = strtol(buf, NULL, 10);
    return pid > 0 ? (pid_t)pid : middle;
}

/* The creator went away before the report: nobody learnt the sandbox's id, nobody can have put
 * work into its workspace. Remove what the create made, on the host. */
static void remove_unclaimed(struct sup *s)
{
    sbx_log(SBX_LOG_WARN, "sandbox '%s': the creator went away during start-up; removing it",
            s->id);
    sbx_fd_close(&s->dir_fd);
    remove_sandbox_files(s, s->workspace_owned);
}

static int start(struct sup *s, int *outer, struct sbx_error *err)
{
    struct sbx_buf cfgtext;
    struct sbx__local_config cfg;
    json_t *cfgjson = NULL;
    int rc, parsed = 0;

    sbx_buf_init(&cfgtext, CONFIG_MAX);
    rc = sbx_fd_read_all(0, CONFIG_MAX, &cfgtext, err);
    if (rc == 0)
        rc = sbx_json_parse(cfgtext.data, cfgtext.len, NULL, &cfgjson, err);
    if (rc == 0)
        parsed = (rc = sbx__local_config_from_json(cfgjson, &cfg, err)) == 0;
    if (rc == 0)
        rc = load_config(s, &cfg, err);
    if (parsed)
        sbx__local_config_release(&cfg);
    json_decref(cfgjson);
    if (cfgtext.data)
        explicit_bzero(cfgtext.data, cfgtext.len);
    sbx_buf_release(&cfgtext);
    if (rc < 0) {
        if (!s->mount_failed)
            sbx_error_prefix(err, "supervisor configuration");
        return rc;
    }
    /* Done with stdin: no process of the sandbox keeps the creator's socket as stdio. */
    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (devnull < 0)
        return sbx_error_errno(err, errno, "cannot open '/dev/null'");
    dup2(devnull, 0);
    close(devnull);

    s->dir_fd = open(s->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (s->dir_fd < 0)
        return sbx_error_errno(err, errno, "cannot open runtime directory '%s'", s->dir);

    if ((rc = write_record(s, err)) < 0)
        return rc;

    /* Log next to the socket from here on. */
    int logfd = openat(s->dir_fd, SBX_PROTO_LOG, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (logfd >= 0) {
        dup2(logfd, 2);
        close(logfd);
    }

    /* Every exec holds a connection: allow as many as the hard limit does. */
    struct rlimit nofile;
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
        nofile.rlim_cur = nofile.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &nofile);
    }
    s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);

    /* Made here, before PID 1 exists: inside, it writes through this descriptor. Without it
     * clients wait for a plain deadline. */
    uint64_t zero = 0;
    s->progress_fd = openat(s->dir_fd, SBX_PROTO_PROGRESS,
                            O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (s->progress_fd >= 0 && pwrite(s->progress_fd, &zero, sizeof(zero), 0) != sizeof(zero))
        sbx_fd_close(&s->progress_fd);
    if (s->progress_fd < 0)
        sbx_log(SBX_LOG_WARN, "no progress counter: %s", strerror(errno));

    s->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s->listen_fd < 0)
        return sbx_error_errno(err, errno, "socket");
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d/%s", s->dir_fd,
             SBX_PROTO_SOCKNAME);
    mode_t old = umask(077);
    int b = bind(s->listen_fd, (struct sockaddr *)&sa, sizeof(sa));
    umask(old);
    if (b < 0 || listen(s->listen_fd, 128) < 0)
        return sbx_error_errno(err, errno, "cannot listen on '%s/%s'", s->dir, SBX_PROTO_SOCKNAME);

    if (s->iso) {
        /* Isolation: a descendant becomes PID 1 of the new namespaces, in a root built from
         * nothing, and serves; this process stays on the host (OUTER). Set-up errors come back
         * here, naming the missing kernel feature. */
        /* What supervisors killed with SIGKILL left: their empty cgroups. */
        unsigned stale = 0;
        struct sbx_error ignored = SBX_ERROR_INIT;
        if (sbx__cgroup_remove_stale("sbx-", 60, &stale, NULL, &ignored) == 0 && stale)
            sbx_log(SBX_LOG_INFO, "removed %u stale sandbox cgroups", stale);
        enum sbx__isolation_role role = 0;
        if (s->own_netns && socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, s->net_chan) < 0)
            return sbx_error_errno(err, errno, "cannot create the network channel");
        rc = sbx__isolation_enter(s->iso, &role, err);
        if (rc < 0)
            return rc;
        if (role == SBX__ISOLATION_INNER) {
            s->inner = 1;
            /* The rclone processes belong to the outer process; their pids mean nothing here. */
            sbx__mounts_forget(&s->mounts);
        }
        if (role == SBX__ISOLATION_OUTER) {
            sbx_fd_close(&s->net_chan[1]);
            *outer = 1;
            return 0;
        }
        sbx_fd_close(&s->net_chan[0]);
        if (s->net_chan[1] >= 0 && (rc = wait_network(s, err)) < 0)
            return rc;
        /* Inside, the runtime directory's descriptor leads into the detached host tree: let
         * go of it (the outer process removes the socket at the end). */
        sbx_fd_close(&s->dir_fd);
    }

    /* Orphans of the commands become our children, so we reap them and can kill them (inside
     * a pid namespace we are PID 1 and get them anyway). */
    if (!s->iso && prctl(PR_SET_CHILD_SUBREAPER, 1) < 0)
        return sbx_error_errno(err, errno, "cannot become a child subreaper");

    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    sigprocmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    s->sig_fd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (s->sig_fd < 0)
        return sbx_error_errno(err, errno, "signalfd");

    /* Opened by its sandbox path, after any pivot: commands and clients must see the workspace
     * the sandbox sees. */
    s->root_fd = open(s->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (s->root_fd < 0)
        return sbx_error_errno(err, errno, "cannot open workspace '%s'", s->root);
    return 0;
}

/* The host side of an isolated sandbox: wait for PID 1 to end (killing it when told to stop),
 * then remove what it cannot: the cgroups and the control socket. Host-side helpers that need
 * the host network (the allow-list proxy, port forwarders via sbx__isolation_netns_fd) belong
 * in this process. */
static int run_outer(struct sup *s)
{
    struct sbx_error err = SBX_ERROR_INIT;
    int status = 0;
    sbx_fd_close(&s->listen_fd);
    sbx_fd_close(&s->progress_fd); /* PID 1 serves */
    sbx_fd_close(&s->report_fd);   /* PID 1 reports */
    s->record.inner = sandbox_init_pid(sbx__isolation_inner_pid(s->iso));
    if (sbx__proc_stat(s->record.inner, &s->record.inner_start, NULL) < 0 ||
        sbx__local_record_write(s->dir_fd, &s->record, &err) < 0)
        sbx_log(SBX_LOG_WARN, "sandbox '%s': PID 1 not recorded: %s", s->id, err.msg);
    sbx_error_clear(&err);
    /* Once PID 1 exists its mount namespace holds copies of the staging mounts: the host's
     * go, so that the FUSE mounts exist only in the sandbox and end with it. */
    if (s->mounts.n) {
        pid_t middle = sbx__isolation_inner_pid(s->iso);
        for (int t = 0; t < 3000 && sandbox_init_pid(middle) == middle && kill(middle, 0) == 0; t++)
            usleep(10000);
        sbx__mounts_detach(&s->mounts);
    }
    struct sbx__net *net = s->net_chan[0] >= 0 ? start_network(s) : NULL;
    /* This process now mostly waits, one per sandbox: give the start-up's freed heap (the
     * configuration, the plan) back, so an idle sandbox holds no more than it uses. */
    malloc_trim(0);
    int rc = sbx__isolation_outer_wait(s->iso, &status, &err);
    sbx__mounts_stop(&s->mounts);
    sbx__net_free(net);
    if (rc < 0)
        sbx_log(SBX_LOG_WARN, "sandbox '%s': %s", s->id, err.msg);
    if (s->dir_fd >= 0)
        unlinkat(s->dir_fd, SBX_PROTO_SOCKNAME, 0);
    /* The cgroups are gone (outer_wait). A PID 1 that died otherwise than by a shutdown
     * request leaves the runtime dir (state and log, no socket) and the workspace: ps --all
     * shows it, rm or prune removes it, and the user's work in the workspace is kept. */
    if (rc == 0 && WIFEXITED(status) && WEXITSTATUS(status) == EXIT_UNCLAIMED)
        remove_unclaimed(s);
    else if (rc == 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
        sbx_log(SBX_LOG_WARN, "sandbox '%s': PID 1 ended unexpectedly (status 0x%x)", s->id,
                (unsigned)status);
    return rc < 0 ? 1 : 0;
}

/* The start-up report's "limits" (in force) and "unenforced" (name and reason of each limit the
 * host could not apply): the creator records them in the state and warns. */
static void add_limits(const struct sup *s, json_t *m)
{
    const struct sbx__cgroup *cg = sbx__isolation_cgroup(s->iso);
    json_t *lim = json_object(), *un = json_array();
    if (cg->memory_limit)
        sbx_json_set(lim, "memory", json_integer((json_int_t)cg->memory_limit));
    if (cg->pids_limit)
        sbx_json_set(lim, "pids", json_integer((json_int_t)cg->pids_limit));
    if (cg->cpu_millis)
        sbx_json_set(lim, "cpu_millis", json_integer((json_int_t)cg->cpu_millis));
    sbx_json_set(lim, "ptys", json_integer(SBX__ISOLATION_DEFAULT_PTYS));
    for (int c = 0; c < SBX__CG_NCTRL; c++) {
        if (!(cg->unenforced & (1u << c)))
            continue;
        json_t *u = json_object();
        sbx_json_set(u, "name", sbx_json_str(sbx__cgroup_ctrl_name((enum sbx__cgroup_ctrl)c)));
        sbx_json_set(u, "reason", sbx_json_str(cg->why[c]));
        sbx_json_append(un, u);
    }
    sbx_json_set(m, "limits", lim);
    sbx_json_set(m, "unenforced", un);
}

int sbx_local_supervise_main(int argc, char **argv)
{
    struct sup s = {.listen_fd = -1,
                    .sig_fd = -1,
                    .root_fd = -1,
                    .dir_fd = -1,
                    .stop_conn = -1,
                    .spare_fd = -1,
                    .progress_fd = -1,
                    .report_fd = -1,
                    .net_chan = {-1, -1},
                    .tie_fd = -1};
    struct sbx_error err = SBX_ERROR_INIT;
    int rc, unclaimed = 0;

    /* argv[1] is the sandbox id: unused but for ps(1), where it tells supervisors apart. */
    if (argc != 2 || !argv[1][0]) {
        fprintf(stderr, "sbx: %s is internal to sbx\n", SBX_LOCAL_SUPERVISE_VERB);
        return 2;
    }
    tie_claim(&s);
    /* Detach: the creator started us as a session leader and waits for this first process;
     * the supervisor proper is its child, which is no session leader (so it can never acquire
     * a controlling terminal) and is reparented once this process exits. */
    pid_t first = fork();
    if (first < 0) {
        fprintf(stderr, "sbx: supervisor: fork: %s\n", strerror(errno));
        return 1;
    }
    if (first > 0)
        _exit(0);
    sbx_strv_init(&s.env);
    sbx__local_record_init(&s.record);
    /* fd 2 becomes the log in the runtime directory: bounded, since a sandbox can fill it. */
    static struct sbx__logcap log = {.fd = 2};
    sbx_log_set_handler(sbx__logcap_handler, &log, SBX_LOG_INFO);
    /* The report leaves on a close-on-exec copy of stdout; stdout itself becomes /dev/null, so
     * that only the processes that report (or fail to) hold the creator's socket, which it
     * reads until every holder let go. */
    s.report_fd = fcntl(1, F_DUPFD_CLOEXEC, 3);
    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (s.report_fd < 0 || devnull < 0) {
        fprintf(stderr, "sbx: supervisor: %s\n", strerror(errno));
        return 1;
    }
    dup2(devnull, 1);
    close(devnull);
    int outer = 0;
    rc = start(&s, &outer, &err);
    if (s.iso && !outer)
        sbx_fd_close(&s.tie_fd); /* PID 1 (or a set-up failure): the host side watches */
    if (rc == 0 && s.tie_fd >= 0 && (rc = tie_watch(&s, &err)) < 0 && outer) {
        /* PID 1 reports; this process can only log (the sandbox is ending already). */
        sbx_log(SBX_LOG_ERROR, "sandbox '%s': %s", s.id, err.msg);
        sbx_error_clear(&err);
        rc = 0;
    }
    if (rc == 0 && outer) {
        rc = run_outer(&s) == 0 ? 0 : -1;
        goto out;
    }

    /* Report to the creator, then let go of its socket. */
    json_t *m = rc < 0 ? sbx__proto_error(&err) : ok_msg();
    if (rc == 0)
        sbx_json_set(m, "pid", json_integer(getpid()));
    if (rc == 0 && s.iso)
        add_limits(&s, m);
    char *text = sbx_json_dumps(m, SBX_JSON_COMPACT);
    json_decref(m);
    signal(SIGPIPE, SIG_IGN);
    int wrc = sbx_fd_write_all(s.report_fd, text, strlen(text), NULL);
    free(text);
    sbx_fd_close(&s.report_fd);
    unclaimed = wrc < 0 && s.id;
    if (rc == 0 && wrc < 0)
        rc = -1;
    if (rc == 0) {
        sbx_log(SBX_LOG_INFO, "sandbox '%s' serving (pid %d)", s.id, (int)getpid());
        malloc_trim(0); /* the start-up's freed heap: an idle sandbox keeps only what it uses */
        serve(&s);
        kill_everything(&s);
        unlinkat(s.dir_fd, SBX_PROTO_SOCKNAME, 0);
        sbx_log(SBX_LOG_INFO, "sandbox '%s' stopped", s.id);
        if (s.stop_conn >= 0 && s.conns[s.stop_conn].fd >= 0)
            reply(&s, s.stop_conn, ok_msg(), NULL, 0);
    } else if (s.dir_fd >= 0) {
        unlinkat(s.dir_fd, SBX_PROTO_SOCKNAME, 0);
    }
    /* Inside, PID 1 cannot reach the host paths: the host side removes them on this status. */
    if (unclaimed && !s.inner)
        remove_unclaimed(&s);
out:
    tie_end(&s);
    for (size_t i = 0; i < s.n_conns; i++)
        if (s.conns[i].fd >= 0)
            drop_conn(&s, (int)i);
    sbx__mounts_stop(&s.mounts);
    sbx__isolation_free(s.iso);
    free(s.conns);
    free(s.children);
    sbx_fd_close(&s.listen_fd);
    sbx_fd_close(&s.sig_fd);
    sbx_fd_close(&s.root_fd);
    sbx_fd_close(&s.dir_fd);
    sbx_fd_close(&s.spare_fd);
    sbx_fd_close(&s.progress_fd);
    sbx_fd_close(&s.report_fd);
    sbx_fd_close(&s.tie_fd);
    sbx_strv_release(&s.env);
    sbx_strv_release(&s.allow);
    sbx_strv_release(&s.test_hosts);
    free(s.port_bind);
    sbx_fd_close(&s.net_chan[0]);
    sbx_fd_close(&s.net_chan[1]);
    free(s.id);
    free(s.dir);
    free(s.workspace);
    free(s.root);
    sbx__local_record_release(&s.record);
    return unclaimed ? EXIT_UNCLAIMED : rc < 0 ? 1 : 0;
}
