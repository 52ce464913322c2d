/* Running a host program: see spawn.h. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

int sbx__spawn_start(const struct sbx__spawn *sp, struct sbx__child *c, struct sbx_error *err)
{
    const char *name = sp->name ? sp->name : sp->program ? sp->program : "";
    const struct sbx__spawn_stdio *io[3] = {&sp->in, &sp->out, &sp->err};
    int ends[3] = {-1, -1, -1}; /* the caller's pipe ends */
    int high[3 + SBX__SPAWN_KEEP_MAX];
    size_t nhigh = 0;
    char *path = NULL;
    int rc = 0, top = 2, fa_ok = 0, attr_ok = 0;
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;

    if (sp->nkeep > SBX__SPAWN_KEEP_MAX)
        return sbx_error_set(err, SBX_E_INVAL, 0, "cannot run '%s': too many fds to keep", name);
    for (size_t i = 0; i < sp->nkeep; i++) {
        if (sp->keep[i].at < 3 || sp->keep[i].fd < 0)
            return sbx_error_set(err, SBX_E_INVAL, 0, "cannot run '%s': bad fd to keep", name);
        for (size_t j = 0; j < i; j++)
            if (sp->keep[j].at == sp->keep[i].at)
                return sbx_error_set(err, SBX_E_INVAL, 0, "cannot run '%s': fd %d kept twice", name,
                                     sp->keep[i].at);
        if (sp->keep[i].at > top)
            top = sp->keep[i].at;
    }
    if ((rc = resolve(sp, name, &path, err)) < 0)
        return rc;
    struct stat cst;
    if (sp->cwd) {
        int e = stat(sp->cwd, &cst) < 0 ? errno : S_ISDIR(cst.st_mode) ? 0 : ENOTDIR;
        if (e) {
            free(path);
            return sbx_error_errno(err, e, "cannot run '%s' in '%s'", name, sp->cwd);
        }
    }
    posix_spawn_file_actions_init(&fa);
    fa_ok = 1;
    posix_spawnattr_init(&attr);
    attr_ok = 1;

    /* Every fd the child gets is first copied above all the numbers it gets them at, so one
     * dup2 can never overwrite the source of another; the copies are close-on-exec. */
    for (int i = 0; i < 3; i++) {
        int src = -1;
        switch (io[i]->how) {
        case SBX__SPAWN_NULL:
            posix_spawn_file_actions_addopen(&fa, i, "/dev/null", i == 0 ? O_RDONLY : O_WRONLY, 0);
            continue;
        case SBX__SPAWN_INHERIT:
            continue;
        case SBX__SPAWN_FD:
            src = io[i]->fd;
            break;
        case SBX__SPAWN_PIPE: {
            int p[2];
            if (pipe2(p, O_CLOEXEC) < 0) {
                rc = sbx_error_errno(err, errno, "cannot run '%s': pipe", name);
                goto out;
            }
            ends[i] = i == 0 ? p[1] : p[0];
            src = i == 0 ? p[0] : p[1];
            break;
        }
        default:
            rc = sbx_error_set(err, SBX_E_INVAL, 0, "cannot run '%s': bad stdio", name);
            goto out;
        }
        int h = fcntl(src, F_DUPFD_CLOEXEC, top + 1), e = errno;
        if (io[i]->how == SBX__SPAWN_PIPE)
            close(src); /* the child's end lives on as h */
        if (h < 0) {
            rc = sbx_error_errno(err, e, "cannot run '%s': fd %d", name, src);
            goto out;
        }
        high[nhigh++] = h;
        posix_spawn_file_actions_adddup2(&fa, h, i);
    }
    for (size_t i = 0; i < sp->nkeep; i++) {
        int h = fcntl(sp->keep[i].fd, F_DUPFD_CLOEXEC, top + 1);
        if (h < 0) {
            rc = sbx_error_errno(err, errno, "cannot run '%s': fd %d", name, sp->keep[i].fd);
            goto out;
        }
        high[nhigh++] = h;
        posix_spawn_file_actions_adddup2(&fa, h, sp->keep[i].at);
    }
    /* Nothing else crosses, close-on-exec or not: the gaps below the highest kept fd one by one
     * (a close of an fd that is not open is no error in a file action), the rest at once. */
    for (int fd = 3; fd < top; fd++) {
        int kept = 0;
        for (size_t i = 0; i < sp->nkeep; i++)
            kept |= sp->keep[i].at == fd;
        if (!kept)
            posix_spawn_file_actions_addclose(&fa, fd);
    }
    posix_spawn_file_actions_addclosefrom_np(&fa, top + 1);
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

    const char *const just[] = {sp->program, NULL};
    const char *const empty[] = {NULL};
    const char *const *argv = sp->argv ? sp->argv : just;
    const char *const *envp = sp->inherit_env ? (const char *const *)environ
                              : sp->env       ? sp->env
                                              : empty;
    pid_t pid;
    int e = posix_spawn(&pid, path, &fa, &attr, (char *const *)argv, (char *const *)envp);
    if (e != 0) {
        rc = sp->cwd ? sbx_error_errno(err, e, "cannot run '%s' in '%s'", name, sp->cwd)
                     : sbx_error_errno(err, e, "cannot run '%s'", name);
        goto out;
    }
    c->pid = pid;
    c->in = ends[0];
    c->out = ends[1];
    c->err = ends[2];
    ends[0] = ends[1] = ends[2] = -1;
    c->own_group = sp->new_session || sp->new_group;
    snprintf(c->name, sizeof(c->name), "%s", name);
out:
    for (size_t i = 0; i < nhigh; i++)
        close(high[i]);
    for (int i = 0; i < 3; i++)
        sbx_fd_close(&ends[i]);
    if (fa_ok)
        posix_spawn_file_actions_destroy(&fa);
    if (attr_ok)
        posix_spawnattr_destroy(&attr);
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
