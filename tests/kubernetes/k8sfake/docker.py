"""A Docker Engine API client over a unix socket: JSON calls, the hijacked stream of an exec,
the events stream, and entering a container's network namespace to reach its ports."""
import ctypes
import http.client
import json
import os
import socket
import struct
import threading
import urllib.parse

API = "/v1.41"
CLONE_NEWNET = 0x40000000


class DockerError(Exception):
    def __init__(self, status, message):
        Exception.__init__(self, message)
        self.status = status
        self.message = message


class _UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        http.client.HTTPConnection.__init__(self, "docker", timeout=timeout)
        self.unix_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.unix_path)
        self.sock = s


class Docker:
    def __init__(self, socket_path):
        self.path = socket_path

    def call(self, method, path, body=None, timeout=120, query=None):
        """(status, parsed JSON or bytes)."""
        url = API + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        c = _UnixHTTP(self.path, timeout)
        try:
            data = json.dumps(body).encode() if body is not None else None
            headers = {"Content-Type": "application/json"} if data is not None else {}
            c.request(method, url, body=data, headers=headers)
            r = c.getresponse()
            raw = r.read()
            ctype = r.getheader("Content-Type") or ""
            if "json" in ctype and raw:
                try:
                    return r.status, json.loads(raw)
                except ValueError:
                    return r.status, raw
            return r.status, raw
        finally:
            c.close()

    def json(self, method, path, body=None, ok=(200, 201, 204, 304), timeout=120, query=None):
        status, out = self.call(method, path, body, timeout, query)
        if status not in ok:
            msg = out.get("message") if isinstance(out, dict) else (out.decode(errors="replace") if out else "")
            raise DockerError(status, msg or ("HTTP %d" % status))
        return out

    def ping(self):
        try:
            return self.call("GET", "/_ping", timeout=5)[0] == 200
        except OSError:
            return False

    def image_exists(self, image):
        status, _ = self.call("GET", "/images/%s/json" % urllib.parse.quote(image, safe=""))
        return status == 200

    def hijack(self, path, body):
        """POST path with Upgrade: tcp; returns (socket, bytes already read past the headers)."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(30)
        s.connect(self.path)
        data = json.dumps(body).encode()
        req = ("POST %s%s HTTP/1.1\r\nHost: docker\r\nContent-Type: application/json\r\n"
               "Connection: Upgrade\r\nUpgrade: tcp\r\nContent-Length: %d\r\n\r\n" % (API, path, len(data))).encode() + data
        s.sendall(req)
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = s.recv(65536)
            if not chunk:
                s.close()
                raise DockerError(0, "the engine closed the exec stream before answering")
            buf += chunk
        head, rest = buf.split(b"\r\n\r\n", 1)
        status = int(head.split(b" ", 2)[1])
        if status not in (101, 200):
            s.close()
            try:
                msg = json.loads(rest).get("message", rest.decode(errors="replace"))
            except ValueError:
                msg = rest.decode(errors="replace")
            raise DockerError(status, msg)
        s.settimeout(None)
        return s, rest

    def events(self, filters, on_event, stop):
        """Stream /events (a thread); calls on_event(dict) until stop is set or the engine goes."""
        def run():
            while not stop.is_set():
                try:
                    c = _UnixHTTP(self.path, None)
                    c.request("GET", API + "/events?" + urllib.parse.urlencode({"filters": json.dumps(filters)}))
                    r = c.getresponse()
                    dec = json.JSONDecoder()
                    buf = ""
                    while not stop.is_set():
                        chunk = r.read1(65536) if hasattr(r, "read1") else r.read(1)
                        if not chunk:
                            break
                        buf += chunk.decode(errors="replace")
                        while True:
                            buf = buf.lstrip()
                            if not buf:
                                break
                            try:
                                ev, end = dec.raw_decode(buf)
                            except ValueError:
                                break
                            buf = buf[end:]
                            on_event(ev)
                    c.close()
                except OSError:
                    pass
                stop.wait(1)
        t = threading.Thread(target=run, name="docker-events", daemon=True)
        t.start()
        return t


def demux(buf):
    """Split Docker's multiplexed stream (8-byte headers) into [(stream, bytes)]; returns the
    frames and the unconsumed rest."""
    out = []
    pos = 0
    while len(buf) - pos >= 8:
        kind = buf[pos]
        n = struct.unpack_from("!I", buf, pos + 4)[0]
        if len(buf) - pos - 8 < n:
            break
        out.append((kind, bytes(buf[pos + 8:pos + 8 + n])))
        pos += 8 + n
    return out, buf[pos:]


_libc = None


def _setns(fd, nstype):
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    if _libc.setns(fd, nstype) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def connect_in_netns(pid, port, timeout=10):
    """A TCP connection to localhost:port inside the network namespace of process pid, made on
    a short-lived thread that enters the namespace (setns affects only the calling thread)."""
    result = {}

    def run():
        try:
            fd = os.open("/proc/%d/ns/net" % pid, os.O_RDONLY | os.O_CLOEXEC)
            try:
                _setns(fd, CLONE_NEWNET)
            finally:
                os.close(fd)
            errs = []
            for fam, addr, label in ((socket.AF_INET, ("127.0.0.1", port), "tcp4 127.0.0.1"),
                                     (socket.AF_INET6, ("::1", port), "tcp6 [::1]")):
                s = socket.socket(fam, socket.SOCK_STREAM)
                s.settimeout(timeout)
                try:
                    s.connect(addr)
                    s.settimeout(None)
                    result["sock"] = s
                    return
                except OSError as e:
                    s.close()
                    errs.append("dial %s:%d: connect: %s" % (label, port, (e.strerror or str(e)).lower()))
            result["error"] = "IPv4: %s IPv6 %s " % (errs[0], errs[1] if len(errs) > 1 else "")
        except OSError as e:
            result["error"] = "cannot enter the network namespace of pid %d: %s" % (pid, e)

    t = threading.Thread(target=run, name="netns-connect")
    t.start()
    t.join()
    if "sock" in result:
        return result["sock"]
    raise OSError(result.get("error", "connection failed"))
