/* Request signing for the remote snapshot stores: AWS Signature Version 4 (S3, and GCS's XML
 * API with HMAC keys) and Azure Blob Shared Key. Pure functions over the request's parts; the
 * unit test holds them to AWS's published example. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox/snapshot/remote/remote.h"
#include "sbx/b64.h"
#include "sbx/hash.h"

static void keep(int rc)
{
    if (rc < 0)
        sbx__bug(__FILE__, __LINE__, "unbounded buffer refused a write");
}

void sbx__uri_encode(const char *s, int keep_slash, struct sbx_buf *out)
{
    static const char hex[] = "0123456789ABCDEF";
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            *p == '-' || *p == '.' || *p == '_' || *p == '~' || (keep_slash && *p == '/')) {
            keep(sbx_buf_addch(out, (char)*p, NULL));
        } else {
            char e[3] = {'%', hex[*p >> 4], hex[*p & 15]};
            keep(sbx_buf_add(out, e, 3, NULL));
        }
    }
}

static int hmac(const void *key, size_t keylen, const char *msg, uint8_t out[SBX_SHA256_LEN],
                struct sbx_error *err)
{
    return sbx_hmac_sha256(key, keylen, msg, strlen(msg), out, err);
}

int sbx__sigv4_authorization(const struct sbx__sigv4 *s, struct sbx_buf *out, struct sbx_error *err)
{
    struct sbx_buf creq, names, sts;
    sbx_buf_init(&creq, SBX_BUF_NOLIMIT);
    sbx_buf_init(&names, SBX_BUF_NOLIMIT);
    sbx_buf_init(&sts, SBX_BUF_NOLIMIT);
    keep(sbx_buf_addf(&creq, NULL, "%s\n%s\n%s\n", s->method, s->canonical_uri,
                      s->canonical_query));
    for (const char *const *h = s->headers; *h; h++) {
        keep(sbx_buf_addf(&creq, NULL, "%s\n", *h));
        keep(sbx_buf_addf(&names, NULL, "%s%.*s", h == s->headers ? "" : ";", (int)strcspn(*h, ":"),
                          *h));
    }
    keep(sbx_buf_addf(&creq, NULL, "\n%s\n%s", names.data, s->payload_sha256));
    uint8_t d[SBX_SHA256_LEN], k[SBX_SHA256_LEN];
    char hex[SBX_SHA256_HEX_LEN + 1], date[9];
    snprintf(date, sizeof(date), "%.8s", s->amz_date);
    int rc = sbx_sha256(creq.data, creq.len, d, err);
    if (rc < 0)
        goto out;
    sbx_hex(d, sizeof(d), hex);
    keep(sbx_buf_addf(&sts, NULL, "AWS4-HMAC-SHA256\n%s\n%s/%s/%s/aws4_request\n%s", s->amz_date,
                      date, s->region, s->service, hex));
    /* The signing key: the secret, then the date, region, service and "aws4_request". */
    char *first = sbx_xasprintf("AWS4%s", s->secret_key);
    rc = hmac(first, strlen(first), date, k, err);
    explicit_bzero(first, strlen(first));
    free(first);
    if (rc < 0 || (rc = hmac(k, sizeof(k), s->region, k, err)) < 0 ||
        (rc = hmac(k, sizeof(k), s->service, k, err)) < 0 ||
        (rc = hmac(k, sizeof(k), "aws4_request", k, err)) < 0 ||
        (rc = hmac(k, sizeof(k), sts.data, d, err)) < 0)
        goto out;
    sbx_hex(d, sizeof(d), hex);
    keep(sbx_buf_addf(out, NULL,
                      "AWS4-HMAC-SHA256 Credential=%s/%s/%s/%s/aws4_request, SignedHeaders=%s, "
                      "Signature=%s",
                      s->access_key, date, s->region, s->service, names.data, hex));
out:
    explicit_bzero(k, sizeof(k));
    sbx_buf_release(&creq);
    sbx_buf_release(&names);
    sbx_buf_release(&sts);
    return rc;
}

int sbx__azure_authorization(const struct sbx__azsig *s, struct sbx_buf *out, struct sbx_error *err)
{
    struct sbx_buf sts;
    sbx_buf_init(&sts, SBX_BUF_NOLIMIT);
    keep(sbx_buf_addf(&sts, NULL, "%s\n\n\n", s->method));
    if (s->content_length)
        keep(sbx_buf_addf(&sts, NULL, "%llu", (unsigned long long)s->content_length));
    /* Content-MD5, Content-Type, Date (x-ms-date is signed instead), the four conditions,
     * Range */
    keep(sbx_buf_addf(&sts, NULL, "\n\n%s\n\n\n\n\n\n\n", s->content_type ? s->content_type : ""));
    for (const char *const *h = s->ms_headers; *h; h++)
        keep(sbx_buf_addf(&sts, NULL, "%s\n", *h));
    keep(sbx_buf_addf(&sts, NULL, "/%s%s", s->account, s->path));
    for (const char *const *q = s->query; q && *q; q++)
        keep(sbx_buf_addf(&sts, NULL, "\n%s", *q));
    uint8_t d[SBX_SHA256_LEN];
    int rc = sbx_hmac_sha256(s->key, s->keylen, sts.data, sts.len, d, err);
    if (rc == 0) {
        keep(sbx_buf_addf(out, NULL, "SharedKey %s:", s->account));
        keep(sbx_b64_encode(d, sizeof(d), out, NULL));
    }
    sbx_buf_release(&sts);
    return rc;
}
