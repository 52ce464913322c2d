/* The remote provider: sandboxes of an sbx-node daemon (src/providers/remote/remote.h,
 * docs/internals/node.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "providers/remote/remote.h"
#include "sandbox/session/internal.h"
#include "sandbox/wire/http.h"
#include "sbx/common.h"
#include "sbx/json.h"
#include "sbx/manifest.h"
#include "sbx/provider.h"
#include "sbx/session.h"
#include "sbx/snapshot.h"
#include "sbx/time.h"

#define BODY_MAX ((size_t)1 << 20)

struct remote_client {
    struct sbx_client base;
    struct sbx__endpoint *ep;
};

/* ---------------------------------------------------------------------------------------------
 * Requests */

int sbx__remote_error(struct sbx__endpoint *ep, const struct sbx__http_resp *resp, const char *what,
                      struct sbx_error *err)
{
    static const struct {
        const char *name;
        int code;
    } codes[] = {{"not_found", SBX_E_NOTFOUND},
                 {"exists", SBX_E_EXISTS},
                 {"perm", SBX_E_PERM},
                 {"inval", SBX_E_INVAL},
                 {"toobig", SBX_E_TOOBIG},
                 {"sandbox", SBX_E_SANDBOX},
                 {"unsupported", SBX_E_UNSUPPORTED},
                 {"timeout", SBX_E_TIMEOUT},
                 {"exec", SBX_E_EXEC}};
    json_t *j = NULL;
    struct sbx_error perr = SBX_ERROR_INIT;
    if (resp->body.len)
        sbx_json_parse(resp->body.data, resp->body.len, NULL, &j, &perr);
    const char *code = json_string_value(json_object_get(j, "code"));
    const char *msg = json_string_value(json_object_get(j, "message"));
    int c = SBX_E_API, rc;
    for (size_t i = 0; code && i < sizeof(codes) / sizeof(codes[0]); i++)
        if (strcmp(code, codes[i].name) == 0)
            c = codes[i].code;
    rc = msg ? sbx_error_set(err, c, 0, "node '%s': %.400s", sbx__endpoint_url(ep), msg)
             : sbx__http_status_error(ep, resp->status, resp->body.data, resp->body.len, what, err);
    json_decref(j);
    return rc;
}

/* One JSON request; token (may be NULL) in the Sbx-Token header line; a status >= 400 is the
 * node's error ({"code", "message"}) with the code it names. *out: the parsed body, caller owns. */
static int call_body(struct sbx__endpoint *ep, const char *method, const char *path,
                     const char *token, const json_t *body, json_t **out, struct sbx_error *err)
{
    char line[SBX__REMOTE_TOKEN_MAX + 16];
    snprintf(line, sizeof(line), "Sbx-Token: %s", token ? token : "");
    const char *headers[] = {line, NULL};
    struct sbx__http_req req = {.method = method,
                                .path = path,
                                .headers = token ? headers : NULL,
                                .max_body = BODY_MAX,
                                .no_retry = 1,
                                .http_1_1 = 1,
                                .json = body};
    struct sbx__http_resp resp;
    sbx__http_resp_init(&resp);
    int rc = sbx__http_call(ep, &req, &resp, err);
    explicit_bzero(line, sizeof(line));
    json_t *j = NULL;
    if (rc == 0 && resp.status >= 400)
        rc = sbx__remote_error(ep, &resp, path, err);
    else if (rc == 0 && resp.body.len)
        rc = sbx_json_parse(resp.body.data, resp.body.len, NULL, &j, err);
    if (rc == 0 && out)
        *out = j;
    else
        json_decref(j);
    sbx__http_resp_release(&resp);
    return rc;
}

static int call(struct sbx__endpoint *ep, const char *method, const char *path, const char *token,
                json_t **out, struct sbx_error *err)
{
    return call_body(ep, method, path, token, NULL, out, err);
}

/* ---------------------------------------------------------------------------------------------
 * Sessions */

static int sess_resolve_port(struct sbx_session *bs, int port, char **out, struct sbx_error *err)
{
    (void)bs;
    (void)out;
    return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                         "port %d: an sbx-node daemon does not forward ports yet", port);
}

static int sess_state(struct sbx_session *bs, json_t **out, struct sbx_error *err)
{
    struct sbx__remote_session *s = (struct sbx__remote_session *)bs;
    (void)err;
    *out = json_deep_copy(s->state);
    return 0;
}

static int remove_on(struct sbx__endpoint *ep, const char *id, const char *token,
                     struct sbx_error *err)
{
    char *path = sbx_xasprintf("/v1/sandboxes/%s", id);
    int rc = call(ep, "DELETE", path, token, NULL, err);
    free(path);
    return rc;
}

static int sess_close(struct sbx_session *bs, int delete_workspace, struct sbx_error *err)
{
    struct sbx__remote_session *s = (struct sbx__remote_session *)bs;
    if (!delete_workspace)
        return 0; /* the sandbox stays on the node, as a local one's workspace stays */
    return remove_on(s->ep, s->base.id, s->token, err);
}

static int sess_record_snapshot(struct sbx_session *bs, const char *ref, struct sbx_error *err)
{
    struct sbx__remote_session *s = (struct sbx__remote_session *)bs;
    (void)err;
    sbx_json_set(s->state, "snapshot", sbx_json_str(ref));
    return 0;
}

static void sess_free(struct sbx_session *bs)
{
    struct sbx__remote_session *s = (struct sbx__remote_session *)bs;
    if (!s)
        return;
    sbx_session_release_base(&s->base);
    sbx__endpoint_free(s->ep);
    explicit_bzero(s->token, sizeof(s->token));
    json_decref(s->state);
    free(s);
}

static const struct sbx_session_ops session_ops = {
        .exec_start = sbx__remote_exec_start,
        .read_open = sbx__remote_read_open,
        .write = sbx__remote_write,
        .ls = sbx__remote_ls,
        .stat = sbx__remote_stat,
        .mkdir = sbx__remote_mkdir,
        .rm = sbx__remote_rm,
        .chmod = sbx__remote_chmod,
        .resolve_port = sess_resolve_port,
        .state = sess_state,
        .close = sess_close,
        .record_snapshot = sess_record_snapshot,
        .workspace_export = sbx__remote_workspace_export,
        .workspace_import = sbx__remote_workspace_import,
        .free = sess_free,
};

static struct sbx__remote_session *session_new(struct remote_client *c, const char *id,
                                               const char *root, const char *token,
                                               const char *created)
{
    struct sbx__remote_session *s = sbx_xcalloc(1, sizeof(*s));
    sbx_session_init_base(&s->base, &session_ops, "remote", id, root);
    s->ep = sbx__endpoint_ref(c->ep);
    snprintf(s->token, sizeof(s->token), "%s", token);
    s->state =
            json_pack("{s:i, s:s, s:s, s:s, s:s}", "version", SBX_SESSION_STATE_VERSION, "provider",
                      "remote", "id", id, "root", root, "node", sbx__endpoint_url(c->ep));
    char now[SBX_TIME_RFC3339_LEN];
    if (!created) {
        sbx_time_rfc3339(sbx_time_real_ns(), now);
        created = now;
    }
    sbx_json_set(s->state, "created", sbx_json_str(created));
    sbx_json_set(s->state, "workspace_owned", json_true());
    sbx_json_set(s->state, "options", json_pack("{s:s}", "node", sbx__endpoint_url(c->ep)));
    sbx_json_set(s->state, "snapshot", json_null());
    sbx_json_set(s->state, "exposed_ports", json_array());
    sbx_json_set(s->state, "manifest", json_null());
    return s;
}

/* A node's sandbox ids are the local provider's: lowercase hex. */
static int id_valid(const char *id)
{
    size_t n = strlen(id);
    return n > 0 && n <= 64 && strspn(id, "0123456789abcdef") == n;
}

/* A session on a sandbox the node holds: a fresh token minted with this harness's certificate
 * (the node's owner check), then its root. */
static int open_existing(struct remote_client *c, const char *id, struct sbx__remote_session **out,
                         struct sbx_error *err)
{
    json_t *t = NULL, *d = NULL;
    if (!id_valid(id))
        return sbx_error_set(err, SBX_E_INVAL, 0, "'%.64s' is not a node's sandbox id", id);
    char *path = sbx_xasprintf("/v1/sandboxes/%s/token", id);
    int rc = call(c->ep, "POST", path, NULL, &t, err);
    free(path);
    const char *token = json_string_value(json_object_get(t, "token"));
    if (rc == 0 && (!token || strlen(token) > SBX__REMOTE_TOKEN_MAX))
        rc = sbx_error_set(err, SBX_E_API, 0, "node '%s' sent no token for sandbox '%s'",
                           sbx__endpoint_url(c->ep), id);
    if (rc == 0) {
        path = sbx_xasprintf("/v1/sandboxes/%s", id);
        rc = call(c->ep, "GET", path, token, &d, err);
        free(path);
    }
    const char *root = json_string_value(json_object_get(d, "root"));
    if (rc == 0 && (!root || root[0] != '/'))
        rc = sbx_error_set(err, SBX_E_API, 0, "node '%s' sent no root for sandbox '%s'",
                           sbx__endpoint_url(c->ep), id);
    if (rc == 0)
        *out = session_new(c, id, root, token, json_string_value(json_object_get(d, "created")));
    if (rc == -SBX_E_PERM)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "no sandbox '%s' of this harness on node '%s'",
                           id, sbx__endpoint_url(c->ep));
    json_decref(t);
    json_decref(d);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * The client */

static int rc_create(struct sbx_client *bc, const struct sbx_create_spec *spec,
                     struct sbx_session **out, struct sbx_error *err)
{
    struct remote_client *c = (struct remote_client *)bc;
    if (spec->workspace)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "a remote sandbox's workspace is on its node: a host workspace "
                             "directory ('%s') cannot be used",
                             spec->workspace);
    if (spec->id && spec->id[0])
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "the node names its sandboxes: '%s' cannot be chosen", spec->id);
    const struct sbx_manifest *m = spec->manifest;
    struct sbx_snapshot_store *store = NULL;
    char *snap_ref = NULL;
    int rc = m ? sbx__shellfs_check_accounts(m, "a remote sandbox", NULL, err) : 0;
    /* A snapshot is found and checked before anything exists: a bad one creates nothing. */
    if (rc == 0 && spec->snapshot && ((rc = sbx_snapshot_store_open(NULL, &store, err)) == 0))
        rc = sbx_snapshot_resolve(store, spec->snapshot, NULL, &snap_ref, err);
    json_t *ans = NULL, *body = NULL;
    struct sbx_strv env;
    sbx_strv_init(&env);
    /* The manifest's environment, resolved here, lives with the sandbox on its node. */
    if (rc == 0 && m && (rc = sbx_manifest_env_resolve(m, spec->pass_secrets, &env, err)) == 0) {
        json_t *a = json_array();
        for (size_t i = 0; i < env.n; i++)
            json_array_append_new(a, json_string(env.v[i]));
        body = json_pack("{s:o}", "env", a);
    }
    if (rc == 0)
        rc = call_body(c->ep, "POST", "/v1/sandboxes", NULL, body, &ans, err);
    json_decref(body);
    sbx_strv_release(&env);
    const char *id = json_string_value(json_object_get(ans, "id"));
    const char *token = json_string_value(json_object_get(ans, "token"));
    const char *root = json_string_value(json_object_get(ans, "root"));
    if (rc == 0 &&
        (!id || !token || !root || root[0] != '/' || strlen(token) > SBX__REMOTE_TOKEN_MAX))
        rc = sbx_error_set(err, SBX_E_API, 0, "node '%s' answered a create without its fields",
                           sbx__endpoint_url(c->ep));
    struct sbx__remote_session *s =
            rc == 0 ? session_new(c, id, root, token,
                                  json_string_value(json_object_get(ans, "created")))
                    : NULL;
    if (s && rc == 0)
        rc = sbx__shellfs_fill(NULL, &s->base, s->state, spec, store, snap_ref, err);
    if (rc < 0 && s) {
        struct sbx_error ignored = SBX_ERROR_INIT;
        (void)remove_on(c->ep, s->base.id, s->token, &ignored);
        sess_free(&s->base);
        s = NULL;
    }
    json_decref(ans);
    free(snap_ref);
    sbx_snapshot_store_free(store);
    if (rc < 0) {
        sbx_error_prefix(err, "cannot create sandbox");
        return rc;
    }
    *out = &s->base;
    return 0;
}

static int rc_attach(struct sbx_client *bc, const char *id, struct sbx_session **out,
                     struct sbx_error *err)
{
    struct sbx__remote_session *s = NULL;
    int rc = open_existing((struct remote_client *)bc, id, &s, err);
    if (rc == 0)
        *out = &s->base;
    return rc;
}

static int rc_list(struct sbx_client *bc, json_t **out, struct sbx_error *err)
{
    struct remote_client *c = (struct remote_client *)bc;
    json_t *ans = NULL;
    int rc = call(c->ep, "GET", "/v1/sandboxes", NULL, &ans, err);
    if (rc < 0)
        return rc;
    json_t *list = json_array(), *v;
    size_t i;
    json_array_foreach(json_object_get(ans, "sandboxes"), i, v)
    {
        const char *id = json_string_value(json_object_get(v, "id"));
        if (id)
            json_array_append_new(list, json_pack("{s:s, s:s, s:s}", "provider", "remote", "id", id,
                                                  "node", sbx__endpoint_url(c->ep)));
    }
    json_decref(ans);
    *out = list;
    return 0;
}

static int rc_remove(struct sbx_client *bc, const char *id, int keep_workspace,
                     struct sbx_error *err)
{
    struct sbx__remote_session *s = NULL;
    if (keep_workspace)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "a remote sandbox's workspace is on its node: it cannot be kept "
                             "after the sandbox");
    int rc = open_existing((struct remote_client *)bc, id, &s, err);
    if (rc == 0)
        rc = remove_on(s->ep, id, s->token, err);
    sess_free(s ? &s->base : NULL);
    return rc;
}

static int rc_resume(struct sbx_client *bc, const json_t *state, const struct sbx_resume_opts *o,
                     struct sbx_session **out, struct sbx_error *err)
{
    struct remote_client *c = (struct remote_client *)bc;
    const char *id = json_string_value(json_object_get(state, "id"));
    const char *node = json_string_value(json_object_get(state, "node"));
    (void)o;
    if (node && strcmp(node, sbx__endpoint_url(c->ep)) != 0)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "sandbox '%s' is on node '%s', this client reaches '%s'", id, node,
                             sbx__endpoint_url(c->ep));
    return rc_attach(bc, id, out, err);
}

static void rc_free(struct sbx_client *bc)
{
    struct remote_client *c = (struct remote_client *)bc;
    sbx__endpoint_free(c->ep);
    free(c);
}

static const struct sbx_client_ops client_ops = {
        .create = rc_create,
        .attach = rc_attach,
        .list = rc_list,
        .remove = rc_remove,
        .resume = rc_resume,
        .free = rc_free,
};

/* ---------------------------------------------------------------------------------------------
 * The provider */

static const struct sbx_provider_option options[] = {
        {.key = "node",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_STATE | SBX_OPTION_LOCATOR | SBX_OPTION_REQUIRED,
         .arg = "URL",
         .help = "the sbx-node daemon (https://HOST:PORT)",
         .flag = "node"},
        {.key = "node_ca",
         .type = SBX_OPTION_PATH,
         .flags = SBX_OPTION_TRUSTED | SBX_OPTION_LOCATOR,
         .arg = "FILE",
         .help = "the deployment's CA certificate (sbx node ca init)",
         .flag = "node-ca"},
        {.key = "node_cert",
         .type = SBX_OPTION_PATH,
         .flags = SBX_OPTION_TRUSTED | SBX_OPTION_LOCATOR,
         .arg = "FILE",
         .help = "this harness's certificate (sbx node cert issue NAME --harness)",
         .flag = "node-cert"},
        {.key = "node_key",
         .type = SBX_OPTION_PATH,
         .flags = SBX_OPTION_TRUSTED | SBX_OPTION_LOCATOR,
         .arg = "FILE",
         .help = "this harness's private key",
         .flag = "node-key"},
        {.key = NULL},
};

static int client_new_json(const json_t *o, struct sbx_client **out, struct sbx_error *err)
{
    const char *url = json_string_value(json_object_get(o, "node"));
    const char *ca = json_string_value(json_object_get(o, "node_ca"));
    const char *cert = json_string_value(json_object_get(o, "node_cert"));
    const char *key = json_string_value(json_object_get(o, "node_key"));
    if (!url || strncmp(url, "https://", 8) != 0)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "the remote provider needs --node https://HOST:PORT (an sbx-node "
                             "daemon)");
    if (!ca || !cert || !key)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "the remote provider needs --node-ca, --node-cert and --node-key "
                             "(mutual tls with the deployment's certificates)");
    struct sbx__endpoint_opts eo = {.url = url,
                                    .name = "the sbx-node daemon",
                                    .ca_file = ca,
                                    .cert_file = cert,
                                    .key_file = key,
                                    .http = SBX__HTTP_1_1,
                                    .keep_alive = 1};
    struct sbx__endpoint *ep = NULL;
    int rc = sbx__endpoint_new(&eo, &ep, err);
    if (rc < 0)
        return rc;
    struct remote_client *c = sbx_xcalloc(1, sizeof(*c));
    c->base.ops = &client_ops;
    c->base.provider = "remote";
    c->ep = ep;
    *out = &c->base;
    return 0;
}

static int client_new(const void *opts, struct sbx_client **out, struct sbx_error *err)
{
    (void)opts;
    (void)out;
    return sbx_error_set(err, SBX_E_INVAL, 0,
                         "the remote provider takes its options as JSON (sbx_client_new_json)");
}

static int check_state(const json_t *st, struct sbx_error *err)
{
    const char *id = NULL, *root = NULL, *node = NULL;
    int rc;
    if ((rc = sbx_json_get_string(st, "id", 1, &id, err)) < 0 ||
        (rc = sbx_json_get_string(st, "root", 1, &root, err)) < 0 ||
        (rc = sbx_json_get_string(st, "node", 1, &node, err)) < 0)
        return rc;
    if (!id_valid(id))
        return sbx_error_set(err, SBX_E_INVAL, 0, "field 'id': '%.64s' is not a node's sandbox id",
                             id);
    if (root[0] != '/')
        return sbx_error_set(err, SBX_E_INVAL, 0, "field 'root' must be an absolute path");
    if (strncmp(node, "https://", 8) != 0)
        return sbx_error_set(err, SBX_E_INVAL, 0, "field 'node' must be an https url");
    return 0;
}

const struct sbx__provider_def sbx__provider_remote = {
        .name = "remote",
        .summary = "a sandbox of the local provider on another host, through its sbx-node "
                   "daemon (mutual tls with the deployment's certificates)",
        .traits = SBX_PROVIDER_SNAPSHOTS | SBX_PROVIDER_PTY | SBX_PROVIDER_RESUME,
        .options = options,
        .client_new = client_new,
        .client_new_json = client_new_json,
        .check_state = check_state,
};
