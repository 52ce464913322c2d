/* Tools: construction of function, custom and item tools, and refcounting. */
#include <string.h>

#include "agent/agent-internal.h"
#include "agent/schema.h"
#include "sbx/json.h"

char *sbx__tool_safe_name(const char *s, int lower)
{
    size_t n = strlen(s);
    if (n > 64)
        n = 64;
    char *out = sbx_xstrndup(s, n);
    for (char *p = out; *p; p++) {
        char c = *p;
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '_' || c == '-';
        if (!ok)
            *p = '_';
        else if (lower && c >= 'A' && c <= 'Z')
            *p = (char)(c - 'A' + 'a');
    }
    return out;
}

static int check_name(const char *name, struct sbx_error *err)
{
    if (!name || !name[0])
        return sbx_error_set(err, SBX_E_INVAL, 0, "tool name must not be empty");
    size_t n = strlen(name);
    char *safe = sbx__tool_safe_name(name, 0);
    int ok = n <= 64 && strcmp(safe, name) == 0;
    free(safe);
    if (!ok)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "tool name '%.80s' must be 1 to 64 letters, digits, '_' or '-'", name);
    return 0;
}

static struct sbx_tool *tool_alloc(enum sbx__tool_kind kind, const char *name, void *data,
                                   void (*free_data)(void *))
{
    struct sbx_tool *t = sbx_xcalloc(1, sizeof(*t));
    atomic_init(&t->refs, 1);
    t->kind = kind;
    t->name = sbx_xstrdup(name);
    t->data = data;
    t->free_data = free_data;
    return t;
}

int sbx_tool_new_function(const struct sbx_function_tool *spec, struct sbx_tool **out,
                          struct sbx_error *err)
{
    json_t *schema = NULL, *sent = NULL;
    int rc = check_name(spec->name, err);
    if (rc == 0 && !spec->fn)
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "tool '%s' needs a callback", spec->name);
    if (rc == 0 && spec->parameters && !json_is_object(spec->parameters))
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "parameters of tool '%s' must be an object schema",
                           spec->name);
    if (rc == 0) {
        if (spec->strict) {
            rc = sbx__schema_tool_strict(spec->parameters, &sent, &schema, err);
        } else {
            schema = spec->parameters ? json_deep_copy(spec->parameters)
                                      : json_pack("{s:s, s:{}}", "type", "object", "properties");
        }
        if (rc < 0)
            sbx_error_prefix(err, "tool '%s'", spec->name);
    }
    if (rc < 0) {
        if (spec->free_data)
            spec->free_data(spec->data);
        return rc;
    }
    struct sbx_tool *t = tool_alloc(SBX__TOOL_FUNCTION, spec->name, spec->data, spec->free_data);
    t->item_type = sbx_xstrdup("function_call");
    t->fn = spec->fn;
    t->approval_fn = spec->needs_approval;
    t->schema = schema;
    t->definition = json_pack("{s:s, s:s, s:O, s:b}", "type", "function", "name", spec->name,
                              "parameters", sent ? sent : schema, "strict", spec->strict ? 1 : 0);
    json_decref(sent);
    if (spec->description)
        sbx_json_set(t->definition, "description", sbx_json_str(spec->description));
    *out = t;
    return 0;
}

int sbx_tool_new_custom(const struct sbx_custom_tool *spec, struct sbx_tool **out,
                        struct sbx_error *err)
{
    int rc = check_name(spec->name, err);
    if (rc == 0 && !spec->fn)
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "tool '%s' needs a callback", spec->name);
    if (rc < 0) {
        if (spec->free_data)
            spec->free_data(spec->data);
        return rc;
    }
    struct sbx_tool *t = tool_alloc(SBX__TOOL_CUSTOM, spec->name, spec->data, spec->free_data);
    t->item_type = sbx_xstrdup("custom_tool_call");
    t->fn = spec->fn;
    t->definition = json_pack("{s:s, s:s}", "type", "custom", "name", spec->name);
    if (spec->description)
        sbx_json_set(t->definition, "description", sbx_json_str(spec->description));
    if (spec->format)
        sbx_json_set(t->definition, "format", json_deep_copy(spec->format));
    *out = t;
    return 0;
}

int sbx_tool_new_item(const struct sbx_item_tool *spec, struct sbx_tool **out,
                      struct sbx_error *err)
{
    int rc = check_name(spec->name, err);
    if (rc == 0 && (!spec->fn || !spec->item_type || !spec->item_type[0]))
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "tool '%s' needs a callback and an item type",
                           spec->name);
    if (rc == 0 && (strcmp(spec->item_type, "function_call") == 0 ||
                    strcmp(spec->item_type, "custom_tool_call") == 0))
        rc = sbx_error_set(err, SBX_E_INVAL, 0,
                           "tool '%s' cannot claim item type '%s': use a function or custom tool",
                           spec->name, spec->item_type);
    if (rc == 0 && !json_is_object(spec->definition))
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "tool '%s' needs a definition object", spec->name);
    if (rc < 0) {
        if (spec->free_data)
            spec->free_data(spec->data);
        return rc;
    }
    struct sbx_tool *t = tool_alloc(SBX__TOOL_ITEM, spec->name, spec->data, spec->free_data);
    t->item_type = sbx_xstrdup(spec->item_type);
    t->item_fn = spec->fn;
    t->definition = json_deep_copy(spec->definition);
    *out = t;
    return 0;
}

struct sbx_tool *sbx_tool_ref(struct sbx_tool *t)
{
    atomic_fetch_add(&t->refs, 1);
    return t;
}

void sbx_tool_unref(struct sbx_tool *t)
{
    if (!t || atomic_fetch_sub(&t->refs, 1) != 1)
        return;
    if (t->free_data)
        t->free_data(t->data);
    free(t->name);
    free(t->item_type);
    json_decref(t->definition);
    json_decref(t->schema);
    free(t);
}

const char *sbx_tool_name(const struct sbx_tool *t)
{
    return t->name;
}

const json_t *sbx_tool_definition(const struct sbx_tool *t)
{
    return t->definition;
}
