/* Workspace files of a Docker sandbox: contents through the archive API (a one-member tar up,
 * a tar stream down), metadata through HEAD of the archive API, directory listings and the
 * small changes (mkdir, rm, chmod, chgrp, the final rename of a write) through commands of a
 * fixed argv run as root, paths passed as arguments (never spliced into a shell line).
 *
 * Paths are resolved here, component by component, from what the engine reports: a symlink
 * that leads out of the workspace is refused (SBX_E_PERM). The engine resolves again when it
 * acts, so a process in the sandbox that swaps a directory for a symlink in between can make
 * one operation land elsewhere in the container: never on the host (the engine scopes every
 * path to the container's root), see docs/internals/docker-provider.md. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/dl-archive.h"
#include "providers/docker/docker.h"
#include "sandbox/shellfs/shellfs.h"
#include "sbx/fs.h"
#include "sbx/hash.h"
#include "sbx/json.h"
#include "sbx/strv.h"

#define MAX_HOPS   40
#define LS_OUT_MAX ((size_t)64 << 20)
#define RUN_MAX    ((size_t)1 << 20)
#define TAR_SLACK  ((uint64_t)1 << 20)
#define COPY_CHUNK 65536

static int head(struct sbx__dk_session *s, const char *abs, struct sbx__dk_pstat *out,
                struct sbx_error *err)
{
    char *q = sbx__dk_escape(abs);
    char *path = sbx_xasprintf("/containers/%s/archive?path=%s", s->container, q);
    struct sbx__dk_req req = {.method = "HEAD",
                              .path = path,
                              .upload_fd = -1,
                              .download_fd = -1,
                              .header = "X-Docker-Container-Path-Stat"};
    struct sbx__dk_resp resp;
    sbx__dk_resp_init(&resp);
    int rc = sbx__dk_call(&s->eng, &req, &resp, err);
    if (rc == 0 && resp.status == 404)
        rc = -SBX_E_NOTFOUND; /* the caller says what is missing */
    else if (rc == 0 && resp.status >= 400)
        rc = sbx__dk_status_error(resp.status, &resp.body, err);
    else if (rc == 0)
        rc = sbx__dk_pstat_decode(resp.header, out, err);
    sbx__dk_resp_release(&resp);
    free(path);
    free(q);
    return rc;
}

static int within(const char *path, const char *root)
{
    size_t n = strlen(root);
    return strncmp(path, root, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

/* The walk: *base is the resolved existing part; missing its missing components in order. */
static int resolve_walk(struct sbx__dk_session *s, const char *rel, int follow_final, char **base,
                        struct sbx_strv *missing, struct sbx_error *err)
{
    const char *root = s->base.root;
    char *cur = sbx_xstrdup(root);
    struct sbx_strv comps;
    int rc = 0, hops = 0;
    sbx_strv_init(&comps);
    for (const char *p = rel; *p;) {
        const char *slash = strchr(p, '/');
        size_t k = slash ? (size_t)(slash - p) : strlen(p);
        if (k)
            sbx_strv_push_take(&comps, sbx_xstrndup(p, k));
        p += k + (slash ? 1 : 0);
    }
    for (size_t i = 0; i < comps.n; i++) {
        if (missing->n) {
            /* Below a missing directory: nothing to ask the engine. */
            sbx_strv_push_take(missing,
                               sbx_xasprintf("%s/%s", missing->v[missing->n - 1], comps.v[i]));
            continue;
        }
        char *cand = sbx_xasprintf("%s/%s", strcmp(cur, "/") ? cur : "", comps.v[i]);
        if (i + 1 == comps.n && !follow_final) {
            struct sbx__dk_pstat st = {0};
            int r = head(s, cand, &st, err);
            sbx__dk_pstat_release(&st);
            if (r == -SBX_E_NOTFOUND) {
                sbx_strv_push_take(missing, cand);
                continue;
            }
            free(cur);
            cur = cand;
            if (r < 0)
                rc = r;
            break;
        }
        struct sbx__dk_pstat st = {0};
        rc = head(s, cand, &st, err);
        if (rc == -SBX_E_NOTFOUND) {
            rc = 0;
            sbx_strv_push_take(missing, cand);
            continue;
        }
        if (rc < 0) {
            free(cand);
            break;
        }
        if (st.type == SBX_FILE_SYMLINK) {
            if (!st.link_target || !within(st.link_target, root) || ++hops > MAX_HOPS) {
                rc = sbx_error_set(err, SBX_E_PERM, 0,
                                   "path '%s' leads out of the workspace (symlink '%s')", rel,
                                   comps.v[i]);
                sbx__dk_pstat_release(&st);
                free(cand);
                break;
            }
            free(cand);
            cand = sbx_xstrdup(st.link_target);
            size_t n = strlen(cand);
            while (n > 1 && cand[n - 1] == '/')
                cand[--n] = '\0';
        }
        sbx__dk_pstat_release(&st);
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

int sbx__dk_resolve(struct sbx__dk_session *s, const char *rel, int follow_final, char **out,
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
static int run_error(const struct sbx__dk_run *r, const char *what, const char *rel,
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
                                                              : SBX_E_SANDBOX;
    return sbx_error_set(err, code, 0, "cannot %s '%s': %.*s (exit status %d)", what, rel, n, msg,
                         r->code);
}

static int run(struct sbx__dk_session *s, const char *const *argv, const void *in, size_t in_len,
               const char *what, const char *rel, struct sbx_error *err)
{
    struct sbx__dk_run r;
    sbx__dk_run_init(&r, RUN_MAX);
    int rc = sbx__dk_exec_run(s, argv, in, in_len, &r, err);
    if (rc == 0 && r.code != 0)
        rc = run_error(&r, what, rel, err);
    sbx__dk_run_release(&r);
    return rc;
}

/* Create the missing directories in order, owned by the session's user. */
static const char MKDIRS[] = "o=$1; shift\n"
                             "for d in \"$@\"; do\n"
                             "  mkdir -- \"$d\" || exit 1\n"
                             "  [ -z \"$o\" ] || chown -- \"$o\" \"$d\" || exit 1\n"
                             "done\n";

static int make_dirs(struct sbx__dk_session *s, const struct sbx_strv *dirs, const char *rel,
                     struct sbx_error *err)
{
    struct sbx_strv argv;
    sbx_strv_init(&argv);
    sbx_strv_push(&argv, "/bin/sh");
    sbx_strv_push(&argv, "-c");
    sbx_strv_push(&argv, MKDIRS);
    sbx_strv_push(&argv, "sh");
    sbx_strv_push(&argv, s->owner);
    for (size_t i = 0; i < dirs->n; i++)
        sbx_strv_push(&argv, dirs->v[i]);
    int rc = run(s, (const char *const *)argv.v, NULL, 0, "create directory", rel, err);
    sbx_strv_release(&argv);
    return rc;
}

int sbx__dk_mkdir(struct sbx_session *bs, const char *path, int flags, struct sbx_error *err)
{
    struct sbx__dk_session *s = (struct sbx__dk_session *)bs;
    struct sbx_strv missing;
    char *base = NULL;
    sbx_strv_init(&missing);
    int rc = resolve_walk(s, path, 1, &base, &missing, err);
    if (rc < 0)
        goto out;
    if (missing.n == 0) {
        struct sbx__dk_pstat st = {0};
        rc = head(s, base, &st, err);
        if (rc == 0 && (!(flags & SBX_MKDIR_PARENTS) || st.type != SBX_FILE_DIR))
            rc = sbx_error_set(err, SBX_E_EXISTS, EEXIST, "'%s' exists", path);
        sbx__dk_pstat_release(&st);
        goto out;
    }
    if (missing.n > 1 && !(flags & SBX_MKDIR_PARENTS)) {
        rc = sbx_error_set(err, SBX_E_NOTFOUND, ENOENT, "no parent directory for '%s'", path);
        goto out;
    }
    rc = make_dirs(s, &missing, path, err);
out:
    free(base);
    sbx_strv_release(&missing);
    return rc;
}

int sbx__dk_rm(struct sbx_session *bs, const char *path, int flags, struct sbx_error *err)
{
    struct sbx__dk_session *s = (struct sbx__dk_session *)bs;
    char *abs = NULL;
    int exists = 0;
    struct sbx__dk_pstat st = {0};
    int rc = sbx__dk_resolve(s, path, 0, &abs, &exists, err);
    if (rc < 0)
        goto out;
    if (!exists) {
        rc = flags & SBX_RM_FORCE
                     ? 0
                     : sbx_error_set(err, SBX_E_NOTFOUND, ENOENT, "no such file '%s'", path);
        goto out;
    }
    if ((rc = head(s, abs, &st, err)) < 0)
        goto out;
    const char *rf[] = {"rm", "-rf", "--", abs, NULL};
    const char *rd[] = {"rmdir", "--", abs, NULL};
    const char *rm[] = {"rm", "-f", "--", abs, NULL};
    const char *const *argv = st.type != SBX_FILE_DIR ? rm : flags & SBX_RM_RECURSIVE ? rf : rd;
    rc = run(s, argv, NULL, 0, "remove", path, err);
out:
    sbx__dk_pstat_release(&st);
    free(abs);
    return rc;
}

int sbx__dk_chmod(struct sbx_session *bs, const char *path, mode_t mode, struct sbx_error *err)
{
    struct sbx__dk_session *s = (struct sbx__dk_session *)bs;
    char *abs = NULL, m[16];
    int exists = 0;
    struct sbx__dk_pstat st = {0};
    int rc = sbx__dk_resolve(s, path, 0, &abs, &exists, err);
    if (rc == 0 && !exists)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, ENOENT, "no such file '%s'", path);
    if (rc == 0)
        rc = head(s, abs, &st, err);
    if (rc == 0 && st.type == SBX_FILE_SYMLINK)
        rc = sbx_error_set(err, SBX_E_PERM, 0, "'%s' is a symlink", path);
    if (rc == 0) {
        snprintf(m, sizeof(m), "%o", (unsigned)mode);
        const char *argv[] = {"chmod", m, "--", abs, NULL};
        rc = run(s, argv, NULL, 0, "change the mode of", path, err);
    }
    sbx__dk_pstat_release(&st);
    free(abs);
    return rc;
}

int sbx__dk_chgrp(struct sbx_session *bs, const char *path, const char *group,
                  struct sbx_error *err)
{
    struct sbx__dk_session *s = (struct sbx__dk_session *)bs;
    char *abs = NULL;
    int exists = 0;
    int rc = sbx__dk_resolve(s, path, 0, &abs, &exists, err);
    if (rc == 0 && !exists)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, ENOENT, "no such file '%s'", path);
    if (rc == 0) {
        const char *argv[] = {"chgrp", "-h", "--", group, abs, NULL};
        rc = run(s, argv, NULL, 0, "set the group of", path, err);
    }
    free(abs);
    return rc;
}

static const char *base_name(const char *rel)
{
    const char *slash = strrchr(rel, '/');
    return slash ? slash + 1 : rel;
}

static void fill_dirent(struct sbx_dirent *d, const char *name, const struct sbx__dk_pstat *st)
{
    memset(d, 0, sizeof(*d));
    d->name = sbx_xstrdup(name);
    d->type = st->type;
    d->mode = st->mode;
    d->size = st->size;
    d->mtime_ns = st->mtime_ns;
}

/* A symlink's own text (the engine reports only its resolution). */
static int link_text(struct sbx__dk_session *s, const char *abs, char **out, struct sbx_error *err)
{
    struct sbx__dk_run r;
    const char *argv[] = {"readlink", "--", abs, NULL};
    sbx__dk_run_init(&r, RUN_MAX);
    int rc = sbx__dk_exec_run(s, argv, NULL, 0, &r, err);
    if (rc == 0 && r.code != 0)
        rc = run_error(&r, "read the symlink", abs, err);
    if (rc == 0) {
        size_t n = r.out.len;
        while (n && r.out.data[n - 1] == '\n')
            n--;
        *out = sbx_xstrndup(r.out.data, n);
    }
    sbx__dk_run_release(&r);
    return rc;
}

int sbx__dk_stat(struct sbx_session *bs, const char *path, struct sbx_dirent *out,
                 struct sbx_error *err)
{
    struct sbx__dk_session *s = (struct sbx__dk_session *)bs;
    char *abs = NULL, *target = NULL;
    int exists = 0;
    struct sbx__dk_pstat st = {0};
    int rc = sbx__dk_resolve(s, path, 0, &abs, &exists, err);
    if (rc == 0 && !exists)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, ENOENT, "no such file '%s'", path);
    if (rc == 0)
        rc = head(s, abs, &st, err);
    if (rc == -SBX_E_NOTFOUND)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, ENOENT, "no such file '%s'", path);
    if (rc == 0 && st.type == SBX_FILE_SYMLINK)
        rc = link_text(s, abs, &target, err);
    if (rc == 0) {
        fill_dirent(out, base_name(path), &st);
        out->target = target;
        target = NULL;
    }
    free(target);
    sbx__dk_pstat_release(&st);
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

int sbx__dk_ls(struct sbx_session *bs, const char *path, struct sbx_dirlist *out,
               struct sbx_error *err)
{
    struct sbx__dk_session *s = (struct sbx__dk_session *)bs;
    char *abs = NULL;
    int exists = 0;
    struct sbx__dk_pstat st = {0};
    struct sbx__dk_run r;
    struct sbx_dirlist l = {0};
    sbx__dk_run_init(&r, LS_OUT_MAX);
    int rc = sbx__dk_resolve(s, path, 1, &abs, &exists, err);
    if (rc == 0 && !exists)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, ENOENT, "no such file or directory '%s'", path);
    if (rc == 0)
        rc = head(s, abs, &st, err);
    if (rc < 0)
        goto out;
    if (st.type != SBX_FILE_DIR) {
        l.v = sbx_xcalloc(1, sizeof(*l.v));
        l.n = 1;
        fill_dirent(&l.v[0], base_name(path), &st);
        *out = l;
        goto out;
    }
    const char *argv[] = {"/bin/sh", "-c", LS, "sh", abs, NULL};
    if ((rc = sbx__dk_exec_run(s, argv, NULL, 0, &r, err)) < 0)
        goto out;
    if (r.code != 0) {
        rc = run_error(&r, "list", path, err);
        goto out;
    }
    if ((rc = sbx__shellfs_parse_entries(r.out.data ? r.out.data : "", r.out.len, 1, &l, err)) <
        0) {
        sbx_dirlist_release(&l);
        goto out;
    }
    if (l.n)
        sbx__shellfs_sort_entries(&l);
    *out = l;
out:
    sbx__dk_run_release(&r);
    sbx__dk_pstat_release(&st);
    free(abs);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Contents */

static int copy_in(const struct sbx_file_reader *r, uint64_t max, int fd, uint64_t *total,
                   const char *path, struct sbx_error *err)
{
    char buf[COPY_CHUNK];
    *total = 0;
    for (;;) {
        long n = r->read(r->ctx, buf, sizeof(buf), err);
        if (n < 0)
            return (int)n;
        if (n == 0) {
            uint64_t hole = 0;
            /* A hole travels as zeros: the archive API has no sparse members. */
            if (r->skip_hole) {
                int rc = r->skip_hole(r->ctx, &hole, err);
                if (rc < 0)
                    return rc;
            }
            if (hole == 0)
                return 0;
            memset(buf, 0, sizeof(buf));
            while (hole) {
                size_t k = hole < sizeof(buf) ? (size_t)hole : sizeof(buf);
                if (*total + k > max)
                    return sbx_error_set(err, SBX_E_TOOBIG, 0,
                                         "'%s' would be larger than %llu "
                                         "bytes",
                                         path, (unsigned long long)max);
                int rc = sbx_fd_write_all(fd, buf, k, err);
                if (rc < 0)
                    return rc;
                *total += k;
                hole -= k;
            }
            continue;
        }
        if (*total + (uint64_t)n > max)
            return sbx_error_set(err, SBX_E_TOOBIG, 0, "'%s' would be larger than %llu bytes", path,
                                 (unsigned long long)max);
        int rc = sbx_fd_write_all(fd, buf, (size_t)n, err);
        if (rc < 0)
            return rc;
        *total += (uint64_t)n;
    }
}

static int archive_fail(struct archive *a, const char *what, struct sbx_error *err)
{
    return sbx_error_set(err, SBX_E_IO, archive_errno(a), "%s: %s", what,
                         archive_error_string(a) ? archive_error_string(a) : "archive error");
}

/* A tar of one regular file named name holding data's size bytes, into tar. */
static int make_tar(int data, uint64_t size, const char *name, mode_t mode, int tar,
                    struct sbx_error *err)
{
    int rc = sbx__archive_load(err);
    if (rc < 0)
        return rc;
    struct archive *a = archive_write_new();
    struct archive_entry *e = archive_entry_new();
    char buf[COPY_CHUNK];
    if (archive_write_set_format_pax_restricted(a) != ARCHIVE_OK ||
        archive_write_open_fd(a, tar) != ARCHIVE_OK) {
        rc = archive_fail(a, "cannot write an archive", err);
        goto out;
    }
    archive_entry_set_pathname(e, name);
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, mode);
    archive_entry_set_size(e, (la_int64_t)size);
    archive_entry_set_mtime(e, time(NULL), 0);
    if (archive_write_header(a, e) != ARCHIVE_OK) {
        rc = archive_fail(a, "cannot write an archive", err);
        goto out;
    }
    if (lseek(data, 0, SEEK_SET) < 0) {
        rc = sbx_error_errno(err, errno, "lseek");
        goto out;
    }
    for (;;) {
        ssize_t n = read(data, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = sbx_error_errno(err, errno, "read");
            goto out;
        }
        if (n == 0)
            break;
        if (archive_write_data(a, buf, (size_t)n) != n) {
            rc = archive_fail(a, "cannot write an archive", err);
            goto out;
        }
    }
    if (archive_write_close(a) != ARCHIVE_OK)
        rc = archive_fail(a, "cannot write an archive", err);
out:
    archive_entry_free(e);
    archive_write_free(a);
    return rc;
}

/* Rename the staged file into place as the session's user; refuses to replace a directory,
 * and with EXCL anything. */
static const char PLACE[] =
        "o=$1 t=$2 d=$3 x=$4\n"
        "if [ -d \"$d\" ] && [ ! -L \"$d\" ]; then rm -f -- \"$t\"; "
        "echo \"Is a directory\" >&2; exit 21; fi\n"
        "if [ \"$x\" = 1 ] && { [ -e \"$d\" ] || [ -L \"$d\" ]; }; then "
        "rm -f -- \"$t\"; echo \"File exists\" >&2; exit 17; fi\n"
        "[ -z \"$o\" ] || chown -- \"$o\" \"$t\" || { rm -f -- \"$t\"; exit 1; }\n"
        "mv -f -- \"$t\" \"$d\" || { rm -f -- \"$t\"; exit 1; }\n";

static const char APPEND[] = "o=$1 d=$2 m=$3\n"
                             "if [ ! -e \"$d\" ]; then : > \"$d\" && chmod \"$m\" \"$d\" && "
                             "{ [ -z \"$o\" ] || chown -- \"$o\" \"$d\"; } || exit 1; fi\n"
                             "[ -f \"$d\" ] && [ ! -L \"$d\" ] || { echo \"Not a regular file\" "
                             ">&2; exit 1; }\n"
                             "cat >> \"$d\"\n";

static int put_archive(struct sbx__dk_session *s, const char *dir, int tar, uint64_t size,
                       struct sbx_error *err)
{
    char *q = sbx__dk_escape(dir);
    char *path = sbx_xasprintf("/containers/%s/archive?path=%s&noOverwriteDirNonDir=true",
                               s->container, q);
    struct sbx__dk_req req = {.method = "PUT",
                              .path = path,
                              .upload_fd = tar,
                              .upload_size = size,
                              .content_type = "application/x-tar",
                              .download_fd = -1};
    struct sbx__dk_resp resp;
    sbx__dk_resp_init(&resp);
    int rc = sbx__dk_call(&s->eng, &req, &resp, err);
    if (rc == 0 && resp.status >= 400)
        rc = sbx__dk_status_error(resp.status, &resp.body, err);
    sbx__dk_resp_release(&resp);
    free(path);
    free(q);
    return rc;
}

int sbx__dk_write(struct sbx_session *bs, const char *path, const struct sbx_file_reader *r,
                  uint64_t max, mode_t mode, int flags, struct sbx_error *err)
{
    struct sbx__dk_session *s = (struct sbx__dk_session *)bs;
    struct sbx_strv missing;
    char *parent_rel = NULL, *dir = NULL, *dst = NULL, *tmp = NULL, *name = NULL;
    int data = -1, tar = -1, rc;
    uint64_t size = 0;
    struct sbx_buf content;
    sbx_strv_init(&missing);
    sbx_buf_init(&content, SBX_BUF_NOLIMIT);
    const char *slash = strrchr(path, '/');
    parent_rel = slash ? sbx_xstrndup(path, (size_t)(slash - path)) : sbx_xstrdup("");
    if ((rc = sbx__dk_tmpfile(&data, err)) < 0 ||
        (rc = copy_in(r, max, data, &size, path, err)) < 0)
        goto out;
    if ((rc = resolve_walk(s, parent_rel, 1, &dir, &missing, err)) < 0)
        goto out;
    if (missing.n) {
        if (!(flags & SBX_WRITE_PARENTS)) {
            rc = sbx_error_set(err, SBX_E_NOTFOUND, ENOENT, "no directory for '%s'", path);
            goto out;
        }
        if ((rc = make_dirs(s, &missing, path, err)) < 0)
            goto out;
        free(dir);
        dir = sbx_xstrdup(missing.v[missing.n - 1]);
    }
    dst = sbx_xasprintf("%s/%s", strcmp(dir, "/") ? dir : "", base_name(path));
    if (flags & SBX_WRITE_APPEND) {
        /* The archive API only replaces: an append streams through cat. */
        char m[16];
        snprintf(m, sizeof(m), "%o", (unsigned)mode);
        if (lseek(data, 0, SEEK_SET) < 0) {
            rc = sbx_error_errno(err, errno, "lseek");
            goto out;
        }
        if ((rc = sbx_fd_read_all(data, (size_t)size + 1, &content, err)) < 0)
            goto out;
        const char *argv[] = {"/bin/sh", "-c", APPEND, "sh", s->owner, dst, m, NULL};
        rc = run(s, argv, content.data ? content.data : "", content.len, "append to", path, err);
        goto out;
    }
    char rnd[17];
    if ((rc = sbx_random_hex(rnd, 8, err)) < 0)
        goto out;
    name = sbx_xasprintf(".sbx-write-%s", rnd);
    tmp = sbx_xasprintf("%s/%s", strcmp(dir, "/") ? dir : "", name);
    if ((rc = sbx__dk_tmpfile(&tar, err)) < 0 ||
        (rc = make_tar(data, size, name, mode, tar, err)) < 0)
        goto out;
    struct stat tst;
    if (fstat(tar, &tst) < 0 || lseek(tar, 0, SEEK_SET) < 0) {
        rc = sbx_error_errno(err, errno, "cannot read the staged archive");
        goto out;
    }
    if ((rc = put_archive(s, dir, tar, (uint64_t)tst.st_size, err)) < 0)
        goto out;
    const char *argv[] = {"/bin/sh", "-c", PLACE, "sh",
                          s->owner,  tmp,  dst,   flags & SBX_WRITE_EXCL ? "1" : "0",
                          NULL};
    rc = run(s, argv, NULL, 0, "write", path, err);
out:
    sbx_fd_close(&data);
    sbx_fd_close(&tar);
    sbx_buf_release(&content);
    sbx_strv_release(&missing);
    free(parent_rel);
    free(dir);
    free(dst);
    free(tmp);
    free(name);
    return rc;
}

int sbx__dk_read_open(struct sbx_session *bs, const char *path, int *out_fd, uint64_t *out_size,
                      struct sbx_error *err)
{
    struct sbx__dk_session *s = (struct sbx__dk_session *)bs;
    char *abs = NULL, *q = NULL, *api = NULL;
    int exists = 0, tar = -1, data = -1, rc;
    struct sbx__dk_pstat st = {0};
    struct archive *a = NULL;
    if ((rc = sbx__archive_load(err)) < 0 ||
        (rc = sbx__dk_resolve(s, path, 1, &abs, &exists, err)) < 0)
        goto out;
    if (!exists) {
        rc = sbx_error_set(err, SBX_E_NOTFOUND, ENOENT, "no such file '%s'", path);
        goto out;
    }
    if ((rc = head(s, abs, &st, err)) < 0)
        goto out;
    if (st.type != SBX_FILE_REGULAR) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a regular file", path);
        goto out;
    }
    q = sbx__dk_escape(abs);
    api = sbx_xasprintf("/containers/%s/archive?path=%s", s->container, q);
    if ((rc = sbx__dk_tmpfile(&tar, err)) < 0)
        goto out;
    /* The file may grow between the stat and the copy: a bound, not an exact size. */
    struct sbx__dk_req req = {.method = "GET",
                              .path = api,
                              .upload_fd = -1,
                              .download_fd = tar,
                              .max_body = 2 * st.size + TAR_SLACK};
    struct sbx__dk_resp resp;
    sbx__dk_resp_init(&resp);
    rc = sbx__dk_call(&s->eng, &req, &resp, err);
    if (rc == 0 && resp.status >= 400)
        rc = sbx__dk_status_error(resp.status, &resp.body, err);
    sbx__dk_resp_release(&resp);
    if (rc < 0)
        goto out;
    if (lseek(tar, 0, SEEK_SET) < 0 || (rc = sbx__dk_tmpfile(&data, err)) < 0) {
        rc = rc < 0 ? rc : sbx_error_errno(err, errno, "lseek");
        goto out;
    }
    a = archive_read_new();
    archive_read_support_format_tar(a);
    struct archive_entry *e = NULL;
    if (archive_read_open_fd(a, tar, COPY_CHUNK) != ARCHIVE_OK ||
        archive_read_next_header(a, &e) != ARCHIVE_OK) {
        rc = archive_fail(a, "the engine's archive", err);
        goto out;
    }
    if (archive_entry_filetype(e) != AE_IFREG) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a regular file", path);
        goto out;
    }
    if (archive_read_data_into_fd(a, data) != ARCHIVE_OK) {
        rc = archive_fail(a, "the engine's archive", err);
        goto out;
    }
    struct stat dst;
    if (fstat(data, &dst) < 0 || lseek(data, 0, SEEK_SET) < 0) {
        rc = sbx_error_errno(err, errno, "cannot read '%s'", path);
        goto out;
    }
    *out_fd = data;
    data = -1;
    if (out_size)
        *out_size = (uint64_t)dst.st_size;
out:
    if (a)
        archive_read_free(a);
    sbx_fd_close(&tar);
    sbx_fd_close(&data);
    sbx__dk_pstat_release(&st);
    free(abs);
    free(q);
    free(api);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Workspaces as tar streams (remote.md, "Workspace streams"): the archive API straight to the
 * snapshot store and back, with no copy of the workspace on this host */

#define WS_ARCHIVE_MAX ((uint64_t)8 << 30)

/* GET the root's archive of "ROOT/." (members "./name", the root's content without a top
 * directory) into out_fd: the store reads it as hostile input. */
int sbx__dk_workspace_export(struct sbx_session *bs, int out_fd, struct sbx_error *err)
{
    struct sbx__dk_session *s = (struct sbx__dk_session *)bs;
    char *dot = sbx_xasprintf("%s/.", s->base.root);
    char *q = sbx__dk_escape(dot);
    char *api = sbx_xasprintf("/containers/%s/archive?path=%s", s->container, q);
    struct sbx__dk_req req = {.method = "GET",
                              .path = api,
                              .upload_fd = -1,
                              .download_fd = out_fd,
                              .max_body = WS_ARCHIVE_MAX};
    struct sbx__dk_resp resp;
    sbx__dk_resp_init(&resp);
    int rc = sbx__dk_call(&s->eng, &req, &resp, err);
    if (rc == 0 && resp.status == 404)
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "the container '%.12s' is gone", s->container);
    else if (rc == 0 && resp.status >= 400)
        rc = sbx__dk_status_error(resp.status, &resp.body, err);
    sbx__dk_resp_release(&resp);
    free(api);
    free(q);
    free(dot);
    return rc;
}

/* PUT the snapshot's tar (from the store, read from in_fd to its end) into the root, then give
 * the files to the session's user (the tar's owners are root). */
int sbx__dk_workspace_import(struct sbx_session *bs, int in_fd, struct sbx_error *err)
{
    struct sbx__dk_session *s = (struct sbx__dk_session *)bs;
    char *q = sbx__dk_escape(s->base.root);
    char *path = sbx_xasprintf("/containers/%s/archive?path=%s&noOverwriteDirNonDir=true",
                               s->container, q);
    struct sbx__dk_req req = {.method = "PUT",
                              .path = path,
                              .upload_fd = in_fd,
                              .upload_unknown = 1,
                              .content_type = "application/x-tar",
                              .download_fd = -1};
    struct sbx__dk_resp resp;
    sbx__dk_resp_init(&resp);
    int rc = sbx__dk_call(&s->eng, &req, &resp, err);
    if (rc == 0 && resp.status >= 400)
        rc = sbx__dk_status_error(resp.status, &resp.body, err);
    sbx__dk_resp_release(&resp);
    free(path);
    free(q);
    if (rc == 0 && s->owner[0]) {
        const char *argv[] = {"chown", "-R", "-h", "--", s->owner, s->base.root, NULL};
        rc = run(s, argv, NULL, 0, "give the restored files to", s->base.root, err);
    }
    return rc;
}
