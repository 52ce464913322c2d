/* The Docker provider, client side: options, creating a sandbox (container create, start,
 * accounts, the manifest materialised), finding sandboxes again by their labels, listing,
 * stopping, starting and removing them, and the session state.
 *
 * The engine is the only record: a sandbox is the container named sbx-<id> with the label
 * io.sbx.id=<id>; everything a later process needs to attach (root, owner, options, ports,
 * the manifest without secret values when it is small) is in its labels, so nothing is kept on
 * this host and nothing is left here when the container goes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "providers/docker/docker.h"
#include "providers/docker/options.h"
#include "providers/docker/relay.h"
#include "sandbox/materialize/materialize.h"
#include "sandbox/session/internal.h"
#include "sbx/fs.h"
#include "sbx/hash.h"
#include "sbx/json.h"
#include "sbx/log.h"
#include "sbx/manifest.h"
#include "sbx/snapshot.h"
#include "sbx/strv.h"
#include "sbx/time.h"

#ifndef SBX_VERSION
#    define SBX_VERSION "0"
#endif

#define ID_LEN         (2 * SBX__DK_ID_BYTES)
#define DEFAULT_ROOT   "/workspace"
#define DEFAULT_MEMORY ((uint64_t)2 << 30)
#define DEFAULT_PIDS   1024
#define STOP_TIMEOUT_S 2
#define NOFILE_MAX     65536
#define NPROC_MAX      32768
#define SETUP_OUT_MAX  65536
#define CAP_NAME_MAX   32

/* Capabilities of the engines' default set that sandboxed code has no use for. */
static const char *const cap_drop[] = {"NET_RAW", "MKNOD", "AUDIT_WRITE", "SETFCAP", NULL};

struct dk_client {
    struct sbx_client base;
    struct sbx__dk_engine eng;
    char *image, *user;
    enum sbx_docker_network network;
    uint64_t memory, pids, cpu_millis;
    uint64_t disk;     /* the writable layer's limit; SBX_DOCKER_LIMIT_NONE: none */
    int disk_explicit; /* given by the caller: must be enforced */
    struct sbx_strv cap_add;
    int ports[SBX_DOCKER_MAX_EXPOSED_PORTS];
    size_t n_ports;
};

static const char *network_name(enum sbx_docker_network n)
{
    switch (n) {
    case SBX_DOCKER_NETWORK_BRIDGE:
        return "bridge";
    case SBX_DOCKER_NETWORK_HOST:
        return "host";
    case SBX_DOCKER_NETWORK_DEFAULT:
    case SBX_DOCKER_NETWORK_NONE:
        break;
    }
    return "none";
}

static int valid_id(const char *id, int prefix)
{
    size_t n = strlen(id);
    if (n == 0 || n > ID_LEN || (!prefix && n != ID_LEN))
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f')))
            return 0;
    return 1;
}

static int valid_container_id(const char *id)
{
    size_t n = strlen(id);
    if (n != 64)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f')))
            return 0;
    return 1;
}

static int inspect(const struct sbx__dk_engine *e, const char *container, json_t **out,
                   struct sbx_error *err);

/* ---------------------------------------------------------------------------------------------
 * Sessions */

/* Whether something in the container listens on port, from its own socket tables (the
 * container's network namespace, whatever the network mode). */
static int port_listens(struct sbx__dk_session *s, int port, int *out, struct sbx_error *err)
{
    static const char *const argv[] = {"cat", "/proc/net/tcp", "/proc/net/tcp6", NULL};
    struct sbx__dk_run r;
    sbx__dk_run_init(&r, (size_t)16 << 20);
    /* cat fails on a kernel without IPv6 (no tcp6) but has printed tcp: the text decides. */
    int rc = sbx__dk_exec_run(s, argv, NULL, 0, &r, err);
    if (rc == 0)
        *out = sbx__net_table_listens(r.out.data, r.out.len, port);
    sbx__dk_run_release(&r);
    return rc;
}

/* A tcp:// engine may still run on this host (the relay then works as for a socket): the
 * container's init is then a process here whose cgroup names the container. */
static int pid_is_here(pid_t pid, const char *container)
{
    char path[64];
    struct sbx_buf b;
    snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
    sbx_buf_init(&b, 65536);
    int here = sbx_fs_read_path(path, 65536, &b, NULL) == 0 && b.data && strstr(b.data, container);
    sbx_buf_release(&b);
    return here;
}

static int sess_resolve_port(struct sbx_session *bs, int port, char **out_url,
                             struct sbx_error *err)
{
    struct sbx__dk_session *s = (struct sbx__dk_session *)bs;
    const json_t *ports = json_object_get(s->state, "exposed_ports");
    size_t i;
    json_t *v;
    int listed = json_array_size(ports) == 0;
    json_array_foreach(ports, i, v) listed |= json_integer_value(v) == port;
    if (!listed)
        return sbx_error_set(err, SBX_E_PERM, 0, "port %d is not among the exposed ports", port);
    /* The relay enters the network namespace of the container's init, seen from this host. */
    json_t *insp = NULL;
    int rc = inspect(&s->eng, s->container, &insp, err);
    json_t *st = json_object_get(insp, "State");
    json_int_t pid = json_integer_value(json_object_get(st, "Pid"));
    if (rc == 0 && (!json_is_true(json_object_get(st, "Running")) || pid <= 0))
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "sandbox '%s' is not running", s->base.id);
    if (rc == 0 && !s->eng.sock && !pid_is_here((pid_t)pid, s->container))
        rc = sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                           "sandbox '%s' is on the engine at '%s', not on this host: its ports "
                           "cannot be reached from here",
                           s->base.id, s->eng.where);
    int listens = 0;
    if (rc == 0 && (rc = port_listens(s, port, &listens, err)) == 0 && !listens)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "nothing listens on port %d in sandbox '%s'",
                           port, s->base.id);
    if (rc == 0)
        rc = sbx__docker_relay_start(s->base.id, (pid_t)pid, port, out_url, err);
    json_decref(insp);
    return rc;
}

static int sess_state(struct sbx_session *bs, json_t **out, struct sbx_error *err)
{
    struct sbx__dk_session *s = (struct sbx__dk_session *)bs;
    (void)err;
    *out = json_deep_copy(s->state);
    return 0;
}

/* Removes the container of sandbox ID with its volumes. Once it is removed, or was gone
 * already, its port relays have ended with its init and their records go too. Returns the
 * removal's result (-SBX_E_NOTFOUND when it was gone), else the forgetting's error. */
static int remove_sandbox(const struct sbx__dk_engine *e, const char *container, const char *id,
                          struct sbx_error *err)
{
    char *path = sbx_xasprintf("/containers/%s?force=true&v=true", container);
    int rc = sbx__dk_json(e, "DELETE", path, NULL, NULL, NULL, err);
    free(path);
    if (rc == 0 || rc == -SBX_E_NOTFOUND) {
        struct sbx_error ferr = SBX_ERROR_INIT;
        int frc = sbx__docker_relay_forget(id, &ferr);
        if (rc == 0 && frc < 0) {
            sbx_error_copy(err, &ferr);
            rc = frc;
        }
        sbx_error_clear(&ferr);
    }
    return rc;
}

static int stop_container(const struct sbx__dk_engine *e, const char *container,
                          struct sbx_error *err)
{
    char *path = sbx_xasprintf("/containers/%s/stop?t=%d", container, STOP_TIMEOUT_S);
    long status = 0;
    int rc = sbx__dk_json(e, "POST", path, NULL, &status, NULL, err);
    free(path);
    return rc;
}

static int sess_close(struct sbx_session *bs, int delete_workspace, struct sbx_error *err)
{
    struct sbx__dk_session *s = (struct sbx__dk_session *)bs;
    /* The workspace lives in the container: keeping it means keeping the container, stopped. */
    int rc = delete_workspace ? remove_sandbox(&s->eng, s->container, s->base.id, err)
                              : stop_container(&s->eng, s->container, err);
    if (rc == -SBX_E_NOTFOUND)
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "sandbox '%s' is gone", s->base.id);
    return rc;
}

static int sess_record_snapshot(struct sbx_session *bs, const char *ref, struct sbx_error *err)
{
    struct sbx__dk_session *s = (struct sbx__dk_session *)bs;
    (void)err;
    sbx_json_set(s->state, "snapshot", sbx_json_str(ref));
    return 0;
}

static void sess_free(struct sbx_session *bs)
{
    struct sbx__dk_session *s = (struct sbx__dk_session *)bs;
    if (!s)
        return;
    sbx_session_release_base(&s->base);
    sbx__dk_engine_release(&s->eng);
    free(s->container);
    free(s->image);
    free(s->owner);
    json_decref(s->state);
    sbx_strv_release(&s->users);
    free(s);
}

/* What the engine measures of the container (its cgroup): CPU, memory, processes. */
static int sess_stats(struct sbx_session *bs, struct sbx_session_stats *st, struct sbx_error *err)
{
    struct sbx__dk_session *s = (struct sbx__dk_session *)bs;
    char *path = sbx_xasprintf("/containers/%s/stats?stream=false&one-shot=true", s->container);
    json_t *j = NULL;
    int rc = sbx__dk_json(&s->eng, "GET", path, NULL, NULL, &j, err);
    const json_t *cpu = json_object_get(
            json_object_get(json_object_get(j, "cpu_stats"), "cpu_usage"), "total_usage");
    const json_t *mem = json_object_get(j, "memory_stats"),
                 *pids = json_object_get(j, "pids_stats");
    if (rc == 0 && json_is_integer(cpu))
        st->cpu_ns = (uint64_t)json_integer_value(cpu);
    if (rc == 0 && json_is_integer(json_object_get(mem, "usage"))) {
        st->memory = (uint64_t)json_integer_value(json_object_get(mem, "usage"));
        st->memory_limit = (uint64_t)json_integer_value(json_object_get(mem, "limit"));
    }
    if (rc == 0 && json_is_integer(json_object_get(pids, "current"))) {
        st->pids = (uint64_t)json_integer_value(json_object_get(pids, "current"));
        st->pids_limit = (uint64_t)json_integer_value(json_object_get(pids, "limit"));
    }
    json_decref(j);
    free(path);
    return rc;
}

static const struct sbx_session_ops session_ops = {
        .exec_start = sbx__dk_exec_start,
        .read_open = sbx__dk_read_open,
        .write = sbx__dk_write,
        .ls = sbx__dk_ls,
        .stat = sbx__dk_stat,
        .mkdir = sbx__dk_mkdir,
        .rm = sbx__dk_rm,
        .chmod = sbx__dk_chmod,
        .chgrp = sbx__dk_chgrp,
        .resolve_port = sess_resolve_port,
        .state = sess_state,
        .close = sess_close,
        .record_snapshot = sess_record_snapshot,
        .stats = sess_stats,
        .workspace_export = sbx__dk_workspace_export,
        .workspace_import = sbx__dk_workspace_import,
        .free = sess_free,
};

static json_t *label_json(const json_t *labels, const char *key)
{
    const char *v = json_string_value(json_object_get(labels, key));
    return v ? json_loads(v, JSON_REJECT_DUPLICATES, NULL) : NULL;
}

int sbx__dk_state_from_inspect(const json_t *insp, json_t **out, struct sbx_error *err)
{
    const json_t *cfg = json_object_get(insp, "Config");
    const json_t *labels = json_object_get(cfg, "Labels");
    const char *cid = json_string_value(json_object_get(insp, "Id"));
    const char *id = json_string_value(json_object_get(labels, "io.sbx.id"));
    const char *root = json_string_value(json_object_get(labels, "io.sbx.root"));
    const char *created = json_string_value(json_object_get(labels, "io.sbx.created"));
    const char *image = json_string_value(json_object_get(cfg, "Image"));
    if (!cid || !valid_container_id(cid) || !id || !valid_id(id, 0) || !root || root[0] != '/' ||
        !created || !image || !image[0])
        return sbx_error_set(err, SBX_E_SANDBOX, 0, "container '%.12s' is not an sbx sandbox",
                             cid ? cid : "?");
    json_t *st = json_object();
    json_t *opts = label_json(labels, "io.sbx.options");
    json_t *ports = label_json(labels, "io.sbx.ports");
    json_t *manifest = label_json(labels, "io.sbx.manifest");
    const char *net = json_string_value(json_object_get(opts, "network"));
    sbx_json_set(st, "version", json_integer(SBX_SESSION_STATE_VERSION));
    sbx_json_set(st, "provider", sbx_json_str("docker"));
    sbx_json_set(st, "id", sbx_json_str(id));
    sbx_json_set(st, "created", sbx_json_str(created));
    sbx_json_set(st, "root", sbx_json_str(root));
    sbx_json_set(st, "container", sbx_json_str(cid));
    sbx_json_set(st, "image", sbx_json_str(image));
    sbx_json_set(st, "network", sbx_json_str(net ? net : "none"));
    sbx_json_set(st, "workspace_owned", json_true());
    sbx_json_set(st, "options", json_is_object(opts) ? opts : json_object());
    if (!json_is_object(opts))
        json_decref(opts);
    sbx_json_set(st, "exposed_ports", json_is_array(ports) ? ports : json_array());
    if (!json_is_array(ports))
        json_decref(ports);
    sbx_json_set(st, "manifest", json_is_object(manifest) ? manifest : json_null());
    /* What holds of the writable layer's limit, as the local provider says it of its
     * workspace: a limit that is not enforced is listed under "unenforced". */
    json_t *disk = label_json(labels, "io.sbx.disk"), *un = json_array();
    if (json_is_object(disk)) {
        if (json_is_integer(json_object_get(disk, "limit")) &&
            json_is_false(json_object_get(disk, "enforced")))
            sbx_json_append(un, json_pack("{s:s,s:O?}", "name", "disk", "reason",
                                          json_object_get(disk, "reason")));
        sbx_json_set(st, "disk", disk);
    } else {
        json_decref(disk);
    }
    sbx_json_set(st, "unenforced", un);
    if (!json_is_object(manifest))
        json_decref(manifest);
    const char *snap = json_string_value(json_object_get(labels, "io.sbx.snapshot"));
    /* The snapshot it was made from, until one is taken of it. */
    sbx_json_set(st, "snapshot",
                 snap && strncmp(snap, "sha256:", 7) == 0 && strlen(snap) == 71 ? sbx_json_str(snap)
                                                                                : json_null());
    *out = st;
    return 0;
}

/* A session on the container described by inspect (GET /containers/{id}/json). */
static int session_from_inspect(const struct sbx__dk_engine *e, const json_t *insp,
                                struct sbx__dk_session **out, struct sbx_error *err)
{
    json_t *st = NULL;
    int rc = sbx__dk_state_from_inspect(insp, &st, err);
    if (rc < 0)
        return rc;
    const json_t *labels = json_object_get(json_object_get(insp, "Config"), "Labels");
    const char *owner = json_string_value(json_object_get(labels, "io.sbx.owner"));
    struct sbx__dk_session *s = sbx_xcalloc(1, sizeof(*s));
    sbx_session_init_base(&s->base, &session_ops, "docker",
                          json_string_value(json_object_get(st, "id")),
                          json_string_value(json_object_get(st, "root")));
    sbx__dk_engine_copy(&s->eng, e);
    s->container = sbx_xstrdup(json_string_value(json_object_get(st, "container")));
    s->image = sbx_xstrdup(json_string_value(json_object_get(st, "image")));
    s->owner = sbx_xstrdup(owner ? owner : "");
    sbx_strv_init(&s->users);
    json_t *users = label_json(labels, "io.sbx.users"), *v;
    size_t i;
    json_array_foreach(users, i, v) if (json_is_string(v))
            sbx_strv_push(&s->users, json_string_value(v));
    json_decref(users);
    s->state = st;
    *out = s;
    return 0;
}

static int inspect(const struct sbx__dk_engine *e, const char *container, json_t **out,
                   struct sbx_error *err)
{
    char *path = sbx_xasprintf("/containers/%s/json", container);
    int rc = sbx__dk_json(e, "GET", path, NULL, NULL, out, err);
    free(path);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Finding sandboxes */

/* GET /containers/json?all=1 of the containers labelled io.sbx.id (=id when given). */
static int list_containers(const struct sbx__dk_engine *e, const char *id, json_t **out,
                           struct sbx_error *err)
{
    char *label = id ? sbx_xasprintf("io.sbx.id=%s", id) : sbx_xstrdup("io.sbx.id");
    json_t *f = json_pack("{s:[s]}", "label", label);
    char *text = sbx_json_dumps(f, SBX_JSON_COMPACT);
    char *q = sbx__dk_escape(text);
    char *path = sbx_xasprintf("/containers/json?all=1&filters=%s", q);
    int rc = sbx__dk_json(e, "GET", path, NULL, NULL, out, err);
    if (rc == 0 && !json_is_array(*out)) {
        json_decref(*out);
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "the engine's container list is not a list");
    }
    free(path);
    free(q);
    free(text);
    json_decref(f);
    free(label);
    return rc;
}

/* The container of sandbox prefix: *cid its container id, *running whether it runs. */
static int find(struct dk_client *c, const char *prefix, char **cid, char **id, int *running,
                struct sbx_error *err)
{
    if (!valid_id(prefix, 1))
        return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a sandbox id", prefix);
    json_t *arr = NULL, *v;
    size_t i, n = strlen(prefix);
    int rc = list_containers(&c->eng, NULL, &arr, err), many = 0;
    const json_t *found = NULL;
    if (rc < 0)
        return rc;
    json_array_foreach(arr, i, v)
    {
        const char *sid =
                json_string_value(json_object_get(json_object_get(v, "Labels"), "io.sbx.id"));
        if (!sid || !valid_id(sid, 0) || strncmp(sid, prefix, n) != 0)
            continue;
        if (strcmp(sid, prefix) == 0) {
            found = v;
            many = 0;
            break;
        }
        many |= found != NULL;
        found = v;
    }
    if (!found)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "no sandbox '%s'", prefix);
    else if (many)
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "sandbox id '%s' is ambiguous", prefix);
    if (rc == 0) {
        const char *c_id = json_string_value(json_object_get(found, "Id"));
        const char *state = json_string_value(json_object_get(found, "State"));
        if (!c_id) {
            rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "the engine lists a container without id");
        } else {
            *cid = sbx_xstrdup(c_id);
            *id = sbx_xstrdup(json_string_value(
                    json_object_get(json_object_get(found, "Labels"), "io.sbx.id")));
            *running = state && strcmp(state, "running") == 0;
        }
    }
    json_decref(arr);
    return rc;
}

static int session_of(struct dk_client *c, const char *cid, struct sbx_session **out,
                      struct sbx_error *err)
{
    json_t *insp = NULL;
    struct sbx__dk_session *s = NULL;
    int rc = inspect(&c->eng, cid, &insp, err);
    if (rc == 0)
        rc = session_from_inspect(&c->eng, insp, &s, err);
    json_decref(insp);
    if (rc == 0)
        *out = &s->base;
    return rc;
}

static int dc_attach(struct sbx_client *bc, const char *prefix, struct sbx_session **out,
                     struct sbx_error *err)
{
    struct dk_client *c = (struct dk_client *)bc;
    char *cid = NULL, *id = NULL;
    int running = 0;
    int rc = sbx__dk_check_version(&c->eng, err);
    if (rc == 0)
        rc = find(c, prefix, &cid, &id, &running, err);
    if (rc == 0 && !running)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "sandbox '%s' is stopped (sbx sandbox start %s)",
                           id, id);
    if (rc == 0)
        rc = session_of(c, cid, out, err);
    free(cid);
    free(id);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Create */

/* As root in the new container: the workspace, the manifest's users and groups the image
 * lacks ($@: users, "--", then groups as name:member,member), and the workspace's owner. */
static const char SETUP[] =
        "root=$1 owner=$2; shift 2\n"
        "mkdir -p -- \"$root\" || exit 1\n"
        "uid=1000\n"
        "while [ $# -gt 0 ] && [ \"$1\" != -- ]; do\n"
        "  u=$1; shift\n"
        "  if ! id -u \"$u\" >/dev/null 2>&1; then\n"
        "    while cut -d: -f3 /etc/passwd | grep -qx \"$uid\"; do uid=$((uid+1)); done\n"
        "    echo \"$u:x:$uid:$uid::$root:/bin/sh\" >> /etc/passwd || exit 1\n"
        "    grep -q \"^$u:\" /etc/group || echo \"$u:x:$uid:\" >> /etc/group || exit 1\n"
        "  fi\n"
        "done\n"
        "[ \"$1\" = -- ] && shift\n"
        "gid=2000\n"
        "for g in \"$@\"; do\n"
        "  name=${g%%:*} mem=${g#*:}\n"
        "  if ! grep -q \"^$name:\" /etc/group; then\n"
        "    while cut -d: -f3 /etc/group | grep -qx \"$gid\"; do gid=$((gid+1)); done\n"
        "    echo \"$name:x:$gid:$mem\" >> /etc/group || exit 1\n"
        "  fi\n"
        "done\n"
        "[ -z \"$owner\" ] || chown -- \"$owner\" \"$root\"\n";

static int setup(struct sbx__dk_session *s, const struct sbx_manifest *m, struct sbx_error *err)
{
    struct sbx_strv argv, users;
    struct sbx__dk_run r;
    sbx_strv_init(&argv);
    sbx_strv_init(&users);
    sbx__dk_run_init(&r, SETUP_OUT_MAX);
    sbx_strv_push(&argv, "/bin/sh");
    sbx_strv_push(&argv, "-c");
    sbx_strv_push(&argv, SETUP);
    sbx_strv_push(&argv, "sh");
    sbx_strv_push(&argv, s->base.root);
    sbx_strv_push(&argv, s->owner);
    if (m)
        sbx_manifest_account_users(m, &users);
    for (size_t i = 0; i < users.n; i++)
        sbx_strv_push(&argv, users.v[i]);
    sbx_strv_push(&argv, "--");
    for (size_t i = 0; m && i < sbx_manifest_group_count(m); i++) {
        const struct sbx_manifest_group *g = sbx_manifest_group_at(m, i);
        struct sbx_buf b;
        sbx_buf_init(&b, SBX_BUF_NOLIMIT);
        (void)sbx_buf_addf(&b, NULL, "%s:", g->name);
        for (size_t j = 0; g->users && j < g->users->n; j++)
            (void)sbx_buf_addf(&b, NULL, "%s%s", j ? "," : "", g->users->v[j]);
        sbx_strv_push_take(&argv, sbx_buf_detach(&b, NULL));
    }
    int rc = sbx__dk_exec_run(s, (const char *const *)argv.v, NULL, 0, &r, err);
    if (rc == 0 && r.code != 0)
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "cannot set up the container: %.*s (exit %d)",
                           (int)strcspn(r.err.data ? r.err.data : "", "\n"),
                           r.err.data ? r.err.data : "", r.code);
    sbx__dk_run_release(&r);
    sbx_strv_release(&argv);
    sbx_strv_release(&users);
    return rc;
}

/* Whether the set-up command has anything to do. The engine makes the workspace (the
 * container's working directory) when it starts the container, owned by root; the command is
 * needed for the manifest's users and groups, and to give the workspace to an owner other
 * than root. Skipping it saves an exec (create, start and inspect: the most expensive step of
 * a create). */
static int needs_setup(const struct sbx__dk_session *s, const struct sbx_manifest *m)
{
    if (m && sbx_manifest_group_count(m) > 0)
        return 1;
    if (m) {
        struct sbx_strv users;
        sbx_strv_init(&users);
        sbx_manifest_account_users(m, &users);
        size_t n = users.n;
        sbx_strv_release(&users);
        if (n)
            return 1;
    }
    static const char *const as_root[] = {"", "root", "0", "root:root", "0:0", NULL};
    for (const char *const *r = as_root; *r; r++)
        if (strcmp(s->owner ? s->owner : "", *r) == 0)
            return 0;
    return 1;
}

static json_t *options_json(const struct dk_client *c)
{
    json_t *o = json_object(), *caps = json_array();
    sbx_json_set(o, "image", sbx_json_str(c->image));
    if (c->user)
        sbx_json_set(o, "user", sbx_json_str(c->user));
    sbx_json_set(o, "network", sbx_json_str(network_name(c->network)));
    const uint64_t vals[] = {c->memory, c->pids, c->cpu_millis};
    static const char *const names[] = {"memory", "pids", "cpu_millis"};
    for (size_t i = 0; i < 3; i++)
        sbx_json_set(o, names[i],
                     vals[i] == SBX_DOCKER_LIMIT_NONE ? sbx_json_str("none")
                                                      : json_integer((json_int_t)vals[i]));
    if (c->disk == SBX_DOCKER_LIMIT_NONE || c->disk_explicit)
        sbx_json_set(o, "disk",
                     c->disk == SBX_DOCKER_LIMIT_NONE ? sbx_json_str("none")
                                                      : json_integer((json_int_t)c->disk));
    for (size_t i = 0; i < c->cap_add.n; i++)
        sbx_json_append(caps, sbx_json_str(c->cap_add.v[i]));
    sbx_json_set(o, "cap_add", caps);
    return o;
}

static void set_label(json_t *labels, const char *key, const json_t *v)
{
    char *text = sbx_json_dumps(v, SBX_JSON_COMPACT);
    sbx_json_set(labels, key, sbx_json_str(text));
    free(text);
}

/* storage: ask for the writable layer's size limit (HostConfig.StorageOpt). */
static json_t *host_config(const struct dk_client *c, int storage)
{
    json_t *hc = json_object(), *drop = json_array(), *add = json_array(), *ul = json_array();
    sbx_json_set(hc, "Init", json_true());
    if (storage) {
        char size[32];
        snprintf(size, sizeof(size), "%llu", (unsigned long long)c->disk);
        sbx_json_set(hc, "StorageOpt", json_pack("{s:s}", "size", size));
    }
    sbx_json_set(hc, "NetworkMode", sbx_json_str(network_name(c->network)));
    if (c->memory != SBX_DOCKER_LIMIT_NONE) {
        sbx_json_set(hc, "Memory", json_integer((json_int_t)c->memory));
        sbx_json_set(hc, "MemorySwap", json_integer((json_int_t)c->memory));
    }
    sbx_json_set(hc, "PidsLimit",
                 json_integer(c->pids == SBX_DOCKER_LIMIT_NONE ? -1 : (json_int_t)c->pids));
    if (c->cpu_millis != SBX_DOCKER_LIMIT_NONE)
        sbx_json_set(hc, "NanoCpus", json_integer((json_int_t)c->cpu_millis * 1000000));
    for (const char *const *d = cap_drop; *d; d++)
        if (sbx_strv_find(&c->cap_add, *d) < 0)
            sbx_json_append(drop, sbx_json_str(*d));
    for (size_t i = 0; i < c->cap_add.n; i++)
        sbx_json_append(add, sbx_json_str(c->cap_add.v[i]));
    sbx_json_set(hc, "CapDrop", drop);
    sbx_json_set(hc, "CapAdd", add);
    sbx_json_set(hc, "SecurityOpt", json_pack("[s]", "no-new-privileges"));
    sbx_json_set(hc, "ReadonlyRootfs", json_false());
    /* Nothing of the sandbox in the engine's logs on the host disk: its init's output would
     * otherwise be kept there (json-file, k8s-file) with no bound sbx sets, and outlive it. */
    sbx_json_set(hc, "LogConfig", json_pack("{s:s,s:{}}", "Type", "none", "Config"));
    /* Explicit, because an engine's own defaults may exceed the limits it runs under
     * (podman's nproc), and then the container cannot start. */
    uint64_t nf = 0, np = 0;
    sbx__dk_engine_limits(&c->eng, &nf, &np);
    json_int_t nofile = nf > NOFILE_MAX ? NOFILE_MAX : (json_int_t)nf;
    json_int_t nproc = np > NPROC_MAX ? NPROC_MAX : (json_int_t)np;
    if (nofile > 0)
        sbx_json_append(
                ul, json_pack("{s:s,s:I,s:I}", "Name", "nofile", "Soft", nofile, "Hard", nofile));
    if (nproc > 0)
        sbx_json_append(ul,
                        json_pack("{s:s,s:I,s:I}", "Name", "nproc", "Soft", nproc, "Hard", nproc));
    sbx_json_set(hc, "Ulimits", ul);
    return hc;
}

static int image_user(struct dk_client *c, char **out, struct sbx_error *err)
{
    char *q = sbx__dk_escape(c->image);
    char *path = sbx_xasprintf("/images/%s/json", q);
    json_t *j = NULL;
    int rc = sbx__dk_json(&c->eng, "GET", path, NULL, NULL, &j, err);
    if (rc == -SBX_E_NOTFOUND)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0,
                           "image '%s' is not in the engine's store (sbx never pulls: docker "
                           "pull %s, or podman pull %s, or load it)",
                           c->image, c->image, c->image);
    if (rc == 0) {
        const char *u = json_string_value(json_object_get(json_object_get(j, "Config"), "User"));
        *out = sbx_xstrdup(u ? u : "");
    }
    json_decref(j);
    free(path);
    free(q);
    return rc;
}

/* Refuse a second sandbox with the caller's id: engines differ in how they refuse a name in
 * use (409, or podman's 500), so it is looked up first. */
static int check_id_free(struct dk_client *c, const char *id, struct sbx_error *err)
{
    json_t *same = NULL;
    int rc = list_containers(&c->eng, id, &same, err);
    if (rc < 0)
        return rc;
    size_t n_same = json_array_size(same);
    json_decref(same);
    if (n_same)
        return sbx_error_set(err, SBX_E_EXISTS, EEXIST, "sandbox '%s' already exists", id);
    return 0;
}

/* The container's labels: the provider's only record of the sandbox (see the top of the
 * file). */
static json_t *create_labels(const struct dk_client *c, const char *id, const char *root,
                             const char *owner, const struct sbx_strv *users, const char *snap_ref,
                             const json_t *mjson)
{
    char created[SBX_TIME_RFC3339_LEN];
    sbx_time_rfc3339(sbx_time_real_ns(), created);
    json_t *labels = json_object(), *ports = json_array(), *uj = json_array();
    for (size_t i = 0; i < c->n_ports; i++)
        sbx_json_append(ports, json_integer(c->ports[i]));
    for (size_t i = 0; i < users->n; i++)
        sbx_json_append(uj, sbx_json_str(users->v[i]));
    json_t *opts = options_json(c);
    sbx_json_set(labels, "io.sbx.id", sbx_json_str(id));
    sbx_json_set(labels, "io.sbx.root", sbx_json_str(root));
    sbx_json_set(labels, "io.sbx.version", sbx_json_str(SBX_VERSION));
    sbx_json_set(labels, "io.sbx.created", sbx_json_str(created));
    sbx_json_set(labels, "io.sbx.owner", sbx_json_str(owner));
    set_label(labels, "io.sbx.options", opts);
    set_label(labels, "io.sbx.ports", ports);
    set_label(labels, "io.sbx.users", uj);
    if (snap_ref)
        sbx_json_set(labels, "io.sbx.snapshot", sbx_json_str(snap_ref));
    json_decref(opts);
    json_decref(ports);
    json_decref(uj);
    if (mjson) {
        /* Labels are not a store: a large manifest (file contents) stays out of the state. */
        char *text = sbx_json_dumps(mjson, SBX_JSON_COMPACT);
        if (strlen(text) <= SBX__DK_LABEL_MAX)
            sbx_json_set(labels, "io.sbx.manifest", sbx_json_str(text));
        free(text);
    }
    return labels;
}

/* POST /containers/create for sbx-<id>; storage: with the writable layer's size limit. */
static int post_create(struct dk_client *c, const char *id, const char *root,
                       const struct sbx_strv *env, json_t *labels, int storage, json_t **reply,
                       struct sbx_error *err)
{
    json_t *body = json_object(), *ej = json_array();
    sbx_json_set(body, "Image", sbx_json_str(c->image));
    /* The init (HostConfig.Init) is PID 1 and forwards the stop signal to this sleeper, which
     * ends at once: stop is fast, and orphans are reaped. */
    sbx_json_set(body, "Entrypoint", json_pack("[s]", "sleep"));
    sbx_json_set(body, "Cmd", json_pack("[s]", "2147483647"));
    sbx_json_set(body, "WorkingDir", sbx_json_str(root));
    for (size_t i = 0; i < env->n; i++)
        sbx_json_append(ej, sbx_json_str(env->v[i]));
    sbx_json_set(body, "Env", ej);
    sbx_json_set(body, "Labels", json_incref(labels));
    sbx_json_set(body, "HostConfig", host_config(c, storage));
    char *path = sbx_xasprintf("/containers/create?name=sbx-%s", id);
    int rc = sbx__dk_json(&c->eng, "POST", path, body, NULL, reply, err);
    /* The body holds the environment's values (secrets, maybe): wipe jansson's copies. */
    json_t *v;
    size_t i;
    json_array_foreach(ej, i, v)
            explicit_bzero((char *)json_string_value(v), strlen(json_string_value(v)));
    free(path);
    json_decref(body);
    return rc;
}

/* n bytes as "8 GiB" (whole units) or "N bytes". */
static void size_text(uint64_t n, char *out, size_t len)
{
    static const char units[] = "KMGT";
    int u = -1;
    while (u < 3 && n && n % 1024 == 0) {
        n /= 1024;
        u++;
    }
    if (u < 0)
        snprintf(out, len, "%llu bytes", (unsigned long long)n);
    else
        snprintf(out, len, "%llu %ciB", (unsigned long long)n, units[u]);
}

/* Whether a refused create is the engine saying its storage driver cannot limit the size
 * (docker: "--storage-opt is supported only for overlay over xfs with 'pquota' mount option",
 * vfs: "... does not support, or has not enabled quotas"; podman alike). */
static int storage_refused(const struct sbx_error *e)
{
    return strcasestr(e->msg, "storage") || strcasestr(e->msg, "quota");
}

/* Create container sbx-<id> (the labels get io.sbx.disk) and start it, with its writable layer
 * limited where the engine can. Where it cannot: a limit given explicitly fails, the default
 * one is dropped, said on stderr and recorded. *cid is set as soon as the container exists,
 * also when starting it fails (the caller removes it). */
static int create_container(struct dk_client *c, const char *id, const char *root,
                            const struct sbx_strv *env, json_t *labels, char **cid,
                            struct sbx_error *err)
{
    json_t *reply = NULL, *disk = json_object();
    struct sbx_error why = SBX_ERROR_INIT;
    char *path = NULL;
    int limited = c->disk != SBX_DOCKER_LIMIT_NONE;
    sbx_json_set(disk, "limit", limited ? json_integer((json_int_t)c->disk) : json_null());
    sbx_json_set(disk, "enforced", json_boolean(limited));
    set_label(labels, "io.sbx.disk", disk);
    int rc = post_create(c, id, root, env, labels, limited, &reply, limited ? &why : err);
    if (rc < 0 && limited && storage_refused(&why)) {
        char size[32];
        size_text(c->disk, size, sizeof(size));
        if (c->disk_explicit) {
            rc = sbx_error_copy(err, &why);
            sbx_error_prefix(err, "disk limit %s cannot be enforced by this engine", size);
            goto out;
        }
        sbx_log(SBX_LOG_WARN,
                "sandbox '%s': disk limit %s is not enforced: the engine's storage driver "
                "cannot limit a container's size: %s",
                id, size, why.msg);
        sbx_json_set(disk, "enforced", json_false());
        sbx_json_set(disk, "reason", sbx_json_str(why.msg));
        set_label(labels, "io.sbx.disk", disk);
        rc = post_create(c, id, root, env, labels, 0, &reply, err);
    } else if (rc < 0 && limited) {
        sbx_error_copy(err, &why);
    }
    if (rc == -SBX_E_EXISTS)
        rc = sbx_error_set(err, SBX_E_EXISTS, EEXIST, "sandbox '%s' already exists", id);
    if (rc < 0)
        goto out;
    const char *rid = json_string_value(json_object_get(reply, "Id"));
    if (!rid || !valid_container_id(rid)) {
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "the engine made a container without an id");
        goto out;
    }
    *cid = sbx_xstrdup(rid);
    path = sbx_xasprintf("/containers/%s/start", *cid);
    if ((rc = sbx__dk_json(&c->eng, "POST", path, NULL, NULL, NULL, err)) < 0)
        sbx_error_prefix(err, "cannot start the container");
out:
    free(path);
    json_decref(disk);
    json_decref(reply);
    return rc;
}

/* Make a started container the sandbox: its accounts, the snapshot's workspace, the
 * manifest's entries (only the ephemeral ones over a snapshot). */
static int fill_container(struct sbx__dk_session *s, const struct sbx_create_spec *spec,
                          struct sbx_snapshot_store *store, const char *snap_ref,
                          struct sbx_error *err)
{
    const struct sbx_manifest *m = spec->manifest;
    json_t *records = NULL;
    int rc = needs_setup(s, m) ? setup(s, m, err) : 0;
    if (rc < 0)
        return rc;
    sbx__session_set_manifest(&s->base, m);
    if (snap_ref && (rc = sbx__session_restore_stream(&s->base, store, snap_ref, spec->progress,
                                                      spec->progress_data, err)) < 0) {
        sbx_error_prefix(err, "snapshot '%s'", spec->snapshot);
        return rc;
    }
    if (!m)
        return 0;
    struct sbx_progress_sink progress;
    sbx_progress_sink_init(&progress, spec->progress, spec->progress_data);
    int mflags = snap_ref ? SBX__MATERIALIZE_EPHEMERAL_ONLY : 0;
    if ((rc = sbx__materialize(&s->base, m, mflags, &progress, &records, err)) < 0) {
        json_decref(records);
        return rc;
    }
    sbx_json_set(s->state, "materialized", records);
    return 0;
}

static int dc_create(struct sbx_client *bc, const struct sbx_create_spec *spec,
                     struct sbx_session **out, struct sbx_error *err)
{
    struct dk_client *c = (struct dk_client *)bc;
    const struct sbx_manifest *m = spec->manifest;
    char id[ID_LEN + 1];
    char *cid = NULL, *img_user = NULL;
    json_t *mjson = NULL;
    struct sbx_strv env, users;
    struct sbx__dk_session *s = NULL;
    struct sbx_snapshot_store *store = NULL;
    char *snap_ref = NULL;
    int rc;
    sbx_strv_init(&env);
    sbx_strv_init(&users);

    if (spec->workspace) {
        rc = sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                           "a docker sandbox's workspace is inside its container: a host "
                           "workspace directory ('%s') cannot be used",
                           spec->workspace);
        goto out;
    }
    /* A snapshot is found and checked before anything exists: a bad one creates nothing. */
    if (spec->snapshot &&
        ((rc = sbx_snapshot_store_open(NULL, &store, err)) < 0 ||
         (rc = sbx_snapshot_resolve(store, spec->snapshot, NULL, &snap_ref, err)) < 0))
        goto out;
    if (!c->image) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0,
                           "no image: the docker provider needs one (--image, or the "
                           "provider's image option)");
        goto out;
    }
    if (spec->id && !valid_id(spec->id, 0)) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a sandbox id (16 hex digits)",
                           spec->id);
        goto out;
    }
    if (spec->id)
        memcpy(id, spec->id, sizeof(id));
    else if ((rc = sbx_random_hex(id, SBX__DK_ID_BYTES, err)) < 0)
        goto out;
    if ((rc = sbx__dk_check_version(&c->eng, err)) < 0 ||
        (rc = image_user(c, &img_user, err)) < 0 ||
        (spec->id && (rc = check_id_free(c, id, err)) < 0))
        goto out;
    if (m &&
        ((rc = sbx_manifest_env_resolve(m, spec->pass_secrets, &env, err)) < 0 ||
         (rc = sbx_manifest_to_json(m, SBX_MANIFEST_JSON_NO_EPHEMERAL_ENV, &mjson, NULL, err)) < 0))
        goto out;
    if (m)
        sbx_manifest_account_users(m, &users);
    const char *root = m ? sbx_manifest_root(m) : DEFAULT_ROOT;
    /* The provider's user runs commands and owns the workspace; the manifest's users only own
     * their entries (the Agents SDK's rule), unless an agent's run_as names one. */
    const char *owner = c->user ? c->user : img_user;
    json_t *labels = create_labels(c, id, root, owner, &users, snap_ref, mjson);
    struct sbx_session *bs = NULL;
    rc = create_container(c, id, root, &env, labels, &cid, err);
    json_decref(labels);
    /* The environment's values may be secrets: wiped once the engine has them. */
    for (size_t i = 0; i < env.n; i++)
        explicit_bzero(env.v[i], strlen(env.v[i]));
    if (rc < 0 || (rc = session_of(c, cid, &bs, err)) < 0)
        goto out;
    s = (struct sbx__dk_session *)bs;
    if ((rc = fill_container(s, spec, store, snap_ref, err)) < 0)
        goto out;
    *out = &s->base;
    s = NULL;
    rc = 0;
out:
    if (rc < 0) {
        struct sbx_error ignored = SBX_ERROR_INIT;
        if (cid)
            (void)remove_sandbox(&c->eng, cid, id, &ignored);
        sbx_error_prefix(err, "cannot create sandbox");
    }
    sess_free(s ? &s->base : NULL);
    sbx_strv_release(&env);
    sbx_strv_release(&users);
    json_decref(mjson);
    free(cid);
    free(img_user);
    free(snap_ref);
    sbx_snapshot_store_free(store);
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

static int dc_list(struct sbx_client *bc, json_t **out, struct sbx_error *err)
{
    struct dk_client *c = (struct dk_client *)bc;
    json_t *arr = NULL, *v, *res = json_array();
    size_t i;
    int rc = sbx__dk_check_version(&c->eng, err);
    if (rc == 0)
        rc = list_containers(&c->eng, NULL, &arr, err);
    if (rc < 0) {
        json_decref(res);
        return rc;
    }
    size_t n = 0;
    json_t **items = sbx_xcalloc(json_array_size(arr) + 1, sizeof(*items));
    json_array_foreach(arr, i, v)
    {
        const char *cid = json_string_value(json_object_get(v, "Id"));
        const char *state = json_string_value(json_object_get(v, "State"));
        json_t *insp = NULL;
        struct sbx__dk_session *s = NULL;
        struct sbx_error ignored = SBX_ERROR_INIT;
        if (!cid || inspect(&c->eng, cid, &insp, &ignored) < 0)
            continue;
        if (session_from_inspect(&c->eng, insp, &s, &ignored) == 0) {
            json_t *st = json_deep_copy(s->state);
            if (!state || strcmp(state, "running") != 0)
                sbx_json_set(st, "status", sbx_json_str("stopped"));
            items[n++] = st;
            sess_free(&s->base);
        }
        json_decref(insp);
    }
    qsort(items, n, sizeof(*items), cmp_created);
    for (i = 0; i < n; i++)
        sbx_json_append(res, items[i]);
    free(items);
    json_decref(arr);
    *out = res;
    return 0;
}

static int dc_remove(struct sbx_client *bc, const char *prefix, int keep_workspace,
                     struct sbx_error *err)
{
    struct dk_client *c = (struct dk_client *)bc;
    char *cid = NULL, *id = NULL;
    int running = 0;
    if (keep_workspace)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "a docker sandbox's workspace is in its container: it goes with it");
    int rc = sbx__dk_check_version(&c->eng, err);
    if (rc == 0)
        rc = find(c, prefix, &cid, &id, &running, err);
    if (rc == 0)
        rc = remove_sandbox(&c->eng, cid, id, err);
    free(cid);
    free(id);
    return rc;
}

static int dc_stop(struct sbx_client *bc, const char *prefix, char **out_ref, struct sbx_error *err)
{
    struct dk_client *c = (struct dk_client *)bc;
    char *cid = NULL, *id = NULL;
    int running = 0;
    int rc = sbx__dk_check_version(&c->eng, err);
    if (rc == 0)
        rc = find(c, prefix, &cid, &id, &running, err);
    if (rc == 0 && !running)
        rc = sbx_error_set(err, SBX_E_EXISTS, 0, "sandbox '%s' is already stopped", id);
    if (rc == 0)
        rc = stop_container(&c->eng, cid, err);
    /* The stopped container keeps the workspace: no snapshot is taken. */
    if (rc == 0)
        *out_ref = NULL;
    free(cid);
    free(id);
    return rc;
}

static int start_found(struct dk_client *c, const char *cid, struct sbx_session **out,
                       struct sbx_error *err)
{
    char *path = sbx_xasprintf("/containers/%s/start", cid);
    int rc = sbx__dk_json(&c->eng, "POST", path, NULL, NULL, NULL, err);
    free(path);
    if (rc == 0)
        rc = session_of(c, cid, out, err);
    return rc;
}

static int dc_start(struct sbx_client *bc, const char *prefix, const struct sbx_resume_opts *opts,
                    struct sbx_session **out, struct sbx_error *err)
{
    struct dk_client *c = (struct dk_client *)bc;
    char *cid = NULL, *id = NULL;
    int running = 0;
    (void)opts;
    int rc = sbx__dk_check_version(&c->eng, err);
    if (rc == 0)
        rc = find(c, prefix, &cid, &id, &running, err);
    if (rc == 0)
        rc = running ? session_of(c, cid, out, err) : start_found(c, cid, out, err);
    free(cid);
    free(id);
    return rc;
}

static int dc_stopped_state(struct sbx_client *bc, const char *prefix, json_t **out,
                            struct sbx_error *err)
{
    struct dk_client *c = (struct dk_client *)bc;
    char *cid = NULL, *id = NULL;
    int running = 0;
    struct sbx_session *s = NULL;
    int rc = find(c, prefix, &cid, &id, &running, err);
    if (rc == 0 && running)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "sandbox '%s' is not stopped", id);
    if (rc == 0)
        rc = session_of(c, cid, &s, err);
    if (rc == 0) {
        *out = json_deep_copy(((struct sbx__dk_session *)s)->state);
        sbx_json_set(*out, "status", sbx_json_str("stopped"));
    }
    sess_free(s);
    free(cid);
    free(id);
    return rc;
}

static int dc_resume(struct sbx_client *bc, const json_t *state, const struct sbx_resume_opts *opts,
                     struct sbx_session **out, struct sbx_error *err)
{
    struct dk_client *c = (struct dk_client *)bc;
    const char *id = json_string_value(json_object_get(state, "id"));
    char *cid = NULL, *fid = NULL;
    int running = 0;
    int rc = sbx__dk_check_version(&c->eng, err);
    if (rc == 0)
        rc = find(c, id, &cid, &fid, &running, err);
    const char *snap = json_string_value(json_object_get(state, "snapshot"));
    if (rc == -SBX_E_NOTFOUND && snap) {
        free(cid);
        free(fid);
        return sbx__client_rebuild(bc, state, snap, opts, 0, SBX__REBUILD_KEEP_ID, out, err);
    }
    if (rc == -SBX_E_NOTFOUND)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0,
                           "sandbox '%s' is gone and its state has no snapshot", id);
    if (rc == 0 && strcmp(fid, id) != 0)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "sandbox '%s' is gone", id);
    if (rc == 0)
        rc = running ? session_of(c, cid, out, err) : start_found(c, cid, out, err);
    (void)opts;
    free(cid);
    free(fid);
    return rc;
}

static void dc_free(struct sbx_client *bc)
{
    struct dk_client *c = (struct dk_client *)bc;
    sbx__dk_engine_release(&c->eng);
    free(c->image);
    free(c->user);
    sbx_strv_release(&c->cap_add);
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

static int valid_cap(const char *cap)
{
    size_t n = strlen(cap);
    if (n == 0 || n > CAP_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((cap[i] >= 'A' && cap[i] <= 'Z') || (cap[i] >= '0' && cap[i] <= '9') ||
              cap[i] == '_'))
            return 0;
    return 1;
}

static int client_new(const void *vopts, struct sbx_client **out, struct sbx_error *err)
{
    const struct sbx_docker_options none = {0};
    const struct sbx_docker_options *o = vopts ? vopts : &none;
    struct dk_client *c = NULL;
    int rc;
    if (o->network > SBX_DOCKER_NETWORK_HOST)
        return sbx_error_set(err, SBX_E_INVAL, 0, "unknown docker network mode %d",
                             (int)o->network);
    if (o->image && !o->image[0])
        return sbx_error_set(err, SBX_E_INVAL, 0, "empty image name");
    if (o->user && !o->user[0])
        return sbx_error_set(err, SBX_E_INVAL, 0, "empty user name");
    if (o->n_cap_add > SBX_DOCKER_MAX_CAPS)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "more than %d capabilities",
                             SBX_DOCKER_MAX_CAPS);
    for (size_t i = 0; i < o->n_cap_add; i++) {
        const char *cap = o->cap_add ? o->cap_add[i] : NULL;
        if (!cap || !valid_cap(cap))
            return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a capability name (NET_ADMIN)",
                                 cap ? cap : "");
        if (!o->allow_cap_add)
            return sbx_error_set(err, SBX_E_PERM, 0,
                                 "capability '%s' refused: extra capabilities widen what code in "
                                 "the sandbox can do to the host (allow_cap_add opts in)",
                                 cap);
    }
    if (o->n_exposed_ports > SBX_DOCKER_MAX_EXPOSED_PORTS)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "more than %d exposed ports",
                             SBX_DOCKER_MAX_EXPOSED_PORTS);
    for (size_t i = 0; i < o->n_exposed_ports; i++)
        if (!o->exposed_ports || o->exposed_ports[i] < 1 || o->exposed_ports[i] > 65535)
            return sbx_error_set(err, SBX_E_INVAL, 0, "exposed port %d is not in 1..65535",
                                 o->exposed_ports ? o->exposed_ports[i] : 0);
    if (o->request_timeout_ms < 0)
        return sbx_error_set(err, SBX_E_INVAL, 0, "request timeout must not be negative");
    if (o->disk_bytes && o->disk_bytes != SBX_DOCKER_LIMIT_NONE &&
        (o->disk_bytes < SBX_DOCKER_DISK_MIN || o->disk_bytes > SBX_DOCKER_DISK_MAX))
        return sbx_error_set(err, SBX_E_INVAL, 0, "disk limit %llu is not in 16 MiB..16 TiB",
                             (unsigned long long)o->disk_bytes);
    c = sbx_xcalloc(1, sizeof(*c));
    c->base.ops = &client_ops;
    c->base.provider = "docker";
    sbx_strv_init(&c->cap_add);
    struct sbx__dk_tls tls = {o->tls_ca, o->tls_cert, o->tls_key};
    if ((rc = sbx__dk_engine_init(&c->eng, o->host, &tls, o->request_timeout_ms, err)) < 0) {
        sbx_strv_release(&c->cap_add);
        free(c);
        return rc;
    }
    c->image = o->image ? sbx_xstrdup(o->image) : NULL;
    c->user = o->user ? sbx_xstrdup(o->user) : NULL;
    c->network = o->network == SBX_DOCKER_NETWORK_DEFAULT ? SBX_DOCKER_NETWORK_NONE : o->network;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    c->memory = o->memory_bytes ? o->memory_bytes : DEFAULT_MEMORY;
    c->pids = o->pids ? o->pids : DEFAULT_PIDS;
    c->cpu_millis = o->cpu_millis ? o->cpu_millis : (uint64_t)(cpus > 1 ? cpus / 2 : 1) * 1000;
    c->disk = o->disk_bytes ? o->disk_bytes : SBX_DOCKER_DISK_DEFAULT;
    c->disk_explicit = o->disk_bytes != 0 && o->disk_bytes != SBX_DOCKER_LIMIT_NONE;
    for (size_t i = 0; i < o->n_cap_add; i++)
        sbx_strv_push(&c->cap_add, o->cap_add[i]);
    for (size_t i = 0; i < o->n_exposed_ports; i++)
        c->ports[c->n_ports++] = o->exposed_ports[i];
    *out = &c->base;
    return 0;
}

/* The docker-specific part of a session state. */
static int check_state(const json_t *st, struct sbx_error *err)
{
    const char *id = NULL, *cid = NULL, *image = NULL, *root = NULL;
    int rc;
    if ((rc = sbx_json_get_string(st, "id", 1, &id, err)) < 0 ||
        (rc = sbx_json_get_string(st, "container", 1, &cid, err)) < 0 ||
        (rc = sbx_json_get_string(st, "image", 1, &image, err)) < 0 ||
        (rc = sbx_json_get_string(st, "root", 1, &root, err)) < 0)
        return rc;
    if (!valid_id(id, 0))
        return sbx_error_set(err, SBX_E_INVAL, 0, "field 'id': '%s' is not a sandbox id", id);
    if (!valid_container_id(cid))
        return sbx_error_set(err, SBX_E_INVAL, 0, "field 'container' must be a container id");
    if (!image[0])
        return sbx_error_set(err, SBX_E_INVAL, 0, "field 'image' must not be empty");
    if (root[0] != '/')
        return sbx_error_set(err, SBX_E_INVAL, 0, "field 'root' must be an absolute path");
    return 0;
}

const struct sbx__provider_def sbx__provider_docker = {
        .name = "docker",
        .summary = "a container of a Docker engine or of podman's Docker-compatible service, "
                   "through the Engine API on its unix socket or over tcp:// with TLS",
        .traits = SBX_PROVIDER_ACCOUNTS | SBX_PROVIDER_SNAPSHOTS | SBX_PROVIDER_STOP_START |
                  SBX_PROVIDER_PTY | SBX_PROVIDER_PORTS | SBX_PROVIDER_LISTS | SBX_PROVIDER_RESUME |
                  SBX_PROVIDER_STATS,
        /* No mounts: sbx mounts storage with rclone on the host, outside the sandbox's
         * namespaces, which a container's engine does not let it enter. */
        .unmountable = (1u << SBX_ENTRY_S3_MOUNT) | (1u << SBX_ENTRY_GCS_MOUNT) |
                       (1u << SBX_ENTRY_R2_MOUNT) | (1u << SBX_ENTRY_AZURE_BLOB_MOUNT) |
                       (1u << SBX_ENTRY_BOX_MOUNT) | (1u << SBX_ENTRY_S3_FILES_MOUNT),
        .unmountable_why = "sbx mounts buckets with rclone on the host, outside the sandbox, "
                           "and a container would need FUSE and privileges inside it or a docker "
                           "volume plugin on the engine's host; copy the data in with a local_dir "
                           "entry, or use the local provider",
        .options = sbx__dk_options,
        .client_new = client_new,
        .client_new_json = sbx__dk_client_new_json,
        .options_check = sbx__dk_options_check,
        .probe = sbx__dk_probe,
        .check_state = check_state,
};
