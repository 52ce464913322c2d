#!/usr/bin/env bash
# sbx's vercel provider against the fake Vercel service, through the command line: the coding
# example gives what it gives locally; a snapshot taken on vercel restores on local and one
# taken on local restores on vercel; a session state resumes in a new sbx process; stop and
# start; stdin given whole; a wrong or missing token, a 429 with Retry-After (retried, then
# given up), an expired sandbox and an unknown snapshot or runtime each give their clear error.
# Last: the token appears in no state, record, snapshot, trace or log file the test's sbx wrote.
. "$(dirname "$0")/../../integration/lib.sh"
. "$(dirname "$0")/lib.sh"

fake=$T/fake
cleanup() {
    "$VERCEL_HERE/fake.sh" stop "$fake" >/dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT
vercel_fake_start "$fake"

# The test's own sbx state, apart from the fake's.
mkdir -m 0700 "$T/me" "$T/me/run"
export XDG_RUNTIME_DIR="$T/me/run" SBX_WORKSPACES="$T/me/ws" SBX_STOPPED="$T/me/stopped" \
    SBX_SNAPSHOTS="$T/me/snapshots" XDG_STATE_HOME="$T/me/state" SBX_RECORDS="$T/me/records"
: >"$T/ids"

. "$SBX_SRCDIR/tests/integration/coding-lib.sh"
RUN_TRACE=$T/me

run_example local
expect_rc 0 "the coding example runs locally"
run_example vercel --provider vercel
expect_rc 0 "and with --provider vercel"
[ "$rc" = 0 ] || diag "$(tail -5 "$T/vercel.err")"
vid=$(cat "$T/vercel.id")
[ -n "$vid" ] && [ "$(fake_stat sandboxes)" -ge 1 ] && ok "the vercel run kept a sandbox at the service" ||
    not_ok "the vercel run kept a sandbox at the service ($vid)"
same_as_local vercel vercel
run "$SBX" sandbox exec "$vid" -- sh -c 'echo "$(pwd) $(id -un)"'
expect_eq "$(cat "$T/out")" "/vercel/sandbox vercel-sandbox" "the workspace is Vercel's, as its user"

# The sandbox's environment (the env option) reaches every command, under the command's own.
run "$SBX" sandbox create --provider vercel -o env=GREETING=hello -o env=WHO=sandbox
expect_rc 0 "a sandbox with an environment"
envd=$(tail -1 "$T/out")
echo "$envd" >>"$T/ids"
run "$SBX" sandbox exec --env WHO=command "$envd" -- sh -c 'echo "$GREETING $WHO"'
expect_eq "$(cat "$T/out")" "hello command" "reaches its commands, the command's own first"

# Stdin is collected and given whole.
head -c 300000 /dev/urandom | base64 >"$T/in.b64"
"$SBX" sandbox exec -i "$vid" -- sh -c 'cat; echo end' <"$T/in.b64" >"$T/out" 2>"$T/err"
expect_eq "$(tail -1 "$T/out")" "end" "a command reads the stdin it was given"
head -n -1 "$T/out" >"$T/stdin-back"
same "$T/in.b64" "$T/stdin-back" "all of it, in order"

# Snapshots both ways.
run "$SBX" sandbox snapshot "$vid"
expect_rc 0 "a snapshot of the vercel sandbox"
ref=$(tail -1 "$T/out")
run "$SBX" sandbox create --snapshot "$ref"
expect_rc 0 "restores on local"
lid=$(tail -1 "$T/out")
echo "$lid" >>"$T/ids"
run "$SBX" sandbox exec "$lid" -- cat stats.py
same "$T/out" "$T/vercel.stats" "with the vercel sandbox's stats.py"
"$SBX" sandbox exec "$lid" -- sh -c 'mkdir -p sub && printf "from local\n" > sub/note.txt && chmod 600 sub/note.txt && ln -s sub/note.txt link'
run "$SBX" sandbox snapshot "$lid"
expect_rc 0 "a snapshot of the local sandbox"
ref2=$(tail -1 "$T/out")
run "$SBX" sandbox create --provider vercel --snapshot "$ref2"
expect_rc 0 "restores on vercel"
vid2=$(tail -1 "$T/out")
echo "$vid2" >>"$T/ids"
run "$SBX" sandbox exec "$vid2" -- sh -c 'cat link; stat -c "%a %U" sub/note.txt; readlink link; cat stats.py | wc -l'
expect_eq "$(cat "$T/out")" "from local
600 vercel-sandbox
sub/note.txt
$(wc -l <"$T/vercel.stats")" "with its files, modes, owner and links"

# Files in and out by the vercel id.
printf 'in and out\n' >"$T/in.txt"
run "$SBX" sandbox cp "$T/in.txt" "$vid2:sub/in.txt"
expect_rc 0 "sbx sandbox cp into the vercel sandbox"
run "$SBX" sandbox cp "$vid2:sub/in.txt" "$T/back.txt"
same "$T/in.txt" "$T/back.txt" "and back out, the same bytes"

# A state resumes in a new sbx process; stop and start keep the workspace.
run "$SBX" sandbox state "$vid2"
expect_rc 0 "the vercel sandbox's session state"
cp "$T/out" "$T/state.json"
expect_eq "$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print(s["provider"], s["id"], s["root"])' "$T/state.json")" \
    "vercel $vid2 /vercel/sandbox" "names the provider, the sandbox and its root"
run "$SBX" sandbox stop "$vid2"
expect_rc 0 "stop stops its session"
run "$SBX" sandbox exec "$vid2" -- true
expect_in "$T/err" "is stopped (sbx sandbox start" "a stopped sandbox takes no command, saying so"
run "$SBX" sandbox resume "$T/state.json"
expect_rc 0 "sbx sandbox resume of the state (a new process) starts it"
run "$SBX" sandbox exec "$vid2" -- cat sub/note.txt
expect_eq "$(cat "$T/out")" "from local" "with its workspace"
run "$SBX" sandbox stop "$vid2"
run "$SBX" sandbox start "$vid2"
expect_rc 0 "start after stop"
run "$SBX" sandbox exec "$vid2" -- cat sub/note.txt
expect_eq "$(cat "$T/out")" "from local" "keeps the workspace too"

# A command's stream cut in the middle (a proxy's reset) is picked up again: the logs from the
# start, what was delivered skipped, then the command's end.
knob '{"cut_next": 1}'
"$SBX" sandbox exec "$vid2" -- sh -c 'echo one; sleep 0.3; echo two >&2; sleep 0.3; echo three; exit 5' \
    >"$T/out" 2>"$T/err"
rc=$?
expect_eq "$rc $(tr '\n' , <"$T/out") $(tr '\n' , <"$T/err")" "5 one,three, two," \
    "a cut stream loses no output and keeps the exit status"
knob '{"cut_next": 0}'

# The service's errors.
VERCEL_TOKEN=vt_wrong0000 run "$SBX" sandbox create --provider vercel
expect_rc 1 "a wrong token fails"
expect_in "$T/err" "refused the token from \$VERCEL_TOKEN" "saying the token was refused and where it came from"
expect_not_in "$T/err" "vt_wrong0000" "without the token"
env -u VERCEL_TOKEN "$SBX" sandbox create --provider vercel >"$T/out" 2>"$T/err"
expect_in "$T/err" "no Vercel token: \$VERCEL_TOKEN is not set" "a missing token is named"
env -u VERCEL_TEAM_ID "$SBX" sandbox create --provider vercel >"$T/out" 2>"$T/err"
expect_in "$T/err" "no Vercel team: set \$VERCEL_TEAM_ID" "a missing team is named"
run "$SBX" sandbox create --provider vercel -o team_id=team_other
expect_in "$T/err" "refused the token from \$VERCEL_TOKEN for team 'team_other'" "a team the token cannot reach is refused, naming it"
run "$SBX" sandbox create --provider vercel -o source_snapshot=snap_nosuch
expect_in "$T/err" "has no snapshot 'snap_nosuch'" "an unknown native snapshot is named"
run "$SBX" sandbox create --provider vercel -o runtime=cobol
expect_in "$T/err" "refused the sandbox (runtime 'cobol'" "an unknown runtime is named"
knob '{"rate_limit_next": 2, "retry_after": 1}'
before=$(fake_stat rate_limited)
run "$SBX" sandbox exec "$vid2" -- echo through
expect_eq "$(cat "$T/out")" "through" "two 429s with Retry-After are waited out"
expect_eq "$(($(fake_stat rate_limited) - before))" 2 "(the service did refuse twice)"
knob '{"rate_limit_next": 10, "retry_after": 1}'
run "$SBX" sandbox exec "$vid2" -- echo through
expect_rc 125 "more 429s than the retries fail"
expect_in "$T/err" "rate limiting or over quota (HTTP 429, retries exhausted)" "saying so"
knob '{"rate_limit_next": 0}'
run "$SBX" sandbox create --provider vercel
expect_rc 0 "a sandbox"
short=$(tail -1 "$T/out")
knob "{\"expire\": \"$short\"}"
run "$SBX" sandbox exec "$short" -- true
expect_rc 125 "is gone once it expired at the service"
expect_in "$T/err" "no sandbox '$short' (it expired or was deleted)" "and the error says so"

# A session lives while it is used (each command extends its timeout when less than half is
# left); left alone, the service stops it and its sandbox keeps its disk.
run "$SBX" sandbox create --provider vercel -o timeout_ms=6000
expect_rc 0 "a sandbox whose sessions last 6 s"
busy=$(tail -1 "$T/out")
echo "$busy" >>"$T/ids"
"$SBX" sandbox exec "$busy" -- sh -c 'echo busy > b.txt'
n=0
for _ in $(seq 12); do
    "$SBX" sandbox exec "$busy" -- true 2>"$T/err" || break
    n=$((n + 1))
    sleep 0.5
done
expect_eq "$n" 12 "commands over twice its timeout find it running"
for _ in $(seq 100); do
    [ "$(fake_status "$busy")" = stopped ] && break
    sleep 0.5
done
run "$SBX" sandbox exec "$busy" -- true
expect_in "$T/err" "is stopped (sbx sandbox start $busy)" "left alone, its session stops"
run "$SBX" sandbox start "$busy"
run "$SBX" sandbox exec "$busy" -- cat b.txt
expect_eq "$(cat "$T/out")" "busy" "and starts again with its disk"

# workspace_persistence snapshot: a stop takes a native snapshot, which new sandboxes start from.
run "$SBX" sandbox create --provider vercel -o workspace_persistence=snapshot
expect_rc 0 "a sandbox kept by native snapshots"
nat=$(tail -1 "$T/out")
echo "$nat" >>"$T/ids"
"$SBX" sandbox exec "$nat" -- sh -c 'echo native > n.txt'
run "$SBX" sandbox stop "$nat"
expect_rc 0 "its stop takes a native snapshot"
run "$SBX" sandbox state "$nat"
snapid=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("native_snapshot") or "")' "$T/out")
[ -n "$snapid" ] && ok "the stopped sandbox's state names it ($snapid)" ||
    { not_ok "the stopped sandbox's state names it"; diag "$(cat "$T/out" "$T/err")"; }
run "$SBX" sandbox create --provider vercel -o source_snapshot="$snapid"
expect_rc 0 "a sandbox from the native snapshot"
from=$(tail -1 "$T/out")
echo "$from" >>"$T/ids"
run "$SBX" sandbox exec "$from" -- cat n.txt
expect_eq "$(cat "$T/out")" "native" "has the snapshot's files"

# Nothing left behind, and no token anywhere sbx wrote.
for id in $(cat "$T/ids"); do "$SBX" sandbox rm "$id" >/dev/null 2>&1; done
expect_eq "$(fake_stat sandboxes)" 0 "rm removed every sandbox at the service"
ls "$T/me"/*.trace >/dev/null 2>&1 && ok "the runs wrote traces" || not_ok "the runs wrote traces"
leaks=$(grep -rlF -- "$VERCEL_TOKEN" "$T/me" "$T"/*.json "$T"/*.err 2>/dev/null)
expect_eq "$leaks" "" "the token is in no state, record, snapshot, trace or log file"
if [ -s "$FAKE_VERCEL_STATE/unknown-fields.log" ]; then
    not_ok "every field sent is one the fake knows"; diag "$(sort -u "$FAKE_VERCEL_STATE/unknown-fields.log")"
else ok "every field sent is one the fake knows"; fi
grep -q Traceback "$FAKE_VERCEL_LOG" && { not_ok "the fake logged no exception"; diag "$(grep -A20 Traceback "$FAKE_VERCEL_LOG" | head -40)"; } ||
    ok "the fake logged no exception"
done_testing
