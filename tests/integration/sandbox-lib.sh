# Shared set-up for the sandbox integration tests (1xxx). Source it after lib.sh.
# Every test gets its own runtime and workspace directories under $T, so it never touches the
# real ones and never sees another test's sandboxes; every sandbox left is removed on exit.
export XDG_RUNTIME_DIR="$T/run" SBX_WORKSPACES="$T/ws"
# Stopped sandboxes, snapshots and sandbox records too: never the user's own.
export SBX_STOPPED="$T/stopped" SBX_SNAPSHOTS="$T/snapshots" SBX_RECORDS="$T/records"
mkdir -m 0700 "$XDG_RUNTIME_DIR"
RUNBASE="$XDG_RUNTIME_DIR/sbx"

sandbox_cleanup() {
    local id
    for id in $(ls "$RUNBASE" 2>/dev/null); do "$SBX" sandbox rm "$id" >/dev/null 2>&1; done
    for id in $(ls "$SBX_STOPPED" 2>/dev/null); do "$SBX" sandbox rm "${id%.json}" >/dev/null 2>&1; done
    for id in $(ls "$SBX_RECORDS" 2>/dev/null); do "$SBX" sandbox rm "${id%.json}" >/dev/null 2>&1; done
    "$SBX" sandbox prune >/dev/null 2>&1
    # A failed test may leave a workspace's disk image mounted under $T: never let it outlive us.
    local m
    for m in $(awk -v t="$T/" 'index($5, t) == 1 {print $5}' /proc/self/mountinfo 2>/dev/null | sort -r); do
        umount -l "$m" 2>/dev/null
    done
    rm_T
}
trap sandbox_cleanup EXIT

# The host pid of sandbox ID's serving supervisor (not a zombie), or nothing. An isolated
# sandbox has three processes of that name: the host-side one, the middle one and PID 1 of the
# sandbox's pid namespace, which serves (its NSpid ends in 1).
supervisor_pid() {
    local p ns only=
    for p in $(pgrep -f -- "__supervise $1" 2>/dev/null); do
        [ "$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null)" != Z ] || continue
        ns=$(awk '/^NSpid:/ {print NF - 1, $NF}' "/proc/$p/status" 2>/dev/null)
        case "$ns" in
        "2 1") echo "$p"; return ;;
        "1 "*) only="$only $p" ;;
        esac
    done
    # Without isolation there is one.
    set -- $only
    [ $# -eq 1 ] && echo "$1"
}

# alive PID: the process exists and is not a zombie.
alive() {
    local st
    st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
    [ -n "$st" ] && [ "$st" != Z ]
}


# nothing_left DESC: no sandbox of this test exists in any form (runtime dirs, workspaces,
# stopped records): what a failed create or resume must leave. A removed disk image is released
# by a worker just after the removal returns (its .sbx-release/ in the workspaces directory):
# that is waited for, bounded.
left_on_host() { ls -A "$RUNBASE" "$SBX_WORKSPACES" 2>/dev/null | grep -v -e '^$' -e ':$'; }
no_left_on_host() { [ -z "$(left_on_host)" ]; }
nothing_left() {
    local what
    wait_until no_left_on_host
    what=$(left_on_host | sort -u) # an id can be in both directories: once in what is shown
    if [ -z "$what" ] && [ "$("$SBX" sandbox ps --all --json | tr -d ' \n')" = "[]" ]; then ok "$1"; else
        not_ok "$1"; diag "left: $what" "$(cd "$RUNBASE" 2>/dev/null && ls -la -- $what 2>&1)" \
            "$(for d in $what; do tail -n 5 "$RUNBASE/$d/supervisor.log" 2>/dev/null; done)" "$("$SBX" sandbox ps --all 2>&1)"
    fi
}
