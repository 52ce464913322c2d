/* The e2b provider's declared options (sbx/provider.h), named as the reference SDK's E2B
 * client names them (template, timeout, envs, metadata, secure, allow_internet_access,
 * on_timeout, exposed_ports), and where the service is: the API key by reference
 * (E2B_API_KEY), the URLs and domain as E2B's own SDK reads them (E2B_API_URL,
 * E2B_SANDBOX_URL, E2B_DOMAIN). */
#include <stdlib.h>
#include <string.h>

#include "providers/e2b/options.h"
#include "sbx/json.h"

const struct sbx_provider_option sbx__e2b_options[] = {
        {.key = "template",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_STATE,
         .arg = "NAME",
         .help = "the E2B template (or a snapshot id) sandboxes start from (default base)",
         .flag = "template"},
        {.key = "timeout",
         .type = SBX_OPTION_INTEGER,
         .flags = SBX_OPTION_STATE,
         .arg = "SECONDS",
         .help = "how long a sandbox lives without being reached (default 300; at most 86400)",
         .min = 1,
         .max = 86400},
        {.key = "on_timeout",
         .type = SBX_OPTION_CHOICE,
         .flags = SBX_OPTION_STATE,
         .arg = "pause|kill",
         .help = "what the service does with a sandbox whose timeout passed (default pause: it "
                 "can be started again)"},
        {.key = "envs",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_STATE | SBX_OPTION_LIST,
         .arg = "KEY=VALUE",
         .help = "an environment variable of every command, under the manifest's (repeatable)"},
        {.key = "metadata",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_STATE | SBX_OPTION_LIST,
         .arg = "KEY=VALUE",
         .help = "a metadata entry of the sandbox at the service (repeatable)"},
        {.key = "secure",
         .type = SBX_OPTION_BOOL,
         .flags = SBX_OPTION_STATE,
         .help = "envd asks for the sandbox's access token (default true)"},
        {.key = "allow_internet_access",
         .type = SBX_OPTION_BOOL,
         .flags = SBX_OPTION_STATE,
         .help = "the sandbox reaches the internet (default true, as E2B's)"},
        {.key = "exposed_ports",
         .type = SBX_OPTION_PORT,
         .flags = SBX_OPTION_STATE | SBX_OPTION_LIST,
         .arg = "N",
         .help = "a port whose URL resolve_port gives (repeatable; none given: any)"},
        {.key = "workspace_root",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_STATE,
         .arg = "DIR",
         .help = "the workspace in the sandbox when the manifest keeps the default root (default "
                 "/home/user, E2B's home)"},
        {.key = "api_key",
         .type = SBX_OPTION_SECRET,
         .flags = SBX_OPTION_TRUSTED,
         .arg = "env:VAR|file:/PATH",
         .help = "where the E2B API key is (default env:E2B_API_KEY); never the key itself"},
        {.key = "api_url",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_TRUSTED | SBX_OPTION_LOCATOR,
         .arg = "URL",
         .help = "the E2B API (default $E2B_API_URL, else https://api.$E2B_DOMAIN)"},
        {.key = "sandbox_url",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_TRUSTED | SBX_OPTION_LOCATOR,
         .arg = "URL",
         .help = "one envd URL for every sandbox (default $E2B_SANDBOX_URL, else "
                 "https://49983-ID.DOMAIN)"},
        {.key = "domain",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_TRUSTED | SBX_OPTION_LOCATOR,
         .arg = "DOMAIN",
         .help = "the service's domain (default $E2B_DOMAIN, else e2b.app)"},
        {.key = "ca_file",
         .type = SBX_OPTION_PATH,
         .flags = SBX_OPTION_TRUSTED | SBX_OPTION_LOCATOR,
         .arg = "/PATH",
         .help = "a CA bundle to check the service's HTTPS certificates with (default the "
                 "system's)"},
        {.key = NULL},
};

static int check_url(const char *url, const char *what, struct sbx_error *err)
{
    if (url && strncmp(url, "https://", 8) != 0 && strncmp(url, "http://", 7) != 0)
        return sbx_error_set(err, SBX_E_INVAL, 0, "%s '%s' is not an http(s) URL", what, url);
    return 0;
}

int sbx__e2b_options_parse(const json_t *o, struct sbx__e2b_opts *out, struct sbx_error *err)
{
    memset(out, 0, sizeof(*out));
    const json_t *v;
    out->template = json_string_value(json_object_get(o, "template"));
    out->timeout_s = json_integer_value(json_object_get(o, "timeout"));
    const char *ot = json_string_value(json_object_get(o, "on_timeout"));
    if (ot && strcmp(ot, "pause") != 0 && strcmp(ot, "kill") != 0)
        return sbx_error_set(err, SBX_E_INVAL, 0, "on_timeout is pause or kill, not '%s'", ot);
    out->auto_pause = !ot || strcmp(ot, "pause") == 0;
    v = json_object_get(o, "secure");
    out->secure = !v || json_is_true(v);
    v = json_object_get(o, "allow_internet_access");
    out->internet = !v || json_is_true(v);
    out->root = json_string_value(json_object_get(o, "workspace_root"));
    if (out->root && out->root[0] != '/')
        return sbx_error_set(err, SBX_E_INVAL, 0, "workspace_root '%s' is not absolute", out->root);
    out->key_ref = json_object_get(o, "api_key");
    out->api_url = json_string_value(json_object_get(o, "api_url"));
    out->sandbox_url = json_string_value(json_object_get(o, "sandbox_url"));
    out->domain = json_string_value(json_object_get(o, "domain"));
    out->ca_file = json_string_value(json_object_get(o, "ca_file"));
    int rc;
    if ((rc = check_url(out->api_url, "api_url", err)) < 0 ||
        (rc = check_url(out->sandbox_url, "sandbox_url", err)) < 0)
        return rc;
    size_t i;
    json_array_foreach(json_object_get(o, "exposed_ports"), i, v)
    {
        if (out->n_ports >= SBX__E2B_MAX_PORTS)
            return sbx_error_set(err, SBX_E_TOOBIG, 0, "more than %d exposed ports",
                                 SBX__E2B_MAX_PORTS);
        out->ports[out->n_ports++] = (int)json_integer_value(v);
    }
    if ((rc = sbx__option_pairs(json_object_get(o, "envs"), "envs", &out->envs, err)) < 0)
        return rc;
    if ((rc = sbx__option_pairs(json_object_get(o, "metadata"), "metadata", &out->metadata, err)) <
        0) {
        json_decref(out->envs);
        out->envs = NULL;
    }
    return rc;
}

void sbx__e2b_opts_release(struct sbx__e2b_opts *o)
{
    json_decref(o->envs);
    json_decref(o->metadata);
    o->envs = o->metadata = NULL;
}

int sbx__e2b_options_check(const json_t *options, struct sbx_error *err)
{
    struct sbx__e2b_opts o;
    int rc = sbx__e2b_options_parse(options, &o, err);
    if (rc == 0)
        sbx__e2b_opts_release(&o);
    return rc;
}
