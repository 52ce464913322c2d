/* The head of an HTTP/1.1 response read off an upgraded connection (src/sandbox/wire/head.h):
 * hostile input, bounded, refused on every deviation. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sandbox/wire/head.h"
#include "sandbox/wire/wire.h"

long sbx__head_len(const char *p, size_t n, struct sbx_error *err)
{
    size_t lim = n < SBX__HEAD_MAX ? n : SBX__HEAD_MAX;
    for (size_t i = 0; i < lim; i++) {
        if (p[i] != '\n')
            continue;
        /* A blank line: "\n\n" or "\n\r\n". */
        if (i + 1 < lim && p[i + 1] == '\n')
            return (long)(i + 2);
        if (i + 2 < lim && p[i + 1] == '\r' && p[i + 2] == '\n')
            return (long)(i + 3);
    }
    if (n >= SBX__HEAD_MAX)
        return sbx_error_set(err, SBX_E_TOOBIG, 0,
                             "the server's answer head is longer than %d bytes", SBX__HEAD_MAX);
    return 0;
}

static int is_tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* "HTTP/1.x DDD reason" */
static int status_line(char *line, struct sbx__http_head *h, struct sbx_error *err)
{
    if (strncmp(line, "HTTP/1.", 7) != 0 || (line[7] != '0' && line[7] != '1') || line[8] != ' ')
        return sbx_error_set(err, SBX_E_PARSE, 0, "the server's answer is not HTTP/1.x");
    h->minor = line[7] - '0';
    const char *d = line + 9;
    if (d[0] < '1' || d[0] > '5' || d[1] < '0' || d[1] > '9' || d[2] < '0' || d[2] > '9' ||
        (d[3] != ' ' && d[3] != '\0'))
        return sbx_error_set(err, SBX_E_PARSE, 0, "the server's status line has no status code");
    h->status = (d[0] - '0') * 100 + (d[1] - '0') * 10 + (d[2] - '0');
    const char *reason = d[3] ? d + 4 : "";
    for (const char *c = reason; *c; c++)
        if ((unsigned char)*c < ' ' && *c != '\t')
            return sbx_error_set(err, SBX_E_PARSE, 0,
                                 "the server's status line holds a control character");
    sbx__wire_clean(reason, strlen(reason), h->reason, sizeof(h->reason));
    return 0;
}

/* A decimal number (Content-Length): digits only, at most 18 of them. */
static int parse_length(const char *v, int64_t *out)
{
    size_t n = strlen(v);
    if (n == 0 || n > 18 || strspn(v, "0123456789") != n)
        return -1;
    *out = strtoll(v, NULL, 10);
    return 0;
}

static int field_line(char *line, struct sbx__http_head *h, struct sbx_error *err)
{
    if (line[0] == ' ' || line[0] == '\t')
        return sbx_error_set(err, SBX_E_PARSE, 0, "the server's answer folds a header line");
    char *colon = strchr(line, ':');
    if (!colon || colon == line)
        return sbx_error_set(err, SBX_E_PARSE, 0,
                             "the server's answer has a header line "
                             "without a name");
    for (char *c = line; c < colon; c++)
        if (!is_tchar((unsigned char)*c))
            return sbx_error_set(err, SBX_E_PARSE, 0, "the server's answer has a bad header name");
    *colon = '\0';
    char *v = colon + 1;
    while (*v == ' ' || *v == '\t')
        v++;
    char *end = v + strlen(v);
    while (end > v && (end[-1] == ' ' || end[-1] == '\t'))
        *--end = '\0';
    for (char *c = v; *c; c++)
        if (((unsigned char)*c < ' ' && *c != '\t') || *c == 0x7f)
            return sbx_error_set(err, SBX_E_PARSE, 0,
                                 "the server's header '%.40s' holds a control character", line);
    if (h->n_fields == SBX__HEAD_FIELDS)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "the server's answer has more than %d headers",
                             SBX__HEAD_FIELDS);
    h->fields[h->n_fields++] = (struct sbx__head_field){line, v};
    if (strcasecmp(line, "Content-Length") == 0) {
        int64_t len;
        if (parse_length(v, &len) < 0 || (h->content_length >= 0 && h->content_length != len))
            return sbx_error_set(err, SBX_E_PARSE, 0,
                                 "the server's Content-Length is not one "
                                 "number");
        h->content_length = len;
    } else if (strcasecmp(line, "Transfer-Encoding") == 0) {
        size_t n = strlen(v);
        h->chunked = n >= 7 && strcasecmp(v + n - 7, "chunked") == 0;
    }
    return 0;
}

int sbx__head_parse(const char *p, size_t len, struct sbx__http_head *out, struct sbx_error *err)
{
    if (len > SBX__HEAD_MAX)
        return sbx_error_set(err, SBX_E_TOOBIG, 0,
                             "the server's answer head is longer than %d "
                             "bytes",
                             SBX__HEAD_MAX);
    if (memchr(p, '\0', len))
        return sbx_error_set(err, SBX_E_PARSE, 0, "the server's answer head holds a NUL");
    memset(out, 0, sizeof(*out));
    out->content_length = -1;
    out->text = sbx_xstrndup(p, len);
    char *line = out->text;
    int rc = 0, first = 1, blank = 0;
    while (rc == 0 && *line) {
        char *nl = strchr(line, '\n');
        if (!nl) {
            rc = sbx_error_set(err, SBX_E_PARSE, 0, "the server's answer head is not complete");
            break;
        }
        *nl = '\0';
        if (nl > line && nl[-1] == '\r')
            nl[-1] = '\0';
        if (strchr(line, '\r')) {
            rc = sbx_error_set(err, SBX_E_PARSE, 0, "the server's answer head holds a bare CR");
            break;
        }
        if (!line[0]) {
            if (first)
                rc = sbx_error_set(err, SBX_E_PARSE, 0, "the server's answer has no status line");
            else if (nl + 1 != out->text + len)
                rc = sbx_error_set(err, SBX_E_PARSE, 0, "bytes after the server's answer head");
            blank = 1;
            break;
        }
        rc = first ? status_line(line, out, err) : field_line(line, out, err);
        first = 0;
        line = nl + 1;
    }
    if (rc == 0 && !blank)
        rc = sbx_error_set(err, SBX_E_PARSE, 0, "the server's answer head is not complete");
    if (rc < 0)
        sbx__head_release(out);
    return rc;
}

void sbx__head_release(struct sbx__http_head *h)
{
    free(h->text);
    h->text = NULL;
    h->n_fields = 0;
}

const char *sbx__head_get(const struct sbx__http_head *h, const char *name)
{
    for (size_t i = 0; i < h->n_fields; i++)
        if (strcasecmp(h->fields[i].name, name) == 0)
            return h->fields[i].value;
    return NULL;
}
