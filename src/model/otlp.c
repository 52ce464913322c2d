/* The OTLP/HTTP trace exporter: protobuf batches POSTed with libcurl from the exporter's own
 * thread (docs/internals/tracing.md). */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/dl-curl.h"
#include "sbx/buf.h"
#include "sbx/trace-export.h"

struct otlp {
    char *url;
    int64_t timeout_ms;
    CURL *curl;
    struct curl_slist *hdrs;
    struct sbx_buf body;
};

static size_t discard(char *p, size_t size, size_t nmemb, void *ud)
{
    return size * nmemb;
}

static int otlp_export(void *data, const struct sbx_span_data *const *spans, size_t n)
{
    struct otlp *o = data;
    sbx_buf_reset(&o->body);
    if (sbx_trace_otlp_encode(spans, n, SBX_VERSION, &o->body, NULL) < 0)
        return (int)n;
    CURL *c = o->curl;
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, o->body.data);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)o->body.len);
    long status = 0;
    if (curl_easy_perform(c) != CURLE_OK)
        return (int)n;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    return status >= 200 && status < 300 ? 0 : (int)n;
}

static void otlp_close(void *data)
{
    struct otlp *o = data;
    curl_easy_cleanup(o->curl);
    curl_slist_free_all(o->hdrs);
    sbx_buf_release(&o->body);
    free(o->url);
    free(o);
}

int sbx_trace_otlp_exporter(const char *url, int64_t timeout_ms, struct sbx_trace_exporter *out,
                            struct sbx_error *err)
{
    if (strncasecmp(url, "http://", 7) != 0 && strncasecmp(url, "https://", 8) != 0)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "OTLP endpoint '%s' must be an http:// or https:// URL", url);
    int rc = sbx__curl_load(err);
    if (rc < 0)
        return rc;
    struct otlp *o = sbx_xcalloc(1, sizeof(*o));
    o->url = sbx_xstrdup(url);
    o->timeout_ms = timeout_ms > 0 ? timeout_ms : 1500;
    sbx_buf_init(&o->body, SBX_BUF_NOLIMIT);
    o->curl = curl_easy_init();
    if (!o->curl) {
        otlp_close(o);
        return sbx_error_set(err, SBX_E_HTTP, 0, "cannot start an HTTP client");
    }
    o->hdrs = curl_slist_append(NULL, "Content-Type: application/x-protobuf");
    o->hdrs = curl_slist_append(o->hdrs, "User-Agent: sbx/" SBX_VERSION);
    o->hdrs = curl_slist_append(o->hdrs, "Expect:");
    if (!o->hdrs)
        SBX_BUG("curl_slist_append failed");
    CURL *c = o->curl;
    curl_easy_setopt(c, CURLOPT_URL, o->url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, o->hdrs);
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)o->timeout_ms);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)o->timeout_ms);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
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
