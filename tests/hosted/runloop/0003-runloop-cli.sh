#!/usr/bin/env bash
# sbx's runloop provider against the fake Runloop service, through the command line: the
# coding example gives what it gives locally; a snapshot taken on runloop restores on local and
# one taken on local restores on runloop; a session state resumes in a new sbx process; stop
# (suspend) and start (resume); a bad key, a missing key, a 429 with Retry-After (retried, then
# given up), a quota, a devbox shut down as idle and an unknown blueprint each give their clear
# error. Last: the key appears in no state, record, snapshot, trace or log file sbx wrote.
. "$(dirname "$0")/../../integration/lib.sh"
. "$(dirname "$0")/lib.sh"

fake=$T/fake
cleanup() {
    # The test's own local sandboxes too, when it stopped half-way (devboxes go with the fake).
    if [ -d "$T/me/run" ]; then
        for id in $("$SBX" sandbox ps --all -q 2>/dev/null); do
            "$SBX" sandbox rm "$id" >/dev/null 2>&1
        done
    fi
    "$RUNLOOP_HERE/fake.sh" stop "$fake" >/dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT
runloop_fake_start "$fake"

# The test's own sbx state, apart from the fake's.
mkdir -m 0700 "$T/me" "$T/me/run"
export XDG_RUNTIME_DIR="$T/me/run" SBX_WORKSPACES="$T/me/ws" SBX_STOPPED="$T/me/stopped" \
    SBX_SNAPSHOTS="$T/me/snapshots" XDG_STATE_HOME="$T/me/state" SBX_RECORDS="$T/me/records"
: >"$T/ids"

. "$SBX_SRCDIR/tests/integration/coding-lib.sh"
RUN_TRACE=$T/me

run_example local
expect_rc 0 "the coding example runs locally"
run_example runloop --provider runloop
expect_rc 0 "and with --provider runloop"
[ "$rc" = 0 ] || diag "$(tail -5 "$T/runloop.err")"
rl_id=$(cat "$T/runloop.id")
[ -n "$rl_id" ] && [ "$(rl_stat live)" -ge 1 ] && ok "the runloop run kept a devbox at the service" ||
    not_ok "the runloop run kept a devbox at the service ($rl_id)"
same_as_local runloop runloop
run "$SBX" sandbox exec "$rl_id" -- sh -c 'echo "$(pwd) $(id -un)"'
expect_eq "$(cat "$T/out")" "/home/user user" "the workspace is the devbox's home, as its user"

# Snapshots both ways.
run "$SBX" sandbox snapshot "$rl_id"
expect_rc 0 "a snapshot of the runloop devbox"
ref=$(tail -1 "$T/out")
run "$SBX" sandbox create --snapshot "$ref"
expect_rc 0 "restores on local"
lid=$(tail -1 "$T/out")
echo "$lid" >>"$T/ids"
run "$SBX" sandbox exec "$lid" -- cat stats.py
same "$T/out" "$T/runloop.stats" "with the devbox's stats.py"
"$SBX" sandbox exec "$lid" -- sh -c 'mkdir -p sub && printf "from local\n" > sub/note.txt && chmod 600 sub/note.txt && ln -s sub/note.txt link'
run "$SBX" sandbox snapshot "$lid"
expect_rc 0 "a snapshot of the local sandbox"
ref2=$(tail -1 "$T/out")
run "$SBX" sandbox create --provider runloop --snapshot "$ref2"
expect_rc 0 "restores on runloop"
rid2=$(tail -1 "$T/out")
echo "$rid2" >>"$T/ids"
run "$SBX" sandbox exec "$rid2" -- sh -c 'cat link; stat -c "%a %U" sub/note.txt; readlink link; cat stats.py | wc -l'
expect_eq "$(cat "$T/out")" "from local
600 user
sub/note.txt
$(wc -l <"$T/runloop.stats")" "with its files, modes, owner and links"

# Files in and out by the devbox id.
head -c 300000 /dev/urandom >"$T/in.bin"
run "$SBX" sandbox cp "$T/in.bin" "$rid2:sub/in.bin"
expect_rc 0 "sbx sandbox cp into the devbox"
run "$SBX" sandbox cp "$rid2:sub/in.bin" "$T/back.bin"
same "$T/in.bin" "$T/back.bin" "and back out, the same bytes"

# stdin goes as text: UTF-8 whose characters a read cuts in two comes through whole.
python3 -c 'import sys; sys.stdout.write("x" + "\u00e9\u20ac" * 3000 + "\n")' >"$T/utf8.txt"
"$SBX" sandbox exec -i "$rid2" -- cat <"$T/utf8.txt" >"$T/utf8.back" 2>"$T/err"
same "$T/utf8.txt" "$T/utf8.back" "stdin and stdout carry UTF-8 whole"

# The service ends an idle output stream while its command runs: sbx starts another at the
# last offset, and no output is lost or repeated.
rl_knob '{"stream_hold": 1}'
run "$SBX" sandbox exec "$rid2" -- sh -c 'echo one; echo two >&2; sleep 2.5; echo three; echo four >&2'
expect_eq "$(cat "$T/out")|$(cat "$T/err")" "one
three|two
four" "output across the service's idle end of its streams is whole"
rl_knob '{"stream_hold": 0}'
# An execution's answer that already carries output with NUL bytes in it.
rl_knob '{"async_answer_delay": 1}'
run "$SBX" sandbox exec "$rid2" -- sh -c 'printf "a\0b" >&2'
expect_rc 0 "a command whose output has NUL bytes, already in the service's answer"
expect_eq "$(od -An -c "$T/err" | tr -d ' \n')" 'a\0b' "and its stderr is whole"
rl_knob '{"async_answer_delay": 0}'

# What the devbox uses, read inside it: the workspace's bytes grow with a file written there.
"$SBX" sandbox exec "$rid2" -- sh -c 'head -c 2000000 /dev/zero > sub/zeros'
run "$SBX" sandbox stats --no-stream --json "$rid2"
expect_rc 0 "sbx sandbox stats of a devbox"
expect_eq "$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))[0]; print(s["provider"], s["memory"] > 0 and s["memory"] <= s["memory_limit"], s["pids"] >= 1, s["disk"] >= 2000000, s["cpu_ns"] > 0)' "$T/out")" \
    "runloop True True True True" "gives its memory and limit, processes, workspace bytes and CPU time"
"$SBX" sandbox exec "$rid2" -- rm sub/zeros

# A state resumes in a new sbx process; stop (suspend) and start (resume) keep the workspace.
run "$SBX" sandbox state "$rid2"
expect_rc 0 "the devbox's session state"
cp "$T/out" "$T/state.json"
expect_eq "$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print(s["provider"], s["id"], s["root"])' "$T/state.json")" \
    "runloop $rid2 /home/user" "names the provider, the devbox and its root"
run "$SBX" sandbox stop "$rid2"
expect_rc 0 "stop suspends it"
expect_eq "$(rl_status "$rid2")" suspended "(the service says suspended)"
run "$SBX" sandbox exec "$rid2" -- true
expect_in "$T/err" "is suspended (sbx sandbox start" "a stopped devbox takes no command, saying so"
run "$SBX" sandbox resume "$T/state.json"
expect_rc 0 "sbx sandbox resume of the state (a new process) resumes it"
run "$SBX" sandbox exec "$rid2" -- cat sub/note.txt
expect_eq "$(cat "$T/out")" "from local" "with its workspace"
run "$SBX" sandbox stop "$rid2"
run "$SBX" sandbox start "$rid2"
expect_rc 0 "start after stop"
run "$SBX" sandbox exec "$rid2" -- cat sub/note.txt
expect_eq "$(cat "$T/out")" "from local" "keeps the workspace too"

# The service's errors.
RUNLOOP_API_KEY=ak_wrong000000 run "$SBX" sandbox create --provider runloop
expect_rc 1 "a wrong key fails"
expect_in "$T/err" "refused the key from \$RUNLOOP_API_KEY" "saying the key was refused and where it came from"
expect_not_in "$T/err" "ak_wrong000000" "without the key"
env -u RUNLOOP_API_KEY "$SBX" sandbox create --provider runloop >"$T/out" 2>"$T/err"
expect_in "$T/err" "no Runloop API key: \$RUNLOOP_API_KEY is not set" "a missing key is named"
run "$SBX" sandbox create --provider runloop -o blueprint_id=bpt_nosuch
expect_in "$T/err" "no blueprint 'bpt_nosuch'" "an unknown blueprint is named"
run "$SBX" sandbox create --provider runloop -o blueprint_name=nosuch
expect_in "$T/err" "no blueprint 'nosuch'" "an unknown blueprint name too"
rl_knob '{"rate_limit_next": 2, "retry_after": 1}'
before=$(rl_stat rate_limited)
run "$SBX" sandbox exec "$rid2" -- echo through
expect_eq "$(cat "$T/out")" "through" "two 429s with Retry-After are waited out"
expect_eq "$(($(rl_stat rate_limited) - before))" 2 "(the service did refuse twice)"
rl_knob '{"rate_limit_next": 10, "retry_after": 1}'
run "$SBX" sandbox exec "$rid2" -- echo through
expect_rc 125 "more 429s than the retries fail"
expect_in "$T/err" "rate limiting or over quota (HTTP 429, retries exhausted)" "saying so"
rl_knob '{"rate_limit_next": 0}'
rl_knob "{\"max_devboxes\": $(rl_stat live)}"
run "$SBX" sandbox create --provider runloop
expect_rc 1 "past the service's devbox quota a create fails"
expect_in "$T/err" "devbox quota reached" "with the service's words"
rl_knob '{"max_devboxes": 0}'
run "$SBX" sandbox create --provider runloop
expect_rc 0 "a devbox to let go idle"
idle=$(tail -1 "$T/out")
rl_knob "{\"expire\": \"$idle\"}"
run "$SBX" sandbox exec "$idle" -- true
expect_rc 125 "a devbox the service shut down takes no command"
expect_in "$T/err" "is gone (shutdown: idle)" "and the error says why"

# Launch parameters from the flat options.
run "$SBX" sandbox create --provider runloop -o keep_alive_time_seconds=7200 -o idle_time_seconds=600 \
    -o on_idle=shutdown -o resource_size_request=SMALL -o exposed_ports=8080
expect_rc 0 "a devbox with launch parameters"
lp=$(tail -1 "$T/out")
expect_eq "$(rl_field launch_parameters "$lp")" \
    '{"after_idle": {"idle_time_seconds": 600, "on_idle": "shutdown"}, "keep_alive_time_seconds": 7200, "resource_size_request": "SMALL"}' \
    "reach the service as its launch_parameters"
run "$SBX" sandbox create --provider runloop -o on_idle=suspend
expect_in "$T/err" "on_idle needs idle_time_seconds" "on_idle alone is refused"
"$SBX" sandbox rm "$lp" >/dev/null 2>&1

# Nothing left behind, and no key anywhere sbx wrote.
for id in $(cat "$T/ids") $idle; do "$SBX" sandbox rm "$id" >/dev/null 2>&1; done
expect_eq "$(rl_stat live)" 0 "rm shut down every devbox at the service"
ls "$T/me"/*.trace >/dev/null 2>&1 && ok "the runs wrote traces" || not_ok "the runs wrote traces"
if [ -s "$FAKE_RUNLOOP_STATE/unknown.log" ]; then
    not_ok "every path and field sbx sent is one the fake knows"; diag "$(sort -u "$FAKE_RUNLOOP_STATE/unknown.log")"
else ok "every path and field sbx sent is one the fake knows"; fi
leaks=$(grep -rlF -- "$RUNLOOP_API_KEY" "$T/me" "$T"/*.json "$T"/*.err 2>/dev/null)
expect_eq "$leaks" "" "the API key is in no state, record, snapshot, trace or log file"
done_testing
