#!/usr/bin/env bash
# sbx run --session-state FILE through the real binary: the run resumes the sandbox the state
# describes (and not the agent's manifest), owns it (removed at the end unless --keep), and a
# missing, corrupt or stale state file fails clearly without creating anything.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/model-lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
trap 'stop_fake; sandbox_cleanup' EXIT
export SBX_SNAPSHOTS="$T/snapshots" SBX_STOPPED="$T/stopped"

outputs() { fake_query "reqs[$1]['body']['input'][-1].get('output')"; }
live() { ls "$RUNBASE" 2>/dev/null | wc -l; }
# A sandbox whose file "who" says $1; its state in $T/$1.json, its id in $T/$1.id.
labelled() {
    "$SBX" sandbox create --json >"$T/$1.json" || return 1
    python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$T/$1.json" >"$T/$1.id"
    "$SBX" sandbox exec "$(cat "$T/$1.id")" -- sh -c "echo $1 > who"
}
TURNS='[resp(1, fcall(1, "exec_command", {"cmd": "cat who; ls; echo run > mark"})), resp(2, msg("done"))]'
mk "$T/s.json" "$TURNS"

# An agent whose own manifest would make fresh.txt.
cat >"$T/a.yaml" <<'EOF'
name: Worker
capabilities: [shell]
manifest: {entries: {fresh.txt: {type: file, content: "f\n"}}}
EOF

# --- the state's sandbox, not a fresh one; the run's own: removed at the end ------------------
labelled A
start_fake "$T/s.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --session-state "$T/A.json" "go"
expect_rc 0 "a run with --session-state succeeds"
outputs 1 >"$T/o"
expect_in "$T/o" "A" "the agent worked in the sandbox of the state"
expect_not_in "$T/o" "fresh.txt" "not in a fresh one from the agent's manifest"
expect_eq "$(live)" 0 "the resumed sandbox is the run's own: removed at the end, nothing else made"

# --- --keep leaves it running, with the run's changes ----------------------------------------
labelled B
start_fake "$T/s.json"
run "$SBX" run --keep --base-url "$FAKE_URL" --session-state "$T/B.json" "go"
expect_rc 0 "--session-state on a plain prompt with --keep succeeds"
outputs 1 >"$T/o"
expect_in "$T/o" "B" "it ran in the state's sandbox"
expect_in "$T/err" "kept sandbox $(cat "$T/B.id")" "--keep names the resumed sandbox"
run "$SBX" sandbox exec "$(cat "$T/B.id")" -- cat mark
expect_in "$T/out" "run" "the kept sandbox has the run's change"
expect_eq "$(live)" 1 "only that sandbox is live"
"$SBX" sandbox rm "$(cat "$T/B.id")" >/dev/null

# --- a removed sandbox whose state has a snapshot is rebuilt from it --------------------------
labelled C
"$SBX" sandbox state "$(cat "$T/C.id")" >"$T/C.json"
"$SBX" sandbox rm "$(cat "$T/C.id")" >/dev/null
start_fake "$T/s.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --session-state "$T/C.json" "go"
expect_rc 0 "a run from the state of a removed sandbox succeeds"
outputs 1 >"$T/o"
expect_in "$T/o" "C" "it was rebuilt from the state's snapshot"
expect_not_in "$T/o" "fresh.txt" "not made from the agent's manifest"
expect_eq "$(live)" 0 "and removed at the end like any sandbox the run owns"

# --- bad input: a clear error, nothing created -----------------------------------------------
start_fake "$T/s.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --session-state "$T/nope.json" "go"
expect_rc 1 "a missing state file fails"
expect_in "$T/err" "session state '$T/nope.json'" "naming the file"
head -c 40 "$T/A.json" >"$T/cut.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --session-state "$T/cut.json" "go"
expect_rc 1 "a truncated state file fails"
expect_in "$T/err" "session state '$T/cut.json'" "naming the file"
echo '[1, 2]' >"$T/arr.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --session-state "$T/arr.json" "go"
expect_rc 1 "a state file that is not an object fails"
expect_in "$T/err" "session state" "saying what it wanted"
# A's sandbox is gone and its state has no snapshot: an error, never a fresh sandbox instead.
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --session-state "$T/A.json" "go"
expect_rc 1 "the state of a removed sandbox without a snapshot fails"
expect_in "$T/err" "cannot resume the session state" "saying so"
expect_eq "$(fake_query 'len(reqs)')" 0 "the model was never asked"
expect_eq "$(live)" 0 "and nothing was created"
expect_eq "$(ls "$SBX_WORKSPACES" 2>/dev/null | wc -l)" 0 "no workspace left"

# --- usage errors -----------------------------------------------------------------------------
run "$SBX" run --session-state "$T/A.json" --session 0123456789abcdef "x"
expect_rc 2 "--session-state with --session is a usage error"
run "$SBX" run --session-state "$T/A.json" --manifest "$T/a.yaml" "x"
expect_rc 2 "--session-state with --manifest is a usage error"
expect_in "$T/err" "--session-state resumes a sandbox" "and says why"

done_testing
