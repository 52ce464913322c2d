# Shared by the Docker provider's tests through the real binary (after lib.sh and
# sandbox-lib.sh). The engine: SBX_TEST_ENGINE=docker (SBX_TEST_DOCKER_HOST, the default) or
# podman (SBX_TEST_PODMAN_HOST), each a socket path, with the image SBX_TEST_DOCKER_IMAGE
# (tests/docker/mkimage.sh). Without them the test skips, unless SBX_TEST_DOCKER_REQUIRED=1
# (CI as root, tests/docker/engines.sh), when it fails. Traffic goes only to 127.0.0.1.
case ${SBX_TEST_ENGINE:-docker} in
podman) H=${SBX_TEST_PODMAN_HOST:-} ;;
*) H=${SBX_TEST_DOCKER_HOST:-} ;;
esac
IMG=${SBX_TEST_DOCKER_IMAGE:-}
if [ -z "$H" ] || [ -z "$IMG" ] || [ ! -S "$H" ]; then
    if [ "${SBX_TEST_DOCKER_REQUIRED:-0}" = 1 ]; then
        not_ok "SBX_TEST_DOCKER_REQUIRED=1 but no ${SBX_TEST_ENGINE:-docker} engine: socket '$H', image '$IMG'"
        done_testing
        exit 1
    fi
    # Exit 0: meson takes a TAP plan of 1..0 with SKIP as a skip only then.
    echo "1..0 # SKIP no ${SBX_TEST_ENGINE:-docker} engine (SBX_TEST_DOCKER_HOST or SBX_TEST_PODMAN_HOST, SBX_TEST_DOCKER_IMAGE)"
    exit 0
fi
command -v curl >/dev/null || skip_all "curl is not installed"

# By-id commands find docker sandboxes through DOCKER_HOST.
export DOCKER_HOST="unix://$H"
api() { curl -s --max-time 20 --unix-socket "$H" "$@"; }
# The containers labelled with sandbox id $1, as the engine lists them (JSON).
containers_of() {
    api -G "http://d/v1.41/containers/json" --data-urlencode all=1 \
        --data-urlencode "filters={\"label\":[\"io.sbx.id=$1\"]}"
}
# Host pids of the port relays of sandbox $1.
relays_of() { pgrep -f -- "__relay $1 " 2>/dev/null; }
no_relay() { [ -z "$(relays_of "$1")" ]; }

# Every sandbox id a test writes to $T/ids is removed at exit, with its containers and relays,
# even when the test fails.
: >"$T/ids"
docker_cleanup() {
    local id c p
    while read -r id; do
        [ -n "$id" ] || continue
        "$SBX" sandbox rm "$id" >/dev/null 2>&1
        for c in $(containers_of "$id" | grep -o '"Id":"[0-9a-f]*"' | cut -d'"' -f4); do
            api -X DELETE "http://d/v1.41/containers/$c?force=1" >/dev/null
        done
        for p in $(relays_of "$id"); do kill "$p" 2>/dev/null; done
    done <"$T/ids"
    sandbox_cleanup
}
trap docker_cleanup EXIT
