/* LXD instances as sessions: an instance's config (user.sbx.*) into a session and its state,
 * the session ops that are not commands or files (state, close, ports through proxy devices),
 * and the small instance calls the client shares. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "providers/lxd/exec.h"
#include "sandbox/session/internal.h"
#include "sbx/hash.h"
#include "sbx/json.h"

#define PORT_TRIES    8
#define PORT_LOW      20000
#define PORT_SPAN     40000
#define NET_TABLE_MAX ((size_t)16 << 20)

char *sbx__lxd_inst_path(const char *name, const char *rest)
{
    char *q = sbx__lxd_escape(name, 0);
    char *p = sbx_xasprintf("/1.0/instances/%s%s", q, rest ? rest : "");
    free(q);
    return p;
}

int sbx__lxd_valid_id(const char *id, int prefix)
{
    size_t n = strlen(id);
    if (n == 0 || n > SBX__LXD_ID_LEN || (!prefix && n != SBX__LXD_ID_LEN))
        return 0;
    return strspn(id, "0123456789abcdef") == n;
}

int sbx__lxd_inst_state(const struct sbx__lxd_server *sv, const char *name, const char *action,
                        struct sbx_error *err)
{
    json_t *body = json_pack("{s:s,s:i,s:b}", "action", action, "timeout", 30, "force",
                             strcmp(action, "stop") == 0);
    char *path = sbx__lxd_inst_path(name, "/state");
    int rc = sbx__lxd_json_wait(sv, "PUT", path, body, NULL, err);
    free(path);
    json_decref(body);
    return rc;
}

int sbx__lxd_inst_boot(const struct sbx__lxd_server *sv, const char *name, const char *id,
                       struct sbx_error *err)
{
    const char *argv[] = {"/bin/sh", "-c", SBX__LXD_LOOPBACK_UP "; exit 0", NULL};
    return sbx__lxd_exec_detached(sv, name, id, argv, err);
}

/* ---------------------------------------------------------------------------------------------
 * Ports: a proxy device per port, listening on the member's side */

/* The address proxies of the instance listen on: the client's port_bind, else the member's
 * own address in a cluster (where the instance runs), else loopback. */
static int listen_address(struct sbx__lxd_session *s, char **out, struct sbx_error *err)
{
    const char *bind =
            json_string_value(json_object_get(json_object_get(s->state, "options"), "port_bind"));
    if (bind) {
        *out = sbx_xstrdup(bind);
        return 0;
    }
    if (!s->location[0] || strcmp(s->location, "none") == 0) {
        *out = sbx_xstrdup("127.0.0.1");
        return 0;
    }
    char *q = sbx__lxd_escape(s->location, 0);
    char *path = sbx_xasprintf("/1.0/cluster/members/%s", q);
    json_t *md = NULL;
    int rc = sbx__lxd_json(&s->sv, "GET", path, NULL, &md, NULL, err);
    const char *url = json_string_value(json_object_get(md, "url"));
    if (rc == 0 && (!url || strncmp(url, "https://", 8) != 0))
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "cluster member '%s' has no address",
                           s->location);
    if (rc == 0) {
        const char *h = url + 8;
        size_t n = h[0] == '[' ? strcspn(h, "]") + 1 : strcspn(h, ":/");
        *out = sbx_xstrndup(h, n);
    }
    json_decref(md);
    free(path);
    free(q);
    return rc;
}

/* Whether something in the instance listens on port, from its own socket tables. */
static int port_listens(struct sbx__lxd_session *s, int port, int *out, struct sbx_error *err)
{
    static const char *const argv[] = {"cat", "/proc/net/tcp", "/proc/net/tcp6", NULL};
    struct sbx__lxd_run r;
    sbx__lxd_run_init(&r, NET_TABLE_MAX);
    int rc = sbx__lxd_exec_run(s, argv, &r, err);
    if (rc == 0)
        *out = sbx__net_table_listens(r.out.data ? r.out.data : "", r.out.len, port);
    sbx__lxd_run_release(&r);
    return rc;
}

/* The URL of an existing proxy device of port, or NULL. */
static char *existing_proxy(const json_t *inst, int port)
{
    char dev[32];
    snprintf(dev, sizeof(dev), "sbx-port-%d", port);
    const json_t *d = json_object_get(json_object_get(inst, "devices"), dev);
    const char *listen = json_string_value(json_object_get(d, "listen"));
    if (!listen || strncmp(listen, "tcp:", 4) != 0)
        return NULL;
    return sbx_xasprintf("http://%s", listen + 4);
}

static int add_proxy(struct sbx__lxd_session *s, int port, const char *addr, char **out_url,
                     struct sbx_error *err)
{
    char *path = sbx__lxd_inst_path(s->name, NULL);
    char dev[32], connect[64];
    int rc = -SBX_E_SANDBOX;
    snprintf(dev, sizeof(dev), "sbx-port-%d", port);
    snprintf(connect, sizeof(connect), "tcp:127.0.0.1:%d", port);
    for (int i = 0; i < PORT_TRIES; i++) {
        uint32_t r = 0;
        if ((rc = sbx_random_bytes(&r, sizeof(r), err)) < 0)
            break;
        int hp = PORT_LOW + (int)(r % PORT_SPAN);
        int v6 = strchr(addr, ':') != NULL && addr[0] != '[';
        char *listen = sbx_xasprintf(v6 ? "tcp:[%s]:%d" : "tcp:%s:%d", addr, hp);
        json_t *body = json_pack("{s:{s:{s:s,s:s,s:s,s:s}}}", "devices", dev, "type", "proxy",
                                 "listen", listen, "connect", connect, "bind", "host");
        /* A port in use on the member makes the device fail to start: another port then. */
        rc = sbx__lxd_json_wait(&s->sv, "PATCH", path, body, NULL, err);
        json_decref(body);
        if (rc == 0)
            *out_url = sbx_xasprintf("http://%s", listen + 4);
        free(listen);
        if (rc == 0 || rc == -SBX_E_NOTFOUND)
            break;
    }
    free(path);
    return rc;
}

int sbx__lxd_port_resolve(struct sbx__lxd_session *s, int port, char **out_url,
                          struct sbx_error *err)
{
    const json_t *ports = json_object_get(s->state, "exposed_ports");
    size_t i;
    json_t *v;
    int listed = json_array_size(ports) == 0, listens = 0;
    json_array_foreach(ports, i, v) listed |= json_integer_value(v) == port;
    if (!listed)
        return sbx_error_set(err, SBX_E_PERM, 0, "port %d is not among the exposed ports", port);
    char *path = sbx__lxd_inst_path(s->name, NULL), *addr = NULL;
    json_t *inst = NULL;
    int rc = sbx__lxd_json(&s->sv, "GET", path, NULL, &inst, NULL, err);
    free(path);
    if (rc == -SBX_E_NOTFOUND)
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "sandbox '%s' is gone", s->base.id);
    if (rc == 0 && (*out_url = existing_proxy(inst, port)) != NULL)
        goto out;
    if (rc == 0 && (rc = port_listens(s, port, &listens, err)) == 0 && !listens)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "nothing listens on port %d in sandbox '%s'",
                           port, s->base.id);
    if (rc == 0 && (rc = listen_address(s, &addr, err)) == 0)
        rc = add_proxy(s, port, addr, out_url, err);
out:
    json_decref(inst);
    free(addr);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Session ops */

static int sess_resolve_port(struct sbx_session *bs, int port, char **out_url,
                             struct sbx_error *err)
{
    return sbx__lxd_port_resolve((struct sbx__lxd_session *)bs, port, out_url, err);
}

static int sess_state(struct sbx_session *bs, json_t **out, struct sbx_error *err)
{
    struct sbx__lxd_session *s = (struct sbx__lxd_session *)bs;
    (void)err;
    *out = json_deep_copy(s->state);
    return 0;
}

int sbx__lxd_inst_delete(const struct sbx__lxd_server *sv, const char *name, struct sbx_error *err)
{
    struct sbx_error ignored = SBX_ERROR_INIT;
    /* A running instance cannot be deleted: stopped first (forced: nothing in it is kept). */
    (void)sbx__lxd_inst_state(sv, name, "stop", &ignored);
    char *path = sbx__lxd_inst_path(name, NULL);
    int rc = sbx__lxd_json_wait(sv, "DELETE", path, NULL, NULL, err);
    free(path);
    return rc;
}

static int sess_close(struct sbx_session *bs, int delete_workspace, struct sbx_error *err)
{
    struct sbx__lxd_session *s = (struct sbx__lxd_session *)bs;
    /* The workspace lives in the instance: keeping it means keeping the instance, stopped. */
    int rc = delete_workspace ? sbx__lxd_inst_delete(&s->sv, s->name, err)
                              : sbx__lxd_inst_state(&s->sv, s->name, "stop", err);
    if (rc == -SBX_E_NOTFOUND)
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "sandbox '%s' is gone", s->base.id);
    return rc;
}

static int sess_record_snapshot(struct sbx_session *bs, const char *ref, struct sbx_error *err)
{
    struct sbx__lxd_session *s = (struct sbx__lxd_session *)bs;
    (void)err;
    sbx_json_set(s->state, "snapshot", sbx_json_str(ref));
    return 0;
}

static void sess_free(struct sbx_session *bs)
{
    struct sbx__lxd_session *s = (struct sbx__lxd_session *)bs;
    if (!s)
        return;
    sbx__lxd_workspace_drop(s);
    sbx_session_release_base(&s->base);
    sbx__lxd_server_release(&s->sv);
    free(s->name);
    free(s->location);
    free(s->owner.name);
    free(s->owner.home);
    for (size_t i = 0; i < s->n_users; i++) {
        free(s->users[i].name);
        free(s->users[i].home);
    }
    free(s->users);
    json_decref(s->state);
    free(s);
}

void sbx__lxd_session_free(struct sbx__lxd_session *s)
{
    sess_free(s ? &s->base : NULL);
}

static const struct sbx_session_ops session_ops = {
        .exec_start = sbx__lxd_exec_start,
        .read_open = sbx__lxd_read_open,
        .write = sbx__lxd_write,
        .ls = sbx__lxd_ls,
        .stat = sbx__lxd_stat,
        .mkdir = sbx__lxd_mkdir,
        .rm = sbx__lxd_rm,
        .chmod = sbx__lxd_chmod,
        .chgrp = sbx__lxd_chgrp,
        .resolve_port = sess_resolve_port,
        .state = sess_state,
        .close = sess_close,
        .workspace_fd = sbx__lxd_workspace_fd,
        .record_snapshot = sess_record_snapshot,
        .workspace_export = sbx__lxd_workspace_export,
        .workspace_import = sbx__lxd_workspace_import,
        .free = sess_free,
};

/* ---------------------------------------------------------------------------------------------
 * From an instance */

static json_t *config_json(const json_t *config, const char *key)
{
    const char *v = json_string_value(json_object_get(config, key));
    return v ? json_loads(v, JSON_REJECT_DUPLICATES, NULL) : NULL;
}

/* "name": [uid, gid, home] of the accounts the setup found or made, into an account. */
static int account_of(const json_t *accounts, const char *name, struct sbx__lxd_account *a)
{
    const json_t *ids = json_object_get(accounts, name);
    const char *home = json_string_value(json_array_get(ids, 2));
    if (!json_is_array(ids) || json_array_size(ids) != 3 ||
        !json_is_integer(json_array_get(ids, 0)) || !json_is_integer(json_array_get(ids, 1)))
        return -1;
    a->name = sbx_xstrdup(name);
    a->uid = (long)json_integer_value(json_array_get(ids, 0));
    a->gid = (long)json_integer_value(json_array_get(ids, 1));
    a->home = home && home[0] == '/' ? sbx_xstrdup(home) : NULL;
    return 0;
}

static void take_accounts(struct sbx__lxd_session *s, const json_t *config)
{
    json_t *acc = config_json(config, "user.sbx.accounts");
    const char *owner = json_string_value(json_object_get(config, "user.sbx.owner"));
    json_t *users = config_json(config, "user.sbx.users"), *v;
    size_t i;
    if (!owner || !owner[0] || account_of(acc, owner, &s->owner) < 0)
        s->owner = (struct sbx__lxd_account){.name = sbx_xstrdup("root")};
    s->users = sbx_xcalloc(json_array_size(users) + 1, sizeof(*s->users));
    json_array_foreach(users, i, v)
    {
        if (json_is_string(v) && account_of(acc, json_string_value(v), &s->users[s->n_users]) == 0)
            s->n_users++;
    }
    const char *setsid = json_string_value(json_object_get(config, "user.sbx.setsid"));
    s->setsid = setsid && strcmp(setsid, "true") == 0;
    json_decref(users);
    json_decref(acc);
}

static json_t *state_of(const json_t *inst, const json_t *config, const char *id, const char *root,
                        const struct sbx__lxd_server *sv)
{
    json_t *st = json_object();
    json_t *opts = config_json(config, "user.sbx.options");
    json_t *ports = config_json(config, "user.sbx.ports");
    json_t *manifest = config_json(config, "user.sbx.manifest");
    const char *snap = json_string_value(json_object_get(config, "user.sbx.snapshot"));
    const char *loc = json_string_value(json_object_get(inst, "location"));
    sbx_json_set(st, "version", json_integer(SBX_SESSION_STATE_VERSION));
    sbx_json_set(st, "provider", sbx_json_str("lxd"));
    sbx_json_set(st, "id", sbx_json_str(id));
    sbx_json_set(st, "created",
                 sbx_json_str(json_string_value(json_object_get(config, "user.sbx.created"))));
    sbx_json_set(st, "root", sbx_json_str(root));
    sbx_json_set(st, "instance", sbx_json_str(json_string_value(json_object_get(inst, "name"))));
    sbx_json_set(st, "project", sbx_json_str(sv->project));
    sbx_json_set(st, "endpoint", sbx_json_str(sv->url));
    sbx_json_set(st, "location", sbx_json_str(loc ? loc : ""));
    sbx_json_set(st, "network",
                 sbx_json_str(json_string_value(json_object_get(opts, "network"))
                                      ? json_string_value(json_object_get(opts, "network"))
                                      : "none"));
    sbx_json_set(st, "workspace_owned", json_true());
    sbx_json_set(st, "options", json_is_object(opts) ? json_incref(opts) : json_object());
    sbx_json_set(st, "exposed_ports", json_is_array(ports) ? json_incref(ports) : json_array());
    sbx_json_set(st, "manifest", json_is_object(manifest) ? json_incref(manifest) : json_null());
    /* The snapshot it was made from, until one is taken of it. */
    sbx_json_set(st, "snapshot",
                 snap && strncmp(snap, "sha256:", 7) == 0 && strlen(snap) == 71 ? sbx_json_str(snap)
                                                                                : json_null());
    json_decref(opts);
    json_decref(ports);
    json_decref(manifest);
    return st;
}

int sbx__lxd_session_from(const struct sbx__lxd_server *sv, const json_t *inst,
                          struct sbx__lxd_session **out, struct sbx_error *err)
{
    const json_t *config = json_object_get(inst, "config");
    const char *name = json_string_value(json_object_get(inst, "name"));
    const char *id = json_string_value(json_object_get(config, "user.sbx.id"));
    const char *root = json_string_value(json_object_get(config, "user.sbx.root"));
    const char *created = json_string_value(json_object_get(config, "user.sbx.created"));
    const char *loc = json_string_value(json_object_get(inst, "location"));
    if (!name || !id || !sbx__lxd_valid_id(id, 0) || strncmp(name, SBX__LXD_PREFIX, 4) != 0 ||
        strcmp(name + 4, id) != 0 || !root || root[0] != '/' || !created)
        return sbx_error_set(err, SBX_E_SANDBOX, 0, "instance '%s' is not an sbx sandbox",
                             name ? name : "?");
    struct sbx__lxd_session *s = sbx_xcalloc(1, sizeof(*s));
    sbx_session_init_base(&s->base, &session_ops, "lxd", id, root);
    sbx__lxd_server_copy(&s->sv, sv);
    s->name = sbx_xstrdup(name);
    s->location = sbx_xstrdup(loc && strcmp(loc, "none") != 0 ? loc : "");
    s->ws_fd = -1;
    take_accounts(s, config);
    s->state = state_of(inst, config, id, root, sv);
    *out = s;
    return 0;
}
