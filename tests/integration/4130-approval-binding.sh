#!/usr/bin/env bash
# Approvals bind to the call they answer (issue 26, findings 2, 6 and 11), through the real
# binary and the fake model server:
# - an approval given for call c1 is not reused by a later call the server numbers c1 again;
# - an apply_patch_call carrying a "name" is still the apply_patch tool for the rules;
# - `unless: {cmd: [...]}` exempts only simple commands: `ls; echo x > y` needs approval;
# - write_stdin into a process started under approval needs approval too.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/model-lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
. "$(dirname "$0")/runstate-lib.sh"
trap 'stop_fake; sandbox_cleanup' EXIT

cat >"$T/a.yaml" <<'EOF'
name: Worker
capabilities: [shell, filesystem]
manifest: {entries: {}}
needs_approval: [apply_patch, exec_command]
EOF

# --- a later call repeating an approved call's id needs its own decision -----------------------
mk "$T/s.json" '[resp(1, sh(1, "echo first-approved")), resp(2, sh(1, "sh -c \x27echo SECOND > second.txt\x27")), resp(3, msg("done"))]'
start_fake "$T/s.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --state "$T/S.json" "go"
expect_rc 4 "the first call waits for approval"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --resume "$T/S.json" --keep --approve c1
expect_rc 4 "after the approved call ran, the next call with the same id waits again"
expect_in "$T/err" 'tool exec_command({"cmd": "echo first-approved"})' "the approved call ran"
expect_in "$T/err" '  c1  exec_command  {"cmd":"sh -c '\''echo SECOND > second.txt'\''"}' \
    "the repeated id is listed with its own arguments"
ID=$(the_id)
run "$SBX" sandbox exec "$ID" -- sh -c 'test ! -e second.txt'
expect_rc 0 "the unapproved second command did not run"
expect_eq "$(sfield "$T/S.json" '[(d["call_id"], d["turn"], d["by"]) for d in s["decisions"]]')" \
    "[('c1', 1, 'command line')]" "the state logs the one decision, for turn 1"
"$SBX" state rm "$T/S.json"

# --- apply_patch with a "name" the server added -----------------------------------------------
mk "$T/s.json" '[resp(1, dict(pcall(1, {"type": "create_file", "path": "pwn.txt", "diff": "+patched-without-approval\n"}), name="harmless")), resp(2, msg("done"))]'
start_fake "$T/s.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --state "$T/P.json" "go"
expect_rc 4 "an apply_patch_call named 'harmless' still waits for the apply_patch rule"
expect_in "$T/err" "  c1  apply_patch  " "listed as apply_patch"
ID=$(the_id)
run "$SBX" sandbox exec "$ID" -- sh -c 'test ! -e pwn.txt'
expect_rc 0 "and the patch was not applied"
"$SBX" state rm "$T/P.json"

# --- unless: simple commands only ---------------------------------------------------------------
cat >"$T/u.yaml" <<'EOF'
name: Reader
capabilities: [shell]
manifest: {entries: {}}
needs_approval:
  - {tool: exec_command, unless: {cmd: ["ls*", "cat *"]}}
EOF
mk "$T/s.json" '[resp(1, sh(1, "ls -la")), resp(2, sh(2, "ls; echo BYPASS > b.txt; cat b.txt")), resp(3, msg("done"))]'
start_fake "$T/s.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/u.yaml" --state "$T/U.json" "go"
expect_rc 4 "a compound command starting with ls needs approval"
expect_in "$T/err" 'tool exec_command({"cmd": "ls -la"})' "a simple ls ran unasked"
expect_in "$T/err" "  c2  exec_command" "the compound one waits"
ID=$(the_id)
run "$SBX" sandbox exec "$ID" -- sh -c 'test ! -e b.txt'
expect_rc 0 "and did not run"
"$SBX" state rm "$T/U.json"

# --- write_stdin to a process started under approval --------------------------------------------
cat >"$T/w.yaml" <<'EOF'
name: Typist
capabilities: [shell]
manifest: {entries: {}}
needs_approval: [{tool: exec_command, when: {cmd: "cat"}}]
EOF
cat >"$T/w-extra.py" <<'EOF'
def typing(i, chars):
    return fcall(i, "write_stdin", '{"session_id": @SESSION_ID@, "chars": "%s", "yield_time_ms": 300}' % chars)
EOF
MK_EXTRA="$T/w-extra.py" mk "$T/s.json" '[resp(1, fcall(1, "exec_command", {"cmd": "cat", "tty": True, "yield_time_ms": 300})), resp(2, typing(2, "typed\\n")), resp(3, msg("done"))]'
start_fake "$T/s.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/w.yaml" --state "$T/W.json" "go"
expect_rc 4 "cat waits for approval"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/w.yaml" --resume "$T/W.json" --approve c1
expect_rc 4 "typing into the process started under that approval waits for approval too"
expect_in "$T/err" "  c2  write_stdin  " "write_stdin is the pending call"
"$SBX" state rm "$T/W.json"
start_fake "$T/s.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/w.yaml" --approve-always exec_command --state "$T/V.json" "go"
expect_rc 4 "likewise when --approve-always approved the process"
expect_in "$T/err" "approved exec_command (call c1, always (command line))" "(said on stderr)"
expect_in "$T/err" "  c2  write_stdin  " "write_stdin waits"
"$SBX" state rm "$T/V.json"
# A process started without approval takes keystrokes unasked.
MK_EXTRA="$T/w-extra.py" mk "$T/s.json" '[resp(1, fcall(1, "exec_command", {"cmd": "sh -i", "tty": True, "yield_time_ms": 300})), resp(2, typing(2, "exit\\n")), resp(3, msg("typed"))]'
start_fake "$T/s.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/w.yaml" --state "$T/X.json" "go"
expect_rc 0 "a process started without approval is typed into unasked"
expect_in "$T/out" "typed" "and the run finishes"

# --- policy on the command line, as Codex users know it --------------------------------------------
mk "$T/s.json" '[resp(1, sh(1, "echo all-approved")), resp(2, msg("fine"))]'
start_fake "$T/s.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --approve-all "go" </dev/null
expect_rc 0 "--approve-all: nothing waits"
expect_in "$T/err" "approved exec_command (call c1, always (command line))" "each call is approved, and said so"
expect_eq "$(ls "$XDG_STATE_HOME/sbx/runs" 2>/dev/null | wc -l)" 0 "no state file was needed"
start_fake "$T/s.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --approve exec_command --state "$T/C.json" "go"
expect_rc 0 "--approve TOOL on a new run: that tool's calls run"
expect_eq "$(sfield "$T/C.json" '[(a["tool"], a["approved"], a["by"]) for a in s["always"]]')" \
    "[('exec_command', True, 'command line')]" "recorded in the run state as an 'always' decision"
expect_eq "$(sfield "$T/C.json" 's["always_seal"][:12]')" "hmac-sha256:" "sealed with this user's key"
run "$SBX" state show "$T/C.json"
expect_in "$T/out" "  exec_command  approved  (command line)" "state show lists it"
expect_eq "$(live)" 0 "no sandbox is left"
done_testing
