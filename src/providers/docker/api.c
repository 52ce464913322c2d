/* The Engine API client: HTTP over the engine's unix socket with libcurl, pinned to one API
 * version, with the errors users hit (daemon not running, socket permission) said plainly. */
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

#include "core/dl-curl.h"
#include "providers/docker/docker.h"
#include "sbx/fs.h"
#include "sbx/json.h"
#include "sbx/time.h"

#define DEFAULT_SOCK    "/var/run/docker.sock"
#define HIJACK_HEAD_MAX 16384

int sbx__dk_engine_init(struct sbx__dk_engine *e, const char *host, int64_t timeout_ms,
                        struct sbx_error *err)
{
    if (!host || !host[0])
        host = getenv("DOCKER_HOST");
    if (!host || !host[0])
        host = DEFAULT_SOCK;
    const char *path = host;
    if (strncmp(host, "unix://", 7) == 0)
        path = host + 7;
    else if (strstr(host, "://"))
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "docker host '%s': only unix sockets are supported (unix:///path)",
                             host);
    if (path[0] != '/')
        return sbx_error_set(err, SBX_E_INVAL, 0, "docker host '%s' is not an absolute socket path",
                             host);
    if (strlen(path) >= sizeof(((struct sockaddr_un *)0)->sun_path))
        return sbx_error_set(err, SBX_E_INVAL, 0, "docker socket path '%s' is too long", path);
    if (timeout_ms < 0)
        return sbx_error_set(err, SBX_E_INVAL, 0, "request timeout must not be negative");
    e->sock = sbx_xstrdup(path);
    e->timeout_ms = timeout_ms ? timeout_ms : SBX__DK_DEFAULT_MS;
    return 0;
}

void sbx__dk_engine_release(struct sbx__dk_engine *e)
{
    free(e->sock);
    e->sock = NULL;
}

void sbx__dk_engine_copy(struct sbx__dk_engine *dst, const struct sbx__dk_engine *src)
{
    dst->sock = sbx_xstrdup(src->sock);
    dst->timeout_ms = src->timeout_ms;
}

int sbx__dk_connect_error(const struct sbx__dk_engine *e, int errnum, struct sbx_error *err)
{
    if (errnum == EACCES || errnum == EPERM)
        return sbx_error_set(err, SBX_E_PERM, errnum,
                             "permission denied on '%s' (add your user to the docker group, or "
                             "use podman's rootless socket)",
                             e->sock);
    return sbx_error_set(err, SBX_E_SANDBOX, errnum,
                         "cannot reach the Docker engine at '%s': %s (is dockerd or `podman "
                         "system service` running?)",
                         e->sock, strerror(errnum));
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

struct xfer {
    const struct sbx__dk_req *req;
    struct sbx__dk_resp *resp;
    uint64_t got, max;
    int too_big, write_errno;
};

static size_t on_body(char *p, size_t size, size_t nmemb, void *ud)
{
    struct xfer *x = ud;
    size_t n = size * nmemb;
    if (n > x->max - x->got) {
        x->too_big = 1;
        return 0;
    }
    x->got += n;
    if (x->req->download_fd >= 0) {
        /* Error bodies are kept for the message, never written into the file. */
        if (x->resp->status == 0 || x->resp->status < 300) {
            struct sbx_error ignored = SBX_ERROR_INIT;
            if (sbx_fd_write_all(x->req->download_fd, p, n, &ignored) < 0) {
                x->write_errno = ignored.sys_errno ? ignored.sys_errno : EIO;
                return 0;
            }
            return n;
        }
    }
    struct sbx_error ignored = SBX_ERROR_INIT;
    if (sbx_buf_add(&x->resp->body, p, n, &ignored) < 0) {
        x->too_big = 1;
        return 0;
    }
    return n;
}

static size_t on_header(char *p, size_t size, size_t nmemb, void *ud)
{
    struct xfer *x = ud;
    size_t n = size * nmemb;
    if (n >= 12 && strncmp(p, "HTTP/", 5) == 0) {
        /* The status line: known before the body, so error bodies never reach a file. */
        const char *sp = memchr(p, ' ', n);
        if (sp && (size_t)(sp - p) + 4 <= n)
            x->resp->status = (sp[1] - '0') * 100 + (sp[2] - '0') * 10 + (sp[3] - '0');
        return n;
    }
    const char *want = x->req->header;
    size_t wl = want ? strlen(want) : 0;
    if (want && n > wl + 1 && strncasecmp(p, want, wl) == 0 && p[wl] == ':') {
        const char *v = p + wl + 1;
        const char *end = p + n;
        while (v < end && (*v == ' ' || *v == '\t'))
            v++;
        while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' '))
            end--;
        free(x->resp->header);
        x->resp->header = sbx_xstrndup(v, (size_t)(end - v));
    }
    return n;
}

static size_t on_upload(char *p, size_t size, size_t nmemb, void *ud)
{
    const struct sbx__dk_req *req = ud;
    for (;;) {
        ssize_t r = read(req->upload_fd, p, size * nmemb);
        if (r >= 0)
            return (size_t)r;
        if (errno != EINTR)
            return CURL_READFUNC_ABORT;
    }
}

int sbx__dk_call(const struct sbx__dk_engine *e, const struct sbx__dk_req *req,
                 struct sbx__dk_resp *resp, struct sbx_error *err)
{
    int rc = sbx__curl_load(err);
    if (rc < 0)
        return rc;
    CURL *c = curl_easy_init();
    struct curl_slist *hdrs = NULL;
    char *url = sbx_xasprintf("http://docker" SBX__DK_API "%s", req->path);
    char *body = req->json ? sbx_json_dumps(req->json, SBX_JSON_COMPACT) : NULL;
    char cerr[CURL_ERROR_SIZE] = "";
    struct xfer x = {req, resp, 0, req->max_body ? req->max_body : SBX__DK_BODY_MAX, 0, 0};
    if (!c)
        sbx__bug(__FILE__, __LINE__, "curl_easy_init failed");
    curl_easy_setopt(c, CURLOPT_UNIX_SOCKET_PATH, e->sock);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, cerr);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)e->timeout_ms);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &x);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &x);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http");
    if (strcmp(req->method, "HEAD") == 0)
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    else if (strcmp(req->method, "GET") != 0)
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, req->method);
    if (body) {
        hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
    } else if (req->upload_fd >= 0) {
        char *ct = sbx_xasprintf("Content-Type: %s",
                                 req->content_type ? req->content_type : "application/x-tar");
        hdrs = curl_slist_append(hdrs, ct);
        free(ct);
        curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(c, CURLOPT_READFUNCTION, on_upload);
        curl_easy_setopt(c, CURLOPT_READDATA, req);
        curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)req->upload_size);
    } else if (strcmp(req->method, "POST") == 0) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, 0L);
    }
    /* PUT with an upload wants no "Expect: 100-continue" round trip. */
    hdrs = curl_slist_append(hdrs, "Expect:");
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    CURLcode cc = curl_easy_perform(c);
    if (cc == CURLE_OK) {
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &resp->status);
    } else if (x.too_big) {
        rc = sbx_error_set(err, SBX_E_TOOBIG, 0,
                           "the engine's answer to %s %s is larger than %llu "
                           "bytes",
                           req->method, req->path, (unsigned long long)x.max);
    } else if (x.write_errno) {
        rc = sbx_error_errno(err, x.write_errno, "cannot store the engine's answer");
    } else if (cc == CURLE_COULDNT_CONNECT) {
        /* curl does not keep connect's errno: ask the socket ourselves. */
        int fd = -1;
        rc = unix_connect(e, &fd, err);
        if (rc == 0) {
            close(fd);
            rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "cannot reach the Docker engine at '%s': %s",
                               e->sock, cerr[0] ? cerr : curl_easy_strerror(cc));
        }
    } else if (cc == CURLE_OPERATION_TIMEDOUT) {
        rc = sbx_error_set(err, SBX_E_TIMEOUT, 0,
                           "the Docker engine at '%s' did not answer %s %s "
                           "within %lld ms",
                           e->sock, req->method, req->path, (long long)e->timeout_ms);
    } else {
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "the Docker engine at '%s': %s %s: %s", e->sock,
                           req->method, req->path, cerr[0] ? cerr : curl_easy_strerror(cc));
    }
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(c);
    free(url);
    free(body);
    return rc;
}

int sbx__dk_status_error(long status, const struct sbx_buf *body, struct sbx_error *err)
{
    json_t *j = body->len ? json_loadb(body->data, body->len, 0, NULL) : NULL;
    const char *msg = json_string_value(json_object_get(j, "message"));
    char fallback[64];
    if (!msg) {
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
    json_t *v = NULL;
    int rc = sbx__dk_json(e, "GET", "/version", NULL, NULL, &v, err);
    if (rc < 0)
        return rc;
    const char *api = json_string_value(json_object_get(v, "ApiVersion"));
    if (!sbx__dk_version_ok(api))
        rc = sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                           "the Docker engine at '%s' speaks API version '%s'; sbx needs %d.%d "
                           "or later (Docker 20.10, podman 4)",
                           e->sock, api ? api : "?", SBX__DK_API_MAJOR, SBX__DK_API_MINOR);
    json_decref(v);
    return rc;
}

/* The hijacked call is plain HTTP/1.1 on a socket of our own: after the 101 answer the
 * connection is a raw byte stream both ways, which is what the demultiplexer and the terminal
 * relay want to poll; curl adds nothing there. */
int sbx__dk_hijack(const struct sbx__dk_engine *e, const char *path, const json_t *body,
                   int *out_fd, struct sbx_buf *leftover, struct sbx_error *err)
{
    int fd = -1, rc;
    char *text = sbx_json_dumps(body, SBX_JSON_COMPACT);
    char *head = sbx_xasprintf("POST " SBX__DK_API "%s HTTP/1.1\r\nHost: docker\r\n"
                               "Content-Type: application/json\r\nConnection: Upgrade\r\n"
                               "Upgrade: tcp\r\nContent-Length: %zu\r\n\r\n",
                               path, strlen(text));
    struct sbx_buf in;
    sbx_buf_init(&in, HIJACK_HEAD_MAX + 65536);
    if ((rc = unix_connect(e, &fd, err)) < 0)
        goto out;
    if ((rc = sbx_fd_write_all(fd, head, strlen(head), err)) < 0 ||
        (rc = sbx_fd_write_all(fd, text, strlen(text), err)) < 0)
        goto out;
    int64_t deadline = sbx_deadline_after_ms(e->timeout_ms);
    char *end = NULL;
    while (!end) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int left = sbx_deadline_poll_ms(deadline);
        if (left == 0) {
            rc = sbx_error_set(err, SBX_E_TIMEOUT, 0, "the Docker engine did not answer %s", path);
            goto out;
        }
        int r = poll(&p, 1, left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            continue;
        char buf[4096];
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rc = sbx_error_set(err, SBX_E_SANDBOX, n < 0 ? errno : 0,
                               "the Docker engine closed the connection of %s", path);
            goto out;
        }
        if ((rc = sbx_buf_add(&in, buf, (size_t)n, err)) < 0)
            goto out;
        end = strstr(in.data, "\r\n\r\n");
        if (!end && in.len > HIJACK_HEAD_MAX) {
            rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "the Docker engine's answer head is too long");
            goto out;
        }
    }
    int status = 0;
    if (in.len >= 12 && strncmp(in.data, "HTTP/1.", 7) == 0)
        status = (in.data[9] - '0') * 100 + (in.data[10] - '0') * 10 + (in.data[11] - '0');
    size_t hlen = (size_t)(end - in.data) + 4;
    if (status != 101 && status != 200) {
        struct sbx_buf rest;
        sbx_buf_init(&rest, 65536);
        struct sbx_error ignored = SBX_ERROR_INIT;
        if (sbx_buf_add(&rest, in.data + hlen, in.len - hlen, &ignored) < 0)
            sbx_buf_reset(&rest);
        rc = sbx__dk_status_error(status, &rest, err);
        sbx_buf_release(&rest);
        goto out;
    }
    if ((rc = sbx_buf_add(leftover, in.data + hlen, in.len - hlen, err)) < 0)
        goto out;
    *out_fd = fd;
    fd = -1;
out:
    sbx_fd_close(&fd);
    sbx_buf_release(&in);
    free(text);
    free(head);
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
    if (unix_connect(e, &fd, NULL) < 0)
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
