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
#include "sbx/local.h"
#include "sbx/manifest.h"
#include "sbx/provider.h"
#include "sbx/session.h"
#include "sbx/snapshot.h"
#include "sbx/time.h"

#define BODY_MAX ((size_t)1 << 20)

struct remote_client {
    struct sbx_client base;
    struct sbx__endpoint *ep;
    json_t *conn; /* node, node_ca, node_cert, node_key: what a port relay reaches the node with */
    json_t *create_opts; /* memory, pids, cpus, disk, network given: sent with each create */
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

int sbx__remote_check_version(struct sbx__endpoint *ep, const char *answered, struct sbx_error *err)
{
    if (!answered)
        return 0;
    size_t major = strspn(answered, "0123456789");
    if (major && major == strlen(SBX__REMOTE_VERSION) &&
        strncmp(answered, SBX__REMOTE_VERSION, major) == 0 &&
        (answered[major] == 0 || answered[major] == '.'))
        return 0;
    char shown[40];
    size_t i = 0;
    for (; answered[i] && i + 1 < sizeof(shown); i++)
        shown[i] = answered[i] > 0x20 && answered[i] < 0x7f ? answered[i] : '?';
    shown[i] = 0;
    return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                         "node '%s' speaks sbx-node protocol version %s, this sbx speaks version "
                         "%s: use a harness and a node of the same major version",
                         sbx__endpoint_url(ep), shown[0] ? shown : "(empty)", SBX__REMOTE_VERSION);
}

/* A request; a 2xx body into raw as bytes when raw is given (up to max), else parsed into
 * *out; an error status is the node's error. */
static int request(struct sbx__endpoint *ep, const char *method, const char *path,
                   const char *token, const json_t *body, size_t max, struct sbx_buf *raw,
                   json_t **out, struct sbx_error *err)
{
    char line[SBX__REMOTE_TOKEN_MAX + 16];
    snprintf(line, sizeof(line), "Sbx-Token: %s", token ? token : "");
    const char *headers[] = {SBX__REMOTE_VERSION_HEADER, token ? line : NULL, NULL};
    struct sbx__http_req req = {.method = method,
                                .path = path,
                                .headers = headers,
                                .want_header = "Sbx-Node-Version",
                                .max_body = max,
                                .no_retry = 1,
                                .http_1_1 = 1,
                                .json = body};
    struct sbx__http_resp resp;
    sbx__http_resp_init(&resp);
    int rc = sbx__http_call(ep, &req, &resp, err);
    explicit_bzero(line, sizeof(line));
    json_t *j = NULL;
    if (rc == 0)
        rc = sbx__remote_check_version(ep, resp.header, err);
    if (rc == 0 && resp.status >= 400) {
        rc = sbx__remote_error(ep, &resp, path, err);
    } else if (rc == 0 && raw) {
        rc = resp.body.len ? sbx_buf_add(raw, resp.body.data, resp.body.len, err) : 0;
    } else if (rc == 0 && resp.body.len)
        rc = sbx_json_parse(resp.body.data, resp.body.len, NULL, &j, err);
    if (rc == 0 && out)
        *out = j;
    else
        json_decref(j);
    sbx__http_resp_release(&resp);
    return rc;
}

int sbx__remote_call(struct sbx__endpoint *ep, const char *method, const char *path,
                     const char *token, const json_t *body, json_t **out, struct sbx_error *err)
{
    return request(ep, method, path, token, body, BODY_MAX, NULL, out, err);
}

int sbx__remote_get_bytes(struct sbx__endpoint *ep, const char *path, const char *token, size_t max,
                          struct sbx_buf *out, struct sbx_error *err)
{
    return request(ep, "GET", path, token, NULL, max, out, NULL, err);
}

static int call(struct sbx__endpoint *ep, const char *method, const char *path, const char *token,
                json_t **out, struct sbx_error *err)
{
    return sbx__remote_call(ep, method, path, token, NULL, out, err);
}

/* A fresh token of sandbox id into tok. */
static int mint_on(struct sbx__endpoint *ep, const char *id, char tok[SBX__REMOTE_TOKEN_MAX + 1],
                   struct sbx_error *err)
{
    json_t *t = NULL;
    char *path = sbx_xasprintf("/v1/sandboxes/%s/token", id);
    int rc = call(ep, "POST", path, NULL, &t, err);
    free(path);
    const char *token = json_string_value(json_object_get(t, "token"));
    if (rc == 0 && (!token || strlen(token) > SBX__REMOTE_TOKEN_MAX))
        rc = sbx_error_set(err, SBX_E_API, 0, "node '%s' sent no token for sandbox '%s'",
                           sbx__endpoint_url(ep), id);
    if (rc == 0)
        snprintf(tok, SBX__REMOTE_TOKEN_MAX + 1, "%s", token);
    json_decref(t);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * The session's token */

/* A fresh token into the session, under token_lock: 0, or -code (the old one stays). */
static int token_mint(struct sbx__remote_session *s, struct sbx_error *err)
{
    char tok[SBX__REMOTE_TOKEN_MAX + 1];
    int rc = mint_on(s->ep, s->base.id, tok, err);
    if (rc == 0)
        snprintf(s->token, sizeof(s->token), "%s", tok);
    explicit_bzero(tok, sizeof(tok));
    return rc;
}

#define TOKEN_LINE (SBX__REMOTE_TOKEN_MAX + 16)

/* The session's "Sbx-Token: ..." header line, as it is now, into line. */
static void token_line(struct sbx__remote_session *s, char line[TOKEN_LINE])
{
    pthread_mutex_lock(&s->token_lock);
    snprintf(line, TOKEN_LINE, "Sbx-Token: %s", s->token);
    pthread_mutex_unlock(&s->token_lock);
}

/* After a request with the token line `used` failed with err: 1 when that was the node refusing
 * the token and the session now holds a fresh one (minted here, or by another thread meanwhile):
 * try once more. 0: the error stands. */
static int token_renew(struct sbx__remote_session *s, const char *used, const struct sbx_error *err)
{
    if (!err || err->code != SBX_E_PERM || !strstr(err->msg, "token does not open sandbox"))
        return 0;
    struct sbx_error e = SBX_ERROR_INIT;
    char line[TOKEN_LINE];
    int renewed = 0;
    pthread_mutex_lock(&s->token_lock);
    snprintf(line, sizeof(line), "Sbx-Token: %s", s->token);
    if (strcmp(line, used) != 0)
        renewed = 1; /* another thread did */
    else
        renewed = token_mint(s, &e) == 0;
    pthread_mutex_unlock(&s->token_lock);
    explicit_bzero(line, sizeof(line));
    return renewed;
}

int sbx__remote_with_token(struct sbx__remote_session *s, int once, sbx__remote_token_op *op,
                           void *ud, struct sbx_error *err)
{
    char line[TOKEN_LINE];
    struct sbx_error e = SBX_ERROR_INIT; /* its own: err may be NULL */
    int rc;
    for (int attempt = 0;; attempt++) {
        token_line(s, line);
        rc = op(ud, line, &e);
        if (rc == 0 || attempt || once || !token_renew(s, line, &e))
            break;
        sbx_error_clear(&e);
    }
    explicit_bzero(line, sizeof(line));
    if (rc < 0 && err)
        *err = e;
    return rc;
}

/* A request of sbx__remote_session_call and _get_bytes. */
struct session_req {
    struct sbx__remote_session *s;
    const char *method, *path;
    const json_t *body;
    size_t max;
    struct sbx_buf *raw;
    json_t **out;
};

static int session_req_op(void *ud, const char *line, struct sbx_error *err)
{
    struct session_req *q = ud;
    return request(q->s->ep, q->method, q->path, line + sizeof("Sbx-Token: ") - 1, q->body, q->max,
                   q->raw, q->out, err);
}

int sbx__remote_session_call(struct sbx__remote_session *s, const char *method, const char *path,
                             const json_t *body, json_t **out, struct sbx_error *err)
{
    struct session_req q = {s, method, path, body, BODY_MAX, NULL, out};
    return sbx__remote_with_token(s, 0, session_req_op, &q, err);
}

int sbx__remote_session_get_bytes(struct sbx__remote_session *s, const char *path, size_t max,
                                  struct sbx_buf *out, struct sbx_error *err)
{
    struct session_req q = {s, "GET", path, NULL, max, out, NULL};
    return sbx__remote_with_token(s, 0, session_req_op, &q, err);
}

/* ---------------------------------------------------------------------------------------------
 * Sessions */

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
    char *path = sbx_xasprintf("/v1/sandboxes/%s", s->base.id);
    int rc = sbx__remote_session_call(s, "DELETE", path, NULL, NULL, err);
    free(path);
    if (rc == 0)
        sbx__remote_forward_forget(s->base.id);
    return rc;
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
    json_decref(s->conn);
    explicit_bzero(s->token, sizeof(s->token));
    pthread_mutex_destroy(&s->token_lock);
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
        .resolve_port = sbx__remote_resolve_port,
        .stats = sbx__remote_stats,
        .log_open = sbx__remote_log_open,
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
    s->conn = json_incref(c->conn);
    pthread_mutex_init(&s->token_lock, NULL);
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
    json_t *opts = json_pack("{s:s}", "node", sbx__endpoint_url(c->ep));
    json_object_update(opts, c->create_opts);
    sbx_json_set(s->state, "options", opts);
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

/* A fresh token of sandbox id into tok, minted with this harness's certificate (the node's
 * owner check): SBX_E_NOTFOUND for a sandbox this harness did not make there. */
static int mint(struct remote_client *c, const char *id, char tok[SBX__REMOTE_TOKEN_MAX + 1],
                struct sbx_error *err)
{
    if (!id_valid(id))
        return sbx_error_set(err, SBX_E_INVAL, 0, "'%.64s' is not a node's sandbox id", id);
    int rc = mint_on(c->ep, id, tok, err);
    if (rc == -SBX_E_PERM)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "no sandbox '%s' of this harness on node '%s'",
                           id, sbx__endpoint_url(c->ep));
    return rc;
}

enum open_mode { OPEN_LIVE, OPEN_START, OPEN_STOPPED };

/* A session on a sandbox the node holds: a fresh token, then its root. OPEN_LIVE: GET the
 * sandbox, which must be live; OPEN_START: POST .../start (a stopped one); OPEN_STOPPED: GET,
 * which must be stopped (its session only holds its state). */
static int open_existing_as(struct remote_client *c, const char *id, enum open_mode mode,
                            struct sbx__remote_session **out, struct sbx_error *err)
{
    int start = mode == OPEN_START;
    json_t *d = NULL;
    char token[SBX__REMOTE_TOKEN_MAX + 1];
    int rc = id_valid(id)
                     ? mint_on(c->ep, id, token, err)
                     : sbx_error_set(err, SBX_E_INVAL, 0, "'%.64s' is not a node's sandbox id", id);
    if (rc == 0) {
        char *path = sbx_xasprintf(start ? "/v1/sandboxes/%s/start" : "/v1/sandboxes/%s", id);
        rc = call(c->ep, start ? "POST" : "GET", path, token, &d, err);
        free(path);
    }
    const char *root = json_string_value(json_object_get(d, "root"));
    const char *status = json_string_value(json_object_get(d, "status"));
    int stopped = status && strcmp(status, "stopped") == 0;
    if (rc == 0 && (!root || root[0] != '/'))
        rc = sbx_error_set(err, SBX_E_API, 0, "node '%s' sent no root for sandbox '%s'",
                           sbx__endpoint_url(c->ep), id);
    if (rc == 0 && mode == OPEN_LIVE && stopped)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0,
                           "sandbox '%s' is stopped on node '%s' (sbx sandbox start)", id,
                           sbx__endpoint_url(c->ep));
    if (rc == 0 && mode == OPEN_STOPPED && !stopped)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "sandbox '%s' is not stopped", id);
    if (rc == 0)
        *out = session_new(c, id, root, token, json_string_value(json_object_get(d, "created")));
    if (rc == -SBX_E_PERM)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "no sandbox '%s' of this harness on node '%s'",
                           id, sbx__endpoint_url(c->ep));
    explicit_bzero(token, sizeof(token));
    json_decref(d);
    return rc;
}

static int open_existing(struct remote_client *c, const char *id, struct sbx__remote_session **out,
                         struct sbx_error *err)
{
    return open_existing_as(c, id, OPEN_LIVE, out, err);
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
    if (rc == 0 && json_object_size(c->create_opts)) {
        if (!body)
            body = json_object();
        json_object_set(body, "options", c->create_opts);
    }
    if (rc == 0)
        rc = sbx__remote_call(c->ep, "POST", "/v1/sandboxes", NULL, body, &ans, err);
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
    struct remote_client *c = (struct remote_client *)bc;
    char token[SBX__REMOTE_TOKEN_MAX + 1];
    if (keep_workspace)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "a remote sandbox's workspace is on its node: it cannot be kept "
                             "after the sandbox");
    /* A token alone: a stopped sandbox is removed too. */
    int rc = mint(c, id, token, err);
    if (rc == 0)
        rc = remove_on(c->ep, id, token, err);
    if (rc == 0)
        sbx__remote_forward_forget(id);
    explicit_bzero(token, sizeof(token));
    return rc;
}

/* Stop on the node: its workspace snapshotted into the node's store (the snapshot stays
 * there: no reference of this harness's store to give), every process ended. */
static int rc_stop(struct sbx_client *bc, const char *id, char **out_ref, struct sbx_error *err)
{
    struct remote_client *c = (struct remote_client *)bc;
    char token[SBX__REMOTE_TOKEN_MAX + 1];
    (void)out_ref;
    int rc = mint(c, id, token, err);
    if (rc == 0) {
        char *path = sbx_xasprintf("/v1/sandboxes/%s/stop", id);
        rc = call(c->ep, "POST", path, token, NULL, err);
        free(path);
    }
    if (rc == 0)
        sbx__remote_forward_forget(id); /* its ports are gone with its processes */
    explicit_bzero(token, sizeof(token));
    return rc;
}

static int rc_start(struct sbx_client *bc, const char *id, const struct sbx_resume_opts *opts,
                    struct sbx_session **out, struct sbx_error *err)
{
    struct sbx__remote_session *s = NULL;
    (void)opts;
    int rc = open_existing_as((struct remote_client *)bc, id, OPEN_START, &s, err);
    if (rc == 0)
        *out = &s->base;
    return rc;
}

/* The state of a stopped sandbox, with "status": "stopped" (start brings it back). */
static int rc_stopped_state(struct sbx_client *bc, const char *id, json_t **out,
                            struct sbx_error *err)
{
    struct sbx__remote_session *s = NULL;
    int rc = open_existing_as((struct remote_client *)bc, id, OPEN_STOPPED, &s, err);
    if (rc == 0) {
        *out = json_deep_copy(s->state);
        sbx_json_set(*out, "status", json_string("stopped"));
        sess_free(&s->base);
    }
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
    json_decref(c->conn);
    json_decref(c->create_opts);
    free(c);
}

static const struct sbx_client_ops client_ops = {
        .create = rc_create,
        .attach = rc_attach,
        .list = rc_list,
        .remove = rc_remove,
        .resume = rc_resume,
        .stop = rc_stop,
        .start = rc_start,
        .stopped_state = rc_stopped_state,
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
        {.key = "memory",
         .type = SBX_OPTION_SIZE,
         .flags = SBX_OPTION_STATE,
         .arg = "SIZE",
         .help = "memory limit on the node, such as 512M (the node's default: 2G)",
         .flag = "memory"},
        {.key = "pids",
         .type = SBX_OPTION_INTEGER,
         .flags = SBX_OPTION_STATE,
         .arg = "N",
         .help = "most processes at once on the node (default 1024)",
         .flag = "pids"},
        {.key = "cpus",
         .type = SBX_OPTION_CPUS,
         .flags = SBX_OPTION_STATE | SBX_OPTION_NONE_OK,
         .arg = "N|none",
         .help = "CPU limit on the node, such as 1.5 (default half the node's; none: no limit)",
         .flag = "cpus"},
        {.key = "disk",
         .type = SBX_OPTION_SIZE,
         .flags = SBX_OPTION_STATE | SBX_OPTION_NONE_OK,
         .arg = "SIZE|none",
         .help = "workspace size limit on the node (default 8G)",
         .flag = "disk",
         .min = (long long)SBX_LOCAL_DISK_MIN,
         .max = (long long)SBX_LOCAL_DISK_MAX},
        {.key = "network",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_STATE,
         .arg = "none|allow:DOMAINS|full",
         .help = "the sandbox's network on the node: none (the default), allow:a.org,*.b.org "
                 "(HTTP(S) to those names), full (the node's network; only where the daemon "
                 "allows it)",
         .flag = "network"},
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
    c->conn = json_pack("{s:s, s:s, s:s, s:s}", "node", url, "node_ca", ca, "node_cert", cert,
                        "node_key", key);
    c->create_opts = json_object();
    static const char *const limits[] = {"memory", "pids", "cpus", "disk", "network"};
    for (size_t i = 0; i < SBX_ARRAY_LEN(limits); i++)
        if (json_object_get(o, limits[i]))
            json_object_set(c->create_opts, limits[i], json_object_get(o, limits[i]));
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

static const struct sbx__program programs[] = {
        {SBX__REMOTE_RELAY_VERB, sbx__remote_relay_main},
        {NULL, NULL},
};

const struct sbx__provider_def sbx__provider_remote = {
        .name = "remote",
        .summary = "a sandbox of the local provider on another host, through its sbx-node "
                   "daemon (mutual tls with the deployment's certificates)",
        .traits = SBX_PROVIDER_SNAPSHOTS | SBX_PROVIDER_PTY | SBX_PROVIDER_RESUME |
                  SBX_PROVIDER_PORTS | SBX_PROVIDER_STOP_START | SBX_PROVIDER_STATS |
                  SBX_PROVIDER_LOGS,
        .options = options,
        .programs = programs,
        .client_new = client_new,
        .client_new_json = client_new_json,
        .check_state = check_state,
};
