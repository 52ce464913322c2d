/* SSE parser: line endings, comments, multi-line data, split feeds, cut streams, limits. */
#include <string.h>

#include "tap.h"
#include "sandbox/wire/sse.h"
#include "sbx/buf.h"

struct seen {
    struct sbx_buf log; /* "name=data|" per event */
    int stop_after;     /* return an error after this many events (0: never) */
    int count;
};

static int on_event(const char *event, const char *data, size_t n, void *ud, struct sbx_error *err)
{
    struct seen *s = ud;
    s->count++;
    if (sbx_buf_addf(&s->log, err, "%s=", event) < 0 || sbx_buf_add(&s->log, data, n, err) < 0 ||
        sbx_buf_addch(&s->log, '|', err) < 0)
        return -1;
    if (s->stop_after && s->count >= s->stop_after)
        return sbx_error_set(err, SBX_E_CANCELLED, 0, "stop");
    return 0;
}

static void feed_pieces(const char *text, size_t piece, struct seen *s, int *rc_out,
                        struct sbx_error *err)
{
    struct sbx__sse p;
    sbx__sse_init(&p, 1024, on_event, s);
    size_t n = strlen(text);
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i += piece)
        rc = sbx__sse_feed(&p, text + i, n - i < piece ? n - i : piece, err);
    if (rc == 0)
        rc = sbx__sse_finish(&p, err);
    *rc_out = rc;
    sbx__sse_release(&p);
}

static void test_basic_and_split(void)
{
    static const char *text = ": comment\r\n"
                              "event: a\r\ndata: one\r\n\r\n"
                              "data: two\ndata:  three\n\n"
                              "id: 7\rdata:four\r\r"
                              "data\n\n";
    /* Every piece size must give the same events, including CR/LF split across pieces. */
    static const char *want = "a=one|message=two\n three|message=four|message=|";
    size_t bad = 0;
    for (size_t piece = 1; piece <= strlen(text); piece++) {
        struct sbx_error err = SBX_ERROR_INIT;
        struct seen s = {0};
        int rc;
        sbx_buf_init(&s.log, 4096);
        feed_pieces(text, piece, &s, &rc, &err);
        if (rc != 0 || strcmp(s.log.data, want) != 0) {
            printf("# piece %zu: rc %d log \"%s\"\n", piece, rc, s.log.data);
            bad++;
        }
        if (piece == 1)
            CHECK_EQ_STR(s.log.data, want);
        sbx_buf_release(&s.log);
    }
    CHECK_EQ_INT(bad, 0);
}

static void test_cut_stream(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct seen s = {0};
    int rc;
    sbx_buf_init(&s.log, 4096);
    feed_pieces("data: whole\n\ndata: {\"half", 5, &s, &rc, &err);
    CHECK_EQ_INT(rc, -SBX_E_PARSE);
    CHECK_CONTAINS(err.msg, "stream ended in the middle of an event");
    CHECK_EQ_STR(s.log.data, "message=whole|");
    sbx_buf_release(&s.log);

    /* Data lines without the closing blank line are not an event either. */
    sbx_buf_init(&s.log, 4096);
    feed_pieces("data: x\n", 3, &s, &rc, &err);
    CHECK_EQ_INT(rc, -SBX_E_PARSE);
    CHECK_EQ_STR(s.log.data, "");
    sbx_buf_release(&s.log);

    /* A clean end after a comment is fine. */
    sbx_buf_init(&s.log, 4096);
    feed_pieces("data: x\n\n: bye\n", 4, &s, &rc, &err);
    CHECK_OK(rc, &err);
    sbx_buf_release(&s.log);
}

static void test_limits_and_stop(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct seen s = {0};
    struct sbx__sse p;
    char big[2000];
    memset(big, 'x', sizeof(big));
    sbx_buf_init(&s.log, 1 << 16);
    sbx__sse_init(&p, 1024, on_event, &s);
    CHECK_OK(sbx__sse_feed(&p, "data: ", 6, &err), &err);
    CHECK_ERR(sbx__sse_feed(&p, big, sizeof(big), &err), SBX_E_TOOBIG, &err, "event line");
    sbx__sse_release(&p);

    /* Many short data lines add up past the limit too. */
    sbx__sse_init(&p, 1024, on_event, &s);
    int rc = 0;
    for (int i = 0; i < 200 && rc == 0; i++)
        rc = sbx__sse_feed(&p, "data: 0123456789\n", 17, &err);
    CHECK_EQ_INT(rc, -SBX_E_TOOBIG);
    sbx__sse_release(&p);

    /* A callback error stops parsing and comes back unchanged. */
    s.stop_after = 1;
    s.count = 0;
    sbx__sse_init(&p, 1024, on_event, &s);
    CHECK_ERR(sbx__sse_feed(&p, "data: a\n\ndata: b\n\n", 18, &err), SBX_E_CANCELLED, &err, "stop");
    CHECK_EQ_INT(s.count, 1);
    sbx__sse_release(&p);
    sbx_buf_release(&s.log);
}

int main(void)
{
    TAP_START();
    TAP_RUN(test_basic_and_split);
    TAP_RUN(test_cut_stream);
    TAP_RUN(test_limits_and_stop);
    return TAP_DONE();
}
