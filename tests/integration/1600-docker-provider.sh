#!/bin/bash
# The Docker provider against a real engine: SBX_TEST_DOCKER_HOST (a unix socket path) and
# SBX_TEST_DOCKER_IMAGE (an image already in its store) name them. Without them this skips,
# or fails when SBX_TEST_DOCKER_REQUIRED=1 (CI, which starts dockerd and podman's service).
# The session-level checks are the C program tests/unit/test-docker-engine.c, run here as
# its own TAP stream.
. "$(dirname "$0")/lib.sh"

host=${SBX_TEST_DOCKER_HOST:-}
image=${SBX_TEST_DOCKER_IMAGE:-}
if [ -z "$host" ] || [ -z "$image" ]; then
    if [ "${SBX_TEST_DOCKER_REQUIRED:-}" = 1 ]; then
        not_ok "SBX_TEST_DOCKER_REQUIRED=1 but SBX_TEST_DOCKER_HOST or SBX_TEST_DOCKER_IMAGE is unset"
        done_testing
        exit 1
    fi
    echo "1..0 # SKIP no docker engine"
    exit 0
fi
prog=${SBX_BUILDDIR:?}/tests/test-docker-engine
if [ ! -x "$prog" ]; then
    not_ok "the engine test program is built"; diag "missing $prog"
    done_testing
    exit 1
fi
if [ ! -S "$host" ]; then
    not_ok "SBX_TEST_DOCKER_HOST is a socket"; diag "'$host' is not a socket"
    done_testing
    exit 1
fi

# Its TAP lines, renumbered into ours.
SBX_TEST_DOCKER_HOST=$host SBX_TEST_DOCKER_IMAGE=$image timeout 500 "$prog" >"$T/engine" 2>&1
prog_rc=$?
while IFS= read -r line; do
    case $line in
    "ok "*) ok "engine: ${line#ok * - }" ;;
    "not ok "*) not_ok "engine: ${line#not ok * - }" ;;
    "#"*) echo "$line" ;;
    esac
done <"$T/engine"
if [ "$prog_rc" = 0 ]; then ok "the engine test program passed"; else
    not_ok "the engine test program passed"; diag "exit status $prog_rc" "$(tail -c 2000 "$T/engine")"
fi
done_testing
