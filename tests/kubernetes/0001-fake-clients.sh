#!/usr/bin/env bash
# The fake Kubernetes API server (fake-apiserver.py) held to real clients: kubectl (v1.32 on the
# machine) and python-kubernetes (Debian's python3-kubernetes). Uses the fake scripts/check
# started (SBX_TEST_KUBECONFIG_FAKE), or starts one (fake.sh) on the private dockerd of
# SBX_TEST_DOCKER_HOST, or starts that dockerd too (tests/docker/engines.sh, needs root).
# Everything happens in a namespace of its own, deleted at the end; a second fake without
# containers or CRDs (--kubelet none --no-crds --history 5) covers the watch window, compaction,
# pagination and the CRDs-missing case. Traffic goes only to 127.0.0.1.
SBX=${SBX:-unused} # lib.sh wants it; this suite does not run sbx
. "$(dirname "$0")/../integration/lib.sh"
here=$(cd "$(dirname "$0")" && pwd)
PY=/usr/bin/python3
eng="" own_fake="" fake2_pid="" NS="" pf=""

cleanup() {
    [ -z "$pf" ] || { kill "$pf" 2>/dev/null; wait "$pf" 2>/dev/null; }
    if [ -n "$NS" ] && [ -n "${KUBECONFIG:-}" ]; then
        kubectl delete namespace "$NS" --wait=true --timeout=120s >/dev/null 2>&1 || true
    fi
    [ -z "$fake2_pid" ] || { kill "$fake2_pid" 2>/dev/null; wait "$fake2_pid" 2>/dev/null; }
    [ -z "$own_fake" ] || "$here/fake.sh" stop "$own_fake" || true
    [ -z "$eng" ] || "$here/../docker/engines.sh" stop "$eng" || true
    rm -rf "$T"
}
trap cleanup EXIT

command -v kubectl >/dev/null || skip_all "kubectl is not installed"
command -v openssl >/dev/null || skip_all "openssl is not installed"
if [ -z "${SBX_TEST_KUBECONFIG_FAKE:-}" ]; then
    if [ -z "${SBX_TEST_DOCKER_HOST:-}" ]; then
        [ "$(id -u)" = 0 ] || skip_all "no fake API server given (SBX_TEST_KUBECONFIG_FAKE) and starting the private dockerd its pods run in needs root"
        command -v dockerd >/dev/null || skip_all "dockerd is not installed (scripts/install-deps)"
        eng=$(mktemp -d /tmp/sbx-k8e.XXXXXX)
        "$here/../docker/engines.sh" start "$eng" >"$T/engines.log" 2>&1 || {
            cat "$T/engines.log"; eng_dir=$eng; eng=""; "$here/../docker/engines.sh" stop "$eng_dir"
            skip_all "cannot start a private dockerd (tests/docker/engines.sh failed)"; }
        set -a; . "$eng/env"; set +a
    fi
    own_fake=$(mktemp -d /tmp/sbx-k8f.XXXXXX)
    rmdir "$own_fake"
    "$here/fake.sh" start "$own_fake" >"$T/fake-start.log" 2>&1 || { cat "$T/fake-start.log"; not_ok "fake.sh start"; done_testing; exit 1; }
    set -a; . "$own_fake/env"; set +a
fi
export KUBECONFIG=$SBX_TEST_KUBECONFIG_FAKE KUBECACHEDIR=$T/kube-cache
DOCKER=${SBX_TEST_DOCKER_HOST:?}
IMAGE=${SBX_TEST_DOCKER_IMAGE:-sbx-test:1}
have_pyk8s=1
$PY -c 'import kubernetes' 2>/dev/null || have_pyk8s=0
skip() { tap_n=$((tap_n + 1)); echo "ok $tap_n - $1 # SKIP $2"; }

NS=fake-clients-$$-$RANDOM
k() { kubectl -n "$NS" "$@"; }
dq() { curl -sf --max-time 30 --unix-socket "$DOCKER" "http://d/v1.41$1"; }
# containers_of POD: ids of the fake's containers running POD of this test's namespace
containers_of() {
    local f
    f=$($PY -c 'import json,sys,urllib.parse; print(urllib.parse.quote(json.dumps({"label": ["io.sbx.k8sfake.namespace=" + sys.argv[1], "io.sbx.k8sfake.pod=" + sys.argv[2]]})))' "$NS" "$1")
    dq "/containers/json?all=1&filters=$f" | $PY -c 'import json,sys; [print(c["Id"]) for c in json.load(sys.stdin)]'
}
volume_exists() { dq "/volumes/$1" >/dev/null 2>&1; }
jp() { k get "$1" -o "jsonpath=$2" 2>&1; }
crd() { $PY "$here/crdcheck.py" "$@"; }
# wait_server_in POD PORT: until something listens on PORT inside POD (at most about 10 s)
wait_server_in() {
    k exec "$1" -- python3 -c 'import socket, sys, time
for _ in range(100):
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1).close()
        break
    except OSError:
        time.sleep(0.1)' "$2"
}

run kubectl create namespace "$NS"
expect_rc 0 "create a namespace for this test"
run kubectl get namespaces
expect_in "$T/out" "$NS" "kubectl get namespaces lists it"
expect_in "$T/out" "default" "and the default namespace"
run k get pods -o json
expect_rc 0 "kubectl get pods -o json"
expect_eq "$($PY -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["kind"], len(d["items"]))' "$T/out" 2>&1)" "List 0" "an empty List"

# --- agent-sandbox objects through kubectl apply ----------------------------------------------
cat >"$T/objects.yaml" <<EOF
apiVersion: agents.x-k8s.io/v1beta1
kind: Sandbox
metadata:
  name: sb
spec:
  service: true
  podTemplate:
    metadata:
      labels:
        app: fake-clients
    spec:
      containers:
      - name: main
        image: $IMAGE
        command: ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"]
        ports:
        - containerPort: 8080
        volumeMounts:
        - name: work
          mountPath: /workspace
  volumeClaimTemplates:
  - metadata:
      name: work
    spec:
      accessModes: ["ReadWriteOnce"]
      resources:
        requests:
          storage: 1Gi
---
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxTemplate
metadata:
  name: tmpl
spec:
  podTemplate:
    spec:
      containers:
      - name: main
        image: $IMAGE
        command: ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"]
---
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxWarmPool
metadata:
  name: pool
spec:
  replicas: 2
  sandboxTemplateRef:
    name: tmpl
EOF
# What the suite sends passes the CRD schemas, as crdcheck.py checks it for sbx's tests.
kubectl create --dry-run=client -o json -f "$T/objects.yaml" >"$T/objects.json" 2>"$T/err"
$PY - "$T/objects.json" "$T" <<'PY'
import json, sys
text, dec, objs = open(sys.argv[1]).read(), json.JSONDecoder(), []
pos = 0
while text[pos:].strip():
    o, end = dec.raw_decode(text, len(text) - len(text[pos:].lstrip()))
    objs.append(o)
    pos = end
for i, o in enumerate(objs):
    json.dump(o, open("%s/obj-%d-%s.json" % (sys.argv[2], i, o["kind"]), "w"))
PY
bad=0
[ "$(ls "$T"/obj-*.json 2>/dev/null | wc -l)" = 3 ] || bad=2
for f in "$T"/obj-*.json; do
    kind=${f##*-}; kind=${kind%.json}
    crd "$kind" "$f" 2>>"$T/crd.err" || bad=1
done
expect_eq "$bad$(cat "$T/crd.err")" "0" "crdcheck.py accepts every object the suite applies"

run k apply -f "$T/objects.yaml"
expect_rc 0 "kubectl apply -f of a Sandbox, a SandboxTemplate and a SandboxWarmPool"
run k wait --for=condition=Ready sandbox/sb --timeout=120s
expect_rc 0 "kubectl wait --for=condition=Ready sandbox/sb"
expect_eq "$(jp pod/sb '{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}/{.metadata.ownerReferences[0].controller}')" \
    "Sandbox/sb/true" "the Sandbox made a pod named like it, controlled by it"
expect_eq "$(jp pod/sb '{.metadata.labels.app}')" "fake-clients" "with the pod template's labels"
expect_eq "$(jp pod/sb '{.metadata.labels.agents\.x-k8s\.io/sandbox-name-hash}')" \
    "$(jp sandbox/sb '{.status.selector}' | sed 's/.*=//')" "and the sandbox-name-hash label its status selects"
expect_eq "$(jp pvc/work-sb '{.status.phase}/{.metadata.ownerReferences[0].name}')" "Bound/sb" "a Bound PVC from the volume claim template"
ip=$(jp sandbox/sb '{.status.podIPs[0]}')
expect_eq "$ip" "$(jp pod/sb '{.status.podIP}')" "status.podIPs is the pod's IP ($ip)"
expect_eq "$(jp sandbox/sb '{.status.serviceFQDN}')" "sb.$NS.svc.cluster.local" "status.serviceFQDN for spec.service"
expect_eq "$(jp svc/sb '{.spec.clusterIP}')" "None" "a headless Service"
expect_eq "$(jp sandbox/sb '{.status.conditions[?(@.type=="Suspended")].status}')" "False" "a Suspended=False condition"
expect_eq "$(containers_of sb | wc -l)" 1 "the pod is one container of the private dockerd"

run k get sandboxes
expect_in "$T/out" "DependenciesReady" "kubectl get sandboxes prints the CRD's printer columns"
run k get sandbox sb -o json
crd Sandbox "$T/out" 2>"$T/err"
expect_eq "$?$(cat "$T/err")" "0" "the Sandbox as the fake's controller wrote it passes the CRD schema"

# --- exec ------------------------------------------------------------------------------------
run k exec sb -- sh -c 'echo hi; echo oops >&2; exit 3'
expect_rc 3 "kubectl exec: the exit status 3 reaches kubectl"
expect_eq "$(cat "$T/out")" "hi" "stdout apart"
expect_in "$T/err" "oops" "stderr apart"
printf 'four' | k exec -i sb -- sh -c 'wc -c' >"$T/out" 2>"$T/err"
expect_eq "$(tr -d ' ' <"$T/out")" "4" "kubectl exec -i: stdin, and its end (v5 close)"
ON_TTY=$($PY "$here/pty-resize.py" kubectl -n "$NS" exec -it sb -- \
    sh -c 'while read x; do [ "$x" = q ] && exit 7; stty size; done' 2>&1)
rc=$?
[ "$rc" = 7 ] && ok "kubectl exec -it under a pty: sizes follow the terminal, exit status 7" ||
    { not_ok "kubectl exec -it under a pty"; diag "status $rc" "$ON_TTY"; }

# --- cp --------------------------------------------------------------------------------------
head -c 300000 /dev/urandom >"$T/blob"
run k cp "$T/blob" sb:/workspace/blob
expect_rc 0 "kubectl cp host -> pod"
expect_eq "$(k exec sb -- md5sum /workspace/blob | cut -d' ' -f1)" "$(md5sum <"$T/blob" | cut -d' ' -f1)" "the file arrived whole"
run k cp sb:/workspace/blob "$T/blob.back"
expect_rc 0 "kubectl cp pod -> host"
cmp -s "$T/blob" "$T/blob.back" && ok "and came back whole" || not_ok "and came back whole"

# --- port-forward ----------------------------------------------------------------------------
k exec sb -- sh -c 'cd /workspace && echo served >index.html && (python3 -m http.server 8080 --bind 127.0.0.1 >/dev/null 2>&1 &)'
wait_server_in sb 8080
port=$($PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
kubectl -n "$NS" port-forward pod/sb "$port:8080" >"$T/pf.out" 2>&1 &
pf=$!
for _ in $(seq 100); do grep -q "Forwarding from 127.0.0.1:$port" "$T/pf.out" && break; sleep 0.1; done
expect_eq "$(curl -s --max-time 30 "http://127.0.0.1:$port/index.html")" "served" "kubectl port-forward reaches a server inside the pod"
expect_eq "$(curl -s --max-time 30 "http://127.0.0.1:$port/blob" | md5sum | cut -d' ' -f1)" "$(md5sum <"$T/blob" | cut -d' ' -f1)" \
    "300 kB through it, whole"
kill "$pf" 2>/dev/null; wait "$pf" 2>/dev/null
port2=$($PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
kubectl -n "$NS" port-forward pod/sb "$port2:9" >"$T/pf2.out" 2>&1 &
pf=$!
for _ in $(seq 100); do grep -q "Forwarding from" "$T/pf2.out" && break; sleep 0.1; done
curl -s --max-time 10 "http://127.0.0.1:$port2/" >/dev/null
for _ in $(seq 100); do grep -q "connection refused" "$T/pf2.out" && break; sleep 0.1; done
kill "$pf" 2>/dev/null; wait "$pf" 2>/dev/null
pf=""
expect_in "$T/pf2.out" "an error occurred forwarding $port2 -> 9" "a closed port: kubectl reports the forwarding error"
expect_in "$T/pf2.out" "connect: connection refused" "naming the refused connection"

# --- suspend and resume ----------------------------------------------------------------------
k exec sb -- sh -c 'echo kept >/workspace/kept.txt'
run k patch sandbox sb --type merge -p '{"spec":{"operatingMode":"Suspended"}}'
expect_rc 0 "kubectl patch operatingMode Suspended"
run k wait --for=condition=Suspended sandbox/sb --timeout=120s
expect_rc 0 "the Sandbox reports Suspended"
expect_eq "$(jp sandbox/sb '{.status.conditions[?(@.type=="Suspended")].reason}')" "PodTerminated" "reason PodTerminated"
run k get pod sb
expect_in "$T/err" 'pods "sb" not found' "the pod is gone"
expect_eq "$(containers_of sb | wc -l)" 0 "and so is its container"
expect_eq "$(jp pvc/work-sb '{.status.phase}')" "Bound" "the PVC stays"
run k patch sandbox sb --type merge -p '{"spec":{"operatingMode":"Running"}}'
run k wait --for=condition=Ready sandbox/sb --timeout=120s
expect_rc 0 "operatingMode Running: Ready again"
expect_eq "$(k exec sb -- cat /workspace/kept.txt 2>&1)" "kept" "with the PVC's contents"

# --- warm pool and claims ------------------------------------------------------------------------
run k wait --for=jsonpath='{.status.readyReplicas}'=2 sandboxwarmpool/pool --timeout=120s
expect_rc 0 "the SandboxWarmPool keeps 2 ready sandboxes"
cat >"$T/claims.yaml" <<'EOF'
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxClaim
metadata:
  name: claim
spec:
  warmPoolRef:
    name: pool
---
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxWarmPool
metadata:
  name: orphan-pool
spec:
  replicas: 1
  sandboxTemplateRef:
    name: no-such-template
---
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxClaim
metadata:
  name: claim-no-template
spec:
  warmPoolRef:
    name: orphan-pool
---
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxClaim
metadata:
  name: claim-no-pool
spec:
  warmPoolRef:
    name: no-such-pool
EOF
run k apply -f "$T/claims.yaml"
expect_rc 0 "kubectl apply -f of SandboxClaims"
run k wait --for=condition=Ready sandboxclaim/claim --timeout=120s
expect_rc 0 "kubectl wait --for=condition=Ready on a claim"
adopted=$(jp sandboxclaim/claim '{.status.sandbox.name}')
case $adopted in pool-*) ok "the claim adopted a warm sandbox ($adopted)" ;; *) not_ok "the claim adopted a warm sandbox"; diag "status.sandbox.name: $adopted" ;; esac
expect_eq "$(jp "sandbox/$adopted" '{.metadata.ownerReferences[0].kind}/{.metadata.labels.agents\.x-k8s\.io/launch-type}')" \
    "SandboxClaim/warm" "which the claim now owns"
run k wait --for=jsonpath='{.status.readyReplicas}'=2 sandboxwarmpool/pool --timeout=120s
expect_rc 0 "the pool refills"
run k scale sandboxwarmpool/pool --replicas=3
expect_rc 0 "kubectl scale of a SandboxWarmPool (the scale subresource)"
run k wait --for=jsonpath='{.status.readyReplicas}'=3 sandboxwarmpool/pool --timeout=120s
expect_rc 0 "the pool grows to 3 ready sandboxes"
run k wait --for=jsonpath='{.status.conditions[?(@.type=="Ready")].reason}'=TemplateNotFound sandboxclaim/claim-no-template --timeout=60s
expect_rc 0 "a claim whose pool's template is missing: Ready=False, TemplateNotFound"
expect_eq "$(jp sandboxclaim/claim-no-template '{.status.conditions[?(@.type=="Ready")].message}')" \
    'SandboxTemplate "no-such-template" not found' "with the template named"
run k wait --for=jsonpath='{.status.conditions[?(@.type=="Ready")].reason}'=WarmPoolNotFound sandboxclaim/claim-no-pool --timeout=60s
expect_rc 0 "a claim of a missing pool: WarmPoolNotFound"
run k get sandboxclaim claim -o json
crd SandboxClaim "$T/out" 2>"$T/err"
expect_eq "$?$(cat "$T/err")" "0" "the claim's status passes the CRD schema"
run k get sandboxwarmpool pool -o json
crd SandboxWarmPool "$T/out" 2>"$T/err"
expect_eq "$?$(cat "$T/err")" "0" "the pool's status passes the CRD schema"
run k delete sandboxclaim claim
expect_rc 0 "kubectl delete sandboxclaim"
run k wait --for=delete "sandbox/$adopted" "pod/$adopted" --timeout=120s
expect_rc 0 "deleting the claim deletes its sandbox and pod"
expect_eq "$(containers_of "$adopted" | wc -l)" 0 "and the container"

# --- bare pods, image pull failures, scheduling failures -----------------------------------------
cat >"$T/bare.yaml" <<EOF
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: bare-data
spec:
  accessModes: ["ReadWriteOnce"]
  resources:
    requests:
      storage: 1Gi
---
apiVersion: v1
kind: Pod
metadata:
  name: bare
  labels: {tier: bare}
spec:
  containers:
  - name: c
    image: $IMAGE
    command: ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"]
    env: [{name: GREETING, value: hello-env}]
    workingDir: /data
    volumeMounts: [{name: data, mountPath: /data}]
  volumes:
  - name: data
    persistentVolumeClaim: {claimName: bare-data}
---
apiVersion: v1
kind: Pod
metadata:
  name: nopull
  labels: {tier: broken}
spec:
  containers: [{name: c, image: "no-such-image:0"}]
---
apiVersion: v1
kind: Pod
metadata:
  name: nonode
  labels: {tier: broken}
spec:
  nodeSelector: {disk: nvme}
  containers: [{name: c, image: $IMAGE}]
EOF
run k apply -f "$T/bare.yaml"
expect_rc 0 "kubectl apply -f of bare pods and a PVC (no agent-sandbox involved)"
run k wait --for=condition=Ready pod/bare --timeout=120s
expect_rc 0 "the bare pod becomes Ready"
expect_eq "$(k exec bare -- sh -c 'echo $GREETING $(pwd)' 2>&1)" "hello-env /data" "with its env and workingDir"
k exec bare -- sh -c 'echo to-the-log >/proc/1/fd/1'
run k logs bare
expect_eq "$(cat "$T/out")" "to-the-log" "kubectl logs shows what the container wrote"
run k wait --for=jsonpath='{.status.containerStatuses[0].state.waiting.reason}'=ImagePullBackOff pod/nopull --timeout=120s
expect_rc 0 "a pod of an image the engine lacks: ErrImagePull, then ImagePullBackOff"
run k get events --field-selector involvedObject.name=nopull,type=Warning -o 'jsonpath={range .items[*]}{.reason}: {.message}{"\n"}{end}'
expect_in "$T/out" 'Failed: Failed to pull image "no-such-image:0"' "with a Warning event naming the image"
run k wait --for=jsonpath='{.status.conditions[?(@.type=="PodScheduled")].reason}'=Unschedulable pod/nonode --timeout=60s
expect_rc 0 "an unsatisfiable nodeSelector: PodScheduled=False, Unschedulable"
expect_eq "$(jp pod/nonode '{.status.phase}')" "Pending" "the pod stays Pending"
run k get events --field-selector involvedObject.name=nonode,reason=FailedScheduling -o 'jsonpath={.items[0].message}'
expect_in "$T/out" "didn't match Pod's node affinity/selector" "a FailedScheduling event says why"
run k get pods -l 'tier in (bare,broken),tier!=bare' -o name
expect_eq "$(sort "$T/out" | tr '\n' ' ')" "pod/nonode pod/nopull " "label selectors: in and !="
run k get pods -l '!tier' -o name
expect_not_in "$T/out" "pod/bare" "label selectors: does-not-exist"
run k get pods --field-selector status.phase=Running -o name
expect_in "$T/out" "pod/bare" "field selector status.phase"
expect_not_in "$T/out" "pod/nonode" "leaves the Pending pod out"
run k delete pod bare nopull nonode
expect_rc 0 "kubectl delete of the bare pods"
expect_eq "$(containers_of bare | wc -l)" 0 "the bare pod's container is gone when the delete returns"
vol=k8sfake_${SBX_TEST_KUBE_INSTANCE:-}_${NS}_bare-data_$(jp pvc/bare-data '{.metadata.uid}' | cut -c1-8)
volume_exists "$vol" && ok "the PVC is a Docker volume" || not_ok "the PVC is a Docker volume ($vol)"
run k delete pvc bare-data
expect_rc 0 "kubectl delete pvc"
volume_exists "$vol" && not_ok "its volume is removed" || ok "its volume is removed"

# --- deleting a Sandbox -------------------------------------------------------------------------
k apply -f - >/dev/null <<EOF
apiVersion: agents.x-k8s.io/v1beta1
kind: Sandbox
metadata: {name: gone}
spec:
  podTemplate:
    spec:
      containers:
      - {name: c, image: $IMAGE, command: [sh, -c, "trap 'exit 0' TERM; while :; do sleep 1; done"]}
  volumeClaimTemplates:
  - metadata: {name: work}
    spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
EOF
run k wait --for=condition=Ready sandbox/gone --timeout=120s
vol=k8sfake_${SBX_TEST_KUBE_INSTANCE:-}_${NS}_work-gone_$(jp pvc/work-gone '{.metadata.uid}' | cut -c1-8)
expect_eq "$(containers_of gone | wc -l)" 1 "another Sandbox runs"
run k delete sandbox gone
expect_rc 0 "kubectl delete sandbox"
run k wait --for=delete pod/gone pvc/work-gone --timeout=120s
expect_rc 0 "its pod and PVC are garbage-collected"
expect_eq "$(containers_of gone | wc -l)" 0 "its container is gone"
volume_exists "$vol" && not_ok "its volume is gone" || ok "its volume is gone"

# --- finalizers and propagation policies --------------------------------------------------------
k apply -f - >/dev/null <<EOF
apiVersion: agents.x-k8s.io/v1beta1
kind: Sandbox
metadata: {name: held, finalizers: [example.com/hold]}
spec:
  operatingMode: Suspended
  podTemplate: {spec: {containers: [{name: c, image: $IMAGE}]}}
  volumeClaimTemplates:
  - metadata: {name: work}
    spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
EOF
run k wait --for=jsonpath='{.status.phase}'=Bound pvc/work-held --timeout=60s
run k delete sandbox held --wait=false
expect_rc 0 "kubectl delete of a Sandbox with a finalizer"
expect_eq "$(jp sandbox/held '{.metadata.finalizers[0]}/{.metadata.deletionTimestamp}' | sed 's/[0-9TZ:-]*$/T/')" \
    "example.com/hold/T" "it stays, with a deletionTimestamp"
run k patch sandbox held --type json -p '[{"op":"remove","path":"/metadata/finalizers"}]'
expect_rc 0 "a JSON patch removes the finalizer"
run k wait --for=delete sandbox/held pvc/work-held --timeout=60s
expect_rc 0 "then the Sandbox goes, and its PVC after it"
sed 's/name: held, finalizers: \[example.com\/hold\]/name: orphaning/' >"$T/orphan.yaml" <<EOF
apiVersion: agents.x-k8s.io/v1beta1
kind: Sandbox
metadata: {name: held, finalizers: [example.com/hold]}
spec:
  operatingMode: Suspended
  podTemplate: {spec: {containers: [{name: c, image: $IMAGE}]}}
  volumeClaimTemplates:
  - metadata: {name: work}
    spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
EOF
k apply -f "$T/orphan.yaml" >/dev/null
run k wait --for=jsonpath='{.status.phase}'=Bound pvc/work-orphaning --timeout=60s
expect_eq "$(jp sandbox/orphaning '{.metadata.generation}')" 1 "metadata.generation starts at 1"
k patch sandbox orphaning --type merge -p '{"spec":{"service":false}}' >/dev/null
k patch sandbox orphaning --type merge -p '{"metadata":{"labels":{"only":"metadata"}}}' >/dev/null
expect_eq "$(jp sandbox/orphaning '{.metadata.generation}')" 2 "a spec change bumps it, a label change does not"
run k delete sandbox orphaning --cascade=orphan
expect_rc 0 "kubectl delete --cascade=orphan"
expect_eq "$(jp pvc/work-orphaning '{.status.phase}/{.metadata.ownerReferences}')" "Bound/" "the PVC stays, without its owner reference"
run k delete pvc work-orphaning
expect_rc 0 "and can be deleted on its own"

# --- errors as the real server words them ---------------------------------------------------------
run k --token=not-a-token get pods
expect_eq "$(cat "$T/err")" "error: You must be logged in to the server (Unauthorized)" "an unknown token: 401 Unauthorized"
run k get sandbox nope
expect_eq "$(cat "$T/err")" 'Error from server (NotFound): sandboxes.agents.x-k8s.io "nope" not found' "a 404 exactly as kubectl prints it"
k get sandbox sb -o json >"$T/sb.json"
run k create -f "$T/sb.json"
expect_eq "$(cat "$T/err")" "Error from server (AlreadyExists): error when creating \"$T/sb.json\": sandboxes.agents.x-k8s.io \"sb\" already exists" \
    "409 AlreadyExists"
k label sandbox sb touched=yes >/dev/null
run k replace -f "$T/sb.json"
expect_eq "$(cat "$T/err")" "Error from server (Conflict): error when replacing \"$T/sb.json\": Operation cannot be fulfilled on sandboxes.agents.x-k8s.io \"sb\": the object has been modified; please apply your changes to the latest version and try again" \
    "409 Conflict for a stale resourceVersion"
run kubectl --context fake-restricted -n "$NS" delete sandbox sb
expect_eq "$(cat "$T/err")" "Error from server (Forbidden): sandboxes.agents.x-k8s.io \"sb\" is forbidden: User \"sbx-restricted\" cannot delete resource \"sandboxes\" in API group \"agents.x-k8s.io\" in the namespace \"$NS\"" \
    "a forbidden verb names the user, verb, resource, group and namespace"
run kubectl --context fake-restricted -n "$NS" exec sb -- true
expect_in "$T/err" "cannot create resource \"pods/exec\" in API group \"\" in the namespace \"$NS\"" "exec needs create on pods/exec"
run kubectl --context fake-restricted -n "$NS" get sandbox sb -o name
expect_eq "$(cat "$T/out")" "sandbox.agents.x-k8s.io/sb" "the restricted user may still get"
run kubectl --context fake-cert -n "$NS" get sandbox sb -o name
expect_eq "$(cat "$T/out")" "sandbox.agents.x-k8s.io/sb" "a client certificate authenticates"
cat >"$T/invalid.yaml" <<EOF
apiVersion: agents.x-k8s.io/v1beta1
kind: Sandbox
metadata: {name: invalid}
spec:
  operatingMode: Sleeping
  podTemplate: {spec: {containers: [{name: c, image: $IMAGE}]}}
EOF
run k apply -f "$T/invalid.yaml"
expect_in "$T/err" 'spec.operatingMode: Unsupported value: "Sleeping": supported values: "Running", "Suspended"' \
    "422 from the CRD schema, with the field path"
kubectl create --dry-run=client -o json -f "$T/invalid.yaml" >"$T/invalid.json" 2>/dev/null
crd Sandbox "$T/invalid.json" 2>"$T/err"
expect_eq "$?" 1 "crdcheck.py rejects it too"
expect_in "$T/err" 'spec.operatingMode: Unsupported value: "Sleeping"' "with the same words"
sed -i 's/operatingMode: Sleeping/bogus: 1/' "$T/invalid.yaml"
run k apply -f "$T/invalid.yaml"
expect_in "$T/err" 'strict decoding error: unknown field "spec.bogus"' "an unknown field under kubectl's strict validation"

# --- Secrets and host pods (pods of SBX_TEST_KUBE_HOST_IMAGE run on this machine: sbx-node's mode)
HOSTIMG=${SBX_TEST_KUBE_HOST_IMAGE:-}
if [ -n "$HOSTIMG" ] && [ "$(id -u)" = 0 ]; then
    printf 'hello-secret' >"$T/greet"
    run k create secret generic hs --from-file=greeting="$T/greet" --from-literal=lit=abc
    expect_rc 0 "kubectl create secret generic (a protobuf body)"
    expect_eq "$(k get secret hs -o jsonpath='{.data.greeting}' | base64 -d)" "hello-secret" "the secret's data, base64 as stored"
    expect_eq "$(k get secret hs -o jsonpath='{.data.lit}' | base64 -d) $(k get secret hs -o jsonpath='{.type}')" "abc Opaque" \
        "a literal lands in data; type defaults to Opaque"
    mnt=/var/run/secrets/k8sfake-test-$$
    $PY - "$HOSTIMG" "$mnt" >"$T/hp.json" <<'PYJ'
import json, sys
srv = ("import http.server, os\n"
       "g = open(sys.argv[1] + '/greeting').read()\n"
       "links = sorted(l.split(':')[0].strip() for l in open('/proc/self/net/dev').read().splitlines()[2:])\n"
       "class H(http.server.BaseHTTPRequestHandler):\n"
       "    def do_GET(s):\n"
       "        b = b'served' if s.path == '/index.html' else ('%s %s %d' % (g, ','.join(links), os.getpid())).encode()\n"
       "        s.send_response(200); s.end_headers(); s.wfile.write(b)\n"
       "http.server.HTTPServer(('127.0.0.1', 8080), H).serve_forever()\n")
print(json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "hp"},
                  "spec": {"containers": [{"name": "c", "image": sys.argv[1],
                                           "command": ["python3", "-c", "import sys\n" + srv, sys.argv[2]],
                                           "volumeMounts": [{"name": "s", "mountPath": sys.argv[2]}]}],
                           "volumes": [{"name": "s", "secret": {"secretName": "hs"}}]}}))
PYJ
    run k apply -f "$T/hp.json"
    run k wait --for=condition=Ready pod/hp --timeout=60s
    expect_rc 0 "a pod of the host image runs"
    port=$($PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    kubectl -n "$NS" port-forward pod/hp "$port:8080" >"$T/pf.out" 2>&1 &
    pf=$!
    for _ in $(seq 100); do grep -q "Forwarding from 127.0.0.1:$port" "$T/pf.out" && break; sleep 0.1; done
    got=""
    for _ in $(seq 50); do got=$(curl -s --max-time 10 "http://127.0.0.1:$port/") && [ -n "$got" ] && break; sleep 0.2; done
    expect_eq "$got" "hello-secret lo 1" \
        "kubectl port-forward reaches its server: the Secret mounted, loopback only, first process of its own PID namespace"
    kill "$pf" 2>/dev/null; wait "$pf" 2>/dev/null; pf=""
    if [ "$have_pyk8s" = 1 ]; then
        run env KUBE_NAMESPACE="$NS" $PY "$here/py-clients.py" "$KUBECONFIG" fake portforward hp 8080
        expect_rc 0 "python: kubernetes.stream.portforward to the host pod's server"; diag "$(cat "$T/out" "$T/err")"
    else
        skip "python: portforward to a host pod" "python3-kubernetes is not installed (scripts/install-deps)"
    fi
    run k delete pod hp --wait=true --timeout=60s
    expect_rc 0 "the host pod is deleted"
    [ -e "$mnt" ] && not_ok "its mount point is removed" || ok "its mount point is removed"
    pgrep -f "k8sfake-test-$$" >/dev/null && not_ok "no process of it is left" || ok "no process of it is left"
else
    for d in "secrets and host pods"; do skip "$d" "no host image (SBX_TEST_KUBE_HOST_IMAGE) or not root"; done
fi

# --- python-kubernetes ----------------------------------------------------------------------------
if [ "$have_pyk8s" = 1 ]; then
    k exec sb -- sh -c 'cd /workspace && (python3 -m http.server 8080 --bind 127.0.0.1 >/dev/null 2>&1 &)'
    wait_server_in sb 8080
    run env KUBE_NAMESPACE="$NS" $PY "$here/py-clients.py" "$KUBECONFIG" fake watch
    expect_rc 0 "python: watch.Watch().stream of sandboxes sees ADDED, MODIFIED, DELETED"; diag "$(cat "$T/out" "$T/err")"
    run env KUBE_NAMESPACE="$NS" $PY "$here/py-clients.py" "$KUBECONFIG" fake exec sb
    expect_rc 0 "python: stream(connect_get_namespaced_pod_exec): stdout, stderr, exit code, stdin"; diag "$(cat "$T/out" "$T/err")"
    run env KUBE_NAMESPACE="$NS" $PY "$here/py-clients.py" "$KUBECONFIG" fake-cert portforward sb 8080
    expect_rc 0 "python: kubernetes.stream.portforward to the pod's server"; diag "$(cat "$T/out" "$T/err")"
else
    for d in watch exec portforward; do skip "python: $d" "python3-kubernetes is not installed (scripts/install-deps)"; done
fi

# --- a second fake: no containers, no CRDs, a watch history of 5 events ------------------------
fdir=$(dirname "$KUBECONFIG")
$PY "$here/fake-apiserver.py" --listen 127.0.0.1:0 --tls-cert "$fdir/server.crt" --tls-key "$fdir/server.key" \
    --tokens "$fdir/tokens.json" --kubelet none --no-crds --history 5 --ready-file "$T/fake2.url" --log "$T/fake2.log" &
fake2_pid=$!
for _ in $(seq 100); do [ -s "$T/fake2.url" ] && break; sleep 0.1; done
sed "s#server: .*#server: $(cat "$T/fake2.url")#" "$KUBECONFIG" >"$T/fake2.kubeconfig"
run env KUBECONFIG="$T/fake2.kubeconfig" kubectl get sandboxes
expect_eq "$(cat "$T/err")" 'error: the server doesn'"'"'t have a resource type "sandboxes"' "without the CRDs kubectl says the type is missing"
if [ "$have_pyk8s" = 1 ]; then
    run $PY "$here/py-clients.py" "$T/fake2.kubeconfig" fake window 5
    expect_rc 0 "python: a watch from before the history window ends in 410; within it, events"; diag "$(cat "$T/out" "$T/err")"
    run $PY "$here/py-clients.py" "$T/fake2.kubeconfig" fake expired
    expect_rc 0 "python: after a compaction the watch's 410 surfaces as ApiException(410); relist and watch again"; diag "$(cat "$T/out" "$T/err")"
else
    skip "python: watch window" "python3-kubernetes is not installed"
    skip "python: compaction" "python3-kubernetes is not installed"
fi
run env KUBECONFIG="$T/fake2.kubeconfig" kubectl get pods --chunk-size=2 -o name
expect_eq "$(wc -l <"$T/out")" 6 "kubectl get --chunk-size=2 pages through all 6 pods (limit and continue)"
run env KUBECONFIG="$T/fake2.kubeconfig" kubectl get --raw '/api/v1/namespaces/default/pods?limit=2'
expect_in "$T/out" '"continue":"' "a limited list carries a continue token"

run kubectl get --raw /fake/violations
expect_eq "$(cat "$T/out")" '{"violations":[]}' "every object the fake's controllers wrote passed the CRD schemas"

run kubectl delete namespace "$NS" --timeout=120s
expect_rc 0 "kubectl delete namespace: everything in it goes"
NS_DONE=$NS
NS=""
f=$($PY -c 'import json,sys,urllib.parse; print(urllib.parse.quote(json.dumps({"label": ["io.sbx.k8sfake.namespace=" + sys.argv[1]]})))' "$NS_DONE")
expect_eq "$(dq "/containers/json?all=1&filters=$f" | $PY -c 'import json,sys; print(len(json.load(sys.stdin)))')" 0 \
    "no container of the namespace is left"
vols=$(dq "/volumes" | $PY -c 'import json,sys; print(" ".join(v["Name"] for v in json.load(sys.stdin)["Volumes"] or []))')
case " $vols " in *"_${NS_DONE}_"*) not_ok "no volume of the namespace is left"; diag "$vols" ;; *) ok "no volume of the namespace is left" ;; esac
done_testing
