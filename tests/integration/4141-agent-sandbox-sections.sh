#!/usr/bin/env bash
# The sandbox: section of an agent the start agent reaches (an agent as tool, a handoff): every
# fresh sandbox of a run comes from one client, the start agent's provider and options, so an
# agent whose section asks for something else is refused before the model is asked, naming its
# file; the same section, or none, runs.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/model-lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
trap 'stop_fake; sandbox_cleanup' EXIT

cat >"$T/inner-docker.yaml" <<'YAML'
name: InnerDocker
capabilities: [shell]
manifest: {entries: {}}
sandbox: {provider: docker, image: sbx-test:1}
YAML
cat >"$T/top.yaml" <<'YAML'
name: Top
agents_as_tools: [inner-docker.yaml]
YAML
mk "$T/s.json" '[resp(1, msg("never"))]'
start_fake "$T/s.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/top.yaml" "go"
expect_rc 1 "an agent as tool asking for another provider is refused"
expect_in "$T/err" "agent file '$T/inner-docker.yaml': field 'sandbox': it asks for sandboxes of provider 'docker', but every sandbox of a run comes from the start agent's provider and options (provider 'local')" \
    "naming the nested file, its provider and the run's"
expect_eq "$(fake_query 'len(reqs)')" 0 "before the model is asked"
expect_eq "$(ls "$RUNBASE" 2>/dev/null | wc -l)" 0 "and before any sandbox is made"

# A handoff target with other options of the same provider: refused too, saying so.
cat >"$T/a.yaml" <<'YAML'
name: A
capabilities: [shell]
manifest: {entries: {}}
sandbox: {provider: local, memory: 1G}
handoffs: [b.yaml]
YAML
cat >"$T/b.yaml" <<'YAML'
name: B
capabilities: [shell]
manifest: {entries: {}}
sandbox: {provider: local, memory: 2G}
YAML
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" "go"
expect_rc 1 "a handoff with other options of the same provider is refused"
expect_in "$T/err" "agent file '$T/b.yaml': field 'sandbox': it asks for sandboxes of provider 'local' with other options, but every sandbox of a run comes from the start agent's provider and options (provider 'local', from '$T/a.yaml' and the caller)" \
    "saying the options differ"

# The same section on both runs: the nested agent's command runs in its own local sandbox.
sed -i 's/memory: 2G/memory: 1G/' "$T/b.yaml"
mk "$T/s.json" '[resp(1, fcall(1, "transfer_to_b", {})), resp(2, sh(2, "echo in-b")), resp(3, msg("done"))]'
start_fake "$T/s.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/a.yaml" "go"
expect_rc 0 "the same section on both agents runs"
expect_in "$T/out" "done" "to the end"
expect_eq "$(fake_query "[i['output'].split('Output:')[-1].strip() for i in reqs[-1]['body']['input'] if i.get('call_id') == 'c2' and i['type'] == 'function_call_output']")" \
    "['in-b']" "the handoff target's command ran"
# A --session run makes no fresh sandbox: the sections do not matter there.
ID=$("$SBX" sandbox create)
mk "$T/s.json" '[resp(1, msg("ok"))]'
start_fake "$T/s.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/top.yaml" --session "$ID" "go"
expect_rc 0 "with --session the nested agent's section is not in the way"
"$SBX" sandbox rm "$ID" >/dev/null 2>&1

done_testing
