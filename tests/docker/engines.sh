#!/usr/bin/env bash
# Private container engines for the Docker provider's tests: a dockerd and podman's
# Docker-compatible service, each with all of its state under DIR, on sockets in DIR, with the
# test image (mkimage.sh) in both. Needs root.
#   engines.sh start DIR     start both, wait for them, build the image, write DIR/env
#                            (SBX_TEST_DOCKER_HOST, SBX_TEST_PODMAN_HOST, SBX_TEST_DOCKER_IMAGE)
#   engines.sh start-tls DIR a remote engine: a dockerd --tlsverify listening on tcp:// at an
#                            address inside a network namespace made here, joined by a veth
#                            pair to a second namespace for its clients; certificates made by
#                            openssl now (tests/wire/mkcerts.sh, in DIR/tls); the test image;
#                            DIR/env gets SBX_TEST_DOCKER_TLS_HOST (tcp://ADDR:2376),
#                            SBX_TEST_DOCKER_TLS_CERTS (the certificates' directory: ca.crt,
#                            client.crt/.key, expired.crt/.key, other-ca.crt, other-client.*),
#                            SBX_TEST_DOCKER_TLS_NETNS (the clients' namespace),
#                            SBX_TEST_DOCKER_TLS_SOCKET (its unix socket, for the tests' own
#                            look at what the engine holds) and SBX_TEST_DOCKER_IMAGE
#   engines.sh stop DIR      remove every container, stop the engines, delete the namespaces,
#                            unmount and remove DIR
# DIR should be short (containerd's socket path under it must fit in 108 bytes).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
image=sbx-test:1
ping_wait=30 # seconds an engine may take to answer /_ping

usage() { echo "usage: engines.sh start|start-tls|stop DIR" >&2; exit 2; }
[ $# = 2 ] || usage
cmd=$1
dir=$2
case $dir in /*) ;; *) dir=$(pwd)/$dir ;; esac

api() { # api SOCK METHOD PATH
    curl -sf --max-time 30 --unix-socket "$1" -X "$2" "http://d/v1.41$3"
}

wait_ping() { # wait_ping SOCK PID: 0 once it answers, 1 if PID died or time ran out
    local i
    for ((i = 0; i < ping_wait * 10; i++)); do
        curl -sf --max-time 2 --unix-socket "$1" http://d/_ping >/dev/null 2>&1 && return 0
        kill -0 "$2" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

fail() {
    echo "engines: $*" >&2
    for f in "$dir"/dockerd.log "$dir"/podman.log; do
        [ -f "$f" ] && { echo "--- $f (last lines)" >&2; tail -n 15 "$f" >&2; }
    done
    exit 1
}

start_dockerd() { # start_dockerd DRIVER: 0 when it answers
    local pid
    dockerd --data-root "$dir/dk/data" --exec-root "$dir/dk/exec" --pidfile "$dir/dk/dockerd.pid" \
        -H "unix://$dir/docker.sock" --bridge=none --iptables=false --ip6tables=false \
        --ip-masq=false --storage-driver="$1" >>"$dir/dockerd.log" 2>&1 &
    pid=$!
    echo "$pid" >"$dir/dockerd.started"
    wait_ping "$dir/docker.sock" "$pid" && return 0
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    return 1
}

start() {
    [ "$(id -u)" = 0 ] || { echo "engines: needs root" >&2; exit 1; }
    for p in dockerd podman curl; do
        command -v "$p" >/dev/null || { echo "engines: '$p' not found (scripts/install-deps)" >&2; exit 1; }
    done
    [ ! -e "$dir/env" ] || { echo "engines: '$dir' is in use (engines.sh stop '$dir')" >&2; exit 1; }
    mkdir -p "$dir"/dk/{data,exec} "$dir"/pm/{root,run,tmp,net}
    chmod 0711 "$dir"
    if ! start_dockerd overlay2; then
        echo "engines: dockerd with overlay2 failed, trying vfs" >&2
        rm -rf "$dir/dk/data" "$dir/docker.sock" && mkdir -p "$dir/dk/data"
        start_dockerd vfs || fail "dockerd did not answer within ${ping_wait} s"
    fi
    podman --root "$dir/pm/root" --runroot "$dir/pm/run" --tmpdir "$dir/pm/tmp" \
        --cgroup-manager=cgroupfs --events-backend=file \
        --network-backend=netavark --network-config-dir="$dir/pm/net" \
        system service --time=0 "unix://$dir/podman.sock" >>"$dir/podman.log" 2>&1 &
    echo $! >"$dir/podman.started"
    wait_ping "$dir/podman.sock" "$(cat "$dir/podman.started")" ||
        fail "podman's service did not answer within ${ping_wait} s"
    "$here/mkimage.sh" "$dir/docker.sock" "$image" >/dev/null || fail "cannot build '$image' in dockerd"
    "$here/mkimage.sh" "$dir/podman.sock" "$image" >/dev/null || fail "cannot build '$image' in podman"
    {
        echo "SBX_TEST_DOCKER_HOST=$dir/docker.sock"
        echo "SBX_TEST_PODMAN_HOST=$dir/podman.sock"
        echo "SBX_TEST_DOCKER_IMAGE=$image"
    } >"$dir/env.tmp"
    mv "$dir/env.tmp" "$dir/env"
    echo "engines: dockerd and podman up in $dir (image $image)" >&2
}

# ---- a remote engine: dockerd --tlsverify on tcp:// inside a network namespace ----

tls_port=2376

start_tls() {
    [ "$(id -u)" = 0 ] || { echo "engines: needs root" >&2; exit 1; }
    for p in dockerd curl ip nsenter openssl; do
        command -v "$p" >/dev/null || { echo "engines: '$p' not found (scripts/install-deps)" >&2; exit 1; }
    done
    [ ! -e "$dir/env" ] || { echo "engines: '$dir' is in use (engines.sh stop '$dir')" >&2; exit 1; }
    mkdir -p "$dir"/dk/{data,exec}
    chmod 0711 "$dir"
    local tag net eng cli ve vc addr
    tag=$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
    net=$(( $(od -An -N1 -tu1 /dev/urandom) ))
    eng=sbxe-$tag cli=sbxc-$tag ve=sbxve$tag vc=sbxvc$tag
    addr=10.213.$net.1
    # Recorded first: stop removes whatever of this was made, even after a failure.
    printf '%s\n%s\n' "$eng" "$cli" >"$dir/netns"
    ip netns add "$eng" && ip netns add "$cli" || fail "cannot make network namespaces"
    ip link add "$ve" type veth peer name "$vc" || fail "cannot make a veth pair"
    ip link set "$ve" netns "$eng" && ip link set "$vc" netns "$cli" || fail "cannot move the veth ends"
    ip -n "$eng" addr add "$addr/30" dev "$ve" && ip -n "$cli" addr add "10.213.$net.2/30" dev "$vc" ||
        fail "cannot address the veth ends"
    for ns in "$eng" "$cli"; do ip -n "$ns" link set lo up; done
    ip -n "$eng" link set "$ve" up && ip -n "$cli" link set "$vc" up || fail "cannot bring the veth pair up"
    "$here/../wire/mkcerts.sh" "$dir/tls" "$addr" || fail "cannot make certificates"
    local pid
    nsenter --net="/run/netns/$eng" dockerd --data-root "$dir/dk/data" --exec-root "$dir/dk/exec" \
        --pidfile "$dir/dk/dockerd.pid" -H "unix://$dir/docker.sock" -H "tcp://$addr:$tls_port" \
        --tlsverify --tlscacert "$dir/tls/ca.crt" --tlscert "$dir/tls/server.crt" \
        --tlskey "$dir/tls/server.key" --bridge=none --iptables=false --ip6tables=false \
        --ip-masq=false --storage-driver=overlay2 >>"$dir/dockerd.log" 2>&1 &
    pid=$!
    echo "$pid" >"$dir/dockerd.started"
    wait_ping "$dir/docker.sock" "$pid" || fail "the TLS dockerd did not answer within ${ping_wait} s"
    "$here/mkimage.sh" "$dir/docker.sock" "$image" >/dev/null || fail "cannot build '$image' in the TLS dockerd"
    {
        echo "SBX_TEST_DOCKER_TLS_HOST=tcp://$addr:$tls_port"
        echo "SBX_TEST_DOCKER_TLS_CERTS=$dir/tls"
        echo "SBX_TEST_DOCKER_TLS_NETNS=$cli"
        echo "SBX_TEST_DOCKER_TLS_SOCKET=$dir/docker.sock"
        echo "SBX_TEST_DOCKER_IMAGE=$image"
    } >"$dir/env.tmp"
    mv "$dir/env.tmp" "$dir/env"
    echo "engines: dockerd --tlsverify up at tcp://$addr:$tls_port (namespace $eng; clients in $cli)" >&2
}

delete_netns() {
    local ns
    [ -f "$dir/netns" ] || return 0
    while read -r ns; do
        [ -n "$ns" ] || continue
        # the veth pair goes with the namespace that holds its end
        ip netns del "$ns" 2>/dev/null || true
    done <"$dir/netns"
}

remove_containers() { # remove_containers SOCK
    local ids id
    [ -S "$1" ] || return 0
    ids=$(api "$1" GET "/containers/json?all=1" 2>/dev/null |
        python3 -c 'import json,sys; [print(c["Id"]) for c in json.load(sys.stdin)]' 2>/dev/null) || return 0
    for id in $ids; do
        api "$1" DELETE "/containers/$id?force=1&v=1" >/dev/null 2>&1 || true
    done
}

stop_pids() { # stop_pids PID...: TERM to all, up to 15 s for all of them, then KILL the rest
    local pid i left
    [ $# -gt 0 ] || return 0
    kill -TERM "$@" 2>/dev/null || true
    for ((i = 0; i < 150; i++)); do
        left=()
        for pid in "$@"; do kill -0 "$pid" 2>/dev/null && left+=("$pid"); done
        [ ${#left[@]} -gt 0 ] || return 0
        set -- "${left[@]}"
        sleep 0.1
    done
    kill -KILL "$@" 2>/dev/null || true
    sleep 0.5
}

# Processes that name DIR on their command line: the engines' containerd, shims and conmons.
# Only ours: nothing else is started with a path under DIR.
dir_pids() {
    local p
    for p in /proc/[0-9]*; do
        tr '\0' ' ' 2>/dev/null <"$p/cmdline" | grep -qF -- " $dir/" && echo "${p#/proc/}"
    done
    return 0
}

unmount_all() { # every mount point at or under DIR, deepest first
    local m i
    for ((i = 0; i < 5; i++)); do
        m=$(awk -v d="$dir" '$5 == d || index($5, d "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r)
        [ -n "$m" ] || return 0
        while read -r p; do umount "$p" 2>/dev/null || umount -l "$p" 2>/dev/null || true; done <<<"$m"
    done
    [ -z "$(awk -v d="$dir" 'index($5, d "/") == 1' /proc/self/mountinfo)" ]
}

stop() {
    [ -d "$dir" ] || return 0
    remove_containers "$dir/docker.sock"
    remove_containers "$dir/podman.sock"
    local f engines=()
    for f in dockerd.started podman.started; do
        [ -f "$dir/$f" ] && engines+=("$(cat "$dir/$f")")
    done
    stop_pids "${engines[@]}"
    # shellcheck disable=SC2046 # one pid per word
    stop_pids $(dir_pids)
    delete_netns
    unmount_all || echo "engines: mounts left under '$dir'" >&2
    rm -rf --one-file-system "$dir"
    [ ! -e "$dir" ] || { echo "engines: cannot remove '$dir'" >&2; exit 1; }
}

case $cmd in
start) start ;;
start-tls) start_tls ;;
stop) stop ;;
*) usage ;;
esac
