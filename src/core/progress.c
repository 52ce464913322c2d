/* The progress throttle (include/sbx/progress.h). */
#include <stdlib.h>

#include "sbx/progress.h"
#include "sbx/time.h"

#define INTERVAL_NS (100 * SBX_NS_PER_MS)

void sbx_progress_sink_init(struct sbx_progress_sink *s, sbx_progress_fn *fn, void *data)
{
    s->fn = fn;
    s->data = data;
    s->start_ns = sbx_time_mono_ns();
    s->last_ns = 0;
    s->shown = 0;
    s->after_ms = SBX_PROGRESS_AFTER_MS;
    const char *v = getenv("SBX_PROGRESS_AFTER_MS");
    if (v && v[0]) {
        char *end;
        long ms = strtol(v, &end, 10);
        if (!*end && ms >= 0 && ms <= 3600000)
            s->after_ms = ms;
    }
}

void sbx_progress_report(struct sbx_progress_sink *s, const char *step, const char *what,
                         uint64_t done, uint64_t total, int force)
{
    if (!s || !s->fn)
        return;
    int64_t now = sbx_time_mono_ns();
    if (!force && (now - s->start_ns < s->after_ms * SBX_NS_PER_MS ||
                   (s->shown && now - s->last_ns < INTERVAL_NS)))
        return;
    struct sbx_progress p = {.step = step, .what = what, .done = done, .total = total};
    s->last_ns = now;
    s->shown = 1;
    s->fn(s->data, &p);
}

void sbx_progress_end(struct sbx_progress_sink *s, const char *step, uint64_t done, uint64_t total)
{
    if (!s || !s->fn || !s->shown)
        return;
    struct sbx_progress p = {.step = step, .done = done, .total = total, .finished = 1};
    s->shown = 0;
    s->fn(s->data, &p);
}
