#!/usr/bin/env bash
# The CLI's own contract: version, help, unknown commands are usage errors.
. "$(dirname "$0")/lib.sh"

run "$SBX" --version
expect_rc 0 "--version succeeds"
expect_in "$T/out" "sbx " "--version prints the name"

run "$SBX" help
expect_rc 0 "help succeeds"
expect_in "$T/out" "usage: sbx" "help prints usage"

run "$SBX"
expect_rc 2 "no command is a usage error"
expect_in "$T/err" "sbx: missing command" "no command says so"

run "$SBX" frobnicate
expect_rc 2 "unknown command is a usage error"
expect_in "$T/err" "unknown command 'frobnicate'" "unknown command is named"

done_testing
