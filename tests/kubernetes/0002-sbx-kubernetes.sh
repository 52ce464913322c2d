#!/usr/bin/env bash
# The kubernetes provider through the real binary, against the fake API server (kube-lib.sh):
# create (a Sandbox that the CRD schemas accept), exec, cp, ps, the session state (no
# credential in it), port, stop/start keeping the workspace, snapshots restored into a new
# kubernetes sandbox and into a local one, a state resumed by a new sbx process, warm-pool
# claims, and the errors users hit: no kubeconfig, an exec plugin, a forbidden verb (the
# restricted context's real 403s), an image that cannot be pulled, a pod that stays pending,
# and a cluster without agent-sandbox (a second fake with --no-crds: bare pods, said so in ps).
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/../integration/sandbox-lib.sh"
. "$(dirname "$0")/kube-lib.sh"
here=$(cd "$(dirname "$0")" && pwd)

cat >"$T/m.yaml" <<'EOF'
version: 1
entries:
  hello.txt:
    type: file
    content: "hello from the manifest\n"
environment:
  GREETING: hi
EOF
id_of() { head -n1 "$T/out"; }
labelled() { k get "$1" -l "sbx.io/id=$2" -o name 2>/dev/null | wc -l; }

# --- a Sandbox -----------------------------------------------------------------------------------
run "$SBX" sandbox create --provider kubernetes "${KOPTS[@]}" --image "$IMG" --manifest "$T/m.yaml"
expect_rc 0 "create --provider kubernetes --image IMG --manifest M"
id=$(id_of)
[ -n "$id" ] && ok "create printed an id ($id)" || not_ok "create printed an id"
expect_eq "$(labelled sandboxes "$id")" 1 "a Sandbox carries its label"
expect_eq "$(labelled pods "$id")" 1 "and so does its pod"
k get sandbox "sbx-$id" -o json >"$T/sb.json"
if python3 "$here/crdcheck.py" Sandbox "$T/sb.json" 2>"$T/crd.err"; then
    ok "the Sandbox as stored passes agent-sandbox's CRD schema"
else not_ok "the Sandbox as stored passes agent-sandbox's CRD schema"; diag "$(cat "$T/crd.err")"; fi
pod_spec() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))["spec"]["podTemplate"]["spec"]; print(eval(sys.argv[2]))' "$T/sb.json" "$1"; }
expect_eq "$(pod_spec 'd["automountServiceAccountToken"]')" "False" "no service account token in the pod"
expect_eq "$(pod_spec 'd["securityContext"]["runAsNonRoot"]')" "True" "it runs as a non-root user"
expect_eq "$(pod_spec 'd["containers"][0]["volumeMounts"][0]["mountPath"]')" "/workspace" \
    "the workspace volume is mounted at the root"

run "$SBX" sandbox exec "$id" -- cat hello.txt
expect_rc 0 "exec by id"
expect_eq "$(cat "$T/out")" "hello from the manifest" "the manifest was materialised in the pod"
run "$SBX" sandbox exec "$id" -- sh -c 'echo "$GREETING"; echo err >&2; exit 3'
expect_rc 3 "exec passes the command's status"
expect_eq "$(cat "$T/out")/$(cat "$T/err")" "hi/err" "stdout and stderr apart, the manifest's environment set"
printf 'copied in\n' >"$T/in.txt"
run "$SBX" sandbox cp "$T/in.txt" "$id:in.txt"
expect_rc 0 "cp host -> sandbox"
run "$SBX" sandbox cp "$id:hello.txt" "$T/back.txt"
expect_rc 0 "cp sandbox -> host"
expect_eq "$(cat "$T/back.txt" 2>/dev/null)" "hello from the manifest" "with the file's content"

run "$SBX" sandbox ps
expect_rc 0 "ps"
if grep -E "^$id +kubernetes .*Sandbox $NS/sbx-$id" "$T/out" >/dev/null; then
    ok "ps lists it with provider kubernetes and its Sandbox"
else not_ok "ps lists it with provider kubernetes and its Sandbox"; diag "$(cat "$T/out")"; fi

run "$SBX" sandbox state "$id"
expect_rc 0 "state"
st() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d.get(sys.argv[2]))' "$T/out" "$1"; }
expect_eq "$(st namespace)/$(st kind)/$(st name)/$(st context)" "$NS/Sandbox/sbx-$id/$KCTX" \
    "the state names the namespace, kind, name and context"
expect_eq "$(st uid)" "$(k get sandbox "sbx-$id" -o 'jsonpath={.metadata.uid}')" "and the uid"
tok=$(python3 -c 'import sys; t=[l.split("token:")[1].strip() for l in open(sys.argv[1]) if "token:" in l]; print(t[0])' "$KCFG")
expect_not_in "$T/out" "$tok" "the state holds no token"
expect_not_in "$T/out" "client-key" "nor a client key"
cp "$T/out" "$T/state.json"

# --- ports --------------------------------------------------------------------------------------
run "$SBX" sandbox port "$id" 8000
expect_rc 1 "port of a port nothing listens on fails"
expect_in "$T/err" "nothing listens on port 8000" "and says so"
run "$SBX" sandbox exec --keep-background "$id" -- \
    sh -c 'python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 &'
resolved() { "$SBX" sandbox port "$id" 8000 >"$T/out" 2>"$T/err"; }
wait_until resolved; rc=$?
expect_rc 0 "port ID 8000"
url=$(cat "$T/out")
case $url in http://127.0.0.1:[0-9]*) ok "the URL is on 127.0.0.1 ($url)" ;; *) not_ok "the URL is on 127.0.0.1 ($url)" ;; esac
fetch() { curl -s --max-time 5 "$url/hello.txt" >"$T/page" 2>/dev/null && grep -q "hello from" "$T/page"; }
if wait_until fetch; then ok "curl through pods/portforward reaches the server in the pod"; else
    not_ok "curl through pods/portforward reaches the server in the pod"; diag "$(cat "$T/page" 2>/dev/null)"; fi
run "$SBX" sandbox port "$id" 8000
expect_eq "$(cat "$T/out")" "$url" "the same port again: the same relay"
relays() { pgrep -f -- "__kube-relay $id " | wc -l; }
expect_eq "$(relays)" 1 "one relay process"
if ! grep -q "$tok" /proc/"$(pgrep -f -- "__kube-relay $id " | head -1)"/cmdline 2>/dev/null; then
    ok "no token on the relay's command line"; else not_ok "no token on the relay's command line"; fi

# --- stop and start keep the workspace -----------------------------------------------------------
run "$SBX" sandbox stop "$id"
expect_rc 0 "stop"
expect_eq "$(k get sandbox "sbx-$id" -o 'jsonpath={.spec.operatingMode}')" "Suspended" "the Sandbox is suspended"
expect_eq "$(labelled pods "$id")" 0 "its pod is gone"
expect_eq "$(k get pvc "workspace-sbx-$id" -o name 2>/dev/null)" "persistentvolumeclaim/workspace-sbx-$id" "its volume stays"
expect_eq "$(relays)" 0 "its relay ended"
run "$SBX" sandbox ps --all
if grep -E "^$id +kubernetes +stopped" "$T/out" >/dev/null; then ok "ps --all shows it stopped"; else
    not_ok "ps --all shows it stopped"; diag "$(cat "$T/out")"; fi
run "$SBX" sandbox exec "$id" -- true
[ "$rc" != 0 ] && ok "a stopped sandbox runs nothing" || not_ok "a stopped sandbox runs nothing"
run "$SBX" sandbox start "$id"
expect_rc 0 "start"
run "$SBX" sandbox exec "$id" -- cat in.txt
expect_eq "$(cat "$T/out")" "copied in" "after start the workspace is as it was"

# --- a state resumes in a new process; snapshots move between providers --------------------------
run "$SBX" sandbox resume "$T/state.json"
expect_rc 0 "resume from the state in a new sbx process"
expect_eq "$(id_of)" "$id" "reaches the same sandbox"
run "$SBX" sandbox snapshot "$id"
expect_rc 0 "snapshot a kubernetes sandbox"
ref=$(grep -o 'sha256:[0-9a-f]*' "$T/out" | head -1)
[ -n "$ref" ] && ok "it printed a reference" || { not_ok "it printed a reference"; diag "$(cat "$T/out" "$T/err")"; }
run "$SBX" sandbox create --provider kubernetes "${KOPTS[@]}" --image "$IMG" --snapshot "$ref"
expect_rc 0 "a new kubernetes sandbox from the snapshot"
id2=$(id_of)
run "$SBX" sandbox exec "$id2" -- cat in.txt hello.txt
expect_eq "$(cat "$T/out")" "copied in
hello from the manifest" "has the workspace"
run "$SBX" sandbox create --snapshot "$ref"
expect_rc 0 "a local sandbox from the kubernetes snapshot"
id3=$(id_of)
run "$SBX" sandbox exec "$id3" -- cat in.txt
expect_eq "$(cat "$T/out")" "copied in" "has the workspace too"
"$SBX" sandbox rm "$id3" >/dev/null 2>&1

# --- rm ---------------------------------------------------------------------------------------------
run "$SBX" sandbox rm "$id"
expect_rc 0 "rm"
expect_eq "$(labelled sandboxes "$id")$(labelled pods "$id")" "00" "no Sandbox or pod with its label is left"
expect_eq "$(relays)" 0 "no relay is left"
run "$SBX" sandbox exec "$id" -- true
[ "$rc" != 0 ] && ok "exec of the removed id fails" || not_ok "exec of the removed id fails"
# `sbx sandbox state` snapshots a live sandbox first: its state rebuilds it once it is gone.
run "$SBX" sandbox resume "${KOPTS[@]}" "$T/state.json"
expect_rc 0 "the removed sandbox's state resumes in a new process"
expect_eq "$(id_of)" "$id" "under the same id"
run "$SBX" sandbox exec "$id" -- cat in.txt
expect_eq "$(cat "$T/out")" "copied in" "rebuilt from the snapshot the state names"
run "$SBX" sandbox rm "$id"
expect_rc 0 "rm it again"
# A sandbox made from a snapshot names it in its state: removed, it comes back from it.
"$SBX" sandbox state "$id2" >"$T/state2.json"
run "$SBX" sandbox rm "$id2"
expect_rc 0 "rm the sandbox made from the snapshot"
run "$SBX" sandbox resume "${KOPTS[@]}" "$T/state2.json"
expect_rc 0 "its state resumes in a new process"
expect_eq "$(id_of)" "$id2" "under the same id"
run "$SBX" sandbox exec "$id2" -- cat in.txt
expect_eq "$(cat "$T/out")" "copied in" "rebuilt from the snapshot"

# --- a warm pool -----------------------------------------------------------------------------------
cat >"$T/pool.yaml" <<EOF
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxTemplate
metadata:
  name: py
spec:
  podTemplate:
    spec:
      containers:
      - name: main
        image: $IMG
        command: ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"]
---
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxWarmPool
metadata:
  name: py-pool
spec:
  replicas: 1
  sandboxTemplateRef:
    name: py
---
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxTemplate
metadata:
  name: nowhere
spec:
  podTemplate:
    spec:
      nodeSelector:
        sbx.io/test-node: does-not-exist
      containers:
      - name: main
        image: $IMG
EOF
run k apply -f "$T/pool.yaml"
expect_rc 0 "a SandboxTemplate and a SandboxWarmPool"
k wait --for=jsonpath='{.status.readyReplicas}'=1 sandboxwarmpool/py-pool --timeout=120s >/dev/null 2>&1
run "$SBX" sandbox create --provider kubernetes "${KOPTS[@]}" --warm-pool py-pool
expect_rc 0 "create --warm-pool (a SandboxClaim)"
idc=$(id_of)
expect_eq "$(labelled sandboxclaims "$idc")" 1 "a SandboxClaim carries its label"
run "$SBX" sandbox exec "$idc" -- sh -c 'echo claimed > c.txt && cat c.txt'
expect_eq "$(cat "$T/out")" "claimed" "exec in the claimed sandbox"
run "$SBX" sandbox ps
if grep -E "^$idc +kubernetes .*SandboxClaim $NS/sbx-$idc \(warm pool py-pool\)" "$T/out" >/dev/null; then
    ok "ps says it is a claim on the pool"; else not_ok "ps says it is a claim on the pool"; diag "$(cat "$T/out")"; fi
run "$SBX" sandbox rm "$idc"
expect_rc 0 "rm the claim"
expect_eq "$(labelled sandboxclaims "$idc")" 0 "the claim is gone"

# --- errors ------------------------------------------------------------------------------------------
run "$SBX" sandbox create --provider kubernetes "${KOPTS[@]}" --template nowhere --ready-timeout 4
expect_rc 1 "a pod that stays pending"
expect_in "$T/err" "was not ready after 4 s" "times out"
expect_in "$T/err" "Unschedulable" "saying why, from the pod's conditions"
expect_in "$T/err" "FailedScheduling" "and its events"
expect_eq "$(k get sandboxes -l sbx.io/template=nowhere -o name | wc -l)" 0 "and leaves no Sandbox"

run "$SBX" sandbox create --provider kubernetes "${KOPTS[@]}" --image sbx-no-such-image:0
expect_rc 1 "an image that cannot be pulled"
expect_in "$T/err" "image 'sbx-no-such-image:0' cannot be pulled" "is named"
if grep -qE "cannot be pulled \((ErrImagePull|ImagePullBackOff)" "$T/err"; then ok "with the kubelet's reason"; else
    not_ok "with the kubelet's reason"; diag "$(cat "$T/err")"; fi

run "$SBX" sandbox create --provider kubernetes --kubeconfig "$KCFG" --context fake-restricted \
    --namespace "$NS" --image "$IMG"
expect_rc 1 "a context that may not create"
expect_in "$T/err" "forbidden" "gets the API server's 403"
expect_in "$T/err" "needs 'create' on 'sandboxes.agents.x-k8s.io' in namespace '$NS'" \
    "and is told the RBAC verb and resource"

run env KUBECONFIG="$T/none" "$SBX" sandbox create --provider kubernetes --image "$IMG"
expect_rc 1 "no kubeconfig"
expect_in "$T/err" "no kubeconfig" "says so"
cat >"$T/exec-kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: gke-gcloud-auth-plugin}}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
EOF
run "$SBX" sandbox create --provider kubernetes --kubeconfig "$T/exec-kubeconfig" --image "$IMG"
expect_rc 1 "a kubeconfig whose user runs an exec plugin"
expect_in "$T/err" "exec plugin 'gke-gcloud-auth-plugin'" "is refused naming the plugin"

# --- the documented Role is enough (the fake's context fake-sbx-role is allowed just that) -------
if [ -n "$FAKE_DIR" ]; then
    R=(--kubeconfig "$KCFG" --context fake-sbx-role --namespace "$NS")
    run "$SBX" sandbox create --provider kubernetes "${R[@]}" --image "$IMG" --manifest "$T/m.yaml"
    expect_rc 0 "with the Role's rights: create"
    idr=$(id_of)
    run "$SBX" sandbox exec "$idr" -- cat hello.txt
    expect_eq "$(cat "$T/out")" "hello from the manifest" "exec"
    run "$SBX" sandbox cp "$T/in.txt" "$idr:r.txt"
    expect_rc 0 "cp"
    run "$SBX" sandbox exec --keep-background "$idr" -- \
        sh -c 'python3 -m http.server 8002 --bind 127.0.0.1 >/dev/null 2>&1 &'
    resolved_r() { "$SBX" sandbox port "$idr" 8002 >"$T/out" 2>"$T/err"; }
    wait_until resolved_r; rc=$?
    expect_rc 0 "port"
    run "$SBX" sandbox stop "$idr"
    expect_rc 0 "stop"
    run "$SBX" sandbox start "$idr"
    expect_rc 0 "start"
    run "$SBX" sandbox snapshot "$idr"
    expect_rc 0 "snapshot"
    run "$SBX" sandbox rm "$idr"
    expect_rc 0 "rm"
    run "$SBX" sandbox create --provider kubernetes "${R[@]}" --image "$IMG" --workload pod
    expect_rc 0 "a bare pod"
    run "$SBX" sandbox rm "$(id_of)"
    expect_rc 0 "and its rm"
fi

# --- a cluster without agent-sandbox: bare pods -------------------------------------------------------
if [ -n "$FAKE_DIR" ]; then
    f2=$(mktemp -d /tmp/sbx-k8n.XXXXXX)
    rmdir "$f2"
    if start_second_fake "$f2" --no-crds; then
        KUBECONFIG=$f2/kubeconfig kubectl create namespace "$NS" >/dev/null 2>&1
        O2=(--kubeconfig "$f2/kubeconfig" --context fake --namespace "$NS")
        run "$SBX" sandbox create --provider kubernetes "${O2[@]}" --image "$IMG" --manifest "$T/m.yaml"
        expect_rc 0 "create on a cluster without the CRDs"
        idp=$(id_of)
        expect_eq "$(KUBECONFIG=$f2/kubeconfig kubectl -n "$NS" get pods -l "sbx.io/id=$idp,sbx.io/workload=pod" -o name | wc -l)" 1 \
            "makes a bare pod labelled by sbx"
        run "$SBX" sandbox exec "$idp" -- cat hello.txt
        expect_eq "$(cat "$T/out")" "hello from the manifest" "which works as a sandbox"
        run "$SBX" sandbox ps
        if grep -E "^$idp +kubernetes .*bare pod" "$T/out" >/dev/null; then ok "ps says it is a bare pod"; else
            not_ok "ps says it is a bare pod"; diag "$(cat "$T/out")"; fi
        run "$SBX" sandbox exec "$idp" -- sh -c 'echo kept > k.txt'
        run "$SBX" sandbox stop "$idp"
        expect_rc 0 "stop a bare pod (its volume claim stays)"
        run "$SBX" sandbox start "$idp"
        expect_rc 0 "start it again"
        run "$SBX" sandbox exec "$idp" -- cat k.txt
        expect_eq "$(cat "$T/out")" "kept" "with its workspace"
        run "$SBX" sandbox create --provider kubernetes "${O2[@]}" --image "$IMG" --workload sandbox
        expect_rc 1 "--workload sandbox there"
        expect_in "$T/err" "no agent-sandbox CRDs" "says the CRDs are missing"
        run "$SBX" sandbox create --provider kubernetes "${O2[@]}" --warm-pool py-pool
        expect_rc 1 "and so does a warm pool"
        expect_in "$T/err" "extensions.agents.x-k8s.io/v1beta1 is not served" "naming the group"
        run "$SBX" sandbox rm "$idp"
        expect_rc 0 "rm the bare pod"
        expect_eq "$(KUBECONFIG=$f2/kubeconfig kubectl -n "$NS" get pods,pvc -l "sbx.io/id=$idp" -o name | wc -l)" 0 \
            "nothing with its label is left"
    else
        not_ok "a second fake without CRDs starts"; diag "$(cat "$T/fake2.log")"
    fi
fi

run "$SBX" sandbox rm "$id2"
expect_rc 0 "rm the sandbox made from the snapshot"
done_testing
