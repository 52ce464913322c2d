/* HTTP requests a sandbox sends to its egress proxy, and the allowlist decision on the host
 * they name. The head is cut where the proxy would cut it; what parses names a normalised host
 * and a valid port, and the head sent upstream is no longer than the limit. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "providers/local/net/net.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sbx_error err = SBX_ERROR_INIT;
    const char *text = (const char *)data;
    size_t n = sbx__proxy_head_len(text, size);
    FUZZ_ASSERT(n <= size);
    if (n == 0)
        n = size; /* a head cut by the connection: the parser must refuse it cleanly */
    if (n > SBX__PROXY_MAX_HEAD)
        return 0;
    struct sbx__proxy_request r;
    if (sbx__proxy_parse(text, n, &r, &err) == 0) {
        FUZZ_ASSERT(r.host != NULL && r.port > 0 && r.port <= 65535);
        FUZZ_ASSERT(r.connect ? r.head == NULL : (r.head != NULL && r.head_len > 0));
        const char *const patterns[] = {"example.com", "*.example.org"};
        (void)sbx__proxy_host_allowed(r.host, patterns, 2);
        if (!r.literal) { /* a normalised name normalises to itself */
            char *norm = NULL;
            FUZZ_ASSERT(sbx__proxy_host_normalize(r.host, strlen(r.host), &norm, NULL, NULL,
                                                  &err) == 0);
            FUZZ_ASSERT(strcmp(norm, r.host) == 0);
            free(norm);
        }
        sbx__proxy_request_release(&r);
    } else {
        FUZZ_ASSERT(err.msg[0] != '\0');
    }
    return 0;
}
