# Shared set-up of the run state tests (41xx: sbx run --state / --resume, sbx state). Source
# after lib.sh, model-lib.sh and sandbox-lib.sh.
#   mk OUT 'TURNS'      a fake-model script; TURNS is a Python list built with resp / fcall /
#                       msg (Responses) and chat_msg (Chat Completions); E is the environment
#   outputs N           the output of the last tool call the model saw in request N (0-based)
#   sfield FILE EXPR    a field of a JSON file (Python expression over s)
#   live                how many sandboxes of this test are live
#   the_id              the id of the (first) live sandbox
cat >"$T/mk.py" <<'EOF'
import json, os, sys
E = os.environ
def resp(i, *items):
    return {"response": {"id": "r%s" % i, "object": "response", "status": "completed",
                         "output": list(items), "usage": {"input_tokens": 10,
                         "output_tokens": 2, "total_tokens": 12}}}
def fcall(i, name, args):
    return {"type": "function_call", "id": "fc_%s" % i, "call_id": "c%s" % i, "name": name,
            "arguments": json.dumps(args), "status": "completed"}
def sh(i, cmd):
    return fcall(i, "exec_command", {"cmd": cmd})
def msg(text):
    return {"type": "message", "id": "m", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}
def chat_msg(text):
    return {"chat": {"id": "cc1", "object": "chat.completion",
                     "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                  "finish_reason": "stop"}],
                     "usage": {"prompt_tokens": 7, "completion_tokens": 3}}}
json.dump({"turns": eval(sys.argv[2])}, open(sys.argv[1], "w"))
EOF
mk() { python3 "$T/mk.py" "$@"; }
outputs() { fake_query "(lambda i: i[-1].get('output') if 'input' in reqs[$1]['body'] else reqs[$1]['body']['messages'][-1].get('content'))(reqs[$1]['body'].get('input'))"; }
sfield() {
    python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}
live() { ls "$RUNBASE" 2>/dev/null | wc -l; }
the_id() { ls "$RUNBASE" 2>/dev/null | head -n1; }
