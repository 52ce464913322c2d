#!/usr/bin/env bash
# A real two-member LXD cluster for the LXD provider's tests, with all of its state under DIR.
# Each member is one LXD daemon in its own network namespace (a "host"); the two namespaces are
# joined by a veth pair whose addresses exist only inside them. Needs root.
#   cluster.sh start DIR                 start both members, form the cluster, import the test
#                                        image, trust a client certificate, write DIR/env
#   cluster.sh stop DIR                  delete every instance and image, stop both daemons and
#                                        everything they started, unmount, delete the namespaces
#                                        and remove DIR; checks that nothing is left
#   cluster.sh restart-member DIR NAME   start member NAME's daemon again after it died
#   cluster.sh image-python DIR          import the test image with python3 as sbx-test-py
#                                        (once: nothing is done when it is there)
# DIR/env (shell-sourceable) names everything a client needs; tests/lxd/README.md lists it.
# stop is idempotent and cleans up after a start that failed half-way (start calls it then).
# DIR should be short: the members' unix sockets live under it (108 bytes at most).
# SBX_TEST_LXD_WAIT: seconds a member may take to answer (default 60).
set -euo pipefail
# The caller's LXD_DIR would make this script's own subshells look like the cluster's processes
# (/proc/PID/environ keeps what a process started with), and LXD_CONF would point lxc elsewhere:
# start again without them; every lxc and lxd below gets both explicitly.
if [ -n "${LXD_DIR+x}${LXD_CONF+x}" ]; then exec env -u LXD_DIR -u LXD_CONF bash "$0" "$@"; fi
here=$(cd "$(dirname "$0")" && pwd)
member_wait=${SBX_TEST_LXD_WAIT:-60} # seconds a member's daemon may take to answer
cmd_wait=60    # seconds any one lxc / lxd init command may take
members=(n1 n2)
project=sbx-test
profile=sbx
image=sbx-test

usage() { echo "usage: cluster.sh start|stop|image-python DIR | restart-member DIR NAME" >&2; exit 2; }
[ $# -ge 2 ] || usage
cmd=$1
dir=$2
case $dir in /*) ;; *) dir=$(pwd)/$dir ;; esac
dir=${dir%/}

say() { echo "lxd-cluster: $*" >&2; }

# State of a cluster, written before anything is made so that stop finds it: tag (names the
# namespaces and veths), net (the third octet of 10.77.X.0/24).
tag="" net="" image_pid=""
# shellcheck source=/dev/null
load_state() { [ -f "$dir/state" ] && . "$dir/state"; return 0; }
ns_of() { echo "sbxlxd-$tag-$1"; }  # ns_of MEMBER
addr_of() { echo "10.77.$net.${1#n}"; } # addr_of MEMBER
veth_of() { [ "$1" = n1 ] && echo "sbxl${tag}a" || echo "sbxl${tag}b"; }

lxc_at() { # lxc_at MEMBER ARGS...: the lxc client on MEMBER's unix socket, bounded in time
    local m=$1
    shift
    LXD_DIR=$dir/$m LXD_CONF=$dir/lxc timeout -s KILL "$cmd_wait" lxc "$@"
}

log_tails() {
    local m
    for m in "${members[@]}"; do
        [ -f "$dir/$m.log" ] && { echo "--- $dir/$m.log (last lines)"; tail -n 15 "$dir/$m.log"; } >&2
    done
    return 0
}

fail() { # fail MSG: say why with the members' logs and exit 1 (a failed start removes all)
    say "$*"
    log_tails
    exit 1
}

started=0
start_exit() { # on any exit of start before the cluster is up: remove what was made
    local rc=$?
    [ "$started" = 1 ] && return 0
    [ "$rc" != 0 ] || rc=1
    say "start failed; removing what was made"
    [ -z "$image_pid" ] || kill "$image_pid" 2>/dev/null || true
    stop || true
    exit "$rc"
}

# --- network namespaces -------------------------------------------------------------------

subnet_in_use() { # subnet_in_use X: 10.77.X.0/24 is on an address or route here or in a netns
    local ns
    {
        ip -o -4 addr show
        ip -4 route show
        for ns in $(ip netns list | awk '{print $1}'); do ip -n "$ns" -o -4 addr show 2>/dev/null; done
    } | grep -q "10\.77\.$1\."
}

make_net() {
    local i x m
    for ((i = 0; i < 30; i++)); do
        x=$((RANDOM % 254 + 1))
        subnet_in_use "$x" || break
    done
    subnet_in_use "$x" && fail "no free /24 found in 10.77.0.0/16"
    tag=$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
    net=$x
    printf 'tag=%s\nnet=%s\n' "$tag" "$net" >"$dir/state"
    for m in "${members[@]}"; do
        ip netns add "$(ns_of "$m")" || fail "cannot make network namespace '$(ns_of "$m")'"
        ip -n "$(ns_of "$m")" link set lo up
    done
    ip link add "$(veth_of n1)" netns "$(ns_of n1)" type veth \
        peer name "$(veth_of n2)" netns "$(ns_of n2)" || fail "cannot make veth pair '$(veth_of n1)'"
    for m in "${members[@]}"; do
        ip -n "$(ns_of "$m")" addr add "$(addr_of "$m")/24" dev "$(veth_of "$m")"
        ip -n "$(ns_of "$m")" link set "$(veth_of "$m")" up
    done
}

# --- certificates ---------------------------------------------------------------------------

make_certs() {
    mkdir -p "$dir/tls" "$dir/lxc/servercerts"
    # The cluster's own certificate, valid for both members' addresses, so that clients can
    # verify it as a CA (or pin it) instead of LXD's default one (names the machine only).
    cat >"$dir/tls/server.cnf" <<EOF
[req]
distinguished_name = dn
[dn]
[ext]
subjectAltName = IP:$(addr_of n1), IP:$(addr_of n2)
basicConstraints = critical, CA:true
keyUsage = digitalSignature, keyCertSign
extendedKeyUsage = serverAuth, clientAuth
EOF
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:secp384r1 -nodes -days 30 \
        -subj /CN=sbx-test-lxd-cluster -config "$dir/tls/server.cnf" -extensions ext \
        -keyout "$dir/tls/server.key" -out "$dir/tls/server.crt" 2>"$dir/tls/openssl.log" ||
        fail "cannot make the cluster certificate: $(cat "$dir/tls/openssl.log")"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:secp384r1 -nodes -days 30 \
        -subj /CN=sbx-test-harness -keyout "$dir/tls/client.key" -out "$dir/tls/client.crt" \
        2>"$dir/tls/openssl.log" || fail "cannot make the client certificate: $(cat "$dir/tls/openssl.log")"
    chmod 0600 "$dir/tls/server.key" "$dir/tls/client.key"
    # LXD_CONF for the lxc client: the local unix socket (LXD_DIR) or the members over https
    # with the client certificate, the cluster certificate pinned.
    cp "$dir/tls/client.crt" "$dir/tls/client.key" "$dir/lxc/"
    cp "$dir/tls/server.crt" "$dir/lxc/servercerts/n1.crt"
    cp "$dir/tls/server.crt" "$dir/lxc/servercerts/n2.crt"
    {
        echo "default-remote: local"
        echo "remotes:"
        for m in "${members[@]}"; do
            echo "  $m:"
            echo "    addr: https://$(addr_of "$m"):8443"
            echo "    protocol: lxd"
            echo "    auth_type: tls"
        done
    } >"$dir/lxc/config.yml"
}

# --- daemons --------------------------------------------------------------------------------

start_member() { # start_member MEMBER: its daemon, in its namespace, in the background
    local m=$1
    mkdir -p "$dir/$m"
    chmod 0711 "$dir/$m"
    # A clean environment: nothing of the caller's (proxies, test variables) reaches LXD.
    env -i PATH="$PATH" LXD_DIR="$dir/$m" setsid nsenter --net="/run/netns/$(ns_of "$m")" \
        lxd --group root --verbose </dev/null >>"$dir/$m.log" 2>&1 &
    echo $! >"$dir/$m.pid"
}

wait_member() { # wait_member MEMBER: until its API says it is ready (what `lxd waitready` asks)
    local m=$1 pid i st=0
    pid=$(cat "$dir/$m.pid")
    for ((i = 0; i < member_wait * 20; i++)); do
        curl -sf --max-time 2 --unix-socket "$dir/$m/unix.socket" http://lxd/internal/ready \
            >/dev/null 2>&1 && return 0
        if ! kill -0 "$pid" 2>/dev/null; then
            wait "$pid" || st=$?
            fail "lxd member $m exited during start-up (exit status $st)"
        fi
        sleep 0.05
    done
    fail "lxd member $m did not answer within $member_wait s"
}

wait_online() { # wait_online: until both members are ONLINE as member n1 sees them
    local i
    for ((i = 0; i < member_wait * 10; i++)); do
        [ "$(lxc_at n1 cluster list -f csv 2>/dev/null | grep -c ',ONLINE,')" = "${#members[@]}" ] &&
            return 0
        sleep 0.1
    done
    fail "the cluster did not show ${#members[@]} members ONLINE within $member_wait s: $(lxc_at n1 cluster list -f csv 2>&1)"
}

form_cluster() {
    local token
    cat >"$dir/n1.yaml" <<EOF
config:
  core.https_address: $(addr_of n1):8443
  cluster.https_address: $(addr_of n1):8443
  images.auto_update_interval: "0"
storage_pools:
- name: default
  driver: dir
profiles:
- name: default
  devices:
    root:
      path: /
      pool: default
      type: disk
cluster:
  server_name: n1
  enabled: true
EOF
    LXD_DIR=$dir/n1 timeout -s KILL "$cmd_wait" lxd init --preseed <"$dir/n1.yaml" >>"$dir/init.log" 2>&1 ||
        fail "lxd init of member n1 failed: $(tail -n 5 "$dir/init.log")"
    lxc_at n1 cluster update-certificate "$dir/tls/server.crt" "$dir/tls/server.key" \
        >>"$dir/init.log" 2>&1 || fail "cannot install the cluster certificate: $(tail -n 5 "$dir/init.log")"
    token=$(lxc_at n1 cluster add n2 --quiet 2>>"$dir/init.log") ||
        fail "cannot make a join token for n2: $(tail -n 5 "$dir/init.log")"
    cat >"$dir/n2.yaml" <<EOF
cluster:
  enabled: true
  server_name: n2
  server_address: $(addr_of n2):8443
  cluster_token: $token
EOF
    chmod 0600 "$dir/n2.yaml"
    # Inside n2's namespace: the joining side fetches the leader's certificate itself.
    LXD_DIR=$dir/n2 timeout -s KILL "$cmd_wait" nsenter --net="/run/netns/$(ns_of n2)" \
        lxd init --preseed <"$dir/n2.yaml" >>"$dir/init.log" 2>&1 ||
        fail "member n2 could not join: $(tail -n 5 "$dir/init.log")"
    rm -f "$dir/n2.yaml"
    # Trusted once both are members: every member hears of it (n2 would not, had it been added
    # before n2 joined, until it reloads its certificates).
    lxc_at n1 config trust add "$dir/tls/client.crt" --name sbx-test-harness >>"$dir/init.log" 2>&1 ||
        fail "cannot trust the client certificate: $(tail -n 5 "$dir/init.log")"
}

wait_trusted() { # wait_trusted: until every member answers the client certificate as trusted
    local m i
    for m in "${members[@]}"; do
        for ((i = 0; i < member_wait * 10; i++)); do
            nsenter --net="/run/netns/$(ns_of "$m")" curl -s --max-time 5 \
                --cacert "$dir/tls/server.crt" --cert "$dir/tls/client.crt" --key "$dir/tls/client.key" \
                "https://$(addr_of "$m"):8443/1.0" 2>/dev/null | grep -q '"auth":"trusted"' && break
            sleep 0.1
        done
        [ "$i" -lt $((member_wait * 10)) ] ||
            fail "member $m did not trust the client certificate over https within $member_wait s"
    done
}

# A project with its own profiles (the images stay shared with the default project, so one
# import serves both) and a profile with a root disk and no network device: sandboxes have no
# network unless asked for.
make_project() {
    local p
    lxc_at n1 project create "$project" -c features.images=false -c features.profiles=true \
        >>"$dir/init.log" 2>&1 || fail "cannot make project '$project': $(tail -n 5 "$dir/init.log")"
    lxc_at n1 profile create "$profile" --project "$project" >>"$dir/init.log" 2>&1 ||
        fail "cannot make profile '$profile': $(tail -n 5 "$dir/init.log")"
    for p in default "$profile"; do
        printf 'description: sbx test sandboxes (no network)\nconfig: {}\ndevices:\n  root:\n    path: /\n    pool: default\n    type: disk\n' |
            lxc_at n1 profile edit "$p" --project "$project" >>"$dir/init.log" 2>&1 ||
            fail "cannot set profile '$p' of project '$project': $(tail -n 5 "$dir/init.log")"
    done
}

# The test image, from Debian's busybox-static (no image server is reachable): busybox init
# with a one-line inittab as /sbin/init, every applet at its usual path, root and a non-root
# user (mkimage.py). One import into the cluster, under an alias.
build_image() { # in the background while the daemons start; import_image waits for it
    python3 "$here/mkimage.py" "$(command -v busybox || echo /bin/busybox)" "$dir/image.tar" \
        2>"$dir/mkimage.log" &
    image_pid=$!
}

import_image() {
    wait "$image_pid" || fail "cannot build the test image: $(tail -n 5 "$dir/mkimage.log")"
    rm -f "$dir/mkimage.log"
    lxc_at n1 image import "$dir/image.tar" --alias "$image" >>"$dir/init.log" 2>&1 ||
        fail "cannot import the test image: $(tail -n 5 "$dir/init.log")"
    rm -f "$dir/image.tar"
}

write_env() {
    local m M fp pin
    fp=$(openssl x509 -in "$dir/tls/server.crt" -outform DER | sha256sum | cut -d' ' -f1)
    pin=$(openssl x509 -in "$dir/tls/server.crt" -noout -pubkey | openssl pkey -pubin -outform DER |
        openssl dgst -sha256 -binary | base64)
    {
        echo "SBX_TEST_LXD_DIR=$dir"
        echo "SBX_TEST_LXD_MEMBERS='${members[*]}'"
        for m in "${members[@]}"; do
            M=${m^^}
            echo "SBX_TEST_LXD_${M}_NETNS=$(ns_of "$m")"
            echo "SBX_TEST_LXD_${M}_NETNS_PATH=/run/netns/$(ns_of "$m")"
            echo "SBX_TEST_LXD_${M}_LXD_DIR=$dir/$m"
            echo "SBX_TEST_LXD_${M}_SOCKET=$dir/$m/unix.socket"
            echo "SBX_TEST_LXD_${M}_ADDR=$(addr_of "$m")"
            echo "SBX_TEST_LXD_${M}_URL=https://$(addr_of "$m"):8443"
            echo "SBX_TEST_LXD_${M}_PIDFILE=$dir/$m.pid"
        done
        echo "SBX_TEST_LXD_CLIENT_CERT=$dir/tls/client.crt"
        echo "SBX_TEST_LXD_CLIENT_KEY=$dir/tls/client.key"
        echo "SBX_TEST_LXD_SERVER_CERT=$dir/tls/server.crt"
        echo "SBX_TEST_LXD_SERVER_FINGERPRINT=$fp"
        echo "SBX_TEST_LXD_SERVER_PUBKEY=sha256//$pin"
        echo "SBX_TEST_LXD_CONF=$dir/lxc"
        echo "SBX_TEST_LXD_IMAGE=$image"
        echo "SBX_TEST_LXD_PROJECT=$project"
        echo "SBX_TEST_LXD_PROFILE=$profile"
        echo "SBX_TEST_LXD_USER=user"
    } >"$dir/env.tmp"
    mv "$dir/env.tmp" "$dir/env"
}

# Where start-up time goes: DIR/start-times ("phase seconds" lines) and the summary line.
t_last=""
phase() { # phase NAME: the time since the previous phase is NAME's
    local now=$EPOCHREALTIME
    awk -v n="$1" -v a="$t_last" -v b="$now" 'BEGIN { printf "%s %.3f\n", n, b - a }' >>"$dir/start-times"
    t_last=$now
}

start() {
    local p m t0=$EPOCHREALTIME
    [ "$(id -u)" = 0 ] || { say "needs root"; exit 1; }
    for p in lxd lxc nsenter setsid ip openssl curl tar timeout python3; do
        command -v "$p" >/dev/null || { say "'$p' not found (scripts/install-deps)"; exit 1; }
    done
    command -v busybox >/dev/null || [ -x /bin/busybox ] ||
        { say "busybox not found (apt-get install busybox-static)"; exit 1; }
    [ ! -e "$dir/state" ] || { say "'$dir' is in use (cluster.sh stop '$dir')"; exit 1; }
    [ ${#dir} -le 80 ] || { say "'$dir' is too long for the members' unix sockets"; exit 1; }
    mkdir -p "$dir"
    chmod 0711 "$dir"
    trap start_exit EXIT
    trap 'exit 130' INT TERM
    t_last=$t0
    make_net
    phase network
    make_certs
    phase certificates
    for m in "${members[@]}"; do start_member "$m"; done
    build_image
    for m in "${members[@]}"; do wait_member "$m"; done
    phase daemons
    form_cluster
    wait_online
    phase cluster
    wait_trusted
    phase trust
    make_project
    phase project
    import_image
    phase image-import
    write_env
    started=1
    say "members ${members[*]} up in $dir ($(addr_of n1), $(addr_of n2); image $image) in" \
        "$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }') s:" \
        "$(awk '{ printf "%s%s %.2f", (NR > 1 ? ", " : ""), $1, $2 }' "$dir/start-times")"
}

restart_member() { # restart_member MEMBER
    local m=$1 pid
    load_state
    [ -n "$tag" ] || fail "'$dir' holds no cluster"
    case " ${members[*]} " in *" $m "*) ;; *) fail "no member '$m' (members: ${members[*]})" ;; esac
    pid=$(cat "$dir/$m.pid" 2>/dev/null || true)
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && fail "member $m is running (pid $pid)"
    start_member "$m"
    wait_member "$m"
    wait_online
}

# --- stop -----------------------------------------------------------------------------------

# Processes of this cluster: the daemons and their helpers (forkstart, forkexec, forkfile, the
# LXC monitors...) all carry LXD_DIR=DIR/<member> in their environment or DIR on their command
# line. Container payloads carry neither: they are children of their monitor. This script and
# its callers (whose command lines may name DIR) are not.
dir_pids() {
    local self=" " p=$$
    while [ "$p" -gt 1 ]; do
        self="$self$p "
        p=$(awk '/^PPid:/ {print $2}' "/proc/$p/status" 2>/dev/null || echo 0)
    done
    {
        grep -lzsx -- "LXD_DIR=$dir/n[0-9]*" /proc/[0-9]*/environ
        grep -lzsF -- "$dir/" /proc/[0-9]*/cmdline
    } | cut -d/ -f3 | sort -un | while read -r p; do
        case $self in *" $p "*) ;; *) echo "$p" ;; esac
    done
    return 0
}

monitor_pids() { # the LXC monitors of this cluster's containers
    # A regular expression that its own grep's command line does not match.
    grep -lzs -- "^\[lxc monitor\] $dir/" /proc/[0-9]*/cmdline | cut -d/ -f3
    return 0
}

children_of() { # children_of PID...
    local p
    for p in "$@"; do cat "/proc/$p/task/"*/children 2>/dev/null; done | tr ' ' '\n' | grep . || true
}

stop_pids() { # stop_pids SECONDS PID...: TERM to all, up to SECONDS for all, then KILL the rest
    local wait=$1 pid i alive
    shift
    [ $# -gt 0 ] || return 0
    kill -TERM "$@" 2>/dev/null || true
    for ((i = 0; i < wait * 10; i++)); do
        alive=()
        for pid in "$@"; do kill -0 "$pid" 2>/dev/null && alive+=("$pid"); done
        [ ${#alive[@]} -gt 0 ] || return 0
        set -- "${alive[@]}"
        sleep 0.1
    done
    kill -KILL "$@" 2>/dev/null || true
    sleep 0.2
}

member_alive() { # member_alive MEMBER: its daemon answers on its socket
    local pid
    pid=$(cat "$dir/$1.pid" 2>/dev/null) || return 1
    kill -0 "$pid" 2>/dev/null &&
        curl -sf --max-time 5 --unix-socket "$dir/$1/unix.socket" http://lxd/1.0 >/dev/null 2>&1
}

delete_through_api() { # every instance and image, through a member that answers
    local m via="" alive=() name proj loc
    for m in "${members[@]}"; do
        member_alive "$m" && alive+=("$m")
    done
    [ ${#alive[@]} -gt 0 ] || return 0
    via=${alive[0]}
    curl -sf --max-time 20 --unix-socket "$dir/$via/unix.socket" \
        "http://lxd/1.0/instances?all-projects=true&recursion=1" 2>/dev/null |
        python3 -c 'import json,sys
for i in json.load(sys.stdin)["metadata"]:
    print(i["name"], i["project"], i["location"])' 2>/dev/null >"$dir/instances.left" || true
    while read -r name proj loc; do
        # One on a member that does not answer cannot be deleted: its processes are killed below.
        case " ${alive[*]} " in *" $loc "*) ;; *) continue ;; esac
        LXD_DIR=$dir/$via LXD_CONF=$dir/lxc timeout -s KILL 30 \
            lxc delete --force "$name" --project "$proj" >/dev/null 2>&1 ||
            say "cannot delete instance '$name' (project '$proj')"
    done <"$dir/instances.left"
    curl -sf --max-time 20 --unix-socket "$dir/$via/unix.socket" \
        "http://lxd/1.0/images?all-projects=true&recursion=1" 2>/dev/null |
        python3 -c 'import json,sys
for i in json.load(sys.stdin)["metadata"]:
    print(i["fingerprint"], i.get("project", "default"))' 2>/dev/null >"$dir/images.left" || true
    while read -r name proj; do
        LXD_DIR=$dir/$via LXD_CONF=$dir/lxc timeout -s KILL 30 \
            lxc image delete "$name" --project "$proj" >/dev/null 2>&1 ||
            say "cannot delete image '$name'"
    done <"$dir/images.left"
}

unmount_all() { # every mount point at or under DIR, deepest first
    local m i p
    for ((i = 0; i < 5; i++)); do
        m=$(awk -v d="$dir" '$5 == d || index($5, d "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r)
        [ -n "$m" ] || return 0
        while read -r p; do umount "$p" 2>/dev/null || umount -l "$p" 2>/dev/null || true; done <<<"$m"
    done
    [ -z "$(awk -v d="$dir" '$5 == d || index($5, d "/") == 1' /proc/self/mountinfo)" ]
}

# LXC names a container's cgroups lxc.payload.NAME and lxc.monitor.NAME (NAME is
# PROJECT_INSTANCE outside the default project) and leaves lxc.pivot behind; a container killed
# with its monitor leaves its groups too. Only empty groups can be removed.
remove_cgroups() {
    local n c d
    while read -r n; do
        for c in /sys/fs/cgroup/*/; do
            for d in "${c}lxc.payload.$n" "${c}lxc.monitor.$n"; do
                [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
            done
        done
    done <"$dir/instance.names"
    # lxc.pivot is shared by every LXC on the machine: only when no container runs.
    if ! pgrep -f '^\[lxc monitor\] ' >/dev/null; then
        rmdir /sys/fs/cgroup/*/lxc.pivot 2>/dev/null || true
    fi
    return 0
}

remove_locks() { # liblxc's lock directories for DIR's container paths
    local d=/run/lxc/lock$dir
    rm -rf "$d"
    d=${d%/*}
    while [ "$d" != /run ] && [ -n "$d" ]; do
        rmdir "$d" 2>/dev/null || break
        d=${d%/*}
    done
    return 0
}

stop() {
    local m f p c daemons=() left=""
    set +e # every step is tried whatever the ones before it did; the checks at the end decide
    [ -d "$dir" ] || return 0
    load_state
    for f in "$dir"/n*/containers/*; do
        if [ -L "$f" ] || [ -e "$f" ]; then echo "${f##*/}"; fi
    done >"$dir/instance.names"
    delete_through_api
    for m in "${members[@]}"; do
        [ -f "$dir/$m.pid" ] && daemons+=("$(cat "$dir/$m.pid")")
    done
    stop_pids 30 "${daemons[@]}"
    # Containers left running (on a member that did not answer): kill their payloads, then
    # their monitors go on their own and remove their cgroups.
    # shellcheck disable=SC2046 # one pid per word
    kill -KILL $(children_of $(monitor_pids)) 2>/dev/null || true
    # shellcheck disable=SC2046
    stop_pids 10 $(monitor_pids)
    # shellcheck disable=SC2046
    stop_pids 10 $(dir_pids)
    unmount_all || say "mounts left under '$dir'"
    if [ -n "$tag" ]; then
        for m in "${members[@]}"; do
            [ -e "/run/netns/$(ns_of "$m")" ] && { ip netns del "$(ns_of "$m")" || say "cannot delete netns '$(ns_of "$m")'"; }
        done
    fi
    remove_cgroups
    remove_locks
    rm -rf --one-file-system "$dir"
    # What must be gone now.
    for p in $(dir_pids); do
        c=$(tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline") && left="$left process $p ($c);"
    done
    [ -z "$(awk -v d="$dir" '$5 == d || index($5, d "/") == 1' /proc/self/mountinfo)" ] || left="$left mounts;"
    if [ -n "$tag" ]; then
        ip netns list | grep -q "^sbxlxd-$tag-" && left="$left network namespaces;"
        ip -o link show | grep -q "sbxl$tag" && left="$left veths;"
    fi
    [ ! -e "$dir" ] || left="$left '$dir';"
    [ -z "$left" ] || { say "left behind:$left"; return 1; }
}

# The test image with this machine's python3 and its standard library (mkimage.py --python),
# for the tests that serve HTTP or run unittest in an instance; imported once, under an alias,
# by the first test that asks (about 1 s; the image is some 40 MB).
image_python() {
    local alias=sbx-test-py
    lxc_at n1 image info "$alias" >/dev/null 2>&1 && return 0
    python3 "$here/mkimage.py" --python "$(command -v busybox || echo /bin/busybox)" \
        "$dir/image-py.tar" 2>"$dir/mkimage.log" ||
        { say "cannot build the python test image: $(tail -n 5 "$dir/mkimage.log")"; return 1; }
    rm -f "$dir/mkimage.log"
    lxc_at n1 image import "$dir/image-py.tar" --alias "$alias" >>"$dir/init.log" 2>&1 ||
        { say "cannot import the python test image: $(tail -n 5 "$dir/init.log")"; rm -f "$dir/image-py.tar"; return 1; }
    rm -f "$dir/image-py.tar"
}

case $cmd in
start) [ $# = 2 ] || usage; start ;;
image-python) [ $# = 2 ] || usage; image_python ;;
stop) [ $# = 2 ] || usage; stop ;;
restart-member) [ $# = 3 ] || usage; restart_member "$3" ;;
*) usage ;;
esac
