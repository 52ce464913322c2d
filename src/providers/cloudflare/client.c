/* The cloudflare provider: sandboxes (Cloudflare containers) behind the user's Sandbox Bridge
 * worker, the HTTP API of @cloudflare/sandbox/bridge (docs/internals/provider-cloudflare.md).
 *
 * The bridge names a sandbox (POST /v1/sandbox gives an id) and its pool starts a container for
 * an id at the first request that needs one: any well-formed id answers, and a sandbox whose
 * container went away (it slept, or was deleted) comes back empty. So sbx leaves a mark in each
 * sandbox it makes (SBX__CF_ALIVE_FILE, outside the workspace, holding the id): attaching or
 * resuming reads it, and a sandbox without it is gone (rebuilt from its state's snapshot when
 * there is one). The workspace is /workspace, as the bridge fixes it; commands run as the
 * container's user; a port's URL is the bridge's tunnel to it. The bridge has no listing and
 * no pause. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "providers/cloudflare/cloudflare.h"
#include "sandbox/materialize/materialize.h"
#include "sandbox/session/internal.h"
#include "sbx/json.h"
#include "sbx/manifest.h"
#include "sbx/snapshot.h"
#include "sbx/strv.h"
#include "sbx/time.h"

#define KEY_VAR       "CLOUDFLARE_SANDBOX_API_KEY"
#define TCP_TABLE_MAX ((size_t)16 << 20)
#define URL_VAR       "CLOUDFLARE_SANDBOX_WORKER_URL"

static const struct sbx_provider_option cf_options[] = {
        {.key = "worker_url",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_TRUSTED | SBX_OPTION_LOCATOR,
         .arg = "URL",
         .help = "the Sandbox Bridge worker (default $" URL_VAR ")"},
        {.key = "api_key",
         .type = SBX_OPTION_SECRET,
         .flags = SBX_OPTION_TRUSTED,
         .arg = "env:VAR|file:/PATH",
         .help = "where the worker's key (its SANDBOX_API_KEY) is (default env:" KEY_VAR
                 "; an unset variable: no key); never the key itself"},
        {.key = "exposed_ports",
         .type = SBX_OPTION_PORT,
         .flags = SBX_OPTION_STATE | SBX_OPTION_LIST,
         .arg = "N",
         .help = "a port whose URL resolve_port gives, through the bridge's tunnel (repeatable; "
                 "none given: any the bridge tunnels, 1024-65535 but 3000)"},
        {.key = "ca_file",
         .type = SBX_OPTION_PATH,
         .flags = SBX_OPTION_TRUSTED | SBX_OPTION_LOCATOR,
         .arg = "/PATH",
         .help = "a CA bundle to check the worker's HTTPS certificate with (default the "
                 "system's)"},
        {.key = NULL},
};

struct cf_client {
    struct sbx_client base;
    struct sbx__cf_conf *conf;
    json_t *ports; /* exposed_ports: an array of integers */
};

/* ---------------------------------------------------------------------------------------------
 * Sessions */

static int sess_state(struct sbx_session *bs, json_t **out, struct sbx_error *err)
{
    struct sbx__cf_session *s = (struct sbx__cf_session *)bs;
    (void)err;
    *out = json_deep_copy(s->state);
    return 0;
}

/* POST .../tunnel/{port}: the URL of the bridge's tunnel to the port (the same tunnel again
 * for the same port), once something listens on it in the sandbox. */
static int sess_resolve_port(struct sbx_session *bs, int port, char **out_url,
                             struct sbx_error *err)
{
    struct sbx__cf_session *s = (struct sbx__cf_session *)bs;
    const json_t *ports = json_object_get(s->state, "exposed_ports");
    size_t i;
    json_t *v;
    int listed = json_array_size(ports) == 0;
    json_array_foreach(ports, i, v) listed |= json_integer_value(v) == port;
    if (!listed)
        return sbx_error_set(err, SBX_E_PERM, 0, "port %d is not among the exposed ports", port);
    if (port < 1024 || port == 3000)
        return sbx_error_set(err, SBX_E_NOTFOUND, 0,
                             "port %d has no tunnel: the Sandbox Bridge tunnels ports 1024-65535 "
                             "but 3000",
                             port);
    static const char *const argv[] = {"cat", "/proc/net/tcp", "/proc/net/tcp6", NULL};
    struct sbx__shell_run r;
    sbx__shell_run_init(&r, TCP_TABLE_MAX);
    /* cat fails on a kernel without IPv6 (no tcp6) but has printed tcp: the text decides. */
    int rc = sbx__cf_run(s->conf, s->base.id, argv, &r, err);
    if (rc == 0 && !sbx__net_table_listens(r.out.data ? r.out.data : "", r.out.len, port))
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "nothing listens on port %d in sandbox '%s'",
                           port, s->base.id);
    sbx__shell_run_release(&r);
    return rc < 0 ? rc : sbx__cf_tunnel(s->conf, s->base.id, port, out_url, err);
}

static int sess_close(struct sbx_session *bs, int delete_workspace, struct sbx_error *err)
{
    struct sbx__cf_session *s = (struct sbx__cf_session *)bs;
    /* No pause: kept, the container runs on until the worker lets it sleep. */
    return delete_workspace ? sbx__cf_delete(s->conf, s->base.id, err) : 0;
}

static int sess_record_snapshot(struct sbx_session *bs, const char *ref, struct sbx_error *err)
{
    struct sbx__cf_session *s = (struct sbx__cf_session *)bs;
    (void)err;
    sbx_json_set(s->state, "snapshot", sbx_json_str(ref));
    return 0;
}

static void sess_free(struct sbx_session *bs)
{
    struct sbx__cf_session *s = (struct sbx__cf_session *)bs;
    if (!s)
        return;
    sbx_session_release_base(&s->base);
    sbx__cf_conf_unref(s->conf);
    json_decref(s->state);
    free(s);
}

static void shellfs_of(struct sbx_session *bs, struct sbx__shellfs *out)
{
    *out = sbx__cf_fs((struct sbx__cf_session *)bs);
}

static const struct sbx_session_ops session_ops = {
        .shellfs = shellfs_of,
        .exec_start = sbx__cf_exec_start,
        SBX__SHELLFS_SESSION_FILE_OPS,
        .resolve_port = sess_resolve_port,
        .state = sess_state,
        .close = sess_close,
        .record_snapshot = sess_record_snapshot,
        .workspace_export = sbx__cf_workspace_export,
        .workspace_import = sbx__cf_workspace_import,
        .free = sess_free,
};

static struct sbx__cf_session *session_new(struct cf_client *c, const char *id, const char *created)
{
    char stamp[SBX_TIME_RFC3339_LEN];
    if (!created) {
        sbx_time_rfc3339(sbx_time_real_ns(), stamp);
        created = stamp;
    }
    struct sbx__cf_session *s = sbx_xcalloc(1, sizeof(*s));
    sbx_session_init_base(&s->base, &session_ops, "cloudflare", id, SBX__CF_ROOT);
    s->conf = sbx__cf_conf_ref(c->conf);
    json_t *st = json_object();
    sbx_json_set(st, "version", json_integer(SBX_SESSION_STATE_VERSION));
    sbx_json_set(st, "provider", sbx_json_str("cloudflare"));
    sbx_json_set(st, "id", sbx_json_str(id));
    sbx_json_set(st, "created", sbx_json_str(created));
    sbx_json_set(st, "root", sbx_json_str(SBX__CF_ROOT));
    sbx_json_set(st, "workspace_owned", json_true());
    sbx_json_set(st, "options", json_object());
    sbx_json_set(st, "exposed_ports", json_deep_copy(c->ports));
    sbx_json_set(st, "manifest", json_null());
    sbx_json_set(st, "snapshot", json_null());
    s->state = st;
    return s;
}

/* The mark sbx left in the sandbox: 0 when it holds id (*created its time), SBX_E_NOTFOUND
 * when the sandbox is not one sbx made or its container went away. */
static int read_mark(struct cf_client *c, const char *id, char **created, struct sbx_error *err)
{
    const char *argv[] = {"cat", "--", SBX__CF_ALIVE_FILE, NULL};
    struct sbx__shell_run r;
    sbx__shell_run_init(&r, 4096);
    int rc = sbx__cf_run(c->conf, id, argv, &r, err);
    const char *sp = r.out.len ? memchr(r.out.data, ' ', r.out.len) : NULL;
    if (rc == 0 && (r.code != 0 || !sp || (size_t)(sp - r.out.data) != strlen(id) ||
                    memcmp(r.out.data, id, strlen(id)) != 0))
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0,
                           "no sandbox '%s' (its container went away, or sbx did not make it)", id);
    if (rc == 0)
        *created = sbx_xstrndup(sp + 1, strcspn(sp + 1, "\n"));
    sbx__shell_run_release(&r);
    return rc;
}

static int cc_attach(struct sbx_client *bc, const char *id, struct sbx_session **out,
                     struct sbx_error *err)
{
    struct cf_client *c = (struct cf_client *)bc;
    if (!sbx__cf_valid_id(id))
        return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a cloudflare sandbox id", id);
    char *created = NULL;
    int rc = read_mark(c, id, &created, err);
    if (rc < 0)
        return rc;
    struct sbx__cf_session *s = session_new(c, id, created);
    free(created);
    *out = &s->base;
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Create */

/* The workspace, the manifest's environment for every command (beside the mark, outside the
 * workspace: never in a snapshot), then the mark that says sbx made the sandbox. Values go as
 * arguments of a fixed script, never into a shell line. */
static const char MAKE[] =
        "root=$1 mark=$2 line=$3; shift 3\n"
        "mkdir -p -- \"$root\" || exit 1\n"
        "(umask 077; : >\"$mark.env\" && { [ $# -eq 0 ] || printf '%s\\0' \"$@\" "
        ">\"$mark.env\"; }) || exit 1\n"
        "printf '%s' \"$line\" >\"$mark\"\n";

static int make_sandbox(struct sbx__cf_session *s, const struct sbx_create_spec *spec,
                        struct sbx_error *err)
{
    const char *created = json_string_value(json_object_get(s->state, "created"));
    char *mark = sbx_xasprintf("%s %s\n", s->base.id, created);
    struct sbx_strv argv;
    sbx_strv_init(&argv);
    const char *head[] = {"bash", "-c", MAKE, "sbx", s->base.root, SBX__CF_ALIVE_FILE, mark};
    size_t nhead = sizeof(head) / sizeof(head[0]);
    for (size_t i = 0; i < nhead; i++)
        sbx_strv_push(&argv, head[i]);
    int rc = spec->manifest
                     ? sbx_manifest_env_resolve(spec->manifest, spec->pass_secrets, &argv, err)
                     : 0;
    if (rc == 0) {
        struct sbx__shell_run r;
        struct sbx__shellfs fs = sbx__cf_fs(s);
        sbx__shell_run_init(&r, 65536);
        rc = sbx__shellfs_run_ok(&fs, (const char *const *)argv.v, "make the workspace",
                                 s->base.root, &r, err);
        sbx__shell_run_release(&r);
    }
    for (size_t i = nhead; i < argv.n; i++)
        explicit_bzero(argv.v[i], strlen(argv.v[i]));
    sbx_strv_release(&argv);
    free(mark);
    return rc;
}

/* The sandbox made, then the snapshot or the manifest's entries. */
static int fill_sandbox(struct sbx__cf_session *s, const struct sbx_create_spec *spec,
                        struct sbx_snapshot_store *store, const char *snap_ref,
                        struct sbx_error *err)
{
    int rc = make_sandbox(s, spec, err);
    return rc < 0 ? rc : sbx__shellfs_fill(NULL, &s->base, s->state, spec, store, snap_ref, err);
}

/* What a manifest asks that the bridge cannot give. */
static int check_spec(const struct sbx_create_spec *spec, struct sbx_error *err)
{
    const struct sbx_manifest *m = spec->manifest;
    if (spec->workspace)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "a cloudflare sandbox's workspace is in its container: a host "
                             "workspace directory ('%s') cannot be used",
                             spec->workspace);
    if (spec->id && spec->id[0])
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "the Sandbox Bridge names its sandboxes: '%s' cannot be chosen",
                             spec->id);
    if (m && strcmp(sbx_manifest_root(m), SBX__CF_ROOT) != 0)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "manifest root '%s': the Sandbox Bridge's workspace is " SBX__CF_ROOT
                             " (its persist and hydrate are fixed to it)",
                             sbx_manifest_root(m));
    return sbx__shellfs_check_accounts(m, "a cloudflare sandbox", NULL, err);
}

static int cc_create(struct sbx_client *bc, const struct sbx_create_spec *spec,
                     struct sbx_session **out, struct sbx_error *err)
{
    struct cf_client *c = (struct cf_client *)bc;
    struct sbx__cf_session *s = NULL;
    struct sbx_snapshot_store *store = NULL;
    char *snap_ref = NULL, *id = NULL;
    int rc = check_spec(spec, err);
    /* A snapshot is found and checked before anything exists: a bad one creates nothing. */
    if (rc == 0 && spec->snapshot &&
        ((rc = sbx_snapshot_store_open(NULL, &store, err)) < 0 ||
         (rc = sbx_snapshot_resolve(store, spec->snapshot, NULL, &snap_ref, err)) < 0))
        goto out;
    if (rc < 0 || (rc = sbx__cf_new_id(c->conf, &id, err)) < 0)
        goto out;
    s = session_new(c, id, NULL);
    if ((rc = fill_sandbox(s, spec, store, snap_ref, err)) < 0)
        goto out;
    *out = &s->base;
    s = NULL;
out:
    if (rc < 0) {
        struct sbx_error ignored = SBX_ERROR_INIT;
        if (s)
            (void)sbx__cf_delete(c->conf, s->base.id, &ignored);
        sbx_error_prefix(err, "cannot create sandbox");
    }
    sess_free(s ? &s->base : NULL);
    free(id);
    free(snap_ref);
    sbx_snapshot_store_free(store);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * List, remove, resume */

static int cc_list(struct sbx_client *bc, json_t **out, struct sbx_error *err)
{
    (void)bc;
    (void)out;
    return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                         "the Sandbox Bridge lists no sandboxes: sbx's records find them");
}

static int cc_remove(struct sbx_client *bc, const char *id, int keep_workspace,
                     struct sbx_error *err)
{
    struct cf_client *c = (struct cf_client *)bc;
    if (keep_workspace)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "a cloudflare sandbox's workspace is in its container: it goes "
                             "with it");
    if (!sbx__cf_valid_id(id))
        return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a cloudflare sandbox id", id);
    return sbx__cf_delete(c->conf, id, err);
}

static int cc_resume(struct sbx_client *bc, const json_t *state, const struct sbx_resume_opts *opts,
                     struct sbx_session **out, struct sbx_error *err)
{
    struct cf_client *c = (struct cf_client *)bc;
    const char *id = json_string_value(json_object_get(state, "id"));
    const char *snap = json_string_value(json_object_get(state, "snapshot"));
    char *created = NULL;
    int rc = read_mark(c, id, &created, err);
    free(created);
    if (rc == -SBX_E_NOTFOUND) {
        /* sbx made this id (its state says so): the container that answered is a fresh one the
         * worker started for the question, not the sandbox; it goes again. */
        struct sbx_error ignored = SBX_ERROR_INIT;
        (void)sbx__cf_delete(c->conf, id, &ignored);
    }
    if (rc == -SBX_E_NOTFOUND && snap)
        return sbx__client_rebuild(bc, state, snap, opts, 0, 0, out, err);
    if (rc == -SBX_E_NOTFOUND)
        return sbx_error_set(err, SBX_E_NOTFOUND, 0,
                             "sandbox '%s' is gone (its container went away) and its state has "
                             "no snapshot",
                             id);
    if (rc < 0)
        return rc;
    struct sbx__cf_session *s =
            session_new(c, id, json_string_value(json_object_get(state, "created")));
    const char *keep[] = {"manifest", "snapshot", "materialized", "exposed_ports"};
    for (size_t i = 0; i < sizeof(keep) / sizeof(keep[0]); i++) {
        const json_t *v = json_object_get(state, keep[i]);
        if (v)
            sbx_json_set(s->state, keep[i], json_deep_copy(v));
    }
    *out = &s->base;
    return 0;
}

static void cc_free(struct sbx_client *bc)
{
    struct cf_client *c = (struct cf_client *)bc;
    sbx__cf_conf_unref(c->conf);
    json_decref(c->ports);
    free(c);
}

static const struct sbx_client_ops client_ops = {
        .create = cc_create,
        .attach = cc_attach,
        .list = cc_list,
        .remove = cc_remove,
        .resume = cc_resume,
        .free = cc_free,
};

/* ---------------------------------------------------------------------------------------------
 * The provider */

static int conf_new(const json_t *o, struct sbx__cf_conf **out, struct sbx_error *err)
{
    const char *url = json_string_value(json_object_get(o, "worker_url"));
    if (!url || !url[0])
        url = getenv(URL_VAR);
    if (!url || !url[0])
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "no Sandbox Bridge worker: give the cloudflare provider's "
                             "worker_url option or set $" URL_VAR);
    if (strncmp(url, "https://", 8) != 0 && strncmp(url, "http://", 7) != 0)
        return sbx_error_set(err, SBX_E_INVAL, 0, "worker_url '%s' is not an http(s) URL", url);
    json_t *ref = json_object_get(o, "api_key");
    json_t *own = ref ? json_incref(ref) : json_pack("{s:s}", "env", KEY_VAR);
    const char *var = json_string_value(json_object_get(own, "env"));
    const char *file = json_string_value(json_object_get(own, "file"));
    struct sbx__cf_conf *c = sbx_xcalloc(1, sizeof(*c));
    c->refs = 1;
    c->url = sbx_xstrdup(url);
    for (size_t n = strlen(c->url); n > 1 && c->url[n - 1] == '/';)
        c->url[--n] = '\0';
    c->key_what = var ? sbx_xasprintf("$%s", var) : sbx_xasprintf("'%s'", file ? file : "?");
    /* The bridge asks for no key when the worker has none: an unset variable sends none. */
    c->has_key = !var || getenv(var) != NULL;
    struct sbx__endpoint_opts eo = {.url = c->url,
                                    .name = "the Cloudflare Sandbox Bridge",
                                    .ca_file = json_string_value(json_object_get(o, "ca_file")),
                                    .auth = c->has_key ? SBX__AUTH_BEARER : SBX__AUTH_NONE,
                                    .token = {.ref = c->has_key ? own : NULL},
                                    .http = SBX__HTTP_1_1,
                                    .max_retries = 3,
                                    .max_retry_wait_ms = 60000};
    int rc = sbx__endpoint_new(&eo, &c->ep, err);
    json_decref(own);
    if (rc < 0) {
        sbx__cf_conf_unref(c);
        return rc;
    }
    *out = c;
    return 0;
}

static int client_new_json(const json_t *options, struct sbx_client **out, struct sbx_error *err)
{
    struct sbx__cf_conf *conf = NULL;
    int rc = conf_new(options, &conf, err);
    if (rc < 0)
        return rc;
    struct cf_client *c = sbx_xcalloc(1, sizeof(*c));
    c->base.ops = &client_ops;
    c->base.provider = "cloudflare";
    c->conf = conf;
    c->ports = json_array();
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(options, "exposed_ports"), i, v)
            sbx_json_append(c->ports, json_integer(json_integer_value(v)));
    *out = &c->base;
    return 0;
}

static int check_state(const json_t *st, struct sbx_error *err)
{
    const char *id = NULL, *root = NULL;
    int rc;
    if ((rc = sbx_json_get_string(st, "id", 1, &id, err)) < 0 ||
        (rc = sbx_json_get_string(st, "root", 1, &root, err)) < 0)
        return rc;
    if (!sbx__cf_valid_id(id))
        return sbx_error_set(err, SBX_E_INVAL, 0, "field 'id': '%s' is not a cloudflare sandbox id",
                             id);
    if (strcmp(root, SBX__CF_ROOT) != 0)
        return sbx_error_set(err, SBX_E_INVAL, 0, "field 'root' must be " SBX__CF_ROOT);
    return 0;
}

const struct sbx__provider_def sbx__provider_cloudflare = {
        .name = "cloudflare",
        .summary = "a sandbox (a Cloudflare container) behind the user's Sandbox Bridge worker, "
                   "over its HTTP API (key from $" KEY_VAR ")",
        .traits = SBX_PROVIDER_SNAPSHOTS | SBX_PROVIDER_PORTS | SBX_PROVIDER_RESUME,
        .options = cf_options,
        .client_new_json = client_new_json,
        .check_state = check_state,
};
