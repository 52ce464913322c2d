#!/usr/bin/env bash
# Creates under load wait for the supervisor's report instead of racing a short timer: a
# supervisor that takes longer than the old 10 s still makes a sandbox, a dead one is an
# immediate clear error, and 40 concurrent creates on a busy machine all succeed.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"

busy=()
load_cleanup() {
    local p
    for p in "${busy[@]}"; do kill -KILL "$p" 2>/dev/null; done
    sandbox_cleanup
}
trap load_cleanup EXIT

sup=$(dirname "$SBX")/sbx-supervisor
[ -x "$sup" ] || sup=$SBX
chmod 0755 "$T"
# A supervisor that is slow to start (11 s, past the old fixed deadline), and one that dies.
cat >"$T/slow-supervisor" <<EOS
#!/bin/sh
/bin/sleep 11
exec "$sup" "\$@"
EOS
printf '#!/bin/sh\nexit 1\n' >"$T/dead-supervisor"
chmod 0755 "$T/slow-supervisor" "$T/dead-supervisor"
run env SBX_SUPERVISOR="$T/dead-supervisor" "$SBX" sandbox create
expect_rc 1 "a supervisor that dies fails the create"
expect_in "$T/err" "exited during start-up" "with a clear error"
expect_eq "$(ls "$RUNBASE")$(ls "$SBX_WORKSPACES")" "" "and leaves nothing"
# As root its workspace was a disk image, released by a worker the create's clean-up forked
# (it needs nothing of the supervisor program): that goes on just after the create returned,
# and is waited for, bounded.
release_done() { [ -z "$(ls -A "$SBX_WORKSPACES")$(losetup -a 2>/dev/null | grep -F "$T/")" ]; }
wait_until release_done
expect_eq "$(ls -A "$SBX_WORKSPACES")$(losetup -a 2>/dev/null | grep -F "$T/")" "" \
    "no image, release directory or loop device is left either"
SBX_SUPERVISOR="$T/slow-supervisor" "$SBX" sandbox create >"$T/slow.out" 2>"$T/slow.err" &
slow=$!

# Load: one busy loop per CPU (at most 4), at nice 0, for the duration of the creates.
n=$(nproc)
[ "$n" -gt 4 ] && n=4
for i in $(seq 1 "$n"); do
    (while :; do :; done) &
    busy+=($!)
done
N=40
pids=()
for i in $(seq 1 $N); do
    "$SBX" sandbox create >"$T/c$i.out" 2>"$T/c$i.err" &
    pids+=($!)
done
failed=0
for i in $(seq 1 $N); do
    wait "${pids[$((i - 1))]}" || { failed=$((failed + 1)); diag "create $i: $(cat "$T/c$i.err")"; }
done
for p in "${busy[@]}"; do kill -KILL "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
busy=()
expect_eq "$failed" 0 "$N concurrent creates on a loaded machine all succeed"
made=0
for i in $(seq 1 $N); do
    id=$(cat "$T/c$i.out")
    [ -n "$id" ] && "$SBX" sandbox rm "$id" >/dev/null && made=$((made + 1))
done
expect_eq "$made" "$N" "and all are removed"

wait "$slow"
rc=$?
expect_eq "$rc" 0 "a supervisor slower than 10 s still makes a sandbox"
[ "$rc" = 0 ] || diag "$(cat "$T/slow.err")"
id=$(cat "$T/slow.out")
run "$SBX" sandbox exec "$id" -- true
expect_rc 0 "and it serves"
"$SBX" sandbox rm "$id" >/dev/null
expect_eq "$(ls "$RUNBASE")$(ls "$SBX_WORKSPACES")" "" "nothing is left"
done_testing
