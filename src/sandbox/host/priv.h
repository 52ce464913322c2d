/* Every call of sbx that changes a mount or a namespace, in one place (bubblewrap's
 * privileged_op): mount in its forms (bind, remount, a kernel file system, a block device,
 * propagation, the new mount API's open_tree, move_mount and mount_setattr), umount, pivot_root,
 * unshare, setns and sethostname. Nothing else in src/ makes these calls; a security reader
 * reads this file and priv.c, where each wrapper says who calls it, in which namespace, and why
 * that is safe.
 *
 * The wrappers are thin on purpose: each makes exactly one system call and returns its result
 * (0, a descriptor, or -1 with errno), so the callers keep their own error messages and
 * fallbacks. They decide nothing: which steps run, in what order and on which paths is the
 * caller's (for a local sandbox: the plan of isolate-plan.c, applied by the executor
 * isolate.c). All are async-signal-safe (they run between fork and exec). */
#ifndef SBX_SANDBOX_HOST_PRIV_H
#define SBX_SANDBOX_HOST_PRIV_H

#include <stddef.h>

struct mount_attr;

/* Bind src at dst; recursive: with the mounts below src (MS_REC). */
int sbx__priv_bind(const char *src, const char *dst, int recursive);
/* Change the flags of the bind mount at path in place (MS_REMOUNT | MS_BIND | flags). */
int sbx__priv_remount(const char *path, unsigned long flags);
/* A new instance of the kernel file system fstype (tmpfs, proc, devpts) at dst. */
int sbx__priv_mount_fs(const char *fstype, const char *dst, unsigned long flags, const char *data);
/* The file system fstype on block device dev at dst. */
int sbx__priv_mount_dev(const char *dev, const char *dst, const char *fstype, unsigned long flags,
                        const char *data);
/* Mount events no longer propagate between the tree at path and its peers (MS_REC |
 * MS_PRIVATE). */
int sbx__priv_make_private(const char *path);
/* mount_setattr(2): attr (size bytes) applied to the mount at dirfd/path. */
int sbx__priv_setattr(int dirfd, const char *path, unsigned int at_flags,
                      const struct mount_attr *attr, size_t size);
/* open_tree(2) with OPEN_TREE_CLONE: a detached copy of the mount at path, close-on-exec.
 * Returns the descriptor. */
int sbx__priv_clone_tree(const char *path);
/* move_mount(2): the detached mount tree_fd attached at dst. */
int sbx__priv_attach_tree(int tree_fd, const char *dst);
/* pivot_root(2). */
int sbx__priv_pivot_root(const char *new_root, const char *put_old);
/* umount2(2). */
int sbx__priv_umount(const char *path, int flags);
/* unshare(2) of the namespaces in flags (CLONE_NEW*). */
int sbx__priv_unshare(int flags);
/* setns(2): join the namespace fd (of type nstype). */
int sbx__priv_setns(int fd, int nstype);
/* sethostname(2) in the caller's uts namespace. */
int sbx__priv_sethostname(const char *name);

#endif
