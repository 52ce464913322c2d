/* Every call of sbx that changes a mount or a namespace (priv.h). Each wrapper names its callers
 * and why the call is safe where they make it. "The sandbox's namespace" below is the mount
 * namespace PID 1 of a local sandbox builds its root in: unshared by the middle process
 * (isolate.c, middle_main) together with a user namespace, and made private
 * (sbx__priv_make_private) before anything is mounted, so that no mount made there is seen on
 * the host. */
#include <fcntl.h>
#include <sched.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sandbox/host/priv.h"

/* isolate.c, building the root (PID 1, the sandbox's namespace): the bind mounts of the plan —
 * system directories and /etc files read-only, device nodes, grants (checked against
 * dangerous sources by grant.c), storage mounts' staging points, the workspace when it is not
 * idmapped — from the host tree at /oldroot to the new root at /newroot, each followed by
 * sbx__priv_setattr adding nosuid and nodev (and read-only unless writable); and /proc
 * entries bound onto themselves or masked with /dev/null, to be made read-only. */
int sbx__priv_bind(const char *src, const char *dst, int recursive)
{
    return mount(src, dst, NULL, MS_BIND | (recursive ? MS_REC : 0), NULL);
}

/* isolate.c, where mount_setattr is missing (Linux < 5.12, valgrind): the same flags added to a
 * bind mount of the sandbox's namespace. The caller passes the flags the mount has already
 * (statvfs) plus the ones to add: a remount only ever adds restrictions, and the kernel refuses
 * to clear flags locked by a more privileged namespace anyway. */
int sbx__priv_remount(const char *path, unsigned long flags)
{
    return mount(NULL, path, NULL, MS_REMOUNT | MS_BIND | flags, NULL);
}

/* isolate.c (PID 1, the sandbox's namespace): fresh instances, never the host's — the scratch
 * tmpfs the root is built in, the tmpfs of /dev, /tmp and the masks of /proc directories, a
 * proc of the sandbox's own pid namespace (hidepid), and a devpts instance of its own
 * (newinstance, a max). All nosuid and nodev. */
int sbx__priv_mount_fs(const char *fstype, const char *dst, unsigned long flags, const char *data)
{
    return mount(fstype, dst, fstype, flags, data);
}

/* disk.c (a root caller, the host's namespace): the workspace's ext4 image, on the loop device
 * sbx attached to it, mounted nosuid and nodev at the directory of a fresh workspace that sbx
 * made itself (never a user's --workspace). */
int sbx__priv_mount_dev(const char *dev, const char *dst, const char *fstype, unsigned long flags,
                        const char *data)
{
    return mount(dev, dst, fstype, flags, data);
}

/* isolate.c, the first mount call in the sandbox's namespace: from here on no mount event
 * propagates between it and the host. */
int sbx__priv_make_private(const char *path)
{
    return mount(NULL, path, NULL, MS_REC | MS_PRIVATE, NULL);
}

/* isolate.c: restrictions added (read-only, nosuid, nodev, noexec; never cleared) to mounts of
 * the sandbox's namespace; and for a root runner the id mapping of the detached workspace copy
 * (sbx__priv_clone_tree) with nosuid and nodev, so that commands run as the sandbox's own host
 * ids while the files keep their owner. */
int sbx__priv_setattr(int dirfd, const char *path, unsigned int at_flags,
                      const struct mount_attr *attr, size_t size)
{
    return (int)syscall(SYS_mount_setattr, dirfd, path, at_flags, attr, size);
}

/* isolate.c (a root runner, the host side before the namespaces exist): a detached copy of the
 * workspace's mount, which is attached nowhere on the host; only PID 1 attaches it, inside. */
int sbx__priv_clone_tree(const char *path)
{
    return (int)syscall(SYS_open_tree, AT_FDCWD, path, OPEN_TREE_CLONE | O_CLOEXEC);
}

/* isolate.c (PID 1, the sandbox's namespace): the idmapped workspace copy attached at its place
 * in the new root. */
int sbx__priv_attach_tree(int tree_fd, const char *dst)
{
    return (int)syscall(SYS_move_mount, tree_fd, "", AT_FDCWD, dst, MOVE_MOUNT_F_EMPTY_PATH);
}

/* isolate.c (PID 1, the sandbox's namespace): into the scratch tmpfs (the host tree moves to
 * /oldroot, read only as bind sources), then into the finished root, after which the old root
 * is detached (sbx__priv_umount) and no path leads to the host tree again. */
int sbx__priv_pivot_root(const char *new_root, const char *put_old)
{
    return (int)syscall(SYS_pivot_root, new_root, put_old);
}

/* isolate.c: the old root, detached in the sandbox's namespace. disk.c (a root caller, the
 * host): the workspace image's file system, only at a workspace whose mount is backed by that
 * sandbox's image (UMOUNT_NOFOLLOW). mounts.c (the supervisor, the host): a storage mount's
 * FUSE staging point under the sandbox's runtime directory, once the sandbox holds its own copy
 * (or ends), and only when mountinfo lists it. */
int sbx__priv_umount(const char *path, int flags)
{
    return umount2(path, flags);
}

/* isolate.c: the middle process makes the sandbox's user namespace first, then (once the host
 * side wrote its id maps) the mount, pid, ipc, uts, cgroup and network namespaces; every later
 * privileged step happens inside them. A short-lived helper child makes a user namespace only
 * to carry the id map of the idmapped workspace, and is killed right after. */
int sbx__priv_unshare(int flags)
{
    return unshare(flags);
}

/* net/forward.c: a short-lived child of the supervisor's host-side process joins the sandbox's
 * user namespace, then its network namespace, makes one socket there for the proxy or a port
 * forward, passes it back and exits (the host-side process itself never changes namespace).
 * sandbox/host/relay.c: a Docker port relay joins the container's network namespace, opened
 * from /proc/PID/ns/net while the start time of PID proves it is the container's process. */
int sbx__priv_setns(int fd, int nstype)
{
    return setns(fd, nstype);
}

/* isolate.c (PID 1): the hostname of the sandbox's own uts namespace. */
int sbx__priv_sethostname(const char *name)
{
    return sethostname(name, strlen(name));
}
