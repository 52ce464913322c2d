/* Private: OpenSSL libssl, opened on first use (src/core/dl.h), for the calls sbx makes on the TLS
 * state libcurl sets up: a pinned certificate's check (src/sandbox/wire/endpoint.c) and the
 * close_notify of a half-closed connection (conn.c).
 * libcurl itself links libssl, so opening it costs nothing more. Include this instead of
 * <openssl/ssl.h>; call sbx__ssl_load() before the first call. */
#ifndef SBX_CORE_DL_SSL_H
#define SBX_CORE_DL_SSL_H

#include <openssl/ssl.h>

#include "core/dl-crypto.h"

#define SBX__SSL_FUNCS(X)               \
    X(SSL_CTX_set_cert_verify_callback) \
    X(SSL_CTX_set_verify)               \
    X(SSL_shutdown)

struct sbx__ssl_fns {
    SBX__SSL_FUNCS(SBX__DL_MEMBER)
};
extern struct sbx__ssl_fns sbx__ssl;

/* Load libssl.so.3 (and libcrypto, sbx__crypto_load) once per process; SBX_E_UNSUPPORTED naming
 * it when it is missing. Thread-safe. */
int sbx__ssl_load(struct sbx_error *err);

#define SSL_CTX_set_cert_verify_callback (sbx__ssl.SSL_CTX_set_cert_verify_callback)
#define SSL_CTX_set_verify               (sbx__ssl.SSL_CTX_set_verify)
#define SSL_shutdown                     (sbx__ssl.SSL_shutdown)

#endif
