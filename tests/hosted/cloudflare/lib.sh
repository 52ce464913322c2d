# Shared by the Cloudflare tests; source it after tests/integration/lib.sh.
# @cloudflare/sandbox, pinned, installed once into ${SBX_TEST_NPM_CACHE:-/tmp/sbx-test-npm}/
# cloudflare-sandbox-VERSION; the fake's start and knobs; JSON result lines as TAP.
CLOUDFLARE_SDK_VERSION=0.12.10
CF_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# cf_sdk: export CLOUDFLARE_SDK_DIR, or skip the whole test saying why.
cf_sdk() {
    command -v node >/dev/null && command -v npm >/dev/null || skip_all "node or npm is missing"
    CLOUDFLARE_SDK_DIR="${SBX_TEST_NPM_CACHE:-/tmp/sbx-test-npm}/cloudflare-sandbox-$CLOUDFLARE_SDK_VERSION"
    export CLOUDFLARE_SDK_DIR
    SBX_TEST_NPM_CACHE=${SBX_TEST_NPM_CACHE:-/tmp/sbx-test-npm} "$CF_HERE/install-sdk.sh" >"$T/npm.log" 2>&1 ||
        skip_all "npm cannot install @cloudflare/sandbox@$CLOUDFLARE_SDK_VERSION: $(tail -1 "$T/npm.log" 2>/dev/null)"
}

# cf_tap FILE: each {"ok","name","diag"} line of FILE as a TAP result; any other line fails.
# The number of results in $cf_results.
cf_tap() {
    local ok name d
    cf_results=0
    while IFS=$'\t' read -r ok name d; do
        cf_results=$((cf_results + 1))
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

# cf_fake_start DIR [--tls]: skip when sbx cannot make sandboxes here, else start the fake in DIR and
# export its env (CLOUDFLARE_SANDBOX_WORKER_URL, CLOUDFLARE_SANDBOX_API_KEY, FAKE_CLOUDFLARE_*).
cf_fake_start() {
    local dir=$1 tls=${2:-} id
    mkdir -m 0700 "$T/probe" "$T/probe/run"
    printf 'version: 1\nroot: /workspace\n' >"$T/probe/m.yaml"
    if ! id=$(env XDG_RUNTIME_DIR="$T/probe/run" SBX_WORKSPACES="$T/probe/ws" SBX_STOPPED="$T/probe/stopped" \
        SBX_SNAPSHOTS="$T/probe/snap" "$SBX" sandbox create --manifest "$T/probe/m.yaml" 2>"$T/probe/err"); then
        skip_all "sbx cannot create sandboxes here: $(tail -1 "$T/probe/err")"
    fi
    env XDG_RUNTIME_DIR="$T/probe/run" SBX_WORKSPACES="$T/probe/ws" SBX_STOPPED="$T/probe/stopped" \
        SBX_SNAPSHOTS="$T/probe/snap" "$SBX" sandbox rm "$id" >/dev/null 2>&1
    mkdir -p "$dir"
    "$CF_HERE/fake.sh" start "$dir" $tls || { echo "Bail out! the fake does not start"; exit 1; }
    set -a
    . "$dir/env"
    set +a
}

# cf_knob JSON: set the fake's test knobs. cf_stat NAME: one of its counters.
# (Over HTTPS the fake's certificate is $CF_CA.)
cf_knob() { python3 -c 'import os, ssl, sys, urllib.request; urllib.request.urlopen(urllib.request.Request(sys.argv[1] + "/_fake/knobs", sys.argv[2].encode(), {"Content-Type": "application/json"}), context=ssl.create_default_context(cafile=os.environ.get("CF_CA"))).read()' "$CLOUDFLARE_SANDBOX_WORKER_URL" "$1"; }
cf_stat() { python3 -c 'import json, os, ssl, sys, urllib.request; print(json.load(urllib.request.urlopen(sys.argv[1] + "/_fake/stats", context=ssl.create_default_context(cafile=os.environ.get("CF_CA"))))[sys.argv[2]])' "$CLOUDFLARE_SANDBOX_WORKER_URL" "$1"; }
