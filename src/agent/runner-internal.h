/* sbx internal: the state of one run, shared by the runner and its run-state code. */
#ifndef SBX_RUNNER_INTERNAL_H
#define SBX_RUNNER_INTERNAL_H

#include "agent/agent-internal.h"
#include "sbx/runner.h"

struct run {
    const struct sbx_run_options *opt;
    struct sbx_agent *start;       /* the run's start agent */
    struct sbx_agent *agent;       /* the current agent */
    int nested;                    /* an agent-as-tool run: no approvals, no states */
    json_t *items;                 /* the conversation; items are appended, never changed */
    struct sbx_model_cache *cache; /* the items' serialised bytes, across the run's turns */
    size_t input_items;            /* how many of items were input (history included) */
    json_t *usage;
    int turn;
    int done_turn; /* the last turn whose model response is recorded */
    int max_turns;
    struct sbx_agent **used_tools; /* agents that have used a tool (tool_choice reset) */
    size_t nused;
    char *prev_id;
    size_t sent_upto;
    /* This turn's tools: the agent's, then a turn hook's offered ones, then its hidden ones. */
    struct sbx_tool **tv;
    size_t ntv, noffered;
    struct sbx_session *session; /* this turn's sandbox (the turn hook's), for call->session */
    size_t saved_upto;           /* items before this are in the conversation store */
    json_t *open_calls;          /* call ids of the last response without an output yet */
    json_t *pending;             /* calls waiting for approval (run state form) */
    /* Decisions the caller gave for pending calls, each bound to one call (call id, tool, type,
     * arguments digest, turn) and used once: [{"call_id", "tool", "type", "digest", "turn",
     * "approved", "message"?, "by"}]. */
    json_t *given;
    json_t *always;       /* "always" decisions: [{"tool", "approved", "message"?, "by"}] */
    json_t *decision_log; /* every decision taken, in order (the run state's "decisions") */
    char *run_id;         /* the run's id (its state's "run_id") */
    json_t *sandbox;      /* the last "sandbox" member the state hook gave (or the resumed one) */
    const json_t *agent_files; /* borrowed: the options' or the resumed state's */
    const json_t *meta;
    const char *resumed_status;  /* while continuing a saved state's open calls */
    struct sbx_span *agent_span; /* tracing (sbx/trace.h): the current agent's and turn's */
    struct sbx_span *turn_span;
    int next_agent_pending; /* a handoff happened: the agent span changes after the turn */
    struct sbx__mcp_server **mcp_used; /* MCP servers this run joined (left at its end) */
    size_t nmcp_used;
    struct sbx_tool **mcp_tools; /* this turn's tools of the agent's MCP servers (references) */
    size_t nmcp_tools;
    size_t input_first; /* items[input_first, input_items) are this run's own input */
    int input_guarded;  /* the input guardrails passed (the state's "guardrails") */
    json_t *tripwire;   /* the verdict of the guardrail that tripped, NULL: none */
    /* The running checkpoints' state, brought up to date for each one (sbx__run_state_build):
     * a field that did not change keeps its object. */
    json_t *ckpt;
};

/* One tool call of a turn, from its item to its output. */
struct job {
    struct run *run;
    struct sbx_agent *agent;
    const json_t *item;
    const char *type;
    const char *name;
    const char *call_id;
    struct sbx_tool *tool; /* NULL: handoff or unknown */
    struct sbx_agent *handoff;
    json_t *output; /* output item */
    char *text;     /* output as text, for tool-use behaviours and events */
    int failed;
    int fatal;
    struct sbx_error err;
    int64_t duration_ns;
    int turn;              /* the turn whose response made the call */
    json_t *args;          /* sbx_approval_args, for the approval check */
    int now;               /* handled in this pass (not held back by an interruption) */
    int approved;          /* needed approval and was approved */
    int rejected;          /* the user rejected it: it gets the rejection text and never runs */
    char *reject_message;  /* what the model reads instead of the default rejection text */
    int pending;           /* needs approval and has no decision */
    struct sbx_span *span; /* tracing: the tool call's span, ended with its output event */
    json_t *guard_events;  /* tool guardrails' verdicts, emitted with the output */
};

/* Emit an event of run r (fills turn and agent). */
void sbx__run_emit(struct run *r, struct sbx_event *ev);
/* The approval check of a turn's calls (approval.c), in call order: the calls that need
 * approval get a decision given for exactly that call, else an "always" decision for their
 * tool, else the caller's ask callback's answer; those left are marked pending. Returns 1 when
 * some call waits, 0 when none does, or an error. */
int sbx__approval_check(struct run *r, struct job *jobs, size_t njobs, struct sbx_error *err);
/* "sha256:<hex>" of the canonical text of approval arguments (NULL: of null) into out. */
#define SBX__APPROVAL_DIGEST_LEN (7 + 64 + 1)
void sbx__approval_digest(const json_t *args, char out[SBX__APPROVAL_DIGEST_LEN]);
/* Check and bind the caller's decisions (opt->decisions) to the pending calls of the resumed
 * state; check the caller's "always" decisions (opt->always). */
int sbx__approval_restore(struct run *r, const json_t *state, struct sbx_error *err);

/* A nested run (agent as tool, guardrail and hook agents): no events, approvals, states or
 * conversation; its own turn budget. */
int sbx__run_nested(struct sbx_agent *agent, const json_t *input, const struct sbx_run_options *opt,
                    int max_turns, struct sbx_run_result **out, struct sbx_error *err);
/* Answer a call with text instead of running it (a guardrail or a hook said no): the model
 * reads text as the call's failed output; an output already set is replaced. */
void sbx__job_refuse(struct job *j, const char *text);

/* Agents reachable from start through handoffs, start first; *out: caller frees the array. */
size_t sbx__run_reachable(struct sbx_agent *start, struct sbx_agent ***out);
/* The run state of r now. final: the state hook is told this is the last checkpoint of a run
 * that did not complete; hook 0: reuse the last sandbox member instead of asking the hook.
 * *out: caller owns. */
int sbx__run_state_build(struct run *r, const char *status, const char *error,
                         const char *final_output, int final, int hook, json_t **out,
                         struct sbx_error *err);
/* Set r up from a parsed run state and the caller's decisions (opt->resume, opt->decisions). */
int sbx__run_state_restore(struct run *r, struct sbx_error *err);

#endif
