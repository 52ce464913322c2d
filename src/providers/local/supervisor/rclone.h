/* sbx: the rclone configuration of a manifest mount entry (docs/internals/mounts.md). */
#ifndef SBX_SANDBOX_LOCAL_RCLONE_H
#define SBX_SANDBOX_LOCAL_RCLONE_H

#include "providers/local/config.h"
#include "sbx/manifest.h"

/* Fill out (empty before) with entry e's rclone config (credentials included), remote, check
 * and sandbox mount point (root: the manifest root). Unsupported types, strategies and
 * credentials are SBX_E_UNSUPPORTED; the caller names the entry. */
int sbx__rclone_mount(const struct sbx_manifest_entry *e, const char *root,
                      struct sbx__local_config_mount *out, struct sbx_error *err);

#endif
