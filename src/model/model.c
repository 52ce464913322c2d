/* Model objects: creation, the shared retry loop, recording, and helpers. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model-internal.h"
#include "sbx/fs.h"
#include "sbx/hash.h"
#include "sbx/json.h"
#include "sbx/scrub.h"
#include "sbx/log.h"
#include "sbx/time.h"
#include "sbx/trace.h"

#define REPLAY_FILE_MAX ((size_t)64 << 20)

static char *trim_url(const char *url)
{
    size_t n = strlen(url);
    while (n && url[n - 1] == '/')
        n--;
    return sbx_xstrndup(url, n);
}

static int load_replay(struct sbx_model *m, const char *path, struct sbx_error *err)
{
    struct sbx_buf buf;
    int rc = 0;
    sbx_buf_init(&buf, REPLAY_FILE_MAX);
    rc = sbx_fs_read_path(path, REPLAY_FILE_MAX, &buf, err);
    if (rc < 0) {
        sbx_error_prefix(err, "replay file '%s'", path);
        goto out;
    }
    m->replay = json_array();
    const char *p = buf.data, *end = buf.data + buf.len;
    int line = 0;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        line++;
        size_t n = (size_t)(le - p);
        while (n && (p[n - 1] == '\r' || p[n - 1] == ' ' || p[n - 1] == '\t'))
            n--;
        if (n) {
            json_t *v = NULL;
            rc = sbx__model_parse(m, "replay line", p, n, &v, err);
            if (rc == 0 && !json_is_object(v)) {
                json_decref(v);
                rc = sbx_error_set(err, SBX_E_PARSE, 0, "expected a response object");
            }
            if (rc < 0) {
                sbx_error_prefix(err, "replay file '%s' line %d", path, line);
                goto out;
            }
            sbx_json_append(m->replay, v);
        }
        p = le + 1;
    }
    if (json_array_size(m->replay) == 0)
        rc = sbx_error_set(err, SBX_E_PARSE, 0, "replay file '%s' holds no responses", path);
out:
    sbx_buf_release(&buf);
    return rc;
}

int sbx_model_new(const char *name, const struct sbx_model_options *opt, struct sbx_model **out,
                  struct sbx_error *err)
{
    static const struct sbx_model_options defaults;
    struct sbx_model *m = NULL;
    int rc = 0;
    if (!opt)
        opt = &defaults;
    if (!name || !name[0])
        return sbx_error_set(err, SBX_E_INVAL, 0, "model name must not be empty");
    m = sbx_xcalloc(1, sizeof(*m));
    sbx_strv_init(&m->secrets);
    m->name = sbx_xstrdup(name);
    pthread_mutex_init(&m->lock, NULL);
    sbx__model_http_pool_init(&m->pool);
    m->no_stream = opt->no_stream;
    m->timeout_ms = opt->timeout_ms > 0 ? opt->timeout_ms : 600000;
    m->connect_timeout_ms = opt->connect_timeout_ms > 0 ? opt->connect_timeout_ms : 15000;
    m->first_byte_timeout_ms = opt->first_byte_timeout_ms > 0 ? opt->first_byte_timeout_ms : 60000;
    m->idle_timeout_ms = opt->idle_timeout_ms > 0 ? opt->idle_timeout_ms : 300000;
    m->deadline_ms = opt->deadline_ms > 0 ? opt->deadline_ms : 900000;
    m->on_wait = opt->on_wait;
    m->on_wait_data = opt->on_wait_data;
    m->retries = opt->retries == 0 ? 3 : opt->retries < 0 ? 0 : opt->retries;
    m->retry_base_ms = opt->retry_base_ms > 0 ? opt->retry_base_ms : 500;
    m->retry_max_ms = opt->retry_max_ms > 0 ? opt->retry_max_ms : 30000;
    m->max_response_bytes = opt->max_response_bytes ? opt->max_response_bytes : (size_t)64 << 20;
    m->max_event_bytes = opt->max_event_bytes ? opt->max_event_bytes : (size_t)16 << 20;
    m->cancel = opt->cancel;

    if (strncmp(name, "replay:", 7) == 0) {
        m->vt = &sbx__model_replay_vt;
        m->replay_path = sbx_xstrdup(name + 7);
        if (!m->replay_path[0]) {
            rc = sbx_error_set(err, SBX_E_INVAL, 0, "model 'replay:' needs a file name");
            goto out;
        }
        rc = load_replay(m, m->replay_path, err);
        if (rc < 0)
            goto out;
    } else {
        m->vt = opt->api == SBX_MODEL_API_CHAT ? &sbx__model_chat_vt : &sbx__model_responses_vt;
        const char *base = opt->base_url;
        if (!base || !base[0])
            base = getenv("OPENAI_BASE_URL");
        if (!base || !base[0])
            base = SBX_MODEL_DEFAULT_BASE_URL;
        if (strncmp(base, "http://", 7) != 0 && strncmp(base, "https://", 8) != 0) {
            rc = sbx_error_set(err, SBX_E_INVAL, 0,
                               "base URL '%s' must start with http:// or https://", base);
            goto out;
        }
        m->base_url = trim_url(base);
        const char *key = opt->api_key ? opt->api_key : getenv("OPENAI_API_KEY");
        if (key && key[0])
            m->api_key = sbx_xstrdup(key);
        else if (strcmp(m->base_url, SBX_MODEL_DEFAULT_BASE_URL) == 0) {
            /* The OpenAI API refuses every keyless request; say so now rather than after a
             * round of retries. Other servers (local ones) may need no key. */
            rc = sbx_error_set(err, SBX_E_INVAL, 0,
                               "no API key for %s: set OPENAI_API_KEY (a server that needs no "
                               "key: give its base URL, e.g. OPENAI_BASE_URL or sbx run "
                               "--base-url)",
                               m->base_url);
            goto out;
        }
    }
    if (opt->record_path) {
        for (size_t i = 0; opt->secrets && i < opt->secrets->n; i++)
            sbx_strv_push(&m->secrets, opt->secrets->v[i]);
        if (m->api_key)
            sbx_strv_push(&m->secrets, m->api_key);
        int fd = open(opt->record_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0) {
            rc = sbx_error_errno(err, errno, "cannot open record file '%s'", opt->record_path);
            goto out;
        }
        m->record = fdopen(fd, "w");
        if (!m->record) {
            rc = sbx_error_errno(err, errno, "cannot open record file '%s'", opt->record_path);
            close(fd);
            goto out;
        }
    }
    *out = m;
    m = NULL;
out:
    sbx_model_free(m);
    return rc;
}

void sbx_model_free(struct sbx_model *m)
{
    if (!m)
        return;
    if (m->record)
        fclose(m->record);
    for (size_t i = 0; i < m->secrets.n; i++)
        explicit_bzero(m->secrets.v[i], strlen(m->secrets.v[i]));
    sbx_strv_release(&m->secrets);
    if (m->api_key) {
        explicit_bzero(m->api_key, strlen(m->api_key));
        free(m->api_key);
    }
    free(m->name);
    free(m->base_url);
    free(m->replay_path);
    json_decref(m->replay);
    sbx__model_http_pool_release(&m->pool);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

const char *sbx_model_name(const struct sbx_model *m)
{
    return m->name;
}

const char *sbx_model_provider(const struct sbx_model *m)
{
    return m->vt->provider;
}

/* Replace every occurrence of the key in the message: a server that echoes a request back
 * into its error must not make us print the credential. */
void sbx__model_scrub(const struct sbx_model *m, struct sbx_error *err)
{
    if (!err || !m->api_key || strlen(m->api_key) < 4)
        return;
    size_t kl = strlen(m->api_key);
    char *hit;
    while ((hit = strstr(err->msg, m->api_key))) {
        size_t tail = strlen(hit + kl);
        memcpy(hit, "***", 3);
        memmove(hit + 3, hit + kl, tail + 1);
    }
}

int sbx_model_respond(struct sbx_model *m, const struct sbx_model_request *req,
                      sbx_model_stream_fn *cb, void *cb_data, json_t **response_out,
                      struct sbx_error *err)
{
    json_t *resp = NULL;
    if (!req->input || !json_is_array(req->input))
        return sbx_error_set(err, SBX_E_INVAL, 0, "model request input must be an array");
    int rc = m->vt->respond(m, req, cb, cb_data, &resp, err);
    if (rc < 0) {
        sbx__model_scrub(m, err);
        return rc;
    }
    if (!json_is_array(json_object_get(resp, "output")))
        sbx_json_set(resp, "output", json_array());
    if (m->record) {
        json_t *clean = sbx_scrub_json(&m->secrets, resp, NULL);
        char *line = sbx_json_dumps(clean, SBX_JSON_COMPACT);
        json_decref(clean);
        int bad =
                fputs(line, m->record) < 0 || fputc('\n', m->record) < 0 || fflush(m->record) != 0;
        free(line);
        if (bad) {
            json_decref(resp);
            return sbx_error_errno(err, errno, "cannot write record file");
        }
    }
    *response_out = resp;
    return 0;
}

char *sbx_model_response_text(const json_t *response)
{
    struct sbx_buf b;
    size_t i, j;
    json_t *item, *part;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    json_array_foreach(json_object_get(response, "output"), i, item)
    {
        const char *type = json_string_value(json_object_get(item, "type"));
        if (!type || strcmp(type, "message") != 0)
            continue;
        json_array_foreach(json_object_get(item, "content"), j, part)
        {
            const char *pt = json_string_value(json_object_get(part, "type"));
            const char *text = json_string_value(json_object_get(part, "text"));
            if (pt && text && strcmp(pt, "output_text") == 0 && sbx_buf_adds(&b, text, NULL) < 0)
                SBX_BUG("unbounded buffer refused data");
        }
    }
    return sbx_buf_detach(&b, NULL);
}

int sbx__model_decode(struct sbx_model *m, const json_t *tools, const char *body, size_t n,
                      int stream, sbx_model_stream_fn *cb, void *cb_data, json_t **out,
                      struct sbx_error *err)
{
    if (!m->vt->decode)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0, "provider '%s' has no wire format",
                             m->vt->provider);
    return m->vt->decode(m, tools, body, n, stream, cb, cb_data, out, err);
}

int sbx__model_body(struct sbx_model *m, const struct sbx_model_request *req, int stream,
                    char **out, size_t *out_len, struct sbx_error *err)
{
    if (!m->vt->body)
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0, "provider '%s' has no wire format",
                             m->vt->provider);
    struct sbx_model_cache *own = req->cache ? NULL : sbx_model_cache_new();
    int rc = m->vt->body(m, req, stream, req->cache ? req->cache : own, out, out_len, err);
    sbx_model_cache_free(own);
    return rc;
}

int sbx__model_parse(struct sbx_model *m, const char *what, const char *data, size_t n,
                     json_t **out, struct sbx_error *err)
{
    struct sbx_json_limits lim = {.max_bytes = m->max_response_bytes, .max_depth = 128};
    int rc = sbx_json_parse(data, n, &lim, out, err);
    if (rc < 0)
        sbx_error_prefix(err, "%s", what);
    return rc;
}

char *sbx__model_error_message(const char *body, size_t n)
{
    json_t *v = NULL;
    char *msg = NULL;
    struct sbx_json_limits lim = {.max_bytes = (size_t)1 << 20, .max_depth = 32};
    if (n && sbx_json_parse(body, n, &lim, &v, NULL) == 0) {
        json_t *e = json_object_get(v, "error");
        const char *s = json_string_value(json_object_get(e, "message"));
        if (!s)
            s = json_string_value(e);
        if (!s)
            s = json_string_value(json_object_get(v, "message"));
        if (!s)
            s = json_string_value(json_object_get(v, "detail"));
        if (s)
            msg = sbx_xstrdup(s);
        json_decref(v);
    }
    if (!msg) {
        size_t keep = n > 300 ? 300 : n;
        msg = sbx_xstrndup(body, keep);
        for (char *p = msg; *p; p++)
            if ((unsigned char)*p < 0x20)
                *p = ' ';
        if (!keep) {
            free(msg);
            msg = sbx_xstrdup("(empty body)");
        }
    }
    return msg;
}

static int retryable_status(long s)
{
    return s == 408 || s == 409 || s == 429 || s >= 500;
}

static int64_t backoff_ms(const struct sbx__model_extras *x, int attempt, int64_t retry_after_ms)
{
    if (retry_after_ms >= 0)
        return retry_after_ms < x->retry_max_ms ? retry_after_ms : x->retry_max_ms;
    int64_t d = x->retry_base_ms > 0 ? x->retry_base_ms : 1;
    for (int i = 0; i < attempt && d < x->retry_max_ms; i++)
        d *= 2;
    if (d > x->retry_max_ms)
        d = x->retry_max_ms;
    /* Jitter in [d/2, d] keeps clients that failed together from retrying together. */
    uint32_t r = 0;
    if (sbx_random_bytes(&r, sizeof(r), NULL) < 0)
        r = (uint32_t)sbx_time_mono_ns();
    return d / 2 + (int64_t)((double)(d - d / 2) * (r / 4294967296.0));
}

static int sleep_cancellable(const struct sbx_model *m, int64_t ms, struct sbx_error *err)
{
    int64_t end = sbx_time_mono_ns() + ms * SBX_NS_PER_MS;
    for (;;) {
        if (m->cancel && *m->cancel)
            return sbx_error_set(err, SBX_E_CANCELLED, 0, "model call cancelled");
        int64_t left = (end - sbx_time_mono_ns()) / SBX_NS_PER_MS;
        if (left <= 0)
            return 0;
        sbx_sleep_ms(left < 50 ? left : 50);
    }
}

int sbx__model_call(struct sbx_model *m, const char *path, const struct sbx__model_extras *x,
                    const char *body, size_t body_len, int stream,
                    const struct sbx__attempt_ops *ops, void *ud, json_t **out, int *plain,
                    struct sbx_error *err)
{
    struct sbx__model_http_resp resp;
    char *url = sbx_xasprintf("%s%s%s", m->base_url, path, x->query ? x->query : "");
    int rc = 0;
    sbx__model_http_resp_init(&resp);
    struct sbx__model_http_req hreq = {
            .pool = &m->pool,
            .url = url,
            .bearer = m->api_key,
            .headers = (const char *const *)x->headers.v,
            .body = body,
            .body_len = body_len,
            .stream = stream,
            .timeout_ms = x->timeout_ms,
            .connect_timeout_ms = m->connect_timeout_ms,
            /* A plain answer gets the same bounds: a server that accepted the request and
             * never answers would otherwise hold each attempt for the whole timeout_ms. */
            .first_byte_ms = m->first_byte_timeout_ms,
            .idle_ms = m->idle_timeout_ms,
            .on_wait = m->on_wait,
            .on_wait_data = m->on_wait_data,
            .max_body = m->max_response_bytes,
            .sink = stream ? ops->sink : NULL,
            .ud = ud,
            .cancel = m->cancel,
    };
    int64_t deadline = sbx_time_mono_ns() + m->deadline_ms * SBX_NS_PER_MS;
    for (int attempt = 0;; attempt++) {
        int retry = 0;
        int64_t left_ms = (deadline - sbx_time_mono_ns()) / SBX_NS_PER_MS;
        hreq.timeout_ms = x->timeout_ms < left_ms ? x->timeout_ms : left_ms > 1 ? left_ms : 1;
        hreq.attempt = attempt + 1;
        ops->reset(ud);
        rc = sbx__model_http_post(&hreq, &resp, err);
        if (rc == 0 && resp.status >= 200 && resp.status < 300) {
            rc = resp.plain ? ops->finish_plain(ud, &resp, out, err)
                            : ops->finish(ud, &resp, out, err);
            if (rc == 0) {
                if (plain)
                    *plain = resp.plain;
                sbx_span_set_int(sbx_trace_current(), "sbx.model.retries", attempt);
                break;
            }
            retry = rc == -SBX_E_HTTP && ops->delivered(ud) == 0;
        } else if (rc == 0) {
            char *msg = sbx__model_error_message(resp.body.data, resp.body.len);
            rc = sbx_error_set(err, SBX_E_API, 0, "model API answered %ld: %s%s", resp.status, msg,
                               resp.status == 401 && !m->api_key
                                       ? " (no API key was sent: set OPENAI_API_KEY)"
                                       : "");
            free(msg);
            retry = retryable_status(resp.status);
        } else {
            retry = (rc == -SBX_E_HTTP || rc == -SBX_E_TIMEOUT) && ops->delivered(ud) == 0;
        }
        sbx__model_scrub(m, err);
        sbx_span_set_int(sbx_trace_current(), "sbx.model.retries", attempt);
        if (resp.status)
            sbx_span_set_int(sbx_trace_current(), "http.response.status_code", resp.status);
        if (!retry || attempt >= x->retries) {
            if (attempt > 0)
                sbx_error_prefix(err, "after %d attempts", attempt + 1);
            break;
        }
        int64_t wait = backoff_ms(x, attempt, resp.retry_after_ms);
        if (sbx_time_mono_ns() + wait * SBX_NS_PER_MS >= deadline) {
            sbx_error_prefix(err, "model call deadline (%lld ms) passed after %d attempt%s",
                             (long long)m->deadline_ms, attempt + 1, attempt ? "s" : "");
            break;
        }
        sbx_log(SBX_LOG_WARN, "%s; retrying in %lld ms (attempt %d of %d)", err ? err->msg : "",
                (long long)wait, attempt + 2, x->retries + 1);
        rc = sleep_cancellable(m, wait, err);
        if (rc < 0)
            break;
    }
    sbx__model_http_resp_release(&resp);
    free(url);
    return rc;
}

int sbx__model_exchange(struct sbx_model *m, const struct sbx_model_request *req, const char *path,
                        int stream, const struct sbx__attempt_ops *ops, void *ud,
                        sbx_model_stream_fn *cb, void *cb_data, json_t **out, struct sbx_error *err)
{
    char *body = NULL;
    size_t body_len = 0;
    int plain = 0;
    struct sbx__model_extras x;
    int rc = sbx__model_call_extras(m, req->settings, &x, err);
    if (rc == 0)
        rc = sbx__model_body(m, req, stream, &body, &body_len, err);
    if (rc == 0)
        rc = sbx__model_call(m, path, &x, body, body_len, stream, ops, ud, out, &plain, err);
    if (rc == 0 && cb && (!stream || plain))
        sbx__model_synth_events(*out, cb, cb_data);
    sbx__model_extras_release(&x);
    free(body);
    return rc;
}

int sbx__model_decode_with(const struct sbx__attempt_ops *ops, void *ud, const char *body, size_t n,
                           int stream, json_t **out, struct sbx_error *err)
{
    struct sbx__model_http_resp resp;
    sbx__model_http_resp_init(&resp);
    resp.status = 200;
    int rc = stream ? ops->sink(body, n, ud, err) : sbx_buf_add(&resp.body, body, n, err);
    if (rc == 0)
        rc = ops->finish(ud, &resp, out, err);
    sbx__model_http_resp_release(&resp);
    return rc;
}

static void emit(sbx_model_stream_fn *cb, void *data, json_t *ev, int *seq)
{
    sbx_json_set(ev, "sequence_number", json_integer((*seq)++));
    cb(ev, data);
    json_decref(ev);
}

void sbx__model_synth_events(const json_t *response, sbx_model_stream_fn *cb, void *cb_data)
{
    int seq = 0;
    size_t i, j;
    json_t *item, *part;
    json_t *id = json_object_get(response, "id");
    emit(cb, cb_data,
         json_pack("{s:s, s:{s:O?, s:s, s:[]}}", "type", "response.created", "response", "id", id,
                   "status", "in_progress", "output"),
         &seq);
    json_array_foreach(json_object_get(response, "output"), i, item)
    {
        const char *type = json_string_value(json_object_get(item, "type"));
        json_t *item_id = json_object_get(item, "id");
        emit(cb, cb_data,
             json_pack("{s:s, s:i, s:O}", "type", "response.output_item.added", "output_index",
                       (json_int_t)i, "item", item),
             &seq);
        if (type && strcmp(type, "message") == 0) {
            json_array_foreach(json_object_get(item, "content"), j, part)
            {
                json_t *text = json_object_get(part, "text");
                const char *pt = json_string_value(json_object_get(part, "type"));
                if (!pt || strcmp(pt, "output_text") != 0 || !json_is_string(text))
                    continue;
                emit(cb, cb_data,
                     json_pack("{s:s, s:O?, s:i, s:i, s:O}", "type", "response.output_text.delta",
                               "item_id", item_id, "output_index", (json_int_t)i, "content_index",
                               (json_int_t)j, "delta", text),
                     &seq);
                emit(cb, cb_data,
                     json_pack("{s:s, s:O?, s:i, s:i, s:O}", "type", "response.output_text.done",
                               "item_id", item_id, "output_index", (json_int_t)i, "content_index",
                               (json_int_t)j, "text", text),
                     &seq);
            }
        } else if (type && strcmp(type, "function_call") == 0) {
            json_t *args = json_object_get(item, "arguments");
            if (json_is_string(args)) {
                emit(cb, cb_data,
                     json_pack("{s:s, s:O?, s:i, s:O}", "type",
                               "response.function_call_arguments.delta", "item_id", item_id,
                               "output_index", (json_int_t)i, "delta", args),
                     &seq);
                emit(cb, cb_data,
                     json_pack("{s:s, s:O?, s:i, s:O}", "type",
                               "response.function_call_arguments.done", "item_id", item_id,
                               "output_index", (json_int_t)i, "arguments", args),
                     &seq);
            }
        } else if (type && strcmp(type, "custom_tool_call") == 0) {
            json_t *input = json_object_get(item, "input");
            if (json_is_string(input))
                emit(cb, cb_data,
                     json_pack("{s:s, s:O?, s:i, s:O}", "type",
                               "response.custom_tool_call_input.delta", "item_id", item_id,
                               "output_index", (json_int_t)i, "delta", input),
                     &seq);
        }
        emit(cb, cb_data,
             json_pack("{s:s, s:i, s:O}", "type", "response.output_item.done", "output_index",
                       (json_int_t)i, "item", item),
             &seq);
    }
    const char *status = json_string_value(json_object_get(response, "status"));
    int incomplete = status && strcmp(status, "incomplete") == 0;
    emit(cb, cb_data,
         json_pack("{s:s, s:O}", "type", incomplete ? "response.incomplete" : "response.completed",
                   "response", response),
         &seq);
}
