/* sbx: the LXD provider ("lxd"): each sandbox is a container instance of an LXD (or Incus)
 * server or cluster, driven over its REST API (`/1.0`) on the server's unix socket or over
 * https with client certificates. No lxc program is run and no image is downloaded: the image
 * must be on the server already. docs/internals/lxd-provider.md describes how each session
 * operation maps to the API.
 *
 * A sandbox is one instance named "sbx-<id>" whose config carries user.sbx.id=<id> and the
 * rest of what a later process needs to attach (user.sbx.root, the workspace path inside, the
 * owner, the options, the manifest without secret values): the server is the only record. In a
 * cluster the server places the instance (or the target option names a member), and every
 * operation on it goes through whichever member the endpoint names. Like a local sandbox it
 * outlives the process that made it. */
#ifndef SBX_LXD_H
#define SBX_LXD_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "common.h"
#include "error.h"
#include "session.h"

enum sbx_lxd_network {
    SBX_LXD_NETWORK_DEFAULT = 0, /* none */
    SBX_LXD_NETWORK_NONE,        /* no network device: every NIC of the profiles is masked */
    SBX_LXD_NETWORK_PROFILE,     /* the network devices of the profiles, as they are (opt-in) */
};

#define SBX_LXD_MAX_PROFILES      16
#define SBX_LXD_MAX_EXPOSED_PORTS 64

/* Limit value meaning "no limit at all". */
#define SBX_LXD_LIMIT_NONE UINT64_MAX

/* All zero is the default. Strings are borrowed for the duration of sbx_client_new (copied).
 * The provider's declared options (sbx/provider.h) are the same, as JSON for
 * sbx_client_new_json. */
struct sbx_lxd_options {
    /* The server: "unix:///path/unix.socket", an absolute socket path, or "https://HOST[:PORT]"
     * (port 8443 by default). NULL: $LXD_DIR/unix.socket, else /var/lib/lxd/unix.socket, else
     * /var/snap/lxd/common/lxd/unix.socket. */
    const char *endpoint;
    /* https only: the client certificate and its key (PEM files; the certificate must be
     * trusted by the server), and how the server is recognised: server_cert, a PEM file of the
     * CA or of the server's own certificate the server's must verify against (its name must
     * match the endpoint's host), and/or server_pubkey, the server key's "sha256//BASE64"
     * (curl's pinned-key form): a pinned key alone accepts a certificate whatever its names;
     * server_fingerprint, the SHA-256 of the server's certificate (64 hex digits, ':' allowed,
     * as `lxc remote add` shows it), pins that certificate whatever its names. One of the three
     * is required: sbx never trusts a server on first use. Paths are read when a connection is
     * made; no key is ever kept in a session state. */
    const char *client_cert;
    const char *client_key;
    const char *server_cert;
    const char *server_pubkey;
    const char *server_fingerprint;
    const char *project; /* NULL: "default" */
    /* The profiles of new instances (NULL: "default"); a profile that sets
     * security.privileged or security.nesting is refused unless the option below allows it. */
    const char *const *profiles;
    size_t n_profiles;
    /* The image of new sandboxes: an alias or a fingerprint (prefix) the server has. Required
     * by create. */
    const char *image;
    /* Cluster placement: a member name, or "@GROUP" for a cluster group; NULL: the cluster
     * places each instance. */
    const char *target;
    /* User commands run as when the manifest declares none: a name in the image's
     * /etc/passwd; NULL: root. */
    const char *user;
    enum sbx_lxd_network network;
    /* Limits of the instance; 0: memory 2 GiB, pids 1024, CPU half the host's CPUs (at least
     * one), disk: the profile's root disk as it is; SBX_LXD_LIMIT_NONE: unlimited. */
    uint64_t memory_bytes;
    uint64_t pids;
    uint64_t cpu_millis; /* thousandths of a CPU */
    uint64_t disk_bytes; /* the root disk's size (enforced where the storage driver can) */
    /* security.privileged (the container's root is root on the member host) and
     * security.nesting (containers inside the sandbox, with more of /proc and /sys reachable)
     * are refused (SBX_E_PERM, naming the risk) unless set here. */
    int privileged;
    int nesting;
    /* Ports: sbx_session_resolve_port(PORT) makes a proxy device that listens on
     * port_bind:HOSTPORT of the member host running the instance and connects to
     * 127.0.0.1:PORT inside; it returns http://port_bind:HOSTPORT. port_bind NULL: the member's
     * address in a cluster, else 127.0.0.1 (a server on this host). When n_exposed_ports > 0,
     * only these resolve. */
    const int *exposed_ports;
    size_t n_exposed_ports;
    const char *port_bind;
    /* Safety bound on each API call that is not a command's own run time; 0: 60 s. */
    int64_t request_timeout_ms;
};

/* ---------------------------------------------------------------------------------------------
 * The server's own snapshots of an lxd sandbox's instance (the whole container, not only the
 * workspace; they stay on the server and go with the instance). sbx's portable snapshots
 * (sbx_session_snapshot) are the other kind. Each call is SBX_E_UNSUPPORTED for a session of
 * another provider. Names: 1-63 letters, digits, '-', '_' and '.'. */

/* Take snapshot name of the instance (running: its disk as it is now). */
SBX_API int sbx_lxd_snapshot_create(struct sbx_session *s, const char *name, struct sbx_error *err);
/* Put the instance back to snapshot name (a running instance is restarted by the server). */
SBX_API int sbx_lxd_snapshot_restore(struct sbx_session *s, const char *name,
                                     struct sbx_error *err);
/* The names of the instance's snapshots, oldest first, as a JSON array. *out: caller owns. */
SBX_API int sbx_lxd_snapshot_list(struct sbx_session *s, json_t **out, struct sbx_error *err);
SBX_API int sbx_lxd_snapshot_delete(struct sbx_session *s, const char *name, struct sbx_error *err);

#endif
