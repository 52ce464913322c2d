#!/usr/bin/env bash
# Approvals a person gives (issue 32): on a terminal, a call that needs approval is asked about
# (tool, arguments made terminal-safe, long ones shortened with a way to see all) and the run
# goes on in the same process; the answer is recorded in the run state and the trace. Driven
# through a real pseudo-terminal (pty-drive.py), never by faking isatty. Without a terminal and
# without --state, a waiting run saves its state to a default file and says where.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/model-lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
. "$(dirname "$0")/runstate-lib.sh"
trap 'stop_fake; sandbox_cleanup' EXIT
DRIVE="python3 $SBX_SRCDIR/tests/integration/pty-drive.py"
ASK='[s]top and save: '
RUNS="$XDG_STATE_HOME/sbx/runs"

cat >"$T/a.yaml" <<'EOF'
name: Worker
capabilities: [shell]
manifest: {entries: {}}
needs_approval: [exec_command]
EOF

# --- yes: the run goes on in the same process ------------------------------------------------------
mk "$T/s.json" '[resp(1, sh(1, "echo approved-here \x1b]0;title\x07")), resp(2, msg("finished"))]'
start_fake "$T/s.json"
$DRIVE "$T/tty" "$ASK=>y" -- "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --state "$T/S.json" \
    --trace "$T/tr.jsonl" "go"
expect_eq "$?" 0 "approved at the prompt, the run finishes in the same process"
expect_in "$T/tty" "sbx: agent 'Worker' asks to run exec_command (call c1):" "the prompt names the tool"
expect_in "$T/tty" '{"cmd":"echo approved-here \u001B]0;title\u0007"}' "and shows the arguments"
if python3 -c 'import sys; sys.exit(1 if b"\x1b]0;title" in open(sys.argv[1], "rb").read() else 0)' "$T/tty"; then
    ok "the arguments reach the terminal escaped"
else not_ok "the arguments reach the terminal escaped"; fi
expect_in "$T/tty" "[y]es / [n]o (with a reason) / [a]lways for this tool in this run / [s]top and save" \
    "with the four answers"
expect_in "$T/tty" "finished" "the final answer"
expect_eq "$(fake_query 'len(reqs)')" 2 "two model calls, one process"
outputs 1 >"$T/o"
expect_in "$T/o" "approved-here" "the command ran"
expect_eq "$(sfield "$T/S.json" '[(d["call_id"], d["approved"], d["by"]) for d in s["decisions"]]')" \
    "[('c1', True, 'prompt')]" "the run state records the decision"
expect_in "$T/tr.jsonl" '"sbx.approval":"approved"' "and the trace"
expect_in "$T/tr.jsonl" '"sbx.approval.by":"prompt"' "with who decided"
expect_eq "$(live)" 0 "the completed run removed its sandbox"

# --- no, with a reason: the model reads it verbatim ----------------------------------------------
mk "$T/s.json" '[resp(1, sh(1, "sh -c \x27echo ran > ran.txt\x27")), resp(2, msg("understood"))]'
start_fake "$T/s.json"
$DRIVE "$T/tty" "$ASK=>n" "(Enter for none): =>not on a Friday" -- \
    "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" "go"
expect_eq "$?" 0 "rejected at the prompt, the run finishes"
expect_eq "$(outputs 1)" "not on a Friday" "the model reads the reason verbatim"
expect_eq "$(ls "$RUNS" 2>/dev/null | wc -l)" 0 "the completed run left no default state file"

# --- always: one answer for every later call of the tool -----------------------------------------
mk "$T/s.json" '[resp(1, sh(1, "echo one")), resp(2, sh(2, "echo two")), resp(3, msg("both"))]'
start_fake "$T/s.json"
$DRIVE "$T/tty" "$ASK=>a" -- "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" "go"
expect_eq "$?" 0 "always at the prompt"
expect_eq "$(grep -c 'asks to run' "$T/tty")" 1 "asked once"
expect_in "$T/tty" "approved exec_command (call c2, always (prompt))" "the second call is approved by the answer"
outputs 2 >"$T/o"
expect_in "$T/o" "two" "and ran"

# --- stop and save: the state goes to the default file, the work is kept --------------------------
mk "$T/s.json" '[resp(1, sh(1, "sh -c \x27echo later > later.txt\x27")), resp(2, msg("resumed"))]'
start_fake "$T/s.json"
$DRIVE "$T/tty" "$ASK=>s" -- "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" "go"
expect_eq "$?" 4 "stop and save: status 4"
F=$(ls "$RUNS"/run-*.json 2>/dev/null | head -n1)
expect_eq "$(test -f "$F" && echo yes)" yes "the state is saved under \$XDG_STATE_HOME/sbx/runs"
expect_in "$T/tty" "sbx: waiting for approval (state saved to $F)" "and the run says where"
expect_in "$T/tty" "continue with: sbx run --resume $F -a $T/a.yaml --approve" "and how to go on"
expect_eq "$(live)" 1 "its sandbox waits"
# On a terminal, a resume without -a shows the agent file the state names and asks; the pending
# call is then asked about like any other.
$DRIVE "$T/tty" "use it? [y/N]=>y" "$ASK=>y" -- "$SBX" run --base-url "$FAKE_URL" --resume "$F"
expect_eq "$?" 0 "the saved run continues at the terminal"
expect_in "$T/tty" "the saved run used the agent file '$(realpath "$T/a.yaml")': use it? [y/N]" \
    "after showing the agent file it would use"
expect_in "$T/tty" "asks to run exec_command (call c1)" "and asking about the pending call"
expect_in "$T/tty" "resumed" "and finishes"
expect_eq "$(live)" 0 "then its sandbox goes"
rm -f "$F"

# --- long arguments are shortened; [v] shows them all ---------------------------------------------
LONG=$(python3 -c 'print("x" * 600 + "END")')
mk "$T/s.json" "[resp(1, sh(1, 'echo $LONG')), resp(2, msg('long done'))]"
start_fake "$T/s.json"
$DRIVE "$T/tty" "$ASK=>v" "$ASK=>y" -- "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" "go"
expect_eq "$?" 0 "a long command, approved after viewing it"
expect_in "$T/tty" "more bytes: [v] shows them all)" "is shown shortened first"
expect_in "$T/tty" "${LONG}\"}" "then whole"

# --- no terminal, no --state: a default file, never '(null)' --------------------------------------
mk "$T/s.json" '[resp(1, sh(1, "echo piped")), resp(2, msg("piped done"))]'
start_fake "$T/s.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" "go" </dev/null
expect_rc 4 "without a terminal the run waits"
expect_not_in "$T/err" "(null)" "naming no null file"
F=$(ls "$RUNS"/run-*.json 2>/dev/null | head -n1)
expect_in "$T/err" "sbx: waiting for approval (state saved to $F):" "it saved the state to a default file"
expect_eq "$(live)" 1 "and kept the sandbox"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --resume "$F" --approve all
expect_rc 0 "which resumes"
expect_in "$T/out" "piped done" "to the end"
expect_eq "$(live)" 0 "no sandbox is left"
done_testing
