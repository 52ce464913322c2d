#!/usr/bin/env bash
# The coding example (examples/coding-task) with --provider docker --image IMG yields what it
# yields locally: the same patched stats.py and the same final test run (the last tool output
# the agent saw, timings left out), and the same answer. Engine and image as in 1601
# (docker-lib.sh).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
. "$(dirname "$0")/docker-lib.sh"

EX="$SBX_SRCDIR/examples/coding-task"
# run_example NAME OPTION...: the example, kept; NAME.id, NAME.answer, NAME.stats, NAME.tests.
run_example() {
    local name=$1 id
    shift
    "$SBX" run --json --keep "$@" -m "replay:$EX/run.jsonl" -a "$EX/agent.yaml" \
        "Do the task in TASK.md." >"$T/$name.json" 2>"$T/$name.err"
    local status=$?
    id=$(sed -n "s/^kept sandbox \([0-9a-f]*\) (agent 'Coding Agent')$/\1/p" "$T/$name.err")
    echo "$id" >>"$T/ids"
    python3 - "$T/$name.json" "$T/$name" <<'EOF'
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
EOF
    "$SBX" sandbox exec "$id" -- cat stats.py >"$T/$name.stats" 2>"$T/$name.exec-err"
    echo "$id" >"$T/$name.id"
    rc=$status
}

run_example local
expect_rc 0 "the coding example runs locally"
local_id=$(cat "$T/local.id")
run_example docker --provider docker --image "$IMG"
expect_rc 0 "and with --provider docker --image IMG"
docker_id=$(cat "$T/docker.id")
[ -n "$docker_id" ] && [ "$docker_id" != "$local_id" ] && ok "each run kept its own sandbox" ||
    not_ok "each run kept its own sandbox ($local_id, $docker_id)"
expect_eq "$(containers_of "$docker_id" | grep -c "\"io.sbx.id\":\"$docker_id\"")" 1 \
    "the docker run's sandbox is a container"
expect_in "$T/local.stats" "return sum(values) / len(values)" "locally stats.py was patched"
if cmp -s "$T/local.stats" "$T/docker.stats"; then ok "the docker run patched stats.py the same"; else
    not_ok "the docker run patched stats.py the same"; diag "$(diff "$T/local.stats" "$T/docker.stats" 2>&1 | head -20)"
fi
expect_in "$T/local.tests" "Process exited with code 0" "locally the final test run passes"
if cmp -s "$T/local.tests" "$T/docker.tests"; then ok "the docker run's final test run is the same"; else
    not_ok "the docker run's final test run is the same"; diag "$(diff "$T/local.tests" "$T/docker.tests" 2>&1 | head -20)"
fi
expect_eq "$(cat "$T/docker.answer")" "$(cat "$T/local.answer")" "and so is the answer"

# The same through the agent file's sandbox section instead of the options.
sed "s|^manifest: manifest.yaml|manifest: $EX/manifest.yaml\nsandbox:\n  provider: docker\n  image: \"$IMG\"|" \
    "$EX/agent.yaml" >"$T/agent.yaml"
"$SBX" run --keep -m "replay:$EX/run.jsonl" -a "$T/agent.yaml" "Do the task in TASK.md." \
    >"$T/file.out" 2>"$T/file.err"
rc=$?
expect_rc 0 "the agent file's sandbox: {provider: docker, image: IMG} runs it in docker"
file_id=$(sed -n "s/^kept sandbox \([0-9a-f]*\) (agent 'Coding Agent')$/\1/p" "$T/file.err")
echo "$file_id" >>"$T/ids"
expect_eq "$(containers_of "$file_id" | grep -c "\"io.sbx.id\":\"$file_id\"")" 1 \
    "its sandbox is a container"

for id in $local_id $docker_id $file_id; do "$SBX" sandbox rm "$id" >/dev/null 2>&1; done
expect_eq "$(containers_of "$docker_id" | tr -d ' \n')$(containers_of "$file_id" | tr -d ' \n')" "[][]" \
    "rm leaves no container"

done_testing
