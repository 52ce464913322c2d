/* Creating an LXD sandbox: the image and profiles checked first (a bad one creates nothing),
 * the instance made (its config the sandbox's record: user.sbx.*, the manifest's environment
 * as environment.*, the limits; network devices of the profiles masked), started, set up as
 * root (the workspace, the manifest's users and groups, their ids recorded), then a
 * snapshot's content and the manifest materialised through the file operations. On any
 * failure the instance goes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "providers/lxd/client.h"
#include "providers/lxd/exec.h"
#include "sandbox/materialize/materialize.h"
#include "sandbox/session/internal.h"
#include "sbx/hash.h"
#include "sbx/json.h"
#include "sbx/manifest.h"
#include "sbx/snapshot.h"
#include "sbx/time.h"

#ifndef SBX_VERSION
#    define SBX_VERSION "0"
#endif

#define DEFAULT_ROOT  "/workspace"
#define SETUP_OUT_MAX 65536
#define MANIFEST_MAX  ((size_t)64 << 10)

/* As root in the new instance: the workspace, the manifest's users and groups the image lacks
 * ($@: users, "--", then groups as name:member,member), the workspace's owner; then for the
 * owner and each user "A name uid gid home", and "S" when setsid exists. */
static const char SETUP[] =
        "root=$1 owner=$2; shift 2\n"
        "mkdir -p -- \"$root\" || exit 1\n" SBX__LXD_LOOPBACK_UP "\n"
        "uid=1000 users=\n"
        "while [ $# -gt 0 ] && [ \"$1\" != -- ]; do\n"
        "  u=$1; shift; users=\"$users $u\"\n"
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
        "if [ -n \"$owner\" ]; then\n"
        "  id -u \"$owner\" >/dev/null 2>&1 || { echo \"no user '$owner' in the image\" >&2; "
        "exit 3; }\n"
        "  chown -- \"$(id -u \"$owner\"):$(id -g \"$owner\")\" \"$root\" || exit 1\n"
        "fi\n"
        "for u in $owner $users; do\n"
        "  h=$(grep \"^$u:\" /etc/passwd | cut -d: -f6 | head -n 1)\n"
        "  printf 'A %s %s %s %s\\n' \"$u\" \"$(id -u \"$u\")\" \"$(id -g \"$u\")\" \"$h\"\n"
        "done\n"
        "command -v setsid >/dev/null 2>&1 && echo S\n"
        "exit 0\n";

/* The setup's report into the config it records: accounts {name: [uid, gid, home]}. */
static int parse_setup(const char *out, json_t *config, struct sbx_error *err)
{
    json_t *acc = json_object();
    int setsid = 0;
    for (const char *p = out; p && *p;) {
        size_t n = strcspn(p, "\n");
        char name[256] = "", home[1024] = "";
        long uid = -1, gid = -1;
        if (p[0] == 'S' && n == 1)
            setsid = 1;
        else if (n < 1200 && sscanf(p, "A %255s %ld %ld %1023[^\n]", name, &uid, &gid, home) >= 3 &&
                 uid >= 0 && gid >= 0)
            sbx_json_set(acc, name, json_pack("[I,I,s]", (json_int_t)uid, (json_int_t)gid, home));
        p += n + (p[n] == '\n');
    }
    char *text = sbx_json_dumps(acc, SBX_JSON_COMPACT);
    sbx_json_set(config, "user.sbx.accounts", sbx_json_str(text));
    sbx_json_set(config, "user.sbx.setsid", sbx_json_str(setsid ? "true" : "false"));
    free(text);
    json_decref(acc);
    (void)err;
    return 0;
}

static int setup(struct sbx__lxd_session *s, const struct sbx_manifest *m, const char *owner,
                 json_t *config, struct sbx_error *err)
{
    struct sbx_strv argv, users;
    struct sbx__lxd_run r;
    sbx_strv_init(&argv);
    sbx_strv_init(&users);
    sbx__lxd_run_init(&r, SETUP_OUT_MAX);
    const char *head[] = {"/bin/sh", "-c", SETUP, "sh", s->base.root, owner};
    for (size_t i = 0; i < sizeof(head) / sizeof(head[0]); i++)
        sbx_strv_push(&argv, head[i]);
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
    int rc = sbx__lxd_exec_run(s, (const char *const *)argv.v, &r, err);
    if (rc == 0 && r.code != 0)
        rc = sbx_error_set(err, r.code == 3 ? SBX_E_NOTFOUND : SBX_E_SANDBOX, 0,
                           "cannot set up the instance: %.*s (exit %d)",
                           (int)strcspn(r.err.data ? r.err.data : "", "\n"),
                           r.err.data ? r.err.data : "", r.code);
    if (rc == 0)
        rc = parse_setup(r.out.data, config, err);
    sbx__lxd_run_release(&r);
    sbx_strv_release(&argv);
    sbx_strv_release(&users);
    return rc;
}

/* The image source of the create: an alias the server has, else a fingerprint (prefix). */
static int image_source(struct lx_client *c, json_t **out, struct sbx_error *err)
{
    char *q = sbx__lxd_escape(c->image, 0);
    char *path = sbx_xasprintf("/1.0/images/aliases/%s", q);
    json_t *md = NULL;
    int rc = sbx__lxd_json(&c->sv, "GET", path, NULL, &md, NULL, err);
    if (rc == 0)
        *out = json_pack("{s:s,s:s}", "type", "image", "alias", c->image);
    free(path);
    json_decref(md);
    md = NULL;
    if (rc == -SBX_E_NOTFOUND && strspn(c->image, "0123456789abcdef") == strlen(c->image)) {
        path = sbx_xasprintf("/1.0/images/%s", q);
        rc = sbx__lxd_json(&c->sv, "GET", path, NULL, &md, NULL, err);
        const char *fp = json_string_value(json_object_get(md, "fingerprint"));
        if (rc == 0 && !fp)
            rc = sbx_error_set(err, SBX_E_PARSE, 0, "LXD's image '%s' has no fingerprint",
                               c->image);
        if (rc == 0)
            *out = json_pack("{s:s,s:s}", "type", "image", "fingerprint", fp);
        free(path);
        json_decref(md);
    }
    if (rc == -SBX_E_NOTFOUND)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0,
                           "image '%s' is not on the LXD server at '%s' (project '%s'); sbx "
                           "never downloads one: lxc image import, or lxc image copy",
                           c->image, c->sv.url, c->sv.project);
    free(q);
    return rc;
}

/* The profiles checked (they exist; privileged and nesting only when allowed) and what the
 * instance's own devices must say: none for each network device (network none), the root
 * disk with its size. */
static int check_profiles(struct lx_client *c, json_t *devices, struct sbx_error *err)
{
    int rc = 0, have_root = 0;
    json_t *keep = json_array();
    for (size_t i = 0; i < c->profiles.n && rc == 0; i++) {
        char *q = sbx__lxd_escape(c->profiles.v[i], 0);
        char *path = sbx_xasprintf("/1.0/profiles/%s", q);
        json_t *md = NULL;
        rc = sbx__lxd_json(&c->sv, "GET", path, NULL, &md, NULL, err);
        if (rc == -SBX_E_NOTFOUND)
            rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "no lxd profile '%s' in project '%s'",
                               c->profiles.v[i], c->sv.project);
        const json_t *cfg = json_object_get(md, "config"), *dev;
        const char *priv = json_string_value(json_object_get(cfg, "security.privileged"));
        const char *nest = json_string_value(json_object_get(cfg, "security.nesting"));
        if (rc == 0 && priv && strcmp(priv, "true") == 0 && !c->privileged)
            rc = sbx_error_set(err, SBX_E_PERM, 0,
                               "lxd profile '%s' sets security.privileged: the container's root "
                               "would be root on the member host (the privileged option "
                               "allows it)",
                               c->profiles.v[i]);
        if (rc == 0 && nest && strcmp(nest, "true") == 0 && !c->nesting)
            rc = sbx_error_set(err, SBX_E_PERM, 0,
                               "lxd profile '%s' sets security.nesting: the sandbox could run "
                               "containers with more of /proc and /sys reachable (the nesting "
                               "option allows it)",
                               c->profiles.v[i]);
        const char *name;
        json_object_foreach((json_t *)json_object_get(md, "devices"), name, dev)
        {
            const char *type = json_string_value(json_object_get(dev, "type"));
            const char *dpath = json_string_value(json_object_get(dev, "path"));
            if (type && strcmp(type, "nic") == 0 && c->network != SBX_LXD_NETWORK_PROFILE)
                sbx_json_set(devices, name, json_pack("{s:s}", "type", "none"));
            if (type && strcmp(type, "disk") == 0 && dpath && strcmp(dpath, "/") == 0) {
                json_decref(keep);
                keep = json_pack("[s,O]", name, dev);
                have_root = json_string_value(json_object_get(dev, "pool")) != NULL;
            }
        }
        json_decref(md);
        free(path);
        free(q);
    }
    if (rc == 0 && c->disk && c->disk != SBX_LXD_LIMIT_NONE) {
        if (!have_root)
            rc = sbx_error_set(err, SBX_E_INVAL, 0,
                               "a disk size needs a root disk in the profiles (none has one)");
        else {
            json_t *root = json_deep_copy(json_array_get(keep, 1));
            char size[32];
            snprintf(size, sizeof(size), "%llu", (unsigned long long)c->disk);
            sbx_json_set(root, "size", sbx_json_str(size));
            sbx_json_set(devices, json_string_value(json_array_get(keep, 0)), root);
        }
    }
    json_decref(keep);
    return rc;
}

/* The instance's config: the sandbox's record (user.sbx.*), the manifest's environment, the
 * limits and the security settings. */
static json_t *instance_config(const struct lx_client *c, const char *id, const char *root,
                               const char *owner, const struct sbx_strv *users,
                               const char *snap_ref, const json_t *mjson,
                               const struct sbx_strv *env)
{
    char created[SBX_TIME_RFC3339_LEN], host[256] = "", buf[64];
    json_t *cfg = json_object(), *ports = json_array(), *uj = json_array();
    sbx_time_rfc3339(sbx_time_real_ns(), created);
    (void)gethostname(host, sizeof(host) - 1);
    for (size_t i = 0; i < c->n_ports; i++)
        sbx_json_append(ports, json_integer(c->ports[i]));
    for (size_t i = 0; i < users->n; i++)
        sbx_json_append(uj, sbx_json_str(users->v[i]));
    json_t *opts = sbx__lxd_options_json(c);
    const struct {
        const char *key;
        json_t *v;
    } docs[] = {{"user.sbx.options", opts}, {"user.sbx.ports", ports}, {"user.sbx.users", uj}};
    for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++) {
        char *text = sbx_json_dumps(docs[i].v, SBX_JSON_COMPACT);
        sbx_json_set(cfg, docs[i].key, sbx_json_str(text));
        free(text);
        json_decref(docs[i].v);
    }
    sbx_json_set(cfg, "user.sbx.id", sbx_json_str(id));
    sbx_json_set(cfg, "user.sbx.root", sbx_json_str(root));
    sbx_json_set(cfg, "user.sbx.version", sbx_json_str(SBX_VERSION));
    sbx_json_set(cfg, "user.sbx.created", sbx_json_str(created));
    sbx_json_set(cfg, "user.sbx.owner", sbx_json_str(owner));
    sbx_json_set(cfg, "user.sbx.status", sbx_json_str("creating"));
    snprintf(buf, sizeof(buf), " %ld", (long)getpid());
    char *creator = sbx_xasprintf("%s%s", host, buf);
    sbx_json_set(cfg, "user.sbx.creator", sbx_json_str(creator));
    free(creator);
    if (snap_ref)
        sbx_json_set(cfg, "user.sbx.snapshot", sbx_json_str(snap_ref));
    if (mjson) {
        /* Config is not a store: a large manifest stays out of the record. */
        char *text = sbx_json_dumps(mjson, SBX_JSON_COMPACT);
        if (strlen(text) <= MANIFEST_MAX)
            sbx_json_set(cfg, "user.sbx.manifest", sbx_json_str(text));
        free(text);
    }
    /* The instance cannot read its own config through /dev/lxd. */
    sbx_json_set(cfg, "security.devlxd", sbx_json_str("false"));
    if (c->privileged)
        sbx_json_set(cfg, "security.privileged", sbx_json_str("true"));
    if (c->nesting)
        sbx_json_set(cfg, "security.nesting", sbx_json_str("true"));
    if (c->memory != SBX_LXD_LIMIT_NONE) {
        snprintf(buf, sizeof(buf), "%llu", (unsigned long long)c->memory);
        sbx_json_set(cfg, "limits.memory", sbx_json_str(buf));
    }
    if (c->pids != SBX_LXD_LIMIT_NONE) {
        snprintf(buf, sizeof(buf), "%llu", (unsigned long long)c->pids);
        sbx_json_set(cfg, "limits.processes", sbx_json_str(buf));
    }
    if (c->cpu_millis != SBX_LXD_LIMIT_NONE) {
        /* A CFS quota: so many milliseconds of CPU time per 100 ms. */
        snprintf(buf, sizeof(buf), "%llums/100ms",
                 (unsigned long long)(c->cpu_millis / 10 ? c->cpu_millis / 10 : 1));
        sbx_json_set(cfg, "limits.cpu.allowance", sbx_json_str(buf));
    }
    for (size_t i = 0; i < env->n; i++) {
        const char *eq = strchr(env->v[i], '=');
        if (!eq)
            continue;
        char *key = sbx_xasprintf("environment.%.*s", (int)(eq - env->v[i]), env->v[i]);
        sbx_json_set(cfg, key, sbx_json_str(eq + 1));
        free(key);
    }
    return cfg;
}

/* POST /1.0/instances (at the target), waiting for it. The body's environment values are
 * wiped once it is sent: they may be secrets. */
static int make_instance(struct lx_client *c, const char *name, json_t *source, json_t *config,
                         json_t *devices, struct sbx_error *err)
{
    json_t *body = json_object(), *profiles = json_array();
    for (size_t i = 0; i < c->profiles.n; i++)
        sbx_json_append(profiles, sbx_json_str(c->profiles.v[i]));
    sbx_json_set(body, "name", sbx_json_str(name));
    sbx_json_set(body, "type", sbx_json_str("container"));
    sbx_json_set(body, "source", json_incref(source));
    sbx_json_set(body, "profiles", profiles);
    sbx_json_set(body, "config", json_incref(config));
    sbx_json_set(body, "devices", json_incref(devices));
    char *t = c->target ? sbx__lxd_escape(c->target, 0) : NULL;
    char *path = t ? sbx_xasprintf("/1.0/instances?target=%s", t) : sbx_xstrdup("/1.0/instances");
    int rc = sbx__lxd_json_wait(&c->sv, "POST", path, body, NULL, err);
    if (rc == -SBX_E_EXISTS)
        rc = sbx_error_set(err, SBX_E_EXISTS, EEXIST, "instance '%s' already exists", name);
    const char *k;
    json_t *v;
    json_object_foreach(config, k, v) if (strncmp(k, "environment.", 12) == 0 && json_is_string(v))
            explicit_bzero((char *)json_string_value(v), strlen(json_string_value(v)));
    free(path);
    free(t);
    json_decref(body);
    return rc;
}

/* Make a started instance the sandbox: its accounts recorded, the snapshot's workspace, the
 * manifest's entries (only the ephemeral ones over a snapshot), then marked ready. */
static int fill(struct lx_client *c, struct sbx__lxd_session **sp, const char *name,
                const struct sbx_create_spec *spec, struct sbx_snapshot_store *store,
                const char *snap_ref, const char *owner, struct sbx_error *err)
{
    const struct sbx_manifest *m = spec->manifest;
    json_t *records = NULL, *cfg = json_object(), *inst = NULL;
    struct sbx__lxd_session *s = *sp;
    char *path = sbx__lxd_inst_path(name, NULL);
    int rc = setup(s, m, owner, cfg, err);
    sbx_json_set(cfg, "user.sbx.status", sbx_json_str("ready"));
    json_t *patch = json_pack("{s:O}", "config", cfg);
    if (rc == 0)
        rc = sbx__lxd_json_wait(&c->sv, "PATCH", path, patch, NULL, err);
    json_decref(patch);
    /* The session again, now with the accounts the setup recorded. */
    if (rc == 0 && (rc = sbx__lxd_json(&c->sv, "GET", path, NULL, &inst, NULL, err)) == 0) {
        struct sbx__lxd_session *fresh = NULL;
        if ((rc = sbx__lxd_session_from(&c->sv, inst, &fresh, err)) == 0) {
            sbx__lxd_session_free(s);
            *sp = s = fresh;
        }
    }
    if (rc == 0)
        sbx__session_set_manifest(&s->base, m);
    if (rc == 0 && snap_ref &&
        (rc = sbx__lxd_workspace_restore(s, store, snap_ref, spec->progress, spec->progress_data,
                                         err)) < 0)
        sbx_error_prefix(err, "snapshot '%s'", spec->snapshot);
    if (rc == 0 && m) {
        struct sbx_progress_sink progress;
        sbx_progress_sink_init(&progress, spec->progress, spec->progress_data);
        int mflags = snap_ref ? SBX__MATERIALIZE_EPHEMERAL_ONLY : 0;
        if ((rc = sbx__materialize(&s->base, m, mflags, &progress, &records, err)) == 0)
            sbx_json_set(s->state, "materialized", records);
        else
            json_decref(records);
    }
    json_decref(inst);
    json_decref(cfg);
    free(path);
    return rc;
}

/* Check what a create needs before anything exists. */
static int precheck(struct lx_client *c, const struct sbx_create_spec *spec, char *id,
                    struct sbx_snapshot_store **store, char **snap_ref, struct sbx_error *err)
{
    int rc;
    if (spec->workspace)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "an lxd sandbox's workspace is inside its instance: a host "
                             "workspace directory ('%s') cannot be used",
                             spec->workspace);
    /* A snapshot is found and checked before anything exists: a bad one creates nothing. */
    if (spec->snapshot &&
        ((rc = sbx_snapshot_store_open(NULL, store, err)) < 0 ||
         (rc = sbx_snapshot_resolve(*store, spec->snapshot, NULL, snap_ref, err)) < 0))
        return rc;
    if (!c->image)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "no image: the lxd provider needs one (--image, or the provider's "
                             "image option)");
    if (spec->id && !sbx__lxd_valid_id(spec->id, 0))
        return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a sandbox id (16 hex digits)",
                             spec->id);
    if (spec->id)
        memcpy(id, spec->id, SBX__LXD_ID_LEN + 1);
    else if ((rc = sbx_random_hex(id, SBX__LXD_ID_BYTES, err)) < 0)
        return rc;
    if ((rc = sbx__lxd_check_server(&c->sv, NULL, err)) < 0)
        return rc;
    /* The project first: in one that does not exist, every later question is "not found". */
    char *q = sbx__lxd_escape(c->sv.project, 0);
    char *path = sbx_xasprintf("/1.0/projects/%s", q);
    rc = sbx__lxd_json(&c->sv, "GET", path, NULL, NULL, NULL, err);
    if (rc == -SBX_E_NOTFOUND)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "no lxd project '%s' on the server at '%s'",
                           c->sv.project, c->sv.url);
    free(path);
    free(q);
    return rc;
}

int sbx__lxd_create(struct sbx_client *bc, const struct sbx_create_spec *spec,
                    struct sbx_session **out, struct sbx_error *err)
{
    struct lx_client *c = (struct lx_client *)bc;
    const struct sbx_manifest *m = spec->manifest;
    char id[SBX__LXD_ID_LEN + 1], *name = NULL, *snap_ref = NULL;
    json_t *mjson = NULL, *source = NULL, *devices = json_object(), *config = NULL, *inst = NULL;
    struct sbx_strv env, users;
    struct sbx__lxd_session *s = NULL;
    struct sbx_snapshot_store *store = NULL;
    int rc, made = 0;
    sbx_strv_init(&env);
    sbx_strv_init(&users);
    if ((rc = precheck(c, spec, id, &store, &snap_ref, err)) < 0 ||
        (rc = image_source(c, &source, err)) < 0 || (rc = check_profiles(c, devices, err)) < 0)
        goto out;
    if (m &&
        ((rc = sbx_manifest_env_resolve(m, spec->pass_secrets, &env, err)) < 0 ||
         (rc = sbx_manifest_to_json(m, SBX_MANIFEST_JSON_NO_EPHEMERAL_ENV, &mjson, NULL, err)) < 0))
        goto out;
    if (m)
        sbx_manifest_account_users(m, &users);
    const char *root = m ? sbx_manifest_root(m) : DEFAULT_ROOT;
    const char *owner = users.n ? users.v[0] : c->user ? c->user : "";
    name = sbx_xasprintf(SBX__LXD_PREFIX "%s", id);
    config = instance_config(c, id, root, owner, &users, snap_ref, mjson, &env);
    if ((rc = make_instance(c, name, source, config, devices, err)) < 0)
        goto out;
    made = 1;
    char *path = sbx__lxd_inst_path(name, NULL);
    if ((rc = sbx__lxd_inst_state(&c->sv, name, "start", err)) == 0)
        rc = sbx__lxd_json(&c->sv, "GET", path, NULL, &inst, NULL, err);
    free(path);
    if (rc < 0 || (rc = sbx__lxd_session_from(&c->sv, inst, &s, err)) < 0 ||
        (rc = fill(c, &s, name, spec, store, snap_ref, owner, err)) < 0)
        goto out;
    *out = &s->base;
    s = NULL;
out:
    if (rc < 0) {
        struct sbx_error ignored = SBX_ERROR_INIT;
        if (made)
            (void)sbx__lxd_inst_delete(&c->sv, name, &ignored);
        sbx_error_prefix(err, "cannot create sandbox");
    }
    sbx__lxd_session_free(s);
    for (size_t i = 0; i < env.n; i++)
        explicit_bzero(env.v[i], strlen(env.v[i]));
    sbx_strv_release(&env);
    sbx_strv_release(&users);
    json_decref(mjson);
    json_decref(source);
    json_decref(devices);
    json_decref(config);
    json_decref(inst);
    free(name);
    free(snap_ref);
    sbx_snapshot_store_free(store);
    return rc;
}
