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

#include <stdint.h>

#include <jansson.h>

#include "sandbox/provider.h"
#include "sandbox/shellfs/shellfs.h"
#include "sandbox/wire/endpoint.h"
#include "sbx/strv.h"

#define SBX__REMOTE_TOKEN_MAX 64
#define SBX__REMOTE_FILE_MAX  ((uint64_t)1 << 30) /* a file read or written (the node's bound) */
#define SBX__REMOTE_TAR_MAX   ((int64_t)8 << 30)  /* a workspace tar put (the node's bound) */

struct sbx__remote_session {
    struct sbx_session base;
    struct sbx__endpoint *ep; /* a reference */
    char token[SBX__REMOTE_TOKEN_MAX + 1];
    json_t *state;
};

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
