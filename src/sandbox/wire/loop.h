/* sbx internal: the event loop of the remote layer (docs/internals/remote.md, "The loop").
 *
 * One thread per process, running while there is work, relays every running remote command of
 * every client: an epoll set of the descriptors it watches (connections, the local ends of the
 * commands' sockets and terminals), curl's multi interface for asynchronous requests (exit
 * statuses, kills, resizes, streamed responses), and timers. 1000 running commands cost one
 * thread, not 1000.
 *
 * Threads. Everything below sbx__loop_call is used on the loop's thread only: inside a
 * callback of the loop, or inside a function handed to sbx__loop_call / sbx__loop_post (the
 * way any other thread reaches it). Callbacks must not block: no blocking request, no sleep,
 * no wait for another thread (sbx__xfer is the loop's request). Objects may be freed inside
 * their own callbacks; a freed object gets no more callbacks, even for events already
 * collected.
 *
 * Connections (sbx__lconn, sbx__lws) read until nothing is left (TLS buffers, conn.h) and stop
 * reading while their consumer says it is full (SBX__PAUSE from the data callback; resume
 * later): memory per connection is bounded by one read (64 KiB) plus the send queue the owner
 * bounds. */
#ifndef SBX_SANDBOX_WIRE_LOOP_H
#define SBX_SANDBOX_WIRE_LOOP_H

#include <stddef.h>
#include <stdint.h>

#include "sandbox/wire/conn.h"
#include "sandbox/wire/endpoint.h"
#include "sandbox/wire/http.h"
#include "sandbox/wire/ws.h"
#include "sbx/error.h"

struct sbx__loop; /* opaque */

/* Events of a watch. */
#define SBX__IN  1u
#define SBX__OUT 2u
#define SBX__ERR 4u /* revents only: hang-up or error on the descriptor */

/* A data callback's "stop reading until resumed". */
#define SBX__PAUSE 1

/* The process's loop (*out borrowed: valid for the life of the process; a forked child that
 * calls this gets a loop of its own). Its thread and descriptors exist only while something is
 * on it: the first sbx__loop_call / sbx__loop_post starts them, and the call that leaves the
 * loop holding nothing (no watch, timer, connection, transfer or rproc) stops them, so a
 * process that ran a remote command keeps no thread or descriptor of it. Thread-safe. Errors:
 * SBX_E_UNSUPPORTED (libcurl missing); a loop that cannot start its thread or epoll set is a
 * bug report (SBX_BUG), not an error. */
int sbx__loop_default(struct sbx__loop **out, struct sbx_error *err);
/* A loop with a thread of its own (tests, benchmarks). */
int sbx__loop_new(struct sbx__loop **out, struct sbx_error *err);
/* Stop and free a loop made by sbx__loop_new, after everything on it was freed. NULL is fine.
 * Not from the loop's own thread. */
void sbx__loop_free(struct sbx__loop *l);

/* Hold the loop: its thread runs (started here when needed) until the hold is released, and
 * this is where starting can fail (no descriptor or thread left: SBX_E_SYS), as a call cannot.
 * Code that makes objects on the process's loop holds it first (an rproc holds it for its
 * life); sbx__loop_release may be called on any thread, the loop's included. */
int sbx__loop_hold(struct sbx__loop *l, struct sbx_error *err);
void sbx__loop_release(struct sbx__loop *l);

/* Run fn(ud) on the loop's thread soon (in order of posting). Any thread. Never fails while the
 * loop is held; without a hold a process out of descriptors aborts here (SBX_BUG). */
void sbx__loop_post(struct sbx__loop *l, void (*fn)(void *ud), void *ud);
/* Run fn(ud) on the loop's thread and wait until it returned (at once when called there). */
void sbx__loop_call(struct sbx__loop *l, void (*fn)(void *ud), void *ud);
/* Whether the caller runs on l's thread. */
int sbx__loop_on_thread(const struct sbx__loop *l);

/* What a loop holds now (benchmarks and tests; any thread). */
struct sbx__loop_stats {
    size_t watches, timers, conns, xfers, procs;
    uint64_t iterations;
};
void sbx__loop_stats(struct sbx__loop *l, struct sbx__loop_stats *out);

/* ---- timers (loop thread) ---- */

struct sbx__timer;
typedef void sbx__timer_fn(struct sbx__timer *t, void *ud);
/* A stopped timer. Never fails. */
struct sbx__timer *sbx__timer_new(struct sbx__loop *l, sbx__timer_fn *fn, void *ud);
/* Fire once, ms from now (0: at the next turn); arming again moves it. */
void sbx__timer_after(struct sbx__timer *t, int64_t ms);
/* Both accept NULL. */
void sbx__timer_stop(struct sbx__timer *t);
void sbx__timer_free(struct sbx__timer *t);

/* ---- descriptors (loop thread) ---- */

struct sbx__watch;
typedef void sbx__watch_fn(struct sbx__watch *w, unsigned revents, void *ud);
/* Watch fd (borrowed: never closed here; one watch per descriptor) for events (SBX__IN,
 * SBX__OUT, both or none), level-triggered. SBX_E_SYS when epoll refuses the descriptor. */
int sbx__watch_new(struct sbx__loop *l, int fd, unsigned events, sbx__watch_fn *fn, void *ud,
                   struct sbx__watch **out, struct sbx_error *err);
void sbx__watch_set(struct sbx__watch *w, unsigned events);
/* The descriptor watched. */
int sbx__watch_fd(const struct sbx__watch *w);
/* Accepts NULL. */
void sbx__watch_free(struct sbx__watch *w);

/* ---- connections (loop thread) ---- */

struct sbx__lconn;
struct sbx__lconn_ops {
    /* Bytes read: 0 to go on, SBX__PAUSE to stop reading until sbx__lconn_resume (the bytes
     * were taken either way), -code to fail the connection (end follows with it). */
    int (*data)(struct sbx__lconn *c, const uint8_t *p, size_t n, void *ud, struct sbx_error *err);
    /* The reading side ended, once: rc 0 when the server closed it, else the error (scrubbed).
     * Sending may still work; free the connection when done. */
    void (*end)(struct sbx__lconn *c, int rc, const struct sbx_error *err, void *ud);
    /* Optional: the send queue became empty. */
    void (*drained)(struct sbx__lconn *c, void *ud);
};
/* Drive conn (taken, freed on failure too) from the loop; max_queue bounds what sends may
 * queue (0: 1 MiB). */
int sbx__lconn_new(struct sbx__loop *l, struct sbx__conn *conn, size_t max_queue,
                   const struct sbx__lconn_ops *ops, void *ud, struct sbx__lconn **out,
                   struct sbx_error *err);
/* Queue bytes (sent as the socket takes them). SBX_E_TOOBIG when max_queue would be passed
 * (wait for drained), SBX_E_INVAL after shutdown_write. */
int sbx__lconn_send(struct sbx__lconn *c, const void *p, size_t n, struct sbx_error *err);
size_t sbx__lconn_queued(const struct sbx__lconn *c);
/* Half-close once the queue is sent. */
void sbx__lconn_shutdown_write(struct sbx__lconn *c);
void sbx__lconn_pause(struct sbx__lconn *c);
/* Resume reading; reads at once (bytes TLS may hold are not seen by epoll). */
void sbx__lconn_resume(struct sbx__lconn *c);
struct sbx__conn *sbx__lconn_conn(const struct sbx__lconn *c);
/* Close and free (end is not called). Accepts NULL. */
void sbx__lconn_free(struct sbx__lconn *c);

/* WebSocket (ws.h) over a loop connection. */
struct sbx__lws;
struct sbx__lws_ops {
    /* A data message (SBX__WS_TEXT or SBX__WS_BINARY, reassembled, borrowed for the call), or
     * SBX__WS_CLOSE when the server closed (its echo is queued). Pings are answered here and
     * not shown. Returns as sbx__lconn_ops.data. */
    int (*message)(struct sbx__lws *w, const struct sbx__ws_msg *m, void *ud,
                   struct sbx_error *err);
    /* The connection ended, once: rc 0 after a complete close handshake, else the error (a
     * protocol error, a connection cut without a close frame). */
    void (*end)(struct sbx__lws *w, int rc, const struct sbx_error *err, void *ud);
    /* Optional: every queued frame was sent. */
    void (*drained)(struct sbx__lws *w, void *ud);
};
/* Drive wc (taken, freed on failure too) from the loop. */
int sbx__lws_new(struct sbx__loop *l, struct sbx__wsconn *wc, const struct sbx__lws_ops *ops,
                 void *ud, struct sbx__lws **out, struct sbx_error *err);
/* Queue one data message. SBX_E_TOOBIG when the frame queue is full (wait for drained),
 * SBX_E_INVAL after sbx's close. */
int sbx__lws_send(struct sbx__lws *w, int opcode, const void *p, size_t n, struct sbx_error *err);
size_t sbx__lws_queued(const struct sbx__lws *w);
/* Start the close handshake; end follows when the server answers, or after 5 s without. */
void sbx__lws_close(struct sbx__lws *w, int code, const char *reason);
void sbx__lws_pause(struct sbx__lws *w);
void sbx__lws_resume(struct sbx__lws *w);
/* Keep-alive: a ping after every ping_ms, and the connection ends (end with SBX_E_TIMEOUT)
 * when nothing at all (a frame, a pong) came for dead_ms while sbx was reading: a peer whose
 * link was cut, or that stopped without a word, ends the stream in bounded time instead of
 * never. Time spent paused by the owner does not count. ping_ms <= 0 turns it off. */
void sbx__lws_keepalive(struct sbx__lws *w, int64_t ping_ms, int64_t dead_ms);
/* The subprotocol index the server chose (-1: none). */
int sbx__lws_protocol(const struct sbx__lws *w);
/* Close the connection at once and free (end is not called). Accepts NULL. */
void sbx__lws_free(struct sbx__lws *w);

/* ---- asynchronous requests: curl multi (loop thread) ---- */

struct sbx__xfer;
struct sbx__xfer_ops {
    /* Optional: a 2xx body's bytes as they come (else they go to resp->body up to max_body):
     * 0, SBX__PAUSE (taken; no more until sbx__xfer_resume) or -code (stops; done follows). */
    int (*data)(struct sbx__xfer *x, const uint8_t *p, size_t n, void *ud, struct sbx_error *err);
    /* Once: rc 0 with the response (any status; an error status's body in resp->body), or the
     * transport's or data's error (scrubbed). The transfer is freed after it returns. */
    void (*done)(struct sbx__xfer *x, int rc, const struct sbx__http_resp *resp,
                 const struct sbx_error *err, void *ud);
};
/* Start req (copied: method, path, headers, json or body; source and sink are not used here)
 * to ep (a reference is kept). 429 and 503 are retried after their wait on a timer, as
 * sbx__http_call does. *out (may be NULL): the transfer, valid until done runs. */
int sbx__xfer_start(struct sbx__loop *l, struct sbx__endpoint *ep, const struct sbx__http_req *req,
                    const struct sbx__xfer_ops *ops, void *ud, struct sbx__xfer **out,
                    struct sbx_error *err);
void sbx__xfer_pause(struct sbx__xfer *x);
void sbx__xfer_resume(struct sbx__xfer *x);
/* Stop and free a transfer before its done (which is then never called). */
void sbx__xfer_cancel(struct sbx__xfer *x);

#endif
