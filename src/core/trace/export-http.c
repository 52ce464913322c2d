/* The HTTP half of the network trace exporters (export-otlp.c, export-openai.c): one libcurl
 * handle per exporter with fixed options, a POST per batch. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/dl-curl.h"
#include "core/trace/export-http.h"

#define DEFAULT_TIMEOUT_MS 1500

static size_t discard(char *p, size_t size, size_t nmemb, void *ud)
{
    (void)p;
    (void)ud;
    return size * nmemb;
}

int sbx__trace_post_check_url(const char *what, const char *url, struct sbx_error *err)
{
    if (strncasecmp(url, "http://", 7) != 0 && strncasecmp(url, "https://", 8) != 0)
        return sbx_error_set(err, SBX_E_INVAL, 0, "%s '%s' must be an http:// or https:// URL",
                             what, url);
    return 0;
}

int sbx__trace_post_open(struct sbx__trace_post *p, const char *url, const char *const *headers,
                         int64_t timeout_ms, struct sbx_error *err)
{
    struct curl_slist *hdrs = NULL;
    int rc = sbx__curl_load(err);
    if (rc < 0)
        return rc;
    memset(p, 0, sizeof(*p));
    CURL *c = curl_easy_init();
    if (!c)
        return sbx_error_set(err, SBX_E_HTTP, 0, "cannot start an HTTP client");
    for (size_t i = 0; headers[i]; i++)
        if (!(hdrs = curl_slist_append(hdrs, headers[i])))
            SBX_BUG("curl_slist_append failed");
    if (!(hdrs = curl_slist_append(hdrs, "User-Agent: sbx/" SBX_VERSION)) ||
        !(hdrs = curl_slist_append(hdrs, "Expect:")))
        SBX_BUG("curl_slist_append failed");
    long t = (long)(timeout_ms > 0 ? timeout_ms : DEFAULT_TIMEOUT_MS);
    p->curl = c;
    p->headers = hdrs;
    p->url = sbx_xstrdup(url);
    curl_easy_setopt(c, CURLOPT_URL, p->url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, t);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, t);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    /* A key in the headers must never follow a redirect to another host. */
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    return 0;
}

int sbx__trace_post(struct sbx__trace_post *p, const void *body, size_t n)
{
    long status = 0;
    curl_easy_setopt(p->curl, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(p->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)n);
    if (curl_easy_perform(p->curl) != CURLE_OK)
        return -1;
    curl_easy_getinfo(p->curl, CURLINFO_RESPONSE_CODE, &status);
    return status >= 200 && status < 300 ? 0 : -1;
}

void sbx__trace_post_close(struct sbx__trace_post *p)
{
    if (p->curl)
        curl_easy_cleanup(p->curl);
    for (struct curl_slist *h = p->headers; h; h = h->next)
        explicit_bzero(h->data, strlen(h->data));
    curl_slist_free_all(p->headers);
    free(p->url);
    memset(p, 0, sizeof(*p));
}
