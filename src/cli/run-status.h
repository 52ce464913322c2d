/* The status line of `sbx run` on a terminal (run-status.c): one transient line on stderr that
 * says what the run waits for (the model, a running tool), redrawn while it lasts and erased
 * before anything else is printed. Not thread-safe by itself: callers hold its lock around
 * every write to stderr while a run goes on. */
#ifndef SBX_CLI_RUN_STATUS_H
#define SBX_CLI_RUN_STATUS_H

#include <pthread.h>
#include <stdint.h>

#define RUN_STATUS_LABEL_MAX 200

struct run_status {
    int enabled; /* stderr is a terminal and the output is for a person */
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_t ticker;
    int ticking; /* the ticker thread runs */
    int stop;
    int shown; /* a status line is on the terminal */
    /* Tools running: how many, since when, and what the first of them is. */
    size_t ntools;
    int64_t tools_since_ns;
    char label[RUN_STATUS_LABEL_MAX + 1];
};

void run_status_init(struct run_status *st, int enabled);
/* Stops the ticker and erases the line. Safe to call twice. */
void run_status_release(struct run_status *st);
void run_status_lock(struct run_status *st);
void run_status_unlock(struct run_status *st);
/* With the lock held: erase the line if one is shown. */
void run_status_clear(struct run_status *st);
/* With the lock held: the model has not begun to answer after waited_ms (a line after 2 s). */
void run_status_model_wait(struct run_status *st, int64_t waited_ms, int attempt);
/* With the lock held: a tool call begins to run ("exec_command: npm test"); after 2 s a line
 * "running LABEL (N s)" shows until run_status_tools_done. */
void run_status_tool_start(struct run_status *st, const char *label);
void run_status_tools_done(struct run_status *st);
/* For cli_log_set_hook: a log message takes the lock and erases the line first (the ticker
 * draws it again). */
void run_status_log_hook(void *data, int before);

#endif
