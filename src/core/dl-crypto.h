/* Private: OpenSSL libcrypto, opened on first use (src/core/dl.h). Include this instead of
 * <openssl/evp.h>, <openssl/hmac.h>, <openssl/pem.h> or <openssl/x509.h>; call sbx__crypto_load()
 * before the first call. */
#ifndef SBX_CORE_DL_CRYPTO_H
#define SBX_CORE_DL_CRYPTO_H

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "core/dl.h"

#define SBX__CRYPTO_FUNCS(X)    \
    X(ASN1_TIME_to_tm)          \
    X(BIO_free)                 \
    X(BIO_new_mem_buf)          \
    X(EVP_DigestFinal_ex)       \
    X(EVP_DigestInit_ex)        \
    X(EVP_DigestUpdate)         \
    X(EVP_MD_CTX_free)          \
    X(EVP_MD_CTX_new)           \
    X(EVP_sha1)                 \
    X(EVP_sha256)               \
    X(HMAC)                     \
    X(PEM_read_bio_X509)        \
    X(X509_STORE_CTX_get0_cert) \
    X(X509_digest)              \
    X(X509_free)                \
    X(X509_get0_notAfter)       \
    X(X509_get0_notBefore)      \
    X(X509_get_X509_PUBKEY)     \
    X(i2d_X509_PUBKEY)

struct sbx__crypto_fns {
    SBX__CRYPTO_FUNCS(SBX__DL_MEMBER)
};
extern struct sbx__crypto_fns sbx__crypto;

/* Load libcrypto.so.3 once per process; SBX_E_UNSUPPORTED naming it when it is missing.
 * Thread-safe. */
int sbx__crypto_load(struct sbx_error *err);

#define ASN1_TIME_to_tm          (sbx__crypto.ASN1_TIME_to_tm)
#define BIO_free                 (sbx__crypto.BIO_free)
#define BIO_new_mem_buf          (sbx__crypto.BIO_new_mem_buf)
#define PEM_read_bio_X509        (sbx__crypto.PEM_read_bio_X509)
#define X509_STORE_CTX_get0_cert (sbx__crypto.X509_STORE_CTX_get0_cert)
#define X509_digest              (sbx__crypto.X509_digest)
#define X509_free                (sbx__crypto.X509_free)
#define X509_get0_notAfter       (sbx__crypto.X509_get0_notAfter)
#define X509_get0_notBefore      (sbx__crypto.X509_get0_notBefore)
#define X509_get_X509_PUBKEY     (sbx__crypto.X509_get_X509_PUBKEY)
#define i2d_X509_PUBKEY          (sbx__crypto.i2d_X509_PUBKEY)
#define EVP_DigestFinal_ex       (sbx__crypto.EVP_DigestFinal_ex)
#define EVP_DigestInit_ex        (sbx__crypto.EVP_DigestInit_ex)
#define EVP_DigestUpdate         (sbx__crypto.EVP_DigestUpdate)
#define EVP_MD_CTX_free          (sbx__crypto.EVP_MD_CTX_free)
#define EVP_MD_CTX_new           (sbx__crypto.EVP_MD_CTX_new)
#define EVP_sha1                 (sbx__crypto.EVP_sha1)
#define EVP_sha256               (sbx__crypto.EVP_sha256)
#define HMAC                     (sbx__crypto.HMAC)

#endif
