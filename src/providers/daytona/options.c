/* The daytona provider's declared options (sbx/provider.h), named as the reference SDK's
 * Daytona client names them (sandbox_snapshot_name, env_vars, name, create_timeout,
 * start_timeout, auto_stop_interval, exposed_ports, exposed_port_url_ttl_s, resources as cpu,
 * memory, disk), and where the service is: the key by reference (DAYTONA_API_KEY), the API URL
 * as Daytona's own SDK reads it (DAYTONA_API_URL), the organization a JWT needs
 * (DAYTONA_ORGANIZATION_ID). */
#include <stdlib.h>
#include <string.h>

#include "providers/daytona/daytona.h"
#include "sbx/json.h"

const struct sbx_provider_option sbx__dtn_options[] = {
        {.key = "sandbox_snapshot_name",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_STATE,
         .arg = "NAME",
         .help = "the Daytona snapshot sandboxes start from (default the service's default)"},
        {.key = "name",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_STATE,
         .arg = "NAME",
         .help = "the sandbox's name at the service (default its id)"},
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
        {.key = "create_timeout",
         .type = SBX_OPTION_INTEGER,
         .flags = SBX_OPTION_STATE,
         .arg = "SECONDS",
         .help = "how long a new sandbox may take to start (default 60)",
         .min = 1,
         .max = 3600},
        {.key = "start_timeout",
         .type = SBX_OPTION_INTEGER,
         .flags = SBX_OPTION_STATE,
         .arg = "SECONDS",
         .help = "how long a stopped sandbox may take to start again (default 60)",
         .min = 1,
         .max = 3600},
        {.key = "auto_stop_interval",
         .type = SBX_OPTION_INTEGER,
         .flags = SBX_OPTION_STATE,
         .arg = "MINUTES",
         .help = "minutes without activity before the service stops the sandbox (default 0: "
                 "never)",
         .min = 0,
         .max = 525600},
        {.key = "cpu",
         .type = SBX_OPTION_INTEGER,
         .flags = SBX_OPTION_STATE,
         .arg = "N",
         .help = "CPUs of the sandbox (resources.cpu; default the service's)",
         .min = 1,
         .max = 1024},
        {.key = "memory_gib",
         .type = SBX_OPTION_INTEGER,
         .flags = SBX_OPTION_STATE,
         .arg = "GIB",
         .help = "memory of the sandbox in GiB (resources.memory; default the service's)",
         .min = 1,
         .max = 4096},
        {.key = "disk_gib",
         .type = SBX_OPTION_INTEGER,
         .flags = SBX_OPTION_STATE,
         .arg = "GIB",
         .help = "disk of the sandbox in GiB (resources.disk; default the service's)",
         .min = 1,
         .max = 65536},
        {.key = "exposed_ports",
         .type = SBX_OPTION_PORT,
         .flags = SBX_OPTION_STATE | SBX_OPTION_LIST,
         .arg = "N",
         .help = "a port whose signed preview URL resolve_port gives (repeatable; none given: "
                 "any)"},
        {.key = "exposed_port_url_ttl_s",
         .type = SBX_OPTION_INTEGER,
         .flags = SBX_OPTION_STATE,
         .arg = "SECONDS",
         .help = "how long a port's signed preview URL is valid (default 3600)",
         .min = 1,
         .max = 86400},
        {.key = "workspace_root",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_STATE,
         .arg = "DIR",
         .help = "the workspace in the sandbox when the manifest keeps the default root (default "
                 "/home/daytona/workspace)"},
        {.key = "api_key",
         .type = SBX_OPTION_SECRET,
         .flags = SBX_OPTION_TRUSTED,
         .arg = "env:VAR|file:/PATH",
         .help = "where the Daytona API key (or a JWT, with organization_id) is (default "
                 "env:DAYTONA_API_KEY); never the key itself"},
        {.key = "organization_id",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_TRUSTED | SBX_OPTION_LOCATOR,
         .arg = "ID",
         .help = "the organization a JWT acts for (default $DAYTONA_ORGANIZATION_ID)"},
        {.key = "api_url",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_TRUSTED | SBX_OPTION_LOCATOR,
         .arg = "URL",
         .help = "the Daytona API (default $DAYTONA_API_URL, else https://app.daytona.io/api)"},
        {.key = "ca_file",
         .type = SBX_OPTION_PATH,
         .flags = SBX_OPTION_TRUSTED | SBX_OPTION_LOCATOR,
         .arg = "/PATH",
         .help = "a CA bundle to check the service's HTTPS certificates with (default the "
                 "system's)"},
        {.key = NULL},
};

static int64_t int_or(const json_t *o, const char *key, int64_t dflt)
{
    const json_t *v = json_object_get(o, key);
    return json_is_integer(v) ? (int64_t)json_integer_value(v) : dflt;
}

int sbx__dtn_options_parse(const json_t *o, struct sbx__dtn_opts *out, struct sbx_error *err)
{
    memset(out, 0, sizeof(*out));
    out->snapshot = json_string_value(json_object_get(o, "sandbox_snapshot_name"));
    out->name = json_string_value(json_object_get(o, "name"));
    out->create_timeout_s = int_or(o, "create_timeout", 60);
    out->start_timeout_s = int_or(o, "start_timeout", 60);
    out->auto_stop = int_or(o, "auto_stop_interval", 0);
    out->url_ttl_s = int_or(o, "exposed_port_url_ttl_s", 3600);
    out->cpu = int_or(o, "cpu", 0);
    out->memory = int_or(o, "memory_gib", 0);
    out->disk = int_or(o, "disk_gib", 0);
    out->root = json_string_value(json_object_get(o, "workspace_root"));
    if (out->root && out->root[0] != '/')
        return sbx_error_set(err, SBX_E_INVAL, 0, "workspace_root '%s' is not absolute", out->root);
    out->key_ref = json_object_get(o, "api_key");
    out->api_url = json_string_value(json_object_get(o, "api_url"));
    out->org = json_string_value(json_object_get(o, "organization_id"));
    out->ca_file = json_string_value(json_object_get(o, "ca_file"));
    if (out->api_url && strncmp(out->api_url, "https://", 8) != 0 &&
        strncmp(out->api_url, "http://", 7) != 0)
        return sbx_error_set(err, SBX_E_INVAL, 0, "api_url '%s' is not an http(s) URL",
                             out->api_url);
    if (out->org && strpbrk(out->org, "\r\n"))
        return sbx_error_set(err, SBX_E_INVAL, 0, "organization_id holds a line break");
    size_t i;
    const json_t *v;
    json_array_foreach(json_object_get(o, "exposed_ports"), i, v)
    {
        if (out->n_ports >= SBX__DTN_MAX_PORTS)
            return sbx_error_set(err, SBX_E_TOOBIG, 0, "more than %d exposed ports",
                                 SBX__DTN_MAX_PORTS);
        out->ports[out->n_ports++] = (int)json_integer_value(v);
    }
    int rc = sbx__option_pairs(json_object_get(o, "env_vars"), "env_vars", &out->env, err);
    if (rc == 0 &&
        (rc = sbx__option_pairs(json_object_get(o, "labels"), "labels", &out->labels, err)) < 0) {
        json_decref(out->env);
        out->env = NULL;
    }
    return rc;
}

void sbx__dtn_opts_release(struct sbx__dtn_opts *o)
{
    json_decref(o->env);
    json_decref(o->labels);
    o->env = o->labels = NULL;
}

int sbx__dtn_options_check(const json_t *options, struct sbx_error *err)
{
    struct sbx__dtn_opts o;
    int rc = sbx__dtn_options_parse(options, &o, err);
    if (rc == 0)
        sbx__dtn_opts_release(&o);
    return rc;
}
