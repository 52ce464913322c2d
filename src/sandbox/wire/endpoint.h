/* sbx internal: where a server is and how sbx proves who it is to it (docs/internals/remote.md).
 *
 * An endpoint is a base URL plus everything a connection to it needs: the CAs that vouch for
 * the server, a pinned server key or certificate, the client certificate and key of mutual TLS,
 * the credential sent with every request (a bearer token, an API key header, basic auth), the
 * HTTP version and the timeouts. Providers build one from their options (kubeconfig, DOCKER_HOST
 * and DOCKER_CERT_PATH, an LXD remote, an API key) and hand it to every request, connection and
 * transfer of the remote layer (http.h, conn.h, loop.h).
 *
 * Credentials: a token, password or private key is held as a struct sbx_secret, read from a
 * reference ({"env": "VAR"} or {"file": "/PATH"}, as sbx_provider_secret reads it) or copied
 * from a value the provider read itself; it is never put into a URL (a URL with user:password@
 * is refused), a message, a log line or a state. Every error the remote layer returns passes
 * through sbx__endpoint_scrub, which replaces any occurrence of a credential (as given and as
 * sent: the base64 of basic auth) with "[redacted]", so a server that echoes the token in its
 * error body cannot make sbx print it.
 *
 * An endpoint is immutable once made (except a token read from a file, read again after a 401
 * for rotated service-account tokens) and reference-counted: the event loop keeps it while a
 * command that uses it runs, after the client that made it is gone. Thread-safe. */
#ifndef SBX_SANDBOX_WIRE_ENDPOINT_H
#define SBX_SANDBOX_WIRE_ENDPOINT_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "core/dl-curl.h"
#include "sbx/buf.h"
#include "sbx/error.h"
#include "sbx/secret.h"

enum sbx__auth {
    SBX__AUTH_NONE = 0,
    SBX__AUTH_BEARER, /* "Authorization: Bearer TOKEN" */
    SBX__AUTH_HEADER, /* "NAME: TOKEN" (an API key header such as X-API-Key) */
    SBX__AUTH_BASIC,  /* "Authorization: Basic base64(USERNAME:TOKEN)" */
};

enum sbx__http_version {
    SBX__HTTP_DEFAULT = 0, /* HTTP/2 where TLS negotiates it (ALPN), else HTTP/1.1 */
    SBX__HTTP_1_1,         /* HTTP/1.1 only */
    SBX__HTTP_2,           /* HTTP/2: over TLS by ALPN, over cleartext with prior knowledge */
};

/* A secret: read from ref when the endpoint is made, or copied from value; both NULL: none. */
struct sbx__secret_src {
    const json_t *ref;              /* {"env": "VAR"} or {"file": "/PATH"} */
    const struct sbx_secret *value; /* a value the caller holds (copied) */
};

/* All strings are borrowed for the call (copied). All zero but url is a valid default. */
struct sbx__endpoint_opts {
    /* https://HOST[:PORT][/BASE], http://HOST[:PORT][/BASE], unix:///PATH (HTTP over a unix
     * socket), tcp://HOST:PORT (https when any TLS material below is given, else http). No
     * credentials in it (SBX_E_INVAL). Required. */
    const char *url;
    /* What messages call the server: "the Docker engine", "the Kubernetes API server"; NULL:
     * "the server". Messages say "<name> at '<url>'". */
    const char *name;

    /* Trust. CAs instead of the system's: a PEM file or PEM text (either, not both). */
    const char *ca_file;
    const char *ca_pem;
    /* The server's public key pinned: "sha256//BASE64" of its SubjectPublicKeyInfo, several
     * separated by ';' (curl's CURLOPT_PINNEDPUBLICKEY). Checked during the handshake, before
     * anything is sent; with a pin and no CA the chain is not checked (a self-signed server). */
    const char *pin_pubkey;
    /* The server's certificate pinned: its SHA-256 fingerprint (64 hex digits, ':' between
     * bytes allowed), checked during the handshake; the chain and name are then not checked.
     * (sbx__tls_pubkey_pin turns a certificate PEM into a pin_pubkey instead.) */
    const char *pin_cert_sha256;
    /* No verification of the server at all. Only when the user named it ("insecure: true"); a
     * warning is logged once per endpoint. */
    int insecure;
    /* Blocking requests (http.h) keep their connections open between requests and reuse
     * them (a curl share of the endpoint's connections, sockets close-on-exec). TLS sessions
     * are not shared: a new connection makes a full handshake. */
    int keep_alive;

    /* Mutual TLS: the client certificate (PEM file or text) and its key (file, or PEM text as
     * a secret). Both or neither. */
    const char *cert_file;
    const char *cert_pem;
    const char *key_file;
    struct sbx__secret_src key_pem;

    /* The credential sent with every request and every upgrade. */
    enum sbx__auth auth;
    const char *auth_header;      /* SBX__AUTH_HEADER: the header's name ("X-API-Key") */
    const char *username;         /* SBX__AUTH_BASIC */
    struct sbx__secret_src token; /* the token, API key or password */

    enum sbx__http_version http; /* requests; upgrades and connections are always HTTP/1.1 */
    int64_t connect_timeout_ms;  /* 0: 10 s */
    int64_t timeout_ms;          /* one request, retries not counted; 0: 60 s */
    int max_retries;             /* on 429 and 503: 0: 3; -1: none */
    int64_t max_retry_wait_ms;   /* a longer Retry-After is cut to this; 0: 30 s */
    /* Tests only: how retries wait (NULL: sleep). */
    void (*sleep_ms)(int64_t ms, void *ud);
    void *sleep_ud;
};

struct sbx__endpoint; /* opaque */

/* Check o and read its secrets into a new endpoint. Errors: SBX_E_INVAL (a URL sbx cannot use,
 * credentials in it, a certificate without its key, both a file and PEM text, a malformed
 * pin), SBX_E_NOTFOUND / SBX_E_TOOBIG (a secret reference: unset variable, missing file),
 * SBX_E_UNSUPPORTED (libcurl missing). *out: caller owns (sbx__endpoint_free). */
int sbx__endpoint_new(const struct sbx__endpoint_opts *o, struct sbx__endpoint **out,
                      struct sbx_error *err);
/* Another reference to ep (returned). */
struct sbx__endpoint *sbx__endpoint_ref(struct sbx__endpoint *ep);
/* Drop one reference; the last wipes the secrets. Accepts NULL. */
void sbx__endpoint_free(struct sbx__endpoint *ep);

/* The base URL as given, never holding a credential: for messages and session states. */
const char *sbx__endpoint_url(const struct sbx__endpoint *ep);
/* The name messages use ("the server" by default). */
const char *sbx__endpoint_name(const struct sbx__endpoint *ep);
/* Whether connections use TLS. */
int sbx__endpoint_tls(const struct sbx__endpoint *ep);
/* The "Host" of a request line (host[:port]; "localhost" over a unix socket). */
const char *sbx__endpoint_host(const struct sbx__endpoint *ep);
/* The base path ("" or "/BASE", no trailing '/') prefixed to every request path. */
const char *sbx__endpoint_base_path(const struct sbx__endpoint *ep);
/* The unix socket path, or NULL. */
const char *sbx__endpoint_unix_path(const struct sbx__endpoint *ep);
/* The timeouts, after defaults. */
int64_t sbx__endpoint_timeout_ms(const struct sbx__endpoint *ep);
int64_t sbx__endpoint_connect_timeout_ms(const struct sbx__endpoint *ep);

/* The retry policy, after defaults: how many retries, the longest wait, and the wait itself
 * (the test's sleep_ms when given). */
int sbx__endpoint_retries(const struct sbx__endpoint *ep);
int64_t sbx__endpoint_retry_wait_ms(const struct sbx__endpoint *ep);
void sbx__endpoint_sleep(const struct sbx__endpoint *ep, int64_t ms);

/* With keep_alive: c shares the endpoint's connections; else nothing. */
void sbx__endpoint_share(struct sbx__endpoint *ep, CURL *c);

/* Set up curl easy handle c for a request of path (the base path is prefixed) to ep: URL,
 * unix socket, TLS trust, pins and client certificate, HTTP version (http_1_1 forces 1.1),
 * connect timeout, no signals, http/https only; the credential is appended to *headers as a
 * header line (free that list with sbx__endpoint_headers_free, which wipes it). */
int sbx__endpoint_apply(struct sbx__endpoint *ep, CURL *c, const char *path, int http_1_1,
                        struct curl_slist **headers, struct sbx_error *err);
/* Free a header list that may hold a credential, wiping each line first. */
void sbx__endpoint_headers_free(struct curl_slist *headers);
/* Append the credential's header line ("Authorization: Bearer ...\r\n"; nothing without one)
 * to out, for a request head sbx writes itself (conn.h). Wipe out after use (sbx__wipe_buf). */
int sbx__endpoint_auth_line(struct sbx__endpoint *ep, struct sbx_buf *out, struct sbx_error *err);
/* After a 401: read a token that came from a file reference again; 1 when it changed (the
 * request is worth retrying once), else 0. */
int sbx__endpoint_reload_token(struct sbx__endpoint *ep);

/* Replace every occurrence of one of ep's credentials in err's message with "[redacted]".
 * Every error the remote layer returns has been through this; a provider that builds an error
 * from server text itself calls it too. ep or err may be NULL. */
void sbx__endpoint_scrub(const struct sbx__endpoint *ep, struct sbx_error *err);
/* The same on any text (a log line about to be written), in place (NUL-terminated): each
 * occurrence becomes asterisks of its length, since the text cannot grow. */
void sbx__endpoint_scrub_text(const struct sbx__endpoint *ep, char *text);

/* Zero a buffer's bytes (it held a credential) and reset it. */
void sbx__wipe_buf(struct sbx_buf *b);

/* The pin_pubkey ("sha256//BASE64") of a certificate in PEM (the first one), and its SHA-256
 * fingerprint (64 lowercase hex digits), for providers that keep a server's certificate (LXD
 * remotes). Either out may be NULL. SBX_E_PARSE for PEM without a certificate. */
#define SBX__TLS_PIN_LEN 52 /* "sha256//" + 44 base64 characters */
int sbx__tls_cert_pins(const char *pem, size_t n, char pin_pubkey[SBX__TLS_PIN_LEN + 1],
                       char fingerprint[65], struct sbx_error *err);

#endif
