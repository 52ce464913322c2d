/* The daytona provider without a service (the service's side is tests/hosted/daytona/): the
 * quoting of an argv into the command line the toolbox takes (checked by a real /bin/sh), the
 * logs stream's stdout/stderr markers fed whole, byte by byte and split at every offset, the
 * declared options' rules, and the provider's checks of a session state. */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "providers/daytona/daytona.h"
#include "sbx/buf.h"
#include "sbx/json.h"
#include "sbx/provider.h"
#include "sbx/session.h"
#include "tap.h"

/* What /bin/sh makes of line "printf '%s\0' QUOTED": the words, NUL-separated. */
static int shell_words(const char *line, struct sbx_buf *out)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], 1);
        execl("/bin/sh", "sh", "-c", line, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    char b[4096];
    ssize_t n;
    while ((n = read(p[0], b, sizeof(b))) > 0)
        if (sbx_buf_add(out, b, (size_t)n, NULL) < 0)
            break;
    close(p[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_quote(void)
{
    const char *argv[] = {"printf",           "%s\\0",       "plain",     "it's", "a b\tc",
                          "$HOME `id` $(id)", "back\\slash", "new\nline", "'''",  "",
                          "!event",           "*",           NULL};
    char *q = sbx__shellfs_quote_argv(argv);
    CHECK(strchr(q, '\n') != NULL); /* the newline stays inside its quotes */
    struct sbx_buf out;
    sbx_buf_init(&out, SBX_BUF_NOLIMIT);
    CHECK_EQ_INT(shell_words(q, &out), 0);
    struct sbx_buf want;
    sbx_buf_init(&want, SBX_BUF_NOLIMIT);
    for (size_t i = 2; argv[i]; i++)
        CHECK_EQ_INT(sbx_buf_add(&want, argv[i], strlen(argv[i]) + 1, NULL), 0);
    CHECK_EQ_MEM(out.data, out.len, want.data, want.len);
    sbx_buf_release(&out);
    sbx_buf_release(&want);
    free(q);
}

struct collect {
    struct sbx_buf out, err;
};

static int piece(void *ud, int stream, const uint8_t *p, size_t n, struct sbx_error *err)
{
    struct collect *c = ud;
    CHECK(stream == 1 || stream == 2);
    return sbx_buf_add(stream == 1 ? &c->out : &c->err, p, n, err);
}

/* The stream fed in pieces of the sizes cuts gives (0: whole). */
static void feed(const uint8_t *s, size_t n, size_t a, size_t b, struct collect *c)
{
    struct sbx__dtn_demux dm = {0};
    size_t cuts[3] = {a, b, n};
    size_t at = 0;
    for (int i = 0; i < 3; i++) {
        size_t to = cuts[i] > n ? n : cuts[i];
        if (to < at)
            continue;
        CHECK_EQ_INT(sbx__dtn_demux_feed(&dm, s + at, to - at, piece, c, NULL), 0);
        at = to;
    }
    CHECK_EQ_INT(sbx__dtn_demux_finish(&dm, piece, c, NULL), 0);
}

static void test_demux(void)
{
    /* Bytes before the first marker dropped; lone 0x01 and 0x02 and pairs are data; a marker
     * anywhere switches; a stream may end in what looks like the start of a marker. */
    static const uint8_t s[] = "junk\x01\x01\x01out\x01\x02x\x02\x02\x02"
                               "err\x01\x01y\x01\x01\x01more\x02\x02\x02\x02\x02";
    size_t n = sizeof(s) - 1;
    const char *want_out = "out\x01\x02xmore";
    const char *want_err = "err\x01\x01y\x02\x02";
    int bad = 0;
    for (size_t a = 0; a <= n; a++)
        for (size_t b = a; b <= n; b++) {
            struct collect c;
            sbx_buf_init(&c.out, SBX_BUF_NOLIMIT);
            sbx_buf_init(&c.err, SBX_BUF_NOLIMIT);
            feed(s, n, a, b, &c);
            if (c.out.len != strlen(want_out) || memcmp(c.out.data, want_out, c.out.len) != 0 ||
                c.err.len != strlen(want_err) || memcmp(c.err.data, want_err, c.err.len) != 0)
                bad++;
            sbx_buf_release(&c.out);
            sbx_buf_release(&c.err);
        }
    CHECK_EQ_INT(bad, 0);
    /* Byte by byte. */
    struct sbx__dtn_demux dm = {0};
    struct collect c;
    sbx_buf_init(&c.out, SBX_BUF_NOLIMIT);
    sbx_buf_init(&c.err, SBX_BUF_NOLIMIT);
    for (size_t i = 0; i < n; i++)
        CHECK_EQ_INT(sbx__dtn_demux_feed(&dm, s + i, 1, piece, &c, NULL), 0);
    CHECK_EQ_INT(sbx__dtn_demux_finish(&dm, piece, &c, NULL), 0);
    CHECK_EQ_MEM(c.out.data, c.out.len, want_out, strlen(want_out));
    CHECK_EQ_MEM(c.err.data, c.err.len, want_err, strlen(want_err));
    sbx_buf_release(&c.out);
    sbx_buf_release(&c.err);
}

static void test_options(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *o = json_loads("{\"env_vars\": [\"A=1\", \"B=x=y\"], \"labels\": [\"team=sbx\"], "
                           "\"exposed_ports\": [8000, 8001], \"create_timeout\": 120}",
                           0, NULL);
    struct sbx__dtn_opts d;
    CHECK_OK(sbx__dtn_options_parse(o, &d, &err), &err);
    CHECK_EQ_STR(json_string_value(json_object_get(d.env, "B")), "x=y");
    CHECK_EQ_STR(json_string_value(json_object_get(d.labels, "team")), "sbx");
    CHECK_EQ_INT(d.n_ports, 2);
    CHECK_EQ_INT(d.create_timeout_s, 120);
    CHECK_EQ_INT(d.start_timeout_s, 60);
    CHECK_EQ_INT(d.url_ttl_s, 3600);
    sbx__dtn_opts_release(&d);
    json_decref(o);
    o = json_loads("{\"env_vars\": [\"=1\"]}", 0, NULL);
    CHECK_ERR(sbx__dtn_options_parse(o, &d, &err), SBX_E_INVAL, &err, "env_vars wants KEY=VALUE");
    json_decref(o);
    o = json_loads("{\"workspace_root\": \"rel\"}", 0, NULL);
    CHECK_ERR(sbx__dtn_options_parse(o, &d, &err), SBX_E_INVAL, &err, "not absolute");
    json_decref(o);
    o = json_loads("{\"api_url\": \"ftp://x\"}", 0, NULL);
    CHECK_ERR(sbx__dtn_options_parse(o, &d, &err), SBX_E_INVAL, &err, "not an http(s) URL");
    json_decref(o);
    /* The key, the URL and the organization are the command line's, never an agent file's. */
    struct sbx_provider_info info;
    CHECK_OK(sbx_provider_find("daytona", &info, &err), &err);
    const struct sbx_provider_option *k = sbx_provider_option(&info, "api_key");
    CHECK(k && (k->flags & SBX_OPTION_TRUSTED) && k->type == SBX_OPTION_SECRET);
    k = sbx_provider_option(&info, "organization_id");
    CHECK(k && (k->flags & SBX_OPTION_TRUSTED) && (k->flags & SBX_OPTION_LOCATOR));
    k = sbx_provider_option(&info, "api_url");
    CHECK(info.traits & SBX_PROVIDER_PTY);
    CHECK(!(info.traits & SBX_PROVIDER_MOUNTS));
    CHECK(k && (k->flags & SBX_OPTION_TRUSTED) && (k->flags & SBX_OPTION_LOCATOR));
}

static void test_state(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *st = NULL;
    const char *good =
            "{\"version\": 1, \"provider\": \"daytona\", "
            "\"id\": \"0b6e3c2a-1d2f-4b5e-9a7c-3e2d1f0a9b8c\", "
            "\"created\": \"2026-01-01T00:00:00Z\", \"root\": \"/home/daytona/workspace\", "
            "\"workspace_owned\": true, \"options\": {}, \"exposed_ports\": [], "
            "\"snapshot\": null, \"manifest\": null}";
    CHECK_OK(sbx_session_state_parse(good, strlen(good), &st, &err), &err);
    json_decref(st);
    st = NULL;
    char *bad = sbx_xstrdup(good);
    memcpy(strstr(bad, "0b6e3c2a"), "../../xx", 8);
    CHECK_ERR(sbx_session_state_parse(bad, strlen(bad), &st, &err), SBX_E_INVAL, &err,
              "not a daytona sandbox id");
    free(bad);
    bad = sbx_xstrdup(good);
    memcpy(strstr(bad, "/home/daytona"), "home/daytona/", 13);
    CHECK_ERR(sbx_session_state_parse(bad, strlen(bad), &st, &err), SBX_E_INVAL, &err, "root");
    free(bad);
}

int main(void)
{
    TAP_START();
    test_quote();
    test_demux();
    test_options();
    test_state();
    return TAP_DONE();
}
