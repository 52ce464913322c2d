/* bench-exec: the library exec round trip of /bin/true in an isolated local sandbox against
 * the bare spawn floor, measured interleaved (A B A B ...) in one run.
 *
 *   bench-exec [N [DIR [none]]]  N runs of each (default 300, 60 with SBX_BENCH_QUICK=1);
 *                                runtime and workspaces under DIR (default /tmp); "none": the
 *                                sandbox runs unconfined (--isolation none), for comparison;
 *                                SBX_SUPERVISOR names the supervisor program
 *
 *   sbx:   sbx_session_exec(argv {"/bin/true"}) on one warm sandbox (default isolation): the
 *          request over the supervisor socket, the per-exec set-up, the exit status back
 *   floor: posix_spawn("/bin/true") + waitpid from this process; fork + execve + waitpid is
 *          printed too
 *   confinement floor: what the sandbox's own confinement costs at the least, per command:
 *          clone(2) into new user, pid, mount and network namespaces, then no_new_privs, one
 *          seccomp filter (a deny list of 50 system calls, built once with libseccomp as a
 *          binary tree) and execve /bin/true, + waitpid. An exec in a warm sandbox makes no
 *          namespaces, so this floor is generous to neither side; it is skipped (and said so)
 *          where user namespaces cannot be made.
 *
 *   previous: with SBX_BENCH_PREV_SUPERVISOR naming another supervisor program (an earlier
 *          build's), a second sandbox made with it, measured in the same interleaving, so the
 *          new figure comes with the old one beside it
 *
 * Prints medians and p95 and TABLE lines (targets: sbx <= 1.5x the posix_spawn floor, <= 1.15x
 * the confinement floor). Numbers only: nothing here passes or fails. */
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sbx/local.h"
#include "sbx/session.h"
#include "sbx/time.h"

extern char **environ;

enum { S_SBX, S_SPAWN, S_FORK, S_FLOOR, S_SECCOMP, S_PREV, S_COUNT };

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void die(const char *what, const struct sbx_error *err)
{
    fprintf(stderr, "bench-exec: %s: %s\n", what, err->msg);
    exit(1);
}

static char *const true_argv[] = {"/bin/true", NULL};

static int64_t spawn_true(void)
{
    int64_t t0 = sbx_time_mono_ns();
    pid_t pid;
    int st;
    if (posix_spawn(&pid, true_argv[0], NULL, NULL, true_argv, environ) != 0 ||
        waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "bench-exec: posix_spawn of /bin/true failed\n");
        exit(1);
    }
    return sbx_time_mono_ns() - t0;
}

static int64_t fork_true(void)
{
    int64_t t0 = sbx_time_mono_ns();
    int st;
    pid_t pid = fork();
    if (pid == 0) {
        execve(true_argv[0], true_argv, environ);
        _exit(127);
    }
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "bench-exec: fork + exec of /bin/true failed\n");
        exit(1);
    }
    return sbx_time_mono_ns() - t0;
}

/* The deny list of the confinement floor: system calls a sandbox refuses, in the number a
 * typical container profile denies. */
static const char *const denied[] = {"acct",
                                     "add_key",
                                     "bpf",
                                     "clock_adjtime",
                                     "clock_settime",
                                     "create_module",
                                     "delete_module",
                                     "finit_module",
                                     "get_kernel_syms",
                                     "get_mempolicy",
                                     "init_module",
                                     "ioperm",
                                     "iopl",
                                     "kcmp",
                                     "kexec_file_load",
                                     "kexec_load",
                                     "keyctl",
                                     "lookup_dcookie",
                                     "mbind",
                                     "mount",
                                     "move_pages",
                                     "name_to_handle_at",
                                     "nfsservctl",
                                     "open_by_handle_at",
                                     "perf_event_open",
                                     "personality",
                                     "pivot_root",
                                     "process_vm_readv",
                                     "process_vm_writev",
                                     "ptrace",
                                     "query_module",
                                     "quotactl",
                                     "reboot",
                                     "request_key",
                                     "set_mempolicy",
                                     "setdomainname",
                                     "sethostname",
                                     "settimeofday",
                                     "stime",
                                     "swapoff",
                                     "swapon",
                                     "sysfs",
                                     "_sysctl",
                                     "umount",
                                     "umount2",
                                     "unshare",
                                     "uselib",
                                     "userfaultfd",
                                     "ustat",
                                     "vm86"};

static struct sock_fprog floor_filter;

/* 0, or -1 when libseccomp cannot build the filter. export_bpf writes to a descriptor: a
 * pipe, read back into a static program. */
static int floor_filter_build(void)
{
    static struct sock_filter insns[4096];
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return -1;
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    int rc = ctx && seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2) == 0 ? 0 : -1;
    for (size_t i = 0; rc == 0 && i < sizeof(denied) / sizeof(denied[0]); i++) {
        int nr = seccomp_syscall_resolve_name(denied[i]);
        if (nr != __NR_SCMP_ERROR)
            (void)seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0);
    }
    if (rc == 0)
        rc = seccomp_export_bpf(ctx, p[1]);
    if (ctx)
        seccomp_release(ctx);
    close(p[1]);
    ssize_t n = rc == 0 ? read(p[0], insns, sizeof(insns)) : -1;
    close(p[0]);
    if (n <= 0 || n % (ssize_t)sizeof(insns[0]) != 0)
        return -1;
    floor_filter.len = (unsigned short)(n / (ssize_t)sizeof(insns[0]));
    floor_filter.filter = insns;
    return 0;
}

/* The confinement floor (see the top), without the namespaces when namespaces is 0: -1 when
 * they cannot be made. */
static int64_t floor_true(int namespaces)
{
    int64_t t0 = sbx_time_mono_ns();
    int st;
    long ns = namespaces ? CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET : 0;
    long pid = syscall(SYS_clone, ns | SIGCHLD, NULL, NULL, NULL, NULL);
    if (pid == 0) {
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
            prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &floor_filter, 0, 0) == 0)
            execve(true_argv[0], true_argv, environ);
        _exit(127);
    }
    if (pid < 0)
        return -1;
    if (waitpid((pid_t)pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "bench-exec: the confinement floor's /bin/true failed\n");
        exit(1);
    }
    return sbx_time_mono_ns() - t0;
}

static int64_t sbx_true(struct sbx_session *s)
{
    static const char *const argv[] = {"/bin/true", NULL};
    struct sbx_exec_spec spec = {.argv = argv};
    struct sbx_exec_result res;
    struct sbx_error err = SBX_ERROR_INIT;
    int64_t t0 = sbx_time_mono_ns();
    if (sbx_session_exec(s, &spec, &res, &err) < 0)
        die("exec", &err);
    int64_t dt = sbx_time_mono_ns() - t0;
    if (res.status.code != 0) {
        fprintf(stderr, "bench-exec: /bin/true in the sandbox exited with %d\n", res.status.code);
        exit(1);
    }
    sbx_exec_result_release(&res);
    return dt;
}

int main(int argc, char **argv)
{
    const char *quick = getenv("SBX_BENCH_QUICK");
    int n = argc > 1 ? (int)strtol(argv[1], NULL, 10) : quick && *quick == '1' ? 60 : 300;
    const char *under = argc > 2 ? argv[2] : "/tmp";
    int unconfined = argc > 3 && strcmp(argv[3], "none") == 0;
    if (n < 1)
        return 2;
    struct sbx_error err = SBX_ERROR_INIT;
    char tmp[256], run[300], ws[300];
    snprintf(tmp, sizeof(tmp), "%s/sbx-bench-exec.XXXXXX", under);
    if (!mkdtemp(tmp))
        return 2;
    snprintf(run, sizeof(run), "%s/run", tmp);
    snprintf(ws, sizeof(ws), "%s/ws", tmp);
    mkdir(run, 0700);
    struct sbx_local_options o = {.runtime_dir = run,
                                  .workspace_dir = ws,
                                  .isolation = unconfined ? SBX_LOCAL_ISOLATION_NONE
                                                          : SBX_LOCAL_ISOLATION_DEFAULT};
    struct sbx_client *c = NULL;
    struct sbx_session *s = NULL;
    if (sbx_client_new("local", &o, &c, &err) < 0)
        die("client", &err);
    if (sbx_client_create(c, NULL, &s, &err) < 0)
        die("create", &err);
    /* The previous supervisor's sandbox: SBX_SUPERVISOR is read at each create. */
    const char *prev_sup = getenv("SBX_BENCH_PREV_SUPERVISOR");
    const char *cur_sup = getenv("SBX_SUPERVISOR");
    char *cur_copy = cur_sup ? strdup(cur_sup) : NULL;
    struct sbx_session *prev = NULL;
    if (prev_sup && *prev_sup) {
        setenv("SBX_SUPERVISOR", prev_sup, 1);
        if (sbx_client_create(c, NULL, &prev, &err) < 0)
            die("create with the previous supervisor", &err);
        if (cur_copy)
            setenv("SBX_SUPERVISOR", cur_copy, 1);
        else
            unsetenv("SBX_SUPERVISOR");
    }
    free(cur_copy);

    double *v[S_COUNT];
    for (int k = 0; k < S_COUNT; k++)
        v[k] = calloc((size_t)n, sizeof(double));
    /* The confinement floor where this machine can make the namespaces. */
    int have_floor = floor_filter_build() == 0 && floor_true(1) >= 0;
    if (!have_floor)
        fprintf(stderr, "bench-exec: no confinement floor here (cannot build the filter or "
                        "make user, pid, mount and network namespaces)\n");
    /* warm both sides (page cache, the supervisor's first exec) */
    for (int i = 0; i < 5; i++) {
        sbx_true(s);
        if (prev)
            sbx_true(prev);
        spawn_true();
        fork_true();
        if (have_floor) {
            floor_true(1);
            floor_true(0);
        }
    }
    for (int i = 0; i < n; i++) {
        v[S_SBX][i] = (double)sbx_true(s) / 1e6;
        v[S_PREV][i] = prev ? (double)sbx_true(prev) / 1e6 : 0;
        v[S_SPAWN][i] = (double)spawn_true() / 1e6;
        v[S_FORK][i] = (double)fork_true() / 1e6;
        v[S_FLOOR][i] = have_floor ? (double)floor_true(1) / 1e6 : 0;
        v[S_SECCOMP][i] = have_floor ? (double)floor_true(0) / 1e6 : 0;
    }
    if (sbx_session_delete(s, &err) < 0)
        die("delete", &err);
    if (prev && sbx_session_delete(prev, &err) < 0)
        die("delete", &err);
    sbx_session_free(prev);
    sbx_session_free(s);
    sbx_client_free(c);
    /* A removed sandbox's workspace goes after the delete returns (off the caller's path):
     * wait for it, briefly, so that nothing of this run is left under DIR. */
    for (int i = 0; i < 500 && rmdir(ws) < 0 && errno == ENOTEMPTY; i++)
        usleep(10000);
    rmdir(run);
    rmdir(tmp);

    const char *names[S_COUNT] = {unconfined ? "sbx_session_exec /bin/true (isolation none)"
                                             : "sbx_session_exec /bin/true (isolated)",
                                  "posix_spawn /bin/true + waitpid",
                                  "fork + execve /bin/true + waitpid",
                                  "clone (4 namespaces) + seccomp + execve",
                                  "fork + seccomp + execve /bin/true",
                                  "the same exec, previous supervisor"};
    double med[S_COUNT];
    printf("%-44s %10s %10s   (ms, %d interleaved runs)\n", "operation", "median", "p95", n);
    for (int k = 0; k < S_COUNT; k++) {
        if (((k == S_FLOOR || k == S_SECCOMP) && !have_floor) || (k == S_PREV && !prev)) {
            free(v[k]);
            continue;
        }
        med[k] = median(v[k], n);
        int i95 = (int)(0.95 * (n - 1) + 0.5);
        printf("%-44s %10.3f %10.3f\n", names[k], med[k], v[k][i95]);
        free(v[k]);
    }
    double ratio = med[S_SBX] / med[S_SPAWN];
    if (prev)
        printf("previous supervisor: %.2fx posix_spawn, %.2fx the fork + seccomp floor%s; new / "
               "previous %.2fx\n",
               med[S_PREV] / med[S_SPAWN], have_floor ? med[S_PREV] / med[S_SECCOMP] : 0,
               have_floor ? "" : " (no floor)", med[S_SBX] / med[S_PREV]);
    if (unconfined)
        return 0;
    printf("TABLE|library exec round trip of /bin/true (isolated sandbox)|%.3f ms|bare posix_spawn "
           "/bin/true|%.3f ms|%.2fx|<= 1.5x|%s\n",
           med[S_SBX], med[S_SPAWN], ratio, ratio <= 1.5 ? "met" : "missed");
    if (have_floor) {
        double r = med[S_SBX] / med[S_FLOOR];
        printf("TABLE|library exec round trip of /bin/true (isolated sandbox)|%.3f ms|clone "
               "(user+pid+mnt+net) + seccomp + execve /bin/true|%.3f ms|%.2fx|<= 1.15x|%s\n",
               med[S_SBX], med[S_FLOOR], r, r <= 1.15 ? "met" : "missed");
        r = med[S_SBX] / med[S_SECCOMP];
        printf("TABLE|library exec round trip of /bin/true (isolated sandbox)|%.3f ms|fork + "
               "seccomp + execve /bin/true (no namespaces)|%.3f ms|%.2fx|-|-\n",
               med[S_SBX], med[S_SECCOMP], r);
    }
    return 0;
}
