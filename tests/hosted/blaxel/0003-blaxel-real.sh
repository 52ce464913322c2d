#!/usr/bin/env bash
# Blaxel's npm client against the real Blaxel service, when BL_API_KEY_REAL and
# BL_WORKSPACE_REAL are set (and BL_REGION_REAL, default us-pdx-1): sdk-test.mjs without the
# fake's knobs and previews, so that what the fake answers is checked against what Blaxel
# answers (and whether its API takes a plain Authorization: Bearer header). It makes one
# sandbox and deletes it; then sbx's blaxel provider makes one, runs a command, moves a file,
# takes a snapshot and removes it. Skipped, saying so, otherwise: no test sends traffic off
# this machine unless asked to with a real key.
. "$(dirname "$0")/../../integration/lib.sh"
. "$(dirname "$0")/lib.sh"

cleanup() { rm -rf "$T"; }
trap cleanup EXIT

[ -n "${BL_API_KEY_REAL:-}" ] && [ -n "${BL_WORKSPACE_REAL:-}" ] ||
    skip_all "BL_API_KEY_REAL and BL_WORKSPACE_REAL are not set (the real Blaxel service is used only with a real key)"
blaxel_sdk

(cd "$T" && HOME=$T env -u FAKE_BLAXEL_URL -u BL_API_URL -u BL_RUN_URL BL_API_KEY="$BL_API_KEY_REAL" \
    BL_WORKSPACE="$BL_WORKSPACE_REAL" BL_REGION="${BL_REGION_REAL:-us-pdx-1}" DO_NOT_TRACK=1 \
    node "$BLAXEL_HERE/sdk-test.mjs") >"$T/results" 2>"$T/node.err"
node_rc=$?
blaxel_tap "$T/results"
expect_eq "$node_rc" 0 "the SDK script exits 0 against the real service"
[ "$node_rc" = 0 ] || diag "$(tail -20 "$T/node.err")"

# Then sbx's blaxel provider: create, a command, a file in and out, a snapshot restored on
# local, rm (the sandbox is deleted even when a check fails: the trap).
mkdir -m 0700 "$T/me" "$T/me/run"
export XDG_RUNTIME_DIR="$T/me/run" SBX_WORKSPACES="$T/me/ws" SBX_STOPPED="$T/me/stopped" \
    SBX_SNAPSHOTS="$T/me/snapshots" XDG_STATE_HOME="$T/me/state" SBX_RECORDS="$T/me/records"
export BL_API_KEY="$BL_API_KEY_REAL" BL_WORKSPACE="$BL_WORKSPACE_REAL" BL_REGION="${BL_REGION_REAL:-us-pdx-1}"
unset BL_API_URL BL_RUN_URL
id=
cleanup() {
    [ -z "$id" ] || "$SBX" sandbox rm "$id" >/dev/null 2>&1
    for l in $("$SBX" sandbox ps --all -q 2>/dev/null); do "$SBX" sandbox rm "$l" >/dev/null 2>&1; done
    rm -rf "$T"
}
run "$SBX" sandbox create --provider blaxel
expect_rc 0 "sbx makes a sandbox at Blaxel"
[ "$rc" = 0 ] || diag "$(tail -5 "$T/err")"
id=$(tail -1 "$T/out")
run "$SBX" sandbox exec "$id" -- sh -c 'echo hello from blaxel; echo err >&2; exit 3'
expect_eq "$rc|$(cat "$T/out")|$(cat "$T/err")" "3|hello from blaxel|err" "a command's output, stderr and status"
printf 'real file\n' >"$T/f.txt"
run "$SBX" sandbox cp "$T/f.txt" "$id:f.txt"
run "$SBX" sandbox cp "$id:f.txt" "$T/g.txt"
blaxel_same "$T/f.txt" "$T/g.txt" "a file in and out"
run "$SBX" sandbox snapshot "$id"
expect_rc 0 "a snapshot of it"
ref=$(tail -1 "$T/out")
run "$SBX" sandbox create --snapshot "$ref"
if [ "$rc" = 0 ]; then
    run "$SBX" sandbox exec "$(tail -1 "$T/out")" -- cat f.txt
    expect_eq "$(cat "$T/out")" "real file" "restores on local"
else
    ok "restores on local # SKIP sbx cannot make local sandboxes here"
fi
run "$SBX" sandbox rm "$id"
expect_rc 0 "rm deletes it"
id=
leaks=$(grep -rlF -- "$BL_API_KEY_REAL" "$T/me" 2>/dev/null)
expect_eq "$leaks" "" "the key is in no file sbx wrote"
done_testing
