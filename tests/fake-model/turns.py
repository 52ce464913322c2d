"""Scripted model turns for tests/fake-model/fake-model.py, shared by the integration tests.

    python3 turns.py OUT 'TURNS' [EXTRA.py]

writes {"turns": TURNS} to OUT, TURNS being a Python expression built with the helpers below
(tests call it through `mk` in tests/integration/model-lib.sh). EXTRA.py, if given, is run
first in the same namespace, for a test's own helpers (it may redefine these).

    resp(i, *items)         a Responses turn with id "r<i>" whose output is items
    fcall(i, name, args)    a function call "c<i>"; args a dict (sent as JSON) or a string
    ccall(i, name, text)    a custom tool call "c<i>" with free-form input
    pcall(i, op)            an apply_patch call "c<i>" with operation op
    sh(i, cmd)              fcall(i, "exec_command", {"cmd": cmd})
    msg(text)               an assistant message
    when(text, turn)        turn, taken only by a request whose body holds text
    chat_msg(text)          a Chat Completions turn answering text
    E                       the environment (os.environ)
    USAGE                   if EXTRA.py sets it, the usage every resp() turn reports
"""
import json
import os
import sys

E = os.environ
USAGE = None


def resp(i, *items):
    r = {"id": "r%s" % i, "object": "response", "status": "completed", "output": list(items)}
    if USAGE is not None:
        r["usage"] = USAGE
    return {"response": r}


def fcall(i, name, args):
    a = args if isinstance(args, str) else json.dumps(args)
    return {"type": "function_call", "id": "fc_%s" % i, "call_id": "c%s" % i, "name": name,
            "arguments": a, "status": "completed"}


def ccall(i, name, text):
    return {"type": "custom_tool_call", "id": "ct_%s" % i, "call_id": "c%s" % i, "name": name,
            "input": text}


def pcall(i, op):
    return {"type": "apply_patch_call", "id": "ap_%s" % i, "call_id": "c%s" % i,
            "status": "completed", "operation": op}


def sh(i, cmd):
    return fcall(i, "exec_command", {"cmd": cmd})


def when(text, turn):
    return dict(turn, match=text)


def msg(text):
    return {"type": "message", "id": "m", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def chat_msg(text):
    return {"chat": {"id": "cc1", "object": "chat.completion",
                     "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                  "finish_reason": "stop"}],
                     "usage": {"prompt_tokens": 7, "completion_tokens": 3}}}


if __name__ == "__main__":
    if len(sys.argv) > 3:
        with open(sys.argv[3]) as f:
            exec(f.read(), globals())
    with open(sys.argv[1], "w") as f:
        json.dump({"turns": eval(sys.argv[2])}, f)
