/* sbx: loading a manifest document (JSON, or YAML read into the same value): the top level, the
 * entry tree and the fields every entry carries; the type-specific fields are read by
 * sources.c and mounts.c, the environment by env.c, users and groups by accounts.c. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "sandbox/manifest/model.h"
#include "sbx/b64.h"
#include "sbx/json.h"
#include "sbx/path.h"
#include "sbx/yaml.h"

struct loader {
    struct sbx_manifest *m;
    char *base_dir; /* absolute, lexically normalised, no trailing '/' except "/" */
    size_t max_file, max_total, max_entries;
    int flags;
};

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
                             key, n < 64 && !sbx_text_has_control(s, n) ? s : "...");
    }
    if (json_is_object(v)) {
        static const char *const keys[] = {"owner", "group", "other", "directory", NULL};
        static const char *const bits[] = {"owner", "group", "other"};
        json_t *o = NULL;
        int rc = sbx__manifest_snake_keys(v, &o, err);
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
            rc = sbx_json_get_bool(o, "directory", 0, &dir, err);
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

static const char *const file_keys[] = {SBX__MANIFEST_COMMON_KEYS, "content", NULL};
static const char *const dir_keys[] = {SBX__MANIFEST_COMMON_KEYS, "children", NULL};
static const char *const local_keys[] = {SBX__MANIFEST_COMMON_KEYS, "src", NULL};

/* {"type": "sha256", "digest": "<64 lowercase hex>", "size": N}: a file a session state
 * records by digest only. */
static int parse_content_digest(struct loader *L, struct entry *e, const json_t *c,
                                struct sbx_error *err)
{
    static const char *const keys[] = {"type", "digest", "size", NULL};
    const char *d = NULL;
    size_t dlen = 0;
    int rc;
    if ((rc = sbx_json_check_keys(c, keys, err)) ||
        (rc = sbx_json_get_text(c, "digest", SBX_JSON_REQUIRED, &d, &dlen, err)))
        return rc;
    int hex = dlen == 64;
    for (size_t i = 0; hex && i < dlen; i++)
        hex = (d[i] >= '0' && d[i] <= '9') || (d[i] >= 'a' && d[i] <= 'f');
    if (!hex)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "field 'digest' must be 64 lowercase hex digits (a SHA-256)");
    json_t *sz = json_object_get(c, "size");
    if (!json_is_integer(sz) || json_integer_value(sz) < 0)
        return sbx_error_set(err, SBX_E_INVAL, 0, "field 'size' must be a non-negative integer");
    if ((unsigned long long)json_integer_value(sz) > L->max_file)
        return sbx_error_set(err, SBX_E_TOOBIG, 0,
                             "content of %lld bytes exceeds the limit of %zu bytes",
                             (long long)json_integer_value(sz), L->max_file);
    e->content_sha256 = sbx_xstrdup(d);
    e->pub.content_len = (size_t)json_integer_value(sz);
    return 0;
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
    if ((rc = sbx_json_get_text(c, "type", SBX_JSON_REQUIRED | SBX_JSON_NONEMPTY, &t, NULL, err)))
        goto prefix;
    if (strcmp(t, "sha256") == 0 && (L->flags & SBX_MANIFEST_CONTENT_DIGESTS)) {
        rc = parse_content_digest(L, e, c, err);
        goto done;
    }
    if (strcmp(t, "base64") != 0) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "unknown encoding '%s' (known: base64)", t);
        goto prefix;
    }
    if ((rc = sbx_json_check_keys(c, keys, err)))
        goto prefix;
    if ((rc = sbx_json_get_text(c, "data", SBX_JSON_ALLOW_CONTROL, &data, &dlen, err)))
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
done:
    if (rc == 0)
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
        if ((rc = sbx_json_check_keys(v, keys, err)) ||
            (rc = sbx_json_get_text(v, "name", SBX_JSON_REQUIRED | SBX_JSON_NONEMPTY, &name, NULL,
                                    err))) {
            sbx_error_prefix(err, "field 'group'");
            return rc;
        }
    } else {
        return sbx_error_set(err, SBX_E_INVAL, 0, "field 'group' must be an object, not %s",
                             sbx_json_typename(v));
    }
    if (!sbx__manifest_valid_account_name(name))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "field 'group': '%s' is not a valid name ([a-z_][a-z0-9_-]{0,31})",
                             sbx__manifest_shown_name(name));
    *out = sbx_xstrdup(name);
    return 0;
}

/* The fields of a file entry. */
static int parse_file(struct loader *L, struct entry *e, const json_t *o, struct sbx_error *err)
{
    int rc;
    if ((rc = sbx_json_check_keys(o, file_keys, err)) ||
        (rc = parse_content(L, e, json_object_get(o, "content"), err)))
        return rc;
    if (L->m->total_content + e->pub.content_len > L->max_total)
        return sbx_error_set(err, SBX_E_TOOBIG, 0,
                             "file contents add up to more than the limit of %zu bytes",
                             L->max_total);
    return 0;
}

/* The fields of a local_file or local_dir entry: its source on the host, checked unless the
 * loader skips host checks. */
static int parse_local(struct loader *L, struct entry *e, const json_t *o, struct sbx_error *err)
{
    int is_dir = e->pub.type == SBX_ENTRY_LOCAL_DIR;
    const char *src = NULL;
    int rc;
    if ((rc = sbx_json_check_keys(o, local_keys, err)))
        return rc;
    if (is_dir ? (rc = sbx_json_get_text(o, "src", 0, &src, NULL, err))
               : (rc = sbx_json_get_text(o, "src", SBX_JSON_REQUIRED | SBX_JSON_NONEMPTY, &src,
                                         NULL, err)))
        return rc;
    if (!src)
        return 0;
    if (!*src)
        return sbx_error_set(err, SBX_E_INVAL, 0, "field 'src' must not be empty");
    e->src = sbx_xstrdup(src);
    e->src_path = sbx__manifest_host_absolute(L->base_dir, src);
    if (!(L->flags & SBX_MANIFEST_NO_HOST_CHECKS))
        return sbx__manifest_check_local_src(L->base_dir, e->src_path, src, is_dir, err);
    return 0;
}

static int parse_entry(struct loader *L, size_t parent, const char *parent_path, int depth,
                       const char *key, size_t klen, const json_t *val, struct sbx_error *err);

/* Fill e from its (snake-cased) object o; the common fields, then the type's own. */
static int parse_entry_body(struct loader *L, struct entry *e, const json_t *o,
                            struct sbx_error *err)
{
    int rc;
    const char *desc = NULL;
    if ((rc = sbx_json_get_text(o, "description", SBX_JSON_ALLOW_CONTROL, &desc, NULL, err)))
        return rc;
    if (desc)
        e->description = sbx_xstrdup(desc);
    if ((rc = sbx_json_get_bool(o, "ephemeral", 0, &e->pub.ephemeral, err)))
        return rc;
    json_t *g = json_object_get(o, "group");
    if (g && !json_is_null(g) && (rc = parse_group_ref(g, &e->group, err)))
        return rc;
    int isdir = 0;
    if ((rc = sbx_json_get_bool(o, "is_dir", 0, &isdir, err)))
        return rc;
    json_t *perm = json_object_get(o, "permissions");
    json_t *mode = json_object_get(o, "mode");
    if (perm && !json_is_null(perm) && mode && !json_is_null(mode))
        return sbx_error_set(err, SBX_E_INVAL, 0, "give 'permissions' or 'mode', not both");
    if (perm && !json_is_null(perm) && (rc = parse_mode(perm, "permissions", &e->pub.mode, err)))
        return rc;
    if (mode && !json_is_null(mode) && (rc = parse_mode(mode, "mode", &e->pub.mode, err)))
        return rc;

    enum sbx_entry_type t = e->pub.type;
    if (sbx_entry_type_is_mount(t)) {
        if (e->pub.mode != 0755)
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "mount permissions are not enforced; configure access at the "
                                 "storage provider and remove 'permissions'");
        return sbx__manifest_parse_mount(e, o, L->flags, err);
    }
    if (t == SBX_ENTRY_FILE)
        return parse_file(L, e, o, err);
    if (t == SBX_ENTRY_DIR)
        return sbx_json_check_keys(o, dir_keys, err);
    if (t == SBX_ENTRY_GIT_REPO) {
        if ((rc = sbx__manifest_parse_git(e, o, err)) < 0 ||
            (L->flags & SBX_MANIFEST_NO_HOST_CHECKS))
            return rc;
        return sbx__manifest_check_git_local(L->base_dir, e->url, e->repo, err);
    }
    return parse_local(L, e, o, err); /* local_file, local_dir: the types left */
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
        sbx__manifest_quote_name(raw.data, raw.len, q, sizeof(q));
        sbx_buf_release(&raw);
        sbx__manifest_strip_path_quote(err);
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
    if ((rc = sbx__manifest_snake_keys(val, &o, err)))
        goto prefix;
    const char *tname = NULL;
    if ((rc = sbx_json_get_text(o, "type", SBX_JSON_REQUIRED | SBX_JSON_NONEMPTY, &tname, NULL,
                                err)))
        goto prefix;
    enum sbx_entry_type t;
    if (!sbx__manifest_type_from_name(tname, &t)) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0,
                           "unknown type '%s' (known: dir, file, local_file, local_dir, git_repo, "
                           "s3_mount, gcs_mount, r2_mount, azure_blob_mount, box_mount, "
                           "s3_files_mount)",
                           strlen(tname) < 64 ? tname : "...");
        goto prefix;
    }
    e = sbx__manifest_entry_new(t);
    e->path = path;
    path = NULL;
    e->key = nkey;
    nkey = NULL;
    e->depth = depth;
    e->pub.parent = parent;
    if ((rc = parse_entry_body(L, e, o, err)))
        goto prefix;
    if ((rc = sbx__manifest_check_overlap(L->m, e->path, t, err)))
        goto out;
    size_t idx = L->m->n;
    sbx__manifest_append_entry(L->m, e);
    e = NULL;
    if (t == SBX_ENTRY_DIR)
        rc = parse_children(L, idx, json_object_get(o, "children"), err);
    goto out;
prefix:
    sbx_error_prefix(err, "entry '%s'", e ? e->path : path);
out:
    sbx__manifest_entry_free(e);
    json_decref(o);
    free(nkey);
    free(path);
    return rc;
}

/* A grant path: absolute, normalised (no "." or ".." component), not "/". */
static int grant_path(const char *what, size_t i, const char *p, struct sbx_error *err)
{
    int ok = p && p[0] == '/' && p[1] && strlen(p) < 4096 && !strstr(p, "//");
    for (const char *c = p; ok && (c = strchr(c, '/')); c++)
        ok = strncmp(c, "/./", 3) != 0 && strncmp(c, "/../", 4) != 0 && strcmp(c, "/.") != 0 &&
             strcmp(c, "/..") != 0;
    if (!ok)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "field 'extra_path_grants[%zu].%s' must be an absolute path other "
                             "than '/', without '.' or '..' components",
                             i, what);
    return 0;
}

/* extra_path_grants: [{path, read_only (false), description, host_path} | "path"] (the JS
 * SDK's readOnly/hostPath read the same). A session state's manifest has none: a state never
 * grants a host path by itself. */
static int parse_grants(struct loader *L, const json_t *grants, struct sbx_error *err)
{
    static const char *const keys[] = {"path", "read_only", "description", "host_path", NULL};
    if (!grants || json_is_null(grants))
        return 0;
    if (!json_is_array(grants))
        return sbx_error_set(err, SBX_E_INVAL, 0, "field 'extra_path_grants' must be a list");
    if (json_array_size(grants) && (L->flags & SBX_MANIFEST_CONTENT_DIGESTS))
        return sbx_error_set(err, SBX_E_PERM, 0,
                             "field 'extra_path_grants': a session state never grants host "
                             "paths; give them again (--ro/--rw) to resume");
    if (json_array_size(grants) > SBX_MANIFEST_MAX_GRANTS)
        return sbx_error_set(err, SBX_E_TOOBIG, 0,
                             "field 'extra_path_grants' has more than %d grants",
                             SBX_MANIFEST_MAX_GRANTS);
    size_t i;
    json_t *v;
    json_array_foreach((json_t *)grants, i, v)
    {
        struct sbx_manifest_grant g = {.path = json_string_value(v)};
        json_t *o = NULL;
        int rc = 0, ro = 0;
        if (!g.path) {
            if (!json_is_object(v))
                return sbx_error_set(err, SBX_E_INVAL, 0,
                                     "field 'extra_path_grants[%zu]' must be a path or an object",
                                     i);
            if ((rc = sbx__manifest_snake_keys(v, &o, err)) == 0 &&
                (rc = sbx_json_check_keys(o, keys, err)) == 0 &&
                (rc = sbx_json_get_string(o, "path", 1, &g.path, err)) == 0 &&
                (rc = sbx_json_get_bool(o, "read_only", 0, &ro, err)) == 0 &&
                (rc = sbx_json_get_string(o, "description", 0, &g.description, err)) == 0)
                rc = sbx_json_get_string(o, "host_path", 0, &g.host_path, err);
            g.read_only = ro;
            if (rc < 0) {
                sbx_error_prefix(err, "field 'extra_path_grants[%zu]'", i);
                json_decref(o);
                return rc;
            }
        }
        if ((rc = grant_path("path", i, g.path, err)) == 0 && g.host_path)
            rc = grant_path("host_path", i, g.host_path, err);
        if (rc == 0)
            sbx__manifest_add_grant(L->m, &g);
        json_decref(o);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int parse_top(struct loader *L, const json_t *doc, struct sbx_error *err)
{
    static const char *const keys[] = {"version",
                                       "root",
                                       "root_owner",
                                       "entries",
                                       "environment",
                                       "users",
                                       "groups",
                                       "extra_path_grants",
                                       "remote_mount_command_allowlist",
                                       NULL};
    int rc = sbx_json_check_keys(doc, keys, err);
    if (rc)
        return rc;
    json_t *ver = json_object_get(doc, "version");
    if (ver && !json_is_null(ver) && !(json_is_integer(ver) && json_integer_value(ver) == 1))
        return sbx_error_set(err, SBX_E_INVAL, 0, "field 'version' must be 1");
    const char *root = NULL;
    if ((rc = sbx_json_get_text(doc, "root", 0, &root, NULL, err)))
        return rc;
    if (root && (rc = sbx_manifest_set_root(L->m, root, err)))
        return rc;
    if ((rc = parse_grants(L, json_object_get(doc, "extra_path_grants"), err)))
        return rc;
    json_t *allow = NULL;
    if ((rc = sbx_json_get_text_array(doc, "remote_mount_command_allowlist", &allow, err)))
        return rc;
    if (allow) {
        size_t i;
        json_t *x;
        json_array_foreach(allow, i, x) sbx_strv_push(&L->m->allowlist, json_string_value(x));
        L->m->has_allowlist = 1;
    }
    json_t *entries = NULL;
    if ((rc = sbx_json_get_object(doc, "entries", 0, &entries, err)))
        return rc;
    if (entries) {
        const char *k;
        size_t kl;
        json_t *v;
        json_object_keylen_foreach(entries, k, kl, v)
        {
            if ((rc = parse_entry(L, SBX_MANIFEST_NONE, NULL, 0, k, kl, v, err)))
                return rc;
        }
    }
    if ((rc = sbx__manifest_check_mount_targets(L->m, L->flags, err)))
        return rc;
    if ((rc = sbx__manifest_parse_environment(L->m, doc, err)))
        return rc;
    return sbx__manifest_parse_accounts(L->m, doc, err);
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
    char *cwd = sbx__manifest_cwd();
    L->base_dir = base ? sbx__manifest_host_absolute(cwd, base) : sbx_xstrdup(cwd);
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
    int rc = sbx__manifest_snake_keys(doc, &d, err);
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
    lim.max_bytes = o.max_doc_bytes ? o.max_doc_bytes : SBX_MANIFEST_DEFAULT_MAX_DOC_BYTES;
    lim.max_depth = o.max_depth;
    json_t *doc = NULL;
    struct stat st;
    /* The reader refuses it too (a file that grows meanwhile); this says which limit. */
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode) && (size_t)st.st_size > lim.max_bytes)
        return sbx_error_set(err, SBX_E_TOOBIG, 0,
                             "the document is %jd bytes, more than the manifest limit of %zu "
                             "bytes%s: put large files in local_file entries",
                             (intmax_t)st.st_size, lim.max_bytes,
                             lim.max_bytes == SBX_MANIFEST_DEFAULT_MAX_DOC_BYTES ? " (64 MiB)"
                                                                                 : "");
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
