#!/usr/bin/env bash
# Daytona's own npm SDK against the fake Daytona service (fake-daytona.py), whose sandboxes are
# real sbx sandboxes: create, process/execute, a session command whose logs stream over the
# WebSocket (stdout and stderr apart), input, files (bulk upload and download, folders, details,
# list, permissions, delete), a signed preview URL, stop/start keeping the disk, a JWT client,
# list by label, and the service's errors (wrong key, unknown snapshot, 429). Then nothing is left.
. "$(dirname "$0")/../../integration/lib.sh"
. "$(dirname "$0")/lib.sh"

fake=$T/fake
cleanup() {
    "$DAYTONA_HERE/fake.sh" stop "$fake" >/dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT

daytona_sdk
daytona_probe

mkdir "$fake"
"$DAYTONA_HERE/fake.sh" start "$fake" || { not_ok "the fake starts"; done_testing; exit; }
set -a
. "$fake/env"
set +a
node "$DAYTONA_HERE/sdk-test.mjs" >"$T/results" 2>"$T/node.err"
node_rc=$?
daytona_tap "$T/results"
expect_eq "$node_rc" 0 "the SDK script exits 0"
[ "$node_rc" = 0 ] || diag "$(tail -20 "$T/node.err")"
[ "$daytona_results" -ge 30 ] && ok "the SDK script ran all its checks ($daytona_results)" ||
    { not_ok "the SDK script ran all its checks"; diag "only $daytona_results"; }
if grep -q Traceback "$FAKE_DAYTONA_LOG"; then
    not_ok "the fake logged no exception"; diag "$(grep -B3 -A25 Traceback "$FAKE_DAYTONA_LOG" | head -80)"
else ok "the fake logged no exception"; fi

fakestate() { env XDG_RUNTIME_DIR="$FAKE_DAYTONA_STATE/run" SBX_WORKSPACES="$FAKE_DAYTONA_STATE/ws" \
    SBX_STOPPED="$FAKE_DAYTONA_STATE/stopped" SBX_SNAPSHOTS="$FAKE_DAYTONA_STATE/snapshots" "$SBX" "$@"; }
left=$(fakestate sandbox ps --all --json | tr -d ' \n')
expect_eq "$left" "[]" "the sandbox the SDK deleted is gone from sbx"
"$DAYTONA_HERE/fake.sh" stop "$fake"
kill -0 "$FAKE_DAYTONA_PID" 2>/dev/null && not_ok "the fake has stopped" || ok "the fake has stopped"
[ -e "$FAKE_DAYTONA_STATE" ] && not_ok "its state directory is gone" || ok "its state directory is gone"
no_process_with_env "XDG_RUNTIME_DIR=$FAKE_DAYTONA_STATE/run" "no process of the fake's is left"
done_testing
