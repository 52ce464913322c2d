/* sbx internal: MCP servers of agent files (docs/internals/mcp.md). mcp.c loads a server's
 * entry and makes its tools; mcp-conn.c talks to the server (stdio on the host or in the
 * sandbox, Streamable HTTP). */
#ifndef SBX_AGENT_MCP_H
#define SBX_AGENT_MCP_H

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <jansson.h>

#include "agent/agent-internal.h"
#include "sbx/buf.h"
#include "sbx/session.h"
#include "sbx/strv.h"
#include "sbx/trace.h"

#define SBX__MCP_MSG_MAX    ((size_t)4 << 20) /* one message from a server */
#define SBX__MCP_STDERR_MAX 2048              /* the end of a stdio server's stderr, kept */
#define SBX__MCP_MAX_PAGES  64                /* pages of one listing */
#define SBX__MCP_MAX_TOOLS  512               /* tools of one server */

struct sbx__mcp_header {
    char *name;
    char *value;  /* a plain value, or NULL */
    char *env;    /* a secret's variable, read when the request is made */
    char *prefix; /* before the secret's value */
};

struct sbx__mcp_conn;

struct sbx__mcp_server {
    atomic_int refs;
    char *name;
    char *file; /* the agent file that declared it */
    /* stdio: argv (program first), env ("K" = value or secret), cwd, host */
    struct sbx_strv argv;
    struct sbx__mcp_header *env; /* name/value or name/secret */
    size_t nenv;
    char *cwd;
    int host;
    atomic_int allowed; /* host: the run allows host MCP servers */
    /* Streamable HTTP */
    char *url;
    struct sbx__mcp_header *headers;
    size_t nheaders;
    int64_t timeout_ms; /* one request's answer */
    /* tools */
    struct sbx_strv allowed_tools, blocked_tools;
    int has_allowed;
    int cache;
    int approval_all;               /* require_approval: always */
    struct sbx_strv approve, never; /* require_approval: per tool */
    int prefix;                     /* tool names get mcp_<server>__ */
    int strict;                     /* try the strict schema form */
    /* live state, under lock */
    pthread_mutex_t lock;
    int users;                  /* runs that use the connection */
    struct sbx__mcp_conn *conn; /* NULL: not connected */
    struct sbx_tool **tools;    /* the last listing's tools */
    size_t ntools;
    int listed; /* tools holds a listing (cache) */
};

/* ---- mcp.c: what the agent file and the runner use ---- */

/* One entry of an agent file's "mcp_servers" (file: that agent file). prefix: tool names get
 * mcp_<server>__; strict: schemas are made strict where they convert. *out: one reference. */
int sbx__mcp_server_new(const char *file, const json_t *entry, int prefix, int strict,
                        struct sbx__mcp_server **out, struct sbx_error *err);
struct sbx__mcp_server *sbx__mcp_server_ref(struct sbx__mcp_server *s);
void sbx__mcp_server_unref(struct sbx__mcp_server *s);
const char *sbx__mcp_server_name(const struct sbx__mcp_server *s);
/* "http", "stdio (host)" or "stdio (sandbox)". */
const char *sbx__mcp_server_transport(const struct sbx__mcp_server *s);
/* 1 for a stdio server started in the agent's sandbox. */
int sbx__mcp_server_in_sandbox(const struct sbx__mcp_server *s);
/* The program of a stdio server on the host; NULL for the others. Borrowed. */
const char *sbx__mcp_server_host_program(const struct sbx__mcp_server *s);
/* Let a host server start (it refuses until this is called). */
void sbx__mcp_server_allow(struct sbx__mcp_server *s);
/* Append the values of the secrets its headers and env read (set now, each once). */
void sbx__mcp_server_secrets(const struct sbx__mcp_server *s, struct sbx_strv *out);

/* What a turn gives the server: the agent's sandbox and user, the run's cancel flag, and the
 * span the listing's "mcp_tools" span goes under. */
struct sbx__mcp_turn {
    struct sbx_session *session;
    const char *run_as;
    const volatile sig_atomic_t *cancel;
    struct sbx_span *span;
};
/* A run starts using the server / stops (the last one closes the connection). */
int sbx__mcp_server_join(struct sbx__mcp_server *s);
void sbx__mcp_server_leave(struct sbx__mcp_server *s);
/* The server's tools for a turn: connects when not connected, lists when there is no cached
 * listing. *tools: caller owns the array and a reference to each tool. */
int sbx__mcp_server_tools(struct sbx__mcp_server *s, const struct sbx__mcp_turn *turn,
                          struct sbx_tool ***tools, size_t *ntools, struct sbx_error *err);
/* {name, transport, server, tools, resources, prompts} (what the server has of them). */
int sbx__mcp_server_describe(struct sbx__mcp_server *s, const struct sbx__mcp_turn *turn,
                             json_t **out, struct sbx_error *err);

/* ---- mcp-conn.c ---- */
struct sbx__mcp_conn_opts {
    struct sbx_session *session; /* stdio in the sandbox: the agent's sandbox */
    const char *run_as;          /* the sandbox user */
    const volatile sig_atomic_t *cancel;
};
/* Start (stdio) or reach (HTTP) the server and run the initialize handshake. */
int sbx__mcp_connect(struct sbx__mcp_server *s, const struct sbx__mcp_conn_opts *o,
                     struct sbx__mcp_conn **out, struct sbx_error *err);
/* One request and its result (*result: caller owns). An error object becomes SBX_E_API with
 * its code and message. */
int sbx__mcp_request(struct sbx__mcp_conn *c, const char *method, const json_t *params,
                     const volatile sig_atomic_t *cancel, json_t **result, struct sbx_error *err);
/* The server's capabilities from initialize (borrowed); serverInfo likewise. */
const json_t *sbx__mcp_capabilities(const struct sbx__mcp_conn *c);
const json_t *sbx__mcp_server_info(const struct sbx__mcp_conn *c);
/* 1 once after the server sent notifications/tools/list_changed (its tools are listed again). */
int sbx__mcp_take_tools_changed(struct sbx__mcp_conn *c);
/* Close: stdio servers get EOF, then SIGTERM/SIGKILL; HTTP sessions a DELETE. */
void sbx__mcp_close(struct sbx__mcp_conn *c);
/* Every page of a list method ("tools/list", ...): the "key" arrays joined. */
int sbx__mcp_list_all(struct sbx__mcp_conn *c, const char *method, const char *key,
                      const volatile sig_atomic_t *cancel, json_t **out, struct sbx_error *err);

#endif
