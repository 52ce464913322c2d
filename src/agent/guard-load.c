/* Reading an agent file's guardrails and hooks (docs/internals/guardrails.md). */
#include <stdlib.h>
#include <string.h>

#include "agent/agent-internal.h"
#include "agent/guard.h"
#include "core/grow.h"
#include "sbx/json.h"
#include "sbx/truncate.h"

#define MAX_CHECKS        32
#define DEFAULT_FIELD     "tripwire_triggered"
#define DEFAULT_MAX_TURNS 3

static const char *const events[] = {"run_start",  "run_end",  "agent_start", "agent_end",
                                     "tool_start", "tool_end", "handoff",     NULL};

static void check_release(struct sbx__check *c)
{
    free(c->name);
    free(c->label);
    sbx_tool_unref(c->cmd);
    sbx_agent_free(c->agent);
    free(c->field);
    free(c->on);
    json_decref(c->tools);
}

static void checks_free(struct sbx__check *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        check_release(&v[i]);
    free(v);
}

void sbx__guards_free(struct sbx__guards *g)
{
    if (!g)
        return;
    checks_free(g->input, g->ninput);
    checks_free(g->output, g->noutput);
    checks_free(g->hooks, g->nhooks);
    for (size_t i = 0; i < g->ntools; i++) {
        json_decref(g->tools[i].tools);
        checks_free(g->tools[i].in, g->tools[i].nin);
        checks_free(g->tools[i].out, g->tools[i].nout);
    }
    free(g->tools);
    free(g);
}

/* A command check: a file tool (file-tools.c) that gets the payload as JSON on stdin and whose
 * whole stdout is kept (up to the tool output limit). */
static int load_command(struct sbx__check *c, const char *file, const json_t *e, const char *field,
                        struct sbx_error *err)
{
    char *safe = sbx__tool_safe_name(c->name, 0);
    json_t *spec = json_pack("{s:s, s:s, s:O, s:s, s:I}", "name", safe, "description", c->name,
                             field, json_object_get(e, field), "stdin", "json", "max_output_tokens",
                             (json_int_t)(SBX_TOOL_OUTPUT_MAX / SBX_TRUNCATE_BYTES_PER_TOKEN));
    free(safe);
    static const char *const copied[] = {"timeout", "env"};
    for (size_t i = 0; i < SBX_ARRAY_LEN(copied); i++) {
        json_t *t = json_object_get(e, copied[i]);
        if (t)
            sbx_json_set(spec, copied[i], json_incref(t));
    }
    int rc = sbx__file_tool_new(file, spec, &c->cmd, &c->ft, err);
    json_decref(spec);
    if (rc < 0) {
        /* The message names the made-up tool; the entry's own name is prefixed by the caller. */
        const char *m = strstr(err->msg, "': ");
        if (m && strncmp(err->msg, "tool '", 6) == 0) {
            char rest[SBX_ERROR_MSG_MAX];
            snprintf(rest, sizeof(rest), "%s", m + 3);
            snprintf(err->msg, sizeof(err->msg), "%s", rest);
        }
    }
    return rc;
}

/* An agent check: {instructions, model?, model_settings?, output_type}; output_type must have
 * the boolean the guardrail trips on (need_field; hooks may leave output_type out). */
static int load_agent(struct sbx__check *c, const json_t *e, int need_field, struct sbx_error *err)
{
    static const char *const keys[] = {"name",           "instructions", "model",
                                       "model_settings", "output_type",  NULL};
    const json_t *d = json_object_get(e, "agent");
    const char *name = NULL, *instr = NULL, *model = NULL;
    json_t *settings = NULL, *otype = NULL;
    int rc;
    if (!json_is_object(d))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "field 'agent' must be a mapping {instructions, model, "
                             "output_type}");
    if ((rc = sbx_json_check_keys(d, keys, err)) < 0 ||
        (rc = sbx_json_get_text(d, "name", SBX_JSON_NONEMPTY, &name, NULL, err)) < 0 ||
        (rc = sbx_json_get_text(d, "instructions", SBX_JSON_REQUIRED | SBX_JSON_ALLOW_CONTROL,
                                &instr, NULL, err)) < 0 ||
        (rc = sbx_json_get_text(d, "model", SBX_JSON_NONEMPTY, &model, NULL, err)) < 0 ||
        (rc = sbx_json_get_object(d, "model_settings", 0, &settings, err)) < 0 ||
        (rc = sbx_json_get_object(d, "output_type", need_field, &otype, err)) < 0)
        goto out;
    if (need_field) {
        const json_t *p = json_object_get(json_object_get(otype, "properties"), c->field);
        if (!json_is_object(p) || strcmp(json_string_value(json_object_get(p, "type"))
                                                 ? json_string_value(json_object_get(p, "type"))
                                                 : "",
                                         "boolean") != 0) {
            rc = sbx_error_set(err, SBX_E_INVAL, 0,
                               "field 'output_type' must have a boolean property '%s'", c->field);
            goto out;
        }
    }
    if ((rc = sbx_agent_new(name ? name : c->name, &c->agent, err)) < 0)
        goto out;
    sbx_agent_set_instructions(c->agent, instr);
    sbx_agent_set_model(c->agent, model);
    if ((rc = sbx_agent_set_model_settings(c->agent, settings, err)) < 0 ||
        (otype && (rc = sbx_agent_set_output_schema(c->agent, otype, err)) < 0))
        goto out;
out:
    if (rc < 0)
        sbx_error_prefix(err, "field 'agent'");
    return rc;
}

enum entry_type {
    ENTRY_INPUT,
    ENTRY_OUTPUT,
    ENTRY_TOOL,
    ENTRY_HOOK,
};

/* The keys an entry may have besides what runs. */
static int entry_keys(const json_t *e, enum entry_type t, struct sbx_error *err)
{
    static const char *const input[] = {
            "name",      "command",        "host_command",    "env", "agent", "timeout",
            "max_turns", "tripwire_field", "run_in_parallel", NULL};
    static const char *const output[] = {"name",    "command",   "host_command",   "env", "agent",
                                         "timeout", "max_turns", "tripwire_field", NULL};
    static const char *const tool[] = {"name",     "command", "host_command", "env",
                                       "agent",    "timeout", "max_turns",    "tripwire_field",
                                       "behavior", NULL};
    static const char *const hook[] = {
            "on", "tools", "command", "host_command", "env", "agent", "timeout", "max_turns", NULL};
    const char *const *k = t == ENTRY_INPUT    ? input
                           : t == ENTRY_OUTPUT ? output
                           : t == ENTRY_TOOL   ? tool
                                               : hook;
    return sbx_json_check_keys(e, k, err);
}

/* What runs: exactly one of command, host_command, agent. */
static int load_runner(struct sbx__check *c, const char *file, const json_t *e, int need_field,
                       struct sbx_error *err)
{
    static const char *const kinds[] = {"command", "host_command", "agent"};
    int found = -1;
    int64_t turns = DEFAULT_MAX_TURNS;
    int rc;
    for (int k = 0; k < 3; k++) {
        if (!json_object_get(e, kinds[k]))
            continue;
        if (found >= 0)
            return sbx_error_set(err, SBX_E_INVAL, 0,
                                 "fields '%s' and '%s' both say what runs: give one", kinds[found],
                                 kinds[k]);
        found = k;
    }
    if (found < 0)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "needs one of 'command' (in the sandbox), 'host_command' or "
                             "'agent'");
    if (found < 2) {
        if (json_object_get(e, "max_turns"))
            return sbx_error_set(err, SBX_E_INVAL, 0, "field 'max_turns' is for agents");
        return load_command(c, file, e, kinds[found], err);
    }
    if (json_object_get(e, "env"))
        return sbx_error_set(err, SBX_E_INVAL, 0, "field 'env' is for host commands");
    if (json_object_get(e, "timeout"))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "field 'timeout' is for commands: an agent is bounded by "
                             "'max_turns' and the model's own timeouts");
    if ((rc = sbx_json_get_int(e, "max_turns", 0, &turns, err)) < 0)
        return rc;
    if (turns < 1 || turns > 20)
        return sbx_error_set(err, SBX_E_INVAL, 0, "field 'max_turns' must be 1 to 20");
    c->max_turns = (int)turns;
    return load_agent(c, e, need_field, err);
}

static int load_guardrail(struct sbx__check *c, const char *file, const json_t *e,
                          enum entry_type t, struct sbx_error *err)
{
    const char *name = NULL, *field = NULL, *behavior = NULL;
    int rc;
    c->parallel = 1;
    if ((rc = sbx_json_get_text(e, "name", SBX_JSON_REQUIRED | SBX_JSON_NONEMPTY, &name, NULL,
                                err)) < 0)
        return rc;
    c->name = sbx_xstrdup(name);
    c->label = sbx_xasprintf("%s guardrail '%s'",
                             t == ENTRY_INPUT    ? "input"
                             : t == ENTRY_OUTPUT ? "output"
                                                 : "tool",
                             name);
    if ((rc = entry_keys(e, t, err)) < 0 ||
        (rc = sbx_json_get_text(e, "tripwire_field", SBX_JSON_NONEMPTY, &field, NULL, err)) < 0 ||
        (rc = sbx_json_get_bool(e, "run_in_parallel", 0, &c->parallel, err)) < 0 ||
        (rc = sbx_json_get_text(e, "behavior", 0, &behavior, NULL, err)) < 0)
        goto named;
    if (field && json_object_get(e, "agent") == NULL) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0,
                           "field 'tripwire_field' is for agents: a command answers "
                           "{\"tripwire_triggered\": bool}");
        goto named;
    }
    if (behavior && strcmp(behavior, "reject_content") != 0 &&
        strcmp(behavior, "raise_exception") != 0) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0,
                           "field 'behavior' must be \"reject_content\" or \"raise_exception\"");
        goto named;
    }
    c->raise = behavior && strcmp(behavior, "raise_exception") == 0;
    c->field = sbx_xstrdup(field ? field : DEFAULT_FIELD);
    if ((rc = load_runner(c, file, e, 1, err)) < 0)
        goto named;
    return 0;
named:
    sbx_error_prefix(err, "guardrail '%s'", name);
    return rc;
}

static int load_hook(struct sbx__check *c, size_t idx, const char *file, const json_t *e,
                     struct sbx_error *err)
{
    const char *on = NULL;
    json_t *tools = NULL;
    int rc;
    if ((rc = entry_keys(e, ENTRY_HOOK, err)) < 0 ||
        (rc = sbx_json_get_text(e, "on", SBX_JSON_REQUIRED, &on, NULL, err)) < 0)
        goto out;
    size_t k = 0;
    while (events[k] && strcmp(events[k], on) != 0)
        k++;
    if (!events[k]) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0,
                           "field 'on' must be one of run_start, run_end, agent_start, "
                           "agent_end, tool_start, tool_end, handoff");
        goto out;
    }
    c->on = sbx_xstrdup(on);
    c->name = sbx_xasprintf("hook %zu (on %s)", idx + 1, on);
    c->label = sbx_xstrdup(c->name);
    if ((rc = sbx_json_get_text_array(e, "tools", &tools, err)) < 0)
        goto out;
    if (tools && strncmp(on, "tool_", 5) != 0) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0,
                           "field 'tools' is for tool_start and tool_end hooks");
        goto out;
    }
    /* The agent's sandbox is made (or changes hands) at its next turn: at these events there
     * is none that is surely its own. */
    if (json_object_get(e, "command") &&
        (strcmp(on, "run_start") == 0 || strcmp(on, "agent_start") == 0 ||
         strcmp(on, "handoff") == 0)) {
        rc = sbx_error_set(
                err, SBX_E_INVAL, 0,
                "field 'command': a hook on %s cannot run in the sandbox (the agent gets "
                "its sandbox at its first turn): give 'host_command' or 'agent'",
                on);
        goto out;
    }
    c->tools = json_incref(tools);
    c->field = sbx_xstrdup(DEFAULT_FIELD);
    rc = load_runner(c, file, e, 0, err);
out:
    if (rc < 0)
        sbx_error_prefix(err, "entry %zu", idx);
    return rc;
}

/* One list of checks: field of doc (absent: none). */
static int load_list(const char *file, const json_t *doc, const char *field, enum entry_type t,
                     struct sbx__check **out, size_t *n, struct sbx_error *err)
{
    json_t *list = NULL, *e;
    size_t i;
    int rc = sbx_json_get_array(doc, field, 0, &list, err);
    if (rc < 0 || !list)
        return rc;
    if (json_array_size(list) > MAX_CHECKS)
        return sbx_error_set(err, SBX_E_TOOBIG, 0, "field '%s' has more than %d entries", field,
                             MAX_CHECKS);
    *out = sbx_xcalloc(json_array_size(list) + 1, sizeof(**out));
    json_array_foreach(list, i, e)
    {
        if (!json_is_object(e))
            rc = sbx_error_set(err, SBX_E_INVAL, 0, "entry %zu must be a mapping", i);
        else if (t == ENTRY_HOOK)
            rc = load_hook(&(*out)[i], i, file, e, err);
        else
            rc = load_guardrail(&(*out)[i], file, e, t, err);
        *n = i + 1;
        if (rc == 0 && t != ENTRY_HOOK) {
            for (size_t k = 0; k < i; k++)
                if (strcmp((*out)[k].name, (*out)[i].name) == 0)
                    rc = sbx_error_set(err, SBX_E_INVAL, 0, "guardrail '%s' is defined twice",
                                       (*out)[i].name);
        }
        if (rc < 0)
            break;
    }
    if (rc < 0)
        sbx_error_prefix(err, "field '%s'", field);
    return rc;
}

/* One entry of "tool_guardrails": {tools: [glob], tool_input_guardrails?,
 * tool_output_guardrails?}, for tools the file does not define (a capability's exec_command). */
static int load_tool_entry(struct sbx__guards *g, const char *file, size_t idx, const json_t *e,
                           struct sbx_error *err)
{
    static const char *const keys[] = {"tools", "tool_input_guardrails", "tool_output_guardrails",
                                       NULL};
    struct sbx__tool_guards tg = {0};
    json_t *tools = NULL;
    int rc;
    if (!json_is_object(e))
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "must be a mapping");
    else if ((rc = sbx_json_check_keys(e, keys, err)) == 0 &&
             (rc = sbx_json_get_text_array(e, "tools", &tools, err)) == 0 &&
             json_array_size(tools) == 0)
        rc = sbx_error_set(err, SBX_E_INVAL, 0, "field 'tools' must list tool names or globs");
    else if (rc == 0 && !json_object_get(e, "tool_input_guardrails") &&
             !json_object_get(e, "tool_output_guardrails"))
        rc = sbx_error_set(err, SBX_E_INVAL, 0,
                           "needs 'tool_input_guardrails' or 'tool_output_guardrails'");
    if (rc == 0 &&
        (rc = load_list(file, e, "tool_input_guardrails", ENTRY_TOOL, &tg.in, &tg.nin, err)) == 0)
        rc = load_list(file, e, "tool_output_guardrails", ENTRY_TOOL, &tg.out, &tg.nout, err);
    if (rc < 0) {
        checks_free(tg.in, tg.nin);
        checks_free(tg.out, tg.nout);
        sbx_error_prefix(err, "field 'tool_guardrails': entry %zu", idx);
        return rc;
    }
    tg.tools = json_incref(tools);
    g->tools = sbx_xrealloc(g->tools, (g->ntools + 1) * sizeof(tg));
    g->tools[g->ntools++] = tg;
    return 0;
}

static int load_tool_entries(struct sbx__guards *g, const char *file, const json_t *doc,
                             struct sbx_error *err)
{
    json_t *list = NULL, *e;
    size_t i;
    int rc = sbx_json_get_array(doc, "tool_guardrails", 0, &list, err);
    if (rc == 0 && json_array_size(list) > MAX_CHECKS)
        rc = sbx_error_set(err, SBX_E_TOOBIG, 0, "field 'tool_guardrails' has more than %d entries",
                           MAX_CHECKS);
    json_array_foreach(rc == 0 ? list : NULL, i, e)
    {
        if ((rc = load_tool_entry(g, file, i, e, err)) < 0)
            break;
    }
    return rc;
}

int sbx__guards_load(const char *file, const json_t *doc, struct sbx__guards **out,
                     struct sbx_error *err)
{
    struct sbx__guards *g = sbx_xcalloc(1, sizeof(*g));
    int rc;
    if ((rc = load_list(file, doc, "input_guardrails", ENTRY_INPUT, &g->input, &g->ninput, err)) <
                0 ||
        (rc = load_list(file, doc, "output_guardrails", ENTRY_OUTPUT, &g->output, &g->noutput,
                        err)) < 0 ||
        (rc = load_list(file, doc, "hooks", ENTRY_HOOK, &g->hooks, &g->nhooks, err)) < 0 ||
        (rc = load_tool_entries(g, file, doc, err)) < 0) {
        sbx__guards_free(g);
        return rc;
    }
    if (!g->ninput && !g->noutput && !g->nhooks && !g->ntools) {
        sbx__guards_free(g);
        g = NULL;
    }
    *out = g;
    return 0;
}

int sbx__guards_load_tool(const char *file, const json_t *entry, const char *name,
                          struct sbx__guards **g, json_t **rest, struct sbx_error *err)
{
    struct sbx__tool_guards tg = {0};
    int rc;
    if (!json_object_get(entry, "tool_input_guardrails") &&
        !json_object_get(entry, "tool_output_guardrails")) {
        *rest = json_incref((json_t *)entry);
        return 0;
    }
    if ((rc = load_list(file, entry, "tool_input_guardrails", ENTRY_TOOL, &tg.in, &tg.nin, err)) <
                0 ||
        (rc = load_list(file, entry, "tool_output_guardrails", ENTRY_TOOL, &tg.out, &tg.nout,
                        err)) < 0) {
        checks_free(tg.in, tg.nin);
        checks_free(tg.out, tg.nout);
        return rc;
    }
    if (!*g)
        *g = sbx_xcalloc(1, sizeof(**g));
    tg.tools = json_pack("[s]", name);
    (*g)->tools = sbx_xrealloc((*g)->tools, ((*g)->ntools + 1) * sizeof(tg));
    (*g)->tools[(*g)->ntools++] = tg;
    json_t *r = json_deep_copy(entry);
    json_object_del(r, "tool_input_guardrails");
    json_object_del(r, "tool_output_guardrails");
    *rest = r;
    return 0;
}

int sbx__guards_command(const struct sbx__guards *g, size_t i, struct sbx_tool **tool,
                        struct sbx__file_tool **ft, const char **label)
{
    if (!g)
        return 0;
    const struct {
        struct sbx__check *v;
        size_t n;
    } lists[] = {{g->input, g->ninput}, {g->output, g->noutput}, {g->hooks, g->nhooks}};
    for (size_t l = 0; l < SBX_ARRAY_LEN(lists); l++) {
        for (size_t k = 0; k < lists[l].n; k++) {
            if (lists[l].v[k].cmd && i-- == 0) {
                *tool = lists[l].v[k].cmd;
                *ft = lists[l].v[k].ft;
                *label = lists[l].v[k].label;
                return 1;
            }
        }
    }
    for (size_t t = 0; t < g->ntools; t++) {
        const struct sbx__tool_guards *tg = &g->tools[t];
        for (size_t k = 0; k < tg->nin + tg->nout; k++) {
            struct sbx__check *c = k < tg->nin ? &tg->in[k] : &tg->out[k - tg->nin];
            if (c->cmd && i-- == 0) {
                *tool = c->cmd;
                *ft = c->ft;
                *label = c->label;
                return 1;
            }
        }
    }
    return 0;
}
