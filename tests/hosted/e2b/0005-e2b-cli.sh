#!/usr/bin/env bash
# sbx's e2b provider against the fake E2B service, through the command line: the coding
# example gives what it gives locally; a snapshot taken on e2b restores on local and one taken
# on local restores on e2b; a session state resumes in a new sbx process; stop and start;
# a bad key, a 429 with Retry-After (retried, then given up), an expired sandbox and an unknown
# template each give their clear error. Last: the key appears in no state, record, snapshot,
# trace or log file the test's sbx wrote.
. "$(dirname "$0")/../../integration/lib.sh"
. "$(dirname "$0")/lib.sh"

fake=$T/fake
cleanup() {
    "$E2B_HERE/fake.sh" stop "$fake" >/dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT
e2b_fake_start "$fake"

# The test's own sbx state, apart from the fake's.
mkdir -m 0700 "$T/me" "$T/me/run"
export XDG_RUNTIME_DIR="$T/me/run" SBX_WORKSPACES="$T/me/ws" SBX_STOPPED="$T/me/stopped" \
    SBX_SNAPSHOTS="$T/me/snapshots" XDG_STATE_HOME="$T/me/state" SBX_RECORDS="$T/me/records"
: >"$T/ids"

. "$SBX_SRCDIR/tests/integration/coding-lib.sh"
RUN_TRACE=$T/me

run_example local
expect_rc 0 "the coding example runs locally"
run_example e2b --provider e2b
expect_rc 0 "and with --provider e2b"
e2b_id=$(cat "$T/e2b.id")
[ -n "$e2b_id" ] && [ "$(fake_stat sandboxes)" -ge 1 ] && ok "the e2b run kept a sandbox at the service" ||
    not_ok "the e2b run kept a sandbox at the service ($e2b_id)"
same_as_local e2b e2b
run "$SBX" sandbox exec "$e2b_id" -- sh -c 'echo "$HOME $(pwd) $(id -un)"'
expect_eq "$(cat "$T/out")" "/home/user /home/user user" "the workspace is E2B's home, as its user"

# Snapshots both ways.
run "$SBX" sandbox snapshot "$e2b_id"
expect_rc 0 "a snapshot of the e2b sandbox"
ref=$(tail -1 "$T/out")
run "$SBX" sandbox create --snapshot "$ref"
expect_rc 0 "restores on local"
lid=$(tail -1 "$T/out")
echo "$lid" >>"$T/ids"
run "$SBX" sandbox exec "$lid" -- cat stats.py
same "$T/out" "$T/e2b.stats" "with the e2b sandbox's stats.py"
"$SBX" sandbox exec "$lid" -- sh -c 'mkdir -p sub && printf "from local\n" > sub/note.txt && chmod 600 sub/note.txt && ln -s sub/note.txt link'
run "$SBX" sandbox snapshot "$lid"
expect_rc 0 "a snapshot of the local sandbox"
ref2=$(tail -1 "$T/out")
run "$SBX" sandbox create --provider e2b --snapshot "$ref2"
expect_rc 0 "restores on e2b"
eid2=$(tail -1 "$T/out")
echo "$eid2" >>"$T/ids"
run "$SBX" sandbox exec "$eid2" -- sh -c 'cat link; stat -c "%a %U" sub/note.txt; readlink link; cat stats.py | wc -l'
expect_eq "$(cat "$T/out")" "from local
600 user
sub/note.txt
$(wc -l <"$T/e2b.stats")" "with its files, modes, owner and links"

# Files in and out by the e2b id.
printf 'in and out\n' >"$T/in.txt"
run "$SBX" sandbox cp "$T/in.txt" "$eid2:sub/in.txt"
expect_rc 0 "sbx sandbox cp into the e2b sandbox"
run "$SBX" sandbox cp "$eid2:sub/in.txt" "$T/back.txt"
same "$T/in.txt" "$T/back.txt" "and back out, the same bytes"

# A state resumes in a new sbx process; stop (pause) and start (resume) keep the workspace.
run "$SBX" sandbox state "$eid2"
expect_rc 0 "the e2b sandbox's session state"
cp "$T/out" "$T/state.json"
expect_eq "$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print(s["provider"], s["id"], s["root"])' "$T/state.json")" \
    "e2b $eid2 /home/user" "names the provider, the sandbox and its root"
run "$SBX" sandbox stop "$eid2"
expect_rc 0 "stop pauses it"
run "$SBX" sandbox exec "$eid2" -- true
expect_in "$T/err" "is paused (sbx sandbox start" "a stopped sandbox takes no command, saying so"
run "$SBX" sandbox resume "$T/state.json"
expect_rc 0 "sbx sandbox resume of the state (a new process) resumes it"
run "$SBX" sandbox exec "$eid2" -- cat sub/note.txt
expect_eq "$(cat "$T/out")" "from local" "with its workspace"
run "$SBX" sandbox stop "$eid2"
run "$SBX" sandbox start "$eid2"
expect_rc 0 "start after stop"
run "$SBX" sandbox exec "$eid2" -- cat sub/note.txt
expect_eq "$(cat "$T/out")" "from local" "keeps the workspace too"

# The service's errors.
E2B_API_KEY=e2b_00000000 run "$SBX" sandbox create --provider e2b
expect_rc 1 "a wrong key fails"
expect_in "$T/err" "refused the key from \$E2B_API_KEY" "saying the key was refused and where it came from"
expect_not_in "$T/err" "e2b_00000000" "without the key"
env -u E2B_API_KEY "$SBX" sandbox create --provider e2b >"$T/out" 2>"$T/err"
expect_in "$T/err" "no E2B API key: \$E2B_API_KEY is not set" "a missing key is named"
run "$SBX" sandbox create --provider e2b --template nosuch
expect_in "$T/err" "no template 'nosuch'" "an unknown template is named"
knob '{"rate_limit_next": 2, "retry_after": 1}'
before=$(fake_stat rate_limited)
run "$SBX" sandbox exec "$eid2" -- echo through
expect_eq "$(cat "$T/out")" "through" "two 429s with Retry-After are waited out"
expect_eq "$(($(fake_stat rate_limited) - before))" 2 "(the service did refuse twice)"
knob '{"rate_limit_next": 10, "retry_after": 1}'
run "$SBX" sandbox exec "$eid2" -- echo through
expect_rc 125 "more 429s than the retries fail"
expect_in "$T/err" "rate limiting or over quota (HTTP 429, retries exhausted)" "saying so"
knob '{"rate_limit_next": 0}'
run "$SBX" sandbox create --provider e2b -o timeout=1 -o on_timeout=kill
expect_rc 0 "a sandbox with a one-second life"
short=$(tail -1 "$T/out")
sleep 2.5
run "$SBX" sandbox exec "$short" -- true
expect_rc 125 "is gone after it"
expect_in "$T/err" "expired or was killed" "and the error says it expired"

knob '{"max_sandboxes": 1}'
run "$SBX" sandbox create --provider e2b
expect_rc 1 "past the service's concurrency quota a create fails"
expect_in "$T/err" "maximum number of concurrent E2B sandboxes" "with the service's words"
knob '{"max_sandboxes": 0}'
run "$SBX" sandbox create --provider e2b -o timeout=1
expect_rc 0 "a sandbox paused when its life ends (on_timeout pause, the default)"
napper=$(tail -1 "$T/out")
"$SBX" sandbox exec "$napper" -- sh -c 'echo kept > kept.txt'
# (asked at the service, not through sbx: every use sets its end again)
for _ in $(seq 80); do
    [ "$(fake_state "$napper")" = paused ] && break
    sleep 0.25
done
run "$SBX" sandbox exec "$napper" -- true
expect_in "$T/err" "is paused (sbx sandbox start $napper)" "is paused after it, saying how to start it"
run "$SBX" sandbox start "$napper"
expect_rc 0 "starts again"
run "$SBX" sandbox exec "$napper" -- cat kept.txt
expect_eq "$(cat "$T/out")" "kept" "with its workspace"
short="$short $napper"

# Nothing left behind, and no key anywhere sbx wrote.
for id in $(cat "$T/ids") $short; do "$SBX" sandbox rm "$id" >/dev/null 2>&1; done
expect_eq "$(fake_stat sandboxes)" 0 "rm removed every sandbox at the service"
ls "$T/me"/*.trace >/dev/null 2>&1 && ok "the runs wrote traces" || not_ok "the runs wrote traces"
leaks=$(grep -rlF -- "$E2B_API_KEY" "$T/me" "$T"/*.json "$T"/*.err 2>/dev/null)
expect_eq "$leaks" "" "the API key is in no state, record, snapshot, trace or log file"
done_testing
