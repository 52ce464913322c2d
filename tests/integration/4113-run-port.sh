#!/usr/bin/env bash
# sbx run --port N: once something listens on port N in the run's sandbox (a server the agent
# started), the run prints the host URL on stderr (a "port" event with --json), and the URL
# reaches that server while the run goes on. Bad values and runs without a sandbox are usage
# errors.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/model-lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
RUN_PID=
trap '[ -n "$RUN_PID" ] && kill "$RUN_PID" 2>/dev/null; stop_fake; sandbox_cleanup' EXIT

cat >"$T/a.yaml" <<'EOF'
name: Previewer
capabilities: [shell]
manifest: {entries: {site: {type: dir, children: {index.html: {type: file, content: "preview ok\n"}}}}}
EOF
# Turn 1 starts a server (still running when the tool returns); turn 2 waits until the test
# has fetched the page (it leaves .fetched in the workspace); turn 3 answers.
cat >"$T/s.json" <<'EOF'
{"turns": [
 {"response": {"id": "r1", "object": "response", "status": "completed", "output": [{"type": "function_call", "id": "fc1", "call_id": "c1", "name": "exec_command", "arguments": "{\"cmd\": \"cd site && exec python3 -m http.server 8000 --bind 127.0.0.1\", \"yield_time_ms\": 1500}", "status": "completed"}]}},
 {"response": {"id": "r2", "object": "response", "status": "completed", "output": [{"type": "function_call", "id": "fc2", "call_id": "c2", "name": "exec_command", "arguments": "{\"cmd\": \"i=0; while [ ! -e .fetched ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; echo waited\", \"yield_time_ms\": 30000}", "status": "completed"}]}},
 {"response": {"id": "r3", "object": "response", "status": "completed", "output": [{"type": "message", "id": "m", "role": "assistant", "status": "completed", "content": [{"type": "output_text", "text": "served", "annotations": []}]}]}}
]}
EOF
command -v python3 >/dev/null || skip_all "python3 serves the page"
start_fake "$T/s.json"
"$SBX" run --port 8000 --base-url "$FAKE_URL" -a "$T/a.yaml" "serve the site" >"$T/run.out" 2>"$T/run.err" &
RUN_PID=$!
url=
for _ in $(seq 1 300); do
    url=$(sed -n 's/^  port 8000 of sandbox \([0-9a-f]*\): \(http:[^ ]*\)$/\2/p' "$T/run.err")
    [ -n "$url" ] && break
    kill -0 "$RUN_PID" 2>/dev/null || break
    sleep 0.1
done
if [ -n "$url" ]; then ok "the run prints the URL of port 8000"; else not_ok "the run prints the URL of port 8000"; diag "$(cat "$T/run.err")"; fi
id=$(sed -n 's/^  port 8000 of sandbox \([0-9a-f]*\): .*/\1/p' "$T/run.err")
page=$(python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode().strip())' "$url/index.html" 2>&1)
expect_eq "$page" "preview ok" "the URL reaches the server in the sandbox"
[ -n "$id" ] && touch "$SBX_WORKSPACES/$id/.fetched"
wait "$RUN_PID"
rc=$?
RUN_PID=
expect_eq "$rc" 0 "the run finishes"
expect_eq "$(grep -c '^  port 8000' "$T/run.err")" 1 "the URL is printed once"
expect_eq "$(cat "$T/run.out")" "served" "with its answer"

# --json: a port event.
start_fake "$T/s.json"
"$SBX" run --json --port 8000 --base-url "$FAKE_URL" -a "$T/a.yaml" "serve the site" >"$T/run.out" 2>"$T/run.err" &
RUN_PID=$!
ev=
for _ in $(seq 1 300); do
    ev=$(grep '"type":"port"' "$T/run.out")
    [ -n "$ev" ] && break
    kill -0 "$RUN_PID" 2>/dev/null || break
    sleep 0.1
done
expect_eq "$(python3 -c 'import json,sys; e=json.loads(sys.argv[1]); print(e["port"], e["url"].startswith("http://"), e["agent"])' "$ev" 2>&1)" \
    "8000 True Previewer" "--json: a port event with the port, the URL and the agent"
id=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["sandbox"])' "$ev" 2>/dev/null)
[ -n "$id" ] && touch "$SBX_WORKSPACES/$id/.fetched"
wait "$RUN_PID"
rc=$?
RUN_PID=
expect_eq "$rc" 0 "the --json run finishes"

# --port --keep: the server the agent started keeps serving after the run, in the kept sandbox.
start_fake "$T/s.json"
"$SBX" run --keep --port 8000 --base-url "$FAKE_URL" -a "$T/a.yaml" "serve the site" >"$T/run.out" 2>"$T/run.err" &
RUN_PID=$!
url=
for _ in $(seq 1 300); do
    url=$(sed -n 's/^  port 8000 of sandbox \([0-9a-f]*\): \(http:[^ ]*\)$/\2/p' "$T/run.err")
    [ -n "$url" ] && break
    kill -0 "$RUN_PID" 2>/dev/null || break
    sleep 0.1
done
id=$(sed -n 's/^  port 8000 of sandbox \([0-9a-f]*\): .*/\1/p' "$T/run.err")
[ -n "$id" ] && touch "$SBX_WORKSPACES/$id/.fetched"
wait "$RUN_PID"
rc=$?
RUN_PID=
expect_eq "$rc" 0 "the --keep run finishes"
expect_in "$T/run.err" "kept sandbox $id" "and keeps its sandbox"
run "$SBX" sandbox port "$id" 8000
expect_rc 0 "after the run, port 8000 of the kept sandbox still has a listener"
page=$(python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode().strip())' "$(head -n1 "$T/out")/index.html" 2>&1)
expect_eq "$page" "preview ok" "and the server the agent started still answers"
page=$(python3 -c 'import sys, urllib.request; [urllib.request.urlopen(sys.argv[1], timeout=10).read() for _ in range(200)]; print("many")' "$(head -n1 "$T/out")/index.html" 2>&1)
expect_eq "$page" "many" "many requests later (its log output is drained, never blocks it)"
run "$SBX" sandbox rm "$id"
expect_rc 0 "rm ends it with the sandbox"

run "$SBX" run --port 0 -a "$T/a.yaml" x
expect_rc 2 "--port 0 is a usage error"
expect_in "$T/err" "--port wants a port number 1 to 65535, not '0'" "naming the value"
run "$SBX" run -m "replay:$T/none" --port 8000 x
expect_rc 2 "--port without a sandbox is a usage error"
expect_in "$T/err" "--port needs a sandbox" "saying why"
expect_eq "$(ls "$RUNBASE" 2>/dev/null | wc -l)" 0 "no sandbox is left"
done_testing
