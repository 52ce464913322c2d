/* sbx: capabilities: what a sandbox agent can do in its workspace.
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
 *                 indexed and copied one at a time by load_skill (skills.h lists skills)
 *   "memory"      memory across runs: a summary in the instructions, each run's conversation
 *                 captured into the workspace, and memory files generated from them after the
 *                 run (memory.h)
 *
 * and the default list is filesystem, shell, compaction; an explicit list replaces it. This
 * header also has the toolsets capabilities add and the instructions a sandbox agent gets; a
 * run with sandboxes and capabilities is sandbox-run.h. docs/internals/capabilities.md has the
 * details. */
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

/* The "compaction" capability's threshold for a model: 90% of its context window from the built-in
 * table (names compared lower-case without "openai/", "." and "-"), or 240000 when unknown. */
SBX_API long sbx_compaction_threshold(const char *model_name);

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
