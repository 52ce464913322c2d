/* The local provider: taking a sandbox down whatever state it is in — live, stopped (SIGSTOP),
 * dead (SIGKILL), or half-created — and the supervisor record that makes that possible.
 *
 * The supervisor writes `supervisor.json` into the runtime dir before it serves: its pid and
 * start time, PID 1's (host) pid and start time once it exists, and the cgroup directories the
 * sandbox uses. A pid is trusted only while its start time and command line still match, so a
 * reused pid is never signalled. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/fs-internal.h"
#include "providers/local/isolate/isolate.h"
#include "providers/local/client/disk.h"
#include "providers/local/local.h"
#include "providers/local/supervisor/mounts.h"
#include "sandbox/host/host.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/log.h"
#include "sbx/time.h"

#define RECORD_MAX     ((size_t)64 << 10)
#define POLITE_MS      10000 /* a shutdown request that gets no answer by then is given up */
#define EXIT_WAIT_MS   10000 /* after the answer (or SIGKILL), for the supervisor to exit */
#define PROC_STAT_MAX  4096
#define PROC_CMDLN_MAX 4096

/* ---------------------------------------------------------------------------------------------
 * Processes */

static int read_small(const char *path, char *buf, size_t cap, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n;
    do
        n = read(fd, buf, cap - 1);
    while (n < 0 && errno == EINTR);
    close(fd);
    if (n < 0)
        return -1;
    buf[n] = '\0';
    *len = (size_t)n;
    return 0;
}

int sbx__proc_stat(pid_t pid, unsigned long long *start, char *state)
{
    char path[64], buf[PROC_STAT_MAX];
    size_t n;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if (pid <= 0 || read_small(path, buf, sizeof(buf), &n) < 0)
        return -1;
    /* The command name may hold spaces and parentheses: fields count from the last ')'. */
    char *p = strrchr(buf, ')');
    if (!p || p[1] != ' ')
        return -1;
    p += 2;
    if (state)
        *state = *p;
    for (int field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (!p)
            return -1;
        p++;
    }
    char *end;
    unsigned long long v = strtoull(p, &end, 10);
    if (end == p)
        return -1;
    if (start)
        *start = v;
    return 0;
}

/* pid still runs the supervisor of sandbox id that the record names: same start time, and
 * its command line is "<program> __supervise <id>". */
static int is_our_supervisor(pid_t pid, unsigned long long start, const char *id, char *state)
{
    unsigned long long now;
    char path[64], buf[PROC_CMDLN_MAX];
    size_t n;
    if (sbx__proc_stat(pid, &now, state) < 0 || now != start || (state && *state == 'Z'))
        return 0;
    snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
    if (read_small(path, buf, sizeof(buf), &n) < 0)
        return 0;
    const char *arg1 = memchr(buf, '\0', n);
    if (!arg1 || (size_t)(++arg1 - buf) >= n || strcmp(arg1, SBX_LOCAL_SUPERVISE_VERB) != 0)
        return 0;
    const char *arg2 = arg1 + strlen(arg1) + 1;
    return (size_t)(arg2 - buf) < n && strcmp(arg2, id) == 0;
}

/* A pidfd on the recorded process, or -1 when it is gone or the pid now names another process.
 * The check runs after pidfd_open, so the descriptor cannot name a process that took the pid
 * later. Kernels without pidfd_open get -2: the caller falls back to kill(2). *state (when not
 * NULL) gets the process's state letter, as is_our_supervisor's. */
static int open_recorded(pid_t pid, unsigned long long start, const char *id, char *state)
{
    if (pid <= 0)
        return -1;
    int fd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (fd < 0)
        return errno == ENOSYS ? (is_our_supervisor(pid, start, id, state) ? -2 : -1) : -1;
    if (!is_our_supervisor(pid, start, id, state)) {
        close(fd);
        return -1;
    }
    return fd;
}

static void kill_recorded(pid_t pid, unsigned long long start, const char *id)
{
    int fd = open_recorded(pid, start, id, NULL);
    if (fd == -2)
        kill(pid, SIGKILL);
    if (fd >= 0) {
        (void)syscall(SYS_pidfd_send_signal, fd, SIGKILL, NULL, 0);
        close(fd);
    }
}

/* Wait (bounded) until the recorded process, which fd (open_recorded's answer; borrowed)
 * names, has exited. 0 when it is gone. */
static int wait_opened(int fd, pid_t pid, unsigned long long start, const char *id, int64_t ms)
{
    int64_t deadline = sbx_deadline_after_ms(ms);
    if (fd >= 0) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r;
        do
            r = poll(&p, 1, sbx_deadline_poll_ms(deadline));
        while (r < 0 && errno == EINTR);
        return r > 0 ? 0 : -1;
    }
    while (fd == -2 && is_our_supervisor(pid, start, id, NULL)) {
        if (sbx_deadline_poll_ms(deadline) == 0)
            return -1;
        sbx_sleep_ms(10);
    }
    return 0;
}

/* Wait (bounded) until the recorded process has exited. 0 when it is gone. */
static int wait_recorded(pid_t pid, unsigned long long start, const char *id, int64_t ms)
{
    int fd = open_recorded(pid, start, id, NULL);
    int rc = wait_opened(fd, pid, start, id, ms);
    sbx_fd_close(&fd);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * The record */

void sbx__local_record_init(struct sbx__local_record *r)
{
    memset(r, 0, sizeof(*r));
    sbx_strv_init(&r->cgroups);
}

void sbx__local_record_release(struct sbx__local_record *r)
{
    sbx_strv_release(&r->cgroups);
    sbx__local_record_init(r);
}

int sbx__local_record_write(int dir_fd, const struct sbx__local_record *r, struct sbx_error *err)
{
    json_t *o = json_object(), *cg = json_array();
    char start[32], inner_start[32];
    snprintf(start, sizeof(start), "%llu", r->start);
    snprintf(inner_start, sizeof(inner_start), "%llu", r->inner_start);
    for (size_t i = 0; i < r->cgroups.n; i++)
        sbx_json_append(cg, sbx_json_str(r->cgroups.v[i]));
    sbx_json_set(o, "pid", json_integer(r->pid));
    sbx_json_set(o, "start", sbx_json_str(start));
    sbx_json_set(o, "inner", json_integer(r->inner));
    sbx_json_set(o, "inner_start", sbx_json_str(inner_start));
    sbx_json_set(o, "cgroups", cg);
    char *text = sbx_json_dumps(o, SBX_JSON_COMPACT);
    json_decref(o);
    int rc = sbx_fs_write_state(dir_fd, SBX_PROTO_RECORD, text, strlen(text), 0600, err);
    free(text);
    return rc;
}

/* A cgroup path from the record is used only when it looks like one sbx made for this
 * sandbox: absolute under /sys/fs/cgroup, no "." or ".." step, leaf "sbx-<id>". */
static int cgroup_path_ok(const char *path, const char *id)
{
    static const char prefix[] = "/sys/fs/cgroup/";
    if (strncmp(path, prefix, sizeof(prefix) - 1) != 0 || strstr(path, "/./") ||
        strstr(path, "/../") || strstr(path, "//"))
        return 0;
    const char *leaf = strrchr(path, '/') + 1;
    return strncmp(leaf, "sbx-", 4) == 0 && strcmp(leaf + 4, id) == 0;
}

static unsigned long long get_ull(const json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? strtoull(s, NULL, 10) : 0;
}

int sbx__local_record_read(const char *dir, const char *id, struct sbx__local_record *out)
{
    struct sbx_buf b;
    json_t *o = NULL;
    char *path = sbx_xasprintf("%s/%s", dir, SBX_PROTO_RECORD);
    int rc = -1;
    sbx_buf_init(&b, RECORD_MAX);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0 && sbx_fd_read_all(fd, RECORD_MAX, &b, NULL) == 0 &&
        sbx_json_parse(b.data, b.len, NULL, &o, NULL) == 0 && json_is_object(o)) {
        json_int_t pid = json_integer_value(json_object_get(o, "pid"));
        json_int_t inner = json_integer_value(json_object_get(o, "inner"));
        out->pid = pid > 0 && pid < INT32_MAX ? (pid_t)pid : 0;
        out->start = get_ull(o, "start");
        out->inner = inner > 0 && inner < INT32_MAX ? (pid_t)inner : 0;
        out->inner_start = get_ull(o, "inner_start");
        size_t i;
        json_t *v;
        json_array_foreach(json_object_get(o, "cgroups"), i, v)
        {
            const char *p = json_string_value(v);
            if (p && strlen(p) < 4096 && cgroup_path_ok(p, id))
                sbx_strv_push(&out->cgroups, p);
        }
        rc = 0;
    }
    if (fd >= 0)
        close(fd);
    json_decref(o);
    sbx_buf_release(&b);
    free(path);
    return rc;
}

/* sbx__local_record_alive, with outer (is_our_supervisor of r->pid, its state in st) known. */
static int record_alive_with(const struct sbx__local_record *r, const char *id, int outer, char st,
                             int *stopped)
{
    char st2 = 0;
    int inner = is_our_supervisor(r->inner, r->inner_start, id, &st2);
    if (stopped)
        *stopped = (outer && (st == 'T' || st == 't')) || (inner && (st2 == 'T' || st2 == 't'));
    return outer || inner;
}

int sbx__local_record_alive(const struct sbx__local_record *r, const char *id, int *stopped)
{
    char st = 0;
    int outer = is_our_supervisor(r->pid, r->start, id, &st);
    return record_alive_with(r, id, outer, st, stopped);
}

/* ---------------------------------------------------------------------------------------------
 * Teardown */

/* Ask the supervisor to shut down (it kills every command) and wait for its answer and for it
 * to let go of the connection. 0 when it did, or when there is no supervisor to ask. *first
 * (when not NULL) receives the first host id of the range it held, from its answer. sent (when
 * not NULL) is called with arg once the request is sent, for work that overlaps the answer. */
static int polite_stop(const char *dir, const char *id, uint32_t *first, void (*sent)(void *),
                       void *arg)
{
    struct sbx_error err = SBX_ERROR_INIT;
    int sock = -1;
    int64_t deadline = sbx_deadline_after_ms(POLITE_MS);
    struct sbx__proto_wait w;
    sbx__proto_wait_init(&w, deadline);
    int rc = sbx__local_connect(dir, id, &w, &sock, &err);
    if (rc < 0)
        return rc == -SBX_E_SANDBOX ? 0 : rc;
    json_t *req = json_pack("{s:s}", "op", "shutdown"), *reply = NULL;
    rc = sbx__proto_send(sock, req, NULL, 0, deadline, &err);
    if (rc == 0 && sent)
        sent(arg);
    if (rc == 0)
        rc = sbx__proto_recv(sock, &reply, NULL, 0, NULL, deadline, &err);
    json_int_t v = json_integer_value(json_object_get(json_object_get(reply, "host_ids"), "first"));
    if (rc == 0 && first && v > 0 && v <= UINT32_MAX)
        *first = (uint32_t)v;
    json_decref(req);
    json_decref(reply);
    if (rc == 0) {
        char c;
        struct pollfd pfd = {.fd = sock, .events = POLLIN};
        while (poll(&pfd, 1, sbx_deadline_poll_ms(deadline)) > 0 && recv(sock, &c, 1, 0) > 0)
            ;
    } else if (rc == -SBX_E_SANDBOX) {
        rc = 0; /* it died meanwhile */
    }
    sbx_fd_close(&sock);
    return rc;
}

/* The disk image's release, prepared while the supervisor works on its answer (the worker's
 * fork overlaps it). */
struct early_release {
    const struct sbx__teardown *t;
    struct sbx__disk_release r;
    int prepared;
};

static void prepare_release(void *arg)
{
    struct early_release *er = arg;
    er->prepared = sbx__disk_release_prepare(er->t->disk_image, er->t->disk_loop, er->t->mount,
                                             er->t->dir, &er->r);
}

static void note(json_t *removed, const char *id, const char *kind, const char *path)
{
    if (removed)
        sbx_json_append(removed,
                        json_pack("{s:s,s:s,s:s}", "sandbox", id, "kind", kind, "path", path));
}

int sbx__local_teardown(const struct sbx__teardown *t, struct sbx_error *err)
{
    struct sbx__local_record rec;
    int rc = 0, stopped = 0;
    sbx__local_record_init(&rec);
    int have = sbx__local_record_read(t->dir, t->id, &rec) == 0;
    /* The supervisor's pidfd is opened (and its process checked) before it is asked to stop:
     * the wait for its exit needs no second look at /proc. */
    char state = 0;
    int pidfd = have ? open_recorded(rec.pid, rec.start, t->id, &state) : -1;
    int alive = have && record_alive_with(&rec, t->id, pidfd != -1, state, &stopped);

    /* 1. Stop: politely unless a process of it is stopped (it would never answer), then by
     * pid. SIGKILL reaches stopped processes too; PID 1 and the middle process die with the
     * host-side one (PR_SET_PDEATHSIG), and the cgroups below catch any straggler. */
    if (t->host_ids_first)
        *t->host_ids_first = 0;
    /* Removing a workspace on a disk image: its release overlaps the stop. The worker is
     * forked while the supervisor works on its answer, the image renamed away and the host's
     * mount detached once it answered (every command is dead then), and the worker let go
     * only after the sandbox's processes are gone, so that it, not an exiting sandbox process,
     * ends the file system. */
    struct early_release er = {.t = t, .r = {.gate = -1}};
    int want = alive && t->workspace && t->disk_image && t->mount;
    int polite = stopped ? -1
                         : polite_stop(t->dir, t->id, t->host_ids_first,
                                       want ? prepare_release : NULL, &er);
    int begun = polite == 0 && er.prepared && sbx__disk_release_detach(&er.r);
    /* Detached, the workspace's path is an empty directory of the host that no sandbox process
     * can reach (they see the image's file system): it goes while the supervisor exits. */
    int ws_gone = 0;
    if (begun && t->workspace)
        ws_gone = rmdir(t->workspace) == 0;
    if (alive) {
        if (polite < 0 || wait_opened(pidfd, rec.pid, rec.start, t->id, EXIT_WAIT_MS) < 0) {
            /* Stopped, it cannot answer; running, it should have: say so, it is a fault. */
            if (stopped)
                sbx_log(SBX_LOG_INFO, "sandbox '%s': killing its stopped supervisor", t->id);
            else
                sbx_log(SBX_LOG_WARN,
                        "sandbox '%s': its supervisor (pid %d) did not stop when asked: "
                        "killing it",
                        t->id, (int)rec.pid);
            kill_recorded(rec.inner, rec.inner_start, t->id);
            kill_recorded(rec.pid, rec.start, t->id);
            if (wait_recorded(rec.pid, rec.start, t->id, EXIT_WAIT_MS) < 0 ||
                wait_recorded(rec.inner, rec.inner_start, t->id, EXIT_WAIT_MS) < 0) {
                rc = sbx_error_set(err, SBX_E_SANDBOX, 0,
                                   "the supervisor of sandbox '%s' (pid %d) did not die", t->id,
                                   (int)rec.pid);
                goto out;
            }
            char pid[32];
            snprintf(pid, sizeof(pid), "%d", (int)rec.pid);
            note(t->removed, t->id, "supervisor", pid);
        }
    } else if (polite < 0 && !have) {
        /* No record (a supervisor of an older sbx) and no answer: it cannot be found to be
         * killed, and removing its directory would hide it. */
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0,
                           "sandbox '%s' does not answer and has no supervisor record (%s)", t->id,
                           SBX_PROTO_RECORD);
        goto out;
    }

    /* 2. The cgroups: a killed host-side supervisor could not remove them. */
    for (size_t i = 0; i < rec.cgroups.n; i++) {
        struct stat st;
        if (lstat(rec.cgroups.v[i], &st) < 0)
            continue;
        if ((rc = sbx__cgroup_remove_path(rec.cgroups.v[i], err)) < 0)
            goto out;
        note(t->removed, t->id, "cgroup", rec.cgroups.v[i]);
    }

    /* 3. The workspace's disk image: unmounted (its files copied out first when the workspace
     * stays) once no sandbox process holds it, and deleted. */
    if (!begun)
        sbx__disk_release_end(&er.r); /* a worker prepared and not used just lets go */
    if (begun) {
        note(t->removed, t->id, "disk_image", t->disk_image);
    } else if (t->disk_image && t->mount) {
        struct stat st;
        int there = lstat(t->disk_image, &st) == 0;
        if (t->workspace) {
            /* Nothing to copy out: the image's release goes on after this returns. */
            rc = sbx__disk_detach_later(t->disk_image, t->disk_loop, t->mount, err);
        } else {
            rc = sbx__disk_detach(t->disk_image, t->disk_loop, t->mount, 1, err);
        }
        if (rc < 0)
            goto out;
        if (there)
            note(t->removed, t->id, "disk_image", t->disk_image);
    }

    /* 4. The workspace (when asked), then the runtime dir with the record: last, so that a
     * failure above leaves what a retry needs. */
    if (t->workspace) {
        struct stat st;
        int there = ws_gone || lstat(t->workspace, &st) == 0;
        if ((rc = sbx__fs_remove_tree(t->workspace, err)) < 0)
            goto out;
        if (there)
            note(t->removed, t->id, "workspace", t->workspace);
    }
    /* A supervisor killed while it started its storage mounts left them on the host. */
    sbx__mounts_cleanup_dir(t->dir);
    /* With a release worker, the runtime directory (files only) leaves its name here and is
     * removed by the worker: its unlinks do not hold up the caller. */
    if (!sbx__disk_release_hand_over(&er.r) && (rc = sbx__fs_remove_tree(t->dir, err)) < 0)
        goto out;
    note(t->removed, t->id, "runtime_dir", t->dir);
out:
    /* Once let go, the worker ends the image's file system: a journal flush, then the unlink.
     * Last, so that its disk and CPU work does not share the caller's path. */
    sbx__disk_release_end(&er.r);
    sbx_fd_close(&pidfd);
    sbx__local_record_release(&rec);
    return rc;
}
