/* Pack files of the snapshot store: small blobs appended to one file per take, import or pull,
 * found through an index. docs/internals/snapshots.md ("Pack files") describes the format. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/grow.h"
#include "sbx/buf.h"
#include "sbx/fs.h"
#include "sbx/strv.h"
#include "sandbox/snapshot/internal.h"

#define PACK_MAGIC     "SBXPACK1"
#define PACK_MAGIC_LEN 8
#define IDX_MAGIC      "sbx-pack-index 1"
#define ID_HEX         16
#define PEND           UINT32_MAX
#define GONE           (UINT32_MAX - 1)
#define PEND_BUF       ((size_t)1 << 20)
/* An index line is 64 hex, two numbers of at most 20 digits, two spaces and a newline. */
#define IDX_LINE_MAX 110
#define IDX_MAX      ((size_t)1 << 30)
#define OPEN_MAX     64

struct pack {
    char id[ID_HEX + 1];
    int fd;        /* -1 until read from */
    uint64_t size; /* as the index says */
    char *damage;  /* NULL, or why its blobs cannot be used */
};

struct pack_ent {
    uint8_t d[SBX_SHA256_LEN];
    uint32_t pack; /* index in packs, PEND (the pack being written) or GONE */
    uint64_t off, size;
};

struct snap_packs {
    pthread_mutex_t mu;
    int stale; /* the directory may have changed since it was read (another process) */
    struct pack *packs;
    size_t npacks, cap_packs, nopen;
    struct pack_ent *ents;
    size_t nents, cap_ents;
    uint32_t *tab; /* open addressing: index + 1 into ents, 0 empty */
    size_t tabcap;
    /* the pack being written: tmp/<pend_name> */
    int pend_fd;
    char pend_name[ID_HEX + 8];
    uint64_t pend_size; /* bytes written to the file, plus what buf holds */
    char *buf;
    size_t buflen;
    size_t pend_count;
};

static int unhex(const char *s, size_t n, uint8_t *out)
{
    for (size_t i = 0; i < n; i++) {
        int v = 0;
        for (int k = 0; k < 2; k++) {
            char c = s[2 * i + (size_t)k];
            int x = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
            if (x < 0)
                return -1;
            v = v * 16 + x;
        }
        out[i] = (uint8_t)v;
    }
    return 0;
}

static size_t slot_of(const uint8_t *d, size_t cap)
{
    uint64_t h;
    memcpy(&h, d, sizeof(h));
    return (size_t)h & (cap - 1);
}

static void tab_insert(struct snap_packs *p, uint32_t i)
{
    size_t s = slot_of(p->ents[i].d, p->tabcap);
    while (p->tab[s]) {
        if (memcmp(p->ents[p->tab[s] - 1].d, p->ents[i].d, SBX_SHA256_LEN) == 0)
            return; /* the first copy wins */
        s = (s + 1) & (p->tabcap - 1);
    }
    p->tab[s] = i + 1;
}

static void tab_rebuild(struct snap_packs *p)
{
    size_t cap = 1024;
    while (cap < p->nents * 2)
        cap *= 2;
    free(p->tab);
    p->tab = sbx_xcalloc(cap, sizeof(*p->tab));
    p->tabcap = cap;
    for (size_t i = 0; i < p->nents; i++) {
        if (p->ents[i].pack != GONE)
            tab_insert(p, (uint32_t)i);
    }
}

static struct pack_ent *tab_find(struct snap_packs *p, const uint8_t *d)
{
    if (!p->tabcap)
        return NULL;
    size_t s = slot_of(d, p->tabcap);
    while (p->tab[s]) {
        struct pack_ent *e = &p->ents[p->tab[s] - 1];
        if (memcmp(e->d, d, SBX_SHA256_LEN) == 0)
            return e;
        s = (s + 1) & (p->tabcap - 1);
    }
    return NULL;
}

static void add_ent(struct snap_packs *p, const uint8_t *d, uint32_t pack, uint64_t off,
                    uint64_t size)
{
    SBX_ALLOC_GROW(p->ents, p->nents + 1, p->cap_ents);
    struct pack_ent *e = &p->ents[p->nents++];
    memcpy(e->d, d, SBX_SHA256_LEN);
    e->pack = pack;
    e->off = off;
    e->size = size;
    if (p->nents * 2 > p->tabcap)
        tab_rebuild(p);
    else
        tab_insert(p, (uint32_t)(p->nents - 1));
}

int sbx__snap_packs_init(struct sbx_snapshot_store *st, struct sbx_error *err)
{
    (void)err;
    struct snap_packs *p = sbx_xcalloc(1, sizeof(*p));
    pthread_mutex_init(&p->mu, NULL);
    p->pend_fd = -1;
    p->stale = 1;
    st->packs = p;
    return 0;
}

static void drop_all(struct snap_packs *p)
{
    for (size_t i = 0; i < p->npacks; i++) {
        sbx_fd_close(&p->packs[i].fd);
        free(p->packs[i].damage);
    }
    p->npacks = 0;
    p->nopen = 0;
    size_t keep = 0;
    for (size_t i = 0; i < p->nents; i++) {
        if (p->ents[i].pack == PEND)
            p->ents[keep++] = p->ents[i];
    }
    p->nents = keep;
    tab_rebuild(p);
}

void sbx__snap_packs_free(struct sbx_snapshot_store *st)
{
    struct snap_packs *p = st->packs;
    if (!p)
        return;
    sbx__snap_pack_abort(st);
    drop_all(p);
    free(p->packs);
    free(p->ents);
    free(p->tab);
    free(p->buf);
    pthread_mutex_destroy(&p->mu);
    free(p);
    st->packs = NULL;
}

void sbx__snap_packs_stale(struct sbx_snapshot_store *st)
{
    pthread_mutex_lock(&st->packs->mu);
    st->packs->stale = 1;
    pthread_mutex_unlock(&st->packs->mu);
}

static int is_id(const char *s, size_t n)
{
    if (n != ID_HEX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    }
    return 1;
}

/* The ids of the indexes in packs/ (the packs that are complete). */
static int list_ids(struct sbx_snapshot_store *st, struct sbx_strv *out, struct sbx_error *err)
{
    int dfd = dup(st->packs_fd);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!d) {
        int e = errno;
        sbx_fd_close(&dfd);
        return sbx_error_errno(err, e, "cannot read the packs of '%s'", st->path);
    }
    rewinddir(d);
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l == ID_HEX + 4 && strcmp(de->d_name + ID_HEX, ".idx") == 0 &&
            is_id(de->d_name, ID_HEX))
            sbx_strv_push_take(out, sbx_xstrndup(de->d_name, ID_HEX));
    }
    closedir(d);
    return 0;
}

/* One index line "<hex> <offset> <size>": 0, or -1 when it is not one. */
static int parse_line(const char *s, size_t n, uint8_t d[SBX_SHA256_LEN], uint64_t *off,
                      uint64_t *size)
{
    if (n < SBX_SHA256_HEX_LEN + 4 || s[SBX_SHA256_HEX_LEN] != ' ' ||
        unhex(s, SBX_SHA256_LEN, d) < 0)
        return -1;
    char tmp[48];
    size_t rest = n - SBX_SHA256_HEX_LEN - 1;
    if (rest >= sizeof(tmp))
        return -1;
    memcpy(tmp, s + SBX_SHA256_HEX_LEN + 1, rest);
    tmp[rest] = 0;
    char *end = NULL;
    errno = 0;
    unsigned long long a = strtoull(tmp, &end, 10);
    if (errno || end == tmp || *end != ' ' || tmp[0] == '-')
        return -1;
    char *b0 = end + 1;
    unsigned long long b = strtoull(b0, &end, 10);
    if (errno || end == b0 || *end || b0[0] == '-')
        return -1;
    *off = a;
    *size = b;
    return 0;
}

/* Check an index's text: its last line is "sha256 <hex>" of everything before it. Returns the
 * length of the part it covers, or 0 when it is torn or edited. */
static size_t idx_checked_len(const char *s, size_t n)
{
    static const size_t tail = 7 + SBX_SHA256_HEX_LEN + 1;
    if (n < tail || s[n - 1] != '\n' || memcmp(s + n - tail, "sha256 ", 7) != 0)
        return 0;
    uint8_t d[SBX_SHA256_LEN];
    char hex[SBX_SHA256_HEX_LEN + 1];
    if (sbx_sha256(s, n - tail, d, NULL) < 0)
        return 0;
    sbx_hex(d, sizeof(d), hex);
    return memcmp(hex, s + n - tail + 7, SBX_SHA256_HEX_LEN) == 0 ? n - tail : 0;
}

/* Parse the entries of one index into p (pack slot k). A reason when it is damaged. */
static char *parse_idx(struct snap_packs *p, uint32_t k, const char *s, size_t n)
{
    size_t len = idx_checked_len(s, n);
    if (!len)
        return sbx_xstrdup("its index is torn or was edited (checksum mismatch)");
    const char *nl = memchr(s, '\n', len);
    unsigned long long count = 0, bytes = 0;
    char head[96];
    size_t hl = nl ? (size_t)(nl - s) : 0;
    if (!nl || hl >= sizeof(head))
        return sbx_xstrdup("its index has no header");
    memcpy(head, s, hl);
    head[hl] = 0;
    if (sscanf(head, IDX_MAGIC " %llu %llu", &count, &bytes) != 2)
        return sbx_xstrdup("its index has an unknown header");
    p->packs[k].size = bytes;
    const char *c = nl + 1, *end = s + len;
    size_t seen = 0;
    uint8_t prev[SBX_SHA256_LEN] = {0};
    while (c < end) {
        const char *e = memchr(c, '\n', (size_t)(end - c));
        uint8_t d[SBX_SHA256_LEN];
        uint64_t off = 0, size = 0;
        if (!e || parse_line(c, (size_t)(e - c), d, &off, &size) < 0 || off < PACK_MAGIC_LEN ||
            off > bytes || size > bytes - off || (seen && memcmp(prev, d, sizeof(d)) >= 0))
            return sbx_xasprintf("its index line %zu is not valid", seen + 2);
        memcpy(prev, d, sizeof(d));
        add_ent(p, d, k, off, size);
        seen++;
        c = e + 1;
    }
    if (seen != count)
        return sbx_xasprintf("its index lists %zu blobs, its header says %llu", seen, count);
    return NULL;
}

/* Load pack id into p: its index parsed, its file's size checked against it. A damaged pack is
 * kept with the reason (its blobs count as missing) so that errors can name it. */
static void load_pack(struct sbx_snapshot_store *st, struct snap_packs *p, const char *id)
{
    SBX_ALLOC_GROW(p->packs, p->npacks + 1, p->cap_packs);
    uint32_t k = (uint32_t)p->npacks++;
    struct pack *pk = &p->packs[k];
    memset(pk, 0, sizeof(*pk));
    memcpy(pk->id, id, ID_HEX + 1);
    pk->fd = -1;
    char name[ID_HEX + 8];
    snprintf(name, sizeof(name), "%s.idx", id);
    struct sbx_buf b;
    sbx_buf_init(&b, IDX_MAX);
    struct sbx_error e = SBX_ERROR_INIT;
    size_t first = p->nents;
    if (sbx_fs_read(st->packs_fd, name, IDX_MAX, &b, &e) < 0)
        pk->damage = sbx_xasprintf("its index cannot be read: %s", e.msg);
    else
        pk->damage = parse_idx(p, k, b.data, b.len);
    sbx_buf_release(&b);
    struct stat sb;
    snprintf(name, sizeof(name), "%s.pack", id);
    if (!pk->damage && fstatat(st->packs_fd, name, &sb, AT_SYMLINK_NOFOLLOW) < 0)
        pk->damage = sbx_xasprintf("it cannot be read: %s", strerror(errno));
    else if (!pk->damage && (uint64_t)sb.st_size < pk->size)
        pk->damage = sbx_xasprintf("it is torn: %llu bytes of the %llu its index names",
                                   (unsigned long long)sb.st_size, (unsigned long long)pk->size);
    if (pk->damage) {
        for (size_t i = first; i < p->nents; i++)
            p->ents[i].pack = GONE;
        tab_rebuild(p);
    }
}

/* Bring the in-memory index up to the directory: new packs loaded; when one went (a
 * collection by another process), everything reloaded. Caller holds p->mu. */
static void refresh(struct sbx_snapshot_store *st, struct snap_packs *p)
{
    if (!p->stale)
        return;
    struct sbx_strv ids;
    sbx_strv_init(&ids);
    if (list_ids(st, &ids, NULL) < 0) {
        sbx_strv_release(&ids);
        return;
    }
    /* a damaged pack is read again each time: it may have been mended */
    int gone = 0;
    for (size_t i = 0; i < p->npacks && !gone; i++) {
        gone = 1;
        if (p->packs[i].damage)
            break;
        for (size_t j = 0; j < ids.n && gone; j++)
            gone = strcmp(ids.v[j], p->packs[i].id) != 0;
    }
    if (gone)
        drop_all(p);
    for (size_t j = 0; j < ids.n; j++) {
        int have = 0;
        for (size_t i = 0; i < p->npacks && !have; i++)
            have = strcmp(ids.v[j], p->packs[i].id) == 0;
        if (!have)
            load_pack(st, p, ids.v[j]);
    }
    sbx_strv_release(&ids);
    p->stale = 0;
}

int sbx__snap_pack_find(struct sbx_snapshot_store *st, const char *hex, uint64_t size)
{
    uint8_t d[SBX_SHA256_LEN];
    if (unhex(hex, SBX_SHA256_LEN, d) < 0)
        return 0;
    struct snap_packs *p = st->packs;
    pthread_mutex_lock(&p->mu);
    refresh(st, p);
    struct pack_ent *e = tab_find(p, d);
    int found = e && e->size == size;
    pthread_mutex_unlock(&p->mu);
    return found;
}

static int flush_pend(struct snap_packs *p, struct sbx_error *err)
{
    int rc = p->buflen ? sbx_fd_write_all(p->pend_fd, p->buf, p->buflen, err) : 0;
    p->buflen = 0;
    return rc;
}

static int begin_pend(struct sbx_snapshot_store *st, struct snap_packs *p, struct sbx_error *err)
{
    char id[ID_HEX + 1];
    int rc = sbx_random_hex(id, ID_HEX / 2, err);
    if (rc < 0)
        return rc;
    snprintf(p->pend_name, sizeof(p->pend_name), "%s.pack", id);
    p->pend_fd = openat(st->tmp_fd, p->pend_name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0400);
    if (p->pend_fd < 0)
        return sbx_error_errno(err, errno, "cannot create a pack in '%s'", st->path);
    if (!p->buf)
        p->buf = sbx_xmalloc(PEND_BUF);
    memcpy(p->buf, PACK_MAGIC, PACK_MAGIC_LEN);
    p->buflen = PACK_MAGIC_LEN;
    p->pend_size = PACK_MAGIC_LEN;
    p->pend_count = 0;
    return 0;
}

/* Append data to the pack being written (its digest d), under p->mu. */
static int pend_append(struct sbx_snapshot_store *st, struct snap_packs *p, const uint8_t *d,
                       const void *data, size_t n, struct sbx_error *err)
{
    int rc = 0;
    if (p->pend_fd < 0 && (rc = begin_pend(st, p, err)) < 0)
        return rc;
    if (p->buflen + n > PEND_BUF && (rc = flush_pend(p, err)) < 0)
        return rc;
    if (n > PEND_BUF)
        rc = sbx_fd_write_all(p->pend_fd, data, n, err);
    else
        memcpy(p->buf + p->buflen, data, n), p->buflen += n;
    if (rc < 0)
        return rc;
    add_ent(p, d, PEND, p->pend_size, n);
    p->pend_size += n;
    p->pend_count++;
    return 0;
}

int sbx__snap_pack_add(struct sbx_snapshot_store *st, const char *hex, const void *data, size_t n,
                       int *created, struct sbx_error *err)
{
    uint8_t d[SBX_SHA256_LEN];
    if (unhex(hex, SBX_SHA256_LEN, d) < 0)
        return sbx_error_set(err, SBX_E_INVAL, 0, "'%.12s' is not a blob name", hex);
    struct snap_packs *p = st->packs;
    pthread_mutex_lock(&p->mu);
    refresh(st, p);
    struct pack_ent *e = tab_find(p, d);
    int rc = 0;
    *created = 0;
    if (!e || e->size != n) {
        rc = pend_append(st, p, d, data, n, err);
        *created = rc == 0;
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}

/* The text of the index of the pending pack: its entries sorted by digest. */
static int ent_cmp(const void *a, const void *b)
{
    return memcmp(((const struct pack_ent *)a)->d, ((const struct pack_ent *)b)->d, SBX_SHA256_LEN);
}

static char *pend_index(struct snap_packs *p, size_t *len)
{
    struct pack_ent *v = sbx_xcalloc(p->pend_count ? p->pend_count : 1, sizeof(*v));
    size_t n = 0;
    for (size_t i = 0; i < p->nents; i++) {
        if (p->ents[i].pack == PEND)
            v[n++] = p->ents[i];
    }
    qsort(v, n, sizeof(*v), ent_cmp);
    struct sbx_buf b;
    sbx_buf_init(&b, (size_t)-1);
    sbx_buf_addf(&b, NULL, IDX_MAGIC " %zu %llu\n", n, (unsigned long long)p->pend_size);
    for (size_t i = 0; i < n; i++) {
        char hex[SBX_SHA256_HEX_LEN + 1];
        sbx_hex(v[i].d, SBX_SHA256_LEN, hex);
        sbx_buf_addf(&b, NULL, "%s %llu %llu\n", hex, (unsigned long long)v[i].off,
                     (unsigned long long)v[i].size);
    }
    free(v);
    uint8_t d[SBX_SHA256_LEN];
    char hex[SBX_SHA256_HEX_LEN + 1];
    sbx_sha256(b.data, b.len, d, NULL);
    sbx_hex(d, sizeof(d), hex);
    sbx_buf_addf(&b, NULL, "sha256 %s\n", hex);
    return sbx_buf_detach(&b, len);
}

void sbx__snap_pack_abort(struct sbx_snapshot_store *st)
{
    struct snap_packs *p = st->packs;
    pthread_mutex_lock(&p->mu);
    if (p->pend_fd >= 0) {
        sbx_fd_close(&p->pend_fd);
        unlinkat(st->tmp_fd, p->pend_name, 0);
    }
    size_t keep = 0;
    for (size_t i = 0; i < p->nents; i++) {
        if (p->ents[i].pack != PEND)
            p->ents[keep++] = p->ents[i];
    }
    if (keep != p->nents) {
        p->nents = keep;
        tab_rebuild(p);
    }
    p->buflen = 0;
    p->pend_count = 0;
    pthread_mutex_unlock(&p->mu);
}

/* Write the index of the pending pack to tmp/, sync both, and move them into packs/: the pack
 * first, its index last, so an index always names a complete pack. */
static int commit_locked(struct sbx_snapshot_store *st, struct snap_packs *p, struct sbx_error *err)
{
    char id[ID_HEX + 1], pname[ID_HEX + 8], iname[ID_HEX + 8];
    memcpy(id, p->pend_name, ID_HEX);
    id[ID_HEX] = 0;
    snprintf(pname, sizeof(pname), "%s.pack", id);
    snprintf(iname, sizeof(iname), "%s.idx", id);
    size_t ilen = 0;
    char *itext = NULL;
    int rc = flush_pend(p, err), ifd = -1;
    if (rc == 0) {
        itext = pend_index(p, &ilen);
        ifd = openat(st->tmp_fd, iname, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0400);
        if (ifd < 0)
            rc = sbx_error_errno(err, errno, "cannot create a pack index in '%s'", st->path);
    }
    if (rc == 0)
        rc = sbx_fd_write_all(ifd, itext, ilen, err);
    /* Both written before either is synced, and the writeback of both started (a hint; errors
     * show at the fsyncs): the pack's fsync then commits the index's blocks in the same
     * journal transaction, and the index's fsync only waits for its data. Neither name exists
     * before both are synced, as before. */
    if (rc == 0) {
        sync_file_range(p->pend_fd, 0, 0, SYNC_FILE_RANGE_WRITE);
        sync_file_range(ifd, 0, 0, SYNC_FILE_RANGE_WRITE);
    }
    if (rc == 0 && fsync(p->pend_fd) < 0)
        rc = sbx_error_errno(err, errno, "cannot sync a pack of '%s'", st->path);
    if (rc == 0 && fsync(ifd) < 0)
        rc = sbx_error_errno(err, errno, "cannot sync a pack index of '%s'", st->path);
    sbx_fd_close(&ifd);
    free(itext);
    if (rc == 0 && renameat2(st->tmp_fd, pname, st->packs_fd, pname, RENAME_NOREPLACE) < 0)
        rc = sbx_error_errno(err, errno, "cannot store pack '%s'", id);
    if (rc == 0 && renameat2(st->tmp_fd, iname, st->packs_fd, iname, RENAME_NOREPLACE) < 0) {
        rc = sbx_error_errno(err, errno, "cannot store pack '%s'", id);
        unlinkat(st->packs_fd, pname, 0);
    }
    if (rc == 0 && fsync(st->packs_fd) < 0)
        rc = sbx_error_errno(err, errno, "cannot sync the packs of '%s'", st->path);
    if (rc < 0) {
        unlinkat(st->tmp_fd, iname, 0);
        return rc;
    }
    /* the pending entries now belong to the new pack, read through its file */
    SBX_ALLOC_GROW(p->packs, p->npacks + 1, p->cap_packs);
    struct pack *pk = &p->packs[p->npacks];
    memset(pk, 0, sizeof(*pk));
    memcpy(pk->id, id, ID_HEX + 1);
    pk->fd = p->pend_fd;
    pk->size = p->pend_size;
    p->nopen++;
    p->pend_fd = -1;
    for (size_t i = 0; i < p->nents; i++) {
        if (p->ents[i].pack == PEND)
            p->ents[i].pack = (uint32_t)p->npacks;
    }
    p->npacks++;
    p->pend_count = 0;
    return 0;
}

int sbx__snap_pack_commit(struct sbx_snapshot_store *st, struct sbx_error *err)
{
    struct snap_packs *p = st->packs;
    pthread_mutex_lock(&p->mu);
    int rc = p->pend_fd >= 0 ? commit_locked(st, p, err) : 0;
    pthread_mutex_unlock(&p->mu);
    if (rc < 0)
        sbx__snap_pack_abort(st);
    return rc;
}

/* The fd of pack k, opened on first use (at most OPEN_MAX at once). Caller holds p->mu. */
static int pack_fd(struct sbx_snapshot_store *st, struct snap_packs *p, uint32_t k,
                   struct sbx_error *err)
{
    if (k == PEND)
        return flush_pend(p, err) < 0 ? -1 : p->pend_fd;
    struct pack *pk = &p->packs[k];
    if (pk->fd >= 0)
        return pk->fd;
    if (p->nopen >= OPEN_MAX) {
        for (size_t i = 0; i < p->npacks; i++)
            sbx_fd_close(&p->packs[i].fd);
        p->nopen = 0;
    }
    char name[ID_HEX + 8];
    snprintf(name, sizeof(name), "%s.pack", pk->id);
    pk->fd = openat(st->packs_fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (pk->fd < 0) {
        sbx_error_errno(err, errno, "cannot open pack '%s'", pk->id);
        return -1;
    }
    p->nopen++;
    return pk->fd;
}

/* Pack k turned out shorter than its index says while in use: its blobs count as missing from
 * now on, so that the next take writes them again. */
static void mark_torn(struct snap_packs *p, uint32_t k)
{
    if (!p->packs[k].damage)
        p->packs[k].damage = sbx_xstrdup("it is torn: it ends before a blob its index names");
    for (size_t i = 0; i < p->nents; i++) {
        if (p->ents[i].pack == k)
            p->ents[i].pack = GONE;
    }
    tab_rebuild(p);
}

/* Read entry e whole into a new buffer and check it against its digest. Caller holds p->mu. */
static int read_ent(struct sbx_snapshot_store *st, struct snap_packs *p, const struct pack_ent *e,
                    char **out, struct sbx_error *err)
{
    char hex[SBX_SHA256_HEX_LEN + 1];
    sbx_hex(e->d, SBX_SHA256_LEN, hex);
    int fd = pack_fd(st, p, e->pack, err);
    if (fd < 0)
        return -SBX_E_IO;
    char *buf = sbx_xmalloc(e->size ? (size_t)e->size : 1);
    size_t got = 0;
    while (got < e->size) {
        ssize_t r = pread(fd, buf + got, (size_t)e->size - got, (off_t)(e->off + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            free(buf);
            if (r == 0 && e->pack != PEND)
                mark_torn(p, e->pack);
            if (r == 0)
                return sbx_error_set(err, SBX_E_IO, 0, "blob '%.12s' is torn (its pack ends early)",
                                     hex);
            return sbx_error_errno(err, errno, "cannot read blob '%.12s'", hex);
        }
        got += (size_t)r;
    }
    uint8_t d[SBX_SHA256_LEN];
    int rc = sbx_sha256(buf, got, d, err);
    if (rc == 0 && memcmp(d, e->d, SBX_SHA256_LEN) != 0)
        rc = sbx_error_set(err, SBX_E_IO, 0, "blob '%.12s' is corrupt", hex);
    if (rc < 0) {
        free(buf);
        return rc;
    }
    *out = buf;
    return 0;
}

int sbx__snap_pack_read(struct sbx_snapshot_store *st, const char *hex, uint64_t size, char **out,
                        struct sbx_error *err)
{
    uint8_t d[SBX_SHA256_LEN];
    if (unhex(hex, SBX_SHA256_LEN, d) < 0)
        return 0;
    struct snap_packs *p = st->packs;
    pthread_mutex_lock(&p->mu);
    refresh(st, p);
    struct pack_ent *e = tab_find(p, d);
    int rc = 0;
    if (e && e->size != size)
        rc = sbx_error_set(err, SBX_E_IO, 0, "blob '%.12s' has %llu bytes, its entry %llu", hex,
                           (unsigned long long)e->size, (unsigned long long)size);
    else if (e && (rc = read_ent(st, p, e, out, err)) == 0)
        rc = 1;
    pthread_mutex_unlock(&p->mu);
    return rc;
}

void sbx__snap_pack_damage(struct sbx_snapshot_store *st, struct sbx_error *err)
{
    struct snap_packs *p = st->packs;
    if (!err)
        return;
    pthread_mutex_lock(&p->mu);
    for (size_t i = 0; i < p->npacks; i++) {
        if (!p->packs[i].damage)
            continue;
        size_t len = strlen(err->msg);
        snprintf(err->msg + len, sizeof(err->msg) - len, " (pack '%s' of the store is damaged: %s)",
                 p->packs[i].id, p->packs[i].damage);
        break;
    }
    pthread_mutex_unlock(&p->mu);
}

static int used_has(const struct sbx_strv *used, const char *hex)
{
    size_t lo = 0, hi = used->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(used->v[mid], hex);
        if (!c)
            return 1;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return 0;
}

static void unlink_pack(struct sbx_snapshot_store *st, const char *id)
{
    char name[ID_HEX + 8];
    snprintf(name, sizeof(name), "%s.idx", id);
    unlinkat(st->packs_fd, name, 0);
    snprintf(name, sizeof(name), "%s.pack", id);
    unlinkat(st->packs_fd, name, 0);
}

/* Pack files with no index (a crash between the two renames of a commit). */
static void remove_orphans(struct sbx_snapshot_store *st, struct snap_packs *p,
                           struct sbx_snapshot_gc_stats *gs)
{
    int dfd = dup(st->packs_fd);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!d) {
        sbx_fd_close(&dfd);
        return;
    }
    rewinddir(d);
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l != ID_HEX + 5 || strcmp(de->d_name + ID_HEX, ".pack") != 0)
            continue;
        int have = 0;
        for (size_t i = 0; i < p->npacks && !have; i++)
            have = memcmp(p->packs[i].id, de->d_name, ID_HEX) == 0;
        struct stat sb;
        if (!have && fstatat(dirfd(d), de->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
            unlinkat(dirfd(d), de->d_name, 0) == 0) {
            gs->temps++;
            gs->temp_bytes += (uint64_t)sb.st_blocks * 512;
        }
    }
    closedir(d);
}

/* Copy the entries of pack k that a tree uses (and that are the copy found: a blob may be in
 * two packs) into the pending pack, counting the others into gs. Then k's entries go. */
static int copy_live(struct sbx_snapshot_store *st, struct snap_packs *p, uint32_t k,
                     const struct sbx_strv *used, struct sbx_snapshot_gc_stats *gs,
                     struct sbx_error *err)
{
    int rc = 0;
    size_t n = p->nents; /* the copies appended below are not looked at */
    for (size_t i = 0; rc == 0 && i < n; i++) {
        struct pack_ent e = p->ents[i];
        if (e.pack != k)
            continue;
        char hex[SBX_SHA256_HEX_LEN + 1];
        sbx_hex(e.d, SBX_SHA256_LEN, hex);
        if (!used_has(used, hex) || tab_find(p, e.d) != &p->ents[i]) {
            gs->blobs++;
            gs->blob_bytes += e.size;
            continue;
        }
        char *data = NULL;
        rc = read_ent(st, p, &e, &data, err);
        if (rc == 0)
            rc = pend_append(st, p, e.d, data, (size_t)e.size, err);
        free(data);
    }
    for (size_t i = 0; i < n; i++) {
        if (p->ents[i].pack == k)
            p->ents[i].pack = GONE;
    }
    tab_rebuild(p);
    return rc;
}

/* How many entries of pack k no tree uses. */
static size_t dead_in(struct snap_packs *p, uint32_t k, const struct sbx_strv *used)
{
    size_t dead = 0;
    for (size_t i = 0; i < p->nents; i++) {
        if (p->ents[i].pack != k)
            continue;
        char hex[SBX_SHA256_HEX_LEN + 1];
        sbx_hex(p->ents[i].d, SBX_SHA256_LEN, hex);
        dead += !used_has(used, hex) || tab_find(p, p->ents[i].d) != &p->ents[i];
    }
    return dead;
}

int sbx__snap_packs_collect(struct sbx_snapshot_store *st, const struct sbx_strv *used,
                            struct sbx_snapshot_gc_stats *gs, struct sbx_error *err)
{
    struct snap_packs *p = st->packs;
    pthread_mutex_lock(&p->mu);
    p->stale = 1;
    refresh(st, p);
    remove_orphans(st, p, gs);
    struct sbx_strv old;
    sbx_strv_init(&old);
    int rc = 0;
    for (uint32_t k = 0; rc == 0 && k < p->npacks; k++) {
        /* a damaged pack is left as it is: its blobs may be someone's only copy */
        if (p->packs[k].damage || !dead_in(p, k, used))
            continue;
        rc = copy_live(st, p, k, used, gs, err);
        sbx_strv_push(&old, p->packs[k].id);
    }
    if (rc == 0 && p->pend_fd >= 0)
        rc = commit_locked(st, p, err);
    pthread_mutex_unlock(&p->mu);
    if (rc < 0) {
        sbx__snap_pack_abort(st);
    } else {
        for (size_t i = 0; i < old.n; i++)
            unlink_pack(st, old.v[i]);
        if (old.n)
            fsync(st->packs_fd);
    }
    sbx_strv_release(&old);
    sbx__snap_packs_stale(st);
    pthread_mutex_lock(&p->mu);
    drop_all(p);
    pthread_mutex_unlock(&p->mu);
    return rc;
}

uint64_t sbx__snap_packs_bytes(struct sbx_snapshot_store *st)
{
    uint64_t sum = 0;
    int dfd = dup(st->packs_fd);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!d) {
        sbx_fd_close(&dfd);
        return 0;
    }
    rewinddir(d);
    struct dirent *de;
    struct stat sb;
    while ((de = readdir(d))) {
        if (de->d_name[0] != '.' && fstatat(dirfd(d), de->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0)
            sum += (uint64_t)sb.st_blocks * 512;
    }
    closedir(d);
    return sum;
}
