#!/usr/bin/env bash
# Create time with and without the workspace disk image: N creates (then rm) each way, in
# private runtime and workspace directories. Prints the mean and median wall time per create
# and per rm in milliseconds. Usage: bench/bench-disk.sh [SBX] [N]. The image needs root.
set -u
SBX=${1:-build/sbx}
N=${2:-20}
T=$(mktemp -d "${TMPDIR:-/tmp}/sbx-bench-disk.XXXXXX")
trap 'for d in $(ls "$T/run/sbx" 2>/dev/null); do "$SBX" sandbox rm "$d" >/dev/null 2>&1; done; rm -rf "$T"' EXIT
export XDG_RUNTIME_DIR=$T/run SBX_WORKSPACES=$T/ws
mkdir -m 0700 "$XDG_RUNTIME_DIR"
now() { date +%s%N; }
stats() { sort -n | awk '{v[NR] = $1; s += $1} END {printf "mean %.1f ms, median %.1f ms", s / NR / 1e6, v[int((NR + 1) / 2)] / 1e6}'; }
for mode in none default; do
    args=()
    [ "$mode" = none ] && args=(--disk none)
    : >"$T/create" && : >"$T/rm"
    for _ in $(seq 1 "$N"); do
        a=$(now); id=$("$SBX" sandbox create "${args[@]}" 2>/dev/null) || { echo "create failed"; exit 1; }
        b=$(now); "$SBX" sandbox rm "$id" >/dev/null; c=$(now)
        echo $((b - a)) >>"$T/create"; echo $((c - b)) >>"$T/rm"
    done
    echo "disk $mode: create $(stats <"$T/create"); rm $(stats <"$T/rm")"
done
