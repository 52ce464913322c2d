# The coding example (examples/coding-task) run the way the provider suites compare a provider
# with the local provider (1602, 1805, tests/kubernetes/0003 and 0007, tests/lxd/0003). Source it
# after lib.sh. The hosted suites' CLI tests use it too, against their fakes.
#
#   RUN_IN=(CMD...)          a prefix for the sbx commands run_example runs (empty: none), such
#                            as a function entering the harness's network namespace
#   RUN_TRACE=DIR            each run's trace into DIR/NAME.trace (empty: none)
#   run_example NAME OPT...  the example with OPT..., its sandbox kept: rc its exit status,
#                            $T/NAME.id (also added to $T/ids), $T/NAME.answer (the final
#                            answer), $T/NAME.stats (stats.py as it left it), $T/NAME.tests (the
#                            last tool output the agent saw, with what changes from run to run
#                            left out)
#   same_as_local NAME LABEL the local run (NAME local) patched stats.py and its final test run
#                            passes, and NAME's run did and saw the same and gave the same answer
EX="$SBX_SRCDIR/examples/coding-task"
RUN_IN=()
RUN_TRACE=

run_example() {
    local name=$1 id trace=()
    shift
    [ -n "$RUN_TRACE" ] && trace=(--trace "$RUN_TRACE/$name.trace")
    "${RUN_IN[@]}" "$SBX" run --json --keep "${trace[@]}" "$@" -m "replay:$EX/run.jsonl" -a "$EX/agent.yaml" \
        "Do the task in TASK.md." >"$T/$name.json" 2>"$T/$name.err"
    local status=$?
    id=$(sed -n "s/^kept sandbox \([0-9A-Za-z_-]*\) (agent 'Coding Agent')$/\1/p" "$T/$name.err")
    echo "$id" >>"$T/ids"
    python3 - "$T/$name.json" "$T/$name" <<'PY'
import json, re, sys
events = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
outs = [e["item"].get("output", "") for e in events if e.get("type") == "tool_output"]
final = [e.get("output") for e in events if e.get("type") == "final"]
last = outs[-1] if outs else ""
# What changes from run to run: the chunk id and the times.
last = "\n".join(l for l in last.splitlines() if not l.startswith(("Chunk ID:", "Wall time:")))
last = re.sub(r"Ran (\d+) tests? in [0-9.]+s", r"Ran \1 tests", last)
open(sys.argv[2] + ".tests", "w").write(last)
open(sys.argv[2] + ".answer", "w").write(json.dumps(final))
PY
    "${RUN_IN[@]}" "$SBX" sandbox exec "$id" -- cat stats.py >"$T/$name.stats" 2>"$T/$name.exec-err"
    echo "$id" >"$T/$name.id"
    rc=$status
}

# same_file WHAT NAME DESC: $T/local.WHAT and $T/NAME.WHAT are the same bytes.
same_file() {
    if cmp -s "$T/local.$1" "$T/$2.$1"; then ok "$3"; else
        not_ok "$3"; diag "$(diff "$T/local.$1" "$T/$2.$1" 2>&1 | head -20)"
    fi
}

same_as_local() {
    expect_in "$T/local.stats" "return sum(values) / len(values)" "locally stats.py was patched"
    same_file stats "$1" "the $2 run patched stats.py the same"
    expect_in "$T/local.tests" "Process exited with code 0" "locally the final test run passes"
    same_file tests "$1" "the $2 run's final test run is the same"
    expect_eq "$(cat "$T/$1.answer")" "$(cat "$T/local.answer")" "and so is the answer"
}
