/* sbx: the Kubernetes provider ("kubernetes"): each sandbox is one pod of a Kubernetes cluster,
 * made through the API server with the credentials of a kubeconfig context or of the service
 * account of the pod sbx runs in. docs/internals/kubernetes-provider.md describes it.
 *
 * Where the cluster has kubernetes-sigs/agent-sandbox (the agents.x-k8s.io CRDs), a sandbox
 * is a Sandbox object named sbx-<id> with sbx's pod template and a volume claim for the
 * workspace, or a SandboxClaim on a warm pool; without the CRDs it is a bare Pod and its
 * PersistentVolumeClaim. Every object carries the label sbx.io/id=<id>. Commands, terminals
 * and file transfers go through pods/exec (WebSocket, v5.channel.k8s.io, else v4), ports
 * through pods/portforward; stop and start suspend and resume the Sandbox (the workspace stays
 * on its volume). Nothing is kept on this host but sbx's record of the sandbox: any process
 * with the same kubeconfig context attaches to it by id. */
#ifndef SBX_KUBERNETES_H
#define SBX_KUBERNETES_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "error.h"
#include "session.h"

#define SBX_KUBE_MAX_EXPOSED_PORTS 64

/* Limit value meaning "no limit at all". */
#define SBX_KUBE_LIMIT_NONE UINT64_MAX
/* run_as_user: the image's own user (possibly root). */
#define SBX_KUBE_IMAGE_USER (-1)

/* What a new sandbox is made as. */
enum sbx_kube_workload {
    SBX_KUBE_WORKLOAD_AUTO = 0, /* a Sandbox where the cluster has agent-sandbox, else a Pod */
    SBX_KUBE_WORKLOAD_SANDBOX,  /* a Sandbox; SBX_E_UNSUPPORTED without the CRDs */
    SBX_KUBE_WORKLOAD_POD,      /* a bare Pod (+ PersistentVolumeClaim) */
};

/* All zero is the default. Strings are borrowed for the duration of sbx_client_new (copied).
 * The provider's declared options (sbx/provider.h) are the same, as JSON for
 * sbx_client_new_json. */
struct sbx_kube_options {
    /* Credentials: a kubeconfig file (or a ':'-separated list, merged as kubectl does); NULL:
     * $KUBECONFIG, else ~/.kube/config, else (inside a pod) its service account. context: one
     * of its contexts instead of current-context. in_cluster: the service account of the pod
     * sbx runs in (/var/run/secrets/kubernetes.io/serviceaccount). Exec plugins and
     * auth-providers are refused (SBX_E_UNSUPPORTED naming them): sbx runs no command of a
     * kubeconfig. */
    const char *kubeconfig;
    const char *context;
    int in_cluster;
    /* The namespace of the sandboxes; NULL: the context's, else "default". */
    const char *namespace_name;
    /* What a sandbox runs: an image (with the limits below), or the name of an agent-sandbox
     * SandboxWarmPool (a SandboxClaim on it) or SandboxTemplate (a Sandbox of its pod
     * template). create needs one of the three (SBX_E_INVAL otherwise). */
    const char *image;
    const char *warm_pool;
    const char *template_name;
    enum sbx_kube_workload workload;
    /* The pod's RuntimeClass (gVisor, Kata: runtimeClassName), or NULL. */
    const char *runtime_class;
    /* Limits of the sandbox's container (requests and limits alike); 0: memory 2 GiB, CPU one;
     * SBX_KUBE_LIMIT_NONE: unlimited. The number of processes is the kubelet's podPidsLimit. */
    uint64_t memory_bytes;
    uint64_t cpu_millis;
    /* The workspace's volume claim: its size (0: 1 GiB; SBX_KUBE_LIMIT_NONE: no volume, the
     * workspace is an emptyDir that a stop loses) and storage class (NULL: the cluster's
     * default). */
    uint64_t disk_bytes;
    const char *storage_class;
    /* The user id commands run as: 0 means the default, 1000 (fsGroup too, so the workspace
     * volume is writable); SBX_KUBE_IMAGE_USER runs them as the image says (root for many). */
    int64_t run_as_user;
    /* Ports sbx_session_resolve_port may reach (through pods/portforward and a relay on this
     * host); none given: any. */
    const int *exposed_ports;
    size_t n_exposed_ports;
    /* How long create waits for the pod to be ready before it says why it is not; 0: 300 s. */
    int64_t ready_timeout_ms;
    /* Bound on each API call that is not a command's own run time; 0: 60 s. */
    int64_t request_timeout_ms;
};

#endif
