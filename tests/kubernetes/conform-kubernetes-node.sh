#!/usr/bin/env bash
# The provider conformance suite (CONFORM names the program) with the kubernetes provider in its
# sbx-node mode (node=sbx-node): each sandbox is a pod running the sbx-node daemon of this build,
# reached through a port-forward of the API server with mutual TLS (certificates made here with
# `sbx node`). On the fake API server the pod is a host pod (SBX_TEST_KUBE_HOST_IMAGE: the
# daemon runs on this machine in namespaces the fake makes, k8sfake/hostpods.py); on a real
# cluster (SBX_TEST_KUBE_REAL=1) SBX_TEST_KUBE_NODE_IMAGE names an image scripts/node-image made,
# else the test is skipped saying why. The mode forwards no ports and has no stop/start: those
# cases are left out (SBX_CONFORM_CASES), as are the traits' own skips.
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/../integration/sandbox-lib.sh"
[ "$(id -u)" = 0 ] || skip_all "the sbx-node daemon's sandboxes need root"
. "$(dirname "$0")/kube-lib.sh"
BUILD=$(dirname "${SBX_SUPERVISOR:?}")
if [ -n "$FAKE_DIR" ]; then
    NODE_IMG=${SBX_TEST_KUBE_HOST_IMAGE:-}
    PROGRAM=$BUILD/sbx-node
    [ -n "$NODE_IMG" ] || skip_all "the fake names no host image (SBX_TEST_KUBE_HOST_IMAGE; an older fake.sh?)"
else
    NODE_IMG=${SBX_TEST_KUBE_NODE_IMAGE:-}
    PROGRAM=/usr/libexec/sbx/sbx-node
    [ -n "$NODE_IMG" ] || skip_all "no sbx-node image for the real cluster (SBX_TEST_KUBE_NODE_IMAGE, made by scripts/node-image)"
fi
(cd "$T" && "$SBX" node ca init ca && "$SBX" node cert issue pod --ca ca --node --host 127.0.0.1 &&
    "$SBX" node cert issue harness --ca ca --harness) >"$T/certs.out" 2>&1 || {
    cat "$T/certs.out"; not_ok "the certificates"; done_testing; exit 1; }
opts=$(python3 -c 'import json, sys; a = sys.argv[1:]; print(json.dumps({"kubeconfig": a[0], "context": a[1], "namespace": a[2], "image": a[3], "node": "sbx-node", "node_program": a[4], "node_ca": a[5] + "/ca/ca.pem", "node_cert": a[5] + "/harness.pem", "node_key": a[5] + "/harness.key", "node_tls_cert": a[5] + "/pod.pem", "node_tls_key": a[5] + "/pod.key", "ready_timeout": 120}))' \
    "$KCFG" "$KCTX" "$NS" "$NODE_IMG" "$PROGRAM" "$T")
SBX_CONFORM_CASES=exit_codes,streams,stdin,timeout,cancel,pty,files,escapes,state_resume_attach,snapshot,remove_leaves_nothing \
    SBX_CONFORM_PROVIDER=kubernetes SBX_CONFORM_PROFILE=kubernetes-sbx-node SBX_CONFORM_OPTIONS=$opts "${CONFORM:?}"
rc=$?
if [ $rc != 0 ] && [ -n "$FAKE_DIR" ]; then
    echo "# the fake's log (last lines):"
    tail -n 30 "$FAKE_DIR/fake.log" | sed 's/^/#   /'
fi
exit $rc
