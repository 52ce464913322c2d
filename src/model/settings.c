/* Model settings under the Agents SDK's ModelSettings names, mapped onto the request of the API
 * in use the way the SDK maps them (max_tokens is max_output_tokens on Responses, reasoning is
 * reasoning_effort on Chat, ...). The table says, for each field, its kind and its name on
 * each API; a field an API lacks is not sent there. */
#include <stdlib.h>
#include <string.h>

#include "model/model-internal.h"
#include "sbx/json.h"

enum kind {
    K_NUMBER,
    K_INT,
    K_BOOL,
    K_STRING,
    K_OBJECT,
    K_ARRAY,
    K_TOOL_CHOICE, /* a string, or {"server_label","name"} (an MCP tool) */
    K_STRINGS,     /* array of strings */
    K_STRING_MAP,  /* object of strings */
};

/* How a field reaches each API: sent under a name, handled by code below (SPECIAL), or not sent
 * (NULL: the SDK does not send it there either). */
#define SPECIAL ""

struct field {
    const char *name;
    enum kind kind;
    const char *responses;
    const char *chat;
    const char *const *values; /* the allowed strings of a K_STRING, or NULL */
};

static const char *const truncation_values[] = {"auto", "disabled", NULL};
static const char *const verbosity_values[] = {"low", "medium", "high", NULL};
static const char *const retention_values[] = {"in_memory", "24h", NULL};

static const struct field fields[] = {
        {"temperature", K_NUMBER, "temperature", "temperature", NULL},
        {"top_p", K_NUMBER, "top_p", "top_p", NULL},
        {"frequency_penalty", K_NUMBER, NULL, "frequency_penalty", NULL},
        {"presence_penalty", K_NUMBER, NULL, "presence_penalty", NULL},
        {"tool_choice", K_TOOL_CHOICE, SPECIAL, SPECIAL, NULL},
        {"parallel_tool_calls", K_BOOL, SPECIAL, SPECIAL, NULL},
        {"truncation", K_STRING, "truncation", NULL, truncation_values},
        {"max_tokens", K_INT, "max_output_tokens", "max_tokens", NULL},
        {"reasoning", K_OBJECT, "reasoning", SPECIAL, NULL},
        {"verbosity", K_STRING, SPECIAL, "verbosity", verbosity_values},
        {"metadata", K_STRING_MAP, "metadata", "metadata", NULL},
        {"store", K_BOOL, "store", "store", NULL},
        {"prompt_cache_retention", K_STRING, "prompt_cache_retention", "prompt_cache_retention",
         retention_values},
        {"include_usage", K_BOOL, NULL, SPECIAL, NULL},
        {"response_include", K_STRINGS, SPECIAL, NULL, NULL},
        {"top_logprobs", K_INT, SPECIAL, SPECIAL, NULL},
        {"extra_query", K_OBJECT, NULL, NULL, NULL},
        {"extra_body", K_OBJECT, SPECIAL, SPECIAL, NULL},
        {"extra_headers", K_OBJECT, NULL, NULL, NULL},
        {"extra_args", K_OBJECT, SPECIAL, SPECIAL, NULL},
        {"retry", K_OBJECT, NULL, NULL, NULL},
        {"context_management", K_ARRAY, "context_management", NULL, NULL},
        {"prompt_cache_options", K_OBJECT, "prompt_cache_options", "prompt_cache_options", NULL},
        {"preserve_raw_usage", K_BOOL, NULL, NULL, NULL},
        {"timeout", K_NUMBER, NULL, NULL, NULL},
};

/* API request fields (and the JS SDK's camelCase names) that users write where a ModelSettings
 * field is meant: the error names the field to use instead. */
static const char *const hints[][2] = {
        {"max_output_tokens", "max_tokens"},
        {"max_completion_tokens", "max_tokens"},
        {"maxTokens", "max_tokens"},
        {"reasoning_effort", "reasoning (as {effort: ...})"},
        {"text", "verbosity (the text format comes from output_schema)"},
        {"include", "response_include"},
        {"stream_options", "include_usage"},
        {"logprobs", "top_logprobs"},
        {"response_format", "the agent's output_schema"},
        {"topP", "top_p"},
        {"frequencyPenalty", "frequency_penalty"},
        {"presencePenalty", "presence_penalty"},
        {"toolChoice", "tool_choice"},
        {"parallelToolCalls", "parallel_tool_calls"},
        {"providerData", "extra_args"},
        {"prompt_cache_key", "extra_args (sent as it is)"},
};

#define MAX_HEADERS      64
#define MAX_HEADER_BYTES 8192
#define MAX_QUERY_BYTES  8192

static const struct field *find(const char *name)
{
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
        if (strcmp(fields[i].name, name) == 0)
            return &fields[i];
    return NULL;
}

static int unknown(const char *key, struct sbx_error *err)
{
    for (size_t i = 0; i < sizeof(hints) / sizeof(hints[0]); i++)
        if (strcmp(hints[i][0], key) == 0)
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "unknown model setting '%s': its ModelSettings name is %s", key,
                                 hints[i][1]);
    return sbx_error_set(err, SBX_E_INVAL, 0,
                         "unknown model setting '%s': not a ModelSettings field (a request field "
                         "the API takes as it is goes under extra_args)",
                         key);
}

static int in_list(const char *s, const char *const *list)
{
    for (; *list; list++)
        if (strcmp(s, *list) == 0)
            return 1;
    return 0;
}

static int all_strings(const json_t *v, int nulls_too)
{
    size_t i;
    const char *k;
    json_t *e;
    if (json_is_array(v)) {
        json_array_foreach((json_t *)v, i, e)
        {
            if (!json_is_string(e))
                return 0;
        }
        return 1;
    }
    json_object_foreach((json_t *)v, k, e)
    {
        if (!json_is_string(e) && !(nulls_too && json_is_null(e)))
            return 0;
    }
    return 1;
}

static int bad(const struct field *f, const char *what, struct sbx_error *err)
{
    return sbx_error_set(err, SBX_E_INVAL, 0, "model setting '%s' must be %s", f->name, what);
}

static int check_value(const struct field *f, const json_t *v, struct sbx_error *err)
{
    switch (f->kind) {
    case K_NUMBER:
        if (!json_is_number(v))
            return bad(f, "a number", err);
        if (strcmp(f->name, "timeout") == 0 && json_number_value(v) <= 0)
            return bad(f, "a number of seconds above 0", err);
        return 0;
    case K_INT:
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            return bad(f, "a whole number, 0 or more", err);
        if (strcmp(f->name, "max_tokens") == 0 && json_integer_value(v) < 1)
            return bad(f, "a whole number, 1 or more", err);
        return 0;
    case K_BOOL:
        return json_is_boolean(v) ? 0 : bad(f, "true or false", err);
    case K_STRING:
        if (!json_is_string(v) || (f->values && !in_list(json_string_value(v), f->values))) {
            char what[128] = "one of";
            size_t n = strlen(what);
            for (const char *const *p = f->values; p && *p && n + 8 < sizeof(what); p++)
                n += (size_t)snprintf(what + n, sizeof(what) - n, " '%s'", *p);
            return bad(f, what, err);
        }
        return 0;
    case K_OBJECT:
        return json_is_object(v) ? 0 : bad(f, "an object", err);
    case K_ARRAY:
        return json_is_array(v) ? 0 : bad(f, "a list", err);
    case K_TOOL_CHOICE:
        if (json_is_string(v) && json_string_length(v) > 0)
            return 0;
        if (json_is_object(v) && json_is_string(json_object_get(v, "server_label")) &&
            json_is_string(json_object_get(v, "name")))
            return 0;
        return bad(f, "a tool name, 'auto', 'required', 'none' or {server_label, name}", err);
    case K_STRINGS:
        return json_is_array(v) && all_strings(v, 0) ? 0 : bad(f, "a list of strings", err);
    case K_STRING_MAP:
        return json_is_object(v) && all_strings(v, 0) ? 0 : bad(f, "an object of strings", err);
    }
    return 0;
}

static int check_headers(const json_t *h, struct sbx_error *err)
{
    const char *k;
    json_t *v;
    if (!all_strings(h, 1))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "model setting 'extra_headers' must map header names to strings "
                             "(or null to leave a header out)");
    if (json_object_size(h) > MAX_HEADERS)
        return sbx_error_set(err, SBX_E_TOOBIG, 0,
                             "model setting 'extra_headers' has more than %d headers", MAX_HEADERS);
    json_object_foreach((json_t *)h, k, v)
    {
        size_t klen = strlen(k);
        int ok = klen > 0 && klen < MAX_HEADER_BYTES;
        for (const char *p = k; ok && *p; p++)
            ok = *p > 0x20 && *p < 0x7f && *p != ':';
        const char *s = json_string_value(v);
        if (ok && s) {
            size_t n = json_string_length(v);
            ok = n + klen < MAX_HEADER_BYTES && strlen(s) == n && !strpbrk(s, "\r\n");
        }
        if (!ok)
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "model setting 'extra_headers': header '%s' has a bad name or "
                                 "value (no ':', spaces or line breaks; under %d bytes)",
                                 k, MAX_HEADER_BYTES);
    }
    return 0;
}

static int check_retry(const json_t *r, struct sbx_error *err)
{
    static const char *const keys[] = {"max_retries", "backoff", NULL};
    static const char *const backoff_keys[] = {"initial_delay", "max_delay", "multiplier", "jitter",
                                               NULL};
    int rc = sbx_json_check_keys(r, keys, err);
    const json_t *n = json_object_get(r, "max_retries");
    const json_t *b = json_object_get(r, "backoff");
    if (rc == 0 && n && !json_is_null(n) && (!json_is_integer(n) || json_integer_value(n) < 0))
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "field 'max_retries' must be 0 or more");
    if (rc == 0 && b && !json_is_null(b)) {
        rc = json_is_object(b) ? sbx_json_check_keys(b, backoff_keys, err)
                               : sbx_error_set(err, SBX_E_INVAL, 0,
                                               "field 'backoff' must be an "
                                               "object");
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)b, k, v)
        {
            if (rc == 0 && !json_is_null(v) && strcmp(k, "jitter") != 0 && !json_is_number(v))
                rc = sbx_error_set(err, SBX_E_INVAL, 0, "field 'backoff.%s' must be a number", k);
        }
    }
    if (rc < 0)
        sbx_error_prefix(err, "model setting 'retry'");
    return rc;
}

int sbx_model_settings_check(const json_t *settings, struct sbx_error *err)
{
    const char *k;
    json_t *v;
    if (!settings)
        return 0;
    if (!json_is_object(settings))
        return sbx_error_set(err, SBX_E_INVAL, 0, "model settings must be an object");
    json_object_foreach((json_t *)settings, k, v)
    {
        const struct field *f = find(k);
        int rc;
        if (!f)
            return unknown(k, err);
        if (json_is_null(v))
            continue; /* None: the field is not set */
        if ((rc = check_value(f, v, err)) < 0)
            return rc;
        if (strcmp(k, "extra_headers") == 0 && (rc = check_headers(v, err)) < 0)
            return rc;
        if (strcmp(k, "retry") == 0 && (rc = check_retry(v, err)) < 0)
            return rc;
    }
    return 0;
}

static const json_t *get(const json_t *settings, const char *key)
{
    const json_t *v = json_object_get(settings, key);
    return json_is_null(v) ? NULL : v;
}

static int has_custom_tool(const json_t *tools, const char *name)
{
    size_t i;
    json_t *t;
    json_array_foreach((json_t *)tools, i, t)
    {
        const char *type = json_string_value(json_object_get(t, "type"));
        const char *n = json_string_value(json_object_get(t, "name"));
        if (type && n && strcmp(type, "custom") == 0 && strcmp(n, name) == 0)
            return 1;
    }
    return 0;
}

/* ModelSettings.tool_choice in the API's form: the three modes stay words, a name becomes the
 * function (or custom tool) of that name, {server_label, name} an MCP tool. */
json_t *sbx__model_tool_choice(const json_t *choice, const json_t *tools, int chat)
{
    if (json_is_object(choice)) {
        if (json_object_get(choice, "type"))
            return json_deep_copy(choice); /* already in the API's form */
        return json_pack("{s:s, s:O, s:O}", "type", "mcp", "server_label",
                         json_object_get(choice, "server_label"), "name",
                         json_object_get(choice, "name"));
    }
    const char *s = json_string_value(choice);
    if (!s)
        return NULL;
    if (strcmp(s, "auto") == 0 || strcmp(s, "required") == 0 || strcmp(s, "none") == 0)
        return json_string(s);
    if (chat)
        return json_pack("{s:s, s:{s:s}}", "type", "function", "function", "name", s);
    return json_pack("{s:s, s:s}", "type", has_custom_tool(tools, s) ? "custom" : "function",
                     "name", s);
}

/* Append the strings of add to the body's "include" list, each once. */
static void add_includes(json_t *body, const json_t *add, const char *one)
{
    json_t *inc = json_object_get(body, "include");
    if (!json_is_array(inc)) {
        inc = json_array();
        sbx_json_set(body, "include", inc);
    }
    size_t i, j;
    json_t *v, *w;
    json_t *all = json_array();
    if (add)
        json_array_extend(all, (json_t *)add);
    if (one)
        sbx_json_append(all, json_string(one));
    json_array_foreach(all, i, v)
    {
        int seen = 0;
        json_array_foreach(inc, j, w)
        {
            seen |= json_equal(v, w);
        }
        if (!seen)
            sbx_json_append(inc, json_incref(v));
    }
    json_decref(all);
    if (json_array_size(inc) == 0)
        json_object_del(body, "include");
}

static int merge_verbatim(json_t *body, const json_t *extra, const char *field,
                          struct sbx_error *err)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)extra, k, v)
    {
        if (json_object_get(body, k))
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "model setting '%s': field '%s' is already set (by sbx or by "
                                 "another setting)",
                                 field, k);
        sbx_json_set(body, k, json_deep_copy(v));
    }
    return 0;
}

/* The fields the table maps by name. */
static void map_named(json_t *body, const json_t *settings, int chat)
{
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        const struct field *f = &fields[i];
        const char *to = chat ? f->chat : f->responses;
        const json_t *v = get(settings, f->name);
        if (v && to && to[0] && !json_object_get(body, to))
            sbx_json_set(body, to, json_deep_copy(v));
    }
}

static void map_special(json_t *body, const json_t *settings, const json_t *tools, int chat)
{
    const json_t *v;
    if ((v = get(settings, "tool_choice")) && !json_object_get(body, "tool_choice")) {
        json_t *c = sbx__model_tool_choice(v, tools, chat);
        if (c)
            sbx_json_set(body, "tool_choice", c);
    }
    if ((v = get(settings, "parallel_tool_calls")) && json_array_size(tools) &&
        !json_object_get(body, "parallel_tool_calls"))
        sbx_json_set(body, "parallel_tool_calls", json_incref((json_t *)v));
    const json_t *top = get(settings, "top_logprobs");
    if (top)
        sbx_json_set(body, "top_logprobs", json_incref((json_t *)top));
    if (chat) {
        const json_t *effort = json_object_get(get(settings, "reasoning"), "effort");
        if (json_is_string(effort))
            sbx_json_set(body, "reasoning_effort", json_incref((json_t *)effort));
        json_t *so = json_object_get(body, "stream_options");
        if ((v = get(settings, "include_usage")) && json_is_object(so))
            sbx_json_set(so, "include_usage", json_incref((json_t *)v));
        /* Chat returns logprobs only when asked for them with top_logprobs. */
        json_t *extra = json_object_get(settings, "extra_args");
        if (top && !json_object_get(extra, "logprobs"))
            sbx_json_set(body, "logprobs", json_true());
        return;
    }
    if ((v = get(settings, "verbosity"))) {
        json_t *text = json_object_get(body, "text");
        if (!json_is_object(text)) {
            text = json_object();
            sbx_json_set(body, "text", text);
        }
        sbx_json_set(text, "verbosity", json_incref((json_t *)v));
    }
    const json_t *inc = get(settings, "response_include");
    if (inc || top)
        add_includes(body, inc, top ? "message.output_text.logprobs" : NULL);
}

int sbx__model_apply_settings(json_t *body, const json_t *settings, const json_t *tools, int chat,
                              struct sbx_error *err)
{
    int rc = sbx_model_settings_check(settings, err);
    if (rc < 0 || !settings)
        return rc;
    map_special(body, settings, tools, chat);
    map_named(body, settings, chat);
    const json_t *v;
    if ((v = get(settings, "extra_args")) && (rc = merge_verbatim(body, v, "extra_args", err)) < 0)
        return rc;
    if ((v = get(settings, "extra_body")) && (rc = merge_verbatim(body, v, "extra_body", err)) < 0)
        return rc;
    return 0;
}

static int query_escape(struct sbx_buf *b, const char *s, struct sbx_error *err)
{
    static const char hex[] = "0123456789ABCDEF";
    int rc = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p && rc == 0; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            strchr("-._~", *p)) {
            rc = sbx_buf_add(b, (const char *)p, 1, err);
        } else {
            char e[3] = {'%', hex[*p >> 4], hex[*p & 15]};
            rc = sbx_buf_add(b, e, 3, err);
        }
    }
    return rc;
}

static int build_query(const json_t *q, char **out, struct sbx_error *err)
{
    struct sbx_buf b;
    const char *k;
    json_t *v;
    int rc = 0;
    sbx_buf_init(&b, MAX_QUERY_BYTES);
    json_object_foreach((json_t *)q, k, v)
    {
        char *text = NULL;
        if (json_is_null(v))
            continue;
        text = json_is_string(v) ? sbx_xstrdup(json_string_value(v))
                                 : sbx_json_dumps(v, SBX_JSON_COMPACT);
        if (rc == 0)
            rc = sbx_buf_adds(&b, b.len ? "&" : "?", err);
        if (rc == 0)
            rc = query_escape(&b, k, err);
        if (rc == 0)
            rc = sbx_buf_adds(&b, "=", err);
        if (rc == 0)
            rc = query_escape(&b, text, err);
        free(text);
    }
    if (rc < 0) {
        sbx_buf_release(&b);
        sbx_error_prefix(err, "model setting 'extra_query'");
        return rc;
    }
    *out = b.len ? sbx_buf_detach(&b, NULL) : NULL;
    sbx_buf_release(&b);
    return 0;
}

int sbx__model_call_extras(const struct sbx_model *m, const json_t *settings,
                           struct sbx__model_extras *x, struct sbx_error *err)
{
    const json_t *v;
    memset(x, 0, sizeof(*x));
    sbx_strv_init(&x->headers);
    x->retries = m->retries;
    x->retry_base_ms = m->retry_base_ms;
    x->retry_max_ms = m->retry_max_ms;
    x->timeout_ms = m->timeout_ms;
    /* The organization and project, unless the settings' own headers name them. */
    const json_t *extra = settings ? get(settings, "extra_headers") : NULL;
    const char *ids[] = {m->org_header, m->project_header};
    for (size_t i = 0; i < 2; i++) {
        const char *colon = ids[i] ? strchr(ids[i], ':') : NULL;
        int named = 0;
        const char *k;
        json_t *h;
        json_object_foreach((json_t *)extra, k, h)
        {
            named |= colon && strlen(k) == (size_t)(colon - ids[i]) &&
                     strncasecmp(k, ids[i], (size_t)(colon - ids[i])) == 0;
        }
        if (ids[i] && !named)
            sbx_strv_push(&x->headers, ids[i]);
    }
    if (!settings)
        return 0;
    int rc;
    if ((v = get(settings, "extra_query")) && (rc = build_query(v, &x->query, err)) < 0)
        return rc;
    const char *k;
    json_t *h;
    json_object_foreach((json_t *)get(settings, "extra_headers"), k, h)
    {
        /* A null value leaves the header out, as the SDK's Omit does ("Name:" to libcurl). */
        sbx_strv_pushf(&x->headers, "%s:%s%s", k, h && json_is_string(h) ? " " : "",
                       json_is_string(h) ? json_string_value(h) : "");
    }
    const json_t *retry = get(settings, "retry");
    if ((v = get(retry, "max_retries")))
        x->retries = (int)(json_integer_value(v) > 100 ? 100 : json_integer_value(v));
    const json_t *backoff = get(retry, "backoff");
    if ((v = get(backoff, "initial_delay")) && json_number_value(v) >= 0)
        x->retry_base_ms = (int64_t)(json_number_value(v) * 1000);
    if ((v = get(backoff, "max_delay")) && json_number_value(v) >= 0)
        x->retry_max_ms = (int64_t)(json_number_value(v) * 1000);
    if ((v = get(settings, "timeout")) && json_number_value(v) * 1000 < (double)x->timeout_ms)
        x->timeout_ms = (int64_t)(json_number_value(v) * 1000) + 1;
    return 0;
}

void sbx__model_extras_release(struct sbx__model_extras *x)
{
    free(x->query);
    x->query = NULL;
    sbx_strv_release(&x->headers);
}
