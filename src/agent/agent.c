/* Agents: a plain description the runner reads. */
#include <string.h>

#include "agent/agent-internal.h"
#include "agent/schema.h"
#include "sbx/json.h"

int sbx_agent_new(const char *name, struct sbx_agent **out, struct sbx_error *err)
{
    if (!name || !name[0] || strlen(name) > 128)
        return sbx_error_set(err, SBX_E_INVAL, 0, "agent name must be 1 to 128 bytes");
    for (const char *p = name; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "agent name must not contain control characters");
    struct sbx_agent *a = sbx_xcalloc(1, sizeof(*a));
    a->name = sbx_xstrdup(name);
    a->reset_tool_choice = 1;
    sbx_strv_init(&a->stop_at);
    *out = a;
    return 0;
}

void sbx_agent_free(struct sbx_agent *a)
{
    if (!a)
        return;
    for (size_t i = 0; i < a->ntools; i++)
        sbx_tool_unref(a->tools[i]);
    free(a->tools);
    free(a->handoffs);
    free(a->name);
    free(a->instructions);
    free(a->model);
    free(a->handoff_description);
    free(a->tool_choice);
    json_decref(a->settings);
    json_decref(a->output_schema);
    json_decref(a->sandbox_spec);
    sbx_strv_release(&a->stop_at);
    free(a);
}

const char *sbx_agent_name(const struct sbx_agent *a)
{
    return a->name;
}

const char *sbx_agent_instructions(const struct sbx_agent *a)
{
    return a->instructions;
}

const char *sbx_agent_model(const struct sbx_agent *a)
{
    return a->model;
}

const json_t *sbx_agent_model_settings(const struct sbx_agent *a)
{
    return a->settings;
}

static void set_str(char **dst, const char *s)
{
    free(*dst);
    *dst = s ? sbx_xstrdup(s) : NULL;
}

void sbx_agent_set_instructions(struct sbx_agent *a, const char *instructions)
{
    set_str(&a->instructions, instructions);
}

void sbx_agent_set_model(struct sbx_agent *a, const char *model)
{
    set_str(&a->model, model);
}

void sbx_agent_set_handoff_description(struct sbx_agent *a, const char *text)
{
    set_str(&a->handoff_description, text);
}

int sbx_agent_set_model_settings(struct sbx_agent *a, const json_t *settings, struct sbx_error *err)
{
    if (settings && !json_is_object(settings))
        return sbx_error_set(err, SBX_E_INVAL, 0, "model settings of agent '%s' must be an object",
                             a->name);
    json_decref(a->settings);
    a->settings = settings ? json_deep_copy(settings) : NULL;
    return 0;
}

static int name_taken(const struct sbx_agent *a, const char *name)
{
    for (size_t i = 0; i < a->ntools; i++)
        if (strcmp(a->tools[i]->name, name) == 0)
            return 1;
    for (size_t i = 0; i < a->nhandoffs; i++) {
        char *h = sbx__agent_handoff_tool_name(a->handoffs[i]);
        int same = strcmp(h, name) == 0;
        free(h);
        if (same)
            return 1;
    }
    return 0;
}

int sbx_agent_add_tool(struct sbx_agent *a, struct sbx_tool *t, struct sbx_error *err)
{
    if (name_taken(a, t->name))
        return sbx_error_set(err, SBX_E_EXISTS, 0, "agent '%s' already has a tool named '%s'",
                             a->name, t->name);
    a->tools = sbx_xrealloc(a->tools, (a->ntools + 1) * sizeof(*a->tools));
    a->tools[a->ntools++] = sbx_tool_ref(t);
    return 0;
}

char *sbx__agent_handoff_tool_name(const struct sbx_agent *target)
{
    char *safe = sbx__tool_safe_name(target->name, 1);
    char *name = sbx_xasprintf("transfer_to_%s", safe);
    free(safe);
    if (strlen(name) > 64)
        name[64] = '\0';
    return name;
}

int sbx_agent_add_handoff(struct sbx_agent *a, struct sbx_agent *target, struct sbx_error *err)
{
    char *name = sbx__agent_handoff_tool_name(target);
    int taken = name_taken(a, name);
    int rc = 0;
    if (taken)
        rc = sbx_error_set(err, SBX_E_EXISTS, 0, "agent '%s' already has a tool named '%s'",
                           a->name, name);
    free(name);
    if (rc < 0)
        return rc;
    a->handoffs = sbx_xrealloc(a->handoffs, (a->nhandoffs + 1) * sizeof(*a->handoffs));
    a->handoffs[a->nhandoffs++] = target;
    return 0;
}

int sbx_agent_set_output_schema(struct sbx_agent *a, const json_t *schema, struct sbx_error *err)
{
    json_t *strict = NULL, *src = NULL;
    int wrapped = 0;
    if (!schema) {
        json_decref(a->output_schema);
        a->output_schema = NULL;
        return 0;
    }
    if (!json_is_object(schema))
        return sbx_error_set(err, SBX_E_INVAL, 0, "output schema of agent '%s' must be an object",
                             a->name);
    const char *type = json_string_value(json_object_get(schema, "type"));
    if (type && strcmp(type, "object") == 0) {
        src = json_incref((json_t *)schema);
    } else {
        src = json_pack("{s:s, s:{s:O}}", "type", "object", "properties", "response", schema);
        wrapped = 1;
    }
    int rc = sbx__schema_strict(src, &strict, err);
    json_decref(src);
    if (rc < 0) {
        sbx_error_prefix(err, "output schema of agent '%s'", a->name);
        return rc;
    }
    json_decref(a->output_schema);
    a->output_schema = strict;
    a->output_wrapped = wrapped;
    return 0;
}

void sbx_agent_set_tool_use(struct sbx_agent *a, enum sbx_tool_use use, const char *const *names)
{
    a->tool_use = use;
    sbx_strv_release(&a->stop_at);
    if (names)
        sbx_strv_pushv(&a->stop_at, names);
}

void sbx_agent_set_tool_choice(struct sbx_agent *a, const char *choice)
{
    set_str(&a->tool_choice, choice);
}

void sbx_agent_set_reset_tool_choice(struct sbx_agent *a, int reset)
{
    a->reset_tool_choice = reset;
}

void sbx_agent_set_sandbox_spec(struct sbx_agent *a, const json_t *spec)
{
    json_decref(a->sandbox_spec);
    a->sandbox_spec = spec ? json_deep_copy(spec) : NULL;
}

const json_t *sbx_agent_sandbox_spec(const struct sbx_agent *a)
{
    return a->sandbox_spec;
}
