/* sbx: the local provider ("local"): one supervisor process per sandbox on this machine.
 *
 * A sandbox is a detached supervisor (the sbx binary re-executed with a hidden verb) that owns
 * the workspace and every process started in it. It listens on a control socket in the runtime
 * directory <runtime>/<id>/ (mode 0700) where <runtime> is options.runtime_dir, else
 * $XDG_RUNTIME_DIR/sbx, else /run/sbx for root, else /tmp/sbx-$UID. A sandbox survives the
 * process that created it; any later process attaches to it by id. docs/internals/
 * local-provider.md describes the protocol and the lifetimes. */
#ifndef SBX_LOCAL_H
#define SBX_LOCAL_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "error.h"
#include "session.h"

enum sbx_local_isolation {
    SBX_LOCAL_ISOLATION_NONE = 0, /* commands run as the caller, on the host file system */
};

enum sbx_local_network {
    SBX_LOCAL_NETWORK_DEFAULT = 0, /* what the isolation mode implies (none: the host's) */
    SBX_LOCAL_NETWORK_HOST,
    SBX_LOCAL_NETWORK_NONE,
};

/* Resource limits applied to the sandbox; 0 means no limit. */
struct sbx_local_limits {
    uint64_t memory_bytes;
    uint64_t pids;
    uint64_t cpu_millis; /* CPU bandwidth in thousandths of a CPU */
    uint64_t file_size_bytes;
    uint64_t open_files;
};

#define SBX_LOCAL_MAX_EXPOSED_PORTS 64

/* All zero is the default. Strings are borrowed for the duration of sbx_client_new (copied). */
struct sbx_local_options {
    const char *supervisor_path; /* the sbx binary to re-execute; NULL: $SBX_SUPERVISOR, else
                                    /proc/self/exe when this program is sbx, else the installed
                                    sbx */
    const char *runtime_dir;     /* base of the runtime directories; NULL: see above */
    const char *workspace_dir;   /* where fresh workspaces are made; NULL: $SBX_WORKSPACES, else
                                    ${XDG_STATE_HOME:-~/.local/state}/sbx/workspaces */
    enum sbx_local_isolation isolation;
    enum sbx_local_network network;
    struct sbx_local_limits limits;
    const int *exposed_ports; /* when n_exposed_ports > 0, only these resolve */
    size_t n_exposed_ports;
    int64_t start_timeout_ms; /* how long create waits for the supervisor; 0: 10 s */
};

/* The hidden CLI verb "__supervise ID": the supervisor process itself (argv[0] is the verb,
 * argv[1] the sandbox id, shown by ps). The configuration arrives as JSON on stdin; the readiness
 * report (JSON) leaves on stdout. Returns the exit status. Only the sbx binary calls this. */
SBX_API int sbx_local_supervise_main(int argc, char **argv);

/* The name of the hidden verb. */
#define SBX_LOCAL_SUPERVISE_VERB "__supervise"

#endif
