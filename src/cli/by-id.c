/* The provider that has a sandbox id, for the commands given only an id (exec, cp, port, rm,
 * stop, start, state, snapshot, ...): sbx's record of the id first (sbx/provider.h: the
 * provider and the options that reach it; a sandbox's name finds its record too), then each
 * provider that finds its sandboxes unconfigured (the lists trait), in table order, with what its
 * probe finds (docker: an engine). The locator options (--docker-host) given to the command apply
 * to their provider. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "sbx/json.h"
#include "sbx/provider.h"

/* provider name -> {key: value} of the locator flags given. */
static json_t *locators;

int cli_locator_arg(int argc, char **argv, int *i, const char *verb)
{
    const char *a = argv[*i];
    struct sbx_provider_info p;
    struct sbx_error err = SBX_ERROR_INIT;
    const char *value = NULL;
    int hit = 0;
    if (a[0] != '-' || a[1] != '-')
        return 0;
    size_t n = strcspn(a + 2, "=");
    for (size_t k = 0; sbx_provider_at(k, &p) == 0; k++) {
        for (size_t j = 0; j < p.n_options; j++) {
            const struct sbx_provider_option *o = &p.options[j];
            if (!(o->flags & SBX_OPTION_LOCATOR) || !o->flag || strlen(o->flag) != n ||
                strncmp(o->flag, a + 2, n) != 0)
                continue;
            if (!value && a[2 + n] == '=')
                value = a + 3 + n;
            else if (!value && *i + 1 < argc)
                value = argv[++*i];
            else if (!value)
                return cli_usage(verb, "option '--%s' needs a value", o->flag);
            json_t *v = NULL;
            if (sbx_provider_option_parse(o, value, &v, &err) < 0)
                return cli_usage(verb, "%s", err.msg);
            if (!locators)
                locators = json_object();
            if (!json_object_get(locators, p.name))
                sbx_json_set(locators, p.name, json_object());
            sbx_json_set(json_object_get(locators, p.name), o->key, v);
            hit = 1;
        }
    }
    return hit;
}

int cli_client_with(const char *provider, const json_t *base, struct sbx_client **out,
                    struct sbx_error *err)
{
    json_t *opts = base ? json_deep_copy(base) : json_object();
    json_object_update(opts, json_object_get(locators, provider));
    int rc = sbx_client_new_json(provider, opts, out, err);
    json_decref(opts);
    return rc;
}

int cli_locators_given(const char *provider)
{
    return json_object_get(locators, provider) != NULL;
}

int cli_locators_move(const char *provider, const json_t *base)
{
    const char *key;
    json_t *v;
    json_object_foreach(json_object_get(locators, provider), key, v)
    {
        if (!json_equal(v, json_object_get(base, key)))
            return 1;
    }
    return 0;
}

int cli_client_found(const char *provider, int asked, struct sbx_client **out,
                     struct sbx_error *err)
{
    json_t *found = NULL;
    struct sbx_error perr = SBX_ERROR_INIT;
    int rc = sbx_provider_probe(provider, &found, &perr);
    /* Not found here: only what the command line says, if it says anything. */
    if (rc < 0 && !asked && !json_object_get(locators, provider))
        return sbx_error_copy(err, &perr);
    rc = cli_client_with(provider, found, out, err);
    json_decref(found);
    return rc;
}

/* op through sbx's record of id. 1: done (rc in *rc, *out the client on success or a
 * provider's error); 0: no record, or the sandbox it names is gone (the record too, now). */
static int by_record(const char *id, cli_sandbox_op *op, void *data, struct sbx_client **out,
                     int *rc, struct sbx_error *err)
{
    json_t *rec = NULL;
    struct sbx_client *c = NULL;
    struct sbx_error e = SBX_ERROR_INIT;
    *rc = sbx_sandbox_record_read(id, &rec, &e);
    /* Records only shorten the search: one that cannot be read (no descriptor left, a
     * directory others may write) is looked past, an ambiguous prefix is the answer. */
    if (*rc < 0 && *rc != -SBX_E_INVAL)
        return 0;
    if (*rc < 0) {
        sbx_error_copy(err, &e);
        return 1;
    }
    const char *provider = json_string_value(json_object_get(rec, "provider"));
    *rc = cli_client_with(provider, json_object_get(rec, "options"), &c, &e);
    if (*rc == -SBX_E_NOTFOUND) {
        /* A provider this sbx is built without: the record may serve another one. */
        json_decref(rec);
        return 0;
    }
    /* The record's own id: what was given may be a name or a prefix. */
    const char *rid = json_string_value(json_object_get(rec, "id"));
    if (*rc == 0)
        *rc = op(c, rid, data, &e);
    struct sbx_provider_info info = {0};
    struct sbx_error ignored = SBX_ERROR_INIT;
    int lists =
            sbx_provider_find(provider, &info, &ignored) < 0 || (info.traits & SBX_PROVIDER_LISTS);
    json_t *st = NULL;
    int st_rc = *rc == -SBX_E_NOTFOUND ? sbx_client_state(c, rid, 0, &st, &ignored) : 0;
    json_decref(st);
    /* Flags that point elsewhere than the record (another node, another engine): what is not
     * there says nothing of the recorded sandbox, whose record stays. */
    int moved = cli_locators_move(provider, json_object_get(rec, "options"));
    if (*rc == -SBX_E_NOTFOUND && (st_rc == 0 || !lists)) {
        /* Not found by the command but still there (stopped: an exec or a cp finds no live
         * sandbox), or a sandbox only the record finds (a provider that does not list, such as
         * a hosted one): the command's error is the answer, and the record goes only with the
         * sandbox. */
        if (st_rc == -SBX_E_NOTFOUND && !moved)
            (void)sbx_sandbox_record_remove(rid, NULL);
        sbx_error_copy(err, &e);
        *out = c;
        json_decref(rec);
        return 1;
    }
    if (*rc == -SBX_E_NOTFOUND) {
        /* Removed behind sbx's back: forget it and look elsewhere. */
        if (!moved)
            (void)sbx_sandbox_record_remove(json_string_value(json_object_get(rec, "id")), NULL);
        sbx_client_free(c);
        json_decref(rec);
        return 0;
    }
    if (*rc < 0)
        sbx_error_copy(err, &e);
    *out = c;
    json_decref(rec);
    return 1;
}

int cli_sandbox_by_id(const char *id, cli_sandbox_op *op, void *data, struct sbx_client **out,
                      struct sbx_error *err)
{
    struct sbx_error first = SBX_ERROR_INIT, refused = SBX_ERROR_INIT;
    struct sbx_provider_info p, dflt;
    int rc = 0, asked = 0;
    *out = NULL;
    if (by_record(id, op, data, out, &rc, err))
        return rc < 0 ? rc : 0;
    sbx_provider_at(0, &dflt);
    for (size_t i = 0; sbx_provider_at(i, &p) == 0; i++) {
        struct sbx_client *c = NULL;
        struct sbx_error e = SBX_ERROR_INIT;
        /* A provider that does not list unconfigured is asked when its locator flags are
         * given (the remote provider with --node: a harness without the sandbox's record). */
        if (!(p.traits & SBX_PROVIDER_LISTS) && !cli_locators_given(p.name))
            continue;
        rc = cli_client_found(p.name, 0, &c, &e);
        if (rc == -SBX_E_NOTFOUND && !c)
            continue; /* nothing of it configured here */
        if (rc == -SBX_E_INVAL && !c && asked > 0) {
            /* A flag two providers share configures another (the remote provider's --node URL
             * is no kubernetes node mode): this one is not asked, and its refusal is told only
             * if no provider finds the sandbox: the refusal of one asked only for its flags (it
             * does not list) before another's. */
            if (!refused.code || !(p.traits & SBX_PROVIDER_LISTS)) {
                sbx_error_copy(&refused, &e);
                sbx_error_prefix(&refused, "no %s sandbox '%s', and the %s provider", dflt.name, id,
                                 p.name);
            }
            continue;
        }
        asked++;
        if (rc == 0)
            rc = op(c, id, data, &e);
        if (rc == 0 || (rc != -SBX_E_NOTFOUND && asked == 1)) {
            *out = c;
            return rc < 0 ? sbx_error_copy(err, &e) : 0;
        }
        sbx_client_free(c);
        if (asked == 1) {
            sbx_error_copy(&first, &e);
        } else if (rc != -SBX_E_NOTFOUND) {
            /* Not one of the first provider's, and this one cannot say: both halves matter. */
            sbx_error_prefix(&e, "no %s sandbox '%s', and the %s provider", dflt.name, id, p.name);
            return sbx_error_copy(err, &e);
        }
    }
    return sbx_error_copy(err, refused.code ? &refused : &first);
}

static int attach_op(struct sbx_client *c, const char *id, void *data, struct sbx_error *err)
{
    return sbx_client_attach(c, id, data, err);
}

int cli_sandbox_attach(const char *id, struct sbx_client **c, struct sbx_session **s,
                       struct sbx_error *err)
{
    return cli_sandbox_by_id(id, attach_op, s, c, err);
}

static int attach_once_op(struct sbx_client *c, const char *id, void *data, struct sbx_error *err)
{
    return sbx_client_attach_once(c, id, data, err);
}

int cli_sandbox_attach_once(const char *id, struct sbx_client **c, struct sbx_session **s,
                            struct sbx_error *err)
{
    return cli_sandbox_by_id(id, attach_once_op, s, c, err);
}
