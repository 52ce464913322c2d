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
