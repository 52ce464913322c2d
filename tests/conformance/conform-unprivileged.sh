#!/usr/bin/env bash
# conform-local again as the unprivileged user (tests/security/as-user.sh runs this script as
# that user).
b=$(dirname "$SBX")
SBX_SUPERVISOR="$b/sbx-supervisor" SBX_CONFORM_PROVIDER=local exec "$b/tests/conformance/test-provider"
