/* sbx: the Docker provider ("docker"): each sandbox is a container of a Docker Engine, or of
 * podman's Docker-compatible service, driven over the Engine API on a unix socket (no docker
 * program is run). docs/internals/docker-provider.md describes how each session operation maps
 * to the API.
 *
 * A sandbox is one container named "sbx-<id>" and labelled io.sbx.id=<id> (plus io.sbx.root,
 * the workspace path inside, and io.sbx.version); its first process is an init that reaps
 * orphans and waits. The manifest is materialised into the container's workspace through the
 * archive API by the same code that fills a local workspace. Like a local sandbox it outlives
 * the process that created it: any later process attaches to it by id through the same
 * daemon. */
#ifndef SBX_DOCKER_H
#define SBX_DOCKER_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "error.h"
#include "session.h"

enum sbx_docker_network {
    SBX_DOCKER_NETWORK_DEFAULT = 0, /* none */
    SBX_DOCKER_NETWORK_NONE,        /* loopback only ("none"); ports still resolve, see below */
    SBX_DOCKER_NETWORK_BRIDGE,      /* the engine's default bridge (opt-in) */
    SBX_DOCKER_NETWORK_HOST,        /* the host network (dangerous, opt-in) */
};

#define SBX_DOCKER_MAX_CAPS          64
#define SBX_DOCKER_MAX_EXPOSED_PORTS 64

/* Limit value meaning "no limit at all". */
#define SBX_DOCKER_LIMIT_NONE UINT64_MAX
/* The writable layer's size limit by default (sbx_docker_options.disk_bytes), and its bounds:
 * those of the local provider's workspace. */
#define SBX_DOCKER_DISK_DEFAULT ((uint64_t)8 << 30)
#define SBX_DOCKER_DISK_MIN     ((uint64_t)16 << 20)
#define SBX_DOCKER_DISK_MAX     ((uint64_t)16 << 40)

/* All zero is the default. Strings are borrowed for the duration of sbx_client_new (copied).
 * The provider's declared options (sbx/provider.h: image, host, tls_ca, tls_cert, tls_key, user,
 * network, memory, pids, cpus, disk, ports, cap_add, allow_cap_add) are the same, as JSON for
 * sbx_client_new_json. */
struct sbx_docker_options {
    /* The engine: "unix:///path/to.sock", an absolute socket path, or "tcp://HOST:PORT" (a remote
     * engine); NULL: $DOCKER_HOST, else unix:///var/run/docker.sock. ssh:// is
     * SBX_E_UNSUPPORTED. */
    const char *host;
    /* A tcp:// engine's TLS: the CA that signed its certificate, and the client certificate and
     * key it trusts (dockerd --tlsverify), PEM files. None given: those of $DOCKER_CERT_PATH
     * (ca.pem, cert.pem, key.pem; default ~/.docker) when $DOCKER_TLS_VERIFY is set, as the
     * docker CLI reads them; else plain HTTP. No CA: the system's CAs. */
    const char *tls_ca;
    const char *tls_cert;
    const char *tls_key;
    /* Image of new sandboxes ("debian:bookworm", "localhost/img:tag", an image id). Required by
     * create (SBX_E_INVAL "no image: ..." without one); it must already be in the engine's
     * store: sbx never pulls (SBX_E_NOTFOUND names the image and how to get it). */
    const char *image;
    /* User commands run as when the manifest declares none: "name", "uid" or "uid:gid" as the
     * image knows it; NULL: the image's default user. */
    const char *user;
    enum sbx_docker_network network;
    /* Resource limits of the container; 0: memory 2 GiB, pids 1024, CPU half the host's CPUs
     * (at least one); SBX_DOCKER_LIMIT_NONE: unlimited. */
    uint64_t memory_bytes;
    uint64_t pids;
    uint64_t cpu_millis; /* thousandths of a CPU */
    /* Size limit of the container's writable layer, where its workspace lives, in bytes: 0 is
     * SBX_DOCKER_DISK_DEFAULT, SBX_DOCKER_LIMIT_NONE none. Asked of the engine as
     * HostConfig.StorageOpt size, which only some storage drivers enforce (overlay2 on xfs
     * mounted with pquota, btrfs, zfs). Where the engine refuses it, a limit given here fails
     * create; the default one is dropped with a warning, and the state says so ("disk":
     * {"limit", "enforced": false, "reason"}, and "unenforced"). */
    uint64_t disk_bytes;
    /* Capabilities beyond the engine's default set ("NET_ADMIN"): refused (SBX_E_PERM) unless
     * allow_cap_add is set, since each widens what code in the sandbox can do to the host. */
    const char *const *cap_add;
    size_t n_cap_add;
    int allow_cap_add;
    /* Ports: sbx_session_resolve_port(PORT) gives http://127.0.0.1:HOSTPORT, served by a small
     * relay process on this host that enters the container's network namespace and connects
     * to 127.0.0.1:PORT there, whatever the network mode; it ends with the container. So no
     * bridge is needed, but the engine must run on this host (SBX_E_UNSUPPORTED otherwise).
     * When n_exposed_ports > 0, only these resolve. */
    const int *exposed_ports;
    size_t n_exposed_ports;
    /* Safety bound on each API call that is not a command's own run time; 0: 60 s. */
    int64_t request_timeout_ms;
};

#endif
