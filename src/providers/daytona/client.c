/* The daytona provider, client side: sandboxes at Daytona's service (or anything speaking its
 * API), made and managed through the control plane (POST /sandbox, GET, DELETE, /start,
 * /stop), reached through each sandbox's toolbox behind the toolbox proxy. The service is the
 * only record: a sandbox's id is Daytona's, what a later process needs (the workspace root,
 * the creation time, the exposed ports) is in its labels. Stop and start keep the disk. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "providers/daytona/daytona.h"
#include "sandbox/materialize/materialize.h"
#include "sandbox/session/internal.h"
#include "sbx/json.h"
#include "sbx/manifest.h"
#include "sbx/snapshot.h"
#include "sbx/strv.h"
#include "sbx/time.h"

#define LABEL_MANAGED "sbx.managed"
#define LABEL_ROOT    "sbx.root"
#define LABEL_CREATED "sbx.created"
#define LABEL_PORTS   "sbx.ports"
#define USER          "daytona"

struct dtn_client {
    struct sbx_client base;
    struct sbx__dtn_conf *conf;
    struct sbx__dtn_opts o; /* env and labels owned, strings copied below */
    char *snapshot, *name, *root;
};

static int valid_id(const char *id)
{
    size_t n = id ? strlen(id) : 0;
    if (n == 0 || n > SBX__DTN_ID_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'z') ||
              (id[i] >= 'A' && id[i] <= 'Z') || id[i] == '-' || id[i] == '_'))
            return 0;
    return 1;
}

/* ---------------------------------------------------------------------------------------------
 * Sessions */

#define TCP_TABLE_MAX ((size_t)16 << 20)

/* A signed preview URL is asked once per port and kept while it is valid for at least half its
 * life: the same port gives the same URL. */
static int signed_url(struct sbx__dtn_session *s, int port, char **out_url, struct sbx_error *err)
{
    int64_t now = sbx_time_mono_ns();
    for (size_t i = 0; i < s->n_urls; i++)
        if (s->urls[i].port == port && s->urls[i].until > now) {
            *out_url = sbx_xstrdup(s->urls[i].url);
            return 0;
        }
    json_t *ans = NULL;
    char *path = sbx_xasprintf("/sandbox/%s/ports/%d/signed-preview-url?expiresInSeconds=%lld",
                               s->base.id, port, (long long)s->url_ttl_s);
    int rc = sbx__dtn_api(s->box.conf, "GET", path, NULL, &ans, err);
    free(path);
    const char *url = json_string_value(json_object_get(ans, "url"));
    if (rc == 0 && (!url || (strncmp(url, "https://", 8) != 0 && strncmp(url, "http://", 7) != 0)))
        rc = sbx_error_set(err, SBX_E_API, 0, "the Daytona API gave no preview URL for port %d",
                           port);
    if (rc == 0) {
        size_t i = 0;
        while (i < s->n_urls && s->urls[i].port != port)
            i++;
        if (i == s->n_urls && s->n_urls < SBX__DTN_MAX_PORTS)
            s->n_urls++;
        if (i < SBX__DTN_MAX_PORTS) {
            free(s->urls[i].url);
            s->urls[i].port = port;
            s->urls[i].url = sbx_xstrdup(url);
            s->urls[i].until = now + s->url_ttl_s * 500000000;
        }
        *out_url = sbx_xstrdup(url);
    }
    json_decref(ans);
    return rc;
}

static int sess_resolve_port(struct sbx_session *bs, int port, char **out_url,
                             struct sbx_error *err)
{
    struct sbx__dtn_session *s = (struct sbx__dtn_session *)bs;
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
    int rc = sbx__dtn_run(&s->box, argv, &r, err);
    if (rc == 0 && !sbx__net_table_listens(r.out.data ? r.out.data : "", r.out.len, port))
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "nothing listens on port %d in sandbox '%s'",
                           port, s->base.id);
    sbx__shell_run_release(&r);
    return rc < 0 ? rc : signed_url(s, port, out_url, err);
}

static int sess_state(struct sbx_session *bs, json_t **out, struct sbx_error *err)
{
    struct sbx__dtn_session *s = (struct sbx__dtn_session *)bs;
    (void)err;
    *out = json_deep_copy(s->state);
    return 0;
}

/* POST /sandbox/{id}/ACTION, then the sandbox's state polled until it is want (or gone, for
 * delete), within timeout_s. */
static int lifecycle(struct sbx__dtn_conf *c, const char *id, const char *method,
                     const char *action, const char *want, int64_t timeout_s, json_t **detail,
                     struct sbx_error *err)
{
    char *path =
            action ? sbx_xasprintf("/sandbox/%s/%s", id, action) : sbx_xasprintf("/sandbox/%s", id);
    json_t *ans = NULL;
    int rc = sbx__dtn_api(c, method, path, NULL, &ans, err);
    free(path);
    int64_t deadline = sbx_time_mono_ns() + timeout_s * 1000000000;
    int64_t wait_ms = 100;
    while (rc == 0 && want) {
        const char *st = json_string_value(json_object_get(ans, "state"));
        if (st && strcmp(st, want) == 0)
            break;
        if (st && (strcmp(st, "error") == 0 || strcmp(st, "build_failed") == 0)) {
            const char *why = json_string_value(json_object_get(ans, "errorReason"));
            rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "sandbox '%s' is in state %s: %s", id, st,
                               why ? why : "no reason given");
            break;
        }
        if (sbx_time_mono_ns() > deadline) {
            rc = sbx_error_set(err, SBX_E_TIMEOUT, 0,
                               "sandbox '%s' did not become %s within %lld s (it is %s)", id, want,
                               (long long)timeout_s, st ? st : "in no state");
            break;
        }
        struct timespec ts = {.tv_sec = wait_ms / 1000, .tv_nsec = (wait_ms % 1000) * 1000000};
        nanosleep(&ts, NULL);
        wait_ms = wait_ms < 1000 ? wait_ms * 2 : 1000;
        json_decref(ans);
        ans = NULL;
        path = sbx_xasprintf("/sandbox/%s", id);
        rc = sbx__dtn_api(c, "GET", path, NULL, &ans, err);
        free(path);
    }
    if (rc == -SBX_E_NOTFOUND)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "no sandbox '%s' (it was deleted)", id);
    if (rc == 0 && detail)
        *detail = ans;
    else
        json_decref(ans);
    return rc;
}

static int sess_close(struct sbx_session *bs, int delete_workspace, struct sbx_error *err)
{
    struct sbx__dtn_session *s = (struct sbx__dtn_session *)bs;
    /* The workspace lives in the sandbox: keeping it means keeping the sandbox, stopped. */
    int rc = delete_workspace
                     ? lifecycle(s->box.conf, s->base.id, "DELETE", NULL, NULL, 0, NULL, err)
                     : lifecycle(s->box.conf, s->base.id, "POST", "stop", "stopped", 60, NULL, err);
    if (rc == -SBX_E_NOTFOUND)
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "sandbox '%s' is gone", s->base.id);
    return rc;
}

static int sess_record_snapshot(struct sbx_session *bs, const char *ref, struct sbx_error *err)
{
    struct sbx__dtn_session *s = (struct sbx__dtn_session *)bs;
    (void)err;
    sbx_json_set(s->state, "snapshot", sbx_json_str(ref));
    return 0;
}

static void sess_free(struct sbx_session *bs)
{
    struct sbx__dtn_session *s = (struct sbx__dtn_session *)bs;
    if (!s)
        return;
    sbx__shellfs_copy_drop(&s->ws);
    for (size_t i = 0; i < s->n_urls; i++)
        free(s->urls[i].url);
    sbx_session_release_base(&s->base);
    sbx__dtn_box_release(&s->box);
    json_decref(s->state);
    free(s);
}

static void shellfs_of(struct sbx_session *bs, struct sbx__shellfs *out)
{
    *out = sbx__dtn_fs((struct sbx__dtn_session *)bs);
}

static const struct sbx_session_ops session_ops = {
        .shellfs = shellfs_of,
        .exec_start = sbx__dtn_exec_start,
        SBX__SHELLFS_SESSION_FILE_OPS,
        .resolve_port = sess_resolve_port,
        .state = sess_state,
        .close = sess_close,
        .workspace_fd = sbx__shellfs_s_workspace_fd,
        .record_snapshot = sess_record_snapshot,
        .free = sess_free,
};

static json_t *options_json(const struct dtn_client *c)
{
    json_t *o = json_object();
    if (c->snapshot)
        sbx_json_set(o, "sandbox_snapshot_name", sbx_json_str(c->snapshot));
    sbx_json_set(o, "create_timeout", json_integer(c->o.create_timeout_s));
    sbx_json_set(o, "start_timeout", json_integer(c->o.start_timeout_s));
    sbx_json_set(o, "auto_stop_interval", json_integer(c->o.auto_stop));
    sbx_json_set(o, "exposed_port_url_ttl_s", json_integer(c->o.url_ttl_s));
    return o;
}

/* A session on sandbox detail (the service's Sandbox object). */
static int session_new(struct dtn_client *c, const json_t *detail, struct sbx__dtn_session **out,
                       struct sbx_error *err)
{
    const char *id = json_string_value(json_object_get(detail, "id"));
    const json_t *labels = json_object_get(detail, "labels");
    const char *root = json_string_value(json_object_get(labels, LABEL_ROOT));
    const char *created = json_string_value(json_object_get(labels, LABEL_CREATED));
    const char *ports = json_string_value(json_object_get(labels, LABEL_PORTS));
    const char *proxy = json_string_value(json_object_get(detail, "toolboxProxyUrl"));
    json_t *asked = NULL;
    if (!valid_id(id))
        return sbx_error_set(err, SBX_E_API, 0, "the Daytona API named a sandbox oddly");
    if (!proxy) {
        /* A sandbox described without it (a list, an older API): asked on its own, as
         * Daytona's client does. */
        char *path = sbx_xasprintf("/sandbox/%s/toolbox-proxy-url", id);
        int rc = sbx__dtn_api(c->conf, "GET", path, NULL, &asked, err);
        free(path);
        if (rc < 0)
            return rc;
        proxy = json_string_value(json_object_get(asked, "url"));
    }
    if (!proxy || (strncmp(proxy, "https://", 8) != 0 && strncmp(proxy, "http://", 7) != 0)) {
        json_decref(asked);
        return sbx_error_set(err, SBX_E_API, 0,
                             "the Daytona API gave sandbox '%s' no toolbox proxy URL", id);
    }
    if (!root || root[0] != '/')
        root = c->root;
    struct sbx__dtn_session *s = sbx_xcalloc(1, sizeof(*s));
    int rc = sbx__dtn_box_init(&s->box, c->conf, id, proxy, root, err);
    json_decref(asked);
    if (rc < 0) {
        free(s);
        return rc;
    }
    sbx_session_init_base(&s->base, &session_ops, "daytona", id, root);
    s->ws = (struct sbx__shellfs_copy)SBX__SHELLFS_COPY_INIT;
    s->url_ttl_s = c->o.url_ttl_s;
    char stamp[SBX_TIME_RFC3339_LEN];
    if (!created) {
        sbx_time_rfc3339(sbx_time_real_ns(), stamp);
        created = stamp;
    }
    json_t *st = json_object(), *pj = json_array();
    for (const char *p = ports; p && *p;) {
        char *end = NULL;
        long v = strtol(p, &end, 10);
        if (end == p)
            break;
        if (v > 0 && v < 65536)
            sbx_json_append(pj, json_integer(v));
        p = end + strspn(end, ",");
    }
    sbx_json_set(st, "version", json_integer(SBX_SESSION_STATE_VERSION));
    sbx_json_set(st, "provider", sbx_json_str("daytona"));
    sbx_json_set(st, "id", sbx_json_str(id));
    sbx_json_set(st, "created", sbx_json_str(created));
    sbx_json_set(st, "root", sbx_json_str(root));
    sbx_json_set(st, "workspace_owned", json_true());
    sbx_json_set(st, "options", options_json(c));
    sbx_json_set(st, "exposed_ports", pj);
    sbx_json_set(st, "manifest", json_null());
    sbx_json_set(st, "snapshot", json_null());
    s->state = st;
    *out = s;
    return 0;
}

/* GET /sandbox/{id}. */
static int detail_of(struct dtn_client *c, const char *id, json_t **detail, struct sbx_error *err)
{
    if (!valid_id(id))
        return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a daytona sandbox id", id);
    char *path = sbx_xasprintf("/sandbox/%s", id);
    int rc = sbx__dtn_api(c->conf, "GET", path, NULL, detail, err);
    free(path);
    if (rc == -SBX_E_NOTFOUND)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "no sandbox '%s' (it was deleted)", id);
    if (rc == 0 && !json_is_object(*detail)) {
        json_decref(*detail);
        rc = sbx_error_set(err, SBX_E_API, 0, "the Daytona API described sandbox '%s' oddly", id);
    }
    return rc;
}

static int dc_attach(struct sbx_client *bc, const char *id, struct sbx_session **out,
                     struct sbx_error *err)
{
    struct dtn_client *c = (struct dtn_client *)bc;
    json_t *detail = NULL;
    struct sbx__dtn_session *s = NULL;
    int rc = detail_of(c, id, &detail, err);
    const char *state = json_string_value(json_object_get(detail, "state"));
    if (rc == 0 && state && strcmp(state, "started") != 0)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "sandbox '%s' is %s (sbx sandbox start %s)", id,
                           state, id);
    if (rc == 0 && (rc = session_new(c, detail, &s, err)) == 0)
        *out = &s->base;
    json_decref(detail);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Create */

static json_t *create_body(const struct dtn_client *c, const char *root, const struct sbx_strv *env)
{
    json_t *b = json_object(), *ev = json_deep_copy(c->o.env), *lb = json_deep_copy(c->o.labels);
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
    for (size_t i = 0; i < c->o.n_ports; i++)
        sbx__dtn_keep(sbx_buf_addf(&ports, NULL, "%s%d", i ? "," : "", c->o.ports[i]));
    sbx_json_set(lb, LABEL_MANAGED, sbx_json_str("1"));
    sbx_json_set(lb, LABEL_ROOT, sbx_json_str(root));
    sbx_json_set(lb, LABEL_CREATED, sbx_json_str(created));
    sbx_json_set(lb, LABEL_PORTS, sbx_json_str(ports.data ? ports.data : ""));
    sbx_buf_release(&ports);
    if (c->snapshot)
        sbx_json_set(b, "snapshot", sbx_json_str(c->snapshot));
    if (c->name)
        sbx_json_set(b, "name", sbx_json_str(c->name));
    if (c->o.cpu)
        sbx_json_set(b, "cpu", json_integer(c->o.cpu));
    if (c->o.memory)
        sbx_json_set(b, "memory", json_integer(c->o.memory));
    if (c->o.disk)
        sbx_json_set(b, "disk", json_integer(c->o.disk));
    sbx_json_set(b, "user", sbx_json_str(USER));
    sbx_json_set(b, "autoStopInterval", json_integer(c->o.auto_stop));
    sbx_json_set(b, "public", json_false());
    sbx_json_set(b, "labels", lb);
    sbx_json_set(b, "env", ev);
    return b;
}

/* POST /sandbox, started within create_timeout: a session on it. The environment's values are
 * wiped once sent: they may be secrets. */
static int create_sandbox(struct dtn_client *c, const char *root, struct sbx_strv *env,
                          struct sbx__dtn_session **out, char **made, struct sbx_error *err)
{
    json_t *body = create_body(c, root, env), *ans = NULL;
    int rc = sbx__dtn_api(c->conf, "POST", "/sandbox", body, &ans, err);
    for (size_t i = 0; i < env->n; i++)
        explicit_bzero(env->v[i], strlen(env->v[i]));
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(body, "env"), k, v)
            explicit_bzero((char *)json_string_value(v), json_string_length(v));
    json_decref(body);
    if (rc == -SBX_E_NOTFOUND && c->snapshot)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0,
                           "the Daytona service has no snapshot '%s' (the daytona provider's "
                           "sandbox_snapshot_name option): %s",
                           c->snapshot, err->msg);
    const char *id = json_string_value(json_object_get(ans, "id"));
    if (rc == 0 && !valid_id(id))
        rc = sbx_error_set(err, SBX_E_API, 0, "the Daytona API made a sandbox without a usable id");
    if (rc == 0)
        *made = sbx_xstrdup(id);
    const char *st = json_string_value(json_object_get(ans, "state"));
    if (rc == 0 && (!st || strcmp(st, "started") != 0)) {
        json_decref(ans);
        ans = NULL;
        rc = lifecycle(c->conf, *made, "GET", NULL, "started", c->o.create_timeout_s, &ans, err);
    }
    if (rc == 0)
        rc = session_new(c, ans, out, err);
    json_decref(ans);
    return rc;
}

/* The workspace, a snapshot's content and the manifest's entries in a new sandbox. */
static int fill_sandbox(struct sbx__dtn_session *s, const struct sbx_create_spec *spec,
                        struct sbx_snapshot_store *store, const char *snap_ref,
                        struct sbx_error *err)
{
    struct sbx__shellfs fs = sbx__dtn_fs(s);
    int rc = sbx__shellfs_make_root(&fs, err);
    return rc < 0 ? rc : sbx__shellfs_fill(&fs, &s->base, s->state, spec, store, snap_ref, err);
}

/* What a manifest asks that a Daytona sandbox cannot give: users other than its own. */
static int check_manifest(const struct sbx_manifest *m, struct sbx_error *err)
{
    return sbx__shellfs_check_accounts(m, "a daytona sandbox", USER, err);
}

static int dc_create(struct sbx_client *bc, const struct sbx_create_spec *spec,
                     struct sbx_session **out, struct sbx_error *err)
{
    struct dtn_client *c = (struct dtn_client *)bc;
    const struct sbx_manifest *m = spec->manifest;
    struct sbx_strv env;
    struct sbx__dtn_session *s = NULL;
    struct sbx_snapshot_store *store = NULL;
    char *snap_ref = NULL, *made = NULL;
    int rc;
    sbx_strv_init(&env);
    if (spec->workspace) {
        rc = sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                           "a daytona sandbox's workspace is in the sandbox: a host workspace "
                           "directory ('%s') cannot be used",
                           spec->workspace);
        goto out;
    }
    if (spec->id && spec->id[0]) {
        rc = sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                           "the Daytona service names its sandboxes: '%s' cannot be chosen (the "
                           "name option gives a name)",
                           spec->id);
        goto out;
    }
    if ((rc = check_manifest(m, err)) < 0)
        goto out;
    if (spec->snapshot &&
        ((rc = sbx_snapshot_store_open(NULL, &store, err)) < 0 ||
         (rc = sbx_snapshot_resolve(store, spec->snapshot, NULL, &snap_ref, err)) < 0))
        goto out;
    if (m && (rc = sbx_manifest_env_resolve(m, spec->pass_secrets, &env, err)) < 0)
        goto out;
    const char *root =
            m && strcmp(sbx_manifest_root(m), "/workspace") != 0 ? sbx_manifest_root(m) : c->root;
    if ((rc = create_sandbox(c, root, &env, &s, &made, err)) < 0 ||
        (rc = fill_sandbox(s, spec, store, snap_ref, err)) < 0)
        goto out;
    *out = &s->base;
    s = NULL;
out:
    if (rc < 0) {
        struct sbx_error ignored = SBX_ERROR_INIT;
        if (made)
            (void)lifecycle(c->conf, made, "DELETE", NULL, NULL, 0, NULL, &ignored);
        sbx_error_prefix(err, "cannot create sandbox");
    }
    sess_free(s ? &s->base : NULL);
    sbx_strv_release(&env);
    free(snap_ref);
    free(made);
    sbx_snapshot_store_free(store);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * List, remove, stop, start, resume */

static json_t *listed_state(struct dtn_client *c, const json_t *item)
{
    struct sbx__dtn_session *s = NULL;
    struct sbx_error ignored = SBX_ERROR_INIT;
    if (session_new(c, item, &s, &ignored) < 0)
        return NULL;
    json_t *st = json_deep_copy(s->state);
    const char *state = json_string_value(json_object_get(item, "state"));
    if (state && strcmp(state, "started") != 0)
        sbx_json_set(st, "status", sbx_json_str("stopped"));
    sess_free(&s->base);
    return st;
}

static int dc_list(struct sbx_client *bc, json_t **out, struct sbx_error *err)
{
    struct dtn_client *c = (struct dtn_client *)bc;
    json_t *res = json_array(), *page = NULL, *v;
    size_t i;
    /* Only the sandboxes sbx made: the label sbx.managed=1 (a JSON object, encoded). */
    int rc = sbx__dtn_api(c->conf, "GET", "/sandbox?labels=%7B%22sbx.managed%22%3A%221%22%7D", NULL,
                          &page, err);
    const json_t *items = json_is_array(page) ? page : json_object_get(page, "items");
    if (rc == 0 && !json_is_array(items))
        rc = sbx_error_set(err, SBX_E_API, 0, "the Daytona API's sandbox list is not a list");
    json_array_foreach(items, i, v)
    {
        json_t *st = listed_state(c, v);
        if (st)
            sbx_json_append(res, st);
    }
    json_decref(page);
    if (rc < 0) {
        json_decref(res);
        return rc;
    }
    *out = res;
    return 0;
}

static int dc_remove(struct sbx_client *bc, const char *id, int keep_workspace,
                     struct sbx_error *err)
{
    struct dtn_client *c = (struct dtn_client *)bc;
    if (keep_workspace)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "a daytona sandbox's workspace is in the sandbox: it goes with it");
    if (!valid_id(id))
        return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a daytona sandbox id", id);
    return lifecycle(c->conf, id, "DELETE", NULL, NULL, 0, NULL, err);
}

static int dc_stop(struct sbx_client *bc, const char *id, char **out_ref, struct sbx_error *err)
{
    struct dtn_client *c = (struct dtn_client *)bc;
    json_t *detail = NULL;
    int rc = detail_of(c, id, &detail, err);
    const char *state = json_string_value(json_object_get(detail, "state"));
    if (rc == 0 && state && strcmp(state, "stopped") == 0)
        rc = sbx_error_set(err, SBX_E_EXISTS, 0, "sandbox '%s' is already stopped", id);
    json_decref(detail);
    /* A stopped sandbox keeps its disk at the service: no snapshot is taken. */
    if (rc == 0)
        rc = lifecycle(c->conf, id, "POST", "stop", "stopped", c->o.start_timeout_s, NULL, err);
    if (rc == 0 && out_ref)
        *out_ref = NULL;
    return rc;
}

static int start_sandbox(struct dtn_client *c, const char *id, struct sbx__dtn_session **out,
                         struct sbx_error *err)
{
    json_t *detail = NULL;
    int rc = detail_of(c, id, &detail, err);
    const char *state = json_string_value(json_object_get(detail, "state"));
    if (rc == 0 && (!state || strcmp(state, "started") != 0)) {
        json_decref(detail);
        detail = NULL;
        rc = lifecycle(c->conf, id, "POST", "start", "started", c->o.start_timeout_s, &detail, err);
    }
    if (rc == 0)
        rc = session_new(c, detail, out, err);
    json_decref(detail);
    return rc;
}

static int dc_start(struct sbx_client *bc, const char *id, const struct sbx_resume_opts *opts,
                    struct sbx_session **out, struct sbx_error *err)
{
    struct sbx__dtn_session *s = NULL;
    (void)opts;
    int rc = start_sandbox((struct dtn_client *)bc, id, &s, err);
    if (rc == 0)
        *out = &s->base;
    return rc;
}

static int dc_stopped_state(struct sbx_client *bc, const char *id, json_t **out,
                            struct sbx_error *err)
{
    struct dtn_client *c = (struct dtn_client *)bc;
    json_t *detail = NULL;
    int rc = detail_of(c, id, &detail, err);
    const char *state = json_string_value(json_object_get(detail, "state"));
    if (rc == 0 && (!state || (strcmp(state, "stopped") != 0 && strcmp(state, "archived") != 0)))
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "sandbox '%s' is not stopped", id);
    if (rc == 0 && !(*out = listed_state(c, detail)))
        rc = sbx_error_set(err, SBX_E_API, 0, "the Daytona API described '%s' oddly", id);
    json_decref(detail);
    return rc;
}

static int dc_resume(struct sbx_client *bc, const json_t *state, const struct sbx_resume_opts *opts,
                     struct sbx_session **out, struct sbx_error *err)
{
    const char *id = json_string_value(json_object_get(state, "id"));
    const char *snap = json_string_value(json_object_get(state, "snapshot"));
    struct sbx__dtn_session *s = NULL;
    /* A stopped sandbox is started again: its disk was kept. */
    int rc = start_sandbox((struct dtn_client *)bc, id, &s, err);
    if (rc == -SBX_E_NOTFOUND && snap)
        return sbx__client_rebuild(bc, state, snap, opts, 0, 0, out, err);
    if (rc == -SBX_E_NOTFOUND)
        return sbx_error_set(err, SBX_E_NOTFOUND, 0,
                             "sandbox '%s' is gone (it was deleted) and its state has no snapshot",
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

static void dc_free(struct sbx_client *bc)
{
    struct dtn_client *c = (struct dtn_client *)bc;
    sbx__dtn_conf_unref(c->conf);
    sbx__dtn_opts_release(&c->o);
    free(c->snapshot);
    free(c->name);
    free(c->root);
    free(c);
}

static const struct sbx_client_ops client_ops = {
        .create = dc_create,
        .attach = dc_attach,
        .list = dc_list,
        .remove = dc_remove,
        .resume = dc_resume,
        .stop = dc_stop,
        .start = dc_start,
        .stopped_state = dc_stopped_state,
        .free = dc_free,
};

/* ---------------------------------------------------------------------------------------------
 * The provider */

static int client_new_json(const json_t *options, struct sbx_client **out, struct sbx_error *err)
{
    struct dtn_client *c = sbx_xcalloc(1, sizeof(*c));
    int rc = sbx__dtn_options_parse(options, &c->o, err);
    if (rc == 0)
        rc = sbx__dtn_conf_new(&c->o, &c->conf, err);
    if (rc < 0) {
        sbx__dtn_opts_release(&c->o);
        free(c);
        return rc;
    }
    c->base.ops = &client_ops;
    c->base.provider = "daytona";
    c->snapshot = c->o.snapshot ? sbx_xstrdup(c->o.snapshot) : NULL;
    c->name = c->o.name ? sbx_xstrdup(c->o.name) : NULL;
    c->root = sbx_xstrdup(c->o.root ? c->o.root : SBX__DTN_ROOT);
    /* The borrowed strings are not used past this point. */
    c->o.snapshot = c->o.name = c->o.root = c->o.api_url = c->o.org = c->o.ca_file = NULL;
    c->o.key_ref = NULL;
    *out = &c->base;
    return 0;
}

/* The daytona-specific part of a session state. */
static int check_state(const json_t *st, struct sbx_error *err)
{
    return sbx__state_check_id_root(st, valid_id, "a daytona sandbox id", err);
}

const struct sbx__provider_def sbx__provider_daytona = {
        .name = "daytona",
        .summary = "a sandbox at Daytona's hosted service, through its REST API and the toolbox "
                   "API in the sandbox (key from $DAYTONA_API_KEY)",
        .traits = SBX_PROVIDER_SNAPSHOTS | SBX_PROVIDER_STOP_START | SBX_PROVIDER_PTY |
                  SBX_PROVIDER_PORTS | SBX_PROVIDER_RESUME,
        .options = sbx__dtn_options,
        .client_new_json = client_new_json,
        .options_check = sbx__dtn_options_check,
        .check_state = check_state,
};
