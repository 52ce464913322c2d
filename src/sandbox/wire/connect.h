/* sbx internal: the Connect protocol's streaming envelopes and error bodies (the JSON codec).
 *
 * A streaming body is a run of envelopes: 1 flag byte (0x01 compressed, 0x02 end of stream),
 * a 32-bit big-endian length, and that many bytes. Messages are JSON; the last envelope, with
 * the end-of-stream flag, holds {"error": {"code", "message", "details"}, "metadata": {...}},
 * and a stream that ends without it was cut. A unary call that fails answers with an HTTP
 * error status and a body {"code": "...", "message": "..."}.
 *
 * Hostile input: a message over the caller's limit is SBX_E_TOOBIG before any of it is
 * buffered, unknown flag bits are SBX_E_PARSE, a compressed envelope is SBX_E_UNSUPPORTED (no
 * compression is offered), and anything after the end of the stream is SBX_E_PARSE. */
#ifndef SBX_SANDBOX_WIRE_CONNECT_H
#define SBX_SANDBOX_WIRE_CONNECT_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "sbx/buf.h"
#include "sbx/error.h"

#define SBX__CONNECT_COMPRESSED  0x01
#define SBX__CONNECT_END_STREAM  0x02
#define SBX__CONNECT_DEFAULT_MAX ((size_t)4 << 20)

enum sbx__connect_kind {
    SBX__CONNECT_NONE,    /* nothing complete yet */
    SBX__CONNECT_MESSAGE, /* one message */
    SBX__CONNECT_END,     /* the end-of-stream envelope: decode it with sbx__connect_end */
};

struct sbx__connect_msg {
    enum sbx__connect_kind kind;
    const uint8_t *data; /* borrowed until the next call */
    size_t len;
};

struct sbx__connect_dec {
    uint8_t hdr[5];
    size_t hdr_len;
    uint32_t need;      /* payload bytes still to come */
    int flags;          /* of the envelope being read */
    struct sbx_buf msg; /* its payload */
    int deliver;        /* msg was handed out: reset it on the next call */
    int ended;          /* the end-of-stream envelope came */
    size_t max_message;
};

/* max_message bounds one envelope's payload (0: SBX__CONNECT_DEFAULT_MAX). */
void sbx__connect_init(struct sbx__connect_dec *d, size_t max_message);
void sbx__connect_release(struct sbx__connect_dec *d);
/* Consume from p[0..n): returns the bytes used (> 0 when n > 0; it stops after a complete
 * envelope) and fills *out. */
long sbx__connect_feed(struct sbx__connect_dec *d, const uint8_t *p, size_t n,
                       struct sbx__connect_msg *out, struct sbx_error *err);
/* The body ended: 0 after the end-of-stream envelope, else SBX_E_PARSE (cut inside an envelope,
 * or no end-of-stream envelope). */
int sbx__connect_finish(const struct sbx__connect_dec *d, struct sbx_error *err);

/* The end-of-stream JSON: 0 when it holds no error, else the error (see sbx__connect_error).
 * *metadata (may be NULL): the trailers object, caller owns (json_decref), NULL when absent;
 * set only on success. A body that is not the envelope's shape is SBX_E_PARSE. */
int sbx__connect_end(const uint8_t *p, size_t n, json_t **metadata, struct sbx_error *err);

/* An error object {"code": "...", "message": "...", "details": [...]} (the body of a failed
 * unary call, or the "error" of an end-of-stream envelope) as an sbx error: "not_found" is
 * SBX_E_NOTFOUND, "already_exists" SBX_E_EXISTS, "permission_denied" and "unauthenticated"
 * SBX_E_PERM, "invalid_argument" SBX_E_INVAL, "deadline_exceeded" SBX_E_TIMEOUT, "canceled"
 * SBX_E_CANCELLED, "unimplemented" SBX_E_UNSUPPORTED, "resource_exhausted" SBX_E_TOOBIG, the
 * rest SBX_E_API; the message is "<code>: <server's message>". http_status (0 when none) is
 * named when the body is not such an object. Always returns a negative code. */
int sbx__connect_error(const uint8_t *p, size_t n, int http_status, struct sbx_error *err);

/* Append an envelope (flags 0 or SBX__CONNECT_END_STREAM) around p[0..n), for request streams
 * and test servers. */
int sbx__connect_encode(struct sbx_buf *out, int flags, const void *p, size_t n,
                        struct sbx_error *err);

#endif
