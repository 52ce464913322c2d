/* The LXD provider's execs, shared by exec.c (starting them, sbx's own short commands) and
 * relay.c (a user's command as a struct sbx_proc). */
#ifndef SBX_PROVIDERS_LXD_EXEC_H
#define SBX_PROVIDERS_LXD_EXEC_H

#include "providers/lxd/lxd.h"

/* The streams of an exec, by LXD's names "0", "1", "2" and "control". With a terminal only
 * SBX__LXD_IN (both ways) and SBX__LXD_CTL exist. */
enum { SBX__LXD_IN, SBX__LXD_OUT, SBX__LXD_ERR, SBX__LXD_CTL, SBX__LXD_NSTREAMS };

struct sbx__lxd_exec_args {
    const json_t *argv;     /* the command, a JSON array of strings (borrowed) */
    const char *const *env; /* "KEY=VALUE" over the instance's environment, NULL-ended */
    long uid, gid;
    int tty;
    unsigned short rows, cols;
    int streams; /* 0: no WebSockets (the command's output goes nowhere) */
};

/* One exec: its operation and its connections (NULL: not connected, or handed on). */
struct sbx__lxd_exec {
    char *op;
    struct sbx__wsconn *conn[SBX__LXD_NSTREAMS];
    int tty;
};

void sbx__lxd_exec_init(struct sbx__lxd_exec *x);
void sbx__lxd_exec_release(struct sbx__lxd_exec *x);
/* Start a in instance inst of sv (id names the sandbox in messages) and connect its streams.
 * A missing or stopped instance is SBX_E_SANDBOX "sandbox 'id' is gone or stopped". */
int sbx__lxd_exec_begin(const struct sbx__lxd_server *sv, const char *inst, const char *id,
                        const struct sbx__lxd_exec_args *a, struct sbx__lxd_exec *x,
                        struct sbx_error *err);
/* The exit status of operation op, once it ends. */
int sbx__lxd_exec_status(const struct sbx__lxd_server *sv, const char *op, int *code,
                         struct sbx_error *err);
/* Run argv as root without streams and wait for it (kill, and the like). */
int sbx__lxd_exec_detached(const struct sbx__lxd_server *sv, const char *inst, const char *id,
                           const char *const *argv, struct sbx_error *err);

#endif
