/* Port relays whose connections a provider opens itself: a small detached process (the sbx
 * program run with the provider's verb) listens on 127.0.0.1:HOSTPORT of this host and hands
 * each connection it accepts to the provider's carry function, on a thread of its own (the
 * Kubernetes provider opens a pods/portforward WebSocket, the remote provider one to its node).
 *
 * One relay per sandbox and port: its record <runtime base>/<kind>/<id>/ports/<port>
 * ("PID HOSTPORT\n") is locked by the relay for as long as it runs, so resolving the port again
 * gives the same URL; removing the record (sbx__portrelay_forget) ends it. The relay starts
 * with its listening socket, its record and a status pipe at SBX__PORTRELAY_FD_LISTEN,
 * SBX__PORTRELAY_FD_RECORD and SBX__PORTRELAY_FD_STATUS, and says "ok" on the pipe once it
 * serves, or why it does not. */
#ifndef SBX_SANDBOX_HOST_PORTRELAY_H
#define SBX_SANDBOX_HOST_PORTRELAY_H

#include <sys/types.h>

#include "sbx/error.h"

enum { SBX__PORTRELAY_FD_LISTEN = 3, SBX__PORTRELAY_FD_RECORD, SBX__PORTRELAY_FD_STATUS };

/* ---- The caller's side ---- */

/* <runtime base>/<kind>/<id>/ports, each level made private (0700, ours) when make is set.
 * id: checked by the caller (a file name). *out: caller owns. */
int sbx__portrelay_dir(const char *kind, const char *id, int make, char **out,
                       struct sbx_error *err);

/* A record's "PID HOSTPORT\n" from fd: 0, or -1 when it is not that. */
int sbx__portrelay_read_record(int fd, pid_t *pid, int *hostport);

/* A socket listening on 127.0.0.1 at a port the kernel picks (*hostport), close-on-exec, with
 * flags (SOCK_NONBLOCK or 0) added. */
int sbx__portrelay_listen(int flags, int *lsock, int *hostport, struct sbx_error *err);

struct sbx__portrelay_start {
    const char *dir;             /* sbx__portrelay_dir(..., make = 1) */
    int port;                    /* 1..65535, checked by the caller */
    const char *const *args;     /* the relay's arguments after the program: {VERB, ...}, NULL */
    const char *const *pass_env; /* the environment variables it keeps (at most 8), NULL */
};

/* The URL ("http://127.0.0.1:HOSTPORT") of the live relay recorded for the port, else of a new
 * one, started with s->args. *out_url: caller owns. */
int sbx__portrelay_resolve(const struct sbx__portrelay_start *s, char **out_url,
                           struct sbx_error *err);

/* End every relay recorded in dir (waiting a little for each) and remove the records, dir and
 * its parent. The first record that cannot be removed is the error; the others are still
 * tried. */
int sbx__portrelay_forget(const char *dir, struct sbx_error *err);

/* ---- The relay process's side ---- */

struct sbx__portrelay_serve {
    void *ctx;
    int check_ms; /* how often to ask wanted */
    /* Carry one accepted connection until either side ends (the caller closes fd). Runs on a
     * thread of its own: at most 256 at once. */
    void (*carry)(void *ctx, int fd);
    /* Whether the relay should go on (asked only while its record is still there). */
    int (*wanted)(void *ctx);
};

/* Detach: the first process exits (0 to its parent), the relay is nobody's child; SIGPIPE is
 * ignored and the listening socket made blocking. Returns 0 in the relay, -1 when it cannot
 * fork (still the first process). */
int sbx__portrelay_detach(void);

/* Say msg on the status pipe and close it (the starter reads it as the relay's word). */
void sbx__portrelay_say(const char *msg);

/* Write the record, say "ok" and serve until the record is removed or wanted says no.
 * Returns the relay's exit status (1: the record could not be written, said so). */
int sbx__portrelay_run(const struct sbx__portrelay_serve *s);

#endif
