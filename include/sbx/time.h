/* sbx: clocks and deadlines. Durations are int64 nanoseconds or milliseconds as named. */
#ifndef SBX_TIME_H
#define SBX_TIME_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"

#define SBX_NS_PER_MS INT64_C(1000000)
#define SBX_NS_PER_S  INT64_C(1000000000)

/* CLOCK_MONOTONIC in nanoseconds: for durations and deadlines. */
SBX_API int64_t sbx_time_mono_ns(void);
/* CLOCK_REALTIME in nanoseconds since the epoch: for timestamps shown to people. */
SBX_API int64_t sbx_time_real_ns(void);
/* A monotonic deadline timeout_ms from now; timeout_ms < 0 means none (INT64_MAX). */
SBX_API int64_t sbx_deadline_after_ms(int64_t timeout_ms);
/* Milliseconds left until deadline, clamped to [0, INT_MAX]; -1 if deadline is INT64_MAX.
 * Suitable as a poll() timeout. */
SBX_API int sbx_deadline_poll_ms(int64_t deadline);
/* Sleep for ms milliseconds, resuming after signals. */
SBX_API void sbx_sleep_ms(int64_t ms);
/* Format a realtime ns value as RFC 3339 UTC with milliseconds, "2026-11-29T09:55:12.345Z".
 * out must hold SBX_TIME_RFC3339_LEN bytes. */
#define SBX_TIME_RFC3339_LEN 32
SBX_API void sbx_time_rfc3339(int64_t real_ns, char out[SBX_TIME_RFC3339_LEN]);
/* Parse a duration like "250ms", "30s", "5m", "1h" or a bare number of seconds ("1.5").
 * A decimal number (digits, optional fraction, ".5" allowed) then an optional unit ms, s, m or
 * h; no sign, spaces or exponent. Fractions are exact to 6 digits, the result is truncated to
 * whole milliseconds ("10.9ms" is 10). Returns 0 and *out_ms, or -1 on malformed, negative or
 * overflowing input (*out_ms untouched). */
SBX_API int sbx_duration_parse_ms(const char *s, int64_t *out_ms);

#endif
