#!/usr/bin/env bash
# sbx's vercel provider against Vercel's real service. It runs only when VERCEL_TOKEN_REAL
# holds a token for it (never the fake's VERCEL_TOKEN, which the other tests set), with
# VERCEL_TEAM_ID_REAL and VERCEL_PROJECT_ID_REAL, and says it was skipped otherwise: create, a
# command with its exit status, a file written and read back, stop and start, a snapshot
# restored locally, remove.
. "$(dirname "$0")/../../integration/lib.sh"
. "$(dirname "$0")/lib.sh"

if [ -z "${VERCEL_TOKEN_REAL:-}" ] || [ -z "${VERCEL_TEAM_ID_REAL:-}" ] ||
    [ -z "${VERCEL_PROJECT_ID_REAL:-}" ]; then
    # Under meson's TAP protocol a plan of 0 with SKIP and status 0 is a skipped test.
    echo "1..0 # SKIP VERCEL_TOKEN_REAL, VERCEL_TEAM_ID_REAL and VERCEL_PROJECT_ID_REAL are not all set (Vercel's real service)"
    exit 0
fi
export VERCEL_TOKEN=$VERCEL_TOKEN_REAL VERCEL_TEAM_ID=$VERCEL_TEAM_ID_REAL \
    VERCEL_PROJECT_ID=$VERCEL_PROJECT_ID_REAL
unset VERCEL_API_URL
mkdir -m 0700 "$T/me" "$T/me/run"
export XDG_RUNTIME_DIR="$T/me/run" SBX_WORKSPACES="$T/me/ws" SBX_STOPPED="$T/me/stopped" \
    SBX_SNAPSHOTS="$T/me/snapshots" XDG_STATE_HOME="$T/me/state" SBX_RECORDS="$T/me/records"
ids=""
cleanup() {
    for id in $ids; do "$SBX" sandbox rm "$id" >/dev/null 2>&1; done
    rm -rf "$T"
}
trap cleanup EXIT

run "$SBX" sandbox create --provider vercel -o timeout_ms=300000
expect_rc 0 "a sandbox at Vercel"
id=$(tail -1 "$T/out")
ids="$id"
run "$SBX" sandbox exec "$id" -- sh -c 'echo "$(id -un) $(pwd)"; exit 3'
expect_rc 3 "a command's exit status"
expect_eq "$(cat "$T/out")" "vercel-sandbox /vercel/sandbox" "runs as Vercel's user in its workspace"
printf 'over the wire\n' >"$T/f.txt"
run "$SBX" sandbox cp "$T/f.txt" "$id:f.txt"
expect_rc 0 "a file goes in"
run "$SBX" sandbox exec "$id" -- cat f.txt
expect_eq "$(cat "$T/out")" "over the wire" "and is there"
run "$SBX" sandbox stop "$id"
expect_rc 0 "stop stops its session"
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
expect_rc 0 "rm deletes it at Vercel"
leaks=$(grep -rlF -- "$VERCEL_TOKEN" "$T/me" 2>/dev/null)
expect_eq "$leaks" "" "the token is in nothing sbx wrote"
done_testing
