/* Guardrails and hooks in agent files: what the loader accepts (their host commands named and
 * held until allowed), every bad entry refused with a message naming the file, the field and
 * the entry, and runs with the replay model: an input guardrail that trips or fails, an output
 * guardrail, a tool guardrail rejecting a call, a tool_start hook vetoing one, and the run state
 * recording the input guardrails passed. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tap.h"
#include "replay-model.h"
#include "sbx/json.h"
#include "sbx/runner.h"

static char dir[] = "/tmp/sbx-test-guard.XXXXXX";
static int file_no;

static char *write_agent(const char *body)
{
    char *path = sbx_xasprintf("%s/a%d.yaml", dir, file_no++);
    FILE *f = fopen(path, "w");
    fprintf(f, "name: Guarded\n%s", body);
    fclose(f);
    return path;
}

/* body must be refused with code and a message starting "agent file 'PATH': field '" and
 * holding want. */
static void bad(const char *body, enum sbx_errcode code, const char *want)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_agent_file *f = NULL;
    char *path = write_agent(body);
    char *msg = sbx_xasprintf("agent file '%s': field '", path);
    CHECK_ERR(sbx_agent_file_load(path, &f, &err), code, &err, want);
    CHECK(f == NULL);
    CHECK(strncmp(err.msg, msg, strlen(msg)) == 0);
    free(msg);
    unlink(path);
    free(path);
}

static void test_refused(void)
{
    bad("input_guardrails: {name: x}\n", SBX_E_INVAL, "field 'input_guardrails'");
    bad("input_guardrails: [7]\n", SBX_E_INVAL,
        "field 'input_guardrails': entry 0 must be a mapping");
    bad("input_guardrails: [{command: [check]}]\n", SBX_E_INVAL,
        "field 'input_guardrails': missing required field 'name'");
    bad("input_guardrails: [{name: g}]\n", SBX_E_INVAL,
        "field 'input_guardrails': guardrail 'g': needs one of 'command' (in the sandbox), "
        "'host_command' or 'agent'");
    bad("input_guardrails: [{name: g, command: [check], host_command: [check]}]\n", SBX_E_INVAL,
        "guardrail 'g': fields 'command' and 'host_command' both say what runs: give one");
    bad("input_guardrails: [{name: g, command: [check], colour: red}]\n", SBX_E_INVAL,
        "guardrail 'g': unknown field 'colour'");
    bad("input_guardrails: [{name: g, command: [check]}, {name: g, command: [check2]}]\n",
        SBX_E_INVAL, "field 'input_guardrails': guardrail 'g' is defined twice");
    bad("input_guardrails: [{name: g, command: []}]\n", SBX_E_INVAL,
        "guardrail 'g': field 'command'");
    bad("input_guardrails: [{name: g, command: [echo, $x]}]\n", SBX_E_INVAL,
        "guardrail 'g': field 'command'");
    bad("input_guardrails: [{name: g, command: [check], timeout: 0}]\n", SBX_E_INVAL,
        "guardrail 'g': field 'timeout' must be 1 to 3600 seconds");
    bad("input_guardrails: [{name: g, command: [check], run_in_parallel: maybe}]\n", SBX_E_INVAL,
        "guardrail 'g': field 'run_in_parallel'");
    bad("input_guardrails: [{name: g, command: [check], tripwire_field: bad}]\n", SBX_E_INVAL,
        "guardrail 'g': field 'tripwire_field' is for agents");
    bad("input_guardrails: [{name: g, command: [check], max_turns: 2}]\n", SBX_E_INVAL,
        "guardrail 'g': field 'max_turns' is for agents");
    bad("output_guardrails: [{name: g, command: [check], run_in_parallel: false}]\n", SBX_E_INVAL,
        "field 'output_guardrails': guardrail 'g': unknown field 'run_in_parallel'");
    bad("input_guardrails: [{name: g, agent: yes}]\n", SBX_E_INVAL,
        "guardrail 'g': field 'agent' must be a mapping {instructions, model, output_type}");
    bad("input_guardrails: [{name: g, agent: {instructions: x}}]\n", SBX_E_INVAL,
        "guardrail 'g': field 'agent': missing required field 'output_type'");
    bad("input_guardrails: [{name: g, agent: {output_type: {type: object}}}]\n", SBX_E_INVAL,
        "guardrail 'g': field 'agent': missing required field 'instructions'");
    bad("input_guardrails: [{name: g, agent: {instructions: x, output_type: {type: object, "
        "properties: {tripwire_triggered: {type: string}}}}}]\n",
        SBX_E_INVAL,
        "guardrail 'g': field 'agent': field 'output_type' must have a boolean property "
        "'tripwire_triggered'");
    bad("input_guardrails: [{name: g, tripwire_field: unsafe, agent: {instructions: x, "
        "output_type: {type: object, properties: {tripwire_triggered: {type: boolean}}}}}]\n",
        SBX_E_INVAL, "field 'output_type' must have a boolean property 'unsafe'");
    bad("input_guardrails: [{name: g, max_turns: 99, agent: {instructions: x, output_type: "
        "{type: object, properties: {tripwire_triggered: {type: boolean}}}}}]\n",
        SBX_E_INVAL, "guardrail 'g': field 'max_turns' must be 1 to 20");
    bad("input_guardrails: [{name: g, timeout: 5, agent: {instructions: x, output_type: "
        "{type: object, properties: {tripwire_triggered: {type: boolean}}}}}]\n",
        SBX_E_INVAL, "guardrail 'g': field 'timeout' is for commands");
    bad("input_guardrails: [{name: g, agent: {instructions: x, colour: 1, output_type: "
        "{type: object, properties: {tripwire_triggered: {type: boolean}}}}}]\n",
        SBX_E_INVAL, "guardrail 'g': field 'agent': unknown field 'colour'");
    bad("input_guardrails: [{name: g, env: [HOME], agent: {instructions: x, output_type: "
        "{type: object, properties: {tripwire_triggered: {type: boolean}}}}}]\n",
        SBX_E_INVAL, "guardrail 'g': field 'env' is for host commands");
    bad("input_guardrails: [{name: g, env: [HOME], command: [check]}]\n", SBX_E_INVAL,
        "guardrail 'g': field 'env' is for host commands");
    bad("hooks: [{on: agent_start, command: [check]}]\n", SBX_E_INVAL,
        "field 'hooks': entry 0: field 'command': a hook on agent_start cannot run in the sandbox "
        "(the agent gets its sandbox at its first turn): give 'host_command' or 'agent'");
    bad("tool_guardrails: [7]\n", SBX_E_INVAL,
        "field 'tool_guardrails': entry 0: must be a mapping");
    bad("tool_guardrails: [{tool_input_guardrails: [{name: g, command: [check]}]}]\n", SBX_E_INVAL,
        "field 'tool_guardrails': entry 0: field 'tools' must list tool names or globs");
    bad("tool_guardrails: [{tools: [exec_command]}]\n", SBX_E_INVAL,
        "field 'tool_guardrails': entry 0: needs 'tool_input_guardrails' or "
        "'tool_output_guardrails'");
    bad("tool_guardrails: [{tools: [x], colour: red, tool_input_guardrails: []}]\n", SBX_E_INVAL,
        "field 'tool_guardrails': entry 0: unknown field 'colour'");
    bad("tool_guardrails: [{tools: [x], tool_input_guardrails: [{name: g}]}]\n", SBX_E_INVAL,
        "field 'tool_guardrails': entry 0: field 'tool_input_guardrails': guardrail 'g': needs one "
        "of");
    bad("hooks: [{command: [check]}]\n", SBX_E_INVAL,
        "field 'hooks': entry 0: missing required field 'on'");
    bad("hooks: [{on: tool_begin, command: [check]}]\n", SBX_E_INVAL,
        "field 'hooks': entry 0: field 'on' must be one of run_start, run_end, agent_start, "
        "agent_end, tool_start, tool_end, handoff");
    bad("hooks: [{on: run_start, tools: [x], command: [check]}]\n", SBX_E_INVAL,
        "field 'hooks': entry 0: field 'tools' is for tool_start and tool_end hooks");
    bad("hooks: [{on: tool_start, tools: [1], command: [check]}]\n", SBX_E_INVAL,
        "field 'hooks': entry 0: field 'tools'");
    bad("hooks: [{on: tool_start}]\n", SBX_E_INVAL,
        "field 'hooks': entry 0: needs one of 'command' (in the sandbox), 'host_command' or "
        "'agent'");
    bad("hooks: [{on: tool_start, name: x, command: [check]}]\n", SBX_E_INVAL,
        "field 'hooks': entry 0: unknown field 'name'");
    bad("tools:\n  - name: t\n    host_command: [check]\n    tool_input_guardrails: [{name: g}]\n",
        SBX_E_INVAL,
        "field 'tools': field 'tool_input_guardrails': guardrail 'g': needs one of 'command'");
    bad("tools:\n  - name: t\n    host_command: [check]\n    tool_output_guardrails: [{name: g, "
        "command: [check], behavior: explode}]\n",
        SBX_E_INVAL,
        "guardrail 'g': field 'behavior' must be \"reject_content\" or \"raise_exception\"");
    bad("tools:\n  - {builtin: current_time, colour: red}\n", SBX_E_INVAL,
        "field 'tools': a {builtin: NAME} entry takes only tool_input_guardrails and "
        "tool_output_guardrails besides");
    bad("tools:\n  - {builtin: no_such_tool, tool_input_guardrails: [{name: g, command: "
        "[check]}]}\n",
        SBX_E_NOTFOUND, "field 'tools'");
}

/* Host commands of guardrails and hooks are named like host tools, and refuse until allowed. */
static void test_accepted(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_agent_file *f = NULL;
    char *path = write_agent(
            "input_guardrails:\n"
            "  - {name: sandboxed, command: [check]}\n"
            "  - {name: local, host_command: [bin/check.sh], run_in_parallel: false}\n"
            "  - name: judge\n"
            "    tripwire_field: unsafe\n"
            "    agent: {instructions: Judge., output_type: {type: object, properties: "
            "{unsafe: {type: boolean}, why: {type: string}}}}\n"
            "output_guardrails: [{name: out, host_command: [/bin/true]}]\n"
            "hooks:\n"
            "  - {on: tool_start, tools: ['exec*'], host_command: [hook.sh]}\n"
            "  - {on: run_end, agent: {instructions: Summarise.}}\n"
            "tools:\n"
            "  - {builtin: current_time, tool_input_guardrails: [{name: tg, host_command: "
            "[tg.sh], behavior: raise_exception}]}\n");
    CHECK_OK(sbx_agent_file_load(path, &f, &err), &err);
    json_t *host = f ? sbx_agent_file_host_tools(f) : NULL;
    json_t *what = json_array();
    size_t i;
    json_t *v;
    json_array_foreach(host, i, v)
    {
        sbx_json_append(what, json_incref(json_object_get(v, "what")));
    }
    char *s = sbx_json_dumps(what, SBX_JSON_COMPACT);
    CHECK_EQ_STR(s, "[\"input guardrail 'local'\",\"output guardrail 'out'\",\"hook 1 (on "
                    "tool_start)\",\"tool guardrail 'tg'\"]");
    free(s);
    json_decref(what);
    json_decref(host);
    /* A sandbox command among them makes the agent a sandbox agent. */
    CHECK(f && sbx_agent_sandbox_spec(sbx_agent_file_agent(f)) != NULL);
    sbx_agent_file_free(f);
    unlink(path);
    free(path);
}

/* Runs: scripts under dir, the replay model answering in order. */

static void script(const char *name, const char *body)
{
    char *p = sbx_xasprintf("%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    fprintf(f, "#!/bin/sh\n%s", body);
    fclose(f);
    chmod(p, 0755);
    free(p);
}

struct seen {
    json_t *events; /* the GUARDRAIL events' items */
    json_t *state;  /* the last checkpoint */
};

static void on_event(const struct sbx_event *ev, void *data)
{
    struct seen *s = data;
    if (ev->type == SBX_EVENT_GUARDRAIL)
        sbx_json_append(s->events, json_deep_copy(ev->item));
}

static int on_checkpoint(void *data, const json_t *state, struct sbx_error *err)
{
    struct seen *s = data;
    json_decref(s->state);
    s->state = json_deep_copy(state);
    return 0;
}

/* Load body, allow its host commands, run it on "go" against responses. */
static int run_file(const char *body, const char *const *responses, struct seen *seen,
                    struct sbx_run_result **res, struct sbx_error *err)
{
    struct sbx_agent_file *f = NULL;
    char *path = write_agent(body);
    int rc = sbx_agent_file_load(path, &f, err);
    free(path);
    if (rc < 0)
        return rc;
    sbx_agent_file_allow_host_tools(f);
    struct sbx_model *m = test_model_from_responses(dir, &file_no, responses);
    json_t *input = sbx_json_str("go");
    seen->events = json_array();
    struct sbx_run_options opt = {.model = m,
                                  .on_event = on_event,
                                  .event_data = seen,
                                  .checkpoint = on_checkpoint,
                                  .checkpoint_data = seen};
    rc = sbx_run(sbx_agent_file_agent(f), input, &opt, res, err);
    json_decref(input);
    sbx_model_free(m);
    sbx_agent_file_free(f);
    return rc;
}

static void seen_release(struct seen *s)
{
    json_decref(s->events);
    json_decref(s->state);
    *s = (struct seen){0};
}

#define CALL_MARK                                                                      \
    "{\"id\":\"r1\",\"status\":\"completed\",\"output\":[{\"type\":\"function_call\"," \
    "\"call_id\":\"c1\",\"name\":\"mark\",\"arguments\":\"{}\"}]}"
#define SAY_DONE                                                                          \
    "{\"id\":\"r2\",\"status\":\"completed\",\"output\":[{\"type\":\"message\",\"role\":" \
    "\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"done\"}]}]}"

static char *mark_tool(void)
{
    return sbx_xasprintf("tools: [{name: mark, host_command: [touch, %s/marked]}]\n", dir);
}

static int marked(void)
{
    char *p = sbx_xasprintf("%s/marked", dir);
    int yes = access(p, F_OK) == 0;
    unlink(p);
    free(p);
    return yes;
}

/* A parallel input guardrail that trips: the first turn's call never runs. */
static void test_input_trips(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_run_result *res = NULL;
    struct seen seen = {0};
    const char *const responses[] = {CALL_MARK, SAY_DONE, NULL};
    script("trip.sh", "cat >/dev/null\necho '{\"tripwire_triggered\": true, \"info\": "
                      "{\"why\": \"bad words\"}}'\n");
    char *tools = mark_tool();
    char *body = sbx_xasprintf("input_guardrails: [{name: words, host_command: [./trip.sh]}]\n%s",
                               tools);
    CHECK_ERR(run_file(body, responses, &seen, &res, &err), SBX_E_TRIPWIRE, &err,
              "input guardrail 'words' tripped: {\"why\":\"bad words\"}");
    CHECK(!marked());
    char *ev = sbx_json_dumps(seen.events, SBX_JSON_COMPACT);
    CHECK_EQ_STR(ev, "[{\"guardrail\":\"words\",\"kind\":\"input\",\"triggered\":true,"
                     "\"info\":{\"why\":\"bad words\"}}]");
    free(ev);
    CHECK_EQ_STR(json_string_value(json_object_get(seen.state, "status")), "failed");
    CHECK_EQ_STR(json_string_value(
                         json_object_get(json_object_get(seen.state, "tripwire"), "guardrail")),
                 "words");
    CHECK(json_object_get(seen.state, "guardrails") == NULL);
    seen_release(&seen);
    free(body);

    /* A guardrail that fails is an error, not a pass. */
    script("broken.sh", "echo oops >&2\nexit 3\n");
    body = sbx_xasprintf("input_guardrails: [{name: broken, host_command: [./broken.sh], "
                         "run_in_parallel: false}]\n%s",
                         tools);
    char *want = sbx_xasprintf("input guardrail 'broken': '%s/./broken.sh' ended with status 3; "
                               "stderr: oops",
                               dir);
    CHECK_ERR(run_file(body, responses, &seen, &res, &err), SBX_E_EXEC, &err, want);
    free(want);
    CHECK(!marked());
    seen_release(&seen);
    free(body);

    /* An answer without the boolean is a failure too. */
    script("vague.sh", "cat >/dev/null\necho '{\"maybe\": 1}'\n");
    body = sbx_xasprintf("input_guardrails: [{name: vague, host_command: [./vague.sh]}]\n%s",
                         tools);
    CHECK_ERR(run_file(body, responses, &seen, &res, &err), SBX_E_PARSE, &err,
              "input guardrail 'vague': answered without a boolean 'tripwire_triggered'");
    seen_release(&seen);
    free(body);
    free(tools);
}

/* Guardrails that pass, a tool guardrail that rejects, a hook that vetoes: the run finishes;
 * the model reads why; the state records the input guardrails passed. */
static void test_pass_reject_veto(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_run_result *res = NULL;
    struct seen seen = {0};
    const char *const responses[] = {CALL_MARK, SAY_DONE, NULL};
    script("pass.sh", "cat >/dev/null\n");
    script("reject.sh", "cat >/dev/null\necho '{\"tripwire_triggered\": true, \"message\": "
                        "\"marking is off\"}'\n");
    char *body = sbx_xasprintf(
            "input_guardrails: [{name: ok, host_command: [./pass.sh]}]\n"
            "output_guardrails: [{name: ok-out, host_command: [./pass.sh]}]\n"
            "tools:\n  - name: mark\n    host_command: [touch, %s/marked]\n"
            "    tool_input_guardrails: [{name: no-marks, host_command: [./reject.sh]}]\n",
            dir);
    CHECK_OK(run_file(body, responses, &seen, &res, &err), &err);
    CHECK(!marked());
    const json_t *items = res ? sbx_run_result_items(res) : NULL;
    CHECK_EQ_STR(json_string_value(json_object_get(json_array_get(items, 2), "output")),
                 "marking is off");
    CHECK_EQ_STR(res ? sbx_run_result_text(res) : "", "done");
    char *ev = sbx_json_dumps(seen.events, SBX_JSON_COMPACT);
    CHECK_EQ_STR(ev, "[{\"guardrail\":\"ok\",\"kind\":\"input\",\"triggered\":false},"
                     "{\"guardrail\":\"no-marks\",\"kind\":\"tool_input\",\"triggered\":true,"
                     "\"tool\":\"mark\",\"call_id\":\"c1\",\"behavior\":\"reject_content\"},"
                     "{\"guardrail\":\"ok-out\",\"kind\":\"output\",\"triggered\":false}]");
    free(ev);
    CHECK_EQ_STR(
            json_string_value(json_object_get(json_object_get(seen.state, "guardrails"), "input")),
            "passed");
    sbx_run_result_free(res);
    res = NULL;
    seen_release(&seen);
    free(body);

    /* A tool_start hook denies the call; a tool_end hook never hears of it. */
    script("deny.sh", "cat >>hook.log\necho >>hook.log\n"
                      "echo '{\"decision\": \"deny\", \"reason\": \"not on fridays\"}'\n");
    script("log.sh", "cat >>hook.log\necho >>hook.log\n");
    char *tools = mark_tool();
    body = sbx_xasprintf("hooks:\n  - {on: run_start, host_command: [./log.sh]}\n"
                         "  - {on: tool_start, tools: ['ma*'], host_command: [./deny.sh]}\n"
                         "  - {on: tool_end, host_command: [./log.sh]}\n"
                         "  - {on: agent_end, host_command: [./log.sh]}\n"
                         "  - {on: run_end, host_command: [./log.sh]}\n%s",
                         tools);
    CHECK_OK(run_file(body, responses, &seen, &res, &err), &err);
    CHECK(!marked());
    items = res ? sbx_run_result_items(res) : NULL;
    CHECK_EQ_STR(json_string_value(json_object_get(json_array_get(items, 2), "output")),
                 "not on fridays");
    char *log = sbx_xasprintf("%s/hook.log", dir);
    json_t *lines = json_array();
    FILE *lf = fopen(log, "r");
    char buf[4096];
    while (lf && fgets(buf, sizeof(buf), lf)) {
        json_t *o = json_loads(buf, 0, NULL);
        if (o)
            sbx_json_append(lines, json_pack("{s:O, s:O}", "event", json_object_get(o, "event"),
                                             "turn", json_object_get(o, "turn")));
        json_decref(o);
    }
    if (lf)
        fclose(lf);
    char *got = sbx_json_dumps(lines, SBX_JSON_COMPACT);
    CHECK_EQ_STR(got, "[{\"event\":\"run_start\",\"turn\":0},{\"event\":\"tool_start\","
                      "\"turn\":1},{\"event\":\"agent_end\",\"turn\":2},{\"event\":"
                      "\"run_end\",\"turn\":2}]");
    free(got);
    json_decref(lines);
    unlink(log);
    free(log);
    sbx_run_result_free(res);
    seen_release(&seen);
    free(body);
    free(tools);
}

/* A tool guardrail's answer may say what a trip does: allow passes, raise_exception ends the
 * run whatever the entry says, an unknown behavior is a failure. */
static void test_tool_behavior(void)
{
    struct sbx_error err = SBX_ERROR_INIT;
    struct sbx_run_result *res = NULL;
    struct seen seen = {0};
    const char *const responses[] = {CALL_MARK, SAY_DONE, NULL};
    /* Agent-level tool guardrails reach a tool by a glob of its name. */
    script("reject.sh", "cat >/dev/null\necho '{\"tripwire_triggered\": true}'\n");
    char *glob = sbx_xasprintf("tools: [{name: mark, host_command: [touch, %s/marked]}]\n"
                               "tool_guardrails:\n  - tools: ['ma?k']\n"
                               "    tool_input_guardrails: [{name: any-mark, host_command: "
                               "[./reject.sh]}]\n",
                               dir);
    CHECK_OK(run_file(glob, responses, &seen, &res, &err), &err);
    CHECK(!marked());
    CHECK_EQ_STR(json_string_value(json_object_get(
                         json_array_get(res ? sbx_run_result_items(res) : NULL, 2), "output")),
                 "guardrail 'any-mark' rejected this tool call");
    sbx_run_result_free(res);
    res = NULL;
    seen_release(&seen);
    free(glob);
    const char *answers[] = {"{\"behavior\": \"allow\"}", "{\"behavior\": \"raise_exception\"}",
                             "{\"behavior\": \"explode\"}"};
    for (int k = 0; k < 3; k++) {
        char *sh = sbx_xasprintf("cat >/dev/null\necho '%s'\n", answers[k]);
        script("says.sh", sh);
        free(sh);
        char *body = sbx_xasprintf(
                "tools:\n  - name: mark\n    host_command: [touch, %s/marked]\n"
                "    tool_input_guardrails: [{name: says, host_command: [./says.sh]}]\n",
                dir);
        int rc = run_file(body, responses, &seen, &res, &err);
        if (k == 0) {
            CHECK_OK(rc, &err);
            CHECK(marked());
        } else if (k == 1) {
            CHECK_ERR(rc, SBX_E_TRIPWIRE, &err, "tool 'mark': tool input guardrail 'says' tripped");
            CHECK(!marked());
        } else {
            CHECK_ERR(rc, SBX_E_PARSE, &err,
                      "tool input guardrail 'says': answered with a \"behavior\" other than");
            CHECK(!marked());
        }
        sbx_run_result_free(res);
        res = NULL;
        seen_release(&seen);
        free(body);
    }
}

/* Every file the tests left in dir (scripts, agent files, replay files). */
static void remove_all(void)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.')
            unlinkat(dirfd(d), e->d_name, 0);
    if (d)
        closedir(d);
}

int main(void)
{
    TAP_START();
    if (!mkdtemp(dir))
        return 1;
    TAP_RUN(test_refused);
    TAP_RUN(test_accepted);
    TAP_RUN(test_input_trips);
    TAP_RUN(test_pass_reject_veto);
    TAP_RUN(test_tool_behavior);
    remove_all();
    rmdir(dir);
    return TAP_DONE();
}
