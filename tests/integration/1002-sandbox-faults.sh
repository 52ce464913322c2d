#!/usr/bin/env bash
# Faults and bad input: escapes, daemons, huge output, a killed client, a killed supervisor.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"

# Host pids of commands are checked below: this sandbox runs unconfined (in an isolated one
# they live in a pid namespace of their own); the isolated case follows at the end.
id=$("$SBX" sandbox create --isolation none 2>/dev/null)
[ -n "$id" ] && ok "create" || { not_ok "create"; done_testing; exit; }

# Path escapes through '..', absolute paths and planted symlinks.
echo secret > "$T/outside"
"$SBX" sandbox exec "$id" -- sh -c "ln -s '$T/outside' pw; ln -s '$T' outdir; ln -s / root"
run "$SBX" sandbox cp "$id:../x" "$T/x"
expect_rc 1 "cp from '..' fails"
expect_in "$T/err" "must not contain '..'" "cp from '..' names the rule"
run "$SBX" sandbox cp "$T/outside" "$id:../escaped"
expect_rc 1 "cp to '..' fails"
run "$SBX" sandbox cp "$id:/etc/passwd" "$T/x"
expect_rc 1 "cp from an absolute path outside the workspace fails"
run "$SBX" sandbox cp "$id:pw" "$T/x"
expect_rc 1 "cp through a planted symlink fails"
expect_in "$T/err" "outside" "the refusal says the path leads outside"
[ ! -e "$T/x" ] && ok "nothing was copied out" || not_ok "nothing was copied out"
run "$SBX" sandbox cp "$T/outside" "$id:outdir/planted"
expect_rc 1 "cp into a symlinked directory outside fails"
[ ! -e "$T/planted" ] && ok "nothing was written outside" || not_ok "nothing was written outside"
run "$SBX" sandbox exec --cwd root "$id" -- pwd
expect_rc 125 "--cwd through a planted symlink fails"
run "$SBX" sandbox exec --cwd .. "$id" -- pwd
expect_rc 125 "--cwd '..' fails"
run "$SBX" sandbox exec --cwd /etc "$id" -- pwd
expect_rc 125 "--cwd outside the workspace fails"
expect_in "$T/err" "working directory" "the refusal names the working directory"

# A command that forks a daemon and exits: the daemon dies with it, unless the exec keeps its
# background processes, which then live until rm.
run "$SBX" sandbox exec "$id" -- sh -c 'setsid sleep 1000 >/dev/null 2>&1 < /dev/null & echo $!'
expect_rc 0 "a command that leaves a daemon returns"
daemon=$(cat "$T/out")
alive "$daemon" && not_ok "the daemon dies when its exec ends" \
    || ok "the daemon dies when its exec ends"
run "$SBX" sandbox exec --keep-background "$id" -- \
    sh -c 'setsid sleep 1000 >/dev/null 2>&1 < /dev/null & echo $!'
expect_rc 0 "a command that keeps a daemon returns"
daemon=$(cat "$T/out")
alive "$daemon" && ok "a kept daemon runs" || not_ok "a kept daemon runs"

# 1 GiB of output: head and tail are kept, the rest is counted.
run "$SBX" sandbox exec --max-output 65536 "$id" -- sh -c 'echo FIRST; head -c 1073741824 /dev/zero; echo; echo LAST'
expect_rc 0 "a command printing 1 GiB completes"
expect_eq "$(wc -c < "$T/out")" 65536 "only the byte limit is kept"
expect_eq "$(head -n 1 "$T/out")" "FIRST" "the head is kept"
expect_eq "$(tail -n 1 "$T/out")" "LAST" "the tail is kept"
expect_in "$T/err" "1073676300 bytes of output dropped" "the dropped byte count is reported"

# A client killed mid-exec: the supervisor kills its command.
"$SBX" sandbox exec "$id" -- sh -c 'echo $$ > victim.pid; exec sleep 1000' &
client=$!
wait_until "$SBX" sandbox exec "$id" -- test -s victim.pid
victim=$("$SBX" sandbox exec "$id" -- cat victim.pid)
alive "$victim" && ok "the command runs" || not_ok "the command runs"
kill -9 "$client"
wait "$client" 2>/dev/null
wait_until eval '! alive '"$victim" && ok "killing the client kills its command" \
    || not_ok "killing the client kills its command"

# A reader that goes away stops the command instead of hanging.
run timeout 20 sh -c '"$SBX" sandbox exec "$1" -- yes | head -n 2' sh "$id"
expect_rc 0 "a closed output pipe stops the command"
expect_eq "$(cat "$T/out")" "$(printf 'y\ny')" "the output before that arrives"

# rm kills the daemon.
run "$SBX" sandbox rm "$id"
expect_rc 0 "rm succeeds"
alive "$daemon" && not_ok "rm kills the kept daemon" || ok "rm kills the kept daemon"

# The supervisor killed with SIGKILL: clean errors, ps stops listing it, rm cleans up.
id=$("$SBX" sandbox create)
sup=$(supervisor_pid "$id")
[ -n "$sup" ] && ok "the supervisor runs" || not_ok "the supervisor runs"
"$SBX" sandbox exec --keep-background "$id" -- sh -c 'sleep 1000 >/dev/null 2>&1 & echo $!' \
    > "$T/child"
timeout 20 "$SBX" sandbox exec "$id" -- sleep 1000 > /dev/null 2> "$T/inflight.err" &
inflight=$!
# Each exec runs under a reaper, a child of the supervisor.
wait_until eval '[ "$(for r in $(pgrep -P '"$sup"'); do pgrep -P $r -x sleep; done | wc -l)" -ge 2 ]'
# A reaper shares the supervisor's memory (no copy of it per exec) on the architectures where
# it runs on raw system calls; kcmp(2) compares the two address spaces.
same_vm() {
    python3 - "$1" "$2" <<'PY'
import ctypes, os, platform, sys
nr = {"x86_64": 312, "aarch64": 272}.get(platform.machine())
if nr is None:
    print("skip: no shared reaper on " + platform.machine()); sys.exit(0)
libc = ctypes.CDLL(None, use_errno=True)
r = libc.syscall(nr, int(sys.argv[1]), int(sys.argv[2]), 1, 0, 0)  # KCMP_VM
if r < 0:
    print("skip: kcmp: " + os.strerror(ctypes.get_errno())); sys.exit(0)
print("same" if r == 0 else "different")
PY
}
if grep -qE 'lib(asan|tsan)' "/proc/$sup/maps" 2>/dev/null; then
    ok "the reaper's memory # SKIP a sanitizer build forks the reaper (src/core/spawn.h)"
elif command -v python3 >/dev/null; then
    for r in $(pgrep -P "$sup"); do
        v=$(same_vm "$sup" "$r")
        case $v in
        skip:*) ok "the reaper's memory # SKIP ${v#skip: }" ;;
        *) expect_eq "$v" same "an exec's reaper shares the supervisor's memory" ;;
        esac
    done
else
    ok "the reaper's memory # SKIP python3 is not installed"
fi
kill -9 "$sup"
wait_until eval '! alive '"$sup"
wait "$inflight"
expect_eq "$?" 125 "an exec in flight when the supervisor dies fails (no hang)"
expect_in "$T/inflight.err" "is gone" "the exec in flight says the sandbox is gone"
run timeout 10 "$SBX" sandbox exec "$id" -- true
expect_rc 125 "exec in a sandbox whose supervisor died fails"
expect_in "$T/err" "sandbox '$id' is gone" "the error says the sandbox is gone"
run "$SBX" sandbox ps
expect_not_in "$T/out" "$id" "ps stops listing it"
run "$SBX" sandbox rm "$id"
expect_rc 0 "rm of a dead sandbox succeeds"
[ ! -e "$RUNBASE/$id" ] && [ ! -e "$SBX_WORKSPACES/$id" ] && ok "rm cleans up a dead sandbox" \
    || not_ok "rm cleans up a dead sandbox"

# Isolated: rm and a killed supervisor end every process of the sandbox (the pid namespace dies
# with its PID 1), even a daemon that left the command's session.
# Durations unique to this run: another run of this test on the machine has daemons too.
D1=$((1000000 + $$)) D2=$((2000000 + $$))
id=$("$SBX" sandbox create)
sup=$(supervisor_pid "$id")
[ -n "$sup" ] && ok "the isolated supervisor (PID 1 of the sandbox) runs" \
    || not_ok "the isolated supervisor (PID 1 of the sandbox) runs"
# The middle process (PID 1's parent, which only waits) keeps no heap: what it wrote there since
# the fork would be private memory for the sandbox's life.
middle=$(ps -o ppid= -p "$sup" | tr -d ' ')
heap=$(awk '/^[0-9a-f]+-[0-9a-f]+ / {h = ($6 == "[heap]")} h && /^Rss:/ {print $2}' \
    "/proc/$middle/smaps")
expect_eq "${heap:-0}" 0 "the middle process of an idle sandbox holds no heap (kB resident)"
# PID 1 and the host-side process wait as long, and keep what they use: the start-up's freed
# heap goes back (malloc_trim, with glibc's thread cache of freed blocks off so that none of them
# pins a page; seccomp programs of their exact size). It was about 200 kB each.
outer=$(ps -o ppid= -p "$middle" | tr -d ' ')
for who in "PID 1:$sup" "the host-side process:$outer"; do
    p=${who##*:} who=${who%:*}
    if grep -qE 'lib(asan|tsan)' "/proc/$p/maps" 2>/dev/null; then
        ok "the heap of $who # SKIP a sanitizer build has an allocator of its own"
        continue
    fi
    heap=$(awk '/^[0-9a-f]+-[0-9a-f]+ / {h = ($6 == "[heap]")} h && /^Rss:/ {print $2}' \
        "/proc/$p/smaps")
    if [ -n "$heap" ] && [ "$heap" -le 128 ]; then
        ok "$who of an idle sandbox holds at most 128 kB of heap ($heap kB)"
    else
        not_ok "$who of an idle sandbox holds at most 128 kB of heap (${heap:-no heap found} kB)"
    fi
done
"$SBX" sandbox exec --keep-background "$id" -- \
    sh -c "setsid sleep $D1 >/dev/null 2>&1 < /dev/null &"
wait_until eval '[ "$(pgrep -f "^sleep $D1$" | wc -l)" -ge 1 ]'
expect_eq "$(pgrep -f "^sleep $D1$" | wc -l)" 1 "the isolated daemon runs"
run "$SBX" sandbox rm "$id"
expect_rc 0 "rm of an isolated sandbox succeeds"
wait_until eval '[ -z "$(pgrep -f "^sleep $D1$")" ]'
expect_eq "$(pgrep -f "^sleep $D1$" | wc -l)" 0 "rm kills the isolated daemon"
id=$("$SBX" sandbox create)
sup=$(supervisor_pid "$id")
"$SBX" sandbox exec --keep-background "$id" -- \
    sh -c "setsid sleep $D2 >/dev/null 2>&1 < /dev/null &"
wait_until eval '[ "$(pgrep -f "^sleep $D2$" | wc -l)" -ge 1 ]'
kill -9 "$sup"
wait_until eval '[ -z "$(pgrep -f "^sleep $D2$")" ]'
expect_eq "$(pgrep -f "^sleep $D2$" | wc -l)" 0 "a killed isolated supervisor takes its daemon along"
wait_until eval '[ -z "$(pgrep -f "__supervise $id")" ]'
expect_eq "$(pgrep -f "__supervise $id" | wc -l)" 0 "no process of the killed sandbox is left"
run timeout 10 "$SBX" sandbox exec "$id" -- true
expect_rc 125 "exec in an isolated sandbox whose PID 1 died fails"
expect_in "$T/err" "is gone" "the error says the sandbox is gone"
run "$SBX" sandbox rm "$id"
expect_rc 0 "rm of a dead isolated sandbox succeeds"

done_testing
