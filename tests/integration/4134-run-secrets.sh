#!/usr/bin/env bash
# One scrubber, fed with every secret the run knows (issue 26, finding 10): a manifest secret
# read from the environment ({type: secret, env: MYTOK}), an inline one ({value, secret: true})
# and the model key never reach the files sbx writes for the run: the trace (with content),
# the run state, the conversation store and the --record file, even when a command prints
# them and the model quotes them.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/model-lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"
. "$(dirname "$0")/runstate-lib.sh"
trap 'stop_fake; sandbox_cleanup' EXIT

export MYTOK=mytok-SECRET-4242
cat >"$T/t.yaml" <<'EOF'
name: Keeper
capabilities: [shell]
manifest:
  entries: {}
  environment:
    TOK: {type: secret, env: MYTOK}
    INL: {value: inline-SECRET-7777, secret: true}
EOF
mk "$T/s.json" '[resp(1, sh(1, "sh -c \x27echo tok=$TOK inl=$INL\x27")), resp(2, msg("the values: mytok-SECRET-4242, inline-SECRET-7777 and " + E["OPENAI_API_KEY"]))]'
start_fake "$T/s.json"
run "$SBX" run --base-url "$FAKE_URL" -a "$T/t.yaml" --trace "$T/tr.jsonl" --trace-content \
    --conversation conv1 --state "$T/st.json" --record "$T/rec.jsonl" "go"
expect_rc 0 "the run completes"
outputs 1 >"$T/o"
expect_in "$T/o" "tok=mytok-SECRET-4242 inl=inline-SECRET-7777" "the command did print both secrets (to the model)"
DB="$XDG_STATE_HOME/sbx/conversations.db"
expect_eq "$(test -s "$DB" && echo yes)" yes "the conversation was stored"
for f in "$T/tr.jsonl" "$T/st.json" "$DB" "$T/rec.jsonl"; do
    name=$(basename "$f")
    expect_eq "$(grep -a -c mytok-SECRET-4242 "$f")" 0 "$name: no manifest secret read from the environment"
    expect_eq "$(grep -a -c inline-SECRET-7777 "$f")" 0 "$name: no inline manifest secret"
    expect_eq "$(grep -a -c "$OPENAI_API_KEY" "$f")" 0 "$name: no model key"
    expect_eq "$(grep -a -c 'redacted' "$f" | awk '{print ($1 > 0)}')" 1 "$name: [redacted] where they were"
done
run "$SBX" conversation show conv1
expect_in "$T/out" "the values: [redacted], [redacted] and [redacted]" "the stored answer reads [redacted]"
expect_eq "$(live)" 0 "no sandbox is left"
done_testing
