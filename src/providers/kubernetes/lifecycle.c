/* Stopping, starting and resuming Kubernetes sandboxes, and the provider as the registry knows
 * it: the typed constructor, the options' own rules, the check of its session states.
 *
 * A stop suspends the sandbox (agent-sandbox's `spec.operatingMode: Suspended`: the pod goes,
 * the Sandbox and its volume stay) or, for a bare pod, deletes the pod and keeps its volume
 * claim, which holds what brings the pod back. A start does the reverse and waits until the
 * pod is ready again: the workspace is the volume's, as it was. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "providers/kubernetes/client.h"
#include "providers/kubernetes/forward.h"
#include "sbx/json.h"
#include "sbx/manifest.h"
#include "sbx/time.h"

static char *opt_dup(const char *s);

static int set_mode(struct kclient *c, const char *sandbox, const char *mode, struct sbx_error *err)
{
    json_t *patch = json_pack("{s:{s:s}}", "spec", "operatingMode", mode);
    int rc = sbx__kube_patch(c->api, SBX__KUBE_SANDBOX, sandbox, patch, NULL, err);
    json_decref(patch);
    return rc;
}

int sbx__kc_stop(struct sbx_client *bc, const char *prefix, char **out_ref, struct sbx_error *err)
{
    struct kclient *c = (struct kclient *)bc;
    struct top t = {0};
    json_t *sb = NULL;
    char *pod = NULL;
    int running = 0;
    int rc = sbx__kc_find(c, prefix, &t, err);
    if (rc == 0)
        rc = sbx__kc_running_pod(c, &t, &running, &pod, &sb, err);
    if (rc == 0 && !running)
        rc = sbx_error_set(err, SBX_E_EXISTS, 0, "sandbox '%s' is already stopped", t.id);
    if (rc == 0 && strcmp(t.kind, "Pod") == 0) {
        /* A bare pod is stopped by deleting it: only its volume claim keeps the workspace. */
        json_t *pvc = NULL;
        char *pvc_name = sbx_xasprintf("%s-sbx-%s", SBX__KUBE_VOLUME, t.id);
        rc = sbx__kube_get(c->api, SBX__KUBE_PVC, pvc_name, &pvc, err);
        if (rc == -SBX_E_NOTFOUND)
            rc = sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                               "sandbox '%s' has no workspace volume (--disk none): stopping it "
                               "would lose the workspace",
                               t.id);
        if (rc == 0)
            rc = sbx__kube_delete(c->api, SBX__KUBE_POD, pod, err);
        json_decref(pvc);
        free(pvc_name);
    } else if (rc == 0) {
        rc = set_mode(c, sbx__kube_name_of(sb), "Suspended", err);
    }
    if (rc == 0)
        rc = sbx__kc_wait_gone(c, t.id, err);
    if (rc == 0)
        rc = sbx__kube_forward_forget(t.id, err);
    /* The suspended sandbox keeps the workspace on its volume: no snapshot is taken. */
    if (rc == 0 && out_ref)
        *out_ref = NULL;
    json_decref(sb);
    json_decref(t.obj);
    free(pod);
    return rc;
}

/* A stopped bare pod made again from what its volume claim keeps. */
static int recreate_pod(struct kclient *c, const struct top *t, struct sbx_error *err)
{
    const char *text = sbx__kube_annotation_of(t->obj, SBX__KC_ANN("pod"));
    json_t *pod = text ? json_loads(text, JSON_REJECT_DUPLICATES, NULL) : NULL;
    if (!json_is_object(pod)) {
        json_decref(pod);
        return sbx_error_set(err, SBX_E_SANDBOX, 0,
                             "the volume claim of sandbox '%s' does not say what its pod was",
                             t->id);
    }
    int rc = sbx__kube_create(c->api, SBX__KUBE_POD, pod, NULL, err);
    json_decref(pod);
    return rc;
}

static int start_top(struct kclient *c, struct top *t, json_t *sb, struct sbx_session **out,
                     struct sbx_error *err)
{
    int rc = strcmp(t->kind, "PersistentVolumeClaim") == 0
                     ? recreate_pod(c, t, err)
                     : set_mode(c, sbx__kube_name_of(sb), "Running", err);
    if (rc == 0)
        rc = sbx__kc_wait_ready(c, t->id, sbx_deadline_after_ms(c->ready_ms), err);
    struct top again = {0};
    char *pod = NULL;
    int running = 0;
    if (rc == 0)
        rc = sbx__kc_find(c, t->id, &again, err);
    if (rc == 0)
        rc = sbx__kc_running_pod(c, &again, &running, &pod, NULL, err);
    if (rc == 0)
        rc = sbx__kc_session_of(c, &again, pod, out, err);
    free(pod);
    json_decref(again.obj);
    return rc;
}

static int kc_start(struct sbx_client *bc, const char *prefix, const struct sbx_resume_opts *opts,
                    struct sbx_session **out, struct sbx_error *err)
{
    struct kclient *c = (struct kclient *)bc;
    struct top t = {0};
    json_t *sb = NULL;
    char *pod = NULL;
    int running = 0;
    (void)opts;
    int rc = sbx__kc_find(c, prefix, &t, err);
    if (rc == 0)
        rc = sbx__kc_running_pod(c, &t, &running, &pod, &sb, err);
    if (rc == 0)
        rc = running ? sbx__kc_session_of(c, &t, pod, out, err) : start_top(c, &t, sb, out, err);
    json_decref(sb);
    json_decref(t.obj);
    free(pod);
    return rc;
}

static int kc_stopped_state(struct sbx_client *bc, const char *prefix, json_t **out,
                            struct sbx_error *err)
{
    struct kclient *c = (struct kclient *)bc;
    struct top t = {0};
    char *pod = NULL;
    int running = 0;
    int rc = sbx__kc_find(c, prefix, &t, err);
    if (rc == 0)
        rc = sbx__kc_running_pod(c, &t, &running, &pod, NULL, err);
    if (rc == 0 && running)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "sandbox '%s' is not stopped", t.id);
    if (rc == 0) {
        *out = sbx__kc_state_of(c, &t, NULL);
        sbx_json_set(*out, "status", sbx_json_str("stopped"));
    }
    json_decref(t.obj);
    free(pod);
    return rc;
}

/* A gone sandbox made again from its state: the same id, the state's manifest (or the
 * caller's trusted one), the snapshot's content; the client's own options (trusted
 * configuration) rather than the state's. */
static int rebuild(struct sbx_client *bc, const json_t *state, const char *snap,
                   const struct sbx_resume_opts *opts, struct sbx_session **out,
                   struct sbx_error *err)
{
    struct sbx_manifest *m = NULL;
    const json_t *mj = json_object_get(state, "manifest");
    int rc = 0;
    if (!opts->manifest && json_is_object(mj)) {
        struct sbx_manifest_load_opts lo = {.base_dir = opts->base_dir ? opts->base_dir : ".",
                                            .flags = SBX_MANIFEST_NO_HOST_CHECKS};
        if ((rc = sbx_manifest_from_json(mj, &lo, &m, err)) < 0) {
            sbx_error_prefix(err, "session state: field 'manifest'");
            return rc;
        }
    }
    struct sbx_create_spec spec = {
            .manifest = opts->manifest ? opts->manifest : m,
            .base_dir = opts->base_dir,
            .pass_secrets = opts->pass_secrets,
            .snapshot = snap,
            .id = json_string_value(json_object_get(state, "id")),
            .progress = opts->progress,
            .progress_data = opts->progress_data,
    };
    /* What it runs: the client's, else what the state says it ran (an image is no privilege). */
    struct kclient *c = (struct kclient *)bc;
    struct sbx_client *use = bc;
    const json_t *so = json_object_get(state, "options");
    if (!c->image && !c->warm_pool && !c->template_name &&
        (rc = sbx__kc_client_for(c->api, &use, err)) == 0) {
        struct kclient *t = (struct kclient *)use;
        t->image = opt_dup(json_string_value(json_object_get(so, "image")));
        t->warm_pool = opt_dup(json_string_value(json_object_get(so, "warm_pool")));
        t->template_name = opt_dup(json_string_value(json_object_get(so, "template")));
        t->runtime_class = opt_dup(c->runtime_class);
        t->storage_class = opt_dup(c->storage_class);
        t->workload = c->workload;
        t->memory = c->memory;
        t->cpu_millis = c->cpu_millis;
        t->disk = c->disk;
        t->run_as_user = c->run_as_user;
        t->ready_ms = c->ready_ms;
        memcpy(t->ports, c->ports, sizeof(c->ports));
        t->n_ports = c->n_ports;
        json_decref(t->options);
        t->options = json_deep_copy(c->options);
    }
    if (rc == 0)
        rc = sbx__kc_create(use, &spec, out, err);
    if (use != bc)
        sbx__kc_free(use);
    sbx_manifest_free(m);
    return rc;
}

static int kc_resume(struct sbx_client *bc, const json_t *state, const struct sbx_resume_opts *opts,
                     struct sbx_session **out, struct sbx_error *err)
{
    struct kclient *c = (struct kclient *)bc;
    const char *id = json_string_value(json_object_get(state, "id"));
    const char *snap = json_string_value(json_object_get(state, "snapshot"));
    struct top t = {0};
    if (json_object_get(state, "node_id"))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "sandbox '%s' runs in an sbx-node pod: resume it with --node sbx-node "
                             "and the --node-* options",
                             id);
    int rc = sbx__kc_find(c, id, &t, err);
    json_decref(t.obj);
    if (rc == -SBX_E_NOTFOUND && snap)
        return rebuild(bc, state, snap, opts, out, err);
    if (rc == -SBX_E_NOTFOUND)
        return sbx_error_set(err, SBX_E_NOTFOUND, 0,
                             "sandbox '%s' is gone and its state has no snapshot", id);
    if (rc < 0)
        return rc;
    return kc_start(bc, id, opts, out, err);
}

static const struct sbx_client_ops client_ops = {
        .create = sbx__kc_create,
        .attach = sbx__kc_attach,
        .list = sbx__kc_list,
        .remove = sbx__kc_remove,
        .resume = kc_resume,
        .stop = sbx__kc_stop,
        .start = kc_start,
        .stopped_state = kc_stopped_state,
        .free = sbx__kc_free,
};

/* ---------------------------------------------------------------------------------------------
 * The client */

static int dns_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 253)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-' || ch == '.'))
            return 0;
    }
    return s[0] != '-' && s[0] != '.' && s[n - 1] != '-' && s[n - 1] != '.';
}

int sbx__kube_options_valid(const struct sbx_kube_options *o, struct sbx_error *err)
{
    int given = !!o->image + !!o->warm_pool + !!o->template_name;
    if (given > 1)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "give one of image, warm_pool and template, not %d of them", given);
    if (o->image && !o->image[0])
        return sbx_error_set(err, SBX_E_INVAL, 0, "empty image name");
    const char *names[] = {o->warm_pool, o->template_name, o->runtime_class, o->storage_class};
    const char *keys[] = {"warm_pool", "template", "runtime_class", "storage_class"};
    for (size_t i = 0; i < 4; i++)
        if (names[i] && !dns_name(names[i]))
            return sbx_error_set(err, SBX_E_INVAL, 0, "%s '%s' is not a Kubernetes object name",
                                 keys[i], names[i]);
    if ((o->warm_pool || o->template_name) && o->workload == SBX_KUBE_WORKLOAD_POD)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "a warm pool or a template makes agent-sandbox objects, not a bare "
                             "pod (--workload pod)");
    if (o->workload > SBX_KUBE_WORKLOAD_POD)
        return sbx_error_set(err, SBX_E_INVAL, 0, "unknown workload %d", (int)o->workload);
    if (o->n_exposed_ports > SBX_KUBE_MAX_EXPOSED_PORTS)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "more than %d exposed ports",
                             SBX_KUBE_MAX_EXPOSED_PORTS);
    for (size_t i = 0; i < o->n_exposed_ports; i++)
        if (!o->exposed_ports || o->exposed_ports[i] < 1 || o->exposed_ports[i] > 65535)
            return sbx_error_set(err, SBX_E_INVAL, 0, "exposed port %d is not in 1..65535",
                                 o->exposed_ports ? o->exposed_ports[i] : 0);
    if (o->run_as_user < SBX_KUBE_IMAGE_USER || o->run_as_user > 2147483647)
        return sbx_error_set(err, SBX_E_INVAL, 0, "run_as_user %lld is not a user id",
                             (long long)o->run_as_user);
    if (o->ready_timeout_ms < 0 || o->request_timeout_ms < 0)
        return sbx_error_set(err, SBX_E_INVAL, 0, "timeouts must not be negative");
    return 0;
}

static char *opt_dup(const char *s)
{
    return s && s[0] ? sbx_xstrdup(s) : NULL;
}

static json_t *options_json(const struct kclient *c)
{
    json_t *o = json_object();
    if (c->image)
        sbx_json_set(o, "image", sbx_json_str(c->image));
    if (c->warm_pool)
        sbx_json_set(o, "warm_pool", sbx_json_str(c->warm_pool));
    if (c->template_name)
        sbx_json_set(o, "template", sbx_json_str(c->template_name));
    if (c->runtime_class)
        sbx_json_set(o, "runtime_class", sbx_json_str(c->runtime_class));
    const uint64_t vals[] = {c->memory, c->cpu_millis, c->disk};
    static const char *const names[] = {"memory", "cpu_millis", "disk"};
    for (size_t i = 0; i < 3; i++)
        sbx_json_set(o, names[i],
                     vals[i] == SBX_KUBE_LIMIT_NONE ? sbx_json_str("none")
                                                    : json_integer((json_int_t)vals[i]));
    sbx_json_set(o, "run_as_user",
                 c->run_as_user == SBX_KUBE_IMAGE_USER ? sbx_json_str("none")
                                                       : json_integer((json_int_t)c->run_as_user));
    return o;
}

static struct kclient *client_alloc(struct sbx__kube_api *api)
{
    struct kclient *c = sbx_xcalloc(1, sizeof(*c));
    c->base.ops = &client_ops;
    c->base.provider = "kubernetes";
    c->api = api;
    pthread_mutex_init(&c->lock, NULL);
    c->memory = SBX__KUBE_DEFAULT_MEM;
    c->cpu_millis = SBX__KUBE_DEFAULT_CPU;
    c->disk = SBX__KUBE_DEFAULT_DISK;
    c->run_as_user = SBX__KUBE_DEFAULT_UID;
    c->ready_ms = SBX__KUBE_READY_MS;
    return c;
}

int sbx__kc_client_for(struct sbx__kube_api *api, struct sbx_client **out, struct sbx_error *err)
{
    (void)err;
    struct kclient *c = client_alloc(sbx__kube_api_ref(api));
    c->options = options_json(c);
    *out = &c->base;
    return 0;
}

int sbx__kube_client_new(const void *vopts, struct sbx_client **out, struct sbx_error *err)
{
    const struct sbx_kube_options none = {0};
    const struct sbx_kube_options *o = vopts ? vopts : &none;
    struct sbx__kube_api *api = NULL;
    int rc = sbx__kube_options_valid(o, err);
    if (rc == 0)
        rc = sbx__kube_api_new(o, &api, err);
    if (rc < 0)
        return rc;
    struct kclient *c = client_alloc(api);
    c->image = opt_dup(o->image);
    c->warm_pool = opt_dup(o->warm_pool);
    c->template_name = opt_dup(o->template_name);
    c->runtime_class = opt_dup(o->runtime_class);
    c->storage_class = opt_dup(o->storage_class);
    c->workload = o->workload;
    if (o->memory_bytes)
        c->memory = o->memory_bytes;
    if (o->cpu_millis)
        c->cpu_millis = o->cpu_millis;
    if (o->disk_bytes)
        c->disk = o->disk_bytes;
    if (o->run_as_user)
        c->run_as_user = o->run_as_user;
    if (o->ready_timeout_ms)
        c->ready_ms = o->ready_timeout_ms;
    for (size_t i = 0; i < o->n_exposed_ports; i++)
        c->ports[c->n_ports++] = o->exposed_ports[i];
    c->options = options_json(c);
    *out = &c->base;
    return 0;
}

/* The kubernetes-specific part of a session state. */
static int check_state(const json_t *st, struct sbx_error *err)
{
    const char *id = NULL, *ns = NULL, *kind = NULL, *name = NULL, *root = NULL, *ctx = NULL;
    int rc;
    if ((rc = sbx_json_get_string(st, "id", 1, &id, err)) < 0 ||
        (rc = sbx_json_get_string(st, "namespace", 1, &ns, err)) < 0 ||
        (rc = sbx_json_get_string(st, "kind", 1, &kind, err)) < 0 ||
        (rc = sbx_json_get_string(st, "name", 1, &name, err)) < 0 ||
        (rc = sbx_json_get_string(st, "root", 1, &root, err)) < 0 ||
        (rc = sbx_json_get_string(st, "context", 1, &ctx, err)) < 0)
        return rc;
    if (!sbx__kc_valid_id(id, 0))
        return sbx_error_set(err, SBX_E_INVAL, 0, "field 'id': '%s' is not a sandbox id", id);
    if (strcmp(kind, "Sandbox") && strcmp(kind, "SandboxClaim") && strcmp(kind, "Pod"))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "field 'kind' must be Sandbox, SandboxClaim or Pod, not '%s'", kind);
    if (!dns_name(ns) || !dns_name(name))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "fields 'namespace' and 'name' must be Kubernetes object names");
    if (root[0] != '/')
        return sbx_error_set(err, SBX_E_INVAL, 0, "field 'root' must be an absolute path");
    return 0;
}

static const struct sbx__program programs[] = {
        {SBX__KUBE_RELAY_VERB, sbx__kube_relay_main},
        {NULL, NULL},
};

const struct sbx__provider_def sbx__provider_kubernetes = {
        .name = "kubernetes",
        .summary = "a pod of a Kubernetes cluster: an agent-sandbox Sandbox or SandboxClaim, or a "
                   "bare pod, through the API server of a kubeconfig context",
        .traits = SBX_PROVIDER_SNAPSHOTS | SBX_PROVIDER_STOP_START | SBX_PROVIDER_PTY |
                  SBX_PROVIDER_PORTS | SBX_PROVIDER_LISTS | SBX_PROVIDER_RESUME,
        .options = sbx__kube_options,
        .client_new = sbx__kube_client_new,
        .client_new_json = sbx__kube_client_new_json,
        .options_check = sbx__kube_options_check,
        .probe = sbx__kube_probe,
        .check_state = check_state,
        .programs = programs,
};
