#!/usr/bin/env bash
# The provider conformance suite (tests/conformance/test-provider.c) with the kubernetes
# provider, against the fake API server (or, with SBX_TEST_KUBE_REAL=1, the real cluster of
# SBX_TEST_KUBECONFIG), in a namespace of its own; WORKLOAD=pod runs it on bare pods (no
# agent-sandbox objects). CONFORM names the test program.
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/../integration/sandbox-lib.sh"
. "$(dirname "$0")/kube-lib.sh"
opts=$(python3 -c 'import json, sys; print(json.dumps({"kubeconfig": sys.argv[1], "context": sys.argv[2], "namespace": sys.argv[3], "image": sys.argv[4], "workload": sys.argv[5], "ready_timeout": 120}))' \
    "$KCFG" "$KCTX" "$NS" "$IMG" "${WORKLOAD:-auto}")
SBX_CONFORM_PROVIDER=kubernetes SBX_CONFORM_OPTIONS=$opts SBX_TEST_DOCKER_REQUIRED=1 "${CONFORM:?}"
