#!/usr/bin/env bash
# Blaxel's own npm client (@blaxel/core) against the fake Blaxel service (fake-blaxel.py), whose
# sandboxes are real sbx sandboxes: create, a command whose output streams, a background process
# (wait, logs, the logs stream), kill, stdin, files (text, binary, directories, listing,
# removal), get and list, and the service's errors (unknown sandbox, unknown image, 429, wrong
# key, a deleted sandbox). Then nothing is left.
. "$(dirname "$0")/../../integration/lib.sh"
. "$(dirname "$0")/lib.sh"

fake=$T/fake
cleanup() {
    "$BLAXEL_HERE/fake.sh" stop "$fake" >/dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT

blaxel_sdk
blaxel_probe

mkdir "$fake"
"$BLAXEL_HERE/fake.sh" start "$fake" || { not_ok "the fake starts"; done_testing; exit; }
set -a
. "$fake/env"
set +a
# The client reads ~/.blaxel/config.yaml and a .env in its working directory: neither is ours.
(cd "$T" && HOME=$T node "$BLAXEL_HERE/sdk-test.mjs") >"$T/results" 2>"$T/node.err"
node_rc=$?
blaxel_tap "$T/results"
expect_eq "$node_rc" 0 "the SDK script exits 0"
[ "$node_rc" = 0 ] || diag "$(tail -20 "$T/node.err")"
[ "$blaxel_results" -ge 37 ] && ok "the SDK script ran all its checks ($blaxel_results)" ||
    { not_ok "the SDK script ran all its checks"; diag "only $blaxel_results"; }
if grep -q Traceback "$FAKE_BLAXEL_LOG"; then
    not_ok "the fake logged no exception"; diag "$(grep -B3 -A25 Traceback "$FAKE_BLAXEL_LOG" | head -80)"
else ok "the fake logged no exception"; fi

fakestate() { env XDG_RUNTIME_DIR="$FAKE_BLAXEL_STATE/run" SBX_WORKSPACES="$FAKE_BLAXEL_STATE/ws" \
    SBX_STOPPED="$FAKE_BLAXEL_STATE/stopped" SBX_SNAPSHOTS="$FAKE_BLAXEL_STATE/snapshots" "$SBX" "$@"; }
left=$(fakestate sandbox ps --all --json | tr -d ' \n')
expect_eq "$left" "[]" "the sandbox the SDK deleted is gone from sbx"
"$BLAXEL_HERE/fake.sh" stop "$fake"
kill -0 "$FAKE_BLAXEL_PID" 2>/dev/null && not_ok "the fake has stopped" || ok "the fake has stopped"
[ -e "$FAKE_BLAXEL_STATE" ] && not_ok "its state directory is gone" || ok "its state directory is gone"
no_process_with_env "XDG_RUNTIME_DIR=$FAKE_BLAXEL_STATE/run" "no process of the fake's is left"
done_testing
