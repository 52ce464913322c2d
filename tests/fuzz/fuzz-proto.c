/* Frames of the supervisor protocol (length prefix + JSON object), as a client or a sandbox
 * sends them. A frame that decodes uses no more bytes than given and encodes back to the same
 * value. */
#include <jansson.h>

#include "fuzz.h"
#include "providers/local/local.h"
#include "sbx/buf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sbx_error err = SBX_ERROR_INIT;
    const char *p = (const char *)data;
    size_t left = size;
    for (int frames = 0; frames < 64; frames++) {
        json_t *v = NULL;
        size_t used = 0;
        int rc = sbx__proto_parse(p, left, &v, &used, &err);
        if (rc <= 0)
            break;
        FUZZ_ASSERT(used >= 4 && used <= left);
        FUZZ_ASSERT(json_is_object(v));
        struct sbx_buf b;
        sbx_buf_init(&b, SBX_PROTO_MAX_MSG + 4);
        FUZZ_ASSERT(sbx__proto_frame(v, &b, &err) == 0);
        json_t *again = NULL;
        size_t used2 = 0;
        FUZZ_ASSERT(sbx__proto_parse(b.data, b.len, &again, &used2, &err) == 1);
        FUZZ_ASSERT(used2 == b.len && json_equal(v, again));
        (void)sbx__proto_check(v, &err);
        json_decref(again);
        sbx_buf_release(&b);
        json_decref(v);
        p += used;
        left -= used;
    }
    return 0;
}
