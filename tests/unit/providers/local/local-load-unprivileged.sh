#!/usr/bin/env bash
# test-local-load again as the unprivileged user (tests/security/as-user.sh runs this script as
# that user): the supervisor and PID 1 then run as that user's ids.
b=$(dirname "$SBX")
SBX_SUPERVISOR="$b/sbx-supervisor" exec "$b/tests/test-local-load"
