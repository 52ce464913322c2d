/* Ports of a Kubernetes sandbox on this host (forward.c): a small detached relay process (the
 * sbx program run with SBX__KUBE_RELAY_VERB) listens on 127.0.0.1:HOSTPORT and carries each
 * connection it accepts over its own pods/portforward WebSocket to the port in the pod. It
 * reads the credentials itself (the kubeconfig and context it is named, or the service
 * account): none is ever on its command line. It ends when its pod goes or its record is
 * removed. Private to src/providers/kubernetes/. */
#ifndef SBX_PROVIDERS_KUBERNETES_FORWARD_H
#define SBX_PROVIDERS_KUBERNETES_FORWARD_H

#include "providers/kubernetes/api.h"
#include "sbx/error.h"

#define SBX__KUBE_RELAY_VERB "__kube-relay"

/* The URL ("http://127.0.0.1:HOSTPORT") of a relay to port in t's pod: the live one recorded in
 * <runtime base>/kubernetes/<id>/ports/<port>, else a new one. SBX_E_NOTFOUND when nothing
 * listens on the port in the pod. *out_url: caller owns. */
int sbx__kube_forward(const struct sbx__kube_target *t, int port, char **out_url,
                      struct sbx_error *err);
/* The same without asking the pod first whether anything listens (an exec): for a pod whose
 * image may run no commands of sbx's (the sbx-node mode, node.c); a connection to a port where
 * nothing listens then fails when it is made. */
int sbx__kube_forward_unchecked(const struct sbx__kube_target *t, int port, char **out_url,
                                struct sbx_error *err);
/* End the relays of sandbox id and remove their records (a removed or stopped sandbox). */
int sbx__kube_forward_forget(const char *id, struct sbx_error *err);
/* The relay process: argv = {VERB, ID, PORT, NAMESPACE, POD, CONTEXT, KUBECONFIG ("" for the
 * default), IN_CLUSTER (1/0)}, its listening socket, record and status pipe at fds 3, 4, 5. */
int sbx__kube_relay_main(int argc, char **argv);

#endif
