# Shared set-up for the sandbox integration tests (1xxx). Source it after lib.sh.
# Every test gets its own runtime and workspace directories under $T, so it never touches the
# real ones and never sees another test's sandboxes; every sandbox left is removed on exit.
export XDG_RUNTIME_DIR="$T/run" SBX_WORKSPACES="$T/ws"
mkdir -m 0700 "$XDG_RUNTIME_DIR"
RUNBASE="$XDG_RUNTIME_DIR/sbx"

sandbox_cleanup() {
    local id
    for id in $(ls "$RUNBASE" 2>/dev/null); do "$SBX" sandbox rm "$id" >/dev/null 2>&1; done
    rm -rf "$T"
}
trap sandbox_cleanup EXIT

# The pid of sandbox ID's supervisor (not a zombie), or nothing.
supervisor_pid() {
    local p
    for p in $(pgrep -f -- "__supervise $1" 2>/dev/null); do
        [ "$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null)" != Z ] && echo "$p"
    done
}

# alive PID: the process exists and is not a zombie.
alive() {
    local st
    st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
    [ -n "$st" ] && [ "$st" != Z ]
}

# wait_until CMD...: poll (bounded, ~10 s) until CMD succeeds.
wait_until() {
    local i
    for i in $(seq 1 200); do "$@" && return 0; sleep 0.05; done
    return 1
}
