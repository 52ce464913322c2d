#!/usr/bin/env bash
# sbx side by side with the reference JS SDK (@openai/agents 0.20.0, UnixLocalSandboxClient) on
# the same work, interleaved in one run (sbx, JS, sbx, JS, ...), medians of REPS:
#   - a sandbox with a manifest of 200 files of 4 KB: create, a trivial exec (per exec, NEXEC of
#     them), persist (sbx: `sbx sandbox snapshot` into an empty store; JS: persistWorkspace),
#     of the peer's workspace (identical files: the store keeps one blob) and of one whose files
#     each have their own content (JS: peer-persist.mjs; the two sides' bytes differ, both are
#     200 distinct contents of 4096 bytes), removal
#     (sbx: `sbx sandbox rm`, default disk image; JS: session.close())
#   - sandbox agent runs of 11, 51 and 101 turns (10/50/100 exec_command calls and a final
#     message) against the same scripted model server (mockllm.py)
# sbx is measured through the `sbx` CLI, process start included; the JS side is what its own
# scripts time inside node (node's start-up and module loading are not counted).
# Prints one TABLE line per row (ratio = sbx / JS: below 1 means sbx is faster).
# Usage: bench/bench-peer.sh [SBX [REPS [NEXEC]]]
#   SBX_PEER_JS   directory with @openai/agents installed and the .mjs files (/tmp/peer-js);
#                 scripts/bench sets it up
#   SBX_PEER_BENCH directory of mockllm.py and script_10exec.json (../shared/peer-bench)
#   SBX_PEER_TURNS which agent runs, default "10 50 100" (the number of exec calls)
set -u
SBX=${1:-build/sbx}
REPS=${2:-3}
NEXEC=${3:-20}
SRC=$(cd "$(dirname "$0")/.." && pwd)
PEER=${SBX_PEER_JS:-/tmp/peer-js}
PB=${SBX_PEER_BENCH:-$SRC/../shared/peer-bench}
TURNS=${SBX_PEER_TURNS:-10 50 100}
NFILES=200

why=""
if ! command -v node >/dev/null; then
    why="node not found"
elif [ ! -d "$PEER/node_modules/@openai/agents" ]; then
    why="@openai/agents not installed in $PEER"
elif [ ! -f "$PEER/sandbox_bench.mjs" ] || [ ! -f "$PEER/peer-agent.mjs" ]; then
    why="sandbox_bench.mjs or peer-agent.mjs missing in $PEER"
elif [ ! -f "$PB/mockllm.py" ]; then
    why="no mockllm.py in $PB"
fi
if [ -n "$why" ]; then
    echo "peer not available: $why"
    exit 0
fi

T=$(mktemp -d "${TMPDIR:-/tmp}/sbx-bench-peer.XXXXXX")
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    for d in $(ls "$T/run/sbx" 2>/dev/null); do "$SBX" sandbox rm "$d" >/dev/null 2>&1; done
    rm -rf "$T"
}
trap cleanup EXIT
export XDG_RUNTIME_DIR=$T/run SBX_WORKSPACES=$T/ws OPENAI_API_KEY=sk-bench-unused
unset OPENAI_BASE_URL OTEL_EXPORTER_OTLP_ENDPOINT TRACEPARENT
mkdir -m 0700 "$XDG_RUNTIME_DIR"

# The peer's workspace: data/f0.txt .. f199.txt of 4096 'x', and an empty out/.
content=$(printf 'x%.0s' $(seq 1 4096))
{
    echo "entries:"
    echo "  out: {type: dir}"
    echo "  data:"
    echo "    type: dir"
    echo "    children:"
    for i in $(seq 0 $((NFILES - 1))); do echo "      f$i.txt: {type: file, content: \"$content\"}"; done
} >"$T/manifest.yaml"
# The same with distinct content: "file N " then 'x' to 4096 bytes.
{
    echo "entries:"
    echo "  out: {type: dir}"
    echo "  data:"
    echo "    type: dir"
    echo "    children:"
    for i in $(seq 0 $((NFILES - 1))); do
        head="file $i "
        echo "      f$i.txt: {type: file, content: \"$head${content:${#head}}\"}"
    done
} >"$T/manifest-distinct.yaml"
cp -f "$SRC/bench/peer-persist.mjs" "$PEER/" || { echo "peer not available: cannot write to $PEER"; exit 0; }
{
    printf 'name: bench\nmodel: mock-model\ninstructions: bench\nmanifest:\n'
    sed 's/^/  /' "$T/manifest.yaml"
} >"$T/agent.yaml"

ms() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f\n", (b - a) * 1000}'; }
median() { sort -n "$1" | awk '{v[NR] = $1} END {if (NR) print v[int((NR + 1) / 2)]}'; }

# Run node SCRIPT ARGS... in $PEER until it prints its JSON line, then end it: the SDK leaves a
# timer of the exec's yield time (10 s) pending, which would only delay the exit.
js() {
    local out=$T/js.out
    : >"$out"
    (cd "$PEER" && exec node "$@") >"$out" 2>"$T/js.err" &
    local pid=$! i=0
    while ! grep -q '^{' "$out" && kill -0 "$pid" 2>/dev/null && [ $i -lt 6000 ]; do
        sleep 0.05
        i=$((i + 1))
    done
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    grep -m1 '^{' "$out" || { echo "js failed: $*" >&2; cat "$T/js.err" >&2; return 1; }
}
field() { sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p"; }

sbx_sandbox() {
    local a b id store=$T/store.$1
    a=$EPOCHREALTIME
    id=$("$SBX" sandbox create --manifest "$T/manifest.yaml") || { echo "sbx create failed" >&2; return 1; }
    b=$EPOCHREALTIME
    ms "$a" "$b" >>"$T/sbx.create"
    # As the peer's script does: the first exec is not counted in the per-exec time.
    "$SBX" sandbox exec "$id" -- echo first >/dev/null || { echo "sbx exec failed" >&2; return 1; }
    a=$EPOCHREALTIME
    for i in $(seq 1 "$NEXEC"); do
        "$SBX" sandbox exec "$id" -- echo "$i" >/dev/null || { echo "sbx exec failed" >&2; return 1; }
    done
    b=$EPOCHREALTIME
    awk -v a="$a" -v b="$b" -v n="$NEXEC" 'BEGIN {printf "%.3f\n", (b - a) * 1000 / n}' >>"$T/sbx.exec"
    a=$EPOCHREALTIME
    SBX_SNAPSHOTS=$store "$SBX" sandbox snapshot "$id" >/dev/null || { echo "sbx snapshot failed" >&2; return 1; }
    b=$EPOCHREALTIME
    ms "$a" "$b" >>"$T/sbx.persist"
    a=$EPOCHREALTIME
    "$SBX" sandbox rm "$id" >/dev/null || { echo "sbx rm failed" >&2; return 1; }
    b=$EPOCHREALTIME
    ms "$a" "$b" >>"$T/sbx.rm"
    rm -rf "$store"
}
sbx_persist_distinct() {
    local a b id store=$T/store.d$1
    id=$("$SBX" sandbox create --manifest "$T/manifest-distinct.yaml") || { echo "sbx create failed" >&2; return 1; }
    a=$EPOCHREALTIME
    SBX_SNAPSHOTS=$store "$SBX" sandbox snapshot "$id" >/dev/null || { echo "sbx snapshot failed" >&2; return 1; }
    b=$EPOCHREALTIME
    ms "$a" "$b" >>"$T/sbx.persist_d"
    "$SBX" sandbox rm "$id" >/dev/null
    rm -rf "$store"
}
js_persist_distinct() {
    local j
    j=$(js peer-persist.mjs "$NFILES" distinct) || return 1
    echo "$j" | field persist_ms >>"$T/js.persist_d"
}
js_sandbox() {
    local j
    j=$(js sandbox_bench.mjs "$NFILES" "$NEXEC") || return 1
    echo "$j" | field create_ms >>"$T/js.create"
    echo "$j" | field exec_avg_ms >>"$T/js.exec"
    echo "$j" | field persist_ms >>"$T/js.persist"
    echo "$j" | field close_ms >>"$T/js.rm"
}

row() { # row WHAT KEY [TARGET]: the TABLE line of $T/sbx.KEY against $T/js.KEY (target < 1x)
    local s j t=${3:-1} op="<"
    s=$(median "$T/sbx.$2")
    j=$(median "$T/js.$2")
    [ -n "$s" ] && [ -n "$j" ] || { echo "no samples for $1"; return; }
    [ "$t" = 1 ] || op="<="
    awk -v w="$1" -v s="$s" -v j="$j" -v t="$t" -v op="$op" 'BEGIN {
        r = s / j
        printf "TABLE|%s|%.1f ms|JS SDK 0.20.0|%.1f ms|%.2fx|%s %sx|%s\n", w, s, j, r, op, t,
            (op == "<" ? r < t : r <= t) ? "met" : "missed"
    }'
}

echo "bench-peer: $REPS interleaved reps, $NFILES files of 4 KB, $NEXEC execs per sandbox; JS: $(node --version), $PEER"
for r in $(seq 1 "$REPS"); do
    sbx_sandbox "$r" || exit 1
    js_sandbox || exit 1
    sbx_persist_distinct "$r" || exit 1
    js_persist_distinct || exit 1
done
for k in create exec persist persist_d rm; do
    echo "sbx $k: $(sort -n "$T/sbx.$k" | tr '\n' ' ') ms; js $k: $(sort -n "$T/js.$k" | tr '\n' ' ') ms"
done
row "create, 200 files of 4 KB (sbx CLI)" create
row "exec of a trivial command, per exec (sbx CLI)" exec
row "persist: snapshot of the 200-file workspace, identical files: one blob (sbx CLI)" persist
row "persist: snapshot of 200 files of distinct content (sbx CLI)" persist_d
row "rm of the 200-file sandbox, default disk (sbx CLI) vs close()" rm 1.0

for n in $TURNS; do
    script=$PB/script_${n}exec.json
    [ -f "$script" ] || script=$SRC/bench/script_${n}exec.json
    turns=$((n + 1))
    rm -f "$T/port"
    python3 "$PB/mockllm.py" --script "$script" --port 0 >"$T/port" &
    PIDS+=($!)
    i=0
    while [ ! -s "$T/port" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
    url=http://127.0.0.1:$(head -n1 "$T/port")/v1
    for r in $(seq 1 "$REPS"); do
        a=$EPOCHREALTIME
        "$SBX" run --max-turns $((turns + 5)) --base-url "$url" -a "$T/agent.yaml" "run the steps" \
            >"$T/run.out" 2>"$T/run.err" || { echo "sbx run failed ($turns turns):"; cat "$T/run.err"; exit 1; }
        b=$EPOCHREALTIME
        grep -q "Done: ran $n steps" "$T/run.out" || { echo "sbx run did not finish the script:"; cat "$T/run.out" "$T/run.err"; exit 1; }
        ms "$a" "$b" >>"$T/sbx.agent$n"
        j=$(OPENAI_BASE_URL=$url js peer-agent.mjs "$NFILES" $((turns + 5))) || exit 1
        echo "$j" | grep -q "Done: ran $n steps" || { echo "js run did not finish the script: $j"; exit 1; }
        echo "$j" | field run_ms >>"$T/js.agent$n"
    done
    kill "${PIDS[-1]}" 2>/dev/null
    wait "${PIDS[-1]}" 2>/dev/null
    unset 'PIDS[-1]'
    echo "sbx $turns turns: $(sort -n "$T/sbx.agent$n" | tr '\n' ' ') ms; js: $(sort -n "$T/js.agent$n" | tr '\n' ' ') ms"
    row "agent run, $turns turns, 200-file manifest (sbx run)" "agent$n"
done
