/* Tests of the local sandbox isolation: the plan and /etc generation (pure), then real
 * sandboxes: each check runs a command inside a freshly isolated sandbox and asserts on its exit
 * status or on a file it wrote into the workspace. Seccomp refusals are probed by this same
 * program, granted read-only into the sandbox at /probe and run with --probe: allowed calls get
 * harmless bad arguments (EFAULT, EBADF), filtered ones the filter's errno. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/keyctl.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/resource.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "providers/local/isolate/isolate.h"
#include "sbx/buf.h"
#include "sbx/fs.h"
#include "sbx/log.h"
#include "tap.h"

#ifndef AF_VSOCK
#    define AF_VSOCK 40
#endif

static char ws[PATH_MAX];
static char probe_dir[PATH_MAX];

/* ------------------------------------------------------------------ probe ---- */

static void probe(const char *name, long rc)
{
    printf("%s=%d\n", name, rc < 0 ? errno : 0);
}

static int run_probes(void)
{
    char c = 'x';
    setvbuf(stdout, NULL, _IOLBF, 0);
    probe("unshare", syscall(SYS_unshare, CLONE_NEWUSER));
    probe("unshare_net", syscall(SYS_unshare, CLONE_NEWNET));
    probe("clone_newns", syscall(SYS_clone, CLONE_NEWNS | SIGCHLD, 0, 0, 0, 0));
    probe("clone3", syscall(SYS_clone3, NULL, 0));
    probe("setns", syscall(SYS_setns, -1, 0));
    probe("mount", syscall(SYS_mount, NULL, "/", NULL, MS_REMOUNT, NULL));
    probe("umount", syscall(SYS_umount2, "/usr", MNT_DETACH));
    probe("open_tree", syscall(SYS_open_tree, AT_FDCWD, "/", 0));
    probe("fsopen", syscall(SYS_fsopen, "tmpfs", 0));
    probe("chroot", syscall(SYS_chroot, "/tmp"));
    probe("pivot_root", syscall(SYS_pivot_root, "/tmp", "/tmp"));
    probe("keyctl", syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, 0));
    probe("add_key", syscall(SYS_add_key, "user", "k", "v", 1, KEY_SPEC_USER_KEYRING));
    probe("bpf", syscall(SYS_bpf, 5, NULL, 0));
    probe("perf_event_open", syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0));
    probe("userfaultfd", syscall(SYS_userfaultfd, 0));
    probe("io_uring_setup", syscall(SYS_io_uring_setup, 8, NULL));
    probe("ptrace", syscall(SYS_ptrace, PTRACE_ATTACH, 1, 0, 0));
    probe("process_vm_readv", syscall(SYS_process_vm_readv, 1, NULL, 0, NULL, 0, 0));
    probe("open_by_handle_at", syscall(SYS_open_by_handle_at, -1, NULL, 0));
    probe("init_module", syscall(SYS_init_module, NULL, 0, ""));
    probe("reboot", syscall(SYS_reboot, 0, 0, 0, NULL));
    probe("settimeofday", syscall(SYS_settimeofday, NULL, NULL));
    probe("sethostname", syscall(SYS_sethostname, "x", 1));
    probe("tiocsti", syscall(SYS_ioctl, 0, TIOCSTI, &c));
    probe("tiocsti_high", syscall(SYS_ioctl, 0, (1UL << 32) | TIOCSTI, &c));
    probe("tioclinux", syscall(SYS_ioctl, 0, TIOCLINUX, &c));
    probe("tiocsetd", syscall(SYS_ioctl, 0, TIOCSETD, &c));
    probe("ioctl_other", syscall(SYS_ioctl, -1, TIOCGWINSZ, NULL));
    probe("personality_bad", syscall(SYS_personality, READ_IMPLIES_EXEC));
    probe("personality_query", syscall(SYS_personality, 0xffffffffUL));
    long fd;
    probe("vsock", fd = syscall(SYS_socket, AF_VSOCK, SOCK_STREAM, 0));
    if (fd >= 0)
        close((int)fd);
    probe("packet", fd = syscall(SYS_socket, AF_PACKET, SOCK_RAW, 0));
    if (fd >= 0)
        close((int)fd);
    probe("netlink_audit", fd = syscall(SYS_socket, AF_NETLINK, SOCK_RAW, 9));
    if (fd >= 0)
        close((int)fd);
    probe("netlink_route", fd = syscall(SYS_socket, AF_NETLINK, SOCK_RAW, 0));
    if (fd >= 0)
        close((int)fd);
    probe("inet", fd = syscall(SYS_socket, AF_INET, SOCK_STREAM, 0));
    if (fd >= 0)
        close((int)fd);
    probe("unix", fd = syscall(SYS_socket, AF_UNIX, SOCK_STREAM, 0));
    if (fd >= 0)
        close((int)fd);
    probe("family_99", syscall(SYS_socket, 99, SOCK_STREAM, 0));
    /* the families between the allowed ones and just above netlink, and AF_UNIX with high bits
     * set (the kernel would read AF_UNIX; the filter compares all 64 bits and refuses it) */
    probe("family_0", syscall(SYS_socket, 0, SOCK_STREAM, 0));
    probe("family_3", syscall(SYS_socket, 3, SOCK_DGRAM, 0));
    probe("family_9", syscall(SYS_socket, 9, SOCK_DGRAM, 0));
    probe("family_11", syscall(SYS_socket, 11, SOCK_DGRAM, 0));
    probe("family_17", syscall(SYS_socket, 17, SOCK_DGRAM, 0));
    probe("family_63", syscall(SYS_socket, 63, SOCK_DGRAM, 0));
    probe("family_unix_high", syscall(SYS_socket, (1UL << 32) | AF_UNIX, SOCK_STREAM, 0));
    probe("getpid_ok", syscall(SYS_getpid) > 0 ? 0 : -1);
    return 0;
}

/* ----------------------------------------------------------------- helpers ---- */

/* Root of the initial user namespace: the runner mode with range maps and cgroups (root of a
 * container's user namespace is an unprivileged runner). */
static int privileged(void)
{
    FILE *f = fopen("/proc/self/uid_map", "re");
    unsigned long a = 1, b = 1, n = 0;
    int ok = f && fscanf(f, "%lu %lu %lu", &a, &b, &n) == 3;
    if (f)
        fclose(f);
    return geteuid() == 0 && ok && a == 0 && b == 0 && n == 4294967295ul;
}

static void make_workspace(void)
{
    snprintf(ws, sizeof(ws), "/tmp/sbx-isolate-XXXXXX");
    if (!mkdtemp(ws))
        abort();
    chmod(ws, 0755);
}

static void remove_workspace(void)
{
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof(cmd), "%s", ws);
    pid_t p = fork();
    if (p == 0) {
        execl("/bin/rm", "rm", "-rf", cmd, (char *)NULL);
        _exit(127);
    }
    waitpid(p, NULL, 0);
}

/* Valgrind does not know open_tree: under it a root runner has no idmapped workspace and must
 * ask for the fallback to its own uid. */
static int under_valgrind(void)
{
    const char *preload = getenv("LD_PRELOAD");
    return preload && strstr(preload, "vgpreload");
}

static void base_spec(struct sbx__isolation_spec *s)
{
    memset(s, 0, sizeof(*s));
    s->workspace = ws;
    s->allow_host_uid = under_valgrind();
}

/* Run `sh -c script` in a sandbox of spec; returns the wait status, -1 on a setup error. */
static int sh_spec(const struct sbx__isolation_spec *spec, const char *script,
                   struct sbx_error *err)
{
    char *argv[] = {"/bin/sh", "-c", (char *)script, NULL};
    int status = -1;
    fflush(stdout);
    if (sbx__isolation_run(spec, NULL, argv, &status, NULL, err) < 0)
        return -1;
    return status;
}

static int sh(const char *script)
{
    struct sbx__isolation_spec s;
    struct sbx_error err = SBX_ERROR_INIT;
    base_spec(&s);
    int st = sh_spec(&s, script, &err);
    if (st == -1)
        printf("# setup failed: %s\n", err.msg);
    return st;
}

#define CHECK_SH(script)                                                    \
    do {                                                                    \
        int st_ = sh(script);                                               \
        if (!tap__result(st_ == 0, __FILE__, __LINE__, "sandbox: " script)) \
            printf("#   wait status %d\n", st_);                            \
    } while (0)

static char *read_ws(const char *name)
{
    char path[PATH_MAX * 2];
    snprintf(path, sizeof(path), "%s/%s", ws, name);
    FILE *f = fopen(path, "re");
    if (!f)
        return NULL;
    static char buf[65536];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static struct {
    char text[4096];
    size_t len;
} warnings;

static void capture_log(enum sbx_log_level level, const char *msg, void *data)
{
    (void)level;
    (void)data;
    int n = snprintf(warnings.text + warnings.len, sizeof(warnings.text) - warnings.len, "%s\n",
                     msg);
    if (n > 0 && warnings.len + (size_t)n < sizeof(warnings.text))
        warnings.len += (size_t)n;
}

/* ------------------------------------------------------------------- plan ---- */

static void test_plan_default(void)
{
    struct sbx__isolation_spec s = {0};
    struct sbx__isolation_plan p;
    struct sbx_error err = SBX_ERROR_INIT;
    s.workspace = "/srv/ws";
    CHECK_OK(sbx__isolation_plan_build(&s, &p, &err), &err);
    CHECK(p.n > 10);
    CHECK_EQ_INT(p.ops[0].kind, SBX__OP_TMPFS);
    CHECK_EQ_STR(p.ops[0].dst, "/");
    CHECK_EQ_INT(p.ops[p.n - 1].kind, SBX__OP_REMOUNT_RO);
    CHECK_EQ_STR(p.ops[p.n - 1].dst, "/");
    const struct sbx__op *usr = sbx__isolation_plan_find(&p, SBX__OP_BIND, "/usr");
    CHECK(usr && !usr->writable && strcmp(usr->src, "/usr") == 0);
    const struct sbx__op *w = sbx__isolation_plan_find(&p, SBX__OP_BIND, "/workspace");
    CHECK(w && w->writable && strcmp(w->src, "/srv/ws") == 0);
    CHECK(sbx__isolation_plan_find(&p, SBX__OP_SYSDIR, "/lib64") != NULL);
    CHECK(sbx__isolation_plan_find(&p, SBX__OP_PROC, "/proc") != NULL);
    CHECK(sbx__isolation_plan_find(&p, SBX__OP_PROC_RO, "/proc/sys") != NULL);
    CHECK(sbx__isolation_plan_find(&p, SBX__OP_PROC_MASK, "/proc/kcore") != NULL);
    CHECK(sbx__isolation_plan_find(&p, SBX__OP_PROC_MASK, "/proc/cmdline") != NULL);
    const struct sbx__op *pts = sbx__isolation_plan_find(&p, SBX__OP_DEVPTS, "/dev/pts");
    CHECK(pts && pts->size == SBX__ISOLATION_DEFAULT_PTYS);
    CHECK(sbx__isolation_plan_find(&p, SBX__OP_DEVNODE, "/dev/null") != NULL);
    CHECK(sbx__isolation_plan_find(&p, SBX__OP_TMPFS, "/tmp") != NULL);
    CHECK(sbx__isolation_plan_find(&p, SBX__OP_REMOUNT_RO, "/etc") != NULL);
    /* Nothing of /sys, no host /etc/passwd or shadow, no resolv.conf in network mode none,
     * no device nodes beyond the minimal set. */
    int sys = 0, shadow = 0, resolv = 0, devnodes = 0, passwd_bind = 0;
    for (size_t i = 0; i < p.n; i++) {
        const struct sbx__op *op = &p.ops[i];
        sys += strncmp(op->dst, "/sys", 4) == 0;
        shadow += strstr(op->dst, "shadow") != NULL;
        resolv += strstr(op->dst, "resolv.conf") != NULL;
        devnodes += op->kind == SBX__OP_DEVNODE;
        passwd_bind += op->kind != SBX__OP_FILE && strcmp(op->dst, "/etc/passwd") == 0;
    }
    CHECK_EQ_INT(sys, 0);
    CHECK_EQ_INT(shadow, 0);
    CHECK_EQ_INT(resolv, 0);
    CHECK_EQ_INT(devnodes, 6);
    CHECK_EQ_INT(passwd_bind, 0);
    const struct sbx__op *pw = sbx__isolation_plan_find(&p, SBX__OP_FILE, "/etc/passwd");
    CHECK(pw != NULL);
    if (pw)
        CHECK_CONTAINS(pw->content, "sandbox:x:1000:1000:sandbox:/workspace:/bin/sh\n");
    const struct sbx__op *h = sbx__isolation_plan_find(&p, SBX__OP_FILE, "/etc/hostname");
    CHECK(h && strcmp(h->content, "sandbox\n") == 0);
    /* Order: the root first, proc before the device tmpfs, /etc made read-only after its
     * files were written. */
    size_t i_proc = 0, i_dev = 0, i_etc_ro = 0, i_passwd = 0;
    for (size_t i = 0; i < p.n; i++) {
        if (p.ops[i].kind == SBX__OP_PROC)
            i_proc = i;
        if (p.ops[i].kind == SBX__OP_TMPFS && strcmp(p.ops[i].dst, "/dev") == 0)
            i_dev = i;
        if (p.ops[i].kind == SBX__OP_REMOUNT_RO && strcmp(p.ops[i].dst, "/etc") == 0)
            i_etc_ro = i;
        if (p.ops[i].kind == SBX__OP_FILE && strcmp(p.ops[i].dst, "/etc/passwd") == 0)
            i_passwd = i;
    }
    CHECK(i_proc < i_dev);
    CHECK(i_passwd < i_etc_ro);
    sbx__isolation_plan_release(&p);
}

static void test_plan_options(void)
{
    struct sbx__isolation_user users[] = {{"alice"}, {"bob"}};
    const char *dev_members[] = {"alice", "bob", NULL};
    struct sbx__isolation_group groups[] = {{"dev", dev_members}};
    struct sbx__isolation_grant grants[] = {{"/opt/tool", "/opt/tool", 0},
                                            {"/srv/data", "/data", 1}};
    struct sbx__isolation_spec s = {0};
    struct sbx__isolation_plan p;
    struct sbx_error err = SBX_ERROR_INIT;
    s.workspace = "/srv/ws";
    s.root = "/home/agent/project";
    s.hostname = "box-1";
    s.net = SBX__NET_FULL;
    s.users = users;
    s.nusers = 2;
    s.groups = groups;
    s.ngroups = 1;
    s.grants = grants;
    s.ngrants = 2;
    CHECK_OK(sbx__isolation_plan_build(&s, &p, &err), &err);
    const struct sbx__op *w = sbx__isolation_plan_find(&p, SBX__OP_BIND, "/home/agent/project");
    CHECK(w && w->writable);
    const struct sbx__op *g1 = sbx__isolation_plan_find(&p, SBX__OP_BIND, "/opt/tool");
    CHECK(g1 && !g1->writable);
    const struct sbx__op *g2 = sbx__isolation_plan_find(&p, SBX__OP_BIND, "/data");
    CHECK(g2 && g2->writable && strcmp(g2->src, "/srv/data") == 0);
    const struct sbx__op *r = sbx__isolation_plan_find(&p, SBX__OP_ETC, "/etc/resolv.conf");
    CHECK(r && r->copy);
    const struct sbx__op *pw = sbx__isolation_plan_find(&p, SBX__OP_FILE, "/etc/passwd");
    if (pw) {
        CHECK_CONTAINS(pw->content, "alice:x:1000:1000:");
        CHECK_CONTAINS(pw->content, "bob:x:1001:1001:");
    }
    const struct sbx__op *gr = sbx__isolation_plan_find(&p, SBX__OP_FILE, "/etc/group");
    if (gr)
        CHECK_CONTAINS(gr->content, "dev:x:2000:alice,bob\n");
    const struct sbx__op *h = sbx__isolation_plan_find(&p, SBX__OP_FILE, "/etc/hosts");
    if (h)
        CHECK_CONTAINS(h->content, "127.0.1.1\tbox-1\n");
    sbx__isolation_plan_release(&p);
}

static void test_plan_errors(void)
{
    struct sbx__isolation_spec s;
    struct sbx__isolation_plan p;
    struct sbx_error err = SBX_ERROR_INIT;

    memset(&s, 0, sizeof(s));
    CHECK_ERR(sbx__isolation_plan_build(&s, &p, &err), SBX_E_INVAL, &err, "workspace");
    s.workspace = "rel/ws";
    CHECK_ERR(sbx__isolation_plan_build(&s, &p, &err), SBX_E_INVAL, &err,
              "workspace 'rel/ws' must be an absolute path");
    s.workspace = "/srv/../ws";
    CHECK_ERR(sbx__isolation_plan_build(&s, &p, &err), SBX_E_INVAL, &err, "normalised");
    s.workspace = "/srv/ws";
    s.root = "/";
    CHECK_ERR(sbx__isolation_plan_build(&s, &p, &err), SBX_E_INVAL, &err, "root '/'");
    s.root = "/proc/x";
    CHECK_ERR(sbx__isolation_plan_build(&s, &p, &err), SBX_E_INVAL, &err, "inside '/proc'");
    s.root = "/tmp";
    CHECK_ERR(sbx__isolation_plan_build(&s, &p, &err), SBX_E_INVAL, &err, "inside '/tmp'");
    s.root = NULL;
    s.hostname = "bad host";
    CHECK_ERR(sbx__isolation_plan_build(&s, &p, &err), SBX_E_INVAL, &err, "hostname 'bad host'");
    s.hostname = NULL;

    struct sbx__isolation_grant g = {"/", "/x", 0};
    s.grants = &g;
    s.ngrants = 1;
    CHECK_ERR(sbx__isolation_plan_build(&s, &p, &err), SBX_E_INVAL, &err,
              "grant source '/' is not allowed");
    g.src = "/root";
    CHECK_ERR(sbx__isolation_plan_build(&s, &p, &err), SBX_E_INVAL, &err, "home directory");
    g.src = "/home/bob";
    CHECK_ERR(sbx__isolation_plan_build(&s, &p, &err), SBX_E_INVAL, &err, "home directory");
    g.src = "/srv/me";
    s.host_home = "/srv/me";
    CHECK_ERR(sbx__isolation_plan_build(&s, &p, &err), SBX_E_INVAL, &err, "home directory");
    s.host_home = NULL;
    const char *views[] = {"/proc", "/proc/1",     "/sys/fs", "/dev",
                           "/run",  "/run/user/0", "/var/run"};
    g.dst = "/opt/x";
    for (size_t i = 0; i < sizeof(views) / sizeof(*views); i++) {
        g.src = views[i];
        CHECK_ERR(sbx__isolation_plan_build(&s, &p, &err), SBX_E_PERM, &err,
                  "--allow-dangerous-grant");
    }
    g.src = "/run";
    g.dangerous = 1;
    CHECK_OK(sbx__isolation_plan_build(&s, &p, &err), &err);
    sbx__isolation_plan_release(&p);
    g.dangerous = 0;
    g.src = "/runner";
    CHECK_OK(sbx__isolation_plan_build(&s, &p, &err), &err);
    sbx__isolation_plan_release(&p);
    g.src = "/root/.cargo";
    g.dst = "/usr/local/cargo";
    CHECK_ERR(sbx__isolation_plan_build(&s, &p, &err), SBX_E_INVAL, &err, "inside '/usr'");
    g.dst = "/";
    CHECK_ERR(sbx__isolation_plan_build(&s, &p, &err), SBX_E_INVAL, &err, "'/' is not allowed");
    g.dst = "/opt/cargo";
    CHECK_OK(sbx__isolation_plan_build(&s, &p, &err), &err);
    sbx__isolation_plan_release(&p);
    s.ngrants = 0;

    struct sbx__isolation_user bad[] = {{"Alice"}};
    s.users = bad;
    s.nusers = 1;
    CHECK_ERR(sbx__isolation_plan_build(&s, &p, &err), SBX_E_INVAL, &err,
              "user name 'Alice' must match");
    struct sbx__isolation_user dup[] = {{"al"}, {"al"}};
    s.users = dup;
    s.nusers = 2;
    CHECK_ERR(sbx__isolation_plan_build(&s, &p, &err), SBX_E_INVAL, &err, "declared twice");
    struct sbx__isolation_user root[] = {{"root"}};
    s.users = root;
    s.nusers = 1;
    CHECK_ERR(sbx__isolation_plan_build(&s, &p, &err), SBX_E_INVAL, &err, "reserved");
    struct sbx__isolation_user ok[] = {{"al"}};
    const char *members[] = {"zed", NULL};
    struct sbx__isolation_group grp = {"dev", members};
    s.users = ok;
    s.groups = &grp;
    s.ngroups = 1;
    CHECK_ERR(sbx__isolation_plan_build(&s, &p, &err), SBX_E_INVAL, &err,
              "group 'dev' names user 'zed', which is not declared");
    s.nusers = SBX__ISOLATION_MAX_USERS + 1;
    CHECK_ERR(sbx__isolation_plan_build(&s, &p, &err), SBX_E_TOOBIG, &err, "users");
}

static void test_names_and_cgroup_parse(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    CHECK_OK(sbx__isolation_check_name("user", "a_b-9", &err), &err);
    CHECK_ERR(sbx__isolation_check_name("user", "9a", &err), SBX_E_INVAL, &err, "'9a'");
    CHECK_ERR(sbx__isolation_check_name("group", "a:b", &err), SBX_E_INVAL, &err, "group name");
    CHECK_ERR(sbx__isolation_check_name("user", "", &err), SBX_E_INVAL, &err, "empty");
    CHECK_ERR(sbx__isolation_check_name("user", "abcdefghijabcdefghijabcdefghijabc", &err),
              SBX_E_INVAL, &err, "longer than 32");

    const char *text = "9:name=systemd:/\n4:memory:/a/b\n2:cpu,cpuacct:/c\n0::/v2/x\n";
    char *out = NULL;
    CHECK_OK(sbx__cgroup_self_path(text, "memory", &out, &err), &err);
    CHECK_EQ_STR(out, "/a/b");
    free(out);
    CHECK_OK(sbx__cgroup_self_path(text, "cpuacct", &out, &err), &err);
    CHECK_EQ_STR(out, "/c");
    free(out);
    CHECK_OK(sbx__cgroup_self_path(text, "", &out, &err), &err);
    CHECK_EQ_STR(out, "/v2/x");
    free(out);
    CHECK_ERR(sbx__cgroup_self_path(text, "pids", &out, &err), SBX_E_NOTFOUND, &err, "pids");

    /* v1 hierarchies (one per controller, cpu and cpuacct together) and a v2 mount whose root
     * is not "/" (as inside a cgroup namespace or a container). */
    const char *mi = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
                     "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
                     "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
                     "41 31 0:38 /v2 /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n";
    CHECK_OK(sbx__cgroup_own_dir(mi, text, "memory", &out, &err), &err);
    CHECK_EQ_STR(out, "/sys/fs/cgroup/memory/a/b");
    free(out);
    CHECK_OK(sbx__cgroup_own_dir(mi, text, "cpu", &out, &err), &err);
    CHECK_EQ_STR(out, "/sys/fs/cgroup/cpu,cpuacct/c");
    free(out);
    CHECK_OK(sbx__cgroup_own_dir(mi, text, "", &out, &err), &err);
    CHECK_EQ_STR(out, "/sys/fs/cgroup/unified/x");
    free(out);
    const char *self_root = "4:memory:/\n";
    CHECK_OK(sbx__cgroup_own_dir(mi, self_root, "memory", &out, &err), &err);
    CHECK_EQ_STR(out, "/sys/fs/cgroup/memory");
    free(out);
    CHECK_ERR(sbx__cgroup_own_dir(mi, "8:pids:/p\n", "pids", &out, &err), SBX_E_NOTFOUND, &err,
              "cgroup controller pids is not mounted");
}

static void test_idrange_overlaps(void)
{
    const uint64_t b = SBX__IDRANGE_BASE, n = SBX__IDRANGE_SIZE;
    const char *passwd = "root:x:0:0:root:/root:/bin/sh\nbig:x:1879048200:5:x:/:/bin/sh\n"
                         "bad:x:18790482000000000000000:1:x:/:/bin/sh\nshort:x\n";
    CHECK(sbx__idrange_overlaps(passwd, SBX__IDRANGE_PASSWD, b, n));
    CHECK(!sbx__idrange_overlaps(passwd, SBX__IDRANGE_PASSWD, b + n, n));
    CHECK(sbx__idrange_overlaps("g:x:1879113728:\n", SBX__IDRANGE_GROUP, b + n, n));
    CHECK(!sbx__idrange_overlaps("g:x:1879113728:\n", SBX__IDRANGE_GROUP, b, n));
    /* subuid: a range that starts below and reaches into the slot, and one that just ends */
    CHECK(sbx__idrange_overlaps("u:1879000000:100000\n", SBX__IDRANGE_SUBID, b, n));
    CHECK(!sbx__idrange_overlaps("u:1878982656:65536\n", SBX__IDRANGE_SUBID, b, n));
    CHECK(!sbx__idrange_overlaps("u:100000:65536\nv:165536:0\n", SBX__IDRANGE_SUBID, b, n));
    CHECK(!sbx__idrange_overlaps("", SBX__IDRANGE_SUBID, b, n));
}

/* Slots are exclusive while held, reusable once released or when their holder is gone, and
 * the directory must be root's alone. */
static void test_idrange_slots(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char dir[] = "/tmp/sbx-idrange-test.XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char *slots = sbx_xasprintf("%s/slots", dir);
    struct sbx__idrange a = {.fd = -1, .dir_fd = -1}, b = a, c = a;
    if (geteuid() != 0) {
        CHECK_ERR(sbx__idrange_acquire(slots, "a", &a, &err), SBX_E_PERM, &err,
                  "owned by root with mode 0700");
        goto out;
    }
    CHECK_OK(sbx__idrange_acquire(slots, "a", &a, &err), &err);
    CHECK_OK(sbx__idrange_acquire(slots, "b", &b, &err), &err);
    CHECK(a.first != b.first);
    CHECK((a.first - SBX__IDRANGE_BASE) % SBX__IDRANGE_SIZE == 0);
    unsigned a_slot = a.slot;
    /* A forked holder that dies (SIGKILL of a supervisor) frees its slot by dying. */
    pid_t pid = fork();
    if (pid == 0) {
        struct sbx__idrange k = {.fd = -1, .dir_fd = -1};
        struct sbx_error e = SBX_ERROR_INIT;
        int got = sbx__idrange_acquire(slots, "killed", &k, &e) == 0 ? (int)k.slot : 255;
        /* Freed, or valgrind may count it lost at _exit and answer with its exit status. */
        free(slots);
        _exit(got);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) != 255);
    char *stale = sbx_xasprintf("%s/slot-%d", slots, WEXITSTATUS(st));
    CHECK(access(stale, F_OK) == 0); /* its file stays, unlocked */
    CHECK_OK(sbx__idrange_acquire(slots, "c", &c, &err), &err);
    CHECK_EQ_INT(c.slot, WEXITSTATUS(st)); /* and is taken again */
    /* Prune removes a stale file and nothing that is held. */
    sbx__idrange_drop(&c); /* as if c's holder had died */
    unsigned pruned = 0;
    CHECK_OK(sbx__idrange_prune(slots, &pruned, &err), &err);
    CHECK_EQ_INT(pruned, 1);
    CHECK(access(stale, F_OK) < 0);
    free(stale);
    char *path = sbx_xasprintf("%s/slot-%u", slots, a_slot);
    sbx__idrange_release(&a);
    /* Released: the file stays, unlocked, with its record; free for rm's wait. */
    int lfd = open(path, O_RDWR | O_CLOEXEC);
    CHECK(lfd >= 0 && flock(lfd, LOCK_EX | LOCK_NB) == 0);
    if (lfd >= 0)
        close(lfd);
    CHECK(sbx__idrange_wait_free(slots, a_slot * SBX__IDRANGE_SIZE + SBX__IDRANGE_BASE, "a", 0) ==
          1);
    CHECK_OK(sbx__idrange_acquire(slots, "again", &a, &err), &err);
    CHECK_EQ_INT(a.slot, a_slot);
    /* Its next holder's record replaces the old one, longer or shorter. */
    struct sbx_buf rec;
    sbx_buf_init(&rec, 4096);
    CHECK_OK(sbx_fs_read_path(path, 4096, &rec, &err), &err);
    char want[64];
    snprintf(want, sizeof(want), "again %d\n", (int)getpid());
    CHECK(rec.len == strlen(want) && memcmp(rec.data, want, rec.len) == 0);
    sbx_buf_release(&rec);
    CHECK(sbx__idrange_wait_free(slots, b.first, "not-b", 0) == 1); /* held, but for b */
    CHECK(sbx__idrange_wait_free(slots, b.first, "b", 0) == 0);     /* still held for b */
    free(path);
    /* A directory others can enter is refused. */
    CHECK(chmod(slots, 0711) == 0);
    CHECK_ERR(sbx__idrange_acquire(slots, "x", &c, &err), SBX_E_PERM, &err, "mode 0700");
    CHECK(chmod(slots, 0700) == 0);
    /* So is a symlink to a directory. */
    char *link = sbx_xasprintf("%s/link", dir);
    CHECK(symlink(slots, link) == 0);
    CHECK(sbx__idrange_acquire(link, "x", &c, &err) < 0);
    unlink(link);
    free(link);
out:
    sbx__idrange_release(&a);
    sbx__idrange_release(&b);
    /* Released files stay until a prune, which leaves none behind here. */
    if (geteuid() == 0)
        CHECK_OK(sbx__idrange_prune(slots, NULL, &err), &err);
    CHECK(rmdir(slots) == 0);
    CHECK(rmdir(dir) == 0);
    free(slots);
}

static void test_env_and_users(void)
{
    struct sbx__isolation_spec s = {0};
    struct sbx__isolation *iso = NULL;
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__isolation_user users[] = {{"alice"}, {"bob"}};
    const char *env[] = {"LANG=de_DE.UTF-8", "PROJECT=x", NULL};
    s.workspace = "/tmp"; /* must exist: new() resolves it */
    s.users = users;
    s.nusers = 2;
    s.env = env;
    setenv("SBX_CANARY_SECRET", "canary-7d1f", 1);
    CHECK_OK(sbx__isolation_new(&s, &iso, &err), &err);
    if (!iso)
        return;
    struct sbx__run_as ra;
    CHECK_OK(sbx__isolation_user(iso, NULL, &ra, &err), &err);
    CHECK_EQ_INT(ra.uid, 1000);
    CHECK_EQ_STR(ra.name, "alice");
    CHECK_ERR(sbx__isolation_user(iso, "mallory", &ra, &err), SBX_E_NOTFOUND, &err,
              "user 'mallory' is not declared");
    if (privileged()) {
        CHECK_OK(sbx__isolation_user(iso, "bob", &ra, &err), &err);
        CHECK_EQ_INT(ra.uid, 1001);
    } else
        CHECK_ERR(sbx__isolation_user(iso, "bob", &ra, &err), SBX_E_UNSUPPORTED, &err,
                  "maps only its default user 'alice'");

    struct sbx_strv out;
    sbx_strv_init(&out);
    const char *extra[] = {"PROJECT=y", NULL};
    CHECK_OK(sbx__isolation_user(iso, NULL, &ra, &err), &err);
    CHECK_OK(sbx__isolation_env(iso, &ra, "xterm", extra, &out, &err), &err);
    CHECK_EQ_STR(sbx_strv_getenv(&out, "HOME"), "/workspace");
    CHECK_EQ_STR(sbx_strv_getenv(&out, "USER"), "alice");
    CHECK_EQ_STR(sbx_strv_getenv(&out, "TERM"), "xterm");
    CHECK_EQ_STR(sbx_strv_getenv(&out, "LANG"), "de_DE.UTF-8");
    CHECK_EQ_STR(sbx_strv_getenv(&out, "PROJECT"), "y");
    CHECK(sbx_strv_getenv(&out, "SBX_CANARY_SECRET") == NULL);
    CHECK(sbx_strv_getenv(&out, "PATH") != NULL);
    sbx_strv_release(&out);
    const char *bad[] = {"1X=y", NULL};
    CHECK_ERR(sbx__isolation_env(iso, &ra, NULL, bad, &out, &err), SBX_E_INVAL, &err,
              "environment name '1X'");
    sbx_strv_release(&out);

    struct sbx_buf d;
    sbx_buf_init(&d, 256);
    struct sbx__cgroup_events b0 = {0, 0}, b1 = {1, 0}, b2 = {0, 3};
    CHECK_OK(sbx__isolation_describe_exit(iso, SIGKILL, &b0, &b1, &d, &err), &err);
    CHECK_EQ_STR(d.data, "killed: out of memory");
    sbx_buf_reset(&d);
    CHECK_OK(sbx__isolation_describe_exit(iso, SIGKILL, &b0, &b0, &d, &err), &err);
    CHECK_EQ_STR(d.data, "killed by signal 9");
    sbx_buf_reset(&d);
    CHECK_OK(sbx__isolation_describe_exit(iso, 3 << 8, &b0, &b2, &d, &err), &err);
    CHECK_CONTAINS(d.data, "exited with status 3 (process limit");
    sbx_buf_release(&d);
    sbx__isolation_free(iso);

    const char *badenv[] = {"NOEQUALS", NULL};
    s.env = badenv;
    CHECK_ERR(sbx__isolation_new(&s, &iso, &err), SBX_E_INVAL, &err, "NAME=VALUE");
}

/* -------------------------------------------------------------- sandboxes ---- */

static void test_identity_and_namespaces(void)
{
    CHECK_SH("test \"$(id -u)\" = 1000 && test \"$(id -un)\" = sandbox");
    CHECK_SH("test \"$(cat /proc/sys/kernel/hostname)\" = sandbox");
    CHECK_SH("test $$ = 2");
    CHECK_SH("test \"$(ls -d /proc/[0-9]* | wc -l)\" -lt 8");
    CHECK_SH("test \"$(tail -n +3 /proc/net/dev | wc -l)\" = 1 && grep -q ' lo:' /proc/net/dev");
    /* The sandbox user is the caller (unprivileged) or a dedicated host uid (root): never
     * host root. Valgrind does not know open_tree, so under it a root runner takes the
     * documented fallback (the caller's uid, with a warning). */
    const char *preload = getenv("LD_PRELOAD");
    int valgrind = preload && strstr(preload, "vgpreload");
    int fallback = privileged() && valgrind;
    unsigned want = privileged() ? (valgrind ? 0u : 1000u) : (unsigned)geteuid();
    char map_check[256];
    if (privileged() && !valgrind) /* an id of the sandbox's own range: first + 1000 */
        snprintf(map_check, sizeof(map_check),
                 "awk '$1 == 1000 {h = $2} END {exit !(h >= %u && h < %u && (h - %u) %% %u == "
                 "%u)}' /proc/self/uid_map",
                 SBX__IDRANGE_BASE, SBX__IDRANGE_BASE + SBX__IDRANGE_SLOTS * SBX__IDRANGE_SIZE,
                 SBX__IDRANGE_BASE, SBX__IDRANGE_SIZE, want);
    else
        snprintf(map_check, sizeof(map_check),
                 "test \"$(awk '$1 == 1000 {print $2}' /proc/self/uid_map)\" = %u", want);
    warnings.len = 0;
    sbx_log_set_handler(capture_log, NULL, SBX_LOG_WARN);
    int st = sh(map_check);
    sbx_log_set_handler(NULL, NULL, SBX_LOG_ERROR);
    CHECK_EQ_INT(st, 0);
    if (fallback)
        CHECK_CONTAINS(warnings.text, "sandbox commands run as the caller's host uid");
    else
        CHECK_EQ_INT(warnings.len, 0);
    if (privileged()) {
        CHECK_SH("touch owned && test \"$(stat -c %u owned)\" = 1000");
        struct stat sb;
        char path[PATH_MAX + 16];
        snprintf(path, sizeof(path), "%s/owned", ws);
        CHECK(stat(path, &sb) == 0 && sb.st_uid == 0); /* on disk: the caller's */
    }
    CHECK_SH("grep -q '^NoNewPrivs:.1' /proc/self/status && grep -q '^Seccomp:.2' "
             "/proc/self/status");
    CHECK_SH("grep -q '^CapEff:.0000000000000000' /proc/self/status && "
             "grep -q '^CapBnd:.0000000000000000' /proc/self/status && "
             "grep -q '^CapPrm:.0000000000000000' /proc/self/status && "
             "grep -q '^CapAmb:.0000000000000000' /proc/self/status");
    CHECK_SH("test \"$(cat /proc/self/cgroup | cut -d: -f3 | sort -u)\" = /");
    /* Without a pids cgroup (none is asked for here) commands get RLIMIT_NPROC. */
    struct rlimit np;
    getrlimit(RLIMIT_NPROC, &np);
    unsigned long want_np = np.rlim_max != RLIM_INFINITY && np.rlim_max < 4096 ? np.rlim_max : 4096;
    char np_check[160];
    snprintf(np_check, sizeof(np_check),
             "test \"$(awk '/^Max processes/ {print $3}' /proc/self/limits)\" = %lu", want_np);
    CHECK_EQ_INT(sh(np_check), 0);
}

static void test_filesystem(void)
{
    CHECK_SH("test \"$(pwd)\" = /workspace && echo hi > w && test \"$(cat w)\" = hi");
    char *w = read_ws("w");
    CHECK(w && strcmp(w, "hi\n") == 0);
    CHECK_SH("! touch /usr/x 2>/dev/null && ! touch /etc/x 2>/dev/null && "
             "! mkdir /x 2>/dev/null && ! touch /dev/x 2>/dev/null");
    CHECK_SH("touch /tmp/y && touch /dev/shm/z && echo x > /dev/null");
    CHECK_SH("! test -e /sys && ! test -e /root && ! test -e /home && ! test -e /oldroot && "
             "! test -e /newroot");
    CHECK_SH("! test -e /etc/shadow && ! test -e /etc/ssh && ! test -e /etc/sudoers && "
             "! test -e /etc/ssl/private && ! test -e /etc/environment");
    CHECK_SH("test -s /etc/ssl/certs/ca-certificates.crt || ! test -e /usr/share/ca-certificates");
    CHECK_SH("grep -q '^sandbox:x:1000:1000:' /etc/passwd && test \"$(wc -l < /etc/passwd)\" = 3");
    CHECK_SH("test \"$(ls /dev | tr '\\n' ' ')\" = "
             "'fd full null ptmx pts random shm stderr stdin stdout tty urandom zero '");
    CHECK_SH("! test -e /dev/kvm && ! test -e /dev/vsock && ! test -e /dev/kmsg");
    CHECK_SH("awk '$5==\"/proc/sys\"{print $6}' /proc/self/mountinfo | grep -q '^ro'");
    CHECK_SH("awk '$5==\"/usr\"{print $6}' /proc/self/mountinfo | grep -q '^ro,nosuid,nodev'");
    CHECK_SH("! { echo 1 > /proc/sys/kernel/core_pattern; } 2>/dev/null && "
             "! { echo b > /proc/sysrq-trigger; } 2>/dev/null");
    CHECK_SH("test ! -s /proc/kcore 2>/dev/null || ! head -c1 /proc/kcore >/dev/null 2>&1");
    CHECK_SH("! grep -v -e ' /workspace ' -e ' /tmp ' -e ' /dev/shm ' -e ' /dev/pts ' "
             "-e ' /proc ' -e ' /dev/null ' -e ' /dev/zero ' -e ' /dev/full ' "
             "-e ' /dev/random ' -e ' /dev/urandom ' -e ' /dev/tty ' -e ' /run ' "
             "/proc/self/mountinfo | awk '{print $6}' | grep -v '^ro'");
    CHECK_SH("/usr/bin/python3 -c 'print(1)' > /dev/null");
}

static void test_env_inside(void)
{
    setenv("SBX_CANARY_SECRET", "canary-4b2e", 1);
    CHECK_SH("env > env.out; cat /proc/self/environ > environ.out");
    char *e = read_ws("env.out");
    CHECK(e != NULL);
    if (e) {
        CHECK(strstr(e, "canary-4b2e") == NULL);
        CHECK(strstr(e, "SBX_CANARY_SECRET") == NULL);
        CHECK_CONTAINS(e, "HOME=/workspace\n");
        CHECK_CONTAINS(e, "USER=sandbox\n");
    }
    CHECK_SH("! grep -qr canary-4b2e /etc /tmp /run /proc/1/environ 2>/dev/null");
}

static void test_host_secrets(void)
{
    /* A host file next to the workspace, and one in /tmp: neither is reachable. */
    char path[PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s.canary", ws);
    FILE *f = fopen(path, "we");
    if (f) {
        fputs("canary-host-91c3\n", f);
        fclose(f);
    }
    char script[PATH_MAX * 2];
    snprintf(script, sizeof(script),
             "! cat '%s' 2>/dev/null && ! ls /tmp | grep -q canary && "
             "! grep -rqs canary-host-91c3 /etc /usr/share/doc /run /tmp /workspace",
             path);
    int st = sh(script);
    CHECK_EQ_INT(st, 0);
    unlink(path);
}

static void test_seccomp_probes(void)
{
    struct sbx__isolation_spec s;
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__isolation_grant g = {probe_dir, "/probe", 0};
    /* LeakSanitizer's exit check needs ptrace, which the sandbox refuses. */
    const char *env[] = {"ASAN_OPTIONS=detect_leaks=0", NULL};
    base_spec(&s);
    s.grants = &g;
    s.ngrants = 1;
    s.env = env;
    int st = sh_spec(&s, "/probe/test-isolate --probe > probes.out", &err);
    CHECK_EQ_INT(st, 0);
    if (st == -1)
        printf("# %s\n", err.msg);
    char *out = read_ws("probes.out");
    CHECK(out != NULL);
    if (!out)
        return;
    static const struct {
        const char *line;
    } want[] = {
            {"unshare=1\n"},
            {"unshare_net=1\n"},
            {"clone_newns=1\n"},
            {"clone3=38\n"},
            {"setns=1\n"},
            {"mount=1\n"},
            {"umount=1\n"},
            {"open_tree=38\n"},
            {"fsopen=38\n"},
            {"chroot=1\n"},
            {"pivot_root=1\n"},
            {"keyctl=1\n"},
            {"add_key=1\n"},
            {"bpf=1\n"},
            {"perf_event_open=1\n"},
            {"userfaultfd=1\n"},
            {"io_uring_setup=38\n"},
            {"ptrace=1\n"},
            {"process_vm_readv=1\n"},
            {"open_by_handle_at=1\n"},
            {"init_module=1\n"},
            {"reboot=1\n"},
            {"settimeofday=1\n"},
            {"sethostname=1\n"},
            {"tiocsti=1\n"},
            {"tiocsti_high=1\n"},
            {"tioclinux=1\n"},
            {"tiocsetd=1\n"},
            {"ioctl_other=9\n"},
            {"personality_bad=38\n"},
            {"personality_query=0\n"},
            {"vsock=97\n"},
            {"packet=97\n"},
            {"netlink_audit=97\n"},
            {"netlink_route=0\n"},
            {"inet=0\n"},
            {"unix=0\n"},
            {"family_99=97\n"},
            {"family_0=97\n"},
            {"family_3=97\n"},
            {"family_9=97\n"},
            {"family_11=97\n"},
            {"family_17=97\n"},
            {"family_63=97\n"},
            {"family_unix_high=97\n"},
            {"getpid_ok=0\n"},
    };
    for (size_t i = 0; i < SBX_ARRAY_LEN(want); i++)
        CHECK_CONTAINS(out, want[i].line);
}

/* ------------------------------------------------------- one command filter ---- */

/* A classic BPF interpreter for what libseccomp emits (loads of seccomp_data, AND, the jumps,
 * scratch memory, returns): the verdict of prog for d, or -1 for an instruction it does not
 * know (the test then fails rather than pass on a guess). */
static int64_t bpf_run(const struct sbx__bpf *prog, const struct seccomp_data *d)
{
    const struct sock_filter *f = prog->insns;
    uint32_t a = 0, x = 0, mem[BPF_MEMWORDS] = {0};
    for (size_t pc = 0; pc < prog->len; pc++) {
        const struct sock_filter *i = &f[pc];
        switch (i->code) {
        case BPF_LD | BPF_W | BPF_ABS:
            if (i->k % 4 || i->k + 4 > sizeof(*d))
                return -1;
            memcpy(&a, (const char *)d + i->k, 4);
            break;
        case BPF_LD | BPF_IMM:
            a = i->k;
            break;
        case BPF_LDX | BPF_IMM:
            x = i->k;
            break;
        case BPF_LD | BPF_MEM:
            a = mem[i->k % BPF_MEMWORDS];
            break;
        case BPF_LDX | BPF_MEM:
            x = mem[i->k % BPF_MEMWORDS];
            break;
        case BPF_ST:
            mem[i->k % BPF_MEMWORDS] = a;
            break;
        case BPF_STX:
            mem[i->k % BPF_MEMWORDS] = x;
            break;
        case BPF_MISC | BPF_TAX:
            x = a;
            break;
        case BPF_MISC | BPF_TXA:
            a = x;
            break;
        case BPF_ALU | BPF_AND | BPF_K:
            a &= i->k;
            break;
        case BPF_ALU | BPF_OR | BPF_K:
            a |= i->k;
            break;
        case BPF_JMP | BPF_JA:
            pc += i->k;
            break;
        case BPF_JMP | BPF_JEQ | BPF_K:
            pc += a == i->k ? i->jt : i->jf;
            break;
        case BPF_JMP | BPF_JGT | BPF_K:
            pc += a > i->k ? i->jt : i->jf;
            break;
        case BPF_JMP | BPF_JGE | BPF_K:
            pc += a >= i->k ? i->jt : i->jf;
            break;
        case BPF_JMP | BPF_JSET | BPF_K:
            pc += (a & i->k) ? i->jt : i->jf;
            break;
        case BPF_JMP | BPF_JEQ | BPF_X:
            pc += a == x ? i->jt : i->jf;
            break;
        case BPF_JMP | BPF_JGT | BPF_X:
            pc += a > x ? i->jt : i->jf;
            break;
        case BPF_JMP | BPF_JGE | BPF_X:
            pc += a >= x ? i->jt : i->jf;
            break;
        case BPF_RET | BPF_K:
            return i->k;
        case BPF_RET | BPF_A:
            return a;
        default:
            return -1;
        }
    }
    return -1;
}

/* The kernel's choice among stacked filters: the most restrictive action, the newest filter
 * (first here) on a tie. */
static int64_t stacked(int64_t newest, int64_t older)
{
    if (newest < 0 || older < 0)
        return -1;
    int32_t n = (int32_t)((uint32_t)newest & SECCOMP_RET_ACTION_FULL);
    int32_t o = (int32_t)((uint32_t)older & SECCOMP_RET_ACTION_FULL);
    return o < n ? older : newest;
}

static uint64_t next_rand(uint64_t *state)
{
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    return *state;
}

/* The commands get the two filters joined into one program (sbx__bpf_chain): its verdict must
 * be the kernel's for the two stacked, for every system call number of every architecture and
 * x32, with arguments drawn from the values the rules compare against. */
static void test_seccomp_chain(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__bpf allow = {0}, args = {0}, one = {0};
    int rc = sbx__seccomp_build_pair(&allow, &args, &err);
    if (rc == 0)
        rc = sbx__bpf_chain(&allow, &args, &one, &err);
    CHECK_EQ_INT(rc, 0);
    if (rc < 0) {
        printf("# %s\n", err.msg);
        return;
    }
    CHECK_EQ_INT((int)one.len, (int)(allow.len + args.len));
    const uint64_t pool[] = {0,
                             1,
                             8,
                             0x7fffffff,
                             0xffffffff,
                             ~0ull,
                             0xffffffff00000000ull,
                             TIOCSTI,
                             0xffffffff00000000ull | TIOCSTI,
                             TIOCLINUX,
                             TIOCSETD,
                             TIOCCONS,
                             TIOCGWINSZ,
                             S_ISUID,
                             S_ISGID,
                             S_ISUID | 0755,
                             0xffffffff00000000ull | S_ISGID,
                             0644,
                             O_CREAT,
                             O_CREAT | O_RDWR,
                             __O_TMPFILE | O_RDWR,
                             O_DIRECTORY,
                             AF_UNIX,
                             AF_INET6,
                             AF_NETLINK,
                             AF_PACKET,
                             AF_VSOCK,
                             0x100000000ull | AF_UNIX,
                             CLONE_NEWUSER | SIGCHLD,
                             CLONE_VM | CLONE_THREAD | CLONE_SIGHAND,
                             0x80,
                             SIGCHLD};
    const uint32_t arches[] = {AUDIT_ARCH_X86_64, AUDIT_ARCH_I386, AUDIT_ARCH_AARCH64, 0};
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    size_t checked = 0, differ = 0, refused_by_args = 0;
    for (size_t ai = 0; ai < SBX_ARRAY_LEN(arches); ai++) {
        for (uint32_t n = 0; n < 1200; n++) {
            uint32_t nr = n < 600 ? n : n == 1199 ? 0xffffffffu : 0x40000000u + (n - 600);
            for (int v = 0; v < 96; v++) {
                struct seccomp_data d = {.nr = (int)nr, .arch = arches[ai]};
                for (int k = 0; k < 6; k++)
                    d.args[k] = v == 0 ? 0 : pool[next_rand(&seed) % SBX_ARRAY_LEN(pool)];
                int64_t a = bpf_run(&allow, &d), b = bpf_run(&args, &d), j = bpf_run(&one, &d);
                int64_t want = stacked(a, b);
                checked++;
                if (want < 0 || j != want)
                    differ++;
                if (a == SECCOMP_RET_ALLOW && b >= 0 && b != SECCOMP_RET_ALLOW)
                    refused_by_args++;
            }
        }
    }
    printf("# %zu + %zu instructions; %zu inputs, %zu refused by the argument rules only\n",
           allow.len, args.len, checked, refused_by_args);
    CHECK_EQ_INT((int)differ, 0);
    CHECK(refused_by_args > 100); /* the argument rules were reached */
    sbx__bpf_release(&allow);
    sbx__bpf_release(&args);
    sbx__bpf_release(&one);
}

/* Runs this program with ARG outside any sandbox and returns its wait status: what the kernel
 * itself does with the other ABIs, before any filter. */
static int probe_outside(const char *arg)
{
    /* By path, not /proc/self/exe: under valgrind that is the valgrind tool itself. */
    char path[PATH_MAX + 16];
    snprintf(path, sizeof(path), "%s/test-isolate", probe_dir);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        char *argv[] = {path, (char *)arg, NULL};
        execv(path, argv);
        _exit(127);
    }
    int status = -1;
    if (pid < 0 || waitpid(pid, &status, 0) != pid)
        return -1;
    return status;
}

/* What the kernel does with the 32-bit entry (int 0x80) outside any sandbox, from the wait
 * status of --probe-i386: the call runs (IA32 emulation, exit 3), the instruction faults before
 * any system call (no emulation, or ia32_emulation=0: SIGSEGV), or the call is refused (exit 2,
 * ENOSYS). */
enum i386_abi { I386_RUNS, I386_FAULTS, I386_ENOSYS, I386_UNEXPECTED };

static enum i386_abi i386_classify(int status)
{
    if (WIFEXITED(status) && WEXITSTATUS(status) == 3)
        return I386_RUNS;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 2)
        return I386_ENOSYS;
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV)
        return I386_FAULTS;
    return I386_UNEXPECTED;
}

/* The sandbox blocks whatever the kernel offers: a call that runs outside is killed by the
 * filter (SIGSYS); an instruction that faults outside faults inside too; a refused call is
 * refused again or killed, if it reached the filter. It never runs (exit 3). */
static int i386_blocked_inside(enum i386_abi abi, int status)
{
    int sigsys = WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS;
    switch (abi) {
    case I386_RUNS:
        return sigsys;
    case I386_FAULTS:
        return WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV;
    case I386_ENOSYS:
        return sigsys || (WIFEXITED(status) && WEXITSTATUS(status) == 2);
    case I386_UNEXPECTED:
        return 0;
    }
    return 0;
}

/* Every branch of the probe's verdict, with the wait statuses each kind of kernel gives: this
 * machine's kernel exercises only one of them in test_other_abis_killed. */
static void test_i386_verdicts(void)
{
    const int ran = W_EXITCODE(3, 0), refused = W_EXITCODE(2, 0), segv = W_EXITCODE(0, SIGSEGV),
              sys = W_EXITCODE(0, SIGSYS), other = W_EXITCODE(0, SIGKILL);
    CHECK_EQ_INT(i386_classify(ran), I386_RUNS);
    CHECK_EQ_INT(i386_classify(segv), I386_FAULTS);
    CHECK_EQ_INT(i386_classify(refused), I386_ENOSYS);
    CHECK_EQ_INT(i386_classify(other), I386_UNEXPECTED);
    CHECK_EQ_INT(i386_classify(W_EXITCODE(127, 0)), I386_UNEXPECTED);
    /* IA32 emulation: only the filter's kill will do. */
    CHECK(i386_blocked_inside(I386_RUNS, sys));
    CHECK(!i386_blocked_inside(I386_RUNS, ran));
    CHECK(!i386_blocked_inside(I386_RUNS, segv));
    /* No emulation: the fault, as outside; the call ran, or anything else, fails. */
    CHECK(i386_blocked_inside(I386_FAULTS, segv));
    CHECK(!i386_blocked_inside(I386_FAULTS, ran));
    CHECK(!i386_blocked_inside(I386_FAULTS, other));
    /* Refused by the kernel: refused again, or killed by the filter; never run. */
    CHECK(i386_blocked_inside(I386_ENOSYS, refused));
    CHECK(i386_blocked_inside(I386_ENOSYS, sys));
    CHECK(!i386_blocked_inside(I386_ENOSYS, ran));
    /* An outside result we cannot read proves nothing inside. */
    CHECK(!i386_blocked_inside(I386_UNEXPECTED, sys));
}

static void test_other_abis_killed(void)
{
    struct sbx__isolation_spec s;
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__isolation_grant g = {probe_dir, "/probe", 0};
    base_spec(&s);
    s.grants = &g;
    s.ngrants = 1;

    /* x32 numbers reach seccomp as native calls with bit 30 set, whether or not the kernel
     * runs x32 (outside they return or fail with ENOSYS); the filter kills them either way. */
    int outside = probe_outside("--probe-x32");
    if (!CHECK(WIFEXITED(outside) && (WEXITSTATUS(outside) == 2 || WEXITSTATUS(outside) == 3)))
        printf("#   x32 outside: wait status %d\n", outside);
    char *argv[] = {"/probe/test-isolate", "--probe-x32", NULL};
    int status = 0;
    CHECK_OK(sbx__isolation_run(&s, NULL, argv, &status, NULL, &err), &err);
    if (!CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS))
        printf("#   x32 inside: wait status %d\n", status);

    outside = probe_outside("--probe-i386");
    enum i386_abi abi = i386_classify(outside);
    if (!CHECK(abi != I386_UNEXPECTED))
        printf("#   int 0x80 outside: wait status %d\n", outside);
    printf("# the kernel %s\n", abi == I386_RUNS     ? "has IA32 emulation"
                                : abi == I386_ENOSYS ? "refuses 32-bit calls (ENOSYS)"
                                                     : "has no IA32 emulation");
    char *i386[] = {"/probe/test-isolate", "--probe-i386", NULL};
    status = 0;
    CHECK_OK(sbx__isolation_run(&s, NULL, i386, &status, NULL, &err), &err);
    if (!CHECK(i386_blocked_inside(abi, status)))
        printf("#   int 0x80 inside: wait status %d\n", status);
}

static void test_memory_limit(void)
{
    struct sbx__isolation_spec s;
    struct sbx_error err = SBX_ERROR_INIT;
    char name[64];
    base_spec(&s);
    snprintf(name, sizeof(name), "sbx-test-%d", (int)getpid());
    s.cgroup_name = name;
    s.limits.memory_bytes = 64ull << 20;
    char *argv[] = {"/usr/bin/python3", "-c", "a = []\nwhile True: a.append(bytearray(16 << 20))",
                    NULL};
    int status = 0;
    struct sbx_buf d;
    sbx_buf_init(&d, 256);
    fflush(stdout);
    int rc = sbx__isolation_run(&s, NULL, argv, &status, &d, &err);
    if (privileged() || rc == 0) {
        CHECK_OK(rc, &err);
        CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        CHECK_EQ_STR(d.data, "killed: out of memory (limit 64 MiB)");
    } else {
        /* Without write access to the cgroups (cgroup v1, no root): an explicit limit cannot be
         * enforced, and says so. */
        CHECK_ERR(rc, SBX_E_PERM, &err, "cgroup v1 memory controller");
    }
    sbx_buf_release(&d);
}

static void test_remove_stale_cgroups(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    unsigned removed = 99;
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "sbx-stale-%d-", (int)getpid());
    CHECK_OK(sbx__cgroup_remove_stale(prefix, 0, &removed, NULL, &err), &err);
    CHECK_EQ_INT(removed, 0);
    if (!privileged())
        return;
    /* Two leftovers in the caller's memory cgroup: an empty one goes, one with a process
     * stays; a fresh one is kept when an age is asked for. */
    struct sbx__isolation_limits l = {0};
    l.memory_bytes = 64ull << 20;
    char name[96];
    struct sbx__cgroup empty, busy;
    snprintf(name, sizeof(name), "%sempty", prefix);
    CHECK_OK(sbx__cgroup_create(name, &l, 1u << SBX__CG_MEMORY, &empty, &err), &err);
    snprintf(name, sizeof(name), "%sbusy", prefix);
    CHECK_OK(sbx__cgroup_create(name, &l, 1u << SBX__CG_MEMORY, &busy, &err), &err);
    pid_t p = fork();
    if (p == 0) {
        pause();
        _exit(0);
    }
    CHECK_OK(sbx__cgroup_attach(&busy, p, &err), &err);
    /* A cgroup in use is never shared by a second sandbox of the same name. */
    struct sbx__cgroup again;
    CHECK_ERR(sbx__cgroup_create(name, &l, 1u << SBX__CG_MEMORY, &again, &err), SBX_E_EXISTS, &err,
              "cannot create cgroup");
    CHECK_OK(sbx__cgroup_remove_stale(prefix, 3600, &removed, NULL, &err), &err);
    CHECK_EQ_INT(removed, 0);
    CHECK(access(empty.dir[SBX__CG_MEMORY], F_OK) == 0);
    CHECK_OK(sbx__cgroup_remove_stale(prefix, 0, &removed, NULL, &err), &err);
    CHECK_EQ_INT(removed, 1);
    CHECK(access(empty.dir[SBX__CG_MEMORY], F_OK) != 0);
    CHECK(access(busy.dir[SBX__CG_MEMORY], F_OK) == 0);
    kill(p, SIGKILL);
    waitpid(p, NULL, 0);
    sbx__cgroup_destroy(&busy);
    empty.owner = 0; /* already removed */
    sbx__cgroup_destroy(&empty);
}

/* Grant rules apply to where a path leads: a symlink to a home directory or to / is refused
 * like the directory itself, and a grant source may not overlap the workspace. */
static void test_grant_symlinks(void)
{
    struct sbx__isolation_spec s;
    struct sbx__isolation *iso = NULL;
    struct sbx_error err = SBX_ERROR_INIT;
    char link[PATH_MAX + 16], inside[PATH_MAX + 16];
    snprintf(link, sizeof(link), "%s.link", ws);
    snprintf(inside, sizeof(inside), "%s/sub", ws);
    struct sbx__isolation_grant g = {link, "/opt/x", 0};
    base_spec(&s);
    s.grants = &g;
    s.ngrants = 1;
    unlink(link);
    CHECK(symlink("/root", link) == 0);
    CHECK_ERR(sbx__isolation_new(&s, &iso, &err), SBX_E_INVAL, &err,
              "grant source '/root' is a home directory");
    unlink(link);
    CHECK(symlink("/", link) == 0);
    CHECK_ERR(sbx__isolation_new(&s, &iso, &err), SBX_E_INVAL, &err,
              "grant source '/' is not allowed");
    unlink(link);
    mkdir(inside, 0755);
    g.src = inside;
    CHECK_ERR(sbx__isolation_new(&s, &iso, &err), SBX_E_INVAL, &err, "overlaps the workspace");
    g.src = "/nonexistent/sbx-grant";
    CHECK_ERR(sbx__isolation_new(&s, &iso, &err), SBX_E_NOTFOUND, &err,
              "grant source '/nonexistent/sbx-grant'");
    /* A workspace reached through a symlink is bound where the link leads. */
    CHECK(symlink(ws, link) == 0);
    base_spec(&s);
    s.workspace = link;
    char *argv[] = {"/bin/sh", "-c", "echo through-link > via", NULL};
    int status = -1;
    CHECK_OK(sbx__isolation_run(&s, NULL, argv, &status, NULL, &err), &err);
    char *v = read_ws("via");
    CHECK(status == 0 && v && strcmp(v, "through-link\n") == 0);
    unlink(link);
}

static void test_setup_errors(void)
{
    struct sbx__isolation_spec s;
    struct sbx_error err = SBX_ERROR_INIT;
    base_spec(&s);
    s.workspace = "/nonexistent/sbx-ws";
    char *argv[] = {"/bin/true", NULL};
    int status;
    CHECK_ERR(sbx__isolation_run(&s, NULL, argv, &status, NULL, &err), SBX_E_NOTFOUND, &err,
              "workspace '/nonexistent/sbx-ws': no such file or directory");
    base_spec(&s);
    char *seven[] = {"/bin/sh", "-c", "exit 7", NULL};
    CHECK_OK(sbx__isolation_run(&s, NULL, seven, &status, NULL, &err), &err);
    if (!CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 7))
        printf("#   wait status %d\n", status);
}

/* The two roles of enter: the inner process waits to be killed, the outer one looks at the
 * sandbox's network namespace and ends the sandbox by killing the middle process. */
static void test_enter_roles(void)
{
    struct sbx__isolation_spec s;
    struct sbx__isolation *iso = NULL;
    struct sbx_error err = SBX_ERROR_INIT;
    enum sbx__isolation_role role = 0;
    base_spec(&s);
    CHECK_OK(sbx__isolation_new(&s, &iso, &err), &err);
    if (!iso)
        return;
    int fd = -1;
    CHECK_ERR(sbx__isolation_netns_fd(iso, &fd, &err), SBX_E_INVAL, &err, "not entered");
    int host_dir = open(ws, O_PATH | O_DIRECTORY | O_CLOEXEC);
    int done[2] = {-1, -1};
    CHECK(pipe2(done, O_CLOEXEC) == 0);
    fflush(stdout);
    int rc = sbx__isolation_enter(iso, &role, &err);
    if (rc == 0 && role == SBX__ISOLATION_INNER) {
        /* PID 1 of the sandbox, in the new root. It reports 'k' or the failed check's letter
         * through the pipe, then waits to be killed. */
        char res = 'k';
        struct sbx__run_as ra;
        if (getpid() != 1 || access("/workspace", W_OK) != 0 || access("/sys", F_OK) == 0)
            res = 'a';
        else if (unshare(CLONE_NEWNS) == 0 || errno != EPERM ||
                 mount("none", "/tmp", "tmpfs", 0, NULL) == 0 || errno != EPERM)
            res = 'm'; /* PID 1 keeps its capabilities, but its filter refuses these */
        else if (!prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) || prctl(PR_GET_DUMPABLE, 0, 0, 0, 0))
            res = 'n';
        else if (sbx__isolation_user(iso, NULL, &ra, &err) < 0)
            res = 'b';
        else {
            /* A command whose cwd is the pre-pivot descriptor of the workspace is refused. The
             * child answers through a pipe: under valgrind its exit status is valgrind's. */
            int p2[2];
            if (pipe2(p2, O_CLOEXEC) < 0)
                _exit(9);
            pid_t c = fork();
            if (c == 0) {
                char ok = 'x';
                if (fchdir(host_dir) == 0) {
                    int r = sbx__isolation_child(iso, &ra, &err);
                    ok = r == -SBX_E_SANDBOX && strstr(err.msg, "working directory") ? 'k' : 'r';
                }
                if (write(p2[1], &ok, 1) != 1)
                    _exit(1);
                _exit(0);
            }
            close(p2[1]);
            if (read(p2[0], &res, 1) != 1)
                res = 'c';
            close(p2[0]);
            waitpid(c, NULL, 0);
        }
        if (write(done[1], &res, 1) != 1)
            _exit(8);
        for (;;)
            pause();
    }
    CHECK_OK(rc, &err);
    CHECK_EQ_INT(role, SBX__ISOLATION_OUTER);
    close(host_dir);
    close(done[1]);
    char k = 0;
    ssize_t got = read(done[0], &k, 1);
    if (!CHECK(got == 1 && k == 'k')) /* PID 1 passed its checks */
        printf("#   read %zd, got '%c'\n", got, got == 1 ? k : '-');
    close(done[0]);
    CHECK_ERR(sbx__isolation_enter(iso, &role, &err), SBX_E_INVAL, &err, "already entered");
    CHECK_OK(sbx__isolation_netns_fd(iso, &fd, &err), &err);
    struct stat a, b;
    CHECK(fd >= 0 && fstat(fd, &a) == 0 && stat("/proc/self/ns/net", &b) == 0 &&
          a.st_ino != b.st_ino);
    if (fd >= 0)
        close(fd);
    pid_t middle = sbx__isolation_inner_pid(iso);
    CHECK(middle > 0);
    kill(middle, SIGKILL);
    int status = 0;
    CHECK_OK(sbx__isolation_outer_wait(iso, &status, &err), &err);
    if (!CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL))
        printf("#   wait status %d\n", status);
    CHECK_ERR(sbx__isolation_outer_wait(iso, &status, &err), SBX_E_INVAL, &err, "not entered");
    sbx__isolation_free(iso);
}

/* Can this kernel give us the namespaces at all? A child tries the same unshare calls. */
static int namespaces_available(char *reason, size_t n)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return 1;
    pid_t c = fork();
    if (c == 0) {
        const char *what = NULL;
        if (unshare(CLONE_NEWUSER) < 0)
            what = "user namespaces";
        else if (unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS) <
                 0)
            what = "mount, pid, network, ipc or uts namespaces";
        if (what)
            dprintf(p[1], "the kernel refuses %s: %s", what, strerror(errno));
        _exit(0);
    }
    close(p[1]);
    ssize_t got = read(p[0], reason, n - 1);
    close(p[0]);
    waitpid(c, NULL, 0);
    if (got <= 0)
        return 1;
    reason[got] = '\0';
    return 0;
}

int main(int argc, char **argv)
{
    /* Inside a sandbox the build tree is not there: no exit handlers (coverage counts would
     * fail to write and say so on stderr). */
    if (argc > 1 && strcmp(argv[1], "--probe") == 0) {
        int rc = run_probes();
        fflush(stdout);
        _exit(rc);
    }
    if (argc > 1 && strcmp(argv[1], "--probe-x32") == 0)
        return (int)syscall(0x40000000 | SYS_getpid) < 0 ? 2 : 3;
    if (argc > 1 && strcmp(argv[1], "--probe-i386") == 0) {
        /* The kernel's own answer, not a sanitizer's: ASan catches SIGSEGV to report it, which
         * would turn the fault of a kernel without IA32 emulation into its own exit status. The
         * raw system call puts the default action back past its interceptors. */
        struct {
            void *handler; /* NULL: SIG_DFL */
            unsigned long flags;
            void *restorer;
            uint64_t mask;
        } dfl = {0};
        syscall(SYS_rt_sigaction, SIGSEGV, &dfl, NULL, sizeof(dfl.mask));
        /* The 32-bit entry point: getpid is number 20 there. */
        long ret = 20;
        __asm__ volatile("int $0x80" : "+a"(ret) : : "memory");
        return ret > 0 ? 3 : 2;
    }

    TAP_START();
    TAP_RUN(test_plan_default);
    TAP_RUN(test_plan_options);
    TAP_RUN(test_plan_errors);
    TAP_RUN(test_names_and_cgroup_parse);
    TAP_RUN(test_env_and_users);
    TAP_RUN(test_idrange_overlaps);
    TAP_RUN_FORKED(test_idrange_slots);
    TAP_RUN(test_i386_verdicts);
    TAP_RUN(test_seccomp_chain);

    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) {
        self[n] = '\0';
        char *slash = strrchr(self, '/');
        if (slash)
            *slash = '\0';
        snprintf(probe_dir, sizeof(probe_dir), "%s", self);
    }
    make_workspace();
    /* Only a kernel without the namespaces skips the sandbox tests, with the reason. */
    char reason[SBX_ERROR_MSG_MAX];
    if (!namespaces_available(reason, sizeof(reason))) {
        tap__result(1, __FILE__, __LINE__, "sandbox tests # SKIP");
        printf("# skipped: %s\n", reason);
        remove_workspace();
        return TAP_DONE();
    }
    TAP_RUN_FORKED(test_identity_and_namespaces);
    TAP_RUN_FORKED(test_filesystem);
    TAP_RUN_FORKED(test_env_inside);
    TAP_RUN_FORKED(test_host_secrets);
    TAP_RUN_FORKED(test_seccomp_probes);
    TAP_RUN_FORKED(test_other_abis_killed);
    TAP_RUN_FORKED(test_memory_limit);
    TAP_RUN_FORKED(test_remove_stale_cgroups);
    TAP_RUN_FORKED(test_setup_errors);
    TAP_RUN_FORKED(test_grant_symlinks);
    TAP_RUN_FORKED(test_enter_roles);
    remove_workspace();
    return TAP_DONE();
}
