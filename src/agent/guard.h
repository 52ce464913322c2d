/* sbx internal: an agent file's guardrails and acting hooks (docs/internals/guardrails.md).
 *
 * A check is one guardrail or hook: a command in the agent's sandbox, a command on the host
 * (refused until the run allows host tools) or a small agent with a structured output. What it
 * is asked comes as one JSON object (the payload); what it says back is JSON too. */
#ifndef SBX_AGENT_GUARD_H
#define SBX_AGENT_GUARD_H

#include <jansson.h>

#include "sbx/error.h"

struct run;
struct job;
struct sbx_agent;
struct sbx_tool;
struct sbx__file_tool;
struct sbx__guards;

/* One guardrail or hook. */
struct sbx__check {
    char *name;           /* the guardrail's name; a hook's "hook N (on EVENT)" */
    char *label;          /* what it is, for messages: "input guardrail 'x'" */
    struct sbx_tool *cmd; /* a command (a file tool of kind command or host_command) */
    struct sbx__file_tool *ft;
    struct sbx_agent *agent; /* or an agent (owned) */
    char *field;             /* the boolean that trips (tripwire_triggered) */
    int parallel;            /* input guardrails: alongside the first model call */
    int raise;               /* tool guardrails: a trip ends the run instead of rejecting */
    int max_turns;           /* an agent's turn budget */
    char *on;                /* hooks: the event */
    json_t *tools;           /* hooks of tool events: tool-name globs, NULL: every tool */
};

struct sbx__tool_guards {
    json_t *tools; /* the tool-name globs they guard (a tools-list entry: its own name) */
    struct sbx__check *in, *out;
    size_t nin, nout;
};

struct sbx__guards {
    struct sbx__check *input, *output, *hooks;
    size_t ninput, noutput, nhooks;
    struct sbx__tool_guards *tools;
    size_t ntools;
};

/* What a tripped guardrail was: the run's input, its final output, a tool's arguments or a
 * tool's output. */
enum sbx__guard_kind {
    SBX__GUARD_INPUT,
    SBX__GUARD_OUTPUT,
    SBX__GUARD_TOOL_INPUT,
    SBX__GUARD_TOOL_OUTPUT,
};

/* Read the agent file fields input_guardrails, output_guardrails and hooks of doc (file: the
 * agent file, for host commands' directory). *out: NULL when the document has none, else caller
 * owns (sbx__guards_free). Errors name the field and the entry. */
int sbx__guards_load(const char *file, const json_t *doc, struct sbx__guards **out,
                     struct sbx_error *err);
/* A tools-list entry's own guardrails (tool_input_guardrails, tool_output_guardrails) for the
 * tool named name, moved into g (made when *g is NULL). *rest: the entry without those keys
 * (a new reference). */
int sbx__guards_load_tool(const char *file, const json_t *entry, const char *name,
                          struct sbx__guards **g, json_t **rest, struct sbx_error *err);
void sbx__guards_free(struct sbx__guards *g);
/* The commands of g, one by one (i from 0 until it returns 0): the tool and its data, so the
 * agent file can list host commands, allow them and scrub their secrets; label: what the
 * command belongs to ("input guardrail 'x'", borrowed). */
int sbx__guards_command(const struct sbx__guards *g, size_t i, struct sbx_tool **tool,
                        struct sbx__file_tool **ft, const char **label);

/* Input guardrails of the run's first turn (the current agent's). begin runs those that do
 * not run in parallel, then starts the others on a thread; end waits for them. Either returns
 * -SBX_E_TRIPWIRE (a GUARDRAIL event emitted, err naming the guardrail and its info) or another
 * error when a guardrail failed. end must follow a successful begin. */
struct sbx__guard_pending;
int sbx__guard_input_begin(struct run *r, struct sbx__guard_pending **out, struct sbx_error *err);
int sbx__guard_input_end(struct run *r, struct sbx__guard_pending *p, struct sbx_error *err);
/* Output guardrails of the agent that produced the final output (text, json: structured). */
int sbx__guard_output(struct run *r, const char *text, const json_t *json, struct sbx_error *err);
/* Tool guardrails of the job's tool, on its tool thread: input before it runs (args: the
 * parsed arguments), output after (the job's output set). Returns 0 to go on (a rejection
 * has set the job's output), or an error that ends the run (-SBX_E_TRIPWIRE for a raise). The
 * GUARDRAIL event is kept in the job and emitted with its output. */
int sbx__guard_tool_input(struct job *j, const json_t *args, struct sbx_error *err);
int sbx__guard_tool_output(struct job *j, struct sbx_error *err);

/* Emit the GUARDRAIL events a job's tool guardrails left (run's thread, call order). */
void sbx__guard_job_report(struct run *r, struct job *j);

/* Hooks of agent a that listen to event (run_start, run_end, agent_start, agent_end,
 * tool_start, tool_end, handoff), in file order, on the run's thread; payload: the event's
 * data (borrowed; "event" and "agent" are added). tool: the tool's name for tool events (a
 * hook's tools filter). deny: for tool_start, set to the first veto's reason (caller frees),
 * and the hooks after it do not run. A hook that fails is an error. */
int sbx__hook_fire(struct run *r, struct sbx_agent *a, const char *event, const char *tool,
                   json_t *payload, char **deny, struct sbx_error *err);

#endif
