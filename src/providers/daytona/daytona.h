/* The daytona provider's private interface: the service (a control-plane endpoint and one
 * toolbox endpoint per sandbox, both on the remote layer of src/sandbox/wire/), the options
 * (options.c), the control plane (client.c), commands as toolbox session commands whose logs
 * stream over a WebSocket (exec.c), and files and snapshots through the shared script module
 * (files.c). Only this folder includes it (docs/internals/provider-daytona.md).
 *
 * Secrets: the API key (or JWT) is read from its reference by the endpoints when a request
 * needs it and lives only there; it is never in a session state, a record, a message or a log
 * (the endpoints scrub every error). */
#ifndef SBX_PROVIDERS_DAYTONA_DAYTONA_H
#define SBX_PROVIDERS_DAYTONA_DAYTONA_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "sandbox/provider.h"
#include "sandbox/shellfs/shellfs.h"
#include "sandbox/wire/endpoint.h"
#include "sbx/error.h"

#define SBX__DTN_API_DEFAULT "https://app.daytona.io/api"
#define SBX__DTN_ROOT        "/home/daytona/workspace"
#define SBX__DTN_ID_MAX      64
#define SBX__DTN_MAX_PORTS   64

/* The checked options (options.c); strings borrowed from the JSON but env and labels. */
struct sbx__dtn_opts {
    const char *snapshot; /* sandbox_snapshot_name */
    const char *name;
    int64_t create_timeout_s, start_timeout_s, auto_stop, url_ttl_s;
    int64_t cpu, memory, disk;
    const char *root;
    const json_t *key_ref;
    const char *api_url, *org, *ca_file;
    int ports[SBX__DTN_MAX_PORTS];
    size_t n_ports;
    json_t *env, *labels; /* objects of strings, owned */
};

extern const struct sbx_provider_option sbx__dtn_options[];
int sbx__dtn_options_parse(const json_t *o, struct sbx__dtn_opts *out, struct sbx_error *err);
void sbx__dtn_opts_release(struct sbx__dtn_opts *o);
int sbx__dtn_options_check(const json_t *options, struct sbx_error *err);

/* How to reach the service, shared by a client and its sessions (refcounted). */
struct sbx__dtn_conf {
    int refs; /* atomic */
    struct sbx__endpoint *api;
    char *api_url;
    json_t *key_ref;
    char *key_what; /* "$DAYTONA_API_KEY", for messages */
    char *org;      /* X-Daytona-Organization-ID (a JWT's), or NULL */
    char *org_hdr;  /* its header line, or NULL */
    char *ca_file;
};
int sbx__dtn_conf_new(const struct sbx__dtn_opts *o, struct sbx__dtn_conf **out,
                      struct sbx_error *err);
struct sbx__dtn_conf *sbx__dtn_conf_ref(struct sbx__dtn_conf *c);
void sbx__dtn_conf_unref(struct sbx__dtn_conf *c);

/* A control-plane call: JSON in and out; errors worded for the Daytona API (the key, rate
 * limits, a gone sandbox are told apart). */
int sbx__dtn_api(struct sbx__dtn_conf *c, const char *method, const char *path, const json_t *body,
                 json_t **out, struct sbx_error *err);

/* One sandbox's toolbox, reached through the toolbox proxy the service named. */
struct sbx__dtn_box {
    struct sbx__dtn_conf *conf; /* a reference */
    struct sbx__endpoint *ep;   /* {toolboxProxyUrl}/{id} */
    char *id;
    char *user_root; /* the workspace */
    pthread_mutex_t lock;
    char *files_session; /* the session of the provider's own short commands, or NULL */
};
int sbx__dtn_box_init(struct sbx__dtn_box *b, struct sbx__dtn_conf *c, const char *id,
                      const char *proxy_url, const char *root, struct sbx_error *err);
void sbx__dtn_box_release(struct sbx__dtn_box *b);
/* A toolbox call: JSON in, JSON out (may be NULL). */
int sbx__dtn_toolbox(struct sbx__dtn_box *b, const char *method, const char *path,
                     const json_t *body, json_t **out, struct sbx_error *err);
/* The extra header lines of every request (the organization), NULL-terminated. */
const char *const *sbx__dtn_headers(const struct sbx__dtn_conf *c, const char *buf[2]);

/* The logs stream of a session command: three 0x01 bytes start stdout, three 0x02 bytes start
 * stderr, anywhere in a message; a marker split between two messages is found too (its first
 * bytes are held back until the next). Bytes before the first marker are dropped. Each piece
 * goes to fn (0 to go on; another value stops the feed and is returned). */
struct sbx__dtn_demux {
    int stream; /* 0 before the first marker, 1, 2 */
    uint8_t held[2];
    size_t n_held;
};
typedef int sbx__dtn_piece_fn(void *ud, int stream, const uint8_t *p, size_t n,
                              struct sbx_error *err);
int sbx__dtn_demux_feed(struct sbx__dtn_demux *dm, const uint8_t *p, size_t n,
                        sbx__dtn_piece_fn *fn, void *ud, struct sbx_error *err);
/* The end of the stream: bytes held back were data after all. */
int sbx__dtn_demux_finish(struct sbx__dtn_demux *dm, sbx__dtn_piece_fn *fn, void *ud,
                          struct sbx_error *err);

/* A fresh session id "sbx-<hex>" (caller frees). */
char *sbx__dtn_session_id(void);

/* A short fixed command run to completion in the provider's own toolbox session. */
int sbx__dtn_run(struct sbx__dtn_box *b, const char *const *argv, struct sbx__shell_run *out,
                 struct sbx_error *err);

struct sbx__dtn_session {
    struct sbx_session base;
    struct sbx__dtn_box box;
    json_t *state;
    int64_t url_ttl_s;
    struct sbx__shellfs_copy ws;
    struct {
        int port;
        char *url;
        int64_t until; /* monotonic ns */
    } urls[SBX__DTN_MAX_PORTS];
    size_t n_urls;
};

struct sbx__shellfs sbx__dtn_fs(struct sbx__dtn_session *s);
int sbx__dtn_exec_start(struct sbx_session *bs, const struct sbx_exec_spec *spec, const char *cwd,
                        struct sbx_proc **out, struct sbx_error *err);

/* Into a buffer without a limit: an append cannot fail then (allocation failure aborts). */
static inline void sbx__dtn_keep(int rc)
{
    (void)rc;
}

#endif
