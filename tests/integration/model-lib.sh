# Helpers for tests that talk to the fake model server. Source after lib.sh.
#   start_fake SCRIPT   starts tests/fake-model/fake-model.py; sets FAKE_URL and FAKE_LOG
#   stop_fake           stops it (also done at exit)
# The server logs every request it received to $FAKE_LOG, one JSON object per line.
command -v python3 >/dev/null || skip_all "python3 is needed for the fake model server"
FAKE_PID=
stop_fake() {
    if [ -n "$FAKE_PID" ]; then
        kill "$FAKE_PID" 2>/dev/null
        wait "$FAKE_PID" 2>/dev/null
        FAKE_PID=
    fi
}
trap 'stop_fake; rm -rf "$T"' EXIT

start_fake() {
    stop_fake
    FAKE_LOG="$T/requests.jsonl"
    rm -f "$T/port"
    python3 "$SBX_SRCDIR/tests/fake-model/fake-model.py" "$1" "$FAKE_LOG" >"$T/port" &
    FAKE_PID=$!
    wait_until test -s "$T/port"
    FAKE_URL="http://127.0.0.1:$(head -n1 "$T/port")/v1"
}

# jq-free JSON queries on the request log: fake_query 'PYTHON EXPR over reqs'
fake_query() {
    python3 -c "import json,sys; reqs=[json.loads(l) for l in open(sys.argv[1])]; print($1)" "$FAKE_LOG"
}

# Common environment: no real credentials leak into tests, a fixed test key.
export OPENAI_API_KEY=sk-test-SECRET-0123456789
unset OPENAI_BASE_URL

# mk OUT 'TURNS': a fake-model script from a Python expression over the helpers of
# tests/fake-model/turns.py; a test's own helpers go in the file $MK_EXTRA, if set.
mk() { python3 "$SBX_SRCDIR/tests/fake-model/turns.py" "$1" "$2" ${MK_EXTRA:+"$MK_EXTRA"}; }
