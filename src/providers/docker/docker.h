/* The Docker provider's private interface: the Engine API client (api.c), the parsers of what
 * the engine sends (stream.c), commands (exec.c) and files (files.c). Only this folder and its
 * unit tests include it. */
#ifndef SBX_SANDBOX_DOCKER_DOCKER_H
#define SBX_SANDBOX_DOCKER_DOCKER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <jansson.h>

#include "sandbox/provider.h"
#include "sandbox/wire/conn.h"
#include "sbx/buf.h"
#include "sbx/docker.h"
#include "sbx/error.h"
#include "sbx/strv.h"

/* The API version every path is pinned to; older engines are refused. */
#define SBX__DK_API        "/v1.41"
#define SBX__DK_API_MAJOR  1
#define SBX__DK_API_MINOR  41
#define SBX__DK_ID_BYTES   8 /* sandbox ids: 16 hex digits, like local ones */
#define SBX__DK_BODY_MAX   ((size_t)16 << 20)
#define SBX__DK_LABEL_MAX  ((size_t)64 << 10)
#define SBX__DK_DEFAULT_MS 60000

/* One engine: how to reach it (the remote layer's endpoint: its unix socket, or tcp:// with
 * TLS), what messages call it, how long an API call may take. */
struct sbx__dk_engine {
    struct sbx__endpoint *ep; /* a reference */
    char *sock;               /* the unix socket's path, or NULL for a tcp:// engine */
    char *where;              /* the socket path or the tcp:// URL, for messages */
    int64_t timeout_ms;
};

/* A tcp:// engine's TLS files (each may be NULL). */
struct sbx__dk_tls {
    const char *ca, *cert, *key;
};

/* host: "unix://" + path, an absolute path, or "tcp://HOST:PORT" (NULL: $DOCKER_HOST, else
 * /var/run/docker.sock). A tcp:// engine speaks TLS with tls's files, else with those of
 * $DOCKER_CERT_PATH when $DOCKER_TLS_VERIFY is set (as the docker CLI reads them), else plain
 * HTTP. SBX_E_UNSUPPORTED for another scheme (ssh://), SBX_E_INVAL for TLS files with a unix
 * socket. */
int sbx__dk_engine_init(struct sbx__dk_engine *e, const char *host, const struct sbx__dk_tls *tls,
                        int64_t timeout_ms, struct sbx_error *err);
void sbx__dk_engine_release(struct sbx__dk_engine *e);
/* Copy of e (for a session that outlives its client). */
void sbx__dk_engine_copy(struct sbx__dk_engine *dst, const struct sbx__dk_engine *src);

/* The hard limits of open files and processes a container may be given: this process's, and
 * the engine's own when it runs on this host and is readable (its peer credentials). */
void sbx__dk_engine_limits(const struct sbx__dk_engine *e, uint64_t *nofile, uint64_t *nproc);

/* The error for a failed connection to e's socket (errnum from connect): daemon not running,
 * socket missing, permission denied. */
int sbx__dk_connect_error(const struct sbx__dk_engine *e, int errnum, struct sbx_error *err);

struct sbx__dk_req {
    const char *method; /* "GET", "POST", "PUT", "DELETE", "HEAD" */
    const char *path;   /* below the pinned version: "/containers/json" (query included) */
    const json_t *json; /* request body as JSON, or NULL */
    int upload_fd;      /* or a body read from this fd (-1: none), upload_size bytes */
    uint64_t upload_size;
    int upload_unknown;       /* the upload's size is not known: sent chunked */
    const char *content_type; /* of an upload: "application/x-tar" */
    int download_fd;          /* response body into this fd (-1: into resp->body) */
    uint64_t max_body;        /* 0: SBX__DK_BODY_MAX */
    const char *header;       /* the response header to keep (case-insensitive), or NULL */
};

struct sbx__dk_resp {
    long status;
    struct sbx_buf body;
    char *header; /* the value of req.header, or NULL; owned */
};

void sbx__dk_resp_init(struct sbx__dk_resp *r);
void sbx__dk_resp_release(struct sbx__dk_resp *r);
/* One API call. Transport failures are errors; any HTTP status is returned in resp. */
int sbx__dk_call(const struct sbx__dk_engine *e, const struct sbx__dk_req *req,
                 struct sbx__dk_resp *resp, struct sbx_error *err);
/* A JSON call: status >= 400 becomes an error carrying the engine's message (404
 * SBX_E_NOTFOUND, 409 SBX_E_EXISTS, other 4xx SBX_E_INVAL, else SBX_E_SANDBOX); *out (may be
 * NULL) the parsed body, or NULL when empty. *status (may be NULL) the status. */
int sbx__dk_json(const struct sbx__dk_engine *e, const char *method, const char *path,
                 const json_t *body, long *status, json_t **out, struct sbx_error *err);
/* The engine's error for a response (its "message", or the status). */
int sbx__dk_status_error(long status, const struct sbx_buf *body, struct sbx_error *err);
/* GET /version: refuse an engine older than the pinned API version. */
int sbx__dk_check_version(const struct sbx__dk_engine *e, struct sbx_error *err);
/* "1.41" >= 1.41? (unit-tested) */
int sbx__dk_version_ok(const char *v);

/* POST path with body and take the connection over (HTTP upgrade to a raw stream). *out: the
 * connection (bytes the engine sent after its answer come first), caller owns
 * (sbx__conn_free). */
int sbx__dk_hijack(const struct sbx__dk_engine *e, const char *path, const json_t *body,
                   struct sbx__conn **out, struct sbx_error *err);

/* X-Docker-Container-Path-Stat: base64 of {"name","size","mode" (Go's FileMode),"mtime",
 * "linkTarget"}. */
struct sbx__dk_pstat {
    enum sbx_file_type type;
    mode_t mode; /* permission bits with S_ISUID/S_ISGID/S_ISVTX */
    uint64_t size;
    int64_t mtime_ns;
    char *link_target; /* owned: the engine's resolution of a symlink (absolute), else NULL */
};
/* The session state (docs/internals/docker-provider.md) that a container's inspect document
 * (GET /containers/{id}/json: hostile, the engine's) describes through its io.sbx.* labels.
 * *out: caller owns. SBX_E_SANDBOX when it is not an sbx sandbox's container. */
int sbx__dk_state_from_inspect(const json_t *insp, json_t **out, struct sbx_error *err);
int sbx__dk_pstat_decode(const char *header, struct sbx__dk_pstat *out, struct sbx_error *err);
void sbx__dk_pstat_release(struct sbx__dk_pstat *p);

/* ---------------------------------------------------------------------------------------------
 * Sessions */

struct sbx__dk_session {
    struct sbx_session base;
    struct sbx__dk_engine eng;
    char *container; /* full container id */
    char *image;
    char *owner; /* who owns what sbx writes and runs commands by default ("" : the image's) */
    json_t *state;
    struct sbx_strv users; /* the manifest's account users (run_as), may be empty */
};

/* A short command run to completion as root (fixed argv, never a shell line built from
 * input): its exit code and output (each at most max bytes; stdin: input if not NULL). */
struct sbx__dk_run {
    int code;
    struct sbx_buf out, err;
};
void sbx__dk_run_init(struct sbx__dk_run *r, size_t max);
void sbx__dk_run_release(struct sbx__dk_run *r);
int sbx__dk_exec_run(struct sbx__dk_session *s, const char *const *argv, const void *input,
                     size_t input_len, struct sbx__dk_run *out, struct sbx_error *err);

int sbx__dk_exec_start(struct sbx_session *bs, const struct sbx_exec_spec *spec, const char *cwd,
                       struct sbx_proc **out, struct sbx_error *err);

/* Files (files.c): the session file ops. */
int sbx__dk_read_open(struct sbx_session *bs, const char *path, int *out_fd, uint64_t *out_size,
                      struct sbx_error *err);
int sbx__dk_write(struct sbx_session *bs, const char *path, const struct sbx_file_reader *r,
                  uint64_t max, mode_t mode, int flags, struct sbx_error *err);
int sbx__dk_ls(struct sbx_session *bs, const char *path, struct sbx_dirlist *out,
               struct sbx_error *err);
int sbx__dk_stat(struct sbx_session *bs, const char *path, struct sbx_dirent *out,
                 struct sbx_error *err);
int sbx__dk_mkdir(struct sbx_session *bs, const char *path, int flags, struct sbx_error *err);
int sbx__dk_rm(struct sbx_session *bs, const char *path, int flags, struct sbx_error *err);
int sbx__dk_chmod(struct sbx_session *bs, const char *path, mode_t mode, struct sbx_error *err);
int sbx__dk_chgrp(struct sbx_session *bs, const char *path, const char *group,
                  struct sbx_error *err);

/* The workspace as a tar stream (the session ops workspace_export and workspace_import,
 * sandbox/provider.h): the archive API of the root, straight to and from the snapshot store. */
int sbx__dk_workspace_export(struct sbx_session *bs, int out_fd, struct sbx_error *err);
int sbx__dk_workspace_import(struct sbx_session *bs, int in_fd, struct sbx_error *err);

/* Resolve the workspace path rel inside the container, following symlinks the engine reports
 * only while they stay in the workspace (SBX_E_PERM for one leading out). follow_final: also
 * the last component. *out: the absolute path in the container (caller frees); *exists
 * whether it exists (a missing component ends the walk: the rest is appended as given). */
int sbx__dk_resolve(struct sbx__dk_session *s, const char *rel, int follow_final, char **out,
                    int *exists, struct sbx_error *err);

/* s percent-encoded for a query parameter ('/' kept). Caller frees. */
char *sbx__dk_escape(const char *s);

/* A temporary host file (unlinked) for staging archives. */
int sbx__dk_tmpfile(int *out, struct sbx_error *err);

#endif
