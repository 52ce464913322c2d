#!/usr/bin/env bash
# sbx run --provider docker --keep --port 8000: a server the agent started with exec_command
# (still running when the run ends) keeps serving in the kept container after the run; rm ends
# it. Engine and image as in 1601 (docker-lib.sh); the model is the fake server.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/model-lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
. "$(dirname "$0")/docker-lib.sh"
RUN_PID=
trap '[ -n "$RUN_PID" ] && kill "$RUN_PID" 2>/dev/null; stop_fake; docker_cleanup' EXIT

cat >"$T/a.yaml" <<'YAML'
name: Previewer
capabilities: [shell]
manifest: {entries: {site: {type: dir, children: {index.html: {type: file, content: "preview ok\n"}}}}}
YAML
# Turn 1 starts the server (running when the tool returns); turn 2 answers.
mk "$T/s.json" '[resp(1, fcall(1, "exec_command", {"cmd": "cd site && exec python3 -m http.server 8000 --bind 127.0.0.1", "yield_time_ms": 1500})),
                 resp(2, msg("served"))]'
start_fake "$T/s.json"
run "$SBX" run --provider docker --image "$IMG" --keep --port 8000 --base-url "$FAKE_URL" -a "$T/a.yaml" "serve"
expect_rc 0 "the --keep run finishes"
id=$(sed -n "s/^kept sandbox \([0-9a-f]*\) (agent 'Previewer')$/\1/p" "$T/err")
echo "$id" >>"$T/ids"
[ -n "$id" ] && ok "and keeps its container ($id)" || not_ok "and keeps its container"
resolved() { "$SBX" sandbox port "$id" 8000 >"$T/out" 2>"$T/err"; }
if wait_until resolved; then ok "after the run, port 8000 of the kept sandbox has a listener"; else
    not_ok "after the run, port 8000 of the kept sandbox has a listener"; diag "$(cat "$T/err")"
fi
page=$(python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode().strip())' "$(head -n1 "$T/out")/index.html" 2>&1)
expect_eq "$page" "preview ok" "the server the agent started still answers"
page=$(python3 -c 'import sys, urllib.request; [urllib.request.urlopen(sys.argv[1], timeout=10).read() for _ in range(200)]; print("many")' "$(head -n1 "$T/out")/index.html" 2>&1)
expect_eq "$page" "many" "200 requests later too (nothing it writes blocks it)"
run "$SBX" sandbox rm "$id"
expect_rc 0 "rm ends it with the container"

done_testing
