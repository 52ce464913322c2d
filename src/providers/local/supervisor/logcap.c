/* sbx local provider: the supervisor's bounded log. See logcap.h. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "providers/local/supervisor/logcap.h"
#include "sbx/fs.h"
#include "sbx/time.h"

int sbx__logcap_admit(struct sbx__logcap *l, int64_t now_ms)
{
    int64_t burst = (int64_t)(l->burst ? l->burst : SBX__LOGCAP_BURST) * 1000;
    int64_t rate = l->per_sec ? l->per_sec : SBX__LOGCAP_PER_SEC;
    if (!l->started) {
        l->started = 1;
        l->tokens_milli = burst;
        l->last_ms = now_ms;
    }
    if (now_ms > l->last_ms) {
        /* Clamp before multiplying: a long quiet spell must not overflow. */
        int64_t dt = now_ms - l->last_ms;
        if (dt > 3600 * 1000)
            dt = 3600 * 1000;
        l->tokens_milli += dt * rate;
        if (l->tokens_milli > burst)
            l->tokens_milli = burst;
        l->last_ms = now_ms;
    }
    if (l->tokens_milli < 1000) {
        l->suppressed++;
        return 0;
    }
    l->tokens_milli -= 1000;
    return 1;
}

/* Append line unless that passes the cap; at the cap, write the final line once. */
static void put(struct sbx__logcap *l, const char *line, size_t n)
{
    uint64_t cap = l->max_bytes ? l->max_bytes : SBX__LOGCAP_MAX_BYTES;
    static const char last[] = "sbx: warning: log size limit reached: later messages dropped\n";
    struct stat st;
    if (l->truncated || fstat(l->fd, &st) < 0)
        return;
    /* Room is kept for the final line, so the file never passes the cap (per writer). */
    if ((uint64_t)st.st_size + n + sizeof(last) > cap) {
        l->truncated = 1;
        (void)sbx_fd_write_all(l->fd, last, sizeof(last) - 1, NULL);
        return;
    }
    (void)sbx_fd_write_all(l->fd, line, n, NULL);
}

void sbx__logcap_handler(enum sbx_log_level level, const char *msg, void *data)
{
    static const char *const names[] = {"error", "warning", "info", "debug"};
    struct sbx__logcap *l = data;
    char line[2304];
    if (l->truncated || !sbx__logcap_admit(l, sbx_time_mono_ns() / 1000000))
        return;
    if (l->suppressed) {
        int n = snprintf(line, sizeof(line),
                         "sbx: warning: %llu messages suppressed (more than %u per second)\n",
                         (unsigned long long)l->suppressed,
                         l->per_sec ? l->per_sec : SBX__LOGCAP_PER_SEC);
        l->suppressed = 0;
        put(l, line, (size_t)n);
    }
    int n = snprintf(line, sizeof(line), "sbx: %s: %s\n",
                     names[level <= SBX_LOG_DEBUG ? level : SBX_LOG_DEBUG], msg);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof(line)) {
        n = (int)sizeof(line) - 1;
        line[n - 1] = '\n';
    }
    put(l, line, (size_t)n);
}
