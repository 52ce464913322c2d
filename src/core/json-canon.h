/* The canonical text of a JSON value written straight to a buffer: the very bytes jansson's
 * json_dumps(v, JSON_SORT_KEYS | JSON_COMPACT | JSON_ENCODE_ANY) gives, without its sort
 * arrays, string buffer and per-piece callbacks. Run-state digests and log records are taken
 * over this text (docs/internals/runstate.md, "Digest"). */
#ifndef SBX_CORE_JSON_CANON_H
#define SBX_CORE_JSON_CANON_H
#include <jansson.h>

#include "sbx/buf.h"
#include "sbx/error.h"

/* Appends v's canonical text to out: keys sorted byte-wise, no whitespace, strings escaped as
 * jansson escapes them (", \, \b \f \n \r \t, other control characters as \u00XX with upper-case
 * hex; non-ASCII as UTF-8, '/' as is), integers in decimal, reals as jansson's "%.17g" form
 * (".0" added to a whole number, no '+' or leading zeros in the exponent). Fails, leaving out as
 * it was, on out's limit, on a string that is not UTF-8, on a real that is not finite and past
 * a depth of 2048 (where json_dumps fails too). */
int sbx__json_canon(const json_t *v, struct sbx_buf *out, struct sbx_error *err);

/* Appends s[0..n) as a canonical JSON string, quotes included. */
int sbx__json_canon_string(const char *s, size_t n, struct sbx_buf *out, struct sbx_error *err);

/* Appends the decimal text of i. */
int sbx__json_canon_int(long long i, struct sbx_buf *out, struct sbx_error *err);
#endif
