#!/usr/bin/env bash
# One fake Kubernetes API server (fake-apiserver.py) for the tests, its pods run by an already
# started private dockerd (tests/docker/engines.sh): SBX_TEST_DOCKER_HOST (unix socket path) and
# SBX_TEST_DOCKER_IMAGE from the environment.
#   fake.sh start DIR   make a CA, certificates and tokens in DIR, start the fake on a free port
#                       of 127.0.0.1, write DIR/kubeconfig and DIR/env
#   fake.sh stop DIR    stop it, remove every container and volume it made, remove DIR
# DIR/kubeconfig has four contexts on one cluster (namespace default): "fake" (bearer token,
# allowed everything), "fake-cert" (client certificate, CN=sbx-cert-user), "fake-restricted"
# (a token that may only get, list and watch), "fake-sbx-role" (a token allowed exactly what the
# Role of docs/internals/kubernetes-provider.md allows). DIR/env: SBX_TEST_KUBECONFIG_FAKE, SBX_TEST_KUBE_URL,
# SBX_TEST_KUBE_NAMESPACE, SBX_TEST_KUBE_INSTANCE, SBX_TEST_KUBE_HOST_IMAGE (pods of that image run
# their command on this machine: k8sfake/hostpods.py).
# Optional: SBX_TEST_KUBE_NETNS=/proc/PID/ns/net or /run/netns/NAME (run the fake in that network
# namespace) with SBX_TEST_KUBE_ADDR=IP (listen there instead of 127.0.0.1); SBX_TEST_KUBE_ARGS
# (more fake-apiserver.py options, e.g. --no-crds); SBX_TEST_KUBE_GRACE_CAP (seconds a pod's
# termination grace period may last, default 2); SBX_TEST_KUBE_PYTHON (the interpreter, default
# python3; any python3 >= 3.9).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
usage() { echo "usage: fake.sh start|stop DIR" >&2; exit 2; }
[ $# = 2 ] || usage
cmd=$1
dir=$2
case $dir in /*) ;; *) dir=$(pwd)/$dir ;; esac

dapi() { # dapi METHOD PATH: the dockerd the fake uses
    curl -sf --max-time 60 --unix-socket "$(cat "$dir/docker-host")" -X "$1" "http://d/v1.41$2"
}

certs() {
    local addr=$1
    (
        cd "$dir"
        openssl ecparam -name prime256v1 -genkey -noout -out ca.key 2>/dev/null
        openssl req -x509 -new -key ca.key -subj "/CN=sbx-fake-kube-ca" -days 2 -out ca.crt 2>/dev/null
        openssl ecparam -name prime256v1 -genkey -noout -out server.key 2>/dev/null
        openssl req -new -key server.key -subj "/CN=kube-apiserver" -out server.csr 2>/dev/null
        printf 'subjectAltName=IP:127.0.0.1,IP:%s,DNS:localhost,DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth\n' \
            "$addr" >server.ext
        openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
            -extfile server.ext -out server.crt 2>/dev/null
        openssl ecparam -name prime256v1 -genkey -noout -out client.key 2>/dev/null
        openssl req -new -key client.key -subj "/O=sbx-testers/CN=sbx-cert-user" -out client.csr 2>/dev/null
        printf 'extendedKeyUsage=clientAuth\n' >client.ext
        openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
            -extfile client.ext -out client.crt 2>/dev/null
        rm -f ./*.csr ./*.ext ./*.srl
        chmod 0600 ./*.key
    )
}

start() {
    [ -n "${SBX_TEST_DOCKER_HOST:-}" ] && [ -S "$SBX_TEST_DOCKER_HOST" ] ||
        { echo "fake.sh: SBX_TEST_DOCKER_HOST must name the socket of a running dockerd (tests/docker/engines.sh)" >&2; exit 1; }
    local py=${SBX_TEST_KUBE_PYTHON:-python3}
    HOST_IMAGE=sbx-host.invalid/run-on-host:1
    for p in openssl curl "$py"; do
        command -v "$p" >/dev/null || { echo "fake.sh: '$p' not found" >&2; exit 1; }
    done
    [ ! -e "$dir/env" ] || { echo "fake.sh: '$dir' is in use (fake.sh stop '$dir')" >&2; exit 1; }
    mkdir -p "$dir"
    chmod 0700 "$dir"
    local addr=${SBX_TEST_KUBE_ADDR:-127.0.0.1} inst admin restricted url
    inst=k8sf$(head -c4 /dev/urandom | od -An -tx1 | tr -d ' \n')
    admin=$(head -c24 /dev/urandom | od -An -tx1 | tr -d ' \n')
    restricted=$(head -c24 /dev/urandom | od -An -tx1 | tr -d ' \n')
    sbxrole=$(head -c24 /dev/urandom | od -An -tx1 | tr -d ' \n')
    printf '%s\n' "$SBX_TEST_DOCKER_HOST" >"$dir/docker-host"
    printf '%s\n' "$inst" >"$dir/instance"
    certs "$addr"
    cat >"$dir/tokens.json" <<JSON
{"tokens": [
  {"token": "$admin", "user": "sbx-admin", "groups": ["system:masters"]},
  {"token": "$restricted", "user": "sbx-restricted",
   "rules": [{"verbs": ["get", "list", "watch"], "apiGroups": ["*"], "resources": ["*"]}]},
  {"token": "$sbxrole", "user": "sbx-role",
   "rules": [
    {"verbs": ["create", "get", "list", "watch", "patch", "delete"], "apiGroups": ["agents.x-k8s.io"], "resources": ["sandboxes"]},
    {"verbs": ["create", "get", "list", "watch", "patch", "delete"], "apiGroups": ["extensions.agents.x-k8s.io"], "resources": ["sandboxclaims"]},
    {"verbs": ["get"], "apiGroups": ["extensions.agents.x-k8s.io"], "resources": ["sandboxtemplates"]},
    {"verbs": ["create", "get", "list", "watch", "patch", "delete"], "apiGroups": [""], "resources": ["pods"]},
    {"verbs": ["create", "get"], "apiGroups": [""], "resources": ["pods/exec", "pods/portforward"]},
    {"verbs": ["create", "delete"], "apiGroups": [""], "resources": ["secrets"]},
    {"verbs": ["create", "get", "list", "delete"], "apiGroups": [""], "resources": ["persistentvolumeclaims"]},
    {"verbs": ["list"], "apiGroups": [""], "resources": ["events"]}]}
 ],
 "certificates": {"sbx-cert-user": {}}}
JSON
    chmod 0600 "$dir/tokens.json"
    local run=()
    [ -z "${SBX_TEST_KUBE_NETNS:-}" ] || run=(nsenter "--net=$SBX_TEST_KUBE_NETNS")
    # shellcheck disable=SC2086 # SBX_TEST_KUBE_ARGS is a list of options
    PYTHONDONTWRITEBYTECODE=1 setsid "${run[@]}" "$py" "$here/fake-apiserver.py" --listen "$addr:0" \
        --tls-cert "$dir/server.crt" --tls-key "$dir/server.key" --client-ca "$dir/ca.crt" \
        --tokens "$dir/tokens.json" --docker-host "$SBX_TEST_DOCKER_HOST" --instance "$inst" \
        --grace-cap "${SBX_TEST_KUBE_GRACE_CAP:-2}" --host-image "$HOST_IMAGE" --ready-file "$dir/url" --log "$dir/fake.log" \
        ${SBX_TEST_KUBE_ARGS:-} </dev/null >>"$dir/fake.log" 2>&1 &
    echo $! >"$dir/fake.pid"
    local i
    for ((i = 0; i < 300; i++)); do
        [ -s "$dir/url" ] && break
        kill -0 "$(cat "$dir/fake.pid")" 2>/dev/null || break
        sleep 0.1
    done
    if [ ! -s "$dir/url" ]; then
        echo "fake.sh: the fake API server did not start:" >&2
        tail -n 20 "$dir/fake.log" >&2
        stop
        exit 1
    fi
    url=$(cat "$dir/url")
    local ca cc ck
    ca=$(base64 -w0 <"$dir/ca.crt")
    cc=$(base64 -w0 <"$dir/client.crt")
    ck=$(base64 -w0 <"$dir/client.key")
    cat >"$dir/kubeconfig" <<YAML
apiVersion: v1
kind: Config
clusters:
- name: fake
  cluster:
    server: $url
    certificate-authority-data: $ca
users:
- name: sbx-admin
  user:
    token: $admin
- name: sbx-cert-user
  user:
    client-certificate-data: $cc
    client-key-data: $ck
- name: sbx-restricted
  user:
    token: $restricted
- name: sbx-role
  user:
    token: $sbxrole
contexts:
- name: fake
  context: {cluster: fake, user: sbx-admin, namespace: default}
- name: fake-cert
  context: {cluster: fake, user: sbx-cert-user, namespace: default}
- name: fake-restricted
  context: {cluster: fake, user: sbx-restricted, namespace: default}
- name: fake-sbx-role
  context: {cluster: fake, user: sbx-role, namespace: default}
current-context: fake
YAML
    chmod 0600 "$dir/kubeconfig"
    {
        echo "SBX_TEST_KUBECONFIG_FAKE=$dir/kubeconfig"
        echo "SBX_TEST_KUBE_URL=$url"
        echo "SBX_TEST_KUBE_NAMESPACE=default"
        echo "SBX_TEST_KUBE_INSTANCE=$inst"
        echo "SBX_TEST_KUBE_HOST_IMAGE=$HOST_IMAGE"
    } >"$dir/env.tmp"
    mv "$dir/env.tmp" "$dir/env"
    echo "fake.sh: fake API server at $url ($dir)" >&2
}

stop() {
    [ -d "$dir" ] || return 0
    local pid i inst
    if [ -f "$dir/fake.pid" ]; then
        pid=$(cat "$dir/fake.pid")
        kill -TERM "$pid" 2>/dev/null || true
        for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
    fi
    if [ -f "$dir/instance" ] && [ -f "$dir/docker-host" ] && [ -S "$(cat "$dir/docker-host")" ]; then
        inst=$(cat "$dir/instance")
        local filt ids id
        filt=$(python3 -c 'import json,sys,urllib.parse; print(urllib.parse.quote(json.dumps({"label": ["io.sbx.k8sfake.instance=" + sys.argv[1]]})))' "$inst")
        ids=$(dapi GET "/containers/json?all=1&filters=$filt" |
            python3 -c 'import json,sys; [print(c["Id"]) for c in json.load(sys.stdin)]') || ids=""
        for id in $ids; do dapi DELETE "/containers/$id?force=1&v=1" >/dev/null 2>&1 || true; done
        ids=$(dapi GET "/volumes?filters=$filt" |
            python3 -c 'import json,sys; [print(v["Name"]) for v in json.load(sys.stdin)["Volumes"] or []]') || ids=""
        for id in $ids; do dapi DELETE "/volumes/$id?force=1" >/dev/null 2>&1 || true; done
    fi
    rm -rf "$dir"
}

case $cmd in
start) start ;;
stop) stop ;;
*) usage ;;
esac
