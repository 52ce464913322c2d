/* Server-sent event streams from a model server. The input is fed in pieces whose sizes come
 * from the input itself, so events split anywhere (inside a CRLF too) are tried; every event
 * handed out is NUL-terminated at its length and within the bound. */
#include <string.h>

#include "fuzz.h"
#include "sandbox/wire/sse.h"

#define MAX_EVENT 4096

static int on_event(const char *event, const char *data, size_t n, void *ud, struct sbx_error *err)
{
    FUZZ_ASSERT(event != NULL && data != NULL);
    FUZZ_ASSERT(n <= MAX_EVENT && data[n] == '\0');
    FUZZ_ASSERT(strlen(event) <= MAX_EVENT);
    (*(size_t *)ud)++;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__sse p;
    size_t events = 0;
    if (size == 0)
        return 0;
    size_t step = (size_t)data[0] % 17 + 1;
    sbx__sse_init(&p, MAX_EVENT, on_event, &events);
    int rc = 0;
    for (size_t off = 1; off < size && rc == 0; off += step) {
        size_t n = size - off < step ? size - off : step;
        rc = sbx__sse_feed(&p, (const char *)data + off, n, &err);
    }
    if (rc == 0)
        (void)sbx__sse_finish(&p, &err);
    sbx__sse_release(&p);
    return 0;
}
