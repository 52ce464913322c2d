/* The stat cache of incremental takes, in a binary file of its own (cache/<hash>.stat):
 *
 *   header  "SBXSTAT1", u32 version, u32 byte-order mark, u64 record count, u64 body bytes
 *   records u64 dev, ino, size; i64 mtime ns, ctime ns; u32 mode, u32 path length;
 *           64 hex digits of the content; the path; zeros up to a multiple of 8
 *   trailer u64 checksum of every byte before it (sbx__statcache_sum)
 *
 * in this host's byte order (the mark tells another's apart). It only says "unchanged since
 * the last take": a file that is torn, edited, of another version or another host's fails a
 * check and the whole cache is ignored (every file is read). Lookups go through an
 * open-addressing hash table of the paths built when it is loaded. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sbx/fs.h"
#include "sbx/path.h"
#include "sandbox/snapshot/internal.h"

#define SC_MAGIC   "SBXSTAT1"
#define SC_VERSION 1u
#define SC_BOM     0x01020304u
#define SC_HEAD    32
#define SC_FIXED   (5 * 8 + 2 * 4 + SBX_SHA256_HEX_LEN)
#define SC_SUM     8

struct sc_rec {
    uint64_t dev, ino, size;
    int64_t mtime_ns, ctime_ns;
    uint32_t mode, path_len;
    char sha[SBX_SHA256_HEX_LEN];
};

_Static_assert(sizeof(struct sc_rec) == SC_FIXED, "stat cache record has no padding");

static uint64_t path_hash(const char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* A checksum against torn and damaged files, not against an editor (who could recompute any),
 * so not a cryptographic one: the file is read at every take and a SHA-256 of it cost more
 * than the rest of the loading. 64-bit words multiplied and folded in, the length last. */
uint64_t sbx__statcache_sum(const char *p, size_t n)
{
    uint64_t h = 0x736278737461742full;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0x9e3779b97f4a7c15ull;
        h ^= h >> 29;
    }
    uint64_t w = 0;
    memcpy(&w, p + i, n - i);
    h = (h ^ w ^ ((uint64_t)n << 3)) * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
    h *= 0x94d049bb133111ebull;
    return h ^ (h >> 29);
}

static size_t padded(size_t n)
{
    return (n + 7) & ~(size_t)7;
}

void sbx__statcache_release(struct snap_statcache *c)
{
    if (c->data)
        sbx_fd_close(&c->fd);
    free(c->data);
    free(c->slots);
    free(c->flags);
    memset(c, 0, sizeof(*c));
}

/* Walk the records of a checked file, filling the table; -1 when one does not fit. */
static int index_records(struct snap_statcache *c, uint64_t count, size_t body_end)
{
    size_t cap = 16;
    while (cap < count * 2)
        cap *= 2;
    c->slots = calloc(cap, sizeof(*c->slots));
    c->flags = calloc(cap, 1);
    if (!c->slots || !c->flags)
        return -1;
    c->mask = cap - 1;
    size_t off = SC_HEAD;
    for (uint64_t i = 0; i < count; i++) {
        struct sc_rec r;
        if (body_end - off < SC_FIXED)
            return -1;
        memcpy(&r, c->data + off, SC_FIXED);
        if (r.path_len == 0 || r.path_len > SBX_PATH_MAX ||
            body_end - off - SC_FIXED < padded(r.path_len))
            return -1;
        size_t k = path_hash(c->data + off + SC_FIXED, r.path_len) & c->mask;
        while (c->slots[k])
            k = (k + 1) & c->mask;
        c->slots[k] = off + 1;
        off += SC_FIXED + padded(r.path_len);
    }
    return off == body_end ? 0 : -1;
}

/* The file read into one buffer of its size, in as few reads (a buffer grown as it is read
 * would be copied and would map more memory than the file needs). Its fd stays open, for
 * writing back in place what a take changed (sbx__statcache_save). */
static int read_whole(int dirfd, const char *name, size_t max, struct snap_statcache *c)
{
    int fd = -1;
    if (sbx_fs_open(dirfd, name, O_RDWR | O_NOCTTY | O_NONBLOCK, 0, 0, &fd, NULL) < 0)
        return -1;
    struct stat sb;
    int rc = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && (uint64_t)sb.st_size <= max ? 0 : -1;
    size_t len = rc == 0 ? (size_t)sb.st_size : 0;
    char *data = rc == 0 ? malloc(len ? len : 1) : NULL;
    size_t got = 0;
    if (rc == 0 && !data)
        rc = -1;
    while (rc == 0 && got < len) {
        ssize_t r = read(fd, data + got, len - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            rc = -1;
        else
            got += (size_t)r;
    }
    if (rc < 0) {
        sbx_fd_close(&fd);
        free(data);
        return -1;
    }
    c->data = data;
    c->len = len;
    c->fd = fd;
    return 0;
}

int sbx__statcache_load(int dirfd, const char *name, size_t max, struct snap_statcache *c)
{
    memset(c, 0, sizeof(*c));
    if (read_whole(dirfd, name, max, c) < 0)
        return -1;
    uint32_t version = 0, bom = 0;
    uint64_t count = 0, body = 0;
    uint64_t sum;
    if (c->len < SC_HEAD + SC_SUM || memcmp(c->data, SC_MAGIC, 8) != 0)
        goto bad;
    memcpy(&version, c->data + 8, 4);
    memcpy(&bom, c->data + 12, 4);
    memcpy(&count, c->data + 16, 8);
    memcpy(&body, c->data + 24, 8);
    if (version != SC_VERSION || bom != SC_BOM || body != c->len - SC_HEAD - SC_SUM ||
        count > body / SC_FIXED)
        goto bad;
    memcpy(&sum, c->data + c->len - SC_SUM, SC_SUM);
    if (sbx__statcache_sum(c->data, c->len - SC_SUM) != sum)
        goto bad;
    if (index_records(c, count, c->len - SC_SUM) < 0)
        goto bad;
    c->count = count;
    return 0;
bad:
    sbx__statcache_release(c);
    return -1;
}

long sbx__statcache_slot(const struct snap_statcache *c, const char *path, size_t len)
{
    if (!c->slots)
        return -1;
    size_t i = path_hash(path, len) & c->mask;
    for (; c->slots[i]; i = (i + 1) & c->mask) {
        const char *p = c->data + c->slots[i] - 1;
        uint32_t plen;
        memcpy(&plen, p + offsetof(struct sc_rec, path_len), sizeof(plen));
        if (plen == len && memcmp(p + SC_FIXED, path, len) == 0)
            return (long)i;
    }
    return -1;
}

static int key_matches(const struct sc_rec *r, const struct snap_stat_key *k)
{
    return r->dev == k->dev && r->ino == k->ino && r->size == k->size &&
           r->mtime_ns == k->mtime_ns && r->ctime_ns == k->ctime_ns && r->mode == k->mode;
}

const char *sbx__statcache_match(const struct snap_statcache *c, long slot,
                                 const struct snap_stat_key *k)
{
    if (slot < 0)
        return NULL;
    const char *p = c->data + c->slots[slot] - 1;
    struct sc_rec r;
    memcpy(&r, p, SC_FIXED);
    return key_matches(&r, k) ? p + offsetof(struct sc_rec, sha) : NULL;
}

const char *sbx__statcache_find(const struct snap_statcache *c, const char *path, size_t len,
                                const struct snap_stat_key *k)
{
    return sbx__statcache_match(c, sbx__statcache_slot(c, path, len), k);
}

#define SC_SEEN  1
#define SC_DIRTY 2

void sbx__statcache_note(struct snap_statcache *c, long slot, const struct snap_stat_key *k,
                         const char sha[SBX_SHA256_HEX_LEN])
{
    if (!(c->flags[slot] & SC_SEEN))
        c->seen++;
    c->flags[slot] |= SC_SEEN;
    char *p = c->data + c->slots[slot] - 1;
    struct sc_rec r;
    memcpy(&r, p, SC_FIXED);
    if (key_matches(&r, k) && memcmp(r.sha, sha, sizeof(r.sha)) == 0)
        return;
    r.dev = k->dev;
    r.ino = k->ino;
    r.size = k->size;
    r.mtime_ns = k->mtime_ns;
    r.ctime_ns = k->ctime_ns;
    r.mode = k->mode;
    memcpy(r.sha, sha, sizeof(r.sha));
    memcpy(p, &r, SC_FIXED);
    if (!(c->flags[slot] & SC_DIRTY))
        c->dirty++;
    c->flags[slot] |= SC_DIRTY;
}

void sbx__statcache_writer_init(struct sbx_buf *w)
{
    sbx_buf_init(w, SBX_BUF_NOLIMIT);
    char head[SC_HEAD] = SC_MAGIC;
    if (sbx_buf_add(w, head, sizeof(head), NULL) < 0)
        SBX_BUG("unbounded buffer refused data");
}

void sbx__statcache_add(struct sbx_buf *w, const char *path, size_t len,
                        const struct snap_stat_key *k, const char sha[SBX_SHA256_HEX_LEN])
{
    static const char zeros[8];
    struct sc_rec r = {
            .dev = k->dev,
            .ino = k->ino,
            .size = k->size,
            .mtime_ns = k->mtime_ns,
            .ctime_ns = k->ctime_ns,
            .mode = k->mode,
            .path_len = (uint32_t)len,
    };
    memcpy(r.sha, sha, sizeof(r.sha));
    if (sbx_buf_add(w, &r, SC_FIXED, NULL) < 0 || sbx_buf_add(w, path, len, NULL) < 0 ||
        sbx_buf_add(w, zeros, padded(len) - len, NULL) < 0)
        SBX_BUG("unbounded buffer refused data");
    /* the record count sits in the header, updated as records come */
    uint64_t count;
    memcpy(&count, w->data + 16, 8);
    count++;
    memcpy(w->data + 16, &count, 8);
}

int sbx__statcache_write(int dirfd, const char *name, struct sbx_buf *w, struct sbx_error *err)
{
    uint32_t version = SC_VERSION, bom = SC_BOM;
    uint64_t body = w->len - SC_HEAD;
    memcpy(w->data + 8, &version, 4);
    memcpy(w->data + 12, &bom, 4);
    memcpy(w->data + 24, &body, 8);
    uint64_t sum = sbx__statcache_sum(w->data, w->len);
    if (sbx_buf_add(w, &sum, sizeof(sum), NULL) < 0)
        SBX_BUG("unbounded buffer refused data");
    int rc;
    char tmp[SBX_SHA256_HEX_LEN + 32];
    snprintf(tmp, sizeof(tmp), "%s.%d.tmp", name, (int)getpid());
    int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return sbx_error_errno(err, errno, "cannot write the stat cache '%s'", name);
    rc = sbx_fd_write_all(fd, w->data, w->len, err);
    close(fd);
    if (rc == 0 && renameat(dirfd, tmp, dirfd, name) < 0)
        rc = sbx_error_errno(err, errno, "cannot write the stat cache '%s'", name);
    if (rc < 0)
        unlinkat(dirfd, tmp, 0);
    return rc;
}

static uint64_t record_count(const struct sbx_buf *w)
{
    uint64_t count;
    memcpy(&count, w->data + 16, 8);
    return count;
}

/* A new file: the records of c that the take saw (updated) and those of extra. */
static int save_new(const struct snap_statcache *c, int dirfd, const char *name,
                    struct sbx_buf *extra, struct sbx_error *err)
{
    if (!c->data)
        return sbx__statcache_write(dirfd, name, extra, err);
    struct sbx_buf out;
    sbx__statcache_writer_init(&out);
    if (sbx_buf_reserve(&out, c->len + extra->len, NULL) < 0)
        SBX_BUG("unbounded buffer refused data");
    uint64_t count = record_count(extra);
    for (size_t i = 0; i <= c->mask; i++) {
        if (!(c->flags[i] & SC_SEEN))
            continue;
        const char *p = c->data + c->slots[i] - 1;
        uint32_t plen;
        memcpy(&plen, p + offsetof(struct sc_rec, path_len), sizeof(plen));
        if (sbx_buf_add(&out, p, SC_FIXED + padded(plen), NULL) < 0)
            SBX_BUG("unbounded buffer refused data");
        count++;
    }
    if (sbx_buf_add(&out, extra->data + SC_HEAD, extra->len - SC_HEAD, NULL) < 0)
        SBX_BUG("unbounded buffer refused data");
    memcpy(out.data + 16, &count, 8);
    int rc = sbx__statcache_write(dirfd, name, &out, err);
    sbx_buf_release(&out);
    return rc;
}

static int pwrite_all(int fd, const char *p, size_t n, size_t off)
{
    while (n) {
        ssize_t r = pwrite(fd, p, n, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
        off += (size_t)r;
    }
    return 0;
}

/* The changed records and the checksum written over the loaded file. Torn by a crash, or mixed
 * with another take's writes, the file fails its checksum unless it is byte for byte the image
 * of one writer, every record of which that writer saw. */
static int save_in_place(struct snap_statcache *c, const char *name, struct sbx_error *err)
{
    int rc = 0;
    for (size_t i = 0; rc == 0 && i <= c->mask; i++) {
        if (c->flags[i] & SC_DIRTY)
            rc = pwrite_all(c->fd, c->data + c->slots[i] - 1, SC_FIXED, c->slots[i] - 1);
    }
    uint64_t sum = sbx__statcache_sum(c->data, c->len - SC_SUM);
    memcpy(c->data + c->len - SC_SUM, &sum, SC_SUM);
    if (rc == 0)
        rc = pwrite_all(c->fd, c->data + c->len - SC_SUM, SC_SUM, c->len - SC_SUM);
    return rc < 0 ? sbx_error_errno(err, errno, "cannot write the stat cache '%s'", name) : 0;
}

int sbx__statcache_save(struct snap_statcache *c, int dirfd, const char *name,
                        struct sbx_buf *extra, struct sbx_error *err)
{
    if (!c->data || record_count(extra) || c->seen != c->count)
        return save_new(c, dirfd, name, extra, err);
    return c->dirty ? save_in_place(c, name, err) : 0;
}
