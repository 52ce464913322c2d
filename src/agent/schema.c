/* JSON Schema subset: strict transform and validation. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "agent/schema.h"
#include "sbx/json.h"

#define MAX_DEPTH 64

/* Closes s if it is an object schema (by its type or by having properties), as strict mode
 * requires: 1 if it is one, 0 if not, -code if it allows additional properties. */
static int close_object(json_t *s, json_t *props, struct sbx_error *err)
{
    const char *type = json_string_value(json_object_get(s, "type"));
    if (!(type && strcmp(type, "object") == 0) && !json_is_object(props))
        return 0;
    json_t *ap = json_object_get(s, "additionalProperties");
    if (ap && !json_is_false(ap))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "strict schemas need 'additionalProperties' to be false");
    sbx_json_set(s, "additionalProperties", json_false());
    return 1;
}

static int strictify(json_t *s, int depth, struct sbx_error *err)
{
    if (depth > MAX_DEPTH)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "schema nests deeper than %d", MAX_DEPTH);
    if (!json_is_object(s))
        return 0;
    json_t *props = json_object_get(s, "properties");
    int rc = close_object(s, props, err);
    if (rc < 0)
        return rc;
    if (rc) {
        json_t *req = json_array();
        const char *k;
        json_t *v;
        json_object_foreach(props, k, v)
        {
            sbx_json_append(req, sbx_json_str(k));
        }
        sbx_json_set(s, "required", req);
        if (!props)
            sbx_json_set(s, "properties", json_object());
        json_object_foreach(json_object_get(s, "properties"), k, v)
        {
            if ((rc = strictify(v, depth + 1, err)) < 0)
                return rc;
        }
    }
    static const char *const maps[] = {"$defs", "definitions"};
    for (size_t i = 0; i < 2; i++) {
        const char *k;
        json_t *v;
        json_object_foreach(json_object_get(s, maps[i]), k, v)
        {
            if ((rc = strictify(v, depth + 1, err)) < 0)
                return rc;
        }
    }
    static const char *const lists[] = {"anyOf", "allOf", "oneOf"};
    for (size_t i = 0; i < 3; i++) {
        size_t j;
        json_t *v;
        json_array_foreach(json_object_get(s, lists[i]), j, v)
        {
            if ((rc = strictify(v, depth + 1, err)) < 0)
                return rc;
        }
    }
    json_t *items = json_object_get(s, "items");
    if (items && (rc = strictify(items, depth + 1, err)) < 0)
        return rc;
    return 0;
}

int sbx__schema_strict(const json_t *schema, json_t **out, struct sbx_error *err)
{
    json_t *s = schema ? json_deep_copy(schema) : json_object();
    if (!json_is_object(s)) {
        json_decref(s);
        return sbx_error_set(err, SBX_E_INVAL, 0, "a schema must be an object");
    }
    if (json_object_size(s) == 0)
        sbx_json_set(s, "type", sbx_json_str("object"));
    int rc = strictify(s, 0, err);
    if (rc < 0) {
        json_decref(s);
        return rc;
    }
    *out = s;
    return 0;
}

static const char *const dropped_keywords[] = {
        "default",          "minLength",        "maxLength",  "minimum",  "maximum",
        "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minItems", "maxItems",
        "pattern",          "format",           "title",
};

/* Let a property schema also accept null, as strict mode spells an optional field. */
static void nullable(json_t *p)
{
    json_t *type = json_object_get(p, "type");
    json_t *any = json_object_get(p, "anyOf");
    size_t i;
    json_t *v;
    if (json_is_string(type)) {
        if (strcmp(json_string_value(type), "null") != 0)
            sbx_json_set(p, "type", json_pack("[O, s]", type, "null"));
        return;
    }
    if (json_is_array(type)) {
        json_array_foreach(type, i, v)
        {
            if (json_is_string(v) && strcmp(json_string_value(v), "null") == 0)
                return;
        }
        sbx_json_append(type, sbx_json_str("null"));
        return;
    }
    if (json_is_array(any)) {
        json_array_foreach(any, i, v)
        {
            const char *t = json_string_value(json_object_get(v, "type"));
            if (t && strcmp(t, "null") == 0)
                return;
        }
        sbx_json_append(any, json_pack("{s:s}", "type", "null"));
        return;
    }
    if (json_object_get(p, "$ref")) {
        json_t *ref = json_deep_copy(p);
        json_object_clear(p);
        sbx_json_set(p, "anyOf", json_pack("[o, {s:s}]", ref, "type", "null"));
    }
    /* Anything else (no type at all) already accepts null. */
}

/* sent: the model's form; else the checking form (see sbx__schema_tool_strict). */
static int tool_strict(json_t *s, int sent, int depth, struct sbx_error *err)
{
    if (depth > MAX_DEPTH)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "schema nests deeper than %d", MAX_DEPTH);
    if (!json_is_object(s))
        return 0;
    const char *k;
    json_t *v;
    json_t *props = json_object_get(s, "properties");
    int rc = close_object(s, props, err);
    if (rc < 0)
        return rc;
    if (rc) {
        if (!props)
            sbx_json_set(s, "properties", (props = json_object()));
        json_t *req = json_object_get(s, "required");
        json_t *all = json_array();
        json_object_foreach(props, k, v)
        {
            /* Without a "required" list every property is mandatory, as strict mode reads it. */
            int mandatory = !json_is_array(req);
            size_t i;
            json_t *r;
            json_array_foreach(req, i, r)
            {
                mandatory |= json_is_string(r) && strcmp(json_string_value(r), k) == 0;
            }
            if (!mandatory && json_is_object(v))
                nullable(v);
            sbx_json_append(all, sbx_json_str(k));
            if ((rc = tool_strict(v, sent, depth + 1, err)) < 0) {
                json_decref(all);
                return rc;
            }
        }
        if (sent || !json_is_array(req))
            sbx_json_set(s, "required", all);
        else
            json_decref(all);
    }
    if (sent)
        for (size_t i = 0; i < SBX_ARRAY_LEN(dropped_keywords); i++)
            json_object_del(s, dropped_keywords[i]);
    static const char *const maps[] = {"$defs", "definitions"};
    for (size_t i = 0; i < 2; i++) {
        json_object_foreach(json_object_get(s, maps[i]), k, v)
        {
            if ((rc = tool_strict(v, sent, depth + 1, err)) < 0)
                return rc;
        }
    }
    static const char *const lists[] = {"anyOf", "allOf", "oneOf"};
    for (size_t i = 0; i < 3; i++) {
        size_t j;
        json_array_foreach(json_object_get(s, lists[i]), j, v)
        {
            if ((rc = tool_strict(v, sent, depth + 1, err)) < 0)
                return rc;
        }
    }
    json_t *items = json_object_get(s, "items");
    if (items && (rc = tool_strict(items, sent, depth + 1, err)) < 0)
        return rc;
    return 0;
}

int sbx__schema_tool_strict(const json_t *schema, json_t **sent, json_t **check,
                            struct sbx_error *err)
{
    json_t *forms[2];
    if (schema && !json_is_object(schema))
        return sbx_error_set(err, SBX_E_INVAL, 0, "a schema must be an object");
    for (int i = 0; i < 2; i++) {
        forms[i] = schema && json_object_size(schema) ? json_deep_copy(schema)
                                                      : json_pack("{s:s}", "type", "object");
        int rc = tool_strict(forms[i], i == 0, 0, err);
        if (rc < 0) {
            json_decref(forms[0]);
            if (i == 1)
                json_decref(forms[1]);
            return rc;
        }
    }
    *sent = forms[0];
    *check = forms[1];
    return 0;
}

struct vctx {
    const json_t *root;
    char path[512];
    struct sbx_error *err;
};

static int fail(struct vctx *c, const char *fmt, ...) SBX_PRINTF(2, 3);
static int fail(struct vctx *c, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return sbx_error_set(c->err, SBX_E_INVAL, 0, "%s: %s", c->path[0] ? c->path : "$", msg);
}

/* A whole number, without libm's floor: every double from 2^52 up is whole, and below that the
 * conversion to an integer is exact. */
static int is_whole(double x)
{
    return isfinite(x) && (fabs(x) >= 0x1p52 || x == (double)(long long)x);
}

static int type_matches(const char *t, const json_t *v)
{
    if (strcmp(t, "object") == 0)
        return json_is_object(v);
    if (strcmp(t, "array") == 0)
        return json_is_array(v);
    if (strcmp(t, "string") == 0)
        return json_is_string(v);
    if (strcmp(t, "integer") == 0)
        return json_is_integer(v) || (json_is_real(v) && is_whole(json_real_value(v)));
    if (strcmp(t, "number") == 0)
        return json_is_number(v);
    if (strcmp(t, "boolean") == 0)
        return json_is_boolean(v);
    if (strcmp(t, "null") == 0)
        return json_is_null(v);
    return 1;
}

static size_t utf8_len(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        if (((unsigned char)*s & 0xC0) != 0x80)
            n++;
    return n;
}

static int validate(struct vctx *c, const json_t *s, const json_t *v, int depth);

static int with_path(struct vctx *c, const char *key, size_t idx, const json_t *s, const json_t *v,
                     int depth)
{
    size_t len = strlen(c->path);
    if (len == 0) {
        c->path[0] = '$';
        c->path[1] = '\0';
    }
    size_t base = strlen(c->path);
    if (key)
        snprintf(c->path + base, sizeof(c->path) - base, ".%s", key);
    else
        snprintf(c->path + base, sizeof(c->path) - base, "[%zu]", idx);
    int rc = validate(c, s, v, depth + 1);
    if (rc == 0)
        c->path[len] = '\0';
    return rc;
}

static const json_t *resolve_ref(struct vctx *c, const char *ref)
{
    static const char *const maps[] = {"$defs", "definitions"};
    for (size_t i = 0; i < 2; i++) {
        size_t n = strlen(maps[i]);
        if (strncmp(ref, "#/", 2) == 0 && strncmp(ref + 2, maps[i], n) == 0 && ref[2 + n] == '/')
            return json_object_get(json_object_get(c->root, maps[i]), ref + 3 + n);
    }
    if (strcmp(ref, "#") == 0)
        return c->root;
    return NULL;
}

/* "type", "enum" and "const". */
static int check_kind(struct vctx *c, const json_t *s, const json_t *v)
{
    json_t *type = json_object_get(s, "type");
    if (json_is_string(type) && !type_matches(json_string_value(type), v))
        return fail(c, "expected %s, got %s", json_string_value(type), sbx_json_typename(v));
    if (json_is_array(type)) {
        size_t i;
        json_t *t;
        int any = 0;
        json_array_foreach(type, i, t)
        {
            if (json_is_string(t) && type_matches(json_string_value(t), v))
                any = 1;
        }
        if (!any)
            return fail(c, "%s is not one of the allowed types", sbx_json_typename(v));
    }
    json_t *en = json_object_get(s, "enum");
    if (json_is_array(en)) {
        size_t i;
        json_t *e;
        int found = 0;
        json_array_foreach(en, i, e)
        {
            if (json_equal(e, (json_t *)v))
                found = 1;
        }
        if (!found) {
            char *dump = sbx_json_dumps(v, SBX_JSON_COMPACT);
            int rc = fail(c, "%.100s is not one of the allowed values", dump);
            free(dump);
            return rc;
        }
    }
    json_t *cst = json_object_get(s, "const");
    if (cst && !json_equal(cst, (json_t *)v))
        return fail(c, "value differs from the required constant");
    return 0;
}

/* The bounds of a number. */
static int check_number(struct vctx *c, const json_t *s, double d)
{
    json_t *b;
    char num[64];
    if ((b = json_object_get(s, "minimum")) && json_is_number(b) && d < json_number_value(b)) {
        snprintf(num, sizeof(num), "%g", json_number_value(b));
        return fail(c, "must be at least %s", num);
    }
    if ((b = json_object_get(s, "maximum")) && json_is_number(b) && d > json_number_value(b)) {
        snprintf(num, sizeof(num), "%g", json_number_value(b));
        return fail(c, "must be at most %s", num);
    }
    if ((b = json_object_get(s, "exclusiveMinimum")) && json_is_number(b) &&
        d <= json_number_value(b)) {
        snprintf(num, sizeof(num), "%g", json_number_value(b));
        return fail(c, "must be greater than %s", num);
    }
    if ((b = json_object_get(s, "exclusiveMaximum")) && json_is_number(b) &&
        d >= json_number_value(b)) {
        snprintf(num, sizeof(num), "%g", json_number_value(b));
        return fail(c, "must be less than %s", num);
    }
    return 0;
}

/* The length of a string, in characters. */
static int check_string(struct vctx *c, const json_t *s, const char *str)
{
    size_t n = utf8_len(str);
    json_int_t mn = json_integer_value(json_object_get(s, "minLength"));
    json_t *mx = json_object_get(s, "maxLength");
    if (mn > 0 && n < (size_t)mn)
        return fail(c, "string is shorter than the minimum length");
    if (json_is_integer(mx) && n > (size_t)json_integer_value(mx))
        return fail(c, "string is longer than the maximum length");
    return 0;
}

/* The item count of an array, then each item against "items". */
static int check_array(struct vctx *c, const json_t *s, const json_t *v, int depth)
{
    json_int_t mn = json_integer_value(json_object_get(s, "minItems"));
    json_t *mx = json_object_get(s, "maxItems");
    if (mn > 0 && json_array_size(v) < (size_t)mn)
        return fail(c, "array has fewer items than the minimum");
    if (json_is_integer(mx) && json_array_size(v) > (size_t)json_integer_value(mx))
        return fail(c, "array has more items than the maximum");
    json_t *items = json_object_get(s, "items");
    if (!json_is_object(items))
        return 0;
    size_t i;
    json_t *e;
    int rc;
    json_array_foreach(v, i, e)
    {
        if ((rc = with_path(c, NULL, i, items, e, depth)) < 0)
            return rc;
    }
    return 0;
}

/* The required properties of an object, then each member against "properties" or
 * "additionalProperties". */
static int check_object(struct vctx *c, const json_t *s, const json_t *v, int depth)
{
    json_t *props = json_object_get(s, "properties");
    size_t i;
    json_t *r;
    int rc;
    json_array_foreach(json_object_get(s, "required"), i, r)
    {
        const char *k = json_string_value(r);
        if (k && !json_object_get(v, k))
            return fail(c, "missing required property '%s'", k);
    }
    json_t *ap = json_object_get(s, "additionalProperties");
    const char *k;
    json_t *e;
    json_object_foreach((json_t *)v, k, e)
    {
        json_t *ps = json_object_get(props, k);
        if (ps) {
            if ((rc = with_path(c, k, 0, ps, e, depth)) < 0)
                return rc;
        } else if (json_is_false(ap)) {
            return fail(c, "unexpected property '%s'", k);
        } else if (json_is_object(ap)) {
            if ((rc = with_path(c, k, 0, ap, e, depth)) < 0)
                return rc;
        }
    }
    return 0;
}

/* "allOf" (every schema), then "anyOf" and "oneOf" (at least one: a oneOf matched by two is
 * accepted too). */
static int check_combined(struct vctx *c, const json_t *s, const json_t *v, int depth)
{
    size_t i;
    json_t *sub;
    int rc;
    json_array_foreach(json_object_get(s, "allOf"), i, sub)
    {
        if ((rc = validate(c, sub, v, depth + 1)) < 0)
            return rc;
    }
    static const char *const alts[] = {"anyOf", "oneOf"};
    for (size_t a = 0; a < 2; a++) {
        json_t *list = json_object_get(s, alts[a]);
        if (!json_is_array(list) || json_array_size(list) == 0)
            continue;
        int matched = 0;
        char saved[sizeof(c->path)];
        memcpy(saved, c->path, sizeof(saved));
        json_array_foreach(list, i, sub)
        {
            if (validate(c, sub, v, depth + 1) == 0) {
                matched = 1;
                break;
            }
            memcpy(c->path, saved, sizeof(saved));
        }
        if (!matched)
            return fail(c, "value matches none of the alternatives in %s", alts[a]);
    }
    return 0;
}

static int validate(struct vctx *c, const json_t *s, const json_t *v, int depth)
{
    int rc;
    if (depth > MAX_DEPTH)
        return sbx_error_set(c->err, SBX_E_TOOBIG, 0, "value nests deeper than %d", MAX_DEPTH);
    if (json_is_false(s))
        return fail(c, "no value is allowed here");
    if (!json_is_object(s))
        return 0;
    const char *ref = json_string_value(json_object_get(s, "$ref"));
    if (ref) {
        const json_t *target = resolve_ref(c, ref);
        if (!target)
            return fail(c, "schema reference '%s' cannot be resolved", ref);
        if ((rc = validate(c, target, v, depth + 1)) < 0)
            return rc;
    }
    if ((rc = check_kind(c, s, v)) < 0 ||
        (json_is_number(v) && (rc = check_number(c, s, json_number_value(v))) < 0) ||
        (json_is_string(v) && (rc = check_string(c, s, json_string_value(v))) < 0) ||
        (json_is_array(v) && (rc = check_array(c, s, v, depth)) < 0) ||
        (json_is_object(v) && (rc = check_object(c, s, v, depth)) < 0))
        return rc;
    return check_combined(c, s, v, depth);
}

int sbx__schema_validate(const json_t *schema, const json_t *value, struct sbx_error *err)
{
    struct vctx c = {.root = schema, .err = err};
    return validate(&c, schema, value, 0);
}
