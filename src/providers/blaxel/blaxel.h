/* The blaxel provider's private interface: the service (api.c: the two endpoints, the control
 * plane's JSON calls, the sandbox API's process stream, whole files up and down, short fixed
 * commands), commands (exec.c) and the client and sessions (client.c). Only this folder
 * includes it (docs/internals/provider-blaxel.md).
 *
 * Secrets: the API key lives only in the endpoints (src/sandbox/wire/endpoint.h), read from its
 * reference when the first call needs it; it is never put in a session state, a record, a
 * message or a log. */
#ifndef SBX_PROVIDERS_BLAXEL_BLAXEL_H
#define SBX_PROVIDERS_BLAXEL_BLAXEL_H

#include <pthread.h>
#include <stdint.h>
#include <jansson.h>

#include "sandbox/provider.h"
#include "sandbox/shellfs/shellfs.h"
#include "sandbox/wire/endpoint.h"
#include "sbx/error.h"

#define SBX__BL_API_DEFAULT "https://api.blaxel.ai/v0"
#define SBX__BL_RUN_DEFAULT "https://run.blaxel.ai"
#define SBX__BL_ROOT        "/workspace"
#define SBX__BL_NAME_MAX    63
#define SBX__BL_EVENT_MAX   ((size_t)4 << 20) /* one NDJSON event of a command's stream */

/* How to reach the service: shared by a client, its sessions and their commands. */
struct sbx__bl_conf {
    int refs; /* atomic */
    pthread_mutex_t lock;
    char *api_url;                   /* the control plane's base URL (.../v0) */
    char *run_url;                   /* the sandboxes' base URL: RUN/{workspace}/sandboxes/{name} */
    char *workspace;                 /* the Blaxel workspace */
    char *ws_header;                 /* "X-Blaxel-Workspace: WORKSPACE" */
    char *ca_file;                   /* or NULL */
    json_t *key_ref;                 /* {"env": VAR} or {"file": PATH} */
    char *key_what;                  /* "$BL_API_KEY", for messages */
    struct sbx__endpoint *api, *run; /* made by the first call (lock) */
};

struct sbx__bl_conf *sbx__bl_conf_ref(struct sbx__bl_conf *c);
void sbx__bl_conf_unref(struct sbx__bl_conf *c);

/* A JSON call of the control plane (path below the API URL, "/sandboxes/..."): the answer's
 * body in *out (may be NULL). Errors name Blaxel and what was wrong: 401/403 the key, 402 the
 * workspace's usage limit, 429 rate (after the remote layer's retries, which honour
 * Retry-After), 404 SBX_E_NOTFOUND with the service's message. */
int sbx__bl_api(struct sbx__bl_conf *c, const char *method, const char *path, const json_t *body,
                json_t **out, struct sbx_error *err);
/* The same on sandbox name's own API (rest: "process/...", "filesystem/..."). */
int sbx__bl_sb(struct sbx__bl_conf *c, const char *name, const char *method, const char *rest,
               const json_t *body, json_t **out, struct sbx_error *err);
/* A raw body to sandbox name's API (stdin of a process). */
int sbx__bl_sb_raw(struct sbx__bl_conf *c, const char *name, const char *method, const char *rest,
                   const void *body, size_t n, struct sbx_error *err);

/* One command of sandbox name through POST /process with waitForCompletion and the event
 * stream: each stdout/stderr piece to fn (stream 1 or 2) as it comes, the result (the
 * process's description) into *result. abort (may be NULL) non-zero ends the stream
 * (SBX_E_CANCELLED). */
typedef int sbx__bl_out_fn(void *ud, int stream, const char *p, size_t n);
int sbx__bl_process(struct sbx__bl_conf *c, const char *name, const json_t *req, sbx__bl_out_fn *fn,
                    void *ud, const volatile int *abort, json_t **result, struct sbx_error *err);

/* The request of one command: the shell line, a fresh process name of sbx's ("sbx-" and 16
 * hex digits: stdin and kill address the process by it), waitForCompletion, stdin as asked. */
json_t *sbx__bl_process_req(const char *line, int want_stdin);

/* A whole file at abs: down into fd (at most max bytes), up from fd (size bytes). */
int sbx__bl_file_get(struct sbx__bl_conf *c, const char *name, const char *abs, int fd,
                     uint64_t max, struct sbx_error *err);
int sbx__bl_file_put(struct sbx__bl_conf *c, const char *name, const char *abs, int fd,
                     uint64_t size, struct sbx_error *err);

/* argv run to completion in sandbox name (stdout, stderr and the exit status into out). */
int sbx__bl_run(struct sbx__bl_conf *c, const char *name, const char *const *argv,
                struct sbx__shell_run *out, struct sbx_error *err);

struct sbx__bl_session {
    struct sbx_session base;
    struct sbx__bl_conf *conf;
    json_t *state;
    struct sbx__shellfs_copy ws;
};

struct sbx__shellfs sbx__bl_fs(struct sbx__bl_session *s);
int sbx__bl_exec_start(struct sbx_session *bs, const struct sbx_exec_spec *spec, const char *cwd,
                       struct sbx_proc **out, struct sbx_error *err);

/* Options (options.c): the declared table, the provider's own checks, the service's
 * configuration (SBX_E_INVAL without a workspace). */
extern const struct sbx_provider_option sbx__bl_options[];
int sbx__bl_check_options(const json_t *o, struct sbx_error *err);
int sbx__bl_conf_new(const json_t *o, struct sbx__bl_conf **out, struct sbx_error *err);

/* A name Blaxel takes for a sandbox: lowercase letters, digits and '-', at most
 * SBX__BL_NAME_MAX, starting with a letter. */
int sbx__bl_valid_name(const char *name);

#endif
