#!/usr/bin/env bash
# First snapshot of NFILES files of 4 KB, sbx against the reference JS SDK's persist and against an
# undurable GNU `tar -cf` of the same files, interleaved (each repetition runs every side once, in
# turn), on the root disk and on tmpfs:
#   bench/bench-snapshot-peer.sh [BUILD_DIR [RUNS [NFILES]]]
# Per file system (ROOT_DIR, default /var/tmp; SHM_DIR, default /dev/shm) and repetition:
# - JS persist of distinct files, then of identical files (`peer-persist.mjs`: persistWorkspace
#   alone, timed inside node, the workspace under TMPDIR on that file system);
# - sbx: `bench-snapshot first` of distinct files (a take into an empty store, in process, then
#   the tar of the same files), then of identical files.
# - then sbx alone: `bench-snapshot incr` (first takes into empty stores and incremental takes
#   after a one-file change, interleaved, INCR_REPS of each, default 10): the incremental take
#   against the first (issue 35: <= 20%).
# Prints medians and TABLE| lines for scripts/bench. Needs the peer in SBX_PEER_JS (default
# /tmp/peer-js, set up as /work/shared/peer-bench/README.md says) for the JS rows; without it
# sbx and tar are measured alone.
set -u
build=${1:-build}
runs=${2:-5}
n=${3:-2000}
[ -n "${SBX_BENCH_QUICK:-}" ] && runs=1
peer=${SBX_PEER_JS:-/tmp/peer-js}
here=$(cd "$(dirname "$0")" && pwd)
js=0
if [ -d "$peer/node_modules/@openai/agents" ] && command -v node >/dev/null; then
    cp -f "$here/peer-persist.mjs" "$peer/" && js=1
fi
[ $js = 1 ] || echo "(no peer in $peer: JS SDK not measured)"
command -v tar >/dev/null || { echo "bench-snapshot-peer: tar not found" >&2; exit 1; }

median() { sort -g | awk '{v[NR] = $1} END {if (NR) print v[int((NR + 1) / 2)]; else print "nan"}'; }

one_fs() { # LABEL DIR
    local label=$1 dir=$2 r tmp
    tmp=$(mktemp -d "$dir/sbx-bench-peer.XXXXXX") || return
    : >"$tmp/js-d" && : >"$tmp/js-s" && : >"$tmp/sbx-d" && : >"$tmp/sbx-s" && : >"$tmp/tar"
    for r in $(seq 1 "$runs"); do
        if [ $js = 1 ]; then
            for kind in distinct same; do
                (cd "$peer" && TMPDIR=$tmp node peer-persist.mjs "$n" "$kind") |
                    sed -n 's/.*"persist_ms":\([0-9.]*\).*/\1/p' >>"$tmp/js-${kind:0:1}"
            done
        fi
        "$build/bench/bench-snapshot" first "$n" "$tmp" distinct >"$tmp/out" || { rm -rf "$tmp"; return 1; }
        sed -n 's/^take_ms //p' "$tmp/out" >>"$tmp/sbx-d"
        sed -n 's/^tar_ms //p' "$tmp/out" >>"$tmp/tar"
        "$build/bench/bench-snapshot" first "$n" "$tmp" same | sed -n 's/^take_ms //p' >>"$tmp/sbx-s"
    done
    local sd ss t jd jsm
    sd=$(median <"$tmp/sbx-d") ss=$(median <"$tmp/sbx-s") t=$(median <"$tmp/tar")
    jd=$(median <"$tmp/js-d") jsm=$(median <"$tmp/js-s")
    echo "$label ($dir), $n files, medians of $runs interleaved runs:"
    echo "  sbx first take, distinct: $sd ms (all: $(tr '\n' ' ' <"$tmp/sbx-d"))"
    echo "  sbx first take, same:     $ss ms"
    echo "  tar -cf, distinct:        $t ms (all: $(tr '\n' ' ' <"$tmp/tar"))"
    [ $js = 1 ] && echo "  JS persist, distinct:     $jd ms (all: $(tr '\n' ' ' <"$tmp/js-d"))"
    [ $js = 1 ] && echo "  JS persist, same:         $jsm ms"
    awk -v s="$sd" -v t="$t" -v n="$n" -v l="$label" 'BEGIN {
        printf "TABLE|first snapshot, %d distinct 4 KB files, %s|%.1f ms|GNU tar -cf (undurable)|%.1f ms|%.2fx|<= 2x|%s\n",
            n, l, s, t, s / t, s / t <= 2 ? "met" : "not met" }'
    if [ $js = 1 ]; then
        awk -v s="$sd" -v j="$jd" -v n="$n" -v l="$label" 'BEGIN {
            printf "TABLE|first snapshot, %d distinct 4 KB files, %s|%.1f ms|JS SDK 0.20 persistWorkspace|%.1f ms|%.2fx|<= 0.33x%s|%s\n",
                n, l, s, j, s / j, l ~ /root/ ? "" : " (root disk)", l ~ /root/ ? (s / j <= 1 / 3 ? "met" : "not met") : "-" }'
        awk -v s="$ss" -v j="$jsm" -v n="$n" -v l="$label" 'BEGIN {
            printf "TABLE|first snapshot, %d identical 4 KB files, %s|%.1f ms|JS SDK 0.20 persistWorkspace|%.1f ms|%.2fx|< 1x|%s\n",
                n, l, s, j, s / j, s / j < 1 ? "met" : "not met" }'
    fi
    local reps=${INCR_REPS:-10} ft it
    [ -n "${SBX_BENCH_QUICK:-}" ] && reps=3
    "$build/bench/bench-snapshot" incr "$n" "$tmp" "$reps" >"$tmp/out" || { rm -rf "$tmp"; return 1; }
    ft=$(sed -n 's/^take_ms //p' "$tmp/out") it=$(sed -n 's/^incr_ms //p' "$tmp/out")
    echo "  sbx incremental take (one file changed): $it ms, first take $ft ms (medians of $reps, interleaved)"
    awk -v i="$it" -v f="$ft" -v n="$n" -v l="$label" 'BEGIN {
        printf "TABLE|incremental take after one changed file, %d distinct 4 KB files, %s|%.1f ms|sbx first take|%.1f ms|%.2fx|<= 0.20x|%s\n",
            n, l, i, f, i / f, i / f <= 0.2 ? "met" : "not met" }'
    rm -rf "$tmp"
}

one_fs "root disk" "${ROOT_DIR:-/var/tmp}"
if [ -d "${SHM_DIR:-/dev/shm}" ]; then
    one_fs "tmpfs" "${SHM_DIR:-/dev/shm}"
else
    echo "(no ${SHM_DIR:-/dev/shm}: tmpfs not measured)"
fi
