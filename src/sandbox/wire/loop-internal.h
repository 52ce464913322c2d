/* sbx internal: what loop.c shares with the files that build on the loop (lconn.c, xfer.c,
 * rproc.c). Loop thread only unless said. */
#ifndef SBX_SANDBOX_WIRE_LOOP_INTERNAL_H
#define SBX_SANDBOX_WIRE_LOOP_INTERNAL_H

#include <stddef.h>

#include "sandbox/wire/loop.h"

/* Kinds of objects a loop counts (sbx__loop_stats; the process's loop stops its thread when it
 * holds none). */
enum { LOOP_WATCH, LOOP_TIMER, LOOP_CONN, LOOP_XFER, LOOP_PROC, LOOP_HOLD };

/* Count an object of kind in (delta 1) or out (-1). Any thread. */
void sbx__loop_count(struct sbx__loop *l, int kind, int delta);
/* Free obj with free_fn at the end of this turn of the loop: events already collected for it
 * are dropped first (the owner marks it dead). */
void sbx__loop_bury(struct sbx__loop *l, void *obj, void (*free_fn)(void *obj));
/* A watch that does not count as something the loop holds (curl's sockets: its cache of idle
 * connections must not keep the process's loop running). */
int sbx__watch_new_uncounted(struct sbx__loop *l, int fd, unsigned events, sbx__watch_fn *fn,
                             void *ud, struct sbx__watch **out, struct sbx_error *err);
/* Where xfer.c keeps its state (the multi handle and its timer), made on the first transfer,
 * and its release when the loop's thread stops (no transfer is left then). */
void **sbx__loop_xfer_slot(struct sbx__loop *l);
void sbx__xfer_state_free(struct sbx__loop *l, void *state);
/* Make the loop's thread run at least once more soon (a zero timeout for its next wait). */
void sbx__loop_kick(struct sbx__loop *l);

#endif
