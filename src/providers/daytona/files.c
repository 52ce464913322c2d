/* Workspace files and snapshots of a Daytona sandbox: contents through the toolbox's file API
 * (GET /files/download down, a multipart POST /files/bulk-upload up), everything else through
 * the shared fixed script run as a command (src/sandbox/shellfs/: paths resolved in the sandbox
 * and kept in the workspace; snapshots as tar streams). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "providers/daytona/daytona.h"
#include "sandbox/wire/http.h"
#include "sbx/hash.h"

#define PART_HEAD_MAX 4096

static int run_cb(void *ctx, const char *const *argv, struct sbx__shell_run *out,
                  struct sbx_error *err)
{
    return sbx__dtn_run(ctx, argv, out, err);
}

struct sink {
    int fd;
    uint64_t got, max;
    const char *abs;
};

static int sink_fd(const uint8_t *p, size_t n, void *ud, struct sbx_error *err)
{
    struct sink *s = ud;
    if (s->got + n > s->max)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "file '%s' is larger than %llu bytes", s->abs,
                             (unsigned long long)s->max);
    s->got += n;
    while (n) {
        ssize_t w = write(s->fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return sbx_error_set(err, SBX_E_SYS, errno, "cannot keep file '%s'", s->abs);
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int get_cb(void *ctx, const char *abs, int fd, uint64_t max, struct sbx_error *err)
{
    struct sbx__dtn_box *b = ctx;
    char *q = sbx__http_escape(abs, 1);
    char *path = sbx_xasprintf("/files/download?path=%s", q);
    const char *hb[2];
    struct sink s = {.fd = fd, .max = max, .abs = abs};
    struct sbx__http_req req = {.method = "GET",
                                .path = path,
                                .headers = sbx__dtn_headers(b->conf, hb),
                                .sink = sink_fd,
                                .sink_ud = &s,
                                .timeout_ms = -1};
    struct sbx__http_resp resp;
    sbx__http_resp_init(&resp);
    int rc = sbx__http_call(b->ep, &req, &resp, err);
    if (rc == 0 && resp.status >= 400)
        rc = sbx__http_status_error(b->ep, resp.status, resp.body.data, resp.body.len,
                                    "GET /files/download", err);
    sbx__http_resp_release(&resp);
    free(path);
    free(q);
    return rc;
}

/* A multipart/form-data body of one file, as the toolbox's bulk upload takes it: the part
 * files[0].path with the destination, the part files[0].file with the contents from fd. */
struct upload {
    char head[PART_HEAD_MAX], tail[128];
    size_t head_len, tail_len, off;
    int fd;
    uint64_t size, sent;
};

static long upload_source(void *ud, void *buf, size_t n, struct sbx_error *err)
{
    struct upload *u = ud;
    size_t total_head = u->head_len;
    if (u->off < total_head) {
        size_t k = total_head - u->off < n ? total_head - u->off : n;
        memcpy(buf, u->head + u->off, k);
        u->off += k;
        return (long)k;
    }
    if (u->sent < u->size) {
        size_t want = u->size - u->sent < n ? (size_t)(u->size - u->sent) : n;
        ssize_t r;
        do
            r = read(u->fd, buf, want);
        while (r < 0 && errno == EINTR);
        if (r < 0)
            return sbx_error_set(err, SBX_E_SYS, errno, "cannot read the file to upload");
        if (r == 0)
            return sbx_error_set(err, SBX_E_IO, 0, "the file to upload ended early");
        u->sent += (uint64_t)r;
        return (long)r;
    }
    size_t t = u->off - total_head;
    if (t >= u->tail_len)
        return 0;
    size_t k = u->tail_len - t < n ? u->tail_len - t : n;
    memcpy(buf, u->tail + t, k);
    u->off += k;
    return (long)k;
}

static int put_cb(void *ctx, const char *abs, int fd, uint64_t size, struct sbx_error *err)
{
    struct sbx__dtn_box *b = ctx;
    char boundary[33];
    int rc = sbx_random_hex(boundary, 16, err);
    if (rc < 0)
        return rc;
    if (strlen(abs) > PART_HEAD_MAX / 4 || strpbrk(abs, "\"\r\n"))
        return sbx_error_set(err, SBX_E_INVAL, 0, "path '%s' cannot be uploaded", abs);
    struct upload u = {.fd = fd, .size = size};
    u.head_len = (size_t)snprintf(u.head, sizeof(u.head),
                                  "--%s\r\nContent-Disposition: form-data; name=\"files[0].path\""
                                  "\r\n\r\n%s\r\n--%s\r\nContent-Disposition: form-data; "
                                  "name=\"files[0].file\"; filename=\"%s\"\r\nContent-Type: "
                                  "application/octet-stream\r\n\r\n",
                                  boundary, abs, boundary, abs);
    u.tail_len = (size_t)snprintf(u.tail, sizeof(u.tail), "\r\n--%s--\r\n", boundary);
    char ctype[96];
    snprintf(ctype, sizeof(ctype), "multipart/form-data; boundary=%s", boundary);
    const char *hb[2];
    struct sbx__http_req req = {.method = "POST",
                                .path = "/files/bulk-upload",
                                .source = upload_source,
                                .source_ud = &u,
                                .upload_size = (int64_t)(u.head_len + size + u.tail_len),
                                .content_type = ctype,
                                .headers = sbx__dtn_headers(b->conf, hb),
                                .timeout_ms = -1,
                                .no_retry = 1};
    struct sbx__http_resp resp;
    sbx__http_resp_init(&resp);
    rc = sbx__http_call(b->ep, &req, &resp, err);
    if (rc == 0 && resp.status >= 400)
        rc = sbx__http_status_error(b->ep, resp.status, resp.body.data, resp.body.len,
                                    "POST /files/bulk-upload", err);
    sbx__http_resp_release(&resp);
    return rc;
}

static const struct sbx__shellfs_ops FS_OPS = {.run = run_cb, .get = get_cb, .put = put_cb};

struct sbx__shellfs sbx__dtn_fs(struct sbx__dtn_session *s)
{
    return (struct sbx__shellfs){
            .ops = &FS_OPS, .ctx = &s->box, .root = s->base.root, .copy = &s->ws};
}
