/* The LXD provider's private interface: the REST client on the remote layer (api.c), commands
 * (exec.c, relay.c), files (files.c), the workspace copied in and out for sbx's snapshots
 * (workspace.c), instances as sessions (instance.c) and the client (client.c, create.c).
 * Only this folder and its unit tests include it. docs/internals/lxd-provider.md. */
#ifndef SBX_PROVIDERS_LXD_LXD_H
#define SBX_PROVIDERS_LXD_LXD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <jansson.h>

#include "sandbox/provider.h"
#include "sandbox/wire/conn.h"
#include "sandbox/wire/endpoint.h"
#include "sandbox/wire/ws.h"
#include "sbx/buf.h"
#include "sbx/error.h"
#include "sbx/lxd.h"
#include "sbx/strv.h"

#define SBX__LXD_ID_BYTES    8 /* sandbox ids: 16 hex digits, like local ones */
#define SBX__LXD_ID_LEN      (2 * SBX__LXD_ID_BYTES)
#define SBX__LXD_PREFIX      "sbx-" /* instance name: sbx-<id> */
#define SBX__LXD_BODY_MAX    ((size_t)16 << 20)
#define SBX__LXD_DEFAULT_MS  60000
#define SBX__LXD_PORT        8443
#define SBX__LXD_MESSAGE_MAX ((size_t)8 << 20) /* one WebSocket message */

/* ---------------------------------------------------------------------------------------------
 * The server (api.c) */

/* Where the server is and how to talk to it: the remote layer's endpoint (its URL, the client
 * certificate, the pinned server: src/sandbox/wire/endpoint.h), shared by reference with the
 * sessions and commands that outlive the client. Never holds a key's bytes: paths only, read
 * by libcurl when it connects. */
struct sbx__lxd_server {
    struct sbx__endpoint *ep;
    char *url;         /* for messages and states: "unix:///path" or "https://host:port" */
    char *sock;        /* the unix socket, or NULL (https) */
    char *client_cert; /* its path, for messages */
    char *project;
    int64_t timeout_ms;
};

/* Check and copy the endpoint (NULL: the default sockets, see sbx/lxd.h) and the TLS files. */
int sbx__lxd_server_init(struct sbx__lxd_server *sv, const struct sbx_lxd_options *o,
                         struct sbx_error *err);
void sbx__lxd_server_release(struct sbx__lxd_server *sv);
void sbx__lxd_server_copy(struct sbx__lxd_server *dst, const struct sbx__lxd_server *src);

/* s percent-encoded for a query parameter or a path segment ('/' kept when keep_slash).
 * Caller frees. */
char *sbx__lxd_escape(const char *s, int keep_slash);

/* A header line of a file request ("X-LXD-uid: 1000"). */
#define SBX__LXD_MAX_HEADERS 8

struct sbx__lxd_req {
    const char *method; /* "GET", "POST", "PUT", "PATCH", "DELETE", "HEAD" */
    const char *path;   /* "/1.0/instances/x/files?path=%2Fa" (the project is added) */
    const json_t *json; /* a JSON body, or NULL */
    int upload_fd;      /* or a body read from this fd (-1: none), upload_size bytes */
    uint64_t upload_size;
    const char *headers[SBX__LXD_MAX_HEADERS + 1]; /* extra request header lines, NULL-ended */
    int download_fd;                               /* a 2xx body into this fd (-1: resp->body) */
    uint64_t max_body;                             /* 0: SBX__LXD_BODY_MAX */
};

/* What a file request's answer says about the file (X-LXD-* headers). */
struct sbx__lxd_fmeta {
    int have; /* X-LXD-type came */
    enum sbx_file_type type;
    long long uid, gid; /* -1 when absent */
    mode_t mode;        /* permission bits */
    int64_t mtime_ns;   /* X-LXD-modified, 0 when absent */
    int64_t total;      /* the file's size from Content-Range ("bytes 0-0/N"), -1 when absent */
};

struct sbx__lxd_resp {
    long status;
    struct sbx_buf body;
    struct sbx__lxd_fmeta meta;
};

void sbx__lxd_resp_init(struct sbx__lxd_resp *r);
void sbx__lxd_resp_release(struct sbx__lxd_resp *r);
/* One call. Transport failures are errors; any HTTP status is returned in resp. */
int sbx__lxd_call(const struct sbx__lxd_server *sv, const struct sbx__lxd_req *req,
                  struct sbx__lxd_resp *resp, struct sbx_error *err);
/* The server's error for an answer (its envelope's "error", or the status): 404
 * SBX_E_NOTFOUND, 403 and 401 SBX_E_PERM, 409 SBX_E_EXISTS, other 4xx SBX_E_INVAL, else
 * SBX_E_SANDBOX; the message is "LXD at 'URL' says: ...". */
int sbx__lxd_status_error(const struct sbx__lxd_server *sv, long status, const struct sbx_buf *body,
                          struct sbx_error *err);
/* Parse a standard answer (its envelope): *metadata (may be NULL) the "metadata" of a sync
 * answer or the operation of an async one; *op (may be NULL) the operation's id of an async
 * answer, else NULL. Errors as sbx__lxd_status_error. */
int sbx__lxd_envelope(const struct sbx__lxd_server *sv, long status, const struct sbx_buf *body,
                      json_t **metadata, char **op, struct sbx_error *err);
/* A JSON call: the two above together. */
int sbx__lxd_json(const struct sbx__lxd_server *sv, const char *method, const char *path,
                  const json_t *body, json_t **metadata, char **op, struct sbx_error *err);
/* Wait (at most timeout_ms; < 0: the server's timeout) for operation op to end: *out (may be
 * NULL) its metadata object ({"status", "err", "metadata": {...}}), set whenever the server
 * described the operation, also when it failed (the caller owns it then too). An operation
 * that failed is SBX_E_SANDBOX with its "err"; one still running at the deadline
 * SBX_E_TIMEOUT. */
int sbx__lxd_op_wait(const struct sbx__lxd_server *sv, const char *op, int64_t timeout_ms,
                     json_t **out, struct sbx_error *err);
/* What an operation's description (md, from its wait; rc the wait's own result) says: 0 for
 * "Success", else the errors of sbx__lxd_op_wait. */
int sbx__lxd_op_result(const struct sbx__lxd_server *sv, const char *op, int rc, const json_t *md,
                       struct sbx_error *err);
/* sbx__lxd_json, then the wait of an async answer (a sync one is returned as is). */
int sbx__lxd_json_wait(const struct sbx__lxd_server *sv, const char *method, const char *path,
                       const json_t *body, json_t **out, struct sbx_error *err);
/* GET /1.0: the server answers and trusts this client; *clustered whether it is a cluster
 * member (may be NULL). */
int sbx__lxd_check_server(const struct sbx__lxd_server *sv, int *clustered, struct sbx_error *err);

/* A WebSocket of the server (path under /1.0, query included; the project is added), opened
 * through the remote layer (src/sandbox/wire/conn.h). Blocks up to the server's timeout. */
int sbx__lxd_ws_open(const struct sbx__lxd_server *sv, const char *path, struct sbx__wsconn **out,
                     struct sbx_error *err);

/* ---------------------------------------------------------------------------------------------
 * Sessions */

/* A manifest account the instance has: its name and ids there. */
struct sbx__lxd_account {
    char *name;
    long uid, gid;
    char *home; /* from the instance's /etc/passwd, or NULL */
};

struct sbx__lxd_session {
    struct sbx_session base;
    struct sbx__lxd_server sv;
    char *name;                     /* the instance: sbx-<id> */
    char *location;                 /* its cluster member, "" when not clustered or unknown */
    struct sbx__lxd_account owner;  /* who owns what sbx writes and runs commands by default */
    struct sbx__lxd_account *users; /* the manifest's account users (run_as) */
    size_t n_users;
    int setsid; /* the image has setsid: a command's preamble leads a process group of its own */
    json_t *state;
    char *ws_dir; /* the workspace copied to this host for a snapshot, or NULL */
    int ws_fd;    /* its fd, -1 */
};

/* A command run to completion as root (fixed argv, never a shell line built from input): its
 * exit code and output (each at most max bytes). Input from in/in_len, or streamed from
 * in_fd (>= 0); stdout into out_fd (>= 0) instead of out, at most out_max bytes. */
struct sbx__lxd_run {
    int code;
    struct sbx_buf out, err;
    const void *in;
    size_t in_len;
    int in_fd;
    int out_fd;
    uint64_t out_max;
};
void sbx__lxd_run_init(struct sbx__lxd_run *r, size_t max);
void sbx__lxd_run_release(struct sbx__lxd_run *r);
int sbx__lxd_exec_run(struct sbx__lxd_session *s, const char *const *argv, struct sbx__lxd_run *run,
                      struct sbx_error *err);

int sbx__lxd_exec_start(struct sbx_session *bs, const struct sbx_exec_spec *spec, const char *cwd,
                        struct sbx_proc **out, struct sbx_error *err);

/* Files (files.c): the session file ops. */
int sbx__lxd_read_open(struct sbx_session *bs, const char *path, int *out_fd, uint64_t *out_size,
                       struct sbx_error *err);
int sbx__lxd_write(struct sbx_session *bs, const char *path, const struct sbx_file_reader *r,
                   uint64_t max, mode_t mode, int flags, struct sbx_error *err);
int sbx__lxd_ls(struct sbx_session *bs, const char *path, struct sbx_dirlist *out,
                struct sbx_error *err);
int sbx__lxd_stat(struct sbx_session *bs, const char *path, struct sbx_dirent *out,
                  struct sbx_error *err);
int sbx__lxd_mkdir(struct sbx_session *bs, const char *path, int flags, struct sbx_error *err);
int sbx__lxd_rm(struct sbx_session *bs, const char *path, int flags, struct sbx_error *err);
int sbx__lxd_chmod(struct sbx_session *bs, const char *path, mode_t mode, struct sbx_error *err);
int sbx__lxd_chgrp(struct sbx_session *bs, const char *path, const char *group,
                   struct sbx_error *err);
/* Resolve the workspace path rel inside the instance, following symlinks only while they stay
 * in the workspace (SBX_E_PERM for one leading out). follow_final: also the last component.
 * *out: the absolute path (caller frees); *exists whether it exists. */
int sbx__lxd_resolve(struct sbx__lxd_session *s, const char *rel, int follow_final, char **out,
                     int *exists, struct sbx_error *err);
/* POST a file's content (fd, size bytes) to abs, owned by the session's owner, mode. */
int sbx__lxd_file_put(struct sbx__lxd_session *s, const char *abs, int fd, uint64_t size,
                      mode_t mode, int append, struct sbx_error *err);

/* The workspace copied out to a private host directory for sbx's snapshots (the fd is borrowed
 * until the next call or the session's end), and a snapshot restored into the workspace. */
int sbx__lxd_workspace_fd(struct sbx_session *bs, int *out, struct sbx_error *err);
void sbx__lxd_workspace_drop(struct sbx__lxd_session *s);
/* The remote layer's tar streams of the workspace (sandbox/provider.h). */
int sbx__lxd_workspace_export(struct sbx_session *bs, int out_fd, struct sbx_error *err);
int sbx__lxd_workspace_import(struct sbx_session *bs, int in_fd, struct sbx_error *err);
struct sbx_snapshot_store;
int sbx__lxd_workspace_restore(struct sbx__lxd_session *s, struct sbx_snapshot_store *st,
                               const char *ref, sbx_progress_fn *progress, void *progress_data,
                               struct sbx_error *err);

/* Instances (instance.c). */
/* The path of instance name's resource: "/1.0/instances/NAME" + rest. Caller frees. */
char *sbx__lxd_inst_path(const char *name, const char *rest);
/* A session on the instance described by inst (GET /1.0/instances/NAME). */
int sbx__lxd_session_from(const struct sbx__lxd_server *sv, const json_t *inst,
                          struct sbx__lxd_session **out, struct sbx_error *err);
/* Is this text a sandbox id (prefix: a prefix of one)? */
int sbx__lxd_valid_id(const char *id, int prefix);
/* Stop (forced) and delete the instance, waiting for it. */
int sbx__lxd_inst_delete(const struct sbx__lxd_server *sv, const char *name, struct sbx_error *err);
/* Free a session made by sbx__lxd_session_from (NULL ok). */
void sbx__lxd_session_free(struct sbx__lxd_session *s);
/* The instance's loopback interface up: an image's init need not bring it up (busybox's does
 * not), and without it nothing in the sandbox reaches 127.0.0.1. Run as root at create and at
 * every start. */
#define SBX__LXD_LOOPBACK_UP "ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up 2>/dev/null"
/* Run SBX__LXD_LOOPBACK_UP in a started instance. */
int sbx__lxd_inst_boot(const struct sbx__lxd_server *sv, const char *name, const char *id,
                       struct sbx_error *err);
/* Start or stop the instance (action "start", "stop"), waiting for it. */
int sbx__lxd_inst_state(const struct sbx__lxd_server *sv, const char *name, const char *action,
                        struct sbx_error *err);
/* The member's address a port proxy on it listens on (port_bind, else the member's own from
 * the cluster, else 127.0.0.1). *out: caller frees. */
int sbx__lxd_port_resolve(struct sbx__lxd_session *s, int port, char **out_url,
                          struct sbx_error *err);

/* Temporary host file (unlinked) for staging. */
int sbx__lxd_tmpfile(int *out, struct sbx_error *err);

#endif
