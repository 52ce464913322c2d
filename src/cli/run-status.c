/* The status line of `sbx run` (run-status.h). The model's wait is reported by the HTTP layer
 * on the run's thread; a running tool blocks that thread, so a ticker thread of its own redraws
 * the tool line once a second. Both draw under the lock the event renderer holds. */
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/run-status.h"
#include "sbx/time.h"

/* A status line appears only for what takes longer than this: quick steps show nothing. */
#define STATUS_AFTER_MS 2000

void run_status_init(struct run_status *st, int enabled)
{
    memset(st, 0, sizeof(*st));
    st->enabled = enabled;
    /* Recursive: a message logged while the lock is held (the renderer's thread, inside the
     * library) goes through run_status_log_hook on the same thread. */
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&st->lock, &ma);
    pthread_mutexattr_destroy(&ma);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&st->wake, &ca);
    pthread_condattr_destroy(&ca);
}

void run_status_lock(struct run_status *st)
{
    pthread_mutex_lock(&st->lock);
}

void run_status_unlock(struct run_status *st)
{
    pthread_mutex_unlock(&st->lock);
}

void run_status_clear(struct run_status *st)
{
    if (!st->shown)
        return;
    fputs("\r\033[K", stderr);
    fflush(stderr);
    st->shown = 0;
}

/* The columns of the terminal on stderr (80 when it does not say). */
static size_t columns(void)
{
    struct winsize ws;
    if (ioctl(2, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20)
        return ws.ws_col;
    return 80;
}

void run_status_model_wait(struct run_status *st, int64_t waited_ms, int attempt)
{
    if (!st->enabled)
        return;
    if (waited_ms < 0) {
        run_status_clear(st);
        return;
    }
    if (waited_ms < STATUS_AFTER_MS)
        return;
    fprintf(stderr, "\r\033[K  waiting for the model: %llds", (long long)(waited_ms / 1000));
    if (attempt > 1)
        fprintf(stderr, " (attempt %d)", attempt);
    fflush(stderr);
    st->shown = 1;
}

/* With the lock held: the tool line, cut to one row of the terminal (a wrapped line could not
 * be erased with one carriage return). */
static void draw_tools(struct run_status *st, int64_t now)
{
    char tail[64];
    long long secs = (long long)((now - st->tools_since_ns) / SBX_NS_PER_S);
    if (st->ntools > 1)
        snprintf(tail, sizeof(tail), " (%lld s, and %zu more)", secs, st->ntools - 1);
    else
        snprintf(tail, sizeof(tail), " (%lld s)", secs);
    size_t cols = columns(), fixed = strlen("  running ") + strlen(tail) + 1;
    size_t room = cols > fixed + 8 ? cols - fixed : 8, n = strlen(st->label);
    fputs("\r\033[K  running ", stderr);
    if (n > room) {
        cli_put_safe(stderr, CLI_SAFE_ALWAYS, st->label, room - 3);
        fputs("...", stderr);
    } else {
        cli_put_safe(stderr, CLI_SAFE_ALWAYS, st->label, n);
    }
    fputs(tail, stderr);
    fflush(stderr);
    st->shown = 1;
}

static void *ticker_main(void *data)
{
    struct run_status *st = data;
    pthread_mutex_lock(&st->lock);
    while (!st->stop) {
        int64_t now = sbx_time_mono_ns();
        if (st->ntools && now - st->tools_since_ns >= (int64_t)STATUS_AFTER_MS * SBX_NS_PER_MS)
            draw_tools(st, now);
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += 1;
        pthread_cond_timedwait(&st->wake, &st->lock, &until);
    }
    pthread_mutex_unlock(&st->lock);
    return NULL;
}

void run_status_tool_start(struct run_status *st, const char *label)
{
    if (!st->enabled)
        return;
    if (!st->ntools++) {
        st->tools_since_ns = sbx_time_mono_ns();
        snprintf(st->label, sizeof(st->label), "%s", label);
    }
    if (!st->ticking && pthread_create(&st->ticker, NULL, ticker_main, st) == 0)
        st->ticking = 1;
}

void run_status_tools_done(struct run_status *st)
{
    if (!st->ntools)
        return;
    st->ntools = 0;
    run_status_clear(st);
}

void run_status_release(struct run_status *st)
{
    pthread_mutex_lock(&st->lock);
    st->stop = 1;
    st->ntools = 0;
    run_status_clear(st);
    pthread_cond_signal(&st->wake);
    pthread_mutex_unlock(&st->lock);
    if (st->ticking)
        pthread_join(st->ticker, NULL);
    st->ticking = 0;
}

void run_status_log_hook(void *data, int before)
{
    struct run_status *st = data;
    if (before) {
        pthread_mutex_lock(&st->lock);
        run_status_clear(st);
    } else {
        pthread_mutex_unlock(&st->lock);
    }
}
