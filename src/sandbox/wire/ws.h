/* sbx internal: the client side of WebSocket (RFC 6455) over a connection the caller holds.
 *
 * No I/O here. The caller opens the connection (libcurl with CURLOPT_CONNECT_ONLY, or a plain
 * socket), sends the request head sbx__ws_request() builds, reads the answer's head until
 * sbx__ws_head_len() finds its end and checks it with sbx__ws_check_response(); from then on it
 * feeds what it reads to sbx__ws_recv() and writes out what accumulates in ws->out.
 *
 * Server frames are hostile input (docs/internals/wire.md): a masked frame, a length not in its
 * shortest form, a reserved bit or opcode, a fragmented or oversized control frame, a
 * continuation without a start, a text message that is not UTF-8, an invalid close code or a
 * message over the limit each fail the connection with a message naming what was wrong, and
 * the close frame that tells the server why (1002, 1007 or 1009) is queued in ws->out. */
#ifndef SBX_SANDBOX_WIRE_WS_H
#define SBX_SANDBOX_WIRE_WS_H

#include <stddef.h>
#include <stdint.h>

#include "sbx/buf.h"
#include "sbx/error.h"

enum {
    SBX__WS_CONT = 0x0,
    SBX__WS_TEXT = 0x1,
    SBX__WS_BINARY = 0x2,
    SBX__WS_CLOSE = 0x8,
    SBX__WS_PING = 0x9,
    SBX__WS_PONG = 0xa,
};

/* Close codes sbx sends or reports. 1005 is never on the wire: it stands for a close frame
 * without a code. */
enum {
    SBX__WS_CLOSE_NORMAL = 1000,
    SBX__WS_CLOSE_GOING_AWAY = 1001,
    SBX__WS_CLOSE_PROTOCOL = 1002,
    SBX__WS_CLOSE_NO_STATUS = 1005,
    SBX__WS_CLOSE_BAD_DATA = 1007,
    SBX__WS_CLOSE_TOO_BIG = 1009,
};

#define SBX__WS_CONTROL_MAX     125
#define SBX__WS_DEFAULT_MESSAGE ((size_t)4 << 20) /* 4 MiB */
#define SBX__WS_HEAD_MAX        16384             /* the server's 101 answer head */
#define SBX__WS_KEY_LEN         24                /* base64 of 16 random bytes */
#define SBX__WS_ACCEPT_LEN      28                /* base64 of a 20-byte SHA-1 */

/* ---- the opening handshake ---- */

struct sbx__ws_handshake {
    char key[SBX__WS_KEY_LEN + 1];       /* Sec-WebSocket-Key sent */
    char accept[SBX__WS_ACCEPT_LEN + 1]; /* the Sec-WebSocket-Accept that must come back */
};

/* base64(SHA-1(key + the RFC's GUID)) into out. SBX_E_UNSUPPORTED when libcrypto is missing. */
int sbx__ws_accept_for(const char *key, char out[SBX__WS_ACCEPT_LEN + 1], struct sbx_error *err);

/* A fresh random key (getrandom) and the accept value it calls for. */
int sbx__ws_handshake_init(struct sbx__ws_handshake *h, struct sbx_error *err);

/* Append the request head to out: "GET path HTTP/1.1", Host, the upgrade headers, the key,
 * version 13, "Sec-WebSocket-Protocol: a, b" when protocols (NULL-terminated, may be NULL) is
 * not empty, then extra_headers (may be NULL; complete "Name: value\r\n" lines, the caller's
 * credentials for instance) and the blank line. host and path must not contain CR, LF or
 * spaces, protocols must be HTTP tokens: SBX_E_INVAL otherwise. */
int sbx__ws_request(const struct sbx__ws_handshake *h, const char *host, const char *path,
                    const char *const *protocols, const char *extra_headers, struct sbx_buf *out,
                    struct sbx_error *err);

/* The length of the answer's head (through its blank line) at the start of p[0..n), 0 when it
 * is not complete yet, SBX_E_TOOBIG when n reaches SBX__WS_HEAD_MAX without one. */
long sbx__ws_head_len(const char *p, size_t n, struct sbx_error *err);

/* Check the answer's head (head_len bytes from sbx__ws_head_len): status 101, "Upgrade:
 * websocket", "Connection: Upgrade", the expected Sec-WebSocket-Accept (once), no extension,
 * and a Sec-WebSocket-Protocol that is one of protocols (absent when none was offered).
 * *chosen: the index of the protocol the server chose, -1 when it chose none. Another status
 * is SBX_E_API "the server answered the websocket upgrade with HTTP 403 Forbidden"; anything
 * else wrong is SBX_E_PARSE naming the header. */
int sbx__ws_check_response(const struct sbx__ws_handshake *h, const char *head, size_t head_len,
                           const char *const *protocols, int *chosen, struct sbx_error *err);

/* ---- frames ---- */

/* Append one client frame to out: FIN as given, masked with mask. Refused (SBX_E_INVAL): a
 * reserved opcode, a control frame with more than 125 bytes or without FIN. */
int sbx__ws_frame_masked(struct sbx_buf *out, int opcode, int fin, const void *p, size_t n,
                         const uint8_t mask[4], struct sbx_error *err);
/* The same with a fresh mask from getrandom, as every client frame must have. */
/* An unmasked frame, as a server sends it. */
int sbx__ws_frame_server(struct sbx_buf *out, int opcode, int fin, const void *p, size_t n,
                         struct sbx_error *err);
int sbx__ws_frame(struct sbx_buf *out, int opcode, int fin, const void *p, size_t n,
                  struct sbx_error *err);

/* One complete message or control frame handed out by the decoder. */
struct sbx__ws_msg {
    int opcode;          /* 0: nothing complete yet; else TEXT, BINARY, CLOSE, PING or PONG */
    const uint8_t *data; /* the payload (reassembled), borrowed until the next call */
    size_t len;
    int close_code;     /* CLOSE: the code, SBX__WS_CLOSE_NO_STATUS when the frame had none */
    const char *reason; /* CLOSE: the reason (UTF-8, NUL-terminated, may be ""), borrowed */
};

/* The incremental decoder of a server's frames, or of a client's (server = 1). */
struct sbx__ws_decoder {
    uint8_t hdr[14];
    size_t hdr_len, hdr_need;
    int fin, opcode;    /* of the frame being read */
    uint64_t left;      /* its payload bytes still to come */
    int msg_opcode;     /* TEXT or BINARY while a fragmented message is open, else 0 */
    struct sbx_buf msg; /* the data message being reassembled */
    uint8_t ctl[SBX__WS_CONTROL_MAX + 1];
    size_t ctl_len;
    size_t max_message;
    int deliver_msg; /* the message in msg was handed out: reset it on the next call */
    int got_close;   /* a close frame came: nothing may follow */
    int failed;      /* an error was returned: every later call fails the same way */
    int fail_close;  /* the close code an error calls for */
    int server;      /* decoding a client's frames (sbx__ws_init_server): each must be masked */
    uint8_t mask[4]; /* the frame's masking key (server side) */
    uint64_t mask_at;
    struct sbx_error fail;
};

/* max_message bounds a reassembled data message (0: SBX__WS_DEFAULT_MESSAGE). */
void sbx__ws_decoder_init(struct sbx__ws_decoder *d, size_t max_message);
void sbx__ws_decoder_release(struct sbx__ws_decoder *d);
/* Consume from p[0..n): returns the bytes used (> 0 when n > 0; it stops after a complete
 * message, so call again with the rest) and fills *msg (opcode 0 when nothing completed).
 * Errors: SBX_E_PARSE for a protocol error, SBX_E_TOOBIG for a message over the limit; the
 * decoder then stays failed. */
long sbx__ws_decode(struct sbx__ws_decoder *d, const uint8_t *p, size_t n, struct sbx__ws_msg *msg,
                    struct sbx_error *err);
/* Between frames and messages (a connection that ends here was not cut in a frame). */
int sbx__ws_decoder_idle(const struct sbx__ws_decoder *d);

/* ---- a connection: decoder, replies and the close handshake ---- */

enum sbx__ws_state {
    SBX__WS_OPEN,    /* both ways open */
    SBX__WS_CLOSING, /* sbx sent a close frame and waits for the server's */
    SBX__WS_CLOSED,  /* close frames went both ways, or the connection failed: flush ws->out,
                        then close the transport */
};

struct sbx__ws {
    struct sbx__ws_decoder dec;
    struct sbx_buf out; /* frames to send, oldest first: the caller writes and consumes them */
    enum sbx__ws_state state;
    int sent_close;
    int peer_code; /* the server's close code, 0 until it sent one */
    char peer_reason[SBX__WS_CONTROL_MAX];
};

/* max_message as for the decoder; out may hold up to max_message plus 64 KiB of unsent frames
 * (a server pinging faster than the caller drains fails with SBX_E_TOOBIG). */
void sbx__ws_init(struct sbx__ws *ws, size_t max_message);
/* The server side (the sbx-node daemon): the client's frames must be masked and are unmasked,
 * sbx's own frames (replies, data, close) are sent unmasked. Otherwise as sbx__ws_init. */
void sbx__ws_init_server(struct sbx__ws *ws, size_t max_message);
void sbx__ws_release(struct sbx__ws *ws);
/* sbx__ws_decode plus the protocol's own replies: a ping queues its pong, the server's close
 * queues the echo of its code (unless sbx sent one first) and makes the state CLOSED, and a
 * protocol error queues a close frame with the code it calls for and makes the state CLOSED
 * before it is returned. Pings, pongs and the close are still handed out for the caller to see. */
long sbx__ws_recv(struct sbx__ws *ws, const uint8_t *p, size_t n, struct sbx__ws_msg *msg,
                  struct sbx_error *err);
/* Queue one data message (TEXT must be UTF-8) as a single frame. SBX_E_INVAL once sbx has sent
 * its close frame; SBX_E_TOOBIG when ws->out would pass its bound (write it out first). */
int sbx__ws_send(struct sbx__ws *ws, int opcode, const void *p, size_t n, struct sbx_error *err);
/* Queue a ping (payload ≤ 125 bytes). */
int sbx__ws_ping(struct sbx__ws *ws, const void *p, size_t n, struct sbx_error *err);
/* Start the close handshake: queue a close frame with code (1000–1003, 1007–1014 or
 * 3000–4999; 0 sends a close without a code) and reason (may be NULL; UTF-8, at most 123
 * bytes). The state becomes CLOSING, or CLOSED when the server's close already came. Calling
 * it again does nothing. */
int sbx__ws_close(struct sbx__ws *ws, int code, const char *reason, struct sbx_error *err);

/* May a close frame carry this code (RFC 6455 section 7.4)? */
int sbx__ws_close_code_valid(int code);

#endif
