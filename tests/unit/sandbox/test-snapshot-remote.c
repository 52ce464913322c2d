/* Remote snapshot stores (src/sandbox/snapshot/remote/): the store URL's parser and its
 * refusals, the credentials read by reference, the endpoint and addressing each kind gets, and
 * the two request signers: SigV4 against AWS's published S3 example (GET Object, Range
 * bytes=0-9) and Azure Shared Key against vectors computed independently (Python's hmac) from
 * the service's documented string to sign. */
#include <stdlib.h>
#include <string.h>

#include "sandbox/snapshot/remote/remote.h"
#include "sbx/b64.h"
#include "tap.h"

static void test_sigv4_aws_example(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    const char *const headers[] = {
            "host:examplebucket.s3.amazonaws.com", "range:bytes=0-9",
            "x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            "x-amz-date:20130524T000000Z", NULL};
    struct sbx__sigv4 s = {"GET",
                           "/test.txt",
                           "",
                           headers,
                           "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
                           "20130524T000000Z",
                           "us-east-1",
                           "s3",
                           "AKIAIOSFODNN7EXAMPLE",
                           "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"};
    struct sbx_buf out;
    sbx_buf_init(&out, SBX_BUF_NOLIMIT);
    CHECK_OK(sbx__sigv4_authorization(&s, &out, &err), &err);
    CHECK_EQ_STR(sbx_buf_cstr(&out),
                 "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/"
                 "aws4_request, SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
                 "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
    /* one byte of the secret changes the signature */
    s.secret_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEZ";
    sbx_buf_reset(&out);
    CHECK_OK(sbx__sigv4_authorization(&s, &out, &err), &err);
    CHECK(strstr(sbx_buf_cstr(&out), "f0e8bdb87c96") == NULL);
    sbx_buf_release(&out);
}

static const unsigned char *azurite_key(size_t *n)
{
    static unsigned char key[64];
    static const char b64[] =
            "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
    struct sbx_buf b;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    struct sbx_error err = SBX_ERROR_INIT;
    CHECK_OK(sbx_b64_decode(b64, strlen(b64), &b, &err), &err);
    memcpy(key, b.data, b.len);
    *n = b.len;
    sbx_buf_release(&b);
    return key;
}

static void test_azure_shared_key(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    size_t kl;
    const unsigned char *key = azurite_key(&kl);
    const char *const put_h[] = {"x-ms-blob-type:BlockBlob",
                                 "x-ms-date:Thu, 03 Dec 2026 10:00:00 GMT",
                                 "x-ms-version:2020-10-02", NULL};
    struct sbx__azsig s = {
            "PUT", 5,   NULL, put_h, "devstoreaccount1", "/devstoreaccount1/snaps/p/blobs/ab/abc",
            NULL,  key, kl};
    struct sbx_buf out;
    sbx_buf_init(&out, SBX_BUF_NOLIMIT);
    CHECK_OK(sbx__azure_authorization(&s, &out, &err), &err);
    CHECK_EQ_STR(sbx_buf_cstr(&out),
                 "SharedKey devstoreaccount1:25LWald/RDyuwH/m5avnyXV9UBSBNyq/DEXCmqEvayY=");
    /* a listing: no length (signed as empty), the query in the canonical resource */
    const char *const get_h[] = {"x-ms-date:Thu, 03 Dec 2026 10:00:00 GMT",
                                 "x-ms-version:2020-10-02", NULL};
    const char *const q[] = {"comp:list", "prefix:p/headers/", "restype:container", NULL};
    struct sbx__azsig g = {"GET", 0,   NULL, get_h, "devstoreaccount1", "/devstoreaccount1/snaps",
                           q,     key, kl};
    sbx_buf_reset(&out);
    CHECK_OK(sbx__azure_authorization(&g, &out, &err), &err);
    CHECK_EQ_STR(sbx_buf_cstr(&out),
                 "SharedKey devstoreaccount1:os0k8OR28vruJmiKSyZj58LjFfDuvQCQBTZvFR/wVn8=");
    sbx_buf_release(&out);
}

static void test_uri_encode(void)
{
    struct sbx_buf b;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    sbx__uri_encode("a b/c~d=e&f", 1, &b);
    CHECK_EQ_STR(sbx_buf_cstr(&b), "a%20b/c~d%3De%26f");
    sbx_buf_reset(&b);
    sbx__uri_encode("team/x/headers/", 0, &b);
    CHECK_EQ_STR(sbx_buf_cstr(&b), "team%2Fx%2Fheaders%2F");
    sbx_buf_release(&b);
}

static void test_url_forms(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__rstore_url u;
    CHECK_OK(sbx__rstore_url_parse("s3://my-bucket/team/snaps/", &u, &err), &err);
    CHECK_EQ_INT(u.kind, SBX__RSTORE_S3);
    CHECK_EQ_STR(u.bucket, "my-bucket");
    CHECK_EQ_STR(u.prefix, "team/snaps/");
    CHECK(u.endpoint == NULL);
    CHECK_EQ_STR(u.name, "s3://my-bucket/team/snaps/");
    sbx__rstore_url_release(&u);

    CHECK_OK(sbx__rstore_url_parse("gs://bkt", &u, &err), &err);
    CHECK_EQ_INT(u.kind, SBX__RSTORE_GCS);
    CHECK_EQ_STR(u.prefix, "");
    sbx__rstore_url_release(&u);

    CHECK_OK(sbx__rstore_url_parse("s3://bkt/p?endpoint=http://127.0.0.1:9000/&region=eu-west-1"
                                   "&key_env=MY_KEY&secret_env=MY_SECRET",
                                   &u, &err),
             &err);
    CHECK_EQ_STR(u.endpoint, "http://127.0.0.1:9000");
    CHECK_EQ_STR(u.region, "eu-west-1");
    CHECK_EQ_STR(u.key_env, "MY_KEY");
    CHECK_EQ_STR(u.secret_env, "MY_SECRET");
    CHECK_EQ_STR(u.name, "s3://bkt/p");
    sbx__rstore_url_release(&u);

    CHECK_OK(sbx__rstore_url_parse("azure://acct1/snaps/a/b?sas_env=TOKEN", &u, &err), &err);
    CHECK_EQ_INT(u.kind, SBX__RSTORE_AZURE);
    CHECK_EQ_STR(u.account, "acct1");
    CHECK_EQ_STR(u.bucket, "snaps");
    CHECK_EQ_STR(u.prefix, "a/b/");
    CHECK_EQ_STR(u.sas_env, "TOKEN");
    sbx__rstore_url_release(&u);
    CHECK_EQ_INT(sbx_snapshot_remote_is_url("azure://a/b"), 1);
    CHECK_EQ_INT(sbx_snapshot_remote_is_url("/var/snapshots"), 0);
    CHECK_EQ_INT(sbx_snapshot_remote_is_url(NULL), 0);
}

static void refused(const char *url, const char *needle)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__rstore_url u;
    CHECK_ERR(sbx__rstore_url_parse(url, &u, &err), SBX_E_INVAL, &err, needle);
}

static void test_url_refusals(void)
{
    refused("http://bucket/p", "not s3://, gs:// or azure://");
    refused("s3://", "no bucket");
    refused("s3://AB", "'AB' is not a valid bucket name");
    refused("s3://key:secret@bucket/p", "no user@ or fragment");
    refused("s3://bucket/p#frag", "no user@ or fragment");
    refused("s3://bucket/a/../b", "prefix 'a/../b'");
    refused("s3://bucket/a//b", "prefix 'a//b'");
    refused("s3://bucket/a%0ab", "bad escape or control character");
    refused("s3://bucket?secret=abc", "unknown parameter 'secret'");
    refused("s3://bucket?key_env=AKIA/xyz+1", "names an environment variable");
    refused("s3://bucket?endpoint=http://u:p@host", "no user@ or fragment");
    refused("s3://bucket?endpoint=ftp://host", "is not a plain http(s) URL");
    refused("s3://bucket?endpoint=http://h?x=1", "is not a plain http(s) URL");
    refused("s3://bucket?region=a&region=b", "'region' is given twice");
    refused("s3://bucket?sas_env=X", "sas_env is for azure:// stores");
    refused("azure://acct/cont?secret_env=X", "secret_env is for s3:// and gs:// stores");
    refused("azure://acct", "azure://ACCOUNT/CONTAINER");
    refused("azure://acct/Bad_Container", "not a valid container name");
    refused("azure://a/cont", "'a' is not a valid storage account name");
    refused("s3://bucket?region", "has no value");
}

static void test_open_credentials(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_snapshot_remote *r = NULL;
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");
    unsetenv("AWS_SESSION_TOKEN");
    unsetenv("AWS_REGION");
    unsetenv("AWS_DEFAULT_REGION");
    unsetenv("AWS_ENDPOINT_URL");
    unsetenv("AWS_ENDPOINT_URL_S3");
    /* AWS: virtual-hosted addressing in the region; no keys is anonymous */
    CHECK_OK(sbx_snapshot_remote_open("s3://bkt/p?region=eu-west-1", &r, &err), &err);
    CHECK_EQ_STR(r->base, "https://bkt.s3.eu-west-1.amazonaws.com");
    CHECK_EQ_STR(r->path0, "");
    CHECK(r->key == NULL && r->secret == NULL);
    sbx_snapshot_remote_free(r);
    /* an endpoint with a path: path-style, the endpoint's path first */
    setenv("MY_KEY", "AKIDEXAMPLE", 1);
    setenv("MY_SECRET", "s3cr3t", 1);
    CHECK_OK(
            sbx_snapshot_remote_open(
                    "s3://bkt/p?endpoint=http://127.0.0.1:9/base&key_env=MY_KEY&secret_env=MY_SECRET",
                    &r, &err),
            &err);
    CHECK_EQ_STR(r->base, "http://127.0.0.1:9");
    CHECK_EQ_STR(r->host, "127.0.0.1:9");
    CHECK_EQ_STR(r->path0, "/base/bkt");
    CHECK_EQ_STR(r->region, "us-east-1");
    CHECK_EQ_STR(sbx_secret_reveal(r->key, NULL), "AKIDEXAMPLE");
    CHECK_EQ_STR(sbx_secret_reveal(r->secret, NULL), "s3cr3t");
    sbx_snapshot_remote_free(r);
    /* GCS: its XML API, region auto */
    CHECK_OK(sbx_snapshot_remote_open("gs://bkt", &r, &err), &err);
    CHECK_EQ_STR(r->base, "https://storage.googleapis.com");
    CHECK_EQ_STR(r->path0, "/bkt");
    CHECK_EQ_STR(r->region, "auto");
    sbx_snapshot_remote_free(r);
    /* a variable the URL names must be set; one key without the other is refused */
    CHECK_ERR(
            sbx_snapshot_remote_open("s3://bkt?key_env=NOPE_UNSET&secret_env=MY_SECRET", &r, &err),
            SBX_E_INVAL, &err, "the variable 'NOPE_UNSET' is not set");
    setenv("AWS_ACCESS_KEY_ID", "AKID", 1);
    CHECK_ERR(sbx_snapshot_remote_open("s3://bkt", &r, &err), SBX_E_INVAL, &err,
              "'AWS_ACCESS_KEY_ID' and 'AWS_SECRET_ACCESS_KEY' are set together or not at all");
    unsetenv("AWS_ACCESS_KEY_ID");
    /* Azure: the account's endpoint; a key that is not base64 is refused naming its variable */
    unsetenv("AZURE_STORAGE_SAS_TOKEN");
    setenv("AZURE_STORAGE_KEY", "not base64!", 1);
    CHECK_ERR(sbx_snapshot_remote_open("azure://acct1/snaps", &r, &err), SBX_E_INVAL, &err,
              "the account key in 'AZURE_STORAGE_KEY' is not base64");
    unsetenv("AZURE_STORAGE_KEY");
    setenv("AZURE_STORAGE_SAS_TOKEN", "?sv=2020&sig=abc", 1);
    CHECK_OK(sbx_snapshot_remote_open("azure://acct1/snaps/x", &r, &err), &err);
    CHECK_EQ_STR(r->base, "https://acct1.blob.core.windows.net");
    CHECK_EQ_STR(r->path0, "/snaps");
    CHECK_EQ_STR(sbx_secret_reveal(r->sas, NULL), "sv=2020&sig=abc");
    CHECK_EQ_STR(sbx_snapshot_remote_name(r), "azure://acct1/snaps/x");
    sbx_snapshot_remote_free(r);
    unsetenv("AZURE_STORAGE_SAS_TOKEN");
}

int main(void)
{
    TAP_START();
    TAP_RUN(test_sigv4_aws_example);
    TAP_RUN(test_azure_shared_key);
    TAP_RUN(test_uri_encode);
    TAP_RUN(test_url_forms);
    TAP_RUN(test_url_refusals);
    TAP_RUN(test_open_credentials);
    return TAP_DONE();
}
