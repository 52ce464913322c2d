#include <string.h>

#include "tap.h"
#include "sbx/hash.h"

static void hex_of(const uint8_t d[SBX_SHA256_LEN], char out[SBX_SHA256_HEX_LEN + 1])
{
    sbx_hex(d, SBX_SHA256_LEN, out);
}

static void test_vectors(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    uint8_t d[SBX_SHA256_LEN];
    char hex[SBX_SHA256_HEX_LEN + 1];

    CHECK_OK(sbx_sha256("", 0, d, &err), &err);
    hex_of(d, hex);
    CHECK_EQ_STR(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");

    CHECK_OK(sbx_sha256("abc", 3, d, &err), &err);
    hex_of(d, hex);
    CHECK_EQ_STR(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");

    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    CHECK_OK(sbx_sha256(two, strlen(two), d, &err), &err);
    hex_of(d, hex);
    CHECK_EQ_STR(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

static void test_streaming_million_a(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_sha256 *h = NULL;
    char chunk[1000];
    memset(chunk, 'a', sizeof(chunk));
    CHECK_OK(sbx_sha256_new(&h, &err), &err);
    int failures = 0;
    for (int i = 0; i < 1000; i++)
        failures += sbx_sha256_update(h, chunk, sizeof(chunk), &err) != 0;
    CHECK_EQ_INT(failures, 0);
    uint8_t d[SBX_SHA256_LEN];
    char hex[SBX_SHA256_HEX_LEN + 1];
    CHECK_OK(sbx_sha256_final(h, d, &err), &err);
    hex_of(d, hex);
    CHECK_EQ_STR(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    CHECK_ERR(sbx_sha256_update(h, "x", 1, &err), SBX_E_INVAL, &err, "already finished");
    CHECK_ERR(sbx_sha256_final(h, d, &err), SBX_E_INVAL, &err, "already finished");
    /* Reset: a finished digest starts over, and one midway forgets what it had. */
    CHECK_OK(sbx_sha256_reset(h, &err), &err);
    CHECK_OK(sbx_sha256_update(h, "abc", 3, &err), &err);
    CHECK_OK(sbx_sha256_final(h, d, &err), &err);
    hex_of(d, hex);
    CHECK_EQ_STR(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    CHECK_OK(sbx_sha256_reset(h, &err), &err);
    CHECK_OK(sbx_sha256_update(h, "junk", 4, &err), &err);
    CHECK_OK(sbx_sha256_reset(h, &err), &err);
    CHECK_OK(sbx_sha256_final(h, d, &err), &err);
    hex_of(d, hex);
    CHECK_EQ_STR(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    sbx_sha256_free(h);
    sbx_sha256_free(NULL);
}

static void test_uneven_chunks_match_one_shot(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    unsigned char data[777];
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (unsigned char)(i * 31 + 7);
    uint8_t one[SBX_SHA256_LEN], streamed[SBX_SHA256_LEN];
    CHECK_OK(sbx_sha256(data, sizeof(data), one, &err), &err);
    struct sbx_sha256 *h = NULL;
    CHECK_OK(sbx_sha256_new(&h, &err), &err);
    size_t off = 0, step = 1;
    while (off < sizeof(data)) {
        size_t n = step < sizeof(data) - off ? step : sizeof(data) - off;
        CHECK_OK(sbx_sha256_update(h, data + off, n, &err), &err);
        off += n;
        step = step * 2 + 1;
    }
    CHECK_OK(sbx_sha256_update(h, NULL, 0, &err), &err);
    CHECK_OK(sbx_sha256_final(h, streamed, &err), &err);
    CHECK(memcmp(one, streamed, SBX_SHA256_LEN) == 0);
    sbx_sha256_free(h);
}

static void test_hex(void)
{
    const uint8_t bytes[] = {0x00, 0x0f, 0xa5, 0xff};
    char out[9];
    sbx_hex(bytes, 4, out);
    CHECK_EQ_STR(out, "000fa5ff");
    sbx_hex(bytes, 0, out);
    CHECK_EQ_STR(out, "");
}

static void test_random(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char a[33], b[33];
    CHECK_OK(sbx_random_hex(a, 16, &err), &err);
    CHECK_OK(sbx_random_hex(b, 16, &err), &err);
    CHECK_EQ_INT(strlen(a), 32);
    CHECK(strspn(a, "0123456789abcdef") == 32);
    CHECK(strcmp(a, b) != 0);

    /* a large request exercises the loop and the heap path of sbx_random_hex */
    char *big = sbx_xmalloc(2 * 4096 + 1);
    CHECK_OK(sbx_random_hex(big, 4096, &err), &err);
    CHECK_EQ_INT(strlen(big), 8192);
    free(big);

    unsigned char buf[256];
    memset(buf, 0, sizeof(buf));
    CHECK_OK(sbx_random_bytes(buf, sizeof(buf), &err), &err);
    int zeros = 0;
    for (size_t i = 0; i < sizeof(buf); i++)
        zeros += buf[i] == 0;
    CHECK(zeros < 64); /* expected about 1; all-zero would mean nothing was written */
}

int main(void)
{
    TAP_START();
    TAP_RUN(test_vectors);
    TAP_RUN(test_streaming_million_a);
    TAP_RUN(test_uneven_chunks_match_one_shot);
    TAP_RUN(test_hex);
    TAP_RUN(test_random);
    return TAP_DONE();
}
