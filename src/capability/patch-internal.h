/* Internal hooks of the patch engine, for its unit tests. */
#ifndef SBX_CAPABILITY_PATCH_INTERNAL_H
#define SBX_CAPABILITY_PATCH_INTERNAL_H

/* When >= 0, the directory provider's commit fails (EIO) on the change with this index,
 * after staging everything, so tests can check the rollback. -1 (the default) disables it. */
extern int sbx__patch_fault_after;

#endif
