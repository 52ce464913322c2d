/* Internal interface of the local provider (src/providers/local). Nothing outside this folder
 * includes it: the registry knows the provider by sbx__provider_local (sandbox/provider.h). */
#ifndef SBX_SANDBOX_LOCAL_LOCAL_H
#define SBX_SANDBOX_LOCAL_LOCAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <jansson.h>

#include "sbx/error.h"
#include "sbx/local.h"
#include "sbx/session.h"
#include "sbx/strv.h"
#include "providers/local/program.h"
#include "sandbox/provider.h"

/* The client constructor (sbx__provider_local.client_new): opts may be NULL. */
int sbx__local_client_new(const void *opts, struct sbx_client **out, struct sbx_error *err);
/* The local fields of a session state (state.c): the generic ones are checked by the caller. */
int sbx__local_state_check(const json_t *state, struct sbx_error *err);
extern const char *const sbx__local_state_keys[];

/* Control protocol: each message is a 4-byte big-endian length followed by that many bytes of
 * JSON (one object). File descriptors travel with a message as SCM_RIGHTS. */
#define SBX_PROTO_MAX_MSG  ((size_t)4 << 20)
#define SBX_PROTO_MAX_FDS  4
#define SBX_PROTO_SOCKNAME "ctl.sock"
#define SBX_PROTO_STATE    "state.json"
#define SBX_PROTO_LOG      "supervisor.log"
#define SBX_PROTO_RECORD   "supervisor.json"
/* Present in a runtime dir from the create's first step until the create hands the sandbox over
 * (returns it): a runtime dir that holds it and whose lease nobody holds is what a killed create
 * (or start) left, live or dead; nobody ever learnt its id, so it is removed (reclaim). */
#define SBX_PROTO_UNCLAIMED "unclaimed"
/* The serving supervisor's progress counter: 8 bytes (a native uint64) that it rewrites each
 * time it accepts a connection or sends an answer. */
#define SBX_PROTO_PROGRESS "progress"
/* A tied sandbox's supervisor finds a pidfd of its creator at this descriptor ("tied" in its
 * configuration); when that process ends, the supervisor removes the sandbox. */
#define SBX_PROTO_TIE_FD 3

/* Send msg with nfds descriptors (borrowed; the caller closes its copies afterwards). Blocks up
 * to the deadline (sbx_deadline_after_ms). Never raises SIGPIPE. */
int sbx__proto_send(int sock, const json_t *msg, const int *fds, size_t nfds, int64_t deadline,
                    struct sbx_error *err);
/* Receive one message. *out: caller owns (json_decref). Received descriptors (O_CLOEXEC) go to
 * fds (up to max_fds; more are closed), their count to *nfds (may be NULL when none expected).
 * A closed connection is SBX_E_SANDBOX "connection closed"; the deadline SBX_E_TIMEOUT. */
int sbx__proto_recv(int sock, json_t **out, int *fds, size_t max_fds, size_t *nfds,
                    int64_t deadline, struct sbx_error *err);
/* How long to wait for a peer: until deadline; when that passes and the peer's progress counter
 * (progress_fd, -1: none) moved since seen, another idle_ms, never past limit. A busy peer that
 * answers others first is waited for; one that answers nobody fails after idle_ms. */
struct sbx__proto_wait {
    int64_t deadline; /* monotonic ns (sbx_deadline_after_ms) */
    int64_t limit;    /* the safety bound */
    int64_t idle_ms;
    int progress_fd; /* borrowed */
    uint64_t seen;
};
/* A plain deadline, no progress counter. */
void sbx__proto_wait_init(struct sbx__proto_wait *w, int64_t deadline);
/* 1 while w allows more waiting (extending its deadline when the peer moved), else 0. */
int sbx__proto_wait_more(struct sbx__proto_wait *w);
/* Read the counter at fd; -1 when it cannot be read. */
int sbx__proto_progress_read(int fd, uint64_t *out);
int sbx__proto_send_wait(int sock, const json_t *msg, const int *fds, size_t nfds,
                         struct sbx__proto_wait *w, struct sbx_error *err);
int sbx__proto_recv_wait(int sock, json_t **out, int *fds, size_t max_fds, size_t *nfds,
                         struct sbx__proto_wait *w, struct sbx_error *err);
/* Encode a frame (length prefix + JSON) into out. */
int sbx__proto_frame(const json_t *msg, struct sbx_buf *out, struct sbx_error *err);
/* Decode the frame at the start of data[0..len): returns 1 and *out (and *used) when a whole
 * frame is there, 0 when more bytes are needed, or -code on a malformed or oversized frame. */
int sbx__proto_parse(const char *data, size_t len, json_t **out, size_t *used,
                     struct sbx_error *err);
/* An error reply {"ok":false,"code":N,"error":"..."}; and turning one back into err. */
json_t *sbx__proto_error(const struct sbx_error *e);
int sbx__proto_check(const json_t *reply, struct sbx_error *err);

/* Connect to the control socket in runtime directory dir (a blocking socket). A missing socket
 * or a refused connection is SBX_E_SANDBOX "sandbox 'id' is gone"; a backlog that stays full
 * for as long as w allows (NULL: SBX_PROTO_CONNECT_MS) SBX_E_TIMEOUT. *out_fd: caller owns. */
#define SBX_PROTO_CONNECT_MS 10000
/* When err is about running out of descriptors (EMFILE, ENFILE), add what the limit is and how
 * to raise it: the bare errno text sends people looking for a sandbox fault. */
void sbx__proto_fd_hint(struct sbx_error *err);
int sbx__local_connect(const char *dir, const char *id, struct sbx__proto_wait *w, int *out_fd,
                       struct sbx_error *err);

/* ---- teardown.c: taking a sandbox down, whatever state it is in ---- */

/* What the supervisor records in SBX_PROTO_RECORD of its runtime dir before it serves. */
struct sbx__local_record {
    pid_t pid;                /* the supervisor (the host-side one when isolated) */
    unsigned long long start; /* its start time (clock ticks since boot, /proc/PID/stat) */
    pid_t inner;              /* PID 1 of the sandbox as a host pid; 0 = none */
    unsigned long long inner_start;
    struct sbx_strv cgroups; /* cgroup directories of the sandbox ("/sys/fs/cgroup/.../sbx-ID") */
};
void sbx__local_record_init(struct sbx__local_record *r);
void sbx__local_record_release(struct sbx__local_record *r);
/* Write the record atomically into the runtime dir (dir_fd borrowed). */
int sbx__local_record_write(int dir_fd, const struct sbx__local_record *r, struct sbx_error *err);
/* Read the record of sandbox id in runtime dir dir; -1 when there is none (or it is unreadable).
 * Cgroup paths that do not name this sandbox's cgroups are dropped. */
int sbx__local_record_read(const char *dir, const char *id, struct sbx__local_record *out);
/* 1 when a recorded process still runs (same start time and command line); *stopped (may be
 * NULL) is set when one of them is stopped (SIGSTOP). */
int sbx__local_record_alive(const struct sbx__local_record *r, const char *id, int *stopped);
/* The start time (clock ticks since boot) and state letter of pid from /proc; -1 if gone. Either
 * output may be NULL. */
int sbx__proc_stat(pid_t pid, unsigned long long *start, char *state);

/* Taking one sandbox down: a short polite shutdown request, then SIGKILL by the recorded pids
 * (verified, so a reused pid is never hit) when it does not answer or a process of it is
 * stopped, then its recorded cgroups (killing what is left in them), then the workspace when
 * asked, then the runtime dir. rm, close, a failed create and prune all end here, so a resource
 * a sandbox gains later (id ranges, disk images) is released in this one place. */
struct sbx__teardown {
    const char *dir;       /* runtime dir of the sandbox */
    const char *id;        /* its id */
    const char *workspace; /* host path to remove; NULL keeps the workspace */
    json_t *removed;       /* NULL, or an array that receives {"sandbox","kind","path"} for
                              each thing removed; kind: supervisor (path: its pid), cgroup,
                              disk_image, workspace, runtime_dir */
    /* The workspace's disk image (disk.h) mounted at mount, the workspace's host path, which
     * stays a plain directory with the files when workspace is NULL; NULL: none. */
    const char *disk_image;
    const char *disk_loop; /* may be NULL */
    const char *mount;
    /* NULL, or receives the first host id of the range the supervisor held, as its answer to
     * the shutdown request names it (0: no range, or no answer). */
    uint32_t *host_ids_first;
};
/* Errors: the supervisor would not die, a cgroup or directory could not be removed (what was
 * not removed stays, so that another attempt can finish). */
int sbx__local_teardown(const struct sbx__teardown *t, struct sbx_error *err);

#endif
