/* The vercel provider, client side: sandboxes at Vercel's hosted service (or anything speaking
 * its API as Vercel's npm client does), each a named, persistent sandbox whose current session
 * is the running VM. A sandbox's id is its name; what a later process needs (the workspace
 * root, the creation time) is in its tags at the service; the session's id is asked again on
 * every attach, so nothing secret is kept anywhere. Stop is the session's stop (or a native
 * snapshot, which also stops it); start is a get with resume, which starts a new session on
 * the sandbox's disk. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "providers/vercel/vercel.h"
#include "sandbox/materialize/materialize.h"
#include "sandbox/session/internal.h"
#include "sandbox/wire/http.h"
#include "sbx/json.h"
#include "sbx/manifest.h"
#include "sbx/snapshot.h"
#include "sbx/strv.h"
#include "sbx/time.h"

#define DEFAULT_TIMEOUT_MS 270000
#define RUNNING_WAIT_MS    120000
#define TAG_ROOT           "sbx.root"
#define TAG_CREATED        "sbx.created"
#define TAG_PERSISTENCE    "sbx.persistence"
#define MANAGED            "sbx.managed"
#define TCP_TABLE_MAX      ((size_t)16 << 20)

struct vc_client {
    struct sbx_client base;
    struct sbx__vercel_conf *conf;
    char *runtime, *root, *persistence, *source_snapshot;
    int64_t timeout_ms, vcpus, snapshot_expiration_ms;
    json_t *env;
    int ports[SBX__VERCEL_MAX_PORTS];
    size_t n_ports;
};

static int valid_name(const char *id)
{
    size_t n = strlen(id);
    if (n == 0 || n > SBX__VERCEL_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'z') ||
              (id[i] >= 'A' && id[i] <= 'Z') || id[i] == '-' || id[i] == '_'))
            return 0;
    return 1;
}

static char *sandbox_path(const char *name)
{
    char *e = sbx__http_escape(name, 0);
    char *p = sbx_xasprintf("/v2/sandboxes/%s", e);
    free(e);
    return p;
}

/* ---------------------------------------------------------------------------------------------
 * Sessions */

static int sess_resolve_port(struct sbx_session *bs, int port, char **out_url,
                             struct sbx_error *err)
{
    struct sbx__vercel_session *s = (struct sbx__vercel_session *)bs;
    char key[16];
    snprintf(key, sizeof(key), "%d", port);
    const char *url = json_string_value(json_object_get(json_object_get(s->state, "routes"), key));
    if (!url)
        return sbx_error_set(err, SBX_E_PERM, 0,
                             "port %d is not among the sandbox's exposed ports (the service "
                             "routes only the ports a sandbox was made with)",
                             port);
    static const char *const argv[] = {"cat", "/proc/net/tcp", "/proc/net/tcp6", NULL};
    struct sbx__shell_run r;
    sbx__shell_run_init(&r, TCP_TABLE_MAX);
    int rc = sbx__vercel_run(&s->t, argv, &r, err);
    if (rc == 0 && !sbx__net_table_listens(r.out.data ? r.out.data : "", r.out.len, port))
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "nothing listens on port %d in sandbox '%s'",
                           port, s->base.id);
    sbx__shell_run_release(&r);
    if (rc == 0)
        *out_url = sbx_xstrdup(url);
    return rc;
}

void sbx__vercel_keepalive(struct sbx__vercel_session *s)
{
    int64_t now = sbx_time_real_ns() / 1000000;
    int64_t ends = __atomic_load_n(&s->ends_ms, __ATOMIC_SEQ_CST);
    if (ends <= 0 || ends - now >= s->timeout_ms / 2)
        return;
    __atomic_store_n(&s->ends_ms, ends + s->timeout_ms, __ATOMIC_SEQ_CST);
    char *path = sbx__vercel_session_path(&s->t, "extend-timeout");
    json_t *body = json_pack("{s:I}", "duration", (json_int_t)s->timeout_ms);
    struct sbx_error ignored = SBX_ERROR_INIT;
    (void)sbx__vercel_api(s->t.conf, "POST", path, 0, body, NULL, NULL, &ignored);
    json_decref(body);
    free(path);
}

static int sess_state(struct sbx_session *bs, json_t **out, struct sbx_error *err)
{
    struct sbx__vercel_session *s = (struct sbx__vercel_session *)bs;
    (void)err;
    *out = json_deep_copy(s->state);
    return 0;
}

static int delete_sandbox(struct sbx__vercel_conf *c, const char *name, struct sbx_error *err)
{
    char *path = sandbox_path(name);
    int rc = sbx__vercel_api(c, "DELETE", path, 1, NULL, NULL, NULL, err);
    free(path);
    if (rc == -SBX_E_NOTFOUND)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "no sandbox '%s' (it expired or was deleted)",
                           name);
    return rc;
}

/* The session's stop, or with snapshot a native snapshot (which stops it too). */
static int stop_session(struct sbx__vercel_conf *c, const char *name, const char *session,
                        int snapshot, int64_t expiration_ms, struct sbx_error *err)
{
    struct sbx__vercel_target t;
    sbx__vercel_target_init(&t, c, name, session, "/");
    char *path = sbx__vercel_session_path(&t, snapshot ? "snapshot" : "stop");
    json_t *body = snapshot && expiration_ms
                           ? json_pack("{s:I}", "expiration", (json_int_t)expiration_ms)
                           : NULL;
    int rc = sbx__vercel_api(c, "POST", path, 0, body, NULL, NULL, err);
    if (rc == -SBX_E_SANDBOX)
        rc = sbx_error_set(err, SBX_E_EXISTS, 0, "sandbox '%s' is already stopped", name);
    json_decref(body);
    free(path);
    sbx__vercel_target_release(&t);
    return rc;
}

static int sess_close(struct sbx_session *bs, int delete_workspace, struct sbx_error *err)
{
    struct sbx__vercel_session *s = (struct sbx__vercel_session *)bs;
    /* The workspace lives in the sandbox: keeping it means keeping the sandbox, stopped. */
    int rc = delete_workspace ? delete_sandbox(s->t.conf, s->t.name, err)
                              : stop_session(s->t.conf, s->t.name, s->t.session, 0, 0, err);
    if (rc == -SBX_E_NOTFOUND)
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "sandbox '%s' is gone", s->base.id);
    if (rc == -SBX_E_EXISTS)
        rc = 0;
    return rc;
}

static int sess_record_snapshot(struct sbx_session *bs, const char *ref, struct sbx_error *err)
{
    struct sbx__vercel_session *s = (struct sbx__vercel_session *)bs;
    (void)err;
    sbx_json_set(s->state, "snapshot", sbx_json_str(ref));
    return 0;
}

static void sess_free(struct sbx_session *bs)
{
    struct sbx__vercel_session *s = (struct sbx__vercel_session *)bs;
    if (!s)
        return;
    sbx__shellfs_copy_drop(&s->ws);
    sbx_session_release_base(&s->base);
    sbx__vercel_target_release(&s->t);
    json_decref(s->state);
    free(s);
}

static void shellfs_of(struct sbx_session *bs, struct sbx__shellfs *out)
{
    *out = sbx__vercel_fs((struct sbx__vercel_session *)bs);
}

static const struct sbx_session_ops session_ops = {
        .shellfs = shellfs_of,
        .exec_start = sbx__vercel_exec_start,
        SBX__SHELLFS_SESSION_FILE_OPS,
        .resolve_port = sess_resolve_port,
        .state = sess_state,
        .close = sess_close,
        .workspace_fd = sbx__shellfs_s_workspace_fd,
        .record_snapshot = sess_record_snapshot,
        .free = sess_free,
};

/* The options a session state keeps (never the token or where it is): the sandbox's own, as
 * the service and its tags say them, else this client's. */
static json_t *options_json(const struct vc_client *c, const json_t *sb)
{
    json_t *o = json_object();
    const char *runtime = json_string_value(json_object_get(sb, "runtime"));
    const char *how =
            json_string_value(json_object_get(json_object_get(sb, "tags"), TAG_PERSISTENCE));
    json_int_t timeout = json_integer_value(json_object_get(sb, "timeout"));
    runtime = runtime ? runtime : c->runtime;
    sbx_json_set(o, "runtime", runtime ? sbx_json_str(runtime) : json_null());
    sbx_json_set(o, "timeout_ms", json_integer(timeout > 0 ? timeout : c->timeout_ms));
    sbx_json_set(o, "workspace_persistence", sbx_json_str(how ? how : c->persistence));
    return o;
}

/* A session from what the service says of a sandbox ({sandbox, session, routes}). */
static struct sbx__vercel_session *session_new(struct vc_client *c, const json_t *ans)
{
    const json_t *sb = json_object_get(ans, "sandbox");
    const json_t *tags = json_object_get(sb, "tags");
    const char *name = json_string_value(json_object_get(sb, "name"));
    const char *sid = json_string_value(json_object_get(json_object_get(ans, "session"), "id"));
    const char *root = json_string_value(json_object_get(tags, TAG_ROOT));
    const char *created = json_string_value(json_object_get(tags, TAG_CREATED));
    char stamp[SBX_TIME_RFC3339_LEN];
    if (!created) {
        sbx_time_rfc3339(sbx_time_real_ns(), stamp);
        created = stamp;
    }
    if (!root || root[0] != '/')
        root = c->root;
    struct sbx__vercel_session *s = sbx_xcalloc(1, sizeof(*s));
    sbx_session_init_base(&s->base, &session_ops, "vercel", name, root);
    sbx__vercel_target_init(&s->t, c->conf, name, sid, root);
    s->ws = (struct sbx__shellfs_copy)SBX__SHELLFS_COPY_INIT;
    /* The session ends at its start plus its timeout (both as the service says them). */
    const json_t *se = json_object_get(ans, "session");
    json_int_t started = json_integer_value(json_object_get(se, "startedAt"));
    json_int_t timeout = json_integer_value(json_object_get(se, "timeout"));
    json_int_t made = json_integer_value(json_object_get(sb, "timeout"));
    s->timeout_ms = made > 0 ? (int64_t)made : c->timeout_ms; /* as made, whatever our default */
    s->ends_ms = started > 0 && timeout > 0 ? (int64_t)(started + timeout) : 0;
    json_t *st = json_object(), *ports = json_array(), *routes = json_object(), *v;
    size_t i;
    json_array_foreach(json_object_get(ans, "routes"), i, v)
    {
        json_int_t port = json_integer_value(json_object_get(v, "port"));
        const char *url = json_string_value(json_object_get(v, "url"));
        if (port <= 0 || port > 65535 || !url)
            continue;
        char key[16];
        snprintf(key, sizeof(key), "%d", (int)port);
        sbx_json_append(ports, json_integer(port));
        sbx_json_set(routes, key, sbx_json_str(url));
    }
    sbx_json_set(st, "version", json_integer(SBX_SESSION_STATE_VERSION));
    sbx_json_set(st, "provider", sbx_json_str("vercel"));
    sbx_json_set(st, "id", sbx_json_str(name));
    sbx_json_set(st, "created", sbx_json_str(created));
    sbx_json_set(st, "root", sbx_json_str(root));
    sbx_json_set(st, "workspace_owned", json_true());
    sbx_json_set(st, "options", options_json(c, sb));
    sbx_json_set(st, "exposed_ports", ports);
    sbx_json_set(st, "routes", routes);
    sbx_json_set(st, "manifest", json_null());
    sbx_json_set(st, "snapshot", json_null());
    /* The native snapshot the service keeps of the sandbox (a stop with
     * workspace_persistence snapshot): a source_snapshot for new sandboxes. */
    const char *native = json_string_value(json_object_get(sb, "currentSnapshotId"));
    if (native)
        sbx_json_set(st, "native_snapshot", sbx_json_str(native));
    s->state = st;
    return s;
}

/* The answer's sandbox and session are usable: a name sbx can use, a session id. */
static int check_answer(const json_t *ans, const char *what, struct sbx_error *err)
{
    const char *name = json_string_value(json_object_get(json_object_get(ans, "sandbox"), "name"));
    const char *sid = json_string_value(json_object_get(json_object_get(ans, "session"), "id"));
    if (!name || !valid_name(name) || !sid || !sid[0])
        return sbx_error_set(err, SBX_E_API, 0,
                             "the Vercel API answered %s without a usable sandbox and session",
                             what);
    return 0;
}

static const char *session_status(const json_t *ans)
{
    const char *s = json_string_value(json_object_get(json_object_get(ans, "session"), "status"));
    return s ? s : "unknown";
}

/* GET /v2/sandboxes/{name} (resume: start a stopped one): *ans (caller owns). */
static int get_sandbox(struct vc_client *c, const char *name, int resume, json_t **ans,
                       struct sbx_error *err)
{
    if (!valid_name(name))
        return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a vercel sandbox name", name);
    char *base = sandbox_path(name);
    char *path = resume ? sbx_xasprintf("%s?resume=true", base) : sbx_xstrdup(base);
    int rc = sbx__vercel_api(c->conf, "GET", path, 1, NULL, ans, NULL, err);
    free(path);
    free(base);
    if (rc == -SBX_E_NOTFOUND)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "no sandbox '%s' (it expired or was deleted)",
                           name);
    if (rc == 0 && (rc = check_answer(*ans, "a get", err)) < 0) {
        json_decref(*ans);
        *ans = NULL;
    }
    return rc;
}

/* Until the session runs (a new one is pending a moment at the service). */
static int wait_running(struct vc_client *c, json_t **ans, struct sbx_error *err)
{
    int64_t until = sbx_time_mono_ns() + (int64_t)RUNNING_WAIT_MS * 1000000;
    const char *name = json_string_value(json_object_get(json_object_get(*ans, "sandbox"), "name"));
    char *keep = sbx_xstrdup(name);
    int rc = 0;
    while (strcmp(session_status(*ans), "pending") == 0 && rc == 0) {
        if (sbx_time_mono_ns() > until) {
            rc = sbx_error_set(err, SBX_E_TIMEOUT, 0, "sandbox '%s' did not start within %d s",
                               keep, RUNNING_WAIT_MS / 1000);
            break;
        }
        sbx_sleep_ms(500);
        json_t *next = NULL;
        if ((rc = get_sandbox(c, keep, 0, &next, err)) == 0) {
            json_decref(*ans);
            *ans = next;
        }
    }
    if (rc == 0 && strcmp(session_status(*ans), "running") != 0)
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "sandbox '%s' is %s, not running", keep,
                           session_status(*ans));
    free(keep);
    return rc;
}

static int vc_attach(struct sbx_client *bc, const char *id, struct sbx_session **out,
                     struct sbx_error *err)
{
    struct vc_client *c = (struct vc_client *)bc;
    json_t *ans = NULL;
    int rc = get_sandbox(c, id, 0, &ans, err);
    const char *status = rc == 0 ? session_status(ans) : "";
    if (rc == 0 && strcmp(status, "running") != 0 && strcmp(status, "pending") != 0)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "sandbox '%s' is %s (sbx sandbox start %s)", id,
                           status, id);
    if (rc == 0)
        rc = wait_running(c, &ans, err);
    if (rc == 0)
        *out = &session_new(c, ans)->base;
    json_decref(ans);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Create */

static json_t *create_body(const struct vc_client *c, const char *name, const char *root,
                           const struct sbx_strv *env)
{
    json_t *b = json_object(), *ev = json_deep_copy(c->env), *tags = json_object(),
           *ports = json_array();
    char created[SBX_TIME_RFC3339_LEN];
    sbx_time_rfc3339(sbx_time_real_ns(), created);
    for (size_t i = 0; i < env->n; i++) {
        const char *eq = strchr(env->v[i], '=');
        char *k = sbx_xstrndup(env->v[i], (size_t)(eq - env->v[i]));
        sbx_json_set(ev, k, sbx_json_str(eq + 1));
        free(k);
    }
    for (size_t i = 0; i < c->n_ports; i++)
        sbx_json_append(ports, json_integer(c->ports[i]));
    sbx_json_set(tags, MANAGED, sbx_json_str("1"));
    sbx_json_set(tags, TAG_ROOT, sbx_json_str(root));
    sbx_json_set(tags, TAG_CREATED, sbx_json_str(created));
    sbx_json_set(tags, TAG_PERSISTENCE, sbx_json_str(c->persistence));
    if (c->conf->project)
        sbx_json_set(b, "projectId", sbx_json_str(c->conf->project));
    if (name)
        sbx_json_set(b, "name", sbx_json_str(name));
    sbx_json_set(b, "ports", ports);
    sbx_json_set(b, "timeout", json_integer(c->timeout_ms));
    if (c->runtime)
        sbx_json_set(b, "runtime", sbx_json_str(c->runtime));
    if (c->vcpus)
        sbx_json_set(b, "resources", json_pack("{s:I}", "vcpus", (json_int_t)c->vcpus));
    if (c->source_snapshot)
        sbx_json_set(b, "source",
                     json_pack("{s:s,s:s}", "type", "snapshot", "snapshotId", c->source_snapshot));
    if (c->snapshot_expiration_ms)
        sbx_json_set(b, "snapshotExpiration", json_integer(c->snapshot_expiration_ms));
    sbx_json_set(b, "persistent", json_true());
    sbx_json_set(b, "env", ev);
    sbx_json_set(b, "tags", tags);
    return b;
}

/* POST /v2/sandboxes (with a runtime; /v3/sandboxes without, as Vercel's client): the answer.
 * The environment's values are wiped once sent: they may be secrets. */
static int create_sandbox(struct vc_client *c, const char *name, const char *root,
                          struct sbx_strv *env, json_t **ans, struct sbx_error *err)
{
    json_t *body = create_body(c, name, root, env);
    char code[64];
    int rc = sbx__vercel_api(c->conf, "POST", c->runtime ? "/v2/sandboxes" : "/v3/sandboxes", 0,
                             body, ans, code, err);
    for (size_t i = 0; i < env->n; i++)
        explicit_bzero(env->v[i], strlen(env->v[i]));
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(body, "env"), k, v)
            explicit_bzero((char *)json_string_value(v), json_string_length(v));
    if (rc < 0 && strcmp(code, "snapshot_not_found") == 0)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0,
                           "the Vercel service has no snapshot '%s' (the vercel provider's "
                           "source_snapshot option): %s",
                           c->source_snapshot ? c->source_snapshot : "", err->msg);
    else if (rc == -SBX_E_INVAL && c->runtime)
        rc = sbx_error_set(err, SBX_E_INVAL, 0,
                           "the Vercel service refused the sandbox (runtime '%s', the vercel "
                           "provider's runtime option): %s",
                           c->runtime, err->msg);
    if (rc == 0 && (rc = check_answer(*ans, "a create", err)) == 0)
        rc = wait_running(c, ans, err);
    json_decref(body);
    return rc;
}

/* The workspace, a snapshot's content and the manifest's entries in a new sandbox. */
static int fill_sandbox(struct sbx__vercel_session *s, const struct sbx_create_spec *spec,
                        struct sbx_snapshot_store *store, const char *snap_ref,
                        struct sbx_error *err)
{
    struct sbx__shellfs fs = sbx__vercel_fs(s);
    int rc = sbx__shellfs_make_root(&fs, err);
    return rc < 0 ? rc : sbx__shellfs_fill(&fs, &s->base, s->state, spec, store, snap_ref, err);
}

/* What a manifest asks that a Vercel sandbox cannot give: users other than its own. */
static int check_manifest(const struct sbx_manifest *m, struct sbx_error *err)
{
    return sbx__shellfs_check_accounts(m, "a vercel sandbox", SBX__VERCEL_USER, err);
}

static int check_create(const struct sbx_create_spec *spec, struct sbx_error *err)
{
    if (spec->workspace)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "a vercel sandbox's workspace is in the sandbox: a host workspace "
                             "directory ('%s') cannot be used",
                             spec->workspace);
    if (spec->id && spec->id[0] && !valid_name(spec->id))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "'%s' is not a vercel sandbox name (letters, digits, '-' and '_', "
                             "at most %d)",
                             spec->id, SBX__VERCEL_NAME_MAX);
    return check_manifest(spec->manifest, err);
}

static int vc_create(struct sbx_client *bc, const struct sbx_create_spec *spec,
                     struct sbx_session **out, struct sbx_error *err)
{
    struct vc_client *c = (struct vc_client *)bc;
    const struct sbx_manifest *m = spec->manifest;
    struct sbx_strv env;
    struct sbx__vercel_session *s = NULL;
    struct sbx_snapshot_store *store = NULL;
    json_t *ans = NULL;
    char *snap_ref = NULL;
    int rc;
    sbx_strv_init(&env);
    if ((rc = check_create(spec, err)) < 0)
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
    if ((rc = create_sandbox(c, spec->id && spec->id[0] ? spec->id : NULL, root, &env, &ans, err)) <
        0)
        goto out;
    s = session_new(c, ans);
    if ((rc = fill_sandbox(s, spec, store, snap_ref, err)) < 0)
        goto out;
    *out = &s->base;
    s = NULL;
out:
    if (rc < 0) {
        struct sbx_error ignored = SBX_ERROR_INIT;
        const char *made =
                json_string_value(json_object_get(json_object_get(ans, "sandbox"), "name"));
        if (made && valid_name(made))
            (void)delete_sandbox(c->conf, made, &ignored);
        sbx_error_prefix(err, "cannot create sandbox");
    }
    sess_free(s ? &s->base : NULL);
    json_decref(ans);
    sbx_strv_release(&env);
    free(snap_ref);
    sbx_snapshot_store_free(store);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * List, remove, stop, start, resume */

static json_t *listed_state(struct vc_client *c, const json_t *sandbox)
{
    const char *name = json_string_value(json_object_get(sandbox, "name"));
    if (!name || !valid_name(name))
        return NULL;
    json_t *ans =
            json_pack("{s:O,s:{s:s},s:[]}", "sandbox", sandbox, "session", "id",
                      json_string_value(json_object_get(sandbox, "currentSessionId"))
                              ? json_string_value(json_object_get(sandbox, "currentSessionId"))
                              : "",
                      "routes");
    struct sbx__vercel_session *s = session_new(c, ans);
    json_t *st = json_deep_copy(s->state);
    const char *status = json_string_value(json_object_get(sandbox, "status"));
    if (status && strcmp(status, "running") != 0 && strcmp(status, "pending") != 0)
        sbx_json_set(st, "status", sbx_json_str("stopped"));
    sess_free(&s->base);
    json_decref(ans);
    return st;
}

static int vc_list(struct sbx_client *bc, json_t **out, struct sbx_error *err)
{
    struct vc_client *c = (struct vc_client *)bc;
    json_t *res = json_array(), *page = NULL, *v;
    size_t i;
    /* Only the sandboxes sbx made: the tag sbx.managed=1. */
    int rc = sbx__vercel_api(c->conf, "GET", "/v2/sandboxes", 1, NULL, &page, NULL, err);
    const json_t *list = json_object_get(page, "sandboxes");
    if (rc == 0 && !json_is_array(list))
        rc = sbx_error_set(err, SBX_E_API, 0, "the Vercel API's sandbox list is not a list");
    json_array_foreach(list, i, v)
    {
        const char *managed =
                json_string_value(json_object_get(json_object_get(v, "tags"), MANAGED));
        json_t *st = managed && strcmp(managed, "1") == 0 ? listed_state(c, v) : NULL;
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

static int vc_remove(struct sbx_client *bc, const char *id, int keep_workspace,
                     struct sbx_error *err)
{
    struct vc_client *c = (struct vc_client *)bc;
    if (keep_workspace)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "a vercel sandbox's workspace is in the sandbox: it goes with it");
    if (!valid_name(id))
        return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a vercel sandbox name", id);
    return delete_sandbox(c->conf, id, err);
}

static int vc_stop(struct sbx_client *bc, const char *id, char **out_ref, struct sbx_error *err)
{
    struct vc_client *c = (struct vc_client *)bc;
    json_t *ans = NULL;
    int rc = get_sandbox(c, id, 0, &ans, err);
    const char *status = rc == 0 ? session_status(ans) : "";
    if (rc == 0 && strcmp(status, "running") != 0)
        rc = sbx_error_set(err, SBX_E_EXISTS, 0, "sandbox '%s' is already stopped (%s)", id,
                           status);
    /* The sandbox keeps its disk at the service: no snapshot of sbx's is taken. How it keeps
     * it is what it was made with (its tags), whatever this client's default. */
    const json_t *sb = json_object_get(ans, "sandbox");
    const char *how =
            json_string_value(json_object_get(json_object_get(sb, "tags"), TAG_PERSISTENCE));
    const char *sid = json_string_value(json_object_get(json_object_get(ans, "session"), "id"));
    if (rc == 0)
        rc = stop_session(c->conf, id, sid, strcmp(how ? how : c->persistence, "snapshot") == 0,
                          c->snapshot_expiration_ms, err);
    json_decref(ans);
    if (rc == 0 && out_ref)
        *out_ref = NULL;
    return rc;
}

static int vc_start(struct sbx_client *bc, const char *id, const struct sbx_resume_opts *opts,
                    struct sbx_session **out, struct sbx_error *err)
{
    struct vc_client *c = (struct vc_client *)bc;
    json_t *ans = NULL;
    (void)opts;
    int rc = get_sandbox(c, id, 1, &ans, err);
    if (rc == 0)
        rc = wait_running(c, &ans, err);
    if (rc == 0)
        *out = &session_new(c, ans)->base;
    json_decref(ans);
    return rc;
}

static int vc_stopped_state(struct sbx_client *bc, const char *id, json_t **out,
                            struct sbx_error *err)
{
    struct vc_client *c = (struct vc_client *)bc;
    json_t *ans = NULL;
    int rc = get_sandbox(c, id, 0, &ans, err);
    const char *status = rc == 0 ? session_status(ans) : "";
    if (rc == 0 && strcmp(status, "stopped") != 0)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "sandbox '%s' is not stopped", id);
    if (rc == 0 && !(*out = listed_state(c, json_object_get(ans, "sandbox"))))
        rc = sbx_error_set(err, SBX_E_API, 0, "the Vercel API described '%s' oddly", id);
    json_decref(ans);
    return rc;
}

static int vc_resume(struct sbx_client *bc, const json_t *state, const struct sbx_resume_opts *opts,
                     struct sbx_session **out, struct sbx_error *err)
{
    const char *id = json_string_value(json_object_get(state, "id"));
    const char *snap = json_string_value(json_object_get(state, "snapshot"));
    struct sbx_session *s = NULL;
    /* A get with resume starts a stopped sandbox (its timeout, or sbx sandbox stop). */
    int rc = vc_start(bc, id, opts, &s, err);
    if (rc == -SBX_E_NOTFOUND && snap)
        return sbx__client_rebuild(bc, state, snap, opts, 0, 0, out, err);
    if (rc == -SBX_E_NOTFOUND)
        return sbx_error_set(err, SBX_E_NOTFOUND, 0,
                             "sandbox '%s' is gone (it expired or was deleted) and its state "
                             "has no snapshot",
                             id);
    if (rc == 0) {
        struct sbx__vercel_session *vs = (struct sbx__vercel_session *)s;
        const json_t *mj = json_object_get(state, "manifest");
        if (json_is_object(mj))
            sbx_json_set(vs->state, "manifest", json_deep_copy(mj));
        if (snap)
            sbx_json_set(vs->state, "snapshot", sbx_json_str(snap));
        *out = s;
    }
    return rc;
}

static void vc_free(struct sbx_client *bc)
{
    struct vc_client *c = (struct vc_client *)bc;
    sbx__vercel_conf_unref(c->conf);
    free(c->runtime);
    free(c->root);
    free(c->persistence);
    free(c->source_snapshot);
    json_decref(c->env);
    free(c);
}

static const struct sbx_client_ops client_ops = {
        .create = vc_create,
        .attach = vc_attach,
        .list = vc_list,
        .remove = vc_remove,
        .resume = vc_resume,
        .stop = vc_stop,
        .start = vc_start,
        .stopped_state = vc_stopped_state,
        .free = vc_free,
};

/* ---------------------------------------------------------------------------------------------
 * The provider */

static char *env_or(const char *opt, const char *var)
{
    if (opt && opt[0])
        return sbx_xstrdup(opt);
    const char *v = getenv(var);
    return v && v[0] ? sbx_xstrdup(v) : NULL;
}

static struct sbx__vercel_conf *conf_new(const struct sbx__vercel_opts *o)
{
    struct sbx__vercel_conf *cf = sbx_xcalloc(1, sizeof(*cf));
    cf->refs = 1;
    pthread_mutex_init(&cf->lock, NULL);
    cf->api_url = env_or(o->api_url, "VERCEL_API_URL");
    if (!cf->api_url)
        cf->api_url = sbx_xstrdup(SBX__VERCEL_API_DEFAULT);
    size_t n = strlen(cf->api_url);
    while (n > 1 && cf->api_url[n - 1] == '/')
        cf->api_url[--n] = '\0';
    cf->team = env_or(o->team, "VERCEL_TEAM_ID");
    cf->project = env_or(o->project, "VERCEL_PROJECT_ID");
    cf->tok_ref =
            o->tok_ref ? json_deep_copy(o->tok_ref) : json_pack("{s:s}", "env", "VERCEL_TOKEN");
    const char *var = json_string_value(json_object_get(cf->tok_ref, "env"));
    const char *file = json_string_value(json_object_get(cf->tok_ref, "file"));
    cf->tok_what = var ? sbx_xasprintf("$%s", var) : sbx_xasprintf("'%s'", file ? file : "?");
    cf->ca_file = o->ca_file ? sbx_xstrdup(o->ca_file) : NULL;
    return cf;
}

static int client_new_json(const json_t *options, struct sbx_client **out, struct sbx_error *err)
{
    struct sbx__vercel_opts o;
    int rc = sbx__vercel_options_parse(options, &o, err);
    if (rc < 0) {
        sbx__vercel_opts_release(&o);
        return rc;
    }
    struct vc_client *c = sbx_xcalloc(1, sizeof(*c));
    c->base.ops = &client_ops;
    c->base.provider = "vercel";
    c->conf = conf_new(&o);
    c->runtime = o.runtime ? sbx_xstrdup(o.runtime) : NULL;
    c->root = sbx_xstrdup(o.root ? o.root : SBX__VERCEL_ROOT);
    c->persistence = sbx_xstrdup(o.persistence ? o.persistence : "tar");
    c->source_snapshot = o.source_snapshot ? sbx_xstrdup(o.source_snapshot) : NULL;
    c->timeout_ms = o.timeout_ms ? o.timeout_ms : DEFAULT_TIMEOUT_MS;
    c->vcpus = o.vcpus;
    c->snapshot_expiration_ms = o.snapshot_expiration_ms;
    c->env = o.env;
    memcpy(c->ports, o.ports, sizeof(c->ports));
    c->n_ports = o.n_ports;
    *out = &c->base;
    return 0;
}

/* The vercel-specific part of a session state. */
static int check_state(const json_t *st, struct sbx_error *err)
{
    int rc = sbx__state_check_id_root(st, valid_name, "a vercel sandbox name", err);
    if (rc < 0)
        return rc;
    const json_t *routes = json_object_get(st, "routes");
    const char *k;
    json_t *v;
    if (routes && !json_is_object(routes))
        return sbx_error_set(err, SBX_E_INVAL, 0, "field 'routes' must be an object");
    json_object_foreach((json_t *)routes, k, v)
    {
        if (!json_is_string(v))
            return sbx_error_set(err, SBX_E_INVAL, 0, "field 'routes': port '%s' must have a URL",
                                 k);
    }
    return 0;
}

const struct sbx__provider_def sbx__provider_vercel = {
        .name = "vercel",
        .summary = "a sandbox (a microVM) at Vercel's hosted service, through its REST "
                   "API (token from $VERCEL_TOKEN, team from $VERCEL_TEAM_ID)",
        .traits = SBX_PROVIDER_SNAPSHOTS | SBX_PROVIDER_STOP_START | SBX_PROVIDER_PORTS |
                  SBX_PROVIDER_RESUME,
        .options = sbx__vercel_options,
        .client_new_json = client_new_json,
        .options_check = sbx__vercel_options_check,
        .check_state = check_state,
};
