#!/usr/bin/env bash
# sbx's daytona provider against the fake Daytona service, through the command line: the coding
# example gives what it gives locally; a snapshot taken on daytona restores on local and one
# taken on local restores on daytona; files both ways; a session state resumes in a new sbx
# process; stop and start keep the disk; a JWT with its organization works and without it is
# refused; a missing key, a wrong key, a 429 with Retry-After (retried, then given up), the
# quota, a deleted sandbox and an unknown snapshot each give their clear error. Last: neither
# the key nor the JWT appears in any state, record, snapshot, trace or log file sbx wrote.
. "$(dirname "$0")/../../integration/lib.sh"
. "$(dirname "$0")/lib.sh"

fake=$T/fake
cleanup() {
    "$DAYTONA_HERE/fake.sh" stop "$fake" >/dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT
daytona_fake_start "$fake"

# The test's own sbx state, apart from the fake's.
mkdir -m 0700 "$T/me" "$T/me/run"
export XDG_RUNTIME_DIR="$T/me/run" SBX_WORKSPACES="$T/me/ws" SBX_STOPPED="$T/me/stopped" \
    SBX_SNAPSHOTS="$T/me/snapshots" XDG_STATE_HOME="$T/me/state" SBX_RECORDS="$T/me/records"
: >"$T/ids"

. "$SBX_SRCDIR/tests/integration/coding-lib.sh"
RUN_TRACE=$T/me

run_example local
expect_rc 0 "the coding example runs locally"
run_example daytona --provider daytona
expect_rc 0 "and with --provider daytona"
[ "$rc" = 0 ] || diag "$(tail -5 "$T/daytona.err")"
did=$(cat "$T/daytona.id")
[ -n "$did" ] && [ "$(daytona_stat sandboxes)" -ge 1 ] && ok "the daytona run kept a sandbox at the service" ||
    not_ok "the daytona run kept a sandbox at the service ($did)"
same_as_local daytona daytona
run "$SBX" sandbox exec "$did" -- sh -c 'echo "$(pwd) $(id -un)"'
expect_eq "$(cat "$T/out")" "/home/daytona/workspace daytona" \
    "the workspace is /home/daytona/workspace, as the user daytona"

# Snapshots both ways.
run "$SBX" sandbox snapshot "$did"
expect_rc 0 "a snapshot of the daytona sandbox"
ref=$(tail -1 "$T/out")
run "$SBX" sandbox create --snapshot "$ref"
expect_rc 0 "restores on local"
lid=$(tail -1 "$T/out")
echo "$lid" >>"$T/ids"
run "$SBX" sandbox exec "$lid" -- cat stats.py
same "$T/out" "$T/daytona.stats" "with the daytona sandbox's stats.py"
"$SBX" sandbox exec "$lid" -- sh -c 'mkdir -p sub && printf "from local\n" > sub/note.txt && chmod 600 sub/note.txt && ln -s sub/note.txt link'
run "$SBX" sandbox snapshot "$lid"
expect_rc 0 "a snapshot of the local sandbox"
ref2=$(tail -1 "$T/out")
run "$SBX" sandbox create --provider daytona --snapshot "$ref2"
expect_rc 0 "restores on daytona"
did2=$(tail -1 "$T/out")
echo "$did2" >>"$T/ids"
run "$SBX" sandbox exec "$did2" -- sh -c 'cat link; stat -c "%a %U" sub/note.txt; readlink link; cat stats.py | wc -l'
expect_eq "$(cat "$T/out")" "from local
600 daytona
sub/note.txt
$(wc -l <"$T/daytona.stats")" "with its files, modes, owner and links"

# Files in and out by the daytona id.
head -c 200000 /dev/urandom >"$T/in.bin"
run "$SBX" sandbox cp "$T/in.bin" "$did2:sub/in.bin"
expect_rc 0 "sbx sandbox cp into the daytona sandbox"
run "$SBX" sandbox cp "$did2:sub/in.bin" "$T/back.bin"
same "$T/in.bin" "$T/back.bin" "and back out, the same bytes"

# A state resumes in a new sbx process; stop and start keep the workspace.
run "$SBX" sandbox state "$did2"
expect_rc 0 "the daytona sandbox's session state"
cp "$T/out" "$T/state.json"
expect_eq "$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print(s["provider"], s["id"], s["root"])' "$T/state.json")" \
    "daytona $did2 /home/daytona/workspace" "names the provider, the sandbox and its root"
run "$SBX" sandbox stop "$did2"
expect_rc 0 "stop"
run "$SBX" sandbox exec "$did2" -- true
expect_in "$T/err" "is stopped (sbx sandbox start" "a stopped sandbox takes no command, saying so"
run "$SBX" sandbox resume "$T/state.json"
expect_rc 0 "sbx sandbox resume of the state (a new process) starts it"
run "$SBX" sandbox exec "$did2" -- cat sub/note.txt
expect_eq "$(cat "$T/out")" "from local" "with its workspace"
run "$SBX" sandbox stop "$did2"
run "$SBX" sandbox start "$did2"
expect_rc 0 "start after stop"
run "$SBX" sandbox exec "$did2" -- cat sub/note.txt
expect_eq "$(cat "$T/out")" "from local" "keeps the workspace too"

# An API that describes sandboxes without their toolbox proxy URL: it is asked on its own.
daytona_knob '{"omit_proxy_url": true}'
run "$SBX" sandbox exec "$did2" -- echo by proxy
expect_eq "$(cat "$T/out")" "by proxy" "a sandbox described without its toolbox proxy URL is reached (GET .../toolbox-proxy-url)"
daytona_knob '{"omit_proxy_url": false}'

# A JWT acts with its organization, and not without it.
run "$SBX" sandbox create --provider daytona -o api_key=env:FAKE_DAYTONA_JWT -o "organization_id=$FAKE_DAYTONA_ORG"
expect_rc 0 "a JWT with its organization creates a sandbox"
jid=$(tail -1 "$T/out")
echo "$jid" >>"$T/ids"
run "$SBX" sandbox exec "$jid" -- echo by jwt
expect_eq "$(cat "$T/out")" "by jwt" "and reaches it again by id (the organization is in the record)"
env -u DAYTONA_ORGANIZATION_ID "$SBX" sandbox create --provider daytona -o api_key=env:FAKE_DAYTONA_JWT >"$T/out" 2>"$T/err"
expect_in "$T/err" "refused the key from \$FAKE_DAYTONA_JWT" "a JWT without its organization is refused"

# The service's errors.
DAYTONA_API_KEY=dtn_00000000 run "$SBX" sandbox create --provider daytona
expect_rc 1 "a wrong key fails"
expect_in "$T/err" "refused the key from \$DAYTONA_API_KEY" "saying the key was refused and where it came from"
expect_not_in "$T/err" "dtn_00000000" "without the key"
env -u DAYTONA_API_KEY "$SBX" sandbox create --provider daytona >"$T/out" 2>"$T/err"
expect_in "$T/err" "no Daytona API key: \$DAYTONA_API_KEY is not set" "a missing key is named"
run "$SBX" sandbox create --provider daytona -o sandbox_snapshot_name=nosuch
expect_in "$T/err" "no snapshot 'nosuch'" "an unknown snapshot is named"
daytona_knob '{"rate_limit_next": 2, "retry_after": 1}'
before=$(daytona_stat rate_limited)
run "$SBX" sandbox exec "$did2" -- echo through
expect_eq "$(cat "$T/out")" "through" "two 429s with Retry-After are waited out"
expect_eq "$(($(daytona_stat rate_limited) - before))" 2 "(the service did refuse twice)"
daytona_knob '{"rate_limit_next": 10, "retry_after": 1}'
run "$SBX" sandbox exec "$did2" -- echo through
expect_rc 125 "more 429s than the retries fail"
expect_in "$T/err" "rate limiting or over quota (HTTP 429, retries exhausted)" "saying so"
daytona_knob '{"rate_limit_next": 0}'
daytona_knob '{"max_sandboxes": 1}'
run "$SBX" sandbox create --provider daytona
expect_rc 1 "past the organization's quota a create fails"
expect_in "$T/err" "over quota (HTTP 403): Total CPU limit exceeded" "with the service's words"
daytona_knob '{"max_sandboxes": 0}'
run "$SBX" sandbox create --provider daytona
gone=$(tail -1 "$T/out")
daytona_knob "{\"forget\": \"$gone\"}"
run "$SBX" sandbox exec "$gone" -- true
expect_rc 125 "a sandbox deleted at the service"
expect_in "$T/err" "no sandbox '$gone' (it was deleted)" "is said to be gone"

# Nothing left behind, and no key anywhere sbx wrote.
for id in $(cat "$T/ids"); do "$SBX" sandbox rm "$id" >/dev/null 2>&1; done
expect_eq "$(daytona_stat sandboxes)" 0 "rm removed every sandbox at the service"
ls "$T/me"/*.trace >/dev/null 2>&1 && ok "the runs wrote traces" || not_ok "the runs wrote traces"
leaks=$(grep -rlF -e "$DAYTONA_API_KEY" -e "$FAKE_DAYTONA_JWT" "$T/me" "$T"/*.json "$T"/*.err 2>/dev/null)
expect_eq "$leaks" "" "neither the API key nor the JWT is in any state, record, snapshot, trace or log file"
done_testing
