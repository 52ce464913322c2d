/* The LXD provider, client side: options, finding sandboxes again by their instances' config
 * (user.sbx.id), listing, stopping, starting, removing and resuming them, their leftovers, and
 * the provider's entry in the registry. The server is the only record: nothing is kept on
 * this host and nothing is left here when an instance goes. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "providers/lxd/client.h"
#include "providers/lxd/options.h"
#include "sandbox/session/internal.h"
#include "sbx/json.h"
#include "sbx/manifest.h"

#define DEFAULT_MEMORY ((uint64_t)2 << 30)
#define DEFAULT_PIDS   1024

static const char *network_name(enum sbx_lxd_network n)
{
    return n == SBX_LXD_NETWORK_PROFILE ? "profile" : "none";
}

json_t *sbx__lxd_options_json(const struct lx_client *c)
{
    json_t *o = json_object(), *profiles = json_array();
    sbx_json_set(o, "image", sbx_json_str(c->image));
    if (c->user)
        sbx_json_set(o, "user", sbx_json_str(c->user));
    if (c->target)
        sbx_json_set(o, "target", sbx_json_str(c->target));
    if (c->port_bind)
        sbx_json_set(o, "port_bind", sbx_json_str(c->port_bind));
    sbx_json_set(o, "network", sbx_json_str(network_name(c->network)));
    for (size_t i = 0; i < c->profiles.n; i++)
        sbx_json_append(profiles, sbx_json_str(c->profiles.v[i]));
    sbx_json_set(o, "profile", profiles);
    const uint64_t vals[] = {c->memory, c->pids, c->cpu_millis, c->disk};
    static const char *const names[] = {"memory", "pids", "cpu_millis", "disk"};
    for (size_t i = 0; i < 4; i++)
        if (vals[i])
            sbx_json_set(o, names[i],
                         vals[i] == SBX_LXD_LIMIT_NONE ? sbx_json_str("none")
                                                       : json_integer((json_int_t)vals[i]));
    sbx_json_set(o, "privileged", json_boolean(c->privileged));
    sbx_json_set(o, "nesting", json_boolean(c->nesting));
    return o;
}

/* ---------------------------------------------------------------------------------------------
 * Finding sandboxes */

static const char *cfg_str(const json_t *inst, const char *key)
{
    return json_string_value(json_object_get(json_object_get(inst, "config"), key));
}

static const char *sandbox_id(const json_t *inst)
{
    const char *id = cfg_str(inst, "user.sbx.id");
    const char *name = json_string_value(json_object_get(inst, "name"));
    if (!id || !sbx__lxd_valid_id(id, 0) || !name || strncmp(name, SBX__LXD_PREFIX, 4) != 0 ||
        strcmp(name + 4, id) != 0)
        return NULL;
    return id;
}

static int is_running(const json_t *inst)
{
    const char *st = json_string_value(json_object_get(inst, "status"));
    return st && strcmp(st, "Running") == 0;
}

static int is_ready(const json_t *inst)
{
    const char *st = cfg_str(inst, "user.sbx.status");
    return st && strcmp(st, "ready") == 0;
}

/* Every sbx instance of the project, described (recursion=1). */
static int list_instances(struct lx_client *c, json_t **out, struct sbx_error *err)
{
    json_t *all = NULL, *v, *res = json_array();
    size_t i;
    int rc = sbx__lxd_json(&c->sv, "GET", "/1.0/instances?recursion=1", NULL, &all, NULL, err);
    if (rc == 0 && !json_is_array(all))
        rc = sbx_error_set(err, SBX_E_PARSE, 0, "LXD's instance list is not a list");
    json_array_foreach(all, i, v) if (rc == 0 && sandbox_id(v))
            sbx_json_append(res, json_incref(v));
    json_decref(all);
    if (rc < 0) {
        json_decref(res);
        return rc;
    }
    *out = res;
    return 0;
}

int sbx__lxd_find(struct lx_client *c, const char *prefix, json_t **inst, struct sbx_error *err)
{
    if (!sbx__lxd_valid_id(prefix, 1))
        return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a sandbox id", prefix);
    json_t *arr = NULL, *v;
    size_t i, n = strlen(prefix);
    int rc;
    if (n == SBX__LXD_ID_LEN) {
        char *name = sbx_xasprintf(SBX__LXD_PREFIX "%s", prefix);
        char *path = sbx__lxd_inst_path(name, NULL);
        rc = sbx__lxd_json(&c->sv, "GET", path, NULL, inst, NULL, err);
        free(path);
        free(name);
        if (rc == -SBX_E_NOTFOUND || (rc == 0 && !sandbox_id(*inst))) {
            if (rc == 0)
                json_decref(*inst);
            rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "no sandbox '%s'", prefix);
        }
        return rc;
    }
    if ((rc = list_instances(c, &arr, err)) < 0)
        return rc;
    const json_t *found = NULL;
    int many = 0;
    json_array_foreach(arr, i, v)
    {
        if (strncmp(sandbox_id(v), prefix, n) == 0) {
            many |= found != NULL;
            found = v;
        }
    }
    if (!found)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "no sandbox '%s'", prefix);
    else if (many)
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "sandbox id '%s' is ambiguous", prefix);
    else
        *inst = json_incref((json_t *)found);
    json_decref(arr);
    return rc;
}

static int session_of(struct lx_client *c, const json_t *inst, struct sbx_session **out,
                      struct sbx_error *err)
{
    struct sbx__lxd_session *s = NULL;
    int rc = sbx__lxd_session_from(&c->sv, inst, &s, err);
    if (rc == 0)
        *out = &s->base;
    return rc;
}

static int lc_attach(struct sbx_client *bc, const char *prefix, struct sbx_session **out,
                     struct sbx_error *err)
{
    struct lx_client *c = (struct lx_client *)bc;
    json_t *inst = NULL;
    int rc = sbx__lxd_find(c, prefix, &inst, err);
    const char *id = rc == 0 ? sandbox_id(inst) : NULL;
    if (rc == 0 && !is_ready(inst))
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0,
                           "sandbox '%s' is not ready (its creation did "
                           "not finish: sbx sandbox prune)",
                           id);
    if (rc == 0 && !is_running(inst))
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "sandbox '%s' is stopped (sbx sandbox start %s)",
                           id, id);
    if (rc == 0)
        rc = session_of(c, inst, out, err);
    json_decref(inst);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * List, remove, stop, start, resume */

static int cmp_created(const void *a, const void *b)
{
    const char *x = json_string_value(json_object_get(*(json_t *const *)a, "created"));
    const char *y = json_string_value(json_object_get(*(json_t *const *)b, "created"));
    return strcmp(x ? x : "", y ? y : "");
}

/* The state objects of the sandboxes, sorted by creation; with all, those not ready too (and
 * their status: live, stopped, creating or dead). */
static int states(struct lx_client *c, int all, json_t **out, struct sbx_error *err)
{
    json_t *arr = NULL, *v, *res = json_array();
    size_t i, n = 0;
    int rc = sbx__lxd_check_server(&c->sv, NULL, err);
    if (rc == 0)
        rc = list_instances(c, &arr, err);
    if (rc < 0) {
        json_decref(res);
        return rc;
    }
    json_t **items = sbx_xcalloc(json_array_size(arr) + 1, sizeof(*items));
    json_array_foreach(arr, i, v)
    {
        struct sbx__lxd_session *s = NULL;
        struct sbx_error ignored = SBX_ERROR_INIT;
        const char *status = !is_ready(v) ? "creating" : is_running(v) ? "live" : "stopped";
        if (!is_ready(v)) {
            /* A creation whose process ended (on this host) or that is long gone left it. */
            const char *creator = cfg_str(v, "user.sbx.creator"), *sp;
            char host[256] = "";
            (void)gethostname(host, sizeof(host) - 1);
            long pid = creator && (sp = strrchr(creator, ' ')) ? strtol(sp + 1, NULL, 10) : 0;
            if (!creator || strncmp(creator, host, strlen(host)) != 0 ||
                creator[strlen(host)] != ' ' || pid <= 0 ||
                (kill((pid_t)pid, 0) < 0 && errno == ESRCH))
                status = "dead";
        }
        if ((!all && strcmp(status, "live") != 0 && strcmp(status, "stopped") != 0) ||
            sbx__lxd_session_from(&c->sv, v, &s, &ignored) < 0)
            continue;
        json_t *st = json_deep_copy(s->state);
        if (all || strcmp(status, "live") != 0)
            sbx_json_set(st, "status", sbx_json_str(status));
        items[n++] = st;
        sbx__lxd_session_free(s);
    }
    qsort(items, n, sizeof(*items), cmp_created);
    for (i = 0; i < n; i++)
        sbx_json_append(res, items[i]);
    free(items);
    json_decref(arr);
    *out = res;
    return 0;
}

static int lc_list(struct sbx_client *bc, json_t **out, struct sbx_error *err)
{
    return states((struct lx_client *)bc, 0, out, err);
}

static int lc_list_all(struct sbx_client *bc, json_t **out, struct sbx_error *err)
{
    return states((struct lx_client *)bc, 1, out, err);
}

static int lc_remove(struct sbx_client *bc, const char *prefix, int keep_workspace,
                     struct sbx_error *err)
{
    struct lx_client *c = (struct lx_client *)bc;
    json_t *inst = NULL;
    if (keep_workspace)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "an lxd sandbox's workspace is in its instance: it goes with it");
    int rc = sbx__lxd_find(c, prefix, &inst, err);
    if (rc == 0)
        rc = sbx__lxd_inst_delete(&c->sv, json_string_value(json_object_get(inst, "name")), err);
    json_decref(inst);
    return rc;
}

/* Remove the instances whose creation died half-way. */
static int lc_prune(struct sbx_client *bc, int keep_workspace, json_t **out, struct sbx_error *err)
{
    struct lx_client *c = (struct lx_client *)bc;
    json_t *all = NULL, *v, *done = json_array();
    size_t i;
    (void)keep_workspace;
    int rc = states(c, 1, &all, err);
    json_array_foreach(all, i, v)
    {
        const char *status = json_string_value(json_object_get(v, "status"));
        const char *name = json_string_value(json_object_get(v, "instance"));
        struct sbx_error e = SBX_ERROR_INIT;
        if (rc < 0 || !status || strcmp(status, "dead") != 0 || !name)
            continue;
        if (sbx__lxd_inst_delete(&c->sv, name, &e) == 0)
            sbx_json_append(done, json_pack("{s:O,s:s,s:s}", "sandbox", json_object_get(v, "id"),
                                            "kind", "lxd-instance", "path", name));
    }
    json_decref(all);
    if (rc == 0 && out)
        *out = done;
    else
        json_decref(done);
    return rc;
}

static int lc_stop(struct sbx_client *bc, const char *prefix, char **out_ref, struct sbx_error *err)
{
    struct lx_client *c = (struct lx_client *)bc;
    json_t *inst = NULL;
    int rc = sbx__lxd_find(c, prefix, &inst, err);
    if (rc == 0 && !is_running(inst))
        rc = sbx_error_set(err, SBX_E_EXISTS, 0, "sandbox '%s' is already stopped",
                           sandbox_id(inst));
    /* The stopped instance keeps the workspace: no snapshot is taken. */
    if (rc == 0)
        rc = sbx__lxd_inst_state(&c->sv, json_string_value(json_object_get(inst, "name")), "stop",
                                 err);
    if (rc == 0 && out_ref)
        *out_ref = NULL;
    json_decref(inst);
    return rc;
}

/* A session on inst, started first when it is stopped. */
static int running_session(struct lx_client *c, json_t *inst, struct sbx_session **out,
                           struct sbx_error *err)
{
    const char *name = json_string_value(json_object_get(inst, "name"));
    json_t *fresh = NULL;
    int rc = 0;
    if (!is_running(inst)) {
        char *path = sbx__lxd_inst_path(name, NULL);
        if ((rc = sbx__lxd_inst_state(&c->sv, name, "start", err)) == 0 &&
            (rc = sbx__lxd_inst_boot(&c->sv, name, sandbox_id(inst), err)) == 0)
            rc = sbx__lxd_json(&c->sv, "GET", path, NULL, &fresh, NULL, err);
        free(path);
    }
    if (rc == 0)
        rc = session_of(c, fresh ? fresh : inst, out, err);
    json_decref(fresh);
    return rc;
}

static int lc_start(struct sbx_client *bc, const char *prefix, const struct sbx_resume_opts *opts,
                    struct sbx_session **out, struct sbx_error *err)
{
    struct lx_client *c = (struct lx_client *)bc;
    json_t *inst = NULL;
    (void)opts;
    int rc = sbx__lxd_find(c, prefix, &inst, err);
    if (rc == 0)
        rc = running_session(c, inst, out, err);
    json_decref(inst);
    return rc;
}

static int lc_stopped_state(struct sbx_client *bc, const char *prefix, json_t **out,
                            struct sbx_error *err)
{
    struct lx_client *c = (struct lx_client *)bc;
    json_t *inst = NULL;
    struct sbx__lxd_session *s = NULL;
    int rc = sbx__lxd_find(c, prefix, &inst, err);
    if (rc == 0 && is_running(inst))
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "sandbox '%s' is not stopped", sandbox_id(inst));
    if (rc == 0)
        rc = sbx__lxd_session_from(&c->sv, inst, &s, err);
    if (rc == 0) {
        *out = json_deep_copy(s->state);
        sbx_json_set(*out, "status", sbx_json_str("stopped"));
    }
    sbx__lxd_session_free(s);
    json_decref(inst);
    return rc;
}

static int lc_resume(struct sbx_client *bc, const json_t *state, const struct sbx_resume_opts *opts,
                     struct sbx_session **out, struct sbx_error *err)
{
    struct lx_client *c = (struct lx_client *)bc;
    const char *id = json_string_value(json_object_get(state, "id"));
    const char *snap = json_string_value(json_object_get(state, "snapshot"));
    const struct sbx_resume_opts none = {0};
    json_t *inst = NULL;
    int rc = sbx__lxd_find(c, id, &inst, err);
    if (rc == -SBX_E_NOTFOUND && snap)
        return sbx__client_rebuild(bc, state, snap, opts ? opts : &none,
                                   SBX_MANIFEST_CONTENT_DIGESTS, SBX__REBUILD_KEEP_ID, out, err);
    if (rc == -SBX_E_NOTFOUND)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0,
                           "sandbox '%s' is gone and its state has no snapshot", id);
    if (rc == 0)
        rc = running_session(c, inst, out, err);
    json_decref(inst);
    return rc;
}

static void lc_free(struct sbx_client *bc)
{
    struct lx_client *c = (struct lx_client *)bc;
    sbx__lxd_server_release(&c->sv);
    free(c->image);
    free(c->user);
    free(c->target);
    free(c->port_bind);
    sbx_strv_release(&c->profiles);
    free(c);
}

static const struct sbx_client_ops client_ops = {
        .create = sbx__lxd_create,
        .attach = lc_attach,
        .list = lc_list,
        .remove = lc_remove,
        .list_all = lc_list_all,
        .prune = lc_prune,
        .resume = lc_resume,
        .stop = lc_stop,
        .start = lc_start,
        .stopped_state = lc_stopped_state,
        .free = lc_free,
};

static int valid_name(const char *s)
{
    size_t n = strlen(s);
    return n > 0 && n <= 63 &&
           strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.@") == n;
}

static int check_options(const struct sbx_lxd_options *o, struct sbx_error *err)
{
    if (o->network > SBX_LXD_NETWORK_PROFILE)
        return sbx_error_set(err, SBX_E_INVAL, 0, "unknown lxd network mode %d", (int)o->network);
    if (o->image && (!o->image[0] || strlen(o->image) > 255 || strchr(o->image, '/')))
        return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not an lxd image alias or fingerprint",
                             o->image);
    if (o->user && !o->user[0])
        return sbx_error_set(err, SBX_E_INVAL, 0, "empty user name");
    if (o->target && !valid_name(o->target))
        return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a cluster member or @group",
                             o->target);
    if (o->n_profiles > SBX_LXD_MAX_PROFILES)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "more than %d lxd profiles",
                             SBX_LXD_MAX_PROFILES);
    for (size_t i = 0; i < o->n_profiles; i++)
        if (!o->profiles || !o->profiles[i] || !valid_name(o->profiles[i]))
            return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not an lxd profile name",
                                 o->profiles && o->profiles[i] ? o->profiles[i] : "");
    if (o->n_exposed_ports > SBX_LXD_MAX_EXPOSED_PORTS)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "more than %d exposed ports",
                             SBX_LXD_MAX_EXPOSED_PORTS);
    for (size_t i = 0; i < o->n_exposed_ports; i++)
        if (!o->exposed_ports || o->exposed_ports[i] < 1 || o->exposed_ports[i] > 65535)
            return sbx_error_set(err, SBX_E_INVAL, 0, "exposed port %d is not in 1..65535",
                                 o->exposed_ports ? o->exposed_ports[i] : 0);
    if (o->port_bind && (!o->port_bind[0] ||
                         strspn(o->port_bind, "0123456789abcdefABCDEF.:") != strlen(o->port_bind)))
        return sbx_error_set(err, SBX_E_INVAL, 0, "port_bind '%s' is not an IP address",
                             o->port_bind);
    return 0;
}

static int client_new(const void *vopts, struct sbx_client **out, struct sbx_error *err)
{
    const struct sbx_lxd_options none = {0};
    const struct sbx_lxd_options *o = vopts ? vopts : &none;
    int rc = check_options(o, err);
    if (rc < 0)
        return rc;
    struct lx_client *c = sbx_xcalloc(1, sizeof(*c));
    c->base.ops = &client_ops;
    c->base.provider = "lxd";
    sbx_strv_init(&c->profiles);
    if ((rc = sbx__lxd_server_init(&c->sv, o, err)) < 0) {
        free(c);
        return rc;
    }
    c->image = o->image ? sbx_xstrdup(o->image) : NULL;
    c->user = o->user ? sbx_xstrdup(o->user) : NULL;
    c->target = o->target ? sbx_xstrdup(o->target) : NULL;
    c->port_bind = o->port_bind ? sbx_xstrdup(o->port_bind) : NULL;
    for (size_t i = 0; i < o->n_profiles; i++)
        sbx_strv_push(&c->profiles, o->profiles[i]);
    if (!c->profiles.n)
        sbx_strv_push(&c->profiles, "default");
    c->network = o->network == SBX_LXD_NETWORK_PROFILE ? o->network : SBX_LXD_NETWORK_NONE;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    c->memory = o->memory_bytes ? o->memory_bytes : DEFAULT_MEMORY;
    c->pids = o->pids ? o->pids : DEFAULT_PIDS;
    c->cpu_millis = o->cpu_millis ? o->cpu_millis : (uint64_t)(cpus > 1 ? cpus / 2 : 1) * 1000;
    c->disk = o->disk_bytes;
    c->privileged = o->privileged;
    c->nesting = o->nesting;
    for (size_t i = 0; i < o->n_exposed_ports; i++)
        c->ports[c->n_ports++] = o->exposed_ports[i];
    *out = &c->base;
    return 0;
}

/* The lxd-specific part of a session state: never a credential, only where the sandbox is. */
static int check_state(const json_t *st, struct sbx_error *err)
{
    const char *id = NULL, *inst = NULL, *root = NULL, *project = NULL, *endpoint = NULL;
    int rc;
    if ((rc = sbx_json_get_string(st, "id", 1, &id, err)) < 0 ||
        (rc = sbx_json_get_string(st, "instance", 1, &inst, err)) < 0 ||
        (rc = sbx_json_get_string(st, "root", 1, &root, err)) < 0 ||
        (rc = sbx_json_get_string(st, "project", 1, &project, err)) < 0 ||
        (rc = sbx_json_get_string(st, "endpoint", 0, &endpoint, err)) < 0)
        return rc;
    if (!sbx__lxd_valid_id(id, 0))
        return sbx_error_set(err, SBX_E_INVAL, 0, "field 'id': '%s' is not a sandbox id", id);
    if (strncmp(inst, SBX__LXD_PREFIX, 4) != 0 || strcmp(inst + 4, id) != 0)
        return sbx_error_set(err, SBX_E_INVAL, 0, "field 'instance' must be sbx-<id>");
    if (root[0] != '/')
        return sbx_error_set(err, SBX_E_INVAL, 0, "field 'root' must be an absolute path");
    if (!project[0])
        return sbx_error_set(err, SBX_E_INVAL, 0, "field 'project' must not be empty");
    return 0;
}

const struct sbx__provider_def sbx__provider_lxd = {
        .name = "lxd",
        .summary = "a container instance of an LXD (or Incus) server or cluster, through its "
                   "REST API on its unix socket or over https with client certificates",
        .traits = SBX_PROVIDER_ACCOUNTS | SBX_PROVIDER_SNAPSHOTS | SBX_PROVIDER_NATIVE_SNAPSHOTS |
                  SBX_PROVIDER_STOP_START | SBX_PROVIDER_PTY | SBX_PROVIDER_PORTS |
                  SBX_PROVIDER_LISTS | SBX_PROVIDER_RESUME,
        .options = sbx__lxd_options,
        .client_new = client_new,
        .client_new_json = sbx__lxd_client_new_json,
        .options_check = sbx__lxd_options_check,
        .probe = sbx__lxd_probe,
        .check_state = check_state,
};
