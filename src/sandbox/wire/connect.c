/* Connect streaming envelopes and error bodies: connect.h. */
#include <string.h>

#include "sandbox/wire/connect.h"
#include "sandbox/wire/wire.h"
#include "sbx/json.h"

#define ERROR_JSON_MAX ((size_t)1 << 20)

void sbx__connect_init(struct sbx__connect_dec *d, size_t max_message)
{
    memset(d, 0, sizeof(*d));
    d->max_message = max_message ? max_message : SBX__CONNECT_DEFAULT_MAX;
    sbx_buf_init(&d->msg, d->max_message);
}

void sbx__connect_release(struct sbx__connect_dec *d)
{
    sbx_buf_release(&d->msg);
}

/* The 5-byte prefix is in. */
static int check_prefix(struct sbx__connect_dec *d, struct sbx_error *err)
{
    d->flags = d->hdr[0];
    uint32_t len = (uint32_t)d->hdr[1] << 24 | (uint32_t)d->hdr[2] << 16 |
                   (uint32_t)d->hdr[3] << 8 | (uint32_t)d->hdr[4];
    if (d->flags & ~(SBX__CONNECT_COMPRESSED | SBX__CONNECT_END_STREAM))
        return sbx_error_set(err, SBX_E_PARSE, 0, "connect envelope has unknown flags 0x%02x",
                             (unsigned)d->flags);
    if (d->flags & SBX__CONNECT_COMPRESSED)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "connect envelope is compressed, and no compression was offered");
    if (len > d->max_message)
        return sbx_error_set(err, SBX_E_TOOBIG, 0,
                             "connect message of %u bytes is over the limit of %zu", (unsigned)len,
                             d->max_message);
    d->need = len;
    return 0;
}

long sbx__connect_feed(struct sbx__connect_dec *d, const uint8_t *p, size_t n,
                       struct sbx__connect_msg *out, struct sbx_error *err)
{
    memset(out, 0, sizeof(*out));
    if (d->deliver) {
        sbx_buf_reset(&d->msg);
        d->deliver = 0;
    }
    size_t used = 0;
    int rc;
    while (used < n) {
        if (d->ended)
            return sbx_error_set(err, SBX_E_PARSE, 0,
                                 "connect stream continues after its end-of-stream message");
        if (d->hdr_len < sizeof(d->hdr)) {
            size_t k = sizeof(d->hdr) - d->hdr_len;
            k = k < n - used ? k : n - used;
            memcpy(d->hdr + d->hdr_len, p + used, k);
            d->hdr_len += k, used += k;
            if (d->hdr_len < sizeof(d->hdr))
                break;
            if ((rc = check_prefix(d, err)) < 0)
                return rc;
        } else {
            size_t k = d->need < n - used ? d->need : n - used;
            if ((rc = sbx_buf_add(&d->msg, p + used, k, err)) < 0)
                return rc;
            d->need -= (uint32_t)k, used += k;
        }
        if (d->need == 0) {
            out->kind =
                    d->flags & SBX__CONNECT_END_STREAM ? SBX__CONNECT_END : SBX__CONNECT_MESSAGE;
            out->data = (const uint8_t *)d->msg.data;
            out->len = d->msg.len;
            d->ended = out->kind == SBX__CONNECT_END;
            d->hdr_len = 0;
            d->deliver = 1;
            break;
        }
    }
    return (long)used;
}

int sbx__connect_finish(const struct sbx__connect_dec *d, struct sbx_error *err)
{
    if (d->hdr_len)
        return sbx_error_set(err, SBX_E_PARSE, 0, "connect stream was cut inside an envelope");
    if (!d->ended)
        return sbx_error_set(err, SBX_E_PARSE, 0,
                             "connect stream ended without its end-of-stream message");
    return 0;
}

int sbx__connect_encode(struct sbx_buf *out, int flags, const void *p, size_t n,
                        struct sbx_error *err)
{
    if (flags & ~SBX__CONNECT_END_STREAM)
        return sbx_error_set(err, SBX_E_INVAL, 0, "connect envelope flags 0x%02x", flags);
    if (n > UINT32_MAX)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "connect message over 4 GiB");
    uint8_t h[5] = {(uint8_t)flags, (uint8_t)(n >> 24), (uint8_t)(n >> 16), (uint8_t)(n >> 8),
                    (uint8_t)n};
    int rc = sbx_buf_add(out, h, 5, err);
    return rc < 0 ? rc : sbx_buf_add(out, p, n, err);
}

/* ---------------------------------------------------------------------------------------------
 * Errors */

static const struct {
    const char *code;
    enum sbx_errcode sbx;
} codes[] = {
        {"canceled", SBX_E_CANCELLED},
        {"unknown", SBX_E_API},
        {"invalid_argument", SBX_E_INVAL},
        {"deadline_exceeded", SBX_E_TIMEOUT},
        {"not_found", SBX_E_NOTFOUND},
        {"already_exists", SBX_E_EXISTS},
        {"permission_denied", SBX_E_PERM},
        {"resource_exhausted", SBX_E_TOOBIG},
        {"failed_precondition", SBX_E_API},
        {"aborted", SBX_E_API},
        {"out_of_range", SBX_E_API},
        {"unimplemented", SBX_E_UNSUPPORTED},
        {"internal", SBX_E_API},
        {"unavailable", SBX_E_API},
        {"data_loss", SBX_E_API},
        {"unauthenticated", SBX_E_PERM},
};

/* The code the protocol implies for an HTTP status without a code of its own. */
static const char *code_of_status(int status)
{
    switch (status) {
    case 400:
        return "internal";
    case 401:
        return "unauthenticated";
    case 403:
        return "permission_denied";
    case 404:
        return "unimplemented";
    case 429:
    case 502:
    case 503:
    case 504:
        return "unavailable";
    default:
        return "unknown";
    }
}

/* Is e an error object of the protocol's shape? */
static int error_shape(const json_t *e)
{
    json_t *code = json_object_get(e, "code"), *msg = json_object_get(e, "message");
    json_t *details = json_object_get(e, "details");
    return json_is_object(e) && (!code || json_is_string(code)) && (!msg || json_is_string(msg)) &&
           (!details || json_is_array(details));
}

static int error_obj(const json_t *e, int http_status, struct sbx_error *err)
{
    const char *code = json_string_value(json_object_get(e, "code"));
    const char *msg = json_string_value(json_object_get(e, "message"));
    char c[64], m[512];
    enum sbx_errcode sc = SBX_E_API;
    if (!code)
        code = code_of_status(http_status);
    size_t i;
    for (i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
        if (strcmp(code, codes[i].code) == 0)
            break;
    if (i < sizeof(codes) / sizeof(codes[0]))
        sc = codes[i].sbx;
    else
        code = "unknown"; /* as the protocol says of a code it does not define */
    sbx__wire_clean(code, strlen(code), c, sizeof(c));
    if (msg && *msg)
        return sbx_error_set(err, sc, 0, "%s: %s", c,
                             sbx__wire_clean(msg, strlen(msg), m, sizeof(m)));
    return sbx_error_set(err, sc, 0, "%s", c);
}

int sbx__connect_error(const uint8_t *p, size_t n, int http_status, struct sbx_error *err)
{
    json_t *j = NULL;
    struct sbx_json_limits lim = {.max_bytes = ERROR_JSON_MAX, .max_depth = 16};
    int rc;
    if (sbx_json_parse((const char *)p, n, &lim, &j, NULL) == 0 && error_shape(j))
        rc = error_obj(j, http_status, err);
    else if (http_status)
        rc = sbx_error_set(err, SBX_E_API, 0, "%s: HTTP %d with a body that is not a connect error",
                           code_of_status(http_status), http_status);
    else
        rc = sbx_error_set(err, SBX_E_PARSE, 0, "connect error body does not parse");
    json_decref(j);
    return rc;
}

int sbx__connect_end(const uint8_t *p, size_t n, json_t **metadata, struct sbx_error *err)
{
    json_t *j = NULL;
    struct sbx_json_limits lim = {.max_bytes = ERROR_JSON_MAX, .max_depth = 16};
    int rc = sbx_json_parse((const char *)p, n, &lim, &j, err);
    if (rc < 0) {
        sbx_error_prefix(err, "connect end-of-stream message");
        return rc;
    }
    json_t *e = json_object_get(j, "error"), *md = json_object_get(j, "metadata");
    const char *k;
    json_t *v;
    if (!json_is_object(j) || (md && !json_is_object(md))) {
        rc = sbx_error_set(err, SBX_E_PARSE, 0,
                           "connect end-of-stream message is not of the protocol's shape");
        goto out;
    }
    json_object_foreach(md, k, v)
    {
        size_t i;
        json_t *s;
        int ok = json_is_array(v);
        json_array_foreach(v, i, s) ok = ok && json_is_string(s);
        if (!ok) {
            rc = sbx_error_set(err, SBX_E_PARSE, 0,
                               "connect end-of-stream metadata must map names to lists of "
                               "strings");
            goto out;
        }
    }
    if (e && !json_is_null(e)) {
        rc = error_shape(e) ? error_obj(e, 0, err)
                            : sbx_error_set(err, SBX_E_PARSE, 0,
                                            "connect end-of-stream error is not of the "
                                            "protocol's shape");
        goto out;
    }
    if (metadata)
        *metadata = md ? json_incref(md) : NULL;
out:
    json_decref(j);
    return rc;
}
