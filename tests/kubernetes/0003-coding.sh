#!/usr/bin/env bash
# The coding example (examples/coding-task, as 1602-docker-coding.sh runs it) with --provider
# kubernetes gives what it gives locally: the same patched stats.py, the same final test run
# (the last tool output the agent saw, timings left out) and the same answer; then the same
# through the agent file's `sandbox:` section. Cluster and namespace: kube-lib.sh.
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/../integration/sandbox-lib.sh"
. "$(dirname "$0")/kube-lib.sh"

. "$(dirname "$0")/../integration/coding-lib.sh"

run_example local
expect_rc 0 "the coding example runs locally"
local_id=$(cat "$T/local.id")
run_example kube --provider kubernetes "${KOPTS[@]}" --image "$IMG"
expect_rc 0 "and with --provider kubernetes --image IMG"
if [ "$rc" != 0 ]; then diag "$(tail -5 "$T/kube.err")"; fi
kube_id=$(cat "$T/kube.id")
[ -n "$kube_id" ] && [ "$kube_id" != "$local_id" ] && ok "each run kept its own sandbox" ||
    not_ok "each run kept its own sandbox ($local_id, $kube_id)"
expect_eq "$(k get sandboxes -l "sbx.io/id=$kube_id" -o name | wc -l)" 1 "the kubernetes run's sandbox is a Sandbox"
same_as_local kube kubernetes

# The same through the agent file's sandbox section.
sed "s|^manifest: manifest.yaml|manifest: $EX/manifest.yaml\nsandbox:\n  provider: kubernetes\n  kubeconfig: \"$KCFG\"\n  context: \"$KCTX\"\n  namespace: \"$NS\"\n  image: \"$IMG\"|" \
    "$EX/agent.yaml" >"$T/agent.yaml"
"$SBX" run --keep -m "replay:$EX/run.jsonl" -a "$T/agent.yaml" "Do the task in TASK.md." \
    >"$T/file.out" 2>"$T/file.err"
rc=$?
expect_rc 0 "the agent file's sandbox: {provider: kubernetes, image: IMG} runs it on the cluster"
file_id=$(sed -n "s/^kept sandbox \([0-9a-f]*\) (agent 'Coding Agent')$/\1/p" "$T/file.err")
expect_eq "$(k get sandboxes -l "sbx.io/id=$file_id" -o name | wc -l)" 1 "its sandbox is a Sandbox"

for id in $local_id $kube_id $file_id; do "$SBX" sandbox rm "$id" >/dev/null 2>&1; done
expect_eq "$(k get sandboxes,pods -l sbx.io/id -o name | wc -l)" 0 "rm leaves nothing labelled by sbx"
done_testing
