/* The runloop provider without a service (the service's side is tests/hosted/runloop/): the
 * quoting of the one shell line the service runs (every argument comes back from a real
 * /bin/sh exactly as given, hostile ones included), devbox ids, the declared options' rules,
 * and the provider's checks of a session state. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "providers/runloop/runloop.h"
#include "sbx/json.h"
#include "sbx/provider.h"
#include "sbx/session.h"
#include "tap.h"

/* line run by /bin/sh -c; its stdout (at most n - 1 bytes) into out. */
static size_t sh_out(const char *line, char *out, size_t n)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return 0;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], 1);
        execl("/bin/sh", "sh", "-c", line, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    size_t got = 0;
    ssize_t r;
    while (got < n - 1 &&
           ((r = read(p[0], out + got, n - 1 - got)) > 0 || (r < 0 && errno == EINTR)))
        if (r > 0)
            got += (size_t)r;
    out[got] = '\0';
    close(p[0]);
    int st;
    waitpid(pid, &st, 0);
    return got;
}

static void test_quote(void)
{
    const char *a[] = {"echo", "it's", NULL};
    char *q = sbx__shellfs_quote_argv(a);
    CHECK_EQ_STR(q, "'echo' 'it'\\''s'");
    free(q);
    /* Each word comes back whole from the shell, NUL-separated. */
    const char *hostile[] = {"printf",    "%s\\0", "$(touch /tmp/sbx-rl-pwned)",
                             "a b\tc\nd", "'",     "''\\'",
                             "`id`",      "$HOME", "*",
                             "",          "-n",    "\\",
                             ";|&<>",     NULL};
    q = sbx__shellfs_quote_argv(hostile);
    char out[1024];
    size_t n = sh_out(q, out, sizeof(out));
    free(q);
    size_t off = 0;
    for (size_t i = 2; hostile[i]; i++) {
        CHECK(off < n);
        CHECK_EQ_STR(out + off, hostile[i]);
        off += strlen(out + off) + 1;
    }
    CHECK_EQ_INT((long)off, (long)n);
    CHECK(access("/tmp/sbx-rl-pwned", F_OK) != 0);
}

static void test_ids(void)
{
    CHECK(sbx__rl_valid_id("dbx_3d1fAx9-q"));
    CHECK(!sbx__rl_valid_id(""));
    CHECK(!sbx__rl_valid_id("../etc"));
    CHECK(!sbx__rl_valid_id("dbx a"));
    CHECK(!sbx__rl_valid_id("dbx?x=1"));
    char longid[80];
    memset(longid, 'a', sizeof(longid) - 1);
    longid[sizeof(longid) - 1] = '\0';
    CHECK(!sbx__rl_valid_id(longid));
}

static void test_options(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *o = json_pack("{s:s,s:s}", "blueprint_id", "bpt_1", "blueprint_name", "x");
    CHECK_ERR(sbx_provider_options_check("runloop", o, NULL, &err), SBX_E_INVAL, &err,
              "cannot both be set");
    json_decref(o);
    o = json_pack("{s:[s]}", "env_vars", "=v");
    CHECK_ERR(sbx_provider_options_check("runloop", o, NULL, &err), SBX_E_INVAL, &err, "env_vars");
    json_decref(o);
    o = json_pack("{s:s}", "base_url", "ftp://x");
    CHECK_ERR(sbx_provider_options_check("runloop", o, NULL, &err), SBX_E_INVAL, &err,
              "not an http(s) URL");
    json_decref(o);
    /* The key only ever as a reference, never in a message. */
    o = json_pack("{s:s}", "api_key", "ak_literal");
    CHECK_ERR(sbx_provider_options_check("runloop", o, NULL, &err), SBX_E_INVAL, &err, "api_key");
    CHECK(!strstr(err.msg, "ak_literal"));
    json_decref(o);
    o = json_pack("{s:{s:s},s:[i,i],s:b}", "api_key", "env", "MY_KEY", "exposed_ports", 8080, 3000,
                  "pause_on_exit", 0);
    CHECK_OK(sbx_provider_options_check("runloop", o, NULL, &err), &err);
    json_decref(o);
    struct sbx_provider_info info;
    CHECK_OK(sbx_provider_find("runloop", &info, &err), &err);
    CHECK(info.traits & SBX_PROVIDER_SNAPSHOTS);
    CHECK(info.traits & SBX_PROVIDER_STOP_START);
    CHECK(info.traits & SBX_PROVIDER_PORTS);
    CHECK(info.traits & SBX_PROVIDER_STATS);
    CHECK(!(info.traits & SBX_PROVIDER_PTY));
}

static void test_client(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_client *c = NULL;
    int dummy = 0;
    CHECK_ERR(sbx_client_new("runloop", &dummy, &c, &err), SBX_E_INVAL, &err, "as JSON");
    /* No key needed to make a client: it is read by the first call. */
    CHECK_OK(sbx_client_new("runloop", NULL, &c, &err), &err);
    sbx_client_free(c);
}

static void test_state(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *st = NULL;
    const char *good = "{\"version\": 1, \"provider\": \"runloop\", \"id\": \"dbx_abc123xyz\", "
                       "\"created\": \"2026-01-01T00:00:00Z\", \"root\": \"/home/user\", "
                       "\"workspace_owned\": true, \"options\": {}, \"exposed_ports\": [], "
                       "\"snapshot\": null, \"manifest\": null}";
    CHECK_OK(sbx_session_state_parse(good, strlen(good), &st, &err), &err);
    json_decref(st);
    st = NULL;
    char *bad = sbx_xstrdup(good);
    memcpy(strstr(bad, "dbx_abc123xyz"), "dbx/../abcxy", 12);
    CHECK_ERR(sbx_session_state_parse(bad, strlen(bad), &st, &err), SBX_E_INVAL, &err,
              "not a runloop devbox id");
    free(bad);
    bad = sbx_xstrdup(good);
    memcpy(strstr(bad, "/home/user"), "home/user/", 10);
    CHECK_ERR(sbx_session_state_parse(bad, strlen(bad), &st, &err), SBX_E_INVAL, &err, "root");
    free(bad);
}

int main(void)
{
    TAP_START();
    test_quote();
    test_ids();
    test_options();
    test_client();
    test_state();
    return TAP_DONE();
}
