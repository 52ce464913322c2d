#!/usr/bin/env bash
# Create at scale: N isolated sandboxes created at once (N `sbx sandbox create` in parallel,
# workspace without a disk image unless SBX_BENCH_DISK=1, since N loop devices are a host-wide
# resource), then, with all of them idle, the memory of one sandbox: the sum of Pss
# (/proc/PID/smaps_rollup) over every process of it (the host-side supervisor, the middle one
# and PID 1; an idle sandbox runs nothing else), median over up to 20 sandboxes. Prints the
# success count, the creates per second and the slowest create, and TABLE lines. Every sandbox
# is removed at the end, whatever happened. Usage: bench/bench-scale.sh [SBX] [N]
# (defaults: $SBX or build-release/sbx, 500; SBX_BENCH_QUICK: 50).
set -u
SBX=${1:-${SBX:-build-release/sbx}}
if [ -n "${SBX_BENCH_QUICK:-}" ]; then dn=50; else dn=500; fi
N=${2:-$dn}
disk=(--disk none)
[ "${SBX_BENCH_DISK:-0}" = 1 ] && disk=()
T=$(mktemp -d "${TMPDIR:-/tmp}/sbx-bench-scale.XXXXXX")
cleanup() {
    local d
    for d in $(ls "$T/run/sbx" 2>/dev/null); do "$SBX" sandbox rm "$d" >/dev/null 2>&1 & done
    wait
    "$SBX" sandbox prune >/dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
export XDG_RUNTIME_DIR=$T/run SBX_WORKSPACES=$T/ws
mkdir -m 0700 "$XDG_RUNTIME_DIR" "$T/out"
avail=$(awk '/^MemAvailable:/ {print int($2 / 1024)}' /proc/meminfo)
# About 3 MB per sandbox (processes, page tables, kernel objects): keep a wide margin.
if [ "$avail" -lt $((N * 8 + 512)) ]; then
    echo "only $avail MB available, not enough for $N sandboxes" >&2
    exit 1
fi

a=$(date +%s%N)
for ((i = 0; i < N; i++)); do
    (
        s=$(date +%s%N)
        "$SBX" sandbox create "${disk[@]}" >"$T/out/$i.id" 2>"$T/out/$i.err"
        echo "$? $(($(date +%s%N) - s))" >"$T/out/$i.rc"
    ) &
done
wait
b=$(date +%s%N)
ok=$(cat "$T"/out/*.rc | awk '$1 == 0' | wc -l)
slow=$(cat "$T"/out/*.rc | awk '{if ($2 > m) m = $2} END {printf "%.1f", m / 1e9}')
rate=$(awk -v n="$ok" -v t=$((b - a)) 'BEGIN {printf "%.1f", n / (t / 1e9)}')
echo "$N concurrent isolated creates$([ ${#disk[@]} -gt 0 ] && echo " (--disk none)"): $ok succeeded in $(awk -v t=$((b - a)) 'BEGIN {printf "%.1f", t / 1e9}') s, $rate creates/s, slowest $slow s"
cat "$T"/out/*.err 2>/dev/null | grep -v "^$" | sort | uniq -c | sort -rn | head -5

# PSS of idle sandboxes: every process whose command line names the sandbox's supervisor.
pss_of() {
    local p sum=0 v
    for p in $(pgrep -f -- "__supervise $1" 2>/dev/null); do
        v=$(awk '/^Pss:/ {print $2}' "/proc/$p/smaps_rollup" 2>/dev/null)
        sum=$((sum + ${v:-0}))
    done
    echo "$sum"
}
sleep 1
: >"$T/pss"
n=0
for f in "$T"/out/*.id; do
    id=$(cat "$f")
    [ -n "$id" ] || continue
    pss_of "$id" >>"$T/pss"
    n=$((n + 1))
    [ $n -lt 20 ] || break
done
pss=$(sort -n "$T/pss" | awk '{v[NR] = $1} END {printf "%.2f", NR ? v[int((NR + 1) / 2)] / 1024 : 0}')
echo "PSS per idle isolated sandbox: median $pss MB over $n sandboxes ($N running)"
echo "TABLE|concurrent creates succeeded ($N isolated, $rate creates/s)|$ok of $N|none|-|-|$N of $N|$([ "$ok" = "$N" ] && echo met || echo missed)"
awk -v p="$pss" 'BEGIN {
    printf "TABLE|PSS per idle isolated sandbox|%.2f MB|none|-|-|<= 1 MB|%s\n", p, p <= 1.0 ? "met" : "missed" }'
