# Shared by the LXD provider's tests (after tests/integration/lib.sh): the cluster named by
# SBX_TEST_LXD_DIR (scripts/check starts one per run), or one of the test's own, started here
# and stopped at exit; the python test image imported once (cluster.sh image-python). Without
# root or lxd the test skips, unless SBX_TEST_LXD_REQUIRED=1, when it fails.
# Every client runs in member 1's network namespace, as a harness on that host would (in1 CMD),
# or member 2's (in2 CMD); the addresses exist only inside the two namespaces.
lxd_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
lxd_own=""    # the cluster this test started, if any
lxd_shared="" # the one it was given
if [ -n "${SBX_TEST_LXD_DIR:-}" ] && [ -f "$SBX_TEST_LXD_DIR/env" ]; then
    lxd_shared=$SBX_TEST_LXD_DIR
    # One test at a time on a shared cluster: some stop a member while they run (take_turn,
    # tests/integration/lib.sh).
    take_turn "$lxd_shared"
else
    why=""
    [ "$(id -u)" = 0 ] || why="needs root"
    [ -n "$why" ] || command -v lxd >/dev/null || why="lxd is not installed (scripts/install-deps)"
    [ -n "$why" ] || command -v lxc >/dev/null || why="lxc (lxd-client) is not installed"
    if [ -n "$why" ]; then
        if [ "${SBX_TEST_LXD_REQUIRED:-0}" = 1 ]; then
            not_ok "SBX_TEST_LXD_REQUIRED=1 but $why"
            done_testing
            exit 1
        fi
        echo "1..0 # SKIP $why"
        exit 0
    fi
    lxd_own=$(mktemp -d /tmp/sbx-lxd.XXXXXX)
    if ! "$lxd_here/cluster.sh" start "$lxd_own" >"$T/cluster.log" 2>&1; then
        not_ok "cluster.sh start"
        diag "$(tail -n 30 "$T/cluster.log")"
        lxd_own=""
        done_testing
        exit 1
    fi
    SBX_TEST_LXD_DIR=$lxd_own
fi
set -a
. "$SBX_TEST_LXD_DIR/env"
set +a
LXD_DIR_ENV=$SBX_TEST_LXD_DIR
if ! "$lxd_here/cluster.sh" image-python "$SBX_TEST_LXD_DIR" >"$T/image.log" 2>&1; then
    not_ok "cluster.sh image-python"
    diag "$(tail -n 10 "$T/image.log")"
fi
PYIMG=sbx-test-py
P=$SBX_TEST_LXD_PROJECT
in1() { nsenter --net="$SBX_TEST_LXD_N1_NETNS_PATH" "$@"; }
in2() { nsenter --net="$SBX_TEST_LXD_N2_NETNS_PATH" "$@"; }
# lx: LXD's own client on member 1's unix socket, for checks sbx does not make.
lx() { LXD_DIR=$SBX_TEST_LXD_N1_LXD_DIR LXD_CONF=$SBX_TEST_LXD_CONF timeout -s KILL 60 lxc "$@"; }
# The provider's options: through member 1's unix socket, or over https with the client
# certificate and the cluster certificate (LXDS), as command-line flags.
LXDU=(--provider lxd --lxd-endpoint "$SBX_TEST_LXD_N1_SOCKET" --lxd-project "$P"
    --lxd-profile "$SBX_TEST_LXD_PROFILE")
LXDS=(--provider lxd --lxd-endpoint "$SBX_TEST_LXD_N1_URL" --lxd-project "$P"
    --lxd-profile "$SBX_TEST_LXD_PROFILE" --lxd-client-cert "$SBX_TEST_LXD_CLIENT_CERT"
    --lxd-client-key "$SBX_TEST_LXD_CLIENT_KEY" --lxd-server-cert "$SBX_TEST_LXD_SERVER_CERT")
# The instance of sandbox $1 as the cluster describes it (JSON), and where it runs.
inst_of() {
    curl -s --max-time 20 --unix-socket "$SBX_TEST_LXD_N1_SOCKET" \
        "http://lxd/1.0/instances/sbx-$1?project=$P"
}
location_of() { inst_of "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["metadata"].get("location",""))' 2>/dev/null; }
# Every sbx instance of the project (names).
sbx_instances() {
    curl -s --max-time 20 --unix-socket "$SBX_TEST_LXD_N1_SOCKET" \
        "http://lxd/1.0/instances?project=$P" |
        python3 -c 'import json,sys
for u in json.load(sys.stdin)["metadata"]:
    n = u.rsplit("/", 1)[1].split("?")[0]
    if n.startswith("sbx-"): print(n)' 2>/dev/null
}

# Every sandbox id a test writes to $T/ids goes at exit, with its instance; a member the test
# killed comes back; a cluster of the test's own is stopped.
: >"$T/ids"
lxd_cleanup() {
    local id n pid
    for n in $SBX_TEST_LXD_MEMBERS; do
        pid=$(cat "$SBX_TEST_LXD_DIR/$n.pid" 2>/dev/null)
        kill -0 "$pid" 2>/dev/null || "$lxd_here/cluster.sh" restart-member "$SBX_TEST_LXD_DIR" "$n" >/dev/null 2>&1
    done
    while read -r id; do
        [ -n "$id" ] || continue
        lx delete --force "sbx-$id" --project "$P" >/dev/null 2>&1
        lx delete --force "sbx-$id" --project default >/dev/null 2>&1
        "$SBX" sandbox rm "$id" >/dev/null 2>&1
    done <"$T/ids"
    # The profiles a test made (0002).
    for n in sbx-privileged sbx-nesting sbx-nic; do lx profile delete "$n" --project "$P" >/dev/null 2>&1; done
    [ -z "$lxd_own" ] || "$lxd_here/cluster.sh" stop "$lxd_own" >/dev/null 2>&1
    if declare -F sandbox_cleanup >/dev/null; then sandbox_cleanup; else rm -rf "$T"; fi
}
trap lxd_cleanup EXIT
