/* Internal parts of the snapshot store shared by snapshot-store.c (store, trees, blobs, refs),
 * snapshot-take.c, snapshot-restore.c and snapshot-archive.c (import and export). */
#ifndef SBX_SANDBOX_SNAPSHOT_INTERNAL_H
#define SBX_SANDBOX_SNAPSHOT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "sbx/buf.h"
#include "sbx/hash.h"
#include "sbx/snapshot.h"

struct sbx_snapshot_store {
    char *path;
    int dirfd, lockfd, blobs_fd, trees_fd, holds_fd, cache_fd, tmp_fd;
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

/* A blob being written: a temp file in the store's tmp/ hashed as it is filled. */
struct snap_blob_writer {
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
/* Open blob hex read-only; *out_fd: caller owns. */
int sbx__snap_blob_open(struct sbx_snapshot_store *st, const char *hex, int *out_fd,
                        struct sbx_error *err);
/* The store has blob hex of that size. A blob renamed into place but torn by a crash before the
 * store was synced has the wrong size (usually 0): it counts as missing and is replaced. */
int sbx__snap_blob_exists(struct sbx_snapshot_store *st, const char *hex, uint64_t size);
void sbx__snap_blob_unlink(struct sbx_snapshot_store *st, const char *hex);
/* Collection (sbx_snapshot_gc) if the exclusive lock is free at once (after a failed take):
 * 0 done (*out: what it removed), -1 the lock is held or the collection failed. */
int sbx__snap_gc_try(struct sbx_snapshot_store *st, struct sbx_snapshot_gc_stats *out);
/* How many snapshots the store holds and the disk space its blobs take. */
int sbx__snap_usage(struct sbx_snapshot_store *st, uint64_t *trees, uint64_t *blob_bytes);
/* Make the store's new files durable (one syncfs for all the blobs of a take or an import). */
int sbx__snap_sync(struct sbx_snapshot_store *st, struct sbx_error *err);

/* Copy blob fd (at offset 0) of the given size and hash to out (holes kept where out can
 * seek; write_cb NULL) or to a callback, checking the bytes against hex. */
typedef int (*snap_sink_fn)(void *ctx, const void *p, size_t n, struct sbx_error *err);
int sbx__snap_blob_copy(int blobfd, const char *hex, uint64_t size, int out, snap_sink_fn sink,
                        void *ctx, struct sbx_error *err);

#endif
