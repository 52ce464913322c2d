/* A remote sandbox's files and workspace tars: one REST request on the node each (remote.h,
 * docs/internals/node.md, "Files and workspace streams"); the node resolves every path under
 * the workspace with the local provider's rules. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "providers/remote/remote.h"
#include "sandbox/wire/http.h"
#include "sbx/common.h"
#include "sbx/fs.h"
#include "sbx/json.h"

#define CHUNK 65536

#define RS(bs) ((struct sbx__remote_session *)(bs))

/* One request on .../RES (files, files/OP, workspace) of the session's sandbox, with path=
 * (may be NULL) and the more query text (may be NULL); the body and sink in q; a status >= 400
 * is the node's error. *out (may be NULL): a JSON answer. A token the node refuses is renewed
 * and the request made once more (request). */
static int request_once(struct sbx__remote_session *s, const char *method, const char *res,
                        const char *path, const char *more, const char *line,
                        struct sbx__http_req *q, json_t **out, struct sbx_error *err)
{
    const char *headers[] = {SBX__REMOTE_VERSION_HEADER, line, NULL};
    char *esc = path ? sbx__http_escape(path, 0) : NULL;
    char *url =
            sbx_xasprintf("/v1/sandboxes/%s/%s%s%s%s%s", s->base.id, res, esc || more ? "?" : "",
                          esc ? "path=" : "", esc ? esc : "", more ? more : "");
    q->method = method;
    q->path = url;
    q->headers = headers;
    q->want_header = "Sbx-Node-Version";
    q->no_retry = 1;
    q->http_1_1 = 1;
    struct sbx__http_resp resp;
    sbx__http_resp_init(&resp);
    int rc = sbx__http_call(s->ep, q, &resp, err);
    if (rc == 0)
        rc = sbx__remote_check_version(s->ep, resp.header, err);
    if (rc == 0 && resp.status >= 400)
        rc = sbx__remote_error(s->ep, &resp, url, err);
    else if (rc == 0 && out)
        rc = resp.body.len ? sbx_json_parse(resp.body.data, resp.body.len, NULL, out, err)
                           : (*out = json_object(), 0);
    sbx__http_resp_release(&resp);
    free(url);
    free(esc);
    return rc;
}

struct file_req {
    struct sbx__remote_session *s;
    const char *method, *res, *path, *more;
    struct sbx__http_req *q;
    json_t **out;
};

static long fd_source(void *ud, void *buf, size_t n, struct sbx_error *err);

/* An upload's body is a spooled file (fd_source): each attempt sends it from its start. */
static int file_req_op(void *ud, const char *line, struct sbx_error *err)
{
    struct file_req *f = ud;
    if (f->q->source == fd_source && lseek(*(int *)f->q->source_ud, 0, SEEK_SET) < 0)
        return sbx_error_errno(err, errno, "lseek");
    return request_once(f->s, f->method, f->res, f->path, f->more, line, f->q, f->out, err);
}

static int request(struct sbx__remote_session *s, const char *method, const char *res,
                   const char *path, const char *more, struct sbx__http_req *q, json_t **out,
                   struct sbx_error *err)
{
    struct file_req f = {s, method, res, path, more, q, out};
    return sbx__remote_with_token(s, q->source && q->source != fd_source, file_req_op, &f, err);
}

static int tmpfile_fd(int *out, struct sbx_error *err)
{
    const char *tmp = getenv("TMPDIR");
    int fd = open(tmp && tmp[0] == '/' ? tmp : "/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0)
        return sbx_error_errno(err, errno, "cannot make a temporary file");
    *out = fd;
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Listings */

static int dirent_from(const json_t *j, struct sbx_dirent *d, struct sbx_error *err)
{
    static const char *const types[] = {"file", "dir", "symlink", "other"};
    const char *name = json_string_value(json_object_get(j, "name"));
    const char *type = json_string_value(json_object_get(j, "type"));
    const char *target = json_string_value(json_object_get(j, "target"));
    memset(d, 0, sizeof(*d));
    d->type = SBX_FILE_OTHER + 1;
    for (int i = 0; type && i <= SBX_FILE_OTHER; i++)
        if (strcmp(type, types[i]) == 0)
            d->type = (enum sbx_file_type)i;
    if (!name || strchr(name, '/') || d->type > SBX_FILE_OTHER)
        return sbx_error_set(err, SBX_E_API, 0, "the node sent a malformed file entry");
    d->name = sbx_xstrdup(name);
    d->target = target ? sbx_xstrdup(target) : NULL;
    d->mode = (mode_t)(json_integer_value(json_object_get(j, "mode")) & 07777);
    d->size = (uint64_t)json_integer_value(json_object_get(j, "size"));
    d->mtime_ns = json_integer_value(json_object_get(j, "mtime_ns"));
    d->uid = (uid_t)json_integer_value(json_object_get(j, "uid"));
    d->gid = (gid_t)json_integer_value(json_object_get(j, "gid"));
    return 0;
}

int sbx__remote_stat(struct sbx_session *bs, const char *path, struct sbx_dirent *out,
                     struct sbx_error *err)
{
    struct sbx__http_req q = {0};
    json_t *j = NULL;
    int rc = request(RS(bs), "GET", "files/stat", path, NULL, &q, &j, err);
    if (rc == 0)
        rc = dirent_from(j, out, err);
    json_decref(j);
    return rc;
}

int sbx__remote_ls(struct sbx_session *bs, const char *path, struct sbx_dirlist *out,
                   struct sbx_error *err)
{
    struct sbx__http_req q = {.max_body = SBX__HTTP_BODY_MAX};
    json_t *j = NULL, *e;
    int rc = request(RS(bs), "GET", "files/list", path, NULL, &q, &j, err);
    json_t *a = json_object_get(j, "entries");
    size_t i;
    if (rc == 0 && (!json_is_array(a) || json_array_size(a) > SBX_LS_MAX_ENTRIES))
        rc = sbx_error_set(err, SBX_E_API, 0, "the node sent a malformed listing of '%s'", path);
    out->v = NULL;
    out->n = 0;
    if (rc == 0 && json_array_size(a))
        out->v = sbx_xcalloc(json_array_size(a), sizeof(*out->v));
    json_array_foreach(a, i, e)
    {
        if (rc < 0 || (rc = dirent_from(e, &out->v[out->n], err)) < 0)
            break;
        out->n++;
    }
    if (rc < 0)
        sbx_dirlist_release(out);
    json_decref(j);
    return rc;
}

int sbx__remote_mkdir(struct sbx_session *bs, const char *path, int flags, struct sbx_error *err)
{
    struct sbx__http_req q = {0};
    return request(RS(bs), "POST", "files/mkdir", path,
                   flags & SBX_MKDIR_PARENTS ? "&parents=1" : NULL, &q, NULL, err);
}

int sbx__remote_rm(struct sbx_session *bs, const char *path, int flags, struct sbx_error *err)
{
    struct sbx__http_req q = {0};
    char more[32];
    snprintf(more, sizeof(more), "%s%s", flags & SBX_RM_RECURSIVE ? "&recursive=1" : "",
             flags & SBX_RM_FORCE ? "&force=1" : "");
    return request(RS(bs), "DELETE", "files", path, more[0] ? more : NULL, &q, NULL, err);
}

int sbx__remote_chmod(struct sbx_session *bs, const char *path, mode_t mode, struct sbx_error *err)
{
    struct sbx__http_req q = {0};
    char more[32];
    snprintf(more, sizeof(more), "&mode=%o", (unsigned)(mode & 07777));
    return request(RS(bs), "POST", "files/chmod", path, more, &q, NULL, err);
}

/* ---------------------------------------------------------------------------------------------
 * Contents */

/* Bytes into an fd, at most max of them. */
struct bounded_sink {
    int fd;
    uint64_t n, max;
};

static int bounded_sink(const uint8_t *p, size_t n, void *ud, struct sbx_error *err)
{
    struct bounded_sink *b = ud;
    if (b->n + n > b->max)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "the node sent more than %llu bytes",
                             (unsigned long long)b->max);
    b->n += n;
    return sbx_fd_write_all(b->fd, p, n, err);
}

int sbx__remote_read_open(struct sbx_session *bs, const char *path, int *out_fd, uint64_t *out_size,
                          struct sbx_error *err)
{
    struct bounded_sink b = {.fd = -1, .max = SBX__REMOTE_FILE_MAX};
    struct sbx__http_req q = {.sink = bounded_sink, .sink_ud = &b, .timeout_ms = -1};
    int rc = tmpfile_fd(&b.fd, err);
    if (rc == 0)
        rc = request(RS(bs), "GET", "files", path, NULL, &q, NULL, err);
    if (rc == 0 && lseek(b.fd, 0, SEEK_SET) < 0)
        rc = sbx_error_errno(err, errno, "cannot read '%s'", path);
    if (rc < 0) {
        sbx_fd_close(&b.fd);
        return rc;
    }
    *out_fd = b.fd;
    if (out_size)
        *out_size = b.n;
    return 0;
}

/* A request body from an fd. */
static long fd_source(void *ud, void *buf, size_t n, struct sbx_error *err)
{
    for (;;) {
        ssize_t k = read(*(int *)ud, buf, n);
        if (k >= 0)
            return (long)k;
        if (errno != EINTR)
            return sbx_error_errno(err, errno, "cannot read a request body");
    }
}

/* The reader's bytes into fd, holes as zeros (the request has no sparse form), at most max. */
static int spool(const struct sbx_file_reader *r, uint64_t max, int fd, uint64_t *total,
                 const char *path, struct sbx_error *err)
{
    static char zeros[CHUNK];
    char buf[CHUNK];
    *total = 0;
    for (;;) {
        long n = r->read(r->ctx, buf, sizeof(buf), err);
        uint64_t hole = 0;
        if (n < 0)
            return (int)n;
        if (n == 0 && r->skip_hole && r->skip_hole(r->ctx, &hole, err) < 0)
            return -err->code;
        if (n == 0 && hole == 0)
            return 0;
        for (uint64_t left = n ? (uint64_t)n : hole; left;) {
            size_t k = left < sizeof(buf) ? (size_t)left : sizeof(buf);
            if (*total + k > max)
                return sbx_error_set(err, SBX_E_TOOBIG, 0, "'%s' would be larger than %llu bytes",
                                     path, (unsigned long long)max);
            if (sbx_fd_write_all(fd, n ? buf + ((uint64_t)n - left) : zeros, k, err) < 0)
                return -err->code;
            *total += k;
            left -= k;
        }
    }
}

int sbx__remote_write(struct sbx_session *bs, const char *path, const struct sbx_file_reader *r,
                      uint64_t max, mode_t mode, int flags, struct sbx_error *err)
{
    int fd = -1;
    uint64_t size = 0;
    char more[64];
    int rc = tmpfile_fd(&fd, err);
    if (max > SBX__REMOTE_FILE_MAX)
        max = SBX__REMOTE_FILE_MAX;
    if (rc == 0)
        rc = spool(r, max, fd, &size, path, err);
    if (rc == 0 && lseek(fd, 0, SEEK_SET) < 0)
        rc = sbx_error_errno(err, errno, "lseek");
    snprintf(more, sizeof(more), "&mode=%o%s%s%s", (unsigned)(mode & 07777),
             flags & SBX_WRITE_PARENTS ? "&parents=1" : "", flags & SBX_WRITE_EXCL ? "&excl=1" : "",
             flags & SBX_WRITE_APPEND ? "&append=1" : "");
    struct sbx__http_req q = {
            .source = fd_source, .source_ud = &fd, .upload_size = (int64_t)size, .timeout_ms = -1};
    if (rc == 0)
        rc = request(RS(bs), "PUT", "files", path, more, &q, NULL, err);
    sbx_fd_close(&fd);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Workspace tars */

int sbx__remote_workspace_export(struct sbx_session *bs, int out_fd, struct sbx_error *err)
{
    struct sbx__http_req q = {.sink = sbx__http_sink_fd, .sink_ud = &out_fd, .timeout_ms = -1};
    return request(RS(bs), "GET", "workspace", NULL, NULL, &q, NULL, err);
}

int sbx__remote_workspace_import(struct sbx_session *bs, int in_fd, struct sbx_error *err)
{
    /* The node takes a body of a known length: the stream is counted on this host first. */
    int fd = -1;
    char buf[CHUNK];
    int64_t size = 0;
    int rc = tmpfile_fd(&fd, err);
    for (ssize_t k; rc == 0 && (k = read(in_fd, buf, sizeof(buf))) != 0;) {
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            rc = sbx_error_errno(err, errno, "cannot read the workspace's tar");
        else if ((size += k) > SBX__REMOTE_TAR_MAX)
            rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "a workspace tar over %lld bytes",
                               (long long)SBX__REMOTE_TAR_MAX);
        else
            rc = sbx_fd_write_all(fd, buf, (size_t)k, err);
    }
    if (rc == 0 && lseek(fd, 0, SEEK_SET) < 0)
        rc = sbx_error_errno(err, errno, "lseek");
    struct sbx__http_req q = {
            .source = fd_source, .source_ud = &fd, .upload_size = size, .timeout_ms = -1};
    if (rc == 0)
        rc = request(RS(bs), "PUT", "workspace", NULL, NULL, &q, NULL, err);
    sbx_fd_close(&fd);
    return rc;
}
