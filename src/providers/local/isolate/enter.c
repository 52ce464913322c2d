/* The isolation executor: entering the sandbox. The caller (the supervisor, becoming the host
 * side) forks the middle process, which makes the user namespace and, once the host side has
 * written its id maps and put it in the cgroups, the other namespaces; it forks PID 1, which
 * builds the root (root.c) and locks itself down. Process layout after sbx__isolation_enter
 * (host pids):
 *
 *   outer (the caller)   host namespaces; waits; later the proxy and port forwarders
 *    └─ middle           new user, mount, ipc, uts, cgroup (and net) ns; waits for the inner one
 *        └─ inner        PID 1 of the new pid ns, in the root built from nothing; serves
 *
 * The middle process exists because a new pid namespace applies to the children of the process
 * that unshares it, and because glibc's fork (unlike a raw clone) keeps the child's thread state
 * right. Each process has PR_SET_PDEATHSIG(SIGKILL) towards its parent, so killing the middle
 * (what sbx__isolation_outer_wait does when asked to stop) ends PID 1 and with it every process
 * of the sandbox. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "providers/local/isolate/executor.h"
#include "sandbox/host/priv.h"
#include "sbx/fs.h"
#include "sbx/log.h"

struct ns_step {
    int flag;
    const char *name;
};

static const struct ns_step ns_steps[] = {
        {CLONE_NEWNS, "mount namespace (CONFIG_NAMESPACES)"},
        {CLONE_NEWPID, "pid namespace (CONFIG_PID_NS)"},
        {CLONE_NEWIPC, "ipc namespace (CONFIG_IPC_NS)"},
        {CLONE_NEWUTS, "uts namespace (CONFIG_UTS_NS)"},
        {CLONE_NEWCGROUP, "cgroup namespace (CONFIG_CGROUPS)"},
        {CLONE_NEWNET, "network namespace (CONFIG_NET_NS)"},
};

/* 0 when the whole record was written (the outer process is still waiting for it). */
static int send_error(int fd, const struct sbx_error *e)
{
    const char *p = (const char *)e;
    size_t off = 0;
    while (off < sizeof(*e)) {
        ssize_t w = write(fd, p + off, sizeof(*e) - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        off += (size_t)w;
    }
    return 0;
}

ssize_t sbx__iso_read_full(int fd, void *buf, size_t len)
{
    size_t off = 0;
    while (off < len) {
        ssize_t r = read(fd, (char *)buf + off, len - off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        off += (size_t)r;
    }
    return (ssize_t)off;
}

static int write_proc(pid_t pid, const char *file, const char *text, struct sbx_error *err)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return sbx_error_errno(err, errno, "cannot open '%s'", path);
    int rc = 0;
    ssize_t w = write(fd, text, strlen(text));
    if (w < 0 || (size_t)w != strlen(text))
        rc = sbx_error_errno(err, w < 0 ? errno : EIO, "cannot write the user namespace %s", file);
    close(fd);
    return rc;
}

/* Id maps of the sandbox. Unprivileged: the default user is the caller (one id each).
 * Root with an idmapped workspace: inside 0 is host 0 (PID 1 only; commands never hold it) and
 * the users and groups are ids of the sandbox's own host range (first + sandbox id). Root
 * without: the default user is the caller, the others ids of the range. */
static void id_maps(const struct sbx__isolation *iso, char **uid_map, char **gid_map)
{
    const unsigned fu = SBX__ISOLATION_FIRST_UID, fg = SBX__ISOLATION_FIRST_GID;
    const unsigned base = iso->idr.first;
    size_t nu = iso->users.n, ng = iso->ngroups;
    if (!iso->privileged) {
        *uid_map = sbx_xasprintf("%u %u 1\n", fu, (unsigned)iso->host_uid);
        *gid_map = sbx_xasprintf("%u %u 1\n", fu, (unsigned)iso->host_gid);
        return;
    }
    char *groups = ng ? sbx_xasprintf("%u %u %zu\n", fg, base + fg, ng) : sbx_xstrdup("");
    if (iso->dedicated) {
        *uid_map = sbx_xasprintf("0 0 1\n%u %u %zu\n", fu, base + fu, nu);
        *gid_map = sbx_xasprintf("0 0 1\n%u %u %zu\n%s", fu, base + fu, nu, groups);
    } else {
        char *rest = nu > 1 ? sbx_xasprintf("%u %u %zu\n", fu + 1, base + fu + 1, nu - 1)
                            : sbx_xstrdup("");
        *uid_map = sbx_xasprintf("%u %u 1\n%s", fu, (unsigned)iso->host_uid, rest);
        *gid_map = sbx_xasprintf("%u %u 1\n%s%s", fu, (unsigned)iso->host_gid, rest, groups);
        free(rest);
    }
    free(groups);
}

static int write_maps(const struct sbx__isolation *iso, pid_t pid, struct sbx_error *err)
{
    char *uid_map, *gid_map;
    int rc = 0;
    id_maps(iso, &uid_map, &gid_map);
    if (!iso->privileged)
        rc = write_proc(pid, "setgroups", "deny", err);
    if (rc == 0)
        rc = write_proc(pid, "uid_map", uid_map, err);
    if (rc == 0)
        rc = write_proc(pid, "gid_map", gid_map, err);
    free(uid_map);
    free(gid_map);
    return rc;
}

/* A user namespace whose maps turn the workspace owner's on-disk ids into the default user's
 * host id, and the other users' and groups' on-disk ids (100000 + sandbox id, the same in
 * every sandbox) into their ids in this sandbox's range: the idmapping of the workspace mount.
 * *out: an fd on it, caller owns. */
static int idmap_userns(const struct sbx__isolation *iso, int *out, struct sbx_error *err)
{
    const unsigned fu = SBX__ISOLATION_FIRST_UID, fg = SBX__ISOLATION_FIRST_GID;
    const unsigned disk = SBX__ISOLATION_HOST_ID_BASE, base = iso->idr.first;
    size_t nu = iso->users.n, ng = iso->ngroups;
    int sync[2] = {-1, -1}, rc = 0, fd = -1;
    char c, path[64];
    struct stat ws;
    if (stat(iso->workspace, &ws) < 0)
        return sbx_error_errno(err, errno, "workspace '%s'", iso->workspace);
    if (pipe2(sync, O_CLOEXEC) < 0)
        return sbx_error_errno(err, errno, "cannot create a pipe");
    pid_t parent = getpid(), pid = fork();
    if (pid < 0) {
        rc = sbx_error_errno(err, errno, "cannot fork");
        goto out;
    }
    if (pid == 0) {
        /* It holds copies of the parent's descriptors (an id range's lock among them): it must
         * not outlive a parent killed before it killed it. */
        close(sync[0]);
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent ||
            sbx__priv_unshare(CLONE_NEWUSER) < 0 || write(sync[1], "u", 1) != 1)
            _exit(1);
        pause(); /* killed by the parent once it holds the namespace */
        _exit(0);
    }
    close(sync[1]);
    sync[1] = -1;
    if (sbx__iso_read_full(sync[0], &c, 1) != 1) {
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "cannot create the workspace id mapping");
        goto out;
    }
    char *rest = nu > 1 ? sbx_xasprintf("%u %u %zu\n", disk + fu + 1, base + fu + 1, nu - 1)
                        : sbx_xstrdup("");
    char *groups = ng ? sbx_xasprintf("%u %u %zu\n", disk + fg, base + fg, ng) : sbx_xstrdup("");
    char *uid_map = sbx_xasprintf("%u %u 1\n%s", (unsigned)ws.st_uid, base + fu, rest);
    char *gid_map = sbx_xasprintf("%u %u 1\n%s%s", (unsigned)ws.st_gid, base + fu, rest, groups);
    rc = write_proc(pid, "uid_map", uid_map, err);
    if (rc == 0)
        rc = write_proc(pid, "gid_map", gid_map, err);
    free(rest);
    free(groups);
    free(uid_map);
    free(gid_map);
    if (rc == 0) {
        snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)pid);
        if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
            rc = sbx_error_errno(err, errno, "cannot open '%s'", path);
    }
out:
    if (pid > 0) {
        kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
    }
    if (sync[0] >= 0)
        close(sync[0]);
    if (sync[1] >= 0)
        close(sync[1]);
    if (rc == 0)
        *out = fd;
    return rc;
}

/* Root runner: a detached, idmapped copy of the workspace mount, attached inside by PID 1.
 * Commands then run as dedicated host ids while the workspace keeps its on-disk owner. */
static int idmapped_workspace(struct sbx__isolation *iso, struct sbx_error *err)
{
    int ns = -1, tree = -1, rc;
    if ((rc = idmap_userns(iso, &ns, err)) < 0)
        return rc;
    tree = sbx__priv_clone_tree(iso->workspace);
    if (tree < 0) {
        rc = sbx_error_errno(err, errno, "cannot clone the mount of workspace '%s'",
                             iso->workspace);
        goto out;
    }
    struct mount_attr a = {.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                           .userns_fd = (uint64_t)ns};
    if (sbx__priv_setattr(tree, "", AT_EMPTY_PATH, &a, sizeof(a)) < 0) {
        rc = sbx_error_errno(err, errno,
                             "cannot make an idmapped mount of workspace '%s' (kernel feature "
                             "idmapped mounts, Linux 5.12, and a filesystem that has them)",
                             iso->workspace);
        goto out;
    }
    iso->ws_tree = tree;
    tree = -1;
out:
    if (tree >= 0)
        close(tree);
    close(ns);
    return rc;
}

/* The harness's environment (API keys, tokens) must not survive in the sandbox's PID 1:
 * /proc/1/environ shows the original strings, so wipe them in place, then empty environ. */
static void scrub_environ(void)
{
    for (char **e = environ; e && *e; e++)
        memset(*e, 0, strlen(*e));
    clearenv();
}

/* Root runner: leave host root for the first id of the sandbox's range, so that the user
 * namespace made next is owned by it. The kernel charges the per-user counts of everything in a
 * user namespace (inotify instances, processes, namespaces) to the namespace's owner in the
 * parent, not to the mapped ids: the first id of a range is held by no process (sandbox id 0 is
 * host 0), so no two sandboxes share those counts. A change of identity clears the
 * parent-death signal: set again (and the parent checked) after each. */
static int become_owner(const struct sbx__isolation *iso, pid_t outer, struct sbx_error *e)
{
    uid_t owner = (uid_t)iso->idr.first;
    if (setgroups(0, NULL) < 0 || setresgid(owner, owner, owner) < 0 ||
        setresuid(owner, owner, owner) < 0)
        return sbx_error_errno(e, errno, "cannot switch to the owner id of the sandbox");
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != outer)
        _exit(1);
    return 0;
}

/* Back to root for building the root: sandbox id 0, or the default user's id in the fallback
 * without an idmapped workspace, where host root is the default user. */
static int become_builder(const struct sbx__isolation *iso, pid_t outer, struct sbx_error *e)
{
    uid_t back = iso->dedicated ? 0 : SBX__ISOLATION_FIRST_UID;
    if (setresgid(back, back, back) < 0 || setresuid(back, back, back) < 0)
        return sbx_error_errno(e, errno, "cannot become root of the sandbox's user namespace");
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != outer)
        _exit(1);
    return 0;
}

/* The namespaces after the user namespace: mount, pid, ipc, uts, cgroup, and net unless the
 * sandbox shares the host's network. */
static int unshare_rest(const struct sbx__isolation *iso, struct sbx_error *e)
{
    for (size_t i = 0; i < SBX_ARRAY_LEN(ns_steps); i++) {
        if (ns_steps[i].flag == CLONE_NEWNET && iso->net != SBX__NET_NONE)
            continue;
        if (sbx__priv_unshare(ns_steps[i].flag) < 0)
            return sbx_error_errno(e, errno, "cannot create a %s", ns_steps[i].name);
        /* unshare moved our working directory into the new namespace's copy of the host tree.
         * pivot_root moves it to the new root only if it is the old root itself: anywhere else
         * it would pin the detached host tree, and with it every mount copied from the host
         * (other sandboxes' workspace disk images: their file systems could not be freed
         * until this sandbox ends). */
        if (ns_steps[i].flag == CLONE_NEWNS && chdir("/") < 0)
            return sbx_error_errno(e, errno, "cannot chdir to '/'");
    }
    return 0;
}

/* PID 1 of the new pid namespace (its parent is outside, so getppid() is 0): the root built,
 * then locked down for good — not dumpable, an empty bounding set, no_new_privs, the init
 * seccomp filter, the harness's environment wiped — and the complete setup reported on res_fd.
 * -1 with *e on a failure. */
static int inner_setup(struct sbx__isolation *iso, int res_fd, struct sbx_error *e)
{
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
        _exit(1);
    if (sbx__iso_build_root(iso, e) < 0)
        return -1;
    if (prctl(PR_SET_DUMPABLE, 0) < 0)
        return sbx_error_errno(e, errno, "cannot make the sandbox init non-dumpable");
    sbx_fd_close(&iso->ws_tree);
    sbx__idrange_drop(&iso->idr); /* the outer process holds the range */
    /* Once here rather than in every command child: PID 1 never executes a program, so its
     * bounding set limits nothing it does, and each command inherits the empty set. */
    if (sbx__iso_drop_bounding_set(iso, e) < 0)
        return -1;
    iso->bset_empty = 1;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return sbx_error_errno(e, errno, "cannot set no_new_privs on the sandbox init");
    if (sbx__seccomp_load(&iso->bpf_init, e) < 0)
        return -1;
    scrub_environ();
    /* Code SBX_OK: the setup is complete. If nobody reads it, the outer process gave up on
     * this sandbox (perhaps before PR_SET_PDEATHSIG took effect): do not serve. */
    if (send_error(res_fd, e) < 0)
        _exit(1);
    close(res_fd);
    return 0;
}

/* The start of this process's heap (the kernel's start_brk, field 47 of /proc/self/stat), or 0.
 * No allocation: a buffer on the stack, read once. */
static uintptr_t heap_start(void)
{
    char buf[1024];
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the command name may hold anything */
    if (!p)
        return 0;
    /* Field 3 follows ") "; start_brk is field 47. */
    for (int field = 2; field < 47 && p; field++)
        p = strchr(p + 1, ' ');
    if (!p)
        return 0;
    return (uintptr_t)strtoull(p + 1, NULL, 10);
}

/* Give the whole heap back: nothing of it is used again. Inherited from the outer process at
 * fork, what this process wrote there (its own copies) is private memory it would keep for the
 * sandbox's life. Only for a process that calls nothing that allocates from here on. */
static void drop_heap(void)
{
    uintptr_t start = heap_start(), end = (uintptr_t)sbrk(0);
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0 || start == 0 || end == (uintptr_t)-1 || end <= start)
        return;
    start = (start + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
    if (end > start)
        (void)madvise((void *)start, end - start, MADV_DONTNEED);
}

/* The middle process once PID 1 exists: it only waits. The sandbox ends when the inner process
 * does, or when this one is killed. It keeps none of the supervisor's descriptors, so a pipe or
 * socket the caller watches reports the end of PID 1, not of this process. */
static SBX_NORETURN void middle_wait(pid_t inner, int res_fd)
{
    if (syscall(SYS_close_range, 3, ~0U, 0) < 0)
        close(res_fd);
    /* One waiting process per sandbox: from here it only waits and exits. */
    drop_heap();
    for (;;) {
        int st;
        pid_t w = waitpid(inner, &st, 0);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            _exit(1);
        _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
    }
}

/* The middle process after fork: new user namespace, then (once the outer process wrote the id
 * maps) the other namespaces, then fork the inner process and wait for it. Never returns
 * except in the inner process, with 0 after a complete setup. */
static int middle_main(struct sbx__isolation *iso, pid_t outer, int go_fd, int up_fd, int res_fd)
{
    struct sbx_error e = SBX_ERROR_INIT;
    char c = 0;
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != outer)
        _exit(1);
    if (iso->privileged && iso->idr.first && become_owner(iso, outer, &e) < 0)
        goto fail;
    if (sbx__priv_unshare(CLONE_NEWUSER) < 0) {
        sbx_error_errno(&e, errno,
                        "cannot create a user namespace (kernel feature CONFIG_USER_NS; check "
                        "user.max_user_namespaces, kernel.unprivileged_userns_clone and "
                        "kernel.apparmor_restrict_unprivileged_userns)");
        goto fail;
    }
    if (write(up_fd, "u", 1) != 1 || sbx__iso_read_full(go_fd, &c, 1) != 1 || c != 'g')
        _exit(1);
    close(up_fd);
    close(go_fd);
    if ((iso->privileged && iso->idr.first && become_builder(iso, outer, &e) < 0) ||
        unshare_rest(iso, &e) < 0)
        goto fail;
    pid_t inner = fork();
    if (inner < 0) {
        sbx_error_errno(&e, errno, "cannot fork the sandbox init process");
        goto fail;
    }
    if (inner == 0) {
        if (inner_setup(iso, res_fd, &e) < 0)
            goto fail;
        return 0;
    }
    middle_wait(inner, res_fd);
fail:
    send_error(res_fd, &e);
    _exit(1);
}

static unsigned required_mask(const struct sbx__isolation_limits *l)
{
    unsigned m = 0;
    if (l->memory_bytes && l->memory_bytes != SBX__LIMIT_NONE)
        m |= 1u << SBX__CG_MEMORY;
    if (l->pids && l->pids != SBX__LIMIT_NONE)
        m |= 1u << SBX__CG_PIDS;
    if (l->cpu_millis && l->cpu_millis != SBX__LIMIT_NONE)
        m |= 1u << SBX__CG_CPU;
    return m;
}

/* What the host side holds before the namespaces exist: a root runner's host id range (never
 * falling back to ids other sandboxes share) and idmapped workspace, and the cgroups. */
static int prepare_host(struct sbx__isolation *iso, struct sbx_error *err)
{
    int rc;
    if (iso->privileged && iso->idr.fd < 0 &&
        (rc = sbx__idrange_acquire(iso->idrange_dir, iso->id, &iso->idr, err)) < 0)
        return rc;
    if (iso->privileged && iso->ws_tree < 0) {
        struct sbx_error e = SBX_ERROR_INIT;
        iso->dedicated = idmapped_workspace(iso, &e) == 0;
        if (!iso->dedicated && !iso->allow_host_uid) {
            sbx__idrange_release(&iso->idr);
            rc = sbx_error_copy(err, &e);
            sbx_error_prefix(err, "sandbox commands would run as host uid 0, whose files the "
                                  "sandbox could then change; refused unless allowed by name "
                                  "(--allow-host-uid)");
            return rc;
        }
        if (!iso->dedicated)
            sbx_log(SBX_LOG_WARN, "sandbox commands run as the caller's host uid: %s", e.msg);
    }
    if (!iso->cgroup_name)
        return 0;
    struct sbx__isolation_limits l = iso->limits;
    uint64_t pids = l.pids ? l.pids : SBX__ISOLATION_DEFAULT_PIDS;
    if (!l.memory_bytes)
        l.memory_bytes = 2048 * SBX__ISO_MIB;
    /* The commands get pids (RLIMIT_NPROC, counted per uid in the sandbox's user namespace);
     * the cgroup allows the supervisor and the exec reapers a headroom above, so a fork bomb
     * at its limit cannot keep the next exec from starting. */
    if (pids != SBX__LIMIT_NONE)
        l.pids = pids + SBX__ISOLATION_PIDS_HEADROOM;
    if (!l.cpu_millis)
        l.cpu_millis = sbx__isolation_default_cpu_millis();
    if ((rc = sbx__cgroup_create(iso->cgroup_name, &l, required_mask(&iso->limits), &iso->cg,
                                 err)) < 0) {
        sbx__idrange_release(&iso->idr);
        return rc;
    }
    if (iso->cg.pids_limit) {
        iso->cg.pids_limit = pids;
        iso->rl_nproc = sbx__iso_capped(RLIMIT_NPROC, pids, 0);
    }
    return 0;
}

/* The host side while the middle process sets up: once it has its user namespace (up), the
 * cgroups and the id maps, then go (closed after, so a middle process still waiting for it
 * ends); then its report (res) of a complete setup. */
static int await_setup(struct sbx__isolation *iso, pid_t middle, int *go_w, int up_r, int res_r,
                       struct sbx_error *err)
{
    char c;
    int rc;
    if (sbx__iso_read_full(up_r, &c, 1) == 1) {
        if ((rc = sbx__cgroup_attach(&iso->cg, middle, err)) < 0 ||
            (rc = write_maps(iso, middle, err)) < 0)
            return rc;
        if (write(*go_w, "g", 1) != 1)
            return sbx_error_errno(err, errno, "cannot start the sandbox process");
    }
    sbx_fd_close(go_w);
    struct sbx_error got = SBX_ERROR_INIT;
    if (sbx__iso_read_full(res_r, &got, sizeof(got)) != (ssize_t)sizeof(got))
        return sbx_error_set(err, SBX_E_SANDBOX, 0, "the sandbox process ended during set-up");
    if (got.code != SBX_OK) {
        got.msg[sizeof(got.msg) - 1] = '\0';
        return sbx_error_copy(err, &got);
    }
    return 0;
}

int sbx__isolation_enter(struct sbx__isolation *iso, enum sbx__isolation_role *role,
                         struct sbx_error *err)
{
    int go[2] = {-1, -1}, up[2] = {-1, -1}, res[2] = {-1, -1};
    pid_t outer = getpid(), middle = -1;
    int rc;

    if (iso->middle > 0)
        return sbx_error_set(err, SBX_E_INVAL, 0, "the sandbox isolation was already entered");
    if ((rc = prepare_host(iso, err)) < 0)
        return rc;
    if (pipe2(go, O_CLOEXEC) < 0 || pipe2(up, O_CLOEXEC) < 0 || pipe2(res, O_CLOEXEC) < 0) {
        rc = sbx_error_errno(err, errno, "cannot create pipes");
        goto fail;
    }
    middle = fork();
    if (middle < 0) {
        rc = sbx_error_errno(err, errno, "cannot fork the sandbox process");
        goto fail;
    }
    if (middle == 0) {
        close(go[1]);
        close(up[0]);
        close(res[0]);
        middle_main(iso, outer, go[0], up[1], res[1]);
        /* Only the inner process gets here. */
        iso->cg.owner = 0; /* the outer process removes the cgroups */
        iso->middle = -1;
        *role = SBX__ISOLATION_INNER;
        return 0;
    }
    iso->middle = middle;
    sbx_fd_close(&go[0]);
    sbx_fd_close(&up[1]);
    sbx_fd_close(&res[1]);
    if ((rc = await_setup(iso, middle, &go[1], up[0], res[0], err)) < 0)
        goto fail;
    sbx_fd_close(&up[0]);
    sbx_fd_close(&res[0]);
    sbx_fd_close(&iso->ws_tree); /* attached inside now */
    *role = SBX__ISOLATION_OUTER;
    return 0;
fail:
    if (middle > 0) {
        kill(middle, SIGKILL);
        while (waitpid(middle, NULL, 0) < 0 && errno == EINTR)
            ;
    }
    iso->middle = -1;
    sbx_fd_close(&iso->ws_tree);
    int *fds[] = {&go[0], &go[1], &up[0], &up[1], &res[0], &res[1]};
    for (size_t i = 0; i < SBX_ARRAY_LEN(fds); i++)
        sbx_fd_close(fds[i]);
    sbx__cgroup_destroy(&iso->cg);
    sbx__idrange_release(&iso->idr);
    return rc;
}

int sbx__isolation_outer_wait(struct sbx__isolation *iso, int *status, struct sbx_error *err)
{
    if (iso->middle <= 0)
        return sbx_error_set(err, SBX_E_INVAL, 0, "the sandbox isolation was not entered");
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGCHLD);
    pthread_sigmask(SIG_BLOCK, &set, &old);
    int st = 0, rc = 0;
    for (;;) {
        pid_t w = waitpid(iso->middle, &st, WNOHANG);
        if (w == iso->middle)
            break;
        if (w < 0 && errno != EINTR) {
            rc = sbx_error_errno(err, errno, "cannot wait for the sandbox process");
            break;
        }
        siginfo_t si;
        if (sigwaitinfo(&set, &si) > 0 && si.si_signo != SIGCHLD) {
            if (!iso->stop_signal)
                iso->stop_signal = si.si_signo;
            kill(iso->middle, SIGKILL);
        }
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    iso->middle = -1;
    sbx__cgroup_destroy(&iso->cg);
    /* The processes are gone with the cgroups (or with the pid namespace): the ids are free. */
    sbx__idrange_release(&iso->idr);
    if (rc == 0)
        *status = st;
    return rc;
}
