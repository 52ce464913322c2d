/* sbx: growable byte buffer with a hard size limit.
 *
 * Invariants: data is never NULL after init (it points at a static "" until the first growth),
 * data[len] == '\0' always, len <= max. Binary data is fine; the trailing NUL is a convenience.
 * Growing past max fails with SBX_E_TOOBIG and leaves the buffer unchanged. */
#ifndef SBX_BUF_H
#define SBX_BUF_H

#include <stdarg.h>
#include <stddef.h>

#include "common.h"
#include "error.h"

struct sbx_buf {
    char *data; /* read-only for callers; valid until the next call that changes the buffer */
    size_t len; /* bytes held, excluding the NUL */
    size_t cap; /* private */
    size_t max; /* private: hard limit on len */
};

#define SBX_BUF_NOLIMIT ((size_t)-1 / 2)

/* Initialise an empty buffer whose length may never exceed max. Cannot fail, allocates nothing. */
SBX_API void sbx_buf_init(struct sbx_buf *b, size_t max);
/* Free the memory; the buffer is left initialised and empty (same max). */
SBX_API void sbx_buf_release(struct sbx_buf *b);
/* len = 0, keep the memory. */
SBX_API void sbx_buf_reset(struct sbx_buf *b);

/* Append n bytes. SBX_E_TOOBIG if the result would exceed max. */
SBX_API SBX_NODISCARD int sbx_buf_add(struct sbx_buf *b, const void *p, size_t n,
                                      struct sbx_error *err);
SBX_API SBX_NODISCARD int sbx_buf_adds(struct sbx_buf *b, const char *s, struct sbx_error *err);
SBX_API SBX_NODISCARD int sbx_buf_addch(struct sbx_buf *b, char c, struct sbx_error *err);
SBX_API int sbx_buf_addf(struct sbx_buf *b, struct sbx_error *err, const char *fmt, ...)
        SBX_PRINTF(3, 4);
SBX_API int sbx_buf_vaddf(struct sbx_buf *b, struct sbx_error *err, const char *fmt, va_list ap)
        SBX_PRINTF(3, 0);
/* Make room for n more bytes without changing len; returns 0 or SBX_E_TOOBIG. Afterwards
 * b->data + b->len has at least n writable bytes (plus the NUL slot); call sbx_buf_setlen. */
SBX_API SBX_NODISCARD int sbx_buf_reserve(struct sbx_buf *b, size_t n, struct sbx_error *err);
/* Set len (<= cap) after writing into reserved space; writes the NUL. */
SBX_API void sbx_buf_setlen(struct sbx_buf *b, size_t len);
/* Drop the first n bytes (n <= len). */
SBX_API void sbx_buf_consume(struct sbx_buf *b, size_t n);

/* Never NULL. Borrowed, valid until the buffer changes. */
SBX_API const char *sbx_buf_cstr(const struct sbx_buf *b);
/* Hand out the bytes (caller owns, free with free(); never NULL) and reinitialise b.
 * *len (may be NULL) receives the length. */
SBX_API char *sbx_buf_detach(struct sbx_buf *b, size_t *len);

#endif
