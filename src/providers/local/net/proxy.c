/* The allow-list proxy's pure parts: host names and patterns, address classification, request
 * parsing, refusal texts. No system state is read here. */
#include "providers/local/net/net.h"

#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sbx/common.h"

/* ------------------------------------------------------------------ host names ---- */

static int is_name_char(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
}

/* inet_aton accepts forms a name check would let through as a "name" ("0x7f.1", "2130706433"):
 * every label made of hex digits, 'x' and digits is tried as an IPv4 literal. */
static int looks_numeric(const char *s)
{
    for (; *s; s++) {
        if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f') || *s == 'x' || *s == '.'))
            return 0;
    }
    return 1;
}

int sbx__proxy_host_normalize(const char *host, size_t len, char **out, int *is_literal,
                              struct sockaddr_storage *addr, struct sbx_error *err)
{
    char buf[SBX__PROXY_MAX_HOST + 3];
    struct sockaddr_storage ss;
    int literal = 0;
    int rc = 0;

    memset(&ss, 0, sizeof(ss));
    if (len == 0)
        return sbx_error_set(err, SBX_E_INVAL, 0, "empty host name");
    if (len > SBX__PROXY_MAX_HOST + 2)
        return sbx_error_set(err, SBX_E_INVAL, 0, "host name of %zu bytes is too long", len);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)host[i];
        if (c == 0 || c >= 0x80)
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "host name '%.*s' is not ASCII (use its xn-- form)", (int)len,
                                 host);
        buf[i] = (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : (char)c;
    }
    buf[len] = '\0';

    if (buf[0] == '[') {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
        if (len < 3 || buf[len - 1] != ']')
            return sbx_error_set(err, SBX_E_INVAL, 0, "bad IPv6 literal '%s'", buf);
        buf[len - 1] = '\0';
        if (inet_pton(AF_INET6, buf + 1, &s6->sin6_addr) != 1)
            return sbx_error_set(err, SBX_E_INVAL, 0, "bad IPv6 literal '%s]'", buf);
        s6->sin6_family = AF_INET6;
        literal = 1;
    } else {
        size_t n = len;
        if (buf[n - 1] == '.')
            buf[--n] = '\0';
        if (n == 0 || n > SBX__PROXY_MAX_HOST)
            return sbx_error_set(err, SBX_E_INVAL, 0, "bad host name '%s'", buf);
        size_t label = 0;
        for (size_t i = 0; i < n; i++) {
            unsigned char c = (unsigned char)buf[i];
            if (!is_name_char(c))
                return sbx_error_set(err, SBX_E_INVAL, 0,
                                     "host name '%s' has a character outside [a-z0-9-_.]", buf);
            if (c == '.') {
                if (label == 0)
                    return sbx_error_set(err, SBX_E_INVAL, 0, "host name '%s' has an empty label",
                                         buf);
                label = 0;
            } else if (++label > 63) {
                return sbx_error_set(err, SBX_E_INVAL, 0,
                                     "host name '%s' has a label over 63 bytes", buf);
            }
        }
        if (label == 0)
            return sbx_error_set(err, SBX_E_INVAL, 0, "host name '%s' has an empty label", buf);
        if (looks_numeric(buf)) {
            struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
            if (inet_aton(buf, &s4->sin_addr)) {
                s4->sin_family = AF_INET;
                literal = 1;
            } else if (buf[strspn(buf, "0123456789.")] == '\0') {
                /* All digits but no address (a part over its range): never a name either. */
                return sbx_error_set(err, SBX_E_INVAL, 0, "bad IPv4 literal '%s'", buf);
            }
        }
    }

    if (literal) {
        char text[INET6_ADDRSTRLEN];
        sbx__proxy_addr_str((struct sockaddr *)&ss, text, sizeof(text));
        *out = sbx_xstrdup(text);
    } else {
        *out = sbx_xstrdup(buf);
    }
    if (is_literal)
        *is_literal = literal;
    if (addr)
        *addr = ss;
    return rc;
}

int sbx__proxy_pattern_normalize(const char *pattern, char **out, struct sbx_error *err)
{
    const char *p = pattern;
    int wild = 0;
    char *norm = NULL;
    int literal = 0;
    int rc;

    if (strncmp(p, "*.", 2) == 0) {
        wild = 1;
        p += 2;
    }
    if (strchr(p, '*')) {
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "allow-list pattern '%s': '*' may only be a whole first label "
                             "(\"*.example.com\")",
                             pattern);
    }
    rc = sbx__proxy_host_normalize(p, strlen(p), &norm, &literal, NULL, err);
    if (rc < 0) {
        sbx_error_prefix(err, "allow-list pattern '%s'", pattern);
        return rc;
    }
    if (wild && literal) {
        free(norm);
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "allow-list pattern '%s': a wildcard needs a domain name", pattern);
    }
    if (wild && !strchr(norm, '.')) {
        free(norm);
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "allow-list pattern '%s': a wildcard over a top-level domain is "
                             "too wide",
                             pattern);
    }
    if (wild) {
        *out = sbx_xasprintf("*.%s", norm);
        free(norm);
    } else {
        *out = norm;
    }
    return 0;
}

int sbx__proxy_host_allowed(const char *host, const char *const *patterns, size_t n)
{
    size_t hl = strlen(host);
    for (size_t i = 0; i < n; i++) {
        const char *p = patterns[i];
        if (strncmp(p, "*.", 2) == 0) {
            const char *suffix = p + 1; /* ".example.com" */
            size_t sl = strlen(suffix);
            if (hl > sl && strcmp(host + hl - sl, suffix) == 0)
                return 1;
        } else if (strcmp(host, p) == 0) {
            return 1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ addresses ---- */

struct v4_rule {
    uint32_t net;
    int bits;
    const char *rule;
};

/* Ordered: the first match wins, so the metadata address comes before link-local. */
static const struct v4_rule v4_rules[] = {
        {0xA9FEA9FEu, 32, "cloud metadata (169.254.169.254)"},
        {0x00000000u, 8, "unspecified (0.0.0.0/8)"},
        {0x7F000000u, 8, "loopback (127.0.0.0/8)"},
        {0x0A000000u, 8, "private (RFC 1918, 10.0.0.0/8)"},
        {0xAC100000u, 12, "private (RFC 1918, 172.16.0.0/12)"},
        {0xC0A80000u, 16, "private (RFC 1918, 192.168.0.0/16)"},
        {0x64400000u, 10, "carrier-grade NAT (100.64.0.0/10)"},
        {0xA9FE0000u, 16, "link-local (169.254.0.0/16)"},
        {0xC0000000u, 24, "reserved (IETF protocol assignments, 192.0.0.0/24)"},
        {0xC6120000u, 15, "reserved (benchmarking, 198.18.0.0/15)"},
        {0xE0000000u, 4, "multicast (224.0.0.0/4)"},
        {0xFFFFFFFFu, 32, "broadcast (255.255.255.255)"},
        {0xF0000000u, 4, "reserved (240.0.0.0/4)"},
};

static const char *v4_refusal(uint32_t a, int allow_loopback)
{
    for (size_t i = 0; i < SBX_ARRAY_LEN(v4_rules); i++) {
        uint32_t mask = v4_rules[i].bits == 0 ? 0 : 0xFFFFFFFFu << (32 - v4_rules[i].bits);
        if ((a & mask) == v4_rules[i].net) {
            if (allow_loopback && v4_rules[i].net == 0x7F000000u)
                return NULL;
            return v4_rules[i].rule;
        }
    }
    return NULL;
}

static uint32_t v4_at(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static const char *v6_refusal(const unsigned char *a, int allow_loopback)
{
    static const unsigned char zero[16];
    static const unsigned char metadata[16] = {0xfd, 0x00, 0x0e, 0xc2, 0, 0, 0,    0,
                                               0,    0,    0,    0,    0, 0, 0x02, 0x54};
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    static const unsigned char nat64[12] = {0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};

    if (memcmp(a, zero, 16) == 0)
        return "unspecified (::)";
    if (memcmp(a, zero, 15) == 0 && a[15] == 1)
        return allow_loopback ? NULL : "loopback (::1)";
    if (memcmp(a, metadata, 16) == 0)
        return "cloud metadata (fd00:ec2::254)";
    if (memcmp(a, mapped, 12) == 0 || memcmp(a, nat64, 12) == 0)
        return v4_refusal(v4_at(a + 12), allow_loopback);
    if (memcmp(a, zero, 12) == 0)
        return "reserved (IPv4-compatible, ::/96)";
    if (a[0] == 0x20 && a[1] == 0x02) /* 6to4: the IPv4 address follows */
        return v4_refusal(v4_at(a + 2), allow_loopback);
    if ((a[0] & 0xfe) == 0xfc)
        return "unique local (fc00::/7)";
    if (a[0] == 0xfe && (a[1] & 0xc0) == 0x80)
        return "link-local (fe80::/10)";
    if (a[0] == 0xfe && (a[1] & 0xc0) == 0xc0)
        return "reserved (site-local, fec0::/10)";
    if (a[0] == 0xff)
        return "multicast (ff00::/8)";
    return NULL;
}

const char *sbx__proxy_addr_refusal(const struct sockaddr *addr, int allow_loopback)
{
    if (addr->sa_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)addr;
        return v4_refusal(ntohl(s4->sin_addr.s_addr), allow_loopback);
    }
    if (addr->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)addr;
        return v6_refusal(s6->sin6_addr.s6_addr, allow_loopback);
    }
    return "not an internet address";
}

void sbx__proxy_addr_str(const struct sockaddr *addr, char *buf, size_t size)
{
    const void *p = NULL;
    if (addr->sa_family == AF_INET)
        p = &((const struct sockaddr_in *)addr)->sin_addr;
    else if (addr->sa_family == AF_INET6)
        p = &((const struct sockaddr_in6 *)addr)->sin6_addr;
    if (!p || !inet_ntop(addr->sa_family, p, buf, (socklen_t)size))
        snprintf(buf, size, "?");
}

/* ------------------------------------------------------------------- requests ---- */

size_t sbx__proxy_head_len(const char *data, size_t len)
{
    for (size_t i = 0; i + 1 < len; i++) {
        if (data[i] != '\n')
            continue;
        if (data[i + 1] == '\n')
            return i + 2;
        if (i + 2 < len && data[i + 1] == '\r' && data[i + 2] == '\n')
            return i + 3;
    }
    return 0;
}

/* Headers that describe this hop only, or the proxy: never passed upstream. */
static int drop_header(const char *name, size_t n)
{
    static const char *const names[] = {"host",
                                        "connection",
                                        "proxy-connection",
                                        "keep-alive",
                                        "proxy-authorization",
                                        "proxy-authenticate",
                                        "te",
                                        "trailer",
                                        "upgrade"};
    for (size_t i = 0; i < SBX_ARRAY_LEN(names); i++) {
        if (strlen(names[i]) == n && strncasecmp(name, names[i], n) == 0)
            return 1;
    }
    return 0;
}

static int is_tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* Split "host[:port]" (host may be a bracketed IPv6 literal). */
static int split_authority(const char *a, size_t n, int default_port, struct sbx__proxy_request *r,
                           struct sbx_error *err)
{
    size_t hn = n;
    int port = default_port;
    if (memchr(a, '@', n))
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0, "user info in the request target");
    const char *colon = NULL;
    if (n > 0 && a[0] == '[') {
        const char *close = memchr(a, ']', n);
        if (!close)
            return sbx_error_set(err, SBX_E_PARSE, 0, "bad IPv6 literal in the request target");
        if ((size_t)(close - a) + 1 < n) {
            if (close[1] != ':')
                return sbx_error_set(err, SBX_E_PARSE, 0, "bad request target");
            colon = close + 1;
        }
    } else {
        colon = memchr(a, ':', n);
    }
    if (colon) {
        hn = (size_t)(colon - a);
        size_t pl = n - hn - 1;
        if (pl == 0 || pl > 5)
            return sbx_error_set(err, SBX_E_PARSE, 0, "bad port in the request target");
        port = 0;
        for (size_t i = 0; i < pl; i++) {
            if (colon[1 + i] < '0' || colon[1 + i] > '9')
                return sbx_error_set(err, SBX_E_PARSE, 0, "bad port in the request target");
            port = port * 10 + (colon[1 + i] - '0');
        }
        if (port < 1 || port > 65535)
            return sbx_error_set(err, SBX_E_PARSE, 0, "port %d out of range", port);
    } else if (default_port == 0) {
        return sbx_error_set(err, SBX_E_PARSE, 0, "CONNECT target without a port");
    }
    r->port = port;
    return sbx__proxy_host_normalize(a, hn, &r->host, &r->literal, &r->addr, err);
}

/* The request line "METHOD TARGET VERSION" of a head: its three parts, and where the headers
 * start. */
struct request_line {
    const char *method, *target, *version;
    size_t ml, tl, vl;
    const char *headers;
};

static int parse_request_line(const char *data, size_t len, struct request_line *rl,
                              struct sbx_error *err)
{
    const char *eol = memchr(data, '\n', len);
    if (!eol)
        return sbx_error_set(err, SBX_E_PARSE, 0, "no request line");
    size_t ll = (size_t)(eol - data);
    if (ll > 0 && data[ll - 1] == '\r')
        ll--;
    const char *sp1 = memchr(data, ' ', ll);
    const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', ll - (size_t)(sp1 + 1 - data)) : NULL;
    if (!sp1 || !sp2 || sp1 == data || sp2 == sp1 + 1)
        return sbx_error_set(err, SBX_E_PARSE, 0, "malformed request line");
    rl->method = data;
    rl->ml = (size_t)(sp1 - data);
    for (size_t i = 0; i < rl->ml; i++)
        if (!is_tchar((unsigned char)data[i]))
            return sbx_error_set(err, SBX_E_PARSE, 0, "malformed method");
    rl->target = sp1 + 1;
    rl->tl = (size_t)(sp2 - rl->target);
    rl->version = sp2 + 1;
    rl->vl = ll - (size_t)(rl->version - data);
    if (!(rl->vl == 8 &&
          (memcmp(rl->version, "HTTP/1.1", 8) == 0 || memcmp(rl->version, "HTTP/1.0", 8) == 0)))
        return sbx_error_set(err, SBX_E_PARSE, 0, "unsupported HTTP version");
    for (size_t i = 0; i < rl->tl; i++) {
        unsigned char c = (unsigned char)rl->target[i];
        if (c <= 0x20 || c >= 0x7f)
            return sbx_error_set(err, SBX_E_PARSE, 0, "bad character in the request target");
    }
    rl->headers = eol + 1;
    return 0;
}

/* An absolute-URI target "http://host[:port][/path]": the destination into r, and into head the
 * origin-form request line and a Host header made from the target. */
static int parse_absolute(const struct request_line *rl, struct sbx__proxy_request *r,
                          struct sbx_buf *head, struct sbx_error *err)
{
    const char *target = rl->target, *path = "/";
    size_t tl = rl->tl, pl = 1;
    int rc;
    if (tl < 7 || strncasecmp(target, "http://", 7) != 0) {
        if (tl > 0 && target[0] == '/')
            return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                                 "not a proxy request: the target must be an absolute "
                                 "http:// URI");
        if (tl >= 8 && strncasecmp(target, "https://", 8) == 0)
            return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                                 "https:// through a plain request: use CONNECT");
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0, "unsupported request target");
    }
    const char *auth = target + 7;
    size_t al = tl - 7;
    size_t an = strcspn(auth, "/?#");
    if (an > al)
        an = al;
    if ((rc = split_authority(auth, an, 80, r, err)) < 0)
        return rc;
    if (an < al) {
        path = auth + an;
        pl = al - an;
    }
    if ((rc = sbx_buf_add(head, rl->method, rl->ml, err)) < 0 ||
        (rc = sbx_buf_adds(head, path[0] == '/' ? " " : " /", err)) < 0) /* "http://h?q" */
        return rc;
    const char *frag = memchr(path, '#', pl);
    if (frag)
        pl = (size_t)(frag - path);
    if ((rc = sbx_buf_add(head, path, pl, err)) < 0 || (rc = sbx_buf_addch(head, ' ', err)) < 0 ||
        (rc = sbx_buf_add(head, rl->version, rl->vl, err)) < 0 ||
        (rc = sbx_buf_adds(head, "\r\nHost: ", err)) < 0)
        return rc;
    int v6 = strchr(r->host, ':') != NULL;
    if (r->port == 80)
        return sbx_buf_addf(head, err, "%s%s%s\r\n", v6 ? "[" : "", r->host, v6 ? "]" : "");
    return sbx_buf_addf(head, err, "%s%s%s:%d\r\n", v6 ? "[" : "", r->host, v6 ? "]" : "", r->port);
}

/* The header lines from p to the empty line (before end), checked; those passed upstream are
 * appended to head (none for a CONNECT). */
static int parse_headers(const char *p, const char *end, int connect, struct sbx_buf *head,
                         struct sbx_error *err)
{
    size_t nheaders = 0;
    int rc;
    for (;;) {
        const char *e = p < end ? memchr(p, '\n', (size_t)(end - p)) : NULL;
        if (!e)
            return sbx_error_set(err, SBX_E_PARSE, 0, "request head without its empty line");
        size_t hl = (size_t)(e - p);
        if (hl > 0 && p[hl - 1] == '\r')
            hl--;
        if (hl == 0)
            return 0;
        if (++nheaders > SBX__PROXY_MAX_HEADERS)
            return sbx_error_set(err, SBX_E_TOOBIG, 0, "more than %d request headers",
                                 SBX__PROXY_MAX_HEADERS);
        const char *colon = memchr(p, ':', hl);
        if (!colon || colon == p)
            return sbx_error_set(err, SBX_E_PARSE, 0, "malformed header line");
        for (const char *c = p; c < colon; c++)
            if (!is_tchar((unsigned char)*c))
                return sbx_error_set(err, SBX_E_PARSE, 0, "malformed header name");
        for (size_t i = 0; i < hl; i++)
            if (p[i] == '\r' || p[i] == '\0')
                return sbx_error_set(err, SBX_E_PARSE, 0, "bad character in a header");
        if (!connect && !drop_header(p, (size_t)(colon - p)) &&
            ((rc = sbx_buf_add(head, p, hl, err)) < 0 ||
             (rc = sbx_buf_adds(head, "\r\n", err)) < 0))
            return rc;
        p = e + 1;
    }
}

int sbx__proxy_parse(const char *data, size_t len, struct sbx__proxy_request *out,
                     struct sbx_error *err)
{
    struct sbx__proxy_request r;
    struct request_line rl = {0};
    struct sbx_buf head;
    int rc;

    memset(&r, 0, sizeof(r));
    sbx_buf_init(&head, SBX__PROXY_MAX_HEAD + 1024);
    if (len > SBX__PROXY_MAX_HEAD) {
        rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "request head over %d bytes", SBX__PROXY_MAX_HEAD);
        goto out;
    }
    if ((rc = parse_request_line(data, len, &rl, err)) < 0)
        goto out;
    r.connect = rl.ml == 7 && memcmp(rl.method, "CONNECT", 7) == 0;
    rc = r.connect ? split_authority(rl.target, rl.tl, 0, &r, err)
                   : parse_absolute(&rl, &r, &head, err);
    if (rc < 0 || (rc = parse_headers(rl.headers, data + len, r.connect, &head, err)) < 0)
        goto out;
    if (!r.connect) {
        if ((rc = sbx_buf_adds(&head, "Connection: close\r\n\r\n", err)) < 0)
            goto out;
        r.head = sbx_buf_detach(&head, &r.head_len);
    }
    *out = r;
    memset(&r, 0, sizeof(r));
out:
    sbx_buf_release(&head);
    sbx__proxy_request_release(&r);
    return rc;
}

void sbx__proxy_request_release(struct sbx__proxy_request *req)
{
    free(req->host);
    free(req->head);
    memset(req, 0, sizeof(*req));
}

/* ------------------------------------------------------------------- answers ---- */

static const char *reason(int status)
{
    switch (status) {
    case 200:
        return "Connection Established";
    case 400:
        return "Bad Request";
    case 403:
        return "Forbidden";
    case 405:
        return "Method Not Allowed";
    case 431:
        return "Request Header Fields Too Large";
    case 502:
        return "Bad Gateway";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    default:
        return "Error";
    }
}

int sbx__proxy_response(int status, const char *rule, const char *body, struct sbx_buf *out,
                        struct sbx_error *err)
{
    int rc = sbx_buf_addf(out, err,
                          "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\n"
                          "Content-Length: %zu\r\nConnection: close\r\n",
                          status, reason(status), strlen(body) + 1);
    if (rc == 0 && rule)
        rc = sbx_buf_addf(out, err, "X-Sbx-Proxy-Refused: %s\r\n", rule);
    if (rc == 0)
        rc = sbx_buf_addf(out, err, "\r\n%s\n", body);
    return rc;
}

static int add_target(const char *host, int port, struct sbx_buf *out, struct sbx_error *err)
{
    int v6 = strchr(host, ':') != NULL;
    return sbx_buf_addf(out, err, "sbx proxy refused '%s%s%s:%d': ", v6 ? "[" : "", host,
                        v6 ? "]" : "", port);
}

int sbx__proxy_refusal_domain(const char *host, int port, const char *const *patterns, size_t n,
                              struct sbx_buf *out, struct sbx_error *err)
{
    int rc = add_target(host, port, out, err);
    if (rc == 0)
        rc = sbx_buf_addf(out, err,
                          "the domain '%s' is not in the sandbox's allow list (allowed: ", host);
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = sbx_buf_addf(out, err, "%s%s", i ? ", " : "", patterns[i]);
    if (rc == 0)
        rc = sbx_buf_addch(out, ')', err);
    return rc;
}

int sbx__proxy_refusal_address(const char *host, int port, const struct sockaddr *addr,
                               const char *rule, struct sbx_buf *out, struct sbx_error *err)
{
    char text[INET6_ADDRSTRLEN];
    sbx__proxy_addr_str(addr, text, sizeof(text));
    int rc = add_target(host, port, out, err);
    if (rc == 0)
        rc = sbx_buf_addf(out, err, "address %s is in a refused range: %s", text, rule);
    return rc;
}

int sbx__proxy_refusal_port(const char *host, int port, const int *ports, size_t n,
                            struct sbx_buf *out, struct sbx_error *err)
{
    int rc = add_target(host, port, out, err);
    if (rc == 0)
        rc = sbx_buf_addf(out, err, "port %d is not allowed (allowed: ", port);
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = sbx_buf_addf(out, err, "%s%d", i ? ", " : "", ports[i]);
    if (rc == 0)
        rc = sbx_buf_addch(out, ')', err);
    return rc;
}
