#!/usr/bin/env bash
# test-relay again as the unprivileged user (tests/security/as-user.sh runs this script as that
# user): entering a namespace of another user's process is refused with a clear error.
b=$(dirname "$SBX")
SBX_SUPERVISOR="$b/sbx-supervisor" exec "$b/tests/test-relay"
