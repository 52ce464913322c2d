# Shared by the Daytona tests; source it after tests/integration/lib.sh.
# Daytona's npm SDK, pinned, installed once into ${SBX_TEST_NPM_CACHE:-/tmp/sbx-test-npm}/daytona-VERSION,
# and the SDK script's JSON result lines as TAP.
DAYTONA_SDK_VERSION=0.218.0
DAYTONA_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# daytona_sdk: export DAYTONA_SDK_DIR, or skip the whole test saying why.
daytona_sdk() {
    command -v node >/dev/null && command -v npm >/dev/null || skip_all "node or npm is missing"
    DAYTONA_SDK_DIR="${SBX_TEST_NPM_CACHE:-/tmp/sbx-test-npm}/daytona-$DAYTONA_SDK_VERSION"
    export DAYTONA_SDK_DIR
    SBX_TEST_NPM_CACHE=${SBX_TEST_NPM_CACHE:-/tmp/sbx-test-npm} "$DAYTONA_HERE/install-sdk.sh" >"$T/npm.log" 2>&1 ||
        skip_all "npm cannot install @daytonaio/sdk@$DAYTONA_SDK_VERSION: $(tail -1 "$T/npm.log" 2>/dev/null)"
}

# daytona_tap FILE: each {"ok","name","diag"} line of FILE as a TAP result; any other line (a
# script that crashed) fails. Sets daytona_results to how many results there were.
daytona_tap() {
    local ok name d
    daytona_results=0
    while IFS=$'\t' read -r ok name d; do
        daytona_results=$((daytona_results + 1))
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

# daytona_probe: skip the whole test when sbx cannot make sandboxes here (with the layout the
# fake uses).
daytona_probe() {
    local id
    mkdir -m 0700 "$T/probe" "$T/probe/run"
    printf 'version: 1\nroot: /home/daytona\nusers: [daytona]\n' >"$T/probe/m.yaml"
    if ! id=$(env XDG_RUNTIME_DIR="$T/probe/run" SBX_WORKSPACES="$T/probe/ws" SBX_STOPPED="$T/probe/stopped" \
        SBX_SNAPSHOTS="$T/probe/snap" "$SBX" sandbox create --manifest "$T/probe/m.yaml" 2>"$T/probe/err"); then
        skip_all "sbx cannot create sandboxes here: $(tail -1 "$T/probe/err")"
    fi
    env XDG_RUNTIME_DIR="$T/probe/run" SBX_WORKSPACES="$T/probe/ws" SBX_STOPPED="$T/probe/stopped" \
        SBX_SNAPSHOTS="$T/probe/snap" "$SBX" sandbox rm "$id" >/dev/null 2>&1
}

# daytona_knob JSON: set the fake's test knobs.
daytona_knob() { python3 -c 'import os, ssl, sys, urllib.request; urllib.request.urlopen(urllib.request.Request(sys.argv[1] + "/_fake/knobs", sys.argv[2].encode(), {"Content-Type": "application/json"}), context=ssl.create_default_context(cafile=os.environ.get("NODE_EXTRA_CA_CERTS"))).read()' "$FAKE_DAYTONA_URL" "$1"; }

# daytona_stat NAME: one of the fake's counters.
daytona_stat() { python3 -c 'import json, os, ssl, sys, urllib.request; print(json.load(urllib.request.urlopen(sys.argv[1] + "/_fake/stats", context=ssl.create_default_context(cafile=os.environ.get("NODE_EXTRA_CA_CERTS"))))[sys.argv[2]])' "$FAKE_DAYTONA_URL" "$1"; }

# daytona_fake_start DIR [--tls]: skip when sbx cannot make sandboxes here, else start the fake
# in DIR and export its env (DAYTONA_API_URL, DAYTONA_API_KEY, FAKE_DAYTONA_*).
daytona_fake_start() {
    daytona_probe
    mkdir -p "$1"
    "$DAYTONA_HERE/fake.sh" start "$1" ${2:-} || { echo "Bail out! the fake does not start"; exit 1; }
    set -a
    . "$1/env"
    set +a
}

# same A B NAME: files A and B are equal (the difference as diagnostics).
same() {
    if cmp -s "$1" "$2"; then ok "$3"; else
        not_ok "$3"; diag "$(diff "$1" "$2" 2>&1 | head -20)"
    fi
}
