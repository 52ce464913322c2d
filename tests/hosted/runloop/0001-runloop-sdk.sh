#!/usr/bin/env bash
# Runloop's own npm client against the fake Runloop service (fake-runloop.py), whose devboxes
# are real sbx sandboxes: create, commands (streamed output over SSE, exit status, stdin, kill),
# files (contents and binary upload/download), a disk snapshot and a devbox from it,
# suspend/resume, tunnels, and the service's errors (wrong key, unknown blueprint, 429 retried).
# Then: no path the client asked for was unknown to the fake, and nothing is left.
. "$(dirname "$0")/../../integration/lib.sh"
. "$(dirname "$0")/lib.sh"

fake=$T/fake
cleanup() {
    "$RUNLOOP_HERE/fake.sh" stop "$fake" >/dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT

runloop_sdk
runloop_fake_start "$fake"
node "$RUNLOOP_HERE/sdk-test.mjs" >"$T/results" 2>"$T/node.err"
node_rc=$?
e2b_tap "$T/results"
expect_eq "$node_rc" 0 "the client script exits 0"
[ "$node_rc" = 0 ] || diag "$(tail -20 "$T/node.err")"
[ "$e2b_results" -ge 24 ] && ok "the client script ran all its checks ($e2b_results)" ||
    { not_ok "the client script ran all its checks"; diag "only $e2b_results"; }
if [ -s "$FAKE_RUNLOOP_STATE/unknown.log" ]; then
    not_ok "every path and field the client sent is one the fake knows"; diag "$(sort -u "$FAKE_RUNLOOP_STATE/unknown.log")"
else ok "every path and field the client sent is one the fake knows"; fi
if grep -q Traceback "$FAKE_RUNLOOP_LOG"; then
    not_ok "the fake logged no exception"; diag "$(grep -B3 -A25 Traceback "$FAKE_RUNLOOP_LOG" | head -80)"
else ok "the fake logged no exception"; fi

fakestate() { env XDG_RUNTIME_DIR="$FAKE_RUNLOOP_STATE/run" SBX_WORKSPACES="$FAKE_RUNLOOP_STATE/ws" \
    SBX_STOPPED="$FAKE_RUNLOOP_STATE/stopped" SBX_SNAPSHOTS="$FAKE_RUNLOOP_STATE/snapshots" "$SBX" "$@"; }
left=$(fakestate sandbox ps --all --json | tr -d ' \n')
expect_eq "$left" "[]" "every sandbox of a shut-down devbox is gone from sbx"
"$RUNLOOP_HERE/fake.sh" stop "$fake"
kill -0 "$FAKE_RUNLOOP_PID" 2>/dev/null && not_ok "the fake has stopped" || ok "the fake has stopped"
[ -e "$FAKE_RUNLOOP_STATE" ] && not_ok "its state directory is gone" || ok "its state directory is gone"
done_testing
