/* sbx local provider: the isolation executor (executor.h lists its files). It applies the plan
 * (isolate-plan.c) and decides every privileged step of a local sandbox: namespaces and id maps
 * (enter.c), the new root and the pivot into it (root.c), and here the isolation object and the
 * per-command credential, capability, rlimit and seccomp setup (with the seccomp and cgroup
 * helpers it calls). The system calls that change a mount or a namespace are not made in these
 * files but through src/sandbox/host/priv.c, the one file that makes them for all of sbx. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <linux/capability.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "providers/local/isolate/executor.h"
#include "sbx/fs.h"
#include "sbx/log.h"

#ifndef SECBIT_NOROOT
#    define SECBIT_NOROOT                      (1 << 0)
#    define SECBIT_NOROOT_LOCKED               (1 << 1)
#    define SECBIT_NO_SETUID_FIXUP             (1 << 2)
#    define SECBIT_NO_SETUID_FIXUP_LOCKED      (1 << 3)
#    define SECBIT_KEEP_CAPS_LOCKED            (1 << 5)
#    define SECBIT_NO_CAP_AMBIENT_RAISE        (1 << 6)
#    define SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED (1 << 7)
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#    define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

/* ---------------------------------------------------------------- creation ---- */

static int check_env_entry(const char *e, struct sbx_error *err)
{
    const char *eq = strchr(e, '=');
    if (!eq || eq == e)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "environment entry '%.64s' must have the form NAME=VALUE", e);
    for (const char *p = e; p < eq; p++) {
        char c = *p;
        int ok = c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                 (p > e && c >= '0' && c <= '9');
        if (!ok)
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "environment name '%.*s' must match [A-Za-z_][A-Za-z0-9_]*",
                                 (int)(eq - e), e);
    }
    return 0;
}

struct rlimit sbx__iso_capped(int resource, uint64_t want, uint64_t dflt)
{
    struct rlimit cur = {RLIM_INFINITY, RLIM_INFINITY};
    getrlimit(resource, &cur);
    rlim_t v = want == SBX__LIMIT_NONE ? RLIM_INFINITY : (rlim_t)(want ? want : dflt);
    /* Without CAP_SYS_RESOURCE a hard limit cannot be raised: take the lower one. */
    if (cur.rlim_max != RLIM_INFINITY && (v == RLIM_INFINITY || v > cur.rlim_max))
        v = cur.rlim_max;
    struct rlimit r = {v, v};
    return r;
}

uint64_t sbx__isolation_default_cpu_millis(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    uint64_t half = n > 0 ? (uint64_t)n * 500 : 1000;
    return half < 1000 ? 1000 : half;
}

/* Root of the initial user namespace (the identity map over all ids) can write any id map;
 * root of a container's user namespace cannot, and is treated like an unprivileged caller. */
static int initial_userns(void)
{
    struct sbx_buf b;
    sbx_buf_init(&b, 4096);
    int yes = sbx_fs_read_path("/proc/self/uid_map", 4096, &b, NULL) == 0;
    if (yes) {
        unsigned long a = 1, c = 1, n = 0;
        yes = sscanf(b.data, "%lu %lu %lu", &a, &c, &n) == 3 && a == 0 && c == 0 &&
              n == 4294967295ul;
    }
    sbx_buf_release(&b);
    return yes;
}

static int read_cap_last(void)
{
    int fd = open("/proc/sys/kernel/cap_last_cap", O_RDONLY | O_CLOEXEC);
    char b[16] = {0};
    int v = 63;
    if (fd >= 0) {
        if (read(fd, b, sizeof(b) - 1) > 0)
            v = (int)strtol(b, NULL, 10);
        close(fd);
    }
    return v > 0 && v < 64 ? v : 63;
}

int sbx__iso_drop_bounding_set(const struct sbx__isolation *iso, struct sbx_error *err)
{
    for (int cap = 0; cap <= iso->cap_last; cap++)
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
            return sbx_error_errno(err, errno, "cannot drop capability %d from the bounding set",
                                   cap);
    return 0;
}

/* realpath() of the workspace and of every grant source into *out (a copy of spec); a missing
 * one is SBX_E_NOTFOUND. Relative paths are left for the plan to refuse. */
static int resolve_paths(const struct sbx__isolation_spec *spec, struct sbx__isolation_spec *out,
                         struct sbx__isolation_grant *grants, char **real_ws, char **real_src,
                         struct sbx_error *err)
{
    if (spec->ngrants > SBX__ISOLATION_MAX_GRANTS)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "%zu path grants exceed the limit of %d",
                             spec->ngrants, SBX__ISOLATION_MAX_GRANTS);
    if (spec->workspace && spec->workspace[0] == '/') {
        if (!(*real_ws = realpath(spec->workspace, NULL)))
            return sbx_error_errno(err, errno, "workspace '%s'", spec->workspace);
        out->workspace = *real_ws;
    }
    for (size_t i = 0; i < spec->ngrants; i++) {
        grants[i] = spec->grants[i];
        if (!grants[i].dst)
            grants[i].dst = grants[i].src; /* shown where it was asked for, not where it leads */
        if (grants[i].src && grants[i].src[0] == '/') {
            if (!(real_src[i] = realpath(grants[i].src, NULL)))
                return sbx_error_errno(err, errno, "grant source '%s'", grants[i].src);
            grants[i].src = real_src[i];
            char sock[PATH_MAX];
            if (!grants[i].dangerous && sbx__grant_find_socket(real_src[i], sock, sizeof(sock)))
                return sbx_error_set(err, SBX_E_PERM, 0,
                                     "grant source '%s' holds the unix socket '%s%s%s', through "
                                     "which the sandbox could reach a host service; refused "
                                     "unless allowed as dangerous (--allow-dangerous-grant %s)",
                                     spec->grants[i].src, real_src[i], sock[0] ? "/" : "", sock,
                                     spec->grants[i].src);
        }
    }
    out->grants = grants;
    return 0;
}

int sbx__isolation_new(const struct sbx__isolation_spec *spec, struct sbx__isolation **out,
                       struct sbx_error *err)
{
    struct sbx__isolation *iso = sbx_xcalloc(1, sizeof(*iso));
    int rc;
    sbx_strv_init(&iso->users);
    sbx_strv_init(&iso->env);
    sbx__cgroup_init(&iso->cg);
    iso->middle = -1;
    iso->ws_tree = -1;
    iso->idr.fd = iso->idr.dir_fd = -1;
    /* The plan's rules apply to what the paths are, not to how they are spelled: a symlink to
     * /root or to / must meet the same refusal. */
    struct sbx__isolation_spec resolved = *spec;
    struct sbx__isolation_grant grants[SBX__ISOLATION_MAX_GRANTS];
    char *real_ws = NULL, *real_src[SBX__ISOLATION_MAX_GRANTS] = {0};
    if ((rc = resolve_paths(spec, &resolved, grants, &real_ws, real_src, err)) == 0)
        rc = sbx__isolation_plan_build(&resolved, &iso->plan, err);
    if (rc == 0)
        iso->workspace = sbx_xstrdup(resolved.workspace);
    free(real_ws);
    for (size_t i = 0; i < SBX__ISOLATION_MAX_GRANTS; i++)
        free(real_src[i]);
    if (rc < 0)
        goto fail;
    iso->root = sbx_xstrdup(spec->root ? spec->root : SBX__ISOLATION_DEFAULT_ROOT);
    iso->hostname = sbx_xstrdup(spec->hostname ? spec->hostname : SBX__ISOLATION_DEFAULT_HOSTNAME);
    iso->net = spec->net;
    iso->limits = spec->limits;
    iso->allow_host_uid = spec->allow_host_uid;
    iso->cgroup_name = spec->cgroup_name ? sbx_xstrdup(spec->cgroup_name) : NULL;
    iso->id = sbx_xstrdup(spec->id ? spec->id : "");
    iso->idrange_dir = spec->idrange_dir ? sbx_xstrdup(spec->idrange_dir) : NULL;
    if (spec->nusers == 0)
        sbx_strv_push(&iso->users, SBX__ISOLATION_DEFAULT_USER);
    for (size_t i = 0; i < spec->nusers; i++)
        sbx_strv_push(&iso->users, spec->users[i].name);
    iso->ngroups = spec->ngroups;
    for (size_t g = 0; g < spec->ngroups; g++)
        for (size_t m = 0; spec->groups[g].members && spec->groups[g].members[m]; m++) {
            long u = sbx_strv_find(&iso->users, spec->groups[g].members[m]);
            if (u >= 0)
                iso->user_groups[u][iso->user_ngroups[u]++] = SBX__ISOLATION_FIRST_GID + (gid_t)g;
        }
    size_t env_bytes = 0;
    for (size_t i = 0; spec->env && spec->env[i]; i++) {
        if ((rc = check_env_entry(spec->env[i], err)) < 0)
            goto fail;
        env_bytes += strlen(spec->env[i]) + 1;
        if (i >= SBX__ISOLATION_MAX_ENV || env_bytes > SBX__ISOLATION_MAX_ENV_BYTES) {
            rc = sbx_error_set(err, SBX_E_TOOBIG, 0,
                               "manifest environment exceeds %d entries or %d bytes",
                               SBX__ISOLATION_MAX_ENV, SBX__ISOLATION_MAX_ENV_BYTES);
            goto fail;
        }
        const char *eq = strchr(spec->env[i], '=');
        char *name = sbx_xstrndup(spec->env[i], (size_t)(eq - spec->env[i]));
        sbx_strv_setenv(&iso->env, name, eq + 1);
        free(name);
    }
    if ((rc = sbx__seccomp_build(&iso->bpf_cmd, err)) < 0 ||
        (rc = sbx__seccomp_build_init(&iso->bpf_init, err)) < 0)
        goto fail;
    iso->rl_fsize =
            sbx__iso_capped(RLIMIT_FSIZE, spec->limits.fsize_bytes, 16 * 1024 * SBX__ISO_MIB);
    iso->rl_nofile = sbx__iso_capped(RLIMIT_NOFILE, spec->limits.nofile, 4096);
    iso->rl_nproc = sbx__iso_capped(RLIMIT_NPROC, SBX__ISOLATION_NPROC_FALLBACK, 0);
    iso->cap_last = read_cap_last();
    iso->host_uid = geteuid();
    iso->host_gid = getegid();
    iso->privileged = iso->host_uid == 0 && initial_userns();
    *out = iso;
    return 0;
fail:
    sbx__isolation_free(iso);
    return rc;
}

void sbx__isolation_free(struct sbx__isolation *iso)
{
    if (!iso)
        return;
    sbx__isolation_plan_release(&iso->plan);
    free(iso->root);
    free(iso->workspace);
    free(iso->hostname);
    free(iso->cgroup_name);
    free(iso->id);
    free(iso->idrange_dir);
    sbx__idrange_release(&iso->idr);
    sbx_strv_release(&iso->users);
    sbx_strv_release(&iso->env);
    sbx__bpf_release(&iso->bpf_cmd);
    sbx__bpf_release(&iso->bpf_init);
    sbx__cgroup_destroy(&iso->cg);
    if (iso->ws_tree >= 0)
        close(iso->ws_tree);
    free(iso);
}

int sbx__isolation_host_ids(const struct sbx__isolation *iso, uint32_t *first, uint32_t *count)
{
    if (!iso->privileged || iso->idr.first == 0)
        return 0;
    *first = iso->idr.first;
    *count = SBX__IDRANGE_SIZE;
    return 1;
}

const struct sbx__cgroup *sbx__isolation_cgroup(const struct sbx__isolation *iso)
{
    return &iso->cg;
}

pid_t sbx__isolation_inner_pid(const struct sbx__isolation *iso)
{
    return iso->middle;
}

int sbx__isolation_stop_signal(const struct sbx__isolation *iso)
{
    return iso->stop_signal;
}

int sbx__isolation_netns_fd(const struct sbx__isolation *iso, int *out, struct sbx_error *err)
{
    if (iso->middle <= 0)
        return sbx_error_set(err, SBX_E_INVAL, 0, "the sandbox isolation was not entered");
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)iso->middle);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return sbx_error_errno(err, errno, "cannot open the sandbox network namespace");
    *out = fd;
    return 0;
}

/* ------------------------------------------------------------------- users ---- */

int sbx__isolation_user(const struct sbx__isolation *iso, const char *name, struct sbx__run_as *out,
                        struct sbx_error *err)
{
    long i = name ? sbx_strv_find(&iso->users, name) : 0;
    if (i < 0)
        return sbx_error_set(err, SBX_E_NOTFOUND, 0, "user '%s' is not declared in the manifest",
                             name);
    if (i > 0 && !iso->privileged)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "user '%s' cannot run commands: a sandbox created without root "
                             "privileges maps only its default user '%s'",
                             name, iso->users.v[0]);
    struct sbx__run_as r = {0};
    r.uid = SBX__ISOLATION_FIRST_UID + (uid_t)i;
    r.gid = SBX__ISOLATION_FIRST_UID + (gid_t)i;
    r.name = iso->users.v[i];
    r.home = iso->root;
    if (iso->privileged) {
        r.ngroups = iso->user_ngroups[i];
        memcpy(r.groups, iso->user_groups[i], r.ngroups * sizeof(gid_t));
    }
    *out = r;
    return 0;
}

int sbx__isolation_env(const struct sbx__isolation *iso, const struct sbx__run_as *user,
                       const char *term, const char *const *extra, struct sbx_strv *out,
                       struct sbx_error *err)
{
    struct sbx_strv env;
    sbx_strv_init(&env);
    int rc = 0;
    for (size_t i = 0; extra && extra[i]; i++)
        if ((rc = check_env_entry(extra[i], err)) < 0)
            goto out;
    sbx_strv_setenv(&env, "PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
    sbx_strv_setenv(&env, "HOME", user->home);
    sbx_strv_setenv(&env, "USER", user->name);
    sbx_strv_setenv(&env, "LOGNAME", user->name);
    sbx_strv_setenv(&env, "SHELL", "/bin/sh");
    sbx_strv_setenv(&env, "LANG", "C.UTF-8");
    sbx_strv_setenv(&env, "TERM", term ? term : "dumb");
    sbx_strv_setenv(&env, "TMPDIR", "/tmp");
    for (size_t s = 0; s < 2; s++) {
        const char *const *list = s == 0 ? (const char *const *)iso->env.v : extra;
        for (size_t i = 0; list && list[i]; i++) {
            const char *eq = strchr(list[i], '=');
            char *name = sbx_xstrndup(list[i], (size_t)(eq - list[i]));
            sbx_strv_setenv(&env, name, eq + 1);
            free(name);
        }
    }
    for (size_t i = 0; i < env.n; i++)
        sbx_strv_push(out, env.v[i]);
out:
    sbx_strv_release(&env);
    return rc;
}
/* ------------------------------------------------------------ command child ---- */

int sbx__isolation_child(const struct sbx__isolation *iso, const struct sbx__run_as *user,
                         struct sbx_error *err)
{
    /* A working directory reached through a descriptor opened before the pivot lies in the
     * detached host tree, and ".." from it walks the host's filesystem (CVE-2024-21626). The
     * kernel reports such a directory as unreachable: refuse it. */
    char cwd[PATH_MAX];
    if (syscall(SYS_getcwd, cwd, sizeof(cwd)) < 0 || cwd[0] != '/')
        return sbx_error_set(err, SBX_E_SANDBOX, 0,
                             "the command's working directory is outside the sandbox root");
    /* Raw system calls for the ids: libc's wrappers may signal every thread of the process
     * to switch them all, and the supervisor runs this in a child that shares its memory. */
    if (iso->privileged && syscall(SYS_setgroups, user->ngroups, user->groups) < 0)
        return sbx_error_errno(err, errno, "cannot set the groups of user '%s'", user->name);
    if (syscall(SYS_setresgid, user->gid, user->gid, user->gid) < 0)
        return sbx_error_errno(err, errno, "cannot switch to the group of user '%s'", user->name);
    /* The kernel's OOM killer takes a command before the supervisor. */
    int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
        if (write(fd, "1000", 4) < 0) {
            /* raising the score is always allowed; a failure only loses the preference */
        }
        close(fd);
    }

    struct rlimit zero = {0, 0};
    if (setrlimit(RLIMIT_CORE, &zero) < 0 || setrlimit(RLIMIT_FSIZE, &iso->rl_fsize) < 0)
        return sbx_error_errno(err, errno, "cannot set the resource limits");
    /* With a pids cgroup, RLIMIT_NPROC is the commands' share of it (the cgroup keeps headroom
     * for the supervisor). Without one (an unprivileged runner on cgroup v1) it is the only
     * bound of a fork bomb; it then counts every process of the host uid, hence generous. */
    if (setrlimit(RLIMIT_NPROC, &iso->rl_nproc) < 0)
        return sbx_error_errno(err, errno, "cannot set the process limit");
    if (setrlimit(RLIMIT_NOFILE, &iso->rl_nofile) < 0) {
        /* Some environments (valgrind) pin the hard limit: lower only the soft one. */
        struct rlimit cur;
        if (errno != EPERM || getrlimit(RLIMIT_NOFILE, &cur) < 0)
            return sbx_error_errno(err, errno, "cannot set the open files limit");
        if (cur.rlim_max != RLIM_INFINITY && cur.rlim_max < iso->rl_nofile.rlim_cur)
            cur.rlim_cur = cur.rlim_max;
        else
            cur.rlim_cur = iso->rl_nofile.rlim_cur;
        if (setrlimit(RLIMIT_NOFILE, &cur) < 0)
            return sbx_error_errno(err, errno, "cannot set the open files limit");
    }

    /* Capabilities go while CAP_SETPCAP is still held: a root runner's PID 1 is root inside,
     * and switching to the user would clear it. The uid switch comes after the securebits. */
    int rc;
    if (!iso->bset_empty && (rc = sbx__iso_drop_bounding_set(iso, err)) < 0)
        return rc;
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
        return sbx_error_errno(err, errno, "cannot clear the ambient capabilities");
    if (prctl(PR_SET_SECUREBITS,
              SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                      SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED |
                      SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED,
              0, 0, 0) < 0)
        return sbx_error_errno(err, errno, "cannot lock the securebits");
    if (syscall(SYS_setresuid, user->uid, user->uid, user->uid) < 0)
        return sbx_error_errno(err, errno, "cannot switch to user '%s'", user->name);
    struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];
    memset(data, 0, sizeof(data));
    if (syscall(SYS_capset, &hdr, data) < 0)
        return sbx_error_errno(err, errno, "cannot drop the capabilities");
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return sbx_error_errno(err, errno, "cannot set no_new_privs");
    if (syscall(SYS_capget, &hdr, data) < 0)
        return sbx_error_errno(err, errno, "cannot read the capabilities");
    for (int i = 0; i < 2; i++)
        if (data[i].effective || data[i].permitted || data[i].inheritable)
            return sbx_error_set(err, SBX_E_SANDBOX, 0,
                                 "capabilities are still held after dropping them");
    if (syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC) < 0)
        return sbx_error_errno(err, errno,
                               "cannot mark descriptors close-on-exec (kernel feature "
                               "close_range, Linux 5.11)");
    /* Held by PID 1 (sbx__isolation_hold_cmd_filter): inherited, the same program at the same
     * place in the stack, above PID 1's own. */
    if (iso->cmd_filter_held)
        return 0;
    return sbx__seccomp_load(&iso->bpf_cmd, err);
}

int sbx__isolation_hold_cmd_filter(struct sbx__isolation *iso, struct sbx_error *err)
{
    int rc = sbx__seccomp_load(&iso->bpf_cmd, err);
    if (rc == 0)
        iso->cmd_filter_held = 1;
    return rc;
}

/* --------------------------------------------------------------- reporting ---- */

int sbx__isolation_events(const struct sbx__isolation *iso, struct sbx__cgroup_events *out,
                          struct sbx_error *err)
{
    return sbx__cgroup_read_events(&iso->cg, out, err);
}

static void human_size(uint64_t v, char *buf, size_t n)
{
    const uint64_t mib = SBX__ISO_MIB, gib = 1024 * SBX__ISO_MIB;
    if (v >= gib && v % gib == 0)
        snprintf(buf, n, "%llu GiB", (unsigned long long)(v / gib));
    else if (v >= mib)
        snprintf(buf, n, "%llu MiB", (unsigned long long)(v / mib));
    else
        snprintf(buf, n, "%llu bytes", (unsigned long long)v);
}

int sbx__isolation_describe_exit(const struct sbx__isolation *iso, int status,
                                 const struct sbx__cgroup_events *before,
                                 const struct sbx__cgroup_events *after, struct sbx_buf *out,
                                 struct sbx_error *err)
{
    int oom = after->oom_kills > before->oom_kills;
    int pids = after->pids_max_hits > before->pids_max_hits;
    int rc;
    char size[32];
    human_size(iso->cg.memory_limit, size, sizeof(size));
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL && oom)
        rc = iso->cg.memory_limit ? sbx_buf_addf(out, err, "killed: out of memory (limit %s)", size)
                                  : sbx_buf_addf(out, err, "killed: out of memory");
    else if (WIFSIGNALED(status))
        rc = sbx_buf_addf(out, err, "killed by signal %d", WTERMSIG(status));
    else
        rc = sbx_buf_addf(out, err, "exited with status %d", WEXITSTATUS(status));
    /* A shell reports its killed child as status 137: say why the child died. */
    if (rc == 0 && oom && !WIFSIGNALED(status))
        rc = iso->cg.memory_limit
                     ? sbx_buf_addf(out, err, " (a process was killed: out of memory, limit %s)",
                                    size)
                     : sbx_buf_addf(out, err, " (a process was killed: out of memory)");
    if (rc == 0 && pids)
        rc = sbx_buf_addf(out, err, " (process limit %llu reached)",
                          (unsigned long long)iso->cg.pids_limit);
    return rc;
}
