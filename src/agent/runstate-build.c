/* Building the runner's run states: one from a live run (sbx__run_state_build), and a run set
 * up again from one (sbx__run_state_restore). The format itself (parse, check, files) is
 * runstate.c. */
#include <string.h>

#include "core/grow.h"
#include "agent/runner-internal.h"
#include "sbx/json.h"
#include "sbx/runstate.h"
#include "sbx/time.h"

size_t sbx__run_reachable(struct sbx_agent *start, struct sbx_agent ***out)
{
    size_t n = 0, cap = 8;
    struct sbx_agent **v = sbx_xcalloc(cap, sizeof(*v));
    v[n++] = start;
    for (size_t i = 0; i < n; i++) {
        for (size_t h = 0; h < v[i]->nhandoffs; h++) {
            struct sbx_agent *t = v[i]->handoffs[h];
            int seen = 0;
            for (size_t k = 0; k < n && !seen; k++)
                seen = v[k] == t;
            if (seen)
                continue;
            SBX_ALLOC_GROW(v, n + 1, cap);
            v[n++] = t;
        }
    }
    *out = v;
    return n;
}

static json_t *str_or_null(const char *s)
{
    return s ? sbx_json_str(s) : json_null();
}

/* A final checkpoint's state is kept (sbx_run_result_state): it gets copies. */
static json_t *copy_or_null(const json_t *v)
{
    return v ? json_deep_copy(v) : json_null();
}

/* Whether v is the string s (NULL: null). */
static int str_is(const json_t *v, const char *s)
{
    return s ? json_is_string(v) && strcmp(json_string_value(v), s) == 0 : json_is_null(v);
}

/* Setters of the running state's fields: each leaves the object a field has when it holds
 * the value already, so that what did not change is the same object at the next checkpoint. */
static void keep_str(json_t *st, const char *key, const char *s)
{
    if (!str_is(json_object_get(st, key), s))
        sbx_json_set(st, key, str_or_null(s));
}

static void keep_int(json_t *st, const char *key, json_int_t v)
{
    const json_t *cur = json_object_get(st, key);
    if (!json_is_integer(cur) || json_integer_value(cur) != v)
        sbx_json_set(st, key, json_integer(v));
}

/* A value of the run's own, shared with the state (NULL: null). */
static void keep_shared(json_t *st, const char *key, const json_t *v)
{
    const json_t *cur = json_object_get(st, key);
    if (v ? cur != v : !json_is_null(cur))
        sbx_json_set(st, key, v ? json_incref((json_t *)v) : json_null());
}

static json_t *agents_of(struct sbx_agent **reach, size_t n)
{
    json_t *agents = json_array();
    for (size_t i = 0; i < n; i++)
        sbx_json_append(agents, json_pack("{s:s, s:o, s:o}", "name", reach[i]->name, "file",
                                          str_or_null(reach[i]->source_file), "digest",
                                          str_or_null(reach[i]->source_digest)));
    return agents;
}

static int agents_are(const json_t *agents, struct sbx_agent **reach, size_t n)
{
    if (!json_is_array(agents) || json_array_size(agents) != n)
        return 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *a = json_array_get(agents, i);
        if (!str_is(json_object_get(a, "name"), reach[i]->name) ||
            !str_is(json_object_get(a, "file"), reach[i]->source_file) ||
            !str_is(json_object_get(a, "digest"), reach[i]->source_digest))
            return 0;
    }
    return 1;
}

static json_t *tools_used_of(const struct run *r)
{
    json_t *used = json_array();
    for (size_t i = 0; i < r->nused; i++)
        sbx_json_append(used, sbx_json_str(r->used_tools[i]->name));
    return used;
}

static int tools_used_are(const json_t *used, const struct run *r)
{
    if (!json_is_array(used) || json_array_size(used) != r->nused)
        return 0;
    for (size_t i = 0; i < r->nused; i++)
        if (!str_is(json_array_get(used, i), r->used_tools[i]->name))
            return 0;
    return 1;
}

static json_t *conversation_of(const struct run *r)
{
    const struct sbx_run_options *opt = r->opt;
    if (!opt->conversation_store || !opt->conversation)
        return json_null();
    return json_pack("{s:s, s:I}", "name", opt->conversation, "saved_upto",
                     (json_int_t)r->saved_upto);
}

static int conversation_is(const json_t *conv, const struct run *r)
{
    const struct sbx_run_options *opt = r->opt;
    if (!opt->conversation_store || !opt->conversation)
        return json_is_null(conv);
    const json_t *upto = json_object_get(conv, "saved_upto");
    return str_is(json_object_get(conv, "name"), opt->conversation) && json_is_integer(upto) &&
           json_integer_value(upto) == (json_int_t)r->saved_upto && json_object_size(conv) == 2;
}

/* The state of a running checkpoint: r->ckpt brought up to date, its fields set in the order
 * a new state has them (the log's records follow that order), shared with the run (borrowed
 * by the checkpoint for the call). */
static json_t *running_state(struct run *r, const char *when)
{
    const struct sbx_run_options *opt = r->opt;
    if (!r->ckpt)
        r->ckpt = json_object();
    json_t *st = r->ckpt;
    struct sbx_agent **reach = NULL;
    size_t nreach = sbx__run_reachable(r->start, &reach);
    keep_str(st, "format", SBX_RUN_STATE_FORMAT);
    keep_int(st, "version", SBX_RUN_STATE_VERSION);
    keep_str(st, "status", "running");
    keep_str(st, "error", NULL);
    keep_str(st, "updated_at", when);
    keep_str(st, "start_agent", r->start->name);
    keep_str(st, "current_agent", r->agent->name);
    if (!agents_are(json_object_get(st, "agents"), reach, nreach))
        sbx_json_set(st, "agents", agents_of(reach, nreach));
    free(reach);
    keep_shared(st, "agent_files", r->agent_files);
    keep_int(st, "turn", r->done_turn);
    keep_int(st, "max_turns", r->max_turns);
    keep_shared(st, "items", r->items);
    keep_int(st, "input_items", (json_int_t)r->input_items);
    keep_shared(st, "usage", r->usage);
    keep_str(st, "model", opt->model_name ? opt->model_name : r->agent->model);
    keep_shared(st, "model_settings", r->agent->settings);
    keep_str(st, "previous_response_id", r->prev_id);
    keep_int(st, "sent_upto", (json_int_t)r->sent_upto);
    if (!tools_used_are(json_object_get(st, "tools_used"), r))
        sbx_json_set(st, "tools_used", tools_used_of(r));
    if (!conversation_is(json_object_get(st, "conversation"), r))
        sbx_json_set(st, "conversation", conversation_of(r));
    keep_shared(st, "open_calls", r->open_calls);
    keep_shared(st, "pending", r->pending);
    keep_shared(st, "decisions", r->decision_log);
    keep_shared(st, "always", r->always);
    keep_str(st, "run_id", r->run_id);
    keep_str(st, "final_output", NULL);
    keep_shared(st, "sandbox", r->sandbox);
    keep_shared(st, "meta", r->meta);
    if (!r->input_guarded)
        json_object_del(st, "guardrails");
    else if (!json_object_get(st, "guardrails"))
        sbx_json_set(st, "guardrails", json_pack("{s:s}", "input", "passed"));
    if (r->tripwire)
        keep_shared(st, "tripwire", r->tripwire);
    else
        json_object_del(st, "tripwire");
    return json_incref(st);
}

int sbx__run_state_build(struct run *r, const char *status, const char *error,
                         const char *final_output, int final, int hook, json_t **out,
                         struct sbx_error *err)
{
    const struct sbx_run_options *opt = r->opt;
    if (hook && opt->state_hook) {
        json_t *sb = NULL;
        int rc = opt->state_hook(opt->state_hook_data, final, &sb, err);
        if (rc < 0) {
            sbx_error_prefix(err, "run state");
            return rc;
        }
        json_decref(r->sandbox);
        r->sandbox = sb;
    }
    char when[SBX_TIME_RFC3339_LEN];
    sbx_time_rfc3339(sbx_time_real_ns(), when);
    if (strcmp(status, "running") == 0) {
        *out = running_state(r, when);
        return 0;
    }
    struct sbx_agent **reach = NULL;
    size_t nreach = sbx__run_reachable(r->start, &reach);
    json_t *agents = agents_of(reach, nreach);
    free(reach);
    const char *model = opt->model_name ? opt->model_name : r->agent->model;
    json_t *items = json_copy(r->items);
    if (!items)
        SBX_BUG("out of memory copying the items");
    json_t *st = json_object();
    sbx_json_set(st, "format", sbx_json_str(SBX_RUN_STATE_FORMAT));
    sbx_json_set(st, "version", json_integer(SBX_RUN_STATE_VERSION));
    sbx_json_set(st, "status", sbx_json_str(status));
    sbx_json_set(st, "error", str_or_null(error));
    sbx_json_set(st, "updated_at", sbx_json_str(when));
    sbx_json_set(st, "start_agent", sbx_json_str(r->start->name));
    sbx_json_set(st, "current_agent", sbx_json_str(r->agent->name));
    sbx_json_set(st, "agents", agents);
    sbx_json_set(st, "agent_files", copy_or_null(r->agent_files));
    sbx_json_set(st, "turn", json_integer(r->done_turn));
    sbx_json_set(st, "max_turns", json_integer(r->max_turns));
    sbx_json_set(st, "items", items);
    sbx_json_set(st, "input_items", json_integer((json_int_t)r->input_items));
    sbx_json_set(st, "usage", json_deep_copy(r->usage));
    sbx_json_set(st, "model", str_or_null(model));
    sbx_json_set(st, "model_settings", copy_or_null(r->agent->settings));
    sbx_json_set(st, "previous_response_id", str_or_null(r->prev_id));
    sbx_json_set(st, "sent_upto", json_integer((json_int_t)r->sent_upto));
    sbx_json_set(st, "tools_used", tools_used_of(r));
    sbx_json_set(st, "conversation", conversation_of(r));
    sbx_json_set(st, "open_calls", json_deep_copy(r->open_calls));
    sbx_json_set(st, "pending", json_deep_copy(r->pending));
    sbx_json_set(st, "decisions", json_deep_copy(r->decision_log));
    sbx_json_set(st, "always", json_deep_copy(r->always));
    sbx_json_set(st, "run_id", sbx_json_str(r->run_id));
    sbx_json_set(st, "final_output", str_or_null(final_output));
    sbx_json_set(st, "sandbox", copy_or_null(r->sandbox));
    sbx_json_set(st, "meta", copy_or_null(r->meta));
    if (r->input_guarded)
        sbx_json_set(st, "guardrails", json_pack("{s:s}", "input", "passed"));
    if (r->tripwire)
        sbx_json_set(st, "tripwire", json_deep_copy(r->tripwire));
    *out = st;
    return 0;
}

static size_t count(const json_t *st, const char *key)
{
    return (size_t)json_integer_value(json_object_get(st, key));
}

int sbx__run_state_restore(struct run *r, struct sbx_error *err)
{
    const json_t *st = r->opt->resume;
    const char *status = json_string_value(json_object_get(st, "status"));
    const char *start = json_string_value(json_object_get(st, "start_agent"));
    const char *cur = json_string_value(json_object_get(st, "current_agent"));
    if (!json_is_object(st) || !status || !start || !cur)
        return sbx_error_set(err, SBX_E_INVAL, 0, "run state: not a parsed run state");
    if (strcmp(status, "completed") == 0)
        return sbx_error_set(err, SBX_E_INVAL, 0, "run state: the run already completed");
    if (strcmp(start, r->start->name) != 0)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "run state: the run started with agent '%s', not '%s'", start,
                             r->start->name);
    struct sbx_agent **reach = NULL;
    size_t nreach = sbx__run_reachable(r->start, &reach);
    struct sbx_agent *current = NULL;
    for (size_t i = 0; i < nreach && !current; i++)
        if (strcmp(reach[i]->name, cur) == 0)
            current = reach[i];
    if (!current) {
        free(reach);
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "run state: its current agent '%s' is not reachable from agent '%s'",
                             cur, start);
    }
    r->agent = current;
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(st, "tools_used"), i, v)
    {
        for (size_t k = 0; k < nreach; k++) {
            if (strcmp(reach[k]->name, json_string_value(v)) != 0)
                continue;
            r->used_tools = sbx_xrealloc(r->used_tools, (r->nused + 1) * sizeof(*r->used_tools));
            r->used_tools[r->nused++] = reach[k];
            break;
        }
    }
    free(reach);
    json_decref(r->pending);
    r->pending = json_deep_copy(json_object_get(st, "pending"));
    /* The decisions a state records are a log: none of them answers a call again (those of a
     * version 1 state, an object by call id, are not even kept). */
    const json_t *log = json_object_get(st, "decisions");
    if (json_is_array(log)) {
        json_decref(r->decision_log);
        r->decision_log = json_deep_copy(log);
    }
    json_decref(r->items);
    r->items = json_deep_copy(json_object_get(st, "items"));
    json_decref(r->usage);
    r->usage = json_deep_copy(json_object_get(st, "usage"));
    json_decref(r->open_calls);
    r->open_calls = json_deep_copy(json_object_get(st, "open_calls"));
    r->input_items = count(st, "input_items");
    /* Input guardrails run once, on the first turn: a state that records them passed is not
     * checked again, as the reference SDK does not run them again on a resumed run. */
    const char *ig = json_string_value(json_object_get(json_object_get(st, "guardrails"), "input"));
    r->input_guarded = ig && strcmp(ig, "passed") == 0;
    r->turn = r->done_turn = (int)count(st, "turn");
    if (r->opt->max_turns == 0)
        r->max_turns = (int)json_integer_value(json_object_get(st, "max_turns"));
    const char *prev = json_string_value(json_object_get(st, "previous_response_id"));
    free(r->prev_id);
    r->prev_id = prev ? sbx_xstrdup(prev) : NULL;
    r->sent_upto = count(st, "sent_upto");
    r->saved_upto = count(json_object_get(st, "conversation"), "saved_upto");
    r->agent_files = r->opt->agent_files ? r->opt->agent_files : json_object_get(st, "agent_files");
    r->meta = r->opt->meta ? r->opt->meta : json_object_get(st, "meta");
    json_t *sb = json_object_get(st, "sandbox");
    json_decref(r->sandbox);
    r->sandbox = json_is_object(sb) ? json_deep_copy(sb) : NULL;
    r->resumed_status = status;
    return 0;
}
