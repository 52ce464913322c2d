/* What a remote sandbox uses and its log, as its node reports them (remote.h,
 * docs/internals/node.md). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>

#include "providers/remote/remote.h"
#include "sbx/common.h"
#include "sbx/fs.h"

#define LOG_MAX ((size_t)4 << 20)

/* A figure of the node's answer: a non-negative integer, or null (not measured). */
static int figure(const json_t *ans, const char *key, uint64_t *out, struct sbx_error *err)
{
    const json_t *v = json_object_get(ans, key);
    if (json_is_null(v) || !v) {
        *out = SBX_STAT_UNKNOWN;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return sbx_error_set(err, SBX_E_API, 0, "the node's stats have a bad '%s'", key);
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

int sbx__remote_stats(struct sbx_session *bs, struct sbx_session_stats *out, struct sbx_error *err)
{
    struct sbx__remote_session *s = (struct sbx__remote_session *)bs;
    json_t *ans = NULL;
    char *path = sbx_xasprintf("/v1/sandboxes/%s/stats", s->base.id);
    int rc = sbx__remote_session_call(s, "GET", path, NULL, &ans, err);
    free(path);
    struct sbx_session_stats st = {0};
    static const struct {
        const char *key;
        size_t off;
    } keys[] = {{"cpu_ns", offsetof(struct sbx_session_stats, cpu_ns)},
                {"memory", offsetof(struct sbx_session_stats, memory)},
                {"memory_limit", offsetof(struct sbx_session_stats, memory_limit)},
                {"pids", offsetof(struct sbx_session_stats, pids)},
                {"pids_limit", offsetof(struct sbx_session_stats, pids_limit)},
                {"disk", offsetof(struct sbx_session_stats, disk)},
                {"disk_limit", offsetof(struct sbx_session_stats, disk_limit)}};
    for (size_t i = 0; rc == 0 && i < SBX_ARRAY_LEN(keys); i++)
        rc = figure(ans, keys[i].key, (uint64_t *)((char *)&st + keys[i].off), err);
    /* A limit the node does not know is none. */
    if (st.memory_limit == SBX_STAT_UNKNOWN)
        st.memory_limit = 0;
    if (st.pids_limit == SBX_STAT_UNKNOWN)
        st.pids_limit = 0;
    if (st.disk_limit == SBX_STAT_UNKNOWN)
        st.disk_limit = 0;
    st.disk_partial = json_is_true(json_object_get(ans, "disk_partial"));
    if (rc == 0)
        *out = st;
    json_decref(ans);
    return rc;
}

int sbx__remote_log_open(struct sbx_session *bs, int *out_fd, struct sbx_error *err)
{
    struct sbx__remote_session *s = (struct sbx__remote_session *)bs;
    struct sbx_buf b;
    sbx_buf_init(&b, LOG_MAX);
    char *path = sbx_xasprintf("/v1/sandboxes/%s/log", s->base.id);
    int rc = sbx__remote_session_get_bytes(s, path, LOG_MAX, &b, err);
    free(path);
    int fd = rc == 0 ? memfd_create("sbx-remote-log", MFD_CLOEXEC) : -1;
    if (rc == 0 && fd < 0)
        rc = sbx_error_errno(err, errno, "cannot hold the log of sandbox '%s'", s->base.id);
    if (rc == 0 && b.len)
        rc = sbx_fd_write_all(fd, b.data, b.len, err);
    if (rc == 0 && lseek(fd, 0, SEEK_SET) < 0)
        rc = sbx_error_errno(err, errno, "cannot hold the log of sandbox '%s'", s->base.id);
    if (rc == 0)
        *out_fd = fd;
    else if (fd >= 0)
        close(fd);
    sbx_buf_release(&b);
    return rc;
}
