#!/usr/bin/env bash
# The supervisor checks the configuration it reads on stdin (providers/local/config.h): a bad one
# is refused with an error naming the field, before anything is bound or started; a good one
# serves. Through the real sbx-supervisor program, as the client runs it.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sandbox-lib.sh"

SUP=${SBX_SUPERVISOR:-$(dirname "$SBX")/sbx-supervisor}
[ -x "$SUP" ] || SUP=
started=
config_cleanup() {
    local p i
    for p in $started; do kill -TERM "$p" 2>/dev/null; done
    for p in $started; do
        for i in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.05; done
    done
    sandbox_cleanup
}
trap config_cleanup EXIT

ID=0123456789abcdef
mkdir -p -m 0700 "$RUNBASE" "$T/wsdir"
n=0

# supervise JSON: feed it to a supervisor with @DIR@ a fresh runtime directory ($DIR), the report
# in $T/report; a pid it reports serving is remembered for the cleanup.
supervise() {
    n=$((n + 1))
    DIR="$RUNBASE/case$n"
    mkdir -m 0700 "$DIR"
    local cfg=${1//@DIR@/$DIR}
    if [ -n "$SUP" ]; then
        printf '%s' "$cfg" | timeout 60 "$SUP" __supervise "$ID" > "$T/report" 2>"$T/sup-err"
    else
        printf '%s' "$cfg" | timeout 60 "$SBX" __supervise "$ID" > "$T/report" 2>"$T/sup-err"
    fi
    local p
    p=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r.get("pid","") if r.get("ok") else "")' "$T/report" 2>/dev/null)
    [ -n "$p" ] && started="$started $p"
}

base='"id":"'$ID'","dir":"@DIR@","workspace":"'$T/wsdir'","root":"'$T/wsdir'"'

# refused JSON FIELD-MESSAGE DESC
refused() {
    supervise "$1"
    if grep -qF '"ok":false' "$T/report" && grep -qF -- "$2" "$T/report" &&
        [ ! -e "$DIR/ctl.sock" ]; then
        ok "$3"
    else
        not_ok "$3"; diag "report: $(head -c 1000 "$T/report")" "wanted: $2"
    fi
}

refused '{'"$base"',"isolation":"none","bogus":1}' \
    "unknown field 'bogus'" "an unknown field is refused"
refused '{"id":"../../etc","dir":"@DIR@","workspace":"'$T/wsdir'","root":"/","isolation":"none"}' \
    "field 'id' must be a sandbox id" "an id that is not 16 hex digits is refused"
refused '{'"$base"',"isolation":"none","ports":['"$(seq -s, 1 65)"']}' \
    "field 'ports' has more than 64 entries" "too many ports are refused"
refused '{'"$base"',"isolation":"none","test_delay_ms":"5"}' \
    "field 'test_delay_ms' must be an integer" "a field of the wrong type is refused"
refused '{'"$base"',"isolation":"none","sandbox":{"net":"full"}}' \
    "field 'sandbox' needs isolation 'namespaces'" "isolation fields without isolation are refused"
refused '{'"$base"',"isolation":"namespaces","sandbox":{"grants":[{"src":"etc"}]}}' \
    "field 'sandbox.grants[0].src' must be an absolute path" "a relative grant is refused"
refused '{'"$base"',"isolation":"namespaces","sandbox":{"limits":{"memory":-1}}}' \
    "field 'sandbox.limits.memory' must be in 1.." "a negative limit is refused"
refused '{'"$base"',"isolation":"namespaces","sandbox":{"net":"allow"}}' \
    "field 'sandbox.allow' needs at least one domain" "network allow without domains is refused"

# The same shape, valid: it serves.
supervise '{'"$base"',"isolation":"none","env":["PATH=/usr/bin:/bin"],"ports":[8080]}'
expect_in "$T/report" '"ok":true' "a valid configuration serves"
[ -S "$DIR/ctl.sock" ] && ok "it bound its control socket" || not_ok "it bound its control socket"

done_testing
