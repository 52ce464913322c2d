/* sbx local provider: the seccomp filters of sandbox commands.
 *
 * Two programs, compiled with libseccomp in the supervisor and installed after fork (libseccomp
 * is opened on first use, src/core/dl-seccomp.h: sbx__seccomp_build and
 * sbx__seccomp_build_init are the only callers, and they load it first):
 *  - main: an allowlist. Unknown system calls fail with ENOSYS so that libc and runtimes take
 *    their fallbacks (clone3, io_uring, the new mount API); the calls that touch the host kernel's
 *    shared state fail with EPERM; socket() only for the families a workspace needs. Only the
 *    native architecture is in the filter, so 32-bit entry points and x32 system call numbers
 *    kill the process (libseccomp's bad-architecture action).
 *  - arguments ("ioctl" in isolate.h): default-allow, refusing TIOCSTI, TIOCLINUX, TIOCSETD and
 *    TIOCCONS compared on the low 32 bits, so the high-bit variant (CVE-2019-10063) is refused
 *    too, and every chmod, open, creat and mknod whose mode carries S_ISUID or S_ISGID (a file
 *    the sandbox writes lands on the host owned by the workspace owner, who may be root). It is
 *    a separate program because libseccomp lets an unconditional allow rule override
 *    conditional ones on the same call; stacked filters combine to the most restrictive
 *    answer.
 * Each command gets them as one program (sbx__bpf_chain): the kernel translates, JIT-compiles
 * and checks every filter a process loads, and this happens at every command's start. */
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/dl-seccomp.h"
#include "providers/local/isolate/isolate.h"
#include "sbx/fs.h"

#ifndef AF_VSOCK
#    define AF_VSOCK 40
#endif
#ifndef NETLINK_ROUTE
#    define NETLINK_ROUTE 0
#endif

#define MAX_BPF_INSNS 4096

static const char *const allowed[] = {
        /* processes */
        "fork", "vfork", "execve", "execveat", "exit", "exit_group", "wait4", "waitid", "kill",
        "tkill", "tgkill", "pidfd_open", "pidfd_send_signal", "rt_sigaction", "rt_sigprocmask",
        "rt_sigreturn", "rt_sigsuspend", "rt_sigpending", "rt_sigtimedwait", "rt_sigqueueinfo",
        "rt_tgsigqueueinfo", "sigaltstack", "set_tid_address", "set_robust_list", "get_robust_list",
        "rseq", "futex", "futex_waitv", "arch_prctl", "prctl", "sched_yield", "sched_getaffinity",
        "sched_setaffinity", "sched_getparam", "sched_getscheduler", "sched_get_priority_max",
        "sched_get_priority_min", "sched_rr_get_interval", "sched_getattr", "getpriority",
        "setpriority", "getpid", "getppid", "gettid", "getpgid", "getpgrp", "getsid", "setpgid",
        "setsid", "ioprio_get", "ioprio_set",
        /* the kernel enforces the real-time limits without CAP_SYS_NICE */
        "sched_setscheduler", "sched_setparam", "sched_setattr",
        /* identities (the kernel refuses changes without capabilities) */
        "getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid", "getgroups", "setuid",
        "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setfsuid", "setfsgid",
        "setgroups", "capget", "capset",
        /* memory */
        "brk", "mmap", "munmap", "mprotect", "mremap", "madvise", "mincore", "msync", "mlock",
        "mlock2", "munlock", "mlockall", "munlockall", "membarrier", "memfd_create", "pkey_alloc",
        "pkey_free", "pkey_mprotect",
        /* files */
        "read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev", "preadv2",
        "pwritev2", "open", "openat", "creat", "close", "close_range", "lseek", "dup", "dup2",
        "dup3", "fcntl", "flock", "fsync", "fdatasync", "syncfs", "sync_file_range", "truncate",
        "ftruncate", "fallocate", "fadvise64", "readahead", "stat", "fstat", "lstat", "newfstatat",
        "statx", "statfs", "fstatfs", "access", "faccessat", "faccessat2", "readlink", "readlinkat",
        "getdents", "getdents64", "getcwd", "chdir", "fchdir", "mkdir", "mkdirat", "rmdir",
        "unlink", "unlinkat", "rename", "renameat", "renameat2", "link", "linkat", "symlink",
        "symlinkat", "chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown",
        "fchownat", "umask", "utime", "utimes", "utimensat", "futimesat", "mknod", "mknodat",
        "getxattr", "lgetxattr", "fgetxattr", "setxattr", "lsetxattr", "fsetxattr", "listxattr",
        "llistxattr", "flistxattr", "removexattr", "lremovexattr", "fremovexattr", "inotify_init",
        "inotify_init1", "inotify_add_watch", "inotify_rm_watch", "copy_file_range", "sendfile",
        "splice", "tee", "vmsplice", "ioctl", "cachestat",
        /* events and IPC (inside the sandbox's own IPC namespace) */
        "pipe", "pipe2", "eventfd", "eventfd2", "epoll_create", "epoll_create1", "epoll_ctl",
        "epoll_wait", "epoll_pwait", "epoll_pwait2", "poll", "ppoll", "select", "pselect6",
        "timerfd_create", "timerfd_settime", "timerfd_gettime", "signalfd", "signalfd4", "shmget",
        "shmat", "shmdt", "shmctl", "semget", "semop", "semtimedop", "semctl", "msgget", "msgsnd",
        "msgrcv", "msgctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify",
        "mq_getsetattr",
        /* network (socket itself has family rules below) */
        "socketpair", "connect", "bind", "listen", "accept", "accept4", "sendto", "recvfrom",
        "sendmsg", "recvmsg", "sendmmsg", "recvmmsg", "getsockname", "getpeername", "setsockopt",
        "getsockopt", "shutdown",
        /* time */
        "clock_gettime", "clock_getres", "clock_nanosleep", "nanosleep", "gettimeofday", "time",
        "times", "alarm", "getitimer", "setitimer", "timer_create", "timer_settime",
        "timer_gettime", "timer_getoverrun", "timer_delete",
        /* misc */
        "uname", "sysinfo", "getrandom", "getrlimit", "setrlimit", "prlimit64", "getrusage",
        "restart_syscall", "pause", "getcpu", "seccomp", "landlock_create_ruleset",
        "landlock_add_rule", "landlock_restrict_self", "set_mempolicy", "get_mempolicy", "mbind"};

/* Refused with EPERM: they reach state shared with the host or other sandboxes. */
static const char *const refused[] = {
        "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp", "process_madvise",
        "mount", "umount2", "pivot_root", "chroot", "unshare", "setns", "open_by_handle_at",
        "name_to_handle_at", "keyctl", "add_key", "request_key", "bpf", "perf_event_open",
        "userfaultfd", "fanotify_init", "init_module", "finit_module", "delete_module",
        "kexec_load", "kexec_file_load", "reboot", "swapon", "swapoff", "acct", "quotactl",
        "quotactl_fd", "syslog", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
        "iopl", "ioperm", "modify_ldt", "uselib", "lookup_dcookie", "nfsservctl", "vhangup",
        "move_pages", "migrate_pages", "sethostname", "setdomainname",
        /* flushes every file system of the host: a sandbox in a
         * loop makes all of them wait on I/O. Its libc wrapper
         * returns nothing, so callers go on; fsync, fdatasync
         * and syncfs (the workspace's own) stay allowed. */
        "sync"};

/* Not in either list, so refused with the default ENOSYS, which libc and runtimes read as
 * "use the fallback": clone3 (its flags cannot be inspected), io_uring_setup/enter/register
 * (it would open sockets and create files without the calls filtered here), openat2 (its mode
 * sits in memory the filter cannot read, so it could create a setuid file; libc falls back to
 * openat), fchmodat2 when this libseccomp does not know it (otherwise its mode is checked
 * below), and the new mount API (open_tree, move_mount, fsopen, fsconfig, fsmount, fspick,
 * mount_setattr). */

static int lib_error(struct sbx_error *err, int rc, const char *what, const char *name)
{
    return sbx_error_errno(err, -rc, "seccomp: cannot add rule for %s '%s'", what, name);
}

static int add_named(scmp_filter_ctx ctx, uint32_t action, const char *const *names, size_t n,
                     const char *what, struct sbx_error *err)
{
    for (size_t i = 0; i < n; i++) {
        int nr = seccomp_syscall_resolve_name(names[i]);
        if (nr == __NR_SCMP_ERROR)
            continue; /* unknown to this libseccomp: the default action covers it */
        int rc = seccomp_rule_add(ctx, action, nr, 0);
        if (rc < 0)
            return lib_error(err, rc, what, names[i]);
    }
    return 0;
}

static int family_allowed(int af)
{
    return af == AF_UNIX || af == AF_INET || af == AF_INET6;
}

static int add_main_rules(scmp_filter_ctx ctx, struct sbx_error *err)
{
    int rc;
    if ((rc = add_named(ctx, SCMP_ACT_ALLOW, allowed, SBX_ARRAY_LEN(allowed), "allowed", err)) < 0)
        return rc;
    if ((rc = add_named(ctx, SCMP_ACT_ERRNO(EPERM), refused, SBX_ARRAY_LEN(refused), "refused",
                        err)) < 0)
        return rc;

    /* clone: threads and plain forks, never a new namespace. */
    const uint64_t ns_flags = CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC |
                              CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | 0x00000080ull;
    rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(clone), 1,
                          SCMP_A0(SCMP_CMP_MASKED_EQ, ns_flags, 0));
    /* Any namespace bit refuses: one rule per bit. */
    for (int bit = 0; rc == 0 && bit < 64; bit++) {
        uint64_t f = 1ull << bit;
        if (ns_flags & f)
            rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                                  SCMP_A0(SCMP_CMP_MASKED_EQ, f, f));
    }
    if (rc < 0)
        return lib_error(err, rc, "system call", "clone");

    /* personality: only the query and the default Linux persona (no READ_IMPLIES_EXEC,
     * no ADDR_NO_RANDOMIZE). */
    const uint64_t personas[] = {0, 8 /* PER_LINUX32 */, 0xffffffffull};
    for (size_t i = 0; i < SBX_ARRAY_LEN(personas); i++) {
        rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(personality), 1,
                              SCMP_A0(SCMP_CMP_EQ, personas[i]));
        if (rc < 0)
            return lib_error(err, rc, "system call", "personality");
    }

    /* socket: UNIX, INET, INET6 and NETLINK_ROUTE (getifaddrs); every other family refused:
     * one rule per family up to AF_NETLINK, one for all above it (the argument compared on its
     * 64 bits, so a family with high bits set is refused too). The kernel translates and
     * compiles the filter at every command's start: a rule per family up to 63 made it 535
     * instructions instead of 487 for the same answers. */
    for (int af = 0; af <= AF_NETLINK; af++) {
        if (family_allowed(af))
            rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socket), 1,
                                  SCMP_A0(SCMP_CMP_EQ, (uint64_t)af));
        else if (af == AF_NETLINK) {
            rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socket), 2,
                                  SCMP_A0(SCMP_CMP_EQ, (uint64_t)af),
                                  SCMP_A2(SCMP_CMP_EQ, NETLINK_ROUTE));
            if (rc == 0)
                rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socket), 2,
                                      SCMP_A0(SCMP_CMP_EQ, (uint64_t)af),
                                      SCMP_A2(SCMP_CMP_NE, NETLINK_ROUTE));
        } else
            rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socket), 1,
                                  SCMP_A0(SCMP_CMP_EQ, (uint64_t)af));
        if (rc < 0)
            return lib_error(err, rc, "system call", "socket");
    }
    rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socket), 1,
                          SCMP_A0(SCMP_CMP_GE, AF_NETLINK + 1));
    if (rc < 0)
        return lib_error(err, rc, "system call", "socket");
    return 0;
}

/* The calls that take a file mode, with the position of the mode and of the open flags (-1:
 * the call always creates or changes the mode). */
static const struct mode_call {
    const char *name;
    int mode_arg;
    int flags_arg;
} mode_calls[] = {{"chmod", 1, -1},     {"fchmod", 1, -1}, {"fchmodat", 2, -1},
                  {"fchmodat2", 2, -1}, {"creat", 1, -1},  {"mknod", 1, -1},
                  {"mknodat", 2, -1},   {"open", 2, 1},    {"openat", 3, 2}};

/* S_ISUID or S_ISGID in the mode, each tested on its own (a rule is a conjunction), and for the
 * open calls only together with O_CREAT or O_TMPFILE: otherwise the mode is ignored. Only the
 * low bits of the mode are compared, as the kernel reads them. */
static int add_mode_rules(scmp_filter_ctx ctx, struct sbx_error *err)
{
    const uint64_t bits[] = {S_ISUID, S_ISGID};
    const uint64_t creating[] = {O_CREAT, __O_TMPFILE};
    for (size_t i = 0; i < SBX_ARRAY_LEN(mode_calls); i++) {
        const struct mode_call *c = &mode_calls[i];
        int nr = seccomp_syscall_resolve_name(c->name);
        if (nr == __NR_SCMP_ERROR)
            continue; /* not in the allowlist either: ENOSYS */
        for (size_t b = 0; b < SBX_ARRAY_LEN(bits); b++) {
            struct scmp_arg_cmp mode = {(unsigned)c->mode_arg, SCMP_CMP_MASKED_EQ, bits[b],
                                        bits[b]};
            int rc = 0;
            if (c->flags_arg < 0)
                rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 1, mode);
            for (size_t f = 0; rc == 0 && c->flags_arg >= 0 && f < SBX_ARRAY_LEN(creating); f++) {
                struct scmp_arg_cmp flag = {(unsigned)c->flags_arg, SCMP_CMP_MASKED_EQ, creating[f],
                                            creating[f]};
                rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 2, flag, mode);
            }
            if (rc < 0)
                return lib_error(err, rc, "system call", c->name);
        }
    }
    return 0;
}

static int add_ioctl_rules(scmp_filter_ctx ctx, struct sbx_error *err)
{
    /* TIOCSETD can make the kernel load a line discipline module; TIOCCONS redirects the
     * console. */
    const uint64_t cmds[] = {TIOCSTI, TIOCLINUX, TIOCSETD, TIOCCONS};
    for (size_t i = 0; i < SBX_ARRAY_LEN(cmds); i++) {
        int rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
                                  SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffull, cmds[i]));
        if (rc < 0)
            return lib_error(err, rc, "system call", "ioctl");
    }
    /* A descriptor for PID 1, the supervisor: nothing a command needs (the kernel would check a
     * signal sent through it like kill's), and one more handle on the process that holds the
     * sandbox together. The pid is an int: its low 32 bits are compared. */
    int rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(pidfd_open), 1,
                              SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffffull, 1));
    if (rc < 0)
        return lib_error(err, rc, "system call", "pidfd_open");
    return add_mode_rules(ctx, err);
}

/* What the sandbox's PID 1 (the supervisor) gives up once the root is built: it keeps its
 * capabilities inside the user namespace, so without this filter a compromised supervisor could
 * still mount, unshare or reach the kernel's shared state. */
static const char *const init_refused[] = {
        "open_tree", "move_mount",    "fsopen",         "fsconfig",       "fsmount",
        "fspick",    "mount_setattr", "io_uring_setup", "io_uring_enter", "io_uring_register"};

static int add_init_rules(scmp_filter_ctx ctx, struct sbx_error *err)
{
    int rc;
    if ((rc = add_named(ctx, SCMP_ACT_ERRNO(EPERM), refused, SBX_ARRAY_LEN(refused), "refused",
                        err)) < 0 ||
        (rc = add_named(ctx, SCMP_ACT_ERRNO(EPERM), init_refused, SBX_ARRAY_LEN(init_refused),
                        "refused", err)) < 0)
        return rc;
    const uint64_t ns_flags = CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC |
                              CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | 0x00000080ull;
    for (int bit = 0; bit < 64; bit++) {
        uint64_t f = 1ull << bit;
        if (!(ns_flags & f))
            continue;
        rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                              SCMP_A0(SCMP_CMP_MASKED_EQ, f, f));
        if (rc < 0)
            return lib_error(err, rc, "system call", "clone");
    }
    return 0;
}

/* Export ctx as classic BPF into bpf (through a memfd: libseccomp 2.5 exports only to fds). */
static int export_bpf(scmp_filter_ctx ctx, struct sbx__bpf *bpf, struct sbx_error *err)
{
    int fd = memfd_create("sbx-seccomp", MFD_CLOEXEC);
    int rc = 0;
    struct sbx_buf b;
    sbx_buf_init(&b, MAX_BPF_INSNS * sizeof(struct sock_filter));
    if (fd < 0) {
        rc = sbx_error_errno(err, errno, "seccomp: cannot create a memfd");
        goto out;
    }
    if ((rc = seccomp_export_bpf(ctx, fd)) < 0) {
        rc = sbx_error_errno(err, -rc, "seccomp: cannot export the filter");
        goto out;
    }
    if (lseek(fd, 0, SEEK_SET) < 0) {
        rc = sbx_error_errno(err, errno, "seccomp: cannot rewind the filter");
        goto out;
    }
    if ((rc = sbx_fd_read_all(fd, MAX_BPF_INSNS * sizeof(struct sock_filter), &b, err)) < 0) {
        sbx_error_prefix(err, "seccomp: exported filter");
        goto out;
    }
    if (b.len == 0 || b.len % sizeof(struct sock_filter)) {
        rc = sbx_error_set(err, SBX_E_SYS, 0, "seccomp: exported filter has a bad size %zu", b.len);
        goto out;
    }
    /* A copy of the exact size: the read buffer grows in 64 KiB steps, and the programs stay
     * for the sandbox's life in every process forked after they are built. */
    bpf->len = b.len / sizeof(struct sock_filter);
    bpf->insns = sbx_xmalloc(b.len);
    memcpy(bpf->insns, b.data, b.len);
out:
    if (fd >= 0)
        close(fd);
    sbx_buf_release(&b);
    return rc;
}

static int build_one(uint32_t def, int (*rules)(scmp_filter_ctx, struct sbx_error *),
                     struct sbx__bpf *out, struct sbx_error *err)
{
    scmp_filter_ctx ctx = seccomp_init(def);
    int rc;
    if (!ctx)
        return sbx_error_set(err, SBX_E_SYS, 0, "seccomp: cannot initialise libseccomp");
    /* The filter is installed by sbx__seccomp_load with no_new_privs already set. */
    if ((rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0)) < 0) {
        rc = sbx_error_errno(err, -rc, "seccomp: cannot set filter attribute");
        goto out;
    }
    /* A binary tree of system call numbers instead of a linear list: each call costs a
     * handful of instructions rather than hundreds. */
    if ((rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2)) < 0) {
        rc = sbx_error_errno(err, -rc, "seccomp: cannot set filter attribute");
        goto out;
    }
    if ((rc = rules(ctx, err)) < 0)
        goto out;
    rc = export_bpf(ctx, out, err);
out:
    seccomp_release(ctx);
    return rc;
}

int sbx__seccomp_build_pair(struct sbx__bpf *allow, struct sbx__bpf *args, struct sbx_error *err)
{
    struct sbx__bpf m = {0}, a = {0};
    int rc = sbx__seccomp_lib_load(err);
    if (rc < 0)
        return rc;
    rc = build_one(SCMP_ACT_ERRNO(ENOSYS), add_main_rules, &m, err);
    if (rc == 0)
        rc = build_one(SCMP_ACT_ALLOW, add_ioctl_rules, &a, err);
    if (rc < 0) {
        sbx__bpf_release(&m);
        return rc;
    }
    *allow = m;
    *args = a;
    return 0;
}

/* One program with the verdicts of the two stacked (allow installed last): allow runs first,
 * and where it would return SECCOMP_RET_ALLOW it jumps to the start of args instead, whose
 * answer is then the program's. Stacked, the kernel takes allow's verdict unless args' is
 * strictly more restrictive; args answers only ALLOW, an errno, or the bad-architecture kill
 * that allow's identical preamble gives for the same input: so wherever allow does not allow,
 * its verdict stands in both, and wherever it allows, args decides in both. The kernel's
 * constant-action cache follows the jump (seccomp_is_const_allow), so the calls it skipped the
 * filters for are the same too. tests/unit/providers/local/test-isolate.c checks the
 * equivalence by running both forms over system call numbers, architectures and arguments. */
int sbx__bpf_chain(const struct sbx__bpf *allow, const struct sbx__bpf *args, struct sbx__bpf *out,
                   struct sbx_error *err)
{
    size_t n = allow->len + args->len;
    if (allow->len == 0 || args->len == 0 || n > BPF_MAXINSNS)
        return sbx_error_set(err, SBX_E_SYS, 0,
                             "seccomp: filters of %zu and %zu instructions "
                             "cannot be joined",
                             allow->len, args->len);
    struct sock_filter *p = sbx_xmalloc(n * sizeof(*p));
    memcpy(p, allow->insns, allow->len * sizeof(*p));
    memcpy(p + allow->len, args->insns, args->len * sizeof(*p));
    for (size_t i = 0; i < allow->len; i++)
        if (p[i].code == (BPF_RET | BPF_K) && p[i].k == SECCOMP_RET_ALLOW)
            p[i] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JA, (uint32_t)(allow->len - i - 1), 0,
                                                0);
    out->insns = p;
    out->len = n;
    return 0;
}

int sbx__seccomp_build(struct sbx__bpf *out, struct sbx_error *err)
{
    struct sbx__bpf m = {0}, a = {0};
    int rc = sbx__seccomp_build_pair(&m, &a, err);
    if (rc == 0)
        rc = sbx__bpf_chain(&m, &a, out, err);
    sbx__bpf_release(&m);
    sbx__bpf_release(&a);
    return rc;
}

int sbx__seccomp_build_init(struct sbx__bpf *out, struct sbx_error *err)
{
    int rc = sbx__seccomp_lib_load(err);
    if (rc < 0)
        return rc;
    return build_one(SCMP_ACT_ALLOW, add_init_rules, out, err);
}

void sbx__bpf_release(struct sbx__bpf *bpf)
{
    free(bpf->insns);
    bpf->insns = NULL;
    bpf->len = 0;
}

int sbx__seccomp_load(const struct sbx__bpf *bpf, struct sbx_error *err)
{
    struct sock_fprog prog = {.len = (unsigned short)bpf->len, .filter = bpf->insns};
    /* prctl rather than seccomp(2): the same effect for one thread, and tools such as
     * valgrind know it. */
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) < 0)
        return sbx_error_errno(err, errno,
                               "cannot load the seccomp filter (kernel feature "
                               "CONFIG_SECCOMP_FILTER)");
    return 0;
}
