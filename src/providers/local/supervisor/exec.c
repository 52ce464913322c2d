/* The local provider's supervisor: one exec request. The command runs under a reaper of its own
 * (supervisor.h, struct sbx__sup_child): the supervisor starts the reaper, the reaper starts the
 * command (vfork-like, spawn_command) and reports its status, and the client gets the
 * command's stdio as descriptors. The reaper shares the supervisor's memory (start_reaper): no
 * page tables are copied per exec. sbx__sup_exec is the request in four steps: environment
 * (exec_cwd, exec_env), stdio (exec_stdio), spawn (exec_spawn) and reply (exec_reply). */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "core/grow.h"
#include "core/spawn.h"
#include "providers/local/supervisor/supervisor.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/log.h"
#include "sbx/path.h"
#include "sbx/time.h"

#define DEFAULT_ROWS 24
#define DEFAULT_COLS 80

extern char **environ;

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

static int add_child(struct sbx__sup *s)
{
    for (size_t i = 0; i < s->n_children; i++)
        if (s->children[i].pid == 0)
            return (int)i;
    SBX_ALLOC_GROW(s->children, s->n_children + 1, s->alloc_children);
    s->children[s->n_children].pid = 0;
    s->children[s->n_children].status_fd = -1;
    s->children[s->n_children].stacks = NULL;
    return (int)s->n_children++;
}

/* What the command's process gets: all borrowed from the reaper, whose memory it shares. */
struct exec_child {
    const struct sbx__sup *s;
    const struct sbx__run_as *user;
    const struct exec_req *x;
    char **envp;
    int cwd_fd, in_fd, out_fd, err_fd;
    int pty_slave; /* -1: none */
    int errpipe;   /* the command's pid (unless shared), then an error if it does not start */
    /* The reaper shares the supervisor's memory (start_reaper): the command's pid reaches the
     * supervisor in *cmd_pid, written by the kernel as the reaper clones it (or by the reaper
     * after a fork), and nothing but an error goes on the error pipe. 0: a forked reaper, the
     * pid goes on the pipe first. */
    int shared;
    pid_t *cmd_pid;
    int status_w; /* the reaper reports the command's wait status here */
    char *stacks; /* the reaper's and the command's stacks (exec_stacks); NULL: none */
};

/* In the forked child: never returns. Only async-signal-safe calls: the supervisor is single
 * threaded, but keeping to them keeps this path valid if that ever changes.
 * This is the one place sbx starts a program without core/spawn.h, isolated or not: between
 * fork and exec it needs what the spawn helper does not do — TIOCSCTTY on the pty, and for
 * isolation the user switch, capability drop, rlimits and seccomp — and execvp's lookup of a
 * relative or bare name in the command's own PATH (and its /bin/sh fallback for scripts
 * without #!), which commands in a sandbox rely on. */
static SBX_NORETURN void child_main(const struct exec_child *a)
{
    struct sbx_error err = SBX_ERROR_INIT;
    /* First on the error pipe: our pid, for the supervisor (our parent is the reaper), unless
     * the supervisor has it already: one wake-up of the supervisor less per exec. */
    pid_t self = a->shared ? 0 : getpid();
    if (!a->shared && write(a->errpipe, &self, sizeof(self)) != (ssize_t)sizeof(self))
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
    if (!a->s->iso)
        prctl(PR_SET_PDEATHSIG, SIGKILL);
    int in_fd = a->in_fd, out_fd = a->out_fd, err_fd = a->err_fd;
    if (a->pty_slave >= 0) {
        if (setsid() < 0 || ioctl(a->pty_slave, TIOCSCTTY, 0) < 0)
            goto fail;
        in_fd = out_fd = err_fd = a->pty_slave;
    } else if (setpgid(0, 0) < 0) {
        goto fail;
    }
    if (dup2(in_fd, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0)
        goto fail;
    if (fchdir(a->cwd_fd) < 0)
        goto fail;
    /* The run_as user, capability drop, no_new_privs, rlimits and seccomp last; it allocates
     * nothing. With isolation "none" there is nothing to apply. */
    if (a->s->iso && sbx__isolation_child(a->s->iso, a->user, &err) < 0) {
        errno = err.sys_errno ? err.sys_errno : EPERM;
        goto fail;
    }
    environ = a->envp;
    execvp(a->x->argv.v[0], a->x->argv.v);
fail:
    if (err.code == SBX_OK) {
        int e = errno;
        err.code = e == ENOENT ? SBX_E_NOTFOUND : SBX_E_SYS;
        err.sys_errno = e;
    }
    ssize_t w = write(a->errpipe, &err, sizeof(err));
    (void)w;
    _exit(127);
}

static int child_entry(void *p)
{
    child_main(p);
}

/* The stacks of one exec, in one lazily backed mapping: a guard page, the reaper's stack, a
 * guard page, the command's stack. The command runs on its stack only until it executes, while
 * the reaper waits in clone below it; 8 MiB bound execvp's buffers for a long PATH, and the
 * guard between them makes an overrun fault instead of writing the reaper's frames. The
 * supervisor maps them (or takes the spare) before the reaper starts and keeps them as the
 * spare, or unmaps them, once it has reaped the reaper. */
#define GUARD_SIZE    ((size_t)4096)
#define REAPER_STACK  ((size_t)256 << 10)
#define COMMAND_STACK ((size_t)8 << 20)
#define STACKS_SIZE   (2 * GUARD_SIZE + REAPER_STACK + COMMAND_STACK)

/* One mapping of stacks kept once its reaper has been reaped, for the next exec: no mmap, two
 * mprotect and a munmap (with its TLB flush) per exec, and the stack pages the last exec
 * touched are there already. It holds nothing but frames of this process's own code. Unmapped
 * after SPARE_STACKS_MS without an exec (sbx__sup_stacks_idle), so an idle sandbox holds
 * none. */
#define SPARE_STACKS_MS 2000
static char *spare_stacks;
static int64_t spare_until;

static char *exec_stacks(void)
{
    if (SBX__SANITIZED)
        return NULL; /* the forked reaper and command (core/spawn.h) */
    if (spare_stacks) {
        char *p = spare_stacks;
        spare_stacks = NULL;
        return p;
    }
    char *p = mmap(NULL, STACKS_SIZE, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    if (mprotect(p, GUARD_SIZE, PROT_NONE) < 0 ||
        mprotect(p + GUARD_SIZE + REAPER_STACK, GUARD_SIZE, PROT_NONE) < 0) {
        munmap(p, STACKS_SIZE);
        return NULL;
    }
    return p;
}

void sbx__sup_child_stacks_release(struct sbx__sup_child *c)
{
    if (c->stacks && !spare_stacks) {
        spare_stacks = c->stacks;
        spare_until = sbx_deadline_after_ms(SPARE_STACKS_MS);
    } else if (c->stacks) {
        munmap(c->stacks, STACKS_SIZE);
    }
    c->stacks = NULL;
}

int64_t sbx__sup_stacks_idle(int64_t now)
{
    if (spare_stacks && now >= spare_until)
        sbx__sup_stacks_drop();
    return spare_stacks ? spare_until : INT64_MAX;
}

void sbx__sup_stacks_drop(void)
{
    if (spare_stacks)
        munmap(spare_stacks, STACKS_SIZE);
    spare_stacks = NULL;
}

/* Start the command from the reaper. The child shares the reaper's memory (which is the
 * supervisor's, start_reaper) and the reaper sleeps until it has executed the command or exited
 * (vfork semantics), while the supervisor waits on the error pipe: no page tables are copied.
 * That is sound because the child keeps to what is safe there: it has its own stack, file
 * table, working directory, signal dispositions, credentials, rlimits and seccomp filters (none
 * of CLONE_FILES, CLONE_FS, CLONE_SIGHAND, CLONE_THREAD), makes raw system calls for the id
 * switch (no libc thread broadcast), allocates nothing, and writes the shared memory only in
 * environ (put back here) and errno (which the supervisor reads only after a call of its own
 * failed, and makes none while it waits). The credential switch marks the shared memory with
 * the host's suid_dumpable: the reaper restores the flag (PID 1's: not dumpable) before it does
 * anything else. Where clone with CLONE_VM is refused (valgrind), a plain fork does the same. */
static pid_t spawn_command(const struct exec_child *a)
{
    pid_t cmd = -1;
    int e = EINVAL;
    if (a->stacks) {
        char **env = environ;
        int dumpable = prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
        /* CLONE_PARENT_SETTID: the pid is in the supervisor's memory before the command runs
         * (a reaper killed right after still leaves it there). */
        cmd = clone(child_entry, a->stacks + STACKS_SIZE,
                    CLONE_VM | CLONE_VFORK | SIGCHLD | (a->shared ? CLONE_PARENT_SETTID : 0),
                    (void *)a, a->cmd_pid);
        e = errno;
        environ = env;
        if (cmd > 0 && dumpable >= 0 && prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) != dumpable)
            (void)prctl(PR_SET_DUMPABLE, dumpable, 0, 0, 0);
    }
    if (cmd > 0)
        return cmd;
    if (e != EINVAL && e != ENOSYS) {
        errno = e;
        return -1;
    }
    cmd = fork();
    if (cmd == 0)
        child_main(a);
    if (cmd > 0 && a->shared)
        *a->cmd_pid = cmd;
    return cmd;
}

/* System calls that leave errno alone: once the supervisor runs on beside the reaper, the
 * reaper must not write the memory they share, and errno is in it. The result is the kernel's:
 * -errno on failure. Elsewhere the reaper is a plain fork and libc's syscall(2) will do. */
#if defined(__x86_64__)
#    define SHARED_REAPER 1
static long raw_syscall(long n, long a1, long a2, long a3, long a4, long a5)
{
    long ret;
    register long r10 __asm__("r10") = a4;
    register long r8 __asm__("r8") = a5;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(n), "D"(a1), "S"(a2), "d"(a3), "r"(r10), "r"(r8)
                     : "rcx", "r11", "memory");
    return ret;
}
#elif defined(__aarch64__)
#    define SHARED_REAPER 1
static long raw_syscall(long n, long a1, long a2, long a3, long a4, long a5)
{
    register long x8 __asm__("x8") = n;
    register long x0 __asm__("x0") = a1;
    register long x1 __asm__("x1") = a2;
    register long x2 __asm__("x2") = a3;
    register long x3 __asm__("x3") = a4;
    register long x4 __asm__("x4") = a5;
    __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4) : "memory");
    return x0;
}
#else
#    define SHARED_REAPER 0
static long raw_syscall(long n, long a1, long a2, long a3, long a4, long a5)
{
    long r = syscall(n, a1, a2, a3, a4, a5);
    return r < 0 ? -errno : r;
}
#endif

/* 1 when cmd (ended, not reaped yet) is the reaper's only child: then nothing of the exec is
 * left, for every process of it is a child of ours or descends from one. Read from the kernel's
 * list of our children (the reaper has one thread); 0 when that cannot tell (no such file, a
 * pid namespace of another /proc). Raw system calls, our own stack: see reaper_watch. */
static int only_child(pid_t cmd)
{
    char buf[64];
    long fd = raw_syscall(SYS_openat, AT_FDCWD, (long)"/proc/thread-self/children",
                          O_RDONLY | O_CLOEXEC, 0, 0);
    if (fd < 0)
        return 0;
    long pid = -1, n;
    int count = 0, ok = 1;
    while (ok && (n = raw_syscall(SYS_read, fd, (long)buf, sizeof(buf), 0, 0)) != 0) {
        if (n == -EINTR)
            continue;
        ok = n > 0;
        for (long i = 0; ok && i < n; i++) {
            if (buf[i] >= '0' && buf[i] <= '9') {
                pid = (pid < 0 ? 0 : pid * 10) + (buf[i] - '0');
                ok = pid <= INT32_MAX;
            } else if (pid >= 0) {
                ok = ++count == 1 && pid == cmd;
                pid = -1;
            }
        }
    }
    if (ok && pid >= 0)
        ok = ++count == 1 && pid == cmd;
    (void)raw_syscall(SYS_close, fd, 0, 0, 0, 0);
    return ok && count == 1;
}

/* The reaper once the command runs and the supervisor goes on: raw system calls only, its own
 * stack and nothing else of the shared memory. The command's status is reported before it is
 * reaped: should we be killed in between, the supervisor inherits the command (a zombie then)
 * and still learns how it ended. Reported "alone", nothing is left and the supervisor answers at
 * once (it reaps us later). Otherwise it answers once we have exited: 0 tells it that nothing is
 * left; with 1 what the command left comes to the supervisor, which kills it (serve.c,
 * sweep_orphans) before it answers. */
static SBX_NORETURN void reaper_watch(pid_t cmd, int keep)
{
    int st = 0;
    long r;
    for (;;) {
        siginfo_t si;
        memset(&si, 0, sizeof(si));
        r = raw_syscall(SYS_waitid, P_ALL, 0, (long)&si, WEXITED | WNOWAIT, 0);
        if (r == -EINTR)
            continue;
        if (r < 0)
            raw_syscall(SYS_exit_group, 127, 0, 0, 0, 0);
        if (si.si_pid == cmd) {
            st = si.si_code == CLD_EXITED   ? (si.si_status & 0xff) << 8
                 : si.si_code == CLD_DUMPED ? si.si_status | 0x80
                                            : si.si_status;
            break;
        }
        (void)raw_syscall(SYS_wait4, si.si_pid, 0, 0, 0, 0);
    }
    struct sbx__sup_report rep = {.status = st, .alone = !keep && only_child(cmd)};
    (void)raw_syscall(SYS_write, 3, (long)&rep, sizeof(rep), 0, 0);
    (void)raw_syscall(SYS_close, 3, 0, 0, 0, 0);
    (void)raw_syscall(SYS_wait4, cmd, 0, 0, 0, 0);
    if (!keep) {
        /* Every descendant descends from a child: none left, nothing left. */
        while ((r = raw_syscall(SYS_wait4, -1, 0, WNOHANG, 0, 0)) > 0 || r == -EINTR)
            ;
        raw_syscall(SYS_exit_group, r == -ECHILD ? 0 : 1, 0, 0, 0, 0);
    }
    /* keep_background: the rest ends by itself, or with the sandbox. */
    while ((r = raw_syscall(SYS_wait4, -1, 0, 0, 0, 0)) > 0 || r == -EINTR)
        ;
    raw_syscall(SYS_exit_group, 0, 0, 0, 0, 0);
    for (;;)
        ;
}

/* The reaper of one exec (see struct sbx__sup_child): never returns. Until it closes the error
 * pipe the supervisor waits on it, so libc is usable up to there; reaper_watch after. */
static SBX_NORETURN void reaper_main(const struct exec_child *a)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    struct sbx_error err = SBX_ERROR_INIT;
    pid_t none = 0;
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0) {
        sbx_error_errno(&err, errno, "cannot become a child subreaper");
        if (!a->shared)
            (void)!write(a->errpipe, &none, sizeof(none));
        (void)!write(a->errpipe, &err, sizeof(err));
        _exit(127);
    }
    pid_t cmd = spawn_command(a);
    if (cmd < 0) {
        sbx_error_errno(&err, errno, "cannot fork the command");
        if (!a->shared)
            (void)!write(a->errpipe, &none, sizeof(none));
        (void)!write(a->errpipe, &err, sizeof(err));
        _exit(127);
    }
    int keep = a->x->keep_background;
    /* Hold nothing of the supervisor's (client connections, other execs' pipes): only the
     * status pipe. Closing the error pipe lets the supervisor go on. */
    if (a->status_w != 3 && dup2(a->status_w, 3) < 0)
        _exit(127);
    if (syscall(SYS_close_range, 4, ~0U, 0) < 0) {
        struct rlimit nofile = {1024, 1024};
        getrlimit(RLIMIT_NOFILE, &nofile);
        for (rlim_t fd = 4; fd < nofile.rlim_cur && fd < 65536; fd++)
            close((int)fd);
    }
    reaper_watch(cmd, keep);
}

static int reaper_entry(void *p)
{
    reaper_main(p);
}

/* Start the reaper of a. It shares the supervisor's memory and runs on its own stack
 * (CLONE_VM without CLONE_VFORK: the supervisor goes on once the command runs), with its own
 * descriptors, signal dispositions and credentials; it uses libc only while the supervisor
 * waits on the error pipe (reaper_main). The command, which it starts vfork-like, lives in that
 * memory only until it executes. Without the stacks, on other architectures or where clone
 * with CLONE_VM is refused (valgrind), the reaper is a fork. */
static pid_t start_reaper(struct exec_child *a)
{
    if (SHARED_REAPER && a->stacks) {
        a->shared = 1;
        pid_t pid = clone(reaper_entry, a->stacks + GUARD_SIZE + REAPER_STACK, CLONE_VM | SIGCHLD,
                          (void *)a);
        if (pid > 0 || (errno != EINVAL && errno != ENOSYS))
            return pid;
    }
    a->shared = 0;
    pid_t pid = fork();
    if (pid == 0)
        reaper_main(a);
    return pid;
}

/* ---------------------------------------------------------------------------------------------
 * The request: environment, stdio, the reaper, the reply */

/* The descriptors of one exec: the supervisor's ends go to the client, the command's ends to the
 * command (through the reaper); -1: none. */
struct exec_io {
    int cwd_fd;
    int master, slave;              /* a terminal */
    int out_r, out_w, err_r, err_w; /* pipes */
    int in_c, in_s;                 /* stdin: the client's end, the command's end */
    int devnull; /* stdin without one, when the supervisor's spare_fd is not at hand */
};

static void exec_io_release(struct exec_io *io)
{
    int *fds[] = {&io->cwd_fd, &io->master, &io->slave, &io->out_r, &io->out_w,
                  &io->err_r,  &io->err_w,  &io->in_c,  &io->in_s,  &io->devnull};
    for (size_t i = 0; i < SBX_ARRAY_LEN(fds); i++)
        sbx_fd_close(fds[i]);
}

/* The working directory, resolved beneath the workspace in one step: a planted symlink cannot
 * lead out. *pwd: its path as the command sees it (caller frees). */
static int exec_cwd(const struct sbx__sup *s, const struct exec_req *x, int *cwd_fd, char **pwd,
                    struct sbx_error *err)
{
    char *rel = NULL;
    int rc = sbx_path_normalize(x->cwd ? x->cwd : "", x->cwd ? strlen(x->cwd) : 0,
                                SBX_PATH_ALLOW_ROOT, NULL, &rel, err);
    if (rc == 0)
        rc = sbx_fs_open(s->root_fd, rel, O_RDONLY | O_DIRECTORY, 0, 0, cwd_fd, err);
    if (rc < 0)
        sbx_error_prefix(err, "working directory '%s'", x->cwd ? x->cwd : "");
    else
        *pwd = rel[0] ? sbx_xasprintf("%s/%s", s->root, rel) : sbx_xstrdup(s->root);
    free(rel);
    return rc;
}

/* The command's environment. Isolated: a fresh one (nothing of ours), the manifest's, then the
 * request's, for *user (who runs it). Without isolation: the supervisor's base environment,
 * then the request's; the command runs as the caller. */
static int exec_env(const struct sbx__sup *s, struct exec_req *x, const char *pwd,
                    struct sbx__run_as *user, struct sbx_strv *env, struct sbx_error *err)
{
    int rc;
    if (s->iso) {
        rc = sbx__isolation_user(s->iso, x->user, user, err);
        if (rc == 0)
            rc = sbx__isolation_env(s->iso, user, x->tty ? "xterm-256color" : NULL,
                                    (const char *const *)x->env.v, env, err);
        if (rc == 0)
            sbx_strv_setenv(env, "PWD", pwd);
        return rc;
    }
    if (x->user)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "user '%s': sandbox '%s' has isolation 'none' and runs every "
                             "command as the caller",
                             x->user, s->id);
    for (size_t i = 0; i < s->env.n; i++)
        sbx_strv_push(env, s->env.v[i]);
    sbx_strv_setenv(env, "PWD", pwd);
    if (x->tty && !sbx_strv_getenv(env, "TERM"))
        sbx_strv_setenv(env, "TERM", "xterm-256color");
    for (size_t i = 0; i < x->env.n; i++) {
        char *eq = strchr(x->env.v[i], '=');
        if (!eq || eq == x->env.v[i])
            return sbx_error_set(err, SBX_E_INVAL, 0, "environment entry '%s' must be KEY=VALUE",
                                 x->env.v[i]);
        *eq = '\0';
        sbx_strv_setenv(env, x->env.v[i], eq + 1);
        *eq = '=';
    }
    return 0;
}

/* A terminal for the command, owned by its user (as login(1) would arrange), at the size asked
 * for. */
static int open_tty(const struct sbx__sup *s, const struct exec_req *x,
                    const struct sbx__run_as *user, struct exec_io *io, struct sbx_error *err)
{
    char name[128];
    io->master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (io->master < 0 || grantpt(io->master) < 0 || unlockpt(io->master) < 0 ||
        ptsname_r(io->master, name, sizeof(name)) != 0)
        return sbx_error_errno(err, errno, "cannot allocate a terminal");
    io->slave = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (io->slave < 0)
        return sbx_error_errno(err, errno, "cannot open terminal '%s'", name);
    if (s->iso && fchown(io->slave, user->uid, user->gid) < 0)
        sbx_log(SBX_LOG_WARN, "cannot give terminal '%s' to uid %d: %s", name, (int)user->uid,
                strerror(errno));
    struct winsize ws = {.ws_row = x->rows ? (unsigned short)x->rows : DEFAULT_ROWS,
                         .ws_col = x->cols ? (unsigned short)x->cols : DEFAULT_COLS};
    (void)ioctl(io->master, TIOCSWINSZ, &ws);
    return 0;
}

/* The command's stdio: a terminal, or a pipe for stdout and one for stderr (none with merge),
 * and for stdin a socket when asked for, else /dev/null. */
static int exec_stdio(const struct sbx__sup *s, const struct exec_req *x,
                      const struct sbx__run_as *user, struct exec_io *io, struct sbx_error *err)
{
    int p[2];
    if (x->tty)
        return open_tty(s, x, user, io, err);
    if (pipe2(p, O_CLOEXEC) < 0)
        return sbx_error_errno(err, errno, "pipe");
    io->out_r = p[0];
    io->out_w = p[1];
    if (!x->merge) {
        if (pipe2(p, O_CLOEXEC) < 0)
            return sbx_error_errno(err, errno, "pipe");
        io->err_r = p[0];
        io->err_w = p[1];
    }
    if (x->want_stdin) {
        /* A socket, not a pipe: the client writes with MSG_NOSIGNAL, so a command that stops
         * reading cannot kill the client with SIGPIPE. */
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p) < 0)
            return sbx_error_errno(err, errno, "socketpair");
        io->in_c = p[0];
        io->in_s = p[1];
        shutdown(io->in_s, SHUT_WR);
        shutdown(io->in_c, SHUT_RD);
        return 0;
    }
    /* The supervisor's spare descriptor is /dev/null, read only: borrowed when it holds it. */
    if (s->spare_fd >= 0)
        return 0;
    io->devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (io->devnull < 0)
        return sbx_error_errno(err, errno, "cannot open '/dev/null'");
    return 0;
}

/* What the command wrote on the error pipe (ep): its pid (unless shared_pid has it), then, only
 * when it did not start, an error. 0 with *cmd_out once it runs; otherwise its reaper (pid
 * reaper) is reaped and the error names the command. */
static int read_start(int ep, const struct exec_req *x, pid_t reaper, const pid_t *shared_pid,
                      pid_t *cmd_out, struct sbx_error *err)
{
    struct sbx_error cerr = SBX_ERROR_INIT;
    pid_t cmd = 0;
    ssize_t n = sizeof(cmd);
    while (!shared_pid && (n = read(ep, &cmd, sizeof(cmd))) < 0 && errno == EINTR)
        ;
    if (n == (ssize_t)sizeof(cmd)) {
        do
            n = read(ep, &cerr, sizeof(cerr));
        while (n < 0 && errno == EINTR);
        /* End of file: the reaper and the command closed their ends, the pid is written. */
        if (shared_pid)
            cmd = *shared_pid;
    }
    if (n != (ssize_t)sizeof(cerr) && cmd <= 0) {
        /* the reaper died before the command could start */
        n = sizeof(cerr);
        sbx_error_set(&cerr, SBX_E_SANDBOX, 0, "the command could not be started");
    }
    if (n != (ssize_t)sizeof(cerr)) {
        *cmd_out = cmd;
        return 0;
    }
    /* exec failed: the command is gone already, its reaper follows */
    int st;
    while (waitpid(reaper, &st, 0) < 0 && errno == EINTR)
        ;
    cerr.msg[sizeof(cerr.msg) - 1] = '\0';
    if (cerr.msg[0])
        return sbx_error_copy(err, &cerr);
    if (cerr.sys_errno == ENOENT)
        return sbx_error_set(err, SBX_E_EXEC, ENOENT, "command '%s' not found", x->argv.v[0]);
    sbx_error_errno(err, cerr.sys_errno, "cannot run '%s'", x->argv.v[0]);
    err->code = SBX_E_EXEC;
    return -SBX_E_EXEC;
}

/* The reaper started, and by it the command: *pid the reaper, *cmd the command, *status_fd where
 * the reaper reports its status, *stacks what it runs on (caller owns both). The command's ends
 * of io are closed here. */
static int exec_spawn(const struct sbx__sup *s, const struct exec_req *x,
                      const struct sbx__run_as *user, char **envp, struct exec_io *io,
                      pid_t *pid_out, pid_t *cmd_out, int *status_fd, void **stacks,
                      struct sbx_error *err)
{
    int ep[2] = {-1, -1}, sp[2] = {-1, -1}, rc;
    pid_t shared_cmd = 0; /* the command's pid, from a reaper that shares our memory */
    struct exec_child a = {.stacks = NULL};
    if (pipe2(ep, O_CLOEXEC) < 0 || pipe2(sp, O_CLOEXEC) < 0) {
        rc = sbx_error_errno(err, errno, "pipe");
        goto out;
    }
    a = (struct exec_child){.s = s,
                            .user = user,
                            .x = x,
                            .envp = envp,
                            .cwd_fd = io->cwd_fd,
                            .in_fd = x->want_stdin      ? io->in_s
                                     : io->devnull >= 0 ? io->devnull
                                                        : s->spare_fd,
                            .out_fd = io->out_w,
                            .err_fd = x->merge ? io->out_w : io->err_w,
                            .pty_slave = io->slave,
                            .errpipe = ep[1],
                            .status_w = sp[1],
                            .cmd_pid = &shared_cmd,
                            .stacks = exec_stacks()};
    pid_t pid = start_reaper(&a);
    if (pid < 0) {
        rc = sbx_error_errno(err, errno, "cannot start the reaper of '%s'", x->argv.v[0]);
        goto out;
    }
    sbx_fd_close(&sp[1]);
    sbx_fd_close(&ep[1]);
    sbx_fd_close(&io->out_w);
    sbx_fd_close(&io->err_w);
    sbx_fd_close(&io->in_s);
    sbx_fd_close(&io->slave);
    rc = read_start(ep[0], x, pid, a.shared ? &shared_cmd : NULL, cmd_out, err);
    if (rc == 0) {
        *pid_out = pid;
        *status_fd = sp[0];
        *stacks = a.stacks;
        a.stacks = NULL;
        sp[0] = -1;
    }
out:
    if (a.stacks) /* its reaper, if any, was reaped */
        munmap(a.stacks, STACKS_SIZE);
    sbx_fd_close(&ep[0]);
    sbx_fd_close(&ep[1]);
    sbx_fd_close(&sp[0]);
    sbx_fd_close(&sp[1]);
    return rc;
}

/* The command started: a child of connection ci from now on, whose client gets the stdio. */
static void exec_reply(struct sbx__sup *s, int ci, const struct exec_req *x,
                       const struct exec_io *io, pid_t pid, pid_t cmd, int status_fd, void *stacks,
                       const struct sbx__cgroup_events *before)
{
    /* The command made its own group (child_main) before it executed: the reply comes after. */
    int ch = add_child(s);
    s->children[ch] = (struct sbx__sup_child){
            .pid = pid,
            .cmd = cmd,
            .status_fd = status_fd,
            .keep = x->keep_background,
            .tty = x->tty,
            .conn = ci,
            .deadline = x->timeout_ms > 0 ? sbx_deadline_after_ms(x->timeout_ms) : INT64_MAX,
            .kill_at = INT64_MAX,
            .grace_ms = x->grace_ms > 0 ? x->grace_ms : SBX_EXEC_DEFAULT_GRACE_MS,
            .before = *before,
            .stacks = stacks,
    };
    s->conns[ci].child = ch;
    json_t *m = sbx__sup_ok_msg();
    sbx_json_set(m, "pid", json_integer(cmd));
    int fds[3];
    size_t nfds = 0;
    if (x->tty) {
        fds[nfds++] = io->master;
    } else {
        fds[nfds++] = io->out_r;
        if (!x->merge)
            fds[nfds++] = io->err_r;
        if (x->want_stdin)
            fds[nfds++] = io->in_c;
    }
    sbx__sup_reply(s, ci, m, fds, nfds);
}

void sbx__sup_exec(struct sbx__sup *s, int ci, const json_t *req)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct exec_req x = {0};
    struct exec_io io = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
    struct sbx__run_as user = {0};
    struct sbx__cgroup_events before = {0};
    struct sbx_strv env;
    char *pwd = NULL;
    pid_t pid = 0, cmd = 0;
    int status_fd = -1;
    void *stacks = NULL;

    sbx_strv_init(&x.argv);
    sbx_strv_init(&x.env);
    sbx_strv_init(&env);
    int rc = parse_exec(req, &x, &err);
    if (rc == 0 && s->stopping)
        rc = sbx_error_set(&err, SBX_E_SANDBOX, 0, "sandbox '%s' is shutting down", s->id);
    if (rc == 0 && (rc = exec_cwd(s, &x, &io.cwd_fd, &pwd, &err)) == 0 &&
        (rc = exec_env(s, &x, pwd, &user, &env, &err)) == 0 &&
        (rc = exec_stdio(s, &x, &user, &io, &err)) == 0) {
        if (s->iso)
            (void)sbx__isolation_events(s->iso, &before, NULL);
        rc = exec_spawn(s, &x, &user, env.v, &io, &pid, &cmd, &status_fd, &stacks, &err);
    }
    if (rc == 0)
        exec_reply(s, ci, &x, &io, pid, cmd, status_fd, stacks, &before);
    else
        sbx__sup_reply_err(s, ci, &err);
    exec_io_release(&io);
    free(pwd);
    sbx_strv_release(&x.argv);
    sbx_strv_release(&x.env);
    sbx_strv_release(&env);
    if (rc < 0)
        sbx__sup_drop_conn(s, ci);
}
