/* sbx: base64 (RFC 4648, standard alphabet, padded). */
#ifndef SBX_B64_H
#define SBX_B64_H

#include <stddef.h>

#include "buf.h"
#include "common.h"
#include "error.h"

/* Length of the encoding of n bytes (without NUL). */
SBX_API size_t sbx_b64_encoded_len(size_t n);
/* Append the encoding of data[0..n) to out. Fails only on out's limit. */
SBX_API int sbx_b64_encode(const void *data, size_t n, struct sbx_buf *out, struct sbx_error *err);
/* Decode text[0..n) and append the bytes to out. Whitespace (space, tab, CR, LF) is skipped;
 * any other byte outside the alphabet, bad padding or a truncated group is SBX_E_PARSE naming
 * the offset. */
SBX_API int sbx_b64_decode(const char *text, size_t n, struct sbx_buf *out, struct sbx_error *err);

#endif
