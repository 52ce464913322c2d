#!/usr/bin/env bash
# E2B's own npm SDK against the fake E2B service (fake-e2b.py), whose sandboxes are real sbx
# sandboxes: create, commands (streamed output, exit status, stdin, kill, connect), a PTY, files,
# watch, signed URLs, timeout and expiry, list, metrics, pause/resume, snapshots, and the
# service's errors (wrong key, unknown template, 429 retried, quota). Then: no field the SDK
# sent was unknown to the fake, and nothing is left (sandboxes, processes, files).
. "$(dirname "$0")/../../integration/lib.sh"
. "$(dirname "$0")/lib.sh"

fake=$T/fake
cleanup() {
    "$E2B_HERE/fake.sh" stop "$fake" >/dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT

e2b_sdk

# Can sbx make a sandbox here (with the E2B layout the fake uses)?
mkdir -m 0700 "$T/probe" "$T/probe/run"
printf 'version: 1\nroot: /home/user\nusers: [user]\n' >"$T/probe/m.yaml"
probe() { env XDG_RUNTIME_DIR="$T/probe/run" SBX_WORKSPACES="$T/probe/ws" SBX_STOPPED="$T/probe/stopped" \
    SBX_SNAPSHOTS="$T/probe/snap" "$SBX" "$@"; }
if ! id=$(probe sandbox create --manifest "$T/probe/m.yaml" 2>"$T/probe/err"); then
    skip_all "sbx cannot create sandboxes here: $(tail -1 "$T/probe/err")"
fi
probe sandbox rm "$id" >/dev/null 2>&1

mkdir "$fake"
"$E2B_HERE/fake.sh" start "$fake" || { not_ok "the fake starts"; done_testing; exit; }
set -a
. "$fake/env"
set +a
node "$E2B_HERE/sdk-test.mjs" >"$T/results" 2>"$T/node.err"
node_rc=$?
e2b_tap "$T/results"
expect_eq "$node_rc" 0 "the SDK script exits 0"
[ "$node_rc" = 0 ] || diag "$(tail -20 "$T/node.err")"
[ "$e2b_results" -ge 60 ] && ok "the SDK script ran all its checks ($e2b_results)" ||
    { not_ok "the SDK script ran all its checks"; diag "only $e2b_results"; }

if [ -s "$FAKE_E2B_STATE/unknown-fields.log" ]; then
    not_ok "every field the SDK sent is in the fake's tables"; diag "$(sort -u "$FAKE_E2B_STATE/unknown-fields.log")"
else ok "every field the SDK sent is in the fake's tables"; fi
if grep -q Traceback "$FAKE_E2B_LOG"; then
    not_ok "the fake logged no exception"; diag "$(grep -B3 -A25 Traceback "$FAKE_E2B_LOG" | head -80)"
else ok "the fake logged no exception"; fi

fakestate() { env XDG_RUNTIME_DIR="$FAKE_E2B_STATE/run" SBX_WORKSPACES="$FAKE_E2B_STATE/ws" \
    SBX_STOPPED="$FAKE_E2B_STATE/stopped" SBX_SNAPSHOTS="$FAKE_E2B_STATE/snapshots" "$SBX" "$@"; }
left=$(fakestate sandbox ps --all --json | tr -d ' \n')
expect_eq "$left" "[]" "every sandbox the SDK killed or let expire is gone from sbx"

# A sandbox still running a command when the fake stops: stop removes it too.
node "$E2B_HERE/sdk-test.mjs" --leave >"$T/results" 2>"$T/node.err"
e2b_tap "$T/results"
sbx_ids=$(sed -n 's/^fake-e2b: sandbox [a-z0-9]* is sbx sandbox \([0-9a-f]*\)$/\1/p' "$FAKE_E2B_LOG")
[ "$(echo "$sbx_ids" | wc -w)" -ge 4 ] && ok "the fake names the sbx sandboxes it made" ||
    { not_ok "the fake names the sbx sandboxes it made"; diag "$sbx_ids"; }
"$E2B_HERE/fake.sh" stop "$fake"
kill -0 "$FAKE_E2B_PID" 2>/dev/null && not_ok "the fake has stopped" || ok "the fake has stopped"
[ -e "$FAKE_E2B_STATE" ] && not_ok "its state directory is gone" || ok "its state directory is gone"
no_process_with_env "XDG_RUNTIME_DIR=$FAKE_E2B_STATE/run" "no process of the fake's is left"
sups=""
for id in $sbx_ids; do sups="$sups$(pgrep -f -- "__supervise $id" | tr '\n' ' ')"; done
expect_eq "$sups" "" "no supervisor of the fake's sandboxes is left"
done_testing
