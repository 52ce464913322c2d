#!/usr/bin/env python3
"""The LXD test image as one unified image tarball (metadata.yaml + rootfs/), written straight
from Debian's busybox-static without staging a tree on disk (some 400 symlinks there cost about
a second on this machine). The rootfs: busybox and every applet at its usual path, /sbin/init as
busybox init with a one-line inittab, /tmp, /etc/passwd and /etc/group with root, a non-root
user (1000) and nobody. With --python also this machine's python3 with the shared libraries it
and its extension modules need and its standard library without caches, tests and GUI parts
(about 40 MB; the provider's conformance suite serves HTTP with it and the coding example runs
unittest), as the Docker tests' image has.

usage: mkimage.py [--python] BUSYBOX OUT.tar
"""
import glob
import io
import os
import platform
import subprocess
import sys
import tarfile
import time

DIRS = {  # path: (mode, uid)
    "bin": (0o755, 0), "sbin": (0o755, 0), "usr": (0o755, 0), "usr/bin": (0o755, 0),
    "usr/sbin": (0o755, 0), "etc": (0o755, 0), "tmp": (0o1777, 0), "root": (0o700, 0),
    "home": (0o755, 0), "home/user": (0o755, 1000), "proc": (0o755, 0), "sys": (0o755, 0),
    "dev": (0o755, 0), "run": (0o755, 0), "var": (0o755, 0), "var/tmp": (0o1777, 0),
}
FILES = {
    "etc/inittab": "::sysinit:/bin/true\n",
    "etc/passwd": "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/sh\n"
                  "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
    "etc/group": "root:x:0:\nuser:x:1000:\nnogroup:x:65534:\n",
}


def entry(name, kind, mode, uid=0, size=0, target=""):
    t = tarfile.TarInfo(name)
    t.type, t.mode, t.uid, t.gid, t.size, t.linkname = kind, mode, uid, uid, size, target
    t.mtime = int(time.time())
    return t


PYTHON = "/usr/bin/python3.11"
PY_LIB = "/usr/lib/python3.11"
PY_SKIP = ("__pycache__", "test", "idlelib", "tkinter", "ensurepip", "turtledemo",
           "config-3.11-x86_64-linux-gnu")


def shared_libs(paths):
    """The shared libraries (and the loader) the ELF files in paths need, by ldd."""
    libs = set()
    for p in paths:
        out = subprocess.run(["ldd", p], capture_output=True, text=True).stdout
        for line in out.splitlines():
            parts = line.split()
            if "=>" in parts and len(parts) > parts.index("=>") + 1 and parts[parts.index("=>") + 1].startswith("/"):
                libs.add(parts[parts.index("=>") + 1])
            elif parts and parts[0].startswith("/"):
                libs.add(parts[0])
    return sorted(libs)


def add_python(tar):
    def skip(info):
        parts = info.name.split("/")
        return None if any(p in PY_SKIP for p in parts) else info
    made = set()
    def parents(path):
        d = os.path.dirname(path)
        if d in ("/", "") or d in made:
            return
        parents(d)
        made.add(d)
        tar.addfile(entry("rootfs" + d, tarfile.DIRTYPE, 0o755))
    for d in ("/usr/lib", "/lib", "/lib64", "/bin", "/usr/bin"):
        made.add(d)
    tar.addfile(entry("rootfs/lib", tarfile.DIRTYPE, 0o755))
    tar.addfile(entry("rootfs/lib64", tarfile.DIRTYPE, 0o755))
    tar.addfile(entry("rootfs/usr/lib", tarfile.DIRTYPE, 0o755))
    tar.add(PYTHON, arcname="rootfs" + PYTHON)
    tar.addfile(entry("rootfs/usr/bin/python3", tarfile.SYMTYPE, 0o777, target="python3.11"))
    tar.add(PY_LIB, arcname="rootfs" + PY_LIB, filter=skip)
    for lib in shared_libs([PYTHON] + glob.glob(PY_LIB + "/lib-dynload/*.so")):
        real = os.path.realpath(lib)
        parents(lib)
        with open(real, "rb") as f:
            tar.addfile(entry("rootfs" + lib, tarfile.REGTYPE, 0o755, size=os.fstat(f.fileno()).st_size), f)


def main():
    args = sys.argv[1:]
    python = bool(args) and args[0] == "--python"
    if python:
        args = args[1:]
    if len(args) != 2:
        raise SystemExit(__doc__)
    bb, out = args
    applets = subprocess.run([bb, "--list-full"], capture_output=True, check=True, text=True).stdout.split()
    banner = subprocess.run([bb], capture_output=True, text=True).stdout.split()
    now = int(time.time())
    meta = (f"architecture: {platform.machine()}\ncreation_date: {now}\nproperties:\n"
            f"  description: sbx test image (busybox-static)\n  os: busybox\n"
            f"  release: \"{banner[1] if len(banner) > 1 else 'unknown'}\"\n").encode()
    with tarfile.open(out, "w", format=tarfile.GNU_FORMAT) as tar:
        tar.addfile(entry("metadata.yaml", tarfile.REGTYPE, 0o644, size=len(meta)), io.BytesIO(meta))
        tar.addfile(entry("rootfs", tarfile.DIRTYPE, 0o755))
        for d, (mode, uid) in DIRS.items():
            tar.addfile(entry("rootfs/" + d, tarfile.DIRTYPE, mode, uid))
        with open(bb, "rb") as f:
            tar.addfile(entry("rootfs/bin/busybox", tarfile.REGTYPE, 0o755, size=os.fstat(f.fileno()).st_size), f)
        for name, text in FILES.items():
            data = text.encode()
            tar.addfile(entry("rootfs/" + name, tarfile.REGTYPE, 0o644, size=len(data)), io.BytesIO(data))
        for a in applets:
            if a != "bin/busybox" and a.split("/")[0] in ("bin", "sbin", "usr"):
                tar.addfile(entry("rootfs/" + a, tarfile.SYMTYPE, 0o777, target="/bin/busybox"))
        if python:
            add_python(tar)


if __name__ == "__main__":
    main()
