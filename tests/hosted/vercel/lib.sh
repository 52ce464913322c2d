# Shared by the Vercel tests; source it after tests/integration/lib.sh.
# Vercel's npm client @vercel/sandbox, pinned, installed once into
# ${SBX_TEST_NPM_CACHE:-/tmp/sbx-test-npm}/vercel-sandbox-VERSION, and the fake's helpers.
VERCEL_SDK_VERSION=3.5.0
VERCEL_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# vercel_sdk: export VERCEL_SDK_DIR, or skip the whole test saying why.
vercel_sdk() {
    command -v node >/dev/null && command -v npm >/dev/null || skip_all "node or npm is missing"
    VERCEL_SDK_DIR="${SBX_TEST_NPM_CACHE:-/tmp/sbx-test-npm}/vercel-sandbox-$VERCEL_SDK_VERSION"
    export VERCEL_SDK_DIR
    SBX_TEST_NPM_CACHE=${SBX_TEST_NPM_CACHE:-/tmp/sbx-test-npm} "$VERCEL_HERE/install-sdk.sh" >"$T/npm.log" 2>&1 ||
        skip_all "npm cannot install @vercel/sandbox@$VERCEL_SDK_VERSION: $(tail -1 "$T/npm.log" 2>/dev/null)"
}

# vercel_tap FILE: each {"ok","name","diag"} line of FILE as a TAP result; any other line (a
# script that crashed) fails. The count is in $vercel_results.
vercel_tap() {
    local ok name d
    vercel_results=0
    while IFS=$'\t' read -r ok name d; do
        vercel_results=$((vercel_results + 1))
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

# vercel_fake_start DIR [--tls]: skip when sbx cannot make sandboxes here, else start the fake
# in DIR and export its env (VERCEL_API_URL, VERCEL_TOKEN, VERCEL_TEAM_ID, VERCEL_PROJECT_ID,
# FAKE_VERCEL_*).
vercel_fake_start() {
    local dir=$1 tls=${2:-} id
    mkdir -m 0700 "$T/probe" "$T/probe/run"
    printf 'version: 1\nroot: /vercel/sandbox\nusers: [vercel-sandbox]\n' >"$T/probe/m.yaml"
    if ! id=$(env XDG_RUNTIME_DIR="$T/probe/run" SBX_WORKSPACES="$T/probe/ws" SBX_STOPPED="$T/probe/stopped" \
        SBX_SNAPSHOTS="$T/probe/snap" "$SBX" sandbox create --manifest "$T/probe/m.yaml" 2>"$T/probe/err"); then
        skip_all "sbx cannot create sandboxes here: $(tail -1 "$T/probe/err")"
    fi
    env XDG_RUNTIME_DIR="$T/probe/run" SBX_WORKSPACES="$T/probe/ws" SBX_STOPPED="$T/probe/stopped" \
        SBX_SNAPSHOTS="$T/probe/snap" "$SBX" sandbox rm "$id" >/dev/null 2>&1
    mkdir -p "$dir"
    "$VERCEL_HERE/fake.sh" start "$dir" $tls || { echo "Bail out! the fake does not start"; exit 1; }
    set -a
    . "$dir/env"
    set +a
}

# knob JSON: set the fake's test knobs. fake_stat NAME: one of its counters.
# (Over HTTPS the fake's certificate is the one NODE_EXTRA_CA_CERTS names.)
knob() { python3 -c 'import os, ssl, sys, urllib.request; urllib.request.urlopen(urllib.request.Request(sys.argv[1] + "/_fake/knobs", sys.argv[2].encode(), {"Content-Type": "application/json"}), context=ssl.create_default_context(cafile=os.environ.get("NODE_EXTRA_CA_CERTS"))).read()' "$VERCEL_API_URL" "$1"; }
fake_stat() { python3 -c 'import json, os, ssl, sys, urllib.request; print(json.load(urllib.request.urlopen(sys.argv[1] + "/_fake/stats", context=ssl.create_default_context(cafile=os.environ.get("NODE_EXTRA_CA_CERTS"))))[sys.argv[2]])' "$VERCEL_API_URL" "$1"; }

# fake_status NAME: the status of sandbox NAME's session, asked at the service directly (asking
# through sbx would extend its life).
fake_status() { python3 -c 'import json, os, sys, urllib.request; print(json.load(urllib.request.urlopen(urllib.request.Request(sys.argv[1] + "/v2/sandboxes/" + sys.argv[2] + "?teamId=" + os.environ["VERCEL_TEAM_ID"], headers={"Authorization": "Bearer " + os.environ["VERCEL_TOKEN"]})))["session"]["status"])' "$VERCEL_API_URL" "$1" 2>/dev/null; }

# fakestate ARGS: sbx on the fake's own sandboxes.
fakestate() { env XDG_RUNTIME_DIR="$FAKE_VERCEL_STATE/run" SBX_WORKSPACES="$FAKE_VERCEL_STATE/ws" \
    SBX_STOPPED="$FAKE_VERCEL_STATE/stopped" SBX_SNAPSHOTS="$FAKE_VERCEL_STATE/snapshots" \
    XDG_STATE_HOME="$FAKE_VERCEL_STATE/state" "$SBX" "$@"; }

# same A B NAME: files A and B are equal (the difference as diagnostics).
same() {
    if cmp -s "$1" "$2"; then ok "$3"; else
        not_ok "$3"; diag "$(diff "$1" "$2" 2>&1 | head -20)"
    fi
}
