/* sbx internal: the pieces of the memory capability that unit tests check on their own. */
#ifndef SBX_MEMORY_INTERNAL_H
#define SBX_MEMORY_INTERNAL_H

#include <jansson.h>

#include "sbx/buf.h"
#include "sbx/error.h"
#include "sbx/strv.h"

/* Strings in a rollout longer than this keep their head and tail around a marker. */
#define SBX_MEMORY_ITEM_STRING_MAX ((size_t)16 << 10)
/* One rollout line (one run) at most; older generated items are dropped to fit. */
#define SBX_MEMORY_ROLLOUT_LINE_MAX ((size_t)1 << 20)
/* The summary injected into the instructions, in tokens (about 4 bytes each). */
#define SBX_MEMORY_SUMMARY_TOKENS 15000
/* What a phase-one call sees of one rollout file, in tokens. */
#define SBX_MEMORY_ROLLOUT_TOKENS 150000
#define SBX_MEMORY_REDACTED       "[REDACTED_SECRET]"

/* 1 when a conversation item belongs in a rollout (the reference's filter: messages of the user,
 * the assistant and tools, and tool calls with their outputs; never system or developer
 * messages, reasoning, compaction or image generation), else 0. */
int sbx__memory_item_keep(const json_t *item);

/* Replace every occurrence of each value in secrets (values shorter than 4 bytes are ignored)
 * in every string of v (keys included), in place, with SBX_MEMORY_REDACTED. */
void sbx__memory_scrub(json_t *v, const struct sbx_strv *secrets);

/* A workspace-relative layout directory: not empty, not absolute, no "." or ".." component, no
 * empty component, at most 256 bytes. what names it in the error. */
int sbx__memory_check_dir(const char *what, const char *path, struct sbx_error *err);

/* A file-safe rollout id: [A-Za-z0-9][A-Za-z0-9._-]{0,127}. */
int sbx__memory_id_ok(const char *id);

/* A slug the model proposed, made file-safe: lower case, [a-z0-9_-] only (others become '-'),
 * at most 80 bytes, "rollout" when nothing is left. out: 81 bytes. */
void sbx__memory_slug(const char *in, char *out);

/* One run as captured. All borrowed. */
struct sbx__memory_rollout {
    const char *rollout_id;
    const char *updated_at;
    const json_t *input;     /* the run's input items */
    const json_t *generated; /* the items the run produced */
    const char *terminal_state;
    const char *error;        /* NULL: none */
    const char *final_output; /* NULL: none */
    const struct sbx_strv *secrets;
};

/* The rollout as one compact JSON line (with its newline) appended to out: filtered, strings
 * bounded, secrets scrubbed, and at most max bytes (older generated items dropped first, then
 * input items, counted in "omitted_items"). */
int sbx__memory_rollout_line(const struct sbx__memory_rollout *r, size_t max, struct sbx_buf *out,
                             struct sbx_error *err);

/* Phase one's two files, with the Agents SDK's headers (its _format_raw_memory and
 * _format_rollout_summary), so that either reads a memory folder the other wrote:
 *   raw_memories/<id>.md:  rollout_id, updated_at, rollout_path, rollout_summary_file (relative
 *                          to the memories folder: "rollout_summaries/<id>_<slug>.md"),
 *                          terminal_state, a blank line, the text;
 *   rollout_summaries/...: session_id (the sandbox session), updated_at, rollout_path,
 *                          terminal_state, a blank line, the text.
 * The text loses its trailing whitespace and ends with one newline. Caller frees. */
char *sbx__memory_raw_doc(const char *rollout_id, const char *updated_at, const char *rollout_path,
                          const char *summary_file, const char *terminal_state, const char *text);
char *sbx__memory_summary_doc(const char *session_id, const char *updated_at,
                              const char *rollout_path, const char *terminal_state,
                              const char *text);

#endif
