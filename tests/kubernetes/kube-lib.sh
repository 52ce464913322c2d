# Shared by the tests of the kubernetes provider (after ../integration/lib.sh and
# ../integration/sandbox-lib.sh): a cluster and a namespace of the test's own.
#
# The cluster is the fake API server scripts/check started (SBX_TEST_KUBECONFIG_FAKE); run alone,
# a test starts its own fake (fake.sh) on the private dockerd of SBX_TEST_DOCKER_HOST, or that
# dockerd too (tests/docker/engines.sh, root). SBX_TEST_KUBECONFIG instead names a real cluster
# (kind or k3s with agent-sandbox v0.5.x and the image SBX_TEST_KUBE_IMAGE): the same tests run
# against it; without it the real-cluster run says it is skipped and why (0003).
#
# Sets: KCFG (the kubeconfig), KCTX (its context), IMG (the image sandboxes run), NS (a fresh
# namespace, deleted at exit with everything in it), FAKE_DIR (the fake's directory, empty for a
# real cluster), KOPTS (the sbx options that reach NS: --kubeconfig --context --namespace).
# Functions: k (kubectl in NS), kube_cleanup (added to the EXIT trap), start_second_fake DIR
# ARGS... (another fake on the same dockerd, with fake-apiserver.py options).
here_k=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
own_eng="" own_fake="" NS="" FAKE_DIR="" extra_fakes=""

kube_cleanup() {
    if [ -n "$NS" ] && [ -n "${KCFG:-}" ]; then
        KUBECONFIG=$KCFG kubectl --context "$KCTX" delete namespace "$NS" --wait=true \
            --timeout=120s >/dev/null 2>&1 || true
    fi
    local d
    for d in $extra_fakes; do "$here_k/fake.sh" stop "$d" >/dev/null 2>&1 || true; done
    [ -z "$own_fake" ] || "$here_k/fake.sh" stop "$own_fake" >/dev/null 2>&1 || true
    [ -z "$own_eng" ] || "$here_k/../docker/engines.sh" stop "$own_eng" >/dev/null 2>&1 || true
}
trap 'kube_cleanup; sandbox_cleanup' EXIT

command -v kubectl >/dev/null || skip_all "kubectl is not installed"
if [ -n "${SBX_TEST_KUBECONFIG:-}" ] && [ "${SBX_TEST_KUBE_REAL:-0}" = 1 ]; then
    KCFG=$SBX_TEST_KUBECONFIG
    KCTX=${SBX_TEST_KUBE_CONTEXT:-$(KUBECONFIG=$KCFG kubectl config current-context)}
    IMG=${SBX_TEST_KUBE_IMAGE:?SBX_TEST_KUBE_IMAGE names the image sandboxes run on the real cluster}
else
    command -v openssl >/dev/null || skip_all "openssl is not installed"
    if [ -z "${SBX_TEST_KUBECONFIG_FAKE:-}" ]; then
        if [ -z "${SBX_TEST_DOCKER_HOST:-}" ]; then
            [ "$(id -u)" = 0 ] || skip_all "no fake API server given (SBX_TEST_KUBECONFIG_FAKE) and starting the private dockerd its pods run in needs root"
            command -v dockerd >/dev/null || skip_all "dockerd is not installed (scripts/install-deps)"
            own_eng=$(mktemp -d /tmp/sbx-k8e.XXXXXX)
            "$here_k/../docker/engines.sh" start "$own_eng" >"$T/engines.log" 2>&1 || {
                cat "$T/engines.log"; skip_all "cannot start a private dockerd (tests/docker/engines.sh failed)"; }
            set -a; . "$own_eng/env"; set +a
        fi
        own_fake=$(mktemp -d /tmp/sbx-k8f.XXXXXX)
        rmdir "$own_fake"
        "$here_k/fake.sh" start "$own_fake" >"$T/fake-start.log" 2>&1 || {
            cat "$T/fake-start.log"; not_ok "fake.sh start"; done_testing; exit 1; }
        set -a; . "$own_fake/env"; set +a
    fi
    KCFG=$SBX_TEST_KUBECONFIG_FAKE
    KCTX=fake
    FAKE_DIR=$(dirname "$KCFG")
    IMG=${SBX_TEST_DOCKER_IMAGE:-sbx-test:1}
    # The provider's tests take turns on a fake they share (each has its own namespace, but
    # they count the fake's watches and pods): take_turn, tests/integration/lib.sh.
    if [ -z "$own_fake" ]; then
        take_turn "$FAKE_DIR"
    fi
fi
export KUBECACHEDIR=$T/kube-cache
k() { KUBECONFIG=$KCFG kubectl --context "$KCTX" -n "$NS" "$@"; }
NS=sbx-$(basename "$0" .sh | tr -cd 'a-z0-9-' | cut -c1-30)-$$
NS=$(printf '%s' "$NS" | cut -c1-63)
KUBECONFIG=$KCFG kubectl --context "$KCTX" create namespace "$NS" >/dev/null 2>"$T/ns.err" || {
    cat "$T/ns.err"; not_ok "create namespace $NS"; done_testing; exit 1; }
KOPTS=(--kubeconfig "$KCFG" --context "$KCTX" --namespace "$NS")

# start_second_fake DIR ARGS...: another fake on the same dockerd (SBX_TEST_KUBE_ARGS=ARGS);
# stopped at exit. Its kubeconfig is DIR/kubeconfig.
start_second_fake() {
    local d=$1
    shift
    extra_fakes="$extra_fakes $d"
    SBX_TEST_KUBE_ARGS="$*" "$here_k/fake.sh" start "$d" >"$T/fake2.log" 2>&1
}
