#!/usr/bin/env bash
# `sbx run` ended by a signal while its agent is busy in a long tool call: SIGTERM, SIGHUP,
# SIGINT, a reader of its output going away (SIGPIPE) and SIGKILL each stop the run at once and
# leave nothing of the sandbox the run made (supervisor processes, the command, runtime dir,
# workspace, cgroups); with --keep the sandbox survives a SIGTERM of the run.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
command -v python3 >/dev/null || skip_all "python3 is needed to write the recording"

# The tool call sleeps far longer than any bounded wait below: the run must not wait for it.
NAP="sleep 30.$$"
python3 - "$T/nap.jsonl" "touch started; exec $NAP" <<'EOF'
import json, sys
args = json.dumps({"cmd": sys.argv[2], "yield_time_ms": 30000})
turns = [
    {"id": "r1", "object": "response", "status": "completed",
     "output": [{"type": "function_call", "id": "fc1", "call_id": "c1", "name": "exec_command",
                 "arguments": args, "status": "completed"}]},
    {"id": "r2", "object": "response", "status": "completed",
     "output": [{"type": "message", "id": "m", "role": "assistant", "status": "completed",
                 "content": [{"type": "output_text", "text": "slept", "annotations": []}]}]}]
with open(sys.argv[1], "w") as f:
    for t in turns:
        f.write(json.dumps(t) + "\n")
EOF
cat >"$T/a.yaml" <<'EOF'
name: Napper
manifest: {entries: {}}
capabilities: [shell]
EOF

RUN_PID=
ID=
SUPS=
CGROUPS=
kill_run() { [ -n "$RUN_PID" ] && kill -KILL "$RUN_PID" 2>/dev/null; RUN_PID=; }
trap 'kill_run; exec 3<&- 2>/dev/null; sandbox_cleanup' EXIT

the_id() { ls "$RUNBASE" 2>/dev/null | head -n1; }
napping() { [ -n "$(the_id)" ] && [ -e "$SBX_WORKSPACES/$(the_id)/started" ] && pgrep -fx "$NAP" >/dev/null; }
# The host cgroup directories of the sandbox's processes (none without cgroups, e.g. an
# unprivileged caller on cgroup v1).
cgroup_dirs() {
    local p
    for p in "$@"; do
        awk -F: '$3 ~ /sbx-/ { if ($2 == "") print "/sys/fs/cgroup" $3; else { n = split($2, c, ","); print "/sys/fs/cgroup/" c[1] $3 } }' \
            "/proc/$p/cgroup" 2>/dev/null
    done | sort -u
}
# Wait (bounded) for the running sbx to be busy in the tool call and note what it made.
start_run() {
    "$@" >"$T/out" 2>"$T/err" &
    RUN_PID=$!
    wait_until napping
}
note_sandbox() {
    ID=$(the_id)
    SUPS=$(pgrep -f -- "__supervise $ID" | tr '\n' ' ')
    CGROUPS=$(cgroup_dirs $SUPS $(pgrep -fx "$NAP"))
    diag "sandbox $ID: supervisors $SUPS; cgroups" $CGROUPS
}
# Wait (bounded) for the run to end; its exit status in $rc.
end_run() {
    wait_until eval '! alive $RUN_PID'
    if alive "$RUN_PID"; then rc=timeout; kill_run; else wait "$RUN_PID"; rc=$?; fi
    RUN_PID=
}
none_alive() { local p; for p in $SUPS; do alive "$p" && return 1; done; return 0; }
no_cgroups() { local d; for d in $CGROUPS; do [ -d "$d" ] && return 1; done; return 0; }
# Everything of sandbox $ID is gone (bounded wait: the supervisor removes it asynchronously
# after a SIGKILL of its creator).
expect_gone() {
    wait_until eval '! pgrep -fx "$NAP" >/dev/null'
    if pgrep -fx "$NAP" >/dev/null; then not_ok "$1: the tool's command is killed"; else ok "$1: the tool's command is killed"; fi
    wait_until none_alive
    if none_alive; then ok "$1: no supervisor process is left"; else not_ok "$1: no supervisor process is left"; diag "$(ps -o pid,stat,args -p ${SUPS// /,} 2>&1)"; fi
    wait_until eval '[ ! -e "$RUNBASE/$ID" ]'
    expect_eq "$(ls "$RUNBASE")" "" "$1: no runtime dir is left"
    wait_until eval '[ ! -e "$SBX_WORKSPACES/$ID" ]'
    expect_eq "$(ls "$SBX_WORKSPACES" 2>/dev/null)" "" "$1: no workspace is left"
    wait_until no_cgroups
    if no_cgroups; then ok "$1: no cgroup is left"; else not_ok "$1: no cgroup is left"; diag $CGROUPS; fi
}

for sig in TERM HUP INT KILL; do
    start_run "$SBX" run -m "replay:$T/nap.jsonl" -a "$T/a.yaml" "nap"
    if ! napping; then
        not_ok "SIG$sig: the run is busy in its tool call"; diag "$(cat "$T/err")"; kill_run; continue
    fi
    note_sandbox
    kill -"$sig" "$RUN_PID"
    end_run
    case $sig in
    TERM) want=143 ;;
    HUP) want=129 ;;
    INT) want=130 ;;
    KILL) want=137 ;;
    esac
    expect_rc "$want" "SIG$sig ends the run at once with status $want"
    [ "$sig" = KILL ] || expect_in "$T/err" "cancelled at turn 1 of agent 'Napper' while running tool 'exec_command'" \
        "SIG$sig: the run says where it was cancelled"
    expect_gone "SIG$sig"
done

# --- SIGPIPE: the reader of --json goes away while the tool runs --------------------------------
mkfifo "$T/fifo"
"$SBX" run --json -m "replay:$T/nap.jsonl" -a "$T/a.yaml" "nap" >"$T/fifo" 2>"$T/err" &
RUN_PID=$!
exec 3<"$T/fifo"
while IFS= read -r -t 20 line <&3; do case $line in *'"tool_call"'*) break ;; esac; done
wait_until napping
if napping; then
    note_sandbox
    exec 3<&-
    end_run
    expect_rc 141 "a reader gone from stdout ends the run at once with status 141"
    expect_gone "SIGPIPE"
else
    exec 3<&-
    not_ok "SIGPIPE: the run is busy in its tool call"; diag "$(cat "$T/err")"; kill_run
fi

# --- --keep: the sandbox outlives a SIGTERM of the run -------------------------------------------
start_run "$SBX" run --keep -m "replay:$T/nap.jsonl" -a "$T/a.yaml" "nap"
note_sandbox
kill -TERM "$RUN_PID"
end_run
expect_rc 143 "--keep: SIGTERM ends the run with status 143"
expect_in "$T/err" "kept sandbox $ID" "--keep: the kept sandbox is named"
run "$SBX" sandbox exec "$ID" -- true
expect_rc 0 "--keep: the sandbox still serves after the run ended"
expect_eq "$(ls "$RUNBASE")" "$ID" "--keep: its runtime dir is there"
"$SBX" sandbox rm "$ID" >/dev/null 2>&1

done_testing
