/* Provider conformance: one set of session tests, through the public C API only, that every
 * provider must pass. The provider comes from the environment:
 *   SBX_CONFORM_PROVIDER  local (default), docker or any provider built in
 *   SBX_CONFORM_OPTIONS   for a provider other than local and docker: its declared options as
 *                         a JSON object (sbx_client_new_json); default {}
 *   SBX_CONFORM_CASES     only these cases (comma-separated names without test_); the others
 *                         are reported skipped, saying so
 *   SBX_CONFORM_ENGINE    docker (default) or podman: which engine socket a docker run uses,
 *                         SBX_TEST_DOCKER_HOST or SBX_TEST_PODMAN_HOST (a socket path); or
 *                         docker-tls: the remote engine of tests/docker/engines.sh start-tls,
 *                         SBX_TEST_DOCKER_TLS_HOST (tcp://) with the client certificate of
 *                         SBX_TEST_DOCKER_TLS_CERTS (the test itself asks that engine on its
 *                         socket, SBX_TEST_DOCKER_TLS_SOCKET; run it in the clients' network
 *                         namespace: tests/docker/in-netns.sh)
 *   SBX_TEST_DOCKER_IMAGE the test image (tests/docker/mkimage.sh)
 *   SBX_TEST_DOCKER_REQUIRED=1: a missing engine fails instead of skipping (CI as root)
 * What a provider cannot do it declares (its traits, sbx/provider.h): the cases of a trait it
 * does not declare are skipped with the reason ("# SKIP provider 'docker' does not support
 * mounts"), and where a call exists for it, that call must fail with SBX_E_UNSUPPORTED and a
 * message; it never passes by doing nothing. Every sandbox the tests make is removed at exit,
 * also after failed checks. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sbx/time.h"
#include "tap.h"
#include "sbx/buf.h"
#include "sbx/docker.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/local.h"
#include "sbx/manifest.h"
#include "sbx/provider.h"
#include "sbx/session.h"
#include "sbx/snapshot.h"

/* How the tests reach a provider; what it can do comes from its traits. */
struct provider {
    const char *name;
    /* A command that dies of a signal on its own shows as exit status 128+N (the engine's
     * ExitCode; docs/internals/docker-provider.md), not as code -1 and the signal. */
    int signal_as_status;
    /* Its service has no listing (the Cloudflare Sandbox Bridge): sbx_client_list is
     * SBX_E_UNSUPPORTED, and the listing case is skipped saying so. */
    int no_listing;
};

static const struct provider providers[] = {
        {.name = "local"},
        {.name = "docker", .signal_as_status = 1},
        {.name = "lxd", .signal_as_status = 1},
        /* Kubernetes runs commands as the Docker provider does, through a shell preamble. */
        {.name = "kubernetes", .signal_as_status = 1},
        /* Through the preamble's shell, as docker (docs/internals/hosted-providers.md). */
        {.name = "e2b", .signal_as_status = 1},
        /* Through the preamble's shell (docs/internals/provider-daytona.md). */
        {.name = "daytona", .signal_as_status = 1},
        /* Through the preamble's shell too (docs/internals/provider-cloudflare.md). */
        {.name = "cloudflare", .signal_as_status = 1, .no_listing = 1},
        {.name = "runloop", .signal_as_status = 1},
        {.name = "vercel", .signal_as_status = 1},
        {.name = "blaxel", .signal_as_status = 1},
        /* The kubernetes provider's sbx-node mode (SBX_CONFORM_PROFILE): commands are the
         * daemon's local provider's, a signal is reported as one. */
        {.name = "kubernetes-sbx-node"},
};

static const struct provider *prov;
static struct provider any_prov;      /* a provider the table above does not name */
static struct sbx_provider_info info; /* its traits */
static json_t *json_opts;             /* SBX_CONFORM_OPTIONS */
static char tmp[256], run_dir[300], ws_dir[300], snap_dir[300], xdg_dir[300];
static char engine_sock[108];
static const char *engine_name = "docker";
static struct sbx_local_options local_opts;
static struct sbx_docker_options docker_opts;
static struct sbx_client *client;
static struct sbx_session *sess; /* the shared sandbox most cases run in */

#define MAX_CREATED 32
static char created[MAX_CREATED][80];
static size_t n_created;

static int is_docker(void)
{
    return strcmp(prov->name, "docker") == 0;
}

static int is_local(void)
{
    return strcmp(prov->name, "local") == 0;
}

/* The cases of a trait the provider does not declare are skipped, saying so: 1 to run them. */
static int need(unsigned trait)
{
    if (info.traits & trait)
        return 1;
    tap_count++;
    printf("ok %d # SKIP provider '%s' does not support %s\n", tap_count, prov->name,
           sbx_provider_trait_name(trait));
    return 0;
}

static void note_created(struct sbx_session *s)
{
    if (s && n_created < MAX_CREATED)
        snprintf(created[n_created++], sizeof(created[0]), "%s", sbx_session_id(s));
}

static int new_client(struct sbx_client **out, struct sbx_error *err)
{
    if (!is_docker() && !is_local())
        return sbx_client_new_json(prov->name, json_opts, out, err);
    const void *o = is_docker() ? (const void *)&docker_opts : (const void *)&local_opts;
    return sbx_client_new(prov->name, o, out, err);
}

static int create(const struct sbx_create_spec *spec, struct sbx_session **out,
                  struct sbx_error *err)
{
    int rc = sbx_client_create(client, spec, out, err);
    if (rc == 0)
        note_created(*out);
    return rc;
}

/* ---- a tiny HTTP/1.0 client: loopback TCP for ports, the engine's unix socket ---------- */

#define HTTP_MAX ((size_t)4 << 20)

/* Send one request on fd (taken: closed), read the whole answer within 10 s. Returns the status
 * code with the body in *body, or -1. */
static int http_on_host(int fd, const char *method, const char *path, const char *host,
                        struct sbx_buf *body)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_buf resp;
    sbx_buf_init(&resp, HTTP_MAX);
    int status = -1;
    char *req = sbx_xasprintf("%s %s HTTP/1.0\r\nHost: %s\r\n\r\n", method, path, host);
    if (sbx_fd_write_all(fd, req, strlen(req), &err) < 0)
        goto out;
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 10000) <= 0)
            goto out;
        char chunk[65536];
        ssize_t n = read(fd, chunk, sizeof(chunk));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            goto out;
        if (n == 0)
            break;
        if (sbx_buf_add(&resp, chunk, (size_t)n, &err) < 0)
            goto out;
    }
    const char *hdr_end = strstr(resp.data, "\r\n\r\n");
    if (!hdr_end || strncmp(resp.data, "HTTP/1.", 7) != 0 || resp.len < 12)
        goto out;
    status = (int)strtol(resp.data + 9, NULL, 10);
    size_t off = (size_t)(hdr_end + 4 - resp.data);
    if (sbx_buf_add(body, resp.data + off, resp.len - off, &err) < 0)
        status = -1;
out:
    free(req);
    sbx_buf_release(&resp);
    close(fd);
    return status;
}

static int http_on(int fd, const char *method, const char *path, struct sbx_buf *body)
{
    return http_on_host(fd, method, path, "localhost", body);
}

/* GET url, which must be http://127.0.0.1:PORT/...: nothing but loopback is ever contacted. */
/* A hosted provider's port URL (https://HOST) names a host its vendor's edge proxy routes
 * by: with SBX_CONFORM_PORT_PROXY (the loopback port of a test double of that proxy), the
 * request goes there with that Host. */
static int is_proxied(const char *url, long *port, const char **host, size_t *host_len)
{
    const char *proxy = getenv("SBX_CONFORM_PORT_PROXY");
    if (!proxy || strncmp(proxy, "127.0.0.1:", 10) != 0 || strncmp(url, "https://", 8) != 0)
        return 0;
    *port = strtol(proxy + 10, NULL, 10);
    *host = url + 8;
    *host_len = strcspn(*host, "/");
    return *port > 0 && *port < 65536 && *host_len > 0;
}

static int http_get_loopback(const char *url, const char *path, struct sbx_buf *body)
{
    const char *pre = "http://127.0.0.1:", *host = "localhost";
    size_t host_len = 9;
    char *end;
    long port = 0;
    int proxied = is_proxied(url, &port, &host, &host_len);
    if (!proxied && strncmp(url, pre, strlen(pre)) != 0)
        return -1;
    if (!proxied)
        port = strtol(url + strlen(pre), &end, 10);
    if (port <= 0 || port > 65535 || (!proxied && *end && strcmp(end, "/") != 0))
        return -1;
    char *h = sbx_xstrndup(host, host_len);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        free(h);
        return -1;
    }
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        close(fd);
        free(h);
        return -1;
    }
    int status = http_on_host(fd, "GET", path, h, body);
    free(h);
    return status;
}

static int engine_request(const char *method, const char *path, struct sbx_buf *body)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof(a.sun_path), "%s", engine_sock);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        close(fd);
        return -1;
    }
    return http_on(fd, method, path, body);
}

/* The ids of the engine's containers labelled io.sbx.id=id (all states), as a JSON array of
 * strings; NULL when the engine cannot be asked. Caller owns. */
static json_t *engine_containers(const char *id)
{
    struct sbx_buf b;
    sbx_buf_init(&b, HTTP_MAX);
    char *path = sbx_xasprintf("/v1.41/containers/json?all=1&filters="
                               "%%7B%%22label%%22%%3A%%5B%%22io.sbx.id%%3D%s%%22%%5D%%7D",
                               id);
    json_t *out = NULL;
    if (engine_request("GET", path, &b) == 200) {
        json_t *list = json_loadb(b.data, b.len, 0, NULL);
        if (json_is_array(list)) {
            out = json_array();
            size_t i;
            json_t *c;
            json_array_foreach(list, i, c) json_array_append(out, json_object_get(c, "Id"));
        }
        json_decref(list);
    }
    free(path);
    sbx_buf_release(&b);
    return out;
}

/* The engine's own per-container processes: podman's conmon stays up to 300 s after an exec
 * (and names the container), which no client can change; sbx's own processes (a supervisor,
 * a port relay) must be gone. */
static int engine_process(const char *argv0)
{
    const char *base = strrchr(argv0, '/');
    base = base ? base + 1 : argv0;
    return strcmp(base, "conmon") == 0 || strncmp(base, "containerd-shim", 15) == 0;
}

/* 1 when a host process's command line mentions s (the local supervisor is "__supervise ID"),
 * other than an engine's (engine_process). */
static int process_mentions(const char *s)
{
    DIR *d = opendir("/proc");
    if (!d)
        return 0;
    int found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d))) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 0 || pid == getpid())
            continue;
        char path[64], buf[4096];
        snprintf(path, sizeof(path), "/proc/%ld/cmdline", pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n > 0 && is_docker()) {
            buf[n] = '\0';
            if (engine_process(buf))
                continue;
        }
        for (ssize_t i = 0; i < n; i++)
            if (buf[i] == '\0')
                buf[i] = ' ';
        if (n > 0) {
            buf[n] = '\0';
            found = strstr(buf, s) != NULL;
        }
    }
    closedir(d);
    return found;
}

static int path_exists(const char *p)
{
    struct stat st;
    return lstat(p, &st) == 0;
}

/* Check that nothing of sandbox id is left: attach fails, and the provider's own traces. */
static void check_gone(const char *id)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_session *s = NULL;
    CHECK_ERR(sbx_client_attach(client, id, &s, &err), SBX_E_NOTFOUND, &err, NULL);
    sbx_session_free(s);
    /* The local provider's middle and inner processes die with the host-side one (a parent-death
     * signal), just after rm returned: a moment's wait, bounded. */
    int64_t deadline = sbx_deadline_after_ms(5000);
    while (process_mentions(id) && sbx_deadline_poll_ms(deadline) > 0)
        sbx_sleep_ms(20);
    if (!tap__result(!process_mentions(id), __FILE__, __LINE__, "no process of the sandbox"))
        printf("#   a process still names '%s'\n", id);
    if (is_docker()) {
        json_t *left = engine_containers(id);
        if (!tap__result(left && json_array_size(left) == 0, __FILE__, __LINE__,
                         "no container with its label"))
            printf("#   containers: %s\n", left ? sbx_json_dumps(left, 0) : "(engine error)");
        json_decref(left);
        char *relays = sbx_xasprintf("%s/sbx/docker/%s", xdg_dir, id);
        if (!tap__result(!path_exists(relays), __FILE__, __LINE__,
                         "its port relays' records removed"))
            printf("#   '%s' exists\n", relays);
        free(relays);
    } else if (is_local()) {
        char *rt = sbx_xasprintf("%s/%s", run_dir, id);
        char *ws = sbx_xasprintf("%s/%s", ws_dir, id);
        if (!tap__result(!path_exists(rt), __FILE__, __LINE__, "runtime directory removed"))
            printf("#   '%s' exists\n", rt);
        if (!tap__result(!path_exists(ws), __FILE__, __LINE__, "workspace removed"))
            printf("#   '%s' exists\n", ws);
        free(rt);
        free(ws);
    }
}

/* Remove every sandbox made here through c, then (docker) any container a failed remove left,
 * then the temporary directory. */
static void remove_everything(struct sbx_client *c)
{
    struct sbx_error err = SBX_ERROR_INIT;
    for (size_t i = 0; c && i < n_created; i++)
        (void)sbx_client_remove(c, created[i], 0, &err);
    for (size_t i = 0; is_docker() && i < n_created; i++) {
        json_t *left = engine_containers(created[i]);
        size_t j;
        json_t *id;
        json_array_foreach(left, j, id)
        {
            struct sbx_buf b;
            sbx_buf_init(&b, HTTP_MAX);
            char *path = sbx_xasprintf("/v1.41/containers/%s?force=1&v=1", json_string_value(id));
            (void)engine_request("DELETE", path, &b);
            free(path);
            sbx_buf_release(&b);
        }
        json_decref(left);
    }
    n_created = 0;
    if (tmp[0]) {
        char *slash = strrchr(tmp, '/');
        *slash = '\0';
        int dfd = open(tmp[0] ? tmp : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            (void)sbx_fs_remove(dfd, slash + 1, SBX_FS_RECURSIVE, &err);
            close(dfd);
        }
        tmp[0] = '\0';
    }
}

/* At exit, whatever failed. */
static void cleanup(void)
{
    sbx_session_free(sess);
    sess = NULL;
    remove_everything(client);
    sbx_client_free(client);
    client = NULL;
}

/* SIGTERM (meson's timeout) or SIGINT: the handler only writes the signal to a pipe; this
 * thread then cleans up with a client of its own (the main thread may be inside a call on the
 * shared ones) and exits. */
static int signal_pipe[2] = {-1, -1};

static void on_signal(int sig)
{
    unsigned char c = (unsigned char)sig;
    ssize_t n = write(signal_pipe[1], &c, 1);
    (void)n;
}

static void *signal_watcher(void *arg)
{
    (void)arg;
    unsigned char c = 0;
    while (read(signal_pipe[0], &c, 1) < 0 && errno == EINTR)
        ;
    printf("Bail out! signal %d: removing what the tests made\n", c);
    fflush(stdout);
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_client *c2 = NULL;
    if (prov && new_client(&c2, &err) == 0)
        remove_everything(c2);
    _exit(1);
}

static void watch_signals(void)
{
    pthread_t t;
    if (pipe2(signal_pipe, O_CLOEXEC) < 0 || pthread_create(&t, NULL, signal_watcher, NULL))
        abort();
    pthread_detach(t);
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
}

static void setup(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    const char *name = getenv("SBX_CONFORM_PROVIDER");
    /* The table's entry, when a mode of the provider behaves unlike the provider's default. */
    const char *profile = getenv("SBX_CONFORM_PROFILE");
    name = name && name[0] ? name : "local";
    profile = profile && profile[0] ? profile : name;
    for (size_t i = 0; i < sizeof(providers) / sizeof(providers[0]); i++)
        if (strcmp(providers[i].name, profile) == 0)
            prov = &providers[i];
    if (prov && prov->name != name && strcmp(prov->name, name) != 0) {
        any_prov = *prov; /* the profile's behaviour under the provider's name */
        any_prov.name = name;
        prov = &any_prov;
    }
    if (sbx_provider_find(name, &info, &err) < 0) {
        printf("Bail out! SBX_CONFORM_PROVIDER: %s\n", err.msg);
        exit(1);
    }
    if (!prov) {
        any_prov.name = info.name;
        prov = &any_prov;
    }
    if (!is_docker() && !is_local()) {
        const char *o = getenv("SBX_CONFORM_OPTIONS");
        json_opts = json_loads(o && o[0] ? o : "{}", 0, NULL);
        if (!json_is_object(json_opts)) {
            printf("Bail out! SBX_CONFORM_OPTIONS is not a JSON object\n");
            exit(1);
        }
    }
    const char *required = getenv("SBX_TEST_DOCKER_REQUIRED");
    int must = required && strcmp(required, "1") == 0;
    if (is_docker()) {
        const char *e = getenv("SBX_CONFORM_ENGINE");
        engine_name = e && e[0] ? e : "docker";
        int tls = strcmp(engine_name, "docker-tls") == 0;
        const char *host = getenv(strcmp(engine_name, "podman") == 0 ? "SBX_TEST_PODMAN_HOST"
                                  : tls                              ? "SBX_TEST_DOCKER_TLS_SOCKET"
                                                                     : "SBX_TEST_DOCKER_HOST");
        const char *image = getenv("SBX_TEST_DOCKER_IMAGE");
        if (tls)
            must = getenv("SBX_TEST_DOCKER_TLS_REQUIRED") &&
                   strcmp(getenv("SBX_TEST_DOCKER_TLS_REQUIRED"), "1") == 0;
        if (host && strncmp(host, "unix://", 7) == 0)
            host += 7;
        if (!host || !host[0] || !image || !image[0]) {
            if (must) {
                printf("Bail out! no %s engine (SBX_TEST_DOCKER_REQUIRED=1)\n", engine_name);
                exit(1);
            }
            printf("1..0 # SKIP no %s engine given (scripts/check starts one: "
                   "tests/docker/engines.sh)\n",
                   engine_name);
            exit(0);
        }
        snprintf(engine_sock, sizeof(engine_sock), "%s", host);
        docker_opts.host = engine_sock;
        docker_opts.image = image;
        const char *certs = getenv("SBX_TEST_DOCKER_TLS_CERTS");
        if (tls && (!getenv("SBX_TEST_DOCKER_TLS_HOST") || !certs)) {
            printf("Bail out! SBX_TEST_DOCKER_TLS_HOST and SBX_TEST_DOCKER_TLS_CERTS are needed\n");
            exit(1);
        }
        if (tls) {
            static char ca[512], cert[512], key[512];
            snprintf(ca, sizeof(ca), "%s/ca.crt", certs);
            snprintf(cert, sizeof(cert), "%s/client.crt", certs);
            snprintf(key, sizeof(key), "%s/client.key", certs);
            docker_opts.host = getenv("SBX_TEST_DOCKER_TLS_HOST");
            docker_opts.tls_ca = ca;
            docker_opts.tls_cert = cert;
            docker_opts.tls_key = key;
        }
    }

    const char *t = getenv("TMPDIR");
    snprintf(tmp, sizeof(tmp), "%s/sbx-conform.XXXXXX", t && t[0] ? t : "/tmp");
    if (!mkdtemp(tmp)) {
        printf("Bail out! mkdtemp '%s': %s\n", tmp, strerror(errno));
        exit(1);
    }
    atexit(cleanup);
    snprintf(run_dir, sizeof(run_dir), "%s/run", tmp);
    snprintf(ws_dir, sizeof(ws_dir), "%s/ws", tmp);
    snprintf(snap_dir, sizeof(snap_dir), "%s/snapshots", tmp);
    mkdir(run_dir, 0700);
    /* The runtime base of the providers that keep host-side records there (the docker
     * provider's port relays): this run's own, so that check_gone sees what the run left. */
    snprintf(xdg_dir, sizeof(xdg_dir), "%s/xdg", tmp);
    mkdir(xdg_dir, 0700);
    setenv("XDG_RUNTIME_DIR", xdg_dir, 1);
    /* The default store, where sbx_create_spec.snapshot references are looked up, and where
     * stopped local sandboxes are kept. */
    setenv("SBX_SNAPSHOTS", snap_dir, 1);
    char *stopped = sbx_xasprintf("%s/stopped", tmp);
    setenv("SBX_STOPPED", stopped, 1);
    free(stopped);
    /* A crashed test process takes its local sandboxes with it. */
    local_opts =
            (struct sbx_local_options){.runtime_dir = run_dir, .workspace_dir = ws_dir, .tied = 1};

    int rc = new_client(&client, &err);
    if (rc == -SBX_E_NOTFOUND && !must) {
        printf("1..0 # SKIP provider '%s' is not built in: %s\n", prov->name, err.msg);
        exit(0);
    }
    if (rc < 0) {
        printf("Bail out! client for '%s': %s\n", prov->name, err.msg);
        exit(1);
    }
    printf("# provider %s%s%s\n", prov->name, is_docker() ? " on " : "",
           is_docker() ? engine_name : "");
}

/* Run a shell command in s; the result must be released. */
static int sh_in(struct sbx_session *s, const char *cmd, struct sbx_exec_result *r,
                 struct sbx_error *err)
{
    struct sbx_exec_spec spec = {.command = cmd};
    memset(r, 0, sizeof(*r));
    return sbx_session_exec(s, &spec, r, err);
}

/* The stdout of a shell command that must exit 0 (caller frees), or NULL. */
static char *out_of(struct sbx_session *s, const char *cmd)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_exec_result r;
    if (sh_in(s, cmd, &r, &err) < 0) {
        printf("#   '%s': %s\n", cmd, err.msg);
        return NULL;
    }
    char *out = NULL;
    if (r.status.code == 0)
        out = sbx_xstrdup(r.out.data);
    else
        printf("#   '%s' exited %d: %s\n", cmd, r.status.code, r.err.data);
    sbx_exec_result_release(&r);
    return out;
}

#define CHECK_OUT(s, cmd, want)            \
    do {                                   \
        char *tap_o_ = out_of((s), (cmd)); \
        CHECK_EQ_STR(tap_o_, (want));      \
        free(tap_o_);                      \
    } while (0)

/* ---- the cases ------------------------------------------------------------------------- */

static void test_create_from_manifest(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_manifest *m = sbx_manifest_new();
    struct sbx_manifest_entry_opts secret = {.mode = 0600};
    struct sbx_manifest_entry_opts exe = {.mode = 0755};
    struct sbx_manifest_entry_opts priv = {.mode = 0700};
    CHECK_OK(sbx_manifest_add_file(m, "hello.txt", "hello\n", 6, NULL, &err), &err);
    CHECK_OK(sbx_manifest_add_file(m, "secret.txt", "s3cret", 6, &secret, &err), &err);
    const char *script = "#!/bin/sh\necho \"run:$GREETING\"\n";
    CHECK_OK(sbx_manifest_add_file(m, "bin/run.sh", script, strlen(script), &exe, &err), &err);
    CHECK_OK(sbx_manifest_add_file(m, "deep/a/b/c.txt", "nested", 6, NULL, &err), &err);
    CHECK_OK(sbx_manifest_add_dir(m, "empty", &priv, &err), &err);
    CHECK_OK(sbx_manifest_set_env(m, "GREETING", "hi there", 0, &err), &err);
    CHECK_OK(sbx_manifest_set_env(m, "TOKEN", "tok-s3cret", SBX_MANIFEST_ENV_SECRET, &err), &err);
    struct sbx_create_spec spec = {.manifest = m};
    CHECK_OK(create(&spec, &sess, &err), &err);
    sbx_manifest_free(m);
    if (!sess) {
        printf("Bail out! cannot create a sandbox: %s\n", err.msg);
        exit(1);
    }
    CHECK_EQ_STR(sbx_session_provider(sess), prov->name);
    CHECK(sbx_session_id(sess) && sbx_session_id(sess)[0]);
    CHECK_OUT(sess, "cat hello.txt deep/a/b/c.txt", "hello\nnested");
    CHECK_OUT(sess, "stat -c '%a %n' hello.txt secret.txt bin/run.sh bin empty deep/a/b",
              "644 hello.txt\n600 secret.txt\n755 bin/run.sh\n755 bin\n700 empty\n755 deep/a/b\n");
    CHECK_OUT(sess, "wc -c < secret.txt", "6\n");
    CHECK_OUT(sess, "ls -A empty | wc -l", "0\n");
    CHECK_OUT(sess, "./bin/run.sh", "run:hi there\n");
    CHECK_OUT(sess, "echo \"$TOKEN\"", "tok-s3cret\n");
    char *pwd = sbx_xasprintf("%s\n", sbx_session_root(sess));
    CHECK_OUT(sess, "pwd", pwd);
    free(pwd);
    /* the harness's environment does not leak in; the exec's own env applies over the
     * manifest's */
    setenv("SBX_CONFORM_LEAK", "leak", 1);
    CHECK_OUT(sess, "echo \"[$SBX_CONFORM_LEAK]\"", "[]\n");
    unsetenv("SBX_CONFORM_LEAK");
    const char *const env[] = {"GREETING=over", NULL};
    struct sbx_exec_spec e = {.command = "echo \"$GREETING\"", .env = env};
    struct sbx_exec_result r;
    CHECK_OK(sbx_session_exec(sess, &e, &r, &err), &err);
    CHECK_EQ_STR(r.out.data, "over\n");
    sbx_exec_result_release(&r);
}

static void test_exit_codes(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_exec_result r;
    const char *const argv[] = {"printf", "%s-%s", "a b", "c", NULL};
    struct sbx_exec_spec spec = {.argv = argv};
    CHECK_OK(sbx_session_exec(sess, &spec, &r, &err), &err);
    CHECK_EQ_STR(r.out.data, "a b-c");
    CHECK_EQ_INT(r.status.code, 0);
    sbx_exec_result_release(&r);

    CHECK_OK(sh_in(sess, "exit 3", &r, &err), &err);
    CHECK_EQ_INT(r.status.code, 3);
    CHECK_EQ_INT(r.status.signal, 0);
    CHECK(!r.status.timed_out);
    sbx_exec_result_release(&r);

    CHECK_OK(sh_in(sess, "kill -USR1 $$", &r, &err), &err);
    CHECK_EQ_INT(r.status.code, prov->signal_as_status ? 128 + SIGUSR1 : -1);
    CHECK_EQ_INT(r.status.signal, prov->signal_as_status ? 0 : SIGUSR1);
    CHECK(!r.status.timed_out);
    sbx_exec_result_release(&r);

    CHECK_OK(sh_in(sess, "no-such-program-sbx", &r, &err), &err);
    CHECK_EQ_INT(r.status.code, 127);
    sbx_exec_result_release(&r);

    const char *const missing[] = {"no-such-program-sbx", NULL};
    struct sbx_exec_spec m = {.argv = missing};
    CHECK_ERR(sbx_session_exec(sess, &m, &r, &err), SBX_E_EXEC, &err,
              "command 'no-such-program-sbx' not found");
    struct sbx_exec_spec both = {.argv = argv, .command = "true"};
    CHECK_ERR(sbx_session_exec(sess, &both, &r, &err), SBX_E_INVAL, &err, "exactly one");
}

static void test_streams(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_exec_result r;
    CHECK_OK(sh_in(sess, "echo out; echo err >&2; echo out2", &r, &err), &err);
    CHECK_EQ_STR(r.out.data, "out\nout2\n");
    CHECK_EQ_STR(r.err.data, "err\n");
    sbx_exec_result_release(&r);

    struct sbx_exec_spec merged = {.command = "echo a; sleep 0.1; echo b >&2; sleep 0.1; echo c",
                                   .flags = SBX_EXEC_MERGE_STDERR};
    CHECK_OK(sbx_session_exec(sess, &merged, &r, &err), &err);
    CHECK_EQ_STR(r.out.data, "a\nb\nc\n");
    CHECK_EQ_INT(r.err.len, 0);
    sbx_exec_result_release(&r);

    /* 8 MiB, more than the limit: head and tail kept, the rest counted */
    struct sbx_exec_spec big = {
            .command = "echo BEGIN; head -c 8388608 /dev/zero | tr '\\0' x; echo; echo END",
            .output_limit = 65536};
    CHECK_OK(sbx_session_exec(sess, &big, &r, &err), &err);
    CHECK_EQ_INT(r.status.code, 0);
    CHECK_EQ_INT(r.out.total, 8388608ull + 6 + 1 + 4);
    CHECK_EQ_INT(r.out.len, 65536);
    CHECK_EQ_INT(r.out.head_len, 32768);
    CHECK_EQ_INT(r.out.dropped, r.out.total - 65536);
    CHECK(r.out.data && strncmp(r.out.data, "BEGIN\nxxx", 9) == 0);
    CHECK(r.out.data && strcmp(r.out.data + r.out.len - 8, "xxx\nEND\n") == 0);
    sbx_exec_result_release(&r);

    /* the same on stderr, with the default limit: all 8 MiB would not fit in 1 MiB */
    struct sbx_exec_spec bigerr = {.command = "head -c 8388608 /dev/zero >&2"};
    CHECK_OK(sbx_session_exec(sess, &bigerr, &r, &err), &err);
    CHECK_EQ_INT(r.err.total, 8388608);
    CHECK_EQ_INT(r.err.len, SBX_OUTPUT_DEFAULT_LIMIT);
    CHECK_EQ_INT(r.out.total, 0);
    sbx_exec_result_release(&r);
}

static void test_stdin(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_exec_result r;
    size_t n = 1 << 20;
    char *data = malloc(n);
    for (size_t i = 0; i < n; i++)
        data[i] = (char)('a' + i % 26);
    const char *const cat[] = {"cat", NULL};
    struct sbx_exec_spec spec = {.argv = cat, .input = data, .input_len = n, .output_limit = n};
    CHECK_OK(sbx_session_exec(sess, &spec, &r, &err), &err);
    CHECK_EQ_MEM(r.out.data, r.out.len, data, n);
    sbx_exec_result_release(&r);
    /* a command that never reads its input neither hangs nor fails */
    const char *const tru[] = {"true", NULL};
    struct sbx_exec_spec t = {.argv = tru, .input = data, .input_len = n};
    CHECK_OK(sbx_session_exec(sess, &t, &r, &err), &err);
    CHECK_EQ_INT(r.status.code, 0);
    sbx_exec_result_release(&r);
    /* without input, stdin is empty */
    CHECK_OK(sh_in(sess, "wc -c", &r, &err), &err);
    CHECK_EQ_INT(strtol(r.out.data, NULL, 10), 0);
    sbx_exec_result_release(&r);
    free(data);
}

static void test_timeout(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_exec_result r;
    struct sbx_exec_spec stubborn = {.command = "trap '' TERM; echo ready; sleep 30; echo never",
                                     .timeout_ms = 1000,
                                     .kill_grace_ms = 300};
    CHECK_OK(sbx_session_exec(sess, &stubborn, &r, &err), &err);
    CHECK(r.status.timed_out);
    CHECK_EQ_INT(r.status.signal, SIGKILL);
    CHECK_EQ_STR(r.out.data, "ready\n");
    sbx_exec_result_release(&r);
    struct sbx_exec_spec polite = {.command = "exec sleep 30", .timeout_ms = 300};
    CHECK_OK(sbx_session_exec(sess, &polite, &r, &err), &err);
    CHECK(r.status.timed_out);
    CHECK_EQ_INT(r.status.signal, SIGTERM);
    sbx_exec_result_release(&r);
    /* nothing of the killed commands is left running */
    CHECK_OUT(sess, "ps -A -o args | grep -c '^[s]leep 30'; true", "0\n");
}

static volatile sig_atomic_t cancel_flag;

static void *set_cancel_later(void *arg)
{
    (void)arg;
    struct timespec d = {.tv_nsec = 300 * 1000 * 1000};
    nanosleep(&d, NULL);
    cancel_flag = 1;
    return NULL;
}

static void test_cancel(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_exec_result r = {0};
    cancel_flag = 0;
    pthread_t t;
    pthread_create(&t, NULL, set_cancel_later, NULL);
    struct sbx_exec_spec spec = {.command = "exec sleep 30", .cancel = &cancel_flag};
    CHECK_ERR(sbx_session_exec(sess, &spec, &r, &err), SBX_E_CANCELLED, &err, "cancelled");
    pthread_join(t, NULL);
    /* a flag set before the call cancels at once; the sandbox goes on serving */
    CHECK_ERR(sbx_session_exec(sess, &spec, &r, &err), SBX_E_CANCELLED, &err, NULL);
    CHECK_OUT(sess, "ps -A -o args | grep -c '^[s]leep 30'; true", "0\n");
    CHECK_OUT(sess, "echo still", "still\n");
}

static void test_pty(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_pty_update u;
    if (!(info.traits & SBX_PROVIDER_PTY)) {
        struct sbx_exec_result r = {0};
        struct sbx_exec_spec tty = {.command = "true", .flags = SBX_EXEC_TTY};
        CHECK_ERR(sbx_session_exec(sess, &tty, &r, &err), SBX_E_UNSUPPORTED, &err, NULL);
        need(SBX_PROVIDER_PTY);
        return;
    }
    const char *const shargv[] = {"/bin/sh", NULL};
    struct sbx_exec_spec spec = {.argv = shargv, .flags = SBX_EXEC_TTY};
    CHECK_OK(sbx_session_pty_start(sess, &spec, 300, &u, &err), &err);
    int id = u.id;
    CHECK(id > 0);
    CHECK(!u.exited);
    sbx_pty_update_release(&u);
    const char *cmd = "echo $((6*7)); tty\n";
    CHECK_OK(sbx_session_pty_write(sess, id, cmd, strlen(cmd), 2000, 0, &u, &err), &err);
    CHECK_CONTAINS(u.output.data, "42");
    CHECK_CONTAINS(u.output.data, "/dev/pts/");
    sbx_pty_update_release(&u);
    CHECK_OK(sbx_session_pty_resize(sess, id, 33, 111, &err), &err);
    cmd = "stty size\n";
    CHECK_OK(sbx_session_pty_write(sess, id, cmd, strlen(cmd), 2000, 0, &u, &err), &err);
    CHECK_CONTAINS(u.output.data, "33 111");
    sbx_pty_update_release(&u);
    cmd = "exit 5\n";
    CHECK_OK(sbx_session_pty_write(sess, id, cmd, strlen(cmd), 5000, 0, &u, &err), &err);
    CHECK(u.exited);
    CHECK_EQ_INT(u.status.code, 5);
    CHECK_EQ_INT(u.id, 0);
    sbx_pty_update_release(&u);
    CHECK_ERR(sbx_session_pty_write(sess, id, "x", 1, 250, 0, &u, &err), SBX_E_NOTFOUND, &err,
              "no process with id");

    /* a one-shot command on a terminal: output through the tty, input typed on it */
    struct sbx_exec_result r;
    struct sbx_exec_spec tty = {.command = "test -t 0 && test -t 1 && read x && echo \"got $x\"",
                                .flags = SBX_EXEC_TTY,
                                .input = "typed\n",
                                .input_len = 6};
    CHECK_OK(sbx_session_exec(sess, &tty, &r, &err), &err);
    CHECK_EQ_INT(r.status.code, 0);
    CHECK_CONTAINS(r.out.data, "got typed\r\n");
    sbx_exec_result_release(&r);
}

static void fill_pattern(char *p, size_t n)
{
    uint32_t x = 2463534242u;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = (char)x;
    }
}

static void test_files(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    size_t n = 5u << 20;
    char *data = malloc(n);
    fill_pattern(data, n);
    struct sbx_buf b;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);

    /* write and read back 5 MiB; the command sees the same bytes */
    CHECK_OK(sbx_session_write(sess, "io/big.bin", data, n, 0640, SBX_WRITE_PARENTS, &err), &err);
    CHECK_OK(sbx_session_read(sess, "io/big.bin", 0, &b, &err), &err);
    CHECK_EQ_MEM(b.data, b.len, data, n);
    sbx_buf_reset(&b);
    CHECK_OUT(sess, "wc -c < io/big.bin", "5242880\n");
    CHECK_ERR(sbx_session_read(sess, "io/big.bin", 1024, &b, &err), SBX_E_TOOBIG, &err, NULL);

    /* streaming: read_open, then write_fd of what it gives */
    int fd = -1;
    uint64_t size = 0;
    CHECK_OK(sbx_session_read_open(sess, "io/big.bin", &fd, &size, &err), &err);
    CHECK_EQ_INT(size, n);
    if (fd >= 0) {
        CHECK_OK(sbx_fd_read_all(fd, n + 1, &b, &err), &err);
        CHECK_EQ_MEM(b.data, b.len, data, n);
        sbx_buf_reset(&b);
        close(fd);
    }
    char *host = sbx_xasprintf("%s/big.bin", tmp);
    fd = open(host, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    CHECK(fd >= 0 && write(fd, data, n) == (ssize_t)n && lseek(fd, 0, SEEK_SET) == 0);
    CHECK_OK(sbx_session_write_fd(sess, "io/copy.bin", fd, 0, 0600, 0, &err), &err);
    CHECK_OK(sbx_session_read(sess, "io/copy.bin", 0, &b, &err), &err);
    CHECK_EQ_MEM(b.data, b.len, data, n);
    sbx_buf_reset(&b);
    /* past max nothing is written */
    CHECK(lseek(fd, 0, SEEK_SET) == 0);
    CHECK_ERR(sbx_session_write_fd(sess, "io/cut.bin", fd, 4096, 0, 0, &err), SBX_E_TOOBIG, &err,
              NULL);
    close(fd);
    unlink(host);
    free(host);

    /* stat and ls */
    struct sbx_dirent d = {0};
    CHECK_OK(sbx_session_stat(sess, "io/big.bin", &d, &err), &err);
    CHECK_EQ_STR(d.name, "big.bin");
    CHECK(d.type == SBX_FILE_REGULAR);
    CHECK_EQ_INT(d.mode, 0640);
    CHECK_EQ_INT(d.size, n);
    sbx_dirent_release(&d);
    CHECK_ERR(sbx_session_stat(sess, "io/cut.bin", &d, &err), SBX_E_NOTFOUND, &err, NULL);
    CHECK_OK(sbx_session_write(sess, "io/small", "12", 2, 0, 0, &err), &err);
    struct sbx_exec_result r;
    CHECK_OK(sh_in(sess, "ln -s small io/link && mkdir io/sub", &r, &err), &err);
    sbx_exec_result_release(&r);
    struct sbx_dirlist l = {0};
    CHECK_OK(sbx_session_ls(sess, "io", &l, &err), &err);
    CHECK_EQ_INT(l.n, 5);
    if (l.n == 5) {
        CHECK_EQ_STR(l.v[0].name, "big.bin");
        CHECK_EQ_STR(l.v[1].name, "copy.bin");
        CHECK_EQ_INT(l.v[1].mode, 0600);
        CHECK_EQ_STR(l.v[2].name, "link");
        CHECK(l.v[2].type == SBX_FILE_SYMLINK);
        CHECK_EQ_STR(l.v[2].target, "small");
        CHECK_EQ_STR(l.v[3].name, "small");
        CHECK_EQ_INT(l.v[3].size, 2);
        CHECK_EQ_STR(l.v[4].name, "sub");
        CHECK(l.v[4].type == SBX_FILE_DIR);
    }
    sbx_dirlist_release(&l);

    /* mkdir, chmod, rm */
    CHECK_ERR(sbx_session_mkdir(sess, "m/n/o", 0, &err), SBX_E_NOTFOUND, &err, NULL);
    CHECK_OK(sbx_session_mkdir(sess, "m/n/o", SBX_MKDIR_PARENTS, &err), &err);
    CHECK_OK(sbx_session_mkdir(sess, "m/n/o", SBX_MKDIR_PARENTS, &err), &err);
    CHECK_ERR(sbx_session_mkdir(sess, "m/n/o", 0, &err), SBX_E_EXISTS, &err, NULL);
    CHECK_OK(sbx_session_write(sess, "m/n/o/f", "x", 1, 0, 0, &err), &err);
    CHECK_OK(sbx_session_chmod(sess, "m/n/o/f", 0751, &err), &err);
    CHECK_OK(sbx_session_chmod(sess, "m/n", 0700, &err), &err);
    CHECK_OUT(sess, "stat -c %a m/n/o/f m/n", "751\n700\n");
    CHECK_OK(sbx_session_chmod(sess, "m/n/o/f", 04755, &err), &err);
    CHECK_OUT(sess, "stat -c %a m/n/o/f", "755\n"); /* setuid dropped */
    CHECK_ERR(sbx_session_chmod(sess, "io/link", 0600, &err), SBX_E_PERM, &err, NULL);
    CHECK_ERR(sbx_session_rm(sess, "m", 0, &err), SBX_E_INVAL, &err, NULL);
    CHECK_OK(sbx_session_rm(sess, "m", SBX_RM_RECURSIVE, &err), &err);
    CHECK_ERR(sbx_session_stat(sess, "m", &d, &err), SBX_E_NOTFOUND, &err, NULL);
    CHECK_ERR(sbx_session_rm(sess, "m", 0, &err), SBX_E_NOTFOUND, &err, NULL);
    CHECK_OK(sbx_session_rm(sess, "m", SBX_RM_FORCE, &err), &err);
    CHECK_OK(sbx_session_rm(sess, "io/link", 0, &err), &err); /* the link, not its target */
    CHECK_OUT(sess, "cat io/small", "12");
    CHECK_ERR(sbx_session_rm(sess, "", SBX_RM_RECURSIVE, &err), SBX_E_PERM, &err, "root");
    CHECK_OK(sbx_session_rm(sess, "io", SBX_RM_RECURSIVE, &err), &err);
    sbx_buf_release(&b);
    free(data);
}

static void test_escapes(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_buf b;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    struct sbx_dirlist l = {0};
    struct sbx_dirent d = {0};
    /* by name */
    CHECK_ERR(sbx_session_read(sess, "../x", 0, &b, &err), SBX_E_INVAL, &err, "'..'");
    CHECK_ERR(sbx_session_write(sess, "a/../../x", "x", 1, 0, 0, &err), SBX_E_INVAL, &err, NULL);
    CHECK_ERR(sbx_session_read(sess, "/etc/passwd", 0, &b, &err), SBX_E_INVAL, &err, NULL);
    CHECK_ERR(sbx_session_write(sess, "/tmp/sbx-x", "x", 1, 0, 0, &err), SBX_E_INVAL, &err, NULL);
    CHECK_ERR(sbx_session_ls(sess, "/", &l, &err), SBX_E_INVAL, &err, NULL);
    CHECK_ERR(sbx_session_rm(sess, "..", SBX_RM_RECURSIVE, &err), SBX_E_INVAL, &err, NULL);
    struct sbx_exec_result r;
    struct sbx_exec_spec cwd = {.command = "pwd", .cwd = "../"};
    CHECK_ERR(sbx_session_exec(sess, &cwd, &r, &err), SBX_E_INVAL, &err, "'..'");

    /* through symlinks a command planted inside */
    CHECK_OK(sh_in(sess,
                   "mkdir -p esc && ln -s /etc/passwd esc/pw && ln -s /etc esc/etc && "
                   "ln -s .. esc/up && ln -s ../.. esc/up2 && ln -s / esc/root",
                   &r, &err),
             &err);
    CHECK_EQ_INT(r.status.code, 0);
    sbx_exec_result_release(&r);
    CHECK_ERR(sbx_session_read(sess, "esc/pw", 0, &b, &err), SBX_E_PERM, &err, NULL);
    CHECK_ERR(sbx_session_read(sess, "esc/etc/passwd", 0, &b, &err), SBX_E_PERM, &err, NULL);
    CHECK_ERR(sbx_session_read(sess, "esc/up2/etc/passwd", 0, &b, &err), SBX_E_PERM, &err, NULL);
    CHECK_ERR(sbx_session_write(sess, "esc/etc/sbx-x", "x", 1, 0, 0, &err), SBX_E_PERM, &err, NULL);
    CHECK_ERR(sbx_session_write(sess, "esc/up2/sbx-x", "x", 1, 0, 0, &err), SBX_E_PERM, &err, NULL);
    CHECK_ERR(sbx_session_mkdir(sess, "esc/root/sbx-x", SBX_MKDIR_PARENTS, &err), SBX_E_PERM, &err,
              NULL);
    CHECK_ERR(sbx_session_ls(sess, "esc/etc", &l, &err), SBX_E_PERM, &err, NULL);
    CHECK_ERR(sbx_session_stat(sess, "esc/etc/passwd", &d, &err), SBX_E_PERM, &err, NULL);
    CHECK_ERR(sbx_session_chmod(sess, "esc/etc/passwd", 0666, &err), SBX_E_PERM, &err, NULL);
    CHECK_ERR(sbx_session_rm(sess, "esc/etc/passwd", 0, &err), SBX_E_PERM, &err, NULL);
    int fd = -1;
    CHECK_ERR(sbx_session_read_open(sess, "esc/pw", &fd, NULL, &err), SBX_E_PERM, &err, NULL);
    struct sbx_exec_spec in = {.command = "pwd", .cwd = "esc/root"};
    CHECK_ERR(sbx_session_exec(sess, &in, &r, &err), SBX_E_PERM, &err, NULL);
    /* "up" points at the workspace's parent: out too */
    CHECK_ERR(sbx_session_ls(sess, "esc/up/..", &l, &err), SBX_E_INVAL, &err, NULL);
    CHECK_ERR(sbx_session_read(sess, "esc/up2/x", 0, &b, &err), SBX_E_PERM, &err, NULL);
    /* writing over a planted link replaces the link, never its target */
    CHECK_OK(sbx_session_write(sess, "esc/pw", "mine", 4, 0, 0, &err), &err);
    CHECK_OK(sbx_session_stat(sess, "esc/pw", &d, &err), &err);
    CHECK(d.type == SBX_FILE_REGULAR);
    sbx_dirent_release(&d);
    CHECK_OUT(sess, "grep -c '^root:' /etc/passwd", "1\n");
    /* removing a link to a directory removes the link only */
    CHECK_OK(sbx_session_rm(sess, "esc/root", SBX_RM_RECURSIVE, &err), &err);
    CHECK_OUT(sess, "test -d /etc && test -f /etc/passwd && echo intact", "intact\n");
    CHECK_OK(sbx_session_rm(sess, "esc", SBX_RM_RECURSIVE, &err), &err);
    sbx_buf_release(&b);
}

static void test_ports(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char *url = NULL;
    if (!(info.traits & SBX_PROVIDER_PORTS)) {
        CHECK_ERR(sbx_session_resolve_port(sess, 8731, &url, &err), SBX_E_UNSUPPORTED, &err, NULL);
        free(url);
        need(SBX_PROVIDER_PORTS);
        return;
    }
    CHECK_ERR(sbx_session_resolve_port(sess, 0, &url, &err), SBX_E_INVAL, &err, NULL);
    CHECK_ERR(sbx_session_resolve_port(sess, 7, &url, &err), SBX_E_NOTFOUND, &err, NULL);
    free(url); /* set only when the check above failed */
    url = NULL;
    CHECK_OK(sbx_session_write(sess, "www/hello.txt", "hello over http\n", 16, 0, SBX_WRITE_PARENTS,
                               &err),
             &err);
    struct sbx_pty_update u;
    struct sbx_exec_spec server = {
            .command = "exec python3 -m http.server 8731 --bind 127.0.0.1 --directory www"};
    CHECK_OK(sbx_session_pty_start(sess, &server, 250, &u, &err), &err);
    int id = u.id;
    CHECK(id > 0);
    if (id == 0)
        printf("#   the server ended: %s\n", u.output.data);
    sbx_pty_update_release(&u);
    /* wait (bounded, 10 s) until it listens, from inside */
    struct sbx_exec_result r;
    CHECK_OK(sh_in(sess,
                   "i=0; while [ $i -lt 100 ]; do python3 -c 'import socket; "
                   "socket.create_connection((\"127.0.0.1\", 8731))' 2>/dev/null && exit 0; "
                   "i=$((i+1)); sleep 0.1; done; exit 1",
                   &r, &err),
             &err);
    CHECK_EQ_INT(r.status.code, 0);
    sbx_exec_result_release(&r);
    int rc = sbx_session_resolve_port(sess, 8731, &url, &err);
    CHECK_OK(rc, &err);
    if (rc == 0) {
        long pport;
        const char *phost;
        size_t plen;
        CHECK(strncmp(url, "http://127.0.0.1:", 17) == 0 || is_proxied(url, &pport, &phost, &plen));
        struct sbx_buf body;
        sbx_buf_init(&body, HTTP_MAX);
        CHECK_EQ_INT(http_get_loopback(url, "/hello.txt", &body), 200);
        CHECK_EQ_STR(body.data, "hello over http\n");
        sbx_buf_reset(&body);
        CHECK_EQ_INT(http_get_loopback(url, "/missing", &body), 404);
        sbx_buf_release(&body);
        /* the same port resolves to the same URL */
        char *again = NULL;
        CHECK_OK(sbx_session_resolve_port(sess, 8731, &again, &err), &err);
        CHECK_EQ_STR(again, url);
        free(again);
        free(url);
    }
    if (id > 0)
        CHECK_OK(sbx_session_pty_kill(sess, id, &err), &err);
    CHECK_OK(sbx_session_rm(sess, "www", SBX_RM_RECURSIVE, &err), &err);
}

static void test_state_resume_attach(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    json_t *state = NULL, *parsed = NULL;
    char *text = NULL;
    if (!need(SBX_PROVIDER_RESUME))
        return;
    CHECK_OK(sbx_session_write(sess, "marker", "here", 4, 0, 0, &err), &err);
    CHECK_OK(sbx_session_state(sess, &state, &err), &err);
    CHECK_EQ_STR(json_string_value(json_object_get(state, "provider")), prov->name);
    CHECK_EQ_STR(json_string_value(json_object_get(state, "id")), sbx_session_id(sess));
    CHECK_EQ_INT(json_integer_value(json_object_get(state, "version")), SBX_SESSION_STATE_VERSION);
    CHECK_OK(sbx_session_state_serialize(state, &text, &err), &err);
    CHECK(text && !strstr(text, "tok-s3cret")); /* a secret's value is never in a state */
    if (text)
        CHECK_OK(sbx_session_state_parse(text, strlen(text), &parsed, &err), &err);
    free(text);

    /* a fresh client, as a later process would make */
    struct sbx_client *other = NULL;
    CHECK_OK(new_client(&other, &err), &err);
    struct sbx_session *s = NULL;
    if (other && parsed) {
        CHECK_OK(sbx_client_resume(other, parsed, &s, &err), &err);
        if (s) {
            CHECK_EQ_STR(sbx_session_id(s), sbx_session_id(sess));
            CHECK_OUT(s, "cat marker", "here");
            sbx_session_free(s);
            s = NULL;
        }
        CHECK_OK(sbx_client_attach(other, sbx_session_id(sess), &s, &err), &err);
        if (s) {
            CHECK_EQ_STR(sbx_session_root(s), sbx_session_root(sess));
            CHECK_OUT(s, "cat marker; echo \" $GREETING\"", "here hi there\n");
            sbx_session_free(s);
            s = NULL;
        }
        json_t *list = NULL;
        if (prov->no_listing) {
            CHECK_ERR(sbx_client_list(other, &list, &err), SBX_E_UNSUPPORTED, &err, NULL);
            tap_count++;
            printf("ok %d # SKIP provider '%s' lists no sandboxes: %s\n", tap_count, prov->name,
                   err.msg);
        } else {
            CHECK_OK(sbx_client_list(other, &list, &err), &err);
            int found = 0;
            size_t i;
            json_t *v;
            json_array_foreach(list, i, v) found +=
                    strcmp(json_string_value(json_object_get(v, "id")), sbx_session_id(sess)) == 0;
            CHECK_EQ_INT(found, 1);
        }
        json_decref(list);
    }
    CHECK_ERR(sbx_client_attach(client, "../etc", &s, &err), SBX_E_INVAL, &err, NULL);
    sbx_client_free(other);
    json_decref(parsed);
    json_decref(state);
    CHECK_OK(sbx_session_rm(sess, "marker", 0, &err), &err);
}

static void test_snapshot(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_snapshot_store *st = NULL;
    char *ref = NULL;
    CHECK_OK(sbx_snapshot_store_open(snap_dir, &st, &err), &err);
    CHECK_OK(sbx_session_write(sess, "snap/kept.txt", "snapshotted", 11, 0600, SBX_WRITE_PARENTS,
                               &err),
             &err);
    int rc = sbx_session_snapshot(sess, st, &ref, &err);
    if (!need(SBX_PROVIDER_SNAPSHOTS)) {
        /* Declared unsupported: the calls say so, they never pass by doing nothing. */
        CHECK_EQ_INT(rc, -SBX_E_UNSUPPORTED);
        CHECK(err.msg[0] != '\0');
        printf("# snapshot unsupported by '%s': %s\n", prov->name, err.msg);
        /* nor can a sandbox start from one */
        struct sbx_session *s = NULL;
        struct sbx_create_spec from = {
                .snapshot =
                        "sha256:0000000000000000000000000000000000000000000000000000000000000000"};
        CHECK_ERR(create(&from, &s, &err), SBX_E_UNSUPPORTED, &err, "snapshot");
        sbx_session_free(s);
        sbx_snapshot_store_free(st);
        CHECK_OK(sbx_session_rm(sess, "snap", SBX_RM_RECURSIVE, &err), &err);
        return;
    }
    CHECK_OK(rc, &err);
    if (rc == 0) {
        CHECK(strncmp(ref, "sha256:", 7) == 0);
        json_t *state = NULL;
        CHECK_OK(sbx_session_state(sess, &state, &err), &err);
        CHECK_EQ_STR(json_string_value(json_object_get(state, "snapshot")), ref);
        json_decref(state);
        struct sbx_session *s = NULL;
        struct sbx_create_spec spec = {.snapshot = ref};
        CHECK_OK(create(&spec, &s, &err), &err);
        if (s) {
            CHECK_OUT(s, "cat snap/kept.txt; echo; stat -c %a snap/kept.txt", "snapshotted\n600\n");
            char *id = sbx_xstrdup(sbx_session_id(s));
            CHECK_OK(sbx_session_delete(s, &err), &err);
            sbx_session_free(s);
            check_gone(id);
            free(id);
        }
    }
    free(ref);
    sbx_snapshot_store_free(st);
    CHECK_OK(sbx_session_rm(sess, "snap", SBX_RM_RECURSIVE, &err), &err);
}

/* A given host directory as the workspace: what the sandbox writes is there, and it stays when
 * the sandbox goes. */
static void test_host_workspace(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_session *s = NULL;
    char *dir = sbx_xasprintf("%s/given", tmp);
    mkdir(dir, 0755);
    struct sbx_create_spec spec = {.workspace = dir};
    int rc = create(&spec, &s, &err);
    if (!(info.traits & SBX_PROVIDER_HOST_WORKSPACE)) {
        CHECK_ERR(rc, SBX_E_UNSUPPORTED, &err, NULL);
        need(SBX_PROVIDER_HOST_WORKSPACE);
    } else {
        CHECK_OK(rc, &err);
    }
    if (s) {
        CHECK_OUT(s, "echo made > here.txt && echo ok", "ok\n");
        char *file = sbx_xasprintf("%s/here.txt", dir);
        struct sbx_buf b;
        sbx_buf_init(&b, 4096);
        CHECK_OK(sbx_fs_read_path(file, 4096, &b, &err), &err);
        CHECK_EQ_STR(b.data, "made\n");
        char *id = sbx_xstrdup(sbx_session_id(s));
        CHECK_OK(sbx_session_delete(s, &err), &err);
        check_gone(id);
        CHECK(path_exists(file)); /* a given workspace is left as it is */
        sbx_buf_release(&b);
        free(file);
        free(id);
    }
    sbx_session_free(s);
    free(dir);
}

/* Stop to a snapshot (or the provider's own keeping) and start again under the same id. */
static void test_stop_start(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_session *s = NULL, *back = NULL;
    if (!(info.traits & SBX_PROVIDER_STOP_START)) {
        CHECK_ERR(sbx_client_stop(client, sbx_session_id(sess), NULL, &err), SBX_E_UNSUPPORTED,
                  &err, NULL);
        need(SBX_PROVIDER_STOP_START);
        return;
    }
    CHECK_OK(create(NULL, &s, &err), &err);
    if (!s)
        return;
    char *id = sbx_xstrdup(sbx_session_id(s));
    CHECK_OK(sbx_session_write(s, "kept.txt", "kept", 4, 0, 0, &err), &err);
    sbx_session_free(s);
    CHECK_OK(sbx_client_stop(client, id, NULL, &err), &err);
    CHECK_ERR(sbx_client_attach(client, id, &s, &err), SBX_E_NOTFOUND, &err, NULL);
    CHECK_OK(sbx_client_start(client, id, NULL, &back, &err), &err);
    if (back) {
        CHECK_EQ_STR(sbx_session_id(back), id);
        CHECK_OUT(back, "cat kept.txt", "kept");
        CHECK_OK(sbx_session_delete(back, &err), &err);
        sbx_session_free(back);
        check_gone(id);
    }
    free(id);
}

/* Storage mounts: refused by a provider that does not declare them, naming the entry type. */
static void test_mounts(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_manifest *m = NULL;
    struct sbx_session *s = NULL;
    if (info.traits & SBX_PROVIDER_MOUNTS) {
        tap_count++;
        printf("ok %d # SKIP mounts need a storage server: tests/storage mounts them\n", tap_count);
        return;
    }
    json_t *doc = json_loads("{\"entries\": {\"data\": {\"type\": \"s3_mount\", "
                             "\"bucket\": \"b\"}}}",
                             0, NULL);
    CHECK_OK(sbx_manifest_from_json(doc, NULL, &m, &err), &err);
    json_decref(doc);
    struct sbx_create_spec spec = {.manifest = m};
    CHECK_ERR(create(&spec, &s, &err), SBX_E_UNSUPPORTED, &err, "s3_mount");
    sbx_session_free(s);
    sbx_manifest_free(m);
    need(SBX_PROVIDER_MOUNTS);
}

/* A sandbox with a process kept in the background, removed by id: nothing remains. */
/* What a sandbox uses and its log: a provider with the trait answers with figures that make
 * sense, one without it says SBX_E_UNSUPPORTED. */
static void test_stats_logs(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_session_stats st;
    int fd = -1;
    if (!(info.traits & SBX_PROVIDER_STATS)) {
        CHECK_ERR(sbx_session_stats(sess, &st, &err), SBX_E_UNSUPPORTED, &err, NULL);
        need(SBX_PROVIDER_STATS);
    } else {
        CHECK_OK(sbx_session_stats(sess, &st, &err), &err);
        CHECK(st.memory == SBX_STAT_UNKNOWN || st.memory > 0);
        CHECK(st.pids == SBX_STAT_UNKNOWN || st.pids >= 1);
        CHECK(!(info.traits & SBX_PROVIDER_HOST_WORKSPACE) || st.disk != SBX_STAT_UNKNOWN);
    }
    if (!(info.traits & SBX_PROVIDER_LOGS)) {
        CHECK_ERR(sbx_session_log_open(sess, &fd, &err), SBX_E_UNSUPPORTED, &err, NULL);
        need(SBX_PROVIDER_LOGS);
        return;
    }
    CHECK_OK(sbx_session_log_open(sess, &fd, &err), &err);
    char buf[64];
    CHECK(fd >= 0 && read(fd, buf, sizeof(buf)) > 0);
    if (fd >= 0)
        close(fd);
}

static void test_remove_leaves_nothing(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_session *s = NULL;
    CHECK_OK(create(NULL, &s, &err), &err);
    if (!s)
        return;
    char *id = sbx_xstrdup(sbx_session_id(s));
    struct sbx_exec_result r;
    struct sbx_exec_spec bg = {.command = "sleep 1000 >/dev/null 2>&1 & echo started",
                               .flags = SBX_EXEC_KEEP_BACKGROUND};
    CHECK_OK(sbx_session_exec(s, &bg, &r, &err), &err);
    CHECK_EQ_STR(r.out.data, "started\n");
    sbx_exec_result_release(&r);
    /* (bounded: the background shell may not have become sleep yet) */
    CHECK_OUT(s,
              "i=0; until ps -A -o args | grep -q '^[s]leep 1000'; do i=$((i+1)); "
              "[ $i -lt 50 ] || exit 1; sleep 0.1; done; echo running",
              "running\n");
    CHECK_OK(sbx_client_remove(client, id, 0, &err), &err);
    /* the old handle reports the sandbox gone rather than hanging */
    struct sbx_exec_spec t = {.command = "true"};
    CHECK_ERR(sbx_session_exec(s, &t, &r, &err), SBX_E_SANDBOX, &err, NULL);
    sbx_session_free(s);
    check_gone(id);
    free(id);
}

/* The shared sandbox, deleted through its session. */
static void test_delete(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char *id = sbx_xstrdup(sbx_session_id(sess));
    CHECK_OK(sbx_session_delete(sess, &err), &err);
    sbx_session_free(sess);
    sess = NULL;
    check_gone(id);
    free(id);
}

/* SBX_CONFORM_HOOK, when set, is a shell command run once after the case that
 * SBX_CONFORM_HOOK_AFTER names, with the shared sandbox's id as $1: what a provider's own test
 * does to the sandbox behind the session's back (the remote one drops the session's token by
 * minting many more), which the cases after it must not notice. */
extern char **environ;

static void run_hook(const char *after)
{
    const char *hook = getenv("SBX_CONFORM_HOOK"), *when = getenv("SBX_CONFORM_HOOK_AFTER");
    if (!hook || !hook[0] || !when || strcmp(when, after) != 0 || !sess)
        return;
    char *const argv[] = {"/bin/sh", "-c", (char *)hook, "hook", (char *)sbx_session_id(sess),
                          NULL};
    pid_t pid = -1;
    int status = -1;
    if (posix_spawn(&pid, "/bin/sh", NULL, NULL, argv, environ) == 0)
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    printf("# SBX_CONFORM_HOOK ran after %s\n", after);
}

/* A case, unless SBX_CONFORM_CASES leaves it out (said so). The first case makes the shared
 * sandbox and the last removes it: they always run. */
static void run_case(const char *name, void (*fn)(void), int always)
{
    const char *only = getenv("SBX_CONFORM_CASES");
    size_t n = strlen(name);
    int wanted = always || !only || !only[0];
    for (const char *p = only; !wanted && p && *p;) {
        size_t len = strcspn(p, ",");
        wanted = len == n && strncmp(p, name, n) == 0;
        p += len + (p[len] == ',');
    }
    printf("# %s\n", name);
    if (wanted) {
        fn();
        run_hook(name);
    } else {
        tap_count++;
        printf("ok %d # SKIP %s is not in SBX_CONFORM_CASES\n", tap_count, name);
    }
}

#define CASE(name)   run_case(#name, test_##name, 0)
#define ALWAYS(name) run_case(#name, test_##name, 1)

int main(void)
{
    signal(SIGPIPE, SIG_DFL); /* the library must never raise it */
    watch_signals();
    TAP_START();
    setup();
    ALWAYS(create_from_manifest);
    CASE(exit_codes);
    CASE(streams);
    CASE(stdin);
    CASE(timeout);
    CASE(cancel);
    CASE(pty);
    CASE(files);
    CASE(escapes);
    CASE(ports);
    CASE(state_resume_attach);
    CASE(snapshot);
    CASE(host_workspace);
    CASE(stop_start);
    CASE(mounts);
    CASE(stats_logs);
    CASE(remove_leaves_nothing);
    ALWAYS(delete);
    cleanup();
    json_decref(json_opts);
    return TAP_DONE();
}
