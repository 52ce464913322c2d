/* The remote provider without a node (the daemon's side is tests/integration/1802-1807 and
 * conform-remote): its check of the protocol version a node's answer names. */
#include <string.h>

#include "providers/remote/remote.h"
#include "tap.h"

/* Sbx-Node-Version in an answer: this major (with any minor) or none at all (a node older than
 * the field) is taken; another major, or no version, is refused naming both. */
static void test_check_version(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__endpoint_opts eo = {.url = "https://node-a.example:8443", .name = "a node"};
    struct sbx__endpoint *ep = NULL;
    CHECK_OK(sbx__endpoint_new(&eo, &ep, &err), &err);
    CHECK_OK(sbx__remote_check_version(ep, NULL, &err), &err);
    CHECK_OK(sbx__remote_check_version(ep, SBX__REMOTE_VERSION, &err), &err);
    CHECK_OK(sbx__remote_check_version(ep, "1.9", &err), &err);
    CHECK_ERR(sbx__remote_check_version(ep, "2", &err), SBX_E_UNSUPPORTED, &err,
              "node 'https://node-a.example:8443' speaks sbx-node protocol version 2, this sbx "
              "speaks version 1");
    CHECK_ERR(sbx__remote_check_version(ep, "11", &err), SBX_E_UNSUPPORTED, &err,
              "protocol version 11, this sbx speaks version 1");
    CHECK_ERR(sbx__remote_check_version(ep, "0.1", &err), SBX_E_UNSUPPORTED, &err,
              "protocol version 0.1,");
    CHECK_ERR(sbx__remote_check_version(ep, "", &err), SBX_E_UNSUPPORTED, &err,
              "protocol version (empty), this sbx");
    CHECK_ERR(sbx__remote_check_version(ep, "one\x1b[31m", &err), SBX_E_UNSUPPORTED, &err,
              "protocol version one?[31m,");
    char longv[200];
    memset(longv, '7', sizeof(longv) - 1);
    longv[sizeof(longv) - 1] = 0;
    CHECK_ERR(sbx__remote_check_version(ep, longv, &err), SBX_E_UNSUPPORTED, &err,
              "version 777777777777777777777777777777777777777, this sbx");
    sbx__endpoint_free(ep);
}

int main(void)
{
    TAP_START();
    TAP_RUN(test_check_version);
    return TAP_DONE();
}
