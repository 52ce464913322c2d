/* sbx local provider: isolation of a sandbox (internal).
 *
 * The local supervisor calls this module at two points:
 *
 *   1. start-up, after it created its host-side control socket and before it serves:
 *        sbx__isolation_new(spec, &iso, err)     plan + seccomp + /etc, in the host process
 *        sbx__isolation_enter(iso, &role, err)   namespaces, cgroups, new root, pivot_root
 *      enter forks. A descendant becomes PID 1 of new user, mount, pid, ipc, uts, cgroup (and, in
 *      network mode none, net) namespaces, sits in a root built from nothing and returns with
 *      role SBX__ISOLATION_INNER: it serves the control socket and forks commands (its
 *      environment is wiped: nothing of the harness's variables stays in PID 1; it holds
 *      no_new_privs and a seccomp filter that refuses mounts, new namespaces, ptrace and the
 *      kernel's shared state, although it keeps its capabilities in the namespace). The parent
 *      returns with role SBX__ISOLATION_OUTER: it stays in the host namespaces (the place for the
 *      allow-list proxy and the port forwarders) and calls sbx__isolation_outer_wait(), which
 *      kills the inner process when the outer one is told to stop and removes the cgroups once
 *      the inner one is gone. Setup failures are reported by enter in the calling process,
 *      naming the missing kernel feature; nothing falls back to running unconfined.
 *
 *      After enter, the inner process must reopen every directory descriptor it uses for
 *      commands (the workspace dirfd, a command's cwd) by its sandbox path: a descriptor opened
 *      before the pivot points into the detached host tree, where ".." reaches the host's root.
 *
 *   2. every command child, between fork and exec:
 *        sbx__isolation_child(iso, &run_as, err)
 *      switches to the run_as user, drops every capability, sets no_new_privs, rlimits and the
 *      OOM score, marks every fd above 2 close-on-exec and loads the seccomp filters last. It
 *      allocates nothing (everything is precomputed by sbx__isolation_new), so it is safe in the
 *      child of a multi-threaded parent.
 *
 * Plain data first (CONVENTIONS): sbx__isolation_plan_build() turns a spec into an ordered list
 * of mount and file operations without touching the system; the executor (isolate.c, enter.c,
 * root.c: executor.h) applies it. The executor with seccomp.c, cgroup.c and idrange.c decides
 * every privileged step; the calls among them that change a mount or a namespace are made
 * through src/sandbox/host/priv.c. */
#ifndef SBX_SANDBOX_LOCAL_ISOLATE_H
#define SBX_SANDBOX_LOCAL_ISOLATE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sbx/buf.h"
#include "sbx/error.h"
#include "sbx/strv.h"

/* ---- the spec: what the supervisor asks for (borrowed strings, all-zero = defaults) ---- */

enum sbx__net_mode {
    SBX__NET_NONE = 0, /* empty network namespace, loopback up (default) */
    SBX__NET_FULL,     /* host network namespace: dangerous, opt-in */
};

/* A user of the manifest. Its uid and private gid inside the sandbox are 1000 + its position;
 * its home is the workspace root. */
struct sbx__isolation_user {
    const char *name;
};

/* A group of the manifest with its member user names (NULL-terminated, may be NULL). */
struct sbx__isolation_group {
    const char *name;
    const char *const *members;
};

/* An extra path grant from the run configuration: host src shown at sandbox dst. */
struct sbx__isolation_grant {
    const char *src; /* absolute host path; never "/", never a home directory itself, never
                      * overlapping the workspace (checked on its realpath) */
    const char *dst; /* absolute sandbox path; NULL = same as src */
    int writable;
    int dangerous; /* accept a source below /proc /sys /dev /run or holding unix sockets */
};

/* Whether the tree at src (a directory or a file, symlinks not followed) holds a unix socket,
 * looking at most SBX__GRANT_SCAN_MAX_DEPTH levels deep and SBX__GRANT_SCAN_MAX_ENTRIES entries:
 * 1 with its path relative to src in found ("" when src is one), else 0 (also for what it could
 * not read). Sockets made later, or beyond the bounds, are not seen. */
#define SBX__GRANT_SCAN_MAX_DEPTH   8
#define SBX__GRANT_SCAN_MAX_ENTRIES 20000
int sbx__grant_find_socket(const char *src, char *found, size_t n);

/* Limit values: 0 = the default, SBX__LIMIT_NONE = no limit. A value given explicitly must be
 * enforced (enter fails when the cgroup controller is not usable); a default limit is applied
 * when the controller is usable and otherwise only logged. */
#define SBX__LIMIT_NONE UINT64_MAX

struct sbx__isolation_limits {
    uint64_t memory_bytes; /* cgroup memory (+swap) limit; default 2 GiB */
    uint64_t pids;         /* processes of the commands (RLIMIT_NPROC; cgroup pids.max is this
                            * plus SBX__ISOLATION_PIDS_HEADROOM); default 1024 */
    uint64_t cpu_millis;   /* cgroup CPU quota in thousandths of a CPU; default
                            * sbx__isolation_default_cpu_millis() */
    uint64_t fsize_bytes;  /* RLIMIT_FSIZE per command; default 16 GiB */
    uint64_t nofile;       /* RLIMIT_NOFILE per command; default 4096 */
    uint64_t tmp_bytes;    /* size of the private /tmp and /dev/shm tmpfs; default 1 GiB */
    uint64_t ptys;         /* max= of the sandbox's own devpts instance: terminals the sandbox
                            * can hold open at once, the supervisor's PTY sessions included
                            * (SBX_PTY_MAX of them); default SBX__ISOLATION_DEFAULT_PTYS */
};

struct sbx__isolation_spec {
    const char *workspace; /* host directory, absolute; bound read-write at root */
    const char *root;      /* sandbox path of the workspace; NULL = "/workspace" */
    const char *hostname;  /* NULL = "sandbox" */
    enum sbx__net_mode net;
    /* Users; users[0] is the default user, mapped to the caller's host uid/gid. Empty = one
     * user named "sandbox". */
    const struct sbx__isolation_user *users;
    size_t nusers;
    const struct sbx__isolation_group *groups;
    size_t ngroups;
    const struct sbx__isolation_grant *grants;
    size_t ngrants;
    const char *const *env; /* manifest environment "KEY=VALUE", NULL-terminated, may be NULL */
    struct sbx__isolation_limits limits;
    const char *cgroup_name; /* leaf name of the sandbox cgroups, e.g. "sbx-<id>"; NULL = none */
    const char *host_home;   /* caller's home directory, refused as a grant source; may be NULL */
    const char *id;          /* sandbox id, recorded with its host id range; may be NULL */
    const char *idrange_dir; /* NULL = SBX__IDRANGE_DIR */
    /* Root runner whose workspace cannot be shown through an idmapped mount (an old kernel, a
     * filesystem without them, a pseudo filesystem): 0 (the default) fails enter; 1 runs the
     * commands as the caller's host uid, root, in a user namespace without capabilities, where
     * root-owned host files the sandbox sees and may write by their modes are its own. */
    int allow_host_uid;
};

#define SBX__ISOLATION_DEFAULT_ROOT     "/workspace"
#define SBX__ISOLATION_DEFAULT_HOSTNAME "sandbox"
#define SBX__ISOLATION_DEFAULT_USER     "sandbox"
#define SBX__ISOLATION_FIRST_UID        1000 /* users[i] has uid and private gid 1000 + i */
#define SBX__ISOLATION_FIRST_GID        2000 /* groups[i] has gid 2000 + i */
#define SBX__ISOLATION_MAX_USERS        64
#define SBX__ISOLATION_MAX_GROUPS       64
#define SBX__ISOLATION_MAX_GRANTS       64
#define SBX__ISOLATION_MAX_ENV          1024
#define SBX__ISOLATION_MAX_ENV_BYTES    (256 * 1024)
/* Terminals of one sandbox: the supervisor's 64 PTY sessions and as many for the commands' own
 * (script, tmux, expect). The host's kernel.pty.max is shared by every devpts instance. */
#define SBX__ISOLATION_DEFAULT_PTYS 128
/* Processes of the commands by default; the pids cgroup allows the headroom on top, for the
 * supervisor and the exec reapers. */
#define SBX__ISOLATION_DEFAULT_PIDS  1024
#define SBX__ISOLATION_PIDS_HEADROOM 64
/* RLIMIT_NPROC of commands when no pids cgroup limits the sandbox. */
#define SBX__ISOLATION_NPROC_FALLBACK 4096
/* On-disk ids, in an idmapped workspace, of the non-default users and of the groups when the
 * caller is root: 100000 + sandbox id, the same for every sandbox (a kept workspace keeps its
 * owners), while the processes run as ids of the sandbox's own host id range. */
#define SBX__ISOLATION_HOST_ID_BASE 100000

/* ---- host id ranges of root-run sandboxes (idrange.c) ----
 *
 * A root-run sandbox's ids k (1 <= k < 65536; users 1000 + i, groups 2000 + i) are host ids
 * first + k of a range that no other live sandbox holds: slot n is [BASE + n * SIZE, +SIZE).
 * BASE is above systemd's container range (524288..1879048191) and the slots stop below its
 * "foreign" range (2147352576..), and below 2^31, where tools that read ids as signed break.
 * Slots whose ids meet a user or group of /etc/passwd and /etc/group, or a range of
 * /etc/subuid or /etc/subgid, are skipped. */
#define SBX__IDRANGE_DIR   "/run/sbx-idranges"
#define SBX__IDRANGE_BASE  0x70000000u /* 1879048192 */
#define SBX__IDRANGE_SIZE  65536u
#define SBX__IDRANGE_SLOTS 4094u /* the last id is 0x7ffdffff */

struct sbx__idrange {
    uint32_t first; /* host id of sandbox id 0 (never mapped: 0 is host root for PID 1) */
    unsigned slot;
    int fd;     /* the locked slot file, -1 = none */
    int dir_fd; /* the slot directory, -1 = none */
};

/* What sbx__idrange_overlaps parses: passwd (uid and gid fields), group (gid), subuid/subgid
 * (first and count). */
enum { SBX__IDRANGE_PASSWD, SBX__IDRANGE_GROUP, SBX__IDRANGE_SUBID };
/* Whether [first, first + count) meets an id of the text of an id file of kind. Pure. */
int sbx__idrange_overlaps(const char *text, int kind, uint64_t first, uint64_t count);
/* Take the first free slot in dir (NULL = SBX__IDRANGE_DIR; created 0700, refused with
 * SBX_E_PERM unless a root-owned directory closed to others), record "id pid" in it and keep
 * it locked. Never blocks. SBX_E_TOOBIG when every slot is taken. *out: release with
 * sbx__idrange_release (the holder) or sbx__idrange_drop (a forked copy). */
int sbx__idrange_acquire(const char *dir, const char *id, struct sbx__idrange *out,
                         struct sbx_error *err);
/* Free the slot: unlock it (its file stays, for the slot's next holder). r is left empty. */
void sbx__idrange_release(struct sbx__idrange *r);
/* Close this process's descriptors of r without freeing the slot (another copy holds it). */
void sbx__idrange_drop(struct sbx__idrange *r);
/* After a sandbox was stopped: wait up to timeout_ms until the range starting at first is no
 * longer held for sandbox id (its supervisor may still be exiting). 1 when it is free (no
 * file, a file nobody holds, or one held for another sandbox), 0 when it is still held for id
 * at the deadline. */
int sbx__idrange_wait_free(const char *dir, uint32_t first, const char *id, int timeout_ms);
/* Remove every slot file of dir (NULL = SBX__IDRANGE_DIR) that no live supervisor holds:
 * what killed supervisors left (harmless, since allocation takes them again, but clutter).
 * *removed (may be NULL) gets the count. Errors as sbx__idrange_acquire's directory checks. */
int sbx__idrange_prune(const char *dir, unsigned *removed, struct sbx_error *err);

/* The default CPU quota: half the host's online CPUs, at least one CPU. */
uint64_t sbx__isolation_default_cpu_millis(void);

/* ---- the plan: pure data ---- */

enum sbx__op_kind {
    SBX__OP_TMPFS,   /* mount a tmpfs at dst: mode, size (0 = kernel default), flags */
    SBX__OP_BIND,    /* bind host src at dst (dir or file, created); RO unless writable */
    SBX__OP_SYSDIR,  /* host src is a symlink: same symlink at dst; a dir: RO bind; absent: skip */
    SBX__OP_ETC,     /* host src is copied in as a RO bind if it exists, mirrored if a symlink */
    SBX__OP_DEVNODE, /* bind the host device node src at dst (nosuid, noexec, dev allowed) */
    SBX__OP_MKDIR,   /* mkdir dst with mode */
    SBX__OP_SYMLINK, /* symlink dst -> target */
    SBX__OP_FILE,    /* write content to dst with mode */
    SBX__OP_PROC,    /* fresh procfs at dst (hidepid=invisible where the kernel has it) */
    SBX__OP_DEVPTS,  /* new devpts instance at dst, at most size terminals (0 = no max=) */
    SBX__OP_PROC_RO, /* bind dst onto itself read-only if it exists */
    SBX__OP_PROC_MASK, /* hide dst if it exists: /dev/null over a file, empty RO tmpfs over a dir */
    SBX__OP_REMOUNT_RO /* make the mount at dst read-only (after its contents were built) */
};

struct sbx__op {
    enum sbx__op_kind kind;
    char *src;   /* host path (BIND, SYSDIR, ETC, DEVNODE) or symlink target (SYMLINK) */
    char *dst;   /* absolute sandbox path */
    mode_t mode; /* TMPFS, MKDIR, FILE */
    uint64_t size;
    int writable;  /* BIND */
    int optional;  /* BIND, ETC: a missing source is skipped instead of an error */
    int copy;      /* ETC: copy the content (following symlinks) instead of binding */
    int workspace; /* BIND: this is the workspace (a root runner attaches it idmapped) */
    char *content;
    size_t content_len;
};

struct sbx__isolation_plan {
    struct sbx__op *ops;
    size_t n, alloc;
};

/* A resolved user: sandbox ids, the host ids it maps to, its groups. */
struct sbx__run_as {
    uid_t uid;
    gid_t gid;
    gid_t groups[SBX__ISOLATION_MAX_GROUPS];
    size_t ngroups;
    const char *name; /* borrowed from the isolation */
    const char *home; /* borrowed from the isolation */
};

/* Build the ordered operation list of spec. Pure: reads no file, makes no syscall. Fails with
 * SBX_E_INVAL naming the field and rule ("grant source '/' is not allowed", ...). *out is set
 * only on success; release it with sbx__isolation_plan_release. */
int sbx__isolation_plan_build(const struct sbx__isolation_spec *spec,
                              struct sbx__isolation_plan *out, struct sbx_error *err);
void sbx__isolation_plan_release(struct sbx__isolation_plan *plan);
/* The op at sandbox path dst of the given kind, or NULL: for tests. */
const struct sbx__op *sbx__isolation_plan_find(const struct sbx__isolation_plan *plan,
                                               enum sbx__op_kind kind, const char *dst);

/* ---- /etc generation (etc.c), pure ---- */

/* Check a user or group name: [a-z_][a-z0-9_-]{0,31}. what is "user" or "group". */
int sbx__isolation_check_name(const char *what, const char *name, struct sbx_error *err);
/* Append passwd, group, hosts and nsswitch.conf contents for spec (names already checked). */
int sbx__etc_passwd(const struct sbx__isolation_spec *spec, const char *home, struct sbx_buf *out,
                    struct sbx_error *err);
int sbx__etc_group(const struct sbx__isolation_spec *spec, struct sbx_buf *out,
                   struct sbx_error *err);
int sbx__etc_hosts(const char *hostname, struct sbx_buf *out, struct sbx_error *err);
int sbx__etc_nsswitch(struct sbx_buf *out, struct sbx_error *err);

/* ---- seccomp (seccomp.c) ---- */

/* A compiled filter program (classic BPF), ready for seccomp(2) after fork. */
struct sbx__bpf {
    void *insns; /* struct sock_filter[], owned */
    size_t len;  /* number of instructions */
};

/* Compile the two sandbox filters for the native architecture: allow is the allowlist (default
 * ENOSYS, EPERM for the dangerous calls, socket families), args is a default-allow filter that
 * refuses TIOCSTI/TIOCLINUX with any high bits and (EPERM) every chmod, creating open, creat
 * and mknod with S_ISUID or S_ISGID in the mode. SBX_E_SYS with libseccomp's error. */
int sbx__seccomp_build_pair(struct sbx__bpf *allow, struct sbx__bpf *args, struct sbx_error *err);
/* Join allow and args into *out, one program whose verdicts are those of args installed first
 * and allow stacked on it (seccomp.c says why). SBX_E_SYS when the two exceed BPF_MAXINSNS. */
int sbx__bpf_chain(const struct sbx__bpf *allow, const struct sbx__bpf *args, struct sbx__bpf *out,
                   struct sbx_error *err);
/* The commands' filter: the pair above, joined. */
int sbx__seccomp_build(struct sbx__bpf *out, struct sbx_error *err);
/* Compile the filter of the sandbox's PID 1: default-allow, refusing the mount API, new
 * namespaces, ptrace, keyrings, bpf, perf, modules and the other host-wide calls. */
int sbx__seccomp_build_init(struct sbx__bpf *out, struct sbx_error *err);
void sbx__bpf_release(struct sbx__bpf *bpf);
/* Install a compiled filter in the calling thread (no_new_privs must be set). Allocates
 * nothing: safe after fork. */
int sbx__seccomp_load(const struct sbx__bpf *bpf, struct sbx_error *err);

/* ---- cgroups (cgroup.c) ---- */

enum sbx__cgroup_ctrl { SBX__CG_MEMORY, SBX__CG_PIDS, SBX__CG_CPU, SBX__CG_NCTRL };

/* The sandbox's cgroups: one directory per controller (v1), or one directory (v2). The
 * counter files are kept open so that the sandbox's PID 1, which no longer sees /sys, can still
 * read them. An all-zero struct is "no cgroups" only after sbx__cgroup_init. */
struct sbx__cgroup {
    int v2;                   /* 1: unified hierarchy holds the controllers */
    int owner;                /* 1: this process removes the directories in destroy */
    char *dir[SBX__CG_NCTRL]; /* created directories (v1), NULL when not used */
    char *v2dir;              /* created directory (v2) */
    uint64_t memory_limit;    /* bytes, 0 = none */
    uint64_t pids_limit;      /* 0 = none */
    int oom_fd;               /* memory.oom_control (v1) or memory.events (v2), -1 = none */
    int pids_fd;              /* pids.events, -1 = none */
    uint64_t cpu_millis;      /* quota set, 0 = none */
    unsigned unenforced;      /* controllers wanted but not usable: (1 << enum sbx__cgroup_ctrl) */
    char why[SBX__CG_NCTRL][160]; /* the reason of each unenforced controller */
};

/* Counters read from the cgroup files, to explain why a command died. */
struct sbx__cgroup_events {
    uint64_t oom_kills;
    uint64_t pids_max_hits;
};

/* An empty cgroup set (no directories, fds -1). */
void sbx__cgroup_init(struct sbx__cgroup *cg);
/* Parse /proc/self/cgroup text: the path of controller ctrl ("memory", "pids", "cpu") in v1,
 * or the v2 path when ctrl is "". *out: caller owns (free). SBX_E_NOTFOUND if absent. */
int sbx__cgroup_self_path(const char *proc_cgroup, const char *ctrl, char **out,
                          struct sbx_error *err);
/* The directory of the caller's cgroup for ctrl ("" = the unified hierarchy), from the texts of
 * /proc/self/mountinfo and /proc/self/cgroup; a hierarchy mounted with a non-"/" root (inside a
 * cgroup namespace) is accounted for. *out: caller owns (free). SBX_E_NOTFOUND if not mounted. */
int sbx__cgroup_own_dir(const char *mountinfo, const char *self, const char *ctrl, char **out,
                        struct sbx_error *err);
/* Create the cgroups named name under the caller's own cgroups and write the limits. Limits
 * that are 0 or SBX__LIMIT_NONE are not set. required is a mask of (1 << enum sbx__cgroup_ctrl):
 * those controllers must work, the others are skipped with a log message when unusable. */
int sbx__cgroup_create(const char *name, const struct sbx__isolation_limits *limits,
                       unsigned required, struct sbx__cgroup *out, struct sbx_error *err);
/* "memory", "pids", "cpu". */
const char *sbx__cgroup_ctrl_name(enum sbx__cgroup_ctrl c);
/* Move pid into every created cgroup. */
int sbx__cgroup_attach(const struct sbx__cgroup *cg, pid_t pid, struct sbx_error *err);
int sbx__cgroup_read_events(const struct sbx__cgroup *cg, struct sbx__cgroup_events *out,
                            struct sbx_error *err);
/* Remove the empty cgroups whose names start with prefix (e.g. "sbx-") under the caller's own
 * cgroups, created at least min_age_s seconds ago: what a supervisor killed with SIGKILL left
 * behind. A cgroup with processes is never removed (the kernel refuses), and the age keeps a
 * sandbox being created right now (directory made, process not yet attached) safe. *removed
 * (may be NULL) gets the count, paths (may be NULL) the removed directories. */
int sbx__cgroup_remove_stale(const char *prefix, unsigned min_age_s, unsigned *removed,
                             struct sbx_strv *paths, struct sbx_error *err);
/* The directories that sbx__cgroup_create(name, ...) uses when called now: name under the
 * caller's own cgroup of every hierarchy sbx uses (whether or not they exist yet). */
int sbx__cgroup_dirs_for(const char *name, struct sbx_strv *out, struct sbx_error *err);
/* Kill every process in the cgroup directory dir (cgroup.kill where the kernel has it, else
 * SIGKILL of each member until it is empty), then remove it. A missing dir is fine. Errors:
 * the cgroup could not be emptied or removed. */
int sbx__cgroup_remove_path(const char *dir, struct sbx_error *err);
/* Owner: kill what is left in the cgroups and remove them. Every process: close the fds and
 * free the memory; cg is left empty (as after sbx__cgroup_init). Errors are logged. */
void sbx__cgroup_destroy(struct sbx__cgroup *cg);

/* ---- the isolation object ---- */

struct sbx__isolation;

enum sbx__isolation_role {
    SBX__ISOLATION_OUTER = 1, /* host side: call sbx__isolation_outer_wait */
    SBX__ISOLATION_INNER,     /* PID 1 inside the sandbox: serve */
};

/* Validate spec, build the plan, the /etc files, the seccomp programs and the default user.
 * Copies what it needs from spec. *out: caller owns (sbx__isolation_free). */
int sbx__isolation_new(const struct sbx__isolation_spec *spec, struct sbx__isolation **out,
                       struct sbx_error *err);
void sbx__isolation_free(struct sbx__isolation *iso);
/* The sandbox's cgroups after enter: the limits in force and the controllers that are not
 * enforced, with their reasons (borrowed). */
const struct sbx__cgroup *sbx__isolation_cgroup(const struct sbx__isolation *iso);

/* Create the cgroups, fork into the new namespaces and build the root (see the top of this
 * file). Must be called while the process is single-threaded. Returns 0 twice: in the caller
 * with *role OUTER once the inner process reported a complete setup, and in the inner process
 * (PID 1) with *role INNER. Errors are returned in the caller only; the inner process of a
 * failed setup is gone. Blocks until the setup is complete. */
int sbx__isolation_enter(struct sbx__isolation *iso, enum sbx__isolation_role *role,
                         struct sbx_error *err);
/* OUTER only: wait for the inner process to end, killing it on SIGTERM, SIGINT or SIGHUP to
 * the outer process, then remove the cgroups. *status receives the wait status of the inner
 * process. Blocks. Blocks those signals in the calling thread while it waits (other threads of
 * the outer process, such as a proxy, should keep them blocked). */
int sbx__isolation_outer_wait(struct sbx__isolation *iso, int *status, struct sbx_error *err);
/* The sandbox's host id range (privileged runners, once entered): 1 with *first and *count
 * set, 0 when commands run as the caller's ids. */
int sbx__isolation_host_ids(const struct sbx__isolation *iso, uint32_t *first, uint32_t *count);
/* OUTER only: host pid of the middle process, which shares every namespace of the sandbox
 * except the pid namespace (kill it to end the sandbox). */
pid_t sbx__isolation_inner_pid(const struct sbx__isolation *iso);
/* OUTER only, after sbx__isolation_outer_wait: the signal (SIGTERM, SIGINT, SIGHUP) on which it
 * killed the sandbox, 0 when the sandbox ended by itself. */
int sbx__isolation_stop_signal(const struct sbx__isolation *iso);
/* OUTER only: an fd on the sandbox's network namespace, to join it (sbx__priv_setns) by host-side
 * helpers (port forwarders). *out: caller owns (close). */
int sbx__isolation_netns_fd(const struct sbx__isolation *iso, int *out, struct sbx_error *err);

/* Resolve a manifest user name (NULL = the default user) to sandbox ids. SBX_E_NOTFOUND for
 * an unknown user, SBX_E_UNSUPPORTED for a user the id maps cannot represent (an unprivileged
 * caller maps only the default user). */
int sbx__isolation_user(const struct sbx__isolation *iso, const char *name, struct sbx__run_as *out,
                        struct sbx_error *err);

/* INNER only, once PID 1 needs nothing more than the commands may do: install the commands'
 * filter in PID 1 itself, above its own. Every process it starts from then on inherits the
 * filter, and sbx__isolation_child no longer installs it per command (the kernel checks,
 * translates and JIT-compiles each filter a process installs). On failure nothing changed:
 * the commands install it themselves. */
int sbx__isolation_hold_cmd_filter(struct sbx__isolation *iso, struct sbx_error *err);

/* In a command child after fork, before exec: see the top of this file. Allocates nothing.
 * Refuses (SBX_E_SANDBOX) a working directory outside the sandbox root. */
int sbx__isolation_child(const struct sbx__isolation *iso, const struct sbx__run_as *user,
                         struct sbx_error *err);

/* The environment of a command: a minimal safe set (PATH, HOME, USER, LOGNAME, SHELL, LANG,
 * TERM, TMPDIR) then the manifest environment on top, then extra ("KEY=VALUE", NULL-terminated,
 * may be NULL; e.g. the command's own env). Nothing of the calling process's environment. term
 * NULL = "dumb". Appends to out; SBX_E_INVAL for an entry without '=' or with a bad name. */
int sbx__isolation_env(const struct sbx__isolation *iso, const struct sbx__run_as *user,
                       const char *term, const char *const *extra, struct sbx_strv *out,
                       struct sbx_error *err);

/* Read the sandbox's cgroup counters (zeros when it has no cgroups). */
int sbx__isolation_events(const struct sbx__isolation *iso, struct sbx__cgroup_events *out,
                          struct sbx_error *err);
/* Describe how a command ended, given its wait status and the counters read before it started
 * and after it ended: "exited with status 3", "killed: out of memory (limit 512 MiB)",
 * "killed by signal 9", "exited with status 137 (a process was killed: out of memory, limit
 * 512 MiB)" (a shell whose child was killed), "... (process limit 1024 reached)". The counters
 * are per sandbox: with commands running concurrently an OOM kill is attributed to each
 * command that was running when it happened. Appends to out. */
int sbx__isolation_describe_exit(const struct sbx__isolation *iso, int status,
                                 const struct sbx__cgroup_events *before,
                                 const struct sbx__cgroup_events *after, struct sbx_buf *out,
                                 struct sbx_error *err);

/* Test driver: enter, run argv as user (NULL = default) with stdio inherited and the isolated
 * environment, wait, leave. *status: the command's wait status; describe (may be NULL) gets
 * sbx__isolation_describe_exit's text. Used by `sbx __isolate-run` and the unit tests. */
int sbx__isolation_run(const struct sbx__isolation_spec *spec, const char *user, char *const *argv,
                       int *status, struct sbx_buf *describe, struct sbx_error *err);

#endif
