/* sbx internal: the Kubernetes remote-command channel protocol over WebSocket messages
 * (pods/exec and pods/attach), and the port-forward channel layout (pods/portforward).
 *
 * Each WebSocket message carries one channel: its first byte is the channel id and the rest is
 * that channel's data. Binary messages for v1-v5; the base64 protocol sends text messages whose
 * first character is the id as an ASCII digit and the rest base64. Ids: 0 stdin, 1 stdout,
 * 2 stderr, 3 the error channel (v4 and v5: a Status object ending the command; v1-v3: the
 * error as text), 4 resize (v3 on: {"Width":W,"Height":H}), and in v5 255 a close signal
 * naming the channel that will send nothing more.
 *
 * Both directions are here so that sbx's own node daemon speaks the same protocol: a decoder
 * and an encoder for every message, whichever side sends it. Every server message is hostile
 * input: unknown ids, a message of the wrong type, a bad base64 text, a status that does not
 * parse are SBX_E_PARSE with a message naming what was wrong. */
#ifndef SBX_SANDBOX_WIRE_CHANNEL_H
#define SBX_SANDBOX_WIRE_CHANNEL_H

#include <stddef.h>
#include <stdint.h>

#include "sbx/buf.h"
#include "sbx/error.h"

enum sbx__ch_version {
    SBX__CH_V1 = 1,     /* channel.k8s.io */
    SBX__CH_V2 = 2,     /* v2.channel.k8s.io */
    SBX__CH_V3 = 3,     /* v3.channel.k8s.io: resize */
    SBX__CH_V4 = 4,     /* v4.channel.k8s.io: Status on the error channel */
    SBX__CH_V5 = 5,     /* v5.channel.k8s.io: close signal */
    SBX__CH_BASE64 = 6, /* base64.channel.k8s.io: v1 in text messages */
};

enum {
    SBX__CH_NONE = -1, /* an empty message: no channel, nothing to do */
    SBX__CH_STDIN = 0,
    SBX__CH_STDOUT = 1,
    SBX__CH_STDERR = 2,
    SBX__CH_ERROR = 3,
    SBX__CH_RESIZE = 4,
    SBX__CH_CLOSE = 255,
};

/* The subprotocols sbx offers for exec, most preferred first, NULL-terminated. */
extern const char *const sbx__ch_exec_protocols[];

/* The version a subprotocol name stands for, 0 when it is none of these. */
int sbx__ch_version_of(const char *protocol);
/* The subprotocol name of a version ("v5.channel.k8s.io"), NULL for an unknown version. */
const char *sbx__ch_protocol(int version);
/* The WebSocket opcode that version's messages use (SBX__WS_TEXT or SBX__WS_BINARY). */
int sbx__ch_opcode(int version);

/* Payloads of the status and resize channels are limited to this many bytes. */
#define SBX__CH_STATUS_MAX 65536

struct sbx__ch_frame {
    int channel;         /* SBX__CH_NONE for an empty message */
    const uint8_t *data; /* the channel's data, borrowed from the message or from scratch */
    size_t len;
    int closed; /* SBX__CH_CLOSE: the channel that will send nothing more */
};

/* Decode one received message (opcode: the WebSocket opcode it came with). scratch receives
 * the decoded bytes of a base64 message (reset first; its limit bounds them). */
int sbx__ch_decode(int version, int opcode, const uint8_t *msg, size_t n, struct sbx_buf *scratch,
                   struct sbx__ch_frame *out, struct sbx_error *err);
/* Append the message carrying p[0..n) on channel to out (send it with sbx__ch_opcode). The
 * channel must exist in that version (SBX_E_INVAL otherwise). */
int sbx__ch_encode(int version, int channel, const void *p, size_t n, struct sbx_buf *out,
                   struct sbx_error *err);
/* Append v5's close signal for channel (SBX_E_UNSUPPORTED before v5). */
int sbx__ch_encode_close(int version, int channel, struct sbx_buf *out, struct sbx_error *err);

/* The error channel's content once the stream ended: *exit_code 0 for success ("Success", or
 * nothing at all before v4), the code of a "NonZeroExitCode" failure (1-255); any other failure is
 * SBX_E_API with the server's reason and message; before v4 a non-empty text is that error.
 * A status that does not parse, or v4/v5 with nothing on the channel, is SBX_E_PARSE. */
int sbx__ch_status_decode(int version, const uint8_t *p, size_t n, int *exit_code,
                          struct sbx_error *err);
/* The error channel's content for a command that ended with exit_code 0-255 (the node daemon's
 * side); message (may be NULL) replaces the standard one of a failure. Before v4 a success is
 * empty. In v4/v5 a command killed by signal (1-64; 0: none) adds the cause
 * {"reason":"Signal","message":"N"} after its "ExitCode" (128+N), and one ended by its deadline
 * {"reason":"TimedOut"} (a success then carries the causes too); before v4 they are dropped. */
int sbx__ch_status_encode(int version, int exit_code, int signal, int timed_out,
                          const char *message, struct sbx_buf *out, struct sbx_error *err);
/* The causes beyond the exit code in a v4/v5 status that sbx__ch_status_decode accepted:
 * *signal 1-64 and *timed_out 1, or both 0 when the status has no such cause (a server that
 * does not send them: the exit code alone, 128+N for a signal, tells what is known). A Signal
 * cause without a number from 1 to 64 is SBX_E_PARSE. */
int sbx__ch_status_causes(int version, const uint8_t *p, size_t n, int *signal, int *timed_out,
                          struct sbx_error *err);

/* The resize channel's content: {"Width":W,"Height":H}, each 0-65535. */
int sbx__ch_resize_encode(unsigned width, unsigned height, struct sbx_buf *out,
                          struct sbx_error *err);
int sbx__ch_resize_decode(const uint8_t *p, size_t n, unsigned *width, unsigned *height,
                          struct sbx_error *err);

/* ---- port forwarding: "portforward.k8s.io", binary messages ----
 * For the i-th requested port, channel 2i carries its data and 2i+1 its errors (text). The
 * server starts each channel with the port number, 2 bytes little-endian; the client sends
 * data only. */

#define SBX__PF_PROTOCOL  "portforward.k8s.io"
#define SBX__PF_MAX_PORTS 64

struct sbx__pf {
    size_t nports;
    uint16_t ports[SBX__PF_MAX_PORTS];
    int server;                                /* this side sends the port prefixes */
    uint8_t rx_seen[2 * SBX__PF_MAX_PORTS];    /* prefix bytes received per channel (0-2) */
    uint16_t rx_port[2 * SBX__PF_MAX_PORTS];   /* what they said so far */
    uint8_t tx_started[2 * SBX__PF_MAX_PORTS]; /* the prefix went out on this channel */
};

struct sbx__pf_frame {
    size_t port_index;
    int is_error;        /* the port's error channel */
    const uint8_t *data; /* the data after any prefix, borrowed from the message */
    size_t len;
};

/* ports[0..n): 1 to SBX__PF_MAX_PORTS non-zero ports. server: this side is the server. */
int sbx__pf_init(struct sbx__pf *pf, const uint16_t *ports, size_t n, int server,
                 struct sbx_error *err);
/* Decode one received binary message. On the client side the first bytes of each channel must
 * be its port (they may come alone or split); a different port is SBX_E_PARSE. */
int sbx__pf_decode(struct sbx__pf *pf, const uint8_t *msg, size_t n, struct sbx__pf_frame *out,
                   struct sbx_error *err);
/* Append the message carrying p[0..n) on port_index's data or error channel; the server side
 * puts the port first on the first message of each channel. */
int sbx__pf_encode(struct sbx__pf *pf, size_t port_index, int is_error, const void *p, size_t n,
                   struct sbx_buf *out, struct sbx_error *err);

#endif
