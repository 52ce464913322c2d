/* The Engine API client: HTTP to the engine through the remote layer (src/sandbox/wire/): its
 * unix socket, or tcp:// with TLS client certificates for a remote engine; every path pinned to
 * one API version, and the errors users hit (daemon not running, socket permission, TLS) said
 * plainly. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "providers/docker/docker.h"
#include "sandbox/wire/http.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/time.h"

#define DEFAULT_SOCK "/var/run/docker.sock"

/* The TLS files of a tcp:// engine: the options' when any is given, else, as the docker CLI
 * reads them with DOCKER_TLS_VERIFY set, ca.pem, cert.pem and key.pem of DOCKER_CERT_PATH
 * (default ~/.docker); none of that: plain HTTP. */
struct tls_paths {
    char ca[4096], cert[4096], key[4096];
    int any;
};

static int tls_paths(const struct sbx__dk_tls *tls, struct tls_paths *p, struct sbx_error *err)
{
    memset(p, 0, sizeof(*p));
    if (tls && (tls->ca || tls->cert || tls->key)) {
        snprintf(p->ca, sizeof(p->ca), "%s", tls->ca ? tls->ca : "");
        snprintf(p->cert, sizeof(p->cert), "%s", tls->cert ? tls->cert : "");
        snprintf(p->key, sizeof(p->key), "%s", tls->key ? tls->key : "");
        p->any = 1;
        return 0;
    }
    const char *verify = getenv("DOCKER_TLS_VERIFY");
    if (!verify || !verify[0])
        return 0;
    const char *dir = getenv("DOCKER_CERT_PATH"), *home = getenv("HOME");
    char d[4000];
    if (dir && dir[0])
        snprintf(d, sizeof(d), "%s", dir);
    else if (home && home[0] == '/')
        snprintf(d, sizeof(d), "%s/.docker", home);
    else
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "DOCKER_TLS_VERIFY is set but neither DOCKER_CERT_PATH nor HOME is");
    snprintf(p->ca, sizeof(p->ca), "%s/ca.pem", d);
    if (access(p->ca, R_OK) != 0)
        return sbx_error_errno(err, errno, "DOCKER_TLS_VERIFY is set: cannot read '%s'", p->ca);
    snprintf(p->cert, sizeof(p->cert), "%s/cert.pem", d);
    snprintf(p->key, sizeof(p->key), "%s/key.pem", d);
    if (access(p->cert, F_OK) != 0 || access(p->key, F_OK) != 0)
        p->cert[0] = p->key[0] = '\0';
    p->any = 1;
    return 0;
}

static int tcp_endpoint(struct sbx__dk_engine *e, const char *host, const struct sbx__dk_tls *tls,
                        struct sbx_error *err)
{
    struct tls_paths t;
    int rc = tls_paths(tls, &t, err);
    if (rc < 0)
        return rc;
    /* With TLS and no CA named, the system's CAs vouch for the engine. */
    struct sbx__endpoint_opts o = {.url = host,
                                   .name = "the Docker engine",
                                   .ca_file = t.ca[0] ? t.ca : NULL,
                                   .cert_file = t.cert[0] ? t.cert : NULL,
                                   .key_file = t.key[0] ? t.key : NULL,
                                   .max_retries = -1,
                                   .timeout_ms = e->timeout_ms,
                                   .http = SBX__HTTP_1_1};
    if (t.any && !o.ca_file && !o.cert_file && !o.key_file)
        return sbx_error_set(err, SBX_E_INVAL, 0, "docker host '%s': empty TLS options", host);
    /* tcp:// is https with TLS files, else http (the endpoint decides from them). */
    rc = sbx__endpoint_new(&o, &e->ep, err);
    if (rc < 0)
        sbx_error_prefix(err, "docker host '%s'", host);
    return rc;
}

int sbx__dk_engine_init(struct sbx__dk_engine *e, const char *host, const struct sbx__dk_tls *tls,
                        int64_t timeout_ms, struct sbx_error *err)
{
    memset(e, 0, sizeof(*e));
    if (!host || !host[0])
        host = getenv("DOCKER_HOST");
    if (!host || !host[0])
        host = DEFAULT_SOCK;
    if (timeout_ms < 0)
        return sbx_error_set(err, SBX_E_INVAL, 0, "request timeout must not be negative");
    e->timeout_ms = timeout_ms ? timeout_ms : SBX__DK_DEFAULT_MS;
    if (strncmp(host, "tcp://", 6) == 0) {
        int rc = tcp_endpoint(e, host, tls, err);
        if (rc == 0)
            e->where = sbx_xstrdup(host);
        return rc;
    }
    if (tls && (tls->ca || tls->cert || tls->key))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "docker host '%s': TLS options go with a tcp:// host", host);
    const char *path = host;
    if (strncmp(host, "unix://", 7) == 0)
        path = host + 7;
    else if (strstr(host, "://"))
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "docker host '%s': sbx reaches engines on unix sockets "
                             "(unix:///path) or tcp:// with TLS",
                             host);
    if (path[0] != '/')
        return sbx_error_set(err, SBX_E_INVAL, 0, "docker host '%s' is not an absolute socket path",
                             host);
    if (strlen(path) >= sizeof(((struct sockaddr_un *)0)->sun_path))
        return sbx_error_set(err, SBX_E_INVAL, 0, "docker socket path '%s' is too long", path);
    char *url = sbx_xasprintf("unix://%s", path);
    struct sbx__endpoint_opts o = {.url = url,
                                   .name = "the Docker engine",
                                   .max_retries = -1,
                                   .timeout_ms = e->timeout_ms};
    int rc = sbx__endpoint_new(&o, &e->ep, err);
    free(url);
    if (rc < 0)
        return rc;
    e->sock = sbx_xstrdup(path);
    e->where = sbx_xstrdup(path);
    return 0;
}

void sbx__dk_engine_release(struct sbx__dk_engine *e)
{
    free(e->sock);
    free(e->where);
    sbx__endpoint_free(e->ep);
    e->sock = e->where = NULL;
    e->ep = NULL;
}

void sbx__dk_engine_copy(struct sbx__dk_engine *dst, const struct sbx__dk_engine *src)
{
    dst->sock = src->sock ? sbx_xstrdup(src->sock) : NULL;
    dst->where = sbx_xstrdup(src->where);
    dst->ep = sbx__endpoint_ref(src->ep);
    dst->timeout_ms = src->timeout_ms;
}

int sbx__dk_connect_error(const struct sbx__dk_engine *e, int errnum, struct sbx_error *err)
{
    if (errnum == EACCES || errnum == EPERM)
        return sbx_error_set(err, SBX_E_PERM, errnum,
                             "permission denied on '%s' (add your user to the docker group, or "
                             "use podman's rootless socket)",
                             e->where);
    return sbx_error_set(err, SBX_E_SANDBOX, errnum,
                         "cannot reach the Docker engine at '%s': %s (is dockerd or `podman "
                         "system service` running?)",
                         e->where, strerror(errnum));
}

static int unix_connect(const struct sbx__dk_engine *e, int *out, struct sbx_error *err)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, e->sock, strlen(e->sock) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return sbx_error_errno(err, errno, "socket");
    while (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        if (errno == EINTR)
            continue;
        int e2 = errno;
        close(fd);
        return sbx__dk_connect_error(e, e2, err);
    }
    *out = fd;
    return 0;
}

/* A transport error of the remote layer in the engine's words: an engine on a socket that
 * cannot be reached says why (connect's own errno); a remote one keeps the layer's message
 * (unreachable, TLS), as SBX_E_SANDBOX. */
static int engine_error(const struct sbx__dk_engine *e, int rc, struct sbx_error *err)
{
    if (rc == -SBX_E_HTTP && e->sock) {
        int fd = -1;
        struct sbx_error probe = SBX_ERROR_INIT;
        if (unix_connect(e, &fd, &probe) < 0)
            return sbx_error_copy(err, &probe);
        close(fd);
    }
    if (rc == -SBX_E_HTTP)
        err->code = SBX_E_SANDBOX;
    return rc == -SBX_E_HTTP ? -SBX_E_SANDBOX : rc;
}

void sbx__dk_resp_init(struct sbx__dk_resp *r)
{
    r->status = 0;
    sbx_buf_init(&r->body, SBX_BUF_NOLIMIT);
    r->header = NULL;
}

void sbx__dk_resp_release(struct sbx__dk_resp *r)
{
    sbx_buf_release(&r->body);
    free(r->header);
    r->header = NULL;
}

static long read_upload(void *ud, void *buf, size_t n, struct sbx_error *err)
{
    int fd = *(int *)ud;
    for (;;) {
        ssize_t r = read(fd, buf, n);
        if (r >= 0)
            return (long)r;
        if (errno != EINTR)
            return sbx_error_errno(err, errno, "cannot read what goes to the engine");
    }
}

int sbx__dk_call(const struct sbx__dk_engine *e, const struct sbx__dk_req *req,
                 struct sbx__dk_resp *resp, struct sbx_error *err)
{
    char *path = sbx_xasprintf(SBX__DK_API "%s", req->path);
    int up = req->upload_fd, down = req->download_fd;
    struct sbx__http_req hr = {.method = req->method,
                               .path = path,
                               .json = req->json,
                               .max_body = req->max_body ? req->max_body : SBX__DK_BODY_MAX,
                               .want_header = req->header,
                               .no_retry = 1,
                               .http_1_1 = 1};
    if (up >= 0) {
        hr.source = read_upload;
        hr.source_ud = &up;
        hr.upload_size = req->upload_unknown ? -1 : (int64_t)req->upload_size;
        hr.content_type = req->content_type ? req->content_type : "application/x-tar";
    }
    if (down >= 0) {
        hr.sink = sbx__http_sink_fd;
        hr.sink_ud = &down;
    }
    struct sbx__http_resp r;
    sbx__http_resp_init(&r);
    int rc = sbx__http_call(e->ep, &hr, &r, err);
    if (rc < 0) {
        rc = engine_error(e, rc, err);
    } else {
        resp->status = r.status;
        sbx_buf_reset(&resp->body);
        if (r.body.len && (rc = sbx_buf_add(&resp->body, r.body.data, r.body.len, err)) < 0)
            rc = -SBX_E_TOOBIG;
        free(resp->header);
        resp->header = r.header;
        r.header = NULL;
    }
    sbx__http_resp_release(&r);
    free(path);
    return rc;
}

int sbx__dk_status_error(long status, const struct sbx_buf *body, struct sbx_error *err)
{
    json_t *j = body->len ? json_loadb(body->data, body->len, 0, NULL) : NULL;
    const char *msg = json_string_value(json_object_get(j, "message"));
    char fallback[512];
    if (!msg) {
        /* Not the engine's JSON: a proxy's text, or a TLS port's answer to plain HTTP ("Client
         * sent an HTTP request to an HTTPS server"). */
        if (!sbx__http_error_text(body->data, body->len, fallback, sizeof(fallback)))
            snprintf(fallback, sizeof(fallback), "HTTP status %ld", status);
        msg = fallback;
    }
    enum sbx_errcode code = status == 404                    ? SBX_E_NOTFOUND
                            : status == 409                  ? SBX_E_EXISTS
                            : status == 401 || status == 403 ? SBX_E_PERM
                            : status >= 400 && status < 500  ? SBX_E_INVAL
                                                             : SBX_E_SANDBOX;
    int rc = sbx_error_set(err, code, 0, "the Docker engine says: %s", msg);
    json_decref(j);
    return rc;
}

int sbx__dk_json(const struct sbx__dk_engine *e, const char *method, const char *path,
                 const json_t *body, long *status, json_t **out, struct sbx_error *err)
{
    struct sbx__dk_req req = {
            .method = method, .path = path, .json = body, .upload_fd = -1, .download_fd = -1};
    struct sbx__dk_resp resp;
    sbx__dk_resp_init(&resp);
    int rc = sbx__dk_call(e, &req, &resp, err);
    if (rc == 0 && status)
        *status = resp.status;
    if (rc == 0 && resp.status >= 400)
        rc = sbx__dk_status_error(resp.status, &resp.body, err);
    if (rc == 0 && out) {
        *out = NULL;
        if (resp.body.len) {
            struct sbx_json_limits lim = {.max_bytes = SBX__DK_BODY_MAX, .max_depth = 64};
            rc = sbx_json_parse(resp.body.data, resp.body.len, &lim, out, err);
            if (rc < 0)
                sbx_error_prefix(err, "the Docker engine's answer to %s %s", method, path);
        }
    }
    sbx__dk_resp_release(&resp);
    return rc;
}

int sbx__dk_version_ok(const char *v)
{
    char *end = NULL;
    if (!v)
        return 0;
    long major = strtol(v, &end, 10);
    if (end == v || *end != '.')
        return 0;
    const char *m = end + 1;
    long minor = strtol(m, &end, 10);
    if (end == m || *end)
        return 0;
    return major > SBX__DK_API_MAJOR || (major == SBX__DK_API_MAJOR && minor >= SBX__DK_API_MINOR);
}

int sbx__dk_check_version(const struct sbx__dk_engine *e, struct sbx_error *err)
{
    /* The API version from /_ping's header, as the docker CLI reads it: podman answers
     * /version by running its runtime and conmon (seconds), /_ping at once. An engine (or a
     * proxy) whose ping has no such header is asked /version. */
    struct sbx__dk_req req = {.method = "GET",
                              .path = "/_ping",
                              .upload_fd = -1,
                              .download_fd = -1,
                              .max_body = 4096,
                              .header = "Api-Version"};
    struct sbx__dk_resp resp;
    json_t *v = NULL;
    char *api = NULL;
    sbx__dk_resp_init(&resp);
    int rc = sbx__dk_call(e, &req, &resp, err);
    if (rc == 0 && resp.status / 100 != 2)
        rc = sbx__dk_status_error(resp.status, &resp.body, err);
    if (rc == 0 && resp.header && resp.header[0])
        api = sbx_xstrdup(resp.header);
    sbx__dk_resp_release(&resp);
    if (rc < 0)
        return rc;
    if (!api) {
        if ((rc = sbx__dk_json(e, "GET", "/version", NULL, NULL, &v, err)) < 0)
            return rc;
        const char *a = json_string_value(json_object_get(v, "ApiVersion"));
        api = a ? sbx_xstrdup(a) : NULL;
        json_decref(v);
    }
    if (!sbx__dk_version_ok(api))
        rc = sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                           "the Docker engine at '%s' speaks API version '%s'; sbx needs %d.%d "
                           "or later (Docker 20.10, podman 4)",
                           e->where, api ? api : "?", SBX__DK_API_MAJOR, SBX__DK_API_MINOR);
    free(api);
    return rc;
}

/* The hijacked call: the remote layer's upgraded connection (HTTP/1.1, TLS for a remote
 * engine); after the answer the connection is a raw byte stream both ways. Engines answer 101
 * (Docker, podman) or, older ones, 200. */
int sbx__dk_hijack(const struct sbx__dk_engine *e, const char *path, const json_t *body,
                   struct sbx__conn **out, struct sbx_error *err)
{
    char *text = sbx_json_dumps(body, SBX_JSON_COMPACT);
    char *target = sbx_xasprintf(SBX__DK_API "%s", path);
    const char *hdrs[] = {"Connection: Upgrade", "Upgrade: tcp", NULL};
    struct sbx__upgrade u = {.method = "POST",
                             .path = target,
                             .headers = hdrs,
                             .body = text,
                             .body_len = strlen(text),
                             .content_type = "application/json",
                             .expect = 101,
                             .expect_also = 200,
                             .timeout_ms = e->timeout_ms};
    int rc = sbx__conn_open(e->ep, &u, out, NULL, err);
    if (rc < 0)
        rc = engine_error(e, rc, err);
    free(target);
    free(text);
    return rc;
}

int sbx__dk_tmpfile(int *out, struct sbx_error *err)
{
    const char *dir = getenv("TMPDIR");
    if (!dir || dir[0] != '/')
        dir = "/tmp";
    int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0)
        fd = memfd_create("sbx-docker", MFD_CLOEXEC);
    if (fd < 0)
        return sbx_error_errno(err, errno, "cannot make a temporary file");
    *out = fd;
    return 0;
}

char *sbx__dk_escape(const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = strlen(s);
    char *out = sbx_xmalloc(3 * n + 1), *o = out;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            *p == '-' || *p == '.' || *p == '_' || *p == '~' || *p == '/') {
            *o++ = (char)*p;
        } else {
            *o++ = '%';
            *o++ = hex[*p >> 4];
            *o++ = hex[*p & 15];
        }
    }
    *o = '\0';
    return out;
}

/* "Max open files            20000                20000                files" */
static uint64_t limit_of(const char *text, const char *name)
{
    const char *line = strstr(text, name);
    if (!line)
        return 0;
    const char *p = line + strlen(name);
    char *end = NULL;
    while (*p == ' ')
        p++;
    (void)strtoull(p, &end, 10); /* soft */
    if (end == p)
        return 0;
    p = end;
    while (*p == ' ')
        p++;
    if (strncmp(p, "unlimited", 9) == 0)
        return UINT64_MAX;
    uint64_t hard = strtoull(p, &end, 10);
    return end == p ? 0 : hard;
}

void sbx__dk_engine_limits(const struct sbx__dk_engine *e, uint64_t *nofile, uint64_t *nproc)
{
    struct rlimit nf = {0}, np = {0};
    (void)getrlimit(RLIMIT_NOFILE, &nf);
    (void)getrlimit(RLIMIT_NPROC, &np);
    *nofile = nf.rlim_max;
    *nproc = np.rlim_max;
    /* The engine's own hard limits, when it runs here and we may read them (root, or the same
     * user as a rootless service): what it is allowed to give a container. */
    int fd = -1;
    struct ucred cred = {0};
    socklen_t len = sizeof(cred);
    if (!e->sock || unix_connect(e, &fd, NULL) < 0)
        return;
    int ok = getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.pid > 0;
    close(fd);
    if (!ok)
        return;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/limits", (int)cred.pid);
    struct sbx_buf b;
    sbx_buf_init(&b, 65536);
    if (sbx_fs_read_path(path, 65536, &b, NULL) == 0 && b.data) {
        uint64_t f = limit_of(b.data, "Max open files"), pr = limit_of(b.data, "Max processes");
        if (f && f < *nofile)
            *nofile = f;
        if (pr && pr < *nproc)
            *nproc = pr;
    }
    sbx_buf_release(&b);
}
