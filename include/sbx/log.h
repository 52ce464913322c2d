/* sbx: logging. The library's calls never print (the exceptions, allocation failure, SBX_BUG
 * and the program entry points of local.h, are listed in docs/internals/core.md); it hands
 * messages to a process-wide handler the application sets. The default handler discards everything.
 * This handler is the one mutable global of the library; set it before starting threads. */
#ifndef SBX_LOG_H
#define SBX_LOG_H

#include "common.h"

enum sbx_log_level {
    SBX_LOG_ERROR = 0,
    SBX_LOG_WARN,
    SBX_LOG_INFO,
    SBX_LOG_DEBUG,
};

/* msg is borrowed for the duration of the call and carries no trailing newline. */
typedef void sbx_log_fn(enum sbx_log_level level, const char *msg, void *data);

/* Install handler (NULL restores the silent default) and the most verbose level passed to it. */
SBX_API void sbx_log_set_handler(sbx_log_fn *fn, void *data, enum sbx_log_level max_level);
SBX_API void sbx_log(enum sbx_log_level level, const char *fmt, ...) SBX_PRINTF(2, 3);
/* True when a message at level would reach the handler (to skip costly formatting). */
SBX_API int sbx_log_enabled(enum sbx_log_level level);
/* A ready-made handler writing "sbx: <level>: <msg>\n" to stderr. */
SBX_API void sbx_log_stderr(enum sbx_log_level level, const char *msg, void *data);

#endif
