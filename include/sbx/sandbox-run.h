/* sbx: sandbox runs (SandboxAgent end to end): sbx_run() with a session for every sandbox
 * agent, its capabilities, tools and instructions (capability.h).
 *
 * A run with a sandbox (sbx_sandbox_run) resolves one session per sandbox agent the first time
 * that agent takes a turn, taking the first of: the live session of the run configuration
 * (shared by every agent, never closed by the run), or the sandbox whose id it names (shared,
 * left running); the agent's session state in a resumed run state; the serialized session state
 * the configuration passes; else a fresh sandbox from the per-run manifest or the agent's own
 * (one per agent unless the configuration asks to share one), restored from a snapshot when one
 * is given. Sessions the run created or resumed are deleted at its end unless the configuration
 * keeps them; a snapshot of each session the run used can be taken just before.
 * docs/internals/capabilities.md has the details. */
#ifndef SBX_SANDBOX_RUN_H
#define SBX_SANDBOX_RUN_H

#include <jansson.h>

#include "agent.h"
#include "capability.h"
#include "common.h"
#include "error.h"
#include "progress.h"
#include "runner.h"
#include "session.h"

/* Per-run sandbox choices. All-zero is valid: a fresh local sandbox per sandbox agent from its
 * own manifest, deleted at the end. All pointers borrowed for the run.
 *
 * Where a sandbox agent's session comes from, first match wins (the sources below it are not
 * touched): session / session_id; run_state_sandbox (the agent's entry, else its
 * "session_state"); session_state; a fresh one (manifest, snapshot). Several sources may be
 * given: a resumed run state carries whatever its run used, and the higher one wins. A
 * manifest or a snapshot together with a source that serves every agent (session, session_id,
 * session_state) is SBX_E_INVAL: it could never be used. A session state that cannot be resumed
 * fails the agent's first turn; it never falls back to a fresh sandbox. */
struct sbx_strv;
struct sbx_run_config {
    struct sbx_session *session; /* a live session every sandbox agent uses; never closed */
    const char *session_id;      /* else: attach to this live sandbox; left running */
    /* The "sandbox" payload of a resumed run state: {"session_state": {...}, "sessions_by_agent":
     * {"<agent name>": {"agent_name": "...", "session_state": {...}}}}. An agent with an entry
     * (by key, else by "agent_name") resumes its "session_state", any other agent the top-level
     * one; without either it falls through. SBX_E_INVAL for a malformed payload. */
    const json_t *run_state_sandbox;
    /* A serialized session state (sbx_session_state) every agent not served above resumes
     * (sbx_client_resume: attach when live, else rebuild from its snapshot). */
    const json_t *session_state;
    struct sbx_client *client; /* creates / attaches; NULL: sbx_client_new("local", NULL) */
    /* Per-run manifest for fresh sessions, instead of each agent's: a file (YAML or JSON;
     * local sources relative to it), or a parsed document with base_dir for local sources. */
    const char *manifest_path;
    const json_t *manifest_doc;
    const char *base_dir;
    int keep;  /* leave sandboxes the run created running (their ids: sbx_sandbox_run_*) */
    int share; /* every sandbox agent shares the first fresh sandbox */
    /* Treat agents with no sandbox fields as sandbox agents with the default capabilities
     * (for `sbx run --session` / `--manifest` on a plain agent file). */
    int all_agents;
    /* Extra capabilities by type: an agent whose capability list names one of these types
     * gets this object instead of a built-in (borrowed; the run takes references). */
    struct sbx_capability *const *custom;
    size_t ncustom;
    /* Harness credentials fresh sandboxes' manifests may read (sbx_create_spec); borrowed. */
    const struct sbx_strv *pass_secrets;
    /* Every secret value the run knows (sbx_sandbox_run_secrets and the caller's own),
     * scrubbed from the files the capabilities write at the end of the run (memory). The
     * values of pass_secrets are scrubbed in any case. Borrowed; may be NULL. */
    const struct sbx_strv *secrets;
    /* Fresh sandboxes start from this snapshot (a snapshot file or a store reference, resolved
     * once by sbx_sandbox_run_new), then get the manifest's ephemeral entries. */
    const char *snapshot;
    /* At the end of the run (also a failed one), after the capabilities' end hooks and before
     * any session is deleted, snapshot every session the run used, live ones included (reading a
     * workspace changes nothing in it): "store" keeps them in the snapshot store; any other
     * value is a file the first one is also exported to (made at sbx_sandbox_run_new, filled
     * in at the end, removed when nothing was exported). Refs: sbx_sandbox_run_snapshot_ref. */
    const char *snapshot_out;
    /* The run can be continued from its run state (runstate.h; `sbx run --state`): the sessions
     * the run creates or resumes must outlive the calling process (its local client must not be
     * tied: SBX_E_INVAL otherwise), sbx_sandbox_run sets the run's state hook so that every
     * checkpoint records them, and they are deleted only when the run completes (unless keep).
     * A run that is interrupted for approval, fails or is cancelled leaves them running,
     * snapshots each (held as "runstate-<id>" in the store, so that the state can rebuild a
     * sandbox that is gone meanwhile) and records those states in the final checkpoint. */
    int resumable;
    /* The client's canonical declared options, for the records of the sandboxes a resumable
     * run makes (sbx_sandbox_record_claim keeps the LOCATOR ones); NULL: none. Borrowed. */
    const json_t *record_options;
    /* Progress of making and rebuilding the run's sandboxes (sbx_create_spec.progress). */
    sbx_progress_fn *progress;
    void *progress_data;
};

struct sbx_sandbox_run; /* opaque: the sessions of one run */

/* Prepare a sandbox run. *out: caller owns (sbx_sandbox_run_free). Errors: SBX_E_INVAL for a
 * contradictory configuration. */
SBX_API int sbx_sandbox_run_new(const struct sbx_run_config *cfg, struct sbx_sandbox_run **out,
                                struct sbx_error *err);

/* Run agent like sbx_run() (opt is copied and gets the turn hook), giving every sandbox agent
 * its session, capabilities, tools and instructions. When the run ends (successfully or not)
 * the capabilities' end hooks run, cfg->snapshot_out is taken, and sessions the run created or
 * resumed are deleted unless cfg->keep. Errors as sbx_run(), plus session and manifest errors
 * naming the agent; a run that succeeded but whose snapshot_out failed returns that error (and
 * no result). Blocks. A
 * sandbox run object serves one sbx_sandbox_run() call. */
SBX_API int sbx_sandbox_run(struct sbx_sandbox_run *sr, struct sbx_agent *agent,
                            const json_t *input, const struct sbx_run_options *opt,
                            struct sbx_run_result **out, struct sbx_error *err);

/* Where a sandbox agent's session came from (the resolution order above). */
enum sbx_session_source {
    SBX_SESSION_LIVE = 1,  /* cfg.session */
    SBX_SESSION_ATTACHED,  /* cfg.session_id */
    SBX_SESSION_RUN_STATE, /* resumed from cfg.run_state_sandbox */
    SBX_SESSION_STATE,     /* resumed from cfg.session_state */
    SBX_SESSION_FRESH,     /* created from the manifest (and cfg.snapshot) */
};

/* The sandbox agents that took a turn, in that order, with the id of the session each used
 * (agents sharing a session list the same id). Borrowed strings, valid until
 * sbx_sandbox_run_free. created: the session is the run's own, created or resumed by it (the
 * first agent of those sharing it), and was deleted at the end unless keep left it running.
 * snapshot_ref: the reference of its snapshot with cfg.snapshot_out ("sha256:..."; NULL
 * without, or when taking it failed). source: 0 for an index out of range. */
SBX_API size_t sbx_sandbox_run_count(const struct sbx_sandbox_run *sr);
SBX_API const char *sbx_sandbox_run_session_id(const struct sbx_sandbox_run *sr, size_t i);
SBX_API const char *sbx_sandbox_run_agent(const struct sbx_sandbox_run *sr, size_t i);
SBX_API int sbx_sandbox_run_created(const struct sbx_sandbox_run *sr, size_t i);
SBX_API enum sbx_session_source sbx_sandbox_run_source(const struct sbx_sandbox_run *sr, size_t i);
SBX_API const char *sbx_sandbox_run_snapshot_ref(const struct sbx_sandbox_run *sr, size_t i);

/* The values of every secret a run with cfg may hand its sandboxes, appended to out (each
 * once): the harness credentials cfg->pass_secrets names, and the secrets of cfg's manifest and
 * of the manifest of every sandbox agent start reaches (sbx_manifest_secret_values). What the
 * run writes (run states, traces, conversations, recordings) is scrubbed of them. Manifests
 * that do not load are skipped (the run reports them). start may be NULL. */
SBX_API int sbx_sandbox_run_secrets(const struct sbx_run_config *cfg, struct sbx_agent *start,
                                    struct sbx_strv *out, struct sbx_error *err);

/* Remove what a resumable run left for its state: for each session in the state's "sandbox"
 * payload that the run owned, delete the sandbox if it is still live (or its stopped record)
 * and release its "runstate-<id>" snapshot hold. A session is the run's only when the sandbox's
 * own record (sbx_sandbox_record_claim) names the payload's "run_id": "owned" in a file anyone
 * may have edited is not enough, and such a sandbox is left alone with a warning. Sessions it
 * only attached to are left alone. Used by `sbx state rm`. client NULL: a local client. */
SBX_API int sbx_sandbox_run_state_discard(struct sbx_client *client, const json_t *sandbox,
                                          struct sbx_error *err);

/* The sandboxes of an Agents SDK RunState's "sandbox" (JS sessionsByAgent / Python
 * sessions_by_agent, each a unix_local or docker SandboxSessionState) made again as sbx
 * sandboxes through client (NULL: a local client): each from the state's manifest with its
 * workspace restored from the local snapshot the state names (a directory or a tar; Python:
 * <base_path>/<id>.tar), else from the workspace directory it names when that still exists.
 * The sandboxes are left running, each recorded as made by run run_id
 * (sbx_sandbox_record_claim), so that the run state's run owns them. *out: a run state's
 * "sandbox" payload, {"run_id", "sessions_by_agent": {"<agent>": {"agent_name",
 * "session_state", "owned": true}}}. What cannot be made again is
 * refused naming the field: another backend, a docker container without a snapshot (sbx does
 * not adopt a container it did not make), a snapshot or directory that is not there; sandboxes
 * made before the failure are removed. start: the run's start agent (for the names). Blocks. */
SBX_API int sbx_sandbox_from_sdk(struct sbx_client *client, const json_t *sdk_sandbox,
                                 const struct sbx_agent *start, const char *run_id, json_t **out,
                                 struct sbx_error *err);

/* Whether doc is a SandboxSessionState of the Agents SDK (unix_local or docker, JS envelope or
 * Python state) rather than an sbx session state. */
SBX_API int sbx_sandbox_is_sdk_session(const json_t *doc);
/* One SDK SandboxSessionState made again as an sbx sandbox, as sbx_sandbox_from_sdk does for
 * each agent of a RunState; left running. *out: its sbx session state (caller owns). */
SBX_API int sbx_sandbox_from_sdk_session(struct sbx_client *client, const json_t *ss, json_t **out,
                                         struct sbx_error *err);

/* After the run's answer was shown: the capabilities' deferred work (memory generation) on the
 * sessions that outlive the run (kept with cfg.keep, attached or live; for a sandbox the run
 * removes none is done and a progress line says so), with progress lines to progress (may be
 * NULL); skip: none of it. Then every session of the run is released (sbx_sandbox_run leaves
 * them open while work is pending; sbx_sandbox_run_free releases them when this is never
 * called). The run's model (opt->model of sbx_sandbox_run) is used again here: it must still
 * be valid. Returns the first error (also logged at debug level); blocks on model calls. */
SBX_API int sbx_sandbox_run_after(struct sbx_sandbox_run *sr, int skip,
                                  sbx_progress_line_fn *progress, void *progress_data,
                                  struct sbx_error *err);

/* Free the run's handles (sandboxes already deleted or kept stay as they are). NULL ok. */
SBX_API void sbx_sandbox_run_free(struct sbx_sandbox_run *sr);

#endif
