/* sbx: workspace snapshots in a local content-addressed store.
 *
 * A snapshot is the content of a workspace at a moment: directories, regular files and symlinks
 * that stay inside it, with their permission bits (masked to 0777: never setuid, setgid or
 * sticky). Device nodes, fifos, sockets, mount points, excluded paths and symlinks whose target
 * is absolute or climbs out are never in one (take skips and counts them in the header's
 * "skipped"). A hardlinked file is stored as a regular file.
 *
 * The store keeps file contents as blobs named by their sha256, and each snapshot as a small
 * JSON tree document (header + sorted entries) named by the sha256 of its canonical entry list:
 * its reference is "sha256:<64 hex>", so identical content gives the same reference and
 * snapshots share blobs. A tar archive (pax, zstd) is only an export/import format: import
 * treats it as hostile input and writes nothing but blobs and one tree document; restore always
 * goes from a validated tree in the store to an empty directory. docs/internals/snapshots.md
 * describes the format, the store layout, the limits and the threat model.
 *
 * Concurrency: take, import, export and restore hold the store's lock shared; remove holds it
 * exclusive. Every call blocks on file I/O (and on that lock). A snapshot is consistent per file
 * (each file is read once through one fd and its blob is exactly the bytes hashed), not across
 * files of a workspace that changes while it is taken. */
#ifndef SBX_SNAPSHOT_H
#define SBX_SNAPSHOT_H

#include <stdint.h>
#include <jansson.h>

#include "common.h"
#include "error.h"
#include "progress.h"

/* Version of the tree document and of the archive header ("format"). */
#define SBX_SNAPSHOT_FORMAT 1
/* Name of the header member, first in an exported archive. */
#define SBX_SNAPSHOT_HEADER_MEMBER ".sbx-snapshot.json"

struct sbx_snapshot_store; /* opaque */

/* Limits applied to an imported archive (and to a take). 0 in a field: its default. */
struct sbx_snapshot_limits {
    uint64_t max_entries;    /* members, default 1,000,000 */
    uint64_t max_bytes;      /* total file bytes, default 64 GiB */
    uint64_t max_file_bytes; /* one file, default = max_bytes */
    uint32_t max_ratio;      /* expanded / archive bytes, default 1000 (checked past 1 MiB) */
    uint32_t max_path;       /* bytes of a member path, default 4096 */
    uint32_t max_depth;      /* path components, default 128 */
};

#define SBX_SNAPSHOT_DEFAULT_MAX_ENTRIES 1000000
#define SBX_SNAPSHOT_DEFAULT_MAX_BYTES   ((uint64_t)64 << 30)
#define SBX_SNAPSHOT_DEFAULT_MAX_RATIO   1000
#define SBX_SNAPSHOT_DEFAULT_MAX_PATH    4096
#define SBX_SNAPSHOT_DEFAULT_MAX_DEPTH   128

/* What a take did, for benchmarks and tests of the incremental cache. */
struct sbx_snapshot_take_stats {
    uint64_t entries;    /* entries in the snapshot */
    uint64_t files;      /* regular files in the snapshot */
    uint64_t read_files; /* files whose content was read (the others came from the stat cache) */
    uint64_t read_bytes; /* bytes read from those files */
    uint64_t new_blobs;  /* blobs this take added to the store */
};

struct sbx_snapshot_take_opts {
    const char *source;          /* names the stat cache (sandbox id); NULL: no cache */
    const char *manifest_digest; /* "sha256:..." or NULL, recorded in the header */
    const char *const *exclude;  /* workspace-relative paths left out; NULL-terminated or NULL */
    const char *label;           /* free text recorded in the header (e.g. "stop of <id>") */
    const struct sbx_snapshot_limits *limits;  /* NULL: defaults (entries, bytes, depth) */
    struct sbx_snapshot_take_stats *out_stats; /* NULL, or filled in on success */
    /* Progress (step "snapshot", done = entries so far, what = the path): NULL: none. */
    sbx_progress_fn *progress;
    void *progress_data;
};

/* Open (creating it 0700 if missing) the store at path; path NULL: $SBX_SNAPSHOTS when set,
 * else ${XDG_STATE_HOME:-~/.local/state}/sbx/snapshots. *out: caller owns
 * (sbx_snapshot_store_free). Errors: SBX_E_INVAL (no usable path), SBX_E_SYS. */
SBX_API int sbx_snapshot_store_open(const char *path, struct sbx_snapshot_store **out,
                                    struct sbx_error *err);
/* Accepts NULL. */
SBX_API void sbx_snapshot_store_free(struct sbx_snapshot_store *st);
/* The store's directory; borrowed, valid until the store is freed. */
SBX_API const char *sbx_snapshot_store_path(const struct sbx_snapshot_store *st);

/* Snapshot the directory dirfd (borrowed; read through openat with O_NOFOLLOW, never leaving
 * it or its file system) into the store. o may be NULL. With o->source, files whose (dev, ino,
 * size, mtime, ctime, mode) match the source's stat cache, and whose ctime is more than 2 s
 * before the scan started, are neither read nor copied. *out_ref: "sha256:<hex>", caller owns
 * (free). Errors: SBX_E_TOOBIG (a limit), SBX_E_INVAL (an excluded path is not normalised),
 * SBX_E_SYS / SBX_E_IO. */
SBX_API int sbx_snapshot_take(struct sbx_snapshot_store *st, int dirfd,
                              const struct sbx_snapshot_take_opts *o, char **out_ref,
                              struct sbx_error *err);

/* Read a tar archive (zstd, gzip, xz, bzip2 or uncompressed; pax, ustar or GNU) from archive_fd
 * (borrowed, read to its end or to the error) as hostile input and add it to the store. lim may
 * be NULL for the defaults. Refused, with an error naming the member: names that are empty,
 * absolute or contain "..", duplicates (except dir + dir), members under a symlink or a
 * non-directory, hardlinks, devices, fifos, sockets, symlinks whose target is absolute or
 * escapes, a header member with another format version, and every limit exceeded. setuid,
 * setgid and sticky bits are dropped. On failure the store holds nothing new (blobs the import
 * wrote are removed). *out_ref: caller owns (free). Errors: SBX_E_PERM (a refused member),
 * SBX_E_TOOBIG (a limit), SBX_E_PARSE (corrupt or truncated archive, bad header),
 * SBX_E_UNSUPPORTED (format version). */
SBX_API int sbx_snapshot_import(struct sbx_snapshot_store *st, int archive_fd,
                                const struct sbx_snapshot_limits *lim, char **out_ref,
                                struct sbx_error *err);

/* Write the snapshot ref (full or prefix) to out_fd (borrowed) as a pax tar compressed with
 * zstd: first SBX_SNAPSHOT_HEADER_MEMBER, then "." and "./path" members in sorted order.
 * Streamed: memory does not grow with the files' size. Every blob is checked against its hash
 * while it is copied (SBX_E_IO "blob ... is corrupt"). */
SBX_API int sbx_snapshot_export(struct sbx_snapshot_store *st, const char *ref, int out_fd,
                                struct sbx_error *err);

/* Restore ref into dirfd (borrowed): an empty directory (the new workspace), else
 * SBX_E_EXISTS. The tree document is validated again (the store on disk may have been
 * tampered with: SBX_E_PARSE naming the entry) and every blob is checked against its hash.
 * Writes only beneath dirfd (openat2 RESOLVE_BENEATH, no symlink followed: symlinks are made
 * last); files keep holes; modes are masked with 0777. On failure removes what it made. */
SBX_API int sbx_snapshot_restore(struct sbx_snapshot_store *st, const char *ref, int dirfd,
                                 struct sbx_error *err);
/* The same, reporting its progress (step "restore", done/total entries); progress may be
 * NULL. */
SBX_API int sbx_snapshot_restore_progress(struct sbx_snapshot_store *st, const char *ref, int dirfd,
                                          sbx_progress_fn *progress, void *progress_data,
                                          struct sbx_error *err);

/* "FILE|REF" as a user types it: an existing file is imported (with lim, may be NULL), else a
 * reference ("sha256:<hex>" or a prefix of at least 12 hex) is resolved. *out_ref: the full
 * reference, caller owns (free). Errors: SBX_E_NOTFOUND "no snapshot 'x'", SBX_E_INVAL
 * "snapshot reference 'x' is ambiguous" or not a reference, the errors of import. */
SBX_API int sbx_snapshot_resolve(struct sbx_snapshot_store *st, const char *file_or_ref,
                                 const struct sbx_snapshot_limits *lim, char **out_ref,
                                 struct sbx_error *err);

/* The header of ref (full or prefix) with "holds" (array of holder strings) added.
 * *out_header: caller owns (json_decref). */
SBX_API int sbx_snapshot_inspect(struct sbx_snapshot_store *st, const char *ref,
                                 json_t **out_header, struct sbx_error *err);

/* Every snapshot in the store: an array of headers, each with "holds", sorted by "created".
 * *out: caller owns (json_decref). */
SBX_API int sbx_snapshot_list(struct sbx_snapshot_store *st, json_t **out, struct sbx_error *err);

/* Holds: a stopped sandbox (or anything else) keeps a snapshot from `rm` and from collection.
 * holder: any non-empty string up to 1024 bytes (a sandbox id). Holding twice is one hold;
 * releasing a hold that does not exist is SBX_E_NOTFOUND. */
SBX_API int sbx_snapshot_hold(struct sbx_snapshot_store *st, const char *ref, const char *holder,
                              struct sbx_error *err);
SBX_API int sbx_snapshot_release(struct sbx_snapshot_store *st, const char *ref, const char *holder,
                                 struct sbx_error *err);

/* What sbx_snapshot_gc removed: blobs no snapshot uses, temp files of takes and imports that
 * did not finish, and the disk space each took. */
struct sbx_snapshot_gc_stats {
    uint64_t blobs, blob_bytes;
    uint64_t temps, temp_bytes;
};

/* Collect the store: remove every blob no snapshot uses and every temp file (under the
 * exclusive lock, so no take or import is writing one), and the stat caches when a blob went.
 * A failed take collects by itself when no other command holds the store. out may be NULL.
 * Blocks on the lock. Errors: a tree that cannot be read stops the collection (its blobs may
 * be the only copy), SBX_E_SYS. */
SBX_API int sbx_snapshot_gc(struct sbx_snapshot_store *st, struct sbx_snapshot_gc_stats *out,
                            struct sbx_error *err);

/* Remove the tree (refused with SBX_E_PERM "snapshot 'x' is held by 'h'" while held, unless
 * force) and every blob no remaining tree uses. */
SBX_API int sbx_snapshot_remove(struct sbx_snapshot_store *st, const char *ref, int force,
                                struct sbx_error *err);

/* Browsing a snapshot without restoring it. The entries of ref (full or prefix), sorted by
 * path: an array of {"path", "type": "dir"|"file"|"symlink", "mode" (dir, file: the permission
 * bits), "size" and "sha256" (file), "target" (symlink)} from the tree validated again. *out:
 * caller owns (json_decref). */
SBX_API int sbx_snapshot_entries(struct sbx_snapshot_store *st, const char *ref, json_t **out,
                                 struct sbx_error *err);
/* Receives the content of a file in order, in pieces; p is borrowed for the call. Returns 0,
 * or a negative -code (err filled) to stop. */
typedef int sbx_snapshot_sink_fn(void *ctx, const void *p, size_t n, struct sbx_error *err);
/* The content of file path (relative; "..", an empty path and the root are refused) of
 * snapshot ref, to sink, checked against its hash while it is read (SBX_E_IO "blob ... is
 * corrupt": what was passed to sink before is wrong). SBX_E_NOTFOUND "no 'x' in snapshot 'r'",
 * SBX_E_INVAL for a directory or a symlink (naming its target). Streamed: memory does not grow
 * with the file. */
SBX_API int sbx_snapshot_cat(struct sbx_snapshot_store *st, const char *ref, const char *path,
                             sbx_snapshot_sink_fn *sink, void *ctx, struct sbx_error *err);

#endif
