/* The e2b provider's private interface: the service's configuration and HTTP calls (http.c),
 * the control plane (client.c), commands through envd's process service (exec.c), files
 * through envd's /files and fixed commands (files.c), and workspace snapshots as tar streams
 * (snap.c). Only this folder and its unit tests include it (docs/internals/hosted-providers.md).
 *
 * Secrets: the API key and each sandbox's envd access token live only in memory here (wiped
 * when freed); neither is ever put in a session state, a record, a message or a log. */
#ifndef SBX_PROVIDERS_E2B_E2B_H
#define SBX_PROVIDERS_E2B_E2B_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "sandbox/provider.h"
#include "sandbox/shellfs/shellfs.h"
#include "sbx/buf.h"
#include "sbx/error.h"
#include "sbx/strv.h"

#define SBX__E2B_API_DEFAULT    "https://api.e2b.app"
#define SBX__E2B_DOMAIN_DEFAULT "e2b.app"
#define SBX__E2B_ENVD_PORT      49983
#define SBX__E2B_HOME           "/home/user"
#define SBX__E2B_USER           "user"
#define SBX__E2B_BODY_MAX       ((size_t)16 << 20)
#define SBX__E2B_ID_MAX         64
#define SBX__E2B_CALL_MS        60000
#define SBX__E2B_RETRIES        3
#define SBX__E2B_RETRY_WAIT_MAX 60

/* How to reach the service: shared (refcounted) by a client, its sessions and their commands. */
struct sbx__e2b_conf {
    int refs;          /* atomic */
    char *api_url;     /* no trailing slash */
    char *sandbox_url; /* one envd URL for every sandbox (E2B_SANDBOX_URL), or NULL */
    char *domain;      /* for https://{port}-{id}.{domain} */
    char *api_key;     /* secret: wiped on release; NULL until needed and found */
    char *key_what;    /* where the key comes from, for messages ("$E2B_API_KEY") */
    json_t *key_ref;   /* the key's reference ({"env": VAR} / {"file": PATH}) */
    char *ca_file;     /* a CA bundle for HTTPS, or NULL: the system's */
    int64_t call_ms;   /* one API or unary call */
};

struct sbx__e2b_conf *sbx__e2b_conf_ref(struct sbx__e2b_conf *c);
void sbx__e2b_conf_unref(struct sbx__e2b_conf *c);
/* The API key, read from its reference the first time. SBX_E_PERM naming where it was looked
 * for when it is missing. */
int sbx__e2b_conf_key(struct sbx__e2b_conf *c, struct sbx_error *err);

/* ---------------------------------------------------------------------------------------------
 * HTTP (http.c) */

struct sbx__e2b_req {
    const char *method;
    const char *url;
    const char *const *headers; /* NULL-terminated "Name: value" lines, or NULL */
    const void *body;           /* a body in memory (body_len bytes), or NULL */
    size_t body_len;
    int upload_fd; /* or a body read from this fd (-1: none), upload_size bytes */
    uint64_t upload_size;
    int download_fd;    /* a 2xx body into this fd (-1: into resp->body, or on_data) */
    uint64_t max_body;  /* 0: SBX__E2B_BODY_MAX (never for on_data) */
    int64_t timeout_ms; /* 0: none (a stream) */
    /* A 2xx body piece by piece (a stream); returns 0, or -1 to abort the transfer. */
    int (*on_data)(void *ctx, const uint8_t *p, size_t n);
    void *ctx;
    const volatile int *abort; /* non-zero: the transfer is dropped within a second */
    const char *ca_file;
};

struct sbx__e2b_resp {
    long status;
    struct sbx_buf body; /* an error body, or a 2xx body without download_fd and on_data */
    long retry_after;    /* Retry-After in whole seconds, -1 when absent or not a number */
    int aborted;         /* on_data or abort stopped it */
};

void sbx__e2b_resp_init(struct sbx__e2b_resp *r);
void sbx__e2b_resp_release(struct sbx__e2b_resp *r);
/* One request. Transport failures are SBX_E_HTTP (SBX_E_TIMEOUT for the timeout); any HTTP
 * status is returned in resp. */
int sbx__e2b_http(const struct sbx__e2b_req *req, struct sbx__e2b_resp *resp,
                  struct sbx_error *err);

/* A control-plane call (path below the API URL, query included) with the key: JSON in and
 * out. A 429 with Retry-After and a 503 are retried (at most SBX__E2B_RETRIES times, a wait of
 * at most SBX__E2B_RETRY_WAIT_MAX s). An error status is an error with the service's message:
 * 401/403 SBX_E_PERM (the key), 404 SBX_E_NOTFOUND, 409 SBX_E_EXISTS, 429 SBX_E_API (rate or
 * quota), 400 SBX_E_INVAL, else SBX_E_API. *status and *out (may be NULL) as answered. */
int sbx__e2b_api(struct sbx__e2b_conf *c, const char *method, const char *path, const json_t *body,
                 long *status, json_t **out, struct sbx_error *err);

/* ---------------------------------------------------------------------------------------------
 * envd of one sandbox (http.c) */

struct sbx__e2b_envd {
    struct sbx__e2b_conf *conf; /* a reference */
    char *id;
    char *base;               /* envd's base URL (no trailing slash) */
    char *token;              /* the access token (secret, wiped on release), or NULL */
    char *hdr_id, *hdr_token; /* header lines */
};

/* envd of sandbox id as the service named it (domain may be NULL: the configured one). */
void sbx__e2b_envd_init(struct sbx__e2b_envd *e, struct sbx__e2b_conf *c, const char *id,
                        const char *domain, const char *token);
void sbx__e2b_envd_copy(struct sbx__e2b_envd *dst, const struct sbx__e2b_envd *src);
void sbx__e2b_envd_release(struct sbx__e2b_envd *e);

/* A unary Connect call (JSON codec): "/process.Process/SendInput" etc. *out (may be NULL) the
 * answer. A failed call is the Connect error (sbx__connect_error); 502 from the service's proxy
 * is SBX_E_SANDBOX "sandbox 'id' is gone". */
int sbx__e2b_unary(const struct sbx__e2b_envd *e, const char *method, const json_t *msg,
                   json_t **out, struct sbx_error *err);

/* A server-stream Connect call: each message's JSON to on_msg (return 0, or -code to stop with
 * that error); 0 once the end-of-stream envelope came without an error. */
typedef int sbx__e2b_msg_fn(void *ctx, const json_t *msg, struct sbx_error *err);
int sbx__e2b_stream(const struct sbx__e2b_envd *e, const char *method, const json_t *msg,
                    sbx__e2b_msg_fn *on_msg, void *ctx, const volatile int *abort,
                    struct sbx_error *err);

/* GET /files?path=ABS (identity encoding) into fd, at most max bytes. */
int sbx__e2b_file_get(const struct sbx__e2b_envd *e, const char *abs, int fd, uint64_t max,
                      struct sbx_error *err);
/* POST /files?path=ABS as application/octet-stream from fd (size bytes). */
int sbx__e2b_file_put(const struct sbx__e2b_envd *e, const char *abs, int fd, uint64_t size,
                      struct sbx_error *err);

/* s percent-encoded for a URL query or path ('/' kept). Caller frees. */
char *sbx__e2b_escape(const char *s);

/* ---------------------------------------------------------------------------------------------
 * Sessions (client.c, exec.c, files.c, snap.c) */

struct sbx__e2b_session {
    struct sbx_session base;
    struct sbx__e2b_envd envd;
    int64_t timeout_s;   /* the sandbox's life from its last use */
    int64_t extended_ns; /* when it was last set (monotonic; atomic) */
    json_t *state;
    struct sbx__shellfs_copy ws; /* the workspace copied to this host for a snapshot */
};

/* A short fixed command run to completion (argv, never a shell line built from input): its
 * exit code and output (each at most the size the run was made with). */
int sbx__e2b_exec_run(const struct sbx__e2b_envd *e, const char *const *argv,
                      struct sbx__shell_run *out, struct sbx_error *err);
/* The session's workspace as the shared file and snapshot code sees it (files.c). */
struct sbx__shellfs sbx__e2b_fs(struct sbx__e2b_session *s);

/* In use: once a quarter of its life has passed since the last time, set the sandbox's end
 * to its timeout from now (POST /sandboxes/{id}/timeout), so a sandbox lives as long as it is
 * used. Failures are left to the command that follows. */
void sbx__e2b_keepalive(struct sbx__e2b_session *s);

int sbx__e2b_exec_start(struct sbx_session *bs, const struct sbx_exec_spec *spec, const char *cwd,
                        struct sbx_proc **out, struct sbx_error *err);

/* Snapshots go through src/sandbox/shellfs/ (files.c gives it the session's copy): the
 * workspace as a tar out of the sandbox, checked by the snapshot store's import and restored
 * into a private host directory (sbx__shellfs_s_workspace_fd). */

/* Into a buffer without a limit: an append cannot fail then (allocation failure aborts). */
static inline void sbx__e2b_keep(int rc)
{
    (void)rc;
}

/* The number of a Go signal name as envd's end event says it ("killed" -> 9), or 0. */
int sbx__e2b_signal_number(const char *name);

#endif
