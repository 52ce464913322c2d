#!/usr/bin/env bash
# The coding example (examples/coding-task) in the kubernetes provider's sbx-node mode gives what
# it gives locally: the same patched stats.py, the same final test run (timings left out) and the
# same answer. The daemon is this build's sbx-node as a host pod of the fake API server
# (SBX_TEST_KUBE_HOST_IMAGE), reached through a port-forward with mutual TLS.
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/../integration/sandbox-lib.sh"
[ "$(id -u)" = 0 ] || skip_all "the sbx-node daemon's sandboxes need root"
. "$(dirname "$0")/kube-lib.sh"
[ -n "$FAKE_DIR" ] || skip_all "runs against the fake API server only"
HOSTIMG=${SBX_TEST_KUBE_HOST_IMAGE:-}
[ -n "$HOSTIMG" ] || skip_all "the fake names no host image (SBX_TEST_KUBE_HOST_IMAGE)"
BUILD=$(dirname "${SBX_SUPERVISOR:?}")
(cd "$T" && "$SBX" node ca init ca && "$SBX" node cert issue pod --ca ca --node --host 127.0.0.1 &&
    "$SBX" node cert issue harness --ca ca --harness) >"$T/certs.out" 2>&1 || {
    cat "$T/certs.out"; not_ok "the certificates"; done_testing; exit 1; }
NODE=(--node sbx-node --node-program "$BUILD/sbx-node" --node-ca "$T/ca/ca.pem" --node-cert "$T/harness.pem"
    --node-key "$T/harness.key" --node-tls-cert "$T/pod.pem" --node-tls-key "$T/pod.key")

. "$(dirname "$0")/../integration/coding-lib.sh"

run_example local
expect_rc 0 "the coding example runs locally"
local_id=$(cat "$T/local.id")
run_example node --provider kubernetes "${KOPTS[@]}" --image "$HOSTIMG" "${NODE[@]}"
expect_rc 0 "and with --provider kubernetes --node sbx-node"
if [ "$rc" != 0 ]; then diag "$(tail -5 "$T/node.err")"; fi
node_id=$(cat "$T/node.id")
[ -n "$node_id" ] && [ "$node_id" != "$local_id" ] && ok "each run kept its own sandbox" ||
    not_ok "each run kept its own sandbox ($local_id, $node_id)"
expect_eq "$(k get pods -l "sbx.io/id=$node_id,sbx.io/workload=node" -o name | wc -l)" 1 "the node run's sandbox is an sbx-node pod"
same_as_local node sbx-node
for id in $local_id $node_id; do "$SBX" sandbox rm "$id" >/dev/null 2>&1; done
expect_eq "$(k get pods,secrets -l sbx.io/id -o name | wc -l)" 0 "rm leaves nothing labelled by sbx"
done_testing
