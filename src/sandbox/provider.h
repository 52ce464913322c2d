/* sbx: the provider interface, private to the source tree (never installed).
 *
 * Every provider lives in a leaf folder of its own under src/providers/ (local/, docker/) and
 * implements the vtables below; the provider-independent half (src/sandbox/: session/,
 * manifest/, materialize/, snapshot/) is written once over them. A provider makes itself known
 * with one struct sbx__provider_def, listed in the registry's table (src/providers/table.c):
 * nothing outside a provider's folder includes that provider's own headers. */
#ifndef SBX_SANDBOX_PROVIDER_H
#define SBX_SANDBOX_PROVIDER_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>
#include <jansson.h>

#include "sbx/progress.h"
#include "sbx/provider.h"
#include "sbx/session.h"

/* ---------------------------------------------------------------------------------------------
 * Provider interface. A provider allocates a struct that starts with struct sbx_session (or
 * struct sbx_client), calls the _init_base function and fills in its ops. Paths reaching the
 * ops are normalised workspace-relative paths ("" is the root). */

struct sbx_proc_ops {
    int (*wait)(struct sbx_proc *p, int64_t timeout_ms, struct sbx_exit *out,
                struct sbx_error *err);
    void (*free)(struct sbx_proc *p);
    /* Optional (NULL: the process cannot outlive its handle): leave the process running in the
     * sandbox, its output read and dropped by the provider, until it ends or the sandbox goes;
     * the handle is freed on success. On failure the caller frees (kills) it. */
    int (*detach)(struct sbx_proc *p, struct sbx_error *err);
};

struct sbx_file_reader {
    /* Fill buf with up to n bytes; return the count, 0 at the end, or -code on error. */
    long (*read)(void *ctx, void *buf, size_t n, struct sbx_error *err);
    void *ctx;
    /* Optional (NULL: none): skip the hole at the current position, *hole = its length (0 at
     * data). A provider that can make sparse files leaves that many bytes as a hole; holes do
     * not count against a write's max. A hole at the end makes a read return 0 next. */
    int (*skip_hole)(void *ctx, uint64_t *hole, struct sbx_error *err);
};

struct sbx__shellfs; /* src/sandbox/shellfs/shellfs.h */

struct sbx_session_ops {
    int (*exec_start)(struct sbx_session *s, const struct sbx_exec_spec *spec, const char *cwd,
                      struct sbx_proc **out, struct sbx_error *err);
    int (*read_open)(struct sbx_session *s, const char *path, int *out_fd, uint64_t *out_size,
                     struct sbx_error *err);
    int (*write)(struct sbx_session *s, const char *path, const struct sbx_file_reader *r,
                 uint64_t max, mode_t mode, int flags, struct sbx_error *err);
    int (*ls)(struct sbx_session *s, const char *path, struct sbx_dirlist *out,
              struct sbx_error *err);
    int (*stat)(struct sbx_session *s, const char *path, struct sbx_dirent *out,
                struct sbx_error *err);
    int (*mkdir)(struct sbx_session *s, const char *path, int flags, struct sbx_error *err);
    int (*rm)(struct sbx_session *s, const char *path, int flags, struct sbx_error *err);
    int (*chmod)(struct sbx_session *s, const char *path, mode_t mode, struct sbx_error *err);
    /* Optional (NULL: the provider cannot set groups): give path (never followed if a symlink)
     * the group named group, a group or user of the sandbox's manifest as the sandbox sees it.
     * SBX_E_NOTFOUND for a name the sandbox does not have, SBX_E_UNSUPPORTED where the sandbox
     * maps no such group. */
    int (*chgrp)(struct sbx_session *s, const char *path, const char *group, struct sbx_error *err);
    /* Optional (NULL: the provider cannot): give the workspace root directory itself (not what
     * lies in it) to user, a declared user of the sandbox's manifest (its private group too).
     * SBX_E_UNSUPPORTED where the sandbox maps no such user. */
    int (*chown_root)(struct sbx_session *s, const char *user, struct sbx_error *err);
    int (*resolve_port)(struct sbx_session *s, int port, char **out_url, struct sbx_error *err);
    int (*state)(struct sbx_session *s, json_t **out, struct sbx_error *err);
    int (*close)(struct sbx_session *s, int delete_workspace, struct sbx_error *err);
    /* Optional (NULL: snapshots unsupported): a directory fd of the workspace on this host,
     * borrowed (valid until the session is freed), and the recording of a snapshot reference
     * taken of it in the session state. */
    int (*workspace_fd)(struct sbx_session *s, int *out, struct sbx_error *err);
    int (*record_snapshot)(struct sbx_session *s, const char *ref, struct sbx_error *err);
    /* Optional (NULL: the stats trait is not declared): CPU, memory, processes and their
     * limits, and the disk limit (the layer measures the disk itself through workspace_fd). */
    int (*stats)(struct sbx_session *s, struct sbx_session_stats *out, struct sbx_error *err);
    /* Optional (NULL: no logs trait): a readable descriptor of the sandbox's log (caller
     * closes). */
    int (*log_open)(struct sbx_session *s, int *out_fd, struct sbx_error *err);
    /* Optional, with record_snapshot (NULL: snapshots go through workspace_fd): write the
     * workspace as a tar stream to out_fd (borrowed; blocking writes; the session layer reads
     * the other end of this pipe from another thread and closes it), members named relative
     * to the workspace root ("a/b" or "./a/b"; "." or "./" for the root itself), any tar format
     * and compression libarchive reads. The stream is hostile input to the snapshot store
     * (docs/internals/remote.md, "Workspace streams"). Preferred to workspace_fd: a remote
     * workspace streams into the store without a copy on this host. */
    int (*workspace_export)(struct sbx_session *s, int out_fd, struct sbx_error *err);
    /* Optional (NULL: the provider restores snapshots its own way): unpack the tar read from
     * in_fd (borrowed; until its end) into the workspace root, which holds only what the
     * sandbox was made with. The tar is uncompressed pax from the snapshot store: "./path"
     * members, each directory before its content, symlinks last, owners root; the provider
     * gives the files to the session's user. sbx__session_restore_stream (session/internal.h)
     * feeds it. */
    int (*workspace_import)(struct sbx_session *s, int in_fd, struct sbx_error *err);
    /* Optional: for a provider whose files go through the shared script of
     * src/sandbox/shellfs/, its shellfs for s; the shellfs session ops (sbx__shellfs_s_ls...)
     * use it. */
    void (*shellfs)(struct sbx_session *s, struct sbx__shellfs *out);
    void (*free)(struct sbx_session *s);
};

struct sbx_pty_entry; /* private */

struct sbx_session {
    const struct sbx_session_ops *ops;
    const char *provider;
    char *id;   /* owned */
    char *root; /* owned */
    /* private: progress of long operations (sbx_session_set_progress) */
    sbx_progress_fn *progress_fn;
    void *progress_data;
    /* private: events */
    sbx_session_event_fn *event_fn;
    void *event_data;
    uint64_t event_seq; /* atomic */
    /* private: the interactive-process table */
    pthread_mutex_t lock;
    struct sbx_pty_entry **ptys;
    size_t n_ptys;
    uint64_t pty_clock;
    /* private: the manifest the sandbox was made from (sbx__session_manifest, session/
     * internal.h), owned: a copy the provider's create hands over (sbx__session_set_manifest),
     * else parsed once from the session state when first asked for; NULL until then. */
    struct sbx_manifest *manifest;
    /* private: the state's change mark (sbx_session_state_gen), atomic: 0 while the provider
     * does not count changes; a provider that does calls sbx__session_state_changed once when
     * the session is made and again after every change to what its state op returns. */
    uint64_t state_gen;
};

/* A new mark for s's state (sbx_session_state_gen): unique across every session of this
 * process, so that no two states share one. */
void sbx__session_state_changed(struct sbx_session *s);

/* Initialise the shared part (copies id and root). */
void sbx_session_init_base(struct sbx_session *s, const struct sbx_session_ops *ops,
                           const char *provider, const char *id, const char *root);
/* Release the shared part (kills interactive processes, frees id and root). */
void sbx_session_release_base(struct sbx_session *s);

struct sbx_client_ops {
    int (*create)(struct sbx_client *c, const struct sbx_create_spec *spec,
                  struct sbx_session **out, struct sbx_error *err);
    int (*attach)(struct sbx_client *c, const char *id, struct sbx_session **out,
                  struct sbx_error *err);
    /* Optional (NULL: attach): attach without asking the sandbox whether it is live
     * (sbx_client_attach_once); a dead one fails at the session's first operation. */
    int (*attach_once)(struct sbx_client *c, const char *id, struct sbx_session **out,
                       struct sbx_error *err);
    int (*list)(struct sbx_client *c, json_t **out, struct sbx_error *err);
    int (*remove)(struct sbx_client *c, const char *id, int keep_workspace, struct sbx_error *err);
    /* Optional (NULL: SBX_E_UNSUPPORTED). */
    int (*list_all)(struct sbx_client *c, json_t **out, struct sbx_error *err);
    int (*prune)(struct sbx_client *c, int keep_workspace, json_t **out, struct sbx_error *err);
    /* Required: state is a checked session state of this provider. */
    int (*resume)(struct sbx_client *c, const json_t *state, const struct sbx_resume_opts *opts,
                  struct sbx_session **out, struct sbx_error *err);
    /* Optional (NULL: SBX_E_UNSUPPORTED). */
    int (*stop)(struct sbx_client *c, const char *id, char **out_ref, struct sbx_error *err);
    int (*start)(struct sbx_client *c, const char *id, const struct sbx_resume_opts *opts,
                 struct sbx_session **out, struct sbx_error *err);
    int (*stopped_state)(struct sbx_client *c, const char *id, json_t **out, struct sbx_error *err);
    /* Optional (NULL: never): non-zero when the sandboxes c creates end with the calling
     * process (sbx_local_options.tied), so a run that must outlive it cannot use c. */
    int (*tied)(const struct sbx_client *c);
    void (*free)(struct sbx_client *c);
};

struct sbx_client {
    const struct sbx_client_ops *ops;
    const char *provider;
};

/* A hidden entry point of a program (a sandbox's supervisor, a test driver) that sbx runs
 * when its first argument is verb ("__supervise"); argv[0] is the verb. */
struct sbx__program {
    const char *verb;
    int (*main)(int argc, char **argv);
};

/* One provider, as the registry knows it (providers/table.c lists them). Required: name,
 * summary, client_new_json, check_state; options may be NULL (none declared). */
struct sbx__provider_def {
    const char *name;    /* "local", "docker": sbx_client_new("local", ...) */
    const char *summary; /* one line for `sbx sandbox providers` and the help */
    unsigned traits;     /* enum sbx_provider_trait (sbx/provider.h) */
    /* Mount entry types it refuses (bits 1u << enum sbx_entry_type; without SBX_PROVIDER_MOUNTS
     * all of them), and why, with what it would take: one sentence for the refusal (required
     * when any bit is set). Refused before a run or a create starts (sbx_provider_check_mounts),
     * and by the materialiser. */
    unsigned unmountable;
    const char *unmountable_why;
    /* The declared options, ending with an entry whose key is NULL. */
    const struct sbx_provider_option *options;
    /* A client with the provider's typed options struct (opts NULL: defaults). NULL: the
     * provider has no options struct: sbx_client_new gives client_new_json no options for
     * opts NULL, and SBX_E_INVAL "the NAME provider takes its options as JSON" otherwise. */
    int (*client_new)(const void *opts, struct sbx_client **out, struct sbx_error *err);
    /* A client from declared options already checked against options (canonical JSON: every
     * key declared, every value of its type; sbx/provider.h). */
    int (*client_new_json)(const json_t *options, struct sbx_client **out, struct sbx_error *err);
    /* Optional (NULL: the types suffice): the provider's own rules over checked options
     * (network modes, combinations), the errors client_new_json would give, without a client
     * or any output. */
    int (*options_check)(const json_t *options, struct sbx_error *err);
    /* Optional, with SBX_PROVIDER_LISTS (NULL: always, with no options): the options under
     * which it finds its sandboxes here unconfigured, into *out (an object the caller owns);
     * -SBX_E_NOTFOUND when nothing is configured (no engine). */
    int (*probe)(json_t **out, struct sbx_error *err);
    /* Check the provider-specific part of a session state it made. */
    int (*check_state)(const json_t *state, struct sbx_error *err);
    /* Hidden program entry points, ending with a NULL verb; NULL: none. */
    const struct sbx__program *programs;
};

/* Every provider, by name, the first the default (providers/table.c, in libsbx only). */
extern const struct sbx__provider_def *const sbx__providers[];
extern const size_t sbx__n_providers;

/* The provider called name (NULL: the default), or NULL (registry.c). */
const struct sbx__provider_def *sbx__provider_def(const char *name);
/* The traits of the provider called name; 0 for an unknown one (registry.c). */
unsigned sbx__provider_traits(const char *name);
/* Why the provider called name cannot mount entries of type t, or NULL when it can (or the
 * type is not a mount, or the provider is unknown) (registry.c). */
const char *sbx__provider_unmountable(const char *name, int t);
/* SBX_E_UNSUPPORTED naming the first entry of m the provider called name cannot mount, with
 * why (registry.c; sbx_provider_check_mounts). */
struct sbx_manifest;
int sbx__provider_check_mounts(const char *name, const struct sbx_manifest *m,
                               struct sbx_error *err);
/* SBX_E_NOTFOUND "unknown provider 'name' (local, docker, ...)", the list from the table. */
int sbx__provider_unknown(const char *name, struct sbx_error *err);
/* A list option of "KEY=VALUE" strings (what: its name) into an object *out (caller owns);
 * SBX_E_INVAL naming the option for another shape. */
int sbx__option_pairs(const json_t *list, const char *what, json_t **out, struct sbx_error *err);
/* The fields a hosted provider's session state has first (providers/state.c): "id" a string
 * valid accepts (else SBX_E_INVAL "field 'id': 'X' is not WHAT", what "an e2b sandbox id"),
 * "root" an absolute path. */
int sbx__state_check_id_root(const json_t *st, int (*valid)(const char *id), const char *what,
                             struct sbx_error *err);

#endif
