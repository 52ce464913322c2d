/* sbx internal: the head of an HTTP/1.1 response, read by sbx itself where libcurl is only the
 * transport (an upgraded connection, conn.h): the status line and the header fields.
 *
 * Hostile input (docs/internals/wire.md, "Threat model"): the head is at most SBX__HEAD_MAX
 * bytes and SBX__HEAD_FIELDS fields; the status line must be "HTTP/1.x DDD reason" (a status of
 * three digits, 100-599); a field is "name: value" with a token name; obsolete line folding, a
 * NUL, a bare CR, control characters in a value, and a Content-Length that is not one decimal
 * number (or two that differ) are SBX_E_PARSE naming what was wrong. Names are compared without
 * case; values keep their bytes, without surrounding spaces. */
#ifndef SBX_SANDBOX_WIRE_HEAD_H
#define SBX_SANDBOX_WIRE_HEAD_H

#include <stddef.h>
#include <stdint.h>

#include "sbx/error.h"

#define SBX__HEAD_MAX    16384 /* bytes, through the blank line */
#define SBX__HEAD_FIELDS 100

struct sbx__head_field {
    const char *name, *value; /* NUL-terminated, within the head's copy */
};

struct sbx__http_head {
    int status;      /* 100-599 */
    int minor;       /* HTTP/1.<minor> */
    char reason[64]; /* cleaned (sbx__wire_clean) and cut */
    size_t n_fields;
    struct sbx__head_field fields[SBX__HEAD_FIELDS];
    char *text;             /* owned: the head's copy the fields point into */
    int64_t content_length; /* -1 when absent */
    int chunked;            /* Transfer-Encoding ends in "chunked" */
};

/* The length of the head (through its blank line, CRLF or LF line ends) at the start of
 * p[0..n): 0 while it is not complete, SBX_E_TOOBIG once n reaches SBX__HEAD_MAX without one. */
long sbx__head_len(const char *p, size_t n, struct sbx_error *err);
/* Parse a complete head of len bytes (from sbx__head_len) into *out (released by the caller
 * with sbx__head_release, on success only). */
int sbx__head_parse(const char *p, size_t len, struct sbx__http_head *out, struct sbx_error *err);
void sbx__head_release(struct sbx__http_head *h);
/* The value of the first field called name (any case), or NULL. */
const char *sbx__head_get(const struct sbx__http_head *h, const char *name);

#endif
