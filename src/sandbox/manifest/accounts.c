/* sbx: the manifest's users and groups: names, the document's "users" and "groups", the
 * builders and accessors. */
#include <stdlib.h>
#include <string.h>

#include "core/grow.h"
#include "sandbox/manifest/model.h"
#include "sbx/json.h"
#include "sbx/path.h"

const char *sbx__manifest_shown_name(const char *s)
{
    size_t n = strlen(s);
    return n < 64 && !sbx_text_has_control(s, n) ? s : "...";
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

/* [a-z_][a-z0-9_-]{0,31}: portable user and group names. */
int sbx__manifest_valid_account_name(const char *s)
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

static int parse_user_name(const json_t *u, const char **out, struct sbx_error *err)
{
    static const char *const keys[] = {"name", NULL};
    int rc;
    if (json_is_string(u)) {
        *out = json_string_value(u);
    } else if (json_is_object(u)) {
        if ((rc = sbx_json_check_keys(u, keys, err)) ||
            (rc = sbx_json_get_text(u, "name", SBX_JSON_REQUIRED | SBX_JSON_NONEMPTY, out, NULL,
                                    err)))
            return rc;
    } else {
        return sbx_error_set(err, SBX_E_INVAL, 0, "must be an object, not %s",
                             sbx_json_typename(u));
    }
    if (!sbx__manifest_valid_account_name(*out))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "'%s' is not a valid name ([a-z_][a-z0-9_-]{0,31})",
                             sbx__manifest_shown_name(*out));
    return 0;
}

int sbx__manifest_parse_accounts(struct sbx_manifest *m, const json_t *doc, struct sbx_error *err)
{
    json_t *users = NULL, *groups = NULL;
    size_t i;
    json_t *u;
    int rc;
    if ((rc = sbx_json_get_array(doc, "users", 0, &users, err)))
        return rc;
    if (users) {
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
    if ((rc = sbx_json_get_array(doc, "groups", 0, &groups, err)))
        return rc;
    if (groups) {
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
            if ((rc = sbx_json_check_keys(g, keys, err)) ||
                (rc = sbx_json_get_text(g, "name", SBX_JSON_REQUIRED | SBX_JSON_NONEMPTY, &name,
                                        NULL, err)) ||
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
    const char *owner = NULL;
    if ((rc = sbx_json_get_text(doc, "root_owner", SBX_JSON_NONEMPTY, &owner, NULL, err)))
        return rc;
    return owner ? sbx_manifest_set_root_owner(m, owner, err) : 0;
}

const char *sbx_manifest_root_owner(const struct sbx_manifest *m)
{
    return m->root_owner;
}

int sbx_manifest_set_root_owner(struct sbx_manifest *m, const char *name, struct sbx_error *err)
{
    if (!sbx__manifest_valid_account_name(name))
        return sbx_error_set(
                err, SBX_E_INVAL, 0,
                "field 'root_owner': '%s' is not a valid name ([a-z_][a-z0-9_-]{0,31})",
                sbx__manifest_shown_name(name));
    if (sbx_strv_find(&m->users, name) < 0)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "field 'root_owner': user '%s' is not declared in 'users'", name);
    free(m->root_owner);
    m->root_owner = sbx_xstrdup(name);
    return 0;
}

int sbx_manifest_add_user(struct sbx_manifest *m, const char *name, struct sbx_error *err)
{
    if (!sbx__manifest_valid_account_name(name))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "user '%s': not a valid name ([a-z_][a-z0-9_-]{0,31})",
                             sbx__manifest_shown_name(name));
    if (sbx_strv_find(&m->users, name) >= 0)
        return sbx_error_set(err, SBX_E_EXISTS, 0, "user '%s': declared twice", name);
    sbx_strv_push(&m->users, name);
    return 0;
}

int sbx_manifest_add_group(struct sbx_manifest *m, const char *name, const char *const *users,
                           struct sbx_error *err)
{
    if (!sbx__manifest_valid_account_name(name))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "group '%s': not a valid name ([a-z_][a-z0-9_-]{0,31})",
                             sbx__manifest_shown_name(name));
    for (size_t i = 0; i < m->ngroups; i++)
        if (strcmp(m->groups[i]->name, name) == 0)
            return sbx_error_set(err, SBX_E_EXISTS, 0, "group '%s': declared twice", name);
    struct group *g = sbx_xcalloc(1, sizeof(*g));
    g->name = sbx_xstrdup(name);
    sbx_strv_init(&g->users);
    for (size_t i = 0; users && users[i]; i++) {
        if (!sbx__manifest_valid_account_name(users[i])) {
            int rc = sbx_error_set(err, SBX_E_INVAL, 0, "group '%s': user '%s' is not a valid name",
                                   name, strlen(users[i]) < 64 ? users[i] : "...");
            sbx__manifest_group_free(g);
            return rc;
        }
        if (sbx_strv_find(&g->users, users[i]) >= 0) {
            int rc = sbx_error_set(err, SBX_E_INVAL, 0, "group '%s': user '%s' listed twice", name,
                                   users[i]);
            sbx__manifest_group_free(g);
            return rc;
        }
        sbx_strv_push(&g->users, users[i]);
    }
    g->pub.name = g->name;
    g->pub.users = &g->users;
    SBX_ALLOC_GROW(m->groups, m->ngroups + 1, m->galloc);
    m->groups[m->ngroups++] = g;
    return 0;
}
