/* Terminal-safe text (sbx/term.h): controls escaped, UTF-8 kept. */
#include <stdlib.h>
#include <string.h>

#include "sbx/term.h"
#include "tap.h"

static void check(const char *in, size_t n, const char *want)
{
    char *got = sbx_term_escape(in, n, 0, NULL);
    CHECK_EQ_STR(got, want);
    CHECK(strlen(got) <= 4 * n);
    free(got);
}

#define CHECK_ESC(lit, want) check(lit, sizeof(lit) - 1, want)

static void test_controls(void)
{
    CHECK_ESC("plain text\n\tindented", "plain text\n\tindented");
    CHECK_ESC("\x1b[2J\x1b[H", "\\x1b[2J\\x1b[H");
    CHECK_ESC("\x1b]52;c;aGVsbG8=\x07", "\\x1b]52;c;aGVsbG8=\\x07");
    CHECK_ESC("\x1b]0;title\x1b\\", "\\x1b]0;title\\x1b\\");
    CHECK_ESC("a\rb\bc\x7f", "a\\x0db\\x08c\\x7f");
    CHECK_ESC("nul\0byte", "nul\\x00byte");
}

static void test_utf8(void)
{
    CHECK_ESC("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xe6\x97\xa5",
              "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xe6\x97\xa5");
    /* C1 controls, as UTF-8 and as raw 8-bit bytes (CSI is 0x9b). */
    CHECK_ESC("\xc2\x9b"
              "2J",
              "\\u009b2J");
    CHECK_ESC("\x9b"
              "2J",
              "\\x9b2J");
    CHECK_ESC("\xc2\x85", "\\u0085");
    CHECK_ESC("\xc2\xa0", "\xc2\xa0");
    /* Bidirectional overrides reorder what the operator reads. */
    CHECK_ESC("x\xe2\x80\xae"
              "y",
              "x\\u202ey");
    /* Overlong, surrogate, beyond U+10FFFF, truncated: byte by byte. */
    CHECK_ESC("\xc0\x9b", "\\xc0\\x9b");
    CHECK_ESC("\xed\xa0\x80", "\\xed\\xa0\\x80");
    CHECK_ESC("\xf4\x90\x80\x80", "\\xf4\\x90\\x80\\x80");
    CHECK_ESC("\xe2\x82", "\\xe2\\x82");
}

static void test_partial(void)
{
    size_t used = 0;
    char *e = sbx_term_escape("ab\xe2\x82", 4, 1, &used);
    CHECK_EQ_STR(e, "ab");
    CHECK_EQ_INT((int)used, 2);
    free(e);
    e = sbx_term_escape("ab\xe2\x28", 4, 1, &used);
    CHECK_EQ_STR(e, "ab\\xe2(");
    CHECK_EQ_INT((int)used, 4);
    free(e);
    e = sbx_term_escape("", 0, 1, &used);
    CHECK_EQ_STR(e, "");
    CHECK_EQ_INT((int)used, 0);
    free(e);
}

int main(void)
{
    TAP_START();
    TAP_RUN(test_controls);
    TAP_RUN(test_utf8);
    TAP_RUN(test_partial);
    return TAP_DONE();
}
