#!/usr/bin/env bash
# The lxd provider through the real sbx binary on the two-member cluster (tests/lxd/cluster.sh),
# every command in member 1's network namespace as a harness there would run it: sandboxes
# placed on each member and by the cluster, exec, files and snapshots of the one on member 2
# through member 1 (its unix socket and https with the client certificate and a pinned
# server), clear errors (unknown image, profile and project, a server that does not answer,
# an untrusted certificate, a server whose key is not the pinned one), privileged and nesting
# refused unless asked and then warned about, stop and start keeping the workspace, a state
# resumed by a new sbx process (also after the instance went, from the state's snapshot), a
# snapshot taken on lxd restored on local and the other way round, ps, rm and prune.
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/../integration/sandbox-lib.sh"
. "$(dirname "$0")/lxd-lib.sh"

created() { # created NAME: the id of the last run's create, kept for the cleanup
    local id
    id=$(tr -d '\n' <"$T/out")
    echo "$id" >>"$T/ids"
    eval "$1=\$id"
}

# --- the provider is there, with its options -------------------------------------------------
run "$SBX" sandbox providers lxd
expect_rc 0 "sbx sandbox providers lxd"
expect_in "$T/out" "native-snapshots" "it declares the server's own snapshots"
expect_in "$T/out" "--lxd-endpoint" "and its endpoint option"

# --- placement: a sandbox on each member and one the cluster places --------------------------
run in1 "$SBX" sandbox create "${LXDU[@]}" --image "$SBX_TEST_LXD_IMAGE" --lxd-target n1
expect_rc 0 "create --lxd-target n1 through member 1's unix socket"
created s1
run in1 "$SBX" sandbox create "${LXDS[@]}" --image "$SBX_TEST_LXD_IMAGE" --lxd-target n2
expect_rc 0 "create --lxd-target n2 through member 1's https endpoint"
created s2
run in1 "$SBX" sandbox create "${LXDU[@]}" --image "$SBX_TEST_LXD_IMAGE"
expect_rc 0 "create, placed by the cluster"
created s3
expect_eq "$(location_of "$s1")" n1 "the first runs on member 1"
expect_eq "$(location_of "$s2")" n2 "the second on member 2"
case $(location_of "$s3") in n1 | n2) ok "the third on a member the cluster chose" ;;
*) not_ok "the third on a member the cluster chose"; diag "$(inst_of "$s3" | head -c 600)" ;; esac
cfg=$(inst_of "$s2")
for k in '"user.sbx.id":"'"$s2"'"' '"security.devlxd":"false"' '"limits.memory":"2147483648"' \
    '"limits.processes":"1024"'; do
    case $cfg in *"$k"*) ok "its config has $k" ;; *) not_ok "its config has $k"; diag "${cfg:0:800}" ;; esac
done
case $cfg in *'"security.privileged"'* | *'"security.nesting"'*) not_ok "no privileged or nesting key" ;;
*) ok "no privileged or nesting key" ;; esac

# --- exec, files and snapshots of the sandbox on member 2, through member 1 -------------------
run in1 "$SBX" sandbox exec "$s2" -- sh -c 'echo out; echo err >&2; pwd; exit 7'
expect_rc 7 "exec on member 2's sandbox through member 1 gives its exit status"
expect_eq "$(cat "$T/out")" "$(printf 'out\n/workspace')" "its stdout"
expect_eq "$(cat "$T/err")" "err" "and its stderr, apart"
run in1 "$SBX" sandbox exec "$s2" -- sh -c 'ip -o link | cut -d: -f2 | tr -d " "; cat /proc/self/uid_map | tr -s " "'
expect_eq "$(head -n 1 "$T/out")" "lo" "the sandbox has no network device but loopback"
case $(tail -n 1 "$T/out") in " 0 100000 "* | "0 100000 "*) ok "and is unprivileged (its root is host uid 100000)" ;;
*) not_ok "and is unprivileged"; diag "$(cat "$T/out")" ;; esac
# On a terminal: all of the output arrives, even the end of 3 MB written just before the command
# exits (LXD 5.0 stops relaying a terminal when its process ends: the preamble waits for sbx to
# have read its end marker), which never shows; a look-alike of the marker passes untouched.
cat >"$T/tty.sh" <<'SH'
exec "$SBX" sandbox exec -t "$1" -- sh -c \
    'printf "<\033_sbx-end x\033\\\\>"; head -c 3000000 /dev/zero | tr "\0" x; echo END; exit 3'
SH
run in1 script -qec "bash $T/tty.sh $s2" /dev/null </dev/null
expect_rc 3 "a command on a terminal gives its exit status"
expect_eq "$(tr -d '\r' <"$T/out" | tail -c 7)" "xxxEND" "and the last of its 3 MB of output"
expect_eq "$(tr -cd x <"$T/out" | wc -c)" 3000002 "all of it"
expect_in "$T/out" "$(printf '<\033_sbx-end x\033\\>')" "a look-alike of the end marker is output as it is"
expect_eq "$(grep -c 'sbx-end [0-9a-f]' "$T/out")" 0 "the end marker is not"
echo "data through member 1" >"$T/in.txt"
run in1 "$SBX" sandbox exec -i "$s2" -- sh -c 'cat > from-stdin.txt && wc -c < from-stdin.txt' <"$T/in.txt"
expect_eq "$(tr -d ' ' <"$T/out")" "22" "stdin reaches member 2's sandbox"
run in1 "$SBX" sandbox cp "$T/in.txt" "$s2:copied.txt"
expect_rc 0 "cp into member 2's sandbox"
run in1 "$SBX" sandbox cp "$s2:copied.txt" "$T/back.txt"
expect_rc 0 "and out again"
cmp -s "$T/in.txt" "$T/back.txt" && ok "the bytes came back" || not_ok "the bytes came back"
run in1 "$SBX" sandbox snapshot "$s2"
expect_rc 0 "an sbx snapshot of member 2's sandbox through member 1"
ref2=$(grep -o 'sha256:[0-9a-f]*' "$T/out" | head -n 1)
[ -n "$ref2" ] && ok "it names its reference" || { not_ok "it names its reference"; diag "$(cat "$T/out" "$T/err")"; }

# --- a snapshot moves between providers: lxd -> local, local -> lxd --------------------------
run "$SBX" sandbox create --snapshot "$ref2"
expect_rc 0 "a local sandbox from the lxd sandbox's snapshot"
created l1
run "$SBX" sandbox exec "$l1" -- sh -c 'cat copied.txt from-stdin.txt'
expect_eq "$(cat "$T/out")" "$(printf 'data through member 1\ndata through member 1')" \
    "it has the lxd sandbox's files"
run "$SBX" sandbox exec "$l1" -- sh -c 'mkdir -p made/locally && echo local > made/locally/f && chmod 600 made/locally/f'
run "$SBX" sandbox snapshot "$l1"
refl=$(grep -o 'sha256:[0-9a-f]*' "$T/out" | head -n 1)
run in1 "$SBX" sandbox create "${LXDS[@]}" --image "$SBX_TEST_LXD_IMAGE" --lxd-target n2 --snapshot "$refl"
expect_rc 0 "an lxd sandbox on member 2 from the local sandbox's snapshot"
created s4
run in1 "$SBX" sandbox exec "$s4" -- sh -c 'cat made/locally/f copied.txt; stat -c %a made/locally/f'
expect_eq "$(cat "$T/out")" "$(printf 'local\ndata through member 1\n600')" "it has the local sandbox's files and modes"

# --- errors said plainly ----------------------------------------------------------------------
run in1 "$SBX" sandbox create "${LXDU[@]}" --image no-such-image
expect_rc 1 "an image the server lacks fails"
expect_in "$T/err" "image 'no-such-image' is not on the LXD server" "naming the image"
run in1 "$SBX" sandbox create --provider lxd --lxd-endpoint "$SBX_TEST_LXD_N1_SOCKET" \
    --lxd-project "$P" --lxd-profile no-such-profile --image "$SBX_TEST_LXD_IMAGE"
expect_rc 1 "an unknown profile fails"
expect_in "$T/err" "no lxd profile 'no-such-profile' in project '$P'" "naming it and the project"
run in1 "$SBX" sandbox create --provider lxd --lxd-endpoint "$SBX_TEST_LXD_N1_SOCKET" \
    --lxd-project no-such-project --image "$SBX_TEST_LXD_IMAGE"
expect_rc 1 "an unknown project fails"
expect_in "$T/err" "no lxd project 'no-such-project'" "naming it"
run in1 "$SBX" sandbox create --provider lxd --lxd-endpoint "https://$SBX_TEST_LXD_N1_ADDR:9" \
    --lxd-client-cert "$SBX_TEST_LXD_CLIENT_CERT" --lxd-client-key "$SBX_TEST_LXD_CLIENT_KEY" \
    --lxd-server-cert "$SBX_TEST_LXD_SERVER_CERT" --image "$SBX_TEST_LXD_IMAGE"
expect_rc 1 "a server that does not answer fails"
expect_in "$T/err" "cannot reach LXD at 'https://$SBX_TEST_LXD_N1_ADDR:9'" "naming it"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=stranger \
    -keyout "$T/stranger.key" -out "$T/stranger.crt" >/dev/null 2>&1
run in1 "$SBX" sandbox create --provider lxd --lxd-endpoint "$SBX_TEST_LXD_N1_URL" \
    --lxd-client-cert "$T/stranger.crt" --lxd-client-key "$T/stranger.key" \
    --lxd-server-cert "$SBX_TEST_LXD_SERVER_CERT" --lxd-project "$P" --image "$SBX_TEST_LXD_IMAGE"
expect_rc 1 "a client certificate the server does not trust fails"
expect_in "$T/err" "does not trust this client certificate '$T/stranger.crt'" "saying so"
run in1 "$SBX" sandbox create --provider lxd --lxd-endpoint "$SBX_TEST_LXD_N1_URL" \
    --lxd-client-cert "$SBX_TEST_LXD_CLIENT_CERT" --lxd-client-key "$SBX_TEST_LXD_CLIENT_KEY" \
    --lxd-server-pubkey "sha256//AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=" --lxd-project "$P" \
    --image "$SBX_TEST_LXD_IMAGE"
expect_rc 1 "a server whose key is not the pinned one fails"
expect_in "$T/err" "the server's key does not match the pinned key" "saying so"
run in1 "$SBX" sandbox create --provider lxd --lxd-endpoint "$SBX_TEST_LXD_N1_URL" \
    --lxd-project "$P" --image "$SBX_TEST_LXD_IMAGE"
expect_rc 2 "https without certificates is refused before anything is sent"
expect_in "$T/err" "needs a client certificate and its key" "saying what it needs"
expect_eq "$(sbx_instances | grep -vc -e "sbx-$s1" -e "sbx-$s2" -e "sbx-$s3" -e "sbx-$s4")" 0 \
    "the failed creates left no instance"

# --- privileged and nesting: refused unless asked, warned about when asked --------------------
for k in privileged nesting; do
    lx profile create "sbx-$k" --project "$P" >/dev/null 2>&1
    lx profile set "sbx-$k" "security.$k" true --project "$P" >/dev/null 2>&1
    lx profile device add "sbx-$k" root disk path=/ pool=default --project "$P" >/dev/null 2>&1
    run in1 "$SBX" sandbox create --provider lxd --lxd-endpoint "$SBX_TEST_LXD_N1_SOCKET" \
        --lxd-project "$P" --lxd-profile "sbx-$k" --image "$SBX_TEST_LXD_IMAGE"
    expect_rc 1 "a profile with security.$k is refused"
    expect_in "$T/err" "sets security.$k" "naming the key"
    run in1 "$SBX" sandbox create --provider lxd --lxd-endpoint "$SBX_TEST_LXD_N1_SOCKET" \
        --lxd-project "$P" --lxd-profile "sbx-$k" --image "$SBX_TEST_LXD_IMAGE" "--lxd-$k"
    expect_rc 0 "and made with --lxd-$k"
    created sk
    expect_in "$T/err" "lxd $k is DANGEROUS" "with a warning naming the risk"
    run in1 "$SBX" sandbox rm "$sk"
    lx profile delete "sbx-$k" --project "$P" >/dev/null 2>&1
done

# --- the server pinned by its certificate's fingerprint; limits; network none masks NICs ------
run in1 "$SBX" sandbox create --provider lxd --lxd-endpoint "$SBX_TEST_LXD_N2_URL" \
    --lxd-client-cert "$SBX_TEST_LXD_CLIENT_CERT" --lxd-client-key "$SBX_TEST_LXD_CLIENT_KEY" \
    --lxd-server-fingerprint "$SBX_TEST_LXD_SERVER_FINGERPRINT" --lxd-project "$P" \
    --lxd-profile "$SBX_TEST_LXD_PROFILE" --image "$SBX_TEST_LXD_IMAGE" --memory 256M --pids 64 \
    --cpus 0.5 --disk 1G
expect_rc 0 "create through member 2's https, the server pinned by its fingerprint, with limits"
created s5
cfg=$(inst_of "$s5")
for k in '"limits.memory":"268435456"' '"limits.processes":"64"' '"limits.cpu.allowance":"50ms/100ms"' \
    '"size":"1073741824"'; do
    case $cfg in *"$k"*) ok "its instance has $k" ;; *) not_ok "its instance has $k"; diag "${cfg:0:900}" ;; esac
done
run in1 "$SBX" sandbox exec "$s5" -- sh -c 'echo pinned'
expect_eq "$(cat "$T/out")" "pinned" "by id through its record (the fingerprint kept as a locator)"
run in1 "$SBX" sandbox rm "$s5"
expect_rc 0 "rm"
# A profile with a network device: masked by default (only loopback inside), used as it is with
# --network profile (warned about). The device is one end of a veth pair made in member 1's
# network namespace; LXD cannot hand it over here (its /sys is the machine's, which does not
# show the namespace's links), so with --network profile the create fails on that device,
# which shows it was not masked, and leaves nothing.
dummy=sbxd$$
in1 ip link add "$dummy" type veth peer name "sbxe$$"
lx profile create sbx-nic --project "$P" >/dev/null 2>&1
printf 'config: {}\ndevices:\n  root:\n    path: /\n    pool: default\n    type: disk\n  eth0:\n    type: nic\n    nictype: physical\n    parent: %s\n    name: eth0\n' "$dummy" |
    lx profile edit sbx-nic --project "$P" >/dev/null 2>&1
run in1 "$SBX" sandbox create --provider lxd --lxd-endpoint "$SBX_TEST_LXD_N1_SOCKET" \
    --lxd-project "$P" --lxd-profile sbx-nic --image "$SBX_TEST_LXD_IMAGE" --lxd-target n1
expect_rc 0 "create with a profile that has a network device (network none)"
created sn
cfg=$(inst_of "$sn")
case $cfg in *'"devices":{"eth0":{"type":"none"}}'*) ok "the device is masked with a none device" ;;
*) not_ok "the device is masked with a none device"; diag "${cfg:0:900}" ;; esac
run in1 "$SBX" sandbox exec "$sn" -- sh -c 'ip -o link | cut -d: -f2 | tr -d " " | tr "\n" " "'
expect_eq "$(cat "$T/out")" "lo " "only loopback inside"
run in1 "$SBX" sandbox rm "$sn"
run in1 "$SBX" sandbox create --provider lxd --lxd-endpoint "$SBX_TEST_LXD_N1_SOCKET" \
    --lxd-project "$P" --lxd-profile sbx-nic --image "$SBX_TEST_LXD_IMAGE" --lxd-target n1 \
    --network profile
expect_in "$T/err" "network 'profile' connects the sandbox to the networks" "--network profile is warned about"
expect_in "$T/err" 'Failed to start device "eth0"' "and the profile's device is used, not masked"
expect_eq "$(sbx_instances | grep -vc -e "sbx-$s1" -e "sbx-$s2" -e "sbx-$s3" -e "sbx-$s4")" 0 \
    "the failed create left no instance"
lx profile delete sbx-nic --project "$P" >/dev/null 2>&1
in1 ip link del "$dummy" 2>/dev/null

# --- stop and start keep the workspace; a state resumes in a new process ----------------------
run in1 "$SBX" sandbox exec "$s1" -- sh -c 'echo kept > kept.txt'
run in1 "$SBX" sandbox stop "$s1"
expect_rc 0 "stop"
expect_eq "$(inst_of "$s1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["metadata"]["status"])')" \
    Stopped "the instance is stopped"
run in1 "$SBX" sandbox exec "$s1" -- true
[ "$rc" != 0 ] && ok "a stopped sandbox runs nothing" || not_ok "a stopped sandbox runs nothing"
run in1 "$SBX" sandbox ps --all
expect_in "$T/out" "$s1" "ps --all lists it"
run in1 "$SBX" sandbox start "$s1"
expect_rc 0 "start"
run in1 "$SBX" sandbox exec "$s1" -- cat kept.txt
expect_eq "$(cat "$T/out")" "kept" "the workspace survived stop and start"
run in1 "$SBX" sandbox state "$s1"
expect_rc 0 "its state (with a snapshot)"
cp "$T/out" "$T/s1.state"
for secret in client.key "BEGIN.*PRIVATE"; do
    grep -q "$secret" "$T/s1.state" && not_ok "the state holds no key ($secret)" || ok "the state holds no key ($secret)"
done
expect_in "$T/s1.state" "\"endpoint\": \"unix://$SBX_TEST_LXD_N1_SOCKET\"" "it names the endpoint"
expect_in "$T/s1.state" "\"project\": \"$P\"" "and the project"
run in1 "$SBX" sandbox resume "${LXDU[@]}" "$T/s1.state"
expect_rc 0 "a new sbx process resumes it"
run in1 "$SBX" sandbox exec "$s1" -- cat kept.txt
expect_eq "$(cat "$T/out")" "kept" "the same sandbox"
lx delete --force "sbx-$s1" --project "$P" >/dev/null 2>&1
run in1 "$SBX" sandbox resume "${LXDU[@]}" --image "$SBX_TEST_LXD_IMAGE" "$T/s1.state"
expect_rc 0 "with its instance gone, resume rebuilds it from the state's snapshot"
run in1 "$SBX" sandbox exec "$s1" -- cat kept.txt
expect_eq "$(cat "$T/out")" "kept" "with the workspace as it was"

# --- ps, rm and prune by sbx's config ---------------------------------------------------------
run in1 "$SBX" sandbox ps --provider lxd --lxd-endpoint "$SBX_TEST_LXD_N1_SOCKET" --lxd-project "$P"
for id in "$s1" "$s2" "$s3" "$s4"; do expect_in "$T/out" "$id" "ps lists $id"; done
# An instance whose creator died half-way (its config says so) is dead, and prune removes it:
# made in the default project, the one prune finds unconfigured ($LXD_DIR's socket).
dead=00000000000000d0
op=$(curl -s --unix-socket "$SBX_TEST_LXD_N1_SOCKET" -X POST "http://lxd/1.0/instances" \
    -d "{\"name\":\"sbx-$dead\",\"source\":{\"type\":\"image\",\"alias\":\"$SBX_TEST_LXD_IMAGE\"},\"config\":{\"user.sbx.id\":\"$dead\",\"user.sbx.root\":\"/workspace\",\"user.sbx.created\":\"2026-01-01T00:00:00.000Z\",\"user.sbx.status\":\"creating\",\"user.sbx.creator\":\"elsewhere 1\"}}" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["operation"].split("?")[0])')
curl -s --max-time 60 --unix-socket "$SBX_TEST_LXD_N1_SOCKET" "http://lxd$op/wait?timeout=50" >/dev/null
echo "$dead" >>"$T/ids"
made() { curl -s --unix-socket "$SBX_TEST_LXD_N1_SOCKET" "http://lxd/1.0/instances/sbx-$dead" | grep -q '"status":"Stopped"'; }
wait_until made && ok "an instance as a creator that died leaves it" || not_ok "an instance as a creator that died leaves it"
run in1 "$SBX" sandbox ps --all --provider lxd --lxd-endpoint "$SBX_TEST_LXD_N1_SOCKET"
expect_in "$T/out" "$dead" "ps --all shows the half-made sandbox"
run in1 "$SBX" sandbox ps --provider lxd --lxd-endpoint "$SBX_TEST_LXD_N1_SOCKET"
expect_not_in "$T/out" "$dead" "ps does not"
run in1 env LXD_DIR="$SBX_TEST_LXD_N1_LXD_DIR" "$SBX" sandbox prune
expect_rc 0 "prune"
expect_in "$T/out" "removed lxd-instance sbx-$dead of sandbox $dead" "removed the half-made sandbox's instance"
made && not_ok "its instance is gone" || ok "its instance is gone"
for id in "$s1" "$s2" "$s3" "$s4"; do
    run in1 "$SBX" sandbox rm "$id"
    expect_rc 0 "rm $id"
done
expect_eq "$(sbx_instances | tr '\n' ' ')" "" "no sbx instance is left"
run "$SBX" sandbox rm "$l1"

done_testing
