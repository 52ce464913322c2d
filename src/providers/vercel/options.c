/* The vercel provider's declared options (sbx/provider.h), named as the reference SDK's Vercel
 * client names them (runtime, timeout_ms, env, exposed_ports, workspace_persistence,
 * snapshot_expiration_ms, project_id, team_id, resources' vcpus), and where the service is:
 * the token by reference (VERCEL_TOKEN), the team and project as Vercel's own tools read them
 * (VERCEL_TEAM_ID, VERCEL_PROJECT_ID). Vercel's npm client has no setting for its API's URL:
 * api_url (or sbx's own $VERCEL_API_URL) is sbx's. */
#include <stdlib.h>
#include <string.h>

#include "providers/vercel/vercel.h"
#include "sbx/json.h"

const struct sbx_provider_option sbx__vercel_options[] = {
        {.key = "runtime",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_STATE,
         .arg = "NAME",
         .help = "the sandbox's runtime image (node22, node24, python3.13; default the "
                 "service's)"},
        {.key = "timeout_ms",
         .type = SBX_OPTION_INTEGER,
         .flags = SBX_OPTION_STATE,
         .arg = "MS",
         .help = "how long a session runs before the service stops it (default 270000)",
         .min = 1000,
         .max = 18000000},
        {.key = "vcpus",
         .type = SBX_OPTION_INTEGER,
         .flags = SBX_OPTION_STATE,
         .arg = "N",
         .help = "virtual CPUs of the sandbox (resources.vcpus; default the service's)",
         .min = 1,
         .max = 8},
        {.key = "env",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_STATE | SBX_OPTION_LIST,
         .arg = "KEY=VALUE",
         .help = "an environment variable of every command, under the manifest's (repeatable)"},
        {.key = "exposed_ports",
         .type = SBX_OPTION_PORT,
         .flags = SBX_OPTION_STATE | SBX_OPTION_LIST,
         .arg = "N",
         .help = "a port the service routes to (a subdomain each; at most 4, repeatable)"},
        {.key = "workspace_persistence",
         .type = SBX_OPTION_CHOICE,
         .flags = SBX_OPTION_STATE,
         .arg = "tar|snapshot",
         .help = "what sbx sandbox stop keeps: tar (the session stops, the sandbox's disk "
                 "stays) or snapshot (a native snapshot is taken, which stops it)"},
        {.key = "snapshot_expiration_ms",
         .type = SBX_OPTION_INTEGER,
         .flags = SBX_OPTION_STATE,
         .arg = "MS",
         .help = "how long a native snapshot is kept (default the service's)",
         .min = 1,
         .max = INT64_C(31536000000)},
        {.key = "source_snapshot",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_STATE,
         .arg = "ID",
         .help = "a native snapshot new sandboxes start from"},
        {.key = "workspace_root",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_STATE,
         .arg = "DIR",
         .help = "the workspace when the manifest keeps the default root (default "
                 "/vercel/sandbox)"},
        {.key = "token",
         .type = SBX_OPTION_SECRET,
         .flags = SBX_OPTION_TRUSTED,
         .arg = "env:VAR|file:/PATH",
         .help = "where the Vercel token is (default env:VERCEL_TOKEN); never the token itself"},
        {.key = "team_id",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_TRUSTED | SBX_OPTION_LOCATOR,
         .arg = "ID",
         .help = "the Vercel team (default $VERCEL_TEAM_ID)"},
        {.key = "project_id",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_TRUSTED | SBX_OPTION_LOCATOR,
         .arg = "ID",
         .help = "the Vercel project sandboxes belong to (default $VERCEL_PROJECT_ID)"},
        {.key = "api_url",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_TRUSTED | SBX_OPTION_LOCATOR,
         .arg = "URL",
         .help = "the Vercel API (default $VERCEL_API_URL, else https://vercel.com/api)"},
        {.key = "ca_file",
         .type = SBX_OPTION_PATH,
         .flags = SBX_OPTION_TRUSTED | SBX_OPTION_LOCATOR,
         .arg = "/PATH",
         .help = "a CA bundle to check the service's HTTPS certificate with (default the "
                 "system's)"},
        {.key = NULL},
};

int sbx__vercel_options_parse(const json_t *o, struct sbx__vercel_opts *out, struct sbx_error *err)
{
    memset(out, 0, sizeof(*out));
    out->runtime = json_string_value(json_object_get(o, "runtime"));
    out->timeout_ms = json_integer_value(json_object_get(o, "timeout_ms"));
    out->vcpus = json_integer_value(json_object_get(o, "vcpus"));
    out->snapshot_expiration_ms = json_integer_value(json_object_get(o, "snapshot_expiration_ms"));
    out->persistence = json_string_value(json_object_get(o, "workspace_persistence"));
    if (out->persistence && strcmp(out->persistence, "tar") != 0 &&
        strcmp(out->persistence, "snapshot") != 0)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "workspace_persistence is tar or snapshot, not '%s'",
                             out->persistence);
    out->source_snapshot = json_string_value(json_object_get(o, "source_snapshot"));
    out->root = json_string_value(json_object_get(o, "workspace_root"));
    if (out->root && out->root[0] != '/')
        return sbx_error_set(err, SBX_E_INVAL, 0, "workspace_root '%s' is not absolute", out->root);
    out->tok_ref = json_object_get(o, "token");
    out->api_url = json_string_value(json_object_get(o, "api_url"));
    if (out->api_url && strncmp(out->api_url, "https://", 8) != 0 &&
        strncmp(out->api_url, "http://", 7) != 0)
        return sbx_error_set(err, SBX_E_INVAL, 0, "api_url '%s' is not an http(s) URL",
                             out->api_url);
    out->team = json_string_value(json_object_get(o, "team_id"));
    out->project = json_string_value(json_object_get(o, "project_id"));
    out->ca_file = json_string_value(json_object_get(o, "ca_file"));
    size_t i;
    const json_t *v;
    json_array_foreach(json_object_get(o, "exposed_ports"), i, v)
    {
        if (out->n_ports >= SBX__VERCEL_MAX_PORTS)
            return sbx_error_set(err, SBX_E_TOOBIG, 0,
                                 "more than %d exposed ports (the service routes at most %d)",
                                 SBX__VERCEL_MAX_PORTS, SBX__VERCEL_MAX_PORTS);
        out->ports[out->n_ports++] = (int)json_integer_value(v);
    }
    return sbx__option_pairs(json_object_get(o, "env"), "env", &out->env, err);
}

void sbx__vercel_opts_release(struct sbx__vercel_opts *o)
{
    json_decref(o->env);
    o->env = NULL;
}

int sbx__vercel_options_check(const json_t *options, struct sbx_error *err)
{
    struct sbx__vercel_opts o;
    int rc = sbx__vercel_options_parse(options, &o, err);
    sbx__vercel_opts_release(&o);
    return rc;
}
