#!/usr/bin/env bash
# Run-state checkpoints: the same scripted sandbox agent run (TURNS turns, each one
# exec_command call, against tests/fake-model on 127.0.0.1) plain and with --state FILE (a
# checkpoint after each model response with calls and after each turn), REPS interleaved
# repetitions (rep -> binary -> mode). Reports, per mode:
#   - instructions of the sbx client process alone (valgrind's cachegrind, one run each: they do
#     not depend on the load; children such as the supervisor are not counted);
#   - the client's CPU time (user + sys, GNU time), the median of REPS runs.
# With OTHER (a second sbx binary, e.g. a build of main before a change), runs it too,
# interleaved with SBX, so the two are compared in one run.
# Usage: bench/bench-state.sh [SBX] [TURNS] [REPS] [OTHER]
set -u
SBX=${1:-${SBX:-build/sbx}}
TURNS=${2:-200}
REPS=${3:-3}
OTHER=${4:-}
[ -n "${SBX_BENCH_QUICK:-}" ] && [ $# -lt 2 ] && TURNS=20 REPS=1
SRC=$(cd "$(dirname "$0")/.." && pwd)
command -v valgrind >/dev/null || { echo "bench-state: valgrind not found: instructions not counted" >&2; }
[ -x /usr/bin/time ] || { echo "bench-state: /usr/bin/time (GNU time) not found" >&2; exit 1; }
T=$(mktemp -d "${TMPDIR:-/tmp}/sbx-bench-state.XXXXXX")
PIDS=()
cleanup() {
    kill "${PIDS[@]}" 2>/dev/null
    wait 2>/dev/null
    for b in "$SBX" $OTHER; do
        for d in "$T"/run/sbx/*; do [ -e "$d" ] && "$b" sandbox rm "${d##*/}" >/dev/null 2>&1; done
    done
    rm -rf "$T"
}
trap cleanup EXIT
export XDG_RUNTIME_DIR=$T/run SBX_WORKSPACES=$T/ws XDG_STATE_HOME=$T/state OPENAI_API_KEY=sk-bench-unused
unset OPENAI_BASE_URL OTEL_EXPORTER_OTLP_ENDPOINT TRACEPARENT
mkdir -m 0700 "$XDG_RUNTIME_DIR"
cat >"$T/a.yaml" <<'YAML'
name: Worker
model: gpt-4.1
instructions: Do the work.
manifest:
  entries:
    notes.txt: {type: file, content: "alpha\n"}
YAML
python3 "$SRC/tests/fake-model/turns.py" "$T/s.json" \
    "[resp(i, fcall(i, 'exec_command', {'cmd': 'echo %d' % i})) for i in range(1, $TURNS)] + [resp($TURNS, msg('done'))]"
start() { # start NAME CMD...: a server that prints its port first; sets PORT
    rm -f "$T/$1.port"
    "${@:2}" >"$T/$1.port" &
    PIDS+=($!)
    local i=0
    while [ ! -s "$T/$1.port" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
    PORT=$(head -n1 "$T/$1.port")
}
# one BIN SIDE MODE [valgrind...]: one run; the client's CPU seconds to $T/SIDE.MODE.cpu, or its
# instructions to $T/SIDE.MODE.instr.
one() {
    local bin=$1 side=$2 mode=$3
    shift 3
    # A fresh fake server per run: it replays the script from the first turn.
    start fake python3 "$SRC/tests/fake-model/fake-model.py" "$T/s.json" "$T/req.jsonl"
    local args=()
    rm -f "$T/st.json" "$T"/st.json.*
    [ "$mode" = state ] && args=(--state "$T/st.json")
    if [ $# -gt 0 ]; then
        "$@" --log-file="$T/vg.log" "$bin" run --max-turns "$TURNS" --base-url "http://127.0.0.1:$PORT/v1" \
            -a "$T/a.yaml" "${args[@]}" go >/dev/null 2>"$T/err" || { echo "run failed ($side $mode):"; cat "$T/err"; exit 1; }
        sed -n 's/.*I *refs: *//p' "$T/vg.log" | tr -d , >"$T/$side.$mode.instr"
    else
        /usr/bin/time -f '%U %S' -o "$T/time" "$bin" run --max-turns "$TURNS" \
            --base-url "http://127.0.0.1:$PORT/v1" -a "$T/a.yaml" "${args[@]}" go >/dev/null 2>"$T/err" ||
            { echo "run failed ($side $mode):"; cat "$T/err"; exit 1; }
        awk '{print $1 + $2}' "$T/time" >>"$T/$side.$mode.cpu"
    fi
    [ "$mode" = state ] && [ -f "$T/st.json" ] && wc -c <"$T/st.json" >"$T/$side.size"
    kill "${PIDS[-1]}" 2>/dev/null; wait "${PIDS[-1]}" 2>/dev/null; unset 'PIDS[-1]'
}
sides=("new|$SBX")
[ -n "$OTHER" ] && sides+=("other|$OTHER")
load0=$(cut -d' ' -f1 /proc/loadavg)
for r in $(seq 1 "$REPS"); do
    for s in "${sides[@]}"; do
        for mode in plain state; do one "${s#*|}" "${s%%|*}" "$mode"; done
    done
done
if command -v valgrind >/dev/null; then
    for s in "${sides[@]}"; do
        for mode in plain state; do
            one "${s#*|}" "${s%%|*}" "$mode" valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null
        done
    done
fi
load1=$(cut -d' ' -f1 /proc/loadavg)
median() { sort -n "$1" | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
echo "turns $TURNS, reps $REPS (interleaved), load $load0 -> $load1"
for s in "${sides[@]}"; do
    side=${s%%|*}
    pc=$(median "$T/$side.plain.cpu") sc=$(median "$T/$side.state.cpu")
    pi=$(cat "$T/$side.plain.instr" 2>/dev/null || echo 0) si=$(cat "$T/$side.state.instr" 2>/dev/null || echo 0)
    awk -v n="${s#*|}" -v pc="$pc" -v sc="$sc" -v pi="$pi" -v si="$si" -v sz="$(cat "$T/$side.size" 2>/dev/null)" -v t="$TURNS" 'BEGIN {
        printf "%s: client instructions plain %.1f M, --state %.1f M (%.2fx); client CPU plain %.2f s, --state %.2f s (%.2fx); final state %s bytes\n",
            n, pi / 1e6, si / 1e6, pi ? si / pi : 0, pc, sc, pc ? sc / pc : 0, sz }'
    if [ "$side" = new ] && [ "$pi" != 0 ]; then
        awk -v pi="$pi" -v si="$si" -v t="$TURNS" 'BEGIN { r = si / pi
            printf "TABLE|sbx run --state, client instructions at %d turns (cachegrind)|%.1f M|sbx run plain|%.1f M|%.2fx|<= 1.2x|%s\n",
                t, si / 1e6, pi / 1e6, r, r <= 1.2 ? "met" : "missed" }'
    fi
done
