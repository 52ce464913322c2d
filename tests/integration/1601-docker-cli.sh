#!/usr/bin/env bash
# The Docker provider through the real binary: sbx sandbox create --provider docker --image IMG,
# then exec, cp in and out, port (a relay into the container's network namespace), ps, stop,
# start and rm by id, and the errors users hit. Engine and image: docker-lib.sh (run once
# against dockerd and once against podman). Traffic goes only to 127.0.0.1.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
. "$(dirname "$0")/docker-lib.sh"

cat >"$T/m.yaml" <<'EOF'
version: 1
entries:
  hello.txt:
    type: file
    content: "hello from the manifest\n"
EOF

run "$SBX" sandbox create --provider docker --image "$IMG" --docker-host "unix://$H" \
    --manifest "$T/m.yaml"
expect_rc 0 "create --provider docker --image IMG --manifest M"
id=$(head -n1 "$T/out")
echo "$id" >>"$T/ids"
[ -n "$id" ] && ok "create printed an id ($id)" || not_ok "create printed an id"
expect_eq "$(containers_of "$id" | grep -c "\"io.sbx.id\":\"$id\"")" 1 "one container carries its label"

# What the container may do to the host, as the engine was told: no logs kept on the host disk,
# no network, no privilege gain, the limits.
api "http://d/v1.41/containers/sbx-$id/json" >"$T/inspect.json"
hc() { python3 -c 'import json,sys; h=json.load(open(sys.argv[1]))["HostConfig"]; print(eval(sys.argv[2]))' "$T/inspect.json" "$1"; }
expect_eq "$(hc 'h["LogConfig"]["Type"]')" "none" "the engine keeps no log of the sandbox on the host"
expect_eq "$(hc 'h["NetworkMode"]')" "none" "network none by default"
expect_eq "$(hc '"no-new-privileges" in " ".join(h["SecurityOpt"] or [])')" "True" "no-new-privileges"
expect_eq "$(hc 'h["PidsLimit"]')" "1024" "the default process limit"
expect_eq "$(hc 'h["Privileged"]')" "False" "not privileged"

# The writable layer's size (issue 26): limited where the storage driver can (StorageOpt), and
# where it cannot, said at create and in ps --json, never silently unlimited.
"$SBX" sandbox ps --json >"$T/ps.json" 2>/dev/null
disk=$(python3 -c 'import json,sys; s=[x for x in json.load(open(sys.argv[1])) if x["id"] == sys.argv[2]][0]; d=s.get("disk") or {}; print(d.get("limit"), d.get("enforced"), [u["name"] for u in s.get("unenforced", [])])' "$T/ps.json" "$id" 2>&1)
if [ "$(hc '(h.get("StorageOpt") or {}).get("size")')" = 8589934592 ]; then
    expect_eq "$disk" "8589934592 True []" "the writable layer is limited to 8 GiB"
    expect_not_in "$T/err" "not enforced" "and create does not warn"
else
    expect_eq "$disk" "8589934592 False ['disk']" "ps --json lists the disk limit as not enforced"
    expect_in "$T/err" "disk limit 8 GiB is not enforced" "and create said so"
    run "$SBX" sandbox create --provider docker --image "$IMG" --docker-host "unix://$H" --disk 1G
    expect_rc 1 "an explicit --disk the engine cannot enforce fails"
    expect_in "$T/err" "disk limit 1 GiB cannot be enforced by this engine" "saying why"
    [ -s "$T/out" ] && echo "$(head -n1 "$T/out")" >>"$T/ids"
    # Other tests share the engine and make containers meanwhile: count those of this create,
    # the only one with an explicit 1 GiB disk in its options.
    n=$(api -G "http://d/v1.41/containers/json" --data-urlencode all=1 \
        --data-urlencode 'filters={"label":["io.sbx.id"]}' | python3 -c '
import json, sys
print(sum(1 for c in json.load(sys.stdin)
          if json.loads((c.get("Labels") or {}).get("io.sbx.options") or "{}").get("disk") == 1 << 30))')
    expect_eq "$n" 0 "and leaves no container"
fi

run "$SBX" sandbox exec "$id" -- cat hello.txt
expect_rc 0 "exec by id (found through DOCKER_HOST)"
expect_eq "$(cat "$T/out")" "hello from the manifest" "the manifest was materialised in the container"
run "$SBX" sandbox exec "$id" -- sh -c 'echo out; echo err >&2; exit 3'
expect_rc 3 "exec passes the command's status"
expect_eq "$(cat "$T/out")/$(cat "$T/err")" "out/err" "and its stdout and stderr apart"

printf 'copied in\n' >"$T/in.txt"
run "$SBX" sandbox cp "$T/in.txt" "$id:in.txt"
expect_rc 0 "cp host -> sandbox"
run "$SBX" sandbox exec "$id" -- cat in.txt
expect_eq "$(cat "$T/out")" "copied in" "the file is in the container"
run "$SBX" sandbox cp --docker-host "unix://$H" "$id:hello.txt" "$T/back.txt"
expect_rc 0 "cp sandbox -> host (--docker-host)"
expect_eq "$(cat "$T/back.txt" 2>/dev/null)" "hello from the manifest" "with the file's content"

run "$SBX" sandbox port "$id" 8000
expect_rc 1 "port of a port nothing listens on fails"
expect_in "$T/err" "nothing listens on port 8000" "and says so"
expect_eq "$(relays_of "$id" | wc -l)" 0 "and starts no relay"

# Servers on 127.0.0.1:8000 and 8001 inside; the URL is a relay on this host's loopback.
run "$SBX" sandbox exec --keep-background "$id" -- \
    sh -c 'for p in 8000 8001; do python3 -m http.server $p --bind 127.0.0.1 >/dev/null 2>&1 & done'
expect_rc 0 "servers started in the sandbox"
resolved() { "$SBX" sandbox port "$id" "$1" >"$T/out" 2>"$T/err"; }
wait_until resolved 8000; rc=$?
expect_rc 0 "port ID 8000"
url=$(cat "$T/out")
case $url in http://127.0.0.1:[0-9]*) ok "the URL is on 127.0.0.1 ($url)" ;; *) not_ok "the URL is on 127.0.0.1 ($url)" ;; esac
fetch() { curl -s --max-time 5 "$url/hello.txt" >"$T/page" 2>/dev/null && grep -q "hello from" "$T/page"; }
if wait_until fetch; then ok "curl through the relay reaches the server inside"; else
    not_ok "curl through the relay reaches the server inside"; diag "$(cat "$T/page" 2>/dev/null)"
fi
# The relay serves its owner (and root) only (issue 26): another local user is cut off.
other=${SBX_TEST_USER:-sbx-ci}
if [ "$(id -u)" = 0 ] && id "$other" >/dev/null 2>&1 && command -v setpriv >/dev/null; then
    setpriv --reuid="$other" --regid="$(id -g "$other")" --clear-groups \
        curl -s --max-time 5 "$url/hello.txt" >"$T/page" 2>/dev/null
    expect_not_in "$T/page" "hello from" "another local user gets nothing through the relay"
else
    ok "# SKIP another user's view needs root, setpriv and the user '$other'"
fi
run "$SBX" sandbox port "$id" 8000
expect_eq "$(cat "$T/out")" "$url" "the same port again: the same relay"
expect_eq "$(relays_of "$id" | wc -l)" 1 "one relay process"
# Two resolves of a new port at once: one relay, both get its URL. (8001 is 1F41 in the table.)
listens_8001() { "$SBX" sandbox exec "$id" -- grep -q ':1F41 00000000:0000 0A' /proc/net/tcp; }
wait_until listens_8001
"$SBX" sandbox port "$id" 8001 >"$T/p1" 2>&1 &
p1=$!
"$SBX" sandbox port "$id" 8001 >"$T/p2" 2>&1
wait "$p1"
expect_eq "$(cat "$T/p1")" "$(cat "$T/p2")" "two concurrent resolves of a port agree"
expect_eq "$(relays_of "$id" | wc -l)" 2 "and started one relay for it"

run "$SBX" sandbox ps
expect_rc 0 "ps"
if grep -E "^$id +docker " "$T/out" >/dev/null; then ok "ps lists it with provider docker"; else
    not_ok "ps lists it with provider docker"; diag "$(cat "$T/out")"
fi
run "$SBX" sandbox ps --all
expect_rc 0 "ps --all (a provider without leftovers lists its live ones)"
if grep -E "^$id +docker " "$T/out" >/dev/null; then ok "ps --all lists it too"; else
    not_ok "ps --all lists it too"; diag "$(cat "$T/out" "$T/err")"
fi
run "$SBX" sandbox ps --json --provider docker
expect_rc 0 "ps --json --provider docker"
got=$(python3 -c 'import json,sys; l=json.load(open(sys.argv[1])); print([e.get("provider") for e in l if e.get("id")==sys.argv[2]])' "$T/out" "$id" 2>&1)
expect_eq "$got" "['docker']" "its entry has \"provider\": \"docker\""

run "$SBX" sandbox stop "$id"
expect_rc 0 "stop"
if wait_until no_relay "$id"; then ok "the relay ended with the container's init"; else
    not_ok "the relay ended with the container's init"; diag "$(relays_of "$id")"
fi
run "$SBX" sandbox exec "$id" -- true
[ "$rc" != 0 ] && ok "a stopped sandbox runs nothing" || not_ok "a stopped sandbox runs nothing"
run "$SBX" sandbox ps --all
grep -E "^$id " "$T/out" >"$T/row"
expect_in "$T/row" "(stopped: workspace kept by docker)" "ps --all says the stopped container keeps the workspace"
expect_not_in "$T/row" "(null)" "and never prints a missing snapshot as (null)"
run "$SBX" sandbox start "$id"
expect_rc 0 "start"
run "$SBX" sandbox exec "$id" -- cat in.txt
expect_eq "$(cat "$T/out")" "copied in" "after start the workspace is as it was"

# The old relay's record is stale now (another init): a new relay serves the port.
run "$SBX" sandbox exec --keep-background "$id" -- \
    sh -c 'python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 &'
wait_until resolved 8000; rc=$?
expect_rc 0 "port after start"
url=$(cat "$T/out")
if wait_until fetch; then ok "a new relay reaches the restarted server"; else
    not_ok "a new relay reaches the restarted server"; diag "$url" "$(cat "$T/page" 2>/dev/null)"
fi
expect_eq "$(relays_of "$id" | wc -l)" 1 "one relay process again"

# Seeing it and copying trees (issue 32): the engine's stats through the stats trait, no log
# trait (said so), a directory both ways.
run "$SBX" sandbox stats --no-stream --json "$id"
expect_rc 0 "stats of a docker sandbox"
python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))[0]; assert r["provider"]=="docker" and r["memory"]>0 and r["pids"]>=1 and r["cpu_ns"]>0 and r["disk"] is None, r' "$T/out" &&
    ok "from the engine: memory, processes, CPU time (no host workspace to measure)" || { not_ok "from the engine: memory, processes, CPU time"; diag "$(cat "$T/out" "$T/err")"; }
run "$SBX" sandbox logs "$id"
expect_rc 1 "logs of a provider without the logs trait fails"
expect_in "$T/err" "provider 'docker' keeps no sandbox log" "saying so"
mkdir -p "$T/tree/a" && echo deep >"$T/tree/a/f" && chmod 750 "$T/tree/a"
run "$SBX" sandbox cp -r "$T/tree" "$id:"
expect_rc 0 "cp -r a directory into a docker sandbox"
run "$SBX" sandbox exec "$id" -- sh -c 'stat -c %a tree/a; cat tree/a/f'
expect_eq "$(cat "$T/out" | tr '\n' ' ')" "750 deep " "with its modes"
run "$SBX" sandbox cp "$id:tree" "$T/tree-back"
expect_eq "$(cat "$T/tree-back/a/f" 2>/dev/null)" deep "and back out"

run "$SBX" sandbox rm "$id"
expect_rc 0 "rm"
expect_eq "$(containers_of "$id" | tr -d ' \n')" "[]" "no container with its label is left"
if wait_until no_relay "$id"; then ok "no relay process is left"; else not_ok "no relay process is left"; fi
run "$SBX" sandbox ps --json
if grep -q "\"$id\"" "$T/out"; then not_ok "ps no longer lists it"; else ok "ps no longer lists it"; fi
run "$SBX" sandbox exec "$id" -- true
expect_rc 125 "exec of the removed id fails"
expect_in "$T/err" "$id" "naming the id"

# A sandbox made with --docker-host is found by id later without it: sbx recorded its provider
# and engine (never more), ps shows it once, and rm forgets it.
count_in_ps() { python3 -c 'import json,sys; print(sum(1 for e in json.load(open(sys.argv[1])) if e.get("id") == sys.argv[2] and e.get("provider") == "docker"))' "$T/out" "$1" 2>&1; }
run env -u DOCKER_HOST "$SBX" sandbox create --provider docker --image "$IMG" --docker-host "unix://$H"
expect_rc 0 "create with --docker-host and no DOCKER_HOST"
id2=$(head -n1 "$T/out")
echo "$id2" >>"$T/ids"
expect_eq "$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["provider"], r["options"])' "$SBX_RECORDS/$id2.json" 2>&1)" \
    "docker {'host': 'unix://$H'}" "its record names the provider and the engine only"
run env -u DOCKER_HOST "$SBX" sandbox exec "$id2" -- echo found
expect_rc 0 "exec by id without --docker-host or DOCKER_HOST"
expect_eq "$(cat "$T/out")" "found" "reaches the sandbox through its record"
run env -u DOCKER_HOST "$SBX" sandbox ps --json
expect_eq "$(count_in_ps "$id2")" 1 "ps lists the recorded sandbox once"
run "$SBX" sandbox ps --json
expect_eq "$(count_in_ps "$id2")" 1 "and once when the engine is also configured"
run env -u DOCKER_HOST "$SBX" sandbox rm "$id2"
expect_rc 0 "rm by id through the record"
[ ! -e "$SBX_RECORDS/$id2.json" ] && ok "rm forgets the record" || not_ok "rm forgets the record"
run "$SBX" sandbox create --provider docker --image "$IMG"
id4=$(head -n1 "$T/out")
echo "$id4" >>"$T/ids"
expect_eq "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["options"])' "$SBX_RECORDS/$id4.json" 2>&1)" \
    "{'host': 'unix://$H'}" "the engine DOCKER_HOST named is recorded too"
run env -u DOCKER_HOST "$SBX" sandbox rm "$id4"
expect_rc 0 "and reaches the sandbox when DOCKER_HOST is gone"
run env -u DOCKER_HOST "$SBX" sandbox create --provider docker --image "$IMG" --docker-host "unix://$H"
id3=$(head -n1 "$T/out")
echo "$id3" >>"$T/ids"
for c in $(containers_of "$id3" | grep -o '"Id":"[0-9a-f]*"' | cut -d'"' -f4); do
    api -X DELETE "http://d/v1.41/containers/$c?force=1" >/dev/null
done
run env -u DOCKER_HOST "$SBX" sandbox ps --json
expect_eq "$(count_in_ps "$id3")" 0 "a sandbox removed behind sbx's back is not listed"
[ ! -e "$SBX_RECORDS/$id3.json" ] && ok "and its record is dropped" || not_ok "and its record is dropped"

# Errors.
run "$SBX" sandbox create --provider docker
expect_rc 2 "--provider docker without --image is a usage error"
expect_in "$T/err" "--image" "naming --image"
run "$SBX" sandbox create --provider nope --image "$IMG"
expect_rc 2 "an unknown provider is a usage error"
expect_in "$T/err" "unknown provider 'nope' (local, docker" "listing the providers"
run "$SBX" sandbox create --provider docker --image "$IMG" --ro /tmp
expect_rc 2 "a local-only option with --provider docker is a usage error"
expect_in "$T/err" "'--ro'" "naming the option"
run "$SBX" sandbox create --image "$IMG"
expect_rc 2 "a docker option without --provider docker is a usage error"
expect_in "$T/err" "'--image'" "naming the option"
run "$SBX" sandbox create --provider docker --image "$IMG" --docker-host "unix://$T/no-engine.sock"
expect_rc 1 "an engine that is not there"
expect_in "$T/err" "$T/no-engine.sock" "is named in the message"
run "$SBX" sandbox create --provider docker --image sbx-no-such-image:0
expect_rc 1 "an image the engine does not have"
expect_in "$T/err" "sbx-no-such-image:0" "is named"
if grep -qi "pull" "$T/err"; then ok "and the message says sbx never pulls and how to get it"; else
    not_ok "and the message says sbx never pulls and how to get it"; diag "$(cat "$T/err")"
fi
# Mounts: the provider declares it mounts no storage; refused before a container exists, with why.
printf 'entries:\n  docs: {type: s3_mount, bucket: b, endpoint_url: "http://127.0.0.1:9"}\n' >"$T/mnt.yaml"
# Other tests make containers on the same engine meanwhile: this create alone asks for 777 MiB,
# and no container may carry that limit.
containers_with_777m() {
    api "http://d/v1.41/containers/json?all=1" | python3 -c '
import json, sys
print(sum(1 for c in json.load(sys.stdin)
          if json.loads((c.get("Labels") or {}).get("io.sbx.options") or "{}").get("memory") == 777 << 20))'
}
run "$SBX" sandbox create --provider docker --image "$IMG" --memory 777M --manifest "$T/mnt.yaml"
expect_rc 1 "a manifest with a mount is refused by the docker provider"
expect_in "$T/err" "entry 'docs' (s3_mount): the docker provider cannot mount it: sbx mounts buckets with rclone on the host" \
    "naming the entry and the provider's declared reason"
expect_eq "$(containers_with_777m)" 0 "no container was made for it"
printf 'name: M\ncapabilities: [shell]\nmanifest: mnt.yaml\n' >"$T/mnt-agent.yaml"
printf '%s\n' '{"id":"r1","output":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"never"}]}]}' >"$T/none.jsonl"
run "$SBX" run -m "replay:$T/none.jsonl" --provider docker --image "$IMG" -a "$T/mnt-agent.yaml" "go"
expect_rc 1 "sbx run --provider docker refuses an agent whose manifest mounts storage"
expect_in "$T/err" "agent file '$T/mnt-agent.yaml': field 'manifest': entry 'docs' (s3_mount): the docker provider cannot mount it" \
    "before the model is asked, naming the agent file"

run env DOCKER_HOST="unix://$T/no-engine.sock" "$SBX" sandbox ps
expect_rc 0 "ps with an engine that does not answer still lists the local sandboxes"
expect_eq "$(grep -c 'warning: docker sandboxes not listed' "$T/err")" 1 "with a one-line warning"
run env DOCKER_HOST="unix://$T/no-engine.sock" "$SBX" sandbox ps --provider docker
expect_rc 1 "ps --provider docker with that engine fails"
DOCKER_HOST= nothing_left "nothing of the test's local sandboxes is left"

# A name and labels for a docker sandbox: recorded, found by name, filtered.
run "$SBX" sandbox create --provider docker --image "$IMG" --name "dk-$$" --label engine=x
expect_rc 0 "create --name --label with docker"
nid=$(cat "$T/out")
echo "$nid" >>"$T/ids"
run "$SBX" sandbox exec "dk-$$" -- true
expect_rc 0 "exec by name reaches the container"
run "$SBX" sandbox ps -q --filter label=engine=x
expect_eq "$(cat "$T/out")" "$nid" "ps --filter label finds it"
run "$SBX" sandbox rm "dk-$$"
expect_rc 0 "rm by name"
done_testing
