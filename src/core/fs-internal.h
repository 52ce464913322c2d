/* sbx: internal switches of src/core/fs.c, for tests. Not part of the public API. */
#ifndef SBX_CORE_FS_INTERNAL_H
#define SBX_CORE_FS_INTERNAL_H

/* Resolve every workspace path with the user-space fallback instead of openat2 (on != 0), or go
 * back to openat2 where the kernel has it (on == 0). Process-wide; meant for tests, which run
 * the same checks against both resolvers. */
void sbx__fs_set_force_fallback(int on);

#endif
