/* sbx internal: a newline-delimited JSON stream decoder (one JSON value per line, as Docker's
 * progress and event streams and several sandbox services send).
 *
 * Bytes are fed in arbitrary pieces; each complete line is parsed and handed to a callback.
 * Lines end in LF; a CR before the LF is dropped. Blank lines (spaces and tabs only) are
 * skipped. A line longer than the limit is SBX_E_TOOBIG as soon as it passes the limit (nothing
 * more of it is buffered), a line that is not one JSON value is SBX_E_PARSE naming its line
 * number. A last line without its LF when the stream ends is reported by sbx__ndjson_finish(),
 * so a cut stream is told apart from a complete one. */
#ifndef SBX_SANDBOX_WIRE_NDJSON_H
#define SBX_SANDBOX_WIRE_NDJSON_H

#include <stddef.h>
#include <jansson.h>

#include "sbx/buf.h"
#include "sbx/error.h"

/* v is borrowed for the call (json_incref to keep it); line counts from 1. A negative return
 * stops the decoder and is passed back. */
typedef int sbx__ndjson_fn(json_t *v, size_t line, void *ud, struct sbx_error *err);

struct sbx__ndjson {
    struct sbx_buf line; /* the partial line */
    size_t lineno;       /* lines completed so far */
    size_t max_line;
    int max_depth;
    int allow_nul; /* set after init: NUL (\u0000) allowed in strings (a command's output) */
    int failed;
    sbx__ndjson_fn *fn;
    void *ud;
};

/* max_line bounds one line (CR included), max_depth the nesting of a value (0: the JSON
 * reader's default). Cannot fail. */
void sbx__ndjson_init(struct sbx__ndjson *d, size_t max_line, int max_depth, sbx__ndjson_fn *fn,
                      void *ud);
void sbx__ndjson_release(struct sbx__ndjson *d);
/* Feed bytes. Returns 0, the callback's negative return, SBX_E_TOOBIG or SBX_E_PARSE; after
 * an error every call fails. */
int sbx__ndjson_feed(struct sbx__ndjson *d, const char *p, size_t n, struct sbx_error *err);
/* The stream ended: 0 when no partial line is pending (blank counts as none), else
 * SBX_E_PARSE "stream ended in the middle of line N". */
int sbx__ndjson_finish(struct sbx__ndjson *d, struct sbx_error *err);

#endif
