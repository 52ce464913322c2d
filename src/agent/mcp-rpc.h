/* sbx internal: JSON-RPC 2.0 messages as the Model Context Protocol uses them
 * (docs/internals/mcp.md). One message is one JSON object; batches are not part of the protocol
 * versions sbx speaks and are refused. */
#ifndef SBX_AGENT_MCP_RPC_H
#define SBX_AGENT_MCP_RPC_H

#include <stdint.h>
#include <jansson.h>

#include "sbx/error.h"

#define SBX__MCP_PROTOCOL_VERSION "2025-06-18"

enum sbx__mcp_kind {
    SBX__MCP_RESULT,       /* a response with "result" */
    SBX__MCP_ERROR,        /* a response with "error" */
    SBX__MCP_REQUEST,      /* a request from the server: method and id */
    SBX__MCP_NOTIFICATION, /* a notification: method, no id */
};

struct sbx__mcp_msg {
    enum sbx__mcp_kind kind;
    json_t *id;          /* RESULT, ERROR, REQUEST: the id (borrowed from doc); NULL: none */
    const char *method;  /* REQUEST, NOTIFICATION */
    json_t *body;        /* RESULT: the result; REQUEST/NOTIFICATION: params (NULL: none);
                            ERROR: the error object */
    int64_t code;        /* ERROR: error.code */
    const char *message; /* ERROR: error.message */
    json_t *doc;         /* the message (owned) */
};

/* The text of a request (id >= 0) or a notification (id < 0), one line ending in '\n';
 * params may be NULL. Caller owns (free). */
char *sbx__mcp_encode(int64_t id, const char *method, const json_t *params);
/* The text of a response to a server's request: result (an object) or, when result is NULL, an
 * error with code and message. id is the request's. Caller owns (free). */
char *sbx__mcp_encode_reply(const json_t *id, const json_t *result, int64_t code,
                            const char *message);
/* Classify one parsed JSON value as a message. Takes a reference to v on success (released by
 * sbx__mcp_msg_release). SBX_E_PARSE: "not a JSON-RPC 2.0 message: ..." saying what is
 * wrong. */
int sbx__mcp_classify(json_t *v, struct sbx__mcp_msg *m, struct sbx_error *err);
/* Parse data[0..n) (one message) with the JSON reader's limits, then classify it. */
int sbx__mcp_parse(const char *data, size_t n, size_t max, struct sbx__mcp_msg *m,
                   struct sbx_error *err);
void sbx__mcp_msg_release(struct sbx__mcp_msg *m);
/* 1 when the message's id is the integer id. */
int sbx__mcp_id_is(const struct sbx__mcp_msg *m, int64_t id);

#endif
