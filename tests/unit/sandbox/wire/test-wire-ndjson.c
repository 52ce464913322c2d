/* Newline-delimited JSON (sandbox/wire/ndjson.c): lines split across reads at every offset,
 * CRLF, blank lines, the line-length limit, invalid JSON named by its line, cut streams. */
#include <string.h>

#include "sandbox/wire/ndjson.h"
#include "sbx/json.h"
#include "tap.h"

struct seen {
    struct sbx_buf log;
    int stop_at; /* fail from the callback at this line (0: never) */
};

static int on_value(json_t *v, size_t line, void *ud, struct sbx_error *err)
{
    struct seen *s = ud;
    if (s->stop_at && (size_t)s->stop_at == line)
        return sbx_error_set(err, SBX_E_CANCELLED, 0, "stop at %zu", line);
    char *text = sbx_json_dumps(v, SBX_JSON_COMPACT | SBX_JSON_SORTED);
    int rc = sbx_buf_addf(&s->log, err, "%zu:%s|", line, text);
    free(text);
    return rc;
}

/* Feed text in pieces of step bytes, then finish; returns the rc, log in s. */
static int run(const char *text, size_t len, size_t step, size_t max_line, struct seen *s,
               struct sbx_error *err)
{
    struct sbx__ndjson d;
    sbx__ndjson_init(&d, max_line, 8, on_value, s);
    sbx_buf_reset(&s->log);
    int rc = 0;
    for (size_t off = 0; off < len && rc == 0; off += step)
        rc = sbx__ndjson_feed(&d, text + off, len - off < step ? len - off : step, err);
    if (rc == 0)
        rc = sbx__ndjson_finish(&d, err);
    sbx__ndjson_release(&d);
    return rc;
}

static void test_split_everywhere(void)
{
    static const char text[] = "{\"status\":\"pulling\"}\r\n"
                               "\n"
                               "  \t\r\n"
                               "[1, 2,\r3]\n"
                               "\"x\\ny\"\r\n"
                               "42\n";
    const char *want = "1:{\"status\":\"pulling\"}|4:[1,2,3]|5:\"x\\ny\"|6:42|";
    struct seen s = {0};
    struct sbx_error err = SBX_ERROR_INIT;
    sbx_buf_init(&s.log, 4096);
    size_t bad = 0;
    for (size_t step = 1; step <= sizeof(text) - 1; step++) {
        int rc = run(text, sizeof(text) - 1, step, 64, &s, &err);
        if ((rc != 0 || strcmp(s.log.data, want) != 0) && bad++ < 3)
            printf("# step %zu: rc %d %s %s\n", step, rc, s.log.data, err.msg);
    }
    CHECK_EQ_INT(bad, 0);
    sbx_buf_release(&s.log);
}

static void test_errors(void)
{
    struct seen s = {0};
    struct sbx_error err = SBX_ERROR_INIT;
    sbx_buf_init(&s.log, 4096);
#define RUN(lit, max) run(lit, sizeof(lit) - 1, 1, max, &s, &err)
    CHECK_ERR(RUN("{}\n{\"a\":}\n{}\n", 64), SBX_E_PARSE, &err, "json stream line 2");
    CHECK_EQ_STR(s.log.data, "1:{}|");
    CHECK_ERR(RUN("1 2\n", 64), SBX_E_PARSE, &err, "line 1");
    CHECK_ERR(RUN("\"a\0b\"\n", 64), SBX_E_PARSE, &err, "line 1");
    CHECK_ERR(RUN("[[[[[[[[[[1]]]]]]]]]]\n", 64), SBX_E_TOOBIG, &err, "line 1");
    /* The limit: a line of exactly max bytes (CR included) is fine, one more is not. */
    CHECK_OK(RUN("\"0123456\"\r\n", 10), &err);
    CHECK_ERR(RUN("\"01234567\"\r\n", 10), SBX_E_TOOBIG, &err,
              "json stream line 1 is longer than 10 bytes");
    CHECK_ERR(RUN("1\n2\n\"0123456789\"", 10), SBX_E_TOOBIG, &err, "line 3 is longer");
    /* A last line without its LF is a cut stream; trailing blanks are not. */
    CHECK_ERR(RUN("{}\n{\"a\":1}", 64), SBX_E_PARSE, &err, "ended in the middle of line 2");
    CHECK_OK(RUN("{}\n  ", 64), &err);
    CHECK_OK(RUN("", 64), &err);
    /* The callback's error stops it, and the decoder stays failed. */
    s.stop_at = 2;
    CHECK_ERR(RUN("1\n2\n3\n", 64), SBX_E_CANCELLED, &err, "stop at 2");
    CHECK_EQ_STR(s.log.data, "1:1|");
    s.stop_at = 0;
    struct sbx__ndjson d;
    sbx__ndjson_init(&d, 16, 0, on_value, &s);
    CHECK_ERR(sbx__ndjson_feed(&d, "x\n", 2, &err), SBX_E_PARSE, &err, NULL);
    CHECK_ERR(sbx__ndjson_feed(&d, "1\n", 2, &err), SBX_E_INVAL, &err, "already failed");
    CHECK_ERR(sbx__ndjson_finish(&d, &err), SBX_E_INVAL, &err, "already failed");
    sbx__ndjson_release(&d);
#undef RUN
    sbx_buf_release(&s.log);
}

int main(void)
{
    TAP_START();
    TAP_RUN(test_split_everywhere);
    TAP_RUN(test_errors);
    return TAP_DONE();
}
