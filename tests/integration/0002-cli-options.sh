#!/usr/bin/env bash
# Options mean what they say: an abbreviated or unknown long option is a usage error (status 2)
# naming it and the option it may have meant, never silently another option; and messages about
# option combinations are true for the command line given.
. "$(dirname "$0")/lib.sh"
export OPENAI_API_KEY=sk-test-unused
unset OPENAI_BASE_URL

run "$SBX" run --port-b 127.0.0.1 hi
expect_rc 2 "an abbreviated long option is refused"
expect_in "$T/err" "unknown option '--port-b' (did you mean --port-bind?)" "naming the option it may mean"
run "$SBX" run --sess abc hi
expect_rc 2 "an abbreviation of --session is refused"
expect_in "$T/err" "(did you mean --session?)" "and names --session"
run "$SBX" run --no-such-option hi
expect_rc 2 "an unknown option is refused"
expect_in "$T/err" "unknown option '--no-such-option'" "naming it"
expect_not_in "$T/err" "did you mean" "without a guess when nothing is near"
run "$SBX" run --timeout=1s --no-such-option hi
expect_rc 2 "an unknown option after one with '=' is still found"
# The value of an option is not an option, even when it looks like one.
run "$SBX" run -m "replay:$T/none.jsonl" --conversation --sess hi
expect_in "$T/err" "--conversation" "an option's value that starts with -- is the value, not an option"
expect_not_in "$T/err" "unknown option '--sess'" "and is not taken for an option"
# Past the prompt nothing is an option.
cat >"$T/r.jsonl" <<'EOF'
{"id":"r1","object":"response","status":"completed","output":[{"type":"message","id":"m","role":"assistant","status":"completed","content":[{"type":"output_text","text":"fine","annotations":[]}]}]}
EOF
run "$SBX" run -m "replay:$T/r.jsonl" -- "--sess is text here"
expect_rc 0 "after -- a word starting with -- is the prompt"

run "$SBX" run --session 0123456789abcdef --keep hi
expect_rc 2 "--keep with --session is a usage error"
expect_in "$T/err" "--keep applies to sandboxes the run creates, not to --session" \
    "the message is about --session, not about a missing sandbox"
expect_not_in "$T/err" "--keep needs a sandbox" "it does not claim no sandbox was given"

run "$SBX" memory show --agen x "$T"
expect_rc 2 "sbx memory refuses abbreviations too"
expect_in "$T/err" "(did you mean --agent?)" "naming --agent"

# "Did you mean" for a mistyped command, subcommand or option, and a usage error points at the
# subcommand's own --help.
check_suggest() { # ARGS... -- WANT
    local want=${*: -1}
    run "$SBX" "${@:1:$#-2}"
    if [ "$rc" = 2 ] && grep -qF -- "$want" "$T/err"; then ok "sbx ${*:1:$#-2}: $want"; else
        not_ok "sbx ${*:1:$#-2}: $want"; diag "status $rc" "$(cat "$T/err")"; fi
}
check_suggest snapshott -- "unknown command 'snapshott' (did you mean 'snapshot'?)"
check_suggest sandbox shel x -- "unknown command 'shel' (did you mean 'shell'?)"
check_suggest snapshot ls-file x -- "(did you mean 'ls-files'?)"
check_suggest sandbox ps --qiuet -- "unknown option '--qiuet' (did you mean --quiet?)"
check_suggest sandbox rm --forse x -- "(did you mean --force?)"
check_suggest sandbox create --nmae x -- "unknown option '--nmae' (did you mean --name?)"
check_suggest snapshot ls --jsn -- "(did you mean --json?)"
run "$SBX" sandbox exec --tyy x -- true
expect_rc 125 "exec: an unknown option is sbx's failure (125)"
expect_in "$T/err" "(did you mean --tty?)" "with what it may mean"
run "$SBX" sandbox frobnicate
expect_not_in "$T/err" "did you mean" "no suggestion when nothing is near"
run "$SBX" sandbox exec --timeout soon x -- true
expect_in "$T/err" "Try 'sbx sandbox exec --help'." "a bad value of exec points at exec's help"
run "$SBX" sandbox create --memory 512X
expect_in "$T/err" "Try 'sbx sandbox create --help'." "a bad value of create points at create's help"
done_testing
