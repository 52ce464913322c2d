#!/usr/bin/env bash
# The suite again against a real cluster: SBX_TEST_KUBECONFIG names its kubeconfig (kind or k3s
# with kubernetes-sigs/agent-sandbox v0.5.x installed, its controller running with extensions),
# SBX_TEST_KUBE_IMAGE an image the nodes can pull that has /bin/sh, tar, and python3 (the port
# and coding tests use it), SBX_TEST_KUBE_CONTEXT optionally a context of it. Without it, says
# that it was skipped and why. CONFORM names the conformance program.
here=$(cd "$(dirname "$0")" && pwd)
if [ -z "${SBX_TEST_KUBECONFIG:-}" ]; then
    echo "1..0 # SKIP SBX_TEST_KUBECONFIG is not set: the kubernetes suite ran against the fake API server only (set it to the kubeconfig of a kind or k3s cluster with agent-sandbox v0.5.x, and SBX_TEST_KUBE_IMAGE to an image with sh, tar and python3)"
    exit 0
fi
[ -n "${SBX_TEST_KUBE_IMAGE:-}" ] || { echo "1..0 # SKIP SBX_TEST_KUBE_IMAGE is not set (an image the cluster's nodes can pull, with sh, tar and python3)"; exit 0; }
export SBX_TEST_KUBE_REAL=1
n=0 failed=0
for t in conform-kubernetes.sh 0002-sbx-kubernetes.sh 0003-coding.sh; do
    n=$((n + 1))
    if bash "$here/$t" >"${TMPDIR:-/tmp}/sbx-real-$$-$t.log" 2>&1; then
        echo "ok $n - $t against the real cluster"
    else
        failed=$((failed + 1))
        echo "not ok $n - $t against the real cluster"
        grep '^not ok' "${TMPDIR:-/tmp}/sbx-real-$$-$t.log" | sed 's/^/#   /' | head -20
    fi
    rm -f "${TMPDIR:-/tmp}/sbx-real-$$-$t.log"
done
echo "1..$n"
[ "$failed" = 0 ]
