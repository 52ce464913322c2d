#!/usr/bin/env bash
# Model text with terminal escape sequences (issue 9, item 10): on a terminal `sbx run` shows
# them escaped (final output, streamed text, tool lines, errors quoting the model), keeps UTF-8;
# --json and a pipe keep the exact bytes (JSON escapes them).
. "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null || skip_all "python3 is needed for the terminal"
export OPENAI_API_KEY=sk-test-unused
unset OPENAI_BASE_URL

cat >"$T/agent.yaml" <<'YAML'
name: esc
model: gpt-4.1
instructions: test
tools:
  - calculator
YAML
# The model calls the calculator with an OSC 52 clipboard write in its arguments, then answers
# with a screen clear, a title change, a C1 CSI (U+009B) and some UTF-8.
python3 - "$T/rec.jsonl" <<'PY'
import json, sys
calc = {"id": "r1", "object": "response", "status": "completed", "model": "m",
        "output": [{"type": "function_call", "id": "fc1", "call_id": "c1", "name": "calculator",
                    "arguments": '{"expression": "1+\x1b]52;c;cGF3bmVk\x07"}',
                    "status": "completed"}]}
text = "caf\u00e9 \u20ac done\x1b[2J\x1b]0;pwned-title\x07 \u009b31m red\x1b[1;1H"
msg = {"id": "r2", "object": "response", "status": "completed", "model": "m",
       "output": [{"type": "message", "id": "m1", "role": "assistant", "status": "completed",
                   "content": [{"type": "output_text", "text": text, "annotations": []}]}]}
with open(sys.argv[1], "w") as f:
    f.write(json.dumps(calc) + "\n" + json.dumps(msg) + "\n")
PY

on_tty "$T/tty" "$SBX" run -m "replay:$T/rec.jsonl" -a "$T/agent.yaml" "go"
rc=$?
expect_eq "$rc" 0 "the run on a terminal succeeds"
# sbx's own colours (cli.h: red, yellow, dim, reset) are the only escapes it may send; what
# the model wrote never reaches the terminal as one.
own_sgr='import re, sys; d = re.sub(rb"\x1b\[(31|33|2|0)m", b"", open(sys.argv[1], "rb").read())'
if python3 -c "$own_sgr"'; sys.exit(0 if b"\x1b" not in d and b"\xc2\x9b" not in d and b"\x07" not in d else 1)' "$T/tty"; then
    ok "no raw ESC, BEL or C1 byte reaches the terminal"
else
    not_ok "no raw ESC, BEL or C1 byte reaches the terminal"; diag "$(od -c "$T/tty" | head -20)"
fi
expect_in "$T/tty" '\x1b[2J\x1b]0;pwned-title\x07 \u009b31m' "the final output shows the sequences escaped"
expect_in "$T/tty" 'tool calculator({"expression": "1+\x1b]52;c;cGF3bmVk\x07"})' "the tool line shows the model's arguments escaped"
expect_in "$T/tty" "café € done" "UTF-8 text is kept"

# A pipe keeps the exact bytes; --json escapes them in JSON.
run "$SBX" run -m "replay:$T/rec.jsonl" -a "$T/agent.yaml" "go"
expect_rc 0 "the run into a pipe succeeds"
if python3 -c 'import sys; sys.exit(0 if b"\x1b[2J" in open(sys.argv[1], "rb").read() else 1)' "$T/out"; then
    ok "a pipe gets the model's exact bytes"
else
    not_ok "a pipe gets the model's exact bytes"; diag "$(od -c "$T/out" | head)"
fi
on_tty "$T/json" "$SBX" run --json -m "replay:$T/rec.jsonl" -a "$T/agent.yaml" "go"
expect_in "$T/json" 'done\u001B[2J\u001B]0;pwned-title\u0007 \u009b31m' "--json keeps the sequences, JSON-escaped (C1 too)"

# An error message quoting the model: an unknown tool name with an escape in it.
python3 - "$T/bad.jsonl" <<'PY'
import json, sys
r = {"id": "r1", "object": "response", "status": "completed", "model": "m",
     "output": [{"type": "function_call", "id": "fc1", "call_id": "c1",
                 "name": "evil\x1b]0;t\x07", "arguments": "{}", "status": "completed"}]}
open(sys.argv[1], "w").write(json.dumps(r) + "\n")
PY
on_tty "$T/tty2" "$SBX" run --max-turns 2 -m "replay:$T/bad.jsonl" -a "$T/agent.yaml" "go"
if python3 -c "$own_sgr"'; sys.exit(0 if b"\x1b" not in d else 1)' "$T/tty2"; then
    ok "messages quoting a bad tool name carry no raw ESC"
else
    not_ok "messages quoting a bad tool name carry no raw ESC"; diag "$(od -c "$T/tty2" | head -20)"
fi
expect_in "$T/tty2" "tool 'evil\x1b]0;t\x07' not found" "the tool output quoting the name shows it escaped"

# --- the answer is shown once on a terminal ----------------------------------------------------
cat >"$T/once.jsonl" <<'EOF'
{"id":"r1","object":"response","status":"completed","output":[{"type":"message","id":"m","role":"assistant","status":"completed","content":[{"type":"output_text","text":"the answer is 42","annotations":[]}]}]}
EOF
count() { python3 -c 'import sys; print(open(sys.argv[1], "rb").read().count(sys.argv[2].encode()))' "$@"; }
on_tty "$T/once" "$SBX" run -m "replay:$T/once.jsonl" "q"
expect_eq "$?" 0 "a plain run on a terminal succeeds"
expect_eq "$(count "$T/once" "the answer is 42")" 1 "stdout and stderr on one terminal: the answer appears once"
ON_TTY_STDOUT="$T/answer" on_tty "$T/once2" "$SBX" run -m "replay:$T/once.jsonl" "q"
expect_eq "$(cat "$T/answer")" "the answer is 42" "stdout redirected from the terminal still gets the answer"
expect_eq "$(count "$T/once2" "the answer is 42")" 1 "and the terminal shows it as it streamed"
cat >"$T/st.yaml" <<'YAML'
name: st
instructions: answer
output_schema: {type: object, properties: {n: {type: integer}}, required: [n]}
YAML
cat >"$T/st.jsonl" <<'EOF'
{"id":"r1","object":"response","status":"completed","output":[{"type":"message","id":"m","role":"assistant","status":"completed","content":[{"type":"output_text","text":"{ \"n\" : 42 }","annotations":[]}]}]}
EOF
on_tty "$T/st" "$SBX" run -m "replay:$T/st.jsonl" -a "$T/st.yaml" "q"
expect_eq "$?" 0 "a structured run on a terminal succeeds"
expect_eq "$(count "$T/st" '"n"')" 1 "a structured answer is shown once, not again in another form"
run "$SBX" run -m "replay:$T/st.jsonl" -a "$T/st.yaml" "q"
expect_eq "$(cat "$T/out")" '{"n":42}' "on a pipe stdout gets the structured answer as compact JSON"
done_testing
