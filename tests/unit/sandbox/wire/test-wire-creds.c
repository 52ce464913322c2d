/* Credentials of the remote layer (src/sandbox/wire/endpoint.h): a bearer token, an API key
 * header and basic auth, each read from an environment variable or a file reference, reach a
 * server that checks them (tests/wire/http-fake.py --token-file); a token file that changes is
 * read again after a 401; and nothing sbx writes during the run holds a credential: every
 * error message (the server echoes what it got in its 401 and 403 bodies), every log line, the
 * endpoint's URL and the files of the run are collected and searched for the token, its basic
 * auth form and the password. Skips the server cases without python3. */
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox/wire/conn.h"
#include "sandbox/wire/endpoint.h"
#include "sandbox/wire/http.h"
#include "sbx/b64.h"
#include "sbx/fs.h"
#include "sbx/log.h"
#include "servers.h"
#include "tap.h"

#define TOKEN    "tok-5f1e9c2a7b3d4e60"
#define TOKEN2   "tok-rotated-81aa4c0e"
#define PASSWORD "pw-0c6d2e9f17ab"

/* Everything written during the run that could leak a credential. */
static struct sbx_buf seen;

static void keep(const char *s)
{
    int rc = sbx_buf_adds(&seen, s, NULL);
    rc |= sbx_buf_addch(&seen, '\n', NULL);
    (void)rc;
}

static void on_log(enum sbx_log_level level, const char *msg, void *data)
{
    (void)level;
    (void)data;
    keep(msg);
}

static void write_file(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    struct sbx_error err = SBX_ERROR_INIT;
    CHECK(fd >= 0);
    if (fd >= 0)
        CHECK_OK(sbx_fd_write_all(fd, text, strlen(text), &err), &err);
    if (fd >= 0)
        close(fd);
}

static struct sbx__endpoint *make(int port, enum sbx__auth auth, const char *ref_text,
                                  struct sbx_error *err)
{
    json_t *ref = json_loads(ref_text, 0, NULL);
    char *url = sbx_xasprintf("http://127.0.0.1:%d", port);
    struct sbx__endpoint_opts o = {.url = url,
                                   .name = "the fake",
                                   .auth = auth,
                                   .auth_header = "X-API-Key",
                                   .username = "sbx",
                                   .token.ref = ref,
                                   .max_retries = -1};
    struct sbx__endpoint *ep = NULL;
    if (sbx__endpoint_new(&o, &ep, err) < 0)
        ep = NULL;
    else
        keep(sbx__endpoint_url(ep));
    free(url);
    json_decref(ref);
    return ep;
}

static int call(struct sbx__endpoint *ep, const char *path, struct sbx_error *err)
{
    json_t *j = NULL;
    int rc = sbx__http_json(ep, "GET", path, NULL, NULL, &j, err);
    json_decref(j);
    if (rc < 0)
        keep(err->msg);
    return rc;
}

static void check_each_kind(int port, const char *dir)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char *file_ref = sbx_xasprintf("{\"file\": \"%s/client-token\"}", dir);
    setenv("SBX_TEST_WIRE_TOKEN", TOKEN, 1);
    static const enum sbx__auth kinds[] = {SBX__AUTH_BEARER, SBX__AUTH_HEADER, SBX__AUTH_BASIC};
    for (size_t i = 0; i < SBX_ARRAY_LEN(kinds); i++) {
        struct sbx__endpoint *ep = make(port, kinds[i], "{\"env\": \"SBX_TEST_WIRE_TOKEN\"}", &err);
        CHECK(ep != NULL);
        if (ep) {
            CHECK_OK(call(ep, "/json", &err), &err);
            /* The server repeats what it got in its error body. */
            CHECK_ERR(call(ep, "/status/403?shape=echo", &err), SBX_E_PERM, &err, "you sent ");
            CHECK_CONTAINS(err.msg, "[redacted]");
        }
        sbx__endpoint_free(ep);
        ep = make(port, kinds[i], file_ref, &err);
        CHECK(ep != NULL);
        if (ep)
            CHECK_OK(call(ep, "/json", &err), &err);
        sbx__endpoint_free(ep);
    }
    /* A wrong token: the server's 401 names it, sbx's message must not. */
    setenv("SBX_TEST_WIRE_TOKEN", PASSWORD, 1);
    struct sbx__endpoint *ep =
            make(port, SBX__AUTH_BEARER, "{\"env\": \"SBX_TEST_WIRE_TOKEN\"}", &err);
    if (ep)
        CHECK_ERR(call(ep, "/json", &err), SBX_E_PERM, &err, "the credentials were refused");
    sbx__endpoint_free(ep);
    unsetenv("SBX_TEST_WIRE_TOKEN");
    CHECK_ERR(sbx__endpoint_new(&(struct sbx__endpoint_opts){.url = "http://h",
                                                             .auth = SBX__AUTH_BEARER,
                                                             .token.ref = NULL},
                                &ep, &err),
              SBX_E_INVAL, &err, "without a token");
    json_t *unset = json_pack("{s:s}", "env", "SBX_TEST_WIRE_UNSET");
    CHECK_ERR(sbx__endpoint_new(&(struct sbx__endpoint_opts){.url = "http://h",
                                                             .auth = SBX__AUTH_BEARER,
                                                             .token.ref = unset},
                                &ep, &err),
              SBX_E_NOTFOUND, &err, "SBX_TEST_WIRE_UNSET");
    json_decref(unset);
    free(file_ref);
}

/* A token file that changes under a running client: the 401 makes it read again, once. */
static void check_rotation(int port, const char *dir)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char *file_ref = sbx_xasprintf("{\"file\": \"%s/client-token\"}", dir);
    char *client = sbx_xasprintf("%s/client-token", dir), *server = sbx_xasprintf("%s/token", dir);
    struct sbx__endpoint *ep = make(port, SBX__AUTH_BEARER, file_ref, &err);
    if (ep) {
        CHECK_OK(call(ep, "/json", &err), &err);
        write_file(server, TOKEN2 "\n");
        write_file(client, TOKEN2 "\n");
        CHECK_OK(call(ep, "/json", &err), &err);
        write_file(server, TOKEN "\n");
        CHECK_ERR(call(ep, "/json", &err), SBX_E_PERM, &err, "HTTP 401");
        CHECK(!strstr(err.msg, TOKEN2));
    }
    sbx__endpoint_free(ep);
    write_file(client, TOKEN "\n");
    free(client);
    free(server);
    free(file_ref);
}

/* Upgraded connections send the credential in the head sbx writes: a refused upgrade. */
static void check_upgrade(int port)
{
    struct sbx_error err = SBX_ERROR_INIT;
    setenv("SBX_TEST_WIRE_TOKEN", TOKEN, 1);
    struct sbx__endpoint *ep =
            make(port, SBX__AUTH_BASIC, "{\"env\": \"SBX_TEST_WIRE_TOKEN\"}", &err);
    struct sbx__conn *c = NULL;
    const char *hdrs[] = {"Connection: Upgrade", "Upgrade: tcp", NULL};
    struct sbx__upgrade u = {.method = "POST", .path = "/status/403?shape=echo", .headers = hdrs};
    if (ep) {
        CHECK_ERR(sbx__conn_open(ep, &u, &c, NULL, &err), SBX_E_PERM, &err, "you sent Basic ");
        keep(err.msg);
        struct sbx__upgrade ok = {.method = "POST", .path = "/hijack", .headers = hdrs};
        CHECK_OK(sbx__conn_open(ep, &ok, &c, NULL, &err), &err);
        sbx__conn_free(c);
    }
    sbx__endpoint_free(ep);
    unsetenv("SBX_TEST_WIRE_TOKEN");
}

static void test_credentials(void)
{
    char dir[] = "/tmp/sbx-creds-XXXXXX";
    struct tserver s = {.pid = -1, .stdin_fd = -1};
    sbx_buf_init(&seen, SBX_BUF_NOLIMIT);
    sbx_log_set_handler(on_log, NULL, SBX_LOG_DEBUG);
    if (!mkdtemp(dir)) {
        CHECK(!"a scratch directory");
        return;
    }
    char *server = sbx_xasprintf("%s/token", dir), *client = sbx_xasprintf("%s/client-token", dir);
    write_file(server, TOKEN "\n");
    write_file(client, TOKEN "\n");
    const char *args[] = {"--token-file", server, NULL};
    if (tserver_start(&s, "tests/wire/http-fake.py", args) < 0) {
        CHECK(!"the server started");
    } else {
        check_each_kind(s.port, dir);
        check_rotation(s.port, dir);
        check_upgrade(s.port);
    }
    tserver_stop(&s);
    /* The run's files besides the tokens themselves: none here, and none may appear. */
    unlink(server);
    unlink(client);
    CHECK(rmdir(dir) == 0); /* nothing else was written there */
    /* The search: the token, the rotated one, the password, and basic auth's encoded forms. */
    struct sbx_buf enc;
    sbx_buf_init(&enc, SBX_BUF_NOLIMIT);
    CHECK(seen.len > 0);
    CHECK(!memmem(seen.data, seen.len, TOKEN, strlen(TOKEN)));
    CHECK(!memmem(seen.data, seen.len, TOKEN2, strlen(TOKEN2)));
    CHECK(!memmem(seen.data, seen.len, PASSWORD, strlen(PASSWORD)));
    CHECK(sbx_b64_encode("sbx:" TOKEN, strlen("sbx:" TOKEN), &enc, NULL) == 0);
    CHECK(!memmem(seen.data, seen.len, enc.data, enc.len));
    CHECK(memmem(seen.data, seen.len, "[redacted]", 10) != NULL);
    sbx_buf_release(&enc);
    sbx_log_set_handler(NULL, NULL, SBX_LOG_ERROR);
    sbx_buf_release(&seen);
    free(server);
    free(client);
}

/* Scrubbing itself: every occurrence, cut messages, and text of other shapes. */
static void test_scrub(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_secret *t = sbx_secret_new("token", "abc123", 6);
    struct sbx__endpoint_opts o = {
            .url = "https://h", .auth = SBX__AUTH_BASIC, .username = "u", .token.value = t};
    struct sbx__endpoint *ep = NULL;
    CHECK_OK(sbx__endpoint_new(&o, &ep, &err), &err);
    sbx_error_set(&err, SBX_E_API, 0, "abc123 and abc123, basic dTphYmMxMjM= end");
    sbx__endpoint_scrub(ep, &err);
    CHECK_EQ_STR(err.msg, "[redacted] and [redacted], basic [redacted] end");
    char text[] = "x abc123 y";
    sbx__endpoint_scrub_text(ep, text);
    CHECK_EQ_STR(text, "x ****** y");
    sbx__endpoint_scrub(ep, NULL);
    sbx__endpoint_scrub(NULL, &err);
    sbx__endpoint_free(ep);
    sbx_secret_free(t);
}

int main(void)
{
    TAP_START();
    TAP_RUN(test_scrub);
    if (!have_python()) {
        printf("# no python3: the server cases skip\n");
        return TAP_DONE();
    }
    TAP_RUN_FORKED(test_credentials);
    return TAP_DONE();
}
