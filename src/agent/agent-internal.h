/* sbx internal: agent and tool layout shared by the runner. */
#ifndef SBX_AGENT_INTERNAL_H
#define SBX_AGENT_INTERNAL_H

#include <stdatomic.h>

#include "sbx/agent.h"
#include "sbx/strv.h"

enum sbx__tool_kind {
    SBX__TOOL_FUNCTION,
    SBX__TOOL_CUSTOM,
    SBX__TOOL_ITEM,
};

struct sbx_tool {
    atomic_int refs;
    enum sbx__tool_kind kind;
    char *name;
    char *item_type;    /* the call item type dispatched to this tool */
    json_t *definition; /* as sent in the request's tools array */
    json_t *schema;     /* function tools: the arguments schema used for validation */
    sbx_tool_fn *fn;
    sbx_tool_item_fn *item_fn;
    sbx_tool_approval_fn *approval_fn; /* function tools: the tool's own approval check */
    void *data;
    void (*free_data)(void *data);
};

struct sbx__mcp_server;

/* The item a hosted MCP server's call that needs approval comes as (the Responses API's); its
 * answer is an mcp_approval_response (mcp-hosted.c). */
#define SBX_HOSTED_MCP_ITEM "mcp_approval_request"

struct sbx_agent {
    char *name;
    char *instructions;
    char *model;
    char *handoff_description;
    json_t *prompt; /* the Responses API prompt object (prompt.c), NULL: none */
    json_t *settings;
    json_t *output_schema; /* strict, wrapped when not an object */
    int output_wrapped;    /* the schema was wrapped in {"response": ...} */
    struct sbx_tool **tools;
    size_t ntools;
    struct sbx_agent **handoffs;
    size_t nhandoffs;
    enum sbx_tool_use tool_use;
    struct sbx_strv stop_at;
    char *tool_choice;
    int reset_tool_choice;
    json_t *sandbox_spec;
    json_t *needs_approval;       /* validated policy, NULL: none */
    char *source_file;            /* canonical agent file path, NULL: made in code */
    char *source_digest;          /* "sha256:<hex>" of that file's bytes */
    struct sbx__mcp_server **mcp; /* the agent file's MCP servers (references; mcp.h) */
    size_t nmcp;
    struct sbx__guards *guards; /* agent files' guardrails and hooks (guard.h), NULL: none */
};

/* Give the agent an MCP server (takes the reference). */
void sbx__agent_add_mcp(struct sbx_agent *a, struct sbx__mcp_server *s);

/* Record where an agent was loaded from (agent files). */
void sbx__agent_set_source(struct sbx_agent *a, const char *file, const char *digest);
/* "transfer_to_<name>" for a handoff target; caller owns (free). */
char *sbx__agent_handoff_tool_name(const struct sbx_agent *target);
/* Make a string usable as a tool name: [A-Za-z0-9_-], lower-cased when lower is set. */
char *sbx__tool_safe_name(const char *s, int lower);

/* An agent file's own tool (file-tools.c): a command in the sandbox, a command on the host, or
 * an HTTP endpoint, from one entry of the file's "tools" list. *out: caller owns a reference;
 * *ft is the tool's data, alive as long as the tool. Errors name the tool and the field. */
struct sbx__file_tool;
int sbx__file_tool_new(const char *file, const json_t *entry, struct sbx_tool **out,
                       struct sbx__file_tool **ft, struct sbx_error *err);
/* 1 for a command that runs in the agent's sandbox. */
int sbx__file_tool_in_sandbox(const struct sbx__file_tool *ft);
/* The program a host command runs; NULL for the other kinds. Borrowed. */
const char *sbx__file_tool_host_program(const struct sbx__file_tool *ft);
/* Let a host command run (they refuse until this is called). */
void sbx__file_tool_allow(struct sbx__file_tool *ft);
/* The absolute directories of sbx's PATH (SBX__SPAWN_PATH when none): where host commands are
 * looked up, and their PATH. Caller owns (free). */
char *sbx__file_tool_host_path(void);
/* Append the values of the secrets the tool's headers read (those set now, each once). */
void sbx__file_tool_secrets(const struct sbx__file_tool *ft, struct sbx_strv *out);

/* A hosted MCP server (the Responses API's "mcp" tool) from an agent file's tools entry with
 * type: mcp. *out: caller owns a reference. Errors name the server and the field. */
int sbx__hosted_mcp_new(const json_t *entry, struct sbx_tool **out, struct sbx_error *err);
/* 1 for a tool made by sbx__hosted_mcp_new. */
int sbx__hosted_mcp_is(const struct sbx_tool *t);
/* Append the values of the secrets its headers read (set now, each once). */
void sbx__hosted_mcp_secrets(const struct sbx_tool *t, struct sbx_strv *out);

#endif
