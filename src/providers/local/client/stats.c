/* What a local sandbox uses, read from its cgroups (the supervisor records their directories in
 * its runtime dir), and its supervisor's log. cgroup v2 and v1 files are both read, whichever the
 * directory has; CPU time without a CPU accounting controller is the sum of the /proc times of
 * the cgroup's processes (and of the children they waited for). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "providers/local/client/client.h"
#include "sbx/buf.h"
#include "sbx/fs.h"
#include "sbx/json.h"

#define CG_FILE_MAX ((size_t)64 << 10)
#define PROCS_MAX   ((size_t)4 << 20)   /* cgroup.procs read */
#define NO_LIMIT_V1 ((uint64_t)1 << 62) /* v1 writes "no limit" as a huge number */

/* The first number of file name in dir dir, or of the line starting with key when key. 0 with
 * *out, -1 when absent or not a number ("max" is *out 0: no limit). */
static int read_number(const char *dir, const char *name, const char *key, uint64_t *out)
{
    struct sbx_buf b;
    char *path = sbx_xasprintf("%s/%s", dir, name);
    int rc = -1;
    sbx_buf_init(&b, CG_FILE_MAX);
    if (sbx_fs_read_path(path, CG_FILE_MAX, &b, NULL) == 0) {
        const char *p = b.data;
        size_t kn = key ? strlen(key) : 0;
        while (key && p && !(strncmp(p, key, kn) == 0 && p[kn] == ' ')) {
            p = strchr(p, '\n');
            p = p ? p + 1 : NULL;
        }
        if (p && key)
            p += kn + 1;
        char *end;
        if (p && strncmp(p, "max", 3) == 0) {
            *out = 0;
            rc = 0;
        } else if (p && *p >= '0' && *p <= '9') {
            unsigned long long v = strtoull(p, &end, 10);
            *out = v >= NO_LIMIT_V1 ? 0 : (uint64_t)v;
            rc = 0;
        }
    }
    sbx_buf_release(&b);
    free(path);
    return rc;
}

/* utime + stime + cutime + cstime of pid, in clock ticks; 0 when it is gone. */
static uint64_t proc_ticks(long pid)
{
    char path[64];
    struct sbx_buf b;
    uint64_t t = 0;
    snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
    sbx_buf_init(&b, 4096);
    if (sbx_fs_read_path(path, 4096, &b, NULL) == 0) {
        /* After the command name, which may hold anything: ") S ppid ..." */
        const char *p = strrchr(b.data, ')');
        unsigned long long v[4];
        if (p && sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %llu %llu",
                        &v[0], &v[1], &v[2], &v[3]) == 4)
            t = v[0] + v[1] + v[2] + v[3];
    }
    sbx_buf_release(&b);
    return t;
}

/* The CPU time of the processes of cgroup dir, from /proc. */
static int procs_cpu(const char *dir, uint64_t *out)
{
    struct sbx_buf b;
    char *path = sbx_xasprintf("%s/cgroup.procs", dir);
    long hz = sysconf(_SC_CLK_TCK);
    uint64_t ticks = 0;
    int rc = -1;
    sbx_buf_init(&b, PROCS_MAX);
    if (hz > 0 && sbx_fs_read_path(path, PROCS_MAX, &b, NULL) == 0) {
        for (const char *p = b.data; *p;) {
            char *end;
            long pid = strtol(p, &end, 10);
            if (end == p)
                break;
            ticks += proc_ticks(pid);
            p = end + (*end == '\n');
        }
        *out = ticks * (1000000000ull / (uint64_t)hz);
        rc = 0;
    }
    sbx_buf_release(&b);
    free(path);
    return rc;
}

static void from_cgroup(const char *dir, struct sbx_session_stats *st)
{
    uint64_t v;
    if (st->cpu_ns == SBX_STAT_UNKNOWN) {
        if (read_number(dir, "cpu.stat", "usage_usec", &v) == 0)
            st->cpu_ns = v * 1000;
        else if (read_number(dir, "cpuacct.usage", NULL, &v) == 0)
            st->cpu_ns = v;
    }
    if (st->memory == SBX_STAT_UNKNOWN &&
        (read_number(dir, "memory.current", NULL, &v) == 0 ||
         read_number(dir, "memory.usage_in_bytes", NULL, &v) == 0)) {
        st->memory = v;
        if (read_number(dir, "memory.max", NULL, &v) == 0 ||
            read_number(dir, "memory.limit_in_bytes", NULL, &v) == 0)
            st->memory_limit = v;
    }
    if (st->pids == SBX_STAT_UNKNOWN && read_number(dir, "pids.current", NULL, &v) == 0) {
        st->pids = v;
        if (read_number(dir, "pids.max", NULL, &v) == 0)
            st->pids_limit = v;
    }
}

int sbx__local_sess_stats(struct sbx_session *bs, struct sbx_session_stats *st,
                          struct sbx_error *err)
{
    struct sbx__local_session *s = (struct sbx__local_session *)bs;
    struct sbx__local_record rec;
    sbx__local_record_init(&rec);
    if (sbx__local_record_read(s->dir, bs->id, &rec) < 0) {
        sbx__local_record_release(&rec);
        return sbx_error_set(err, SBX_E_SANDBOX, 0, "sandbox '%s' is gone", bs->id);
    }
    for (size_t i = 0; i < rec.cgroups.n; i++)
        from_cgroup(rec.cgroups.v[i], st);
    for (size_t i = 0; st->cpu_ns == SBX_STAT_UNKNOWN && i < rec.cgroups.n; i++) {
        uint64_t v;
        if (procs_cpu(rec.cgroups.v[i], &v) == 0)
            st->cpu_ns = v;
    }
    sbx__local_record_release(&rec);
    const json_t *disk = json_object_get(s->state, "disk");
    if (json_is_true(json_object_get(disk, "enforced")) &&
        json_is_integer(json_object_get(disk, "limit")))
        st->disk_limit = (uint64_t)json_integer_value(json_object_get(disk, "limit"));
    return 0;
}

int sbx__local_sess_log_open(struct sbx_session *bs, int *out_fd, struct sbx_error *err)
{
    struct sbx__local_session *s = (struct sbx__local_session *)bs;
    char *path = sbx_xasprintf("%s/%s", s->dir, SBX_PROTO_LOG);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
    int rc = fd < 0 ? (errno == ENOENT ? sbx_error_set(err, SBX_E_SANDBOX, 0,
                                                       "sandbox '%s' is gone", bs->id)
                                       : sbx_error_errno(err, errno, "cannot open '%s'", path))
                    : 0;
    if (rc == 0)
        *out_fd = fd;
    free(path);
    return rc;
}
