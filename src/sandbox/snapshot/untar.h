/* A workspace's tar (as `tar -C ROOT -cf - .` in a sandbox writes it) unpacked into a private
 * directory of this host, for the shared snapshot code to read: the Kubernetes and LXD
 * providers' copies of a workspace. Only files, directories and symlinks, with names that stay
 * below the top (absolute names, "..", "." and empty parts are passed over), never written
 * through a symlink, no owners, modes masked by SBX_FS_MODE_MASK; hard links and other types
 * are passed over. */
#ifndef SBX_SANDBOX_SNAPSHOT_UNTAR_H
#define SBX_SANDBOX_SNAPSHOT_UNTAR_H

#include "sbx/error.h"

/* The tar read from fd tar (from its offset) into the existing directory dir. */
int sbx__workspace_untar(int tar, const char *dir, struct sbx_error *err);

#endif
