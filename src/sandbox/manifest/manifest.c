/* sbx: the workspace manifest: model, loading, validation, serialising, C builders.
 * See include/sbx/manifest.h and docs/internals/manifest.md. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox/manifest/internal.h"
#include "sbx/b64.h"
#include "sbx/json.h"
#include "sbx/path.h"
#include "sbx/yaml.h"

#define ENV_VALUE_MAX  ((size_t)128 << 10)
#define DIR_WALK_MAX   100000
#define DIR_WALK_DEPTH 128

/* ---- the model ------------------------------------------------------------------------------ */

struct kv {
    char *name;
    char *value;
};

struct entry {
    struct sbx_manifest_entry pub; /* first: the public view points into this struct */
    int depth;                     /* nesting level of the declaration (0: top level) */
    char *path, *key, *description, *group;
    unsigned char *content;
    char *src, *src_path;
    char *repo, *host, *ref, *subpath, *url;
    char *mount_path;
    json_t *strategy;
    struct kv *fields;
    size_t nfields;
    struct sbx_secret **secrets;
    size_t nsecrets;
};

struct env {
    struct sbx_manifest_env pub;
    char *name, *value, *host_env, *description;
    struct sbx_secret *secret;
};

struct group {
    struct sbx_manifest_group pub;
    char *name;
    struct sbx_strv users;
};

struct sbx_manifest {
    char *root;
    struct entry **entries;
    size_t n, alloc;
    struct env **env;
    size_t nenv, envalloc;
    struct sbx_strv users;
    struct group **groups;
    size_t ngroups, galloc;
    struct sbx_strv allowlist;
    int has_allowlist;
    struct sbx__pathmap paths;    /* entry path -> entry index */
    struct sbx__pathmap prefixes; /* strict ancestor of some entry path -> that entry's index */
    size_t total_content;
};

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

static void entry_free(struct entry *e)
{
    if (!e)
        return;
    free(e->path);
    free(e->key);
    free(e->description);
    free(e->group);
    free(e->content);
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
    for (size_t i = 0; i < e->nsecrets; i++)
        sbx_secret_free(e->secrets[i]);
    free(e->secrets);
    free(e);
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

static void env_free(struct env *v)
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

static void env_sync(struct env *v)
{
    v->pub.name = v->name;
    v->pub.value = v->value;
    v->pub.host_env = v->host_env;
    v->pub.description = v->description;
    v->pub.secret = v->secret;
}

static void group_free(struct group *g)
{
    if (!g)
        return;
    free(g->name);
    sbx_strv_release(&g->users);
    free(g);
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
    for (size_t i = 0; i < m->n; i++)
        entry_free(m->entries[i]);
    free(m->entries);
    for (size_t i = 0; i < m->nenv; i++)
        env_free(m->env[i]);
    free(m->env);
    sbx_strv_release(&m->users);
    for (size_t i = 0; i < m->ngroups; i++)
        group_free(m->groups[i]);
    free(m->groups);
    sbx_strv_release(&m->allowlist);
    sbx__pathmap_release(&m->paths);
    sbx__pathmap_release(&m->prefixes);
    free(m);
}

/* ---- accessors -------------------------------------------------------------------------- */

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

size_t sbx_manifest_env_count(const struct sbx_manifest *m)
{
    return m->nenv;
}

const struct sbx_manifest_env *sbx_manifest_env_at(const struct sbx_manifest *m, size_t i)
{
    return i < m->nenv ? &m->env[i]->pub : NULL;
}

/* The variables sbx reads its own secrets from (src/model: the model's API key). */
static const char *const harness_credentials[] = {"OPENAI_API_KEY"};

int sbx_manifest_harness_credential(const char *name)
{
    for (size_t i = 0; i < sizeof(harness_credentials) / sizeof(*harness_credentials); i++)
        if (strcmp(name, harness_credentials[i]) == 0)
            return 1;
    return 0;
}

int sbx_manifest_env_resolve(const struct sbx_manifest *m, const struct sbx_strv *pass,
                             struct sbx_strv *out, struct sbx_error *err)
{
    struct sbx_strv tmp;
    sbx_strv_init(&tmp);
    for (size_t i = 0; i < m->nenv; i++) {
        const struct env *v = m->env[i];
        const char *val = v->value;
        if (v->secret)
            val = sbx_secret_reveal(v->secret, NULL);
        if (v->host_env) {
            if (sbx_manifest_harness_credential(v->host_env) &&
                !(pass && sbx_strv_find(pass, v->host_env) >= 0)) {
                sbx_strv_release(&tmp);
                return sbx_error_set(err, SBX_E_PERM, 0,
                                     "environment '%s': harness variable '%s' holds sbx's own "
                                     "credentials and is not passed into a sandbox unless "
                                     "asked for on the command line (--pass-secret %s)",
                                     v->name, v->host_env, v->host_env);
            }
            val = getenv(v->host_env);
            if (!val) {
                sbx_strv_release(&tmp);
                return sbx_error_set(err, SBX_E_NOTFOUND, 0,
                                     "environment '%s': harness variable '%s' is not set", v->name,
                                     v->host_env);
            }
        }
        sbx_strv_pushf(&tmp, "%s=%s", v->name, val);
    }
    for (size_t i = 0; i < tmp.n; i++)
        sbx_strv_push(out, tmp.v[i]);
    for (size_t i = 0; i < tmp.n; i++)
        explicit_bzero(tmp.v[i], strlen(tmp.v[i]));
    sbx_strv_release(&tmp);
    return 0;
}

const struct sbx_strv *sbx_manifest_users(const struct sbx_manifest *m)
{
    return &m->users;
}

size_t sbx_manifest_group_count(const struct sbx_manifest *m)
{
    return m->ngroups;
}

const struct sbx_manifest_group *sbx_manifest_group_at(const struct sbx_manifest *m, size_t i)
{
    return i < m->ngroups ? &m->groups[i]->pub : NULL;
}

void sbx_manifest_account_users(const struct sbx_manifest *m, struct sbx_strv *out)
{
    struct sbx_strv seen;
    sbx_strv_init(&seen);
    for (size_t i = 0; i < m->users.n; i++) {
        sbx_strv_push(&seen, m->users.v[i]);
        sbx_strv_push(out, m->users.v[i]);
    }
    for (size_t g = 0; g < m->ngroups; g++) {
        const struct sbx_strv *u = &m->groups[g]->users;
        for (size_t i = 0; i < u->n; i++) {
            if (sbx_strv_find(&seen, u->v[i]) >= 0)
                continue;
            sbx_strv_push(&seen, u->v[i]);
            sbx_strv_push(out, u->v[i]);
        }
    }
    sbx_strv_release(&seen);
}

const char *sbx_manifest_root(const struct sbx_manifest *m)
{
    return m->root;
}

/* ---- small helpers ---------------------------------------------------------------------- */

/* A printable rendering of a name from outside for messages: control bytes, NUL and invalid
 * UTF-8 become \xNN, long names are cut with "...". */
static void quote_name(const char *s, size_t len, char *out, size_t outsz)
{
    size_t o = 0;
    size_t i = 0;
    while (i < len && o + 8 < outsz) {
        unsigned char c = (unsigned char)s[i];
        size_t n = 1;
        if (c >= 0x80) {
            n = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
            if (i + n > len || !sbx_utf8_valid(s + i, n))
                n = 0;
        }
        if (c < 0x20 || c == 0x7f || n == 0) {
            static const char hex[] = "0123456789abcdef";
            out[o++] = '\\';
            out[o++] = 'x';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
            i++;
            continue;
        }
        if (o + n + 4 >= outsz)
            break;
        memcpy(out + o, s + i, n);
        o += n;
        i += n;
    }
    if (i < len && o + 4 <= outsz) {
        memcpy(out + o, "...", 3);
        o += 3;
    }
    out[o] = '\0';
}

/* A string field value must be free of control characters (they would let a value inject
 * lines into a mount helper's configuration). */
static int has_control(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return 1;
    return 0;
}

/* Optional string field: absent or null leaves *out alone. Strings must be free of NUL and
 * (unless allow_ctl) of control characters. */
static int opt_str(const json_t *obj, const char *key, const char **out, size_t *outlen,
                   int allow_ctl, struct sbx_error *err)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return sbx_error_set(err, SBX_E_INVAL, 0, "field '%s' must be a string, not %s", key,
                             sbx_json_typename(v));
    const char *s = json_string_value(v);
    size_t len = json_string_length(v);
    if (memchr(s, '\0', len))
        return sbx_error_set(err, SBX_E_INVAL, 0, "field '%s' must not contain a NUL byte", key);
    if (!allow_ctl && has_control(s, len))
        return sbx_error_set(err, SBX_E_INVAL, 0, "field '%s' must not contain control characters",
                             key);
    *out = s;
    if (outlen)
        *outlen = len;
    return 0;
}

static int req_str(const json_t *obj, const char *key, const char **out, struct sbx_error *err)
{
    const char *s = NULL;
    int rc = opt_str(obj, key, &s, NULL, 0, err);
    if (rc)
        return rc;
    if (!s)
        return sbx_error_set(err, SBX_E_INVAL, 0, "missing required field '%s'", key);
    if (!*s)
        return sbx_error_set(err, SBX_E_INVAL, 0, "field '%s' must not be empty", key);
    *out = s;
    return 0;
}

static int opt_bool(const json_t *obj, const char *key, int *out, struct sbx_error *err)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v))
        return sbx_error_set(err, SBX_E_INVAL, 0, "field '%s' must be a boolean, not %s", key,
                             sbx_json_typename(v));
    *out = json_is_true(v);
    return 0;
}

/* Copy obj with camelCase keys renamed to snake_case ("mountPath" -> "mount_path"), so a
 * manifest written by the JS SDK reads like one written by the Python SDK. Both spellings of
 * one field is an error. *out: new reference. */
static int snake_keys(const json_t *obj, json_t **out, struct sbx_error *err)
{
    json_t *res = json_object();
    const char *key;
    size_t klen;
    json_t *v;
    if (!res)
        SBX_BUG("out of memory");
    json_object_keylen_foreach((json_t *)obj, key, klen, v)
    {
        char buf[128];
        size_t o = 0;
        int changed = 0;
        for (size_t i = 0; i < klen && o + 2 < sizeof(buf); i++) {
            unsigned char c = (unsigned char)key[i];
            if (c >= 'A' && c <= 'Z') {
                if (o)
                    buf[o++] = '_';
                buf[o++] = (char)(c - 'A' + 'a');
                changed = 1;
            } else {
                buf[o++] = (char)c;
            }
        }
        if (!changed || o + 2 >= sizeof(buf)) {
            if (json_object_getn(res, key, klen)) {
                char q[160];
                quote_name(key, klen, q, sizeof(q));
                json_decref(res);
                return sbx_error_set(err, SBX_E_INVAL, 0, "field '%s' is given twice", q);
            }
            json_object_setn_nocheck(res, key, klen, v);
            continue;
        }
        if (json_object_getn(obj, buf, o) || json_object_getn(res, buf, o)) {
            char q[160];
            quote_name(key, klen, q, sizeof(q));
            json_decref(res);
            return sbx_error_set(err, SBX_E_INVAL, 0, "field '%s' repeats '%.*s'", q, (int)o, buf);
        }
        json_object_setn_nocheck(res, buf, o, v);
    }
    *out = res;
    return 0;
}

static int check_object(const json_t *v, const char *what, struct sbx_error *err)
{
    if (!json_is_object(v))
        return sbx_error_set(err, SBX_E_INVAL, 0, "%s must be an object, not %s", what,
                             sbx_json_typename(v));
    return 0;
}

/* Rewrite a path-module message "path '<p>' <rule>" to "path <rule>": the caller names the
 * entry already. */
static void strip_path_quote(struct sbx_error *err)
{
    if (!err || strncmp(err->msg, "path '", 6) != 0)
        return;
    char *last = NULL;
    for (char *p = strstr(err->msg + 6, "' "); p; p = strstr(p + 1, "' "))
        last = p;
    if (!last)
        return;
    memmove(err->msg + 5, last + 2, strlen(last + 2) + 1);
}

/* [a-z_][a-z0-9_-]{0,31}: portable user and group names. */
static int valid_account_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 32 || !((s[0] >= 'a' && s[0] <= 'z') || s[0] == '_'))
        return 0;
    for (size_t i = 1; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_' ||
              s[i] == '-'))
            return 0;
    return 1;
}

/* [A-Za-z_][A-Za-z0-9_]*, at most 255 bytes. */
static int valid_env_name(const char *s, size_t n)
{
    if (n == 0 || n > 255 || !(isalpha((unsigned char)s[0]) || s[0] == '_'))
        return 0;
    for (size_t i = 1; i < n; i++)
        if (!(isalnum((unsigned char)s[i]) || s[i] == '_'))
            return 0;
    return 1;
}

/* ---- path index and overlap rules ---------------------------------------------------------- */

/* Can an entry of type t at path p be added? Duplicates, anything under a leaf entry, and a
 * leaf entry over existing entries are refused. Messages name p. */
static int check_overlap(const struct sbx_manifest *m, const char *p, enum sbx_entry_type t,
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
static void append_entry(struct sbx_manifest *m, struct entry *e)
{
    if (m->n == m->alloc) {
        m->alloc = m->alloc ? m->alloc * 2 : 16;
        m->entries = sbx_xrealloc(m->entries, m->alloc * sizeof(*m->entries));
    }
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

static struct entry *entry_new(enum sbx_entry_type t)
{
    struct entry *e = sbx_xcalloc(1, sizeof(*e));
    e->pub.type = t;
    e->pub.parent = SBX_MANIFEST_NONE;
    e->pub.mode = (t == SBX_ENTRY_FILE || t == SBX_ENTRY_LOCAL_FILE) ? 0644 : 0755;
    e->pub.ephemeral = sbx_entry_type_is_mount(t);
    e->pub.read_only = 1;
    return e;
}

/* ---- loading ------------------------------------------------------------------------------ */

struct loader {
    struct sbx_manifest *m;
    char *base_dir; /* absolute, lexically normalised, no trailing '/' except "/" */
    size_t max_file, max_total, max_entries;
    int flags;
};

/* Lexically normalise an absolute host path ("." and ".." resolved, no symlinks followed).
 * Caller owns the result. */
static char *host_normalize(const char *abs)
{
    size_t len = strlen(abs);
    char *out = sbx_xmalloc(len + 2);
    size_t o = 0;
    size_t i = 0;
    while (i < len) {
        while (i < len && abs[i] == '/')
            i++;
        size_t j = i;
        while (j < len && abs[j] != '/')
            j++;
        size_t n = j - i;
        if (n == 0 || (n == 1 && abs[i] == '.')) {
            /* skip */
        } else if (n == 2 && abs[i] == '.' && abs[i + 1] == '.') {
            while (o > 0 && out[o - 1] != '/')
                o--;
            if (o > 0)
                o--;
        } else {
            out[o++] = '/';
            memcpy(out + o, abs + i, n);
            o += n;
        }
        i = j;
    }
    if (o == 0)
        out[o++] = '/';
    out[o] = '\0';
    return out;
}

/* Absolute normalised form of p, relative paths taken from base (absolute). */
static char *host_absolute(const char *base, const char *p)
{
    if (p[0] == '/')
        return host_normalize(p);
    char *joined = sbx_xasprintf("%s/%s", base, p);
    char *res = host_normalize(joined);
    free(joined);
    return res;
}

static int host_within(const char *p, const char *base)
{
    size_t bl = strlen(base);
    if (bl == 1)
        return 1;
    return strncmp(p, base, bl) == 0 && (p[bl] == '\0' || p[bl] == '/');
}

/* Refuse symlinks anywhere in the tree below the directory fd (the reference copies regular
 * files only and fails on symlinks; we fail early, at load). Walks at most DIR_WALK_MAX
 * entries; beyond that the copy re-checks every file anyway. dfd is consumed. */
static int walk_no_symlinks(int dfd, const char *rel, int depth, size_t *budget, const char *src,
                            struct sbx_error *err)
{
    DIR *d = fdopendir(dfd);
    if (!d) {
        int e = errno;
        close(dfd);
        return sbx_error_errno(err, e, "cannot read local source '%s'", src);
    }
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(d)) && *budget > 0) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        (*budget)--;
        struct stat st;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue; /* vanished while walking; the copy decides */
        char *sub = rel[0] ? sbx_xasprintf("%s/%s", rel, de->d_name) : sbx_xstrdup(de->d_name);
        if (S_ISLNK(st.st_mode)) {
            rc = sbx_error_set(err, SBX_E_PERM, 0,
                               "local source '%s' contains a symlink '%s' (symlinks are not "
                               "copied into the workspace)",
                               src, sub);
        } else if (S_ISDIR(st.st_mode) && depth < DIR_WALK_DEPTH) {
            int fd = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (fd >= 0)
                rc = walk_no_symlinks(fd, sub, depth + 1, budget, src, err);
        }
        free(sub);
        if (rc)
            break;
    }
    closedir(d);
    return rc;
}

/* Check a local source: abs lies under base; every component below base exists and is not a
 * symlink; the last is a regular file (want_dir 0) or a directory without symlinks inside. */
static int check_local_src(const char *base, const char *abs, const char *src, int want_dir,
                           struct sbx_error *err)
{
    if (!host_within(abs, base))
        return sbx_error_set(err, SBX_E_PERM, 0,
                             "local source '%s' is outside the base directory '%s'", src, base);
    size_t bl = strlen(base);
    size_t alen = strlen(abs);
    char *p = sbx_xstrdup(abs);
    int rc = 0;
    struct stat st;
    for (size_t k = bl == 1 ? 1 : bl + 1; k <= alen; k++) {
        if (k < alen && abs[k] != '/')
            continue;
        p[k] = '\0';
        if (lstat(p, &st) != 0) {
            int e = errno;
            if (e == ENOENT || e == ENOTDIR)
                rc = sbx_error_set(err, SBX_E_NOTFOUND, e, "local source '%s' does not exist", src);
            else
                rc = sbx_error_errno(err, e, "cannot inspect local source '%s'", src);
            goto out;
        }
        if (S_ISLNK(st.st_mode)) {
            rc = sbx_error_set(err, SBX_E_PERM, 0,
                               "local source '%s' is or passes through a symlink ('%s')", src, p);
            goto out;
        }
        p[k] = abs[k];
    }
    if (alen == bl && lstat(abs, &st) != 0) {
        rc = sbx_error_errno(err, errno, "cannot inspect local source '%s'", src);
        goto out;
    }
    if (!want_dir && !S_ISREG(st.st_mode)) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "local source '%s' is not a regular file", src);
        goto out;
    }
    if (want_dir) {
        if (!S_ISDIR(st.st_mode)) {
            rc = sbx_error_set(err, SBX_E_INVAL, 0, "local source '%s' is not a directory", src);
            goto out;
        }
        int fd = open(abs, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) {
            rc = sbx_error_errno(err, errno, "cannot open local source '%s'", src);
            goto out;
        }
        size_t budget = DIR_WALK_MAX;
        rc = walk_no_symlinks(fd, "", 0, &budget, src, err);
    }
out:
    free(p);
    return rc;
}

/* Parse `permissions` / `mode`: an object {owner, group, other, directory} (the reference's
 * shape), an `ls -l` string ("-rw-r--r--"), an octal string ("0644", "0o644") or an integer
 * mode (file-type bits are ignored). */
static int parse_mode(const json_t *v, const char *key, mode_t *out, struct sbx_error *err)
{
    if (json_is_integer(v)) {
        json_int_t x = json_integer_value(v);
        if (x >= 0 && ((x & 0170000) == 040000 || (x & 0170000) == 0100000))
            x &= 07777;
        if (x < 0 || x > 0777)
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "field '%s': %lld is not a permission mode between 0 and 0777 "
                                 "(write octal modes as a string, \"0644\")",
                                 key, (long long)x);
        *out = (mode_t)x;
        return 0;
    }
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        size_t n = json_string_length(v);
        if ((n == 10 || n == 11) && (s[0] == '-' || s[0] == 'd')) {
            static const char want[] = "rwxrwxrwx";
            mode_t mode = 0;
            int ok = n == 10 || s[10] == '+' || s[10] == '@' || s[10] == '.';
            for (int i = 0; i < 9 && ok; i++) {
                char c = s[1 + i];
                if (c == want[i] || ((i == 2 || i == 5 || i == 8) && (c == 's' || c == 't')))
                    mode |= 1u << (8 - i);
                else if (!(c == '-' || ((i == 2 || i == 5) && c == 'S') || (i == 8 && c == 'T')))
                    ok = 0;
            }
            if (ok) {
                *out = mode;
                return 0;
            }
        } else {
            const char *p = s;
            if (p[0] == '0' && (p[1] == 'o' || p[1] == 'O'))
                p += 2;
            size_t dn = strlen(p);
            int ok = dn >= 1 && dn <= 4 && dn == n - (size_t)(p - s);
            unsigned long mode = 0;
            for (size_t i = 0; i < dn && ok; i++) {
                if (p[i] < '0' || p[i] > '7')
                    ok = 0;
                mode = mode * 8 + (unsigned long)(p[i] - '0');
            }
            if (ok && mode <= 0777) {
                *out = (mode_t)mode;
                return 0;
            }
        }
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "field '%s': '%s' is not a permission mode (\"0644\" or "
                             "\"-rw-r--r--\")",
                             key, n < 64 && !has_control(s, n) ? s : "...");
    }
    if (json_is_object(v)) {
        static const char *const keys[] = {"owner", "group", "other", "directory", NULL};
        static const char *const bits[] = {"owner", "group", "other"};
        json_t *o = NULL;
        int rc = snake_keys(v, &o, err);
        if (rc == 0)
            rc = sbx_json_check_keys(o, keys, err);
        mode_t mode = 0700; /* the reference's Permissions defaults: owner rwx, others none */
        for (int i = 0; i < 3 && rc == 0; i++) {
            json_t *b = json_object_get(o, bits[i]);
            if (!b || json_is_null(b))
                continue;
            if (!json_is_integer(b) || json_integer_value(b) < 0 || json_integer_value(b) > 7) {
                rc = sbx_error_set(err, SBX_E_INVAL, 0,
                                   "field '%s': '%s' must be an integer from 0 to 7", key, bits[i]);
                break;
            }
            mode &= ~(mode_t)(7u << (6 - 3 * i));
            mode |= (mode_t)json_integer_value(b) << (6 - 3 * i);
        }
        int dir = 0;
        if (rc == 0)
            rc = opt_bool(o, "directory", &dir, err);
        json_decref(o);
        if (rc)
            return rc;
        *out = mode;
        return 0;
    }
    return sbx_error_set(err, SBX_E_INVAL, 0,
                         "field '%s' must be an object, a string or an integer, not %s", key,
                         sbx_json_typename(v));
}

/* Fields every entry may carry. `is_dir` is written by the Python SDK and ignored here. */
#define COMMON_KEYS "type", "description", "ephemeral", "group", "is_dir", "permissions", "mode"
#define MOUNT_KEYS  COMMON_KEYS, "mount_path", "read_only", "mount_strategy"

static const char *const file_keys[] = {COMMON_KEYS, "content", NULL};
static const char *const dir_keys[] = {COMMON_KEYS, "children", NULL};
static const char *const local_keys[] = {COMMON_KEYS, "src", NULL};
static const char *const git_keys[] = {COMMON_KEYS, "host", "repo", "ref", "subpath", NULL};

/* Mount kinds: their own fields, which are required, which are credentials. */
enum { MF_REQ = 1, MF_SECRET = 2, MF_URL = 4 };
struct mount_field {
    const char *name;
    int flags;
};
struct mount_kind {
    enum sbx_entry_type type;
    const struct mount_field *fields;
    const char *patterns[3]; /* in_container patterns this kind supports */
    const char *drivers[3];  /* docker volume drivers */
    const char *pair[2];     /* credentials that go together, or NULL */
};

static const struct mount_field s3_fields[] = {{"bucket", MF_REQ},
                                               {"access_key_id", MF_SECRET},
                                               {"secret_access_key", MF_SECRET},
                                               {"session_token", MF_SECRET},
                                               {"prefix", 0},
                                               {"region", 0},
                                               {"endpoint_url", MF_URL},
                                               {"s3_provider", 0},
                                               {NULL, 0}};
static const struct mount_field r2_fields[] = {
        {"bucket", MF_REQ},           {"account_id", MF_REQ},
        {"access_key_id", MF_SECRET}, {"secret_access_key", MF_SECRET},
        {"custom_domain", MF_URL},    {NULL, 0}};
static const struct mount_field gcs_fields[] = {{"bucket", MF_REQ},
                                                {"access_id", MF_SECRET},
                                                {"secret_access_key", MF_SECRET},
                                                {"prefix", 0},
                                                {"region", 0},
                                                {"endpoint_url", MF_URL},
                                                {"service_account_file", 0},
                                                {"service_account_credentials", MF_SECRET},
                                                {"access_token", MF_SECRET},
                                                {NULL, 0}};
static const struct mount_field azure_fields[] = {
        {"account", MF_REQ},       {"container", MF_REQ},      {"endpoint", MF_URL},
        {"identity_client_id", 0}, {"account_key", MF_SECRET}, {NULL, 0}};
static const struct mount_field box_fields[] = {{"path", 0},
                                                {"client_id", 0},
                                                {"client_secret", MF_SECRET},
                                                {"access_token", MF_SECRET},
                                                {"token", MF_SECRET},
                                                {"box_config_file", 0},
                                                {"config_credentials", MF_SECRET},
                                                {"box_sub_type", 0},
                                                {"root_folder_id", 0},
                                                {"impersonate", 0},
                                                {"owned_by", 0},
                                                {NULL, 0}};
static const struct mount_field s3files_fields[] = {
        {"file_system_id", MF_REQ}, {"subpath", 0}, {"mount_target_ip", 0},
        {"access_point", 0},        {"region", 0},  {NULL, 0}};

static const struct mount_kind mount_kinds[] = {
        {SBX_ENTRY_S3_MOUNT,
         s3_fields,
         {"rclone", "mountpoint"},
         {"rclone", "mountpoint"},
         {"access_key_id", "secret_access_key"}},
        {SBX_ENTRY_GCS_MOUNT,
         gcs_fields,
         {"rclone", "mountpoint"},
         {"rclone", "mountpoint"},
         {"access_id", "secret_access_key"}},
        {SBX_ENTRY_R2_MOUNT,
         r2_fields,
         {"rclone"},
         {"rclone"},
         {"access_key_id", "secret_access_key"}},
        {SBX_ENTRY_AZURE_BLOB_MOUNT, azure_fields, {"rclone", "fuse"}, {"rclone"}, {NULL, NULL}},
        {SBX_ENTRY_BOX_MOUNT, box_fields, {"rclone"}, {"rclone"}, {NULL, NULL}},
        {SBX_ENTRY_S3_FILES_MOUNT, s3files_fields, {"s3files"}, {NULL}, {NULL, NULL}},
};

static const struct mount_kind *mount_kind_of(enum sbx_entry_type t)
{
    for (size_t i = 0; i < SBX_ARRAY_LEN(mount_kinds); i++)
        if (mount_kinds[i].type == t)
            return &mount_kinds[i];
    return NULL;
}

static int in_list(const char *const *list, size_t n, const char *s)
{
    for (size_t i = 0; i < n && list[i]; i++)
        if (strcmp(list[i], s) == 0)
            return 1;
    return 0;
}

/* URLs from outside that end up in helper configuration: http(s) only, no user:password@,
 * no query (where signed-URL credentials live). Credentials belong in credential fields. */
static int check_endpoint(const char *key, const char *s, struct sbx_error *err)
{
    const char *rest = NULL;
    if (strncmp(s, "https://", 8) == 0)
        rest = s + 8;
    else if (strncmp(s, "http://", 7) == 0)
        rest = s + 7;
    if (!rest || !*rest)
        return sbx_error_set(err, SBX_E_INVAL, 0, "field '%s' must be an http(s) URL", key);
    size_t hostlen = strcspn(rest, "/");
    if (memchr(rest, '@', hostlen) || strchr(rest, '?') || strchr(rest, ' '))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "field '%s' must not carry credentials or a query; put credentials "
                             "in the mount's credential fields",
                             key);
    return 0;
}

static void add_field(struct entry *e, const char *name, const char *value)
{
    e->fields = sbx_xrealloc(e->fields, (e->nfields + 1) * sizeof(*e->fields));
    e->fields[e->nfields].name = sbx_xstrdup(name);
    e->fields[e->nfields].value = sbx_xstrdup(value);
    e->nfields++;
}

static void add_secret(struct entry *e, const char *name, const char *value, size_t len)
{
    e->secrets = sbx_xrealloc(e->secrets, (e->nsecrets + 1) * sizeof(*e->secrets));
    e->secrets[e->nsecrets++] = sbx_secret_new(name, value, len);
}

/* An object of credentials (driver_options, extra_options): each string value becomes the
 * secret "<prefix>.<key>"; null becomes an empty secret (an option without a value). */
static int parse_secret_map(struct entry *e, const json_t *obj, const char *prefix,
                            struct sbx_error *err)
{
    if (!obj || json_is_null(obj))
        return 0;
    if (!json_is_object(obj))
        return sbx_error_set(err, SBX_E_INVAL, 0, "field '%s' must be an object, not %s", prefix,
                             sbx_json_typename(obj));
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)obj, k, v)
    {
        if (!*k || has_control(k, strlen(k)) || strchr(k, '='))
            return sbx_error_set(err, SBX_E_INVAL, 0, "field '%s': bad option name", prefix);
        if (!json_is_string(v) && !json_is_null(v))
            return sbx_error_set(err, SBX_E_INVAL, 0, "field '%s.%s' must be a string, not %s",
                                 prefix, k, sbx_json_typename(v));
        const char *s = json_is_string(v) ? json_string_value(v) : "";
        size_t len = json_is_string(v) ? json_string_length(v) : 0;
        if (memchr(s, '\0', len) || has_control(s, len))
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "field '%s.%s' must not contain control characters", prefix, k);
        char *name = sbx_xasprintf("%s.%s", prefix, k);
        add_secret(e, name, s, len);
        free(name);
    }
    return 0;
}

static int check_string_list(const json_t *v, const char *key, struct sbx_error *err)
{
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_array(v))
        return sbx_error_set(err, SBX_E_INVAL, 0, "field '%s' must be an array, not %s", key,
                             sbx_json_typename(v));
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x)
    {
        if (!json_is_string(x) || has_control(json_string_value(x), json_string_length(x)))
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "field '%s' must be an array of strings without control "
                                 "characters",
                                 key);
    }
    return 0;
}

/* mount_strategy: {"type": "in_container", "pattern": {...}}, {"type": "docker_volume",
 * "driver": ..., "driver_options": {...}} or {"type": "local_bind"} (the JS SDK's). Keys are
 * checked per pattern; docker driver options become secrets; the rest is kept as JSON for the
 * mount code. */
static int parse_strategy(struct entry *e, const struct mount_kind *mk, const json_t *raw,
                          struct sbx_error *err)
{
    static const char *const in_keys[] = {"type", "pattern", NULL};
    static const char *const dv_keys[] = {"type", "driver", "driver_options", NULL};
    static const char *const lb_keys[] = {"type", NULL};
    static const char *const rclone_keys[] = {"type",
                                              "mode",
                                              "remote_name",
                                              "extra_args",
                                              "nfs_addr",
                                              "nfs_mount_options",
                                              "config_file_path",
                                              NULL};
    static const char *const opt_pattern_keys[] = {"type", "options", NULL};
    static const char *const fuse_keys[] = {"type",
                                            "allow_other",
                                            "log_type",
                                            "log_level",
                                            "cache_type",
                                            "cache_path",
                                            "cache_size_mb",
                                            "block_cache_block_size_mb",
                                            "block_cache_disk_timeout_sec",
                                            "file_cache_timeout_sec",
                                            "file_cache_max_size_mb",
                                            "attr_cache_timeout_sec",
                                            "entry_cache_timeout_sec",
                                            "negative_entry_cache_timeout_sec",
                                            NULL};
    static const char *const mp_opt_keys[] = {"prefix", "region", "endpoint_url", NULL};
    static const char *const s3f_opt_keys[] = {"mount_target_ip", "access_point", "region",
                                               "extra_options", NULL};
    json_t *s = NULL, *pat = NULL, *opts = NULL;
    const char *type = NULL;
    int rc;
    if (!json_is_object(raw)) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "must be an object, not %s",
                           sbx_json_typename(raw));
        goto fail;
    }
    rc = snake_keys(raw, &s, err);
    if (rc == 0)
        rc = req_str(s, "type", &type, err);
    if (rc)
        goto fail;
    if (strcmp(type, "in_container") == 0) {
        if ((rc = sbx_json_check_keys(s, in_keys, err)))
            goto fail;
        json_t *p = json_object_get(s, "pattern");
        if (!p || json_is_null(p)) {
            rc = sbx_error_set(err, SBX_E_INVAL, 0, "missing required field 'pattern'");
            goto fail;
        }
        if (!json_is_object(p)) {
            rc = sbx_error_set(err, SBX_E_INVAL, 0, "field 'pattern' must be an object, not %s",
                               sbx_json_typename(p));
            goto fail;
        }
        const char *pt = NULL;
        if ((rc = snake_keys(p, &pat, err)) || (rc = req_str(pat, "type", &pt, err)))
            goto fail;
        const char *const *keys = NULL;
        const char *const *okeys = NULL;
        if (strcmp(pt, "rclone") == 0)
            keys = rclone_keys;
        else if (strcmp(pt, "fuse") == 0)
            keys = fuse_keys;
        else if (strcmp(pt, "mountpoint") == 0)
            keys = opt_pattern_keys, okeys = mp_opt_keys;
        else if (strcmp(pt, "s3files") == 0)
            keys = opt_pattern_keys, okeys = s3f_opt_keys;
        if (!keys) {
            rc = sbx_error_set(err, SBX_E_INVAL, 0,
                               "unknown mount pattern '%s' (known: rclone, mountpoint, fuse, "
                               "s3files)",
                               pt);
            goto fail;
        }
        if (!in_list(mk->patterns, 3, pt)) {
            rc = sbx_error_set(err, SBX_E_INVAL, 0, "mount pattern '%s' cannot mount a %s", pt,
                               sbx_entry_type_name(mk->type));
            goto fail;
        }
        if ((rc = sbx_json_check_keys(pat, keys, err)))
            goto fail;
        if (strcmp(pt, "rclone") == 0) {
            const char *mode = NULL;
            if ((rc = opt_str(pat, "mode", &mode, NULL, 0, err)))
                goto fail;
            if (mode && strcmp(mode, "fuse") != 0 && strcmp(mode, "nfs") != 0) {
                rc = sbx_error_set(err, SBX_E_INVAL, 0,
                                   "field 'mode' must be \"fuse\" or \"nfs\", not '%s'", mode);
                goto fail;
            }
            if ((rc = check_string_list(json_object_get(pat, "extra_args"), "extra_args", err)) ||
                (rc = check_string_list(json_object_get(pat, "nfs_mount_options"),
                                        "nfs_mount_options", err)))
                goto fail;
        }
        if (okeys) {
            json_t *o = json_object_get(pat, "options");
            if (o && !json_is_null(o)) {
                if ((rc = check_object(o, "field 'options'", err)) ||
                    (rc = snake_keys(o, &opts, err)) ||
                    (rc = sbx_json_check_keys(opts, okeys, err)))
                    goto fail;
                const char *ep = NULL;
                if ((rc = opt_str(opts, "endpoint_url", &ep, NULL, 0, err)) ||
                    (ep && (rc = check_endpoint("endpoint_url", ep, err))))
                    goto fail;
                if (json_object_get(opts, "extra_options")) {
                    if ((rc = parse_secret_map(e, json_object_get(opts, "extra_options"),
                                               "extra_options", err)))
                        goto fail;
                    json_object_del(opts, "extra_options");
                }
                json_object_set(pat, "options", opts);
            }
        }
        json_object_set(s, "pattern", pat);
    } else if (strcmp(type, "docker_volume") == 0) {
        const char *drv = NULL;
        if ((rc = sbx_json_check_keys(s, dv_keys, err)) || (rc = req_str(s, "driver", &drv, err)))
            goto fail;
        if (!in_list(mk->drivers, 3, drv)) {
            rc = sbx_error_set(err, SBX_E_INVAL, 0, "docker volume driver '%s' cannot mount a %s",
                               drv, sbx_entry_type_name(mk->type));
            goto fail;
        }
        if ((rc = parse_secret_map(e, json_object_get(s, "driver_options"), "driver_options", err)))
            goto fail;
        json_object_del(s, "driver_options");
    } else if (strcmp(type, "local_bind") == 0) {
        if ((rc = sbx_json_check_keys(s, lb_keys, err)))
            goto fail;
    } else {
        rc = sbx_error_set(err, SBX_E_INVAL, 0,
                           "unknown mount strategy '%s' (known: in_container, docker_volume, "
                           "local_bind)",
                           type);
        goto fail;
    }
    e->strategy = s;
    json_decref(pat);
    json_decref(opts);
    return 0;
fail:
    sbx_error_prefix(err, "field 'mount_strategy'");
    json_decref(s);
    json_decref(pat);
    json_decref(opts);
    return rc;
}

static int parse_mount(struct entry *e, const json_t *o, struct sbx_error *err)
{
    const struct mount_kind *mk = mount_kind_of(e->pub.type);
    const char *allowed[32];
    size_t na = 0;
    static const char *const mkeys[] = {MOUNT_KEYS, NULL};
    for (size_t i = 0; mkeys[i]; i++)
        allowed[na++] = mkeys[i];
    for (size_t i = 0; mk->fields[i].name; i++)
        allowed[na++] = mk->fields[i].name;
    if (e->pub.type == SBX_ENTRY_S3_FILES_MOUNT)
        allowed[na++] = "extra_options";
    allowed[na] = NULL;
    int rc = sbx_json_check_keys(o, allowed, err);
    if (rc)
        return rc;
    for (size_t i = 0; mk->fields[i].name; i++) {
        const struct mount_field *f = &mk->fields[i];
        const char *v = NULL;
        size_t vlen = 0;
        if ((rc = opt_str(o, f->name, &v, &vlen, 0, err)))
            return rc;
        if (!v) {
            if (f->flags & MF_REQ)
                return sbx_error_set(err, SBX_E_INVAL, 0, "missing required field '%s'", f->name);
            continue;
        }
        if ((f->flags & MF_REQ) && !*v)
            return sbx_error_set(err, SBX_E_INVAL, 0, "field '%s' must not be empty", f->name);
        if ((f->flags & MF_URL) && (rc = check_endpoint(f->name, v, err)))
            return rc;
        if (f->flags & MF_SECRET) {
            if (!*v)
                return sbx_error_set(err, SBX_E_INVAL, 0, "credential '%s' must not be empty",
                                     f->name);
            add_secret(e, f->name, v, vlen);
        } else {
            add_field(e, f->name, v);
        }
    }
    if (mk->pair[0] && (!!sbx_manifest_entry_secret(&e->pub, mk->pair[0]) !=
                        !!sbx_manifest_entry_secret(&e->pub, mk->pair[1])))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "credentials '%s' and '%s' go together: give "
                             "both or neither",
                             mk->pair[0], mk->pair[1]);
    const char *st = sbx_manifest_entry_field(&e->pub, "box_sub_type");
    if (st && strcmp(st, "user") != 0 && strcmp(st, "enterprise") != 0)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "field 'box_sub_type' must be \"user\" or \"enterprise\", not '%s'",
                             st);
    const char *sub = sbx_manifest_entry_field(&e->pub, "subpath");
    if (sub && *sub && e->pub.type == SBX_ENTRY_S3_FILES_MOUNT) {
        char *norm = NULL;
        if ((rc = sbx_path_normalize(sub, strlen(sub), SBX_PATH_ALLOW_ROOT, NULL, &norm, err))) {
            strip_path_quote(err);
            sbx_error_prefix(err, "field 'subpath'");
            return rc;
        }
        free(norm);
    }
    if (e->pub.type == SBX_ENTRY_S3_FILES_MOUNT &&
        (rc = parse_secret_map(e, json_object_get(o, "extra_options"), "extra_options", err)))
        return rc;

    const char *mp = NULL;
    if ((rc = opt_str(o, "mount_path", &mp, NULL, 0, err)))
        return rc;
    if (mp) {
        if (mp[0] == '/') {
            char *n = host_normalize(mp);
            int dots = strcmp(n, "/") == 0;
            for (const char *c = mp; *c && !dots; c++)
                dots = c[0] == '/' && c[1] == '.' && c[2] == '.' && (c[3] == '/' || !c[3]);
            if (dots) {
                free(n);
                return sbx_error_set(err, SBX_E_INVAL, 0,
                                     "field 'mount_path' must not be '/' or contain '..'");
            }
            e->mount_path = n;
        } else {
            char *n = NULL;
            if ((rc = sbx_path_normalize(mp, strlen(mp), 0, NULL, &n, err))) {
                strip_path_quote(err);
                sbx_error_prefix(err, "field 'mount_path'");
                return rc;
            }
            e->mount_path = n;
        }
    }
    if ((rc = opt_bool(o, "read_only", &e->pub.read_only, err)))
        return rc;
    int eph = 1;
    if ((rc = opt_bool(o, "ephemeral", &eph, err)))
        return rc;
    if (!eph)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "mounts are always ephemeral; remove 'ephemeral: false'");
    e->pub.ephemeral = 1;
    json_t *strat = json_object_get(o, "mount_strategy");
    if (strat && !json_is_null(strat) && (rc = parse_strategy(e, mk, strat, err)))
        return rc;
    return 0;
}

/* repo "owner/name" (segments of [A-Za-z0-9._-], not "." or "..", not starting with '-'),
 * an https:// or file:// URL, or an absolute local path. */
static int parse_git(struct entry *e, const json_t *o, struct sbx_error *err)
{
    const char *repo = NULL, *host = NULL, *ref = NULL, *sub = NULL;
    int rc;
    if ((rc = sbx_json_check_keys(o, git_keys, err)) || (rc = req_str(o, "repo", &repo, err)) ||
        (rc = opt_str(o, "host", &host, NULL, 0, err)) ||
        (rc = opt_str(o, "ref", &ref, NULL, 0, err)) ||
        (rc = opt_str(o, "subpath", &sub, NULL, 0, err)))
        return rc;
    int is_url = 0;
    if (strncmp(repo, "https://", 8) == 0) {
        const char *h = repo + 8;
        size_t hl = strcspn(h, "/");
        if (!hl || memchr(h, '@', hl) || strchr(repo, '?') || strchr(repo, ' '))
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "field 'repo': URL must name a host and carry no credentials or "
                                 "query");
        is_url = 1;
    } else if (strncmp(repo, "file:///", 8) == 0 || repo[0] == '/') {
        is_url = 1;
    } else {
        const char *p = repo;
        int segs = 0;
        while (*p) {
            size_t n = strcspn(p, "/");
            if (n == 0 || p[0] == '-' || (n == 1 && p[0] == '.') ||
                (n == 2 && p[0] == '.' && p[1] == '.'))
                goto bad_repo;
            for (size_t i = 0; i < n; i++)
                if (!(isalnum((unsigned char)p[i]) || p[i] == '.' || p[i] == '_' || p[i] == '-'))
                    goto bad_repo;
            segs++;
            p += n;
            if (*p == '/' && !*++p)
                goto bad_repo;
        }
        if (segs < 2)
            goto bad_repo;
    }
    if (is_url && host && strcmp(host, "github.com") != 0)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "field 'host' cannot be combined with a URL in 'repo'");
    if (!is_url) {
        if (!host)
            host = "github.com";
        if (!*host || host[0] == '-' ||
            strspn(host, "abcdefghijklmnopqrstuvwxyz"
                         "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-:") != strlen(host))
            return sbx_error_set(err, SBX_E_INVAL, 0, "field 'host': '%s' is not a host name",
                                 host);
        e->host = sbx_xstrdup(host);
        size_t rl = strlen(repo);
        int has_git = rl > 4 && strcmp(repo + rl - 4, ".git") == 0;
        e->url = sbx_xasprintf("https://%s/%s%s", host, repo, has_git ? "" : ".git");
    } else {
        e->url = sbx_xstrdup(repo);
    }
    e->repo = sbx_xstrdup(repo);
    if (ref) {
        size_t n = strlen(ref);
        if (n == 0 || n > 255 || ref[0] == '-' || strstr(ref, "..") || strpbrk(ref, " ~^:?*[\\") ||
            ref[n - 1] == '/' || ref[n - 1] == '.')
            return sbx_error_set(err, SBX_E_INVAL, 0, "field 'ref': '%s' is not a valid git ref",
                                 n < 200 ? ref : "...");
        e->ref = sbx_xstrdup(ref);
    }
    if (sub) {
        char *n = NULL;
        if ((rc = sbx_path_normalize(sub, strlen(sub), SBX_PATH_ALLOW_ROOT, NULL, &n, err))) {
            strip_path_quote(err);
            sbx_error_prefix(err, "field 'subpath'");
            return rc;
        }
        if (*n)
            e->subpath = n;
        else
            free(n);
    }
    return 0;
bad_repo:
    return sbx_error_set(err, SBX_E_INVAL, 0,
                         "field 'repo': '%s' is neither \"owner/name\" nor an https:// or file:// "
                         "URL",
                         strlen(repo) < 200 ? repo : "...");
}

static int parse_content(struct loader *L, struct entry *e, const json_t *c, struct sbx_error *err)
{
    if (!c)
        return sbx_error_set(err, SBX_E_INVAL, 0, "missing required field 'content'");
    if (json_is_string(c)) {
        size_t len = json_string_length(c);
        if (len > L->max_file)
            return sbx_error_set(err, SBX_E_TOOBIG, 0,
                                 "content of %zu bytes exceeds the limit of %zu bytes", len,
                                 L->max_file);
        e->content = sbx_xmalloc(len + 1);
        memcpy(e->content, json_string_value(c), len);
        e->content[len] = '\0';
        e->pub.content_len = len;
        return 0;
    }
    if (!json_is_object(c))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "field 'content' must be a string or {\"type\": \"base64\", "
                             "\"data\": ...}, not %s",
                             sbx_json_typename(c));
    static const char *const keys[] = {"type", "data", "size", NULL};
    const char *t = NULL, *data = NULL;
    size_t dlen = 0;
    int rc;
    if ((rc = sbx_json_check_keys(c, keys, err)) || (rc = req_str(c, "type", &t, err)))
        goto prefix;
    if (strcmp(t, "base64") != 0) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "unknown encoding '%s' (known: base64)", t);
        goto prefix;
    }
    if ((rc = opt_str(c, "data", &data, &dlen, 1, err)))
        goto prefix;
    if (!data) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "missing required field 'data'");
        goto prefix;
    }
    json_t *sz = json_object_get(c, "size");
    json_int_t declared = -1;
    if (sz && !json_is_null(sz)) {
        if (!json_is_integer(sz) || json_integer_value(sz) < 0) {
            rc = sbx_error_set(err, SBX_E_INVAL, 0, "field 'size' must be a non-negative integer");
            goto prefix;
        }
        declared = json_integer_value(sz);
    }
    /* Limits are checked on the declared size and on the encoded length, before decoding:
     * nothing near the limit is ever allocated for a document that lies about its size. */
    if (declared >= 0 && (unsigned long long)declared > L->max_file)
        return sbx_error_set(err, SBX_E_TOOBIG, 0,
                             "content of %lld bytes exceeds the limit of %zu bytes",
                             (long long)declared, L->max_file);
    if (dlen / 4 * 3 > L->max_file + L->max_file / 16 + 3)
        return sbx_error_set(err, SBX_E_TOOBIG, 0,
                             "content of about %zu bytes exceeds the limit of %zu bytes",
                             dlen / 4 * 3, L->max_file);
    struct sbx_buf b;
    sbx_buf_init(&b, L->max_file);
    rc = sbx_b64_decode(data, dlen, &b, err);
    if (rc == -SBX_E_TOOBIG) {
        sbx_buf_release(&b);
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "content exceeds the limit of %zu bytes",
                             L->max_file);
    }
    if (rc) {
        sbx_buf_release(&b);
        sbx_error_prefix(err, "field 'content'");
        return rc;
    }
    if (declared >= 0 && (size_t)declared != b.len) {
        size_t got = b.len;
        sbx_buf_release(&b);
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "field 'content': decoded %zu bytes but 'size' says %lld", got,
                             (long long)declared);
    }
    e->pub.content_len = b.len;
    e->content = (unsigned char *)sbx_buf_detach(&b, NULL);
    return 0;
prefix:
    sbx_error_prefix(err, "field 'content'");
    return rc;
}

static int parse_group_ref(const json_t *v, char **out, struct sbx_error *err)
{
    const char *name = NULL;
    int rc;
    if (json_is_string(v)) {
        name = json_string_value(v);
    } else if (json_is_object(v)) {
        static const char *const keys[] = {"name", "users", NULL};
        if ((rc = sbx_json_check_keys(v, keys, err)) || (rc = req_str(v, "name", &name, err))) {
            sbx_error_prefix(err, "field 'group'");
            return rc;
        }
    } else {
        return sbx_error_set(err, SBX_E_INVAL, 0, "field 'group' must be an object, not %s",
                             sbx_json_typename(v));
    }
    if (!valid_account_name(name))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "field 'group': '%s' is not a valid name ([a-z_][a-z0-9_-]{0,31})",
                             strlen(name) < 64 && !has_control(name, strlen(name)) ? name : "...");
    *out = sbx_xstrdup(name);
    return 0;
}

static enum sbx_entry_type type_from_name(const char *s, int *ok)
{
    for (size_t i = 0; i < SBX_ARRAY_LEN(type_names); i++) {
        if (strcmp(type_names[i], s) == 0) {
            *ok = 1;
            return (enum sbx_entry_type)i;
        }
    }
    *ok = 0;
    return SBX_ENTRY_FILE;
}

static int parse_entry(struct loader *L, size_t parent, const char *parent_path, int depth,
                       const char *key, size_t klen, const json_t *val, struct sbx_error *err);

/* Fill e from its (snake-cased) object o; the common fields, then the type's own. */
static int parse_entry_body(struct loader *L, struct entry *e, const json_t *o,
                            struct sbx_error *err)
{
    int rc;
    const char *desc = NULL;
    if ((rc = opt_str(o, "description", &desc, NULL, 1, err)))
        return rc;
    if (desc)
        e->description = sbx_xstrdup(desc);
    if ((rc = opt_bool(o, "ephemeral", &e->pub.ephemeral, err)))
        return rc;
    json_t *g = json_object_get(o, "group");
    if (g && !json_is_null(g) && (rc = parse_group_ref(g, &e->group, err)))
        return rc;
    int isdir = 0;
    if ((rc = opt_bool(o, "is_dir", &isdir, err)))
        return rc;
    json_t *perm = json_object_get(o, "permissions");
    json_t *mode = json_object_get(o, "mode");
    if (perm && !json_is_null(perm) && mode && !json_is_null(mode))
        return sbx_error_set(err, SBX_E_INVAL, 0, "give 'permissions' or 'mode', not both");
    if (perm && !json_is_null(perm) && (rc = parse_mode(perm, "permissions", &e->pub.mode, err)))
        return rc;
    if (mode && !json_is_null(mode) && (rc = parse_mode(mode, "mode", &e->pub.mode, err)))
        return rc;

    switch (e->pub.type) {
    case SBX_ENTRY_FILE:
        if ((rc = sbx_json_check_keys(o, file_keys, err)) ||
            (rc = parse_content(L, e, json_object_get(o, "content"), err)))
            return rc;
        if (L->m->total_content + e->pub.content_len > L->max_total)
            return sbx_error_set(err, SBX_E_TOOBIG, 0,
                                 "file contents add up to more than the limit of %zu bytes",
                                 L->max_total);
        return 0;
    case SBX_ENTRY_DIR:
        return sbx_json_check_keys(o, dir_keys, err);
    case SBX_ENTRY_LOCAL_FILE:
    case SBX_ENTRY_LOCAL_DIR: {
        int is_dir = e->pub.type == SBX_ENTRY_LOCAL_DIR;
        const char *src = NULL;
        if ((rc = sbx_json_check_keys(o, local_keys, err)))
            return rc;
        if (is_dir ? (rc = opt_str(o, "src", &src, NULL, 0, err))
                   : (rc = req_str(o, "src", &src, err)))
            return rc;
        if (!src)
            return 0;
        if (!*src)
            return sbx_error_set(err, SBX_E_INVAL, 0, "field 'src' must not be empty");
        e->src = sbx_xstrdup(src);
        e->src_path = host_absolute(L->base_dir, src);
        if (!(L->flags & SBX_MANIFEST_NO_HOST_CHECKS))
            return check_local_src(L->base_dir, e->src_path, src, is_dir, err);
        return 0;
    }
    case SBX_ENTRY_GIT_REPO:
        return parse_git(e, o, err);
    case SBX_ENTRY_S3_MOUNT:
    case SBX_ENTRY_GCS_MOUNT:
    case SBX_ENTRY_R2_MOUNT:
    case SBX_ENTRY_AZURE_BLOB_MOUNT:
    case SBX_ENTRY_BOX_MOUNT:
    case SBX_ENTRY_S3_FILES_MOUNT:
        if (e->pub.mode != 0755)
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "mount permissions are not enforced; configure access at the "
                                 "storage provider and remove 'permissions'");
        return parse_mount(e, o, err);
    }
    return 0;
}

static int parse_children(struct loader *L, size_t idx, const json_t *children,
                          struct sbx_error *err)
{
    if (!children || json_is_null(children))
        return 0;
    struct entry *dir = L->m->entries[idx];
    if (!json_is_object(children))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "entry '%s': field 'children' must be an object, not %s", dir->path,
                             sbx_json_typename(children));
    const char *k;
    size_t kl;
    json_t *v;
    size_t count = 0;
    json_object_keylen_foreach((json_t *)children, k, kl, v)
    {
        int rc = parse_entry(L, idx, dir->path, dir->depth + 1, k, kl, v, err);
        if (rc)
            return rc;
        count++;
    }
    dir->pub.nchildren = count;
    return 0;
}

static int parse_entry(struct loader *L, size_t parent, const char *parent_path, int depth,
                       const char *key, size_t klen, const json_t *val, struct sbx_error *err)
{
    char *nkey = NULL, *path = NULL;
    json_t *o = NULL;
    struct entry *e = NULL;
    int rc = sbx_path_normalize(key, klen, 0, NULL, &nkey, err);
    if (rc) {
        char q[300];
        struct sbx_buf raw;
        sbx_buf_init(&raw, SBX_BUF_NOLIMIT);
        if ((parent_path &&
             (sbx_buf_adds(&raw, parent_path, NULL) || sbx_buf_addch(&raw, '/', NULL))) ||
            sbx_buf_add(&raw, key, klen, NULL))
            SBX_BUG("unbounded buffer refused data");
        quote_name(raw.data, raw.len, q, sizeof(q));
        sbx_buf_release(&raw);
        strip_path_quote(err);
        sbx_error_prefix(err, "entry '%s'", q);
        return rc;
    }
    path = parent_path ? sbx_xasprintf("%s/%s", parent_path, nkey) : sbx_xstrdup(nkey);
    if (strlen(path) > SBX_PATH_MAX) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "entry '%.200s...': path is longer than %d bytes",
                           path, SBX_PATH_MAX);
        goto out;
    }
    if (L->m->n >= L->max_entries) {
        rc = sbx_error_set(err, SBX_E_TOOBIG, 0,
                           "entry '%s': the manifest has more than %zu entries", path,
                           L->max_entries);
        goto out;
    }
    if (!json_is_object(val)) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "entry '%s': must be an object, not %s", path,
                           sbx_json_typename(val));
        goto out;
    }
    if ((rc = snake_keys(val, &o, err)))
        goto prefix;
    const char *tname = NULL;
    if ((rc = req_str(o, "type", &tname, err)))
        goto prefix;
    int ok;
    enum sbx_entry_type t = type_from_name(tname, &ok);
    if (!ok) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0,
                           "unknown type '%s' (known: dir, file, local_file, local_dir, git_repo, "
                           "s3_mount, gcs_mount, r2_mount, azure_blob_mount, box_mount, "
                           "s3_files_mount)",
                           strlen(tname) < 64 ? tname : "...");
        goto prefix;
    }
    e = entry_new(t);
    e->path = path;
    path = NULL;
    e->key = nkey;
    nkey = NULL;
    e->depth = depth;
    e->pub.parent = parent;
    if ((rc = parse_entry_body(L, e, o, err)))
        goto prefix;
    if ((rc = check_overlap(L->m, e->path, t, err)))
        goto out;
    size_t idx = L->m->n;
    append_entry(L->m, e);
    e = NULL;
    if (t == SBX_ENTRY_DIR)
        rc = parse_children(L, idx, json_object_get(o, "children"), err);
    goto out;
prefix:
    sbx_error_prefix(err, "entry '%s'", e ? e->path : path);
out:
    entry_free(e);
    json_decref(o);
    free(nkey);
    free(path);
    return rc;
}

static int set_env(struct sbx_manifest *m, struct env *v)
{
    for (size_t i = 0; i < m->nenv; i++) {
        if (strcmp(m->env[i]->name, v->name) == 0) {
            env_free(m->env[i]);
            m->env[i] = v;
            env_sync(v);
            return 0;
        }
    }
    if (m->nenv == m->envalloc) {
        m->envalloc = m->envalloc ? m->envalloc * 2 : 8;
        m->env = sbx_xrealloc(m->env, m->envalloc * sizeof(*m->env));
    }
    m->env[m->nenv++] = v;
    env_sync(v);
    return 0;
}

static int check_env_value(const char *s, size_t len, struct sbx_error *err)
{
    if (len > ENV_VALUE_MAX)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "value of %zu bytes exceeds the limit of %zu",
                             len, ENV_VALUE_MAX);
    if (memchr(s, '\0', len))
        return sbx_error_set(err, SBX_E_INVAL, 0, "value must not contain a NUL byte");
    return 0;
}

/* One environment value: "x", {"value": "x"}, {"type": "str", "value": "x"}, {"value": "x",
 * "secret": true}, {"type": "secret", "value": "x"}, {"type": "secret", "env": "HOST_VAR"}, any
 * of those objects with "description" / "ephemeral", and the Python SDK's EnvEntry
 * {"description", "ephemeral", "value": {"type": "str", "value": "x"}}. */
static int parse_env_value(struct env *v, const json_t *raw, int nested, struct sbx_error *err)
{
    static const char *const keys[] = {"type",        "value",     "secret", "env",
                                       "description", "ephemeral", NULL};
    if (json_is_string(raw)) {
        int rc = check_env_value(json_string_value(raw), json_string_length(raw), err);
        if (rc == 0)
            v->value = sbx_xstrdup(json_string_value(raw));
        return rc;
    }
    if (!json_is_object(raw))
        return sbx_error_set(err, SBX_E_INVAL, 0, "must be a string or an object, not %s",
                             sbx_json_typename(raw));
    json_t *o = NULL;
    const char *type = NULL, *desc = NULL, *host = NULL, *val = NULL;
    size_t vlen = 0;
    int secret = 0;
    int rc = snake_keys(raw, &o, err);
    if (rc == 0)
        rc = sbx_json_check_keys(o, keys, err);
    if (rc == 0)
        rc = opt_str(o, "type", &type, NULL, 0, err);
    if (rc == 0)
        rc = opt_str(o, "description", &desc, NULL, 1, err);
    if (rc == 0)
        rc = opt_bool(o, "ephemeral", &v->pub.ephemeral, err);
    if (rc == 0)
        rc = opt_bool(o, "secret", &secret, err);
    if (rc == 0)
        rc = opt_str(o, "env", &host, NULL, 0, err);
    if (rc)
        goto out;
    if (desc && !v->description)
        v->description = sbx_xstrdup(desc);
    json_t *inner = json_object_get(o, "value");
    if (inner && json_is_object(inner) && !nested && !type) {
        rc = parse_env_value(v, inner, 1, err);
        goto out;
    }
    if (inner && !json_is_null(inner)) {
        if (!json_is_string(inner)) {
            rc = sbx_error_set(err, SBX_E_INVAL, 0, "field 'value' must be a string, not %s",
                               sbx_json_typename(inner));
            goto out;
        }
        val = json_string_value(inner);
        vlen = json_string_length(inner);
        if ((rc = check_env_value(val, vlen, err)))
            goto out;
    }
    if (type && strcmp(type, "str") != 0 && strcmp(type, "secret") != 0) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "unknown value type '%s' (known: str, secret)",
                           type);
        goto out;
    }
    if (type && strcmp(type, "secret") == 0)
        secret = 1;
    if (host) {
        if (!secret) {
            rc = sbx_error_set(err, SBX_E_INVAL, 0, "field 'env' needs \"type\": \"secret\"");
            goto out;
        }
        if (val) {
            rc = sbx_error_set(err, SBX_E_INVAL, 0, "give 'value' or 'env', not both");
            goto out;
        }
        if (!valid_env_name(host, strlen(host))) {
            rc = sbx_error_set(err, SBX_E_INVAL, 0,
                               "field 'env': '%s' is not a valid variable name", host);
            goto out;
        }
        v->host_env = sbx_xstrdup(host);
        goto out;
    }
    if (!val) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "missing required field 'value'");
        goto out;
    }
    if (secret)
        v->secret = sbx_secret_new(v->name, val, vlen);
    else
        v->value = sbx_xstrdup(val);
out:
    json_decref(o);
    return rc;
}

static int parse_environment(struct sbx_manifest *m, const json_t *envj, struct sbx_error *err)
{
    if (!envj || json_is_null(envj))
        return 0;
    if (!json_is_object(envj))
        return sbx_error_set(err, SBX_E_INVAL, 0, "field 'environment' must be an object, not %s",
                             sbx_json_typename(envj));
    /* The Python SDK writes {"value": {NAME: ...}}. A lone variable named "value" whose value
     * is an object spelled with value-object fields ({"type": ..., "env": ...}) is not that. */
    json_t *wrapped = json_object_get(envj, "value");
    if (json_object_size(envj) == 1 && wrapped && json_is_object(wrapped)) {
        static const char *const value_keys[] = {"type",        "value",     "secret", "env",
                                                 "description", "ephemeral", NULL};
        int looks_like_value = 0;
        for (size_t i = 0; value_keys[i]; i++)
            looks_like_value |= json_object_get(wrapped, value_keys[i]) != NULL;
        if (!looks_like_value)
            envj = wrapped;
    }
    const char *k;
    size_t kl;
    json_t *v;
    json_object_keylen_foreach((json_t *)envj, k, kl, v)
    {
        if (!valid_env_name(k, kl)) {
            char q[300];
            quote_name(k, kl, q, sizeof(q));
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "environment '%s': not a valid variable name "
                                 "([A-Za-z_][A-Za-z0-9_]*)",
                                 q);
        }
        struct env *e = sbx_xcalloc(1, sizeof(*e));
        e->name = sbx_xstrdup(k);
        int rc = parse_env_value(e, v, 0, err);
        if (rc) {
            env_free(e);
            sbx_error_prefix(err, "environment '%s'", k);
            return rc;
        }
        set_env(m, e);
    }
    return 0;
}

/* A user: "name" or {"name": "name"}. */
static int parse_user_name(const json_t *u, const char **out, struct sbx_error *err)
{
    static const char *const keys[] = {"name", NULL};
    int rc;
    if (json_is_string(u)) {
        *out = json_string_value(u);
    } else if (json_is_object(u)) {
        if ((rc = sbx_json_check_keys(u, keys, err)) || (rc = req_str(u, "name", out, err)))
            return rc;
    } else {
        return sbx_error_set(err, SBX_E_INVAL, 0, "must be an object, not %s",
                             sbx_json_typename(u));
    }
    if (!valid_account_name(*out))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "'%s' is not a valid name ([a-z_][a-z0-9_-]{0,31})",
                             strlen(*out) < 64 && !has_control(*out, strlen(*out)) ? *out : "...");
    return 0;
}

static int parse_accounts(struct sbx_manifest *m, const json_t *doc, struct sbx_error *err)
{
    json_t *users = json_object_get(doc, "users");
    json_t *groups = json_object_get(doc, "groups");
    size_t i;
    json_t *u;
    int rc;
    if (users && !json_is_null(users)) {
        if (!json_is_array(users))
            return sbx_error_set(err, SBX_E_INVAL, 0, "field 'users' must be an array, not %s",
                                 sbx_json_typename(users));
        json_array_foreach(users, i, u)
        {
            const char *name = NULL;
            if ((rc = parse_user_name(u, &name, err))) {
                sbx_error_prefix(err, "users[%zu]", i);
                return rc;
            }
            if ((rc = sbx_manifest_add_user(m, name, err)))
                return rc;
        }
    }
    if (groups && !json_is_null(groups)) {
        if (!json_is_array(groups))
            return sbx_error_set(err, SBX_E_INVAL, 0, "field 'groups' must be an array, not %s",
                                 sbx_json_typename(groups));
        json_t *g;
        json_array_foreach(groups, i, g)
        {
            static const char *const keys[] = {"name", "users", NULL};
            const char *name = NULL;
            json_t *members = NULL;
            struct sbx_strv names;
            sbx_strv_init(&names);
            if (!json_is_object(g)) {
                rc = sbx_error_set(err, SBX_E_INVAL, 0, "groups[%zu] must be an object, not %s", i,
                                   sbx_json_typename(g));
                goto gfail;
            }
            if ((rc = sbx_json_check_keys(g, keys, err)) || (rc = req_str(g, "name", &name, err)) ||
                (rc = sbx_json_get_array(g, "users", 0, &members, err))) {
                sbx_error_prefix(err, "groups[%zu]", i);
                goto gfail;
            }
            size_t j;
            json_array_foreach(members, j, u)
            {
                const char *un = NULL;
                if ((rc = parse_user_name(u, &un, err))) {
                    sbx_error_prefix(err, "group '%s': users[%zu]", name, j);
                    goto gfail;
                }
                sbx_strv_push(&names, un);
            }
            rc = sbx_manifest_add_group(m, name, (const char *const *)names.v, err);
gfail:
            sbx_strv_release(&names);
            if (rc)
                return rc;
        }
    }
    return 0;
}

static int parse_top(struct loader *L, const json_t *doc, struct sbx_error *err)
{
    static const char *const keys[] = {
            "version", "root",   "entries",           "environment",
            "users",   "groups", "extra_path_grants", "remote_mount_command_allowlist",
            NULL};
    int rc = sbx_json_check_keys(doc, keys, err);
    if (rc)
        return rc;
    json_t *ver = json_object_get(doc, "version");
    if (ver && !json_is_null(ver) && !(json_is_integer(ver) && json_integer_value(ver) == 1))
        return sbx_error_set(err, SBX_E_INVAL, 0, "field 'version' must be 1");
    const char *root = NULL;
    if ((rc = opt_str(doc, "root", &root, NULL, 0, err)))
        return rc;
    if (root && (rc = sbx_manifest_set_root(L->m, root, err)))
        return rc;
    json_t *grants = json_object_get(doc, "extra_path_grants");
    if (grants && !json_is_null(grants) && !(json_is_array(grants) && !json_array_size(grants)))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "field 'extra_path_grants': host path grants are configured by the "
                             "application, not in a manifest document");
    json_t *allow = json_object_get(doc, "remote_mount_command_allowlist");
    if (allow && !json_is_null(allow)) {
        if ((rc = check_string_list(allow, "remote_mount_command_allowlist", err)))
            return rc;
        size_t i;
        json_t *x;
        json_array_foreach(allow, i, x) sbx_strv_push(&L->m->allowlist, json_string_value(x));
        L->m->has_allowlist = 1;
    }
    json_t *entries = json_object_get(doc, "entries");
    if (entries && !json_is_null(entries)) {
        if (!json_is_object(entries))
            return sbx_error_set(err, SBX_E_INVAL, 0, "field 'entries' must be an object, not %s",
                                 sbx_json_typename(entries));
        const char *k;
        size_t kl;
        json_t *v;
        json_object_keylen_foreach(entries, k, kl, v)
        {
            if ((rc = parse_entry(L, SBX_MANIFEST_NONE, NULL, 0, k, kl, v, err)))
                return rc;
        }
    }
    if ((rc = parse_environment(L->m, json_object_get(doc, "environment"), err)))
        return rc;
    return parse_accounts(L->m, doc, err);
}

static char *cwd_or_root(void)
{
    char *cwd = getcwd(NULL, 0);
    if (!cwd)
        return sbx_xstrdup("/");
    char *res = sbx_xstrdup(cwd);
    free(cwd);
    return res;
}

static void loader_init(struct loader *L, const struct sbx_manifest_load_opts *o,
                        const char *default_base)
{
    memset(L, 0, sizeof(*L));
    L->max_file = o && o->max_file_bytes ? o->max_file_bytes : SBX_MANIFEST_DEFAULT_MAX_FILE_BYTES;
    L->max_total =
            o && o->max_total_bytes ? o->max_total_bytes : SBX_MANIFEST_DEFAULT_MAX_TOTAL_BYTES;
    L->max_entries = o && o->max_entries ? o->max_entries : SBX_MANIFEST_DEFAULT_MAX_ENTRIES;
    L->flags = o ? o->flags : 0;
    const char *base = o && o->base_dir ? o->base_dir : default_base;
    char *cwd = cwd_or_root();
    L->base_dir = base ? host_absolute(cwd, base) : sbx_xstrdup(cwd);
    free(cwd);
}

int sbx_manifest_from_json(const json_t *doc, const struct sbx_manifest_load_opts *opts,
                           struct sbx_manifest **out, struct sbx_error *err)
{
    struct loader L;
    json_t *d = NULL;
    if (!json_is_object(doc))
        return sbx_error_set(err, SBX_E_INVAL, 0, "a manifest must be an object, not %s",
                             sbx_json_typename(doc));
    int rc = snake_keys(doc, &d, err);
    if (rc)
        return rc;
    loader_init(&L, opts, NULL);
    L.m = sbx_manifest_new();
    rc = parse_top(&L, d, err);
    json_decref(d);
    free(L.base_dir);
    if (rc) {
        sbx_manifest_free(L.m);
        return rc;
    }
    *out = L.m;
    return 0;
}

int sbx_manifest_load_file(const char *path, const struct sbx_manifest_load_opts *opts,
                           struct sbx_manifest **out, struct sbx_error *err)
{
    struct sbx_yaml_limits lim = {0};
    struct sbx_manifest_load_opts o = {0};
    if (opts)
        o = *opts;
    lim.max_bytes = o.max_doc_bytes;
    lim.max_depth = o.max_depth;
    json_t *doc = NULL;
    int rc = sbx_doc_load_file(path, &lim, &doc, err);
    if (rc) {
        /* The reader names the file; our callers do that themselves, once. */
        size_t pl = strlen(path);
        if (err && err->msg[0] == '\'' && strncmp(err->msg + 1, path, pl) == 0 &&
            strncmp(err->msg + 1 + pl, "': ", 3) == 0)
            memmove(err->msg, err->msg + pl + 4, strlen(err->msg + pl + 4) + 1);
        return rc;
    }
    char *dir = NULL;
    if (!o.base_dir) {
        const char *slash = strrchr(path, '/');
        dir = slash ? sbx_xstrndup(path, slash == path ? 1 : (size_t)(slash - path))
                    : sbx_xstrdup(".");
        o.base_dir = dir;
    }
    rc = sbx_manifest_from_json(doc, &o, out, err);
    json_decref(doc);
    free(dir);
    return rc;
}

/* ---- serialising ---------------------------------------------------------------------------- */

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

static int content_json(const struct entry *e, int flags, json_t **out, struct sbx_error *err)
{
    size_t n = e->pub.content_len;
    const char *c = (const char *)e->content;
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
    switch (t) {
    case SBX_ENTRY_FILE: {
        json_t *c = NULL;
        if ((rc = content_json(e, flags, &c, err)))
            goto out;
        sbx_json_set(o, "content", c);
        break;
    }
    case SBX_ENTRY_DIR: {
        json_t *ch = json_object();
        sbx_json_set(o, "children", ch);
        rc = children_json(m, idx, flags, omitted, ch, err);
        break;
    }
    case SBX_ENTRY_LOCAL_FILE:
    case SBX_ENTRY_LOCAL_DIR:
        set_opt_str(o, "src", e->src);
        break;
    case SBX_ENTRY_GIT_REPO:
        set_opt_str(o, "host", e->host);
        set_opt_str(o, "repo", e->repo);
        set_opt_str(o, "ref", e->ref);
        set_opt_str(o, "subpath", e->subpath);
        break;
    case SBX_ENTRY_S3_MOUNT:
    case SBX_ENTRY_GCS_MOUNT:
    case SBX_ENTRY_R2_MOUNT:
    case SBX_ENTRY_AZURE_BLOB_MOUNT:
    case SBX_ENTRY_BOX_MOUNT:
    case SBX_ENTRY_S3_FILES_MOUNT:
        for (size_t i = 0; i < e->nfields; i++)
            sbx_json_set(o, e->fields[i].name, sbx_json_str(e->fields[i].value));
        set_opt_str(o, "mount_path", e->mount_path);
        sbx_json_set(o, "read_only", json_boolean(e->pub.read_only));
        if (e->strategy)
            sbx_json_set(o, "mount_strategy", json_deep_copy(e->strategy));
        *omitted += e->nsecrets;
        break;
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

/* ---- building from C --------------------------------------------------------------------------
 */

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

/* Normalise path, apply o, run fill (type-specific, may fail), check overlap, append. */
static int add_top(struct sbx_manifest *m, const char *path, enum sbx_entry_type t,
                   const struct sbx_manifest_entry_opts *o, struct entry **ep,
                   struct sbx_error *err)
{
    char *norm = NULL;
    int rc = sbx_path_normalize(path, strlen(path), 0, NULL, &norm, err);
    if (rc) {
        char q[300];
        quote_name(path, strlen(path), q, sizeof(q));
        strip_path_quote(err);
        sbx_error_prefix(err, "entry '%s'", q);
        return rc;
    }
    struct entry *e = entry_new(t);
    e->path = norm;
    e->key = sbx_xstrdup(norm);
    if (o) {
        if (o->mode) {
            if (o->mode > 0777) {
                entry_free(e);
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

static int finish_add(struct sbx_manifest *m, struct entry *e, int rc, struct sbx_error *err)
{
    if (rc == 0 && m->n >= SBX_MANIFEST_DEFAULT_MAX_ENTRIES)
        rc = sbx_error_set(err, SBX_E_TOOBIG, 0,
                           "entry '%s': the manifest has more than %d entries", e->path,
                           SBX_MANIFEST_DEFAULT_MAX_ENTRIES);
    else if (rc == 0)
        rc = check_overlap(m, e->path, e->pub.type, err);
    else
        sbx_error_prefix(err, "entry '%s'", e->path);
    if (rc) {
        entry_free(e);
        return rc;
    }
    append_entry(m, e);
    return 0;
}

int sbx_manifest_add_file(struct sbx_manifest *m, const char *path, const void *data, size_t len,
                          const struct sbx_manifest_entry_opts *o, struct sbx_error *err)
{
    struct entry *e = NULL;
    int rc = add_top(m, path, SBX_ENTRY_FILE, o, &e, err);
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
    return finish_add(m, e, rc, err);
}

int sbx_manifest_add_dir(struct sbx_manifest *m, const char *path,
                         const struct sbx_manifest_entry_opts *o, struct sbx_error *err)
{
    struct entry *e = NULL;
    int rc = add_top(m, path, SBX_ENTRY_DIR, o, &e, err);
    if (rc)
        return rc;
    return finish_add(m, e, 0, err);
}

static int add_local(struct sbx_manifest *m, const char *path, const char *src, int is_dir,
                     const struct sbx_manifest_entry_opts *o, struct sbx_error *err)
{
    struct entry *e = NULL;
    int rc = add_top(m, path, is_dir ? SBX_ENTRY_LOCAL_DIR : SBX_ENTRY_LOCAL_FILE, o, &e, err);
    if (rc)
        return rc;
    if (!src || !*src) {
        if (!is_dir)
            rc = sbx_error_set(err, SBX_E_INVAL, 0, "missing required field 'src'");
        return finish_add(m, e, rc, err);
    }
    char *cwd = cwd_or_root();
    e->src = sbx_xstrdup(src);
    e->src_path = host_absolute(cwd, src);
    free(cwd);
    /* Only the source itself is checked: the caller chose the path, so its ancestors are
     * trusted; what lies inside a directory is not. */
    char *parent = sbx_xstrdup(e->src_path);
    char *slash = strrchr(parent, '/');
    if (slash == parent)
        parent[1] = '\0';
    else if (slash)
        *slash = '\0';
    rc = check_local_src(parent, e->src_path, src, is_dir, err);
    free(parent);
    return finish_add(m, e, rc, err);
}

int sbx_manifest_add_local_file(struct sbx_manifest *m, const char *path, const char *src,
                                const struct sbx_manifest_entry_opts *o, struct sbx_error *err)
{
    return add_local(m, path, src, 0, o, err);
}

int sbx_manifest_add_local_dir(struct sbx_manifest *m, const char *path, const char *src,
                               const struct sbx_manifest_entry_opts *o, struct sbx_error *err)
{
    return add_local(m, path, src, 1, o, err);
}

int sbx_manifest_add_git_repo(struct sbx_manifest *m, const char *path, const char *repo,
                              const char *ref, const char *subpath,
                              const struct sbx_manifest_entry_opts *o, struct sbx_error *err)
{
    struct entry *e = NULL;
    int rc = add_top(m, path, SBX_ENTRY_GIT_REPO, o, &e, err);
    if (rc)
        return rc;
    json_t *spec = json_object();
    sbx_json_set(spec, "type", sbx_json_str("git_repo"));
    if (repo)
        sbx_json_set(spec, "repo", sbx_json_str(repo));
    if (ref)
        sbx_json_set(spec, "ref", sbx_json_str(ref));
    if (subpath)
        sbx_json_set(spec, "subpath", sbx_json_str(subpath));
    rc = parse_git(e, spec, err);
    json_decref(spec);
    return finish_add(m, e, rc, err);
}

int sbx_manifest_set_env(struct sbx_manifest *m, const char *name, const char *value, int flags,
                         struct sbx_error *err)
{
    if (!valid_env_name(name, strlen(name)))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "environment '%s': not a valid variable name ([A-Za-z_][A-Za-z0-9_]*)",
                             strlen(name) < 200 && !has_control(name, strlen(name)) ? name : "...");
    int rc = check_env_value(value, strlen(value), err);
    if (rc == 0 && (flags & SBX_MANIFEST_ENV_HOST) && !valid_env_name(value, strlen(value)))
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a valid variable name",
                           strlen(value) < 200 ? value : "...");
    if (rc) {
        sbx_error_prefix(err, "environment '%s'", name);
        return rc;
    }
    struct env *v = sbx_xcalloc(1, sizeof(*v));
    v->name = sbx_xstrdup(name);
    v->pub.ephemeral = !!(flags & SBX_MANIFEST_ENV_EPHEMERAL);
    if (flags & SBX_MANIFEST_ENV_HOST)
        v->host_env = sbx_xstrdup(value);
    else if (flags & SBX_MANIFEST_ENV_SECRET)
        v->secret = sbx_secret_new(name, value, strlen(value));
    else
        v->value = sbx_xstrdup(value);
    return set_env(m, v);
}

int sbx_manifest_add_user(struct sbx_manifest *m, const char *name, struct sbx_error *err)
{
    if (!valid_account_name(name))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "user '%s': not a valid name ([a-z_][a-z0-9_-]{0,31})",
                             strlen(name) < 64 && !has_control(name, strlen(name)) ? name : "...");
    if (sbx_strv_find(&m->users, name) >= 0)
        return sbx_error_set(err, SBX_E_EXISTS, 0, "user '%s': declared twice", name);
    sbx_strv_push(&m->users, name);
    return 0;
}

int sbx_manifest_add_group(struct sbx_manifest *m, const char *name, const char *const *users,
                           struct sbx_error *err)
{
    if (!valid_account_name(name))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "group '%s': not a valid name ([a-z_][a-z0-9_-]{0,31})",
                             strlen(name) < 64 && !has_control(name, strlen(name)) ? name : "...");
    for (size_t i = 0; i < m->ngroups; i++)
        if (strcmp(m->groups[i]->name, name) == 0)
            return sbx_error_set(err, SBX_E_EXISTS, 0, "group '%s': declared twice", name);
    struct group *g = sbx_xcalloc(1, sizeof(*g));
    g->name = sbx_xstrdup(name);
    sbx_strv_init(&g->users);
    for (size_t i = 0; users && users[i]; i++) {
        if (!valid_account_name(users[i])) {
            int rc = sbx_error_set(err, SBX_E_INVAL, 0, "group '%s': user '%s' is not a valid name",
                                   name, strlen(users[i]) < 64 ? users[i] : "...");
            group_free(g);
            return rc;
        }
        if (sbx_strv_find(&g->users, users[i]) >= 0) {
            int rc = sbx_error_set(err, SBX_E_INVAL, 0, "group '%s': user '%s' listed twice", name,
                                   users[i]);
            group_free(g);
            return rc;
        }
        sbx_strv_push(&g->users, users[i]);
    }
    g->pub.name = g->name;
    g->pub.users = &g->users;
    if (m->ngroups == m->galloc) {
        m->galloc = m->galloc ? m->galloc * 2 : 4;
        m->groups = sbx_xrealloc(m->groups, m->galloc * sizeof(*m->groups));
    }
    m->groups[m->ngroups++] = g;
    return 0;
}

/* ---- the path map ------------------------------------------------------------------------------
 */

static uint64_t fnv1a(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ULL;
    }
    return h;
}

void sbx__pathmap_release(struct sbx__pathmap *pm)
{
    for (size_t i = 0; i < pm->cap; i++)
        free(pm->keys[i]);
    free(pm->keys);
    free(pm->vals);
    memset(pm, 0, sizeof(*pm));
}

size_t sbx__pathmap_get(const struct sbx__pathmap *pm, const char *key, size_t klen)
{
    if (!pm->cap)
        return SBX_MANIFEST_NONE;
    size_t i = (size_t)fnv1a(key, klen) & (pm->cap - 1);
    while (pm->keys[i]) {
        if (strncmp(pm->keys[i], key, klen) == 0 && pm->keys[i][klen] == '\0')
            return pm->vals[i];
        i = (i + 1) & (pm->cap - 1);
    }
    return SBX_MANIFEST_NONE;
}

static void pm_insert(struct sbx__pathmap *pm, char *owned, size_t klen, size_t val)
{
    size_t i = (size_t)fnv1a(owned, klen) & (pm->cap - 1);
    while (pm->keys[i]) {
        if (strcmp(pm->keys[i], owned) == 0) {
            free(owned);
            pm->vals[i] = val;
            return;
        }
        i = (i + 1) & (pm->cap - 1);
    }
    pm->keys[i] = owned;
    pm->vals[i] = val;
    pm->n++;
}

void sbx__pathmap_put(struct sbx__pathmap *pm, const char *key, size_t klen, size_t val)
{
    if ((pm->n + 1) * 2 > pm->cap) {
        struct sbx__pathmap old = *pm;
        pm->cap = old.cap ? old.cap * 2 : 64;
        pm->keys = sbx_xcalloc(pm->cap, sizeof(*pm->keys));
        pm->vals = sbx_xcalloc(pm->cap, sizeof(*pm->vals));
        pm->n = 0;
        for (size_t i = 0; i < old.cap; i++)
            if (old.keys[i])
                pm_insert(pm, old.keys[i], strlen(old.keys[i]), old.vals[i]);
        free(old.keys);
        free(old.vals);
    }
    pm_insert(pm, sbx_xstrndup(key, klen), klen, val);
}
