/* sbx: SHA-256 (OpenSSL libcrypto), streaming and one-shot, with hex output. */
#ifndef SBX_HASH_H
#define SBX_HASH_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "error.h"

#define SBX_SHA256_LEN     32
#define SBX_SHA256_HEX_LEN 64

struct sbx_sha256; /* opaque */

/* Start a digest. *out: caller owns (sbx_sha256_free). */
SBX_API int sbx_sha256_new(struct sbx_sha256 **out, struct sbx_error *err);
SBX_API int sbx_sha256_update(struct sbx_sha256 *h, const void *p, size_t n, struct sbx_error *err);
/* Finish: writes 32 bytes to digest. h cannot be updated afterwards. */
SBX_API int sbx_sha256_final(struct sbx_sha256 *h, uint8_t digest[SBX_SHA256_LEN],
                             struct sbx_error *err);
SBX_API void sbx_sha256_free(struct sbx_sha256 *h);
/* Start h over as a new digest, finished or not: cheaper than a new one for many short texts. */
SBX_API int sbx_sha256_reset(struct sbx_sha256 *h, struct sbx_error *err);

/* One shot. */
SBX_API int sbx_sha256(const void *p, size_t n, uint8_t digest[SBX_SHA256_LEN],
                       struct sbx_error *err);
/* HMAC-SHA-256 (RFC 2104) of p[0..n) under key[0..keylen). */
SBX_API int sbx_hmac_sha256(const void *key, size_t keylen, const void *p, size_t n,
                            uint8_t mac[SBX_SHA256_LEN], struct sbx_error *err);
/* Lowercase hex of n bytes into out, which must hold 2n+1 bytes. */
SBX_API void sbx_hex(const uint8_t *bytes, size_t n, char *out);
/* Fill p with n bytes from the kernel's CSPRNG (getrandom). */
SBX_API int sbx_random_bytes(void *p, size_t n, struct sbx_error *err);
/* A random identifier of 2n lowercase hex characters into out (2n+1 bytes). */
SBX_API int sbx_random_hex(char *out, size_t n, struct sbx_error *err);

#endif
