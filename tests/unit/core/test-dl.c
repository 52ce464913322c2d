/* Libraries opened on first use (src/core/dl.h): the errors name the library and the function. */
#include <string.h>
#include <unistd.h>

#include "tap.h"
#include "core/dl.h"

static void test_missing_library(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    const char *const names[] = {"getpid"};
    void *syms[1] = {NULL};
    CHECK_ERR(sbx__dl_load("libsbx-no-such-library.so.9", "for a test", names, 1, syms, &err),
              SBX_E_UNSUPPORTED, &err,
              "cannot load 'libsbx-no-such-library.so.9' (needed for a test): ");
    CHECK(syms[0] == NULL);
}

static void test_missing_function(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    const char *const names[] = {"getpid", "sbx_no_such_function"};
    void *syms[2] = {NULL, NULL};
    CHECK_ERR(sbx__dl_load("libc.so.6", "for a test", names, 2, syms, &err), SBX_E_UNSUPPORTED,
              &err,
              "cannot load 'libc.so.6' (needed for a test): no function 'sbx_no_such_function'");
}

static void test_resolves(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    const char *const names[] = {"getpid", "getppid"};
    void *syms[2] = {NULL, NULL};
    CHECK_OK(sbx__dl_load("libc.so.6", "for a test", names, 2, syms, &err), &err);
    pid_t (*fn)(void);
    *(void **)&fn = syms[0];
    CHECK_EQ_INT(fn(), getpid());
    *(void **)&fn = syms[1];
    CHECK_EQ_INT(fn(), getppid());
}

int main(void)
{
    TAP_START();
    TAP_RUN(test_missing_library);
    TAP_RUN(test_missing_function);
    TAP_RUN(test_resolves);
    return TAP_DONE();
}
