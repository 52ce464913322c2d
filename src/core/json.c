#include <string.h>

#include "sbx/json.h"
#include "sbx/path.h"

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
        } else if (c == '{' || c == '[') {
            if (++depth > max) {
                max = depth;
                if (max > limit)
                    return limit + 1;
            }
        } else if ((c == '}' || c == ']') && depth > 0) {
            depth--;
        }
    }
    return max;
}

static int dump_cb(const char *buffer, size_t size, void *data)
{
    void **ctx = data;
    return sbx_buf_add(ctx[0], buffer, size, ctx[1]) == 0 ? 0 : -1;
}

static size_t dump_flags(int flags)
{
    size_t f = JSON_ENCODE_ANY | JSON_REAL_PRECISION(17);
    if (flags & SBX_JSON_PRETTY)
        f |= JSON_INDENT(2);
    else
        f |= JSON_COMPACT;
    if (flags & SBX_JSON_SORTED)
        f |= JSON_SORT_KEYS;
    return f;
}

int sbx_json_dump(const json_t *v, int flags, struct sbx_buf *out, struct sbx_error *err)
{
    struct sbx_error local = SBX_ERROR_INIT;
    void *ctx[2] = {out, &local};
    size_t before = out->len;
    if (json_dump_callback(v, dump_cb, ctx, dump_flags(flags)) != 0) {
        sbx_buf_setlen(out, before);
        if (local.code != SBX_OK)
            return sbx_error_copy(err, &local);
        return sbx_error_set(err, SBX_E_INVAL, 0, "cannot serialise json value");
    }
    return 0;
}

char *sbx_json_dumps(const json_t *v, int flags)
{
    struct sbx_buf b;
    sbx_buf_init(&b, SBX_BUF_NOLIMIT);
    if (sbx_json_dump(v, flags, &b, NULL) != 0)
        SBX_BUG("cannot serialise json value");
    return sbx_buf_detach(&b, NULL);
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

/* Look up key; 1 when present (and not null), 0 when absent or null and optional, <0 error.
 * *v is set on every path: the compiler cannot tell that sbx_error_set returns a negative
 * code, so the callers' "rc <= 0" test does not prove to it that v was written. */
static int lookup(const json_t *obj, const char *key, int required, json_t **v,
                  struct sbx_error *err)
{
    *v = NULL;
    if (!json_is_object(obj))
        return sbx_error_set(err, SBX_E_INVAL, 0, "expected an object, not %s",
                             obj ? sbx_json_typename(obj) : "nothing");
    *v = json_object_get(obj, key);
    if (*v && !json_is_null(*v))
        return 1;
    if (required)
        return sbx_error_set(err, SBX_E_INVAL, 0, "missing required field '%s'", key);
    return 0;
}

static int wrong_type(const char *key, const char *want, const json_t *v, struct sbx_error *err)
{
    return sbx_error_set(err, SBX_E_INVAL, 0, "field '%s' must be %s, not %s", key, want,
                         sbx_json_typename(v));
}

int sbx_json_get_string(const json_t *obj, const char *key, int required, const char **out,
                        struct sbx_error *err)
{
    json_t *v;
    int rc = lookup(obj, key, required, &v, err);
    if (rc <= 0)
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
    int rc = lookup(obj, key, required, &v, err);
    if (rc <= 0)
        return rc;
    if (!json_is_integer(v))
        return wrong_type(key, "an integer", v, err);
    *out = (int64_t)json_integer_value(v);
    return 0;
}

int sbx_json_get_number(const json_t *obj, const char *key, int required, double *out,
                        struct sbx_error *err)
{
    json_t *v;
    int rc = lookup(obj, key, required, &v, err);
    if (rc <= 0)
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
    int rc = lookup(obj, key, required, &v, err);
    if (rc <= 0)
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
    int rc = lookup(obj, key, required, &v, err);
    if (rc <= 0)
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
    int rc = lookup(obj, key, required, &v, err);
    if (rc <= 0)
        return rc;
    if (!json_is_array(v))
        return wrong_type(key, "an array", v, err);
    *out = v;
    return 0;
}

int sbx_json_get_text(const json_t *obj, const char *key, int flags, const char **out, size_t *len,
                      struct sbx_error *err)
{
    json_t *v;
    int rc = lookup(obj, key, flags & SBX_JSON_REQUIRED, &v, err);
    if (rc <= 0)
        return rc;
    if (!json_is_string(v))
        return wrong_type(key, "a string", v, err);
    const char *s = json_string_value(v);
    size_t n = json_string_length(v);
    if (memchr(s, '\0', n))
        return sbx_error_set(err, SBX_E_INVAL, 0, "field '%s' must not contain a NUL byte", key);
    if (!(flags & SBX_JSON_ALLOW_CONTROL) && sbx_text_has_control(s, n))
        return sbx_error_set(err, SBX_E_INVAL, 0, "field '%s' must not contain control characters",
                             key);
    if ((flags & SBX_JSON_NONEMPTY) && n == 0)
        return sbx_error_set(err, SBX_E_INVAL, 0, "field '%s' must not be empty", key);
    *out = s;
    if (len)
        *len = n;
    return 0;
}

int sbx_json_get_text_array(const json_t *obj, const char *key, json_t **out, struct sbx_error *err)
{
    json_t *a = NULL;
    int rc = sbx_json_get_array(obj, key, 0, &a, err);
    if (rc < 0 || !a)
        return rc;
    size_t i;
    json_t *x;
    json_array_foreach(a, i, x)
    {
        if (!json_is_string(x) || sbx_text_has_control(json_string_value(x), json_string_length(x)))
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "field '%s' must be an array of strings without control "
                                 "characters",
                                 key);
    }
    *out = a;
    return 0;
}

int sbx_json_check_keys(const json_t *obj, const char *const *allowed, struct sbx_error *err)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v)
    {
        const char *const *a = allowed;
        while (*a && strcmp(*a, key) != 0)
            a++;
        if (!*a)
            return sbx_error_set(err, SBX_E_INVAL, 0, "unknown field '%s'", key);
    }
    return 0;
}

void sbx_json_set(json_t *obj, const char *key, json_t *take_value)
{
    if (!take_value || json_object_set_new(obj, key, take_value) != 0)
        SBX_BUG("cannot set json field '%s'", key);
}

void sbx_json_append(json_t *arr, json_t *take_value)
{
    if (!take_value || json_array_append_new(arr, take_value) != 0)
        SBX_BUG("cannot append to json array");
}

json_t *sbx_json_strn(const char *s, size_t n)
{
    json_t *v;
    if (sbx_utf8_valid(s, n) && !memchr(s, '\0', n)) {
        v = json_stringn_nocheck(s, n);
    } else {
        /* Replace each byte of an invalid sequence (and NUL) with U+FFFD. */
        struct sbx_buf b;
        sbx_buf_init(&b, SBX_BUF_NOLIMIT);
        size_t i = 0;
        while (i < n) {
            size_t j = i + 1;
            unsigned char c = (unsigned char)s[i];
            if (c >= 0xc0)
                while (j < n && j < i + 4 && ((unsigned char)s[j] & 0xc0) == 0x80)
                    j++;
            if (c != 0 && sbx_utf8_valid(s + i, j - i)) {
                if (sbx_buf_add(&b, s + i, j - i, NULL) != 0)
                    SBX_BUG("unbounded buffer refused data");
                i = j;
            } else {
                if (sbx_buf_add(&b, "\xef\xbf\xbd", 3, NULL) != 0)
                    SBX_BUG("unbounded buffer refused data");
                i++;
            }
        }
        v = json_stringn_nocheck(b.data, b.len);
        sbx_buf_release(&b);
    }
    if (!v)
        SBX_BUG("out of memory creating a json string");
    return v;
}

json_t *sbx_json_str(const char *s)
{
    return sbx_json_strn(s, strlen(s));
}
