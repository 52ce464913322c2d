/* The Docker provider's declared options (sbx/provider.h) and how checked ones become struct
 * sbx_docker_options; the engine it finds unconfigured. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "providers/docker/options.h"
#include "sbx/docker.h"
#include "sbx/json.h"
#include "sbx/provider.h"

#define DEFAULT_SOCKET "/var/run/docker.sock"

const struct sbx_provider_option sbx__dk_options[] = {
        {.key = "image",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_STATE | SBX_OPTION_REQUIRED,
         .arg = "IMAGE",
         .help = "the container's image, one the engine already has: sbx never pulls",
         .flag = "image"},
        {.key = "host",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_LOCATOR,
         .arg = "URL",
         .help = "the engine: its socket, unix:///PATH or /PATH, or tcp://HOST:PORT for a remote "
                 "one (default $DOCKER_HOST, else /var/run/docker.sock)",
         .flag = "docker-host"},
        {.key = "tls_ca",
         .type = SBX_OPTION_PATH,
         .flags = SBX_OPTION_LOCATOR | SBX_OPTION_TRUSTED,
         .arg = "FILE",
         .help = "a tcp:// engine's CA certificate, PEM (default with $DOCKER_TLS_VERIFY: "
                 "$DOCKER_CERT_PATH/ca.pem)",
         .flag = "docker-tls-ca"},
        {.key = "tls_cert",
         .type = SBX_OPTION_PATH,
         .flags = SBX_OPTION_LOCATOR | SBX_OPTION_TRUSTED,
         .arg = "FILE",
         .help = "the client certificate a tcp:// engine trusts, PEM (dockerd --tlsverify)",
         .flag = "docker-tls-cert"},
        {.key = "tls_key",
         .type = SBX_OPTION_PATH,
         .flags = SBX_OPTION_LOCATOR | SBX_OPTION_TRUSTED,
         .arg = "FILE",
         .help = "the client certificate's private key, PEM",
         .flag = "docker-tls-key"},
        {.key = "user",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_STATE,
         .arg = "USER",
         .help = "the user commands run as when the manifest names none (default the image's)",
         .flag = "user"},
        {.key = "network",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_STATE,
         .arg = "none|bridge|host",
         .help = "none (the default): loopback only; bridge: the engine's default network; "
                 "host: the host's network (DANGEROUS)",
         .flag = "network",
         .danger = "host",
         .warning = "network '%s' is DANGEROUS: the sandbox's commands reach everything this "
                    "host can (local services, metadata endpoints)"},
        {.key = "memory",
         .type = SBX_OPTION_SIZE,
         .flags = SBX_OPTION_STATE,
         .arg = "SIZE",
         .help = "memory limit, such as 512M (default 2G)",
         .flag = "memory"},
        {.key = "pids",
         .type = SBX_OPTION_INTEGER,
         .flags = SBX_OPTION_STATE,
         .arg = "N",
         .help = "most processes at once (default 1024)",
         .flag = "pids"},
        {.key = "cpus",
         .type = SBX_OPTION_CPUS,
         .flags = SBX_OPTION_STATE | SBX_OPTION_NONE_OK,
         .arg = "N|none",
         .help = "CPU limit, such as 1.5 (default half the host's; none: no limit)",
         .flag = "cpus"},
        {.key = "disk",
         .type = SBX_OPTION_SIZE,
         .flags = SBX_OPTION_STATE | SBX_OPTION_NONE_OK,
         .arg = "SIZE|none",
         .help = "size limit of the container's writable layer (default 8G; enforced where the "
                 "engine's storage driver can)",
         .flag = "disk",
         .min = (long long)SBX_DOCKER_DISK_MIN,
         .max = (long long)SBX_DOCKER_DISK_MAX},
        {.key = "ports",
         .type = SBX_OPTION_PORT,
         .flags = SBX_OPTION_STATE | SBX_OPTION_LIST,
         .arg = "N",
         .help = "a port of the sandbox the host may reach (repeatable; none given: any)",
         .flag = "port"},
        {.key = "cap_add",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_STATE | SBX_OPTION_LIST | SBX_OPTION_TRUSTED,
         .arg = "CAP",
         .help = "a capability beyond the engine's default set (with --allow-cap-add)",
         .flag = "cap-add"},
        {.key = "allow_cap_add",
         .type = SBX_OPTION_BOOL,
         .flags = SBX_OPTION_TRUSTED,
         .help = "accept cap_add (each capability widens what the sandbox can do to the host)",
         .flag = "allow-cap-add"},
        {.key = NULL},
};

/* struct sbx_docker_options with room for what it points to. */
struct holder {
    struct sbx_docker_options o;
    const char *caps[SBX_DOCKER_MAX_CAPS];
    int ports[SBX_DOCKER_MAX_EXPOSED_PORTS];
};

static int from_json(const json_t *opts, struct holder *h, struct sbx_error *err)
{
    static const struct {
        const char *name;
        enum sbx_docker_network mode;
    } modes[] = {{"none", SBX_DOCKER_NETWORK_NONE},
                 {"bridge", SBX_DOCKER_NETWORK_BRIDGE},
                 {"host", SBX_DOCKER_NETWORK_HOST}};
    const char *net = json_string_value(json_object_get(opts, "network"));
    const json_t *cpus = json_object_get(opts, "cpus"), *v;
    size_t i, k = 0;
    h->o.image = json_string_value(json_object_get(opts, "image"));
    h->o.host = json_string_value(json_object_get(opts, "host"));
    h->o.tls_ca = json_string_value(json_object_get(opts, "tls_ca"));
    h->o.tls_cert = json_string_value(json_object_get(opts, "tls_cert"));
    h->o.tls_key = json_string_value(json_object_get(opts, "tls_key"));
    h->o.user = json_string_value(json_object_get(opts, "user"));
    while (net && k < SBX_ARRAY_LEN(modes) && strcmp(modes[k].name, net) != 0)
        k++;
    if (net && k == SBX_ARRAY_LEN(modes))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "unknown docker network mode '%s' (none, bridge, host)", net);
    if (net)
        h->o.network = modes[k].mode;
    h->o.memory_bytes = (uint64_t)json_integer_value(json_object_get(opts, "memory"));
    h->o.pids = (uint64_t)json_integer_value(json_object_get(opts, "pids"));
    const json_t *disk = json_object_get(opts, "disk");
    h->o.disk_bytes =
            json_is_string(disk) ? SBX_DOCKER_LIMIT_NONE : (uint64_t)json_integer_value(disk);
    if (cpus)
        h->o.cpu_millis = json_is_string(cpus) ? SBX_DOCKER_LIMIT_NONE
                                               : (uint64_t)(json_number_value(cpus) * 1000 + 0.5);
    json_array_foreach(json_object_get(opts, "cap_add"), i, v)
    {
        if (h->o.n_cap_add >= SBX_DOCKER_MAX_CAPS)
            return sbx_error_set(err, SBX_E_INVAL, 0, "more than %d --cap-add",
                                 SBX_DOCKER_MAX_CAPS);
        h->caps[h->o.n_cap_add++] = json_string_value(v);
    }
    h->o.cap_add = h->caps;
    h->o.allow_cap_add = json_is_true(json_object_get(opts, "allow_cap_add"));
    json_array_foreach(json_object_get(opts, "ports"), i, v)
    {
        if (h->o.n_exposed_ports >= SBX_DOCKER_MAX_EXPOSED_PORTS)
            return sbx_error_set(err, SBX_E_INVAL, 0, "more than %d ports",
                                 SBX_DOCKER_MAX_EXPOSED_PORTS);
        h->ports[h->o.n_exposed_ports++] = (int)json_integer_value(v);
    }
    h->o.exposed_ports = h->ports;
    return 0;
}

int sbx__dk_options_check(const json_t *options, struct sbx_error *err)
{
    struct holder h = {0};
    return from_json(options, &h, err);
}

extern const struct sbx__provider_def sbx__provider_docker;

int sbx__dk_client_new_json(const json_t *options, struct sbx_client **out, struct sbx_error *err)
{
    struct holder h = {0};
    int rc = from_json(options, &h, err);
    return rc < 0 ? rc : sbx__provider_docker.client_new(&h.o, out, err);
}

int sbx__dk_probe(json_t **out, struct sbx_error *err)
{
    const char *env = getenv("DOCKER_HOST");
    struct stat st;
    if (env && env[0]) {
        *out = json_pack("{s:s}", "host", env);
        return 0;
    }
    if (stat(DEFAULT_SOCKET, &st) == 0 && S_ISSOCK(st.st_mode)) {
        *out = json_pack("{s:s}", "host", "unix://" DEFAULT_SOCKET);
        return 0;
    }
    return sbx_error_set(err, SBX_E_NOTFOUND, 0,
                         "no docker engine configured ($DOCKER_HOST, " DEFAULT_SOCKET ")");
}
