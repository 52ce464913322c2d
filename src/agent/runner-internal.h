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
    size_t saved_upto;  /* items before this are in the conversation store */
    json_t *open_calls; /* call ids of the last response without an output yet */
    json_t *pending;    /* calls waiting for approval (run state form) */
    json_t *decisions;  /* call id -> {"approved", "message"?} */
    json_t *sandbox;    /* the last "sandbox" member the state hook gave (or the resumed one) */
    const json_t *agent_files; /* borrowed: the options' or the resumed state's */
    const json_t *meta;
    const char *resumed_status;  /* while continuing a saved state's open calls */
    struct sbx_span *agent_span; /* tracing (sbx/trace.h): the current agent's and turn's */
    struct sbx_span *turn_span;
    int next_agent_pending; /* a handoff happened: the agent span changes after the turn */
};

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
