#!/usr/bin/env bash
# The coding example (examples/coding-task) with --provider lxd on the two-member cluster yields
# what it yields locally: the same patched stats.py, the same final test run (the last tool
# output the agent saw, timings left out) and the same answer. The harness runs in member 1's
# network namespace; the sandbox is made through member 1's https endpoint on member 2, and
# once more from the agent file's sandbox section through member 1's socket.
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/../integration/sandbox-lib.sh"
. "$(dirname "$0")/lxd-lib.sh"

. "$(dirname "$0")/../integration/coding-lib.sh"
RUN_IN=(in1)

run_example local
expect_rc 0 "the coding example runs locally"
local_id=$(cat "$T/local.id")
run_example lxd "${LXDS[@]}" --image "$PYIMG" --lxd-target n2
expect_rc 0 "and with --provider lxd through member 1's https endpoint"
[ "$rc" = 0 ] || diag "$(tail -n 5 "$T/lxd.err")"
lxd_id=$(cat "$T/lxd.id")
[ -n "$lxd_id" ] && [ "$lxd_id" != "$local_id" ] && ok "each run kept its own sandbox" ||
    not_ok "each run kept its own sandbox ($local_id, $lxd_id)"
expect_eq "$(location_of "$lxd_id")" n2 "the lxd run's sandbox is an instance on member 2"
same_as_local lxd lxd

# The same through the agent file's sandbox section instead of the options.
sed "s|^manifest: manifest.yaml|manifest: $EX/manifest.yaml\nsandbox:\n  provider: lxd\n  endpoint: \"$SBX_TEST_LXD_N1_SOCKET\"\n  project: \"$P\"\n  profile: [\"$SBX_TEST_LXD_PROFILE\"]\n  image: \"$PYIMG\"|" \
    "$EX/agent.yaml" >"$T/agent.yaml"
in1 "$SBX" run --keep -m "replay:$EX/run.jsonl" -a "$T/agent.yaml" "Do the task in TASK.md." \
    >"$T/file.out" 2>"$T/file.err"
rc=$?
expect_rc 0 "the agent file's sandbox: {provider: lxd, ...} runs it in lxd"
file_id=$(sed -n "s/^kept sandbox \([0-9a-f]*\) (agent 'Coding Agent')$/\1/p" "$T/file.err")
echo "$file_id" >>"$T/ids"
case $(location_of "$file_id") in n1 | n2) ok "its sandbox is an instance of the cluster" ;;
*) not_ok "its sandbox is an instance of the cluster"; diag "$(cat "$T/file.err")" ;; esac

for id in $local_id $lxd_id $file_id; do in1 "$SBX" sandbox rm "$id" >/dev/null 2>&1; done
expect_eq "$(sbx_instances | grep -c -e "sbx-$lxd_id" -e "sbx-$file_id")" 0 "rm leaves no instance"

done_testing
