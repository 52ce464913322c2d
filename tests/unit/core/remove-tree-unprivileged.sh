#!/usr/bin/env bash
# test-remove-tree again as the unprivileged user (tests/security/as-user.sh runs this script as
# that user): without CAP_DAC_OVERRIDE, directories without permissions must be opened up first.
b=$(dirname "$SBX")
exec "$b/tests/test-remove-tree"
