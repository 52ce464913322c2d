#!/usr/bin/env bash
# A C test program on the two-member cluster (lxd-lib.sh), its environment exported, in a
# member's network namespace. The provider conformance suite
# (tests/conformance/test-provider.c) with the lxd provider, in two ways:
#   unix   through member 1's unix socket, the sandboxes on member 1, the suite in member 1's
#          network namespace (its port forwards listen on member 1's loopback)
#   https  through member 1's https endpoint with the client certificate and the cluster
#          certificate, the sandboxes on member 2, the suite in member 2's network namespace:
#          every call crosses from member 1 to member 2, and the port forwards listen on
#          member 2's loopback, where the suite runs.
# Or api: the program (test-lxd-api.c) in member 1's namespace.
# usage: run-c.sh TEST-PROVIDER unix|https | run-c.sh PROGRAM api
exe=$1 mode=$2
: "${SBX:=unused}"
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/lxd-lib.sh"
case $mode in
unix)
    opts="{\"endpoint\":\"$SBX_TEST_LXD_N1_SOCKET\",\"project\":\"$P\",\"profile\":[\"$SBX_TEST_LXD_PROFILE\"],\"image\":\"$PYIMG\",\"target\":\"n1\",\"port_bind\":\"127.0.0.1\"}"
    ns=$SBX_TEST_LXD_N1_NETNS_PATH ;;
https)
    opts="{\"endpoint\":\"$SBX_TEST_LXD_N1_URL\",\"client_cert\":\"$SBX_TEST_LXD_CLIENT_CERT\",\"client_key\":\"$SBX_TEST_LXD_CLIENT_KEY\",\"server_cert\":\"$SBX_TEST_LXD_SERVER_CERT\",\"project\":\"$P\",\"profile\":[\"$SBX_TEST_LXD_PROFILE\"],\"image\":\"$PYIMG\",\"target\":\"n2\",\"port_bind\":\"127.0.0.1\"}"
    ns=$SBX_TEST_LXD_N2_NETNS_PATH ;;
api)
    export SBX_TEST_LXD_PYIMAGE=$PYIMG SBX_SNAPSHOTS="$T/snapshots"
    nsenter --net="$SBX_TEST_LXD_N1_NETNS_PATH" "$exe"
    exit $? ;;
*) echo "usage: run-c.sh TEST-PROVIDER unix|https | run-c.sh PROGRAM api" >&2; exit 2 ;;
esac
# Its own store and records; the suite removes every sandbox it made.
export SBX_SNAPSHOTS="$T/snapshots" SBX_RECORDS="$T/records"
SBX_CONFORM_PROVIDER=lxd SBX_CONFORM_OPTIONS=$opts SBX_TEST_DOCKER_REQUIRED=1 \
    nsenter --net="$ns" "$exe"
status=$?
# The TAP stream above is the test's; the cleanup only makes sure nothing is left.
exit $status
