/* sbx-supervisor: the supervisor of one local sandbox as a program of its own. The local client
 * runs it as `sbx-supervisor __supervise ID` (the same arguments as the sbx binary, which can
 * serve too), as `sbx-supervisor __relay ID PORT` the port relay of a sandbox in another
 * network namespace (sandbox/host/relay.h). It links only the core and sandbox layers: one
 * runs per live sandbox, so its size and start-up cost are paid per sandbox
 * (docs/internals/local-provider.md). */
#include <stdio.h>
#include <string.h>

#include "sandbox/host/relay.h"
#include "providers/local/program.h"
#include "sbx/log.h"

int main(int argc, char **argv)
{
    sbx_log_set_handler(sbx_log_stderr, NULL, SBX_LOG_WARN);
    /* The port relays of sandboxes in another network namespace are small too. */
    if (argc >= 2 && strcmp(argv[1], SBX__RELAY_VERB) == 0)
        return sbx__relay_main(argc - 1, argv + 1);
    if (argc < 2 || strcmp(argv[1], SBX_LOCAL_SUPERVISE_VERB) != 0) {
        fprintf(stderr, "sbx-supervisor: internal to sbx (run by the local sandbox client)\n");
        return 2;
    }
    return sbx_local_supervise_main(argc - 1, argv + 1);
}
