/* sbx: text from a model or a sandbox, made safe to print on a terminal. Escape sequences
 * (cursor moves, title changes, OSC 52 clipboard writes) and other control characters are shown
 * as visible escapes instead of reaching the terminal; printable text, including multi-byte
 * UTF-8, is unchanged. */
#ifndef SBX_TERM_H
#define SBX_TERM_H

#include <stddef.h>

#include "common.h"

/* Escape s[0..n): C0 controls but \n and \t, DEL and bytes that are not valid UTF-8 become
 * "\xHH"; C1 controls (U+0080 to U+009F) and the bidirectional overrides (U+202A to U+202E,
 * U+2066 to U+2069) become "\uHHHH". With partial (streamed text), a UTF-8 sequence cut at the end
 * is left for the next call: *used (may be NULL) receives how many bytes were consumed.
 * Returns a NUL-terminated string of at most 4 * n bytes; caller owns (free). */
SBX_API char *sbx_term_escape(const char *s, size_t n, int partial, size_t *used);

#endif
