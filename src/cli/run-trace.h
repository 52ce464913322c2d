/* sbx CLI: tracing of `sbx run` (--trace FILE, --trace-otlp URL, --trace-content,
 * --trace-parent) and `sbx trace show`. See docs/internals/tracing.md. */
#ifndef SBX_CLI_RUN_TRACE_H
#define SBX_CLI_RUN_TRACE_H

#include <stdio.h>
#include <jansson.h>

#include "sbx/error.h"
#include "sbx/strv.h"
#include "sbx/trace-export.h"

struct cli_trace {
    const char *file;   /* --trace */
    const char *otlp;   /* --trace-otlp, else $OTEL_EXPORTER_OTLP_ENDPOINT */
    const char *parent; /* --trace-parent, else $TRACEPARENT */
    int content;        /* --trace-content */
    int openai;         /* --trace-openai: to $SBX_TRACE_OPENAI_URL or the ingest endpoint */
    int otlp_is_base;   /* otlp names the collector, "/v1/traces" is appended */
    /* The run's trace identity (--workflow, --group-id, --trace-metadata; borrowed, NULL: none):
     * attributes of the run span, and the OpenAI trace object's fields. */
    const char *workflow, *group_id;
    const json_t *metadata;
    struct sbx_trace *t;
    struct sbx_span *run;
};

/* One of the trace options of `sbx run` (name without "--"). Returns 1 when it was one. */
int cli_trace_option(struct cli_trace *ct, const char *name, const char *arg);
/* After the options: the environment's defaults, the tracer, its exporters and the run span,
 * made the current span. Nothing is traced when no exporter is configured. secrets: the run's
 * secret values (cli_run_secrets), redacted from every span. */
int cli_trace_start(struct cli_trace *ct, const struct sbx_strv *secrets, struct sbx_error *err);
/* The run's usage (sbx_run_result_usage) on the run span: the conventions' token counts and
 * sbx.usage.requests, which the OpenAI exporter sends as the SDK's task span usage. */
void cli_trace_usage(struct cli_trace *ct, const json_t *usage);
/* End the run span (err: why the run failed, or NULL), flush the exporters and report dropped
 * spans on stderr as one line. */
void cli_trace_finish(struct cli_trace *ct, const struct sbx_error *err);

int cmd_trace(int argc, char **argv);
/* trace-show.c: `sbx trace show` of the JSONL trace read from f (borrowed; path names it in
 * messages): the span tree to out, bad lines to errf. f is hostile input: every line is
 * checked, and the sizes are bounded. CLI_OK, or CLI_FAIL when a line was bad or the file
 * could not be read. */
int cli_trace_show_stream(FILE *f, const char *path, FILE *out, FILE *errf);
/* `sbx trace show --follow FILE`: the tree of what FILE holds now, then each span appended to it
 * as it arrives (complete lines only; one line each, checked as above), until the run's root
 * span ("run", with no parent in the file) is there: CLI_OK (at once when the file already
 * holds it). A file that shrinks, or cannot be read, is CLI_FAIL. Polls every poll_ms. Blocks. */
int cli_trace_follow(const char *path, FILE *out, FILE *errf, int poll_ms);

#endif
