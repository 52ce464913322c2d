/* sbx test harness: TAP output, checks that print both sides, an fd-leak check at the end.
 *
 *   static void test_x(void) { CHECK_EQ_INT(1 + 1, 2); }
 *   int main(void) { TAP_START(); TAP_RUN(test_x); return TAP_DONE(); }
 *
 * Every check is one TAP line. TAP_DONE() fails the program if any fd opened after TAP_START()
 * is still open, so a leaked descriptor is a failing test, not a note. Exit 77 means skip. */
#ifndef SBX_TAP_H
#define SBX_TAP_H

#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sbx/error.h"

static int tap_count, tap_failed;
static unsigned char tap_fds_at_start[1024];

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
    return ok;
}

#define TAP_START() tap__scan_fds(tap_fds_at_start)

#define TAP_RUN(fn)            \
    do {                       \
        printf("# %s\n", #fn); \
        fn();                  \
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

#define TAP_SKIP_ALL(reason)                \
    do {                                    \
        printf("1..0 # SKIP %s\n", reason); \
        exit(77);                           \
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
