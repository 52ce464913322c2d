#!/usr/bin/env python3
"""System call probes for the escape suite, run inside a sandbox.

Usage: probe.py NAME...  prints "NAME=ERRNO" per probe (0 = the call succeeded).

Following bubblewrap's try-syscall idea, allowed calls get harmless arguments (bad pointers,
bad fds) so that nothing dangerous happens either way; a filtered call fails with the filter's
errno before the kernel looks at the arguments."""
import ctypes
import errno
import os
import socket
import sys

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

# x86_64 system call numbers
NR = {
    "ptrace": 101, "chroot": 161, "mount": 165, "umount2": 166, "pivot_root": 155,
    "unshare": 272, "setns": 308, "keyctl": 250, "add_key": 248, "request_key": 249,
    "bpf": 321, "perf_event_open": 298, "userfaultfd": 323, "io_uring_setup": 425,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "mount_setattr": 442,
    "clone3": 435, "init_module": 175, "finit_module": 313, "kexec_load": 246,
    "reboot": 169, "settimeofday": 164, "clock_settime": 227, "swapon": 167, "acct": 163,
    "iopl": 172, "ioperm": 173, "modify_ldt": 154, "personality": 135,
    "process_vm_readv": 310, "pidfd_open": 434, "pidfd_getfd": 438,
    "open_by_handle_at": 304, "name_to_handle_at": 303, "ioctl": 16, "getpid": 39,
    "syslog": 103, "sync": 162,
}
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
CLONE_NEWNS = 0x00020000
TIOCSTI = 0x5412
TIOCLINUX = 0x541C
AF_VSOCK = 40


def sc(name, *args):
    r = libc.syscall(ctypes.c_long(NR[name]), *[ctypes.c_long(a) for a in args])
    return 0 if r >= 0 else ctypes.get_errno()


def sock(family, kind=socket.SOCK_STREAM, proto=0):
    try:
        s = socket.socket(family, kind, proto)
        s.close()
        return 0
    except OSError as e:
        return e.errno


def tiocsti_pty(high=False):
    master, slave = os.openpty()
    try:
        c = ctypes.c_char(b"x")
        cmd = TIOCSTI | ((1 << 32) if high else 0)
        r = libc.syscall(ctypes.c_long(NR["ioctl"]), ctypes.c_long(slave), ctypes.c_ulong(cmd),
                         ctypes.byref(c))
        return 0 if r >= 0 else ctypes.get_errno()
    finally:
        os.close(master)
        os.close(slave)


PROBES = {
    "unshare_user": lambda: sc("unshare", CLONE_NEWUSER),
    "unshare_net": lambda: sc("unshare", CLONE_NEWNET),
    "unshare_mnt": lambda: sc("unshare", CLONE_NEWNS),
    "setns": lambda: sc("setns", -1, 0),
    "clone3": lambda: sc("clone3", 0, 0),
    "mount": lambda: sc("mount", 0, 0, 0, 32, 0),  # MS_REMOUNT with bad pointers
    "umount": lambda: sc("umount2", 0, 2),
    "pivot_root": lambda: sc("pivot_root", 0, 0),
    "chroot": lambda: sc("chroot", 0),
    "open_tree": lambda: sc("open_tree", -100, 0, 0),
    "fsopen": lambda: sc("fsopen", 0, 0),
    "mount_setattr": lambda: sc("mount_setattr", -1, 0, 0, 0, 0),
    "keyctl": lambda: sc("keyctl", 1, 0),
    "add_key": lambda: sc("add_key", 0, 0, 0, 0, 0),
    "request_key": lambda: sc("request_key", 0, 0, 0, 0),
    "io_uring_setup": lambda: sc("io_uring_setup", 8, 0),
    "bpf": lambda: sc("bpf", 5, 0, 0),
    "perf_event_open": lambda: sc("perf_event_open", 0, 0, -1, -1, 0),
    "userfaultfd": lambda: sc("userfaultfd", 0),
    "ptrace_attach_1": lambda: sc("ptrace", 16, 1, 0, 0),
    "process_vm_readv": lambda: sc("process_vm_readv", 1, 0, 0, 0, 0, 0),
    "pidfd_getfd": lambda: sc("pidfd_getfd", -1, 0, 0),
    "pidfd_open_1": lambda: sc("pidfd_open", 1, 0),
    "pidfd_open_1_high": lambda: sc("pidfd_open", (1 << 32) | 1, 0),
    "pidfd_open_self": lambda: sc("pidfd_open", os.getpid(), 0),
    "sync": lambda: sc("sync"),
    "open_by_handle_at": lambda: sc("open_by_handle_at", -1, 0, 0),
    "name_to_handle_at": lambda: sc("name_to_handle_at", -1, 0, 0, 0, 0),
    "init_module": lambda: sc("init_module", 0, 0, 0),
    "finit_module": lambda: sc("finit_module", -1, 0, 0),
    "kexec_load": lambda: sc("kexec_load", 0, 0, 0, 0),
    "reboot": lambda: sc("reboot", 0, 0, 0, 0),
    "settimeofday": lambda: sc("settimeofday", 0, 0),
    "clock_settime": lambda: sc("clock_settime", 0, 0),
    "swapon": lambda: sc("swapon", 0, 0),
    "acct": lambda: sc("acct", 0),
    "iopl": lambda: sc("iopl", 3),
    "ioperm": lambda: sc("ioperm", 0, 1, 1),
    "modify_ldt": lambda: sc("modify_ldt", 0, 0, 0),
    "syslog": lambda: sc("syslog", 3, 0, 0),
    "personality_exec": lambda: sc("personality", 0x0400000),  # READ_IMPLIES_EXEC
    "tiocsti": lambda: sc("ioctl", 0, TIOCSTI, 0),
    "tiocsti_high": lambda: sc("ioctl", 0, (1 << 32) | TIOCSTI, 0),
    "tioclinux": lambda: sc("ioctl", 0, TIOCLINUX, 0),
    "tiocsti_pty": lambda: tiocsti_pty(False),
    "tiocsti_pty_high": lambda: tiocsti_pty(True),
    "af_vsock": lambda: sock(AF_VSOCK),
    "af_packet": lambda: sock(socket.AF_PACKET, socket.SOCK_RAW),
    "af_alg": lambda: sock(38, socket.SOCK_SEQPACKET),
    "af_key": lambda: sock(15, socket.SOCK_RAW, 2),
    "af_xdp": lambda: sock(44, socket.SOCK_RAW),
    "af_bluetooth": lambda: sock(31, socket.SOCK_RAW),
    "netlink_audit": lambda: sock(socket.AF_NETLINK, socket.SOCK_RAW, 9),
    "netlink_route": lambda: sock(socket.AF_NETLINK, socket.SOCK_RAW, 0),
    "af_inet": lambda: sock(socket.AF_INET),
    "af_inet6": lambda: sock(socket.AF_INET6),
    "af_unix": lambda: sock(socket.AF_UNIX),
    # an x32 system call number: the filter kills the process (SIGSYS), nothing is printed
    "x32": lambda: libc.syscall(ctypes.c_long(0x40000000 | NR["getpid"])),
}

for name in sys.argv[1:]:
    print("%s=%d" % (name, PROBES[name]()), flush=True)
