/* Private: the remote provider, a harness's side of an sbx-node daemon (docs/internals/node.md).
 * Control requests are REST calls on the node's endpoint (mutual TLS with the deployment's CA
 * and the harness's certificate) with the sandbox's capability token in an Sbx-Token header
 * line; commands are WebSockets with Kubernetes' v5.channel.k8s.io layout; files and
 * workspace snapshots go through the shared shell file script over commands
 * (sandbox/shellfs/shellfs.h). The token lives in the session's memory only: a state holds the
 * node's URL and the id, and a resume mints a new token with the harness's certificate. */
#ifndef SBX_PROVIDERS_REMOTE_REMOTE_H
#define SBX_PROVIDERS_REMOTE_REMOTE_H

#include <stdint.h>

#include <jansson.h>

#include "sandbox/provider.h"
#include "sandbox/shellfs/shellfs.h"
#include "sandbox/wire/endpoint.h"
#include "sbx/strv.h"

#define SBX__REMOTE_TOKEN_MAX 64
#define SBX__REMOTE_RUN_MAX   ((size_t)16 << 20) /* output of the file script's commands */

struct sbx__remote_session {
    struct sbx_session base;
    struct sbx__endpoint *ep; /* a reference */
    char token[SBX__REMOTE_TOKEN_MAX + 1];
    json_t *state;
    struct sbx__shellfs fs;
    struct sbx__shellfs_copy ws;
    json_t *conn; /* the client's options (node, node_ca, node_cert, node_key): a reference */
};

/* client.c: one JSON request; token (may be NULL) in the Sbx-Token header line; a status >= 400
 * is the node's error ({"code", "message"}) with the code it names. *out: the parsed body,
 * caller owns. */
int sbx__remote_call(struct sbx__endpoint *ep, const char *method, const char *path,
                     const char *token, const json_t *body, json_t **out, struct sbx_error *err);
/* A GET whose 2xx body is bytes (at most max) appended to out. */
int sbx__remote_get_bytes(struct sbx__endpoint *ep, const char *path, const char *token, size_t max,
                          struct sbx_buf *out, struct sbx_error *err);

/* lifecycle.c: stats (the node's figures, its workspace's disk use included) and log_open (the
 * last 4 MiB of the sandbox's log on the node, in a sealed memory file: it does not grow). */
int sbx__remote_stats(struct sbx_session *s, struct sbx_session_stats *out, struct sbx_error *err);
int sbx__remote_log_open(struct sbx_session *s, int *out_fd, struct sbx_error *err);

/* ports.c: resolve_port. The node is asked whether something listens on the port, then a relay
 * process of this host (the sbx program run with SBX__REMOTE_RELAY_VERB) listens on
 * 127.0.0.1:HOSTPORT and carries each connection over its own portforward.k8s.io WebSocket to
 * the node; it mints its own token with the harness's certificate (none is on its command
 * line) and ends when its record (<runtime base>/remote/<id>/ports/<port>) is removed or the
 * node says the sandbox is gone. */
#define SBX__REMOTE_RELAY_VERB "__remote-relay"
int sbx__remote_resolve_port(struct sbx_session *s, int port, char **out_url,
                             struct sbx_error *err);
/* End the relays of sandbox id and remove their records (the sandbox was removed). */
void sbx__remote_forward_forget(const char *id);
/* The relay process: argv = {VERB, ID, PORT, NODE, CA, CERT, KEY}, its listening socket, record
 * and status pipe at fds 3, 4, 5. */
int sbx__remote_relay_main(int argc, char **argv);

/* exec.c */
int sbx__remote_exec_start(struct sbx_session *s, const struct sbx_exec_spec *spec, const char *cwd,
                           struct sbx_proc **out, struct sbx_error *err);
/* The file script's ops over commands (run; get: cat to a host fd; put: cat from one). */
extern const struct sbx__shellfs_ops sbx__remote_shellfs_ops;

#endif
