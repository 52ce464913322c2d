#!/usr/bin/env bash
# Resource limits and host facts, attacked from inside real sandboxes (issue 9, items 3, 4, 6,
# 11): terminal exhaustion, a fork bomb that outlives its exec, daemons left behind, the CPU
# quota, limits the host cannot enforce, and what /proc tells about the host. Runs as whoever
# runs it; meson runs it again as an unprivileged user when that is root.
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/../integration/sandbox-lib.sh"
privileged() { [ "$(id -u)" = 0 ] && [ "$(awk 'NR == 1 {print $1, $2, $3}' /proc/self/uid_map)" = "0 0 4294967295" ]; }
command -v python3 >/dev/null || skip_all "python3 is not installed"

bg=()
limits_cleanup() {
    local p
    for p in "${bg[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    sandbox_cleanup
}
trap limits_cleanup EXIT

if ! pre=$("$SBX" sandbox create 2>"$T/pre"); then
    grep -q "cannot create a .*namespace" "$T/pre" && skip_all "$(grep -m1 namespace "$T/pre")"
    not_ok "create"; diag "$(cat "$T/pre")"; done_testing; exit
fi
"$SBX" sandbox rm "$pre" >/dev/null 2>&1

# state ID EXPR: a Python expression over the sandbox's `ps --json` entry `s`.
state() {
    "$SBX" sandbox ps --json | python3 -c '
import json, sys
s = [x for x in json.load(sys.stdin) if x["id"] == sys.argv[1]][0]
print(eval(sys.argv[2]))' "$1" "$2"
}

# ---- 3. terminals: a bounded devpts per sandbox ---------------------------------------------
a=$("$SBX" sandbox create 2>/dev/null)
b=$("$SBX" sandbox create 2>/dev/null)
# Open terminals until the kernel refuses (at most 1000), hold them, report the count.
"$SBX" sandbox exec "$a" -- python3 -c '
import errno, os, sys, time
fds = []
err = 0
while len(fds) < 1000:
    try:
        fds.append(os.openpty())
    except OSError as e:
        err = e.errno
        break
open("ptys.txt", "w").write("%d %d\n" % (len(fds), err))
time.sleep(30)' >/dev/null 2>&1 &
bg+=($!)
wait_until "$SBX" sandbox exec "$a" -- test -s ptys.txt
read -r nptys perr < <("$SBX" sandbox exec "$a" -- cat ptys.txt)
if [ -n "$nptys" ] && [ "$nptys" -gt 0 ] && [ "$nptys" -le 128 ] && [ "$perr" = 28 ]; then
    ok "3 opening terminals inside stops at the sandbox's limit (ENOSPC after $nptys)"
else not_ok "3 opening terminals inside stops at the sandbox's limit"; diag "opened ${nptys:-?}, errno ${perr:-?}"; fi
if python3 -c 'import os; os.openpty()'; then ok "3 the host still opens a terminal"
else not_ok "3 the host still opens a terminal"; fi
run "$SBX" sandbox exec "$b" -- python3 -c 'import os; os.openpty(); print("pty")'
expect_eq "$(cat "$T/out")" "pty" "3 another sandbox still opens a terminal"
run "$SBX" sandbox exec "$a" -- grep -c ' /dev/pts .*max=' /proc/self/mountinfo
expect_eq "$(cat "$T/out")" 1 "3 the sandbox's devpts is mounted with max="
kill "${bg[0]}" 2>/dev/null
"$SBX" sandbox rm "$a" "$b" >/dev/null 2>&1

# ---- 4. a fork bomb ends with its exec, and the sandbox serves at once --------------------
# procs ID: the number of processes an exec of ls sees in the sandbox (ls itself included).
procs() { "$SBX" sandbox exec "$1" -- ls /proc | grep -c '^[0-9]*$'; }
bomb_check() {
    local id=$1 what=$2
    shift 2
    run "$SBX" sandbox exec --timeout 3s "$id" -- bash -c "$*"
    expect_rc 124 "4 $what: the exec times out"
    n=$(procs "$id")
    if [ -n "$n" ] && [ "$n" -le 2 ]; then ok "4 $what: nothing of it is left ($n process seen)"
    else not_ok "4 $what: nothing of it is left"; diag "$n processes seen"; fi
    run "$SBX" sandbox exec "$id" -- echo next
    expect_eq "$(cat "$T/out")" "next" "4 $what: the next exec works"
}
id=$("$SBX" sandbox create 2>/dev/null)
# Bounded in count on every runner: 2^7 processes, half of them in new sessions.
bomb_check "$id" "a bounded process tree with daemons" \
    'b() { if [ $1 -gt 0 ]; then b $(($1 - 1)) & setsid bash -c "sleep 1000" & b $(($1 - 1)) & fi; sleep 1000; }; b 5; sleep 1000'
run timeout 20 "$SBX" sandbox rm "$id"
expect_rc 0 "4 rm after the bomb succeeds"
if privileged; then
    # The classic bomb against a small pids limit, then rm.
    id=$("$SBX" sandbox create --pids 64 2>/dev/null)
    bomb_check "$id" "a fork bomb at the pids limit" ':(){ :|:& };:; sleep 1000'
    run timeout 20 "$SBX" sandbox rm "$id"
    expect_rc 0 "4 rm after the fork bomb succeeds"
    [ ! -e "$RUNBASE/$id" ] && ok "4 rm after the fork bomb removes the sandbox" \
        || not_ok "4 rm after the fork bomb removes the sandbox"
fi

# Daemons: gone when their exec ends, unless kept (then until rm).
id=$("$SBX" sandbox create 2>/dev/null)
"$SBX" sandbox exec "$id" -- sh -c 'setsid sleep 1000 >/dev/null 2>&1 </dev/null & echo $! >d.pid'
run "$SBX" sandbox exec "$id" -- pgrep -c -x sleep
expect_eq "$(cat "$T/out")" 0 "4 a daemon dies when its exec ends"
"$SBX" sandbox exec --keep-background "$id" -- \
    sh -c 'setsid sleep 1000 >/dev/null 2>&1 </dev/null & echo $! >d.pid'
run "$SBX" sandbox exec "$id" -- pgrep -c -x sleep
expect_eq "$(cat "$T/out")" 1 "4 a daemon of an exec with --keep-background survives it"
# A command that kills its own reaper (same uid when unprivileged) still ends with its exec.
run "$SBX" sandbox exec "$id" -- sh -c 'kill -9 -1; setsid sleep 1000 >/dev/null 2>&1 </dev/null & echo survived'
expect_eq "$(cat "$T/out")" "survived" "4 kill -9 -1 inside: the command itself goes on"
run "$SBX" sandbox exec "$id" -- pgrep -c -x sleep
expect_eq "$(cat "$T/out")" 0 "4 kill -9 -1 inside: nothing it started is left"
"$SBX" sandbox rm "$id" >/dev/null 2>&1

# ---- 4 and 6. the CPU quota and the limits in force or not enforced -----------------------
run "$SBX" sandbox create
id=$(cat "$T/out")
cp "$T/err" "$T/create.err"
unenforced=$(state "$id" '",".join(u["name"] for u in s["unenforced"])')
expect_eq "$(state "$id" '"limits" in s and isinstance(s.get("unenforced"), list)')" True \
    "6 ps --json shows the limits in force and those not enforced"
memdir=/sys/fs/cgroup/memory$(awk -F: '$2 ~ /(^|,)memory(,|$)/ {print $3}' /proc/self/cgroup)
if ! privileged && [ -d "$memdir" ] && [ ! -w "$memdir" ]; then
    # cgroup v1 without delegation: the memory limit cannot be enforced, and that is said.
    case ",$unenforced," in
    *,memory,*) ok "6 unprivileged on cgroup v1: the memory limit is listed as not enforced" ;;
    *) not_ok "6 unprivileged on cgroup v1: the memory limit is listed as not enforced"
       diag "unenforced: '$unenforced'" ;;
    esac
fi
if [ -n "$unenforced" ]; then
    expect_in "$T/create.err" "not enforced" "6 create warns on stderr about the limits it cannot enforce"
    for name in ${unenforced//,/ }; do
        expect_in "$T/create.err" "$name" "6 the warning names the '$name' limit"
    done
    expect_eq "$(state "$id" 'all(u["reason"] for u in s["unenforced"])')" True \
        "6 ps --json gives a reason for every limit not enforced"
else
    expect_eq "$(cat "$T/create.err")" "" "6 create where every limit is enforced warns about nothing"
fi
if privileged; then
    expect_eq "$unenforced" "" "6 as root every default limit is enforced"
fi
# sbx run creates its sandbox the same way and says the same (an offline replayed model).
EX=${SBX_SRCDIR:-}/examples/coding-task
if [ -r "$EX/run.jsonl" ]; then
    run "$SBX" run -m "replay:$EX/run.jsonl" -a "$EX/agent.yaml" "Do the task in TASK.md."
    if [ -n "$unenforced" ]; then
        expect_in "$T/err" "limits are not enforced" "6 sbx run warns about the limits it cannot enforce"
    else
        expect_not_in "$T/err" "not enforced" "6 sbx run where every limit is enforced warns about nothing"
    fi
fi
cpus=$(nproc)
want=$((cpus * 500 < 1000 ? 1000 : cpus * 500))
case ",$unenforced," in
*,cpu,*) expect_eq "$(state "$id" 's["limits"].get("cpu_millis")')" None \
    "4 an unenforced CPU quota is not listed as in force" ;;
*)
    expect_eq "$(state "$id" 's["limits"].get("cpu_millis")')" "$want" \
        "4 the default CPU quota is half the host's CPUs, at least one (ps --json)"
    if privileged; then
        # The sandbox's own cgroups, from where its processes are (any layout: v1, v2, hybrid):
        # cpu.cfs_quota_us on v1, the first field of cpu.max on v2, microseconds per 100 ms.
        quota=
        for p in $(pgrep -f -- "__supervise $id"); do
            for d in $(awk -F: '$3 ~ /sbx-/ { if ($2 == "") print "/sys/fs/cgroup" $3
                else { n = split($2, c, ","); for (i = 1; i <= n; i++) print "/sys/fs/cgroup/" c[i] $3 } }' \
                "/proc/$p/cgroup" 2>/dev/null); do
                [ -r "$d/cpu.cfs_quota_us" ] && quota=$(cat "$d/cpu.cfs_quota_us")
                [ -r "$d/cpu.max" ] && quota=$(cut -d' ' -f1 "$d/cpu.max")
            done
        done
        expect_eq "$quota" "$((want * 100))" "4 the cgroup holds the CPU quota"
    fi
    ;;
esac
expect_eq "$(state "$id" 's["limits"].get("ptys")')" 128 "3 ps --json shows the terminal limit"
"$SBX" sandbox rm "$id" >/dev/null 2>&1
if privileged; then
    id=$("$SBX" sandbox create --cpus none 2>/dev/null)
    expect_eq "$(state "$id" 's["limits"].get("cpu_millis")')" None "4 --cpus none sets no quota"
    "$SBX" sandbox rm "$id" >/dev/null 2>&1
fi

# ---- 11. /proc tells nothing of the host's boot and swap ----------------------------------
id=$("$SBX" sandbox create 2>/dev/null)
run "$SBX" sandbox exec "$id" -- cat /proc/cmdline
host=$(cat /proc/cmdline)
if [ ! -s "$T/out" ] && [ -n "$host" ]; then ok "11 /proc/cmdline inside is empty, not the host's"
else not_ok "11 /proc/cmdline inside is empty, not the host's"; diag "$(head -c 300 "$T/out")"; fi
run "$SBX" sandbox exec "$id" -- cat /proc/swaps /proc/modules
expect_eq "$(wc -c <"$T/out")" 0 "11 /proc/swaps and /proc/modules are masked"
# Every mount point in mountinfo is a sandbox path: nothing of the build scaffolding.
run "$SBX" sandbox exec "$id" -- cat /proc/self/mountinfo
expect_not_in "$T/out" "/oldroot" "11 mountinfo shows no old root"
expect_not_in "$T/out" "/newroot" "11 mountinfo shows no build root"
"$SBX" sandbox rm "$id" >/dev/null 2>&1
done_testing
