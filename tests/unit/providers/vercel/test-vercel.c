/* The vercel provider without a service (the service's side is tests/hosted/vercel/): the
 * NDJSON reader of command logs (NULs kept, lines split anywhere, limits, cut streams), the
 * tar.gz of an upload, the declared options' rules, and the provider's checks of a session
 * state. */
#include <archive.h>
#include <archive_entry.h>
#include <stdlib.h>
#include <string.h>

#include "providers/vercel/vercel.h"
#include "sbx/json.h"
#include "sbx/provider.h"
#include "sbx/session.h"
#include "tap.h"

struct seen {
    int n;
    char data[256];
    size_t len;
};

static int on_value(json_t *v, size_t line, void *ud, struct sbx_error *err)
{
    struct seen *s = ud;
    (void)err;
    (void)line;
    const json_t *d = json_object_get(v, "data");
    if (json_is_string(d) && s->len + json_string_length(d) <= sizeof(s->data)) {
        memcpy(s->data + s->len, json_string_value(d), json_string_length(d));
        s->len += json_string_length(d);
    }
    s->n++;
    return 0;
}

static void test_lines(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    const char text[] = "{\"stream\":\"stdout\",\"data\":\"a\\u0000b\"}\r\n\n  \n"
                        "{\"stream\":\"stderr\",\"data\":\"\\u00e9\\n\"}\n";
    /* Whole, then one byte at a time: the same values, NULs kept. */
    for (int split = 0; split < 2; split++) {
        struct seen s = {0};
        struct sbx__ndjson l;
        sbx__vercel_lines_init(&l, on_value, &s);
        if (split) {
            for (size_t i = 0; i < sizeof(text) - 1; i++)
                CHECK_OK(sbx__ndjson_feed(&l, text + i, 1, &err), &err);
        } else {
            CHECK_OK(sbx__ndjson_feed(&l, text, sizeof(text) - 1, &err), &err);
        }
        CHECK_OK(sbx__ndjson_finish(&l, &err), &err);
        CHECK_EQ_INT(s.n, 2);
        CHECK_EQ_MEM(s.data, s.len, "a\0b\xc3\xa9\n", 6);
        sbx__ndjson_release(&l);
    }
    /* A stream cut inside a line is an error, not a quiet end. */
    struct seen s = {0};
    struct sbx__ndjson l;
    sbx__vercel_lines_init(&l, on_value, &s);
    CHECK_OK(sbx__ndjson_feed(&l, "{\"data\":\"x\"}\n{\"da", 17, &err), &err);
    CHECK_ERR(sbx__ndjson_finish(&l, &err), SBX_E_PARSE, &err, "middle of line 2");
    sbx__ndjson_release(&l);
    /* Not JSON, duplicate keys, too deep: refused, and the reader stays failed. */
    sbx__vercel_lines_init(&l, on_value, &s);
    CHECK_ERR(sbx__ndjson_feed(&l, "{\"a\":1,\"a\":2}\n", 14, &err), SBX_E_PARSE, &err, "line 1");
    CHECK_ERR(sbx__ndjson_feed(&l, "{}\n", 3, &err), SBX_E_INVAL, &err, "already failed");
    sbx__ndjson_release(&l);
    char deep[200];
    memset(deep, '[', 100);
    memset(deep + 100, ']', 100);
    sbx__vercel_lines_init(&l, on_value, &s);
    CHECK_OK(sbx__ndjson_feed(&l, deep, sizeof(deep), &err), &err);
    CHECK_ERR(sbx__ndjson_feed(&l, "\n", 1, &err), SBX_E_TOOBIG, &err, "too deep");
    sbx__ndjson_release(&l);
    /* A line over the limit is refused as it passes it, never buffered whole. */
    size_t big = SBX__VERCEL_LINE_MAX + 10;
    char *b = malloc(big);
    memset(b, ' ', big);
    sbx__vercel_lines_init(&l, on_value, &s);
    CHECK_ERR(sbx__ndjson_feed(&l, b, big, &err), SBX_E_TOOBIG, &err, "longer than");
    CHECK(l.line.len <= SBX__VERCEL_LINE_MAX);
    sbx__ndjson_release(&l);
    free(b);
}

static void test_targz(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_buf gz;
    sbx_buf_init(&gz, 1 << 20);
    const char body[] = "line one\n\0binary\xff";
    CHECK_OK(sbx__vercel_targz("/vercel/sandbox/.sbx-write-x", body, sizeof(body), &gz, &err),
             &err);
    CHECK(gz.len > 2 && (unsigned char)gz.data[0] == 0x1f && (unsigned char)gz.data[1] == 0x8b);
    struct archive *a = archive_read_new();
    archive_read_support_filter_gzip(a);
    archive_read_support_format_tar(a);
    CHECK_EQ_INT(archive_read_open_memory(a, gz.data, gz.len), ARCHIVE_OK);
    struct archive_entry *e;
    CHECK_EQ_INT(archive_read_next_header(a, &e), ARCHIVE_OK);
    /* The name without its leading '/': the service unpacks it at x-cwd "/". */
    CHECK_EQ_STR(archive_entry_pathname(e), "vercel/sandbox/.sbx-write-x");
    CHECK_EQ_INT(archive_entry_size(e), (int64_t)sizeof(body));
    CHECK_EQ_INT(archive_entry_perm(e), 0600);
    char got[64];
    CHECK_EQ_INT(archive_read_data(a, got, sizeof(got)), (la_ssize_t)sizeof(body));
    CHECK_EQ_MEM(got, sizeof(body), body, sizeof(body));
    CHECK_EQ_INT(archive_read_next_header(a, &e), ARCHIVE_EOF);
    archive_read_free(a);
    sbx_buf_release(&gz);
}

static int parse(const char *text, struct sbx__vercel_opts *o, struct sbx_error *err)
{
    json_t *j = json_loads(text, 0, NULL);
    int rc = sbx__vercel_options_parse(j, o, err);
    /* The borrowed strings die with j: keep only what the checks below read. */
    o->runtime = o->root = o->persistence = o->source_snapshot = NULL;
    o->api_url = o->team = o->project = o->ca_file = NULL;
    o->tok_ref = NULL;
    json_decref(j);
    return rc;
}

static void test_options(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__vercel_opts o;
    CHECK_OK(parse("{}", &o, &err), &err);
    CHECK_EQ_INT(o.n_ports, 0);
    CHECK_EQ_INT(json_object_size(o.env), 0);
    sbx__vercel_opts_release(&o);
    CHECK_OK(parse("{\"env\": [\"A=1\", \"B=x=y\"], \"exposed_ports\": [3000, 8080], "
                   "\"timeout_ms\": 60000, \"workspace_persistence\": \"snapshot\"}",
                   &o, &err),
             &err);
    CHECK_EQ_INT(o.n_ports, 2);
    CHECK_EQ_INT(o.ports[1], 8080);
    CHECK_EQ_INT(o.timeout_ms, 60000);
    CHECK_EQ_STR(json_string_value(json_object_get(o.env, "B")), "x=y");
    sbx__vercel_opts_release(&o);
    CHECK_ERR(parse("{\"exposed_ports\": [1, 2, 3, 4, 5]}", &o, &err), SBX_E_TOOBIG, &err,
              "at most 4");
    sbx__vercel_opts_release(&o);
    CHECK_ERR(parse("{\"env\": [\"=x\"]}", &o, &err), SBX_E_INVAL, &err, "KEY=VALUE");
    sbx__vercel_opts_release(&o);
    CHECK_ERR(parse("{\"workspace_root\": \"rel\"}", &o, &err), SBX_E_INVAL, &err, "absolute");
    sbx__vercel_opts_release(&o);
    CHECK_ERR(parse("{\"api_url\": \"ftp://x\"}", &o, &err), SBX_E_INVAL, &err, "http(s)");
    sbx__vercel_opts_release(&o);
    /* Through the table: trusted keys, the choice, unknown keys. */
    struct sbx_provider_info info;
    CHECK_OK(sbx_provider_find("vercel", &info, &err), &err);
    CHECK(!(info.traits & SBX_PROVIDER_PTY));
    CHECK(info.traits & SBX_PROVIDER_SNAPSHOTS);
    json_t *j = json_pack("{s:s}", "workspace_persistence", "both"), *out = NULL;
    CHECK_ERR(sbx_provider_options_check("vercel", j, &out, &err), SBX_E_INVAL, &err, NULL);
    json_decref(out);
    json_decref(j);
}

static void test_state(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *st = NULL;
    const char *good = "{\"version\": 1, \"provider\": \"vercel\", \"id\": \"sb-abc_12\", "
                       "\"created\": \"2026-01-01T00:00:00Z\", \"root\": \"/vercel/sandbox\", "
                       "\"workspace_owned\": true, \"options\": {}, \"exposed_ports\": [3000], "
                       "\"routes\": {\"3000\": \"https://sb-abc_12-3000.vercel.run\"}, "
                       "\"snapshot\": null, \"manifest\": null}";
    CHECK_OK(sbx_session_state_parse(good, strlen(good), &st, &err), &err);
    json_decref(st);
    st = NULL;
    char *bad = sbx_xstrdup(good);
    memcpy(strstr(bad, "sb-abc_12"), "sb/../x", 7);
    CHECK_ERR(sbx_session_state_parse(bad, strlen(bad), &st, &err), SBX_E_INVAL, &err,
              "not a vercel sandbox name");
    free(bad);
    const char *bad_routes =
            "{\"version\": 1, \"provider\": \"vercel\", \"id\": \"sb-1\", "
            "\"created\": \"2026-01-01T00:00:00Z\", \"root\": \"/vercel/sandbox\", "
            "\"workspace_owned\": true, \"options\": {}, \"exposed_ports\": [], "
            "\"routes\": {\"3000\": 3000}, \"snapshot\": null, \"manifest\": null}";
    CHECK_ERR(sbx_session_state_parse(bad_routes, strlen(bad_routes), &st, &err), SBX_E_INVAL, &err,
              "routes");
    bad = sbx_xstrdup(good);
    memcpy(strstr(bad, "/vercel/sandbox"), "vercel/sandbox/", 15);
    CHECK_ERR(sbx_session_state_parse(bad, strlen(bad), &st, &err), SBX_E_INVAL, &err, "root");
    free(bad);
}

int main(void)
{
    TAP_START();
    test_lines();
    test_targz();
    test_options();
    test_state();
    return TAP_DONE();
}
