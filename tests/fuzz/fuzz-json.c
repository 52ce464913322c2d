/* JSON text from models, manifests and the supervisor protocol. A value that parses must dump
 * and parse again to an equal value; an error must carry a message. */
#include <jansson.h>

#include "fuzz.h"
#include "sbx/buf.h"
#include "sbx/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_json_limits lim = {.max_bytes = 1 << 20, .max_depth = 32};
    json_t *v = NULL;
    int rc = sbx_json_parse((const char *)data, size, &lim, &v, &err);
    if (rc < 0) {
        FUZZ_ASSERT(err.msg[0] != '\0');
        return 0;
    }
    FUZZ_ASSERT(sbx_json_scan_depth((const char *)data, size, 32) <= 32);
    struct sbx_buf b;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    FUZZ_ASSERT(sbx_json_dump(v, 0, &b, &err) == 0);
    json_t *again = NULL;
    FUZZ_ASSERT(sbx_json_parse(b.data, b.len, NULL, &again, &err) == 0);
    FUZZ_ASSERT(json_equal(v, again));
    json_decref(again);
    sbx_buf_release(&b);
    json_decref(v);
    return 0;
}
