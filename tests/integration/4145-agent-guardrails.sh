#!/usr/bin/env bash
# Guardrails and acting hooks in agent files, through the real binary and the fake model: an
# input guardrail agent running alongside the first model call trips (exit 5, the turn's tool
# call never runs), a command guardrail in the sandbox trips before the model is asked, an
# output guardrail trips (exit 6), guardrails that pass let the run finish, a tool guardrail
# rejects a call and a tool_start hook vetoes one (the model's next request holds why), hooks
# run in order with their payloads, and the trace and --json output say what happened.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/model-lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
trap 'stop_fake; sandbox_cleanup' EXIT
live() { ls "$RUNBASE" 2>/dev/null | wc -l; }

mkdir -p "$T/agent"
# A host command guardrail: trips when what it is asked mentions "forbidden"; logs its payload.
cat >"$T/agent/words.sh" <<'SH'
#!/bin/sh
p=$(cat)
printf '%s\n' "$p" >>"$GUARD_LOG"
case "$p" in
*forbidden*) echo '{"tripwire_triggered": true, "info": {"found": "forbidden"}}' ;;
*) echo '{"tripwire_triggered": false}' ;;
esac
SH
# A hook: logs its payload; at tool_start it denies calls to "wipe".
cat >"$T/agent/hook.sh" <<'SH'
#!/bin/sh
p=$(cat)
printf '%s\n' "$p" >>"$HOOK_LOG"
case "$p" in
*'"event":"tool_start"'*'"tool":"wipe"'* | *'"tool":"wipe"'*'"event":"tool_start"'*)
    echo '{"decision": "deny", "reason": "wiping is not allowed in this repository"}' ;;
esac
SH
chmod +x "$T/agent/words.sh" "$T/agent/hook.sh"
export GUARD_LOG="$T/guard.log" HOOK_LOG="$T/hook.log" MARK="$T/marks"
JUDGE='{type: object, properties: {tripwire_triggered: {type: boolean}, reasoning: {type: string}}}'
TOOLS="tools:
  - name: mark
    parameters: {type: object, properties: {what: {type: string}}}
    host_command: [sh, -c, 'echo \"\$\$1\" >>\"\$\$MARK\"; echo marked', sh, \$what]
    env: [MARK]
  - name: wipe
    host_command: [sh, -c, 'echo wiped >>\"\$\$MARK\"']
    env: [MARK]"

# --- an input guardrail agent trips while the first turn runs: its calls never run ----------
cat >"$T/agent/judge.yaml" <<YAML
name: Guarded
input_guardrails:
  - name: judge
    agent:
      instructions: You are the input judge.
      output_type: $JUDGE
$TOOLS
YAML
mk "$T/s.json" '[when("input judge", resp(9, msg("{\"tripwire_triggered\": true, \"reasoning\": \"asks for homework\"}"))),
                 when("do my homework", resp(1, fcall(1, "mark", {"what": "turn one"})))]'
start_fake "$T/s.json"
run "$SBX" run --allow-host-tools --base-url "$FAKE_URL" -a "$T/agent/judge.yaml" \
    --trace "$T/t1.jsonl" "do my homework"
expect_rc 5 "a tripped input guardrail ends the run with exit status 5"
expect_in "$T/err" "sbx: input guardrail 'judge' tripped: {\"tripwire_triggered\":true,\"reasoning\":\"asks for homework\"}" \
    "the message names the guardrail and its info"
expect_eq "$(fake_query 'len(reqs)')" 2 "the guardrail agent and the first turn were both asked"
expect_eq "$(fake_query "sorted(r['body'].get('instructions') or '-' for r in reqs)")" \
    "['-', 'You are the input judge.']" "one request is the guardrail agent's"
if [ -e "$MARK" ]; then not_ok "the first turn's tool call did not run"; else ok "the first turn's tool call did not run"; fi
expect_eq "$(python3 -c "
import json,sys
sp=[json.loads(l) for l in open(sys.argv[1])]
print([(s['attributes']['sbx.guardrail.name'], s['attributes']['sbx.guardrail.triggered']) for s in sp if s['name'] == 'guardrail'])" "$T/t1.jsonl")" \
    "[('judge', True)]" "the trace has a guardrail span saying it triggered"

# --- the same with run_in_parallel: false: the model is not asked at all -----------------------
sed 's/^  - name: judge$/  - name: judge\n    run_in_parallel: false/' "$T/agent/judge.yaml" >"$T/agent/judge-first.yaml"
mk "$T/s.json" '[when("input judge", resp(9, msg("{\"tripwire_triggered\": true, \"reasoning\": \"no\"}")))]'
start_fake "$T/s.json"
run "$SBX" run --allow-host-tools --base-url "$FAKE_URL" -a "$T/agent/judge-first.yaml" --json "do my homework"
expect_rc 5 "a guardrail that runs first trips the same way"
expect_eq "$(fake_query 'len(reqs)')" 1 "only the guardrail agent was asked"
expect_in "$T/out" '{"type":"guardrail","turn":1,"agent":"Guarded","guardrail":"judge","kind":"input","triggered":true' \
    "--json reports the guardrail's verdict"
expect_in "$T/out" '"type":"error"' "and the error"

# --- a passing guardrail agent lets the run finish ---------------------------------------------
mk "$T/s.json" '[when("input judge", resp(9, msg("{\"tripwire_triggered\": false, \"reasoning\": \"fine\"}"))),
                 when("tidy", resp(1, fcall(1, "mark", {"what": "tidied"}))),
                 when("function_call_output", resp(2, msg("all tidy")))]'
start_fake "$T/s.json"
run "$SBX" run --allow-host-tools --base-url "$FAKE_URL" -a "$T/agent/judge.yaml" "tidy up"
expect_rc 0 "a guardrail that passes lets the run finish"
expect_in "$T/out" "all tidy" "with its final output"
expect_eq "$(cat "$MARK")" "tidied" "and the first turn's tool ran"
rm -f "$MARK"

# --- a command guardrail in the sandbox trips before the model is asked ------------------------
cat >"$T/agent/sandboxed.yaml" <<'YAML'
name: Sandboxed
capabilities: []
input_guardrails:
  - name: word-check
    run_in_parallel: false
    command: [sh, -c, 'tee -a /workspace/asked.json | grep -q forbidden && echo "{\"tripwire_triggered\": true, \"info\": \"from $$(pwd)\"}" || true']
YAML
mk "$T/s.json" '[resp(1, msg("never"))]'
start_fake "$T/s.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/agent/sandboxed.yaml" "say something forbidden"
expect_rc 5 "a command guardrail in the sandbox trips"
expect_in "$T/err" "input guardrail 'word-check' tripped: \"from /workspace\"" "it ran in the sandbox's workspace"
expect_eq "$(fake_query 'len(reqs)')" 0 "the model was never asked"
mk "$T/s.json" '[resp(1, msg("fine then"))]'
start_fake "$T/s.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/agent/sandboxed.yaml" "say something nice"
expect_rc 0 "the same guardrail passes harmless input"
expect_in "$T/out" "fine then" "and the run finishes"

# --- an output guardrail trips on the final output ---------------------------------------------
cat >"$T/agent/out.yaml" <<YAML
name: Careful
input_guardrails: [{name: words-in, host_command: [./words.sh], env: [GUARD_LOG]}]
output_guardrails: [{name: words-out, host_command: [./words.sh], env: [GUARD_LOG]}]
$TOOLS
YAML
mk "$T/s.json" '[resp(1, msg("here is the forbidden answer"))]'
start_fake "$T/s.json"
rm -f "$GUARD_LOG"
run "$SBX" run --allow-host-tools --base-url "$FAKE_URL" -a "$T/agent/out.yaml" --state "$T/S.json" "ask"
expect_rc 6 "a tripped output guardrail ends the run with exit status 6"
expect_in "$T/err" "sbx: output guardrail 'words-out' tripped: {\"found\":\"forbidden\"}" "naming it and its info"
expect_eq "$(wc -c <"$T/out")" 0 "stdout stays empty"
expect_eq "$(python3 -c "
import json,sys
for l in open(sys.argv[1]):
    p=json.loads(l); print(p['guardrail'], p['kind'], p.get('input', p.get('output')))" "$GUARD_LOG")" \
    "words-in input [{'type': 'message', 'role': 'user', 'content': 'ask'}]
words-out output here is the forbidden answer" "each guardrail got its payload on stdin"
expect_eq "$(python3 -c "
import json,sys
s=json.load(open(sys.argv[1])); print(s['status'], s['tripwire']['guardrail'], s['guardrails'])" "$T/S.json")" \
    "failed words-out {'input': 'passed'}" "the run state says which guardrail tripped and that the input ones passed"
run "$SBX" state show "$T/S.json"
expect_in "$T/out" "tripwire: output guardrail 'words-out'" "sbx state show names it"

# --- a tool guardrail rejects a call; a tool_start hook vetoes another -------------------------
cat >"$T/agent/tools.yaml" <<YAML
name: Toolbox
hooks:
  - {on: run_start, host_command: [./hook.sh], env: [HOOK_LOG]}
  - {on: agent_start, host_command: [./hook.sh], env: [HOOK_LOG]}
  - {on: tool_start, host_command: [./hook.sh], env: [HOOK_LOG]}
  - {on: tool_end, tools: [mark], host_command: [./hook.sh], env: [HOOK_LOG]}
  - {on: agent_end, host_command: [./hook.sh], env: [HOOK_LOG]}
  - {on: run_end, host_command: [./hook.sh], env: [HOOK_LOG]}
tools:
  - name: mark
    parameters: {type: object, properties: {what: {type: string}}}
    host_command: [sh, -c, 'echo "\$\$1" >>"\$\$MARK"; echo marked', sh, \$what]
    env: [MARK]
    tool_input_guardrails: [{name: words-tool, host_command: [./words.sh], env: [GUARD_LOG]}]
  - name: wipe
    host_command: [sh, -c, 'echo wiped >>"\$\$MARK"']
    env: [MARK]
YAML
mk "$T/s.json" '[resp(1, fcall(1, "mark", {"what": "forbidden thing"}), fcall(2, "wipe", {}), fcall(3, "mark", {"what": "fine thing"})),
                 resp(2, msg("done"))]'
start_fake "$T/s.json"
rm -f "$HOOK_LOG" "$GUARD_LOG"
run "$SBX" run --allow-host-tools --base-url "$FAKE_URL" -a "$T/agent/tools.yaml" --trace "$T/t2.jsonl" "go"
expect_rc 0 "a rejected call and a vetoed call do not end the run"
expect_eq "$(cat "$MARK")" "fine thing" "only the allowed call ran"
out_of() {
    fake_query "[i['output'] for i in reqs[-1]['body']['input'] if i.get('call_id') == '$1' and i['type'] == 'function_call_output'][0]"
}
expect_eq "$(out_of c1)" "guardrail 'words-tool' rejected this tool call" \
    "the model reads the tool guardrail's rejection"
expect_eq "$(out_of c2)" "wiping is not allowed in this repository" "the model reads why the hook vetoed the call"
expect_eq "$(out_of c3)" "marked" "the allowed call's output is its own"
expect_eq "$(python3 -c "
import json,sys
for l in open(sys.argv[1]):
    p=json.loads(l); print(p['event'], p['agent'], p['turn'], p.get('tool', '-'), json.dumps(p.get('arguments', p.get('output', p.get('input', '-')))))" "$HOOK_LOG")" \
    "run_start Toolbox 0 - [{\"type\": \"message\", \"role\": \"user\", \"content\": \"go\"}]
agent_start Toolbox 0 - \"-\"
tool_start Toolbox 1 mark {\"what\": \"forbidden thing\"}
tool_start Toolbox 1 wipe {}
tool_start Toolbox 1 mark {\"what\": \"fine thing\"}
tool_end Toolbox 1 mark {\"what\": \"fine thing\"}
agent_end Toolbox 2 - \"done\"
run_end Toolbox 2 - \"-\"" "hooks ran in order, each with its event's payload"
expect_eq "$(python3 -c "
import json,sys
for l in open(sys.argv[1]):
    p=json.loads(l)
    if p['event'] == 'run_end': print(p['status'], p['final_output'])" "$HOOK_LOG")" \
    "completed done" "run_end gets the status and the final output"
expect_eq "$(python3 -c "
import json,sys
sp=[json.loads(l) for l in open(sys.argv[1])]
print(sorted((s['name'], s['attributes'].get('sbx.hook.decision', '-')) for s in sp if s['name'].startswith('hook ')))" "$T/t2.jsonl")" \
    "[('hook agent_end', '-'), ('hook agent_start', '-'), ('hook run_end', '-'), ('hook run_start', '-'), ('hook tool_end', '-'), ('hook tool_start', '-'), ('hook tool_start', '-'), ('hook tool_start', 'deny')]" \
    "every hook has its span, the veto says so"

# --- a tool guardrail that raises ends the run with exit status 5 ------------------------------
sed 's/tool_input_guardrails: \[{name: words-tool, host_command: \[.\/words.sh\], env: \[GUARD_LOG\]}\]/tool_input_guardrails: [{name: words-tool, host_command: [.\/words.sh], env: [GUARD_LOG], behavior: raise_exception}]/' \
    "$T/agent/tools.yaml" >"$T/agent/raise.yaml"
mk "$T/s.json" '[resp(1, fcall(1, "mark", {"what": "forbidden thing"})), resp(2, msg("never"))]'
start_fake "$T/s.json"
rm -f "$MARK"
run "$SBX" run --allow-host-tools --base-url "$FAKE_URL" -a "$T/agent/raise.yaml" "go"
expect_rc 5 "a tool guardrail that raises ends the run with the input side's status"
expect_in "$T/err" "tool 'mark': tool input guardrail 'words-tool' tripped: {\"found\":\"forbidden\"}" "naming the tool and the guardrail"
if [ -e "$MARK" ]; then not_ok "the call did not run"; else ok "the call did not run"; fi

# --- a run resumed after an approval does not run its input guardrails again ------------------
cat >"$T/agent/approve.yaml" <<YAML
name: Approved
input_guardrails: [{name: words-in, host_command: [./words.sh], env: [GUARD_LOG]}]
tools:
  - name: mark
    parameters: {type: object, properties: {what: {type: string}}}
    host_command: [sh, -c, 'echo "\$\$1" >>"\$\$MARK"; echo marked', sh, \$what]
    env: [MARK]
    needs_approval: true
YAML
mk "$T/s.json" '[resp(1, fcall(1, "mark", {"what": "approved"})), resp(2, msg("marked it"))]'
start_fake "$T/s.json"
rm -f "$GUARD_LOG" "$MARK"
run "$SBX" run --allow-host-tools --base-url "$FAKE_URL" -a "$T/agent/approve.yaml" --state "$T/A.json" "mark it"
expect_rc 4 "the run waits for approval"
expect_eq "$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['guardrails'])" "$T/A.json")" \
    "{'input': 'passed'}" "its state records the input guardrails passed"
run "$SBX" run --allow-host-tools --base-url "$FAKE_URL" -a "$T/agent/approve.yaml" --resume "$T/A.json" --approve c1
expect_rc 0 "the resumed run finishes"
expect_eq "$(cat "$MARK")" "approved" "the approved call ran"
expect_eq "$(grep -c '"kind":"input"' "$GUARD_LOG")" 1 "the input guardrail ran once, not again on resume"

# --- agents as a hook and as an output guardrail ----------------------------------------------
cat >"$T/agent/agents.yaml" <<YAML
name: Reviewed
output_guardrails:
  - name: reviewer
    tripwire_field: leaks
    agent:
      instructions: You are the output reviewer.
      output_type: {type: object, properties: {leaks: {type: boolean}, why: {type: string}}}
hooks:
  - on: tool_start
    agent:
      instructions: You are the policy hook.
      output_type: {type: object, properties: {decision: {type: string}, reason: {type: string}}}
$TOOLS
YAML
mk "$T/s.json" '[when("policy hook", resp(8, msg("{\"decision\": \"deny\", \"reason\": \"the policy agent says no\"}"))),
                 when("output reviewer", resp(9, msg("{\"leaks\": true, \"why\": \"names a host\"}"))),
                 resp(1, fcall(1, "mark", {"what": "x"})),
                 resp(2, msg("the host is db7"))]'
start_fake "$T/s.json"
rm -f "$MARK"
run "$SBX" run --allow-host-tools --base-url "$FAKE_URL" -a "$T/agent/agents.yaml" "go"
expect_rc 6 "an output guardrail agent trips on its own tripwire field"
expect_in "$T/err" "output guardrail 'reviewer' tripped: {\"leaks\":true,\"why\":\"names a host\"}" "with its answer as the info"
if [ -e "$MARK" ]; then not_ok "the hook agent denied the call"; else ok "the hook agent denied the call"; fi
expect_eq "$(fake_query "[i['output'] for r in reqs if not r['body'].get('instructions') for i in r['body']['input'] if i.get('call_id') == 'c1' and i['type'] == 'function_call_output']")" \
    "['the policy agent says no']" "the model read the hook agent's reason"
expect_eq "$(fake_query "[json.loads(r['body']['input'][0]['content'])['tool'] for r in reqs if r['body'].get('instructions') == 'You are the policy hook.']")" "['mark']" \
    "the hook agent was asked with the event's payload"

# --- agent-level tool guardrails reach a capability's tool (exec_command in the sandbox) ------
cat >"$T/agent/shell.yaml" <<'YAML'
name: Shell
capabilities: [shell]
tool_guardrails:
  - tools: [exec_*]
    tool_input_guardrails:
      - name: no-rm
        command: [sh, -c, 'grep -q "rm -rf" && echo "{\"tripwire_triggered\": true, \"message\": \"rm -rf is not allowed here\"}" || true']
YAML
mk "$T/s.json" '[resp(1, sh(1, "rm -rf /workspace/keep"), sh(2, "mkdir -p keep && echo still-here")), resp(2, msg("ok"))]'
start_fake "$T/s.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/agent/shell.yaml" "go"
expect_rc 0 "a run whose exec_command call a tool guardrail rejected finishes"
expect_eq "$(out_of c1)" "rm -rf is not allowed here" "the model reads the guardrail's message instead"
expect_eq "$(fake_query "'still-here' in [i['output'] for i in reqs[-1]['body']['input'] if i.get('call_id') == 'c2' and i['type'] == 'function_call_output'][0]")" \
    True "the other call ran"

# --- a guardrail that fails is an error, not a pass --------------------------------------------
cat >"$T/agent/broken.yaml" <<'YAML'
name: Broken
input_guardrails: [{name: broken, host_command: [sh, -c, 'echo guard crashed >&2; exit 2'], run_in_parallel: false}]
YAML
mk "$T/s.json" '[resp(1, msg("never"))]'
start_fake "$T/s.json"
run "$SBX" run --allow-host-tools --base-url "$FAKE_URL" -a "$T/agent/broken.yaml" "go"
expect_rc 1 "a failing guardrail fails the run (exit status 1)"
expect_in "$T/err" "input guardrail 'broken': 'sh' ended with status 2; stderr: guard crashed" "saying how it failed"
expect_eq "$(fake_query 'len(reqs)')" 0 "the model was not asked"

# --- host guardrails and hooks need --allow-host-tools ----------------------------------------
run "$SBX" run --base-url "$FAKE_URL" -a "$T/agent/broken.yaml" "go"
expect_rc 1 "a host guardrail is refused without --allow-host-tools"
expect_in "$T/err" "input guardrail 'broken' runs 'sh' on this machine, outside every sandbox: give --allow-host-tools" \
    "naming the guardrail"
expect_eq "$(live)" 0 "no sandbox was left"

done_testing
