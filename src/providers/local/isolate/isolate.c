/* sbx local provider: the isolation executor. It applies the plan (isolate-plan.c) and decides
 * every privileged step of a local sandbox: namespaces, id maps, the new root, pivot_root, and
 * the per-command credential, capability, rlimit and seccomp setup (with the seccomp and cgroup
 * helpers it calls). The system calls that change a mount or a namespace are not made here but
 * through src/sandbox/host/priv.c, the one file that makes them for all of sbx.
 *
 * Process layout after sbx__isolation_enter (host pids):
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

#include "providers/local/isolate/isolate.h"
#include "sandbox/host/priv.h"
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

#define NEWROOT "/newroot"
#define OLDROOT "/oldroot"
#define MiB     (1024ull * 1024)

struct sbx__isolation {
    struct sbx__isolation_plan plan;
    char *root;
    char *workspace;
    enum sbx__net_mode net;
    char *hostname;
    struct sbx_strv users; /* names, users.v[0] is the default */
    gid_t user_groups[SBX__ISOLATION_MAX_USERS][SBX__ISOLATION_MAX_GROUPS];
    size_t user_ngroups[SBX__ISOLATION_MAX_USERS];
    size_t ngroups;
    struct sbx_strv env;                 /* manifest environment */
    struct sbx__isolation_limits limits; /* as given */
    char *cgroup_name;
    struct sbx__bpf bpf_main, bpf_ioctl, bpf_init;
    struct rlimit rl_fsize, rl_nofile, rl_nproc;
    int cap_last;
    int bset_empty; /* set in PID 1 once it emptied its bounding set, which children inherit */
    uid_t host_uid;
    gid_t host_gid;
    int privileged; /* caller is host root: range maps, setgroups allowed */
    int dedicated;  /* privileged, and commands run as dedicated host ids (idmapped workspace) */
    int ws_tree;    /* detached idmapped mount of the workspace, -1 = bind it by path */
    struct sbx__idrange idr; /* privileged: the sandbox's own host ids */
    char *id;                /* sandbox id, for the range's record */
    char *idrange_dir;       /* NULL = SBX__IDRANGE_DIR */
    struct sbx__cgroup cg;
    pid_t middle;
};

/* ---------------------------------------------------------------- creation ---- */

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

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

static struct rlimit capped(int resource, uint64_t want, uint64_t dflt)
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

/* Empty the capability bounding set (CAP_SETPCAP must still be held). No process can add to
 * its bounding set again, and fork copies it. */
static int drop_bounding_set(const struct sbx__isolation *iso, struct sbx_error *err)
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
    if ((rc = sbx__seccomp_build(&iso->bpf_main, &iso->bpf_ioctl, err)) < 0 ||
        (rc = sbx__seccomp_build_init(&iso->bpf_init, err)) < 0)
        goto fail;
    iso->rl_fsize = capped(RLIMIT_FSIZE, spec->limits.fsize_bytes, 16 * 1024 * MiB);
    iso->rl_nofile = capped(RLIMIT_NOFILE, spec->limits.nofile, 4096);
    iso->rl_nproc = capped(RLIMIT_NPROC, SBX__ISOLATION_NPROC_FALLBACK, 0);
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
    sbx__bpf_release(&iso->bpf_main);
    sbx__bpf_release(&iso->bpf_ioctl);
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

/* ------------------------------------------------------------ root building ---- */

static int mkdir_p(char *path, mode_t mode)
{
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        int r = mkdir(path, 0755);
        *p = '/';
        if (r < 0 && errno != EEXIST)
            return -1;
    }
    if (mkdir(path, mode) < 0 && errno != EEXIST)
        return -1;
    return 0;
}

static int make_parent(const char *path)
{
    char *dup = sbx_xstrdup(path);
    char *slash = strrchr(dup, '/');
    int r = 0;
    if (slash && slash != dup) {
        *slash = '\0';
        r = mkdir_p(dup, 0755);
    }
    free(dup);
    return r;
}

/* Touch an empty file as a bind target. */
static int make_file(const char *path)
{
    if (make_parent(path) < 0)
        return -1;
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0)
        return -1;
    close(fd);
    return 0;
}

/* The flags a bind remount must repeat: the kernel refuses to clear flags that are locked
 * because the mount came from a more privileged namespace. */
static unsigned long current_flags(const char *path)
{
    struct statvfs sv;
    unsigned long f = 0;
    if (statvfs(path, &sv) < 0)
        return 0;
    f |= sv.f_flag & ST_RDONLY ? MS_RDONLY : 0;
    f |= sv.f_flag & ST_NOSUID ? MS_NOSUID : 0;
    f |= sv.f_flag & ST_NODEV ? MS_NODEV : 0;
    f |= sv.f_flag & ST_NOEXEC ? MS_NOEXEC : 0;
    f |= sv.f_flag & ST_NOATIME ? MS_NOATIME : 0;
    f |= sv.f_flag & ST_NODIRATIME ? MS_NODIRATIME : 0;
    f |= sv.f_flag & ST_RELATIME ? MS_RELATIME : 0;
    return f;
}

static int remount_add(const char *path, unsigned long add)
{
    return sbx__priv_remount(path, current_flags(path) | add);
}

/* Without mount_setattr (Linux < 5.12, or valgrind): bind remounts, and for a recursive change
 * every mount below path found in mountinfo (the host /proc is at /oldroot/proc while the root
 * is built). */
static int remount_tree(const char *path, unsigned long add, int recursive)
{
    if (remount_add(path, add) < 0)
        return -1;
    if (!recursive)
        return 0;
    FILE *f = fopen(OLDROOT "/proc/self/mountinfo", "re");
    if (!f)
        return -1;
    char line[4096];
    size_t n = strlen(path);
    int r = 0;
    while (r == 0 && fgets(line, sizeof(line), f)) {
        char *save = line, *tok, *mp = NULL;
        for (int i = 0; i < 5 && (tok = strsep(&save, " ")); i++)
            mp = tok;
        if (mp && strncmp(mp, path, n) == 0 && mp[n] == '/')
            r = remount_add(mp, add);
    }
    fclose(f);
    return r;
}

static int set_attr(const char *path, uint64_t set, int recursive, struct sbx_error *err)
{
    struct mount_attr a = {.attr_set = set};
    if (sbx__priv_setattr(AT_FDCWD, path, recursive ? AT_RECURSIVE : 0, &a, sizeof(a)) == 0)
        return 0;
    if (errno == ENOSYS) {
        unsigned long add = (set & MOUNT_ATTR_RDONLY ? MS_RDONLY : 0) |
                            (set & MOUNT_ATTR_NOSUID ? MS_NOSUID : 0) |
                            (set & MOUNT_ATTR_NODEV ? MS_NODEV : 0) |
                            (set & MOUNT_ATTR_NOEXEC ? MS_NOEXEC : 0);
        if (remount_tree(path, add, recursive) == 0)
            return 0;
    }
    return sbx_error_errno(err, errno, "cannot set the mount flags of '%s'", path);
}

static int sys_err(struct sbx_error *err, const char *what, const char *path)
{
    return sbx_error_errno(err, errno, "cannot %s '%s'", what, path);
}

/* Bind src at dst (dst created like src), read-only unless writable; nosuid, nodev. */
static int do_bind(const char *src, const char *dst, int writable, int optional,
                   struct sbx_error *err)
{
    struct stat st;
    if (stat(src, &st) < 0) {
        if (optional && errno == ENOENT)
            return 0;
        return sys_err(err, "bind", src);
    }
    if (S_ISDIR(st.st_mode)) {
        char *d = sbx_xstrdup(dst);
        int r = mkdir_p(d, 0755);
        free(d);
        if (r < 0)
            return sys_err(err, "create directory", dst);
    } else if (make_file(dst) < 0)
        return sys_err(err, "create file", dst);
    if (sbx__priv_bind(src, dst, 1) < 0)
        return sys_err(err, "bind-mount", src);
    return set_attr(dst, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (writable ? 0 : MOUNT_ATTR_RDONLY),
                    1, err);
}

static int mirror_symlink(const char *src, const char *dst, struct sbx_error *err)
{
    char target[PATH_MAX];
    ssize_t n = readlink(src, target, sizeof(target) - 1);
    if (n < 0)
        return sys_err(err, "read symlink", src);
    target[n] = '\0';
    if (make_parent(dst) < 0 || symlink(target, dst) < 0)
        return sys_err(err, "create symlink", dst);
    return 0;
}

static int write_new_file(const char *dst, const char *data, size_t len, mode_t mode,
                          struct sbx_error *err)
{
    if (make_parent(dst) < 0)
        return sys_err(err, "create parent of", dst);
    int fd = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
    if (fd < 0)
        return sys_err(err, "create", dst);
    int rc = sbx_fd_write_all(fd, data, len, err);
    if (rc < 0) {
        close(fd);
        sbx_error_prefix(err, "'%s'", dst);
        return rc;
    }
    if (fchmod(fd, mode) < 0) {
        int e = errno;
        close(fd);
        return sbx_error_errno(err, e, "cannot chmod '%s'", dst);
    }
    close(fd);
    return 0;
}

/* Copy a small host file's content (following symlinks) into the new root. */
static int copy_in(const char *src, const char *dst, struct sbx_error *err)
{
    struct sbx_buf b;
    sbx_buf_init(&b, MiB);
    struct stat st;
    int rc = 0;
    if (stat(src, &st) < 0 && errno == ENOENT)
        goto out; /* a dangling symlink: nothing to copy */
    if ((rc = sbx_fs_read_path(src, MiB, &b, err)) == 0)
        rc = write_new_file(dst, b.data, b.len, 0644, err);
out:
    sbx_buf_release(&b);
    return rc;
}

static int mount_proc(const char *dst, struct sbx_error *err)
{
    static const char *const opts[] = {"hidepid=invisible", "hidepid=2", NULL};
    char *d = sbx_xstrdup(dst);
    int r = mkdir_p(d, 0555);
    free(d);
    if (r < 0)
        return sys_err(err, "create directory", dst);
    for (size_t i = 0; i < SBX_ARRAY_LEN(opts); i++) {
        if (sbx__priv_mount_fs("proc", dst, MS_NOSUID | MS_NODEV | MS_NOEXEC, opts[i]) == 0) {
            if (i > 0)
                sbx_log(SBX_LOG_INFO, "sandbox /proc mounted with '%s'",
                        opts[i] ? opts[i] : "no hidepid");
            return 0;
        }
        if (errno != EINVAL)
            break;
    }
    return sbx_error_errno(err, errno,
                           "cannot mount a fresh /proc (needs a pid namespace and a fully "
                           "visible host /proc)");
}

static int apply_op(const struct sbx__op *op, int ws_tree, struct sbx_error *err)
{
    char *dst = sbx_xasprintf("%s%s", NEWROOT, strcmp(op->dst, "/") == 0 ? "" : op->dst);
    char *src =
            op->src && op->kind != SBX__OP_SYMLINK ? sbx_xasprintf("%s%s", OLDROOT, op->src) : NULL;
    struct stat st;
    int rc = 0;
    switch (op->kind) {
    case SBX__OP_TMPFS: {
        char data[96];
        unsigned long flags = MS_NOSUID | MS_NODEV;
        if (strcmp(op->dst, "/dev") == 0)
            flags |= MS_NOEXEC;
        if (op->size)
            snprintf(data, sizeof(data), "mode=%o,size=%llu", (unsigned)op->mode,
                     (unsigned long long)op->size);
        else
            snprintf(data, sizeof(data), "mode=%o", (unsigned)op->mode);
        if (mkdir_p(dst, 0755) < 0)
            rc = sys_err(err, "create directory", op->dst);
        else if (sbx__priv_mount_fs("tmpfs", dst, flags, data) < 0)
            rc = sys_err(err, "mount a tmpfs at", op->dst);
        break;
    }
    case SBX__OP_BIND:
        if (op->workspace && ws_tree >= 0) {
            if (mkdir_p(dst, 0755) < 0)
                rc = sys_err(err, "create directory", op->dst);
            else if (sbx__priv_attach_tree(ws_tree, dst) < 0)
                rc = sys_err(err, "attach the workspace at", op->dst);
            break;
        }
        rc = do_bind(src, dst, op->writable, op->optional, err);
        break;
    case SBX__OP_SYSDIR:
    case SBX__OP_ETC:
        if (lstat(src, &st) < 0) {
            if (errno != ENOENT || !(op->optional || op->kind == SBX__OP_SYSDIR))
                rc = sys_err(err, "inspect", op->src);
        } else if (op->copy)
            rc = copy_in(src, dst, err);
        else if (S_ISLNK(st.st_mode))
            rc = mirror_symlink(src, dst, err);
        else
            rc = do_bind(src, dst, 0, 1, err);
        break;
    case SBX__OP_DEVNODE:
        if (make_file(dst) < 0)
            rc = sys_err(err, "create file", op->dst);
        else if (sbx__priv_bind(src, dst, 0) < 0)
            rc = sys_err(err, "bind the device", op->src);
        else
            rc = set_attr(dst, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, 0, err);
        break;
    case SBX__OP_MKDIR:
        if (mkdir_p(dst, op->mode) < 0)
            rc = sys_err(err, "create directory", op->dst);
        break;
    case SBX__OP_SYMLINK:
        if (make_parent(dst) < 0 || symlink(op->src, dst) < 0)
            rc = sys_err(err, "create symlink", op->dst);
        break;
    case SBX__OP_FILE:
        rc = write_new_file(dst, op->content, op->content_len, op->mode, err);
        break;
    case SBX__OP_PROC:
        rc = mount_proc(dst, err);
        break;
    case SBX__OP_DEVPTS: {
        /* max= bounds this instance: without it one sandbox could take every terminal of the
         * host (kernel.pty.max is shared by all instances). */
        char data[96] = "newinstance,ptmxmode=0666,mode=620";
        if (op->size)
            snprintf(data, sizeof(data), "newinstance,ptmxmode=0666,mode=620,max=%llu",
                     (unsigned long long)op->size);
        if (mkdir_p(dst, 0755) < 0)
            rc = sys_err(err, "create directory", op->dst);
        else if (sbx__priv_mount_fs("devpts", dst, MS_NOSUID | MS_NOEXEC, data) < 0)
            rc = sbx_error_errno(err, errno, "cannot mount a new devpts instance at '%s'", op->dst);
        break;
    }
    case SBX__OP_PROC_RO:
        if (lstat(dst, &st) < 0)
            break;
        if (sbx__priv_bind(dst, dst, 1) < 0)
            rc = sys_err(err, "bind", op->dst);
        else
            rc = set_attr(dst,
                          MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
                                  MOUNT_ATTR_NOEXEC,
                          1, err);
        break;
    case SBX__OP_PROC_MASK:
        if (lstat(dst, &st) < 0)
            break;
        if (S_ISDIR(st.st_mode)) {
            if (sbx__priv_mount_fs("tmpfs", dst, MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                                   "mode=0555,size=4k") < 0)
                rc = sys_err(err, "mask", op->dst);
        } else if (sbx__priv_bind(OLDROOT "/dev/null", dst, 0) < 0)
            rc = sys_err(err, "mask", op->dst);
        else
            rc = set_attr(dst, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, 0, err);
        break;
    case SBX__OP_REMOUNT_RO:
        rc = set_attr(dst, MOUNT_ATTR_RDONLY, 0, err);
        break;
    }
    free(dst);
    free(src);
    return rc;
}

static int loopback_up(struct sbx_error *err)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return sbx_error_errno(err, errno, "cannot create a socket to configure loopback");
    struct ifreq ifr;
    memset(&ifr, 0, sizeof(ifr));
    memcpy(ifr.ifr_name, "lo", 3);
    int rc = 0;
    if (ioctl(fd, SIOCGIFFLAGS, &ifr) < 0)
        rc = sbx_error_errno(err, errno, "cannot read the flags of interface 'lo'");
    else {
        ifr.ifr_flags |= IFF_UP;
        if (ioctl(fd, SIOCSIFFLAGS, &ifr) < 0)
            rc = sbx_error_errno(err, errno, "cannot bring interface 'lo' up");
    }
    close(fd);
    return rc;
}

/* In the inner process: build the root and move into it. */
static int build_root(const struct sbx__isolation *iso, struct sbx_error *err)
{
    int rc;
    if (iso->net == SBX__NET_NONE && (rc = loopback_up(err)) < 0)
        return rc;
    if (sbx__priv_sethostname(iso->hostname) < 0)
        return sbx_error_errno(err, errno, "cannot set the hostname");
    if (sbx__priv_make_private("/") < 0)
        return sbx_error_errno(err, errno, "cannot make the mount tree private");
    /* A scratch tmpfs becomes the root for the time of the build: the host tree is reachable
     * at /oldroot (bind sources), the new root is built at /newroot. */
    if (sbx__priv_mount_fs("tmpfs", "/tmp", MS_NOSUID | MS_NODEV, "mode=0700,size=65536") < 0)
        return sbx_error_errno(err, errno, "cannot mount the scratch tmpfs");
    if (mkdir("/tmp" NEWROOT, 0755) < 0 || mkdir("/tmp" OLDROOT, 0755) < 0)
        return sbx_error_errno(err, errno, "cannot create the scratch directories");
    if (sbx__priv_pivot_root("/tmp", "/tmp" OLDROOT) < 0)
        return sbx_error_errno(err, errno, "cannot pivot_root into the scratch tmpfs");
    if (chdir("/") < 0)
        return sbx_error_errno(err, errno, "cannot chdir to '/'");
    for (size_t i = 0; i < iso->plan.n; i++) {
        if ((rc = apply_op(&iso->plan.ops[i], iso->ws_tree, err)) < 0) {
            sbx_error_prefix(err, "sandbox root");
            return rc;
        }
    }
    if (chdir(NEWROOT) < 0)
        return sbx_error_errno(err, errno, "cannot chdir to the new root");
    if (sbx__priv_pivot_root(".", ".") < 0)
        return sbx_error_errno(err, errno, "cannot pivot_root into the new root");
    /* The scratch tmpfs and the whole host tree under it go away here. */
    if (sbx__priv_umount(".", MNT_DETACH) < 0)
        return sbx_error_errno(err, errno, "cannot detach the old root");
    if (chdir(iso->root) < 0)
        return sbx_error_errno(err, errno, "cannot chdir to '%s'", iso->root);
    return 0;
}

/* ------------------------------------------------------------------ enter ---- */

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

static ssize_t read_full(int fd, void *buf, size_t len)
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
    pid_t pid = fork();
    if (pid < 0) {
        rc = sbx_error_errno(err, errno, "cannot fork");
        goto out;
    }
    if (pid == 0) {
        close(sync[0]);
        if (sbx__priv_unshare(CLONE_NEWUSER) < 0 || write(sync[1], "u", 1) != 1)
            _exit(1);
        pause(); /* killed by the parent once it holds the namespace */
        _exit(0);
    }
    close(sync[1]);
    sync[1] = -1;
    if (read_full(sync[0], &c, 1) != 1) {
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

/* The middle process after fork: new user namespace, then (once the outer process wrote the id
 * maps) the other namespaces, then fork the inner process and wait for it. Never returns
 * except in the inner process, with 0 after a complete setup. */
static int middle_main(struct sbx__isolation *iso, pid_t outer, int go_fd, int up_fd, int res_fd)
{
    struct sbx_error e = SBX_ERROR_INIT;
    char c = 0;
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != outer)
        _exit(1);
    /* The kernel charges the per-user counts of everything in a user namespace (inotify
     * instances, processes, namespaces) to the namespace's owner in the parent, not to the
     * mapped ids: a root-run sandbox's namespace is owned by the first id of its range, which
     * no process holds (sandbox id 0 is host 0), so no two sandboxes share those counts. */
    if (iso->privileged && iso->idr.first) {
        uid_t owner = (uid_t)iso->idr.first;
        if (setgroups(0, NULL) < 0 || setresgid(owner, owner, owner) < 0 ||
            setresuid(owner, owner, owner) < 0) {
            sbx_error_errno(&e, errno, "cannot switch to the owner id of the sandbox");
            goto fail;
        }
        /* A change of identity clears the parent-death signal. */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != outer)
            _exit(1);
    }
    if (sbx__priv_unshare(CLONE_NEWUSER) < 0) {
        sbx_error_errno(&e, errno,
                        "cannot create a user namespace (kernel feature CONFIG_USER_NS; check "
                        "user.max_user_namespaces, kernel.unprivileged_userns_clone and "
                        "kernel.apparmor_restrict_unprivileged_userns)");
        goto fail;
    }
    if (write(up_fd, "u", 1) != 1 || read_full(go_fd, &c, 1) != 1 || c != 'g')
        _exit(1);
    close(up_fd);
    close(go_fd);
    /* Back to host root for building the root: sandbox id 0, or the default user's id in the
     * fallback without an idmapped workspace, where host root is the default user. */
    if (iso->privileged && iso->idr.first) {
        uid_t back = iso->dedicated ? 0 : SBX__ISOLATION_FIRST_UID;
        if (setresgid(back, back, back) < 0 || setresuid(back, back, back) < 0) {
            sbx_error_errno(&e, errno, "cannot become root of the sandbox's user namespace");
            goto fail;
        }
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != outer)
            _exit(1);
    }
    for (size_t i = 0; i < SBX_ARRAY_LEN(ns_steps); i++) {
        if (ns_steps[i].flag == CLONE_NEWNET && iso->net != SBX__NET_NONE)
            continue;
        if (sbx__priv_unshare(ns_steps[i].flag) < 0) {
            sbx_error_errno(&e, errno, "cannot create a %s", ns_steps[i].name);
            goto fail;
        }
        /* unshare moved our working directory into the new namespace's copy of the host tree.
         * pivot_root moves it to the new root only if it is the old root itself: anywhere else
         * it would pin the detached host tree, and with it every mount copied from the host
         * (other sandboxes' workspace disk images: their file systems could not be freed
         * until this sandbox ends). */
        if (ns_steps[i].flag == CLONE_NEWNS && chdir("/") < 0) {
            sbx_error_errno(&e, errno, "cannot chdir to '/'");
            goto fail;
        }
    }
    pid_t inner = fork();
    if (inner < 0) {
        sbx_error_errno(&e, errno, "cannot fork the sandbox init process");
        goto fail;
    }
    if (inner == 0) {
        /* PID 1 of the new pid namespace; its parent is outside, so getppid() is 0. */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
            _exit(1);
        if (build_root(iso, &e) < 0)
            goto fail;
        if (prctl(PR_SET_DUMPABLE, 0) < 0) {
            sbx_error_errno(&e, errno, "cannot make the sandbox init non-dumpable");
            goto fail;
        }
        close_fd(&iso->ws_tree);
        sbx__idrange_drop(&iso->idr); /* the outer process holds the range */
        /* Once here rather than in every command child: PID 1 never executes a program, so its
         * bounding set limits nothing it does, and each command inherits the empty set. */
        if (drop_bounding_set(iso, &e) < 0)
            goto fail;
        iso->bset_empty = 1;
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
            sbx_error_errno(&e, errno, "cannot set no_new_privs on the sandbox init");
            goto fail;
        }
        if (sbx__seccomp_load(&iso->bpf_init, &e) < 0)
            goto fail;
        scrub_environ();
        /* Code SBX_OK: the setup is complete. If nobody reads it, the outer process gave up on
         * this sandbox (perhaps before PR_SET_PDEATHSIG took effect): do not serve. */
        if (send_error(res_fd, &e) < 0)
            _exit(1);
        close(res_fd);
        return 0;
    }
    /* Only waits: the sandbox ends when the inner process does, or when this one is killed.
     * It keeps none of the supervisor's descriptors, so a pipe or socket the caller watches
     * reports the end of PID 1, not of this process. */
    if (syscall(SYS_close_range, 3, ~0U, 0) < 0)
        close(res_fd);
    malloc_trim(0); /* one waiting process per sandbox: it keeps no freed heap */
    for (;;) {
        int st;
        pid_t w = waitpid(inner, &st, 0);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            _exit(1);
        _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
    }
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

int sbx__isolation_enter(struct sbx__isolation *iso, enum sbx__isolation_role *role,
                         struct sbx_error *err)
{
    int go[2] = {-1, -1}, up[2] = {-1, -1}, res[2] = {-1, -1};
    pid_t outer = getpid(), middle = -1;
    int rc = 0;
    char c;

    if (iso->middle > 0)
        return sbx_error_set(err, SBX_E_INVAL, 0, "the sandbox isolation was already entered");
    /* Before anything runs as the range's ids; a root runner never falls back to ids that
     * other sandboxes share. */
    if (iso->privileged && iso->idr.fd < 0 &&
        (rc = sbx__idrange_acquire(iso->idrange_dir, iso->id, &iso->idr, err)) < 0)
        return rc;
    if (iso->privileged && iso->ws_tree < 0) {
        struct sbx_error e = SBX_ERROR_INIT;
        iso->dedicated = idmapped_workspace(iso, &e) == 0;
        if (!iso->dedicated)
            sbx_log(SBX_LOG_WARN, "sandbox commands run as the caller's host uid: %s", e.msg);
    }
    if (iso->cgroup_name) {
        struct sbx__isolation_limits l = iso->limits;
        uint64_t pids = l.pids ? l.pids : SBX__ISOLATION_DEFAULT_PIDS;
        if (!l.memory_bytes)
            l.memory_bytes = 2048 * MiB;
        /* The commands get pids (RLIMIT_NPROC, counted per uid in the sandbox's user
         * namespace); the cgroup allows the supervisor and the exec reapers a headroom above,
         * so a fork bomb at its limit cannot keep the next exec from starting. */
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
            iso->rl_nproc = capped(RLIMIT_NPROC, pids, 0);
        }
    }
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
    close_fd(&go[0]);
    close_fd(&up[1]);
    close_fd(&res[1]);
    if (read_full(up[0], &c, 1) == 1) {
        if ((rc = sbx__cgroup_attach(&iso->cg, middle, err)) < 0 ||
            (rc = write_maps(iso, middle, err)) < 0)
            goto fail;
        if (write(go[1], "g", 1) != 1) {
            rc = sbx_error_errno(err, errno, "cannot start the sandbox process");
            goto fail;
        }
    }
    close_fd(&go[1]);
    struct sbx_error got = SBX_ERROR_INIT;
    ssize_t n = read_full(res[0], &got, sizeof(got));
    if (n != (ssize_t)sizeof(got)) {
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "the sandbox process ended during set-up");
        goto fail;
    }
    if (got.code != SBX_OK) {
        got.msg[sizeof(got.msg) - 1] = '\0';
        rc = sbx_error_copy(err, &got);
        goto fail;
    }
    close_fd(&up[0]);
    close_fd(&res[0]);
    close_fd(&iso->ws_tree); /* attached inside now */
    *role = SBX__ISOLATION_OUTER;
    return 0;
fail:
    if (middle > 0) {
        kill(middle, SIGKILL);
        while (waitpid(middle, NULL, 0) < 0 && errno == EINTR)
            ;
    }
    iso->middle = -1;
    close_fd(&iso->ws_tree);
    close_fd(&go[0]);
    close_fd(&go[1]);
    close_fd(&up[0]);
    close_fd(&up[1]);
    close_fd(&res[0]);
    close_fd(&res[1]);
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
        if (sigwaitinfo(&set, &si) > 0 && si.si_signo != SIGCHLD)
            kill(iso->middle, SIGKILL);
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
    if (!iso->bset_empty && (rc = drop_bounding_set(iso, err)) < 0)
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
    rc = sbx__seccomp_load(&iso->bpf_ioctl, err);
    if (rc == 0)
        rc = sbx__seccomp_load(&iso->bpf_main, err);
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
    if (v >= 1024 * MiB && v % (1024 * MiB) == 0)
        snprintf(buf, n, "%llu GiB", (unsigned long long)(v / (1024 * MiB)));
    else if (v >= MiB)
        snprintf(buf, n, "%llu MiB", (unsigned long long)(v / MiB));
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

/* ------------------------------------------------------------- test driver ---- */

/* execve argv[0], searching PATH of env when it has no '/'. Returns only on failure. */
static void exec_path(char *const *argv, char *const *env)
{
    if (strchr(argv[0], '/')) {
        execve(argv[0], argv, env);
        return;
    }
    const char *path = "/usr/local/bin:/usr/bin:/bin";
    for (size_t i = 0; env[i]; i++)
        if (strncmp(env[i], "PATH=", 5) == 0)
            path = env[i] + 5;
    while (*path) {
        const char *colon = strchr(path, ':');
        size_t len = colon ? (size_t)(colon - path) : strlen(path);
        char full[PATH_MAX];
        if (len &&
            (size_t)snprintf(full, sizeof(full), "%.*s/%s", (int)len, path, argv[0]) < sizeof(full))
            execve(full, argv, env);
        path += len + (colon ? 1 : 0);
    }
    errno = ENOENT;
}

struct run_result {
    int status;
    char describe[256];
};

/* PID 1 of the test sandbox: run one command, report, end. */
static SBX_NORETURN void run_inner(struct sbx__isolation *iso, const char *user, char *const *argv,
                                   int res_fd)
{
    struct sbx_error e = SBX_ERROR_INIT;
    struct run_result r = {0};
    struct sbx__run_as ra;
    struct sbx__cgroup_events before = {0}, after = {0};
    struct sbx_strv env;
    sbx_strv_init(&env);
    if (sbx__isolation_user(iso, user, &ra, &e) < 0 ||
        sbx__isolation_env(iso, &ra, NULL, NULL, &env, &e) < 0) {
        r.status = 127 << 8;
        snprintf(r.describe, sizeof(r.describe), "%.250s", e.msg);
        goto report;
    }
    sbx__isolation_events(iso, &before, NULL);
    pid_t pid = fork();
    if (pid < 0) {
        r.status = 127 << 8;
        snprintf(r.describe, sizeof(r.describe), "cannot fork: %s", strerror(errno));
        goto report;
    }
    if (pid == 0) {
        if (sbx__isolation_child(iso, &ra, &e) < 0) {
            dprintf(2, "sbx: %s\n", e.msg);
            _exit(126);
        }
        exec_path(argv, env.v);
        dprintf(2, "sbx: cannot run '%s': %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    for (;;) {
        int st;
        pid_t w = wait(&st);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            break;
        if (w == pid) {
            r.status = st;
            kill(-1, SIGKILL); /* whatever the command left behind */
        }
    }
    sbx__isolation_events(iso, &after, NULL);
    struct sbx_buf d;
    sbx_buf_init(&d, sizeof(r.describe) - 1);
    if (sbx__isolation_describe_exit(iso, r.status, &before, &after, &d, NULL) == 0)
        memcpy(r.describe, d.data, d.len + 1);
    sbx_buf_release(&d);
report:
    if (write(res_fd, &r, sizeof(r)) < 0)
        _exit(1);
    _exit(0);
}

int sbx__isolation_run(const struct sbx__isolation_spec *spec, const char *user, char *const *argv,
                       int *status, struct sbx_buf *describe, struct sbx_error *err)
{
    struct sbx__isolation *iso = NULL;
    enum sbx__isolation_role role;
    int res[2] = {-1, -1};
    int rc;
    if (!argv || !argv[0])
        return sbx_error_set(err, SBX_E_INVAL, 0, "no command to run");
    if ((rc = sbx__isolation_new(spec, &iso, err)) < 0)
        return rc;
    struct sbx__run_as ra;
    if ((rc = sbx__isolation_user(iso, user, &ra, err)) < 0)
        goto out;
    if (pipe2(res, O_CLOEXEC) < 0) {
        rc = sbx_error_errno(err, errno, "cannot create a pipe");
        goto out;
    }
    if ((rc = sbx__isolation_enter(iso, &role, err)) < 0)
        goto out;
    if (role == SBX__ISOLATION_INNER) {
        close(res[0]);
        run_inner(iso, user, argv, res[1]);
    }
    close_fd(&res[1]);
    struct run_result r;
    ssize_t n = read_full(res[0], &r, sizeof(r));
    int st;
    if ((rc = sbx__isolation_outer_wait(iso, &st, err)) < 0)
        goto out;
    if (n != (ssize_t)sizeof(r)) {
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "the sandbox ended without a result (status %d)",
                           st);
        goto out;
    }
    r.describe[sizeof(r.describe) - 1] = '\0';
    *status = r.status;
    if (describe)
        rc = sbx_buf_adds(describe, r.describe, err);
out:
    close_fd(&res[0]);
    close_fd(&res[1]);
    sbx__isolation_free(iso);
    return rc;
}
