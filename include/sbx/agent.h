/* sbx: agents and tools.
 *
 * An agent is a name, instructions, a model name and settings, tools, handoff targets, an
 * optional output schema and a tool-use behaviour. Tools are refcounted and may be shared by
 * agents; agents are plain objects: handoff targets and the agent behind an agent-as-tool are
 * borrowed, so a set of agents that refer to each other (A hands off to B and back) is freed
 * together by whoever created it (an agent file, sbx_agent_file_* below, owns every agent it
 * loaded).
 *
 * Tools come in three kinds, all dispatched by the runner through one interface:
 *   function  {"type":"function"}: the model sends JSON arguments, checked against the tool's
 *             JSON schema before the callback sees them;
 *   custom    {"type":"custom"}: freeform, the model sends one string;
 *   item      any other call item type (e.g. the Responses built-in "apply_patch_call"): the
 *             tool receives the whole call item and produces the whole output item.
 * A tool that fails never ends the run: its error becomes the tool output the model reads.
 * Only SBX_E_SANDBOX (the workspace is gone) and SBX_E_CANCELLED end a run from a tool. */
#ifndef SBX_AGENT_H
#define SBX_AGENT_H

#include <jansson.h>

#include "buf.h"
#include "common.h"
#include "error.h"

struct sbx_agent;       /* opaque */
struct sbx_tool;        /* opaque, refcounted */
struct sbx_run_options; /* runner.h */
struct sbx_session;     /* session.h */

#define SBX_TOOL_OUTPUT_MAX ((size_t)4 << 20) /* limit on one tool's text output */

/* What a tool callback learns about the call. All borrowed for the duration of the call.
 * Tool callbacks of one turn may run concurrently on different threads. */
struct sbx_tool_call {
    const char *call_id;
    const char *name;
    const json_t *item;                /* the model's call item */
    struct sbx_agent *agent;           /* the agent whose turn it is */
    const struct sbx_run_options *run; /* the run's options (for nested runs) */
    void *context;                     /* sbx_run_options.context */
    void *data;                        /* the tool's own data */
    /* The call needed approval and was approved (by a person, a decision given for it, or an
     * "always" decision for its tool); 0 for calls that needed none. */
    int approved;
    /* The sandbox of the agent whose turn it is (a turn hook's sbx_turn_prep.session: sbx runs
     * with sandboxes set it for sandbox agents); NULL for a plain agent. */
    struct sbx_session *session;
};

/* A tool's result. Write text into `text` (limit SBX_TOOL_OUTPUT_MAX), or set `parts` to an
 * array of content parts ({"type":"input_text","text":..}, {"type":"input_image",
 * "image_url":"data:image/png;base64,.."}), which then takes precedence; the runner takes
 * ownership of parts. */
struct sbx_tool_output {
    struct sbx_buf text;
    json_t *parts;
};

/* Function and custom tools. args is the parsed, schema-checked arguments object (function)
 * or a JSON string holding the raw input (custom). Return 0, or -code with err set: the
 * message is shown to the model as the tool's output. */
typedef int sbx_tool_fn(const json_t *args, const struct sbx_tool_call *call,
                        struct sbx_tool_output *out, struct sbx_error *err);

/* A tool's own say on approval (the reference SDK's per-tool needsApproval): 1 when this call
 * needs a person's approval whatever the agent's needs_approval says, else 0. args are
 * sbx_approval_args() of the call (NULL when it has none); call->approved is 0. Called on the
 * run's thread before any call of the turn runs. */
typedef int sbx_tool_approval_fn(const json_t *args, const struct sbx_tool_call *call);

/* Item tools: produce the complete output item (caller of the callback takes ownership). */
typedef int sbx_tool_item_fn(const struct sbx_tool_call *call, json_t **output_item,
                             struct sbx_error *err);

struct sbx_function_tool {
    const char *name;         /* [A-Za-z0-9_-]{1,64} */
    const char *description;  /* may be NULL */
    const json_t *parameters; /* JSON schema of the arguments object (copied); NULL: none */
    /* Strict mode: the model gets the schema in strict form (no extra properties, all of them
     * required, the optional ones — those an object's "required" list leaves out, when it has
     * one — nullable, keywords strict mode lacks left out); arguments are
     * still checked against the schema as written, null standing for an optional one left out. */
    int strict;
    sbx_tool_fn *fn;
    void *data;                           /* passed as call->data */
    void (*free_data)(void *data);        /* called when the tool is freed; may be NULL */
    sbx_tool_approval_fn *needs_approval; /* may be NULL: the agent's policy alone decides */
};

struct sbx_custom_tool {
    const char *name;
    const char *description;
    const json_t *format; /* e.g. {"type":"grammar","syntax":"lark","definition":..}; NULL: text */
    sbx_tool_fn *fn;
    void *data;
    void (*free_data)(void *data);
};

struct sbx_item_tool {
    const char *name;         /* for events and name collisions */
    const char *item_type;    /* the call item type it claims, e.g. "apply_patch_call" */
    const json_t *definition; /* what goes into the request's tools array (copied) */
    sbx_tool_item_fn *fn;
    void *data;
    void (*free_data)(void *data);
};

/* Create tools. *out: caller owns one reference (sbx_tool_unref). Errors: SBX_E_INVAL for a
 * bad name or a schema that cannot be made strict. free_data is called on failure too. */
SBX_API int sbx_tool_new_function(const struct sbx_function_tool *spec, struct sbx_tool **out,
                                  struct sbx_error *err);
SBX_API int sbx_tool_new_custom(const struct sbx_custom_tool *spec, struct sbx_tool **out,
                                struct sbx_error *err);
SBX_API int sbx_tool_new_item(const struct sbx_item_tool *spec, struct sbx_tool **out,
                              struct sbx_error *err);
SBX_API struct sbx_tool *sbx_tool_ref(struct sbx_tool *t);
/* Drop a reference; frees the tool with the last one. Accepts NULL. Thread-safe. */
SBX_API void sbx_tool_unref(struct sbx_tool *t);
SBX_API const char *sbx_tool_name(const struct sbx_tool *t);
/* The tool definition sent to the model (borrowed). */
SBX_API const json_t *sbx_tool_definition(const struct sbx_tool *t);

/* Built-in tools that need no sandbox, for agent files and examples:
 *   current_time  {}                       the current UTC time, RFC 3339
 *   add           {"a": number, "b": number}  the sum
 *   calculator    {"expression": string}   + - * / % and parentheses over decimal numbers
 *   word_count    custom (freeform) tool: words, lines and characters of the text sent
 * *out: caller owns a reference. Unknown name: SBX_E_NOTFOUND naming the known ones. */
SBX_API int sbx_tool_builtin(const char *name, struct sbx_tool **out, struct sbx_error *err);

enum sbx_tool_use {
    SBX_TOOL_USE_RUN_AGAIN = 0, /* after tools run, call the model again (default) */
    SBX_TOOL_USE_STOP_ON_FIRST, /* the first tool's output is the final output */
    SBX_TOOL_USE_STOP_AT_NAMES, /* stop when one of the named tools ran */
};

/* Create an agent. name: 1..128 bytes, no control characters. *out: caller owns
 * (sbx_agent_free). */
SBX_API int sbx_agent_new(const char *name, struct sbx_agent **out, struct sbx_error *err);
/* Free the agent and drop its tool references. Accepts NULL. Does not free handoff targets. */
SBX_API void sbx_agent_free(struct sbx_agent *a);

SBX_API const char *sbx_agent_name(const struct sbx_agent *a);
/* Borrowed; NULL when not set. */
SBX_API const char *sbx_agent_instructions(const struct sbx_agent *a);
SBX_API const char *sbx_agent_model(const struct sbx_agent *a);
SBX_API const json_t *sbx_agent_model_settings(const struct sbx_agent *a);
/* Strings are copied; NULL clears. */
SBX_API void sbx_agent_set_instructions(struct sbx_agent *a, const char *instructions);
SBX_API void sbx_agent_set_model(struct sbx_agent *a, const char *model);
SBX_API void sbx_agent_set_handoff_description(struct sbx_agent *a, const char *text);
/* The agent's ModelSettings under the Agents SDK's names (temperature, max_tokens, reasoning,
 * ...; sbx_model_settings_check says which and how each reaches the API): an object, copied.
 * An unknown field is SBX_E_INVAL naming it. */
SBX_API int sbx_agent_set_model_settings(struct sbx_agent *a, const json_t *settings,
                                         struct sbx_error *err);
/* Adds a reference to t. A second tool with the same name is SBX_E_EXISTS. */
SBX_API int sbx_agent_add_tool(struct sbx_agent *a, struct sbx_tool *t, struct sbx_error *err);
/* target is borrowed and must outlive a. Its transfer tool is named
 * "transfer_to_<name lower-cased, other characters as '_'>". */
SBX_API int sbx_agent_add_handoff(struct sbx_agent *a, struct sbx_agent *target,
                                  struct sbx_error *err);
/* A JSON schema the final output must match; made strict (copied). A non-object schema is
 * wrapped as {"response": schema}. NULL clears. */
SBX_API int sbx_agent_set_output_schema(struct sbx_agent *a, const json_t *schema,
                                        struct sbx_error *err);
/* names: NULL-terminated, used with SBX_TOOL_USE_STOP_AT_NAMES (copied). */
SBX_API void sbx_agent_set_tool_use(struct sbx_agent *a, enum sbx_tool_use use,
                                    const char *const *names);
/* "auto", "required", "none", or a tool name (forces that tool). NULL: the model decides. */
SBX_API void sbx_agent_set_tool_choice(struct sbx_agent *a, const char *choice);
/* Whether tool_choice falls back to "auto" after a tool ran (default 1: prevents a forced
 * tool from looping forever). */
SBX_API void sbx_agent_set_reset_tool_choice(struct sbx_agent *a, int reset);
/* The sandbox part of an agent definition, read by the sandbox layer (capability.h):
 * {"manifest": path or inline document, "base_dir": where an inline manifest's local sources
 * resolve, "capabilities": [...], "run_as": name, "base_instructions": text, "sandbox": the
 * provider of its sandboxes and its options ({"provider": "docker", "image": ...}; sbx run
 * applies them), "agent_file": the file it came from, for messages}. An agent with a sandbox
 * part is a sandbox agent. Copied. Borrowed getter; NULL when none. */
SBX_API void sbx_agent_set_sandbox_spec(struct sbx_agent *a, const json_t *spec);
SBX_API const json_t *sbx_agent_sandbox_spec(const struct sbx_agent *a);

/* Approval policy: which of the agent's tool calls need a human's approval before they run.
 * policy (copied; NULL or false clears) is the agent-file form of needs_approval:
 *   true                      every call
 *   [rule, ...]               a call needs approval when any rule says so; a rule is
 *     "exec_command"          a tool-name glob (fnmatch, no flags): every call of those tools
 *     {"tool": glob,          the same, narrowed by argument globs:
 *      "when": {arg: glob | [glob, ...], ...},    every listed argument matches one of its globs
 *      "unless": {arg: glob | [glob, ...], ...}}  ... and not every listed one of these does
 * The tool name is the tool's own: an item tool (apply_patch_call) is found by the call's type
 * and its name comes from the tool, never from the call. Arguments are those of
 * sbx_approval_args(). A string argument is matched as it is, an array when any element (as
 * text) matches, anything else as compact JSON; a missing argument never matches. An argument
 * named "cmd" is a shell command line (sbx_approval_command): its globs see a simple command's
 * words; a command that is not simple (or a "shell" argument that is not a POSIX shell) matches
 * every `when` glob and no `unless` glob. SBX_E_INVAL naming the rule and key for a bad policy:
 * "needs_approval: rule 2: unknown key 'wen' (known: tool, when, unless)". */
SBX_API int sbx_agent_set_needs_approval(struct sbx_agent *a, const json_t *policy,
                                         struct sbx_error *err);
/* The policy as set (borrowed), NULL when none. */
SBX_API const json_t *sbx_agent_needs_approval(const struct sbx_agent *a);
/* 1 when policy requires approval for a call of tool with arguments args, else 0. */
SBX_API int sbx_approval_policy_match(const json_t *policy, const char *tool, const json_t *args);
/* 1 when some rule of policy names tool (whatever its argument globs), else 0. */
SBX_API int sbx_approval_policy_covers(const json_t *policy, const char *tool);
/* Read cmd as a POSIX shell would, far enough to know whether it is a simple command: words of
 * plain characters, single quotes, double quotes without expansions and backslash escapes,
 * separated by blanks; the first word neither a reserved word ("!", "if", "{", "time", ...)
 * nor an assignment. Anything else (";", "&", "|", "<", ">", "(", ")", "`", "$" outside single
 * quotes, a newline or another control character, an unterminated quote) is not simple.
 * Returns 1 with the words joined by one space in *out (caller frees), else 0 (*out NULL). */
SBX_API int sbx_approval_command(const char *cmd, char **out);
/* The arguments an approval decision looks at, for a call item: a function call's parsed
 * arguments object; {"input": text} for a custom tool call; the "operation" object of an
 * apply_patch_call (type, path, diff); the item itself for other item tools. Caller owns; NULL
 * when a function call's arguments are not a JSON object (the call then runs without an
 * approval check and the model reads the parse error). */
SBX_API json_t *sbx_approval_args(const json_t *call_item);

/* Where an agent came from: the canonical path of its agent file and "sha256:<hex>" of that
 * file's bytes (set by sbx_agent_file_load); NULL for agents made in code. Borrowed. */
SBX_API const char *sbx_agent_source_file(const struct sbx_agent *a);
SBX_API const char *sbx_agent_source_digest(const struct sbx_agent *a);

/* ---------------------------------------------------------------------------------------------
 * Agents that reach each other: agents as tools and the agent graph. */

/* An agent as a tool: a function tool {"input": string} whose call runs agent in a nested run
 * (same model and options, its own turn budget max_turns, 0 for the default) and returns that
 * run's final output. agent is borrowed and must outlive the tool. *out: caller owns a
 * reference. name NULL: the agent's name made tool-safe. */
SBX_API int sbx_tool_new_agent(struct sbx_agent *agent, const char *name, const char *description,
                               int max_turns, struct sbx_tool **out, struct sbx_error *err);

/* Call fn once for start and once for every agent it can reach through handoffs and agents as
 * tools (each agent once, start first), stopping at the first error, which it returns. For
 * checks that must see a whole agent graph before the run's first model call. */
SBX_API int sbx_agent_walk(struct sbx_agent *start,
                           int (*fn)(struct sbx_agent *a, void *data, struct sbx_error *err),
                           void *data, struct sbx_error *err);

/* ---------------------------------------------------------------------------------------------
 * Agent files (YAML or JSON):
 *   name (required), model, instructions, model_settings (object), tools (built-in tool
 *   names, and the file's own tools: objects {name, description, parameters, strict, one of
 *   command (argv run in the agent's sandbox; such an agent is a sandbox agent), host_command
 *   (argv run on the host, refused until sbx_agent_file_allow_host_tools) or http ({url,
 *   headers}: the arguments POSTed as JSON), stdin: json, cwd, env, timeout,
 *   max_output_tokens, needs_approval}; docs/internals/agent-tools.md), handoffs (agent file
 * paths), agents_as_tools (paths, or {file, name, description, max_turns}), output_schema,
 * handoff_description, tool_choice, tool_use_behavior ("run_llm_again" | "stop_on_first_tool" |
 * {"stop_at_tool_names":[..]}), needs_approval (sbx_agent_set_needs_approval), prompt
 * (sbx_agent_set_prompt, sbx/prompt.h; instructions are templates filled by
 * sbx_agent_fill_variables, which the loader does not call), and the sandbox
 * fields manifest (or its SDK name default_manifest, not both), capabilities, run_as,
 * base_instructions (kept for the sandbox layer, which checks them before a run starts),
 * mcp_servers (MCP servers over stdio, in the agent's sandbox or on the host, or Streamable
 * HTTP, whose tools become the agent's; mcp_config; docs/internals/mcp.md), hosted MCP
 * servers in tools ({type: mcp, server_label, server_url, ...}: the Responses API's tool), and
 * the guardrails and hooks input_guardrails, output_guardrails, tool_guardrails and hooks (a
 * tool entry may carry tool_input_guardrails / tool_output_guardrails; their host commands are
 * listed and held like host tools; docs/internals/guardrails.md). Relative
 * paths are relative to the file's directory; files that refer to each other are loaded once.
 * Unknown fields are errors. */
struct sbx_agent_file; /* opaque: owns every agent it loaded */

SBX_API int sbx_agent_file_load(const char *path, struct sbx_agent_file **out,
                                struct sbx_error *err);
/* The agent of the named file itself (borrowed, lives as long as f). */
SBX_API struct sbx_agent *sbx_agent_file_agent(const struct sbx_agent_file *f);
/* Every file the load read: [{"path": canonical path, "digest": "sha256:<hex>"}] in load
 * order. Caller owns. */
SBX_API json_t *sbx_agent_file_sources(const struct sbx_agent_file *f);
/* The host commands the file's tools, guardrails and hooks run: [{"file", "tool", "what"
 * ("tool 'x'", "input guardrail 'x'", "hook 1 (on tool_start)"), "program"}], empty when
 * none. Caller owns. They refuse to run until sbx_agent_file_allow_host_tools(f): whoever wrote the
 * agent file then decides what runs on this machine, outside every sandbox. */
SBX_API json_t *sbx_agent_file_host_tools(const struct sbx_agent_file *f);
SBX_API void sbx_agent_file_allow_host_tools(struct sbx_agent_file *f);
/* What the file's MCP servers offer, each reached now and closed again: [{"agent", "name",
 * "transport" ("http", "stdio (host)", "stdio (sandbox)"), and "server" (its serverInfo),
 * "tools", "resources", "prompts" (those its capabilities name), or "error": why it could not be
 * listed}]. A server in the sandbox is not started here ("error" says so); a host server only
 * after sbx_agent_file_allow_host_tools. Caller owns. */
SBX_API json_t *sbx_agent_file_mcp_describe(struct sbx_agent_file *f);
/* Append the values of the secrets the file's HTTP tools send in headers (read from the
 * environment now; each once), for the scrubber of what a run writes. */
struct sbx_strv;
SBX_API void sbx_agent_file_secret_values(const struct sbx_agent_file *f, struct sbx_strv *out);
SBX_API void sbx_agent_file_free(struct sbx_agent_file *f);

#endif
