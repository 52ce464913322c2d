/* sbx internal: an incremental Server-Sent Events parser (WHATWG event-stream rules), part of
 * the remote layer (docs/internals/wire.md): the model layer reads its streams with it, and so
 * can the providers below it.
 *
 * Bytes are fed in arbitrary pieces; complete events are handed to a callback. Lines end in
 * LF, CRLF or CR (a CR at the end of one piece followed by LF at the start of the next counts
 * once). Comment lines (":") are ignored, several "data:" lines join with "\n", an event is
 * dispatched at a blank line, and an event whose data would exceed the size limit fails with
 * SBX_E_TOOBIG. An event not terminated by a blank line when the stream ends is never
 * dispatched: sbx__sse_finish() reports it so a cut stream is told apart from a complete one. */
#ifndef SBX_SANDBOX_WIRE_SSE_H
#define SBX_SANDBOX_WIRE_SSE_H

#include <stddef.h>

#include "sbx/buf.h"
#include "sbx/error.h"

/* event is "message" when the stream named none; data is NUL-terminated with length n.
 * Both are borrowed for the call. A negative return stops parsing and is passed back. */
typedef int sbx__sse_fn(const char *event, const char *data, size_t n, void *ud,
                        struct sbx_error *err);

struct sbx__sse {
    struct sbx_buf line;  /* current partial line */
    struct sbx_buf data;  /* data of the event being assembled */
    struct sbx_buf event; /* event name of the event being assembled */
    int skip_lf;          /* previous piece ended in CR: drop one leading LF */
    int has_data;         /* a data field has been seen in this event */
    size_t events;        /* events dispatched so far */
    sbx__sse_fn *fn;
    void *ud;
};

/* max_event bounds one line and one event's data. Cannot fail. */
void sbx__sse_init(struct sbx__sse *p, size_t max_event, sbx__sse_fn *fn, void *ud);
void sbx__sse_release(struct sbx__sse *p);
/* Feed bytes. Returns 0, the callback's negative return, or SBX_E_TOOBIG. */
int sbx__sse_feed(struct sbx__sse *p, const char *bytes, size_t n, struct sbx_error *err);
/* The stream ended. Returns 0 when nothing was pending, else SBX_E_PARSE "stream ended in the
 * middle of an event". */
int sbx__sse_finish(struct sbx__sse *p, struct sbx_error *err);

#endif
