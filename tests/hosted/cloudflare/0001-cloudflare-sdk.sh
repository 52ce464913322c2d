#!/usr/bin/env bash
# The fake Sandbox Bridge (fake-cloudflare.py) held to @cloudflare/sandbox: its bridge module
# (the worker's own routes, run in node) answers the requests that need no container as the fake
# does, and the fake, driven by the bridge's OpenAPI document, creates, streams a command's
# output, writes and reads a file, persists and hydrates, deletes (sdk-test.mjs). Then: the
# fake logged no exception, and nothing of it is left.
. "$(dirname "$0")/../../integration/lib.sh"
. "$(dirname "$0")/lib.sh"

fake=$T/fake
cleanup() {
    "$CF_HERE/fake.sh" stop "$fake" >/dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT

cf_sdk
cf_fake_start "$fake"
node --import "$CF_HERE/workers-stub.mjs" "$CF_HERE/sdk-test.mjs" >"$T/results" 2>"$T/node.err"
node_rc=$?
cf_tap "$T/results"
expect_eq "$node_rc" 0 "the client script exits 0"
[ "$node_rc" = 0 ] || diag "$(tail -20 "$T/node.err")"
[ "$cf_results" -ge 30 ] && ok "the client script ran all its checks ($cf_results)" ||
    { not_ok "the client script ran all its checks"; diag "only $cf_results"; }
if grep -q Traceback "$FAKE_CLOUDFLARE_LOG"; then
    not_ok "the fake logged no exception"; diag "$(grep -B3 -A25 Traceback "$FAKE_CLOUDFLARE_LOG" | head -80)"
else ok "the fake logged no exception"; fi
expect_eq "$(cf_stat containers)" 0 "every container the client deleted is gone"

sbx_ids=$(sed -n 's/^fake-cloudflare: sandbox [a-z2-7]* is sbx sandbox \([0-9a-f]*\)$/\1/p' "$FAKE_CLOUDFLARE_LOG")
"$CF_HERE/fake.sh" stop "$fake"
kill -0 "$FAKE_CLOUDFLARE_PID" 2>/dev/null && not_ok "the fake has stopped" || ok "the fake has stopped"
[ -e "$FAKE_CLOUDFLARE_STATE" ] && not_ok "its state directory is gone" || ok "its state directory is gone"
no_process_with_env "XDG_RUNTIME_DIR=$FAKE_CLOUDFLARE_STATE/run" "no process of the fake's is left"
sups=""
for id in $sbx_ids; do sups="$sups$(pgrep -f -- "__supervise $id" | tr '\n' ' ')"; done
expect_eq "$sups" "" "no supervisor of the fake's sandboxes is left"
done_testing
