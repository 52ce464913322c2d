#!/usr/bin/env bash
# Run states shared with the Agents SDK (docs/internals/runstate.md, "The SDK's RunState"): the
# JS SDK (npm @openai/agents, npm-lib.sh) runs against the fake model server to an
# interruption and saves its RunState; `sbx state import` makes an sbx run state of it, which
# `sbx run --resume` finishes: a plain agent, and a SandboxAgent whose unix-local workspace
# comes over through its snapshot. `sbx state export --sdk` writes an interrupted sbx run that
# the JS SDK loads, approves and finishes. A Python-SDK-shaped state (snake_case, schema 1.17,
# a LocalSnapshot tar) imports too; what cannot be carried is refused naming the field.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/model-lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
. "$(dirname "$0")/npm-lib.sh"
trap 'stop_fake; sandbox_cleanup' EXIT
agents_js
JS="$SBX_SRCDIR/tests/integration/runstate-sdk.mjs"
export HOME="$T/home" # the JS SDK keeps its local snapshots under $HOME
mkdir -p "$HOME" "$T/jsws"
live_sandboxes() { "$SBX" sandbox ps --all --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))'; }
node_run() { OPENAI_BASE_URL="$FAKE_URL" timeout 120 node "$JS" "$@" >"$T/node.out" 2>"$T/node.err"; }

# --- JS -> sbx: a plain agent -----------------------------------------------------------------
mk "$T/s1.json" '[resp(1, fcall(1, "exec_command", {"cmd": "rm hello.txt"}))]'
start_fake "$T/s1.json"
node_run plain "$T/js.json"
expect_eq "$?:$(cat "$T/node.out")" '0:{"interruptions":["c1"]}' "the JS SDK stops at the call that needs approval"
[ -s "$T/js.json" ] || diag "$(tail -5 "$T/node.err")"
expect_eq "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["$schemaVersion"])' "$T/js.json")" "1.22" \
    "its RunState is schema 1.22"
cat >"$T/guarded.yaml" <<'YAML'
name: Guarded
instructions: Do it.
model: gpt-4.1
capabilities: [shell]
needs_approval: [{tool: exec_command, when: {cmd: "rm *"}}]
manifest: {entries: {hello.txt: {type: file, content: "hello\n"}}}
YAML
run "$SBX" state import "$T/js.json" -a "$T/guarded.yaml" -o "$T/st.json"
expect_rc 0 "sbx state import reads the JS SDK's RunState"
expect_in "$T/err" "1 pending call" "and says what waits"
run "$SBX" state show "$T/st.json"
expect_in "$T/out" "c1  exec_command  {\"cmd\":\"rm hello.txt\"}" "the pending call, by the SDK's call id"
mk "$T/s2.json" '[resp(2, sh(2, "ls")), resp(3, msg("Done."))]'
start_fake "$T/s2.json"
run "$SBX" run --resume "$T/st.json" -a "$T/guarded.yaml" --approve all --base-url "$FAKE_URL"
expect_rc 0 "sbx run --resume finishes the run the JS SDK started"
expect_eq "$(cat "$T/out")" "Done." "with the model's answer"
expect_eq "$(fake_query 'reqs[0]["body"]["input"][0]["content"]')" "delete hello" "the SDK's input is the first item"
expect_eq "$(fake_query '[i.get("call_id") for i in reqs[0]["body"]["input"][1:]]')" "['c1', 'c1']" \
    "then the SDK's call and sbx's output for it"
fake_query 'reqs[1]["body"]["input"][-1]["output"]' >"$T/ls"
expect_not_in "$T/ls" "hello.txt" "the approved command ran in sbx's sandbox"

# --- JS -> sbx: a SandboxAgent's workspace comes over through its snapshot --------------------
mk "$T/s3.json" '[resp(1, sh(1, "echo made > made.txt")), resp(2, sh(2, "rm hello.txt"))]'
start_fake "$T/s3.json"
node_run sandbox "$T/sb.json" "$T/jsws"
expect_eq "$?:$(cat "$T/node.out")" '0:{"interruptions":["c2"]}' "the JS SandboxAgent stops at 'rm hello.txt'"
[ -s "$T/sb.json" ] || diag "$(tail -5 "$T/node.err")"
rm -rf "$T/jsws"/* # its live workspace is gone: the snapshot must carry the files
cat >"$T/builder.yaml" <<'YAML'
name: Builder
instructions: Build.
model: gpt-4.1
capabilities: [shell]
needs_approval: [{tool: exec_command, when: {cmd: "rm *"}}]
YAML
run "$SBX" state import "$T/sb.json" -a "$T/builder.yaml" -o "$T/bst.json"
expect_rc 0 "a SandboxAgent's RunState imports"
run "$SBX" state show "$T/bst.json"
expect_in "$T/out" "live  owned  agent 'Builder'" "with an sbx sandbox the state owns"
mk "$T/s4.json" '[resp(3, sh(3, "ls")), resp(4, msg("Built."))]'
start_fake "$T/s4.json"
run "$SBX" run --resume "$T/bst.json" -a "$T/builder.yaml" --approve all --base-url "$FAKE_URL"
expect_rc 0 "the sandbox run finishes in sbx"
fake_query 'reqs[1]["body"]["input"][-1]["output"]' >"$T/ls2"
expect_in "$T/ls2" "made.txt" "the file the SDK's run made is in the sandbox"
expect_not_in "$T/ls2" "hello.txt" "and the approved rm ran there"
expect_eq "$(live_sandboxes)" 0 "the completed run removed the sandbox it owned"

# --- sbx -> JS: an interrupted sbx run loads and finishes in the JS SDK ------------------------
cat >"$T/calc.yaml" <<'YAML'
name: Calc
instructions: Compute.
model: gpt-4.1
tools: [calculator]
needs_approval: [calculator]
YAML
mk "$T/c1.json" '[resp(1, msg("Let me compute."), fcall(1, "calculator", {"expression": "2+3"}))]'
start_fake "$T/c1.json"
run "$SBX" run -a "$T/calc.yaml" --state "$T/cs.json" --base-url "$FAKE_URL" "compute 2+3"
expect_rc 4 "an sbx run stops for approval"
run "$SBX" state export --sdk "$T/cs.json" -o "$T/cs-js.json"
expect_rc 0 "sbx state export --sdk writes the SDK's RunState"
mk "$T/c2.json" '[resp(2, msg("It is 5."))]'
start_fake "$T/c2.json"
node_run resume "$T/cs-js.json"
expect_eq "$?:$(cat "$T/node.out")" '0:{"interruptions":["c1"],"final":"It is 5."}' \
    "the JS SDK loads it, approves the call sbx paused on and finishes"
[ -s "$T/node.out" ] || diag "$(tail -5 "$T/node.err")"
expect_eq "$(fake_query '[(i.get("type"), i.get("call_id")) for i in reqs[0]["body"]["input"]]')" \
    "[(None, None), ('message', None), ('function_call', 'c1'), ('function_call_output', 'c1')]" \
    "its request holds sbx's conversation and the JS tool's output"
expect_eq "$(fake_query 'reqs[0]["body"]["input"][-1]["output"]')" "js computed 2+3" "from the JS SDK's own tool"

# --- a Python SDK RunState (schema 1.17, snake_case) with a LocalSnapshot tar ------------------
mkdir -p "$T/pyws" "$T/pysnap"
echo "from python" >"$T/pyws/py.txt"
tar -C "$T/pyws" -cf "$T/pysnap/0f1e2d3c.tar" .
python3 - "$T/py.json" "$T/pysnap" <<'PY'
import json, sys
call = {"type": "function_call", "call_id": "call_py", "name": "exec_command",
        "arguments": "{\"cmd\": \"rm -f nothing; cat py.txt\"}", "id": "fc_py", "status": "completed"}
agent = {"name": "Builder"}
ss = {"type": "unix_local", "session_id": "5b1f6a2e-3c4d-4e5f-8a9b-0c1d2e3f4a5b",
      "snapshot": {"type": "local", "id": "0f1e2d3c", "base_path": sys.argv[2]},
      "manifest": {"version": 1, "root": "/workspace", "entries": {}, "environment": {},
                   "users": [], "groups": [], "extra_path_grants": []},
      "exposed_ports": [], "workspace_root_ready": True, "workspace_root_owned": True}
json.dump({"$schemaVersion": "1.17", "current_turn": 1, "current_agent": agent,
           "original_input": "read the file", "model_responses": [],
           "context": {"usage": {"requests": 1, "input_tokens": 5, "output_tokens": 3,
                                 "total_tokens": 8}, "approvals": {}, "context": {}},
           "tool_use_tracker": {"Builder": ["exec_command"]}, "max_turns": 8,
           "no_active_agent_run": True, "input_guardrail_results": [],
           "output_guardrail_results": [], "conversation_id": None,
           "generated_items": [{"type": "tool_call_item", "raw_item": call, "agent": agent}],
           "current_step": {"type": "next_step_interruption", "data": {"interruptions": [
               {"type": "tool_approval_item", "raw_item": call, "agent": agent,
                "tool_name": "exec_command"}]}},
           "trace": None,
           "sandbox": {"backend_id": "unix_local", "current_agent_key": "Builder",
                       "current_agent_name": "Builder", "session_state": ss,
                       "sessions_by_agent": {"Builder": {"agent_name": "Builder",
                                                         "session_state": ss}}}},
          open(sys.argv[1], "w"))
PY
run "$SBX" state import "$T/py.json" -a "$T/builder.yaml" -o "$T/pst.json"
expect_rc 0 "a Python SDK RunState (1.17) imports"
run "$SBX" state show "$T/pst.json"
expect_in "$T/out" "turn:     1 of 8" "its turn count and max turns"
expect_in "$T/out" "5 input, 3 output tokens in 1 requests" "its usage"
mk "$T/p1.json" '[resp(2, msg("Read."))]'
start_fake "$T/p1.json"
run "$SBX" run --resume "$T/pst.json" -a "$T/builder.yaml" --approve call_py --base-url "$FAKE_URL"
expect_rc 0 "and finishes in sbx"
fake_query 'reqs[0]["body"]["input"][-1]["output"]' >"$T/py.out"
expect_in "$T/py.out" "from python" "its workspace came from the LocalSnapshot tar"

# --- a SandboxSessionState alone: sbx sandbox resume and sbx run --session-state ---------------
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); json.dump(d["sandbox"]["sessionsByAgent"]["Builder"]["sessionState"], open(sys.argv[2], "w"))' \
    "$T/sb.json" "$T/ss-js.json"
run "$SBX" sandbox resume "$T/ss-js.json"
expect_rc 0 "sbx sandbox resume makes the JS SDK's unix-local session again"
rid=$(cat "$T/out")
run "$SBX" sandbox exec "$rid" -- cat made.txt
expect_eq "$(cat "$T/out")" "made" "with the workspace of its snapshot"
"$SBX" sandbox rm "$rid" >/dev/null
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); json.dump(d["sandbox"]["session_state"], open(sys.argv[2], "w"))' \
    "$T/py.json" "$T/ss-py.json"
mk "$T/p2.json" '[resp(1, sh(1, "cat py.txt")), resp(2, msg("ok"))]'
start_fake "$T/p2.json"
run "$SBX" run -a "$T/builder.yaml" --session-state "$T/ss-py.json" --base-url "$FAKE_URL" "read"
expect_rc 0 "sbx run --session-state takes the Python SDK's session state"
fake_query 'reqs[1]["body"]["input"][-1]["output"]' >"$T/py2.out"
expect_in "$T/py2.out" "from python" "and runs in its workspace"
python3 - "$T/ss-py.json" "$T/ss-gone.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["snapshot"]["id"] = "missing"
json.dump(d, open(sys.argv[2], "w"))
PY
run "$SBX" sandbox resume "$T/ss-gone.json"
expect_rc 1 "a session state whose snapshot is gone is refused"
expect_in "$T/err" "field 'session state.snapshot': its workspace snapshot '$T/pysnap/missing.tar' is not there" \
    "naming the field and the file"
expect_eq "$(live_sandboxes)" 0 "no sandbox is left"

# --- the SDK's decisions: per call into the bound log, per tool as sealed "always" ones ---------
approvals() { # APPROVALS-JSON OUT: js.json with context.approvals replaced
    python3 - "$T/js.json" "$2" "$1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["context"]["approvals"] = json.loads(sys.argv[3])
json.dump(d, open(sys.argv[2], "w"))
PY
}
state_query() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$@"; }
approvals '{"exec_command": {"approved": ["c1"], "rejected": []}}' "$T/once.json"
run "$SBX" state import "$T/once.json" -a "$T/guarded.yaml" -o "$T/ost.json"
expect_rc 0 "an SDK approval of the pending call imports"
expect_eq "$(state_query "$T/ost.json" '[(x["call_id"], x["tool"], x["type"], x["turn"], x["approved"], x["by"], x["arguments_digest"][:7]) for x in d["decisions"]]')" \
    "[('c1', 'exec_command', 'function_call', 1, True, 'SDK run state', 'sha256:')]" \
    "into the decision log, bound to the call as the runner binds it"
expect_eq "$(state_query "$T/ost.json" '[p["call_id"] for p in d["pending"]]')" "['c1']" \
    "a log answers nothing: the call still waits"
run "$SBX" state export --sdk "$T/ost.json"
expect_eq "$(python3 -c 'import json,sys; print(json.load(sys.stdin)["context"]["approvals"])' <"$T/out")" \
    "{'exec_command': {'approved': ['c1'], 'rejected': []}}" "and export gives the SDK its decision back"
approvals '{"exec_command": {"approved": true, "rejected": []}}' "$T/always.json"
run "$SBX" state import "$T/always.json" -a "$T/guarded.yaml" -o "$T/ast.json"
expect_rc 0 "an SDK approval of every call of a tool imports"
expect_in "$T/err" "the SDK's run state approves every call of 'exec_command': carried as an 'always' decision" \
    "and says it is carried"
expect_eq "$(state_query "$T/ast.json" '(d["always"], d["always_seal"][:12])')" \
    "([{'approved': True, 'by': 'SDK run state', 'tool': 'exec_command', 'turn': 1}], 'hmac-sha256:')" \
    "as an 'always' decision sealed with this user's key"
run "$SBX" state export --sdk "$T/ast.json"
expect_eq "$(python3 -c 'import json,sys; print(json.load(sys.stdin)["context"]["approvals"])' <"$T/out")" \
    "{'exec_command': {'approved': True, 'rejected': []}}" "export gives it back as the SDK's every-call approval"
mk "$T/s6.json" '[resp(2, msg("Removed."))]'
start_fake "$T/s6.json"
run "$SBX" run --resume "$T/ast.json" -a "$T/guarded.yaml" --base-url "$FAKE_URL"
expect_rc 0 "resumed without --approve, the 'always' decision answers the pending call"
fake_query 'reqs[0]["body"]["input"][-1]["output"]' >"$T/always.out"
expect_in "$T/always.out" "Process exited with code 0" "the call ran"
approvals '{"exec_command": {"approved": [], "rejected": true}}' "$T/never.json"
run "$SBX" state import "$T/never.json" -a "$T/guarded.yaml" -o "$T/nst.json"
expect_rc 0 "an SDK rejection of every call of a tool imports"
mk "$T/s7.json" '[resp(2, msg("Kept."))]'
start_fake "$T/s7.json"
run "$SBX" run --resume "$T/nst.json" -a "$T/guarded.yaml" --base-url "$FAKE_URL"
expect_rc 0 "resumed, the 'always' rejection answers the pending call"
expect_eq "$(fake_query 'reqs[0]["body"]["input"][-1]["output"]')" "Tool execution was not approved." \
    "the call did not run"
expect_eq "$(live_sandboxes)" 0 "the completed runs removed their sandboxes"

# --- what cannot be carried is refused, naming the field ---------------------------------------
refused() { # JSON-EDIT WANT DESC
    python3 - "$T/js.json" "$T/bad.json" "$1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
exec(sys.argv[3])
json.dump(d, open(sys.argv[2], "w"))
PY
    run "$SBX" state import "$T/bad.json" -a "$T/guarded.yaml" -o "$T/bad-st.json"
    expect_rc 1 "$3 is refused"
    expect_in "$T/err" "$2" "$3: the message names it"
    [ ! -e "$T/bad-st.json" ] && ok "$3: no state is written" || not_ok "$3: no state is written"
}
refused 'd["conversationId"] = "conv_1"' "field 'conversationId'" "a server-side conversation"
refused 'd["$schemaVersion"] = "2.0"' "'\$schemaVersion' 2.0 is not one sbx reads" "a schema sbx does not read"
refused 'del d["$schemaVersion"]' "not a run state of the Agents SDK" "a document without \$schemaVersion"
refused 'd["currentAgent"]["name"] = "Someone"' "its current agent 'Someone' is not agent 'Guarded'" "an agent the file lacks"
refused 'd["context"]["approvals"] = {"exec*": {"approved": True, "rejected": []}}' \
    "field 'context.approvals.exec*': a decision for every call of a tool needs a plain tool name" \
    "an every-call decision for a name sbx would read as a glob"
refused 'd["generatedItems"].insert(0, {"type": "tool_call_item", "agent": {"name": "Guarded"}, "rawItem": {"type": "computer_call", "callId": "x", "status": "completed", "action": {"type": "click"}}})' \
    "field 'generatedItems[0]': an item of type 'computer_call' has no counterpart in sbx" "an item sbx lacks"
python3 - "$T/py.json" "$T/dk.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ss = {"type": "docker", "image": "python:3", "container_id": "0123abcd", "manifest": {"root": "/workspace"},
      "snapshot": {"type": "noop", "id": "x"}}
d["sandbox"] = {"backend_id": "docker", "current_agent_name": "Builder", "session_state": ss,
                "sessions_by_agent": {"Builder": {"agent_name": "Builder", "session_state": ss}}}
json.dump(d, open(sys.argv[2], "w"))
PY
run "$SBX" state import "$T/dk.json" -a "$T/builder.yaml" -o "$T/dk-st.json"
expect_rc 1 "a docker session without a workspace snapshot is refused"
expect_in "$T/err" "it names docker container '0123abcd' but no workspace snapshot" "naming the container"
expect_eq "$(live_sandboxes)" 0 "and no sandbox is left"
run "$SBX" state export --sdk "$T/bst.json"
expect_rc 1 "exporting a finished run is refused"
expect_in "$T/err" "field 'status': the run completed" "naming the status"
mk "$T/s5.json" '[resp(1, sh(1, "rm hello.txt"))]'
start_fake "$T/s5.json"
run "$SBX" run -a "$T/guarded.yaml" --state "$T/gs.json" --base-url "$FAKE_URL" "delete"
expect_rc 4 "a sandbox run stops for approval"
run "$SBX" state export --sdk "$T/gs.json"
expect_rc 1 "exporting a run with sbx sandboxes is refused"
expect_in "$T/err" "field 'sandbox': sbx sandboxes cannot be carried" "naming the field"
"$SBX" state rm "$T/gs.json" >/dev/null 2>&1
done_testing
