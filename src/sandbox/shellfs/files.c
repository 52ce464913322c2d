/* Workspace files of a remote sandbox through one fixed script and whole-file transfers
 * (shellfs.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox/shellfs/shellfs.h"
#include "sbx/fs.h"
#include "sbx/hash.h"

#define LS_OUT_MAX ((size_t)64 << 20)
#define RUN_MAX    ((size_t)1 << 20)
#define COPY_CHUNK 65536

/* $1 root, $2 op, $3 the workspace-relative path ("" the root), then the op's arguments.
 * Failures: a message on stderr and the status 2 (missing), 13 (out of the workspace), 17
 * (exists), 21 (a directory), 20 (not a directory), 39 (not empty), 22 (not a regular file,
 * a symlink), else 1. */
static const char FS[] =
        "set -u\n"
        "root=$(realpath -m -- \"$1\") op=$2 rel=$3; shift 3\n"
        "fail() { c=$1; shift; printf '%s\\n' \"$*\" >&2; exit \"$c\"; }\n"
        "inside() { case \"$1/\" in \"$root\"/*) ;; *) fail 13 \"'$rel' leads out of the "
        "workspace\";; esac; }\n"
        "full() { if [ -z \"$rel\" ]; then printf '%s' \"$root\"; else printf '%s/%s' \"$root\" "
        "\"$rel\"; fi; }\n"
        "follow() { p=$(realpath -m -- \"$(full)\") || fail 1 \"cannot resolve '$rel'\"; "
        "inside \"$p\"; }\n"
        "nofollow() { if [ -z \"$rel\" ]; then p=$root; return; fi\n"
        "  d=$(dirname -- \"$(full)\"); b=$(basename -- \"$rel\")\n"
        "  d=$(realpath -m -- \"$d\") || fail 1 \"cannot resolve '$rel'\"; inside \"$d\"; "
        "p=$d/$b; }\n"
        "entry() { stat -c '%f %s %u %g %Y' -- \"$1\" || return 1; printf '%s\\0' \"$2\"\n"
        "  if [ -L \"$1\" ]; then printf '%s\\0' \"$(readlink -- \"$1\")\"; fi; }\n"
        "case $op in\n"
        "stat) nofollow; [ -e \"$p\" ] || [ -L \"$p\" ] || fail 2 \"no such file '$rel'\"\n"
        "  entry \"$p\" \"$(basename -- \"$p\")\";;\n"
        "ls) follow; [ -e \"$p\" ] || fail 2 \"no such file or directory '$rel'\"\n"
        "  if [ ! -d \"$p\" ]; then printf 'F'; entry \"$p\" \"$(basename -- \"$p\")\"; exit 0; "
        "fi\n"
        "  printf 'D'; cd -- \"$p\" || fail 1 \"cannot list '$rel'\"\n"
        "  for f in * .*; do case $f in .|..) continue;; esac\n"
        "    [ -e \"$f\" ] || [ -L \"$f\" ] || continue; entry \"$f\" \"$f\" || continue; done;;\n"
        "read) follow; [ -e \"$p\" ] || fail 2 \"no such file '$rel'\"\n"
        "  [ -f \"$p\" ] || fail 22 \"'$rel' is not a regular file\"\n"
        "  printf '%s\\n' \"$p\"; stat -c %s -- \"$p\";;\n"
        "mkdir) follow; parents=$1\n"
        "  if [ -e \"$p\" ] || [ -L \"$p\" ]; then\n"
        "    [ \"$parents\" = 1 ] && [ -d \"$p\" ] && exit 0; fail 17 \"'$rel' exists\"; fi\n"
        "  if [ \"$parents\" = 1 ]; then mkdir -p -- \"$p\" || fail 1 \"cannot create '$rel'\"\n"
        "  else [ -d \"$(dirname -- \"$p\")\" ] || fail 2 \"no parent directory for '$rel'\"\n"
        "    mkdir -- \"$p\" || fail 1 \"cannot create '$rel'\"; fi;;\n"
        "rm) nofollow; recursive=$1 force=$2\n"
        "  if [ ! -e \"$p\" ] && [ ! -L \"$p\" ]; then [ \"$force\" = 1 ] && exit 0; fail 2 "
        "\"no such file '$rel'\"; fi\n"
        "  if [ -d \"$p\" ] && [ ! -L \"$p\" ]; then\n"
        "    if [ \"$recursive\" = 1 ]; then rm -rf -- \"$p\" || fail 1 \"cannot remove '$rel'\"\n"
        "    else [ -z \"$(ls -A -- \"$p\")\" ] || fail 39 \"directory '$rel' is not empty\"\n"
        "      rmdir -- \"$p\" || fail 1 \"cannot remove '$rel'\"; fi\n"
        "  else rm -f -- \"$p\" || fail 1 \"cannot remove '$rel'\"; fi;;\n"
        "chmod) nofollow; [ -e \"$p\" ] || [ -L \"$p\" ] || fail 2 \"no such file '$rel'\"\n"
        "  [ -L \"$p\" ] && fail 22 \"'$rel' is a symlink\"\n"
        "  chmod -- \"$1\" \"$p\" || fail 1 \"cannot change the mode of '$rel'\";;\n"
        "place) tmp=$root/$1 mode=$2 parents=$3 excl=$4 append=$5\n"
        "  trap 'rm -f -- \"$tmp\"' EXIT\n"
        "  nofollow; d=$(dirname -- \"$p\")\n"
        "  if [ ! -d \"$d\" ]; then [ \"$parents\" = 1 ] || fail 2 \"no parent directory for "
        "'$rel'\"\n"
        "    [ -e \"$d\" ] && fail 20 \"a parent of '$rel' is not a directory\"\n"
        "    mkdir -p -- \"$d\" || fail 1 \"cannot create the parents of '$rel'\"; fi\n"
        "  if [ -d \"$p\" ] && [ ! -L \"$p\" ]; then fail 21 \"'$rel' is a directory\"; fi\n"
        "  if [ \"$excl\" = 1 ] && { [ -e \"$p\" ] || [ -L \"$p\" ]; }; then fail 17 \"'$rel' "
        "exists\"; fi\n"
        "  if [ \"$append\" = 1 ] && [ -e \"$p\" ]; then\n"
        "    { [ -f \"$p\" ] && [ ! -L \"$p\" ]; } || fail 22 \"'$rel' is not a regular file\"\n"
        "    cat -- \"$tmp\" >> \"$p\" || fail 1 \"cannot append to '$rel'\"; exit 0; fi\n"
        "  chmod -- \"$mode\" \"$tmp\" && mv -f -- \"$tmp\" \"$p\" || fail 1 \"cannot write "
        "'$rel'\";;\n"
        "*) fail 1 \"unknown operation\";;\n"
        "esac\n";

void sbx__shell_run_init(struct sbx__shell_run *r, size_t max)
{
    r->code = -1;
    sbx_buf_init(&r->out, max);
    sbx_buf_init(&r->err, max);
}

void sbx__shell_run_release(struct sbx__shell_run *r)
{
    sbx_buf_release(&r->out);
    sbx_buf_release(&r->err);
}

static int fs_error(const struct sbx__shell_run *r, struct sbx_error *err)
{
    const char *msg = r->err.len ? r->err.data : "";
    int n = (int)strcspn(msg, "\n");
    enum sbx_errcode code = r->code == 2    ? SBX_E_NOTFOUND
                            : r->code == 13 ? SBX_E_PERM
                            : r->code == 17 ? SBX_E_EXISTS
                            : r->code == 21 || r->code == 20 || r->code == 39 || r->code == 22
                                    ? SBX_E_INVAL
                                    : SBX_E_SANDBOX;
    int errnum = r->code == 2 ? ENOENT : r->code == 17 ? EEXIST : 0;
    if (!n)
        return sbx_error_set(err, code, errnum, "a file operation failed (exit status %d)",
                             r->code);
    return sbx_error_set(err, code, errnum, "%.*s", n, msg);
}

/* The FS script's op on rel with up to four more arguments (NULL-terminated). */
static int fs_op(const struct sbx__shellfs *fs, const char *op, const char *rel,
                 const char *const *more, struct sbx__shell_run *r, struct sbx_error *err)
{
    const char *argv[16] = {"/bin/sh", "-c", FS, "sbx", fs->root, op, rel};
    size_t n = 7;
    for (; more && *more && n < 15; more++)
        argv[n++] = *more;
    argv[n] = NULL;
    int rc = fs->ops->run(fs->ctx, argv, r, err);
    if (rc == 0 && r->code != 0)
        rc = fs_error(r, err);
    return rc;
}

int sbx__shellfs_run_ok(const struct sbx__shellfs *fs, const char *const *argv, const char *what,
                        const char *rel, struct sbx__shell_run *out, struct sbx_error *err)
{
    int rc = fs->ops->run(fs->ctx, argv, out, err);
    if (rc == 0 && out->code != 0) {
        const char *msg = out->err.len ? out->err.data : "";
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "cannot %s '%s': %.*s (exit status %d)", what,
                           rel, (int)strcspn(msg, "\n"), msg, out->code);
    }
    return rc;
}

int sbx__shellfs_tmpfile(int *out, struct sbx_error *err)
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

int sbx__shellfs_parse_entries(const char *p, size_t n, int path_error, struct sbx_dirlist *out,
                               struct sbx_error *err)
{
    const char *end = p + n;
    size_t cap = 0;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        unsigned long mode = 0;
        unsigned long long size = 0, mtime = 0;
        unsigned uid = 0, gid = 0;
        if (!nl || sscanf(p, "%lx %llu %u %u %llu", &mode, &size, &uid, &gid, &mtime) != 5)
            return sbx_error_set(err, SBX_E_PARSE, 0, "a directory listing is garbled");
        const char *name = nl + 1;
        const char *z = memchr(name, '\0', (size_t)(end - name));
        if (!z || z == name || (!path_error && memchr(name, '/', (size_t)(z - name))))
            return sbx_error_set(err, SBX_E_PARSE, 0, "a directory listing is garbled");
        p = z + 1;
        char *target = NULL;
        if ((mode & S_IFMT) == S_IFLNK) {
            const char *tz = memchr(p, '\0', (size_t)(end - p));
            if (!tz)
                return sbx_error_set(err, SBX_E_PARSE, 0, "a directory listing is garbled");
            target = sbx_xstrndup(p, (size_t)(tz - p));
            p = tz + 1;
        }
        if (memchr(name, '/', (size_t)(z - name))) {
            free(target);
            return sbx_error_set(err, SBX_E_PARSE, 0, "a directory listing names a path");
        }
        if (out->n >= SBX_LS_MAX_ENTRIES) {
            free(target);
            return sbx_error_set(err, SBX_E_TOOBIG, 0, "more than %d entries", SBX_LS_MAX_ENTRIES);
        }
        if (out->n == cap) {
            cap = cap ? 2 * cap : 16;
            out->v = sbx_xrealloc(out->v, cap * sizeof(*out->v));
        }
        struct sbx_dirent *d = &out->v[out->n++];
        memset(d, 0, sizeof(*d));
        d->name = sbx_xstrndup(name, (size_t)(z - name));
        d->target = target;
        d->type = S_ISDIR(mode)   ? SBX_FILE_DIR
                  : S_ISREG(mode) ? SBX_FILE_REGULAR
                  : S_ISLNK(mode) ? SBX_FILE_SYMLINK
                                  : SBX_FILE_OTHER;
        d->mode = (mode_t)(mode & 07777);
        d->size = size;
        d->mtime_ns = (int64_t)mtime * 1000000000;
        d->uid = uid;
        d->gid = gid;
    }
    return 0;
}

static int cmp_dirent(const void *a, const void *b)
{
    return strcmp(((const struct sbx_dirent *)a)->name, ((const struct sbx_dirent *)b)->name);
}

void sbx__shellfs_sort_entries(struct sbx_dirlist *l)
{
    if (l->n)
        qsort(l->v, l->n, sizeof(*l->v), cmp_dirent);
}

int sbx__shellfs_ls(const struct sbx__shellfs *fs, const char *path, struct sbx_dirlist *out,
                    struct sbx_error *err)
{
    struct sbx__shell_run r;
    struct sbx_dirlist l = {0};
    sbx__shell_run_init(&r, LS_OUT_MAX);
    int rc = fs_op(fs, "ls", path, NULL, &r, err);
    if (rc == 0 && (r.out.len < 1 || (r.out.data[0] != 'D' && r.out.data[0] != 'F')))
        rc = sbx_error_set(err, SBX_E_PARSE, 0, "a directory listing is garbled");
    if (rc == 0 && (rc = sbx__shellfs_parse_entries(r.out.data + 1, r.out.len - 1, 0, &l, err)) < 0)
        sbx_dirlist_release(&l);
    if (rc == 0 && r.out.data[0] == 'F' && l.n == 1) {
        /* A file lists as itself, under the name it was asked by. */
        const char *slash = strrchr(path, '/');
        free(l.v[0].name);
        l.v[0].name = sbx_xstrdup(slash ? slash + 1 : path);
    }
    if (rc == 0)
        sbx__shellfs_sort_entries(&l);
    if (rc == 0)
        *out = l;
    sbx__shell_run_release(&r);
    return rc;
}

int sbx__shellfs_stat(const struct sbx__shellfs *fs, const char *path, struct sbx_dirent *out,
                      struct sbx_error *err)
{
    struct sbx__shell_run r;
    struct sbx_dirlist l = {0};
    sbx__shell_run_init(&r, RUN_MAX);
    int rc = fs_op(fs, "stat", path, NULL, &r, err);
    if (rc == 0)
        rc = sbx__shellfs_parse_entries(r.out.data ? r.out.data : "", r.out.len, 0, &l, err);
    if (rc == 0 && l.n != 1)
        rc = sbx_error_set(err, SBX_E_PARSE, 0, "the state of '%s' is garbled", path);
    if (rc == 0) {
        const char *slash = strrchr(path, '/');
        *out = l.v[0];
        free(out->name);
        out->name = sbx_xstrdup(slash ? slash + 1 : path);
        free(l.v);
    } else {
        sbx_dirlist_release(&l);
    }
    sbx__shell_run_release(&r);
    return rc;
}

int sbx__shellfs_mkdir(const struct sbx__shellfs *fs, const char *path, int flags,
                       struct sbx_error *err)
{
    struct sbx__shell_run r;
    const char *more[] = {flags & SBX_MKDIR_PARENTS ? "1" : "0", NULL};
    sbx__shell_run_init(&r, RUN_MAX);
    int rc = fs_op(fs, "mkdir", path, more, &r, err);
    sbx__shell_run_release(&r);
    return rc;
}

int sbx__shellfs_rm(const struct sbx__shellfs *fs, const char *path, int flags,
                    struct sbx_error *err)
{
    struct sbx__shell_run r;
    const char *more[] = {flags & SBX_RM_RECURSIVE ? "1" : "0", flags & SBX_RM_FORCE ? "1" : "0",
                          NULL};
    sbx__shell_run_init(&r, RUN_MAX);
    int rc = fs_op(fs, "rm", path, more, &r, err);
    sbx__shell_run_release(&r);
    return rc;
}

int sbx__shellfs_chmod(const struct sbx__shellfs *fs, const char *path, mode_t mode,
                       struct sbx_error *err)
{
    struct sbx__shell_run r;
    char m[16];
    snprintf(m, sizeof(m), "%o", (unsigned)(mode & 07777));
    const char *more[] = {m, NULL};
    sbx__shell_run_init(&r, RUN_MAX);
    int rc = fs_op(fs, "chmod", path, more, &r, err);
    if (rc == -SBX_E_INVAL && strstr(err->msg, "symlink"))
        rc = sbx_error_set(err, SBX_E_PERM, 0, "'%s' is a symlink", path);
    sbx__shell_run_release(&r);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Contents */

int sbx__shellfs_read_open(const struct sbx__shellfs *fs, const char *path, int *out_fd,
                           uint64_t *out_size, struct sbx_error *err)
{
    struct sbx__shell_run r;
    int fd = -1;
    unsigned long long size = 0;
    sbx__shell_run_init(&r, RUN_MAX);
    int rc = fs_op(fs, "read", path, NULL, &r, err);
    char *abs = NULL;
    if (rc == 0) {
        const char *nl = r.out.data ? strchr(r.out.data, '\n') : NULL;
        if (!nl || sscanf(nl + 1, "%llu", &size) != 1)
            rc = sbx_error_set(err, SBX_E_PARSE, 0, "the state of '%s' is garbled", path);
        else
            abs = sbx_xstrndup(r.out.data, (size_t)(nl - r.out.data));
    }
    /* The file may grow between the check and the copy: a bound, not an exact size. */
    if (rc == 0 && (rc = sbx__shellfs_tmpfile(&fd, err)) == 0)
        rc = fs->ops->get(fs->ctx, abs, fd, 2 * (uint64_t)size + 65536, err);
    struct stat st;
    if (rc == 0 && (fstat(fd, &st) < 0 || lseek(fd, 0, SEEK_SET) < 0))
        rc = sbx_error_errno(err, errno, "cannot read '%s'", path);
    if (rc == 0) {
        *out_fd = fd;
        fd = -1;
        if (out_size)
            *out_size = (uint64_t)st.st_size;
    }
    sbx_fd_close(&fd);
    free(abs);
    sbx__shell_run_release(&r);
    return rc;
}

/* The reader's bytes into fd, holes as zeros (the transfer has no sparse form). */
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

int sbx__shellfs_write(const struct sbx__shellfs *fs, const char *path,
                       const struct sbx_file_reader *r, uint64_t max, mode_t mode, int flags,
                       struct sbx_error *err)
{
    int fd = -1;
    uint64_t size = 0;
    char rnd[17], m[16], *name = NULL, *abs = NULL;
    struct sbx__shell_run run;
    sbx__shell_run_init(&run, RUN_MAX);
    int rc = sbx__shellfs_tmpfile(&fd, err);
    if (rc == 0)
        rc = copy_in(r, max, fd, &size, path, err);
    if (rc == 0 && lseek(fd, 0, SEEK_SET) < 0)
        rc = sbx_error_errno(err, errno, "lseek");
    if (rc == 0)
        rc = sbx_random_hex(rnd, 8, err);
    if (rc < 0)
        goto out;
    name = sbx_xasprintf(".sbx-write-%s", rnd);
    abs = sbx_xasprintf("%s/%s", strcmp(fs->root, "/") ? fs->root : "", name);
    if ((rc = fs->ops->put(fs->ctx, abs, fd, size, err)) < 0)
        goto out;
    snprintf(m, sizeof(m), "%o", (unsigned)(mode ? mode & 07777 : 0644));
    const char *more[] = {name,
                          m,
                          flags & SBX_WRITE_PARENTS ? "1" : "0",
                          flags & SBX_WRITE_EXCL ? "1" : "0",
                          flags & SBX_WRITE_APPEND ? "1" : "0",
                          NULL};
    rc = fs_op(fs, "place", path, more, &run, err);
out:
    sbx_fd_close(&fd);
    sbx__shell_run_release(&run);
    free(name);
    free(abs);
    return rc;
}

/* ---- the session file ops ---- */

int sbx__shellfs_s_workspace_fd(struct sbx_session *s, int *out, struct sbx_error *err)
{
    struct sbx__shellfs fs;
    s->ops->shellfs(s, &fs);
    int rc = fs.copy ? sbx__shellfs_copy_take(&fs, fs.copy, err)
                     : sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                                     "sandbox '%s' keeps no copy of its workspace", s->id);
    if (rc < 0) {
        sbx_error_prefix(err, "workspace of sandbox '%s'", s->id);
        return rc;
    }
    *out = fs.copy->fd;
    return 0;
}

int sbx__shellfs_s_ls(struct sbx_session *s, const char *path, struct sbx_dirlist *out,
                      struct sbx_error *err)
{
    struct sbx__shellfs fs;
    s->ops->shellfs(s, &fs);
    return sbx__shellfs_ls(&fs, path, out, err);
}

int sbx__shellfs_s_stat(struct sbx_session *s, const char *path, struct sbx_dirent *out,
                        struct sbx_error *err)
{
    struct sbx__shellfs fs;
    s->ops->shellfs(s, &fs);
    return sbx__shellfs_stat(&fs, path, out, err);
}

int sbx__shellfs_s_mkdir(struct sbx_session *s, const char *path, int flags, struct sbx_error *err)
{
    struct sbx__shellfs fs;
    s->ops->shellfs(s, &fs);
    return sbx__shellfs_mkdir(&fs, path, flags, err);
}

int sbx__shellfs_s_rm(struct sbx_session *s, const char *path, int flags, struct sbx_error *err)
{
    struct sbx__shellfs fs;
    s->ops->shellfs(s, &fs);
    return sbx__shellfs_rm(&fs, path, flags, err);
}

int sbx__shellfs_s_chmod(struct sbx_session *s, const char *path, mode_t mode,
                         struct sbx_error *err)
{
    struct sbx__shellfs fs;
    s->ops->shellfs(s, &fs);
    return sbx__shellfs_chmod(&fs, path, mode, err);
}

int sbx__shellfs_s_read_open(struct sbx_session *s, const char *path, int *out_fd,
                             uint64_t *out_size, struct sbx_error *err)
{
    struct sbx__shellfs fs;
    s->ops->shellfs(s, &fs);
    return sbx__shellfs_read_open(&fs, path, out_fd, out_size, err);
}

int sbx__shellfs_s_write(struct sbx_session *s, const char *path, const struct sbx_file_reader *r,
                         uint64_t max, mode_t mode, int flags, struct sbx_error *err)
{
    struct sbx__shellfs fs;
    s->ops->shellfs(s, &fs);
    return sbx__shellfs_write(&fs, path, r, max, mode, flags, err);
}
