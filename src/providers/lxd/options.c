/* The LXD provider's declared options (sbx/provider.h) and how checked ones become struct
 * sbx_lxd_options; the server it finds unconfigured. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "providers/lxd/options.h"
#include "sbx/json.h"
#include "sbx/lxd.h"
#include "sbx/provider.h"

const struct sbx_provider_option sbx__lxd_options[] = {
        {.key = "image",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_STATE | SBX_OPTION_REQUIRED,
         .arg = "IMAGE",
         .help = "the instance's image, an alias or fingerprint the server has: sbx never "
                 "downloads one",
         .flag = "image"},
        {.key = "endpoint",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_LOCATOR,
         .arg = "URL",
         .help = "the LXD server: unix:///PATH, /PATH or https://HOST[:PORT] (default "
                 "$LXD_DIR/unix.socket, else /var/lib/lxd/unix.socket)",
         .flag = "lxd-endpoint"},
        {.key = "client_cert",
         .type = SBX_OPTION_PATH,
         .flags = SBX_OPTION_LOCATOR | SBX_OPTION_TRUSTED,
         .arg = "PATH",
         .help = "https: the client certificate (PEM) the server trusts",
         .flag = "lxd-client-cert"},
        {.key = "client_key",
         .type = SBX_OPTION_PATH,
         .flags = SBX_OPTION_LOCATOR | SBX_OPTION_TRUSTED,
         .arg = "PATH",
         .help = "https: the client certificate's key (PEM file; only its path is kept)",
         .flag = "lxd-client-key"},
        {.key = "server_cert",
         .type = SBX_OPTION_PATH,
         .flags = SBX_OPTION_LOCATOR | SBX_OPTION_TRUSTED,
         .arg = "PATH",
         .help = "https: the CA or the certificate the server's must verify against (PEM)",
         .flag = "lxd-server-cert"},
        {.key = "server_pubkey",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_LOCATOR | SBX_OPTION_TRUSTED,
         .arg = "sha256//BASE64",
         .help = "https: the server's public key, pinned (any certificate names)",
         .flag = "lxd-server-pubkey"},
        {.key = "server_fingerprint",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_LOCATOR | SBX_OPTION_TRUSTED,
         .arg = "SHA256",
         .help = "https: the SHA-256 fingerprint of the server's certificate, pinned (as "
                 "`lxc remote add` shows it)",
         .flag = "lxd-server-fingerprint"},
        {.key = "project",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_LOCATOR | SBX_OPTION_STATE,
         .arg = "NAME",
         .help = "the LXD project (default: default)",
         .flag = "lxd-project"},
        {.key = "profile",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_STATE | SBX_OPTION_LIST,
         .arg = "NAME",
         .help = "a profile of new instances (repeatable; default: default)",
         .flag = "lxd-profile"},
        {.key = "target",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_STATE,
         .arg = "MEMBER|@GROUP",
         .help = "the cluster member (or @group) new instances go to (default: the cluster "
                 "places them)",
         .flag = "lxd-target"},
        {.key = "user",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_STATE,
         .arg = "USER",
         .help = "the user commands run as when the manifest names none (default root)",
         .flag = "user"},
        {.key = "network",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_STATE,
         .arg = "none|profile",
         .help = "none (the default): loopback only, the profiles' network devices masked; "
                 "profile: the profiles' network devices as they are",
         .flag = "network",
         .danger = "profile",
         .warning = "network '%s' connects the sandbox to the networks of its LXD profiles: "
                    "its commands may reach the member hosts and what they can reach"},
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
         .help = "the root disk's size (default: the profile's; enforced where the storage "
                 "pool can)",
         .flag = "disk"},
        {.key = "ports",
         .type = SBX_OPTION_PORT,
         .flags = SBX_OPTION_STATE | SBX_OPTION_LIST,
         .arg = "N",
         .help = "a port of the sandbox the host may reach (repeatable; none given: any)",
         .flag = "port"},
        {.key = "port_bind",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_STATE | SBX_OPTION_TRUSTED,
         .arg = "ADDR",
         .help = "host address of port forwards (default: the member's address in a "
                 "cluster, else 127.0.0.1)",
         .flag = "port-bind"},
        {.key = "privileged",
         .type = SBX_OPTION_BOOL,
         .flags = SBX_OPTION_STATE | SBX_OPTION_TRUSTED,
         .help = "allow security.privileged (refused otherwise)",
         .flag = "lxd-privileged",
         .danger = "true",
         .warning = "lxd privileged is DANGEROUS: the container's root is root on the member "
                    "host, and an escape from it owns the host"},
        {.key = "nesting",
         .type = SBX_OPTION_BOOL,
         .flags = SBX_OPTION_STATE | SBX_OPTION_TRUSTED,
         .help = "allow security.nesting (refused otherwise)",
         .flag = "lxd-nesting",
         .danger = "true",
         .warning = "lxd nesting is DANGEROUS: the sandbox may run containers of its own, with "
                    "more of /proc and /sys reachable and a larger kernel surface"},
        {.key = NULL},
};

/* struct sbx_lxd_options with room for what it points to. */
struct holder {
    struct sbx_lxd_options o;
    const char *profiles[SBX_LXD_MAX_PROFILES];
    int ports[SBX_LXD_MAX_EXPOSED_PORTS];
};

static const char *str(const json_t *opts, const char *key)
{
    return json_string_value(json_object_get(opts, key));
}

static uint64_t limit(const json_t *v)
{
    return json_is_string(v) ? SBX_LXD_LIMIT_NONE : (uint64_t)json_integer_value(v);
}

static int from_json(const json_t *opts, struct holder *h, struct sbx_error *err)
{
    const char *net = str(opts, "network");
    const json_t *cpus = json_object_get(opts, "cpus"), *v;
    size_t i;
    h->o.image = str(opts, "image");
    h->o.endpoint = str(opts, "endpoint");
    h->o.client_cert = str(opts, "client_cert");
    h->o.client_key = str(opts, "client_key");
    h->o.server_cert = str(opts, "server_cert");
    h->o.server_pubkey = str(opts, "server_pubkey");
    h->o.server_fingerprint = str(opts, "server_fingerprint");
    h->o.project = str(opts, "project");
    h->o.target = str(opts, "target");
    h->o.user = str(opts, "user");
    h->o.port_bind = str(opts, "port_bind");
    if (net && strcmp(net, "none") != 0 && strcmp(net, "profile") != 0)
        return sbx_error_set(err, SBX_E_INVAL, 0, "unknown lxd network mode '%s' (none, profile)",
                             net);
    h->o.network =
            net && strcmp(net, "profile") == 0 ? SBX_LXD_NETWORK_PROFILE : SBX_LXD_NETWORK_DEFAULT;
    h->o.memory_bytes = (uint64_t)json_integer_value(json_object_get(opts, "memory"));
    h->o.pids = (uint64_t)json_integer_value(json_object_get(opts, "pids"));
    if (json_object_get(opts, "disk"))
        h->o.disk_bytes = limit(json_object_get(opts, "disk"));
    if (cpus)
        h->o.cpu_millis = json_is_string(cpus) ? SBX_LXD_LIMIT_NONE
                                               : (uint64_t)(json_number_value(cpus) * 1000 + 0.5);
    h->o.privileged = json_is_true(json_object_get(opts, "privileged"));
    h->o.nesting = json_is_true(json_object_get(opts, "nesting"));
    json_array_foreach(json_object_get(opts, "profile"), i, v)
    {
        if (h->o.n_profiles >= SBX_LXD_MAX_PROFILES)
            return sbx_error_set(err, SBX_E_INVAL, 0, "more than %d lxd profiles",
                                 SBX_LXD_MAX_PROFILES);
        h->profiles[h->o.n_profiles++] = json_string_value(v);
    }
    h->o.profiles = h->profiles;
    json_array_foreach(json_object_get(opts, "ports"), i, v)
    {
        if (h->o.n_exposed_ports >= SBX_LXD_MAX_EXPOSED_PORTS)
            return sbx_error_set(err, SBX_E_INVAL, 0, "more than %d ports",
                                 SBX_LXD_MAX_EXPOSED_PORTS);
        h->ports[h->o.n_exposed_ports++] = (int)json_integer_value(v);
    }
    h->o.exposed_ports = h->ports;
    return 0;
}

int sbx__lxd_options_check(const json_t *options, struct sbx_error *err)
{
    struct holder h = {0};
    int rc = from_json(options, &h, err);
    if (rc < 0)
        return rc;
    struct sbx__lxd_server sv;
    rc = sbx__lxd_server_init(&sv, &h.o, err);
    if (rc == 0)
        sbx__lxd_server_release(&sv);
    return rc;
}

extern const struct sbx__provider_def sbx__provider_lxd;

int sbx__lxd_client_new_json(const json_t *options, struct sbx_client **out, struct sbx_error *err)
{
    struct holder h = {0};
    int rc = from_json(options, &h, err);
    return rc < 0 ? rc : sbx__provider_lxd.client_new(&h.o, out, err);
}

int sbx__lxd_probe(json_t **out, struct sbx_error *err)
{
    static const char *const socks[] = {"/var/lib/lxd/unix.socket",
                                        "/var/snap/lxd/common/lxd/unix.socket", NULL};
    const char *dir = getenv("LXD_DIR");
    struct stat st;
    if (dir && dir[0] == '/') {
        char *sock = sbx_xasprintf("%s/unix.socket", dir);
        int ok = stat(sock, &st) == 0 && S_ISSOCK(st.st_mode);
        if (ok)
            *out = json_pack("{s:s}", "endpoint", sock);
        free(sock);
        if (ok)
            return 0;
    }
    for (size_t i = 0; socks[i]; i++)
        if (stat(socks[i], &st) == 0 && S_ISSOCK(st.st_mode)) {
            *out = json_pack("{s:s}", "endpoint", socks[i]);
            return 0;
        }
    return sbx_error_set(err, SBX_E_NOTFOUND, 0,
                         "no lxd server configured ($LXD_DIR, /var/lib/lxd/unix.socket)");
}
