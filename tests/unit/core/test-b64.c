#include <string.h>

#include "tap.h"
#include "sbx/b64.h"

static const char *vectors[][2] = {
        {"", ""},
        {"f", "Zg=="},
        {"fo", "Zm8="},
        {"foo", "Zm9v"},
        {"foob", "Zm9vYg=="},
        {"fooba", "Zm9vYmE="},
        {"foobar", "Zm9vYmFy"},
};

static void test_rfc4648_vectors(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_buf b;
    sbx_buf_init(&b, 1024);
    for (size_t i = 0; i < SBX_ARRAY_LEN(vectors); i++) {
        const char *plain = vectors[i][0], *enc = vectors[i][1];
        sbx_buf_reset(&b);
        CHECK_OK(sbx_b64_encode(plain, strlen(plain), &b, &err), &err);
        CHECK_EQ_STR(b.data, enc);
        CHECK_EQ_INT(sbx_b64_encoded_len(strlen(plain)), strlen(enc));
        sbx_buf_reset(&b);
        CHECK_OK(sbx_b64_decode(enc, strlen(enc), &b, &err), &err);
        CHECK_EQ_STR(b.data, plain);
    }
    sbx_buf_release(&b);
}

static void test_binary_roundtrip_and_append(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    unsigned char bytes[256];
    for (int i = 0; i < 256; i++)
        bytes[i] = (unsigned char)(255 - i);
    struct sbx_buf enc, dec;
    sbx_buf_init(&enc, 4096);
    sbx_buf_init(&dec, 4096);
    CHECK_OK(sbx_buf_adds(&enc, "prefix:", &err), &err);
    CHECK_OK(sbx_b64_encode(bytes, sizeof(bytes), &enc, &err), &err);
    CHECK_EQ_INT(enc.len, 7 + sbx_b64_encoded_len(256));
    CHECK(strncmp(enc.data, "prefix:", 7) == 0);
    CHECK_OK(sbx_b64_decode(enc.data + 7, enc.len - 7, &dec, &err), &err);
    CHECK_EQ_MEM(dec.data, dec.len, bytes, sizeof(bytes));
    sbx_buf_release(&enc);
    sbx_buf_release(&dec);
}

static void test_whitespace_skipped(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_buf b;
    sbx_buf_init(&b, 1024);
    const char *t = " Zm9v\r\nYmFy \t\n";
    CHECK_OK(sbx_b64_decode(t, strlen(t), &b, &err), &err);
    CHECK_EQ_STR(b.data, "foobar");
    sbx_buf_release(&b);
}

static void test_bad_input(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_buf b;
    sbx_buf_init(&b, 1024);
    CHECK_OK(sbx_buf_adds(&b, "keep", &err), &err);
    CHECK_ERR(sbx_b64_decode("Zm9v*mFy", 8, &b, &err), SBX_E_PARSE, &err,
              "invalid character 0x2a at offset 4");
    CHECK_EQ_STR(b.data, "keep"); /* nothing appended on failure */
    CHECK_ERR(sbx_b64_decode("Zm9vY", 5, &b, &err), SBX_E_PARSE, &err,
              "truncated group at offset 4");
    CHECK_ERR(sbx_b64_decode("Zg=", 3, &b, &err), SBX_E_PARSE, &err, "truncated");
    CHECK_ERR(sbx_b64_decode("Z===", 4, &b, &err), SBX_E_PARSE, &err, "misplaced '=' at offset 1");
    CHECK_ERR(sbx_b64_decode("Zg==Zm9v", 8, &b, &err), SBX_E_PARSE, &err,
              "data after the padding at offset 4");
    CHECK_ERR(sbx_b64_decode("Zg=v", 4, &b, &err), SBX_E_PARSE, &err, "data after the padding");
    /* "Zh==" carries non-zero bits that the padding discards: not canonical */
    CHECK_ERR(sbx_b64_decode("Zh==", 4, &b, &err), SBX_E_PARSE, &err, "non-zero padding bits");
    CHECK_ERR(sbx_b64_decode("Zm9=", 4, &b, &err), SBX_E_PARSE, &err, "non-zero padding bits");
    CHECK_ERR(sbx_b64_decode("Zm8-", 4, &b, &err), SBX_E_PARSE, &err, "invalid character 0x2d");
    CHECK_EQ_STR(b.data, "keep");
    sbx_buf_release(&b);
}

static void test_limit(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_buf b;
    sbx_buf_init(&b, 7);
    CHECK_ERR(sbx_b64_encode("foobar", 6, &b, &err), SBX_E_TOOBIG, &err, "limit");
    CHECK_EQ_INT(b.len, 0);
    CHECK_OK(sbx_b64_encode("foo", 3, &b, &err), &err);
    sbx_buf_reset(&b);
    CHECK_ERR(sbx_b64_decode("Zm9vYmFyZm9vYmFy", 16, &b, &err), SBX_E_TOOBIG, &err, NULL);
    CHECK_EQ_INT(b.len, 0);
    sbx_buf_release(&b);
}

int main(void)
{
    TAP_START();
    TAP_RUN(test_rfc4648_vectors);
    TAP_RUN(test_binary_roundtrip_and_append);
    TAP_RUN(test_whitespace_skipped);
    TAP_RUN(test_bad_input);
    TAP_RUN(test_limit);
    return TAP_DONE();
}
