# Shared by the Blaxel tests; source it after tests/integration/lib.sh.
BLAXEL_SDK_VERSION=0.3.21
BLAXEL_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# blaxel_sdk: export BLAXEL_SDK_DIR, or skip the whole test saying why.
blaxel_sdk() {
    command -v node >/dev/null && command -v npm >/dev/null || skip_all "node or npm is missing"
    BLAXEL_SDK_DIR="${SBX_TEST_NPM_CACHE:-/tmp/sbx-test-npm}/blaxel-$BLAXEL_SDK_VERSION"
    export BLAXEL_SDK_DIR
    SBX_TEST_NPM_CACHE=${SBX_TEST_NPM_CACHE:-/tmp/sbx-test-npm} "$BLAXEL_HERE/install-sdk.sh" >"$T/npm.log" 2>&1 ||
        skip_all "npm cannot install @blaxel/core@$BLAXEL_SDK_VERSION: $(tail -1 "$T/npm.log" 2>/dev/null)"
}

# blaxel_tap FILE: each {"ok","name","diag"} line of FILE as a TAP result; any other line (a
# script that crashed) fails. Sets blaxel_results to how many results there were.
blaxel_tap() {
    local ok name d
    blaxel_results=0
    while IFS=$'\t' read -r ok name d; do
        blaxel_results=$((blaxel_results + 1))
        if [ "$ok" = 1 ]; then ok "$name"; else
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

# blaxel_probe: skip the whole test when sbx cannot make sandboxes here (with the layout the
# fake uses).
blaxel_probe() {
    local id
    mkdir -m 0700 "$T/probe" "$T/probe/run"
    printf 'version: 1\nroot: /workspace\nusers: [blaxel]\n' >"$T/probe/m.yaml"
    if ! id=$(env XDG_RUNTIME_DIR="$T/probe/run" SBX_WORKSPACES="$T/probe/ws" SBX_STOPPED="$T/probe/stopped" \
        SBX_SNAPSHOTS="$T/probe/snap" "$SBX" sandbox create --manifest "$T/probe/m.yaml" 2>"$T/probe/err"); then
        skip_all "sbx cannot create sandboxes here: $(tail -1 "$T/probe/err")"
    fi
    env XDG_RUNTIME_DIR="$T/probe/run" SBX_WORKSPACES="$T/probe/ws" SBX_STOPPED="$T/probe/stopped" \
        SBX_SNAPSHOTS="$T/probe/snap" "$SBX" sandbox rm "$id" >/dev/null 2>&1
}

# blaxel_fake_start DIR [--tls]: skip when sbx cannot make sandboxes here, else start the fake
# in DIR and export its env (BL_API_URL, BL_RUN_URL, BL_API_KEY, BL_WORKSPACE, FAKE_BLAXEL_*).
blaxel_fake_start() {
    blaxel_probe
    mkdir -p "$1"
    "$BLAXEL_HERE/fake.sh" start "$1" ${2:-} || { echo "Bail out! the fake does not start"; exit 1; }
    set -a
    . "$1/env"
    set +a
}

# blaxel_stat NAME: one of the fake's counters.
blaxel_stat() { python3 -c 'import json, os, ssl, sys, urllib.request; print(json.load(urllib.request.urlopen(sys.argv[1] + "/_fake/stats", context=ssl.create_default_context(cafile=os.environ.get("NODE_EXTRA_CA_CERTS"))))[sys.argv[2]])' "$FAKE_BLAXEL_URL" "$1"; }

# blaxel_knob JSON: set the fake's test knobs.
blaxel_knob() { python3 -c 'import os, ssl, sys, urllib.request; urllib.request.urlopen(urllib.request.Request(sys.argv[1] + "/_fake/knobs", sys.argv[2].encode(), {"Content-Type": "application/json"}), context=ssl.create_default_context(cafile=os.environ.get("NODE_EXTRA_CA_CERTS"))).read()' "$FAKE_BLAXEL_URL" "$1"; }

# blaxel_live: how many sandboxes the fake holds now.
blaxel_live() { python3 -c 'import json, os, ssl, sys, urllib.request; print(len(json.load(urllib.request.urlopen(urllib.request.Request(sys.argv[1] + "/v0/sandboxes", headers={"Authorization": "Bearer " + os.environ["BL_API_KEY"]}), context=ssl.create_default_context(cafile=os.environ.get("NODE_EXTRA_CA_CERTS"))))))' "$FAKE_BLAXEL_URL"; }

# blaxel_same A B NAME: files A and B are equal (the difference as diagnostics).
blaxel_same() {
    if cmp -s "$1" "$2"; then ok "$3"; else
        not_ok "$3"
        diag "$(diff "$1" "$2" 2>&1 | head -20)"
    fi
}
