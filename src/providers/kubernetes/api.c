/* The Kubernetes API server as the provider reaches it: an endpoint of the remote layer made
 * from a kubeconfig context (or a service account), the namespace, the paths of the kinds sbx
 * uses, requests whose errors say what a user must do (a 403 names the RBAC verb and resource
 * sbx needs), and discovery of agent-sandbox. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "providers/kubernetes/api.h"
#include "providers/kubernetes/kubeconfig.h"
#include "sandbox/wire/wire.h"
#include "sbx/json.h"

struct kind_info {
    const char *base;   /* the group version's path */
    const char *plural; /* the resource */
    const char *rbac;   /* the resource as RBAC names it */
};

static const struct kind_info kinds[] = {
        [SBX__KUBE_POD] = {"/api/v1", "pods", "pods"},
        [SBX__KUBE_PVC] = {"/api/v1", "persistentvolumeclaims", "persistentvolumeclaims"},
        [SBX__KUBE_EVENT] = {"/api/v1", "events", "events"},
        [SBX__KUBE_SANDBOX] = {"/apis/" SBX__KUBE_SANDBOX_GV, "sandboxes",
                               "sandboxes.agents.x-k8s.io"},
        [SBX__KUBE_CLAIM] = {"/apis/" SBX__KUBE_EXT_GV, "sandboxclaims",
                             "sandboxclaims.extensions.agents.x-k8s.io"},
        [SBX__KUBE_TEMPLATE] = {"/apis/" SBX__KUBE_EXT_GV, "sandboxtemplates",
                                "sandboxtemplates.extensions.agents.x-k8s.io"},
        [SBX__KUBE_SECRET] = {"/api/v1", "secrets", "secrets"},
};

const char *sbx__kube_kind_resource(enum sbx__kube_kind k)
{
    return kinds[k].rbac;
}

static int valid_dns_label(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 63)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || (c == '-' && i && i + 1 < n);
        if (!ok)
            return 0;
    }
    return 1;
}

int sbx__kube_api_new(const struct sbx_kube_options *o, struct sbx__kube_api **out,
                      struct sbx_error *err)
{
    struct sbx__kube_config cfg;
    struct sbx__kube_config_opts co = {
            .kubeconfig = o->kubeconfig, .context = o->context, .in_cluster = o->in_cluster};
    sbx__kube_config_init(&cfg);
    int rc = sbx__kube_config_load(&co, &cfg, err);
    if (rc < 0)
        return rc;
    const char *ns = o->namespace_name && o->namespace_name[0] ? o->namespace_name
                     : cfg.namespace                           ? cfg.namespace
                                                               : "default";
    if (!valid_dns_label(ns)) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a namespace name", ns);
        sbx__kube_config_release(&cfg);
        return rc;
    }
    json_t *tokref = cfg.token_file ? json_pack("{s:s}", "file", cfg.token_file) : NULL;
    struct sbx__endpoint_opts eo = {
            .url = cfg.server,
            .name = "the Kubernetes API server",
            .ca_pem = cfg.ca.len ? cfg.ca.data : NULL,
            .insecure = cfg.insecure,
            .cert_pem = cfg.cert.len ? cfg.cert.data : NULL,
            .key_pem = {.value = cfg.key},
            .auth = cfg.token ? SBX__AUTH_BEARER : SBX__AUTH_NONE,
            .token = {.ref = tokref, .value = tokref ? NULL : cfg.token},
            .timeout_ms = o->request_timeout_ms ? o->request_timeout_ms : SBX__KUBE_REQUEST_MS,
    };
    struct sbx__endpoint *ep = NULL;
    rc = sbx__endpoint_new(&eo, &ep, err);
    json_decref(tokref);
    if (rc == 0) {
        struct sbx__kube_api *a = sbx_xcalloc(1, sizeof(*a));
        atomic_init(&a->refs, 1);
        a->ep = ep;
        a->namespace_name = sbx_xstrdup(ns);
        a->context = sbx_xstrdup(cfg.context);
        a->user = sbx_xstrdup(cfg.user);
        a->server = sbx_xstrdup(cfg.server);
        a->kubeconfig = o->kubeconfig ? sbx_xstrdup(o->kubeconfig) : NULL;
        a->in_cluster = !!o->in_cluster || strcmp(cfg.context, SBX__KUBE_IN_CLUSTER) == 0;
        a->has_sandbox = a->has_claims = -1;
        *out = a;
    } else {
        sbx_error_prefix(err, "context '%s'", cfg.context);
    }
    sbx__kube_config_release(&cfg);
    return rc;
}

struct sbx__kube_api *sbx__kube_api_ref(struct sbx__kube_api *a)
{
    atomic_fetch_add(&a->refs, 1);
    return a;
}

void sbx__kube_api_free(struct sbx__kube_api *a)
{
    if (!a || atomic_fetch_sub(&a->refs, 1) != 1)
        return;
    sbx__endpoint_free(a->ep);
    free(a->namespace_name);
    free(a->context);
    free(a->user);
    free(a->server);
    free(a->kubeconfig);
    free(a);
}

char *sbx__kube_path(const struct sbx__kube_api *a, enum sbx__kube_kind k, const char *name,
                     const char *sub, const char *query)
{
    struct sbx_buf b;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    (void)sbx_buf_addf(&b, NULL, "%s/namespaces/%s/%s", kinds[k].base, a->namespace_name,
                       kinds[k].plural);
    if (name) {
        char *q = sbx__http_escape(name, 0);
        (void)sbx_buf_addf(&b, NULL, "/%s", q);
        free(q);
    }
    if (sub)
        (void)sbx_buf_addf(&b, NULL, "/%s", sub);
    if (query && query[0])
        (void)sbx_buf_addf(&b, NULL, "?%s", query);
    return sbx_buf_detach(&b, NULL);
}

int sbx__kube_forbidden(const struct sbx__kube_api *a, const char *verb, const char *resource,
                        struct sbx_error *err)
{
    char said[SBX_ERROR_MSG_MAX];
    snprintf(said, sizeof(said), "%s", err ? err->msg : "");
    return sbx_error_set(err, SBX_E_PERM, 0,
                         "%s (RBAC: the user '%s' of context '%s' needs '%s' on '%s' in namespace "
                         "'%s'; docs/internals/kubernetes-provider.md has a Role with what sbx "
                         "needs)",
                         said, a->user, a->context, verb, resource, a->namespace_name);
}

int sbx__kube_call(struct sbx__kube_api *a, const struct sbx__kube_req *r, json_t **out,
                   struct sbx_error *err)
{
    char *path = sbx__kube_path(a, r->kind, r->name, r->sub, r->query);
    char *text = r->body ? sbx_json_dumps(r->body, SBX_JSON_COMPACT) : NULL;
    struct sbx__http_req req = {.method = r->method,
                                .path = path,
                                .body = text,
                                .body_len = text ? strlen(text) : 0,
                                .content_type =
                                        r->content_type ? r->content_type : "application/json",
                                .no_retry = r->method && strcmp(r->method, "POST") == 0,
                                .max_body = r->max_body};
    const char *accept[] = {"Accept: application/json", NULL};
    req.headers = accept;
    struct sbx__http_resp resp;
    sbx__http_resp_init(&resp);
    char what[256];
    snprintf(what, sizeof(what), "%s %s", r->method ? r->method : "GET", kinds[r->kind].plural);
    int rc = sbx__http_call(a->ep, &req, &resp, err);
    if (rc == 0 && resp.status >= 400) {
        rc = sbx__http_status_error(a->ep, resp.status, resp.body.data, resp.body.len, what, err);
        if (resp.status == 403 && r->verb) {
            char res[160];
            snprintf(res, sizeof(res), "%s%s%s", kinds[r->kind].rbac, r->sub ? "/" : "",
                     r->sub ? r->sub : "");
            rc = sbx__kube_forbidden(a, r->verb, res, err);
        }
    }
    if (rc == 0 && out) {
        *out = NULL;
        if (resp.body.len) {
            rc = sbx_json_parse(resp.body.data, resp.body.len, NULL, out, err);
            if (rc < 0)
                sbx_error_prefix(err, "the Kubernetes API server's answer to %s", what);
        }
    }
    sbx__http_resp_release(&resp);
    free(text);
    free(path);
    return rc;
}

int sbx__kube_get(struct sbx__kube_api *a, enum sbx__kube_kind k, const char *name, json_t **out,
                  struct sbx_error *err)
{
    struct sbx__kube_req r = {.method = "GET", .verb = "get", .kind = k, .name = name};
    return sbx__kube_call(a, &r, out, err);
}

int sbx__kube_create(struct sbx__kube_api *a, enum sbx__kube_kind k, const json_t *obj,
                     json_t **out, struct sbx_error *err)
{
    /* Strict: a field the server does not know is an error, never silently dropped. */
    struct sbx__kube_req r = {.method = "POST",
                              .verb = "create",
                              .kind = k,
                              .query = "fieldValidation=Strict",
                              .body = obj};
    return sbx__kube_call(a, &r, out, err);
}

int sbx__kube_patch(struct sbx__kube_api *a, enum sbx__kube_kind k, const char *name,
                    const json_t *patch, json_t **out, struct sbx_error *err)
{
    struct sbx__kube_req r = {.method = "PATCH",
                              .verb = "patch",
                              .kind = k,
                              .name = name,
                              .query = "fieldValidation=Strict",
                              .body = patch,
                              .content_type = "application/merge-patch+json"};
    return sbx__kube_call(a, &r, out, err);
}

int sbx__kube_delete(struct sbx__kube_api *a, enum sbx__kube_kind k, const char *name,
                     struct sbx_error *err)
{
    json_t *opts = json_pack("{s:s,s:s,s:s}", "kind", "DeleteOptions", "apiVersion", "v1",
                             "propagationPolicy", "Background");
    struct sbx__kube_req r = {
            .method = "DELETE", .verb = "delete", .kind = k, .name = name, .body = opts};
    int rc = sbx__kube_call(a, &r, NULL, err);
    json_decref(opts);
    return rc;
}

/* One page after another (500 items each), each item to fn as it comes. */
int sbx__kube_list_each(struct sbx__kube_api *a, enum sbx__kube_kind k, const char *selector,
                        const char *fields, sbx__kube_item_fn *fn, void *ud, char **out_rv,
                        struct sbx_error *err)
{
    char *cont = NULL;
    int rc = 0;
    size_t seen = 0;
    do {
        struct sbx_buf q;
        sbx_buf_init(&q, SBX_BUF_NOLIMIT);
        (void)sbx_buf_addf(&q, NULL, "limit=%d", SBX__KUBE_PAGE);
        const char *keys[] = {"labelSelector", "fieldSelector", "continue"};
        const char *vals[] = {selector, fields, cont};
        for (size_t i = 0; i < 3; i++) {
            if (!vals[i])
                continue;
            char *e = sbx__http_escape(vals[i], 0);
            (void)sbx_buf_addf(&q, NULL, "&%s=%s", keys[i], e);
            free(e);
        }
        json_t *page = NULL, *v;
        size_t i;
        struct sbx__kube_req r = {.method = "GET", .verb = "list", .kind = k, .query = q.data};
        rc = sbx__kube_call(a, &r, &page, err);
        sbx_buf_release(&q);
        free(cont);
        cont = NULL;
        if (rc < 0)
            break;
        const json_t *md = json_object_get(page, "metadata");
        const char *c = json_string_value(json_object_get(md, "continue"));
        if (c && c[0])
            cont = sbx_xstrdup(c);
        else if (out_rv) {
            const char *rv = json_string_value(json_object_get(md, "resourceVersion"));
            *out_rv = rv ? sbx_xstrdup(rv) : NULL;
        }
        json_array_foreach(json_object_get(page, "items"), i, v)
        {
            if (++seen > SBX__KUBE_LIST_MAX) {
                rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "more than %d %s", SBX__KUBE_LIST_MAX,
                                   kinds[k].plural);
                break;
            }
            if ((rc = fn(v, ud, err)) != 0)
                break;
        }
        json_decref(page);
    } while (rc == 0 && cont);
    free(cont);
    return rc;
}

static int gather(json_t *item, void *ud, struct sbx_error *err)
{
    (void)err;
    json_array_append((json_t *)ud, item);
    return 0;
}

int sbx__kube_list(struct sbx__kube_api *a, enum sbx__kube_kind k, const char *selector,
                   const char *fields, json_t **out, char **out_rv, struct sbx_error *err)
{
    json_t *items = json_array();
    int rc = sbx__kube_list_each(a, k, selector, fields, gather, items, out_rv, err);
    if (rc < 0) {
        json_decref(items);
        return rc;
    }
    *out = items;
    return 0;
}

/* A group version the server serves: 1, 0 (404), or an error. */
static int served(struct sbx__kube_api *a, const char *path, struct sbx_error *err)
{
    struct sbx__http_req req = {.method = "GET", .path = path};
    struct sbx__http_resp resp;
    sbx__http_resp_init(&resp);
    int rc = sbx__http_call(a->ep, &req, &resp, err);
    if (rc == 0 && resp.status == 404)
        rc = 0;
    else if (rc == 0 && resp.status >= 400)
        rc = sbx__http_status_error(a->ep, resp.status, resp.body.data, resp.body.len,
                                    "GET (discovery)", err);
    else if (rc == 0)
        rc = 1;
    sbx__http_resp_release(&resp);
    return rc;
}

int sbx__kube_discover(struct sbx__kube_api *a, struct sbx_error *err)
{
    if (a->has_sandbox >= 0)
        return 0;
    int s = served(a, "/apis/" SBX__KUBE_SANDBOX_GV, err);
    int c = s < 0 ? s : served(a, "/apis/" SBX__KUBE_EXT_GV, err);
    if (c < 0)
        return c;
    a->has_sandbox = s;
    a->has_claims = c;
    return 0;
}

const char *sbx__kube_label_of(const json_t *obj, const char *key)
{
    return json_string_value(
            json_object_get(json_object_get(json_object_get(obj, "metadata"), "labels"), key));
}

const char *sbx__kube_annotation_of(const json_t *obj, const char *key)
{
    return json_string_value(
            json_object_get(json_object_get(json_object_get(obj, "metadata"), "annotations"), key));
}

const char *sbx__kube_name_of(const json_t *obj)
{
    return json_string_value(json_object_get(json_object_get(obj, "metadata"), "name"));
}
