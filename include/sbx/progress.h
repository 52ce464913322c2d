/* sbx: progress of long steps (materialising a manifest, fetching a repository, taking a
 * snapshot), for a terminal's status line.
 *
 * A step reports through a callback the caller gives; sbx calls it on the thread doing the
 * work, not before the step has taken SBX_PROGRESS_AFTER_MS (or $SBX_PROGRESS_AFTER_MS), at
 * most ten times a second, and once with finished set when a step that was reported ends — so
 * quick steps show nothing and a status line can be erased at the end. */
#ifndef SBX_PROGRESS_H
#define SBX_PROGRESS_H

#include <stdint.h>

#include "common.h"

#define SBX_PROGRESS_AFTER_MS 500

struct sbx_progress {
    const char *step; /* "materialise", "fetch", "snapshot" */
    const char *what; /* the entry, repository or path at hand; may be NULL */
    uint64_t done;    /* items done so far */
    uint64_t total;   /* items in all, 0 when not known */
    int finished;     /* the step ended (done and total are final) */
};

/* p and its strings are borrowed for the call. */
typedef void sbx_progress_fn(void *data, const struct sbx_progress *p);

/* The throttle, for code that reports: all-zero (no callback) reports nothing. */
struct sbx_progress_sink {
    sbx_progress_fn *fn;
    void *data;
    int64_t start_ns, last_ns, after_ms;
    int shown;
};

SBX_API void sbx_progress_sink_init(struct sbx_progress_sink *s, sbx_progress_fn *fn, void *data);
/* Report; force: regardless of the delay (a step known to be slow, e.g. a fetch). */
SBX_API void sbx_progress_report(struct sbx_progress_sink *s, const char *step, const char *what,
                                 uint64_t done, uint64_t total, int force);
/* The step ended: a finished report when anything was shown. */
SBX_API void sbx_progress_end(struct sbx_progress_sink *s, const char *step, uint64_t done,
                              uint64_t total);

#endif
