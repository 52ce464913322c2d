#!/usr/bin/env bash
# sbx's blaxel provider against the fake Blaxel service, through the command line: the coding
# example gives what it gives locally; a snapshot taken on blaxel restores on local and one
# taken on local restores on blaxel; files in and out; a session state resumes in a new sbx
# process; a port's preview; a wrong key, a missing key or workspace, 429s with Retry-After
# (waited out, then given up), the workspace's usage limit, an expired sandbox and an unknown
# image each give their clear error. Last: the key appears in no state, record, snapshot,
# trace or log file sbx wrote.
. "$(dirname "$0")/../../integration/lib.sh"
. "$(dirname "$0")/lib.sh"

fake=$T/fake
cleanup() {
    # The test's own local sandboxes too, when it stopped half-way (Blaxel's go with the fake).
    if [ -d "$T/me/run" ]; then
        for id in $("$SBX" sandbox ps --all -q 2>/dev/null); do
            "$SBX" sandbox rm "$id" >/dev/null 2>&1
        done
    fi
    "$BLAXEL_HERE/fake.sh" stop "$fake" >/dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT
blaxel_fake_start "$fake"

# The test's own sbx state, apart from the fake's.
mkdir -m 0700 "$T/me" "$T/me/run"
export XDG_RUNTIME_DIR="$T/me/run" SBX_WORKSPACES="$T/me/ws" SBX_STOPPED="$T/me/stopped" \
    SBX_SNAPSHOTS="$T/me/snapshots" XDG_STATE_HOME="$T/me/state" SBX_RECORDS="$T/me/records"
: >"$T/ids"

. "$SBX_SRCDIR/tests/integration/coding-lib.sh"
RUN_TRACE=$T/me

run_example local
expect_rc 0 "the coding example runs locally"
run_example blaxel --provider blaxel
expect_rc 0 "and with --provider blaxel"
[ "$rc" = 0 ] || diag "$(tail -5 "$T/blaxel.err")"
bid=$(cat "$T/blaxel.id")
[ -n "$bid" ] && [ "$(blaxel_live)" -ge 1 ] && ok "the blaxel run kept its sandbox at the service" ||
    not_ok "the blaxel run kept its sandbox at the service ($bid)"
same_as_local blaxel blaxel
run "$SBX" sandbox exec "$bid" -- pwd
expect_eq "$(cat "$T/out")" "/workspace" "the workspace is /workspace, as the reference's"

# Snapshots both ways.
run "$SBX" sandbox snapshot "$bid"
expect_rc 0 "a snapshot of the blaxel sandbox"
ref=$(tail -1 "$T/out")
run "$SBX" sandbox create --snapshot "$ref"
expect_rc 0 "restores on local"
lid=$(tail -1 "$T/out")
echo "$lid" >>"$T/ids"
run "$SBX" sandbox exec "$lid" -- cat stats.py
blaxel_same "$T/out" "$T/blaxel.stats" "with the blaxel sandbox's stats.py"
"$SBX" sandbox exec "$lid" -- sh -c 'mkdir -p sub && printf "from local\n" > sub/note.txt && chmod 600 sub/note.txt && ln -s sub/note.txt link'
run "$SBX" sandbox snapshot "$lid"
expect_rc 0 "a snapshot of the local sandbox"
ref2=$(tail -1 "$T/out")
run "$SBX" sandbox create --provider blaxel --snapshot "$ref2"
expect_rc 0 "restores on blaxel"
bid2=$(tail -1 "$T/out")
echo "$bid2" >>"$T/ids"
run "$SBX" sandbox exec "$bid2" -- sh -c 'cat link; stat -c %a sub/note.txt; readlink link; wc -l < stats.py'
expect_eq "$(cat "$T/out")" "from local
600
sub/note.txt
$(wc -l <"$T/blaxel.stats")" "with its files, modes and links"

# Files in and out by the sandbox's name; stdin through the process API.
head -c 300000 /dev/urandom >"$T/in.bin"
run "$SBX" sandbox cp "$T/in.bin" "$bid2:sub/in.bin"
expect_rc 0 "sbx sandbox cp into the sandbox"
run "$SBX" sandbox cp "$bid2:sub/in.bin" "$T/back.bin"
blaxel_same "$T/in.bin" "$T/back.bin" "and back out, the same bytes"
seq 1 20000 >"$T/lines.txt"
"$SBX" sandbox exec -i "$bid2" -- sh -c 'wc -l; echo done >&2' <"$T/lines.txt" >"$T/out" 2>"$T/err"
expect_eq "$(cat "$T/out")|$(cat "$T/err")" "20000|done" "stdin reaches a command whole, stderr apart"

# A command whose output is longer than one event line sbx keeps: its exit status comes from
# the skimmed result, not from look-alikes in the output.
run "$SBX" sandbox exec "$bid2" -- sh -c 'printf "%s\n" "\"exitCode\":7" "\\\"exitCode\\\":9"; head -c 6000000 /dev/zero | tr "\\0" x; exit 3'
expect_eq "$rc $(wc -c <"$T/out")" "3 6000028" "a 6 MB output keeps its exit status (3), whatever it says"

# A silent command's stream carries keepalive events (here every 0.2 s); an "error" event of
# the stream fails the command with the service's words.
blaxel_knob '{"keepalive_s": 0.2}'
run "$SBX" sandbox exec "$bid2" -- sh -c 'sleep 1.2; echo after'
expect_eq "$rc $(cat "$T/out")" "0 after" "keepalive events in a silent command's stream are skipped"
blaxel_knob '{"keepalive_s": 5}'
blaxel_knob '{"stream_error_next": 1}'
run "$SBX" sandbox exec "$bid2" -- true
expect_rc 125 "an error event fails the command"
expect_in "$T/err" "could not start the process: no space left" "with the service's words"

# A port: its preview, reached through the fake as Blaxel's edge would be.
"$SBX" sandbox exec --keep-background "$bid2" -- sh -c 'cd sub && python3 -m http.server 8765 --bind 127.0.0.1 >/dev/null 2>&1 &' >/dev/null 2>&1
url=
for i in $(seq 50); do
    url=$("$SBX" sandbox port "$bid2" 8765 2>"$T/err") && break
    sleep 0.2
done
case $url in https://*.preview.blaxel.test*) ok "sbx sandbox port gives the port's preview URL" ;;
*) not_ok "sbx sandbox port gives the port's preview URL"; diag "$url $(cat "$T/err")" ;; esac
host=${url#https://}
host=${host%%/*}
body=$(curl -s -H "Host: $host" "$FAKE_BLAXEL_URL/note.txt")
expect_eq "$body" "from local" "which reaches the server in the sandbox"

# What the sandbox uses, read in it: the workspace's bytes grow with a file written there.
"$SBX" sandbox exec "$bid2" -- sh -c 'head -c 3000000 /dev/zero > sub/zeros'
run "$SBX" sandbox stats --no-stream --json "$bid2"
expect_rc 0 "sbx sandbox stats of a blaxel sandbox"
expect_eq "$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))[0]; print(s["provider"], 0 < s["memory"] <= s["memory_limit"], s["pids"] >= 1, s["disk"] >= 3000000, s["cpu_ns"] > 0)' "$T/out")" \
    "blaxel True True True True" "gives memory and its limit, processes, the workspace's bytes and CPU time"
"$SBX" sandbox exec "$bid2" -- rm sub/zeros

# A state resumes in a new sbx process.
run "$SBX" sandbox state "$bid2"
expect_rc 0 "the sandbox's session state"
cp "$T/out" "$T/state.json"
expect_eq "$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print(s["provider"], s["id"], s["root"])' "$T/state.json")" \
    "blaxel $bid2 /workspace" "names the provider, the sandbox and its root"
run "$SBX" sandbox resume "$T/state.json"
expect_rc 0 "sbx sandbox resume of the state (a new process)"
run "$SBX" sandbox exec "$bid2" -- cat sub/note.txt
expect_eq "$(cat "$T/out")" "from local" "finds its workspace"

# The service's errors.
BL_API_KEY=bl_wrong000000 run "$SBX" sandbox create --provider blaxel
expect_rc 1 "a wrong key fails"
expect_in "$T/err" "refused the key from \$BL_API_KEY for workspace '$BL_WORKSPACE'" "saying the key was refused, where it came from and for which workspace"
expect_in "$T/err" "Unauthorized" "with the service's word"
expect_not_in "$T/err" "bl_wrong000000" "without the key"
env -u BL_API_KEY "$SBX" sandbox create --provider blaxel >"$T/out" 2>"$T/err"
expect_in "$T/err" "no Blaxel API key: \$BL_API_KEY is not set" "a missing key is named"
env -u BL_WORKSPACE "$SBX" sandbox create --provider blaxel >"$T/out" 2>"$T/err"
expect_in "$T/err" "no Blaxel workspace: \$BL_WORKSPACE is not set" "a missing workspace too"
run "$SBX" sandbox create --provider blaxel --image no/such-image:1
expect_rc 1 "an unknown image fails"
expect_in "$T/err" "from image 'no/such-image:1' (the blaxel provider's image option)" "naming the image and the option"
blaxel_knob '{"rate_limit_next": 2, "retry_after": 1}'
before=$(blaxel_stat rate_limited)
run "$SBX" sandbox exec "$bid2" -- echo through
expect_eq "$(cat "$T/out")" "through" "two 429s with Retry-After are waited out"
expect_eq "$(($(blaxel_stat rate_limited) - before))" 2 "(the service did refuse twice)"
blaxel_knob '{"rate_limit_next": 10, "retry_after": 1}'
run "$SBX" sandbox exec "$bid2" -- echo through
expect_rc 125 "more 429s than the retries fail"
expect_in "$T/err" "rate limiting (HTTP 429, retries exhausted)" "saying so"
blaxel_knob '{"rate_limit_next": 0}'
blaxel_knob "{\"max_sandboxes\": $(blaxel_live)}"
run "$SBX" sandbox create --provider blaxel
expect_rc 1 "past the workspace's usage limit a create fails"
expect_in "$T/err" "is over its usage limit (HTTP 402)" "saying so"
blaxel_knob '{"max_sandboxes": 0}'
run "$SBX" sandbox create --provider blaxel
expect_rc 0 "a sandbox to let expire"
gone=$(tail -1 "$T/out")
blaxel_knob "{\"forget\": \"$gone\"}"
run "$SBX" sandbox exec "$gone" -- true
expect_rc 125 "an expired sandbox takes no command"
expect_in "$T/err" "no sandbox '$gone' at Blaxel (it expired or was deleted)" "and the error says so"

# Nothing left behind, and no key anywhere sbx wrote.
for id in $(cat "$T/ids"); do "$SBX" sandbox rm "$id" >/dev/null 2>&1; done
expect_eq "$(blaxel_live)" 0 "rm deleted every sandbox at the service"
ls "$T/me"/*.trace >/dev/null 2>&1 && ok "the runs wrote traces" || not_ok "the runs wrote traces"
leaks=$(grep -rlF -- "$BL_API_KEY" "$T/me" "$T"/*.json "$T"/*.err 2>/dev/null)
expect_eq "$leaks" "" "the API key is in no state, record, snapshot, trace or log file"
done_testing
