/* sbx: attributes and allocation helpers shared by every module.
 *
 * Out of memory is not an error sbx reports: the sbx_x* allocators abort the process with a
 * message on stderr, as bubblewrap, git and Redis do. Sizes that come from outside the process
 * must be checked against explicit limits before they reach an allocator (SBX_E_TOOBIG). */
#ifndef SBX_COMMON_H
#define SBX_COMMON_H

#include <stddef.h>

#if defined(__GNUC__)
#    define SBX_API          __attribute__((visibility("default")))
#    define SBX_PRINTF(f, a) __attribute__((format(printf, f, a)))
#    define SBX_NODISCARD    __attribute__((warn_unused_result))
#    define SBX_NORETURN     __attribute__((noreturn))
#else
#    define SBX_API
#    define SBX_PRINTF(f, a)
#    define SBX_NODISCARD
#    define SBX_NORETURN
#endif

#define SBX_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Allocate or abort. Never return NULL. sbx_xmalloc(0) returns a valid unique pointer. */
SBX_API void *sbx_xmalloc(size_t n);
SBX_API void *sbx_xcalloc(size_t nmemb, size_t size);
SBX_API void *sbx_xrealloc(void *p, size_t n);
/* Copy a NUL-terminated string; caller owns (free with free()). */
SBX_API char *sbx_xstrdup(const char *s);
/* Copy n bytes and add a NUL; caller owns (free with free()). */
SBX_API char *sbx_xstrndup(const char *s, size_t n);
/* printf into a fresh string; caller owns (free with free()). */
SBX_API char *sbx_xasprintf(const char *fmt, ...) SBX_PRINTF(1, 2);

/* Abort with file:line: for states that cannot happen unless sbx itself is wrong. */
SBX_API SBX_NORETURN void sbx__bug(const char *file, int line, const char *fmt, ...)
        SBX_PRINTF(3, 4);
#define SBX_BUG(...) sbx__bug(__FILE__, __LINE__, __VA_ARGS__)

#endif
