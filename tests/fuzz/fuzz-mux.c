/* Docker's multiplexed stream: fed whole and in pieces of 1-16 bytes, the stdout and stderr
 * bytes handed out are the same, every piece lies within what was fed, and the decoder ends
 * the same way (error code, idle or cut). */
#include <string.h>

#include "fuzz.h"
#include "sandbox/wire/mux.h"

struct outcome {
    uint64_t hash[3];
    int rc, idle;
};

static void run(const uint8_t *p, size_t n, size_t step, uint32_t max, struct outcome *o)
{
    struct sbx__mux m;
    struct sbx_error err = SBX_ERROR_INIT;
    sbx__mux_init(&m, max);
    memset(o, 0, sizeof(*o));
    for (size_t off = 0; off < n && o->rc == 0;) {
        size_t k = n - off < step ? n - off : step;
        for (size_t used = 0; used < k;) {
            int stream = -1;
            const uint8_t *pl;
            size_t plen;
            long u = sbx__mux_feed(&m, p + off + used, k - used, &stream, &pl, &plen, &err);
            if (u < 0) {
                o->rc = (int)u;
                FUZZ_ASSERT(err.msg[0] != '\0');
                break;
            }
            FUZZ_ASSERT(u > 0 && (size_t)u <= k - used);
            FUZZ_ASSERT(stream >= 0 && stream <= 2);
            if (plen) {
                FUZZ_ASSERT(pl == p + off + used && plen == (size_t)u);
                for (size_t i = 0; i < plen; i++)
                    o->hash[stream] = (o->hash[stream] ^ pl[i]) * 1099511628211u + 1;
            }
            used += (size_t)u;
        }
        off += k;
    }
    o->idle = sbx__mux_idle(&m);
    if (o->rc == 0)
        FUZZ_ASSERT((sbx__mux_finish(&m, &err) == 0) == o->idle);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    size_t step = (size_t)data[0] % 16 + 1;
    uint32_t max = data[1] & 1 ? (uint32_t)data[1] * 4 : 0;
    struct outcome whole, pieces;
    run(data + 2, size - 2, size, max, &whole);
    run(data + 2, size - 2, step, max, &pieces);
    FUZZ_ASSERT(memcmp(&whole, &pieces, sizeof(whole)) == 0);
    return 0;
}
