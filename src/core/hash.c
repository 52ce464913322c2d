/* SHA-256 over OpenSSL's EVP interface, hex encoding, and kernel randomness. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "core/dl-crypto.h"
#include "sbx/hash.h"

struct sbx_sha256 {
    EVP_MD_CTX *ctx;
    int finished;
};

/* SHA-256 fetched from the default provider once: starting a digest with EVP_sha256() looks
 * the implementation up again every time, which costs more than hashing a few KB. */
static EVP_MD *sha256_md;
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;

static void fetch_sha256(void)
{
    sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
}

int sbx_sha256_new(struct sbx_sha256 **out, struct sbx_error *err)
{
    int rc = sbx__crypto_load(err);
    if (rc < 0)
        return rc;
    pthread_once(&sha256_once, fetch_sha256);
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx)
        return sbx_error_set(err, SBX_E_SYS, 0, "cannot create a sha256 context");
    if (EVP_DigestInit_ex(ctx, sha256_md ? (const EVP_MD *)sha256_md : EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(ctx);
        return sbx_error_set(err, SBX_E_SYS, 0, "cannot start a sha256 digest");
    }
    struct sbx_sha256 *h = sbx_xcalloc(1, sizeof(*h));
    h->ctx = ctx;
    *out = h;
    return 0;
}

int sbx_sha256_update(struct sbx_sha256 *h, const void *p, size_t n, struct sbx_error *err)
{
    if (h->finished)
        return sbx_error_set(err, SBX_E_INVAL, 0, "sha256 digest already finished");
    if (n && EVP_DigestUpdate(h->ctx, p, n) != 1)
        return sbx_error_set(err, SBX_E_SYS, 0, "sha256 update failed");
    return 0;
}

int sbx_sha256_final(struct sbx_sha256 *h, uint8_t digest[SBX_SHA256_LEN], struct sbx_error *err)
{
    if (h->finished)
        return sbx_error_set(err, SBX_E_INVAL, 0, "sha256 digest already finished");
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (EVP_DigestFinal_ex(h->ctx, md, &len) != 1 || len != SBX_SHA256_LEN)
        return sbx_error_set(err, SBX_E_SYS, 0, "sha256 final failed");
    h->finished = 1;
    for (size_t i = 0; i < SBX_SHA256_LEN; i++)
        digest[i] = md[i];
    return 0;
}

int sbx_sha256_reset(struct sbx_sha256 *h, struct sbx_error *err)
{
    /* The context was started with this implementation already (sbx_sha256_new). */
    if (EVP_DigestInit_ex(h->ctx, sha256_md ? (const EVP_MD *)sha256_md : EVP_sha256(), NULL) != 1)
        return sbx_error_set(err, SBX_E_SYS, 0, "cannot start a sha256 digest");
    h->finished = 0;
    return 0;
}

void sbx_sha256_free(struct sbx_sha256 *h)
{
    if (!h)
        return;
    EVP_MD_CTX_free(h->ctx);
    free(h);
}

int sbx_sha256(const void *p, size_t n, uint8_t digest[SBX_SHA256_LEN], struct sbx_error *err)
{
    struct sbx_sha256 *h = NULL;
    int rc = sbx_sha256_new(&h, err);
    if (rc < 0)
        goto out;
    rc = sbx_sha256_update(h, p, n, err);
    if (rc < 0)
        goto out;
    rc = sbx_sha256_final(h, digest, err);
out:
    sbx_sha256_free(h);
    return rc;
}

/* H((k ^ pad) || m). */
static int keyed_digest(const uint8_t block[64], uint8_t pad, const void *m, size_t n,
                        uint8_t out[SBX_SHA256_LEN], struct sbx_error *err)
{
    uint8_t k[64];
    struct sbx_sha256 *h = NULL;
    for (size_t i = 0; i < sizeof(k); i++)
        k[i] = block[i] ^ pad;
    int rc = sbx_sha256_new(&h, err);
    if (rc == 0)
        rc = sbx_sha256_update(h, k, sizeof(k), err);
    if (rc == 0)
        rc = sbx_sha256_update(h, m, n, err);
    if (rc == 0)
        rc = sbx_sha256_final(h, out, err);
    sbx_sha256_free(h);
    explicit_bzero(k, sizeof(k));
    return rc;
}

int sbx_hmac_sha256(const void *key, size_t keylen, const void *p, size_t n,
                    uint8_t mac[SBX_SHA256_LEN], struct sbx_error *err)
{
    uint8_t block[64] = {0}, inner[SBX_SHA256_LEN];
    int rc = 0;
    if (keylen > sizeof(block))
        rc = sbx_sha256(key, keylen, block, err);
    else if (keylen)
        memcpy(block, key, keylen);
    if (rc == 0)
        rc = keyed_digest(block, 0x36, p, n, inner, err);
    if (rc == 0)
        rc = keyed_digest(block, 0x5c, inner, sizeof(inner), mac, err);
    explicit_bzero(block, sizeof(block));
    return rc;
}

void sbx_hex(const uint8_t *bytes, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[bytes[i] >> 4];
        out[2 * i + 1] = digits[bytes[i] & 0xf];
    }
    out[2 * n] = '\0';
}

int sbx_random_bytes(void *p, size_t n, struct sbx_error *err)
{
    unsigned char *c = p;
    while (n > 0) {
        /* getrandom returns at most 32 MiB per call and may be interrupted */
        ssize_t got = getrandom(c, n, 0);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return sbx_error_errno(err, errno, "cannot get random bytes");
        }
        c += got;
        n -= (size_t)got;
    }
    return 0;
}

int sbx_random_hex(char *out, size_t n, struct sbx_error *err)
{
    uint8_t stackbuf[64];
    uint8_t *bytes = n <= sizeof(stackbuf) ? stackbuf : sbx_xmalloc(n);
    int rc = sbx_random_bytes(bytes, n, err);
    if (rc == 0)
        sbx_hex(bytes, n, out);
    if (bytes != stackbuf)
        free(bytes);
    return rc;
}
