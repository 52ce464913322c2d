#!/usr/bin/env bash
# Escape suite (isolation-peers.md §3): each test attacks from inside a real sandbox and
# asserts the refusal. Canary secrets are planted on the host first; the suite fails if any
# sandbox output ever contains the canary token. Runs as whoever runs it (root or not); meson
# runs it a second time as an unprivileged user when it is root.
#
# Driver: the product itself, one fresh sandbox per attack: `sbx sandbox create` (isolated by
# default) + `sbx sandbox exec` + `sbx sandbox rm`. The file-size limit, which has no create
# option, and the descendant-kill check use the hidden `sbx __isolate-run`.
. "$(dirname "$0")/../integration/lib.sh"
# Root of the initial user namespace runs sandboxes in the privileged mode (dedicated host
# uids, cgroups); root of a container's user namespace is an unprivileged runner.
privileged() { [ "$(id -u)" = 0 ] && [ "$(awk 'NR == 1 {print $1, $2, $3}' /proc/self/uid_map)" = "0 0 4294967295" ]; }

PROBE_DIR=$(cd "$(dirname "$0")" && pwd)
WS=$T/ws
mkdir -p "$WS"
chmod 755 "$T" "$WS"
TOKEN=canary-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
ALL=$T/all-output
: >"$ALL"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    rm -rf "$T"
}
trap cleanup EXIT

# Only a kernel without the namespaces skips, with the reason.
export XDG_RUNTIME_DIR=$T/run SBX_WORKSPACES=$T/wsbase
mkdir -m 0700 "$XDG_RUNTIME_DIR"
if pre=$("$SBX" sandbox create --workspace "$WS" --workspace-existing keep 2>"$T/pre"); then
    "$SBX" sandbox rm "$pre" >/dev/null 2>&1
elif grep -q "cannot create a .*namespace" "$T/pre"; then
    skip_all "$(grep -m1 "namespace" "$T/pre")"
fi

# ---- canaries on the host ------------------------------------------------------------
export HOME=$T/home
mkdir -p "$HOME/.ssh" "$HOME/.aws"
echo "$TOKEN" >"$HOME/.ssh/id_canary"
echo "aws_secret_access_key = $TOKEN" >"$HOME/.aws/credentials"
echo "$TOKEN" >"$T/host-secret"
export SBX_CANARY_SECRET=$TOKEN OPENAI_API_KEY=$TOKEN
# The canary listeners: a TCP port the kernel picks (a fixed guess can be taken by another test
# running beside this one), a socket file and an abstract socket named after that port.
PORT=""
if command -v python3 >/dev/null; then
    python3 - "$T/canary.port" "$TOKEN" "$T/canary.sock" <<'PY' &
import os, socket, sys, threading
portfile, token, path = sys.argv[1], sys.argv[2].encode(), sys.argv[3]
def serve(s):
    while True:
        c, _ = s.accept()
        c.sendall(token + b"\n")
        c.close()
tcp = socket.socket()
tcp.bind(("127.0.0.1", 0)); tcp.listen(8)
port = tcp.getsockname()[1]
uds = socket.socket(socket.AF_UNIX); uds.bind(path); uds.listen(8)
abst = socket.socket(socket.AF_UNIX); abst.bind("\0sbx-canary-" + str(port)); abst.listen(8)
for s in (tcp, uds, abst):
    threading.Thread(target=serve, args=(s,), daemon=True).start()
with open(portfile + ".tmp", "w") as f:
    f.write(str(port))
os.rename(portfile + ".tmp", portfile)
threading.Event().wait()
PY
    pids+=($!)
fi
# Positive control: the canary services answer on the host, so a refusal inside means something.
canary_up() {
    [ -n "$PORT" ] || PORT=$(cat "$T/canary.port" 2>/dev/null) || return 1
    python3 - "$PORT" "$T/canary.sock" <<'PY' 2>/dev/null
import socket, sys
port, path = int(sys.argv[1]), sys.argv[2]
for fam, addr in ((socket.AF_INET, ("127.0.0.1", port)), (socket.AF_UNIX, path),
                  (socket.AF_UNIX, "\0sbx-canary-" + str(port))):
    s = socket.socket(fam); s.settimeout(2); s.connect(addr)
    assert s.recv(100).startswith(b"canary-")
PY
}
for _ in $(seq 600); do canary_up && break; sleep 0.05; done
[ -n "$PORT" ] || PORT=1 # no listener: check 1 says so, the probes below still run
if canary_up; then ok "the host canary listeners answer on the host"; else not_ok "the host canary listeners answer on the host"; fi

# inside SCRIPT [extra `sandbox create` options...]: run sh -c SCRIPT in a fresh sandbox.
# stdout+stderr (and a create error) go to $T/out (and to the canary log), status to $rc.
inside() {
    local script=$1 id
    shift
    if ! id=$("$SBX" sandbox create --workspace "$WS" --workspace-existing keep --ro "$PROBE_DIR:/probe" "$@" 2>"$T/out"); then
        rc=1
        cat "$T/out" >>"$ALL"
        return
    fi
    "$SBX" sandbox exec "$id" -- /bin/sh -c "$script" >"$T/out" 2>&1
    rc=$?
    "$SBX" sandbox rm "$id" >/dev/null 2>&1
    cat "$T/out" >>"$ALL"
}
# refused DESC SCRIPT [opts]: SCRIPT is a check that exits 0 when the attack was refused.
refused() {
    local desc=$1 script=$2
    shift 2
    inside "$script" "$@"
    if [ "$rc" = 0 ]; then ok "$desc"; else
        not_ok "$desc"; diag "exit status $rc" "$(head -c 1500 "$T/out")"
    fi
}
# probe DESC NAME=ERRNO...: run probe.py in the sandbox, expect each errno.
probe() {
    local desc=$1 names=() want
    shift
    for want in "$@"; do names+=("${want%%=*}"); done
    inside "python3 /probe/probe.py ${names[*]}"
    for want in "$@"; do
        if grep -qx -- "$want" "$T/out"; then ok "$desc: $want"; else
            not_ok "$desc: $want"; diag "$(grep "^${want%%=*}=" "$T/out" || head -c 500 "$T/out")"
        fi
    done
}

EPERM=1 ENOSYS=38 EAFNOSUPPORT=97

# ---- A. filesystem and mounts ----------------------------------------------------------
refused "1 write outside the workspace" \
    'for p in /etc/x /usr/x /x /opt/x /var/x /bin/x /lib/x; do ( echo 1 > $p ) 2>/dev/null && exit 1; done; exit 0'
refused "2 host secrets are not mounted" \
    "! cat '$HOME/.ssh/id_canary' '$HOME/.aws/credentials' '$T/host-secret' /etc/shadow 2>/dev/null \
     && ! test -e /root && ! test -e /home && \
     ! grep -rqs '$TOKEN' /etc /tmp /run /var /dev/shm /workspace /proc/1/environ /proc/self/environ"
refused "3 every mount except the writable ones is ro,nosuid,nodev" \
    "awk '{print \$5, \$6}' /proc/self/mountinfo | grep -v -e '^/workspace ' -e '^/tmp ' \
       -e '^/dev/shm ' -e '^/dev/pts ' -e '^/proc ' -e '^/run ' -e '^/dev/null ' -e '^/dev/zero ' \
       -e '^/dev/full ' -e '^/dev/random ' -e '^/dev/urandom ' -e '^/dev/tty ' | grep -v ' ro,' \
       | grep . && exit 1; grep ' /workspace ' /proc/self/mountinfo | grep -q 'nosuid,nodev'"
refused "4 remount and umount are refused" \
    '! mount -o remount,rw /usr 2>/dev/null && ! umount /usr 2>/dev/null && ! umount -l /workspace 2>/dev/null && touch /workspace/still-mounted'
probe "4/5 mount API" mount=$EPERM umount=$EPERM pivot_root=$EPERM open_tree=$ENOSYS \
    fsopen=$ENOSYS mount_setattr=$ENOSYS
refused "6 hard links out of the workspace fail" \
    '! ln /etc/passwd /workspace/p 2>/dev/null && ! ln /usr/bin/env /workspace/e 2>/dev/null'
refused "7 moving files out fails" \
    'touch f && ! mv f /etc/ 2>/dev/null && ! mv f /usr/ 2>/dev/null && test -e f'
refused "10 no old root or build leftovers" \
    '! test -e /oldroot && ! test -e /newroot && test "$(readlink /proc/self/root)" = /'
probe "11/12 chroot and file handles" chroot=$EPERM open_by_handle_at=$EPERM \
    name_to_handle_at=$EPERM
refused "13 the init's executable cannot be written or read, nor its memory and environment" \
    '! { echo x >> /proc/1/exe; } 2>/dev/null && ! cat /proc/1/exe >/dev/null 2>&1 &&
     ! cat /proc/1/environ >/dev/null 2>&1 && ! head -c1 /proc/1/mem >/dev/null 2>&1'

# ---- B. /proc, /sys, /dev, privileges --------------------------------------------------
refused "14 kernel sysctls and sysrq are not writable" \
    '! { echo "|/workspace/x" > /proc/sys/kernel/core_pattern; } 2>/dev/null &&
     ! { echo b > /proc/sysrq-trigger; } 2>/dev/null && ! { echo 3 > /proc/sys/vm/drop_caches; } 2>/dev/null'
refused "15 no /sys, no cgroupfs" \
    '! test -e /sys && ! mount -t cgroup -o memory x /tmp 2>/dev/null'
refused "16 kernel information is hidden" \
    '! dmesg >/dev/null 2>&1 && test ! -s /proc/keys 2>/dev/null && test ! -s /proc/timer_list &&
     ! head -1 /proc/kallsyms | grep -qv "^0000000000000000"'
refused "17 only the minimal device nodes" \
    'test "$(ls /dev | tr "\n" " ")" = "fd full null ptmx pts random shm stderr stdin stdout tty urandom zero " &&
     ! mknod /workspace/m c 1 1 2>/dev/null && ! cat /dev/kvm /dev/vsock /dev/kmsg /dev/loop-control 2>/dev/null'
refused "18 setuid files do not elevate" \
    'cp /usr/bin/id /workspace/id && ! chmod u+s /workspace/id 2>/dev/null && test "$(/workspace/id -u)" = "$(id -u)" &&
     ! sudo -n id 2>/dev/null && ! su -c id 2>/dev/null </dev/null && grep -q "^NoNewPrivs:.1" /proc/self/status'
refused "19 no capabilities" \
    'for s in CapInh CapPrm CapEff CapBnd CapAmb; do grep -q "^$s:.0000000000000000" /proc/self/status || exit 1; done'
# Root: an id of the sandbox's own host range (1879048192 + 65536 * slot + 1000, see isolate.h).
if privileged; then
    refused "20 identity: the sandbox user is never host root" \
        "test \"\$(id -un)\" = sandbox && awk '\$1 == 1000 {h = \$2} END {exit !(h >= 1879048192 && h < 2147352576 && (h - 1879048192) % 65536 == 1000)}' /proc/self/uid_map"
else
    refused "20 identity: the sandbox user is never host root" \
        "test \"\$(id -un)\" = sandbox && test \"\$(awk '\$1 == 1000 {print \$2}' /proc/self/uid_map)\" = $(id -u)"
fi
if ! privileged; then
    refused "20 unprivileged: setgroups is denied" 'test "$(cat /proc/self/setgroups)" = deny'
fi

# ---- C. processes, signals, namespaces -------------------------------------------------
refused "21 host processes are invisible" \
    "test \$(ls -d /proc/[0-9]* | wc -l) -lt 8 && ! kill -0 $$ 2>/dev/null"
inside 'kill -9 -1; exit 0'
if [ "$rc" = 0 ] && kill -0 "${pids[0]:-$$}" 2>/dev/null; then
    ok "22 kill -9 -1 inside leaves the sandbox init and the host alone"
else not_ok "22 kill -9 -1 inside leaves the sandbox init and the host alone"; diag "rc $rc"; fi
probe "23 ptrace and memory peeking" ptrace_attach_1=$EPERM process_vm_readv=$EPERM \
    pidfd_getfd=$EPERM
probe "24 no new namespaces" unshare_user=$EPERM unshare_net=$EPERM unshare_mnt=$EPERM \
    setns=$EPERM clone3=$ENOSYS
refused "24 unshare(1) fails" '! unshare -Ur id 2>/dev/null && ! unshare -n true 2>/dev/null'
refused "25 cgroup paths are hidden" \
    '! test -e /sys/fs/cgroup && test "$(cut -d: -f3 /proc/self/cgroup | sort -u)" = /'
MARK=$((31000 + $$ % 1000))
inside "setsid sleep $MARK.5 </dev/null >/dev/null 2>&1 & (sleep $MARK.25 &) ; exit 0"
sleep 0.2
if pgrep -f "sleep $MARK" >/dev/null; then not_ok "26 background processes die with the sandbox"; pkill -f "sleep $MARK"; else
    ok "26 background processes die with the sandbox"; fi

# The supervisor is killed outright: PR_SET_PDEATHSIG takes the sandbox's PID 1 down, and the
# pid namespace every process in it.
MARK2=$((32000 + $$ % 1000))
"$SBX" __isolate-run --workspace "$WS" -- /bin/sh -c "sleep $MARK2.5 & sleep $MARK2.25" \
    >/dev/null 2>&1 &
sbxpid=$!
for _ in $(seq 100); do [ "$(pgrep -f "^sleep $MARK2" | wc -l)" = 2 ] && break; sleep 0.05; done
started=$(pgrep -f "^sleep $MARK2" | wc -l)
kill -9 "$sbxpid"
wait "$sbxpid" 2>/dev/null
for _ in $(seq 100); do pgrep -f "^sleep $MARK2" >/dev/null || break; sleep 0.05; done
if [ "$started" = 2 ] && ! pgrep -f "^sleep $MARK2" >/dev/null; then
    ok "26 SIGKILL of the supervisor ends every process of the sandbox"
else
    not_ok "26 SIGKILL of the supervisor ends every process of the sandbox"
    diag "started $started; left: $(pgrep -af "^sleep $MARK2")"
    pkill -f "^sleep $MARK2"
fi

# ---- D. kernel attack surface (seccomp) ------------------------------------------------
probe "27 keyring" keyctl=$EPERM add_key=$EPERM request_key=$EPERM
probe "28 io_uring" io_uring_setup=$ENOSYS
probe "29 bpf, perf, userfaultfd" bpf=$EPERM perf_event_open=$EPERM userfaultfd=$EPERM
probe "30 host-wide operations" init_module=$EPERM finit_module=$EPERM kexec_load=$EPERM \
    reboot=$EPERM settimeofday=$EPERM clock_settime=$EPERM swapon=$EPERM acct=$EPERM \
    iopl=$EPERM ioperm=$EPERM modify_ldt=$EPERM syslog=$EPERM
# The supervisor's pidfd (also through a pid with high bits the kernel drops) and a host-wide
# sync (issue 26); a command's own pidfd stays.
probe "30 sync and a pidfd of PID 1" sync=$EPERM pidfd_open_1=$EPERM pidfd_open_1_high=$EPERM \
    pidfd_open_self=0
inside 'python3 /probe/probe.py x32'
expect_eq "$rc" 159 "31 an x32 system call kills the process (SIGSYS)"
probe "32 socket families" af_vsock=$EAFNOSUPPORT af_packet=$EAFNOSUPPORT af_alg=$EAFNOSUPPORT \
    af_key=$EAFNOSUPPORT af_xdp=$EAFNOSUPPORT af_bluetooth=$EAFNOSUPPORT \
    netlink_audit=$EAFNOSUPPORT netlink_route=0 af_inet=0 af_inet6=0 af_unix=0
probe "33 personality" personality_exec=$ENOSYS

# ---- E. TTY ----------------------------------------------------------------------------
probe "34/35 terminal injection" tiocsti=$EPERM tiocsti_high=$EPERM tioclinux=$EPERM \
    tiocsti_pty=$EPERM tiocsti_pty_high=$EPERM
refused "36 own devpts instance, no console" \
    'test "$(ls /dev/pts)" = ptmx && ! test -e /dev/console'

# ---- F. network (mode none) ------------------------------------------------------------
refused "37 network is off" \
    'test "$(tail -n +3 /proc/net/dev | wc -l)" = 1 && ! getent hosts example.com >/dev/null 2>&1 &&
     python3 -c "
import socket, sys
for addr in [(\"1.1.1.1\", 53), (\"1.1.1.1\", 443)]:
    try:
        socket.create_connection(addr, timeout=2)
        sys.exit(1)
    except OSError:
        pass
"'
refused "38 host loopback and host sockets are unreachable" \
    "python3 -c '
import socket, sys
def tries(fam, addr):
    try:
        s = socket.socket(fam); s.settimeout(2); s.connect(addr); print(s.recv(100)); return True
    except OSError:
        return False
sys.exit(1 if tries(socket.AF_INET, (\"127.0.0.1\", $PORT)) or tries(socket.AF_UNIX, \"$T/canary.sock\")
         or tries(socket.AF_UNIX, \"\\0sbx-canary-$PORT\") else 0)
' && ! test -e /run/docker.sock && ! test -e /run/dbus/system_bus_socket"
probe "39 hypervisor sockets" af_vsock=$EAFNOSUPPORT

# ---- G. resources ----------------------------------------------------------------------
inside 'true' --memory 64M
if privileged || [ "$rc" = 0 ]; then
    inside 'i=0; while [ $i -lt 100 ]; do sleep 1 & i=$((i+1)); done; wait; exit 0' \
        --pids 32
    expect_in "$T/out" "Cannot fork" "44 fork bomb hits the pids limit"
    inside 'python3 -c "
a = []
while True: a.append(bytearray(16 << 20))"' --memory 64M
    expect_eq "$rc" 137 "45 memory bomb is killed inside its cgroup"
    expect_in "$T/out" "out of memory" "45 the OOM kill is reported as such"
    expect_in "$T/out" "64 MiB" "45 the report names the limit"
else
    expect_rc 1 "44/45 without cgroup access an explicit memory limit fails clearly"
    expect_in "$T/out" "cgroup v1 memory controller" "44/45 the error names the cgroup controller"
fi
refused "47 hard limits cannot be raised" '! ulimit -Hn 1048576 2>/dev/null'
"$SBX" __isolate-run --workspace "$WS" --fsize 1M -- /bin/sh -c 'head -c 2000000 /dev/zero > big' \
    >"$T/out" 2>&1
rc=$?
cat "$T/out" >>"$ALL"
if [ "$rc" != 0 ] && [ "$(stat -c %s "$WS/big" 2>/dev/null || echo 0)" -le 1048576 ]; then
    ok "47 the file size limit holds"; else not_ok "47 the file size limit holds"; diag "rc $rc"; fi

# ---- H. secrets, fds ------------------------------------------------------------------
refused "50 no harness variables, no inherited fds" \
    "! env | grep -q -e '$TOKEN' -e OPENAI_API_KEY -e SBX_CANARY && \
     test \"\$(ls /proc/self/fd | tr '\n' ' ')\" = '0 1 2 3 ' && test \"\$(readlink /proc/self/cwd)\" = /workspace && \
     ! grep -qs '$TOKEN' /proc/1/environ"

# ---- the canary never leaked -----------------------------------------------------------
expect_not_in "$ALL" "$TOKEN" "no sandbox output contains the canary token"
done_testing
