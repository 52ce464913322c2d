/* Internal parts of the snapshot store shared by snapshot-store.c (store, trees, blobs, refs),
 * snapshot-take.c, snapshot-restore.c and snapshot-archive.c (import and export). */
#ifndef SBX_SANDBOX_SNAPSHOT_INTERNAL_H
#define SBX_SANDBOX_SNAPSHOT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include <pthread.h>

#include "sbx/buf.h"
#include "sbx/hash.h"
#include "sbx/snapshot.h"

struct snap_packs;
struct sbx_strv;

struct sbx_snapshot_store {
    char *path;
    int dirfd, lockfd, blobs_fd, trees_fd, holds_fd, cache_fd, tmp_fd, packs_fd;
    struct snap_packs *packs; /* pack.c: the indexes read, the pack being written */
    pthread_mutex_t mu;       /* dirty, loose */
    uint8_t dirty[257];       /* blobs/xx directories (and blobs/ itself, 256) to sync */
    /* which blobs/xx directories exist (read again after each lock): a blob whose directory
     * does not exist is looked up in the packs alone, with no system call */
    uint8_t loose[256];
    int loose_stale;
};

enum snap_type { SNAP_DIR = 1, SNAP_FILE, SNAP_SYMLINK };

struct snap_entry {
    char *path; /* normalised, relative, never "" */
    enum snap_type type;
    uint32_t mode;                    /* & 0777 */
    uint64_t size;                    /* files */
    char sha[SBX_SHA256_HEX_LEN + 1]; /* files */
    char *target;                     /* symlinks */
};

struct snap_tree {
    struct snap_entry *v;
    size_t n, cap;
};

/* The default of each zero field of lim (may be NULL) filled in. */
void sbx__snap_limits(const struct sbx_snapshot_limits *lim, struct sbx_snapshot_limits *out);

int sbx__snap_lock(struct sbx_snapshot_store *st, int exclusive, struct sbx_error *err);
void sbx__snap_unlock(struct sbx_snapshot_store *st);

void sbx__snap_tree_release(struct snap_tree *t);
/* Appends an entry; takes path and target (may be NULL). Returns it. */
struct snap_entry *sbx__snap_tree_add(struct snap_tree *t, char *path, enum snap_type type,
                                      uint32_t mode);
void sbx__snap_tree_sort(struct snap_tree *t);
/* Index of path in a sorted tree, or -1. */
long sbx__snap_tree_find(const struct snap_tree *t, const char *path);

/* A symlink target that stays inside the workspace from a link at path: relative, and any ".."
 * only leading and never above the root. 0 or SBX_E_PERM naming the link. */
int sbx__snap_check_target(const char *path, const char *target, struct sbx_error *err);

/* Check a sorted tree fully (as a tampered store or an archive may have left it): paths
 * normalised within the limits, unique, every parent an explicit directory, modes, hashes,
 * targets. SBX_E_PARSE naming the entry. */
int sbx__snap_tree_validate(const struct snap_tree *t, const struct sbx_snapshot_limits *lim,
                            struct sbx_error *err);

/* Write the tree (sorted and validated here) into the store with a header built from the
 * other arguments (each may be NULL / 0); *out_ref: "sha256:<hex>", caller owns. An existing
 * tree of the same content is kept as it is. */
int sbx__snap_tree_commit(struct sbx_snapshot_store *st, struct snap_tree *t,
                          const char *manifest_digest, const char *label, json_t *skipped,
                          char **out_ref, struct sbx_error *err);

/* A tree document written to a temp file of the store, not yet synced nor named. */
struct snap_tree_file {
    int fd; /* -1: none */
    char tmp[24];
    char name[SBX_SHA256_HEX_LEN + 8];
    char *ref; /* "sha256:<hex>", caller owns */
};
/* The first half of sbx__snap_tree_commit: the document is written to a temp file and its
 * writeback started, so that it rides in the journal commit of the blobs' sync (see
 * docs/internals/snapshots.md, Durability). On failure nothing is left. */
int sbx__snap_tree_stage(struct sbx_snapshot_store *st, struct snap_tree *t,
                         const char *manifest_digest, const char *label, json_t *skipped,
                         struct snap_tree_file *tf, struct sbx_error *err);
/* The second half: the temp file synced, renamed to trees/<hex>.json (an existing one is kept)
 * and trees/ synced. Call it only after the blobs the tree names are durable. tf's file is
 * gone after it either way; tf->ref stays the caller's. */
int sbx__snap_tree_publish(struct sbx_snapshot_store *st, struct snap_tree_file *tf,
                           struct sbx_error *err);
/* Drop a staged tree's temp file (a take that failed between stage and publish). */
void sbx__snap_tree_unstage(struct sbx_snapshot_store *st, struct snap_tree_file *tf);

/* The compact, key-sorted JSON text of the entries of a sorted tree, as jansson writes it (the
 * reference is its digest), appended to b. */
void sbx__snap_entries_text(const struct snap_tree *t, struct sbx_buf *b);

/* Resolve a full or prefix reference among the store's trees into hex (65 bytes). */
int sbx__snap_resolve_ref(struct sbx_snapshot_store *st, const char *ref,
                          char hex[SBX_SHA256_HEX_LEN + 1], struct sbx_error *err);
/* Parse and validate a tree document data[0..len) that should be the tree of hex (its entries
 * must hash to it); *out_header (may be NULL): caller owns. SBX_E_PARSE naming the snapshot. */
int sbx__snap_tree_parse(const char *data, size_t len, const char *hex, struct snap_tree *t,
                         json_t **out_header, struct sbx_error *err);
/* The bytes of the tree document of hex, read into out (initialised here; released on
 * failure). */
int sbx__snap_tree_read_doc(struct sbx_snapshot_store *st, const char *hex, struct sbx_buf *out,
                            struct sbx_error *err);
/* Store data[0..len) as the tree document of hex (already validated by the caller with
 * sbx__snap_tree_parse); an existing one is kept. */
int sbx__snap_tree_store_doc(struct sbx_snapshot_store *st, const char *hex, const void *data,
                             size_t len, struct sbx_error *err);
/* Load and validate the tree of hex; *out_header (may be NULL): caller owns. */
int sbx__snap_tree_load(struct sbx_snapshot_store *st, const char *hex, struct snap_tree *t,
                        json_t **out_header, struct sbx_error *err);

/* Blobs up to this size with no whole 4 KiB block of zeros go into pack files; others are
 * files of their own (blobs/xx/<hex>, sparse). */
#define SNAP_PACK_BLOB_MAX ((size_t)1 << 18)

typedef int (*snap_sink_fn)(void *ctx, const void *p, size_t n, struct sbx_error *err);

/* A blob being written, hashed as it is filled: held in memory while it may go into a pack,
 * else a temp file in the store's tmp/. */
struct snap_blob_writer {
    struct sbx_snapshot_store *st;
    char *mem; /* SNAP_PACK_BLOB_MAX bytes while fd < 0 */
    int fd;
    char tmpname[48];
    struct sbx_sha256 *h;
    uint64_t size;
    int tail_hole; /* the last bytes were skipped, not written: the file needs its length set */
};
int sbx__snap_blob_begin(struct sbx_snapshot_store *st, struct snap_blob_writer *w,
                         struct sbx_error *err);
int sbx__snap_blob_write(struct snap_blob_writer *w, const void *p, size_t n,
                         struct sbx_error *err);
/* A run of n zero bytes, kept as a hole. */
int sbx__snap_blob_hole(struct snap_blob_writer *w, uint64_t n, struct sbx_error *err);
/* Finish: the temp becomes blobs/xx/<hex> (read-only). *created: 1 when this call added the
 * blob, 0 when the store had it already. The writer is released either way. */
int sbx__snap_blob_finish(struct sbx_snapshot_store *st, struct snap_blob_writer *w,
                          char hex[SBX_SHA256_HEX_LEN + 1], int *created, struct sbx_error *err);
/* The same, refusing (SBX_E_IO "its content hashes to 'x'", the temp removed) content whose
 * digest is not expect (NULL: any). */
int sbx__snap_blob_finish_expect(struct sbx_snapshot_store *st, struct snap_blob_writer *w,
                                 const char *expect, char hex[SBX_SHA256_HEX_LEN + 1], int *created,
                                 struct sbx_error *err);
void sbx__snap_blob_abort(struct sbx_snapshot_store *st, struct snap_blob_writer *w);
/* Store data[0..n) whose digest is hex (computed by the caller): into the pack being written
 * when it fits one, else as a file. *created as for sbx__snap_blob_finish. */
int sbx__snap_blob_put(struct sbx_snapshot_store *st, const char *hex, const void *data, size_t n,
                       int *created, struct sbx_error *err);
/* Blob hex of the given size for reading: *out_data (packed: read whole and checked against its
 * digest, caller frees) or *out_fd (its own file, opened read-only, checked as it is copied;
 * caller closes); the other is NULL / -1. A blob that is in neither is SBX_E_NOTFOUND. */
int sbx__snap_blob_get(struct sbx_snapshot_store *st, const char *hex, uint64_t size,
                       char **out_data, int *out_fd, struct sbx_error *err);
/* Blob hex copied to out or sink as sbx__snap_blob_copy does, wherever the store keeps it. */
int sbx__snap_blob_send(struct sbx_snapshot_store *st, const char *hex, uint64_t size, int out,
                        snap_sink_fn sink, void *ctx, struct sbx_error *err);
/* The store has blob hex of that size. A blob renamed into place but torn by a crash before the
 * store was synced has the wrong size (usually 0): it counts as missing and is replaced. */
int sbx__snap_blob_exists(struct sbx_snapshot_store *st, const char *hex, uint64_t size);
void sbx__snap_blob_unlink(struct sbx_snapshot_store *st, const char *hex);
/* Collection (sbx_snapshot_gc) if the exclusive lock is free at once (after a failed take):
 * 0 done (*out: what it removed), -1 the lock is held or the collection failed. */
int sbx__snap_gc_try(struct sbx_snapshot_store *st, struct sbx_snapshot_gc_stats *out);
/* How many snapshots the store holds and the disk space its blobs take. */
int sbx__snap_usage(struct sbx_snapshot_store *st, uint64_t *trees, uint64_t *blob_bytes);
/* Make the store's new blobs durable before a tree names them: the pack being written is
 * synced and moved into packs/, and the blobs/ directories that gained a file are synced (each
 * blob file was synced before its rename). Not syncfs: only what this process wrote. */
int sbx__snap_sync(struct sbx_snapshot_store *st, struct sbx_error *err);
/* Drop what a failed take, import or pull added: the pack being written. */
void sbx__snap_discard(struct sbx_snapshot_store *st);

/* ---- the stat cache of incremental takes (statcache.c) ---- */

/* What a file's statx says that changes with any write or chmod. */
struct snap_stat_key {
    uint64_t dev, ino, size;
    int64_t mtime_ns, ctime_ns;
    uint32_t mode;
};
/* A cache read and checked whole: its bytes and a hash table of record offsets (+1; 0 empty),
 * with each record's flags (seen by this take, changed by it); the file's fd (read-write) while
 * data is set. */
struct snap_statcache {
    char *data;
    size_t len;
    size_t *slots;
    uint8_t *flags;
    size_t mask;
    uint64_t count;
    uint64_t seen, dirty; /* records seen and changed by this take */
    int fd;
};
/* Read name (at most max bytes) from dirfd and check it (magic, version, byte order, size,
 * checksum, every record within the file). 0 loaded; -1 missing, unreadable, damaged or of
 * another version: *c is empty, and every lookup misses. Never an error: the cache only saves
 * work. */
int sbx__statcache_load(int dirfd, const char *name, size_t max, struct snap_statcache *c);
/* The 64 hex digits (not terminated) recorded for path when its record matches k in full;
 * NULL otherwise. */
const char *sbx__statcache_find(const struct snap_statcache *c, const char *path, size_t len,
                                const struct snap_stat_key *k);
/* The same in two steps: the slot of path's record (-1: none), then its digits when the record
 * matches k (NULL for slot -1 or another stat). */
long sbx__statcache_slot(const struct snap_statcache *c, const char *path, size_t len);
const char *sbx__statcache_match(const struct snap_statcache *c, long slot,
                                 const struct snap_stat_key *k);
/* What the take found for the path of slot (>= 0): the record is marked seen, and updated in
 * memory when its stat or digest changed. */
void sbx__statcache_note(struct snap_statcache *c, long slot, const struct snap_stat_key *k,
                         const char sha[SBX_SHA256_HEX_LEN]);
/* Write the cache for the next take of the same source, from c (the loaded one, updated with
 * sbx__statcache_note; may be empty) and extra (built with sbx__statcache_writer_init and _add:
 * the files c had no record of). When c is loaded, every record was seen and extra has none,
 * only the changed records and the checksum are written over c's file (nothing when none
 * changed); otherwise a new file of the seen records and extra's, as sbx__statcache_write.
 * Not fsynced: a torn cache fails its checksum. */
int sbx__statcache_save(struct snap_statcache *c, int dirfd, const char *name,
                        struct sbx_buf *extra, struct sbx_error *err);
void sbx__statcache_release(struct snap_statcache *c);
/* A new cache is built in w (initialised here; the caller releases it), one record per file,
 * then written as name (temp file and rename; not fsynced: a torn one fails its checksum). */
void sbx__statcache_writer_init(struct sbx_buf *w);
void sbx__statcache_add(struct sbx_buf *w, const char *path, size_t len,
                        const struct snap_stat_key *k, const char sha[SBX_SHA256_HEX_LEN]);
int sbx__statcache_write(int dirfd, const char *name, struct sbx_buf *w, struct sbx_error *err);
/* The cache file's checksum of p[0..n) (its last 8 bytes hold that of all before them). */
uint64_t sbx__statcache_sum(const char *p, size_t n);

/* ---- pack files (pack.c) ---- */
int sbx__snap_packs_init(struct sbx_snapshot_store *st, struct sbx_error *err);
void sbx__snap_packs_free(struct sbx_snapshot_store *st);
/* Another process may have changed packs/: read it again before the next lookup. */
void sbx__snap_packs_stale(struct sbx_snapshot_store *st);
/* 1 when a pack (or the pack being written) has blob hex of that size. */
int sbx__snap_pack_find(struct sbx_snapshot_store *st, const char *hex, uint64_t size);
/* Append data (digest hex) to the pack being written unless a pack has it (*created 0). */
int sbx__snap_pack_add(struct sbx_snapshot_store *st, const char *hex, const void *data, size_t n,
                       int *created, struct sbx_error *err);
/* 1 and *out (caller frees, checked against hex) when a pack has blob hex; 0 when none has;
 * <0 when it cannot be read or is corrupt, torn or of another size. */
int sbx__snap_pack_read(struct sbx_snapshot_store *st, const char *hex, uint64_t size, char **out,
                        struct sbx_error *err);
int sbx__snap_pack_commit(struct sbx_snapshot_store *st, struct sbx_error *err);
void sbx__snap_pack_abort(struct sbx_snapshot_store *st);
/* Append to err's message why a damaged pack's blobs are missing, when one is. */
void sbx__snap_pack_damage(struct sbx_snapshot_store *st, struct sbx_error *err);
/* Collection of the packs (exclusive lock held): a pack with blobs no tree uses (used: sorted
 * hex) is rewritten with the others, an empty one removed, pack files without an index too. */
int sbx__snap_packs_collect(struct sbx_snapshot_store *st, const struct sbx_strv *used,
                            struct sbx_snapshot_gc_stats *gs, struct sbx_error *err);
/* Disk space of packs/. */
uint64_t sbx__snap_packs_bytes(struct sbx_snapshot_store *st);

/* Copy blob fd (at offset 0) of the given size and hash to out (holes kept where out can
 * seek; write_cb NULL) or to a callback, checking the bytes against hex. */
int sbx__snap_blob_copy(int blobfd, const char *hex, uint64_t size, int out, snap_sink_fn sink,
                        void *ctx, struct sbx_error *err);

#endif
