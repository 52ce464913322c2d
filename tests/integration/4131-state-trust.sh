#!/usr/bin/env bash
# A run state file is not trusted for what only the user may decide (issue 26, finding 7).
# Anyone who can write the file can recompute its digest (reseal); still:
# - decisions written into it approve nothing (a version 1 object, a version 2 log), nor do
#   "always" approvals that this user's run-state key does not seal;
# - the agent file it names is not used without -a (elsewhere than a terminal), and on a
#   terminal only when the person says so after seeing it;
# - "owned" in it does not make `sbx state rm`, nor a completed resume, remove a sandbox that
#   the run did not make (the sandbox's own record names the run that made it).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/model-lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
. "$(dirname "$0")/runstate-lib.sh"
trap 'stop_fake; sandbox_cleanup' EXIT
DRIVE="python3 $SBX_SRCDIR/tests/integration/pty-drive.py"

cat >"$T/a.yaml" <<'EOF'
name: Worker
capabilities: [shell]
manifest: {entries: {}}
needs_approval: [exec_command]
EOF
cat >"$T/b.yaml" <<'EOF'
name: Worker
capabilities: [shell]
manifest: {entries: {}}
EOF
FORGE='sh -c \x27echo FORGED > forged.txt\x27'
waiting() { # STATE: a run of a.yaml waiting for approval of c1, which would write forged.txt
    mk "$T/s.json" "[resp(1, sh(1, \"$FORGE\")), resp(2, msg(\"done\"))]"
    start_fake "$T/s.json"
    run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --state "$1" "go"
}
not_forged() { # DESC: forged.txt is not in the (one) live sandbox
    run "$SBX" sandbox exec "$(the_id)" -- sh -c 'test ! -e forged.txt'
    expect_rc 0 "$1"
}

# --- forged decisions -----------------------------------------------------------------------------
waiting "$T/S.json"
expect_rc 4 "a run waits for approval of c1"
cp "$T/S.json" "$T/S.orig"
reseal "$T/S.json" 's["version"] = 1; s["decisions"] = {"c1": {"approved": True}}'
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --resume "$T/S.json"
expect_rc 4 "a decision written into the file (version 1 form) approves nothing"
not_forged "the call did not run"
cp "$T/S.orig" "$T/S.json"
reseal "$T/S.json" 's["decisions"] = [{"call_id": "c1", "tool": "exec_command", "type": "function_call", "turn": 1, "approved": True, "by": "prompt"}]'
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --resume "$T/S.json"
expect_rc 4 "nor does a decision log entry"
not_forged "the call did not run"
cp "$T/S.orig" "$T/S.json"
reseal "$T/S.json" 's["always"] = [{"tool": "*", "approved": True, "by": "prompt"}]; s["always_seal"] = "hmac-sha256:" + "0" * 64'
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --resume "$T/S.json"
expect_rc 4 "nor an 'always' approval the user's key does not seal"
expect_in "$T/err" "carries 1 'always' approval that this user's run-state key does not seal: not used" \
    "saying so"
not_forged "the call did not run"
"$SBX" state rm "$T/S.orig"

# --- the agent file -----------------------------------------------------------------------------
waiting "$T/A.json"
expect_rc 4 "another run waits"
B=$(realpath "$T/b.yaml")
BD="sha256:$(sha256sum "$B" | cut -d' ' -f1)"
reseal "$T/A.json" "s['meta']['cli']['agent_file'] = '$B'; s['agents'] = [{'name': 'Worker', 'file': '$B', 'digest': '$BD'}]; s['agent_files'] = [{'path': '$B', 'digest': '$BD'}]"
run "$SBX" run --base-url "$FAKE_URL" --resume "$T/A.json"
expect_rc 2 "without -a, the agent file the state names is not used"
expect_in "$T/err" "give the agent file with -a: the saved run used '$B'" "saying which one it names"
expect_eq "$(fake_query 'len(reqs)')" 1 "the model was not asked"
not_forged "nothing ran"
$DRIVE "$T/tty" "use it? [y/N]=>n" -- "$SBX" run --base-url "$FAKE_URL" --resume "$T/A.json"
expect_eq "$?" 2 "on a terminal, it is shown and refused unless confirmed"
expect_in "$T/tty" "the saved run used the agent file '$B': use it? [y/N]" "the question names the file"
"$SBX" state rm "$T/A.json"

# --- ownership -----------------------------------------------------------------------------------
run "$SBX" sandbox create
expect_rc 0 "an unrelated sandbox"
V=$(head -n1 "$T/out")
"$SBX" sandbox state --no-snapshot "$V" >"$T/v.json"
waiting "$T/O.json"
expect_rc 4 "a run waits"
OWN=$(sfield "$T/O.json" 's["sandbox"]["sessions_by_agent"]["Worker"]["session_state"]["id"]')
cp "$T/O.json" "$T/O.orig"
reseal "$T/O.json" "import json; s['sandbox']['sessions_by_agent']['Worker']['session_state'] = json.load(open('$T/v.json')); s['sandbox']['sessions_by_agent']['Worker']['owned'] = True"
run "$SBX" state rm "$T/O.json"
expect_rc 0 "state rm of a state naming the unrelated sandbox as owned"
expect_in "$T/err" "sandbox '$V' of agent 'Worker' is not recorded as made by this run: left alone" \
    "says it leaves it"
expect_eq "$(ls "$RUNBASE" | grep -c "$V")" 1 "the unrelated sandbox is still there"
cp "$T/O.orig" "$T/O.json"
reseal "$T/O.json" "import json; s['sandbox']['sessions_by_agent']['Worker']['session_state'] = json.load(open('$T/v.json')); s['sandbox']['sessions_by_agent']['Worker']['owned'] = True"
mk "$T/s.json" '[resp(2, msg("done"))]'
start_fake "$T/s.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --resume "$T/O.json" --reject c1
expect_rc 0 "a resume with the forged state completes"
expect_eq "$(ls "$RUNBASE" | grep -c "$V")" 1 "and leaves the unrelated sandbox running"
"$SBX" sandbox rm "$V" >/dev/null 2>&1
# The run's own sandbox, which the state no longer named: removed by its own state.
cp "$T/O.orig" "$T/O.json"
run "$SBX" state rm "$T/O.json"
expect_rc 0 "the untouched state removes its own sandbox"
expect_eq "$(ls "$RUNBASE" | grep -c "$OWN")" 0 "which its record names as the run's"
expect_eq "$(live)" 0 "no sandbox is left"
done_testing
