/* The LXD REST client on the remote layer (src/sandbox/wire/: the endpoint, requests,
 * WebSockets): the server's unix socket, or https with a client certificate and a pinned
 * server (its CA or certificate, or its key); the answers' envelope ({"type": "sync" |
 * "async" | "error", ...}) and operations; the errors users hit said plainly (the server not
 * running, a certificate it does not trust, a member that is gone). The files API's requests,
 * whose metadata comes in X-LXD-* headers, are made here with curl on the endpoint's
 * settings. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "core/dl-curl.h"
#include "providers/lxd/lxd.h"
#include "sandbox/wire/http.h"
#include "sandbox/wire/wire.h"
#include "sbx/fs.h"
#include "sbx/json.h"

static const char *const default_socks[] = {"/var/lib/lxd/unix.socket",
                                            "/var/snap/lxd/common/lxd/unix.socket", NULL};

static int is_sock(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISSOCK(st.st_mode);
}

/* The socket of an endpoint given as NULL: $LXD_DIR's, else the first default that exists. */
static char *default_endpoint(void)
{
    const char *dir = getenv("LXD_DIR");
    if (dir && dir[0] == '/')
        return sbx_xasprintf("%s/unix.socket", dir);
    for (size_t i = 0; default_socks[i]; i++)
        if (is_sock(default_socks[i]))
            return sbx_xstrdup(default_socks[i]);
    return sbx_xstrdup(default_socks[0]);
}

static int has_space_or_control(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s <= ' ' || *s == 0x7f)
            return 1;
    return 0;
}

/* "https://HOST[:PORT][/]" into base and hostport. */
static int parse_https(struct sbx__lxd_server *sv, const char *url, struct sbx_error *err)
{
    const char *h = url + 8, *end;
    if (*h == '[') {
        end = strchr(h, ']');
        if (!end)
            return sbx_error_set(err, SBX_E_INVAL, 0, "lxd endpoint '%s': unclosed '['", url);
        end++;
    } else {
        end = h + strcspn(h, ":/");
    }
    if (end == h || has_space_or_control(url) || strpbrk(url, "?#@"))
        return sbx_error_set(err, SBX_E_INVAL, 0, "lxd endpoint '%s' is not https://HOST[:PORT]",
                             url);
    long port = SBX__LXD_PORT;
    const char *rest = end;
    if (*rest == ':') {
        char *pe;
        port = strtol(rest + 1, &pe, 10);
        if (pe == rest + 1 || port < 1 || port > 65535)
            return sbx_error_set(err, SBX_E_INVAL, 0, "lxd endpoint '%s': bad port", url);
        rest = pe;
    }
    if (*rest && strcmp(rest, "/") != 0)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "lxd endpoint '%s' has a path: give the server only (https://HOST"
                             "[:PORT])",
                             url);
    sv->url = sbx_xasprintf("https://%.*s:%ld", (int)(end - h), h, port);
    return 0;
}

static int tls_files(struct sbx__lxd_server *sv, const struct sbx_lxd_options *o,
                     struct sbx_error *err)
{
    const char *files[] = {o->client_cert, o->client_key, o->server_cert};
    static const char *const names[] = {"client_cert", "client_key", "server_cert"};
    for (size_t i = 0; i < 3; i++)
        if (files[i] && files[i][0] != '/')
            return sbx_error_set(err, SBX_E_INVAL, 0, "lxd %s '%s' is not an absolute path",
                                 names[i], files[i]);
    if (!sv->sock) {
        if (!o->client_cert || !o->client_key)
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "lxd endpoint '%s' needs a client certificate and its key "
                                 "(client_cert, client_key) the server trusts",
                                 sv->url);
        if (!o->server_cert && !o->server_pubkey && !o->server_fingerprint)
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "lxd endpoint '%s': say how to recognise the server: "
                                 "server_cert (its CA or certificate), server_pubkey "
                                 "(sha256//...) or server_fingerprint; sbx never trusts a "
                                 "server on first use",
                                 sv->url);
    } else {
        /* A unix socket needs no certificate: any given (a recorded sandbox's, merged with
         * another endpoint on the command line) are not used. */
        return 0;
    }
    if (o->server_pubkey &&
        (strncmp(o->server_pubkey, "sha256//", 8) != 0 || has_space_or_control(o->server_pubkey)))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "lxd server_pubkey must be sha256//BASE64 (the SHA-256 of the "
                             "server's public key)");
    sv->client_cert = o->client_cert ? sbx_xstrdup(o->client_cert) : NULL;
    return 0;
}

static int valid_project(const char *p)
{
    size_t n = strlen(p);
    return n > 0 && n <= 63 &&
           strspn(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                     "0123456789-_.") == n;
}

int sbx__lxd_server_init(struct sbx__lxd_server *sv, const struct sbx_lxd_options *o,
                         struct sbx_error *err)
{
    char *given = o->endpoint && o->endpoint[0] ? sbx_xstrdup(o->endpoint) : default_endpoint();
    int rc = 0;
    memset(sv, 0, sizeof(*sv));
    if (strncmp(given, "https://", 8) == 0) {
        rc = parse_https(sv, given, err);
    } else if (given[0] == '/' || strncmp(given, "unix://", 7) == 0) {
        const char *path = given[0] == '/' ? given : given + 7;
        if (path[0] != '/' || has_space_or_control(path))
            rc = sbx_error_set(err, SBX_E_INVAL, 0,
                               "lxd endpoint '%s' is not an absolute socket path", given);
        else if (strlen(path) >= sizeof(((struct sockaddr_un *)0)->sun_path))
            rc = sbx_error_set(err, SBX_E_INVAL, 0, "lxd socket path '%s' is too long", path);
        if (rc == 0) {
            sv->sock = sbx_xstrdup(path);
            sv->url = sbx_xasprintf("unix://%s", path);
        }
    } else {
        rc = sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                           "lxd endpoint '%s': only unix sockets (unix:///PATH, /PATH) and "
                           "https://HOST[:PORT] are supported",
                           given);
    }
    if (rc == 0)
        rc = tls_files(sv, o, err);
    if (rc == 0 && o->project && !valid_project(o->project))
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "'%s' is not an lxd project name", o->project);
    if (rc == 0 && o->request_timeout_ms < 0)
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "request timeout must not be negative");
    free(given);
    sv->timeout_ms = o->request_timeout_ms ? o->request_timeout_ms : SBX__LXD_DEFAULT_MS;
    /* With a pinned key and no CA the chain is not checked (LXD's own certificates are
     * self-signed and name only the machine); the client certificate on https only. */
    struct sbx__endpoint_opts eo = {.url = sv->url,
                                    .name = "LXD",
                                    .ca_file = sv->sock ? NULL : o->server_cert,
                                    .pin_pubkey = sv->sock ? NULL : o->server_pubkey,
                                    .pin_cert_sha256 = sv->sock ? NULL : o->server_fingerprint,
                                    .cert_file = sv->sock ? NULL : o->client_cert,
                                    .key_file = sv->sock ? NULL : o->client_key,
                                    .timeout_ms = sv->timeout_ms,
                                    .max_retries = -1};
    if (rc == 0)
        rc = sbx__endpoint_new(&eo, &sv->ep, err);
    if (rc < 0) {
        sbx__lxd_server_release(sv);
        return rc;
    }
    sv->project = sbx_xstrdup(o->project ? o->project : "default");
    return 0;
}

void sbx__lxd_server_release(struct sbx__lxd_server *sv)
{
    sbx__endpoint_free(sv->ep);
    free(sv->url);
    free(sv->sock);
    free(sv->client_cert);
    free(sv->project);
    memset(sv, 0, sizeof(*sv));
}

static char *dup_or_null(const char *s)
{
    return s ? sbx_xstrdup(s) : NULL;
}

void sbx__lxd_server_copy(struct sbx__lxd_server *dst, const struct sbx__lxd_server *src)
{
    dst->ep = src->ep ? sbx__endpoint_ref(src->ep) : NULL;
    dst->url = dup_or_null(src->url);
    dst->sock = dup_or_null(src->sock);
    dst->client_cert = dup_or_null(src->client_cert);
    dst->project = dup_or_null(src->project);
    dst->timeout_ms = src->timeout_ms;
}

char *sbx__lxd_escape(const char *s, int keep_slash)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = strlen(s);
    char *out = sbx_xmalloc(3 * n + 1), *o = out;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            *p == '-' || *p == '.' || *p == '_' || *p == '~' || (keep_slash && *p == '/')) {
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

void sbx__lxd_resp_init(struct sbx__lxd_resp *r)
{
    memset(r, 0, sizeof(*r));
    sbx_buf_init(&r->body, SBX_BUF_NOLIMIT);
    r->meta.uid = r->meta.gid = -1;
    r->meta.total = -1;
}

void sbx__lxd_resp_release(struct sbx__lxd_resp *r)
{
    sbx_buf_release(&r->body);
}

/* The error of a request that did not get an answer: the remote layer's words, or for a unix
 * socket what is wrong with it (missing: is lxd running; no permission: the lxd group). */
static int reach_error(const struct sbx__lxd_server *sv, int rc, struct sbx_error *err)
{
    struct stat st;
    if (rc != -SBX_E_HTTP || !sv->sock)
        return rc;
    if (stat(sv->sock, &st) < 0)
        return sbx_error_set(err, SBX_E_HTTP, errno,
                             "cannot reach LXD at '%s': the socket does not exist (is lxd "
                             "running? sbx looks at $LXD_DIR, /var/lib/lxd and the snap's "
                             "directory)",
                             sv->url);
    if (access(sv->sock, W_OK) < 0)
        return sbx_error_set(err, SBX_E_PERM, errno,
                             "permission denied on '%s' (add your user to the lxd group)",
                             sv->sock);
    return rc;
}

/* The error of a files API request curl could not make (cc a CURLcode). */
static int curl_error(const struct sbx__lxd_server *sv, CURLcode cc, const char *cerr,
                      const char *what, struct sbx_error *err)
{
    char why[400];
    const char *d = cerr && cerr[0] ? cerr : curl_easy_strerror(cc);
    sbx__wire_clean(d, strlen(d), why, sizeof(why));
    if (cc == CURLE_OPERATION_TIMEDOUT)
        return sbx_error_set(err, SBX_E_TIMEOUT, 0,
                             "LXD at '%s' did not answer %s within %lld ms (is the member "
                             "down?)",
                             sv->url, what, (long long)sv->timeout_ms);
    int rc = sbx_error_set(err, SBX_E_HTTP, 0, "%s LXD at '%s': %s: %s",
                           cc == CURLE_COULDNT_CONNECT ? "cannot reach" : "the request to", sv->url,
                           what, why);
    return reach_error(sv, rc, err);
}

struct xfer {
    const struct sbx__lxd_req *req;
    struct sbx__lxd_resp *resp;
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
    if (x->req->download_fd >= 0 && x->resp->status >= 200 && x->resp->status < 300) {
        struct sbx_error ignored = SBX_ERROR_INIT;
        if (sbx_fd_write_all(x->req->download_fd, p, n, &ignored) < 0) {
            x->write_errno = ignored.sys_errno ? ignored.sys_errno : EIO;
            return 0;
        }
        return n;
    }
    /* Error bodies are kept for the message, never written into the file. */
    if (sbx_buf_add(&x->resp->body, p, n, NULL) < 0) {
        x->too_big = 1;
        return 0;
    }
    return n;
}

/* "2026-12-03 04:53:32.123 +0000 UTC" (Go's time.String) into ns since the epoch. */
static int64_t parse_modified(const char *v)
{
    struct tm tm = {0};
    int frac_len = 0;
    long frac = 0;
    char tail[16] = "";
    if (sscanf(v, "%d-%d-%d %d:%d:%d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
               &tm.tm_min, &tm.tm_sec) != 6)
        return 0;
    const char *dot = strchr(v, '.');
    if (dot && dot < v + 20 + 10 && sscanf(dot + 1, "%9ld%n%15s", &frac, &frac_len, tail) >= 1)
        for (int i = frac_len; i < 9; i++)
            frac *= 10;
    const char *zone = strstr(v, " +0000");
    if (!zone)
        return 0; /* only UTC is reported; another zone is not guessed */
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    time_t t = timegm(&tm);
    return t < 0 ? 0 : (int64_t)t * 1000000000 + frac;
}

static void take_meta(struct sbx__lxd_fmeta *m, const char *name, size_t nl, const char *v)
{
    if (nl == 10 && strncasecmp(name, "X-LXD-type", nl) == 0) {
        m->have = 1;
        m->type = strcmp(v, "file") == 0        ? SBX_FILE_REGULAR
                  : strcmp(v, "directory") == 0 ? SBX_FILE_DIR
                  : strcmp(v, "symlink") == 0   ? SBX_FILE_SYMLINK
                                                : SBX_FILE_OTHER;
    } else if (nl == 9 && strncasecmp(name, "X-LXD-uid", nl) == 0) {
        m->uid = strtoll(v, NULL, 10);
    } else if (nl == 9 && strncasecmp(name, "X-LXD-gid", nl) == 0) {
        m->gid = strtoll(v, NULL, 10);
    } else if (nl == 10 && strncasecmp(name, "X-LXD-mode", nl) == 0) {
        m->mode = (mode_t)(strtoul(v, NULL, 8) & 07777);
    } else if (nl == 14 && strncasecmp(name, "X-LXD-modified", nl) == 0) {
        m->mtime_ns = parse_modified(v);
    }
}

static size_t on_header(char *p, size_t size, size_t nmemb, void *ud)
{
    struct xfer *x = ud;
    size_t n = size * nmemb;
    if (n >= 10 && strncmp(p, "HTTP/", 5) == 0) {
        /* The status line (HTTP/1.1 or HTTP/2): known before the body, so error bodies never
         * reach a file. */
        const char *sp = memchr(p, ' ', n);
        if (sp && (size_t)(sp - p) + 4 <= n)
            x->resp->status = (sp[1] - '0') * 100 + (sp[2] - '0') * 10 + (sp[3] - '0');
        return n;
    }
    const char *colon = memchr(p, ':', n);
    if (colon && n < 128 && strncasecmp(p, "Content-Range:", 14) == 0) {
        /* "bytes 0-0/N" or "bytes * /N": the size of the whole file. */
        const char *slash = memchr(p, '/', n);
        char *end = NULL;
        long long t = slash ? strtoll(slash + 1, &end, 10) : -1;
        if (slash && end != slash + 1 && t >= 0)
            x->resp->meta.total = t;
        return n;
    }
    if (!colon || n > 1024 || (size_t)(colon - p) < 9 || strncasecmp(p, "X-LXD-", 6) != 0)
        return n;
    char v[1024];
    const char *s = colon + 1, *e = p + n;
    while (s < e && (*s == ' ' || *s == '\t'))
        s++;
    while (e > s && (e[-1] == '\r' || e[-1] == '\n' || e[-1] == ' '))
        e--;
    snprintf(v, sizeof(v), "%.*s", (int)(e - s), s);
    take_meta(&x->resp->meta, p, (size_t)(colon - p), v);
    return n;
}

static size_t on_upload(char *p, size_t size, size_t nmemb, void *ud)
{
    const struct sbx__lxd_req *req = ud;
    for (;;) {
        ssize_t r = read(req->upload_fd, p, size * nmemb);
        if (r >= 0)
            return (size_t)r;
        if (errno != EINTR)
            return CURL_READFUNC_ABORT;
    }
}

/* path with the project's query parameter. Caller frees. */
static char *with_project(const struct sbx__lxd_server *sv, const char *path)
{
    char *proj = sbx__lxd_escape(sv->project, 0);
    char *full = sbx_xasprintf("%s%cproject=%s", path, strchr(path, '?') ? '&' : '?', proj);
    free(proj);
    return full;
}

static struct curl_slist *set_body(CURL *c, const struct sbx__lxd_req *req, const char *body,
                                   struct curl_slist *hdrs)
{
    if (body) {
        hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
    } else if (req->upload_fd >= 0) {
        hdrs = curl_slist_append(hdrs, "Content-Type: application/octet-stream");
        curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(c, CURLOPT_READFUNCTION, on_upload);
        curl_easy_setopt(c, CURLOPT_READDATA, req);
        curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)req->upload_size);
    } else if (strcmp(req->method, "POST") == 0 || strcmp(req->method, "PUT") == 0 ||
               strcmp(req->method, "PATCH") == 0) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, 0L);
    }
    if (strcmp(req->method, "HEAD") == 0)
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    else if (strcmp(req->method, "GET") != 0)
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, req->method);
    return hdrs;
}

int sbx__lxd_call(const struct sbx__lxd_server *sv, const struct sbx__lxd_req *req,
                  struct sbx__lxd_resp *resp, struct sbx_error *err)
{
    int rc = sbx__curl_load(err);
    if (rc < 0)
        return rc;
    CURL *c = curl_easy_init();
    if (!c)
        sbx__bug(__FILE__, __LINE__, "curl_easy_init failed");
    struct curl_slist *hdrs = NULL;
    char *url = with_project(sv, req->path);
    char *body = req->json ? sbx_json_dumps(req->json, SBX_JSON_COMPACT) : NULL;
    char cerr[CURL_ERROR_SIZE] = "";
    struct xfer x = {req, resp, 0, req->max_body ? req->max_body : SBX__LXD_BODY_MAX, 0, 0};
    if ((rc = sbx__endpoint_apply(sv->ep, c, url, 0, &hdrs, err)) < 0) {
        sbx__endpoint_headers_free(hdrs);
        curl_easy_cleanup(c);
        free(url);
        free(body);
        return rc;
    }
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, cerr);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)sv->timeout_ms);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &x);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &x);
    hdrs = set_body(c, req, body, hdrs);
    for (size_t i = 0; req->headers[i]; i++)
        hdrs = curl_slist_append(hdrs, req->headers[i]);
    hdrs = curl_slist_append(hdrs, "Expect:");
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    CURLcode cc = curl_easy_perform(c);
    if (cc == CURLE_OK) {
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &resp->status);
    } else if (x.too_big) {
        rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "LXD's answer to %s %s is larger than %llu bytes",
                           req->method, req->path, (unsigned long long)x.max);
    } else if (x.write_errno) {
        rc = sbx_error_errno(err, x.write_errno, "cannot store LXD's answer");
    } else {
        char *what = sbx_xasprintf("%s %s", req->method, req->path);
        rc = curl_error(sv, cc, cerr, what, err);
        free(what);
    }
    sbx__endpoint_headers_free(hdrs);
    curl_easy_cleanup(c);
    free(url);
    if (body) {
        /* A body may carry the manifest's environment: secret values. */
        explicit_bzero(body, strlen(body));
        free(body);
    }
    return rc;
}

/* A known message of the server, said in sbx's words with what to do. */
static const char *hint_for(const char *msg)
{
    static const struct {
        const char *says, *hint;
    } hints[] = {
            {"Project not found", " (the project does not exist on this server)"},
            {"Missing event connection with target cluster member",
             " (the member running the instance does not answer: it may be down)"},
            {"Unable to connect to", " (a cluster member does not answer: it may be down)"},
            {"not authorized", " (the server does not trust this client certificate: add it "
                               "with `lxc config trust add`)"},
            {"Certificate is restricted", " (this client certificate may not use the project)"},
    };
    for (size_t i = 0; i < sizeof(hints) / sizeof(hints[0]); i++)
        if (strstr(msg, hints[i].says))
            return hints[i].hint;
    return "";
}

int sbx__lxd_status_error(const struct sbx__lxd_server *sv, long status, const struct sbx_buf *body,
                          struct sbx_error *err)
{
    json_t *j = body->len ? json_loadb(body->data, body->len, 0, NULL) : NULL;
    const char *raw = json_string_value(json_object_get(j, "error"));
    json_int_t code = json_integer_value(json_object_get(j, "error_code"));
    char msg[512];
    if (code >= 400 && code < 600)
        status = (long)code;
    if (raw && raw[0])
        sbx__wire_clean(raw, strlen(raw), msg, sizeof(msg));
    else
        snprintf(msg, sizeof(msg), "HTTP status %ld", status);
    enum sbx_errcode ec = status == 404                    ? SBX_E_NOTFOUND
                          : status == 409                  ? SBX_E_EXISTS
                          : status == 401 || status == 403 ? SBX_E_PERM
                          : status >= 400 && status < 500  ? SBX_E_INVAL
                                                           : SBX_E_SANDBOX;
    int rc = sbx_error_set(err, ec, 0, "LXD at '%s' says: %s%s", sv->url, msg, hint_for(msg));
    json_decref(j);
    return rc;
}

/* The operation's id from "/1.0/operations/ID[?project=...]". */
static char *op_id(const char *path)
{
    const char *pre = "/1.0/operations/";
    if (!path || strncmp(path, pre, strlen(pre)) != 0)
        return NULL;
    const char *id = path + strlen(pre);
    size_t n = strcspn(id, "?/");
    if (n == 0 || n > 64 || strspn(id, "0123456789abcdefABCDEF-") < n)
        return NULL;
    return sbx_xstrndup(id, n);
}

int sbx__lxd_envelope(const struct sbx__lxd_server *sv, long status, const struct sbx_buf *body,
                      json_t **metadata, char **op, struct sbx_error *err)
{
    if (status >= 400)
        return sbx__lxd_status_error(sv, status, body, err);
    json_t *j = NULL;
    struct sbx_json_limits lim = {.max_bytes = SBX__LXD_BODY_MAX, .max_depth = 64};
    int rc = body->len ? sbx_json_parse(body->data, body->len, &lim, &j, err)
                       : sbx_error_set(err, SBX_E_PARSE, 0, "LXD sent an empty answer");
    if (rc < 0) {
        sbx_error_prefix(err, "LXD at '%s'", sv->url);
        return rc;
    }
    const char *type = json_string_value(json_object_get(j, "type"));
    char *id = NULL;
    if (type && strcmp(type, "error") == 0) {
        rc = sbx__lxd_status_error(sv, status, body, err);
    } else if (type && strcmp(type, "async") == 0) {
        id = op_id(json_string_value(json_object_get(j, "operation")));
        if (!id)
            rc = sbx_error_set(err, SBX_E_PARSE, 0, "LXD at '%s' made an operation without an id",
                               sv->url);
    } else if (!type || strcmp(type, "sync") != 0) {
        rc = sbx_error_set(err, SBX_E_PARSE, 0, "LXD at '%s' sent an answer of no known type",
                           sv->url);
    }
    if (rc == 0 && metadata) {
        json_t *md = json_object_get(j, "metadata");
        *metadata = md ? json_incref(md) : json_null();
    }
    if (rc == 0 && op)
        *op = id;
    else
        free(id);
    json_decref(j);
    return rc;
}

/* A request through the remote layer and its envelope; timeout_ms 0: the server's. */
static int json_call(const struct sbx__lxd_server *sv, const char *method, const char *path,
                     const json_t *body, int64_t timeout_ms, json_t **metadata, char **op,
                     struct sbx_error *err)
{
    char *full = with_project(sv, path);
    struct sbx__http_req req = {.method = method,
                                .path = full,
                                .json = body,
                                .max_body = SBX__LXD_BODY_MAX,
                                .timeout_ms = timeout_ms,
                                .no_retry = 1};
    struct sbx__http_resp resp;
    sbx__http_resp_init(&resp);
    int rc = sbx__http_call(sv->ep, &req, &resp, err);
    if (rc < 0)
        rc = reach_error(sv, rc, err);
    else
        rc = sbx__lxd_envelope(sv, resp.status, &resp.body, metadata, op, err);
    sbx__http_resp_release(&resp);
    free(full);
    return rc;
}

int sbx__lxd_json(const struct sbx__lxd_server *sv, const char *method, const char *path,
                  const json_t *body, json_t **metadata, char **op, struct sbx_error *err)
{
    return json_call(sv, method, path, body, 0, metadata, op, err);
}

int sbx__lxd_op_wait(const struct sbx__lxd_server *sv, const char *op, int64_t timeout_ms,
                     json_t **out, struct sbx_error *err)
{
    long secs = timeout_ms < 0 ? -1 : (long)((timeout_ms + 999) / 1000);
    char *path = sbx_xasprintf("/1.0/operations/%s/wait?timeout=%ld", op, secs);
    json_t *md = NULL;
    /* The wait itself may take the whole timeout: the request's bound is a little longer. */
    int rc = json_call(sv, "GET", path, NULL, timeout_ms < 0 ? -1 : timeout_ms + sv->timeout_ms,
                       &md, NULL, err);
    rc = sbx__lxd_op_result(sv, op, rc, md, err);
    /* An operation that ended badly still has its metadata (an exec's "return"). */
    if (out && md && json_is_object(md))
        *out = json_incref(md);
    json_decref(md);
    free(path);
    return rc;
}

int sbx__lxd_op_result(const struct sbx__lxd_server *sv, const char *op, int rc, const json_t *md,
                       struct sbx_error *err)
{
    const char *status = json_string_value(json_object_get(md, "status"));
    const char *why = json_string_value(json_object_get(md, "err"));
    if (rc == 0 && status && strcmp(status, "Running") == 0)
        return sbx_error_set(err, SBX_E_TIMEOUT, 0, "LXD operation %s is still running", op);
    if (rc == 0 && (!status || strcmp(status, "Success") != 0)) {
        const char *text = why && why[0] ? why : status ? status : "no status";
        char msg[512];
        sbx__wire_clean(text, strlen(text), msg, sizeof(msg));
        return sbx_error_set(err, SBX_E_SANDBOX, 0, "LXD at '%s': %s%s", sv->url, msg,
                             hint_for(msg));
    }
    return rc;
}

int sbx__lxd_json_wait(const struct sbx__lxd_server *sv, const char *method, const char *path,
                       const json_t *body, json_t **out, struct sbx_error *err)
{
    json_t *md = NULL;
    char *op = NULL;
    int rc = sbx__lxd_json(sv, method, path, body, &md, &op, err);
    if (rc == 0 && op) {
        json_decref(md);
        md = NULL;
        rc = sbx__lxd_op_wait(sv, op, sv->timeout_ms, &md, err);
        if (rc < 0) {
            json_decref(md);
            md = NULL;
        }
    }
    if (rc == 0 && out)
        *out = md;
    else
        json_decref(md);
    free(op);
    return rc;
}

int sbx__lxd_check_server(const struct sbx__lxd_server *sv, int *clustered, struct sbx_error *err)
{
    json_t *md = NULL;
    int rc = sbx__lxd_json(sv, "GET", "/1.0", NULL, &md, NULL, err);
    if (rc < 0)
        return rc;
    const char *auth = json_string_value(json_object_get(md, "auth"));
    if (!auth || strcmp(auth, "trusted") != 0)
        rc = sbx_error_set(err, SBX_E_PERM, 0,
                           "LXD at '%s' does not trust this client%s%s%s (add its certificate "
                           "with `lxc config trust add`)",
                           sv->url, sv->client_cert ? " certificate '" : "",
                           sv->client_cert ? sv->client_cert : "", sv->client_cert ? "'" : "");
    if (rc == 0 && clustered)
        *clustered = json_is_true(
                json_object_get(json_object_get(md, "environment"), "server_clustered"));
    json_decref(md);
    return rc;
}

int sbx__lxd_tmpfile(int *out, struct sbx_error *err)
{
    const char *dir = getenv("TMPDIR");
    if (!dir || dir[0] != '/')
        dir = "/tmp";
    int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0)
        fd = memfd_create("sbx-lxd", MFD_CLOEXEC);
    if (fd < 0)
        return sbx_error_errno(err, errno, "cannot make a temporary file");
    *out = fd;
    return 0;
}

int sbx__lxd_ws_open(const struct sbx__lxd_server *sv, const char *path, struct sbx__wsconn **out,
                     struct sbx_error *err)
{
    char *full = with_project(sv, path);
    int rc = sbx__wsconn_open(sv->ep, full, NULL, NULL, SBX__LXD_MESSAGE_MAX, sv->timeout_ms, out,
                              err);
    free(full);
    return rc < 0 ? reach_error(sv, rc, err) : rc;
}
