/* sbx local provider: the sandbox's network from the host side (internal).
 *
 * Two services run in the OUTER process of an isolated sandbox (the one that stays in the host
 * namespaces, see isolate.h), in one non-blocking event loop on a thread of its own (name
 * lookups run in short detached threads, netloop.c):
 *
 *   - the allow-list proxy of network mode allow:<domains>. Its listening socket is created
 *     INSIDE the sandbox's network namespace (127.0.0.1:3128 by default) by a short-lived child
 *     that joins the sandbox's user and network namespaces and hands the socket back over a
 *     Unix socket pair; the outer process then accepts on it from the host. A socket keeps the
 *     namespace it was created in, so commands inside reach the proxy on their own loopback
 *     while the proxy's upstream connections leave from the host's network. Nothing runs inside
 *     the sandbox for it and the sandbox's namespace keeps only its loopback.
 *   - the exposed-port forwarders: a host listener (127.0.0.1:<host port> by default) whose
 *     every connection is joined to a socket created inside the sandbox's network namespace and
 *     connected to 127.0.0.1:<port> there.
 *
 * The pure parts of the proxy (host patterns, address classification, request parsing with
 * limits, the refusal texts) are separate functions, unit-tested without a network. */
#ifndef SBX_SANDBOX_LOCAL_NET_H
#define SBX_SANDBOX_LOCAL_NET_H

#include <netinet/in.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "sbx/buf.h"
#include "sbx/error.h"
#include "sbx/strv.h"

/* ---- limits ---- */

#define SBX__PROXY_MAX_HEAD     16384 /* request line + headers, bytes */
#define SBX__PROXY_MAX_HEADERS  100
#define SBX__PROXY_MAX_HOST     253 /* a DNS name */
#define SBX__PROXY_MAX_PATTERNS 256
#define SBX__PROXY_DEFAULT_PORT 3128 /* the proxy's port inside the sandbox */

/* ---- host patterns (pure) ---- */

/* Normalize a host name or IP literal as it appears in a request: ASCII letters lowercased, one
 * trailing dot dropped, brackets of an IPv6 literal removed, an IPv4 literal in any inet_aton
 * form ("2130706433", "0x7f.1", "0177.0.0.1") rewritten dotted-decimal and IPv6 in RFC 5952
 * form. Non-ASCII bytes, empty labels, labels over 63 bytes, names over 253 bytes and characters
 * outside [a-z0-9-_.] are refused (SBX_E_INVAL naming the host): names are matched as the
 * ASCII (IDNA "xn--") form only. *out: caller owns (free). *is_literal (may be NULL) is set to 1
 * for an IP literal, and *addr (may be NULL) then receives it with port 0. */
int sbx__proxy_host_normalize(const char *host, size_t len, char **out, int *is_literal,
                              struct sockaddr_storage *addr, struct sbx_error *err);

/* Check and normalize one allow-list pattern: a host name ("pypi.org"), an IP literal, or
 * "*.<name>" which matches every name below <name> but not <name> itself. "*" alone, a "*"
 * elsewhere than a whole first label, and the rules of sbx__proxy_host_normalize are refused
 * (SBX_E_INVAL "allow-list pattern '...': ..."). *out: caller owns (free). */
int sbx__proxy_pattern_normalize(const char *pattern, char **out, struct sbx_error *err);

/* 1 when the normalized host matches one of the normalized patterns, else 0. */
int sbx__proxy_host_allowed(const char *host, const char *const *patterns, size_t n);

/* ---- addresses (pure) ---- */

/* The rule that refuses connecting to addr, or NULL when it may be connected to. Refused:
 * unspecified, loopback (unless allow_loopback), private (RFC 1918), carrier-grade NAT
 * (100.64.0.0/10), link-local (169.254.0.0/16, fe80::/10), cloud metadata (169.254.169.254,
 * fd00:ec2::254), unique local (fc00::/7), multicast, broadcast and reserved ranges, and the
 * same IPv4 addresses in IPv4-mapped, IPv4-compatible, NAT64 (64:ff9b::/96) or 6to4 form. The
 * text is static: "loopback (127.0.0.0/8)", ... */
const char *sbx__proxy_addr_refusal(const struct sockaddr *addr, int allow_loopback);

/* Text form of addr ("10.0.0.1", "::1") into buf. */
void sbx__proxy_addr_str(const struct sockaddr *addr, char *buf, size_t size);

/* ---- requests (pure) ---- */

/* Length of the request head at data (through the empty line ending it), 0 while incomplete.
 * A head longer than SBX__PROXY_MAX_HEAD is the caller's SBX_E_TOOBIG. */
size_t sbx__proxy_head_len(const char *data, size_t len);

struct sbx__proxy_request {
    int connect; /* 1: CONNECT host:port (tunnel); 0: a plain HTTP request to forward */
    char *host;  /* normalized (see sbx__proxy_host_normalize), owned */
    int port;
    int literal; /* host is an IP literal, in addr */
    struct sockaddr_storage addr;
    char *head; /* plain HTTP: the head to send upstream (origin-form request line, the
                 * request line's host as Host, hop-by-hop and proxy headers dropped,
                 * "Connection: close"), owned; NULL for CONNECT */
    size_t head_len;
};

/* Parse a complete request head (len = sbx__proxy_head_len). Accepts "CONNECT host:port" and
 * absolute-URI "http://host[:port]/path" requests of HTTP/1.0 and 1.1. The Host header of the
 * request is ignored for the decision and replaced upstream. Errors: SBX_E_TOOBIG (head over
 * SBX__PROXY_MAX_HEAD or more than SBX__PROXY_MAX_HEADERS headers), SBX_E_PARSE (malformed),
 * SBX_E_UNSUPPORTED (origin-form request, a scheme other than http, user info in the URI),
 * SBX_E_INVAL (a bad host); the message is meant for the 400 answer. *out set only on success;
 * release it with sbx__proxy_request_release. */
int sbx__proxy_parse(const char *data, size_t len, struct sbx__proxy_request *out,
                     struct sbx_error *err);
void sbx__proxy_request_release(struct sbx__proxy_request *req);

/* A complete HTTP/1.1 answer with status (403, 400, 502, ...), a plain text body (a newline is
 * appended), "Connection: close", and when rule is not NULL an "X-Sbx-Proxy-Refused: <rule>"
 * header. Appends to out. */
int sbx__proxy_response(int status, const char *rule, const char *body, struct sbx_buf *out,
                        struct sbx_error *err);

/* The refusal texts of the 403 answers (appended to out, no newline):
 *   domain:  "sbx proxy refused 'h:p': the domain 'h' is not in the sandbox's allow list
 *             (allowed: a, *.b)"
 *   address: "sbx proxy refused 'h:p': address 10.0.0.1 is in a refused range (private,
 *             RFC 1918)"
 *   port:    "sbx proxy refused 'h:p': port 22 is not allowed (allowed: 80, 443)" */
int sbx__proxy_refusal_domain(const char *host, int port, const char *const *patterns, size_t n,
                              struct sbx_buf *out, struct sbx_error *err);
int sbx__proxy_refusal_address(const char *host, int port, const struct sockaddr *addr,
                               const char *rule, struct sbx_buf *out, struct sbx_error *err);
int sbx__proxy_refusal_port(const char *host, int port, const int *ports, size_t n,
                            struct sbx_buf *out, struct sbx_error *err);

/* ---- sockets in the sandbox's network namespace (forward.c) ---- */

/* Create a TCP socket (family AF_INET or AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, blocking) in the
 * network namespace netns_fd, joining the user namespace userns_fd first (-1: do not; root can join
 * a network namespace without it). A short-lived child does the setns and sends the socket back;
 * this process's own namespaces never change, so it may be multi-threaded. Blocks for the
 * child (about a millisecond). *out: caller owns (close). */
int sbx__netns_socket(int userns_fd, int netns_fd, int family, int *out, struct sbx_error *err);

/* Open the user and network namespaces of process pid (/proc/<pid>/ns/...). *userns and *netns:
 * caller owns (close); set only on success. */
int sbx__netns_open(pid_t pid, int *userns, int *netns, struct sbx_error *err);

/* ---- the event loop: proxy and forwarders (netloop.c) ---- */

#define SBX__NET_MAX_CONNS_DEFAULT 256
#define SBX__NET_MAX_FORWARDS      64

struct sbx__net_forward {
    int port;         /* port inside the sandbox */
    int v6;           /* 1: the service listens on ::1 inside, 0: on 127.0.0.1 */
    const char *bind; /* host address to listen on; NULL = "127.0.0.1" */
    int host_port;    /* 0 = any free port (see sbx__net_forward_port) */
    /* 1: listen on the unix socket "port-<port>.sock" in the config's unix_dir instead of TCP
     * (bind and host_port unused): only the caller can reach it through that 0700 dir. */
    int unix_sock;
};

/* All zero plus netns_fd/userns_fd = no proxy, no forwarders. Strings are copied. */
struct sbx__net_config {
    int userns_fd; /* the sandbox's user namespace, -1 = none (borrowed, only used in new) */
    int netns_fd;  /* the sandbox's network namespace (borrowed, only used in new/add) */
    /* allow-list proxy: enabled when npatterns > 0 */
    const char *const *patterns; /* raw patterns, checked with sbx__proxy_pattern_normalize */
    size_t npatterns;
    int proxy_port;   /* inside; 0 = SBX__PROXY_DEFAULT_PORT */
    const int *ports; /* destination ports allowed; NULL = 80 and 443 */
    size_t nports;
    size_t max_conns;    /* 0 = SBX__NET_MAX_CONNS_DEFAULT (each has 2 x 64 KiB) */
    int head_timeout_ms; /* request head and upstream connect; 0 = 10 s */
    int idle_timeout_ms; /* no byte either way; 0 = 300 s */
    /* Test-only (never set from a manifest, an agent file or the CLI's options): connect to
     * loopback upstreams, and resolve names of test_hosts ("name=ip", NULL-terminated) to the
     * given address without DNS. */
    int test_allow_loopback;
    const char *const *test_hosts;
    /* Forwarders requested at run time (the supervisor's PID 1 asks for them): a SOCK_SEQPACKET
     * socket (borrowed: the loop serves a duplicate); -1 = none. A message is a struct
     * sbx__net_request; the answer a struct sbx__net_reply. */
    int control_fd;
    const char *forward_bind; /* host address of those forwarders; NULL = "127.0.0.1" */
    /* Where unix socket forwarders listen: a directory only the caller can enter (the runtime
     * directory), as a descriptor (borrowed, duplicated) and as a path (copied) for answers;
     * -1 / NULL = unix socket forwards are refused. */
    int unix_dir_fd;
    const char *unix_dir;
};

struct sbx__net_request {
    int port;      /* the sandbox port */
    int v6;        /* the service listens on ::1 (1) or on 127.0.0.1 (0) */
    int unix_sock; /* forward from a unix socket (the reply's path), not a TCP port */
};

struct sbx__net_reply {
    int host_port; /* > 0 (a unix socket forward: 1, with path), or 0 with msg */
    char msg[256];
    char path[108]; /* unix socket forwards: the socket's host path */
};

struct sbx__net;

/* Check the config, create the proxy's listening socket inside the sandbox when patterns are
 * given, and start the event loop in a thread of its own (which blocks every signal). *out:
 * caller owns (sbx__net_free). */
int sbx__net_new(const struct sbx__net_config *cfg, struct sbx__net **out, struct sbx_error *err);
/* Add a forwarder; *host_port (may be NULL) receives the host port it listens on (1 for a unix
 * socket, whose host path goes to path, of size npath, when not NULL). Thread-safe towards the
 * loop. SBX_E_EXISTS if port is forwarded already in that form (its host port and path are
 * returned). SBX_E_UNSUPPORTED for a unix socket without a unix_dir, SBX_E_TOOBIG when its path
 * does not fit a socket address. */
int sbx__net_forward_add(struct sbx__net *net, const struct sbx__net_forward *fwd, int *host_port,
                         char *path, size_t npath, struct sbx_error *err);
/* The host port forwarding to sandbox port, or 0. */
int sbx__net_forward_port(struct sbx__net *net, int port);
/* Stop the loop, close every connection and listener, free. Accepts NULL. */
void sbx__net_free(struct sbx__net *net);

/* Append the environment of commands in mode allow: HTTP_PROXY, HTTPS_PROXY, http_proxy,
 * https_proxy = "http://127.0.0.1:<port>", NO_PROXY, no_proxy = "localhost,127.0.0.1,::1".
 * port 0 = SBX__PROXY_DEFAULT_PORT. */
void sbx__net_proxy_env(int port, struct sbx_strv *out);

#endif
