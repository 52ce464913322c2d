/* Messages from an MCP server, as sbx reads them: a newline-delimited stream on stdio (pieces
 * sized by the input's first byte) or the events of a Streamable HTTP answer (when that byte is
 * odd), each value classified as a JSON-RPC message. A message that classifies keeps the
 * fields its kind promises, and a reply sbx would send to a server's request reads back as a
 * response with the same id. */
#include <string.h>

#include "agent/mcp-rpc.h"
#include "fuzz.h"
#include "sandbox/wire/ndjson.h"
#include "sandbox/wire/sse.h"
#include "sbx/json.h"

#define MAX_MSG 4096

static void check_reply(const json_t *id)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__mcp_msg back;
    char *r = sbx__mcp_encode_reply(id, NULL, -32601, "method not found");
    FUZZ_ASSERT(r[strlen(r) - 1] == '\n');
    FUZZ_ASSERT(sbx__mcp_parse(r, strlen(r), 1 << 20, &back, &err) == 0);
    FUZZ_ASSERT(back.kind == SBX__MCP_ERROR && back.code == -32601);
    FUZZ_ASSERT(json_equal(back.id, id));
    sbx__mcp_msg_release(&back);
    free(r);
}

static void classify(json_t *v)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__mcp_msg m;
    if (sbx__mcp_classify(v, &m, &err) < 0) {
        FUZZ_ASSERT(err.msg[0] != '\0');
        return;
    }
    switch (m.kind) {
    case SBX__MCP_RESULT:
        FUZZ_ASSERT(m.id != NULL && m.body != NULL && m.method == NULL);
        break;
    case SBX__MCP_ERROR:
        FUZZ_ASSERT(m.id != NULL && m.message != NULL && json_is_object(m.body));
        break;
    case SBX__MCP_REQUEST:
        FUZZ_ASSERT(m.id != NULL && m.method != NULL && m.method[0] != '\0');
        check_reply(m.id);
        break;
    case SBX__MCP_NOTIFICATION:
        FUZZ_ASSERT(m.id == NULL && m.method != NULL);
        break;
    }
    sbx__mcp_msg_release(&m);
}

static int on_value(json_t *v, size_t line, void *ud, struct sbx_error *err)
{
    classify(v);
    return 0;
}

static int on_event(const char *event, const char *data, size_t n, void *ud, struct sbx_error *err)
{
    struct sbx_json_limits lim = {.max_bytes = MAX_MSG};
    json_t *v = NULL;
    if (sbx_json_parse(data, n, &lim, &v, err) == 0)
        classify(v);
    json_decref(v);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sbx_error err = SBX_ERROR_INIT;
    if (size == 0)
        return 0;
    size_t step = (size_t)data[0] % 17 + 1;
    int rc = 0;
    if (data[0] & 1) {
        struct sbx__sse p;
        sbx__sse_init(&p, MAX_MSG, on_event, NULL);
        for (size_t off = 1; off < size && rc == 0; off += step)
            rc = sbx__sse_feed(&p, (const char *)data + off, size - off < step ? size - off : step,
                               &err);
        sbx__sse_release(&p);
        return 0;
    }
    struct sbx__ndjson d;
    sbx__ndjson_init(&d, MAX_MSG, 0, on_value, NULL);
    for (size_t off = 1; off < size && rc == 0; off += step)
        rc = sbx__ndjson_feed(&d, (const char *)data + off, size - off < step ? size - off : step,
                              &err);
    if (rc == 0)
        (void)sbx__ndjson_finish(&d, &err);
    sbx__ndjson_release(&d);
    return 0;
}
