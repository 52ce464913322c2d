/* sbx: the manifest model: its lifecycle (and its parts'), the entry accessors, the path index
 * with the overlap rules, and the C builders of the entries that need nothing from outside
 * (sbx_manifest_add_file, _dir; sources.c has those of local and git sources). Every other
 * file of the folder builds on this one; it calls none of them. See include/sbx/manifest.h and
 * docs/internals/manifest.md. */
#include <stdlib.h>
#include <string.h>

#include "core/grow.h"
#include "sandbox/manifest/model.h"
#include "sbx/json.h"
#include "sbx/path.h"

static const char *const type_names[] = {
        [SBX_ENTRY_FILE] = "file",
        [SBX_ENTRY_DIR] = "dir",
        [SBX_ENTRY_LOCAL_FILE] = "local_file",
        [SBX_ENTRY_LOCAL_DIR] = "local_dir",
        [SBX_ENTRY_GIT_REPO] = "git_repo",
        [SBX_ENTRY_S3_MOUNT] = "s3_mount",
        [SBX_ENTRY_GCS_MOUNT] = "gcs_mount",
        [SBX_ENTRY_R2_MOUNT] = "r2_mount",
        [SBX_ENTRY_AZURE_BLOB_MOUNT] = "azure_blob_mount",
        [SBX_ENTRY_BOX_MOUNT] = "box_mount",
        [SBX_ENTRY_S3_FILES_MOUNT] = "s3_files_mount",
};

const char *sbx_entry_type_name(enum sbx_entry_type t)
{
    if ((size_t)t < SBX_ARRAY_LEN(type_names))
        return type_names[t];
    return "unknown";
}

int sbx_entry_type_is_mount(enum sbx_entry_type t)
{
    return t >= SBX_ENTRY_S3_MOUNT && t <= SBX_ENTRY_S3_FILES_MOUNT;
}

/* Entries nothing may be declared under. */
static int is_leaf_type(enum sbx_entry_type t)
{
    return t == SBX_ENTRY_FILE || t == SBX_ENTRY_LOCAL_FILE || sbx_entry_type_is_mount(t);
}

void sbx__manifest_entry_free(struct entry *e)
{
    if (!e)
        return;
    free(e->path);
    free(e->key);
    free(e->description);
    free(e->group);
    free(e->content);
    free(e->content_sha256);
    free(e->src);
    free(e->src_path);
    free(e->repo);
    free(e->host);
    free(e->ref);
    free(e->subpath);
    free(e->url);
    free(e->mount_path);
    json_decref(e->strategy);
    for (size_t i = 0; i < e->nfields; i++) {
        free(e->fields[i].name);
        free(e->fields[i].value);
    }
    free(e->fields);
    for (size_t i = 0; i < e->ncred_refs; i++) {
        free(e->cred_refs[i].name);
        free(e->cred_refs[i].value);
    }
    free(e->cred_refs);
    for (size_t i = 0; i < e->nsecrets; i++)
        sbx_secret_free(e->secrets[i]);
    free(e->secrets);
    free(e);
}

void sbx__manifest_env_free(struct env *v)
{
    if (!v)
        return;
    free(v->name);
    free(v->value);
    free(v->host_env);
    free(v->description);
    sbx_secret_free(v->secret);
    free(v);
}

void sbx__manifest_group_free(struct group *g)
{
    if (!g)
        return;
    free(g->name);
    sbx_strv_release(&g->users);
    free(g);
}

/* Point the public view at the owned strings. */
static void entry_sync(struct entry *e)
{
    struct sbx_manifest_entry *p = &e->pub;
    p->path = e->path;
    p->key = e->key;
    p->description = e->description;
    p->group = e->group;
    p->content = e->content;
    p->content_sha256 = e->content_sha256;
    p->src = e->src;
    p->src_path = e->src_path;
    p->repo = e->repo;
    p->host = e->host;
    p->ref = e->ref;
    p->subpath = e->subpath;
    p->url = e->url;
    p->mount_path = e->mount_path;
    p->mount_strategy = e->strategy;
}

struct entry *sbx__manifest_entry_new(enum sbx_entry_type t)
{
    struct entry *e = sbx_xcalloc(1, sizeof(*e));
    e->pub.type = t;
    e->pub.parent = SBX_MANIFEST_NONE;
    e->pub.mode = (t == SBX_ENTRY_FILE || t == SBX_ENTRY_LOCAL_FILE) ? 0644 : 0755;
    e->pub.ephemeral = sbx_entry_type_is_mount(t);
    e->pub.read_only = 1;
    return e;
}

int sbx__manifest_type_from_name(const char *s, enum sbx_entry_type *out)
{
    for (size_t i = 0; i < SBX_ARRAY_LEN(type_names); i++) {
        if (strcmp(type_names[i], s) == 0) {
            *out = (enum sbx_entry_type)i;
            return 1;
        }
    }
    return 0;
}

struct sbx_manifest *sbx_manifest_new(void)
{
    struct sbx_manifest *m = sbx_xcalloc(1, sizeof(*m));
    m->root = sbx_xstrdup("/workspace");
    sbx_strv_init(&m->users);
    sbx_strv_init(&m->allowlist);
    return m;
}

void sbx_manifest_free(struct sbx_manifest *m)
{
    if (!m)
        return;
    free(m->root);
    free(m->root_owner);
    for (size_t i = 0; i < m->n; i++)
        sbx__manifest_entry_free(m->entries[i]);
    free(m->entries);
    for (size_t i = 0; i < m->nenv; i++)
        sbx__manifest_env_free(m->env[i]);
    free(m->env);
    sbx_strv_release(&m->users);
    for (size_t i = 0; i < m->ngroups; i++)
        sbx__manifest_group_free(m->groups[i]);
    free(m->groups);
    sbx_strv_release(&m->allowlist);
    for (size_t i = 0; i < m->ngrants; i++) {
        free((char *)m->grants[i].path);
        free((char *)m->grants[i].host_path);
        free((char *)m->grants[i].description);
    }
    free(m->grants);
    sbx__pathmap_release(&m->paths);
    sbx__pathmap_release(&m->prefixes);
    free(m);
}

/* ---- accessors -------------------------------------------------------------------------- */

size_t sbx_manifest_grant_count(const struct sbx_manifest *m)
{
    return m ? m->ngrants : 0;
}

const struct sbx_manifest_grant *sbx_manifest_grant_at(const struct sbx_manifest *m, size_t i)
{
    return m && i < m->ngrants ? &m->grants[i] : NULL;
}

void sbx__manifest_add_grant(struct sbx_manifest *m, const struct sbx_manifest_grant *g)
{
    m->grants = sbx_xrealloc(m->grants, (m->ngrants + 1) * sizeof(*m->grants));
    m->grants[m->ngrants++] = (struct sbx_manifest_grant){
            .path = sbx_xstrdup(g->path),
            .host_path = g->host_path ? sbx_xstrdup(g->host_path) : NULL,
            .read_only = g->read_only,
            .description = g->description ? sbx_xstrdup(g->description) : NULL};
}

size_t sbx_manifest_entry_count(const struct sbx_manifest *m)
{
    return m->n;
}

const struct sbx_manifest_entry *sbx_manifest_entry_at(const struct sbx_manifest *m, size_t i)
{
    return i < m->n ? &m->entries[i]->pub : NULL;
}

const struct sbx_manifest_entry *sbx_manifest_find(const struct sbx_manifest *m, const char *path)
{
    size_t i = sbx__pathmap_get(&m->paths, path, strlen(path));
    return i == SBX_MANIFEST_NONE ? NULL : &m->entries[i]->pub;
}

const char *sbx_manifest_entry_field(const struct sbx_manifest_entry *pe, const char *name)
{
    const struct entry *e = (const struct entry *)pe;
    for (size_t i = 0; i < e->nfields; i++)
        if (strcmp(e->fields[i].name, name) == 0)
            return e->fields[i].value;
    return NULL;
}

const struct sbx_secret *sbx_manifest_entry_secret(const struct sbx_manifest_entry *pe,
                                                   const char *name)
{
    const struct entry *e = (const struct entry *)pe;
    for (size_t i = 0; i < e->nsecrets; i++)
        if (strcmp(sbx_secret_name(e->secrets[i]), name) == 0)
            return e->secrets[i];
    return NULL;
}

static void add_value(struct sbx_strv *out, const char *v)
{
    if (v && v[0] && sbx_strv_find(out, v) < 0)
        sbx_strv_push(out, v);
}

void sbx_manifest_secret_values(const struct sbx_manifest *m, struct sbx_strv *out)
{
    for (size_t i = 0; i < m->nenv; i++) {
        const struct env *v = m->env[i];
        if (v->secret)
            add_value(out, sbx_secret_reveal(v->secret, NULL));
        else if (v->host_env)
            add_value(out, getenv(v->host_env));
    }
    for (size_t i = 0; i < m->n; i++)
        for (size_t k = 0; k < m->entries[i]->nsecrets; k++)
            add_value(out, sbx_secret_reveal(m->entries[i]->secrets[k], NULL));
}

/* Same path, type and non-secret fields, in the same order (both parsed by the same code). */
static int same_mount(const struct entry *a, const struct entry *b)
{
    if (a->pub.type != b->pub.type || strcmp(a->path, b->path) != 0 || a->nfields != b->nfields)
        return 0;
    for (size_t i = 0; i < a->nfields; i++)
        if (strcmp(a->fields[i].name, b->fields[i].name) != 0 ||
            strcmp(a->fields[i].value, b->fields[i].value) != 0)
            return 0;
    return 1;
}

size_t sbx_manifest_copy_mount_secrets(const struct sbx_manifest *from, struct sbx_manifest *m)
{
    size_t n = 0;
    for (size_t i = 0; i < m->n; i++) {
        struct entry *e = m->entries[i];
        if (!sbx_entry_type_is_mount(e->pub.type) || e->nsecrets)
            continue;
        for (size_t k = 0; k < from->n; k++) {
            const struct entry *f = from->entries[k];
            if (!f->nsecrets || !same_mount(f, e))
                continue;
            e->secrets = sbx_xcalloc(f->nsecrets, sizeof(*e->secrets));
            for (size_t s = 0; s < f->nsecrets; s++)
                e->secrets[s] = sbx_secret_dup(f->secrets[s]);
            e->nsecrets = f->nsecrets;
            n++;
            break;
        }
    }
    return n;
}

const char *sbx_manifest_root(const struct sbx_manifest *m)
{
    return m->root;
}

const struct sbx_strv *sbx_manifest_mount_commands(const struct sbx_manifest *m)
{
    return m && m->has_allowlist ? &m->allowlist : NULL;
}

/* ---- path index and overlap rules ---------------------------------------------------------- */

/* Can an entry of type t at path p be added? Duplicates, anything under a leaf entry, and a
 * leaf entry over existing entries are refused. Messages name p. */
int sbx__manifest_check_overlap(const struct sbx_manifest *m, const char *p, enum sbx_entry_type t,
                                struct sbx_error *err)
{
    size_t plen = strlen(p);
    size_t i = sbx__pathmap_get(&m->paths, p, plen);
    if (i != SBX_MANIFEST_NONE)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "entry '%s': path is declared twice (first as a %s entry)", p,
                             sbx_entry_type_name(m->entries[i]->pub.type));
    for (size_t k = 0; k < plen; k++) {
        if (p[k] != '/')
            continue;
        i = sbx__pathmap_get(&m->paths, p, k);
        if (i != SBX_MANIFEST_NONE && is_leaf_type(m->entries[i]->pub.type))
            return sbx_error_set(err, SBX_E_INVAL, 0, "entry '%s': lies under %s entry '%s'", p,
                                 sbx_entry_type_name(m->entries[i]->pub.type), m->entries[i]->path);
    }
    if (is_leaf_type(t)) {
        i = sbx__pathmap_get(&m->prefixes, p, plen);
        if (i != SBX_MANIFEST_NONE)
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "entry '%s': a %s entry cannot contain entry '%s'", p,
                                 sbx_entry_type_name(t), m->entries[i]->path);
    }
    return 0;
}

/* Append e (already checked with check_overlap). Takes ownership. */
void sbx__manifest_append_entry(struct sbx_manifest *m, struct entry *e)
{
    SBX_ALLOC_GROW(m->entries, m->n + 1, m->alloc);
    size_t idx = m->n++;
    m->entries[idx] = e;
    size_t plen = strlen(e->path);
    sbx__pathmap_put(&m->paths, e->path, plen, idx);
    for (size_t k = 0; k < plen; k++)
        if (e->path[k] == '/' && sbx__pathmap_get(&m->prefixes, e->path, k) == SBX_MANIFEST_NONE)
            sbx__pathmap_put(&m->prefixes, e->path, k, idx);
    if (e->pub.type == SBX_ENTRY_FILE)
        m->total_content += e->pub.content_len;
    entry_sync(e);
}

/* ---- building from C ------------------------------------------------------------------------ */

int sbx_manifest_set_root(struct sbx_manifest *m, const char *root, struct sbx_error *err)
{
    int rc = sbx_path_check_root(root, err);
    if (rc) {
        sbx_error_prefix(err, "field 'root'");
        return rc;
    }
    free(m->root);
    m->root = sbx_xstrdup(root);
    return 0;
}

int sbx__manifest_add_begin(struct sbx_manifest *m, const char *path, enum sbx_entry_type t,
                            const struct sbx_manifest_entry_opts *o, struct entry **ep,
                            struct sbx_error *err)
{
    char *norm = NULL;
    int rc = sbx_path_normalize(path, strlen(path), 0, NULL, &norm, err);
    if (rc) {
        char q[300];
        sbx__manifest_quote_name(path, strlen(path), q, sizeof(q));
        sbx__manifest_strip_path_quote(err);
        sbx_error_prefix(err, "entry '%s'", q);
        return rc;
    }
    struct entry *e = sbx__manifest_entry_new(t);
    e->path = norm;
    e->key = sbx_xstrdup(norm);
    if (o) {
        if (o->mode) {
            if (o->mode > 0777) {
                sbx__manifest_entry_free(e);
                return sbx_error_set(err, SBX_E_INVAL, 0, "entry '%s': mode %o is not within 0777",
                                     norm, (unsigned)o->mode);
            }
            e->pub.mode = o->mode;
        }
        e->pub.ephemeral = o->ephemeral || sbx_entry_type_is_mount(t);
        if (o->description)
            e->description = sbx_xstrdup(o->description);
    }
    *ep = e;
    return 0;
}

int sbx__manifest_add_finish(struct sbx_manifest *m, struct entry *e, int rc, struct sbx_error *err)
{
    if (rc == 0 && m->n >= SBX_MANIFEST_DEFAULT_MAX_ENTRIES)
        rc = sbx_error_set(err, SBX_E_TOOBIG, 0,
                           "entry '%s': the manifest has more than %d entries", e->path,
                           SBX_MANIFEST_DEFAULT_MAX_ENTRIES);
    else if (rc == 0)
        rc = sbx__manifest_check_overlap(m, e->path, e->pub.type, err);
    else
        sbx_error_prefix(err, "entry '%s'", e->path);
    if (rc) {
        sbx__manifest_entry_free(e);
        return rc;
    }
    sbx__manifest_append_entry(m, e);
    return 0;
}

int sbx_manifest_add_file(struct sbx_manifest *m, const char *path, const void *data, size_t len,
                          const struct sbx_manifest_entry_opts *o, struct sbx_error *err)
{
    struct entry *e = NULL;
    int rc = sbx__manifest_add_begin(m, path, SBX_ENTRY_FILE, o, &e, err);
    if (rc)
        return rc;
    if (len > SBX_MANIFEST_DEFAULT_MAX_FILE_BYTES)
        rc = sbx_error_set(err, SBX_E_TOOBIG, 0,
                           "content of %zu bytes exceeds the limit of %zu "
                           "bytes",
                           len, SBX_MANIFEST_DEFAULT_MAX_FILE_BYTES);
    else if (m->total_content + len > SBX_MANIFEST_DEFAULT_MAX_TOTAL_BYTES)
        rc = sbx_error_set(err, SBX_E_TOOBIG, 0,
                           "file contents add up to more than the limit of %zu bytes",
                           SBX_MANIFEST_DEFAULT_MAX_TOTAL_BYTES);
    if (rc == 0) {
        e->content = sbx_xmalloc(len + 1);
        if (len)
            memcpy(e->content, data, len);
        e->content[len] = '\0';
        e->pub.content_len = len;
    }
    return sbx__manifest_add_finish(m, e, rc, err);
}

int sbx_manifest_add_dir(struct sbx_manifest *m, const char *path,
                         const struct sbx_manifest_entry_opts *o, struct sbx_error *err)
{
    struct entry *e = NULL;
    int rc = sbx__manifest_add_begin(m, path, SBX_ENTRY_DIR, o, &e, err);
    if (rc)
        return rc;
    return sbx__manifest_add_finish(m, e, 0, err);
}
