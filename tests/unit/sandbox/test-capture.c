/* Head + tail output capture. */
#include <stdlib.h>
#include <string.h>

#include "tap.h"
#include "sbx/session.h"

static void test_fits(void)
{
    struct sbx_capture c;
    struct sbx_output o;
    sbx_capture_init(&c, 16);
    sbx_capture_add(&c, "hello ", 6);
    sbx_capture_add(&c, "world", 5);
    sbx_capture_take(&c, &o);
    CHECK_EQ_STR(o.data, "hello world");
    CHECK_EQ_INT(o.total, 11);
    CHECK_EQ_INT(o.dropped, 0);
    CHECK_EQ_INT(o.len, 11);
    sbx_output_release(&o);
    /* take resets: the capture is reusable */
    sbx_capture_add(&c, "x", 1);
    sbx_capture_take(&c, &o);
    CHECK_EQ_STR(o.data, "x");
    sbx_output_release(&o);
    sbx_capture_release(&c);
}

static void test_empty(void)
{
    struct sbx_capture c;
    struct sbx_output o;
    sbx_capture_init(&c, 0);
    CHECK_EQ_INT(c.limit, SBX_OUTPUT_DEFAULT_LIMIT);
    sbx_capture_take(&c, &o);
    CHECK_EQ_STR(o.data, "");
    CHECK_EQ_INT(o.total, 0);
    sbx_output_release(&o);
    sbx_capture_release(&c);
}

/* Compare against the obvious answer: first limit/2 bytes, last limit - limit/2 bytes. */
static void check_against_reference(size_t limit, size_t total, unsigned seed)
{
    char *all = malloc(total + 1);
    srand(seed);
    for (size_t i = 0; i < total; i++)
        all[i] = (char)('a' + rand() % 26);
    struct sbx_capture c;
    struct sbx_output o;
    sbx_capture_init(&c, limit);
    for (size_t off = 0; off < total;) {
        size_t n = (size_t)(rand() % (int)(limit * 2 + 1));
        if (n > total - off)
            n = total - off;
        sbx_capture_add(&c, all + off, n);
        off += n;
    }
    sbx_capture_take(&c, &o);
    size_t head = limit / 2, tail = limit - head;
    if (total <= limit) {
        CHECK_EQ_MEM(o.data, o.len, all, total);
        CHECK_EQ_INT(o.dropped, 0);
    } else {
        CHECK_EQ_INT(o.len, limit);
        CHECK_EQ_INT(o.head_len, head);
        CHECK_EQ_MEM(o.data, head, all, head);
        CHECK_EQ_MEM(o.data + head, tail, all + total - tail, tail);
        CHECK_EQ_INT(o.dropped, total - limit);
    }
    CHECK_EQ_INT(o.total, total);
    sbx_output_release(&o);
    sbx_capture_release(&c);
    free(all);
}

static void test_head_tail(void)
{
    check_against_reference(10, 5, 1);
    check_against_reference(10, 10, 2);
    check_against_reference(10, 11, 3);
    check_against_reference(10, 1000, 4);
    check_against_reference(7, 999, 5);
    check_against_reference(4096, 100000, 6);
    check_against_reference(1, 50, 7);
    check_against_reference(20000, 30000, 8);   /* tail partly filled, never wrapped */
    check_against_reference(20000, 1000000, 9); /* tail grown, then wrapped many times */
}

static void test_memory_follows_output(void)
{
    struct sbx_capture c;
    struct sbx_output o;
    sbx_capture_init(&c, SBX_OUTPUT_MAX_LIMIT);
    sbx_capture_add(&c, "tiny", 4);
    CHECK(c.head_cap < 65536); /* a 1 GiB limit does not mean 1 GiB allocated */
    CHECK_EQ_INT(c.tail_cap, 0);
    sbx_capture_take(&c, &o);
    CHECK_EQ_STR(o.data, "tiny");
    sbx_output_release(&o);
    sbx_capture_release(&c);
}

static void test_clamp(void)
{
    struct sbx_capture c;
    sbx_capture_init(&c, (size_t)-1);
    CHECK_EQ_INT(c.limit, SBX_OUTPUT_MAX_LIMIT);
    sbx_capture_release(&c);
}

int main(void)
{
    TAP_START();
    TAP_RUN(test_fits);
    TAP_RUN(test_empty);
    TAP_RUN(test_head_tail);
    TAP_RUN(test_memory_follows_output);
    TAP_RUN(test_clamp);
    return TAP_DONE();
}
