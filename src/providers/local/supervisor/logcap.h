/* sbx local provider: the supervisor's log, bounded. A sandbox can make its supervisor log (a
 * refused proxy request, a failed exec, a client that misbehaves), and the log lives in the
 * runtime directory, in RAM on most hosts: every message passes a token bucket (a burst, then a
 * steady rate; what it drops is counted and summarised) and the file has a size cap, after which
 * one last line says so and nothing more is written. */
#ifndef SBX_SANDBOX_LOCAL_LOGCAP_H
#define SBX_SANDBOX_LOCAL_LOGCAP_H

#include <stdint.h>

#include "sbx/log.h"

#define SBX__LOGCAP_MAX_BYTES ((uint64_t)1 << 20) /* per log file */
#define SBX__LOGCAP_BURST     50                  /* messages at once */
#define SBX__LOGCAP_PER_SEC   5                   /* messages per second after a burst */

struct sbx__logcap {
    int fd;             /* borrowed; appended to (O_APPEND), shared by the processes that log */
    uint64_t max_bytes; /* 0: SBX__LOGCAP_MAX_BYTES */
    unsigned burst;     /* 0: SBX__LOGCAP_BURST */
    unsigned per_sec;   /* 0: SBX__LOGCAP_PER_SEC */
    /* State: all zero to start. */
    int64_t tokens_milli; /* thousandths of a message */
    int64_t last_ms;
    int started;
    uint64_t suppressed; /* dropped since the last line written */
    int truncated;       /* the final line is written: drop everything */
};

/* Whether a message arriving at now_ms may be written; counts it in suppressed when not. */
int sbx__logcap_admit(struct sbx__logcap *l, int64_t now_ms);
/* An sbx_log_fn: data is a struct sbx__logcap. Writes "sbx: <level>: <msg>\n" to l->fd when
 * admitted and below the cap, preceded by a summary of suppressed messages. */
void sbx__logcap_handler(enum sbx_log_level level, const char *msg, void *data);

/* A helper's own log (rclone's, which a sandbox makes grow by failing writes on a mount): the
 * helper's stderr is a pipe read here, in a process forked for it, until EOF. Lines pass the
 * token bucket of l (dropped ones summarised in one line); the file path (opened for append,
 * 0600) is rotated to path.1 when the next line would take it past l->max_bytes, so the two
 * hold at most twice that. Only async-signal-safe calls: it runs in a child forked from a
 * process that may have threads. Returns when in_fd reaches EOF or fails. */
#define SBX__LOGCAP_HELPER_MAX_BYTES ((uint64_t)256 << 10)
void sbx__logcap_pump(int in_fd, const char *path, struct sbx__logcap *l);

#endif
