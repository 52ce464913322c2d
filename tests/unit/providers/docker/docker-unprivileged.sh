#!/usr/bin/env bash
# test-docker again as the unprivileged user (tests/security/as-user.sh runs this script as that
# user): a socket of mode 0000 is then really refused (root passes any mode).
b=$(dirname "$SBX")
exec "$b/tests/test-docker"
