#include <limits.h>
#include <string.h>

#include "tap.h"
#include "sbx/time.h"

static void test_duration_ok(void)
{
    static const struct {
        const char *in;
        int64_t ms;
    } cases[] = {
            {"250ms", 250}, {"30s", 30000}, {"5m", 300000}, {"1h", 3600000}, {"1.5", 1500},
            {"0", 0},       {"2", 2000},    {"0.001", 1},   {"1.5m", 90000}, {".5", 500},
            {"0.25s", 250}, {"10.9ms", 10}, {"0.0001", 0},
    };
    for (size_t i = 0; i < SBX_ARRAY_LEN(cases); i++) {
        int64_t ms = -7;
        int rc = sbx_duration_parse_ms(cases[i].in, &ms);
        CHECK_EQ_INT(rc, 0);
        CHECK_EQ_INT(ms, cases[i].ms);
    }
}

static void test_duration_bad(void)
{
    static const char *bad[] = {
            "",
            "-1",
            "-250ms",
            "ms",
            "1.",
            ".",
            "1x",
            "1 s",
            " 1",
            "1s ",
            "1.2.3",
            "1e3",
            "5min",
            "0x10",
            "1h1",
            "99999999999999999999",
            "9223372036854775807h",
    };
    for (size_t i = 0; i < SBX_ARRAY_LEN(bad); i++) {
        int64_t ms = -7;
        int rc = sbx_duration_parse_ms(bad[i], &ms);
        if (!CHECK(rc == -1))
            printf("#   accepted \"%s\"\n", bad[i]);
        CHECK_EQ_INT(ms, -7); /* untouched on failure */
    }
}

static void test_rfc3339(void)
{
    char out[SBX_TIME_RFC3339_LEN];
    sbx_time_rfc3339(0, out);
    CHECK_EQ_STR(out, "1970-01-01T00:00:00.000Z");
    /* 2026-11-29T09:55:12.345Z */
    sbx_time_rfc3339(INT64_C(1795946112) * SBX_NS_PER_S + 345 * SBX_NS_PER_MS + 999, out);
    CHECK_EQ_STR(out, "2026-11-29T09:55:12.345Z");
    sbx_time_rfc3339(-1 * SBX_NS_PER_MS, out);
    CHECK_EQ_STR(out, "1969-12-31T23:59:59.999Z");
}

static void test_clocks_and_deadlines(void)
{
    int64_t a = sbx_time_mono_ns();
    int64_t b = sbx_time_mono_ns();
    CHECK(b >= a);
    CHECK(sbx_time_real_ns() > INT64_C(1600000000) * SBX_NS_PER_S);

    CHECK_EQ_INT(sbx_deadline_after_ms(-1), INT64_MAX);
    CHECK_EQ_INT(sbx_deadline_poll_ms(INT64_MAX), -1);
    CHECK_EQ_INT(sbx_deadline_poll_ms(sbx_time_mono_ns() - SBX_NS_PER_S), 0);
    CHECK_EQ_INT(sbx_deadline_poll_ms(sbx_deadline_after_ms(0)), 0);
    int left = sbx_deadline_poll_ms(sbx_deadline_after_ms(60000));
    CHECK(left > 0 && left <= 60000);
    /* a huge timeout is a deadline, not "none", and clamps to INT_MAX for poll */
    int64_t far = sbx_deadline_after_ms(INT64_MAX / 2);
    CHECK(far != INT64_MAX);
    CHECK_EQ_INT(sbx_deadline_poll_ms(far), INT_MAX);
}

static void test_sleep(void)
{
    int64_t start = sbx_time_mono_ns();
    sbx_sleep_ms(20);
    /* a lower bound only: sleeping must not return early */
    CHECK(sbx_time_mono_ns() - start >= 20 * SBX_NS_PER_MS);
    sbx_sleep_ms(0);
    sbx_sleep_ms(-5);
}

int main(void)
{
    TAP_START();
    TAP_RUN(test_duration_ok);
    TAP_RUN(test_duration_bad);
    TAP_RUN(test_rfc3339);
    TAP_RUN(test_clocks_and_deadlines);
    TAP_RUN(test_sleep);
    return TAP_DONE();
}
