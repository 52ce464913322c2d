#!/usr/bin/env bash
# sbx's cloudflare provider against the fake Sandbox Bridge, through the command line: the
# coding example gives what it gives locally; a snapshot taken on cloudflare restores on local
# and one taken on local restores on cloudflare; files in and out; a session state resumes in a
# new sbx process, and a state whose container went away is rebuilt from its snapshot; a wrong
# key, a missing key, 429s with Retry-After (waited out, then given up), the pool's 503 and a
# container gone each give their clear error. Last: the key appears in no state, record,
# snapshot, trace or log file the test's sbx wrote, nor in the fake's log.
. "$(dirname "$0")/../../integration/lib.sh"
. "$(dirname "$0")/lib.sh"

fake=$T/fake
cleanup() {
    "$CF_HERE/fake.sh" stop "$fake" >/dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT
cf_fake_start "$fake"

# The test's own sbx state, apart from the fake's.
mkdir -m 0700 "$T/me" "$T/me/run"
export XDG_RUNTIME_DIR="$T/me/run" SBX_WORKSPACES="$T/me/ws" SBX_STOPPED="$T/me/stopped" \
    SBX_SNAPSHOTS="$T/me/snapshots" XDG_STATE_HOME="$T/me/state" SBX_RECORDS="$T/me/records"
: >"$T/ids"
same() {
    if cmp -s "$1" "$2"; then ok "$3"; else
        not_ok "$3"; diag "$(diff "$1" "$2" 2>&1 | head -20)"
    fi
}

. "$SBX_SRCDIR/tests/integration/coding-lib.sh"
RUN_TRACE=$T/me

run_example local
expect_rc 0 "the coding example runs locally"
run_example cf --provider cloudflare
expect_rc 0 "and with --provider cloudflare"
cf_id=$(cat "$T/cf.id")
[ -n "$cf_id" ] && [ "$(cf_stat containers)" -ge 1 ] && ok "the cloudflare run kept a sandbox behind the worker" ||
    not_ok "the cloudflare run kept a sandbox behind the worker ($cf_id)"
same_as_local cf cloudflare
run "$SBX" sandbox exec "$cf_id" -- pwd
expect_eq "$(cat "$T/out")" "/workspace" "the workspace is the bridge's /workspace"

# Snapshots both ways.
run "$SBX" sandbox snapshot "$cf_id"
expect_rc 0 "a snapshot of the cloudflare sandbox (persist)"
ref=$(tail -1 "$T/out")
run "$SBX" sandbox create --snapshot "$ref"
expect_rc 0 "restores on local"
lid=$(tail -1 "$T/out")
echo "$lid" >>"$T/ids"
run "$SBX" sandbox exec "$lid" -- cat stats.py
same "$T/out" "$T/cf.stats" "with the cloudflare sandbox's stats.py"
"$SBX" sandbox exec "$lid" -- sh -c 'mkdir -p sub && printf "from local\n" > sub/note.txt && chmod 600 sub/note.txt && ln -s sub/note.txt link'
run "$SBX" sandbox snapshot "$lid"
expect_rc 0 "a snapshot of the local sandbox"
ref2=$(tail -1 "$T/out")
run "$SBX" sandbox create --provider cloudflare --snapshot "$ref2"
expect_rc 0 "restores on cloudflare (hydrate)"
cid2=$(tail -1 "$T/out")
echo "$cid2" >>"$T/ids"
run "$SBX" sandbox exec "$cid2" -- sh -c 'cat link; stat -c "%a" sub/note.txt; readlink link; cat stats.py | wc -l'
expect_eq "$(cat "$T/out")" "from local
600
sub/note.txt
$(wc -l <"$T/cf.stats")" "with its files, modes and links"

# Files in and out by the cloudflare id.
printf 'in and out\n' >"$T/in.txt"
run "$SBX" sandbox cp "$T/in.txt" "$cid2:sub/in.txt"
expect_rc 0 "sbx sandbox cp into the cloudflare sandbox"
run "$SBX" sandbox cp "$cid2:sub/in.txt" "$T/back.txt"
same "$T/in.txt" "$T/back.txt" "and back out, the same bytes"

# A port through the bridge's tunnel (the fake's: a loopback relay).
run "$SBX" sandbox exec --keep-background "$cid2" -- sh -c 'mkdir -p www && echo served > www/p.txt && (python3 -m http.server 8765 --bind 127.0.0.1 --directory www >/dev/null 2>&1 &); i=0; while [ $i -lt 100 ]; do python3 -c "import socket; socket.create_connection((\"127.0.0.1\", 8765))" 2>/dev/null && exit 0; i=$((i+1)); sleep 0.1; done; exit 1'
expect_rc 0 "a server listens in the cloudflare sandbox"
run "$SBX" sandbox port "$cid2" 8765
expect_rc 0 "sbx sandbox port asks the bridge for a tunnel"
url=$(tail -1 "$T/out")
expect_eq "$(python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1] + "/p.txt").read().decode(), end="")' "$url")" \
    "served" "and the tunnel's URL reaches the port"
run "$SBX" sandbox port "$cid2" 3000
expect_in "$T/err" "tunnels ports 1024-65535 but 3000" "a port the bridge does not tunnel is named"
"$SBX" sandbox exec "$cid2" -- rm -rf www

# A state resumes in a new sbx process; a state whose container went away is rebuilt from its
# snapshot (a new sandbox), one without a snapshot says it is gone.
run "$SBX" sandbox state "$cid2"
expect_rc 0 "the cloudflare sandbox's session state"
cp "$T/out" "$T/state.json"
expect_eq "$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print(s["provider"], s["id"], s["root"], bool(s["snapshot"]))' "$T/state.json")" \
    "cloudflare $cid2 /workspace True" "names the provider, the sandbox, its root and a snapshot"
run "$SBX" sandbox resume "$T/state.json"
expect_rc 0 "sbx sandbox resume of the state (a new process)"
expect_eq "$(tail -1 "$T/out")" "$cid2" "is the same sandbox"
cf_knob "{\"expire\": \"$cid2\"}"
run "$SBX" sandbox exec "$cid2" -- cat sub/note.txt
expect_rc 125 "a sandbox whose container went away takes no command"
expect_in "$T/err" "no sandbox '$cid2' (its container went away" "saying it is gone"
run "$SBX" sandbox resume "$T/state.json"
expect_rc 0 "its state resumes from its snapshot"
rebuilt=$(tail -1 "$T/out")
echo "$rebuilt" >>"$T/ids"
[ -n "$rebuilt" ] && [ "$rebuilt" != "$cid2" ] && ok "as a new sandbox" || not_ok "as a new sandbox ($rebuilt)"
run "$SBX" sandbox exec "$rebuilt" -- cat sub/note.txt
expect_eq "$(cat "$T/out")" "from local" "with the snapshot's workspace"
python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); s["snapshot"]=None; json.dump(s, open(sys.argv[2], "w"))' "$T/state.json" "$T/nosnap.json"
run "$SBX" sandbox resume "$T/nosnap.json"
expect_rc 1 "a gone sandbox's state without a snapshot does not resume"
expect_in "$T/err" "is gone (its container went away) and its state has no snapshot" "saying why"

# An argument the bridge's JSON cannot carry is refused, not sent changed.
run "$SBX" sandbox exec "$rebuilt" -- echo $'\xff\xfe'
expect_rc 125 "an argument that is not UTF-8 is refused"
expect_in "$T/err" "the Sandbox Bridge takes UTF-8 text only" "saying why"

# The worker's errors.
CLOUDFLARE_SANDBOX_API_KEY=cfsb_0000wrong run "$SBX" sandbox create --provider cloudflare
expect_rc 1 "a wrong key fails"
expect_in "$T/err" "refused the key from \$CLOUDFLARE_SANDBOX_API_KEY (HTTP 401)" "saying the key was refused and where it came from"
expect_not_in "$T/err" "cfsb_0000wrong" "without the key"
env -u CLOUDFLARE_SANDBOX_API_KEY "$SBX" sandbox create --provider cloudflare >"$T/out" 2>"$T/err"
expect_in "$T/err" "wants a key and none was given (\$CLOUDFLARE_SANDBOX_API_KEY is not set)" "a missing key is named"
env -u CLOUDFLARE_SANDBOX_WORKER_URL "$SBX" sandbox create --provider cloudflare >"$T/out" 2>"$T/err"
expect_in "$T/err" "no Sandbox Bridge worker: give the cloudflare provider's worker_url option" "a missing worker is named"
cf_knob '{"rate_limit_next": 2, "retry_after": 1}'
before=$(cf_stat rate_limited)
run "$SBX" sandbox exec "$rebuilt" -- echo through
expect_eq "$(cat "$T/out")" "through" "two 429s with Retry-After are waited out"
expect_eq "$(($(cf_stat rate_limited) - before))" 2 "(the worker did refuse twice)"
cf_knob '{"rate_limit_next": 10, "retry_after": 1}'
run "$SBX" sandbox exec "$rebuilt" -- echo through
expect_rc 125 "more 429s than the retries fail"
expect_in "$T/err" "is rate limiting (HTTP 429, retries exhausted)" "saying so"
cf_knob '{"rate_limit_next": 0, "capacity_next": 10}'
run "$SBX" sandbox create --provider cloudflare
expect_rc 1 "a pool with no free container fails a create"
expect_in "$T/err" "has no container free (HTTP 503, retries exhausted): instance limit reached" "with the pool's words"
cf_knob '{"capacity_next": 0}'

# Nothing left behind, and no key anywhere sbx wrote.
for id in $(cat "$T/ids"); do "$SBX" sandbox rm "$id" >/dev/null 2>&1; done
expect_eq "$(cf_stat containers)" 0 "rm removed every container behind the worker"
ls "$T/me"/*.trace >/dev/null 2>&1 && ok "the runs wrote traces" || not_ok "the runs wrote traces"
leaks=$(grep -rlF -- "$CLOUDFLARE_SANDBOX_API_KEY" "$T/me" "$T"/*.json "$T"/*.err "$T"/*.json "$FAKE_CLOUDFLARE_LOG" 2>/dev/null)
expect_eq "$leaks" "" "the key is in no state, record, snapshot, trace or log file"
done_testing
