/* The HTTP/1.1 answer head read off an upgraded connection (src/sandbox/wire/head.h): its end
 * found in CRLF and LF forms, fields read without case, and each malformation refused with its
 * own message: no status line, a bad status, folding, a bare CR, a NUL, control characters,
 * a bad name, two different Content-Lengths, too many fields, too long, bytes after it. */
#include <string.h>

#include "sandbox/wire/head.h"
#include "sbx/buf.h"
#include "tap.h"

static int parse(const char *text, struct sbx__http_head *h, struct sbx_error *err)
{
    return sbx__head_parse(text, strlen(text), h, err);
}

static void test_len(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    const char *crlf = "HTTP/1.1 101 X\r\nA: b\r\n\r\nrest";
    const char *lf = "HTTP/1.1 101 X\nA: b\n\nrest";
    CHECK_EQ_INT(sbx__head_len(crlf, strlen(crlf), &err), strlen(crlf) - 4);
    CHECK_EQ_INT(sbx__head_len(lf, strlen(lf), &err), strlen(lf) - 4);
    CHECK_EQ_INT(sbx__head_len(crlf, 20, &err), 0);
    CHECK_EQ_INT(sbx__head_len("", 0, &err), 0);
    char big[SBX__HEAD_MAX + 10];
    memset(big, 'a', sizeof(big));
    CHECK_EQ_INT(sbx__head_len(big, sizeof(big), &err), -SBX_E_TOOBIG);
    CHECK_CONTAINS(err.msg, "longer than 16384 bytes");
}

static void test_good(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__http_head h;
    CHECK_OK(parse("HTTP/1.1 101 Switching Protocols\r\nUpgrade: tcp\r\nconnection:  Upgrade \r\n"
                   "Content-Length: 12\r\nContent-Length: 12\r\n\r\n",
                   &h, &err),
             &err);
    CHECK_EQ_INT(h.status, 101);
    CHECK_EQ_INT(h.minor, 1);
    CHECK_EQ_STR(h.reason, "Switching Protocols");
    CHECK_EQ_STR(sbx__head_get(&h, "CONNECTION"), "Upgrade");
    CHECK_EQ_STR(sbx__head_get(&h, "upgrade"), "tcp");
    CHECK(sbx__head_get(&h, "x") == NULL);
    CHECK_EQ_INT(h.content_length, 12);
    CHECK(!h.chunked);
    sbx__head_release(&h);
    CHECK_OK(parse("HTTP/1.0 200\nTransfer-Encoding: gzip, chunked\nEmpty:\n\n", &h, &err), &err);
    CHECK_EQ_INT(h.status, 200);
    CHECK_EQ_STR(h.reason, "");
    CHECK(h.chunked);
    CHECK_EQ_INT(h.content_length, -1);
    CHECK_EQ_STR(sbx__head_get(&h, "empty"), "");
    sbx__head_release(&h);
    /* A reason with bytes a terminal would act on is cleaned. */
    CHECK_OK(parse("HTTP/1.1 403 F\xc3\xa9 no\r\n\r\n", &h, &err), &err);
    CHECK_EQ_STR(h.reason, "F?? no");
    sbx__head_release(&h);
}

static void test_bad(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__http_head h;
    static const struct {
        const char *text, *msg;
    } cases[] = {
            {"\r\n", "no status line"},
            {"SPDY/3 200 OK\r\n\r\n", "not HTTP/1.x"},
            {"HTTP/2 200 OK\r\n\r\n", "not HTTP/1.x"},
            {"HTTP/1.1 99 OK\r\n\r\n", "no status code"},
            {"HTTP/1.1 600 OK\r\n\r\n", "no status code"},
            {"HTTP/1.1 2000 OK\r\n\r\n", "no status code"},
            {"HTTP/1.1 200 O\x01K\r\n\r\n", "control character"},
            {"HTTP/1.1 200 OK\r\n folded: x\r\n\r\n", "folds"},
            {"HTTP/1.1 200 OK\r\nA: b\rc\r\n\r\n", "bare CR"},
            {"HTTP/1.1 200 OK\r\n: b\r\n\r\n", "without a name"},
            {"HTTP/1.1 200 OK\r\nno colon\r\n\r\n", "without a name"},
            {"HTTP/1.1 200 OK\r\nA b: c\r\n\r\n", "bad header name"},
            {"HTTP/1.1 200 OK\r\nA: b\x7f\r\n\r\n", "control character"},
            {"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", "not one number"},
            {"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "not one number"},
            {"HTTP/1.1 200 OK\r\nContent-Length: 1 2\r\n\r\n", "not one number"},
            {"HTTP/1.1 200 OK\r\nA: b\r\n", "not complete"},
            {"HTTP/1.1 200 OK\r\n\r\nextra", "bytes after"},
    };
    for (size_t i = 0; i < SBX_ARRAY_LEN(cases); i++)
        CHECK_ERR(parse(cases[i].text, &h, &err), SBX_E_PARSE, &err, cases[i].msg);
    CHECK_ERR(sbx__head_parse("HTTP/1.1 200 OK\r\n\0\r\n\r\n", 21, &h, &err), SBX_E_PARSE, &err,
              "NUL");
    struct sbx_buf b;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    int rc = sbx_buf_adds(&b, "HTTP/1.1 200 OK\r\n", NULL);
    for (int i = 0; i <= SBX__HEAD_FIELDS; i++)
        rc |= sbx_buf_addf(&b, NULL, "X-%d: v\r\n", i);
    rc |= sbx_buf_adds(&b, "\r\n", NULL);
    CHECK_EQ_INT(rc, 0);
    CHECK_ERR(sbx__head_parse(b.data, b.len, &h, &err), SBX_E_TOOBIG, &err, "more than 100");
    sbx_buf_release(&b);
}

int main(void)
{
    TAP_START();
    TAP_RUN(test_len);
    TAP_RUN(test_good);
    TAP_RUN(test_bad);
    return TAP_DONE();
}
