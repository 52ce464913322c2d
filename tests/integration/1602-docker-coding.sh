#!/usr/bin/env bash
# The coding example (examples/coding-task) with --provider docker --image IMG yields what it
# yields locally: the same patched stats.py and the same final test run (the last tool output
# the agent saw, timings left out), and the same answer. Engine and image as in 1601
# (docker-lib.sh).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
. "$(dirname "$0")/docker-lib.sh"

. "$(dirname "$0")/coding-lib.sh"

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
same_as_local docker docker

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
