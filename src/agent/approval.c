/* Approvals of one run: which calls of a turn need a person's approval, and the answer each
 * gets: a decision the caller gave for exactly that call (bound to it, used once), an "always"
 * decision for its tool, or the caller's ask callback. See docs/internals/runner.md. */
#include <fnmatch.h>
#include <string.h>

#include "agent/runner-internal.h"
#include "sbx/hash.h"
#include "sbx/json.h"
#include "sbx/trace.h"

static int streq(const char *a, const char *b)
{
    return a && b && strcmp(a, b) == 0;
}

void sbx__approval_digest(const json_t *args, char out[SBX__APPROVAL_DIGEST_LEN])
{
    char *text = args ? json_dumps(args, JSON_SORT_KEYS | JSON_COMPACT | JSON_ENCODE_ANY)
                      : sbx_xstrdup("null");
    uint8_t d[SBX_SHA256_LEN];
    if (!text)
        SBX_BUG("out of memory dumping approval arguments");
    if (sbx_sha256(text, strlen(text), d, NULL) < 0)
        SBX_BUG("sha-256 failed");
    free(text);
    memcpy(out, "sha256:", 7);
    sbx_hex(d, sizeof(d), out + 7);
}

/* Whether a call needs approval: the caller's callback, told the policy (and the tool's own
 * check), else those. A function call whose arguments are not an object runs unasked: the
 * model reads the error. */
static int needs_approval(struct run *r, struct job *j, struct sbx_error *err)
{
    j->args = sbx_approval_args(j->item);
    if (!j->args && streq(j->type, "function_call"))
        return 0;
    int policy = sbx_approval_policy_match(r->agent->needs_approval, j->name, j->args);
    if (!policy && j->tool->approval_fn) {
        struct sbx_tool_call call = {
                .call_id = j->call_id,
                .name = j->name,
                .item = j->item,
                .agent = r->agent,
                .run = r->opt,
                .context = r->opt->context,
                .data = j->tool->data,
        };
        policy = j->tool->approval_fn(j->args, &call) > 0;
    }
    if (r->nested || !r->opt->approve)
        return policy;
    struct sbx_approval_request rq = {
            .agent = r->agent,
            .tool = j->name,
            .call_id = j->call_id,
            .item = j->item,
            .args = j->args,
            .policy = policy,
    };
    int rc = r->opt->approve(r->opt->approve_data, &rq, err);
    if (rc < 0)
        sbx_error_prefix(err, "approval of tool call '%s'", j->call_id ? j->call_id : "");
    return rc < 0 ? rc : rc > 0;
}

/* *list with v appended, as a new array: the run's lists are shared with its running
 * checkpoints' states, and a checkpoint log takes a list it saw before, by object, as
 * unchanged. */
static void append_new(json_t **list, json_t *v)
{
    json_t *grown = json_copy(*list);
    if (!grown)
        SBX_BUG("out of memory copying a list");
    sbx_json_append(grown, v);
    json_decref(*list);
    *list = grown;
}

/* Record the decision on j: the job, the run's log, its event and the call's span. */
static void apply(struct run *r, struct job *j, int approved, const char *message, const char *by)
{
    char digest[SBX__APPROVAL_DIGEST_LEN];
    sbx__approval_digest(j->args, digest);
    j->approved = approved;
    j->rejected = !approved;
    free(j->reject_message);
    j->reject_message = !approved && message ? sbx_xstrdup(message) : NULL;
    json_t *rec = json_pack("{s:s, s:s, s:s, s:i, s:s, s:b, s:s}", "call_id", j->call_id, "tool",
                            j->name ? j->name : "", "type", j->type ? j->type : "", "turn", j->turn,
                            "arguments_digest", digest, "approved", approved, "by", by);
    if (j->reject_message)
        sbx_json_set(rec, "message", sbx_json_str(j->reject_message));
    append_new(&r->decision_log, json_incref(rec));
    sbx_span_set_str(j->span, "sbx.approval", approved ? "approved" : "rejected");
    sbx_span_set_str(j->span, "sbx.approval.by", by);
    if (j->reject_message)
        sbx_span_set_content(j->span, "sbx.approval.message", j->reject_message,
                             strlen(j->reject_message));
    struct sbx_event ev = {.type = SBX_EVENT_APPROVAL, .item = rec, .tool = j->name};
    sbx__run_emit(r, &ev);
    json_decref(rec);
}

/* The decision given for exactly this call (and no other), taken out of the run's list: a
 * decision answers one call once. */
static json_t *take_given(struct run *r, const struct job *j)
{
    char digest[SBX__APPROVAL_DIGEST_LEN];
    size_t i;
    json_t *d;
    if (!json_array_size(r->given))
        return NULL;
    sbx__approval_digest(j->args, digest);
    json_array_foreach(r->given, i, d)
    {
        if (streq(json_string_value(json_object_get(d, "call_id")), j->call_id) &&
            streq(json_string_value(json_object_get(d, "tool")), j->name) &&
            streq(json_string_value(json_object_get(d, "type")), j->type) &&
            streq(json_string_value(json_object_get(d, "digest")), digest) &&
            json_integer_value(json_object_get(d, "turn")) == j->turn) {
            json_t *taken = json_incref(d);
            json_array_remove(r->given, i);
            return taken;
        }
    }
    return NULL;
}

/* The "always" decision for a tool: an approval wins over a rejection (as in the reference
 * SDK). Borrowed; NULL when none. */
static const json_t *always_for(const struct run *r, const char *tool)
{
    const json_t *reject = NULL, *a;
    size_t i;
    json_array_foreach(r->always, i, a)
    {
        const char *glob = json_string_value(json_object_get(a, "tool"));
        if (!glob || !tool || fnmatch(glob, tool, 0) != 0)
            continue;
        if (json_is_true(json_object_get(a, "approved")))
            return a;
        if (!reject)
            reject = a;
    }
    return reject;
}

static void add_always(struct run *r, const char *tool, int approved, const char *message,
                       const char *by)
{
    json_t *a = json_pack("{s:s, s:b, s:s, s:i}", "tool", tool, "approved", approved, "by", by,
                          "turn", r->turn);
    if (!approved && message)
        sbx_json_set(a, "message", sbx_json_str(message));
    append_new(&r->always, a);
}

/* Ask the caller about j. Returns 1 when answered, 0 when it waits, or an error. */
static int ask(struct run *r, struct job *j, int policy, int *stop, struct sbx_error *err)
{
    struct sbx_approval_request rq = {
            .agent = r->agent,
            .tool = j->name,
            .call_id = j->call_id,
            .item = j->item,
            .args = j->args,
            .policy = policy,
    };
    struct sbx_approval_answer a = {0};
    int rc = r->opt->ask(r->opt->ask_data, &rq, &a, err);
    if (rc < 0) {
        free(a.message);
        sbx_error_prefix(err, "approval of tool call '%s'", j->call_id ? j->call_id : "");
        return rc;
    }
    const char *by = a.by ? a.by : "ask";
    int answered = a.decision == SBX_APPROVAL_APPROVE || a.decision == SBX_APPROVAL_REJECT;
    if (!answered) {
        *stop |= a.stop;
    } else {
        int approved = a.decision == SBX_APPROVAL_APPROVE;
        if (a.always)
            add_always(r, j->name ? j->name : "", approved, a.message, by);
        apply(r, j, approved, a.message, by);
    }
    free(a.message);
    return answered;
}

int sbx__approval_check(struct run *r, struct job *jobs, size_t njobs, struct sbx_error *err)
{
    int waiting = 0, stop = 0;
    for (size_t k = 0; k < njobs; k++) {
        struct job *j = &jobs[k];
        if (!j->tool)
            continue;
        int need = needs_approval(r, j, err);
        if (need <= 0) {
            if (need < 0)
                return need;
            continue;
        }
        if (r->nested)
            return sbx_error_set(err, SBX_E_PERM, 0,
                                 "tool '%s' needs approval, which a nested agent run cannot ask "
                                 "for",
                                 j->name ? j->name : "");
        json_t *d = take_given(r, j);
        const json_t *al = d ? NULL : always_for(r, j->name);
        int rc = 0;
        if (d || al) {
            const json_t *use = d ? d : al;
            const char *by = json_string_value(json_object_get(use, "by"));
            char *always_by = d ? NULL : sbx_xasprintf("always (%s)", by ? by : "caller");
            apply(r, j, json_is_true(json_object_get(use, "approved")),
                  json_string_value(json_object_get(use, "message")), d ? by : always_by);
            free(always_by);
            rc = 1;
        } else if (r->opt->ask && !stop) {
            rc = ask(r, j, need, &stop, err);
        }
        json_decref(d);
        if (rc < 0)
            return rc;
        if (rc == 0) {
            j->pending = 1;
            waiting = 1;
        }
    }
    return waiting;
}

static int bad_always(struct sbx_error *err, size_t i)
{
    return sbx_error_set(err, SBX_E_INVAL, 0,
                         "always decision %zu must be {\"tool\": glob, \"approved\": true|false, "
                         "\"message\"?: text, \"by\"?: text}",
                         i + 1);
}

static int check_decision(const char *id, const json_t *d, struct sbx_error *err)
{
    json_t *m = json_object_get(d, "message"), *by = json_object_get(d, "by");
    if (!json_is_boolean(json_object_get(d, "approved")) || (m && !json_is_string(m)) ||
        (by && !json_is_string(by)))
        return sbx_error_set(err, SBX_E_INVAL, 0,
                             "decision for '%s' must be {\"approved\": true|false, "
                             "\"message\"?: text}",
                             id);
    return 0;
}

static const json_t *pending_entry(const json_t *pending, const char *id)
{
    size_t i;
    json_t *p;
    json_array_foreach(pending, i, p)
    {
        if (streq(json_string_value(json_object_get(p, "call_id")), id))
            return p;
    }
    return NULL;
}

static int not_pending(const json_t *pending, const char *id, struct sbx_error *err)
{
    struct sbx_buf b;
    size_t i;
    json_t *p;
    sbx_buf_init(&b, 4096);
    json_array_foreach(pending, i, p)
    {
        if (sbx_buf_addf(&b, NULL, "%s%s", i ? ", " : "",
                         json_string_value(json_object_get(p, "call_id"))) < 0)
            break;
    }
    int rc = sbx_error_set(err, SBX_E_INVAL, 0, "no pending call '%s' (pending: %s)", id,
                           b.len ? b.data : "none");
    sbx_buf_release(&b);
    return rc;
}

/* Bind each given decision to the pending call it answers: its id, the tool, type and
 * arguments the state lists for it (what the person was shown), and its turn. */
static int bind_given(struct run *r, const json_t *state, const json_t *given,
                      struct sbx_error *err)
{
    const char *id;
    json_t *d, *p;
    size_t i;
    int rc;
    if (!given)
        return 0;
    if (!json_is_object(given))
        return sbx_error_set(err, SBX_E_INVAL, 0, "decisions must be an object of call ids");
    json_object_foreach((json_t *)given, id, d)
    {
        if ((rc = check_decision(id, d, err)) < 0)
            return rc;
        if (strcmp(id, "*") != 0 && !pending_entry(r->pending, id))
            return not_pending(r->pending, id, err);
    }
    json_int_t turn = json_integer_value(json_object_get(state, "turn"));
    json_array_foreach(r->pending, i, p)
    {
        const char *c = json_string_value(json_object_get(p, "call_id"));
        d = json_object_get(given, c);
        if (!d)
            d = json_object_get(given, "*");
        if (!d)
            continue;
        char digest[SBX__APPROVAL_DIGEST_LEN];
        sbx__approval_digest(json_object_get(p, "arguments"), digest);
        const json_t *pt = json_object_get(p, "turn");
        const char *by = json_string_value(json_object_get(d, "by"));
        json_t *rec =
                json_pack("{s:s, s:O, s:O, s:s, s:I, s:O, s:s}", "call_id", c, "tool",
                          json_object_get(p, "tool"), "type", json_object_get(p, "type"), "digest",
                          digest, "turn", json_is_integer(pt) ? json_integer_value(pt) : turn,
                          "approved", json_object_get(d, "approved"), "by", by ? by : "caller");
        if (json_is_false(json_object_get(d, "approved")) && json_object_get(d, "message"))
            sbx_json_set(rec, "message", json_incref(json_object_get(d, "message")));
        sbx_json_append(r->given, rec);
    }
    return 0;
}

static int check_always(const json_t *always, struct sbx_error *err)
{
    size_t i;
    json_t *a;
    if (!always)
        return 0;
    if (!json_is_array(always))
        return sbx_error_set(err, SBX_E_INVAL, 0, "always decisions must be a list");
    json_array_foreach(always, i, a)
    {
        json_t *m = json_object_get(a, "message"), *by = json_object_get(a, "by");
        if (!json_is_string(json_object_get(a, "tool")) ||
            !json_is_boolean(json_object_get(a, "approved")) || (m && !json_is_string(m)) ||
            (by && !json_is_string(by)))
            return bad_always(err, i);
    }
    return 0;
}

int sbx__approval_restore(struct run *r, const json_t *state, struct sbx_error *err)
{
    const json_t *always = r->opt->always;
    int rc = check_always(always, err);
    if (rc < 0)
        return rc;
    size_t i;
    json_t *a;
    json_array_foreach(always, i, a)
    {
        json_t *copy = json_deep_copy(a);
        if (!json_object_get(copy, "by"))
            sbx_json_set(copy, "by", sbx_json_str("caller"));
        sbx_json_append(r->always, copy);
    }
    if (!state || r->nested)
        return 0;
    return bind_given(r, state, r->opt->decisions, err);
}
