# Shared set-up of the sbx-node tests: compute hosts and a harness, each in a network namespace
# made here, sbx-node daemons started inside the hosts with nsenter --net=, the certificates of
# one private CA. Source it after setting:
#   T     a private scratch directory (removed by the caller)
#   SBX   the sbx program; NODE the sbx-node program
# and call node_cleanup from the caller's EXIT trap (it removes every daemon, every sandbox the
# daemons made, every namespace and veth pair made here, also after a failure).
#
#   node_setup                  the harness namespace ($NS_HARN) and the CA ($T/ca, harness
#                               certificate $T/h1.pem / h1.key); 1 when it cannot (the reason
#                               in $NODE_WHY)
#   node_add NAME               a host namespace joined to the harness by a veth pair, its
#                               address in NODE_ADDR[NAME], its node certificate
#   node_start NAME [OPTS...]   start (or restart) NAME's daemon (with more daemon options); 1 when
#                               it does not listen
#   node_kill NAME [SIGNAL]     signal its daemon (default KILL) and reap it
#   node_flags NAME             set the array R to the CLI's --node flags for NAME
#   node_url NAME               print https://ADDR:PORT
#   node_env NAME CMD...        run CMD with NAME's sandbox stores (the daemon's view)
#   node_h CMD...               run CMD in the harness's namespace
#   node_live NAME              print the ids of NAME's live sandboxes
#   node_link NAME up|down      set the harness's end of NAME's link
declare -A NODE_ADDR NODE_PORT NODE_PID NODE_NS NODE_HIF
NODE_TAG=$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
NODE_NET=$(($(od -An -N1 -tu1 /dev/urandom)))
NS_HARN=sbxh-$NODE_TAG
NODE_N=0
NODE_WHY=

node_cleanup() {
    local n id
    for n in "${!NODE_PID[@]}"; do
        [ -n "${NODE_PID[$n]}" ] && kill "${NODE_PID[$n]}" 2>/dev/null && wait "${NODE_PID[$n]}" 2>/dev/null
    done
    for n in "${!NODE_NS[@]}"; do
        for id in $(node_live "$n"); do node_env "$n" "$SBX" sandbox rm "$id" >/dev/null 2>&1; done
        ip netns del "${NODE_NS[$n]}" 2>/dev/null
    done
    ip netns del "$NS_HARN" 2>/dev/null
}

node_setup() {
    [ "$(id -u)" = 0 ] || { NODE_WHY="network namespaces need root"; return 1; }
    local p
    for p in ip nsenter ss; do command -v "$p" >/dev/null || { NODE_WHY="no '$p' here"; return 1; }; done
    [ -x "$NODE" ] || { NODE_WHY="no sbx-node program at '$NODE'"; return 1; }
    { ip netns add "$NS_HARN" && ip -n "$NS_HARN" link set lo up; } 2>"$T/ip.err" ||
        { NODE_WHY="cannot make a network namespace here: $(head -n1 "$T/ip.err")"; return 1; }
    { "$SBX" node ca init "$T/ca" && (cd "$T" && "$SBX" node cert issue h1 --ca ca --harness); } \
        >/dev/null 2>"$T/certs.err" || { NODE_WHY="cannot make the certificates: $(head -n1 "$T/certs.err")"; return 1; }
}

node_add() {
    local name=$1 i=$NODE_N ns=sbxn-$NODE_TAG-$NODE_N
    NODE_N=$((NODE_N + 1))
    local a=10.217.$NODE_NET.$((4 * i + 1)) b=10.217.$NODE_NET.$((4 * i + 2))
    local nif=sbxnv$NODE_TAG$i hif=sbxhv$NODE_TAG$i
    NODE_NS[$name]=$ns NODE_ADDR[$name]=$a NODE_HIF[$name]=$hif NODE_PID[$name]=
    NODE_PORT[$name]=$((20000 + RANDOM % 40000))
    { ip netns add "$ns" && ip link add "$nif" type veth peer name "$hif" &&
        ip link set "$nif" netns "$ns" && ip link set "$hif" netns "$NS_HARN" &&
        ip -n "$ns" addr add "$a/30" dev "$nif" && ip -n "$NS_HARN" addr add "$b/30" dev "$hif" &&
        ip -n "$ns" link set "$nif" up && ip -n "$NS_HARN" link set "$hif" up &&
        ip -n "$ns" link set lo up; } 2>"$T/ip.err" ||
        { NODE_WHY="cannot make a namespace and a veth pair: $(head -n1 "$T/ip.err")"; return 1; }
    mkdir -p -m 0700 "$T/nodes/$name/run"
    (cd "$T" && "$SBX" node cert issue "$name" --ca ca --node --host "$a") >/dev/null 2>"$T/certs.err" ||
        { NODE_WHY="cannot make the node certificate: $(head -n1 "$T/certs.err")"; return 1; }
}

node_env() {
    local d=$T/nodes/$1
    shift
    env XDG_STATE_HOME="$d/state" XDG_RUNTIME_DIR="$d/run" SBX_WORKSPACES="$d/ws" \
        SBX_STOPPED="$d/stopped" SBX_SNAPSHOTS="$d/snapshots" SBX_RECORDS="$d/records" "$@"
}

node_listening() {
    nsenter --net="/run/netns/${NODE_NS[$1]}" ss -ltn "sport = :${NODE_PORT[$1]}" | grep -q LISTEN
}

node_start() { # NAME [more daemon options]
    local name=$1 i d=$T/nodes/$1
    shift
    # env execs nsenter, which execs the daemon: the PID is the daemon's (through a shell
    # function, such as node_env, a subshell would stand between them).
    env XDG_STATE_HOME="$d/state" XDG_RUNTIME_DIR="$d/run" SBX_WORKSPACES="$d/ws" \
        SBX_STOPPED="$d/stopped" SBX_SNAPSHOTS="$d/snapshots" SBX_RECORDS="$d/records" \
        nsenter --net="/run/netns/${NODE_NS[$name]}" "$NODE" \
        --listen "${NODE_ADDR[$name]}:${NODE_PORT[$name]}" --cert "$T/$name.pem" \
        --key "$T/$name.key" --ca "$T/ca/ca.pem" --state "$T/nodes/$name/records-node" \
        --name "$name" "$@" >>"$T/nodes/$name/node.log" 2>&1 &
    NODE_PID[$name]=$!
    for i in $(seq 200); do
        node_listening "$name" && return 0
        kill -0 "${NODE_PID[$name]}" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

node_kill() {
    local pid=${NODE_PID[$1]}
    [ -n "$pid" ] || return 0
    kill "-${2:-KILL}" "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    NODE_PID[$1]=
}

node_url() { echo "https://${NODE_ADDR[$1]}:${NODE_PORT[$1]}"; }

node_flags() {
    R=(--node "$(node_url "$1")" --node-ca "$T/ca/ca.pem" --node-cert "$T/h1.pem" --node-key "$T/h1.key")
}

node_h() { nsenter --net="/run/netns/$NS_HARN" "$@"; }

node_live() { ls "$T/nodes/$1/run/sbx" 2>/dev/null; }

node_link() { ip -n "$NS_HARN" link set "${NODE_HIF[$1]}" "$2"; }
