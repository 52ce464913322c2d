#!/usr/bin/env python3
"""A loopback fake of the OpenAI Responses and Chat Completions endpoints for sbx tests.

usage: fake-model.py SCRIPT LOG

SCRIPT is a JSON file: {"turns": [TURN, ...]}. Each POST consumes the next TURN:
  status     HTTP status (default 200)
  headers    extra response headers, e.g. {"retry-after": "0"}
  delay_ms   wait this long before sending anything (a slow first byte)
  response   a Responses API response object: sent as JSON, or as the SSE events a real
             server would send when the request asked to stream
  chat       a Chat Completions object: sent as JSON, or as chunks ending in [DONE]
  body       any JSON value sent as the body
  raw        a string sent verbatim as the body
  sse        a list of events sent verbatim as SSE: objects become "event:"/"data:" pairs,
             strings are written as they are (to test CRLF, comments, split data lines)
  cut_after  close the connection after this many body bytes
  plain      true: send "response" / "chat" as one JSON body even when the request asked to
             stream (as some OpenAI-compatible servers do)
  match      take this turn only for a request whose body holds this text; a request takes
             the first turn left that it matches (so requests that run at the same time, a
             run's model call and a guardrail agent's, each get their own answer)
  close      with "keep_alive": true: true closes the connection after this answer, saying so
             ("Connection: close"); "silent" closes it without a word, as a server or a proxy
             dropping an idle connection does
A script with "keep_alive": true at the top keeps each connection open for the next request
(HTTP/1.1 persistent connections) instead of closing it after every answer.
In a "response", the text @SESSION_ID@ is replaced by the last "session ID <n>" found in the
request (the shell tool's running-process id, which a script cannot know in advance).
When the turns run out the server answers 500. Every request is appended to LOG as one JSON
line {"path", "headers", "body", "conn"}, conn numbering the TCP connection it came on
(1 for the first one accepted). The server prints its port on the first line of stdout.
"""
import json
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def response_events(r):
    seq = [0]

    def ev(obj):
        obj["sequence_number"] = seq[0]
        seq[0] += 1
        return obj

    out = [ev({"type": "response.created",
               "response": {"id": r.get("id"), "status": "in_progress", "output": []}})]
    for i, item in enumerate(r.get("output", [])):
        out.append(ev({"type": "response.output_item.added", "output_index": i, "item": item}))
        if item.get("type") == "message":
            for j, part in enumerate(item.get("content", [])):
                text = part.get("text", "")
                # Two deltas per part, to exercise joining.
                half = len(text) // 2
                for piece in (text[:half], text[half:]):
                    out.append(ev({"type": "response.output_text.delta", "item_id": item.get("id"),
                                   "output_index": i, "content_index": j, "delta": piece}))
        elif item.get("type") == "function_call":
            out.append(ev({"type": "response.function_call_arguments.delta",
                           "item_id": item.get("id"), "output_index": i,
                           "delta": item.get("arguments", "")}))
        out.append(ev({"type": "response.output_item.done", "output_index": i, "item": item}))
    out.append(ev({"type": "response.completed", "response": r}))
    return "".join("event: %s\ndata: %s\n\n" % (e["type"], json.dumps(e)) for e in out)


def chat_chunks(c):
    msg = c["choices"][0]["message"]
    base = {"id": c.get("id"), "object": "chat.completion.chunk", "model": c.get("model", "m")}
    chunks = []
    text = msg.get("content") or ""
    if text:
        half = len(text) // 2
        for piece in (text[:half], text[half:]):
            chunks.append(dict(base, choices=[{"index": 0, "delta": {"content": piece}}]))
    for i, call in enumerate(msg.get("tool_calls") or []):
        args = call["function"]["arguments"]
        chunks.append(dict(base, choices=[{"index": 0, "delta": {"tool_calls": [
            {"index": i, "id": call["id"], "type": "function",
             "function": {"name": call["function"]["name"], "arguments": args[:3]}}]}}]))
        chunks.append(dict(base, choices=[{"index": 0, "delta": {"tool_calls": [
            {"index": i, "function": {"arguments": args[3:]}}]}}]))
    chunks.append(dict(base, choices=[{"index": 0, "delta": {}, "finish_reason": "stop"}]))
    if "usage" in c:
        chunks.append(dict(base, choices=[], usage=c["usage"]))
    return "".join("data: %s\n\n" % json.dumps(ch) for ch in chunks) + "data: [DONE]\n\n"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def setup(self):
        super().setup()
        with self.server.lock:
            self.server.conns += 1
            self.conn_no = self.server.conns

    def do_POST(self):
        n = int(self.headers.get("content-length", "0"))
        raw = self.rfile.read(n).decode("utf-8")
        try:
            body = json.loads(raw)
        except ValueError:
            body = raw
        with self.server.lock:
            with open(self.server.log_path, "a") as f:
                f.write(json.dumps({"path": self.path,
                                    "headers": {k.lower(): v for k, v in self.headers.items()},
                                    "body": body, "conn": self.conn_no}) + "\n")
            t = None
            for k, cand in enumerate(self.server.turns):
                if "match" not in cand or cand["match"] in raw:
                    t = self.server.turns.pop(k)
                    break
        if t is None:
            self.send_body(500, {}, json.dumps({"error": {"message": "fake model: no more scripted turns"}}),
                           "application/json", None)
            return
        if t.get("delay_ms"):
            time.sleep(t["delay_ms"] / 1000.0)
        stream = isinstance(body, dict) and body.get("stream") is True and not t.get("plain")
        ctype = "application/json"
        if "response" in t:
            text = json.dumps(t["response"])
            if "@SESSION_ID@" in text:
                ids = re.findall(r"session ID (\d+)", raw)
                text = text.replace("@SESSION_ID@", ids[-1] if ids else "0")
                t["response"] = json.loads(text)
            if stream:
                payload, ctype = response_events(t["response"]), "text/event-stream"
            else:
                payload = json.dumps(t["response"])
        elif "chat" in t:
            if stream:
                payload, ctype = chat_chunks(t["chat"]), "text/event-stream"
            else:
                payload = json.dumps(t["chat"])
        elif "sse" in t:
            parts = []
            for e in t["sse"]:
                if isinstance(e, str):
                    parts.append(e)
                else:
                    parts.append("event: %s\ndata: %s\n\n" % (e.get("type", "message"), json.dumps(e)))
            payload, ctype = "".join(parts), "text/event-stream"
        elif "raw" in t:
            payload = t["raw"]
        else:
            payload = json.dumps(t.get("body", {}))
        self.send_body(t.get("status", 200), t.get("headers", {}), payload, ctype, t.get("cut_after"),
                       t.get("close", False))

    def send_body(self, status, headers, payload, ctype, cut_after, close=False):
        say_close = close is True or not self.server.keep_alive or cut_after is not None
        try:
            self.send_payload(status, headers, payload, ctype, cut_after, say_close)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout test); nothing to do
        self.close_connection = True if say_close or close else False

    def send_payload(self, status, headers, payload, ctype, cut_after, close):
        data = payload.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        for k, v in headers.items():
            self.send_header(k, v)
        if cut_after is None:
            self.send_header("Content-Length", str(len(data)))
        if close:
            self.send_header("Connection", "close")
        self.end_headers()
        if cut_after is not None:
            data = data[:cut_after]
        self.wfile.write(data)
        self.wfile.flush()


def main():
    script, log_path = sys.argv[1], sys.argv[2]
    with open(script) as f:
        doc = json.load(f)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.lock = threading.Lock()
    server.turns = list(doc["turns"] if isinstance(doc, dict) else doc)
    server.log_path = log_path
    server.keep_alive = isinstance(doc, dict) and doc.get("keep_alive") is True
    server.conns = 0
    open(log_path, "w").close()
    print(server.server_address[1], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
