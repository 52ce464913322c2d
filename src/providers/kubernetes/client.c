/* The Kubernetes provider, client side: creating a sandbox (a Sandbox, a SandboxClaim, a
 * Sandbox of a template, or a bare Pod and its volume claim), waiting for it through the
 * client's shared watch, finding sandboxes again by sbx's labels, listing, stopping, starting
 * and removing them, and the session state.
 *
 * The cluster is the only record: everything a later process needs to attach (root, options,
 * ports, the manifest without secret values when it is small, the snapshot it came from) is in
 * the annotations of the sandbox's top object (the Sandbox, the SandboxClaim, or for a bare
 * pod its PersistentVolumeClaim, which outlives the pod across a stop). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "providers/kubernetes/client.h"
#include "providers/kubernetes/forward.h"
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

#define ID_LEN       (2 * SBX__KUBE_ID_BYTES)
#define DEFAULT_ROOT "/workspace"
#define GONE_MS      60000 /* how long a remove or a stop waits for the pod to go */
#define POD_NAME_ANN "agents.x-k8s.io/pod-name"
#define ANN(x)       SBX__KUBE_ANN_PREFIX x

int sbx__kc_valid_id(const char *id, int prefix)
{
    size_t n = strlen(id);
    if (n == 0 || n > ID_LEN || (!prefix && n != ID_LEN))
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f')))
            return 0;
    return 1;
}

const struct sbx__kube_target *sbx__kube_session_target(struct sbx_session *bs)
{
    return &((struct ksession *)bs)->t;
}

/* ---------------------------------------------------------------------------------------------
 * Finding sandboxes */

static int gone_object(const json_t *obj)
{
    return json_object_get(json_object_get(obj, "metadata"), "deletionTimestamp") != NULL;
}

static const char *const kind_names[] = {[SBX__KUBE_POD] = "Pod",
                                         [SBX__KUBE_PVC] = "PersistentVolumeClaim",
                                         [SBX__KUBE_SANDBOX] = "Sandbox",
                                         [SBX__KUBE_CLAIM] = "SandboxClaim"};

struct each {
    sbx__kc_top_fn *fn;
    void *ud;
    enum sbx__kube_kind kind;
    json_t *bare; /* ids of the bare pods seen (their PVCs are not stopped sandboxes) */
};

static int each_item(json_t *v, void *ud, struct sbx_error *err)
{
    struct each *e = ud;
    const char *sid = sbx__kube_label_of(v, SBX__KUBE_LABEL_ID);
    if (!sid || !sbx__kc_valid_id(sid, 0) || gone_object(v))
        return 0;
    if (e->kind == SBX__KUBE_POD)
        sbx_json_set(e->bare, sid, json_true());
    /* A bare sandbox whose pod is gone is its volume claim: stopped. */
    if (e->kind == SBX__KUBE_PVC && json_object_get(e->bare, sid))
        return 0;
    struct top t = {.kind = kind_names[e->kind], .obj = v, .id = sid};
    return e->fn(&t, e->ud, err);
}

/* The top objects of kind k labelled with id (NULL: every sbx id) to e->fn. */
static int each_kind(struct kclient *c, enum sbx__kube_kind k, const char *id, struct each *e,
                     struct sbx_error *err)
{
    char *sel =
            id ? sbx_xasprintf("%s=%s", SBX__KUBE_LABEL_ID, id) : sbx_xstrdup(SBX__KUBE_LABEL_ID);
    if (k == SBX__KUBE_POD || k == SBX__KUBE_PVC) {
        char *more = sbx_xasprintf("%s,%s=pod", sel, SBX__KUBE_LABEL_BARE);
        free(sel);
        sel = more;
    }
    e->kind = k;
    int rc = sbx__kube_list_each(c->api, k, sel, NULL, each_item, e, NULL, err);
    free(sel);
    return rc;
}

int sbx__kc_each_top(struct kclient *c, const char *id, sbx__kc_top_fn *fn, void *ud,
                     struct sbx_error *err)
{
    struct each e = {.fn = fn, .ud = ud, .bare = json_object()};
    static const enum sbx__kube_kind order[] = {SBX__KUBE_SANDBOX, SBX__KUBE_CLAIM, SBX__KUBE_POD,
                                                SBX__KUBE_PVC};
    int rc = sbx__kube_discover(c->api, err);
    for (size_t i = 0; rc == 0 && i < SBX_ARRAY_LEN(order); i++) {
        /* rc 1: fn has what it wanted. */
        if ((order[i] == SBX__KUBE_SANDBOX && !c->api->has_sandbox) ||
            (order[i] == SBX__KUBE_CLAIM && !c->api->has_claims))
            continue;
        rc = each_kind(c, order[i], id, &e, err);
    }
    json_decref(e.bare);
    return rc < 0 ? rc : 0;
}

struct finding {
    const char *prefix;
    size_t n;
    struct top found;
    int many;
};

static int find_one(const struct top *t, void *ud, struct sbx_error *err)
{
    struct finding *f = ud;
    (void)err;
    if (strncmp(t->id, f->prefix, f->n) != 0)
        return 0;
    if (f->found.obj) {
        f->many |= strcmp(t->id, f->found.id) != 0;
        return 0;
    }
    f->found = (struct top){.kind = t->kind, .obj = json_incref(t->obj)};
    f->found.id = sbx__kube_label_of(f->found.obj, SBX__KUBE_LABEL_ID);
    /* A full id is one sandbox: the first kind that has it is its. */
    return f->n == ID_LEN;
}

/* The one sandbox prefix names: *top (caller releases obj). */
int sbx__kc_find(struct kclient *c, const char *prefix, struct top *top, struct sbx_error *err)
{
    if (!sbx__kc_valid_id(prefix, 1))
        return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a sandbox id", prefix);
    struct finding f = {.prefix = prefix, .n = strlen(prefix)};
    int rc = sbx__kc_each_top(c, f.n == ID_LEN ? prefix : NULL, find_one, &f, err);
    if (rc == 0 && !f.found.obj)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "no sandbox '%s'", prefix);
    else if (rc == 0 && f.many)
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "sandbox id '%s' is ambiguous", prefix);
    if (rc == 0)
        *top = f.found;
    else
        json_decref(f.found.obj);
    return rc;
}

/* The Sandbox a top object runs as (itself, or the one its claim names; NULL for bare pods or
 * a claim not served yet). Caller frees. */
static char *sandbox_name(const struct top *t)
{
    if (strcmp(t->kind, "Sandbox") == 0)
        return sbx_xstrdup(sbx__kube_name_of(t->obj));
    if (strcmp(t->kind, "SandboxClaim") == 0) {
        const char *n = json_string_value(json_object_get(
                json_object_get(json_object_get(t->obj, "status"), "sandbox"), "name"));
        return n ? sbx_xstrdup(n) : NULL;
    }
    return NULL;
}

/* Whether the sandbox is stopped, and its pod's name; *sb (may be NULL) the Sandbox object. */
int sbx__kc_running_pod(struct kclient *c, const struct top *t, int *running, char **pod,
                        json_t **sb, struct sbx_error *err)
{
    *pod = NULL;
    *running = 0;
    if (strcmp(t->kind, "PersistentVolumeClaim") == 0)
        return 0;
    if (strcmp(t->kind, "Pod") == 0) {
        *running = 1;
        *pod = sbx_xstrdup(sbx__kube_name_of(t->obj));
        return 0;
    }
    char *name = sandbox_name(t);
    json_t *obj = NULL;
    int rc = 0;
    if (!name)
        return 0; /* a claim still waiting for its sandbox */
    if (strcmp(t->kind, "Sandbox") == 0)
        obj = json_incref(t->obj);
    else
        rc = sbx__kube_get(c->api, SBX__KUBE_SANDBOX, name, &obj, err);
    if (rc == 0) {
        const char *mode =
                json_string_value(json_object_get(json_object_get(obj, "spec"), "operatingMode"));
        const char *pn = sbx__kube_annotation_of(obj, POD_NAME_ANN);
        *running = !mode || strcmp(mode, "Suspended") != 0;
        *pod = sbx_xstrdup(pn && pn[0] ? pn : name);
    }
    if (rc == 0 && sb)
        *sb = obj;
    else
        json_decref(obj);
    free(name);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Sessions */

static json_t *ann_json(const json_t *obj, const char *key)
{
    const char *v = sbx__kube_annotation_of(obj, key);
    return v ? json_loads(v, JSON_REJECT_DUPLICATES, NULL) : NULL;
}

static json_t *or_default(json_t *v, int is_obj)
{
    if (is_obj ? json_is_object(v) : json_is_array(v))
        return v;
    json_decref(v);
    return is_obj ? json_object() : json_array();
}

/* The session state of a top object (what the annotations say, and where it runs). */
json_t *sbx__kc_state_of(struct kclient *c, const struct top *t, const char *pod)
{
    const char *snap = sbx__kube_annotation_of(t->obj, ANN("snapshot"));
    json_t *st = json_object(), *man = ann_json(t->obj, ANN("manifest"));
    sbx_json_set(st, "version", json_integer(SBX_SESSION_STATE_VERSION));
    sbx_json_set(st, "provider", sbx_json_str("kubernetes"));
    sbx_json_set(st, "id", sbx_json_str(t->id));
    sbx_json_set(st, "created", sbx_json_str(sbx__kube_annotation_of(t->obj, ANN("created"))));
    sbx_json_set(st, "root", sbx_json_str(sbx__kube_annotation_of(t->obj, ANN("root"))));
    sbx_json_set(st, "namespace", sbx_json_str(c->api->namespace_name));
    sbx_json_set(st, "context", sbx_json_str(c->api->context));
    sbx_json_set(st, "kind",
                 sbx_json_str(strcmp(t->kind, "PersistentVolumeClaim") ? t->kind : "Pod"));
    sbx_json_set(st, "name",
                 sbx_json_str(strcmp(t->kind, "PersistentVolumeClaim")
                                      ? sbx__kube_name_of(t->obj)
                                      : sbx__kube_annotation_of(t->obj, ANN("pod"))));
    sbx_json_set(st, "uid",
                 sbx_json_str(json_string_value(
                         json_object_get(json_object_get(t->obj, "metadata"), "uid"))));
    sbx_json_set(st, "pod", pod ? sbx_json_str(pod) : json_null());
    sbx_json_set(st, "container", sbx_json_str(sbx__kube_annotation_of(t->obj, ANN("container"))));
    sbx_json_set(st, "options", or_default(ann_json(t->obj, ANN("options")), 1));
    sbx_json_set(st, "exposed_ports", or_default(ann_json(t->obj, ANN("ports")), 0));
    sbx_json_set(st, "workspace_owned", json_true());
    sbx_json_set(st, "manifest", json_is_object(man) ? man : json_null());
    if (!json_is_object(man))
        json_decref(man);
    sbx_json_set(st, "snapshot",
                 snap && strncmp(snap, "sha256:", 7) == 0 && strlen(snap) == 71 ? sbx_json_str(snap)
                                                                                : json_null());
    return st;
}

static const struct sbx_session_ops session_ops;

/* A session on a running sandbox. */
int sbx__kc_session_of(struct kclient *c, const struct top *t, const char *pod,
                       struct sbx_session **out, struct sbx_error *err)
{
    const char *root = sbx__kube_annotation_of(t->obj, ANN("root"));
    const char *container = sbx__kube_annotation_of(t->obj, ANN("container"));
    if (!root || root[0] != '/' || !container || !container[0])
        return sbx_error_set(err, SBX_E_SANDBOX, 0, "%s '%s' is not an sbx sandbox", t->kind,
                             sbx__kube_name_of(t->obj));
    struct ksession *s = sbx_xcalloc(1, sizeof(*s));
    sbx_session_init_base(&s->base, &session_ops, "kubernetes", t->id, root);
    s->t.api = sbx__kube_api_ref(c->api);
    s->t.pod = sbx_xstrdup(pod);
    s->t.container = sbx_xstrdup(container);
    s->t.id = sbx_xstrdup(t->id);
    s->t.root = sbx_xstrdup(root);
    s->kind = sbx_xstrdup(t->kind);
    s->name = sbx_xstrdup(sbx__kube_name_of(t->obj));
    s->state = sbx__kc_state_of(c, t, pod);
    s->ws_fd = -1;
    *out = &s->base;
    return 0;
}

static int sess_exec_start(struct sbx_session *bs, const struct sbx_exec_spec *spec,
                           const char *cwd, struct sbx_proc **out, struct sbx_error *err)
{
    int rc = sbx__kube_flush(bs, err);
    return rc < 0 ? rc : sbx__kube_exec_start(&((struct ksession *)bs)->t, spec, cwd, out, err);
}

static int sess_state(struct sbx_session *bs, json_t **out, struct sbx_error *err)
{
    (void)err;
    *out = json_deep_copy(((struct ksession *)bs)->state);
    return 0;
}

static int sess_resolve_port(struct sbx_session *bs, int port, char **out_url,
                             struct sbx_error *err)
{
    struct ksession *s = (struct ksession *)bs;
    const json_t *ports = json_object_get(s->state, "exposed_ports");
    size_t i;
    json_t *v;
    int listed = json_array_size(ports) == 0;
    json_array_foreach(ports, i, v) listed |= json_integer_value(v) == port;
    if (!listed)
        return sbx_error_set(err, SBX_E_PERM, 0, "port %d is not among the exposed ports", port);
    int rc = sbx__kube_flush(bs, err);
    return rc < 0 ? rc : sbx__kube_forward(&s->t, port, out_url, err);
}

static int sess_record_snapshot(struct sbx_session *bs, const char *ref, struct sbx_error *err)
{
    (void)err;
    sbx_json_set(((struct ksession *)bs)->state, "snapshot", sbx_json_str(ref));
    return 0;
}

void sbx__kc_sess_free(struct sbx_session *bs)
{
    struct ksession *s = (struct ksession *)bs;
    if (!s)
        return;
    sbx__kube_workspace_drop(s);
    sbx__kube_batch_drop(s);
    sbx_session_release_base(&s->base);
    sbx__kube_api_free(s->t.api);
    free((char *)s->t.pod);
    free((char *)s->t.container);
    free((char *)s->t.id);
    free((char *)s->t.root);
    free(s->kind);
    free(s->name);
    free(s->uid);
    free(s->sandbox);
    json_decref(s->state);
    free(s);
}

static int sess_close(struct sbx_session *bs, int delete_workspace, struct sbx_error *err)
{
    struct ksession *s = (struct ksession *)bs;
    struct sbx_client *c = NULL;
    int rc = sbx__kc_client_for(s->t.api, &c, err);
    /* The workspace lives on the sandbox's volume: keeping it means keeping the sandbox,
     * stopped. */
    if (rc == 0)
        rc = delete_workspace ? sbx__kc_remove(c, s->base.id, 0, err)
                              : sbx__kc_stop(c, s->base.id, NULL, err);
    if (rc == -SBX_E_NOTFOUND)
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "sandbox '%s' is gone", s->base.id);
    if (c)
        sbx__kc_free(c);
    return rc;
}

static const struct sbx_session_ops session_ops = {
        .exec_start = sess_exec_start,
        .read_open = sbx__kube_read_open,
        .write = sbx__kube_write,
        .ls = sbx__kube_ls,
        .stat = sbx__kube_stat,
        .mkdir = sbx__kube_mkdir,
        .rm = sbx__kube_rm,
        .chmod = sbx__kube_chmod,
        .resolve_port = sess_resolve_port,
        .state = sess_state,
        .close = sess_close,
        .workspace_fd = sbx__kube_workspace_fd,
        .record_snapshot = sess_record_snapshot,
        .workspace_export = sbx__kube_workspace_export,
        .workspace_import = sbx__kube_workspace_import,
        .free = sbx__kc_sess_free,
};

/* ---------------------------------------------------------------------------------------------
 * Waiting */

struct sbx__kube_watch *sbx__kc_watch_of(struct kclient *c, enum sbx__kube_kind k)
{
    pthread_mutex_lock(&c->lock);
    struct sbx__kube_watch **w = k == SBX__KUBE_CLAIM ? &c->claims : &c->pods;
    if (!*w)
        *w = sbx__kube_watch_new(c->api, k);
    struct sbx__kube_watch *out = *w;
    pthread_mutex_unlock(&c->lock);
    return out;
}

/* A pod of the sandbox runs and is ready: 1; one that will never run: the error. */
static int pod_ready(const json_t *pods, void *ud, struct sbx_error *err)
{
    const char *id = ud;
    size_t i;
    json_t *p;
    char why[768];
    json_array_foreach(pods, i, p)
    {
        if (gone_object(p))
            continue;
        if (sbx__kube_pod_ready(p))
            return 1;
        if (sbx__kube_pod_failure(p, why, sizeof(why)))
            return sbx_error_set(err, SBX_E_SANDBOX, 0, "sandbox '%s' cannot start: %s", id, why);
    }
    return 0;
}

/* No pod of the sandbox is left. */
static int pods_gone(const json_t *pods, void *ud, struct sbx_error *err)
{
    (void)ud;
    (void)err;
    return json_array_size(pods) == 0;
}

/* A claim names its sandbox; or says why it cannot. */
int sbx__kc_claim_bound(const json_t *claims, void *ud, struct sbx_error *err)
{
    const char *id = ud;
    const json_t *cl = json_array_get(claims, 0);
    const json_t *ready = sbx__kube_condition(cl, "Ready");
    const char *reason = json_string_value(json_object_get(ready, "reason"));
    static const char *const fatal[] = {"WarmPoolNotFound", "TemplateNotFound",
                                        "EnvVarsInjectionRejected", "VolumeClaimTemplatesError",
                                        NULL};
    for (const char *const *f = fatal; reason && *f; f++)
        if (strcmp(reason, *f) == 0)
            return sbx_error_set(err, SBX_E_SANDBOX, 0, "sandbox '%s': the claim failed (%s: %s)",
                                 id, reason, json_string_value(json_object_get(ready, "message")));
    return json_string_value(json_object_get(
                   json_object_get(json_object_get(cl, "status"), "sandbox"), "name")) != NULL;
}

/* Why a sandbox is not ready, for a timeout: its pod's state and warnings, or its Sandbox's. */
static void not_ready_why(struct kclient *c, const char *id, const json_t *pods, char *out,
                          size_t n)
{
    const json_t *pod = json_array_get(pods, 0);
    if (!pod) {
        json_t *sb = NULL;
        struct sbx_error ignored = SBX_ERROR_INIT;
        char *name = sbx_xasprintf("sbx-%s", id);
        const json_t *ready = NULL;
        if (c->api->has_sandbox == 1 &&
            sbx__kube_get(c->api, SBX__KUBE_SANDBOX, name, &sb, &ignored) == 0)
            ready = sbx__kube_condition(sb, "Ready");
        const char *m = json_string_value(json_object_get(ready, "message"));
        snprintf(out, n, "no pod was made for it%s%s%s", m ? " (its Sandbox says: " : "",
                 m ? m : " (is the agent-sandbox controller running?)", m ? ")" : "");
        json_decref(sb);
        free(name);
        return;
    }
    char *fs = sbx_xasprintf("involvedObject.name=%s", sbx__kube_name_of(pod));
    json_t *items = NULL;
    struct sbx_error ignored = SBX_ERROR_INIT;
    (void)sbx__kube_list(c->api, SBX__KUBE_EVENT, NULL, fs, &items, NULL, &ignored);
    json_t *events = json_pack("{s:o}", "items", items ? items : json_array());
    sbx__kube_pod_pending_why(pod, events, out, n);
    json_decref(events);
    free(fs);
}

int sbx__kc_wait_ready(struct kclient *c, const char *id, int64_t deadline, struct sbx_error *err)
{
    json_t *last = NULL;
    int rc = sbx__kube_watch_wait(sbx__kc_watch_of(c, SBX__KUBE_POD), id, pod_ready, (void *)id,
                                  deadline, &last, err);
    if (rc == -SBX_E_TIMEOUT) {
        char why[768];
        not_ready_why(c, id, last, why, sizeof(why));
        rc = sbx_error_set(err, SBX_E_TIMEOUT, 0,
                           "sandbox '%s' was not ready after %lld s: %s (--ready-timeout waits "
                           "longer)",
                           id, (long long)(c->ready_ms / 1000), why);
    }
    json_decref(last);
    return rc;
}

int sbx__kc_wait_gone(struct kclient *c, const char *id, struct sbx_error *err)
{
    int rc = sbx__kube_watch_wait(sbx__kc_watch_of(c, SBX__KUBE_POD), id, pods_gone, NULL,
                                  sbx_deadline_after_ms(GONE_MS), NULL, err);
    if (rc == -SBX_E_TIMEOUT)
        rc = sbx_error_set(err, SBX_E_TIMEOUT, 0, "the pod of sandbox '%s' did not go within %d s",
                           id, GONE_MS / 1000);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Create */

/* ---------------------------------------------------------------------------------------------
 * Attach, list, remove, stop, start, resume */

int sbx__kc_attach(struct sbx_client *bc, const char *prefix, struct sbx_session **out,
                   struct sbx_error *err)
{
    struct kclient *c = (struct kclient *)bc;
    struct top t = {0};
    char *pod = NULL;
    int running = 0;
    int rc = sbx__kc_find(c, prefix, &t, err);
    if (rc == 0)
        rc = sbx__kc_running_pod(c, &t, &running, &pod, NULL, err);
    if (rc == 0 && !running)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "sandbox '%s' is stopped (sbx sandbox start %s)",
                           t.id, t.id);
    if (rc == 0)
        rc = sbx__kc_session_of(c, &t, pod, out, err);
    free(pod);
    json_decref(t.obj);
    return rc;
}

static int cmp_created(const void *a, const void *b)
{
    const char *x = json_string_value(json_object_get(*(json_t *const *)a, "created"));
    const char *y = json_string_value(json_object_get(*(json_t *const *)b, "created"));
    return strcmp(x ? x : "", y ? y : "");
}

/* What `sbx sandbox ps` shows in its workspace column: the object and what it is. */
static char *where_of(struct kclient *c, const struct top *t)
{
    const char *tmpl = sbx__kube_label_of(t->obj, SBX__KUBE_LABEL_TEMPLATE);
    const char *pool = json_string_value(json_object_get(
            json_object_get(json_object_get(t->obj, "spec"), "warmPoolRef"), "name"));
    if (strcmp(t->kind, "SandboxClaim") == 0)
        return sbx_xasprintf("SandboxClaim %s/%s (warm pool %s)", c->api->namespace_name,
                             sbx__kube_name_of(t->obj), pool ? pool : "?");
    if (strcmp(t->kind, "Sandbox") == 0)
        return sbx_xasprintf("Sandbox %s/%s%s%s%s", c->api->namespace_name,
                             sbx__kube_name_of(t->obj), tmpl ? " (template " : "", tmpl ? tmpl : "",
                             tmpl ? ")" : "");
    return sbx_xasprintf("Pod %s/%s (bare pod: no agent-sandbox)", c->api->namespace_name,
                         strcmp(t->kind, "Pod") ? sbx__kube_annotation_of(t->obj, ANN("pod"))
                                                : sbx__kube_name_of(t->obj));
}

static int list_one(const struct top *t, void *ud, struct sbx_error *err)
{
    struct kclient *c = ((void **)ud)[0];
    json_t *res = ((void **)ud)[1];
    const char *mode =
            json_string_value(json_object_get(json_object_get(t->obj, "spec"), "operatingMode"));
    int running = strcmp(t->kind, "Pod") == 0 || (strcmp(t->kind, "PersistentVolumeClaim") != 0 &&
                                                  (!mode || strcmp(mode, "Suspended") != 0));
    json_t *st = sbx__kc_state_of(c, t, NULL);
    char *where = where_of(c, t);
    (void)err;
    sbx_json_set(st, "workspace", sbx_json_str(where));
    free(where);
    if (!running)
        sbx_json_set(st, "status", sbx_json_str("stopped"));
    sbx_json_append(res, st);
    return 0;
}

int sbx__kc_list(struct sbx_client *bc, json_t **out, struct sbx_error *err)
{
    struct kclient *c = (struct kclient *)bc;
    json_t *res = json_array();
    void *ctx[2] = {c, res};
    int rc = sbx__kc_each_top(c, NULL, list_one, ctx, err);
    if (rc < 0) {
        json_decref(res);
        return rc;
    }
    size_t n = json_array_size(res);
    json_t **items = sbx_xcalloc(n + 1, sizeof(*items));
    for (size_t i = 0; i < n; i++)
        items[i] = json_incref(json_array_get(res, i));
    qsort(items, n, sizeof(*items), cmp_created);
    json_array_clear(res);
    for (size_t i = 0; i < n; i++)
        sbx_json_append(res, items[i]);
    free(items);
    *out = res;
    return 0;
}

/* Delete what the sandbox is made of; the garbage collector takes what they own. */
int sbx__kc_delete_top(struct kclient *c, const struct top *t, struct sbx_error *err)
{
    const char *name = sbx__kube_name_of(t->obj);
    int rc = 0;
    if (strcmp(t->kind, "Sandbox") == 0)
        rc = sbx__kube_delete(c->api, SBX__KUBE_SANDBOX, name, err);
    else if (strcmp(t->kind, "SandboxClaim") == 0)
        rc = sbx__kube_delete(c->api, SBX__KUBE_CLAIM, name, err);
    else {
        char *pvc = sbx_xasprintf("%s-sbx-%s", SBX__KUBE_VOLUME, t->id);
        char *pod = sbx_xasprintf("sbx-%s", t->id);
        rc = sbx__kube_delete(c->api, SBX__KUBE_POD, pod, err);
        if (rc == -SBX_E_NOTFOUND)
            rc = 0;
        if (rc == 0)
            rc = sbx__kube_delete(c->api, SBX__KUBE_PVC, pvc, err);
        if (rc == -SBX_E_NOTFOUND)
            rc = 0;
        free(pvc);
        free(pod);
    }
    return rc;
}

int sbx__kc_remove(struct sbx_client *bc, const char *prefix, int keep_workspace,
                   struct sbx_error *err)
{
    struct kclient *c = (struct kclient *)bc;
    struct top t = {0};
    if (keep_workspace)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "a kubernetes sandbox's workspace is its volume: it goes with it "
                             "(sbx sandbox stop keeps it)");
    int rc = sbx__kc_find(c, prefix, &t, err);
    if (rc == 0)
        rc = sbx__kc_delete_top(c, &t, err);
    /* Gone once its pod is: an exec on it fails from then on. */
    if (rc == 0)
        rc = sbx__kc_wait_gone(c, t.id, err);
    if (rc == 0)
        rc = sbx__kube_forward_forget(t.id, err);
    json_decref(t.obj);
    return rc;
}

void sbx__kc_free(struct sbx_client *bc)
{
    struct kclient *c = (struct kclient *)bc;
    sbx__kube_watch_free(c->pods);
    sbx__kube_watch_free(c->claims);
    sbx__kube_api_free(c->api);
    pthread_mutex_destroy(&c->lock);
    free(c->image);
    free(c->warm_pool);
    free(c->template_name);
    free(c->runtime_class);
    free(c->storage_class);
    json_decref(c->options);
    free(c);
}
