# Shared TAP helpers for integration tests. Source it first thing:
#   . "$(dirname "$0")/lib.sh"
# $SBX is the binary under test, $SBX_SRCDIR the source tree. Each test gets a private
# $T scratch directory, removed on exit.
set -u
: "${SBX:?SBX must name the sbx binary}"
: "${SBX_SRCDIR:=$(cd "$(dirname "$0")/../.." && pwd)}"
T=$(mktemp -d "${TMPDIR:-/tmp}/sbx-test.XXXXXX")
# No test reads or writes the caller's own sbx state, or another test's (tests run in
# parallel): every default location is under $T (sandbox-lib.sh names the sandbox stores).
export XDG_STATE_HOME="$T/state" XDG_RUNTIME_DIR="$T/xdg-run"
mkdir -m 0700 "$XDG_RUNTIME_DIR"
tap_n=0
tap_failed=0
# rm_T: remove $T, also where a test made a directory read-only (an unprivileged runner cannot
# remove what such a directory holds; root can).
rm_T() { chmod -R u+rwx "$T" 2>/dev/null; rm -rf "$T"; }
trap rm_T EXIT

ok() { tap_n=$((tap_n + 1)); echo "ok $tap_n - $*"; }
not_ok() { tap_n=$((tap_n + 1)); tap_failed=$((tap_failed + 1)); echo "not ok $tap_n - $*"; }
diag() { printf '%s\n' "$@" | sed 's/^/#   /'; }
# A skip exits 0: meson reads a TAP plan "1..0 # SKIP" as a skip only then (any other status,
# 77 included, is an error for a TAP test).
skip_all() { echo "1..0 # SKIP $*"; exit 0; }
# take_turn DIR: wait until no other test holds DIR's turn, then hold it (tests that share an
# engine and disturb it, such as stopping a cluster member). The turn is a symlink naming this
# test's PID: it is free again once that process has ended, so nothing needs to give it back and
# no daemon the test (re)starts can keep it, as an inherited lock descriptor would.
take_turn() {
    local dir=$1
    until (
        flock 9
        p=$(readlink "$dir/turn" 2>/dev/null) && [ "$p" != "$$" ] && kill -0 "$p" 2>/dev/null && exit 1
        rm -f "$dir/turn"
        ln -s "$$" "$dir/turn"
    ) 9>>"$dir/turn.guard"; do
        sleep 1
    done
}
done_testing() {
    echo "1..$tap_n"
    [ "$tap_failed" = 0 ]
}

# wait_until CMD...: poll until CMD succeeds, for at most ${WAIT_S:-60} seconds of wall time
# (tests run in parallel on a loaded machine: the bound is a safety net, never a timing).
wait_until() {
    local end=$((SECONDS + ${WAIT_S:-60}))
    while :; do
        "$@" && return 0
        [ "$SECONDS" -lt "$end" ] || return 1
        sleep 0.05
    done
}

# env_procs TEXT: the /proc/PID/environ files (space-separated) of the processes whose
# environment holds TEXT (one of its VAR=value entries, or the start of one).
env_procs() { grep -l -F "$1" /proc/[0-9]*/environ 2>/dev/null | tr '\n' ' '; }
no_env_procs() { [ -z "$(env_procs "$1")" ]; }
# no_process_with_env TEXT DESC: no process's environment holds TEXT, waited for (bounded, as
# wait_until): what a removal leaves running on purpose ends by itself (a disk sandbox's release
# worker finishes the image and the runtime directory after rm returns). On failure the
# command lines of those left.
no_process_with_env() {
    local p procs
    if wait_until no_env_procs "$1"; then ok "$2"; else
        procs=$(env_procs "$1")
        not_ok "$2"
        diag "left: $procs" "$(for p in $procs; do p=${p#/proc/}; tr '\0' ' ' <"/proc/${p%/environ}/cmdline" 2>/dev/null; echo; done)"
    fi
}

# run CMD...: run it, keep stdout in $T/out, stderr in $T/err, status in $rc.
run() {
    "$@" >"$T/out" 2>"$T/err"
    rc=$?
}

# expect_rc N DESC: the last run exited with N.
expect_rc() {
    if [ "$rc" = "$1" ]; then ok "$2"; else
        not_ok "$2"; diag "exit status $rc, wanted $1" "stdout: $(head -c 2000 "$T/out")" "stderr: $(head -c 2000 "$T/err")"
    fi
}

# expect_in FILE PATTERN DESC: grep -q -- PATTERN FILE (fixed string)
expect_in() {
    if grep -qF -- "$2" "$1"; then ok "$3"; else
        not_ok "$3"; diag "'$2' not found in $1:" "$(head -c 2000 "$1")"
    fi
}

expect_not_in() {
    if grep -qF -- "$2" "$1"; then
        not_ok "$3"; diag "'$2' unexpectedly found in $1:" "$(head -c 2000 "$1")"
    else ok "$3"; fi
}

# expect_eq GOT WANT DESC
expect_eq() {
    if [ "$1" = "$2" ]; then ok "$3"; else
        not_ok "$3"; diag "got:  $1" "want: $2"
    fi
}

# on_tty OUT CMD...: run CMD with stdin, stdout and stderr on a pseudo-terminal; its bytes to OUT.
# With ON_TTY_STDOUT=FILE, stdout goes to FILE instead (a terminal user redirecting the answer).
on_tty() {
    python3 - "$@" <<'PY'
import os, pty, subprocess, sys
out = sys.argv[1]
m, s = pty.openpty()
so = open(os.environ["ON_TTY_STDOUT"], "wb") if os.environ.get("ON_TTY_STDOUT") else s
p = subprocess.Popen(sys.argv[2:], stdin=s, stdout=so, stderr=s, close_fds=True)
os.close(s)
data = b""
while True:
    try:
        b = os.read(m, 65536)
    except OSError:
        break
    if not b:
        break
    data += b
p.wait()
open(out, "wb").write(data)
sys.exit(p.returncode)
PY
}
