/* Workspace snapshots of a Cloudflare sandbox: the bridge's own tar streams. Out: POST
 * .../persist answers a tar of /workspace, streamed into the pipe the snapshot store reads as
 * hostile input (sbx__session_snapshot_stream). In: the store's plain tar, staged in a host
 * memory (the bridge takes at most 32 MiB, in one body), goes up with POST .../hydrate, which
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

int sbx__cf_workspace_import(struct sbx_session *bs, int in_fd, struct sbx_error *err)
{
    struct sbx__cf_session *s = (struct sbx__cf_session *)bs;
    /* Whole, in memory: the bridge takes one body of at most 32 MiB, and a body in memory
     * goes again after a 429 or 503. */
    struct sbx_buf tar;
    sbx_buf_init(&tar, SBX_BUF_NOLIMIT);
    int rc = sbx__cf_read_all(in_fd, SBX__CF_FILE_MAX, &tar, "the workspace tar", err);
    if (rc < 0) {
        sbx_buf_release(&tar);
        return rc;
    }
    char *path = sbx_xasprintf("/v1/sandbox/%s/hydrate", s->base.id);
    struct sbx__http_req req = {.method = "POST",
                                .path = path,
                                .body = tar.data ? tar.data : "",
                                .body_len = tar.len,
                                .timeout_ms = -1};
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
    sbx_buf_release(&tar);
    return rc;
}
