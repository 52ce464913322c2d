#!/usr/bin/env bash
# scripts/node-image: the sbx-node pod's image, made from this machine's Debian packages and
# this build without a registry. Its refusals; the root file system as a tar holding the
# daemon, the supervisor, sbx and the libraries sbx loads when first used; the root entered as a
# container runtime enters it (a mount namespace of its own, pivot_root, in a network namespace
# made here) running sbx-node for real, which serves a sandbox to the remote provider over
# mutual TLS; and, with the private dockerd of SBX_TEST_DOCKER_HOST, the image imported, saved as
# a docker-archive whose manifest names it and whose layer holds the daemon, and a container of
# it running sbx (libcrypto loaded in it). Everything it makes is removed at exit.
. "$(dirname "$0")/../integration/lib.sh"
here=$(cd "$(dirname "$0")" && pwd)
SCRIPT=$here/../../scripts/node-image
BUILD=$(dirname "${SBX_SUPERVISOR:?}")
command -v dpkg >/dev/null || skip_all "dpkg is not installed (the recipe takes files from Debian packages)"
NETNS="" NODE_PID="" ENGINE_TAG="" CID="" SOCK=""
skip() { tap_n=$((tap_n + 1)); echo "ok $tap_n - $1 # SKIP $2"; }
cleanup_img() {
    if [ -n "$NETNS" ]; then
        ip netns pids "$NETNS" 2>/dev/null | xargs -r kill -9 2>/dev/null
        sleep 0.2
        ip netns del "$NETNS" 2>/dev/null
    fi
    if [ -n "$CID" ]; then curl -s --unix-socket "$SOCK" -X DELETE "http://d/v1.41/containers/$CID?force=1" >/dev/null; fi
    if [ -n "$ENGINE_TAG" ]; then curl -s --unix-socket "$SOCK" -X DELETE "http://d/v1.41/images/$ENGINE_TAG?force=1" >/dev/null; fi
    rm -rf "$T"
}
trap cleanup_img EXIT

# --- refusals -------------------------------------------------------------------------------------
run "$SCRIPT" --build "$BUILD"
expect_in "$T/err" "say what to make" "no output asked for: said so"
run "$SCRIPT" --build "$T/nowhere" --tar "$T/x.tar"
expect_in "$T/err" "no 'sbx' in '$T/nowhere'" "a build directory without sbx: said so"
run "$SCRIPT" --build "$BUILD" --tar "$T/x.tar" --package no-such-package-sbx
expect_in "$T/err" "Debian package 'no-such-package-sbx' is not installed here" "a package not installed: said so"
run "$SCRIPT" --build "$BUILD" --engine /var/run/docker.sock --tag a:b
expect_in "$T/err" "--engine must be unix:///PATH" "an engine address of another form: said so"

# --- the root file system -------------------------------------------------------------------------
run "$SCRIPT" --build "$BUILD" --rootfs "$T/root" --tar "$T/root.tar"
expect_rc 0 "node-image --rootfs DIR --tar FILE"
tar -tf "$T/root.tar" >"$T/list" 2>/dev/null
for f in ./usr/libexec/sbx/sbx-node ./usr/libexec/sbx/sbx-supervisor ./usr/bin/sbx ./usr/sbin/mke2fs \
    ./etc/passwd; do
    expect_in "$T/list" "$f" "the tar holds $f"
done
# The libraries where this machine keeps them (its multiarch directory, whatever the machine).
for l in libcrypto.so.3 libssl.so.3 libseccomp.so.2 libyaml-0.so.2; do
    if grep -qE "^\./(usr/)?lib(64|32)?/([^/]+/)?${l//./\\.}\$" "$T/list"; then ok "the tar holds $l"; else
        not_ok "the tar holds $l"; diag "$(grep -F "$l" "$T/list")"; fi
done

if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null || ! command -v pivot_root >/dev/null; then
    skip "the image's root serving a sandbox" "needs root, ip and pivot_root"
else
    R=$T/root
    (cd "$T" && "$BUILD/sbx" node ca init ca && "$BUILD/sbx" node cert issue n --ca ca --node --host 127.0.0.1 &&
        "$BUILD/sbx" node cert issue h --ca ca --harness) >"$T/certs.out" 2>&1 || diag "$(cat "$T/certs.out")"
    mkdir -p "$R/etc/sbx-node" "$R/.old"
    cp "$T/n.pem" "$T/n.key" "$T/ca/ca.pem" "$R/etc/sbx-node/"
    NETNS=sbxi-$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
    ip netns add "$NETNS" && ip -n "$NETNS" link set lo up
    inner='cd / && mkdir -p -m 0700 /var/lib/sbx-node/run && export XDG_STATE_HOME=/var/lib/sbx-node/state XDG_RUNTIME_DIR=/var/lib/sbx-node/run SBX_WORKSPACES=/var/lib/sbx-node/ws SBX_STOPPED=/var/lib/sbx-node/stopped SBX_SNAPSHOTS=/var/lib/sbx-node/snapshots SBX_RECORDS=/var/lib/sbx-node/local-records && exec /usr/libexec/sbx/sbx-node --listen 127.0.0.1:7443 --cert /etc/sbx-node/n.pem --key /etc/sbx-node/n.key --ca /etc/sbx-node/ca.pem --state /var/lib/sbx-node/records'
    # What a container runtime does: the image's root as the root of a mount namespace of its
    # own (user namespaces, which the local provider makes, are refused under a chroot).
    # The node's environment is the image's alone (meson's SBX_SUPERVISOR names the build's).
    ip netns exec "$NETNS" env -u SBX_SUPERVISOR unshare --mount --propagation private --pid --fork --kill-child -- sh -c \
        'R=$1; mount --bind "$R" "$R" && mount -t proc proc "$R/proc" && mount --rbind /sys "$R/sys" &&
         mount --rbind /dev "$R/dev" && cd "$R" && pivot_root . .old && exec /bin/sh -c "$2"' sh "$R" "$inner" \
        >"$T/node.log" 2>&1 &
    NODE_PID=$!
    for _ in $(seq 100); do grep -q listening "$T/node.log" && break; sleep 0.1; done
    H=(env XDG_STATE_HOME="$T/h/state" XDG_RUNTIME_DIR="$T/h/run" SBX_RECORDS="$T/h/records" SBX_WORKSPACES="$T/h/ws"
        ip netns exec "$NETNS" "$BUILD/sbx")
    mkdir -p -m 0700 "$T/h/run"
    REMOTE=(--provider remote --node https://127.0.0.1:7443 --node-ca "$T/ca/ca.pem" --node-cert "$T/h.pem" --node-key "$T/h.key")
    run "${H[@]}" sandbox create "${REMOTE[@]}"
    expect_rc 0 "sbx-node from the image's root serves a create"
    diag "$(cat "$T/err")"
    sid=$(head -n1 "$T/out")
    run "${H[@]}" sandbox exec "$sid" -- sh -c 'echo from the image; test -x /usr/libexec/sbx/sbx-node && echo its files'
    expect_eq "$(cat "$T/out")" "from the image
its files" "and a command in its sandbox, which sees the image's files"
    run "${H[@]}" sandbox rm "$sid"
    expect_rc 0 "and removes it"
    [ $rc = 0 ] || diag "$(cat "$T/node.log")"
fi

# --- an engine: import, save, run -----------------------------------------------------------------
SOCK=${SBX_TEST_DOCKER_HOST:-}
SOCK=${SOCK#unix://}
if [ -z "$SOCK" ] || ! curl -sf --unix-socket "$SOCK" http://d/_ping >/dev/null 2>&1; then
    skip "the image in an engine" "no private dockerd (SBX_TEST_DOCKER_HOST; tests/docker/engines.sh)"
else
    ENGINE_TAG=sbx-node-test:$$
    run "$SCRIPT" --build "$BUILD" --engine "unix://$SOCK" --tag "$ENGINE_TAG" --save "$T/image.tar"
    expect_rc 0 "node-image --engine --tag --save"
    mkdir -p "$T/archive"
    tar -C "$T/archive" -xf "$T/image.tar" 2>"$T/tar.err"
    expect_eq "$(python3 -c 'import json,sys; m=json.load(open(sys.argv[1]+"/manifest.json")); print(m[0]["RepoTags"][0], len(m[0]["Layers"]))' "$T/archive" 2>&1)" \
        "$ENGINE_TAG 1" "the archive's manifest names the image and its one layer"
    layer=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]+"/manifest.json"))[0]["Layers"][0])' "$T/archive" 2>/dev/null)
    tar -tf "$T/archive/$layer" 2>/dev/null >"$T/layer.list"
    expect_in "$T/layer.list" "usr/libexec/sbx/sbx-node" "its layer holds the daemon"
    body=$(python3 -c 'import json,sys; print(json.dumps({"Image": sys.argv[1], "Cmd": ["/usr/bin/sbx", "node", "ca", "init", "/tmp/ca"], "HostConfig": {"NetworkMode": "none"}}))' "$ENGINE_TAG")
    CID=$(curl -sf --unix-socket "$SOCK" -X POST -H 'Content-Type: application/json' -d "$body" \
        "http://d/v1.41/containers/create" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Id"])')
    curl -sf --unix-socket "$SOCK" -X POST "http://d/v1.41/containers/$CID/start" >/dev/null
    code=$(curl -sf --unix-socket "$SOCK" -X POST "http://d/v1.41/containers/$CID/wait" | python3 -c 'import json,sys; print(json.load(sys.stdin)["StatusCode"])')
    expect_eq "$code" 0 "a container of it runs sbx node ca init (sbx and libcrypto complete in the image)"
fi
done_testing
