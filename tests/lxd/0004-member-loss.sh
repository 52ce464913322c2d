#!/usr/bin/env bash
# A cluster member that dies while a command runs on it: member 2's daemon is killed during an
# exec of its sandbox through member 1; the exec ends at once with an error that says the
# command's end is unknown and why, nothing of it is left in the harness, member 1 keeps
# serving its own sandbox, a new command on member 2's sandbox fails with a clear error, and
# once member 2 is back (cluster.sh restart-member) its sandbox serves again. Last of the lxd
# tests: it stops a member of the shared cluster (and brings it back, also when it fails).
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/../integration/sandbox-lib.sh"
. "$(dirname "$0")/lxd-lib.sh"

run in1 "$SBX" sandbox create "${LXDS[@]}" --image "$SBX_TEST_LXD_IMAGE" --lxd-target n1
expect_rc 0 "a sandbox on member 1"
a=$(tr -d '\n' <"$T/out"); echo "$a" >>"$T/ids"
run in1 "$SBX" sandbox create "${LXDS[@]}" --image "$SBX_TEST_LXD_IMAGE" --lxd-target n2
expect_rc 0 "a sandbox on member 2, through member 1"
b=$(tr -d '\n' <"$T/out"); echo "$b" >>"$T/ids"

in1 "$SBX" sandbox exec "$b" -- sh -c 'echo started; exec sleep 120' >"$T/exec.out" 2>"$T/exec.err" &
epid=$!
started() { grep -q started "$T/exec.out"; }
wait_until started && ok "a command runs on member 2's sandbox" || not_ok "a command runs on member 2's sandbox"
n2pid=$(cat "$SBX_TEST_LXD_N2_PIDFILE")
t0=$(date +%s)
kill -KILL "$n2pid"
ended() { ! kill -0 "$epid" 2>/dev/null; }
for _ in $(seq 1 60); do ended && break; sleep 0.5; done
if ended; then ok "the exec ends when member 2 dies"; else
    not_ok "the exec ends when member 2 dies"; kill -KILL "$epid" 2>/dev/null
fi
wait "$epid"
erc=$?
t1=$(date +%s)
[ "$erc" != 0 ] && ok "with a failure status ($erc)" || not_ok "with a failure status"
expect_in "$T/exec.err" "sbx: the exit status of 'sh' in sandbox '$b' is unknown" \
    "it says the command's end is unknown"
if grep -qE "member|connect|reset|broke|lost" "$T/exec.err"; then ok "and why"; else
    not_ok "and why"; diag "$(cat "$T/exec.err")"
fi
diag "it ended $((t1 - t0)) s after the kill: $(head -c 300 "$T/exec.err")"
expect_eq "$(pgrep -f -- "sandbox exec $b" | wc -l)" 0 "no process of that exec is left"

run in1 "$SBX" sandbox exec "$a" -- echo "member 1 serves"
expect_rc 0 "member 1 keeps serving its own sandbox"
expect_eq "$(cat "$T/out")" "member 1 serves" "with the right output"
run timeout -s KILL 120 nsenter --net="$SBX_TEST_LXD_N1_NETNS_PATH" "$SBX" sandbox exec "$b" -- true
[ "$rc" != 0 ] && [ "$rc" != 137 ] && ok "a new command on member 2's sandbox fails" ||
    not_ok "a new command on member 2's sandbox fails (status $rc)"
if grep -qE "does not answer|may be down|cannot reach|gone" "$T/err"; then ok "saying the member does not answer"; else
    not_ok "saying the member does not answer"; diag "$(cat "$T/err")"
fi

run "$lxd_here/cluster.sh" restart-member "$SBX_TEST_LXD_DIR" n2
expect_rc 0 "member 2 restarts"
back() { in1 "$SBX" sandbox exec "$b" -- echo back >"$T/back.out" 2>"$T/back.err"; }
for _ in $(seq 1 30); do back && break; sleep 1; done
expect_eq "$(cat "$T/back.out")" "back" "member 2's sandbox serves again (its instance outlived the daemon)"
for id in "$a" "$b"; do
    run in1 "$SBX" sandbox rm "$id"
    expect_rc 0 "rm $id"
done

done_testing
