/* The supervisor's bounded log: the token bucket and the size cap (logcap.h). */
#include <string.h>
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

int main(void)
{
    TAP_START();
    TAP_RUN(test_bucket);
    TAP_RUN(test_cap_and_summary);
    return TAP_DONE();
}
