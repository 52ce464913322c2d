/* Private: OpenSSL libssl, opened on first use (src/core/dl.h), for the calls sbx makes on the TLS
 * state libcurl sets up: a pinned certificate's check (src/sandbox/wire/endpoint.c) and the
 * close_notify of a half-closed connection (conn.c); and for the TLS server of the sbx-node
 * daemon (src/node/tls.c).
 * libcurl itself links libssl, so opening it costs nothing more. Include this instead of
 * <openssl/ssl.h>; call sbx__ssl_load() before the first call. */
#ifndef SBX_CORE_DL_SSL_H
#define SBX_CORE_DL_SSL_H

#include <openssl/ssl.h>

#include "core/dl-crypto.h"

#define SBX__SSL_FUNCS(X)                 \
    X(SSL_CTX_check_private_key)          \
    X(SSL_CTX_ctrl)                       \
    X(SSL_CTX_free)                       \
    X(SSL_CTX_load_verify_locations)      \
    X(SSL_CTX_new)                        \
    X(SSL_CTX_set_cert_verify_callback)   \
    X(SSL_CTX_set_client_CA_list)         \
    X(SSL_CTX_set_num_tickets)            \
    X(SSL_CTX_set_verify)                 \
    X(SSL_CTX_use_PrivateKey_file)        \
    X(SSL_CTX_use_certificate_chain_file) \
    X(SSL_accept)                         \
    X(SSL_free)                           \
    X(SSL_get1_peer_certificate)          \
    X(SSL_get_error)                      \
    X(SSL_load_client_CA_file)            \
    X(SSL_new)                            \
    X(SSL_pending)                        \
    X(SSL_read)                           \
    X(SSL_set_fd)                         \
    X(SSL_shutdown)                       \
    X(SSL_write)                          \
    X(TLS_server_method)

struct sbx__ssl_fns {
    SBX__SSL_FUNCS(SBX__DL_MEMBER)
};
extern struct sbx__ssl_fns sbx__ssl;

/* Load libssl.so.3 (and libcrypto, sbx__crypto_load) once per process; SBX_E_UNSUPPORTED naming
 * it when it is missing. Thread-safe. */
int sbx__ssl_load(struct sbx_error *err);

#define SSL_CTX_check_private_key          (sbx__ssl.SSL_CTX_check_private_key)
#define SSL_CTX_ctrl                       (sbx__ssl.SSL_CTX_ctrl)
#define SSL_CTX_free                       (sbx__ssl.SSL_CTX_free)
#define SSL_CTX_load_verify_locations      (sbx__ssl.SSL_CTX_load_verify_locations)
#define SSL_CTX_new                        (sbx__ssl.SSL_CTX_new)
#define SSL_CTX_set_cert_verify_callback   (sbx__ssl.SSL_CTX_set_cert_verify_callback)
#define SSL_CTX_set_client_CA_list         (sbx__ssl.SSL_CTX_set_client_CA_list)
#define SSL_CTX_set_num_tickets            (sbx__ssl.SSL_CTX_set_num_tickets)
#define SSL_CTX_set_verify                 (sbx__ssl.SSL_CTX_set_verify)
#define SSL_CTX_use_PrivateKey_file        (sbx__ssl.SSL_CTX_use_PrivateKey_file)
#define SSL_CTX_use_certificate_chain_file (sbx__ssl.SSL_CTX_use_certificate_chain_file)
#define SSL_accept                         (sbx__ssl.SSL_accept)
#define SSL_free                           (sbx__ssl.SSL_free)
#define SSL_get1_peer_certificate          (sbx__ssl.SSL_get1_peer_certificate)
#define SSL_get_error                      (sbx__ssl.SSL_get_error)
#define SSL_load_client_CA_file            (sbx__ssl.SSL_load_client_CA_file)
#define SSL_new                            (sbx__ssl.SSL_new)
#define SSL_pending                        (sbx__ssl.SSL_pending)
#define SSL_read                           (sbx__ssl.SSL_read)
#define SSL_set_fd                         (sbx__ssl.SSL_set_fd)
#define SSL_shutdown                       (sbx__ssl.SSL_shutdown)
#define SSL_write                          (sbx__ssl.SSL_write)
#define TLS_server_method                  (sbx__ssl.TLS_server_method)

#endif
