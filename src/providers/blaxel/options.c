/* The blaxel provider's declared options (named as the reference SDK's Blaxel client names
 * them: image, memory, region, env_vars, labels, ttl, name, pause_on_exit,
 * exposed_port_public, exposed_port_url_ttl_s; then sbx's exposed_ports and the trusted ones
 * that say where the service is and where the key is), their checks, and the service's
 * configuration made from them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "providers/blaxel/blaxel.h"
#include "sbx/json.h"

const struct sbx_provider_option sbx__bl_options[] = {
        {.key = "image",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_STATE,
         .arg = "IMAGE",
         .help = "the image sandboxes start from (default blaxel/base-image:latest)",
         .flag = "image"},
        {.key = "memory",
         .type = SBX_OPTION_SIZE,
         .flags = SBX_OPTION_STATE,
         .arg = "SIZE",
         .help = "the sandbox's memory, such as 4G (default the service's, 4G), in whole MiB",
         .flag = "memory"},
        {.key = "region",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_STATE,
         .arg = "REGION",
         .help = "the region sandboxes are made in, such as us-pdx-1 (default $BL_REGION)"},
        {.key = "name",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_STATE,
         .arg = "NAME",
         .help = "the sandbox's name at the service (default sbx- and a random suffix)"},
        {.key = "env_vars",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_STATE | SBX_OPTION_LIST,
         .arg = "KEY=VALUE",
         .help = "an environment variable of the sandbox, under the manifest's (repeatable)"},
        {.key = "labels",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_STATE | SBX_OPTION_LIST,
         .arg = "KEY=VALUE",
         .help = "a label of the sandbox at the service (repeatable)"},
        {.key = "ttl",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_STATE,
         .arg = "DURATION",
         .help = "how long the service keeps the sandbox, such as 24h (default the service's)"},
        {.key = "pause_on_exit",
         .type = SBX_OPTION_BOOL,
         .flags = SBX_OPTION_STATE,
         .help = "closing a session without deleting keeps the sandbox (default true: the "
                 "service puts it on standby); false deletes it"},
        {.key = "exposed_ports",
         .type = SBX_OPTION_PORT,
         .flags = SBX_OPTION_STATE | SBX_OPTION_LIST,
         .arg = "N",
         .help = "a port whose preview URL resolve_port gives (repeatable; none given: any)"},
        {.key = "exposed_port_public",
         .type = SBX_OPTION_BOOL,
         .flags = SBX_OPTION_STATE,
         .help = "a port's preview is public (default true); false: private, its URL carries a "
                 "token"},
        {.key = "exposed_port_url_ttl_s",
         .type = SBX_OPTION_INTEGER,
         .flags = SBX_OPTION_STATE,
         .arg = "SECONDS",
         .help = "how long a private preview's token lasts (default 3600)",
         .min = 60,
         .max = 30 * 86400},
        {.key = "api_key",
         .type = SBX_OPTION_SECRET,
         .flags = SBX_OPTION_TRUSTED,
         .arg = "env:VAR|file:/PATH",
         .help = "where the Blaxel API key is (default env:BL_API_KEY); never the key"},
        {.key = "workspace",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_TRUSTED | SBX_OPTION_LOCATOR,
         .arg = "WORKSPACE",
         .help = "the Blaxel workspace (default $BL_WORKSPACE)"},
        {.key = "api_url",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_TRUSTED | SBX_OPTION_LOCATOR,
         .arg = "URL",
         .help = "the Blaxel API (default $BL_API_URL, else https://api.blaxel.ai/v0)"},
        {.key = "run_url",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_TRUSTED | SBX_OPTION_LOCATOR,
         .arg = "URL",
         .help = "where sandboxes are reached (default $BL_RUN_URL, else https://run.blaxel.ai)"},
        {.key = "ca_file",
         .type = SBX_OPTION_PATH,
         .flags = SBX_OPTION_TRUSTED | SBX_OPTION_LOCATOR,
         .arg = "/PATH",
         .help = "a CA bundle to check the service's HTTPS certificates with (default the "
                 "system's)"},
        {.key = NULL},
};

static int check_url(const json_t *o, const char *key, struct sbx_error *err)
{
    const char *url = json_string_value(json_object_get(o, key));
    if (url && strncmp(url, "https://", 8) != 0 && strncmp(url, "http://", 7) != 0)
        return sbx_error_set(err, SBX_E_INVAL, 0, "%s '%s' is not an http(s) URL", key, url);
    return 0;
}

int sbx__bl_check_options(const json_t *o, struct sbx_error *err)
{
    int rc;
    if ((rc = check_url(o, "api_url", err)) < 0 || (rc = check_url(o, "run_url", err)) < 0)
        return rc;
    const char *name = json_string_value(json_object_get(o, "name"));
    if (name && !sbx__bl_valid_name(name))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "name '%s' is not a Blaxel sandbox name (lowercase letters, digits "
                             "and '-', starting with a letter, at most %d)",
                             name, SBX__BL_NAME_MAX);
    const json_t *mem = json_object_get(o, "memory");
    if (mem && json_integer_value(mem) < ((json_int_t)1 << 20))
        return sbx_error_set(err, SBX_E_INVAL, 0, "memory must be at least 1M");
    json_t *a = NULL;
    rc = sbx__option_pairs(json_object_get(o, "env_vars"), "env_vars", &a, err);
    json_decref(a);
    a = NULL;
    if (rc == 0)
        rc = sbx__option_pairs(json_object_get(o, "labels"), "labels", &a, err);
    json_decref(a);
    return rc;
}

/* The option's value, else the environment variable's, else def (may be NULL). */
static char *pick(const json_t *o, const char *key, const char *var, const char *def)
{
    const char *v = json_string_value(json_object_get(o, key));
    const char *e = var ? getenv(var) : NULL;
    const char *r = v && v[0] ? v : e && e[0] ? e : def;
    return r ? sbx_xstrdup(r) : NULL;
}

static void trim_slash(char *url)
{
    size_t n = strlen(url);
    while (n > 1 && url[n - 1] == '/')
        url[--n] = '\0';
}

int sbx__bl_conf_new(const json_t *o, struct sbx__bl_conf **out, struct sbx_error *err)
{
    char *ws = pick(o, "workspace", "BL_WORKSPACE", NULL);
    if (!ws)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "no Blaxel workspace: $BL_WORKSPACE is not set (or give the blaxel "
                             "provider's workspace option)");
    struct sbx__bl_conf *cf = sbx_xcalloc(1, sizeof(*cf));
    cf->refs = 1;
    pthread_mutex_init(&cf->lock, NULL);
    cf->workspace = ws;
    cf->ws_header = sbx_xasprintf("X-Blaxel-Workspace: %s", ws);
    cf->api_url = pick(o, "api_url", "BL_API_URL", SBX__BL_API_DEFAULT);
    cf->run_url = pick(o, "run_url", "BL_RUN_URL", SBX__BL_RUN_DEFAULT);
    trim_slash(cf->api_url);
    trim_slash(cf->run_url);
    const json_t *ref = json_object_get(o, "api_key");
    cf->key_ref = ref ? json_deep_copy(ref) : json_pack("{s:s}", "env", "BL_API_KEY");
    const char *var = json_string_value(json_object_get(cf->key_ref, "env"));
    const char *file = json_string_value(json_object_get(cf->key_ref, "file"));
    cf->key_what = var ? sbx_xasprintf("$%s", var) : sbx_xasprintf("'%s'", file ? file : "?");
    cf->ca_file = pick(o, "ca_file", NULL, NULL);
    if (strpbrk(ws, "\r\n")) {
        sbx__bl_conf_unref(cf);
        return sbx_error_set(err, SBX_E_INVAL, 0, "the Blaxel workspace name has a line break");
    }
    *out = cf;
    return 0;
}
