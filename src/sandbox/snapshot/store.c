/* The snapshot store: its directories and lock, tree documents, blobs, references, holds and
 * collection. docs/internals/snapshots.md describes the layout. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/grow.h"
#include "core/json-canon.h"
#include "sbx/buf.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/path.h"
#include "sbx/strv.h"
#include "sbx/time.h"
#include "sandbox/snapshot/internal.h"

/* A tree document of a million entries is about 150 MB of JSON. */
#define TREE_DOC_MAX ((size_t)512 << 20)
#define HOLDER_MAX   1024
#define SNAP_BLOCK   4096

void sbx__snap_limits(const struct sbx_snapshot_limits *lim, struct sbx_snapshot_limits *out)
{
    static const struct sbx_snapshot_limits zero;
    *out = lim ? *lim : zero;
    if (!out->max_entries)
        out->max_entries = SBX_SNAPSHOT_DEFAULT_MAX_ENTRIES;
    if (!out->max_bytes)
        out->max_bytes = SBX_SNAPSHOT_DEFAULT_MAX_BYTES;
    if (!out->max_file_bytes)
        out->max_file_bytes = out->max_bytes;
    if (!out->max_ratio)
        out->max_ratio = SBX_SNAPSHOT_DEFAULT_MAX_RATIO;
    if (!out->max_path)
        out->max_path = SBX_SNAPSHOT_DEFAULT_MAX_PATH;
    if (!out->max_depth)
        out->max_depth = SBX_SNAPSHOT_DEFAULT_MAX_DEPTH;
}

/* ---- store ---- */

static int open_subdir(int dirfd, const char *name, int *out, struct sbx_error *err)
{
    if (mkdirat(dirfd, name, 0700) < 0 && errno != EEXIST)
        return sbx_error_errno(err, errno, "cannot create '%s'", name);
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return sbx_error_errno(err, errno, "cannot open '%s'", name);
    *out = fd;
    return 0;
}

/* mkdir -p of an absolute or relative host path; the last component gets 0700. */
static int make_store_dir(const char *path, struct sbx_error *err)
{
    char *p = sbx_xstrdup(path);
    int rc = 0;
    for (char *s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = 0;
        if (mkdir(p, 0755) < 0 && errno != EEXIST)
            rc = sbx_error_errno(err, errno, "cannot create '%s'", p);
        *s = '/';
        if (rc < 0)
            goto out;
    }
    if (mkdir(p, 0700) < 0 && errno != EEXIST)
        rc = sbx_error_errno(err, errno, "cannot create '%s'", p);
out:
    free(p);
    return rc;
}

int sbx_snapshot_store_open(const char *path, struct sbx_snapshot_store **out,
                            struct sbx_error *err)
{
    char *dir = NULL;
    if (path)
        dir = sbx_xstrdup(path);
    else if (getenv("SBX_SNAPSHOTS") && getenv("SBX_SNAPSHOTS")[0])
        dir = sbx_xstrdup(getenv("SBX_SNAPSHOTS"));
    else if (getenv("XDG_STATE_HOME") && getenv("XDG_STATE_HOME")[0] == '/')
        dir = sbx_xasprintf("%s/sbx/snapshots", getenv("XDG_STATE_HOME"));
    else if (getenv("HOME") && getenv("HOME")[0] == '/')
        dir = sbx_xasprintf("%s/.local/state/sbx/snapshots", getenv("HOME"));
    else
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "no snapshot store: set SBX_SNAPSHOTS, XDG_STATE_HOME or HOME");
    if (!dir[0]) {
        free(dir);
        return sbx_error_set(err, SBX_E_INVAL, 0, "snapshot store path is empty");
    }
    struct sbx_snapshot_store *st = sbx_xcalloc(1, sizeof(*st));
    st->path = dir;
    st->dirfd = st->lockfd = st->blobs_fd = st->trees_fd = st->holds_fd = st->cache_fd =
            st->tmp_fd = st->packs_fd = -1;
    pthread_mutex_init(&st->mu, NULL);
    st->loose_stale = 1;
    int rc = make_store_dir(dir, err);
    if (rc < 0)
        goto out;
    st->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (st->dirfd < 0) {
        rc = sbx_error_errno(err, errno, "cannot open '%s'", dir);
        goto out;
    }
    struct stat sb;
    if (fstat(st->dirfd, &sb) < 0) {
        rc = sbx_error_errno(err, errno, "cannot stat '%s'", dir);
        goto out;
    }
    /* The store holds other users' workspace contents when shared by mistake: keep it 0700. */
    if ((sb.st_mode & 077) && sb.st_uid == geteuid() && fchmod(st->dirfd, 0700) < 0) {
        rc = sbx_error_errno(err, errno, "cannot chmod '%s'", dir);
        goto out;
    }
    st->lockfd = openat(st->dirfd, "lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (st->lockfd < 0) {
        rc = sbx_error_errno(err, errno, "cannot open '%s/lock'", dir);
        goto out;
    }
    if ((rc = open_subdir(st->dirfd, "blobs", &st->blobs_fd, err)) < 0 ||
        (rc = open_subdir(st->dirfd, "trees", &st->trees_fd, err)) < 0 ||
        (rc = open_subdir(st->dirfd, "holds", &st->holds_fd, err)) < 0 ||
        (rc = open_subdir(st->dirfd, "cache", &st->cache_fd, err)) < 0 ||
        (rc = open_subdir(st->dirfd, "tmp", &st->tmp_fd, err)) < 0 ||
        (rc = open_subdir(st->dirfd, "packs", &st->packs_fd, err)) < 0 ||
        (rc = sbx__snap_packs_init(st, err)) < 0) {
        sbx_error_prefix(err, "snapshot store '%s'", dir);
        goto out;
    }
out:
    if (rc < 0) {
        sbx_snapshot_store_free(st);
        return rc;
    }
    *out = st;
    return 0;
}

void sbx_snapshot_store_free(struct sbx_snapshot_store *st)
{
    if (!st)
        return;
    sbx__snap_packs_free(st);
    pthread_mutex_destroy(&st->mu);
    sbx_fd_close(&st->packs_fd);
    sbx_fd_close(&st->dirfd);
    sbx_fd_close(&st->lockfd);
    sbx_fd_close(&st->blobs_fd);
    sbx_fd_close(&st->trees_fd);
    sbx_fd_close(&st->holds_fd);
    sbx_fd_close(&st->cache_fd);
    sbx_fd_close(&st->tmp_fd);
    free(st->path);
    free(st);
}

const char *sbx_snapshot_store_path(const struct sbx_snapshot_store *st)
{
    return st->path;
}

int sbx__snap_lock(struct sbx_snapshot_store *st, int exclusive, struct sbx_error *err)
{
    while (flock(st->lockfd, exclusive ? LOCK_EX : LOCK_SH) < 0) {
        if (errno != EINTR)
            return sbx_error_errno(err, errno, "cannot lock the snapshot store '%s'", st->path);
    }
    sbx__snap_packs_stale(st);
    pthread_mutex_lock(&st->mu);
    st->loose_stale = 1;
    pthread_mutex_unlock(&st->mu);
    return 0;
}

static int hex_byte(const char *hex)
{
    int b = 0;
    for (int i = 0; i < 2; i++) {
        char c = hex[i];
        int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (v < 0)
            return -1;
        b = b * 16 + v;
    }
    return b;
}

/* Whether blobs/ may have a directory for hex (it does, or it could not be read). */
static int loose_dir_may_exist(struct sbx_snapshot_store *st, const char *hex)
{
    int b = hex_byte(hex);
    if (b < 0)
        return 1;
    pthread_mutex_lock(&st->mu);
    if (st->loose_stale) {
        int dfd = dup(st->blobs_fd);
        DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
        memset(st->loose, d ? 0 : 1, sizeof(st->loose));
        if (!d)
            sbx_fd_close(&dfd);
        struct dirent *de;
        if (d)
            rewinddir(d);
        while (d && (de = readdir(d))) {
            int k = strlen(de->d_name) == 2 ? hex_byte(de->d_name) : -1;
            if (k >= 0)
                st->loose[k] = 1;
        }
        if (d)
            closedir(d);
        st->loose_stale = 0;
    }
    int may = st->loose[b];
    pthread_mutex_unlock(&st->mu);
    return may;
}

void sbx__snap_unlock(struct sbx_snapshot_store *st)
{
    flock(st->lockfd, LOCK_UN);
}

int sbx__snap_sync(struct sbx_snapshot_store *st, struct sbx_error *err)
{
    int rc = sbx__snap_pack_commit(st, err);
    pthread_mutex_lock(&st->mu);
    for (int i = 0; rc == 0 && i < 256; i++) {
        if (!st->dirty[i])
            continue;
        char sub[3];
        static const char xd[] = "0123456789abcdef";
        sub[0] = xd[i >> 4];
        sub[1] = xd[i & 15];
        sub[2] = 0;
        int fd = openat(st->blobs_fd, sub, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 || fsync(fd) < 0)
            rc = sbx_error_errno(err, errno, "cannot sync the blobs of '%s'", st->path);
        sbx_fd_close(&fd);
        st->dirty[i] = 0;
    }
    if (rc == 0 && st->dirty[256] && fsync(st->blobs_fd) < 0)
        rc = sbx_error_errno(err, errno, "cannot sync the blobs of '%s'", st->path);
    st->dirty[256] = 0;
    pthread_mutex_unlock(&st->mu);
    return rc;
}

void sbx__snap_discard(struct sbx_snapshot_store *st)
{
    sbx__snap_pack_abort(st);
}

/* ---- trees in memory ---- */

void sbx__snap_tree_release(struct snap_tree *t)
{
    for (size_t i = 0; i < t->n; i++) {
        free(t->v[i].path);
        free(t->v[i].target);
    }
    free(t->v);
    memset(t, 0, sizeof(*t));
}

struct snap_entry *sbx__snap_tree_add(struct snap_tree *t, char *path, enum snap_type type,
                                      uint32_t mode)
{
    SBX_ALLOC_GROW(t->v, t->n + 1, t->cap);
    struct snap_entry *e = &t->v[t->n++];
    memset(e, 0, sizeof(*e));
    e->path = path;
    e->type = type;
    e->mode = mode & 0777;
    return e;
}

static int entry_cmp(const void *a, const void *b)
{
    return strcmp(((const struct snap_entry *)a)->path, ((const struct snap_entry *)b)->path);
}

void sbx__snap_tree_sort(struct snap_tree *t)
{
    if (t->n > 1)
        qsort(t->v, t->n, sizeof(*t->v), entry_cmp);
}

/* Index of the entry whose path is p[0..n) in a sorted tree, or -1. */
static long tree_find_n(const struct snap_tree *t, const char *p, size_t n)
{
    size_t lo = 0, hi = t->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const char *m = t->v[mid].path;
        int c = strncmp(m, p, n);
        if (c == 0)
            c = m[n] ? 1 : 0;
        if (c == 0)
            return (long)mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

long sbx__snap_tree_find(const struct snap_tree *t, const char *path)
{
    return tree_find_n(t, path, strlen(path));
}

/* What sbx_path_normalize accepts and leaves as it is, without making the copy: relative,
 * valid UTF-8 with no control character, components of 1-255 bytes that are not "." or "..". */
static int path_is_normal(const char *p, size_t len)
{
    if (len == 0 || len > SBX_PATH_MAX || p[0] == '/')
        return 0;
    int high = 0;
    size_t start = 0;
    for (size_t i = 0; i <= len; i++) {
        unsigned char c = i < len ? (unsigned char)p[i] : '/';
        if (c < 0x20 || c == 0x7f)
            return 0;
        high |= c >= 0x80;
        if (c != '/')
            continue;
        size_t n = i - start;
        if (n == 0 || n > SBX_NAME_MAX || (n == 1 && p[start] == '.') ||
            (n == 2 && p[start] == '.' && p[start + 1] == '.'))
            return 0;
        start = i + 1;
    }
    /* bytes >= 0x80 are never control characters to sbx_text_has_control */
    return !high || sbx_utf8_valid(p, len);
}

static const char *type_name(enum snap_type t)
{
    switch (t) {
    case SNAP_DIR:
        return "dir";
    case SNAP_FILE:
        return "file";
    case SNAP_SYMLINK:
        return "symlink";
    }
    return "?";
}

int sbx__snap_check_target(const char *path, const char *target, struct sbx_error *err)
{
    size_t tl = strlen(target);
    if (!tl || tl > SBX_PATH_MAX)
        return sbx_error_set(err, SBX_E_PERM, 0, "symlink '%s' has an empty or too long target",
                             path);
    if (target[0] == '/')
        return sbx_error_set(err, SBX_E_PERM, 0, "symlink '%s' has an absolute target '%s'", path,
                             target);
    long depth = 0;
    for (const char *p = path; *p; p++)
        depth += *p == '/';
    /* ".." is allowed only before every other component: after a component that is itself a
     * symlink, ".." would climb from wherever that link leads, which a lexical check cannot
     * see. Leading ".." climbs from the link's own directory, a real one. */
    int down = 0;
    const char *c = target;
    while (*c) {
        const char *e = strchrnul(c, '/');
        size_t n = (size_t)(e - c);
        if (n == 2 && c[0] == '.' && c[1] == '.') {
            if (down || --depth < 0)
                return sbx_error_set(err, SBX_E_PERM, 0,
                                     "symlink '%s' target '%s' leaves the workspace", path, target);
        } else if (n && !(n == 1 && c[0] == '.')) {
            down = 1;
        }
        c = *e ? e + 1 : e;
    }
    return 0;
}

/* sha: a digest field (SBX_SHA256_HEX_LEN + 1 bytes, all readable) holding 64 lower-case hex
 * digits and its NUL. Every byte is looked at, without a branch per byte. */
static int is_hex64(const char sha[SBX_SHA256_HEX_LEN + 1])
{
    unsigned bad = 0;
    for (size_t i = 0; i < SBX_SHA256_HEX_LEN; i++) {
        unsigned c = (unsigned char)sha[i];
        bad |= (c - '0' >= 10u) & (c - 'a' >= 6u);
    }
    return !bad && sha[SBX_SHA256_HEX_LEN] == 0;
}

int sbx__snap_tree_validate(const struct snap_tree *t, const struct sbx_snapshot_limits *lim,
                            struct sbx_error *err)
{
    struct sbx_snapshot_limits l;
    sbx__snap_limits(lim, &l);
    if (t->n > l.max_entries)
        return sbx_error_set(err, SBX_E_TOOBIG, 0,
                             "snapshot has %zu entries, over the limit of %llu", t->n,
                             (unsigned long long)l.max_entries);
    uint64_t total = 0;
    long parent = -1;
    size_t parent_len = 0;
    for (size_t i = 0; i < t->n; i++) {
        const struct snap_entry *e = &t->v[i];
        size_t len = strlen(e->path);
        if (!path_is_normal(e->path, len))
            return sbx_error_set(err, SBX_E_PARSE, 0, "entry '%s' is not a normalised path",
                                 e->path);
        if (len > l.max_path)
            return sbx_error_set(err, SBX_E_TOOBIG, 0,
                                 "entry '%s' path is %zu bytes, over the limit of %u", e->path, len,
                                 l.max_path);
        uint32_t depth = 1;
        for (const char *p = e->path; *p; p++)
            depth += *p == '/';
        if (depth > l.max_depth)
            return sbx_error_set(err, SBX_E_TOOBIG, 0,
                                 "entry '%s' is %u components deep, over the limit of %u", e->path,
                                 depth, l.max_depth);
        if (i > 0 && strcmp(t->v[i - 1].path, e->path) >= 0)
            return sbx_error_set(err, SBX_E_PARSE, 0, "entry '%s' is duplicated or out of order",
                                 e->path);
        if (e->mode & ~0777u)
            return sbx_error_set(err, SBX_E_PARSE, 0, "entry '%s' has mode %o", e->path, e->mode);
        const char *slash = strrchr(e->path, '/');
        if (slash) {
            /* siblings in a row share their parent: looked up once */
            size_t plen = (size_t)(slash - e->path);
            if (parent < 0 || plen != parent_len || memcmp(e->path, t->v[parent].path, plen) != 0) {
                parent = tree_find_n(t, e->path, plen);
                parent_len = plen;
            }
            long pi = parent;
            if (pi < 0 || t->v[pi].type != SNAP_DIR)
                return sbx_error_set(err, SBX_E_PARSE, 0,
                                     "entry '%s' is not under a directory entry", e->path);
        }
        switch (e->type) {
        case SNAP_DIR:
            break;
        case SNAP_FILE:
            if (!is_hex64(e->sha))
                return sbx_error_set(err, SBX_E_PARSE, 0, "file '%s' has no valid sha256", e->path);
            if (e->size > l.max_file_bytes)
                return sbx_error_set(
                        err, SBX_E_TOOBIG, 0, "file '%s' has %llu bytes, over the limit of %llu",
                        e->path, (unsigned long long)e->size, (unsigned long long)l.max_file_bytes);
            if (total + e->size < total)
                return sbx_error_set(err, SBX_E_PARSE, 0, "file '%s' has an impossible size",
                                     e->path);
            total += e->size;
            if (total > l.max_bytes)
                return sbx_error_set(err, SBX_E_TOOBIG, 0,
                                     "snapshot has more than %llu file bytes at '%s'",
                                     (unsigned long long)l.max_bytes, e->path);
            break;
        case SNAP_SYMLINK: {
            if (!e->target)
                return sbx_error_set(err, SBX_E_PARSE, 0, "symlink '%s' has no target", e->path);
            struct sbx_error terr = SBX_ERROR_INIT;
            if (sbx__snap_check_target(e->path, e->target, &terr) < 0)
                return sbx_error_set(err, SBX_E_PARSE, 0, "%s", terr.msg);
            break;
        }
        default:
            return sbx_error_set(err, SBX_E_PARSE, 0, "entry '%s' has an unknown type", e->path);
        }
    }
    return 0;
}

/* ---- tree documents ---- */

/* A stored tree is checked for its structure, not against the caller's limits: take and import
 * applied those (possibly raised ones) while building it, and it must restore later. */
static const struct sbx_snapshot_limits structural = {
        .max_entries = UINT64_MAX,
        .max_bytes = UINT64_MAX,
        .max_file_bytes = UINT64_MAX,
        .max_path = SBX_PATH_MAX,
        .max_depth = SBX_PATH_MAX,
};

/* The reference: sha256 of the compact, key-sorted JSON of the sorted entries. */
static int entries_digest(json_t *entries, char hex[SBX_SHA256_HEX_LEN + 1], struct sbx_error *err)
{
    char *s = sbx_json_dumps(entries, SBX_JSON_COMPACT | SBX_JSON_SORTED);
    uint8_t d[SBX_SHA256_LEN];
    int rc = sbx_sha256(s, strlen(s), d, err);
    free(s);
    if (rc == 0)
        sbx_hex(d, sizeof(d), hex);
    return rc;
}

static void put_text(struct sbx_buf *b, const char *s)
{
    if (sbx_buf_add(b, s, strlen(s), NULL) < 0)
        SBX_BUG("unbounded buffer refused data");
}

/* The entries' text is what jansson's compact, key-sorted dump writes (json-canon): the
 * reference is its digest, so it must match byte for byte. The tree was validated first (UTF-8,
 * no control character), so a string is never refused. An entry is written straight into
 * reserved room: at most this much besides its path or target, for the keys, the quotes, the
 * digest and two numbers. */
#define ENTRY_ROOM 160

/* Bytes jansson copies as they are (canon's plain(), ASCII only): the path of nearly every
 * entry, which then needs no run through the canonical writer. */
static int plain_ascii(const char *s, size_t n)
{
    unsigned bad = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned c = (unsigned char)s[i];
        bad |= (c - 0x20u >= 0x60u) | (c == '"') | (c == '\\');
    }
    return !bad;
}

static char *put_lit(char *p, const char *s, size_t n)
{
    memcpy(p, s, n);
    return p + n;
}
#define PUT_LIT(p, s) put_lit(p, s, sizeof(s) - 1)

/* v in decimal, as canon's integer for any v up to INT64_MAX (a validated tree's sizes are). */
static char *put_dec(char *p, uint64_t v)
{
    char t[20];
    size_t n = 0;
    do {
        t[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        *p++ = t[--n];
    return p;
}

/* The string s as a JSON string at p (b's end, written up to p so far), then room for
 * ENTRY_ROOM more: the new end. */
static char *put_json_str(struct sbx_buf *b, char *p, const char *s)
{
    size_t n = strlen(s);
    sbx_buf_setlen(b, (size_t)(p - b->data));
    if (plain_ascii(s, n)) {
        if (sbx_buf_reserve(b, n + 2 + ENTRY_ROOM, NULL) < 0)
            SBX_BUG("unbounded buffer refused data");
        p = b->data + b->len;
        *p++ = '"';
        p = put_lit(p, s, n);
        *p++ = '"';
        return p;
    }
    if (sbx__json_canon_string(s, n, b, NULL) < 0)
        SBX_BUG("a validated tree has a path that is not UTF-8");
    if (sbx_buf_reserve(b, ENTRY_ROOM, NULL) < 0)
        SBX_BUG("unbounded buffer refused data");
    return b->data + b->len;
}

/* One entry's object, the members in key order: mode, path, sha256, size, target, type. */
static void put_entry(struct sbx_buf *b, const struct snap_entry *e, int first)
{
    if (sbx_buf_reserve(b, ENTRY_ROOM, NULL) < 0)
        SBX_BUG("unbounded buffer refused data");
    char *p = b->data + b->len;
    p = first ? PUT_LIT(p, "{") : PUT_LIT(p, ",{");
    if (e->type != SNAP_SYMLINK) {
        p = PUT_LIT(p, "\"mode\":");
        p = put_dec(p, e->mode);
        *p++ = ',';
    }
    p = PUT_LIT(p, "\"path\":");
    p = put_json_str(b, p, e->path);
    if (e->type == SNAP_FILE) {
        p = PUT_LIT(p, ",\"sha256\":\"");
        p = put_lit(p, e->sha, SBX_SHA256_HEX_LEN);
        p = PUT_LIT(p, "\",\"size\":");
        if (e->size <= INT64_MAX) {
            p = put_dec(p, e->size);
        } else {
            sbx_buf_setlen(b, (size_t)(p - b->data));
            if (sbx__json_canon_int((long long)e->size, b, NULL) < 0 ||
                sbx_buf_reserve(b, ENTRY_ROOM, NULL) < 0)
                SBX_BUG("unbounded buffer refused data");
            p = b->data + b->len;
        }
    }
    if (e->type == SNAP_SYMLINK) {
        p = PUT_LIT(p, ",\"target\":");
        p = put_json_str(b, p, e->target);
    }
    p = PUT_LIT(p, ",\"type\":\"");
    const char *tn = type_name(e->type);
    p = put_lit(p, tn, strlen(tn));
    p = PUT_LIT(p, "\"}");
    sbx_buf_setlen(b, (size_t)(p - b->data));
}

void sbx__snap_entries_text(const struct snap_tree *t, struct sbx_buf *b)
{
    if (sbx_buf_reserve(b, t->n * 192 + 2, NULL) < 0)
        SBX_BUG("unbounded buffer refused data");
    put_text(b, "[");
    for (size_t i = 0; i < t->n; i++)
        put_entry(b, &t->v[i], i == 0);
    put_text(b, "]");
}

static int create_tmp(struct sbx_snapshot_store *st, mode_t mode, struct snap_tree_file *tf,
                      struct sbx_error *err)
{
    int rc = sbx_random_hex(tf->tmp, 8, err);
    if (rc < 0)
        return rc;
    memcpy(tf->tmp + 16, ".tmp", 5);
    tf->fd = openat(st->tmp_fd, tf->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (tf->fd < 0)
        return sbx_error_errno(err, errno, "cannot create a temp file in '%s'", st->path);
    return 0;
}

/* Only a hint (its errors show again at the fsync): the blocks are allocated and their write
 * begins now, in the journal transaction the first fsync of the take commits. */
static void start_writeback(struct snap_tree_file *tf)
{
    sync_file_range(tf->fd, 0, 0, SYNC_FILE_RANGE_WRITE);
}

/* Write data to a new temp file of the store without syncing it, and start its writeback:
 * the caller syncs it (tree_publish) once other files' writeback has been started too. */
static int stage_tmp(struct sbx_snapshot_store *st, const void *data, size_t n, mode_t mode,
                     struct snap_tree_file *tf, struct sbx_error *err)
{
    int rc = create_tmp(st, mode, tf, err);
    if (rc < 0)
        return rc;
    rc = sbx_fd_write_all(tf->fd, data, n, err);
    if (rc < 0) {
        sbx__snap_tree_unstage(st, tf);
        return rc;
    }
    start_writeback(tf);
    return 0;
}

void sbx__snap_tree_unstage(struct sbx_snapshot_store *st, struct snap_tree_file *tf)
{
    if (tf->fd < 0)
        return;
    sbx_fd_close(&tf->fd);
    unlinkat(st->tmp_fd, tf->tmp, 0);
}

int sbx__snap_tree_publish(struct sbx_snapshot_store *st, struct snap_tree_file *tf,
                           struct sbx_error *err)
{
    int rc = 0;
    if (fsync(tf->fd) < 0)
        rc = sbx_error_errno(err, errno, "cannot sync '%s'", tf->name);
    if (rc == 0 && renameat2(st->tmp_fd, tf->tmp, st->trees_fd, tf->name, RENAME_NOREPLACE) < 0) {
        if (errno != EEXIST)
            rc = sbx_error_errno(err, errno, "cannot store '%s'", tf->name);
    }
    sbx__snap_tree_unstage(st, tf);
    if (rc == 0 && fsync(st->trees_fd) < 0)
        rc = sbx_error_errno(err, errno, "cannot sync the store");
    return rc;
}

static int write_tmp_and_link(struct sbx_snapshot_store *st, const char *name, const void *data,
                              size_t n, struct sbx_error *err)
{
    struct snap_tree_file tf = {.fd = -1};
    snprintf(tf.name, sizeof(tf.name), "%s", name);
    int rc = stage_tmp(st, data, n, 0400, &tf, err);
    return rc < 0 ? rc : sbx__snap_tree_publish(st, &tf, err);
}

/* The document streamed to the temp file through a buffer of about this size, the entries
 * hashed on the way: a tree of any size costs the same little memory. */
#define DOC_CHUNK ((size_t)64 << 10)

/* Write out what doc holds, hashing the part from hash_from on (the entries' text). */
static int doc_flush(struct snap_tree_file *tf, struct sbx_buf *doc, size_t hash_from,
                     struct sbx_sha256 *h, struct sbx_error *err)
{
    int rc = 0;
    if (h && doc->len > hash_from)
        rc = sbx_sha256_update(h, doc->data + hash_from, doc->len - hash_from, err);
    if (rc == 0)
        rc = sbx_fd_write_all(tf->fd, doc->data, doc->len, err);
    sbx_buf_setlen(doc, 0);
    return rc;
}

/* {"entries":[...] written to tf, *hex the digest of the entries' text. */
static int write_entries(const struct snap_tree *t, struct snap_tree_file *tf, struct sbx_buf *doc,
                         char hex[SBX_SHA256_HEX_LEN + 1], struct sbx_error *err)
{
    struct sbx_sha256 *h = NULL;
    int rc = sbx_sha256_new(&h, err);
    if (rc < 0)
        return rc;
    put_text(doc, "{\"entries\":");
    size_t hash_from = doc->len;
    put_text(doc, "[");
    for (size_t i = 0; rc == 0 && i < t->n; i++) {
        put_entry(doc, &t->v[i], i == 0);
        if (doc->len >= DOC_CHUNK) {
            rc = doc_flush(tf, doc, hash_from, h, err);
            hash_from = 0;
        }
    }
    put_text(doc, "]");
    if (rc == 0)
        rc = doc_flush(tf, doc, hash_from, h, err);
    uint8_t dg[SBX_SHA256_LEN];
    if (rc == 0 && (rc = sbx_sha256_final(h, dg, err)) == 0)
        sbx_hex(dg, sizeof(dg), hex);
    sbx_sha256_free(h);
    return rc;
}

/* ,"header":{...}} after the entries: the header holds their digest. */
static char *header_text(const struct snap_tree *t, const char *manifest_digest, const char *label,
                         json_t *skipped, const char *ref)
{
    uint64_t files = 0, bytes = 0;
    for (size_t i = 0; i < t->n; i++) {
        if (t->v[i].type == SNAP_FILE) {
            files++;
            bytes += t->v[i].size;
        }
    }
    char created[SBX_TIME_RFC3339_LEN];
    sbx_time_rfc3339(sbx_time_real_ns(), created);
    json_t *h = json_object();
    sbx_json_set(h, "format", json_integer(SBX_SNAPSHOT_FORMAT));
    sbx_json_set(h, "sbx_version", sbx_json_str(SBX_VERSION));
    sbx_json_set(h, "created", sbx_json_str(created));
    sbx_json_set(h, "manifest_digest",
                 manifest_digest ? sbx_json_str(manifest_digest) : json_null());
    sbx_json_set(h, "label", label ? sbx_json_str(label) : json_null());
    sbx_json_set(h, "entries", json_integer((json_int_t)t->n));
    sbx_json_set(h, "files", json_integer((json_int_t)files));
    sbx_json_set(h, "bytes", json_integer((json_int_t)bytes));
    sbx_json_set(h, "content_digest", sbx_json_str(ref));
    sbx_json_set(h, "skipped", skipped ? json_incref(skipped) : json_object());
    char *htext = sbx_json_dumps(h, SBX_JSON_COMPACT | SBX_JSON_SORTED);
    json_decref(h);
    return htext;
}

int sbx__snap_tree_stage(struct sbx_snapshot_store *st, struct snap_tree *t,
                         const char *manifest_digest, const char *label, json_t *skipped,
                         struct snap_tree_file *tf, struct sbx_error *err)
{
    tf->fd = -1;
    tf->ref = NULL;
    sbx__snap_tree_sort(t);
    int rc = sbx__snap_tree_validate(t, &structural, err);
    if (rc < 0)
        return rc;
    /* The document is its two members in key order, as a sorted dump would write it; the
     * entries' text in it is what the reference is the digest of. */
    if ((rc = create_tmp(st, 0400, tf, err)) < 0)
        return rc;
    char hex[SBX_SHA256_HEX_LEN + 1];
    struct sbx_buf doc;
    sbx_buf_init(&doc, SBX_BUF_NOLIMIT);
    if (sbx_buf_reserve(&doc, DOC_CHUNK + 4096, NULL) < 0)
        SBX_BUG("unbounded buffer refused data");
    rc = write_entries(t, tf, &doc, hex, err);
    char *ref = rc == 0 ? sbx_xasprintf("sha256:%s", hex) : NULL;
    if (rc == 0) {
        char *htext = header_text(t, manifest_digest, label, skipped, ref);
        put_text(&doc, ",\"header\":");
        put_text(&doc, htext);
        put_text(&doc, "}");
        free(htext);
        rc = doc_flush(tf, &doc, 0, NULL, err);
    }
    sbx_buf_release(&doc);
    if (rc < 0) {
        free(ref);
        sbx__snap_tree_unstage(st, tf);
        return rc;
    }
    start_writeback(tf);
    snprintf(tf->name, sizeof(tf->name), "%s.json", hex);
    tf->ref = ref;
    return 0;
}

int sbx__snap_tree_commit(struct sbx_snapshot_store *st, struct snap_tree *t,
                          const char *manifest_digest, const char *label, json_t *skipped,
                          char **out_ref, struct sbx_error *err)
{
    struct snap_tree_file tf;
    int rc = sbx__snap_tree_stage(st, t, manifest_digest, label, skipped, &tf, err);
    if (rc == 0)
        rc = sbx__snap_tree_publish(st, &tf, err);
    if (rc < 0) {
        free(tf.ref);
        return rc;
    }
    *out_ref = tf.ref;
    return 0;
}

static int parse_type(const char *s, enum snap_type *out)
{
    if (strcmp(s, "dir") == 0)
        *out = SNAP_DIR;
    else if (strcmp(s, "file") == 0)
        *out = SNAP_FILE;
    else if (strcmp(s, "symlink") == 0)
        *out = SNAP_SYMLINK;
    else
        return -1;
    return 0;
}

static int parse_entry(json_t *o, size_t i, struct snap_tree *t, struct sbx_error *err)
{
    static const char *const keys[] = {"path", "type", "mode", "size", "sha256", "target", NULL};
    const char *path = NULL, *type = NULL, *sha = NULL, *target = NULL;
    int64_t mode = 0, size = 0;
    enum snap_type ty;
    int rc;
    if (!json_is_object(o))
        return sbx_error_set(err, SBX_E_PARSE, 0, "entry %zu is not an object", i);
    if ((rc = sbx_json_check_keys(o, keys, err)) < 0 ||
        (rc = sbx_json_get_string(o, "path", 1, &path, err)) < 0 ||
        (rc = sbx_json_get_string(o, "type", 1, &type, err)) < 0)
        goto bad;
    if (parse_type(type, &ty) < 0) {
        rc = sbx_error_set(err, SBX_E_PARSE, 0, "unknown type '%s'", type);
        goto bad;
    }
    if ((rc = sbx_json_get_int(o, "mode", ty != SNAP_SYMLINK, &mode, err)) < 0 ||
        (rc = sbx_json_get_int(o, "size", ty == SNAP_FILE, &size, err)) < 0 ||
        (rc = sbx_json_get_string(o, "sha256", ty == SNAP_FILE, &sha, err)) < 0 ||
        (rc = sbx_json_get_string(o, "target", ty == SNAP_SYMLINK, &target, err)) < 0)
        goto bad;
    if (mode < 0 || mode > 0777 || size < 0 || (sha && strlen(sha) != SBX_SHA256_HEX_LEN) ||
        (ty != SNAP_FILE && (json_object_get(o, "size") || sha)) ||
        (ty != SNAP_SYMLINK && target) || (ty == SNAP_SYMLINK && json_object_get(o, "mode"))) {
        rc = sbx_error_set(err, SBX_E_PARSE, 0, "entry '%s' has inconsistent fields", path);
        goto bad;
    }
    struct snap_entry *e = sbx__snap_tree_add(t, sbx_xstrdup(path), ty, (uint32_t)mode);
    e->size = (uint64_t)size;
    if (sha)
        memcpy(e->sha, sha, SBX_SHA256_HEX_LEN + 1);
    if (target)
        e->target = sbx_xstrdup(target);
    return 0;
bad:
    return -SBX_E_PARSE;
}

int sbx__snap_tree_parse(const char *data, size_t len, const char *hex, struct snap_tree *t,
                         json_t **out_header, struct sbx_error *err)
{
    json_t *doc = NULL;
    struct snap_tree tree = {0};
    struct sbx_json_limits jl = {TREE_DOC_MAX, 8};
    int rc = sbx_json_parse(data, len, &jl, &doc, err);
    if (rc < 0)
        goto out;
    static const char *const keys[] = {"header", "entries", NULL};
    json_t *h = NULL, *entries = NULL;
    int64_t format = 0;
    const char *digest = NULL;
    if (!json_is_object(doc) || (rc = sbx_json_check_keys(doc, keys, err)) < 0 ||
        (rc = sbx_json_get_object(doc, "header", 1, &h, err)) < 0 ||
        (rc = sbx_json_get_array(doc, "entries", 1, &entries, err)) < 0 ||
        (rc = sbx_json_get_int(h, "format", 1, &format, err)) < 0 ||
        (rc = sbx_json_get_string(h, "content_digest", 1, &digest, err)) < 0) {
        if (rc == 0)
            sbx_error_set(err, SBX_E_PARSE, 0, "not a tree document");
        rc = -SBX_E_PARSE;
        goto out;
    }
    if (format != SBX_SNAPSHOT_FORMAT) {
        rc = sbx_error_set(err, SBX_E_UNSUPPORTED, 0, "format version %lld is not supported",
                           (long long)format);
        goto out;
    }
    size_t i;
    json_t *o;
    json_array_foreach(entries, i, o)
    {
        if ((rc = parse_entry(o, i, &tree, err)) < 0)
            goto out;
    }
    if ((rc = sbx__snap_tree_validate(&tree, &structural, err)) < 0)
        goto out;
    char check[SBX_SHA256_HEX_LEN + 1];
    if ((rc = entries_digest(entries, check, err)) < 0)
        goto out;
    if (strcmp(check, hex) != 0 || strncmp(digest, "sha256:", 7) != 0 ||
        strcmp(digest + 7, hex) != 0) {
        rc = sbx_error_set(err, SBX_E_PARSE, 0, "its entries do not match its reference");
        goto out;
    }
    if (out_header)
        *out_header = json_incref(h);
    *t = tree;
    memset(&tree, 0, sizeof(tree));
out:
    if (rc < 0)
        sbx_error_prefix(err, "snapshot 'sha256:%.12s'", hex);
    sbx__snap_tree_release(&tree);
    json_decref(doc);
    return rc;
}

int sbx__snap_tree_read_doc(struct sbx_snapshot_store *st, const char *hex, struct sbx_buf *out,
                            struct sbx_error *err)
{
    char name[SBX_SHA256_HEX_LEN + 8];
    snprintf(name, sizeof(name), "%s.json", hex);
    sbx_buf_init(out, TREE_DOC_MAX);
    int rc = sbx_fs_read(st->trees_fd, name, TREE_DOC_MAX, out, err);
    if (rc < 0) {
        sbx_error_prefix(err, "snapshot 'sha256:%.12s'", hex);
        sbx_buf_release(out);
    }
    return rc;
}

int sbx__snap_tree_store_doc(struct sbx_snapshot_store *st, const char *hex, const void *data,
                             size_t len, struct sbx_error *err)
{
    char name[SBX_SHA256_HEX_LEN + 8];
    snprintf(name, sizeof(name), "%s.json", hex);
    return write_tmp_and_link(st, name, data, len, err);
}

int sbx__snap_tree_load(struct sbx_snapshot_store *st, const char *hex, struct snap_tree *t,
                        json_t **out_header, struct sbx_error *err)
{
    struct sbx_buf b;
    int rc = sbx__snap_tree_read_doc(st, hex, &b, err);
    if (rc < 0)
        return rc;
    rc = sbx__snap_tree_parse(b.data, b.len, hex, t, out_header, err);
    sbx_buf_release(&b);
    return rc;
}

/* ---- references ---- */

int sbx__snap_resolve_ref(struct sbx_snapshot_store *st, const char *ref,
                          char hex[SBX_SHA256_HEX_LEN + 1], struct sbx_error *err)
{
    const char *p = strncmp(ref, "sha256:", 7) == 0 ? ref + 7 : ref;
    size_t n = strlen(p);
    int ok = n >= 12 && n <= SBX_SHA256_HEX_LEN;
    for (size_t i = 0; ok && i < n; i++)
        ok = (p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f');
    if (!ok)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "'%s' is not a snapshot reference (sha256: and at least 12 hex)", ref);
    int dfd = dup(st->trees_fd);
    if (dfd < 0)
        return sbx_error_errno(err, errno, "cannot read the snapshot store");
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return sbx_error_errno(err, errno, "cannot read the snapshot store");
    }
    rewinddir(d);
    int found = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l != SBX_SHA256_HEX_LEN + 5 || strcmp(de->d_name + SBX_SHA256_HEX_LEN, ".json") != 0)
            continue;
        if (strncmp(de->d_name, p, n) != 0)
            continue;
        if (found++ == 0) {
            memcpy(hex, de->d_name, SBX_SHA256_HEX_LEN);
            hex[SBX_SHA256_HEX_LEN] = 0;
        }
    }
    closedir(d);
    if (!found)
        return sbx_error_set(err, SBX_E_NOTFOUND, 0, "no snapshot '%s'", ref);
    if (found > 1)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "snapshot reference '%s' is ambiguous (%d snapshots match)", ref,
                             found);
    return 0;
}

/* ---- blobs ---- */

int sbx__snap_blob_begin(struct sbx_snapshot_store *st, struct snap_blob_writer *w,
                         struct sbx_error *err)
{
    memset(w, 0, sizeof(*w));
    w->fd = -1;
    w->st = st;
    return sbx_sha256_new(&w->h, err);
}

static int raw_write(struct snap_blob_writer *w, const void *p, size_t n, struct sbx_error *err);

/* The blob outgrew memory (or has a hole): a temp file from now on, with what memory held. */
static int spill(struct snap_blob_writer *w, struct sbx_error *err)
{
    int rc = sbx_random_hex(w->tmpname, 8, err);
    if (rc < 0)
        return rc;
    memcpy(w->tmpname + 16, ".blob", 6);
    /* Created read-only: the fd still writes, and no chmod is needed once it is complete. */
    w->fd = openat(w->st->tmp_fd, w->tmpname, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0400);
    if (w->fd < 0)
        return sbx_error_errno(err, errno, "cannot create a blob in '%s'", w->st->path);
    size_t n = (size_t)w->size;
    w->size = 0;
    rc = n ? raw_write(w, w->mem, n, err) : 0;
    free(w->mem);
    w->mem = NULL;
    return rc;
}

static int all_zero(const char *p, size_t n)
{
    static const char zeros[4096];
    while (n) {
        size_t k = n < sizeof(zeros) ? n : sizeof(zeros);
        if (memcmp(p, zeros, k) != 0)
            return 0;
        p += k;
        n -= k;
    }
    return 1;
}

/* Blocks of zeros become holes (as cp --sparse=always does): a blob of a zero-filled file costs
 * no disk, and its export is a sparse member whose holes do not count as expansion. */
int sbx__snap_blob_write(struct snap_blob_writer *w, const void *p, size_t n, struct sbx_error *err)
{
    int rc = sbx_sha256_update(w->h, p, n, err);
    if (rc < 0)
        return rc;
    if (w->fd < 0 && n <= SNAP_PACK_BLOB_MAX - w->size) {
        if (!w->mem)
            w->mem = sbx_xmalloc(SNAP_PACK_BLOB_MAX);
        memcpy(w->mem + w->size, p, n);
        w->size += n;
        return 0;
    }
    if (w->fd < 0 && (rc = spill(w, err)) < 0)
        return rc;
    return raw_write(w, p, n, err);
}

static int raw_write(struct snap_blob_writer *w, const void *p, size_t n, struct sbx_error *err)
{
    const char *c = p;
    int rc = 0;
    while (rc == 0 && n) {
        /* one run of whole zero blocks, or of everything else */
        size_t first = SNAP_BLOCK - (size_t)(w->size % SNAP_BLOCK);
        int zero = first == SNAP_BLOCK && n >= SNAP_BLOCK && all_zero(c, SNAP_BLOCK);
        size_t k = first < n ? first : n;
        while (k < n) {
            size_t next = n - k < SNAP_BLOCK ? n - k : SNAP_BLOCK;
            int z = next == SNAP_BLOCK && all_zero(c + k, SNAP_BLOCK);
            if (z != zero)
                break;
            k += next;
        }
        if (zero) {
            if (lseek(w->fd, (off_t)k, SEEK_CUR) < 0)
                rc = sbx_error_errno(err, errno, "cannot seek in a blob");
        } else {
            rc = sbx_fd_write_all(w->fd, c, k, err);
        }
        w->tail_hole = zero;
        c += k;
        n -= k;
        w->size += k;
    }
    return rc;
}

int sbx__snap_blob_hole(struct snap_blob_writer *w, uint64_t n, struct sbx_error *err)
{
    static const char zeros[65536];
    uint64_t left = n;
    while (left) {
        size_t k = left < sizeof(zeros) ? (size_t)left : sizeof(zeros);
        int rc = sbx_sha256_update(w->h, zeros, k, err);
        if (rc < 0)
            return rc;
        left -= k;
    }
    int rc = w->fd < 0 ? spill(w, err) : 0;
    if (rc < 0)
        return rc;
    if (lseek(w->fd, (off_t)n, SEEK_CUR) < 0)
        return sbx_error_errno(err, errno, "cannot seek in a blob");
    w->size += n;
    w->tail_hole = w->tail_hole || n > 0;
    return 0;
}

void sbx__snap_blob_abort(struct sbx_snapshot_store *st, struct snap_blob_writer *w)
{
    if (w->fd >= 0) {
        sbx_fd_close(&w->fd);
        unlinkat(st->tmp_fd, w->tmpname, 0);
    }
    free(w->mem);
    w->mem = NULL;
    sbx_sha256_free(w->h);
    w->h = NULL;
}

/* A blob goes into a pack unless it is big or has a whole block of zeros (a hole in a file). */
static int packable(const char *p, size_t n)
{
    if (n > SNAP_PACK_BLOB_MAX)
        return 0;
    for (size_t off = 0; off + SNAP_BLOCK <= n; off += SNAP_BLOCK) {
        if (all_zero(p + off, SNAP_BLOCK))
            return 0;
    }
    return 1;
}

static void mark_dirty(struct sbx_snapshot_store *st, const char *hex, int new_dir)
{
    int b = hex_byte(hex);
    pthread_mutex_lock(&st->mu);
    st->dirty[b] = 1;
    st->loose[b] = 1;
    st->dirty[256] |= (uint8_t)new_dir;
    pthread_mutex_unlock(&st->mu);
}

static void blob_name(const char *hex, char out[SBX_SHA256_HEX_LEN + 4])
{
    snprintf(out, SBX_SHA256_HEX_LEN + 4, "%.2s/%s", hex, hex);
}

int sbx__snap_blob_finish(struct sbx_snapshot_store *st, struct snap_blob_writer *w,
                          char hex[SBX_SHA256_HEX_LEN + 1], int *created, struct sbx_error *err)
{
    return sbx__snap_blob_finish_expect(st, w, NULL, hex, created, err);
}

int sbx__snap_blob_finish_expect(struct sbx_snapshot_store *st, struct snap_blob_writer *w,
                                 const char *expect, char hex[SBX_SHA256_HEX_LEN + 1], int *created,
                                 struct sbx_error *err)
{
    uint8_t d[SBX_SHA256_LEN];
    int rc = sbx_sha256_final(w->h, d, err);
    if (rc < 0)
        goto fail;
    sbx_hex(d, sizeof(d), hex);
    if (expect && strcmp(expect, hex) != 0) {
        rc = sbx_error_set(err, SBX_E_IO, 0, "its content hashes to '%.12s'", hex);
        goto fail;
    }
    if (w->fd < 0 && packable(w->mem, (size_t)w->size)) {
        rc = sbx__snap_pack_add(st, hex, w->mem ? w->mem : "", (size_t)w->size, created, err);
        if (rc < 0)
            goto fail;
        sbx__snap_blob_abort(st, w);
        return 0;
    }
    if (w->fd < 0 && (rc = spill(w, err)) < 0)
        goto fail;
    if (w->tail_hole && ftruncate(w->fd, (off_t)w->size) < 0) {
        rc = sbx_error_errno(err, errno, "cannot finish a blob");
        goto fail;
    }
    /* synced before it is named: a crash leaves it whole or absent */
    if (fsync(w->fd) < 0) {
        rc = sbx_error_errno(err, errno, "cannot sync blob '%.12s'", hex);
        goto fail;
    }
    char sub[3] = {hex[0], hex[1], 0};
    char name[SBX_SHA256_HEX_LEN + 4];
    blob_name(hex, name);
    *created = 1;
    int new_dir = 0;
    int r = renameat2(st->tmp_fd, w->tmpname, st->blobs_fd, name, RENAME_NOREPLACE);
    if (r < 0 && errno == ENOENT) {
        /* the first blob of its two-hex directory */
        if (mkdirat(st->blobs_fd, sub, 0700) < 0 && errno != EEXIST) {
            rc = sbx_error_errno(err, errno, "cannot create blob directory '%s'", sub);
            goto fail;
        }
        new_dir = 1;
        r = renameat2(st->tmp_fd, w->tmpname, st->blobs_fd, name, RENAME_NOREPLACE);
    }
    if (r < 0) {
        if (errno != EEXIST) {
            rc = sbx_error_errno(err, errno, "cannot store blob '%.12s'", hex);
            goto fail;
        }
        *created = 0;
        if (!sbx__snap_blob_exists(st, hex, w->size)) {
            /* a torn blob of a crash: this one has the right content, so it replaces it */
            if (renameat(st->tmp_fd, w->tmpname, st->blobs_fd, name) < 0) {
                rc = sbx_error_errno(err, errno, "cannot store blob '%.12s'", hex);
                goto fail;
            }
            *created = 1;
        }
        unlinkat(st->tmp_fd, w->tmpname, 0);
    }
    if (*created)
        mark_dirty(st, hex, new_dir);
    sbx_fd_close(&w->fd);
    sbx_sha256_free(w->h);
    w->h = NULL;
    return 0;
fail:
    sbx__snap_blob_abort(st, w);
    return rc;
}

int sbx__snap_blob_exists(struct sbx_snapshot_store *st, const char *hex, uint64_t size)
{
    if (sbx__snap_pack_find(st, hex, size))
        return 1;
    if (!loose_dir_may_exist(st, hex))
        return 0;
    char name[SBX_SHA256_HEX_LEN + 4];
    blob_name(hex, name);
    struct stat sb;
    return fstatat(st->blobs_fd, name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode) &&
           (uint64_t)sb.st_size == size;
}

int sbx__snap_blob_put(struct sbx_snapshot_store *st, const char *hex, const void *data, size_t n,
                       int *created, struct sbx_error *err)
{
    if (packable(data, n))
        return sbx__snap_pack_add(st, hex, data, n, created, err);
    struct snap_blob_writer w;
    char check[SBX_SHA256_HEX_LEN + 1];
    int rc = sbx__snap_blob_begin(st, &w, err);
    if (rc == 0 && (rc = spill(&w, err)) == 0 && (rc = sbx__snap_blob_write(&w, data, n, err)) == 0)
        return sbx__snap_blob_finish_expect(st, &w, hex, check, created, err);
    sbx__snap_blob_abort(st, &w);
    return rc;
}

int sbx__snap_blob_get(struct sbx_snapshot_store *st, const char *hex, uint64_t size,
                       char **out_data, int *out_fd, struct sbx_error *err)
{
    *out_data = NULL;
    *out_fd = -1;
    int rc = sbx__snap_pack_read(st, hex, size, out_data, err);
    if (rc != 0)
        return rc < 0 ? rc : 0;
    char name[SBX_SHA256_HEX_LEN + 4];
    blob_name(hex, name);
    int fd = openat(st->blobs_fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {
        rc = sbx_error_set(err, SBX_E_NOTFOUND, ENOENT, "blob '%.12s' is missing", hex);
        sbx__snap_pack_damage(st, err);
        return rc;
    }
    if (fd < 0)
        return sbx_error_errno(err, errno, "cannot open blob '%.12s'", hex);
    *out_fd = fd;
    return 0;
}

int sbx__snap_blob_send(struct sbx_snapshot_store *st, const char *hex, uint64_t size, int out,
                        snap_sink_fn sink, void *ctx, struct sbx_error *err)
{
    char *data = NULL;
    int fd = -1;
    int rc = sbx__snap_blob_get(st, hex, size, &data, &fd, err);
    if (rc == 0 && data)
        rc = sink ? sink(ctx, data, (size_t)size, err) : sbx_fd_write_all(out, data, size, err);
    else if (rc == 0)
        rc = sbx__snap_blob_copy(fd, hex, size, out, sink, ctx, err);
    free(data);
    sbx_fd_close(&fd);
    return rc;
}

void sbx__snap_blob_unlink(struct sbx_snapshot_store *st, const char *hex)
{
    char name[SBX_SHA256_HEX_LEN + 4];
    blob_name(hex, name);
    unlinkat(st->blobs_fd, name, 0);
}

int sbx__snap_blob_copy(int blobfd, const char *hex, uint64_t size, int out, snap_sink_fn sink,
                        void *ctx, struct sbx_error *err)
{
    static const char zeros[65536];
    char *buf = sbx_xmalloc(1 << 17);
    struct sbx_sha256 *h = NULL;
    uint64_t done = 0;
    int rc = sbx_sha256_new(&h, err);
    while (rc == 0 && done < size) {
        uint64_t hole = 0, data = UINT64_MAX;
        if ((rc = sbx_fd_next_extent(blobfd, &hole, &data, err)) < 0)
            break;
        if (hole > size - done) {
            rc = sbx_error_set(err, SBX_E_IO, 0, "blob '%.12s' is longer than its entry", hex);
            break;
        }
        done += hole;
        for (uint64_t left = hole; rc == 0 && left;) {
            size_t k = left < sizeof(zeros) ? (size_t)left : sizeof(zeros);
            rc = sbx_sha256_update(h, zeros, k, err);
            if (rc == 0 && sink)
                rc = sink(ctx, zeros, k, err);
            left -= k;
        }
        if (rc == 0 && hole && !sink && lseek(out, (off_t)hole, SEEK_CUR) < 0)
            rc = sbx_error_errno(err, errno, "cannot seek in a restored file");
        if (rc < 0)
            break;
        if (data > size - done)
            data = size - done;
        while (rc == 0 && data) {
            size_t want = data < (1 << 17) ? (size_t)data : (1 << 17);
            ssize_t r = read(blobfd, buf, want);
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0) {
                rc = sbx_error_errno(err, errno, "cannot read blob '%.12s'", hex);
                break;
            }
            if (r == 0) {
                rc = sbx_error_set(err, SBX_E_IO, 0, "blob '%.12s' is shorter than its entry", hex);
                break;
            }
            rc = sbx_sha256_update(h, buf, (size_t)r, err);
            if (rc == 0)
                rc = sink ? sink(ctx, buf, (size_t)r, err)
                          : sbx_fd_write_all(out, buf, (size_t)r, err);
            data -= (uint64_t)r;
            done += (uint64_t)r;
        }
    }
    if (rc == 0) {
        char extra;
        ssize_t r = read(blobfd, &extra, 1);
        if (r != 0)
            rc = sbx_error_set(err, SBX_E_IO, 0, "blob '%.12s' is longer than its entry", hex);
    }
    struct stat osb;
    /* seeking over a final hole does not extend the file */
    if (rc == 0 && !sink && (fstat(out, &osb) < 0 || osb.st_size != (off_t)size) &&
        ftruncate(out, (off_t)size) < 0)
        rc = sbx_error_errno(err, errno, "cannot size a restored file");
    if (rc == 0) {
        uint8_t d[SBX_SHA256_LEN];
        char got[SBX_SHA256_HEX_LEN + 1];
        rc = sbx_sha256_final(h, d, err);
        if (rc == 0) {
            sbx_hex(d, sizeof(d), got);
            if (strcmp(got, hex) != 0)
                rc = sbx_error_set(err, SBX_E_IO, 0, "blob '%.12s' is corrupt", hex);
        }
    }
    sbx_sha256_free(h);
    free(buf);
    return rc;
}

/* ---- holds ---- */

static void holder_name(const char *holder, char out[33])
{
    uint8_t d[SBX_SHA256_LEN];
    sbx_sha256(holder, strlen(holder), d, NULL);
    sbx_hex(d, 16, out);
}

/* The holders of hex, as an array of strings. */
static json_t *read_holds(struct sbx_snapshot_store *st, const char *hex)
{
    json_t *a = json_array();
    int fd = openat(st->holds_fd, hex, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return a;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return a;
    }
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        struct sbx_buf b;
        sbx_buf_init(&b, HOLDER_MAX);
        if (sbx_fs_read(dirfd(d), de->d_name, HOLDER_MAX, &b, NULL) == 0)
            sbx_json_append(a, sbx_json_strn(b.data, b.len));
        sbx_buf_release(&b);
    }
    closedir(d);
    return a;
}

static int check_holder(const char *holder, struct sbx_error *err)
{
    if (!holder || !holder[0] || strlen(holder) > HOLDER_MAX)
        return sbx_error_set(err, SBX_E_INVAL, 0, "a snapshot holder must be 1 to %d bytes",
                             HOLDER_MAX);
    return 0;
}

int sbx_snapshot_hold(struct sbx_snapshot_store *st, const char *ref, const char *holder,
                      struct sbx_error *err)
{
    char hex[SBX_SHA256_HEX_LEN + 1], name[33];
    int rc = check_holder(holder, err);
    if (rc < 0 || (rc = sbx__snap_lock(st, 0, err)) < 0)
        return rc;
    if ((rc = sbx__snap_resolve_ref(st, ref, hex, err)) < 0)
        goto out;
    int fd = -1;
    if ((rc = open_subdir(st->holds_fd, hex, &fd, err)) < 0)
        goto out;
    holder_name(holder, name);
    rc = sbx_fs_write_state(fd, name, holder, strlen(holder), 0600, err);
    sbx_fd_close(&fd);
out:
    sbx__snap_unlock(st);
    if (rc < 0)
        sbx_error_prefix(err, "cannot hold snapshot '%s'", ref);
    return rc;
}

int sbx_snapshot_release(struct sbx_snapshot_store *st, const char *ref, const char *holder,
                         struct sbx_error *err)
{
    char hex[SBX_SHA256_HEX_LEN + 1], name[33];
    int rc = check_holder(holder, err);
    if (rc < 0 || (rc = sbx__snap_lock(st, 0, err)) < 0)
        return rc;
    if ((rc = sbx__snap_resolve_ref(st, ref, hex, err)) < 0)
        goto out;
    holder_name(holder, name);
    int fd = openat(st->holds_fd, hex, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 || unlinkat(fd, name, 0) < 0) {
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "'%s' holds no snapshot '%s'", holder, ref);
    } else {
        fsync(fd);
        unlinkat(st->holds_fd, hex, AT_REMOVEDIR); /* fails while others hold it: fine */
    }
    sbx_fd_close(&fd);
out:
    sbx__snap_unlock(st);
    return rc;
}

/* ---- list, inspect ---- */

static int header_with_holds(struct sbx_snapshot_store *st, const char *hex, json_t **out,
                             struct sbx_error *err)
{
    struct snap_tree t = {0};
    json_t *h = NULL;
    int rc = sbx__snap_tree_load(st, hex, &t, &h, err);
    sbx__snap_tree_release(&t);
    if (rc < 0)
        return rc;
    json_t *copy = json_deep_copy(h);
    json_decref(h);
    if (!copy)
        SBX_BUG("out of memory");
    sbx_json_set(copy, "holds", read_holds(st, hex));
    *out = copy;
    return 0;
}

int sbx_snapshot_inspect(struct sbx_snapshot_store *st, const char *ref, json_t **out_header,
                         struct sbx_error *err)
{
    char hex[SBX_SHA256_HEX_LEN + 1];
    int rc = sbx__snap_lock(st, 0, err);
    if (rc < 0)
        return rc;
    rc = sbx__snap_resolve_ref(st, ref, hex, err);
    if (rc == 0)
        rc = header_with_holds(st, hex, out_header, err);
    sbx__snap_unlock(st);
    return rc;
}

/* The hex names of every tree in the store. */
static int list_trees(struct sbx_snapshot_store *st, struct sbx_strv *out, struct sbx_error *err)
{
    int dfd = dup(st->trees_fd);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!d) {
        int e = errno;
        sbx_fd_close(&dfd);
        return sbx_error_errno(err, e, "cannot read the snapshot store '%s'", st->path);
    }
    rewinddir(d);
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l == SBX_SHA256_HEX_LEN + 5 && strcmp(de->d_name + SBX_SHA256_HEX_LEN, ".json") == 0)
            sbx_strv_push_take(out, sbx_xstrndup(de->d_name, SBX_SHA256_HEX_LEN));
    }
    closedir(d);
    return 0;
}

static int by_created(const void *a, const void *b)
{
    const char *ca = json_string_value(json_object_get(*(json_t *const *)a, "created"));
    const char *cb = json_string_value(json_object_get(*(json_t *const *)b, "created"));
    int c = strcmp(ca ? ca : "", cb ? cb : "");
    if (c)
        return c;
    ca = json_string_value(json_object_get(*(json_t *const *)a, "content_digest"));
    cb = json_string_value(json_object_get(*(json_t *const *)b, "content_digest"));
    return strcmp(ca ? ca : "", cb ? cb : "");
}

int sbx_snapshot_list(struct sbx_snapshot_store *st, json_t **out, struct sbx_error *err)
{
    struct sbx_strv names;
    sbx_strv_init(&names);
    int rc = sbx__snap_lock(st, 0, err);
    if (rc < 0)
        return rc;
    rc = list_trees(st, &names, err);
    json_t **v = sbx_xcalloc(names.n + 1, sizeof(*v));
    size_t n = 0;
    for (size_t i = 0; rc == 0 && i < names.n; i++) {
        struct sbx_error e = SBX_ERROR_INIT;
        /* A damaged tree is listed by its reference with the error, so that `rm` can reach it. */
        if (header_with_holds(st, names.v[i], &v[n], &e) < 0) {
            v[n] = json_object();
            char *ref = sbx_xasprintf("sha256:%s", names.v[i]);
            sbx_json_set(v[n], "content_digest", sbx_json_str(ref));
            sbx_json_set(v[n], "error", sbx_json_str(e.msg));
            sbx_json_set(v[n], "holds", read_holds(st, names.v[i]));
            free(ref);
        }
        n++;
    }
    sbx__snap_unlock(st);
    if (rc == 0) {
        qsort(v, n, sizeof(*v), by_created);
        json_t *a = json_array();
        for (size_t i = 0; i < n; i++)
            sbx_json_append(a, v[i]);
        *out = a;
    } else {
        for (size_t i = 0; i < n; i++)
            json_decref(v[i]);
    }
    free(v);
    sbx_strv_release(&names);
    return rc;
}

/* ---- remove and collection ---- */

static int blob_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Disk space a file takes (it may be sparse), for what collection frees. */
static uint64_t used_bytes(int dfd, const char *name)
{
    struct stat sb;
    return fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) == 0 ? (uint64_t)sb.st_blocks * 512 : 0;
}

/* Remove every file of the store directory fd (its own descriptor stays open), counted into
 * *n and *bytes when not NULL. */
static void clear_dir(int fd, uint64_t *n, uint64_t *bytes)
{
    int dfd = dup(fd);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!d) {
        sbx_fd_close(&dfd);
        return;
    }
    rewinddir(d);
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        uint64_t size = bytes ? used_bytes(dirfd(d), de->d_name) : 0;
        if (unlinkat(dirfd(d), de->d_name, 0) == 0 && n) {
            (*n)++;
            *bytes += size;
        }
    }
    closedir(d);
}

/* The blobs of one blobs/xx directory that no tree uses (used: sorted) removed, counted into
 * gs (may be NULL). 1 when some blob stays in it. */
static int collect_subdir(int sfd, const struct sbx_strv *used, struct sbx_snapshot_gc_stats *gs)
{
    DIR *sd = fdopendir(sfd);
    if (!sd) {
        close(sfd);
        return 1;
    }
    struct dirent *be;
    int left = 0;
    while ((be = readdir(sd))) {
        if (be->d_name[0] == '.')
            continue;
        const char *key = be->d_name;
        if (used->n && bsearch(&key, used->v, used->n, sizeof(char *), blob_cmp)) {
            left = 1;
            continue;
        }
        uint64_t size = used_bytes(dirfd(sd), be->d_name);
        if (unlinkat(dirfd(sd), be->d_name, 0) == 0) {
            gs->blobs++;
            gs->blob_bytes += size;
        }
    }
    closedir(sd);
    return left;
}

/* Remove every blob no tree uses, and temp files left by crashed takes. Runs under the
 * exclusive lock, so nothing is being written. A tree that cannot be read keeps nothing alive
 * but stops the collection: its blobs may be the only copy of someone's work. */
static int collect(struct sbx_snapshot_store *st, struct sbx_snapshot_gc_stats *out,
                   struct sbx_error *err)
{
    struct sbx_strv names, used;
    struct sbx_snapshot_gc_stats gs = {0};
    sbx_strv_init(&names);
    sbx_strv_init(&used);
    int rc = list_trees(st, &names, err);
    for (size_t i = 0; rc == 0 && i < names.n; i++) {
        struct snap_tree t = {0};
        rc = sbx__snap_tree_load(st, names.v[i], &t, NULL, err);
        for (size_t j = 0; rc == 0 && j < t.n; j++) {
            if (t.v[j].type == SNAP_FILE)
                sbx_strv_push(&used, t.v[j].sha);
        }
        sbx__snap_tree_release(&t);
    }
    if (rc < 0) {
        sbx_error_prefix(err, "blobs not collected");
        goto out;
    }
    if (used.n > 1)
        qsort(used.v, used.n, sizeof(char *), blob_cmp);
    int bfd = dup(st->blobs_fd);
    DIR *d = bfd >= 0 ? fdopendir(bfd) : NULL;
    if (!d) {
        sbx_fd_close(&bfd);
        rc = sbx_error_errno(err, errno, "cannot read the blobs of '%s'", st->path);
        goto out;
    }
    rewinddir(d);
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        int sfd = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sfd >= 0 && !collect_subdir(sfd, &used, &gs))
            unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR);
    }
    closedir(d);
    if ((rc = sbx__snap_packs_collect(st, &used, &gs, err)) < 0)
        goto out;
    /* A stat cache may name a blob just removed: then every cache goes (the next take of each
     * source reads its files once). */
    if (gs.blobs)
        clear_dir(st->cache_fd, NULL, NULL);
    clear_dir(st->tmp_fd, &gs.temps, &gs.temp_bytes);
    if (out)
        *out = gs;
out:
    sbx_strv_release(&names);
    sbx_strv_release(&used);
    return rc;
}

int sbx_snapshot_gc(struct sbx_snapshot_store *st, struct sbx_snapshot_gc_stats *out,
                    struct sbx_error *err)
{
    int rc = sbx__snap_lock(st, 1, err);
    if (rc < 0)
        return rc;
    rc = collect(st, out, err);
    sbx__snap_unlock(st);
    if (rc < 0)
        sbx_error_prefix(err, "cannot collect the snapshot store '%s'", st->path);
    return rc;
}

int sbx__snap_gc_try(struct sbx_snapshot_store *st, struct sbx_snapshot_gc_stats *out)
{
    if (flock(st->lockfd, LOCK_EX | LOCK_NB) < 0)
        return -1;
    int rc = collect(st, out, NULL);
    sbx__snap_unlock(st);
    return rc;
}

int sbx__snap_usage(struct sbx_snapshot_store *st, uint64_t *trees, uint64_t *blob_bytes)
{
    struct sbx_strv names;
    sbx_strv_init(&names);
    int rc = list_trees(st, &names, NULL);
    *trees = names.n;
    *blob_bytes = 0;
    sbx_strv_release(&names);
    int bfd = dup(st->blobs_fd);
    DIR *d = bfd >= 0 ? fdopendir(bfd) : NULL;
    if (!d) {
        sbx_fd_close(&bfd);
        return -1;
    }
    rewinddir(d);
    struct dirent *de;
    while ((de = readdir(d))) {
        int sfd = de->d_name[0] == '.' ? -1
                                       : openat(dirfd(d), de->d_name,
                                                O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        DIR *sd = sfd >= 0 ? fdopendir(sfd) : NULL;
        if (!sd) {
            sbx_fd_close(&sfd);
            continue;
        }
        struct dirent *be;
        while ((be = readdir(sd)))
            if (be->d_name[0] != '.')
                *blob_bytes += used_bytes(dirfd(sd), be->d_name);
        closedir(sd);
    }
    closedir(d);
    *blob_bytes += sbx__snap_packs_bytes(st);
    return rc;
}

int sbx_snapshot_remove(struct sbx_snapshot_store *st, const char *ref, int force,
                        struct sbx_error *err)
{
    char hex[SBX_SHA256_HEX_LEN + 1];
    int rc = sbx__snap_lock(st, 1, err);
    if (rc < 0)
        return rc;
    if ((rc = sbx__snap_resolve_ref(st, ref, hex, err)) < 0)
        goto out;
    json_t *holds = read_holds(st, hex);
    if (json_array_size(holds) && !force) {
        rc = sbx_error_set(err, SBX_E_PERM, 0, "snapshot '%s' is held by '%s'", ref,
                           json_string_value(json_array_get(holds, 0)));
        json_decref(holds);
        goto out;
    }
    json_decref(holds);
    int hfd = openat(st->holds_fd, hex, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (hfd >= 0) {
        sbx_fs_remove(st->holds_fd, hex, SBX_FS_RECURSIVE, NULL);
        sbx_fd_close(&hfd);
    }
    char name[SBX_SHA256_HEX_LEN + 8];
    snprintf(name, sizeof(name), "%s.json", hex);
    if (unlinkat(st->trees_fd, name, 0) < 0) {
        rc = sbx_error_errno(err, errno, "cannot remove snapshot '%s'", ref);
        goto out;
    }
    fsync(st->trees_fd);
    rc = collect(st, NULL, err);
out:
    sbx__snap_unlock(st);
    return rc;
}
