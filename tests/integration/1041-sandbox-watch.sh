#!/usr/bin/env bash
# Seeing a sandbox: sbx sandbox stats (CPU, memory, processes and disk from the sandbox's
# cgroups and workspace; once, refreshed, as JSON), logs (its supervisor's log, followed with
# -f until the sandbox goes) and inspect (ps --json and the session state in one document).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"

# Limits where this user may set them (an unprivileged user on cgroup v1 has no cgroups).
limits=(--memory 256M --pids 300)
[ "$(id -u)" = 0 ] || limits=()
run "$SBX" sandbox create --name watched "${limits[@]}"
expect_rc 0 "create a sandbox (with limits as root)"
id=$(cat "$T/out")
# 3 MiB of files and a process that stays.
run "$SBX" sandbox exec --keep-background watched -- sh -c \
    'head -c 3145728 /dev/urandom > blob; sleep 100000 >/dev/null 2>&1 &'
expect_rc 0 "files and a background process in it"

run "$SBX" sandbox stats --no-stream --json watched
expect_rc 0 "stats --no-stream --json"
if python3 - "$T/out" "$id" "${#limits[@]}" <<'PY'; then ok "stats: memory, pids and disk with their limits"; else not_ok "stats: memory, pids and disk with their limits"; diag "$(cat "$T/out" "$T/err")"; fi
import json, sys
rows = json.loads(open(sys.argv[1]).read())
assert len(rows) == 1, rows
r = rows[0]
assert r["id"] == sys.argv[2] and r["name"] == "watched", r
assert r["provider"] == "local", r
# cgroups may be missing for an unprivileged run: then the figures are null, never wrong
limited = sys.argv[3] != "0"
if limited:
    assert r["memory"] is not None and r["pids"] is not None, r
if r["memory"] is not None:
    assert r["memory"] > 0 and (not limited or r["memory_limit"] == 256 << 20), r
if r["pids"] is not None:
    assert r["pids"] >= 1 and (not limited or r["pids_limit"] >= 300), r  # plus sbx's own
assert r["disk"] >= 3 << 20, r          # the blob's blocks
assert r["disk"] < 64 << 20, r
assert r["cpu_percent"] is None or r["cpu_percent"] >= 0, r
PY
run "$SBX" sandbox stats --no-stream
expect_rc 0 "stats --no-stream: a table of every live sandbox"
head -1 "$T/out" | grep -qE '^ID +NAME +CPU % +MEM USAGE / LIMIT +MEM % +PIDS +DISK / LIMIT$' &&
    ok "with docker's columns and DISK" || { not_ok "with docker's columns and DISK"; diag "$(cat "$T/out")"; }
grep -qE "^$id +watched " "$T/out" && ok "and the sandbox's row" || { not_ok "and the sandbox's row"; diag "$(cat "$T/out")"; }
# Refreshed by default: a reading after a reading, until the reader leaves (as docker stats).
"$SBX" sandbox stats "$id" 2>"$T/err" | head -4 >"$T/stream"
expect_eq "$(grep -c '^ID ' "$T/stream")" 2 "stats streams: a new reading each second"
run "$SBX" sandbox stats --no-stream nope
expect_rc 1 "stats of an unknown sandbox fails"
expect_in "$T/err" "'nope'" "naming it"

# logs: the supervisor's, whole lines, control characters escaped on a terminal.
run "$SBX" sandbox logs watched
expect_rc 0 "logs"
expect_in "$T/out" "sandbox '$id' serving" "it is the supervisor's log"
[ "$(tail -c 1 "$T/out" | od -An -c | tr -d ' ')" = '\n' ] && ok "the last line ends" || not_ok "the last line ends"
run "$SBX" sandbox logs --tail 1 watched
expect_eq "$(wc -l <"$T/out")" 1 "--tail 1: one line"
run "$SBX" sandbox logs --tail x watched
expect_rc 2 "a bad --tail is a usage error"
# -f follows until the sandbox is removed.
"$SBX" sandbox logs -f "$id" >"$T/follow" 2>&1 &
follower=$!
seen() { grep -q "serving" "$T/follow"; }
wait_until seen
run "$SBX" sandbox rm "$id"
wait "$follower"
expect_eq "$?" 0 "logs -f ends with status 0 when the sandbox is removed"

# inspect: ps --json and the state in one document, for a live and a stopped sandbox.
run "$SBX" sandbox create --name insp --label k=v
sid=$(cat "$T/out")
run "$SBX" sandbox inspect insp
expect_rc 0 "inspect by name"
if python3 - "$T/out" "$sid" <<'PY'; then ok "inspect: status, name, labels, state, record"; else not_ok "inspect: status, name, labels, state, record"; diag "$(head -c 2000 "$T/out")"; fi
import json, sys
d = json.load(open(sys.argv[1]))
assert isinstance(d, list) and len(d) == 1
d = d[0]
assert d["id"] == sys.argv[2] and d["status"] == "live" and d["name"] == "insp"
assert d["labels"] == {"k": "v"} and "limits" in d and "options" in d
assert d["session_state"]["id"] == sys.argv[2] and d["record"]["name"] == "insp"
PY
"$SBX" sandbox stop insp >/dev/null
run "$SBX" sandbox inspect "$sid" nope
expect_rc 1 "inspect with an unknown id fails"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert len(d)==1 and d[0]["status"]=="stopped" and d[0]["snapshot"]' "$T/out" &&
    ok "but prints the others: a stopped one with its snapshot" || { not_ok "but prints the others: a stopped one with its snapshot"; diag "$(head -c 1500 "$T/out")"; }
run "$SBX" sandbox stats --no-stream insp
expect_rc 1 "stats of a stopped sandbox fails (nothing runs)"
run "$SBX" sandbox rm insp
done_testing
