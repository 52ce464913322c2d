/* Stand-in for the core clock helpers until the core module lands on main. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <time.h>

#include "sbx/time.h"

int64_t sbx_time_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * SBX_NS_PER_S + ts.tv_nsec;
}

int64_t sbx_time_real_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * SBX_NS_PER_S + ts.tv_nsec;
}

void sbx_sleep_ms(int64_t ms)
{
    if (ms <= 0)
        return;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

void sbx_time_rfc3339(int64_t real_ns, char out[SBX_TIME_RFC3339_LEN])
{
    time_t s = (time_t)(real_ns / SBX_NS_PER_S);
    struct tm tm;
    gmtime_r(&s, &tm);
    size_t n = strftime(out, SBX_TIME_RFC3339_LEN, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + n, SBX_TIME_RFC3339_LEN - n, ".%03dZ",
             (int)((real_ns % SBX_NS_PER_S) / SBX_NS_PER_MS));
}

int sbx_duration_parse_ms(const char *s, int64_t *out_ms)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v < 0 || !isfinite(v))
        return -1;
    double mult;
    if (strcmp(end, "ms") == 0)
        mult = 1;
    else if (strcmp(end, "s") == 0 || *end == '\0')
        mult = 1000;
    else if (strcmp(end, "m") == 0)
        mult = 60000;
    else if (strcmp(end, "h") == 0)
        mult = 3600000;
    else
        return -1;
    if (v * mult > 9e15)
        return -1;
    *out_ms = (int64_t)(v * mult);
    return 0;
}
