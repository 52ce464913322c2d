#!/usr/bin/env python3
"""The LXD test image as one unified image tarball (metadata.yaml + rootfs/), written straight
from Debian's busybox-static without staging a tree on disk (some 400 symlinks there cost about
a second on this machine). The rootfs: busybox and every applet at its usual path, /sbin/init as
busybox init with a one-line inittab, /tmp, /etc/passwd and /etc/group with root, a non-root
user (1000) and nobody.

usage: mkimage.py BUSYBOX OUT.tar
"""
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


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    bb, out = sys.argv[1], sys.argv[2]
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


if __name__ == "__main__":
    main()
