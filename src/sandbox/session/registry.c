/* The client registry and the provider-independent half of sbx_client. */
#include <stdlib.h>
#include <string.h>

#include "sandbox/provider.h"
#include "sbx/provider.h"
#include "sandbox/session/internal.h"
#include "sbx/buf.h"
#include "sbx/manifest.h"
#include "sbx/session.h"

/* The table of providers (sbx__providers, providers/table.c) is compiled into libsbx only: a
 * provider may need what the supervisor program must not link (docker needs libcurl), and the
 * supervisor never looks providers up. The declared options, the query API and the sandbox
 * records are over the same table, in libsbx too (providers/options.c, records.c). */

const struct sbx__provider_def *sbx__provider_def(const char *name)
{
    if (!name)
        return sbx__providers[0];
    for (size_t i = 0; i < sbx__n_providers; i++)
        if (strcmp(sbx__providers[i]->name, name) == 0)
            return sbx__providers[i];
    return NULL;
}

unsigned sbx__provider_traits(const char *name)
{
    const struct sbx__provider_def *d = name ? sbx__provider_def(name) : NULL;
    return d ? d->traits : 0;
}

const char *sbx__provider_unmountable(const char *name, int t)
{
    const struct sbx__provider_def *d = sbx__provider_def(name);
    if (!d || !sbx_entry_type_is_mount((enum sbx_entry_type)t))
        return NULL;
    if (d->unmountable & (1u << t))
        return d->unmountable_why;
    if (!(d->traits & SBX_PROVIDER_MOUNTS))
        return "it declares no storage mounts";
    return NULL;
}

int sbx__provider_check_mounts(const char *name, const struct sbx_manifest *m,
                               struct sbx_error *err)
{
    for (size_t i = 0; m && i < sbx_manifest_entry_count(m); i++) {
        const struct sbx_manifest_entry *e = sbx_manifest_entry_at(m, i);
        const char *why = sbx__provider_unmountable(name, (int)e->type);
        if (why)
            return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                                 "entry '%s' (%s): the %s provider cannot mount it: %s", e->path,
                                 sbx_entry_type_name(e->type), name, why);
    }
    return 0;
}

int sbx__provider_unknown(const char *name, struct sbx_error *err)
{
    struct sbx_buf names;
    sbx_buf_init(&names, 4096);
    for (size_t i = 0; i < sbx__n_providers; i++)
        (void)sbx_buf_addf(&names, NULL, "%s%s", i ? ", " : "", sbx__providers[i]->name);
    int rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "unknown provider '%s' (%s)", name,
                           sbx_buf_cstr(&names));
    sbx_buf_release(&names);
    return rc;
}

int sbx__client_tied(const struct sbx_client *c)
{
    return c->ops->tied && c->ops->tied(c);
}

int sbx_client_new(const char *provider, const void *options, struct sbx_client **out,
                   struct sbx_error *err)
{
    const struct sbx__provider_def *d = sbx__provider_def(provider);
    if (!d)
        return sbx__provider_unknown(provider, err);
    if (d->client_new)
        return d->client_new(options, out, err);
    if (options)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "the %s provider takes its options as JSON (sbx_client_new_json)",
                             d->name);
    json_t *none = json_object();
    int rc = d->client_new_json(none, out, err);
    json_decref(none);
    return rc;
}

void sbx_client_free(struct sbx_client *c)
{
    if (c)
        c->ops->free(c);
}

const char *sbx_client_provider(const struct sbx_client *c)
{
    return c->provider;
}

int sbx_client_create(struct sbx_client *c, const struct sbx_create_spec *spec,
                      struct sbx_session **out, struct sbx_error *err)
{
    struct sbx_create_spec empty = {0};
    int rc;
    /* Before anything is made: a mount the provider refuses would fail its start anyway. */
    if (spec && (rc = sbx__provider_check_mounts(c->provider, spec->manifest, err)) < 0)
        return rc;
    if (spec && sbx_manifest_grant_count(spec->manifest) &&
        !(sbx__provider_traits(c->provider) & SBX_PROVIDER_GRANTS))
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "manifest field 'extra_path_grants': provider '%s' shows no host "
                             "paths inside its sandboxes",
                             c->provider);
    return c->ops->create(c, spec ? spec : &empty, out, err);
}

typedef int attach_fn(struct sbx_client *c, const char *id, struct sbx_session **out,
                      struct sbx_error *err);

static int attach_with(struct sbx_client *c, attach_fn *fn, const char *id,
                       struct sbx_session **out, struct sbx_error *err)
{
    if (!id)
        return sbx_error_set(err, SBX_E_INVAL, 0, "missing sandbox id");
    int rc = fn(c, id, out, err);
    /* Not an id of this provider's: the name of one of its sandboxes (sbx/provider.h), which
     * stands for the id wherever an id goes. */
    json_t *rec = NULL;
    if ((rc == -SBX_E_NOTFOUND || rc == -SBX_E_INVAL) &&
        sbx_sandbox_record_named(id, &rec, NULL) == 0 &&
        strcmp(json_string_value(json_object_get(rec, "provider")), c->provider) == 0) {
        sbx_error_clear(err);
        rc = fn(c, json_string_value(json_object_get(rec, "id")), out, err);
    }
    json_decref(rec);
    return rc;
}

int sbx_client_attach(struct sbx_client *c, const char *id, struct sbx_session **out,
                      struct sbx_error *err)
{
    return attach_with(c, c->ops->attach, id, out, err);
}

int sbx_client_attach_once(struct sbx_client *c, const char *id, struct sbx_session **out,
                           struct sbx_error *err)
{
    return attach_with(c, c->ops->attach_once ? c->ops->attach_once : c->ops->attach, id, out, err);
}

int sbx_client_resume_with(struct sbx_client *c, const json_t *state,
                           const struct sbx_resume_opts *opts, struct sbx_session **out,
                           struct sbx_error *err)
{
    struct sbx_resume_opts none = {0};
    /* A state made in this process or read from anywhere: checked the same way. */
    int rc = state ? 0 : sbx_error_set(err, SBX_E_INVAL, 0, "missing session state");
    if (rc == 0 && (rc = sbx__session_state_check(state, err)) < 0)
        sbx_error_prefix(err, "session state");
    if (rc < 0)
        return rc;
    const char *provider = json_string_value(json_object_get(state, "provider"));
    if (strcmp(provider, c->provider) != 0)
        return sbx_error_set(err, SBX_E_INVAL, 0, "session state is for provider '%s', not '%s'",
                             provider, c->provider);
    return c->ops->resume(c, state, opts ? opts : &none, out, err);
}

int sbx_client_resume(struct sbx_client *c, const json_t *state, struct sbx_session **out,
                      struct sbx_error *err)
{
    return sbx_client_resume_with(c, state, NULL, out, err);
}

int sbx_client_stop(struct sbx_client *c, const char *id, char **out_ref, struct sbx_error *err)
{
    if (!id)
        return sbx_error_set(err, SBX_E_INVAL, 0, "missing sandbox id");
    if (!c->ops->stop)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0, "provider '%s' cannot stop sandboxes",
                             c->provider);
    char *ref = NULL;
    int rc = c->ops->stop(c, id, &ref, err);
    if (rc == 0 && out_ref)
        *out_ref = ref;
    else
        free(ref);
    return rc;
}

int sbx_client_start(struct sbx_client *c, const char *id, const struct sbx_resume_opts *opts,
                     struct sbx_session **out, struct sbx_error *err)
{
    struct sbx_resume_opts none = {0};
    if (!id)
        return sbx_error_set(err, SBX_E_INVAL, 0, "missing sandbox id");
    if (!c->ops->start)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0, "provider '%s' cannot start sandboxes",
                             c->provider);
    return c->ops->start(c, id, opts ? opts : &none, out, err);
}

int sbx_client_state(struct sbx_client *c, const char *id, int snapshot, json_t **out,
                     struct sbx_error *err)
{
    struct sbx_session *s = NULL;
    char *ref = NULL;
    struct sbx_error aerr = SBX_ERROR_INIT;
    int rc = sbx_client_attach(c, id, &s, &aerr);
    if (rc == -SBX_E_NOTFOUND && c->ops->stopped_state) {
        rc = c->ops->stopped_state(c, id, out, err);
        if (rc != -SBX_E_NOTFOUND)
            return rc;
    }
    if (rc < 0)
        return sbx_error_copy(err, &aerr);
    if (snapshot)
        rc = sbx_session_snapshot(s, NULL, &ref, err);
    if (rc == 0)
        rc = sbx_session_state(s, out, err);
    free(ref);
    sbx_session_free(s);
    return rc;
}

int sbx_client_list(struct sbx_client *c, json_t **out, struct sbx_error *err)
{
    return c->ops->list(c, out, err);
}

int sbx_client_remove(struct sbx_client *c, const char *id, int keep_workspace,
                      struct sbx_error *err)
{
    if (!id)
        return sbx_error_set(err, SBX_E_INVAL, 0, "missing sandbox id");
    return c->ops->remove(c, id, keep_workspace, err);
}

int sbx_client_list_all(struct sbx_client *c, json_t **out, struct sbx_error *err)
{
    if (!c->ops->list_all)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0, "provider '%s' cannot list leftovers",
                             c->provider);
    return c->ops->list_all(c, out, err);
}

int sbx_client_prune(struct sbx_client *c, int keep_workspace, json_t **out, struct sbx_error *err)
{
    if (!c->ops->prune)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0, "provider '%s' cannot prune", c->provider);
    return c->ops->prune(c, keep_workspace, out, err);
}
