/* sbx local provider: the supervisor's bounded log. See logcap.h. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <time.h>
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

/* ---- the helper log pump: async-signal-safe only ---- */

static size_t put_u64(char *out, uint64_t v)
{
    char tmp[24];
    size_t n = 0, k = 0;
    do
        tmp[n++] = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    while (n)
        out[k++] = tmp[--n];
    return k;
}

static void write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        p += w;
        n -= (size_t)w;
    }
}

static int open_log(const char *path)
{
    return open(path, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);
}

/* Append line, first moving a full file to path.1 (path.1 is at most path_len + 3 bytes). */
static void pump_put(struct sbx__logcap *l, const char *path, const char *line, size_t n)
{
    uint64_t cap = l->max_bytes ? l->max_bytes : SBX__LOGCAP_HELPER_MAX_BYTES;
    struct stat st;
    if (l->fd < 0 || fstat(l->fd, &st) < 0)
        return;
    if ((uint64_t)st.st_size + n > cap && st.st_size > 0) {
        char old[4096];
        size_t pl = strlen(path);
        if (pl + 3 > sizeof(old))
            return;
        memcpy(old, path, pl);
        memcpy(old + pl, ".1", 3);
        close(l->fd);
        (void)rename(path, old);
        l->fd = open_log(path);
        if (l->fd < 0)
            return;
    }
    write_all(l->fd, line, n > cap ? (size_t)cap : n);
}

/* The count of lines the bucket dropped since the last written, as one line. */
static void pump_summary(struct sbx__logcap *l, const char *path)
{
    static const char head[] = "sbx: warning: ", tail[] = " lines suppressed (more than ",
                      end[] = " per second)\n";
    char sum[128];
    size_t k = 0;
    memcpy(sum, head, sizeof(head) - 1);
    k += sizeof(head) - 1;
    k += put_u64(sum + k, l->suppressed);
    memcpy(sum + k, tail, sizeof(tail) - 1);
    k += sizeof(tail) - 1;
    k += put_u64(sum + k, l->per_sec ? l->per_sec : SBX__LOGCAP_PER_SEC);
    memcpy(sum + k, end, sizeof(end) - 1);
    k += sizeof(end) - 1;
    l->suppressed = 0;
    pump_put(l, path, sum, k);
}

static void pump_line(struct sbx__logcap *l, const char *path, const char *line, size_t n)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    if (!sbx__logcap_admit(l, (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000))
        return;
    if (l->suppressed)
        pump_summary(l, path);
    pump_put(l, path, line, n);
}

void sbx__logcap_pump(int in_fd, const char *path, struct sbx__logcap *l)
{
    char buf[8192];
    size_t have = 0;
    l->fd = open_log(path);
    for (;;) {
        ssize_t r = read(in_fd, buf + have, sizeof(buf) - have);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        have += (size_t)r;
        size_t start = 0;
        for (size_t i = 0; i < have; i++)
            if (buf[i] == '\n') {
                pump_line(l, path, buf + start, i + 1 - start);
                start = i + 1;
            }
        if (start == 0 && have == sizeof(buf)) { /* a line longer than the buffer: cut */
            buf[have - 1] = '\n';
            pump_line(l, path, buf, have);
            start = have;
        }
        memmove(buf, buf + start, have - start);
        have -= start;
    }
    if (have) { /* the last line, without its newline */
        if (have == sizeof(buf))
            have--;
        buf[have++] = '\n';
        pump_line(l, path, buf, have);
    }
    if (l->suppressed)
        pump_summary(l, path);
    if (l->fd >= 0)
        close(l->fd);
    l->fd = -1;
}
