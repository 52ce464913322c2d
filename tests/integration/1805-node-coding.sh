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
EX="$SBX_SRCDIR/examples/coding-task"
# run_example NAME [ns] OPTION...: the example, kept; NAME.id, NAME.answer, NAME.stats, NAME.tests.
run_example() {
    local name=$1 in=() id
    shift
    [ "${1:-}" = ns ] && { in=(nsenter --net="/run/netns/$NS_HARN"); shift; }
    "${in[@]}" "$SBX" run --json --keep "$@" -m "replay:$EX/run.jsonl" -a "$EX/agent.yaml" \
        "Do the task in TASK.md." >"$T/$name.json" 2>"$T/$name.err"
    local status=$?
    id=$(sed -n "s/^kept sandbox \([0-9a-f]*\) (agent 'Coding Agent')$/\1/p" "$T/$name.err")
    python3 - "$T/$name.json" "$T/$name" <<'PY'
import json, re, sys
events = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
outs = [e["item"].get("output", "") for e in events if e.get("type") == "tool_output"]
final = [e.get("output") for e in events if e.get("type") == "final"]
last = outs[-1] if outs else ""
last = "\n".join(l for l in last.splitlines() if not l.startswith(("Chunk ID:", "Wall time:")))
last = re.sub(r"Ran (\d+) tests? in [0-9.]+s", r"Ran \1 tests", last)
open(sys.argv[2] + ".tests", "w").write(last)
open(sys.argv[2] + ".answer", "w").write(json.dumps(final))
PY
    "${in[@]}" "$SBX" sandbox exec "$id" -- cat stats.py >"$T/$name.stats" 2>"$T/$name.exec-err"
    echo "$id" >"$T/$name.id"
    rc=$status
}
same() { # NAME DESC
    if cmp -s "$T/local.$1" "$T/$2.$1"; then ok "$3"; else
        not_ok "$3"; diag "$(diff "$T/local.$1" "$T/$2.$1" 2>&1 | head -20)"
    fi
}

run_example local
expect_rc 0 "the coding example runs locally"
run_example remote ns --provider remote "${R[@]}"
expect_rc 0 "and with --provider remote --node URL from another namespace"
[ "$rc" = 0 ] || diag "$(tail -5 "$T/remote.err")"
rid=$(cat "$T/remote.id")
[ -n "$rid" ] && node_live a | grep -qx "$rid" && ok "its sandbox is on the node" ||
    { not_ok "its sandbox is on the node"; diag "id '$rid', the node has: $(node_live a)"; }
expect_in "$T/local.stats" "return sum(values) / len(values)" "locally stats.py was patched"
same stats remote "the remote run patched stats.py the same"
expect_in "$T/local.tests" "Process exited with code 0" "locally the final test run passes"
same tests remote "the remote run's final test run is the same"
same answer remote "and so is the answer"

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
same stats file "and patched stats.py the same"

node_h "$SBX" sandbox rm "${R[@]}" "$rid" "$fid" >/dev/null 2>"$T/rm.err"
"$SBX" sandbox rm "$(cat "$T/local.id")" >/dev/null 2>>"$T/rm.err"
[ -z "$(node_live a)" ] && [ -z "$(find "$T/nodes/a/records-node" -type f)" ] &&
    ok "rm leaves no sandbox and no record on the node" || { not_ok "rm leaves nothing on the node"; diag "$(cat "$T/rm.err")"; }
done_testing
