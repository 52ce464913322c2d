/* Running guardrails and hooks (docs/internals/guardrails.md). */
#include <fnmatch.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "agent/guard.h"
#include "agent/runner-internal.h"
#include "sbx/json.h"
#include "sbx/trace.h"

#define ANSWER_MAX   ((size_t)1 << 20) /* bytes of a check's JSON answer read */
#define INFO_EXCERPT 300               /* bytes of a tripped guardrail's info in its message */

static int streq(const char *a, const char *b)
{
    return a && b && strcmp(a, b) == 0;
}

static const char *const kind_names[] = {"input", "output", "tool_input", "tool_output"};
static const char *const kind_labels[] = {"input", "output", "tool input", "tool output"};

enum behavior {
    BEHAVIOR_NONE = -1, /* the guardrail's own (its file entry's behavior) */
    BEHAVIOR_ALLOW,
    BEHAVIOR_REJECT,
    BEHAVIOR_RAISE,
};

struct verdict {
    int triggered;
    enum behavior behavior; /* a tool guardrail's answer may name what a trip does */
    json_t *info;
    char *message; /* tool guardrails and hooks: what the model reads */
};

static void verdict_release(struct verdict *v)
{
    json_decref(v->info);
    free(v->message);
    *v = (struct verdict){0};
}

/* Run one check on payload: a command gets it as JSON on stdin (its stdout in *text); an
 * agent gets agent_input and its final output (*text, and *json when structured). */
static int run_check(const struct run *r, const struct sbx__check *c, struct sbx_agent *a,
                     struct sbx_session *session, const json_t *payload, const json_t *agent_input,
                     char **text, json_t **json, struct sbx_error *err)
{
    if (c->cmd) {
        struct sbx_tool_call call = {
                .call_id = "",
                .name = c->cmd->name,
                .agent = a,
                .run = r->opt,
                .context = r->opt->context,
                .data = c->cmd->data,
                .session = session,
        };
        struct sbx_tool_output out;
        sbx_buf_init(&out.text, SBX_TOOL_OUTPUT_MAX);
        out.parts = NULL;
        int rc = c->cmd->fn(payload, &call, &out, err);
        json_decref(out.parts);
        if (rc < 0) {
            sbx_buf_release(&out.text);
            return rc;
        }
        *text = sbx_buf_detach(&out.text, NULL);
        return 0;
    }
    struct sbx_run_result *res = NULL;
    int rc = sbx__run_nested(c->agent, agent_input, r->opt, c->max_turns, &res, err);
    if (rc < 0)
        return rc;
    *text = sbx_xstrdup(sbx_run_result_text(res));
    const json_t *j = sbx_run_result_json(res);
    *json = j ? json_deep_copy(j) : NULL;
    sbx_run_result_free(res);
    return 0;
}

/* A command's answer: nothing (NULL in *out), or one JSON object. */
static int answer_object(const char *text, json_t **out, struct sbx_error *err)
{
    size_t n = strlen(text);
    while (n && strchr(" \t\r\n", text[n - 1]))
        n--;
    *out = NULL;
    if (!n)
        return 0;
    struct sbx_json_limits lim = {.max_bytes = ANSWER_MAX, .max_depth = 32};
    json_t *v = NULL;
    int rc = sbx_json_parse(text, n, &lim, &v, err);
    if (rc == 0 && !json_is_object(v)) {
        json_decref(v);
        rc = sbx_error_set(err, SBX_E_PARSE, 0, "answered with JSON that is not an object");
    }
    if (rc < 0)
        return rc;
    *out = v;
    return 0;
}

/* A tool guardrail's "behavior" answer (the reference SDK's allow, reject_content,
 * raise_exception), BEHAVIOR_NONE when it gave none. */
static int answer_behavior(const json_t *obj, enum behavior *out, struct sbx_error *err)
{
    static const char *const names[] = {"allow", "reject_content", "raise_exception"};
    const json_t *b = json_object_get(obj, "behavior");
    *out = BEHAVIOR_NONE;
    if (!b || json_is_null(b))
        return 0;
    for (int i = 0; i < 3; i++) {
        if (streq(json_string_value(b), names[i])) {
            *out = (enum behavior)i;
            return 0;
        }
    }
    return sbx_error_set(err, SBX_E_PARSE, 0,
                         "answered with a \"behavior\" other than \"allow\", \"reject_content\" "
                         "or \"raise_exception\"");
}

/* A guardrail's verdict: a command's {"tripwire_triggered": bool, "info"?, "message"?} (no
 * answer at all passes), an agent's structured output (its tripwire field; info: the whole
 * output). A tool guardrail's answer may say "behavior" instead of (or besides) the tripwire:
 * allow passes, reject_content and raise_exception trip and say how. */
static int guard_verdict(const struct sbx__check *c, int tool, const char *text, const json_t *json,
                         struct verdict *v, struct sbx_error *err)
{
    json_t *obj = NULL;
    int rc = 0;
    if (c->agent) {
        if (!json_is_object(json))
            return sbx_error_set(err, SBX_E_API, 0, "the agent gave no structured output");
        obj = json_incref((json_t *)json);
    } else if ((rc = answer_object(text, &obj, err)) < 0 || !obj) {
        return rc;
    }
    const json_t *t = json_object_get(obj, c->field);
    v->behavior = BEHAVIOR_NONE;
    if (tool && (rc = answer_behavior(obj, &v->behavior, err)) < 0) {
        json_decref(obj);
        return rc;
    }
    if (v->behavior == BEHAVIOR_NONE && !json_is_boolean(t)) {
        rc = sbx_error_set(err, SBX_E_PARSE, 0, "answered without a boolean '%s'", c->field);
    } else {
        v->triggered =
                v->behavior == BEHAVIOR_NONE ? json_is_true(t) : v->behavior != BEHAVIOR_ALLOW;
        const json_t *info = c->agent ? obj : json_object_get(obj, "info");
        v->info = info ? json_deep_copy(info) : NULL;
        const char *m = json_string_value(json_object_get(obj, "message"));
        v->message = m ? sbx_xstrdup(m) : NULL;
    }
    json_decref(obj);
    return rc;
}

/* Run guardrail c inside its "guardrail" span (a child of parent). */
static int guard_one(const struct run *r, const struct sbx__check *c, enum sbx__guard_kind kind,
                     struct sbx_agent *a, struct sbx_session *session, const json_t *payload,
                     const json_t *agent_input, struct sbx_span *parent, struct verdict *v,
                     struct sbx_error *err)
{
    char *text = NULL;
    json_t *json = NULL;
    struct sbx_span *s = sbx_span_start(parent, "guardrail", SBX_SPAN_INTERNAL);
    sbx_span_set_str(s, "sbx.guardrail.name", c->name);
    sbx_span_set_str(s, "sbx.guardrail.kind", kind_names[kind]);
    struct sbx_span *prev = sbx_trace_set_current(s);
    json_t *p = json_deep_copy(payload);
    sbx_json_set(p, "guardrail", sbx_json_str(c->name));
    int rc = run_check(r, c, a, session, p, agent_input, &text, &json, err);
    if (rc == 0)
        rc = guard_verdict(c, kind >= SBX__GUARD_TOOL_INPUT, text, json, v, err);
    if (rc < 0) {
        sbx_error_prefix(err, "%s guardrail '%s'", kind_labels[kind], c->name);
        sbx_span_set_status(s, 0, err->msg);
    } else {
        sbx_span_set_bool(s, "sbx.guardrail.triggered", v->triggered);
        if (v->info) {
            char *it = sbx_json_dumps(v->info, SBX_JSON_COMPACT);
            sbx_span_set_content(s, "sbx.guardrail.info", it, strlen(it));
            free(it);
        }
    }
    sbx_trace_set_current(prev);
    sbx_span_end(s);
    json_decref(p);
    json_decref(json);
    free(text);
    return rc;
}

/* The GUARDRAIL event's item. */
static json_t *verdict_item(const struct sbx__check *c, enum sbx__guard_kind kind,
                            const struct verdict *v)
{
    json_t *o = json_pack("{s:s, s:s, s:b}", "guardrail", c->name, "kind", kind_names[kind],
                          "triggered", v->triggered);
    if (v->info)
        sbx_json_set(o, "info", json_deep_copy(v->info));
    return o;
}

/* "input guardrail 'x' tripped: <info>" as -SBX_E_TRIPWIRE. */
static int trip_error(const json_t *item, struct sbx_error *err)
{
    const json_t *info = json_object_get(item, "info");
    char *it = info ? sbx_json_dumps(info, SBX_JSON_COMPACT) : NULL;
    size_t n = it ? strlen(it) : 0;
    const char *kind = json_string_value(json_object_get(item, "kind"));
    int rc = sbx_error_set(err, SBX_E_TRIPWIRE, 0, "%s guardrail '%s' tripped%s%.*s%s",
                           streq(kind, "tool_input")    ? "tool input"
                           : streq(kind, "tool_output") ? "tool output"
                                                        : kind,
                           json_string_value(json_object_get(item, "guardrail")), it ? ": " : "",
                           (int)(n > INFO_EXCERPT ? INFO_EXCERPT : n), it ? it : "",
                           n > INFO_EXCERPT ? "..." : "");
    free(it);
    return rc;
}

/* The same, on the run's thread: the verdict is kept for the run state. */
static int tripped(struct run *r, const json_t *item, struct sbx_error *err)
{
    json_decref(r->tripwire);
    r->tripwire = json_deep_copy(item);
    return trip_error(item, err);
}

static void emit_verdict(struct run *r, json_t *item, const char *tool)
{
    struct sbx_event ev = {.type = SBX_EVENT_GUARDRAIL, .item = item, .tool = tool};
    sbx__run_emit(r, &ev);
}

/* Input guardrails. */

struct sbx__guard_pending {
    struct run *r;
    struct sbx_agent *agent;
    struct sbx_session *session;
    struct sbx_span *parent;
    json_t *payload, *agent_input;
    const struct sbx__check **v;
    size_t n, ran;
    struct verdict *verdicts;
    int rc;
    struct sbx_error err;
    pthread_t th;
    int started;
};

/* The parallel guardrails, in file order, until one trips or fails. */
static void *pending_thread(void *data)
{
    struct sbx__guard_pending *p = data;
    for (size_t i = 0; i < p->n; i++) {
        p->rc = guard_one(p->r, p->v[i], SBX__GUARD_INPUT, p->agent, p->session, p->payload,
                          p->agent_input, p->parent, &p->verdicts[i], &p->err);
        p->ran = i + 1;
        if (p->rc < 0 || p->verdicts[i].triggered)
            break;
    }
    return NULL;
}

static void pending_free(struct sbx__guard_pending *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n; i++)
        verdict_release(&p->verdicts[i]);
    free(p->verdicts);
    free(p->v);
    json_decref(p->payload);
    json_decref(p->agent_input);
    free(p);
}

static struct sbx__guard_pending *pending_new(struct run *r, const struct sbx__guards *g)
{
    struct sbx__guard_pending *p = sbx_xcalloc(1, sizeof(*p));
    json_t *input = json_array();
    for (size_t i = r->input_first; i < r->input_items; i++)
        sbx_json_append(input, json_incref(json_array_get(r->items, i)));
    p->r = r;
    p->agent = r->start;
    p->session = r->agent == r->start ? r->session : NULL;
    p->parent = sbx_trace_current();
    p->payload =
            json_pack("{s:s, s:s, s:O}", "kind", "input", "agent", r->start->name, "input", input);
    p->agent_input = input;
    p->v = sbx_xcalloc(g->ninput, sizeof(*p->v));
    p->verdicts = sbx_xcalloc(g->ninput, sizeof(*p->verdicts));
    return p;
}

/* Report the verdicts of p's guardrails that ran; the first trip or failure is returned. */
static int pending_report(struct run *r, struct sbx__guard_pending *p, struct sbx_error *err)
{
    for (size_t i = 0; i < p->ran; i++) {
        if (i + 1 == p->ran && p->rc < 0)
            break;
        json_t *item = verdict_item(p->v[i], SBX__GUARD_INPUT, &p->verdicts[i]);
        emit_verdict(r, item, NULL);
        int rc = p->verdicts[i].triggered ? tripped(r, item, err) : 0;
        json_decref(item);
        if (rc < 0)
            return rc;
    }
    if (p->rc < 0) {
        sbx_error_copy(err, &p->err);
        return p->rc;
    }
    return 0;
}

int sbx__guard_input_begin(struct run *r, struct sbx__guard_pending **out, struct sbx_error *err)
{
    /* The start agent's, as in the reference SDK (a resumed state may be at another agent). */
    const struct sbx__guards *g = r->start->guards;
    *out = NULL;
    if (!g || !g->ninput)
        return 0;
    struct sbx__guard_pending *seq = pending_new(r, g), *par = pending_new(r, g);
    for (size_t i = 0; i < g->ninput; i++) {
        if (g->input[i].parallel)
            par->v[par->n++] = &g->input[i];
        else
            seq->v[seq->n++] = &g->input[i];
    }
    pending_thread(seq);
    int rc = pending_report(r, seq, err);
    pending_free(seq);
    if (rc < 0 || !par->n) {
        pending_free(par);
        r->input_guarded = rc == 0;
        return rc;
    }
    par->started = pthread_create(&par->th, NULL, pending_thread, par) == 0;
    if (!par->started)
        pending_thread(par);
    *out = par;
    return 0;
}

int sbx__guard_input_end(struct run *r, struct sbx__guard_pending *p, struct sbx_error *err)
{
    if (!p)
        return 0;
    if (p->started)
        pthread_join(p->th, NULL);
    int rc = pending_report(r, p, err);
    pending_free(p);
    r->input_guarded = rc == 0;
    return rc;
}

int sbx__guard_output(struct run *r, const char *text, const json_t *json, struct sbx_error *err)
{
    const struct sbx__guards *g = r->agent->guards;
    if (!g || !g->noutput)
        return 0;
    json_t *payload =
            json_pack("{s:s, s:s, s:s}", "kind", "output", "agent", r->agent->name, "output", text);
    if (json)
        sbx_json_set(payload, "output_json", json_deep_copy(json));
    json_t *agent_input = sbx_json_str(text);
    int rc = 0;
    for (size_t i = 0; i < g->noutput && rc == 0; i++) {
        struct verdict v = {0};
        rc = guard_one(r, &g->output[i], SBX__GUARD_OUTPUT, r->agent, r->session, payload,
                       agent_input, r->agent_span, &v, err);
        if (rc == 0) {
            json_t *item = verdict_item(&g->output[i], SBX__GUARD_OUTPUT, &v);
            emit_verdict(r, item, NULL);
            if (v.triggered)
                rc = tripped(r, item, err);
            json_decref(item);
        }
        verdict_release(&v);
    }
    json_decref(payload);
    json_decref(agent_input);
    return rc;
}

/* Tool guardrails. */

static int globs_match(const json_t *globs, const char *name)
{
    size_t i;
    json_t *g;
    json_array_foreach(globs, i, g)
    {
        if (name && fnmatch(json_string_value(g), name, 0) == 0)
            return 1;
    }
    return 0;
}

static int tool_checks(struct job *j, enum sbx__guard_kind kind, const struct sbx__check *cs,
                       size_t n, json_t *payload, struct sbx_error *err)
{
    int rc = 0;
    char *ask = sbx_json_dumps(payload, SBX_JSON_COMPACT);
    json_t *agent_input = sbx_json_str(ask);
    free(ask);
    for (size_t i = 0; i < n && rc == 0; i++) {
        struct verdict v = {0};
        rc = guard_one(j->run, &cs[i], kind, j->agent, j->run->session, payload, agent_input,
                       j->span, &v, err);
        if (rc < 0)
            break;
        json_t *item = verdict_item(&cs[i], kind, &v);
        sbx_json_set(item, "tool", sbx_json_str(j->tool->name));
        sbx_json_set(item, "call_id", sbx_json_str(j->call_id));
        /* What a trip does: the answer's say, else the entry's. */
        int raise = v.behavior == BEHAVIOR_RAISE || (v.behavior == BEHAVIOR_NONE && cs[i].raise);
        if (v.triggered)
            sbx_json_set(item, "behavior",
                         sbx_json_str(raise ? "raise_exception" : "reject_content"));
        if (!j->guard_events)
            j->guard_events = json_array();
        sbx_json_append(j->guard_events, json_incref(item));
        if (v.triggered && raise) {
            rc = trip_error(item, err);
        } else if (v.triggered) {
            char *text =
                    v.message ? sbx_xstrdup(v.message)
                              : sbx_xasprintf("guardrail '%s' rejected this tool call", cs[i].name);
            sbx__job_refuse(j, text);
            /* Refused before it ran: the tool did not run (no tool_end hook, no tool-use stop). */
            j->rejected = kind == SBX__GUARD_TOOL_INPUT;
            free(text);
            rc = 1;
        }
        json_decref(item);
        verdict_release(&v);
    }
    json_decref(agent_input);
    return rc;
}

/* The tool guardrails of every entry of the agent's that names the job's tool, in file order,
 * until one refuses the call or fails. */
static int tool_guards(struct job *j, enum sbx__guard_kind kind, json_t *payload,
                       struct sbx_error *err)
{
    const struct sbx__guards *g = j->agent->guards;
    int rc = 0;
    for (size_t i = 0; g && j->tool && i < g->ntools && rc == 0; i++) {
        const struct sbx__tool_guards *tg = &g->tools[i];
        if (!globs_match(tg->tools, j->tool->name))
            continue;
        if (kind == SBX__GUARD_TOOL_INPUT)
            rc = tool_checks(j, kind, tg->in, tg->nin, payload, err);
        else
            rc = tool_checks(j, kind, tg->out, tg->nout, payload, err);
    }
    return rc;
}

int sbx__guard_tool_input(struct job *j, const json_t *args, struct sbx_error *err)
{
    if (!j->agent->guards || !j->agent->guards->ntools)
        return 0;
    json_t *payload =
            json_pack("{s:s, s:s, s:s, s:s, s:O?}", "kind", "tool_input", "agent", j->agent->name,
                      "tool", j->tool->name, "call_id", j->call_id, "arguments", args);
    int rc = tool_guards(j, SBX__GUARD_TOOL_INPUT, payload, err);
    json_decref(payload);
    return rc;
}

int sbx__guard_tool_output(struct job *j, struct sbx_error *err)
{
    if (!j->agent->guards || !j->agent->guards->ntools || !j->output)
        return 0;
    json_t *payload = json_pack("{s:s, s:s, s:s, s:s, s:s, s:b}", "kind", "tool_output", "agent",
                                j->agent->name, "tool", j->tool->name, "call_id", j->call_id,
                                "output", j->text ? j->text : "", "failed", j->failed);
    int rc = tool_guards(j, SBX__GUARD_TOOL_OUTPUT, payload, err);
    json_decref(payload);
    return rc;
}

/* Hooks. */

static int hook_wants(const struct sbx__check *c, const char *event, const char *tool)
{
    if (strcmp(c->on, event) != 0)
        return 0;
    if (!c->tools)
        return 1;
    size_t i;
    json_t *g;
    json_array_foreach(c->tools, i, g)
    {
        if (tool && fnmatch(json_string_value(g), tool, 0) == 0)
            return 1;
    }
    return 0;
}

/* A tool_start hook's decision: nothing or {"decision": "allow"} lets the call run;
 * {"decision": "deny", "reason": text} stops it (*deny: the reason). */
static int hook_decision(const char *text, const json_t *json, char **deny, struct sbx_error *err)
{
    json_t *obj = NULL;
    int rc = json ? (obj = json_incref((json_t *)json), 0) : answer_object(text, &obj, err);
    if (rc < 0 || !obj)
        return rc;
    const char *d = json_string_value(json_object_get(obj, "decision"));
    const json_t *why = json_object_get(obj, "reason");
    if (!d || (strcmp(d, "allow") != 0 && strcmp(d, "deny") != 0))
        rc = sbx_error_set(err, SBX_E_PARSE, 0,
                           "answered without \"decision\": \"allow\" or \"deny\"");
    else if (strcmp(d, "deny") == 0 && (!json_is_string(why) || !json_string_length(why)))
        rc = sbx_error_set(err, SBX_E_PARSE, 0, "denied the call without a \"reason\"");
    else if (strcmp(d, "deny") == 0)
        *deny = sbx_xstrdup(json_string_value(why));
    json_decref(obj);
    return rc;
}

int sbx__hook_fire(struct run *r, struct sbx_agent *a, const char *event, const char *tool,
                   json_t *payload, char **deny, struct sbx_error *err)
{
    const struct sbx__guards *g = a->guards;
    int rc = 0;
    if (!g || !g->nhooks)
        return 0;
    json_t *p = json_deep_copy(payload);
    sbx_json_set(p, "event", sbx_json_str(event));
    sbx_json_set(p, "agent", sbx_json_str(a->name));
    sbx_json_set(p, "turn", json_integer(r->turn));
    char *ask = sbx_json_dumps(p, SBX_JSON_COMPACT);
    json_t *agent_input = sbx_json_str(ask);
    free(ask);
    for (size_t i = 0; i < g->nhooks && rc == 0 && !(deny && *deny); i++) {
        const struct sbx__check *c = &g->hooks[i];
        if (!hook_wants(c, event, tool))
            continue;
        char *text = NULL;
        json_t *json = NULL;
        char *name = sbx_xasprintf("hook %s", event);
        struct sbx_span *s = sbx_span_start(sbx_trace_current(), name, SBX_SPAN_INTERNAL);
        free(name);
        sbx_span_set_str(s, "sbx.hook.name", c->name);
        struct sbx_span *prev = sbx_trace_set_current(s);
        /* The turn's sandbox is this agent's only while it is the current agent (run_end of a
         * start agent that handed off has none). */
        rc = run_check(r, c, a, a == r->agent ? r->session : NULL, p, agent_input, &text, &json,
                       err);
        if (rc == 0 && deny)
            rc = hook_decision(text, json, deny, err);
        sbx_trace_set_current(prev);
        if (rc < 0) {
            sbx_error_prefix(err, "%s of agent '%s'", c->name, a->name);
            sbx_span_set_status(s, 0, err->msg);
        } else if (deny && *deny) {
            sbx_span_set_str(s, "sbx.hook.decision", "deny");
        }
        sbx_span_end(s);
        free(text);
        json_decref(json);
    }
    json_decref(agent_input);
    json_decref(p);
    return rc;
}

void sbx__guard_job_report(struct run *r, struct job *j)
{
    size_t i;
    json_t *item;
    json_array_foreach(j->guard_events, i, item)
    {
        emit_verdict(r, item, j->name);
        if (json_is_true(json_object_get(item, "triggered")) &&
            streq(json_string_value(json_object_get(item, "behavior")), "raise_exception")) {
            json_decref(r->tripwire);
            r->tripwire = json_deep_copy(item);
        }
    }
    json_decref(j->guard_events);
    j->guard_events = NULL;
}
