/* The vercel provider's private interface: the service's configuration and REST calls
 * (api.c), commands as NDJSON log streams (exec.c), files through the service's tar.gz upload
 * and its read call plus the shared script (files.c), the control plane, sessions and the
 * provider entry (client.c). Only this folder includes it
 * (docs/internals/provider-vercel.md).
 *
 * Secrets: the token lives only in the endpoint (src/sandbox/wire/endpoint.h), read from its
 * reference the first time a call needs it; never in a state, a record, a message or a log. */
#ifndef SBX_PROVIDERS_VERCEL_VERCEL_H
#define SBX_PROVIDERS_VERCEL_VERCEL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "sandbox/provider.h"
#include "sandbox/shellfs/shellfs.h"
#include "sandbox/wire/endpoint.h"
#include "sandbox/wire/ndjson.h"
#include "sbx/buf.h"
#include "sbx/error.h"

#define SBX__VERCEL_API_DEFAULT "https://vercel.com/api"
#define SBX__VERCEL_ROOT        "/vercel/sandbox"
#define SBX__VERCEL_USER        "vercel-sandbox"
#define SBX__VERCEL_NAME_MAX    64
#define SBX__VERCEL_MAX_PORTS   4
#define SBX__VERCEL_LINE_MAX    ((size_t)4 << 20) /* one NDJSON line of a command's logs */

/* How to reach the service: shared (refcounted) by a client, its sessions and their commands. */
struct sbx__vercel_conf {
    int refs; /* atomic */
    pthread_mutex_t lock;
    char *api_url;   /* no trailing slash */
    char *team;      /* teamId of every request, or NULL (asked for when needed) */
    char *project;   /* projectId of create and get, or NULL */
    json_t *tok_ref; /* the token's reference */
    char *tok_what;  /* where it comes from, for messages ("$VERCEL_TOKEN") */
    char *ca_file;
    struct sbx__endpoint *ep; /* made on first use (it reads the token) */
};

struct sbx__vercel_conf *sbx__vercel_conf_ref(struct sbx__vercel_conf *c);
void sbx__vercel_conf_unref(struct sbx__vercel_conf *c);
/* The endpoint (made the first time: SBX_E_PERM when the token is missing), borrowed. */
int sbx__vercel_ep(struct sbx__vercel_conf *c, struct sbx__endpoint **out, struct sbx_error *err);
/* path with the team (teamId=...) and, when project, the project (projectId=...) added to its
 * query; caller frees. */
char *sbx__vercel_path(const struct sbx__vercel_conf *c, const char *path, int project);

/* A JSON call to path (the team, and with project the project, added to its query). An error status
 * is an error naming the service and what it said: 401/403 SBX_E_PERM (the token), 404
 * SBX_E_NOTFOUND, 410 SBX_E_SANDBOX (the session stopped), 400/422 SBX_E_INVAL, 409 SBX_E_EXISTS,
 * 429 (after the retries) SBX_E_API "rate limiting", else SBX_E_API. code (may be NULL, 64 bytes):
 * the service's error code ("snapshot_not_found"). *out (may be NULL): the answer. */
int sbx__vercel_api(struct sbx__vercel_conf *c, const char *method, const char *path, int project,
                    const json_t *body, json_t **out, char *code, struct sbx_error *err);
/* The error of an HTTP error status, as sbx__vercel_api words it. */
int sbx__vercel_status_error(struct sbx__vercel_conf *c, long status, const struct sbx_buf *body,
                             const char *what, char *code, struct sbx_error *err);

/* A command's NDJSON stream (src/sandbox/wire/ndjson.h) with NUL allowed in strings: a log
 * line's data is the command's output, which may hold NUL bytes. */
void sbx__vercel_lines_init(struct sbx__ndjson *l, sbx__ndjson_fn *fn, void *ud);

/* One sandbox's running session, as commands and files reach it. */
struct sbx__vercel_target {
    struct sbx__vercel_conf *conf; /* a reference */
    char *name;                    /* the sandbox */
    char *session;                 /* its current session id */
    char *root;                    /* the workspace */
};
void sbx__vercel_target_init(struct sbx__vercel_target *t, struct sbx__vercel_conf *c,
                             const char *name, const char *session, const char *root);
void sbx__vercel_target_copy(struct sbx__vercel_target *dst, const struct sbx__vercel_target *src);
void sbx__vercel_target_release(struct sbx__vercel_target *t);
/* "/v2/sandboxes/sessions/SID/" + op; caller frees. */
char *sbx__vercel_session_path(const struct sbx__vercel_target *t, const char *op);

/* The error of an HTTP error status of a call on a session: 404 (but a missing file's,
 * file_not_found) and 410 are SBX_E_SANDBOX "sandbox 'name' is gone", the rest as
 * sbx__vercel_status_error. */
int sbx__vercel_session_error(const struct sbx__vercel_target *t, long status,
                              const struct sbx_buf *body, const char *what, char *code,
                              struct sbx_error *err);

/* A short fixed command run to completion (argv, never a shell line built from input), in the
 * workspace, as the sandbox's user. */
int sbx__vercel_run(const struct sbx__vercel_target *t, const char *const *argv,
                    struct sbx__shell_run *out, struct sbx_error *err);
/* POST fs/read of abs into fd, at most max bytes (SBX_E_NOTFOUND: no such file). */
int sbx__vercel_file_get(const struct sbx__vercel_target *t, const char *abs, int fd, uint64_t max,
                         struct sbx_error *err);
/* size bytes of fd as the file abs: one member of a tar.gz through POST fs/write. */
int sbx__vercel_file_put(const struct sbx__vercel_target *t, const char *abs, int fd, uint64_t size,
                         struct sbx_error *err);

/* n bytes at p as the one member abs (its leading '/' dropped) of a tar.gz, into out. */
int sbx__vercel_targz(const char *abs, const void *p, size_t n, struct sbx_buf *out,
                      struct sbx_error *err);

struct sbx__vercel_session {
    struct sbx_session base;
    struct sbx__vercel_target t;
    json_t *state;
    struct sbx__shellfs_copy ws;
    int64_t timeout_ms; /* what an extension adds */
    int64_t ends_ms;    /* when the service stops the session (real time, ms; atomic) */
};

/* In use: when less than half of the session's timeout is left, extend it by the timeout
 * (POST .../extend-timeout), so a session lives as long as it is used, up to the service's
 * limit. Failures are left to the command that follows. */
void sbx__vercel_keepalive(struct sbx__vercel_session *s);

struct sbx__shellfs sbx__vercel_fs(struct sbx__vercel_session *s);

int sbx__vercel_exec_start(struct sbx_session *bs, const struct sbx_exec_spec *spec,
                           const char *cwd, struct sbx_proc **out, struct sbx_error *err);

/* Options (options.c). */
extern const struct sbx_provider_option sbx__vercel_options[];

struct sbx__vercel_opts {
    const char *runtime, *root, *persistence, *source_snapshot;
    int64_t timeout_ms, vcpus, snapshot_expiration_ms;
    const json_t *tok_ref;
    const char *api_url, *team, *project, *ca_file;
    int ports[SBX__VERCEL_MAX_PORTS];
    size_t n_ports;
    json_t *env; /* owned: sbx__vercel_opts_release */
};
int sbx__vercel_options_parse(const json_t *options, struct sbx__vercel_opts *out,
                              struct sbx_error *err);
void sbx__vercel_opts_release(struct sbx__vercel_opts *o);
int sbx__vercel_options_check(const json_t *options, struct sbx_error *err);

#endif
