/* A new hosted sandbox made ready, and the accounts a hosted sandbox cannot make (shellfs.h). */
#include <string.h>

#include "sandbox/materialize/materialize.h"
#include "sandbox/session/internal.h"
#include "sandbox/shellfs/shellfs.h"
#include "sbx/json.h"
#include "sbx/manifest.h"
#include "sbx/strv.h"

int sbx__shellfs_make_root(const struct sbx__shellfs *fs, struct sbx_error *err)
{
    struct sbx__shell_run r;
    const char *argv[] = {"mkdir", "-p", "--", fs->root, NULL};
    sbx__shell_run_init(&r, 65536);
    int rc = sbx__shellfs_run_ok(fs, argv, "make the workspace", fs->root, &r, err);
    sbx__shell_run_release(&r);
    return rc;
}

int sbx__shellfs_fill(const struct sbx__shellfs *fs, struct sbx_session *s, json_t *state,
                      const struct sbx_create_spec *spec, struct sbx_snapshot_store *store,
                      const char *snap_ref, struct sbx_error *err)
{
    const struct sbx_manifest *m = spec->manifest;
    json_t *records = NULL, *mjson = NULL;
    int rc = 0;
    sbx__session_set_manifest(s, m);
    if (snap_ref) {
        rc = fs ? sbx__shellfs_restore(fs, store, snap_ref, err)
                : sbx__session_restore_stream(s, store, snap_ref, spec->progress,
                                              spec->progress_data, err);
        if (rc < 0) {
            sbx_error_prefix(err, "snapshot '%s'", spec->snapshot);
            return rc;
        }
        sbx_json_set(state, "snapshot", sbx_json_str(snap_ref));
    }
    if (!m)
        return 0;
    if (sbx_manifest_to_json(m, SBX_MANIFEST_JSON_NO_EPHEMERAL_ENV, &mjson, NULL, err) == 0)
        sbx_json_set(state, "manifest", mjson);
    struct sbx_progress_sink progress;
    sbx_progress_sink_init(&progress, spec->progress, spec->progress_data);
    int mflags = snap_ref ? SBX__MATERIALIZE_EPHEMERAL_ONLY : 0;
    if ((rc = sbx__materialize(s, m, mflags, &progress, &records, err)) < 0) {
        json_decref(records);
        return rc;
    }
    sbx_json_set(state, "materialized", records);
    return 0;
}

int sbx__shellfs_check_accounts(const struct sbx_manifest *m, const char *what, const char *user,
                                struct sbx_error *err)
{
    struct sbx_strv users;
    sbx_strv_init(&users);
    if (m)
        sbx_manifest_account_users(m, &users);
    int rc = 0;
    for (size_t i = 0; i < users.n && rc == 0; i++) {
        if (user && strcmp(users.v[i], user) == 0)
            continue;
        if (user)
            rc = sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                               "manifest user '%s': %s has its user '%s' and makes no others",
                               users.v[i], what, user);
        else
            rc = sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                               "manifest user '%s': %s runs everything as one user and makes "
                               "no others",
                               users.v[i], what);
    }
    if (rc == 0 && m && sbx_manifest_group_count(m))
        rc = sbx_error_set(err, SBX_E_UNSUPPORTED, 0, "manifest groups: %s makes no groups", what);
    sbx_strv_release(&users);
    return rc;
}
