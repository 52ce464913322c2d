/* Endpoints: a server's URL, the TLS trust and client certificate, the credential, and the
 * scrubbing of credentials out of every message (src/sandbox/wire/endpoint.h). */
#include <ctype.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>

#include "core/dl-ssl.h"
#include "sandbox/wire/endpoint.h"
#include "sandbox/wire/wire-internal.h"
#include "sbx/b64.h"
#include "sbx/fs.h"
#include "sbx/log.h"
#include "sbx/time.h"

#define SECRET_MAX         ((size_t)64 << 10)
#define DEFAULT_CONNECT_MS 10000
#define DEFAULT_TIMEOUT_MS 60000
#define DEFAULT_RETRIES    3
#define DEFAULT_RETRY_MS   30000
#define REDACTED           "[redacted]"

struct sbx__endpoint {
    int refs; /* atomic */
    char *url, *name;
    char *base;      /* scheme://host[:port] */
    char *host;      /* host[:port] for a request head */
    char *base_path; /* "" or "/BASE" */
    char *unix_path;
    int tls;
    char *ca_file, *ca_pem, *cert_file, *cert_pem, *key_file;
    struct sbx_secret *key_pem;
    char *pin_pubkey;
    unsigned char pin_cert[32];
    int has_pin_cert, insecure;
    enum sbx__auth auth;
    char *auth_header, *username;
    json_t *token_ref; /* a {"file": ...} reference, read again after a 401 */
    pthread_mutex_t lock;
    struct sbx_secret *token; /* under lock */
    enum sbx__http_version http;
    int64_t connect_ms, timeout_ms, retry_wait_ms;
    int retries;
    void (*sleep_ms)(int64_t ms, void *ud);
    void *sleep_ud;
    int warned; /* atomic: the insecure warning was logged */
    int keep_alive;
    pthread_mutex_t share_locks[4], share_make;
    CURLSH *share; /* made on the first request with keep_alive; NULL: none */
    int64_t cert_from,
            cert_until; /* the client certificate's validity (unix seconds), 0: unknown */
};

static char *dup_or_null(const char *s)
{
    return s ? sbx_xstrdup(s) : NULL;
}

/* A secret reference as sbx_provider_secret reads it: {"env": VAR} or {"file": "/PATH"}, at most
 * 64 KiB, a trailing newline dropped (read here too: the remote layer sits below the provider
 * table that offers that function). */
static int read_ref(const json_t *ref, const char *what, struct sbx_secret **out,
                    struct sbx_error *err)
{
    const char *env = json_string_value(json_object_get(ref, "env"));
    const char *file = json_string_value(json_object_get(ref, "file"));
    if (env) {
        const char *v = getenv(env);
        if (!v)
            return sbx_error_set(err, SBX_E_NOTFOUND, 0, "%s: variable '%s' is not set", what, env);
        if (strlen(v) > SECRET_MAX)
            return sbx_error_set(err, SBX_E_TOOBIG, 0, "%s: variable '%s' is over %zu bytes", what,
                                 env, SECRET_MAX);
        *out = sbx_secret_new(what, v, strlen(v));
        return 0;
    }
    if (!file || file[0] != '/')
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "%s wants a reference, {env: VARIABLE} or {file: /PATH}", what);
    struct sbx_buf b;
    sbx_buf_init(&b, SECRET_MAX);
    int rc = sbx_fs_read_path(file, SECRET_MAX, &b, err);
    if (rc < 0) {
        sbx_error_prefix(err, "%s", what);
    } else {
        size_t n = b.len;
        if (n && b.data[n - 1] == '\n')
            n--;
        *out = sbx_secret_new(what, b.data ? b.data : "", n);
    }
    sbx__wipe_buf(&b);
    sbx_buf_release(&b);
    return rc;
}

static int read_src(const struct sbx__secret_src *src, const char *what, struct sbx_secret **out,
                    struct sbx_error *err)
{
    *out = NULL;
    if (src->ref && src->value)
        return sbx_error_set(err, SBX_E_INVAL, 0, "%s: a reference or a value, not both", what);
    if (src->value) {
        *out = sbx_secret_dup(src->value);
        return 0;
    }
    return src->ref ? read_ref(src->ref, what, out, err) : 0;
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = tolower(c);
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* 64 hex digits, a ':' allowed between bytes. */
static int parse_fingerprint(const char *s, unsigned char out[32], struct sbx_error *err)
{
    size_t k = 0;
    for (const char *p = s; *p;) {
        if (*p == ':' && k > 0 && p[1]) {
            p++;
            continue;
        }
        int hi = hexval((unsigned char)p[0]), lo = p[0] ? hexval((unsigned char)p[1]) : -1;
        if (hi < 0 || lo < 0 || k == 32)
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "certificate fingerprint '%.80s' is not 64 hex digits", s);
        out[k++] = (unsigned char)(hi << 4 | lo);
        p += 2;
    }
    if (k != 32)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "certificate fingerprint '%.80s' is not 64 hex digits", s);
    return 0;
}

static int check_pin(const char *pin, struct sbx_error *err)
{
    for (const char *p = pin; *p;) {
        size_t n = strcspn(p, ";");
        if (n < 9 || strncmp(p, "sha256//", 8) != 0)
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "public key pin '%.80s' is not sha256//BASE64 (';' between "
                                 "several)",
                                 pin);
        for (size_t i = 8; i < n; i++)
            if (!isalnum((unsigned char)p[i]) && p[i] != '+' && p[i] != '/' && p[i] != '=')
                return sbx_error_set(err, SBX_E_INVAL, 0,
                                     "public key pin '%.80s' is not sha256//BASE64", pin);
        p += n;
        if (*p == ';')
            p++;
    }
    return 0;
}

/* scheme://[host][:port][/path] into the endpoint's base, host and base path. */
static int parse_url(struct sbx__endpoint *ep, const char *url, int tls_material,
                     struct sbx_error *err)
{
    const char *rest;
    if (strncmp(url, "unix://", 7) == 0) {
        const char *path = url + 7;
        if (path[0] != '/')
            return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' names no absolute socket path", url);
        if (strlen(path) >= sizeof(((struct sockaddr_un *)0)->sun_path))
            return sbx_error_set(err, SBX_E_INVAL, 0, "socket path '%s' is too long", path);
        if (tls_material)
            return sbx_error_set(err, SBX_E_INVAL, 0, "'%s': no TLS over a unix socket", url);
        ep->unix_path = sbx_xstrdup(path);
        ep->base = sbx_xstrdup("http://localhost");
        ep->host = sbx_xstrdup("localhost");
        ep->base_path = sbx_xstrdup("");
        return 0;
    }
    const char *scheme;
    if (strncmp(url, "https://", 8) == 0) {
        scheme = "https";
        rest = url + 8;
        ep->tls = 1;
    } else if (strncmp(url, "http://", 7) == 0) {
        scheme = "http";
        rest = url + 7;
        if (tls_material)
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "'%s' is plain http: TLS options need https://", url);
    } else if (strncmp(url, "tcp://", 6) == 0) {
        rest = url + 6;
        ep->tls = tls_material;
        scheme = tls_material ? "https" : "http";
    } else {
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "'%.200s' is not a URL sbx can use (https://, http://, tcp:// or "
                             "unix://)",
                             url);
    }
    size_t hl = strcspn(rest, "/?#");
    if (memchr(rest, '@', hl))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "a URL must not hold credentials: give them as a token reference "
                             "instead");
    if (hl == 0)
        return sbx_error_set(err, SBX_E_INVAL, 0, "'%.200s' names no host", url);
    for (size_t i = 0; i < hl; i++)
        if ((unsigned char)rest[i] <= ' ' || rest[i] == '\\' || rest[i] == 0x7f)
            return sbx_error_set(err, SBX_E_INVAL, 0, "'%.200s' has a bad host", url);
    if (strncmp(url, "tcp://", 6) == 0 && !memchr(rest, ':', hl))
        return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' names no port (tcp://HOST:PORT)", url);
    const char *path = rest + hl;
    if (*path == '?' || *path == '#')
        return sbx_error_set(err, SBX_E_INVAL, 0, "'%.200s': a base URL takes no query", url);
    size_t pl = strlen(path);
    for (size_t i = 0; i < pl; i++)
        if ((unsigned char)path[i] <= ' ' || path[i] == '?' || path[i] == '#')
            return sbx_error_set(err, SBX_E_INVAL, 0, "'%.200s' has a bad path", url);
    while (pl && path[pl - 1] == '/')
        pl--;
    ep->host = sbx_xstrndup(rest, hl);
    ep->base = sbx_xasprintf("%s://%s", scheme, ep->host);
    ep->base_path = sbx_xstrndup(path, pl);
    return 0;
}

static int check_tls_opts(const struct sbx__endpoint_opts *o, struct sbx_error *err)
{
    if (o->ca_file && o->ca_pem)
        return sbx_error_set(err, SBX_E_INVAL, 0, "a CA file or CA text, not both");
    if (o->cert_file && o->cert_pem)
        return sbx_error_set(err, SBX_E_INVAL, 0, "a client certificate file or text, not both");
    int has_key = o->key_file || o->key_pem.ref || o->key_pem.value;
    if (o->key_file && (o->key_pem.ref || o->key_pem.value))
        return sbx_error_set(err, SBX_E_INVAL, 0, "a client key file or text, not both");
    if (!!(o->cert_file || o->cert_pem) != !!has_key)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "a client certificate needs its key, and a key its certificate");
    if (o->pin_pubkey && o->pin_cert_sha256)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "pin the server's key or its certificate, not both");
    const char *files[] = {o->ca_file, o->cert_file, o->key_file};
    for (size_t i = 0; i < SBX_ARRAY_LEN(files); i++)
        if (files[i] && files[i][0] != '/')
            return sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not an absolute path", files[i]);
    return 0;
}

static int set_auth(struct sbx__endpoint *ep, const struct sbx__endpoint_opts *o,
                    struct sbx_error *err)
{
    ep->auth = o->auth;
    if (o->auth == SBX__AUTH_NONE)
        return (o->token.ref || o->token.value)
                       ? sbx_error_set(err, SBX_E_INVAL, 0, "a token without a way to send it")
                       : 0;
    if (o->auth == SBX__AUTH_HEADER) {
        const char *h = o->auth_header;
        if (!h || !h[0] || h[strcspn(h, " \t\r\n:")] || strlen(h) > 64)
            return sbx_error_set(err, SBX_E_INVAL, 0, "an API key needs a header name");
        ep->auth_header = sbx_xstrdup(h);
    }
    if (o->auth == SBX__AUTH_BASIC) {
        if (!o->username || strchr(o->username, ':') || strpbrk(o->username, "\r\n"))
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "basic authentication needs a user name "
                                 "without ':'");
        ep->username = sbx_xstrdup(o->username);
    }
    int rc = read_src(&o->token, "token", &ep->token, err);
    if (rc < 0)
        return rc;
    if (!ep->token)
        return sbx_error_set(err, SBX_E_INVAL, 0, "authentication without a token");
    const char *v = sbx_secret_reveal(ep->token, NULL);
    if (strpbrk(v, "\r\n") || sbx_secret_len(ep->token) != strlen(v))
        return sbx_error_set(err, SBX_E_INVAL, 0, "the token holds a line break or a NUL");
    if (o->token.ref && json_is_string(json_object_get(o->token.ref, "file")))
        ep->token_ref = json_deep_copy(o->token.ref);
    return 0;
}

static int fill(struct sbx__endpoint *ep, const struct sbx__endpoint_opts *o, struct sbx_error *err)
{
    int rc;
    if (!o->url || !o->url[0])
        return sbx_error_set(err, SBX_E_INVAL, 0, "no URL");
    int tls_material = o->ca_file || o->ca_pem || o->cert_file || o->cert_pem || o->key_file ||
                       o->key_pem.ref || o->key_pem.value || o->pin_pubkey || o->pin_cert_sha256 ||
                       o->insecure;
    if ((rc = check_tls_opts(o, err)) < 0 || (rc = parse_url(ep, o->url, tls_material, err)) < 0)
        return rc;
    if (o->pin_pubkey && (rc = check_pin(o->pin_pubkey, err)) < 0)
        return rc;
    if (o->pin_cert_sha256 && (rc = parse_fingerprint(o->pin_cert_sha256, ep->pin_cert, err)) < 0)
        return rc;
    ep->has_pin_cert = !!o->pin_cert_sha256;
    ep->url = sbx_xstrdup(o->url);
    ep->name = sbx_xstrdup(o->name ? o->name : "the server");
    ep->ca_file = dup_or_null(o->ca_file);
    ep->ca_pem = dup_or_null(o->ca_pem);
    ep->cert_file = dup_or_null(o->cert_file);
    ep->cert_pem = dup_or_null(o->cert_pem);
    ep->key_file = dup_or_null(o->key_file);
    ep->pin_pubkey = dup_or_null(o->pin_pubkey);
    ep->insecure = o->insecure;
    if ((rc = read_src(&o->key_pem, "client key", &ep->key_pem, err)) < 0 ||
        (rc = set_auth(ep, o, err)) < 0)
        return rc;
    ep->http = o->http;
    ep->connect_ms = o->connect_timeout_ms > 0 ? o->connect_timeout_ms : DEFAULT_CONNECT_MS;
    ep->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : DEFAULT_TIMEOUT_MS;
    ep->retries = o->max_retries < 0 ? 0 : o->max_retries ? o->max_retries : DEFAULT_RETRIES;
    ep->retry_wait_ms = o->max_retry_wait_ms > 0 ? o->max_retry_wait_ms : DEFAULT_RETRY_MS;
    ep->sleep_ms = o->sleep_ms;
    ep->sleep_ud = o->sleep_ud;
    return 0;
}

static int64_t asn1_seconds(const ASN1_TIME *t)
{
    struct tm tm;
    memset(&tm, 0, sizeof(tm));
    return t && ASN1_TIME_to_tm(t, &tm) == 1 ? (int64_t)timegm(&tm) : 0;
}

/* The client certificate's validity, to say so when a server refuses an expired one (servers
 * answer "bad certificate" whatever was wrong). Unknown when it cannot be read. */
static void cert_validity(struct sbx__endpoint *ep)
{
    struct sbx_buf b;
    sbx_buf_init(&b, (size_t)1 << 20);
    const char *pem = ep->cert_pem;
    size_t n = pem ? strlen(pem) : 0;
    if (!pem && ep->cert_file && sbx_fs_read_path(ep->cert_file, (size_t)1 << 20, &b, NULL) == 0) {
        pem = b.data;
        n = b.len;
    }
    if (pem && n && sbx__crypto_load(NULL) == 0) {
        BIO *bio = BIO_new_mem_buf(pem, (int)n);
        X509 *x = bio ? PEM_read_bio_X509(bio, NULL, NULL, NULL) : NULL;
        if (x) {
            ep->cert_from = asn1_seconds(X509_get0_notBefore(x));
            ep->cert_until = asn1_seconds(X509_get0_notAfter(x));
            X509_free(x);
        }
        if (bio)
            BIO_free(bio);
    }
    sbx_buf_release(&b);
}

void sbx__endpoint_client_cert(const struct sbx__endpoint *ep, int *has, int64_t *from,
                               int64_t *until)
{
    *has = ep->cert_file || ep->cert_pem;
    *from = ep->cert_from;
    *until = ep->cert_until;
}

int sbx__endpoint_new(const struct sbx__endpoint_opts *o, struct sbx__endpoint **out,
                      struct sbx_error *err)
{
    int rc = sbx__curl_load(err);
    if (rc < 0)
        return rc;
    struct sbx__endpoint *ep = sbx_xcalloc(1, sizeof(*ep));
    ep->refs = 1;
    pthread_mutex_init(&ep->lock, NULL);
    ep->keep_alive = o->keep_alive;
    pthread_mutex_init(&ep->share_make, NULL);
    for (size_t i = 0; i < 4; i++)
        pthread_mutex_init(&ep->share_locks[i], NULL);
    rc = fill(ep, o, err);
    if (rc < 0) {
        sbx__endpoint_free(ep);
        return rc;
    }
    cert_validity(ep);
    *out = ep;
    return 0;
}

struct sbx__endpoint *sbx__endpoint_ref(struct sbx__endpoint *ep)
{
    __atomic_add_fetch(&ep->refs, 1, __ATOMIC_RELAXED);
    return ep;
}

void sbx__endpoint_free(struct sbx__endpoint *ep)
{
    if (!ep || __atomic_sub_fetch(&ep->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    free(ep->url);
    free(ep->name);
    free(ep->base);
    free(ep->host);
    free(ep->base_path);
    free(ep->unix_path);
    free(ep->ca_file);
    free(ep->ca_pem);
    free(ep->cert_file);
    free(ep->cert_pem);
    free(ep->key_file);
    sbx_secret_free(ep->key_pem);
    free(ep->pin_pubkey);
    free(ep->auth_header);
    free(ep->username);
    json_decref(ep->token_ref);
    sbx_secret_free(ep->token);
    if (ep->share)
        curl_share_cleanup(ep->share);
    for (size_t i = 0; i < 4; i++)
        pthread_mutex_destroy(&ep->share_locks[i]);
    pthread_mutex_destroy(&ep->share_make);
    pthread_mutex_destroy(&ep->lock);
    free(ep);
}

const char *sbx__endpoint_url(const struct sbx__endpoint *ep)
{
    return ep->url;
}

const char *sbx__endpoint_name(const struct sbx__endpoint *ep)
{
    return ep->name;
}

int sbx__endpoint_tls(const struct sbx__endpoint *ep)
{
    return ep->tls;
}

const char *sbx__endpoint_host(const struct sbx__endpoint *ep)
{
    return ep->host;
}

const char *sbx__endpoint_base_path(const struct sbx__endpoint *ep)
{
    return ep->base_path;
}

const char *sbx__endpoint_unix_path(const struct sbx__endpoint *ep)
{
    return ep->unix_path;
}

int64_t sbx__endpoint_timeout_ms(const struct sbx__endpoint *ep)
{
    return ep->timeout_ms;
}

int64_t sbx__endpoint_connect_timeout_ms(const struct sbx__endpoint *ep)
{
    return ep->connect_ms;
}

int sbx__endpoint_retries(const struct sbx__endpoint *ep)
{
    return ep->retries;
}

int64_t sbx__endpoint_retry_wait_ms(const struct sbx__endpoint *ep)
{
    return ep->retry_wait_ms;
}

int sbx__endpoint_cert_pinned(const struct sbx__endpoint *ep)
{
    return ep->has_pin_cert;
}

void sbx__endpoint_sleep(const struct sbx__endpoint *ep, int64_t ms)
{
    if (ep->sleep_ms)
        ep->sleep_ms(ms, ep->sleep_ud);
    else
        sbx_sleep_ms(ms);
}

/* ---- TLS ---- */

/* The pinned certificate's check, in OpenSSL's handshake: the server's leaf certificate must
 * have the pinned SHA-256 fingerprint; nothing else of the chain counts. */
static int verify_pinned_cert(X509_STORE_CTX *ctx, void *arg)
{
    const struct sbx__endpoint *ep = arg;
    X509 *leaf = X509_STORE_CTX_get0_cert(ctx);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    if (!leaf || X509_digest(leaf, EVP_sha256(), md, &n) != 1 || n != 32)
        return 0;
    return memcmp(md, ep->pin_cert, 32) == 0;
}

static CURLcode ssl_ctx_pin(CURL *c, void *ssl_ctx, void *arg)
{
    (void)c;
    SSL_CTX_set_verify(ssl_ctx, SSL_VERIFY_PEER, NULL);
    SSL_CTX_set_cert_verify_callback(ssl_ctx, verify_pinned_cert, arg);
    return CURLE_OK;
}

static void set_blob(CURL *c, CURLoption opt, const char *data, size_t n)
{
    struct curl_blob b = {.data = (void *)data, .len = n, .flags = CURL_BLOB_COPY};
    curl_easy_setopt(c, opt, &b);
}

static int apply_tls(struct sbx__endpoint *ep, CURL *c, struct sbx_error *err)
{
    if (ep->ca_file)
        curl_easy_setopt(c, CURLOPT_CAINFO, ep->ca_file);
    if (ep->ca_pem)
        set_blob(c, CURLOPT_CAINFO_BLOB, ep->ca_pem, strlen(ep->ca_pem));
    if (ep->ca_file || ep->ca_pem)
        curl_easy_setopt(c, CURLOPT_CAPATH, NULL);
    if (ep->cert_file || ep->cert_pem) {
        curl_easy_setopt(c, CURLOPT_SSLCERTTYPE, "PEM");
        curl_easy_setopt(c, CURLOPT_SSLKEYTYPE, "PEM");
    }
    if (ep->cert_file)
        curl_easy_setopt(c, CURLOPT_SSLCERT, ep->cert_file);
    if (ep->cert_pem)
        set_blob(c, CURLOPT_SSLCERT_BLOB, ep->cert_pem, strlen(ep->cert_pem));
    if (ep->key_file)
        curl_easy_setopt(c, CURLOPT_SSLKEY, ep->key_file);
    if (ep->key_pem) {
        size_t n;
        const char *k = sbx_secret_reveal(ep->key_pem, &n);
        set_blob(c, CURLOPT_SSLKEY_BLOB, k, n);
    }
    int no_chain =
            ep->insecure || ep->has_pin_cert || (ep->pin_pubkey && !ep->ca_file && !ep->ca_pem);
    if (no_chain) {
        curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    if (ep->pin_pubkey)
        curl_easy_setopt(c, CURLOPT_PINNEDPUBLICKEY, ep->pin_pubkey);
    if (ep->has_pin_cert) {
        int rc = sbx__ssl_load(err);
        if (rc < 0)
            return rc;
        curl_easy_setopt(c, CURLOPT_SSL_CTX_FUNCTION, ssl_ctx_pin);
        curl_easy_setopt(c, CURLOPT_SSL_CTX_DATA, ep);
    }
    if (ep->insecure && !__atomic_exchange_n(&ep->warned, 1, __ATOMIC_RELAXED))
        sbx_log(SBX_LOG_WARN, "%s at '%s': TLS is not verified (insecure)", ep->name, ep->url);
    return 0;
}

static void share_lock(CURL *h, curl_lock_data data, curl_lock_access a, void *ud)
{
    (void)h;
    (void)a;
    pthread_mutex_lock(&((struct sbx__endpoint *)ud)->share_locks[(size_t)data % 4]);
}

static void share_unlock(CURL *h, curl_lock_data data, void *ud)
{
    (void)h;
    pthread_mutex_unlock(&((struct sbx__endpoint *)ud)->share_locks[(size_t)data % 4]);
}

/* A kept connection stays open while the process starts programs: none may inherit it. */
static curl_socket_t open_socket(void *ud, curlsocktype purpose, struct curl_sockaddr *a)
{
    (void)ud;
    (void)purpose;
    return socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
}

void sbx__endpoint_share(struct sbx__endpoint *ep, CURL *c)
{
    if (!ep->keep_alive)
        return;
    pthread_mutex_lock(&ep->share_make);
    if (!ep->share && (ep->share = curl_share_init()) &&
        /* Without the share every request opens its own connection: slower, not wrong. */
        (curl_share_setopt(ep->share, CURLSHOPT_LOCKFUNC, share_lock) != CURLSHE_OK ||
         curl_share_setopt(ep->share, CURLSHOPT_UNLOCKFUNC, share_unlock) != CURLSHE_OK ||
         curl_share_setopt(ep->share, CURLSHOPT_USERDATA, ep) != CURLSHE_OK ||
         curl_share_setopt(ep->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT) != CURLSHE_OK)) {
        curl_share_cleanup(ep->share);
        ep->share = NULL;
        ep->keep_alive = 0;
    }
    CURLSH *sh = ep->share;
    pthread_mutex_unlock(&ep->share_make);
    if (sh) {
        curl_easy_setopt(c, CURLOPT_SHARE, sh);
        curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, open_socket);
    }
}

int sbx__endpoint_apply(struct sbx__endpoint *ep, CURL *c, const char *path, int http_1_1,
                        struct curl_slist **headers, struct sbx_error *err)
{
    char *url = sbx_xasprintf("%s%s%s", ep->base, ep->base_path, path ? path : "");
    curl_easy_setopt(c, CURLOPT_URL, url);
    free(url);
    if (ep->unix_path)
        curl_easy_setopt(c, CURLOPT_UNIX_SOCKET_PATH, ep->unix_path);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)ep->connect_ms);
    long v = CURL_HTTP_VERSION_1_1;
    if (!http_1_1 && ep->http == SBX__HTTP_DEFAULT)
        v = ep->tls ? CURL_HTTP_VERSION_2TLS : CURL_HTTP_VERSION_1_1;
    else if (!http_1_1 && ep->http == SBX__HTTP_2)
        v = ep->tls ? CURL_HTTP_VERSION_2_0 : CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE;
    curl_easy_setopt(c, CURLOPT_HTTP_VERSION, v);
    if (ep->tls) {
        int rc = apply_tls(ep, c, err);
        if (rc < 0)
            return rc;
    }
    struct sbx_buf line;
    sbx_buf_init(&line, SBX_BUF_NOLIMIT);
    int rc = sbx__endpoint_auth_line(ep, &line, err);
    if (rc == 0 && line.len) {
        sbx_buf_setlen(&line, line.len - 2); /* curl wants the line without its CRLF */
        *headers = curl_slist_append(*headers, line.data);
    }
    sbx__wipe_buf(&line);
    sbx_buf_release(&line);
    return rc;
}

void sbx__endpoint_headers_free(struct curl_slist *headers)
{
    for (struct curl_slist *h = headers; h; h = h->next)
        if (h->data)
            memset(h->data, 0, strlen(h->data));
    curl_slist_free_all(headers);
}

int sbx__endpoint_auth_line(struct sbx__endpoint *ep, struct sbx_buf *out, struct sbx_error *err)
{
    if (ep->auth == SBX__AUTH_NONE)
        return 0;
    int rc = 0;
    pthread_mutex_lock(&ep->lock);
    size_t n;
    const char *t = sbx_secret_reveal(ep->token, &n);
    if (ep->auth == SBX__AUTH_BEARER) {
        rc = sbx_buf_addf(out, err, "Authorization: Bearer %s\r\n", t);
    } else if (ep->auth == SBX__AUTH_HEADER) {
        rc = sbx_buf_addf(out, err, "%s: %s\r\n", ep->auth_header, t);
    } else {
        struct sbx_buf plain, enc;
        sbx_buf_init(&plain, SBX_BUF_NOLIMIT);
        sbx_buf_init(&enc, SBX_BUF_NOLIMIT);
        if ((rc = sbx_buf_addf(&plain, err, "%s:%s", ep->username, t)) == 0 &&
            (rc = sbx_b64_encode(plain.data, plain.len, &enc, err)) == 0)
            rc = sbx_buf_addf(out, err, "Authorization: Basic %s\r\n", enc.data);
        sbx__wipe_buf(&plain);
        sbx__wipe_buf(&enc);
        sbx_buf_release(&plain);
        sbx_buf_release(&enc);
    }
    pthread_mutex_unlock(&ep->lock);
    return rc;
}

int sbx__endpoint_reload_token(struct sbx__endpoint *ep)
{
    if (!ep->token_ref)
        return 0;
    struct sbx_secret *fresh = NULL;
    if (read_ref(ep->token_ref, "token", &fresh, NULL) < 0)
        return 0;
    pthread_mutex_lock(&ep->lock);
    size_t a, b;
    const char *va = sbx_secret_reveal(ep->token, &a), *vb = sbx_secret_reveal(fresh, &b);
    int changed = a != b || memcmp(va, vb, a) != 0;
    if (changed && !strpbrk(vb, "\r\n") && strlen(vb) == b) {
        struct sbx_secret *old = ep->token;
        ep->token = fresh;
        fresh = old;
    } else {
        changed = 0;
    }
    pthread_mutex_unlock(&ep->lock);
    sbx_secret_free(fresh);
    return changed;
}

/* ---- scrubbing ---- */

/* Replace each occurrence of needle[0..nl) in text (NUL-terminated, in a buffer of cap bytes;
 * what no longer fits is cut). */
static void replace_all(char *text, size_t cap, const char *needle, size_t nl)
{
    if (nl == 0 || !memmem(text, strlen(text), needle, nl))
        return;
    struct sbx_buf b;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    for (const char *p = text; *p;) {
        const char *hit = memmem(p, strlen(p), needle, nl);
        size_t keep = hit ? (size_t)(hit - p) : strlen(p);
        int rc = sbx_buf_add(&b, p, keep, NULL);
        if (hit)
            rc = sbx_buf_adds(&b, REDACTED, NULL);
        (void)rc; /* no limit: cannot fail */
        if (!hit)
            break;
        p = hit + nl;
    }
    snprintf(text, cap, "%s", b.data ? b.data : "");
    sbx_buf_release(&b);
}

static void scrub(const struct sbx__endpoint *ep, char *text, size_t cap)
{
    if (!ep || !text || !ep->token)
        return;
    struct sbx__endpoint *m = (struct sbx__endpoint *)ep;
    pthread_mutex_lock(&m->lock);
    size_t n;
    const char *t = sbx_secret_reveal(ep->token, &n);
    replace_all(text, cap, t, n);
    if (ep->auth == SBX__AUTH_BASIC) {
        struct sbx_buf plain, enc;
        sbx_buf_init(&plain, SBX_BUF_NOLIMIT);
        sbx_buf_init(&enc, SBX_BUF_NOLIMIT);
        if (sbx_buf_addf(&plain, NULL, "%s:%s", ep->username, t) == 0 &&
            sbx_b64_encode(plain.data, plain.len, &enc, NULL) == 0)
            replace_all(text, cap, enc.data, enc.len);
        sbx__wipe_buf(&plain);
        sbx__wipe_buf(&enc);
        sbx_buf_release(&plain);
        sbx_buf_release(&enc);
    }
    pthread_mutex_unlock(&m->lock);
}

void sbx__endpoint_scrub(const struct sbx__endpoint *ep, struct sbx_error *err)
{
    if (err)
        scrub(ep, err->msg, sizeof(err->msg));
}

/* In place: each occurrence becomes asterisks of its length (the text cannot grow). */
static void mask_all(char *text, const char *needle, size_t nl)
{
    char *p = text;
    while (nl && (p = memmem(p, strlen(p), needle, nl)) != NULL) {
        memset(p, '*', nl);
        p += nl;
    }
}

void sbx__endpoint_scrub_text(const struct sbx__endpoint *ep, char *text)
{
    if (!ep || !text || !ep->token)
        return;
    struct sbx__endpoint *m = (struct sbx__endpoint *)ep;
    pthread_mutex_lock(&m->lock);
    size_t n;
    const char *t = sbx_secret_reveal(ep->token, &n);
    mask_all(text, t, n);
    if (ep->auth == SBX__AUTH_BASIC) {
        struct sbx_buf plain, enc;
        sbx_buf_init(&plain, SBX_BUF_NOLIMIT);
        sbx_buf_init(&enc, SBX_BUF_NOLIMIT);
        if (sbx_buf_addf(&plain, NULL, "%s:%s", ep->username, t) == 0 &&
            sbx_b64_encode(plain.data, plain.len, &enc, NULL) == 0)
            mask_all(text, enc.data, enc.len);
        sbx__wipe_buf(&plain);
        sbx__wipe_buf(&enc);
        sbx_buf_release(&plain);
        sbx_buf_release(&enc);
    }
    pthread_mutex_unlock(&m->lock);
}

void sbx__wipe_buf(struct sbx_buf *b)
{
    if (b->data && b->cap)
        memset(b->data, 0, b->cap);
    sbx_buf_reset(b);
}

/* ---- certificates ---- */

int sbx__tls_cert_pins(const char *pem, size_t n, char pin_pubkey[SBX__TLS_PIN_LEN + 1],
                       char fingerprint[65], struct sbx_error *err)
{
    int rc = sbx__crypto_load(err);
    if (rc < 0)
        return rc;
    BIO *bio = BIO_new_mem_buf(pem, (int)(n > INT32_MAX ? INT32_MAX : n));
    X509 *x = bio ? PEM_read_bio_X509(bio, NULL, NULL, NULL) : NULL;
    unsigned char *der = NULL;
    if (!x) {
        rc = sbx_error_set(err, SBX_E_PARSE, 0, "no certificate in the PEM text");
        goto out;
    }
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    if (fingerprint) {
        if (X509_digest(x, EVP_sha256(), md, &mdlen) != 1 || mdlen != 32) {
            rc = sbx_error_set(err, SBX_E_PARSE, 0, "cannot hash the certificate");
            goto out;
        }
        for (unsigned i = 0; i < 32; i++)
            snprintf(fingerprint + 2 * i, 3, "%02x", md[i]);
    }
    if (pin_pubkey) {
        X509_PUBKEY *pk = X509_get_X509_PUBKEY(x);
        int len = pk ? i2d_X509_PUBKEY(pk, NULL) : -1;
        if (len <= 0) {
            rc = sbx_error_set(err, SBX_E_PARSE, 0, "the certificate has no public key");
            goto out;
        }
        der = sbx_xmalloc((size_t)len);
        unsigned char *w = der;
        EVP_MD_CTX *ctx = EVP_MD_CTX_new();
        if (i2d_X509_PUBKEY(pk, &w) != len || !ctx ||
            EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1 ||
            EVP_DigestUpdate(ctx, der, (size_t)len) != 1 ||
            EVP_DigestFinal_ex(ctx, md, &mdlen) != 1 || mdlen != 32)
            rc = sbx_error_set(err, SBX_E_PARSE, 0, "cannot hash the public key");
        EVP_MD_CTX_free(ctx);
        if (rc < 0)
            goto out;
        struct sbx_buf b;
        sbx_buf_init(&b, SBX_BUF_NOLIMIT);
        if ((rc = sbx_b64_encode(md, 32, &b, err)) == 0)
            snprintf(pin_pubkey, SBX__TLS_PIN_LEN + 1, "sha256//%s", b.data);
        sbx_buf_release(&b);
    }
out:
    free(der);
    if (x)
        X509_free(x);
    if (bio)
        BIO_free(bio);
    return rc;
}
