/* Running a host program: see spawn.h. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/spawn.h"
#include "sbx/common.h"
#include "sbx/fs.h"
#include "sbx/time.h"

/* How often a wait polls the child where pidfd_open is missing (Linux < 5.3, valgrind). */
#define WAIT_POLL_NS (10 * 1000 * 1000)

extern char **environ;

/* Absolute paths are taken as they are; a bare name is found in the search path, so what runs
 * never depends on the caller's $PATH. */
static int resolve(const struct sbx__spawn *sp, const char *name, char **out, struct sbx_error *err)
{
    const char *p = sp->program;
    if (!p || !p[0])
        return sbx_error_set(err, SBX_E_INVAL, 0, "no program to run");
    if (strchr(p, '/')) {
        if (p[0] != '/')
            return sbx_error_set(err, SBX_E_INVAL, 0, "cannot run '%s': not an absolute path",
                                 name);
        /* posix_spawn reports these too, but not everywhere (under valgrind the child is a
         * plain fork and an exec failure only shows as status 127): say it clearly first. */
        struct stat st;
        if (stat(p, &st) < 0)
            return sbx_error_errno(err, errno, "cannot run '%s'", name);
        if (!S_ISREG(st.st_mode) || access(p, X_OK) < 0)
            return sbx_error_errno(err, S_ISREG(st.st_mode) ? errno : EACCES, "cannot run '%s'",
                                   name);
        *out = sbx_xstrdup(p);
        return 0;
    }
    const char *path = sp->search_path ? sp->search_path : SBX__SPAWN_PATH;
    for (const char *d = path; *d;) {
        const char *colon = strchr(d, ':');
        size_t len = colon ? (size_t)(colon - d) : strlen(d);
        if (len && d[0] == '/') {
            char *full = sbx_xasprintf("%.*s/%s", (int)len, d, p);
            struct stat st;
            if (stat(full, &st) == 0 && S_ISREG(st.st_mode) && access(full, X_OK) == 0) {
                *out = full;
                return 0;
            }
            free(full);
        }
        d += len + (colon ? 1 : 0);
    }
    return sbx_error_set(err, SBX_E_NOTFOUND, ENOENT, "cannot run '%s': not found in '%s'", name,
                         path);
}

static void close_ends(struct sbx__child *c)
{
    sbx_fd_close(&c->in);
    sbx_fd_close(&c->out);
    sbx_fd_close(&c->err);
}

/* What the child's descriptors become. Every fd it gets is first copied above all the numbers
 * it gets them at (from, close-on-exec), so that one dup2 can never overwrite the source of
 * another; a target without a source (from -1) gets /dev/null opened with null_flags. Fds 0-2
 * of SBX__SPAWN_INHERIT are not listed: the child has the caller's. */
struct fd_plan {
    struct {
        int from, to, null_flags;
    } v[3 + SBX__SPAWN_KEEP_MAX];
    size_t n;
    int top;     /* the highest fd the child gets: every other one below it is closed */
    int ends[3]; /* the caller's ends of SBX__SPAWN_PIPE streams */
};

static void plan_release(struct fd_plan *p)
{
    for (size_t i = 0; i < p->n; i++)
        if (p->v[i].from >= 0)
            close(p->v[i].from);
    p->n = 0;
    for (int i = 0; i < 3; i++)
        sbx_fd_close(&p->ends[i]);
}

/* The copy of src above every target, as the source of target to. */
static int plan_add(struct fd_plan *p, int src, int to, const char *name, struct sbx_error *err)
{
    int h = fcntl(src, F_DUPFD_CLOEXEC, p->top + 1);
    if (h < 0)
        return sbx_error_errno(err, errno, "cannot run '%s': fd %d", name, src);
    p->v[p->n].from = h;
    p->v[p->n].to = to;
    p->n++;
    return 0;
}

static int plan_fds(const struct sbx__spawn *sp, const char *name, struct fd_plan *p,
                    struct sbx_error *err)
{
    const struct sbx__spawn_stdio *io[3] = {&sp->in, &sp->out, &sp->err};
    memset(p, 0, sizeof(*p));
    p->ends[0] = p->ends[1] = p->ends[2] = -1;
    p->top = 2;
    if (sp->nkeep > SBX__SPAWN_KEEP_MAX)
        return sbx_error_set(err, SBX_E_INVAL, 0, "cannot run '%s': too many fds to keep", name);
    for (size_t i = 0; i < sp->nkeep; i++) {
        if (sp->keep[i].at < 3 || sp->keep[i].fd < 0)
            return sbx_error_set(err, SBX_E_INVAL, 0, "cannot run '%s': bad fd to keep", name);
        for (size_t j = 0; j < i; j++)
            if (sp->keep[j].at == sp->keep[i].at)
                return sbx_error_set(err, SBX_E_INVAL, 0, "cannot run '%s': fd %d kept twice", name,
                                     sp->keep[i].at);
        if (sp->keep[i].at > p->top)
            p->top = sp->keep[i].at;
    }
    for (int i = 0; i < 3; i++) {
        int rc, pp[2];
        switch (io[i]->how) {
        case SBX__SPAWN_NULL:
            p->v[p->n].from = -1;
            p->v[p->n].to = i;
            p->v[p->n].null_flags = i == 0 ? O_RDONLY : O_WRONLY;
            p->n++;
            continue;
        case SBX__SPAWN_INHERIT:
            continue;
        case SBX__SPAWN_FD:
            rc = plan_add(p, io[i]->fd, i, name, err);
            break;
        case SBX__SPAWN_PIPE:
            if (pipe2(pp, O_CLOEXEC) < 0)
                return sbx_error_errno(err, errno, "cannot run '%s': pipe", name);
            p->ends[i] = i == 0 ? pp[1] : pp[0];
            rc = plan_add(p, i == 0 ? pp[0] : pp[1], i, name, err);
            close(i == 0 ? pp[0] : pp[1]); /* the child's end lives on as the copy */
            break;
        default:
            return sbx_error_set(err, SBX_E_INVAL, 0, "cannot run '%s': bad stdio", name);
        }
        if (rc < 0)
            return rc;
    }
    for (size_t i = 0; i < sp->nkeep; i++) {
        int rc = plan_add(p, sp->keep[i].fd, sp->keep[i].at, name, err);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* 1 when the plan gives the child fd. */
static int planned(const struct fd_plan *p, int fd)
{
    for (size_t i = 0; i < p->n; i++)
        if (p->v[i].to == fd)
            return 1;
    return 0;
}

/* The common case: posix_spawn, the plan as file actions. */
static int start_spawn(const struct sbx__spawn *sp, const struct fd_plan *p, const char *path,
                       char *const *argv, char *const *envp, pid_t *pid)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&attr);
    for (size_t i = 0; i < p->n; i++) {
        if (p->v[i].from < 0)
            posix_spawn_file_actions_addopen(&fa, p->v[i].to, "/dev/null", p->v[i].null_flags, 0);
        else
            posix_spawn_file_actions_adddup2(&fa, p->v[i].from, p->v[i].to);
    }
    /* Nothing else crosses, close-on-exec or not: the gaps below the highest kept fd one by one
     * (a close of an fd that is not open is no error in a file action), the rest at once. */
    for (int fd = 3; fd < p->top; fd++)
        if (!planned(p, fd))
            posix_spawn_file_actions_addclose(&fa, fd);
    posix_spawn_file_actions_addclosefrom_np(&fa, p->top + 1);
    if (sp->cwd)
        posix_spawn_file_actions_addchdir_np(&fa, sp->cwd);
    short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
    if (sp->new_session)
        flags |= POSIX_SPAWN_SETSID;
    else if (sp->new_group)
        flags |= POSIX_SPAWN_SETPGROUP; /* process group 0: its own */
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setflags(&attr, flags);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &all);
    posix_spawnattr_setpgroup(&attr, 0);
    int e = posix_spawn(pid, path, &fa, &attr, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    return e;
}

/* In the forked child of start_fork: what posix_spawn does, plus the parent-death signal, with
 * async-signal-safe calls only (the caller may have threads). An error before the exec goes to
 * the parent as an errno on errpipe, which is above every target and close-on-exec. */
static SBX_NORETURN void fork_child(const struct sbx__spawn *sp, const struct fd_plan *p,
                                    const char *path, char *const *argv, char *const *envp,
                                    pid_t parent, int errpipe)
{
    struct sigaction dfl;
    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; sig++)
        if (sig != SIGKILL && sig != SIGSTOP)
            (void)sigaction(sig, &dfl, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (prctl(PR_SET_PDEATHSIG, sp->parent_death_signal) < 0)
        goto fail;
    /* The parent ended before the prctl took effect: no signal will come, so end now. */
    if (getppid() != parent)
        _exit(127);
    if ((sp->new_session && setsid() < 0) ||
        (!sp->new_session && sp->new_group && setpgid(0, 0) < 0))
        goto fail;
    for (size_t i = 0; i < p->n; i++) {
        int fd = p->v[i].from;
        if (fd < 0 && (fd = open("/dev/null", p->v[i].null_flags)) < 0)
            goto fail;
        if (fd != p->v[i].to && dup2(fd, p->v[i].to) < 0)
            goto fail;
        if (p->v[i].from < 0 && fd != p->v[i].to)
            close(fd);
    }
    for (int fd = 3; fd < p->top; fd++)
        if (!planned(p, fd))
            close(fd);
    /* Everything above the top goes, but the error pipe: moved just above it first. */
    if (errpipe != p->top + 1 && (errpipe = dup3(errpipe, p->top + 1, O_CLOEXEC)) < 0)
        goto fail;
    if (syscall(SYS_close_range, p->top + 2, ~0U, 0) < 0)
        for (int fd = p->top + 2; fd < 65536; fd++)
            close(fd);
    if (sp->cwd && chdir(sp->cwd) < 0)
        goto fail;
    execve(path, argv, envp);
fail:;
    int e = errno;
    (void)!write(errpipe, &e, sizeof(e));
    _exit(127);
}

/* With a parent-death signal, which posix_spawn has no attribute for: fork, and the plan applied
 * by hand. Returns 0 or an errno as posix_spawn does (an exec failure included). */
static int start_fork(const struct sbx__spawn *sp, const struct fd_plan *p, const char *path,
                      char *const *argv, char *const *envp, pid_t *pid)
{
    int ep[2], e = 0;
    if (pipe2(ep, O_CLOEXEC) < 0)
        return errno;
    int ew = fcntl(ep[1], F_DUPFD_CLOEXEC, p->top + 1);
    e = errno;
    close(ep[1]);
    if (ew < 0) {
        close(ep[0]);
        return e;
    }
    pid_t parent = getpid();
    pid_t child = fork();
    e = errno;
    if (child == 0)
        fork_child(sp, p, path, argv, envp, parent, ew);
    close(ew);
    if (child < 0) {
        close(ep[0]);
        return e;
    }
    ssize_t n;
    do
        n = read(ep[0], &e, sizeof(e));
    while (n < 0 && errno == EINTR);
    close(ep[0]);
    if (n == (ssize_t)sizeof(e)) {
        while (waitpid(child, NULL, 0) < 0 && errno == EINTR)
            ;
        return e;
    }
    *pid = child;
    return 0;
}

int sbx__spawn_start(const struct sbx__spawn *sp, struct sbx__child *c, struct sbx_error *err)
{
    const char *name = sp->name ? sp->name : sp->program ? sp->program : "";
    struct fd_plan plan;
    char *path = NULL;
    int rc;

    if ((rc = plan_fds(sp, name, &plan, err)) < 0)
        goto out;
    if ((rc = resolve(sp, name, &path, err)) < 0)
        goto out;
    struct stat cst;
    if (sp->cwd) {
        int e = stat(sp->cwd, &cst) < 0 ? errno : S_ISDIR(cst.st_mode) ? 0 : ENOTDIR;
        if (e) {
            rc = sbx_error_errno(err, e, "cannot run '%s' in '%s'", name, sp->cwd);
            goto out;
        }
    }
    const char *const just[] = {sp->program, NULL};
    const char *const empty[] = {NULL};
    char *const *argv = (char *const *)(sp->argv ? sp->argv : just);
    char *const *envp = sp->inherit_env ? environ : (char *const *)(sp->env ? sp->env : empty);
    pid_t pid;
    int e = sp->parent_death_signal ? start_fork(sp, &plan, path, argv, envp, &pid)
                                    : start_spawn(sp, &plan, path, argv, envp, &pid);
    if (e != 0) {
        rc = sp->cwd ? sbx_error_errno(err, e, "cannot run '%s' in '%s'", name, sp->cwd)
                     : sbx_error_errno(err, e, "cannot run '%s'", name);
        goto out;
    }
    c->pid = pid;
    c->in = plan.ends[0];
    c->out = plan.ends[1];
    c->err = plan.ends[2];
    plan.ends[0] = plan.ends[1] = plan.ends[2] = -1;
    c->own_group = sp->new_session || sp->new_group;
    snprintf(c->name, sizeof(c->name), "%s", name);
out:
    plan_release(&plan);
    free(path);
    return rc;
}

static int reap(pid_t pid, int *status)
{
    int st = 0;
    pid_t r;
    while ((r = waitpid(pid, &st, 0)) < 0 && errno == EINTR)
        ;
    if (r == pid && status)
        *status = st;
    return r == pid ? 0 : -1;
}

/* Wait until the child has exited (it is not reaped) or the deadline passes: 1 exited, 0 not. */
static int exited_by(pid_t pid, int64_t deadline)
{
    int fd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (fd >= 0) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r;
        while ((r = poll(&p, 1, sbx_deadline_poll_ms(deadline))) < 0 && errno == EINTR)
            ;
        close(fd);
        return r > 0;
    }
    for (;;) {
        siginfo_t si = {0};
        if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) < 0 && errno != EINTR)
            return 1; /* not ours to wait for: let the reap report it */
        if (si.si_pid == pid)
            return 1;
        if (sbx_deadline_poll_ms(deadline) == 0)
            return 0;
        struct timespec ts = {0, WAIT_POLL_NS};
        nanosleep(&ts, NULL);
    }
}

void sbx__child_kill(struct sbx__child *c)
{
    close_ends(c);
    if (c->pid <= 0)
        return;
    /* Unreaped, the child holds its pid and group id: neither can name another process yet. */
    if (c->own_group)
        kill(-c->pid, SIGKILL);
    kill(c->pid, SIGKILL);
    reap(c->pid, NULL);
    c->pid = -1;
}

static int wait_deadline(struct sbx__child *c, int64_t deadline, int64_t timeout_ms, int *status,
                         struct sbx_error *err)
{
    close_ends(c);
    if (c->pid <= 0)
        return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not running", c->name);
    if (deadline != INT64_MAX && !exited_by(c->pid, deadline)) {
        sbx__child_kill(c);
        return sbx_error_set(err, SBX_E_TIMEOUT, 0, "'%s' did not finish within %lld ms", c->name,
                             (long long)timeout_ms);
    }
    int rc = reap(c->pid, status) < 0 ? sbx_error_errno(err, errno, "cannot wait for '%s'", c->name)
                                      : 0;
    c->pid = -1;
    return rc;
}

int sbx__child_wait(struct sbx__child *c, int64_t timeout_ms, int *status, struct sbx_error *err)
{
    return wait_deadline(c, sbx_deadline_after_ms(timeout_ms), timeout_ms, status, err);
}

static void take(struct sbx_buf *b, const char *p, size_t n, int *cut)
{
    if (!b)
        return;
    size_t room = b->max - b->len;
    size_t k = n < room ? n : room;
    if (k && sbx_buf_add(b, p, k, NULL) < 0)
        k = 0;
    if (k < n)
        *cut = 1;
}

int sbx__spawn_run(const struct sbx__spawn *sp, int64_t timeout_ms, struct sbx__spawn_capture *cap,
                   struct sbx_error *err)
{
    struct sbx__child c = {.pid = -1, .in = -1, .out = -1, .err = -1};
    int64_t deadline = sbx_deadline_after_ms(timeout_ms);
    int rc;

    if (sp->in.how == SBX__SPAWN_PIPE)
        return sbx_error_set(err, SBX_E_INVAL, 0, "cannot run '%s': nothing feeds its stdin",
                             sp->name      ? sp->name
                             : sp->program ? sp->program
                                           : "");
    cap->out_cut = cap->err_cut = 0;
    cap->status = 0;
    if ((rc = sbx__spawn_start(sp, &c, err)) < 0)
        return rc;
    struct pollfd pfd[2] = {{.fd = c.out, .events = POLLIN}, {.fd = c.err, .events = POLLIN}};
    while (pfd[0].fd >= 0 || pfd[1].fd >= 0) {
        int r = poll(pfd, 2, sbx_deadline_poll_ms(deadline));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = sbx_error_errno(err, errno, "cannot read the output of '%s'", c.name);
            sbx__child_kill(&c);
            return rc;
        }
        if (r == 0)
            break; /* the deadline: wait_deadline below kills */
        for (int i = 0; i < 2; i++) {
            if (pfd[i].fd < 0 || !pfd[i].revents)
                continue;
            char buf[4096];
            ssize_t n = read(pfd[i].fd, buf, sizeof(buf));
            if (n < 0 && (errno == EINTR || errno == EAGAIN))
                continue;
            if (n <= 0) {
                pfd[i].fd = -1;
                continue;
            }
            take(i == 0 ? cap->out : cap->err, buf, (size_t)n,
                 i == 0 ? &cap->out_cut : &cap->err_cut);
        }
    }
    return wait_deadline(&c, deadline, timeout_ms, &cap->status, err);
}

void sbx__spawn_describe(int status, char *buf, size_t n)
{
    if (WIFEXITED(status))
        snprintf(buf, n, "status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, n, "signal %d", WTERMSIG(status));
    else
        snprintf(buf, n, "wait status 0x%x", (unsigned)status);
}
