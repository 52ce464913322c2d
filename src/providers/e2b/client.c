/* The e2b provider, client side: sandboxes at E2B's hosted service (or anything speaking its
 * API), created through the control plane (POST /v2/sandboxes), reached through envd in each
 * sandbox. The service is the only record: a sandbox's id is E2B's sandboxID, what a later
 * process needs (the workspace root, the creation time) is in its metadata, and the envd access
 * token is asked again on every attach, so nothing secret is kept anywhere.
 * Stop and start are E2B's pause and resume (connect). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "providers/e2b/e2b.h"
#include "providers/e2b/options.h"
#include "sandbox/materialize/materialize.h"
#include "sandbox/session/internal.h"
#include "sbx/json.h"
#include "sbx/manifest.h"
#include "sbx/snapshot.h"
#include "sbx/strv.h"
#include "sbx/time.h"

#define DEFAULT_TEMPLATE "base"
#define DEFAULT_TIMEOUT  300
#define META_ROOT        "sbx.root"
#define META_CREATED     "sbx.created"
#define META_PORTS       "sbx.ports"
#define META_TIMEOUT     "sbx.timeout"
#define MANAGED          "sbx.managed"
#define TCP_TABLE_MAX    ((size_t)16 << 20)

struct e2b_client {
    struct sbx_client base;
    struct sbx__e2b_conf *conf;
    char *template, *root;
    int64_t timeout_s;
    int auto_pause, secure, internet;
    json_t *envs, *metadata;
    int ports[SBX__E2B_MAX_PORTS];
    size_t n_ports;
};

static int valid_id(const char *id)
{
    size_t n = strlen(id);
    if (n == 0 || n > SBX__E2B_ID_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'z') || id[i] == '-'))
            return 0;
    return 1;
}

/* ---------------------------------------------------------------------------------------------
 * Sessions */

static int sess_resolve_port(struct sbx_session *bs, int port, char **out_url,
                             struct sbx_error *err)
{
    struct sbx__e2b_session *s = (struct sbx__e2b_session *)bs;
    const json_t *ports = json_object_get(s->state, "exposed_ports");
    size_t i;
    json_t *v;
    int listed = json_array_size(ports) == 0;
    json_array_foreach(ports, i, v) listed |= json_integer_value(v) == port;
    if (!listed)
        return sbx_error_set(err, SBX_E_PERM, 0, "port %d is not among the exposed ports", port);
    static const char *const argv[] = {"cat", "/proc/net/tcp", "/proc/net/tcp6", NULL};
    struct sbx__shell_run r;
    sbx__shell_run_init(&r, TCP_TABLE_MAX);
    /* cat fails on a kernel without IPv6 (no tcp6) but has printed tcp: the text decides. */
    int rc = sbx__e2b_exec_run(&s->envd, argv, &r, err);
    if (rc == 0 && !sbx__net_table_listens(r.out.data ? r.out.data : "", r.out.len, port))
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "nothing listens on port %d in sandbox '%s'",
                           port, s->base.id);
    sbx__shell_run_release(&r);
    if (rc < 0)
        return rc;
    /* E2B's edge proxy routes https://{port}-{id}.{domain} to the port in the sandbox. */
    const char *domain = json_string_value(json_object_get(s->state, "domain"));
    *out_url = sbx_xasprintf("https://%d-%s.%s", port, s->base.id,
                             domain ? domain : s->envd.conf->domain);
    return 0;
}

void sbx__e2b_keepalive(struct sbx__e2b_session *s)
{
    int64_t now = sbx_time_mono_ns();
    int64_t last = __atomic_load_n(&s->extended_ns, __ATOMIC_SEQ_CST);
    if (now - last < s->timeout_s * 1000000000 / 4)
        return;
    __atomic_store_n(&s->extended_ns, now, __ATOMIC_SEQ_CST);
    char *path = sbx_xasprintf("/sandboxes/%s/timeout", s->base.id);
    json_t *body = json_pack("{s:I}", "timeout", (json_int_t)s->timeout_s);
    struct sbx_error ignored = SBX_ERROR_INIT;
    (void)sbx__e2b_api(s->envd.conf, "POST", path, body, NULL, NULL, &ignored);
    json_decref(body);
    free(path);
}

static int sess_state(struct sbx_session *bs, json_t **out, struct sbx_error *err)
{
    struct sbx__e2b_session *s = (struct sbx__e2b_session *)bs;
    (void)err;
    *out = json_deep_copy(s->state);
    return 0;
}

static int kill_sandbox(struct sbx__e2b_conf *c, const char *id, struct sbx_error *err)
{
    char *path = sbx_xasprintf("/sandboxes/%s", id);
    int rc = sbx__e2b_api(c, "DELETE", path, NULL, NULL, NULL, err);
    free(path);
    if (rc == -SBX_E_NOTFOUND)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "no sandbox '%s' (it expired or was killed)",
                           id);
    return rc;
}

static int pause_sandbox(struct sbx__e2b_conf *c, const char *id, struct sbx_error *err)
{
    char *path = sbx_xasprintf("/sandboxes/%s/pause", id);
    int rc = sbx__e2b_api(c, "POST", path, NULL, NULL, NULL, err);
    free(path);
    if (rc == -SBX_E_EXISTS)
        rc = sbx_error_set(err, SBX_E_EXISTS, 0, "sandbox '%s' is already stopped", id);
    else if (rc == -SBX_E_NOTFOUND)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "no sandbox '%s' (it expired or was killed)",
                           id);
    return rc;
}

static int sess_close(struct sbx_session *bs, int delete_workspace, struct sbx_error *err)
{
    struct sbx__e2b_session *s = (struct sbx__e2b_session *)bs;
    /* The workspace lives in the sandbox: keeping it means keeping the sandbox, paused. */
    int rc = delete_workspace ? kill_sandbox(s->envd.conf, s->base.id, err)
                              : pause_sandbox(s->envd.conf, s->base.id, err);
    if (rc == -SBX_E_NOTFOUND)
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "sandbox '%s' is gone", s->base.id);
    return rc;
}

static int sess_record_snapshot(struct sbx_session *bs, const char *ref, struct sbx_error *err)
{
    struct sbx__e2b_session *s = (struct sbx__e2b_session *)bs;
    (void)err;
    sbx_json_set(s->state, "snapshot", sbx_json_str(ref));
    return 0;
}

static void sess_free(struct sbx_session *bs)
{
    struct sbx__e2b_session *s = (struct sbx__e2b_session *)bs;
    if (!s)
        return;
    sbx__shellfs_copy_drop(&s->ws);
    sbx_session_release_base(&s->base);
    sbx__e2b_envd_release(&s->envd);
    json_decref(s->state);
    free(s);
}

static void shellfs_of(struct sbx_session *bs, struct sbx__shellfs *out)
{
    *out = sbx__e2b_fs((struct sbx__e2b_session *)bs);
}

static const struct sbx_session_ops session_ops = {
        .shellfs = shellfs_of,
        .exec_start = sbx__e2b_exec_start,
        SBX__SHELLFS_SESSION_FILE_OPS,
        .resolve_port = sess_resolve_port,
        .state = sess_state,
        .close = sess_close,
        .workspace_fd = sbx__shellfs_s_workspace_fd,
        .record_snapshot = sess_record_snapshot,
        .free = sess_free,
};

/* The client's options as a session state keeps them (never the key or where it is). */
static json_t *options_json(const struct e2b_client *c)
{
    json_t *o = json_object();
    sbx_json_set(o, "template", sbx_json_str(c->template));
    sbx_json_set(o, "timeout", json_integer(c->timeout_s));
    sbx_json_set(o, "on_timeout", sbx_json_str(c->auto_pause ? "pause" : "kill"));
    sbx_json_set(o, "secure", json_boolean(c->secure));
    sbx_json_set(o, "allow_internet_access", json_boolean(c->internet));
    return o;
}

/* The life the sandbox was made with (its metadata), else the client's: attaching with
 * another client's default does not change it. */
static int64_t life_of(const struct e2b_client *c, const json_t *meta)
{
    const char *t = json_string_value(json_object_get(meta, META_TIMEOUT));
    char *end = NULL;
    long long v = t ? strtoll(t, &end, 10) : 0;
    return t && end && !*end && v > 0 && v <= 86400 ? (int64_t)v : c->timeout_s;
}

/* A session on sandbox id, from what the service says of it (detail: SandboxDetail or the
 * answer of create/connect merged with the metadata). token: the envd access token. */
static struct sbx__e2b_session *session_new(struct e2b_client *c, const char *id,
                                            const json_t *meta, const char *domain,
                                            const char *token, const char *template)
{
    const char *root = json_string_value(json_object_get(meta, META_ROOT));
    const char *created = json_string_value(json_object_get(meta, META_CREATED));
    const char *ports = json_string_value(json_object_get(meta, META_PORTS));
    char stamp[SBX_TIME_RFC3339_LEN];
    if (!created) {
        sbx_time_rfc3339(sbx_time_real_ns(), stamp);
        created = stamp;
    }
    if (!root || root[0] != '/')
        root = c->root;
    struct sbx__e2b_session *s = sbx_xcalloc(1, sizeof(*s));
    sbx_session_init_base(&s->base, &session_ops, "e2b", id, root);
    sbx__e2b_envd_init(&s->envd, c->conf, id, domain, token);
    s->ws = (struct sbx__shellfs_copy)SBX__SHELLFS_COPY_INIT;
    s->timeout_s = life_of(c, meta);
    /* Made or connected just now: its end is its timeout from now. */
    s->extended_ns = sbx_time_mono_ns();
    json_t *st = json_object(), *pj = json_array();
    for (const char *p = ports; p && *p;) {
        long v = strtol(p, (char **)&p, 10);
        if (v > 0 && v < 65536)
            sbx_json_append(pj, json_integer(v));
        p += strspn(p, ", ");
        if (*p && (*p < '0' || *p > '9'))
            break;
    }
    sbx_json_set(st, "version", json_integer(SBX_SESSION_STATE_VERSION));
    sbx_json_set(st, "provider", sbx_json_str("e2b"));
    sbx_json_set(st, "id", sbx_json_str(id));
    sbx_json_set(st, "created", sbx_json_str(created));
    sbx_json_set(st, "root", sbx_json_str(root));
    sbx_json_set(st, "template", template ? sbx_json_str(template) : json_null());
    sbx_json_set(st, "domain", domain ? sbx_json_str(domain) : json_null());
    sbx_json_set(st, "workspace_owned", json_true());
    sbx_json_set(st, "options", options_json(c));
    sbx_json_set(st, "exposed_ports", pj);
    sbx_json_set(st, "manifest", json_null());
    sbx_json_set(st, "snapshot", json_null());
    s->state = st;
    return s;
}

/* GET /sandboxes/{id}: *detail (caller owns). A sandbox the service does not know is
 * SBX_E_NOTFOUND "no sandbox". */
static int detail_of(struct e2b_client *c, const char *id, json_t **detail, struct sbx_error *err)
{
    if (!valid_id(id))
        return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not an e2b sandbox id", id);
    char *path = sbx_xasprintf("/sandboxes/%s", id);
    int rc = sbx__e2b_api(c->conf, "GET", path, NULL, NULL, detail, err);
    free(path);
    if (rc == -SBX_E_NOTFOUND)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "no sandbox '%s' (it expired or was killed)",
                           id);
    if (rc == 0 && !json_is_object(*detail)) {
        json_decref(*detail);
        rc = sbx_error_set(err, SBX_E_API, 0,
                           "the E2B API described sandbox '%s' without an "
                           "object",
                           id);
    }
    return rc;
}

/* POST /v2/sandboxes/{id}/connect: the running sandbox (resumed when paused) with a fresh
 * access token. */
static int connect_sandbox(struct e2b_client *c, const char *id, struct sbx__e2b_session **out,
                           struct sbx_error *err)
{
    json_t *detail = NULL, *ans = NULL;
    int rc = detail_of(c, id, &detail, err);
    if (rc < 0)
        return rc;
    char *path = sbx_xasprintf("/v2/sandboxes/%s/connect", id);
    json_t *body = json_pack("{s:I}", "timeout",
                             (json_int_t)life_of(c, json_object_get(detail, "metadata")));
    rc = sbx__e2b_api(c->conf, "POST", path, body, NULL, &ans, err);
    if (rc == -SBX_E_NOTFOUND)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "no sandbox '%s' (it expired or was killed)",
                           id);
    if (rc == 0)
        *out = session_new(c, id, json_object_get(detail, "metadata"),
                           json_string_value(json_object_get(ans, "domain")),
                           json_string_value(json_object_get(ans, "envdAccessToken")),
                           json_string_value(json_object_get(detail, "templateID")));
    json_decref(detail);
    json_decref(ans);
    json_decref(body);
    free(path);
    return rc;
}

static int ec_attach(struct sbx_client *bc, const char *id, struct sbx_session **out,
                     struct sbx_error *err)
{
    struct e2b_client *c = (struct e2b_client *)bc;
    json_t *detail = NULL;
    int rc = detail_of(c, id, &detail, err);
    const char *state = json_string_value(json_object_get(detail, "state"));
    if (rc == 0 && state && strcmp(state, "running") != 0)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "sandbox '%s' is %s (sbx sandbox start %s)", id,
                           state, id);
    json_decref(detail);
    struct sbx__e2b_session *s = NULL;
    /* connect on a running sandbox only extends its life: it also gives the access token. */
    if (rc == 0)
        rc = connect_sandbox(c, id, &s, err);
    if (rc == 0)
        *out = &s->base;
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Create */

static json_t *create_body(const struct e2b_client *c, const char *template, const char *root,
                           const struct sbx_strv *env)
{
    json_t *b = json_object(), *ev = json_deep_copy(c->envs), *meta = json_deep_copy(c->metadata);
    char created[SBX_TIME_RFC3339_LEN];
    sbx_time_rfc3339(sbx_time_real_ns(), created);
    for (size_t i = 0; i < env->n; i++) {
        const char *eq = strchr(env->v[i], '=');
        char *k = sbx_xstrndup(env->v[i], (size_t)(eq - env->v[i]));
        sbx_json_set(ev, k, sbx_json_str(eq + 1));
        free(k);
    }
    struct sbx_buf ports;
    sbx_buf_init(&ports, SBX_BUF_NOLIMIT);
    for (size_t i = 0; i < c->n_ports; i++)
        sbx__e2b_keep(sbx_buf_addf(&ports, NULL, "%s%d", i ? "," : "", c->ports[i]));
    sbx_json_set(meta, MANAGED, sbx_json_str("1"));
    sbx_json_set(meta, META_ROOT, sbx_json_str(root));
    sbx_json_set(meta, META_CREATED, sbx_json_str(created));
    sbx_json_set(meta, META_PORTS, sbx_json_str(ports.data ? ports.data : ""));
    char life[24];
    snprintf(life, sizeof(life), "%lld", (long long)c->timeout_s);
    sbx_json_set(meta, META_TIMEOUT, sbx_json_str(life));
    sbx_buf_release(&ports);
    sbx_json_set(b, "templateID", sbx_json_str(template));
    sbx_json_set(b, "timeout", json_integer(c->timeout_s));
    sbx_json_set(b, "autoPause", json_boolean(c->auto_pause));
    sbx_json_set(b, "allow_internet_access", json_boolean(c->internet));
    if (!c->secure)
        sbx_json_set(b, "secure", json_false());
    sbx_json_set(b, "metadata", meta);
    sbx_json_set(b, "envVars", ev);
    return b;
}

/* POST /v2/sandboxes (the v1 path when the sandbox is not to be secure): a session on it. The
 * environment's values are wiped once sent: they may be secrets. */
static int create_sandbox(struct e2b_client *c, const char *template, const char *root,
                          struct sbx_strv *env, struct sbx__e2b_session **out,
                          struct sbx_error *err)
{
    json_t *body = create_body(c, template, root, env), *ans = NULL;
    int rc = sbx__e2b_api(c->conf, "POST", c->secure ? "/v2/sandboxes" : "/sandboxes", body, NULL,
                          &ans, err);
    for (size_t i = 0; i < env->n; i++)
        explicit_bzero(env->v[i], strlen(env->v[i]));
    if (rc == -SBX_E_NOTFOUND)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0,
                           "the E2B service has no template '%s' (the e2b provider's template "
                           "option): %s",
                           template, err->msg);
    const char *id = json_string_value(json_object_get(ans, "sandboxID"));
    if (rc == 0 && (!id || !valid_id(id)))
        rc = sbx_error_set(err, SBX_E_API, 0, "the E2B API made a sandbox without a usable id");
    if (rc == 0)
        *out = session_new(c, id, json_object_get(body, "metadata"),
                           json_string_value(json_object_get(ans, "domain")),
                           json_string_value(json_object_get(ans, "envdAccessToken")), template);
    json_t *ev = json_object_get(body, "envVars");
    const char *k;
    json_t *v;
    json_object_foreach(ev, k, v)
            explicit_bzero((char *)json_string_value(v), json_string_length(v));
    json_decref(body);
    json_decref(ans);
    return rc;
}

/* The workspace, a snapshot's content and the manifest's entries in a new sandbox. */
static int fill_sandbox(struct sbx__e2b_session *s, const struct sbx_create_spec *spec,
                        struct sbx_snapshot_store *store, const char *snap_ref,
                        struct sbx_error *err)
{
    struct sbx__shellfs fs = sbx__e2b_fs(s);
    int rc = sbx__shellfs_make_root(&fs, err);
    return rc < 0 ? rc : sbx__shellfs_fill(&fs, &s->base, s->state, spec, store, snap_ref, err);
}

/* What a manifest asks that an E2B sandbox cannot give: users other than E2B's own. */
static int check_manifest(const struct sbx_manifest *m, struct sbx_error *err)
{
    return sbx__shellfs_check_accounts(m, "an e2b sandbox", SBX__E2B_USER, err);
}

static int ec_create(struct sbx_client *bc, const struct sbx_create_spec *spec,
                     struct sbx_session **out, struct sbx_error *err)
{
    struct e2b_client *c = (struct e2b_client *)bc;
    const struct sbx_manifest *m = spec->manifest;
    struct sbx_strv env;
    struct sbx__e2b_session *s = NULL;
    struct sbx_snapshot_store *store = NULL;
    char *snap_ref = NULL;
    int rc;
    sbx_strv_init(&env);
    if (spec->workspace) {
        rc = sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                           "an e2b sandbox's workspace is in the sandbox: a host workspace "
                           "directory ('%s') cannot be used",
                           spec->workspace);
        goto out;
    }
    if (spec->id && spec->id[0]) {
        rc = sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                           "the E2B service names its sandboxes: '%s' cannot be chosen", spec->id);
        goto out;
    }
    if ((rc = check_manifest(m, err)) < 0)
        goto out;
    /* A snapshot is found and checked before anything exists: a bad one creates nothing. */
    if (spec->snapshot &&
        ((rc = sbx_snapshot_store_open(NULL, &store, err)) < 0 ||
         (rc = sbx_snapshot_resolve(store, spec->snapshot, NULL, &snap_ref, err)) < 0))
        goto out;
    if (m && (rc = sbx_manifest_env_resolve(m, spec->pass_secrets, &env, err)) < 0)
        goto out;
    const char *root =
            m && strcmp(sbx_manifest_root(m), "/workspace") != 0 ? sbx_manifest_root(m) : c->root;
    if ((rc = create_sandbox(c, c->template, root, &env, &s, err)) < 0 ||
        (rc = fill_sandbox(s, spec, store, snap_ref, err)) < 0)
        goto out;
    *out = &s->base;
    s = NULL;
out:
    if (rc < 0) {
        struct sbx_error ignored = SBX_ERROR_INIT;
        if (s)
            (void)kill_sandbox(c->conf, s->base.id, &ignored);
        sbx_error_prefix(err, "cannot create sandbox");
    }
    sess_free(s ? &s->base : NULL);
    sbx_strv_release(&env);
    free(snap_ref);
    sbx_snapshot_store_free(store);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * List, remove, stop, start, resume */

static json_t *listed_state(struct e2b_client *c, const json_t *item)
{
    const char *id = json_string_value(json_object_get(item, "sandboxID"));
    if (!id || !valid_id(id))
        return NULL;
    struct sbx__e2b_session *s =
            session_new(c, id, json_object_get(item, "metadata"), NULL, NULL,
                        json_string_value(json_object_get(item, "templateID")));
    json_t *st = json_deep_copy(s->state);
    const char *state = json_string_value(json_object_get(item, "state"));
    if (state && strcmp(state, "running") != 0)
        sbx_json_set(st, "status", sbx_json_str("stopped"));
    sess_free(&s->base);
    return st;
}

static int ec_list(struct sbx_client *bc, json_t **out, struct sbx_error *err)
{
    struct e2b_client *c = (struct e2b_client *)bc;
    json_t *res = json_array(), *page = NULL, *v;
    size_t i;
    int rc = 0;
    /* Only the sandboxes sbx made: metadata sbx.managed=1 (an encoded k=v query). */
    char *path = sbx_xasprintf("/v2/sandboxes?state=running,paused&limit=100&metadata=%s",
                               "sbx.managed%3D1");
    if ((rc = sbx__e2b_api(c->conf, "GET", path, NULL, NULL, &page, err)) == 0 &&
        !json_is_array(page))
        rc = sbx_error_set(err, SBX_E_API, 0, "the E2B API's sandbox list is not a list");
    json_array_foreach(page, i, v)
    {
        json_t *st = listed_state(c, v);
        if (st)
            sbx_json_append(res, st);
    }
    json_decref(page);
    free(path);
    if (rc < 0) {
        json_decref(res);
        return rc;
    }
    *out = res;
    return 0;
}

static int ec_remove(struct sbx_client *bc, const char *id, int keep_workspace,
                     struct sbx_error *err)
{
    struct e2b_client *c = (struct e2b_client *)bc;
    if (keep_workspace)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "an e2b sandbox's workspace is in the sandbox: it goes with it");
    if (!valid_id(id))
        return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not an e2b sandbox id", id);
    return kill_sandbox(c->conf, id, err);
}

static int ec_stop(struct sbx_client *bc, const char *id, char **out_ref, struct sbx_error *err)
{
    struct e2b_client *c = (struct e2b_client *)bc;
    json_t *detail = NULL;
    int rc = detail_of(c, id, &detail, err);
    json_decref(detail);
    /* A paused sandbox keeps its disk and memory at the service: no snapshot is taken. */
    if (rc == 0)
        rc = pause_sandbox(c->conf, id, err);
    if (rc == 0 && out_ref)
        *out_ref = NULL;
    return rc;
}

static int ec_start(struct sbx_client *bc, const char *id, const struct sbx_resume_opts *opts,
                    struct sbx_session **out, struct sbx_error *err)
{
    struct e2b_client *c = (struct e2b_client *)bc;
    struct sbx__e2b_session *s = NULL;
    (void)opts;
    int rc = connect_sandbox(c, id, &s, err);
    if (rc == 0)
        *out = &s->base;
    return rc;
}

static int ec_stopped_state(struct sbx_client *bc, const char *id, json_t **out,
                            struct sbx_error *err)
{
    struct e2b_client *c = (struct e2b_client *)bc;
    json_t *detail = NULL;
    int rc = detail_of(c, id, &detail, err);
    const char *state = json_string_value(json_object_get(detail, "state"));
    if (rc == 0 && (!state || strcmp(state, "paused") != 0))
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "sandbox '%s' is not stopped", id);
    if (rc == 0) {
        json_object_set(detail, "sandboxID", json_object_get(detail, "sandboxID"));
        *out = listed_state(c, detail);
        if (!*out)
            rc = sbx_error_set(err, SBX_E_API, 0, "the E2B API described '%s' oddly", id);
    }
    json_decref(detail);
    return rc;
}

static int ec_resume(struct sbx_client *bc, const json_t *state, const struct sbx_resume_opts *opts,
                     struct sbx_session **out, struct sbx_error *err)
{
    struct e2b_client *c = (struct e2b_client *)bc;
    const char *id = json_string_value(json_object_get(state, "id"));
    const char *snap = json_string_value(json_object_get(state, "snapshot"));
    struct sbx__e2b_session *s = NULL;
    /* connect resumes a sandbox the service paused (its timeout, or sbx sandbox stop). */
    int rc = connect_sandbox(c, id, &s, err);
    if (rc == -SBX_E_NOTFOUND && snap)
        return sbx__client_rebuild(bc, state, snap, opts, 0, 0, out, err);
    if (rc == -SBX_E_NOTFOUND)
        return sbx_error_set(err, SBX_E_NOTFOUND, 0,
                             "sandbox '%s' is gone (it expired or was killed) and its state has "
                             "no snapshot",
                             id);
    if (rc == 0) {
        const json_t *mj = json_object_get(state, "manifest");
        if (json_is_object(mj))
            sbx_json_set(s->state, "manifest", json_deep_copy(mj));
        if (snap)
            sbx_json_set(s->state, "snapshot", sbx_json_str(snap));
        *out = &s->base;
    }
    return rc;
}

static void ec_free(struct sbx_client *bc)
{
    struct e2b_client *c = (struct e2b_client *)bc;
    sbx__e2b_conf_unref(c->conf);
    free(c->template);
    free(c->root);
    json_decref(c->envs);
    json_decref(c->metadata);
    free(c);
}

static const struct sbx_client_ops client_ops = {
        .create = ec_create,
        .attach = ec_attach,
        .list = ec_list,
        .remove = ec_remove,
        .resume = ec_resume,
        .stop = ec_stop,
        .start = ec_start,
        .stopped_state = ec_stopped_state,
        .free = ec_free,
};

/* ---------------------------------------------------------------------------------------------
 * The provider */

static const char *env_or(const char *opt, const char *var)
{
    if (opt && opt[0])
        return opt;
    const char *v = getenv(var);
    return v && v[0] ? v : NULL;
}

static struct sbx__e2b_conf *conf_new(const struct sbx__e2b_opts *o)
{
    struct sbx__e2b_conf *cf = sbx_xcalloc(1, sizeof(*cf));
    cf->refs = 1;
    const char *domain = env_or(o->domain, "E2B_DOMAIN");
    cf->domain = sbx_xstrdup(domain ? domain : SBX__E2B_DOMAIN_DEFAULT);
    const char *api = env_or(o->api_url, "E2B_API_URL");
    cf->api_url = api ? sbx_xstrdup(api) : sbx_xasprintf("https://api.%s", cf->domain);
    size_t n = strlen(cf->api_url);
    while (n > 1 && cf->api_url[n - 1] == '/')
        cf->api_url[--n] = '\0';
    const char *sb = env_or(o->sandbox_url, "E2B_SANDBOX_URL");
    if (sb) {
        cf->sandbox_url = sbx_xstrdup(sb);
        n = strlen(cf->sandbox_url);
        while (n > 1 && cf->sandbox_url[n - 1] == '/')
            cf->sandbox_url[--n] = '\0';
    }
    cf->key_ref =
            o->key_ref ? json_deep_copy(o->key_ref) : json_pack("{s:s}", "env", "E2B_API_KEY");
    const char *var = json_string_value(json_object_get(cf->key_ref, "env"));
    const char *file = json_string_value(json_object_get(cf->key_ref, "file"));
    cf->key_what = var ? sbx_xasprintf("$%s", var) : sbx_xasprintf("'%s'", file ? file : "?");
    cf->ca_file = o->ca_file ? sbx_xstrdup(o->ca_file) : NULL;
    cf->call_ms = SBX__E2B_CALL_MS;
    return cf;
}

static int client_new_json(const json_t *options, struct sbx_client **out, struct sbx_error *err)
{
    struct sbx__e2b_opts o;
    int rc = sbx__e2b_options_parse(options, &o, err);
    if (rc < 0)
        return rc;
    struct e2b_client *c = sbx_xcalloc(1, sizeof(*c));
    c->base.ops = &client_ops;
    c->base.provider = "e2b";
    c->conf = conf_new(&o);
    c->template = sbx_xstrdup(o.template ? o.template : DEFAULT_TEMPLATE);
    c->root = sbx_xstrdup(o.root ? o.root : SBX__E2B_HOME);
    c->timeout_s = o.timeout_s ? o.timeout_s : DEFAULT_TIMEOUT;
    c->auto_pause = o.auto_pause;
    c->secure = o.secure;
    c->internet = o.internet;
    c->envs = o.envs;
    c->metadata = o.metadata;
    memcpy(c->ports, o.ports, sizeof(c->ports));
    c->n_ports = o.n_ports;
    *out = &c->base;
    return 0;
}

/* The e2b-specific part of a session state. */
static int check_state(const json_t *st, struct sbx_error *err)
{
    int rc = sbx__state_check_id_root(st, valid_id, "an e2b sandbox id", err);
    if (rc < 0)
        return rc;
    const json_t *d = json_object_get(st, "domain");
    if (d && !json_is_null(d) && !json_is_string(d))
        return sbx_error_set(err, SBX_E_INVAL, 0, "field 'domain' must be a string or null");
    return 0;
}

const struct sbx__provider_def sbx__provider_e2b = {
        .name = "e2b",
        .summary = "a sandbox (a Firecracker VM) at E2B's hosted service, through its REST API "
                   "and envd in the sandbox (key from $E2B_API_KEY)",
        .traits = SBX_PROVIDER_SNAPSHOTS | SBX_PROVIDER_STOP_START | SBX_PROVIDER_PTY |
                  SBX_PROVIDER_PORTS | SBX_PROVIDER_RESUME,
        .options = sbx__e2b_options,
        .client_new_json = client_new_json,
        .options_check = sbx__e2b_options_check,
        .check_state = check_state,
};
