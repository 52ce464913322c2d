/* The daemon's HTTP/1.1: requests read and checked within their bounds, JSON answers
 * (src/node/daemon.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "node/daemon.h"
#include "sbx/json.h"

void node_req_release(struct node_req *r)
{
    sbx_buf_release(&r->body);
}

/* Read until the buffered bytes hold a whole head; its length (with the blank line). */
static long read_head(struct node_conn *c, int *closed, struct sbx_error *err)
{
    for (;;) {
        char *end = c->in.len ? memmem(c->in.data, c->in.len, "\r\n\r\n", 4) : NULL;
        if (end)
            return end + 4 - c->in.data;
        if (c->in.len >= NODE_HEAD_MAX)
            return sbx_error_set(err, SBX_E_TOOBIG, 0, "a request head over %d bytes",
                                 NODE_HEAD_MAX);
        char b[4096];
        long k = node_recv(c, b, sizeof(b), err);
        if (k < 0)
            return k;
        if (k == 0) {
            *closed = c->in.len == 0;
            return *closed ? 0
                           : sbx_error_set(err, SBX_E_PARSE, 0, "the request head was cut short");
        }
        if (sbx_buf_add(&c->in, b, (size_t)k, err) < 0)
            return -err->code;
    }
}

static int hexval(char ch)
{
    return ch >= '0' && ch <= '9'   ? ch - '0'
           : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
           : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
                                    : -1;
}

/* Percent-decode s[0..n) into out (cap bytes with the NUL); '+' stays '+'. -1 when malformed,
 * too long or holding a NUL. */
static int pct_decode(const char *s, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int ch = (unsigned char)s[i];
        if (ch == '%') {
            if (i + 2 >= n)
                return -1;
            int a = hexval(s[i + 1]), b = hexval(s[i + 2]);
            if (a < 0 || b < 0)
                return -1;
            ch = a << 4 | b;
            i += 2;
        }
        if (ch == 0 || o + 1 >= cap)
            return -1;
        out[o++] = (char)ch;
    }
    out[o] = 0;
    return 0;
}

int node_query(const char *query, const char *name, size_t idx, char *out, size_t cap)
{
    size_t nl = strlen(name), seen = 0;
    for (const char *p = query; *p;) {
        const char *amp = strchr(p, '&');
        size_t len = amp ? (size_t)(amp - p) : strlen(p);
        if (len > nl && strncmp(p, name, nl) == 0 && p[nl] == '=' && seen++ == idx)
            return pct_decode(p + nl + 1, len - nl - 1, out, cap) < 0 ? -1 : 1;
        p += len + (amp ? 1 : 0);
    }
    return 0;
}

static int parse_line(struct node_req *r, const char *line, size_t n, struct sbx_error *err)
{
    const char *sp1 = memchr(line, ' ', n);
    const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', n - (size_t)(sp1 + 1 - line)) : NULL;
    if (!sp1 || !sp2 || (size_t)(line + n - sp2 - 1) != 8 || memcmp(sp2 + 1, "HTTP/1.1", 8) != 0 ||
        (size_t)(sp1 - line) >= sizeof(r->method))
        return sbx_error_set(err, SBX_E_PARSE, 0, "a bad request line");
    memcpy(r->method, line, (size_t)(sp1 - line));
    r->method[sp1 - line] = 0;
    const char *target = sp1 + 1;
    size_t tlen = (size_t)(sp2 - target);
    const char *q = memchr(target, '?', tlen);
    size_t plen = q ? (size_t)(q - target) : tlen;
    size_t qlen = q ? tlen - plen - 1 : 0;
    if (tlen == 0 || target[0] != '/' || qlen >= sizeof(r->query) ||
        pct_decode(target, plen, r->path, sizeof(r->path)) < 0)
        return sbx_error_set(err, SBX_E_PARSE, 0, "a bad request target");
    memcpy(r->query, q ? q + 1 : "", qlen);
    r->query[qlen] = 0;
    return 0;
}

static int copy_field(char *dst, size_t cap, const char *v, size_t n, const char *name,
                      struct sbx_error *err)
{
    if (n >= cap)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "header '%s' is too long", name);
    memcpy(dst, v, n);
    dst[n] = 0;
    return 0;
}

static int parse_field(struct node_req *r, const char *line, size_t n, struct sbx_error *err)
{
    const char *colon = memchr(line, ':', n);
    if (!colon || colon == line)
        return sbx_error_set(err, SBX_E_PARSE, 0, "a bad header line");
    size_t kl = (size_t)(colon - line);
    const char *v = colon + 1;
    size_t vl = n - kl - 1;
    while (vl && (*v == ' ' || *v == '\t'))
        v++, vl--;
    while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
        vl--;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)line[i] < 0x20 && line[i] != '\t')
            return sbx_error_set(err, SBX_E_PARSE, 0, "a control character in a header");
#define IS(k) (kl == strlen(k) && strncasecmp(line, k, kl) == 0)
    if (IS("Content-Length")) {
        char num[24];
        char *end;
        if (r->content_length >= 0 || copy_field(num, sizeof(num), v, vl, "content-length", err))
            return sbx_error_set(err, SBX_E_PARSE, 0, "a bad or repeated content-length");
        long long cl = strtoll(num, &end, 10);
        if (!vl || *end || cl < 0 || num[0] == '-' || num[0] == '+')
            return sbx_error_set(err, SBX_E_PARSE, 0, "a bad content-length");
        r->content_length = cl;
    } else if (IS("Transfer-Encoding")) {
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0, "chunked request bodies are not taken");
    } else if (IS("Sbx-Token")) {
        return copy_field(r->token, sizeof(r->token), v, vl, "sbx-token", err);
    } else if (IS("Sbx-Node-Version")) {
        if (r->has_version)
            return sbx_error_set(err, SBX_E_PARSE, 0, "a repeated sbx-node-version");
        r->has_version = 1;
        return copy_field(r->version, sizeof(r->version), v, vl, "sbx-node-version", err);
    } else if (IS("Upgrade")) {
        r->upgrade_ws = vl == 9 && strncasecmp(v, "websocket", 9) == 0;
    } else if (IS("Sec-WebSocket-Key")) {
        return copy_field(r->ws_key, sizeof(r->ws_key), v, vl, "sec-websocket-key", err);
    } else if (IS("Sec-WebSocket-Protocol")) {
        return copy_field(r->ws_protocols, sizeof(r->ws_protocols), v, vl, "sec-websocket-protocol",
                          err);
    }
#undef IS
    return 0;
}

/* A request's Sbx-Node-Version: MAJOR or MAJOR.MINOR (decimal), the major this node's. */
static int check_version(const char *v, struct sbx_error *err)
{
    size_t i = 0, major_len;
    unsigned long major = 0;
    for (; v[i] >= '0' && v[i] <= '9' && i < 9; i++)
        major = major * 10 + (unsigned long)(v[i] - '0');
    major_len = i;
    if (major_len && v[i] == '.' && v[i + 1] >= '0' && v[i + 1] <= '9')
        for (i++; v[i] >= '0' && v[i] <= '9'; i++)
            ;
    if (major_len == 0 || v[i]) {
        int plain = 1;
        for (i = 0; v[i]; i++)
            plain &= v[i] >= 0x20 && v[i] < 0x7f && v[i] != '\'';
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "header 'sbx-node-version' is '%s', not a version (MAJOR or "
                             "MAJOR.MINOR)",
                             plain ? v : "?");
    }
    if (major != NODE_VERSION_MAJOR)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "the request speaks sbx-node protocol version %lu, this node speaks "
                             "version %d: use a harness and a node of the same major version",
                             major, NODE_VERSION_MAJOR);
    return 0;
}

int node_parse_head(struct node_req *r, const char *h, size_t n, struct sbx_error *err)
{
    size_t fields = 0;
    int rc = 0;
    for (size_t off = 0, first = 1; off < n && rc == 0; first = 0) {
        const char *eol = memmem(h + off, n - off, "\r\n", 2);
        size_t len = (size_t)(eol - (h + off));
        if (len == 0)
            break;
        if (memchr(h + off, '\n', len) || memchr(h + off, '\r', len) || memchr(h + off, 0, len))
            return sbx_error_set(err, SBX_E_PARSE, 0, "a stray CR, LF or NUL in the request head");
        if (first)
            rc = parse_line(r, h + off, len, err);
        else if (++fields > NODE_FIELDS_MAX)
            rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "more than %d header fields", NODE_FIELDS_MAX);
        else
            rc = parse_field(r, h + off, len, err);
        off += len + 2;
    }
    if (rc == 0 && r->has_version)
        rc = check_version(r->version, err);
    return rc;
}

int node_read_request(struct node_conn *c, struct node_req *r, struct sbx_error *err)
{
    memset(r, 0, sizeof(*r));
    r->content_length = -1;
    sbx_buf_init(&r->body, NODE_BODY_MAX);
    int closed = 0;
    long hl = read_head(c, &closed, err);
    if (hl < 0)
        return (int)hl;
    if (closed)
        return 1;
    int rc = node_parse_head(r, c->in.data, (size_t)hl, err);
    sbx_buf_consume(&c->in, (size_t)hl);
    if (rc < 0)
        return rc;
    if (strcmp(r->method, "PUT") == 0) { /* streamed: its handler reads it (files.c) */
        r->body_left = r->content_length > 0 ? r->content_length : 0;
        return 0;
    }
    if (r->content_length > NODE_BODY_MAX)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "a request body over %d bytes", NODE_BODY_MAX);
    size_t want = r->content_length > 0 ? (size_t)r->content_length : 0;
    while (c->in.len < want) {
        char b[16384];
        long k = node_recv(c, b, sizeof(b), err);
        if (k <= 0)
            return k < 0 ? (int)k
                         : sbx_error_set(err, SBX_E_PARSE, 0, "the request body was cut short");
        if (sbx_buf_add(&c->in, b, (size_t)k, err) < 0)
            return -err->code;
    }
    if (want && sbx_buf_add(&r->body, c->in.data, want, err) < 0)
        return -err->code;
    sbx_buf_consume(&c->in, want);
    return 0;
}

static const char *reason_of(int status)
{
    switch (status) {
    case 200:
        return "OK";
    case 201:
        return "Created";
    case 400:
        return "Bad Request";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 409:
        return "Conflict";
    case 413:
        return "Content Too Large";
    case 429:
        return "Too Many Requests";
    case 501:
        return "Not Implemented";
    default:
        return "Internal Server Error";
    }
}

int node_respond(struct node_conn *c, int status, const json_t *body, struct sbx_error *err)
{
    struct sbx_buf b;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    int rc = body ? sbx_json_dump(body, JSON_COMPACT, &b, err) : 0;
    char head[256];
    int closing = c->closing || (c->cur && c->cur->body_left > 0);
    int hn = snprintf(head, sizeof(head),
                      "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: "
                      "%zu\r\nSbx-Node-Version: " NODE_VERSION "\r\n%s\r\n",
                      status, reason_of(status), b.len, closing ? "Connection: close\r\n" : "");
    if (rc == 0)
        rc = node_send(c, head, (size_t)hn, err);
    if (rc == 0 && b.len)
        rc = node_send(c, b.data, b.len, err);
    sbx_buf_release(&b);
    return rc;
}

static const char *code_name(int code, int *status)
{
    switch (code) {
    case SBX_E_NOTFOUND:
        *status = 404;
        return "not_found";
    case SBX_E_EXISTS:
        *status = 409;
        return "exists";
    case SBX_E_PERM:
        *status = 403;
        return "perm";
    case SBX_E_INVAL:
        *status = 400;
        return "inval";
    case SBX_E_PARSE:
        *status = 400;
        return "inval";
    case SBX_E_TOOBIG:
        *status = 413;
        return "toobig";
    case SBX_E_SANDBOX:
        *status = 409;
        return "sandbox";
    case SBX_E_UNSUPPORTED:
        *status = 501;
        return "unsupported";
    case SBX_E_TIMEOUT:
        *status = 500;
        return "timeout";
    case SBX_E_EXEC:
        *status = 400;
        return "exec";
    default:
        *status = 500;
        return "internal";
    }
}

int node_respond_error(struct node_conn *c, const struct sbx_error *e)
{
    int status;
    const char *name = code_name(e->code, &status);
    json_t *b = json_pack("{s:s, s:s}", "code", name, "message", e->msg);
    struct sbx_error err = SBX_ERROR_INIT;
    int rc = node_respond(c, status, b, &err);
    json_decref(b);
    return rc;
}
