#!/usr/bin/env bash
# sbx's runloop provider against Runloop's real service. It runs only when RUNLOOP_API_KEY_REAL
# holds a key for it (never the fake's RUNLOOP_API_KEY, which the other tests set), and says it
# was skipped otherwise: create, a command with its exit status, a file written and read back,
# stop (suspend) and start (resume), a snapshot restored locally, remove. RUNLOOP_BASE_URL may
# point elsewhere (default https://api.runloop.ai).
. "$(dirname "$0")/../../integration/lib.sh"
. "$(dirname "$0")/lib.sh"

if [ -z "${RUNLOOP_API_KEY_REAL:-}" ]; then
    # Under meson's TAP protocol a plan of 0 with SKIP and status 0 is a skipped test.
    echo "1..0 # SKIP RUNLOOP_API_KEY_REAL is not set (a key for Runloop's real service)"
    exit 0
fi
export RUNLOOP_API_KEY=$RUNLOOP_API_KEY_REAL
mkdir -m 0700 "$T/me" "$T/me/run"
export XDG_RUNTIME_DIR="$T/me/run" SBX_WORKSPACES="$T/me/ws" SBX_STOPPED="$T/me/stopped" \
    SBX_SNAPSHOTS="$T/me/snapshots" XDG_STATE_HOME="$T/me/state" SBX_RECORDS="$T/me/records"
ids=""
cleanup() {
    for id in $ids; do "$SBX" sandbox rm "$id" >/dev/null 2>&1; done
    rm -rf "$T"
}
trap cleanup EXIT

run "$SBX" sandbox create --provider runloop
expect_rc 0 "a devbox at Runloop"
id=$(tail -1 "$T/out")
ids="$id"
run "$SBX" sandbox exec "$id" -- sh -c 'echo "$(id -un) $(pwd)"; exit 3'
expect_rc 3 "a command's exit status"
expect_eq "$(cat "$T/out")" "user /home/user" "runs as the devbox's user in its home"
printf 'over the wire\n' >"$T/f.txt"
run "$SBX" sandbox cp "$T/f.txt" "$id:f.txt"
expect_rc 0 "a file goes in"
run "$SBX" sandbox exec "$id" -- cat f.txt
expect_eq "$(cat "$T/out")" "over the wire" "and is there"
run "$SBX" sandbox stop "$id"
expect_rc 0 "stop suspends it"
run "$SBX" sandbox start "$id"
expect_rc 0 "start resumes it"
run "$SBX" sandbox snapshot "$id"
expect_rc 0 "a snapshot"
ref=$(tail -1 "$T/out")
run "$SBX" sandbox create --snapshot "$ref"
expect_rc 0 "restores locally"
lid=$(tail -1 "$T/out")
ids="$ids $lid"
run "$SBX" sandbox exec "$lid" -- cat f.txt
expect_eq "$(cat "$T/out")" "over the wire" "with the file"
run "$SBX" sandbox rm "$id"
expect_rc 0 "rm shuts it down at Runloop"
leaks=$(grep -rlF -- "$RUNLOOP_API_KEY" "$T/me" 2>/dev/null)
expect_eq "$leaks" "" "the key is in nothing sbx wrote"
done_testing
