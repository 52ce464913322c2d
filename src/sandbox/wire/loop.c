/* The event loop of the remote layer: one thread, epoll, timers, work posted from other threads
 * (src/sandbox/wire/loop.h). The process's loop runs its thread only while it holds something:
 * the call that leaves it empty stops the thread and closes its descriptors, the next one
 * starts them again. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/grow.h"
#include "sandbox/wire/loop-internal.h"
#include "sbx/fs.h"
#include "sbx/time.h"

#define MAX_EVENTS 128

struct item {
    void (*fn)(void *ud);
    void *ud;
    int *done; /* sbx__loop_call: set when fn returned */
    struct item *next;
};

struct grave {
    void *obj;
    void (*free_fn)(void *obj);
};

struct sbx__timer {
    struct sbx__loop *l;
    sbx__timer_fn *fn;
    void *ud;
    int64_t at;  /* monotonic ns */
    size_t slot; /* index in the heap + 1; 0: not armed */
    int dead;
};

/* An epoll entry: a watch, a curl socket (xfer.c keeps its own), or the wake-up eventfd. */
struct sbx__watch {
    struct sbx__loop *l;
    int fd;
    unsigned events;
    sbx__watch_fn *fn;
    void *ud;
    int dead;
    int uncounted; /* a curl socket: it does not keep the process's loop running */
};

struct sbx__loop {
    /* Start and stop (held across a join; the loop's thread never takes it). */
    pthread_mutex_t ctl;
    /* The queue and its waiters. */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct item *head, *tail;
    int dflt;                    /* the process's loop: stops when it holds nothing */
    int running;                 /* a thread runs (under ctl) */
    int stop;                    /* asks the thread to end (under lock) */
    int users;                   /* threads between the start of a call and its end (under ctl) */
    size_t count[LOOP_HOLD + 1]; /* atomic */
    pthread_t thread;
    int epfd, evfd;
    /* Loop thread only. */
    struct sbx__timer **heap;
    size_t n_heap, cap_heap;
    struct grave *graves;
    size_t n_graves, cap_graves;
    int kicked;
    void *xfers;            /* xfer.c's state: the multi handle, its timer */
    uint64_t iterations;    /* atomic */
    struct sbx__watch wake; /* evfd's entry */
};

static pthread_mutex_t dflt_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sbx__loop *dflt_loop;
static pid_t dflt_pid;

static __thread struct sbx__loop *on_thread;

void sbx__loop_count(struct sbx__loop *l, int kind, int delta)
{
    if (delta > 0)
        __atomic_add_fetch(&l->count[kind], 1, __ATOMIC_RELAXED);
    else
        __atomic_sub_fetch(&l->count[kind], 1, __ATOMIC_RELAXED);
}

static size_t objects(struct sbx__loop *l)
{
    size_t n = 0;
    for (int k = 0; k <= LOOP_HOLD; k++)
        n += __atomic_load_n(&l->count[k], __ATOMIC_RELAXED);
    return n;
}

int sbx__loop_on_thread(const struct sbx__loop *l)
{
    return on_thread == l;
}

void sbx__loop_kick(struct sbx__loop *l)
{
    l->kicked = 1;
}

/* ---- timers: a binary heap on their time ---- */

static void heap_swap(struct sbx__loop *l, size_t a, size_t b)
{
    struct sbx__timer *t = l->heap[a];
    l->heap[a] = l->heap[b];
    l->heap[b] = t;
    l->heap[a]->slot = a + 1;
    l->heap[b]->slot = b + 1;
}

static void heap_up(struct sbx__loop *l, size_t i)
{
    while (i > 0 && l->heap[(i - 1) / 2]->at > l->heap[i]->at) {
        heap_swap(l, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
}

static void heap_down(struct sbx__loop *l, size_t i)
{
    for (;;) {
        size_t m = i, a = 2 * i + 1, b = 2 * i + 2;
        if (a < l->n_heap && l->heap[a]->at < l->heap[m]->at)
            m = a;
        if (b < l->n_heap && l->heap[b]->at < l->heap[m]->at)
            m = b;
        if (m == i)
            return;
        heap_swap(l, i, m);
        i = m;
    }
}

static void heap_remove(struct sbx__loop *l, struct sbx__timer *t)
{
    size_t i = t->slot - 1;
    t->slot = 0;
    l->n_heap--;
    if (i == l->n_heap)
        return;
    l->heap[i] = l->heap[l->n_heap];
    l->heap[i]->slot = i + 1;
    heap_up(l, i);
    heap_down(l, i);
}

struct sbx__timer *sbx__timer_new(struct sbx__loop *l, sbx__timer_fn *fn, void *ud)
{
    struct sbx__timer *t = sbx_xcalloc(1, sizeof(*t));
    t->l = l;
    t->fn = fn;
    t->ud = ud;
    sbx__loop_count(l, LOOP_TIMER, 1);
    return t;
}

void sbx__timer_after(struct sbx__timer *t, int64_t ms)
{
    struct sbx__loop *l = t->l;
    if (t->slot)
        heap_remove(l, t);
    t->at = sbx_time_mono_ns() + (ms > 0 ? ms : 0) * SBX_NS_PER_MS;
    SBX_ALLOC_GROW(l->heap, l->n_heap + 1, l->cap_heap);
    l->heap[l->n_heap++] = t;
    t->slot = l->n_heap;
    heap_up(l, l->n_heap - 1);
}

void sbx__timer_stop(struct sbx__timer *t)
{
    if (t && t->slot)
        heap_remove(t->l, t);
}

void sbx__timer_free(struct sbx__timer *t)
{
    if (!t)
        return;
    sbx__timer_stop(t);
    t->dead = 1;
    sbx__loop_count(t->l, LOOP_TIMER, -1);
    sbx__loop_bury(t->l, t, free);
}

/* Run the timers that are due; the ms until the next one (-1: none). */
static int run_timers(struct sbx__loop *l)
{
    int64_t now = sbx_time_mono_ns();
    while (l->n_heap && l->heap[0]->at <= now) {
        struct sbx__timer *t = l->heap[0];
        heap_remove(l, t);
        t->fn(t, t->ud);
    }
    if (!l->n_heap)
        return -1;
    int64_t ms = (l->heap[0]->at - now + SBX_NS_PER_MS - 1) / SBX_NS_PER_MS;
    return ms > 60000 ? 60000 : (int)ms;
}

/* ---- descriptors ---- */

static uint32_t ep_events(unsigned ev)
{
    return (ev & SBX__IN ? EPOLLIN : 0) | (ev & SBX__OUT ? EPOLLOUT : 0);
}

int sbx__watch_new(struct sbx__loop *l, int fd, unsigned events, sbx__watch_fn *fn, void *ud,
                   struct sbx__watch **out, struct sbx_error *err)
{
    struct sbx__watch *w = sbx_xcalloc(1, sizeof(*w));
    *w = (struct sbx__watch){.l = l, .fd = fd, .events = events, .fn = fn, .ud = ud};
    struct epoll_event e = {.events = ep_events(events), .data.ptr = w};
    if (events && epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &e) < 0) {
        int rc = sbx_error_errno(err, errno, "cannot watch descriptor %d", fd);
        free(w);
        return rc;
    }
    sbx__loop_count(l, LOOP_WATCH, 1);
    *out = w;
    return 0;
}

int sbx__watch_new_uncounted(struct sbx__loop *l, int fd, unsigned events, sbx__watch_fn *fn,
                             void *ud, struct sbx__watch **out, struct sbx_error *err)
{
    int rc = sbx__watch_new(l, fd, events, fn, ud, out, err);
    if (rc == 0) {
        (*out)->uncounted = 1;
        sbx__loop_count(l, LOOP_WATCH, -1);
    }
    return rc;
}

/* A watch of no events leaves the epoll set: epoll reports a hang-up whatever was asked, and
 * a paused reader of a connection the server closed would be woken for it forever. */
void sbx__watch_set(struct sbx__watch *w, unsigned events)
{
    if (w->events == events)
        return;
    int op = !w->events ? EPOLL_CTL_ADD : !events ? EPOLL_CTL_DEL : EPOLL_CTL_MOD;
    w->events = events;
    struct epoll_event e = {.events = ep_events(events), .data.ptr = w};
    (void)epoll_ctl(w->l->epfd, op, w->fd, &e);
}

int sbx__watch_fd(const struct sbx__watch *w)
{
    return w->fd;
}

void sbx__watch_free(struct sbx__watch *w)
{
    if (!w)
        return;
    if (w->l->epfd >= 0 && w->events)
        (void)epoll_ctl(w->l->epfd, EPOLL_CTL_DEL, w->fd, NULL);
    w->dead = 1;
    if (!w->uncounted)
        sbx__loop_count(w->l, LOOP_WATCH, -1);
    sbx__loop_bury(w->l, w, free);
}

void sbx__loop_bury(struct sbx__loop *l, void *obj, void (*free_fn)(void *obj))
{
    SBX_ALLOC_GROW(l->graves, l->n_graves + 1, l->cap_graves);
    l->graves[l->n_graves++] = (struct grave){obj, free_fn};
}

static void bury_all(struct sbx__loop *l)
{
    /* A free may bury more (an lconn frees its watch): loop until none is left. */
    while (l->n_graves) {
        struct grave g = l->graves[--l->n_graves];
        g.free_fn(g.obj);
    }
}

/* ---- the thread ---- */

static void wake(struct sbx__loop *l)
{
    uint64_t one = 1;
    ssize_t w;
    do
        w = write(l->evfd, &one, sizeof(one));
    while (w < 0 && errno == EINTR);
}

static void on_wake(struct sbx__watch *w, unsigned revents, void *ud)
{
    (void)revents;
    (void)ud;
    uint64_t v;
    ssize_t r;
    do
        r = read(w->fd, &v, sizeof(v));
    while (r < 0 && errno == EINTR);
}

static void run_queue(struct sbx__loop *l)
{
    pthread_mutex_lock(&l->lock);
    struct item *it = l->head;
    l->head = l->tail = NULL;
    pthread_mutex_unlock(&l->lock);
    while (it) {
        struct item *next = it->next;
        it->fn(it->ud);
        if (it->done) {
            pthread_mutex_lock(&l->lock);
            *it->done = 1;
            pthread_cond_broadcast(&l->cond);
            pthread_mutex_unlock(&l->lock);
        }
        free(it);
        it = next;
    }
}

static void turn(struct sbx__loop *l)
{
    struct epoll_event evs[MAX_EVENTS];
    int ms = run_timers(l);
    if (l->kicked || l->n_graves)
        ms = 0;
    l->kicked = 0;
    int n = epoll_wait(l->epfd, evs, MAX_EVENTS, ms);
    for (int i = 0; i < n; i++) {
        struct sbx__watch *w = evs[i].data.ptr;
        if (w->dead)
            continue;
        unsigned rev = (evs[i].events & EPOLLIN ? SBX__IN : 0) |
                       (evs[i].events & EPOLLOUT ? SBX__OUT : 0) |
                       (evs[i].events & (EPOLLERR | EPOLLHUP) ? SBX__ERR : 0);
        w->fn(w, rev, w->ud);
    }
    run_queue(l);
    (void)run_timers(l);
    bury_all(l);
    __atomic_add_fetch(&l->iterations, 1, __ATOMIC_RELAXED);
}

static void *loop_main(void *arg)
{
    struct sbx__loop *l = arg;
    on_thread = l;
    for (;;) {
        pthread_mutex_lock(&l->lock);
        int stop = l->stop && !l->head;
        pthread_mutex_unlock(&l->lock);
        if (stop)
            break;
        turn(l);
    }
    bury_all(l);
    on_thread = NULL;
    return NULL;
}

/* Under ctl: the epoll set, the eventfd and the thread (signals blocked in it: a SIGPIPE from a
 * peer that left stays with the loop as EPIPE). */
static int start(struct sbx__loop *l, struct sbx_error *err)
{
    l->epfd = epoll_create1(EPOLL_CLOEXEC);
    l->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (l->epfd < 0 || l->evfd < 0) {
        int rc = sbx_error_errno(err, errno, "cannot make the event loop's descriptors");
        sbx_fd_close(&l->epfd);
        sbx_fd_close(&l->evfd);
        return rc;
    }
    l->wake = (struct sbx__watch){.l = l, .fd = l->evfd, .events = SBX__IN, .fn = on_wake};
    struct epoll_event e = {.events = EPOLLIN, .data.ptr = &l->wake};
    (void)epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->evfd, &e);
    l->stop = 0;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int r = pthread_create(&l->thread, NULL, loop_main, l);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (r != 0) {
        sbx_fd_close(&l->epfd);
        sbx_fd_close(&l->evfd);
        return sbx_error_set(err, SBX_E_SYS, r, "cannot start the event loop's thread");
    }
    l->running = 1;
    return 0;
}

/* Under ctl. */
static void stop_thread(struct sbx__loop *l)
{
    if (!l->running)
        return;
    pthread_mutex_lock(&l->lock);
    l->stop = 1;
    pthread_mutex_unlock(&l->lock);
    wake(l);
    pthread_join(l->thread, NULL);
    l->running = 0;
    if (l->xfers) {
        sbx__xfer_state_free(l, l->xfers);
        l->xfers = NULL;
        bury_all(l);
    }
    sbx_fd_close(&l->epfd);
    sbx_fd_close(&l->evfd);
    free(l->heap);
    l->heap = NULL;
    l->n_heap = l->cap_heap = 0;
}

static struct sbx__loop *alloc_loop(int dflt)
{
    struct sbx__loop *l = sbx_xcalloc(1, sizeof(*l));
    pthread_mutex_init(&l->ctl, NULL);
    pthread_mutex_init(&l->lock, NULL);
    pthread_cond_init(&l->cond, NULL);
    l->epfd = l->evfd = -1;
    l->dflt = dflt;
    return l;
}

int sbx__loop_default(struct sbx__loop **out, struct sbx_error *err)
{
    int rc = sbx__curl_load(err);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&dflt_lock);
    /* A forked child has no thread of its parent's loop: it gets a loop of its own. */
    if (!dflt_loop || dflt_pid != getpid()) {
        dflt_loop = alloc_loop(1);
        dflt_pid = getpid();
    }
    *out = dflt_loop;
    pthread_mutex_unlock(&dflt_lock);
    return 0;
}

int sbx__loop_new(struct sbx__loop **out, struct sbx_error *err)
{
    int rc = sbx__curl_load(err);
    if (rc < 0)
        return rc;
    struct sbx__loop *l = alloc_loop(0);
    pthread_mutex_lock(&l->ctl);
    rc = start(l, err);
    pthread_mutex_unlock(&l->ctl);
    if (rc < 0) {
        free(l);
        return rc;
    }
    *out = l;
    return 0;
}

void sbx__loop_free(struct sbx__loop *l)
{
    if (!l || l->dflt)
        return;
    pthread_mutex_lock(&l->ctl);
    stop_thread(l);
    pthread_mutex_unlock(&l->ctl);
    pthread_mutex_destroy(&l->ctl);
    pthread_mutex_destroy(&l->lock);
    pthread_cond_destroy(&l->cond);
    free(l->graves);
    free(l);
}

int sbx__loop_hold(struct sbx__loop *l, struct sbx_error *err)
{
    int rc = 0;
    pthread_mutex_lock(&l->ctl);
    if (!l->running)
        rc = start(l, err);
    if (rc == 0)
        sbx__loop_count(l, LOOP_HOLD, 1);
    pthread_mutex_unlock(&l->ctl);
    return rc;
}

void sbx__loop_release(struct sbx__loop *l)
{
    sbx__loop_count(l, LOOP_HOLD, -1);
}

/* A user arrives (under ctl): the thread runs from here on. */
static void enter(struct sbx__loop *l)
{
    pthread_mutex_lock(&l->ctl);
    if (!l->running) {
        struct sbx_error err = SBX_ERROR_INIT;
        if (start(l, &err) < 0)
            SBX_BUG("%s", err.msg); /* no thread or epoll: nothing remote can run */
    }
    l->users++;
    pthread_mutex_unlock(&l->ctl);
}

/* A user leaves: the process's loop stops when nothing is left on it. */
static void leave(struct sbx__loop *l)
{
    pthread_mutex_lock(&l->ctl);
    l->users--;
    if (l->dflt && l->users == 0 && objects(l) == 0) {
        pthread_mutex_lock(&l->lock);
        int idle = !l->head;
        pthread_mutex_unlock(&l->lock);
        if (idle)
            stop_thread(l);
    }
    pthread_mutex_unlock(&l->ctl);
}

static void enqueue(struct sbx__loop *l, void (*fn)(void *), void *ud, int *done)
{
    struct item *it = sbx_xcalloc(1, sizeof(*it));
    *it = (struct item){fn, ud, done, NULL};
    pthread_mutex_lock(&l->lock);
    if (l->tail)
        l->tail->next = it;
    else
        l->head = it;
    l->tail = it;
    pthread_mutex_unlock(&l->lock);
    wake(l);
}

void sbx__loop_post(struct sbx__loop *l, void (*fn)(void *ud), void *ud)
{
    if (sbx__loop_on_thread(l)) {
        enqueue(l, fn, ud, NULL);
        return;
    }
    enter(l);
    enqueue(l, fn, ud, NULL);
    /* Not leave(): the work is queued; the thread runs until a later call finds it idle. */
    pthread_mutex_lock(&l->ctl);
    l->users--;
    pthread_mutex_unlock(&l->ctl);
}

void sbx__loop_call(struct sbx__loop *l, void (*fn)(void *ud), void *ud)
{
    if (sbx__loop_on_thread(l)) {
        fn(ud);
        return;
    }
    enter(l);
    int done = 0;
    enqueue(l, fn, ud, &done);
    pthread_mutex_lock(&l->lock);
    while (!done)
        pthread_cond_wait(&l->cond, &l->lock);
    pthread_mutex_unlock(&l->lock);
    leave(l);
}

void sbx__loop_stats(struct sbx__loop *l, struct sbx__loop_stats *out)
{
    out->watches = __atomic_load_n(&l->count[LOOP_WATCH], __ATOMIC_RELAXED);
    out->timers = __atomic_load_n(&l->count[LOOP_TIMER], __ATOMIC_RELAXED);
    out->conns = __atomic_load_n(&l->count[LOOP_CONN], __ATOMIC_RELAXED);
    out->xfers = __atomic_load_n(&l->count[LOOP_XFER], __ATOMIC_RELAXED);
    out->procs = __atomic_load_n(&l->count[LOOP_PROC], __ATOMIC_RELAXED);
    out->iterations = __atomic_load_n(&l->iterations, __ATOMIC_RELAXED);
}

void **sbx__loop_xfer_slot(struct sbx__loop *l)
{
    return &l->xfers;
}
