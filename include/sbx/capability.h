/* sbx: capabilities and sandbox runs (SandboxAgent end to end).
 *
 * A sandbox agent is an ordinary struct sbx_agent whose sandbox part (sbx_agent_set_sandbox_spec,
 * or the agent file's manifest / capabilities / run_as / base_instructions fields) says what
 * workspace it starts from and which capabilities it has. A capability contributes, for one agent
 * in one run: changes to the manifest before a fresh session starts, an instructions fragment,
 * tools bound to the live session, extra model request fields, a filter over the model input, and
 * a hook at the end of the run. The built-in ones are
 *
 *   "filesystem"  apply_patch (V4A patches, all or nothing) and view_image
 *   "shell"       exec_command and write_stdin
 *   "compaction"  server-side context compaction (Responses API context_management)
 *   "skills"      folders with a SKILL.md copied into the workspace and listed, or (lazy)
 *                 indexed and copied one at a time by load_skill
 *   "memory"      memory across runs: a summary in the instructions, each run's conversation
 *                 captured into the workspace, and memory files generated from them after the
 *                 run (sbx_sandbox_run_after, sbx_memory_update)
 *
 * and the default list is filesystem, shell, compaction; an explicit list replaces it.
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
#ifndef SBX_CAPABILITY_H
#define SBX_CAPABILITY_H

#include <jansson.h>

#include "agent.h"
#include "buf.h"
#include "common.h"
#include "error.h"
#include "manifest.h"
#include "progress.h"
#include "runner.h"
#include "session.h"

struct sbx_capability; /* refcounted */

/* Which wire form the apply_patch tool is offered in. Whatever is offered, calls in all three
 * forms are accepted. */
enum sbx_patch_transport {
    SBX_PATCH_TRANSPORT_AUTO = 0, /* built-in on the Responses API, function on Chat */
    SBX_PATCH_TRANSPORT_BUILTIN,  /* {"type":"apply_patch"}: apply_patch_call items */
    SBX_PATCH_TRANSPORT_CUSTOM,   /* custom (freeform) tool "apply_patch" with a grammar */
    SBX_PATCH_TRANSPORT_FUNCTION, /* function tool "apply_patch" {"input": string} */
};

/* Progress of work done after a run, one line at a time (borrowed for the call). */
typedef void sbx_progress_line_fn(const char *line, void *data);

struct sbx_strv;

/* What a capability sees of the agent it serves in one run. Borrowed for the call. */
struct sbx_capability_env {
    struct sbx_session *session; /* the agent's live session (NULL in process_manifest) */
    struct sbx_agent *agent;
    const char *model_name; /* the model name the requests carry; may be NULL */
    enum sbx_model_api api; /* the wire API of the run's model (replay counts as Responses) */
    /* The run's model client: in run_end and after_run (NULL elsewhere). */
    struct sbx_model *model;
    /* In run_end only (NULL / 0 elsewhere): the run's input items and the items it produced
     * (also for a failed run: what it got to), the conversation name (NULL: none), the run's
     * result (0 or its -code, with the error message), its final output text (NULL: none), and
     * the values of the harness secrets handed to the run's sandboxes. */
    const json_t *input_items;
    const json_t *generated_items;
    const char *conversation;
    int run_status;
    const char *run_error;
    const char *final_output;
    const struct sbx_strv *secrets;
    /* In after_run: where progress lines go (may be NULL). */
    sbx_progress_line_fn *progress;
    void *progress_data;
};

/* Tools a capability adds: offered ones are sent to the model; hidden ones are only dispatched
 * (another wire form of an offered tool). The set holds one reference to each. */
struct sbx_toolset {
    struct sbx_tool **offered;
    size_t noffered;
    struct sbx_tool **hidden;
    size_t nhidden;
};

/* Add t to the set (takes a new reference). */
SBX_API void sbx_toolset_add(struct sbx_toolset *ts, struct sbx_tool *t, int offered);
SBX_API void sbx_toolset_release(struct sbx_toolset *ts);

/* Every hook may be NULL. Hooks of one capability object may be called for several agents and
 * from several threads (nested agent-as-tool runs): keep per-agent state in the tools' data. */
struct sbx_capability_ops {
    /* Before a fresh session is created from m (owned by the run). */
    int (*process_manifest)(struct sbx_capability *c, struct sbx_manifest *m,
                            struct sbx_error *err);
    /* Append an instructions fragment (nothing: no fragment). Called once per agent and
     * session. */
    int (*instructions)(struct sbx_capability *c, const struct sbx_capability_env *env,
                        struct sbx_buf *out, struct sbx_error *err);
    /* Add tools bound to env->session. Called once per agent and session. */
    int (*tools)(struct sbx_capability *c, const struct sbx_capability_env *env,
                 struct sbx_toolset *out, struct sbx_error *err);
    /* Add or change top-level request fields in settings (a copy of the agent's settings). */
    int (*model_settings)(struct sbx_capability *c, const struct sbx_capability_env *env,
                          json_t *settings, struct sbx_error *err);
    /* Every turn: the model input (borrowed). Set *out to a new array to replace it, or leave
     * it NULL. */
    int (*process_input)(struct sbx_capability *c, const json_t *items, json_t **out,
                         struct sbx_error *err);
    /* At the end of the run, before the session is closed (whether the run succeeded or not).
     * Errors are logged, not returned to the run. Returns 1 when after_run has work to do. */
    int (*run_end)(struct sbx_capability *c, const struct sbx_capability_env *env,
                   struct sbx_error *err);
    /* Work that must not delay the run's answer (memory generation): run by
     * sbx_sandbox_run_after with the session still open, after run_end returned 1 ("work
     * pending") instead of 0. */
    int (*after_run)(struct sbx_capability *c, const struct sbx_capability_env *env,
                     struct sbx_error *err);
    /* At the first turn, with the agent's whole capability list: refuse a combination that
     * cannot work (a missing required capability). */
    int (*check)(struct sbx_capability *c, struct sbx_capability *const *all, size_t n,
                 struct sbx_error *err);
    void (*free_data)(void *data);
};

/* Make a capability of type (a short name such as "shell") from ops and data (data is owned by
 * the capability and freed with ops->free_data, also on failure). *out: caller owns one
 * reference (sbx_capability_unref). */
SBX_API int sbx_capability_new(const char *type, const struct sbx_capability_ops *ops, void *data,
                               struct sbx_capability **out, struct sbx_error *err);
SBX_API struct sbx_capability *sbx_capability_ref(struct sbx_capability *c);
SBX_API void sbx_capability_unref(struct sbx_capability *c);
SBX_API const char *sbx_capability_type(const struct sbx_capability *c);
SBX_API void *sbx_capability_data(const struct sbx_capability *c);

/* Built-in capabilities from their agent-file form: a type name ("shell") or an object
 *   {"type": "filesystem", "apply_patch": "builtin" | "custom" | "function" | "auto"}
 *   {"type": "shell", "max_output_tokens": N, "default_yield_ms": N}
 *   {"type": "compaction", "threshold": N (tokens) | "ratio": 0.5..1, "context_window": N}
 *   {"type": "skills", "from": FOLDER | {"type": "local_dir", "src": FOLDER}
 *        | {"type": "git_repo", "repo", "ref", "host", "subpath"} | {"type": "workspace",
 *        "path": P}, "lazy": false, "skills_path": ".agents"} (a relative FOLDER resolves
 *        against the current directory here, against the agent file's in agent files; the host
 *        is read only when a session is bound)
 *   {"type": "memory", "layout": {"memories_dir": "memories", "sessions_dir": "sessions"},
 *    "read": true | null | {"live_update": bool}, "generate": true | null |
 *    {"max_raw_memories_for_consolidation": 1..4096, "phase_one_model": NAME,
 *     "phase_two_model": NAME, "extra_prompt": TEXT}}   (read null: generate-only; generate
 *    null: read-only; false is taken as null; both null is SBX_E_INVAL)
 * SBX_E_NOTFOUND for an unknown type (naming the known ones), SBX_E_INVAL for a bad field.
 * *out: caller owns a reference. */
SBX_API int sbx_capability_from_json(const json_t *spec, struct sbx_capability **out,
                                     struct sbx_error *err);

/* The compaction threshold for a model: 90% of its context window from the built-in table
 * (names compared lower-case without "openai/", "." and "-"), or 240000 when unknown. */
SBX_API long sbx_compaction_threshold(const char *model_name);

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

/* Remove what a resumable run left for its state: for each session in the state's "sandbox"
 * payload that the run owned, delete the sandbox if it is still live (or its stopped record)
 * and release its "runstate-<id>" snapshot hold. Sessions it only attached to are left alone.
 * Used by `sbx state rm`. client NULL: a local client. */
SBX_API int sbx_sandbox_run_state_discard(struct sbx_client *client, const json_t *sandbox,
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

/* Memory generation for one workspace, as sbx_sandbox_run_after does it: phase one for every
 * rollout file in the layout's sessions folder that is new or grew since the last update (one
 * model call each, no tools), then phase two (one model call) consolidating the raw memories
 * into MEMORY.md and memory_summary.md. memory: a "memory" capability (SBX_E_INVAL otherwise,
 * or when its generate is off). Writes only under the memories folder. Blocks. */
SBX_API int sbx_memory_update(struct sbx_capability *memory, struct sbx_session *s,
                              struct sbx_model *model, const char *model_name,
                              sbx_progress_line_fn *progress, void *progress_data,
                              struct sbx_error *err);

/* The layout of a "memory" capability (borrowed strings); SBX_E_INVAL for another type. */
SBX_API int sbx_memory_layout(const struct sbx_capability *memory, const char **memories_dir,
                              const char **sessions_dir, struct sbx_error *err);

/* Free the run's handles (sandboxes already deleted or kept stay as they are). NULL ok. */
SBX_API void sbx_sandbox_run_free(struct sbx_sandbox_run *sr);

/* The instructions a sandbox agent gets, in this order, separated by blank lines: the base
 * prompt (the agent's base_instructions, else sbx's own), "# Agent instructions" with the
 * agent's, "# Sandbox capability instructions" with the fragments in capability order,
 * "# Workspace" with the tree of the actual files (depth 3, at most 5000 bytes), and
 * "# AGENTS.md" with that file at the workspace root (at most 16 KiB). Appends to out. */
SBX_API int sbx_sandbox_instructions(struct sbx_session *s, struct sbx_agent *agent,
                                     const char *fragments, struct sbx_buf *out,
                                     struct sbx_error *err);

/* The base prompt sbx gives sandbox agents (static). */
SBX_API const char *sbx_sandbox_base_prompt(void);

#endif
