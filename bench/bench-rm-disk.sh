#!/usr/bin/env bash
# rm of a small sandbox with the default disk image, against a bare spawn and, when a second
# build is given, against that build: R rounds, each creating one 200-file sandbox per build
# and timing its `sbx sandbox rm`, and timing one `/bin/true` spawn (the floor), interleaved
# (A, B, true, A, B, true, ...). Prints the median rm time of each build, the floor, and TABLE
# lines (scripts/bench's format): each build against the floor (target 3x), and B against A.
# Usage: bench/bench-rm-disk.sh [SBX_A] [R] [SBX_B]  (defaults: $SBX or build-release/sbx,
# 30 rounds (SBX_BENCH_QUICK: 8), no B). Needs root (the disk image is for root callers).
set -u
A=${1:-${SBX:-build-release/sbx}} R=${2:-} B=${3:-}
[ -n "$R" ] || { [ -n "${SBX_BENCH_QUICK:-}" ] && R=8 || R=30; }
[ "$(id -u)" = 0 ] || { echo "bench-rm-disk: needs root (the disk image is for root callers)" >&2; exit 2; }
T=$(mktemp -d "${TMPDIR:-/tmp}/sbx-bench-rmdisk.XXXXXX")
cleanup() {
    local d
    for d in $(ls "$T/run/sbx" 2>/dev/null); do "$A" sandbox rm "$d" >/dev/null 2>&1; done
    sleep 1
    rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
export XDG_RUNTIME_DIR=$T/run SBX_WORKSPACES=$T/ws
mkdir -m 0700 "$XDG_RUNTIME_DIR"
# Times are read from bash's own clock (microseconds, EPOCHREALTIME without its dot): neither a
# `date` nor a subshell runs to read it, which would add a spawn to the floor and to rm alike.
# one_rm SBX FILE: create a 200-file sandbox, time its rm (ns) into FILE.
one_rm() {
    local id t0 t1
    id=$("$1" sandbox create) || return 1
    "$1" sandbox exec "$id" -- sh -c 'i=0; while [ $i -lt 200 ]; do echo $i >f$i; i=$((i + 1)); done' || return 1
    t0=${EPOCHREALTIME/./}
    "$1" sandbox rm "$id" >/dev/null || return 1
    t1=${EPOCHREALTIME/./}
    echo $(((t1 - t0) * 1000)) >>"$2"
    # The image's release goes on after rm returns: let it end (bounded) before the next step,
    # so that it does not fall on whichever side is timed next.
    local i=0
    while [ -n "$(ls -A "$SBX_WORKSPACES/.sbx-release" 2>/dev/null)" ] && [ $i -lt 200 ]; do
        sleep 0.05
        i=$((i + 1))
    done
}
for ((i = 0; i < R; i++)); do
    one_rm "$A" "$T/a" || { echo "bench-rm-disk: a round of $A failed" >&2; exit 1; }
    [ -z "$B" ] || one_rm "$B" "$T/b" || { echo "bench-rm-disk: a round of $B failed" >&2; exit 1; }
    t0=${EPOCHREALTIME/./}; /bin/true; t1=${EPOCHREALTIME/./}; echo $(((t1 - t0) * 1000)) >>"$T/floor"
done
med() { sort -n "$1" | awk '{v[NR] = $1} END {printf "%.2f", (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) / 1e6}'; }
fa=$(med "$T/floor") ma=$(med "$T/a")
echo "rounds $R, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "floor (/bin/true from this shell): $fa ms"
echo "A $A: rm $ma ms"
# TABLE lines in scripts/bench's format: what|sbx|floor or peer|its median|ratio|target|met.
table() { # WHAT SBX_MS FLOOR_NAME FLOOR_MS TARGET(x)
    awk -v w="$1" -v s="$2" -v n="$3" -v f="$4" -v t="$5" 'BEGIN {
        r = s / f
        printf "TABLE|%s|%.1f ms|%s|%.1f ms|%.2fx|<= %sx|%s\n", w, s, n, f, r, t, r <= t ? "met" : "missed" }'
}
table "sbx sandbox rm, 200-file sandbox, default disk image" "$ma" "/bin/true spawned by the same shell" "$fa" 3
if [ -n "$B" ]; then
    mb=$(med "$T/b")
    echo "B $B: rm $mb ms"
    table "sbx sandbox rm, 200-file sandbox, default disk image (B: $B)" "$mb" "/bin/true spawned by the same shell" "$fa" 3
    table "sbx sandbox rm, 200-file sandbox, default disk image, B against A" "$mb" "A: $A" "$ma" 1
fi
