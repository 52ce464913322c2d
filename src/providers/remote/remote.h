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
};

/* exec.c */
int sbx__remote_exec_start(struct sbx_session *s, const struct sbx_exec_spec *spec, const char *cwd,
                           struct sbx_proc **out, struct sbx_error *err);
/* The file script's ops over commands (run; get: cat to a host fd; put: cat from one). */
extern const struct sbx__shellfs_ops sbx__remote_shellfs_ops;

#endif
