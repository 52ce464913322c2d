/* sbx: a deep copy of a manifest (sbx__manifest_dup), for a session that keeps the manifest it
 * was made from after its creator frees its own. Nothing is checked again: the copy is of a
 * manifest that passed every rule already. */
#include <stdlib.h>
#include <string.h>

#include "sandbox/manifest/model.h"

static char *dup0(const char *s)
{
    return s ? sbx_xstrdup(s) : NULL;
}

static struct kv *kv_dup(const struct kv *v, size_t n)
{
    struct kv *out = n ? sbx_xcalloc(n, sizeof(*out)) : NULL;
    for (size_t i = 0; i < n; i++) {
        out[i].name = sbx_xstrdup(v[i].name);
        out[i].value = sbx_xstrdup(v[i].value);
    }
    return out;
}

static struct entry *entry_dup(const struct entry *f)
{
    struct entry *e = sbx__manifest_entry_new(f->pub.type);
    e->pub = f->pub; /* the scalars; the pointers are set again when it is appended */
    e->depth = f->depth;
    e->path = dup0(f->path);
    e->key = dup0(f->key);
    e->description = dup0(f->description);
    e->group = dup0(f->group);
    if (f->content) {
        e->content = sbx_xmalloc(f->pub.content_len + 1);
        memcpy(e->content, f->content, f->pub.content_len + 1);
    }
    e->content_sha256 = dup0(f->content_sha256);
    e->src = dup0(f->src);
    e->src_path = dup0(f->src_path);
    e->repo = dup0(f->repo);
    e->host = dup0(f->host);
    e->ref = dup0(f->ref);
    e->subpath = dup0(f->subpath);
    e->url = dup0(f->url);
    e->mount_path = dup0(f->mount_path);
    if (f->strategy && !(e->strategy = json_deep_copy(f->strategy)))
        SBX_BUG("out of memory");
    e->fields = kv_dup(f->fields, f->nfields);
    e->nfields = f->nfields;
    e->cred_refs = kv_dup(f->cred_refs, f->ncred_refs);
    e->ncred_refs = f->ncred_refs;
    if (f->nsecrets) {
        e->secrets = sbx_xcalloc(f->nsecrets, sizeof(*e->secrets));
        for (size_t i = 0; i < f->nsecrets; i++)
            e->secrets[i] = sbx_secret_dup(f->secrets[i]);
        e->nsecrets = f->nsecrets;
    }
    return e;
}

static struct env *env_dup(const struct env *f)
{
    struct env *v = sbx_xcalloc(1, sizeof(*v));
    v->pub = f->pub; /* the scalars; the pointers are set again when it is added */
    v->name = sbx_xstrdup(f->name);
    v->value = dup0(f->value);
    v->host_env = dup0(f->host_env);
    v->description = dup0(f->description);
    v->secret = f->secret ? sbx_secret_dup(f->secret) : NULL;
    return v;
}

struct sbx_manifest *sbx__manifest_dup(const struct sbx_manifest *f)
{
    struct sbx_manifest *m = sbx_manifest_new();
    struct sbx_error err = SBX_ERROR_INIT;
    free(m->root);
    m->root = sbx_xstrdup(f->root);
    for (size_t i = 0; i < f->n; i++)
        sbx__manifest_append_entry(m, entry_dup(f->entries[i]));
    for (size_t i = 0; i < f->nenv; i++)
        sbx__manifest_env_put(m, env_dup(f->env[i]));
    for (size_t i = 0; i < f->users.n; i++)
        if (sbx_manifest_add_user(m, f->users.v[i], &err) < 0)
            SBX_BUG("a manifest's own user refused: %s", err.msg);
    for (size_t i = 0; i < f->ngroups; i++)
        if (sbx_manifest_add_group(m, f->groups[i]->name,
                                   (const char *const *)f->groups[i]->users.v, &err) < 0)
            SBX_BUG("a manifest's own group refused: %s", err.msg);
    for (size_t i = 0; i < f->allowlist.n; i++)
        sbx_strv_push(&m->allowlist, f->allowlist.v[i]);
    m->has_allowlist = f->has_allowlist;
    if (f->root_owner && sbx_manifest_set_root_owner(m, f->root_owner, &err) < 0)
        SBX_BUG("a manifest's own root owner refused: %s", err.msg);
    for (size_t i = 0; i < f->ngrants; i++)
        sbx__manifest_add_grant(m, &f->grants[i]);
    return m;
}
