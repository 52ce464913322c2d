/* Internal parts of the remote snapshot stores (include/sbx/snapshot-remote.h): the URL, the
 * request signers (AWS Signature Version 4 for S3 and GCS, Shared Key for Azure Blob), the
 * requests and the transfers. docs/internals/snapshots.md, "Remote stores". */
#ifndef SBX_SANDBOX_SNAPSHOT_REMOTE_H
#define SBX_SANDBOX_SNAPSHOT_REMOTE_H

#include <stddef.h>
#include <stdint.h>

#include "sbx/buf.h"
#include "sbx/secret.h"
#include "sbx/snapshot-remote.h"

enum sbx__rstore_kind { SBX__RSTORE_S3 = 1, SBX__RSTORE_GCS, SBX__RSTORE_AZURE };

/* A parsed store URL: plain data, no credential. */
struct sbx__rstore_url {
    enum sbx__rstore_kind kind;
    char *account;  /* Azure only */
    char *bucket;   /* the bucket, or the Azure container */
    char *prefix;   /* "" or "a/b/" (ends with '/') */
    char *endpoint; /* query endpoint=, "scheme://host[:port][/path]" without a final '/'; or NULL
                     */
    char *region;   /* query region=, or NULL */
    char *key_env;  /* the variables the credentials come from, or NULL (the defaults) */
    char *secret_env;
    char *token_env;
    char *sas_env;
    char *name; /* the URL without its query */
};

/* Parse a store URL (see include/sbx/snapshot-remote.h). SBX_E_INVAL naming the part that is
 * wrong. out is released on failure. */
int sbx__rstore_url_parse(const char *url, struct sbx__rstore_url *out, struct sbx_error *err);
void sbx__rstore_url_release(struct sbx__rstore_url *u);

/* AWS Signature Version 4 of one request. headers: "name:value" lines with lowercase names,
 * trimmed values, sorted by name, including host and x-amz-date; NULL-terminated. */
struct sbx__sigv4 {
    const char *method;
    const char *canonical_uri;   /* the path, already URI-encoded */
    const char *canonical_query; /* sorted, encoded "k=v&..." or "" */
    const char *const *headers;
    const char *payload_sha256; /* hex */
    const char *amz_date;       /* "YYYYMMDDTHHMMSSZ" */
    const char *region, *service;
    const char *access_key, *secret_key;
};
/* Appends the Authorization header's value to out. */
int sbx__sigv4_authorization(const struct sbx__sigv4 *s, struct sbx_buf *out,
                             struct sbx_error *err);

/* Azure Blob Shared Key of one request (service version 2015-02-21 and later: a zero
 * Content-Length is signed as empty). */
struct sbx__azsig {
    const char *method;
    uint64_t content_length;
    const char *content_type;      /* or NULL */
    const char *const *ms_headers; /* "x-ms-name:value", sorted, NULL-terminated */
    const char *account;
    const char *path;         /* the request URL's path, as sent */
    const char *const *query; /* "name:value" lowercase names, sorted; NULL-terminated */
    const unsigned char *key; /* the decoded account key */
    size_t keylen;
};
/* Appends "SharedKey ACCOUNT:SIGNATURE" to out. */
int sbx__azure_authorization(const struct sbx__azsig *s, struct sbx_buf *out,
                             struct sbx_error *err);

/* Percent-encoding as SigV4 wants it: unreserved characters kept, '/' kept when keep_slash. */
void sbx__uri_encode(const char *s, int keep_slash, struct sbx_buf *out);

struct sbx_snapshot_remote {
    struct sbx__rstore_url u;
    char *base;  /* "scheme://host[:port][/path]" the object paths go under */
    char *host;  /* the Host header (host[:port]) */
    char *path0; /* the URL path before the bucket's objects: "/bucket" or "" (virtual host) */
    char *region;
    struct sbx_secret *key, *secret, *token; /* S3 / GCS, each may be NULL (anonymous) */
    struct sbx_secret *account_key;          /* Azure: decoded key, or NULL */
    struct sbx_secret *sas;                  /* Azure: the SAS query, or NULL */
};

/* One request to the store. key: the object key under the bucket (prefix included), or NULL
 * for the bucket itself (listing). */
struct sbx__rreq {
    const char *method; /* GET, HEAD, PUT */
    const char *key;
    const char *const *query; /* "name=value" pairs, unencoded; NULL-terminated or NULL */
    const void *body;         /* PUT from memory ... */
    size_t body_len;
    int body_fd; /* ... or from this fd (pread from 0), -1: none */
    uint64_t body_fd_len;
    const char *body_sha256; /* hex of the body (S3 signs it) */
    size_t max_answer;       /* bytes of the answer kept in resp->body */
    /* The answer's body to this sink instead (GET of a blob); returns 0 or -code. */
    int (*sink)(void *ctx, const void *p, size_t n, struct sbx_error *err);
    void *sink_ctx;
};
struct sbx__rresp {
    long status;
    struct sbx_buf body;
    char code[64]; /* the service's error code (NoSuchBucket, AuthenticationFailed...) */
};

/* Send one request (a curl easy handle per thread, kept between requests: c may point at NULL
 * and is made). Transport failures are retried twice, answers are returned as they are:
 * resp->status. resp->body must be initialised by the caller. */
int sbx__rstore_send(struct sbx_snapshot_remote *r, void **conn, const struct sbx__rreq *q,
                     struct sbx__rresp *resp, struct sbx_error *err);
void sbx__rstore_conn_free(void *conn);
/* The error of an answer that is not a success: SBX_E_PERM for 401/403 (the credentials),
 * SBX_E_NOTFOUND for a missing bucket or container, SBX_E_API otherwise; what names the
 * object or the operation. */
int sbx__rstore_fail(struct sbx_snapshot_remote *r, const struct sbx__rresp *resp, const char *what,
                     struct sbx_error *err);

#endif
