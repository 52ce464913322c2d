/* sbx: the normalised manifest document (sbx_manifest_to_json): what loads again to the same
 * manifest, with secret values left out and counted. */
#include <string.h>

#include "sandbox/manifest/model.h"
#include "sbx/b64.h"
#include "sbx/hash.h"
#include "sbx/json.h"
#include "sbx/path.h"

static json_t *mode_json(mode_t mode, int dir)
{
    json_t *p = json_object();
    sbx_json_set(p, "owner", json_integer((mode >> 6) & 7));
    sbx_json_set(p, "group", json_integer((mode >> 3) & 7));
    sbx_json_set(p, "other", json_integer(mode & 7));
    sbx_json_set(p, "directory", json_boolean(dir));
    return p;
}

static void set_opt_str(json_t *o, const char *key, const char *v)
{
    if (v)
        sbx_json_set(o, key, sbx_json_str(v));
}

/* {"type": "sha256", "digest": ..., "size": N}: the file is in the workspace already. */
static int digest_json(const struct entry *e, json_t **out, struct sbx_error *err)
{
    char hex[SBX_SHA256_HEX_LEN + 1];
    if (e->content_sha256) {
        memcpy(hex, e->content_sha256, sizeof(hex));
    } else {
        uint8_t d[SBX_SHA256_LEN];
        int rc = sbx_sha256(e->content, e->pub.content_len, d, err);
        if (rc)
            return rc;
        sbx_hex(d, sizeof(d), hex);
    }
    json_t *o = json_object();
    sbx_json_set(o, "type", sbx_json_str("sha256"));
    sbx_json_set(o, "digest", sbx_json_str(hex));
    sbx_json_set(o, "size", json_integer((json_int_t)e->pub.content_len));
    *out = o;
    return 0;
}

/* Is e rebuilt on every start: ephemeral itself or beneath an ephemeral entry? */
static int rebuilt(const struct sbx_manifest *m, const struct entry *e)
{
    if (e->pub.ephemeral)
        return 1;
    char buf[SBX_PATH_MAX + 1];
    size_t n = strlen(e->path);
    if (n >= sizeof(buf))
        return 1;
    memcpy(buf, e->path, n + 1);
    for (char *slash = strrchr(buf, '/'); slash; slash = strrchr(buf, '/')) {
        *slash = '\0';
        const struct sbx_manifest_entry *a = sbx_manifest_find(m, buf);
        if (a && a->ephemeral)
            return 1;
    }
    return 0;
}

static int content_json(const struct sbx_manifest *m, const struct entry *e, int flags,
                        json_t **out, struct sbx_error *err)
{
    size_t n = e->pub.content_len;
    const char *c = (const char *)e->content;
    if (e->content_sha256 || ((flags & SBX_MANIFEST_JSON_CONTENT_DIGESTS) && !rebuilt(m, e)))
        return digest_json(e, out, err);
    if (!(flags & SBX_MANIFEST_JSON_BASE64) && !memchr(c, '\0', n) && sbx_utf8_valid(c, n)) {
        *out = sbx_json_strn(c, n);
        return 0;
    }
    struct sbx_buf b;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    int rc = sbx_b64_encode(c, n, &b, err);
    if (rc) {
        sbx_buf_release(&b);
        return rc;
    }
    json_t *o = json_object();
    sbx_json_set(o, "type", sbx_json_str("base64"));
    sbx_json_set(o, "data", sbx_json_strn(b.data, b.len));
    sbx_buf_release(&b);
    *out = o;
    return 0;
}

/* The fields of mount entry e; the literal credentials left out are counted in *omitted. */
static void mount_json(json_t *o, const struct entry *e, size_t *omitted)
{
    for (size_t i = 0; i < e->nfields; i++)
        sbx_json_set(o, e->fields[i].name, sbx_json_str(e->fields[i].value));
    set_opt_str(o, "mount_path", e->mount_path);
    sbx_json_set(o, "read_only", json_boolean(e->pub.read_only));
    if (e->strategy)
        sbx_json_set(o, "mount_strategy", json_deep_copy(e->strategy));
    /* A credential given by reference is written as the reference (no value in it);
     * only literal credentials are left out. */
    for (size_t i = 0; i < e->ncred_refs; i++) {
        json_t *ref = json_object();
        sbx_json_set(ref, "type", sbx_json_str("secret"));
        sbx_json_set(ref, "env", sbx_json_str(e->cred_refs[i].value));
        sbx_json_set(o, e->cred_refs[i].name, ref);
    }
    for (size_t i = 0; i < e->nsecrets; i++)
        *omitted += !json_object_get(o, sbx_secret_name(e->secrets[i]));
}

static int entry_json(const struct sbx_manifest *m, size_t idx, int flags, size_t *omitted,
                      json_t **out, struct sbx_error *err);

/* Children of the dir at idx are the later entries declared with parent == idx, up to the end
 * of its subtree. */
static int children_json(const struct sbx_manifest *m, size_t idx, int flags, size_t *omitted,
                         json_t *obj, struct sbx_error *err)
{
    int d = m->entries[idx]->depth;
    for (size_t j = idx + 1; j < m->n && m->entries[j]->depth > d; j++) {
        if (m->entries[j]->pub.parent != idx)
            continue;
        json_t *c = NULL;
        int rc = entry_json(m, j, flags, omitted, &c, err);
        if (rc)
            return rc;
        sbx_json_set(obj, m->entries[j]->key, c);
    }
    return 0;
}

static int entry_json(const struct sbx_manifest *m, size_t idx, int flags, size_t *omitted,
                      json_t **out, struct sbx_error *err)
{
    const struct entry *e = m->entries[idx];
    enum sbx_entry_type t = e->pub.type;
    json_t *o = json_object();
    int rc = 0;
    sbx_json_set(o, "type", sbx_json_str(sbx_entry_type_name(t)));
    set_opt_str(o, "description", e->description);
    if (e->pub.ephemeral && !sbx_entry_type_is_mount(t))
        sbx_json_set(o, "ephemeral", json_true());
    if (e->group) {
        json_t *g = json_object();
        sbx_json_set(g, "name", sbx_json_str(e->group));
        sbx_json_set(o, "group", g);
    }
    sbx_json_set(o, "permissions",
                 mode_json(e->pub.mode, t != SBX_ENTRY_FILE && t != SBX_ENTRY_LOCAL_FILE));
    if (sbx_entry_type_is_mount(t)) {
        mount_json(o, e, omitted);
    } else if (t == SBX_ENTRY_FILE) {
        json_t *c = NULL;
        if ((rc = content_json(m, e, flags, &c, err)))
            goto out;
        sbx_json_set(o, "content", c);
    } else if (t == SBX_ENTRY_DIR) {
        json_t *ch = json_object();
        sbx_json_set(o, "children", ch);
        rc = children_json(m, idx, flags, omitted, ch, err);
    } else if (t == SBX_ENTRY_LOCAL_FILE || t == SBX_ENTRY_LOCAL_DIR) {
        set_opt_str(o, "src", e->src);
    } else if (t == SBX_ENTRY_GIT_REPO) {
        set_opt_str(o, "host", e->host);
        set_opt_str(o, "repo", e->repo);
        set_opt_str(o, "ref", e->ref);
        set_opt_str(o, "subpath", e->subpath);
    }
out:
    if (rc) {
        json_decref(o);
        return rc;
    }
    *out = o;
    return 0;
}

int sbx_manifest_to_json(const struct sbx_manifest *m, int flags, json_t **out,
                         size_t *omitted_secrets, struct sbx_error *err)
{
    size_t omitted = 0;
    json_t *doc = json_object();
    json_t *entries = json_object();
    int rc = 0;
    sbx_json_set(doc, "version", json_integer(1));
    sbx_json_set(doc, "root", sbx_json_str(m->root));
    if (m->root_owner)
        sbx_json_set(doc, "root_owner", sbx_json_str(m->root_owner));
    sbx_json_set(doc, "entries", entries);
    for (size_t i = 0; i < m->n && rc == 0; i++) {
        if (m->entries[i]->pub.parent != SBX_MANIFEST_NONE)
            continue;
        json_t *e = NULL;
        rc = entry_json(m, i, flags, &omitted, &e, err);
        if (rc == 0)
            sbx_json_set(entries, m->entries[i]->key, e);
    }
    if (rc) {
        json_decref(doc);
        return rc;
    }
    json_t *env = json_object();
    for (size_t i = 0; i < m->nenv; i++) {
        const struct env *v = m->env[i];
        if (v->secret) {
            omitted++;
            continue;
        }
        if ((flags & SBX_MANIFEST_JSON_NO_EPHEMERAL_ENV) && v->pub.ephemeral && !v->host_env)
            continue;
        json_t *val;
        if (v->host_env) {
            val = json_object();
            sbx_json_set(val, "type", sbx_json_str("secret"));
            sbx_json_set(val, "env", sbx_json_str(v->host_env));
        } else if (v->description || v->pub.ephemeral) {
            val = json_object();
            sbx_json_set(val, "value", sbx_json_str(v->value));
        } else {
            val = sbx_json_str(v->value);
        }
        if (json_is_object(val)) {
            set_opt_str(val, "description", v->description);
            if (v->pub.ephemeral)
                sbx_json_set(val, "ephemeral", json_true());
        }
        sbx_json_set(env, v->name, val);
    }
    sbx_json_set(doc, "environment", env);
    json_t *users = json_array();
    for (size_t i = 0; i < m->users.n; i++) {
        json_t *u = json_object();
        sbx_json_set(u, "name", sbx_json_str(m->users.v[i]));
        sbx_json_append(users, u);
    }
    sbx_json_set(doc, "users", users);
    json_t *groups = json_array();
    for (size_t i = 0; i < m->ngroups; i++) {
        json_t *g = json_object();
        json_t *mem = json_array();
        sbx_json_set(g, "name", sbx_json_str(m->groups[i]->name));
        for (size_t j = 0; j < m->groups[i]->users.n; j++) {
            json_t *u = json_object();
            sbx_json_set(u, "name", sbx_json_str(m->groups[i]->users.v[j]));
            sbx_json_append(mem, u);
        }
        sbx_json_set(g, "users", mem);
        sbx_json_append(groups, g);
    }
    sbx_json_set(doc, "groups", groups);
    /* A session state's manifest (content by digest) never carries host grants: resuming it
     * must not grant a path by itself. */
    if (m->ngrants && !(flags & SBX_MANIFEST_JSON_CONTENT_DIGESTS)) {
        json_t *gs = json_array();
        for (size_t i = 0; i < m->ngrants; i++) {
            const struct sbx_manifest_grant *g = &m->grants[i];
            json_t *o = json_pack("{s:s, s:b, s:s?}", "path", g->path, "read_only", g->read_only,
                                  "description", g->description);
            if (g->host_path)
                sbx_json_set(o, "host_path", sbx_json_str(g->host_path));
            sbx_json_append(gs, o);
        }
        sbx_json_set(doc, "extra_path_grants", gs);
    }
    if (m->has_allowlist) {
        json_t *a = json_array();
        for (size_t i = 0; i < m->allowlist.n; i++)
            sbx_json_append(a, sbx_json_str(m->allowlist.v[i]));
        sbx_json_set(doc, "remote_mount_command_allowlist", a);
    }
    *out = doc;
    if (omitted_secrets)
        *omitted_secrets = omitted;
    return 0;
}
