/* The supervisor room of the local provider (src/providers/local/supervisor/), private to it:
 * the state of one supervisor process and what its files share.
 *
 *   supervisor.c  start-up (configuration, runtime directory, control socket, isolation), the
 *                 host-side process of an isolated sandbox, the tie to the creator, main
 *   serve.c       the request loop: connections, requests, port forwards, exit reports, timers
 *   exec.c        one exec request: environment, stdio, the reaper and the command, the reply
 *   kill.c        finding and killing processes: a subtree, a command's group, everything
 *   proto.c, logcap.c, mounts.c, rclone.c   (local.h, logcap.h, mounts.h, rclone.h)
 *
 * One thread serves requests, one after another; the others never serve: a tied sandbox's
 * watch of its creator and, in the outer process of an isolated sandbox, the network loop
 * (net/netloop.c) with its short name-lookup threads. */
#ifndef SBX_PROVIDERS_LOCAL_SUPERVISOR_SUPERVISOR_H
#define SBX_PROVIDERS_LOCAL_SUPERVISOR_SUPERVISOR_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>
#include <jansson.h>

#include "providers/local/isolate/isolate.h"
#include "providers/local/local.h"
#include "providers/local/supervisor/mounts.h"
#include "sbx/buf.h"
#include "sbx/strv.h"

#define SBX__SUP_KILL_ALL_LOOPS 10000

/* Every exec runs under a reaper of its own: a process forked from the supervisor that is a
 * child subreaper, forks the command and waits. Whatever the command leaves behind (a daemon that
 * left its group and session too) is reparented to the reaper, so when the command ends the
 * reaper kills its whole subtree until nothing is left and only then reports the status; with
 * keep_background it reports at once and keeps reaping until the rest ends by itself (or rm).
 * Should a command kill its reaper, the orphans reach the supervisor, which kills every child
 * that is not a live reaper (serve.c, sweep_orphans). */
struct sbx__sup_child {
    pid_t pid;       /* the reaper; 0: free slot */
    pid_t cmd;       /* the command (its group and session leader); 0: it has ended */
    int status_fd;   /* the reaper reports the command's wait status here; -1: read */
    int have_status; /* status holds what the reaper reported */
    int status;
    int keep;         /* keep_background: answered at the report, not when the reaper ends */
    int tty;          /* leads its own session: kill the session, not only the group */
    int conn;         /* index of the connection waiting for its exit, or -1 */
    int64_t deadline; /* SIGTERM at, INT64_MAX: none */
    int64_t kill_at;  /* SIGKILL at after SIGTERM, INT64_MAX: not yet */
    int64_t grace_ms;
    int timed_out;
    struct sbx__cgroup_events before; /* the sandbox's limit counters when it started */
    void *stacks; /* the reaper's and the command's start stacks (exec.c); NULL: none */
};

/* What a reaper writes on its status pipe once its command has ended, in one write. */
struct sbx__sup_report {
    int status; /* the command's wait status */
    int alone;  /* 1: nothing else of the exec is left, the reaper only exits now (exec.c) */
};

struct sbx__sup_conn {
    int fd;
    struct sbx_buf in;
    int child; /* index into children, or -1 */
};

struct sbx__sup {
    char *id, *dir, *workspace, *root;
    struct sbx__mounts mounts; /* storage mounts (outer process) */
    int mount_failed;          /* the start error is a mount's, which names its entry */
    int listen_fd, sig_fd, root_fd, dir_fd;
    int ports[SBX_LOCAL_MAX_EXPOSED_PORTS];
    size_t n_ports;
    struct sbx_strv env;        /* base environment of every command (isolation: the manifest's) */
    struct sbx__isolation *iso; /* NULL: isolation "none" */
    struct sbx__sup_conn *conns;
    size_t n_conns, alloc_conns;
    struct sbx__sup_child *children;
    size_t n_children, alloc_children;
    /* Output of detached commands (their client went, leaving them running): read and dropped
     * until they close it; a terminal's master held here means no hangup. */
    int *drains;
    size_t n_drains, alloc_drains;
    int stopping;
    int stop_conn;   /* the connection that asked for shutdown, or -1 */
    int spare_fd;    /* held back to refuse connections when out of descriptors */
    int progress_fd; /* SBX_PROTO_PROGRESS in the runtime dir, -1: none */
    uint64_t progress;
    int64_t test_delay_ms; /* test only: a slow supervisor, paused before each request */
    /* Network of an isolated sandbox with its own namespace (modes none and allow): the outer
     * process runs the proxy and the port forwarders (net.h); PID 1 asks it for forwarders over
     * net_chan (outer end [0], inner end [1]). */
    int own_netns;
    int net_chan[2];
    struct sbx_strv allow;      /* mode allow: the patterns */
    struct sbx_strv test_hosts; /* test only: "name=ip" resolved without DNS */
    char *port_bind;            /* forwarders' host address; NULL = 127.0.0.1 */
    struct sbx_strv publish;    /* fixed forwards made when the network starts ("ADDR:HOST:PORT") */
    int allow_ports[SBX_LOCAL_MAX_EXPOSED_PORTS];
    size_t n_allow_ports; /* 0: the proxy's default (80, 443) */
    int report_fd;        /* the creator's socket (our stdout at start), until the report is sent */
    int workspace_owned;  /* the create made the workspace (a fresh one) */
    int inner;            /* this process is PID 1 of an isolated sandbox */
    struct sbx__local_record record; /* what rm needs when this process cannot answer */
    /* A tied sandbox: a pidfd of the creator, which a thread watches (host side only). */
    int tie_fd;
    int tie_watching;
    pthread_t tie_thread;
};

/* ---- serve.c ---- */

/* Serve requests until shutdown is asked for or a signal says stop. */
void sbx__sup_serve(struct sbx__sup *s);
/* Answer connection ci with take_msg (taken) and nfds descriptors (borrowed). */
void sbx__sup_reply(struct sbx__sup *s, int ci, json_t *take_msg, const int *fds, size_t nfds);
void sbx__sup_reply_err(struct sbx__sup *s, int ci, const struct sbx_error *e);
/* {"ok":true}, to add to. */
json_t *sbx__sup_ok_msg(void);
/* Close connection ci; a command it runs is killed. */
void sbx__sup_drop_conn(struct sbx__sup *s, int ci);

/* ---- exec.c ---- */

/* The request {"op":"exec",...} of connection ci: the command started under a reaper of its own
 * and its stdio handed back, or an error reply. */
void sbx__sup_exec(struct sbx__sup *s, int ci, const json_t *req);

/* Let go of the stacks of c, whose reaper has been reaped (it runs on them until it exits):
 * kept as the next exec's when none is kept yet, else unmapped. */
void sbx__sup_child_stacks_release(struct sbx__sup_child *c);
/* Unmap the kept stacks once unused for a while (at now, monotonic ns): when to call again,
 * INT64_MAX when nothing is kept. */
int64_t sbx__sup_stacks_idle(int64_t now);
/* Unmap the kept stacks now. */
void sbx__sup_stacks_drop(void);

/* ---- kill.c ---- */

/* The parent, process group and session of pid from /proc/PID/stat. 0 or -1. */
int sbx__sup_proc_ids(pid_t pid, pid_t *ppid, pid_t *pgrp, pid_t *sid);
/* A growable list of pids, bounded: no sandbox holds more processes than the kernel's pid
 * limit. All zero to start; free(v) when done. */
struct sbx__sup_pids {
    pid_t *v;
    size_t n, alloc;
};
/* Append the children of pid to out. */
void sbx__sup_children_of(pid_t pid, struct sbx__sup_pids *out);
/* Signal pid only while it is still the child of parent (leader != 0: only a process in the
 * group or session of leader). 0 when signalled. */
int sbx__sup_signal_child(pid_t pid, pid_t parent, pid_t leader, int sig);
/* A command's process group, and for a terminal session everything in its session. */
void sbx__sup_kill_child(const struct sbx__sup_child *c, int sig);
/* Kill everything the supervisor ever spawned and forget its children. */
void sbx__sup_kill_everything(struct sbx__sup *s);

#endif
