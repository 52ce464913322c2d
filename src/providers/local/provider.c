/* The local provider as the registry knows it: its traits, its declared options (the keys of
 * sbx_client_new_json, the agent file's sandbox: section and the flags of `sbx run` / `sbx
 * sandbox create`), the turning of checked options into struct sbx_local_options, and its
 * hidden program entry points. */
#include <stdlib.h>
#include <string.h>

#include "providers/local/config.h"
#include "providers/local/local.h"
#include "sbx/json.h"
#include "sbx/manifest.h"
#include "sbx/provider.h"
#include "sbx/strv.h"

#define TEST_HOSTS_MAX 64

static const struct sbx_provider_option options[] = {
        {.key = "isolation",
         .type = SBX_OPTION_CHOICE,
         .flags = SBX_OPTION_STATE | SBX_OPTION_TRUSTED,
         .arg = "namespaces|none",
         .help = "namespaces (the default) isolates the sandbox; none runs its commands as host "
                 "processes",
         .flag = "isolation"},
        {.key = "network",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_STATE,
         .arg = "none|full|allow:DOMAINS",
         .help = "none (the default): no network; full: the host's network (DANGEROUS); "
                 "allow:a.org,*.b.org lets HTTP(S) to those names through a proxy (ports 80, "
                 "443 or --allow-port)",
         .flag = "network",
         .danger = "full",
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
        {.key = "ports",
         .type = SBX_OPTION_PORT,
         .flags = SBX_OPTION_STATE | SBX_OPTION_LIST,
         .arg = "N",
         .help = "a port of the sandbox the host may reach (repeatable; none given: any)",
         .flag = "port"},
        {.key = "ro",
         .type = SBX_OPTION_PATH,
         .flags = SBX_OPTION_LIST | SBX_OPTION_TRUSTED,
         .arg = "PATH[:DST]",
         .help = "grant the host path PATH read-only (at DST in the sandbox)",
         .flag = "ro"},
        {.key = "rw",
         .type = SBX_OPTION_PATH,
         .flags = SBX_OPTION_LIST | SBX_OPTION_TRUSTED,
         .arg = "PATH[:DST]",
         .help = "grant the host path PATH writable (at DST in the sandbox)",
         .flag = "rw"},
        {.key = "allow_dangerous_grant",
         .type = SBX_OPTION_PATH,
         .flags = SBX_OPTION_LIST | SBX_OPTION_TRUSTED,
         .arg = "PATH",
         .help = "grants of /proc /sys /dev /run or of trees with unix sockets are refused "
                 "unless named here",
         .flag = "allow-dangerous-grant",
         .danger = "*",
         .warning = "grant source '%s' is allowed although it is DANGEROUS: a system directory "
                    "(/proc, /sys, /dev, /run) or unix sockets of host services may let the "
                    "sandbox reach the host"},
        {.key = "port_bind",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_STATE | SBX_OPTION_TRUSTED,
         .arg = "ADDR",
         .help = "host address of port forwards (default 127.0.0.1)",
         .flag = "port-bind"},
        {.key = "publish",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_STATE | SBX_OPTION_LIST | SBX_OPTION_TRUSTED,
         .arg = "[ADDR:]HOST:PORT",
         .help = "host port HOST (on ADDR, default 127.0.0.1) reaches port PORT of the sandbox "
                 "from the start, as docker's -p (repeatable; a network of its own only)",
         .flag = "publish",
         .short_flag = 'p'},
        {.key = "allow_port",
         .type = SBX_OPTION_PORT,
         .flags = SBX_OPTION_STATE | SBX_OPTION_LIST,
         .arg = "N",
         .help = "with --network allow: also let this port through the proxy",
         .flag = "allow-port"},
        {.key = "disk",
         .type = SBX_OPTION_SIZE,
         .flags = SBX_OPTION_STATE | SBX_OPTION_NONE_OK,
         .arg = "SIZE|none",
         .help = "workspace size limit (default 8G; enforced for root)",
         .flag = "disk",
         .min = (long long)SBX_LOCAL_DISK_MIN,
         .max = (long long)SBX_LOCAL_DISK_MAX},
        {.key = "allow_dangerous_workspace",
         .type = SBX_OPTION_BOOL,
         .flags = SBX_OPTION_TRUSTED,
         .help = "accept a --workspace inside another user's home or holding unix sockets "
                 "(DANGEROUS)",
         .flag = "allow-dangerous-workspace"},
        {.key = "allow_host_uid",
         .type = SBX_OPTION_BOOL,
         .flags = SBX_OPTION_TRUSTED,
         .help = "root: where the workspace cannot be idmapped, run commands as host uid 0 "
                 "instead of failing (DANGEROUS)",
         .flag = "allow-host-uid"},
        {.key = "tied",
         .type = SBX_OPTION_BOOL,
         .flags = SBX_OPTION_TRUSTED,
         .help = "the sandboxes end with the process that made them, however it ends (sbx run "
                 "sets it for the sandboxes it removes at its end)"},
        {.key = NULL},
};

/* struct sbx_local_options with room for what it points to. Never copied. */
struct holder {
    struct sbx_local_options o;
    struct sbx_local_grant grants[SBX_LOCAL_MAX_GRANTS];
    const char *domains[SBX_LOCAL_MAX_ALLOW_DOMAINS];
    int ports[SBX_LOCAL_MAX_EXPOSED_PORTS];
    int allow_ports[SBX_LOCAL_MAX_EXPOSED_PORTS];
    const char *publish[SBX_LOCAL_MAX_EXPOSED_PORTS];
    const char *test_hosts[TEST_HOSTS_MAX + 1];
    struct sbx_strv hold; /* copies of the strings the options point into */
};

static const char *keep(struct holder *h, const char *s, size_t n)
{
    sbx_strv_push_take(&h->hold, sbx_xstrndup(s, n));
    return h->hold.v[h->hold.n - 1];
}

static int network(struct holder *h, const char *v, struct sbx_error *err)
{
    if (strcmp(v, "none") == 0) {
        h->o.network = SBX_LOCAL_NETWORK_NONE;
        return 0;
    }
    if (strcmp(v, "full") == 0) {
        h->o.network = SBX_LOCAL_NETWORK_HOST;
        return 0;
    }
    if (strncmp(v, "allow:", 6) != 0)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "unknown network mode '%s' (none, full, allow:DOMAINS)", v);
    size_t n = 0;
    for (const char *p = v + 6; *p;) {
        size_t len = strcspn(p, ",");
        if (len && n >= SBX_LOCAL_MAX_ALLOW_DOMAINS)
            return sbx_error_set(err, SBX_E_INVAL, 0, "more than %d allowed domains",
                                 SBX_LOCAL_MAX_ALLOW_DOMAINS);
        if (len)
            h->domains[n++] = keep(h, p, len);
        p += len + (p[len] == ',');
    }
    if (n == 0)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "--network allow: wants domains, such as allow:pypi.org,*.pypi.org");
    h->o.network = SBX_LOCAL_NETWORK_ALLOW;
    h->o.allow_domains = h->domains;
    h->o.n_allow_domains = n;
    return 0;
}

static int grants(struct holder *h, const json_t *list, int writable, struct sbx_error *err)
{
    size_t i;
    json_t *v;
    json_array_foreach(list, i, v)
    {
        if (h->o.n_grants >= SBX_LOCAL_MAX_GRANTS)
            return sbx_error_set(err, SBX_E_INVAL, 0, "more than %d path grants",
                                 SBX_LOCAL_MAX_GRANTS);
        /* PATH[:DST] */
        const char *s = json_string_value(v), *colon = strchr(s, ':');
        struct sbx_local_grant *g = &h->grants[h->o.n_grants++];
        *g = (struct sbx_local_grant){.writable = writable};
        g->src = keep(h, s, colon ? (size_t)(colon - s) : strlen(s));
        g->dst = colon ? keep(h, colon + 1, strlen(colon + 1)) : NULL;
    }
    h->o.grants = h->grants;
    return 0;
}

/* allow_dangerous_grant: each names the source of a grant, as spelled or where it leads. */
static int dangerous(struct holder *h, const json_t *list, struct sbx_error *err)
{
    size_t i;
    json_t *v;
    json_array_foreach(list, i, v)
    {
        const char *path = json_string_value(v);
        char *want = realpath(path, NULL);
        int found = 0;
        for (size_t g = 0; g < h->o.n_grants; g++) {
            char *real = want ? realpath(h->grants[g].src, NULL) : NULL;
            if (strcmp(h->grants[g].src, path) == 0 || (real && strcmp(real, want) == 0)) {
                h->grants[g].dangerous = 1;
                found = 1;
            }
            free(real);
        }
        free(want);
        if (!found)
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "--allow-dangerous-grant '%s' names no --ro or --rw source", path);
    }
    return 0;
}

static size_t ports(const json_t *list, int *out)
{
    size_t i, n = 0;
    json_t *v;
    json_array_foreach(list, i, v)
    {
        if (n < SBX_LOCAL_MAX_EXPOSED_PORTS)
            out[n] = (int)json_integer_value(v);
        n++;
    }
    return n;
}

static uint64_t limit(const json_t *v)
{
    if (json_is_string(v)) /* "none" */
        return SBX_LOCAL_LIMIT_NONE;
    return (uint64_t)json_integer_value(v);
}

/* Checked options (canonical JSON) into h->o. h must be zeroed with hold initialised. */
static int from_json(const json_t *opts, struct holder *h, struct sbx_error *err)
{
    const char *iso = json_string_value(json_object_get(opts, "isolation"));
    const char *net = json_string_value(json_object_get(opts, "network"));
    const json_t *cpus = json_object_get(opts, "cpus"), *v;
    size_t i;
    int rc = 0;
    if (iso)
        h->o.isolation = strcmp(iso, "none") == 0 ? SBX_LOCAL_ISOLATION_NONE
                                                  : SBX_LOCAL_ISOLATION_NAMESPACES;
    if (net && (rc = network(h, net, err)) < 0)
        return rc;
    h->o.limits.memory_bytes = limit(json_object_get(opts, "memory"));
    h->o.limits.pids = limit(json_object_get(opts, "pids"));
    if (cpus)
        h->o.limits.cpu_millis = json_is_string(cpus)
                                         ? SBX_LOCAL_LIMIT_NONE
                                         : (uint64_t)(json_number_value(cpus) * 1000 + 0.5);
    h->o.disk_bytes = limit(json_object_get(opts, "disk"));
    if ((rc = grants(h, json_object_get(opts, "ro"), 0, err)) < 0 ||
        (rc = grants(h, json_object_get(opts, "rw"), 1, err)) < 0 ||
        (rc = dangerous(h, json_object_get(opts, "allow_dangerous_grant"), err)) < 0)
        return rc;
    h->o.n_exposed_ports = ports(json_object_get(opts, "ports"), h->ports);
    h->o.exposed_ports = h->ports;
    h->o.n_allow_ports = ports(json_object_get(opts, "allow_port"), h->allow_ports);
    h->o.allow_ports = h->allow_ports;
    if (h->o.n_exposed_ports > SBX_LOCAL_MAX_EXPOSED_PORTS ||
        h->o.n_allow_ports > SBX_LOCAL_MAX_EXPOSED_PORTS)
        return sbx_error_set(err, SBX_E_INVAL, 0, "more than %d ports",
                             SBX_LOCAL_MAX_EXPOSED_PORTS);
    if ((v = json_object_get(opts, "port_bind")))
        h->o.port_bind = json_string_value(v);
    json_array_foreach(json_object_get(opts, "publish"), i, v)
    {
        char bind[64];
        int hp, port;
        if (i >= SBX_LOCAL_MAX_EXPOSED_PORTS)
            return sbx_error_set(err, SBX_E_TOOBIG, 0, "more than %d published ports",
                                 SBX_LOCAL_MAX_EXPOSED_PORTS);
        if ((rc = sbx__local_publish_parse(json_string_value(v), bind, &hp, &port, NULL, err)) < 0)
            return rc;
        h->publish[h->o.n_publish++] = json_string_value(v);
    }
    h->o.publish = h->publish;
    h->o.tied = json_is_true(json_object_get(opts, "tied"));
    h->o.allow_host_uid = json_is_true(json_object_get(opts, "allow_host_uid"));
    h->o.allow_dangerous_workspace =
            json_is_true(json_object_get(opts, "allow_dangerous_workspace"));
    return 0;
}

static struct holder *holder_new(void)
{
    struct holder *h = sbx_xcalloc(1, sizeof(*h));
    sbx_strv_init(&h->hold);
    return h;
}

static void holder_free(struct holder *h)
{
    sbx_strv_release(&h->hold);
    free(h);
}

static int options_check(const json_t *opts, struct sbx_error *err)
{
    struct holder *h = holder_new();
    int rc = from_json(opts, h, err);
    holder_free(h);
    return rc;
}

/* $SBX_TEST_PROXY_HOSTS ("name=ip,..."), for network allow only: the test suite's local
 * upstreams (docs/internals/isolation.md, "The test-only switch"). */
static void test_hosts(struct holder *h, struct sbx__local_test *t)
{
    const char *env = getenv("SBX_TEST_PROXY_HOSTS");
    size_t n = 0;
    if (h->o.network != SBX_LOCAL_NETWORK_ALLOW || !env || !env[0] || strlen(env) > 4096)
        return;
    for (const char *p = env; *p;) {
        size_t len = strcspn(p, ",");
        if (len && n == TEST_HOSTS_MAX)
            return; /* too many: none at all, as before */
        if (len)
            h->test_hosts[n++] = keep(h, p, len);
        p += len + (p[len] == ',');
    }
    h->test_hosts[n] = NULL;
    t->proxy_hosts = h->test_hosts;
}

static int client_new_json(const json_t *opts, struct sbx_client **out, struct sbx_error *err)
{
    struct holder *h = holder_new();
    struct sbx__local_test t = {0};
    int rc = from_json(opts, h, err);
    if (rc == 0) {
        test_hosts(h, &t);
        rc = sbx__local_client_new_test(&h->o, &t, out, err);
    }
    holder_free(h);
    return rc;
}

static const struct sbx__program programs[] = {
        {SBX_LOCAL_SUPERVISE_VERB, sbx_local_supervise_main},
        {"__isolate-run", sbx_local_isolate_run_main},
        {NULL, NULL},
};

const struct sbx__provider_def sbx__provider_local = {
        .name = "local",
        .summary = "a supervisor process per sandbox on this host, isolated with namespaces, "
                   "cgroups and seccomp",
        .traits = SBX_PROVIDER_MOUNTS | SBX_PROVIDER_ACCOUNTS | SBX_PROVIDER_HOST_WORKSPACE |
                  SBX_PROVIDER_SNAPSHOTS | SBX_PROVIDER_STOP_START | SBX_PROVIDER_PTY |
                  SBX_PROVIDER_PORTS | SBX_PROVIDER_NETWORK_POLICY | SBX_PROVIDER_GRANTS |
                  SBX_PROVIDER_ISOLATION_LEVELS | SBX_PROVIDER_LISTS | SBX_PROVIDER_RESUME |
                  SBX_PROVIDER_STATS | SBX_PROVIDER_LOGS,
        .unmountable = 1u << SBX_ENTRY_S3_FILES_MOUNT,
        .unmountable_why = "S3 Files is an NFS 4.2 file system with TLS and IAM authentication: "
                           "mounting it takes the mount.s3files helper of amazon-efs-utils (3.0 "
                           "or later) on a host in the file system's VPC that reaches a mount "
                           "target on TCP port 2049, and rclone, which the local provider mounts "
                           "with, has no backend for it",
        .options = options,
        .client_new = sbx__local_client_new,
        .client_new_json = client_new_json,
        .options_check = options_check,
        .check_state = sbx__local_state_check,
        .programs = programs,
};
