#!/usr/bin/env bash
# Run one libFuzzer target for a bounded time on a scratch copy of its seed corpus, so the
# checkout is never modified: tests/fuzz/run.sh BUILD_DIR NAME SECONDS [libFuzzer options...]
# Exits non-zero on a crash, a leak, a timeout or running out of memory; the reproducer is
# written to $SBX_FUZZ_ARTIFACTS (default: a directory under /tmp, kept) and its path printed.
set -uo pipefail
build=$1 name=$2 secs=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
exe=$build/tests/fuzz/fuzz-$name
[ -x "$exe" ] || { echo "fuzz-$name: not built in '$build' (meson setup with -Dfuzz=true)"; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/sbx-fuzz-$name.XXXXXX")
trap 'rm -rf "$work"' EXIT
artifacts=${SBX_FUZZ_ARTIFACTS:-${TMPDIR:-/tmp}/sbx-fuzz-artifacts}
mkdir -p "$work/corpus" "$artifacts"
cp "$here/corpus/$name/"* "$work/corpus/" 2>/dev/null
dict=()
[ -f "$here/$name.dict" ] && dict=(-dict="$here/$name.dict")
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1} \
UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1} \
    "$exe" -max_total_time="$secs" -rss_limit_mb=1024 -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$artifacts/$name-" "${dict[@]}" "$@" "$work/corpus" >"$work/log" 2>&1
rc=$?
grep -E '^(#[0-9]+ +DONE|stat::number_of_executed_units)' "$work/log" | tail -1
if [ $rc != 0 ]; then
    tail -n 60 "$work/log"
    echo "fuzz-$name failed (exit $rc); reproducer: $(grep -oE "Test unit written to \S+" "$work/log" | cut -d' ' -f5)"
    echo "  reproduce with: $exe <reproducer>"
fi
exit $rc
