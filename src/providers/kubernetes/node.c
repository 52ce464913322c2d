/* The kubernetes provider's sbx-node mode (--option node=sbx-node; docs/internals/
 * kubernetes-provider.md, "The sbx-node mode"): each sandbox is a pod whose container runs the
 * sbx-node daemon, its certificate, key and the deployment's CA delivered as a Secret the pod
 * mounts; sbx reaches the daemon through a port-forward relay of the API server (forward.c) and
 * drives the sandbox with the remote provider's client (src/providers/remote/), through the
 * registry: nothing of that provider is copied here. The harness keeps its own certificate. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "providers/kubernetes/client.h"
#include "providers/kubernetes/forward.h"
#include "providers/kubernetes/node.h"
#include "sbx/b64.h"
#include "sbx/buf.h"
#include "sbx/hash.h"
#include "sbx/json.h"
#include "sbx/time.h"

#define PEM_MAX     ((size_t)64 << 10)
#define TLS_DIR     "/var/run/secrets/sbx-node"
#define STATE_DIR   "/var/lib/sbx-node"
#define CONTAINER   "sbx-node"
#define ANN_NODE_ID SBX__KC_ANN("node-id")
#define ANN_OPTIONS SBX__KC_ANN("node-options") /* the options it was made with (JSON) */
#define WORKLOAD    "node"

struct nclient {
    struct sbx_client base;
    struct sbx_client *kc; /* the provider's own client: its API, watch and waits */
    struct sbx__kube_node_opts o;
    json_t *options; /* what a state records */
};

struct nsession {
    struct sbx_session base;
    struct sbx_session_ops ops; /* session_ops, less what the remote session lacks */
    struct sbx_session *in;     /* the remote provider's session, through the relay */
    struct sbx_client *rc;      /* its client */
    struct sbx__kube_api *api;
    char *pod, *node_id;
    json_t *extra; /* the kubernetes fields of the state */
};

/* ---------------------------------------------------------------------------------------------
 * Sessions: every operation is the remote session's */

#define IN(bs) (((struct nsession *)(bs))->in)

/* An operation that could not reach the daemon: SBX_E_SANDBOX when the sandbox's pod is gone
 * (deleted, or being deleted), else the error as it was. */
static int gone(struct sbx_session *bs, int rc, struct sbx_error *err)
{
    struct nsession *s = (struct nsession *)bs;
    if (rc != -SBX_E_HTTP)
        return rc;
    json_t *pod = NULL;
    struct sbx_error e = SBX_ERROR_INIT;
    int r = sbx__kube_get(s->api, SBX__KUBE_POD, s->pod, &pod, &e);
    int deleted =
            r == -SBX_E_NOTFOUND ||
            (r == 0 && json_object_get(json_object_get(pod, "metadata"), "deletionTimestamp"));
    json_decref(pod);
    if (deleted)
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "sandbox '%s' is gone: its pod '%s' was deleted",
                           s->base.id, s->pod);
    return rc;
}

static int n_exec(struct sbx_session *bs, const struct sbx_exec_spec *spec, const char *cwd,
                  struct sbx_proc **out, struct sbx_error *err)
{
    return gone(bs, IN(bs)->ops->exec_start(IN(bs), spec, cwd, out, err), err);
}
static int n_read_open(struct sbx_session *bs, const char *p, int *fd, uint64_t *n,
                       struct sbx_error *e)
{
    return gone(bs, IN(bs)->ops->read_open(IN(bs), p, fd, n, e), e);
}
static int n_write(struct sbx_session *bs, const char *p, const struct sbx_file_reader *r,
                   uint64_t max, mode_t m, int fl, struct sbx_error *e)
{
    return gone(bs, IN(bs)->ops->write(IN(bs), p, r, max, m, fl, e), e);
}
static int n_ls(struct sbx_session *bs, const char *p, struct sbx_dirlist *o, struct sbx_error *e)
{
    return gone(bs, IN(bs)->ops->ls(IN(bs), p, o, e), e);
}
static int n_stat(struct sbx_session *bs, const char *p, struct sbx_dirent *o, struct sbx_error *e)
{
    return gone(bs, IN(bs)->ops->stat(IN(bs), p, o, e), e);
}
static int n_mkdir(struct sbx_session *bs, const char *p, int fl, struct sbx_error *e)
{
    return gone(bs, IN(bs)->ops->mkdir(IN(bs), p, fl, e), e);
}
static int n_rm(struct sbx_session *bs, const char *p, int fl, struct sbx_error *e)
{
    return gone(bs, IN(bs)->ops->rm(IN(bs), p, fl, e), e);
}
static int n_chmod(struct sbx_session *bs, const char *p, mode_t m, struct sbx_error *e)
{
    return gone(bs, IN(bs)->ops->chmod(IN(bs), p, m, e), e);
}
static int n_workspace_fd(struct sbx_session *bs, int *out, struct sbx_error *e)
{
    return gone(bs, IN(bs)->ops->workspace_fd(IN(bs), out, e), e);
}
static int n_workspace_export(struct sbx_session *bs, int fd, struct sbx_error *e)
{
    return gone(bs, IN(bs)->ops->workspace_export(IN(bs), fd, e), e);
}
static int n_workspace_import(struct sbx_session *bs, int fd, struct sbx_error *e)
{
    return gone(bs, IN(bs)->ops->workspace_import(IN(bs), fd, e), e);
}
static int n_stats(struct sbx_session *bs, struct sbx_session_stats *o, struct sbx_error *e)
{
    return gone(bs, IN(bs)->ops->stats(IN(bs), o, e), e);
}
static int n_log_open(struct sbx_session *bs, int *fd, struct sbx_error *e)
{
    return gone(bs, IN(bs)->ops->log_open(IN(bs), fd, e), e);
}
static int n_record_snapshot(struct sbx_session *bs, const char *ref, struct sbx_error *e)
{
    return IN(bs)->ops->record_snapshot(IN(bs), ref, e);
}

static int n_resolve_port(struct sbx_session *bs, int port, char **out, struct sbx_error *err)
{
    (void)bs;
    (void)out;
    return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                         "port %d: a sandbox of the kubernetes provider's sbx-node mode forwards "
                         "no ports yet",
                         port);
}

/* The remote session's state, named as this provider's: its id and the pod's fields. */
static int n_state(struct sbx_session *bs, json_t **out, struct sbx_error *err)
{
    struct nsession *s = (struct nsession *)bs;
    json_t *st = NULL;
    int rc = s->in->ops->state(s->in, &st, err);
    if (rc < 0)
        return rc;
    json_object_del(st, "node");
    json_object_update(st, s->extra);
    *out = st;
    return 0;
}

static void delete_objects(struct sbx__kube_api *api, const char *id, const char *pod)
{
    struct sbx_error ignored = SBX_ERROR_INIT;
    char *secret = sbx_xasprintf("%s-tls", pod);
    (void)sbx__kube_forward_forget(id, &ignored);
    (void)sbx__kube_delete(api, SBX__KUBE_POD, pod, &ignored);
    (void)sbx__kube_delete(api, SBX__KUBE_SECRET, secret, &ignored);
    sbx_error_clear(&ignored);
    free(secret);
}

static int n_close(struct sbx_session *bs, int delete_workspace, struct sbx_error *err)
{
    struct nsession *s = (struct nsession *)bs;
    if (!delete_workspace)
        return 0;
    int rc = s->in->ops->close(s->in, 1, err);
    delete_objects(s->api, s->base.id, s->pod);
    return rc;
}

static void n_free(struct sbx_session *bs)
{
    struct nsession *s = (struct nsession *)bs;
    if (!s)
        return;
    sbx_session_release_base(&s->base);
    if (s->in)
        s->in->ops->free(s->in);
    if (s->rc)
        s->rc->ops->free(s->rc);
    sbx__kube_api_free(s->api);
    free(s->pod);
    free(s->node_id);
    json_decref(s->extra);
    free(s);
}

static const struct sbx_session_ops session_ops = {
        .exec_start = n_exec,
        .read_open = n_read_open,
        .write = n_write,
        .ls = n_ls,
        .stat = n_stat,
        .mkdir = n_mkdir,
        .rm = n_rm,
        .chmod = n_chmod,
        .resolve_port = n_resolve_port,
        .state = n_state,
        .close = n_close,
        .workspace_fd = n_workspace_fd,
        .record_snapshot = n_record_snapshot,
        .workspace_export = n_workspace_export,
        .workspace_import = n_workspace_import,
        .stats = n_stats,
        .log_open = n_log_open,
        .free = n_free,
};

/* The operations of a session over in: the optional ones only where in has them (the session
 * layer reads a missing one as "not offered"). */
static void ops_for(const struct sbx_session_ops *in, struct sbx_session_ops *out)
{
    *out = session_ops;
    if (!in->workspace_fd)
        out->workspace_fd = NULL;
    if (!in->record_snapshot)
        out->record_snapshot = NULL;
    if (!in->workspace_export)
        out->workspace_export = NULL;
    if (!in->workspace_import)
        out->workspace_import = NULL;
    if (!in->stats)
        out->stats = NULL;
    if (!in->log_open)
        out->log_open = NULL;
}

/* ---------------------------------------------------------------------------------------------
 * Reaching the daemon */

/* -SBX_E_SANDBOX when pod will not run its daemon without a change (it ended, its container
 * keeps failing), with why; 0 while it may still come. */
static int pod_ended(struct sbx__kube_api *api, const char *pod, struct sbx_error *err)
{
    json_t *obj = NULL;
    struct sbx_error e = SBX_ERROR_INIT;
    char why[512];
    int rc = 0;
    if (sbx__kube_get(api, SBX__KUBE_POD, pod, &obj, &e) == 0 &&
        sbx__kube_pod_failure(obj, why, sizeof(why)))
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "pod '%s' of the sbx-node daemon: %s", pod, why);
    json_decref(obj);
    return rc;
}

/* A remote client of the daemon in pod: a relay to its port (made, or the live one), then the
 * daemon's answer to GET /v1/node through it, retried until deadline (the pod runs before its
 * daemon listens). */
static int reach(struct nclient *c, const char *id, const char *pod, int64_t deadline,
                 struct sbx_client **out, struct sbx_error *err)
{
    struct kclient *kc = (struct kclient *)c->kc;
    struct sbx__kube_target t = {
            .api = kc->api, .pod = pod, .container = CONTAINER, .id = id, .root = "/"};
    char *url = NULL;
    int rc = sbx__kube_forward_unchecked(&t, (int)c->o.port, &url, err);
    if (rc < 0)
        return rc;
    /* The relay speaks whatever the pod's port speaks: here the daemon's mutual TLS. */
    char *https = sbx_xasprintf("https://%s", url + strlen("http://"));
    free(url);
    json_t *ro = json_pack("{s:s, s:s, s:s, s:s}", "node", https, "node_ca", c->o.ca, "node_cert",
                           c->o.cert, "node_key", c->o.key);
    free(https);
    const struct sbx__provider_def *remote = sbx__provider_def("remote");
    struct sbx_client *rc_client = NULL;
    rc = remote ? remote->client_new_json(ro, &rc_client, err)
                : sbx_error_set(err, SBX_E_UNSUPPORTED, 0, "no remote provider in this build");
    json_decref(ro);
    while (rc == 0) {
        json_t *list = NULL;
        struct sbx_error e = SBX_ERROR_INIT;
        int r = rc_client->ops->list(rc_client, &list, &e);
        json_decref(list);
        if (r == 0) {
            sbx_error_clear(&e);
            break;
        }
        /* Only a daemon not listening yet is waited for: a certificate refused on either
         * side, an answer that is an error, or a pod that ended will not change. */
        if (e.code == SBX_E_HTTP && (r = pod_ended(kc->api, pod, err)) < 0) {
            rc = r;
            sbx_error_clear(&e);
            break;
        }
        if (e.code != SBX_E_HTTP || strstr(e.msg, "certificate")) {
            rc = sbx_error_set(err, e.code, e.sys_errno, "the sbx-node daemon of pod '%s': %s", pod,
                               e.msg);
            break;
        }
        if (sbx_deadline_poll_ms(deadline) <= 0) {
            rc = sbx_error_set(err, SBX_E_TIMEOUT, 0,
                               "the sbx-node daemon of pod '%s' did not answer on port %u: %s", pod,
                               c->o.port, e.msg);
            sbx_error_clear(&e);
            break;
        }
        sbx_error_clear(&e);
        sbx_sleep_ms(200);
    }
    if (rc < 0 && rc_client)
        rc_client->ops->free(rc_client);
    else
        *out = rc_client;
    return rc;
}

static struct nsession *session_wrap(struct nclient *c, const char *id, const char *pod,
                                     const json_t *options, struct sbx_client *rcl,
                                     struct sbx_session *in)
{
    struct kclient *kc = (struct kclient *)c->kc;
    struct nsession *s = sbx_xcalloc(1, sizeof(*s));
    ops_for(in->ops, &s->ops);
    sbx_session_init_base(&s->base, &s->ops, "kubernetes", id, in->root);
    s->in = in;
    s->rc = rcl;
    s->api = sbx__kube_api_ref(kc->api);
    s->pod = sbx_xstrdup(pod);
    s->node_id = sbx_xstrdup(in->id);
    s->extra = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:O}", "provider", "kubernetes", "id",
                         id, "kind", "Pod", "name", pod, "namespace", kc->api->namespace_name,
                         "context", kc->api->context, "node_id", in->id, "options",
                         options ? options : c->options);
    return s;
}

/* ---------------------------------------------------------------------------------------------
 * Create */

static int read_pem(const char *path, const char *what, struct sbx_buf *b64, struct sbx_error *err)
{
    struct sbx_buf raw;
    sbx_buf_init(&raw, PEM_MAX);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    int rc = fd < 0 ? sbx_error_errno(err, errno, "cannot open %s '%s'", what, path) : 0;
    while (rc == 0) {
        char chunk[4096];
        ssize_t n = read(fd, chunk, sizeof(chunk));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            rc = sbx_error_errno(err, errno, "cannot read %s '%s'", what, path);
        else if (n == 0)
            break;
        else if (raw.len + (size_t)n > PEM_MAX)
            rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "%s '%s' is over %zu bytes", what, path,
                               PEM_MAX);
        else
            rc = sbx_buf_add(&raw, chunk, (size_t)n, err);
        explicit_bzero(chunk, sizeof(chunk));
    }
    if (fd >= 0)
        close(fd);
    if (rc == 0 && (raw.len == 0 || !memmem(raw.data, raw.len, "-----BEGIN ", 11)))
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "%s '%s' is not PEM", what, path);
    if (rc == 0)
        rc = sbx_b64_encode(raw.data, raw.len, b64, err);
    if (raw.data)
        explicit_bzero(raw.data, raw.len);
    sbx_buf_release(&raw);
    return rc;
}

static json_t *labels(const char *id)
{
    return json_pack("{s:s, s:s, s:s}", SBX__KUBE_LABEL_ID, id, SBX__KUBE_LABEL_MANAGED, "sbx",
                     SBX__KUBE_LABEL_BARE, WORKLOAD);
}

/* The Secret: the daemon's certificate and key and the deployment's CA (never the harness's). */
static int secret_object(const struct nclient *c, const char *id, const char *name, json_t **out,
                         struct sbx_error *err)
{
    struct sbx_buf crt, key, ca;
    sbx_buf_init(&crt, PEM_MAX * 2);
    sbx_buf_init(&key, PEM_MAX * 2);
    sbx_buf_init(&ca, PEM_MAX * 2);
    int rc = read_pem(c->o.node_cert, "the node's certificate", &crt, err);
    if (rc == 0)
        rc = read_pem(c->o.node_key, "the node's key", &key, err);
    if (rc == 0)
        rc = read_pem(c->o.ca, "the deployment's ca certificate", &ca, err);
    if (rc == 0)
        *out = json_pack("{s:s, s:s, s:{s:s, s:o}, s:s, s:{s:s#, s:s#, s:s#}}", "apiVersion", "v1",
                         "kind", "Secret", "metadata", "name", name, "labels", labels(id), "type",
                         "Opaque", "data", "tls.crt", crt.data, crt.len, "tls.key", key.data,
                         key.len, "ca.crt", ca.data, ca.len);
    if (key.data)
        explicit_bzero(key.data, key.len);
    sbx_buf_release(&crt);
    sbx_buf_release(&key);
    sbx_buf_release(&ca);
    return rc;
}

/* The pod: the daemon listening on the port on every address of the pod, its state and the
 * local provider's folders on an emptyDir, privileged (the local provider makes namespaces,
 * cgroups and mounts for each sandbox). */
static json_t *pod_object(const struct nclient *c, const char *id, const char *name)
{
    struct kclient *kc = (struct kclient *)c->kc;
    char listen[32];
    snprintf(listen, sizeof(listen), "0.0.0.0:%u", c->o.port);
    json_t *cmd =
            json_pack("[s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s]", "/bin/sh", "-c",
                      "mkdir -p -m 0700 \"$XDG_RUNTIME_DIR\" && exec \"$0\" \"$@\"", c->o.program,
                      "--listen", listen, "--cert", TLS_DIR "/tls.crt", "--key", TLS_DIR "/tls.key",
                      "--ca", TLS_DIR "/ca.crt", "--state", STATE_DIR "/records", "--name", name);
    json_t *env = json_pack(
            "[{s:s,s:s},{s:s,s:s},{s:s,s:s},{s:s,s:s},{s:s,s:s},{s:s,s:s}]", "name",
            "XDG_STATE_HOME", "value", STATE_DIR "/state", "name", "XDG_RUNTIME_DIR", "value",
            STATE_DIR "/run", "name", "SBX_WORKSPACES", "value", STATE_DIR "/ws", "name",
            "SBX_STOPPED", "value", STATE_DIR "/stopped", "name", "SBX_SNAPSHOTS", "value",
            STATE_DIR "/snapshots", "name", "SBX_RECORDS", "value", STATE_DIR "/local-records");
    json_t *ctr = json_pack(
            "{s:s, s:s, s:o, s:o, s:[{s:s, s:i, s:s}], s:{s:b}, s:[{s:s, s:s, s:b}, {s:s, s:s}]}",
            "name", CONTAINER, "image", kc->image, "command", cmd, "env", env, "ports", "name",
            "sbx-node", "containerPort", (int)c->o.port, "protocol", "TCP", "securityContext",
            "privileged", 1, "volumeMounts", "name", "tls", "mountPath", TLS_DIR, "readOnly", 1,
            "name", "state", "mountPath", STATE_DIR);
    if (kc->memory != SBX_KUBE_LIMIT_NONE) {
        char *m = sbx__kube_bytes_quantity(kc->memory);
        sbx_json_set(ctr, "resources", json_pack("{s:{s:s}}", "limits", "memory", m));
        free(m);
    }
    char *secret = sbx_xasprintf("%s-tls", name);
    json_t *spec = json_pack(
            "{s:[o], s:s, s:b, s:[{s:s, s:{s:s, s:i}}, {s:s, s:{}}]}", "containers", ctr,
            "restartPolicy", "Always", "automountServiceAccountToken", 0, "volumes", "name", "tls",
            "secret", "secretName", secret, "defaultMode", 0400, "name", "state", "emptyDir");
    free(secret);
    if (kc->runtime_class)
        sbx_json_set(spec, "runtimeClassName", sbx_json_str(kc->runtime_class));
    return json_pack("{s:s, s:s, s:{s:s, s:o}, s:o}", "apiVersion", "v1", "kind", "Pod", "metadata",
                     "name", name, "labels", labels(id), "spec", spec);
}

static int nc_create(struct sbx_client *bc, const struct sbx_create_spec *spec,
                     struct sbx_session **out, struct sbx_error *err)
{
    struct nclient *c = (struct nclient *)bc;
    struct kclient *kc = (struct kclient *)c->kc;
    char id[SBX__KC_ID_LEN + 1];
    if (spec->id && spec->id[0])
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "the sbx-node mode names its sandboxes: '%s' cannot be chosen",
                             spec->id);
    if (!kc->image)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "node=sbx-node needs --image to create a sandbox (an image with "
                             "sbx-node: scripts/node-image); warm pools and templates are not "
                             "used in this mode");
    if (!c->o.node_cert || !c->o.node_key)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "node=sbx-node needs --node-tls-cert and --node-tls-key to create a "
                             "sandbox (the daemon's certificate and key, issued with --node "
                             "--host 127.0.0.1: they go into the pod's secret)");
    int rc = sbx_random_hex(id, SBX__KUBE_ID_BYTES, err);
    if (rc < 0)
        return rc;
    char *name = sbx_xasprintf("sbx-%s", id), *secret = sbx_xasprintf("sbx-%s-tls", id);
    json_t *sec = NULL, *pod = NULL;
    int made = 0;
    struct sbx_client *rcl = NULL;
    struct sbx_session *in = NULL;
    int64_t deadline = sbx_deadline_after_ms(kc->ready_ms);
    rc = secret_object(c, id, secret, &sec, err);
    if (rc == 0 && (rc = sbx__kube_create(kc->api, SBX__KUBE_SECRET, sec, NULL, err)) == 0) {
        made = 1;
        pod = pod_object(c, id, name);
        rc = sbx__kube_create(kc->api, SBX__KUBE_POD, pod, NULL, err);
    }
    if (rc == 0)
        rc = sbx__kc_wait_ready(kc, id, deadline, err);
    if (rc == 0)
        rc = reach(c, id, name, deadline, &rcl, err);
    if (rc == 0)
        rc = rcl->ops->create(rcl, spec, &in, err);
    if (rc == 0) {
        char *opts = sbx_json_dumps(c->options, JSON_COMPACT);
        json_t *patch = json_pack("{s:{s:{s:s, s:s}}}", "metadata", "annotations", ANN_NODE_ID,
                                  in->id, ANN_OPTIONS, opts);
        free(opts);
        rc = sbx__kube_patch(kc->api, SBX__KUBE_POD, name, patch, NULL, err);
        json_decref(patch);
    }
    if (rc == 0) {
        *out = &session_wrap(c, id, name, NULL, rcl, in)->base;
    } else {
        if (in) {
            struct sbx_error ignored = SBX_ERROR_INIT;
            (void)in->ops->close(in, 1, &ignored);
            sbx_error_clear(&ignored);
            in->ops->free(in);
        }
        if (rcl)
            rcl->ops->free(rcl);
        if (made)
            delete_objects(kc->api, id, name);
        sbx_error_prefix(err, "cannot create sandbox");
    }
    json_decref(sec);
    json_decref(pod);
    free(name);
    free(secret);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Attach, list, remove, resume */

/* The running pod of sandbox id and the node's id of its sandbox (caller frees both). */
static int find_pod(struct nclient *c, const char *id, char **pod, char **node_id, json_t **options,
                    struct sbx_error *err)
{
    struct kclient *kc = (struct kclient *)c->kc;
    if (!sbx__kc_valid_id(id, 0))
        return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a sandbox id (16 hex digits)", id);
    char *name = sbx_xasprintf("sbx-%s", id);
    json_t *obj = NULL;
    int rc = sbx__kube_get(kc->api, SBX__KUBE_POD, name, &obj, err);
    const char *nid = rc == 0 ? sbx__kube_annotation_of(obj, ANN_NODE_ID) : NULL;
    const char *wl = rc == 0 ? sbx__kube_label_of(obj, SBX__KUBE_LABEL_BARE) : NULL;
    int deleting =
            rc == 0 && json_object_get(json_object_get(obj, "metadata"), "deletionTimestamp");
    /* A pod being deleted is a removed sandbox already. */
    if (rc == -SBX_E_NOTFOUND || deleting || (rc == 0 && (!wl || strcmp(wl, WORKLOAD) != 0)))
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0,
                           "no sandbox '%s' of the sbx-node mode in namespace '%s'", id,
                           kc->api->namespace_name);
    else if (rc == 0 && !nid)
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0,
                           "pod '%s' has no sandbox of its daemon yet (annotation '%s')", name,
                           ANN_NODE_ID);
    else if (rc == 0 && !sbx__kube_pod_ready(obj))
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "pod '%s' of sandbox '%s' is not running", name,
                           id);
    if (rc == 0) {
        const char *o = sbx__kube_annotation_of(obj, ANN_OPTIONS);
        *options = o ? json_loads(o, 0, NULL) : NULL;
        if (*options && !json_is_object(*options)) {
            json_decref(*options);
            *options = NULL;
        }
        *pod = name;
        *node_id = sbx_xstrdup(nid);
        name = NULL;
    }
    free(name);
    json_decref(obj);
    return rc;
}

static int nc_attach(struct sbx_client *bc, const char *id, struct sbx_session **out,
                     struct sbx_error *err)
{
    struct nclient *c = (struct nclient *)bc;
    char *pod = NULL, *nid = NULL;
    struct sbx_client *rcl = NULL;
    struct sbx_session *in = NULL;
    json_t *opts = NULL;
    int rc = find_pod(c, id, &pod, &nid, &opts, err);
    if (rc == 0)
        rc = reach(c, id, pod, sbx_deadline_after_ms(SBX__KUBE_REQUEST_MS), &rcl, err);
    if (rc == 0)
        rc = rcl->ops->attach(rcl, nid, &in, err);
    if (rc == 0)
        *out = &session_wrap(c, id, pod, opts, rcl, in)->base;
    else if (rcl)
        rcl->ops->free(rcl);
    json_decref(opts);
    free(pod);
    free(nid);
    return rc;
}

static int nc_resume(struct sbx_client *bc, const json_t *state, const struct sbx_resume_opts *o,
                     struct sbx_session **out, struct sbx_error *err)
{
    (void)o;
    const char *id = json_string_value(json_object_get(state, "id"));
    return nc_attach(bc, id ? id : "", out, err);
}

static int nc_remove(struct sbx_client *bc, const char *id, int keep_workspace,
                     struct sbx_error *err)
{
    struct nclient *c = (struct nclient *)bc;
    struct kclient *kc = (struct kclient *)c->kc;
    if (keep_workspace)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "the workspace of a sandbox of the sbx-node mode is in its pod: it "
                             "cannot be kept after the sandbox");
    char *pod = NULL, *nid = NULL;
    json_t *opts = NULL;
    int rc = find_pod(c, id, &pod, &nid, &opts, err);
    json_decref(opts);
    if (rc == -SBX_E_NOTFOUND || rc == -SBX_E_INVAL)
        return rc;
    if (rc == 0) {
        /* The daemon removes its sandbox first (its supervisor and workspace); the pod's
         * deletion ends whatever is left either way, so a daemon that does not answer does not
         * keep the sandbox. */
        struct sbx_session *s = NULL;
        struct sbx_error ignored = SBX_ERROR_INIT;
        if (nc_attach(bc, id, &s, &ignored) == 0) {
            (void)s->ops->close(s, 1, &ignored);
            s->ops->free(s);
        }
    }
    sbx_error_clear(err);
    char *name = sbx_xasprintf("sbx-%s", id);
    delete_objects(kc->api, id, name);
    free(name);
    free(pod);
    free(nid);
    return 0;
}

static int list_item(json_t *item, void *ud, struct sbx_error *err)
{
    (void)err;
    const char *id = sbx__kube_label_of(item, SBX__KUBE_LABEL_ID);
    if (id)
        json_array_append_new(ud, json_pack("{s:s, s:s, s:s}", "provider", "kubernetes", "id", id,
                                            "name", sbx__kube_name_of(item)));
    return 0;
}

static int nc_list(struct sbx_client *bc, json_t **out, struct sbx_error *err)
{
    struct nclient *c = (struct nclient *)bc;
    struct kclient *kc = (struct kclient *)c->kc;
    json_t *list = json_array();
    int rc = sbx__kube_list_each(kc->api, SBX__KUBE_POD, SBX__KUBE_LABEL_BARE "=" WORKLOAD, NULL,
                                 list_item, list, NULL, err);
    if (rc < 0) {
        json_decref(list);
        return rc;
    }
    *out = list;
    return 0;
}

static void nc_free(struct sbx_client *bc)
{
    struct nclient *c = (struct nclient *)bc;
    c->kc->ops->free(c->kc);
    json_decref(c->options);
    free(c->o.program);
    free(c->o.ca);
    free(c->o.cert);
    free(c->o.key);
    free(c->o.node_cert);
    free(c->o.node_key);
    free(c);
}

static const struct sbx_client_ops node_client_ops = {
        .create = nc_create,
        .attach = nc_attach,
        .list = nc_list,
        .remove = nc_remove,
        .resume = nc_resume,
        .free = nc_free,
};

/* ---------------------------------------------------------------------------------------------
 * The client */

int sbx__kube_node_opts_check(const struct sbx__kube_node_opts *o, struct sbx_error *err)
{
    if (!o->mode || strcmp(o->mode, "sbx-node") != 0)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "--node '%.64s': the kubernetes provider's only node mode is "
                             "sbx-node (the pod runs the sbx-node daemon)",
                             o->mode ? o->mode : "");
    if (!o->ca || !o->cert || !o->key)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "node=sbx-node needs --node-ca, --node-cert and --node-key (the "
                             "deployment's ca and this harness's certificate and key)");
    if (!o->program || o->program[0] != '/')
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "--node-program must be an absolute path in the image, not '%s'",
                             o->program ? o->program : "");
    return 0;
}

int sbx__kube_node_client_new(struct sbx_client *kc, const struct sbx__kube_node_opts *o,
                              struct sbx_client **out, struct sbx_error *err)
{
    struct kclient *k = (struct kclient *)kc;
    int rc = sbx__kube_node_opts_check(o, err);
    if (rc < 0) {
        kc->ops->free(kc);
        return rc;
    }
    struct nclient *c = sbx_xcalloc(1, sizeof(*c));
    c->base.ops = &node_client_ops;
    c->base.provider = "kubernetes";
    c->kc = kc;
    c->o.port = o->port;
    c->o.program = sbx_xstrdup(o->program);
    c->o.ca = sbx_xstrdup(o->ca);
    c->o.cert = sbx_xstrdup(o->cert);
    c->o.key = sbx_xstrdup(o->key);
    c->o.node_cert = o->node_cert ? sbx_xstrdup(o->node_cert) : NULL;
    c->o.node_key = o->node_key ? sbx_xstrdup(o->node_key) : NULL;
    c->options = json_deep_copy(k->options);
    sbx_json_set(c->options, "node", sbx_json_str("sbx-node"));
    sbx_json_set(c->options, "node_port", json_integer(o->port));
    sbx_json_set(c->options, "node_program", sbx_json_str(o->program));
    *out = &c->base;
    return 0;
}
