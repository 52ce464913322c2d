/* Docker's multiplexed stream decoder (sandbox/wire/mux.c): frames split at every offset, cut
 * streams, hostile headers, the frame limit, and the header encoder. */
#include <string.h>

#include "sandbox/wire/mux.h"
#include "sbx/buf.h"
#include "tap.h"

/* Feed p[0..n) in pieces of step bytes; collect stdout and stderr. */
static int demux_all(const uint8_t *p, size_t n, size_t step, uint32_t max, struct sbx_buf *out,
                     struct sbx_buf *errb, struct sbx__mux *m, struct sbx_error *err)
{
    sbx__mux_init(m, max);
    for (size_t off = 0; off < n;) {
        size_t k = n - off < step ? n - off : step;
        size_t used_total = 0;
        while (used_total < k) {
            int stream;
            const uint8_t *pl;
            size_t plen;
            long used = sbx__mux_feed(m, p + off + used_total, k - used_total, &stream, &pl, &plen,
                                      err);
            if (used <= 0)
                return used < 0 ? (int)used : -1;
            used_total += (size_t)used;
            if (plen && sbx_buf_add(stream == 2 ? errb : out, pl, plen, err) < 0)
                return -1;
        }
        off += k;
    }
    return 0;
}

static const uint8_t sample[] = {1, 0, 0, 0, 0, 0, 0,   3,   'a', 'b', 'c', 2,  0,
                                 0, 0, 0, 0, 0, 2, 'E', 'R', 1,   0,   0,   0,  0,
                                 0, 0, 0, 1, 0, 0, 0,   0,   0,   0,   1,   'd'};

static void test_split_everywhere(void)
{
    size_t bad = 0;
    for (size_t step = 1; step <= sizeof(sample); step++) {
        struct sbx_buf out, errb;
        struct sbx__mux m;
        struct sbx_error err = SBX_ERROR_INIT;
        sbx_buf_init(&out, 64);
        sbx_buf_init(&errb, 64);
        int rc = demux_all(sample, sizeof(sample), step, 0, &out, &errb, &m, &err);
        if (rc != 0 || strcmp(sbx_buf_cstr(&out), "abcd") != 0 ||
            strcmp(sbx_buf_cstr(&errb), "ER") != 0 || !sbx__mux_idle(&m) ||
            sbx__mux_finish(&m, &err) != 0) {
            printf("# step %zu: rc %d out '%s' err '%s'\n", step, rc, out.data, errb.data);
            bad++;
        }
        sbx_buf_release(&out);
        sbx_buf_release(&errb);
    }
    CHECK_EQ_INT(bad, 0);
}

static void test_cut(void)
{
    struct sbx__mux m;
    struct sbx_buf out, errb;
    struct sbx_error err = SBX_ERROR_INIT;
    sbx_buf_init(&out, 64);
    sbx_buf_init(&errb, 64);
    /* Cut inside a header, then inside a payload: not idle, and finish says where. */
    CHECK_OK(demux_all(sample, 5, 5, 0, &out, &errb, &m, &err), &err);
    CHECK(!sbx__mux_idle(&m));
    CHECK_ERR(sbx__mux_finish(&m, &err), SBX_E_PARSE, &err, "inside a frame header");
    CHECK_OK(demux_all(sample, 9, 9, 0, &out, &errb, &m, &err), &err);
    CHECK(!sbx__mux_idle(&m));
    CHECK_ERR(sbx__mux_finish(&m, &err), SBX_E_PARSE, &err, "2 bytes of a frame missing");
    sbx_buf_release(&out);
    sbx_buf_release(&errb);
}

static void test_hostile(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__mux m;
    int stream;
    const uint8_t *pl;
    size_t plen;
    /* A frame claiming 4 GiB: nothing is allocated, the bytes that come are handed out. */
    static const uint8_t big[] = {1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 'x', 'y'};
    sbx__mux_init(&m, 0);
    CHECK_EQ_INT(sbx__mux_feed(&m, big, sizeof(big), &stream, &pl, &plen, &err), 8);
    CHECK_EQ_INT(m.left, 0xffffffffu);
    CHECK_EQ_INT(sbx__mux_feed(&m, big + 8, 2, &stream, &pl, &plen, &err), 2);
    CHECK(plen == 2 && pl == big + 8 && stream == 1);
    CHECK_EQ_INT(m.left, 0xffffffffu - 2);
    /* With a limit the same header is refused. */
    sbx__mux_init(&m, 65536);
    CHECK_ERR((int)sbx__mux_feed(&m, big, sizeof(big), &stream, &pl, &plen, &err), SBX_E_TOOBIG,
              &err, "over the limit of 65536");
    /* Not a header: an unknown stream, or padding bytes set. */
    static const uint8_t bad1[] = {3, 0, 0, 0, 0, 0, 0, 1};
    static const uint8_t bad2[] = {1, 0, 1, 0, 0, 0, 0, 1};
    static const uint8_t bad3[] = {1, 0, 0, 9, 0, 0, 0, 1};
    sbx__mux_init(&m, 0);
    CHECK_ERR((int)sbx__mux_feed(&m, bad1, 8, &stream, &pl, &plen, &err), SBX_E_PARSE, &err,
              "bad frame header (03 00 00 00)");
    sbx__mux_init(&m, 0);
    CHECK_ERR((int)sbx__mux_feed(&m, bad2, 8, &stream, &pl, &plen, &err), SBX_E_PARSE, &err,
              "frame header");
    sbx__mux_init(&m, 0);
    CHECK_ERR((int)sbx__mux_feed(&m, bad3, 8, &stream, &pl, &plen, &err), SBX_E_PARSE, &err,
              "frame header");
    /* An empty frame is fine, and so is stdin (a stream the engine may echo). */
    static const uint8_t empty[] = {2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 'i'};
    sbx__mux_init(&m, 0);
    CHECK_EQ_INT(sbx__mux_feed(&m, empty, sizeof(empty), &stream, &pl, &plen, &err), 8);
    CHECK(sbx__mux_idle(&m) && plen == 0);
    CHECK_EQ_INT(sbx__mux_feed(&m, empty + 8, 9, &stream, &pl, &plen, &err), 8);
    CHECK_EQ_INT(sbx__mux_feed(&m, empty + 16, 1, &stream, &pl, &plen, &err), 1);
    CHECK(stream == SBX__MUX_STDIN && plen == 1 && pl[0] == 'i' && sbx__mux_idle(&m));
    /* Feeding nothing uses nothing. */
    CHECK_EQ_INT(sbx__mux_feed(&m, empty, 0, &stream, &pl, &plen, &err), 0);
}

static void test_encode(void)
{
    uint8_t h[SBX__MUX_HEADER];
    sbx__mux_header(h, SBX__MUX_STDERR, 0x01020304);
    static const uint8_t want[] = {2, 0, 0, 0, 1, 2, 3, 4};
    CHECK_EQ_MEM(h, sizeof(h), want, sizeof(want));
    /* A header it writes decodes to the same stream and length. */
    struct sbx__mux m;
    struct sbx_error err = SBX_ERROR_INIT;
    int stream;
    const uint8_t *pl;
    size_t plen;
    sbx__mux_init(&m, 0);
    CHECK_EQ_INT(sbx__mux_feed(&m, h, sizeof(h), &stream, &pl, &plen, &err), 8);
    CHECK(stream == SBX__MUX_STDERR && m.left == 0x01020304);
}

int main(void)
{
    TAP_START();
    TAP_RUN(test_split_everywhere);
    TAP_RUN(test_cut);
    TAP_RUN(test_hostile);
    TAP_RUN(test_encode);
    return TAP_DONE();
}
