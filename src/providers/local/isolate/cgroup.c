/* sbx local provider: cgroups of a sandbox.
 *
 * Limits (memory, pids, cpu) live in cgroups created under the caller's own cgroups, found
 * from /proc/self/cgroup, so that any budget the caller is under still applies. cgroup v1
 * controllers are used where they are mounted (one directory per controller), the unified
 * hierarchy when it holds the controllers. The counters (oom_kill, pids max) let the supervisor
 * tell "killed: out of memory" from a plain SIGKILL. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "providers/local/isolate/isolate.h"
#include "sbx/fs.h"
#include "sbx/log.h"

#define CG_FILE_MAX (1024 * 1024)

static const char *const ctrl_names[SBX__CG_NCTRL] = {"memory", "pids", "cpu"};

const char *sbx__cgroup_ctrl_name(enum sbx__cgroup_ctrl c)
{
    return c < SBX__CG_NCTRL ? ctrl_names[c] : "";
}

/* Why controller c cannot be used, for the user: the common case in words. */
static void note_unenforced(struct sbx__cgroup *cg, unsigned mask, int v1,
                            const struct sbx_error *e)
{
    int denied = e->sys_errno == EACCES || e->sys_errno == EPERM;
    for (int c = 0; c < SBX__CG_NCTRL; c++) {
        if (!(mask & (1u << c)))
            continue;
        cg->unenforced |= 1u << c;
        if (denied && v1 && geteuid() != 0)
            snprintf(cg->why[c], sizeof(cg->why[c]),
                     "cgroup v1 has no delegation for unprivileged users");
        else
            snprintf(cg->why[c], sizeof(cg->why[c]), "%.159s", e->msg);
    }
}

static int read_file(const char *path, struct sbx_buf *out, struct sbx_error *err)
{
    return sbx_fs_read_path(path, 16 * CG_FILE_MAX, out, err);
}

static int write_file(const char *dir, const char *name, const char *value, struct sbx_error *err)
{
    char *path = sbx_xasprintf("%s/%s", dir, name);
    int rc = 0;
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = sbx_error_errno(err, errno, "cannot open '%s'", path);
        goto out;
    }
    size_t n = strlen(value);
    ssize_t w = write(fd, value, n);
    if (w < 0 || (size_t)w != n)
        rc = sbx_error_errno(err, w < 0 ? errno : EIO, "cannot write '%s' to '%s'", value, path);
    close(fd);
out:
    free(path);
    return rc;
}

void sbx__cgroup_init(struct sbx__cgroup *cg)
{
    memset(cg, 0, sizeof(*cg));
    cg->oom_fd = -1;
    cg->pids_fd = -1;
}

static int open_counter(const char *dir, const char *file)
{
    if (!dir)
        return -1;
    char *p = sbx_xasprintf("%s/%s", dir, file);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    free(p);
    return fd;
}

int sbx__cgroup_self_path(const char *text, const char *ctrl, char **out, struct sbx_error *err)
{
    const char *line = text;
    while (line && *line) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        const char *c1 = memchr(line, ':', len);
        const char *c2 = c1 ? memchr(c1 + 1, ':', len - (size_t)(c1 + 1 - line)) : NULL;
        if (c2) {
            const char *ctrls = c1 + 1;
            size_t clen = (size_t)(c2 - ctrls);
            int match = 0;
            if (!ctrl[0])
                match = clen == 0 && c1 - line == 1 && line[0] == '0';
            else {
                const char *p = ctrls;
                while (!match && p < c2) {
                    const char *comma = memchr(p, ',', (size_t)(c2 - p));
                    const char *e = comma ? comma : c2;
                    match = (size_t)(e - p) == strlen(ctrl) && memcmp(p, ctrl, strlen(ctrl)) == 0;
                    p = e + 1;
                }
            }
            if (match) {
                *out = sbx_xstrndup(c2 + 1, len - (size_t)(c2 + 1 - line));
                return 0;
            }
        }
        line = end ? end + 1 : NULL;
    }
    return sbx_error_set(err, SBX_E_NOTFOUND, 0, "no cgroup '%s' in /proc/self/cgroup",
                         ctrl[0] ? ctrl : "v2");
}

int sbx__cgroup_own_dir(const char *mountinfo, const char *self, const char *ctrl, char **out,
                        struct sbx_error *err)
{
    char *path = NULL;
    int rc = sbx__cgroup_self_path(self, ctrl, &path, err);
    if (rc < 0)
        return rc;
    const char *line = mountinfo;
    rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "cgroup %s%s is not mounted",
                       ctrl[0] ? "controller " : "v2", ctrl);
    while (line && *line) {
        const char *end = strchr(line, '\n');
        char *l = sbx_xstrndup(line, end ? (size_t)(end - line) : strlen(line));
        line = end ? end + 1 : NULL;
        /* id parent maj:min root mountpoint opts... - fstype source superopts */
        char *f[5] = {0};
        char *save = l, *tok;
        size_t i = 0;
        while (i < 5 && (tok = strsep(&save, " ")))
            f[i++] = tok;
        char *dash = save ? strstr(save, " - ") : NULL;
        if (i < 5 || !dash) {
            free(l);
            continue;
        }
        char *fstype = dash + 3;
        char *src = strchr(fstype, ' ');
        char *superopts = src ? strchr(src + 1, ' ') : NULL;
        if (!src || !superopts) {
            free(l);
            continue;
        }
        *src = '\0';
        superopts++;
        int match = 0;
        if (!ctrl[0])
            match = strcmp(fstype, "cgroup2") == 0;
        else if (strcmp(fstype, "cgroup") == 0) {
            char *o, *s2 = superopts;
            while (!match && (o = strsep(&s2, ",")))
                match = strcmp(o, ctrl) == 0;
        }
        if (match) {
            const char *root = f[3], *rel = path;
            size_t rl = strlen(root);
            if (strcmp(root, "/") != 0 && strncmp(path, root, rl) == 0)
                rel = path + rl;
            *out = sbx_xasprintf("%s%s", f[4], strcmp(rel, "/") == 0 ? "" : rel);
            free(l);
            sbx_error_clear(err);
            rc = 0;
            break;
        }
        free(l);
    }
    free(path);
    return rc;
}

/* mkdir a sandbox cgroup that no one else uses: an existing one is taken over only when it is
 * empty (left by a killed supervisor; rmdir refuses a cgroup with processes), never shared,
 * since removing it later would kill the other user's processes. */
static int make_cgroup(const char *dir)
{
    if (mkdir(dir, 0755) == 0)
        return 0;
    if (errno != EEXIST)
        return -1;
    if (rmdir(dir) < 0) {
        errno = EEXIST;
        return -1;
    }
    return mkdir(dir, 0755);
}

static int v2_has_controllers(const char *dir)
{
    struct sbx_buf b;
    sbx_buf_init(&b, CG_FILE_MAX);
    char *p = sbx_xasprintf("%s/cgroup.controllers", dir);
    int ok = read_file(p, &b, NULL) == 0 && strstr(b.data, "memory") && strstr(b.data, "pids");
    free(p);
    sbx_buf_release(&b);
    return ok;
}

static int set_limits_v1(struct sbx__cgroup *cg, enum sbx__cgroup_ctrl c,
                         const struct sbx__isolation_limits *l, struct sbx_error *err)
{
    char v[32];
    int rc = 0;
    switch (c) {
    case SBX__CG_MEMORY: {
        snprintf(v, sizeof(v), "%llu", (unsigned long long)l->memory_bytes);
        rc = write_file(cg->dir[c], "memory.limit_in_bytes", v, err);
        char *sw = sbx_xasprintf("%s/memory.memsw.limit_in_bytes", cg->dir[c]);
        if (rc == 0 && access(sw, F_OK) == 0)
            rc = write_file(cg->dir[c], "memory.memsw.limit_in_bytes", v, err);
        free(sw);
        break;
    }
    case SBX__CG_PIDS:
        snprintf(v, sizeof(v), "%llu", (unsigned long long)l->pids);
        rc = write_file(cg->dir[c], "pids.max", v, err);
        break;
    case SBX__CG_CPU:
        rc = write_file(cg->dir[c], "cpu.cfs_period_us", "100000", err);
        snprintf(v, sizeof(v), "%llu", (unsigned long long)(l->cpu_millis * 100));
        if (rc == 0)
            rc = write_file(cg->dir[c], "cpu.cfs_quota_us", v, err);
        break;
    case SBX__CG_NCTRL:
        break;
    }
    return rc;
}

static int set_limits_v2(const char *dir, const struct sbx__isolation_limits *l, unsigned want,
                         struct sbx_error *err)
{
    char v[64];
    int rc = 0;
    if (want & (1u << SBX__CG_MEMORY)) {
        snprintf(v, sizeof(v), "%llu", (unsigned long long)l->memory_bytes);
        rc = write_file(dir, "memory.max", v, err);
        if (rc == 0)
            rc = write_file(dir, "memory.swap.max", "0", err);
        if (rc == 0)
            rc = write_file(dir, "memory.oom.group", "1", err);
    }
    if (rc == 0 && (want & (1u << SBX__CG_PIDS))) {
        snprintf(v, sizeof(v), "%llu", (unsigned long long)l->pids);
        rc = write_file(dir, "pids.max", v, err);
    }
    if (rc == 0 && (want & (1u << SBX__CG_CPU))) {
        snprintf(v, sizeof(v), "%llu 100000", (unsigned long long)(l->cpu_millis * 100));
        rc = write_file(dir, "cpu.max", v, err);
    }
    return rc;
}

static int limit_set(uint64_t v)
{
    return v != 0 && v != SBX__LIMIT_NONE;
}

/* The sandbox cgroup name under base in the unified hierarchy, with the limits of want. Where
 * that fails, a required limit is an error; the others are noted as unenforced (and warned
 * about), and the sandbox goes on without them. */
static int create_v2(struct sbx__cgroup *cg, const char *base, const char *name,
                     const struct sbx__isolation_limits *limits, unsigned want, unsigned required,
                     struct sbx_error *err)
{
    struct sbx_error e = SBX_ERROR_INIT;
    int r = 0;
    cg->v2 = 1;
    cg->v2dir = sbx_xasprintf("%s/%s", base, name);
    if (make_cgroup(cg->v2dir) < 0) {
        r = sbx_error_errno(&e, errno, "cannot create cgroup '%s'", cg->v2dir);
        free(cg->v2dir);
        cg->v2dir = NULL;
    }
    if (r == 0 && (r = write_file(base, "cgroup.subtree_control", "+memory +pids +cpu", &e)) < 0)
        sbx_error_prefix(&e, "cgroup v2 (the parent must be a delegated cgroup without "
                             "processes of its own)");
    if (r == 0)
        r = set_limits_v2(cg->v2dir, limits, want, &e);
    if (r == 0)
        return 0;
    if (want & required)
        return sbx_error_copy(err, &e);
    sbx_log(SBX_LOG_WARN, "sandbox limits not applied: %s", e.msg);
    sbx__cgroup_destroy(cg);
    cg->owner = 1;
    note_unenforced(cg, want, 0, &e);
    return 0;
}

/* The sandbox cgroup name in the v1 hierarchy of each controller of want; as create_v2, a
 * required one that fails is an error and the others are noted as unenforced. */
static int create_v1(struct sbx__cgroup *cg, const char *mountinfo, const char *self,
                     const char *name, const struct sbx__isolation_limits *limits, unsigned want,
                     unsigned required, struct sbx_error *err)
{
    for (int c = 0; c < SBX__CG_NCTRL; c++) {
        if (!(want & (1u << c)))
            continue;
        struct sbx_error e = SBX_ERROR_INIT;
        char *base = NULL;
        int r = sbx__cgroup_own_dir(mountinfo, self, ctrl_names[c], &base, &e);
        if (r == 0) {
            cg->dir[c] = sbx_xasprintf("%s/%s", base, name);
            if (make_cgroup(cg->dir[c]) < 0) {
                r = sbx_error_errno(&e, errno, "cannot create cgroup '%s'", cg->dir[c]);
                free(cg->dir[c]);
                cg->dir[c] = NULL;
            }
        }
        free(base);
        if (r == 0)
            r = set_limits_v1(cg, (enum sbx__cgroup_ctrl)c, limits, &e);
        if (r == 0)
            continue;
        if (required & (1u << c)) {
            r = sbx_error_copy(err, &e);
            sbx_error_prefix(err, "cgroup v1 %s controller", ctrl_names[c]);
            return r;
        }
        sbx_log(SBX_LOG_WARN, "sandbox %s limit not applied: %s", ctrl_names[c], e.msg);
        note_unenforced(cg, 1u << c, 1, &e);
        if (cg->dir[c]) {
            rmdir(cg->dir[c]);
            free(cg->dir[c]);
            cg->dir[c] = NULL;
        }
        if (c == SBX__CG_MEMORY)
            cg->memory_limit = 0;
        if (c == SBX__CG_PIDS)
            cg->pids_limit = 0;
        if (c == SBX__CG_CPU)
            cg->cpu_millis = 0;
    }
    return 0;
}

int sbx__cgroup_create(const char *name, const struct sbx__isolation_limits *limits,
                       unsigned required, struct sbx__cgroup *out, struct sbx_error *err)
{
    struct sbx__cgroup cg;
    struct sbx_buf self, mi;
    char *base = NULL;
    int rc;
    unsigned want = 0;
    sbx__cgroup_init(&cg);
    cg.owner = 1;
    sbx_buf_init(&self, CG_FILE_MAX);
    sbx_buf_init(&mi, 16 * CG_FILE_MAX);

    if (limit_set(limits->memory_bytes))
        want |= 1u << SBX__CG_MEMORY;
    if (limit_set(limits->pids))
        want |= 1u << SBX__CG_PIDS;
    if (limit_set(limits->cpu_millis))
        want |= 1u << SBX__CG_CPU;
    cg.memory_limit = limit_set(limits->memory_bytes) ? limits->memory_bytes : 0;
    cg.pids_limit = limit_set(limits->pids) ? limits->pids : 0;
    cg.cpu_millis = limit_set(limits->cpu_millis) ? limits->cpu_millis : 0;

    if ((rc = read_file("/proc/self/cgroup", &self, err)) < 0 ||
        (rc = read_file("/proc/self/mountinfo", &mi, err)) < 0)
        goto out;
    /* The unified hierarchy when it has the controllers (pure v2 hosts). Controllers can be
     * enabled for children only in a cgroup without processes of its own, so this works under
     * a delegated cgroup the caller is not in (systemd Delegate=yes). */
    if (want && sbx__cgroup_own_dir(mi.data, self.data, "", &base, NULL) == 0 &&
        v2_has_controllers(base))
        rc = create_v2(&cg, base, name, limits, want, required, err);
    else
        rc = create_v1(&cg, mi.data, self.data, name, limits, want, required, err);
    if (rc < 0) {
        sbx__cgroup_destroy(&cg);
        goto out;
    }
    if (cg.v2) {
        cg.oom_fd = open_counter(cg.v2dir, "memory.events");
        cg.pids_fd = open_counter(cg.v2dir, "pids.events");
    } else {
        cg.oom_fd = open_counter(cg.dir[SBX__CG_MEMORY], "memory.oom_control");
        cg.pids_fd = open_counter(cg.dir[SBX__CG_PIDS], "pids.events");
    }
    *out = cg;
out:
    free(base);
    sbx_buf_release(&self);
    sbx_buf_release(&mi);
    return rc;
}

int sbx__cgroup_attach(const struct sbx__cgroup *cg, pid_t pid, struct sbx_error *err)
{
    char v[32];
    snprintf(v, sizeof(v), "%d", (int)pid);
    if (cg->v2dir)
        return write_file(cg->v2dir, "cgroup.procs", v, err);
    for (int c = 0; c < SBX__CG_NCTRL; c++) {
        if (!cg->dir[c])
            continue;
        int rc = write_file(cg->dir[c], "cgroup.procs", v, err);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* The number after "key " in a flat keyed file, 0 if absent. */
static uint64_t keyed(const char *text, const char *key)
{
    size_t kl = strlen(key);
    const char *p = text;
    while (p && *p) {
        if (strncmp(p, key, kl) == 0 && p[kl] == ' ')
            return strtoull(p + kl + 1, NULL, 10);
        p = strchr(p, '\n');
        p = p ? p + 1 : NULL;
    }
    return 0;
}

static uint64_t read_keyed(int fd, const char *key)
{
    char buf[4096];
    if (fd < 0)
        return 0;
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    return keyed(buf, key);
}

int sbx__cgroup_read_events(const struct sbx__cgroup *cg, struct sbx__cgroup_events *out,
                            struct sbx_error *err)
{
    struct sbx__cgroup_events ev = {0};
    ev.oom_kills = read_keyed(cg->oom_fd, "oom_kill");
    ev.pids_max_hits = read_keyed(cg->pids_fd, "max");
    (void)err;
    *out = ev;
    return 0;
}

/* SIGKILL every process listed in dir/cgroup.procs. */
static void kill_members(const char *dir)
{
    struct sbx_buf b;
    sbx_buf_init(&b, CG_FILE_MAX);
    char *p = sbx_xasprintf("%s/cgroup.procs", dir);
    if (read_file(p, &b, NULL) == 0) {
        char *s = b.data, *end;
        while (*s) {
            long pid = strtol(s, &end, 10);
            if (end == s)
                break;
            if (pid > 0)
                kill((pid_t)pid, SIGKILL);
            s = end;
            while (*s == '\n')
                s++;
        }
    }
    free(p);
    sbx_buf_release(&b);
}

static void remove_dir(char **dir, int owner)
{
    if (!*dir)
        return;
    for (int i = 0; owner && i < 200; i++) {
        if (rmdir(*dir) == 0 || errno == ENOENT)
            break;
        if (errno != EBUSY) {
            sbx_log(SBX_LOG_WARN, "cannot remove cgroup '%s': %s", *dir, strerror(errno));
            break;
        }
        kill_members(*dir);
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    free(*dir);
    *dir = NULL;
}

void sbx__cgroup_destroy(struct sbx__cgroup *cg)
{
    if (cg->oom_fd >= 0)
        close(cg->oom_fd);
    if (cg->pids_fd >= 0)
        close(cg->pids_fd);
    if (cg->owner && cg->v2dir) {
        char *kill_file = sbx_xasprintf("%s/cgroup.kill", cg->v2dir);
        if (access(kill_file, F_OK) == 0)
            write_file(cg->v2dir, "cgroup.kill", "1", NULL);
        free(kill_file);
    }
    remove_dir(&cg->v2dir, cg->owner);
    for (int c = 0; c < SBX__CG_NCTRL; c++)
        remove_dir(&cg->dir[c], cg->owner);
    sbx__cgroup_init(cg);
}

/* The caller's cgroup directories of every hierarchy sbx uses (v1 memory, pids, cpu; v2). */
static int own_dirs(struct sbx_strv *out, struct sbx_error *err)
{
    struct sbx_buf self, mi;
    int rc;
    sbx_buf_init(&self, CG_FILE_MAX);
    sbx_buf_init(&mi, 16 * CG_FILE_MAX);
    if ((rc = read_file("/proc/self/cgroup", &self, err)) == 0 &&
        (rc = read_file("/proc/self/mountinfo", &mi, err)) == 0) {
        const char *ctrls[] = {"memory", "pids", "cpu", ""};
        for (size_t i = 0; i < SBX_ARRAY_LEN(ctrls); i++) {
            char *d = NULL;
            if (sbx__cgroup_own_dir(mi.data, self.data, ctrls[i], &d, NULL) == 0 &&
                sbx_strv_find(out, d) < 0)
                sbx_strv_push_take(out, d);
            else
                free(d);
        }
    }
    sbx_buf_release(&self);
    sbx_buf_release(&mi);
    return rc;
}

int sbx__cgroup_remove_stale(const char *prefix, unsigned min_age_s, unsigned *removed,
                             struct sbx_strv *paths, struct sbx_error *err)
{
    struct sbx_strv dirs;
    unsigned n = 0;
    sbx_strv_init(&dirs);
    int rc = own_dirs(&dirs, err);
    time_t now = time(NULL);
    for (size_t i = 0; rc == 0 && i < dirs.n; i++) {
        DIR *d = opendir(dirs.v[i]);
        if (!d)
            continue;
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_type != DT_DIR || strncmp(e->d_name, prefix, strlen(prefix)) != 0)
                continue;
            struct stat st;
            if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
                now - st.st_ctime < (time_t)min_age_s)
                continue;
            /* rmdir refuses a cgroup that still has processes or children: a live sandbox is
             * never touched. */
            if (unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR) == 0) {
                n++;
                if (paths)
                    sbx_strv_pushf(paths, "%s/%s", dirs.v[i], e->d_name);
            }
        }
        closedir(d);
    }
    sbx_strv_release(&dirs);
    if (rc == 0 && removed)
        *removed = n;
    return rc;
}

int sbx__cgroup_dirs_for(const char *name, struct sbx_strv *out, struct sbx_error *err)
{
    struct sbx_strv dirs;
    sbx_strv_init(&dirs);
    int rc = own_dirs(&dirs, err);
    for (size_t i = 0; rc == 0 && i < dirs.n; i++)
        sbx_strv_pushf(out, "%s/%s", dirs.v[i], name);
    sbx_strv_release(&dirs);
    return rc;
}

#define REMOVE_TRIES 400 /* 5 ms apart: 2 s for the kernel to reap what was killed */

int sbx__cgroup_remove_path(const char *dir, struct sbx_error *err)
{
    char *kill_file = sbx_xasprintf("%s/cgroup.kill", dir);
    int has_kill = access(kill_file, F_OK) == 0;
    free(kill_file);
    if (has_kill)
        (void)write_file(dir, "cgroup.kill", "1", NULL);
    for (int i = 0; i < REMOVE_TRIES; i++) {
        if (rmdir(dir) == 0 || errno == ENOENT)
            return 0;
        if (errno != EBUSY)
            break;
        /* v1 has no cgroup.kill; and a fork racing cgroup.kill can leave a new member. */
        kill_members(dir);
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return sbx_error_errno(err, errno, "cannot remove cgroup '%s'", dir);
}
