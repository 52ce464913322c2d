/* The Docker provider without an engine (its multiplexed stream parser is sandbox/wire/mux.c,
 * tested by test-wire-mux.c): the path-stat decoder, option checks, and the errors for an engine
 * that cannot be reached (no socket, nobody listening, a socket we may not use). */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "providers/docker/docker.h"
#include "sbx/b64.h"
#include "sbx/docker.h"
#include "sbx/fs.h"
#include "sbx/session.h"
#include "tap.h"

static char *b64(const char *s)
{
    struct sbx_buf b;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    if (sbx_b64_encode(s, strlen(s), &b, NULL) < 0)
        return NULL;
    return sbx_buf_detach(&b, NULL);
}

static void test_pstat(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__dk_pstat st = {0};
    char *h = b64("{\"name\":\"out\",\"size\":4,\"mode\":134218239,"
                  "\"mtime\":\"2026-12-02T05:34:29.5Z\",\"linkTarget\":\"/etc\"}");
    CHECK_OK(sbx__dk_pstat_decode(h, &st, &err), &err);
    CHECK_EQ_INT(st.type, SBX_FILE_SYMLINK);
    CHECK_EQ_INT(st.mode, 0777);
    CHECK_EQ_STR(st.link_target, "/etc");
    CHECK_EQ_INT(st.mtime_ns % 1000000000, 500000000);
    sbx__dk_pstat_release(&st);
    free(h);
    /* Years int64 nanoseconds cannot hold (Go's zero time, a file touched to 2300) are held
     * at the nearest end instead of wrapping (and UBSan stopping the ASan pass). */
    static const struct {
        const char *mtime;
        int positive;
    } far[] = {{"0001-01-01T00:00:00Z", 0},
               {"0026-01-01T00:00:00.12;456789Z", 0},
               {"2300-01-01T00:00:00.999999999Z", 1},
               {"9999-12-31T23:59:59.9Z", 1}};
    for (size_t i = 0; i < sizeof(far) / sizeof(far[0]); i++) {
        char *json = sbx_xasprintf("{\"name\":\"f\",\"size\":1,\"mode\":420,\"mtime\":\"%s\"}",
                                   far[i].mtime);
        h = b64(json);
        CHECK_OK(sbx__dk_pstat_decode(h, &st, &err), &err);
        if (far[i].positive)
            CHECK(st.mtime_ns > (int64_t)9200000000 * 1000000000);
        else
            CHECK(st.mtime_ns < -(int64_t)9200000000 * 1000000000);
        sbx__dk_pstat_release(&st);
        free(h);
        free(json);
    }
    /* podman: a directory with a "linkTarget" of itself is not a symlink. */
    h = b64("{\"name\":\"d\",\"size\":4096,\"mode\":2147484141,\"isDir\":true,"
            "\"linkTarget\":\"/workspace/d\"}");
    CHECK_OK(sbx__dk_pstat_decode(h, &st, &err), &err);
    CHECK_EQ_INT(st.type, SBX_FILE_DIR);
    CHECK_EQ_INT(st.mode, 0755);
    CHECK(st.link_target == NULL);
    sbx__dk_pstat_release(&st);
    free(h);
    /* setuid + 0755 regular file: special bits kept (the session layer drops them). */
    h = b64("{\"name\":\"f\",\"size\":1,\"mode\":8389101}");
    CHECK_OK(sbx__dk_pstat_decode(h, &st, &err), &err);
    CHECK_EQ_INT(st.mode, 04755);
    CHECK_EQ_INT(st.type, SBX_FILE_REGULAR);
    sbx__dk_pstat_release(&st);
    free(h);
    static const char *const bad[] = {"{}", "[1]", "{\"mode\":-1,\"size\":1}",
                                      "{\"mode\":1,\"size\":\"x\"}", "not json"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        h = b64(bad[i]);
        int rc = sbx__dk_pstat_decode(h, &st, &err);
        CHECK(rc == -SBX_E_PARSE);
        free(h);
    }
    CHECK_ERR(sbx__dk_pstat_decode("!!!", &st, &err), SBX_E_PARSE, &err, NULL);
    CHECK_ERR(sbx__dk_pstat_decode(NULL, &st, &err), SBX_E_PARSE, &err, NULL);
}

static void test_version(void)
{
    CHECK(sbx__dk_version_ok("1.41"));
    CHECK(sbx__dk_version_ok("1.43"));
    CHECK(sbx__dk_version_ok("2.0"));
    CHECK(!sbx__dk_version_ok("1.40"));
    CHECK(!sbx__dk_version_ok("1.4"));
    CHECK(!sbx__dk_version_ok("1"));
    CHECK(!sbx__dk_version_ok("1.41x"));
    CHECK(!sbx__dk_version_ok(NULL));
}

static void test_options(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_client *c = NULL;
    const char *caps[] = {"NET_ADMIN"};
    struct sbx_docker_options o = {.host = "/nonexistent.sock", .cap_add = caps, .n_cap_add = 1};
    CHECK_ERR(sbx_client_new("docker", &o, &c, &err), SBX_E_PERM, &err, "NET_ADMIN");
    const char *badcap[] = {"net admin"};
    struct sbx_docker_options o2 = {
            .host = "/x.sock", .cap_add = badcap, .n_cap_add = 1, .allow_cap_add = 1};
    CHECK_ERR(sbx_client_new("docker", &o2, &c, &err), SBX_E_INVAL, &err, "capability");
    struct sbx_docker_options o3 = {.host = "ssh://me@engine"};
    CHECK_ERR(sbx_client_new("docker", &o3, &c, &err), SBX_E_UNSUPPORTED, &err, "tcp:// with TLS");
    struct sbx_docker_options o3b = {.host = "/x.sock", .tls_ca = "/ca.pem"};
    CHECK_ERR(sbx_client_new("docker", &o3b, &c, &err), SBX_E_INVAL, &err, "tcp://");
    struct sbx_docker_options o3c = {.host = "tcp://127.0.0.1", .tls_ca = "/ca.pem"};
    CHECK_ERR(sbx_client_new("docker", &o3c, &c, &err), SBX_E_INVAL, &err, "no port");
    struct sbx_docker_options o3d = {.host = "tcp://127.0.0.1:2376", .tls_cert = "/c.pem"};
    CHECK_ERR(sbx_client_new("docker", &o3d, &c, &err), SBX_E_INVAL, &err, "its key");
    struct sbx_docker_options o3e = {.host = "tcp://127.0.0.1:2376",
                                     .tls_ca = "/ca.pem",
                                     .tls_cert = "/c.pem",
                                     .tls_key = "/k.pem"};
    CHECK_OK(sbx_client_new("docker", &o3e, &c, &err), &err);
    sbx_client_free(c);
    c = NULL;
    struct sbx_docker_options o4 = {.host = "relative.sock"};
    CHECK_ERR(sbx_client_new("docker", &o4, &c, &err), SBX_E_INVAL, &err, "absolute");
    int ports[] = {0};
    struct sbx_docker_options o5 = {
            .host = "/x.sock", .exposed_ports = ports, .n_exposed_ports = 1};
    CHECK_ERR(sbx_client_new("docker", &o5, &c, &err), SBX_E_INVAL, &err, "port");
    struct sbx_docker_options o6 = {.host = "/x.sock", .network = (enum sbx_docker_network)9};
    CHECK_ERR(sbx_client_new("docker", &o6, &c, &err), SBX_E_INVAL, &err, "network");
    /* No image: create says so before it talks to any engine. */
    struct sbx_docker_options o7 = {.host = "unix:///nonexistent.sock"};
    CHECK_OK(sbx_client_new("docker", &o7, &c, &err), &err);
    struct sbx_session *s = NULL;
    struct sbx_create_spec spec = {0};
    if (c)
        CHECK_ERR(sbx_client_create(c, &spec, &s, &err), SBX_E_INVAL, &err, "no image");
    sbx_client_free(c);
}

static void test_unreachable(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char dir[] = "/tmp/sbx-test-docker-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char *missing = sbx_xasprintf("%s/none.sock", dir);
    char *dead = sbx_xasprintf("%s/dead.sock", dir);
    struct sbx_client *c = NULL;
    struct sbx_session *s = NULL;
    struct sbx_docker_options o = {.host = missing, .image = "img"};
    CHECK_OK(sbx_client_new("docker", &o, &c, &err), &err);
    struct sbx_create_spec spec = {0};
    if (c)
        CHECK_ERR(sbx_client_create(c, &spec, &s, &err), SBX_E_SANDBOX, &err,
                  "is dockerd or `podman system service` running?");
    CHECK_CONTAINS(err.msg, missing);
    sbx_client_free(c);
    c = NULL;

    /* A socket nobody listens on any more. */
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, dead, strlen(dead) + 1);
    CHECK(bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    close(fd);
    struct sbx_docker_options o2 = {.host = dead};
    CHECK_OK(sbx_client_new("docker", &o2, &c, &err), &err);
    json_t *list = NULL;
    if (c)
        CHECK_ERR(sbx_client_list(c, &list, &err), SBX_E_SANDBOX, &err, "cannot reach");
    sbx_client_free(c);
    c = NULL;

    /* A socket of mode 0000: as root permissions do not apply, so only as another user. */
    if (geteuid() != 0) {
        int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        char *locked = sbx_xasprintf("%s/locked.sock", dir);
        struct sockaddr_un sb = {.sun_family = AF_UNIX};
        memcpy(sb.sun_path, locked, strlen(locked) + 1);
        CHECK(bind(l, (struct sockaddr *)&sb, sizeof(sb)) == 0 && listen(l, 1) == 0);
        CHECK(chmod(locked, 0) == 0);
        struct sbx_docker_options o3 = {.host = locked};
        CHECK_OK(sbx_client_new("docker", &o3, &c, &err), &err);
        if (c)
            CHECK_ERR(sbx_client_list(c, &list, &err), SBX_E_PERM, &err,
                      "add your user to the docker group");
        sbx_client_free(c);
        close(l);
        unlink(locked);
        free(locked);
    } else {
        /* The message itself, as the connect error maps it. */
        struct sbx__dk_engine e = {.sock = dead, .where = dead, .timeout_ms = 1000};
        CHECK_ERR(sbx__dk_connect_error(&e, EACCES, &err), SBX_E_PERM, &err,
                  "add your user to the docker group, or use podman's rootless socket");
        CHECK_CONTAINS(err.msg, dead);
    }
    unlink(dead);
    rmdir(dir);
    free(missing);
    free(dead);
}

/* A fake engine on a unix socket: answers /_ping (with api_version in its Api-Version header
 * when ping_header is set, as engines do; without, as a proxy might) and /version with
 * api_version (an error when the ping had the header), images with 404. */
struct fake {
    int listen_fd;
    const char *api_version;
    int ping_header;
    int served;
};

static void *fake_main(void *arg)
{
    struct fake *f = arg;
    for (;;) {
        int c = accept4(f->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0)
            return NULL;
        char req[8192];
        size_t n = 0;
        while (n < sizeof(req) - 1) {
            ssize_t r = read(c, req + n, sizeof(req) - 1 - n);
            if (r <= 0)
                break;
            n += (size_t)r;
            req[n] = '\0';
            if (strstr(req, "\r\n\r\n"))
                break;
        }
        req[n] = '\0';
        char body[256], resp[512], extra[64] = "";
        const char *status = "200 OK";
        if (strstr(req, " /v1.41/_ping ")) {
            snprintf(body, sizeof(body), "OK");
            if (f->ping_header)
                snprintf(extra, sizeof(extra), "Api-Version: %s\r\n", f->api_version);
        } else if (strstr(req, " /v1.41/version ") && f->ping_header) {
            /* The ping said: /version (slow on podman) is not to be asked. */
            status = "500 Internal Server Error";
            snprintf(body, sizeof(body), "{\"message\":\"version asked after a ping\"}");
        } else if (strstr(req, " /v1.41/version ")) {
            snprintf(body, sizeof(body), "{\"ApiVersion\":\"%s\"}", f->api_version);
        } else {
            status = "404 Not Found";
            snprintf(body, sizeof(body), "{\"message\":\"No such image: x\"}");
        }
        int k = snprintf(resp, sizeof(resp),
                         "HTTP/1.1 %s\r\n%sContent-Type: application/json\r\nContent-Length: "
                         "%zu\r\nConnection: close\r\n\r\n%s",
                         status, extra, strlen(body), body);
        if (write(c, resp, (size_t)k) != k)
            f->served = -1;
        close(c);
        f->served++;
    }
}

static void test_fake_engine(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char dir[] = "/tmp/sbx-test-docker-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char *path = sbx_xasprintf("%s/engine.sock", dir);
    struct fake f = {.api_version = "1.40", .ping_header = 1};
    f.listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, path, strlen(path) + 1);
    CHECK(bind(f.listen_fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
          listen(f.listen_fd, 8) == 0);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, fake_main, &f) == 0);
    struct sbx_client *c = NULL;
    struct sbx_docker_options o = {.host = path, .image = "x"};
    CHECK_OK(sbx_client_new("docker", &o, &c, &err), &err);
    json_t *list = NULL;
    struct sbx_session *s = NULL;
    struct sbx_create_spec spec = {0};
    if (c) {
        CHECK_ERR(sbx_client_list(c, &list, &err), SBX_E_UNSUPPORTED, &err, "1.40");
        CHECK_CONTAINS(err.msg, "sbx needs 1.41 or later");
        f.api_version = "1.41";
        CHECK_ERR(sbx_client_create(c, &spec, &s, &err), SBX_E_NOTFOUND, &err,
                  "image 'x' is not in the engine's store (sbx never pulls: docker pull x, or "
                  "podman pull x, or load it)");
        /* A ping without the header: /version says. */
        f.ping_header = 0;
        f.api_version = "1.39";
        CHECK_ERR(sbx_client_list(c, &list, &err), SBX_E_UNSUPPORTED, &err, "'1.39'");
        f.api_version = "1.41";
        CHECK_ERR(sbx_client_create(c, &spec, &s, &err), SBX_E_NOTFOUND, &err, "image 'x'");
    }
    sbx_client_free(c);
    shutdown(f.listen_fd, SHUT_RDWR);
    pthread_join(t, NULL);
    close(f.listen_fd);
    unlink(path);
    rmdir(dir);
    free(path);
}

static void test_escape(void)
{
    char *q = sbx__dk_escape("/work space/a&b=c%#?");
    CHECK_EQ_STR(q, "/work%20space/a%26b%3Dc%25%23%3F");
    free(q);
}

/* The supervisor program links sbx-base only: the docker provider's libcurl stays out. */
static void test_supervisor_layering(void)
{
    const char *sup = getenv("SBX_SUPERVISOR");
    struct sbx_buf b;
    struct sbx_error err = SBX_ERROR_INIT;
    if (!sup)
        return;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    CHECK_OK(sbx_fs_read_path(sup, (size_t)256 << 20, &b, &err), &err);
    CHECK(b.len > 0 && !memmem(b.data, b.len, "libcurl", 7));
    CHECK(b.len > 0 && !memmem(b.data, b.len, "sbx__provider_docker", 20));
    sbx_buf_release(&b);
}

int main(void)
{
    TAP_START();
    TAP_RUN(test_pstat);
    TAP_RUN(test_version);
    TAP_RUN(test_options);
    TAP_RUN_FORKED(test_unreachable);
    TAP_RUN_FORKED(test_fake_engine);
    TAP_RUN(test_escape);
    TAP_RUN(test_supervisor_layering);
    return TAP_DONE();
}
