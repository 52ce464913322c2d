/* The supervisor's bounded log: the token bucket and the size cap (logcap.h). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "providers/local/supervisor/logcap.h"
#include "tap.h"

static void test_bucket(void)
{
    struct sbx__logcap l = {.fd = -1, .burst = 3, .per_sec = 2};
    int ok = 0;
    for (int i = 0; i < 10; i++)
        ok += sbx__logcap_admit(&l, 1000);
    CHECK_EQ_INT(ok, 3);
    CHECK_EQ_INT((int)l.suppressed, 7);
    /* Half a second buys one message at two per second. */
    CHECK(sbx__logcap_admit(&l, 1500));
    CHECK(!sbx__logcap_admit(&l, 1500));
    /* A long quiet spell refills to the burst, not beyond. */
    ok = 0;
    for (int i = 0; i < 10; i++)
        ok += sbx__logcap_admit(&l, 1000 + 86400000LL * 365);
    CHECK_EQ_INT(ok, 3);
    /* Time going backwards gives nothing. */
    CHECK(!sbx__logcap_admit(&l, 0));
}

static size_t file_size(int fd)
{
    struct stat st;
    return fstat(fd, &st) == 0 ? (size_t)st.st_size : 0;
}

static void read_all(int fd, char *out, size_t n)
{
    ssize_t r = pread(fd, out, n - 1, 0);
    out[r > 0 ? r : 0] = '\0';
}

static void test_cap_and_summary(void)
{
    int fd = memfd_create("log", MFD_CLOEXEC);
    CHECK(fd >= 0);
    struct sbx__logcap l = {.fd = fd, .max_bytes = 4096, .burst = 1, .per_sec = 1};
    sbx__logcap_handler(SBX_LOG_INFO, "first", &l);
    for (int i = 0; i < 100; i++)
        sbx__logcap_handler(SBX_LOG_INFO, "dropped by the bucket", &l);
    char text[8192];
    read_all(fd, text, sizeof(text));
    CHECK_EQ_STR(text, "sbx: info: first\n");
    /* The next admitted message is preceded by the count of those dropped. */
    l.tokens_milli = 1000;
    sbx__logcap_handler(SBX_LOG_WARN, "second", &l);
    read_all(fd, text, sizeof(text));
    CHECK_CONTAINS(text, "100 messages suppressed");
    CHECK_CONTAINS(text, "sbx: warning: second\n");

    /* Without the bucket in the way, the cap stops the file with one final line. */
    char big[1000];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    for (int i = 0; i < 50; i++) {
        l.tokens_milli = 1000;
        sbx__logcap_handler(SBX_LOG_INFO, big, &l);
    }
    CHECK(file_size(fd) <= 4096);
    CHECK(l.truncated);
    read_all(fd, text, sizeof(text));
    CHECK_CONTAINS(text, "log size limit reached");
    size_t at_cap = file_size(fd);
    l.tokens_milli = 1000;
    sbx__logcap_handler(SBX_LOG_ERROR, "after the cap", &l);
    CHECK_EQ_INT((int)file_size(fd), (int)at_cap);
    close(fd);
}

/* A helper's log (rclone's): 20000 lines of 100 bytes, 2 MB, through the pump. The bucket
 * lets the first burst through and summarises the rest; with the bucket out of the way the
 * file rotates to .1 and the two stay under twice the cap. */
static void test_pump(void)
{
    char dir[] = "/tmp/sbx-test-logcap.XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[sizeof(dir) + 16], old[sizeof(dir) + 16];
    snprintf(path, sizeof(path), "%s/0.log", dir);
    snprintf(old, sizeof(old), "%s/0.log.1", dir);
    char line[101];
    memset(line, 'e', 99);
    line[99] = '\n';
    line[100] = '\0';
    for (int round = 0; round < 2; round++) {
        int p[2];
        CHECK(pipe(p) == 0);
        pid_t w = fork();
        if (w == 0) {
            close(p[0]);
            for (int i = 0; i < 20000; i++)
                if (write(p[1], line, 100) != 100)
                    _exit(1);
            _exit(write(p[1], "last words", 10) == 10 ? 0 : 1); /* no newline at the end */
        }
        close(p[1]);
        struct sbx__logcap l = {.fd = -1, .max_bytes = 64 << 10, .burst = 10, .per_sec = 1};
        if (round == 1)
            l.burst = 1000000; /* the cap alone */
        sbx__logcap_pump(p[0], path, &l);
        close(p[0]);
        int st = -1;
        waitpid(w, &st, 0);
        CHECK_EQ_INT(st, 0);
        CHECK_EQ_INT(l.fd, -1);
        struct stat a, b;
        CHECK(stat(path, &a) == 0);
        if (round == 0) {
            CHECK(a.st_size < 2000);
            CHECK_EQ_INT((int)(a.st_mode & 0777), 0600);
            int fd = open(path, O_RDONLY | O_CLOEXEC);
            char text[4096];
            read_all(fd, text, sizeof(text));
            close(fd);
            CHECK_CONTAINS(text, "lines suppressed");
            CHECK(unlink(path) == 0);
        } else {
            CHECK(stat(old, &b) == 0);
            CHECK(a.st_size <= 64 << 10 && b.st_size <= 64 << 10);
            CHECK(b.st_size > 60 << 10);
            int fd = open(path, O_RDONLY | O_CLOEXEC);
            char text[70000];
            read_all(fd, text, sizeof(text));
            close(fd);
            CHECK_CONTAINS(text, "last words\n"); /* the newest lines are kept */
        }
    }
    unlink(path);
    unlink(old);
    rmdir(dir);
}

int main(void)
{
    TAP_START();
    TAP_RUN(test_bucket);
    TAP_RUN(test_cap_and_summary);
    TAP_RUN(test_pump);
    return TAP_DONE();
}
