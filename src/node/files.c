/* The daemon's file and workspace requests (docs/internals/node.md, "Files and workspace
 * streams"): every one is the local provider's own session call on the sandbox, so a path is
 * resolved under the workspace with the local provider's rules (nothing followed out of it, a
 * planted symlink refused) and the daemon adds only the transport and its bounds. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "node/daemon.h"
#include "sandbox/provider.h"
#include "sandbox/session/internal.h"
#include "sandbox/snapshot/stream.h"
#include "sbx/fs.h"
#include "sbx/session.h"
#include "sbx/snapshot.h"

#define CHUNK 65536

/* Workspace tars go through the daemon's own snapshot store, one at a time: two takes of the
 * same content share a reference, which one must not remove under the other. */
static pthread_mutex_t tar_mu = PTHREAD_MUTEX_INITIALIZER;

static int open_session(const char *id, struct sbx_client **cl, struct sbx_session **s,
                        struct sbx_error *err)
{
    *cl = NULL;
    *s = NULL;
    if (sbx_client_new("local", NULL, cl, err) < 0)
        return -err->code;
    return sbx_client_attach(*cl, id, s, err);
}

/* The path= parameter (required) into out. */
static int path_param(const struct node_req *r, char *out, size_t cap, struct sbx_error *err)
{
    int k = node_query(r->query, "path", 0, out, cap);
    if (k < 0)
        return sbx_error_set(err, SBX_E_INVAL, 0, "'path' is malformed or over %zu bytes", cap - 1);
    if (k == 0)
        return sbx_error_set(err, SBX_E_INVAL, 0, "the request needs 'path'");
    return 0;
}

/* A flag parameter: 1 when name=1 is given. */
static int flag_param(const struct node_req *r, const char *name)
{
    char v[4];
    return node_query(r->query, name, 0, v, sizeof(v)) == 1 && strcmp(v, "1") == 0;
}

/* mode= in octal (at most 07777) into *mode; absent: 0. */
static int mode_param(const struct node_req *r, mode_t *mode, struct sbx_error *err)
{
    char v[16], *end;
    *mode = 0;
    int k = node_query(r->query, "mode", 0, v, sizeof(v));
    if (k == 0)
        return 0;
    unsigned long m = k > 0 && v[0] ? strtoul(v, &end, 8) : 0;
    if (k < 0 || !v[0] || *end || m > 07777)
        return sbx_error_set(err, SBX_E_INVAL, 0, "'mode' is not an octal mode up to 7777");
    *mode = (mode_t)m;
    return 0;
}

static json_t *entry_json(const struct sbx_dirent *e)
{
    static const char *const types[] = {"file", "dir", "symlink", "other"};
    json_t *j = json_pack("{s:s, s:s, s:i, s:I, s:I, s:I, s:I}", "name", e->name ? e->name : "",
                          "type", types[e->type <= SBX_FILE_OTHER ? e->type : SBX_FILE_OTHER],
                          "mode", (int)(e->mode & 07777), "size", (json_int_t)e->size, "mtime_ns",
                          (json_int_t)e->mtime_ns, "uid", (json_int_t)e->uid, "gid",
                          (json_int_t)e->gid);
    if (e->target)
        json_object_set_new(j, "target", json_string(e->target));
    return j;
}

static int respond_head(struct node_conn *c, const char *type, uint64_t len, struct sbx_error *err)
{
    char head[256];
    int hn = snprintf(head, sizeof(head),
                      "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %llu\r\n"
                      "Sbx-Node-Version: " NODE_VERSION "\r\n\r\n",
                      type, (unsigned long long)len);
    return node_send(c, head, (size_t)hn, err);
}

/* size bytes of fd (from its start) as the answer's body. Once the head is out, an error can
 * only end the connection (the caller's -SBX_E_IO). */
static int send_fd(struct node_conn *c, int fd, uint64_t size, const char *type,
                   struct sbx_error *err)
{
    char b[CHUNK];
    int rc = respond_head(c, type, size, err);
    for (uint64_t left = size; rc == 0 && left;) {
        ssize_t k = read(fd, b, left < sizeof(b) ? (size_t)left : sizeof(b));
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return sbx_error_set(err, SBX_E_IO, 0, "the file shrank while it was sent");
        rc = node_send(c, b, (size_t)k, err);
        left -= (uint64_t)k;
    }
    return rc;
}

static void get_file(struct node_conn *c, struct sbx_session *s, const char *path)
{
    struct sbx_error err = SBX_ERROR_INIT;
    int fd = -1;
    uint64_t size = 0;
    if (sbx_session_read_open(s, path, &fd, &size, &err) == 0 && size > NODE_FILE_MAX)
        sbx_error_set(&err, SBX_E_TOOBIG, 0, "'%s' is over %llu bytes", path,
                      (unsigned long long)NODE_FILE_MAX);
    if (err.code)
        node_respond_error(c, &err);
    else
        send_fd(c, fd, size, "application/octet-stream", &err);
    sbx_fd_close(&fd);
}

/* The request body left on the connection, read as a file's content. */
struct body_reader {
    struct node_conn *c;
    struct node_req *r;
};

static long body_read(void *ctx, void *buf, size_t n, struct sbx_error *err)
{
    struct body_reader *b = ctx;
    if (b->r->body_left <= 0)
        return 0;
    if ((int64_t)n > b->r->body_left)
        n = (size_t)b->r->body_left;
    long k;
    if (b->c->in.len) {
        k = (long)(b->c->in.len < n ? b->c->in.len : n);
        memcpy(buf, b->c->in.data, (size_t)k);
        sbx_buf_consume(&b->c->in, (size_t)k);
    } else if ((k = node_recv(b->c, buf, n, err)) == 0) {
        return sbx_error_set(err, SBX_E_IO, 0, "the request body was cut short");
    }
    if (k > 0)
        b->r->body_left -= k;
    return k;
}

static void put_file(struct node_conn *c, struct node_req *r, struct sbx_session *s,
                     const char *path)
{
    struct sbx_error err = SBX_ERROR_INIT;
    mode_t mode;
    int flags = (flag_param(r, "parents") ? SBX_WRITE_PARENTS : 0) |
                (flag_param(r, "excl") ? SBX_WRITE_EXCL : 0) |
                (flag_param(r, "append") ? SBX_WRITE_APPEND : 0);
    uint64_t size = r->content_length > 0 ? (uint64_t)r->content_length : 0;
    struct body_reader br = {c, r};
    struct sbx_file_reader rd = {.read = body_read, .ctx = &br};
    int rc = mode_param(r, &mode, &err);
    if (rc == 0 && size > NODE_FILE_MAX)
        rc = sbx_error_set(&err, SBX_E_TOOBIG, 0, "a file over %llu bytes",
                           (unsigned long long)NODE_FILE_MAX);
    char *rel = NULL;
    /* The session layer's own normalisation, then the local provider's write (no symlink
     * followed, the replacement atomic), reading the body as it arrives. */
    if (rc == 0 && (rc = sbx__session_path(s, path, 0, &rel, &err)) == 0)
        rc = s->ops->write(s, rel, &rd, size, (mode ? mode : 0644) & SBX_FS_MODE_MASK, flags, &err);
    free(rel);
    if (rc == 0 && r->body_left)
        rc = sbx_error_set(&err, SBX_E_IO, 0, "the request body was cut short");
    if (rc < 0) {
        node_respond_error(c, &err);
        return;
    }
    json_t *ans = json_pack("{s:I}", "size", (json_int_t)size);
    node_respond(c, 200, ans, &err);
    json_decref(ans);
}

static void answer(struct node_conn *c, int rc, json_t *ans, struct sbx_error *err)
{
    if (rc < 0)
        node_respond_error(c, err);
    else
        node_respond(c, 200, ans, err);
    json_decref(ans);
}

/* The requests on one path: files (GET, PUT, DELETE), files/stat, files/list, files/mkdir,
 * files/chmod. */
static void path_request(struct node_conn *c, struct node_req *r, struct sbx_session *s,
                         const char *op)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char path[NODE_PATH_MAX + 1];
    const char *m = r->method;
    json_t *ans = NULL;
    int rc = path_param(r, path, sizeof(path), &err);
    if (rc < 0) {
        node_respond_error(c, &err);
        return;
    }
    if (!op[0] && strcmp(m, "GET") == 0) {
        get_file(c, s, path);
        return;
    }
    if (!op[0] && strcmp(m, "PUT") == 0) {
        put_file(c, r, s, path);
        return;
    }
    if (!op[0] && strcmp(m, "DELETE") == 0) {
        int fl = (flag_param(r, "recursive") ? SBX_RM_RECURSIVE : 0) |
                 (flag_param(r, "force") ? SBX_RM_FORCE : 0);
        rc = sbx_session_rm(s, path, fl, &err);
    } else if (strcmp(op, "stat") == 0 && strcmp(m, "GET") == 0) {
        struct sbx_dirent e = {0};
        if ((rc = sbx_session_stat(s, path, &e, &err)) == 0)
            ans = entry_json(&e);
        sbx_dirent_release(&e);
    } else if (strcmp(op, "list") == 0 && strcmp(m, "GET") == 0) {
        struct sbx_dirlist l = {0};
        if ((rc = sbx_session_ls(s, path, &l, &err)) == 0) {
            json_t *a = json_array();
            for (size_t i = 0; i < l.n; i++)
                json_array_append_new(a, entry_json(&l.v[i]));
            ans = json_pack("{s:o}", "entries", a);
        }
        sbx_dirlist_release(&l);
    } else if (strcmp(op, "mkdir") == 0 && strcmp(m, "POST") == 0) {
        rc = sbx_session_mkdir(s, path, flag_param(r, "parents") ? SBX_MKDIR_PARENTS : 0, &err);
    } else if (strcmp(op, "chmod") == 0 && strcmp(m, "POST") == 0) {
        mode_t mode;
        if ((rc = mode_param(r, &mode, &err)) == 0)
            rc = sbx_session_chmod(s, path, mode, &err);
    } else {
        rc = sbx_error_set(&err, SBX_E_NOTFOUND, 0, "no such resource");
    }
    answer(c, rc, rc == 0 && !ans ? json_object() : ans, &err);
}

/* ---------------------------------------------------------------------------------------------
 * Workspace tar streams */

static int tmpfile_fd(struct sbx_error *err)
{
    const char *tmp = getenv("TMPDIR");
    int fd = open(tmp && tmp[0] == '/' ? tmp : "/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0)
        return sbx_error_errno(err, errno, "cannot make a temporary file");
    return fd;
}

static int open_store(struct node_daemon *d, struct sbx_snapshot_store **st, struct sbx_error *err)
{
    char p[4200];
    snprintf(p, sizeof(p), "%s/store", d->state_dir);
    return sbx_snapshot_store_open(p, st, err);
}

/* GET .../workspace: the workspace as an uncompressed pax tar ("./path" members, directories
 * first, symlinks last), taken through the daemon's store (no symlink followed, the take's
 * limits), which keeps nothing after. */
static void export_ws(struct node_conn *c, struct sbx_session *s)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_snapshot_store *st = NULL;
    char *ref = NULL;
    int wfd = -1, fd = -1;
    off_t size = 0;
    pthread_mutex_lock(&tar_mu);
    if (!s->ops->workspace_fd || s->ops->workspace_fd(s, &wfd, &err) < 0 ||
        open_store(c->d, &st, &err) < 0 || sbx_snapshot_take(st, wfd, NULL, &ref, &err) < 0 ||
        (fd = tmpfile_fd(&err)) < 0 ||
        sbx__snapshot_write_workspace_tar(st, ref, fd, NULL, NULL, &err) < 0)
        goto out;
    if ((size = lseek(fd, 0, SEEK_CUR)) < 0 || lseek(fd, 0, SEEK_SET) < 0)
        sbx_error_errno(&err, errno, "cannot read the workspace's tar");
out:
    if (ref)
        sbx_snapshot_remove(st, ref, 1, NULL);
    pthread_mutex_unlock(&tar_mu);
    if (err.code)
        node_respond_error(c, &err);
    else
        send_fd(c, fd, (uint64_t)size, "application/x-tar", &err);
    free(ref);
    sbx_snapshot_store_free(st);
    if (fd >= 0)
        close(fd);
}

/* PUT .../workspace: a tar (hostile: the rules of a snapshot import) unpacked into the
 * workspace, which must be empty (a fresh sandbox). */
static void import_ws(struct node_conn *c, struct node_req *r, struct sbx_session *s)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_snapshot_store *st = NULL;
    char *ref = NULL, b[CHUNK];
    int wfd = -1, fd = -1;
    struct body_reader br = {c, r};
    if (r->content_length > NODE_TAR_MAX) {
        sbx_error_set(&err, SBX_E_TOOBIG, 0, "a workspace tar over %llu bytes",
                      (unsigned long long)NODE_TAR_MAX);
        goto done;
    }
    if ((fd = tmpfile_fd(&err)) < 0)
        goto done;
    for (long k; (k = body_read(&br, b, sizeof(b), &err)) != 0;)
        if (k < 0 || sbx_fd_write_all(fd, b, (size_t)k, &err) < 0)
            goto done;
    if (lseek(fd, 0, SEEK_SET) < 0) {
        sbx_error_errno(&err, errno, "cannot read the workspace's tar");
        goto done;
    }
    pthread_mutex_lock(&tar_mu);
    if (s->ops->workspace_fd && s->ops->workspace_fd(s, &wfd, &err) == 0 &&
        open_store(c->d, &st, &err) == 0 &&
        sbx__snapshot_import_workspace(st, fd, NULL, &ref, &err) == 0)
        sbx_snapshot_restore(st, ref, wfd, &err);
    else if (!err.code)
        sbx_error_set(&err, SBX_E_UNSUPPORTED, 0, "this sandbox's workspace cannot be written");
    if (ref)
        sbx_snapshot_remove(st, ref, 1, NULL);
    pthread_mutex_unlock(&tar_mu);
done:
    if (err.code)
        node_respond_error(c, &err);
    else
        node_respond(c, 200, NULL, &err);
    free(ref);
    sbx_snapshot_store_free(st);
    if (fd >= 0)
        close(fd);
}

void node_files(struct node_conn *c, struct node_req *r, const char *id, const char *rest)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_client *cl = NULL;
    struct sbx_session *s = NULL;
    if (open_session(id, &cl, &s, &err) < 0) {
        node_respond_error(c, &err);
    } else if (strcmp(rest, "workspace") == 0 && strcmp(r->method, "GET") == 0) {
        export_ws(c, s);
    } else if (strcmp(rest, "workspace") == 0 && strcmp(r->method, "PUT") == 0) {
        import_ws(c, r, s);
    } else if (strcmp(rest, "files") == 0 || strncmp(rest, "files/", 6) == 0) {
        path_request(c, r, s, rest[5] ? rest + 6 : "");
    } else {
        sbx_error_set(&err, SBX_E_NOTFOUND, 0, "no such resource");
        node_respond_error(c, &err);
    }
    sbx_session_free(s);
    sbx_client_free(cl);
}
