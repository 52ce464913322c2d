/* Workspace files of an LXD sandbox: contents and metadata through the files API
 * (GET/HEAD/POST/DELETE /1.0/instances/NAME/files?path=P with the X-LXD-* headers), directory
 * listings and the changes the API cannot make (mode, group, recursive removal, the final
 * rename of a replaced file) through commands of a fixed argv run as root, paths passed as
 * arguments, never spliced into a shell line.
 *
 * Paths are resolved here, component by component, from what the server reports: a symlink
 * that leads out of the workspace is refused (SBX_E_PERM). The server follows symlinks on a
 * write, so a file that exists is replaced by writing a fresh name beside it and renaming it
 * over (the rename replaces a planted link, never its target). The server resolves again when
 * it acts; a process in the sandbox that swaps a directory for a symlink in between can make
 * one operation land elsewhere in the same container, never on a host (LXD scopes every path
 * to the instance), see docs/internals/lxd-provider.md. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "providers/lxd/exec.h"
#include "sandbox/session/internal.h"
#include "sandbox/shellfs/shellfs.h"
#include "sbx/fs.h"
#include "sbx/hash.h"
#include "sbx/json.h"

#define MAX_HOPS   40
#define LS_OUT_MAX ((size_t)64 << 20)
#define RUN_MAX    ((size_t)1 << 20)
#define LINK_MAX_B 4096
#define COPY_CHUNK 65536
#define READ_SLACK ((uint64_t)1 << 20)

/* A files API request on abs. */
static int file_call(struct sbx__lxd_session *s, const char *method, const char *abs,
                     struct sbx__lxd_req *req, struct sbx__lxd_resp *resp, struct sbx_error *err)
{
    char *q = sbx__lxd_escape(abs, 1);
    char *rest = sbx_xasprintf("/files?path=%s", q);
    char *path = sbx__lxd_inst_path(s->name, rest);
    req->method = method;
    req->path = path;
    int rc = sbx__lxd_call(&s->sv, req, resp, err);
    free(path);
    free(rest);
    free(q);
    return rc;
}

/* Metadata of abs (the last component not followed). -SBX_E_NOTFOUND without a message when
 * it does not exist; a symlink's target (the server's resolution, absolute) in *target when
 * target is not NULL. */
static int head(struct sbx__lxd_session *s, const char *abs, struct sbx__lxd_fmeta *out,
                char **target, struct sbx_error *err)
{
    struct sbx__lxd_req req = {.upload_fd = -1, .download_fd = -1, .max_body = LINK_MAX_B};
    struct sbx__lxd_resp resp;
    sbx__lxd_resp_init(&resp);
    int rc = file_call(s, "HEAD", abs, &req, &resp, err);
    if (rc == 0 && resp.status == 404)
        rc = -SBX_E_NOTFOUND;
    else if (rc == 0 && resp.status >= 400)
        rc = sbx__lxd_status_error(&s->sv, resp.status, &resp.body, err);
    else if (rc == 0 && !resp.meta.have)
        rc = sbx_error_set(err, SBX_E_PARSE, 0, "LXD did not say what '%s' is", abs);
    if (rc == 0 && target && resp.meta.type == SBX_FILE_SYMLINK) {
        /* A symlink's GET is its target as the server resolves it. */
        sbx__lxd_resp_release(&resp);
        sbx__lxd_resp_init(&resp);
        rc = file_call(s, "GET", abs, &req, &resp, err);
        if (rc == 0 && resp.status >= 400)
            rc = sbx__lxd_status_error(&s->sv, resp.status, &resp.body, err);
        if (rc == 0)
            *target = sbx_xstrndup(resp.body.data ? resp.body.data : "", resp.body.len);
    }
    if (rc == 0)
        *out = resp.meta;
    sbx__lxd_resp_release(&resp);
    return rc;
}

static int within(const char *path, const char *root)
{
    size_t n = strlen(root);
    return strncmp(path, root, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

static void split(const char *rel, struct sbx_strv *comps)
{
    for (const char *p = rel; *p;) {
        const char *slash = strchr(p, '/');
        size_t k = slash ? (size_t)(slash - p) : strlen(p);
        if (k)
            sbx_strv_push_take(comps, sbx_xstrndup(p, k));
        p += k + (slash ? 1 : 0);
    }
}

/* One step of the walk: cand exists as a symlink: follow it while it stays in the workspace. */
static int follow_link(const char *rel, const char *comp, const char *root, char *target, int *hops,
                       char **cand, struct sbx_error *err)
{
    size_t n = target ? strlen(target) : 0;
    while (n > 1 && target[n - 1] == '/')
        target[--n] = '\0';
    if (!target || target[0] != '/' || !within(target, root) || ++*hops > MAX_HOPS ||
        strstr(target, "/../") || (n >= 3 && strcmp(target + n - 3, "/..") == 0)) {
        free(target);
        return sbx_error_set(err, SBX_E_PERM, 0,
                             "path '%s' leads out of the workspace (symlink "
                             "'%s')",
                             rel, comp);
    }
    free(*cand);
    *cand = target;
    return 0;
}

/* The walk: *base is the resolved existing part; missing its missing components in order. */
static int resolve_walk(struct sbx__lxd_session *s, const char *rel, int follow_final, char **base,
                        struct sbx_strv *missing, struct sbx_error *err)
{
    const char *root = s->base.root;
    char *cur = sbx_xstrdup(root);
    struct sbx_strv comps;
    int rc = 0, hops = 0;
    sbx_strv_init(&comps);
    split(rel, &comps);
    for (size_t i = 0; i < comps.n && rc == 0; i++) {
        if (missing->n) {
            /* Below a missing directory: nothing to ask the server. */
            sbx_strv_push_take(missing,
                               sbx_xasprintf("%s/%s", missing->v[missing->n - 1], comps.v[i]));
            continue;
        }
        char *cand = sbx_xasprintf("%s/%s", strcmp(cur, "/") ? cur : "", comps.v[i]);
        int last = i + 1 == comps.n;
        struct sbx__lxd_fmeta m;
        char *target = NULL;
        rc = head(s, cand, &m, last && !follow_final ? NULL : &target, err);
        if (rc == -SBX_E_NOTFOUND) {
            rc = 0;
            sbx_strv_push_take(missing, cand);
            continue;
        }
        if (rc == 0 && m.type == SBX_FILE_SYMLINK && (!last || follow_final))
            rc = follow_link(rel, comps.v[i], root, target, &hops, &cand, err);
        else
            free(target);
        if (rc < 0) {
            free(cand);
            break;
        }
        free(cur);
        cur = cand;
    }
    sbx_strv_release(&comps);
    if (rc < 0) {
        free(cur);
        return rc;
    }
    *base = cur;
    return 0;
}

int sbx__lxd_resolve(struct sbx__lxd_session *s, const char *rel, int follow_final, char **out,
                     int *exists, struct sbx_error *err)
{
    struct sbx_strv missing;
    char *base = NULL;
    sbx_strv_init(&missing);
    int rc = resolve_walk(s, rel, follow_final, &base, &missing, err);
    if (rc == 0) {
        *exists = missing.n == 0;
        *out = missing.n ? sbx_xstrdup(missing.v[missing.n - 1]) : base;
        if (missing.n)
            free(base);
    }
    sbx_strv_release(&missing);
    return rc;
}

/* Errors of a helper command, from its exit status and what it said. */
static int run_error(const struct sbx__lxd_run *r, const char *what, const char *rel,
                     struct sbx_error *err)
{
    const char *msg = r->err.len ? r->err.data : r->out.data ? r->out.data : "";
    int n = (int)strcspn(msg, "\n");
    enum sbx_errcode code = strstr(msg, "No such file") || strstr(msg, "not found") ||
                                            strstr(msg, "unknown group") ||
                                            strstr(msg, "unknown user")
                                    ? SBX_E_NOTFOUND
                            : strstr(msg, "exists")           ? SBX_E_EXISTS
                            : strstr(msg, "ermission denied") ? SBX_E_PERM
                            : strstr(msg, "not empty")        ? SBX_E_INVAL
                            : strstr(msg, "Not a directory")  ? SBX_E_INVAL
                            : strstr(msg, "Is a directory")   ? SBX_E_INVAL
                                                              : SBX_E_SANDBOX;
    return sbx_error_set(err, code, 0, "cannot %s '%s': %.*s (exit status %d)", what, rel, n, msg,
                         r->code);
}

static int run(struct sbx__lxd_session *s, const char *const *argv, const char *what,
               const char *rel, struct sbx_error *err)
{
    struct sbx__lxd_run r;
    sbx__lxd_run_init(&r, RUN_MAX);
    int rc = sbx__lxd_exec_run(s, argv, &r, err);
    if (rc == 0 && r.code != 0)
        rc = run_error(&r, what, rel, err);
    sbx__lxd_run_release(&r);
    return rc;
}

/* An answer of the files API that must be a success. */
static int file_ok(struct sbx__lxd_session *s, const struct sbx__lxd_resp *resp, const char *rel,
                   struct sbx_error *err)
{
    if (resp->status == 404)
        return sbx_error_set(err, SBX_E_NOTFOUND, ENOENT, "no such file or directory '%s'", rel);
    if (resp->status >= 400) {
        int rc = sbx__lxd_status_error(&s->sv, resp->status, &resp->body, err);
        if (strstr(err->msg, "not empty"))
            rc = sbx_error_set(err, SBX_E_INVAL, ENOTEMPTY, "directory '%s' is not empty", rel);
        return rc;
    }
    return 0;
}

/* The owner's headers, and a mode. */
static void owner_headers(const struct sbx__lxd_session *s, struct sbx__lxd_req *req, char *uid,
                          char *gid, char *mode, mode_t m, const char *type)
{
    snprintf(uid, 32, "X-LXD-uid: %ld", s->owner.uid);
    snprintf(gid, 32, "X-LXD-gid: %ld", s->owner.gid);
    snprintf(mode, 32, "X-LXD-mode: 0%o", (unsigned)(m & 07777));
    req->headers[0] = uid;
    req->headers[1] = gid;
    req->headers[2] = mode;
    req->headers[3] = type;
}

static int make_dir(struct sbx__lxd_session *s, const char *abs, const char *rel,
                    struct sbx_error *err)
{
    char uid[32], gid[32], mode[32];
    struct sbx__lxd_req req = {.upload_fd = -1, .download_fd = -1};
    struct sbx__lxd_resp resp;
    owner_headers(s, &req, uid, gid, mode, 0755, "X-LXD-type: directory");
    sbx__lxd_resp_init(&resp);
    int rc = file_call(s, "POST", abs, &req, &resp, err);
    if (rc == 0)
        rc = file_ok(s, &resp, rel, err);
    sbx__lxd_resp_release(&resp);
    return rc;
}

int sbx__lxd_mkdir(struct sbx_session *bs, const char *path, int flags, struct sbx_error *err)
{
    struct sbx__lxd_session *s = (struct sbx__lxd_session *)bs;
    struct sbx_strv missing;
    char *base = NULL;
    sbx_strv_init(&missing);
    int rc = resolve_walk(s, path, 1, &base, &missing, err);
    if (rc < 0)
        goto out;
    if (missing.n == 0) {
        struct sbx__lxd_fmeta m;
        rc = head(s, base, &m, NULL, err);
        if (rc == 0 && (!(flags & SBX_MKDIR_PARENTS) || m.type != SBX_FILE_DIR))
            rc = sbx_error_set(err, SBX_E_EXISTS, EEXIST, "'%s' exists", path);
        goto out;
    }
    if (missing.n > 1 && !(flags & SBX_MKDIR_PARENTS)) {
        rc = sbx_error_set(err, SBX_E_NOTFOUND, ENOENT, "no parent directory for '%s'", path);
        goto out;
    }
    for (size_t i = 0; i < missing.n && rc == 0; i++)
        rc = make_dir(s, missing.v[i], path, err);
out:
    free(base);
    sbx_strv_release(&missing);
    return rc;
}

int sbx__lxd_rm(struct sbx_session *bs, const char *path, int flags, struct sbx_error *err)
{
    struct sbx__lxd_session *s = (struct sbx__lxd_session *)bs;
    char *abs = NULL;
    int exists = 0;
    struct sbx__lxd_fmeta m;
    int rc = sbx__lxd_resolve(s, path, 0, &abs, &exists, err);
    if (rc < 0)
        goto out;
    if (!exists) {
        rc = flags & SBX_RM_FORCE
                     ? 0
                     : sbx_error_set(err, SBX_E_NOTFOUND, ENOENT, "no such file '%s'", path);
        goto out;
    }
    if ((rc = head(s, abs, &m, NULL, err)) < 0)
        goto out;
    if (m.type == SBX_FILE_DIR && (flags & SBX_RM_RECURSIVE)) {
        const char *argv[] = {"rm", "-rf", "--", abs, NULL};
        rc = run(s, argv, "remove", path, err);
        goto out;
    }
    /* A file, a symlink (itself, never its target) or an empty directory. */
    struct sbx__lxd_req req = {.upload_fd = -1, .download_fd = -1};
    struct sbx__lxd_resp resp;
    sbx__lxd_resp_init(&resp);
    rc = file_call(s, "DELETE", abs, &req, &resp, err);
    if (rc == 0)
        rc = file_ok(s, &resp, path, err);
    sbx__lxd_resp_release(&resp);
out:
    free(abs);
    return rc;
}

int sbx__lxd_chmod(struct sbx_session *bs, const char *path, mode_t mode, struct sbx_error *err)
{
    struct sbx__lxd_session *s = (struct sbx__lxd_session *)bs;
    char *abs = NULL, m[16];
    int exists = 0;
    struct sbx__lxd_fmeta fm;
    int rc = sbx__lxd_resolve(s, path, 0, &abs, &exists, err);
    if (rc == 0 && !exists)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, ENOENT, "no such file '%s'", path);
    if (rc == 0)
        rc = head(s, abs, &fm, NULL, err);
    if (rc == 0 && fm.type == SBX_FILE_SYMLINK)
        rc = sbx_error_set(err, SBX_E_PERM, 0, "'%s' is a symlink", path);
    if (rc == 0) {
        snprintf(m, sizeof(m), "%o", (unsigned)mode);
        const char *argv[] = {"chmod", m, "--", abs, NULL};
        rc = run(s, argv, "change the mode of", path, err);
    }
    free(abs);
    return rc;
}

int sbx__lxd_chgrp(struct sbx_session *bs, const char *path, const char *group,
                   struct sbx_error *err)
{
    struct sbx__lxd_session *s = (struct sbx__lxd_session *)bs;
    char *abs = NULL;
    int exists = 0;
    int rc = sbx__lxd_resolve(s, path, 0, &abs, &exists, err);
    if (rc == 0 && !exists)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, ENOENT, "no such file '%s'", path);
    if (rc == 0) {
        const char *argv[] = {"chgrp", "-h", "--", group, abs, NULL};
        rc = run(s, argv, "set the group of", path, err);
    }
    free(abs);
    return rc;
}

static const char *base_name(const char *rel)
{
    const char *slash = strrchr(rel, '/');
    return slash ? slash + 1 : rel;
}

/* The size of regular file abs: one byte of it asked for, the rest told by Content-Range. */
static int file_size(struct sbx__lxd_session *s, const char *abs, uint64_t *out,
                     struct sbx_error *err)
{
    struct sbx__lxd_req req = {.upload_fd = -1, .download_fd = -1, .max_body = 64};
    struct sbx__lxd_resp resp;
    req.headers[0] = "Range: bytes=0-0";
    sbx__lxd_resp_init(&resp);
    int rc = file_call(s, "GET", abs, &req, &resp, err);
    if (rc == 0 && resp.status != 416)
        rc = file_ok(s, &resp, abs, err);
    if (rc == 0 && resp.meta.total < 0 && resp.status == 200)
        resp.meta.total = (int64_t)resp.body.len; /* a server that ignores ranges */
    if (rc == 0 && resp.meta.total < 0)
        rc = sbx_error_set(err, SBX_E_PARSE, 0, "LXD did not say how large '%s' is", abs);
    if (rc == 0)
        *out = (uint64_t)resp.meta.total;
    sbx__lxd_resp_release(&resp);
    return rc;
}

int sbx__lxd_stat(struct sbx_session *bs, const char *path, struct sbx_dirent *out,
                  struct sbx_error *err)
{
    struct sbx__lxd_session *s = (struct sbx__lxd_session *)bs;
    char *abs = NULL, *target = NULL;
    int exists = 0;
    uint64_t size = 0;
    struct sbx__lxd_fmeta m;
    int rc = sbx__lxd_resolve(s, path, 0, &abs, &exists, err);
    if (rc == 0 && !exists)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, ENOENT, "no such file '%s'", path);
    if (rc == 0)
        rc = head(s, abs, &m, NULL, err);
    if (rc == -SBX_E_NOTFOUND)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, ENOENT, "no such file '%s'", path);
    if (rc == 0 && m.type == SBX_FILE_REGULAR)
        rc = file_size(s, abs, &size, err);
    if (rc == 0 && m.type == SBX_FILE_SYMLINK) {
        /* The link's own text: the server reports only its resolution. */
        const char *argv[] = {"readlink", "--", abs, NULL};
        struct sbx__lxd_run r;
        sbx__lxd_run_init(&r, RUN_MAX);
        rc = sbx__lxd_exec_run(s, argv, &r, err);
        if (rc == 0 && r.code != 0)
            rc = run_error(&r, "read the symlink", path, err);
        size_t n = r.out.len;
        while (n && r.out.data[n - 1] == '\n')
            n--;
        if (rc == 0)
            target = sbx_xstrndup(r.out.data, n);
        size = n;
        sbx__lxd_run_release(&r);
    }
    if (rc == 0) {
        memset(out, 0, sizeof(*out));
        out->name = sbx_xstrdup(base_name(path));
        out->target = target;
        out->type = m.type;
        out->mode = m.mode;
        out->size = size;
        out->mtime_ns = m.mtime_ns;
        out->uid = m.uid < 0 ? 0 : (uid_t)m.uid;
        out->gid = m.gid < 0 ? 0 : (gid_t)m.gid;
        target = NULL;
    }
    free(target);
    free(abs);
    return rc;
}

/* One record per entry: "<mode hex> <size> <uid> <gid> <mtime>\n<name>\0", then for a symlink
 * "<target>\0". Names are NUL-terminated, so none can forge a record. */
static const char LS[] = "cd -- \"$1\" || exit 3\n"
                         "for f in * .*; do\n"
                         "  case $f in .|..) continue;; esac\n"
                         "  [ -e \"$f\" ] || [ -L \"$f\" ] || continue\n"
                         "  stat -c '%f %s %u %g %Y' -- \"$f\" || continue\n"
                         "  printf '%s\\0' \"$f\"\n"
                         "  if [ -L \"$f\" ]; then printf '%s\\0' \"$(readlink -- \"$f\")\"; fi\n"
                         "done\n";

int sbx__lxd_ls(struct sbx_session *bs, const char *path, struct sbx_dirlist *out,
                struct sbx_error *err)
{
    struct sbx__lxd_session *s = (struct sbx__lxd_session *)bs;
    char *abs = NULL;
    int exists = 0;
    struct sbx__lxd_run r;
    struct sbx_dirlist l = {0};
    sbx__lxd_run_init(&r, LS_OUT_MAX);
    int rc = sbx__lxd_resolve(s, path, 1, &abs, &exists, err);
    if (rc == 0 && !exists)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, ENOENT, "no such file or directory '%s'", path);
    if (rc < 0)
        goto out;
    struct sbx__lxd_fmeta m;
    if ((rc = head(s, abs, &m, NULL, err)) < 0)
        goto out;
    if (m.type != SBX_FILE_DIR) {
        /* A file lists as itself. */
        l.v = sbx_xcalloc(1, sizeof(*l.v));
        rc = sbx__lxd_stat(bs, path, &l.v[0], err);
        if (rc == 0)
            l.n = 1, *out = l;
        else
            free(l.v);
        goto out;
    }
    const char *argv[] = {"/bin/sh", "-c", LS, "sh", abs, NULL};
    if ((rc = sbx__lxd_exec_run(s, argv, &r, err)) < 0)
        goto out;
    if (r.code != 0) {
        rc = run_error(&r, "list", path, err);
        goto out;
    }
    if ((rc = sbx__shellfs_parse_entries(r.out.data ? r.out.data : "", r.out.len, 0, &l, err)) <
        0) {
        sbx_dirlist_release(&l);
        goto out;
    }
    if (l.n)
        sbx__shellfs_sort_entries(&l);
    *out = l;
out:
    sbx__lxd_run_release(&r);
    free(abs);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Contents */

int sbx__lxd_read_open(struct sbx_session *bs, const char *path, int *out_fd, uint64_t *out_size,
                       struct sbx_error *err)
{
    struct sbx__lxd_session *s = (struct sbx__lxd_session *)bs;
    char *abs = NULL;
    int exists = 0, data = -1;
    uint64_t size = 0;
    struct sbx__lxd_fmeta m;
    int rc = sbx__lxd_resolve(s, path, 1, &abs, &exists, err);
    if (rc == 0 && !exists)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, ENOENT, "no such file '%s'", path);
    if (rc == 0)
        rc = head(s, abs, &m, NULL, err);
    if (rc == 0 && m.type != SBX_FILE_REGULAR)
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a regular file", path);
    if (rc == 0)
        rc = file_size(s, abs, &size, err);
    if (rc == 0)
        rc = sbx__lxd_tmpfile(&data, err);
    if (rc < 0)
        goto out;
    /* The file may grow between the size and the copy: a bound, not an exact size. */
    struct sbx__lxd_req req = {
            .upload_fd = -1, .download_fd = data, .max_body = 2 * size + READ_SLACK};
    struct sbx__lxd_resp resp;
    sbx__lxd_resp_init(&resp);
    rc = file_call(s, "GET", abs, &req, &resp, err);
    if (rc == 0)
        rc = file_ok(s, &resp, path, err);
    if (rc == 0 && resp.meta.have && resp.meta.type != SBX_FILE_REGULAR)
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a regular file", path);
    sbx__lxd_resp_release(&resp);
    struct stat st;
    if (rc == 0 && (fstat(data, &st) < 0 || lseek(data, 0, SEEK_SET) < 0))
        rc = sbx_error_errno(err, errno, "cannot read '%s'", path);
    if (rc == 0) {
        *out_fd = data;
        data = -1;
        if (out_size)
            *out_size = (uint64_t)st.st_size;
    }
out:
    sbx_fd_close(&data);
    free(abs);
    return rc;
}

int sbx__lxd_file_put(struct sbx__lxd_session *s, const char *abs, int fd, uint64_t size,
                      mode_t mode, int append, struct sbx_error *err)
{
    char uid[32], gid[32], m[32];
    struct sbx__lxd_req req = {.upload_fd = fd, .upload_size = size, .download_fd = -1};
    struct sbx__lxd_resp resp;
    owner_headers(s, &req, uid, gid, m, mode, "X-LXD-type: file");
    req.headers[4] = append ? "X-LXD-write: append" : "X-LXD-write: overwrite";
    if (lseek(fd, 0, SEEK_SET) < 0)
        return sbx_error_errno(err, errno, "lseek");
    sbx__lxd_resp_init(&resp);
    int rc = file_call(s, "POST", abs, &req, &resp, err);
    if (rc == 0)
        rc = file_ok(s, &resp, abs, err);
    sbx__lxd_resp_release(&resp);
    return rc;
}

static int copy_in(const struct sbx_file_reader *r, uint64_t max, int fd, uint64_t *total,
                   const char *path, struct sbx_error *err)
{
    char buf[COPY_CHUNK];
    *total = 0;
    for (;;) {
        long n = r->read(r->ctx, buf, sizeof(buf), err);
        uint64_t hole = 0;
        if (n < 0)
            return (int)n;
        if (n == 0 && r->skip_hole) {
            /* A hole travels as zeros: the files API has no sparse files. */
            int rc = r->skip_hole(r->ctx, &hole, err);
            if (rc < 0)
                return rc;
        }
        if (n == 0 && hole == 0)
            return 0;
        if (n == 0)
            memset(buf, 0, sizeof(buf));
        uint64_t left = n ? (uint64_t)n : hole;
        while (left) {
            size_t k = left < sizeof(buf) ? (size_t)left : sizeof(buf);
            if (*total + k > max)
                return sbx_error_set(err, SBX_E_TOOBIG, 0, "'%s' would be larger than %llu bytes",
                                     path, (unsigned long long)max);
            int rc = sbx_fd_write_all(fd, buf, k, err);
            if (rc < 0)
                return rc;
            *total += k;
            left -= k;
        }
    }
}

/* Rename the fresh file into place; refuses to replace a directory, and with EXCL anything. */
static const char PLACE[] = "t=$1 d=$2 x=$3\n"
                            "if [ -d \"$d\" ] && [ ! -L \"$d\" ]; then rm -f -- \"$t\"; "
                            "echo \"Is a directory\" >&2; exit 21; fi\n"
                            "if [ \"$x\" = 1 ] && { [ -e \"$d\" ] || [ -L \"$d\" ]; }; then "
                            "rm -f -- \"$t\"; echo \"File exists\" >&2; exit 17; fi\n"
                            "mv -f -- \"$t\" \"$d\" || { rm -f -- \"$t\"; exit 1; }\n";

/* The parent of path resolved (made with SBX_WRITE_PARENTS) and the destination in it. */
static int write_target(struct sbx__lxd_session *s, const char *path, int flags, char **dir,
                        char **dst, int *exists, struct sbx_error *err)
{
    const char *slash = strrchr(path, '/');
    char *parent = slash ? sbx_xstrndup(path, (size_t)(slash - path)) : sbx_xstrdup("");
    struct sbx_strv missing;
    sbx_strv_init(&missing);
    int rc = resolve_walk(s, parent, 1, dir, &missing, err);
    if (rc == 0 && missing.n && !(flags & SBX_WRITE_PARENTS))
        rc = sbx_error_set(err, SBX_E_NOTFOUND, ENOENT, "no parent directory for '%s'", path);
    for (size_t i = 0; rc == 0 && i < missing.n; i++)
        rc = make_dir(s, missing.v[i], path, err);
    if (rc == 0 && missing.n) {
        free(*dir);
        *dir = sbx_xstrdup(missing.v[missing.n - 1]);
    }
    struct sbx__lxd_fmeta m = {0};
    if (rc == 0) {
        *dst = sbx_xasprintf("%s/%s", strcmp(*dir, "/") ? *dir : "", base_name(path));
        rc = missing.n ? -SBX_E_NOTFOUND : head(s, *dst, &m, NULL, err);
        *exists = rc == 0;
        if (rc == -SBX_E_NOTFOUND)
            rc = 0;
    }
    if (rc == 0 && *exists && (flags & SBX_WRITE_EXCL))
        rc = sbx_error_set(err, SBX_E_EXISTS, EEXIST, "'%s' exists", path);
    if (rc == 0 && *exists && m.type == SBX_FILE_DIR)
        rc = sbx_error_set(err, SBX_E_INVAL, EISDIR, "'%s' is a directory", path);
    if (rc == 0 && *exists && (flags & SBX_WRITE_APPEND) && m.type != SBX_FILE_REGULAR)
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a regular file", path);
    sbx_strv_release(&missing);
    free(parent);
    return rc;
}

int sbx__lxd_write(struct sbx_session *bs, const char *path, const struct sbx_file_reader *r,
                   uint64_t max, mode_t mode, int flags, struct sbx_error *err)
{
    struct sbx__lxd_session *s = (struct sbx__lxd_session *)bs;
    char *dir = NULL, *dst = NULL, *tmp = NULL;
    int data = -1, exists = 0, rc;
    uint64_t size = 0;
    if ((rc = sbx__lxd_tmpfile(&data, err)) < 0 ||
        (rc = copy_in(r, max, data, &size, path, err)) < 0 ||
        (rc = write_target(s, path, flags, &dir, &dst, &exists, err)) < 0)
        goto out;
    if (!exists || (flags & SBX_WRITE_APPEND)) {
        /* A new name (nothing to follow) or an append to a regular file: straight there. */
        rc = sbx__lxd_file_put(s, dst, data, size, mode, !!(flags & SBX_WRITE_APPEND), err);
        goto out;
    }
    /* A replacement: a fresh name beside it, renamed over it, so readers see the old or the
     * new file and a planted link is replaced rather than followed. */
    char rnd[17];
    if ((rc = sbx_random_hex(rnd, 8, err)) < 0)
        goto out;
    tmp = sbx_xasprintf("%s/.sbx-write-%s", strcmp(dir, "/") ? dir : "", rnd);
    if ((rc = sbx__lxd_file_put(s, tmp, data, size, mode, 0, err)) < 0)
        goto out;
    const char *argv[] = {
            "/bin/sh", "-c", PLACE, "sh", tmp, dst, flags & SBX_WRITE_EXCL ? "1" : "0", NULL};
    rc = run(s, argv, "write", path, err);
out:
    sbx_fd_close(&data);
    free(dir);
    free(dst);
    free(tmp);
    return rc;
}
