/* Run states of the Agents SDK: a RunState the SDK wrote (JS camelCase, Python snake_case,
 * "$schemaVersion" 1.x) as an sbx run state, and an sbx run state as the JS SDK's RunState
 * (docs/internals/runstate.md, "The SDK's RunState"). Items move between the SDK's protocol
 * items and Responses API items; what has no counterpart is refused naming its field. */
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/agent-internal.h"
#include "agent/runner-internal.h"
#include "sbx/hash.h"
#include "sbx/json.h"
#include "sbx/runstate.h"
#include "sbx/time.h"

#define SDK_JS_VERSION "1.22"
/* Who took the decisions an import carries over (the run state's "by"). */
#define SDK_BY "SDK run state"

/* The field of o under its JS (camel) or Python (snake) name. */
static const json_t *pick(const json_t *o, const char *camel, const char *snake)
{
    const json_t *v = json_object_get(o, camel);
    return v ? v : json_object_get(o, snake);
}

static const char *pick_str(const json_t *o, const char *camel, const char *snake)
{
    return json_string_value(pick(o, camel, snake));
}

static int refuse(struct sbx_error *err, const char *field, const char *why)
{
    return sbx_error_set(err, SBX_E_UNSUPPORTED, 0, "SDK run state: field '%s': %s", field, why);
}

/* ---- SDK items to Responses items ----------------------------------------------------------- */

/* Message content as Responses parts: a string stays a string; parts keep their type and text
 * (JS and Python share the Responses part names). */
static json_t *content_of(const json_t *c)
{
    if (json_is_string(c))
        return json_incref((json_t *)c);
    json_t *out = json_array();
    size_t i;
    json_t *p;
    json_array_foreach(c, i, p)
    {
        json_t *q = json_deep_copy(p);
        json_object_del(q, "providerData");
        json_object_del(q, "provider_data");
        sbx_json_append(out, q);
    }
    return out;
}

/* A tool output (a string, {"type": "text", "text"}, or a list of parts) as the text of a
 * function_call_output. */
static json_t *output_of(const json_t *o)
{
    if (json_is_string(o))
        return json_incref((json_t *)o);
    const char *t = json_string_value(json_object_get(o, "text"));
    if (t)
        return json_string(t);
    if (json_is_array(o))
        return json_deep_copy(o);
    char *text = sbx_json_dumps(o, SBX_JSON_COMPACT);
    json_t *v = json_string(text);
    free(text);
    return v;
}

static int sdk_message(const json_t *raw, json_t **out)
{
    const char *role = json_string_value(json_object_get(raw, "role"));
    json_t *m = json_pack("{s:s, s:s, s:o}", "type", "message", "role", role, "content",
                          content_of(json_object_get(raw, "content")));
    const char *id = json_string_value(json_object_get(raw, "id"));
    if (id && strcmp(role, "assistant") == 0)
        sbx_json_set(m, "id", json_string(id));
    if (strcmp(role, "assistant") == 0)
        sbx_json_set(m, "status", json_string("completed"));
    *out = m;
    return 0;
}

static int sdk_item(const json_t *raw, const char *where, json_t **out, struct sbx_error *err)
{
    const char *type = json_string_value(json_object_get(raw, "type"));
    const char *role = json_string_value(json_object_get(raw, "role"));
    if ((!type || strcmp(type, "message") == 0) && role &&
        (strcmp(role, "user") == 0 || strcmp(role, "assistant") == 0 ||
         strcmp(role, "system") == 0 || strcmp(role, "developer") == 0))
        return sdk_message(raw, out);
    if (!type)
        return refuse(err, where, "an item without a type or role");
    const char *call_id = pick_str(raw, "callId", "call_id");
    if (strcmp(type, "function_call") == 0 && call_id) {
        const json_t *args = json_object_get(raw, "arguments");
        *out = json_pack("{s:s, s:s, s:O?, s:O?}", "type", "function_call", "call_id", call_id,
                         "name", json_object_get(raw, "name"), "arguments", args);
        const char *id = json_string_value(json_object_get(raw, "id"));
        if (id)
            sbx_json_set(*out, "id", json_string(id));
        return 0;
    }
    if ((strcmp(type, "function_call_result") == 0 || strcmp(type, "function_call_output") == 0) &&
        call_id) {
        *out = json_pack("{s:s, s:s, s:o}", "type", "function_call_output", "call_id", call_id,
                         "output", output_of(json_object_get(raw, "output")));
        return 0;
    }
    if (strcmp(type, "reasoning") == 0) {
        json_t *r = json_pack("{s:s, s:[]}", "type", "reasoning", "summary");
        const char *id = json_string_value(json_object_get(raw, "id"));
        if (id)
            sbx_json_set(r, "id", json_string(id));
        const json_t *parts = json_object_get(raw, "summary");
        if (!parts)
            parts = json_object_get(raw, "content");
        size_t i;
        json_t *p;
        json_array_foreach(parts, i, p)
        {
            const char *t = json_string_value(json_object_get(p, "text"));
            if (t)
                sbx_json_append(json_object_get(r, "summary"),
                                json_pack("{s:s, s:s}", "type", "summary_text", "text", t));
        }
        const json_t *pd = pick(raw, "providerData", "provider_data");
        const char *enc = pick_str(pd ? pd : raw, "encryptedContent", "encrypted_content");
        if (!enc)
            enc = pick_str(raw, "encryptedContent", "encrypted_content");
        if (enc)
            sbx_json_set(r, "encrypted_content", json_string(enc));
        *out = r;
        return 0;
    }
    char why[160];
    snprintf(why, sizeof(why), "an item of type '%.64s' has no counterpart in sbx", type);
    return refuse(err, where, why);
}

/* The SDK's original input as Responses items appended to items. */
static int sdk_input(const json_t *orig, json_t *items, struct sbx_error *err)
{
    if (json_is_string(orig)) {
        sbx_json_append(items, json_pack("{s:s, s:s, s:O}", "type", "message", "role", "user",
                                         "content", orig));
        return 0;
    }
    if (!json_is_array(orig))
        return refuse(err, "originalInput", "must be a string or a list of items");
    size_t i;
    json_t *it;
    json_array_foreach(orig, i, it)
    {
        char where[48];
        json_t *x = NULL;
        snprintf(where, sizeof(where), "originalInput[%zu]", i);
        int rc = sdk_item(it, where, &x, err);
        if (rc < 0)
            return rc;
        sbx_json_append(items, x);
    }
    return 0;
}

/* The SDK's generated items (run items wrapping raw items) as Responses items; approval items
 * repeat a call already there and are left out. */
static int sdk_generated(const json_t *gen, json_t *items, struct sbx_error *err)
{
    size_t i;
    json_t *it;
    json_array_foreach(gen, i, it)
    {
        char where[64];
        const char *type = json_string_value(json_object_get(it, "type"));
        snprintf(where, sizeof(where), "generatedItems[%zu]", i);
        if (type && strcmp(type, "tool_approval_item") == 0)
            continue;
        const json_t *raw = pick(it, "rawItem", "raw_item");
        if (!json_is_object(raw))
            return refuse(err, where, "has no raw item");
        json_t *x = NULL;
        int rc = sdk_item(raw, where, &x, err);
        if (rc < 0)
            return rc;
        sbx_json_append(items, x);
    }
    return 0;
}

/* The calls of items without an output, in order. */
static json_t *open_calls_of(const json_t *items)
{
    json_t *open = json_array();
    size_t i, j;
    json_t *it, *o;
    json_array_foreach(items, i, it)
    {
        const char *t = json_string_value(json_object_get(it, "type"));
        const char *id = json_string_value(json_object_get(it, "call_id"));
        if (!t || !id || strcmp(t, "function_call") != 0)
            continue;
        int answered = 0;
        json_array_foreach(items, j, o)
        {
            const char *ot = json_string_value(json_object_get(o, "type"));
            const char *oid = json_string_value(json_object_get(o, "call_id"));
            answered |=
                    ot && oid && strcmp(ot, "function_call_output") == 0 && strcmp(oid, id) == 0;
        }
        if (!answered)
            sbx_json_append(open, json_string(id));
    }
    return open;
}

/* The interruptions of the SDK's current step as sbx pending calls of turn. */
static int sdk_pending(const json_t *sdk, json_int_t turn, json_t **out, struct sbx_error *err)
{
    const json_t *step = pick(sdk, "currentStep", "current_step");
    const char *type = json_string_value(json_object_get(step, "type"));
    json_t *pending = json_array();
    *out = pending;
    if (!type || strcmp(type, "next_step_interruption") != 0)
        return 0;
    size_t i;
    json_t *it;
    json_array_foreach(json_object_get(json_object_get(step, "data"), "interruptions"), i, it)
    {
        const json_t *raw = pick(it, "rawItem", "raw_item");
        const char *rt = json_string_value(json_object_get(raw, "type"));
        const char *id = pick_str(raw, "callId", "call_id");
        const char *tool = pick_str(it, "toolName", "tool_name");
        const char *agent =
                json_string_value(json_object_get(json_object_get(it, "agent"), "name"));
        if (!rt || strcmp(rt, "function_call") != 0 || !id) {
            char where[64];
            snprintf(where, sizeof(where), "currentStep.data.interruptions[%zu]", i);
            return refuse(err, where,
                          "only function tool calls waiting for approval can be carried");
        }
        json_t *call = json_pack("{s:s, s:s, s:O?, s:O?}", "type", "function_call", "call_id", id,
                                 "name", json_object_get(raw, "name"), "arguments",
                                 json_object_get(raw, "arguments"));
        json_t *args = sbx_approval_args(call);
        json_decref(call);
        sbx_json_append(pending,
                        json_pack("{s:s?, s:s?, s:s, s:s, s:o, s:I}", "agent", agent, "tool",
                                  tool ? tool : json_string_value(json_object_get(raw, "name")),
                                  "call_id", id, "type", "function_call", "arguments",
                                  args ? args : json_object(), "turn", turn));
    }
    return 0;
}

/* The decision on pending call p as the runner logs one: bound to the call's id, tool, type,
 * arguments (their digest) and turn. */
static json_t *bound_decision(const json_t *p, int approved)
{
    char digest[SBX__APPROVAL_DIGEST_LEN];
    sbx__approval_digest(json_object_get(p, "arguments"), digest);
    return json_pack("{s:O, s:O, s:O, s:O, s:s, s:b, s:s}", "call_id",
                     json_object_get(p, "call_id"), "tool", json_object_get(p, "tool"), "type",
                     json_object_get(p, "type"), "turn", json_object_get(p, "turn"),
                     "arguments_digest", digest, "approved", approved, "by", SDK_BY);
}

/* The SDK's per-call decisions on pending calls, appended to log. */
static void sdk_call_decisions(const json_t *ids, const json_t *pending, int approved, json_t *log)
{
    size_t i, j;
    json_t *id, *p;
    json_array_foreach((json_t *)ids, i, id)
    {
        json_array_foreach((json_t *)pending, j, p)
        {
            if (json_equal(json_object_get(p, "call_id"), id))
                sbx_json_append(log, bound_decision(p, approved));
        }
    }
}

/* The approvals of the SDK's context: per-call ones for the pending calls go to the decision
 * log (*log); "approved: true" / "rejected: true" (every call of a tool) become sbx's "always"
 * decisions (*always) of turn. A tool name that would be a glob in sbx is refused. */
static int sdk_decisions(const json_t *sdk, const json_t *pending, json_int_t turn, json_t **log,
                         json_t **always, struct sbx_error *err)
{
    const json_t *approvals = json_object_get(json_object_get(sdk, "context"), "approvals");
    const char *tool;
    json_t *rec;
    *log = json_array();
    *always = json_array();
    json_object_foreach((json_t *)approvals, tool, rec)
    {
        static const char *const keys[] = {"approved", "rejected"};
        for (size_t k = 0; k < 2; k++) {
            const json_t *v = json_object_get(rec, keys[k]);
            if (!json_is_true(v)) {
                sdk_call_decisions(v, pending, k == 0, *log);
                continue;
            }
            if (!tool[0] || strpbrk(tool, "*?[]\\")) {
                char field[160];
                snprintf(field, sizeof(field), "context.approvals.%.64s", tool);
                return refuse(err, field,
                              "a decision for every call of a tool needs a plain tool name");
            }
            sbx_json_append(*always, json_pack("{s:s, s:b, s:s, s:I}", "tool", tool, "approved",
                                               k == 0, "by", SDK_BY, "turn", turn));
        }
    }
    return 0;
}

/* Fields whose content sbx cannot take over. */
static int sdk_unsupported(const json_t *sdk, struct sbx_error *err)
{
    const json_t *v;
    if ((v = pick(sdk, "conversationId", "conversation_id")) && !json_is_null(v))
        return refuse(err, "conversationId",
                      "the conversation lives on the model server, which sbx does not use");
    if ((v = pick(sdk, "pendingInput", "pending_input")) && json_array_size(v))
        return refuse(err, "pendingInput", "input queued for the next turn cannot be carried");
    if ((v = pick(sdk, "pendingAgentToolRuns", "pending_agent_tool_runs")) && json_object_size(v))
        return refuse(err, "pendingAgentToolRuns",
                      "a nested agent-as-tool run in progress cannot be carried");
    const json_t *step = pick(sdk, "currentStep", "current_step");
    const char *st = json_string_value(json_object_get(step, "type"));
    if (st && strcmp(st, "next_step_handoff") == 0)
        return refuse(err, "currentStep", "a handoff in progress cannot be carried");
    if (st && strcmp(st, "next_step_final_output") == 0)
        return refuse(err, "currentStep", "the run is finished: there is nothing to continue");
    return 0;
}

static json_t *sdk_usage(const json_t *sdk)
{
    const json_t *u = json_object_get(json_object_get(sdk, "context"), "usage");
    json_int_t in = json_integer_value(pick(u, "inputTokens", "input_tokens"));
    json_int_t out = json_integer_value(pick(u, "outputTokens", "output_tokens"));
    json_int_t total = json_integer_value(pick(u, "totalTokens", "total_tokens"));
    return json_pack("{s:I, s:I, s:I, s:I}", "input_tokens", in, "output_tokens", out,
                     "total_tokens", total ? total : in + out, "requests",
                     json_integer_value(json_object_get(u, "requests")));
}

static int sdk_version_ok(const json_t *sdk, struct sbx_error *err)
{
    const char *v = json_string_value(json_object_get(sdk, "$schemaVersion"));
    if (!v)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "not a run state of the Agents SDK: it has no '$schemaVersion'");
    if (strncmp(v, "1.", 2) != 0 || !v[2] || strspn(v + 2, "0123456789") != strlen(v + 2))
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "SDK run state: '$schemaVersion' %.32s is not one sbx reads (1.x)", v);
    return 0;
}

int sbx_run_state_from_sdk(const json_t *sdk, const struct sbx_run_state_import *opt, json_t **out,
                           struct sbx_error *err)
{
    int rc;
    if (!json_is_object(sdk))
        return sbx_error_set(err, SBX_E_INVAL, 0, "SDK run state: not a JSON object");
    if ((rc = sdk_version_ok(sdk, err)) < 0 || (rc = sdk_unsupported(sdk, err)) < 0)
        return rc;
    const char *cur =
            json_string_value(json_object_get(pick(sdk, "currentAgent", "current_agent"), "name"));
    if (!cur)
        return refuse(err, "currentAgent", "has no name");
    struct sbx_agent **reach = NULL;
    size_t nreach = sbx__run_reachable(opt->start, &reach);
    int found = 0;
    json_t *agents = json_array();
    for (size_t i = 0; i < nreach; i++) {
        found |= strcmp(reach[i]->name, cur) == 0;
        sbx_json_append(agents,
                        json_pack("{s:s, s:s?, s:s?}", "name", reach[i]->name, "file",
                                  reach[i]->source_file, "digest", reach[i]->source_digest));
    }
    free(reach);
    json_t *items = json_array(), *pending = NULL, *decisions = NULL, *always = NULL, *st = NULL;
    json_int_t turn = json_integer_value(pick(sdk, "currentTurn", "current_turn"));
    char rid[33];
    const char *run_id = opt->run_id;
    if (!run_id)
        run_id = json_string_value(json_object_get(opt->sandbox, "run_id"));
    if (!run_id && (rc = sbx_random_hex(rid, 16, err)) < 0)
        goto out;
    if (!run_id)
        run_id = rid;
    if (!found) {
        rc = sbx_error_set(err, SBX_E_INVAL, 0,
                           "SDK run state: its current agent '%s' is not agent '%s' or one it "
                           "hands off to (the agents must match by name)",
                           cur, opt->start->name);
        goto out;
    }
    if ((rc = sdk_input(pick(sdk, "originalInput", "original_input"), items, err)) < 0)
        goto out;
    size_t input_items = json_array_size(items);
    if ((rc = sdk_generated(pick(sdk, "generatedItems", "generated_items"), items, err)) < 0 ||
        (rc = sdk_pending(sdk, turn, &pending, err)) < 0 ||
        (rc = sdk_decisions(sdk, pending, turn, &decisions, &always, err)) < 0)
        goto out;
    json_t *used = json_array();
    const char *an;
    json_t *tl;
    json_object_foreach((json_t *)pick(sdk, "toolUseTracker", "tool_use_tracker"), an, tl)
    {
        if (json_array_size(tl))
            sbx_json_append(used, json_string(an));
    }
    const json_t *mt = pick(sdk, "maxTurns", "max_turns");
    char now[SBX_TIME_RFC3339_LEN];
    sbx_time_rfc3339(sbx_time_real_ns(), now);
    st = json_object();
    sbx_json_set(st, "format", json_string(SBX_RUN_STATE_FORMAT));
    sbx_json_set(st, "version", json_integer(SBX_RUN_STATE_VERSION));
    sbx_json_set(st, "run_id", sbx_json_str(run_id));
    sbx_json_set(st, "status", json_string(json_array_size(pending) ? "interrupted" : "running"));
    sbx_json_set(st, "error", json_null());
    sbx_json_set(st, "updated_at", json_string(now));
    sbx_json_set(st, "start_agent", json_string(opt->start->name));
    sbx_json_set(st, "current_agent", json_string(cur));
    sbx_json_set(st, "agents", agents);
    agents = NULL;
    sbx_json_set(st, "agent_files",
                 opt->agent_files ? json_deep_copy(opt->agent_files) : json_null());
    sbx_json_set(st, "turn", json_integer(turn));
    sbx_json_set(
            st, "max_turns",
            json_integer(json_is_integer(mt) ? json_integer_value(mt) : SBX_RUN_DEFAULT_MAX_TURNS));
    sbx_json_set(st, "open_calls", open_calls_of(items));
    sbx_json_set(st, "items", items);
    items = NULL;
    sbx_json_set(st, "input_items", json_integer((json_int_t)input_items));
    sbx_json_set(st, "usage", sdk_usage(sdk));
    sbx_json_set(st, "model", json_null());
    sbx_json_set(st, "model_settings", json_null());
    sbx_json_set(st, "previous_response_id", json_null());
    sbx_json_set(st, "sent_upto", json_integer(0));
    sbx_json_set(st, "tools_used", used);
    sbx_json_set(st, "conversation", json_null());
    sbx_json_set(st, "pending", pending);
    pending = NULL;
    sbx_json_set(st, "decisions", decisions);
    decisions = NULL;
    sbx_json_set(st, "always", always);
    always = NULL;
    sbx_json_set(st, "final_output", json_null());
    sbx_json_set(st, "sandbox", opt->sandbox ? json_deep_copy(opt->sandbox) : json_null());
    sbx_json_set(st, "meta", opt->meta ? json_deep_copy(opt->meta) : json_null());
    *out = st;
    st = NULL;
out:
    json_decref(agents);
    json_decref(items);
    json_decref(pending);
    json_decref(decisions);
    json_decref(always);
    json_decref(st);
    return rc;
}

/* ---- an sbx state as the JS SDK's RunState -------------------------------------------------- */

static const char *call_name(const json_t *items, const char *call_id)
{
    size_t i;
    json_t *it;
    json_array_foreach(items, i, it)
    {
        const char *t = json_string_value(json_object_get(it, "type"));
        const char *id = json_string_value(json_object_get(it, "call_id"));
        if (t && id && strcmp(t, "function_call") == 0 && strcmp(id, call_id) == 0)
            return json_string_value(json_object_get(it, "name"));
    }
    return NULL;
}

/* Message content as the JS protocol's parts (the part types are the Responses ones). */
static json_t *js_content(const json_t *c, const char *role)
{
    if (json_is_string(c) && strcmp(role, "assistant") == 0)
        return json_pack("[{s:s, s:O}]", "type", "output_text", "text", c);
    return json_deep_copy(c);
}

static int js_item(const json_t *items, const json_t *it, size_t i, json_t **out,
                   struct sbx_error *err)
{
    const char *type = json_string_value(json_object_get(it, "type"));
    const char *role = json_string_value(json_object_get(it, "role"));
    char where[48];
    snprintf(where, sizeof(where), "items[%zu]", i);
    if ((!type || strcmp(type, "message") == 0) && role) {
        json_t *m = json_pack("{s:s, s:s, s:o}", "type", "message", "role", role, "content",
                              js_content(json_object_get(it, "content"), role));
        if (strcmp(role, "assistant") == 0)
            sbx_json_set(m, "status", json_string("completed"));
        if (json_is_string(json_object_get(it, "id")))
            sbx_json_set(m, "id", json_incref(json_object_get(it, "id")));
        *out = m;
        return 0;
    }
    const char *id = json_string_value(json_object_get(it, "call_id"));
    if (type && id && strcmp(type, "function_call") == 0) {
        const json_t *args = json_object_get(it, "arguments");
        *out = json_pack("{s:s, s:s, s:O?, s:s, s:o}", "type", "function_call", "callId", id,
                         "name", json_object_get(it, "name"), "status", "completed", "arguments",
                         json_is_string(args) ? json_incref((json_t *)args) : json_string("{}"));
        if (json_is_string(json_object_get(it, "id")))
            sbx_json_set(*out, "id", json_incref(json_object_get(it, "id")));
        return 0;
    }
    if (type && id && strcmp(type, "function_call_output") == 0) {
        const char *name = call_name(items, id);
        const json_t *o = json_object_get(it, "output");
        *out = json_pack("{s:s, s:s, s:s, s:s, s:o}", "type", "function_call_result", "callId", id,
                         "name", name ? name : "", "status", "completed", "output",
                         json_is_string(o) ? json_pack("{s:s, s:O}", "type", "text", "text", o)
                                           : json_deep_copy(o));
        return 0;
    }
    char why[160];
    snprintf(why, sizeof(why), "an item of type '%.64s' has no counterpart in the SDK's RunState",
             type ? type : "(none)");
    return refuse(err, where, why);
}

/* The run item wrapping a JS protocol item. */
static json_t *js_run_item(json_t *raw, const char *agent)
{
    const char *t = json_string_value(json_object_get(raw, "type"));
    const char *kind = strcmp(t, "message") == 0         ? "message_output_item"
                       : strcmp(t, "function_call") == 0 ? "tool_call_item"
                                                         : "tool_call_output_item";
    json_t *ri =
            json_pack("{s:s, s:o, s:{s:s}}", "type", kind, "rawItem", raw, "agent", "name", agent);
    if (strcmp(kind, "tool_call_output_item") == 0) {
        const json_t *o = json_object_get(raw, "output");
        sbx_json_set(
                ri, "output",
                json_incref(json_object_get(o, "text") ? json_object_get(o, "text") : (json_t *)o));
    }
    return ri;
}

static int js_items(const json_t *st, json_t **orig, json_t **gen, struct sbx_error *err)
{
    const json_t *items = json_object_get(st, "items");
    size_t nin = (size_t)json_integer_value(json_object_get(st, "input_items"));
    const char *agent = json_string_value(json_object_get(st, "current_agent"));
    *orig = json_array();
    *gen = json_array();
    size_t i;
    json_t *it;
    json_array_foreach(items, i, it)
    {
        json_t *raw = NULL;
        int rc = js_item(items, it, i, &raw, err);
        if (rc < 0)
            return rc;
        if (i < nin) {
            const char *role = json_string_value(json_object_get(raw, "role"));
            if (!role || strcmp(role, "assistant") == 0) {
                json_decref(raw);
                return refuse(err, "input_items", "the SDK's input holds only user messages");
            }
            sbx_json_append(*orig, raw);
        } else {
            sbx_json_append(*gen, js_run_item(raw, agent));
        }
    }
    return 0;
}

/* The interruptions (approval items) of the pending calls and the processed response whose
 * function calls the SDK runs once they are decided. */
static void js_pending(const json_t *st, json_t *gen, json_t **interruptions, json_t **processed)
{
    const json_t *items = json_object_get(st, "items");
    json_t *newi = json_array(), *fns = json_array(), *used = json_array();
    *interruptions = json_array();
    size_t i, j;
    json_t *oc, *it;
    json_array_foreach(json_object_get(st, "open_calls"), i, oc)
    {
        json_array_foreach((json_t *)items, j, it)
        {
            const char *id = json_string_value(json_object_get(it, "call_id"));
            const char *t = json_string_value(json_object_get(it, "type"));
            if (!id || !t || strcmp(t, "function_call") != 0 ||
                strcmp(id, json_string_value(oc)) != 0)
                continue;
            json_t *raw = NULL;
            if (js_item(items, it, j, &raw, NULL) < 0)
                continue;
            const char *name = json_string_value(json_object_get(it, "name"));
            sbx_json_append(newi,
                            js_run_item(json_deep_copy(raw),
                                        json_string_value(json_object_get(st, "current_agent"))));
            sbx_json_append(fns, json_pack("{s:O, s:{s:s, s:s}, s:n}", "toolCall", raw, "tool",
                                           "type", "function", "name", name, "mcpToolBinding"));
            sbx_json_append(used, json_string(name));
            json_decref(raw);
        }
    }
    json_array_foreach(json_object_get(st, "pending"), i, it)
    {
        const char *id = json_string_value(json_object_get(it, "call_id"));
        json_array_foreach((json_t *)items, j, oc)
        {
            const char *cid = json_string_value(json_object_get(oc, "call_id"));
            const char *t = json_string_value(json_object_get(oc, "type"));
            json_t *raw = NULL;
            if (!cid || !t || strcmp(t, "function_call") != 0 || strcmp(cid, id) != 0 ||
                js_item(items, oc, j, &raw, NULL) < 0)
                continue;
            json_t *ap = json_pack("{s:s, s:o, s:{s:O}, s:O}", "type", "tool_approval_item",
                                   "rawItem", raw, "agent", "name", json_object_get(it, "agent"),
                                   "toolName", json_object_get(it, "tool"));
            sbx_json_append(*interruptions, json_deep_copy(ap));
            sbx_json_append(gen, ap);
        }
    }
    *processed = json_pack("{s:o, s:o, s:[], s:o, s:[], s:[], s:[], s:[], s:[]}", "newItems", newi,
                           "toolsUsed", used, "handoffs", "functions", fns, "functionToolsNotFound",
                           "computerActions", "shellActions", "applyPatchActions",
                           "mcpApprovalRequests");
}

/* The model's last response as the SDK keeps it: the trailing run of model output (assistant
 * messages and calls) in the items. */
static json_t *js_last_response(const json_t *st, json_t *usage)
{
    const json_t *items = json_object_get(st, "items");
    size_t n = json_array_size(items), from = n;
    while (from > (size_t)json_integer_value(json_object_get(st, "input_items"))) {
        const json_t *it = json_array_get(items, from - 1);
        const char *t = json_string_value(json_object_get(it, "type"));
        const char *role = json_string_value(json_object_get(it, "role"));
        int model =
                (t && strcmp(t, "function_call") == 0) || (role && strcmp(role, "assistant") == 0);
        if (!model)
            break;
        from--;
    }
    json_t *out = json_array();
    for (size_t i = from; i < n; i++) {
        json_t *raw = NULL;
        if (js_item(items, json_array_get(items, i), i, &raw, NULL) == 0)
            sbx_json_append(out, raw);
    }
    return json_pack("{s:o, s:o}", "usage", usage, "output", out);
}

static json_t *js_usage(const json_t *u)
{
    return json_pack("{s:I, s:I, s:I, s:I, s:[], s:[]}", "requests",
                     json_integer_value(json_object_get(u, "requests")), "inputTokens",
                     json_integer_value(json_object_get(u, "input_tokens")), "outputTokens",
                     json_integer_value(json_object_get(u, "output_tokens")), "totalTokens",
                     json_integer_value(json_object_get(u, "total_tokens")), "inputTokensDetails",
                     "outputTokensDetails");
}

/* The SDK's approval record of tool in approvals, made when missing. */
static json_t *js_record(json_t *approvals, const char *tool)
{
    json_t *rec = json_object_get(approvals, tool);
    if (!rec) {
        rec = json_pack("{s:[], s:[]}", "approved", "rejected");
        sbx_json_set(approvals, tool, rec);
    }
    return rec;
}

/* The pending call a logged decision answers: the same id, tool, type, turn and arguments. */
static const json_t *decided_pending(const json_t *st, const json_t *d)
{
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(st, "pending"), i, p)
    {
        char digest[SBX__APPROVAL_DIGEST_LEN];
        const json_t *pt = json_object_get(p, "turn");
        sbx__approval_digest(json_object_get(p, "arguments"), digest);
        if (json_equal(json_object_get(p, "call_id"), json_object_get(d, "call_id")) &&
            json_equal(json_object_get(p, "tool"), json_object_get(d, "tool")) &&
            json_equal(json_object_get(p, "type"), json_object_get(d, "type")) &&
            json_equal(pt ? pt : json_object_get(st, "turn"), json_object_get(d, "turn")) &&
            json_is_string(json_object_get(d, "arguments_digest")) &&
            strcmp(json_string_value(json_object_get(d, "arguments_digest")), digest) == 0)
            return p;
    }
    return NULL;
}

/* The tool names the state's calls use that glob matches. */
static json_t *tools_matching(const json_t *st, const char *glob)
{
    json_t *names = json_array();
    size_t i, j;
    json_t *it, *n;
    json_array_foreach(json_object_get(st, "items"), i, it)
    {
        const char *t = json_string_value(json_object_get(it, "type"));
        const char *name = json_string_value(json_object_get(it, "name"));
        int seen = 0;
        if (!t || !name || strcmp(t, "function_call") != 0 || fnmatch(glob, name, 0) != 0)
            continue;
        json_array_foreach(names, j, n)
        {
            seen |= strcmp(json_string_value(n), name) == 0;
        }
        if (!seen)
            sbx_json_append(names, json_string(name));
    }
    return names;
}

/* As the SDK's per-tool approval records: the logged decisions that answer a call still pending
 * (bound to it as the runner binds them), and the "always" decisions the caller trusts (true
 * for every call of the tool; a glob for each tool of the state's calls it matches; an
 * approval wins over a rejection, as in sbx). */
static json_t *js_approvals(const json_t *st, const json_t *always)
{
    json_t *out = json_object();
    size_t i;
    json_t *d;
    json_array_foreach(json_object_get(st, "decisions"), i, d)
    {
        const json_t *p = json_is_object(d) ? decided_pending(st, d) : NULL;
        if (!p)
            continue;
        json_t *rec = js_record(out, json_string_value(json_object_get(p, "tool")));
        sbx_json_append(json_object_get(rec, json_is_true(json_object_get(d, "approved"))
                                                     ? "approved"
                                                     : "rejected"),
                        json_incref(json_object_get(p, "call_id")));
    }
    for (int pass = 0; pass < 2; pass++) {
        /* Rejections first, so that an approval of the same tool replaces them. */
        json_array_foreach((json_t *)always, i, d)
        {
            const char *glob = json_string_value(json_object_get(d, "tool"));
            int approved = json_is_true(json_object_get(d, "approved"));
            if (!glob || approved != pass)
                continue;
            json_t *names =
                    strpbrk(glob, "*?[\\") ? tools_matching(st, glob) : json_pack("[s]", glob);
            size_t j;
            json_t *n;
            json_array_foreach(names, j, n)
            {
                json_t *rec = js_record(out, json_string_value(n));
                sbx_json_set(rec, approved ? "approved" : "rejected", json_true());
                if (approved)
                    sbx_json_set(rec, "rejected", json_array());
            }
            json_decref(names);
        }
    }
    return out;
}

int sbx_run_state_to_sdk(const json_t *st, const json_t *always, json_t **out,
                         struct sbx_error *err)
{
    const char *status = json_string_value(json_object_get(st, "status"));
    const char *agent = json_string_value(json_object_get(st, "current_agent"));
    const json_t *sb = json_object_get(st, "sandbox");
    if (!status || !agent)
        return sbx_error_set(err, SBX_E_INVAL, 0, "run state: not a parsed run state");
    if (strcmp(status, "completed") == 0)
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "run state: field 'status': the run completed; there is nothing to "
                             "continue");
    if (json_is_object(sb) && json_object_size(sb))
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "run state: field 'sandbox': sbx sandboxes cannot be carried into "
                             "the SDK's RunState (its sandbox clients make their own)");
    if (json_array_size(json_object_get(st, "open_calls")) &&
        !json_array_size(json_object_get(st, "pending")))
        return sbx_error_set(err, SBX_E_UNSUPPORTED, 0,
                             "run state: field 'open_calls': tool calls that were running when "
                             "the run stopped cannot be carried; resume it with sbx first");
    json_t *orig = NULL, *gen = NULL, *interruptions = NULL, *processed = NULL;
    int rc = js_items(st, &orig, &gen, err);
    if (rc < 0) {
        json_decref(orig);
        json_decref(gen);
        return rc;
    }
    int waiting = json_array_size(json_object_get(st, "pending")) > 0;
    js_pending(st, gen, &interruptions, &processed);
    json_t *tracker = json_object();
    size_t i;
    json_t *a;
    json_array_foreach(json_object_get(st, "tools_used"), i, a)
    {
        json_t *names = json_array();
        size_t j;
        json_t *it;
        json_array_foreach(json_object_get(st, "items"), j, it)
        {
            const char *t = json_string_value(json_object_get(it, "type"));
            if (t && strcmp(t, "function_call") == 0)
                sbx_json_append(names, json_incref(json_object_get(it, "name")));
        }
        sbx_json_set(tracker, json_string_value(a), names);
    }
    json_t *js = json_object();
    sbx_json_set(js, "$schemaVersion", json_string(SDK_JS_VERSION));
    sbx_json_set(js, "currentTurn", json_incref(json_object_get(st, "turn")));
    sbx_json_set(js, "currentAgent", json_pack("{s:s}", "name", agent));
    sbx_json_set(js, "originalInput", orig);
    json_t *last = js_last_response(st, js_usage(json_object_get(st, "usage")));
    sbx_json_set(js, "modelResponses", json_pack("[O]", last));
    sbx_json_set(js, "lastModelResponse", last);
    /* Schema 1.18 and later need the invocation records, empty when nothing ran twice. */
    sbx_json_set(js, "context",
                 json_pack("{s:o, s:o, s:[], s:{}}", "usage",
                           js_usage(json_object_get(st, "usage")), "approvals",
                           js_approvals(st, always), "approvalInvocations", "context"));
    sbx_json_set(js, "completedToolInvocations", json_array());
    sbx_json_set(js, "completedToolInvocationEvidence", json_array());
    sbx_json_set(js, "ambiguousToolInvocationCallIds", json_array());
    sbx_json_set(js, "toolUseTracker", tracker);
    sbx_json_set(js, "maxTurns", json_incref(json_object_get(st, "max_turns")));
    sbx_json_set(js, "noActiveAgentRun", json_true());
    sbx_json_set(js, "currentAgentSpan", json_null());
    /* An agent file's guardrails are sbx's own (its state keeps "guardrails" and "tripwire");
     * the SDK reader gets the input's as complete and no results. */
    sbx_json_set(js, "inputGuardrailResults", json_array());
    sbx_json_set(js, "initialInputGuardrailsCompleted", json_true());
    sbx_json_set(js, "outputGuardrailResults", json_array());
    sbx_json_set(js, "toolInputGuardrailResults", json_array());
    sbx_json_set(js, "toolOutputGuardrailResults", json_array());
    sbx_json_set(js, "pendingAgentToolRuns", json_object());
    sbx_json_set(js, "pendingAgentToolRunAliases", json_object());
    sbx_json_set(js, "currentTurnPersistedItemCount", json_integer(0));
    sbx_json_set(js, "currentTurnInProgress", json_boolean(waiting));
    sbx_json_set(js, "currentStep",
                 waiting ? json_pack("{s:s, s:{s:o}}", "type", "next_step_interruption", "data",
                                     "interruptions", interruptions)
                         : json_pack("{s:s}", "type", "next_step_run_again"));
    if (!waiting)
        json_decref(interruptions);
    sbx_json_set(js, "generatedItems", gen);
    if (waiting)
        sbx_json_set(js, "lastProcessedResponse", processed);
    else
        json_decref(processed);
    sbx_json_set(js, "trace", json_null());
    *out = js;
    return 0;
}
