#!/usr/bin/env bash
# What killed creators, killed or stopped supervisors leave behind: ps --all shows it, rm always
# wins (a stopped supervisor is killed, cgroups of a killed host side are removed), prune
# removes the leftovers of dead sandboxes and says what it removed.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"

# Stopped processes of this test are killed on exit, whatever happened.
stopped_pids=()
leftovers_cleanup() {
    local p
    for p in "${stopped_pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
    sandbox_cleanup
}
trap leftovers_cleanup EXIT

# The sandbox's cgroup directories that exist (named sbx-ID anywhere under /sys/fs/cgroup).
cgroups_of() {
    find /sys/fs/cgroup -maxdepth 7 -type d -name "sbx-$1" 2>/dev/null
}
# The host-side (outer) supervisor of isolated sandbox ID: the one whose parent is not itself a
# supervisor of ID.
outer_pid() {
    local p pp all
    all=$(pgrep -f -- "__supervise $1" 2>/dev/null)
    for p in $all; do
        pp=$(awk '{print $4}' "/proc/$p/stat" 2>/dev/null)
        case " $(echo $all) " in *" $pp "*) ;; *) echo "$p"; return ;; esac
    done
}
status_of() {
    "$SBX" sandbox ps --all --json | python3 -c '
import json, sys
for s in json.load(sys.stdin):
    if s["id"] == sys.argv[1]:
        print(s["status"])' "$1"
}

# ---- SIGKILL of the client at a few points during create
done_ids=()
seen_ids=()
for d in 0.01 0.03 0.06 0.1 0.15 0.25 0.4; do
    id=$(timeout -s KILL "$d" "$SBX" sandbox create 2>/dev/null) && done_ids+=("$id")
    seen_ids+=($(ls "$RUNBASE"))
done
# A supervisor whose creator died during its start-up removes what the create made; a create
# killed before the supervisor ran leaves a dead entry. Wait until none is half-way.
settled() {
    ! "$SBX" sandbox ps --all --json | grep -qE '"status": "(creating|unresponsive)"'
}
if wait_until settled; then ok "killed creates settle"; else not_ok "killed creates settle"; fi
run "$SBX" sandbox ps --all
expect_rc 0 "ps --all lists leftovers of killed creates"
hidden=0
for dir in "$RUNBASE"/*; do
    [ -e "$dir" ] || continue
    grep -qF "$(basename "$dir")" "$T/out" || hidden=$((hidden + 1))
done
expect_eq "$hidden" 0 "ps --all shows every runtime dir"
run "$SBX" sandbox prune
expect_rc 0 "prune after killed creates"
# What is left is a sandbox a create completed, or one whose creator died just after the
# supervisor reported: live, and listed by plain ps.
"$SBX" sandbox ps >"$T/ps"
unlisted=0
for sid in $(ls "$RUNBASE"); do
    printf '%s\n' "${done_ids[@]}" | grep -qx "$sid" && continue
    grep -qF "$sid" "$T/ps" && done_ids+=("$sid") && continue
    unlisted=$((unlisted + 1))
done
expect_eq "$unlisted" 0 "every runtime dir left is a live sandbox that ps lists"
expect_eq "$(ls "$SBX_WORKSPACES" | grep -v '\.img$' | sort)" "$(ls "$RUNBASE" | sort)" "no workspace without its sandbox is left"
# A root caller's fresh workspace is a disk image next to it (<id>.img): one only for a sandbox
# that is left.
expect_eq "$(ls "$SBX_WORKSPACES" | sed -n 's/\.img$//p' | sort | comm -23 - <(ls "$RUNBASE" | sort))" "" \
    "no disk image without its sandbox is left"
# A supervisor that removed its unclaimed sandbox exits right after.
no_strays() {
    local sid
    for sid in $(printf '%s\n' "${seen_ids[@]}" | sort -u); do
        printf '%s\n' "${done_ids[@]}" | grep -qx "$sid" && continue
        pgrep -f -- "__supervise $sid" >/dev/null && return 1
    done
    return 0
}
if wait_until no_strays; then ok "no supervisor of a killed create is left"; else
    not_ok "no supervisor of a killed create is left"; fi
for id in "${done_ids[@]}"; do "$SBX" sandbox rm "$id" >/dev/null; done

# ---- SIGKILL of PID 1: the host side removes the socket and cgroups, keeps the work
id=$("$SBX" sandbox create)
"$SBX" sandbox exec "$id" -- sh -c 'echo work >kept.txt'
p1=$(supervisor_pid "$id")
kill -KILL "$p1"
dead() { [ "$(status_of "$id")" = dead ]; }
if wait_until dead; then ok "ps --all says a SIGKILLed sandbox is dead"; else
    not_ok "ps --all says a SIGKILLed sandbox is dead"; diag "$("$SBX" sandbox ps --all)"; fi
run "$SBX" sandbox ps
expect_not_in "$T/out" "$id" "plain ps lists only live sandboxes"
run "$SBX" sandbox ps --all
expect_in "$T/out" "runtime_dir $RUNBASE/$id" "ps --all names the leftover runtime dir"
expect_in "$T/out" "$SBX_WORKSPACES/$id" "ps --all names the leftover workspace"
outer_gone() { [ -z "$(pgrep -f -- "__supervise $id")" ]; }
wait_until outer_gone
expect_eq "$(cgroups_of "$id")" "" "the host side removed the cgroups of a SIGKILLed PID 1"
expect_eq "$(cat "$SBX_WORKSPACES/$id/kept.txt")" work "the workspace of a dead sandbox is kept"
expect_in "$RUNBASE/$id/supervisor.log" "PID 1 ended unexpectedly" "the log says PID 1 ended unexpectedly"
run "$SBX" sandbox prune --json
expect_rc 0 "prune --json"
expect_in "$T/out" "\"path\": \"$RUNBASE/$id\"" "prune --json reports the runtime dir"
expect_in "$T/out" "\"path\": \"$SBX_WORKSPACES/$id\"" "prune --json reports the workspace"
expect_eq "$(ls "$RUNBASE")$(ls "$SBX_WORKSPACES")" "" "prune removed the dead sandbox"

# ---- SIGTERM of the host-side supervisor: a requested stop, logged as one
id=$("$SBX" sandbox create)
outer=$(outer_pid "$id")
if [ -n "$outer" ] && [ "$outer" != "$(supervisor_pid "$id")" ]; then
    kill -TERM "$outer"
    wait_until dead
    expect_eq "$(status_of "$id")" dead "SIGTERM to the host-side supervisor ends the sandbox"
    expect_in "$RUNBASE/$id/supervisor.log" "stopped on SIGTERM" "its log says it was stopped on SIGTERM"
    expect_not_in "$RUNBASE/$id/supervisor.log" "ended unexpectedly" "and not that PID 1 ended unexpectedly"
else
    ok "SIGTERM to the host-side supervisor # SKIP no isolation: one supervisor process"
fi
"$SBX" sandbox rm "$id" >/dev/null 2>&1

# prune --keep-workspace, and plain output one line each
id=$("$SBX" sandbox create)
kill -KILL "$(supervisor_pid "$id")"
wait_until dead
live=$("$SBX" sandbox create)
run "$SBX" sandbox prune --keep-workspace
expect_rc 0 "prune --keep-workspace"
expect_in "$T/out" "removed runtime_dir $RUNBASE/$id of sandbox $id" "prune reports one line per thing"
expect_not_in "$T/out" "removed workspace" "--keep-workspace keeps the workspace"
expect_not_in "$T/out" "$live" "prune never touches a live sandbox"
[ -d "$SBX_WORKSPACES/$id" ] && ok "the kept workspace is there" || not_ok "the kept workspace is there"
run "$SBX" sandbox exec "$live" -- true
expect_rc 0 "the live sandbox still works after prune"
rm -rf "$SBX_WORKSPACES/$id"
"$SBX" sandbox rm "$live" >/dev/null

# ---- SIGSTOP of the supervisor, then rm: rm wins and leaves nothing
id=$("$SBX" sandbox create)
p1=$(supervisor_pid "$id")
outer=$(outer_pid "$id")
stopped_pids+=("$p1")
kill -STOP "$p1"
# kill returns before the process stops (it stops when it next runs): wait for that.
is_stopped() { case "$(awk '{print $3}' "/proc/$p1/stat" 2>/dev/null)" in T | t) return 0 ;; esac; return 1; }
wait_until is_stopped
run "$SBX" sandbox ps --all
expect_in "$T/out" "suspended" "ps --all says the sandbox is suspended (a signal stopped it)"
run "$SBX" sandbox rm "$id"
expect_rc 0 "rm of a stopped supervisor succeeds"
alive "$p1" && not_ok "the stopped supervisor was killed" || ok "the stopped supervisor was killed"
wait_until outer_gone
expect_eq "$(pgrep -f -- "__supervise $id")" "" "no supervisor process of it is left"
expect_eq "$(ls "$RUNBASE")$(ls "$SBX_WORKSPACES")" "" "no runtime dir or workspace is left"
expect_eq "$(cgroups_of "$id")" "" "no cgroup of it is left"

# ---- SIGKILL of the host-side supervisor, then rm: no cgroup survives rm
id=$("$SBX" sandbox create)
"$SBX" sandbox exec "$id" -- true
outer=$(outer_pid "$id")
kill -KILL "$outer"
outer_dead() { ! alive "$outer"; }
wait_until outer_dead
run "$SBX" sandbox rm "$id"
expect_rc 0 "rm after SIGKILL of the host-side supervisor"
expect_eq "$(cgroups_of "$id")" "" "rm removed the cgroups the killed host side left"
expect_eq "$(pgrep -f -- "__supervise $id")" "" "no process of it is left"
expect_eq "$(ls "$RUNBASE")$(ls "$SBX_WORKSPACES")" "" "nothing else is left"

# ---- a runtime directory handed to a disk release worker that died: the next ls removes it
# (rm renames a disk sandbox's runtime directory to .gone-ID-RANDOM and its release worker,
# holding a shared flock on it, removes it; one nobody holds lost its worker).
g="$RUNBASE/.gone-0123456789abcdef-00112233445566ff"
mkdir -m 0700 "$g" && echo '{}' >"$g/state.json" && echo x >"$g/supervisor.log"
flock -s -o "$g" sleep 60 &
holder=$!
stopped_pids+=("$holder")
holding() { [ -n "$(pgrep -P "$holder" sleep)" ]; }
wait_until holding
run "$SBX" sandbox ls
expect_rc 0 "ls beside a handed-over runtime directory"
[ -d "$g" ] && ok "one its worker still holds is left alone" || not_ok "one its worker still holds is left alone"
grep -q "gone\|0123456789abcdef" "$T/out" && not_ok "ls does not list it" || ok "ls does not list it"
pkill -KILL -P "$holder" sleep
kill -KILL "$holder"
wait "$holder" 2>/dev/null
run "$SBX" sandbox ls
expect_rc 0 "ls after its worker died"
[ ! -e "$g" ] && ok "one nobody holds is removed" || { not_ok "one nobody holds is removed"; diag "$(ls -la "$g" 2>&1)"; }

done_testing
