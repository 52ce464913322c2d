/* The Kubernetes provider's private interface (docs/internals/kubernetes-provider.md): its
 * options (options.c), the objects it sends and reads (objects.c), the API server client
 * (api.c), the shared watch (watch.c), commands (exec.c), files (files.c), port forwards
 * (forward.c) and the client and sessions (client.c). Only this folder and its unit tests
 * include it. */
#ifndef SBX_PROVIDERS_KUBERNETES_KUBE_H
#define SBX_PROVIDERS_KUBERNETES_KUBE_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "sandbox/provider.h"
#include "sbx/error.h"
#include "sbx/kubernetes.h"

/* agent-sandbox's API groups (v0.5.x) */
#define SBX__KUBE_SANDBOX_GROUP "agents.x-k8s.io"
#define SBX__KUBE_EXT_GROUP     "extensions.agents.x-k8s.io"
#define SBX__KUBE_SANDBOX_GV    SBX__KUBE_SANDBOX_GROUP "/v1beta1"
#define SBX__KUBE_EXT_GV        SBX__KUBE_EXT_GROUP "/v1beta1"

/* sbx's labels and annotations on everything it makes. */
#define SBX__KUBE_LABEL_ID       "sbx.io/id"
#define SBX__KUBE_LABEL_MANAGED  "app.kubernetes.io/managed-by"
#define SBX__KUBE_LABEL_BARE     "sbx.io/workload" /* "pod" on a bare pod */
#define SBX__KUBE_LABEL_TEMPLATE "sbx.io/template"
#define SBX__KUBE_ANN_PREFIX     "sbx.io/"

#define SBX__KUBE_CONTAINER "sandbox"
#define SBX__KUBE_VOLUME    "workspace"
#define SBX__KUBE_GRACE_S   2
/* The container's first process: waits, and ends at once on SIGTERM. */
#define SBX__KUBE_IDLE "trap 'exit 0' TERM; while :; do sleep 2147483647 & wait $!; done"

#define SBX__KUBE_ID_BYTES     8 /* sandbox ids: 16 hex digits, like local ones */
#define SBX__KUBE_DEFAULT_MEM  ((uint64_t)2 << 30)
#define SBX__KUBE_DEFAULT_CPU  1000
#define SBX__KUBE_DEFAULT_DISK ((uint64_t)1 << 30)
#define SBX__KUBE_DEFAULT_UID  1000
#define SBX__KUBE_READY_MS     300000
#define SBX__KUBE_REQUEST_MS   60000
#define SBX__KUBE_MANIFEST_MAX ((size_t)64 << 10) /* the manifest kept in an annotation */

/* ---- options (options.c) ---- */

extern const struct sbx_provider_option sbx__kube_options[];
int sbx__kube_options_check(const json_t *options, struct sbx_error *err);
int sbx__kube_client_new_json(const json_t *options, struct sbx_client **out,
                              struct sbx_error *err);
int sbx__kube_probe(json_t **out, struct sbx_error *err);
/* The rules of struct sbx_kube_options the types do not say (client.c). */
int sbx__kube_options_valid(const struct sbx_kube_options *o, struct sbx_error *err);
/* The typed constructor (client.c). */
int sbx__kube_client_new(const void *opts, struct sbx_client **out, struct sbx_error *err);

/* ---- objects (objects.c) ---- */

/* What a new sandbox's objects are made of; limits resolved (defaults applied). */
struct sbx__kube_spec {
    const char *id;   /* sbx's id (16 hex digits) */
    const char *name; /* the object's name: "sbx-<id>" */
    const char *namespace_name;
    const char *root; /* the workspace path in the container */
    const char *image;
    const char *runtime_class;   /* or NULL */
    uint64_t memory, cpu_millis; /* SBX_KUBE_LIMIT_NONE: none */
    uint64_t disk;               /* SBX_KUBE_LIMIT_NONE: an emptyDir */
    const char *storage_class;   /* or NULL */
    int64_t run_as_user;         /* a uid, or SBX_KUBE_IMAGE_USER */
    const json_t *env;           /* [{"name", "value"}], or NULL */
    const json_t *annotations;   /* sbx's annotations of the top object, or NULL */
};

char *sbx__kube_bytes_quantity(uint64_t n);
char *sbx__kube_cpu_quantity(uint64_t millis);
/* The pod template ({"metadata", "spec"}); bare: the pod names its claim itself. */
json_t *sbx__kube_pod_template(const struct sbx__kube_spec *s, int bare);
/* A Sandbox with sbx's pod template and a volume claim template for the workspace. */
json_t *sbx__kube_sandbox_object(const struct sbx__kube_spec *s);
/* A bare Pod (labelled sbx.io/workload=pod) and its workspace's claim "workspace-<name>". */
json_t *sbx__kube_pod_object(const struct sbx__kube_spec *s);
json_t *sbx__kube_pvc_object(const struct sbx__kube_spec *s);
/* A SandboxClaim on warm pool pool; sbx's labels go to the pod it gets. */
json_t *sbx__kube_claim_object(const struct sbx__kube_spec *s, const char *pool);
/* A Sandbox of SandboxTemplate tmpl's pod template and claim templates, with sbx's labels. */
int sbx__kube_sandbox_from_template(const json_t *tmpl, const struct sbx__kube_spec *s,
                                    json_t **out, struct sbx_error *err);

/* The condition of that type in obj's status, or NULL; whether it is "True". */
const json_t *sbx__kube_condition(const json_t *obj, const char *type);
int sbx__kube_condition_true(const json_t *obj, const char *type);
/* A pod that runs and is Ready (and is not being deleted). */
int sbx__kube_pod_ready(const json_t *pod);
/* 1 with out filled when the pod will not run without a change (its image cannot be pulled,
 * its container keeps failing, it ended); 0 while it may still start. */
int sbx__kube_pod_failure(const json_t *pod, char *out, size_t n);
/* Why a pod is not running yet, from its phase, conditions and container states and the
 * newest Warning of events (an EventList, may be NULL). */
void sbx__kube_pod_pending_why(const json_t *pod, const json_t *events, char *out, size_t n);

#endif
