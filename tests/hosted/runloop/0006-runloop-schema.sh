#!/usr/bin/env bash
# The fake Runloop service's request fields against the type declarations of Runloop's npm
# client: every body and query field the fake knows (and so every field sbx may send without
# the fake logging it, which 0001 and 0003 check) is declared by the client's interface for
# that request.
. "$(dirname "$0")/../../integration/lib.sh"
. "$(dirname "$0")/lib.sh"
trap 'rm -rf "$T"' EXIT
runloop_sdk
python3 "$RUNLOOP_HERE/fake-runloop.py" --schema >"$T/schema.json"
node "$RUNLOOP_HERE/schema-check.mjs" <"$T/schema.json" >"$T/results" 2>"$T/err"
expect_eq "$?" 0 "the check runs"
e2b_tap "$T/results"
[ "$e2b_results" -ge 15 ] && ok "every table was checked ($e2b_results)" ||
    { not_ok "every table was checked"; diag "only $e2b_results: $(cat "$T/err")"; }
done_testing
