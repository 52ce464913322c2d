#!/usr/bin/env bash
# What the LXD test bed (tests/lxd/cluster.sh) costs: cluster start by phase (the test image's
# import among them), launch per member, the round trip of `true` in an instance on the member
# asked (local) and on the other member (cross), through lxc on member 1's unix socket, lxc over
# https with the client certificate, and the REST + WebSocket client tests/lxd/lxd-exec.py;
# file push, snapshot, restore, delete, and the cluster's stop. Medians, interleaved (local,
# cross, local, ...). Needs root and lxd: says "skipped" and exits 0 otherwise.
# usage: bench/bench-lxd-cluster.sh [R [L]]   R exec repetitions (10), L launches per member (3);
#        SBX_BENCH_QUICK: 3 and 1.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
if [ -n "${SBX_BENCH_QUICK:-}" ]; then dr=3 dl=1; else dr=10 dl=3; fi
R=${1:-$dr} L=${2:-$dl}
[ "$(id -u)" = 0 ] || { echo "bench-lxd-cluster: skipped: needs root"; exit 0; }
command -v lxd >/dev/null && command -v lxc >/dev/null ||
    { echo "bench-lxd-cluster: skipped: lxd is not installed (scripts/install-deps)"; exit 0; }

D=$(mktemp -d /tmp/sbx-lxd.XXXXXX)
T=$(mktemp -d /tmp/sbx-bench-lxd.XXXXXX)
trap '"$top/tests/lxd/cluster.sh" stop "$D" >/dev/null 2>&1; rm -rf "$T"' EXIT
trap 'exit 130' INT TERM

now() { echo "$EPOCHREALTIME"; }
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", (b - a) * 1000 }'; }
timed() { # timed NAME CMD...: runs CMD, appends its wall time in ms to $T/NAME
    local t0=$EPOCHREALTIME
    "${@:2}" >/dev/null 2>"$T/last.err" || { echo "bench-lxd-cluster: '$1' failed: $(cat "$T/last.err")" >&2; exit 1; }
    since "$t0" >>"$T/$1"
    echo >>"$T/$1"
}
median() { sort -n "$T/$1" | awk '{ v[NR] = $1 } END { printf "%.1f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
report() { printf '%-66s %9s ms  (median of %d)\n' "$2" "$(median "$1")" "$(wc -l <"$T/$1")"; }

t0=$(now)
"$top/tests/lxd/cluster.sh" start "$D" 2>"$T/start.err" ||
    { echo "bench-lxd-cluster: cluster start failed:" >&2; cat "$T/start.err" >&2; exit 1; }
start_ms=$(since "$t0")
set -a
. "$D/env"
set +a
P=$SBX_TEST_LXD_PROJECT
lx() { LXD_DIR=$SBX_TEST_LXD_N1_LXD_DIR LXD_CONF=$SBX_TEST_LXD_CONF lxc "$@"; }
lxr() { LXD_CONF=$SBX_TEST_LXD_CONF nsenter --net="$SBX_TEST_LXD_N1_NETNS_PATH" lxc "$@"; }
wsx() { nsenter --net="$SBX_TEST_LXD_N1_NETNS_PATH" python3 "$top/tests/lxd/lxd-exec.py" --project "$P" \
    "$SBX_TEST_LXD_N1_URL" "$@" </dev/null; }

echo "# LXD test bed, $(date -u +%Y-%m-%d), nproc $(nproc), kernel $(uname -r), lxd $(lxd --version)," \
    "load average $(cut -d' ' -f1-3 /proc/loadavg) at start"
printf '%-66s %9s ms\n' "cluster start (cluster.sh start, total)" "$start_ms"
while read -r phase s; do
    printf '%-66s %9s ms\n' "  $phase" "$(awk -v s="$s" 'BEGIN { printf "%.1f", s * 1000 }')"
done <"$D/start-times"

for ((i = 1; i <= L; i++)); do
    for m in n1 n2; do
        timed "launch-$m" lx launch "$SBX_TEST_LXD_IMAGE" "b$i-$m" --target "$m" --project "$P" -p "$SBX_TEST_LXD_PROFILE" -q
    done
done
report launch-n1 "launch on n1 (lxc through n1)"
report launch-n2 "launch on n2 (lxc through n1)"

for ((i = 1; i <= R; i++)); do
    for w in local cross; do
        [ $w = local ] && c=b1-n1 || c=b1-n2
        timed "unix-$w" lx exec "$c" --project "$P" -- true
        timed "https-$w" lxr exec "n1:$c" --project "$P" -- true
        timed "ws-$w" wsx "$c" -- true
    done
done
for w in unix https ws; do
    case $w in
    unix) what="lxc exec true, n1's unix socket" ;;
    https) what="lxc exec true, https to n1" ;;
    ws) what="lxd-exec.py true (REST + WebSockets), https to n1" ;;
    esac
    report "$w-local" "$what, instance on n1"
    report "$w-cross" "$what, instance on n2"
done

head -c 4096 /dev/urandom >"$T/f4k"
for ((i = 1; i <= R; i++)); do
    timed push-cross lx file push "$T/f4k" "b1-n2/tmp/f" --project "$P"
done
report push-cross "file push 4 KiB, instance on n2 (through n1)"
for ((i = 1; i <= (R + 2) / 3; i++)); do
    timed snap-cross lx snapshot b1-n2 "s$i" --project "$P"
    timed restore-cross lx restore b1-n2 "s$i" --project "$P"
done
report snap-cross "snapshot, instance on n2 (through n1)"
report restore-cross "restore (running), instance on n2 (through n1)"

for ((i = 1; i <= L; i++)); do
    for m in n1 n2; do timed "delete-$m" lx delete --force "b$i-$m" --project "$P"; done
done
report delete-n1 "delete --force (running), instance on n1"
report delete-n2 "delete --force (running), instance on n2"

t0=$(now)
"$top/tests/lxd/cluster.sh" stop "$D" 2>"$T/stop.err" || { cat "$T/stop.err" >&2; exit 1; }
printf '%-66s %9s ms\n' "cluster stop (cluster.sh stop, nothing running)" "$(since "$t0")"
for w in unix https ws; do
    awk -v w="$w" -v l="$(median "$w-local")" -v c="$(median "$w-cross")" 'BEGIN {
        printf "TABLE|lxd exec round trip, other member (%s)|%.1f ms|same, member asked|%.1f ms|%.2fx|-|-\n", w, c, l, c / l }'
done
echo "TABLE|lxd two-member cluster start (tests/lxd/cluster.sh)|$start_ms ms|none|-|-|-|-"
