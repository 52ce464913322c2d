/* Connect from a server: a streaming body fed whole and in pieces of 1-16 bytes (the first
 * byte picks), which must give the same envelopes and end the same way, each end-of-stream
 * message through its decoder; or (first byte's top bit) a unary error body with the HTTP
 * status the second byte picks. Every envelope re-encodes to the bytes it came from. */
#include <string.h>

#include "fuzz.h"
#include "sandbox/wire/connect.h"

#define MAX_MESSAGE 2048

struct outcome {
    uint64_t hash;
    int rc, finish;
};

static void run(const uint8_t *p, size_t n, size_t step, struct outcome *o)
{
    struct sbx__connect_dec d;
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_buf again;
    memset(o, 0, sizeof(*o));
    sbx_buf_init(&again, MAX_MESSAGE + 5);
    sbx__connect_init(&d, MAX_MESSAGE);
    for (size_t off = 0; off < n && o->rc == 0;) {
        size_t k = n - off < step ? n - off : step;
        for (size_t used = 0; used < k;) {
            struct sbx__connect_msg m;
            long u = sbx__connect_feed(&d, p + off + used, k - used, &m, &err);
            if (u < 0) {
                o->rc = (int)u;
                FUZZ_ASSERT(err.msg[0] != '\0');
                break;
            }
            FUZZ_ASSERT(u > 0 && (size_t)u <= k - used);
            used += (size_t)u;
            if (m.kind == SBX__CONNECT_NONE)
                continue;
            FUZZ_ASSERT(m.len <= MAX_MESSAGE);
            sbx_buf_reset(&again);
            FUZZ_ASSERT(sbx__connect_encode(
                                &again, m.kind == SBX__CONNECT_END ? SBX__CONNECT_END_STREAM : 0,
                                m.data, m.len, &err) == 0);
            FUZZ_ASSERT(again.len == m.len + 5 && memcmp(again.data + 5, m.data, m.len) == 0);
            o->hash = (o->hash ^ again.data[0]) * 1099511628211u;
            for (size_t i = 0; i < m.len; i++)
                o->hash = (o->hash ^ m.data[i]) * 1099511628211u;
            if (m.kind == SBX__CONNECT_END) {
                json_t *md = NULL;
                int rc = sbx__connect_end(m.data, m.len, &md, &err);
                FUZZ_ASSERT(rc <= 0 && (rc == 0 || (md == NULL && err.msg[0] != '\0')));
                json_decref(md);
            }
        }
        off += k;
    }
    if (o->rc == 0)
        o->finish = sbx__connect_finish(&d, &err);
    sbx__connect_release(&d);
    sbx_buf_release(&again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    if (data[0] & 0x80) {
        struct sbx_error err = SBX_ERROR_INIT;
        static const int statuses[] = {0, 400, 401, 403, 404, 408, 429, 500, 502, 503};
        int rc = sbx__connect_error(data + 2, size - 2, statuses[data[1] % 10], &err);
        FUZZ_ASSERT(rc < 0 && err.msg[0] != '\0');
        return 0;
    }
    size_t step = (size_t)data[0] % 16 + 1;
    struct outcome whole, pieces;
    run(data + 1, size - 1, size, &whole);
    run(data + 1, size - 1, step, &pieces);
    FUZZ_ASSERT(whole.hash == pieces.hash && whole.rc == pieces.rc &&
                whole.finish == pieces.finish);
    return 0;
}
