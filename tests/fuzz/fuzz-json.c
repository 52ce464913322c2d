/* JSON text from models, manifests and the supervisor protocol. A value that parses must dump
 * and parse again to an equal value; an error must carry a message. sbx_json_parse is our own
 * reader: jansson's json_loadb must agree with it on every input (the same accepted, to an
 * equal value; the same refused), except that jansson skips a NUL byte after a number. */
#include <string.h>

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
    json_error_t jerr;
    json_t *ref = sbx_json_scan_depth((const char *)data, size, 32) <= 32
                          ? json_loadb((const char *)data, size,
                                       JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr)
                          : NULL;
    if (rc == 0)
        FUZZ_ASSERT(ref && json_equal(v, ref));
    else if (rc != -SBX_E_TOOBIG && ref)
        FUZZ_ASSERT(memchr(data, '\0', size) != NULL);
    json_decref(ref);
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
