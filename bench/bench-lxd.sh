#!/usr/bin/env bash
# The lxd provider against local and docker, from one run: `sbx sandbox create`, `sbx sandbox
# exec ID -- true` and `sbx sandbox rm ID` through the sbx CLI (its start-up included), for
# local (isolated), docker (a private dockerd, tests/docker/engines.sh, unless
# SBX_TEST_DOCKER_HOST names one) and lxd on the two-member cluster (tests/lxd/cluster.sh,
# unless SBX_TEST_LXD_DIR names one): through member 1's unix socket with the sandbox on member
# 1, and through member 1's https endpoint with the sandbox on member 2. Interleaved (local,
# docker, lxd, lxd cross, local, ...); medians of R. The harness runs in member 1's network
# namespace. Needs root, lxd and dockerd: a side that cannot run is said and left out.
# usage: bench/bench-lxd.sh [R]   (default 5; SBX_BENCH_QUICK: 2)
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
SBX=${SBX:-$top/build/sbx}
if [ -n "${SBX_BENCH_QUICK:-}" ]; then R=${1:-2}; else R=${1:-5}; fi
[ "$(id -u)" = 0 ] || { echo "bench-lxd: skipped: needs root"; exit 0; }
command -v lxd >/dev/null && command -v lxc >/dev/null ||
    { echo "bench-lxd: skipped: lxd is not installed (scripts/install-deps)"; exit 0; }

T=$(mktemp -d /tmp/sbx-bench-lxd.XXXXXX)
own_lxd="" own_engines=""
cleanup() {
    local id
    for id in $(cat "$T"/ids 2>/dev/null); do in1 "$SBX" sandbox rm "$id" >/dev/null 2>&1; done
    [ -z "$own_lxd" ] || "$top/tests/lxd/cluster.sh" stop "$own_lxd" >/dev/null 2>&1
    [ -z "$own_engines" ] || "$top/tests/docker/engines.sh" stop "$own_engines" >/dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
export XDG_RUNTIME_DIR="$T/run" SBX_WORKSPACES="$T/ws" SBX_SNAPSHOTS="$T/snapshots" \
    SBX_RECORDS="$T/records" SBX_STOPPED="$T/stopped"
mkdir -m 0700 "$XDG_RUNTIME_DIR"

if [ -z "${SBX_TEST_LXD_DIR:-}" ]; then
    own_lxd=$(mktemp -d /tmp/sbx-lxd.XXXXXX)
    "$top/tests/lxd/cluster.sh" start "$own_lxd" >"$T/lxd.log" 2>&1 ||
        { echo "bench-lxd: cluster start failed: $(tail -n 5 "$T/lxd.log")" >&2; exit 1; }
    SBX_TEST_LXD_DIR=$own_lxd
fi
set -a
. "$SBX_TEST_LXD_DIR/env"
set +a
in1() { nsenter --net="$SBX_TEST_LXD_N1_NETNS_PATH" "$@"; }
P=$SBX_TEST_LXD_PROJECT
LXDU=(--provider lxd --lxd-endpoint "$SBX_TEST_LXD_N1_SOCKET" --lxd-project "$P"
    --lxd-profile "$SBX_TEST_LXD_PROFILE" --image "$SBX_TEST_LXD_IMAGE" --lxd-target n1)
LXDS=(--provider lxd --lxd-endpoint "$SBX_TEST_LXD_N1_URL" --lxd-project "$P"
    --lxd-profile "$SBX_TEST_LXD_PROFILE" --image "$SBX_TEST_LXD_IMAGE" --lxd-target n2
    --lxd-client-cert "$SBX_TEST_LXD_CLIENT_CERT" --lxd-client-key "$SBX_TEST_LXD_CLIENT_KEY"
    --lxd-server-cert "$SBX_TEST_LXD_SERVER_CERT")

sides=(local lxd lxdx)
DK=()
if [ -z "${SBX_TEST_DOCKER_HOST:-}" ] && command -v dockerd >/dev/null; then
    own_engines=$(mktemp -d /tmp/sbx-eng.XXXXXX)
    if "$top/tests/docker/engines.sh" start "$own_engines" >"$T/engines.log" 2>&1; then
        set -a
        . "$own_engines/env"
        set +a
    else
        echo "bench-lxd: no docker side: engines.sh start failed: $(tail -n 3 "$T/engines.log")"
    fi
fi
if [ -n "${SBX_TEST_DOCKER_HOST:-}" ] && [ -n "${SBX_TEST_DOCKER_IMAGE:-}" ]; then
    DK=(--provider docker --docker-host "unix://${SBX_TEST_DOCKER_HOST#unix://}" --image "$SBX_TEST_DOCKER_IMAGE")
    sides=(local docker lxd lxdx)
else
    echo "bench-lxd: no docker side (no dockerd, or SBX_TEST_DOCKER_HOST unset)"
fi

opts_of() { # the create options of a side, into the array opts
    case $1 in
    local) opts=() ;;
    docker) opts=("${DK[@]}") ;;
    lxd) opts=("${LXDU[@]}") ;;
    lxdx) opts=("${LXDS[@]}") ;;
    esac
}
ms() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f\n", (b - a) * 1000 }'; }
step() { # step SIDE: create, exec, rm once, each timed
    local side=$1 t id
    opts_of "$side"
    t=$EPOCHREALTIME
    id=$(in1 "$SBX" sandbox create "${opts[@]}" 2>"$T/err") ||
        { echo "bench-lxd: create ($side) failed: $(cat "$T/err")" >&2; exit 1; }
    ms "$t" >>"$T/$side.create"
    echo "$id" >>"$T/ids"
    t=$EPOCHREALTIME
    in1 "$SBX" sandbox exec "$id" -- true 2>"$T/err" ||
        { echo "bench-lxd: exec ($side) failed: $(cat "$T/err")" >&2; exit 1; }
    ms "$t" >>"$T/$side.exec"
    t=$EPOCHREALTIME
    in1 "$SBX" sandbox rm "$id" >/dev/null 2>"$T/err" ||
        { echo "bench-lxd: rm ($side) failed: $(cat "$T/err")" >&2; exit 1; }
    ms "$t" >>"$T/$side.rm"
}
median() { sort -n "$T/$1" | awk '{ v[NR] = $1 } END { printf "%.1f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

for side in "${sides[@]}"; do step "$side"; done # warm-up: images cached, first starts done
rm -f "$T"/*.create "$T"/*.exec "$T"/*.rm
for ((i = 0; i < R; i++)); do
    for side in "${sides[@]}"; do step "$side"; done
done

name() {
    case $1 in
    local) echo "local (isolated)" ;;
    docker) echo "docker (dockerd)" ;;
    lxd) echo "lxd, unix socket, member 1" ;;
    lxdx) echo "lxd, https via member 1, on member 2" ;;
    esac
}
echo "# sbx CLI create / exec true / rm, medians of $R interleaved, $(date -u +%Y-%m-%d), nproc $(nproc), load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-40s %12s %12s %12s\n' side "create ms" "exec ms" "rm ms"
for side in "${sides[@]}"; do
    printf '%-40s %12s %12s %12s\n' "$(name "$side")" "$(median "$side.create")" "$(median "$side.exec")" "$(median "$side.rm")"
done
for op in create exec rm; do
    for side in lxd lxdx; do
        for ref in local docker; do
            [ -f "$T/$ref.$op" ] || continue
            a=$(median "$side.$op") b=$(median "$ref.$op")
            printf 'TABLE|sbx sandbox %s, %s|%s ms|%s|%s ms|%s|none|-\n' "$op" "$(name "$side")" "$a" \
                "$(name "$ref")" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2fx", a / b }')"
        done
    done
done
