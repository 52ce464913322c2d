/* Creating a Kubernetes sandbox: what to make (a Sandbox of sbx's pod template, a Sandbox of a
 * SandboxTemplate, a SandboxClaim on a warm pool, or a bare Pod and its volume claim where the
 * cluster has no agent-sandbox), making it, waiting on the client's shared watch until its pod
 * is ready (or saying why not), then the workspace: the snapshot it starts from, streamed into
 * the pod, and the manifest's entries. On failure nothing is left in the cluster. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "providers/kubernetes/client.h"
#include "sandbox/materialize/materialize.h"
#include "sandbox/session/internal.h"
#include "sbx/hash.h"
#include "sbx/json.h"
#include "sbx/manifest.h"
#include "sbx/snapshot.h"
#include "sbx/strv.h"
#include "sbx/time.h"

#ifndef SBX_VERSION
#    define SBX_VERSION "0"
#endif

#define DEFAULT_ROOT "/workspace"
#define SETUP_MAX    65536

enum how { HOW_SANDBOX, HOW_TEMPLATE, HOW_CLAIM, HOW_POD };

static int no_crds(struct kclient *c, const char *group, const char *why, struct sbx_error *err)
{
    return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                         "the cluster at '%s' has no agent-sandbox CRDs (%s/v1beta1 is not "
                         "served), which %s: install kubernetes-sigs/agent-sandbox v0.5%s",
                         c->api->server, group, why,
                         c->image ? ", or leave --workload at auto for a bare pod" : "");
}

static int plan(struct kclient *c, enum how *out, struct sbx_error *err)
{
    int rc = sbx__kube_discover(c->api, err);
    if (rc < 0)
        return rc;
    if (c->warm_pool) {
        *out = HOW_CLAIM;
        return c->api->has_claims ? 0 : no_crds(c, SBX__KUBE_EXT_GROUP, "a warm pool needs", err);
    }
    if (c->template_name) {
        *out = HOW_TEMPLATE;
        return c->api->has_claims && c->api->has_sandbox
                       ? 0
                       : no_crds(c, SBX__KUBE_EXT_GROUP, "a template needs", err);
    }
    if (!c->image)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "no image: the kubernetes provider needs --image, --warm-pool or "
                             "--template");
    if (c->workload == SBX_KUBE_WORKLOAD_POD || !c->api->has_sandbox) {
        if (c->workload == SBX_KUBE_WORKLOAD_SANDBOX)
            return no_crds(c, SBX__KUBE_SANDBOX_GROUP, "--workload sandbox needs", err);
        *out = HOW_POD;
        return 0;
    }
    *out = HOW_SANDBOX;
    return 0;
}

static void set_json_ann(json_t *ann, const char *key, const json_t *v)
{
    char *text = sbx_json_dumps(v, SBX_JSON_COMPACT);
    sbx_json_set(ann, key, sbx_json_str(text));
    free(text);
}

/* The annotations a later process reads the sandbox back from. */
static json_t *annotations(struct kclient *c, const char *root, const char *container,
                           const char *snap_ref, const json_t *mjson)
{
    char created[SBX_TIME_RFC3339_LEN];
    sbx_time_rfc3339(sbx_time_real_ns(), created);
    json_t *ann = json_object(), *ports = json_array();
    for (size_t i = 0; i < c->n_ports; i++)
        sbx_json_append(ports, json_integer(c->ports[i]));
    sbx_json_set(ann, SBX__KC_ANN("root"), sbx_json_str(root));
    sbx_json_set(ann, SBX__KC_ANN("created"), sbx_json_str(created));
    sbx_json_set(ann, SBX__KC_ANN("version"), sbx_json_str(SBX_VERSION));
    if (container)
        sbx_json_set(ann, SBX__KC_ANN("container"), sbx_json_str(container));
    set_json_ann(ann, SBX__KC_ANN("options"), c->options);
    set_json_ann(ann, SBX__KC_ANN("ports"), ports);
    json_decref(ports);
    if (snap_ref)
        sbx_json_set(ann, SBX__KC_ANN("snapshot"), sbx_json_str(snap_ref));
    if (mjson) {
        /* Annotations are not a store: a large manifest (file contents) stays out. */
        char *text = sbx_json_dumps(mjson, SBX_JSON_COMPACT);
        if (strlen(text) <= SBX__KUBE_MANIFEST_MAX)
            sbx_json_set(ann, SBX__KC_ANN("manifest"), sbx_json_str(text));
        free(text);
    }
    return ann;
}

/* The manifest's environment as a container's env list (values are read from the harness
 * side here: the pod gets them, never the harness's own environment). */
static int env_list(const struct sbx_create_spec *spec, json_t **out, struct sbx_error *err)
{
    struct sbx_strv env;
    sbx_strv_init(&env);
    int rc = spec->manifest
                     ? sbx_manifest_env_resolve(spec->manifest, spec->pass_secrets, &env, err)
                     : 0;
    json_t *list = json_array();
    for (size_t i = 0; rc == 0 && i < env.n; i++) {
        char *eq = strchr(env.v[i], '=');
        if (!eq)
            continue;
        sbx_json_append(list, json_pack("{s:s%,s:s}", "name", env.v[i], (size_t)(eq - env.v[i]),
                                        "value", eq + 1));
        explicit_bzero(env.v[i], strlen(env.v[i]));
    }
    sbx_strv_release(&env);
    if (rc < 0) {
        json_decref(list);
        return rc;
    }
    *out = list;
    return 0;
}

/* Make the objects; *made says what to delete when a later step fails. */
static int make_objects(struct kclient *c, enum how how, const struct sbx__kube_spec *sp, int *made,
                        struct sbx_error *err)
{
    json_t *obj = NULL, *tmpl = NULL;
    int rc = 0;
    switch (how) {
    case HOW_SANDBOX:
        obj = sbx__kube_sandbox_object(sp);
        rc = sbx__kube_create(c->api, SBX__KUBE_SANDBOX, obj, NULL, err);
        break;
    case HOW_TEMPLATE:
        rc = sbx__kube_get(c->api, SBX__KUBE_TEMPLATE, c->template_name, &tmpl, err);
        if (rc == -SBX_E_NOTFOUND)
            rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "no SandboxTemplate '%s' in namespace '%s'",
                               c->template_name, c->api->namespace_name);
        if (rc == 0)
            rc = sbx__kube_sandbox_from_template(tmpl, sp, &obj, err);
        if (rc == 0)
            rc = sbx__kube_create(c->api, SBX__KUBE_SANDBOX, obj, NULL, err);
        break;
    case HOW_CLAIM:
        obj = sbx__kube_claim_object(sp, c->warm_pool);
        rc = sbx__kube_create(c->api, SBX__KUBE_CLAIM, obj, NULL, err);
        break;
    case HOW_POD:
        obj = sbx__kube_pod_object(sp);
        if (sp->disk != SBX_KUBE_LIMIT_NONE) {
            /* The claim outlives the pod across a stop: it keeps what brings the pod back. */
            json_t *pvc = sbx__kube_pvc_object(sp);
            json_t *md = json_object_get(pvc, "metadata");
            json_t *ann = json_deep_copy(sp->annotations);
            set_json_ann(ann, SBX__KC_ANN("pod"), obj);
            sbx_json_set(ann, SBX__KC_ANN("podname"), sbx_json_str(sp->name));
            sbx_json_set(md, "annotations", ann);
            sbx_json_set(json_object_get(md, "labels"), SBX__KUBE_LABEL_BARE, sbx_json_str("pod"));
            rc = sbx__kube_create(c->api, SBX__KUBE_PVC, pvc, NULL, err);
            json_decref(pvc);
        }
        if (rc == 0)
            *made = 1;
        if (rc == 0)
            rc = sbx__kube_create(c->api, SBX__KUBE_POD, obj, NULL, err);
        break;
    }
    if (rc == 0 || (how == HOW_POD && *made))
        *made = 1;
    if (rc == -SBX_E_EXISTS)
        rc = sbx_error_set(err, SBX_E_EXISTS, 0, "sandbox '%s' already exists", sp->id);
    json_decref(obj);
    json_decref(tmpl);
    return rc;
}

/* A template's or a warm pool's pod names its own container: recorded on the top object. */
static int record_container(struct kclient *c, struct top *t, const char *pod,
                            struct sbx_error *err)
{
    if (sbx__kube_annotation_of(t->obj, SBX__KC_ANN("container")))
        return 0;
    json_t *p = NULL, *out = NULL;
    int rc = sbx__kube_get(c->api, SBX__KUBE_POD, pod, &p, err);
    const char *name = json_string_value(json_object_get(
            json_array_get(json_object_get(json_object_get(p, "spec"), "containers"), 0), "name"));
    if (rc == 0 && !name)
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "pod '%s' has no container", pod);
    if (rc == 0) {
        json_t *patch = json_pack("{s:{s:{s:s}}}", "metadata", "annotations",
                                  SBX__KC_ANN("container"), name);
        enum sbx__kube_kind k =
                strcmp(t->kind, "SandboxClaim") == 0 ? SBX__KUBE_CLAIM : SBX__KUBE_SANDBOX;
        rc = sbx__kube_patch(c->api, k, sbx__kube_name_of(t->obj), patch, &out, err);
        json_decref(patch);
    }
    if (rc == 0) {
        json_decref(t->obj);
        t->obj = out;
        t->id = sbx__kube_label_of(out, SBX__KUBE_LABEL_ID);
    }
    json_decref(p);
    return rc;
}

/* Wait for the sandbox, then a session on it. */
static int ready_session(struct kclient *c, enum how how, const char *id, struct sbx_session **out,
                         struct sbx_error *err)
{
    int64_t deadline = sbx_deadline_after_ms(c->ready_ms);
    struct top t = {0};
    char *pod = NULL;
    int running = 0, rc = 0;
    if (how == HOW_CLAIM)
        rc = sbx__kube_watch_wait(sbx__kc_watch_of(c, SBX__KUBE_CLAIM), id, sbx__kc_claim_bound,
                                  (void *)id, deadline, NULL, err);
    if (rc == -SBX_E_TIMEOUT)
        rc = sbx_error_set(err, SBX_E_TIMEOUT, 0,
                           "the claim of sandbox '%s' on warm pool '%s' named no sandbox within "
                           "%lld s (is the agent-sandbox controller running with extensions?)",
                           id, c->warm_pool, (long long)(c->ready_ms / 1000));
    if (rc == 0)
        rc = sbx__kc_wait_ready(c, id, deadline, err);
    if (rc == 0)
        rc = sbx__kc_find(c, id, &t, err);
    if (rc == 0)
        rc = sbx__kc_running_pod(c, &t, &running, &pod, NULL, err);
    if (rc == 0 && !pod)
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "sandbox '%s' has no pod", id);
    if (rc == 0)
        rc = record_container(c, &t, pod, err);
    if (rc == 0)
        rc = sbx__kc_session_of(c, &t, pod, out, err);
    free(pod);
    json_decref(t.obj);
    return rc;
}

/* The workspace of a ready sandbox: its directory, the snapshot, the manifest's entries. */
static int fill(struct ksession *s, const struct sbx_create_spec *spec,
                struct sbx_snapshot_store *store, const char *snap_ref, struct sbx_error *err)
{
    const struct sbx_manifest *m = spec->manifest;
    const char *argv[] = {"mkdir", "-p", s->t.root, NULL};
    struct sbx_buf o, e;
    sbx_buf_init(&o, SETUP_MAX);
    sbx_buf_init(&e, SETUP_MAX);
    struct sbx__kube_run io = {.argv = argv, .input_fd = -1, .output_fd = -1, .out = &o, .err = &e};
    int rc = sbx__kube_run(&s->t, &io, err);
    if (rc == 0 && io.code != 0)
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "cannot make the workspace '%s': %.*s", s->t.root,
                           (int)strcspn(e.data ? e.data : "", "\n"), e.data ? e.data : "");
    sbx_buf_release(&o);
    sbx_buf_release(&e);
    if (rc < 0)
        return rc;
    sbx__session_set_manifest(&s->base, m);
    if (snap_ref && (rc = sbx__kube_workspace_restore(s, store, snap_ref, spec->progress,
                                                      spec->progress_data, err)) < 0) {
        sbx_error_prefix(err, "snapshot '%s'", spec->snapshot);
        return rc;
    }
    if (!m)
        return 0;
    struct sbx_progress_sink progress;
    json_t *records = NULL;
    sbx_progress_sink_init(&progress, spec->progress, spec->progress_data);
    int mflags = snap_ref ? SBX__MATERIALIZE_EPHEMERAL_ONLY : 0;
    if ((rc = sbx__materialize(&s->base, m, mflags, &progress, &records, err)) < 0 ||
        (rc = sbx__kube_flush(&s->base, err)) < 0) {
        json_decref(records);
        return rc;
    }
    sbx_json_set(s->state, "materialized", records);
    return 0;
}

/* What is checked before anything is made. */
static int precheck(struct kclient *c, const struct sbx_create_spec *spec, const char *id,
                    struct sbx_error *err)
{
    struct sbx_strv users;
    sbx_strv_init(&users);
    if (spec->manifest)
        sbx_manifest_account_users(spec->manifest, &users);
    size_t n_users = users.n;
    sbx_strv_release(&users);
    if (spec->workspace)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "a kubernetes sandbox's workspace is a volume of its pod: a host "
                             "workspace directory ('%s') cannot be used",
                             spec->workspace);
    if (n_users || (spec->manifest && sbx_manifest_group_count(spec->manifest)))
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "a kubernetes sandbox runs its commands as its pod's user: manifest "
                             "users and groups are not supported");
    if (spec->id && !sbx__kc_valid_id(spec->id, 0))
        return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a sandbox id (16 hex digits)",
                             spec->id);
    if (spec->id) {
        struct top t = {0};
        int rc = sbx__kc_find(c, id, &t, err);
        json_decref(t.obj);
        if (rc == 0)
            return sbx_error_set(err, SBX_E_EXISTS, 0, "sandbox '%s' already exists", id);
        if (rc != -SBX_E_NOTFOUND)
            return rc;
        sbx_error_clear(err);
    }
    return 0;
}

static void undo(struct kclient *c, const char *id)
{
    struct sbx_error ignored = SBX_ERROR_INIT;
    char *name = sbx_xasprintf("sbx-%s", id);
    char *pvc = sbx_xasprintf("%s-%s", SBX__KUBE_VOLUME, name);
    if (c->api->has_sandbox == 1)
        (void)sbx__kube_delete(c->api, SBX__KUBE_SANDBOX, name, &ignored);
    if (c->api->has_claims == 1)
        (void)sbx__kube_delete(c->api, SBX__KUBE_CLAIM, name, &ignored);
    (void)sbx__kube_delete(c->api, SBX__KUBE_POD, name, &ignored);
    (void)sbx__kube_delete(c->api, SBX__KUBE_PVC, pvc, &ignored);
    free(pvc);
    free(name);
}

int sbx__kc_create(struct sbx_client *bc, const struct sbx_create_spec *spec,
                   struct sbx_session **out, struct sbx_error *err)
{
    struct kclient *c = (struct kclient *)bc;
    char id[SBX__KC_ID_LEN + 1], name[SBX__KC_ID_LEN + 8];
    struct sbx_snapshot_store *store = NULL;
    char *snap_ref = NULL;
    json_t *mjson = NULL, *env = NULL, *ann = NULL;
    struct sbx_session *bs = NULL;
    enum how how = HOW_SANDBOX;
    int made = 0, rc;
    if (spec->id)
        snprintf(id, sizeof(id), "%s", spec->id);
    else if ((rc = sbx_random_hex(id, SBX__KUBE_ID_BYTES, err)) < 0)
        return rc;
    snprintf(name, sizeof(name), "sbx-%s", id);
    if ((rc = precheck(c, spec, id, err)) < 0)
        goto out;
    /* A snapshot is found and checked before anything exists: a bad one makes nothing. */
    if (spec->snapshot &&
        ((rc = sbx_snapshot_store_open(NULL, &store, err)) < 0 ||
         (rc = sbx_snapshot_resolve(store, spec->snapshot, NULL, &snap_ref, err)) < 0))
        goto out;
    if ((rc = plan(c, &how, err)) < 0 || (rc = env_list(spec, &env, err)) < 0)
        goto out;
    if (spec->manifest &&
        (rc = sbx_manifest_to_json(spec->manifest, SBX_MANIFEST_JSON_NO_EPHEMERAL_ENV, &mjson, NULL,
                                   err)) < 0)
        goto out;
    const char *root = spec->manifest ? sbx_manifest_root(spec->manifest) : DEFAULT_ROOT;
    ann = annotations(c, root, how == HOW_SANDBOX || how == HOW_POD ? SBX__KUBE_CONTAINER : NULL,
                      snap_ref, mjson);
    struct sbx__kube_spec sp = {.id = id,
                                .name = name,
                                .namespace_name = c->api->namespace_name,
                                .root = root,
                                .image = c->image,
                                .runtime_class = c->runtime_class,
                                .memory = c->memory,
                                .cpu_millis = c->cpu_millis,
                                .disk = c->disk,
                                .storage_class = c->storage_class,
                                .run_as_user = c->run_as_user,
                                .env = env,
                                .annotations = ann};
    if ((rc = make_objects(c, how, &sp, &made, err)) < 0 ||
        (rc = ready_session(c, how, id, &bs, err)) < 0 ||
        (rc = fill((struct ksession *)bs, spec, store, snap_ref, err)) < 0)
        goto out;
    *out = bs;
    bs = NULL;
out:
    if (rc < 0) {
        if (made)
            undo(c, id);
        sbx_error_prefix(err, "cannot create sandbox");
    }
    if (bs)
        sbx__kc_sess_free(bs);
    json_decref(mjson);
    json_decref(env);
    json_decref(ann);
    free(snap_ref);
    sbx_snapshot_store_free(store);
    return rc;
}
