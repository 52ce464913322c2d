/* sbx: tracing. A run is recorded as a tree of spans (docs/internals/tracing.md): ids in the W3C
 * Trace Context format, attributes as a flat JSON object, and exporters that receive each span
 * once it has ended, on a thread of their own, so exporting never blocks the span's thread.
 * The network exporters (OTLP/HTTP, OpenAI traces) are in trace-export.h. The code of both is
 * src/core/trace/.
 *
 * Every span function accepts a NULL span and then does nothing: code below the agent layer
 * (the sandbox operations, the model client) starts its spans under the calling thread's
 * current span (sbx_trace_current) and costs nothing when no tracer is set. */
#ifndef SBX_TRACE_H
#define SBX_TRACE_H

#include <stdint.h>
#include <jansson.h>

#include "buf.h"
#include "common.h"
#include "error.h"
#include "strv.h"

#define SBX_TRACE_ID_LEN 16
#define SBX_SPAN_ID_LEN  8
/* "00-<32 hex>-<16 hex>-<2 hex>" and its NUL. */
#define SBX_TRACEPARENT_LEN 56
/* The run span's attributes naming the run (sbx run --workflow, --group-id, --trace-metadata
 * KEY=VALUE: one attribute per key, the prefix and the key), and the default workflow name. */
#define SBX_ATTR_WORKFLOW  "sbx.workflow.name"
#define SBX_ATTR_GROUP_ID  "sbx.trace.group_id"
#define SBX_ATTR_METADATA  "sbx.trace.metadata."
#define SBX_TRACE_WORKFLOW "sbx run"
/* What --trace-content keeps of one text attribute when no other bound is set. */
#define SBX_TRACE_CONTENT_MAX 4096

enum sbx_span_kind {
    SBX_SPAN_INTERNAL = 1, /* the OTLP SpanKind numbers */
    SBX_SPAN_CLIENT = 3,
};

enum sbx_span_status {
    SBX_SPAN_UNSET = 0, /* the OTLP StatusCode numbers */
    SBX_SPAN_OK = 1,
    SBX_SPAN_ERROR = 2,
};

/* An ended span, as exporters see it: immutable, shared between exporters (reference
 * counted), freed by the tracer. */
struct sbx_span_data {
    uint8_t trace_id[SBX_TRACE_ID_LEN];
    uint8_t span_id[SBX_SPAN_ID_LEN];
    uint8_t parent_id[SBX_SPAN_ID_LEN]; /* all zero: a root span (no parent) */
    char *name;
    enum sbx_span_kind kind;
    int64_t start_ns, end_ns; /* unix epoch nanoseconds */
    enum sbx_span_status status;
    char *status_message; /* NULL unless status is ERROR */
    json_t *attrs;        /* object of strings, integers, reals, booleans, string arrays */
    int refs;
};

/* An exporter. export_batch runs on the exporter's own thread with up to batch_max spans
 * (borrowed for the call) and returns how many of them it could not deliver (counted as
 * dropped). close runs once on that thread after the last batch and frees data. */
struct sbx_trace_exporter {
    const char *name; /* for the dropped-spans report: "jsonl", "otlp" */
    int (*export_batch)(void *data, const struct sbx_span_data *const *spans, size_t n);
    void (*close)(void *data);
    void *data;
    size_t queue_max;      /* spans waiting; past it new spans are dropped; 0: 4096 */
    size_t batch_max;      /* 0: 512 */
    int64_t batch_wait_ms; /* how long a batch may wait to fill; 0: sent as soon as taken */
    int64_t drain_ms;      /* at shutdown: how long queued spans may still be sent; 0: no bound */
};

struct sbx_trace_options {
    /* A traceparent header value ("00-<trace id>-<parent id>-<flags>") whose trace the run
     * joins, its root span a child of the given parent. NULL: a new trace. */
    const char *traceparent;
    int content;        /* record prompts, tool arguments and outputs (bounded, scrubbed) */
    size_t content_max; /* bytes of one content attribute; 0: SBX_TRACE_CONTENT_MAX */
    /* Values replaced by "[redacted]" in every string attribute (those of 4 bytes or more).
     * Copied. */
    const struct sbx_strv *secrets;
};

struct sbx_trace; /* opaque: the tracer of one run */
struct sbx_span;  /* opaque: a span being recorded */

/* Parse a traceparent value strictly (version 00, lowercase hex, neither id all zero, nothing
 * else). Errors: SBX_E_INVAL "bad traceparent 'v': why". */
SBX_API int sbx_traceparent_parse(const char *s, uint8_t trace_id[SBX_TRACE_ID_LEN],
                                  uint8_t parent_id[SBX_SPAN_ID_LEN], uint8_t *flags,
                                  struct sbx_error *err);
/* Random bytes from getrandom, never all zero (trace and span ids). */
SBX_API void sbx_trace_random_id(uint8_t *id, size_t n);
/* Lowercase hex of n bytes into out (2n+1 bytes). */
SBX_API void sbx_trace_hex(const uint8_t *id, size_t n, char *out);

SBX_API int sbx_trace_new(const struct sbx_trace_options *opt, struct sbx_trace **out,
                          struct sbx_error *err);
/* Add an exporter (taken: its close is called even when this fails) and start its thread.
 * Must be called before the first span starts. */
SBX_API int sbx_trace_add_exporter(struct sbx_trace *t, const struct sbx_trace_exporter *ex,
                                   struct sbx_error *err);
/* Stop the exporters: queued spans are handed to each (within its drain_ms), the threads are
 * joined. Returns the spans dropped by each exporter as "name=N" entries in *report (caller
 * owns, free; NULL when none was dropped). Every span must have ended. */
SBX_API void sbx_trace_shutdown(struct sbx_trace *t, char **report);
SBX_API void sbx_trace_free(struct sbx_trace *t);
/* Non-zero when t records content (sbx_span_set_content keeps it). */
SBX_API int sbx_trace_content(const struct sbx_trace *t);
/* The tracer of s (borrowed; NULL for a NULL span). */
SBX_API struct sbx_trace *sbx_span_tracer(const struct sbx_span *s);

/* The root span of the trace (child of the traceparent's span when one was given). */
SBX_API struct sbx_span *sbx_trace_root(struct sbx_trace *t, const char *name);
/* A child of parent (NULL parent: returns NULL). Caller ends it (sbx_span_end). */
SBX_API struct sbx_span *sbx_span_start(struct sbx_span *parent, const char *name,
                                        enum sbx_span_kind kind);
/* The calling thread's current span (NULL: none; spans started under it are NULL too). */
SBX_API struct sbx_span *sbx_trace_current(void);
/* Make s the calling thread's current span; returns the previous one to restore later. */
SBX_API struct sbx_span *sbx_trace_set_current(struct sbx_span *s);

SBX_API void sbx_span_set_str(struct sbx_span *s, const char *key, const char *value);
SBX_API void sbx_span_set_int(struct sbx_span *s, const char *key, int64_t value);
/* An array of strings (the first 64 of n; NULLs left out), as the GenAI conventions'
 * gen_ai.response.finish_reasons. */
SBX_API void sbx_span_set_strs(struct sbx_span *s, const char *key, const char *const *values,
                               size_t n);
SBX_API void sbx_span_set_bool(struct sbx_span *s, const char *key, int value);
/* Sensitive text: kept only with the tracer's content option, cut at content_max bytes (at a
 * UTF-8 boundary, with "…[truncated]" appended), secrets scrubbed like every string. */
SBX_API void sbx_span_set_content(struct sbx_span *s, const char *key, const char *value, size_t n);
/* Status ERROR with a message (bounded, scrubbed); OK when ok is non-zero and msg NULL. */
SBX_API void sbx_span_set_status(struct sbx_span *s, int ok, const char *msg);
/* Backdate the start (unix ns): for spans recorded after the fact. */
SBX_API void sbx_span_set_start(struct sbx_span *s, int64_t start_ns);
/* The traceparent header value naming s ("00-...-01"). */
SBX_API void sbx_span_traceparent(const struct sbx_span *s, char out[SBX_TRACEPARENT_LEN]);
/* End s now (end_ns 0) or at end_ns and hand it to the exporters; s is freed. If s is some
 * thread's current span that thread must not use it afterwards. */
SBX_API void sbx_span_end_at(struct sbx_span *s, int64_t end_ns);
SBX_API void sbx_span_end(struct sbx_span *s);

/* The JSONL form of one span (docs/internals/tracing.md); caller owns. */
SBX_API json_t *sbx_span_data_json(const struct sbx_span_data *d);
/* An exporter writing one JSON line per span to path: created 0600 or truncated (and set to
 * 0600); a symlink or anything but a regular file is refused (O_NOFOLLOW). Errors: SBX_E_SYS,
 * SBX_E_INVAL. */
SBX_API int sbx_trace_jsonl_exporter(const char *path, struct sbx_trace_exporter *out,
                                     struct sbx_error *err);

/* OTLP/protobuf: an ExportTraceServiceRequest holding spans, appended to out. service_version
 * goes into the resource's service.version. */
SBX_API int sbx_trace_otlp_encode(const struct sbx_span_data *const *spans, size_t n,
                                  const char *service_version, struct sbx_buf *out,
                                  struct sbx_error *err);

#endif
