/* The client registry and the provider-independent half of sbx_client. */
#include <string.h>

#include "sandbox/local/local.h"
#include "sandbox/session-internal.h"
#include "sbx/session.h"

struct provider {
    const char *name;
    int (*make)(const void *opts, struct sbx_client **out, struct sbx_error *err);
};

static const struct provider providers[] = {
        {"local", sbx__local_client_new},
};

int sbx_client_new(const char *provider, const void *options, struct sbx_client **out,
                   struct sbx_error *err)
{
    if (!provider)
        provider = "local";
    for (size_t i = 0; i < SBX_ARRAY_LEN(providers); i++)
        if (strcmp(providers[i].name, provider) == 0)
            return providers[i].make(options, out, err);
    return sbx_error_set(err, SBX_E_NOTFOUND, 0, "unknown sandbox provider '%s'", provider);
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
    return c->ops->create(c, spec ? spec : &empty, out, err);
}

int sbx_client_attach(struct sbx_client *c, const char *id, struct sbx_session **out,
                      struct sbx_error *err)
{
    if (!id)
        return sbx_error_set(err, SBX_E_INVAL, 0, "missing sandbox id");
    return c->ops->attach(c, id, out, err);
}

int sbx_client_resume(struct sbx_client *c, const json_t *state, struct sbx_session **out,
                      struct sbx_error *err)
{
    const char *provider = json_string_value(json_object_get(state, "provider"));
    const char *id = json_string_value(json_object_get(state, "id"));
    if (!json_is_object(state) || !provider || !id)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "session state must be an object with 'provider' and 'id'");
    if (strcmp(provider, c->provider) != 0)
        return sbx_error_set(err, SBX_E_INVAL, 0, "session state is for provider '%s', not '%s'",
                             provider, c->provider);
    return c->ops->attach(c, id, out, err);
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
