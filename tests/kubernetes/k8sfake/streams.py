"""Streaming subresources once upgraded to WebSocket: pods/exec (the channel protocols v1-v5),
pods/portforward over the channel protocol (what python-kubernetes speaks) and SPDY/3.1
tunnelled in WebSocket (what kubectl >= 1.31 speaks). Each session is one thread running one
select loop over the client's socket and the container side, so a TLS socket is never read and
written from two threads at once."""
import json
import queue
import select
import socket
import struct
import threading
import time

from . import spdy
from . import ws as wsmod
from .docker import DockerError, demux
from .util import log

EXEC_PROTOCOLS = ["v5.channel.k8s.io", "v4.channel.k8s.io", "v3.channel.k8s.io", "v2.channel.k8s.io", "channel.k8s.io"]
PORTFORWARD_PROTOCOLS = ["SPDY/3.1+portforward.k8s.io", "v4.channel.k8s.io", "portforward.k8s.io"]
HIGH_WATER = 4 * 1024 * 1024
CLOSE_CHANNEL = 255


def pick_protocol(offered, supported):
    for p in offered:
        if p in supported:
            return p
    return None


def _select(conn, others_r, others_w, timeout):
    if conn.readable_now():
        return [conn] + [s for s in others_r if s is not conn], []
    r = [conn] + list(others_r)
    w = list(others_w)
    if conn.pending():
        w.append(conn)
    try:
        rr, ww, _ = select.select(r, w, [], timeout)
    except (ValueError, OSError):
        return [conn], []
    return rr, ww


def _drain(conn, timeout=5.0):
    """Write out what is queued for the client (bounded wait), then shut the socket down."""
    deadline = timeout
    while conn.pending() and not conn.eof and deadline > 0:
        conn.flush()
        if conn.pending():
            select.select([], [conn], [], 0.1)
            deadline -= 0.1
    try:
        conn.sock.setblocking(True)
        conn.sock.settimeout(1)
        if hasattr(conn.sock, "unwrap"):
            try:
                conn.sock.unwrap()
            except (OSError, ValueError):
                pass
        conn.sock.close()
    except OSError:
        pass


def exit_status(protocol, code, cmd):
    if code == 0:
        return b'{"metadata":{},"status":"Success"}' if protocol in ("v5.channel.k8s.io", "v4.channel.k8s.io") else b""
    msg = "command terminated with non-zero exit code: error executing command %s, exit code %d" % (
        "[" + " ".join(cmd) + "]", code)
    if protocol in ("v5.channel.k8s.io", "v4.channel.k8s.io"):
        return json.dumps({"metadata": {}, "status": "Failure", "message": msg, "reason": "NonZeroExitCode",
                           "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]}}).encode()
    return msg.encode()


def _early_messages(conn, tty):
    """Messages the client sent before the exec starts. A terminal session waits (briefly) for
    the client's first size, so the command is resized right after it starts: Docker's exec API
    (1.41) cannot start a process with a terminal size."""
    msgs = []
    deadline = time.monotonic() + (0.5 if tty else 0)
    while True:
        left = deadline - time.monotonic()
        r, _ = _select(conn, [], [], max(left, 0))
        if conn in r:
            conn.feed()
            msgs += conn.messages()
        if not tty or any(d[:1] == b"\x04" for _, d in msgs) or left <= 0 or conn.eof:
            return msgs


def exec_session(sock, leftover, protocol, kubelet, exec_id, cmd, tty, stdin):
    """Relay one exec between the WebSocket client and the hijacked Docker exec stream."""
    conn = wsmod.Conn(sock, leftover)
    sock.setblocking(False)
    dsock = None
    try:
        early = _early_messages(conn, tty)
        try:
            dsock, rest = kubelet.exec_start(exec_id, tty)
        except (DockerError, OSError) as e:
            conn.send(wsmod.OP_BINARY, b"\x03" + json.dumps({
                "metadata": {}, "status": "Failure", "reason": "InternalError",
                "message": "Internal error occurred: error executing command in container: %s" % e}).encode())
            conn.close(1000)
            return
        dsock.setblocking(False)
        dbuf = bytearray(rest)
        to_docker = bytearray()
        stdin_eof = not stdin
        stdin_shut = False
        docker_open = True
        if not stdin:
            try:
                dsock.shutdown(socket.SHUT_WR)
                stdin_shut = True
            except OSError:
                pass

        def pump_out(data):
            nonlocal dbuf
            if tty:
                conn.send(wsmod.OP_BINARY, b"\x01" + data)
                return
            dbuf += data
            frames, dbuf = demux(dbuf)
            for kind, payload in frames:
                if kind in (1, 2) and payload:
                    conn.send(wsmod.OP_BINARY, bytes([kind]) + payload)

        if dbuf:
            data, dbuf = bytes(dbuf), bytearray()
            pump_out(data)
        pending_msgs = early
        while docker_open:
            rr, ww = _select(conn, [dsock] if len(conn.wbuf) < HIGH_WATER else [],
                             [dsock] if to_docker else [], 0 if pending_msgs else 30)
            if conn in ww:
                conn.flush()
            if dsock in ww and to_docker:
                try:
                    n = dsock.send(to_docker)
                    del to_docker[:n]
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError:
                    to_docker.clear()
            if conn in rr or pending_msgs:
                alive = conn.feed() if conn in rr else True
                try:
                    msgs = pending_msgs + conn.messages()
                except wsmod.ProtocolError as e:
                    conn.close(e.code, str(e))
                    return
                pending_msgs = []
                for op, data in msgs:
                    # Text frames carry channel data too (python-kubernetes sends str stdin so).
                    if not data:
                        continue
                    ch, payload = data[0], data[1:]
                    if ch == 0 and stdin and not stdin_eof:
                        to_docker += payload
                    elif ch == 4:
                        try:
                            size = json.loads(payload)
                            kubelet.exec_resize(exec_id, int(size.get("Width", 0)), int(size.get("Height", 0)))
                        except (ValueError, TypeError, AttributeError):
                            pass
                    elif ch == CLOSE_CHANNEL and protocol == "v5.channel.k8s.io" and payload[:1] == b"\x00":
                        stdin_eof = True
                if not alive or conn.close_received:
                    return
            if stdin_eof and not to_docker and not stdin_shut:
                # The client closed stdin (v5): the command sees end of file.
                try:
                    dsock.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                stdin_shut = True
            if dsock in rr:
                try:
                    data = dsock.recv(65536)
                except (BlockingIOError, InterruptedError):
                    data = None
                except OSError:
                    data = b""
                if data:
                    pump_out(data)
                elif data == b"":
                    docker_open = False
            if conn.pending():
                conn.flush()
        try:
            code = kubelet.exec_exit_code(exec_id)
        except (DockerError, OSError) as e:
            conn.send(wsmod.OP_BINARY, b"\x03" + json.dumps({
                "metadata": {}, "status": "Failure", "reason": "InternalError",
                "message": "Internal error occurred: error executing command in container: %s" % e}).encode())
            conn.close(1000)
            return
        st = exit_status(protocol, code, cmd)
        if st:
            conn.send(wsmod.OP_BINARY, b"\x03" + st)
        conn.close(1000)
    except Exception as e:  # keep the server up; the client sees the connection end
        log("exec session failed: %r", e)
    finally:
        if dsock is not None:
            try:
                dsock.close()
            except OSError:
                pass
        _drain(conn)


def channel_portforward_session(sock, leftover, kubelet, pod, ports):
    """pods/portforward over the WebSocket channel protocol: data channel 2i and error channel
    2i+1 per requested port, each opened by a frame carrying the port (little endian)."""
    conn = wsmod.Conn(sock, leftover)
    sock.setblocking(False)
    socks = {}
    out = {}
    try:
        for i, port in enumerate(ports):
            hdr = struct.pack("<H", port)
            conn.send(wsmod.OP_BINARY, bytes([2 * i]) + hdr)
            conn.send(wsmod.OP_BINARY, bytes([2 * i + 1]) + hdr)
            try:
                s = kubelet.port_connect(pod, port)
                s.setblocking(False)
                socks[i] = s
                out[i] = bytearray()
            except (OSError, DockerError) as e:
                conn.send(wsmod.OP_BINARY, bytes([2 * i + 1]) + str(e).encode())
        alive_at = time.monotonic()
        while socks:
            if time.monotonic() - alive_at > 2:
                alive_at = time.monotonic()
                if kubelet.pod_gone(pod):
                    break
            by_sock = {s: i for i, s in socks.items()}
            rr, ww = _select(conn, list(socks.values()) if len(conn.wbuf) < HIGH_WATER else [],
                             [socks[i] for i in socks if out[i]], 2)
            if conn in ww:
                conn.flush()
            for s in ww:
                if s in by_sock:
                    i = by_sock[s]
                    try:
                        n = s.send(out[i])
                        del out[i][:n]
                    except (BlockingIOError, InterruptedError):
                        pass
                    except OSError:
                        out[i].clear()
            if conn in rr:
                alive = conn.feed()
                try:
                    msgs = conn.messages()
                except wsmod.ProtocolError as e:
                    conn.close(e.code, str(e))
                    return
                for op, data in msgs:
                    if data and data[0] % 2 == 0 and data[0] // 2 in socks:
                        out[data[0] // 2] += data[1:]
                if not alive or conn.close_received:
                    return
            for s in rr:
                if s in by_sock:
                    i = by_sock[s]
                    try:
                        data = s.recv(65536)
                    except (BlockingIOError, InterruptedError):
                        continue
                    except OSError:
                        data = b""
                    if data:
                        conn.send(wsmod.OP_BINARY, bytes([2 * i]) + data)
                    else:
                        s.close()
                        del socks[i]
            if conn.pending():
                conn.flush()
        conn.close(1000)
    except Exception as e:
        log("port-forward session failed: %r", e)
    finally:
        for s in socks.values():
            s.close()
        _drain(conn)


class _Pair:
    def __init__(self, port):
        self.port = port
        self.error_sid = None
        self.data_sid = None
        self.sock = None
        self.out = bytearray()
        self.client_fin = False
        self.shut = False
        self.done = False
        self.connecting = False


def spdy_portforward_session(sock, leftover, kubelet, pod):
    """pods/portforward as kubectl speaks it: SPDY/3.1 frames inside WebSocket binary messages.
    The client opens an error stream and a data stream per connection (same requestid); the
    server replies to both, connects to the port in the pod and relays the data stream."""
    conn = wsmod.Conn(sock, leftover)
    sock.setblocking(False)
    sess = spdy.Session()
    pairs = {}
    by_sid = {}
    results = queue.Queue()
    wake_r, wake_w = socket.socketpair()
    wake_r.setblocking(False)

    def send(frame_bytes):
        conn.send(wsmod.OP_BINARY, frame_bytes)

    def finish(pair, message=None):
        if pair.done:
            return
        pair.done = True
        if message:
            send(sess.data(pair.error_sid, message.encode()))
        send(sess.data(pair.error_sid, b"", fin=True))
        send(sess.data(pair.data_sid, b"", fin=True))

    def connect(req, pair):
        try:
            s = kubelet.port_connect(pod, pair.port)
            results.put((req, s, None))
        except (OSError, DockerError) as e:
            results.put((req, None, "error forwarding port %d to pod %s, uid %s: %s"
                         % (pair.port, pod["metadata"]["name"], pod["metadata"]["uid"], e)))
        try:
            wake_w.send(b"x")
        except OSError:
            pass

    try:
        alive_at = time.monotonic()
        while True:
            if time.monotonic() - alive_at > 2:
                # The pod is gone: its streams end, as the kubelet's do with the pod sandbox.
                alive_at = time.monotonic()
                if kubelet.pod_gone(pod):
                    conn.close(1000)
                    return
            socks = {p.sock: p for p in pairs.values() if p.sock is not None}
            readers = [s for s, p in socks.items() if not p.done] if len(conn.wbuf) < HIGH_WATER else []
            rr, ww = _select(conn, readers + [wake_r], [s for s, p in socks.items() if p.out], 2)
            if conn in ww:
                conn.flush()
            if wake_r in rr:
                try:
                    wake_r.recv(4096)
                except OSError:
                    pass
                while not results.empty():
                    req, s, err = results.get()
                    pair = pairs.get(req)
                    if pair is None:
                        if s is not None:
                            s.close()
                        continue
                    pair.connecting = False
                    if err:
                        finish(pair, err)
                    else:
                        s.setblocking(False)
                        pair.sock = s
            for s in ww:
                p = socks.get(s)
                if p is not None and p.out:
                    try:
                        n = s.send(p.out)
                        del p.out[:n]
                    except (BlockingIOError, InterruptedError):
                        pass
                    except OSError:
                        p.out.clear()
            for p in socks.values():
                if p.client_fin and not p.out and not p.shut and p.sock is not None:
                    try:
                        p.sock.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
                    p.shut = True
            if conn in rr:
                alive = conn.feed()
                try:
                    msgs = conn.messages()
                except wsmod.ProtocolError as e:
                    conn.close(e.code, str(e))
                    return
                for op, data in msgs:
                    if op == wsmod.OP_BINARY:
                        sess.feed(data)
                try:
                    frames = sess.frames()
                except (spdy.SpdyError, ValueError, IndexError, struct.error) as e:
                    log("port-forward: bad SPDY from client: %s", e)
                    return
                for f in frames:
                    if _spdy_frame(f, sess, send, pairs, by_sid, connect, finish):
                        conn.close(1000)
                        return
                if not alive or conn.close_received:
                    return
            for s in rr:
                p = socks.get(s)
                if p is None or p.done:
                    continue
                try:
                    data = s.recv(65536)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    data = b""
                if data:
                    send(sess.data(p.data_sid, data))
                else:
                    finish(p)
                    p.sock.close()
                    p.sock = None
            if conn.pending():
                conn.flush()
    except Exception as e:
        log("port-forward session failed: %r", e)
    finally:
        for p in pairs.values():
            if p.sock is not None:
                p.sock.close()
        wake_r.close()
        wake_w.close()
        _drain(conn)


def _spdy_frame(f, sess, send, pairs, by_sid, connect, finish):
    """Handle one frame from the client; True when the session should end."""
    if not f.control:
        ent = by_sid.get(f.stream_id)
        if ent is None:
            return False
        req, kind = ent
        p = pairs.get(req)
        if p is None:
            return False
        if kind == "data":
            if f.data and (p.sock is not None or p.connecting):
                p.out += f.data
            if f.flags & spdy.FLAG_FIN:
                p.client_fin = True
        return False
    if f.type == spdy.SYN_STREAM:
        h = f.headers
        req = h.get("requestid", "")
        kind = h.get("streamtype", "")
        try:
            port = int(h.get("port", "0"))
        except ValueError:
            port = 0
        send(sess.syn_reply(f.stream_id))
        p = pairs.setdefault(req, _Pair(port))
        by_sid[f.stream_id] = (req, kind)
        if kind == "error":
            p.error_sid = f.stream_id
        elif kind == "data":
            p.data_sid = f.stream_id
        if p.error_sid is not None and p.data_sid is not None and p.sock is None and not p.connecting and not p.done:
            if not 0 < port < 65536:
                finish(p, "invalid port %r" % h.get("port"))
            else:
                p.connecting = True
                threading.Thread(target=connect, args=(req, p), name="pf-connect", daemon=True).start()
        return False
    if f.type == spdy.RST_STREAM:
        ent = by_sid.pop(f.stream_id, None)
        if ent:
            p = pairs.get(ent[0])
            if p is not None and p.sock is not None and not p.done:
                p.done = True
                p.sock.close()
                p.sock = None
        return False
    if f.type == spdy.PING:
        send(sess.ping(f.data))
        return False
    if f.type == spdy.GOAWAY:
        return True
    return False
