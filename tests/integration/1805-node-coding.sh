#!/usr/bin/env bash
# The coding example (examples/coding-task, as 1602-docker-coding.sh and the kubernetes and lxd
# suites run it) with --provider remote against an sbx-node daemon in a network namespace of its
# own, the harness (`sbx run`) in another (tests/node/lib.sh): the same patched stats.py, the
# same final test run (timings left out) and the same answer as the local run; then the same
# through the agent file's `sandbox:` section. Daemon, sandboxes and namespaces go on exit.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
NODE=${SBX_NODE:-$(dirname "$SBX")/sbx-node}
. "$SBX_SRCDIR/tests/node/lib.sh"
command -v python3 >/dev/null || skip_all "no 'python3' here"
trap 'node_cleanup; sandbox_cleanup' EXIT
node_setup || skip_all "$NODE_WHY"
node_add a || skip_all "$NODE_WHY"
node_start a || { not_ok "the daemon listens"; diag "$(cat "$T/nodes/a/node.log")"; done_testing; exit; }
node_flags a
. "$(dirname "$0")/coding-lib.sh"

run_example local
expect_rc 0 "the coding example runs locally"
RUN_IN=(node_h)
run_example remote --provider remote "${R[@]}"
RUN_IN=()
expect_rc 0 "and with --provider remote --node URL from another namespace"
[ "$rc" = 0 ] || diag "$(tail -5 "$T/remote.err")"
rid=$(cat "$T/remote.id")
[ -n "$rid" ] && node_live a | grep -qx "$rid" && ok "its sandbox is on the node" ||
    { not_ok "its sandbox is on the node"; diag "id '$rid', the node has: $(node_live a)"; }
same_as_local remote remote

# The same through the agent file's sandbox section (the node there; the CA, certificate and key
# are the host's trust, given on the command line only).
sed "s|^manifest: manifest.yaml|manifest: $EX/manifest.yaml\nsandbox:\n  provider: remote\n  node: \"$(node_url a)\"|" \
    "$EX/agent.yaml" >"$T/agent.yaml"
node_h "$SBX" run --keep "${R[@]:2}" -m "replay:$EX/run.jsonl" -a "$T/agent.yaml" "Do the task in TASK.md." \
    >"$T/file.out" 2>"$T/file.err"
rc=$?
expect_rc 0 "the agent file's sandbox: {provider: remote, node: URL} runs it on the node"
fid=$(sed -n "s/^kept sandbox \([0-9a-f]*\) (agent 'Coding Agent')$/\1/p" "$T/file.err")
[ -n "$fid" ] && node_live a | grep -qx "$fid" && ok "its sandbox is on the node" ||
    { not_ok "the agent file's sandbox is on the node"; diag "id '$fid': $(tail -3 "$T/file.err")"; }
node_h "$SBX" sandbox exec "$fid" -- cat stats.py >"$T/file.stats" 2>&1
same_file stats file "and patched stats.py the same"

node_h "$SBX" sandbox rm "${R[@]}" "$rid" "$fid" >/dev/null 2>"$T/rm.err"
"$SBX" sandbox rm "$(cat "$T/local.id")" >/dev/null 2>>"$T/rm.err"
[ -z "$(node_live a)" ] && [ -z "$(find "$T/nodes/a/records-node" -type f)" ] &&
    ok "rm leaves no sandbox and no record on the node" || { not_ok "rm leaves nothing on the node"; diag "$(cat "$T/rm.err")"; }
done_testing
