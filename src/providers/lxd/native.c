/* The server's own snapshots of an lxd sandbox's instance (sbx/lxd.h): POST and GET
 * /1.0/instances/NAME/snapshots, DELETE .../snapshots/SNAP, and a restore as PUT of the
 * instance with "restore". They stay on the server and go with the instance; sbx's portable
 * snapshots are workspace.c's. */
#include <string.h>

#include "providers/lxd/lxd.h"
#include "sbx/json.h"

static int lxd_session(struct sbx_session *s, struct sbx__lxd_session **out, struct sbx_error *err)
{
    if (!s || strcmp(sbx_session_provider(s), "lxd") != 0)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "LXD snapshots are for lxd sandboxes, not '%s' ones",
                             s ? sbx_session_provider(s) : "?");
    *out = (struct sbx__lxd_session *)s;
    return 0;
}

static int valid_snap(const char *name, struct sbx_error *err)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > 63 || name[0] == '.' ||
        strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") != n)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "'%s' is not a snapshot name (1-63 letters, digits, '-', '_', '.')",
                             name ? name : "");
    return 0;
}

/* The error of a call on snapshot name said as such. */
static int said(int rc, const char *name, struct sbx_error *err)
{
    if (rc == -SBX_E_NOTFOUND)
        return sbx_error_set(err, SBX_E_NOTFOUND, 0, "no lxd snapshot '%s'", name);
    if (rc == -SBX_E_EXISTS || (rc < 0 && err && strstr(err->msg, "already exists")))
        return sbx_error_set(err, SBX_E_EXISTS, 0, "lxd snapshot '%s' exists", name);
    return rc;
}

SBX_API int sbx_lxd_snapshot_create(struct sbx_session *bs, const char *name, struct sbx_error *err)
{
    struct sbx__lxd_session *s;
    int rc = lxd_session(bs, &s, err);
    if (rc < 0 || (rc = valid_snap(name, err)) < 0)
        return rc;
    json_t *body = json_pack("{s:s,s:b}", "name", name, "stateful", 0);
    char *path = sbx__lxd_inst_path(s->name, "/snapshots");
    rc = said(sbx__lxd_json_wait(&s->sv, "POST", path, body, NULL, err), name, err);
    free(path);
    json_decref(body);
    return rc;
}

SBX_API int sbx_lxd_snapshot_restore(struct sbx_session *bs, const char *name,
                                     struct sbx_error *err)
{
    struct sbx__lxd_session *s;
    int rc = lxd_session(bs, &s, err);
    if (rc < 0 || (rc = valid_snap(name, err)) < 0)
        return rc;
    /* Asked first: a restore of a snapshot that is not there fails only in its operation. */
    char *rest = sbx_xasprintf("/snapshots/%s", name);
    char *snap = sbx__lxd_inst_path(s->name, rest);
    rc = said(sbx__lxd_json(&s->sv, "GET", snap, NULL, NULL, NULL, err), name, err);
    free(snap);
    free(rest);
    if (rc < 0)
        return rc;
    json_t *body = json_pack("{s:s}", "restore", name);
    char *path = sbx__lxd_inst_path(s->name, NULL);
    rc = said(sbx__lxd_json_wait(&s->sv, "PUT", path, body, NULL, err), name, err);
    /* A running instance is restarted by the restore: its loopback is down again. */
    if (rc == 0)
        rc = sbx__lxd_inst_boot(&s->sv, s->name, s->base.id, err);
    free(path);
    json_decref(body);
    return rc;
}

SBX_API int sbx_lxd_snapshot_list(struct sbx_session *bs, json_t **out, struct sbx_error *err)
{
    struct sbx__lxd_session *s;
    int rc = lxd_session(bs, &s, err);
    if (rc < 0)
        return rc;
    json_t *md = NULL, *v, *names = json_array();
    char *path = sbx__lxd_inst_path(s->name, "/snapshots?recursion=1");
    size_t i;
    rc = sbx__lxd_json(&s->sv, "GET", path, NULL, &md, NULL, err);
    free(path);
    json_array_foreach(md, i, v)
    {
        /* "sbx-<id>/NAME" or "NAME", oldest first as the server lists them. */
        const char *n = json_string_value(json_object_get(v, "name"));
        const char *slash = n ? strrchr(n, '/') : NULL;
        if (n)
            sbx_json_append(names, sbx_json_str(slash ? slash + 1 : n));
    }
    json_decref(md);
    if (rc < 0) {
        json_decref(names);
        return rc;
    }
    *out = names;
    return 0;
}

SBX_API int sbx_lxd_snapshot_delete(struct sbx_session *bs, const char *name, struct sbx_error *err)
{
    struct sbx__lxd_session *s;
    int rc = lxd_session(bs, &s, err);
    if (rc < 0 || (rc = valid_snap(name, err)) < 0)
        return rc;
    char *rest = sbx_xasprintf("/snapshots/%s", name);
    char *path = sbx__lxd_inst_path(s->name, rest);
    rc = said(sbx__lxd_json_wait(&s->sv, "DELETE", path, NULL, NULL, err), name, err);
    free(path);
    free(rest);
    return rc;
}
