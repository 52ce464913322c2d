#!/usr/bin/env bash
# Host-side setuid (issue 9, item 1): nothing a sandbox writes may become a setuid, setgid or
# file-capability program on the host. The workspace belongs to its owner (root when root runs
# sbx), so every route to such a file is attacked from inside, then checked from the HOST: no
# file of the workspace has S_ISUID/S_ISGID or security.capability, and another host user who
# runs what the sandbox made executable keeps their own euid. The harness's own ways into a
# workspace (cp upload and download, manifest local_dir/local_file) are covered too. Runs as
# root and (meson) again as the unprivileged user.
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/../integration/sandbox-lib.sh"
command -v python3 >/dev/null || skip_all "python3 is needed for the attacks"

# Other users must reach the workspaces for the host-side exec check to mean anything.
chmod 755 "$T"
mkdir -m 755 "$SBX_WORKSPACES" "$T/userws"
if ! pre=$("$SBX" sandbox create 2>"$T/pre"); then
    grep -q "cannot create a .*namespace" "$T/pre" && skip_all "$(grep -m1 namespace "$T/pre")"
    not_ok "a sandbox can be created"; diag "$(cat "$T/pre")"; done_testing; exit
fi
"$SBX" sandbox rm "$pre" >/dev/null 2>&1

OTHER=
if [ "$(id -u)" = 0 ] && id "${SBX_TEST_USER:-sbx-ci}" >/dev/null 2>&1 && command -v setpriv >/dev/null; then
    OTHER=${SBX_TEST_USER:-sbx-ci}
fi
as_other() { setpriv --reuid="$OTHER" --regid="$(id -g "$OTHER")" --clear-groups "$@"; }

SUID_BIN=
for b in /usr/bin/su /usr/bin/passwd /usr/bin/mount /bin/su; do
    [ -u "$b" ] && { SUID_BIN=$b; break; }
done

# The attacks, run as the sandbox user in /workspace. Each route prints "NAME refused" or
# "NAME ALLOWED"; a route that is allowed but leaves no setuid file is still caught on the host.
cat >"$T/attack.sh" <<'SH'
cd /workspace || exit 1
try() { n=$1; shift; if "$@" >/dev/null 2>&1; then echo "$n ALLOWED"; else echo "$n refused"; fi; }
cp /usr/bin/id idprog && chmod 755 idprog
try chmod-4755 chmod 4755 idprog
try chmod-2755 chmod 2755 idprog
try chmod-u+s chmod u+s idprog
try chmod-g+s chmod g+s idprog
try install-4755 install -m 4755 /usr/bin/id inst
mkdir sgid-dir
try chmod-dir-g+s chmod g+s sgid-dir
if [ -n "$SUID_BIN" ]; then
    cp -p "$SUID_BIN" cp-p-copy 2>/dev/null
    try hardlink ln "$SUID_BIN" hardlink
fi
python3 - <<'PY'
import ctypes, os, stat, tarfile, io
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def report(name, fn):
    try:
        fn()
        print(name, "ALLOWED")
    except OSError as e:
        print(name, "refused", e.errno)
def raw(name, nr, *args):
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    print(name, "ALLOWED" if r >= 0 else "refused %d" % ctypes.get_errno())
report("py-open-creat", lambda: os.close(os.open("py-open", os.O_CREAT | os.O_WRONLY, 0o4755)))
report("py-open-sgid", lambda: os.close(os.open("py-open2", os.O_CREAT | os.O_WRONLY, 0o2755)))
report("py-chmod", lambda: os.chmod("idprog", 0o4755))
report("py-fchmod", lambda: os.fchmod(os.open("idprog", os.O_RDONLY), 0o6755))
report("py-mknod", lambda: os.mknod("py-mknod", stat.S_IFREG | 0o4755))
report("py-tmpfile", lambda: os.close(os.open(".", os.O_TMPFILE | os.O_WRONLY, 0o4755)))
# security.capability v2 with cap_setuid permitted and effective
cap = (0x02000001).to_bytes(4, "little") + (1 << 7).to_bytes(4, "little") + bytes(12)
report("py-setxattr-cap", lambda: os.setxattr("idprog", "security.capability", cap))
# Raw calls: the mode in the high bits must not hide S_ISUID; openat2 carries its mode in
# memory (open_how), so it must not exist here; fchmodat2 is checked or absent.
AT_FDCWD = -100
raw("raw-openat-highbits", 257, AT_FDCWD, b"raw-open", os.O_CREAT | os.O_WRONLY, (1 << 32) | 0o4755)
raw("raw-creat", 85, b"raw-creat", 0o4755)
raw("raw-fchmodat", 268, AT_FDCWD, b"idprog", 0o4755)
raw("raw-fchmodat2", 452, AT_FDCWD, b"idprog", 0o4755, 0)
how = (ctypes.c_uint64 * 3)(os.O_CREAT | os.O_WRONLY, 0o4755, 0)
raw("raw-openat2", 437, AT_FDCWD, b"raw-openat2", ctypes.byref(how), 24)
raw("raw-mknodat", 259, AT_FDCWD, b"raw-mknod", stat.S_IFREG | 0o6755, 0)
# An archive with a setuid member, extracted with permissions kept.
buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode="w") as t:
    data = open("/usr/bin/id", "rb").read()
    ti = tarfile.TarInfo("tar-suid")
    ti.size, ti.mode = len(data), 0o4755
    t.addfile(ti, io.BytesIO(data))
open("suid.tar", "wb").write(buf.getvalue())
PY
try tar-p tar -xpf suid.tar
rm -f suid.tar
exit 0
SH

# check_ws DESC DIR: the host-side guarantees over DIR.
check_ws() {
    local desc=$1 dir=$2 found
    found=$(find "$dir" -perm /6000 2>&1)
    if [ -z "$found" ]; then ok "$desc: no setuid or setgid file on the host"; else
        not_ok "$desc: no setuid or setgid file on the host"; diag "$found"; fi
    found=$(python3 - "$dir" <<'PY'
import os, sys
for root, dirs, files in os.walk(sys.argv[1]):
    for n in dirs + files:
        p = os.path.join(root, n)
        try:
            if "security.capability" in os.listxattr(p, follow_symlinks=False):
                print(p)
        except OSError:
            pass
PY
)
    if [ -z "$found" ]; then ok "$desc: no file capabilities on the host"; else
        not_ok "$desc: no file capabilities on the host"; diag "$found"; fi
    # Every executable the sandbox made, run by another host user, keeps that user's euid.
    if [ -z "$OTHER" ]; then
        ok "$desc: another user runs the sandbox's programs # SKIP $( [ "$(id -u)" = 0 ] && echo "no user '${SBX_TEST_USER:-sbx-ci}' or no setpriv" || echo "needs root to act as a second user")"
        return
    fi
    local want bad= f out
    want=$(id -u "$OTHER")
    as_other test -x "$dir/idprog" || { not_ok "$desc: '$OTHER' can execute idprog"; return; }
    for f in idprog inst cp-p-copy tar-suid py-open; do
        [ -f "$dir/$f" ] && as_other test -x "$dir/$f" || continue
        out=$(as_other "$dir/$f" -u 2>/dev/null) || continue
        [ "$out" = "$want" ] || bad="$bad $f:euid=$out"
    done
    if [ -z "$bad" ]; then ok "$desc: programs the sandbox made keep the euid of '$OTHER' ($want)"; else
        not_ok "$desc: programs the sandbox made keep the euid of '$OTHER' ($want)"; diag "$bad"; fi
}

# attack DESC [create options...]: create, attack, check the routes' refusals, check the host.
attack() {
    local desc=$1 id ws
    shift
    if ! id=$("$SBX" sandbox create "$@" 2>"$T/err"); then
        not_ok "$desc: create"; diag "$(cat "$T/err")"; return
    fi
    ws=$("$SBX" sandbox ps --json | python3 -c 'import json,sys; print([s["workspace"] for s in json.load(sys.stdin) if s["id"] == sys.argv[1]][0])' "$id")
    "$SBX" sandbox exec "$id" -- env SUID_BIN="$SUID_BIN" sh -c "$(cat "$T/attack.sh")" >"$T/routes" 2>&1
    local allowed
    allowed=$(grep ' ALLOWED' "$T/routes" | grep -v -e '^raw-fchmodat2 ' || true)
    if [ -z "$allowed" ] && grep -q '^tar-p ' "$T/routes"; then ok "$desc: every setuid route is refused inside"; else
        not_ok "$desc: every setuid route is refused inside"; diag "$(cat "$T/routes")"; fi
    expect_in "$T/routes" "raw-openat2 refused 38" "$desc: openat2 is absent (ENOSYS), so libc falls back to openat"
    if grep -q '^raw-fchmodat2 ALLOWED' "$T/routes"; then not_ok "$desc: fchmodat2 with S_ISUID is refused"; else ok "$desc: fchmodat2 with S_ISUID is refused"; fi
    if [ -n "$SUID_BIN" ]; then expect_in "$T/routes" "hardlink refused" "$desc: a hard link of '$SUID_BIN' into the workspace fails"; fi

    # The harness's routes: cp upload of a setuid host file, download over a setuid host file.
    cp /usr/bin/id "$T/host-suid" && chmod 4755 "$T/host-suid"
    run "$SBX" sandbox cp "$T/host-suid" "$id:/workspace/uploaded"
    expect_rc 0 "$desc: cp uploads a setuid host file"
    cp /usr/bin/id "$T/download" && chmod 4755 "$T/download"
    run "$SBX" sandbox cp "$id:/workspace/idprog" "$T/download"
    if [ "$rc" = 0 ] && [ -z "$(find "$T/download" -perm /6000)" ]; then ok "$desc: cp download over a setuid host file clears the bits"; else
        not_ok "$desc: cp download over a setuid host file clears the bits"; diag "rc $rc $(ls -l "$T/download") $(cat "$T/err")"; fi
    rm -f "$T/download"
    check_ws "$desc" "$ws"
    "$SBX" sandbox rm "$id" >/dev/null 2>&1
}

attack "sandbox create"
attack "create --workspace DIR" --workspace "$T/userws"

# Manifest: a local_dir holding a setuid and a setgid file, a local_file whose source is setuid,
# and an explicit setuid mode (refused by the manifest parser).
mkdir -p "$T/m/src/tree"
cp /usr/bin/id "$T/m/src/tree/suid" && chmod 4755 "$T/m/src/tree/suid"
cp /usr/bin/id "$T/m/src/tree/sgid" && chmod 2755 "$T/m/src/tree/sgid"
mkdir "$T/m/src/tree/sgid-dir" && chmod 2755 "$T/m/src/tree/sgid-dir"
cp /usr/bin/id "$T/m/src/one" && chmod 4755 "$T/m/src/one"
cat >"$T/m/manifest.yaml" <<'YAML'
entries:
  tree:
    type: local_dir
    src: src/tree
  one:
    type: local_file
    src: src/one
YAML
if id=$("$SBX" sandbox create --manifest "$T/m/manifest.yaml" 2>"$T/err"); then
    ws=$("$SBX" sandbox ps --json | python3 -c 'import json,sys; print([s["workspace"] for s in json.load(sys.stdin) if s["id"] == sys.argv[1]][0])' "$id")
    if [ -f "$ws/tree/suid" ] && [ -f "$ws/one" ] && [ -z "$(find "$ws" -perm /6000)" ]; then
        ok "manifest local_dir and local_file never materialise setuid or setgid"
    else
        not_ok "manifest local_dir and local_file never materialise setuid or setgid"; diag "$(ls -lR "$ws" 2>&1 | head -20)"
    fi
    "$SBX" sandbox rm "$id" >/dev/null 2>&1
else
    not_ok "manifest local_dir and local_file never materialise setuid or setgid"; diag "$(cat "$T/err")"
fi
printf 'entries:\n  x:\n    type: local_file\n    src: src/one\n    mode: "4755"\n' >"$T/m/mode.yaml"
run "$SBX" sandbox create --manifest "$T/m/mode.yaml"
if [ "$rc" != 0 ] && grep -q "not a permission mode" "$T/err"; then ok "a manifest mode 4755 is refused"; else
    not_ok "a manifest mode 4755 is refused"; diag "rc $rc $(cat "$T/out" "$T/err")"
    [ "$rc" = 0 ] && "$SBX" sandbox rm "$(cat "$T/out")" >/dev/null 2>&1
fi

done_testing
