/* Expected strings were produced by the reference implementation (token_truncation.py) from
 * the same inputs; where sbx deliberately differs (a marker is never cut) the test says so. */
#include <string.h>

#include "sbx/truncate.h"
#include "tap.h"

static char *cut(const char *text, size_t max_tokens, size_t *orig)
{
    struct sbx_buf b;
    struct sbx_error err = SBX_ERROR_INIT;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    CHECK_OK(sbx_truncate_tokens(text, strlen(text), max_tokens, &b, orig, &err), &err);
    return sbx_buf_detach(&b, NULL);
}

static void test_estimate_and_lines(void)
{
    CHECK_EQ_INT(sbx_truncate_estimate_tokens(0), 0);
    CHECK_EQ_INT(sbx_truncate_estimate_tokens(1), 1);
    CHECK_EQ_INT(sbx_truncate_estimate_tokens(4), 1);
    CHECK_EQ_INT(sbx_truncate_estimate_tokens(5), 2);
    static const struct {
        const char *s;
        size_t lines;
    } cases[] = {
            {"", 0},
            {"a", 1},
            {"a\n", 1},
            {"a\nb", 2},
            {"a\r\nb\rc", 3},
            {"\n\n", 2},
            {"x\xE2\x80\xA8y\xC2\x85z\x1cw", 4},
            {"a\r", 1},
            {"\r\n\r\n", 2},
    };
    for (size_t i = 0; i < SBX_ARRAY_LEN(cases); i++)
        CHECK_EQ_INT(sbx_truncate_count_lines(cases[i].s, strlen(cases[i].s)), cases[i].lines);
}

static void test_fix_utf8(void)
{
    static const struct {
        const char *in;
        const char *out;
    } cases[] = {
            {"plain \xC3\xA9 text", "plain \xC3\xA9 text"},
            {"\xff", "\xEF\xBF\xBD"},
            {"a\xe2\x82"
             "b",
             "a\xEF\xBF\xBD"
             "b"},
            {"\xed\xa0\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
            {"\xf0\x9f\x98", "\xEF\xBF\xBD"},
            {"ok\xc3", "ok\xEF\xBF\xBD"},
            {"\xc0\xaf", "\xEF\xBF\xBD\xEF\xBF\xBD"},
            {"\xf4\x90\x80\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
            {"\xe0\x80\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
    };
    struct sbx_error err = SBX_ERROR_INIT;
    for (size_t i = 0; i < SBX_ARRAY_LEN(cases); i++) {
        struct sbx_buf b;
        sbx_buf_init(&b, SBX_BUF_NOLIMIT);
        CHECK_OK(sbx_truncate_fix_utf8(cases[i].in, strlen(cases[i].in), &b, &err), &err);
        CHECK_EQ_STR(b.data, cases[i].out);
        sbx_buf_release(&b);
    }
    struct sbx_buf small;
    sbx_buf_init(&small, 2);
    CHECK_ERR(sbx_truncate_fix_utf8("\xff", 1, &small, &err), SBX_E_TOOBIG, &err, NULL);
    sbx_buf_release(&small);
}

static void test_truncate_matches_reference(void)
{
    size_t orig = 99;
    char *r;
    char content[4096] = "";
    for (int i = 0; i < 20; i++) {
        char line[96];
        snprintf(line, sizeof(line), "%sline %d: value value value value value value value value",
                 i ? "\n" : "", i);
        strncat(content, line, sizeof(content) - strlen(content) - 1);
    }
    r = cut(content, 32, &orig);
    CHECK_EQ_STR(r, "Total output lines: 20\n\nline 0: value value value value value v\xE2\x80\xA6"
                    "263 tokens truncated\xE2\x80\xA6lue value value value value value value");
    CHECK_EQ_INT(orig, 283);
    CHECK(sbx_truncate_estimate_tokens(strlen(r)) <= 32);
    free(r);

    /* Characters are never split: the head stops before a 3-byte character that would
     * cross its budget, the tail starts after one. */
    r = cut("a\xE3\x81\x82"
            "b\xE3\x81\x84"
            "c\xE3\x81\x86"
            "d\xE3\x81\x88"
            "e\xE3\x81\x8A"
            "fa\xE3\x81\x82"
            "b\xE3\x81\x84"
            "c\xE3\x81\x86"
            "d\xE3\x81\x88"
            "e\xE3\x81\x8A"
            "fa\xE3\x81\x82"
            "b\xE3\x81\x84"
            "c\xE3\x81\x86"
            "d\xE3\x81\x88"
            "e\xE3\x81\x8A"
            "f",
            10, &orig);
    CHECK_EQ_STR(r, "a\xE3\x81\x82"
                    "b\xE2\x80\xA6"
                    "13 tokens truncated\xE2\x80\xA6\xE3\x81\x88"
                    "e\xE3\x81\x8A"
                    "f");
    CHECK_EQ_INT(orig, 16);
    free(r);

    r = cut("short", 10, &orig);
    CHECK_EQ_STR(r, "short");
    CHECK_EQ_INT(orig, 0);
    free(r);
}

static void test_tiny_budget_keeps_whole_marker(void)
{
    size_t orig = 0;
    /* The reference returns "…3" and "…6 tok" here: a cut marker tells the model nothing. */
    char *r = cut("abcdefghi", 1, &orig);
    CHECK_EQ_STR(r, "\xE2\x80\xA6"
                    "3 tokens truncated\xE2\x80\xA6");
    CHECK_EQ_INT(orig, 3);
    free(r);
    r = cut("abc", 0, &orig);
    CHECK_EQ_STR(r, "\xE2\x80\xA6"
                    "1 tokens truncated\xE2\x80\xA6");
    free(r);
}

static void test_response_layout(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_buf b;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);

    const char *out = "stdout: pwd\nstderr: pwd";
    struct sbx_truncate_response r = {"123456", 0.25, 1, 7, 0, 0, out, strlen(out), 0};
    CHECK_OK(sbx_truncate_format_response(&r, &b, &err), &err);
    CHECK_EQ_STR(b.data, "Chunk ID: 123456\n"
                         "Wall time: 0.2500 seconds\n"
                         "Process exited with code 7\n"
                         "Output:\n"
                         "stdout: pwd\n"
                         "stderr: pwd");

    sbx_buf_reset(&b);
    r.max_tokens = 2;
    r.wall_time = 0.5;
    CHECK_OK(sbx_truncate_format_response(&r, &b, &err), &err);
    CHECK_EQ_STR(b.data, "Chunk ID: 123456\n"
                         "Wall time: 0.5000 seconds\n"
                         "Process exited with code 7\n"
                         "Original token count: 6\n"
                         "Output:\n"
                         "\xE2\x80\xA6"
                         "6 tokens truncated\xE2\x80\xA6");

    sbx_buf_reset(&b);
    struct sbx_truncate_response run = {"abcdef", 10.00004, 0, 0, 1, 4321, "\xff>>> ", 5, 0};
    CHECK_OK(sbx_truncate_format_response(&run, &b, &err), &err);
    CHECK_EQ_STR(b.data, "Chunk ID: abcdef\n"
                         "Wall time: 10.0000 seconds\n"
                         "Process running with session ID 4321\n"
                         "Output:\n"
                         "\xEF\xBF\xBD>>> ");

    /* Neither exited nor running (a timeout notice) and empty output; a random chunk id. */
    sbx_buf_reset(&b);
    struct sbx_truncate_response none = {NULL, 1.5, 0, 0, 0, 0, NULL, 0, 0};
    CHECK_OK(sbx_truncate_format_response(&none, &b, &err), &err);
    CHECK_EQ_INT(strlen(b.data), strlen("Chunk ID: 000000\nWall time: 1.5000 seconds\nOutput:\n"));
    CHECK(strspn(b.data + 10, "0123456789abcdef") == 6);
    CHECK_EQ_STR(b.data + 16, "\nWall time: 1.5000 seconds\nOutput:\n");
    sbx_buf_release(&b);
}

static void test_default_budget(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_buf big, b;
    sbx_buf_init(&big, SBX_BUF_NOLIMIT);
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    for (int i = 0; i < 2000; i++)
        if (sbx_buf_addf(&big, &err, "row %d zzzzzzzzzzzzzzzzzzzzzzzzzzzzzz\n", i) < 0)
            break;
    CHECK_EQ_INT(big.len, 78890);
    /* No budget given: 10k tokens, as the reference with max_output_tokens=10000. */
    struct sbx_truncate_response r = {"000000", 1, 1, 0, 0, 0, big.data, big.len, 0};
    CHECK_OK(sbx_truncate_format_response(&r, &b, &err), &err);
    const char *hdr = "Chunk ID: 000000\nWall time: 1.0000 seconds\nProcess exited with code 0\n"
                      "Original token count: 19723\nOutput:\n";
    CHECK(strncmp(b.data, hdr, strlen(hdr)) == 0);
    const char *body = b.data + strlen(hdr);
    CHECK_EQ_INT(strlen(body), 39999);
    CHECK(strncmp(body, "Total output lines: 2000\n\nrow 0 ", 32) == 0);
    CHECK_CONTAINS(body, "zzzz\xE2\x80\xA6"
                         "9736 tokens truncated\xE2\x80\xA6zzzz");
    CHECK_CONTAINS(body, "row 1999 zzzzzzzzzzzzzzzzzzzzzzzzzzzzzz\n");
    sbx_buf_release(&big);
    sbx_buf_release(&b);
}

int main(void)
{
    TAP_START();
    TAP_RUN(test_estimate_and_lines);
    TAP_RUN(test_fix_utf8);
    TAP_RUN(test_truncate_matches_reference);
    TAP_RUN(test_tiny_budget_keeps_whole_marker);
    TAP_RUN(test_response_layout);
    TAP_RUN(test_default_budget);
    return TAP_DONE();
}
