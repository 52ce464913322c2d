#!/usr/bin/env bash
# Crash resume through the real binary: a run with --state killed with SIGKILL while its tool
# call runs continues from its last checkpoint with --resume, says that the call is repeated,
# finishes, and finds the files its sandbox had; a sandbox removed while a run waited for
# approval is rebuilt from the snapshot its state holds.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/model-lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
. "$(dirname "$0")/runstate-lib.sh"
RUN_PID=
kill_run() { [ -n "$RUN_PID" ] && kill -KILL "$RUN_PID" 2>/dev/null; RUN_PID=; }
trap 'kill_run; stop_fake; sandbox_cleanup' EXIT

cat >"$T/a.yaml" <<'EOF'
name: Worker
capabilities: [shell]
manifest: {entries: {}}
EOF

# --- SIGKILL while the tool call runs ---------------------------------------------------------
# The first time the call writes a file and sleeps far longer than any wait below; run again,
# it reports what it finds.
NAP="sleep 30.$$"
CMD="if [ -e started ]; then echo again; cat before.txt; else echo before > before.txt; touch started; exec $NAP; fi"
export CMD
mk "$T/s.json" '[resp(1, fcall(1, "exec_command", {"cmd": E["CMD"], "yield_time_ms": 30000})), resp(2, msg("finished after the crash"))]'
start_fake "$T/s.json"
napping() { [ -n "$(the_id)" ] && pgrep -fx "$NAP" >/dev/null; }
"$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --state "$T/S.json" "go" >"$T/out" 2>"$T/err" &
RUN_PID=$!
wait_until napping
ID=$(the_id)
if napping; then ok "the run is busy in its tool call"; else not_ok "the run is busy in its tool call"; fi
kill -KILL "$RUN_PID"
wait "$RUN_PID" 2>/dev/null
RUN_PID=
expect_eq "$(sfield "$T/S.json" '(s["status"], s["open_calls"])')" "('running', ['c1'])" \
    "the checkpoint says the call was running"
expect_eq "$(live)" 1 "the sandbox outlived the killed run"

run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --resume "$T/S.json"
expect_rc 0 "--resume continues the killed run"
expect_in "$T/err" "sbx: tool call c1 (exec_command) was running when the run stopped; running it again" \
    "saying that the call is repeated"
expect_in "$T/out" "finished after the crash" "and finishes"
outputs 1 >"$T/o"
expect_in "$T/o" "again" "the call ran again in the same sandbox"
expect_in "$T/o" "before" "whose files written before the kill are intact"
expect_eq "$(fake_query 'len(reqs)')" 2 "the model call that had completed was not repeated"
expect_eq "$(live)" 0 "the completed run removed its sandbox"

# --- SIGKILL while the model call of turn 2 is in flight --------------------------------------
# The second answer comes only after far longer than any wait below.
mk "$T/s.json" '[resp(1, sh(1, "echo one >> log.txt")), dict(resp(2, msg("too late")), delay_ms=30000), resp(3, sh(3, "cat log.txt")), resp(4, msg("finished after the crash"))]'
start_fake "$T/s.json"
asked_twice() { [ -s "$FAKE_LOG" ] && [ "$(wc -l <"$FAKE_LOG")" -ge 2 ]; }
"$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --state "$T/M.json" "go" >"$T/out" 2>"$T/err" &
RUN_PID=$!
wait_until asked_twice
kill -KILL "$RUN_PID"
wait "$RUN_PID" 2>/dev/null
RUN_PID=
expect_eq "$(sfield "$T/M.json" '(s["status"], s["turn"], s["open_calls"])')" "('running', 1, [])" \
    "the checkpoint after turn 1 is the last one"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --resume "$T/M.json"
expect_rc 0 "--resume continues a run killed during a model call"
expect_in "$T/err" "sbx: turn 2 was in flight when the run stopped; repeating it" "repeating that turn, and saying so"
outputs 3 >"$T/o"
expect_eq "$(grep -c one "$T/o")" 1 "the completed tool call did not run again"
expect_in "$T/out" "finished after the crash" "and finishes"
expect_eq "$(live)" 0 "then its sandbox goes"

# --- SIGTERM while the tool call runs: cancelled, and it can be continued ----------------------
mk "$T/s.json" '[resp(1, fcall(1, "exec_command", {"cmd": E["CMD"], "yield_time_ms": 30000})), resp(2, msg("finished after the cancel"))]'
start_fake "$T/s.json"
"$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --state "$T/C.json" "go" >"$T/out" 2>"$T/err" &
RUN_PID=$!
wait_until napping
kill -TERM "$RUN_PID"
wait_until eval '! alive $RUN_PID'
wait "$RUN_PID"
rc=$?
RUN_PID=
expect_eq "$rc" 143 "SIGTERM ends the run with 143"
expect_in "$T/err" "sbx: the run can be continued: sbx run --resume $T/C.json -a $T/a.yaml" "saying it can be continued"
expect_eq "$(live)" 1 "its sandbox stays"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --resume "$T/C.json"
expect_rc 0 "--resume continues the cancelled run"
expect_in "$T/err" "was running when the run stopped; running it again" "repeating the cancelled call, and saying so"
expect_in "$T/out" "finished after the cancel" "to the end"
expect_eq "$(live)" 0 "then its sandbox goes"

# --- a run that failed (the model server answers 500) continues where it stopped -------------
mk "$T/s.json" '[resp(1, sh(1, "echo one >> log.txt"))]'
start_fake "$T/s.json"
run "$SBX" run --retries 0 --base-url "$FAKE_URL" -a "$T/a.yaml" --state "$T/F.json" "go"
expect_rc 1 "the run fails when the model call fails"
expect_in "$T/err" "sbx: the run can be continued: sbx run --resume $T/F.json -a $T/a.yaml" "and says it can be continued"
expect_eq "$(sfield "$T/F.json" '(s["status"], s["turn"])')" "('failed', 1)" "the state says failed after turn 1"
expect_eq "$(live)" 1 "its sandbox stays"
mk "$T/s.json" '[resp(2, sh(2, "cat log.txt")), resp(3, msg("recovered"))]'
start_fake "$T/s.json"
run "$SBX" run -a "$T/a.yaml" --resume "$T/F.json" --base-url "$FAKE_URL"
expect_rc 0 "--resume continues the failed run"
expect_in "$T/err" "sbx: turn 2 was in flight when the run stopped; repeating it" "repeating the failed turn, and saying so"
expect_eq "$(fake_query '[i.get("call_id") for i in reqs[0]["body"]["input"] if i.get("type") == "function_call_output"]')" \
    "['c1']" "the repeated request carries the completed call's output"
outputs 1 >"$T/o"
expect_eq "$(grep -c one "$T/o")" 1 "the completed call did not run again"
expect_in "$T/out" "recovered" "and the run finishes"
expect_eq "$(live)" 0 "then its sandbox goes"

# --- a sandbox removed while the run waits is rebuilt from the state's snapshot ---------------
cat >"$T/w.yaml" <<'EOF'
name: Careful
capabilities: [shell]
manifest: {entries: {}}
needs_approval: [{tool: exec_command, when: {cmd: "cat *"}}]
EOF
mk "$T/s.json" '[resp(1, sh(1, "sh -c \x27echo kept > kept.txt\x27")), resp(2, sh(2, "cat kept.txt")), resp(3, msg("rebuilt"))]'
start_fake "$T/s.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/w.yaml" --state "$T/W.json" "go"
expect_rc 4 "the run waits for approval"
ID=$(the_id)
SNAP=$(sfield "$T/W.json" 's["sandbox"]["sessions_by_agent"]["Careful"]["session_state"]["snapshot"]')
case "$SNAP" in sha256:*) ok "the state holds a snapshot of the sandbox" ;; *) not_ok "the state holds a snapshot of the sandbox"; diag "$SNAP" ;; esac
run "$SBX" snapshot inspect "$SNAP"
expect_in "$T/out" "runstate-$ID" "held for the run state"
"$SBX" sandbox rm "$ID" >/dev/null
expect_eq "$(live)" 0 "the sandbox is gone"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/w.yaml" --resume "$T/W.json" --approve c2
expect_rc 0 "the run continues"
outputs 2 >"$T/o"
expect_in "$T/o" "kept" "in a sandbox rebuilt from the snapshot, with the file"
run "$SBX" snapshot inspect "$SNAP"
expect_not_in "$T/out" "runstate-$ID" "the completed run released its hold"
expect_eq "$(live)" 0 "no sandbox is left"
done_testing
