#!/usr/bin/env bash
# sbx's cloudflare provider against a real Sandbox Bridge worker (deployed from
# cloudflare/sandbox-sdk's bridge). It runs only when CLOUDFLARE_SANDBOX_WORKER_URL_REAL names
# the worker (and CLOUDFLARE_SANDBOX_API_KEY_REAL holds its key, when it has one), never the
# fake's variables, which the other tests set; it says it was skipped otherwise: create, a
# command with its exit status, a file written and read back, a snapshot restored locally and
# a local one restored there, remove.
. "$(dirname "$0")/../../integration/lib.sh"
. "$(dirname "$0")/lib.sh"

if [ -z "${CLOUDFLARE_SANDBOX_WORKER_URL_REAL:-}" ]; then
    # Under meson's TAP protocol a plan of 0 with SKIP and status 0 is a skipped test.
    echo "1..0 # SKIP CLOUDFLARE_SANDBOX_WORKER_URL_REAL is not set (a deployed Sandbox Bridge worker)"
    exit 0
fi
export CLOUDFLARE_SANDBOX_WORKER_URL=$CLOUDFLARE_SANDBOX_WORKER_URL_REAL
if [ -n "${CLOUDFLARE_SANDBOX_API_KEY_REAL:-}" ]; then
    export CLOUDFLARE_SANDBOX_API_KEY=$CLOUDFLARE_SANDBOX_API_KEY_REAL
else
    unset CLOUDFLARE_SANDBOX_API_KEY
fi
mkdir -m 0700 "$T/me" "$T/me/run"
export XDG_RUNTIME_DIR="$T/me/run" SBX_WORKSPACES="$T/me/ws" SBX_STOPPED="$T/me/stopped" \
    SBX_SNAPSHOTS="$T/me/snapshots" XDG_STATE_HOME="$T/me/state" SBX_RECORDS="$T/me/records"
ids=""
cleanup() {
    for id in $ids; do "$SBX" sandbox rm "$id" >/dev/null 2>&1; done
    rm -rf "$T"
}
trap cleanup EXIT

run "$SBX" sandbox create --provider cloudflare
expect_rc 0 "a sandbox behind the worker"
id=$(tail -1 "$T/out")
ids="$id"
run "$SBX" sandbox exec "$id" -- sh -c 'pwd; exit 3'
expect_rc 3 "a command's exit status"
expect_eq "$(cat "$T/out")" "/workspace" "runs in /workspace"
printf 'over the wire\n' >"$T/f.txt"
run "$SBX" sandbox cp "$T/f.txt" "$id:f.txt"
expect_rc 0 "a file goes in"
run "$SBX" sandbox exec "$id" -- cat f.txt
expect_eq "$(cat "$T/out")" "over the wire" "and is there"
run "$SBX" sandbox snapshot "$id"
expect_rc 0 "a snapshot (persist)"
ref=$(tail -1 "$T/out")
run "$SBX" sandbox create --snapshot "$ref"
expect_rc 0 "restores locally"
lid=$(tail -1 "$T/out")
ids="$ids $lid"
run "$SBX" sandbox exec "$lid" -- cat f.txt
expect_eq "$(cat "$T/out")" "over the wire" "with the file"
"$SBX" sandbox exec "$lid" -- sh -c 'echo from local > local.txt'
run "$SBX" sandbox snapshot "$lid"
ref2=$(tail -1 "$T/out")
run "$SBX" sandbox create --provider cloudflare --snapshot "$ref2"
expect_rc 0 "a local snapshot restores there (hydrate)"
cid=$(tail -1 "$T/out")
ids="$ids $cid"
run "$SBX" sandbox exec "$cid" -- cat local.txt
expect_eq "$(cat "$T/out")" "from local" "with its file"
run "$SBX" sandbox rm "$id"
expect_rc 0 "rm deletes it at the worker"
leaks=""
[ -z "${CLOUDFLARE_SANDBOX_API_KEY:-}" ] || leaks=$(grep -rlF -- "$CLOUDFLARE_SANDBOX_API_KEY" "$T/me" 2>/dev/null)
expect_eq "$leaks" "" "the key is in nothing sbx wrote"
done_testing
