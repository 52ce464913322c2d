#!/usr/bin/env bash
# Pause for approval through the real binary and the fake model server: a sandbox agent with
# needs_approval stops with status 4 and a run state file, listing the pending call; --resume
# --approve runs it in the same sandbox, --reject tells the model and never runs it; a call id
# that is not pending is refused without touching the file; rules with `when:` globs; the
# --json interruption event; secrets kept out of the file; a Responses run resumed over Chat.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/model-lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
. "$(dirname "$0")/runstate-lib.sh"
trap 'stop_fake; sandbox_cleanup' EXIT

cat >"$T/a.yaml" <<'EOF'
name: Worker
capabilities: [shell]
manifest: {entries: {}}
needs_approval: [exec_command]
EOF

# --- needs_approval: [exec_command] stops the run before the command runs ---------------------
mk "$T/s.json" '[resp(1, sh(1, "cat before.txt; echo ran > ran.txt")), resp(2, msg("all done"))]'
start_fake "$T/s.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --state "$T/S.json" "go"
expect_rc 4 "a call that needs approval stops the run with status 4"
expect_in "$T/err" "sbx: waiting for approval (state saved to $T/S.json):" "stderr says it waits"
expect_in "$T/err" '  c1  exec_command  {"cmd":"cat before.txt; echo ran > ran.txt"' \
    "and lists the call: id, tool, arguments"
expect_in "$T/err" "continue with: sbx run --resume $T/S.json -a $T/a.yaml --approve <call_id>|all" "and how to go on"
expect_eq "$(sfield "$T/S.json" 's["status"]')" "interrupted" "the state file says interrupted"
expect_eq "$(sfield "$T/S.json" '[p["call_id"] for p in s["pending"]]')" "['c1']" "with the pending call"
ID=$(the_id)
expect_eq "$(live)" 1 "the sandbox is kept running for the resume"
expect_eq "$(sfield "$T/S.json" 's["sandbox"]["sessions_by_agent"]["Worker"]["session_state"]["id"]')" \
    "$ID" "the state names that sandbox"
run "$SBX" sandbox exec "$ID" -- sh -c 'test ! -e ran.txt && echo before > before.txt'
expect_rc 0 "the command did not run (and the test writes a file into the sandbox)"

run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --resume "$T/S.json" --approve all
expect_rc 0 "--resume --approve all finishes the run"
expect_in "$T/out" "all done" "with the model's final answer"
expect_in "$T/err" 'tool exec_command({"cmd": "cat before.txt; echo ran > ran.txt"})' \
    "the approved call's line shows its arguments"
outputs 1 >"$T/o"
expect_in "$T/o" "before" "the approved command ran in the same sandbox"
expect_eq "$(fake_query 'len(reqs)')" 2 "the model was asked once more, not from the start"
expect_eq "$(sfield "$T/S.json" 's["status"]')" "completed" "the state file now says completed"
expect_eq "$(live)" 0 "the completed run removed its sandbox"

# --- --reject: the model reads the rejection, the command never runs -------------------------
mk "$T/s.json" '[resp(1, sh(1, "echo ran > ran.txt")), resp(2, msg("understood"))]'
start_fake "$T/s.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --state "$T/R.json" "go"
expect_rc 4 "the second run waits too"
ID=$(the_id)
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --resume "$T/R.json" --keep --reject c1 --reason "too risky today"
expect_rc 0 "--reject finishes the run"
outputs 1 >"$T/o"
expect_eq "$(cat "$T/o")" "too risky today" "the model reads the reason verbatim, as the SDK sends it"
run "$SBX" sandbox exec "$ID" -- sh -c 'test ! -e ran.txt'
expect_rc 0 "the rejected command never ran"
"$SBX" sandbox rm "$ID" >/dev/null 2>&1

# --- decisions for calls that are not pending; bad option combinations -----------------------
mk "$T/s.json" '[resp(1, sh(1, "echo ran > ran.txt")), resp(2, msg("x"))]'
start_fake "$T/s.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --state "$T/P.json" "go"
expect_rc 4 "a third run waits"
cp "$T/P.json" "$T/P.copy"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --resume "$T/P.json" --approve nope
expect_rc 1 "approving a call that is not pending fails"
expect_in "$T/err" "no pending call 'nope' (pending: c1)" "naming it and the pending ones"
if cmp -s "$T/P.json" "$T/P.copy"; then ok "the state file is untouched"; else not_ok "the state file is untouched"; fi
expect_eq "$(fake_query 'len(reqs)')" 1 "the model was not asked"
run "$SBX" run --reject c1 "go"
expect_rc 2 "--reject without --resume is a usage error"
expect_in "$T/err" "to reject every call of a tool, give --reject-always TOOL" "pointing at --reject-always"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --resume "$T/P.json" "a prompt"
expect_rc 2 "--resume with a prompt is a usage error"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --resume "$T/P.json" --reason "why"
expect_rc 2 "--reason without --reject is a usage error"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --state "$T/P.json" "go"
expect_rc 1 "--state refuses an existing file"
expect_in "$T/err" "'$T/P.json' exists: continue it with --resume $T/P.json, or remove it" "saying what to do"
"$SBX" state rm "$T/P.json"

# --- rules with when: globs; files written before the interruption stay ----------------------
cat >"$T/w.yaml" <<'EOF'
name: Careful
capabilities: [shell]
manifest: {entries: {}}
needs_approval:
  - {tool: exec_command, when: {cmd: "*rm *"}}
EOF
mk "$T/s.json" '[resp(1, sh(1, "touch before.txt")), resp(2, sh(2, "rm -f before.txt")), resp(3, msg("kept it"))]'
start_fake "$T/s.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/w.yaml" --state "$T/W.json" "go"
expect_rc 4 "a command matching the rule's glob interrupts"
expect_in "$T/err" "  c2  exec_command" "the matching call is pending"
expect_not_in "$T/err" "  c1  exec_command  {" "the other one is not"
expect_eq "$(sfield "$T/W.json" '[p["call_id"] for p in s["pending"]]')" "['c2']" "only c2 is pending"
ID=$(the_id)
run "$SBX" sandbox exec "$ID" -- ls
expect_in "$T/out" "before.txt" "the command that needed no approval ran before the interruption"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/w.yaml" --resume "$T/W.json" --reject c2
expect_rc 0 "rejecting it finishes the run"
expect_in "$T/out" "kept it" "with the final answer"

# --- --json: the interruption event names the pending calls and the file ---------------------
mk "$T/s.json" '[resp(1, sh(1, "echo hi")), resp(2, msg("x"))]'
start_fake "$T/s.json"
run "$SBX" run --json --base-url "$FAKE_URL" -a "$T/a.yaml" --state "$T/J.json" "go"
expect_rc 4 "--json: status 4 too"
grep '"type":"interruption"' "$T/out" >"$T/ev"
expect_eq "$(sfield "$T/ev" '(s["pending"][0]["call_id"], s["pending"][0]["tool"], s["state"])')" \
    "('c1', 'exec_command', '$T/J.json')" "one interruption event with the pending call and the state file"
"$SBX" state rm "$T/J.json"

# --- a secret a command echoes never reaches the state file -----------------------------------
cat >"$T/k.yaml" <<'EOF'
name: Keyed
capabilities: [shell]
manifest:
  entries: {}
  environment:
    KEY: {type: secret, env: OPENAI_API_KEY}
needs_approval: [{tool: exec_command, when: {cmd: "rm *"}}]
EOF
mk "$T/s.json" '[resp(1, sh(1, "sh -c \x27echo key=$KEY\x27")), resp(2, sh(2, "rm -f x")), resp(3, msg("x"))]'
start_fake "$T/s.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/k.yaml" --pass-secret OPENAI_API_KEY --state "$T/K.json" "go"
expect_rc 4 "the run with a passed secret waits"
outputs 1 >"$T/o"
expect_in "$T/o" "key=$OPENAI_API_KEY" "the command did print the secret (to the model)"
expect_not_in "$T/K.json" "$OPENAI_API_KEY" "the state file does not hold it"
expect_in "$T/K.json" "key=[redacted]" "it is redacted where the output was"

# --- the same state over another transport: Responses first, Chat on resume ------------------
mk "$T/s.json" '[chat_msg("chat finished")]'
start_fake "$T/s.json"
run "$SBX" run -a "$T/k.yaml" --resume "$T/K.json" --api chat --base-url "$FAKE_URL" --pass-secret OPENAI_API_KEY --approve c2
expect_rc 0 "a Responses run state resumes over the Chat API"
expect_in "$T/out" "chat finished" "and finishes"
expect_eq "$(fake_query 'reqs[0]["path"]')" "/v1/chat/completions" "the resumed request went to Chat Completions"
expect_eq "$(fake_query '[m.get("tool_call_id") for m in reqs[0]["body"]["messages"] if m["role"] == "tool"]')" \
    "['c1', 'c2']" "carrying both tool calls' outputs"

expect_eq "$(live)" 0 "no sandbox is left"
done_testing
