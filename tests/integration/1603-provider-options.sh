#!/usr/bin/env bash
# Choosing the provider of a new sandbox, without any engine: --provider and the options of
# each provider on sandbox create and run (their flags and -o KEY=VALUE, typed by the
# provider's table), the agent file's sandbox: section, and `sbx sandbox providers`. A wrong
# combination is a usage error naming the option; nothing is created.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
unset DOCKER_HOST
EX="$SBX_SRCDIR/examples/coding-task"

run "$SBX" sandbox create --provider nope
expect_rc 2 "create: an unknown provider is a usage error"
expect_in "$T/err" "unknown provider 'nope' (local, docker" "listing the providers"
run "$SBX" sandbox create --provider docker
expect_rc 2 "create --provider docker without --image"
expect_in "$T/err" "--provider docker needs --image IMAGE" "says what is missing"
expect_in "$T/err" "never pulls" "and that the image must be there"
for o in "--ro /tmp" "--rw /tmp" "--isolation none" "--allow-host-uid" "--port-bind 127.0.0.1" "--allow-port 8080" "--network full"; do
    # shellcheck disable=SC2086 # an option and its value
    run "$SBX" sandbox create --provider docker --image img $o
    expect_rc 2 "create --provider docker $o is a usage error"
    case $o in
    --network*) expect_in "$T/err" "unknown docker network mode 'full' (none, bridge, host)" "naming the docker modes" ;;
    *) expect_in "$T/err" "option '${o%% *}' is for the local provider" "naming '${o%% *}'" ;;
    esac
done
for o in "--image img" "--docker-host unix:///x.sock" "--user nobody" "--cap-add NET_ADMIN" "--allow-cap-add"; do
    # shellcheck disable=SC2086
    run "$SBX" sandbox create $o
    expect_rc 2 "create $o without --provider docker is a usage error"
    expect_in "$T/err" "option '${o%% *}' is for --provider docker" "naming '${o%% *}'"
done
run "$SBX" sandbox create --network bridge
expect_rc 2 "the docker network modes are not local ones"
expect_in "$T/err" "unknown network mode 'bridge'" "local --network names its own modes"

run "$SBX" run --provider nope -m replay:/nonexistent "x"
expect_rc 2 "run: an unknown provider is a usage error"
expect_in "$T/err" "unknown provider 'nope' (local, docker" "listing the providers"
run "$SBX" run --provider docker -m replay:/nonexistent "x"
expect_rc 2 "run --provider docker without an image"
expect_in "$T/err" "--provider docker needs --image IMAGE (or image: in the agent file" "says where an image can come from"
run "$SBX" run --provider docker --image img --ro /tmp -m replay:/nonexistent "x"
expect_rc 2 "run: a local-only option with --provider docker"
expect_in "$T/err" "option '--ro' is for the local provider" "naming it"

# The agent file's sandbox section.
mkfile() { sed "s|^manifest: manifest.yaml|manifest: $EX/manifest.yaml\nsandbox:\n$1|" "$EX/agent.yaml" >"$T/agent.yaml"; }
mkfile "  provider: docker\n  image: img\n  colour: blue"
run "$SBX" run -m "replay:$EX/run.jsonl" -a "$T/agent.yaml" "x"
expect_rc 1 "an unknown key of the sandbox section is an error"
expect_in "$T/err" "field 'sandbox': provider 'docker' has no option 'colour'" "naming the key and the provider"
mkfile "  provider: cloud"
run "$SBX" run -m "replay:$EX/run.jsonl" -a "$T/agent.yaml" "x"
expect_rc 1 "an unknown provider in the sandbox section"
expect_in "$T/err" "unknown provider 'cloud' (local, docker" "names it and lists the providers"
mkfile "  provider: docker"
run "$SBX" run -m "replay:$EX/run.jsonl" -a "$T/agent.yaml" "x"
expect_rc 2 "the file's provider: docker without an image anywhere"
expect_in "$T/err" "--provider docker needs --image IMAGE" "is the same usage error"
mkfile "  provider: docker\n  image: img"
run "$SBX" run --ro /tmp -m "replay:$EX/run.jsonl" -a "$T/agent.yaml" "x"
expect_rc 2 "the file's provider: docker applies (a local-only option is refused)"
expect_in "$T/err" "option '--ro' is for the local provider" "naming the option"
mkfile "  provider: docker\n  image: img\n  memory: 512M\n  pids: 100\n  cpus: 0.5"
run "$SBX" run --provider local --isolation namespaces -m "replay:$EX/run.jsonl" -a "$T/agent.yaml" "Do the task in TASK.md."
expect_rc 0 "--provider local overrides the file's docker section"
expect_in "$T/out" "passes all 3" "and the run is the local one"
nothing_left "nothing is left"

# Declared options, checked by the provider's table: an unknown key names the provider and what
# it may have meant, a value of the wrong type says what the option wants.
run "$SBX" sandbox create --provider docker --image img -o imgae=other
expect_rc 2 "-o with a key docker does not declare"
expect_in "$T/err" "provider 'docker' has no option 'imgae' (did you mean 'image'?)" "names the key, the provider and the near one"
run "$SBX" sandbox create -o docker-host=/x.sock --provider docker --image img
expect_in "$T/err" "provider 'docker' has no option 'docker-host' (did you mean 'host'?)" "a flag's name as a key points to the key"
run "$SBX" sandbox create -o colour=blue
expect_rc 2 "-o with a key local does not declare"
expect_in "$T/err" "provider 'local' has no option 'colour'" "names the key and the default provider"
expect_not_in "$T/err" "did you mean" "without a guess when nothing is near"
run "$SBX" sandbox create --provider docker --image img -o ro=/tmp
expect_in "$T/err" "provider 'docker' has no option 'ro'" "a local key with -o and another provider"
run "$SBX" sandbox create --memory lots
expect_rc 2 "a size that is not one"
expect_in "$T/err" "--memory wants a size such as 512M, not 'lots'" "says what --memory wants"
run "$SBX" sandbox create -o pids=many
expect_rc 2 "-o with a value of the wrong type"
expect_in "$T/err" "--pids wants a positive count, not 'many'" "says what pids wants"
run "$SBX" sandbox create -o cpus=0.5x
expect_in "$T/err" "--cpus wants a number of CPUs such as 1.5 (or none), not '0.5x'" "cpus"
run "$SBX" sandbox create --provider docker --image img -o allow_cap_add=perhaps
expect_in "$T/err" "--allow-cap-add wants true or false, not 'perhaps'" "a bool"
run "$SBX" sandbox create --port 70000
expect_in "$T/err" "--port wants a port number, not '70000'" "a port"
run "$SBX" sandbox create --isolation partial
expect_in "$T/err" "unknown isolation 'partial' (namespaces, none)" "a choice names the choices"
run "$SBX" sandbox create --ro relative/path
expect_in "$T/err" "--ro wants an absolute path, not 'relative/path'" "a path"
run "$SBX" sandbox create -o memory
expect_rc 2 "-o without '='"
expect_in "$T/err" "-o wants KEY=VALUE, not 'memory'" "says what -o wants"
run "$SBX" sandbox create --provider docker --workspace "$T" --image img
expect_rc 2 "--workspace with a provider whose workspaces are not on this host"
expect_in "$T/err" "workspaces of provider 'docker' are not on this host" "says so"
run "$SBX" run --provider docker --image img -o imgae=x -m replay:/nonexistent "x"
expect_rc 2 "run refuses an unknown -o key too"
expect_in "$T/err" "provider 'docker' has no option 'imgae' (did you mean 'image'?)" "with the same message"
nothing_left "no bad option made anything"

# -o KEY=VALUE and the flags are the same options.
run "$SBX" sandbox create -o ports=8080 --port 8081 --port 8082 --json
expect_rc 0 "create with -o ports=8080 --port 8081 --port 8082"
expect_eq "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["exposed_ports"])' "$T/out" 2>/dev/null)"     "[8080, 8081, 8082]" "the three are one list of exposed ports"
id=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$T/out" 2>/dev/null)
"$SBX" sandbox rm "$id" >/dev/null 2>&1
run "$SBX" sandbox create -o network=allow: 
expect_rc 2 "a provider's own rule through -o"
expect_in "$T/err" "wants domains" "is the same as through --network"

# The agent file's section: the provider's declared keys, typed; trusted keys are refused.
mkfile "  memory: lots"
run "$SBX" run -m "replay:$EX/run.jsonl" -a "$T/agent.yaml" "x"
expect_rc 1 "a value of the wrong type in the section"
expect_in "$T/err" "field 'sandbox': option 'memory' wants a size such as 512M, not 'lots'" "names the field and the key"
mkfile "  ro: /tmp"
run "$SBX" run -m "replay:$EX/run.jsonl" -a "$T/agent.yaml" "x"
expect_rc 1 "a host path grant in the section"
expect_in "$T/err" "key 'ro' of provider 'local' is trusted host configuration: give it on the command line (--ro)" "is the command line's only"
mkfile "  image: img"
run "$SBX" run -m "replay:$EX/run.jsonl" -a "$T/agent.yaml" "x"
expect_rc 1 "a docker key in a section of the default provider"
expect_in "$T/err" "field 'sandbox': provider 'local' has no option 'image'" "names the provider the section is for"

# The providers as the table has them.
run "$SBX" sandbox providers
expect_rc 0 "sbx sandbox providers"
expect_in "$T/out" "local (default): " "the default provider first"
expect_in "$T/out" "docker: " "and docker"
expect_in "$T/out" "host=URL  --docker-host  [locator]" "docker's locator option with its flag"
expect_in "$T/out" "image=IMAGE  --image  [required]" "and its required one"
run "$SBX" sandbox providers --json
expect_rc 0 "sbx sandbox providers --json"
expect_eq "$(python3 -c '
import json, sys
ps = json.load(open(sys.argv[1]))
byname = {p["name"]: p for p in ps}
print(",".join(p["name"] for p in ps[:2]), byname["local"]["default"], byname["docker"]["default"],
      "mounts" in byname["local"]["traits"], "mounts" in byname["docker"]["traits"],
      "host-workspace" in byname["docker"]["traits"],
      [o["key"] for o in byname["docker"]["options"] if o["locator"]],
      sorted(o["key"] for o in byname["local"]["options"] if o["trusted"]))
' "$T/out" 2>&1)" "local,docker True False True False False ['host', 'tls_ca', 'tls_cert', 'tls_key'] ['allow_dangerous_grant', 'allow_dangerous_workspace', 'allow_host_uid', 'isolation', 'port_bind', 'publish', 'ro', 'rw', 'tied']"     "the JSON has each provider with its traits and options"
run "$SBX" sandbox providers docker
expect_rc 0 "one provider by name"
expect_not_in "$T/out" "local" "only that one"
run "$SBX" sandbox providers nope
expect_rc 1 "an unknown provider"
expect_in "$T/err" "unknown provider 'nope' (local, docker" "names the known ones"
run "$SBX" sandbox ps --provider nope
expect_rc 2 "ps --provider with an unknown provider"
expect_in "$T/err" "ps: unknown provider 'nope' (local, docker" "is a usage error naming the known ones"

done_testing
