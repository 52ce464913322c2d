#!/usr/bin/env python3
"""A small MCP server on stdio for sbx's tests (faults the real servers never make).

Usage: fake-mcp.py [--log FILE] [--mode MODE]
Tools: add(a, b), shout(text, times?), broken() (answers isError), slow() (sleeps 30 s),
where() (its working directory and $FAKE_MCP_VAR),
dotted.name (a name the model cannot call); tools/list comes in two pages. Resources and
prompts are listed. MODE: ok (default), die (exits during a call of shout, saying why on stderr),
garbage (answers tools/call with a line that is not JSON), huge (answers tools/call with a
5 MiB line), error (answers tools/call with a JSON-RPC error), old (answers initialize with an
unknown protocol version), dotted (lists dotted.name too), changing (a call of add adds the
tool extra() and says so with notifications/tools/list_changed)."""
import json
import sys
import time

args = sys.argv[1:]
log = None
mode = "ok"
while args:
    a = args.pop(0)
    if a == "--log":
        log = open(args.pop(0), "a")
    elif a == "--mode":
        mode = args.pop(0)

TOOLS = [
    {"name": "add", "description": "Adds two integers.",
     "inputSchema": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                     "required": ["a", "b"]}},
    {"name": "shout", "description": "Upper-cases text.",
     "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}, "times": {"type": "integer"}},
                     "required": ["text"]}},
    {"name": "broken", "description": "Always fails.", "inputSchema": {"type": "object"}},
    {"name": "slow", "description": "Takes long.", "inputSchema": {"type": "object", "properties": {}}},
    {"name": "where", "description": "Says where it runs.", "inputSchema": {"type": "object"}},
]
if mode == "dotted":
    TOOLS.append({"name": "dotted.name", "inputSchema": {"type": "object"}})


def send(m):
    sys.stdout.write(json.dumps(m) + "\n")
    sys.stdout.flush()


def result(i, r):
    send({"jsonrpc": "2.0", "id": i, "result": r})


def call(i, p):
    name, a = p.get("name"), p.get("arguments") or {}
    if mode == "die" and name == "shout":
        sys.stderr.write("fake-mcp: giving up on purpose\n")
        sys.stderr.flush()
        sys.exit(3)
    if mode == "garbage":
        sys.stdout.write("this is not json\n")
        sys.stdout.flush()
        return
    if mode == "huge":
        sys.stdout.write('{"jsonrpc": "2.0", "id": %d, "result": {"x": "%s"}}\n' % (i, "y" * (5 << 20)))
        sys.stdout.flush()
        return
    if mode == "error":
        send({"jsonrpc": "2.0", "id": i, "error": {"code": -32602, "message": "no such thing"}})
        return
    if name == "add":
        if mode == "changing" and not any(t["name"] == "extra" for t in TOOLS):
            TOOLS.append({"name": "extra", "inputSchema": {"type": "object"}})
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        result(i, {"content": [{"type": "text", "text": str(a["a"] + a["b"])}]})
    elif name == "extra":
        result(i, {"content": [{"type": "text", "text": "extra ran"}]})
    elif name == "shout":
        t = a["text"].upper() * a.get("times", 1)
        result(i, {"content": [{"type": "text", "text": t},
                               {"type": "image", "data": "AAAA", "mimeType": "image/png"}]})
    elif name == "broken":
        result(i, {"content": [{"type": "text", "text": "the disk is on fire"}], "isError": True})
    elif name == "where":
        import os
        result(i, {"content": [{"type": "text", "text": os.getcwd() + " " + os.environ.get("FAKE_MCP_VAR", "unset")}]})
    elif name == "slow":
        time.sleep(30)
        result(i, {"content": []})
    else:
        send({"jsonrpc": "2.0", "id": i, "error": {"code": -32602, "message": "unknown tool " + str(name)}})


for line in sys.stdin:
    m = json.loads(line)
    if log:
        log.write(json.dumps(m) + "\n")
        log.flush()
    meth, i, p = m.get("method"), m.get("id"), m.get("params") or {}
    if meth == "initialize":
        v = "1999-01-01" if mode == "old" else p.get("protocolVersion")
        send({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "hello"}})
        result(i, {"protocolVersion": v, "serverInfo": {"name": "fake-mcp", "version": "1"},
                   "capabilities": {"tools": {}, "resources": {}, "prompts": {}}})
    elif meth == "tools/list":
        # A request of the server's own before the answer: sbx must answer it and go on.
        send({"jsonrpc": "2.0", "id": "srv-1", "method": "ping"})
        if p.get("cursor") == "page2":
            result(i, {"tools": TOOLS[2:]})
        else:
            result(i, {"tools": TOOLS[:2], "nextCursor": "page2"})
    elif meth == "tools/call":
        call(i, p)
    elif meth == "resources/list":
        result(i, {"resources": [{"uri": "file:///notes.txt", "name": "notes", "mimeType": "text/plain"}]})
    elif meth == "prompts/list":
        result(i, {"prompts": [{"name": "greet", "description": "Says hello."}]})
    elif i is not None and meth is not None:
        send({"jsonrpc": "2.0", "id": i, "error": {"code": -32601, "message": "method not found"}})
