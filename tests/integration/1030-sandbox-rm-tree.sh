#!/usr/bin/env bash
# rm kills every process of a sandbox, found through the sandbox's own process tree, while the
# host runs many unrelated processes: a daemon that double-forked (its parent exited, so it was
# reparented to a subreaper), one in a new session, a stopped one, one that made itself not
# dumpable (hidden from a walk of /proc where that is mounted hidepid=invisible, as for an
# unprivileged runner); the unrelated host processes all survive. The sandbox stops when asked:
# rm has no supervisor to kill.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"

HOST_PROCS=200
HOST_MARK=$((4000000 + $$)) # this run's own: another run of this test may be under way
host_pids=()
tree_cleanup() {
    local p
    for p in "${host_pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
    sandbox_cleanup
}
trap tree_cleanup EXIT

# Unrelated host processes: the same command line as the sandbox's ones but another marker, so
# a teardown that matched by name or scanned /proc carelessly would hit them.
for i in $(seq "$HOST_PROCS"); do
    sleep "$HOST_MARK" &
    host_pids+=($!)
done
disown -a

# How many live (non-zombie) processes have the command line "sleep ARG" exactly.
count_sleeps() {
    ps -eo stat=,args= | awk -v a="$1" '$1 !~ /^Z/ && $2 == "sleep" && $3 == a && NF == 3' | wc -l
}
# How many live python3 sleepers marked ARG (none without python3).
count_nodump() {
    [ -n "$NODUMP" ] || return 0
    ps -eo stat=,args= | awk -v a="$1" '$1 !~ /^Z/ && $2 == "python3" && $NF == a' | wc -l
}

# The processes a command leaves behind with --keep-background, marked by sleep durations that
# begin with $1: double forks whose middle exits (two daemons reparented to the reaper, a
# subreaper), one in a new session, a stopped one.
spawn_tree() {
    local m=$1
    "$SBX" sandbox exec --keep-background "$2" -- sh -c "
        sh -c 'sleep ${m}1 & exit 0'
        setsid sleep ${m}2 &
        sleep ${m}3 &
        p=\$!
        i=0
        while [ \"\$(cat /proc/\$p/comm)\" != sleep ] && [ \$i -lt 10000 ]; do i=\$((i + 1)); done
        kill -STOP \$p
        sh -c 'sleep ${m}4 & sleep ${m}4 & exit 0'
        ${NODUMP:+python3 -c '$NODUMP' ${m}5 &}
        exit 0" </dev/null >/dev/null 2>&1
}
# With python3 (in the sandbox as on the host), one more: a python3 that made itself not
# dumpable (prctl PR_SET_DUMPABLE 0) and sleeps.
NODUMP= WANT=1112 N=5
if command -v python3 >/dev/null; then
    NODUMP='import ctypes, sys, time; ctypes.CDLL(None).prctl(4, 0, 0, 0, 0); time.sleep(int(sys.argv[1]))'
    WANT=11121 N=6
fi

for iso in none namespaces; do
    id=$("$SBX" sandbox create --isolation "$iso" --disk none 2>"$T/err") ||
        id=$("$SBX" sandbox create --isolation "$iso" 2>"$T/err")
    if [ -z "$id" ]; then
        not_ok "create ($iso)"
        diag "$(cat "$T/err")"
        continue
    fi
    m=$((RANDOM % 800 + 100))
    spawn_tree "1$m" "$id"
    all_up() {
        [ "$(count_sleeps "1${m}1")$(count_sleeps "1${m}2")$(count_sleeps "1${m}3")$(count_sleeps "1${m}4")$(count_nodump "1${m}5")" = "$WANT" ]
    }
    wait_until all_up
    n=$(count_nodump "1${m}5")
    for s in "1${m}1" "1${m}2" "1${m}3" "1${m}4"; do
        n=$((n + $(count_sleeps "$s")))
    done
    expect_eq "$n" "$N" "the sandbox runs its $N left-behind processes ($iso)"
    [ "$n" = "$N" ] || diag "$(ps -eo pid,ppid,stat,args | grep "1$m")"
    run "$SBX" sandbox rm "$id"
    expect_rc 0 "rm ($iso)"
    expect_not_in "$T/err" "did not stop when asked" "the sandbox stopped when asked ($iso)"
    left=$(count_nodump "1${m}5")
    for s in "1${m}1" "1${m}2" "1${m}3" "1${m}4"; do
        left=$((left + $(count_sleeps "$s")))
    done
    expect_eq "$left" 0 "rm leaves no process of the sandbox ($iso)"
    expect_eq "$(pgrep -f -- "__supervise $id" | wc -l)" 0 "no supervisor left ($iso)"
    expect_eq "$(count_sleeps "$HOST_MARK")" "$HOST_PROCS" "every unrelated host process survives ($iso)"
done
done_testing
