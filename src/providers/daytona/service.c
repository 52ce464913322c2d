/* The Daytona service: the control-plane endpoint, each sandbox's toolbox endpoint (behind the
 * toolbox proxy the service names: {toolboxProxyUrl}/{id}), both with the key as a bearer
 * token, and the provider's own short commands as synchronous toolbox session commands. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "providers/daytona/daytona.h"
#include "sandbox/wire/http.h"
#include "sbx/hash.h"
#include "sbx/json.h"
#include "sbx/secret.h"
#include "sbx/strv.h"
#include "sbx/b64.h"

#define RETRY_WAIT_MS 60000

struct sbx__dtn_conf *sbx__dtn_conf_ref(struct sbx__dtn_conf *c)
{
    __atomic_add_fetch(&c->refs, 1, __ATOMIC_SEQ_CST);
    return c;
}

void sbx__dtn_conf_unref(struct sbx__dtn_conf *c)
{
    if (!c || __atomic_sub_fetch(&c->refs, 1, __ATOMIC_SEQ_CST) > 0)
        return;
    sbx__endpoint_free(c->api);
    json_decref(c->key_ref);
    free(c->api_url);
    free(c->key_what);
    free(c->org);
    free(c->org_hdr);
    free(c->ca_file);
    free(c);
}

const char *const *sbx__dtn_headers(const struct sbx__dtn_conf *c, const char *buf[2])
{
    buf[0] = c->org_hdr;
    buf[1] = NULL;
    return buf;
}

/* The key must be there before anything is sent: a clear message when it is not. */
static int key_present(struct sbx__dtn_conf *c, struct sbx_error *err)
{
    struct sbx_secret *sec = NULL;
    int rc = sbx_provider_secret(c->key_ref, "the Daytona API key", &sec, err);
    sbx_secret_free(sec);
    if (rc < 0)
        return sbx_error_set(err, SBX_E_PERM, 0,
                             "no Daytona API key: %s is not set (the daytona provider's api_key "
                             "option names where the key is)",
                             c->key_what);
    return 0;
}

/* An error status of the Daytona API or a toolbox, worded for what it means here
 * (sbx__http_words_fn). */
static int dtn_words(void *ctx, long status, const char *what, const char *text,
                     struct sbx_error *err)
{
    struct sbx__dtn_conf *c = ctx;
    (void)what;
    if (status == 401 || (status == 403 && !strstr(text, "limit")))
        return sbx_error_set(err, SBX_E_PERM, 0,
                             "the Daytona API refused the key from %s (HTTP %ld): %s", c->key_what,
                             status, text);
    if (status == 429 || status == 403)
        return sbx_error_set(err, SBX_E_API, 0,
                             "the Daytona API is rate limiting or over quota (HTTP %ld%s): %s",
                             status, status == 429 ? ", retries exhausted" : "", text);
    return 0;
}

static int status_error(struct sbx__dtn_conf *c, struct sbx__endpoint *ep, long status,
                        const struct sbx_buf *body, const char *what, struct sbx_error *err)
{
    return sbx__http_service_error(ep, status, body->data, body->len, what, dtn_words, c, err);
}

static int call_json(struct sbx__dtn_conf *c, struct sbx__endpoint *ep, const char *method,
                     const char *path, const json_t *body, json_t **out, struct sbx_error *err)
{
    const char *hb[2];
    struct sbx__http_req req = {.method = method,
                                .path = path,
                                .json = body,
                                .headers = sbx__dtn_headers(c, hb),
                                .no_retry = 0};
    struct sbx__http_resp resp;
    sbx__http_resp_init(&resp);
    int rc = key_present(c, err);
    if (rc == 0)
        rc = sbx__http_call(ep, &req, &resp, err);
    char what[256];
    snprintf(what, sizeof(what), "%s %s", method, path);
    if (rc == 0 && resp.status >= 400)
        rc = status_error(c, ep, resp.status, &resp.body, what, err);
    if (rc == 0 && out) {
        *out = NULL;
        if (resp.body.len &&
            (rc = sbx_json_parse(resp.body.data, resp.body.len, NULL, out, err)) < 0)
            sbx_error_prefix(err, "%s", what);
    }
    sbx__http_resp_release(&resp);
    return rc;
}

int sbx__dtn_api(struct sbx__dtn_conf *c, const char *method, const char *path, const json_t *body,
                 json_t **out, struct sbx_error *err)
{
    return call_json(c, c->api, method, path, body, out, err);
}

static int endpoint(struct sbx__dtn_conf *c, const char *url, const char *name,
                    struct sbx__endpoint **out, struct sbx_error *err)
{
    struct sbx__endpoint_opts o = {.url = url,
                                   .name = name,
                                   .ca_file = c->ca_file,
                                   .auth = SBX__AUTH_BEARER,
                                   .token = {.ref = c->key_ref},
                                   .http = SBX__HTTP_1_1,
                                   .max_retries = 3,
                                   .max_retry_wait_ms = RETRY_WAIT_MS};
    return sbx__endpoint_new(&o, out, err);
}

int sbx__dtn_conf_new(const struct sbx__dtn_opts *o, struct sbx__dtn_conf **out,
                      struct sbx_error *err)
{
    struct sbx__dtn_conf *c = sbx_xcalloc(1, sizeof(*c));
    c->refs = 1;
    const char *url = o->api_url && o->api_url[0] ? o->api_url : getenv("DAYTONA_API_URL");
    c->api_url = sbx_xstrdup(url && url[0] ? url : SBX__DTN_API_DEFAULT);
    size_t n = strlen(c->api_url);
    while (n > 1 && c->api_url[n - 1] == '/')
        c->api_url[--n] = '\0';
    c->key_ref =
            o->key_ref ? json_deep_copy(o->key_ref) : json_pack("{s:s}", "env", "DAYTONA_API_KEY");
    const char *var = json_string_value(json_object_get(c->key_ref, "env"));
    const char *file = json_string_value(json_object_get(c->key_ref, "file"));
    c->key_what = var ? sbx_xasprintf("$%s", var) : sbx_xasprintf("'%s'", file ? file : "?");
    const char *org = o->org && o->org[0] ? o->org : getenv("DAYTONA_ORGANIZATION_ID");
    if (org && org[0] && !strpbrk(org, "\r\n")) {
        c->org = sbx_xstrdup(org);
        c->org_hdr = sbx_xasprintf("X-Daytona-Organization-ID: %s", org);
    }
    c->ca_file = o->ca_file ? sbx_xstrdup(o->ca_file) : NULL;
    int rc = endpoint(c, c->api_url, "the Daytona API", &c->api, err);
    if (rc == -SBX_E_NOTFOUND)
        rc = sbx_error_set(err, SBX_E_PERM, 0,
                           "no Daytona API key: %s is not set or cannot be read (the daytona "
                           "provider's api_key option names where the key is)",
                           c->key_what);
    if (rc < 0) {
        sbx__dtn_conf_unref(c);
        return rc;
    }
    *out = c;
    return 0;
}

int sbx__dtn_box_init(struct sbx__dtn_box *b, struct sbx__dtn_conf *c, const char *id,
                      const char *proxy_url, const char *root, struct sbx_error *err)
{
    memset(b, 0, sizeof(*b));
    size_t n = strlen(proxy_url);
    while (n > 1 && proxy_url[n - 1] == '/')
        n--;
    char *url = sbx_xasprintf("%.*s/%s", (int)n, proxy_url, id);
    char *name = sbx_xasprintf("the Daytona toolbox of sandbox '%s'", id);
    int rc = endpoint(c, url, name, &b->ep, err);
    free(url);
    free(name);
    if (rc < 0)
        return rc;
    b->conf = sbx__dtn_conf_ref(c);
    b->id = sbx_xstrdup(id);
    b->user_root = sbx_xstrdup(root);
    pthread_mutex_init(&b->lock, NULL);
    return 0;
}

void sbx__dtn_box_release(struct sbx__dtn_box *b)
{
    if (!b->conf)
        return;
    if (b->files_session) {
        char *path = sbx_xasprintf("/process/session/%s", b->files_session);
        struct sbx_error ignored = SBX_ERROR_INIT;
        (void)sbx__dtn_toolbox(b, "DELETE", path, NULL, NULL, &ignored);
        free(path);
        free(b->files_session);
    }
    pthread_mutex_destroy(&b->lock);
    sbx__endpoint_free(b->ep);
    sbx__dtn_conf_unref(b->conf);
    free(b->id);
    free(b->user_root);
    memset(b, 0, sizeof(*b));
}

int sbx__dtn_toolbox(struct sbx__dtn_box *b, const char *method, const char *path,
                     const json_t *body, json_t **out, struct sbx_error *err)
{
    int rc = call_json(b->conf, b->ep, method, path, body, out, err);
    if (rc == -SBX_E_INVAL && strstr(err->msg, "not started"))
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "sandbox '%s' is not started", b->id);
    else if (rc == -SBX_E_NOTFOUND && strstr(err->msg, "Sandbox"))
        rc = sbx_error_set(err, SBX_E_SANDBOX, 0, "sandbox '%s' is gone", b->id);
    return rc;
}

static int is_marker_start(const uint8_t *p, size_t n)
{
    /* n (1 or 2) bytes that may begin a marker: all 0x01 or all 0x02. */
    return (p[0] == 1 || p[0] == 2) && (n == 1 || p[1] == p[0]);
}

int sbx__dtn_demux_feed(struct sbx__dtn_demux *dm, const uint8_t *p, size_t n,
                        sbx__dtn_piece_fn *fn, void *ud, struct sbx_error *err)
{
    int rc;
    /* A marker begun at the end of the last message. */
    while (dm->n_held && n) {
        uint8_t b = dm->held[0];
        size_t need = 3 - dm->n_held, k = 0;
        while (k < need && k < n && p[k] == b)
            k++;
        if (k == need) {
            dm->stream = b;
            dm->n_held = 0;
            p += k;
            n -= k;
            break;
        }
        if (k == n) { /* still only a beginning */
            dm->held[dm->n_held++] = b;
            return 0;
        }
        /* Not a marker: the held bytes were data. */
        uint8_t held[2];
        size_t nh = dm->n_held;
        memcpy(held, dm->held, nh);
        dm->n_held = 0;
        if (dm->stream && (rc = fn(ud, dm->stream, held, nh, err)) != 0)
            return rc;
    }
    size_t start = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] != 1 && p[i] != 2)
            continue;
        size_t left = n - i;
        if (left < 3 && is_marker_start(p + i, left)) {
            if (i > start && dm->stream &&
                (rc = fn(ud, dm->stream, p + start, i - start, err)) != 0)
                return rc;
            memcpy(dm->held, p + i, left);
            dm->n_held = left;
            return 0;
        }
        if (left < 3 || p[i + 1] != p[i] || p[i + 2] != p[i])
            continue;
        if (i > start && dm->stream && (rc = fn(ud, dm->stream, p + start, i - start, err)) != 0)
            return rc;
        dm->stream = p[i];
        i += 2;
        start = i + 1;
    }
    if (n > start && dm->stream)
        return fn(ud, dm->stream, p + start, n - start, err);
    return 0;
}

int sbx__dtn_demux_finish(struct sbx__dtn_demux *dm, sbx__dtn_piece_fn *fn, void *ud,
                          struct sbx_error *err)
{
    size_t nh = dm->n_held;
    dm->n_held = 0;
    if (nh && dm->stream)
        return fn(ud, dm->stream, dm->held, nh, err);
    return 0;
}

char *sbx__dtn_session_id(void)
{
    char hex[33];
    struct sbx_error ignored = SBX_ERROR_INIT;
    if (sbx_random_hex(hex, 16, &ignored) < 0)
        abort();
    return sbx_xasprintf("sbx-%s", hex);
}

/* The provider's own session, made on first use. Called with the box's lock held. */
static int files_session(struct sbx__dtn_box *b, struct sbx_error *err)
{
    if (b->files_session)
        return 0;
    char *sid = sbx__dtn_session_id();
    json_t *body = json_pack("{s:s}", "sessionId", sid);
    int rc = sbx__dtn_toolbox(b, "POST", "/process/session", body, NULL, err);
    json_decref(body);
    if (rc < 0) {
        free(sid);
        return rc;
    }
    b->files_session = sid;
    return 0;
}

/* The command's stdout comes back base64-encoded (the toolbox hands output over as JSON text,
 * which cannot carry every byte: file names, NUL-separated listings), so it runs inside this
 * fixed wrapper with its argv as arguments. */
static const char RUN_WRAP[] = "f=$(mktemp) || exit 125; \"$@\" >\"$f\"; rc=$?; "
                               "base64 <\"$f\" || rc=125; rm -f -- \"$f\"; exit $rc";

static int take_out(const json_t *ans, struct sbx__shell_run *out, struct sbx_error *err)
{
    const json_t *v = json_object_get(ans, "stdout");
    const char *t = json_string_value(v);
    size_t n = json_string_length(v), k = 0;
    char *clean = sbx_xmalloc(n + 1);
    for (size_t i = 0; t && i < n; i++)
        if (t[i] != '\n' && t[i] != '\r' && t[i] != ' ')
            clean[k++] = t[i];
    int rc = k ? sbx_b64_decode(clean, k, &out->out, err) : 0;
    free(clean);
    if (rc < 0)
        return rc;
    v = json_object_get(ans, "stderr");
    if (json_is_string(v) && json_string_length(v))
        rc = sbx_buf_add(&out->err, json_string_value(v), json_string_length(v), err);
    return rc;
}

int sbx__dtn_run(struct sbx__dtn_box *b, const char *const *argv, struct sbx__shell_run *out,
                 struct sbx_error *err)
{
    struct sbx_strv full;
    sbx_strv_init(&full);
    sbx_strv_push(&full, "/bin/sh");
    sbx_strv_push(&full, "-c");
    sbx_strv_push(&full, RUN_WRAP);
    sbx_strv_push(&full, "sbx");
    for (size_t i = 0; argv[i]; i++)
        sbx_strv_push(&full, argv[i]);
    char *line = sbx__shellfs_quote_argv((const char *const *)full.v);
    sbx_strv_release(&full);
    json_t *body = json_pack("{s:s,s:b}", "command", line, "runAsync", 0), *ans = NULL;
    pthread_mutex_lock(&b->lock);
    int rc = files_session(b, err);
    char *path = rc == 0 ? sbx_xasprintf("/process/session/%s/exec", b->files_session) : NULL;
    if (rc == 0)
        rc = sbx__dtn_toolbox(b, "POST", path, body, &ans, err);
    pthread_mutex_unlock(&b->lock);
    const json_t *code = json_object_get(ans, "exitCode");
    if (rc == 0 && !json_is_integer(code))
        rc = sbx_error_set(err, SBX_E_API, 0,
                           "the Daytona toolbox of sandbox '%s' gave no exit code for '%s'", b->id,
                           argv[0]);
    if (rc == 0) {
        out->code = (int)json_integer_value(code);
        rc = take_out(ans, out, err);
    }
    json_decref(ans);
    json_decref(body);
    free(path);
    free(line);
    return rc;
}
