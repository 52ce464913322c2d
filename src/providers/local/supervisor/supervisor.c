/* The supervisor: one detached process per local sandbox (supervisor.h lists the files of this
 * room). It reads its configuration (JSON) on stdin, binds the control socket in the runtime
 * directory, reports readiness on stdout, and then serves (serve.c): one request per connection,
 * commands under reapers of their own with stdio pipes handed to the client (exec.c), every
 * child reaped, timeouts enforced, and on shutdown every process it ever spawned killed
 * (kill.c). Isolated, a descendant serves as PID 1 of the sandbox and this process stays on the
 * host (run_outer). See docs/internals/local-provider.md. */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/file.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/fs-internal.h"
#include "providers/local/client/disk.h"
#include "providers/local/config.h"
#include "providers/local/net/net.h"
#include "providers/local/supervisor/logcap.h"
#include "providers/local/supervisor/supervisor.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/log.h"
#include "sbx/time.h"

#define CONFIG_MAX ((size_t)16 << 20)
/* PID 1 waits this long for the host side to set up the network: only a safety bound, since
 * a dead host side closes the channel at once. */
#define NETWORK_WAIT_MS 300000
/* Exit status of a supervisor whose creator went away before the report: nobody knows about
 * the sandbox, so what the create made is removed (remove_unclaimed). */
#define EXIT_UNCLAIMED 3

/* ---------------------------------------------------------------------------------------------
 * Start-up */

/* The mount point of a storage mount, made in the host workspace before the sandbox exists
 * (inside, an idmapped workspace refuses directories made by unmapped ids). Components are
 * walked without following symlinks: a given workspace could lead elsewhere. */
static int make_mount_point(const struct sbx__sup *s, const char *dst, struct sbx_error *err)
{
    size_t rl = strlen(s->root);
    const char *rel = strcmp(s->root, "/") == 0                          ? dst + 1
                      : strncmp(dst, s->root, rl) == 0 && dst[rl] == '/' ? dst + rl + 1
                                                                         : NULL;
    if (!rel)
        return 0; /* outside the workspace: the root build makes it */
    int fd = open(s->workspace, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return sbx_error_errno(err, errno, "cannot open workspace '%s'", s->workspace);
    char *copy = sbx_xstrdup(rel), *save = NULL;
    int rc = 0;
    for (char *c = strtok_r(copy, "/", &save); c && rc == 0; c = strtok_r(NULL, "/", &save)) {
        if (mkdirat(fd, c, 0755) < 0 && errno != EEXIST) {
            rc = sbx_error_errno(err, errno, "cannot create mount point '%s'", dst);
            break;
        }
        int next = openat(fd, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (next < 0)
            rc = sbx_error_errno(err, errno, "mount point '%s' is not a directory", dst);
        close(fd);
        fd = next;
    }
    if (fd >= 0)
        close(fd);
    free(copy);
    return rc;
}

/* The isolation spec of the configuration, turned into an isolation object (sbx__isolation_new
 * copies what it keeps and checks the names, grants and environment). */
static int load_isolation(struct sbx__sup *s, const struct sbx__local_config *cfg,
                          struct sbx_error *err)
{
    struct sbx__isolation_spec spec = {0};
    struct sbx__isolation_user *users = NULL;
    struct sbx__isolation_group *groups = NULL;
    struct sbx__isolation_grant *grants = NULL;
    size_t i;

    spec.workspace = s->workspace;
    spec.root = s->root;
    spec.env = (const char *const *)s->env.v;
    char *cg = sbx_xasprintf("sbx-%s", s->id);
    spec.cgroup_name = cg;
    spec.id = s->id;
    spec.host_home = cfg->host_home;
    spec.allow_host_uid = cfg->allow_host_uid;
    spec.net = cfg->net == SBX__LOCAL_CONFIG_NET_FULL ? SBX__NET_FULL : SBX__NET_NONE;
    spec.limits.memory_bytes = cfg->limits.memory_bytes;
    spec.limits.pids = cfg->limits.pids;
    spec.limits.cpu_millis = cfg->limits.cpu_millis;
    spec.limits.fsize_bytes = cfg->limits.file_size_bytes;
    spec.limits.nofile = cfg->limits.open_files;
    users = sbx_xcalloc(cfg->users.n + 1, sizeof(*users));
    for (i = 0; i < cfg->users.n; i++)
        users[i].name = cfg->users.v[i];
    spec.users = users;
    spec.nusers = cfg->users.n;
    groups = sbx_xcalloc(cfg->n_groups + 1, sizeof(*groups));
    for (i = 0; i < cfg->n_groups; i++) {
        groups[i].name = cfg->groups[i].name;
        groups[i].members = (const char *const *)cfg->groups[i].members.v;
    }
    spec.groups = groups;
    spec.ngroups = cfg->n_groups;
    grants = sbx_xcalloc(cfg->n_grants + s->mounts.n + 1, sizeof(*grants));
    for (i = 0; i < cfg->n_grants; i++) {
        grants[i].src = cfg->grants[i].src;
        grants[i].dst = cfg->grants[i].dst;
        grants[i].writable = cfg->grants[i].writable;
        grants[i].dangerous = cfg->grants[i].dangerous;
    }
    /* A storage mount is a grant of its staging mount point: under the runtime dir (in /run
     * for root, hence dangerous), never scanned for sockets (it is a bucket). */
    for (size_t k = 0; k < s->mounts.n; k++, i++) {
        grants[i].src = s->mounts.v[k].staging;
        grants[i].dst = cfg->mounts[k].dst;
        grants[i].writable = cfg->mounts[k].writable;
        grants[i].dangerous = 1;
    }
    spec.grants = grants;
    spec.ngrants = i;
    int rc = sbx__isolation_new(&spec, &s->iso, err);
    free(users);
    free(groups);
    free(grants);
    free(cg);
    return rc;
}

/* The network of an isolated sandbox: mode allow's patterns (and the proxy variables in every
 * command's environment), the forwarders' address, the test-only host map. */
static void load_network(struct sbx__sup *s, struct sbx__local_config *cfg)
{
    s->allow = cfg->allow;
    sbx_strv_init(&cfg->allow);
    s->test_hosts = cfg->test_hosts;
    sbx_strv_init(&cfg->test_hosts);
    s->port_bind = cfg->port_bind;
    cfg->port_bind = NULL;
    s->publish = cfg->publish;
    sbx_strv_init(&cfg->publish);
    memcpy(s->allow_ports, cfg->allow_ports, sizeof(s->allow_ports));
    s->n_allow_ports = cfg->n_allow_ports;
    s->own_netns = cfg->net != SBX__LOCAL_CONFIG_NET_FULL;
    if (cfg->net == SBX__LOCAL_CONFIG_NET_ALLOW)
        sbx__net_proxy_env(0, &s->env);
}

/* PID 1: wait until the outer process has the network up (the proxy listening), so that the
 * first command finds it. */
static int wait_network(struct sbx__sup *s, struct sbx_error *err)
{
    struct sbx__net_reply r;
    struct pollfd p = {.fd = s->net_chan[1], .events = POLLIN};
    memset(&r, 0, sizeof(r));
    if (poll(&p, 1, NETWORK_WAIT_MS) != 1 ||
        recv(s->net_chan[1], &r, sizeof(r), 0) != (ssize_t)sizeof(r))
        return sbx_error_set(err, SBX_E_SANDBOX, 0,
                             "the sandbox network was not set up (no answer from the host side)");
    r.msg[sizeof(r.msg) - 1] = '\0';
    if (r.host_port != 1)
        return sbx_error_set(err, SBX_E_SANDBOX, 0, "the sandbox network was not set up: %s",
                             r.msg);
    return 0;
}

/* OUTER: start the proxy and the forwarders' loop, tell PID 1 how it went. */
static struct sbx__net *start_network(struct sbx__sup *s)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__net *net = NULL;
    struct sbx__net_reply r;
    int userns = -1, netns = -1;
    int rc = sbx__netns_open(sbx__isolation_inner_pid(s->iso), &userns, &netns, &err);
    if (rc == 0) {
        struct sbx__net_config cfg = {
                .userns_fd = userns,
                .netns_fd = netns,
                .patterns = (const char *const *)s->allow.v,
                .npatterns = s->allow.n,
                .ports = s->n_allow_ports ? s->allow_ports : NULL,
                .nports = s->n_allow_ports,
                .test_allow_loopback = s->test_hosts.n > 0,
                .test_hosts = (const char *const *)s->test_hosts.v,
                .control_fd = s->net_chan[0],
                .forward_bind = s->port_bind,
                .unix_dir_fd = s->dir_fd,
                .unix_dir = s->dir,
        };
        rc = sbx__net_new(&cfg, &net, &err);
    }
    /* The fixed forwards (-p HOST:PORT) listen from the start: a host port that is taken fails
     * the create, not a later connection. */
    for (size_t i = 0; rc == 0 && i < s->publish.n; i++) {
        char bind[64];
        struct sbx__net_forward fwd = {0};
        rc = sbx__local_publish_parse(s->publish.v[i], bind, &fwd.host_port, &fwd.port, NULL, &err);
        fwd.bind = bind;
        if (rc == 0 && (rc = sbx__net_forward_add(net, &fwd, NULL, NULL, 0, &err)) < 0)
            sbx_error_prefix(&err, "-p %s", s->publish.v[i]);
    }
    if (rc < 0 && net) {
        sbx__net_free(net);
        net = NULL;
    }
    memset(&r, 0, sizeof(r));
    r.host_port = rc == 0 ? 1 : 0;
    if (rc < 0) {
        snprintf(r.msg, sizeof(r.msg), "%.255s", err.msg);
        sbx_log(SBX_LOG_ERROR, "sandbox '%s': %s", s->id, err.msg);
    }
    (void)!send(s->net_chan[0], &r, sizeof(r), MSG_NOSIGNAL);
    sbx_fd_close(&s->net_chan[0]);
    if (userns >= 0)
        close(userns);
    if (netns >= 0)
        close(netns);
    return net;
}

/* ---------------------------------------------------------------------------------------------
 * A sandbox tied to its creator (sbx_local_options.tied): when that process ends, however it
 * ends, the sandbox is removed as rm would remove it. The host-side process (the only one
 * without isolation, the outer one with it) watches the creator's pidfd; the end is a SIGTERM
 * to itself, so the usual shutdown runs, and the removal follows once everything is dead. */

/* Before anything else opens a descriptor: take the creator's pidfd if it is there. */
static void tie_claim(struct sbx__sup *s)
{
    /* A pidfd (signal 0 through it works, or the process is gone already), or on kernels
     * without them a pipe whose write end the creator holds: either polls readable (a pipe:
     * hung up) once the creator is gone. */
    struct stat st;
    int r = (int)syscall(SYS_pidfd_send_signal, SBX_PROTO_TIE_FD, 0, NULL, 0);
    int pidfd = r == 0 || errno == ESRCH || errno == EPERM;
    if ((pidfd || (fstat(SBX_PROTO_TIE_FD, &st) == 0 && S_ISFIFO(st.st_mode))) &&
        fcntl(SBX_PROTO_TIE_FD, F_SETFD, FD_CLOEXEC) == 0)
        s->tie_fd = SBX_PROTO_TIE_FD;
}

static int tie_config(struct sbx__sup *s, int tied, struct sbx_error *err)
{
    if (!tied) {
        sbx_fd_close(&s->tie_fd);
        return 0;
    }
    if (s->tie_fd < 0)
        return sbx_error_set(err, SBX_E_INVAL, 0, "a tied sandbox needs its creator's pidfd");
    return 0;
}

static void *tie_main(void *arg)
{
    struct pollfd pfd = {.fd = *(const int *)arg, .events = POLLIN};
    while (poll(&pfd, 1, -1) < 0 && errno == EINTR)
        ;
    kill(getpid(), SIGTERM);
    return NULL;
}

/* The watch. The shutdown signals are blocked first, so that the SIGTERM reaches the signalfd
 * (or the outer process's wait) and never kills this process before it cleaned up. */
static int tie_watch(struct sbx__sup *s, struct sbx_error *err)
{
    sigset_t stop, all, old;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int e = pthread_create(&s->tie_thread, NULL, tie_main, &s->tie_fd);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (e != 0) {
        /* Unwatched, the sandbox could outlive its creator: end it now instead. */
        kill(getpid(), SIGTERM);
        return sbx_error_errno(err, e, "cannot watch the creating process");
    }
    s->tie_watching = 1;
    return 0;
}

/* The host side of a sandbox going away with nobody to run rm: the workspace when it is the
 * sandbox's own (after unmounting and deleting its disk image, whose path is derived: only ever
 * for a workspace sbx made), then the runtime directory. */
static void remove_sandbox_files(struct sbx__sup *s, int owned_ws)
{
    struct sbx_error e = SBX_ERROR_INIT;
    if (owned_ws) {
        char *image = sbx_xasprintf("%s" SBX__DISK_IMAGE_SUFFIX, s->workspace);
        struct stat st;
        if (lstat(image, &st) == 0 && S_ISREG(st.st_mode) &&
            sbx__disk_detach(image, NULL, s->workspace, 0, &e) < 0)
            sbx_log(SBX_LOG_WARN, "sandbox '%s': %s", s->id, e.msg);
        free(image);
        if (sbx__fs_remove_tree(s->workspace, &e) < 0)
            sbx_log(SBX_LOG_WARN, "sandbox '%s': %s", s->id, e.msg);
    }
    if (sbx__fs_remove_tree(s->dir, &e) < 0)
        sbx_log(SBX_LOG_WARN, "sandbox '%s': %s", s->id, e.msg);
}

/* At the end, with every process of the sandbox dead: if the creator is gone, remove the
 * runtime directory and an owned workspace (a given one stays as it is). */
static void tie_end(struct sbx__sup *s)
{
    if (s->tie_watching) {
        pthread_cancel(s->tie_thread);
        pthread_join(s->tie_thread, NULL);
        s->tie_watching = 0;
    }
    struct pollfd pfd = {.fd = s->tie_fd, .events = POLLIN};
    if (s->tie_fd < 0 || !s->dir || poll(&pfd, 1, 0) <= 0)
        return;
    sbx_log(SBX_LOG_INFO, "sandbox '%s': its creator ended: removing the sandbox", s->id);
    remove_sandbox_files(s, s->workspace_owned);
}

/* Take what the process keeps from the parsed configuration (cfg is left to release). */
static int load_config(struct sbx__sup *s, struct sbx__local_config *cfg, struct sbx_error *err)
{
    int rc;
    s->workspace_owned = cfg->workspace_owned;
    s->test_delay_ms = cfg->test_delay_ms;
    s->id = sbx_xstrdup(cfg->id);
    s->dir = sbx_xstrdup(cfg->dir);
    s->workspace = sbx_xstrdup(cfg->workspace);
    s->root = sbx_xstrdup(cfg->root);
    s->env = cfg->env;
    sbx_strv_init(&cfg->env);
    memcpy(s->ports, cfg->ports, sizeof(s->ports));
    s->n_ports = cfg->n_ports;
    if ((rc = tie_config(s, cfg->tied, err)) < 0)
        return rc;
    if (!cfg->isolated)
        return 0;
    load_network(s, cfg);
    for (size_t i = 0; i < cfg->n_mounts; i++)
        if ((rc = make_mount_point(s, cfg->mounts[i].dst, err)) < 0)
            return rc;
    if ((rc = sbx__mounts_start(&s->mounts, s->dir, cfg->mounts, cfg->n_mounts, err)) < 0) {
        s->mount_failed = 1;
        return rc;
    }
    return load_isolation(s, cfg, err);
}

/* The supervisor record (teardown.c): this process, and the cgroups the isolation will make,
 * written before anything else exists that rm might have to kill or remove. */
static int write_record(struct sbx__sup *s, struct sbx_error *err)
{
    s->record.pid = getpid();
    if (sbx__proc_stat(s->record.pid, &s->record.start, NULL) < 0)
        return sbx_error_errno(err, errno, "cannot read the start time of pid %d",
                               (int)s->record.pid);
    if (s->iso) {
        char *cg = sbx_xasprintf("sbx-%s", s->id);
        struct sbx_error e = SBX_ERROR_INIT;
        /* Without cgroups (an unprivileged caller on v1) the list is just empty. */
        if (sbx__cgroup_dirs_for(cg, &s->record.cgroups, &e) < 0)
            sbx_log(SBX_LOG_WARN, "sandbox cgroups not recorded: %s", e.msg);
        free(cg);
    }
    return sbx__local_record_write(s->dir_fd, &s->record, err);
}

/* PID 1 of the sandbox as a host pid: the only child of the middle process (which has forked
 * it by the time enter returns). The middle process itself when /proc cannot tell. */
static pid_t sandbox_init_pid(pid_t middle)
{
    char path[96], buf[64];
    snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)middle, (int)middle);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);
    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return middle;
    buf[n] = '\0';
    long pid = strtol(buf, NULL, 10);
    return pid > 0 ? (pid_t)pid : middle;
}

/* The creator went away before it handed the sandbox over (the report found nobody, or the
 * unclaimed marker is still there): nobody learnt the sandbox's id, nobody can have put work
 * into its workspace. Remove what the create made, on the host, under the create lease: while
 * someone else holds it (the creator rolling back, a reclaim), that one removes it. */
static void remove_unclaimed(struct sbx__sup *s)
{
    int lease = s->dir_fd >= 0 ? openat(s->dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    if (lease < 0 || flock(lease, LOCK_EX | LOCK_NB) < 0) {
        sbx_fd_close(&lease);
        return;
    }
    sbx_log(SBX_LOG_WARN,
            "sandbox '%s': its creator went away before it took the sandbox; "
            "removing it",
            s->id);
    sbx_fd_close(&s->dir_fd);
    remove_sandbox_files(s, s->workspace_owned);
    sbx_fd_close(&lease);
}

/* The unclaimed marker is still in the runtime dir: the create has not handed the sandbox over
 * (it runs, or it died). */
static int unclaimed_mark(const struct sbx__sup *s)
{
    struct stat st;
    return s->dir_fd >= 0 && fstatat(s->dir_fd, SBX_PROTO_UNCLAIMED, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

/* The configuration on stdin (the creator's socket), parsed and taken; then stdin becomes
 * /dev/null, so that no process of the sandbox keeps the creator's socket as stdio. */
static int read_config(struct sbx__sup *s, struct sbx_error *err)
{
    struct sbx_buf cfgtext;
    struct sbx__local_config cfg;
    json_t *cfgjson = NULL;
    int rc, parsed = 0;
    sbx_buf_init(&cfgtext, CONFIG_MAX);
    rc = sbx_fd_read_all(0, CONFIG_MAX, &cfgtext, err);
    if (rc == 0)
        rc = sbx_json_parse(cfgtext.data, cfgtext.len, NULL, &cfgjson, err);
    if (rc == 0)
        parsed = (rc = sbx__local_config_from_json(cfgjson, &cfg, err)) == 0;
    if (rc == 0)
        rc = load_config(s, &cfg, err);
    if (parsed)
        sbx__local_config_release(&cfg);
    json_decref(cfgjson);
    if (cfgtext.data)
        explicit_bzero(cfgtext.data, cfgtext.len);
    sbx_buf_release(&cfgtext);
    if (rc < 0) {
        if (!s->mount_failed)
            sbx_error_prefix(err, "supervisor configuration");
        return rc;
    }
    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (devnull < 0)
        return sbx_error_errno(err, errno, "cannot open '/dev/null'");
    dup2(devnull, 0);
    close(devnull);
    return 0;
}

/* The runtime directory: its descriptor, the supervisor record, the log (fd 2 from here on), the
 * progress counter; and as many descriptors as the hard limit allows (every exec holds a
 * connection). */
static int open_runtime_dir(struct sbx__sup *s, struct sbx_error *err)
{
    int rc;
    s->dir_fd = open(s->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (s->dir_fd < 0)
        return sbx_error_errno(err, errno, "cannot open runtime directory '%s'", s->dir);
    if ((rc = write_record(s, err)) < 0)
        return rc;
    int logfd = openat(s->dir_fd, SBX_PROTO_LOG, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (logfd >= 0) {
        dup2(logfd, 2);
        close(logfd);
    }
    struct rlimit nofile;
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
        nofile.rlim_cur = nofile.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &nofile);
    }
    s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    /* Made here, before PID 1 exists: inside, it writes through this descriptor. Without it
     * clients wait for a plain deadline. */
    uint64_t zero = 0;
    s->progress_fd = openat(s->dir_fd, SBX_PROTO_PROGRESS,
                            O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (s->progress_fd >= 0 && pwrite(s->progress_fd, &zero, sizeof(zero), 0) != sizeof(zero))
        sbx_fd_close(&s->progress_fd);
    if (s->progress_fd < 0)
        sbx_log(SBX_LOG_WARN, "no progress counter: %s", strerror(errno));
    return 0;
}

/* The control socket, bound in the runtime directory through its descriptor (so the length
 * of the path never matters) and private to us (umask 077). */
static int listen_control(struct sbx__sup *s, struct sbx_error *err)
{
    s->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s->listen_fd < 0)
        return sbx_error_errno(err, errno, "socket");
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d/%s", s->dir_fd,
             SBX_PROTO_SOCKNAME);
    mode_t old = umask(077);
    int b = bind(s->listen_fd, (struct sockaddr *)&sa, sizeof(sa));
    umask(old);
    if (b < 0 || listen(s->listen_fd, 128) < 0)
        return sbx_error_errno(err, errno, "cannot listen on '%s/%s'", s->dir, SBX_PROTO_SOCKNAME);
    return 0;
}

/* Isolation: a descendant becomes PID 1 of the new namespaces, in a root built from nothing, and
 * serves; this process stays on the host (*outer set). Set-up errors come back here, naming the
 * missing kernel feature. */
static int enter_isolation(struct sbx__sup *s, int *outer, struct sbx_error *err)
{
    /* What supervisors killed with SIGKILL left: their empty cgroups. */
    unsigned stale = 0;
    struct sbx_error ignored = SBX_ERROR_INIT;
    if (sbx__cgroup_remove_stale("sbx-", 60, &stale, NULL, &ignored) == 0 && stale)
        sbx_log(SBX_LOG_INFO, "removed %u stale sandbox cgroups", stale);
    enum sbx__isolation_role role = 0;
    if (s->own_netns && socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, s->net_chan) < 0)
        return sbx_error_errno(err, errno, "cannot create the network channel");
    int rc = sbx__isolation_enter(s->iso, &role, err);
    if (rc < 0)
        return rc;
    if (role == SBX__ISOLATION_OUTER) {
        sbx_fd_close(&s->net_chan[1]);
        *outer = 1;
        return 0;
    }
    s->inner = 1;
    /* The rclone processes belong to the outer process; their pids mean nothing here. */
    sbx__mounts_forget(&s->mounts);
    sbx_fd_close(&s->net_chan[0]);
    if (s->net_chan[1] >= 0 && (rc = wait_network(s, err)) < 0)
        return rc;
    /* Inside, the runtime directory's descriptor leads into the detached host tree: let go of
     * it (the outer process removes the socket at the end). */
    sbx_fd_close(&s->dir_fd);
    return 0;
}

/* The serving process: a subreaper of the commands' orphans (inside a pid namespace we are
 * PID 1 and get them anyway), its signals on a signalfd, the workspace opened by its sandbox
 * path (after any pivot: commands and clients must see the workspace the sandbox sees). */
static int prepare_serving(struct sbx__sup *s, struct sbx_error *err)
{
    if (!s->iso && prctl(PR_SET_CHILD_SUBREAPER, 1) < 0)
        return sbx_error_errno(err, errno, "cannot become a child subreaper");
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    sigprocmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    s->sig_fd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (s->sig_fd < 0)
        return sbx_error_errno(err, errno, "signalfd");
    s->root_fd = open(s->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (s->root_fd < 0)
        return sbx_error_errno(err, errno, "cannot open workspace '%s'", s->root);
    /* The spare descriptor doubles as the stdin of commands that get none (exec.c): the
     * sandbox's own /dev/null, not the host's one opened before the pivot. */
    sbx_fd_close(&s->spare_fd);
    s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    return 0;
}

/* Everything before serving. *outer: this process is the host side of an isolated sandbox
 * (run_outer), not the one that serves. */
static int start(struct sbx__sup *s, int *outer, struct sbx_error *err)
{
    int rc;
    if ((rc = read_config(s, err)) < 0 || (rc = open_runtime_dir(s, err)) < 0 ||
        (rc = listen_control(s, err)) < 0)
        return rc;
    if (s->iso && ((rc = enter_isolation(s, outer, err)) < 0 || *outer))
        return rc;
    return prepare_serving(s, err);
}

/* The host side of an isolated sandbox: wait for PID 1 to end (killing it when told to stop),
 * then remove what it cannot: the cgroups and the control socket. Host-side helpers that need
 * the host network (the allow-list proxy, port forwarders via sbx__isolation_netns_fd) belong
 * in this process. */
static int run_outer(struct sbx__sup *s)
{
    struct sbx_error err = SBX_ERROR_INIT;
    int status = 0;
    sbx_fd_close(&s->listen_fd);
    sbx_fd_close(&s->progress_fd); /* PID 1 serves */
    sbx_fd_close(&s->report_fd);   /* PID 1 reports */
    s->record.inner = sandbox_init_pid(sbx__isolation_inner_pid(s->iso));
    if (sbx__proc_stat(s->record.inner, &s->record.inner_start, NULL) < 0 ||
        sbx__local_record_write(s->dir_fd, &s->record, &err) < 0)
        sbx_log(SBX_LOG_WARN, "sandbox '%s': PID 1 not recorded: %s", s->id, err.msg);
    sbx_error_clear(&err);
    /* Once PID 1 exists its mount namespace holds copies of the staging mounts: the host's
     * go, so that the FUSE mounts exist only in the sandbox and end with it. */
    if (s->mounts.n) {
        pid_t middle = sbx__isolation_inner_pid(s->iso);
        for (int t = 0; t < 3000 && sandbox_init_pid(middle) == middle && kill(middle, 0) == 0; t++)
            usleep(10000);
        sbx__mounts_detach(&s->mounts);
    }
    struct sbx__net *net = s->net_chan[0] >= 0 ? start_network(s) : NULL;
    /* This process now mostly waits, one per sandbox: give the start-up's freed heap (the
     * configuration, the plan) back, so an idle sandbox holds no more than it uses. */
    malloc_trim(0);
    int rc = sbx__isolation_outer_wait(s->iso, &status, &err);
    sbx__mounts_stop(&s->mounts);
    sbx__net_free(net);
    if (rc < 0)
        sbx_log(SBX_LOG_WARN, "sandbox '%s': %s", s->id, err.msg);
    if (s->dir_fd >= 0)
        unlinkat(s->dir_fd, SBX_PROTO_SOCKNAME, 0);
    /* The cgroups are gone (outer_wait). A PID 1 that died otherwise than by a shutdown
     * request leaves the runtime dir (state and log, no socket) and the workspace: ps --all
     * shows it, rm or prune removes it, and the user's work in the workspace is kept. */
    int asked = sbx__isolation_stop_signal(s->iso);
    /* PID 1's exit status is not the only sign: a sanitizer's exit handler may replace it. */
    if (rc == 0 &&
        ((WIFEXITED(status) && WEXITSTATUS(status) == EXIT_UNCLAIMED) || unclaimed_mark(s)))
        remove_unclaimed(s);
    else if (rc == 0 && asked)
        sbx_log(SBX_LOG_INFO, "sandbox '%s': stopped on %s", s->id,
                asked == SIGTERM  ? "SIGTERM"
                : asked == SIGINT ? "SIGINT"
                                  : "SIGHUP");
    else if (rc == 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
        sbx_log(SBX_LOG_WARN, "sandbox '%s': PID 1 ended unexpectedly (status 0x%x)", s->id,
                (unsigned)status);
    return rc < 0 ? 1 : 0;
}

/* The start-up report's "limits" (in force) and "unenforced" (name and reason of each limit the
 * host could not apply): the creator records them in the state and warns. */
static void add_limits(const struct sbx__sup *s, json_t *m)
{
    const struct sbx__cgroup *cg = sbx__isolation_cgroup(s->iso);
    json_t *lim = json_object(), *un = json_array();
    if (cg->memory_limit)
        sbx_json_set(lim, "memory", json_integer((json_int_t)cg->memory_limit));
    if (cg->pids_limit)
        sbx_json_set(lim, "pids", json_integer((json_int_t)cg->pids_limit));
    if (cg->cpu_millis)
        sbx_json_set(lim, "cpu_millis", json_integer((json_int_t)cg->cpu_millis));
    sbx_json_set(lim, "ptys", json_integer(SBX__ISOLATION_DEFAULT_PTYS));
    for (int c = 0; c < SBX__CG_NCTRL; c++) {
        if (!(cg->unenforced & (1u << c)))
            continue;
        json_t *u = json_object();
        sbx_json_set(u, "name", sbx_json_str(sbx__cgroup_ctrl_name((enum sbx__cgroup_ctrl)c)));
        sbx_json_set(u, "reason", sbx_json_str(cg->why[c]));
        sbx_json_append(un, u);
    }
    sbx_json_set(m, "limits", lim);
    sbx_json_set(m, "unenforced", un);
}

/* Detach: the creator started us as a session leader and waits for this first process; the
 * supervisor proper is its child, which is no session leader (so it can never acquire a
 * controlling terminal) and is reparented once this process exits. Then the log and the report
 * channel. -1 (said on stderr) when that fails. */
static int detach(struct sbx__sup *s)
{
    pid_t first = fork();
    if (first < 0) {
        fprintf(stderr, "sbx: supervisor: fork: %s\n", strerror(errno));
        return -1;
    }
    if (first > 0)
        _exit(0);
    sbx_strv_init(&s->env);
    sbx__local_record_init(&s->record);
    /* fd 2 becomes the log in the runtime directory: bounded, since a sandbox can fill it. */
    static struct sbx__logcap log = {.fd = 2};
    sbx_log_set_handler(sbx__logcap_handler, &log, SBX_LOG_INFO);
    /* The report leaves on a close-on-exec copy of stdout; stdout itself becomes /dev/null, so
     * that only the processes that report (or fail to) hold the creator's socket, which it
     * reads until every holder let go. */
    s->report_fd = fcntl(1, F_DUPFD_CLOEXEC, 3);
    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (s->report_fd < 0 || devnull < 0) {
        fprintf(stderr, "sbx: supervisor: %s\n", strerror(errno));
        return -1;
    }
    dup2(devnull, 1);
    close(devnull);
    return 0;
}

/* Report to the creator how the start went (rc, err), then let go of its socket: ok with our pid
 * and the limits in force, or the error. -1 when nobody took the report. */
static int report(struct sbx__sup *s, int rc, const struct sbx_error *err)
{
    json_t *m = rc < 0 ? sbx__proto_error(err) : sbx__sup_ok_msg();
    if (rc == 0)
        sbx_json_set(m, "pid", json_integer(getpid()));
    if (rc == 0 && s->iso)
        add_limits(s, m);
    char *text = sbx_json_dumps(m, SBX_JSON_COMPACT);
    json_decref(m);
    signal(SIGPIPE, SIG_IGN);
    int wrc = sbx_fd_write_all(s->report_fd, text, strlen(text), NULL);
    free(text);
    sbx_fd_close(&s->report_fd);
    return wrc;
}

/* Isolated, PID 1 serves under the commands' seccomp filter (on top of its own), which every
 * reaper and command then inherits instead of installing it at each exec. What PID 1 does from
 * here on (the protocol, starting reapers, opening terminals, signalling and reaping, the
 * cgroup's event counters) is within what that filter allows; the set-up it does not allow
 * (mounts, namespaces) is over. Should the kernel refuse, each command installs it as before. */
static void hold_cmd_filter(struct sbx__sup *s)
{
    struct sbx_error err = SBX_ERROR_INIT;
    if (s->iso && sbx__isolation_hold_cmd_filter(s->iso, &err) < 0)
        sbx_log(SBX_LOG_WARN, "sandbox '%s': each command installs its filter: %s", s->id, err.msg);
}

/* Serve until told to stop; then kill everything, and answer the shutdown request once it is
 * all dead. */
static void serve_and_stop(struct sbx__sup *s)
{
    sbx_log(SBX_LOG_INFO, "sandbox '%s' serving (pid %d)", s->id, (int)getpid());
    malloc_trim(0); /* the start-up's freed heap: an idle sandbox keeps only what it uses */
    hold_cmd_filter(s);
    sbx__sup_serve(s);
    sbx__sup_kill_everything(s);
    unlinkat(s->dir_fd, SBX_PROTO_SOCKNAME, 0);
    sbx_log(SBX_LOG_INFO, "sandbox '%s' stopped", s->id);
    if (s->stop_conn >= 0 && s->conns[s->stop_conn].fd >= 0) {
        /* The host id range it held: the remover waits for that range to be free without
         * asking for it in a request of its own. */
        json_t *m = sbx__sup_ok_msg();
        uint32_t first, count;
        if (s->iso && sbx__isolation_host_ids(s->iso, &first, &count))
            sbx_json_set(
                    m, "host_ids",
                    json_pack("{s:I,s:I}", "first", (json_int_t)first, "count", (json_int_t)count));
        sbx__sup_reply(s, s->stop_conn, m, NULL, 0);
    }
}

static void sup_release(struct sbx__sup *s)
{
    for (size_t i = 0; i < s->n_conns; i++)
        if (s->conns[i].fd >= 0)
            sbx__sup_drop_conn(s, (int)i);
    sbx__mounts_stop(&s->mounts);
    sbx__isolation_free(s->iso);
    free(s->conns);
    free(s->children);
    int *fds[] = {&s->listen_fd,   &s->sig_fd,    &s->root_fd, &s->dir_fd,      &s->spare_fd,
                  &s->progress_fd, &s->report_fd, &s->tie_fd,  &s->net_chan[0], &s->net_chan[1]};
    for (size_t i = 0; i < SBX_ARRAY_LEN(fds); i++)
        sbx_fd_close(fds[i]);
    sbx_strv_release(&s->env);
    sbx_strv_release(&s->allow);
    sbx_strv_release(&s->test_hosts);
    sbx_strv_release(&s->publish);
    free(s->port_bind);
    free(s->id);
    free(s->dir);
    free(s->workspace);
    free(s->root);
    sbx__local_record_release(&s->record);
}

int sbx_local_supervise_main(int argc, char **argv)
{
    struct sbx__sup s = {.listen_fd = -1,
                         .sig_fd = -1,
                         .root_fd = -1,
                         .dir_fd = -1,
                         .stop_conn = -1,
                         .spare_fd = -1,
                         .progress_fd = -1,
                         .report_fd = -1,
                         .net_chan = {-1, -1},
                         .tie_fd = -1};
    struct sbx_error err = SBX_ERROR_INIT;
    int rc, unclaimed = 0, outer = 0;

    /* argv[1] is the sandbox id: unused but for ps(1), where it tells supervisors apart. */
    if (argc != 2 || !argv[1][0]) {
        fprintf(stderr, "sbx: %s is internal to sbx\n", SBX_LOCAL_SUPERVISE_VERB);
        return 2;
    }
    tie_claim(&s);
    if (detach(&s) < 0)
        return 1;
    rc = start(&s, &outer, &err);
    if (s.iso && !outer)
        sbx_fd_close(&s.tie_fd); /* PID 1 (or a set-up failure): the host side watches */
    if (rc == 0 && s.tie_fd >= 0 && (rc = tie_watch(&s, &err)) < 0 && outer) {
        /* PID 1 reports; this process can only log (the sandbox is ending already). */
        sbx_log(SBX_LOG_ERROR, "sandbox '%s': %s", s.id, err.msg);
        sbx_error_clear(&err);
        rc = 0;
    }
    if (rc == 0 && outer) {
        rc = run_outer(&s) == 0 ? 0 : -1;
    } else {
        int wrc = report(&s, rc, &err);
        unclaimed = wrc < 0 && s.id;
        if (rc == 0 && wrc < 0)
            rc = -1;
        if (rc == 0)
            serve_and_stop(&s);
        else if (s.dir_fd >= 0)
            unlinkat(s.dir_fd, SBX_PROTO_SOCKNAME, 0);
        /* Inside, PID 1 cannot reach the host paths: the host side removes them on this
         * status. */
        if (unclaimed && !s.inner)
            remove_unclaimed(&s);
    }
    tie_end(&s);
    sup_release(&s);
    return unclaimed ? EXIT_UNCLAIMED : rc < 0 ? 1 : 0;
}
