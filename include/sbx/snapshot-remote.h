/* sbx: snapshot stores in a bucket (S3 or an S3-compatible server, GCS through its
 * S3-compatible XML API with HMAC keys, Azure Blob storage).
 *
 * A remote store has the local store's layout (docs/internals/snapshots.md, "Remote stores"):
 * blobs by their sha256, tree documents by their reference, plus a small header object per
 * snapshot that is written last, once everything it names is in the bucket. Push uploads only
 * the blobs the bucket lacks (asked with HEAD); pull downloads only the blobs the local store
 * lacks and checks each against its digest before it enters the store. Transfers run in
 * parallel, at most SBX_SNAPSHOT_REMOTE_JOBS at a time. Every call blocks on the network.
 *
 * A store is named by a URL: s3://BUCKET[/PREFIX], gs://BUCKET[/PREFIX] or
 * azure://ACCOUNT/CONTAINER[/PREFIX], with optional query parameters endpoint=URL, region=R
 * and, for the credentials, the names of environment variables holding them (key_env=VAR,
 * secret_env=VAR, token_env=VAR, sas_env=VAR). A URL never holds a credential: it may be
 * saved, printed and traced. */
#ifndef SBX_SNAPSHOT_REMOTE_H
#define SBX_SNAPSHOT_REMOTE_H

#include <stdint.h>
#include <jansson.h>

#include "common.h"
#include "error.h"
#include "progress.h"
#include "snapshot.h"

/* Parallel transfers of one push or pull. */
#define SBX_SNAPSHOT_REMOTE_JOBS 4

struct sbx_snapshot_remote; /* opaque */

/* 1 when s names a remote store (s3://, gs:// or azure://), else 0 (a directory). */
SBX_API int sbx_snapshot_remote_is_url(const char *s);

/* Parse url and read the credentials it refers to from the environment (each variable read
 * once, here). Nothing is contacted. *out: caller owns (sbx_snapshot_remote_free).
 * Errors: SBX_E_INVAL naming what is wrong with the URL or the variable that is missing. */
SBX_API int sbx_snapshot_remote_open(const char *url, struct sbx_snapshot_remote **out,
                                     struct sbx_error *err);
/* Accepts NULL. Wipes the credentials. */
SBX_API void sbx_snapshot_remote_free(struct sbx_snapshot_remote *r);
/* The store as the user named it, without the query: for messages. Borrowed. */
SBX_API const char *sbx_snapshot_remote_name(const struct sbx_snapshot_remote *r);

struct sbx_snapshot_transfer_stats {
    uint64_t blobs;      /* distinct blobs the snapshot names */
    uint64_t sent;       /* blobs uploaded (push) or downloaded (pull) */
    uint64_t sent_bytes; /* their bytes */
    uint64_t present;    /* blobs the other side had already */
};

/* How a push or pull reports. An all-zero struct (or NULL) is the default: nothing reported. */
struct sbx_snapshot_transfer_opts {
    /* Progress (step "push" or "pull", done/total blobs, what = the blob's digest), called on
     * the transfer threads one at a time: NULL: none. */
    sbx_progress_fn *progress;
    void *progress_data;
    struct sbx_snapshot_transfer_stats *out_stats; /* NULL, or filled in on success */
};

/* Upload snapshot ref (full or prefix, from the local store st) to r: the blobs the bucket
 * lacks, then the tree document, then its header. A failure at any point leaves no header
 * naming a missing blob. *out_ref (may be NULL): the full reference, caller owns (free).
 * o may be NULL. Errors: those of the local store, SBX_E_PERM (access denied: the
 * credentials), SBX_E_NOTFOUND (no such bucket or container), SBX_E_HTTP (the network),
 * SBX_E_API (another answer of the server), SBX_E_TOOBIG (a blob over 5 GiB). */
SBX_API int sbx_snapshot_push(struct sbx_snapshot_store *st, struct sbx_snapshot_remote *r,
                              const char *ref, char **out_ref,
                              const struct sbx_snapshot_transfer_opts *o, struct sbx_error *err);

/* Download snapshot ref (full, or a prefix of at least 12 hex resolved among the store's
 * snapshots) from r into st: the tree document is validated as a restore does, every blob is
 * checked against its digest and size (a blob that does not match is SBX_E_IO "blob 'HEX' in
 * 'URL' is corrupt ..."; a missing one SBX_E_NOTFOUND), and the tree enters the local store
 * only when all its blobs are there. On failure the blobs this pull added are removed.
 * *out_ref (may be NULL): caller owns. o may be NULL. */
SBX_API int sbx_snapshot_pull(struct sbx_snapshot_store *st, struct sbx_snapshot_remote *r,
                              const char *ref, char **out_ref,
                              const struct sbx_snapshot_transfer_opts *o, struct sbx_error *err);

/* The snapshots of r: an array of headers (as sbx_snapshot_list, without "holds"), sorted by
 * "created". *out: caller owns (json_decref). */
SBX_API int sbx_snapshot_remote_list(struct sbx_snapshot_remote *r, json_t **out,
                                     struct sbx_error *err);

#endif
