#!/usr/bin/env bash
# Checkpoints that append, through the real binary: a run with --state killed in its third
# turn leaves a head (the state without its items and large fields) and a log with one record
# per item and per change of those fields; sbx state show reads them; a log edited in one byte
# is refused by --resume naming the record; a torn tail (a checkpoint killed while it
# appended) is dropped and the run resumes, finishes and leaves one whole document and no log;
# sbx state rm takes the log with the head.
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
NAP="sleep 30.$$"
CMD="if [ -e started ]; then echo again; else touch started; exec $NAP; fi"
export CMD
napping() { [ -n "$(the_id)" ] && pgrep -fx "$NAP" >/dev/null; }
killed_run() { # STATE_FILE: a run killed while the call of its third turn runs
    mk "$T/s.json" '[resp(1, sh(1, "echo one")), resp(2, sh(2, "echo two")), resp(3, fcall(3, "exec_command", {"cmd": E["CMD"], "yield_time_ms": 30000})), resp(4, msg("finished after the crash"))]'
    start_fake "$T/s.json"
    "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --state "$1" "go" >"$T/out" 2>"$T/err" &
    RUN_PID=$!
    wait_until napping
    kill -KILL "$RUN_PID"
    wait "$RUN_PID" 2>/dev/null
    RUN_PID=
}

killed_run "$T/S.json"
LOG=$(sfield "$T/S.json" 's["log"]["file"]')
expect_eq "$(sfield "$T/S.json" '(s["status"], s["turn"], s["open_calls"], "items" in s)')" \
    "('running', 3, ['c3'], False)" "the killed run's state is a head without its items"
expect_eq "$(sfield "$T/S.json" 's["log"]["count"]')" "$(wc -l <"$T/$LOG")" "its log beside it holds the records the head counts"
expect_eq "$(grep -c '^[0-9a-f]\{64\} i ' "$T/$LOG")" 6 "one per item: the input, two calls with outputs and the open call"
expect_eq "$(grep -c '^[0-9a-f]\{64\} s sandbox ' "$T/$LOG")" 1 "and one for the sandbox, which did not change"
run "$SBX" state show --json "$T/S.json"
expect_rc 0 "state show reads the head and its log"

cp "$T/$LOG" "$T/log.good"
sed -i '2s/echo one/echo 1ne/' "$T/$LOG"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --resume "$T/S.json"
expect_rc 1 "--resume refuses an edited log"
expect_in "$T/err" "record 2 of its log '$LOG' does not match its hash (the log was edited, reordered or damaged)" \
    "naming the record"
{ cat "$T/log.good"; printf '%s' "$(sed -n 1p "$T/log.good" | cut -c1-50)"; } >"$T/$LOG"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" --resume "$T/S.json"
expect_rc 0 "a torn tail is dropped and the run resumes"
expect_in "$T/err" "sbx: tool call c3 (exec_command) was running when the run stopped; running it again" \
    "repeating the open call"
expect_in "$T/out" "finished after the crash" "and finishes"
expect_eq "$(sfield "$T/S.json" '(s["status"], len(s["items"]), "log" in s)')" "('completed', 8, False)" \
    "the completed run's state is one whole document"
expect_eq "$(ls "$T" | grep -c '^S\.json\..*log$')" 0 "and its log is gone"
expect_eq "$(live)" 0 "the completed run removed its sandbox"

killed_run "$T/R.json"
LOG=$(sfield "$T/R.json" 's["log"]["file"]')
[ -f "$T/$LOG" ] && ok "a second killed run has its log" || not_ok "a second killed run has its log"
run "$SBX" state rm "$T/R.json"
expect_rc 0 "sbx state rm"
[ ! -e "$T/R.json" ] && [ ! -e "$T/$LOG" ] && ok "removes the head and its log" || not_ok "removes the head and its log"
expect_eq "$(live)" 0 "and the run's sandbox"
done_testing
