#!/usr/bin/env bash
# Issue 27: a `sandbox stop` or `sandbox start` killed half-way left both the stopped record and
# the runtime dir; then start said "stop it again", stop said "is gone", only prune helped, and
# ps listed the id twice. Now a half-done stop is finished by the next stop or start, a
# half-done start by the next start, ps lists each sandbox once, and the content survives.
# Both are killed (SIGKILL) at several points, each bounded in time.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"

id=$("$SBX" sandbox create) || { not_ok "create"; done_testing; exit; }
"$SBX" sandbox exec "$id" -- sh -c 'mkdir d; i=0; while [ $i -lt 40 ]; do head -c 500000 /dev/urandom >d/f$i; i=$((i + 1)); done'
sum() { "$SBX" sandbox exec "$id" -- sh -c 'cat d/* | sha256sum' 2>&1; }
want=$(sum)

# times ID: how often ps --all lists it; status ID: its status there.
times() { "$SBX" sandbox ps --all --json | python3 -c 'import json,sys; print(sum(s["id"] == sys.argv[1] for s in json.load(sys.stdin)))' "$id"; }
status() { "$SBX" sandbox ps --all --json | python3 -c 'import json,sys; print(" ".join(s["status"] for s in json.load(sys.stdin) if s["id"] == sys.argv[1]))' "$id"; }
settled() { case "$(status)" in *creating* | *unresponsive*) return 1 ;; esac; }

# The kills land at fractions of how long a stop and a start take here (the half-done window
# is at their end); where they land decides only which path is taken, never the verdict.
ms() { date +%s%N | cut -c1-13; }
t0=$(ms); "$SBX" sandbox stop "$id" >/dev/null; t1=$(ms); "$SBX" sandbox start "$id" >/dev/null; t2=$(ms)
at() { awk -v ms="$1" -v f="$2" 'BEGIN {printf "%.3f", ms * f / 1000}'; }
stop_at=() start_at=()
for f in 0.3 0.6 0.8 0.9 0.95 1.0; do stop_at+=("$(at $((t1 - t0)) $f)"); done
for f in 0.3 0.6 0.8 0.9 0.97; do start_at+=("$(at $((t2 - t1)) $f)"); done
diag "a stop takes $((t1 - t0)) ms, a start $((t2 - t1)) ms"

# ---- stop killed; the next stop (even rounds) or start (odd rounds) finishes it --------------
round=0 halves=0
for d in "${stop_at[@]}"; do
    timeout -s KILL "$d" "$SBX" sandbox stop "$id" >/dev/null 2>&1
    [ -e "$RUNBASE/$id" ] && [ -e "$SBX_STOPPED/$id.json" ] && halves=$((halves + 1))
    wait_until settled
    seen="$(status)"
    expect_eq "$(times)" 1 "stop killed after $d s: ps --all lists it once ($seen)"
    if [ $((round % 2)) = 0 ]; then
        if [ -e "$RUNBASE/$id" ]; then
            run "$SBX" sandbox stop "$id"
            expect_rc 0 "stop killed after $d s: stop again finishes it"
        fi
        [ ! -e "$RUNBASE/$id" ] && [ -e "$SBX_STOPPED/$id.json" ] && ok "stop killed after $d s: it is stopped" ||
            { not_ok "stop killed after $d s: it is stopped"; diag "$("$SBX" sandbox ps --all 2>&1)"; }
        run "$SBX" sandbox start "$id"
        expect_rc 0 "stop killed after $d s: then start"
    elif [ -e "$SBX_STOPPED/$id.json" ]; then
        run "$SBX" sandbox start "$id"
        expect_rc 0 "stop killed after $d s: start finishes the stop and starts it"
    else
        ok "stop killed after $d s: the kill came before the stop did anything"
    fi
    expect_eq "$(status)" live "stop killed after $d s: it is live again"
    expect_eq "$(sum)" "$want" "stop killed after $d s: the content is intact"
    [ ! -e "$SBX_STOPPED/$id.json" ] && ok "stop killed after $d s: no stopped record is left" ||
        not_ok "stop killed after $d s: no stopped record is left"
    round=$((round + 1))
done

# ---- start killed; the next start finishes it ----------------------------------------------
for d in "${start_at[@]}"; do
    run "$SBX" sandbox stop "$id"
    expect_rc 0 "stop before a killed start"
    timeout -s KILL "$d" "$SBX" sandbox start "$id" >/dev/null 2>&1
    [ -e "$RUNBASE/$id" ] && [ -e "$SBX_STOPPED/$id.json" ] && halves=$((halves + 1))
    wait_until settled
    expect_eq "$(times)" 1 "start killed after $d s: ps --all lists it once ($(status))"
    if [ -e "$SBX_STOPPED/$id.json" ]; then
        run "$SBX" sandbox start "$id"
        expect_rc 0 "start killed after $d s: start again finishes it"
    else
        ok "start killed after $d s: the start had finished"
    fi
    expect_eq "$(status)" live "start killed after $d s: it is live"
    expect_eq "$(sum)" "$want" "start killed after $d s: the content is intact"
    [ ! -e "$SBX_STOPPED/$id.json" ] && ok "start killed after $d s: no stopped record is left" ||
        not_ok "start killed after $d s: no stopped record is left"
done

# ---- start killed with its supervisor, once the supervisor runs -----------------------------
# As when the session or cgroup both ran in is killed: the start never returned, so nobody can
# have used what it brought back; the next start removes it and starts again from the record
# (it used to refuse: "was started again from its stopped record and then died").
with=0
for n in 1 2 3; do
    run "$SBX" sandbox stop "$id"
    expect_rc 0 "stop before start killed with its supervisor ($n)"
    "$SBX" sandbox start "$id" >/dev/null 2>&1 &
    pid=$!
    # The start runs in short steps until its supervisor exists; stopped while we look, so that
    # it cannot hand the sandbox over meanwhile. Its supervisor dies with it only while the
    # start still holds the sandbox back (the runtime dir's unclaimed marker).
    sup=
    while alive "$pid"; do
        kill -STOP "$pid" 2>/dev/null
        sup=$(pgrep -f -- "__supervise $id") && break
        kill -CONT "$pid" 2>/dev/null
        sleep 0.005
    done
    [ -n "$sup" ] && [ -e "$RUNBASE/$id/unclaimed" ] || sup=
    kill -KILL "$pid" $sup 2>/dev/null
    wait "$pid" 2>/dev/null
    [ -n "$sup" ] && with=$((with + 1))
    wait_until settled
    expect_eq "$(times)" 1 "start killed with its supervisor ($n): ps --all lists it once ($(status))"
    if [ -e "$SBX_STOPPED/$id.json" ]; then
        [ -e "$RUNBASE/$id" ] && halves=$((halves + 1))
        run "$SBX" sandbox start "$id"
        expect_rc 0 "start killed with its supervisor ($n): start again finishes it"
    else
        ok "start killed with its supervisor ($n): the start had finished"
    fi
    expect_eq "$(status)" live "start killed with its supervisor ($n): it is live"
    expect_eq "$(sum)" "$want" "start killed with its supervisor ($n): the content is intact"
done

diag "$with of 3 starts were killed with their supervisor before they handed the sandbox over"
diag "$halves of the 14 kills left a half-done stop or start (a runtime dir and a stopped record)"
run "$SBX" sandbox rm "$id"
expect_rc 0 "rm"
expect_eq "$(ls -A "$RUNBASE" "$SBX_STOPPED" 2>/dev/null | grep -v -e '^$' -e ':$')" "" "nothing is left"
done_testing
