#!/usr/bin/env bash
# Sandboxes created and removed in a loop leave no process, fd, socket or directory behind:
# 25 rounds here (a leak of one thing per round shows at once); the 200-round soak is
# bench/bench-soak.sh (scripts/bench).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"

# A long-lived sandbox to watch the supervisor's descriptors over many requests.
keep=$("$SBX" sandbox create)
sup=$(supervisor_pid "$keep")
"$SBX" sandbox exec "$keep" -- true
fds_before=$(ls "/proc/$sup/fd" | wc -l)

ROUNDS=${SBX_TEST_ROUNDS:-25}
MARK=$((1000000 + $$)) # the background command's argument, unique to this run
ids=()
failed=0
for i in $(seq 1 "$ROUNDS"); do
    id=$("$SBX" sandbox create) || { failed=$((failed + 1)); continue; }
    ids+=("$id")
    out=$("$SBX" sandbox exec "$id" -- sh -c 'echo $PWD; sleep '"$MARK"' >/dev/null 2>&1 &') || failed=$((failed + 1))
    "$SBX" sandbox exec "$keep" -- true || failed=$((failed + 1))
    "$SBX" sandbox rm "$id" >/dev/null || failed=$((failed + 1))
done
expect_eq "$failed" 0 "$ROUNDS create/exec/rm rounds succeed"
expect_eq "${#ids[@]}" "$ROUNDS" "$ROUNDS sandboxes were made"

left=0
for id in "${ids[@]}"; do
    [ -n "$(supervisor_pid "$id")" ] && left=$((left + 1))
done
expect_eq "$left" 0 "no supervisor is left"
expect_eq "$(pgrep -f "sleep $MARK" -P "$sup" | wc -l)" 0 "no command of a removed sandbox is left"
expect_eq "$(ls "$RUNBASE")" "$keep" "no runtime directory or socket is left"
# The live sandbox's workspace, and its disk image when sbx runs as root.
expect_eq "$(ls "$SBX_WORKSPACES" | grep -vx "$keep.img")" "$keep" "no workspace is left"
expect_eq "$(ls "/proc/$sup/fd" | wc -l)" "$fds_before" "the supervisor holds no more descriptors than before"

# Every sleep left by those sandboxes is gone.
stray=$(pgrep -f "^sleep $MARK\$" | wc -l)
expect_eq "$stray" 0 "no background command of a removed sandbox survives"

# The disk image's release worker (root: the sandbox has one) closes every descriptor it does
# not keep with one close_range: one that failed (an empty range) sent it closing 4000 fds one
# at a time on every rm. strace follows the worker to its end (once rm lets go of it).
if [ "$(id -u)" = 0 ] && [ -e "$SBX_WORKSPACES/$keep.img" ] && command -v strace >/dev/null; then
    strace -f -qq -e trace=close,close_range -o "$T/rm.strace" "$SBX" sandbox rm "$keep" >/dev/null
    expect_eq "$(grep -c 'close_range(.* = -1' "$T/rm.strace")" 0 "the release worker's close_range succeeds"
    # Closes of descriptors that were not open: the one-by-one loop made about 4000 (a build
    # with coverage counters closes many open files of its own, which do not count here).
    closes=$(grep -c 'close(.*EBADF' "$T/rm.strace")
    [ "$closes" -lt 100 ] && ok "rm and its release worker close $closes unopened fds (< 100)" ||
        not_ok "rm and its release worker close $closes unopened fds (< 100)"
else
    "$SBX" sandbox rm "$keep" >/dev/null
fi
# rm returns when PID 1 lets go; the host-side (outer) process exits right after it.
keep_gone() { [ -z "$(supervisor_pid "$keep")" ]; }
wait_until keep_gone && ok "the last supervisor is gone" || not_ok "the last supervisor is gone"
expect_eq "$(ls "$RUNBASE" | wc -l)" 0 "the runtime base is empty"

done_testing
