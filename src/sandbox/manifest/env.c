/* sbx: the manifest's environment: the document shapes of a value (both SDKs'), the builder
 * sbx_manifest_set_env, and resolution into a NAME=VALUE block for a provider. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "core/grow.h"
#include "sandbox/manifest/model.h"
#include "sbx/json.h"
#include "sbx/path.h"

#define ENV_VALUE_MAX ((size_t)128 << 10)

static void env_sync(struct env *v)
{
    v->pub.name = v->name;
    v->pub.value = v->value;
    v->pub.host_env = v->host_env;
    v->pub.description = v->description;
    v->pub.secret = v->secret;
}

size_t sbx_manifest_env_count(const struct sbx_manifest *m)
{
    return m->nenv;
}

const struct sbx_manifest_env *sbx_manifest_env_at(const struct sbx_manifest *m, size_t i)
{
    return i < m->nenv ? &m->env[i]->pub : NULL;
}

/* The variables sbx reads its own secrets from (src/model: the model's API key). */
static const char *const harness_credentials[] = {"OPENAI_API_KEY"};

int sbx_manifest_harness_credential(const char *name)
{
    for (size_t i = 0; i < sizeof(harness_credentials) / sizeof(*harness_credentials); i++)
        if (strcmp(name, harness_credentials[i]) == 0)
            return 1;
    return 0;
}

int sbx_manifest_env_resolve(const struct sbx_manifest *m, const struct sbx_strv *pass,
                             struct sbx_strv *out, struct sbx_error *err)
{
    struct sbx_strv tmp;
    sbx_strv_init(&tmp);
    for (size_t i = 0; i < m->nenv; i++) {
        const struct env *v = m->env[i];
        const char *val = v->value;
        if (v->secret)
            val = sbx_secret_reveal(v->secret, NULL);
        if (v->host_env) {
            if (sbx_manifest_harness_credential(v->host_env) &&
                !(pass && sbx_strv_find(pass, v->host_env) >= 0)) {
                sbx_strv_release(&tmp);
                return sbx_error_set(err, SBX_E_PERM, 0,
                                     "environment '%s': harness variable '%s' holds sbx's own "
                                     "credentials and is not passed into a sandbox unless "
                                     "asked for on the command line (--pass-secret %s)",
                                     v->name, v->host_env, v->host_env);
            }
            val = getenv(v->host_env);
            if (!val) {
                sbx_strv_release(&tmp);
                return sbx_error_set(err, SBX_E_NOTFOUND, 0,
                                     "environment '%s': harness variable '%s' is not set", v->name,
                                     v->host_env);
            }
        }
        sbx_strv_pushf(&tmp, "%s=%s", v->name, val);
    }
    for (size_t i = 0; i < tmp.n; i++)
        sbx_strv_push(out, tmp.v[i]);
    for (size_t i = 0; i < tmp.n; i++)
        explicit_bzero(tmp.v[i], strlen(tmp.v[i]));
    sbx_strv_release(&tmp);
    return 0;
}

int sbx__manifest_valid_env_name(const char *s, size_t n)
{
    if (n == 0 || n > 255 || !(isalpha((unsigned char)s[0]) || s[0] == '_'))
        return 0;
    for (size_t i = 1; i < n; i++)
        if (!(isalnum((unsigned char)s[i]) || s[i] == '_'))
            return 0;
    return 1;
}

void sbx__manifest_env_put(struct sbx_manifest *m, struct env *v)
{
    for (size_t i = 0; i < m->nenv; i++) {
        if (strcmp(m->env[i]->name, v->name) == 0) {
            sbx__manifest_env_free(m->env[i]);
            m->env[i] = v;
            env_sync(v);
            return;
        }
    }
    SBX_ALLOC_GROW(m->env, m->nenv + 1, m->envalloc);
    m->env[m->nenv++] = v;
    env_sync(v);
}

static int check_env_value(const char *s, size_t len, struct sbx_error *err)
{
    if (len > ENV_VALUE_MAX)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "value of %zu bytes exceeds the limit of %zu",
                             len, ENV_VALUE_MAX);
    if (memchr(s, '\0', len))
        return sbx_error_set(err, SBX_E_INVAL, 0, "value must not contain a NUL byte");
    return 0;
}

/* One environment value: "x", {"value": "x"}, {"type": "str", "value": "x"}, {"value": "x",
 * "secret": true}, {"type": "secret", "value": "x"}, {"type": "secret", "env": "HOST_VAR"}, any
 * of those objects with "description" / "ephemeral", and the Python SDK's EnvEntry
 * {"description", "ephemeral", "value": {"type": "str", "value": "x"}}. */
static int parse_env_value(struct env *v, const json_t *raw, int nested, struct sbx_error *err)
{
    static const char *const keys[] = {"type",        "value",     "secret", "env",
                                       "description", "ephemeral", NULL};
    if (json_is_string(raw)) {
        int rc = check_env_value(json_string_value(raw), json_string_length(raw), err);
        if (rc == 0)
            v->value = sbx_xstrdup(json_string_value(raw));
        return rc;
    }
    if (!json_is_object(raw))
        return sbx_error_set(err, SBX_E_INVAL, 0, "must be a string or an object, not %s",
                             sbx_json_typename(raw));
    json_t *o = NULL;
    const char *type = NULL, *desc = NULL, *host = NULL, *val = NULL;
    size_t vlen = 0;
    int secret = 0;
    int rc = sbx__manifest_snake_keys(raw, &o, err);
    if (rc == 0)
        rc = sbx_json_check_keys(o, keys, err);
    if (rc == 0)
        rc = sbx_json_get_text(o, "type", 0, &type, NULL, err);
    if (rc == 0)
        rc = sbx_json_get_text(o, "description", SBX_JSON_ALLOW_CONTROL, &desc, NULL, err);
    if (rc == 0)
        rc = sbx_json_get_bool(o, "ephemeral", 0, &v->pub.ephemeral, err);
    if (rc == 0)
        rc = sbx_json_get_bool(o, "secret", 0, &secret, err);
    if (rc == 0)
        rc = sbx_json_get_text(o, "env", 0, &host, NULL, err);
    if (rc)
        goto out;
    if (desc && !v->description)
        v->description = sbx_xstrdup(desc);
    json_t *inner = json_object_get(o, "value");
    if (inner && json_is_object(inner) && !nested && !type) {
        rc = parse_env_value(v, inner, 1, err);
        goto out;
    }
    if (inner && !json_is_null(inner)) {
        if (!json_is_string(inner)) {
            rc = sbx_error_set(err, SBX_E_INVAL, 0, "field 'value' must be a string, not %s",
                               sbx_json_typename(inner));
            goto out;
        }
        val = json_string_value(inner);
        vlen = json_string_length(inner);
        if ((rc = check_env_value(val, vlen, err)))
            goto out;
    }
    if (type && strcmp(type, "str") != 0 && strcmp(type, "secret") != 0) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "unknown value type '%s' (known: str, secret)",
                           type);
        goto out;
    }
    if (type && strcmp(type, "secret") == 0)
        secret = 1;
    if (host) {
        if (!secret) {
            rc = sbx_error_set(err, SBX_E_INVAL, 0, "field 'env' needs \"type\": \"secret\"");
            goto out;
        }
        if (val) {
            rc = sbx_error_set(err, SBX_E_INVAL, 0, "give 'value' or 'env', not both");
            goto out;
        }
        if (!sbx__manifest_valid_env_name(host, strlen(host))) {
            rc = sbx_error_set(err, SBX_E_INVAL, 0,
                               "field 'env': '%s' is not a valid variable name", host);
            goto out;
        }
        v->host_env = sbx_xstrdup(host);
        goto out;
    }
    if (!val) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "missing required field 'value'");
        goto out;
    }
    if (secret)
        v->secret = sbx_secret_new(v->name, val, vlen);
    else
        v->value = sbx_xstrdup(val);
out:
    json_decref(o);
    return rc;
}

int sbx__manifest_parse_environment(struct sbx_manifest *m, const json_t *doc,
                                    struct sbx_error *err)
{
    json_t *envj = NULL;
    int rc = sbx_json_get_object(doc, "environment", 0, &envj, err);
    if (rc < 0 || !envj)
        return rc;
    /* The Python SDK writes {"value": {NAME: ...}}. A lone variable named "value" whose value
     * is an object spelled with value-object fields ({"type": ..., "env": ...}) is not that. */
    json_t *wrapped = json_object_get(envj, "value");
    if (json_object_size(envj) == 1 && wrapped && json_is_object(wrapped)) {
        static const char *const value_keys[] = {"type",        "value",     "secret", "env",
                                                 "description", "ephemeral", NULL};
        int looks_like_value = 0;
        for (size_t i = 0; value_keys[i]; i++)
            looks_like_value |= json_object_get(wrapped, value_keys[i]) != NULL;
        if (!looks_like_value)
            envj = wrapped;
    }
    const char *k;
    size_t kl;
    json_t *v;
    json_object_keylen_foreach((json_t *)envj, k, kl, v)
    {
        if (!sbx__manifest_valid_env_name(k, kl)) {
            char q[300];
            sbx__manifest_quote_name(k, kl, q, sizeof(q));
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "environment '%s': not a valid variable name "
                                 "([A-Za-z_][A-Za-z0-9_]*)",
                                 q);
        }
        struct env *e = sbx_xcalloc(1, sizeof(*e));
        e->name = sbx_xstrdup(k);
        rc = parse_env_value(e, v, 0, err);
        if (rc) {
            sbx__manifest_env_free(e);
            sbx_error_prefix(err, "environment '%s'", k);
            return rc;
        }
        sbx__manifest_env_put(m, e);
    }
    return 0;
}

/* A user: "name" or {"name": "name"}. */
int sbx_manifest_set_env(struct sbx_manifest *m, const char *name, const char *value, int flags,
                         struct sbx_error *err)
{
    if (!sbx__manifest_valid_env_name(name, strlen(name)))
        return sbx_error_set(
                err, SBX_E_INVAL, 0,
                "environment '%s': not a valid variable name ([A-Za-z_][A-Za-z0-9_]*)",
                strlen(name) < 200 && !sbx_text_has_control(name, strlen(name)) ? name : "...");
    int rc = check_env_value(value, strlen(value), err);
    if (rc == 0 && (flags & SBX_MANIFEST_ENV_HOST) &&
        !sbx__manifest_valid_env_name(value, strlen(value)))
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not a valid variable name",
                           strlen(value) < 200 ? value : "...");
    if (rc) {
        sbx_error_prefix(err, "environment '%s'", name);
        return rc;
    }
    struct env *v = sbx_xcalloc(1, sizeof(*v));
    v->name = sbx_xstrdup(name);
    v->pub.ephemeral = !!(flags & SBX_MANIFEST_ENV_EPHEMERAL);
    if (flags & SBX_MANIFEST_ENV_HOST)
        v->host_env = sbx_xstrdup(value);
    else if (flags & SBX_MANIFEST_ENV_SECRET)
        v->secret = sbx_secret_new(name, value, strlen(value));
    else
        v->value = sbx_xstrdup(value);
    sbx__manifest_env_put(m, v);
    return 0;
}
