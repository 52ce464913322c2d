#include <string.h>

#include "tap.h"
#include "sbx/buf.h"

static void test_add_and_detach(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_buf b;
    sbx_buf_init(&b, 1 << 20);
    CHECK_EQ_STR(sbx_buf_cstr(&b), "");
    CHECK_OK(sbx_buf_adds(&b, "hello", &err), &err);
    CHECK_OK(sbx_buf_addch(&b, ' ', &err), &err);
    CHECK_OK(sbx_buf_addf(&b, &err, "%d-%s", 42, "x"), &err);
    CHECK_EQ_STR(b.data, "hello 42-x");
    CHECK_EQ_INT(b.len, 10);
    sbx_buf_consume(&b, 6);
    CHECK_EQ_STR(b.data, "42-x");
    size_t len = 0;
    char *s = sbx_buf_detach(&b, &len);
    CHECK_EQ_STR(s, "42-x");
    CHECK_EQ_INT(len, 4);
    CHECK_EQ_INT(b.len, 0);
    free(s);
    s = sbx_buf_detach(&b, NULL);
    CHECK_EQ_STR(s, "");
    free(s);
    sbx_buf_release(&b);
}

static void test_limit(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_buf b;
    sbx_buf_init(&b, 8);
    CHECK_OK(sbx_buf_adds(&b, "12345678", &err), &err);
    CHECK_ERR(sbx_buf_adds(&b, "9", &err), SBX_E_TOOBIG, &err, "limit of 8 bytes");
    CHECK_EQ_STR(b.data, "12345678");
    CHECK_ERR(sbx_buf_addf(&b, &err, "%s", "more"), SBX_E_TOOBIG, &err, NULL);
    CHECK_EQ_INT(b.len, 8);
    sbx_buf_reset(&b);
    CHECK_EQ_INT(b.len, 0);
    CHECK_ERR(sbx_buf_reserve(&b, 9, &err), SBX_E_TOOBIG, &err, NULL);
    sbx_buf_release(&b);
}

static void test_binary_and_growth(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_buf b;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    unsigned char bytes[256];
    for (int i = 0; i < 256; i++)
        bytes[i] = (unsigned char)i;
    int failures = 0;
    for (int i = 0; i < 1000; i++)
        failures += sbx_buf_add(&b, bytes, sizeof(bytes), &err) != 0;
    CHECK_EQ_INT(failures, 0);
    CHECK_EQ_INT(b.len, 256000);
    CHECK(memcmp(b.data + 255 * 256, bytes, 256) == 0);
    CHECK_EQ_INT(b.data[b.len], 0);
    CHECK_OK(sbx_buf_reserve(&b, 100, &err), &err);
    memcpy(b.data + b.len, "abc", 3);
    sbx_buf_setlen(&b, b.len + 3);
    CHECK_EQ_INT(b.len, 256003);
    CHECK(memcmp(b.data + 256000, "abc", 4) == 0);
    sbx_buf_release(&b);
}

int main(void)
{
    TAP_START();
    TAP_RUN(test_add_and_detach);
    TAP_RUN(test_limit);
    TAP_RUN(test_binary_and_growth);
    return TAP_DONE();
}
