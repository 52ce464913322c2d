/* Private: OpenSSL libcrypto, opened on first use (src/core/dl.h). Include this instead of
 * <openssl/evp.h>, <openssl/hmac.h>, <openssl/pem.h>, <openssl/x509.h> or <openssl/x509v3.h>; call
 * sbx__crypto_load() before the first call. */
#ifndef SBX_CORE_DL_CRYPTO_H
#define SBX_CORE_DL_CRYPTO_H

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "core/dl.h"

#define SBX__CRYPTO_FUNCS(X)      \
    X(ASN1_INTEGER_free)          \
    X(ASN1_TIME_diff)             \
    X(ASN1_TIME_to_tm)            \
    X(BIO_ctrl)                   \
    X(BIO_free)                   \
    X(BIO_new)                    \
    X(BIO_new_mem_buf)            \
    X(BIO_s_mem)                  \
    X(BN_bin2bn)                  \
    X(BN_free)                    \
    X(BN_to_ASN1_INTEGER)         \
    X(CRYPTO_memcmp)              \
    X(EVP_DigestFinal_ex)         \
    X(EVP_DigestInit_ex)          \
    X(EVP_DigestUpdate)           \
    X(EVP_MD_CTX_free)            \
    X(EVP_MD_CTX_new)             \
    X(EVP_MD_fetch)               \
    X(EVP_PKEY_Q_keygen)          \
    X(EVP_PKEY_free)              \
    X(EVP_sha1)                   \
    X(EVP_sha256)                 \
    X(HMAC)                       \
    X(PEM_read_bio_PrivateKey)    \
    X(PEM_read_bio_X509)          \
    X(PEM_write_bio_PrivateKey)   \
    X(PEM_write_bio_X509)         \
    X(X509V3_EXT_conf_nid)        \
    X(X509V3_set_ctx)             \
    X(X509_EXTENSION_free)        \
    X(X509_NAME_add_entry_by_txt) \
    X(X509_NAME_get_text_by_NID)  \
    X(X509_STORE_CTX_get0_cert)   \
    X(X509_STORE_CTX_set_error)   \
    X(X509_add_ext)               \
    X(X509_check_ca)              \
    X(X509_check_private_key)     \
    X(X509_digest)                \
    X(X509_free)                  \
    X(X509_get0_notAfter)         \
    X(X509_get0_notBefore)        \
    X(X509_get_X509_PUBKEY)       \
    X(X509_get_subject_name)      \
    X(X509_getm_notAfter)         \
    X(X509_getm_notBefore)        \
    X(X509_gmtime_adj)            \
    X(X509_new)                   \
    X(X509_set_issuer_name)       \
    X(X509_set1_notAfter)         \
    X(X509_set_pubkey)            \
    X(X509_set_serialNumber)      \
    X(X509_set_version)           \
    X(X509_verify_cert)           \
    X(X509_sign)                  \
    X(i2d_X509_PUBKEY)

struct sbx__crypto_fns {
    SBX__CRYPTO_FUNCS(SBX__DL_MEMBER)
};
extern struct sbx__crypto_fns sbx__crypto;

/* Load libcrypto.so.3 once per process; SBX_E_UNSUPPORTED naming it when it is missing.
 * Thread-safe. */
int sbx__crypto_load(struct sbx_error *err);

#define ASN1_TIME_diff             (sbx__crypto.ASN1_TIME_diff)
#define ASN1_INTEGER_free          (sbx__crypto.ASN1_INTEGER_free)
#define ASN1_TIME_to_tm            (sbx__crypto.ASN1_TIME_to_tm)
#define BIO_ctrl                   (sbx__crypto.BIO_ctrl)
#define BIO_free                   (sbx__crypto.BIO_free)
#define BIO_new                    (sbx__crypto.BIO_new)
#define BIO_new_mem_buf            (sbx__crypto.BIO_new_mem_buf)
#define BIO_s_mem                  (sbx__crypto.BIO_s_mem)
#define BN_bin2bn                  (sbx__crypto.BN_bin2bn)
#define BN_free                    (sbx__crypto.BN_free)
#define BN_to_ASN1_INTEGER         (sbx__crypto.BN_to_ASN1_INTEGER)
#define CRYPTO_memcmp              (sbx__crypto.CRYPTO_memcmp)
#define EVP_DigestFinal_ex         (sbx__crypto.EVP_DigestFinal_ex)
#define EVP_DigestInit_ex          (sbx__crypto.EVP_DigestInit_ex)
#define EVP_DigestUpdate           (sbx__crypto.EVP_DigestUpdate)
#define EVP_MD_CTX_free            (sbx__crypto.EVP_MD_CTX_free)
#define EVP_MD_CTX_new             (sbx__crypto.EVP_MD_CTX_new)
#define EVP_MD_fetch               (sbx__crypto.EVP_MD_fetch)
#define EVP_PKEY_Q_keygen          (sbx__crypto.EVP_PKEY_Q_keygen)
#define EVP_PKEY_free              (sbx__crypto.EVP_PKEY_free)
#define EVP_sha1                   (sbx__crypto.EVP_sha1)
#define EVP_sha256                 (sbx__crypto.EVP_sha256)
#define HMAC                       (sbx__crypto.HMAC)
#define PEM_read_bio_PrivateKey    (sbx__crypto.PEM_read_bio_PrivateKey)
#define PEM_read_bio_X509          (sbx__crypto.PEM_read_bio_X509)
#define PEM_write_bio_PrivateKey   (sbx__crypto.PEM_write_bio_PrivateKey)
#define PEM_write_bio_X509         (sbx__crypto.PEM_write_bio_X509)
#define X509V3_EXT_conf_nid        (sbx__crypto.X509V3_EXT_conf_nid)
#define X509V3_set_ctx             (sbx__crypto.X509V3_set_ctx)
#define X509_EXTENSION_free        (sbx__crypto.X509_EXTENSION_free)
#define X509_NAME_add_entry_by_txt (sbx__crypto.X509_NAME_add_entry_by_txt)
#define X509_NAME_get_text_by_NID  (sbx__crypto.X509_NAME_get_text_by_NID)
#define X509_STORE_CTX_get0_cert   (sbx__crypto.X509_STORE_CTX_get0_cert)
#define X509_STORE_CTX_set_error   (sbx__crypto.X509_STORE_CTX_set_error)
#define X509_add_ext               (sbx__crypto.X509_add_ext)
#define X509_check_ca              (sbx__crypto.X509_check_ca)
#define X509_check_private_key     (sbx__crypto.X509_check_private_key)
#define X509_digest                (sbx__crypto.X509_digest)
#define X509_free                  (sbx__crypto.X509_free)
#define X509_get0_notAfter         (sbx__crypto.X509_get0_notAfter)
#define X509_get0_notBefore        (sbx__crypto.X509_get0_notBefore)
#define X509_get_X509_PUBKEY       (sbx__crypto.X509_get_X509_PUBKEY)
#define X509_get_subject_name      (sbx__crypto.X509_get_subject_name)
#define X509_getm_notAfter         (sbx__crypto.X509_getm_notAfter)
#define X509_getm_notBefore        (sbx__crypto.X509_getm_notBefore)
#define X509_gmtime_adj            (sbx__crypto.X509_gmtime_adj)
#define X509_new                   (sbx__crypto.X509_new)
#define X509_set_issuer_name       (sbx__crypto.X509_set_issuer_name)
#define X509_set1_notAfter         (sbx__crypto.X509_set1_notAfter)
#define X509_set_pubkey            (sbx__crypto.X509_set_pubkey)
#define X509_set_serialNumber      (sbx__crypto.X509_set_serialNumber)
#define X509_set_version           (sbx__crypto.X509_set_version)
#define X509_sign                  (sbx__crypto.X509_sign)
#define X509_verify_cert           (sbx__crypto.X509_verify_cert)
#define i2d_X509_PUBKEY            (sbx__crypto.i2d_X509_PUBKEY)

#endif
