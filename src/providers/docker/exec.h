/* The Docker provider's commands, shared by exec.c (starting one, on the caller's thread) and
 * exec-loop.c (relaying it on the remote layer's event loop). */
#ifndef SBX_PROVIDERS_DOCKER_EXEC_H
#define SBX_PROVIDERS_DOCKER_EXEC_H

#include <sys/types.h>

#include "providers/docker/docker.h"
#include "sandbox/wire/mux.h"
#include "sandbox/wire/rproc.h"

struct sbx__dk_kill;

/* One running command. Until sbx__dk_cmd_relay, the caller's; then the loop's (its rproc's
 * release frees it). */
struct sbx__dk_cmd {
    struct sbx__dk_engine eng; /* a copy: the command may outlive its session */
    char *container, *eid;
    char *name; /* argv[0], for messages */
    int tty, keep;
    pid_t pid; /* the command's process group in the container, from the preamble */
    unsigned short rows, cols;
    struct sbx__conn *conn;      /* the hijacked connection, until the loop takes it */
    struct sbx_buf pre, pre_err; /* output that came with the verdict, delivered first */
    struct sbx__mux dm;          /* the stream's parser, from the verdict on */
    /* The loop's. */
    struct sbx__rproc *r;
    struct sbx__loop *l;
    struct sbx__lconn *c;
    struct sbx__xfer *inspect, *running, *resize;
    struct sbx__timer *retry, *tick;
    struct sbx__dk_kill *kills[2]; /* TERM, KILL */
    int paused, stream_done, resize_wanted;
    unsigned want_rows, want_cols;
    int64_t exit_deadline, drain_until;
};

/* exec.c: the blocking calls the relay needs too. */
int sbx__dk_exec_create(const struct sbx__dk_engine *e, const char *container, json_t *cmd,
                        const char *const *env, const char *user, int tty, int attach_in,
                        int attach_out, char **out, struct sbx_error *err);
int sbx__dk_exec_exit_code(const struct sbx__dk_engine *e, const char *eid, int *code,
                           struct sbx_error *err);
void sbx__dk_kill_group(const struct sbx__dk_engine *e, const char *container, pid_t pid,
                        const char *sig);
void sbx__dk_cmd_free(struct sbx__dk_cmd *p);

/* exec-loop.c: hand p (taken, freed on failure too) to the event loop as the proc *out. */
int sbx__dk_cmd_relay(struct sbx__dk_cmd *p, const struct sbx_exec_spec *spec, int want_in,
                      struct sbx_proc **out, struct sbx_error *err);

#endif
