#!/usr/bin/env bash
# Issue 27: a create killed before its supervisor ran used to keep its loop device, its ext4
# mount and a partly restored workspace until someone ran prune. Now the next sbx command that
# lists or creates sandboxes reclaims what dead creates left (never a sandbox whose supervisor
# ran: its workspace may hold work). Creates and creates from a snapshot are killed with SIGKILL
# at several points; after the next ps, or the next create, only live sandboxes are left.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"

# What this test's sandboxes hold on the host: mounts under $T and loop devices of images
# under $T, one line each.
held() {
    awk -v t="$T/" 'index($5, t) == 1 {print "mount", $5}' /proc/self/mountinfo
    losetup -a 2>/dev/null | grep -F "$T/" | sed 's/^/loop /'
}
status_of() {
    "$SBX" sandbox ps --all --json | python3 -c '
import json, sys
for s in json.load(sys.stdin):
    print(s["id"], s["status"])'
}
settled() { ! "$SBX" sandbox ps --all --json | grep -qE '"status": "(creating|unresponsive)"'; }
# only_live WHAT: every runtime dir is a live sandbox, and every mount and loop device under $T
# belongs to one.
only_live() {
    local left=() sid
    wait_until no_strays
    for sid in $(ls "$RUNBASE"); do
        grep -qx "$sid live" "$T/status" || left+=("$sid")
    done
    local strays
    strays=$(strays)
    if [ ${#left[@]} = 0 ] && [ -z "$strays" ]; then ok "$1"; else
        not_ok "$1"; diag "not live: ${left[*]}" "held: $strays" "$(cat "$T/status")"
    fi
}

# strays: lines of held that no runtime dir accounts for; a removed sandbox's image is released
# just after its removal returns, so checks wait for these to go (bounded).
strays() {
    local line keep sid
    held | while read -r line; do
        keep=
        for sid in $(ls "$RUNBASE"); do case "$line" in *"/$sid"*) keep=1 ;; esac; done
        [ -n "$keep" ] || echo "$line"
    done
}
no_strays() { [ -z "$(strays)" ]; }

# ---- plain creates, killed -----------------------------------------------------------------
left_before=0
for d in 0.02 0.05 0.1 0.15 0.2 0.3 0.45 0.7; do
    timeout -s KILL "$d" "$SBX" sandbox create >/dev/null 2>&1
done
wait_until settled
left_before=$(ls "$RUNBASE" | wc -l)
diag "after 8 killed creates: $left_before runtime dirs, $(held | wc -l) mounts and loop devices"
status_of >"$T/status" # the next command that lists: it reclaims first
expect_eq "$(grep -c ' dead$' "$T/status")" 0 "ps --all after killed creates shows no dead one"
only_live "only live sandboxes are left after the next ps"
for sid in $(ls "$RUNBASE"); do "$SBX" sandbox rm "$sid" >/dev/null 2>&1; done

# ---- creates killed once their supervisor runs -------------------------------------------------
# A manifest that takes the create a while to materialise: an isolated create copies it while
# its supervisor starts, so the supervisor records itself and serves before the create returns.
mkdir -p "$T/m/tree"
python3 -c '
import os, sys
for i in range(1500):
    open(os.path.join(sys.argv[1], "f%d" % i), "wb").write(os.urandom(16384))' "$T/m/tree"
printf 'entries:\n  tree: {type: local_dir, src: tree}\n' >"$T/m/manifest.yaml"
# sup_at WHAT: the id of the sandbox being created once its runtime dir has WHAT (record: its
# supervisor recorded itself; serving: it serves); waits for it, bounded.
sup_at() {
    local i d
    for i in $(seq 1 3000); do
        for d in "$RUNBASE"/*/; do
            case "$1" in
            record) [ -e "$d/supervisor.json" ] ;;
            serving) grep -qs serving "$d/supervisor.log" ;;
            esac && { basename "$d"; return 0; }
        done
        sleep 0.01
    done
    return 1
}
leftovers() { ls -A "$RUNBASE" "$SBX_WORKSPACES" 2>/dev/null | grep -v -e '^$' -e ':$'; }
all_gone() { [ -z "$(leftovers)$(held)$(pgrep -f -- "__supervise $1")" ]; }
# killed_create WHEN WITH: a create killed at WHEN (sup_at), and with it its supervisor's
# processes when WITH is "with". A create killed before it returned the id leaves nothing
# once the next ps has run, whether its supervisor died with it (as when the session or cgroup
# they ran in is killed: it used to stay "dead" for rm or prune) or serves on (it used to serve
# for nobody).
killed_create() {
    local what="create killed at '$1' $2 its supervisor" pid sid
    (cd "$T/m" && exec "$SBX" sandbox create -m manifest.yaml) >"$T/id" 2>/dev/null &
    pid=$!
    sid=$(sup_at "$1")
    if [ "$2" = with ]; then
        kill -KILL "$pid" $(pgrep -f -- "__supervise $sid") 2>/dev/null
    else
        kill -KILL "$pid" 2>/dev/null
    fi
    wait "$pid" 2>/dev/null
    if [ -s "$T/id" ]; then
        ok "$what: the create had returned (the poll came late)"
        "$SBX" sandbox rm "$sid" >/dev/null 2>&1
        return
    fi
    # The create hands the sandbox over (removes its unclaimed marker) just before it prints the
    # id: a kill in between leaves a sandbox that is the user's, kept and listed. Only the create
    # removes the marker while the runtime dir stays, so its absence beside the supervisor's
    # record, seen before anything reclaims, tells that the kill came after the hand-over.
    local handed=
    [ -e "$RUNBASE/$sid/supervisor.json" ] && [ ! -e "$RUNBASE/$sid/unclaimed" ] && handed=1
    wait_until settled
    status_of >"$T/status"
    if [ -n "$handed" ] && grep -q "^$sid " "$T/status"; then
        ok "$what: the create had handed the sandbox over (the kill came late); it is kept and listed"
        "$SBX" sandbox rm "$sid" >/dev/null 2>&1
        wait_until all_gone "$sid"
        return
    fi
    expect_eq "$(cat "$T/status")" "" "$what: ps --all shows nothing"
    wait_until all_gone "$sid"
    expect_eq "$(leftovers)$(held)$(pgrep -f -- "__supervise $sid")" "" "$what: nothing is left"
}
killed_create record with
killed_create serving with
killed_create serving without

# ---- creates from a snapshot, killed during the restore ---------------------------------------
src=$("$SBX" sandbox create) || { not_ok "create the source sandbox"; done_testing; exit; }
"$SBX" sandbox exec "$src" -- sh -c 'mkdir d; i=0; while [ $i -lt 400 ]; do head -c 65536 /dev/urandom >d/f$i; i=$((i + 1)); done'
ref=$("$SBX" sandbox snapshot "$src" 2>/dev/null | tail -n1)
"$SBX" sandbox rm "$src" >/dev/null 2>&1
case "$ref" in sha256:*) ok "a snapshot of 400 files to restore" ;; *) not_ok "a snapshot of 400 files to restore"; diag "$ref" ;; esac
for d in 0.1 0.2 0.35 0.5 0.8 1.2; do
    timeout -s KILL "$d" "$SBX" sandbox create --snapshot "$ref" >/dev/null 2>&1
done
diag "after 6 killed restores: $(ls "$RUNBASE" | wc -l) runtime dirs, $(held | wc -l) mounts and loop devices"
# The next command that creates: it reclaims before it makes its own.
new=$("$SBX" sandbox create --disk none)
expect_eq "$?" 0 "a create after killed restores works"
wait_until settled
status_of >"$T/status"
only_live "only live sandboxes are left after the next create"
for sid in $(ls "$RUNBASE"); do "$SBX" sandbox rm "$sid" >/dev/null 2>&1; done

# ---- a dead sandbox that ran is kept for rm and prune ----------------------------------------
id=$("$SBX" sandbox create)
"$SBX" sandbox exec "$id" -- sh -c 'echo work >kept.txt'
kill -KILL $(pgrep -f -- "__supervise $id")
dead() { "$SBX" sandbox ps --all --json | grep -q '"status": "dead"'; }
wait_until dead
run "$SBX" sandbox ps --all
expect_in "$T/out" "$id" "a sandbox whose supervisor was killed is still listed (dead)"
expect_eq "$(cat "$SBX_WORKSPACES/$id/kept.txt" 2>&1)" work "and its workspace is kept for the user"
run "$SBX" sandbox rm "$id"
expect_rc 0 "rm removes it"
host_clean() { [ -z "$(ls -A "$RUNBASE")$(held)" ]; }
wait_until host_clean
expect_eq "$(ls -A "$RUNBASE")$(held)" "" "nothing is left"
# No process of any sandbox of this test lives on: a helper a supervisor forked (the one that
# makes the workspace's id mapping holds the id range's lock) dies with its supervisor, however
# early in the create that was killed. Found by what they hold open under $T.
ours() {
    local p
    for p in $(pgrep -f -- "__supervise "); do
        ls -l "/proc/$p/fd" 2>/dev/null | grep -qF -- "$T/" && echo "$p $(tr '\0' ' ' <"/proc/$p/cmdline")"
    done
}
no_ours() { [ -z "$(ours)" ]; }
wait_until no_ours
expect_eq "$(ours)" "" "no process of this test's sandboxes is left"
done_testing
