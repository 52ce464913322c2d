#!/usr/bin/env python3
"""Checks of sbx trace files for tests/integration/4120-trace.sh.

  trace-check.py tree FILE             the span tree of a sandbox agent run with one shell call;
                                       prints one line per problem, nothing when it is right
  trace-check.py decode TEXT...        protoc --decode text of ExportTraceServiceRequests as
                                       JSONL spans (the field names of `sbx run --trace`)
  trace-check.py same A B              the spans of JSONL files A and B are the same
  trace-check.py openai JSONL BODY...  the OpenAI traces ingest bodies hold the JSONL file's
                                       trace and spans, each span_data as the reference SDK
                                       exports its kind; one line per problem
  trace-check.py semconv JSONL         the spans follow the OpenTelemetry GenAI conventions
                                       (span names, required attributes, only registered
                                       gen_ai.* / openai.* attributes); one line per problem
"""
import codecs
import json
import sys


def load(path):
    return [json.loads(line) for line in open(path) if line.strip()]


def tree(path):
    spans = load(path)
    bad = []
    by_id = {s["span_id"]: s for s in spans}
    if len(by_id) != len(spans):
        bad.append("span ids repeat")
    if len({s["trace_id"] for s in spans}) != 1:
        bad.append("more than one trace id")

    def kids(p, name):
        return [s for s in spans if s["parent_span_id"] == p["span_id"] and s["name"] == name]

    def parent(s):
        return by_id.get(s["parent_span_id"] or "")

    for s in spans:
        if s["end_unix_nano"] < s["start_unix_nano"]:
            bad.append("%s ends before it starts" % s["name"])
        p = parent(s)
        if p and not (p["start_unix_nano"] <= s["start_unix_nano"] and
                      s["end_unix_nano"] <= p["end_unix_nano"]):
            bad.append("%s is not within its parent %s" % (s["name"], p["name"]))
    runs = [s for s in spans if s["name"] == "run"]
    if len(runs) != 1:
        return ["%d run spans" % len(runs)]
    run = runs[0]
    agents = kids(run, "invoke_agent Worker")
    if len(agents) != 1 or agents[0]["attributes"].get("gen_ai.agent.name") != "Worker":
        return bad + ["no agent span 'invoke_agent Worker' under the run"]
    turns = sorted(kids(agents[0], "turn"), key=lambda s: s["attributes"]["sbx.turn"])
    if [t["attributes"]["sbx.turn"] for t in turns] != [1, 2]:
        return bad + ["turns under the agent: %s" % [t["attributes"] for t in turns]]
    for t in turns:
        if t["attributes"].get("gen_ai.agent.name") != "Worker":
            bad.append("turn %d names agent %r" % (t["attributes"]["sbx.turn"],
                                                   t["attributes"].get("gen_ai.agent.name")))
        m = kids(t, "chat gpt-4.1")
        if len(m) != 1:
            bad.append("turn %d has %d model calls" % (t["attributes"]["sbx.turn"], len(m)))
            continue
        a = m[0]["attributes"]
        want = {"gen_ai.provider.name": "openai", "gen_ai.request.model": "gpt-4.1",
                "gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 11,
                "gen_ai.usage.output_tokens": 5, "gen_ai.usage.cache_read.input_tokens": 2,
                "openai.api.type": "responses", "sbx.model.retries": 0,
                "gen_ai.response.finish_reasons":
                    ["tool_calls"] if t["attributes"]["sbx.turn"] == 1 else ["stop"]}
        for k, v in want.items():
            if a.get(k) != v:
                bad.append("model call attribute %s is %r, not %r" % (k, a.get(k), v))
        if m[0]["kind"] != "client":
            bad.append("model call kind %s" % m[0]["kind"])
        if not isinstance(a.get("sbx.model.first_byte_ns"), int):
            bad.append("model call has no first byte latency")
    tools = kids(turns[0], "execute_tool exec_command")
    if len(tools) != 1:
        return bad + ["turn 1 has %d tool calls" % len(tools)]
    tool = tools[0]
    ta = tool["attributes"]
    if ta.get("gen_ai.tool.name") != "exec_command" or ta.get("gen_ai.tool.call.id") != "c1":
        bad.append("tool call attributes %s" % ta)
    if ta.get("sbx.tool.exit_code") != 3:
        bad.append("tool call exit code %r" % ta.get("sbx.tool.exit_code"))
    ex = kids(tool, "sandbox.exec")
    if len(ex) != 1 or ex[0]["attributes"].get("sbx.sandbox.exit_code") != 3:
        bad.append("no sandbox.exec span with exit code 3 under the tool call")
    create = [s for s in spans if s["name"] == "sandbox.create"]
    if len(create) != 1 or parent(create[0]) is not turns[0]:
        bad.append("sandbox.create is not under turn 1")
    elif not kids(create[0], "sandbox.materialize"):
        bad.append("no sandbox.materialize under sandbox.create")
    rm = kids(run, "sandbox.rm")
    if len(rm) != 1:
        bad.append("no sandbox.rm under the run")
    elif create and rm[0]["attributes"].get("sbx.sandbox.id") != \
            create[0]["attributes"].get("sbx.sandbox.id"):
        bad.append("sandbox.rm names another sandbox than sandbox.create")
    return bad


def unq(v):
    if v.startswith('"'):
        return codecs.escape_decode(v[1:-1].encode())[0]
    return v


def parse_text(text):
    """protoc's text format as nested dicts of lists."""
    stack = [{}]
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.endswith("{"):
            d = {}
            stack[-1].setdefault(line[:-1].strip(), []).append(d)
            stack.append(d)
        elif line == "}":
            stack.pop()
        else:
            k, v = line.split(": ", 1)
            stack[-1].setdefault(k, []).append(unq(v))
    return stack[0]


def any_value(v):
    v = v[0]
    if "array_value" in v:
        return [any_value([x]) for x in v["array_value"][0].get("values", [])]
    for k, conv in (("string_value", lambda x: x.decode()), ("int_value", int),
                    ("bool_value", lambda x: x == "true"), ("double_value", float)):
        if k in v:
            return conv(v[k][0])
    return None


def decode(paths):
    out = []
    for p in paths:
        req = parse_text(open(p).read())
        for rs in req.get("resource_spans", []):
            res = {kv["key"][0].decode(): any_value(kv["value"])
                   for kv in rs["resource"][0].get("attributes", [])}
            for ss in rs.get("scope_spans", []) + rs.get("instrumentation_library_spans", []):
                for s in ss.get("spans", []):
                    st = s.get("status", [{}])[0]
                    code = st.get("code", ["STATUS_CODE_UNSET"])[0]
                    o = {"trace_id": s["trace_id"][0].hex(), "span_id": s["span_id"][0].hex(),
                         "parent_span_id": s["parent_span_id"][0].hex()
                         if "parent_span_id" in s else None,
                         "name": s["name"][0].decode(),
                         "kind": s["kind"][0].replace("SPAN_KIND_", "").lower(),
                         "start_unix_nano": int(s["start_time_unix_nano"][0]),
                         "end_unix_nano": int(s["end_time_unix_nano"][0]),
                         "status": code.replace("STATUS_CODE_", "").lower(),
                         "attributes": {kv["key"][0].decode(): any_value(kv["value"])
                                        for kv in s.get("attributes", [])},
                         "resource": res}
                    if "message" in st:
                        o["status_message"] = st["message"][0].decode()
                    out.append(o)
    for o in out:
        print(json.dumps(o, sort_keys=True))


def same(a, b):
    def key(spans):
        return sorted(json.dumps({k: v for k, v in s.items() if k != "resource"}, sort_keys=True)
                      for s in spans)
    sa, sb = key(load(a)), key(load(b))
    if sa != sb:
        print("spans differ:")
        for x in sorted(set(sa) ^ set(sb)):
            print(("only in A: " if x in sa else "only in B: ") + x[:600])


# The span_data keys of each kind as the reference SDK exports them (openai-agents-python
# src/agents/tracing/span_data.py, the export() of AgentSpanData, ResponseSpanData,
# FunctionSpanData, GenerationSpanData, HandoffSpanData and the custom spans; the traces
# exporter, tracing/processors.py, drops "usage" from every type but generation).
SDK_SPAN_DATA = {
    "agent": {"type", "name", "handoffs", "tools", "output_type"},
    "response": {"type", "response_id"},
    "function": {"type", "name", "input", "output", "mcp_data"},
    "generation": {"type", "input", "output", "model", "model_config", "usage"},
    "handoff": {"type", "from_agent", "to_agent"},
    "custom": {"type", "name", "data"},
}
# TaskSpanData / TurnSpanData data, and the usage of turn_usage_to_span_data and
# task_usage_to_span_data (src/agents/usage.py).
SDK_TURN_USAGE = {"input_tokens", "output_tokens", "cached_input_tokens",
                  "cache_write_input_tokens"}
SDK_TASK_USAGE = SDK_TURN_USAGE | {"requests", "total_tokens"}


def sdk_task_turn(s, d):
    a, data, bad = s["attributes"], d["data"], []
    if s["name"] == "run":
        want = {"sdk_span_type": "task", "name": "sbx run"}
        keys, ukeys, name = {"sdk_span_type", "name", "usage"}, SDK_TASK_USAGE, "task"
    else:
        want = {"sdk_span_type": "turn", "turn": a.get("sbx.turn"),
                "agent_name": a.get("gen_ai.agent.name")}
        keys, ukeys, name = {"sdk_span_type", "turn", "agent_name", "usage"}, SDK_TURN_USAGE, "turn"
    if d["name"] != name or any(data.get(k) != v for k, v in want.items()) or \
            not set(data) <= keys:
        bad.append("%s: custom span %s, want name %s and data %s" % (s["name"], d, name, want))
    u = data.get("usage")
    if "gen_ai.usage.input_tokens" in a and (not isinstance(u, dict) or set(u) != ukeys or
                                             u["input_tokens"] != a["gen_ai.usage.input_tokens"]):
        bad.append("%s: usage %s" % (s["name"], u))
    return bad


# The GenAI attributes of the OpenTelemetry semantic conventions' registry
# (open-telemetry/semantic-conventions model/gen-ai/registry.yaml and model/openai/registry.yaml
# at 7b0c0fe1e, docs/registry/attributes/gen-ai.md), and the deprecated ones
# (model/gen-ai/deprecated/registry-deprecated.yaml).
SEMCONV_ATTRS = set("""
gen_ai.provider.name gen_ai.request.model gen_ai.request.max_tokens gen_ai.request.choice.count
gen_ai.request.temperature gen_ai.request.top_p gen_ai.request.top_k
gen_ai.request.stop_sequences gen_ai.request.frequency_penalty gen_ai.request.presence_penalty
gen_ai.request.encoding_formats gen_ai.request.seed gen_ai.request.stream gen_ai.response.id
gen_ai.response.model gen_ai.response.finish_reasons gen_ai.response.time_to_first_chunk
gen_ai.usage.input_tokens gen_ai.usage.cache_read.input_tokens
gen_ai.usage.cache_creation.input_tokens gen_ai.usage.output_tokens
gen_ai.usage.reasoning.output_tokens gen_ai.token.type gen_ai.conversation.id gen_ai.agent.id
gen_ai.agent.name gen_ai.agent.description gen_ai.agent.version gen_ai.tool.name
gen_ai.tool.call.id gen_ai.tool.description gen_ai.tool.type gen_ai.tool.call.arguments
gen_ai.tool.call.result gen_ai.tool.definitions gen_ai.data_source.id gen_ai.operation.name
gen_ai.output.type gen_ai.embeddings.dimension.count gen_ai.retrieval.documents
gen_ai.retrieval.query.text gen_ai.system_instructions gen_ai.input.messages
gen_ai.output.messages gen_ai.evaluation.name gen_ai.evaluation.score.value
gen_ai.evaluation.score.label gen_ai.evaluation.explanation gen_ai.prompt.name
gen_ai.workflow.name openai.request.service_tier openai.api.type
openai.response.service_tier openai.response.system_fingerprint
""".split())
SEMCONV_DEPRECATED = {"gen_ai.system", "gen_ai.usage.prompt_tokens",
                      "gen_ai.usage.completion_tokens", "gen_ai.prompt", "gen_ai.completion",
                      "gen_ai.openai.request.seed"}
# Span names (docs/gen-ai/gen-ai-spans.md, gen-ai-agent-spans.md): "{operation} {target}".
SEMCONV_NAME = {"chat": "gen_ai.request.model", "invoke_agent": "gen_ai.agent.name",
                "execute_tool": "gen_ai.tool.name"}
SEMCONV_REQUIRED = {"chat": {"gen_ai.operation.name", "gen_ai.provider.name",
                             "gen_ai.request.model"},
                    "invoke_agent": {"gen_ai.operation.name", "gen_ai.provider.name"},
                    "execute_tool": {"gen_ai.operation.name", "gen_ai.tool.name"}}


def semconv(path):
    bad, ops = [], set()
    for s in load(path):
        a = s["attributes"]
        for k in a:
            if k in SEMCONV_DEPRECATED:
                bad.append("%s: deprecated attribute %s" % (s["name"], k))
            elif (k.startswith("gen_ai.") or k.startswith("openai.")) and k not in SEMCONV_ATTRS:
                bad.append("%s: %s is not in the conventions' registry" % (s["name"], k))
        op = a.get("gen_ai.operation.name")
        if op is None:
            continue
        ops.add(op)
        if op in SEMCONV_NAME and s["name"] != "%s %s" % (op, a.get(SEMCONV_NAME[op])):
            bad.append("span %r: want the name '%s {%s}'" % (s["name"], op, SEMCONV_NAME[op]))
        missing = SEMCONV_REQUIRED.get(op, set()) - set(a)
        if missing:
            bad.append("%s: missing %s" % (s["name"], sorted(missing)))
        if op == "chat":
            if s["kind"] != "client":
                bad.append("%s: kind %s, want client" % (s["name"], s["kind"]))
            fr = a.get("gen_ai.response.finish_reasons")
            if s["status"] != "error" and (not isinstance(fr, list) or not fr or
                                           "gen_ai.response.id" not in a):
                bad.append("%s: finish reasons %r, response id %r" % (
                    s["name"], fr, a.get("gen_ai.response.id")))
    for op in ("chat", "invoke_agent", "execute_tool"):
        if op not in ops:
            bad.append("no %s span" % op)
    return bad


def openai(jsonl, bodies):
    spans = load(jsonl)
    items = [i for b in bodies for i in json.load(open(b))["data"]]
    bad = []
    tid = spans[0]["trace_id"]
    traces = [i for i in items if i.get("object") == "trace"]
    if len(traces) != 1 or traces[0]["id"] != "trace_" + tid or \
            traces[0].get("workflow_name") != "sbx run":
        bad.append("trace objects: %s" % traces)
    got = {i["id"]: i for i in items if i.get("object") == "trace.span"}
    if len(got) != len(spans):
        bad.append("%d spans sent, %d in the file" % (len(got), len(spans)))

    def oid(sid):
        return "span_" + sid + tid[:8]

    for s in spans:
        o = got.get(oid(s["span_id"]))
        if not o:
            bad.append("span %s (%s) not sent" % (s["span_id"], s["name"]))
            continue
        want_parent = None if s["name"] == "run" or not s["parent_span_id"] \
            else oid(s["parent_span_id"])
        if o["parent_id"] != want_parent or o["trace_id"] != "trace_" + tid:
            bad.append("%s: parent %s, want %s" % (s["name"], o["parent_id"], want_parent))
        d = o["span_data"]
        a = s["attributes"]
        op = a.get("gen_ai.operation.name")
        want_type = {"invoke_agent": "agent", "execute_tool": "function"}.get(op)
        if op == "chat":
            want_type = "generation" if a.get("openai.api.type") == "chat_completions" \
                else "response"
        if s["name"] == "handoff":
            want_type = "handoff"
        if d.get("type") != (want_type or "custom"):
            bad.append("%s: span_data type %s, want %s" % (s["name"], d.get("type"), want_type))
        keys = SDK_SPAN_DATA.get(d.get("type"))
        if keys is not None and set(d) != keys:
            bad.append("%s: span_data keys %s, the SDK's %s" % (s["name"], sorted(d),
                                                               sorted(keys)))
        if d["type"] == "agent" and (d["name"] != a["gen_ai.agent.name"] or
                                     d["tools"] != a.get("sbx.agent.tools")):
            bad.append("agent %s" % d)
        if d["type"] == "response" and (not d["response_id"] or
                                        d["response_id"] != a.get("gen_ai.response.id")):
            bad.append("response %s" % d)
        if d["type"] == "generation" and (d["model"] != a["gen_ai.request.model"] or d["usage"] != {
                "input_tokens": a["gen_ai.usage.input_tokens"],
                "output_tokens": a["gen_ai.usage.output_tokens"]}):
            bad.append("generation %s" % d)
        if d["type"] == "function" and d["name"] != a["gen_ai.tool.name"]:
            bad.append("function %s" % d)
        if d["type"] == "custom":
            if s["name"] in ("run", "turn"):
                bad += sdk_task_turn(s, d)
            elif d["name"] != s["name"] or d["data"] != a:
                bad.append("custom %s" % d)
        if (o["error"] is not None) != (s["status"] == "error"):
            bad.append("%s: error %s, status %s" % (s["name"], o["error"], s["status"]))
        for k in ("started_at", "ended_at"):
            if not o[k].endswith("Z") or "T" not in o[k]:
                bad.append("%s: %s %s" % (s["name"], k, o[k]))
    return bad


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "tree":
        for b in tree(sys.argv[2]):
            print(b)
    elif cmd == "decode":
        decode(sys.argv[2:])
    elif cmd == "same":
        same(sys.argv[2], sys.argv[3])
    elif cmd == "openai":
        for b in openai(sys.argv[2], sys.argv[3:]):
            print(b)
    elif cmd == "semconv":
        for b in semconv(sys.argv[2]):
            print(b)
