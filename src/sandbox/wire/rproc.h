/* sbx internal: a remote command as the session layer sees a command (docs/internals/remote.md,
 * "Remote commands").
 *
 * A provider's exec_start returns a struct sbx_proc whose descriptors the session layer polls
 * (sandbox/provider.h): stdout, stderr, stdin and status. A remote command's bytes come from a
 * connection instead (a hijacked Docker stream, Kubernetes channels over a WebSocket, LXD's
 * sockets, a Connect server stream). An rproc makes those descriptors (socket pairs, or a local
 * pseudo-terminal whose master the caller gets; an eventfd for the status) and relays them on
 * the event loop's thread (loop.h): the provider's code turns what the server sends into
 * sbx__rproc_output and sbx__rproc_exit, and gets the caller's stdin, terminal size changes,
 * the deadline's signals and the teardown through sbx__rproc_ops.
 *
 * Bounded both ways: output held for a slow caller is at most max_buffered per stream, past
 * which sbx__rproc_output answers 0 and the provider pauses its sources until ops->resume;
 * stdin is read from the caller only while the provider takes it. A caller that stopped
 * reading (closed its end) makes further output dropped, so the command still ends. When the
 * command ends (sbx__rproc_exit or sbx__rproc_fail) the output already given is delivered,
 * the output descriptors reach EOF, then status_fd becomes readable; ops->stop then lets the
 * provider free its connections. Nothing outlives sbx_proc_free: it calls ops->kill for a
 * command still running (on the caller's thread: it may block), then ops->stop on the loop's
 * thread if it was not called yet, closes every descriptor and calls ops->release. */
#ifndef SBX_SANDBOX_WIRE_RPROC_H
#define SBX_SANDBOX_WIRE_RPROC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sandbox/provider.h"
#include "sandbox/wire/loop.h"
#include "sbx/error.h"

struct sbx__rproc; /* opaque */

/* All zero is a command without a terminal or stdin, no deadline. */
struct sbx__rproc_opts {
    const char *name;          /* the command (argv[0]) for messages; NULL: "command" */
    int tty;                   /* a local pseudo-terminal: the caller gets its master (stdin
                                  and stdout), the provider the bytes typed and the size */
    unsigned short rows, cols; /* its first size; 0: 24 x 80 */
    int want_stdin;            /* without tty: a stdin socket */
    int merge_stderr;          /* without tty: stderr into the stdout socket */
    int64_t timeout_ms;        /* > 0: ops->signal(SIGTERM) then, after the grace, SIGKILL */
    int64_t kill_grace_ms;     /* 0: SBX_EXEC_DEFAULT_GRACE_MS */
    size_t max_buffered;       /* per stream and for stdin; 0: 256 KiB */
    pid_t pid;                 /* sbx_proc.pid (0: unknown) */
};

struct sbx__rproc_ops {
    /* Loop thread. */
    /* Stdin bytes (or keys typed on the terminal); n == 0: the caller closed stdin. Returns how
     * many were taken; fewer than n: the rest is kept and offered again after
     * sbx__rproc_input_ready. NULL: stdin is not read. */
    size_t (*input)(struct sbx__rproc *r, const uint8_t *p, size_t n, void *ud);
    /* The terminal's size changed (sbx_proc_resize on the master): noticed within 200 ms, and
     * always before keys typed after it are offered to input (a provider whose resize is a
     * request of its own holds input back until it is done, so the two stay in order).
     * Optional. */
    void (*resize)(struct sbx__rproc *r, unsigned rows, unsigned cols, void *ud);
    /* The deadline passed: SIGTERM, then SIGKILL after the grace (the status then has
     * timed_out). Required with a timeout. */
    void (*signal)(struct sbx__rproc *r, int sig, void *ud);
    /* There is room for output again (after sbx__rproc_output answered 0). Optional. */
    void (*resume)(struct sbx__rproc *r, void *ud);
    /* Free what the provider has on the loop (connections, transfers, timers), once: after
     * the end was reported and delivered, or when the proc is freed before. No sbx__rproc_
     * call after it. Required. */
    void (*stop)(struct sbx__rproc *r, void *ud);

    /* Caller's thread. */
    /* The proc is freed while the command runs: end it on the server (may block). Optional. */
    void (*kill)(struct sbx__rproc *r, void *ud);
    /* Last call: ud is no longer used. Optional. */
    void (*release)(void *ud);
};

/* Make the descriptors of a command (nothing runs on the loop yet). Errors: SBX_E_SYS (no
 * socket pair, pseudo-terminal or eventfd). *out: the provider's until sbx__rproc_start, then
 * the proc's (freed by sbx_proc_free). On failure ops->release(ud) is not called. */
int sbx__rproc_new(struct sbx__loop *l, const struct sbx__rproc_opts *o,
                   const struct sbx__rproc_ops *ops, void *ud, struct sbx__rproc **out,
                   struct sbx_error *err);
/* The struct sbx_proc to return from exec_start (borrowed from r; sbx_proc_free frees r). */
struct sbx_proc *sbx__rproc_proc(struct sbx__rproc *r);
/* Hand r to the loop: setup(r, ud) runs on the loop's thread first (the provider makes its
 * lconn/lws/xfer there and may already give output), then r starts relaying. Waits for both.
 * setup's error is returned (it frees what it made; stop is not called). Either way the
 * caller then owns the proc: return it, or free it (sbx_proc_free). setup may be NULL. */
int sbx__rproc_start(struct sbx__rproc *r,
                     int (*setup)(struct sbx__rproc *r, void *ud, struct sbx_error *err),
                     struct sbx_error *err);

/* ---- loop thread ---- */

/* Output of the command on stream 1 (stdout) or 2 (stderr; into stdout when merged or on a
 * terminal). Everything given is kept; returns 1 while there is room for more, 0 when the
 * stream holds max_buffered or more (pause the sources; ops->resume follows). */
int sbx__rproc_output(struct sbx__rproc *r, int stream, const void *p, size_t n);
/* The provider can take stdin again: what was left is offered. */
void sbx__rproc_input_ready(struct sbx__rproc *r);
/* The command ended with status st (timed_out is set here when the deadline fired). The first
 * end reported counts. */
void sbx__rproc_exit(struct sbx__rproc *r, const struct sbx_exit *st);
/* The command's status cannot be known (the connection was lost, the server died): status_fd
 * becomes readable and sbx_proc_wait returns this error. */
void sbx__rproc_fail(struct sbx__rproc *r, const struct sbx_error *err);
/* Whether the deadline fired. */
int sbx__rproc_timed_out(const struct sbx__rproc *r);
/* Whether the end was reported. */
int sbx__rproc_ended(const struct sbx__rproc *r);
struct sbx__loop *sbx__rproc_loop(const struct sbx__rproc *r);
/* The name given in the options. */
const char *sbx__rproc_name(const struct sbx__rproc *r);

#endif
