/* Taking a snapshot of a directory fd into the store, with the incremental stat cache. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "sbx/buf.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/path.h"
#include "sbx/strv.h"
#include "sbx/time.h"
#include "core/grow.h"
#include "sandbox/snapshot/internal.h"

#define CACHE_MAX ((size_t)512 << 20)
/* A file whose ctime is this close to the scan start may change again within the same tick of
 * the file system's clock without its stat changing: it is read, never trusted. */
#define RACY_WINDOW_NS ((int64_t)2000000000)
#define COPY_CHUNK     (1 << 17)
/* Files up to this size are read into memory and hashed first: a blob the store already has
 * then costs no temp file at all. */
#define SMALL_FILE ((size_t)1 << 20)

struct walk {
    struct sbx_snapshot_store *st;
    struct snap_tree tree;
    struct sbx_snapshot_limits lim;
    struct snap_statcache old_cache; /* empty: none (every lookup misses) */
    struct sbx_buf new_cache;
    int caching; /* a source is set: new_cache is built */
    int64_t scan_start_ns;
    struct sbx_strv exclude;
    dev_t root_dev;
    uint64_t bytes;
    struct sbx_snapshot_take_stats stats;
    uint64_t sk_excluded, sk_mounts, sk_devices, sk_fifos, sk_sockets, sk_symlinks, sk_names;
    struct sbx_strv created; /* the blobs this take added: removed again if it fails */
    char *buf;               /* COPY_CHUNK bytes once a file is streamed */
    char *small;             /* small_cap bytes, grown to at most SMALL_FILE + 1 as files need */
    size_t small_cap;
    struct sbx_progress_sink progress;
    int helpers; /* threads that may stat a large directory's entries beside this one */
};

/* A directory with at least PRESTAT_MIN entries has them stat'ed by several threads before
 * they are taken in order (most of an incremental take is one statx per entry); at most
 * PRESTAT_BATCH at a time, so that a huge directory costs bounded memory (each level of a walk
 * holds its own batch while it walks a subdirectory). */
#define PRESTAT_MIN     64
#define PRESTAT_BATCH   4096
#define PRESTAT_HELPERS 3

struct prestat {
    struct statx sx;
    int err; /* 0, or the errno of its statx */
};

struct prestat_job {
    int dfd;
    char *const *names;
    struct prestat *out;
    size_t n, first, step;
};

static void *prestat_run(void *arg)
{
    const struct prestat_job *j = arg;
    for (size_t i = j->first; i < j->n; i += j->step) {
        struct prestat *p = &j->out[i];
        p->err = statx(j->dfd, j->names[i], AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT,
                       STATX_BASIC_STATS, &p->sx) < 0
                         ? errno
                         : 0;
    }
    return NULL;
}

/* Stat names[0..n) relative to dfd into out, on up to helpers threads beside this one (the
 * entries interleaved between them). A thread that cannot start leaves its share to this one. */
static void prestat(int dfd, char *const *names, size_t n, struct prestat *out, int helpers)
{
    pthread_t t[PRESTAT_HELPERS];
    struct prestat_job jobs[PRESTAT_HELPERS + 1];
    int started[PRESTAT_HELPERS] = {0};
    size_t step = (size_t)helpers + 1;
    for (size_t k = 0; k < step; k++)
        jobs[k] = (struct prestat_job){dfd, names, out, n, k, step};
    /* The helpers take no signal: the caller's handlers run on its own threads only. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    for (int k = 0; k < helpers; k++)
        started[k] = pthread_create(&t[k], NULL, prestat_run, &jobs[k + 1]) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    prestat_run(&jobs[0]);
    for (int k = 0; k < helpers; k++) {
        if (started[k])
            pthread_join(t[k], NULL);
        else
            prestat_run(&jobs[k + 1]);
    }
}

/* How many helper threads a take may use: the CPUs it may run on, less its own. */
static int prestat_helpers(void)
{
    cpu_set_t set;
    int n = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
    return n <= 1 ? 0 : n - 1 > PRESTAT_HELPERS ? PRESTAT_HELPERS : n - 1;
}

static int64_t ts_ns(struct statx_timestamp t)
{
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* The stat cache is trusted only when everything that changes with a write matches. */
static void cache_key(const struct statx *sx, struct snap_stat_key *k)
{
    k->dev = (uint64_t)makedev(sx->stx_dev_major, sx->stx_dev_minor);
    k->ino = sx->stx_ino;
    k->size = sx->stx_size;
    k->mtime_ns = ts_ns(sx->stx_mtime);
    k->ctime_ns = ts_ns(sx->stx_ctime);
    k->mode = sx->stx_mode;
}

/* The cache's hash for path when its stat matches in full and the file is older than the racy
 * window; NULL otherwise. *slot: path's record in the cache (-1: none). Blobs it names exist:
 * collection drops every cache. */
static const char *cache_lookup(struct walk *w, const char *path, size_t len,
                                const struct statx *sx, long *slot)
{
    *slot = sbx__statcache_slot(&w->old_cache, path, len);
    if (ts_ns(sx->stx_ctime) >= w->scan_start_ns - RACY_WINDOW_NS)
        return NULL;
    struct snap_stat_key k;
    cache_key(sx, &k);
    return sbx__statcache_match(&w->old_cache, *slot, &k);
}

/* Room for at least n bytes in w->small, what it holds kept. Sized by need, not SMALL_FILE up
 * front: a take that reads a few small files touches (and the allocator maps) little memory. */
static void small_room(struct walk *w, size_t n)
{
    if (n <= w->small_cap)
        return;
    size_t cap = w->small_cap ? w->small_cap : 4096;
    while (cap < n)
        cap *= 2;
    if (cap > SMALL_FILE + 1)
        cap = SMALL_FILE + 1;
    w->small = sbx_xrealloc(w->small, cap);
    w->small_cap = cap;
}

/* A small file (hint: its size when opened) read whole: 1 and its hash and size when it fits,
 * 0 when it grew past SMALL_FILE meanwhile (then it is read again from the start, streamed). */
static int read_small(struct walk *w, int fd, const char *path, size_t hint,
                      char sha[SBX_SHA256_HEX_LEN + 1], uint64_t *size, struct sbx_error *err)
{
    size_t n = 0;
    small_room(w, hint + 1);
    while (n <= SMALL_FILE) {
        if (n == w->small_cap)
            small_room(w, n + 1);
        size_t want = w->small_cap - n;
        ssize_t r = read(fd, w->small + n, want);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return sbx_error_errno(err, errno, "cannot read '%s'", path);
        n += (size_t)r;
        /* a regular file that gives less than asked is at its end: no read of 0 to see it */
        if (r == 0 || (size_t)r < want)
            break;
    }
    w->stats.read_bytes += n;
    if (n > SMALL_FILE) {
        if (lseek(fd, 0, SEEK_SET) < 0)
            return sbx_error_errno(err, errno, "cannot seek in '%s'", path);
        return 0;
    }
    if (n > w->lim.max_file_bytes)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "file '%s' is over the limit of %llu bytes",
                             path, (unsigned long long)w->lim.max_file_bytes);
    uint8_t d[SBX_SHA256_LEN];
    int rc = sbx_sha256(w->small, n, d, err);
    if (rc < 0)
        return rc;
    sbx_hex(d, sizeof(d), sha);
    *size = n;
    if (sbx__snap_blob_exists(w->st, sha, n))
        return 1;
    int created = 0;
    if ((rc = sbx__snap_blob_put(w->st, sha, w->small, n, &created, err)) < 0)
        return rc;
    if (created)
        sbx_strv_push(&w->created, sha);
    w->stats.new_blobs += (uint64_t)created;
    return 1;
}

/* Read the file once through fd, copying it to a temp blob while hashing: the blob is exactly
 * the bytes hashed, whatever the file does meanwhile. Holes stay holes. */
static int read_file(struct walk *w, int fd, const char *path, char sha[SBX_SHA256_HEX_LEN + 1],
                     uint64_t *size, struct sbx_error *err)
{
    if (!w->buf)
        w->buf = sbx_xmalloc(COPY_CHUNK);
    struct snap_blob_writer bw;
    int rc = sbx__snap_blob_begin(w->st, &bw, err);
    if (rc < 0)
        return rc;
    for (;;) {
        uint64_t hole = 0, data = UINT64_MAX;
        if ((rc = sbx_fd_next_extent(fd, &hole, &data, err)) < 0)
            break;
        if (hole && (rc = sbx__snap_blob_hole(&bw, hole, err)) < 0)
            break;
        if (!data)
            break;
        ssize_t r = 0;
        while (data) {
            size_t want = data < COPY_CHUNK ? (size_t)data : COPY_CHUNK;
            r = read(fd, w->buf, want);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                break;
            w->stats.read_bytes += (uint64_t)r;
            if ((rc = sbx__snap_blob_write(&bw, w->buf, (size_t)r, err)) < 0)
                break;
            data -= data == UINT64_MAX ? 0 : (uint64_t)r;
            if (bw.size > w->lim.max_file_bytes) {
                rc = sbx_error_set(err, SBX_E_TOOBIG, 0,
                                   "file '%s' is over the limit of %llu bytes", path,
                                   (unsigned long long)w->lim.max_file_bytes);
                break;
            }
        }
        if (rc < 0)
            break;
        if (r < 0) {
            rc = sbx_error_errno(err, errno, "cannot read '%s'", path);
            break;
        }
        if (r == 0)
            break;
    }
    if (rc < 0) {
        sbx__snap_blob_abort(w->st, &bw);
        return rc;
    }
    *size = bw.size;
    int created = 0;
    if ((rc = sbx__snap_blob_finish(w->st, &bw, sha, &created, err)) < 0)
        return rc;
    if (created)
        sbx_strv_push(&w->created, sha);
    w->stats.new_blobs += (uint64_t)created;
    return 0;
}

static int take_file(struct walk *w, int dfd, const char *name, char *path, struct statx *sx,
                     struct sbx_error *err)
{
    char sha[SBX_SHA256_HEX_LEN + 1];
    uint64_t size = sx->stx_size;
    size_t plen = strlen(path);
    long slot = -1;
    const char *cached = w->caching ? cache_lookup(w, path, plen, sx, &slot) : NULL;
    struct statx now = *sx;
    if (cached) {
        memcpy(sha, cached, SBX_SHA256_HEX_LEN);
        sha[SBX_SHA256_HEX_LEN] = 0;
    } else {
        int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0) {
            int rc = sbx_error_errno(err, errno, "cannot open '%s'", path);
            free(path);
            return rc;
        }
        /* The cache records the stat of the file as opened: a change while it is read moves
         * its ctime, so the next take reads it again. */
        int rc = statx(fd, "", AT_EMPTY_PATH, STATX_BASIC_STATS, &now) < 0
                         ? sbx_error_errno(err, errno, "cannot stat '%s'", path)
                         : 0;
        if (rc == 0 && !S_ISREG(now.stx_mode))
            rc = sbx_error_set(err, SBX_E_IO, 0, "'%s' changed type while being read", path);
        int done = 0;
        if (rc == 0 && (uint64_t)now.stx_size <= SMALL_FILE)
            rc = done = read_small(w, fd, path, (size_t)now.stx_size, sha, &size, err);
        if (rc == 0 && !done)
            rc = read_file(w, fd, path, sha, &size, err);
        if (rc > 0)
            rc = 0;
        sbx_fd_close(&fd);
        if (rc < 0) {
            free(path);
            return rc;
        }
        w->stats.read_files++;
    }
    w->bytes += size;
    if (w->bytes > w->lim.max_bytes) {
        int rc = sbx_error_set(err, SBX_E_TOOBIG, 0,
                               "workspace has more than %llu file bytes at '%s'",
                               (unsigned long long)w->lim.max_bytes, path);
        free(path);
        return rc;
    }
    if (w->caching) {
        struct snap_stat_key k;
        cache_key(&now, &k);
        /* the loaded cache is updated where it has the path; only new paths are added */
        if (slot >= 0)
            sbx__statcache_note(&w->old_cache, slot, &k, sha);
        else
            sbx__statcache_add(&w->new_cache, path, plen, &k, sha);
    }
    struct snap_entry *e = sbx__snap_tree_add(&w->tree, path, SNAP_FILE, now.stx_mode);
    e->size = size;
    memcpy(e->sha, sha, sizeof(sha));
    w->stats.files++;
    return 0;
}

static int walk_dir(struct walk *w, int dfd, const char *prefix, uint32_t depth,
                    struct sbx_error *err);

static int take_one(struct walk *w, int dfd, const char *name, const char *prefix, uint32_t depth,
                    const struct prestat *pre, struct sbx_error *err)
{
    size_t plen = strlen(prefix), nlen = strlen(name);
    size_t len = plen + (plen ? 1 : 0) + nlen;
    char *path = sbx_xmalloc(len + 1);
    memcpy(path, prefix, plen);
    if (plen)
        path[plen] = '/';
    memcpy(path + len - nlen, name, nlen + 1);
    sbx_progress_report(&w->progress, "snapshot", path, w->tree.n, 0, 0);
    if (w->exclude.n && sbx_strv_find(&w->exclude, path) >= 0) {
        w->sk_excluded++;
        free(path);
        return 0;
    }
    /* The path is in normal form when the name is: the prefix was checked on the way down, and
     * a name from readdir is never empty, ".", ".." or holds a '/' or a NUL. */
    if (len > SBX_PATH_MAX || nlen > SBX_NAME_MAX || !sbx_utf8_valid(name, nlen) ||
        sbx_text_has_control(name, nlen)) {
        /* Not valid UTF-8 or a control character: no portable archive can carry it. */
        free(path);
        w->sk_names++;
        return 0;
    }
    if (len > w->lim.max_path || depth > w->lim.max_depth) {
        int rc = sbx_error_set(err, SBX_E_TOOBIG, 0,
                               "'%s' is over the path limit (%u bytes, %u components)", path,
                               w->lim.max_path, w->lim.max_depth);
        free(path);
        return rc;
    }
    if (w->tree.n >= w->lim.max_entries) {
        int rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "workspace has more than %llu entries at '%s'",
                               (unsigned long long)w->lim.max_entries, path);
        free(path);
        return rc;
    }
    struct statx sx;
    int serr = 0;
    if (pre)
        serr = pre->err, sx = pre->sx;
    else if (statx(dfd, name, AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT, STATX_BASIC_STATS, &sx) < 0)
        serr = errno;
    if (serr) {
        int rc = serr == ENOENT ? 0 : sbx_error_errno(err, serr, "cannot stat '%s'", path);
        free(path);
        return rc;
    }
    dev_t dev = makedev(sx.stx_dev_major, sx.stx_dev_minor);
    int mount_root = (sx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) &&
                     (sx.stx_attributes & STATX_ATTR_MOUNT_ROOT);
    if (dev != w->root_dev || mount_root) {
        w->sk_mounts++;
        free(path);
        return 0;
    }
    switch (sx.stx_mode & S_IFMT) {
    case S_IFDIR: {
        int sub = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub < 0) {
            int rc = errno == ENOENT ? 0 : sbx_error_errno(err, errno, "cannot open '%s'", path);
            free(path);
            return rc;
        }
        sbx__snap_tree_add(&w->tree, path, SNAP_DIR, sx.stx_mode);
        int rc = walk_dir(w, sub, path, depth + 1, err);
        close(sub);
        return rc;
    }
    case S_IFREG:
        return take_file(w, dfd, name, path, &sx, err);
    case S_IFLNK: {
        char target[SBX_PATH_MAX + 2];
        ssize_t n = readlinkat(dfd, name, target, sizeof(target) - 1);
        if (n < 0 || (size_t)n > SBX_PATH_MAX) {
            w->sk_symlinks++;
            free(path);
            return 0;
        }
        target[n] = 0;
        if (memchr(target, 0, (size_t)n) || !sbx_utf8_valid(target, (size_t)n) ||
            sbx__snap_check_target(path, target, NULL) < 0) {
            w->sk_symlinks++;
            free(path);
            return 0;
        }
        struct snap_entry *e = sbx__snap_tree_add(&w->tree, path, SNAP_SYMLINK, 0);
        e->target = sbx_xstrdup(target);
        return 0;
    }
    case S_IFCHR:
    case S_IFBLK:
        w->sk_devices++;
        break;
    case S_IFIFO:
        w->sk_fifos++;
        break;
    default:
        w->sk_sockets++;
        break;
    }
    free(path);
    return 0;
}

static int walk_dir(struct walk *w, int dfd, const char *prefix, uint32_t depth,
                    struct sbx_error *err)
{
    int dup_fd = dup(dfd);
    DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
    if (!d) {
        int e = errno;
        sbx_fd_close(&dup_fd);
        return sbx_error_errno(err, e, "cannot read directory '%s'", prefix[0] ? prefix : ".");
    }
    rewinddir(d);
    int rc = 0;
    struct dirent *de;
    /* Names are taken in batches: one at a time, or stat'ed together first when many. */
    struct sbx_strv names;
    sbx_strv_init(&names);
    struct prestat *pre = NULL;
    size_t pre_cap = 0;
    for (int more = 1; rc == 0 && more;) {
        more = 0;
        while ((de = readdir(d))) {
            if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                continue;
            sbx_strv_push(&names, de->d_name);
            if (names.n == PRESTAT_BATCH) {
                more = 1;
                break;
            }
        }
        int batch = w->helpers > 0 && names.n >= PRESTAT_MIN;
        if (batch) {
            if (names.n > pre_cap) {
                pre_cap = names.n;
                pre = sbx_xrealloc(pre, pre_cap * sizeof(*pre));
            }
            prestat(dfd, names.v, names.n, pre, w->helpers);
        }
        for (size_t i = 0; rc == 0 && i < names.n; i++)
            rc = take_one(w, dfd, names.v[i], prefix, depth, batch ? &pre[i] : NULL, err);
        sbx_strv_release(&names);
        sbx_strv_init(&names);
    }
    sbx_strv_release(&names);
    free(pre);
    closedir(d);
    return rc;
}

/* Disk space the regular files beneath dfd take (holes do not count), on its file system
 * only: at most what a snapshot of it adds to a store that has none of it. */
static uint64_t files_usage(int dfd, dev_t dev, uint32_t depth)
{
    int dup_fd = depth <= SBX_SNAPSHOT_DEFAULT_MAX_DEPTH ? dup(dfd) : -1;
    DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
    if (!d) {
        sbx_fd_close(&dup_fd);
        return 0;
    }
    rewinddir(d);
    uint64_t sum = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        struct stat sb;
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
            fstatat(dfd, de->d_name, &sb, AT_SYMLINK_NOFOLLOW) < 0 || sb.st_dev != dev)
            continue;
        if (S_ISREG(sb.st_mode)) {
            sum += (uint64_t)sb.st_blocks * 512;
        } else if (S_ISDIR(sb.st_mode)) {
            int sub = openat(dfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub >= 0) {
                sum += files_usage(sub, dev, depth + 1);
                close(sub);
            }
        }
    }
    closedir(d);
    return sum;
}

static void put_size(char *out, size_t cap, uint64_t n)
{
    static const char *const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)n;
    size_t u = 0;
    while (v >= 1024 && u + 1 < SBX_ARRAY_LEN(units)) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(out, cap, "%llu bytes", (unsigned long long)n);
    else
        snprintf(out, cap, "%.1f %s", v, units[u]);
}

/* After a take that failed for lack of space: how much the workspace needs, how much is free,
 * what the collection freed (or that sbx snapshot gc would), and what the snapshots hold. */
static void explain_no_space(struct sbx_snapshot_store *st, int dirfd, dev_t root_dev, int gced,
                             const struct sbx_snapshot_gc_stats *gs, struct sbx_error *err)
{
    struct statvfs vfs;
    uint64_t trees = 0, held = 0, avail = 0;
    if (fstatvfs(st->dirfd, &vfs) == 0)
        avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
    sbx__snap_usage(st, &trees, &held);
    char need_s[32], free_s[32], gc_s[32], held_s[32];
    put_size(need_s, sizeof(need_s), files_usage(dirfd, root_dev, 1));
    put_size(free_s, sizeof(free_s), avail);
    put_size(gc_s, sizeof(gc_s), gs->blob_bytes + gs->temp_bytes);
    put_size(held_s, sizeof(held_s), held);
    char gc_part[128] = "";
    if (!gced)
        snprintf(gc_part, sizeof(gc_part),
                 "; 'sbx snapshot gc' removes unused blobs and temp files once the other snapshot "
                 "commands end");
    else if (gs->blob_bytes + gs->temp_bytes)
        snprintf(gc_part, sizeof(gc_part), ", and %s of unused blobs and temp files", gc_s);
    size_t len = strlen(err->msg);
    snprintf(err->msg + len, sizeof(err->msg) - len,
             " (in the snapshot store '%s'): the workspace's files take %s and %s is free (what "
             "the store has already costs nothing); what the failed snapshot wrote was "
             "removed%s; the store's %llu snapshot%s hold %s ('sbx snapshot ls'; 'sbx snapshot "
             "rm REF' frees what only that one holds)",
             st->path, need_s, free_s, gc_part, (unsigned long long)trees, trees == 1 ? "" : "s",
             held_s);
}

static void cache_name(const char *source, char out[SBX_SHA256_HEX_LEN + 8])
{
    uint8_t d[SBX_SHA256_LEN];
    char hex[SBX_SHA256_HEX_LEN + 1];
    sbx_sha256(source, strlen(source), d, NULL);
    sbx_hex(d, sizeof(d), hex);
    snprintf(out, SBX_SHA256_HEX_LEN + 8, "%s.stat", hex);
}

/* A missing, damaged or old cache is no error: every file is read instead. The JSON cache of
 * earlier versions (<hash>.json) is never read; it goes when its source's binary cache is
 * first made. */
static void load_cache(struct sbx_snapshot_store *st, const char *name, struct snap_statcache *c)
{
    if (sbx__statcache_load(st->cache_fd, name, CACHE_MAX, c) == 0)
        return;
    char old[SBX_SHA256_HEX_LEN + 8];
    snprintf(old, sizeof(old), "%.*s.json", SBX_SHA256_HEX_LEN, name);
    unlinkat(st->cache_fd, old, 0);
}

int sbx_snapshot_take(struct sbx_snapshot_store *st, int dirfd,
                      const struct sbx_snapshot_take_opts *o, char **out_ref, struct sbx_error *err)
{
    static const struct sbx_snapshot_take_opts none;
    if (!o)
        o = &none;
    struct walk w;
    memset(&w, 0, sizeof(w));
    w.st = st;
    sbx__snap_limits(o->limits, &w.lim);
    sbx_strv_init(&w.exclude);
    sbx_strv_init(&w.created);
    json_t *skipped = NULL;
    char cname[SBX_SHA256_HEX_LEN + 8];
    struct snap_tree_file tf = {.fd = -1};
    int rc = 0, locked = 0;
    for (size_t i = 0; o->exclude && o->exclude[i]; i++) {
        char *norm = NULL;
        rc = sbx_path_normalize(o->exclude[i], strlen(o->exclude[i]), 0, NULL, &norm, err);
        if (rc < 0) {
            sbx_error_prefix(err, "excluded path");
            goto out;
        }
        sbx_strv_push_take(&w.exclude, norm);
    }
    struct statx root;
    if (statx(dirfd, "", AT_EMPTY_PATH, STATX_BASIC_STATS, &root) < 0) {
        rc = sbx_error_errno(err, errno, "cannot stat the workspace");
        goto out;
    }
    if (!S_ISDIR(root.stx_mode)) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "the workspace to snapshot is not a directory");
        goto out;
    }
    w.root_dev = makedev(root.stx_dev_major, root.stx_dev_minor);
    if ((rc = sbx__snap_lock(st, 0, err)) < 0)
        goto out;
    locked = 1;
    if (o->source) {
        cache_name(o->source, cname);
        load_cache(st, cname, &w.old_cache);
        sbx__statcache_writer_init(&w.new_cache);
        w.caching = 1;
        /* about as many files as last time: no growth (and copying) on the way */
        if (w.old_cache.count)
            SBX_ALLOC_GROW(w.tree.v, w.old_cache.count + 64, w.tree.cap);
    }
    w.scan_start_ns = sbx_time_real_ns();
    w.helpers = prestat_helpers();
    sbx_progress_sink_init(&w.progress, o->progress, o->progress_data);
    rc = walk_dir(&w, dirfd, "", 1, err);
    sbx_progress_end(&w.progress, "snapshot", w.tree.n, w.tree.n);
    if (rc < 0)
        goto out;
    skipped = json_pack("{sIsIsIsIsIsIsI}", "excluded", (json_int_t)w.sk_excluded, "mounts",
                        (json_int_t)w.sk_mounts, "devices", (json_int_t)w.sk_devices, "fifos",
                        (json_int_t)w.sk_fifos, "sockets", (json_int_t)w.sk_sockets, "symlinks",
                        (json_int_t)w.sk_symlinks, "names", (json_int_t)w.sk_names);
    w.stats.entries = w.tree.n;
    /* The tree's temp file is written (writeback started) before the blobs are synced, and
     * named only after: its blocks ride in the journal commit of the blobs' first fsync, and
     * its own fsync before the rename finds little left to do. No name the tree could be
     * found by exists before every blob it names is durable (docs/internals/snapshots.md,
     * Durability). */
    rc = sbx__snap_tree_stage(st, &w.tree, o->manifest_digest, o->label, skipped, &tf, err);
    if (rc < 0)
        goto out;
    if (w.stats.new_blobs && (rc = sbx__snap_sync(st, err)) < 0)
        goto out;
    if ((rc = sbx__snap_tree_publish(st, &tf, err)) < 0)
        goto out;
    char *ref = tf.ref;
    tf.ref = NULL;
    /* The cache only saves work: a failure to write it costs the next take time, and a torn
     * one after a crash fails its checksum and is ignored, so it is not fsynced. */
    if (w.caching)
        sbx__statcache_save(&w.old_cache, st->cache_fd, cname, &w.new_cache, NULL);
    if (o->out_stats)
        *o->out_stats = w.stats;
    *out_ref = ref;
out:
    /* A failed take leaves nothing: the blobs it added go (as a failed import's do), then the
     * store is collected if no other command holds it (temp files of killed takes). */
    if (rc < 0) {
        sbx__snap_tree_unstage(st, &tf);
        sbx__snap_discard(st);
    }
    free(tf.ref);
    for (size_t i = 0; rc < 0 && i < w.created.n; i++)
        sbx__snap_blob_unlink(st, w.created.v[i]);
    if (locked)
        sbx__snap_unlock(st);
    if (rc < 0 && locked) {
        struct sbx_snapshot_gc_stats gs = {0};
        int gced = sbx__snap_gc_try(st, &gs) == 0;
        if (err && (err->sys_errno == ENOSPC || err->sys_errno == EDQUOT))
            explain_no_space(st, dirfd, w.root_dev, gced, &gs, err);
    }
    if (rc < 0)
        sbx_error_prefix(err, "cannot snapshot");
    json_decref(skipped);
    sbx__statcache_release(&w.old_cache);
    if (w.caching)
        sbx_buf_release(&w.new_cache);
    sbx__snap_tree_release(&w.tree);
    sbx_strv_release(&w.exclude);
    sbx_strv_release(&w.created);
    free(w.buf);
    free(w.small);
    return rc;
}
