/* Connect envelopes and errors (sandbox/wire/connect.c): a stream split at every offset, the
 * end-of-stream message with and without an error, unary error bodies, flags, limits, cuts. */
#include <stdlib.h>
#include <string.h>

#include "sandbox/wire/connect.h"
#include "tap.h"

/* Decode s in pieces of step bytes; log "M<len>:<data>|" and "END:<data>|", or "E:<msg>". */
static void decode_log(const struct sbx_buf *s, size_t step, size_t max, struct sbx_buf *log)
{
    struct sbx__connect_dec d;
    struct sbx_error err = SBX_ERROR_INIT;
    sbx__connect_init(&d, max);
    sbx_buf_reset(log);
    const uint8_t *p = (const uint8_t *)s->data;
    int rc = 0;
    for (size_t off = 0; off < s->len && rc == 0;) {
        size_t k = s->len - off < step ? s->len - off : step;
        for (size_t used = 0; used < k;) {
            struct sbx__connect_msg m;
            long u = sbx__connect_feed(&d, p + off + used, k - used, &m, &err);
            if (u <= 0) {
                (void)sbx_buf_addf(log, NULL, "E:%s", err.msg);
                rc = -1;
                break;
            }
            used += (size_t)u;
            if (m.kind != SBX__CONNECT_NONE)
                (void)sbx_buf_addf(log, NULL, "%s%zu:%.*s|",
                                   m.kind == SBX__CONNECT_END ? "END" : "M", m.len, (int)m.len,
                                   (const char *)m.data);
        }
        off += k;
    }
    if (rc == 0 && sbx__connect_finish(&d, &err) < 0)
        (void)sbx_buf_addf(log, NULL, "F:%s", err.msg);
    sbx__connect_release(&d);
}

static void env(struct sbx_buf *s, int flags, const char *p)
{
    struct sbx_error err = SBX_ERROR_INIT;
    if (sbx__connect_encode(s, flags, p, strlen(p), &err) < 0)
        printf("# encode: %s\n", err.msg);
}

static void test_split_everywhere(void)
{
    struct sbx_buf s, log;
    sbx_buf_init(&s, 4096);
    sbx_buf_init(&log, 4096);
    env(&s, 0, "{\"a\":1}");
    env(&s, 0, "");
    env(&s, 0, "{\"b\":[2]}");
    env(&s, SBX__CONNECT_END_STREAM, "{}");
    CHECK_EQ_MEM(s.data, 5, "\x00\x00\x00\x00\x07", 5);
    const char *want = "M7:{\"a\":1}|M0:|M9:{\"b\":[2]}|END2:{}|";
    size_t bad = 0;
    for (size_t step = 1; step <= s.len; step++) {
        decode_log(&s, step, 0, &log);
        if (strcmp(log.data, want) != 0 && bad++ < 3)
            printf("# step %zu: %s\n", step, log.data);
    }
    CHECK_EQ_INT(bad, 0);
    sbx_buf_release(&s);
    sbx_buf_release(&log);
}

static void expect(const struct sbx_buf *s, size_t max, const char *needle, int line)
{
    struct sbx_buf log;
    sbx_buf_init(&log, 4096);
    decode_log(s, s->len ? s->len : 1, max, &log);
    if (!tap__result(strstr(log.data, needle) != NULL, __FILE__, line, needle))
        printf("#   got: %s\n", log.data);
    sbx_buf_release(&log);
}

static void raw(struct sbx_buf *s, const char *p, size_t n)
{
    if (sbx_buf_add(s, p, n, NULL) < 0)
        abort();
}

static void test_hostile(void)
{
    struct sbx_buf s;
    sbx_buf_init(&s, 4096);
    /* Compression was not offered; unknown flag bits are not the protocol. */
    raw(&s, "\x01\x00\x00\x00\x01x", 6);
    expect(&s, 0, "E:connect envelope is compressed", __LINE__);
    sbx_buf_reset(&s);
    raw(&s, "\x80\x00\x00\x00\x01x", 6);
    expect(&s, 0, "E:connect envelope has unknown flags 0x80", __LINE__);
    /* A length over the limit is refused from the prefix. */
    sbx_buf_reset(&s);
    raw(&s, "\x00\xff\xff\xff\xff", 5);
    expect(&s, 0, "E:connect message of 4294967295 bytes is over the limit of 4194304", __LINE__);
    sbx_buf_reset(&s);
    env(&s, 0, "0123456789");
    expect(&s, 9, "over the limit of 9", __LINE__);
    expect(&s, 10, "M10:0123456789|F:connect stream ended without", __LINE__);
    /* Cut inside the prefix, inside the payload; more after the end. */
    sbx_buf_reset(&s);
    raw(&s, "\x00\x00\x00", 3);
    expect(&s, 0, "F:connect stream was cut inside an envelope", __LINE__);
    sbx_buf_reset(&s);
    raw(&s, "\x00\x00\x00\x00\x05\x61\x62\x63", 8); /* 5 bytes announced, "abc" sent */
    expect(&s, 0, "F:connect stream was cut inside an envelope", __LINE__);
    sbx_buf_reset(&s);
    env(&s, SBX__CONNECT_END_STREAM, "{}");
    env(&s, 0, "{}");
    expect(&s, 0, "END2:{}|E:connect stream continues after its end-of-stream message", __LINE__);
    struct sbx_error err = SBX_ERROR_INIT;
    CHECK_ERR(sbx__connect_encode(&s, SBX__CONNECT_COMPRESSED, "", 0, &err), SBX_E_INVAL, &err,
              "flags 0x01");
    sbx_buf_release(&s);
}

static int end(const char *json, json_t **md, struct sbx_error *err)
{
    return sbx__connect_end((const uint8_t *)json, strlen(json), md, err);
}

static void test_end_stream(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *md = NULL;
    CHECK_OK(end("{}", &md, &err), &err);
    CHECK(md == NULL);
    CHECK_OK(end("{\"metadata\":{\"x-trace\":[\"a\",\"b\"]}}", &md, &err), &err);
    CHECK(json_is_array(json_object_get(md, "x-trace")));
    json_decref(md);
    md = NULL;
    CHECK_OK(end("{\"error\":null}", NULL, &err), &err);
    CHECK_ERR(end("{\"error\":{\"code\":\"not_found\",\"message\":\"sandbox \\\"s1\\\" is "
                  "gone\",\"details\":[{\"type\":\"x\",\"value\":\"AA\"}]},\"metadata\":{}}",
                  &md, &err),
              SBX_E_NOTFOUND, &err, "not_found: sandbox \"s1\" is gone");
    CHECK(md == NULL);
    CHECK_ERR(
            end("{\"error\":{\"code\":\"unauthenticated\",\"message\":\"bad key\\n\"}}", &md, &err),
            SBX_E_PERM, &err, "unauthenticated: bad key?");
    CHECK_ERR(end("{\"error\":{\"code\":\"made_up\"}}", &md, &err), SBX_E_API, &err, "unknown");
    CHECK_ERR(end("{\"error\":{}}", &md, &err), SBX_E_API, &err, "unknown");
    CHECK_ERR(end("{\"error\":{\"code\":\"resource_exhausted\"}}", &md, &err), SBX_E_TOOBIG, &err,
              "resource_exhausted");
    CHECK_ERR(end("{\"error\":{\"code\":5}}", &md, &err), SBX_E_PARSE, &err, "protocol's shape");
    CHECK_ERR(end("{\"error\":\"boom\"}", &md, &err), SBX_E_PARSE, &err, "protocol's shape");
    CHECK_ERR(end("{\"metadata\":{\"k\":\"v\"}}", &md, &err), SBX_E_PARSE, &err,
              "lists of strings");
    CHECK_ERR(end("{\"metadata\":{\"k\":[1]}}", &md, &err), SBX_E_PARSE, &err, "lists of strings");
    CHECK_ERR(end("[]", &md, &err), SBX_E_PARSE, &err, "protocol's shape");
    CHECK_ERR(end("{", &md, &err), SBX_E_PARSE, &err, "end-of-stream message");
    CHECK(md == NULL);
}

static int unary(const char *body, int status, struct sbx_error *err)
{
    return sbx__connect_error((const uint8_t *)body, strlen(body), status, err);
}

static void test_unary(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    CHECK_ERR(unary("{\"code\":\"unauthenticated\",\"message\":\"missing api key\"}", 401, &err),
              SBX_E_PERM, &err, "unauthenticated: missing api key");
    CHECK_ERR(unary("{\"code\":\"permission_denied\"}", 403, &err), SBX_E_PERM, &err,
              "permission_denied");
    CHECK_ERR(unary("{\"code\":\"deadline_exceeded\",\"message\":\"slow\"}", 504, &err),
              SBX_E_TIMEOUT, &err, "deadline_exceeded: slow");
    CHECK_ERR(unary("{\"code\":\"unimplemented\"}", 404, &err), SBX_E_UNSUPPORTED, &err, NULL);
    CHECK_ERR(unary("{\"code\":\"invalid_argument\"}", 400, &err), SBX_E_INVAL, &err, NULL);
    CHECK_ERR(unary("{\"code\":\"already_exists\"}", 409, &err), SBX_E_EXISTS, &err, NULL);
    CHECK_ERR(unary("{\"code\":\"canceled\"}", 499, &err), SBX_E_CANCELLED, &err, NULL);
    CHECK_ERR(unary("{\"code\":\"internal\",\"message\":\"oops\"}", 500, &err), SBX_E_API, &err,
              "internal: oops");
    /* No code: the HTTP status implies one. */
    CHECK_ERR(unary("{\"message\":\"who are you\"}", 401, &err), SBX_E_PERM, &err,
              "unauthenticated: who are you");
    CHECK_ERR(unary("{}", 503, &err), SBX_E_API, &err, "unavailable");
    /* Not a connect error at all (a proxy's HTML page). */
    CHECK_ERR(unary("<html>bad gateway</html>", 502, &err), SBX_E_API, &err,
              "unavailable: HTTP 502 with a body that is not a connect error");
    CHECK_ERR(unary("{\"code\":[]}", 500, &err), SBX_E_API, &err, "HTTP 500 with a body");
    CHECK_ERR(unary("", 0, &err), SBX_E_PARSE, &err, "does not parse");
}

int main(void)
{
    TAP_START();
    TAP_RUN(test_split_everywhere);
    TAP_RUN(test_hostile);
    TAP_RUN(test_end_stream);
    TAP_RUN(test_unary);
    return TAP_DONE();
}
