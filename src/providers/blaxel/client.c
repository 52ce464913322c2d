/* The blaxel provider: sandboxes at Blaxel's service (or anything speaking its API), created
 * through POST /sandboxes of the control plane and reached through each sandbox's own API
 * (processes, filesystem). The service is the only record: a sandbox's id is its Blaxel name,
 * and what a later process needs (the workspace root) is in the sandbox's environment
 * (SBX_ROOT), its making by sbx in a label (sbx-managed). Ports are previews. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "providers/blaxel/blaxel.h"
#include "sandbox/session/internal.h"
#include "sandbox/wire/http.h"
#include "sbx/hash.h"
#include "sbx/json.h"
#include "sbx/manifest.h"
#include "sbx/snapshot.h"
#include "sbx/strv.h"
#include "sbx/time.h"

#define ENV_ROOT       "SBX_ROOT"
#define LABEL_MANAGED  "sbx-managed"
#define DEPLOY_WAIT_MS ((int64_t)300 * 1000)
#define DEPLOY_POLL_MS 500
#define TCP_TABLE_MAX  ((size_t)16 << 20)

struct bl_client {
    struct sbx_client base;
    struct sbx__bl_conf *conf;
    char *image, *region, *ttl, *name;
    long long memory_mb; /* 0: the service's */
    int pause_on_exit, port_public;
    long long token_ttl_s;
    json_t *env_vars, *labels, *ports;
};

/* ---------------------------------------------------------------------------------------------
 * Files through the shared script (src/sandbox/shellfs/) */

static int run_cb(void *ctx, const char *const *argv, struct sbx__shell_run *out,
                  struct sbx_error *err)
{
    struct sbx__bl_session *s = ctx;
    return sbx__bl_run(s->conf, s->base.id, argv, out, err);
}

static int get_cb(void *ctx, const char *abs, int fd, uint64_t max, struct sbx_error *err)
{
    struct sbx__bl_session *s = ctx;
    return sbx__bl_file_get(s->conf, s->base.id, abs, fd, max, err);
}

static int put_cb(void *ctx, const char *abs, int fd, uint64_t size, struct sbx_error *err)
{
    struct sbx__bl_session *s = ctx;
    return sbx__bl_file_put(s->conf, s->base.id, abs, fd, size, err);
}

static const struct sbx__shellfs_ops FS_OPS = {.run = run_cb, .get = get_cb, .put = put_cb};

struct sbx__shellfs sbx__bl_fs(struct sbx__bl_session *s)
{
    return (struct sbx__shellfs){.ops = &FS_OPS, .ctx = s, .root = s->base.root, .copy = &s->ws};
}

/* ---------------------------------------------------------------------------------------------
 * Ports: previews */

/* The preview of port (made when the sandbox has none yet): its URL into *out. */
static int preview_url(struct sbx__bl_session *s, int port, char **out, struct sbx_error *err)
{
    const json_t *opts = json_object_get(s->state, "options");
    int pub = !json_is_false(json_object_get(opts, "exposed_port_public"));
    const json_t *ttl = json_object_get(opts, "exposed_port_url_ttl_s");
    char *path = sbx_xasprintf("/sandboxes/%s/previews/sbx-port-%d", s->base.id, port);
    json_t *pv = NULL, *tok = NULL;
    int rc = sbx__bl_api(s->conf, "GET", path, NULL, &pv, err);
    if (rc == -SBX_E_NOTFOUND) {
        char *cpath = sbx_xasprintf("/sandboxes/%s/previews", s->base.id);
        char pname[32];
        snprintf(pname, sizeof(pname), "sbx-port-%d", port);
        json_t *body = json_pack("{s:{s:s},s:{s:i,s:b}}", "metadata", "name", pname, "spec", "port",
                                 port, "public", pub);
        rc = sbx__bl_api(s->conf, "POST", cpath, body, &pv, err);
        json_decref(body);
        free(cpath);
    }
    const json_t *spec = json_object_get(pv, "spec");
    const char *url = json_string_value(json_object_get(spec, "url"));
    if (rc == 0 && (!url || (strncmp(url, "https://", 8) != 0 && strncmp(url, "http://", 7) != 0)))
        rc = sbx_error_set(err, SBX_E_API, 0, "the Blaxel API gave the preview of port %d no URL",
                           port);
    if (rc == 0 && json_is_false(json_object_get(spec, "public"))) {
        char expires[SBX_TIME_RFC3339_LEN];
        long long secs = json_is_integer(ttl) ? (long long)json_integer_value(ttl) : 3600;
        sbx_time_rfc3339(sbx_time_real_ns() + secs * 1000000000ll, expires);
        char *tpath = sbx_xasprintf("%s/tokens", path);
        json_t *body = json_pack("{s:{s:s},s:{s:s}}", "metadata", "name", "sbx", "spec",
                                 "expiresAt", expires);
        rc = sbx__bl_api(s->conf, "POST", tpath, body, &tok, err);
        json_decref(body);
        free(tpath);
        const char *t = json_string_value(json_object_get(json_object_get(tok, "spec"), "token"));
        if (rc == 0 && !t)
            rc = sbx_error_set(err, SBX_E_API, 0, "the Blaxel API gave no preview token");
        if (rc == 0) {
            char *esc = sbx__http_escape(t, 0);
            *out = sbx_xasprintf("%s%sbl_preview_token=%s", url, strchr(url, '?') ? "&" : "?", esc);
            free(esc);
        }
    } else if (rc == 0) {
        *out = sbx_xstrdup(url);
    }
    json_decref(pv);
    json_decref(tok);
    free(path);
    return rc;
}

static int s_resolve_port(struct sbx_session *bs, int port, char **out_url, struct sbx_error *err)
{
    struct sbx__bl_session *s = (struct sbx__bl_session *)bs;
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
    /* cat fails without IPv6 (no tcp6) after printing tcp: the text decides. */
    int rc = sbx__bl_run(s->conf, bs->id, argv, &r, err);
    if (rc == 0 && !sbx__net_table_listens(r.out.data ? r.out.data : "", r.out.len, port))
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "nothing listens on port %d in sandbox '%s'",
                           port, bs->id);
    sbx__shell_run_release(&r);
    return rc < 0 ? rc : preview_url(s, port, out_url, err);
}

/* ---------------------------------------------------------------------------------------------
 * Stats: the sandbox is a VM of its own, so its /proc tells what it uses */

/* One command's text: the first line of /proc/stat, the memory lines, the count of processes,
 * the clock ticks per second and the workspace's kilobytes (du), in that order. */
static const char USAGE[] = "head -n 1 /proc/stat\n"
                            "grep -E '^(MemTotal|MemAvailable):' /proc/meminfo\n"
                            "ls -d /proc/[0-9]* | wc -l\n"
                            "getconf CLK_TCK 2>/dev/null || echo 100\n"
                            "du -sk -- \"$1\" 2>/dev/null || echo x\n";

static void parse_usage(const char *t, struct sbx_session_stats *out)
{
    unsigned long long cpu = 0, v[10] = {0}, mt = 0, ma = 0, n[3] = {0};
    int have_cpu = 0, nn = 0;
    for (const char *l = t; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (strncmp(l, "cpu ", 4) == 0) {
            have_cpu = sscanf(l + 4, "%llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
                              &v[3], &v[4], &v[5], &v[6], &v[7]) >= 4;
            /* all but idle (v[3]) and iowait (v[4]) */
            cpu = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
        } else if (sscanf(l, "MemTotal: %llu", &mt) == 1 ||
                   sscanf(l, "MemAvailable: %llu", &ma) == 1) {
            continue;
        } else if (nn < 3 && l[0] >= '0' && l[0] <= '9' && sscanf(l, "%llu", &n[nn]) == 1) {
            nn++;
        }
    }
    if (have_cpu && nn >= 2 && n[1] > 0)
        out->cpu_ns = cpu / n[1] * 1000000000ull + cpu % n[1] * 1000000000ull / n[1];
    if (mt && ma <= mt) {
        out->memory = (mt - ma) * 1024;
        out->memory_limit = mt * 1024;
    }
    if (nn >= 1)
        out->pids = n[0];
    if (nn >= 3)
        out->disk = n[2] * 1024;
}

static int s_stats(struct sbx_session *bs, struct sbx_session_stats *out, struct sbx_error *err)
{
    struct sbx__bl_session *s = (struct sbx__bl_session *)bs;
    const char *argv[] = {"sh", "-c", USAGE, "sbx", bs->root, NULL};
    struct sbx__shell_run r;
    sbx__shell_run_init(&r, 8192);
    int rc = sbx__bl_run(s->conf, bs->id, argv, &r, err);
    if (rc == 0 && (r.code != 0 || !r.out.data))
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "cannot read what sandbox '%s' uses", bs->id);
    if (rc == 0)
        parse_usage(r.out.data, out);
    sbx__shell_run_release(&r);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Sessions */

static int s_state(struct sbx_session *bs, json_t **out, struct sbx_error *err)
{
    (void)err;
    *out = json_deep_copy(((struct sbx__bl_session *)bs)->state);
    return 0;
}

static int delete_sandbox(struct sbx__bl_conf *c, const char *name, struct sbx_error *err)
{
    char *path = sbx_xasprintf("/sandboxes/%s", name);
    int rc = sbx__bl_api(c, "DELETE", path, NULL, NULL, err);
    free(path);
    if (rc == -SBX_E_NOTFOUND)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "no sandbox '%s' at Blaxel", name);
    return rc;
}

static int s_close(struct sbx_session *bs, int delete_workspace, struct sbx_error *err)
{
    struct sbx__bl_session *s = (struct sbx__bl_session *)bs;
    int keep =
            !json_is_false(json_object_get(json_object_get(s->state, "options"), "pause_on_exit"));
    /* A kept sandbox goes on standby at the service by itself when idle. */
    if (delete_workspace || !keep)
        return delete_sandbox(s->conf, bs->id, err);
    return 0;
}

static int s_record_snapshot(struct sbx_session *bs, const char *ref, struct sbx_error *err)
{
    (void)err;
    sbx_json_set(((struct sbx__bl_session *)bs)->state, "snapshot", sbx_json_str(ref));
    return 0;
}

static void s_free(struct sbx_session *bs)
{
    struct sbx__bl_session *s = (struct sbx__bl_session *)bs;
    if (!s)
        return;
    sbx__shellfs_copy_drop(&s->ws);
    sbx_session_release_base(&s->base);
    sbx__bl_conf_unref(s->conf);
    json_decref(s->state);
    free(s);
}

static void shellfs_of(struct sbx_session *bs, struct sbx__shellfs *out)
{
    *out = sbx__bl_fs((struct sbx__bl_session *)bs);
}

static const struct sbx_session_ops session_ops = {
        .shellfs = shellfs_of,
        .exec_start = sbx__bl_exec_start,
        SBX__SHELLFS_SESSION_FILE_OPS,
        .resolve_port = s_resolve_port,
        .state = s_state,
        .close = s_close,
        .workspace_fd = sbx__shellfs_s_workspace_fd,
        .record_snapshot = s_record_snapshot,
        .stats = s_stats,
        .free = s_free,
};

static json_t *str_or_null(const char *s)
{
    return s ? sbx_json_str(s) : json_null();
}

static json_t *options_json(const struct bl_client *c)
{
    json_t *o = json_object();
    sbx_json_set(o, "image", str_or_null(c->image));
    sbx_json_set(o, "memory_mb", c->memory_mb ? json_integer(c->memory_mb) : json_null());
    sbx_json_set(o, "region", str_or_null(c->region));
    sbx_json_set(o, "ttl", str_or_null(c->ttl));
    sbx_json_set(o, "pause_on_exit", json_boolean(c->pause_on_exit));
    sbx_json_set(o, "exposed_port_public", json_boolean(c->port_public));
    sbx_json_set(o, "exposed_port_url_ttl_s", json_integer(c->token_ttl_s));
    return o;
}

/* The value of environment variable var in the sandbox's description sb, or NULL. */
static const char *env_of(const json_t *sb, const char *var)
{
    const json_t *envs =
            json_object_get(json_object_get(json_object_get(sb, "spec"), "runtime"), "envs");
    size_t i;
    json_t *e;
    json_array_foreach(envs, i, e)
    {
        const char *n = json_string_value(json_object_get(e, "name"));
        if (n && strcmp(n, var) == 0)
            return json_string_value(json_object_get(e, "value"));
    }
    return NULL;
}

/* A session on the sandbox the service described as sb. */
static struct sbx__bl_session *session_new(struct bl_client *c, const json_t *sb)
{
    const json_t *meta = json_object_get(sb, "metadata");
    const char *name = json_string_value(json_object_get(meta, "name"));
    const char *created = json_string_value(json_object_get(meta, "createdAt"));
    const char *root = env_of(sb, ENV_ROOT);
    char stamp[SBX_TIME_RFC3339_LEN];
    if (!created) {
        sbx_time_rfc3339(sbx_time_real_ns(), stamp);
        created = stamp;
    }
    if (!root || root[0] != '/')
        root = SBX__BL_ROOT;
    struct sbx__bl_session *s = sbx_xcalloc(1, sizeof(*s));
    sbx_session_init_base(&s->base, &session_ops, "blaxel", name, root);
    s->conf = sbx__bl_conf_ref(c->conf);
    s->ws = (struct sbx__shellfs_copy)SBX__SHELLFS_COPY_INIT;
    json_t *st = json_object();
    sbx_json_set(st, "version", json_integer(SBX_SESSION_STATE_VERSION));
    sbx_json_set(st, "provider", sbx_json_str("blaxel"));
    sbx_json_set(st, "id", sbx_json_str(name));
    sbx_json_set(st, "created", sbx_json_str(created));
    sbx_json_set(st, "root", sbx_json_str(root));
    sbx_json_set(st, "workspace_owned", json_true());
    sbx_json_set(st, "options", options_json(c));
    sbx_json_set(st, "exposed_ports", json_deep_copy(c->ports));
    sbx_json_set(st, "manifest", json_null());
    sbx_json_set(st, "snapshot", json_null());
    s->state = st;
    return s;
}

static const char *status_of(const json_t *sb)
{
    const char *s = json_string_value(json_object_get(sb, "status"));
    return s ? s : "";
}

static int gone_status(const char *st)
{
    static const char *const gone[] = {"FAILED",       "TERMINATED",  "TERMINATING", "DELETING",
                                       "DEACTIVATING", "DEACTIVATED", NULL};
    for (const char *const *g = gone; *g; g++)
        if (strcmp(st, *g) == 0)
            return 1;
    return 0;
}

/* GET /sandboxes/{name}: *sb (caller owns); a sandbox gone or going is SBX_E_NOTFOUND. */
static int sandbox_get(struct bl_client *c, const char *name, json_t **sb, struct sbx_error *err)
{
    if (!sbx__bl_valid_name(name))
        return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a Blaxel sandbox name", name);
    char *path = sbx_xasprintf("/sandboxes/%s", name);
    int rc = sbx__bl_api(c->conf, "GET", path, NULL, sb, err);
    free(path);
    if (rc == -SBX_E_NOTFOUND)
        return sbx_error_set(err, SBX_E_NOTFOUND, 0,
                             "no sandbox '%s' at Blaxel (it expired or was deleted)", name);
    if (rc == 0 && !json_is_object(*sb)) {
        json_decref(*sb);
        return sbx_error_set(err, SBX_E_API, 0, "the Blaxel API described sandbox '%s' oddly",
                             name);
    }
    if (rc == 0 && gone_status(status_of(*sb))) {
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "sandbox '%s' is gone at Blaxel (%s)", name,
                           status_of(*sb));
        json_decref(*sb);
    }
    return rc;
}

/* Until sandbox name is DEPLOYED (at most DEPLOY_WAIT_MS). */
static int await_deployed(struct bl_client *c, const char *name, struct sbx_error *err)
{
    int64_t deadline = sbx_deadline_after_ms(DEPLOY_WAIT_MS);
    for (;;) {
        json_t *sb = NULL;
        int rc = sandbox_get(c, name, &sb, err);
        int up = rc == 0 && strcmp(status_of(sb), "DEPLOYED") == 0;
        json_decref(sb);
        if (rc < 0 || up)
            return rc;
        if (sbx_deadline_poll_ms(deadline) == 0)
            return sbx_error_set(err, SBX_E_TIMEOUT, 0, "sandbox '%s' was not deployed in time",
                                 name);
        sbx_sleep_ms(DEPLOY_POLL_MS);
    }
}

static int c_attach(struct sbx_client *bc, const char *id, struct sbx_session **out,
                    struct sbx_error *err)
{
    struct bl_client *c = (struct bl_client *)bc;
    json_t *sb = NULL;
    int rc = sandbox_get(c, id, &sb, err);
    if (rc == 0)
        *out = &session_new(c, sb)->base;
    json_decref(sb);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Create */

static json_t *env_entry(const char *k, const char *v)
{
    return json_pack("{s:s,s:s}", "name", k, "value", v);
}

static json_t *create_body(const struct bl_client *c, const char *name, const char *root,
                           const struct sbx_strv *env)
{
    json_t *envs = json_array(), *labels = json_deep_copy(c->labels);
    const char *k;
    json_t *v;
    json_object_foreach(c->env_vars, k, v)
            sbx_json_append(envs, env_entry(k, json_string_value(v)));
    for (size_t i = 0; i < env->n; i++) {
        const char *eq = strchr(env->v[i], '=');
        char *key = sbx_xstrndup(env->v[i], (size_t)(eq - env->v[i]));
        sbx_json_append(envs, env_entry(key, eq + 1));
        free(key);
    }
    sbx_json_append(envs, env_entry(ENV_ROOT, root));
    sbx_json_set(labels, LABEL_MANAGED, sbx_json_str("1"));
    json_t *runtime = json_pack("{s:s,s:o}", "image",
                                c->image ? c->image : "blaxel/base-image:latest", "envs", envs);
    /* The sandbox generation Blaxel's own client always asks for. */
    sbx_json_set(runtime, "generation", sbx_json_str("mk3"));
    if (c->memory_mb)
        sbx_json_set(runtime, "memory", json_integer(c->memory_mb));
    if (c->ttl)
        sbx_json_set(runtime, "ttl", sbx_json_str(c->ttl));
    json_t *spec = json_pack("{s:o}", "runtime", runtime);
    if (c->region)
        sbx_json_set(spec, "region", sbx_json_str(c->region));
    return json_pack("{s:{s:s,s:o},s:o}", "metadata", "name", name, "labels", labels, "spec", spec);
}

static void wipe_envs(json_t *body)
{
    const json_t *envs =
            json_object_get(json_object_get(json_object_get(body, "spec"), "runtime"), "envs");
    size_t i;
    json_t *e;
    json_array_foreach(envs, i, e)
    {
        const json_t *v = json_object_get(e, "value");
        explicit_bzero((char *)json_string_value(v), json_string_length(v));
    }
}

static int create_sandbox(struct bl_client *c, const char *name, const char *root,
                          struct sbx_strv *env, struct sbx__bl_session **out, struct sbx_error *err)
{
    json_t *body = create_body(c, name, root, env), *ans = NULL;
    int rc = sbx__bl_api(c->conf, "POST", "/sandboxes", body, &ans, err);
    for (size_t i = 0; i < env->n; i++)
        explicit_bzero(env->v[i], strlen(env->v[i]));
    wipe_envs(body);
    if (rc == -SBX_E_NOTFOUND || rc == -SBX_E_INVAL)
        rc = sbx_error_set(err, rc == -SBX_E_NOTFOUND ? SBX_E_NOTFOUND : SBX_E_INVAL, 0,
                           "Blaxel refused to make sandbox '%s' from image '%s' (the blaxel "
                           "provider's image option): %s",
                           name, c->image ? c->image : "blaxel/base-image:latest", err->msg);
    else if (rc == -SBX_E_EXISTS)
        rc = sbx_error_set(err, SBX_E_EXISTS, 0, "a sandbox named '%s' exists at Blaxel", name);
    if (rc == 0 && strcmp(status_of(ans), "DEPLOYED") != 0 &&
        (rc = await_deployed(c, name, err)) < 0) {
        struct sbx_error ignored = SBX_ERROR_INIT;
        (void)delete_sandbox(c->conf, name, &ignored);
    }
    if (rc == 0) {
        /* What was asked for, whatever the answer shows of it. */
        json_object_set(ans, "spec", json_object_get(body, "spec"));
        json_object_set(ans, "metadata", json_object_get(body, "metadata"));
        *out = session_new(c, ans);
    }
    json_decref(body);
    json_decref(ans);
    return rc;
}

static int check_spec(const struct sbx_create_spec *spec, struct sbx_error *err)
{
    if (spec->workspace)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "a blaxel sandbox's workspace is in the sandbox: a host workspace "
                             "directory ('%s') cannot be used",
                             spec->workspace);
    if (spec->id && spec->id[0] && !sbx__bl_valid_name(spec->id))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "'%s' is not a Blaxel sandbox name (lowercase letters, digits and "
                             "'-', starting with a letter)",
                             spec->id);
    return sbx__shellfs_check_accounts(spec->manifest, "a blaxel sandbox", NULL, err);
}

static int sandbox_name(const struct bl_client *c, const struct sbx_create_spec *spec, char **out,
                        struct sbx_error *err)
{
    if (spec->id && spec->id[0]) {
        *out = sbx_xstrdup(spec->id);
        return 0;
    }
    if (c->name) {
        *out = sbx_xstrdup(c->name);
        return 0;
    }
    char hex[13];
    int rc = sbx_random_hex(hex, 6, err);
    if (rc == 0)
        *out = sbx_xasprintf("sbx-%s", hex);
    return rc;
}

static int c_create(struct sbx_client *bc, const struct sbx_create_spec *spec,
                    struct sbx_session **out, struct sbx_error *err)
{
    struct bl_client *c = (struct bl_client *)bc;
    const struct sbx_manifest *m = spec->manifest;
    struct sbx_strv env;
    struct sbx__bl_session *s = NULL;
    struct sbx_snapshot_store *store = NULL;
    char *snap_ref = NULL, *name = NULL;
    int rc;
    sbx_strv_init(&env);
    if ((rc = check_spec(spec, err)) < 0 || (rc = sandbox_name(c, spec, &name, err)) < 0)
        goto out;
    if (spec->snapshot &&
        ((rc = sbx_snapshot_store_open(NULL, &store, err)) < 0 ||
         (rc = sbx_snapshot_resolve(store, spec->snapshot, NULL, &snap_ref, err)) < 0))
        goto out;
    if (m && (rc = sbx_manifest_env_resolve(m, spec->pass_secrets, &env, err)) < 0)
        goto out;
    const char *root = m ? sbx_manifest_root(m) : SBX__BL_ROOT;
    if ((rc = create_sandbox(c, name, root, &env, &s, err)) < 0)
        goto out;
    struct sbx__shellfs fs = sbx__bl_fs(s);
    if ((rc = sbx__shellfs_make_root(&fs, err)) < 0 ||
        (rc = sbx__shellfs_fill(&fs, &s->base, s->state, spec, store, snap_ref, err)) < 0)
        goto out;
    *out = &s->base;
    s = NULL;
out:
    if (rc < 0) {
        struct sbx_error ignored = SBX_ERROR_INIT;
        if (s)
            (void)delete_sandbox(c->conf, s->base.id, &ignored);
        sbx_error_prefix(err, "cannot create sandbox");
    }
    s_free(s ? &s->base : NULL);
    sbx_strv_release(&env);
    free(snap_ref);
    free(name);
    sbx_snapshot_store_free(store);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Remove, resume, list */

static int c_remove(struct sbx_client *bc, const char *id, int keep_workspace,
                    struct sbx_error *err)
{
    struct bl_client *c = (struct bl_client *)bc;
    if (keep_workspace)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "a blaxel sandbox's workspace is in the sandbox: it goes with it");
    if (!sbx__bl_valid_name(id))
        return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a Blaxel sandbox name", id);
    return delete_sandbox(c->conf, id, err);
}

static int c_resume(struct sbx_client *bc, const json_t *state, const struct sbx_resume_opts *opts,
                    struct sbx_session **out, struct sbx_error *err)
{
    const char *id = json_string_value(json_object_get(state, "id"));
    const char *snap = json_string_value(json_object_get(state, "snapshot"));
    struct sbx_session *bs = NULL;
    int rc = c_attach(bc, id, &bs, err);
    if (rc == -SBX_E_NOTFOUND && snap)
        return sbx__client_rebuild(bc, state, snap, opts, 0, 0, out, err);
    if (rc == -SBX_E_NOTFOUND)
        return sbx_error_set(err, SBX_E_NOTFOUND, 0,
                             "sandbox '%s' is gone (it expired or was deleted) and its state has "
                             "no snapshot",
                             id);
    if (rc == 0) {
        struct sbx__bl_session *s = (struct sbx__bl_session *)bs;
        const json_t *mj = json_object_get(state, "manifest");
        if (json_is_object(mj))
            sbx_json_set(s->state, "manifest", json_deep_copy(mj));
        if (snap)
            sbx_json_set(s->state, "snapshot", sbx_json_str(snap));
        *out = bs;
    }
    return rc;
}

static int c_list(struct sbx_client *bc, json_t **out, struct sbx_error *err)
{
    struct bl_client *c = (struct bl_client *)bc;
    json_t *ans = NULL, *res = json_array(), *v;
    int rc = sbx__bl_api(c->conf, "GET", "/sandboxes", NULL, &ans, err);
    const json_t *items = json_is_array(ans) ? ans : json_object_get(ans, "data");
    if (rc == 0 && !json_is_array(items))
        rc = sbx_error_set(err, SBX_E_API, 0, "the Blaxel API's sandbox list is not a list");
    size_t i;
    json_array_foreach(items, i, v)
    {
        const json_t *meta = json_object_get(v, "metadata");
        const char *managed =
                json_string_value(json_object_get(json_object_get(meta, "labels"), LABEL_MANAGED));
        const char *name = json_string_value(json_object_get(meta, "name"));
        if (!managed || strcmp(managed, "1") != 0 || !sbx__bl_valid_name(name) ||
            gone_status(status_of(v)))
            continue;
        struct sbx__bl_session *s = session_new(c, v);
        sbx_json_append(res, json_deep_copy(s->state));
        s_free(&s->base);
    }
    json_decref(ans);
    if (rc < 0) {
        json_decref(res);
        return rc;
    }
    *out = res;
    return 0;
}

static void c_free(struct sbx_client *bc)
{
    struct bl_client *c = (struct bl_client *)bc;
    sbx__bl_conf_unref(c->conf);
    free(c->image);
    free(c->region);
    free(c->ttl);
    free(c->name);
    json_decref(c->env_vars);
    json_decref(c->labels);
    json_decref(c->ports);
    free(c);
}

static const struct sbx_client_ops client_ops = {
        .create = c_create,
        .attach = c_attach,
        .list = c_list,
        .remove = c_remove,
        .resume = c_resume,
        .free = c_free,
};

/* ---------------------------------------------------------------------------------------------
 * The provider */

static char *dup_opt(const json_t *o, const char *key)
{
    const char *v = json_string_value(json_object_get(o, key));
    return v && v[0] ? sbx_xstrdup(v) : NULL;
}

static int client_new_json(const json_t *o, struct sbx_client **out, struct sbx_error *err)
{
    struct sbx__bl_conf *conf = NULL;
    int rc = sbx__bl_check_options(o, err);
    if (rc < 0 || (rc = sbx__bl_conf_new(o, &conf, err)) < 0)
        return rc;
    struct bl_client *c = sbx_xcalloc(1, sizeof(*c));
    c->base.ops = &client_ops;
    c->base.provider = "blaxel";
    c->conf = conf;
    c->image = dup_opt(o, "image");
    c->region = dup_opt(o, "region");
    if (!c->region && getenv("BL_REGION") && getenv("BL_REGION")[0])
        c->region = sbx_xstrdup(getenv("BL_REGION"));
    c->ttl = dup_opt(o, "ttl");
    c->name = dup_opt(o, "name");
    const json_t *mem = json_object_get(o, "memory");
    c->memory_mb = mem ? (long long)(json_integer_value(mem) >> 20) : 0;
    c->pause_on_exit = !json_is_false(json_object_get(o, "pause_on_exit"));
    c->port_public = !json_is_false(json_object_get(o, "exposed_port_public"));
    const json_t *ttl = json_object_get(o, "exposed_port_url_ttl_s");
    c->token_ttl_s = ttl ? (long long)json_integer_value(ttl) : 3600;
    (void)sbx__option_pairs(json_object_get(o, "env_vars"), "env_vars", &c->env_vars, err);
    (void)sbx__option_pairs(json_object_get(o, "labels"), "labels", &c->labels, err);
    const json_t *ports = json_object_get(o, "exposed_ports");
    c->ports = json_is_array(ports) ? json_deep_copy(ports) : json_array();
    *out = &c->base;
    return 0;
}

static int check_state(const json_t *st, struct sbx_error *err)
{
    return sbx__state_check_id_root(st, sbx__bl_valid_name, "a Blaxel sandbox name", err);
}

const struct sbx__provider_def sbx__provider_blaxel = {
        .name = "blaxel",
        .summary = "a sandbox (a microVM) at Blaxel's hosted service, through its REST APIs (key "
                   "from $BL_API_KEY, workspace from $BL_WORKSPACE)",
        .traits = SBX_PROVIDER_SNAPSHOTS | SBX_PROVIDER_PORTS | SBX_PROVIDER_RESUME |
                  SBX_PROVIDER_STATS,
        .options = sbx__bl_options,
        .client_new_json = client_new_json,
        .options_check = sbx__bl_check_options,
        .check_state = check_state,
};
