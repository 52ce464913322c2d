/* Private: the sbx-node daemon (docs/internals/node.md). One thread per connection, at most
 * max_conns of them; each connection is mutual TLS 1.3 with a harness certificate of the
 * deployment's CA, then HTTP/1.1 requests (REST) until one is upgraded to an exec WebSocket. */
#ifndef SBX_NODE_DAEMON_H
#define SBX_NODE_DAEMON_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <sys/stat.h>

#include <jansson.h>

#include "core/dl-ssl.h"
#include "sbx/buf.h"
#include "sbx/error.h"
#include "sbx/hash.h"

#define NODE_HEAD_MAX    16384     /* a request head */
#define NODE_FIELDS_MAX  100       /* its header fields */
#define NODE_BODY_MAX    (1 << 20) /* a JSON body */
#define NODE_IDLE_S      60        /* a keep-alive connection with no request */
#define NODE_HANDSHAKE_S 10
#define NODE_TOKEN_BYTES 32
#define NODE_TOKEN_LEN   43 /* unpadded base64url of 32 bytes */
/* The protocol's major version: every answer carries "Sbx-Node-Version: " NODE_VERSION; a
 * request naming another major version is refused (a request without the field is served). */
#define NODE_VERSION       "1"
#define NODE_VERSION_MAJOR 1 /* the same number */
#define NODE_SANDBOX_MAX   4096
#define NODE_ID_MAX        64
#define NODE_ARGS_MAX      1024                /* command= parameters of an exec */
#define NODE_PATH_MAX      4096                /* a workspace path= parameter */
#define NODE_FILE_MAX      ((uint64_t)1 << 30) /* a file read or written (files.c) */
#define NODE_TAR_MAX       ((int64_t)8 << 30)  /* a workspace tar put (files.c) */
#define NODE_REFUSERS      16 /* connections over the bounds answered 503 at once; past them closed */
#define NODE_RETRY_S       1  /* the Retry-After of that answer */
#define NODE_PING_S        30 /* an upgraded connection quiet this long gets a ping (--ws-ping) */

struct node_daemon {
    SSL_CTX *ctx;
    int listen_fd;
    const char *state_dir; /* the records: ID.json, 0600 */
    const char *name;
    unsigned max_conns, conns;
    unsigned max_per_cert; /* connections of one client certificate at once */
    unsigned refusing;     /* connections being answered 503 now */
    struct node_owner *owners;
    size_t n_owners, cap_owners;
    unsigned max_sandboxes;
    int64_t token_ttl_s;
    int allow_network_full; /* --allow-network-full: a create may ask for network "full" */
    unsigned ping_s;        /* --ws-ping: the keep-alive interval of upgraded connections */
    /* --revoked FILE: SHA-256 fingerprints of client certificates the handshake refuses, read
     * again whenever the file changes (tls.c). Under mu. */
    const char *revoked_path;
    char (*revoked)[SBX_SHA256_HEX_LEN + 1];
    size_t n_revoked;
    struct stat revoked_st; /* of the file as last read */
    pthread_mutex_t mu;     /* conns and the records */
    struct node_record *recs;
    size_t n_recs, cap_recs;
};

/* The connections of one client certificate (its public key's hash) now. */
struct node_owner {
    char owner[SBX_SHA256_HEX_LEN + 1];
    unsigned n;
};

/* A token of a sandbox: its hash and when it stops opening the sandbox. */
struct node_token {
    uint8_t hash[SBX_SHA256_LEN];
    int64_t expires; /* seconds since the epoch; 0: an empty slot */
};
/* Tokens of one sandbox at a time; minting one more drops the oldest. Every command of a
 * harness mints one, so this bounds the commands that can start on a sandbox at once. */
#define NODE_TOKENS 64

/* A sandbox this daemon made: who owns it, the hashes of its tokens, and the environment of
 * its commands (the harness's manifest, resolved there). */
struct node_record {
    char id[NODE_ID_MAX + 1];
    char owner[SBX_SHA256_HEX_LEN + 1]; /* SHA-256 of the creating certificate's public key */
    struct node_token tok[NODE_TOKENS];
    json_t *env; /* array of "NAME=VALUE", owned */
};

/* One accepted connection. */
struct node_conn {
    struct node_daemon *d;
    int fd;
    SSL *ssl;
    char owner[SBX_SHA256_HEX_LEN + 1]; /* the peer certificate's public key hash */
    struct sbx_buf in;                  /* bytes read past the current request */
    int refuse; /* over --max-conns: answered 503 with Retry-After after the handshake */
    /* The request being handled (NULL between requests): an answer given while its body is
     * still unread says "Connection: close", since the connection ends after it (a client
     * that reused it would send its next request into a closed socket). */
    const struct node_req *cur;
    int closing; /* the connection ends after the answer being given */
};

struct node_req {
    char method[8];
    char path[1024];   /* percent-decoded path, without the query */
    char query[16384]; /* raw query, without '?' */
    char token[NODE_TOKEN_LEN + 8];
    char ws_key[64];
    char ws_protocols[256];
    char version[32]; /* Sbx-Node-Version, when has_version */
    int has_version;
    int upgrade_ws;
    int64_t content_length; /* -1: none */
    int64_t body_left;      /* a PUT's body, left on the connection for its handler to read */
    struct sbx_buf body;
};

/* tls.c */
/* Read d->revoked_path (when set): SBX_E_INVAL naming the file and line of a bad entry. */
int node_tls_revoked_load(struct node_daemon *d, struct sbx_error *err);
int node_tls_init(struct node_daemon *d, const char *cert, const char *key, const char *ca,
                  struct sbx_error *err);
/* The TLS handshake of an accepted socket and the peer's identity (OU=harness required). */
int node_tls_accept(struct node_conn *c, struct sbx_error *err);
/* Blocking I/O on the connection; recv returns 0 at the peer's end. */
long node_recv(struct node_conn *c, void *p, size_t n, struct sbx_error *err);
int node_send(struct node_conn *c, const void *p, size_t n, struct sbx_error *err);

/* http.c */
/* Read and parse the next request (0), or 1 when the peer closed between requests. */
int node_read_request(struct node_conn *c, struct node_req *r, struct sbx_error *err);
void node_req_release(struct node_req *r);
/* Parse a whole head h[0..n) (ending with the blank line) into r, which the caller zeroed with
 * content_length -1: the request line (HTTP/1.1 only), the fields sbx-node reads, every line
 * checked (no stray CR, LF, NUL or control character, at most NODE_FIELDS_MAX fields, a single
 * decimal Content-Length, no Transfer-Encoding, a Sbx-Node-Version of this node's major
 * version when there is one). SBX_E_PARSE, SBX_E_TOOBIG, SBX_E_UNSUPPORTED, SBX_E_INVAL (a
 * version this node does not speak, naming both). */
int node_parse_head(struct node_req *r, const char *h, size_t n, struct sbx_error *err);
int node_respond(struct node_conn *c, int status, const json_t *body, struct sbx_error *err);
int node_respond_error(struct node_conn *c, const struct sbx_error *e);
/* The value of query parameter name number idx (0-based), percent-decoded into out; 0 when
 * there is none, 1 when found, -1 when too long or malformed. */
int node_query(const char *query, const char *name, size_t idx, char *out, size_t cap);

/* api.c */
int node_records_load(struct node_daemon *d, struct sbx_error *err);
void node_handle(struct node_conn *c, struct node_req *r);
/* 0 when r's token opens sandbox id; else an SBX_E_PERM error (the same for every cause). */
int node_token_check(struct node_daemon *d, const char *id, const char *token,
                     struct sbx_error *err);

/* A copy of sandbox id's environment (an array of "NAME=VALUE"; empty when none). */
json_t *node_record_env(struct node_daemon *d, const char *id);

/* files.c: the requests .../files[/OP] and .../workspace of sandbox id (the token was
 * checked). */
void node_files(struct node_conn *c, struct node_req *r, const char *id, const char *rest);

/* exec.c: the WebSocket exec of an upgraded request (the token was checked). */
void node_exec(struct node_conn *c, struct node_req *r, const char *id);

/* The WebSocket upgrade's answer for protocol, which the request must offer (SBX_E_INVAL). */
int node_ws_offers(const char *list, const char *protocol);
int node_ws_upgrade(struct node_conn *c, struct node_req *req, const char *protocol,
                    struct sbx_error *err);

/* portfwd.c: GET .../ports/P (whether something listens on port P of the sandbox: 200, or the
 * local provider's error) and the portforward.k8s.io WebSocket of GET .../portforward?ports=P
 * (the token was checked). */
int node_port_param(const char *query, int *port, struct sbx_error *err);
void node_port_check(struct node_conn *c, const char *id, const char *portarg);
void node_portforward(struct node_conn *c, struct node_req *r, const char *id);

/* sandbox.c: GET .../stats, GET .../log, POST .../stop, POST .../start of sandbox id (the token
 * was checked): 1 when rest named one of them (answered), 0 when not. */
int node_sandbox_request(struct node_conn *c, struct node_req *r, const char *id, const char *rest);

/* keepalive.c: an upgraded connection's pings; lost after 3 intervals without a frame. */
struct node_keepalive {
    int64_t ping_ns, last_rx_ns, last_ping_ns;
};
struct sbx__ws;
void node_ka_init(struct node_keepalive *k, unsigned ping_s);
/* Bytes came from the harness. */
void node_ka_heard(struct node_keepalive *k);
/* How long a poll may wait before node_ka_tick is due (ms). */
int node_ka_poll_ms(const struct node_keepalive *k);
/* After a poll that waited: a ping when due (sent), or SBX_E_TIMEOUT when the harness is lost. */
int node_ka_tick(struct node_keepalive *k, struct sbx__ws *ws, struct node_conn *c,
                 struct sbx_error *err);

/* daemon.c */
int sbx__node_main(int argc, char **argv);

#endif
