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

# runloop_fake_start DIR [--tls]: skip when sbx cannot make sandboxes here (with the devbox layout the
# fake uses), else start the fake in DIR and export its env (RUNLOOP_BASE_URL,
# RUNLOOP_API_KEY, FAKE_RUNLOOP_*).
runloop_fake_start() {
    local dir=$1 tls=${2:-} id
    mkdir -m 0700 "$T/probe" "$T/probe/run"
    printf 'version: 1\nroot: /home/user\nusers: [user]\n' >"$T/probe/m.yaml"
    if ! id=$(env XDG_RUNTIME_DIR="$T/probe/run" SBX_WORKSPACES="$T/probe/ws" SBX_STOPPED="$T/probe/stopped" \
        SBX_SNAPSHOTS="$T/probe/snap" "$SBX" sandbox create --manifest "$T/probe/m.yaml" 2>"$T/probe/err"); then
        skip_all "sbx cannot create sandboxes here: $(tail -1 "$T/probe/err")"
    fi
    env XDG_RUNTIME_DIR="$T/probe/run" SBX_WORKSPACES="$T/probe/ws" SBX_STOPPED="$T/probe/stopped" \
        SBX_SNAPSHOTS="$T/probe/snap" "$SBX" sandbox rm "$id" >/dev/null 2>&1
    mkdir -p "$dir"
    "$RUNLOOP_HERE/fake.sh" start "$dir" $tls || { echo "Bail out! the fake does not start"; exit 1; }
    set -a
    . "$dir/env"
    set +a
}

# rl_knob JSON: set the fake's test knobs. rl_stat NAME: one of its counters. rl_status ID: the
# devbox's status at the service, asked directly. (Over HTTPS the fake's certificate is the one
# NODE_EXTRA_CA_CERTS names.)
rl_py() {
    python3 - "$RUNLOOP_BASE_URL" "$@" <<'PY'
import json, os, ssl, sys, urllib.request
base, op, arg = sys.argv[1], sys.argv[2], sys.argv[3]
ctx = ssl.create_default_context(cafile=os.environ.get("NODE_EXTRA_CA_CERTS"))
if op == "knob":
    urllib.request.urlopen(urllib.request.Request(base + "/_fake/knobs", arg.encode(), {"Content-Type": "application/json"}), context=ctx).read()
elif op == "stat":
    print(json.load(urllib.request.urlopen(base + "/_fake/stats", context=ctx))[arg])
else:
    req = urllib.request.Request(base + "/v1/devboxes/" + arg, headers={"Authorization": "Bearer " + os.environ["RUNLOOP_API_KEY"]})
    view = json.load(urllib.request.urlopen(req, context=ctx))
    print(view["status"] if op == "status" else json.dumps(view.get(op), sort_keys=True))
PY
}
rl_knob() { rl_py knob "$1"; }
rl_stat() { rl_py stat "$1"; }
rl_status() { rl_py status "$1" 2>/dev/null; }
# rl_field FIELD ID: a field of the devbox's view at the service, as sorted JSON.
rl_field() { rl_py "$1" "$2" 2>/dev/null; }
