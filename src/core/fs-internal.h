/* sbx: internals of src/core/fs.c shared with the rest of the source tree (and switches for
 * tests). Not part of the public API. */
#ifndef SBX_CORE_FS_INTERNAL_H
#define SBX_CORE_FS_INTERNAL_H

#include "sbx/error.h"

/* Resolve every workspace path with the user-space fallback instead of openat2 (on != 0), or go
 * back to openat2 where the kernel has it (on == 0). Process-wide; meant for tests, which run
 * the same checks against both resolvers. */
void sbx__fs_set_force_fallback(int on);

/* The one way sbx removes a host tree it made (a workspace, a runtime directory, a checkout):
 * sbx_fs_remove(SBX_FS_RECURSIVE | SBX_FS_NOFOLLOW) of path's last component relative to its
 * parent, at most 4096 directories deep. The tree may have been written by a sandbox: no
 * symlink in it is followed, no mount inside it is entered (SBX_E_PERM), directories its owner
 * may not read or write are given back to the owner on the way. path: absolute, not "/", no
 * trailing '/' or "." / ".." last component (SBX_E_INVAL). A path that is gone is no error;
 * entries that vanish meanwhile (another remover) are fine. Blocks on the file system. */
int sbx__fs_remove_tree(const char *path, struct sbx_error *err);

#endif
