"""The server side of RFC 6455 over a non-blocking socket (TLS or plain), driven by a select loop:
handshake values, frame parsing with the client-masking check, fragmented messages, ping/pong,
close. Framing only; the loop that moves bytes lives in streams.py."""
import base64
import hashlib
import ssl
import struct

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0, 1, 2, 8, 9, 10
MAX_MESSAGE = 64 * 1024 * 1024
WRITE_CHUNK = 16384


def accept_key(key):
    return base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()


def valid_key(key):
    try:
        return len(base64.b64decode(key, validate=True)) == 16
    except (ValueError, TypeError):
        return False


def frame(opcode, payload, fin=True):
    n = len(payload)
    b0 = (0x80 if fin else 0) | opcode
    if n < 126:
        head = struct.pack("!BB", b0, n)
    elif n < 65536:
        head = struct.pack("!BBH", b0, 126, n)
    else:
        head = struct.pack("!BBQ", b0, 127, n)
    return head + payload


class ProtocolError(Exception):
    def __init__(self, code, why):
        Exception.__init__(self, why)
        self.code = code


class Conn:
    """Buffers around one non-blocking socket. feed() reads, messages() parses, send() queues,
    flush() writes. TLS writes are retried with the same chunk, as OpenSSL requires."""

    def __init__(self, sock, leftover=b""):
        self.sock = sock
        self.rbuf = bytearray(leftover)
        self.wbuf = bytearray()
        self.inflight = None
        self.frags = None
        self.frag_op = None
        self.eof = False
        self.close_sent = False
        self.close_received = False

    def fileno(self):
        return self.sock.fileno()

    def readable_now(self):
        return isinstance(self.sock, ssl.SSLSocket) and self.sock.pending() > 0

    def feed(self):
        """Read what is available; False at end of stream."""
        while True:
            try:
                data = self.sock.recv(65536)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError, InterruptedError):
                return True
            except (ConnectionError, OSError, ssl.SSLError):
                self.eof = True
                return False
            if not data:
                self.eof = True
                return False
            self.rbuf += data
            if not isinstance(self.sock, ssl.SSLSocket) or self.sock.pending() == 0:
                return True

    def messages(self):
        """Complete data messages as (opcode, payload); answers pings, records a close."""
        out = []
        while True:
            b = self.rbuf
            if len(b) < 2:
                break
            fin = b[0] & 0x80
            if b[0] & 0x70:
                raise ProtocolError(1002, "reserved bits set")
            op = b[0] & 0x0F
            masked = b[1] & 0x80
            n = b[1] & 0x7F
            pos = 2
            if n == 126:
                if len(b) < 4:
                    break
                n = struct.unpack_from("!H", b, 2)[0]
                pos = 4
            elif n == 127:
                if len(b) < 10:
                    break
                n = struct.unpack_from("!Q", b, 2)[0]
                pos = 10
            if not masked:
                raise ProtocolError(1002, "client frame not masked")
            if n > MAX_MESSAGE:
                raise ProtocolError(1009, "frame too large")
            if len(b) < pos + 4 + n:
                break
            mask = bytes(b[pos:pos + 4])
            data = bytes(b[pos + 4:pos + 4 + n])
            del self.rbuf[:pos + 4 + n]
            if n:
                data = _unmask(data, mask)
            if op >= 8:
                if not fin or n > 125:
                    raise ProtocolError(1002, "bad control frame")
                if op == OP_PING:
                    self.send(OP_PONG, data)
                elif op == OP_CLOSE:
                    self.close_received = True
                    if not self.close_sent:
                        self.send(OP_CLOSE, data[:2] if len(data) >= 2 else b"")
                        self.close_sent = True
                continue
            if op == OP_CONT:
                if self.frags is None:
                    raise ProtocolError(1002, "continuation without a message")
                self.frags += data
                if len(self.frags) > MAX_MESSAGE:
                    raise ProtocolError(1009, "message too large")
                if fin:
                    out.append((self.frag_op, bytes(self.frags)))
                    self.frags = None
                continue
            if op not in (OP_TEXT, OP_BINARY):
                raise ProtocolError(1002, "unknown opcode %d" % op)
            if self.frags is not None:
                raise ProtocolError(1002, "new message inside a fragmented one")
            if fin:
                out.append((op, data))
            else:
                self.frags = bytearray(data)
                self.frag_op = op
        return out

    def send(self, opcode, payload):
        self.wbuf += frame(opcode, payload)

    def close(self, code=1000, reason=""):
        if not self.close_sent:
            self.send(OP_CLOSE, struct.pack("!H", code) + reason.encode()[:120])
            self.close_sent = True

    def pending(self):
        return bool(self.wbuf) or self.inflight is not None

    def flush(self):
        """Write what the socket takes; True when everything queued is out."""
        while True:
            if self.inflight is None:
                if not self.wbuf:
                    return True
                self.inflight = bytes(self.wbuf[:WRITE_CHUNK])
            try:
                n = self.sock.send(self.inflight)
            except (ssl.SSLWantWriteError, ssl.SSLWantReadError, BlockingIOError, InterruptedError):
                return False
            except (ConnectionError, OSError, ssl.SSLError):
                self.eof = True
                self.wbuf.clear()
                self.inflight = None
                return True
            # A completed write (even a partial one) ends the retry obligation.
            full = n == len(self.inflight)
            del self.wbuf[:n]
            self.inflight = None
            if not full:
                return False


def _unmask(data, mask):
    n = len(data)
    m = int.from_bytes((mask * (n // 4 + 1))[:n], "big")
    return (int.from_bytes(data, "big") ^ m).to_bytes(n, "big")
