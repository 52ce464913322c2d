/* sbx internal: the HTTP half every network trace exporter shares (export-http.c): one libcurl
 * handle per exporter, made once and used only from the exporter's own thread, POSTing a batch
 * and telling whether the server took it. Part of libsbx only (libcurl). */
#ifndef SBX_CORE_TRACE_EXPORT_HTTP_H
#define SBX_CORE_TRACE_EXPORT_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "sbx/error.h"

struct sbx__trace_post {
    void *curl;    /* CURL * */
    void *headers; /* struct curl_slist *, wiped before it is freed (it may hold a key) */
    char *url;
};

/* SBX_E_INVAL unless url is http:// or https:// ("<what> '<url>' must be ..."). */
int sbx__trace_post_check_url(const char *what, const char *url, struct sbx_error *err);

/* A handle POSTing to url with headers (NULL-terminated, copied; a Content-Type among them),
 * each request bounded by timeout_ms (0: 1500), never following a redirect (a key in the
 * headers must not reach another host), http and https only. Errors: libcurl missing, or no
 * handle (SBX_E_HTTP). */
int sbx__trace_post_open(struct sbx__trace_post *p, const char *url, const char *const *headers,
                         int64_t timeout_ms, struct sbx_error *err);

/* POST body (n bytes): 0 when the server answered 2xx, -1 on any failure (the batch is then
 * dropped by the caller, never retried). */
int sbx__trace_post(struct sbx__trace_post *p, const void *body, size_t n);

void sbx__trace_post_close(struct sbx__trace_post *p);

#endif
