/* The local provider's program entry points and test-only settings: private to the source tree
 * (never installed). The sbx program reaches the entry points through the registry
 * (providers/programs.h), the sbx-supervisor program calls sbx_local_supervise_main itself. */
#ifndef SBX_PROVIDERS_LOCAL_PROGRAM_H
#define SBX_PROVIDERS_LOCAL_PROGRAM_H

#include <stdint.h>

#include "sbx/error.h"
#include "sbx/local.h"
#include "sbx/session.h"

/* The hidden verb of a sandbox's supervisor. */
#define SBX_LOCAL_SUPERVISE_VERB "__supervise"

/* The hidden verb "__supervise ID": the supervisor process itself (argv[0] is the verb,
 * argv[1] the sandbox id, shown by ps). The configuration arrives as JSON on stdin; the
 * readiness report (JSON) leaves on stdout. Returns the exit status. Called by the
 * sbx-supervisor program's main, and by the sbx binary, which can serve too. */
int sbx_local_supervise_main(int argc, char **argv);

/* The hidden verb "__isolate-run": a test driver that runs one command in a fresh isolated
 * sandbox and exits with its status (docs/internals/isolation.md). argv[0] is the verb. */
int sbx_local_isolate_run_main(int argc, char **argv);

/* Test-only settings of a local client, never in sbx_local_options, a manifest, an agent file
 * or a session state. */
struct sbx__local_test {
    /* "name=ip" entries the allow-list proxy resolves without DNS, and loopback upstreams
     * allowed; NULL-terminated, NULL: none. The declared options' constructor fills it from
     * $SBX_TEST_PROXY_HOSTS for network allow (what `sbx` uses). */
    const char *const *proxy_hosts;
    /* The supervisor pauses this long (at most 10 s) before it handles each request, to make a
     * slow supervisor on purpose. 0: none. */
    int64_t request_delay_ms;
};

/* sbx__local_client_new with test settings (t may be NULL: none). */
int sbx__local_client_new_test(const struct sbx_local_options *o, const struct sbx__local_test *t,
                               struct sbx_client **out, struct sbx_error *err);

#endif
