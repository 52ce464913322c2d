#!/usr/bin/env bash
# sbx state show|rm through the real binary: the summary (text and --json) of interrupted and
# completed run states with a live or gone sandbox; rm removes the sandbox and the file; an
# edited file, a newer format version and a changed agent file are refused clearly, and
# --allow-agent-change overrides the last.
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
waiting_run() { # STATE_FILE: a run of a.yaml that waits for approval of c1
    mk "$T/s.json" '[resp(1, sh(1, "echo hello")), resp(2, msg("the end"))]'
    start_fake "$T/s.json"
    run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --max-turns 7 --state "$1" "go"
}

# --- show: an interrupted state with its live sandbox ----------------------------------------
waiting_run "$T/S.json"
expect_rc 4 "the run waits for approval"
ID=$(the_id)
run "$SBX" state show "$T/S.json"
expect_rc 0 "state show"
expect_in "$T/out" "status:   interrupted (waiting for approval)" "shows the status"
expect_in "$T/out" "agent:    Worker" "the agent"
expect_in "$T/out" "turn:     1 of 7" "the turn and the budget"
expect_in "$T/out" "usage:    10 input, 2 output tokens in 1 requests" "the usage"
expect_in "$T/out" '  c1  exec_command  {"cmd":"echo hello"}' "the pending call"
expect_in "$T/out" "  $ID  live  owned  agent 'Worker'  snapshot sha256:" "the live sandbox and its snapshot"
run "$SBX" state show --json "$T/S.json"
expect_rc 0 "state show --json"
cp "$T/out" "$T/show.json"
expect_eq "$(sfield "$T/show.json" '(s["status"], s["current_agent"], s["turn"], s["max_turns"])')" \
    "('interrupted', 'Worker', 1, 7)" "--json: status, agent, turn"
expect_eq "$(sfield "$T/show.json" '[(p["call_id"], p["tool"], p["arguments"]["cmd"]) for p in s["pending"]]')" \
    "[('c1', 'exec_command', 'echo hello')]" "--json: the pending call"
expect_eq "$(sfield "$T/show.json" '[(b["id"], b["status"], b["owned"], b["agents"]) for b in s["sandboxes"]]')" \
    "[('$ID', 'live', True, ['Worker'])]" "--json: the sandbox"

# --- a gone sandbox ---------------------------------------------------------------------------
cp "$T/S.json" "$T/S.orig"
"$SBX" sandbox rm "$ID" >/dev/null
run "$SBX" state show "$T/S.json"
expect_in "$T/out" "  $ID  gone  owned" "a removed sandbox shows as gone"
run "$SBX" state show --json "$T/S.json"
expect_eq "$(sfield "$T/out" 's["sandboxes"][0]["status"]')" "gone" "--json too"

# --- completed ---------------------------------------------------------------------------------
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --resume "$T/S.json" --approve c1
expect_rc 0 "the run completes (its sandbox rebuilt)"
run "$SBX" state show "$T/S.json"
expect_in "$T/out" "status:   completed" "show: completed"
expect_in "$T/out" "the end" "with the final output"
expect_not_in "$T/out" "pending:" "and nothing pending"
run "$SBX" state show --json "$T/S.json"
expect_eq "$(sfield "$T/out" '(s["status"], s["final_output"], s["pending"])')" \
    "('completed', 'the end', [])" "--json: completed with the final output"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --resume "$T/S.json"
expect_rc 1 "a completed run cannot be resumed"
expect_in "$T/err" "the run already completed" "saying so"

# --- rm: the sandbox and the file go ---------------------------------------------------------
waiting_run "$T/R.json"
expect_rc 4 "another run waits"
ID=$(the_id)
run "$SBX" state rm "$T/R.json"
expect_rc 0 "state rm"
expect_eq "$(live)" 0 "removed the run's sandbox"
if [ -e "$T/R.json" ]; then not_ok "removed the file"; else ok "removed the file"; fi
run "$SBX" state show "$T/R.json"
expect_rc 1 "show of a missing file fails"

# --- refused files -----------------------------------------------------------------------------
waiting_run "$T/E.json"
expect_rc 4 "a third run waits"
ID=$(the_id)
python3 -c 'import sys; p=sys.argv[1]; t=open(p).read(); open(p, "w").write(t.replace("\"turn\": 1", "\"turn\": 0", 1))' "$T/E.json"
run "$SBX" state show "$T/E.json"
expect_rc 1 "an edited file is refused by show"
expect_in "$T/err" "its digest does not match its content (the file was edited or damaged)" "saying why"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --resume "$T/E.json" --approve c1
expect_rc 1 "and by --resume"
expect_in "$T/err" "digest does not match" "with the same reason"
run "$SBX" state rm "$T/E.json"
expect_rc 1 "rm leaves an edited file alone"
python3 -c 'import json,sys; p=sys.argv[1]; s=json.load(open(p)); s["version"]=3; json.dump(s, open(p, "w"))' "$T/E.json"
run "$SBX" state show "$T/E.json"
expect_rc 1 "a newer format version is refused"
expect_in "$T/err" "version 3 is newer than this sbx reads (2)" "saying so"
"$SBX" sandbox rm "$ID" >/dev/null 2>&1

waiting_run "$T/G.json"
expect_rc 4 "a fourth run waits"
echo "# changed" >>"$T/a.yaml"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --resume "$T/G.json" --approve c1
expect_rc 1 "a changed agent file is refused"
expect_in "$T/err" "agent file '$(realpath "$T/a.yaml")' changed since the run was saved" "naming the file"
expect_in "$T/err" "allow it with --allow-agent-change" "and the override"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --resume "$T/G.json" --approve c1 --allow-agent-change
expect_rc 0 "--allow-agent-change resumes it"
expect_in "$T/out" "the end" "to the end"

run "$SBX" state --help
expect_rc 0 "state --help"
expect_in "$T/out" "sbx state show [--json] FILE" "prints the usage"
run "$SBX" state frobnicate x
expect_rc 2 "an unknown subcommand is a usage error"
run "$SBX" state show
expect_rc 2 "show without a file is a usage error"

expect_eq "$(live)" 0 "no sandbox is left"
# --- the API key never goes to a server only the state names --------------------------------
waiting_run "$T/U.json"
expect_rc 4 "a run to resume"
cp "$T/U.json" "$T/U.orig"
before=$(fake_query 'len(reqs)')
run "$SBX" run -a "$T/a.yaml" --resume "$T/U.json" --approve c1
expect_rc 2 "resuming against the saved server without --base-url is refused while a key is set"
expect_in "$T/err" "the saved run used the model server '$FAKE_URL': give --base-url '$FAKE_URL'" \
    "naming the server and the option"
expect_eq "$(fake_query 'len(reqs)')" "$before" "no request went to the saved server"
cmp -s "$T/U.json" "$T/U.orig" && ok "the state file is untouched" || not_ok "the state file is untouched"
OPENAI_BASE_URL="$FAKE_URL" run "$SBX" run -a "$T/a.yaml" --resume "$T/U.json" --approve c1
expect_rc 0 "the same server named by OPENAI_BASE_URL is accepted"
waiting_run "$T/V.json"
(unset OPENAI_API_KEY; run "$SBX" run -a "$T/a.yaml" --resume "$T/V.json" --approve c1; echo "$rc" >"$T/v.rc")
expect_eq "$(cat "$T/v.rc" 2>/dev/null)" 0 "without a key the saved server is used as it is"
done_testing
