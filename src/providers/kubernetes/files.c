/* Workspace files of a Kubernetes sandbox, through exec: Kubernetes has no file API, so each
 * operation is one short shell script of fixed text run in the pod (paths are its arguments,
 * never spliced into it), as `kubectl cp` does with tar. Contents travel as the command's
 * stdin and stdout; snapshots are a tar of the workspace streamed out of the pod and back in.
 *
 * Every script first resolves the path it is given inside the pod, component by component:
 * the directories on the way are entered with `cd -P` and the result must still be under the
 * workspace root, and a final symlink is followed only where the operation reads through it
 * (read, ls) and only to a target under the root; anything leading out is refused (exit 13,
 * SBX_E_PERM). A process in the sandbox that swaps a directory for a symlink between the check
 * and the act can make one operation land elsewhere in its own container, never on this host. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/dl-archive.h"
#include "providers/kubernetes/client.h"
#include "sandbox/session/internal.h"
#include "sandbox/shellfs/shellfs.h"
#include "sbx/fs.h"
#include "sbx/strv.h"

#define LS_OUT_MAX  ((size_t)64 << 20)
#define RUN_MAX     ((size_t)1 << 20)
#define READ_MAX    ((uint64_t)64 << 30)
#define COPY_CHUNK  65536
#define BATCH_FILES 4096
#define BATCH_BYTES ((uint64_t)64 << 20)

/* Shared by every script: $1 is the workspace root, the operation's arguments follow. */
#define LIB                                                                                       \
    "root=$1; shift\n"                                                                            \
    "rootr=$(cd -P -- \"$root\" 2>/dev/null && pwd -P) || { echo \"no workspace at $root\" >&2; " \
    "exit 70; }\n"                                                                                \
    "fail() { printf '%s\\n' \"$2\" >&2; exit \"$1\"; }\n"                                        \
    "inside() { case $1 in \"$rootr\"|\"$rootr\"/*) return 0;; esac; return 1; }\n"               \
    "dirof() {\n"                                                                                 \
    "  if [ -z \"$1\" ]; then D=$rootr; return 0; fi\n"                                           \
    "  if ! D=$(cd -P -- \"$rootr/$1\" 2>/dev/null && pwd -P); then\n"                            \
    "    if [ -e \"$rootr/$1\" ]; then fail 20 'not a directory'; fi\n"                           \
    "    fail 2 'no such file or directory'\n"                                                    \
    "  fi\n"                                                                                      \
    "  inside \"$D\" || fail 13 'it leads out of the workspace'\n"                                \
    "}\n"                                                                                         \
    "at() {\n"                                                                                    \
    "  case $1 in\n"                                                                              \
    "  '') P=$rootr; return 0;;\n"                                                                \
    "  */*) dirof \"${1%/*}\"; P=$D/${1##*/};;\n"                                                 \
    "  *) D=$rootr; P=$D/$1;;\n"                                                                  \
    "  esac\n"                                                                                    \
    "  if [ \"$2\" = 1 ] && [ -L \"$P\" ]; then\n"                                                \
    "    T=$(readlink -f -- \"$P\") || fail 2 'no such file or directory'\n"                      \
    "    inside \"$T\" || fail 13 'it leads out of the workspace'\n"                              \
    "    P=$T\n"                                                                                  \
    "  fi\n"                                                                                      \
    "}\n"                                                                                         \
    "walk() {\n"                                                                                  \
    "  cur=$rootr rest=$1\n"                                                                      \
    "  while [ -n \"$rest\" ]; do\n"                                                              \
    "    case $rest in */*) c=${rest%%/*}; rest=${rest#*/};; *) c=$rest; rest=;; esac\n"          \
    "    n=$cur/$c\n"                                                                             \
    "    if [ -e \"$n\" ] || [ -L \"$n\" ]; then\n"                                               \
    "      if [ -z \"$rest\" ] && [ \"$2\" != 1 ]; then fail 17 'it exists'; fi\n"                \
    "      r=$(cd -P -- \"$n\" 2>/dev/null && pwd -P) || { [ -n \"$rest\" ] || fail 17 'it "      \
    "exists'; fail 20 'not a directory'; }\n"                                                     \
    "      inside \"$r\" || fail 13 'it leads out of the workspace'\n"                            \
    "      cur=$r\n"                                                                              \
    "    else\n"                                                                                  \
    "      if [ -n \"$rest\" ] && [ \"$2\" != 1 ]; then fail 2 'no parent directory'; fi\n"       \
    "      mkdir \"$n\" || fail 1 'cannot create the directory'\n"                                \
    "      cur=$n\n"                                                                              \
    "    fi\n"                                                                                    \
    "  done\n"                                                                                    \
    "  D=$cur\n"                                                                                  \
    "}\n"                                                                                         \
    "rec() {\n"                                                                                   \
    "  stat -c '%f %s %u %g %Y' -- \"$1\" || return 1\n"                                          \
    "  printf '%s\\0' \"$2\"\n"                                                                   \
    "  if [ -L \"$1\" ]; then printf '%s\\0' \"$(readlink -- \"$1\")\"; fi\n"                     \
    "}\n"

/* One record per entry: "<mode hex> <size> <uid> <gid> <mtime>\n<name>\0", then for a symlink
 * "<target>\0". Names are NUL-terminated, so none can forge a record. */
static const char STAT[] = LIB "at \"$1\" 0\n"
                               "[ -e \"$P\" ] || [ -L \"$P\" ] || fail 2 'no such file'\n"
                               "rec \"$P\" \"$2\"\n";

static const char LS[] =
        LIB "at \"$1\" 1\n"
            "[ -e \"$P\" ] || [ -L \"$P\" ] || fail 2 'no such file or directory'\n"
            "if [ ! -d \"$P\" ]; then rec \"$P\" \"$2\"; exit; fi\n"
            "cd -- \"$P\" || fail 13 'cannot enter it'\n"
            "for f in * .*; do\n"
            "  case $f in .|..) continue;; esac\n"
            "  [ -e \"./$f\" ] || [ -L \"./$f\" ] || continue\n"
            "  rec \"./$f\" \"$f\" || continue\n"
            "done\n";

static const char MKDIR[] = LIB "walk \"$1\" \"$2\"\n";

static const char RM[] =
        LIB "at \"$1\" 0\n"
            "if [ ! -e \"$P\" ] && [ ! -L \"$P\" ]; then fail 2 'no such file'; fi\n"
            "if [ -d \"$P\" ] && [ ! -L \"$P\" ]; then\n"
            "  if [ \"$2\" = 1 ]; then rm -rf \"$P\" || fail 1 'cannot remove it';\n"
            "  else rmdir \"$P\" 2>/dev/null || fail 39 'directory not empty'; fi\n"
            "else rm -f \"$P\" || fail 1 'cannot remove it'; fi\n";

static const char CHMOD[] = LIB "at \"$1\" 0\n"
                                "[ -e \"$P\" ] || [ -L \"$P\" ] || fail 2 'no such file'\n"
                                "[ ! -L \"$P\" ] || fail 13 'it is a symlink'\n"
                                "chmod \"$2\" \"$P\" || fail 1 'cannot change its mode'\n";

static const char READ[] = LIB "at \"$1\" 1\n"
                               "[ -e \"$P\" ] || fail 2 'no such file'\n"
                               "[ ! -d \"$P\" ] || fail 21 'it is a directory'\n"
                               "[ -f \"$P\" ] || fail 21 'not a regular file'\n"
                               "exec cat \"$P\"\n";

/* $1 path, $2 mode, $3 make parents, $4 exclusive, $5 append, $6 the byte count on stdin.
 * stdin is read to its end whatever happens, so the connection ends cleanly. */
static const char WRITE[] = LIB
        "rel=$1 mode=$2 parents=$3 excl=$4 app=$5 n=$6\n"
        "bad() { head -c \"$n\" >/dev/null 2>&1; fail \"$1\" \"$2\"; }\n"
        "case $rel in */*) pd=${rel%/*};; *) pd=;; esac\n"
        "b=${rel##*/}\n"
        "if [ \"$parents\" = 1 ]; then (walk \"$pd\" 1) || bad $? 'cannot make its "
        "directory'; fi\n"
        "( dirof \"$pd\" ) || bad $? 'no directory for it'\n"
        "dirof \"$pd\"\n"
        "P=$D/$b\n"
        "if [ -d \"$P\" ] && [ ! -L \"$P\" ]; then bad 21 'it is a directory'; fi\n"
        "if [ \"$excl\" = 1 ] && { [ -e \"$P\" ] || [ -L \"$P\" ]; }; then bad 17 'it exists'; "
        "fi\n"
        "if [ \"$app\" = 1 ]; then\n"
        "  [ ! -L \"$P\" ] || bad 13 'it is a symlink'\n"
        "  if [ ! -e \"$P\" ]; then (umask 077; : > \"$P\") && chmod \"$mode\" \"$P\" || bad 1 "
        "'cannot create it'; fi\n"
        "  [ -f \"$P\" ] || bad 21 'not a regular file'\n"
        "  head -c \"$n\" >> \"$P\" || fail 1 'cannot write it'\n"
        "  exit 0\n"
        "fi\n"
        "t=$D/.sbx-write.$$\n"
        "(umask 077; head -c \"$n\" > \"$t\") || { rm -f \"$t\"; fail 1 'cannot write it'; }\n"
        "c=$(wc -c < \"$t\")\n"
        "[ \"$c\" -eq \"$n\" ] || { rm -f \"$t\"; fail 5 'its content was cut short'; }\n"
        "chmod \"$mode\" \"$t\" && mv -fT \"$t\" \"$P\" || { rm -f \"$t\"; fail 1 'cannot write "
        "it'; }\n";

/* The batch of materialisation's writes: $@ the directories its files go into, each existing
 * prefix of which must resolve under the root; then the tar on stdin unpacked there. */
static const char UNPACK[] = LIB
        "for d in \"$@\"; do\n"
        "  p= rest=$d\n"
        "  while [ -n \"$rest\" ]; do\n"
        "    case $rest in */*) c=${rest%%/*}; rest=${rest#*/};; *) c=$rest; rest=;; esac\n"
        "    p=${p:+$p/}$c\n"
        "    if [ -e \"$rootr/$p\" ] || [ -L \"$rootr/$p\" ]; then dirof \"$p\"; else break; fi\n"
        "  done\n"
        "done\n"
        "exec tar -C \"$rootr\" -xof -\n";

/* Errors of a script, from its exit status and what it said. */
static int script_error(int code, const struct sbx_buf *e, const char *what, const char *rel,
                        struct sbx_error *err)
{
    const char *msg = e->len ? e->data : "";
    int n = (int)strcspn(msg, "\n");
    enum sbx_errcode c = code == 2                                ? SBX_E_NOTFOUND
                         : code == 13                             ? SBX_E_PERM
                         : code == 17                             ? SBX_E_EXISTS
                         : code == 20 || code == 21 || code == 39 ? SBX_E_INVAL
                                                                  : SBX_E_SANDBOX;
    if (c == SBX_E_SANDBOX)
        return sbx_error_set(err, c, 0, "cannot %s '%s': %.*s (exit status %d)", what, rel, n, msg,
                             code);
    return sbx_error_set(err, c, code == 2 ? ENOENT : 0, "cannot %s '%s': %.*s", what, rel, n, msg);
}

/* Run script with the root and args; its output into out (may be NULL). */
static int script(struct sbx_session *bs, const char *text, const char *const *args,
                  struct sbx__kube_run *io, const char *what, const char *rel,
                  struct sbx_error *err)
{
    const struct sbx__kube_target *t = sbx__kube_session_target(bs);
    struct sbx_strv argv;
    struct sbx_buf out, e;
    int rc = sbx__kube_flush(bs, err);
    if (rc < 0)
        return rc;
    sbx_strv_init(&argv);
    sbx_buf_init(&out, RUN_MAX);
    sbx_buf_init(&e, RUN_MAX);
    sbx_strv_push(&argv, "/bin/sh");
    sbx_strv_push(&argv, "-c");
    sbx_strv_push(&argv, text);
    sbx_strv_push(&argv, "sbx");
    sbx_strv_push(&argv, t->root);
    for (const char *const *a = args; *a; a++)
        sbx_strv_push(&argv, *a);
    io->argv = (const char *const *)argv.v;
    if (!io->out)
        io->out = &out;
    io->err = &e;
    rc = sbx__kube_run(t, io, err);
    if (rc == 0 && io->code != 0)
        rc = script_error(io->code, &e, what, rel, err);
    if (io->out == &out)
        io->out = NULL;
    sbx_strv_release(&argv);
    sbx_buf_release(&out);
    sbx_buf_release(&e);
    return rc;
}

static const char *base_name(const char *rel)
{
    const char *slash = strrchr(rel, '/');
    return rel[0] ? (slash ? slash + 1 : rel) : ".";
}

int sbx__kube_parse_entries(const char *p, size_t n, struct sbx_dirlist *out, struct sbx_error *err)
{
    return sbx__shellfs_parse_entries(p, n, 1, out, err);
}

static int entries(struct sbx_session *bs, const char *text, const char *path,
                   struct sbx_dirlist *l, const char *what, struct sbx_error *err)
{
    struct sbx_buf out;
    sbx_buf_init(&out, LS_OUT_MAX);
    const char *args[] = {path, base_name(path), NULL};
    struct sbx__kube_run io = {.input_fd = -1, .output_fd = -1, .out = &out};
    int rc = script(bs, text, args, &io, what, path, err);
    if (rc == 0 && (rc = sbx__kube_parse_entries(out.data ? out.data : "", out.len, l, err)) < 0)
        sbx_dirlist_release(l);
    sbx_buf_release(&out);
    return rc;
}

int sbx__kube_stat(struct sbx_session *bs, const char *path, struct sbx_dirent *out,
                   struct sbx_error *err)
{
    struct sbx_dirlist l = {0};
    int rc = entries(bs, STAT, path, &l, "stat", err);
    if (rc == 0 && l.n != 1) {
        sbx_dirlist_release(&l);
        return sbx_error_set(err, SBX_E_PARSE, 0, "the stat of '%s' is garbled", path);
    }
    if (rc == 0) {
        *out = l.v[0];
        free(l.v);
    }
    return rc;
}

int sbx__kube_ls(struct sbx_session *bs, const char *path, struct sbx_dirlist *out,
                 struct sbx_error *err)
{
    struct sbx_dirlist l = {0};
    int rc = entries(bs, LS, path, &l, "list", err);
    if (rc == 0) {
        if (l.n)
            sbx__shellfs_sort_entries(&l);
        *out = l;
    }
    return rc;
}

int sbx__kube_mkdir(struct sbx_session *bs, const char *path, int flags, struct sbx_error *err)
{
    const char *args[] = {path, flags & SBX_MKDIR_PARENTS ? "1" : "0", NULL};
    struct sbx__kube_run io = {.input_fd = -1, .output_fd = -1};
    return script(bs, MKDIR, args, &io, "create directory", path, err);
}

int sbx__kube_rm(struct sbx_session *bs, const char *path, int flags, struct sbx_error *err)
{
    const char *args[] = {path, flags & SBX_RM_RECURSIVE ? "1" : "0", NULL};
    struct sbx__kube_run io = {.input_fd = -1, .output_fd = -1};
    int rc = script(bs, RM, args, &io, "remove", path, err);
    /* Nothing there, nor its directory: with force that is what was wanted. */
    if (rc == -SBX_E_NOTFOUND && (flags & SBX_RM_FORCE)) {
        sbx_error_clear(err);
        rc = 0;
    }
    return rc;
}

int sbx__kube_chmod(struct sbx_session *bs, const char *path, mode_t mode, struct sbx_error *err)
{
    char m[16];
    snprintf(m, sizeof(m), "%o", (unsigned)mode);
    const char *args[] = {path, m, NULL};
    struct sbx__kube_run io = {.input_fd = -1, .output_fd = -1};
    return script(bs, CHMOD, args, &io, "change the mode of", path, err);
}

static int tmpfile_fd(int *out, struct sbx_error *err)
{
    const char *tmp = getenv("TMPDIR");
    int fd = open(tmp && tmp[0] == '/' ? tmp : "/tmp", O_RDWR | O_TMPFILE | O_CLOEXEC, 0600);
    if (fd < 0)
        return sbx_error_errno(err, errno, "cannot make a temporary file");
    *out = fd;
    return 0;
}

int sbx__kube_read_open(struct sbx_session *bs, const char *path, int *out_fd, uint64_t *out_size,
                        struct sbx_error *err)
{
    int fd = -1;
    int rc = tmpfile_fd(&fd, err);
    if (rc < 0)
        return rc;
    const char *args[] = {path, NULL};
    struct sbx__kube_run io = {.input_fd = -1, .output_fd = fd, .output_max = READ_MAX};
    rc = script(bs, READ, args, &io, "read", path, err);
    struct stat st;
    if (rc == 0 && (fstat(fd, &st) < 0 || lseek(fd, 0, SEEK_SET) < 0))
        rc = sbx_error_errno(err, errno, "cannot read '%s'", path);
    if (rc < 0) {
        close(fd);
        return rc;
    }
    *out_fd = fd;
    if (out_size)
        *out_size = (uint64_t)st.st_size;
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Materialisation's writes, batched: a fresh path (SBX__WRITE_FRESH) goes into a tar that one
 * exec unpacks, before the next operation of any other kind, instead of one exec per file. */

struct kbatch {
    int fd;            /* the tar being built (unlinked) */
    struct archive *a; /* its writer */
    size_t files;
    uint64_t bytes;
    struct sbx_strv dirs; /* the directories the files go into */
};

static int archive_fail(struct archive *a, const char *what, struct sbx_error *err)
{
    return sbx_error_set(err, SBX_E_IO, archive_errno(a), "%s: %s", what,
                         archive_error_string(a) ? archive_error_string(a) : "archive error");
}

void sbx__kube_batch_drop(struct ksession *s)
{
    struct kbatch *b = s->batch;
    if (!b)
        return;
    if (b->a)
        archive_write_free(b->a);
    sbx_fd_close(&b->fd);
    sbx_strv_release(&b->dirs);
    free(b);
    s->batch = NULL;
}

static int batch_new(struct ksession *s, struct sbx_error *err)
{
    struct kbatch *b = sbx_xcalloc(1, sizeof(*b));
    b->fd = -1;
    sbx_strv_init(&b->dirs);
    s->batch = b;
    int rc = sbx__archive_load(err);
    if (rc == 0)
        rc = tmpfile_fd(&b->fd, err);
    if (rc == 0) {
        b->a = archive_write_new();
        if (archive_write_set_format_pax_restricted(b->a) != ARCHIVE_OK ||
            archive_write_open_fd(b->a, b->fd) != ARCHIVE_OK)
            rc = archive_fail(b->a, "cannot write an archive", err);
    }
    if (rc < 0)
        sbx__kube_batch_drop(s);
    return rc;
}

/* data (n bytes at its start) as the member "./path". */
static int batch_member(struct kbatch *b, const char *path, int data, uint64_t n, mode_t mode,
                        struct sbx_error *err)
{
    struct archive_entry *e = archive_entry_new();
    char *name = sbx_xasprintf("./%s", path), buf[COPY_CHUNK];
    int rc = 0;
    archive_entry_set_pathname(e, name);
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, mode);
    archive_entry_set_size(e, (la_int64_t)n);
    archive_entry_set_mtime(e, time(NULL), 0);
    if (archive_write_header(b->a, e) != ARCHIVE_OK)
        rc = archive_fail(b->a, "cannot write an archive", err);
    for (ssize_t k; rc == 0 && (k = read(data, buf, sizeof(buf))) != 0;) {
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            rc = sbx_error_errno(err, errno, "cannot read the content of '%s'", path);
        else if (archive_write_data(b->a, buf, (size_t)k) != k)
            rc = archive_fail(b->a, "cannot write an archive", err);
    }
    archive_entry_free(e);
    free(name);
    return rc;
}

int sbx__kube_flush(struct sbx_session *bs, struct sbx_error *err)
{
    struct ksession *s = (struct ksession *)bs;
    struct kbatch *b = s->batch;
    if (!b)
        return 0;
    int rc = archive_write_close(b->a) == ARCHIVE_OK
                     ? 0
                     : archive_fail(b->a, "cannot write an archive", err);
    if (rc == 0 && lseek(b->fd, 0, SEEK_SET) < 0)
        rc = sbx_error_errno(err, errno, "lseek");
    if (rc == 0) {
        struct sbx__kube_run io = {.input_fd = b->fd, .output_fd = -1};
        const char *what = b->dirs.n ? b->dirs.v[0] : ".";
        s->batch = NULL; /* the script's own run must not flush it again */
        rc = script(bs, UNPACK, (const char *const *)b->dirs.v, &io, "write the files of",
                    what[0] ? what : ".", err);
        s->batch = b;
    }
    sbx__kube_batch_drop(s);
    return rc;
}

static int batch_add(struct sbx_session *bs, const char *path, int data, uint64_t n, mode_t mode,
                     struct sbx_error *err)
{
    struct ksession *s = (struct ksession *)bs;
    int rc = s->batch ? 0 : batch_new(s, err);
    if (rc == 0)
        rc = batch_member(s->batch, path, data, n, mode, err);
    if (rc < 0) {
        sbx__kube_batch_drop(s);
        return rc;
    }
    const char *slash = strrchr(path, '/');
    char *dir = slash ? sbx_xstrndup(path, (size_t)(slash - path)) : sbx_xstrdup("");
    if (sbx_strv_find(&s->batch->dirs, dir) < 0)
        sbx_strv_push(&s->batch->dirs, dir);
    free(dir);
    s->batch->files++;
    s->batch->bytes += n;
    if (s->batch->files >= BATCH_FILES || s->batch->bytes >= BATCH_BYTES)
        rc = sbx__kube_flush(bs, err);
    return rc;
}

/* The reader's bytes into fd (holes as zeros: a pod gets a stream), at most max. */
static int spool(const struct sbx_file_reader *r, uint64_t max, int fd, uint64_t *total,
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
        uint64_t k = n > 0 ? (uint64_t)n : hole;
        if (*total + k > max)
            return sbx_error_set(err, SBX_E_TOOBIG, 0, "'%s' would be larger than %llu bytes", path,
                                 (unsigned long long)max);
        if (n == 0)
            memset(buf, 0, sizeof(buf));
        while (k) {
            size_t piece = k < sizeof(buf) ? (size_t)k : sizeof(buf);
            int rc = sbx_fd_write_all(fd, buf, piece, err);
            if (rc < 0)
                return rc;
            *total += piece;
            k -= piece;
            if (n > 0)
                break;
        }
    }
}

int sbx__kube_write(struct sbx_session *bs, const char *path, const struct sbx_file_reader *r,
                    uint64_t max, mode_t mode, int flags, struct sbx_error *err)
{
    int fd = -1;
    uint64_t n = 0;
    int rc = tmpfile_fd(&fd, err);
    if (rc == 0)
        rc = spool(r, max, fd, &n, path, err);
    if (rc == 0 && lseek(fd, 0, SEEK_SET) < 0)
        rc = sbx_error_errno(err, errno, "lseek");
    int batch = (flags & SBX__WRITE_FRESH) && !(flags & (SBX_WRITE_APPEND | SBX_WRITE_EXCL));
    if (rc == 0 && batch) {
        rc = batch_add(bs, path, fd, n, mode, err);
    } else if (rc == 0) {
        char m[16], num[32];
        snprintf(m, sizeof(m), "%o", (unsigned)mode);
        snprintf(num, sizeof(num), "%llu", (unsigned long long)n);
        const char *args[] = {path,
                              m,
                              flags & SBX_WRITE_PARENTS ? "1" : "0",
                              flags & SBX_WRITE_EXCL ? "1" : "0",
                              flags & SBX_WRITE_APPEND ? "1" : "0",
                              num,
                              NULL};
        /* The script reads exactly n bytes (head -c): no end of stdin is needed. */
        struct sbx__kube_run io = {
                .input_fd = fd, .input_len = (size_t)n, .output_fd = -1, .input_bounded = 1};
        rc = script(bs, WRITE, args, &io, "write", path, err);
    }
    sbx_fd_close(&fd);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Snapshots: the workspace as a tar stream out of the pod and back in */

int sbx__kube_workspace_export(struct sbx_session *bs, int out_fd, struct sbx_error *err)
{
    const struct sbx__kube_target *t = sbx__kube_session_target(bs);
    int flushed = sbx__kube_flush(bs, err);
    if (flushed < 0)
        return flushed;
    const char *argv[] = {"tar", "-C", t->root, "-cf", "-", ".", NULL};
    struct sbx_buf e;
    sbx_buf_init(&e, RUN_MAX);
    struct sbx__kube_run io = {
            .argv = argv, .input_fd = -1, .output_fd = out_fd, .err = &e, .timeout_ms = -1};
    int rc = sbx__kube_run(t, &io, err);
    if (rc == 0 && io.code != 0)
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "cannot pack the workspace: %.*s (exit %d)",
                           (int)strcspn(e.data ? e.data : "", "\n"), e.data ? e.data : "", io.code);
    sbx_buf_release(&e);
    return rc;
}

int sbx__kube_workspace_import(struct sbx_session *bs, int in_fd, struct sbx_error *err)
{
    const struct sbx__kube_target *t = sbx__kube_session_target(bs);
    int flushed = sbx__kube_flush(bs, err);
    if (flushed < 0)
        return flushed;
    /* -o: the files are the sandbox's user's, not the archive's owners. */
    const char *argv[] = {"tar", "-C", t->root, "-xof", "-", NULL};
    struct sbx_buf o, e;
    sbx_buf_init(&o, RUN_MAX);
    sbx_buf_init(&e, RUN_MAX);
    struct sbx__kube_run io = {.argv = argv,
                               .input_fd = in_fd,
                               .output_fd = -1,
                               .out = &o,
                               .err = &e,
                               .timeout_ms = -1};
    int rc = sbx__kube_run(t, &io, err);
    if (rc == 0 && io.code != 0)
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "cannot unpack the workspace: %.*s (exit %d)",
                           (int)strcspn(e.data ? e.data : "", "\n"), e.data ? e.data : "", io.code);
    sbx_buf_release(&o);
    sbx_buf_release(&e);
    return rc;
}
