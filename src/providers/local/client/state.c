/* The local provider's part of a session state: the fields state.json holds beyond the generic
 * ones, checked strictly because a saved state may come from anywhere. */
#include <string.h>

#include "providers/local/local.h"
#include "sbx/json.h"

#define ID_LEN 16

static int is_id(const char *s)
{
    if (strlen(s) != ID_LEN)
        return 0;
    for (const char *p = s; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return 0;
    return 1;
}

static int one_of(const char *v, const char *const *names)
{
    for (; *names; names++)
        if (strcmp(v, *names) == 0)
            return 1;
    return 0;
}

static int check_enum(const json_t *o, const char *key, int required, const char *const *names,
                      struct sbx_error *err)
{
    const char *v = NULL;
    int rc = sbx_json_get_string(o, key, required, &v, err);
    if (rc == 0 && v && !one_of(v, names))
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "field '%s': unknown value '%s'", key, v);
    return rc;
}

static int check_abs_path(const json_t *o, const char *key, int required, struct sbx_error *err)
{
    const char *v = NULL;
    int rc = sbx_json_get_string(o, key, required, &v, err);
    if (rc == 0 && v && v[0] != '/')
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "field '%s' must be an absolute path", key);
    return rc;
}

/* A count or size: a positive integer, or "none" (no limit). */
static int check_amount(const json_t *o, const char *key, struct sbx_error *err)
{
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    if (json_is_string(v) && strcmp(json_string_value(v), "none") == 0)
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) <= 0)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "field '%s' must be a positive integer or \"none\"", key);
    return 0;
}

static int check_strings(const json_t *o, const char *key, size_t max, struct sbx_error *err)
{
    json_t *a = NULL, *v;
    size_t i;
    int rc = sbx_json_get_array(o, key, 0, &a, err);
    if (rc < 0 || !a)
        return rc;
    if (json_array_size(a) > max)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "field '%s' has more than %zu items", key, max);
    json_array_foreach(a, i, v)
    {
        if (!json_is_string(v) || json_string_length(v) == 0)
            return sbx_error_set(err, SBX_E_INVAL, 0, "field '%s' must hold non-empty strings",
                                 key);
    }
    return 0;
}

static int check_options(const json_t *o, struct sbx_error *err)
{
    static const char *const keys[] = {
            "isolation",     "network",     "limits",    "disk",    "grants",
            "allow_domains", "allow_ports", "port_bind", "publish", NULL};
    static const char *const isolations[] = {"namespaces", "none", NULL};
    static const char *const networks[] = {"none", "full", "allow", NULL};
    static const char *const limit_keys[] = {"memory",    "pids",       "cpu_millis",
                                             "file_size", "open_files", NULL};
    static const char *const grant_keys[] = {"src", "dst", "writable", "dangerous", NULL};
    json_t *lim = NULL, *grants = NULL, *ports = NULL, *v;
    const char *bind = NULL;
    size_t i;
    int rc, flag;
    if ((rc = sbx_json_check_keys(o, keys, err)) < 0 ||
        (rc = check_enum(o, "isolation", 1, isolations, err)) < 0 ||
        (rc = check_enum(o, "network", 1, networks, err)) < 0 ||
        (rc = check_amount(o, "disk", err)) < 0 ||
        (rc = check_strings(o, "allow_domains", SBX_LOCAL_MAX_ALLOW_DOMAINS, err)) < 0 ||
        (rc = check_strings(o, "publish", SBX_LOCAL_MAX_EXPOSED_PORTS, err)) < 0 ||
        (rc = sbx_json_get_string(o, "port_bind", 0, &bind, err)) < 0 ||
        (rc = sbx_json_get_object(o, "limits", 0, &lim, err)) < 0)
        return rc;
    if (lim && (rc = sbx_json_check_keys(lim, limit_keys, err)) < 0)
        return rc;
    for (size_t k = 0; lim && limit_keys[k]; k++)
        if ((rc = check_amount(lim, limit_keys[k], err)) < 0)
            return rc;
    if ((rc = sbx_json_get_array(o, "allow_ports", 0, &ports, err)) < 0)
        return rc;
    if (json_array_size(ports) > SBX_LOCAL_MAX_EXPOSED_PORTS)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "field 'allow_ports' has more than %d ports",
                             SBX_LOCAL_MAX_EXPOSED_PORTS);
    json_array_foreach(ports, i, v)
    {
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 65535)
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "field 'allow_ports' must hold ports in 1..65535");
    }
    if ((rc = sbx_json_get_array(o, "grants", 0, &grants, err)) < 0)
        return rc;
    if (json_array_size(grants) > SBX_LOCAL_MAX_GRANTS)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "field 'grants' has more than %d grants",
                             SBX_LOCAL_MAX_GRANTS);
    json_array_foreach(grants, i, v)
    {
        if (!json_is_object(v))
            return sbx_error_set(err, SBX_E_INVAL, 0, "field 'grants' must hold objects");
        if ((rc = sbx_json_check_keys(v, grant_keys, err)) < 0 ||
            (rc = check_abs_path(v, "src", 1, err)) < 0 ||
            (rc = check_abs_path(v, "dst", 0, err)) < 0 ||
            (rc = sbx_json_get_bool(v, "writable", 0, &flag, err)) < 0 ||
            (rc = sbx_json_get_bool(v, "dangerous", 0, &flag, err)) < 0) {
            sbx_error_prefix(err, "grant %zu", i + 1);
            return rc;
        }
    }
    return 0;
}

/* Every field a local session state may have. */
const char *const sbx__local_state_keys[] = {"version",
                                             "provider",
                                             "id",
                                             "workspace",
                                             "root",
                                             "created",
                                             "isolation",
                                             "network",
                                             "workspace_owned",
                                             "manifest_digest",
                                             "materialized",
                                             "disk",
                                             "limits",
                                             "unenforced",
                                             "options",
                                             "manifest",
                                             "snapshot",
                                             "exposed_ports",
                                             "stopped",
                                             NULL};

int sbx__local_state_check(const json_t *st, struct sbx_error *err)
{
    static const char *const isolations[] = {"namespaces", "none", NULL};
    static const char *const networks[] = {"none", "full", "allow", NULL};
    const char *id = NULL, *digest = NULL, *stopped = NULL;
    json_t *v = NULL;
    int rc;
    if ((rc = sbx_json_check_keys(st, sbx__local_state_keys, err)) < 0 ||
        (rc = sbx_json_get_string(st, "id", 1, &id, err)) < 0)
        return rc;
    if (!is_id(id))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "field 'id': '%s' is not a local sandbox id (16 hex digits)", id);
    if ((rc = check_abs_path(st, "workspace", 0, err)) < 0 ||
        (rc = check_abs_path(st, "root", 1, err)) < 0 ||
        (rc = check_enum(st, "isolation", 1, isolations, err)) < 0 ||
        (rc = check_enum(st, "network", 1, networks, err)) < 0 ||
        (rc = sbx_json_get_string(st, "manifest_digest", 0, &digest, err)) < 0 ||
        (rc = sbx_json_get_string(st, "stopped", 0, &stopped, err)) < 0 ||
        (rc = sbx_json_get_array(st, "materialized", 0, &v, err)) < 0 ||
        (rc = sbx_json_get_array(st, "unenforced", 0, &v, err)) < 0 ||
        (rc = sbx_json_get_object(st, "disk", 0, &v, err)) < 0 ||
        (rc = sbx_json_get_object(st, "limits", 0, &v, err)) < 0)
        return rc;
    if (digest && (strncmp(digest, "sha256:", 7) != 0 || strlen(digest) != 7 + 64))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "field 'manifest_digest' must be a \"sha256:<64 hex>\" digest");
    rc = check_options(json_object_get(st, "options"), err);
    if (rc < 0)
        sbx_error_prefix(err, "field 'options'");
    return rc;
}
