/* sbx: the agent runner (the harness loop). Agents, agents as tools and agent files are in
 * agent.h.
 *
 * sbx_run() drives one run: build the model input (instructions, the conversation so far),
 * call the model, run the tool calls it asked for (in parallel threads when there are several,
 * outputs kept in call order), append everything to the conversation and repeat until the
 * agent produces a final output, hands off, or the turn budget runs out. The conversation is a
 * JSON array of Responses API items from start to end, so a run's state is plain data.
 *
 * Every step is reported through an event callback, called on the thread that called
 * sbx_run() and never concurrently. */
#ifndef SBX_RUNNER_H
#define SBX_RUNNER_H

#include <signal.h>
#include <stdint.h>
#include <jansson.h>

#include "agent.h"
#include "conversation.h"
#include "common.h"
#include "error.h"
#include "model.h"

enum sbx_event_type {
    SBX_EVENT_AGENT_START,  /* an agent becomes current: at the start and after a handoff */
    SBX_EVENT_TURN_START,   /* a turn begins: turn, agent */
    SBX_EVENT_MODEL_STREAM, /* item: a raw Responses stream event (only when streaming) */
    SBX_EVENT_TEXT_DELTA,   /* text: a piece of assistant text as it streams */
    SBX_EVENT_MODEL_DONE,   /* item: the response object; duration_ns: the model call */
    SBX_EVENT_MESSAGE,      /* item: an assistant message; text: its text */
    SBX_EVENT_TOOL_CALL,    /* item: the call item; tool: its name */
    SBX_EVENT_TOOL_OUTPUT,  /* item: the output item; tool; duration_ns; failed */
    SBX_EVENT_HANDOFF,      /* agent: from; text: to */
    SBX_EVENT_FINAL,        /* text: the final output; item: its parsed JSON when structured */
    SBX_EVENT_ERROR,        /* error: why the run ends */
    SBX_EVENT_INTERRUPTION, /* item: the pending calls (sbx_run_result_interruptions form) */
    SBX_EVENT_NOTICE,       /* text: something the user must know, e.g. a repeated turn */
    SBX_EVENT_APPROVAL,     /* item: a decision on a call that needed approval (the run
                               state's "decisions" form); tool */
    SBX_EVENT_TOOL_START,   /* item: the call item; tool: a call begins to run (after its
                               approval; its tool_output follows when the batch is done) */
    SBX_EVENT_SANDBOX,      /* text: the id of the sandbox an agent works in, when it first
                               gets it; item: {"id", "provider", "source": "created" |
                               "resumed" | "attached"}; agent (sbx_sandbox_run only) */
    SBX_EVENT_GUARDRAIL,    /* item: {"guardrail": name, "kind": "input" | "output" |
                               "tool_input" | "tool_output", "triggered": bool, "info"?,
                               "tool"?, "call_id"?, "behavior"?}: a guardrail's verdict; tool */
};

struct sbx_event {
    enum sbx_event_type type;
    int turn;          /* 1-based; 0 before the first turn */
    const char *agent; /* name of the current agent */
    const char *text;
    const char *tool;
    const json_t *item;
    int64_t duration_ns;
    int failed; /* TOOL_OUTPUT: the output reports an error to the model */
    const struct sbx_error *error;
};

/* ev and everything it points at are borrowed for the duration of the call. */
typedef void sbx_event_fn(const struct sbx_event *ev, void *data);

/* The stable name of an event type ("turn_start", "tool_call", ...). */
SBX_API const char *sbx_event_name(enum sbx_event_type type);
/* One event as a JSON object {"type": name, "turn", "agent", ...}; caller owns (json_decref).
 * Used for `sbx run --json`. Deltas of raw stream events are not included twice: a
 * MODEL_STREAM event carries the stream event under "event". */
SBX_API json_t *sbx_event_to_json(const struct sbx_event *ev);

#define SBX_RUN_DEFAULT_MAX_TURNS 10

/* What a turn hook changes about the current agent for one model call (the sandbox layer uses
 * it to add capability tools, instructions and settings). Everything the hook sets is borrowed
 * by the runner until the next hook call or the end of the run, except input. */
struct sbx_turn_prep {
    const char *instructions;      /* replaces the agent's instructions; NULL: the agent's */
    struct sbx_tool *const *tools; /* offered and dispatched after the agent's own tools */
    size_t ntools;
    struct sbx_tool *const *hidden; /* dispatched but not offered (other transports of a tool) */
    size_t nhidden;
    const json_t *settings;      /* replaces the agent's model settings; NULL: the agent's */
    json_t *input;               /* taken by the runner: the model input for this turn instead of
                                    the whole conversation (e.g. cut at a compaction item); NULL:
                                    the conversation */
    struct sbx_session *session; /* the agent's sandbox, handed to tools as call->session */
    /* replaces the agent's prompt object (sbx/prompt.h) for this call, as the reference SDK's
     * dynamic prompt functions do; NULL: the agent's */
    const json_t *prompt;
};

/* Called before every turn (and before every turn of a nested agent-as-tool run, possibly from
 * a tool thread) with the agent whose turn it is and the conversation so far (borrowed). *out
 * is zeroed before the call. An error ends the run. */
typedef int sbx_turn_hook_fn(void *data, struct sbx_agent *agent, const json_t *items,
                             struct sbx_turn_prep *out, struct sbx_error *err);

/* Approvals. Asked for each tool call of a turn (handoffs are never asked), in call order,
 * before any of the turn's calls runs. The tool is the one the call reaches: a function or
 * custom call by its name, any other call by its type alone (an apply_patch_call is the
 * apply_patch tool whatever "name" it carries). */
struct sbx_approval_request {
    struct sbx_agent *agent;
    const char *tool; /* the tool's name */
    const char *call_id;
    const json_t *item; /* the call item */
    const json_t *args; /* sbx_approval_args(item); NULL when it has none */
    int policy;         /* what the agent's needs_approval says: 1 needs approval */
};
/* Return 1: the call needs approval; 0: it runs; -code with err set: the run ends. */
typedef int sbx_approval_fn(void *data, const struct sbx_approval_request *rq,
                            struct sbx_error *err);

/* What the model reads for a rejected call without a message (the reference SDK's text). */
#define SBX_APPROVAL_REJECTED_TEXT "Tool execution was not approved."

enum sbx_approval_decision {
    SBX_APPROVAL_WAIT = 0, /* no answer now: the call waits and the run stops for it */
    SBX_APPROVAL_APPROVE,
    SBX_APPROVAL_REJECT,
};

/* An answer to a call that needs approval (sbx_run_options.ask). */
struct sbx_approval_answer {
    enum sbx_approval_decision decision;
    /* APPROVE / REJECT: the same answer for every later call of this tool in the run (an
     * "always" decision, kept in the run state) */
    int always;
    /* WAIT: ask about no other call of this turn: they all wait */
    int stop;
    /* REJECT: the text the model reads, verbatim (malloc'd; the runner takes it); NULL:
     * SBX_APPROVAL_REJECTED_TEXT */
    char *message;
    const char *by; /* who answered, for the run state and the trace (static); NULL: "ask" */
};
/* Asked, on the run's thread, for each call that needs approval and has no decision yet (a
 * decision given for it, or an "always" decision for its tool), in call order, before any of
 * the turn's calls runs. out is zeroed. Return 0 with out filled, or -code with err set (the
 * run ends). */
typedef int sbx_approval_ask_fn(void *data, const struct sbx_approval_request *rq,
                                struct sbx_approval_answer *out, struct sbx_error *err);

/* Called with the run state (runstate.h, without "digest": serialising adds it; borrowed for
 * the call) at every checkpoint: after a model response with tool calls is recorded and before
 * they run (status "running", "open_calls" listing them), after every completed turn that does
 * not end the run (status "running"), and once at the end (status "interrupted", "completed"
 * or "failed"). An error ends the run (a run that cannot save its state must not go on as if
 * it could), except at the final "failed" call. */
typedef int sbx_checkpoint_fn(void *data, const json_t *state, struct sbx_error *err);

/* Fills the run state's "sandbox" member (*out: a new reference, or NULL for none). final is
 * non-zero for the last checkpoint of an interrupted or failed run (the sandbox layer then
 * snapshots its live sessions so that the state can rebuild them). Set by sbx_sandbox_run. */
typedef int sbx_state_hook_fn(void *data, int final, json_t **out, struct sbx_error *err);

struct sbx_strv;
/* All-zero except `model` is a valid default. */
struct sbx_run_options {
    struct sbx_model *model;      /* required; borrowed; shared with nested runs */
    const char *model_name;       /* overrides every agent's model name; NULL: the agent's, else
                                     the model's own */
    int max_turns;                /* 0: SBX_RUN_DEFAULT_MAX_TURNS; negative: no limit */
    int stream;                   /* stream model output (TEXT_DELTA / MODEL_STREAM events) */
    int max_parallel_tools;       /* threads per batch of tool calls; 0: 8 */
    int use_previous_response_id; /* send only new items plus previous_response_id */
    sbx_event_fn *on_event;
    void *event_data;
    /* Checked between steps, while waiting on the model and by tools through call->run (the
     * shell capability's commands are killed when it is set): when non-zero the run stops
     * with SBX_E_CANCELLED and a message naming the turn and step. Borrowed. */
    const volatile sig_atomic_t *cancel;
    void *context;               /* handed to tools as call->context */
    sbx_turn_hook_fn *turn_hook; /* NULL: agents run as they are */
    void *turn_hook_data;
    /* Conversation memory (include/sbx/conversation.h): when both are set the conversation's
     * items are put before the input, and after every completed turn the run's new items (the
     * input first, then what the turn produced) are appended to it, so a run that dies keeps
     * its completed turns. Not passed on to nested agent-as-tool runs. Borrowed. */
    struct sbx_conversation_store *conversation_store;
    const char *conversation;
    /* Secret values scrubbed (sbx/scrub.h) from the items the run stores in its conversation
     * (the run itself keeps them as they are). Borrowed. */
    const struct sbx_strv *secrets;
    /* Approvals: NULL: each agent's needs_approval policy (and the tool's own check) decides
     * whether a call needs approval; else this decides (it is told the policy's verdict). Not
     * used by nested agent-as-tool runs, whose calls that need approval fail with a tool error
     * the model reads. */
    sbx_approval_fn *approve;
    void *approve_data;
    /* A call that needs approval and has no decision is asked about here (a person at a
     * terminal); NULL: it waits, and the run stops for it once the turn's other calls ran. */
    sbx_approval_ask_fn *ask;
    void *ask_data;
    /* "Always" decisions from the start: [{"tool": glob, "approved": bool, "message"?: text,
     * "by"?: text}]: every call of a matching tool that needs approval is answered so (an
     * approval wins over a rejection). The run state records those in force as "always"; the
     * runner never takes a decision from a state itself: a caller that trusts a state's
     * "always" list passes it here. Borrowed. SBX_E_INVAL naming the entry for a bad one. */
    const json_t *always;
    /* The run's id, recorded in its states ("run_id"); NULL: the resumed state's, else a new
     * random one. The sandbox layer records it in the sandboxes the run makes. Borrowed. */
    const char *run_id;
    /* Continue a run from a run state (sbx_run_state_parse'd; input must then be NULL; agent
     * is the state's start agent; the state's current agent is found by name among the agents
     * reachable from it through handoffs). decisions: {"<call id>" | "*": {"approved": true} |
     * {"approved": false, "message": text}} (each may add "by": who decided, for the record)
     * for the state's pending calls ("*": every pending call without its own entry). A decision
     * answers the one call the state lists as pending under that id, with the tool, type and
     * arguments it lists, in that turn, once: a later call that repeats the id needs its own.
     * A decision for a call that is not pending is SBX_E_INVAL "no pending call 'x' (pending:
     * a, b)"; pending calls without a decision interrupt the run again at once. Decisions
     * recorded in the state are never used again. Open calls of a state saved while they ran
     * run again, each reported by a NOTICE event; a turn whose model call was in flight is
     * repeated and reported likewise. Borrowed. */
    const json_t *resume;
    const json_t *decisions;
    sbx_checkpoint_fn *checkpoint;
    void *checkpoint_data;
    sbx_state_hook_fn *state_hook;
    void *state_hook_data;
    /* Copied into the run state's "agent_files" (sbx_agent_file_sources) and "meta" (the
     * caller's own, e.g. the CLI's model and options), carried verbatim across resumes when
     * NULL. Borrowed. */
    const json_t *agent_files;
    const json_t *meta;
};

struct sbx_run_result; /* opaque */

/* Run agent on input: a JSON string (one user message) or an array of Responses input items
 * (borrowed). Blocks until the run ends. *out: caller owns (sbx_run_result_free).
 * Errors: SBX_E_MAXTURNS "max turns (N) exceeded", SBX_E_CANCELLED, model errors, SBX_E_INVAL
 * (bad input; a structured final output that does not match the schema), SBX_E_API "model
 * response is incomplete: <reason>" (a response with status "incomplete": none of its calls
 * run, its messages are still reported as MESSAGE events), SBX_E_TRIPWIRE "KIND guardrail
 * 'NAME' tripped: INFO" (an agent file's guardrail; the GUARDRAIL event before it says which,
 * the final state's "tripwire" too). An ERROR event is emitted before any error return. */
SBX_API int sbx_run(struct sbx_agent *agent, const json_t *input, const struct sbx_run_options *opt,
                    struct sbx_run_result **out, struct sbx_error *err);

SBX_API void sbx_run_result_free(struct sbx_run_result *r);
/* The final output text (borrowed, never NULL). */
SBX_API const char *sbx_run_result_text(const struct sbx_run_result *r);
/* The parsed structured output when the final agent has an output schema, else NULL. */
SBX_API const json_t *sbx_run_result_json(const struct sbx_run_result *r);
/* The whole conversation: the stored conversation's items when the run had one, the input
 * items, then every generated item (borrowed). */
SBX_API const json_t *sbx_run_result_items(const struct sbx_run_result *r);
/* The agent that produced the final output (borrowed). */
SBX_API struct sbx_agent *sbx_run_result_last_agent(const struct sbx_run_result *r);
/* Summed usage {"input_tokens","output_tokens","total_tokens","requests"} (borrowed). */
SBX_API const json_t *sbx_run_result_usage(const struct sbx_run_result *r);
SBX_API int sbx_run_result_turns(const struct sbx_run_result *r);
/* Non-zero when the run stopped for approvals (sbx_run returned 0; the text is ""). */
SBX_API int sbx_run_result_interrupted(const struct sbx_run_result *r);
/* The pending calls, in call order: [{"agent", "tool", "call_id", "type" (the item type),
 * "arguments" (sbx_approval_args)}] (borrowed; empty when not interrupted). */
SBX_API const json_t *sbx_run_result_interruptions(const struct sbx_run_result *r);
/* The run state at the end (runstate.h): status "interrupted" or "completed" (borrowed). */
SBX_API const json_t *sbx_run_result_state(const struct sbx_run_result *r);

#endif
