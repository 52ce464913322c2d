/* The client room of the local provider (src/providers/local/client/), private to it: what its
 * files share.
 *
 *   client.c   the client vtable: attach, list, prune, remove; the client's options
 *   create.c   a new sandbox: the create job's steps, the supervisor started and reporting
 *   ops.c      the session operations: commands through the control socket, files through a
 *              workspace directory fd
 *   stopped.c  stop, and the records of stopped sandboxes
 *   rebuild.c  a sandbox brought back from a session state: resume and start
 *   runtime.c  a sandbox's runtime directory seen from the client: ids, state.json, requests
 *   stats.c    what a sandbox uses (its cgroups) and its supervisor's log
 *   teardown.c, disk.c, state.c   (local.h, disk.h) */
#ifndef SBX_PROVIDERS_LOCAL_CLIENT_CLIENT_H
#define SBX_PROVIDERS_LOCAL_CLIENT_CLIENT_H

#include <pthread.h>
#include <stdint.h>
#include <jansson.h>

#include "providers/local/local.h"
#include "sbx/local.h"
#include "sbx/manifest.h"
#include "sbx/session.h"
#include "sbx/strv.h"

#define SBX__LOCAL_ID_BYTES   8 /* 16 hex characters */
#define SBX__LOCAL_ID_MAX_LEN 64
/* A request fails when the supervisor answers nobody for this long; while it answers others
 * (a queue of clients on a loaded host) the wait goes on, up to SBX__LOCAL_REQUEST_LIMIT_MS. */
#define SBX__LOCAL_REQUEST_IDLE_MS  10000
#define SBX__LOCAL_REQUEST_LIMIT_MS 300000

struct sbx__local_client {
    struct sbx_client base;
    char *supervisor_path; /* may be NULL: resolved at create */
    char *runtime_dir;     /* configured base or NULL */
    char *workspace_dir;   /* configured base or NULL */
    int isolated;          /* namespaces (the default) */
    enum sbx_local_network network;
    struct sbx_local_limits limits;
    struct sbx_local_grant *grants; /* strings owned */
    size_t n_grants;
    int ports[SBX_LOCAL_MAX_EXPOSED_PORTS];
    size_t n_ports;
    int64_t start_timeout_ms;
    int64_t request_idle_ms;
    int64_t test_delay_ms;   /* test only: the supervisor's pause before each request */
    struct sbx_strv allow;   /* network allow: the normalized patterns */
    char *port_bind;         /* NULL: 127.0.0.1 */
    struct sbx_strv publish; /* fixed forwards, canonical "ADDR:HOST:PORT" */
    int allow_ports[SBX_LOCAL_MAX_EXPOSED_PORTS];
    size_t n_allow_ports;
    struct sbx_strv test_hosts; /* test only: "name=ip" */
    int tied;                   /* sandboxes go away with the calling process */
    uint64_t disk_bytes;        /* resolved: SBX_LOCAL_LIMIT_NONE = no limit */
    int disk_explicit;          /* given by the caller: must be enforced */
    int allow_host_uid;         /* sbx_local_options.allow_host_uid */
    int dangerous_workspace;    /* sbx_local_options.allow_dangerous_workspace */
};

struct sbx__local_session {
    struct sbx_session base;
    char *dir;       /* runtime directory of this sandbox */
    char *rundir;    /* the runtime base */
    char *workspace; /* host path */
    int owned;       /* workspace created by us */
    json_t *state;
    pthread_mutex_t root_lock;
    int root_fd; /* workspace dir fd from the supervisor, -1 until first use */
    int closed;
    int64_t idle_ms; /* requests: how long the supervisor may answer nobody */
    /* While its supervisor starts (create), the root's owner is held here instead of set:
     * the supervisor reads the workspace owner from the root directory as it starts. */
    int starting;
    unsigned root_owner; /* pending on-disk uid and gid of the root's owner, 0: none */
};

/* ---- ops.c ---- */

/* Give the workspace root to the owner the manifest's root_owner asked for while the
 * supervisor started (nothing if none). */
int sbx__local_apply_root_owner(struct sbx__local_session *s, struct sbx_error *err);

/* ---- stats.c: the stats and log_open session operations ---- */
int sbx__local_sess_stats(struct sbx_session *bs, struct sbx_session_stats *st,
                          struct sbx_error *err);
int sbx__local_sess_log_open(struct sbx_session *bs, int *out_fd, struct sbx_error *err);

/* ---- runtime.c: the runtime directory of a sandbox, from the client side ---- */

/* Start waiting for the supervisor in runtime dir dir: idle_ms without progress, at most
 * SBX__LOCAL_REQUEST_LIMIT_MS. Returns the progress counter's descriptor (the caller closes it)
 * or -1 (a supervisor without one: idle_ms is then a plain deadline). */
int sbx__local_wait_begin(const char *dir, int64_t idle_ms, struct sbx__proto_wait *w);
/* One request to the supervisor of sandbox id (runtime dir dir) and its checked reply
 * (*reply: caller owns); received descriptors as sbx__proto_recv. A supervisor that is not
 * there is SBX_E_SANDBOX "sandbox 'id' is gone". */
int sbx__local_request(const char *dir, const char *id, const json_t *req, json_t **reply, int *fds,
                       size_t max_fds, size_t *nfds, int64_t idle_ms, struct sbx_error *err);
/* 1 when id is 1 to SBX__LOCAL_ID_MAX_LEN lowercase hex digits. */
/* The sandbox's accounts in id order (uid 1000 + i): the provider's default user "sandbox",
 * who runs commands and owns the workspace unless run_as names another, then the manifest's
 * users (m may be NULL), which get ownership and modes of their entries, as in the Agents SDK. */
void sbx__local_account_users(const struct sbx_manifest *m, struct sbx_strv *out);
int sbx__local_valid_id(const char *id);
/* The full id of the entry of dir that prefix names, the name with suffix ("" for none) cut
 * off and a valid id: 1 with *out (caller frees), 0 when none, -1 when several match and
 * none exactly. NULL dir or a directory that cannot be read: 0, errno set. */
int sbx__local_find_id(const char *dir, const char *suffix, const char *prefix, char **out);
/* An id or unique prefix expanded to the full id of a sandbox in the runtime base. */
int sbx__local_resolve_id(const char *base, const char *prefix, char **out, struct sbx_error *err);
/* state.json of sandbox id in runtime dir dir, a JSON object (*out: caller owns). */
int sbx__local_read_state(const char *dir, const char *id, json_t **out, struct sbx_error *err);
/* state.json in dir, replaced whole (temp + rename), so a reader never sees it partial. */
int sbx__local_write_state(const char *dir, const json_t *state, struct sbx_error *err);
/* The generic fields of a runtime state.json: version 1, provider local, id (equal to id
 * unless NULL), workspace and root present, no unknown key. */
int sbx__local_check_state(const json_t *st, const char *id, struct sbx_error *err);
/* Take sandbox id down (teardown.c): its workspace's disk image (disk: the state's "disk", may
 * be NULL; for a workspace sbx made, owned, an image at the derived path is found without it),
 * and the workspace too when remove_workspace. */
int sbx__local_stop_and_clean(const char *dir, const char *id, const char *workspace,
                              int remove_workspace, const json_t *disk, int owned, json_t *removed,
                              struct sbx_error *err);
/* The same (no list of what was removed), *first receiving the first host id of the range the
 * supervisor held, from its answer to the shutdown request (0: none or not known). */
int sbx__local_stop_and_clean_ids(const char *dir, const char *id, const char *workspace,
                                  int remove_workspace, const json_t *disk, int owned,
                                  uint32_t *first, struct sbx_error *err);
/* given, else $env_name, else ${XDG_STATE_HOME:-~/.local/state}/sbx/sub; made 0700 (each new
 * level) when make. *out: caller frees. */
int sbx__local_state_subdir(const char *given, const char *env_name, const char *sub, int make,
                            char **out, struct sbx_error *err);
/* The same, for a caller that holds the lease on dir (a failed create, a reclaim); otherwise
 * the teardown takes the lease shared for its duration, so that no reclaim runs beside it. */
int sbx__local_stop_and_clean_held(const char *dir, const char *id, const char *workspace,
                                   int remove_workspace, const json_t *disk, int owned,
                                   struct sbx_error *err);
/* 0 when this process can open n (at most SBX__LOCAL_FD_HEADROOM_MAX) more descriptors;
 * otherwise "cannot <what>: too many open files" with how to raise the limit. A command that
 * would otherwise fail half-way (and not be able to undo what it did) checks first. */
#define SBX__LOCAL_FD_HEADROOM_MAX 16
int sbx__local_fd_headroom(const char *what, int n, struct sbx_error *err);
/* The create lease: an exclusive flock on the runtime dir of a sandbox being created, on a
 * close-on-exec descriptor (no supervisor or git child inherits it). Returns the descriptor.
 * Teardowns hold it shared. */
int sbx__local_lease_take(const char *dir, struct sbx_error *err);
/* 1 while a creator (or a reclaim) holds the lease on dir exclusively. */
int sbx__local_lease_busy(const char *dir);
/* The runtime directory rundir/id, made under a staging name (.new-<id>), leased, then renamed
 * to the id: ps never sees it without its lease. *lease_out: the lease's descriptor. Errors:
 * SBX_E_EXISTS "sandbox 'id' already exists", SBX_E_SYS. */
int sbx__local_runtime_dir_make(const char *rundir, const char *id, int *lease_out,
                                struct sbx_error *err);
/* The unclaimed marker (SBX_PROTO_UNCLAIMED) in the runtime dir dir whose lease is lease_fd:
 * made by a create right after its runtime dir, removed when it hands the sandbox over (the
 * last step before it returns it, still under the lease). */
int sbx__local_unclaimed_mark(int lease_fd, const char *dir, struct sbx_error *err);
int sbx__local_hand_over(int lease_fd, const char *dir, struct sbx_error *err);
/* Remove the leftovers of creates (and starts) that died before they returned the sandbox (a
 * loop device, a mount, a partly restored workspace, a supervisor nobody knows of, the runtime
 * directory): every runtime dir of rundir whose lease nobody holds and in which no supervisor
 * recorded itself or which still holds the unclaimed marker, and staging directories nobody
 * holds. A sandbox that was handed over (its create returned: its workspace may hold work) is
 * never touched, dead or alive: that is for rm and prune. Called before listing and before
 * creating. */
void sbx__local_reclaim(const char *rundir);

/* ---- ops.c: the session operations ---- */

/* A session over the runtime dir dir (under the runtime base rundir) of the sandbox whose
 * state.json take_state holds (taken). */
struct sbx__local_session *sbx__local_session_new(const char *rundir, const char *dir,
                                                  json_t *take_state);

/* ---- workspace.c ---- */

/* Whether real (the realpath of the workspace given as given) may be a sandbox's workspace:
 * SBX_E_PERM naming the rule when it is a system directory or in one, a view of the host
 * (/proc, /sys, /dev, /run), on a kernel pseudo file system, a home directory itself, overlaps
 * the runtime base rundir (may be NULL) or, unless dangerous_ok, lies in another user's home or
 * holds a unix socket (scanned as a grant source is). */
int sbx__local_check_workspace(const char *given, const char *real, const char *rundir,
                               int dangerous_ok, struct sbx_error *err);

/* ---- create.c ---- */

/* Create a sandbox of client c. allow_stopped: spec->id may name a stopped sandbox (start and
 * resume bring it back). */
int sbx__local_create(struct sbx__local_client *c, const struct sbx_create_spec *spec,
                      int allow_stopped, struct sbx_session **out, struct sbx_error *err);

/* ---- client.c ---- */

/* 1 when addr (an IP address as text) is a loopback address (127.0.0.0/8, ::1). */
int sbx__local_addr_loopback(const char *addr);
/* Attach to the live sandbox that prefix names: its supervisor answers an info request. */
int sbx__local_attach(struct sbx_client *bc, const char *prefix, struct sbx_session **out,
                      struct sbx_error *err);
/* The same without the info request (sbx_client_attach_once): the id resolved and the state
 * read only; a dead supervisor fails the session's first request instead. */
int sbx__local_attach_once(struct sbx_client *bc, const char *prefix, struct sbx_session **out,
                           struct sbx_error *err);

/* ---- stopped.c: <stopped>/<id>.json holds the session state (with its snapshot, held in the
 * store) of a sandbox that sbx_client_stop ended ---- */

/* $SBX_STOPPED, else ${XDG_STATE_HOME:-~/.local/state}/sbx/stopped; made 0700 when make. */
int sbx__local_stopped_dir(int make, char **out, struct sbx_error *err);
/* The full id of the stopped sandbox prefix names in sdir: 1 found (*out: caller frees), 0 none
 * (or no such directory), -code when ambiguous. */
int sbx__local_stopped_find(const char *sdir, const char *prefix, char **out,
                            struct sbx_error *err);
/* The stopped record of id, checked as any saved session state (*out: caller owns). */
int sbx__local_stopped_read(const char *sdir, const char *id, json_t **out, struct sbx_error *err);
/* Forget the stopped record of id and let go of the snapshot it holds (which stays in the store
 * until sbx snapshot rm). Errors are logged: the sandbox they were about is gone either way. */
void sbx__local_stopped_forget(const char *sdir, const char *id);
/* 1 when a stopped record of exactly id exists. */
int sbx__local_stopped_exists(const char *id);
/* Every stopped record as ps lists it: the state with "status": "stopped" and the snapshot's
 * size ("snapshot_bytes", null when the store cannot say), appended to arr; an id arr lists
 * already (a stop or start that did not finish) stays listed once (merge_record). */
void sbx__local_stopped_list(json_t *arr);
/* A stop or start of id killed half-way leaves both its stopped record and its runtime dir:
 * finish it. A runtime dir that answers is the sandbox (it has everything the record's
 * snapshot has): the record goes, *what = SBX__HALF_LIVE. A dead one (or what a killed create
 * left) is torn down and the record stays: SBX__HALF_STOPPED. Nothing half-done:
 * SBX__HALF_NONE. Errors: a sandbox started from the record that then died (SBX_E_EXISTS,
 * naming rm), a teardown's. */
enum sbx__half { SBX__HALF_NONE, SBX__HALF_LIVE, SBX__HALF_STOPPED };
int sbx__local_finish_half(struct sbx_client *bc, const char *id, enum sbx__half *what,
                           struct sbx_error *err);
/* The client ops stop and stopped_state. */
int sbx__local_stop(struct sbx_client *bc, const char *prefix, char **out_ref,
                    struct sbx_error *err);
int sbx__local_stopped_state(struct sbx_client *bc, const char *prefix, json_t **out,
                             struct sbx_error *err);

/* ---- rebuild.c: the client ops resume and start ---- */

int sbx__local_resume(struct sbx_client *bc, const json_t *state, const struct sbx_resume_opts *ro,
                      struct sbx_session **out, struct sbx_error *err);
int sbx__local_start(struct sbx_client *bc, const char *prefix, const struct sbx_resume_opts *ro,
                     struct sbx_session **out, struct sbx_error *err);

#endif
