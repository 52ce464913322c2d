/* sbx: bounding command output for the model, and the shell tools' response text.
 *
 * Output is measured in approximate tokens: one token per 4 bytes of UTF-8, rounded up (the
 * reference's estimate, kept for output parity). Text over the budget keeps its head and its
 * tail, split evenly, and the middle becomes a marker saying how much was dropped:
 *
 *   Total output lines: <n>\n\n<head>…<k> tokens truncated…<tail>
 *
 * The result never exceeds max_tokens * 4 bytes, except that the marker is never cut: with a
 * budget too small for it, the marker alone is returned (the reference cut it to "…6 tok").
 *
 * exec_command and write_stdin answer with this layout (one section per line):
 *
 *   Chunk ID: <6 hex digits>
 *   Wall time: <seconds, 4 decimals> seconds
 *   Process exited with code <n>              only when it exited
 *   Process running with session ID <id>      only while it runs
 *   Original token count: <n>                 only when the output was truncated
 *   Output:
 *   <output> */
#ifndef SBX_TRUNCATE_H
#define SBX_TRUNCATE_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "common.h"
#include "error.h"

/* Default output budget for a shell tool call when the model gives none. */
#define SBX_TRUNCATE_DEFAULT_TOKENS  10000
#define SBX_TRUNCATE_BYTES_PER_TOKEN 4

/* ceil(bytes / 4). */
SBX_API size_t sbx_truncate_estimate_tokens(size_t bytes);

/* Number of lines as Python's str.splitlines() counts them (separators \n, \r, \r\n, \v, \f,
 * \x1c-\x1e, U+0085, U+2028, U+2029; a final separator does not start a new line). */
SBX_API size_t sbx_truncate_count_lines(const char *text, size_t len);

/* Append text[0..len) to out, replacing every ill-formed UTF-8 sequence with U+FFFD (one per
 * maximal invalid subpart, as Python's errors="replace" does). Fails only on out's limit. */
SBX_API int sbx_truncate_fix_utf8(const char *text, size_t len, struct sbx_buf *out,
                                  struct sbx_error *err);

/* Append text[0..len) (UTF-8) to out, truncated to max_tokens as described above; cuts only on
 * character boundaries. *orig_tokens (may be NULL) receives the estimate of the whole text
 * when it was truncated, 0 when it fit. Fails only on out's limit. */
SBX_API int sbx_truncate_tokens(const char *text, size_t len, size_t max_tokens,
                                struct sbx_buf *out, size_t *orig_tokens, struct sbx_error *err);

/* A shell tool response, as plain data. */
struct sbx_truncate_response {
    /* 6 lowercase hex digits; NULL for a random one. Borrowed. */
    const char *chunk_id;
    double wall_time; /* seconds */
    int exited;       /* exit_code is set */
    int exit_code;
    int running; /* session_id is set (the process outlived the yield time) */
    int64_t session_id;
    /* Raw output bytes (any encoding; ill-formed UTF-8 is repaired). Borrowed. */
    const char *output;
    size_t output_len;
    /* Budget in tokens; 0 means SBX_TRUNCATE_DEFAULT_TOKENS. */
    size_t max_tokens;
};

/* Append the response text to out: repair the output's UTF-8, truncate it to the budget
 * (adding "Original token count" when it was cut), and lay out the sections as above. Fails
 * only on out's limit. */
SBX_API int sbx_truncate_format_response(const struct sbx_truncate_response *r, struct sbx_buf *out,
                                         struct sbx_error *err);

#endif
