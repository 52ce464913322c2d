#!/usr/bin/env bash
# examples/dataroom over S3, as its README says: the README's S3 block runs as written against
# a local s3rver (tests/storage/servers.sh), through the real sbx, with the offline recording.
# The agent reads the mounted documents, writes its summary to the writable output/, cannot
# write into the read-only mount, and answers from what it read; afterwards no sandbox, no
# FUSE mount of this test and no storage server is left. Needs /dev/fuse (skips without it),
# rclone, fusermount3 and npm (fails without them: CI installs them).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"

[ -c /dev/fuse ] || skip_all "no /dev/fuse on this machine"
for tool in rclone fusermount3 npm; do
    command -v "$tool" >/dev/null || { not_ok "$tool is installed (scripts/install-deps)"; done_testing; }
done

export TMPDIR="$T/tmp"
mkdir -p "$TMPDIR" "$T/bin"
ln -s "$SBX" "$T/bin/sbx"
export PATH="$T/bin:$PATH"
unset OPENAI_API_KEY

# The block stops its servers itself; a block killed by the timeout may not have.
stop_servers() {
    local env
    for env in "$TMPDIR"/*/env; do
        [ -f "$env" ] && "$SBX_SRCDIR/tests/storage/servers.sh" stop "$(dirname "$env")" >/dev/null 2>&1
    done
}
trap 'stop_servers; sandbox_cleanup' EXIT

# The README's block: the ```sh block whose first line names this test.
python3 - "$SBX_SRCDIR/examples/dataroom/README.md" >"$T/block.sh" <<'PY'
import sys
lines = open(sys.argv[1], encoding="utf-8").read().split("\n")
for i, l in enumerate(lines):
    if l.strip() == "```sh" and i + 1 < len(lines) and "1704-dataroom-example.sh" in lines[i + 1]:
        j = i + 1
        while lines[j].strip() != "```":
            print(lines[j])
            j += 1
        sys.exit(0)
sys.exit(1)
PY
expect_eq "$?" 0 "the README has the S3 block this test runs"

(cd "$SBX_SRCDIR" && timeout -k 5 300 bash -e -o pipefail "$T/block.sh") </dev/null >"$T/out" 2>"$T/err"
rc=$?
expect_rc 0 "the README's S3 block runs"
expect_in "$T/out" "Revenue: USD 41.2m in Q3 2025 against USD 36.8m in Q3 2024, up 12.0%" \
    "the summary written to output/ cites the mounted financials"
expect_in "$T/out" "may terminate within 60 days of an acquisition" \
    "the summary covers the mounted contract"
expect_in "$T/out" "up 12.0% from USD 36.8m in Q3 2024" "the final answer comes from the documents"
expect_in "$T/out" "dataroom/ is read-only" "the agent's sandbox cannot write into the mount"
expect_in "$T/err" "mount 'dataroom': s3_mount at /workspace/dataroom, read-only; tested against a real server" \
    "manifest check reports the mount"
expect_not_in "$T/err" "not supported" "the local provider mounts S3 entries"

left=$("$SBX" sandbox ps --all --json | tr -d ' \n')
expect_eq "$left" "[]" "no sandbox left"
expect_eq "$(awk -v t="$T/" '$0 ~ /fuse/ && index($0, t) {print}' /proc/self/mountinfo)" "" \
    "no FUSE mount of this test is left on the host"
servers=$(ps -eo args= | grep -F "$TMPDIR/" | grep -v grep)
expect_eq "$servers" "" "the block stopped its storage servers"
done_testing
