#!/usr/bin/env python3
"""A server that answers as an sbx-node daemon of another major protocol version would, for the
tests: every request gets "400" with {"code":"inval","message":...} and "Sbx-Node-Version: V"
(a WebSocket upgrade too); it prints "request PATH version V" for each request (the version the
request named, "none" without one). Written with Python's standard library.

    other-version.py ADDR PORT CERT KEY VERSION      (serves until killed)
"""
import json, socket, ssl, sys, threading


def serve(conn, version):
    try:
        buf = b""
        while b"\r\n\r\n" not in buf:
            b = conn.recv(4096)
            if not b:
                return
            buf += b
        sent = "none"
        for line in buf.split(b"\r\n\r\n", 1)[0].decode(errors="replace").split("\r\n")[1:]:
            k, _, v = line.partition(":")
            if k.strip().lower() == "sbx-node-version":
                sent = v.strip()
        print("request", buf.split(b" ", 2)[1].decode(errors="replace"), "version", sent, flush=True)
        body = json.dumps({"code": "inval", "message": "this node speaks version " + version}).encode()
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\nConnection: close\r\nSbx-Node-Version: %s\r\n\r\n"
                     % (len(body), version.encode()) + body)
    except (OSError, ssl.SSLError):
        pass
    finally:
        conn.close()


def main():
    addr, port, cert, key, version = sys.argv[1:6]
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    lsock = socket.create_server((addr, int(port)))
    while True:
        raw, _ = lsock.accept()
        try:
            conn = ctx.wrap_socket(raw, server_side=True)
        except (OSError, ssl.SSLError):
            raw.close()
            continue
        threading.Thread(target=serve, args=(conn, version), daemon=True).start()


if __name__ == "__main__":
    main()
