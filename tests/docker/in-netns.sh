#!/usr/bin/env bash
# Run a test of the remote Docker engine (tests/docker/engines.sh start-tls) in the network
# namespace of its clients, where the engine's address is reachable (and nothing else but
# loopback):   in-netns.sh COMMAND [ARGS...]
# Without that engine (SBX_TEST_DOCKER_TLS_NETNS) it skips, or fails when
# SBX_TEST_DOCKER_TLS_REQUIRED=1 (scripts/check started it).
ns=${SBX_TEST_DOCKER_TLS_NETNS:-}
if [ -z "$ns" ] || [ ! -e "/run/netns/$ns" ]; then
    if [ "${SBX_TEST_DOCKER_TLS_REQUIRED:-}" = 1 ]; then
        echo "Bail out! no TLS docker engine (SBX_TEST_DOCKER_TLS_REQUIRED=1)"
        exit 1
    fi
    echo "1..0 # SKIP no TLS docker engine given (scripts/check starts one: tests/docker/engines.sh start-tls)"
    exit 77
fi
exec nsenter --net="/run/netns/$ns" "$@"
