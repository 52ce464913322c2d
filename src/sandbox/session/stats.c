/* What a sandbox uses (sbx_session_stats) and its log (sbx_session_log_open): the provider
 * measures CPU, memory and processes; the disk is measured here for every provider whose
 * workspace is a directory of this host (the host-workspace trait), by a walk of the workspace that
 * never follows a symlink. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox/provider.h"
#include "sbx/provider.h"
#include "sbx/session.h"

#define WALK_DEPTH_MAX 128 /* directories open at once; deeper ones are left out (partial) */

struct walk {
    uint64_t bytes;
    uint64_t entries;
    int partial;
};

/* Add what directory dfd (taken) holds, recursively. */
static void walk_dir(int dfd, int depth, struct walk *w)
{
    DIR *d = fdopendir(dfd);
    struct dirent *e;
    if (!d) {
        close(dfd);
        w->partial = 1;
        return;
    }
    while ((e = readdir(d))) {
        struct stat st;
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (++w->entries > SBX_STATS_DISK_ENTRIES_MAX) {
            w->partial = 1;
            break;
        }
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue; /* gone meanwhile */
        w->bytes += (uint64_t)st.st_blocks * 512;
        if (!S_ISDIR(st.st_mode))
            continue;
        if (depth + 1 >= WALK_DEPTH_MAX) {
            w->partial = 1;
            continue;
        }
        int sub = openat(dirfd(d), e->d_name,
                         O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
        if (sub >= 0)
            walk_dir(sub, depth + 1, w);
        else if (errno != ENOENT)
            w->partial = 1;
    }
    closedir(d);
}

int sbx_session_stats(struct sbx_session *s, struct sbx_session_stats *out, struct sbx_error *err)
{
    struct sbx_session_stats st = {
            .cpu_ns = SBX_STAT_UNKNOWN,
            .memory = SBX_STAT_UNKNOWN,
            .pids = SBX_STAT_UNKNOWN,
            .disk = SBX_STAT_UNKNOWN,
    };
    int root = -1;
    if (!s->ops->stats)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "provider '%s' does not measure what its sandboxes use", s->provider);
    int rc = s->ops->stats(s, &st, err);
    /* Only a workspace that is a directory here: another provider's workspace_fd may fetch a
     * copy of it, which measures nothing. */
    struct sbx_provider_info p;
    if (rc == 0 && sbx_provider_find(s->provider, &p, NULL) == 0 &&
        (p.traits & SBX_PROVIDER_HOST_WORKSPACE) && s->ops->workspace_fd &&
        s->ops->workspace_fd(s, &root, NULL) == 0) {
        struct walk w = {0};
        int fd = openat(root, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd >= 0) {
            struct stat top;
            if (fstat(fd, &top) == 0)
                w.bytes = (uint64_t)top.st_blocks * 512;
            walk_dir(fd, 0, &w);
            st.disk = w.bytes;
            st.disk_partial = w.partial;
        }
    }
    if (rc == 0)
        *out = st;
    return rc;
}

int sbx_session_log_open(struct sbx_session *s, int *out_fd, struct sbx_error *err)
{
    if (!s->ops->log_open)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0, "provider '%s' keeps no sandbox log",
                             s->provider);
    return s->ops->log_open(s, out_fd, err);
}
