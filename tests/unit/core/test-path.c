#include <stdlib.h>

#include "tap.h"
#include "sbx/path.h"

static char *norm(const char *in, int flags, struct sbx_error *err)
{
    char *out = NULL;
    if (sbx_path_normalize(in, strlen(in), flags, "/workspace", &out, err) != 0)
        return NULL;
    return out;
}

static void expect_norm(const char *in, int flags, const char *want)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char *got = norm(in, flags, &err);
    CHECK_EQ_STR(got, want);
    if (!got)
        printf("#   error: %s\n", err.msg);
    free(got);
}

static void expect_bad(const char *in, size_t len, int flags, const char *needle)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char *out = NULL;
    CHECK_ERR(sbx_path_normalize(in, len, flags, "/workspace", &out, &err), SBX_E_INVAL, &err,
              needle);
    CHECK(out == NULL);
}

static void test_normal_forms(void)
{
    expect_norm("a", 0, "a");
    expect_norm("a/b/c", 0, "a/b/c");
    expect_norm("./a//b/./c/", 0, "a/b/c");
    expect_norm("data/report.md", 0, "data/report.md");
    expect_norm("ünïcödé/файл", 0, "ünïcödé/файл");
    expect_norm("...", 0, "...");
    expect_norm("a..b", 0, "a..b");
    expect_norm(".", SBX_PATH_ALLOW_ROOT, "");
    expect_norm("", SBX_PATH_ALLOW_ROOT, "");
    expect_norm("/workspace/x/y", SBX_PATH_ALLOW_ABSOLUTE, "x/y");
    expect_norm("/workspace", SBX_PATH_ALLOW_ABSOLUTE | SBX_PATH_ALLOW_ROOT, "");
}

static void test_rejections(void)
{
    expect_bad("/etc/passwd", 11, 0, "must be relative");
    expect_bad("/etc/passwd", 11, SBX_PATH_ALLOW_ABSOLUTE, "outside the workspace root");
    expect_bad("/workspacex/a", 13, SBX_PATH_ALLOW_ABSOLUTE, "outside the workspace root");
    expect_bad("../x", 4, 0, "must not contain '..'");
    expect_bad("a/../../x", 9, 0, "must not contain '..'");
    expect_bad("a/..", 4, 0, "'..'");
    expect_bad("a\0b", 3, 0, "NUL");
    expect_bad("a\xff", 2, 0, "not valid UTF-8");
    expect_bad("\xc0\xaf", 2, 0, "not valid UTF-8");     /* overlong '/' */
    expect_bad("\xed\xa0\x80", 3, 0, "not valid UTF-8"); /* surrogate */
    expect_bad("a\nb", 3, 0, "control characters");
    expect_bad("", 0, 0, "workspace root");
    expect_bad("./", 2, 0, "workspace root");
    char longname[300];
    memset(longname, 'x', sizeof(longname));
    expect_bad(longname, sizeof(longname), 0, "longer than 255");
    struct sbx_error err = SBX_ERROR_INIT;
    char *out = NULL;
    sbx_path_normalize("a\xff", 2, 0, NULL, &out, &err);
    CHECK_CONTAINS(err.msg, "a\\xff");
}

static void test_within_and_root(void)
{
    CHECK(sbx_path_within("a/b", "a"));
    CHECK(sbx_path_within("a", "a"));
    CHECK(!sbx_path_within("ab", "a"));
    CHECK(sbx_path_within("x", ""));
    CHECK(!sbx_path_within("a", "a/b"));
    struct sbx_error err = SBX_ERROR_INIT;
    CHECK_OK(sbx_path_check_root("/workspace", &err), &err);
    CHECK_OK(sbx_path_check_root("/home/agent/work", &err), &err);
    CHECK_ERR(sbx_path_check_root("/", &err), SBX_E_INVAL, &err, "must not be '/'");
    CHECK_ERR(sbx_path_check_root("workspace", &err), SBX_E_INVAL, &err, "absolute");
    CHECK_ERR(sbx_path_check_root("/a/../b", &err), SBX_E_INVAL, &err, "'..'");
    CHECK_ERR(sbx_path_check_root("/a//b", &err), SBX_E_INVAL, &err, "normal form");
}

static void test_utf8(void)
{
    CHECK(sbx_utf8_valid("", 0));
    CHECK(sbx_utf8_valid("\xf0\x9f\x98\x80", 4));
    CHECK(!sbx_utf8_valid("\xf0\x9f\x98", 3));
    CHECK(!sbx_utf8_valid("\xf4\x90\x80\x80", 4)); /* above U+10FFFF */
    CHECK(!sbx_utf8_valid("\xe0\x80\x80", 3));     /* overlong */
}

static void test_control(void)
{
    CHECK(!sbx_text_has_control("", 0));
    CHECK(!sbx_text_has_control("plain \xc3\xa9 text~", 14));
    CHECK(sbx_text_has_control("a\nb", 3));
    CHECK(sbx_text_has_control("a\0b", 3)); /* NUL inside the length counts */
    CHECK(sbx_text_has_control("\x1b[2J", 4));
    CHECK(sbx_text_has_control("x\x7f", 2));
    CHECK(!sbx_text_has_control("a\nb", 1)); /* only data[0..n) is looked at */
}

int main(void)
{
    TAP_START();
    TAP_RUN(test_normal_forms);
    TAP_RUN(test_rejections);
    TAP_RUN(test_within_and_root);
    TAP_RUN(test_utf8);
    TAP_RUN(test_control);
    return TAP_DONE();
}
