/* JSON-RPC 2.0 messages of the Model Context Protocol: encoding requests and replies,
 * classifying what a server sends (docs/internals/mcp.md). */
#include <stdlib.h>
#include <string.h>

#include "agent/mcp-rpc.h"
#include "sbx/json.h"

static char *line_of(json_t *m)
{
    char *s = sbx_json_dumps(m, JSON_COMPACT);
    json_decref(m);
    char *line = sbx_xasprintf("%s\n", s);
    free(s);
    return line;
}

char *sbx__mcp_encode(int64_t id, const char *method, const json_t *params)
{
    json_t *m = json_pack("{s:s}", "jsonrpc", "2.0");
    if (id >= 0)
        sbx_json_set(m, "id", json_integer(id));
    sbx_json_set(m, "method", sbx_json_str(method));
    if (params)
        sbx_json_set(m, "params", json_deep_copy(params));
    return line_of(m);
}

char *sbx__mcp_encode_reply(const json_t *id, const json_t *result, int64_t code,
                            const char *message)
{
    json_t *m = json_pack("{s:s}", "jsonrpc", "2.0");
    sbx_json_set(m, "id", id ? json_deep_copy(id) : json_null());
    if (result)
        sbx_json_set(m, "result", json_deep_copy(result));
    else
        sbx_json_set(m, "error",
                     json_pack("{s:I, s:s}", "code", (json_int_t)code, "message",
                               message ? message : ""));
    return line_of(m);
}

static int bad(struct sbx_error *err, const char *why)
{
    return sbx_error_set(err, SBX_E_PARSE, 0, "not a JSON-RPC 2.0 message: %s", why);
}

static int classify_response(json_t *v, struct sbx__mcp_msg *m, struct sbx_error *err)
{
    json_t *result = json_object_get(v, "result"), *e = json_object_get(v, "error");
    if (result && e)
        return bad(err, "a response with both 'result' and 'error'");
    if (!result && !e)
        return bad(err, "neither a request (no 'method') nor a response (no 'result' or 'error')");
    if (!m->id || (!json_is_integer(m->id) && !json_is_string(m->id) && !json_is_null(m->id)))
        return bad(err, "a response without a valid 'id'");
    if (result) {
        m->kind = SBX__MCP_RESULT;
        m->body = result;
        return 0;
    }
    if (!json_is_object(e))
        return bad(err, "'error' is not an object");
    json_t *code = json_object_get(e, "code"), *msg = json_object_get(e, "message");
    if (!json_is_integer(code))
        return bad(err, "'error.code' is not an integer");
    if (msg && !json_is_string(msg))
        return bad(err, "'error.message' is not a string");
    m->kind = SBX__MCP_ERROR;
    m->body = e;
    m->code = json_integer_value(code);
    m->message = msg ? json_string_value(msg) : "";
    return 0;
}

int sbx__mcp_classify(json_t *v, struct sbx__mcp_msg *m, struct sbx_error *err)
{
    memset(m, 0, sizeof(*m));
    if (json_is_array(v))
        return bad(err, "a batch (a JSON array)");
    if (!json_is_object(v))
        return bad(err, "not a JSON object");
    const char *ver = json_string_value(json_object_get(v, "jsonrpc"));
    if (!ver || strcmp(ver, "2.0") != 0)
        return bad(err, "'jsonrpc' is not \"2.0\"");
    json_t *method = json_object_get(v, "method");
    m->id = json_object_get(v, "id");
    int rc;
    if (method) {
        json_t *params = json_object_get(v, "params");
        if (!json_is_string(method) || !json_string_length(method))
            return bad(err, "'method' is not a name");
        if (params && !json_is_object(params) && !json_is_array(params))
            return bad(err, "'params' is neither an object nor an array");
        if (m->id && !json_is_integer(m->id) && !json_is_string(m->id))
            return bad(err, "a request's 'id' is neither an integer nor a string");
        m->kind = m->id ? SBX__MCP_REQUEST : SBX__MCP_NOTIFICATION;
        m->method = json_string_value(method);
        m->body = params;
    } else if ((rc = classify_response(v, m, err)) < 0) {
        memset(m, 0, sizeof(*m));
        return rc;
    }
    m->doc = json_incref(v);
    return 0;
}

int sbx__mcp_parse(const char *data, size_t n, size_t max, struct sbx__mcp_msg *m,
                   struct sbx_error *err)
{
    struct sbx_json_limits lim = {.max_bytes = max};
    json_t *v = NULL;
    int rc = sbx_json_parse(data, n, &lim, &v, err);
    if (rc == 0)
        rc = sbx__mcp_classify(v, m, err);
    json_decref(v);
    return rc;
}

void sbx__mcp_msg_release(struct sbx__mcp_msg *m)
{
    json_decref(m->doc);
    memset(m, 0, sizeof(*m));
}

int sbx__mcp_id_is(const struct sbx__mcp_msg *m, int64_t id)
{
    return json_is_integer(m->id) && json_integer_value(m->id) == id;
}
