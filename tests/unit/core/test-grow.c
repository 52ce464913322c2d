/* SBX_ALLOC_GROW / sbx__grow (src/core/grow.h), the one growth of an array: doubling from a
 * small start, room for exactly what is asked when one doubling is not enough, contents kept,
 * nothing done when there is room, and an overflowing size that aborts like an exhausted heap
 * (in a child process, since it ends the process). */
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/grow.h"
#include "sbx/common.h"
#include "tap.h"

static void test_doubling(void)
{
    int *v = NULL;
    size_t n = 0, alloc = 0;
    SBX_ALLOC_GROW(v, 1, alloc);
    CHECK(v != NULL);
    CHECK_EQ_INT(alloc, 8); /* the small start */
    for (n = 0; n < 8; n++)
        v[n] = (int)n;
    SBX_ALLOC_GROW(v, 9, alloc);
    CHECK_EQ_INT(alloc, 16); /* one doubling */
    v[8] = 8;
    int same = 1;
    for (size_t i = 0; i < 9; i++)
        same &= v[i] == (int)i;
    CHECK(same); /* the contents moved with the array */
    int *before = v;
    SBX_ALLOC_GROW(v, 16, alloc); /* room enough: nothing happens */
    CHECK(v == before);
    CHECK_EQ_INT(alloc, 16);
    free(v);
}

static void test_exact_need(void)
{
    /* Far past one doubling: doubled until it holds the need, not one step. */
    char *p = NULL;
    size_t alloc = 0;
    p = sbx__grow(p, 1, 1000, &alloc);
    CHECK_EQ_INT(alloc, 1024);
    memset(p, 'x', 1000);
    size_t big = alloc;
    p = sbx__grow(p, 1, big * 3, &alloc);
    CHECK_EQ_INT(alloc, big * 4);
    CHECK(p[999] == 'x');
    free(p);
    /* A start other than zero keeps its own scale. */
    long *q = sbx_xmalloc(3 * sizeof(*q));
    size_t qa = 3;
    SBX_ALLOC_GROW(q, 4, qa);
    CHECK_EQ_INT(qa, 6);
    free(q);
}

/* Run fn in a child with stderr to a pipe: 1 when it died of SIGABRT saying "out of memory". */
static int aborts_oom(void (*fn)(void))
{
    int fds[2];
    char buf[256] = "";
    if (pipe(fds) < 0)
        return 0;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        fn();
        _exit(0); /* it returned: the overflow went unnoticed */
    }
    close(fds[1]);
    ssize_t r = read(fds[0], buf, sizeof(buf) - 1);
    close(fds[0]);
    if (r > 0)
        buf[r] = '\0';
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid)
        return 0;
    return WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT && strstr(buf, "out of memory") != NULL;
}

static void overflow_size(void)
{
    size_t alloc = 0;
    /* 8 elements of a quarter of the address space: the size multiplication overflows. */
    (void)sbx__grow(NULL, SIZE_MAX / 4, 8, &alloc);
}

static void overflow_count(void)
{
    size_t alloc = 8;
    /* More elements than doubling can reach. */
    (void)sbx__grow(NULL, 1, SIZE_MAX, &alloc);
}

static void test_overflow(void)
{
    CHECK(aborts_oom(overflow_size));
    CHECK(aborts_oom(overflow_count));
}

int main(void)
{
    TAP_START();
    TAP_RUN(test_doubling);
    TAP_RUN(test_exact_need);
    TAP_RUN(test_overflow);
    return TAP_DONE();
}
