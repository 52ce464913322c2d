/* `sbx trace show` on a trace file (JSONL, from anyone: the command treats it as hostile):
 * cli_trace_show_stream through a memory stream, its output discarded. It must not crash,
 * overflow (UBSan stops the run) or leak, and it fails exactly when it complained. */
#include <stdio.h>

#include "cli/cli.h"
#include "cli/run-trace.h"
#include "fuzz.h"

static FILE *sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!sink) {
        sink = fopen("/dev/null", "we");
        FUZZ_ASSERT(sink != NULL);
    }
    if (size == 0)
        return 0;
    FILE *in = fmemopen((void *)data, size, "r");
    FUZZ_ASSERT(in != NULL);
    int rc = cli_trace_show_stream(in, "fuzz.jsonl", sink, sink);
    FUZZ_ASSERT(rc == CLI_OK || rc == CLI_FAIL);
    fclose(in);
    return 0;
}
