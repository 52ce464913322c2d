#!/usr/bin/env bash
# The snapshot benchmark and the reference JS SDK's persist of the same workspace, in one run:
#   bench/bench-snapshot-peer.sh [BUILD_DIR [RUNS]]
# Needs the peer set up in /tmp/peer-js as /work/shared/peer-bench/README.md says (npm install
# @openai/agents@0.20.0 and the .mjs files); without it only sbx is measured.
set -u
build=${1:-build}
runs=${2:-5}
peer=${SBX_PEER_JS:-/tmp/peer-js}
if [ -f "$peer/sandbox_bench.mjs" ] && command -v node >/dev/null; then
    for n in 200 2000; do
        for r in $(seq 1 "$runs"); do
            (cd "$peer" && node sandbox_bench.mjs "$n" 1 | tail -1) |
                sed -n "s/.*\"persist_ms\":\([0-9.]*\).*/js persist $n files: \1 ms/p"
        done
    done
else
    echo "(no peer in $peer: JS SDK not measured)"
fi
"$build/bench/bench-snapshot" "$runs"
