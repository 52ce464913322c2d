/* Session state documents (serialize, parse, the generic checks) and session snapshots: the
 * provider-independent half of saving a session and bringing it back. */
#include <stdlib.h>
#include <string.h>

#include "sandbox/provider.h"
#include "sandbox/manifest/internal.h"
#include "sandbox/session/internal.h"
#include "sandbox/snapshot/stream.h"
#include "sbx/json.h"
#include "sbx/manifest.h"
#include "sbx/session.h"
#include "sbx/snapshot.h"
#include "sbx/strv.h"

#define MAX_EXPOSED_PORTS 64
#define STATE_MAX_DEPTH   64

static int is_ref(const char *s)
{
    if (strncmp(s, "sha256:", 7) != 0 || strlen(s) != 7 + 64)
        return 0;
    for (const char *p = s + 7; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return 0;
    return 1;
}

/* "2026-12-01T23:26:34Z" or with fractions / an offset: the shape only, enough to refuse a
 * number or free text where a time belongs. */
static int is_time(const char *s)
{
    static const char shape[] = "dddd-dd-ddTdd:dd:dd";
    size_t n = strlen(s);
    if (n < sizeof(shape) - 1 || n > 40)
        return 0;
    for (size_t i = 0; i < sizeof(shape) - 1; i++)
        if (shape[i] == 'd' ? !(s[i] >= '0' && s[i] <= '9') : s[i] != shape[i])
            return 0;
    return 1;
}

/* The provider-specific part of a session state: the provider named in it must be one of the
 * registry's table (providers/table.c), whose check_state reads the rest. */
static int check_provider_part(const json_t *state, struct sbx_error *err)
{
    const char *name = json_string_value(json_object_get(state, "provider"));
    for (size_t i = 0; name && i < sbx__n_providers; i++)
        if (strcmp(sbx__providers[i]->name, name) == 0)
            return sbx__providers[i]->check_state(state, err);
    return sbx_error_set(err, SBX_E_INVAL, 0, "field 'provider': unknown provider '%s'",
                         name ? name : "");
}

int sbx__session_state_check(const json_t *st, struct sbx_error *err)
{
    int64_t version = 0;
    const char *provider = NULL, *id = NULL, *created = NULL;
    json_t *v;
    int rc;
    if (!json_is_object(st))
        return sbx_error_set(err, SBX_E_INVAL, 0, "a session state must be a JSON object, not %s",
                             sbx_json_typename(st));
    if ((rc = sbx_json_get_int(st, "version", 1, &version, err)) < 0)
        return rc;
    if (version != SBX_SESSION_STATE_VERSION)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "version %lld is not supported (this sbx reads version %d)",
                             (long long)version, SBX_SESSION_STATE_VERSION);
    if ((rc = sbx_json_get_string(st, "provider", 1, &provider, err)) < 0 ||
        (rc = sbx_json_get_string(st, "id", 1, &id, err)) < 0 ||
        (rc = sbx_json_get_string(st, "created", 1, &created, err)) < 0)
        return rc;
    if (!is_time(created))
        return sbx_error_set(err, SBX_E_INVAL, 0, "field 'created' must be an RFC 3339 time");
    int owned = 0;
    if ((rc = sbx_json_get_bool(st, "workspace_owned", 1, &owned, err)) < 0 ||
        (rc = sbx_json_get_object(st, "options", 1, &v, err)) < 0)
        return rc;
    v = json_object_get(st, "snapshot");
    if (!v)
        return sbx_error_set(err, SBX_E_INVAL, 0, "missing field 'snapshot'");
    if (!json_is_null(v) && !(json_is_string(v) && is_ref(json_string_value(v))))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "field 'snapshot' must be null or a \"sha256:<64 hex>\" reference");
    if ((rc = sbx_json_get_array(st, "exposed_ports", 1, &v, err)) < 0)
        return rc;
    if (json_array_size(v) > MAX_EXPOSED_PORTS)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "field 'exposed_ports' has more than %d ports",
                             MAX_EXPOSED_PORTS);
    size_t i;
    json_t *p;
    json_array_foreach(v, i, p)
    {
        if (!json_is_integer(p) || json_integer_value(p) < 1 || json_integer_value(p) > 65535)
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "field 'exposed_ports' must hold ports in 1..65535");
    }
    v = json_object_get(st, "manifest");
    if (!v)
        return sbx_error_set(err, SBX_E_INVAL, 0, "missing field 'manifest'");
    if (!json_is_null(v)) {
        /* The whole manifest is checked now, so a bad one is refused before anything is made;
         * its local sources are looked at only when they are materialised. */
        struct sbx_manifest *m = NULL;
        struct sbx_manifest_load_opts lo = {.base_dir = "/",
                                            .flags = SBX_MANIFEST_NO_HOST_CHECKS |
                                                     SBX_MANIFEST_CONTENT_DIGESTS};
        if (!json_is_object(v))
            return sbx_error_set(err, SBX_E_INVAL, 0, "field 'manifest' must be an object");
        rc = sbx_manifest_from_json(v, &lo, &m, err);
        sbx_manifest_free(m);
        if (rc < 0) {
            sbx_error_prefix(err, "field 'manifest'");
            return rc;
        }
    }
    return check_provider_part(st, err);
}

int sbx_session_state_parse(const char *text, size_t n, json_t **out, struct sbx_error *err)
{
    struct sbx_json_limits lim = {.max_bytes = SBX_SESSION_STATE_MAX, .max_depth = STATE_MAX_DEPTH};
    json_t *st = NULL;
    int rc;
    if (n > SBX_SESSION_STATE_MAX)
        rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "more than %zu bytes", SBX_SESSION_STATE_MAX);
    else if (n == 0)
        rc = sbx_error_set(err, SBX_E_PARSE, 0, "empty document");
    else
        rc = sbx_json_parse(text, n, &lim, &st, err);
    if (rc == 0)
        rc = sbx__session_state_check(st, err);
    if (rc < 0) {
        json_decref(st);
        sbx_error_prefix(err, "session state");
        return rc;
    }
    *out = st;
    return 0;
}

int sbx_session_state_serialize(const json_t *state, char **out, struct sbx_error *err)
{
    int rc = sbx__session_state_check(state, err);
    if (rc < 0) {
        sbx_error_prefix(err, "session state");
        return rc;
    }
    char *text = sbx_json_dumps(state, SBX_JSON_PRETTY);
    size_t n = strlen(text);
    if (n + 1 > SBX_SESSION_STATE_MAX) {
        free(text);
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "session state: more than %zu bytes",
                             SBX_SESSION_STATE_MAX);
    }
    text = sbx_xrealloc(text, n + 2);
    text[n] = '\n';
    text[n + 1] = '\0';
    *out = text;
    return 0;
}

int sbx_session_snapshot(struct sbx_session *s, struct sbx_snapshot_store *st, char **out_ref,
                         struct sbx_error *err)
{
    struct sbx_snapshot_store *own = NULL;
    const struct sbx_manifest *m = NULL;
    struct sbx_strv exclude;
    json_t *state = NULL;
    char *ref = NULL, *label = NULL;
    int fd = -1, rc;

    sbx_strv_init(&exclude);
    if ((!s->ops->workspace_fd && !s->ops->workspace_export) || !s->ops->record_snapshot) {
        rc = sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                           "provider '%s' cannot snapshot a workspace on this host", s->provider);
        goto out;
    }
    if ((rc = s->ops->state(s, &state, err)) < 0 || (rc = sbx__session_manifest(s, &m, err)) < 0)
        goto out;
    sbx__manifest_ephemeral_paths(m, &exclude);
    if (!st) {
        if ((rc = sbx_snapshot_store_open(NULL, &own, err)) < 0)
            goto out;
        st = own;
    }
    label = sbx_xasprintf("snapshot of sandbox %s", s->id);
    if (s->ops->workspace_export) {
        /* A workspace elsewhere streams into the store: no copy of it on this host. */
        struct sbx__snap_stream_opts so = {
                .exclude = exclude.n ? (const char *const *)exclude.v : NULL,
                .label = label,
                .manifest_digest = json_string_value(json_object_get(state, "manifest_digest")),
                .progress = s->progress_fn,
                .progress_data = s->progress_data,
        };
        if ((rc = sbx__session_snapshot_stream(s, st, &so, &ref, err)) < 0 ||
            (rc = s->ops->record_snapshot(s, ref, err)) < 0)
            goto out;
        *out_ref = ref;
        ref = NULL;
        goto out;
    }
    if ((rc = s->ops->workspace_fd(s, &fd, err)) < 0)
        goto out;
    struct sbx_snapshot_take_opts o = {
            .source = s->id,
            .manifest_digest = json_string_value(json_object_get(state, "manifest_digest")),
            .exclude = exclude.n ? (const char *const *)exclude.v : NULL,
            .label = label,
            .progress = s->progress_fn,
            .progress_data = s->progress_data,
    };
    if ((rc = sbx_snapshot_take(st, fd, &o, &ref, err)) < 0 ||
        (rc = s->ops->record_snapshot(s, ref, err)) < 0)
        goto out;
    *out_ref = ref;
    ref = NULL;
out:
    if (rc < 0)
        sbx_error_prefix(err, "cannot snapshot sandbox '%s'", s->id);
    free(ref);
    free(label);
    json_decref(state);
    sbx_strv_release(&exclude);
    sbx_snapshot_store_free(own);
    return rc;
}

int sbx__client_rebuild(struct sbx_client *c, const json_t *state, const char *snap,
                        const struct sbx_resume_opts *opts, unsigned manifest_flags, unsigned flags,
                        struct sbx_session **out, struct sbx_error *err)
{
    struct sbx_manifest *m = NULL;
    const json_t *mj = json_object_get(state, "manifest");
    int rc;
    if (!opts->manifest && json_is_object(mj)) {
        struct sbx_manifest_load_opts lo = {.base_dir = opts->base_dir ? opts->base_dir : ".",
                                            .flags = SBX_MANIFEST_NO_HOST_CHECKS | manifest_flags};
        if ((rc = sbx_manifest_from_json(mj, &lo, &m, err)) < 0) {
            sbx_error_prefix(err, "session state: field 'manifest'");
            return rc;
        }
    }
    struct sbx_create_spec spec = {
            .manifest = opts->manifest ? opts->manifest : m,
            .base_dir = opts->base_dir,
            .pass_secrets = opts->pass_secrets,
            .snapshot = snap,
            .id = (flags & SBX__REBUILD_KEEP_ID) ? json_string_value(json_object_get(state, "id"))
                                                 : NULL,
            .progress = opts->progress,
            .progress_data = opts->progress_data,
    };
    rc = c->ops->create(c, &spec, out, err);
    sbx_manifest_free(m);
    return rc;
}
