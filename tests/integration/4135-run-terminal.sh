#!/usr/bin/env bash
# What a person sees of `sbx run` (issue 32): on a terminal, the answer streams whole even when
# the model was slow to start (the "waiting for the model" line goes before the first word);
# the final answer appears once wherever stdout and stderr are one file (a terminal, a pipe,
# a log file). Terminal cases run on a real pseudo-terminal (lib.sh on_tty), and what is on
# the screen at the end is read back with screen.py (carriage returns and erases applied).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/model-lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
trap 'stop_fake; sandbox_cleanup' EXIT
SCREEN="python3 $SBX_SRCDIR/tests/integration/screen.py"
ANSWER="Paris is the capital of France."

# screen_has FILE LINE DESC: a line of the final screen is exactly LINE.
screen_has() {
    $SCREEN "$1" >"$1.screen"
    if grep -qxF -- "$2" "$1.screen"; then ok "$3"; else
        not_ok "$3"; diag "no screen line '$2' in:" "$(head -c 2000 "$1.screen")"
    fi
}

# --- a slow model: the wait line is cleared before the first word, not with it ------------------
mk "$T/slow.json" "[dict(resp(1, msg('$ANSWER')), delay_ms=3500)]"
start_fake "$T/slow.json"
on_tty "$T/tty" "$SBX" run --base-url "$FAKE_URL" "capital?"
expect_eq "$?" 0 "a slow answer on a terminal"
expect_in "$T/tty" "waiting for the model: 2s" "the wait was shown"
screen_has "$T/tty" "$ANSWER" "the whole answer is on the screen, its first word too"
expect_eq "$(grep -c 'capital of France' "$T/tty.screen")" 1 "once"

# --- stdout and stderr one pipe or one file: the answer once --------------------------------------
mk "$T/fast.json" "[resp(1, msg('$ANSWER'))]"
start_fake "$T/fast.json"
"$SBX" run --base-url "$FAKE_URL" "capital?" 2>&1 | cat >"$T/pipe"
expect_eq "$(grep -c 'capital of France' "$T/pipe")" 1 "2>&1 into a pipe: the answer once"
start_fake "$T/fast.json"
"$SBX" run --base-url "$FAKE_URL" "capital?" >"$T/log" 2>&1
expect_eq "$(grep -c 'capital of France' "$T/log")" 1 "into one file: the answer once"
# Apart, stdout still gets the answer for scripts, and stderr the stream.
start_fake "$T/fast.json"
run "$SBX" run --base-url "$FAKE_URL" "capital?"
expect_eq "$(cat "$T/out")" "$ANSWER" "stdout apart from stderr: the answer on stdout"
expect_in "$T/err" "$ANSWER" "and streamed on stderr"
start_fake "$T/fast.json"
"$SBX" run --base-url "$FAKE_URL" "capital?" 2>&1 >/dev/null | cat >"$T/pipe2"
expect_eq "$(grep -c 'capital of France' "$T/pipe2")" 1 "stderr into a pipe, stdout elsewhere: streamed there"

# --- a running tool has a status line, erased when its line is printed; the sandbox id is shown
# at the start, on a terminal and in --json --------------------------------------------------------
cat >"$T/a.yaml" <<'YAML'
name: Worker
capabilities: [shell]
manifest: {entries: {}}
YAML
mk "$T/tool.json" '[resp(1, sh(1, "sleep 5; echo slept")), resp(2, msg("done sleeping"))]'
start_fake "$T/tool.json"
on_tty "$T/ttool" "$SBX" run --keep --base-url "$FAKE_URL" -a "$T/a.yaml" "go"
expect_eq "$?" 0 "a slow tool on a terminal"
expect_in "$T/ttool" "running exec_command: sleep 5; echo slept (" "a status line names the tool and its command"
$SCREEN "$T/ttool" >"$T/ttool.screen"
expect_not_in "$T/ttool.screen" "running exec_command" "and is gone from the screen at the end"
expect_in "$T/ttool.screen" '  tool exec_command({"cmd": "sleep 5; echo slept"}) -> Process exited with code 0' \
    "the tool's own line is whole"
screen_has "$T/ttool" "done sleeping" "and the answer"
kept=$(grep -o 'kept sandbox [0-9a-f]*' "$T/ttool.screen" | awk '{print $3}')
expect_in "$T/ttool.screen" "  sandbox $kept (agent 'Worker', created; look inside: sbx sandbox shell $kept)" \
    "the run's sandbox id is shown at its start"
first=$(grep -n -m1 "sandbox $kept (agent" "$T/ttool.screen" | cut -d: -f1)
tool=$(grep -n -m1 "tool exec_command" "$T/ttool.screen" | cut -d: -f1)
[ -n "$first" ] && [ -n "$tool" ] && [ "$first" -lt "$tool" ] && ok "before the first tool runs" || not_ok "before the first tool runs"
"$SBX" sandbox rm "$kept" >/dev/null 2>&1
mk "$T/quick.json" '[resp(1, sh(1, "echo quick")), resp(2, msg("quick done"))]'
start_fake "$T/quick.json"
run "$SBX" run --json --base-url "$FAKE_URL" -a "$T/a.yaml" "go"
expect_rc 0 "a --json run"
expect_eq "$(python3 -c '
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
sb = [e for e in ev if e["type"] == "sandbox"]
st = [e for e in ev if e["type"] == "tool_start"]
print(len(sb), len(sb[0]["id"]) if sb else 0, sb[0].get("source") if sb else None, sb[0].get("agent") if sb else None,
      len(st), st[0]["tool"] if st else None)' "$T/out")" "1 16 created Worker 1 exec_command" \
    "--json has a sandbox event with the id, and a tool_start event"
start_fake "$T/quick.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" "go"
expect_not_in "$T/err" "look inside" "a pipe gets no sandbox line"
expect_not_in "$T/err" "running exec_command" "nor a status line"

# --- Ctrl-C typed on the terminal while a tool runs: status 130, nothing left ----------------------
mk "$T/long.json" '[resp(1, sh(1, "sleep 30")), resp(2, msg("never"))]'
start_fake "$T/long.json"
python3 "$SBX_SRCDIR/tests/integration/pty-interrupt.py" "$T/tint" "running exec_command: sleep 30" -- \
    "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" "go"
expect_eq "$?" 130 "Ctrl-C on the terminal ends the run with status 130"
expect_in "$T/tint" "run cancelled at turn 1 of agent 'Worker' while running tool 'exec_command'" \
    "saying where it was cancelled"
$SCREEN "$T/tint" >"$T/tint.screen"
expect_not_in "$T/tint.screen" "running exec_command" "with the status line erased"
expect_eq "$("$SBX" sandbox ps --all --json | tr -d ' \n')" "[]" "and no sandbox left"

# --- an agent file is checked whole (its manifest and the sources it names) before the model's
# key is looked for ------------------------------------------------------------------------------
printf 'name: A\nmanifest: %s/no-such-manifest.yaml\n' "$T" >"$T/nomani.yaml"
printf 'name: B\nmanifest:\n  entries:\n    data:\n      type: local_dir\n      src: %s/no-such-dir\n' "$T" >"$T/nosrc.yaml"
for f in nomani nosrc; do
    run env -u OPENAI_API_KEY -u OPENAI_BASE_URL "$SBX" run -a "$T/$f.yaml" "hi"
    expect_rc 1 "$f: a bad agent file without a key fails"
    expect_in "$T/err" "agent file '$T/$f.yaml'" "$f: naming the agent file"
    expect_not_in "$T/err" "OPENAI_API_KEY" "$f: not the missing key"
done
expect_in "$T/err" "local source '$T/no-such-dir' does not exist" "a missing local source is named"

# --- colour: errors red and tool lines dimmed on a terminal; never in a pipe, with NO_COLOR or
# --color=never; --color=always anywhere --------------------------------------------------------
has_bytes() { python3 -c 'import sys; sys.exit(0 if sys.argv[2].encode().decode("unicode_escape").encode("latin-1") in open(sys.argv[1], "rb").read() else 1)' "$1" "$2"; }
expect_bytes() { if has_bytes "$1" "$2"; then ok "$3"; else not_ok "$3"; diag "$(cat -v "$1" | head -c 1500)"; fi; }
expect_no_bytes() { if has_bytes "$1" "$2"; then not_ok "$3"; diag "$(cat -v "$1" | head -c 1500)"; else ok "$3"; fi; }
on_tty "$T/cerr" "$SBX" sandbox rm 0123456789abcdef
expect_bytes "$T/cerr" '\x1b[31msbx: cannot remove sandbox' "an error on a terminal is red"
NO_COLOR=1 on_tty "$T/cerr2" "$SBX" sandbox rm 0123456789abcdef
expect_no_bytes "$T/cerr2" '\x1b[' "NO_COLOR: no colour"
expect_in "$T/cerr2" "sbx: cannot remove sandbox" "but the same message"
on_tty "$T/cerr3" "$SBX" --color=never sandbox rm 0123456789abcdef
expect_no_bytes "$T/cerr3" '\x1b[' "--color=never: no colour on a terminal"
run "$SBX" sandbox rm 0123456789abcdef
expect_no_bytes "$T/err" '\x1b[' "a pipe gets no colour"
run "$SBX" --color always sandbox rm 0123456789abcdef
expect_bytes "$T/err" '\x1b[31msbx: cannot remove sandbox' "--color always: red in a pipe too"
run "$SBX" --color=sometimes version
expect_rc 2 "an unknown --color value is a usage error"
start_fake "$T/quick.json"
on_tty "$T/cdim" "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" "go"
expect_bytes "$T/cdim" '\x1b[2m  tool exec_command(' "a run's tool line is dimmed on a terminal"
start_fake "$T/quick.json"
on_tty "$T/cdim2" "$SBX" run --color never --base-url "$FAKE_URL" -a "$T/a.yaml" "go"
expect_no_bytes "$T/cdim2" '\x1b[2m' "sbx run --color never: not dimmed"
expect_in "$T/cdim2" "  tool exec_command(" "the line is there"

# --- sbx trace show --follow: the tree so far, then each span as it is appended, until the run's
# root span -----------------------------------------------------------------------------------
span() { # ID PARENT NAME START END [ATTRS]
    printf '{"trace_id": "0123456789abcdef0123456789abcdef", "span_id": "%s", "parent_span_id": %s, "name": "%s", "kind": "internal", "start_unix_nano": %s, "end_unix_nano": %s, "status": "unset", "attributes": {%s}}' \
        "$1" "$2" "$3" "$4" "$5" "${6:-}"
}
span 0000000000000003 '"0000000000000002"' "chat m" 1200 3000 '"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 7' >"$T/live.jsonl"
echo >>"$T/live.jsonl"
"$SBX" trace show --follow "$T/live.jsonl" >"$T/follow" 2>"$T/follow.err" &
fpid=$!
wait_until grep -q "1 spans" "$T/follow"
expect_in "$T/follow" "chat m" "--follow first shows the spans the file holds"
span 0000000000000004 '"0000000000000002"' "execute_tool exec_command" 3100 5000 '"gen_ai.tool.name": "exec_command"' >>"$T/live.jsonl"
echo >>"$T/live.jsonl"
wait_until grep -q "execute_tool exec_command" "$T/follow"
expect_in "$T/follow" "+ execute_tool exec_command" "then a span appended while it follows"
# A line written in two pieces is shown once it is whole.
span 0000000000000002 '"0000000000000001"' turn 1100 8000 '"sbx.turn": 1' >"$T/turn"
head -c 40 "$T/turn" >>"$T/live.jsonl"
sleep 0.5
tail -c +41 "$T/turn" >>"$T/live.jsonl"
echo >>"$T/live.jsonl"
wait_until grep -q "+ turn" "$T/follow"
expect_in "$T/follow" "+ turn # 1" "a line written in pieces is shown whole"
kill -0 "$fpid" 2>/dev/null && ok "it follows until the run ends" || not_ok "it follows until the run ends"
span 0000000000000001 null run 1000 9000 '"gen_ai.agent.name": "Worker"' >>"$T/live.jsonl"
echo >>"$T/live.jsonl"
WAIT_S=20 wait_until sh -c "! kill -0 $fpid 2>/dev/null"
if kill -0 "$fpid" 2>/dev/null; then not_ok "the run's root span ends it"; kill "$fpid"; wait "$fpid"; else
    wait "$fpid"; expect_eq "$?" 0 "the run's root span ends it, with status 0"; fi
expect_in "$T/follow" "+ run Worker" "after showing it"
expect_eq "$(cat "$T/follow.err")" "" "with nothing on stderr"
run "$SBX" trace show --follow -
expect_rc 2 "--follow takes a file, not standard input"
# A finished run's trace: the tree, and done.
mk "$T/quick.json" '[resp(1, sh(1, "echo quick")), resp(2, msg("quick done"))]'
start_fake "$T/quick.json"
run "$SBX" run --trace "$T/done.jsonl" --base-url "$FAKE_URL" -a "$T/a.yaml" "go"
run timeout 60 "$SBX" trace show --follow "$T/done.jsonl"
expect_rc 0 "--follow on a finished run's trace ends at once"
expect_in "$T/out" "execute_tool exec_command" "after showing its tree"

# --- approval without --state (the review's own command): a default state file, never '(null)',
# the sandbox and its work kept, for a plain and a --json run -------------------------------------
EX="$SBX_SRCDIR/examples/approval"
RUNS="$XDG_STATE_HOME/sbx/runs"
for json in "" --json; do
    rm -rf "$RUNS"
    run "$SBX" run $json -m "replay:$EX/run.jsonl" -a "$EX/agent.yaml" "Tidy up the workspace." </dev/null
    expect_rc 4 "approval needed, no --state ${json:-(plain)}: the run waits"
    expect_not_in "$T/err" "(null)" "no null file named ${json:-(plain)}"
    F=$(ls "$RUNS"/run-*.json 2>/dev/null | head -n1)
    expect_in "$T/err" "waiting for approval (state saved to $F)" "the default state file is named ${json:-(plain)}"
    expect_eq "$("$SBX" sandbox ps --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')" 1 \
        "its sandbox waits with the work ${json:-(plain)}"
    run "$SBX" run -m "replay:$EX/resume.jsonl" --resume "$F" -a "$EX/agent.yaml" --approve call_ap2
    expect_rc 0 "the saved run goes on ${json:-(plain)}"
    expect_eq "$("$SBX" sandbox ps --all --json | tr -d ' \n')" "[]" "and then leaves no sandbox ${json:-(plain)}"
done

done_testing
