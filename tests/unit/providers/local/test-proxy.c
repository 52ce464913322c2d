/* The sandbox network: proxy rules and parsing (pure), then the proxy and a port forwarder
 * end to end against a private network namespace made by a child of this test. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "providers/local/net/net.h"
#include "sbx/common.h"
#include "sbx/local.h"
#include "sbx/log.h"
#include "tap.h"

/* ------------------------------------------------------------ host names ---- */

static char *norm(const char *h, int *literal)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char *out = NULL;
    if (sbx__proxy_host_normalize(h, strlen(h), &out, literal, NULL, &err) < 0)
        return sbx_xasprintf("error: %s", err.msg);
    return out;
}

static void check_norm(const char *in, const char *want, int want_literal)
{
    int literal = -1;
    char *got = norm(in, &literal);
    CHECK_EQ_STR(got, want);
    if (strncmp(got, "error", 5) != 0)
        CHECK_EQ_INT(literal, want_literal);
    free(got);
}

static void test_host_normalize(void)
{
    check_norm("PyPI.org", "pypi.org", 0);
    check_norm("pypi.org.", "pypi.org", 0);
    check_norm("xn--bcher-kva.example", "xn--bcher-kva.example", 0);
    check_norm("deadbeef.com", "deadbeef.com", 0);
    check_norm("cafe", "cafe", 0); /* hex letters only, but no IPv4 form: a name */
    /* IPv4 literals in every form inet_aton knows come out dotted-decimal */
    check_norm("127.0.0.1", "127.0.0.1", 1);
    check_norm("2130706433", "127.0.0.1", 1);
    check_norm("0x7f.1", "127.0.0.1", 1);
    check_norm("0x7F000001", "127.0.0.1", 1);
    check_norm("0177.0.0.1", "127.0.0.1", 1);
    check_norm("169.254.43518", "169.254.169.254", 1);
    check_norm("[::1]", "::1", 1);
    check_norm("[::FFFF:127.0.0.1]", "::ffff:127.0.0.1", 1);

    char *e = norm("b\xc3\xbc"
                   "cher.example",
                   NULL);
    CHECK_CONTAINS(e, "not ASCII");
    free(e);
    e = norm("a..b", NULL);
    CHECK_CONTAINS(e, "empty label");
    free(e);
    e = norm("a b.com", NULL);
    CHECK_CONTAINS(e, "character outside");
    free(e);
    e = norm("999.1.1.1", NULL);
    CHECK_CONTAINS(e, "bad IPv4 literal");
    free(e);
    e = norm("[::1", NULL);
    CHECK_CONTAINS(e, "bad IPv6 literal");
    free(e);
    e = norm("[evil.com]", NULL);
    CHECK_CONTAINS(e, "bad IPv6 literal");
    free(e);
    char label[80];
    memset(label, 'a', 64);
    memcpy(label + 64, ".com", 5);
    e = norm(label, NULL);
    CHECK_CONTAINS(e, "over 63 bytes");
    free(e);
    char longname[300];
    for (int i = 0; i < 290; i += 2)
        memcpy(longname + i, "a.", 2);
    longname[290] = 'a';
    longname[291] = '\0';
    e = norm(longname, NULL);
    CHECK_CONTAINS(e, "too long");
    free(e);
}

static void test_patterns(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    char *p = NULL;
    CHECK_OK(sbx__proxy_pattern_normalize("*.PyPI.org", &p, &err), &err);
    CHECK_EQ_STR(p, "*.pypi.org");
    free(p);
    CHECK_OK(sbx__proxy_pattern_normalize("0x7f.1", &p, &err), &err);
    CHECK_EQ_STR(p, "127.0.0.1");
    free(p);
    CHECK_ERR(sbx__proxy_pattern_normalize("*", &p, &err), SBX_E_INVAL, &err, "whole first label");
    CHECK_ERR(sbx__proxy_pattern_normalize("*.com", &p, &err), SBX_E_INVAL, &err, "too wide");
    CHECK_ERR(sbx__proxy_pattern_normalize("a.*.com", &p, &err), SBX_E_INVAL, &err,
              "pattern 'a.*.com'");
    CHECK_ERR(sbx__proxy_pattern_normalize("py*.org", &p, &err), SBX_E_INVAL, &err,
              "whole first label");
    CHECK_ERR(sbx__proxy_pattern_normalize("*.10.0.0.1", &p, &err), SBX_E_INVAL, &err,
              "needs a domain name");
    CHECK_ERR(sbx__proxy_pattern_normalize("", &p, &err), SBX_E_INVAL, &err, "empty host");
    CHECK_ERR(sbx__proxy_pattern_normalize("exa mple.com", &p, &err), SBX_E_INVAL, &err,
              "pattern 'exa mple.com'");

    const char *const pats[] = {"*.pypi.org", "github.com", "10.0.0.1"};
    CHECK(sbx__proxy_host_allowed("files.pypi.org", pats, 3));
    CHECK(sbx__proxy_host_allowed("a.b.pypi.org", pats, 3));
    CHECK(!sbx__proxy_host_allowed("pypi.org", pats, 3)); /* the apex is not included */
    CHECK(!sbx__proxy_host_allowed("evilpypi.org", pats, 3));
    CHECK(!sbx__proxy_host_allowed("pypi.org.evil.com", pats, 3));
    CHECK(sbx__proxy_host_allowed("github.com", pats, 3));
    CHECK(!sbx__proxy_host_allowed("api.github.com", pats, 3));
    CHECK(!sbx__proxy_host_allowed("github.co", pats, 3));
    CHECK(sbx__proxy_host_allowed("10.0.0.1", pats, 3));
    CHECK(!sbx__proxy_host_allowed("anything", pats, 0));
}

/* ------------------------------------------------------------ addresses ---- */

static const char *refusal(const char *host, int allow_loopback)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sockaddr_storage ss;
    char *out = NULL;
    int literal = 0;
    if (sbx__proxy_host_normalize(host, strlen(host), &out, &literal, &ss, &err) < 0 || !literal) {
        free(out);
        return "not a literal";
    }
    free(out);
    const char *r = sbx__proxy_addr_refusal((struct sockaddr *)&ss, allow_loopback);
    return r ? r : "allowed";
}

static void test_classify(void)
{
    CHECK_EQ_STR(refusal("93.184.216.34", 0), "allowed");
    CHECK_EQ_STR(refusal("[2606:2800:220:1::]", 0), "allowed");
    CHECK_CONTAINS(refusal("127.0.0.1", 0), "loopback");
    CHECK_CONTAINS(refusal("127.1.2.3", 0), "loopback");
    CHECK_EQ_STR(refusal("127.0.0.1", 1), "allowed");
    CHECK_CONTAINS(refusal("2130706433", 0), "loopback");
    CHECK_CONTAINS(refusal("0x7f.1", 0), "loopback");
    CHECK_CONTAINS(refusal("0177.0.0.01", 0), "loopback");
    CHECK_CONTAINS(refusal("[::1]", 0), "loopback");
    CHECK_CONTAINS(refusal("0.0.0.0", 0), "unspecified");
    CHECK_CONTAINS(refusal("0", 0), "unspecified");
    CHECK_CONTAINS(refusal("[::]", 0), "unspecified");
    CHECK_CONTAINS(refusal("10.1.2.3", 0), "RFC 1918, 10.0.0.0/8");
    CHECK_CONTAINS(refusal("172.16.0.1", 0), "172.16.0.0/12");
    CHECK_CONTAINS(refusal("172.31.255.255", 0), "172.16.0.0/12");
    CHECK_EQ_STR(refusal("172.32.0.1", 0), "allowed");
    CHECK_CONTAINS(refusal("192.168.1.1", 0), "192.168.0.0/16");
    CHECK_CONTAINS(refusal("100.64.0.1", 0), "carrier-grade NAT");
    CHECK_CONTAINS(refusal("100.127.255.255", 0), "carrier-grade NAT");
    CHECK_EQ_STR(refusal("100.128.0.1", 0), "allowed");
    CHECK_CONTAINS(refusal("169.254.169.254", 0), "cloud metadata");
    CHECK_CONTAINS(refusal("0xa9fea9fe", 0), "cloud metadata");
    CHECK_CONTAINS(refusal("169.254.1.1", 0), "link-local (169.254.0.0/16)");
    CHECK_CONTAINS(refusal("[fd00:ec2::254]", 0), "cloud metadata");
    CHECK_CONTAINS(refusal("[fe80::1]", 0), "link-local (fe80::/10)");
    CHECK_CONTAINS(refusal("[fd12:3456::1]", 0), "unique local");
    CHECK_CONTAINS(refusal("[fc00::1]", 0), "unique local");
    CHECK_CONTAINS(refusal("224.0.0.1", 0), "multicast");
    CHECK_CONTAINS(refusal("[ff02::1]", 0), "multicast");
    CHECK_CONTAINS(refusal("255.255.255.255", 0), "broadcast");
    CHECK_CONTAINS(refusal("240.0.0.1", 0), "reserved");
    /* IPv4 inside IPv6 forms */
    CHECK_CONTAINS(refusal("[::ffff:127.0.0.1]", 0), "loopback");
    CHECK_CONTAINS(refusal("[::ffff:7f00:1]", 0), "loopback");
    CHECK_CONTAINS(refusal("[::ffff:169.254.169.254]", 0), "cloud metadata");
    CHECK_CONTAINS(refusal("[::ffff:10.0.0.1]", 0), "RFC 1918");
    CHECK_EQ_STR(refusal("[::ffff:93.184.216.34]", 0), "allowed");
    CHECK_CONTAINS(refusal("[64:ff9b::10.0.0.1]", 0), "RFC 1918");
    CHECK_CONTAINS(refusal("[2002:a9fe:a9fe::1]", 0), "cloud metadata");
    CHECK_CONTAINS(refusal("[::127.0.0.1]", 0), "IPv4-compatible");
    CHECK_CONTAINS(refusal("[fec0::1]", 0), "site-local");

    struct sockaddr_un_like {
        sa_family_t family;
    } unix_addr = {AF_UNIX};
    CHECK_CONTAINS(sbx__proxy_addr_refusal((struct sockaddr *)&unix_addr, 1),
                   "not an internet address");
}

/* ------------------------------------------------------------- requests ---- */

static int parse(const char *text, struct sbx__proxy_request *r, struct sbx_error *err)
{
    size_t len = strlen(text);
    size_t hl = sbx__proxy_head_len(text, len);
    return sbx__proxy_parse(text, hl ? hl : len, r, err);
}

static void test_parse(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__proxy_request r;

    CHECK_EQ_INT((int)sbx__proxy_head_len("GET / HTTP/1.1\r\nA: b\r\n", 23), 0);
    CHECK_EQ_INT((int)sbx__proxy_head_len("GET / HTTP/1.1\r\n\r\nbody", 22), 18);
    CHECK_EQ_INT((int)sbx__proxy_head_len("GET / HTTP/1.1\n\nbody", 20), 16);

    CHECK_OK(parse("CONNECT Files.PyPI.org:443 HTTP/1.1\r\nHost: evil.com:443\r\n\r\n", &r, &err),
             &err);
    CHECK_EQ_INT(r.connect, 1);
    CHECK_EQ_STR(r.host, "files.pypi.org");
    CHECK_EQ_INT(r.port, 443);
    CHECK(r.head == NULL);
    sbx__proxy_request_release(&r);

    CHECK_OK(parse("CONNECT [::1]:8443 HTTP/1.1\r\n\r\n", &r, &err), &err);
    CHECK_EQ_STR(r.host, "::1");
    CHECK_EQ_INT(r.literal, 1);
    CHECK_EQ_INT(r.port, 8443);
    sbx__proxy_request_release(&r);

    /* plain HTTP: origin-form, the request line's host as Host, proxy headers dropped */
    CHECK_OK(parse("GET http://Example.com:8080/a/b?c=d#frag HTTP/1.1\r\n"
                   "Host: internal.corp\r\nUser-Agent: t\r\nProxy-Connection: keep-alive\r\n"
                   "Proxy-Authorization: Basic eA==\r\nConnection: keep-alive\r\n"
                   "Content-Length: 3\r\n\r\nabc",
                   &r, &err),
             &err);
    CHECK_EQ_INT(r.connect, 0);
    CHECK_EQ_STR(r.host, "example.com");
    CHECK_EQ_INT(r.port, 8080);
    CHECK_EQ_STR(r.head, "GET /a/b?c=d HTTP/1.1\r\nHost: example.com:8080\r\nUser-Agent: t\r\n"
                         "Content-Length: 3\r\nConnection: close\r\n\r\n");
    CHECK_EQ_INT((int)r.head_len, (int)strlen(r.head));
    sbx__proxy_request_release(&r);

    CHECK_OK(parse("POST http://example.com HTTP/1.0\r\n\r\n", &r, &err), &err);
    CHECK_EQ_INT(r.port, 80);
    CHECK_EQ_STR(r.head, "POST / HTTP/1.0\r\nHost: example.com\r\nConnection: close\r\n\r\n");
    sbx__proxy_request_release(&r);
    CHECK_OK(parse("GET http://example.com?x=1 HTTP/1.1\r\n\r\n", &r, &err), &err);
    CHECK_EQ_STR(r.head, "GET /?x=1 HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n");
    sbx__proxy_request_release(&r);
    CHECK_OK(parse("GET http://[2606:2800::1]:81/ HTTP/1.1\r\n\r\n", &r, &err), &err);
    CHECK_CONTAINS(r.head, "Host: [2606:2800::1]:81\r\n");
    sbx__proxy_request_release(&r);
    CHECK_OK(parse("GET http://0x7f.1/ HTTP/1.1\r\n\r\n", &r, &err), &err);
    CHECK_EQ_STR(r.host, "127.0.0.1");
    CHECK_EQ_INT(r.literal, 1);
    sbx__proxy_request_release(&r);

    CHECK_ERR(parse("GET /index.html HTTP/1.1\r\nHost: a.com\r\n\r\n", &r, &err), SBX_E_UNSUPPORTED,
              &err, "not a proxy request");
    CHECK_ERR(parse("GET https://a.com/ HTTP/1.1\r\n\r\n", &r, &err), SBX_E_UNSUPPORTED, &err,
              "use CONNECT");
    CHECK_ERR(parse("GET ftp://a.com/ HTTP/1.1\r\n\r\n", &r, &err), SBX_E_UNSUPPORTED, &err,
              "unsupported request target");
    CHECK_ERR(parse("GET http://user@a.com/ HTTP/1.1\r\n\r\n", &r, &err), SBX_E_UNSUPPORTED, &err,
              "user info");
    CHECK_ERR(parse("GET http://evil.com@allowed.com/ HTTP/1.1\r\n\r\n", &r, &err),
              SBX_E_UNSUPPORTED, &err, "user info");
    CHECK_ERR(parse("CONNECT a.com HTTP/1.1\r\n\r\n", &r, &err), SBX_E_PARSE, &err,
              "without a port");
    CHECK_ERR(parse("CONNECT a.com:99999 HTTP/1.1\r\n\r\n", &r, &err), SBX_E_PARSE, &err,
              "out of range");
    CHECK_ERR(parse("CONNECT a.com:x HTTP/1.1\r\n\r\n", &r, &err), SBX_E_PARSE, &err, "bad port");
    CHECK_ERR(parse("CONNECT a.com:443 HTTP/2.0\r\n\r\n", &r, &err), SBX_E_PARSE, &err,
              "HTTP version");
    CHECK_ERR(parse("CONNECT  a.com:443 HTTP/1.1\r\n\r\n", &r, &err), SBX_E_PARSE, &err,
              "malformed request line");
    CHECK_ERR(parse("GET\r\n\r\n", &r, &err), SBX_E_PARSE, &err, "malformed request line");
    CHECK_ERR(parse("G(T http://a.com/ HTTP/1.1\r\n\r\n", &r, &err), SBX_E_PARSE, &err,
              "malformed method");
    CHECK_ERR(parse("GET http://a.com/ HTTP/1.1\r\nNoColon\r\n\r\n", &r, &err), SBX_E_PARSE, &err,
              "malformed header line");
    CHECK_ERR(parse("GET http://a.com/ HTTP/1.1\r\nBad Name: x\r\n\r\n", &r, &err), SBX_E_PARSE,
              &err, "malformed header name");
    CHECK_ERR(parse("GET http://a.com/ HTTP/1.1\r\nA: b\r\n", &r, &err), SBX_E_PARSE, &err,
              "without its empty line");
    CHECK_ERR(parse("GET http://a\xc3\xa4.com/ HTTP/1.1\r\n\r\n", &r, &err), SBX_E_PARSE, &err,
              "bad character in the request target");
    CHECK_ERR(parse("CONNECT a_b%.com:443 HTTP/1.1\r\n\r\n", &r, &err), SBX_E_INVAL, &err,
              "character outside");

    /* limits */
    struct sbx_buf b;
    int added = 0;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    CHECK_OK(sbx_buf_adds(&b, "GET http://a.com/ HTTP/1.1\r\n", &err), &err);
    for (int i = 0; i <= SBX__PROXY_MAX_HEADERS; i++)
        added += sbx_buf_addf(&b, &err, "X-%d: y\r\n", i) == 0;
    CHECK_EQ_INT(added, SBX__PROXY_MAX_HEADERS + 1);
    CHECK_OK(sbx_buf_adds(&b, "\r\n", &err), &err);
    CHECK_ERR(parse(b.data, &r, &err), SBX_E_TOOBIG, &err, "more than 100 request headers");
    sbx_buf_reset(&b);
    CHECK_OK(sbx_buf_adds(&b, "GET http://a.com/ HTTP/1.1\r\nX: ", &err), &err);
    added = 0;
    for (int i = 0; i < SBX__PROXY_MAX_HEAD; i++)
        added += sbx_buf_addch(&b, 'a', &err) == 0;
    CHECK_EQ_INT(added, SBX__PROXY_MAX_HEAD);
    CHECK_OK(sbx_buf_adds(&b, "\r\n\r\n", &err), &err);
    CHECK_ERR(parse(b.data, &r, &err), SBX_E_TOOBIG, &err, "over 16384 bytes");
    sbx_buf_release(&b);
}

/* ---------------------------------------------------------- refusal texts ---- */

static void test_texts(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_buf b;
    sbx_buf_init(&b, 65536);
    const char *const pats[] = {"pypi.org", "*.pypi.org"};
    CHECK_OK(sbx__proxy_refusal_domain("evil.com", 443, pats, 2, &b, &err), &err);
    CHECK_EQ_STR(b.data, "sbx proxy refused 'evil.com:443': the domain 'evil.com' is not in the "
                         "sandbox's allow list (allowed: pypi.org, *.pypi.org)");
    sbx_buf_reset(&b);

    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, "10.0.0.7", &a.sin_addr);
    CHECK_OK(sbx__proxy_refusal_address("x.pypi.org", 80, (struct sockaddr *)&a,
                                        sbx__proxy_addr_refusal((struct sockaddr *)&a, 0), &b,
                                        &err),
             &err);
    CHECK_EQ_STR(b.data, "sbx proxy refused 'x.pypi.org:80': address 10.0.0.7 is in a refused "
                         "range: private (RFC 1918, 10.0.0.0/8)");
    sbx_buf_reset(&b);

    const int ports[] = {80, 443};
    CHECK_OK(sbx__proxy_refusal_port("::1", 22, ports, 2, &b, &err), &err);
    CHECK_EQ_STR(b.data, "sbx proxy refused '[::1]:22': port 22 is not allowed (allowed: 80, 443)");
    sbx_buf_reset(&b);

    CHECK_OK(sbx__proxy_response(403, "domain", "no", &b, &err), &err);
    CHECK_EQ_STR(b.data, "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain; charset=utf-8\r\n"
                         "Content-Length: 3\r\nConnection: close\r\n"
                         "X-Sbx-Proxy-Refused: domain\r\n\r\nno\n");
    sbx_buf_reset(&b);
    CHECK_OK(sbx__proxy_response(502, NULL, "x", &b, &err), &err);
    CHECK_CONTAINS(b.data, "HTTP/1.1 502 Bad Gateway\r\n");
    CHECK(strstr(b.data, "X-Sbx-Proxy-Refused") == NULL);
    sbx_buf_release(&b);

    struct sbx_strv env;
    sbx_strv_init(&env);
    sbx__net_proxy_env(0, &env);
    CHECK(sbx_strv_find(&env, "HTTP_PROXY=http://127.0.0.1:3128") >= 0);
    CHECK(sbx_strv_find(&env, "https_proxy=http://127.0.0.1:3128") >= 0);
    CHECK(sbx_strv_find(&env, "NO_PROXY=localhost,127.0.0.1,::1") >= 0);
    sbx_strv_release(&env);
}

/* ------------------------------------------------------------- end to end ---- */

/* Read until end of file (bounded) with a poll timeout so a hang fails instead of blocking. */
static char *read_all(int fd)
{
    struct sbx_buf b;
    struct sbx_error err = SBX_ERROR_INIT;
    sbx_buf_init(&b, 1 << 20);
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 10000) <= 0)
            break;
        char tmp[4096];
        ssize_t n = read(fd, tmp, sizeof(tmp));
        if (n <= 0 || sbx_buf_add(&b, tmp, (size_t)n, &err) < 0)
            break;
    }
    char *s = sbx_buf_detach(&b, NULL);
    return s ? s : sbx_xstrdup("");
}

static int connect_local(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int listen_local(int port, int *bound)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    socklen_t len = sizeof(a);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 16) < 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) < 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (bound)
        *bound = ntohs(a.sin_port);
    return fd;
}

static int write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w <= 0)
            return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

/* The host "upstream": answers each connection with the request head it received. */
static void upstream_main(int lfd)
{
    for (;;) {
        int c = accept(lfd, NULL, NULL);
        if (c < 0)
            _exit(0);
        char head[8192];
        size_t len = 0;
        while (len < sizeof(head) - 1) {
            ssize_t n = read(c, head + len, sizeof(head) - 1 - len);
            if (n <= 0)
                break;
            len += (size_t)n;
            head[len] = '\0';
            if (strstr(head, "\r\n\r\n"))
                break;
        }
        head[len] = '\0';
        char *ans = sbx_xasprintf("HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n%s", len, head);
        (void)write_all(c, ans, strlen(ans));
        free(ans);
        close(c);
    }
}

/* Inside the private namespace: one proxy request, the whole answer back to the parent. */
static void ask_at(int port, int out, const char *request, const char *tunnelled)
{
    char *resp = NULL;
    int fd = connect_local(port);
    if (fd < 0) {
        resp = sbx_xasprintf("cannot connect to the proxy: %s", strerror(errno));
    } else {
        (void)write_all(fd, request, strlen(request));
        if (tunnelled) {
            /* read the 200 line before talking through the tunnel */
            char line[64];
            ssize_t n = read(fd, line, sizeof(line) - 1);
            line[n > 0 ? n : 0] = '\0';
            (void)write_all(fd, tunnelled, strlen(tunnelled));
            char *rest = read_all(fd);
            resp = sbx_xasprintf("%s%s", line, rest);
            free(rest);
        } else {
            resp = read_all(fd);
        }
        close(fd);
    }
    uint32_t n = (uint32_t)strlen(resp);
    (void)write_all(out, &n, sizeof(n));
    (void)write_all(out, resp, n);
    free(resp);
}

static void ask(int out, const char *request, const char *tunnelled)
{
    ask_at(SBX__PROXY_DEFAULT_PORT, out, request, tunnelled);
}

static char *answer(int in)
{
    uint32_t n = 0;
    struct pollfd p = {.fd = in, .events = POLLIN};
    if (poll(&p, 1, 20000) <= 0 || read(in, &n, sizeof(n)) != (ssize_t)sizeof(n) || n > 1 << 20)
        return sbx_xstrdup("(no answer)");
    char *s = sbx_xcalloc(1, n + 1);
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(in, s + got, n - got);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    return s;
}

static int bring_lo_up(void)
{
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct ifreq ifr;
    memset(&ifr, 0, sizeof(ifr));
    memcpy(ifr.ifr_name, "lo", 3);
    int rc = -1;
    if (s >= 0 && ioctl(s, SIOCGIFFLAGS, &ifr) == 0) {
        ifr.ifr_flags |= IFF_UP;
        rc = ioctl(s, SIOCSIFFLAGS, &ifr);
    }
    if (s >= 0)
        close(s);
    return rc;
}

/* The sandbox stand-in: a child in new user and network namespaces, with a server on 8000
 * (served by a grandchild) and a proxy client driven by the parent. */
static void sandbox_main(int ctl_in, int ctl_out, int upstream_port)
{
    char c;
    if (unshare(CLONE_NEWUSER | CLONE_NEWNET) < 0 || bring_lo_up() < 0) {
        (void)!write(ctl_out, "E", 1);
        _exit(1);
    }
    int lfd = listen_local(8000, NULL);
    pid_t server = fork();
    if (server == 0) {
        int conn = accept(lfd, NULL, NULL);
        char line[256];
        ssize_t n = conn >= 0 ? read(conn, line, sizeof(line) - 1) : -1;
        line[n > 0 ? n : 0] = '\0';
        char *pong = sbx_xasprintf("pong: %s", line);
        (void)write_all(conn, pong, strlen(pong));
        _exit(0);
    }
    close(lfd);
    (void)!write(ctl_out, "R", 1);
    if (read(ctl_in, &c, 1) != 1)
        _exit(1);

    char *req;
    req = sbx_xasprintf("GET http://allowed.test:%d/path?q=1 HTTP/1.1\r\nHost: evil.example\r\n"
                        "Proxy-Connection: keep-alive\r\n\r\n",
                        upstream_port);
    ask(ctl_out, req, NULL);
    free(req);
    req = sbx_xasprintf("CONNECT allowed.test:%d HTTP/1.1\r\nHost: allowed.test\r\n\r\n",
                        upstream_port);
    ask(ctl_out, req, "TUNNELLED / HTTP/1.1\r\n\r\n");
    free(req);
    ask(ctl_out, "GET http://denied.test/ HTTP/1.1\r\n\r\n", NULL);
    ask(ctl_out, "GET http://meta.test/latest/meta-data HTTP/1.1\r\n\r\n", NULL);
    ask(ctl_out, "CONNECT 10.0.0.1:443 HTTP/1.1\r\n\r\n", NULL);
    ask(ctl_out, "CONNECT allowed.test:22 HTTP/1.1\r\n\r\n", NULL);
    ask(ctl_out, "GET /index.html HTTP/1.1\r\nHost: allowed.test\r\n\r\n", NULL);
    req = sbx_xcalloc(1, SBX__PROXY_MAX_HEAD + 64);
    memcpy(req, "GET http://allowed.test/ HTTP/1.1\r\nX: ", 38);
    memset(req + 38, 'a', SBX__PROXY_MAX_HEAD);
    ask(ctl_out, req, NULL);
    free(req);
    /* a name resolved by the system resolver (a lookup thread), then the same name through a
     * proxy that refuses loopback */
    req = sbx_xasprintf("GET http://localhost:%d/dns HTTP/1.1\r\n\r\n", upstream_port);
    ask(ctl_out, req, NULL);
    ask_at(SBX__PROXY_DEFAULT_PORT + 1, ctl_out, req, NULL);
    free(req);
    /* nothing but the proxy gets out: the host upstream is not reachable directly */
    int direct = connect_local(upstream_port);
    (void)!write(ctl_out, direct < 0 ? "N" : "Y", 1);
    if (direct >= 0)
        close(direct);
    int st;
    waitpid(server, &st, 0);
    _exit(0);
}

static void test_end_to_end(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    int to_child[2], from_child[2];
    int upstream_port = 0;
    int lfd = listen_local(0, &upstream_port);
    CHECK(lfd >= 0);
    pid_t up = fork();
    if (up == 0)
        upstream_main(lfd);
    close(lfd);
    CHECK(pipe2(to_child, O_CLOEXEC) == 0 && pipe2(from_child, O_CLOEXEC) == 0);
    pid_t box = fork();
    if (box == 0) {
        close(to_child[1]);
        close(from_child[0]);
        sandbox_main(to_child[0], from_child[1], upstream_port);
    }
    close(to_child[0]);
    close(from_child[1]);

    char c = 0;
    CHECK(read(from_child[0], &c, 1) == 1);
    if (c != 'R') {
        tap__result(1, __FILE__, __LINE__, "# SKIP no user+network namespaces here");
        kill(up, SIGKILL);
        waitpid(up, NULL, 0);
        waitpid(box, NULL, 0);
        close(to_child[1]);
        close(from_child[0]);
        return;
    }

    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)box);
    int userns = open(path, O_RDONLY | O_CLOEXEC);
    snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)box);
    int netns = open(path, O_RDONLY | O_CLOEXEC);
    CHECK(userns >= 0 && netns >= 0);

    const char *patterns[] = {"allowed.test", "meta.test", "10.0.0.1", "localhost"};
    int ports[] = {upstream_port, 443, 80};
    char *map = sbx_xasprintf("allowed.test=127.0.0.1");
    const char *test_hosts[] = {map, "meta.test=169.254.169.254", NULL};
    int ctl[2] = {-1, -1};
    CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ctl) == 0);
    struct sbx__net_config cfg = {
            .control_fd = ctl[1],
            .userns_fd = userns,
            .netns_fd = netns,
            .patterns = patterns,
            .npatterns = 4,
            .ports = ports,
            .nports = 3,
            .test_allow_loopback = 1,
            .test_hosts = test_hosts,
    };
    struct sbx__net *net = NULL;
    CHECK_OK(sbx__net_new(&cfg, &net, &err), &err);
    struct sbx__net *strict = NULL;
    cfg.proxy_port = SBX__PROXY_DEFAULT_PORT + 1;
    cfg.test_allow_loopback = 0;
    cfg.control_fd = -1;
    CHECK_OK(sbx__net_new(&cfg, &strict, &err), &err);
    close(userns);
    close(netns);
    free(map);

    int host_port = 0;
    struct sbx__net_forward fwd = {.port = 8000};
    if (net)
        CHECK_OK(sbx__net_forward_add(net, &fwd, &host_port, NULL, 0, &err), &err);
    CHECK(host_port > 0);
    CHECK_EQ_INT(net ? sbx__net_forward_port(net, 8000) : 0, host_port);
    CHECK_EQ_INT(net ? sbx__net_forward_port(net, 8001) : -1, 0);
    int again = 0;
    if (net)
        CHECK_ERR(sbx__net_forward_add(net, &fwd, &again, NULL, 0, &err), SBX_E_EXISTS, &err,
                  "port 8000 is forwarded already");
    CHECK_EQ_INT(again, host_port);

    /* the control channel: PID 1's requests for forwarders */
    struct sbx__net_reply reply;
    struct sbx__net_request q = {.port = 8000};
    memset(&reply, 0, sizeof(reply));
    CHECK(send(ctl[0], &q, sizeof(q), 0) == (ssize_t)sizeof(q));
    CHECK(recv(ctl[0], &reply, sizeof(reply), 0) == (ssize_t)sizeof(reply));
    CHECK_EQ_INT(reply.host_port, host_port);
    q.port = 70000;
    CHECK(send(ctl[0], &q, sizeof(q), 0) == (ssize_t)sizeof(q));
    CHECK(recv(ctl[0], &reply, sizeof(reply), 0) == (ssize_t)sizeof(reply));
    CHECK_EQ_INT(reply.host_port, 0);
    CHECK_EQ_STR(reply.msg, "port 70000 out of range");
    close(ctl[0]);
    close(ctl[1]);

    /* the forwarder: host connection -> 127.0.0.1:8000 inside */
    int f = connect_local(host_port);
    CHECK(f >= 0);
    if (f >= 0) {
        CHECK(write_all(f, "ping\n", 5) == 0);
        shutdown(f, SHUT_WR);
        char *pong = read_all(f);
        CHECK_EQ_STR(pong, "pong: ping\n");
        free(pong);
        close(f);
    }

    CHECK(write(to_child[1], "G", 1) == 1);
    char *a = answer(from_child[0]);
    CHECK_CONTAINS(a, "HTTP/1.1 200 OK");
    CHECK_CONTAINS(a, "GET /path?q=1 HTTP/1.1\r\n");
    char *host_line = sbx_xasprintf("Host: allowed.test:%d\r\n", upstream_port);
    CHECK_CONTAINS(a, host_line);
    free(host_line);
    CHECK(strstr(a, "evil.example") == NULL);
    CHECK(strstr(a, "Proxy-Connection") == NULL);
    CHECK_CONTAINS(a, "Connection: close");
    free(a);

    a = answer(from_child[0]);
    CHECK_CONTAINS(a, "HTTP/1.1 200 Connection Established\r\n\r\n");
    CHECK_CONTAINS(a, "TUNNELLED / HTTP/1.1");
    free(a);

    a = answer(from_child[0]);
    CHECK_CONTAINS(a, "HTTP/1.1 403 Forbidden");
    CHECK_CONTAINS(a, "X-Sbx-Proxy-Refused: domain");
    CHECK_CONTAINS(a, "the domain 'denied.test' is not in the sandbox's allow list");
    free(a);

    a = answer(from_child[0]);
    CHECK_CONTAINS(a, "HTTP/1.1 403 Forbidden");
    CHECK_CONTAINS(a, "X-Sbx-Proxy-Refused: address");
    CHECK_CONTAINS(a, "address 169.254.169.254 is in a refused range: cloud metadata");
    free(a);

    a = answer(from_child[0]);
    CHECK_CONTAINS(a, "address 10.0.0.1 is in a refused range: private (RFC 1918");
    free(a);

    a = answer(from_child[0]);
    CHECK_CONTAINS(a, "X-Sbx-Proxy-Refused: port");
    CHECK_CONTAINS(a, "port 22 is not allowed");
    free(a);

    a = answer(from_child[0]);
    CHECK_CONTAINS(a, "HTTP/1.1 400 Bad Request");
    CHECK_CONTAINS(a, "not a proxy request");
    free(a);

    a = answer(from_child[0]);
    CHECK_CONTAINS(a, "HTTP/1.1 431 ");
    free(a);

    a = answer(from_child[0]);
    CHECK_CONTAINS(a, "HTTP/1.1 200 OK");
    CHECK_CONTAINS(a, "GET /dns HTTP/1.1");
    free(a);
    a = answer(from_child[0]);
    CHECK_CONTAINS(a, "X-Sbx-Proxy-Refused: address");
    CHECK_CONTAINS(a, "is in a refused range: loopback");
    free(a);

    c = 0;
    struct pollfd p = {.fd = from_child[0], .events = POLLIN};
    CHECK(poll(&p, 1, 20000) == 1 && read(from_child[0], &c, 1) == 1);
    CHECK_EQ_INT(c, 'N');

    int st = -1;
    CHECK(waitpid(box, &st, 0) == box);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    sbx__net_free(net);
    sbx__net_free(strict);
    kill(up, SIGKILL);
    waitpid(up, NULL, 0);
    close(to_child[1]);
    close(from_child[0]);
}

static void test_config_errors(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__net *net = NULL;
    const char *bad[] = {"*"};
    struct sbx__net_config cfg = {.userns_fd = -1, .netns_fd = -1, .control_fd = -1};
    CHECK_ERR(sbx__net_new(&cfg, &net, &err), SBX_E_INVAL, &err, "no sandbox network namespace");
    int self = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    cfg.netns_fd = self;
    cfg.patterns = bad;
    cfg.npatterns = 1;
    CHECK_ERR(sbx__net_new(&cfg, &net, &err), SBX_E_INVAL, &err, "allow-list pattern '*'");
    const char *good[] = {"a.test"};
    const char *hosts[] = {"a.test", NULL};
    cfg.patterns = good;
    cfg.test_hosts = hosts;
    CHECK_ERR(sbx__net_new(&cfg, &net, &err), SBX_E_INVAL, &err, "not name=address");
    const char *hosts2[] = {"a.test=b.test", NULL};
    cfg.test_hosts = hosts2;
    CHECK_ERR(sbx__net_new(&cfg, &net, &err), SBX_E_INVAL, &err, "not an IP address");
    int badport[] = {0};
    cfg.test_hosts = NULL;
    cfg.ports = badport;
    cfg.nports = 1;
    CHECK_ERR(sbx__net_new(&cfg, &net, &err), SBX_E_INVAL, &err, "proxy port 0 out of range");
    cfg.ports = NULL;
    cfg.npatterns = 0;
    CHECK_OK(sbx__net_new(&cfg, &net, &err), &err);
    struct sbx__net_forward fwd = {.port = 0};
    if (net) {
        CHECK_ERR(sbx__net_forward_add(net, &fwd, NULL, NULL, 0, &err), SBX_E_INVAL, &err,
                  "port 0 out of range");
        fwd.port = 80;
        fwd.bind = "localhost";
        CHECK_ERR(sbx__net_forward_add(net, &fwd, NULL, NULL, 0, &err), SBX_E_INVAL, &err,
                  "bind address 'localhost' is not an IP address");
    }
    sbx__net_free(net);
    close(self);
}

/* The local provider's options for network allow, checked when the client is made. */
static void test_client_options(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_client *c = NULL;
    const char *good[] = {"PyPI.org", "*.pypi.org"};
    const char *bad[] = {"pypi.org", "*"};
    const int ports[] = {8080};
    const int bad_ports[] = {0};
    struct sbx_local_options o = {.network = SBX_LOCAL_NETWORK_ALLOW};
    CHECK_ERR(sbx_client_new("local", &o, &c, &err), SBX_E_INVAL, &err,
              "network 'allow' needs at least one domain");
    o.allow_domains = bad;
    o.n_allow_domains = 2;
    CHECK_ERR(sbx_client_new("local", &o, &c, &err), SBX_E_INVAL, &err, "allow-list pattern '*'");
    o.allow_domains = good;
    o.allow_ports = bad_ports;
    o.n_allow_ports = 1;
    CHECK_ERR(sbx_client_new("local", &o, &c, &err), SBX_E_INVAL, &err,
              "allowed port 0 is not in 1..65535");
    o.allow_ports = ports;
    o.port_bind = "::ffff:zz";
    CHECK_ERR(sbx_client_new("local", &o, &c, &err), SBX_E_INVAL, &err,
              "port bind address '::ffff:zz' is not an IP address");
    o.port_bind = "::1";
    CHECK_OK(sbx_client_new("local", &o, &c, &err), &err);
    sbx_client_free(c);
    c = NULL;
    o.isolation = SBX_LOCAL_ISOLATION_NONE;
    CHECK_ERR(sbx_client_new("local", &o, &c, &err), SBX_E_INVAL, &err,
              "network 'allow' needs isolation");
    struct sbx_local_options n = {.allow_domains = good, .n_allow_domains = 1};
    CHECK_ERR(sbx_client_new("local", &n, &c, &err), SBX_E_INVAL, &err,
              "allowed domains and ports need network 'allow'");
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    /* The network thread forks helpers while this thread prints; valgrind flushes a child's
     * copy of a stdio buffer at its exit (libc freeres), which would print a line twice. */
    setvbuf(stdout, NULL, _IONBF, 0);
    sbx_log_set_handler(sbx_log_stderr, NULL, SBX_LOG_WARN);
    TAP_START();
    TAP_RUN(test_host_normalize);
    TAP_RUN(test_patterns);
    TAP_RUN(test_classify);
    TAP_RUN(test_parse);
    TAP_RUN(test_texts);
    TAP_RUN(test_config_errors);
    TAP_RUN(test_client_options);
    TAP_RUN_FORKED(test_end_to_end);
    return TAP_DONE();
}
