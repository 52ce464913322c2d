#!/usr/bin/env bash
# Test storage servers on loopback: s3rver (S3) and Azurite (Azure Blob), from npm.
#   servers.sh start DIR   install (once, cached), start both on free ports, write DIR/env
#   servers.sh stop DIR    stop them
#   servers.sh install     only install them (scripts/check, once before the tests run)
# DIR/env holds SBX_TEST_S3_ENDPOINT, SBX_TEST_S3_ACCESS_KEY, SBX_TEST_S3_SECRET_KEY,
# SBX_TEST_AZURE_ENDPOINT, SBX_TEST_AZURE_ACCOUNT, SBX_TEST_AZURE_KEY and the two pids
# (docs/internals/mounts.md).
set -euo pipefail
cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && { [ -n "$dir" ] || [ "$cmd" = install ]; } ||
    { echo "usage: servers.sh start|stop DIR, or servers.sh install" >&2; exit 2; }
cache=${SBX_TEST_NPM_CACHE:-/tmp/sbx-test-npm}
# Azurite's published development account and key.
az_account=devstoreaccount1
az_key='Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=='

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

wait_port() { # wait_port PORT PID NAME: until something listens, at most 30 s
    local i
    for ((i = 0; i < 300; i++)); do
        kill -0 "$2" 2>/dev/null || { echo "servers.sh: $3 exited; see $dir/$3.log" >&2; tail -5 "$dir/$3.log" >&2; return 1; }
        if python3 -c 'import socket,sys; socket.create_connection(("127.0.0.1",int(sys.argv[1])),1)' "$1" 2>/dev/null; then
            return 0
        fi
        sleep 0.1
    done
    echo "servers.sh: $3 does not answer on port $1" >&2
    return 1
}

install() {
    if [ -x "$cache/node_modules/.bin/s3rver" ] && [ -x "$cache/node_modules/.bin/azurite-blob" ]; then
        return 0
    fi
    command -v npm >/dev/null || { echo "servers.sh: npm is missing (CI installs Node.js)" >&2; return 1; }
    mkdir -p "$cache"
    # One installer at a time: tests run in parallel.
    (
        flock 9
        [ -x "$cache/node_modules/.bin/s3rver" ] && [ -x "$cache/node_modules/.bin/azurite-blob" ] ||
            npm install --prefix "$cache" --no-audit --no-fund --loglevel=error s3rver@3.7.1 azurite@3 >&2
    ) 9>"$cache.lock"
}

case $cmd in
install)
    install
    ;;
start)
    mkdir -p "$dir/s3" "$dir/azure"
    install
    s3port=$(free_port)
    azport=$(free_port)
    # setsid: the servers are not in the test's process group, stop kills them by pid.
    setsid "$cache/node_modules/.bin/s3rver" --address 127.0.0.1 --port "$s3port" \
        --directory "$dir/s3" --silent </dev/null >"$dir/s3rver.log" 2>&1 &
    s3pid=$!
    setsid "$cache/node_modules/.bin/azurite-blob" --blobHost 127.0.0.1 --blobPort "$azport" \
        --location "$dir/azure" --silent --skipApiVersionCheck --loose </dev/null >"$dir/azurite.log" 2>&1 &
    azpid=$!
    cat >"$dir/env" <<ENV
SBX_TEST_S3_ENDPOINT=http://127.0.0.1:$s3port
SBX_TEST_S3_ACCESS_KEY=S3RVER
SBX_TEST_S3_SECRET_KEY=S3RVER
SBX_TEST_AZURE_ENDPOINT=http://127.0.0.1:$azport/$az_account
SBX_TEST_AZURE_ACCOUNT=$az_account
SBX_TEST_AZURE_KEY=$az_key
SBX_TEST_S3_PID=$s3pid
SBX_TEST_AZURE_PID=$azpid
ENV
    wait_port "$s3port" "$s3pid" s3rver
    wait_port "$azport" "$azpid" azurite
    ;;
stop)
    [ -f "$dir/env" ] || exit 0
    # shellcheck disable=SC1091
    . "$dir/env"
    for p in "$SBX_TEST_S3_PID" "$SBX_TEST_AZURE_PID"; do
        kill "$p" 2>/dev/null || true
    done
    for p in "$SBX_TEST_S3_PID" "$SBX_TEST_AZURE_PID"; do
        for ((i = 0; i < 50; i++)); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$p" 2>/dev/null || true
    done
    ;;
*)
    echo "usage: servers.sh start|stop DIR, or servers.sh install" >&2
    exit 2
    ;;
esac
