#!/usr/bin/env bash
# Conversations across runs: `sbx run --conversation NAME` sends the stored history first and
# stores each completed turn; `sbx conversation ls|show|rm`; hostile names and databases.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/model-lib.sh"

call() {
    printf '{"type":"function_call","id":"fc_%s","call_id":"%s","name":"%s","arguments":%s,"status":"completed"}' "$1" "$1" "$2" "$3"
}
msg() {
    printf '{"type":"message","id":"msg_%s","role":"assistant","status":"completed","content":[{"type":"output_text","text":%s,"annotations":[]}]}' "$1" "$2"
}
resp() {
    local id=$1; shift
    local IFS=,
    printf '{"response":{"id":"%s","object":"response","status":"completed","output":[%s]}}' "$id" "$*"
}
export SBX_CONVERSATIONS="$T/conv/conversations.db"
# python3 over the stored items, as `sbx conversation show --json` prints them.
items_query() {
    "$SBX" conversation show --json "$1" | python3 -c "import json,sys; items=json.load(sys.stdin); print($2)"
}

# --- two runs: the second request carries the first run's items ---
cat >"$T/s1.json" <<EOF
{"turns": [$(resp r1 "$(msg a '"Paris."')"), $(resp r2 "$(msg b '"About 2.1 million."')")]}
EOF
start_fake "$T/s1.json"
run "$SBX" run --base-url "$FAKE_URL" --conversation trip "capital of France?"
expect_rc 0 "first run with --conversation succeeds"
expect_eq "$(cat "$T/out")" "Paris." "first answer"
run "$SBX" run --base-url "$FAKE_URL" --conversation trip "how many people live there?"
expect_rc 0 "second run succeeds"
expect_eq "$(fake_query '[(i.get("role"), i.get("content") if isinstance(i.get("content"), str) else i["content"][0]["text"]) for i in reqs[1]["body"]["input"]]')" \
    "[('user', 'capital of France?'), ('assistant', 'Paris.'), ('user', 'how many people live there?')]" \
    "the second run's request starts with the first run's items"
expect_eq "$(fake_query 'len(reqs[0]["body"]["input"])')" "1" "the first run sent only its prompt"
expect_eq "$(items_query trip 'len(items)')" "4" "both runs' items are stored"
expect_eq "$(items_query trip 'items[3]["content"][0]["text"]')" "About 2.1 million." "in order"
st=$(stat -c %a "$T/conv"); expect_eq "$st" "700" "database directory is 0700"
st=$(stat -c %a "$T/conv/conversations.db"); expect_eq "$st" "600" "database file is 0600"

# --- a run that fails in its second turn keeps its first turn ---
cat >"$T/calc.yaml" <<'EOF'
name: calc
instructions: Add numbers.
tools: [add]
EOF
cat >"$T/s2.json" <<EOF
{"turns": [$(resp r1 "$(call c1 add '"{\"a\":40,\"b\":2}"')"), {"status": 400, "body": {"error": {"message": "gone"}}}]}
EOF
start_fake "$T/s2.json"
run "$SBX" run --base-url "$FAKE_URL" --retries 0 -a "$T/calc.yaml" --conversation sums "add 40 and 2"
expect_rc 1 "the run fails in its second turn"
expect_eq "$(items_query sums '[i.get("type") for i in items]')" "['message', 'function_call', 'function_call_output']" \
    "the completed turn (input, call, output) was stored"
expect_eq "$(items_query sums 'items[2]["output"]')" "42" "with the tool's output"

# --- ls, show, rm ---
run "$SBX" conversation ls
expect_rc 0 "ls succeeds"
expect_eq "$(awk 'NR>1 {print $1, $2}' "$T/out" | tr '\n' ' ')" "sums 3 trip 4 " "ls lists names and item counts"
expect_in "$T/out" "Z" "ls shows the last update"
run "$SBX" conversation ls --json
expect_eq "$(python3 -c 'import json,sys; print([(c["name"], c["items"]) for c in json.load(open(sys.argv[1]))])' "$T/out")" \
    "[('sums', 3), ('trip', 4)]" "ls --json"
run "$SBX" conversation show trip
expect_rc 0 "show succeeds"
expect_eq "$(head -2 "$T/out")" "user: capital of France?
assistant: Paris." "show prints the items readably"
run "$SBX" conversation show sums
expect_in "$T/out" 'call add {"a":40,"b":2}' "show prints tool calls"
run "$SBX" conversation show --json --last 1 trip
expect_eq "$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))))' "$T/out")" "1" "show --last 1"
run "$SBX" conversation rm trip
expect_rc 0 "rm succeeds"
run "$SBX" conversation show trip
expect_rc 1 "show of a removed conversation fails"
expect_in "$T/err" "no conversation 'trip'" "and says so"
run "$SBX" conversation rm trip
expect_rc 1 "rm of a missing conversation fails"

# --- two runs at once on one conversation: each run's items stay together ---
cat >"$T/s3.json" <<EOF
{"turns": [$(resp r1 "$(msg x '"one"')"), $(resp r2 "$(msg y '"two"')")]}
EOF
start_fake "$T/s3.json"
"$SBX" run --base-url "$FAKE_URL" --conversation both "first" >/dev/null 2>"$T/e1" &
p1=$!
"$SBX" run --base-url "$FAKE_URL" --conversation both "second" >/dev/null 2>"$T/e2" &
p2=$!
wait $p1; r1=$?
wait $p2; r2=$?
expect_eq "$r1 $r2" "0 0" "two concurrent runs succeed"
expect_eq "$(items_query both '[i["role"] for i in items]')" "['user', 'assistant', 'user', 'assistant']" \
    "both runs' items stored, each run's pair together"

# --- hostile input ---
for bad in "../x" "a b" "" ".hidden" "$(printf 'x\033[2J')" "$(head -c 200 /dev/zero | tr '\0' a)"; do
    run "$SBX" run --base-url "$FAKE_URL" --conversation "$bad" "hi"
    expect_rc 2 "run refuses conversation name '$(printf %q "$bad" | head -c 20)'"
done
expect_in "$T/err" "longer than 128" "a long name is refused with the reason"
run "$SBX" conversation show "a/b"
expect_rc 2 "show refuses a bad name"
run "$SBX" conversation frob
expect_rc 2 "unknown subcommand"
run "$SBX" conversation rm
expect_rc 2 "rm needs a name"
head -c 8192 /dev/urandom >"$T/garbage.db"
SBX_CONVERSATIONS="$T/garbage.db" run "$SBX" conversation ls
expect_rc 1 "a file that is not a database is refused"
expect_in "$T/err" "is corrupt or not a database" "with a clear message"
SBX_CONVERSATIONS="$T/garbage.db" run "$SBX" run --base-url "$FAKE_URL" --conversation c "hi"
expect_rc 1 "a run with a corrupt database fails"
expect_in "$T/err" "garbage.db" "naming the database"
python3 - "$SBX_CONVERSATIONS" <<'EOF'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("INSERT INTO conversations VALUES ('evil', 1, 1)")
db.execute("INSERT INTO conversation_items (conversation, item, created_at) VALUES ('evil', '\"just a string\"', 1)")
db.commit()
EOF
run "$SBX" run --base-url "$FAKE_URL" --conversation evil "hi"
expect_rc 1 "a stored item that is not an object stops the run"
expect_in "$T/err" "conversation 'evil' item" "naming the conversation and item"
run "$SBX" conversation show evil
expect_rc 1 "show of a bad row fails cleanly"

done_testing
