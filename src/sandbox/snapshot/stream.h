/* sbx internal: snapshots to and from tar streams of a workspace that is not on this host
 * (docs/internals/remote.md, "Workspace streams"): a provider's workspace_export stream goes
 * into the store, a tar of a snapshot goes to its workspace_import. */
#ifndef SBX_SANDBOX_SNAPSHOT_STREAM_H
#define SBX_SANDBOX_SNAPSHOT_STREAM_H

#include "sbx/progress.h"
#include "sbx/snapshot.h"

struct sbx__snap_stream_opts {
    const char *const *exclude;  /* workspace paths left out with all below them, or NULL */
    const char *label;           /* recorded in the header, or NULL */
    const char *manifest_digest; /* recorded in the header, or NULL */
    const struct sbx_snapshot_limits *limits; /* NULL: defaults */
    sbx_progress_fn *progress;                /* step "snapshot", or NULL */
    void *progress_data;
};

/* Read the tar of a workspace from fd (borrowed, read to its end or the error) into the store
 * as a snapshot. The rules of sbx_snapshot_import apply (refused: names that are empty,
 * absolute, hold "..", not normal, duplicates, members under a symlink or a file, hardlinks to
 * anything but an earlier file, every limit), and what a take of a directory does besides:
 * the excluded paths are left out, devices, fifos, sockets, symlinks whose target is absolute
 * or leaves the workspace and names that are not UTF-8 or hold control characters are
 * skipped and counted in the header's "skipped", no member is taken for a snapshot header.
 * On failure the store holds nothing new. *out_ref: caller owns (free). */
int sbx__snapshot_import_workspace(struct sbx_snapshot_store *st, int fd,
                                   const struct sbx__snap_stream_opts *o, char **out_ref,
                                   struct sbx_error *err);

/* Write snapshot ref (full or prefix) to out_fd (borrowed) as an uncompressed pax tar for a
 * workspace to be unpacked by another program: "./path" members in order, each directory
 * before its content, files without sparse members (holes are written as zeros), symlinks
 * last, owners root (uid and gid 0, no names), no header member. Every blob is checked against
 * its hash. progress (may be NULL): step "restore". */
int sbx__snapshot_write_workspace_tar(struct sbx_snapshot_store *st, const char *ref, int out_fd,
                                      sbx_progress_fn *progress, void *progress_data,
                                      struct sbx_error *err);

#endif
