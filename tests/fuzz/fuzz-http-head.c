/* The head of an HTTP/1.1 answer read off an upgraded connection (src/sandbox/wire/head.h):
 * sbx__head_len never claims more than was fed or than the limit, a head it finds either parses
 * into a status of 100-599 and well-formed fields or fails with a message, and a parsed head
 * written out again ("HTTP/1.1 SSS", "name: value" lines) parses to the same status, fields and
 * Content-Length. The bytes are also parsed whole, head or not, which must not crash. */
#include <string.h>

#include "fuzz.h"
#include "sandbox/wire/head.h"
#include "sbx/buf.h"

static void check_head(const struct sbx__http_head *h)
{
    FUZZ_ASSERT(h->status >= 100 && h->status <= 599);
    FUZZ_ASSERT(h->n_fields <= SBX__HEAD_FIELDS);
    for (size_t i = 0; i < h->n_fields; i++) {
        const char *n = h->fields[i].name, *v = h->fields[i].value;
        FUZZ_ASSERT(n[0] != '\0' && !strpbrk(n, " \t:\r\n"));
        for (const char *c = v; *c; c++)
            FUZZ_ASSERT((unsigned char)*c >= ' ' || *c == '\t');
        FUZZ_ASSERT(sbx__head_get(h, n) != NULL);
    }
}

static void round_trip(const struct sbx__http_head *h)
{
    struct sbx_buf b;
    struct sbx_error err = SBX_ERROR_INIT;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    int rc = sbx_buf_addf(&b, &err, "HTTP/1.1 %d x\r\n", h->status);
    for (size_t i = 0; i < h->n_fields && rc == 0; i++)
        rc = sbx_buf_addf(&b, &err, "%s: %s\r\n", h->fields[i].name, h->fields[i].value);
    FUZZ_ASSERT(rc == 0 && sbx_buf_adds(&b, "\r\n", &err) == 0);
    struct sbx__http_head h2;
    if (b.len <= SBX__HEAD_MAX) {
        FUZZ_ASSERT(sbx__head_len(b.data, b.len, &err) == (long)b.len);
        FUZZ_ASSERT(sbx__head_parse(b.data, b.len, &h2, &err) == 0);
        FUZZ_ASSERT(h2.status == h->status && h2.n_fields == h->n_fields);
        FUZZ_ASSERT(h2.content_length == h->content_length && h2.chunked == h->chunked);
        for (size_t i = 0; i < h->n_fields; i++) {
            FUZZ_ASSERT(strcmp(h2.fields[i].name, h->fields[i].name) == 0);
            FUZZ_ASSERT(strcmp(h2.fields[i].value, h->fields[i].value) == 0);
        }
        sbx__head_release(&h2);
    }
    sbx_buf_release(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data;
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx__http_head h;
    long len = sbx__head_len(p, size, &err);
    FUZZ_ASSERT(len <= (long)size && len <= SBX__HEAD_MAX);
    FUZZ_ASSERT(len >= 0 || (size >= SBX__HEAD_MAX && err.msg[0]));
    if (len > 0) {
        if (sbx__head_parse(p, (size_t)len, &h, &err) == 0) {
            check_head(&h);
            round_trip(&h);
            sbx__head_release(&h);
        } else {
            FUZZ_ASSERT(err.msg[0] != '\0');
        }
    }
    if (sbx__head_parse(p, size, &h, &err) == 0) {
        check_head(&h);
        sbx__head_release(&h);
    }
    return 0;
}
