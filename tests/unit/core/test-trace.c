#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tap.h"
#include "sbx/json.h"
#include "sbx/time.h"
#include "sbx/trace.h"

static void test_traceparent(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    uint8_t tid[16], pid[8], fl = 0;
    CHECK_OK(sbx_traceparent_parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", tid,
                                   pid, &fl, &err),
             &err);
    char hex[33];
    sbx_trace_hex(tid, 16, hex);
    CHECK_EQ_STR(hex, "4bf92f3577b34da6a3ce929d0e0e4736");
    sbx_trace_hex(pid, 8, hex);
    CHECK_EQ_STR(hex, "00f067aa0ba902b7");
    CHECK_EQ_INT(fl, 1);
    static const struct {
        const char *in, *why;
    } bad[] = {
            {"", "55 characters"},
            {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0", "55 characters"},
            {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-011", "55 characters"},
            {"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", "lowercase"},
            {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902bg-01", "lowercase"},
            {"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "separated"},
            {"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "version 00"},
            {"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "version 00"},
            {"00-00000000000000000000000000000000-00f067aa0ba902b7-01", "trace id is all zero"},
            {"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", "parent id is all zero"},
            {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-\x1b]", "lowercase"},
    };
    for (size_t i = 0; i < SBX_ARRAY_LEN(bad); i++) {
        CHECK_ERR(sbx_traceparent_parse(bad[i].in, tid, pid, &fl, &err), SBX_E_INVAL, &err,
                  bad[i].why);
        CHECK_CONTAINS(err.msg, "bad traceparent '");
        CHECK(!strchr(err.msg, '\x1b'));
    }
}

static void test_random_ids(void)
{
    uint8_t a[16], b[16];
    sbx_trace_random_id(a, 16);
    sbx_trace_random_id(b, 16);
    CHECK(memcmp(a, b, 16) != 0);
    uint8_t one[1];
    for (int i = 0; i < 2000; i++) {
        sbx_trace_random_id(one, 1);
        if (!one[0]) {
            CHECK(0);
            break;
        }
    }
}

/* An exporter that keeps copies of what it is handed. */
struct capture {
    pthread_mutex_t mu;
    json_t *spans;
    int block_ms; /* each batch waits this long first */
    int closed;
};

static int cap_export(void *data, const struct sbx_span_data *const *spans, size_t n)
{
    struct capture *c = data;
    if (c->block_ms)
        sbx_sleep_ms(c->block_ms);
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < n; i++)
        json_array_append_new(c->spans, sbx_span_data_json(spans[i]));
    pthread_mutex_unlock(&c->mu);
    return 0;
}

static void cap_close(void *data)
{
    struct capture *c = data;
    c->closed = 1;
}

static const json_t *by_name(const json_t *spans, const char *name)
{
    size_t i;
    json_t *s;
    json_array_foreach(spans, i, s)
    {
        if (strcmp(json_string_value(json_object_get(s, "name")), name) == 0)
            return s;
    }
    return NULL;
}

static const char *str(const json_t *o, const char *k)
{
    const char *v = json_string_value(json_object_get(o, k));
    return v ? v : "";
}

static void test_tree(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct capture cap = {.spans = json_array()};
    pthread_mutex_init(&cap.mu, NULL);
    struct sbx_strv secrets;
    sbx_strv_init(&secrets);
    sbx_strv_push(&secrets, "hunter2-secret");
    struct sbx_trace_options o = {.traceparent =
                                          "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                                  .content = 1,
                                  .content_max = 20,
                                  .secrets = &secrets};
    struct sbx_trace *t = NULL;
    CHECK_OK(sbx_trace_new(&o, &t, &err), &err);
    sbx_strv_release(&secrets);
    struct sbx_trace_exporter ex = {
            .name = "cap", .export_batch = cap_export, .close = cap_close, .data = &cap};
    CHECK_OK(sbx_trace_add_exporter(t, &ex, &err), &err);

    struct sbx_span *run = sbx_trace_root(t, "run");
    CHECK(sbx_trace_current() == NULL);
    CHECK(sbx_span_start(NULL, "nothing", SBX_SPAN_INTERNAL) == NULL);
    struct sbx_span *prev = sbx_trace_set_current(run);
    CHECK(prev == NULL);
    struct sbx_span *model = sbx_span_start(sbx_trace_current(), "model", SBX_SPAN_CLIENT);
    char tp[SBX_TRACEPARENT_LEN];
    sbx_span_traceparent(model, tp);
    CHECK_EQ_INT(strlen(tp), 55);
    CHECK(strncmp(tp, "00-4bf92f3577b34da6a3ce929d0e0e4736-", 36) == 0);
    sbx_span_set_int(model, "gen_ai.usage.input_tokens", 12);
    sbx_span_set_str(model, "note", "key hunter2-secret here");
    sbx_span_set_content(model, "prompt", "0123456789abcdefghijklmnop", 26);
    sbx_span_set_content(model, "cut", "0123456789hunter2-secret", 24);
    sbx_span_set_status(model, 0, "boom");
    sbx_span_end(model);
    sbx_span_set_bool(run, "done", 1);
    sbx_trace_set_current(NULL);
    sbx_span_end(run);
    char *report = (char *)"x";
    sbx_trace_shutdown(t, &report);
    CHECK(report == NULL);
    CHECK(cap.closed);
    sbx_trace_free(t);

    CHECK_EQ_INT(json_array_size(cap.spans), 2);
    const json_t *r = by_name(cap.spans, "run"), *m = by_name(cap.spans, "model");
    CHECK(r && m);
    if (r && m) {
        CHECK_EQ_STR(str(r, "parent_span_id"), "00f067aa0ba902b7");
        CHECK_EQ_STR(str(m, "parent_span_id"), str(r, "span_id"));
        CHECK_EQ_STR(str(m, "trace_id"), "4bf92f3577b34da6a3ce929d0e0e4736");
        CHECK_EQ_STR(str(m, "kind"), "client");
        CHECK_EQ_STR(str(m, "status"), "error");
        CHECK_EQ_STR(str(m, "status_message"), "boom");
        CHECK_EQ_STR(str(r, "status"), "unset");
        const json_t *a = json_object_get(m, "attributes");
        CHECK_EQ_INT(json_integer_value(json_object_get(a, "gen_ai.usage.input_tokens")), 12);
        CHECK_EQ_STR(str(a, "note"), "key [redacted] here");
        CHECK_EQ_STR(str(a, "prompt"), "0123456789abcdefghij\xe2\x80\xa6[truncated]");
        /* The bound cuts the secret in half: its prefix is not kept either. */
        CHECK_EQ_STR(str(a, "cut"), "0123456789\xe2\x80\xa6[truncated]");
        CHECK(json_integer_value(json_object_get(m, "end_unix_nano")) >=
              json_integer_value(json_object_get(m, "start_unix_nano")));
        CHECK_EQ_STR(sbx_json_typename(json_object_get(a, "gen_ai.usage.input_tokens")), "integer");
    }
    json_decref(cap.spans);
    pthread_mutex_destroy(&cap.mu);
}

static void test_no_content(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct capture cap = {.spans = json_array()};
    pthread_mutex_init(&cap.mu, NULL);
    struct sbx_trace *t = NULL;
    CHECK_OK(sbx_trace_new(NULL, &t, &err), &err);
    struct sbx_trace_exporter ex = {.name = "cap", .export_batch = cap_export, .data = &cap};
    CHECK_OK(sbx_trace_add_exporter(t, &ex, &err), &err);
    struct sbx_span *run = sbx_trace_root(t, "run");
    sbx_span_set_content(run, "prompt", "secret prompt", 13);
    sbx_span_end(run);
    sbx_trace_free(t);
    CHECK_EQ_INT(json_array_size(cap.spans), 1);
    const json_t *r = json_array_get(cap.spans, 0);
    CHECK(json_is_null(json_object_get(r, "parent_span_id")));
    CHECK(!json_object_get(json_object_get(r, "attributes"), "prompt"));
    json_decref(cap.spans);
    pthread_mutex_destroy(&cap.mu);
}

/* A slow exporter never blocks span ends: past the queue bound spans are dropped and counted,
 * and at shutdown what is left past drain_ms is dropped too. */
static void test_overflow(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct capture cap = {.spans = json_array(), .block_ms = 300};
    pthread_mutex_init(&cap.mu, NULL);
    struct sbx_trace *t = NULL;
    CHECK_OK(sbx_trace_new(NULL, &t, &err), &err);
    struct sbx_trace_exporter ex = {.name = "slow",
                                    .export_batch = cap_export,
                                    .data = &cap,
                                    .queue_max = 8,
                                    .batch_max = 2,
                                    .drain_ms = 1};
    CHECK_OK(sbx_trace_add_exporter(t, &ex, &err), &err);
    struct sbx_span *run = sbx_trace_root(t, "run");
    for (int i = 0; i < 50; i++)
        sbx_span_end(sbx_span_start(run, "child", SBX_SPAN_INTERNAL));
    sbx_span_end(run);
    char *report = NULL;
    sbx_trace_shutdown(t, &report);
    CHECK(report && strncmp(report, "slow=", 5) == 0);
    long dropped = report ? strtol(report + 5, NULL, 10) : 0;
    CHECK_EQ_INT(dropped + (long)json_array_size(cap.spans), 51);
    CHECK(dropped >= 51 - 8 - 2);
    free(report);
    sbx_trace_free(t);
    json_decref(cap.spans);
    pthread_mutex_destroy(&cap.mu);
}

/* KeyValue{key = 1: k, value = 2: AnyValue{string_value = 1: v}} as field 1 (short strings:
 * every length fits one byte). */
static void kv(struct sbx_buf *b, const char *k, const char *v)
{
    size_t lk = strlen(k), lv = strlen(v);
    uint8_t h[] = {0x0a, (uint8_t)(2 + lk + 2 + 2 + lv), 0x0a, (uint8_t)lk};
    uint8_t h2[] = {0x12, (uint8_t)(2 + lv), 0x0a, (uint8_t)lv};
    if (sbx_buf_add(b, h, sizeof(h), NULL) < 0 || sbx_buf_add(b, k, lk, NULL) < 0 ||
        sbx_buf_add(b, h2, sizeof(h2), NULL) < 0 || sbx_buf_add(b, v, lv, NULL) < 0)
        CHECK(0);
}

/* A length-delimited field (tag byte given) of n < 16384 bytes: the length as a one- or
 * two-byte varint. */
static void wrap(struct sbx_buf *b, uint8_t tagbyte, const void *p, size_t n)
{
    uint8_t h[3] = {tagbyte, (uint8_t)(n & 0x7f), 0};
    size_t hl = 2;
    if (n >= 128) {
        h[1] |= 0x80;
        h[2] = (uint8_t)(n >> 7);
        hl = 3;
    }
    if (sbx_buf_add(b, h, hl, NULL) < 0 || sbx_buf_add(b, p, n, NULL) < 0)
        CHECK(0);
}

/* The request for one span with fixed ids, derived by hand from the .proto field numbers. */
static void test_otlp_bytes(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_span_data d = {.name = (char *)"run",
                              .kind = SBX_SPAN_INTERNAL,
                              .start_ns = 1,
                              .end_ns = 2,
                              .status = SBX_SPAN_ERROR,
                              .status_message = (char *)"x",
                              .attrs = json_pack("{s:i}", "n", 300)};
    memset(d.trace_id, 0x11, 16);
    memset(d.span_id, 0x22, 8);
    memset(d.parent_id, 0x33, 8);
    const struct sbx_span_data *spans[] = {&d};
    struct sbx_buf b;
    sbx_buf_init(&b, 4096);
    CHECK_OK(sbx_trace_otlp_encode(spans, 1, "9", &b, &err), &err);
    /* The resource (ResourceSpans field 1): five KeyValue attributes (field 1 each). */
    struct sbx_buf res;
    sbx_buf_init(&res, 4096);
    kv(&res, "service.name", "sbx");
    kv(&res, "service.version", "9");
    kv(&res, "telemetry.sdk.language", "c");
    kv(&res, "telemetry.sdk.name", "sbx");
    kv(&res, "telemetry.sdk.version", "9");
    static const uint8_t span[] = {
            0x0a, 0x10, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11,
            0x11, 0x11, 0x11, 0x11,                                     /* 1 trace_id */
            0x12, 0x08, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, /* 2 span_id */
            0x22, 0x08, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, /* 4 parent_span_id */
            0x2a, 0x03, 'r', 'u', 'n',                                  /* 5 name */
            0x30, 0x01,                                                 /* 6 kind INTERNAL */
            0x39, 1, 0, 0, 0, 0, 0, 0, 0,                               /* 7 start fixed64 */
            0x41, 2, 0, 0, 0, 0, 0, 0, 0,                               /* 8 end fixed64 */
            /* 9 KeyValue{key "n", value AnyValue{int_value 300 = ac 02}} */
            0x4a, 0x08, 0x0a, 0x01, 'n', 0x12, 0x03, 0x18, 0xac, 0x02,
            /* 15 Status{message "x", code ERROR} */
            0x7a, 0x05, 0x12, 0x01, 'x', 0x18, 0x02};
    static const uint8_t scope[] = {0x0a, 0x08, 0x0a, 0x03, 's', 'b', 'x', 0x12, 0x01, '9'};
    struct sbx_buf ss, rs, want;
    sbx_buf_init(&ss, 4096);
    sbx_buf_init(&rs, 4096);
    sbx_buf_init(&want, 4096);
    /* ScopeSpans{scope = 1, spans = 2} inside ResourceSpans{resource = 1, scope_spans = 2}
     * inside ExportTraceServiceRequest{resource_spans = 1}. */
    CHECK_OK(sbx_buf_add(&ss, scope, sizeof(scope), &err), &err);
    wrap(&ss, 0x12, span, sizeof(span));
    wrap(&rs, 0x0a, res.data, res.len);
    wrap(&rs, 0x12, ss.data, ss.len);
    wrap(&want, 0x0a, rs.data, rs.len);
    CHECK_EQ_MEM(b.data, b.len, want.data, want.len);
    sbx_buf_release(&b);
    sbx_buf_release(&res);
    sbx_buf_release(&want);
    sbx_buf_release(&ss);
    sbx_buf_release(&rs);
    json_decref(d.attrs);
}

int main(void)
{
    TAP_START();
    TAP_RUN(test_traceparent);
    TAP_RUN(test_random_ids);
    TAP_RUN(test_tree);
    TAP_RUN(test_no_content);
    TAP_RUN(test_overflow);
    TAP_RUN(test_otlp_bytes);
    return TAP_DONE();
}
