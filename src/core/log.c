#include <stdarg.h>
#include <stdio.h>

#include "sbx/log.h"

/* The library's one mutable global (CONVENTIONS.md): set before threads start, read after. */
static sbx_log_fn *handler;
static void *handler_data;
static enum sbx_log_level handler_max = SBX_LOG_WARN;

void sbx_log_set_handler(sbx_log_fn *fn, void *data, enum sbx_log_level max_level)
{
    handler = fn;
    handler_data = data;
    handler_max = max_level;
}

int sbx_log_enabled(enum sbx_log_level level)
{
    return handler && level <= handler_max;
}

void sbx_log(enum sbx_log_level level, const char *fmt, ...)
{
    if (!sbx_log_enabled(level))
        return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    handler(level, msg, handler_data);
}

void sbx_log_stderr(enum sbx_log_level level, const char *msg, void *data)
{
    static const char *const names[] = {"error", "warning", "info", "debug"};
    (void)data;
    fprintf(stderr, "sbx: %s: %s\n", names[level <= SBX_LOG_DEBUG ? level : SBX_LOG_DEBUG], msg);
}
