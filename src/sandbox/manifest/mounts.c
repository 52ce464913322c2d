/* sbx: mount entries (s3, gcs, r2, azure_blob, box, s3_files): the table of kinds with their
 * fields and credentials, endpoint rules, and the mount strategies each kind supports. The
 * fields and mount targets are validated here; the providers mount them. */
#include <stdlib.h>
#include <string.h>

#include "sandbox/manifest/model.h"
#include "sbx/json.h"
#include "sbx/path.h"

#define MOUNT_KEYS SBX__MANIFEST_COMMON_KEYS, "mount_path", "read_only", "mount_strategy"

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

/* A credential given by reference, {"type": "secret", "env": "VAR"}: the value is read from
 * the harness environment now (the mount helper runs on the host side, so the value never
 * enters the sandbox). sbx's own credentials are refused: a storage server must never see the
 * model's API key. */
static int parse_cred_ref(struct entry *e, const char *field, const json_t *raw, int flags,
                          struct sbx_error *err)
{
    static const char *const keys[] = {"type", "env", NULL};
    json_t *o = NULL;
    const char *type = NULL, *var = NULL;
    int rc = sbx__manifest_snake_keys(raw, &o, err);
    if (rc == 0)
        rc = sbx_json_check_keys(o, keys, err);
    if (rc == 0)
        rc = sbx_json_get_text(o, "type", SBX_JSON_REQUIRED | SBX_JSON_NONEMPTY, &type, NULL, err);
    if (rc == 0)
        rc = sbx_json_get_text(o, "env", SBX_JSON_REQUIRED | SBX_JSON_NONEMPTY, &var, NULL, err);
    if (rc)
        goto out;
    if (strcmp(type, "secret") != 0) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0,
                           "unknown credential reference type '%s' (known: secret)",
                           sbx__manifest_shown_name(type));
        goto out;
    }
    if (!sbx__manifest_valid_env_name(var, strlen(var))) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "field 'env': '%s' is not a valid variable name",
                           sbx__manifest_shown_name(var));
        goto out;
    }
    if (sbx_manifest_harness_credential(var)) {
        rc = sbx_error_set(err, SBX_E_PERM, 0,
                           "harness variable '%s' holds sbx's own credentials and is never "
                           "given to a storage server",
                           var);
        goto out;
    }
    const char *val = getenv(var);
    if (!val && !(flags & SBX_MANIFEST_NO_HOST_CHECKS)) {
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0,
                           "unknown credential reference: harness variable '%s' is not set", var);
        goto out;
    }
    if (val && !*val) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "harness variable '%s' is empty", var);
        goto out;
    }
    /* The same rule as for literal fields: a newline would inject lines into the helper's
     * configuration. */
    if (val && sbx_text_has_control(val, strlen(val))) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0,
                           "harness variable '%s' must not contain control characters", var);
        goto out;
    }
    e->cred_refs = sbx_xrealloc(e->cred_refs, (e->ncred_refs + 1) * sizeof(*e->cred_refs));
    e->cred_refs[e->ncred_refs].name = sbx_xstrdup(field);
    e->cred_refs[e->ncred_refs].value = sbx_xstrdup(var);
    e->ncred_refs++;
    if (val)
        add_secret(e, field, val, strlen(val));
out:
    json_decref(o);
    if (rc)
        sbx_error_prefix(err, "credential '%s'", field);
    return rc;
}

static int has_cred(const struct entry *e, const char *field)
{
    if (sbx_manifest_entry_secret(&e->pub, field))
        return 1;
    for (size_t i = 0; i < e->ncred_refs; i++)
        if (strcmp(e->cred_refs[i].name, field) == 0)
            return 1;
    return 0;
}

/* The object field prefix of parent holding credentials (driver_options, extra_options): each
 * string value becomes the secret "<prefix>.<key>"; null becomes an empty secret (an option
 * without a value). */
static int parse_secret_map(struct entry *e, const json_t *parent, const char *prefix,
                            struct sbx_error *err)
{
    json_t *obj = NULL;
    int rc = sbx_json_get_object(parent, prefix, 0, &obj, err);
    if (rc < 0 || !obj)
        return rc;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)obj, k, v)
    {
        if (!*k || sbx_text_has_control(k, strlen(k)) || strchr(k, '='))
            return sbx_error_set(err, SBX_E_INVAL, 0, "field '%s': bad option name", prefix);
        if (!json_is_string(v) && !json_is_null(v))
            return sbx_error_set(err, SBX_E_INVAL, 0, "field '%s.%s' must be a string, not %s",
                                 prefix, k, sbx_json_typename(v));
        const char *s = json_is_string(v) ? json_string_value(v) : "";
        size_t len = json_is_string(v) ? json_string_length(v) : 0;
        if (sbx_text_has_control(s, len))
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "field '%s.%s' must not contain control characters", prefix, k);
        char *name = sbx_xasprintf("%s.%s", prefix, k);
        add_secret(e, name, s, len);
        free(name);
    }
    return 0;
}

/* The in_container patterns: their keys, and the keys of their options (NULL: none). */
static const char *const rclone_keys[] = {"type",
                                          "mode",
                                          "remote_name",
                                          "extra_args",
                                          "nfs_addr",
                                          "nfs_mount_options",
                                          "config_file_path",
                                          NULL};
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
static const char *const opt_pattern_keys[] = {"type", "options", NULL};
static const char *const mp_opt_keys[] = {"prefix", "region", "endpoint_url", NULL};
static const char *const s3f_opt_keys[] = {"mount_target_ip", "access_point", "region",
                                           "extra_options", NULL};
static const struct pattern {
    const char *name;
    const char *const *keys;
    const char *const *okeys;
} patterns[] = {
        {"rclone", rclone_keys, NULL},
        {"mountpoint", opt_pattern_keys, mp_opt_keys},
        {"fuse", fuse_keys, NULL},
        {"s3files", opt_pattern_keys, s3f_opt_keys},
};

/* An rclone pattern's mode (fuse or nfs) and argument lists (strings). */
static int check_rclone(const json_t *pat, struct sbx_error *err)
{
    const char *mode = NULL;
    json_t *list = NULL;
    int rc = sbx_json_get_text(pat, "mode", 0, &mode, NULL, err);
    if (rc)
        return rc;
    if (mode && strcmp(mode, "fuse") != 0 && strcmp(mode, "nfs") != 0)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "field 'mode' must be \"fuse\" or \"nfs\", not '%s'", mode);
    if ((rc = sbx_json_get_text_array(pat, "extra_args", &list, err)))
        return rc;
    return sbx_json_get_text_array(pat, "nfs_mount_options", &list, err);
}

/* The options of pattern pat (keys okeys): the endpoint checked, extra_options made secrets and
 * left out; pat gets the snake-cased rest. */
static int parse_pattern_options(struct entry *e, json_t *pat, const char *const *okeys,
                                 struct sbx_error *err)
{
    json_t *o = NULL, *opts = NULL;
    const char *ep = NULL;
    int rc = sbx_json_get_object(pat, "options", 0, &o, err);
    if (rc || !o)
        return rc;
    if ((rc = sbx__manifest_snake_keys(o, &opts, err)) ||
        (rc = sbx_json_check_keys(opts, okeys, err)) ||
        (rc = sbx_json_get_text(opts, "endpoint_url", 0, &ep, NULL, err)) ||
        (ep && (rc = check_endpoint("endpoint_url", ep, err))) ||
        (rc = parse_secret_map(e, opts, "extra_options", err)))
        goto out;
    json_object_del(opts, "extra_options");
    json_object_set(pat, "options", opts);
out:
    json_decref(opts);
    return rc;
}

/* {"type": "in_container", "pattern": {...}}: a pattern the mount kind supports, with its own
 * keys; s gets the snake-cased, checked pattern. */
static int parse_in_container(struct entry *e, const struct mount_kind *mk, json_t *s,
                              struct sbx_error *err)
{
    static const char *const in_keys[] = {"type", "pattern", NULL};
    json_t *p = NULL, *pat = NULL;
    const char *pt = NULL;
    const struct pattern *k = NULL;
    int rc;
    if ((rc = sbx_json_check_keys(s, in_keys, err)) ||
        (rc = sbx_json_get_object(s, "pattern", 1, &p, err)) ||
        (rc = sbx__manifest_snake_keys(p, &pat, err)) ||
        (rc = sbx_json_get_text(pat, "type", SBX_JSON_REQUIRED | SBX_JSON_NONEMPTY, &pt, NULL,
                                err)))
        goto out;
    for (size_t i = 0; i < SBX_ARRAY_LEN(patterns) && !k; i++)
        if (strcmp(patterns[i].name, pt) == 0)
            k = &patterns[i];
    if (!k)
        rc = sbx_error_set(err, SBX_E_INVAL, 0,
                           "unknown mount pattern '%s' (known: rclone, mountpoint, fuse, "
                           "s3files)",
                           pt);
    else if (!in_list(mk->patterns, 3, pt))
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "mount pattern '%s' cannot mount a %s", pt,
                           sbx_entry_type_name(mk->type));
    else if ((rc = sbx_json_check_keys(pat, k->keys, err)) == 0 && strcmp(pt, "rclone") == 0)
        rc = check_rclone(pat, err);
    if (rc == 0 && k->okeys)
        rc = parse_pattern_options(e, pat, k->okeys, err);
    if (rc == 0)
        json_object_set(s, "pattern", pat);
out:
    json_decref(pat);
    return rc;
}

/* {"type": "docker_volume", "driver": ..., "driver_options": {...}}: a driver the mount kind
 * supports; the options are secrets, left out of s. */
static int parse_docker_volume(struct entry *e, const struct mount_kind *mk, json_t *s,
                               struct sbx_error *err)
{
    static const char *const dv_keys[] = {"type", "driver", "driver_options", NULL};
    const char *drv = NULL;
    int rc;
    if ((rc = sbx_json_check_keys(s, dv_keys, err)) ||
        (rc = sbx_json_get_text(s, "driver", SBX_JSON_REQUIRED | SBX_JSON_NONEMPTY, &drv, NULL,
                                err)))
        return rc;
    if (!in_list(mk->drivers, 3, drv))
        return sbx_error_set(err, SBX_E_INVAL, 0, "docker volume driver '%s' cannot mount a %s",
                             drv, sbx_entry_type_name(mk->type));
    if ((rc = parse_secret_map(e, s, "driver_options", err)))
        return rc;
    json_object_del(s, "driver_options");
    return 0;
}

/* mount_strategy: {"type": "in_container", "pattern": {...}}, {"type": "docker_volume",
 * "driver": ..., "driver_options": {...}} or {"type": "local_bind"} (the JS SDK's). Keys are
 * checked per pattern; docker driver options become secrets; the rest is kept as JSON for the
 * mount code. */
static int parse_strategy(struct entry *e, const struct mount_kind *mk, const json_t *raw,
                          struct sbx_error *err)
{
    static const char *const lb_keys[] = {"type", NULL};
    json_t *s = NULL;
    const char *type = NULL;
    int rc;
    if (!json_is_object(raw))
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "must be an object, not %s",
                           sbx_json_typename(raw));
    else if ((rc = sbx__manifest_snake_keys(raw, &s, err)) == 0 &&
             (rc = sbx_json_get_text(s, "type", SBX_JSON_REQUIRED | SBX_JSON_NONEMPTY, &type, NULL,
                                     err)) == 0) {
        if (strcmp(type, "in_container") == 0)
            rc = parse_in_container(e, mk, s, err);
        else if (strcmp(type, "docker_volume") == 0)
            rc = parse_docker_volume(e, mk, s, err);
        else if (strcmp(type, "local_bind") == 0)
            rc = sbx_json_check_keys(s, lb_keys, err);
        else
            rc = sbx_error_set(err, SBX_E_INVAL, 0,
                               "unknown mount strategy '%s' (known: in_container, docker_volume, "
                               "local_bind)",
                               type);
    }
    if (rc) {
        sbx_error_prefix(err, "field 'mount_strategy'");
        json_decref(s);
        return rc;
    }
    e->strategy = s;
    return 0;
}

/* The fields of mount kind mk in o: values, credentials (literal or by reference), URLs, the
 * pairs of credentials that go together, the kind's own rules. */
static int parse_mount_fields(struct entry *e, const struct mount_kind *mk, const json_t *o,
                              int flags, struct sbx_error *err)
{
    int rc;
    for (size_t i = 0; mk->fields[i].name; i++) {
        const struct mount_field *f = &mk->fields[i];
        const char *v = NULL;
        size_t vlen = 0;
        int want = f->flags & MF_REQ ? SBX_JSON_REQUIRED | SBX_JSON_NONEMPTY : 0;
        const json_t *raw = json_object_get(o, f->name);
        if ((f->flags & MF_SECRET) && json_is_object(raw)) {
            if ((rc = parse_cred_ref(e, f->name, raw, flags, err)))
                return rc;
            continue;
        }
        if ((rc = sbx_json_get_text(o, f->name, want, &v, &vlen, err)))
            return rc;
        if (!v)
            continue;
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
    if (mk->pair[0] && has_cred(e, mk->pair[0]) != has_cred(e, mk->pair[1]))
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
            sbx__manifest_strip_path_quote(err);
            sbx_error_prefix(err, "field 'subpath'");
            return rc;
        }
        free(norm);
    }
    if (e->pub.type == SBX_ENTRY_S3_FILES_MOUNT)
        return parse_secret_map(e, o, "extra_options", err);
    return 0;
}

/* mount_path: absolute (kept, normalised; not "/", no "..") or workspace-relative. */
static int parse_mount_path(struct entry *e, const json_t *o, struct sbx_error *err)
{
    const char *mp = NULL;
    int rc = sbx_json_get_text(o, "mount_path", 0, &mp, NULL, err);
    if (rc || !mp)
        return rc;
    if (mp[0] == '/') {
        char *n = sbx__manifest_host_normalize(mp);
        int dots = strcmp(n, "/") == 0;
        for (const char *c = mp; *c && !dots; c++)
            dots = c[0] == '/' && c[1] == '.' && c[2] == '.' && (c[3] == '/' || !c[3]);
        if (dots) {
            free(n);
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "field 'mount_path' must not be '/' or contain '..'");
        }
        e->mount_path = n;
        return 0;
    }
    if ((rc = sbx_path_normalize(mp, strlen(mp), 0, NULL, &e->mount_path, err))) {
        sbx__manifest_strip_path_quote(err);
        sbx_error_prefix(err, "field 'mount_path'");
    }
    return rc;
}

int sbx__manifest_parse_mount(struct entry *e, const json_t *o, int flags, struct sbx_error *err)
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
    int rc, eph = 1;
    if ((rc = sbx_json_check_keys(o, allowed, err)) ||
        (rc = parse_mount_fields(e, mk, o, flags, err)) || (rc = parse_mount_path(e, o, err)) ||
        (rc = sbx_json_get_bool(o, "read_only", 0, &e->pub.read_only, err)) ||
        (rc = sbx_json_get_bool(o, "ephemeral", 0, &eph, err)))
        return rc;
    if (!eph)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "mounts are always ephemeral; remove 'ephemeral: false'");
    e->pub.ephemeral = 1;
    json_t *strat = json_object_get(o, "mount_strategy");
    if (strat && !json_is_null(strat))
        return parse_strategy(e, mk, strat, err);
    return 0;
}

/* The target of mount entry e relative to root ("" for root itself), or NULL when it lies
 * outside root. Caller owns. */
static char *mount_target(const struct sbx_manifest *m, const struct entry *e)
{
    const char *mp = e->mount_path;
    if (!mp)
        return sbx_xstrdup(e->path);
    if (mp[0] != '/')
        return sbx_xstrdup(mp);
    const char *root = sbx_manifest_root(m);
    size_t rl = strlen(root);
    while (rl > 1 && root[rl - 1] == '/')
        rl--;
    if (rl == 1)
        return sbx_xstrdup(mp + 1);
    if (strncmp(mp, root, rl) != 0 || (mp[rl] && mp[rl] != '/'))
        return NULL;
    return sbx_xstrdup(mp[rl] ? mp + rl + 1 : "");
}

/* a is b, or an ancestor of b ("" is the ancestor of all). */
static int path_covers(const char *a, const char *b)
{
    size_t al = strlen(a);
    if (!al)
        return 1;
    return strncmp(a, b, al) == 0 && (b[al] == '\0' || b[al] == '/');
}

int sbx__manifest_check_mount_targets(const struct sbx_manifest *m, int flags,
                                      struct sbx_error *err)
{
    size_t nm = 0;
    for (size_t i = 0; i < m->n; i++)
        nm += sbx_entry_type_is_mount(m->entries[i]->pub.type);
    if (!nm)
        return 0;
    /* targets[i]: the mount target of entry i, NULL for entries that are not mounts */
    char **targets = sbx_xcalloc(m->n, sizeof(*targets));
    int rc = 0;
    for (size_t i = 0; i < m->n && rc == 0; i++) {
        const struct entry *e = m->entries[i];
        if (!sbx_entry_type_is_mount(e->pub.type))
            continue;
        targets[i] = mount_target(m, e);
        if (!targets[i] && !(flags & SBX_MANIFEST_NO_HOST_CHECKS))
            rc = sbx_error_set(err, SBX_E_INVAL, 0,
                               "entry '%s': mount target '%s' lies outside the workspace root "
                               "'%s' (sbx mounts only inside the workspace)",
                               e->path, e->mount_path, sbx_manifest_root(m));
    }
    for (size_t i = 0; i < m->n && rc == 0; i++) {
        const char *t = targets[i];
        if (!t)
            continue;
        const struct entry *e = m->entries[i];
        for (size_t j = 0; j < m->n && rc == 0; j++) {
            const struct entry *o = m->entries[j];
            if (j == i)
                continue;
            const char *ot = targets[j];
            if (ot && (path_covers(t, ot) || path_covers(ot, t))) {
                /* report each pair once, from the entry declared first */
                if (j > i)
                    rc = sbx_error_set(err, SBX_E_INVAL, 0,
                                       "entry '%s': mount target '%s' overlaps the target '%s' "
                                       "of mount entry '%s'",
                                       e->path, *t ? t : "/", *ot ? ot : "/", o->path);
                continue;
            }
            /* An entry the mount would hide, or a non-directory entry holding the mount. A
             * mount's own declaration path (when mount_path moves it) holds nothing. */
            if (sbx_entry_type_is_mount(o->pub.type))
                continue;
            if (path_covers(t, o->path))
                rc = sbx_error_set(err, SBX_E_INVAL, 0,
                                   "entry '%s': mount target '%s' would hide %s entry '%s'",
                                   e->path, *t ? t : "/", sbx_entry_type_name(o->pub.type),
                                   o->path);
            else if (o->pub.type != SBX_ENTRY_DIR && path_covers(o->path, t))
                rc = sbx_error_set(err, SBX_E_INVAL, 0,
                                   "entry '%s': mount target '%s' lies inside %s entry '%s'",
                                   e->path, t, sbx_entry_type_name(o->pub.type), o->path);
        }
    }
    for (size_t i = 0; i < m->n; i++)
        free(targets[i]);
    free(targets);
    return rc;
}
