# Shared by the E2B tests; source it after tests/integration/lib.sh.
# E2B's npm SDK, pinned, installed once into ${SBX_TEST_NPM_CACHE:-/tmp/sbx-test-npm}/e2b-VERSION
# (the cache tests/storage/servers.sh uses), and the SDK scripts' JSON result lines as TAP.
E2B_SDK_VERSION=2.51.0
E2B_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# e2b_sdk: export E2B_SDK_DIR, or skip the whole test saying why.
e2b_sdk() {
    command -v node >/dev/null && command -v npm >/dev/null || skip_all "node or npm is missing"
    local cache=${SBX_TEST_NPM_CACHE:-/tmp/sbx-test-npm}
    E2B_SDK_DIR="$cache/e2b-$E2B_SDK_VERSION"
    export E2B_SDK_DIR
    have() { [ "$(node -p "require('$E2B_SDK_DIR/node_modules/e2b/package.json').version" 2>/dev/null)" = "$E2B_SDK_VERSION" ]; }
    have && return 0
    mkdir -p "$E2B_SDK_DIR"
    # One installer at a time: tests run in parallel.
    if ! (
        flock 9
        have || npm install --prefix "$E2B_SDK_DIR" --no-audit --no-fund --loglevel=error \
            "e2b@$E2B_SDK_VERSION" >"$T/npm.log" 2>&1
    ) 9>"$E2B_SDK_DIR.lock"; then
        skip_all "npm cannot install e2b@$E2B_SDK_VERSION: $(tail -1 "$T/npm.log" 2>/dev/null)"
    fi
    have || skip_all "npm did not install e2b@$E2B_SDK_VERSION"
}

# e2b_tap FILE: each {"ok","name","diag"} line of FILE as a TAP result; any other line (a
# script that crashed) fails. Returns how many results there were in $e2b_results.
e2b_tap() {
    local ok name d
    e2b_results=0
    while IFS=$'\t' read -r ok name d; do
        e2b_results=$((e2b_results + 1))
        if [ "$ok" = 1 ]; then
            ok "$name"
        else
            not_ok "$name"
            [ -z "$d" ] || diag "$(printf '%b' "$d")"
        fi
    done < <(python3 -c '
import json, sys
for line in open(sys.argv[1], errors="replace"):
    try:
        r = json.loads(line)
        ok, name, d = r["ok"] is True, r["name"], r.get("diag", "")
    except (ValueError, KeyError, TypeError):
        ok, name, d = False, "a line that is no result", line.rstrip()
    d = d[:3000].replace("\\", "\\\\").replace("\t", " ").replace("\n", "\\n")
    print("%d\t%s\t%s" % (ok, name.replace("\t", " "), d))
' "$1")
}

# e2b_fake_start DIR [--tls]: skip when sbx cannot make sandboxes here (with the E2B layout the fake
# uses), else start the fake in DIR and export its env (E2B_API_URL, E2B_SANDBOX_URL,
# E2B_API_KEY, FAKE_E2B_*).
e2b_fake_start() {
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
    "$E2B_HERE/fake.sh" start "$dir" $tls || { echo "Bail out! the fake does not start"; exit 1; }
    set -a
    . "$dir/env"
    set +a
}

# knob JSON: set the fake's test knobs. fake_stat NAME: one of its counters.
# (Over HTTPS the fake's certificate is the one NODE_EXTRA_CA_CERTS names.)
knob() { python3 -c 'import os, ssl, sys, urllib.request; urllib.request.urlopen(urllib.request.Request(sys.argv[1] + "/_fake/knobs", sys.argv[2].encode(), {"Content-Type": "application/json"}), context=ssl.create_default_context(cafile=os.environ.get("NODE_EXTRA_CA_CERTS"))).read()' "$E2B_API_URL" "$1"; }
fake_stat() { python3 -c 'import json, os, ssl, sys, urllib.request; print(json.load(urllib.request.urlopen(sys.argv[1] + "/_fake/stats", context=ssl.create_default_context(cafile=os.environ.get("NODE_EXTRA_CA_CERTS"))))[sys.argv[2]])' "$E2B_API_URL" "$1"; }

# fake_state ID: the state the service gives sandbox ID (running, paused), asked directly.
fake_state() { python3 -c 'import json, os, ssl, sys, urllib.request; print(json.load(urllib.request.urlopen(urllib.request.Request(sys.argv[1] + "/sandboxes/" + sys.argv[2], headers={"X-API-KEY": os.environ["E2B_API_KEY"]}), context=ssl.create_default_context(cafile=os.environ.get("NODE_EXTRA_CA_CERTS"))))["state"])' "$E2B_API_URL" "$1" 2>/dev/null; }

# same A B NAME: files A and B are equal (the difference as diagnostics).
same() {
    if cmp -s "$1" "$2"; then ok "$3"; else
        not_ok "$3"; diag "$(diff "$1" "$2" 2>&1 | head -20)"
    fi
}
