/* The Kubernetes provider's client of the API server (api.c), its shared watch (watch.c) and
 * its commands in pods (exec.c). Private to src/providers/kubernetes/. */
#ifndef SBX_PROVIDERS_KUBERNETES_API_H
#define SBX_PROVIDERS_KUBERNETES_API_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <jansson.h>

#include "providers/kubernetes/kube.h"
#include "sandbox/wire/endpoint.h"
#include "sandbox/wire/http.h"
#include "sbx/buf.h"
#include "sbx/error.h"

#define SBX__KUBE_PAGE     500    /* items per page of a list */
#define SBX__KUBE_LIST_MAX 100000 /* items of one list, all pages */

enum sbx__kube_kind {
    SBX__KUBE_POD,
    SBX__KUBE_PVC,
    SBX__KUBE_EVENT,
    SBX__KUBE_SANDBOX,
    SBX__KUBE_CLAIM,
    SBX__KUBE_TEMPLATE,
    SBX__KUBE_SECRET,
};

/* One API server, namespace and identity; shared by a client and its sessions (refcounted).
 * Immutable after discovery (done once, by the client that makes it). */
struct sbx__kube_api {
    atomic_int refs;
    struct sbx__endpoint *ep;
    char *namespace_name;
    char *context; /* the kubeconfig context ("in-cluster" for a service account) */
    char *user;    /* the kubeconfig user, for messages */
    char *server;
    char *kubeconfig; /* the kubeconfig option as given, or NULL */
    int in_cluster;
    int has_sandbox, has_claims; /* agent-sandbox's groups are served (-1: not asked yet) */
};

/* Read the credentials o names and make the endpoint (nothing is sent yet). */
int sbx__kube_api_new(const struct sbx_kube_options *o, struct sbx__kube_api **out,
                      struct sbx_error *err);
struct sbx__kube_api *sbx__kube_api_ref(struct sbx__kube_api *a);
void sbx__kube_api_free(struct sbx__kube_api *a);

/* The path of kind k in the namespace (name, subresource and query optional, the name escaped,
 * the query as given). Caller frees. */
char *sbx__kube_path(const struct sbx__kube_api *a, enum sbx__kube_kind k, const char *name,
                     const char *sub, const char *query);
/* How RBAC names kind k ("sandboxes.agents.x-k8s.io"). */
const char *sbx__kube_kind_resource(enum sbx__kube_kind k);

struct sbx__kube_req {
    const char *method;
    const char *verb; /* what RBAC calls it: a 403 names it */
    enum sbx__kube_kind kind;
    const char *name, *sub, *query;
    const json_t *body;
    const char *content_type; /* NULL: application/json */
    size_t max_body;          /* 0: the remote layer's default */
};

/* One request; an error status is the remote layer's error, a 403 with what RBAC must allow.
 * *out (may be NULL): the answer (NULL when empty), caller owns. */
int sbx__kube_call(struct sbx__kube_api *a, const struct sbx__kube_req *r, json_t **out,
                   struct sbx_error *err);
int sbx__kube_get(struct sbx__kube_api *a, enum sbx__kube_kind k, const char *name, json_t **out,
                  struct sbx_error *err);
int sbx__kube_create(struct sbx__kube_api *a, enum sbx__kube_kind k, const json_t *obj,
                     json_t **out, struct sbx_error *err);
/* A JSON merge patch. */
int sbx__kube_patch(struct sbx__kube_api *a, enum sbx__kube_kind k, const char *name,
                    const json_t *patch, json_t **out, struct sbx_error *err);
/* Delete with background propagation (the garbage collector removes what it owns). */
int sbx__kube_delete(struct sbx__kube_api *a, enum sbx__kube_kind k, const char *name,
                     struct sbx_error *err);
/* Each item of a list, borrowed for the call: 0 to go on, 1 to stop (not an error), or -code. */
typedef int sbx__kube_item_fn(json_t *item, void *ud, struct sbx_error *err);
/* The items of kind k matching the label and field selectors (may be NULL), page by page, to
 * fn as each page comes (at most a page is held); 1 when fn stopped it. *out_rv (may be NULL)
 * as below. */
int sbx__kube_list_each(struct sbx__kube_api *a, enum sbx__kube_kind k, const char *selector,
                        const char *fields, sbx__kube_item_fn *fn, void *ud, char **out_rv,
                        struct sbx_error *err);
/* Every item of kind k matching the label and field selectors (may be NULL), page by page;
 * *out an array (caller owns); *out_rv (may be NULL) the list's resourceVersion (caller frees). */
int sbx__kube_list(struct sbx__kube_api *a, enum sbx__kube_kind k, const char *selector,
                   const char *fields, json_t **out, char **out_rv, struct sbx_error *err);
/* err's message followed by the RBAC verb and resource sbx needs (SBX_E_PERM). */
int sbx__kube_forbidden(const struct sbx__kube_api *a, const char *verb, const char *resource,
                        struct sbx_error *err);
/* Whether agent-sandbox's groups are served (fills has_sandbox, has_claims once). */
int sbx__kube_discover(struct sbx__kube_api *a, struct sbx_error *err);

/* Fields of an object (borrowed, NULL when absent). */
const char *sbx__kube_label_of(const json_t *obj, const char *key);
const char *sbx__kube_annotation_of(const json_t *obj, const char *key);
const char *sbx__kube_name_of(const json_t *obj);

/* ---- the shared watch (watch.c): one stream per client and kind, never one per sandbox ---- */

struct sbx__kube_watch;

/* A watch of kind k (pods or claims) carrying sbx's id label; started on the first wait. */
struct sbx__kube_watch *sbx__kube_watch_new(struct sbx__kube_api *a, enum sbx__kube_kind k);
/* Stop it (a stream running on the loop is cancelled) and free it. Accepts NULL. */
void sbx__kube_watch_free(struct sbx__kube_watch *w);

/* What a wait looks at: the objects of sandbox id (for pods, every pod labelled with it; for
 * claims, the claim), as the watch last saw them. Return 1 when the wait is over, 0 to go on,
 * or a negative error (with err filled) to end it. */
typedef int sbx__kube_wait_fn(const json_t *objects, void *ud, struct sbx_error *err);

/* Wait until fn says so or the deadline passes (SBX_E_TIMEOUT "..."). The objects are read
 * once directly (so what happened before the wait counts), then from the watch's events.
 * *last (may be NULL): the objects fn saw last (an array; caller owns). */
int sbx__kube_watch_wait(struct sbx__kube_watch *w, const char *id, sbx__kube_wait_fn *fn, void *ud,
                         int64_t deadline, json_t **last, struct sbx_error *err);

/* Counters (benchmarks): events decoded, streams started, objects held. */
struct sbx__kube_watch_stats {
    uint64_t events, streams, relists;
    size_t objects;
};
void sbx__kube_watch_stats(struct sbx__kube_watch *w, struct sbx__kube_watch_stats *out);

/* ---- commands in the sandbox's pod (exec.c) ---- */

/* Where commands of a sandbox run (strings borrowed from the session). */
struct sbx__kube_target {
    struct sbx__kube_api *api;
    const char *pod, *container;
    const char *id;   /* the sandbox's id, for messages */
    const char *root; /* the workspace path in the container */
};

/* One of the provider's own commands, run to its end: a fixed argv (never a shell line built
 * from input), stdin from input[0..input_len) or input_fd (-1: none; read to its end, which
 * closes the command's stdin), stdout into out or to output_fd (>= 0), stderr into err. out and
 * err are bounded by their limits (SBX_E_TOOBIG). */
struct sbx__kube_run {
    const char *const *argv;
    const void *input;
    size_t input_len;
    int input_fd;
    int output_fd;
    struct sbx_buf *out, *err;
    uint64_t output_max; /* to output_fd: at most this many bytes (0: no bound) */
    int input_bounded;   /* the command reads input_len bytes and no more (no EOF needed) */
    int64_t timeout_ms;  /* 0: the API server's request timeout; -1: none */
    int code;            /* out: the exit status */
};
int sbx__kube_run(const struct sbx__kube_target *t, struct sbx__kube_run *io,
                  struct sbx_error *err);
/* The target of a session of this provider (client.c). */
const struct sbx__kube_target *sbx__kube_session_target(struct sbx_session *s);
/* A caller's command (the session op), relayed by the remote layer's loop. */
int sbx__kube_exec_start(const struct sbx__kube_target *t, const struct sbx_exec_spec *spec,
                         const char *cwd, struct sbx_proc **out, struct sbx_error *err);
/* Signal process group pid of the pod's container (SIGTERM, SIGKILL) through another exec. */
int sbx__kube_kill_group(const struct sbx__kube_target *t, pid_t pid, int sig,
                         struct sbx_error *err);

/* ---- files (files.c): the session's file ops ---- */

int sbx__kube_read_open(struct sbx_session *bs, const char *path, int *out_fd, uint64_t *out_size,
                        struct sbx_error *err);
int sbx__kube_write(struct sbx_session *bs, const char *path, const struct sbx_file_reader *r,
                    uint64_t max, mode_t mode, int flags, struct sbx_error *err);
int sbx__kube_ls(struct sbx_session *bs, const char *path, struct sbx_dirlist *out,
                 struct sbx_error *err);
int sbx__kube_stat(struct sbx_session *bs, const char *path, struct sbx_dirent *out,
                   struct sbx_error *err);
int sbx__kube_mkdir(struct sbx_session *bs, const char *path, int flags, struct sbx_error *err);
int sbx__kube_rm(struct sbx_session *bs, const char *path, int flags, struct sbx_error *err);
int sbx__kube_chmod(struct sbx_session *bs, const char *path, mode_t mode, struct sbx_error *err);
int sbx__kube_workspace_export(struct sbx_session *bs, int out_fd, struct sbx_error *err);
int sbx__kube_workspace_import(struct sbx_session *bs, int in_fd, struct sbx_error *err);
/* Records "<mode hex> <size> <uid> <gid> <mtime>\n<name>\0[<target>\0]" into out (appended;
 * the caller releases it on error too). */
int sbx__kube_parse_entries(const char *p, size_t n, struct sbx_dirlist *out,
                            struct sbx_error *err);

#endif
