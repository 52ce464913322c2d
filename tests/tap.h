/* sbx test harness: TAP output, checks that print both sides, an fd-leak check at the end.
 *
 *   static void test_x(void) { CHECK_EQ_INT(1 + 1, 2); }
 *   int main(void) { TAP_START(); TAP_RUN(test_x); return TAP_DONE(); }
 *
 * Every check is one TAP line. TAP_DONE() fails the program if any fd opened after TAP_START()
 * is still open, so a leaked descriptor is a failing test, not a note. Exit 77 means skip.
 *
 * TAP_RUN_FORKED(test_x) runs the case in a child process of its own, as libuv runs every
 * test: for cases that fork, unshare, spawn or start sandboxes. A case that crashes, calls
 * exit, or runs longer than SBX_TEST_CASE_TIMEOUT seconds (default 120) fails with the reason
 * (signal, exit status, timeout), and the cases after it still run; its checks are numbered
 * and counted like in-process ones, and a descriptor it leaves open fails it. State the case
 * changes in memory stays in the child: a forked case must not feed a later one.
 * The environment chooses: SBX_TEST_FORK=0 runs every case in-process (for a debugger),
 * SBX_TEST_FORK=all forks every TAP_RUN case too. */
#ifndef SBX_TAP_H
#define SBX_TAP_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sbx/error.h"

static int tap_count, tap_failed;
static unsigned char tap_fds_at_start[1024];
static int tap__report_fd = -1; /* in a forked case: one byte per check to the parent */

static inline void tap__scan_fds(unsigned char *seen)
{
    memset(seen, 0, 1024);
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return;
    int self = dirfd(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        char *end;
        long fd = strtol(e->d_name, &end, 10);
        if (*end || end == e->d_name || fd == self || fd < 0 || fd >= 1024)
            continue;
        seen[fd] = 1;
    }
    closedir(d);
}

static inline int tap__result(int ok, const char *file, int line, const char *what)
{
    tap_count++;
    if (!ok)
        tap_failed++;
    printf("%s %d - %s:%d: %s\n", ok ? "ok" : "not ok", tap_count, file, line, what);
    fflush(stdout);
    if (tap__report_fd >= 0) {
        char c = ok ? 'o' : 'f';
        while (write(tap__report_fd, &c, 1) < 0 && errno == EINTR)
            ;
    }
    return ok;
}

#define TAP_START() tap__scan_fds(tap_fds_at_start)

/* SBX_TEST_FORK: 0 never forks, 2 ("all") forks every case, 1 (default) only forked ones. */
static inline int tap__fork_mode(void)
{
    const char *e = getenv("SBX_TEST_FORK");
    if (e && strcmp(e, "0") == 0)
        return 0;
    return e && strcmp(e, "all") == 0 ? 2 : 1;
}

static inline int64_t tap__now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The child's side: the case, then its own fd-leak check, then exit (not _exit: coverage
 * counts and the sanitizers' leak checks are written at exit; so the program's atexit
 * handlers run in the child too). */
static inline void tap__child(void (*fn)(void), const char *name, const char *file, int line)
{
    unsigned char before[1024], after[1024];
    tap__scan_fds(before);
    fn();
    tap__scan_fds(after);
    int leaked = 0;
    for (int fd = 0; fd < 1024; fd++) {
        if (after[fd] && !before[fd]) {
            char link[64], target[256] = "";
            snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
            ssize_t n = readlink(link, target, sizeof(target) - 1);
            target[n > 0 ? n : 0] = '\0';
            printf("# %s leaked fd %d (%s)\n", name, fd, target);
            leaked = 1;
        }
    }
    if (leaked)
        tap__result(0, file, line, "the case leaves no file descriptor open");
    fflush(stdout);
    exit(0);
}

/* Reads the check reports waiting on fd: returns what read returned. */
static inline ssize_t tap__count_reports(int fd)
{
    char buf[256];
    ssize_t got = read(fd, buf, sizeof(buf));
    for (ssize_t i = 0; i < got; i++) {
        tap_count++;
        tap_failed += buf[i] != 'o';
    }
    return got;
}

/* The parent's side: count the child's checks as they come, kill it at the deadline, and
 * turn an abnormal end into a failing check. */
static inline void tap__run_forked(void (*fn)(void), const char *name, const char *file, int line)
{
    char what[256];
    int p[2];
    fflush(stdout);
    fflush(stderr);
    if (pipe2(p, O_CLOEXEC) < 0) {
        tap__result(0, file, line, "a pipe for the forked case");
        return;
    }
    pid_t pid = fork();
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        tap__result(0, file, line, "fork for the case");
        return;
    }
    if (pid == 0) {
        close(p[0]);
        tap__report_fd = p[1];
        tap__child(fn, name, file, line);
    }
    close(p[1]);
    const char *t = getenv("SBX_TEST_CASE_TIMEOUT");
    long limit_s = t && strtol(t, NULL, 10) > 0 ? strtol(t, NULL, 10) : 120;
    int64_t deadline = tap__now_ms() + limit_s * 1000;
    int status = 0, timed_out = 0, eof = 0;
    /* The pipe ends when the child and whatever it forked without exec are gone; the child
     * itself is reaped as soon as it has ended (checked every 50 ms until the pipe ends, then
     * every millisecond: it is exiting). */
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid || (w < 0 && errno != EINTR))
            break;
        int64_t left = deadline - tap__now_ms();
        if (left <= 0 && !timed_out) {
            kill(pid, SIGKILL);
            timed_out = 1;
        }
        struct pollfd pf = {.fd = p[0], .events = POLLIN};
        int wait_ms = eof ? 1 : left > 0 && left < 50 ? (int)left : 50;
        if (poll(&pf, eof ? 0 : 1, wait_ms) > 0 && tap__count_reports(p[0]) == 0)
            eof = 1;
    }
    /* What the child wrote just before it ended. */
    int fl = fcntl(p[0], F_GETFL);
    if (!eof && fl >= 0 && fcntl(p[0], F_SETFL, fl | O_NONBLOCK) == 0)
        while (tap__count_reports(p[0]) > 0)
            ;
    close(p[0]);
    if (timed_out)
        snprintf(what, sizeof(what), "%s: timed out after %ld s (SBX_TEST_CASE_TIMEOUT)", name,
                 limit_s);
    else if (WIFSIGNALED(status))
        snprintf(what, sizeof(what), "%s: killed by signal %d (%s)", name, WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    else if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
        snprintf(what, sizeof(what), "%s: exited with status %d", name, WEXITSTATUS(status));
    else
        return;
    tap__result(0, file, line, what);
}

/* A plain case is called right here, as it always was; SBX_TEST_FORK=all forks it too. */
#define TAP_RUN(fn)                                       \
    do {                                                  \
        printf("# %s\n", #fn);                            \
        if (tap__fork_mode() == 2)                        \
            tap__run_forked(fn, #fn, __FILE__, __LINE__); \
        else                                              \
            fn();                                         \
    } while (0)

#define TAP_RUN_FORKED(fn)                                \
    do {                                                  \
        printf("# %s\n", #fn);                            \
        if (tap__fork_mode() == 0)                        \
            fn();                                         \
        else                                              \
            tap__run_forked(fn, #fn, __FILE__, __LINE__); \
    } while (0)

static inline int tap__done(void)
{
    unsigned char now[1024];
    tap__scan_fds(now);
    int leaked = 0;
    for (int fd = 0; fd < 1024; fd++) {
        if (now[fd] && !tap_fds_at_start[fd]) {
            printf("# leaked fd %d\n", fd);
            leaked = 1;
        }
    }
    tap__result(!leaked, __FILE__, __LINE__, "no file descriptor leaked");
    printf("1..%d\n", tap_count);
    return tap_failed ? 1 : 0;
}
#define TAP_DONE() tap__done()

/* Status 0: meson reads the plan "1..0 # SKIP" as a skip only then (for a TAP test any other
 * status, 77 included, is an error). */
#define TAP_SKIP_ALL(reason)                \
    do {                                    \
        printf("1..0 # SKIP %s\n", reason); \
        exit(0);                            \
    } while (0)

#define CHECK(cond) tap__result(!!(cond), __FILE__, __LINE__, #cond)

#define CHECK_EQ_INT(a, b)                                                    \
    do {                                                                      \
        intmax_t tap_a_ = (intmax_t)(a), tap_b_ = (intmax_t)(b);              \
        if (!tap__result(tap_a_ == tap_b_, __FILE__, __LINE__, #a " == " #b)) \
            printf("#   left:  %jd\n#   right: %jd\n", tap_a_, tap_b_);       \
    } while (0)

#define CHECK_EQ_STR(a, b)                                                               \
    do {                                                                                 \
        const char *tap_a_ = (a), *tap_b_ = (b);                                         \
        int tap_ok_ = tap_a_ && tap_b_ ? strcmp(tap_a_, tap_b_) == 0 : tap_a_ == tap_b_; \
        if (!tap__result(tap_ok_, __FILE__, __LINE__, #a " == " #b))                     \
            printf("#   left:  \"%s\"\n#   right: \"%s\"\n", tap_a_ ? tap_a_ : "(null)", \
                   tap_b_ ? tap_b_ : "(null)");                                          \
    } while (0)

#define CHECK_EQ_MEM(a, alen, b, blen)                                      \
    do {                                                                    \
        size_t tap_al_ = (alen), tap_bl_ = (blen);                          \
        int tap_ok_ = tap_al_ == tap_bl_ && memcmp((a), (b), tap_al_) == 0; \
        if (!tap__result(tap_ok_, __FILE__, __LINE__, #a " == " #b))        \
            printf("#   lengths: %zu vs %zu\n", tap_al_, tap_bl_);          \
    } while (0)

/* rc must be 0; on failure prints the error message. */
#define CHECK_OK(expr, errp)                                       \
    do {                                                           \
        int tap_rc_ = (expr);                                      \
        if (!tap__result(tap_rc_ == 0, __FILE__, __LINE__, #expr)) \
            printf("#   rc %d: %s\n", tap_rc_, (errp)->msg);       \
    } while (0)

/* rc must be -code, and the message must contain needle (may be NULL). */
#define CHECK_ERR(expr, code, errp, needle)                                                \
    do {                                                                                   \
        int tap_rc_ = (expr);                                                              \
        const char *tap_n_ = (needle);                                                     \
        int tap_ok_ = tap_rc_ == -(int)(code) && (!tap_n_ || strstr((errp)->msg, tap_n_)); \
        if (!tap__result(tap_ok_, __FILE__, __LINE__, #expr " fails with " #code))         \
            printf("#   rc %d (want %d): \"%s\"\n#   wanted message containing: \"%s\"\n", \
                   tap_rc_, -(int)(code), (errp)->msg, tap_n_ ? tap_n_ : "");              \
    } while (0)

#define CHECK_CONTAINS(hay, needle)                                                            \
    do {                                                                                       \
        const char *tap_h_ = (hay), *tap_n_ = (needle);                                        \
        if (!tap__result(tap_h_ && strstr(tap_h_, tap_n_), __FILE__, __LINE__,                 \
                         #hay " contains " #needle))                                           \
            printf("#   haystack: \"%s\"\n#   needle:   \"%s\"\n", tap_h_ ? tap_h_ : "(null)", \
                   tap_n_);                                                                    \
    } while (0)

#endif
