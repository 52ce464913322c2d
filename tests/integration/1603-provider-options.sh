#!/usr/bin/env bash
# Choosing the provider of a new sandbox, without any engine: --provider and the options of
# each provider on sandbox create and run, and the agent file's sandbox: section. A wrong
# combination is a usage error naming the option; nothing is created.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
unset DOCKER_HOST
EX="$SBX_SRCDIR/examples/coding-task"

run "$SBX" sandbox create --provider nope
expect_rc 2 "create: an unknown provider is a usage error"
expect_in "$T/err" "unknown provider 'nope' (local, docker)" "listing the providers"
run "$SBX" sandbox create --provider docker
expect_rc 2 "create --provider docker without --image"
expect_in "$T/err" "--provider docker needs --image IMAGE" "says what is missing"
expect_in "$T/err" "never pulls" "and that the image must be there"
for o in "--ro /tmp" "--rw /tmp" "--isolation none" "--disk 1G" "--port-bind 127.0.0.1" "--allow-port 8080" "--network full"; do
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
expect_in "$T/err" "unknown provider 'nope' (local, docker)" "listing the providers"
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
expect_in "$T/err" "field 'sandbox': unknown key 'colour'" "naming the key"
mkfile "  provider: cloud"
run "$SBX" run -m "replay:$EX/run.jsonl" -a "$T/agent.yaml" "x"
expect_rc 1 "an unknown provider in the sandbox section"
expect_in "$T/err" "unknown provider 'cloud' (local, docker)" "names it and lists the providers"
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

done_testing
