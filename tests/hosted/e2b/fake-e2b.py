#!/usr/bin/env python3
"""A loopback fake of E2B for tests: the REST control plane and envd, whose commands and files
are real, in local sbx sandboxes.

usage: fake-e2b.py --state-dir DIR [--api-port N] [--envd-port N] [--api-key KEY]
                   [--sbx PATH] [--template NAME]... [--tls-cert FILE --tls-key FILE]
       fake-e2b.py --schema        print the message and REST field tables as JSON

Two listeners on 127.0.0.1: the API (what E2B_API_URL names) and envd (E2B_SANDBOX_URL). Port
0 picks a free port; the chosen ports are written to DIR/ports as "API ENVD". Every E2B
sandbox is an sbx sandbox made with a manifest whose workspace root is /home/user and whose one
user is "user" (E2B's layout). sbx keeps them under DIR (XDG_RUNTIME_DIR, SBX_WORKSPACES,
SBX_STOPPED, SBX_SNAPSHOTS and XDG_STATE_HOME point there), and every one is removed on
SIGTERM/SIGINT and when a sandbox is killed or expires. DIR/unknown-fields.log gets one line
per field name a client sent that the tables below do not know (the suite asserts it stays
empty).

Envd requests name their sandbox with the E2b-Sandbox-Id header (what the SDK sends when
E2B_SANDBOX_URL is set), or with a Host of the form 49983-<id>.<domain>.

Test knobs (no key needed, not part of E2B): POST /_fake/knobs on the API port with
{"rate_limit_next": N, "retry_after": S} (the next N API requests get 429 with Retry-After: S),
{"max_sandboxes": N} (creating more gets the service's concurrency 429; 0: no limit);
GET /_fake/stats gives counters: {"rate_limited": N, "sandboxes": N, "api_requests": N}.

See README.md beside this file for what the fake does and does not do like the service.
"""
import argparse
import base64
import datetime
import fcntl
import gzip
import hashlib
import http.client
import http.server
import json
import os
import queue
import re
import secrets
import signal
import socketserver
import ssl
import string
import struct
import subprocess
import sys
import termios
import threading
import time
import urllib.parse
import zlib

ENVD_VERSION = "0.6.13"
ENVD_PORT = 49983
HOME = "/home/user"
USER = "user"
MAX_BODY = 256 << 20       # largest request body read into memory (multipart, JSON)
MAX_JSON = 4 << 20         # largest JSON request
CHUNK = 32 << 10           # output read size (envd reads 32 KiB)
DEFAULT_KEEPALIVE = 90     # seconds, envd's default without Keepalive-Ping-Interval

# ---------------------------------------------------------------------------------------------
# Field tables. Every envd message and REST object the fake writes is built through these, and
# every one it reads is checked against them; 0002-e2b-schema.sh compares them with the SDK's
# own descriptors. Proto kinds: a scalar name, "enum:T", "msg:T", "optional:K", "repeated:K",
# "map:string:K". Names are the proto3 JSON names.
PROTO = {
    "process.PTY": {"size": "msg:process.PTY.Size"},
    "process.PTY.Size": {"cols": "uint32", "rows": "uint32"},
    "process.ProcessConfig": {"cmd": "string", "args": "repeated:string",
                              "envs": "map:string:string", "cwd": "optional:string"},
    "process.ListRequest": {},
    "process.ProcessInfo": {"config": "msg:process.ProcessConfig", "pid": "uint32",
                            "tag": "optional:string"},
    "process.ListResponse": {"processes": "repeated:msg:process.ProcessInfo"},
    "process.StartRequest": {"process": "msg:process.ProcessConfig", "pty": "optional:msg:process.PTY",
                             "tag": "optional:string", "stdin": "optional:bool"},
    "process.UpdateRequest": {"process": "msg:process.ProcessSelector",
                              "pty": "optional:msg:process.PTY"},
    "process.UpdateResponse": {},
    "process.ProcessEvent": {"start": "msg:process.ProcessEvent.StartEvent",
                             "data": "msg:process.ProcessEvent.DataEvent",
                             "end": "msg:process.ProcessEvent.EndEvent",
                             "keepalive": "msg:process.ProcessEvent.KeepAlive"},
    "process.ProcessEvent.StartEvent": {"pid": "uint32"},
    "process.ProcessEvent.DataEvent": {"stdout": "bytes", "stderr": "bytes", "pty": "bytes"},
    "process.ProcessEvent.EndEvent": {"exitCode": "sint32", "exited": "bool", "status": "string",
                                      "error": "optional:string"},
    "process.ProcessEvent.KeepAlive": {},
    "process.StartResponse": {"event": "msg:process.ProcessEvent"},
    "process.ConnectResponse": {"event": "msg:process.ProcessEvent"},
    "process.ConnectRequest": {"process": "msg:process.ProcessSelector"},
    "process.SendInputRequest": {"process": "msg:process.ProcessSelector",
                                 "input": "msg:process.ProcessInput"},
    "process.SendInputResponse": {},
    "process.ProcessInput": {"stdin": "bytes", "pty": "bytes"},
    "process.StreamInputRequest": {"start": "msg:process.StreamInputRequest.StartEvent",
                                   "data": "msg:process.StreamInputRequest.DataEvent",
                                   "keepalive": "msg:process.StreamInputRequest.KeepAlive"},
    "process.StreamInputRequest.StartEvent": {"process": "msg:process.ProcessSelector"},
    "process.StreamInputRequest.DataEvent": {"input": "msg:process.ProcessInput"},
    "process.StreamInputRequest.KeepAlive": {},
    "process.StreamInputResponse": {},
    "process.SendSignalRequest": {"process": "msg:process.ProcessSelector",
                                  "signal": "enum:process.Signal"},
    "process.SendSignalResponse": {},
    "process.CloseStdinRequest": {"process": "msg:process.ProcessSelector"},
    "process.CloseStdinResponse": {},
    "process.ProcessSelector": {"pid": "uint32", "tag": "string"},
    "filesystem.MoveRequest": {"source": "string", "destination": "string"},
    "filesystem.MoveResponse": {"entry": "msg:filesystem.EntryInfo"},
    "filesystem.MakeDirRequest": {"path": "string"},
    "filesystem.MakeDirResponse": {"entry": "msg:filesystem.EntryInfo"},
    "filesystem.RemoveRequest": {"path": "string"},
    "filesystem.RemoveResponse": {},
    "filesystem.StatRequest": {"path": "string"},
    "filesystem.StatResponse": {"entry": "msg:filesystem.EntryInfo"},
    "filesystem.EntryInfo": {"name": "string", "type": "enum:filesystem.FileType", "path": "string",
                             "size": "int64", "mode": "uint32", "permissions": "string",
                             "owner": "string", "group": "string",
                             "modifiedTime": "msg:google.protobuf.Timestamp",
                             "symlinkTarget": "optional:string", "metadata": "map:string:string"},
    "filesystem.ListDirRequest": {"path": "string", "depth": "uint32"},
    "filesystem.ListDirResponse": {"entries": "repeated:msg:filesystem.EntryInfo"},
    "filesystem.WatchDirRequest": {"path": "string", "recursive": "bool", "includeEntry": "bool",
                                   "allowNetworkMounts": "bool"},
    "filesystem.FilesystemEvent": {"name": "string", "type": "enum:filesystem.EventType",
                                   "entry": "optional:msg:filesystem.EntryInfo"},
    "filesystem.WatchDirResponse": {"start": "msg:filesystem.WatchDirResponse.StartEvent",
                                    "filesystem": "msg:filesystem.FilesystemEvent",
                                    "keepalive": "msg:filesystem.WatchDirResponse.KeepAlive"},
    "filesystem.WatchDirResponse.StartEvent": {},
    "filesystem.WatchDirResponse.KeepAlive": {},
}

# The enum value names the fake writes (checked against the descriptors too).
PROTO_ENUMS = {
    "process.Signal": ["SIGNAL_SIGKILL", "SIGNAL_SIGTERM", "SIGNAL_UNSPECIFIED"],
    "filesystem.FileType": ["FILE_TYPE_FILE", "FILE_TYPE_DIRECTORY", "FILE_TYPE_SYMLINK",
                            "FILE_TYPE_UNSPECIFIED"],
    "filesystem.EventType": ["EVENT_TYPE_CREATE", "EVENT_TYPE_WRITE", "EVENT_TYPE_REMOVE",
                             "EVENT_TYPE_RENAME", "EVENT_TYPE_CHMOD"],
}
ENUM_NUMBERS = {"process.Signal": {0: "SIGNAL_UNSPECIFIED", 9: "SIGNAL_SIGKILL", 15: "SIGNAL_SIGTERM"}}

# REST objects: "api" is the control plane (openapi.yml), "envd" envd's own REST schema.
REST = {
    "api": {
        "NewSandbox": ["templateID", "timeout", "autoPause", "autoPauseMemory", "autoResume",
                       "secure", "allow_internet_access", "network", "metadata", "envVars", "mcp",
                       "volumeMounts", "iam"],
        "NewSandboxV2": ["templateID", "timeout", "autoPause", "autoPauseMemory", "autoResume",
                         "allow_internet_access", "network", "metadata", "envVars", "mcp",
                         "volumeMounts", "iam"],
        "SandboxAutoResumeConfig": ["enabled"],
        "Sandbox": ["templateID", "sandboxID", "alias", "clientID", "envdVersion",
                    "envdAccessToken", "trafficAccessToken", "domain"],
        "SandboxDetail": ["templateID", "alias", "sandboxID", "clientID", "startedAt", "endAt",
                          "envdVersion", "envdAccessToken", "allowInternetAccess", "domain",
                          "cpuCount", "memoryMB", "diskSizeMB", "metadata", "state", "lifecycle",
                          "network", "volumeMounts"],
        "SandboxLifecycle": ["autoResume", "onTimeout"],
        "ListedSandbox": ["templateID", "alias", "sandboxID", "clientID", "startedAt", "endAt",
                          "cpuCount", "memoryMB", "diskSizeMB", "metadata", "state", "envdVersion",
                          "volumeMounts"],
        "ConnectSandbox": ["timeout", "memory"],
        "ConnectSandboxV2": ["timeout", "memory"],
        "ResumedSandbox": ["timeout", "autoPause", "memory"],
        "SandboxTimeoutRequest": ["timeout"],
        "SandboxPauseRequest": ["memory"],
        "SandboxSnapshotRequest": ["name"],
        "SnapshotInfo": ["snapshotID", "names"],
        "SandboxMetric": ["timestamp", "timestampUnix", "cpuCount", "cpuUsedPct", "memUsed",
                          "memTotal", "memCache", "diskUsed", "diskTotal"],
        "Error": ["code", "message", "error_code"],
    },
    "envd": {
        "EntryInfo": ["path", "name", "type", "metadata"],
        "Error": ["code", "message"],
    },
}

# Go's names for signals (what envd's EndEvent.status says: "signal: killed").
GO_SIGNAL_NAMES = {
    signal.SIGHUP: "hangup", signal.SIGINT: "interrupt", signal.SIGQUIT: "quit",
    signal.SIGILL: "illegal instruction", signal.SIGTRAP: "trace/breakpoint trap",
    signal.SIGABRT: "aborted", signal.SIGBUS: "bus error",
    signal.SIGFPE: "floating point exception", signal.SIGKILL: "killed",
    signal.SIGUSR1: "user defined signal 1", signal.SIGSEGV: "segmentation fault",
    signal.SIGUSR2: "user defined signal 2", signal.SIGPIPE: "broken pipe",
    signal.SIGALRM: "alarm clock", signal.SIGTERM: "terminated",
}

CONNECT_HTTP_STATUS = {
    "canceled": 499, "unknown": 500, "invalid_argument": 400, "deadline_exceeded": 504,
    "not_found": 404, "already_exists": 409, "permission_denied": 403,
    "resource_exhausted": 429, "failed_precondition": 400, "aborted": 409, "out_of_range": 400,
    "unimplemented": 501, "internal": 500, "unavailable": 503, "data_loss": 500,
    "unauthenticated": 401,
}

unknown_log = None  # file the unknown field names go to
unknown_lock = threading.Lock()


def log(msg):
    sys.stderr.write("fake-e2b: %s\n" % msg)
    sys.stderr.flush()


def note_unknown(where, name):
    with unknown_lock:
        if unknown_log:
            with open(unknown_log, "a") as f:
                f.write("%s %s\n" % (where, name))


class ConnectError(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.message = message


class ApiError(Exception):
    """An HTTP error answered with the service's JSON body {"code", "message"}."""

    def __init__(self, status, message, headers=None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


def rfc3339(t):
    """A time as protojson and the API write it: UTC, Z, nanosecond fraction trimmed to 0/3/6/9."""
    sec = int(t)
    nanos = int(round((t - sec) * 1e9))
    if nanos >= 1000000000:
        sec, nanos = sec + 1, nanos - 1000000000
    base = datetime.datetime.fromtimestamp(sec, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    if nanos == 0:
        return base + "Z"
    frac = "%09d" % nanos
    for n in (3, 6, 9):
        if frac[n:] == "0" * (9 - n):
            return base + "." + frac[:n] + "Z"
    return base + "." + frac + "Z"


# ---------------------------------------------------------------------------------------------
# proto3 JSON through the tables

def pb_encode(typ, fields):
    """fields (Python values) as typ's proto3 JSON object; implicit-presence zero values are left
    out as protojson does. A field the table does not name is a bug in the fake."""
    table = PROTO[typ]
    out = {}
    for name, value in fields.items():
        if name not in table:
            raise AssertionError("fake writes field '%s' not in %s" % (name, typ))
        kind = table[name]
        optional = kind.startswith("optional:")
        if optional:
            kind = kind[len("optional:"):]
        if value is None:
            continue
        enc = pb_encode_value(kind, value)
        zero = enc in ("", 0, False, [], {}, "0") or kind.startswith("enum:") and enc.endswith("_UNSPECIFIED")
        if not optional and not kind.startswith("msg:") and zero:
            continue
        out[name] = enc
    return out


def pb_encode_value(kind, value):
    if kind.startswith("repeated:"):
        return [pb_encode_value(kind[len("repeated:"):], v) for v in value]
    if kind.startswith("map:string:"):
        return {str(k): pb_encode_value(kind[len("map:string:"):], v) for k, v in value.items()}
    if kind == "msg:google.protobuf.Timestamp":
        return rfc3339(value)
    if kind.startswith("msg:"):
        return pb_encode(kind[4:], value)
    if kind.startswith("enum:"):
        if value not in PROTO_ENUMS[kind[5:]]:
            raise AssertionError("fake writes enum value %s not in %s" % (value, kind))
        return value
    if kind == "bytes":
        return base64.b64encode(value).decode()
    if kind in ("int64", "uint64", "sint64"):
        return str(int(value))
    if kind in ("uint32", "int32", "sint32"):
        return int(value)
    if kind == "bool":
        return bool(value)
    if kind == "string":
        return str(value)
    raise AssertionError("unknown kind " + kind)


def camel(name):
    parts = name.split("_")
    return parts[0] + "".join(p[:1].upper() + p[1:] for p in parts[1:])


def pb_decode(typ, obj):
    """typ's proto3 JSON object (JSON or proto field names) as a dict of Python values keyed by
    the JSON name. Unknown names are ignored (as envd's JSON codec does) and logged."""
    if obj is None:
        return {}
    if not isinstance(obj, dict):
        raise ConnectError("invalid_argument", "proto: syntax error: %s must be an object" % typ)
    table = PROTO[typ]
    out = {}
    for raw, value in obj.items():
        name = raw if raw in table else camel(raw)
        if name not in table:
            note_unknown(typ, raw)
            continue
        kind = table[name]
        if kind.startswith("optional:"):
            kind = kind[len("optional:"):]
        if value is None:
            continue
        out[name] = pb_decode_value(kind, value, typ + "." + name)
    return out


def pb_decode_value(kind, value, where):
    try:
        if kind.startswith("repeated:"):
            return [pb_decode_value(kind[len("repeated:"):], v, where) for v in value]
        if kind.startswith("map:string:"):
            return {k: pb_decode_value(kind[len("map:string:"):], v, where) for k, v in value.items()}
        if kind.startswith("msg:"):
            return pb_decode(kind[4:], value)
        if kind.startswith("enum:"):
            if isinstance(value, int):
                return ENUM_NUMBERS.get(kind[5:], {}).get(value, value)
            return value
        if kind == "bytes":
            s = value.replace("-", "+").replace("_", "/")
            return base64.b64decode(s + "=" * (-len(s) % 4))
        if kind in ("int64", "uint64", "sint64", "uint32", "int32", "sint32"):
            return int(value)
        if kind == "bool":
            if not isinstance(value, bool):
                raise ValueError("not a bool")
            return value
        if kind == "string":
            if not isinstance(value, str):
                raise ValueError("not a string")
            return value
    except (ValueError, TypeError, AttributeError) as e:
        raise ConnectError("invalid_argument", "proto: invalid value for %s: %s" % (where, e))
    raise AssertionError("unknown kind " + kind)


def rest_out(api, schema, **fields):
    names = REST[api][schema]
    for k in fields:
        if k not in names:
            raise AssertionError("fake writes REST field '%s' not in %s" % (k, schema))
    return {k: v for k, v in fields.items() if v is not None}


def rest_in(api, schema, obj, nested=None):
    """Check a request object's field names against the table; unknown ones are logged. nested
    maps a field to the schema of its object value."""
    if obj is None:
        return {}
    if not isinstance(obj, dict):
        raise ApiError(400, "Error when parsing request: body is not a JSON object")
    names = REST[api][schema]
    for k, v in obj.items():
        if k not in names:
            note_unknown(schema, k)
        elif nested and k in nested and isinstance(v, dict):
            rest_in(api, nested[k], v)
    return obj


# ---------------------------------------------------------------------------------------------
# The program run inside a sandbox for file operations (as the sandbox's user). argv: OP ARGS
# (JSON). It prints one JSON line: {"ok": VALUE} or {"error": {"code", "message"}}; "read"
# follows its line with the file's bytes; "watch" prints a line per event until killed.
FS_HELPER = r'''
import ctypes, errno, grp, json, os, pwd, select, stat, struct, sys

def say(obj):
    sys.stdout.write(json.dumps(obj) + "\n"); sys.stdout.flush()

def fail(code, msg):
    say({"error": {"code": code, "message": msg}}); sys.exit(0)

def goerr(op, path, e, path2=None):
    what = os.strerror(e.errno).lower() if e.errno else str(e)
    if path2 is not None:
        return "%s %s %s: %s" % (op, path, path2, what)
    return "%s %s: %s" % (op, path, what)

LETTERS = [(stat.S_ISDIR, "d"), (stat.S_ISLNK, "L"), (lambda m: stat.S_ISBLK(m) or stat.S_ISCHR(m), "D"),
           (stat.S_ISFIFO, "p"), (stat.S_ISSOCK, "S"), (lambda m: m & stat.S_ISUID, "u"),
           (lambda m: m & stat.S_ISGID, "g"), (stat.S_ISCHR, "c"), (lambda m: m & stat.S_ISVTX, "t")]

def perm_string(m):
    s = "".join(c for f, c in LETTERS if f(m)) or "-"
    rwx = "rwxrwxrwx"
    return s + "".join(rwx[i] if m & (1 << (8 - i)) else "-" for i in range(9))

def name_of(fn, i):
    try:
        return fn(i)[0]
    except KeyError:
        return str(i)

def metadata(path):
    out = {}
    try:
        for k in os.listxattr(path, follow_symlinks=False):
            if k.startswith("user.e2b."):
                out[k[9:]] = os.getxattr(path, k, follow_symlinks=False).decode("ascii", "replace")
    except OSError:
        pass
    return out

def entry(path):
    st = os.lstat(path)
    m = st.st_mode
    e = {"name": os.path.basename(path) or "/", "path": path, "size": st.st_size,
         "permissions": perm_string(m), "owner": name_of(pwd.getpwuid, st.st_uid),
         "group": name_of(grp.getgrgid, st.st_gid), "mtime": st.st_mtime_ns, "metadata": metadata(path)}
    kind_mode = m
    if stat.S_ISLNK(m):
        target = os.path.realpath(path)
        e["symlinkTarget"] = target
        try:
            kind_mode = os.stat(target).st_mode
        except OSError:
            kind_mode = None
    if kind_mode is None:
        e["type"], e["mode"] = "FILE_TYPE_UNSPECIFIED", 0
    else:
        e["mode"] = kind_mode & 0o777
        e["type"] = ("FILE_TYPE_FILE" if stat.S_ISREG(kind_mode) else
                     "FILE_TYPE_DIRECTORY" if stat.S_ISDIR(kind_mode) else
                     "FILE_TYPE_SYMLINK" if stat.S_ISLNK(kind_mode) else "FILE_TYPE_UNSPECIFIED")
    return e

def stat_entry(path):
    try:
        return entry(path)
    except FileNotFoundError as e:
        fail("not_found", "file not found: " + goerr("lstat", path, e))
    except OSError as e:
        fail("internal", "error getting file info: " + goerr("lstat", path, e))

def ensure_dirs(path):
    parts = []
    p = path
    while p not in ("/", ""):
        parts.append(p)
        p = os.path.dirname(p)
    for sub in reversed(parts):
        try:
            st = os.stat(sub)
        except FileNotFoundError:
            try:
                os.mkdir(sub, 0o755)
            except FileExistsError:
                pass
            continue
        if not stat.S_ISDIR(st.st_mode):
            raise NotADirectoryError("path is a file: " + sub)

def walk(requested, resolved, depth, rel, out):
    try:
        names = sorted(os.listdir(os.path.join(resolved, rel) if rel else resolved))
    except OSError as e:
        fail("internal", "error reading directory %s: %s" % (resolved, goerr("open", os.path.join(resolved, rel), e)))
    for n in names:
        r = os.path.join(rel, n) if rel else n
        full = os.path.join(resolved, r)
        try:
            e = entry(full)
        except FileNotFoundError:
            continue
        e["path"] = os.path.join(requested, r)
        out.append(e)
        if len(r.split("/")) < depth and os.path.isdir(full) and not os.path.islink(full):
            walk(requested, resolved, depth, r, out)

def set_metadata(path, meta):
    try:
        for k in os.listxattr(path):
            if k.startswith("user.e2b."):
                os.removexattr(path, k)
        for k, v in meta.items():
            os.setxattr(path, "user.e2b." + k, v.encode())
    except OSError as e:
        if e.errno not in (errno.ENOTSUP, errno.EOPNOTSUPP):
            raise

IN = {"ACCESS": 0x1, "MODIFY": 0x2, "ATTRIB": 0x4, "CLOSE_WRITE": 0x8, "MOVED_FROM": 0x40,
      "MOVED_TO": 0x80, "CREATE": 0x100, "DELETE": 0x200, "DELETE_SELF": 0x400, "MOVE_SELF": 0x800,
      "ISDIR": 0x40000000}

def watch(a):
    root = a["path"]
    try:
        if not os.path.isdir(root):
            fail("invalid_argument", "path %s not a directory" % root)
    except OSError as e:
        fail("internal", str(e))
    if not os.path.exists(root):
        fail("not_found", "path %s not found" % root)
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_CLOEXEC)
    if fd < 0:
        fail("internal", "error creating watcher: " + os.strerror(ctypes.get_errno()))
    mask = IN["MODIFY"] | IN["ATTRIB"] | IN["MOVED_FROM"] | IN["MOVED_TO"] | IN["CREATE"] | IN["DELETE"]
    wds = {}
    def add(d):
        wd = libc.inotify_add_watch(fd, os.fsencode(d), mask)
        if wd >= 0:
            wds[wd] = d
    add(root)
    if a.get("recursive"):
        for d, subdirs, _ in os.walk(root):
            for s in subdirs:
                add(os.path.join(d, s))
    say({"start": True})
    while True:
        buf = os.read(fd, 65536)
        i = 0
        while i + 16 <= len(buf):
            wd, m, cookie, ln = struct.unpack_from("iIII", buf, i)
            name = buf[i + 16:i + 16 + ln].rstrip(b"\0").decode("utf-8", "replace")
            i += 16 + ln
            d = wds.get(wd)
            if d is None or not name:
                continue
            full = os.path.join(d, name)
            rel = os.path.relpath(full, root)
            if m & (IN["CREATE"] | IN["MOVED_TO"]):
                kind = "EVENT_TYPE_CREATE"
                if a.get("recursive") and m & IN["ISDIR"]:
                    add(full)
            elif m & IN["MODIFY"]:
                kind = "EVENT_TYPE_WRITE"
            elif m & IN["DELETE"]:
                kind = "EVENT_TYPE_REMOVE"
            elif m & IN["MOVED_FROM"]:
                kind = "EVENT_TYPE_RENAME"
            elif m & IN["ATTRIB"]:
                kind = "EVENT_TYPE_CHMOD"
            else:
                continue
            ev = {"name": rel, "type": kind}
            if a.get("include_entry") and kind in ("EVENT_TYPE_CREATE", "EVENT_TYPE_WRITE", "EVENT_TYPE_CHMOD"):
                try:
                    ev["entry"] = entry(full)
                except OSError:
                    pass
            say(ev)

def main():
    op, a = sys.argv[1], json.loads(sys.argv[2])
    if op == "stat":
        say({"ok": stat_entry(a["path"])})
    elif op == "isdir":
        say({"ok": os.path.isdir(a["path"])})
    elif op == "list":
        p = a["path"]
        try:
            resolved = os.path.realpath(p, strict=True)
        except FileNotFoundError as e:
            fail("not_found", "path not found: " + goerr("lstat", p, e))
        except OSError as e:
            if e.errno == errno.ELOOP:
                fail("failed_precondition", "cyclic symlink or chain >255 links at %s" % json.dumps(p))
            fail("internal", "error resolving symlink: " + goerr("lstat", p, e))
        if not os.path.isdir(resolved):
            fail("invalid_argument", "path is not a directory: " + resolved)
        out = []
        walk(p, resolved, a["depth"], "", out)
        say({"ok": out})
    elif op == "mkdir":
        p = a["path"]
        if os.path.exists(p):
            if os.path.isdir(p):
                fail("already_exists", "directory already exists: " + p)
            fail("invalid_argument", "path already exists but it is not a directory: " + p)
        try:
            ensure_dirs(p)
        except OSError as e:
            fail("internal", str(e) if isinstance(e, NotADirectoryError) and not e.errno else goerr("mkdir", p, e))
        say({"ok": stat_entry(p)})
    elif op == "move":
        src, dst = a["source"], a["destination"]
        try:
            ensure_dirs(os.path.dirname(dst))
        except OSError as e:
            fail("internal", str(e) if not e.errno else goerr("mkdir", dst, e))
        try:
            os.rename(src, dst)
        except FileNotFoundError as e:
            fail("not_found", "source file not found: " + goerr("rename", src, e, dst))
        except OSError as e:
            fail("internal", "error renaming: " + goerr("rename", src, e, dst))
        say({"ok": stat_entry(dst)})
    elif op == "remove":
        p = a["path"]
        try:
            if os.path.isdir(p) and not os.path.islink(p):
                import shutil
                shutil.rmtree(p)
            else:
                os.unlink(p)
        except FileNotFoundError:
            pass
        except OSError as e:
            fail("internal", "error removing file or directory: " + goerr("unlinkat", p, e))
        say({"ok": True})
    elif op == "write":
        p = a["path"]
        try:
            ensure_dirs(os.path.dirname(p))
        except OSError as e:
            fail("internal", "error ensuring directories: " + (str(e) if not e.errno else goerr("mkdir", p, e)))
        if os.path.isdir(p):
            fail("invalid_argument", "path is a directory: " + p)
        try:
            with open(p, "wb") as f:
                while True:
                    b = sys.stdin.buffer.read1(65536)
                    if not b:
                        break
                    f.write(b)
            set_metadata(p, a.get("metadata") or {})
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                fail("resource_exhausted", "not enough disk space available")
            fail("internal", "error writing file: " + goerr("write", p, e))
        out = {"path": p, "name": os.path.basename(p), "type": "file"}
        meta = metadata(p)
        if meta:
            out["metadata"] = meta
        say({"ok": out})
    elif op == "read":
        p = a["path"]
        try:
            st = os.stat(p)
        except FileNotFoundError:
            fail("not_found", "path '%s' does not exist" % p)
        except OSError as e:
            fail("internal", "error checking if path exists '%s': %s" % (p, goerr("stat", p, e)))
        if stat.S_ISDIR(st.st_mode):
            fail("invalid_argument", "path '%s' is a directory" % p)
        try:
            f = open(p, "rb")
        except OSError as e:
            fail("internal", "error opening file '%s': %s" % (p, goerr("open", p, e)))
        say({"ok": {"size": st.st_size}})
        while True:
            b = f.read(65536)
            if not b:
                break
            sys.stdout.buffer.write(b)
        sys.stdout.buffer.flush()
    elif op == "watch":
        watch(a)
    elif op == "df":
        s = os.statvfs(a["path"])
        say({"ok": {"total": s.f_blocks * s.f_frsize, "used": (s.f_blocks - s.f_bfree) * s.f_frsize}})

main()
'''


def envd_path(path, default=HOME):
    """A path as envd resolves it for the user: ~ expanded, relative to the home, normalised.
    The empty path is the default (the workdir)."""
    if not path:
        return default
    if path[0] == "~":
        if len(path) > 1 and path[1] != "/":
            raise ConnectError("invalid_argument",
                               "failed to expand path '%s' for user '%s': cannot expand user-specific home dir"
                               % (path, USER))
        path = HOME + path[1:]
    if not path.startswith("/"):
        path = HOME + "/" + path
    norm = os.path.normpath(path)
    return "/" + norm.lstrip("/") if norm.startswith("//") else norm


# ---------------------------------------------------------------------------------------------
# The sbx side

class Sbx:
    def __init__(self, binary, state_dir):
        self.binary = binary
        self.env = dict(os.environ)
        for var, sub in (("XDG_RUNTIME_DIR", "run"), ("SBX_WORKSPACES", "ws"),
                         ("SBX_STOPPED", "stopped"), ("SBX_SNAPSHOTS", "snapshots"),
                         ("XDG_STATE_HOME", "state")):
            p = os.path.join(state_dir, sub)
            os.makedirs(p, mode=0o700, exist_ok=True)
            self.env[var] = p
        self.manifest = os.path.join(state_dir, "manifest.yaml")
        with open(self.manifest, "w") as f:
            f.write("version: 1\nroot: %s\nusers: [%s]\n" % (HOME, USER))

    def run(self, *args, input=None, timeout=120):
        return subprocess.run([self.binary] + list(args), input=input, capture_output=True,
                              env=self.env, timeout=timeout)

    def check(self, *args, timeout=120):
        r = self.run(*args, timeout=timeout)
        if r.returncode != 0:
            raise ApiError(500, "sbx %s failed: %s" % (args[0] if args else "",
                                                      r.stderr.decode(errors="replace").strip()))
        return r.stdout.decode().strip()

    def exec_argv(self, sbx_id, argv, *, stdin=False, tty=False, env=None, keep=False):
        out = [self.binary, "sandbox", "exec"]
        if keep:
            out.append("--keep-background")
        if tty:
            out.append("-t")
        if stdin or tty:
            out.append("-i")
        for k, v in (env or {}).items():
            out += ["--env", "%s=%s" % (k, v)]
        return out + [sbx_id, "--"] + list(argv)

    def helper(self, sbx_id, op, args, stdin=None):
        """Run FS_HELPER; its JSON answer, a ConnectError for its error."""
        argv = self.exec_argv(sbx_id, ["python3", "-c", FS_HELPER, op, json.dumps(args)],
                              stdin=stdin is not None)
        r = subprocess.run(argv, input=stdin, capture_output=True, env=self.env, timeout=300)
        line = r.stdout.split(b"\n", 1)[0]
        try:
            ans = json.loads(line)
        except ValueError:
            raise ConnectError("unavailable", "sandbox did not answer: %s"
                               % r.stderr.decode(errors="replace").strip())
        if "error" in ans:
            raise ConnectError(ans["error"]["code"], ans["error"]["message"])
        return ans["ok"]

    def helper_stream(self, sbx_id, op, args):
        """Start FS_HELPER for an answer followed by data (read) or by events (watch)."""
        argv = self.exec_argv(sbx_id, ["python3", "-c", FS_HELPER, op, json.dumps(args)])
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=self.env)


def entry_fields(e):
    """FS_HELPER's entry as filesystem.EntryInfo fields."""
    return {"name": e["name"], "type": e["type"], "path": e["path"], "size": e["size"],
            "mode": e["mode"], "permissions": e["permissions"], "owner": e["owner"],
            "group": e["group"], "modifiedTime": e["mtime"] / 1e9,
            "symlinkTarget": e.get("symlinkTarget"), "metadata": e.get("metadata") or {}}


# ---------------------------------------------------------------------------------------------
# Processes (envd's process service)

# The first line the wrapper of every process writes (to stderr, or the terminal): its pid in the
# sandbox, so that the fake's pid is the sandbox's and a signal can be sent to it there.
PID_MARK = b"\x1efake-e2b-pid "
WRAPPER = 'printf "\\036fake-e2b-pid %s\\n" "$$" >&2; cd -- "$0" || exit 1; exec "$@"'


class Proc:
    """One envd process: an `sbx sandbox exec` client whose output is fanned out to the streams
    attached to it. Output with nobody attached is dropped, as envd does."""

    def __init__(self, config, tag, pty_size, stdin):
        self.pid = 0             # the pid in the sandbox once known (pid_known), else the fake's
        self.pid_known = threading.Event()
        self.sandbox_pid = 0
        self.sbx = None
        self.sbx_id = None
        self.config = config
        self.tag = tag
        self.pty_size = pty_size
        self.want_stdin = stdin
        self.popen = None
        self.master = -1
        self.stdin_fd = -1
        self.lock = threading.Lock()
        self.subscribers = []
        self.end = None
        self.signal_sent = 0
        self.done = threading.Event()
        self.on_exit = None

    def subscribe(self):
        q = queue.Queue()
        with self.lock:
            if self.end is not None:
                q.put(("end", self.end))
            else:
                self.subscribers.append(q)
        return q

    def unsubscribe(self, q):
        with self.lock:
            if q in self.subscribers:
                self.subscribers.remove(q)

    def publish(self, item):
        with self.lock:
            subs = list(self.subscribers)
        for q in subs:
            q.put(item)

    def start(self, sbx, sbx_id, env, cwd):
        cmd = self.config.get("cmd", "")
        args = self.config.get("args", [])
        self.sbx, self.sbx_id = sbx, sbx_id
        # As envd does, through /bin/sh; it says its pid, then changes to the cwd (sbx's --cwd
        # stays in the workspace) and becomes the command.
        argv = ["/bin/sh", "-c", WRAPPER, cwd, cmd] + list(args)
        if self.pty_size is not None:
            master, slave = os.openpty()
            rows, cols = self.pty_size
            fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
            # setsid -c: the client gets the terminal as its controlling one, so a resize
            # (TIOCSWINSZ on the master) reaches it as SIGWINCH and it passes the size on.
            full = ["setsid", "-c"] + sbx.exec_argv(sbx_id, argv, tty=True, env=env, keep=True)
            try:
                self.popen = subprocess.Popen(full, stdin=slave, stdout=slave, stderr=slave,
                                              env=sbx.env, close_fds=True)
            finally:
                os.close(slave)
            self.master = master
            readers = [threading.Thread(target=self.read_loop, args=(master, "pty", True), daemon=True)]
        else:
            self.popen = subprocess.Popen(
                sbx.exec_argv(sbx_id, argv, stdin=self.want_stdin, env=env, keep=True),
                stdin=subprocess.PIPE if self.want_stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=sbx.env, close_fds=True)
            if self.want_stdin:
                self.stdin_fd = os.dup(self.popen.stdin.fileno())
                os.set_inheritable(self.stdin_fd, False)
                self.popen.stdin.close()
            readers = [threading.Thread(target=self.read_loop, args=(self.popen.stdout.fileno(), "stdout"), daemon=True),
                       threading.Thread(target=self.read_loop, args=(self.popen.stderr.fileno(), "stderr", True),
                                        daemon=True)]
        for t in readers:
            t.start()
        threading.Thread(target=self.wait_loop, args=(readers,), daemon=True).start()

    def read_loop(self, fd, field, marked=False):
        """Publish what fd gives; with marked, first take the wrapper's pid line off it."""
        pending = b""
        while True:
            try:
                b = os.read(fd, CHUNK)
            except OSError:  # EIO: the terminal's other side is gone
                break
            if not b:
                break
            if marked:
                pending += b
                if len(pending) < len(PID_MARK) and PID_MARK.startswith(pending):
                    continue
                nl = pending.find(b"\n")
                if pending.startswith(PID_MARK) and nl < 0 and len(pending) < 64:
                    continue
                b = pending
                if pending.startswith(PID_MARK) and nl > 0:
                    try:
                        self.sandbox_pid = int(pending[len(PID_MARK):nl].strip())
                    except ValueError:
                        pass
                    b = pending[nl + 1:]
                marked = False
                self.pid_known.set()
                if not b:
                    continue
            self.publish(("data", field, b))
        if marked and pending:
            self.publish(("data", field, pending))
        self.pid_known.set()

    def wait_loop(self, readers):
        for t in readers:
            t.join()
        rc = self.popen.wait()
        for f in (self.popen.stdout, self.popen.stderr):
            if f:
                f.close()
        if self.master >= 0:
            os.close(self.master)
            self.master = -1
        self.close_stdin()
        if rc < 0 or self.signal_sent and rc == 128 + self.signal_sent:
            # The client killed by a signal, or the command by the signal sent to it.
            sig = -rc if rc < 0 else self.signal_sent
            name = GO_SIGNAL_NAMES.get(sig, "signal %d" % sig)
            status = "signal: " + name
            end = {"exitCode": -1, "exited": False, "status": status, "error": status}
        else:
            status = "exit status %d" % rc
            end = {"exitCode": rc, "exited": True, "status": status,
                   "error": status if rc != 0 else None}
        with self.lock:
            self.end = end
            subs, self.subscribers = self.subscribers, []
        for q in subs:
            q.put(("end", end))
        if self.on_exit:
            self.on_exit(self)
        self.done.set()

    def signal(self, sig):
        """SIGKILL ends the exec client, and sbx's supervisor kills the command when its client
        goes; another signal goes to the process in the sandbox, as envd sends it."""
        with self.lock:
            if self.popen is None or self.end is not None:
                return
            self.signal_sent = sig
        if sig != signal.SIGKILL and self.sandbox_pid:
            r = self.sbx.run("sandbox", "exec", self.sbx_id, "--", "kill", "-s",
                             signal.Signals(sig).name[3:], str(self.sandbox_pid), timeout=30)
            if r.returncode == 0:
                return
        with self.lock:
            if self.end is None:
                try:
                    self.popen.send_signal(sig)
                except ProcessLookupError:
                    pass

    def write_stdin(self, data):
        with self.lock:
            fd = self.stdin_fd
        if self.master >= 0:
            raise ConnectError("internal", "error writing to stdin: tty assigned to process \u2014 "
                               "input should be written to the pty, not the stdin")
        if fd < 0:
            raise ConnectError("internal", "error writing to stdin: stdin not enabled or closed")
        try:
            os.write(fd, data)
        except OSError as e:
            raise ConnectError("internal", "error writing to stdin: error writing to stdin of "
                               "process '%d': %s" % (self.pid, e.strerror.lower()))

    def write_pty(self, data):
        if self.master < 0:
            raise ConnectError("internal", "error writing to tty: tty not assigned to process \u2014 "
                               "input should be written to the stdin, not the tty")
        try:
            os.write(self.master, data)
        except OSError as e:
            raise ConnectError("internal", "error writing to tty: error writing to tty of "
                               "process '%d': %s" % (self.pid, e.strerror.lower()))

    def close_stdin(self):
        with self.lock:
            fd, self.stdin_fd = self.stdin_fd, -1
        if fd >= 0:
            os.close(fd)

    def resize(self, rows, cols):
        if self.master < 0:
            raise ConnectError("internal", "error resizing tty: tty not assigned to process")
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


# ---------------------------------------------------------------------------------------------
# Sandboxes and the service's state

ID_ALPHABET = string.ascii_lowercase + string.digits


class Sandbox:
    def __init__(self, sid, template_id, alias, sbx_id, token, metadata, env_vars, timeout,
                 auto_pause):
        self.id = sid
        self.template_id = template_id
        self.alias = alias
        self.sbx_id = sbx_id
        self.token = token
        self.metadata = metadata
        self.env_vars = env_vars
        self.started_at = time.time()
        self.end_at = self.started_at + timeout
        self.auto_pause = auto_pause
        self.state = "running"
        self.lock = threading.RLock()  # lifecycle: create, pause, resume, kill, starting a process
        self.proc_lock = threading.Lock()  # procs, terminated, next_pid (taken by exiting processes)
        self.procs = {}
        self.terminated = {}
        self.next_pid = 1 << 22  # pids of processes whose own pid is unknown (above pid_max)
        self.gone = False


class Fake:
    def __init__(self, sbx, api_key, templates):
        self.sbx = sbx
        self.api_key = api_key
        self.templates = set(templates)
        self.lock = threading.Lock()
        self.sandboxes = {}
        self.snapshots = {}  # snapshotID -> {"ref", "names", "sandbox"}
        self.knobs = {"rate_limit_next": 0, "retry_after": 1, "max_sandboxes": 0}
        self.stats = {"rate_limited": 0, "api_requests": 0}
        self.stopping = threading.Event()
        threading.Thread(target=self.reaper, daemon=True).start()

    # -- lifecycle ---------------------------------------------------------------------------

    def new_id(self):
        return "".join(secrets.choice(ID_ALPHABET) for _ in range(20))

    def create(self, template, timeout, metadata, env_vars, secure, auto_pause):
        name = template.split(":", 1)[0] if template else ""
        snap = self.snapshots.get(template) or self.snapshots.get(name)
        if not snap and name not in self.templates:
            raise ApiError(404, "template '%s' not found" % name)
        with self.lock:
            limit = self.knobs["max_sandboxes"]
            running = sum(1 for s in self.sandboxes.values() if s.state == "running")
            if limit and running >= limit:
                raise ApiError(429, "you have reached the maximum number of concurrent E2B sandboxes "
                               "(%d). If you need more, please visit 'https://e2b.dev/docs/billing'" % limit)
        args = ["sandbox", "create", "--manifest", self.sbx.manifest]
        if snap:
            args += ["--snapshot", snap["ref"]]
        sbx_id = self.sbx.check(*args)
        sid = self.new_id()
        log("sandbox %s is sbx sandbox %s" % (sid, sbx_id))
        sb = Sandbox(sid, template if snap else name, None if snap else name, sbx_id,
                     secrets.token_hex(16) if secure else None, metadata, env_vars, timeout,
                     auto_pause)
        with self.lock:
            self.sandboxes[sid] = sb
        return sb

    def get(self, sid):
        with self.lock:
            sb = self.sandboxes.get(sid)
        if sb is None or sb.gone:
            raise ApiError(404, "Sandbox %s doesn't exist or you don't have access to it" % json.dumps(sid))
        return sb

    def kill(self, sb):
        with sb.lock:
            if sb.gone:
                return
            sb.gone = True
            t0 = time.monotonic()
            self.stop_procs(sb)
            r = self.sbx.run("sandbox", "rm", sb.sbx_id)
            log("sandbox %s removed (sbx sandbox %s, %.1f s)%s" % (
                sb.id, sb.sbx_id, time.monotonic() - t0,
                "" if r.returncode == 0 else ": " + r.stderr.decode(errors="replace").strip()))
        with self.lock:
            self.sandboxes.pop(sb.id, None)

    def stop_procs(self, sb):
        with sb.proc_lock:
            procs = list(sb.procs.values())
        for p in procs:
            p.signal(signal.SIGKILL)
        for p in procs:
            p.done.wait(10)
        with sb.proc_lock:
            sb.procs.clear()

    def pause(self, sb):
        with sb.lock:
            if sb.gone:
                raise ApiError(404, "Sandbox %s doesn't exist or you don't have access to it" % json.dumps(sb.id))
            if sb.state == "paused":
                raise ApiError(409, "Error pausing sandbox - sandbox '%s' is already paused" % sb.id)
            self.stop_procs(sb)
            self.sbx.check("sandbox", "stop", sb.sbx_id)
            sb.state = "paused"

    def resume(self, sb, timeout):
        with sb.lock:
            if sb.state == "paused":
                self.sbx.check("sandbox", "start", sb.sbx_id)
                sb.state = "running"
                sb.started_at = time.time()
                sb.end_at = time.time() + timeout
                return True
            sb.end_at = max(sb.end_at, time.time() + timeout)
            return False

    def reaper(self):
        """Sandboxes whose timeout passed are killed (or paused when created with autoPause)."""
        while not self.stopping.wait(0.2):
            now = time.time()
            with self.lock:
                due = [s for s in self.sandboxes.values() if s.state == "running" and s.end_at <= now]
            for sb in due:
                try:
                    if sb.auto_pause:
                        self.pause(sb)
                    else:
                        self.kill(sb)
                except ApiError as e:
                    sys.stderr.write("fake-e2b: expiring %s: %s\n" % (sb.id, e.message))

    def shutdown(self):
        self.stopping.set()
        with self.lock:
            all_sb = list(self.sandboxes.values())
        for sb in all_sb:
            self.kill(sb)
        for ref in {snap["ref"] for snap in self.snapshots.values()}:
            self.sbx.run("snapshot", "rm", "--force", ref)

    # -- API objects -------------------------------------------------------------------------

    def sandbox_obj(self, sb):
        return rest_out("api", "Sandbox", templateID=sb.template_id, sandboxID=sb.id,
                        alias=sb.alias, clientID="6532622b", envdVersion=ENVD_VERSION,
                        envdAccessToken=sb.token, trafficAccessToken=None, domain=None)

    def limits(self, sb):
        try:
            ps = json.loads(self.sbx.check("sandbox", "ps", "--all", "--json"))
        except (ApiError, ValueError):
            ps = []
        for s in ps:
            if s.get("id") == sb.sbx_id:
                lim = s.get("limits") or {}
                disk = (s.get("disk") or {}).get("limit") or 0
                return (max(1, (lim.get("cpu_millis") or 1000) // 1000),
                        (lim.get("memory") or 0) >> 20, disk >> 20)
        return 1, 0, 0

    def detail_obj(self, sb, schema):
        cpus, mem_mb, disk_mb = self.limits(sb)
        common = dict(templateID=sb.template_id, alias=sb.alias, sandboxID=sb.id,
                      clientID="6532622b", startedAt=rfc3339(sb.started_at),
                      endAt=rfc3339(sb.end_at), cpuCount=cpus, memoryMB=mem_mb,
                      diskSizeMB=disk_mb, metadata=sb.metadata, state=sb.state,
                      envdVersion=ENVD_VERSION)
        if schema == "SandboxDetail":
            common.update(envdAccessToken=sb.token, domain=None,
                          lifecycle=rest_out("api", "SandboxLifecycle", autoResume=False,
                                             onTimeout="pause" if sb.auto_pause else "kill"))
        return rest_out("api", schema, **common)


# ---------------------------------------------------------------------------------------------
# HTTP plumbing

class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-e2b"
    fake = None  # set on the class per listener

    def log_message(self, fmt, *args):
        if os.environ.get("FAKE_E2B_VERBOSE"):
            sys.stderr.write("fake-e2b: " + fmt % args + "\n")

    def log_request_headers(self):
        """With FAKE_E2B_VERBOSE set: each request's line and headers on stderr."""
        if os.environ.get("FAKE_E2B_VERBOSE"):
            log("%s %s %s" % (self.command, self.path, json.dumps(dict(self.headers.items()))))

    def iter_body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            while True:
                line = self.rfile.readline(1024)
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass
                    return
                data = self.rfile.read(size)
                self.rfile.readline(8)
                yield data
        else:
            n = int(self.headers.get("Content-Length") or 0)
            while n > 0:
                data = self.rfile.read(min(n, 1 << 16))
                if not data:
                    return
                n -= len(data)
                yield data

    def read_body(self, limit):
        out = bytearray()
        for chunk in self.iter_body():
            out += chunk
            if len(out) > limit:
                for _ in self.iter_body():
                    pass
                raise ApiError(413, "request body over %d bytes" % limit)
        return bytes(out)

    def send_bytes(self, status, body, ctype, headers=None):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def send_json(self, status, obj, headers=None):
        self.send_bytes(status, json.dumps(obj).encode(), "application/json; charset=utf-8", headers)

    def send_empty(self, status):
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def start_chunked(self, status, ctype, headers=None):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Transfer-Encoding", "chunked")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()

    def write_chunk(self, data):
        if data:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

    def end_chunked(self):
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


# ---------------------------------------------------------------------------------------------
# The control plane

class ApiHandler(Handler):
    def do_GET(self):
        self.dispatch("GET")

    def do_POST(self):
        self.dispatch("POST")

    def do_DELETE(self):
        self.dispatch("DELETE")

    def do_PUT(self):
        self.dispatch("PUT")

    def dispatch(self, method):
        self.log_request_headers()
        fake = self.fake
        url = urllib.parse.urlsplit(self.path)
        path = url.path.rstrip("/") or "/"
        query = urllib.parse.parse_qs(url.query)
        try:
            if path.startswith("/_fake/"):
                return self.knob(method, path)
            if path == "/health" and method == "GET":
                return self.send_bytes(200, b"Health check successful", "text/plain; charset=utf-8")
            with fake.lock:
                fake.stats["api_requests"] += 1
                limited = fake.knobs["rate_limit_next"] > 0
                if limited:
                    fake.knobs["rate_limit_next"] -= 1
                    fake.stats["rate_limited"] += 1
            self.authenticate()
            if limited:
                raise ApiError(429, "Rate limit exceeded",
                               {"Retry-After": str(fake.knobs["retry_after"])})
            body = self.read_body(MAX_JSON) if method in ("POST", "PUT") else b""
            try:
                data = json.loads(body) if body.strip() else None
            except ValueError as e:
                raise ApiError(400, "Error when parsing request: %s" % e)
            self.route(method, path, query, data)
        except ApiError as e:
            self.send_json(e.status, rest_out("api", "Error", code=e.status, message=e.message), e.headers)

    def authenticate(self):
        key = self.headers.get("X-API-Key")
        if not key:
            raise ApiError(401, "authorization header is missing")
        if not key.startswith("e2b_"):
            raise ApiError(401, "authorization header is malformed")
        prefix = "Invalid API key, please visit https://e2b.dev/docs/api-key for more information.\n"
        if not re.fullmatch(r"([0-9a-fA-F]{2})*", key[4:]):
            raise ApiError(401, prefix + "Invalid API key format")
        if not secrets.compare_digest(key, self.fake.api_key):
            raise ApiError(401, prefix + "Cannot get the team for the given API key")

    def knob(self, method, path):
        fake = self.fake
        if path == "/_fake/knobs" and method == "POST":
            data = json.loads(self.read_body(MAX_JSON) or b"{}")
            with fake.lock:
                for k, v in data.items():
                    if k not in fake.knobs:
                        return self.send_json(400, {"error": "unknown knob " + k})
                    fake.knobs[k] = int(v)
            return self.send_json(200, fake.knobs)
        if path == "/_fake/stats" and method == "GET":
            with fake.lock:
                out = dict(fake.stats, sandboxes=len(fake.sandboxes))
            return self.send_json(200, out)
        raise ApiError(404, "no such knob")

    def route(self, method, path, query, data):
        fake = self.fake
        parts = path.strip("/").split("/")
        if parts[0] == "v2":
            v2, parts = True, parts[1:]
        else:
            v2 = False
        if parts == ["sandboxes"] and method == "POST":
            return self.create(data, v2)
        if parts == ["sandboxes"] and method == "GET":
            return self.list(query, v2)
        if parts == ["snapshots"] and method == "GET":
            return self.list_snapshots(query)
        if len(parts) == 2 and parts[0] == "templates" and method == "DELETE" and not v2:
            # Only snapshots are templates here; one is named by its id or by any of its names.
            snap = fake.snapshots.get(parts[1])
            if snap is None:
                raise ApiError(404, "template '%s' not found" % parts[1])
            for key in [k for k, v in fake.snapshots.items() if v is snap]:
                del fake.snapshots[key]
            fake.sbx.run("snapshot", "rm", "--force", snap["ref"])
            return self.send_empty(204)
        if len(parts) < 2 or parts[0] != "sandboxes":
            raise ApiError(404, "Not Found")
        sb = fake.get(parts[1])
        rest = parts[2:]
        if not rest and method == "GET" and not v2:
            return self.send_json(200, fake.detail_obj(sb, "SandboxDetail"))
        if not rest and method == "DELETE" and not v2:
            fake.kill(sb)
            return self.send_empty(204)
        if rest == ["connect"] and method == "POST":
            body = rest_in("api", "ConnectSandboxV2" if v2 else "ConnectSandbox", data)
            if not v2 and "timeout" not in body:
                raise ApiError(400, "Error when parsing request: timeout is required")
            if body.get("memory") is False:
                raise ApiError(400, "Resuming from disk state only is not enabled")
            resumed = fake.resume(sb, self.timeout_of(body, 300))
            return self.send_json(201 if resumed else 200, fake.sandbox_obj(sb))
        if rest == ["resume"] and method == "POST" and not v2:
            body = rest_in("api", "ResumedSandbox", data)
            if sb.state == "running":
                raise ApiError(409, "Sandbox %s is already running" % json.dumps(sb.id))
            fake.resume(sb, self.timeout_of(body, 15))
            return self.send_json(201, fake.sandbox_obj(sb))
        if rest == ["pause"] and method == "POST" and not v2:
            body = rest_in("api", "SandboxPauseRequest", data)
            if body.get("memory") is False:
                raise ApiError(400, "Pausing to disk state only is not enabled")
            fake.pause(sb)
            return self.send_empty(204)
        if rest == ["timeout"] and method == "POST" and not v2:
            body = rest_in("api", "SandboxTimeoutRequest", data)
            if not isinstance(body.get("timeout"), int):
                raise ApiError(400, "Error when parsing request: timeout is required")
            if sb.state != "running":
                raise ApiError(404, "Sandbox %s doesn't exist or you don't have access to it" % json.dumps(sb.id))
            self.check_max(body["timeout"])
            sb.end_at = time.time() + max(0, body["timeout"])
            return self.send_empty(204)
        if rest == ["metrics"] and method == "GET" and not v2:
            return self.send_json(200, self.metrics(sb))
        if rest == ["snapshots"] and method == "POST" and not v2:
            return self.snapshot(sb, rest_in("api", "SandboxSnapshotRequest", data))
        raise ApiError(404, "Not Found")

    @staticmethod
    def check_max(timeout):
        if timeout > 86400:
            raise ApiError(400, "Timeout cannot be greater than 24 hours")

    def timeout_of(self, body, default):
        t = body.get("timeout", default)
        if not isinstance(t, int):
            raise ApiError(400, "Error when parsing request: timeout must be an integer")
        self.check_max(t)
        return max(0, t)

    def create(self, data, v2):
        body = rest_in("api", "NewSandboxV2" if v2 else "NewSandbox", data,
                       {"autoResume": "SandboxAutoResumeConfig"})
        template = body.get("templateID")
        if not isinstance(template, str) or not template:
            raise ApiError(400, "Error when parsing request: templateID is required")
        for field in ("metadata", "envVars"):
            v = body.get(field)
            if v is not None and (not isinstance(v, dict) or not all(isinstance(x, str) for x in v.values())):
                raise ApiError(400, "Error when parsing request: %s must map strings to strings" % field)
        if body.get("autoPauseMemory") is False and not body.get("autoPause"):
            raise ApiError(400, "autoPauseMemory=false only applies when autoPause is true.")
        if body.get("volumeMounts"):
            raise ApiError(400, "Volume mounts are not enabled.")
        secure = True if v2 else bool(body.get("secure"))
        sb = self.fake.create(template, self.timeout_of(body, 300 if v2 else 15),
                              body.get("metadata") or {}, body.get("envVars") or {}, secure,
                              bool(body.get("autoPause")))
        self.send_json(201, self.fake.sandbox_obj(sb))

    def list(self, query, v2):
        fake = self.fake
        with fake.lock:
            items = sorted(fake.sandboxes.values(), key=lambda s: s.started_at, reverse=True)
        states = query.get("state") or []
        wanted = set(",".join(states).split(",")) - {""} if states else ({"running", "paused"} if v2 else {"running"})
        items = [s for s in items if s.state in wanted]
        if query.get("metadata"):
            want = urllib.parse.parse_qs(query["metadata"][0])
            items = [s for s in items
                     if all(s.metadata.get(k) in v for k, v in want.items())]
        if query.get("template"):
            items = [s for s in items if query["template"][0] in (s.template_id, s.alias)]
        if query.get("order", ["desc"])[0] == "asc":
            items.reverse()
        start = int(query["nextToken"][0]) if query.get("nextToken") else 0
        limit = int(query["limit"][0]) if query.get("limit") else 100
        page = items[start:start + limit]
        headers = {"X-Total-Running": str(sum(1 for s in items if s.state == "running"))}
        if start + limit < len(items):
            headers["X-Next-Token"] = str(start + limit)
        self.send_json(200, [fake.detail_obj(s, "ListedSandbox") for s in page], headers)

    def metrics(self, sb):
        if sb.state != "running":
            return []
        cpus, mem_mb, disk_mb = self.fake.limits(sb)
        try:
            df = self.fake.sbx.helper(sb.sbx_id, "df", {"path": HOME})
        except ConnectError:
            df = {"total": disk_mb << 20, "used": 0}
        now = time.time()
        return [rest_out("api", "SandboxMetric", timestamp=rfc3339(int(now)), timestampUnix=int(now),
                         cpuCount=cpus, cpuUsedPct=0.0, memUsed=0, memTotal=mem_mb << 20,
                         memCache=0, diskUsed=df["used"], diskTotal=disk_mb << 20 or df["total"])]

    def snapshot(self, sb, body):
        fake = self.fake
        if sb.state != "running":
            raise ApiError(409, "Sandbox %s is not running" % json.dumps(sb.id))
        ref = fake.sbx.check("sandbox", "snapshot", sb.sbx_id).splitlines()[-1]
        snap_id = fake.new_id()
        names = [body["name"]] if body.get("name") else []
        fake.snapshots[snap_id] = {"ref": ref, "names": names, "sandbox": sb.id}
        for n in names:
            fake.snapshots[n] = fake.snapshots[snap_id]
        self.send_json(201, rest_out("api", "SnapshotInfo", snapshotID=snap_id, names=names))

    def list_snapshots(self, query):
        fake = self.fake
        want = query.get("sandboxID", [None])[0]
        seen, out = set(), []
        for sid, snap in fake.snapshots.items():
            if id(snap) in seen or sid in snap["names"]:
                continue
            seen.add(id(snap))
            if want and snap["sandbox"] != want:
                continue
            out.append(rest_out("api", "SnapshotInfo", snapshotID=sid, names=snap["names"]))
        self.send_json(200, out)


# ---------------------------------------------------------------------------------------------
# envd

def envelope(flags, obj):
    payload = json.dumps(obj).encode()
    return struct.pack(">BI", flags, len(payload)) + payload


class EnvdHandler(Handler):
    NO_TOKEN_PATHS = {("GET", "/health"), ("GET", "/files"), ("POST", "/files"), ("POST", "/init")}

    def do_GET(self):
        self.dispatch("GET")

    def do_POST(self):
        self.dispatch("POST")

    def do_HEAD(self):
        self.dispatch("HEAD")

    def envd_error(self, status, message):
        self.send_json(status, rest_out("envd", "Error", code=status, message=message))

    def sandbox(self):
        """The sandbox this request is for: E2b-Sandbox-Id, else a Host 49983-<id>.<domain>."""
        sid = self.headers.get("E2b-Sandbox-Id")
        port = self.headers.get("E2b-Sandbox-Port", str(ENVD_PORT))
        if not sid:
            m = re.match(r"(\d+)-([a-z0-9]+)\.", self.headers.get("Host", ""))
            if m:
                port, sid = m.group(1), m.group(2)
        with self.fake.lock:
            sb = self.fake.sandboxes.get(sid or "")
        if sb is None or sb.gone or sb.state != "running":
            self.send_json(502, {"sandboxId": sid or "", "message": "The sandbox was not found",
                                 "code": 502})
            return None
        if port != str(ENVD_PORT):
            self.proxy_port(sb, int(port) if port.isdigit() else 0)
            return None
        return sb

    def proxy_port(self, sb, port):
        """As E2B's edge proxy: a request for another port goes to that port in the sandbox
        (through `sbx sandbox port`, the local provider's relay), its answer comes back."""
        r = self.fake.sbx.run("sandbox", "port", sb.sbx_id, str(port)) if 0 < port < 65536 else None
        url = urllib.parse.urlsplit(r.stdout.decode().strip()) if r and r.returncode == 0 else None
        try:
            body = self.read_body(MAX_BODY)
        except ApiError:
            body = b""
        if url is None or not url.port:
            return self.send_json(502, {"sandboxId": sb.id, "message": "The sandbox is running but port is not open",
                                        "port": port, "code": 502})
        headers = {k: v for k, v in self.headers.items()
                   if k.lower() not in ("host", "connection", "e2b-sandbox-id", "e2b-sandbox-port",
                                        "transfer-encoding", "content-length")}
        try:
            conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
            conn.request(self.command, self.path, body or None, headers)
            resp = conn.getresponse()
            data = resp.read()
            conn.close()
        except OSError as e:
            return self.send_json(502, {"sandboxId": sb.id, "message": "port %d: %s" % (port, e), "code": 502})
        self.send_bytes(resp.status, data, resp.getheader("Content-Type", "application/octet-stream"))

    def dispatch(self, method):
        self.log_request_headers()
        url = urllib.parse.urlsplit(self.path)
        path = url.path
        sb = self.sandbox()
        if sb is None:
            self.drain()
            return
        if sb.token is not None and (method, path) not in self.NO_TOKEN_PATHS:
            if not secrets.compare_digest(self.headers.get("X-Access-Token", ""), sb.token):
                self.drain()
                return self.envd_error(401, "unauthorized access, please provide a valid access "
                                            "token or method signing if supported")
        if path == "/health" and method in ("GET", "HEAD"):
            return self.send_empty(204)
        if path == "/files" and method in ("GET", "HEAD"):
            return self.get_file(sb, urllib.parse.parse_qs(url.query))
        if path == "/files" and method == "POST":
            return self.post_files(sb, urllib.parse.parse_qs(url.query))
        if path == "/envs" and method == "GET":
            return self.send_json(200, sb.env_vars)
        if method == "POST" and path.count("/") == 2:
            return self.rpc(sb, path)
        self.drain()
        self.envd_error(404, "not found")

    def drain(self):
        try:
            for _ in self.iter_body():
                pass
        except (ValueError, OSError):
            self.close_connection = True

    # -- auth --------------------------------------------------------------------------------

    def rpc_user(self):
        """The user of a Connect call (Basic auth, else the default); only "user" exists."""
        auth = self.headers.get("Authorization")
        if not auth:
            return USER
        try:
            scheme, cred = auth.split(" ", 1)
            name = base64.b64decode(cred).decode().split(":", 1)[0] if scheme.lower() == "basic" else None
        except (ValueError, UnicodeDecodeError):
            name = None
        if name is None:
            return USER
        if name != USER:
            raise ConnectError("unauthenticated", "invalid username: '%s'" % name)
        return name

    def files_auth(self, sb, query, operation):
        """envd's /files check: the user named, and when the sandbox is secure either the
        access token or a signature over path, operation, user and token."""
        path = query.get("path", [""])[0]
        username = query.get("username", [None])[0]
        if sb.token is not None:
            header = self.headers.get("X-Access-Token")
            if header:
                if not secrets.compare_digest(header, sb.token):
                    raise ApiError(401, "access token present in header but does not match")
            else:
                sig = query.get("signature", [None])[0]
                if sig is None:
                    raise ApiError(401, "missing signature query parameter")
                exp = query.get("signature_expiration", [None])[0]
                raw = "%s:%s:%s:%s" % (path, operation, username or "", sb.token)
                if exp is not None:
                    raw += ":" + exp
                want = "v1_" + base64.b64encode(hashlib.sha256(raw.encode()).digest()).decode().rstrip("=")
                if not secrets.compare_digest(want, sig):
                    raise ApiError(401, "invalid signature")
                if exp is not None and int(exp) < time.time():
                    raise ApiError(401, "signature is already expired")
        if username is not None and username != USER:
            raise ApiError(401, "error looking up user '%s': user: unknown user %s" % (username, username))
        return path

    # -- REST files --------------------------------------------------------------------------

    def get_file(self, sb, query):
        try:
            path = envd_path(self.files_auth(sb, query, "read"))
            gz = self.accepts_gzip()
            p = self.fake.sbx.helper_stream(sb.sbx_id, "read", {"path": path})
        except ApiError as e:
            return self.envd_error(e.status, e.message)
        except ConnectError as e:
            return self.envd_error(400, "error expanding and resolving path: " + e.message)
        try:
            line = p.stdout.readline()
            try:
                ans = json.loads(line)
            except ValueError:
                p.kill()
                return self.envd_error(502, "sandbox did not answer")
            if "error" in ans:
                status = {"not_found": 404, "invalid_argument": 400}.get(ans["error"]["code"], 500)
                return self.envd_error(status, ans["error"]["message"])
            headers = {"Content-Disposition": 'inline; filename="%s"' % os.path.basename(path),
                       "Vary": "Accept-Encoding"}
            if gz:
                headers["Content-Encoding"] = "gzip"
                self.start_chunked(200, "application/octet-stream", headers)
                comp = zlib.compressobj(6, zlib.DEFLATED, 31)
                while True:
                    b = p.stdout.read1(CHUNK)
                    if not b:
                        break
                    self.write_chunk(comp.compress(b))
                self.write_chunk(comp.flush())
                self.end_chunked()
            else:
                size = ans["ok"]["size"]
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(size))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                left = size
                while left > 0:
                    b = p.stdout.read1(min(CHUNK, left))
                    if not b:
                        break
                    if self.command != "HEAD":
                        self.wfile.write(b)
                    left -= len(b)
                if left:
                    self.close_connection = True
        finally:
            p.stdout.close()
            p.stderr.close()
            if p.poll() is None:
                p.kill()
            p.wait()

    def accepts_gzip(self):
        header = self.headers.get("Accept-Encoding", "")
        for part in header.split(","):
            bits = [b.strip() for b in part.split(";")]
            if bits[0].lower() == "gzip":
                q = 1.0
                for b in bits[1:]:
                    if b.lower().startswith("q="):
                        try:
                            q = float(b[2:])
                        except ValueError:
                            pass
                return q > 0
        return False

    def post_files(self, sb, query):
        try:
            qpath = self.files_auth(sb, query, "write")
            meta = {}
            for name, value in self.headers.items():
                if name.lower().startswith("x-metadata-") and len(name) > 11:
                    meta.setdefault(name[11:].lower(), value)
            ctype = self.headers.get("Content-Type", "")
            mtype = ctype.split(";")[0].strip().lower()
            enc = self.headers.get("Content-Encoding", "identity").strip().lower()
            if enc not in ("identity", "gzip"):
                raise ApiError(400, "error decompressing request body: unsupported Content-Encoding: "
                                    "%s, supported: [gzip]" % enc)
            if mtype == "application/octet-stream":
                if not qpath:
                    raise ApiError(400, "path is required for octet-stream upload")
                data = self.read_body(MAX_BODY)
                files = [(qpath, data)]
            elif mtype.startswith("multipart/"):
                m = re.search(r'boundary="?([^";]+)"?', ctype)
                if not m:
                    raise ApiError(400, "error parsing multipart: no boundary")
                body = self.read_body(MAX_BODY)
                if enc == "gzip":
                    body, enc = gzip.decompress(body), "identity"
                files = [(qpath or fname, data) for fname, data in multipart_files(body, m.group(1).encode())]
            else:
                self.drain()
                raise ApiError(400, "unsupported content type: %s, expected multipart/form-data or "
                                    "application/octet-stream" % ctype)
            if enc == "gzip":
                files = [(p, gzip.decompress(d)) for p, d in files]
            out, seen = [], set()
            for p, data in files:
                full = envd_path(p)
                if full in seen:
                    raise ApiError(400, "you cannot upload multiple files to the same path '%s' in "
                                        "one upload request, only the first specified file was uploaded" % full)
                seen.add(full)
                e = self.fake.sbx.helper(sb.sbx_id, "write", {"path": full, "metadata": meta}, stdin=data)
                out.append(rest_out("envd", "EntryInfo", **e))
            self.send_json(200, out)
        except ApiError as e:
            self.envd_error(e.status, e.message)
        except ConnectError as e:
            status = {"invalid_argument": 400, "resource_exhausted": 507}.get(e.code, 500)
            self.envd_error(status, e.message)

    # -- Connect -----------------------------------------------------------------------------

    RPCS = {
        "/process.Process/Start": ("process.StartRequest", True),
        "/process.Process/Connect": ("process.ConnectRequest", True),
        "/process.Process/List": ("process.ListRequest", False),
        "/process.Process/SendInput": ("process.SendInputRequest", False),
        "/process.Process/StreamInput": ("process.StreamInputRequest", "client"),
        "/process.Process/SendSignal": ("process.SendSignalRequest", False),
        "/process.Process/CloseStdin": ("process.CloseStdinRequest", False),
        "/process.Process/Update": ("process.UpdateRequest", False),
        "/filesystem.Filesystem/Stat": ("filesystem.StatRequest", False),
        "/filesystem.Filesystem/MakeDir": ("filesystem.MakeDirRequest", False),
        "/filesystem.Filesystem/Move": ("filesystem.MoveRequest", False),
        "/filesystem.Filesystem/ListDir": ("filesystem.ListDirRequest", False),
        "/filesystem.Filesystem/Remove": ("filesystem.RemoveRequest", False),
        "/filesystem.Filesystem/WatchDir": ("filesystem.WatchDirRequest", True),
    }

    def rpc(self, sb, path):
        spec = self.RPCS.get(path)
        ctype = self.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if spec is None:
            self.drain()
            return self.send_json(404 if ctype == "application/json" else 501,
                                  {"code": "unimplemented", "message": "%s is not implemented" % path})
        typ, streaming = spec
        if streaming and ctype != "application/connect+json" or not streaming and ctype != "application/json":
            self.drain()
            return self.send_bytes(415, b"", "text/plain",
                                   {"Accept-Post": "application/json, application/connect+json"})
        if streaming == "client":
            return self.stream_input(sb)
        try:
            body = self.read_body(MAX_JSON)
            if streaming:
                if len(body) < 5:
                    raise ConnectError("invalid_argument", "protocol error: incomplete envelope")
                flags, n = struct.unpack(">BI", body[:5])
                body = body[5:5 + n]
            try:
                msg = pb_decode(typ, json.loads(body) if body.strip() else {})
            except ValueError as e:
                raise ConnectError("invalid_argument", "unmarshal into %s: %s" % (typ, e))
            self.rpc_user()
            name = path.rsplit("/", 1)[1]
            if streaming:
                return getattr(self, "stream_" + name.lower())(sb, msg)
            out_typ, out = getattr(self, "unary_" + name.lower())(sb, msg)
            self.send_json(200, pb_encode(out_typ, out))
        except ConnectError as e:
            if streaming:
                self.start_chunked(200, "application/connect+json")
                self.write_chunk(envelope(2, {"error": {"code": e.code, "message": e.message}}))
                self.end_chunked()
            else:
                self.send_json(CONNECT_HTTP_STATUS.get(e.code, 500),
                               {"code": e.code, "message": e.message})

    def find_proc(self, sb, selector):
        with sb.proc_lock:
            procs = dict(sb.procs)
        if "pid" in selector:
            p = procs.get(selector["pid"])
            if p is None:
                raise ConnectError("not_found", "process with pid %d not found" % selector["pid"])
            return p
        if "tag" in selector:
            for p in procs.values():
                if p.tag == selector["tag"]:
                    return p
            raise ConnectError("not_found", "process with tag %s not found" % selector["tag"])
        raise ConnectError("invalid_argument", "invalid input type <nil>")

    # unary

    def unary_list(self, sb, msg):
        with sb.proc_lock:
            procs = [{"config": p.config, "pid": p.pid, "tag": p.tag} for p in sb.procs.values()]
        return "process.ListResponse", {"processes": procs}

    def unary_sendinput(self, sb, msg):
        p = self.find_proc(sb, msg.get("process", {}))
        inp = msg.get("input", {})
        if "pty" in inp:
            p.write_pty(inp["pty"])
        elif "stdin" in inp:
            p.write_stdin(inp["stdin"])
        else:
            raise ConnectError("unimplemented", "invalid input type <nil>")
        return "process.SendInputResponse", {}

    def unary_sendsignal(self, sb, msg):
        p = self.find_proc(sb, msg.get("process", {}))
        sig = {"SIGNAL_SIGKILL": signal.SIGKILL, "SIGNAL_SIGTERM": signal.SIGTERM}.get(msg.get("signal"))
        if sig is None:
            raise ConnectError("unimplemented", "invalid signal: %s" % msg.get("signal", "SIGNAL_UNSPECIFIED"))
        p.signal(sig)
        return "process.SendSignalResponse", {}

    def unary_closestdin(self, sb, msg):
        p = self.find_proc(sb, msg.get("process", {}))
        if p.master >= 0:
            raise ConnectError("unknown", "error closing stdin: cannot close stdin for PTY process "
                                          "\u2014 send Ctrl+D (0x04) instead")
        p.close_stdin()
        return "process.CloseStdinResponse", {}

    def unary_update(self, sb, msg):
        p = self.find_proc(sb, msg.get("process", {}))
        if "pty" in msg:
            size = msg["pty"].get("size", {})
            p.resize(size.get("rows", 0), size.get("cols", 0))
        return "process.UpdateResponse", {}

    def unary_stat(self, sb, msg):
        e = self.fake.sbx.helper(sb.sbx_id, "stat", {"path": envd_path(msg.get("path", ""))})
        return "filesystem.StatResponse", {"entry": entry_fields(e)}

    def unary_makedir(self, sb, msg):
        e = self.fake.sbx.helper(sb.sbx_id, "mkdir", {"path": envd_path(msg.get("path", ""))})
        return "filesystem.MakeDirResponse", {"entry": entry_fields(e)}

    def unary_move(self, sb, msg):
        e = self.fake.sbx.helper(sb.sbx_id, "move", {"source": envd_path(msg.get("source", "")),
                                                     "destination": envd_path(msg.get("destination", ""))})
        return "filesystem.MoveResponse", {"entry": entry_fields(e)}

    def unary_listdir(self, sb, msg):
        entries = self.fake.sbx.helper(sb.sbx_id, "list", {"path": envd_path(msg.get("path", "")),
                                                           "depth": msg.get("depth") or 1})
        return "filesystem.ListDirResponse", {"entries": [entry_fields(e) for e in entries]}

    def unary_remove(self, sb, msg):
        self.fake.sbx.helper(sb.sbx_id, "remove", {"path": envd_path(msg.get("path", ""))})
        return "filesystem.RemoveResponse", {}

    # server streams

    def keepalive_interval(self):
        try:
            return max(1, int(self.headers.get("Keepalive-Ping-Interval", "")))
        except ValueError:
            return DEFAULT_KEEPALIVE

    def deadline(self):
        t = self.headers.get("Connect-Timeout-Ms")
        if t and t.isdigit() and int(t) > 0:
            return time.monotonic() + int(t) / 1000.0
        return None

    def pump(self, sb, p, q, resp_typ, deadline, kill_at_deadline):
        """Send p's events from q until its end; keepalives while idle. False when the client
        went away (the process goes on, as in envd)."""
        interval = self.keepalive_interval()
        next_ping = time.monotonic() + interval
        try:
            while True:
                now = time.monotonic()
                wake = min(next_ping, deadline) if deadline else next_ping
                try:
                    item = q.get(timeout=max(0.0, wake - now))
                except queue.Empty:
                    now = time.monotonic()
                    if deadline and now >= deadline:
                        if kill_at_deadline:
                            p.signal(signal.SIGKILL)
                        self.write_chunk(envelope(2, {"error": {"code": "deadline_exceeded",
                                                                "message": "context deadline exceeded"}}))
                        self.end_chunked()
                        return True
                    self.write_chunk(envelope(0, pb_encode(resp_typ, {"event": {"keepalive": {}}})))
                    next_ping = now + interval
                    continue
                if item[0] == "data":
                    ev = {"data": {item[1]: item[2]}}
                else:
                    ev = {"end": item[1]}
                self.write_chunk(envelope(0, pb_encode(resp_typ, {"event": ev})))
                next_ping = time.monotonic() + interval
                if item[0] == "end":
                    self.write_chunk(envelope(2, {}))
                    self.end_chunked()
                    return True
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            self.close_connection = True
            return False
        finally:
            p.unsubscribe(q)

    def stream_start(self, sb, msg):
        config = msg.get("process", {})
        if not config.get("cmd"):
            raise ConnectError("invalid_argument", "error starting process '': exec: no command")
        cwd = envd_path(config.get("cwd", ""))
        if config.get("cwd") and not self.fake.sbx.helper(sb.sbx_id, "isdir", {"path": cwd}):
            raise ConnectError("invalid_argument", "cwd '%s' does not exist" % cwd)
        pty_size = None
        if "pty" in msg:
            size = msg["pty"].get("size", {})
            pty_size = (size.get("rows", 0), size.get("cols", 0))
        env = dict(sb.env_vars)
        env.update(config.get("envs") or {})
        with sb.lock:
            if sb.gone or sb.state != "running":
                raise ConnectError("unavailable", "sandbox is not running")
            stored = {"cmd": config["cmd"], "args": config.get("args", []),
                      "envs": config.get("envs") or {}}
            if "cwd" in config:
                stored["cwd"] = config["cwd"]
            p = Proc(stored, msg.get("tag"), pty_size, msg.get("stdin", True))

            def gone(proc, sb=sb):
                with sb.proc_lock:
                    if sb.procs.get(proc.pid) is proc:
                        del sb.procs[proc.pid]
                        sb.terminated[proc.pid] = proc.end
            p.on_exit = gone
            q = p.subscribe()
            try:
                p.start(self.fake.sbx, sb.sbx_id, env, cwd)
            except OSError as e:
                raise ConnectError("invalid_argument", "error starting process '%s': %s"
                                   % (config["cmd"], e))
            # The start event names the pid in the sandbox; without one (the client failed
            # before the command ran) a number of the fake's, above any Linux pid.
            p.pid_known.wait(60)
            with sb.proc_lock:
                if p.sandbox_pid:
                    p.pid = p.sandbox_pid
                else:
                    p.pid = sb.next_pid
                    sb.next_pid += 1
                pid = p.pid
                if p.end is None:
                    sb.procs[pid] = p
                else:
                    sb.terminated[pid] = p.end
        self.start_chunked(200, "application/connect+json")
        try:
            self.write_chunk(envelope(0, pb_encode("process.StartResponse",
                                                   {"event": {"start": {"pid": pid}}})))
        except OSError:
            p.unsubscribe(q)
            self.close_connection = True
            return
        self.pump(sb, p, q, "process.StartResponse", self.deadline(), True)

    def stream_connect(self, sb, msg):
        sel = msg.get("process", {})
        try:
            p = self.find_proc(sb, sel)
        except ConnectError:
            with sb.proc_lock:
                end = sb.terminated.get(sel.get("pid"))
            if end is None:
                raise
            self.start_chunked(200, "application/connect+json")
            self.write_chunk(envelope(0, pb_encode("process.ConnectResponse", {"event": {"end": end}})))
            self.write_chunk(envelope(2, {}))
            self.end_chunked()
            return
        q = p.subscribe()
        self.start_chunked(200, "application/connect+json")
        try:
            self.write_chunk(envelope(0, pb_encode("process.ConnectResponse",
                                                   {"event": {"start": {"pid": p.pid}}})))
        except OSError:
            p.unsubscribe(q)
            self.close_connection = True
            return
        self.pump(sb, p, q, "process.ConnectResponse", self.deadline(), False)

    def stream_input(self, sb):
        """StreamInput: a client stream of envelopes (start, then data/keepalive); one answer."""
        proc = None
        buf = b""
        try:
            self.rpc_user()
            for chunk in self.iter_body():
                buf += chunk
                while len(buf) >= 5:
                    flags, n = struct.unpack(">BI", buf[:5])
                    if len(buf) < 5 + n:
                        break
                    try:
                        obj = json.loads(buf[5:5 + n] or b"{}")
                    except ValueError as e:
                        raise ConnectError("invalid_argument", "unmarshal into process.StreamInputRequest: %s" % e)
                    msg = pb_decode("process.StreamInputRequest", obj)
                    buf = buf[5 + n:]
                    if "start" in msg:
                        proc = self.find_proc(sb, msg["start"].get("process", {}))
                    elif "data" in msg:
                        if proc is None:
                            raise ConnectError("failed_precondition", "no process selected")
                        inp = msg["data"].get("input", {})
                        if "pty" in inp:
                            proc.write_pty(inp["pty"])
                        elif "stdin" in inp:
                            proc.write_stdin(inp["stdin"])
            self.start_chunked(200, "application/connect+json")
            self.write_chunk(envelope(0, pb_encode("process.StreamInputResponse", {})))
            self.write_chunk(envelope(2, {}))
            self.end_chunked()
        except ConnectError as e:
            self.drain()
            self.start_chunked(200, "application/connect+json")
            self.write_chunk(envelope(2, {"error": {"code": e.code, "message": e.message}}))
            self.end_chunked()

    def stream_watchdir(self, sb, msg):
        path = envd_path(msg.get("path", ""))
        reader_thread = None
        p = self.fake.sbx.helper_stream(sb.sbx_id, "watch", {
            "path": path, "recursive": msg.get("recursive", False),
            "include_entry": msg.get("includeEntry", False)})
        try:
            first = p.stdout.readline()
            try:
                ans = json.loads(first)
            except ValueError:
                raise ConnectError("internal", "error creating watcher: %s"
                                   % p.stderr.read().decode(errors="replace").strip())
            if "error" in ans:
                raise ConnectError(ans["error"]["code"], ans["error"]["message"])
            lines = queue.Queue()

            def reader():
                for line in p.stdout:
                    lines.put(line)
                lines.put(None)
            reader_thread = threading.Thread(target=reader, daemon=True)
            reader_thread.start()
            self.start_chunked(200, "application/connect+json")
            typ = "filesystem.WatchDirResponse"
            interval = self.keepalive_interval()
            deadline = self.deadline()
            self.write_chunk(envelope(0, pb_encode(typ, {"start": {}})))
            while True:
                wait = interval if not deadline else min(interval, max(0.0, deadline - time.monotonic()))
                try:
                    line = lines.get(timeout=wait)
                except queue.Empty:
                    if deadline and time.monotonic() >= deadline:
                        self.write_chunk(envelope(2, {"error": {"code": "deadline_exceeded",
                                                                "message": "context deadline exceeded"}}))
                        self.end_chunked()
                        return
                    self.write_chunk(envelope(0, pb_encode(typ, {"keepalive": {}})))
                    continue
                if line is None:
                    self.write_chunk(envelope(2, {"error": {"code": "internal",
                                                            "message": "watcher ended"}}))
                    self.end_chunked()
                    return
                ev = json.loads(line)
                fields = {"name": ev["name"], "type": ev["type"]}
                if "entry" in ev:
                    fields["entry"] = entry_fields(ev["entry"])
                self.write_chunk(envelope(0, pb_encode(typ, {"filesystem": fields})))
        except OSError:
            self.close_connection = True
        finally:
            p.kill()
            p.wait()
            if reader_thread:  # it ends at the EOF the kill gives; then the pipes can close
                reader_thread.join(10)
            p.stdout.close()
            p.stderr.close()


def multipart_files(body, boundary):
    """(filename, data) of each part named "file" of a multipart/form-data body."""
    out = []
    delim = b"--" + boundary
    for part in body.split(delim)[1:]:
        if part.startswith(b"--"):
            break
        part = part[2:] if part.startswith(b"\r\n") else part
        head, sep, data = part.partition(b"\r\n\r\n")
        if not sep:
            continue
        if data.endswith(b"\r\n"):
            data = data[:-2]
        disp = ""
        for line in head.split(b"\r\n"):
            k, _, v = line.decode("utf-8", "replace").partition(":")
            if k.strip().lower() == "content-disposition":
                disp = v
        name = re.search(r'\bname="([^"]*)"', disp)
        if not name or name.group(1) != "file":
            continue
        fname = re.search(r'\bfilename="((?:[^"\\]|\\.)*)"', disp)
        out.append((fname.group(1).replace('\\"', '"') if fname else "", data))
    return out


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def handle_error(self, request, client_address):
        # A client that hangs up (the SDK cancelling a stream) is not an error of the fake.
        if not isinstance(sys.exc_info()[1], (ConnectionError, ssl.SSLError, TimeoutError)):
            super().handle_error(request, client_address)


def serve(handler_cls, fake, port, tls):
    cls = type(handler_cls.__name__, (handler_cls,), {"fake": fake})
    srv = Server(("127.0.0.1", port), cls)
    if tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(tls[0], tls[1])
        ctx.set_alpn_protocols(["http/1.1"])
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def main():
    ap = argparse.ArgumentParser(description="A fake E2B (API and envd) over local sbx sandboxes.")
    ap.add_argument("--state-dir")
    ap.add_argument("--api-port", type=int, default=0)
    ap.add_argument("--envd-port", type=int, default=0)
    ap.add_argument("--api-key", default=os.environ.get("E2B_API_KEY", ""))
    ap.add_argument("--sbx", default=os.environ.get("SBX", "sbx"))
    ap.add_argument("--template", action="append", default=[])
    ap.add_argument("--tls-cert")
    ap.add_argument("--tls-key")
    ap.add_argument("--schema", action="store_true")
    a = ap.parse_args()
    if a.schema:
        json.dump({"proto": PROTO, "enums": PROTO_ENUMS, "rest": REST}, sys.stdout, indent=1)
        return 0
    if not a.state_dir or not a.api_key:
        ap.error("--state-dir and --api-key (or E2B_API_KEY) are required")
    global unknown_log
    os.makedirs(a.state_dir, exist_ok=True)
    unknown_log = os.path.join(a.state_dir, "unknown-fields.log")
    open(unknown_log, "a").close()
    fake = Fake(Sbx(a.sbx, a.state_dir), a.api_key, ["base"] + a.template)
    tls = (a.tls_cert, a.tls_key) if a.tls_cert else None
    api = serve(ApiHandler, fake, a.api_port, tls)
    envd = serve(EnvdHandler, fake, a.envd_port, tls)
    ports = "%d %d\n" % (api.server_address[1], envd.server_address[1])
    with open(os.path.join(a.state_dir, "ports.tmp"), "w") as f:
        f.write(ports)
    os.rename(os.path.join(a.state_dir, "ports.tmp"), os.path.join(a.state_dir, "ports"))
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    while not done.wait(1):
        pass
    api.shutdown()
    envd.shutdown()
    fake.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
