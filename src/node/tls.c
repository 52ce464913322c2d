/* The daemon's TLS: mutual TLS 1.3, the deployment's CA only, a harness certificate required
 * (src/node/daemon.h). */
#include <errno.h>
#include <poll.h>
#include <ctype.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "node/daemon.h"
#include "sbx/fs.h"

static int ssl_fail(struct sbx_error *err, const char *what, const char *path)
{
    return sbx_error_set(err, SBX_E_INVAL, 0, "tls: cannot %s '%s'", what, path);
}

#define REVOKED_MAX      100000             /* fingerprints in --revoked FILE */
#define REVOKED_FILE_MAX ((size_t)16 << 20) /* its size */

/* One line of the revoked file into hex (64 lowercase digits): a fingerprint as `openssl x509
 * -fingerprint -sha256` prints it (after an optional "...=", pairs joined by ':') or as bare
 * hex. 1 for a fingerprint, 0 for a blank or '#' line, -1 for anything else. */
static int fingerprint_of(const char *p, size_t n, char hex[SBX_SHA256_HEX_LEN + 1])
{
    while (n && isspace((unsigned char)p[n - 1]))
        n--;
    while (n && isspace((unsigned char)*p))
        p++, n--;
    if (n == 0 || *p == '#')
        return 0;
    const char *eq = memchr(p, '=', n);
    if (eq)
        n -= (size_t)(eq + 1 - p), p = eq + 1;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] == ':')
            continue;
        if (!isxdigit((unsigned char)p[i]) || k == SBX_SHA256_HEX_LEN)
            return -1;
        hex[k++] = (char)tolower((unsigned char)p[i]);
    }
    hex[k] = '\0';
    return k == SBX_SHA256_HEX_LEN ? 1 : -1;
}

/* Parse the file's text into a new list; the old one stays on failure. */
static int revoked_parse(struct node_daemon *d, const char *text, size_t len,
                         char (**out)[SBX_SHA256_HEX_LEN + 1], size_t *n_out, struct sbx_error *err)
{
    char(*list)[SBX_SHA256_HEX_LEN + 1] = NULL;
    size_t n = 0, line = 0;
    for (const char *p = text, *end = text + len; p < end; line++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t k = nl ? (size_t)(nl - p) : (size_t)(end - p);
        char hex[SBX_SHA256_HEX_LEN + 1];
        int r = fingerprint_of(p, k, hex);
        if (r < 0 || (r > 0 && n == REVOKED_MAX)) {
            free(list);
            if (r < 0)
                return sbx_error_set(err, SBX_E_INVAL, 0,
                                     "--revoked '%s': line %zu is not a SHA-256 fingerprint",
                                     d->revoked_path, line + 1);
            return sbx_error_set(err, SBX_E_TOOBIG, 0, "--revoked '%s': more than %d fingerprints",
                                 d->revoked_path, REVOKED_MAX);
        }
        if (r > 0) {
            list = sbx_xrealloc(list, (n + 1) * sizeof(*list));
            memcpy(list[n++], hex, sizeof(hex));
        }
        p += k + (nl ? 1 : 0);
    }
    *out = list;
    *n_out = n;
    return 0;
}

int node_tls_revoked_load(struct node_daemon *d, struct sbx_error *err)
{
    if (!d->revoked_path)
        return 0;
    struct stat st;
    int fd = open(d->revoked_path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0 || fstat(fd, &st) < 0) {
        int rc = sbx_error_errno(err, errno, "--revoked '%s'", d->revoked_path);
        sbx_fd_close(&fd);
        return rc;
    }
    pthread_mutex_lock(&d->mu);
    int same = d->revoked_st.st_ino == st.st_ino && d->revoked_st.st_dev == st.st_dev &&
               d->revoked_st.st_size == st.st_size &&
               d->revoked_st.st_mtim.tv_sec == st.st_mtim.tv_sec &&
               d->revoked_st.st_mtim.tv_nsec == st.st_mtim.tv_nsec;
    pthread_mutex_unlock(&d->mu);
    struct sbx_buf b;
    sbx_buf_init(&b, REVOKED_FILE_MAX);
    char(*list)[SBX_SHA256_HEX_LEN + 1] = NULL;
    size_t n = 0;
    int rc = same ? 0 : sbx_fd_read_all(fd, REVOKED_FILE_MAX, &b, err);
    sbx_fd_close(&fd);
    if (!same && rc == 0 &&
        (rc = revoked_parse(d, b.data ? b.data : "", b.len, &list, &n, err)) == 0) {
        pthread_mutex_lock(&d->mu);
        free(d->revoked);
        d->revoked = list;
        d->n_revoked = n;
        d->revoked_st = st;
        pthread_mutex_unlock(&d->mu);
    }
    sbx_buf_release(&b);
    return rc;
}

/* The chain's own check, then the leaf against --revoked (read again when the file changed;
 * a file that cannot be read now keeps the last list, and says so in the log). */
static int verify_cert(X509_STORE_CTX *x, void *arg)
{
    struct node_daemon *d = arg;
    if (X509_verify_cert(x) != 1)
        return 0;
    if (!d->revoked_path)
        return 1;
    struct sbx_error err = SBX_ERROR_INIT;
    if (node_tls_revoked_load(d, &err) < 0)
        fprintf(stderr, "sbx-node: %s (the last list read stays)\n", err.msg);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned mdn = 0;
    X509 *leaf = X509_STORE_CTX_get0_cert(x);
    if (!leaf || X509_digest(leaf, EVP_sha256(), md, &mdn) != 1 || mdn != SBX_SHA256_LEN)
        return 0;
    char hex[SBX_SHA256_HEX_LEN + 1];
    sbx_hex(md, mdn, hex);
    int revoked = 0;
    pthread_mutex_lock(&d->mu);
    for (size_t i = 0; i < d->n_revoked && !revoked; i++)
        revoked = memcmp(d->revoked[i], hex, SBX_SHA256_HEX_LEN) == 0;
    pthread_mutex_unlock(&d->mu);
    if (revoked) {
        X509_STORE_CTX_set_error(x, X509_V_ERR_CERT_REVOKED);
        return 0;
    }
    return 1;
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
        SSL_CTX_set_cert_verify_callback(ctx, verify_cert, d);
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
