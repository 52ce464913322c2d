#!/usr/bin/env bash
# The fake Blaxel service (fake-blaxel.py) for tests, on a free loopback port.
#   fake.sh start DIR [--tls]  start it, its sandboxes kept under DIR/state; write DIR/env
#                              (--tls: HTTPS with a certificate made here, NODE_EXTRA_CA_CERTS)
#   fake.sh stop DIR           stop it; remove every sandbox it made, and DIR/state
# DIR/env (shell assignments) holds what Blaxel's clients read: BL_API_URL, BL_RUN_URL,
# BL_API_KEY (a fresh random key the fake accepts), BL_WORKSPACE, BL_REGION; BL_DISABLE_H2 and
# DO_NOT_TRACK (the npm client then opens no edge connection and reports nothing); then
# FAKE_BLAXEL_URL, FAKE_BLAXEL_PID, FAKE_BLAXEL_STATE and FAKE_BLAXEL_LOG. $SBX names the sbx
# binary the sandboxes are made with. Images the fake knows: blaxel/base-image:latest and
# sbx-test-image.
set -euo pipefail
cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: fake.sh start|stop DIR [--tls]" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)

sbx_env() {
    env XDG_RUNTIME_DIR="$dir/state/run" SBX_WORKSPACES="$dir/state/ws" \
        SBX_STOPPED="$dir/state/stopped" SBX_SNAPSHOTS="$dir/state/snapshots" \
        XDG_STATE_HOME="$dir/state/state" "$@"
}

case $cmd in
start)
    : "${SBX:?SBX must name the sbx binary}"
    mkdir -p "$dir/state"
    key="bl_$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')"
    ws="sbx-test-$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')"
    scheme=http
    tls=()
    if [ "${3:-}" = --tls ]; then
        openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost \
            -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
            -keyout "$dir/key.pem" -out "$dir/cert.pem" >/dev/null 2>&1
        tls=(--tls-cert "$dir/cert.pem" --tls-key "$dir/key.pem")
        scheme=https
    fi
    # setsid: not in the test's process group; stop ends it by pid.
    BL_API_KEY=$key BL_WORKSPACE=$ws setsid python3 "$here/fake-blaxel.py" \
        --state-dir "$dir/state" --sbx "$SBX" --image sbx-test-image "${tls[@]}" \
        </dev/null >"$dir/fake.log" 2>&1 &
    pid=$!
    for ((i = 0; i < 600; i++)); do
        [ -s "$dir/state/port" ] && break
        kill -0 "$pid" 2>/dev/null || { echo "fake.sh: the fake exited:" >&2; tail -5 "$dir/fake.log" >&2; exit 1; }
        sleep 0.1
    done
    [ -s "$dir/state/port" ] || { echo "fake.sh: the fake did not start" >&2; kill "$pid"; exit 1; }
    read -r port <"$dir/state/port"
    {
        echo "BL_API_URL=$scheme://127.0.0.1:$port/v0"
        echo "BL_RUN_URL=$scheme://127.0.0.1:$port/run"
        echo "BL_API_KEY=$key"
        echo "BL_WORKSPACE=$ws"
        echo "BL_REGION=us-pdx-1"
        echo "BL_DISABLE_H2=true"
        echo "DO_NOT_TRACK=1"
        echo "FAKE_BLAXEL_URL=$scheme://127.0.0.1:$port"
        [ "$scheme" = http ] || echo "NODE_EXTRA_CA_CERTS=$dir/cert.pem"
        echo "FAKE_BLAXEL_PID=$pid"
        echo "FAKE_BLAXEL_STATE=$dir/state"
        echo "FAKE_BLAXEL_LOG=$dir/fake.log"
    } >"$dir/env"
    ;;
stop)
    [ -f "$dir/env" ] || exit 0
    pid=$(sed -n 's/^FAKE_BLAXEL_PID=//p' "$dir/env")
    if [ -n "$pid" ] && kill "$pid" 2>/dev/null; then
        # The fake removes its sandboxes on SIGTERM; give it time, then make sure.
        for ((i = 0; i < 600; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
    fi
    if [ -d "$dir/state" ] && [ -n "${SBX:-}" ]; then
        for id in $(sbx_env "$SBX" sandbox ps --all --json 2>/dev/null |
            python3 -c 'import json,sys; print(" ".join(s["id"] for s in json.load(sys.stdin)))' 2>/dev/null); do
            sbx_env "$SBX" sandbox rm "$id" >/dev/null 2>&1 || true
        done
        sbx_env "$SBX" sandbox prune >/dev/null 2>&1 || true
    fi
    for m in $(awk -v t="$dir/state/" 'index($5, t) == 1 {print $5}' /proc/self/mountinfo | sort -r); do
        umount -l "$m" 2>/dev/null || true
    done
    rm -rf "$dir/state" "$dir/env" "$dir/key.pem" "$dir/cert.pem"
    ;;
*)
    echo "usage: fake.sh start|stop DIR" >&2
    exit 2
    ;;
esac
