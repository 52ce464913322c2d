/* The Kubernetes provider's client and sessions, shared by client.c (finding, sessions,
 * waiting, listing, removing), create.c and lifecycle.c (stop, start, resume, the provider's
 * entry). Private to src/providers/kubernetes/. */
#ifndef SBX_PROVIDERS_KUBERNETES_CLIENT_H
#define SBX_PROVIDERS_KUBERNETES_CLIENT_H

#include <pthread.h>
#include <stdint.h>
#include <jansson.h>

#include "providers/kubernetes/api.h"

#define SBX__KC_ID_LEN (2 * SBX__KUBE_ID_BYTES)
#define SBX__KC_ANN(x) SBX__KUBE_ANN_PREFIX x

struct kclient {
    struct sbx_client base;
    struct sbx__kube_api *api;
    char *image, *warm_pool, *template_name, *runtime_class, *storage_class;
    enum sbx_kube_workload workload;
    uint64_t memory, cpu_millis, disk;
    int64_t run_as_user, ready_ms;
    int ports[SBX_KUBE_MAX_EXPOSED_PORTS];
    size_t n_ports;
    json_t *options; /* what a state records of them */
    pthread_mutex_t lock;
    struct sbx__kube_watch *pods, *claims; /* made on first use, one each */
};

struct ksession {
    struct sbx_session base;
    struct sbx__kube_target t; /* strings owned */
    char *kind, *name, *uid, *sandbox;
    json_t *state;
    char *ws_dir;         /* the workspace copied to this host for a snapshot, or NULL */
    int ws_fd;            /* its fd, -1 */
    struct kbatch *batch; /* materialisation's writes not sent yet (files.c), or NULL */
};

/* A sandbox as the cluster shows it: its top object. */
struct top {
    const char *kind; /* "Sandbox", "SandboxClaim", "Pod", or "PersistentVolumeClaim" */
    json_t *obj;      /* owned */
    const char *id;   /* borrowed from obj */
};

/* 16 hex digits (prefix: 1 to 16). */
int sbx__kc_valid_id(const char *id, int prefix);
/* Each top object labelled with id (NULL: every sbx id) to fn, page by page (t borrowed for
 * the call): Sandboxes, claims, bare pods, then the volume claims of stopped bare pods. fn
 * returns 0 to go on, 1 to stop, or -code. */
typedef int sbx__kc_top_fn(const struct top *t, void *ud, struct sbx_error *err);
int sbx__kc_each_top(struct kclient *c, const char *id, sbx__kc_top_fn *fn, void *ud,
                     struct sbx_error *err);
/* The one sandbox prefix names (SBX_E_NOTFOUND, SBX_E_INVAL when ambiguous). */
int sbx__kc_find(struct kclient *c, const char *prefix, struct top *top, struct sbx_error *err);
/* Whether it runs and its pod's name (caller frees); *sb (may be NULL) its Sandbox. */
int sbx__kc_running_pod(struct kclient *c, const struct top *t, int *running, char **pod,
                        json_t **sb, struct sbx_error *err);
json_t *sbx__kc_state_of(struct kclient *c, const struct top *t, const char *pod);
int sbx__kc_session_of(struct kclient *c, const struct top *t, const char *pod,
                       struct sbx_session **out, struct sbx_error *err);
void sbx__kc_sess_free(struct sbx_session *bs);
/* The client's shared watch of pods or claims. */
struct sbx__kube_watch *sbx__kc_watch_of(struct kclient *c, enum sbx__kube_kind k);
int sbx__kc_wait_ready(struct kclient *c, const char *id, int64_t deadline, struct sbx_error *err);
int sbx__kc_wait_gone(struct kclient *c, const char *id, struct sbx_error *err);
/* A wait's test: the claim names its sandbox, or failed. */
int sbx__kc_claim_bound(const json_t *claims, void *ud, struct sbx_error *err);
int sbx__kc_delete_top(struct kclient *c, const struct top *t, struct sbx_error *err);

/* Send the writes materialisation batched (files.c): before any other operation. */
int sbx__kube_flush(struct sbx_session *bs, struct sbx_error *err);
/* Drop a batch without sending it. */
void sbx__kube_batch_drop(struct ksession *s);

/* Snapshots through a host directory (snapshot.c): the session's workspace_fd, its drop, and
 * a snapshot restored into the fresh workspace. */
int sbx__kube_workspace_fd(struct sbx_session *bs, int *out, struct sbx_error *err);
void sbx__kube_workspace_drop(struct ksession *s);
struct sbx_snapshot_store;
int sbx__kube_workspace_restore(struct ksession *s, struct sbx_snapshot_store *st, const char *ref,
                                sbx_progress_fn *progress, void *progress_data,
                                struct sbx_error *err);

/* The client ops (client.c, create.c, lifecycle.c). */
int sbx__kc_create(struct sbx_client *bc, const struct sbx_create_spec *spec,
                   struct sbx_session **out, struct sbx_error *err);
int sbx__kc_attach(struct sbx_client *bc, const char *prefix, struct sbx_session **out,
                   struct sbx_error *err);
int sbx__kc_list(struct sbx_client *bc, json_t **out, struct sbx_error *err);
int sbx__kc_remove(struct sbx_client *bc, const char *prefix, int keep_workspace,
                   struct sbx_error *err);
int sbx__kc_stop(struct sbx_client *bc, const char *prefix, char **out_ref, struct sbx_error *err);
void sbx__kc_free(struct sbx_client *bc);
/* A client over api alone (a session closing itself), with default options. */
int sbx__kc_client_for(struct sbx__kube_api *api, struct sbx_client **out, struct sbx_error *err);

#endif
