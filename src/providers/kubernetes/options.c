/* The Kubernetes provider's declared options (sbx/provider.h) and how checked ones become
 * struct sbx_kube_options; the cluster it finds unconfigured. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "providers/kubernetes/kube.h"
#include "providers/kubernetes/node.h"
#include "sbx/json.h"
#include "sbx/kubernetes.h"
#include "sbx/provider.h"

const struct sbx_provider_option sbx__kube_options[] = {
        {.key = "kubeconfig",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_LOCATOR,
         .arg = "PATH",
         .help = "the kubeconfig (default $KUBECONFIG, else ~/.kube/config; a list of files "
                 "separated by ':' is merged as kubectl merges it)",
         .flag = "kubeconfig"},
        {.key = "context",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_LOCATOR,
         .arg = "NAME",
         .help = "the kubeconfig's context to use (default its current-context)",
         .flag = "context"},
        {.key = "in_cluster",
         .type = SBX_OPTION_BOOL,
         .flags = SBX_OPTION_LOCATOR,
         .help = "use the service account of the pod sbx runs in instead of a kubeconfig",
         .flag = "in-cluster"},
        {.key = "namespace",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_LOCATOR | SBX_OPTION_STATE,
         .arg = "NS",
         .help = "the namespace of the sandboxes (default the context's, else default)",
         .flag = "namespace"},
        {.key = "image",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_STATE,
         .arg = "IMAGE",
         .help = "the container's image (or --warm-pool, or --template)",
         .flag = "image"},
        {.key = "warm_pool",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_STATE,
         .arg = "NAME",
         .help = "claim a sandbox of this agent-sandbox SandboxWarmPool (a SandboxClaim)",
         .flag = "warm-pool"},
        {.key = "template",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_STATE,
         .arg = "NAME",
         .help = "a Sandbox of this agent-sandbox SandboxTemplate's pod template",
         .flag = "template"},
        {.key = "workload",
         .type = SBX_OPTION_CHOICE,
         .flags = SBX_OPTION_STATE,
         .arg = "auto|sandbox|pod",
         .help = "what a sandbox is made as: auto (the default) a Sandbox where the cluster has "
                 "agent-sandbox, else a Pod",
         .flag = "workload"},
        {.key = "runtime_class",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_STATE,
         .arg = "NAME",
         .help = "the pod's RuntimeClass (gvisor, kata, ...)",
         .flag = "runtime-class"},
        {.key = "memory",
         .type = SBX_OPTION_SIZE,
         .flags = SBX_OPTION_STATE,
         .arg = "SIZE",
         .help = "memory limit, such as 512M (default 2G)",
         .flag = "memory"},
        {.key = "cpus",
         .type = SBX_OPTION_CPUS,
         .flags = SBX_OPTION_STATE | SBX_OPTION_NONE_OK,
         .arg = "N|none",
         .help = "CPU limit, such as 1.5 (default 1; none: no limit)",
         .flag = "cpus"},
        {.key = "disk",
         .type = SBX_OPTION_SIZE,
         .flags = SBX_OPTION_STATE | SBX_OPTION_NONE_OK,
         .arg = "SIZE|none",
         .help = "the workspace volume's size (default 1G; none: no volume, a stop loses the "
                 "workspace)",
         .flag = "disk"},
        {.key = "storage_class",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_STATE,
         .arg = "NAME",
         .help = "the workspace volume's StorageClass (default the cluster's)",
         .flag = "storage-class"},
        {.key = "run_as_user",
         .type = SBX_OPTION_INTEGER,
         .flags = SBX_OPTION_STATE | SBX_OPTION_NONE_OK,
         .arg = "UID|none",
         .help = "the user id commands run as (default 1000; none: the image's user)",
         .flag = "run-as-user",
         .min = 0,
         .max = 2147483647},
        {.key = "ports",
         .type = SBX_OPTION_PORT,
         .flags = SBX_OPTION_STATE | SBX_OPTION_LIST,
         .arg = "N",
         .help = "a port of the sandbox the host may reach (repeatable; none given: any)",
         .flag = "port"},
        {.key = "ready_timeout",
         .type = SBX_OPTION_INTEGER,
         .flags = SBX_OPTION_STATE,
         .arg = "SECONDS",
         .help = "how long a new sandbox may take to be ready (default 300)",
         .flag = "ready-timeout",
         .min = 1,
         .max = 86400},
        {.key = "node",
         .type = SBX_OPTION_STRING, /* the remote provider's --node is a string too */
         .flags = SBX_OPTION_STATE | SBX_OPTION_LOCATOR,
         .arg = "sbx-node",
         .help = "sbx-node: the pod runs the sbx-node daemon and sbx drives the sandbox through "
                 "it (a port-forward and mutual tls; the --node-* options)",
         .flag = "node"},
        {.key = "node_port",
         .type = SBX_OPTION_PORT,
         .flags = SBX_OPTION_STATE | SBX_OPTION_LOCATOR,
         .arg = "N",
         .help = "with node=sbx-node: the daemon's port in the pod (default 7443)",
         .flag = "node-port"},
        {.key = "node_program",
         .type = SBX_OPTION_STRING,
         .flags = SBX_OPTION_STATE,
         .arg = "PATH",
         .help = "with node=sbx-node: sbx-node's path in the image (default "
                 "/usr/libexec/sbx/sbx-node)",
         .flag = "node-program"},
        {.key = "node_ca",
         .type = SBX_OPTION_PATH,
         .flags = SBX_OPTION_TRUSTED | SBX_OPTION_LOCATOR,
         .arg = "FILE",
         .help = "with node=sbx-node: the deployment's ca certificate (sbx node ca init)",
         .flag = "node-ca"},
        {.key = "node_cert",
         .type = SBX_OPTION_PATH,
         .flags = SBX_OPTION_TRUSTED | SBX_OPTION_LOCATOR,
         .arg = "FILE",
         .help = "with node=sbx-node: this harness's certificate (sbx node cert issue NAME "
                 "--harness)",
         .flag = "node-cert"},
        {.key = "node_key",
         .type = SBX_OPTION_PATH,
         .flags = SBX_OPTION_TRUSTED | SBX_OPTION_LOCATOR,
         .arg = "FILE",
         .help = "with node=sbx-node: this harness's private key",
         .flag = "node-key"},
        {.key = "node_tls_cert",
         .type = SBX_OPTION_PATH,
         .flags = SBX_OPTION_TRUSTED,
         .arg = "FILE",
         .help = "with node=sbx-node: the daemon's certificate (sbx node cert issue NAME --node "
                 "--host 127.0.0.1), put in the pod's secret",
         .flag = "node-tls-cert"},
        {.key = "node_tls_key",
         .type = SBX_OPTION_PATH,
         .flags = SBX_OPTION_TRUSTED,
         .arg = "FILE",
         .help = "with node=sbx-node: the daemon's private key, put in the pod's secret",
         .flag = "node-tls-key"},
        {.key = NULL},
};

/* struct sbx_kube_options with room for what it points to. */
struct holder {
    struct sbx_kube_options o;
    int ports[SBX_KUBE_MAX_EXPOSED_PORTS];
};

static uint64_t limit(const json_t *v)
{
    if (!v)
        return 0;
    if (json_is_string(v))
        return SBX_KUBE_LIMIT_NONE;
    return (uint64_t)json_integer_value(v);
}

static int from_json(const json_t *opts, struct holder *h, struct sbx_error *err)
{
    const json_t *cpus = json_object_get(opts, "cpus"), *v;
    const json_t *uid = json_object_get(opts, "run_as_user");
    const char *wl = json_string_value(json_object_get(opts, "workload"));
    size_t i;
    h->o.kubeconfig = json_string_value(json_object_get(opts, "kubeconfig"));
    h->o.context = json_string_value(json_object_get(opts, "context"));
    h->o.in_cluster = json_is_true(json_object_get(opts, "in_cluster"));
    h->o.namespace_name = json_string_value(json_object_get(opts, "namespace"));
    h->o.image = json_string_value(json_object_get(opts, "image"));
    h->o.warm_pool = json_string_value(json_object_get(opts, "warm_pool"));
    h->o.template_name = json_string_value(json_object_get(opts, "template"));
    h->o.runtime_class = json_string_value(json_object_get(opts, "runtime_class"));
    h->o.storage_class = json_string_value(json_object_get(opts, "storage_class"));
    h->o.memory_bytes = limit(json_object_get(opts, "memory"));
    h->o.disk_bytes = limit(json_object_get(opts, "disk"));
    if (cpus)
        h->o.cpu_millis = json_is_string(cpus) ? SBX_KUBE_LIMIT_NONE
                                               : (uint64_t)(json_number_value(cpus) * 1000 + 0.5);
    if (uid)
        h->o.run_as_user = json_is_string(uid) ? SBX_KUBE_IMAGE_USER : json_integer_value(uid);
    if (wl)
        h->o.workload = strcmp(wl, "sandbox") == 0 ? SBX_KUBE_WORKLOAD_SANDBOX
                        : strcmp(wl, "pod") == 0   ? SBX_KUBE_WORKLOAD_POD
                                                   : SBX_KUBE_WORKLOAD_AUTO;
    h->o.ready_timeout_ms = json_integer_value(json_object_get(opts, "ready_timeout")) * 1000;
    json_array_foreach(json_object_get(opts, "ports"), i, v)
    {
        if (h->o.n_exposed_ports >= SBX_KUBE_MAX_EXPOSED_PORTS)
            return sbx_error_set(err, SBX_E_INVAL, 0, "more than %d ports",
                                 SBX_KUBE_MAX_EXPOSED_PORTS);
        h->ports[h->o.n_exposed_ports++] = (int)json_integer_value(v);
    }
    h->o.exposed_ports = h->ports;
    return sbx__kube_options_valid(&h->o, err);
}

/* The sbx-node mode's options (strings borrowed from options); 1 when node=sbx-node. */
static int node_from_json(const json_t *options, struct sbx__kube_node_opts *n)
{
    const json_t *port = json_object_get(options, "node_port");
    const char *prog = json_string_value(json_object_get(options, "node_program"));
    n->mode = json_string_value(json_object_get(options, "node"));
    n->port = port ? (unsigned)json_integer_value(port) : SBX__KUBE_NODE_PORT;
    n->program = (char *)(prog ? prog : SBX__KUBE_NODE_PROGRAM);
    n->ca = (char *)json_string_value(json_object_get(options, "node_ca"));
    n->cert = (char *)json_string_value(json_object_get(options, "node_cert"));
    n->key = (char *)json_string_value(json_object_get(options, "node_key"));
    n->node_cert = (char *)json_string_value(json_object_get(options, "node_tls_cert"));
    n->node_key = (char *)json_string_value(json_object_get(options, "node_tls_key"));
    return json_object_get(options, "node") != NULL;
}

int sbx__kube_options_check(const json_t *options, struct sbx_error *err)
{
    struct holder h = {0};
    struct sbx__kube_node_opts n = {0};
    int rc = from_json(options, &h, err);
    if (rc == 0 && node_from_json(options, &n))
        rc = sbx__kube_node_opts_check(&n, err);
    return rc;
}

int sbx__kube_client_new_json(const json_t *options, struct sbx_client **out, struct sbx_error *err)
{
    struct holder h = {0};
    struct sbx__kube_node_opts n = {0};
    struct sbx_client *kc = NULL;
    int node = node_from_json(options, &n);
    int rc = from_json(options, &h, err);
    if (rc == 0 && node)
        rc = sbx__kube_node_opts_check(&n, err);
    if (rc == 0)
        rc = sbx__kube_client_new(&h.o, node ? &kc : out, err);
    if (rc == 0 && node)
        rc = sbx__kube_node_client_new(kc, &n, out, err);
    return rc;
}

int sbx__kube_probe(json_t **out, struct sbx_error *err)
{
    const char *env = getenv("KUBECONFIG");
    const char *home = getenv("HOME");
    struct stat st;
    if (env && env[0]) {
        *out = json_object();
        return 0;
    }
    char *path = sbx_xasprintf("%s/.kube/config", home ? home : "");
    int found = home && stat(path, &st) == 0 && S_ISREG(st.st_mode);
    free(path);
    if (found || getenv("KUBERNETES_SERVICE_HOST")) {
        *out = json_object();
        return 0;
    }
    return sbx_error_set(err, SBX_E_NOTFOUND, 0,
                         "no kubeconfig ($KUBECONFIG, ~/.kube/config) and not inside a pod");
}
