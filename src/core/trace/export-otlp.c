/* The OTLP/HTTP trace exporter: protobuf batches POSTed with libcurl from the exporter's own
 * thread (docs/internals/tracing.md). */
#include <stdlib.h>
#include <string.h>

#include "core/trace/export-http.h"
#include "sbx/buf.h"
#include "sbx/trace-export.h"

struct otlp {
    struct sbx__trace_post post;
    struct sbx_buf body;
};

static int otlp_export(void *data, const struct sbx_span_data *const *spans, size_t n)
{
    struct otlp *o = data;
    sbx_buf_reset(&o->body);
    if (sbx_trace_otlp_encode(spans, n, SBX_VERSION, &o->body, NULL) < 0 ||
        sbx__trace_post(&o->post, o->body.data, o->body.len) < 0)
        return (int)n;
    return 0;
}

static void otlp_close(void *data)
{
    struct otlp *o = data;
    sbx__trace_post_close(&o->post);
    sbx_buf_release(&o->body);
    free(o);
}

int sbx_trace_otlp_exporter(const char *url, int64_t timeout_ms, struct sbx_trace_exporter *out,
                            struct sbx_error *err)
{
    static const char *const headers[] = {"Content-Type: application/x-protobuf", NULL};
    int rc = sbx__trace_post_check_url("OTLP endpoint", url, err);
    if (rc < 0)
        return rc;
    struct otlp *o = sbx_xcalloc(1, sizeof(*o));
    if ((rc = sbx__trace_post_open(&o->post, url, headers, timeout_ms, err)) < 0) {
        free(o);
        return rc;
    }
    sbx_buf_init(&o->body, SBX_BUF_NOLIMIT);
    *out = (struct sbx_trace_exporter){.name = "otlp",
                                       .export_batch = otlp_export,
                                       .close = otlp_close,
                                       .data = o,
                                       .queue_max = 2048,
                                       .batch_max = 512,
                                       .batch_wait_ms = 200,
                                       .drain_ms = 2000};
    return 0;
}
