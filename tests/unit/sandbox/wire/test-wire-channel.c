/* The Kubernetes channel protocols (sandbox/wire/channel.c): every version's messages both
 * ways, the status channel's Status objects, resize, v5's close signal, base64, port-forward
 * channels with their port prefixes, and the hostile messages each refuses. */
#include <string.h>

#include "sandbox/wire/channel.h"
#include "sandbox/wire/ws.h"
#include "tap.h"

static void test_versions(void)
{
    CHECK_EQ_INT(sbx__ch_version_of("v5.channel.k8s.io"), SBX__CH_V5);
    CHECK_EQ_INT(sbx__ch_version_of("v4.channel.k8s.io"), SBX__CH_V4);
    CHECK_EQ_INT(sbx__ch_version_of("channel.k8s.io"), SBX__CH_V1);
    CHECK_EQ_INT(sbx__ch_version_of("base64.channel.k8s.io"), SBX__CH_BASE64);
    CHECK_EQ_INT(sbx__ch_version_of("v6.channel.k8s.io"), 0);
    CHECK_EQ_INT(sbx__ch_version_of(NULL), 0);
    CHECK_EQ_STR(sbx__ch_protocol(SBX__CH_V3), "v3.channel.k8s.io");
    CHECK(sbx__ch_protocol(0) == NULL && sbx__ch_protocol(7) == NULL);
    CHECK_EQ_STR(sbx__ch_exec_protocols[0], "v5.channel.k8s.io");
    CHECK_EQ_STR(sbx__ch_exec_protocols[1], "v4.channel.k8s.io");
    CHECK(sbx__ch_exec_protocols[2] == NULL);
    CHECK_EQ_INT(sbx__ch_opcode(SBX__CH_BASE64), SBX__WS_TEXT);
    CHECK_EQ_INT(sbx__ch_opcode(SBX__CH_V5), SBX__WS_BINARY);
}

/* Encode on one side, decode on the other, for every version and channel. */
static void test_round_trip(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_buf msg, scratch;
    sbx_buf_init(&msg, 4096);
    sbx_buf_init(&scratch, 4096);
    size_t bad = 0;
    for (int v = SBX__CH_V1; v <= SBX__CH_BASE64; v++) {
        for (int ch = 0; ch <= 4; ch++) {
            int exists = ch <= 3 || (v >= SBX__CH_V3 && v <= SBX__CH_V5);
            sbx_buf_reset(&msg);
            int rc = sbx__ch_encode(v, ch, "data\0\xff", 6, &msg, &err);
            if (!exists) {
                bad += rc != -SBX_E_INVAL;
                continue;
            }
            struct sbx__ch_frame f;
            rc = rc ? rc
                    : sbx__ch_decode(v, sbx__ch_opcode(v), (const uint8_t *)msg.data, msg.len,
                                     &scratch, &f, &err);
            if (rc || f.channel != ch || f.len != 6 || memcmp(f.data, "data\0\xff", 6) != 0) {
                printf("# version %d channel %d: rc %d %s\n", v, ch, rc, err.msg);
                bad++;
            }
        }
    }
    CHECK_EQ_INT(bad, 0);
    /* The wire forms. */
    sbx_buf_reset(&msg);
    CHECK_OK(sbx__ch_encode(SBX__CH_V5, SBX__CH_STDIN, "ls\n", 3, &msg, &err), &err);
    CHECK_EQ_MEM(msg.data, msg.len, "\0ls\n", 4);
    sbx_buf_reset(&msg);
    CHECK_OK(sbx__ch_encode(SBX__CH_BASE64, SBX__CH_STDOUT, "hi", 2, &msg, &err), &err);
    CHECK_EQ_STR(msg.data, "1aGk=");
    sbx_buf_release(&msg);
    sbx_buf_release(&scratch);
}

static void test_decode_hostile(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_buf scratch;
    struct sbx__ch_frame f;
    sbx_buf_init(&scratch, 8);
#define DEC(v, op, lit) \
    sbx__ch_decode(v, op, (const uint8_t *)(lit), sizeof(lit) - 1, &scratch, &f, &err)
    /* An empty message carries nothing. */
    CHECK_OK(DEC(SBX__CH_V5, SBX__WS_BINARY, ""), &err);
    CHECK_EQ_INT(f.channel, SBX__CH_NONE);
    /* A channel byte alone is an empty piece of that channel. */
    CHECK_OK(DEC(SBX__CH_V4, SBX__WS_BINARY, "\x01"), &err);
    CHECK(f.channel == 1 && f.len == 0);
    CHECK_ERR(DEC(SBX__CH_V5, SBX__WS_BINARY, "\x05x"), SBX_E_PARSE, &err, "unknown channel 5");
    CHECK_ERR(DEC(SBX__CH_V2, SBX__WS_BINARY, "\x04x"), SBX_E_PARSE, &err, "unknown channel 4");
    CHECK_ERR(DEC(SBX__CH_V4, SBX__WS_BINARY, "\xff\x00"), SBX_E_PARSE, &err,
              "unknown channel 255");
    CHECK_ERR(DEC(SBX__CH_V5, SBX__WS_TEXT, "\x01x"), SBX_E_PARSE, &err, "sent a text message");
    CHECK_ERR(DEC(SBX__CH_BASE64, SBX__WS_BINARY, "1aGk="), SBX_E_PARSE, &err, "binary message");
    CHECK_ERR(DEC(SBX__CH_BASE64, SBX__WS_TEXT, "\x01x"), SBX_E_PARSE, &err, "not a channel digit");
    CHECK_ERR(DEC(SBX__CH_BASE64, SBX__WS_TEXT, "4aGk="), SBX_E_PARSE, &err, "unknown channel 4");
    CHECK_ERR(DEC(SBX__CH_BASE64, SBX__WS_TEXT, "1a*k="), SBX_E_PARSE, &err, "channel 1");
    /* The scratch buffer's limit bounds a base64 message. */
    CHECK_ERR(DEC(SBX__CH_BASE64, SBX__WS_TEXT, "1YWFhYWFhYWFhYWFh"), SBX_E_TOOBIG, &err, NULL);
    CHECK_ERR(DEC(9, SBX__WS_BINARY, "\x01"), SBX_E_INVAL, &err, "version 9");
    /* v5's close signal. */
    CHECK_OK(DEC(SBX__CH_V5, SBX__WS_BINARY, "\xff\x00"), &err);
    CHECK(f.channel == SBX__CH_CLOSE && f.closed == SBX__CH_STDIN);
    CHECK_ERR(DEC(SBX__CH_V5, SBX__WS_BINARY, "\xff\x00\x00"), SBX_E_PARSE, &err, "3 bytes, not 2");
    CHECK_ERR(DEC(SBX__CH_V5, SBX__WS_BINARY, "\xff"), SBX_E_PARSE, &err, "1 bytes, not 2");
    CHECK_ERR(DEC(SBX__CH_V5, SBX__WS_BINARY, "\xff\x09"), SBX_E_PARSE, &err,
              "names unknown channel 9");
#undef DEC
    struct sbx_buf m;
    sbx_buf_init(&m, 16);
    CHECK_OK(sbx__ch_encode_close(SBX__CH_V5, SBX__CH_STDIN, &m, &err), &err);
    CHECK_EQ_MEM(m.data, m.len, "\xff\x00", 2);
    CHECK_ERR(sbx__ch_encode_close(SBX__CH_V4, SBX__CH_STDIN, &m, &err), SBX_E_UNSUPPORTED, &err,
              "'v4.channel.k8s.io' has no close signal");
    CHECK_ERR(sbx__ch_encode_close(SBX__CH_V5, 7, &m, &err), SBX_E_INVAL, &err, "no channel 7");
    sbx_buf_release(&m);
    sbx_buf_release(&scratch);
}

static int status(int v, const char *json, int *code, struct sbx_error *err)
{
    return sbx__ch_status_decode(v, (const uint8_t *)json, strlen(json), code, err);
}

static void test_status(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    int code = -7;
    CHECK_OK(status(SBX__CH_V5, "{\"metadata\":{},\"status\":\"Success\"}", &code, &err), &err);
    CHECK_EQ_INT(code, 0);
    static const char *nonzero =
            "{\"metadata\":{},\"status\":\"Failure\",\"message\":\"command terminated with "
            "non-zero exit code: error executing command [sh -c exit 3], exit code 3\","
            "\"reason\":\"NonZeroExitCode\",\"details\":{\"causes\":[{\"reason\":\"ExitCode\","
            "\"message\":\"3\"}]},\"code\":500}";
    CHECK_OK(status(SBX__CH_V4, nonzero, &code, &err), &err);
    CHECK_EQ_INT(code, 3);
    code = -7;
    CHECK_ERR(status(SBX__CH_V5,
                     "{\"status\":\"Failure\",\"reason\":\"InternalError\",\"message\":\"container "
                     "not found (\\\"sbx\\\")\\u001b[31m\",\"code\":500}",
                     &code, &err),
              SBX_E_API, &err,
              "the server reported a failure (InternalError): container not found (\"sbx\")?[31m");
    CHECK_EQ_INT(code, -7);
    CHECK_ERR(status(SBX__CH_V5, "{\"status\":\"Failure\"}", &code, &err), SBX_E_API, &err,
              "failure: no message");
    CHECK_ERR(status(SBX__CH_V5, "{\"status\":\"Failure\",\"reason\":\"NonZeroExitCode\"}", &code,
                     &err),
              SBX_E_PARSE, &err, "names no exit code");
    static const char *bad_codes[] = {"\"0\"",   "\"-1\"",   "\"3x\"",          "\"\"",
                                      "\"256\"", "\"0255\"", "\"99999999999\"", "3"};
    for (size_t i = 0; i < sizeof(bad_codes) / sizeof(bad_codes[0]); i++) {
        char j[256];
        snprintf(j, sizeof(j),
                 "{\"status\":\"Failure\",\"reason\":\"NonZeroExitCode\",\"details\":{\"causes\":"
                 "[{\"reason\":\"Other\",\"message\":\"1\"},{\"reason\":\"ExitCode\",\"message\":"
                 "%s}]}}",
                 bad_codes[i]);
        CHECK_ERR(status(SBX__CH_V5, j, &code, &err), SBX_E_PARSE, &err,
                  "not a number from 1 to 255");
    }
    CHECK_ERR(status(SBX__CH_V5, "{\"status\":\"Pending\"}", &code, &err), SBX_E_PARSE, &err,
              "unknown status 'Pending'");
    CHECK_ERR(status(SBX__CH_V5, "[]", &code, &err), SBX_E_PARSE, &err, "not an object");
    CHECK_ERR(status(SBX__CH_V5, "{\"status\":", &code, &err), SBX_E_PARSE, &err, "error channel");
    CHECK_ERR(status(SBX__CH_V5, "", &code, &err), SBX_E_PARSE, &err, "no status");
    /* Before v4 the channel holds the error as text; nothing means success. */
    CHECK_OK(status(SBX__CH_V2, "", &code, &err), &err);
    CHECK_EQ_INT(code, 0);
    CHECK_ERR(status(SBX__CH_V3, "exec failed: \x07no shell", &code, &err), SBX_E_API, &err,
              "reported an error: exec failed: ?no shell");
    /* The node daemon's side writes what the client reads back. */
    struct sbx_buf b;
    sbx_buf_init(&b, 4096);
    CHECK_OK(sbx__ch_status_encode(SBX__CH_V5, 0, 0, 0, NULL, &b, &err), &err);
    CHECK_EQ_STR(b.data, "{\"metadata\":{},\"status\":\"Success\"}");
    for (int c = 0; c < 256; c += 17) {
        sbx_buf_reset(&b);
        CHECK_OK(sbx__ch_status_encode(SBX__CH_V4, c, 0, 0, NULL, &b, &err), &err);
        code = -1;
        CHECK_OK(sbx__ch_status_decode(SBX__CH_V4, (const uint8_t *)b.data, b.len, &code, &err),
                 &err);
        CHECK_EQ_INT(code, c);
    }
    sbx_buf_reset(&b);
    CHECK_OK(sbx__ch_status_encode(SBX__CH_V3, 0, 0, 0, NULL, &b, &err), &err);
    CHECK_EQ_INT(b.len, 0);
    CHECK_OK(sbx__ch_status_encode(SBX__CH_V3, 2, 0, 0, "boom", &b, &err), &err);
    CHECK_EQ_STR(b.data, "boom");
    CHECK_ERR(sbx__ch_status_encode(SBX__CH_V5, -1, 0, 0, NULL, &b, &err), SBX_E_INVAL, &err,
              "exit code -1 is not 0-255");
    CHECK_ERR(sbx__ch_status_encode(SBX__CH_V5, 256, 0, 0, NULL, &b, &err), SBX_E_INVAL, &err,
              "exit code 256 is not 0-255");
    CHECK_ERR(sbx__ch_status_encode(SBX__CH_V5, 1, 65, 0, NULL, &b, &err), SBX_E_INVAL, &err,
              "signal 65 is not 0-64");
    sbx_buf_release(&b);
}

static int causes(int v, const char *json, int *sig, int *to, struct sbx_error *err)
{
    return sbx__ch_status_causes(v, (const uint8_t *)json, strlen(json), sig, to, err);
}

/* A signal and a deadline as causes after the exit code, read back; a status without them (a
 * server that does not send them) still gives its exit code and no cause. */
static void test_status_causes(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_buf b;
    sbx_buf_init(&b, 4096);
    int code = -1, sig = -1, to = -1;
    CHECK_OK(sbx__ch_status_encode(SBX__CH_V5, 137, 9, 0, NULL, &b, &err), &err);
    CHECK(strstr(b.data, "{\"reason\":\"ExitCode\",\"message\":\"137\"},{\"reason\":"
                         "\"Signal\",\"message\":\"9\"}]") != NULL);
    CHECK_OK(sbx__ch_status_decode(SBX__CH_V5, (const uint8_t *)b.data, b.len, &code, &err), &err);
    CHECK_EQ_INT(code, 137);
    CHECK_OK(causes(SBX__CH_V5, b.data, &sig, &to, &err), &err);
    CHECK_EQ_INT(sig, 9);
    CHECK_EQ_INT(to, 0);
    /* A deadline's SIGTERM: both causes. */
    sbx_buf_reset(&b);
    CHECK_OK(sbx__ch_status_encode(SBX__CH_V5, 143, 15, 1, NULL, &b, &err), &err);
    CHECK_OK(sbx__ch_status_decode(SBX__CH_V5, (const uint8_t *)b.data, b.len, &code, &err), &err);
    CHECK_EQ_INT(code, 143);
    CHECK_OK(causes(SBX__CH_V5, b.data, &sig, &to, &err), &err);
    CHECK_EQ_INT(sig, 15);
    CHECK_EQ_INT(to, 1);
    /* A command that caught the deadline's signal and exited 0: a success with its cause. */
    sbx_buf_reset(&b);
    CHECK_OK(sbx__ch_status_encode(SBX__CH_V5, 0, 0, 1, NULL, &b, &err), &err);
    CHECK_EQ_STR(b.data, "{\"metadata\":{},\"status\":\"Success\",\"details\":{\"causes\":"
                         "[{\"reason\":\"TimedOut\"}]}}");
    code = -1;
    CHECK_OK(sbx__ch_status_decode(SBX__CH_V5, (const uint8_t *)b.data, b.len, &code, &err), &err);
    CHECK_EQ_INT(code, 0);
    CHECK_OK(causes(SBX__CH_V5, b.data, &sig, &to, &err), &err);
    CHECK_EQ_INT(sig, 0);
    CHECK_EQ_INT(to, 1);
    /* An older node's status: the exit code alone, no cause. */
    sbx_buf_reset(&b);
    CHECK_OK(sbx__ch_status_encode(SBX__CH_V5, 137, 0, 0, NULL, &b, &err), &err);
    CHECK(strstr(b.data, "Signal") == NULL);
    CHECK_OK(causes(SBX__CH_V5, b.data, &sig, &to, &err), &err);
    CHECK_EQ_INT(sig, 0);
    CHECK_EQ_INT(to, 0);
    CHECK_OK(causes(SBX__CH_V5, "{\"status\":\"Success\"}", &sig, &to, &err), &err);
    CHECK_EQ_INT(sig + to, 0);
    /* Before v4 there are no causes: the text is dropped unread. */
    sbx_buf_reset(&b);
    CHECK_OK(sbx__ch_status_encode(SBX__CH_V3, 137, 9, 1, NULL, &b, &err), &err);
    CHECK(strstr(b.data, "Signal") == NULL);
    CHECK_OK(causes(SBX__CH_V3, "anything", &sig, &to, &err), &err);
    CHECK_EQ_INT(sig + to, 0);
    /* A Signal cause without a signal number is refused, and nothing is kept of it. */
    static const char *bad[] = {"\"0\"", "\"65\"", "\"09\"", "\"9x\"", "\"\"", "\"123\"", "9"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char j[256];
        snprintf(j, sizeof(j),
                 "{\"status\":\"Failure\",\"reason\":\"NonZeroExitCode\",\"details\":{\"causes\":"
                 "[{\"reason\":\"TimedOut\"},{\"reason\":\"Signal\",\"message\":%s}]}}",
                 bad[i]);
        sig = to = -1;
        CHECK_ERR(causes(SBX__CH_V5, j, &sig, &to, &err), SBX_E_PARSE, &err,
                  "signal is not a number from 1 to 64");
        CHECK_EQ_INT(sig + to, 0);
    }
    CHECK_ERR(causes(SBX__CH_V5, "{\"status\":", &sig, &to, &err), SBX_E_PARSE, &err,
              "error channel");
    sbx_buf_release(&b);
}

static void test_resize(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_buf b;
    unsigned w = 0, h = 0;
    sbx_buf_init(&b, 64);
    CHECK_OK(sbx__ch_resize_encode(120, 40, &b, &err), &err);
    CHECK_EQ_STR(b.data, "{\"Width\":120,\"Height\":40}");
    CHECK_OK(sbx__ch_resize_decode((const uint8_t *)b.data, b.len, &w, &h, &err), &err);
    CHECK(w == 120 && h == 40);
    CHECK_ERR(sbx__ch_resize_encode(70000, 1, &b, &err), SBX_E_INVAL, &err, "over 65535");
#define RD(lit) sbx__ch_resize_decode((const uint8_t *)(lit), strlen(lit), &w, &h, &err)
    CHECK_ERR(RD("{\"Width\":-1,\"Height\":1}"), SBX_E_PARSE, &err, "Width and Height");
    CHECK_ERR(RD("{\"Width\":65536,\"Height\":1}"), SBX_E_PARSE, &err, "Width and Height");
    CHECK_ERR(RD("{\"Width\":1.5,\"Height\":1}"), SBX_E_PARSE, &err, "Width and Height");
    CHECK_ERR(RD("{\"Width\":1}"), SBX_E_PARSE, &err, "Width and Height");
    CHECK_ERR(RD("{\"Width\":1,"), SBX_E_PARSE, &err, "resize message");
#undef RD
    sbx_buf_release(&b);
}

static void test_portforward(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__pf server, client;
    static const uint16_t ports[] = {8080, 443};
    struct sbx_buf m;
    struct sbx__pf_frame f;
    sbx_buf_init(&m, 256);
    CHECK_OK(sbx__pf_init(&server, ports, 2, 1, &err), &err);
    CHECK_OK(sbx__pf_init(&client, ports, 2, 0, &err), &err);
    /* The server's first message on a channel starts with the port, little-endian. */
    CHECK_OK(sbx__pf_encode(&server, 1, 0, "abc", 3, &m, &err), &err);
    CHECK_EQ_MEM(m.data, m.len,
                 "\x02\xbb\x01"
                 "abc",
                 6);
    CHECK_OK(sbx__pf_decode(&client, (const uint8_t *)m.data, m.len, &f, &err), &err);
    CHECK(f.port_index == 1 && !f.is_error && f.len == 3 && memcmp(f.data, "abc", 3) == 0);
    sbx_buf_reset(&m);
    CHECK_OK(sbx__pf_encode(&server, 1, 0, "de", 2, &m, &err), &err);
    CHECK_EQ_MEM(m.data, m.len,
                 "\x02"
                 "de",
                 3);
    CHECK_OK(sbx__pf_decode(&client, (const uint8_t *)m.data, m.len, &f, &err), &err);
    CHECK(f.len == 2 && memcmp(f.data, "de", 2) == 0);
    /* The prefix alone, then split over two messages. */
    CHECK_OK(sbx__pf_decode(&client, (const uint8_t *)"\x00\x90\x1f", 3, &f, &err), &err);
    CHECK(f.port_index == 0 && f.len == 0);
    CHECK_OK(sbx__pf_decode(&client, (const uint8_t *)"\x01\x90", 2, &f, &err), &err);
    CHECK(f.is_error && f.len == 0);
    CHECK_OK(sbx__pf_decode(&client, (const uint8_t *)"\x01\x1fno route", 10, &f, &err), &err);
    CHECK(f.is_error && f.port_index == 0 && f.len == 8 && memcmp(f.data, "no route", 8) == 0);
    /* The client sends no prefix, and the server expects none. */
    sbx_buf_reset(&m);
    CHECK_OK(sbx__pf_encode(&client, 0, 0, "GET", 3, &m, &err), &err);
    CHECK_EQ_MEM(m.data, m.len, "\x00GET", 4);
    CHECK_OK(sbx__pf_decode(&server, (const uint8_t *)m.data, m.len, &f, &err), &err);
    CHECK(f.port_index == 0 && f.len == 3);
    /* Hostile: the wrong port, a channel past the ports asked for, nothing at all. */
    struct sbx__pf c2;
    CHECK_OK(sbx__pf_init(&c2, ports, 2, 0, &err), &err);
    CHECK_ERR(sbx__pf_decode(&c2, (const uint8_t *)"\x00\x50\x00", 3, &f, &err), SBX_E_PARSE, &err,
              "starts with port 80, not 8080");
    CHECK_ERR(sbx__pf_decode(&c2, (const uint8_t *)"\x04x", 2, &f, &err), SBX_E_PARSE, &err,
              "channel 4; 2 ports");
    CHECK_ERR(sbx__pf_decode(&c2, (const uint8_t *)"", 0, &f, &err), SBX_E_PARSE, &err,
              "without a channel");
    CHECK_ERR(sbx__pf_encode(&c2, 2, 0, "x", 1, &m, &err), SBX_E_INVAL, &err, "port index 2");
    static const uint16_t zero[] = {0};
    CHECK_ERR(sbx__pf_init(&c2, zero, 1, 0, &err), SBX_E_INVAL, &err, "port 0");
    CHECK_ERR(sbx__pf_init(&c2, ports, 0, 0, &err), SBX_E_INVAL, &err, "1 to 64 ports");
    sbx_buf_release(&m);
}

int main(void)
{
    TAP_START();
    TAP_RUN(test_versions);
    TAP_RUN(test_round_trip);
    TAP_RUN(test_decode_hostile);
    TAP_RUN(test_status);
    TAP_RUN(test_status_causes);
    TAP_RUN(test_resize);
    TAP_RUN(test_portforward);
    return TAP_DONE();
}
