/* sbx: the network trace exporters (src/core/trace/export-*.c), part of libsbx (libcurl) and not
 * of the base library that core and the sandbox layer link (docs/internals/tracing.md). */
#ifndef SBX_TRACE_EXPORT_H
#define SBX_TRACE_EXPORT_H

#include "trace.h"

/* An exporter POSTing batches (OTLP/HTTP, application/x-protobuf) to url, the full traces
 * endpoint (".../v1/traces"). Each request gives up after timeout_ms (0: 1500); a failed
 * batch is dropped, not retried, so a collector that is down or slow costs the run nothing but
 * its spans. Part of libsbx (libcurl), not of the base library. Errors: SBX_E_INVAL (url not
 * http(s)). */
SBX_API int sbx_trace_otlp_exporter(const char *url, int64_t timeout_ms,
                                    struct sbx_trace_exporter *out, struct sbx_error *err);

/* An exporter POSTing spans in the OpenAI traces ingest format to url (default endpoint:
 * SBX_TRACE_OPENAI_URL) with api_key as the bearer token: a "trace" object first, then one
 * "trace.span" per span (the run span is a top-level custom span). Same batching, timeouts and
 * drop policy as OTLP. Part of libsbx. Errors: SBX_E_INVAL (url, no key). */
#define SBX_TRACE_OPENAI_URL "https://api.openai.com/v1/traces/ingest"
/* The trace object's fields (the reference SDK's RunConfig workflow_name, group_id,
 * trace_metadata): all borrowed until the call returns (copied); NULL members, or a NULL
 * struct: the workflow SBX_TRACE_WORKFLOW, no group, no metadata. metadata: an object of
 * strings. The workflow name also names the run's task span. */
struct sbx_trace_workflow {
    const char *name;
    const char *group_id;
    const json_t *metadata;
};
SBX_API int sbx_trace_openai_exporter(const char *url, const char *api_key, int64_t timeout_ms,
                                      const struct sbx_trace_workflow *wf,
                                      struct sbx_trace_exporter *out, struct sbx_error *err);

#endif
