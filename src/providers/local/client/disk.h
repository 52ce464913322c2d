/* Workspace size limits of the local provider: a fresh workspace of a root caller is an ext4
 * file system in a sparse image file, loop-mounted at the workspace path in the host mount
 * namespace, so a sandbox that fills it gets ENOSPC and the host loses at most the limit.
 * docs/internals/isolation.md ("Disk") has the design and what is not covered. */
#ifndef SBX_SANDBOX_LOCAL_DISK_H
#define SBX_SANDBOX_LOCAL_DISK_H

#include <stdint.h>

#include "sbx/error.h"

/* The image of a fresh workspace W is always W + this suffix (<workspaces>/<id>.img), so that
 * clean-up of leftovers finds it even without the state that records it (a create killed
 * between the mount and writing state.json). Only ever derive it for a workspace sbx made: next
 * to a user's --workspace DIR a file of that name is the user's. */
#define SBX__DISK_IMAGE_SUFFIX ".img"

/* Can this process back a workspace with an image? 0, or -SBX_E_UNSUPPORTED with a message
 * that says why not (not root, no /dev/loop-control, no mke2fs), for the "not enforced"
 * warning. Does not block. */
int sbx__disk_usable(struct sbx_error *err);

/* Create image (a new sparse file of bytes, mode 0600; it must not exist), format it ext4, attach
 * it to a free loop device (detached automatically at the last unmount) and mount it at ws (an
 * empty directory we made) nosuid, nodev. *loop_out: the device, "/dev/loopN" (caller frees).
 * On failure nothing is left: no mount, no device, no image. Blocks for mke2fs (tens of ms). */
int sbx__disk_attach(const char *image, const char *ws, uint64_t bytes, char **loop_out,
                     struct sbx_error *err);

/* Undo sbx__disk_attach, for rm, a failed create and clean-up of leftovers (the image and loop
 * paths come from the sandbox's state.json; loop may be NULL). With keep_files the workspace's
 * files are first copied out (cp -a, holes kept), so ws stays a plain directory with them;
 * otherwise ws is left an empty directory. Only a mount at ws whose loop device is backed by
 * image is unmounted; a missing mount or image is not an error, so this can be repeated. Call
 * it once no sandbox process holds the filesystem (after the supervisor stopped); a file
 * system still busy is detached lazily and freed by the kernel when its last user goes. */
int sbx__disk_detach(const char *image, const char *loop, const char *ws, int keep_files,
                     struct sbx_error *err);

/* sbx__disk_detach without keep_files, with the slow part off the caller's path: the image is
 * renamed into <workspaces>/.sbx-release/ and the mount detached lazily at once (the workspace
 * path is free when this returns), and a worker forked from the caller (in a session of its
 * own; async-signal-safe, so a caller with threads may use it) ends the file system, waits for
 * the loop device to detach and unlinks the image. Falls back to sbx__disk_detach when the
 * worker cannot start; files a worker never removed (it was killed) go at a later call, ten
 * minutes on. */
int sbx__disk_detach_later(const char *image, const char *loop, const char *ws,
                           struct sbx_error *err);

/* The name prefix of a directory handed over to a release worker. The worker holds a shared
 * flock on it until it has removed it: one found without a holder (a worker killed half-way)
 * is removed by whoever finds it (sbx__local_reclaim). */
#define SBX__RELEASE_GONE_PREFIX ".gone-"

/* sbx__disk_detach_later in steps, so that its work overlaps the wait for the sandbox's own
 * processes to go. prepare forks the worker (holding the mounted file system; it waits) and
 * returns 1, or 0 when it could not (the mount at ws is not the image's, no fork): nothing is
 * changed then. detach (after prepare returned 1) renames the image away and detaches the
 * mount lazily: 1 when done, 0 when nothing was changed (use sbx__disk_detach later). end lets
 * the worker go and frees r; call it once no sandbox process holds the file system, so that the
 * worker, not an exiting sandbox process, is its last holder and pays for its end. end is
 * always called, whatever prepare and detach returned; none of them blocks. */
struct sbx__disk_release {
    int gate;     /* write end of the worker's gate; -1: no worker */
    int detached; /* the image is at trash */
    char *image, *ws, *loop;
    char *trash;       /* the image's name in the release directory */
    char *dir;         /* the release directory */
    char *also, *gone; /* prepare's also, and the name hand_over gives it */
};
int sbx__disk_release_prepare(const char *image, const char *loop, const char *ws, const char *also,
                              struct sbx__disk_release *r);
int sbx__disk_release_detach(struct sbx__disk_release *r);
/* After detach: give prepare's also (a directory of files, no subdirectory) to the worker,
 * which removes it once let go. It is renamed at once to SBX__RELEASE_GONE_PREFIX<its
 * name>-<random> in its own parent. 1 when it was handed over (its name is free), 0 when it was not
 * (a subdirectory in it, no worker, no detach, a failed rename): nothing is changed then. */
int sbx__disk_release_hand_over(struct sbx__disk_release *r);
void sbx__disk_release_end(struct sbx__disk_release *r);

#endif
