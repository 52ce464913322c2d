/* sbx: run states — what a run needs to continue later (pause for approval, crash resume).
 *
 * A run state is a versioned JSON document made by the runner (sbx_run_result_state and every
 * checkpoint, runner.h) and read back to continue the run (sbx_run_options.resume). Format
 * (docs/internals/runstate.md):
 *   {"format": "sbx-run-state", "version": 2, "digest": "sha256:<hex>", "run_id": hex,
 *    "status": "running" | "interrupted" | "completed" | "failed", "error": text | null,
 *    "updated_at": RFC 3339, "start_agent": name, "current_agent": name,
 *    "agents": [{"name", "file": path | null, "digest": "sha256:.." | null}] (reachable ones),
 *    "agent_files": [{"path", "digest"}] | null, "turn": N, "max_turns": N,
 *    "items": [...] (the whole conversation), "input_items": N (how many of them were input),
 *    "usage": {...}, "model": name | null, "model_settings": {...} | null,
 *    "previous_response_id": id | null, "sent_upto": N, "tools_used": [agent name, ...],
 *    "conversation": {"name", "saved_upto": N} | null,
 *    "open_calls": [call id, ...] (the last response's calls without output yet),
 *    "pending": [{"agent", "tool", "call_id", "type", "arguments", "turn"}] (needing approval),
 *    "decisions": [{"call_id", "tool", "type", "turn", "arguments_digest", "approved",
 *                   "message"?, "by"}] (every decision taken: a log, never used again;
 *                   version 1: {call id: {"approved", "message"?}}),
 *    "always": [{"tool", "approved", "message"?, "by", "turn"}] (decisions for every later call
 *              of a tool), "always_seal": "hmac-sha256:<hex>" | absent (sbx_run_state_seal),
 *    "final_output": text | null, "sandbox": {...} | null (sbx_run_config.run_state_sandbox
 *    form), "meta": {...} | null (the caller's, verbatim)}
 * "digest" is sha256 over the canonical text (keys sorted, compact, UTF-8) of the document
 * without "digest": an edited or damaged file is refused. Holds no credentials: the sandbox
 * part holds session states (which never do), and serialising scrubs given secret values. */
#ifndef SBX_RUNSTATE_H
#define SBX_RUNSTATE_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "common.h"
#include "error.h"
#include "strv.h"

#define SBX_RUN_STATE_FORMAT  "sbx-run-state"
#define SBX_RUN_STATE_VERSION 2
/* The largest run state read or written (SBX_E_TOOBIG past it). */
#define SBX_RUN_STATE_MAX ((size_t)256 << 20)

struct sbx_agent;
struct sbx_agent_file;

/* Parse and check a run state: one JSON object of at most SBX_RUN_STATE_MAX bytes, format
 * SBX_RUN_STATE_FORMAT, version at most SBX_RUN_STATE_VERSION (a newer one is SBX_E_UNSUPPORTED
 * "run state: version 2 is newer than this sbx reads (1)"), a matching digest (SBX_E_INVAL
 * "run state: its digest does not match its content (the file was edited or damaged)"), every
 * field of the right type; errors name the field ("run state: field 'turn' must be a
 * non-negative integer"). SBX_E_PARSE for text that is not JSON. *out: caller owns. */
SBX_API int sbx_run_state_parse(const char *text, size_t n, json_t **out, struct sbx_error *err);

/* The document as text (pretty JSON and a newline) with its digest computed afresh, after
 * replacing every occurrence of each value in secrets (those of at least 4 bytes) inside any
 * string with "[redacted]". secrets may be NULL. *out: caller owns (free). */
SBX_API int sbx_run_state_serialize(const json_t *state, const struct sbx_strv *secrets, char **out,
                                    struct sbx_error *err);

/* Read / write a run state file. Writing is atomic: a new file beside path (mode 0600) is
 * written, fsynced and renamed over path, and the directory fsynced, so a reader (or a crash)
 * sees the old or the new state, never a mix. */
SBX_API int sbx_run_state_read_file(const char *path, json_t **out, struct sbx_error *err);
SBX_API int sbx_run_state_write_file(const char *path, const json_t *state,
                                     const struct sbx_strv *secrets, struct sbx_error *err);

/* Checkpoints that append (docs/internals/runstate.md, "Checkpoints that append"): what a
 * run's checkpoints write to path, in time linear in the run. While the state's status is
 * "running", path is a head: the fields that change at every checkpoint (status, turn,
 * open_calls, usage, ...; docs/internals/runstate.md lists them) and no others,
 * naming a log beside it ("<name>.0.log" or "<name>.1.log") with one record per item and per
 * change of any other field, each carrying a SHA-256 chained over every record before it. Each
 * checkpoint appends its new records and fdatasyncs them before the head is written atomically
 * (as sbx_run_state_write_file). A field whose value is the very object the previous
 * checkpoint had is taken as unchanged: change a value by passing a new one, never in place.
 * Items must be appended to, never edited: when the state's
 * items are not the ones written before plus new ones (by object), or the secrets changed, a
 * whole new log is written under the other name and renamed into place. Any other status
 * writes the whole document with sbx_run_state_write_file and removes the log.
 * sbx_run_state_read_file reads both forms. *out: sbx_run_state_log_close. */
struct sbx_run_state_log; /* opaque */
SBX_API int sbx_run_state_log_open(const char *path, struct sbx_run_state_log **out,
                                   struct sbx_error *err);
SBX_API int sbx_run_state_log_write(struct sbx_run_state_log *l, const json_t *state,
                                    const struct sbx_strv *secrets, struct sbx_error *err);
SBX_API void sbx_run_state_log_close(struct sbx_run_state_log *l);
/* Remove the state file path and the log it names, if any. */
SBX_API int sbx_run_state_remove_file(const char *path, struct sbx_error *err);

/* Seal state's "always" list to its "run_id": "always_seal" = "hmac-sha256:<hex>" of the
 * canonical text of {"always", "run_id"} under key (a key of this user's, never in a state).
 * A state file anyone could edit then carries "always" approvals only its writer could make. */
SBX_API int sbx_run_state_seal(json_t *state, const uint8_t *key, size_t keylen,
                               struct sbx_error *err);
/* The "always" decisions a resume may take from state: all of them when its seal verifies
 * under key, else only the rejections (which only narrow what runs); *dropped (may be NULL):
 * how many approvals were left out. key NULL: none verifies. *out: caller owns (a list). */
SBX_API json_t *sbx_run_state_always(const json_t *state, const uint8_t *key, size_t keylen,
                                     size_t *dropped);

/* Check that the agent files a state was made with are unchanged: f is the start agent's file
 * loaded afresh; every file in the state's "agent_files" must be in f with the same digest
 * unless allow_changed (SBX_E_INVAL "run state: agent file '/p/a.yaml' changed since the run
 * was saved (sha256:1a2b3c4d.. then, sha256:5e6f.. now); allow it with --allow-agent-change"). */
SBX_API int sbx_run_state_check_agent_files(const json_t *state, const struct sbx_agent_file *f,
                                            int allow_changed, struct sbx_error *err);

/* The Agents SDK's RunState (its "$schemaVersion" 1.x: the JS SDK's camelCase document, 1.22
 * and earlier, or the Python SDK's snake_case one, 1.17 and earlier) and sbx run states. */
struct sbx_run_state_import {
    /* The agent the sbx run continues from (required): the SDK run's current agent must be it
     * or one it hands off to, by name. Borrowed. */
    struct sbx_agent *start;
    const json_t *agent_files; /* sbx_agent_file_sources of the agent file, or NULL */
    const json_t *meta;        /* the run state's "meta" (the caller's), or NULL */
    const json_t *sandbox;     /* the run state's "sandbox" the caller made, or NULL */
    /* The run state's "run_id" (the id the records of the sandboxes made for it name,
     * sbx_sandbox_from_sdk); NULL: sandbox's "run_id", else a new one. */
    const char *run_id;
};

/* An sbx run state (version SBX_RUN_STATE_VERSION) continuing the SDK's run: its input and
 * generated items as Responses items ("items", "input_items"), the current agent by name, the
 * turn count, max turns, usage, the calls waiting for approval ("pending" of the current turn,
 * status "interrupted"); calls without an output are the open calls. The SDK's per-call
 * decisions on pending calls go to the "decisions" log, bound to the call as the runner binds
 * them ("by": "SDK run state"; a log, so the calls still wait for a decision on resume); its
 * decisions for every call of a tool ("approved": true / "rejected": true) become "always"
 * decisions, unsealed: the caller seals them (sbx_run_state_seal) when it vouches for them.
 * What sbx cannot continue is SBX_E_UNSUPPORTED naming the SDK's field ("SDK run state: field
 * 'conversationId': ..."): a server-side conversation, queued input, a nested agent-as-tool
 * run, a handoff in progress, an item type sbx lacks, an every-call decision for a tool name
 * with glob characters. A finished run is refused too. SBX_E_INVAL for a document without
 * "$schemaVersion" or whose agent does not match. The result has no digest yet
 * (sbx_run_state_serialize adds it). *out: caller owns. */
SBX_API int sbx_run_state_from_sdk(const json_t *sdk, const struct sbx_run_state_import *opt,
                                   json_t **out, struct sbx_error *err);

/* A parsed sbx run state as the JS SDK's RunState ("$schemaVersion" 1.22), which
 * RunState.fromString loads with agents of the same names and tools: the items as the SDK's
 * protocol items (input, then generated items of the current agent), the pending calls as
 * approval interruptions with the response that made them, turn, max turns and usage. The
 * approval records: the logged decisions bound to a call still pending (a version 1 state's
 * are ignored), and always (the "always" decisions the caller trusts, e.g.
 * sbx_run_state_always; NULL: none) as "approved: true" / "rejected: true" of the tool, a glob
 * for each tool of the state's calls it matches. SBX_E_UNSUPPORTED naming the field for what
 * the SDK cannot take: sandboxes ("sandbox"), calls that were running when the run stopped
 * ("open_calls"), an item type the SDK's protocol lacks; SBX_E_INVAL for a completed run.
 * *out: caller owns. */
SBX_API int sbx_run_state_to_sdk(const json_t *state, const json_t *always, json_t **out,
                                 struct sbx_error *err);

#endif
