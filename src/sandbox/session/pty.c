/* The table of interactive processes of a session (exec_command / write_stdin). */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sandbox/provider.h"
#include "sandbox/session/internal.h"
#include "sbx/hash.h"
#include "sbx/log.h"
#include "sbx/session.h"
#include "sbx/time.h"

/* Ids are random in [ID_MIN, ID_MIN + ID_SPAN): large enough not to be guessed, small enough
 * for a model to copy back as a JSON integer. */
#define ID_MIN  1000
#define ID_SPAN 1000000000

struct sbx_pty_entry {
    int id;
    int busy; /* a call is using it outside the lock */
    int exited;
    uint64_t used; /* session clock at the last use */
    struct sbx_exit status;
    struct sbx_proc *proc;
    const volatile sig_atomic_t *cancel; /* the starting spec's: every wait on it watches it */
};

void sbx_pty_update_release(struct sbx_pty_update *u)
{
    sbx_output_release(&u->output);
}

static int64_t clamp_yield(int64_t ms, int64_t dflt)
{
    if (ms < 0)
        ms = dflt;
    if (ms < SBX_PTY_YIELD_MIN_MS)
        ms = SBX_PTY_YIELD_MIN_MS;
    if (ms > SBX_PTY_YIELD_MAX_MS)
        ms = SBX_PTY_YIELD_MAX_MS;
    return ms;
}

/* Collect the output of e->proc until the deadline or its exit. */
static int collect(struct sbx_pty_entry *e, int64_t yield_ms, size_t limit,
                   struct sbx_pty_update *u, struct sbx_error *err)
{
    struct sbx_capture c;
    int64_t deadline = sbx_deadline_after_ms(yield_ms);
    int fd = e->proc->stdout_fd;
    int rc = 0;

    sbx_capture_init(&c, limit);
    sbx__set_nonblock(fd);
    while (!e->exited) {
        struct pollfd pfd[2];
        int n = 0;
        if (fd >= 0)
            pfd[n++] = (struct pollfd){.fd = fd, .events = POLLIN};
        pfd[n++] = (struct pollfd){.fd = e->proc->status_fd, .events = POLLIN};
        int wait = sbx_deadline_poll_ms(deadline);
        int r = poll(pfd, (nfds_t)n, sbx__cancel_poll_ms(e->cancel, wait));
        if ((rc = sbx__cancel_check(e->cancel, err)) < 0)
            goto out;
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = sbx_error_errno(err, errno, "poll");
            goto out;
        }
        if (fd >= 0 && pfd[0].revents)
            sbx__pump(&fd, &c);
        if (pfd[n - 1].revents) {
            rc = sbx_proc_wait(e->proc, 0, &e->status, err);
            if (rc < 0)
                goto out;
            e->exited = 1;
            if (fd >= 0)
                sbx__pump(&fd, &c);
        }
        if (sbx_deadline_poll_ms(deadline) == 0)
            break; /* even if output keeps coming: the caller asked for this long only */
    }
    u->exited = e->exited;
    u->status = e->status;
    sbx_capture_take(&c, &u->output);
out:
    sbx_capture_release(&c);
    return rc;
}

static int new_id(struct sbx_session *s, int *out, struct sbx_error *err)
{
    for (;;) {
        uint32_t r;
        int rc = sbx_random_bytes(&r, sizeof(r), err);
        if (rc < 0)
            return rc;
        int id = ID_MIN + (int)(r % ID_SPAN);
        int clash = 0;
        for (size_t i = 0; i < s->n_ptys; i++)
            clash |= s->ptys[i]->id == id;
        if (!clash) {
            *out = id;
            return 0;
        }
    }
}

/* With the lock held: take entry i out of the table; returns its proc (caller frees). */
static struct sbx_proc *remove_at(struct sbx_session *s, size_t i)
{
    struct sbx_pty_entry *e = s->ptys[i];
    struct sbx_proc *p = e->proc;
    s->ptys[i] = s->ptys[--s->n_ptys];
    free(e);
    return p;
}

/* With the lock held: make room for one more entry. */
static int prune(struct sbx_session *s, struct sbx_proc **victim, struct sbx_error *err)
{
    if (s->n_ptys >= SBX_PTY_WARN)
        sbx_log(SBX_LOG_WARN, "sandbox '%s' has %zu interactive processes", s->id, s->n_ptys);
    if (s->n_ptys < SBX_PTY_MAX)
        return 0;
    /* The SBX_PTY_PROTECTED most recently used are spared: find the oldest use among them. */
    uint64_t protect_from = 0;
    {
        uint64_t recent[SBX_PTY_PROTECTED] = {0};
        for (size_t i = 0; i < s->n_ptys; i++) {
            uint64_t u = s->ptys[i]->used;
            for (size_t k = 0; k < SBX_PTY_PROTECTED; k++) {
                if (u > recent[k]) {
                    uint64_t t = recent[k];
                    recent[k] = u;
                    u = t;
                }
            }
        }
        protect_from = recent[SBX_PTY_PROTECTED - 1];
    }
    long best = -1;
    int best_exited = 0;
    for (size_t i = 0; i < s->n_ptys; i++) {
        struct sbx_pty_entry *e = s->ptys[i];
        if (e->busy || e->used >= protect_from)
            continue;
        struct pollfd pfd = {.fd = e->proc->status_fd, .events = POLLIN};
        int exited = e->exited || poll(&pfd, 1, 0) > 0;
        if (best < 0 || (exited && !best_exited) ||
            (exited == best_exited && e->used < s->ptys[best]->used)) {
            best = (long)i;
            best_exited = exited;
        }
    }
    if (best < 0)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "too many interactive processes (%d)",
                             SBX_PTY_MAX);
    *victim = remove_at(s, (size_t)best);
    return 0;
}

int sbx_session_pty_start(struct sbx_session *s, const struct sbx_exec_spec *spec, int64_t yield_ms,
                          struct sbx_pty_update *out, struct sbx_error *err)
{
    struct sbx_exec_spec sp;
    struct sbx_pty_entry e = {0};
    struct sbx_pty_update u = {0};
    struct sbx_proc *victim = NULL;
    int rc;

    if (!spec)
        return sbx_error_set(err, SBX_E_INVAL, 0, "missing command");
    sp = *spec;
    if (sp.flags & SBX_EXEC_TTY)
        sp.flags &= ~(SBX_EXEC_STDIN | SBX_EXEC_MERGE_STDERR);
    else
        sp.flags = (sp.flags & ~SBX_EXEC_STDIN) | SBX_EXEC_MERGE_STDERR;

    pthread_mutex_lock(&s->lock);
    rc = prune(s, &victim, err);
    pthread_mutex_unlock(&s->lock);
    sbx_proc_free(victim);
    if (rc < 0)
        return rc;

    rc = sbx_session_exec_start(s, &sp, &e.proc, err);
    if (rc < 0)
        return rc;
    e.cancel = sp.cancel;
    rc = collect(&e, clamp_yield(yield_ms, SBX_PTY_START_YIELD_MS), sp.output_limit, &u, err);
    if (rc < 0)
        goto fail;
    if (!e.exited) {
        pthread_mutex_lock(&s->lock);
        rc = new_id(s, &e.id, err);
        if (rc == 0) {
            if (!s->ptys)
                s->ptys = sbx_xcalloc(SBX_PTY_MAX, sizeof(*s->ptys));
            victim = NULL;
            rc = prune(s, &victim, err);
            if (rc == 0) {
                e.used = ++s->pty_clock;
                struct sbx_pty_entry *ne = sbx_xmalloc(sizeof(*ne));
                *ne = e;
                s->ptys[s->n_ptys++] = ne;
                u.id = e.id;
                e.proc = NULL;
            }
        }
        pthread_mutex_unlock(&s->lock);
        sbx_proc_free(victim);
        if (rc < 0)
            goto fail;
    }
    sbx_proc_free(e.proc);
    *out = u;
    return 0;
fail:
    sbx_pty_update_release(&u);
    sbx_proc_free(e.proc);
    return rc;
}

/* Find id and mark it busy. */
static int acquire(struct sbx_session *s, int id, struct sbx_pty_entry **out, struct sbx_error *err)
{
    int rc = sbx_error_set(err, SBX_E_NOTFOUND, 0, "no process with id %d", id);
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->n_ptys; i++) {
        struct sbx_pty_entry *e = s->ptys[i];
        if (e->id != id)
            continue;
        if (e->busy) {
            rc = sbx_error_set(err, SBX_E_INVAL, 0, "process %d is in use by another call", id);
            break;
        }
        sbx_error_clear(err);
        e->busy = 1;
        e->used = ++s->pty_clock;
        /* busy keeps the entry from being pruned or removed while the caller uses it. */
        *out = e;
        rc = 0;
        break;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* Unmark busy; remove (and free) the entry when done. */
static void release(struct sbx_session *s, int id, int done)
{
    struct sbx_proc *p = NULL;
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->n_ptys; i++) {
        if (s->ptys[i]->id != id)
            continue;
        s->ptys[i]->busy = 0;
        if (done)
            p = remove_at(s, i);
        break;
    }
    pthread_mutex_unlock(&s->lock);
    sbx_proc_free(p);
}

static int write_all_tty(int fd, const char *p, size_t n, int64_t deadline)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN) {
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};
            int ms = sbx_deadline_poll_ms(deadline);
            if (ms == 0 || poll(&pfd, 1, ms) == 0)
                return -1;
            continue;
        }
        return -1; /* EIO: the terminal's process is gone; the collection reports its exit */
    }
    return 0;
}

int sbx_session_pty_write(struct sbx_session *s, int id, const void *data, size_t n,
                          int64_t yield_ms, size_t output_limit, struct sbx_pty_update *out,
                          struct sbx_error *err)
{
    struct sbx_pty_entry *e = NULL;
    struct sbx_pty_update u = {0};
    int rc = acquire(s, id, &e, err);
    if (rc < 0)
        return rc;
    if (n > 0 && !e->proc->tty) {
        release(s, id, 0);
        return sbx_error_set(err, SBX_E_INVAL, 0, "stdin is not available for this process");
    }
    int64_t yield = clamp_yield(yield_ms, SBX_PTY_WRITE_YIELD_MS);
    if (n == 0 && yield < SBX_PTY_POLL_MIN_MS)
        yield = SBX_PTY_POLL_MIN_MS;
    if (n > 0) {
        sbx__set_nonblock(e->proc->stdin_fd);
        (void)write_all_tty(e->proc->stdin_fd, data, n, sbx_deadline_after_ms(yield));
    }
    rc = collect(e, yield, output_limit, &u, err);
    if (rc < 0) {
        release(s, id, rc == -SBX_E_CANCELLED); /* a cancelled command is killed */
        return rc;
    }
    u.id = e->exited ? 0 : id;
    release(s, id, e->exited);
    *out = u;
    return 0;
}

int sbx_session_pty_resize(struct sbx_session *s, int id, unsigned short rows, unsigned short cols,
                           struct sbx_error *err)
{
    struct sbx_pty_entry *e = NULL;
    int rc = acquire(s, id, &e, err);
    if (rc < 0)
        return rc;
    rc = sbx_proc_resize(e->proc, rows, cols, err);
    release(s, id, 0);
    return rc;
}

int sbx_session_pty_kill(struct sbx_session *s, int id, struct sbx_error *err)
{
    struct sbx_pty_entry *e = NULL;
    int rc = acquire(s, id, &e, err);
    if (rc < 0)
        return rc;
    release(s, id, 1);
    return 0;
}

void sbx_session_pty_kill_all(struct sbx_session *s)
{
    for (;;) {
        struct sbx_proc *p = NULL;
        pthread_mutex_lock(&s->lock);
        for (size_t i = 0; i < s->n_ptys; i++) {
            if (!s->ptys[i]->busy) {
                p = remove_at(s, i);
                break;
            }
        }
        pthread_mutex_unlock(&s->lock);
        if (!p)
            return;
        sbx_proc_free(p);
    }
}

size_t sbx_session_pty_detach_all(struct sbx_session *s)
{
    size_t n = 0;
    for (;;) {
        struct sbx_proc *p = NULL;
        int exited = 0;
        pthread_mutex_lock(&s->lock);
        for (size_t i = 0; i < s->n_ptys; i++) {
            if (!s->ptys[i]->busy) {
                exited = s->ptys[i]->exited;
                p = remove_at(s, i);
                break;
            }
        }
        pthread_mutex_unlock(&s->lock);
        if (!p)
            return n;
        struct sbx_error err = SBX_ERROR_INIT;
        if (!exited && p->ops->detach && p->ops->detach(p, &err) == 0) {
            n++;
            continue;
        }
        if (!exited && p->ops->detach)
            sbx_log(SBX_LOG_WARN, "sandbox '%s': a process could not be left running: %s", s->id,
                    err.msg);
        sbx_proc_free(p);
    }
}

size_t sbx_session_pty_count(struct sbx_session *s)
{
    pthread_mutex_lock(&s->lock);
    size_t n = s->n_ptys;
    pthread_mutex_unlock(&s->lock);
    return n;
}
