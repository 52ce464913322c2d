/* sbx: storage mounts of an isolated sandbox, on the host side (docs/internals/mounts.md):
 * rclone processes started by the supervisor before the namespaces exist, their FUSE mounts
 * staged under <runtime dir>/mounts/ and bound into the sandbox as grants. */
#ifndef SBX_SANDBOX_LOCAL_MOUNTS_H
#define SBX_SANDBOX_LOCAL_MOUNTS_H

#include <sys/types.h>

#include "providers/local/config.h"
#include "sbx/error.h"

struct sbx__mount_proc {
    pid_t pid;     /* the rclone mount process, 0 when gone */
    pid_t pump;    /* the writer of its log (logcap.h), 0 when gone */
    char *staging; /* host mount point under <runtime dir>/mounts/ */
};

struct sbx__mounts {
    struct sbx__mount_proc *v;
    size_t n;
};

/* Check and mount each of cfg (n entries) at <dir>/mounts/<i>, waiting until each is mounted.
 * On failure nothing stays mounted or running; the message names the entry. */
int sbx__mounts_start(struct sbx__mounts *ms, const char *dir,
                      const struct sbx__local_config_mount *cfg, size_t n, struct sbx_error *err);
/* Detach the host's staging mounts (the sandbox's mount namespace keeps its copies). */
void sbx__mounts_detach(struct sbx__mounts *ms);
/* End the rclone processes (SIGTERM, then SIGKILL after 10 s), detach, free. */
void sbx__mounts_stop(struct sbx__mounts *ms);
/* Free without touching the processes or mounts (in a process that does not own them). */
void sbx__mounts_forget(struct sbx__mounts *ms);
/* Teardown: detach any FUSE mount still present under <dir>/mounts/ (a supervisor killed while
 * it started them). */
void sbx__mounts_cleanup_dir(const char *dir);

#endif
