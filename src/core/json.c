/* Stand-in for the core JSON helpers until the core module lands on main: the subset of
 * include/sbx/json.h the model and agent layers use, with the documented limits. */
#include <string.h>

#include "sbx/json.h"

int sbx_json_scan_depth(const char *data, size_t len, int limit)
{
    int depth = 0, max = 0, in_str = 0;
    for (size_t i = 0; i < len; i++) {
        char c = data[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = 0;
            continue;
        }
        if (c == '"') {
            in_str = 1;
        } else if (c == '[' || c == '{') {
            if (++depth > max) {
                max = depth;
                if (max > limit)
                    return limit + 1;
            }
        } else if (c == ']' || c == '}') {
            depth--;
        }
    }
    return max;
}

int sbx_json_parse(const char *data, size_t len, const struct sbx_json_limits *lim, json_t **out,
                   struct sbx_error *err)
{
    size_t max_bytes = lim && lim->max_bytes ? lim->max_bytes : SBX_JSON_DEFAULT_MAX_BYTES;
    int max_depth = lim && lim->max_depth ? lim->max_depth : SBX_JSON_DEFAULT_MAX_DEPTH;
    if (len > max_bytes)
        return sbx_error_set(err, SBX_E_TOOBIG, 0,
                             "json text of %zu bytes exceeds the limit of %zu", len, max_bytes);
    if (sbx_json_scan_depth(data, len, max_depth) > max_depth)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "json nesting exceeds the depth limit of %d",
                             max_depth);
    json_error_t je;
    json_t *v = json_loadb(data, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
    if (!v)
        return sbx_error_set(err, SBX_E_PARSE, 0, "invalid json at line %d column %d: %s", je.line,
                             je.column, je.text);
    *out = v;
    return 0;
}

char *sbx_json_dumps(const json_t *v, int flags)
{
    size_t jf = JSON_ENCODE_ANY;
    if (flags & SBX_JSON_PRETTY)
        jf |= JSON_INDENT(2);
    else
        jf |= JSON_COMPACT;
    if (flags & SBX_JSON_SORTED)
        jf |= JSON_SORT_KEYS;
    char *s = json_dumps(v, jf);
    if (!s)
        SBX_BUG("json_dumps failed");
    return s;
}

int sbx_json_dump(const json_t *v, int flags, struct sbx_buf *out, struct sbx_error *err)
{
    char *s = sbx_json_dumps(v, flags);
    int rc = sbx_buf_adds(out, s, err);
    free(s);
    return rc;
}

const char *sbx_json_typename(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "object";
    case JSON_ARRAY:
        return "array";
    case JSON_STRING:
        return "string";
    case JSON_INTEGER:
        return "integer";
    case JSON_REAL:
        return "number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "boolean";
    case JSON_NULL:
        return "null";
    }
    return "unknown";
}

static int get_field(const json_t *obj, const char *key, int required, json_t **v,
                     struct sbx_error *err)
{
    *v = json_object_get(obj, key);
    if (!*v && required)
        return sbx_error_set(err, SBX_E_INVAL, 0, "missing required field '%s'", key);
    return 0;
}

static int wrong_type(const char *key, const char *want, const json_t *v, struct sbx_error *err)
{
    return sbx_error_set(err, SBX_E_INVAL, 0, "field '%s' must be %s, not %s %s", key, want,
                         json_is_integer(v) || json_is_array(v) || json_is_object(v) ? "an" : "a",
                         sbx_json_typename(v));
}

int sbx_json_get_string(const json_t *obj, const char *key, int required, const char **out,
                        struct sbx_error *err)
{
    json_t *v;
    int rc = get_field(obj, key, required, &v, err);
    if (rc < 0 || !v)
        return rc;
    if (!json_is_string(v))
        return wrong_type(key, "a string", v, err);
    *out = json_string_value(v);
    return 0;
}

int sbx_json_get_int(const json_t *obj, const char *key, int required, int64_t *out,
                     struct sbx_error *err)
{
    json_t *v;
    int rc = get_field(obj, key, required, &v, err);
    if (rc < 0 || !v)
        return rc;
    if (!json_is_integer(v))
        return wrong_type(key, "an integer", v, err);
    *out = json_integer_value(v);
    return 0;
}

int sbx_json_get_number(const json_t *obj, const char *key, int required, double *out,
                        struct sbx_error *err)
{
    json_t *v;
    int rc = get_field(obj, key, required, &v, err);
    if (rc < 0 || !v)
        return rc;
    if (!json_is_number(v))
        return wrong_type(key, "a number", v, err);
    *out = json_number_value(v);
    return 0;
}

int sbx_json_get_bool(const json_t *obj, const char *key, int required, int *out,
                      struct sbx_error *err)
{
    json_t *v;
    int rc = get_field(obj, key, required, &v, err);
    if (rc < 0 || !v)
        return rc;
    if (!json_is_boolean(v))
        return wrong_type(key, "a boolean", v, err);
    *out = json_is_true(v);
    return 0;
}

int sbx_json_get_object(const json_t *obj, const char *key, int required, json_t **out,
                        struct sbx_error *err)
{
    json_t *v;
    int rc = get_field(obj, key, required, &v, err);
    if (rc < 0 || !v)
        return rc;
    if (!json_is_object(v))
        return wrong_type(key, "an object", v, err);
    *out = v;
    return 0;
}

int sbx_json_get_array(const json_t *obj, const char *key, int required, json_t **out,
                       struct sbx_error *err)
{
    json_t *v;
    int rc = get_field(obj, key, required, &v, err);
    if (rc < 0 || !v)
        return rc;
    if (!json_is_array(v))
        return wrong_type(key, "an array", v, err);
    *out = v;
    return 0;
}

int sbx_json_check_keys(const json_t *obj, const char *const *allowed, struct sbx_error *err)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)obj, k, v)
    {
        size_t i = 0;
        while (allowed[i] && strcmp(allowed[i], k) != 0)
            i++;
        if (!allowed[i])
            return sbx_error_set(err, SBX_E_INVAL, 0, "unknown field '%s'", k);
    }
    return 0;
}

void sbx_json_set(json_t *obj, const char *key, json_t *take_value)
{
    if (!take_value || json_object_set_new(obj, key, take_value) != 0)
        SBX_BUG("json_object_set_new('%s') failed", key);
}

void sbx_json_append(json_t *arr, json_t *take_value)
{
    if (!take_value || json_array_append_new(arr, take_value) != 0)
        SBX_BUG("json_array_append_new failed");
}

json_t *sbx_json_str(const char *s)
{
    return sbx_json_strn(s, strlen(s));
}

json_t *sbx_json_strn(const char *s, size_t n)
{
    json_t *v = json_stringn(s, n);
    if (v)
        return v;
    /* Invalid UTF-8: replace offending bytes with U+FFFD. */
    char *fixed = sbx_xmalloc(n * 3 + 1);
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t l = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        json_t *probe = l && i + l <= n ? json_stringn(s + i, l) : NULL;
        if (probe && c != 0) {
            memcpy(fixed + o, s + i, l);
            o += l;
            i += l;
        } else {
            memcpy(fixed + o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
        }
        json_decref(probe);
    }
    v = json_stringn(fixed, o);
    free(fixed);
    if (!v)
        SBX_BUG("json_stringn failed after repair");
    return v;
}
