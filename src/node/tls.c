/* The daemon's TLS: mutual TLS 1.3, the deployment's CA only, a harness certificate required
 * (src/node/daemon.h). */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>

#include "node/daemon.h"

static int ssl_fail(struct sbx_error *err, const char *what, const char *path)
{
    return sbx_error_set(err, SBX_E_INVAL, 0, "tls: cannot %s '%s'", what, path);
}

int node_tls_init(struct node_daemon *d, const char *cert, const char *key, const char *ca,
                  struct sbx_error *err)
{
    int rc = sbx__ssl_load(err);
    if (rc < 0)
        return rc;
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx)
        return sbx_error_set(err, SBX_E_SYS, 0, "tls: cannot make a server context");
    if (!SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION))
        rc = sbx_error_set(err, SBX_E_SYS, 0, "tls: cannot require tls 1.3");
    else if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1)
        rc = ssl_fail(err, "load the certificate", cert);
    else if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1)
        rc = ssl_fail(err, "load the key", key);
    else if (SSL_CTX_check_private_key(ctx) != 1)
        rc = ssl_fail(err, "use the key with its certificate", key);
    else if (SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1)
        rc = ssl_fail(err, "load the ca certificate", ca);
    if (rc == 0) {
        STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(ca);
        if (names)
            SSL_CTX_set_client_CA_list(ctx, names);
        /* Only the CA given: no default paths were loaded. The default purpose of a server's
         * check is a TLS client's, so a node certificate (serverAuth only) is refused. */
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
        /* No session tickets: every connection shows (and has checked) its certificate, and a
         * client offering an earlier session gets a full handshake, not an alert. */
        SSL_CTX_set_num_tickets(ctx, 0);
        d->ctx = ctx;
        return 0;
    }
    SSL_CTX_free(ctx);
    return rc;
}

/* The peer's identity: its public key's SHA-256, and OU=harness. */
static int peer_identity(struct node_conn *c, struct sbx_error *err)
{
    X509 *x = SSL_get1_peer_certificate(c->ssl);
    if (!x)
        return sbx_error_set(err, SBX_E_PERM, 0, "tls: the client sent no certificate");
    char ou[32] = "";
    int rc = 0;
    X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_organizationalUnitName, ou, sizeof(ou));
    X509_PUBKEY *pk = X509_get_X509_PUBKEY(x);
    int len = pk ? i2d_X509_PUBKEY(pk, NULL) : -1;
    unsigned char der[4096], *w = der;
    uint8_t h[SBX_SHA256_LEN];
    if (strcmp(ou, "harness") != 0)
        rc = sbx_error_set(err, SBX_E_PERM, 0,
                           "tls: the client's certificate is not a harness's (OU '%s')", ou);
    else if (len <= 0 || len > (int)sizeof(der) || i2d_X509_PUBKEY(pk, &w) != len)
        rc = sbx_error_set(err, SBX_E_PERM, 0, "tls: the client's public key cannot be read");
    else if ((rc = sbx_sha256(der, (size_t)len, h, err)) == 0)
        sbx_hex(h, sizeof(h), c->owner);
    X509_free(x);
    return rc;
}

int node_tls_accept(struct node_conn *c, struct sbx_error *err)
{
    struct timeval tv = {.tv_sec = NODE_HANDSHAKE_S};
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    c->ssl = SSL_new(c->d->ctx);
    if (!c->ssl || SSL_set_fd(c->ssl, c->fd) != 1)
        return sbx_error_set(err, SBX_E_SYS, 0, "tls: cannot set up a connection");
    if (SSL_accept(c->ssl) != 1)
        return sbx_error_set(err, SBX_E_PERM, 0, "tls: the handshake failed");
    tv.tv_sec = NODE_IDLE_S;
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    return peer_identity(c, err);
}

long node_recv(struct node_conn *c, void *p, size_t n, struct sbx_error *err)
{
    int k, e;
    /* A record still arriving, or a signal: wait for the rest (the socket's own timeout). */
    while ((k = SSL_read(c->ssl, p, n > INT32_MAX ? INT32_MAX : (int)n)) <= 0 &&
           ((e = SSL_get_error(c->ssl, k)) == SSL_ERROR_WANT_READ ||
            (e == SSL_ERROR_SYSCALL && errno == EINTR)))
        ;
    if (k > 0)
        return k;
    if (e == SSL_ERROR_ZERO_RETURN)
        return 0;
    if (e == SSL_ERROR_SYSCALL && (errno == EAGAIN || errno == EWOULDBLOCK))
        return sbx_error_set(err, SBX_E_TIMEOUT, 0, "the connection was idle too long");
    return sbx_error_set(err, SBX_E_IO, 0, "the connection was lost (tls error %d)", e);
}

int node_send(struct node_conn *c, const void *p, size_t n, struct sbx_error *err)
{
    const char *b = p;
    while (n > 0) {
        int k = SSL_write(c->ssl, b, n > INT32_MAX ? INT32_MAX : (int)n);
        if (k <= 0)
            return sbx_error_set(err, SBX_E_IO, 0, "the connection was lost while sending");
        b += k, n -= (size_t)k;
    }
    return 0;
}
