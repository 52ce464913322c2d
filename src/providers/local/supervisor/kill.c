/* The local provider's supervisor: finding and killing processes. The supervisor is a child
 * subreaper (PID 1 inside an isolated sandbox), so every orphan of a command comes to it; a walk
 * down the children files from it reaches everything a command left, even a daemon that left
 * its group and session. See supervisor.h. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/grow.h"
#include "providers/local/supervisor/supervisor.h"
#include "sbx/fs.h"

/* No sandbox holds more processes than the kernel's pid limit. */
#define PIDS_MAX ((size_t)1 << 22)

int sbx__sup_proc_ids(pid_t pid, pid_t *ppid, pid_t *pgrp, pid_t *sid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (!p)
        return -1;
    char state;
    int a, b, c;
    if (sscanf(p + 1, " %c %d %d %d", &state, &a, &b, &c) != 4)
        return -1;
    *ppid = a;
    *pgrp = b;
    *sid = c;
    return 0;
}

static void pids_add(struct sbx__sup_pids *l, pid_t p)
{
    if (l->n >= PIDS_MAX)
        return;
    SBX_ALLOC_GROW(l->v, l->n + 1, l->alloc);
    l->v[l->n++] = p;
}

/* 1: the kernel lists a thread's children in /proc/PID/task/TID/children, 0: it does not
 * (CONFIG_PROC_CHILDREN off), -1: not probed yet. */
static int have_children_files = -1;

/* Append the children of pid from its threads' children files: what this costs grows with the
 * sandbox's processes, not the host's. Any thread of a subreaper may adopt an orphan, so every
 * thread's list is read. */
static void children_from_files(pid_t pid, struct sbx__sup_pids *out)
{
    char path[96];
    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        char *end;
        long tid = strtol(e->d_name, &end, 10);
        if (*end || tid <= 0)
            continue;
        snprintf(path, sizeof(path), "/proc/%d/task/%ld/children", (int)pid, tid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        char buf[4096];
        long cur = -1;
        ssize_t n;
        while ((n = read(fd, buf, sizeof(buf))) > 0 || (n < 0 && errno == EINTR)) {
            for (ssize_t i = 0; i < n; i++) {
                if (buf[i] >= '0' && buf[i] <= '9') {
                    cur = (cur < 0 ? 0 : cur * 10) + (buf[i] - '0');
                    if (cur > INT32_MAX)
                        cur = INT32_MAX;
                } else if (cur >= 0) {
                    pids_add(out, (pid_t)cur);
                    cur = -1;
                }
            }
        }
        if (cur >= 0)
            pids_add(out, (pid_t)cur);
        close(fd);
    }
    closedir(d);
}

/* Without children files: one pass over /proc, which costs what the host runs. */
static void children_from_scan(pid_t parent, struct sbx__sup_pids *out)
{
    DIR *d = opendir("/proc");
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        char *end;
        long p = strtol(e->d_name, &end, 10);
        pid_t pp, pg, sid;
        if (*end || p <= 1 || sbx__sup_proc_ids((pid_t)p, &pp, &pg, &sid) < 0)
            continue;
        if (pp == parent)
            pids_add(out, (pid_t)p);
    }
    closedir(d);
}

void sbx__sup_children_of(pid_t pid, struct sbx__sup_pids *out)
{
    if (have_children_files < 0) {
        char path[96];
        snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)getpid(), (int)getpid());
        have_children_files = access(path, R_OK) == 0;
    }
    if (have_children_files)
        children_from_files(pid, out);
    else
        children_from_scan(pid, out);
}

/* Signal pid only while it is still the child of parent (the process whose children file
 * listed it): a listed process can be reaped by its parent and its pid taken by anyone before
 * the signal. With a pidfd the check and the signal name the same process; without
 * pidfd_open (before Linux 5.3) the window is the few instructions between check and kill.
 * leader != 0: only a process in the group or session of leader. 0 when signalled. */
int sbx__sup_signal_child(pid_t pid, pid_t parent, pid_t leader, int sig)
{
    pid_t pp, pg, sid;
    int fd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (fd < 0 && errno != ENOSYS)
        return -1;
    int rc = -1;
    if (sbx__sup_proc_ids(pid, &pp, &pg, &sid) == 0 && pp == parent &&
        (!leader || pg == leader || sid == leader))
        rc = fd >= 0 ? (int)syscall(SYS_pidfd_send_signal, fd, sig, NULL, 0) : kill(pid, sig);
    if (fd >= 0)
        close(fd);
    return rc;
}

/* Signal every process below root (leader != 0: only those in the process group or session of
 * leader), walking down from root: as a subreaper root has adopted every orphan of its subtree,
 * so the walk reaches a daemon that left its group and session too. A parent is signalled
 * before its children file is read, so with SIGKILL it can no longer fork or reap meanwhile;
 * what it forked at the last moment or what reaches root later is met by the caller's next
 * pass. Returns how many were signalled. */
static int signal_subtree(pid_t root, pid_t leader, int sig)
{
    struct sbx__sup_pids l = {0}, parent = {0};
    int hits = 0;
    sbx__sup_children_of(root, &l);
    while (parent.n < l.n)
        pids_add(&parent, root);
    for (size_t i = 0; i < l.n; i++) {
        if (sbx__sup_signal_child(l.v[i], parent.v[i], leader, sig) == 0)
            hits++;
        sbx__sup_children_of(l.v[i], &l);
        while (parent.n < l.n)
            pids_add(&parent, l.v[i]);
    }
    free(l.v);
    free(parent.v);
    return hits;
}

/* A command's process group, and for a terminal session everything in its session (a shell's
 * foreground job runs in a group of its own). */
void sbx__sup_kill_child(const struct sbx__sup_child *c, int sig)
{
    /* Once reported, the command is reaped and its pid may belong to someone else. */
    if (c->cmd <= 0 || c->have_status)
        return;
    kill(-c->cmd, sig);
    kill(c->cmd, sig);
    if (c->tty)
        signal_subtree(getpid(), c->cmd, sig);
}

/* Kill everything we ever spawned. As a child subreaper every orphan of ours is reparented to
 * us, so killing our children until none is left reaches daemons that left their group too.
 * As PID 1 of the sandbox's pid namespace, kill(-1) reaches every other process in it: the walk
 * down /proc cannot see a process that is not dumpable (hidepid=invisible hides it from a PID 1
 * without CAP_SYS_PTRACE over its memory, as under an unprivileged runner: a command's reaper,
 * or a command that made itself so), and what it cannot see it cannot kill. */
void sbx__sup_kill_everything(struct sbx__sup *s)
{
    for (size_t i = 0; i < s->n_children; i++)
        if (s->children[i].pid > 0)
            sbx__sup_kill_child(&s->children[i], SIGKILL);
    for (int loop = 0; loop < SBX__SUP_KILL_ALL_LOOPS; loop++) {
        if (getpid() == 1)
            kill(-1, SIGKILL);
        signal_subtree(getpid(), 0, SIGKILL);
        int status;
        pid_t p = waitpid(-1, &status, 0);
        if (p < 0 && errno == ECHILD)
            break;
        while (waitpid(-1, &status, WNOHANG) > 0)
            ;
    }
    for (size_t i = 0; i < s->n_children; i++) {
        s->children[i].pid = 0;
        s->children[i].cmd = 0;
        sbx__sup_child_stacks_release(&s->children[i]);
        sbx_fd_close(&s->children[i].status_fd);
    }
    sbx__sup_stacks_drop();
}
