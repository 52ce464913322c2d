/* The cost of a span on the thread that records it: start, five attributes, end (which only
 * queues it), with no tracer (every call on a NULL span), with the JSONL exporter and with the
 * OTLP exporter pointed at a closed port (every batch fails at once). Prints ns per span on
 * the recording thread and the time shutdown took to flush. Usage: bench-trace-spans [N] */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "sbx/time.h"
#include "sbx/trace-export.h"

static void spans(struct sbx_span *root, int n)
{
    for (int i = 0; i < n; i++) {
        struct sbx_span *s = sbx_span_start(root, "tool_call", SBX_SPAN_INTERNAL);
        sbx_span_set_str(s, "gen_ai.operation.name", "execute_tool");
        sbx_span_set_str(s, "gen_ai.tool.name", "exec_command");
        sbx_span_set_str(s, "gen_ai.tool.call.id", "call_0123456789");
        sbx_span_set_int(s, "sbx.tool.exit_code", 0);
        sbx_span_set_bool(s, "sbx.tool.failed", 0);
        sbx_span_end(s);
    }
}

static void measure(const char *what, struct sbx_trace *t, int n)
{
    struct sbx_span *root = t ? sbx_trace_root(t, "run") : NULL;
    int64_t a = sbx_time_mono_ns();
    spans(root, n);
    int64_t b = sbx_time_mono_ns();
    sbx_span_end(root);
    char *report = NULL;
    sbx_trace_shutdown(t, &report);
    int64_t c = sbx_time_mono_ns();
    printf("%-28s %8.0f ns per span on the recording thread, flush at the end %.1f ms%s%s\n", what,
           (double)(b - a) / n, (double)(c - b) / 1e6, report ? ", dropped " : "",
           report ? report : "");
    free(report);
    sbx_trace_free(t);
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? (int)strtol(argv[1], NULL, 10) : 20000;
    struct sbx_error err = SBX_ERROR_INIT;
    char path[] = "/tmp/sbx-bench-trace-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return 1;
    close(fd);
    measure("no tracer", NULL, n);

    struct sbx_trace *t = NULL;
    struct sbx_trace_exporter ex;
    if (sbx_trace_new(NULL, &t, &err) < 0 || sbx_trace_jsonl_exporter(path, &ex, &err) < 0 ||
        sbx_trace_add_exporter(t, &ex, &err) < 0) {
        fprintf(stderr, "bench-trace-spans: %s\n", err.msg);
        return 1;
    }
    measure("jsonl", t, n);

    t = NULL;
    if (sbx_trace_new(NULL, &t, &err) < 0 ||
        sbx_trace_otlp_exporter("http://127.0.0.1:9/v1/traces", 0, &ex, &err) < 0 ||
        sbx_trace_add_exporter(t, &ex, &err) < 0) {
        fprintf(stderr, "bench-trace-spans: %s\n", err.msg);
        return 1;
    }
    measure("otlp (collector down)", t, n < 2048 ? n : 2000);
    unlink(path);
    return 0;
}
