/* Capability objects, tool sets, the built-in registry and the compaction capability. */
#include <ctype.h>
#include <stdatomic.h>
#include <string.h>

#include "capability/capability-internal.h"
#include "sbx/json.h"

struct sbx_capability {
    atomic_int refs;
    char *type;
    const struct sbx_capability_ops *ops;
    void *data;
};

void sbx_toolset_add(struct sbx_toolset *ts, struct sbx_tool *t, int offered)
{
    struct sbx_tool ***v = offered ? &ts->offered : &ts->hidden;
    size_t *n = offered ? &ts->noffered : &ts->nhidden;
    *v = sbx_xrealloc(*v, (*n + 1) * sizeof(**v));
    (*v)[(*n)++] = sbx_tool_ref(t);
}

void sbx_toolset_release(struct sbx_toolset *ts)
{
    for (size_t i = 0; i < ts->noffered; i++)
        sbx_tool_unref(ts->offered[i]);
    for (size_t i = 0; i < ts->nhidden; i++)
        sbx_tool_unref(ts->hidden[i]);
    free(ts->offered);
    free(ts->hidden);
    memset(ts, 0, sizeof(*ts));
}

int sbx_capability_new(const char *type, const struct sbx_capability_ops *ops, void *data,
                       struct sbx_capability **out, struct sbx_error *err)
{
    if (!type || !type[0] || strlen(type) > 64 || !ops) {
        if (ops && ops->free_data)
            ops->free_data(data);
        return sbx_error_set(err, SBX_E_INVAL, 0, "a capability needs a type of 1 to 64 bytes");
    }
    struct sbx_capability *c = sbx_xcalloc(1, sizeof(*c));
    atomic_init(&c->refs, 1);
    c->type = sbx_xstrdup(type);
    c->ops = ops;
    c->data = data;
    *out = c;
    return 0;
}

struct sbx_capability *sbx_capability_ref(struct sbx_capability *c)
{
    atomic_fetch_add(&c->refs, 1);
    return c;
}

void sbx_capability_unref(struct sbx_capability *c)
{
    if (!c || atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    if (c->ops->free_data)
        c->ops->free_data(c->data);
    free(c->type);
    free(c);
}

const char *sbx_capability_type(const struct sbx_capability *c)
{
    return c->type;
}

void *sbx_capability_data(const struct sbx_capability *c)
{
    return c->data;
}

const struct sbx_capability_ops *sbx__capability_ops(const struct sbx_capability *c)
{
    return c->ops;
}

/* ---- compaction ---------------------------------------------------------------------------- */

struct compaction {
    long threshold; /* tokens; 0: from the model's context window */
    double ratio;
    long context_window;
};

/* Context windows by model-name prefix (normalised: lower-case, no "openai/", "." or "-"). */
static const struct {
    const char *prefix;
    long window;
} windows[] = {
        {"gpt56", 1047576}, {"gpt55", 1047576}, {"gpt54mini", 400000},  {"gpt54nano", 400000},
        {"gpt54", 1047576}, {"gpt41", 1047576}, {"gpt53codex", 400000}, {"gpt52", 400000},
        {"gpt51", 400000},  {"gpt5", 400000},   {"codexmini", 200000},  {"o4mini", 200000},
        {"o3", 200000},     {"o1", 200000},     {"gpt4o", 128000},      {"chatgpt4o", 128000},
};

#define COMPACTION_DEFAULT_THRESHOLD 240000L
#define COMPACTION_RATIO             0.9

static long window_of(const char *model)
{
    char key[128];
    size_t k = 0;
    if (!model)
        return 0;
    if (strncmp(model, "openai/", 7) == 0)
        model += 7;
    for (; *model && k + 1 < sizeof(key); model++)
        if (*model != '.' && *model != '-')
            key[k++] = (char)tolower((unsigned char)*model);
    key[k] = '\0';
    for (size_t i = 0; i < SBX_ARRAY_LEN(windows); i++)
        if (strncmp(key, windows[i].prefix, strlen(windows[i].prefix)) == 0)
            return windows[i].window;
    return 0;
}

long sbx_compaction_threshold(const char *model_name)
{
    long w = window_of(model_name);
    return w ? (long)((double)w * COMPACTION_RATIO) : COMPACTION_DEFAULT_THRESHOLD;
}

static int compaction_settings(struct sbx_capability *c, const struct sbx_capability_env *env,
                               json_t *settings, struct sbx_error *err)
{
    struct compaction *cp = c->data;
    (void)err;
    /* Chat Completions has no such field: a server would refuse the unknown parameter. */
    if (env->api != SBX_MODEL_API_RESPONSES || json_object_get(settings, "context_management"))
        return 0;
    long t = cp->threshold;
    if (!t) {
        long w = cp->context_window ? cp->context_window : window_of(env->model_name);
        t = w ? (long)((double)w * cp->ratio) : COMPACTION_DEFAULT_THRESHOLD;
    }
    sbx_json_set(
            settings, "context_management",
            json_pack("[{s:s, s:I}]", "type", "compaction", "compact_threshold", (json_int_t)t));
    return 0;
}

static int compaction_input(struct sbx_capability *c, const json_t *items, json_t **out,
                            struct sbx_error *err)
{
    (void)c;
    (void)err;
    size_t last = 0, i;
    int found = 0;
    json_t *it;
    json_array_foreach(items, i, it)
    {
        const char *t = json_string_value(json_object_get(it, "type"));
        if (t && strcmp(t, "compaction") == 0) {
            last = i;
            found = 1;
        }
    }
    if (!found || last == 0)
        return 0;
    json_t *cut = json_array();
    for (i = last; i < json_array_size(items); i++)
        sbx_json_append(cut, json_incref(json_array_get(items, i)));
    *out = cut;
    return 0;
}

static const struct sbx_capability_ops compaction_ops = {
        .model_settings = compaction_settings,
        .process_input = compaction_input,
        .free_data = free,
};

static int new_compaction(const json_t *spec, struct sbx_capability **out, struct sbx_error *err)
{
    static const char *const keys[] = {"type", "threshold", "ratio", "context_window", NULL};
    int64_t threshold = 0, window = 0;
    double ratio = COMPACTION_RATIO;
    int rc;
    if (spec && ((rc = sbx_json_check_keys(spec, keys, err)) < 0 ||
                 (rc = sbx_json_get_int(spec, "threshold", 0, &threshold, err)) < 0 ||
                 (rc = sbx_json_get_number(spec, "ratio", 0, &ratio, err)) < 0 ||
                 (rc = sbx_json_get_int(spec, "context_window", 0, &window, err)) < 0))
        return rc;
    if (threshold < 0 || threshold > 100000000 || window < 0 || window > 100000000)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "threshold and context_window must be 0 to 100000000 tokens");
    if (!(ratio >= 0.05 && ratio <= 1.0))
        return sbx_error_set(err, SBX_E_INVAL, 0, "ratio must be between 0.05 and 1");
    struct compaction *cp = sbx_xcalloc(1, sizeof(*cp));
    cp->threshold = (long)threshold;
    cp->ratio = ratio;
    cp->context_window = (long)window;
    return sbx_capability_new("compaction", &compaction_ops, cp, out, err);
}

/* ---- registry ------------------------------------------------------------------------------ */

/* make_at: for types whose fields name host paths, relative to the agent file. */
static const struct {
    const char *type;
    int (*make)(const json_t *spec, struct sbx_capability **out, struct sbx_error *err);
    int (*make_at)(const json_t *spec, const char *base_dir, struct sbx_capability **out,
                   struct sbx_error *err);
} builtins[] = {
        {"filesystem", sbx__capability_filesystem},
        {"shell", sbx__capability_shell},
        {"compaction", new_compaction},
        {"skills", NULL, sbx__capability_skills},
        {"memory", sbx__capability_memory},
};

int sbx_capability_from_json(const json_t *spec, struct sbx_capability **out, struct sbx_error *err)
{
    return sbx__capability_from_json_at(spec, NULL, out, err);
}

int sbx__capability_from_json_at(const json_t *spec, const char *base_dir,
                                 struct sbx_capability **out, struct sbx_error *err)
{
    const char *type = json_string_value(spec);
    const json_t *obj = NULL;
    if (!type) {
        if (!json_is_object(spec))
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "a capability must be a type name or an object with a 'type'");
        int rc = sbx_json_get_string(spec, "type", 1, &type, err);
        if (rc < 0)
            return rc;
        obj = spec;
    }
    for (size_t i = 0; i < SBX_ARRAY_LEN(builtins); i++) {
        if (strcmp(builtins[i].type, type) != 0)
            continue;
        int rc = builtins[i].make ? builtins[i].make(obj, out, err)
                                  : builtins[i].make_at(obj, base_dir, out, err);
        if (rc < 0)
            sbx_error_prefix(err, "capability '%s'", type);
        return rc;
    }
    return sbx_error_set(err, SBX_E_NOTFOUND, 0,
                         "unknown capability '%s' (known: filesystem, shell, compaction, skills, "
                         "memory)",
                         type);
}
