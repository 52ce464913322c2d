/* Prompts and variables: instruction templates and the Responses API prompt object
 * (include/sbx/prompt.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/agent-internal.h"
#include "sbx/json.h"
#include "sbx/prompt.h"

#define PROMPT_ID_MAX 256

static int name_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static int name_char(char c)
{
    return name_start(c) || (c >= '0' && c <= '9');
}

int sbx_var_name_ok(const char *name)
{
    size_t n = 0;
    if (!name || !name_start(name[0]))
        return 0;
    while (name[n] && name_char(name[n]))
        n++;
    return name[n] == 0 && n <= SBX_VAR_NAME_MAX;
}

/* At p (just after "{{"): blanks, a name, blanks, "}}". Returns the length up to and with the
 * closing braces and the name's place, or 0 when p does not hold one. */
static size_t placeholder(const char *p, const char **name, size_t *name_len)
{
    size_t i = 0;
    while (p[i] == ' ' || p[i] == '\t')
        i++;
    if (!name_start(p[i]))
        return 0;
    size_t s = i;
    while (name_char(p[i]))
        i++;
    if (i - s > SBX_VAR_NAME_MAX)
        return 0;
    *name = p + s;
    *name_len = i - s;
    while (p[i] == ' ' || p[i] == '\t')
        i++;
    return p[i] == '}' && p[i + 1] == '}' ? i + 2 : 0;
}

static int add(struct sbx_buf *b, const char *p, size_t n, struct sbx_error *err)
{
    if (b->len + n > SBX_TEMPLATE_MAX)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "the filled text would pass %zu bytes",
                             SBX_TEMPLATE_MAX);
    return sbx_buf_add(b, p, n, err);
}

static int fill_one(struct sbx_buf *b, const char *name, size_t n, const json_t *vars, json_t *used,
                    struct sbx_error *err)
{
    char key[SBX_VAR_NAME_MAX + 1];
    memcpy(key, name, n);
    key[n] = 0;
    const json_t *v = json_object_get(vars, key);
    if (!v)
        return sbx_error_set(err, SBX_E_NOTFOUND, 0, "variable '%s' is not given", key);
    if (!json_is_string(v))
        return sbx_error_set(err, SBX_E_INVAL, 0, "variable '%s' must be text, not %s", key,
                             sbx_json_typename(v));
    if (used)
        sbx_json_set(used, key, json_true());
    return add(b, json_string_value(v), json_string_length(v), err);
}

int sbx_template_fill(const char *text, const json_t *vars, json_t *used, char **out,
                      struct sbx_error *err)
{
    struct sbx_buf b;
    const char *p = text, *name;
    size_t n;
    int rc = 0;
    sbx_buf_init(&b, SBX_TEMPLATE_MAX + 1);
    while (rc == 0 && *p) {
        const char *open = strstr(p, "{{");
        if (!open) {
            rc = add(&b, p, strlen(p), err);
            break;
        }
        /* "\{{": the backslash goes, the braces stay text. */
        if (open > p && open[-1] == '\\') {
            if ((rc = add(&b, p, (size_t)(open - 1 - p), err)) == 0)
                rc = add(&b, "{{", 2, err);
            p = open + 2;
            continue;
        }
        size_t len = placeholder(open + 2, &name, &n);
        if ((rc = add(&b, p, (size_t)(open - p) + (len ? 0 : 2), err)) < 0)
            break;
        if (len)
            rc = fill_one(&b, name, n, vars, used, err);
        p = open + 2 + len;
    }
    if (rc < 0) {
        sbx_buf_release(&b);
        return rc;
    }
    *out = sbx_buf_detach(&b, NULL);
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * The prompt object */

static int check_item(const char *name, const json_t *v, struct sbx_error *err)
{
    static const char *const text_keys[] = {"type", "text", NULL};
    static const char *const image_keys[] = {"type", "image_url", "file_id", "detail", NULL};
    static const char *const file_keys[] = {"type",     "file_id",  "file_data",
                                            "file_url", "filename", NULL};
    const char *type = json_string_value(json_object_get(v, "type"));
    const char *const *keys = NULL;
    const char *need = NULL;
    if (type && strcmp(type, "input_text") == 0)
        keys = text_keys, need = "text";
    else if (type && strcmp(type, "input_image") == 0)
        keys = image_keys;
    else if (type && strcmp(type, "input_file") == 0)
        keys = file_keys;
    else
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "variable '%s': an input item's type must be input_text, "
                             "input_image or input_file",
                             name);
    int rc = sbx_json_check_keys(v, keys, err);
    const char *k;
    json_t *f;
    json_object_foreach((json_t *)v, k, f)
    {
        if (rc == 0 && !json_is_string(f))
            rc = sbx_error_set(err, SBX_E_INVAL, 0, "key '%s' must be text", k);
    }
    if (rc == 0 && need && !json_object_get(v, need))
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "an %s item needs '%s'", type, need);
    if (rc == 0 && !need && json_object_size(v) < 2)
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "an %s item needs what it holds (%s)", type,
                           strcmp(type, "input_image") == 0 ? "image_url or file_id"
                                                            : "file_id, file_data or file_url");
    if (rc < 0 && strncmp(err->msg, "variable", 8) != 0)
        sbx_error_prefix(err, "variable '%s'", name);
    return rc;
}

static int check_prompt(const json_t *p, struct sbx_error *err)
{
    static const char *const keys[] = {"id", "version", "variables", NULL};
    const char *id = NULL, *version = NULL, *k;
    json_t *vars = NULL, *v;
    if (!json_is_object(p))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "must be an object {id, version, variables}, not %s",
                             sbx_json_typename(p));
    int rc = sbx_json_check_keys(p, keys, err);
    if (rc == 0)
        rc = sbx_json_get_string(p, "id", 1, &id, err);
    if (rc == 0)
        rc = sbx_json_get_string(p, "version", 0, &version, err);
    if (rc == 0)
        rc = sbx_json_get_object(p, "variables", 0, &vars, err);
    if (rc < 0)
        return rc;
    if (!id[0] || strlen(id) > PROMPT_ID_MAX)
        return sbx_error_set(err, SBX_E_INVAL, 0, "'id' must be 1 to %d bytes", PROMPT_ID_MAX);
    if (json_object_size(vars) > SBX_VARS_MAX)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "more than %d variables", SBX_VARS_MAX);
    json_object_foreach(vars, k, v)
    {
        if (!sbx_var_name_ok(k))
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "variable '%s': a name is a letter or '_', then letters, "
                                 "digits and '_' (at most %d)",
                                 k, SBX_VAR_NAME_MAX);
        if (json_is_string(v) || json_is_null(v))
            continue;
        if (!json_is_object(v))
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "variable '%s' must be text, an input item or null (the run's "
                                 "variable of that name), not %s",
                                 k, sbx_json_typename(v));
        if ((rc = check_item(k, v, err)) < 0)
            return rc;
    }
    return 0;
}

int sbx_agent_set_prompt(struct sbx_agent *a, const json_t *prompt, struct sbx_error *err)
{
    if (prompt && !json_is_null(prompt)) {
        int rc = check_prompt(prompt, err);
        if (rc < 0) {
            sbx_error_prefix(err, "prompt");
            return rc;
        }
    }
    json_decref(a->prompt);
    a->prompt = prompt && !json_is_null(prompt) ? json_deep_copy(prompt) : NULL;
    return 0;
}

const json_t *sbx_agent_prompt(const struct sbx_agent *a)
{
    return a->prompt;
}

/* The prompt's variables filled: a new prompt object in *out. */
static int fill_prompt(const json_t *prompt, const json_t *vars, json_t *used, json_t **out,
                       struct sbx_error *err)
{
    json_t *p = json_deep_copy(prompt), *pv = json_object_get(p, "variables"), *v;
    const char *k;
    int rc = 0;
    json_object_foreach(pv, k, v)
    {
        json_t *slot = json_is_object(v) ? v : pv;
        const char *key = json_is_object(v) ? "text" : k;
        const char *t = json_string_value(json_object_get(slot, key));
        char *filled = NULL;
        if (json_is_null(v)) {
            char ref[SBX_VAR_NAME_MAX + 6];
            snprintf(ref, sizeof(ref), "{{%s}}", k);
            rc = sbx_template_fill(ref, vars, used, &filled, err);
        } else if (t) {
            rc = sbx_template_fill(t, vars, used, &filled, err);
        }
        if (rc < 0) {
            sbx_error_prefix(err, "prompt variable '%s'", k);
            break;
        }
        if (filled)
            sbx_json_set(slot, key, sbx_json_str(filled));
        free(filled);
    }
    if (rc < 0) {
        json_decref(p);
        return rc;
    }
    *out = p;
    return 0;
}

int sbx_agent_fill_variables(struct sbx_agent *a, const json_t *vars, json_t *used,
                             struct sbx_error *err)
{
    char *ins = NULL;
    json_t *p = NULL;
    int rc = 0;
    if (a->instructions && (rc = sbx_template_fill(a->instructions, vars, used, &ins, err)) < 0)
        sbx_error_prefix(err, "instructions");
    if (rc == 0 && a->prompt && (rc = fill_prompt(a->prompt, vars, used, &p, err)) < 0)
        free(ins);
    if (rc < 0) {
        sbx_error_prefix(err, "agent '%s'", a->name);
        return rc;
    }
    if (ins) {
        free(a->instructions);
        a->instructions = ins;
    }
    if (p) {
        json_decref(a->prompt);
        a->prompt = p;
    }
    return 0;
}
