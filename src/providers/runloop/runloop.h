/* The runloop provider's private interface: the service (api.c: the endpoint, JSON calls,
 * long polls, an execution's output as SSE, whole files up and down, short fixed commands),
 * commands (exec.c) and the client and sessions (client.c). Only this folder includes it
 * (docs/internals/provider-runloop.md).
 *
 * Secrets: the API key lives only in the endpoint (src/sandbox/wire/endpoint.h), read from its
 * reference when the first call needs it; it is never put in a session state, a record, a
 * message or a log. */
#ifndef SBX_PROVIDERS_RUNLOOP_RUNLOOP_H
#define SBX_PROVIDERS_RUNLOOP_RUNLOOP_H

#include <pthread.h>
#include <stdint.h>
#include <jansson.h>

#include "sandbox/provider.h"
#include "sandbox/shellfs/shellfs.h"
#include "sandbox/wire/endpoint.h"
#include "sbx/error.h"

#define SBX__RL_API_DEFAULT "https://api.runloop.ai"
#define SBX__RL_HOME        "/home/user"
#define SBX__RL_USER        "user"
#define SBX__RL_ID_MAX      64
#define SBX__RL_POLL_MS     60000 /* one long poll: longer than the service's hold */
#define SBX__RL_EVENT_MAX   ((size_t)1 << 20)
#define SBX__RL_STREAM_MS   30000 /* one output stream; a longer one is started again */

/* How to reach the service: shared by a client, its sessions and their commands. */
struct sbx__rl_conf {
    int refs; /* atomic */
    pthread_mutex_t lock;
    char *url;                /* the API's base URL */
    char *ca_file;            /* or NULL */
    json_t *key_ref;          /* {"env": VAR} or {"file": PATH} */
    char *key_what;           /* "$RUNLOOP_API_KEY", for messages */
    struct sbx__endpoint *ep; /* made by the first call (lock) */
};

struct sbx__rl_conf *sbx__rl_conf_ref(struct sbx__rl_conf *c);
void sbx__rl_conf_unref(struct sbx__rl_conf *c);

/* A JSON call below the API URL: the body's answer in *out (may be NULL). Errors name Runloop
 * and what was wrong: 401/403 the key, 429 rate or quota (after the retries of the remote
 * layer, which honour Retry-After), 404 SBX_E_NOTFOUND with the service's message. */
int sbx__rl_api(struct sbx__rl_conf *c, const char *method, const char *path, const json_t *body,
                json_t **out, struct sbx_error *err);
/* POST path {"statuses": [...]} until the answer's status is one of them or stop says stop
 * (a status not in want), at most total_ms; the service's 408 (a hold that ran out) is asked
 * again. *out: the last answer. */
int sbx__rl_wait_status(struct sbx__rl_conf *c, const char *path, const char *const *want,
                        int64_t total_ms, const volatile int *abort, json_t **out,
                        struct sbx_error *err);
/* The output of execution eid of devbox id (field "stdout" or "stderr") from byte offset 0
 * until the command ends, each piece to fn. abort (may be NULL) non-zero: stop within one
 * stream's bound (SBX__RL_STREAM_MS), SBX_E_CANCELLED. */
typedef int sbx__rl_out_fn(void *ud, const char *p, size_t n);
int sbx__rl_stream(struct sbx__rl_conf *c, const char *id, const char *eid, const char *field,
                   sbx__rl_out_fn *fn, void *ud, const volatile int *abort, struct sbx_error *err);
/* A whole file at abs: down into fd (at most max bytes), up from fd (size bytes). */
int sbx__rl_file_get(struct sbx__rl_conf *c, const char *id, const char *abs, int fd, uint64_t max,
                     struct sbx_error *err);
int sbx__rl_file_put(struct sbx__rl_conf *c, const char *id, const char *abs, int fd, uint64_t size,
                     struct sbx_error *err);

/* argv run to completion in devbox id (stdout, stderr and the exit status into out). */
int sbx__rl_run(struct sbx__rl_conf *c, const char *id, const char *const *argv,
                struct sbx__shell_run *out, struct sbx_error *err);

struct sbx__rl_session {
    struct sbx_session base;
    struct sbx__rl_conf *conf;
    json_t *state;
    struct sbx__shellfs_copy ws;
};

struct sbx__shellfs sbx__rl_fs(struct sbx__rl_session *s);
int sbx__rl_exec_start(struct sbx_session *bs, const struct sbx_exec_spec *spec, const char *cwd,
                       struct sbx_proc **out, struct sbx_error *err);

int sbx__rl_valid_id(const char *id);

#endif
