#!/usr/bin/env bash
# sbx run --snapshot-out / --snapshot through the real binary, offline: the coding example's
# run is snapshotted at its end (before its sandbox goes), a second run from that snapshot sees
# the first run's fix and builds on it, a run without it does not; a file export and import;
# the snapshot of a live sandbox leaves it running; bad snapshots and outputs fail before
# anything is made.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
command -v python3 >/dev/null || skip_all "python3 runs the example's tests"
export SBX_SNAPSHOTS="$T/snapshots" SBX_STOPPED="$T/stopped"
unset OPENAI_BASE_URL OPENAI_API_KEY

EX="$SBX_SRCDIR/examples/coding-task"
live() { ls "$RUNBASE" 2>/dev/null | wc -l; }
ref_of() { sed -n 's/^snapshot \(sha256:[0-9a-f]*\) .*/\1/p' "$1"; }
# The text of tool output N (0-based) among the --json events in $T/out.
tool_out() {
    python3 -c 'import json,sys
ev=[json.loads(l) for l in open(sys.argv[1]) if l.strip()]
outs=[e for e in ev if e.get("type")=="tool_output"]
o=outs[int(sys.argv[2])]["item"].get("output","")
print(o if isinstance(o, str) else json.dumps(o))' "$T/out" "$1"
}
json_snapshot() {
    python3 -c 'import json,sys
ev=[json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(" ".join("%s %s %s" % (e["ref"], e["agent"], e["file"]) for e in ev if e.get("type")=="snapshot"))' "$T/out"
}

# --- run, snapshot into the store, a second run from it --------------------------------------
run "$SBX" run --snapshot-out store -m "replay:$EX/run.jsonl" -a "$EX/agent.yaml" \
    "Do the task in TASK.md."
expect_rc 0 "the coding task runs with --snapshot-out store"
REF=$(ref_of "$T/err")
expect_eq "${#REF}" 71 "the snapshot's reference is printed on stderr"
expect_in "$T/err" "(agent 'Coding Agent', sandbox " "with the agent and the sandbox"
expect_eq "$(live)" 0 "the run's sandbox is still removed at the end"

run "$SBX" run --json --snapshot "$REF" -m "replay:$EX/followup.jsonl" -a "$EX/agent.yaml" \
    "Add a test for the mean of a single value."
expect_rc 0 "a second run from the snapshot succeeds"
tool_out 0 >"$T/t0"
expect_in "$T/t0" "return sum(values) / len(values)" "it sees the first run's fix"
expect_in "$T/t0" "OK" "and the tests pass from the start"
tool_out 2 >"$T/t2"
expect_in "$T/t2" "Ran 4 tests" "its own change builds on it"
expect_in "$T/t2" "OK" "and passes"
expect_eq "$(live)" 0 "nothing left running"

# Control: the same second run without the snapshot starts from the manifest's broken code.
run "$SBX" run --json -m "replay:$EX/followup.jsonl" -a "$EX/agent.yaml" "Add a test."
tool_out 0 >"$T/c0"
expect_in "$T/c0" "return sum(values) // len(values)" "without --snapshot the fix is not there"
expect_in "$T/c0" "FAILED" "and the tests fail"

# --- a file: exported at the end, imported by the next run ------------------------------------
run "$SBX" run --json --snapshot-out "$T/work.tar.zst" -m "replay:$EX/run.jsonl" \
    -a "$EX/agent.yaml" "Do the task in TASK.md."
expect_rc 0 "--snapshot-out FILE succeeds"
expect_in "$T/err" "exported to '$T/work.tar.zst'" "stderr says where it went"
FREF=$(ref_of "$T/err")
expect_eq "$(json_snapshot)" "$FREF Coding Agent $T/work.tar.zst" "--json reports a snapshot event"
expect_eq "$(ls "$T" | grep -c 'work.tar.zst.tmp')" 0 "no temp file left"
if command -v zstd >/dev/null && tar --help 2>/dev/null | grep -q -- --zstd; then
    tar --zstd -tf "$T/work.tar.zst" >"$T/list"
    expect_in "$T/list" "stats.py" "the export is an ordinary tar + zstd archive"
else
    ok "# SKIP tar without zstd support"
fi
rm -rf "$SBX_SNAPSHOTS"
run "$SBX" run --json --snapshot "$T/work.tar.zst" -m "replay:$EX/followup.jsonl" \
    -a "$EX/agent.yaml" "Add a test for the mean of a single value."
expect_rc 0 "a run from the exported file succeeds (imported into an empty store)"
tool_out 0 >"$T/f0"
expect_in "$T/f0" "return sum(values) / len(values)" "it sees the first run's fix"

# --- a live sandbox: snapshotted, left running --------------------------------------------------
ID=$("$SBX" sandbox create --manifest "$EX/manifest.yaml")
run "$SBX" run --snapshot-out store --session "$ID" -m "replay:$EX/run.jsonl" \
    "Do the task in TASK.md."
expect_rc 0 "--snapshot-out with --session succeeds"
LREF=$(ref_of "$T/err")
expect_eq "${#LREF}" 71 "the live sandbox was snapshotted"
expect_in "$T/err" "sandbox $ID" "naming it"
expect_eq "$(live)" 1 "and left running"
"$SBX" sandbox rm "$ID" >/dev/null

# --- a run that fails still leaves its snapshot -------------------------------------------------
run "$SBX" run --max-turns 3 --snapshot-out store -m "replay:$EX/run.jsonl" -a "$EX/agent.yaml" \
    "Do the task in TASK.md."
expect_rc 3 "a run past its max turns exits 3"
MREF=$(ref_of "$T/err")
expect_eq "${#MREF}" 71 "and still prints the snapshot of the work so far"
expect_in "$T/err" "max turns (3) exceeded" "after its own error"
expect_eq "$(live)" 0 "its sandbox is removed"

# --- bad input: clear errors, nothing made ------------------------------------------------------
run "$SBX" run --snapshot sha256:0123456789abcdef -m "replay:$EX/run.jsonl" -a "$EX/agent.yaml" "x"
expect_rc 1 "an unknown snapshot reference fails"
expect_in "$T/err" "snapshot 'sha256:0123456789abcdef'" "naming it"
head -c 3000 /dev/urandom >"$T/junk.tar.zst"
run "$SBX" run --snapshot "$T/junk.tar.zst" -m "replay:$EX/run.jsonl" -a "$EX/agent.yaml" "x"
expect_rc 1 "a corrupt snapshot file fails"
expect_in "$T/err" "snapshot '$T/junk.tar.zst'" "naming it"
run "$SBX" run --snapshot-out "$T/no/such/dir/x.tar.zst" -m "replay:$EX/run.jsonl" \
    -a "$EX/agent.yaml" "x"
expect_rc 1 "an output file that cannot be made fails"
expect_in "$T/err" "cannot create '$T/no/such/dir/x.tar.zst" "before the run, naming it"
expect_eq "$(live)" 0 "none of them made a sandbox"
expect_eq "$(ls "$SBX_WORKSPACES" 2>/dev/null | wc -l)" 0 "or a workspace"

run "$SBX" run --snapshot "$REF" --session 0123456789abcdef "x"
expect_rc 2 "--snapshot with --session is a usage error"
expect_in "$T/err" "--snapshot makes a fresh sandbox" "saying why"
run "$SBX" run --snapshot "$REF" --session-state "$T/x.json" "x"
expect_rc 2 "--snapshot with --session-state is a usage error"
run "$SBX" run --snapshot-out store -m "replay:$EX/run.jsonl" "x"
expect_rc 2 "--snapshot-out without a sandbox is a usage error"
# An agent file without sandbox fields: the run works, but there was nothing to snapshot.
echo '{"id": "r1", "object": "response", "status": "completed", "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hi"}]}]}' >"$T/plain.jsonl"
run "$SBX" run --snapshot-out store -m "replay:$T/plain.jsonl" \
    -a "$SBX_SRCDIR/examples/shopping/agent.yaml" "x"
expect_rc 1 "--snapshot-out on a run no sandbox agent took part in fails"
expect_in "$T/err" "nothing to snapshot" "saying so"

done_testing
