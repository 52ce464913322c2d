/* Ports of a Kubernetes sandbox on this host: the relay processes of forward.h.
 *
 * pods/portforward over WebSocket (the channel protocol, "v4.channel.k8s.io" or
 * "portforward.k8s.io"): one WebSocket per accepted connection, asking for the one port;
 * channel 0 carries its data and channel 1 its errors, each starting with the port number
 * (wire/channel.h, sbx__pf_*). The protocol has no half-close: when either side ends, the
 * whole connection ends. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "providers/kubernetes/forward.h"
#include "sandbox/host/host.h"
#include "sandbox/host/portrelay.h"
#include "sandbox/session/internal.h"
#include "sandbox/wire/channel.h"
#include "sandbox/wire/conn.h"
#include "sbx/time.h"

#define CHECK_MS 2000 /* how often a relay looks at its pod */

/* ---------------------------------------------------------------------------------------------
 * Records: <runtime base>/kubernetes/<id>/ports/<port> (sandbox/host/portrelay.h) */

static int check_id(const char *id, struct sbx_error *err)
{
    size_t n = id ? strlen(id) : 0;
    int ok = n > 0 && n <= 64;
    for (size_t i = 0; ok && i < n; i++)
        ok = (id[i] >= 'a' && id[i] <= 'f') || (id[i] >= '0' && id[i] <= '9');
    return ok ? 0 : sbx_error_set(err, SBX_E_INVAL, 0, "bad sandbox id '%s'", id ? id : "");
}

static int ports_dir(const char *id, int make, char **out, struct sbx_error *err)
{
    int rc = check_id(id, err);
    return rc < 0 ? rc : sbx__portrelay_dir("kubernetes", id, make, out, err);
}

/* ---------------------------------------------------------------------------------------------
 * Starting a relay */

/* Whether something listens on port in the pod (its own socket tables). */
static int pod_listens(const struct sbx__kube_target *t, int port, int *out, struct sbx_error *err)
{
    const char *argv[] = {"cat", "/proc/net/tcp", "/proc/net/tcp6", NULL};
    struct sbx_buf o, e;
    sbx_buf_init(&o, (size_t)16 << 20);
    sbx_buf_init(&e, 65536);
    struct sbx__kube_run io = {.argv = argv, .input_fd = -1, .output_fd = -1, .out = &o, .err = &e};
    /* cat fails on a kernel without IPv6 (no tcp6) but has printed tcp: the text decides. */
    int rc = sbx__kube_run(t, &io, err);
    if (rc == 0)
        *out = sbx__net_table_listens(o.data ? o.data : "", o.len, port);
    sbx_buf_release(&o);
    sbx_buf_release(&e);
    return rc;
}

static int forward(const struct sbx__kube_target *t, int port, int check, char **out_url,
                   struct sbx_error *err)
{
    char *dir = NULL, portarg[16];
    int listens = 0;
    int rc = port < 1 || port > 65535
                     ? sbx_error_set(err, SBX_E_INVAL, 0, "port %d is not in 1..65535", port)
                     : 0;
    if (rc == 0 && check)
        rc = pod_listens(t, port, &listens, err);
    else if (rc == 0)
        listens = 1;
    if (rc == 0 && !listens)
        rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "nothing listens on port %d in sandbox '%s'",
                           port, t->id);
    if (rc == 0)
        rc = ports_dir(t->id, 1, &dir, err);
    if (rc < 0)
        return rc;
    snprintf(portarg, sizeof(portarg), "%d", port);
    const char *kc = t->api->kubeconfig ? t->api->kubeconfig : getenv("KUBECONFIG");
    const char *const args[] = {SBX__KUBE_RELAY_VERB,
                                t->id,
                                portarg,
                                t->api->namespace_name,
                                t->pod,
                                t->api->context,
                                kc ? kc : "",
                                t->api->in_cluster ? "1" : "0",
                                NULL};
    /* What finding the credentials needs. */
    static const char *const pass[] = {"HOME",
                                       "TMPDIR",
                                       "XDG_RUNTIME_DIR",
                                       "KUBERNETES_SERVICE_HOST",
                                       "KUBERNETES_SERVICE_PORT",
                                       NULL};
    struct sbx__portrelay_start st = {.dir = dir, .port = port, .args = args, .pass_env = pass};
    rc = sbx__portrelay_resolve(&st, out_url, err);
    free(dir);
    return rc;
}

int sbx__kube_forward(const struct sbx__kube_target *t, int port, char **out_url,
                      struct sbx_error *err)
{
    return forward(t, port, 1, out_url, err);
}

int sbx__kube_forward_unchecked(const struct sbx__kube_target *t, int port, char **out_url,
                                struct sbx_error *err)
{
    return forward(t, port, 0, out_url, err);
}

int sbx__kube_forward_forget(const char *id, struct sbx_error *err)
{
    char *dir = NULL;
    int rc = ports_dir(id, 0, &dir, err);
    if (rc < 0)
        return rc;
    rc = sbx__portrelay_forget(dir, err);
    free(dir);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * The relay process */

struct relay {
    struct sbx__kube_api *api;
    const char *pod, *id;
    int port;
};

/* One accepted connection carried over its own port-forward WebSocket. */
static void relay_one(void *ctx, int fd)
{
    static const char *const protocols[] = {"v4.channel.k8s.io", SBX__PF_PROTOCOL, NULL};
    struct relay *r = ctx;
    char q[32];
    snprintf(q, sizeof(q), "ports=%d", r->port);
    char *path = sbx__kube_path(r->api, SBX__KUBE_POD, r->pod, "portforward", q);
    struct sbx__wsconn *w = NULL;
    struct sbx_error e = SBX_ERROR_INIT;
    int rc = sbx__wsconn_open(r->api->ep, path, protocols, NULL, 0, 0, &w, &e);
    free(path);
    if (rc == 0)
        sbx__pf_pump(w, (uint16_t)r->port, fd);
    if (w) {
        (void)sbx__wsconn_close(w, SBX__WS_CLOSE_NORMAL, NULL, sbx_deadline_after_ms(1000), NULL);
        sbx__wsconn_free(w);
    }
}

/* Whether the relay should go on: its pod still exists. */
static int pod_wanted(void *ctx)
{
    struct relay *r = ctx;
    json_t *pod = NULL;
    struct sbx_error e = SBX_ERROR_INIT;
    int rc = sbx__kube_get(r->api, SBX__KUBE_POD, r->pod, &pod, &e);
    int ok = rc == 0 ? !json_object_get(json_object_get(pod, "metadata"), "deletionTimestamp")
                     : rc != -SBX_E_NOTFOUND;
    json_decref(pod);
    return ok;
}

static int atoi_port(const char *s)
{
    char *end;
    long v = strtol(s, &end, 10);
    return *end || v < 1 || v > 65535 ? -1 : (int)v;
}

int sbx__kube_relay_main(int argc, char **argv)
{
    if (argc != 8)
        return 2;
    if (sbx__portrelay_detach() < 0)
        return 1;
    struct relay r = {.id = argv[1], .port = atoi_port(argv[2]), .pod = argv[4]};
    struct sbx_kube_options o = {.namespace_name = argv[3],
                                 .context = argv[5],
                                 .kubeconfig = argv[6][0] ? argv[6] : NULL,
                                 .in_cluster = strcmp(argv[7], "1") == 0};
    struct sbx_error e = SBX_ERROR_INIT;
    if (o.in_cluster)
        o.context = NULL;
    if (r.port <= 0 || sbx__kube_api_new(&o, &r.api, &e) < 0) {
        sbx__portrelay_say(r.port <= 0 ? "bad port" : e.msg);
        return 1;
    }
    struct sbx__portrelay_serve s = {
            .ctx = &r, .check_ms = CHECK_MS, .carry = relay_one, .wanted = pod_wanted};
    int status = sbx__portrelay_run(&s);
    sbx__kube_api_free(r.api);
    return status;
}
