/* The runloop provider: sandboxes are devboxes at Runloop's service (or anything speaking its
 * API), created through POST /v1/devboxes and reached through the same API (execute_async,
 * upload_file, download_file). The service is the only record: a sandbox's id is the devbox id,
 * and what a later process needs (the workspace root, the creation time) is in the devbox's
 * metadata. Stop and start are Runloop's suspend and resume. Options are named as the reference
 * SDK's Runloop client names them (blueprint_id, blueprint_name, env_vars, name, metadata,
 * pause_on_exit, exposed_ports). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "providers/runloop/runloop.h"
#include "sandbox/materialize/materialize.h"
#include "sandbox/session/internal.h"
#include "sbx/buf.h"
#include "sbx/json.h"
#include "sbx/manifest.h"
#include "sbx/snapshot.h"
#include "sbx/strv.h"
#include "sbx/time.h"

#define META_ROOT    "sbx.root"
#define META_CREATED "sbx.created"
#define META_PORTS   "sbx.ports"
#define MANAGED      "sbx.managed"
#define WAIT_MS      ((int64_t)300 * 1000)

static const struct sbx_provider_option options[] = {
        {.key = "blueprint_id",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_STATE,
         .arg = "ID",
         .help = "the blueprint (by id) devboxes start from (default the service's)"},
        {.key = "blueprint_name",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_STATE,
         .arg = "NAME",
         .help = "the blueprint (by name) devboxes start from; not with blueprint_id"},
        {.key = "snapshot_id",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_STATE,
         .arg = "ID",
         .help = "a Runloop disk snapshot devboxes start from (the service's own snapshots)"},
        {.key = "name",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_STATE,
         .arg = "NAME",
         .help = "the devbox's name at the service"},
        {.key = "env_vars",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_STATE | SBX_OPTION_LIST,
         .arg = "KEY=VALUE",
         .help = "an environment variable of the devbox, under the manifest's (repeatable)"},
        {.key = "metadata",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_STATE | SBX_OPTION_LIST,
         .arg = "KEY=VALUE",
         .help = "a metadata entry of the devbox at the service (repeatable)"},
        {.key = "keep_alive_time_seconds",
         .type = SBX_OPTION_INTEGER,
         .flags = SBX_OPTION_STATE,
         .arg = "SECONDS",
         .help = "the devbox's life, after which the service shuts it down (the service's "
                 "default: 1 hour; at most 172800)",
         .min = 1,
         .max = 172800},
        {.key = "idle_time_seconds",
         .type = SBX_OPTION_INTEGER,
         .flags = SBX_OPTION_STATE,
         .arg = "SECONDS",
         .help = "idle time after which the service applies on_idle (instead of "
                 "keep_alive_time_seconds)",
         .min = 1,
         .max = 172800},
        {.key = "on_idle",
         .type = SBX_OPTION_CHOICE,
         .flags = SBX_OPTION_STATE,
         .arg = "suspend|shutdown",
         .help = "what the service does with a devbox idle for idle_time_seconds (default "
                 "suspend: it can be started again)"},
        {.key = "resource_size_request",
         .type = SBX_OPTION_CHOICE,
         .flags = SBX_OPTION_STATE,
         .arg = "X_SMALL|SMALL|MEDIUM|LARGE|X_LARGE|XX_LARGE",
         .help = "the devbox's size at the service (default the service's)"},
        {.key = "architecture",
         .type = SBX_OPTION_CHOICE,
         .flags = SBX_OPTION_STATE,
         .arg = "x86_64|arm64",
         .help = "the devbox's architecture (default the service's, x86_64)"},
        {.key = "pause_on_exit",
         .type = SBX_OPTION_BOOL,
         .flags = SBX_OPTION_STATE,
         .help = "closing a session without deleting suspends the devbox (default true: its "
                 "workspace is kept); false shuts it down"},
        {.key = "exposed_ports",
         .type = SBX_OPTION_PORT,
         .flags = SBX_OPTION_STATE | SBX_OPTION_LIST,
         .arg = "N",
         .help = "a port whose tunnel URL resolve_port gives (repeatable; none given: any)"},
        {.key = "api_key",
         .type = SBX_OPTION_SECRET,
         .flags = SBX_OPTION_TRUSTED,
         .arg = "env:VAR|file:/PATH",
         .help = "where the Runloop API key is (default env:RUNLOOP_API_KEY); never the key"},
        {.key = "base_url",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_TRUSTED | SBX_OPTION_LOCATOR,
         .arg = "URL",
         .help = "the Runloop API (default $RUNLOOP_BASE_URL, else https://api.runloop.ai)"},
        {.key = "ca_file",
         .type = SBX_OPTION_PATH,
         .flags = SBX_OPTION_TRUSTED | SBX_OPTION_LOCATOR,
         .arg = "/PATH",
         .help = "a CA bundle to check the service's HTTPS certificate with (default the "
                 "system's)"},
        {.key = NULL},
};

struct rl_client {
    struct sbx_client base;
    struct sbx__rl_conf *conf;
    char *blueprint_id, *blueprint_name, *snapshot_id, *name;
    int pause_on_exit;
    json_t *env_vars, *metadata, *ports;
    json_t *launch; /* launch_parameters, or NULL */
};

/* ---------------------------------------------------------------------------------------------
 * Files through the shared script (src/sandbox/shellfs/) */

static int run_cb(void *ctx, const char *const *argv, struct sbx__shell_run *out,
                  struct sbx_error *err)
{
    struct sbx__rl_session *s = ctx;
    return sbx__rl_run(s->conf, s->base.id, argv, out, err);
}

static int get_cb(void *ctx, const char *abs, int fd, uint64_t max, struct sbx_error *err)
{
    struct sbx__rl_session *s = ctx;
    return sbx__rl_file_get(s->conf, s->base.id, abs, fd, max, err);
}

static int put_cb(void *ctx, const char *abs, int fd, uint64_t size, struct sbx_error *err)
{
    struct sbx__rl_session *s = ctx;
    return sbx__rl_file_put(s->conf, s->base.id, abs, fd, size, err);
}

static const struct sbx__shellfs_ops FS_OPS = {.run = run_cb, .get = get_cb, .put = put_cb};

struct sbx__shellfs sbx__rl_fs(struct sbx__rl_session *s)
{
    return (struct sbx__shellfs){.ops = &FS_OPS, .ctx = s, .root = s->base.root, .copy = &s->ws};
}

/* ---------------------------------------------------------------------------------------------
 * Sessions */

#define TCP_TABLE_MAX ((size_t)16 << 20)

/* The service's domain for tunnel URLs, as Runloop's client makes it: the API's host without
 * its "api." prefix. Caller frees. */
static char *tunnel_domain(const char *url)
{
    const char *h = strstr(url, "://");
    h = h ? h + 3 : url;
    size_t n = strcspn(h, ":/");
    if (n > 4 && strncmp(h, "api.", 4) == 0) {
        h += 4;
        n -= 4;
    }
    return sbx_xstrndup(h, n);
}

/* The devbox's tunnel key, the tunnel enabled first when it has none. */
static int tunnel_key(struct sbx__rl_session *s, char **out, struct sbx_error *err)
{
    char *path = sbx_xasprintf("/v1/devboxes/%s", s->base.id);
    json_t *dv = NULL, *t = NULL;
    int rc = sbx__rl_api(s->conf, "GET", path, NULL, &dv, err);
    free(path);
    const char *key =
            json_string_value(json_object_get(json_object_get(dv, "tunnel"), "tunnel_key"));
    if (rc == 0 && !key) {
        json_t *body = json_pack("{s:s,s:b,s:b}", "auth_mode", "open", "http_keep_alive", 1,
                                 "wake_on_http", 0);
        path = sbx_xasprintf("/v1/devboxes/%s/enable_tunnel", s->base.id);
        rc = sbx__rl_api(s->conf, "POST", path, body, &t, err);
        free(path);
        json_decref(body);
        key = json_string_value(json_object_get(t, "tunnel_key"));
    }
    if (rc == 0 && !sbx__rl_valid_id(key))
        rc = sbx_error_set(err, SBX_E_API, 0, "the Runloop API gave devbox '%s' no tunnel key",
                           s->base.id);
    if (rc == 0)
        *out = sbx_xstrdup(key);
    json_decref(dv);
    json_decref(t);
    return rc;
}

static int s_resolve_port(struct sbx_session *bs, int port, char **out_url, struct sbx_error *err)
{
    struct sbx__rl_session *s = (struct sbx__rl_session *)bs;
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
    int rc = sbx__rl_run(s->conf, bs->id, argv, &r, err);
    if (rc == 0 && !sbx__net_table_listens(r.out.data ? r.out.data : "", r.out.len, port))
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "nothing listens on port %d in sandbox '%s'",
                           port, bs->id);
    sbx__shell_run_release(&r);
    char *key = NULL;
    if (rc == 0 && (rc = tunnel_key(s, &key, err)) == 0) {
        char *domain = tunnel_domain(s->conf->url);
        *out_url = sbx_xasprintf("https://%d-%s.tunnel.%s", port, key, domain);
        free(domain);
    }
    free(key);
    return rc;
}

/* What the devbox uses, read inside it by a fixed script: the devbox is the sandbox, so these
 * are the VM's own figures: CPU time of /proc/stat (all but idle and iowait), memory in use and
 * in all (/proc/meminfo), processes (/proc), and the workspace's size (du). */
static const char STATS[] =
        "root=$1\n"
        "set -- $(sed -n 1p /proc/stat)\n"
        "printf 'cpu %s\\n' \"$((${2:-0} + ${3:-0} + ${4:-0} + ${7:-0} + ${8:-0} + ${9:-0}))\"\n"
        "while read -r k v _; do case $k in\n"
        "MemTotal:) printf 'memtotal %s\\n' \"$v\";; MemAvailable:) printf 'memavail %s\\n' \"$v\";;\n"
        "esac; done < /proc/meminfo\n"
        "n=0; for d in /proc/[0-9]*; do n=$((n + 1)); done; printf 'pids %s\\n' \"$n\"\n"
        "printf 'hz %s\\n' \"$(getconf CLK_TCK 2>/dev/null || echo 100)\"\n"
        "set -- $(du -sk -- \"$root\" 2>/dev/null); printf 'diskkb %s\\n' \"${1:-x}\"\n";

static uint64_t stat_field(const char *text, const char *key)
{
    size_t n = strlen(key);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        if (strncmp(p, key, n) == 0 && p[n] == ' ') {
            char *end = NULL;
            unsigned long long v = strtoull(p + n + 1, &end, 10);
            if (end != p + n + 1 && (*end == '\n' || *end == '\0'))
                return (uint64_t)v;
        }
    }
    return SBX_STAT_UNKNOWN;
}

static int s_stats(struct sbx_session *bs, struct sbx_session_stats *out, struct sbx_error *err)
{
    struct sbx__rl_session *s = (struct sbx__rl_session *)bs;
    const char *argv[] = {"sh", "-c", STATS, "sbx", bs->root, NULL};
    struct sbx__shell_run r;
    sbx__shell_run_init(&r, 4096);
    int rc = sbx__rl_run(s->conf, bs->id, argv, &r, err);
    const char *t = r.out.data ? r.out.data : "";
    if (rc == 0 && r.code != 0)
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "cannot read what sandbox '%s' uses", bs->id);
    if (rc == 0) {
        uint64_t cpu = stat_field(t, "cpu"), hz = stat_field(t, "hz");
        uint64_t total = stat_field(t, "memtotal"), avail = stat_field(t, "memavail");
        uint64_t kb = stat_field(t, "diskkb");
        if (cpu != SBX_STAT_UNKNOWN && hz != SBX_STAT_UNKNOWN && hz > 0)
            out->cpu_ns = cpu / hz * 1000000000ull + cpu % hz * 1000000000ull / hz;
        if (total != SBX_STAT_UNKNOWN && avail != SBX_STAT_UNKNOWN && avail <= total) {
            out->memory = (total - avail) * 1024;
            out->memory_limit = total * 1024;
        }
        out->pids = stat_field(t, "pids");
        if (kb != SBX_STAT_UNKNOWN)
            out->disk = kb * 1024;
    }
    sbx__shell_run_release(&r);
    return rc;
}

static int s_state(struct sbx_session *bs, json_t **out, struct sbx_error *err)
{
    (void)err;
    *out = json_deep_copy(((struct sbx__rl_session *)bs)->state);
    return 0;
}

static int devbox_op(struct sbx__rl_conf *c, const char *id, const char *op, json_t **out,
                     struct sbx_error *err)
{
    char *path = sbx_xasprintf("/v1/devboxes/%s/%s", id, op);
    int rc = sbx__rl_api(c, "POST", path, NULL, out, err);
    free(path);
    if (rc == -SBX_E_NOTFOUND)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "no devbox '%s' at the Runloop service", id);
    return rc;
}

/* Wait for devbox id to reach want (a status of its own, not one of the passing ones). */
static int await_status(struct sbx__rl_conf *c, const char *id, const char *want,
                        struct sbx_error *err)
{
    static const char *const ends[] = {"running", "suspended", "failure", "shutdown", NULL};
    char *path = sbx_xasprintf("/v1/devboxes/%s/wait_for_status", id);
    json_t *ans = NULL;
    int rc = sbx__rl_wait_status(c, path, ends, WAIT_MS, NULL, &ans, err);
    const char *st = json_string_value(json_object_get(ans, "status"));
    if (rc == 0 && (!st || strcmp(st, want) != 0))
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "devbox '%s' is %s, not %s", id,
                           st ? st : "in no state", want);
    json_decref(ans);
    free(path);
    return rc;
}

static int s_close(struct sbx_session *bs, int delete_workspace, struct sbx_error *err)
{
    struct sbx__rl_session *s = (struct sbx__rl_session *)bs;
    int pause =
            json_is_true(json_object_get(json_object_get(s->state, "options"), "pause_on_exit"));
    int rc;
    if (delete_workspace || !pause)
        return devbox_op(s->conf, bs->id, "shutdown", NULL, err);
    if ((rc = devbox_op(s->conf, bs->id, "suspend", NULL, err)) < 0)
        return rc;
    return await_status(s->conf, bs->id, "suspended", err);
}

static int s_record_snapshot(struct sbx_session *bs, const char *ref, struct sbx_error *err)
{
    (void)err;
    sbx_json_set(((struct sbx__rl_session *)bs)->state, "snapshot", sbx_json_str(ref));
    return 0;
}

static void s_free(struct sbx_session *bs)
{
    struct sbx__rl_session *s = (struct sbx__rl_session *)bs;
    if (!s)
        return;
    sbx__shellfs_copy_drop(&s->ws);
    sbx_session_release_base(&s->base);
    sbx__rl_conf_unref(s->conf);
    json_decref(s->state);
    free(s);
}

static void shellfs_of(struct sbx_session *bs, struct sbx__shellfs *out)
{
    *out = sbx__rl_fs((struct sbx__rl_session *)bs);
}

static const struct sbx_session_ops session_ops = {
        .shellfs = shellfs_of,
        .exec_start = sbx__rl_exec_start,
        SBX__SHELLFS_SESSION_FILE_OPS,
        .resolve_port = s_resolve_port,
        .state = s_state,
        .close = s_close,
        .workspace_fd = sbx__shellfs_s_workspace_fd,
        .record_snapshot = s_record_snapshot,
        .stats = s_stats,
        .free = s_free,
};

static json_t *options_json(const struct rl_client *c)
{
    json_t *o = json_object();
    sbx_json_set(o, "blueprint_id", c->blueprint_id ? sbx_json_str(c->blueprint_id) : json_null());
    sbx_json_set(o, "blueprint_name",
                 c->blueprint_name ? sbx_json_str(c->blueprint_name) : json_null());
    sbx_json_set(o, "name", c->name ? sbx_json_str(c->name) : json_null());
    sbx_json_set(o, "pause_on_exit", json_boolean(c->pause_on_exit));
    sbx_json_set(o, "launch_parameters", c->launch ? json_deep_copy(c->launch) : json_null());
    return o;
}

/* The exposed ports the devbox was made with (its metadata), else the client's. */
static json_t *ports_of(const struct rl_client *c, const json_t *meta)
{
    const char *p = json_string_value(json_object_get(meta, META_PORTS));
    if (!p)
        return json_deep_copy(c->ports);
    json_t *a = json_array();
    while (*p) {
        char *end = NULL;
        long v = strtol(p, &end, 10);
        if (end == p)
            break;
        if (v > 0 && v < 65536)
            sbx_json_append(a, json_integer(v));
        p = end + strspn(end, ",");
    }
    return a;
}

/* A session on devbox view dv (what the service says of it). */
static struct sbx__rl_session *session_new(struct rl_client *c, const json_t *dv)
{
    const char *id = json_string_value(json_object_get(dv, "id"));
    const json_t *meta = json_object_get(dv, "metadata");
    const char *root = json_string_value(json_object_get(meta, META_ROOT));
    const char *created = json_string_value(json_object_get(meta, META_CREATED));
    char stamp[SBX_TIME_RFC3339_LEN];
    if (!created) {
        sbx_time_rfc3339(sbx_time_real_ns(), stamp);
        created = stamp;
    }
    if (!root || root[0] != '/')
        root = SBX__RL_HOME;
    struct sbx__rl_session *s = sbx_xcalloc(1, sizeof(*s));
    sbx_session_init_base(&s->base, &session_ops, "runloop", id, root);
    s->conf = sbx__rl_conf_ref(c->conf);
    s->ws = (struct sbx__shellfs_copy)SBX__SHELLFS_COPY_INIT;
    json_t *st = json_object();
    sbx_json_set(st, "version", json_integer(SBX_SESSION_STATE_VERSION));
    sbx_json_set(st, "provider", sbx_json_str("runloop"));
    sbx_json_set(st, "id", sbx_json_str(id));
    sbx_json_set(st, "created", sbx_json_str(created));
    sbx_json_set(st, "root", sbx_json_str(root));
    sbx_json_set(st, "workspace_owned", json_true());
    sbx_json_set(st, "options", options_json(c));
    sbx_json_set(st, "exposed_ports", ports_of(c, meta));
    sbx_json_set(st, "manifest", json_null());
    sbx_json_set(st, "snapshot", json_null());
    s->state = st;
    return s;
}

/* GET /v1/devboxes/{id}: *dv (caller owns). */
static int devbox_get(struct rl_client *c, const char *id, json_t **dv, struct sbx_error *err)
{
    if (!sbx__rl_valid_id(id))
        return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a runloop devbox id", id);
    char *path = sbx_xasprintf("/v1/devboxes/%s", id);
    int rc = sbx__rl_api(c->conf, "GET", path, NULL, dv, err);
    free(path);
    if (rc == -SBX_E_NOTFOUND)
        return sbx_error_set(err, SBX_E_NOTFOUND, 0, "no devbox '%s' at the Runloop service", id);
    if (rc == 0 && !json_is_object(*dv)) {
        json_decref(*dv);
        return sbx_error_set(err, SBX_E_API, 0, "the Runloop API described devbox '%s' oddly", id);
    }
    return rc;
}

static const char *status_of(const json_t *dv)
{
    const char *s = json_string_value(json_object_get(dv, "status"));
    return s ? s : "";
}

/* A devbox that is gone (shut down or failed): SBX_E_NOTFOUND saying why. */
static int gone_error(const char *id, const json_t *dv, struct sbx_error *err)
{
    const char *why = json_string_value(json_object_get(dv, "shutdown_reason"));
    if (!why)
        why = json_string_value(json_object_get(dv, "failure_reason"));
    return sbx_error_set(err, SBX_E_NOTFOUND, 0, "devbox '%s' is gone (%s%s%s)", id, status_of(dv),
                         why ? ": " : "", why ? why : "");
}

static int rc_attach(struct sbx_client *bc, const char *id, struct sbx_session **out,
                     struct sbx_error *err)
{
    struct rl_client *c = (struct rl_client *)bc;
    json_t *dv = NULL;
    int rc = devbox_get(c, id, &dv, err);
    if (rc == 0 && strcmp(status_of(dv), "suspended") == 0)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0,
                           "devbox '%s' is suspended (sbx sandbox start %s)", id, id);
    else if (rc == 0 && strcmp(status_of(dv), "running") != 0)
        rc = gone_error(id, dv, err);
    if (rc == 0)
        *out = &session_new(c, dv)->base;
    json_decref(dv);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Create */

static json_t *create_body(const struct rl_client *c, const char *root, const struct sbx_strv *env)
{
    json_t *b = json_object(), *ev = json_deep_copy(c->env_vars),
           *meta = json_deep_copy(c->metadata);
    char created[SBX_TIME_RFC3339_LEN];
    sbx_time_rfc3339(sbx_time_real_ns(), created);
    for (size_t i = 0; i < env->n; i++) {
        const char *eq = strchr(env->v[i], '=');
        char *k = sbx_xstrndup(env->v[i], (size_t)(eq - env->v[i]));
        sbx_json_set(ev, k, sbx_json_str(eq + 1));
        free(k);
    }
    sbx_json_set(meta, MANAGED, sbx_json_str("1"));
    sbx_json_set(meta, META_ROOT, sbx_json_str(root));
    sbx_json_set(meta, META_CREATED, sbx_json_str(created));
    struct sbx_buf ports;
    sbx_buf_init(&ports, SBX_BUF_NOLIMIT);
    size_t i;
    json_t *v;
    json_array_foreach(c->ports, i, v)
    {
        if (sbx_buf_addf(&ports, NULL, "%s%lld", i ? "," : "", (long long)json_integer_value(v)) <
            0)
            break;
    }
    sbx_json_set(meta, META_PORTS, sbx_json_str(ports.data ? ports.data : ""));
    sbx_buf_release(&ports);
    if (c->snapshot_id)
        sbx_json_set(b, "snapshot_id", sbx_json_str(c->snapshot_id));
    else if (c->blueprint_id)
        sbx_json_set(b, "blueprint_id", sbx_json_str(c->blueprint_id));
    else if (c->blueprint_name)
        sbx_json_set(b, "blueprint_name", sbx_json_str(c->blueprint_name));
    if (c->name)
        sbx_json_set(b, "name", sbx_json_str(c->name));
    sbx_json_set(b, "metadata", meta);
    sbx_json_set(b, "environment_variables", ev);
    if (c->launch)
        sbx_json_set(b, "launch_parameters", json_deep_copy(c->launch));
    return b;
}

static void wipe_values(json_t *obj)
{
    const char *k;
    json_t *v;
    json_object_foreach(obj, k, v)
            explicit_bzero((char *)json_string_value(v), json_string_length(v));
}

static int create_devbox(struct rl_client *c, const char *root, struct sbx_strv *env,
                         struct sbx__rl_session **out, struct sbx_error *err)
{
    json_t *body = create_body(c, root, env), *ans = NULL;
    int rc = sbx__rl_api(c->conf, "POST", "/v1/devboxes", body, &ans, err);
    for (size_t i = 0; i < env->n; i++)
        explicit_bzero(env->v[i], strlen(env->v[i]));
    wipe_values(json_object_get(body, "environment_variables"));
    if (rc == -SBX_E_NOTFOUND) {
        const char *what = c->snapshot_id ? "snapshot" : "blueprint";
        const char *which = c->snapshot_id    ? c->snapshot_id
                            : c->blueprint_id ? c->blueprint_id
                                              : c->blueprint_name;
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0,
                           "the Runloop service has no %s '%s' (the runloop provider's %s option): "
                           "%s",
                           what, which ? which : "", c->snapshot_id ? "snapshot_id" : what,
                           err->msg);
    }
    const char *id = json_string_value(json_object_get(ans, "id"));
    if (rc == 0 && !sbx__rl_valid_id(id))
        rc = sbx_error_set(err, SBX_E_API, 0, "the Runloop API made a devbox without a usable id");
    if (rc == 0 && strcmp(status_of(ans), "running") != 0 &&
        (rc = await_status(c->conf, id, "running", err)) < 0) {
        struct sbx_error ignored = SBX_ERROR_INIT;
        (void)devbox_op(c->conf, id, "shutdown", NULL, &ignored);
    }
    if (rc == 0) {
        json_object_set(ans, "metadata", json_object_get(body, "metadata"));
        *out = session_new(c, ans);
    }
    json_decref(body);
    json_decref(ans);
    return rc;
}

/* The workspace, a snapshot's content and the manifest's entries in a new devbox. */
static int fill_devbox(struct sbx__rl_session *s, const struct sbx_create_spec *spec,
                       struct sbx_snapshot_store *store, const char *snap_ref,
                       struct sbx_error *err)
{
    struct sbx__shellfs fs = sbx__rl_fs(s);
    int rc = sbx__shellfs_make_root(&fs, err);
    return rc < 0 ? rc : sbx__shellfs_fill(&fs, &s->base, s->state, spec, store, snap_ref, err);
}

static int check_spec(const struct sbx_create_spec *spec, struct sbx_error *err)
{
    if (spec->workspace)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "a runloop devbox's workspace is in the devbox: a host workspace "
                             "directory ('%s') cannot be used",
                             spec->workspace);
    if (spec->id && spec->id[0])
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "the Runloop service names its devboxes: '%s' cannot be chosen",
                             spec->id);
    const struct sbx_manifest *m = spec->manifest;
    return sbx__shellfs_check_accounts(m, "a runloop devbox", SBX__RL_USER, err);
}

static int rc_create(struct sbx_client *bc, const struct sbx_create_spec *spec,
                     struct sbx_session **out, struct sbx_error *err)
{
    struct rl_client *c = (struct rl_client *)bc;
    const struct sbx_manifest *m = spec->manifest;
    struct sbx_strv env;
    struct sbx__rl_session *s = NULL;
    struct sbx_snapshot_store *store = NULL;
    char *snap_ref = NULL;
    int rc;
    sbx_strv_init(&env);
    if ((rc = check_spec(spec, err)) < 0)
        goto out;
    if (spec->snapshot &&
        ((rc = sbx_snapshot_store_open(NULL, &store, err)) < 0 ||
         (rc = sbx_snapshot_resolve(store, spec->snapshot, NULL, &snap_ref, err)) < 0))
        goto out;
    if (m && (rc = sbx_manifest_env_resolve(m, spec->pass_secrets, &env, err)) < 0)
        goto out;
    const char *root = m && strcmp(sbx_manifest_root(m), "/workspace") != 0 ? sbx_manifest_root(m)
                                                                            : SBX__RL_HOME;
    if ((rc = create_devbox(c, root, &env, &s, err)) < 0 ||
        (rc = fill_devbox(s, spec, store, snap_ref, err)) < 0)
        goto out;
    *out = &s->base;
    s = NULL;
out:
    if (rc < 0) {
        struct sbx_error ignored = SBX_ERROR_INIT;
        if (s)
            (void)devbox_op(c->conf, s->base.id, "shutdown", NULL, &ignored);
        sbx_error_prefix(err, "cannot create sandbox");
    }
    s_free(s ? &s->base : NULL);
    sbx_strv_release(&env);
    free(snap_ref);
    sbx_snapshot_store_free(store);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Remove, stop, start, resume */

static int rc_remove(struct sbx_client *bc, const char *id, int keep_workspace,
                     struct sbx_error *err)
{
    struct rl_client *c = (struct rl_client *)bc;
    if (keep_workspace)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "a runloop devbox's workspace is in the devbox: it goes with it");
    if (!sbx__rl_valid_id(id))
        return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a runloop devbox id", id);
    return devbox_op(c->conf, id, "shutdown", NULL, err);
}

static int rc_stop(struct sbx_client *bc, const char *id, char **out_ref, struct sbx_error *err)
{
    struct rl_client *c = (struct rl_client *)bc;
    json_t *dv = NULL;
    int rc = devbox_get(c, id, &dv, err);
    if (rc == 0 && strcmp(status_of(dv), "suspended") == 0)
        rc = sbx_error_set(err, SBX_E_EXISTS, 0, "sandbox '%s' is already stopped", id);
    else if (rc == 0 && strcmp(status_of(dv), "running") != 0)
        rc = gone_error(id, dv, err);
    json_decref(dv);
    /* A suspended devbox keeps its disk at the service: no snapshot is taken. */
    if (rc == 0 && (rc = devbox_op(c->conf, id, "suspend", NULL, err)) == 0)
        rc = await_status(c->conf, id, "suspended", err);
    if (rc == 0 && out_ref)
        *out_ref = NULL;
    return rc;
}

/* The running devbox id (resumed when suspended), as a session. */
static int wake_devbox(struct rl_client *c, const char *id, struct sbx__rl_session **out,
                       struct sbx_error *err)
{
    json_t *dv = NULL;
    int rc = devbox_get(c, id, &dv, err);
    const char *st = rc == 0 ? status_of(dv) : "";
    if (rc == 0 && strcmp(st, "suspended") == 0)
        rc = devbox_op(c->conf, id, "resume", NULL, err);
    else if (rc == 0 && strcmp(st, "running") != 0 && strcmp(st, "resuming") != 0)
        rc = gone_error(id, dv, err);
    if (rc == 0 && strcmp(st, "running") != 0)
        rc = await_status(c->conf, id, "running", err);
    if (rc == 0)
        *out = session_new(c, dv);
    json_decref(dv);
    return rc;
}

static int rc_start(struct sbx_client *bc, const char *id, const struct sbx_resume_opts *opts,
                    struct sbx_session **out, struct sbx_error *err)
{
    struct sbx__rl_session *s = NULL;
    (void)opts;
    int rc = wake_devbox((struct rl_client *)bc, id, &s, err);
    if (rc == 0)
        *out = &s->base;
    return rc;
}

static int rc_resume(struct sbx_client *bc, const json_t *state, const struct sbx_resume_opts *opts,
                     struct sbx_session **out, struct sbx_error *err)
{
    const char *id = json_string_value(json_object_get(state, "id"));
    const char *snap = json_string_value(json_object_get(state, "snapshot"));
    struct sbx__rl_session *s = NULL;
    int rc = wake_devbox((struct rl_client *)bc, id, &s, err);
    if (rc == -SBX_E_NOTFOUND && snap)
        return sbx__client_rebuild(bc, state, snap, opts, 0, 0, out, err);
    if (rc == -SBX_E_NOTFOUND)
        return sbx_error_set(err, SBX_E_NOTFOUND, 0,
                             "devbox '%s' is gone (it was shut down or expired) and its state has "
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

/* A listed devbox's state (status "stopped" when suspended), or NULL for one sbx does not
 * show: not made by sbx, or gone. */
static json_t *listed_state(struct rl_client *c, const json_t *dv)
{
    const char *id = json_string_value(json_object_get(dv, "id"));
    const char *managed =
            json_string_value(json_object_get(json_object_get(dv, "metadata"), MANAGED));
    const char *st = status_of(dv);
    if (!sbx__rl_valid_id(id) || !managed || strcmp(managed, "1") != 0 ||
        strcmp(st, "shutdown") == 0 || strcmp(st, "failure") == 0)
        return NULL;
    struct sbx__rl_session *s = session_new(c, dv);
    json_t *out = json_deep_copy(s->state);
    if (strcmp(st, "suspended") == 0 || strcmp(st, "suspending") == 0)
        sbx_json_set(out, "status", sbx_json_str("stopped"));
    s_free(&s->base);
    return out;
}

#define LIST_PAGES 50

static int rc_list(struct sbx_client *bc, json_t **out, struct sbx_error *err)
{
    struct rl_client *c = (struct rl_client *)bc;
    json_t *res = json_array();
    char *after = NULL;
    int rc = 0;
    for (int page = 0; page < LIST_PAGES && rc == 0; page++) {
        char *path = after ? sbx_xasprintf("/v1/devboxes?limit=100&starting_after=%s", after)
                           : sbx_xstrdup("/v1/devboxes?limit=100");
        json_t *ans = NULL, *v;
        size_t i;
        rc = sbx__rl_api(c->conf, "GET", path, NULL, &ans, err);
        free(path);
        const json_t *boxes = json_object_get(ans, "devboxes");
        if (rc == 0 && !json_is_array(boxes))
            rc = sbx_error_set(err, SBX_E_API, 0, "the Runloop API's devbox list is not a list");
        json_array_foreach(boxes, i, v)
        {
            json_t *st = listed_state(c, v);
            if (st)
                sbx_json_append(res, st);
        }
        const char *last = json_string_value(
                json_object_get(json_array_get(boxes, json_array_size(boxes) - 1), "id"));
        int more =
                rc == 0 && json_is_true(json_object_get(ans, "has_more")) && sbx__rl_valid_id(last);
        free(after);
        after = more ? sbx_xstrdup(last) : NULL;
        json_decref(ans);
        if (!more)
            break;
    }
    free(after);
    if (rc < 0) {
        json_decref(res);
        return rc;
    }
    *out = res;
    return 0;
}

static int rc_stopped_state(struct sbx_client *bc, const char *id, json_t **out,
                            struct sbx_error *err)
{
    struct rl_client *c = (struct rl_client *)bc;
    json_t *dv = NULL;
    int rc = devbox_get(c, id, &dv, err);
    if (rc == 0 && strcmp(status_of(dv), "suspended") != 0)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "sandbox '%s' is not stopped", id);
    if (rc == 0 && !(*out = listed_state(c, dv)))
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "devbox '%s' was not made by sbx", id);
    json_decref(dv);
    return rc;
}

static void rc_free(struct sbx_client *bc)
{
    struct rl_client *c = (struct rl_client *)bc;
    sbx__rl_conf_unref(c->conf);
    free(c->blueprint_id);
    free(c->blueprint_name);
    free(c->snapshot_id);
    free(c->name);
    json_decref(c->env_vars);
    json_decref(c->metadata);
    json_decref(c->ports);
    json_decref(c->launch);
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

static char *dup_opt(const json_t *o, const char *key)
{
    const char *v = json_string_value(json_object_get(o, key));
    return v && v[0] ? sbx_xstrdup(v) : NULL;
}

static int check_options(const json_t *o, struct sbx_error *err)
{
    const char *url = json_string_value(json_object_get(o, "base_url"));
    if (url && strncmp(url, "https://", 8) != 0 && strncmp(url, "http://", 7) != 0)
        return sbx_error_set(err, SBX_E_INVAL, 0, "base_url '%s' is not an http(s) URL", url);
    if (json_object_get(o, "on_idle") && !json_object_get(o, "idle_time_seconds"))
        return sbx_error_set(err, SBX_E_INVAL, 0, "on_idle needs idle_time_seconds");
    if (json_object_get(o, "blueprint_id") && json_object_get(o, "blueprint_name"))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "blueprint_id and blueprint_name cannot both be set");
    json_t *a = NULL;
    int rc = sbx__option_pairs(json_object_get(o, "env_vars"), "env_vars", &a, err);
    json_decref(a);
    a = NULL;
    if (rc == 0)
        rc = sbx__option_pairs(json_object_get(o, "metadata"), "metadata", &a, err);
    json_decref(a);
    return rc;
}

/* Runloop's launch_parameters from the flat options (NULL: none given). */
static json_t *launch_parameters(const json_t *o)
{
    json_t *lp = json_object();
    const json_t *v;
    if ((v = json_object_get(o, "keep_alive_time_seconds")))
        sbx_json_set(lp, "keep_alive_time_seconds", json_integer(json_integer_value(v)));
    if ((v = json_object_get(o, "idle_time_seconds"))) {
        const char *on = json_string_value(json_object_get(o, "on_idle"));
        sbx_json_set(lp, "after_idle",
                     json_pack("{s:I,s:s}", "idle_time_seconds", (json_int_t)json_integer_value(v),
                               "on_idle", on ? on : "suspend"));
    }
    static const char *const direct[] = {"resource_size_request", "architecture"};
    for (size_t i = 0; i < sizeof(direct) / sizeof(direct[0]); i++)
        if ((v = json_object_get(o, direct[i])))
            sbx_json_set(lp, direct[i], json_deep_copy(v));
    if (json_object_size(lp) == 0) {
        json_decref(lp);
        return NULL;
    }
    return lp;
}

static struct sbx__rl_conf *conf_new(const json_t *o)
{
    struct sbx__rl_conf *cf = sbx_xcalloc(1, sizeof(*cf));
    cf->refs = 1;
    pthread_mutex_init(&cf->lock, NULL);
    const char *url = json_string_value(json_object_get(o, "base_url"));
    const char *envurl = getenv("RUNLOOP_BASE_URL");
    cf->url = sbx_xstrdup(url && url[0] ? url : envurl && envurl[0] ? envurl : SBX__RL_API_DEFAULT);
    size_t n = strlen(cf->url);
    while (n > 1 && cf->url[n - 1] == '/')
        cf->url[--n] = '\0';
    const json_t *ref = json_object_get(o, "api_key");
    cf->key_ref = ref ? json_deep_copy(ref) : json_pack("{s:s}", "env", "RUNLOOP_API_KEY");
    const char *var = json_string_value(json_object_get(cf->key_ref, "env"));
    const char *file = json_string_value(json_object_get(cf->key_ref, "file"));
    cf->key_what = var ? sbx_xasprintf("$%s", var) : sbx_xasprintf("'%s'", file ? file : "?");
    cf->ca_file = dup_opt(o, "ca_file");
    return cf;
}

static int client_new_json(const json_t *o, struct sbx_client **out, struct sbx_error *err)
{
    int rc = check_options(o, err);
    if (rc < 0)
        return rc;
    struct rl_client *c = sbx_xcalloc(1, sizeof(*c));
    c->base.ops = &client_ops;
    c->base.provider = "runloop";
    c->conf = conf_new(o);
    c->blueprint_id = dup_opt(o, "blueprint_id");
    c->blueprint_name = dup_opt(o, "blueprint_name");
    c->snapshot_id = dup_opt(o, "snapshot_id");
    c->name = dup_opt(o, "name");
    const json_t *p = json_object_get(o, "pause_on_exit");
    c->pause_on_exit = !p || json_is_true(p);
    (void)sbx__option_pairs(json_object_get(o, "env_vars"), "env_vars", &c->env_vars, err);
    (void)sbx__option_pairs(json_object_get(o, "metadata"), "metadata", &c->metadata, err);
    const json_t *ports = json_object_get(o, "exposed_ports");
    c->ports = json_is_array(ports) ? json_deep_copy(ports) : json_array();
    c->launch = launch_parameters(o);
    *out = &c->base;
    return 0;
}

static int check_state(const json_t *st, struct sbx_error *err)
{
    return sbx__state_check_id_root(st, sbx__rl_valid_id, "a runloop devbox id", err);
}

const struct sbx__provider_def sbx__provider_runloop = {
        .name = "runloop",
        .summary = "a devbox (a microVM) at Runloop's hosted service, through its REST API (key "
                   "from $RUNLOOP_API_KEY)",
        .traits = SBX_PROVIDER_SNAPSHOTS | SBX_PROVIDER_STOP_START | SBX_PROVIDER_PORTS |
                  SBX_PROVIDER_RESUME | SBX_PROVIDER_STATS,
        .options = options,
        .client_new_json = client_new_json,
        .options_check = check_options,
        .check_state = check_state,
};
