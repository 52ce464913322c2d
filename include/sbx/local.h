/* sbx: the local provider ("local"): one supervisor process per sandbox on this machine.
 *
 * A sandbox is a detached supervisor (the sbx-supervisor program, see supervisor_path) that owns
 * the workspace and every process started in it. It listens on a control socket in the runtime
 * directory <runtime>/<id>/ (mode 0700) where <runtime> is options.runtime_dir, else
 * $XDG_RUNTIME_DIR/sbx, else /run/sbx for root, else /run/user/$UID/sbx when that user dir is
 * ours and private, else ${XDG_STATE_HOME:-$HOME/.local/state}/sbx/run; never a shared place
 * such as /tmp, and each is refused unless it is a real directory owned by the caller (made
 * 0700). A sandbox survives the
 * process that created it; any later process attaches to it by id. docs/internals/
 * local-provider.md describes the protocol and the lifetimes. */
#ifndef SBX_LOCAL_H
#define SBX_LOCAL_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "error.h"
#include "session.h"

/* Isolation is the default: the all-zero options struct gives a sandbox in new user, mount, pid,
 * ipc, uts, cgroup and (network none) net namespaces, with a root built from nothing, the
 * workspace at the manifest root (default /workspace), cgroup and rlimit limits, capabilities
 * dropped and a seccomp allowlist (docs/internals/isolation.md). Where that cannot be set up,
 * create fails naming the missing kernel feature; it never falls back to running unconfined. */
enum sbx_local_isolation {
    SBX_LOCAL_ISOLATION_DEFAULT = 0, /* namespaces */
    SBX_LOCAL_ISOLATION_NAMESPACES,
    SBX_LOCAL_ISOLATION_NONE, /* unconfined: commands run as the caller, on the host file system,
                                 with the host network. Logged as a warning at every create */
};

enum sbx_local_network {
    SBX_LOCAL_NETWORK_DEFAULT = 0, /* none with isolation; the host's without */
    SBX_LOCAL_NETWORK_HOST,        /* "full": the host network (dangerous, opt-in) */
    SBX_LOCAL_NETWORK_NONE,        /* an empty network namespace, loopback only */
    SBX_LOCAL_NETWORK_ALLOW,       /* "allow:<domains>": the empty namespace plus HTTP(S) to the
                                      allow_domains only, through a proxy the supervisor runs on
                                      the host and serves at 127.0.0.1:3128 inside (HTTP_PROXY,
                                      HTTPS_PROXY... set for commands); needs isolation */
};

#define SBX_LOCAL_MAX_ALLOW_DOMAINS 256

/* Limit value meaning "no limit at all". */
#define SBX_LOCAL_LIMIT_NONE UINT64_MAX

/* Resource limits applied to the sandbox (isolation only); 0 means the default: memory 2 GiB
 * (cgroup), pids 1024 (commands; the cgroup allows the supervisor a little more), a CPU quota of
 * half the host's CPUs but at least one (cgroup; SBX_LOCAL_LIMIT_NONE: unlimited), file size
 * 16 GiB and 4096 open files (rlimits per command). A limit given explicitly must be enforced:
 * create fails when the cgroup controller is not usable (e.g. an unprivileged caller on cgroup v1);
 * a default one is then only logged. */
struct sbx_local_limits {
    uint64_t memory_bytes;
    uint64_t pids;
    uint64_t cpu_millis; /* CPU bandwidth in thousandths of a CPU */
    uint64_t file_size_bytes;
    uint64_t open_files;
};

/* A host path shown inside an isolated sandbox (read-only unless writable). Never "/", never a
 * home directory itself, never overlapping the workspace or the system paths; not /proc, /sys,
 * /dev, /run or a tree with unix sockets unless marked dangerous. */
struct sbx_local_grant {
    const char *src; /* absolute host path */
    const char *dst; /* absolute sandbox path; NULL: the same as src */
    int writable;
    /* Accept a dangerous source: /proc, /sys, /dev, /run (or below) or a tree holding unix
     * sockets, refused otherwise (the sandbox could reach host services through it). */
    int dangerous;
};

#define SBX_LOCAL_MAX_GRANTS 64

#define SBX_LOCAL_MAX_EXPOSED_PORTS 64

/* Workspace size limits (sbx_local_options.disk_bytes). */
#define SBX_LOCAL_DISK_DEFAULT ((uint64_t)8 << 30)  /* 8 GiB */
#define SBX_LOCAL_DISK_MIN     ((uint64_t)16 << 20) /* 16 MiB */
#define SBX_LOCAL_DISK_MAX     ((uint64_t)16 << 40) /* 16 TiB */

/* All zero is the default. Strings are borrowed for the duration of sbx_client_new (copied).
 * Most of them are also the provider's declared options (sbx/provider.h: isolation, network,
 * memory, pids, cpus, ports, ro, rw, allow_dangerous_grant, port_bind, publish, allow_port,
 * disk, tied),
 * which sbx_client_new_json takes as JSON. */
struct sbx_local_options {
    const char *supervisor_path; /* the supervisor program (sbx-supervisor, or an sbx binary,
                                    which serves too); NULL: $SBX_SUPERVISOR, else
                                    sbx-supervisor next to the running program, else next
                                    to libsbx.so (its real path) or in its tree's libexecdir,
                                    else the installed <libexecdir>/sbx-supervisor, else this
                                    program when it is sbx, else the installed sbx; none:
                                    SBX_E_NOTFOUND naming sbx-supervisor */
    const char *runtime_dir;     /* base of the runtime directories; NULL: see above */
    const char *workspace_dir;   /* where fresh workspaces are made; NULL: $SBX_WORKSPACES, else
                                    ${XDG_STATE_HOME:-~/.local/state}/sbx/workspaces */
    enum sbx_local_isolation isolation;
    enum sbx_local_network network;
    struct sbx_local_limits limits;
    const struct sbx_local_grant *grants; /* extra path grants (isolation only) */
    size_t n_grants;
    const int *exposed_ports; /* when n_exposed_ports > 0, only these resolve */
    size_t n_exposed_ports;
    /* Network allow: host patterns, "pypi.org" or "*.pypi.org" (every name below, not the apex);
     * ASCII (xn--) names or IP literals. At least one. */
    const char *const *allow_domains;
    size_t n_allow_domains;
    /* Network allow: the destination ports the proxy connects to; none given: 80 and 443. */
    const int *allow_ports;
    size_t n_allow_ports;
    /* Host address the port forwarders of an isolated sandbox listen on; NULL: "127.0.0.1". */
    const char *port_bind;
    /* Fixed port forwards made when the sandbox starts, "[ADDR:]HOST:PORT" as docker's -p:
     * host port HOST (on ADDR, an IPv4 address or an IPv6 one in brackets; default 127.0.0.1)
     * reaches port PORT of the sandbox (a service listening on 127.0.0.1 or every address
     * there). A sandbox with a network of its own only (isolation, network none or allow); an
     * address the host does not have, or a host port that is taken, fails the create. At most
     * SBX_LOCAL_MAX_EXPOSED_PORTS. */
    const char *const *publish;
    size_t n_publish;
    /* Safety bound on create's wait for the supervisor's report; 0: 300 s. The report comes
     * (ok or an error) or the supervisor is dead (its socket closes): create never races a
     * short timer. */
    int64_t start_timeout_ms;
    /* A request to a sandbox's supervisor fails (SBX_E_TIMEOUT) when the supervisor accepts and
     * answers nobody for this long; 0: 10 s. While it answers other clients first (many
     * concurrent callers, a loaded host) the request waits on, up to a safety bound of 300 s
     * (or this, if longer): a fixed deadline would fail requests queued behind others. */
    int64_t request_idle_ms;
    /* Non-zero: every sandbox this client creates is tied to the calling process. When the
     * process ends, however it ends (SIGKILL included), the supervisor removes the sandbox as
     * rm would: its processes, cgroups, runtime directory and the workspace it made (a given
     * workspace is left as it is). The supervisor watches a pidfd of the creator; without
     * pidfd_open (Linux < 5.3), a pipe the process holds, which a child it forks without exec
     * also holds: such a child keeps the sandbox alive until it ends too. */
    int tied;
    /* Size limit of a fresh workspace in bytes: 0 is SBX_LOCAL_DISK_DEFAULT, SBX_LOCAL_LIMIT_NONE
     * none; else SBX_LOCAL_DISK_MIN..SBX_LOCAL_DISK_MAX. Enforced by the kernel for a root
     * caller: the workspace is an ext4 file system in a sparse image file of that size,
     * loop-mounted at the workspace path; writes past it fail with ENOSPC. Where it cannot be
     * enforced (an unprivileged caller, a given workspace directory, no loop devices or mke2fs)
     * a limit given explicitly fails create; the default one is logged as a warning. Either way
     * state.json says what holds: "disk": {"limit", "enforced", "reason" | "image", "loop"}. */
    uint64_t disk_bytes;
    /* A root caller's sandbox runs its commands as ids of its own host range and shows the
     * workspace through an idmapped mount. Where that mount cannot be made (Linux < 5.12, a
     * filesystem without idmapped mounts), create fails unless this is set: then the commands
     * run as the caller's host uid, 0, without capabilities, and every root-owned host file the
     * sandbox sees and may write by its mode bits is the sandbox's (DANGEROUS). */
    int allow_host_uid;
    /* A given workspace directory (sbx_create_spec.workspace) is refused in a system directory,
     * a view of the host (/proc, /sys, /dev, /run), on a kernel pseudo file system or as a home
     * directory itself; and, unless this is set (DANGEROUS), inside another user's home or when
     * it holds a unix socket (through which the sandbox would reach a host service). */
    int allow_dangerous_workspace;
};

/* A per-user alternative to the TCP port forwards of sbx_session_resolve_port, which listen on
 * 127.0.0.1 where every local user can connect: a unix socket in the sandbox's runtime
 * directory (0700, the caller's; socket 0600), forwarding to port inside. Only for sandboxes
 * with a network namespace of their own (network none or allow). *out_path: its host path,
 * caller owns (free); clients connect with e.g. `curl --unix-socket PATH http://x/`. Errors:
 * those of sbx_session_resolve_port, SBX_E_UNSUPPORTED for another provider or the host's
 * network, SBX_E_TOOBIG when the runtime path is too long for a socket address (108 bytes). */
SBX_API int sbx_local_session_port_unix(struct sbx_session *s, int port, char **out_path,
                                        struct sbx_error *err);

#endif
