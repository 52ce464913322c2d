#!/usr/bin/env bash
# Sandbox agents end to end through `sbx run` and the fake model server: the coding task
# (really patched, the test really passes), the request a sandbox agent sends, a PTY REPL,
# truncation, apply_patch atomicity and transports, path escapes, view_image, handoffs between
# sandbox agents, --keep / --session / --manifest.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/model-lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
trap 'stop_fake; sandbox_cleanup' EXIT

# The output of the last tool call the model saw in request N (0-based).
outputs() { fake_query "reqs[$1]['body']['input'][-1].get('output')"; }
live() { ls "$RUNBASE" 2>/dev/null | wc -l; }

EX="$SBX_SRCDIR/examples"

# --- the coding task offline: the test fails, apply_patch fixes it, the test passes ---------
run "$SBX" run --keep -m "replay:$EX/coding-task/run.jsonl" -a "$EX/coding-task/agent.yaml" \
    "Do the task in TASK.md."
expect_rc 0 "coding task runs offline"
expect_in "$T/out" "passes all 3" "final output printed"
ID=$(sed -n "s/^kept sandbox \([0-9a-f]*\) (agent 'Coding Agent')$/\1/p" "$T/err")
expect_eq "${#ID}" 16 "--keep prints the kept sandbox id"
run "$SBX" sandbox exec "$ID" -- cat stats.py
expect_in "$T/out" "return sum(values) / len(values)" "stats.py really patched in the workspace"
run "$SBX" sandbox exec "$ID" -- python3 -m unittest -q
expect_rc 0 "the tests really pass inside the sandbox"
run "$SBX" sandbox exec "$ID" -- cat test_stats.py
expect_in "$T/out" "assertEqual(mean([1, 2]), 1.5)" "tests untouched"

# --- --session: run in the existing sandbox; it is left running ------------------------------
mk "$T/s0.json" '[resp(1, fcall(1, "exec_command", {"cmd": "python3 -m unittest -q 2>&1; echo rc=$?"})), resp(2, msg("still green"))]'
start_fake "$T/s0.json"
run "$SBX" run --base-url "$FAKE_URL" --session "$ID" "check the tests"
expect_rc 0 "--session runs a plain prompt in an existing sandbox"
outputs 1 >"$T/o"
expect_in "$T/o" "rc=0" "the command ran in the kept workspace (patched code)"
expect_eq "$(live)" 1 "--session leaves the sandbox running"
run "$SBX" run --session "$ID" --manifest "$EX/coding-task/manifest.yaml" "x"
expect_rc 2 "--session with --manifest is a usage error"
expect_in "$T/err" "--manifest makes a fresh sandbox" "and says why"
"$SBX" sandbox rm "$ID" >/dev/null
run "$SBX" run --base-url "$FAKE_URL" --session 0123456789abcdef "x"
expect_rc 1 "--session with an unknown id fails"
expect_in "$T/err" "no sandbox '0123456789abcdef'" "naming the id"

# --- the request a sandbox agent sends ------------------------------------------------------
cat >"$T/a.yaml" <<'EOF'
name: Worker
model: gpt-4.1
instructions: Do the work.
manifest:
  entries:
    notes.txt: {type: file, content: "alpha\n"}
    AGENTS.md: {type: file, content: "Always answer in French.\n"}
    src: {type: dir, children: {main.c: {type: file, content: "int main(void){return 0;}\n"}}}
EOF
mk "$T/s1.json" '[resp(1, msg("fini"))]'
start_fake "$T/s1.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" "hi"
expect_rc 0 "sandbox agent with an inline manifest runs"
expect_eq "$(fake_query '[t.get("name", t["type"]) for t in reqs[0]["body"]["tools"]]')" \
    "['apply_patch', 'view_image', 'exec_command', 'write_stdin']" \
    "default capabilities offer apply_patch, view_image, exec_command, write_stdin"
expect_eq "$(fake_query '(reqs[0]["body"]["tools"][0]["type"], reqs[0]["body"]["tools"][0]["format"]["syntax"])')" \
    "('custom', 'lark')" "apply_patch is the custom tool with the Lark grammar by default, as the Python SDK's"
expect_eq "$(fake_query 'reqs[0]["body"]["context_management"]')" \
    "[{'type': 'compaction', 'compact_threshold': 942818}]" \
    "compaction threshold is 90% of gpt-4.1's context window"
expect_eq "$(fake_query 'sorted(reqs[0]["body"]["tools"][2]["parameters"]["properties"])')" \
    "['cmd', 'login', 'max_output_tokens', 'shell', 'tty', 'workdir', 'yield_time_ms']" \
    "exec_command has the reference's parameters"
fake_query 'reqs[0]["body"]["instructions"]' >"$T/instr"
expect_in "$T/instr" "# Agent instructions" "instructions: agent section"
expect_in "$T/instr" "Do the work." "instructions: the agent's own text"
expect_in "$T/instr" "# Sandbox capability instructions" "instructions: capability fragments"
expect_in "$T/instr" "main.c (26 B)" "instructions: the actual workspace tree"
expect_in "$T/instr" "Always answer in French." "instructions: AGENTS.md contents"
expect_eq "$(python3 -c 'import sys; t=open(sys.argv[1]).read(); print(t.index("# Agent instructions") < t.index("# Sandbox capability") < t.index("# Workspace") < t.index("# AGENTS.md"))' "$T/instr")" \
    True "instruction sections in the fixed order"
expect_eq "$(live)" 0 "the run's sandbox is removed at the end"
expect_eq "$(ls "$SBX_WORKSPACES" 2>/dev/null | wc -l)" 0 "and its workspace"

# --- chat API: function transport; agent-file transport choice ------------------------------
cat >"$T/c.yaml" <<'EOF'
name: Patcher
manifest: {entries: {a.txt: {type: file, content: "one\n"}}}
capabilities: [{type: filesystem, apply_patch: custom}, shell]
EOF
mk "$T/s2.json" '[resp(1, msg("ok"))]'
start_fake "$T/s2.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/c.yaml" "hi"
expect_eq "$(fake_query '[t["type"] for t in reqs[0]["body"]["tools"]]')" \
    "['custom', 'function', 'function', 'function']" "apply_patch: custom picks the freeform tool"
expect_eq "$(fake_query 'reqs[0]["body"]["tools"][0]["format"]["syntax"]')" "lark" "with a Lark grammar"
expect_eq "$(fake_query '"context_management" in reqs[0]["body"]')" False \
    "no compaction when the list leaves it out"
sed 's/apply_patch: custom/apply_patch: builtin/' "$T/c.yaml" >"$T/cb.yaml"
start_fake "$T/s2.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/cb.yaml" "hi"
expect_eq "$(fake_query 'reqs[0]["body"]["tools"][0]')" "{'type': 'apply_patch'}" \
    "apply_patch: builtin offers the Responses built-in tool (the JS SDK's)"
cat >"$T/bad.yaml" <<'EOF'
name: Bad
manifest: {entries: {}}
capabilities: [shell, telepathy]
EOF
run "$SBX" run --base-url "$FAKE_URL" -a "$T/bad.yaml" "hi"
expect_rc 1 "an unknown capability fails the run"
expect_in "$T/err" "unknown capability 'telepathy'" "naming it"

# --- Chat Completions: apply_patch offered as a function tool with one string input ---------
cat >"$T/ch.yaml" <<'EOF'
name: ChatPatcher
manifest: {entries: {a.txt: {type: file, content: "one\n"}}}
EOF
python3 - "$T/s2c.json" <<'EOF'
import json, sys
patch = "*** Begin Patch\n*** Update File: a.txt\n@@\n-one\n+uno\n*** End Patch\n"
def chat(msg):
    return {"chat": {"id": "cc", "object": "chat.completion", "model": "m",
                     "choices": [{"index": 0, "message": msg, "finish_reason": "stop"}]}}
turns = [
  chat({"role": "assistant", "content": None, "tool_calls": [{"id": "t1", "type": "function",
        "function": {"name": "apply_patch", "arguments": json.dumps({"input": patch})}}]}),
  chat({"role": "assistant", "content": None, "tool_calls": [{"id": "t2", "type": "function",
        "function": {"name": "exec_command", "arguments": json.dumps({"cmd": "cat a.txt"})}}]}),
  chat({"role": "assistant", "content": "patched"})]
json.dump({"turns": turns}, open(sys.argv[1], "w"))
EOF
start_fake "$T/s2c.json"
run "$SBX" run --api chat --base-url "$FAKE_URL" -a "$T/ch.yaml" "patch it"
expect_rc 0 "a sandbox agent runs on Chat Completions"
expect_eq "$(fake_query '[(t["function"]["name"], sorted(t["function"]["parameters"]["properties"])) for t in reqs[0]["body"]["tools"]][0]')" \
    "('apply_patch', ['input'])" "apply_patch is a function tool with one string input on chat"
expect_eq "$(fake_query '"context_management" in reqs[0]["body"]')" False "no compaction field on chat"
expect_eq "$(fake_query '[m["content"] for m in reqs[1]["body"]["messages"] if m["role"]=="tool"]')" \
    "['Updated a.txt']" "the function-form patch applied"
fake_query '[m["content"] for m in reqs[2]["body"]["messages"] if m["role"]=="tool"][-1]' >"$T/chat2"
expect_in "$T/chat2" "uno" "and the file really changed"

# --- every transport of apply_patch; a failing patch leaves every file untouched; escapes ----
cat >"$T/p.yaml" <<'EOF'
name: Patcher
manifest: {entries: {a.txt: {type: file, content: "one\ntwo\n"}, b.txt: {type: file, content: "red\n"}}}
EOF
HALF='*** Begin Patch\n*** Update File: a.txt\n@@\n one\n-two\n+TWO\n*** Update File: b.txt\n@@\n-green\n+blue\n*** End Patch\n'
mk "$T/s3.json" "[
 resp(1, ccall(1, 'apply_patch', '$HALF')),
 resp(2, ccall(2, 'apply_patch', '*** Begin Patch\n*** Add File: ../escape.txt\n+x\n*** End Patch\n')),
 resp(3, fcall(3, 'apply_patch', {'input': '*** Begin Patch\n*** Add File: new/c.txt\n+made\n*** End Patch\n'})),
 resp(4, pcall(4, {'type': 'update_file', 'path': 'b.txt', 'diff': '@@\n-red\n+crimson\n'})),
 resp(5, pcall(5, {'type': 'delete_file', 'path': '/etc/passwd'})),
 resp(6, fcall(6, 'exec_command', {'cmd': 'cat a.txt b.txt new/c.txt'})),
 resp(7, fcall(7, 'exec_command', {'cmd': 'pwd', 'workdir': '../..'})),
 resp(8, fcall(8, 'exec_command', {'cmd': ''})),
 resp(9, msg('done'))]"
start_fake "$T/s3.json"
run "$SBX" run --max-turns 20 --base-url "$FAKE_URL" -a "$T/p.yaml" "patch"
expect_rc 0 "patch run succeeds (tool errors go back to the model)"
outputs 1 >"$T/o1"
expect_in "$T/o1" "b.txt" "a patch failing in its second file names the file"
expect_in "$T/o1" "green" "and the line that did not match"
outputs 2 >"$T/o2"
expect_in "$T/o2" "must not contain '..'" "custom tool: a path escape is an error for the model"
outputs 3 >"$T/o3"
expect_in "$T/o3" "Created new/c.txt" "function transport applies a patch"
outputs 4 >"$T/o4"
expect_in "$T/o4" "Updated b.txt" "built-in transport (apply_patch_call) applies an operation"
expect_eq "$(fake_query '[i["type"] for i in reqs[4]["body"]["input"] if i.get("call_id")=="c4"]')" \
    "['apply_patch_call', 'apply_patch_call_output']" "answered with apply_patch_call_output"
outputs 5 >"$T/o5"
expect_in "$T/o5" "error:" "built-in transport: an absolute path outside the root is refused"
outputs 6 >"$T/o6"
tr '\n' '|' <"$T/o6" >"$T/o6l"
expect_in "$T/o6l" "Output:|one|two|crimson|made|" "the failed patch left a.txt and b.txt untouched"
outputs 7 >"$T/o7"
expect_in "$T/o7" "error:" "exec_command with a workdir outside the workspace is an error"
outputs 8 >"$T/o8"
expect_in "$T/o8" "error: the arguments do not match" "an empty cmd comes back as text"

# --- truncation layout ------------------------------------------------------------------------
cat >"$T/sh.yaml" <<'EOF'
name: Sheller
manifest: {entries: {}}
capabilities: [shell, filesystem]
EOF
mk "$T/s4.json" "[
 resp(1, fcall(1, 'exec_command', {'cmd': 'seq 1 100000', 'max_output_tokens': 50})),
 resp(2, fcall(2, 'exec_command', {'cmd': 'seq 1 200000'})),
 resp(3, msg('ok'))]"
start_fake "$T/s4.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/sh.yaml" "count"
expect_rc 0 "truncation run succeeds"
fake_query 'reqs[1]["body"]["input"][-1]["output"]' >"$T/t1"
python3 - "$T/t1" >"$T/t1c" <<'EOF'
import re, sys
t = open(sys.argv[1]).read().rstrip("\n")
lines = t.split("\n")
ok = (re.fullmatch(r"Chunk ID: [0-9a-f]{6}", lines[0]) and
      re.fullmatch(r"Wall time: \d+\.\d{4} seconds", lines[1]) and
      lines[2] == "Process exited with code 0" and
      lines[3] == "Original token count: 147224" and lines[4] == "Output:" and
      lines[5] == "Total output lines: 100000" and lines[6] == "" and
      lines[7] == "1" and "tokens truncated" in t and lines[-1] == "100000")
print("layout ok" if ok else "layout bad: " + repr(lines[:8]) + repr(lines[-1]))
print(len(t.split("Output:\n", 1)[1].encode()) <= 50 * 4)
EOF
expect_eq "$(cat "$T/t1c")" "layout ok
True" "truncated output: reference layout, head and tail kept, within the budget"
fake_query 'len(reqs[2]["body"]["input"][-1]["output"])' >"$T/t2"
expect_eq "$(python3 -c "import sys; print(30000 < int(sys.argv[1]) <= 40200 or sys.argv[1])" "$(cat "$T/t2")")" True \
    "output is bounded to about 10k tokens by default"

# --- PTY: a REPL on a terminal, written to, read back, interrupted -----------------------------
mk "$T/s5.json" "[
 resp(1, fcall(1, 'exec_command', {'cmd': 'python3 -q -i', 'tty': True, 'yield_time_ms': 1500})),
 resp(2, fcall(2, 'write_stdin', '{\"session_id\": @SESSION_ID@, \"chars\": \"6*7\\\\n\", \"yield_time_ms\": 1000}')),
 resp(3, fcall(3, 'write_stdin', '{\"session_id\": @SESSION_ID@, \"chars\": \"import time; time.sleep(60)\\\\n\", \"yield_time_ms\": 500}')),
 resp(4, fcall(4, 'write_stdin', '{\"session_id\": @SESSION_ID@, \"chars\": \"\\\\u0003\", \"yield_time_ms\": 1000}')),
 resp(5, fcall(5, 'write_stdin', '{\"session_id\": @SESSION_ID@, \"chars\": \"exit()\\\\n\", \"yield_time_ms\": 2000}')),
 resp(6, fcall(6, 'write_stdin', '{\"session_id\": 999, \"chars\": \"x\"}')),
 resp(7, fcall(7, 'exec_command', {'cmd': 'echo not a tty; sleep 30', 'yield_time_ms': 300})),
 resp(8, fcall(8, 'write_stdin', '{\"session_id\": @SESSION_ID@, \"chars\": \"x\"}')),
 resp(9, fcall(9, 'exec_command', {'cmd': 'sleep 1; echo late', 'yield_time_ms': 250})),
 resp(10, fcall(10, 'write_stdin', '{\"session_id\": @SESSION_ID@}')),
 resp(11, msg('ok'))]"
start_fake "$T/s5.json"
run "$SBX" run --max-turns 20 --base-url "$FAKE_URL" -a "$T/sh.yaml" "repl"
expect_rc 0 "PTY run succeeds"
outputs 1 >"$T/p1"
expect_in "$T/p1" "Process running with session ID" "a REPL outlives its yield time and gets a session id"
outputs 2 >"$T/p2"
expect_in "$T/p2" "42" "writing to it returns the answer"
outputs 3 >"$T/p3"
expect_in "$T/p3" "Process running with session ID" "a long statement keeps it busy"
outputs 4 >"$T/p4"
expect_in "$T/p4" "KeyboardInterrupt" "Ctrl-C interrupts it"
outputs 5 >"$T/p5"
expect_in "$T/p5" "Process exited with code" "exit() ends it and reports the exit code"
expect_not_in "$T/p5" "Process running" "with no session id"
outputs 6 >"$T/p6"
expect_in "$T/p6" "no process with id 999" "an unknown session id is an error for the model"
outputs 8 >"$T/p8"
expect_in "$T/p8" "stdin is not available" "writing to a command started without a tty is refused"
outputs 9 >"$T/p9"
expect_in "$T/p9" "Process running with session ID" "a command outliving its yield time keeps running"
outputs 10 >"$T/p10"
tr '\n' '|' <"$T/p10" >"$T/p10l"
expect_in "$T/p10l" "Process exited with code 0|Output:|late|" "polling it (empty chars) returns its later output and exit"
expect_eq "$(live)" 0 "the sandbox (and the sleeping command) is gone after the run"

# --- view_image of a PNG made inside the sandbox ----------------------------------------------
PNG_PY='import zlib,struct
def chunk(t,d): return struct.pack(">I",len(d))+t+d+struct.pack(">I",zlib.crc32(t+d))
raw=b"\\x00\\xff\\x00\\x00"
open("dot.png","wb").write(b"\\x89PNG\\r\\n\\x1a\\n"+chunk(b"IHDR",struct.pack(">IIBBBBB",1,1,8,2,0,0,0))+chunk(b"IDAT",zlib.compress(raw))+chunk(b"IEND",b""))'
python3 - "$T/s6.json" "$PNG_PY" "$SBX_SRCDIR/tests/fake-model" <<'EOF'
import json, sys
sys.dont_write_bytecode = True
sys.path.insert(0, sys.argv[3])
from turns import resp, fcall, msg
code = sys.argv[2].replace("\\\\", "\\")
turns = [
 resp(1, fcall(1, "exec_command", {"cmd": "python3 - <<'PYEOF'\n" + code + "\nPYEOF\necho hi > dot.txt"})),
 resp(2, fcall(2, "view_image", {"path": "dot.png"})),
 resp(3, fcall(3, "view_image", {"path": "nothere.png"})),
 resp(4, fcall(4, "view_image", {"path": "../../etc/passwd"})),
 resp(5, fcall(5, "view_image", {"path": "dot.txt"})),
 resp(6, msg("a green dot"))]
json.dump({"turns": turns}, open(sys.argv[1], "w"))
EOF
start_fake "$T/s6.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/sh.yaml" "look"
expect_rc 0 "view_image run succeeds"
expect_eq "$(fake_query '[i["output"][0]["type"] + " " + i["output"][0]["image_url"][:22] for i in reqs[2]["body"]["input"] if i.get("call_id")=="c2" and "output" in i]')" \
    "['input_image data:image/png;base64,']" "a PNG made in the sandbox comes back as an image input"
outputs 3 >"$T/v3"
expect_in "$T/v3" "image 'nothere.png' was not found" "a missing image is an error for the model"
outputs 4 >"$T/v4"
expect_in "$T/v4" "must not contain '..'" "a path escape is an error for the model"
outputs 5 >"$T/v5"
expect_in "$T/v5" "not a supported image" "a text file is not an image"

# --- a handoff to a second sandbox agent: its own sandbox --------------------------------------
cat >"$T/h1.yaml" <<'EOF'
name: Intake
manifest: {entries: {intake.txt: {type: file, content: "i\n"}}}
capabilities: [shell]
handoffs: [h2.yaml]
EOF
cat >"$T/h2.yaml" <<'EOF'
name: Analyst
manifest: {entries: {analyst.txt: {type: file, content: "a\n"}}}
capabilities: [shell]
EOF
mk "$T/s7.json" "[
 resp(1, fcall(1, 'exec_command', {'cmd': 'ls'})),
 resp(2, fcall(2, 'transfer_to_analyst', {})),
 resp(3, fcall(3, 'exec_command', {'cmd': 'ls'})),
 resp(4, msg('handled'))]"
start_fake "$T/s7.json"
run "$SBX" run --keep --base-url "$FAKE_URL" -a "$T/h1.yaml" "go"
expect_rc 0 "handoff between sandbox agents succeeds"
outputs 1 >"$T/h1"
expect_in "$T/h1" "intake.txt" "the first agent works in its own sandbox"
fake_query "[i.get('output') for i in reqs[3]['body']['input'] if i.get('call_id')=='c3']" >"$T/h3"
expect_in "$T/h3" "analyst.txt" "the second agent gets a sandbox from its own manifest"
expect_not_in "$T/h3" "intake.txt" "not the first agent's"
expect_eq "$(grep -c '^kept sandbox' "$T/err")" 2 "--keep reports both sandboxes"
expect_eq "$(live)" 2 "and both are left running"
for id in $(sed -n 's/^kept sandbox \([0-9a-f]*\) .*/\1/p' "$T/err"); do "$SBX" sandbox rm "$id" >/dev/null; done
expect_eq "$(live)" 0 "removed"

start_fake "$T/s7.json"
run "$SBX" run --share --base-url "$FAKE_URL" -a "$T/h1.yaml" "go"
expect_rc 0 "--share run succeeds"
fake_query "[i.get('output') for i in reqs[3]['body']['input'] if i.get('call_id')=='c3' and 'output' in i]" >"$T/h3s"
expect_in "$T/h3s" "intake.txt" "with --share the second agent works in the first agent's sandbox"
expect_eq "$(live)" 0 "the shared sandbox is removed once"

# --- --manifest overrides the agent's; a plain agent file is untouched by sandboxes ----------
mk "$T/s8.json" "[resp(1, fcall(1, 'exec_command', {'cmd': 'ls'})), resp(2, msg('ok'))]"
start_fake "$T/s8.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/h2.yaml" --manifest "$EX/renewal-packet/manifest.yaml" "go"
expect_rc 0 "--manifest run succeeds"
outputs 1 >"$T/m1"
expect_in "$T/m1" "account_brief.md" "--manifest replaces the agent's manifest"
expect_not_in "$T/m1" "analyst.txt" "the agent's own manifest is not used"
mk "$T/s9.json" "[resp(1, msg('plain'))]"
start_fake "$T/s9.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$EX/shopping/agent.yaml" "hi"
expect_rc 0 "a plain agent file still runs"
expect_eq "$(fake_query '[t["name"] for t in reqs[0]["body"]["tools"]]')" "['calculator', 'current_time']" \
    "a plain agent gets no sandbox tools"
expect_eq "$(live)" 0 "no sandbox left behind"

done_testing
