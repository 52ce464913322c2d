/* sbx internal: a connection taken over after an HTTP/1.1 upgrade, and WebSocket over it
 * (docs/internals/remote.md).
 *
 * libcurl opens the connection (CURLOPT_CONNECT_ONLY: TCP or a unix socket, TLS with the
 * endpoint's trust, pins and client certificate, ALPN offering HTTP/1.1 only) and then only
 * carries bytes (curl_easy_send/curl_easy_recv): sbx writes the request head itself (with the
 * endpoint's credential), reads the answer's head (head.h) and, when the status is the one
 * that hands the connection over (101 Switching Protocols; Docker's exec start), keeps the
 * connection as a byte stream both ways. Debian 12's libcurl 7.88 has no WebSocket of its own;
 * ws.h frames it.
 *
 * After setup a connection is non-blocking. Its socket (sbx__conn_fd) can be polled, but with
 * TLS a poll is not enough: OpenSSL may hold decrypted bytes the socket no longer shows, so a
 * reader reads until sbx__conn_recv reports nothing (*got == 0) before it waits for POLLIN
 * again, and reads first, without waiting, when it resumes after a pause. The event loop's
 * sbx__lconn (loop.h) does exactly that; code that holds a connection itself must too.
 *
 * A connection is used by one thread at a time (it may move: made on the caller's thread,
 * driven by the loop's). */
#ifndef SBX_SANDBOX_WIRE_CONN_H
#define SBX_SANDBOX_WIRE_CONN_H

#include <stddef.h>
#include <stdint.h>

#include "sandbox/wire/endpoint.h"
#include "sandbox/wire/head.h"
#include "sandbox/wire/ws.h"
#include "sbx/buf.h"
#include "sbx/error.h"

/* sbx__conn_recv: the server closed its side. */
#define SBX__CONN_EOF 1

struct sbx__conn; /* opaque */

/* An upgrade request. All zero but path is a GET answered by 101. */
struct sbx__upgrade {
    const char *method;         /* NULL: "GET" */
    const char *path;           /* after the endpoint's base path, escaped by the caller */
    const char *const *headers; /* extra "Name: value" lines (Upgrade, Connection, ...), or NULL */
    const void *body;           /* a request body (Content-Length is added), or NULL */
    size_t body_len;
    const char *content_type; /* of body; NULL: application/json */
    int expect;               /* the status that hands the connection over; 0: 101 */
    int expect_also;          /* a second such status (Docker: 200 from older engines), or 0 */
    int64_t timeout_ms;       /* connect, send and the answer's head; 0: the endpoint's */
};

/* Connect to ep (TCP or unix socket, TLS when ep has it), send u's request with ep's
 * credential and read the answer's head. The expected status: *out is the connection, bytes
 * the server sent after the head are the first sbx__conn_recv returns; *head (may be NULL)
 * the answer's head (sbx__head_release). Another status: the server's error body is read (at
 * most SBX__HTTP_ERROR_MAX, within the timeout) and the error is sbx__http_status_error's.
 * Unreachable, TLS and timeout errors as in http.h. *out: caller owns (sbx__conn_free). */
int sbx__conn_open(struct sbx__endpoint *ep, const struct sbx__upgrade *u, struct sbx__conn **out,
                   struct sbx__http_head *head, struct sbx_error *err);
/* Only connect (and TLS): for a protocol that starts right away. */
int sbx__conn_connect(struct sbx__endpoint *ep, int64_t timeout_ms, struct sbx__conn **out,
                      struct sbx_error *err);
/* Close the connection (without a TLS close_notify wait) and free it. Accepts NULL. */
void sbx__conn_free(struct sbx__conn *c);

/* The socket, for poll and epoll. */
int sbx__conn_fd(const struct sbx__conn *c);
/* The endpoint (borrowed), for messages and scrubbing. */
struct sbx__endpoint *sbx__conn_endpoint(const struct sbx__conn *c);

/* Read what is there, without waiting: 0 with *got > 0 bytes, 0 with *got == 0 when nothing
 * is there now (wait for POLLIN), SBX__CONN_EOF when the server closed its side, -code on an
 * error (SBX_E_HTTP: reset, TLS failure; scrubbed). */
int sbx__conn_recv(struct sbx__conn *c, void *p, size_t n, size_t *got, struct sbx_error *err);
/* Take bytes to send without waiting: 0 with *sent bytes taken (0: nothing could be taken,
 * wait for POLLOUT), or -code. Taken bytes are copied into the connection (at most 16 KiB at a
 * time) and go out as the socket takes them: while sbx__conn_out_pending is not 0, wait for
 * POLLOUT and call sbx__conn_flush (or send more). TLS needs this: a write it could not finish
 * must be retried from the same memory, which a caller's growing queue is not. */
int sbx__conn_send(struct sbx__conn *c, const void *p, size_t n, size_t *sent,
                   struct sbx_error *err);
/* Send what was taken: 0 when nothing is left, 1 when some is (wait for POLLOUT), -code. */
int sbx__conn_flush(struct sbx__conn *c, struct sbx_error *err);
/* Bytes taken and not sent yet. */
size_t sbx__conn_out_pending(const struct sbx__conn *c);
/* Half-close: no more bytes from sbx, and the server can still answer; everything taken must
 * have gone first (SBX_E_INVAL otherwise). Over TLS a
 * close_notify first (TLS 1.3 closes each direction on its own), then shutdown(SHUT_WR) on the
 * socket (Docker's own client does only this: servers that take a bare end of input work too).
 */
int sbx__conn_shutdown_write(struct sbx__conn *c, struct sbx_error *err);

/* Blocking helpers for setup code, with a deadline (sbx_deadline_after_ms; INT64_MAX: none). */
int sbx__conn_write_all(struct sbx__conn *c, const void *p, size_t n, int64_t deadline,
                        struct sbx_error *err);
/* Wait for at least one byte: 0 with *got > 0, SBX__CONN_EOF, SBX_E_TIMEOUT or -code. */
int sbx__conn_read(struct sbx__conn *c, void *p, size_t n, int64_t deadline, size_t *got,
                   struct sbx_error *err);

/* ---- WebSocket over a connection ---- */

struct sbx__wsconn {
    struct sbx__conn *conn; /* owned */
    struct sbx__ws ws;      /* framing, replies and the close handshake (ws.h) */
    int protocol;           /* the index of the subprotocol the server chose, -1: none */
    struct sbx_buf in;      /* bytes read, not decoded yet */
    size_t in_off;
    int eof; /* the server closed the connection */
};

/* Open a WebSocket: the upgrade request of ws.h (key, version, the offered protocols, NULL or
 * NULL-terminated, most preferred first; extra header lines, may be NULL) through
 * sbx__conn_open, the answer checked by sbx__ws_check_response. max_message bounds one
 * message (0: SBX__WS_DEFAULT_MESSAGE). *out: caller owns (sbx__wsconn_free). */
int sbx__wsconn_open(struct sbx__endpoint *ep, const char *path, const char *const *protocols,
                     const char *const *headers, size_t max_message, int64_t timeout_ms,
                     struct sbx__wsconn **out, struct sbx_error *err);
/* Accepts NULL. Sends nothing: close first (sbx__wsconn_close) for a clean end. */
void sbx__wsconn_free(struct sbx__wsconn *w);

/* Without waiting: 1 and *msg for a complete message or control frame (borrowed until the
 * next call; a ping's pong and the echo of the server's close are queued into ws.out: send
 * them with sbx__wsconn_flush), 0 when none is complete now (wait for POLLIN on the socket),
 * SBX__WSCONN_END when the connection ended after the close handshake, -code otherwise: a
 * protocol error (the close frame that says why is queued: flush it), or SBX_E_HTTP for a
 * connection that ended inside a frame or without a close frame. */
int sbx__wsconn_next(struct sbx__wsconn *w, struct sbx__ws_msg *msg, struct sbx_error *err);
#define SBX__WSCONN_END 2
/* Send what ws.out holds, without waiting: 0 when all went, 1 when some is left (wait for
 * POLLOUT), -code. */
int sbx__wsconn_flush(struct sbx__wsconn *w, struct sbx_error *err);

/* Blocking: the next data message (pings answered, pongs skipped) within the deadline;
 * *msg->opcode is SBX__WS_CLOSE when the server closed (the handshake is then complete). */
int sbx__wsconn_read(struct sbx__wsconn *w, struct sbx__ws_msg *msg, int64_t deadline,
                     struct sbx_error *err);
/* Blocking: queue one data message and send everything queued. */
int sbx__wsconn_write(struct sbx__wsconn *w, int opcode, const void *p, size_t n, int64_t deadline,
                      struct sbx_error *err);
/* Blocking: the close handshake (sbx's close, then the server's, data until it skipped). */
int sbx__wsconn_close(struct sbx__wsconn *w, int code, const char *reason, int64_t deadline,
                      struct sbx_error *err);

/* ---- port forwarding over a WebSocket (pfpump.c) ---- */

/* Carry the TCP connection fd over w, a port-forward WebSocket (channel.h's sbx__pf, the
 * client's side) asking for port: fd's bytes to the data channel, the data channel's to fd,
 * until either side ends (the protocol has no half-close), the server's close, or text on its
 * error channel. Does not close fd or w. */
void sbx__pf_pump(struct sbx__wsconn *w, uint16_t port, int fd);

#endif
