/* The objects the Kubernetes provider sends (a Sandbox with sbx's pod template, a bare Pod and
 * its PersistentVolumeClaim, a SandboxClaim, a Sandbox of a SandboxTemplate) and what it reads
 * back from them (readiness, why a pod is not running). Pure functions over JSON: the unit tests
 * check the objects against agent-sandbox's CRD schemas (tests/kubernetes/crdcheck.py). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "providers/kubernetes/kube.h"
#include "sbx/json.h"

/* A Kubernetes quantity: binary suffixes where exact ("2Gi", "512Mi"), else bytes. */
char *sbx__kube_bytes_quantity(uint64_t n)
{
    static const char *const suffix[] = {"Ei", "Pi", "Ti", "Gi", "Mi", "Ki"};
    for (int i = 0; i < 6; i++) {
        uint64_t unit = (uint64_t)1 << (10 * (6 - i));
        if (n >= unit && n % unit == 0)
            return sbx_xasprintf("%" PRIu64 "%s", n / unit, suffix[i]);
    }
    return sbx_xasprintf("%" PRIu64, n);
}

/* CPUs from thousandths: "1", "1500m". */
char *sbx__kube_cpu_quantity(uint64_t millis)
{
    if (millis % 1000 == 0)
        return sbx_xasprintf("%" PRIu64, millis / 1000);
    return sbx_xasprintf("%" PRIu64 "m", millis);
}

static json_t *labels_of(const struct sbx__kube_spec *s)
{
    return json_pack("{s:s,s:s}", SBX__KUBE_LABEL_ID, s->id, SBX__KUBE_LABEL_MANAGED, "sbx");
}

/* The workspace volume's claim spec. */
static json_t *pvc_spec(const struct sbx__kube_spec *s)
{
    char *q = sbx__kube_bytes_quantity(s->disk);
    json_t *spec = json_pack("{s:[s],s:{s:{s:s}}}", "accessModes", "ReadWriteOnce", "resources",
                             "requests", "storage", q);
    if (s->storage_class)
        sbx_json_set(spec, "storageClassName", sbx_json_str(s->storage_class));
    free(q);
    return spec;
}

static json_t *resources(const struct sbx__kube_spec *s)
{
    json_t *lim = json_object();
    if (s->memory != SBX_KUBE_LIMIT_NONE) {
        char *q = sbx__kube_bytes_quantity(s->memory);
        sbx_json_set(lim, "memory", sbx_json_str(q));
        free(q);
    }
    if (s->cpu_millis != SBX_KUBE_LIMIT_NONE) {
        char *q = sbx__kube_cpu_quantity(s->cpu_millis);
        sbx_json_set(lim, "cpu", sbx_json_str(q));
        free(q);
    }
    /* Requests equal to limits: the pod is Guaranteed, the scheduler reserves what it uses. */
    return json_pack("{s:O,s:o}", "requests", lim, "limits", lim);
}

/* The sandbox's one container: the image's filesystem, a shell that waits (and ends at once
 * on SIGTERM, so a stop takes no grace period), the workspace volume at the root. */
static json_t *container(const struct sbx__kube_spec *s)
{
    json_t *c = json_object();
    sbx_json_set(c, "name", sbx_json_str(SBX__KUBE_CONTAINER));
    sbx_json_set(c, "image", sbx_json_str(s->image));
    sbx_json_set(c, "command", json_pack("[s,s,s]", "/bin/sh", "-c", SBX__KUBE_IDLE));
    sbx_json_set(c, "workingDir", sbx_json_str(s->root));
    if (json_array_size(s->env))
        sbx_json_set(c, "env", json_deep_copy(s->env));
    sbx_json_set(c, "resources", resources(s));
    json_t *sc = json_pack("{s:b,s:{s:[s]}}", "allowPrivilegeEscalation", 0, "capabilities", "drop",
                           "ALL");
    if (s->run_as_user == SBX_KUBE_IMAGE_USER) {
        /* The image's user may be root: keep the capabilities a root shell expects to have
         * (chown, kill, setuid for su) and drop the rest. */
        sbx_json_set(sc, "capabilities",
                     json_pack("{s:[s,s,s,s,s,s]}", "drop", "NET_RAW", "MKNOD", "AUDIT_WRITE",
                               "SETFCAP", "SYS_CHROOT", "NET_BIND_SERVICE"));
        sbx_json_set(sc, "allowPrivilegeEscalation", json_false());
    }
    sbx_json_set(c, "securityContext", sc);
    sbx_json_set(c, "volumeMounts",
                 json_pack("[{s:s,s:s}]", "name", SBX__KUBE_VOLUME, "mountPath", s->root));
    return c;
}

json_t *sbx__kube_pod_template(const struct sbx__kube_spec *s, int bare)
{
    json_t *spec = json_object();
    sbx_json_set(spec, "automountServiceAccountToken", json_false());
    sbx_json_set(spec, "enableServiceLinks", json_false());
    /* The pause container reaps what commands leave behind. */
    sbx_json_set(spec, "shareProcessNamespace", json_true());
    sbx_json_set(spec, "terminationGracePeriodSeconds", json_integer(SBX__KUBE_GRACE_S));
    if (s->runtime_class)
        sbx_json_set(spec, "runtimeClassName", sbx_json_str(s->runtime_class));
    if (s->run_as_user != SBX_KUBE_IMAGE_USER) {
        json_int_t uid = (json_int_t)s->run_as_user;
        sbx_json_set(spec, "securityContext",
                     json_pack("{s:I,s:I,s:I,s:b,s:{s:s}}", "runAsUser", uid, "runAsGroup", uid,
                               "fsGroup", uid, "runAsNonRoot", uid != 0, "seccompProfile", "type",
                               "RuntimeDefault"));
    } else {
        sbx_json_set(spec, "securityContext",
                     json_pack("{s:{s:s}}", "seccompProfile", "type", "RuntimeDefault"));
    }
    sbx_json_set(spec, "containers", json_pack("[o]", container(s)));
    /* A Sandbox's controller adds the volumes of its claim templates; a bare pod names its
     * claim itself; without a volume the workspace is an emptyDir. */
    if (s->disk == SBX_KUBE_LIMIT_NONE)
        sbx_json_set(spec, "volumes",
                     json_pack("[{s:s,s:{}}]", "name", SBX__KUBE_VOLUME, "emptyDir"));
    else if (bare) {
        char *claim = sbx_xasprintf("%s-%s", SBX__KUBE_VOLUME, s->name);
        sbx_json_set(spec, "volumes",
                     json_pack("[{s:s,s:{s:s}}]", "name", SBX__KUBE_VOLUME, "persistentVolumeClaim",
                               "claimName", claim));
        free(claim);
    }
    json_t *meta = json_pack("{s:o}", "labels", labels_of(s));
    return json_pack("{s:o,s:o}", "metadata", meta, "spec", spec);
}

static json_t *metadata(const struct sbx__kube_spec *s, const char *name)
{
    json_t *md = json_pack("{s:s,s:s,s:o}", "name", name, "namespace", s->namespace_name, "labels",
                           labels_of(s));
    if (s->annotations && json_object_size(s->annotations))
        sbx_json_set(md, "annotations", json_deep_copy(s->annotations));
    return md;
}

json_t *sbx__kube_sandbox_object(const struct sbx__kube_spec *s)
{
    json_t *spec = json_object();
    sbx_json_set(spec, "podTemplate", sbx__kube_pod_template(s, 0));
    if (s->disk != SBX_KUBE_LIMIT_NONE) {
        json_t *vct = json_pack("{s:{s:s,s:o},s:o}", "metadata", "name", SBX__KUBE_VOLUME, "labels",
                                labels_of(s), "spec", pvc_spec(s));
        sbx_json_set(spec, "volumeClaimTemplates", json_pack("[o]", vct));
    }
    sbx_json_set(spec, "operatingMode", sbx_json_str("Running"));
    return json_pack("{s:s,s:s,s:o,s:o}", "apiVersion", SBX__KUBE_SANDBOX_GV, "kind", "Sandbox",
                     "metadata", metadata(s, s->name), "spec", spec);
}

json_t *sbx__kube_pod_object(const struct sbx__kube_spec *s)
{
    json_t *tmpl = sbx__kube_pod_template(s, 1);
    json_t *spec = json_incref(json_object_get(tmpl, "spec"));
    json_decref(tmpl);
    /* A bare pod restarts its shell in place if it dies; stop deletes it. */
    sbx_json_set(spec, "restartPolicy", sbx_json_str("Always"));
    json_t *md = metadata(s, s->name);
    sbx_json_set(json_object_get(md, "labels"), SBX__KUBE_LABEL_BARE, sbx_json_str("pod"));
    return json_pack("{s:s,s:s,s:o,s:o}", "apiVersion", "v1", "kind", "Pod", "metadata", md, "spec",
                     spec);
}

json_t *sbx__kube_pvc_object(const struct sbx__kube_spec *s)
{
    char *name = sbx_xasprintf("%s-%s", SBX__KUBE_VOLUME, s->name);
    json_t *md = metadata(s, name);
    free(name);
    json_object_del(md, "annotations");
    return json_pack("{s:s,s:s,s:o,s:o}", "apiVersion", "v1", "kind", "PersistentVolumeClaim",
                     "metadata", md, "spec", pvc_spec(s));
}

json_t *sbx__kube_claim_object(const struct sbx__kube_spec *s, const char *pool)
{
    json_t *spec = json_pack("{s:{s:s},s:{s:o}}", "warmPoolRef", "name", pool,
                             "additionalPodMetadata", "labels", labels_of(s));
    /* An environment forces a cold start from the template (and the template's consent). */
    if (json_array_size(s->env))
        sbx_json_set(spec, "env", json_deep_copy(s->env));
    return json_pack("{s:s,s:s,s:o,s:o}", "apiVersion", SBX__KUBE_EXT_GV, "kind", "SandboxClaim",
                     "metadata", metadata(s, s->name), "spec", spec);
}

int sbx__kube_sandbox_from_template(const json_t *tmpl, const struct sbx__kube_spec *s,
                                    json_t **out, struct sbx_error *err)
{
    const json_t *tspec = json_object_get(tmpl, "spec");
    const json_t *pt = json_object_get(tspec, "podTemplate");
    const json_t *containers = json_object_get(json_object_get(pt, "spec"), "containers");
    if (!json_is_object(pt) || json_array_size(containers) == 0)
        return sbx_error_set(
                err, SBX_E_INVAL, 0, "SandboxTemplate '%s' has no pod template with a container",
                json_string_value(json_object_get(json_object_get(tmpl, "metadata"), "name")));
    json_t *podt = json_deep_copy(pt);
    json_t *pmd = json_object_get(podt, "metadata");
    if (!json_is_object(pmd)) {
        pmd = json_object();
        sbx_json_set(podt, "metadata", pmd);
    }
    json_t *pl = json_object_get(pmd, "labels");
    if (!json_is_object(pl)) {
        pl = json_object();
        sbx_json_set(pmd, "labels", pl);
    }
    json_t *mine = labels_of(s);
    json_object_update(pl, mine);
    json_decref(mine);
    json_t *ps = json_object_get(podt, "spec");
    if (!json_object_get(ps, "automountServiceAccountToken"))
        sbx_json_set(ps, "automountServiceAccountToken", json_false());
    json_t *spec = json_pack("{s:o,s:s}", "podTemplate", podt, "operatingMode", "Running");
    const json_t *vct = json_object_get(tspec, "volumeClaimTemplates");
    if (json_array_size(vct))
        sbx_json_set(spec, "volumeClaimTemplates", json_deep_copy(vct));
    json_t *md = metadata(s, s->name);
    sbx_json_set(json_object_get(md, "labels"), SBX__KUBE_LABEL_TEMPLATE,
                 sbx_json_str(json_string_value(
                         json_object_get(json_object_get(tmpl, "metadata"), "name"))));
    *out = json_pack("{s:s,s:s,s:o,s:o}", "apiVersion", SBX__KUBE_SANDBOX_GV, "kind", "Sandbox",
                     "metadata", md, "spec", spec);
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Reading objects back */

const json_t *sbx__kube_condition(const json_t *obj, const char *type)
{
    const json_t *conds = json_object_get(json_object_get(obj, "status"), "conditions"), *c;
    size_t i;
    json_array_foreach(conds, i, c)
    {
        const char *t = json_string_value(json_object_get(c, "type"));
        if (t && strcmp(t, type) == 0)
            return c;
    }
    return NULL;
}

int sbx__kube_condition_true(const json_t *obj, const char *type)
{
    const char *st = json_string_value(json_object_get(sbx__kube_condition(obj, type), "status"));
    return st && strcmp(st, "True") == 0;
}

int sbx__kube_pod_ready(const json_t *pod)
{
    const char *phase = json_string_value(json_object_get(json_object_get(pod, "status"), "phase"));
    return phase && strcmp(phase, "Running") == 0 && sbx__kube_condition_true(pod, "Ready") &&
           !json_object_get(json_object_get(pod, "metadata"), "deletionTimestamp");
}

/* The first waiting or terminated reason of the pod's containers, with its message. */
static const json_t *container_state(const json_t *pod, const char **reason, const char **msg)
{
    const json_t *cs = json_object_get(json_object_get(pod, "status"), "containerStatuses"), *c;
    size_t i;
    json_array_foreach(cs, i, c)
    {
        const json_t *st = json_object_get(c, "state");
        const json_t *w = json_object_get(st, "waiting");
        if (!w)
            w = json_object_get(st, "terminated");
        const char *r = json_string_value(json_object_get(w, "reason"));
        if (r) {
            *reason = r;
            *msg = json_string_value(json_object_get(w, "message"));
            return c;
        }
    }
    return NULL;
}

int sbx__kube_pod_failure(const json_t *pod, char *out, size_t n)
{
    const char *reason = NULL, *msg = NULL;
    const json_t *c = container_state(pod, &reason, &msg);
    const char *phase = json_string_value(json_object_get(json_object_get(pod, "status"), "phase"));
    static const char *const fatal[] = {
            "ErrImagePull",         "ImagePullBackOff",  "InvalidImageName",
            "ErrImageNeverPull",    "CrashLoopBackOff",  "CreateContainerConfigError",
            "CreateContainerError", "RunContainerError", NULL};
    if (c) {
        for (const char *const *f = fatal; *f; f++) {
            if (strcmp(reason, *f) != 0)
                continue;
            const char *img = json_string_value(json_object_get(c, "image"));
            if (strstr(reason, "Image"))
                snprintf(out, n, "its image '%s' cannot be pulled (%s%s%s)", img ? img : "?",
                         reason, msg ? ": " : "", msg ? msg : "");
            else
                snprintf(out, n, "its container cannot run (%s%s%s)", reason, msg ? ": " : "",
                         msg ? msg : "");
            return 1;
        }
    }
    if (phase && (strcmp(phase, "Failed") == 0 || strcmp(phase, "Succeeded") == 0)) {
        snprintf(out, n, "its pod ended (phase %s%s%s)", phase, reason ? ", " : "",
                 reason ? reason : "");
        return 1;
    }
    return 0;
}

void sbx__kube_pod_pending_why(const json_t *pod, const json_t *events, char *out, size_t n)
{
    const char *reason = NULL, *msg = NULL;
    size_t used = 0;
    out[0] = '\0';
#define ADD(...)                                                             \
    do {                                                                     \
        int w_ = snprintf(out + used, n - used, __VA_ARGS__);                \
        used += w_ > 0 && (size_t)w_ < n - used ? (size_t)w_ : n - used - 1; \
    } while (0)
    const char *phase = json_string_value(json_object_get(json_object_get(pod, "status"), "phase"));
    ADD("pod phase %s", phase ? phase : "unknown");
    const json_t *sched = sbx__kube_condition(pod, "PodScheduled");
    if (sched && !sbx__kube_condition_true(pod, "PodScheduled")) {
        const char *r = json_string_value(json_object_get(sched, "reason"));
        const char *m = json_string_value(json_object_get(sched, "message"));
        ADD("; not scheduled (%s%s%s)", r ? r : "no reason", m ? ": " : "", m ? m : "");
    }
    if (container_state(pod, &reason, &msg))
        ADD("; container %s%s%s", reason, msg ? ": " : "", msg ? msg : "");
    /* The newest warning events say what the kubelet and the scheduler tried. */
    const json_t *ev, *last = NULL;
    size_t i;
    json_array_foreach(json_object_get(events, "items"), i, ev)
    {
        const char *type = json_string_value(json_object_get(ev, "type"));
        if (type && strcmp(type, "Warning") == 0)
            last = ev;
    }
    if (last) {
        const char *r = json_string_value(json_object_get(last, "reason"));
        const char *m = json_string_value(json_object_get(last, "message"));
        ADD("; event %s%s%s", r ? r : "", m ? ": " : "", m ? m : "");
    }
#undef ADD
}
