/* Private: the remote provider, a harness's side of an sbx-node daemon (docs/internals/node.md).
 * Control requests are REST calls on the node's endpoint (mutual TLS with the deployment's CA
 * and the harness's certificate) with the sandbox's capability token in an Sbx-Token header
 * line; commands are WebSockets with Kubernetes' v5.channel.k8s.io layout; files are REST
 * requests and snapshots tar streams of the node's (files.c), a create's manifest is
 * materialised through them (sandbox/shellfs/shellfs.h's fill, without its shell script). The token
 * lives in the session's memory only: a state holds the node's URL and the id, and a resume mints a
 * new token with the harness's certificate. */
#ifndef SBX_PROVIDERS_REMOTE_REMOTE_H
#define SBX_PROVIDERS_REMOTE_REMOTE_H

#include <pthread.h>
#include <stdint.h>

#include <jansson.h>

#include "sandbox/provider.h"
#include "sandbox/shellfs/shellfs.h"
#include "sandbox/wire/endpoint.h"
#include "sbx/strv.h"

#define SBX__REMOTE_TOKEN_MAX 64
#define SBX__REMOTE_FILE_MAX  ((uint64_t)1 << 30) /* a file read or written (the node's bound) */
#define SBX__REMOTE_TAR_MAX   ((int64_t)8 << 30)  /* a workspace tar put (the node's bound) */

/* The sbx-node protocol's major version this provider speaks: every request says it (a node
 * refuses another major with 400, naming both), and an answer naming another is refused here. */
#define SBX__REMOTE_VERSION        "1"
#define SBX__REMOTE_VERSION_HEADER "Sbx-Node-Version: " SBX__REMOTE_VERSION

struct sbx__remote_session {
    struct sbx_session base;
    struct sbx__endpoint *ep; /* a reference */
    /* The token, renewed when the node no longer takes it (it expired, or was one of too many):
     * read and replaced under token_lock, as threads share a session. */
    pthread_mutex_t token_lock;
    char token[SBX__REMOTE_TOKEN_MAX + 1];
    json_t *state;
    json_t *conn; /* the client's options (node, node_ca, node_cert, node_key): a reference */
};

/* A request of the session's with its token: line is the "Sbx-Token: ..." header line. */
typedef int sbx__remote_token_op(void *ud, const char *line, struct sbx_error *err);
/* op with the session's token, and once more with a fresh one when the node refused it (expired,
 * or dropped for newer ones), unless once (a request whose body cannot be sent twice). err may
 * be NULL. */
int sbx__remote_with_token(struct sbx__remote_session *s, int once, sbx__remote_token_op *op,
                           void *ud, struct sbx_error *err);
/* sbx__remote_call and sbx__remote_get_bytes for the session's sandbox, with its token, renewed
 * and tried once more when the node refuses it. */
int sbx__remote_session_call(struct sbx__remote_session *s, const char *method, const char *path,
                             const json_t *body, json_t **out, struct sbx_error *err);
int sbx__remote_session_get_bytes(struct sbx__remote_session *s, const char *path, size_t max,
                                  struct sbx_buf *out, struct sbx_error *err);

/* client.c: one JSON request; token (may be NULL) in the Sbx-Token header line; a status >= 400
 * is the node's error ({"code", "message"}) with the code it names. *out: the parsed body,
 * caller owns. */
int sbx__remote_call(struct sbx__endpoint *ep, const char *method, const char *path,
                     const char *token, const json_t *body, json_t **out, struct sbx_error *err);
/* The node's Sbx-Node-Version answer (NULL: not given, as from a node that predates it): 0
 * when its major is SBX__REMOTE_VERSION, else SBX_E_UNSUPPORTED naming both versions. */
int sbx__remote_check_version(struct sbx__endpoint *ep, const char *answered,
                              struct sbx_error *err);
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

/* client.c: the error of a node's answer with an error status (its {"code", "message"}). */
struct sbx__http_resp;
int sbx__remote_error(struct sbx__endpoint *ep, const struct sbx__http_resp *resp, const char *what,
                      struct sbx_error *err);

/* files.c: the session's file ops (provider.h) and workspace tars on the node's REST. */
int sbx__remote_read_open(struct sbx_session *s, const char *path, int *out_fd, uint64_t *out_size,
                          struct sbx_error *err);
int sbx__remote_write(struct sbx_session *s, const char *path, const struct sbx_file_reader *r,
                      uint64_t max, mode_t mode, int flags, struct sbx_error *err);
int sbx__remote_ls(struct sbx_session *s, const char *path, struct sbx_dirlist *out,
                   struct sbx_error *err);
int sbx__remote_stat(struct sbx_session *s, const char *path, struct sbx_dirent *out,
                     struct sbx_error *err);
int sbx__remote_mkdir(struct sbx_session *s, const char *path, int flags, struct sbx_error *err);
int sbx__remote_rm(struct sbx_session *s, const char *path, int flags, struct sbx_error *err);
int sbx__remote_chmod(struct sbx_session *s, const char *path, mode_t mode, struct sbx_error *err);
int sbx__remote_workspace_export(struct sbx_session *s, int out_fd, struct sbx_error *err);
int sbx__remote_workspace_import(struct sbx_session *s, int in_fd, struct sbx_error *err);

/* exec.c */
int sbx__remote_exec_start(struct sbx_session *s, const struct sbx_exec_spec *spec, const char *cwd,
                           struct sbx_proc **out, struct sbx_error *err);

#endif
