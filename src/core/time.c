/* Clocks, deadlines, RFC 3339 timestamps and human durations. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <time.h>

#include "sbx/time.h"

static int64_t clock_ns(clockid_t id)
{
    struct timespec ts;
    if (clock_gettime(id, &ts) < 0)
        SBX_BUG("clock_gettime(%d) failed", (int)id);
    return (int64_t)ts.tv_sec * SBX_NS_PER_S + ts.tv_nsec;
}

int64_t sbx_time_mono_ns(void)
{
    return clock_ns(CLOCK_MONOTONIC);
}

int64_t sbx_time_real_ns(void)
{
    return clock_ns(CLOCK_REALTIME);
}

int64_t sbx_deadline_after_ms(int64_t timeout_ms)
{
    if (timeout_ms < 0)
        return INT64_MAX;
    int64_t now = sbx_time_mono_ns();
    if (timeout_ms > (INT64_MAX - now) / SBX_NS_PER_MS)
        return INT64_MAX - 1; /* far future, but still a deadline rather than "none" */
    return now + timeout_ms * SBX_NS_PER_MS;
}

int sbx_deadline_poll_ms(int64_t deadline)
{
    if (deadline == INT64_MAX)
        return -1;
    int64_t left = deadline - sbx_time_mono_ns();
    if (left <= 0)
        return 0;
    /* round up so poll does not wake just before the deadline and spin */
    int64_t ms = left / SBX_NS_PER_MS + (left % SBX_NS_PER_MS != 0);
    return ms > INT_MAX ? INT_MAX : (int)ms;
}

void sbx_sleep_ms(int64_t ms)
{
    if (ms <= 0)
        return;
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

void sbx_time_rfc3339(int64_t real_ns, char out[SBX_TIME_RFC3339_LEN])
{
    /* floor division, so instants before 1970 keep a non-negative millisecond part */
    int64_t sec = real_ns / SBX_NS_PER_S;
    int64_t rem = real_ns % SBX_NS_PER_S;
    if (rem < 0) {
        rem += SBX_NS_PER_S;
        sec--;
    }
    time_t t = (time_t)sec;
    struct tm tm;
    if (!gmtime_r(&t, &tm)) {
        snprintf(out, SBX_TIME_RFC3339_LEN, "invalid-time");
        return;
    }
    size_t n = strftime(out, SBX_TIME_RFC3339_LEN - 5, "%Y-%m-%dT%H:%M:%S", &tm);
    if (n == 0) {
        snprintf(out, SBX_TIME_RFC3339_LEN, "invalid-time");
        return;
    }
    snprintf(out + n, SBX_TIME_RFC3339_LEN - n, ".%03uZ", (unsigned)(rem / SBX_NS_PER_MS) % 1000u);
}

int sbx_duration_parse_ms(const char *s, int64_t *out_ms)
{
    /* Fixed-point parse: the integer part and up to six fraction digits in millionths, so "1.5"
     * and "0.001" are exact and no floating point rounding is involved. */
    const char *p = s;
    int64_t whole = 0, frac = 0, frac_scale = 1000000;
    int digits = 0;
    while (*p >= '0' && *p <= '9') {
        if (whole > (INT64_MAX - 9) / 10)
            return -1;
        whole = whole * 10 + (*p - '0');
        p++;
        digits++;
    }
    if (*p == '.') {
        p++;
        int fdigits = 0;
        while (*p >= '0' && *p <= '9') {
            if (frac_scale > 1) {
                frac_scale /= 10;
                frac += (*p - '0') * frac_scale;
            }
            p++;
            fdigits++;
        }
        if (fdigits == 0)
            return -1;
        digits += fdigits;
    }
    if (digits == 0)
        return -1;
    int64_t unit_ms;
    if (*p == '\0' || (p[0] == 's' && p[1] == '\0'))
        unit_ms = 1000;
    else if (p[0] == 'm' && p[1] == 's' && p[2] == '\0')
        unit_ms = 1;
    else if (p[0] == 'm' && p[1] == '\0')
        unit_ms = 60 * 1000;
    else if (p[0] == 'h' && p[1] == '\0')
        unit_ms = 3600 * 1000;
    else
        return -1;
    if (whole > INT64_MAX / unit_ms - 1)
        return -1;
    /* frac is in millionths of a unit; truncate below one millisecond */
    int64_t ms = whole * unit_ms + frac * unit_ms / 1000000;
    *out_ms = ms;
    return 0;
}
