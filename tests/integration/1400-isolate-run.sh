#!/usr/bin/env bash
# The hidden test driver `sbx __isolate-run`: its options, its errors, and that it runs a
# command isolated (the escape suite in tests/security/ attacks it in depth).
. "$(dirname "$0")/lib.sh"
# Root of the initial user namespace runs sandboxes in the privileged mode (dedicated host
# uids, cgroups); root of a container's user namespace is an unprivileged runner.
privileged() { [ "$(id -u)" = 0 ] && [ "$(awk 'NR == 1 {print $1, $2, $3}' /proc/self/uid_map)" = "0 0 4294967295" ]; }

WS=$T/ws
mkdir -p "$WS"
chmod 755 "$T" "$WS"

# Only a kernel without the namespaces skips, with the reason.
if ! "$SBX" __isolate-run --workspace "$WS" -- true >"$T/pre" 2>&1; then
    if grep -q "cannot create a .*namespace" "$T/pre"; then skip_all "$(grep -m1 "namespace" "$T/pre")"; fi
fi

run "$SBX" help
expect_not_in "$T/out" "__isolate-run" "help does not list the hidden verb"

run "$SBX" __isolate-run -- true
expect_rc 2 "a missing workspace is a usage error"
expect_in "$T/err" "missing --workspace" "the missing workspace is named"

run "$SBX" __isolate-run --workspace "$WS"
expect_rc 2 "a missing command is a usage error"
expect_in "$T/err" "missing command after '--'" "the missing command is named"

run "$SBX" __isolate-run --workspace "$WS" --net wide -- true
expect_rc 2 "an unknown network mode is a usage error"
expect_in "$T/err" "unknown network mode 'wide'" "the bad mode is named"

run "$SBX" __isolate-run --workspace "$WS" --memory lots -- true
expect_rc 2 "a bad size is a usage error"
expect_in "$T/err" "'--memory' needs a size or count, not 'lots'" "the bad size is named"

run "$SBX" __isolate-run --workspace "$WS" --grant / -- true
expect_rc 1 "granting / fails"
expect_in "$T/err" "sbx: grant source '/' is not allowed" "the refused grant is named"

run "$SBX" __isolate-run --workspace "$WS" --env 1X=y -- true
expect_rc 1 "a bad environment name fails"
expect_in "$T/err" "environment name '1X'" "the bad name is named"

run "$SBX" __isolate-run --workspace relative/ws -- true
expect_rc 1 "a relative workspace fails"
expect_in "$T/err" "must be an absolute path" "the rule is named"

run "$SBX" __isolate-run --workspace "$WS" -- /bin/sh -c 'echo out; echo err >&2; exit 3'
expect_rc 3 "the command's exit status is passed through"
expect_in "$T/out" "out" "stdout is the command's"
expect_in "$T/err" "err" "stderr is the command's"

run "$SBX" __isolate-run --workspace "$WS" -- no-such-command-xyz
expect_rc 127 "a missing command exits 127"
expect_in "$T/err" "cannot run 'no-such-command-xyz'" "the missing command is named"

run "$SBX" __isolate-run --workspace "$WS" --env GREETING=hi --root /srv/project \
    --hostname box -- /bin/sh -c 'echo "$GREETING $(pwd) $(cat /proc/sys/kernel/hostname)" > out'
expect_rc 0 "options are applied"
expect_eq "$(cat "$WS/out")" "hi /srv/project box" "environment, root and hostname are as asked"

run "$SBX" __isolate-run --workspace "$WS" --users alice,bob --group dev:alice,bob --user bob \
    -- /bin/sh -c 'id -un; id -u; id -Gn'
if privileged; then
    expect_rc 0 "as root, another manifest user can run commands"
    expect_eq "$(head -2 "$T/out" | tr '\n' ' ')" "bob 1001 " "the command runs as bob"
    expect_in "$T/out" "dev" "bob is in group dev"
else
    expect_rc 1 "unprivileged, only the default user can run commands"
    expect_in "$T/err" "maps only its default user 'alice'" "the reason is given"
fi

run "$SBX" __isolate-run --workspace "$WS" --users alice,bob -- /bin/sh -c 'id -un'
expect_rc 0 "the first declared user is the default"
expect_eq "$(cat "$T/out")" "alice" "the default user is alice"

# Everyday tools work under the seccomp allowlist: a C compiler, git, python with processes,
# threads, sockets and temp files, make, tar.
W2=$T/ws2
mkdir -p "$W2"
chmod 755 "$W2"
cat >"$W2/work.sh" <<'SH'
set -e
printf '#include <stdio.h>\nint main(void){puts("hello");return 0;}\n' > h.c
cc -O2 -o h h.c && ./h
git init -q r && cd r && git config user.email a@example.com && git config user.name a
echo x > f && git add f && git commit -qm one && git log --oneline | wc -l && cd ..
python3 -c '
import multiprocessing, threading, subprocess, tempfile, socket
def sq(x): return x * x
with multiprocessing.Pool(2) as p: print(sum(p.map(sq, range(10))))
t = threading.Thread(target=lambda: None); t.start(); t.join()
print(subprocess.run(["echo", "sub"], capture_output=True, text=True).stdout.strip())
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1); print("listen ok")
with tempfile.NamedTemporaryFile() as f: print("tmp ok")
'
make --version >/dev/null && tar czf t.tgz h.c && echo all-ok
SH
if command -v cc >/dev/null && command -v git >/dev/null && command -v python3 >/dev/null; then
    run "$SBX" __isolate-run --workspace "$W2" -- /bin/sh work.sh
    expect_rc 0 "compiler, git, python, make and tar run in the sandbox"
    expect_eq "$(tr '\n' ' ' <"$T/out")" "hello 1 285 sub listen ok tmp ok all-ok " "and do their work"
else
    ok "# SKIP cc, git or python3 is not installed"
fi

done_testing
