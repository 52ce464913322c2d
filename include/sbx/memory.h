/* sbx: memory across runs, the "memory" capability (capability.h) seen from outside a run.
 *
 * A memory capability reads a summary into the instructions, captures each run's conversation
 * into the workspace (the layout's sessions folder) and, after the run's answer was shown,
 * generates memory files from them (the layout's memories folder): sbx_sandbox_run_after does
 * that for the sessions of a sandbox run (sandbox-run.h), sbx_memory_update for one workspace.
 * docs/internals/capabilities.md, "memory", has the files and the two phases. */
#ifndef SBX_MEMORY_H
#define SBX_MEMORY_H

#include "capability.h"
#include "common.h"
#include "error.h"
#include "model.h"
#include "session.h"

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

#endif
