/* The isolation executor of the local provider (isolate/), private to it: the isolation
 * object and what its files share.
 *
 *   isolate.c     the object: paths resolved, the plan, users, environment, limits; the
 *                 command child (credentials, capabilities, rlimits, seccomp); reporting
 *   root.c        the new root, built by PID 1 from the plan
 *   enter.c       the namespaces: the middle process, id maps, the idmapped workspace, the
 *                 cgroups, and the host side's wait
 *   isolate-run.c the test driver (sbx __isolate-run)
 *
 * The calls that change a mount or a namespace are made through src/sandbox/host/priv.c. */
#ifndef SBX_PROVIDERS_LOCAL_ISOLATE_EXECUTOR_H
#define SBX_PROVIDERS_LOCAL_ISOLATE_EXECUTOR_H

#include <stddef.h>
#include <sys/resource.h>
#include <sys/types.h>

#include "providers/local/isolate/isolate.h"
#include "sbx/strv.h"

#define SBX__ISO_NEWROOT "/newroot"
#define SBX__ISO_OLDROOT "/oldroot"
#define SBX__ISO_MIB     (1024ull * 1024)

struct sbx__isolation {
    struct sbx__isolation_plan plan;
    char *root;
    char *workspace;
    enum sbx__net_mode net;
    char *hostname;
    struct sbx_strv users; /* names, users.v[0] is the default */
    gid_t user_groups[SBX__ISOLATION_MAX_USERS][SBX__ISOLATION_MAX_GROUPS];
    size_t user_ngroups[SBX__ISOLATION_MAX_USERS];
    size_t ngroups;
    struct sbx_strv env;                 /* manifest environment */
    struct sbx__isolation_limits limits; /* as given */
    char *cgroup_name;
    struct sbx__bpf bpf_cmd, bpf_init; /* the commands' (one program), PID 1's */
    struct rlimit rl_fsize, rl_nofile, rl_nproc;
    int cap_last;
    int bset_empty;      /* set in PID 1 once it emptied its bounding set, which children inherit */
    int cmd_filter_held; /* set in PID 1 once bpf_cmd is its own filter, which children inherit */
    uid_t host_uid;
    gid_t host_gid;
    int privileged; /* caller is host root: range maps, setgroups allowed */
    int dedicated;  /* privileged, and commands run as dedicated host ids (idmapped workspace) */
    int allow_host_uid; /* privileged without an idmapped workspace: run as the caller anyway */
    int ws_tree;        /* detached idmapped mount of the workspace, -1 = bind it by path */
    struct sbx__idrange idr; /* privileged: the sandbox's own host ids */
    char *id;                /* sandbox id, for the range's record */
    char *idrange_dir;       /* NULL = SBX__IDRANGE_DIR */
    struct sbx__cgroup cg;
    pid_t middle;
    int stop_signal; /* the signal that made outer_wait kill the sandbox; 0: none */
};

/* isolate.c: a resource limit of want (SBX__LIMIT_NONE: none; 0: dflt), lowered to the hard
 * limit this process cannot raise. */
struct rlimit sbx__iso_capped(int resource, uint64_t want, uint64_t dflt);
/* isolate.c: empty the capability bounding set (CAP_SETPCAP must still be held). No process can
 * add to its bounding set again, and fork copies it. */
int sbx__iso_drop_bounding_set(const struct sbx__isolation *iso, struct sbx_error *err);
/* root.c, in PID 1 after the namespaces exist: build the root from the plan and move into it
 * (pivot_root; the host tree is detached). */
int sbx__iso_build_root(const struct sbx__isolation *iso, struct sbx_error *err);
/* enter.c: read len bytes unless the writer closes first; the count read, or -1. */
ssize_t sbx__iso_read_full(int fd, void *buf, size_t len);

#endif
