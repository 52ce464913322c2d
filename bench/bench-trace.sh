#!/usr/bin/env bash
# Tracing overhead: the same scripted sandbox agent run (TURNS turns, each one exec_command
# call, against tests/fake-model on 127.0.0.1) with tracing off, with --trace FILE and with
# --trace-otlp to a local test collector, REPS interleaved repetitions of each. Prints the
# median wall time per run of each mode and its ratio to "off".
# Usage: bench/bench-trace.sh [SBX] [TURNS] [REPS]
set -u
SBX=${1:-build/sbx}
TURNS=${2:-40}
REPS=${3:-7}
SRC=$(cd "$(dirname "$0")/.." && pwd)
T=$(mktemp -d "${TMPDIR:-/tmp}/sbx-bench-trace.XXXXXX")
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null; wait 2>/dev/null; for d in $(ls "$T/run/sbx" 2>/dev/null); do "$SBX" sandbox rm "$d" >/dev/null 2>&1; done; rm -rf "$T"' EXIT
export XDG_RUNTIME_DIR=$T/run SBX_WORKSPACES=$T/ws OPENAI_API_KEY=sk-bench-unused
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
mkdir "$T/col"
start col python3 "$SRC/tests/fake-model/otlp-collector.py" ok "$T/col"
COL="http://127.0.0.1:$PORT"
now() { date +%s%N; }
for r in $(seq 1 "$REPS"); do
    for mode in off file otlp; do
        # A fresh fake server per run: it replays the script from the first turn.
        start fake python3 "$SRC/tests/fake-model/fake-model.py" "$T/s.json" "$T/req.jsonl"
        args=()
        [ "$mode" = file ] && args=(--trace "$T/t.jsonl")
        [ "$mode" = otlp ] && args=(--trace-otlp "$COL")
        a=$(now)
        "$SBX" run --max-turns "$TURNS" --base-url "http://127.0.0.1:$PORT/v1" -a "$T/a.yaml" "${args[@]}" go >/dev/null 2>"$T/err" ||
            { echo "run failed ($mode):"; cat "$T/err"; exit 1; }
        b=$(now)
        echo $((b - a)) >>"$T/$mode"
        kill "${PIDS[-1]}" 2>/dev/null; wait "${PIDS[-1]}" 2>/dev/null; unset 'PIDS[-1]'
        grep -q dropped "$T/err" && { echo "spans dropped ($mode):"; cat "$T/err"; exit 1; }
    done
done
median() { sort -n "$1" | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
off=$(median "$T/off")
echo "spans per traced run: $(wc -l <"$T/t.jsonl")"
for mode in off file otlp; do
    m=$(median "$T/$mode")
    awk -v m="$m" -v o="$off" -v n="$mode" -v t="$TURNS" \
        'BEGIN {printf "%-5s median %.1f ms per run (%.2f ms per turn), ratio %.3f\n", n, m / 1e6, m / 1e6 / t, m / o}'
done
