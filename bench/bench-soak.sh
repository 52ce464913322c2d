#!/usr/bin/env bash
# The soak that tests/integration/1003-sandbox-loop.sh runs briefly (25 rounds): N sandboxes
# (200; 30 with SBX_BENCH_QUICK=1) created, used and removed one after the other while a long-
# lived one serves requests; then no process, descriptor, socket or directory may be left.
# Prints the time per round and the test's verdict as one TABLE line (scripts/bench).
#   bench/bench-soak.sh [SBX [ROUNDS]]
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
SBX=${1:-${SBX:?SBX or the first argument must name the sbx binary}}
n=${2:-$([ "${SBX_BENCH_QUICK:-0}" = 1 ] && echo 30 || echo 200)}
log=$(mktemp "${TMPDIR:-/tmp}/sbx-soak.XXXXXX")
trap 'rm -f "$log"' EXIT
t0=$EPOCHREALTIME
SBX=$SBX SBX_SRCDIR=$here SBX_TEST_ROUNDS=$n bash "$here/tests/integration/1003-sandbox-loop.sh" >"$log" 2>&1
rc=$?
t1=$EPOCHREALTIME
grep -E '^not ok' -A3 "$log" >&2
verdict=$([ $rc = 0 ] && echo met || echo missed)
awk -v a="$t0" -v b="$t1" -v n="$n" -v v="$verdict" 'BEGIN {
    printf "TABLE|soak: create, exec, rm (%d rounds beside a live sandbox)|%.0f ms per round|-|-|-|nothing left behind|%s\n",
        n, (b - a) * 1000 / n, v }'
exit $rc
