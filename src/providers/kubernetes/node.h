/* The kubernetes provider's sbx-node mode (node.c): pods that run the sbx-node daemon, driven
 * through the remote provider's client. Private to src/providers/kubernetes/. */
#ifndef SBX_PROVIDERS_KUBERNETES_NODE_H
#define SBX_PROVIDERS_KUBERNETES_NODE_H

#include "sandbox/provider.h"
#include "sbx/error.h"

#define SBX__KUBE_NODE_PORT    7443
#define SBX__KUBE_NODE_PROGRAM "/usr/libexec/sbx/sbx-node"

/* The mode's options (options.c reads them; strings borrowed there, owned in a client). */
struct sbx__kube_node_opts {
    const char *mode;           /* the node option: "sbx-node" */
    unsigned port;              /* the daemon's port in the pod */
    char *program;              /* sbx-node's path in the image */
    char *ca, *cert, *key;      /* the deployment's CA, this harness's certificate and key */
    char *node_cert, *node_key; /* the daemon's, delivered to the pod as a Secret */
};

/* The rules the option types do not say that every use needs (the daemon's certificate and
 * the image are checked by a create, which alone needs them). */
int sbx__kube_node_opts_check(const struct sbx__kube_node_opts *o, struct sbx_error *err);
/* A client of the mode over kc, a client of the provider made from the same options (taken:
 * freed on failure too). */
int sbx__kube_node_client_new(struct sbx_client *kc, const struct sbx__kube_node_opts *o,
                              struct sbx_client **out, struct sbx_error *err);

#endif
