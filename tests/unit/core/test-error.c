#include <errno.h>
#include <string.h>

#include "tap.h"
#include "sbx/error.h"

static void test_set_and_prefix(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    int rc = sbx_error_set(&err, SBX_E_INVAL, 0, "bad value '%s'", "x");
    CHECK_EQ_INT(rc, -SBX_E_INVAL);
    CHECK_EQ_INT(err.code, SBX_E_INVAL);
    CHECK_EQ_STR(err.msg, "bad value 'x'");
    sbx_error_prefix(&err, "entry '%s'", "a/b");
    CHECK_EQ_STR(err.msg, "entry 'a/b': bad value 'x'");
    sbx_error_prefix(&err, "manifest");
    CHECK_EQ_STR(err.msg, "manifest: entry 'a/b': bad value 'x'");
    CHECK_EQ_INT(err.code, SBX_E_INVAL);
}

static void test_errno(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    int rc = sbx_error_errno(&err, ENOENT, "cannot open '%s'", "f");
    CHECK_EQ_INT(rc, -SBX_E_NOTFOUND);
    CHECK_EQ_INT(err.sys_errno, ENOENT);
    CHECK_EQ_STR(err.msg, "cannot open 'f': no such file or directory");
    CHECK_EQ_INT(sbx_error_errno(&err, EACCES, "x"), -SBX_E_PERM);
    CHECK_EQ_INT(sbx_error_errno(&err, EBADF, "x"), -SBX_E_SYS);
}

static void test_null_err_and_truncation(void)
{
    CHECK_EQ_INT(sbx_error_set(NULL, SBX_E_IO, 0, "ignored"), -SBX_E_IO);
    sbx_error_prefix(NULL, "nothing");
    struct sbx_error err = SBX_ERROR_INIT;
    char big[3000];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    sbx_error_set(&err, SBX_E_PARSE, 0, "%s", big);
    CHECK_EQ_INT(strlen(err.msg), SBX_ERROR_MSG_MAX - 1);
    sbx_error_prefix(&err, "ctx");
    CHECK(strncmp(err.msg, "ctx: aaa", 8) == 0);
    CHECK_EQ_INT(strlen(err.msg), SBX_ERROR_MSG_MAX - 1);
    sbx_error_clear(&err);
    CHECK_EQ_INT(err.code, SBX_OK);
    CHECK_EQ_STR(err.msg, "");
}

static void test_copy_and_names(void)
{
    struct sbx_error a = SBX_ERROR_INIT, b = SBX_ERROR_INIT;
    sbx_error_set(&a, SBX_E_TIMEOUT, 0, "slow");
    CHECK_EQ_INT(sbx_error_copy(&b, &a), -SBX_E_TIMEOUT);
    CHECK_EQ_STR(b.msg, "slow");
    CHECK_EQ_STR(sbx_strerror(SBX_E_TOOBIG), "too big");
    CHECK_EQ_STR(sbx_strerror((enum sbx_errcode)999), "unknown error");
}

int main(void)
{
    TAP_START();
    TAP_RUN(test_set_and_prefix);
    TAP_RUN(test_errno);
    TAP_RUN(test_null_err_and_truncation);
    TAP_RUN(test_copy_and_names);
    return TAP_DONE();
}
