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
