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
SBX_API int sbx_trace_openai_exporter(const char *url, const char *api_key, int64_t timeout_ms,
                                      struct sbx_trace_exporter *out, struct sbx_error *err);

#endif
