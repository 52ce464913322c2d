/* The cloudflare provider's private interface: the Sandbox Bridge worker (api.c: the endpoint,
 * its errors, short commands, file contents), commands streamed as Server-Sent Events
 * (exec.c), the session's file ops over the shared shell script module (files.c), workspace
 * snapshots through the bridge's persist and hydrate (snap.c), the client and sessions
 * (client.c). Only this folder includes it (docs/internals/provider-cloudflare.md).
 *
 * Secrets: the worker's key lives only in the endpoint (wire/endpoint.h), read from its
 * reference; never in a session state, a record, a message or a log. */
#ifndef SBX_PROVIDERS_CLOUDFLARE_CLOUDFLARE_H
#define SBX_PROVIDERS_CLOUDFLARE_CLOUDFLARE_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "sandbox/provider.h"
#include "sandbox/shellfs/shellfs.h"
#include "sandbox/wire/endpoint.h"
#include "sbx/buf.h"
#include "sbx/error.h"
#include "sbx/strv.h"

#define SBX__CF_ROOT       "/workspace" /* the bridge's workspace: fixed */
#define SBX__CF_ID_MAX     128
#define SBX__CF_FILE_MAX   ((uint64_t)32 << 20) /* the bridge's limit on a file and a hydrate */
#define SBX__CF_EVENT_MAX  ((size_t)1 << 20)    /* one SSE event (base64 output chunk) */
#define SBX__CF_RUN_MS     300000               /* a short command of sbx's own */
#define SBX__CF_ALIVE_FILE "/tmp/.sbx-cloudflare-sandbox"

/* How to reach the worker: shared (refcounted) by a client, its sessions and their commands. */
struct sbx__cf_conf {
    int refs; /* atomic */
    struct sbx__endpoint *ep;
    char *url;      /* the worker, no trailing slash */
    char *key_what; /* where the key comes from, for messages ("$CLOUDFLARE_SANDBOX_API_KEY") */
    int has_key;    /* a key is sent */
};
struct sbx__cf_conf *sbx__cf_conf_ref(struct sbx__cf_conf *c);
void sbx__cf_conf_unref(struct sbx__cf_conf *c);

/* ---------------------------------------------------------------------------------------------
 * The worker's API (api.c) */

/* id is an id the bridge accepts (lowercase base32, at most SBX__CF_ID_MAX). */
int sbx__cf_valid_id(const char *id);
/* The error for an answer with status >= 400 (body: what the worker said): the key refused
 * (401) SBX_E_PERM naming where the key came from, rate limit (429) and capacity (503)
 * SBX_E_API after the endpoint's retries, others as sbx__http_status_error. Always < 0. */
int sbx__cf_status_error(const struct sbx__cf_conf *c, long status, const void *body, size_t n,
                         const char *what, struct sbx_error *err);
/* POST /v1/sandbox: a new id (*out, caller frees). */
int sbx__cf_new_id(struct sbx__cf_conf *c, char **out, struct sbx_error *err);
/* POST /v1/sandbox/{id}/tunnel/{port}: the tunnel's URL (*out, caller frees). */
int sbx__cf_tunnel(struct sbx__cf_conf *c, const char *id, int port, char **out,
                   struct sbx_error *err);
/* DELETE /v1/sandbox/{id}. */
int sbx__cf_delete(struct sbx__cf_conf *c, const char *id, struct sbx_error *err);
/* Run argv to its end through POST .../exec (argv[0] found by the sandbox's PATH), its output
 * into out (bounded by out's buffers). A command the bridge could not run is SBX_E_SANDBOX. */
int sbx__cf_run(struct sbx__cf_conf *c, const char *id, const char *const *argv,
                struct sbx__shell_run *out, struct sbx_error *err);
/* fd to its end into out, at most max bytes (SBX_E_TOOBIG naming what). */
int sbx__cf_read_all(int fd, uint64_t max, struct sbx_buf *out, const char *what,
                     struct sbx_error *err);
/* GET .../file/{abs}: the file into fd, at most max bytes. PUT .../file/{abs}: size bytes of
 * fd (at most SBX__CF_FILE_MAX). abs lies in SBX__CF_ROOT. */
int sbx__cf_file_get(struct sbx__cf_conf *c, const char *id, const char *abs, int fd, uint64_t max,
                     struct sbx_error *err);
int sbx__cf_file_put(struct sbx__cf_conf *c, const char *id, const char *abs, int fd, uint64_t size,
                     struct sbx_error *err);

/* ---------------------------------------------------------------------------------------------
 * Sessions (client.c, exec.c, files.c, snap.c) */

struct sbx__cf_session {
    struct sbx_session base;
    struct sbx__cf_conf *conf; /* a reference */
    json_t *state;
};

/* The shared shell script module over this session (files.c). */
struct sbx__shellfs sbx__cf_fs(struct sbx__cf_session *s);

int sbx__cf_exec_start(struct sbx_session *bs, const struct sbx_exec_spec *spec, const char *cwd,
                       struct sbx_proc **out, struct sbx_error *err);

/* Snapshots (snap.c): the workspace out through POST .../persist, in through POST .../hydrate. */
int sbx__cf_workspace_export(struct sbx_session *bs, int out_fd, struct sbx_error *err);
int sbx__cf_workspace_import(struct sbx_session *bs, int in_fd, struct sbx_error *err);

#endif
