#!/usr/bin/env bash
# Teardown cost against the host's process count: R rounds, each removing N sandboxes (one
# `sbx sandbox rm` each, in sequence) once with no extra host processes and once with H
# sleeping host processes spawned by this bench (interleaved: 0, H, 0, H, ...). Prints the
# median total time of the N removals for each host count and a TABLE line: the time with H
# extra processes against the same with none (a ratio near 1.00x: rm does not grow with what
# the host runs). Usage: bench/bench-rm.sh [SBX] [N] [H] [R] [ISOLATION]
# (defaults: $SBX or build-release/sbx, 100, 2000, 3, none; SBX_BENCH_QUICK: 20, 500, 1).
set -u
SBX=${1:-${SBX:-build-release/sbx}}
if [ -n "${SBX_BENCH_QUICK:-}" ]; then dn=20 dh=500 dr=1; else dn=100 dh=2000 dr=3; fi
N=${2:-$dn} H=${3:-$dh} R=${4:-$dr} ISO=${5:-none}
T=$(mktemp -d "${TMPDIR:-/tmp}/sbx-bench-rm.XXXXXX")
host=()
cleanup() {
    local p d
    for p in "${host[@]}"; do kill -KILL "$p" 2>/dev/null; done
    for d in $(ls "$T/run/sbx" 2>/dev/null); do "$SBX" sandbox rm "$d" >/dev/null 2>&1; done
    rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
export XDG_RUNTIME_DIR=$T/run SBX_WORKSPACES=$T/ws
mkdir -m 0700 "$XDG_RUNTIME_DIR"

spawn_host() { # COUNT sleeping children of this bench
    local i p
    for ((i = 0; i < $1; i++)); do
        sleep 3600 &
        host+=($!)
    done
    disown -a
    # bash forks them; each execs sleep on its own time: let them all settle first, so that
    # the removals are not timed against their start-up.
    for p in "${host[@]}"; do
        while [ "$(cat "/proc/$p/comm" 2>/dev/null)" = bash ]; do sleep 0.01; done
    done
    sleep 0.5
}
kill_host() {
    local p
    for p in "${host[@]}"; do kill -KILL "$p" 2>/dev/null; done
    host=()
}
one_round() { # HOST_COUNT: prints the total ns of N removals
    local ids=() i id a b
    for ((i = 0; i < N; i++)); do
        id=$("$SBX" sandbox create --isolation "$ISO" --disk none 2>"$T/err") ||
            { echo "create failed: $(cat "$T/err")" >&2; exit 1; }
        ids+=("$id")
    done
    spawn_host "$1"
    a=$(date +%s%N)
    for id in "${ids[@]}"; do "$SBX" sandbox rm "$id" >/dev/null 2>&1 || echo "rm $id failed" >&2; done
    b=$(date +%s%N)
    kill_host
    echo $((b - a))
}
: >"$T/t0"
: >"$T/th"
for ((r = 0; r < R; r++)); do
    one_round 0 >>"$T/t0"
    one_round "$H" >>"$T/th"
done
med() { sort -n "$1" | awk '{v[NR] = $1} END {printf "%.3f", v[int((NR + 1) / 2)] / 1e9}'; }
m0=$(med "$T/t0") mh=$(med "$T/th")
echo "$N removals (isolation $ISO), $R rounds: median $m0 s with 0 extra host processes, $mh s with $H"
awk -v n="$N" -v h="$H" -v a="$mh" -v b="$m0" 'BEGIN {
    printf "TABLE|%d sandbox removals (%d extra host processes)|%.2f s|same, 0 extra host processes|%.2f s|%.2fx|<= 1 s|%s\n",
        n, h, a, b, a / b, a <= 1.0 * n / 100 ? "met" : "missed" }'
