/* Workspace snapshots of a Cloudflare sandbox: the bridge's own tar streams. Out: POST
 * .../persist answers a tar of /workspace, streamed into the pipe the snapshot store reads as
 * hostile input (sbx__session_snapshot_stream). In: the store's plain tar, staged in a host
 * file (the bridge takes at most 32 MiB, in one body), goes up with POST .../hydrate, which
 * unpacks it into /workspace. So snapshots move between cloudflare and every other provider. */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/stat.h>

#include "providers/cloudflare/cloudflare.h"
#include "sandbox/wire/http.h"
#include "sbx/buf.h"

#define PERSIST_MAX ((uint64_t)8 << 30) /* a workspace tar coming down */

struct out_ctx {
    int fd;
    uint64_t left;
};

static int sink_out(const uint8_t *p, size_t n, void *ud, struct sbx_error *err)
{
    struct out_ctx *o = ud;
    if (n > o->left)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "the workspace tar is over %llu GiB",
                             (unsigned long long)(PERSIST_MAX >> 30));
    o->left -= n;
    return sbx__http_sink_fd(p, n, &o->fd, err);
}

int sbx__cf_workspace_export(struct sbx_session *bs, int out_fd, struct sbx_error *err)
{
    struct sbx__cf_session *s = (struct sbx__cf_session *)bs;
    char *path = sbx_xasprintf("/v1/sandbox/%s/persist", s->base.id);
    struct out_ctx o = {.fd = out_fd, .left = PERSIST_MAX};
    struct sbx__http_req req = {
            .method = "POST", .path = path, .sink = sink_out, .sink_ud = &o, .timeout_ms = -1};
    struct sbx__http_resp resp;
    sbx__http_resp_init(&resp);
    int rc = sbx__http_call(s->conf->ep, &req, &resp, err);
    if (rc == 0 && resp.status >= 400)
        rc = sbx__cf_status_error(s->conf, resp.status, resp.body.data, resp.body.len,
                                  "POST /v1/sandbox/ID/persist", err);
    if (rc < 0)
        sbx_error_prefix(err, "workspace of sandbox '%s'", s->base.id);
    sbx__http_resp_release(&resp);
    free(path);
    return rc;
}

/* in_fd to its end into a new host file (*out), at most SBX__CF_FILE_MAX bytes (*size). */
static int stage(int in_fd, int *out, uint64_t *size, struct sbx_error *err)
{
    int fd = -1, rc = sbx__shellfs_tmpfile(&fd, err);
    if (rc < 0)
        return rc;
    char buf[65536];
    uint64_t total = 0;
    for (;;) {
        ssize_t n = read(in_fd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = sbx_error_set(err, SBX_E_IO, errno, "cannot read the snapshot's tar");
            break;
        }
        if (n == 0)
            break;
        if ((total += (uint64_t)n) > SBX__CF_FILE_MAX) {
            rc = sbx_error_set(err, SBX_E_TOOBIG, 0,
                               "the workspace tar is over %llu MiB, the most the Sandbox "
                               "Bridge's hydrate takes",
                               (unsigned long long)(SBX__CF_FILE_MAX >> 20));
            break;
        }
        if ((rc = sbx__http_sink_fd((const uint8_t *)buf, (size_t)n, &fd, err)) < 0)
            break;
    }
    if (rc == 0 && lseek(fd, 0, SEEK_SET) < 0)
        rc = sbx_error_set(err, SBX_E_IO, errno, "cannot rewind the staged tar");
    if (rc < 0) {
        close(fd);
        return rc;
    }
    *out = fd;
    *size = total;
    return 0;
}

static long source_fd(void *ud, void *buf, size_t n, struct sbx_error *err)
{
    ssize_t r;
    do
        r = read(*(int *)ud, buf, n);
    while (r < 0 && errno == EINTR);
    if (r < 0)
        return sbx_error_set(err, SBX_E_IO, errno, "cannot read the staged tar");
    return (long)r;
}

int sbx__cf_workspace_import(struct sbx_session *bs, int in_fd, struct sbx_error *err)
{
    struct sbx__cf_session *s = (struct sbx__cf_session *)bs;
    int fd = -1;
    uint64_t size = 0;
    int rc = stage(in_fd, &fd, &size, err);
    if (rc < 0)
        return rc;
    char *path = sbx_xasprintf("/v1/sandbox/%s/hydrate", s->base.id);
    struct sbx__http_req req = {.method = "POST",
                                .path = path,
                                .source = source_fd,
                                .source_ud = &fd,
                                .upload_size = (int64_t)size,
                                .timeout_ms = -1,
                                .no_retry = 1};
    struct sbx__http_resp resp;
    sbx__http_resp_init(&resp);
    rc = sbx__http_call(s->conf->ep, &req, &resp, err);
    if (rc == 0 && resp.status >= 400)
        rc = sbx__cf_status_error(s->conf, resp.status, resp.body.data, resp.body.len,
                                  "POST /v1/sandbox/ID/hydrate", err);
    if (rc < 0)
        sbx_error_prefix(err, "workspace of sandbox '%s'", s->base.id);
    sbx__http_resp_release(&resp);
    free(path);
    close(fd);
    return rc;
}
