#!/usr/bin/env bash
# The kubernetes provider's sbx-node mode (node=sbx-node) through the sbx CLI, against the fake
# API server: each sandbox a pod whose command is this build's sbx-node (a host pod of the fake:
# SBX_TEST_KUBE_HOST_IMAGE), the daemon's certificate in a Secret the pod mounts, reached through
# a port-forward with mutual TLS. Create with a manifest, exec, cp, ps, the state (no token, no
# key), a resume by a new process, rm leaving no pod, Secret or process; and
# the configuration errors, each naming what is wrong, leaving nothing in the cluster.
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/../integration/sandbox-lib.sh"
[ "$(id -u)" = 0 ] || skip_all "the sbx-node daemon's sandboxes need root"
. "$(dirname "$0")/kube-lib.sh"
[ -n "$FAKE_DIR" ] || skip_all "runs against the fake API server only (conform-kubernetes-node covers a real cluster)"
HOSTIMG=${SBX_TEST_KUBE_HOST_IMAGE:-}
[ -n "$HOSTIMG" ] || skip_all "the fake names no host image (SBX_TEST_KUBE_HOST_IMAGE)"
BUILD=$(dirname "${SBX_SUPERVISOR:?}")
(cd "$T" && "$SBX" node ca init ca && "$SBX" node cert issue pod --ca ca --node --host 127.0.0.1 &&
    "$SBX" node cert issue elsewhere --ca ca --node --host 10.9.9.9 &&
    "$SBX" node cert issue harness --ca ca --harness) >"$T/certs.out" 2>&1 || {
    cat "$T/certs.out"; not_ok "the certificates"; done_testing; exit 1; }
HARN=(--node-ca "$T/ca/ca.pem" --node-cert "$T/harness.pem" --node-key "$T/harness.key")
NODE=(--node sbx-node --node-program "$BUILD/sbx-node" "${HARN[@]}")
TLS=(--node-tls-cert "$T/pod.pem" --node-tls-key "$T/pod.key")
objects() { k get pods,secrets -l sbx.io/workload=node -o name 2>/dev/null | wc -l; }
no_objects() { [ "$(objects)" = 0 ]; }
cat >"$T/m.yaml" <<'YAML'
version: 1
entries:
  hello.txt:
    type: file
    content: "hello from the manifest\n"
environment:
  GREETING: hi
YAML

# --- configuration errors ---------------------------------------------------------------------
run "$SBX" sandbox create --provider kubernetes "${KOPTS[@]}" --image "$HOSTIMG" --node sbx-node "${TLS[@]}"
expect_in "$T/err" "node=sbx-node needs --node-ca, --node-cert and --node-key" "without the harness's certificates: said so"
run "$SBX" sandbox create --provider kubernetes "${KOPTS[@]}" --image "$HOSTIMG" "${NODE[@]}"
expect_in "$T/err" "needs --node-tls-cert and --node-tls-key to create a sandbox" "without the daemon's certificate: said so"
run "$SBX" sandbox create --provider kubernetes "${KOPTS[@]}" --image "$HOSTIMG" --node https://127.0.0.1:7443 "${HARN[@]}" "${TLS[@]}"
expect_in "$T/err" "the kubernetes provider's only node mode is sbx-node" "a node mode it does not know: said so"
run "$SBX" sandbox create --provider kubernetes "${KOPTS[@]}" "${NODE[@]}" "${TLS[@]}"
expect_in "$T/err" "node=sbx-node needs --image to create a sandbox" "without an image: said so"
run "$SBX" sandbox create --provider kubernetes "${KOPTS[@]}" --image "$HOSTIMG" "${NODE[@]}" "${TLS[@]}" --node-program sbx-node
expect_in "$T/err" "--node-program must be an absolute path in the image, not 'sbx-node'" "a relative program: said so"
run "$SBX" sandbox create --provider kubernetes "${KOPTS[@]}" --image "$HOSTIMG" "${NODE[@]}" \
    --node-tls-cert "$T/m.yaml" --node-tls-key "$T/pod.key"
expect_in "$T/err" "the node's certificate '$T/m.yaml' is not PEM" "a certificate that is not PEM: said so"
run "$SBX" sandbox create --provider kubernetes "${KOPTS[@]}" --image "$HOSTIMG" "${NODE[@]}" \
    --node-tls-cert "$T/elsewhere.pem" --node-tls-key "$T/elsewhere.key" --ready-timeout 60
expect_rc 1 "a daemon certificate not naming 127.0.0.1 fails the create"
expect_in "$T/err" "the sbx-node daemon of pod 'sbx-" "naming the pod"
expect_in "$T/err" "certificate" "and the certificate"
run "$SBX" sandbox create --provider kubernetes "${KOPTS[@]}" --image "$HOSTIMG" "${NODE[@]}" "${TLS[@]}" \
    --node-program /nonexistent/sbx-node --ready-timeout 60
expect_rc 1 "a program the image lacks fails the create"
expect_in "$T/err" "of the sbx-node daemon" "naming the daemon's pod"
expect_not_in "$T/err" "did not answer" "at once, not after the ready timeout"
WAIT_S=30 wait_until no_objects
expect_eq "$(objects)" 0 "no pod or Secret is left by the failed creates"

# --- a sandbox -----------------------------------------------------------------------------------
# with the documented Role only (the fake's context fake-sbx-role)
ROLE=(--kubeconfig "$KCFG" --context fake-sbx-role --namespace "$NS")
run "$SBX" sandbox create --provider kubernetes "${ROLE[@]}" --image "$HOSTIMG" "${NODE[@]}" "${TLS[@]}" --manifest "$T/m.yaml"
expect_rc 0 "create --node sbx-node --manifest M, with the documented Role only"
diag "$(cat "$T/err")"
id=$(head -n1 "$T/out")
expect_eq "$(k get pod "sbx-$id" -o jsonpath='{.metadata.labels.sbx\.io/workload}')" "node" "its pod is labelled as the mode's"
expect_eq "$(k get secret "sbx-$id-tls" -o jsonpath='{.data.tls\.crt}' | base64 -d | head -n1)" "-----BEGIN CERTIFICATE-----" \
    "the daemon's certificate is in its Secret"
expect_eq "$(k get secret "sbx-$id-tls" -o json | python3 -c 'import json,sys; print(" ".join(sorted(json.load(sys.stdin)["data"])))')" \
    "ca.crt tls.crt tls.key" "the Secret holds the daemon's certificate, key and the CA, nothing of the harness"
run "$SBX" sandbox exec "$id" -- sh -c 'cat hello.txt; echo "$GREETING"; echo err >&2; exit 3'
expect_rc 3 "exec through the daemon passes the status"
expect_eq "$(cat "$T/out")/$(cat "$T/err")" "hello from the manifest
hi/err" "the manifest materialised, its environment set, stderr apart"
printf 'copied in\n' >"$T/in.txt"
run "$SBX" sandbox cp "$T/in.txt" "$id:in.txt"
expect_rc 0 "cp host -> sandbox"
run "$SBX" sandbox cp "$id:in.txt" "$T/back.txt"
expect_eq "$(cat "$T/back.txt" 2>/dev/null)" "copied in" "cp sandbox -> host, whole"
run "$SBX" sandbox ps
expect_in "$T/out" "$id" "ps lists it"
run "$SBX" sandbox state --no-snapshot "$id"
expect_rc 0 "its state"
cp "$T/out" "$T/state.json"
expect_eq "$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print(s["provider"], s["kind"], s["name"], s["options"]["node"], "node" in s)' "$T/state.json")" \
    "kubernetes Pod sbx-$id sbx-node False" "names the provider, the pod, the mode, and no node address"
if grep -q -e "BEGIN" -e "token" "$T/state.json"; then not_ok "no key or token in it"; else ok "no key or token in it"; fi
run "$SBX" sandbox resume "$T/state.json"
expect_rc 0 "a new sbx process resumes the state (a fresh token through the relay)"
run "$SBX" sandbox exec "$id" -- cat in.txt
expect_eq "$(cat "$T/out")" "copied in" "and reaches the same workspace"
run "$SBX" sandbox rm "$id"
expect_rc 0 "rm"
WAIT_S=30 wait_until no_objects
expect_eq "$(objects)" 0 "its pod and Secret are gone"
if pgrep -f "sbx-$id" >/dev/null; then not_ok "no process of it is left"; diag "$(pgrep -af "sbx-$id")"; else ok "no process of it is left"; fi
done_testing
