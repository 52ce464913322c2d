# Shared by the Runloop tests; source it after tests/integration/lib.sh.
# Runloop's npm client, pinned, installed once into
# ${SBX_TEST_NPM_CACHE:-/tmp/sbx-test-npm}/runloop-VERSION, and the client scripts' JSON result
# lines as TAP.
RUNLOOP_SDK_VERSION=1.32.0
RUNLOOP_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$RUNLOOP_HERE/../e2b/lib.sh"

# runloop_sdk: export RUNLOOP_SDK_DIR, or skip the whole test saying why.
runloop_sdk() {
    command -v node >/dev/null && command -v npm >/dev/null || skip_all "node or npm is missing"
    RUNLOOP_SDK_DIR="${SBX_TEST_NPM_CACHE:-/tmp/sbx-test-npm}/runloop-$RUNLOOP_SDK_VERSION"
    export RUNLOOP_SDK_DIR
    "$RUNLOOP_HERE/install-sdk.sh" >"$T/npm.log" 2>&1 ||
        skip_all "npm cannot install @runloop/api-client@$RUNLOOP_SDK_VERSION: $(tail -1 "$T/npm.log" 2>/dev/null)"
}

# runloop_fake_start DIR: skip when sbx cannot make sandboxes here (with the devbox layout the
# fake uses), else start the fake in DIR and export its env (RUNLOOP_BASE_URL,
# RUNLOOP_API_KEY, FAKE_RUNLOOP_*).
runloop_fake_start() {
    local dir=$1 id
    mkdir -m 0700 "$T/probe" "$T/probe/run"
    printf 'version: 1\nroot: /home/user\nusers: [user]\n' >"$T/probe/m.yaml"
    if ! id=$(env XDG_RUNTIME_DIR="$T/probe/run" SBX_WORKSPACES="$T/probe/ws" SBX_STOPPED="$T/probe/stopped" \
        SBX_SNAPSHOTS="$T/probe/snap" "$SBX" sandbox create --manifest "$T/probe/m.yaml" 2>"$T/probe/err"); then
        skip_all "sbx cannot create sandboxes here: $(tail -1 "$T/probe/err")"
    fi
    env XDG_RUNTIME_DIR="$T/probe/run" SBX_WORKSPACES="$T/probe/ws" SBX_STOPPED="$T/probe/stopped" \
        SBX_SNAPSHOTS="$T/probe/snap" "$SBX" sandbox rm "$id" >/dev/null 2>&1
    mkdir -p "$dir"
    "$RUNLOOP_HERE/fake.sh" start "$dir" || { echo "Bail out! the fake does not start"; exit 1; }
    set -a
    . "$dir/env"
    set +a
}

# rl_knob JSON: set the fake's test knobs. rl_stat NAME: one of its counters.
rl_knob() { python3 -c 'import sys, urllib.request; urllib.request.urlopen(urllib.request.Request(sys.argv[1] + "/_fake/knobs", sys.argv[2].encode(), {"Content-Type": "application/json"})).read()' "$RUNLOOP_BASE_URL" "$1"; }
rl_stat() { python3 -c 'import json, sys, urllib.request; print(json.load(urllib.request.urlopen(sys.argv[1] + "/_fake/stats"))[sys.argv[2]])' "$RUNLOOP_BASE_URL" "$1"; }
# rl_status ID: the devbox's status at the service, asked directly.
rl_status() { python3 -c 'import json, os, sys, urllib.request; print(json.load(urllib.request.urlopen(urllib.request.Request(sys.argv[1] + "/v1/devboxes/" + sys.argv[2], headers={"Authorization": "Bearer " + os.environ["RUNLOOP_API_KEY"]})))["status"])' "$RUNLOOP_BASE_URL" "$1" 2>/dev/null; }
