/* sbx internal: Docker's multiplexed stream (the output of a command run without a terminal,
 * and the attach stream): frames of an 8-byte header [stream type 0/1/2, 0, 0, 0, length as a
 * 32-bit big-endian number] followed by that many payload bytes.
 *
 * The decoder never buffers a payload: it hands out the pieces of each frame that it is fed, so
 * a frame claiming 4 GiB allocates nothing. A header with another stream type or non-zero
 * padding is SBX_E_PARSE; a frame longer than the caller's limit is SBX_E_TOOBIG. */
#ifndef SBX_SANDBOX_WIRE_MUX_H
#define SBX_SANDBOX_WIRE_MUX_H

#include <stddef.h>
#include <stdint.h>

#include "sbx/error.h"

enum { SBX__MUX_STDIN = 0, SBX__MUX_STDOUT = 1, SBX__MUX_STDERR = 2 };

#define SBX__MUX_HEADER 8

struct sbx__mux {
    uint8_t hdr[SBX__MUX_HEADER];
    size_t hdr_len;
    uint32_t left;      /* payload bytes of the current frame still to come */
    int stream;         /* of the current frame */
    uint32_t max_frame; /* 0: any length */
};

/* max_frame bounds one frame's length (0: no bound; nothing is buffered either way). */
void sbx__mux_init(struct sbx__mux *m, uint32_t max_frame);
/* Consume from p[0..n): returns the bytes used (> 0 when n > 0) and sets *payload and *plen to
 * a piece of payload within them (plen 0: only header bytes were used) of stream *stream.
 * SBX_E_PARSE for a header that is not one, SBX_E_TOOBIG for a frame over max_frame. */
long sbx__mux_feed(struct sbx__mux *m, const uint8_t *p, size_t n, int *stream,
                   const uint8_t **payload, size_t *plen, struct sbx_error *err);
/* Between frames (a stream may end here). */
int sbx__mux_idle(const struct sbx__mux *m);
/* The stream ended: 0 between frames, else SBX_E_PARSE naming where it was cut. */
int sbx__mux_finish(const struct sbx__mux *m, struct sbx_error *err);
/* Write the header of a frame of len bytes on stream (the engine's side, for tests and fakes). */
void sbx__mux_header(uint8_t out[SBX__MUX_HEADER], int stream, uint32_t len);

#endif
